//! The watch task's outlet: where each event the task judged becomes one message, built once
//! (stripped, fitted to the NATS server's `max_payload`), and goes to the delivery with its
//! route. The delivery fans it out to its sinks (the event outbox, the journal, the mirror)
//! under the rules it owns ([`crate::delivery`]).

use crate::config::PayloadMode;
use crate::delivery::{Delivery, EventRoute, Route};
use crate::event::{EventType, ObjectEvent, ResourceInfo};
use crate::leader::TermClock;
use crate::mirror::Mirror;
use crate::noise::NoiseControl;
use crate::publish::message::{BuildError, Origin, Synthesis};
use crate::publish::{MessageBuilder, OutMessage, Outbox};
use crate::state::Journal;

use super::metrics::WatchMetrics;

/// How much of an object a message carries.
#[derive(Clone, Copy)]
pub(super) enum Fit {
    /// All of it, unless it is over the NATS server's `max_payload`.
    Whole,
    /// Its metadata only: the rest never arrived whole.
    MetadataOnly,
}

/// One event the task judged, with what its message is made from.
pub(super) struct Outgoing {
    pub(super) event: ObjectEvent,
    pub(super) origin: Origin,
    pub(super) fit: Fit,
}

impl Outgoing {
    /// A received event, carried whole or (`Fit::MetadataOnly`) as its metadata.
    pub(super) fn received(event: ObjectEvent, fit: Fit) -> Outgoing {
        Outgoing {
            event,
            origin: Origin::Received,
            fit,
        }
    }

    /// An event derived by kube2nats, `Kube-Synthesized` saying why.
    pub(super) fn synthesized(event: ObjectEvent, why: Synthesis) -> Outgoing {
        Outgoing {
            event,
            origin: Origin::Synthesized(why),
            fit: Fit::Whole,
        }
    }

    /// An event a list showed.
    pub(super) fn listed(event: ObjectEvent) -> Outgoing {
        Outgoing::synthesized(event, Synthesis::Relist)
    }
}

/// What becomes of the message of one judged event.
pub(super) enum Publication {
    /// Published when the watch publishes its event type, once the journal record at `recorded`
    /// is stored; confirmed in the journal once NATS has taken it. An event type the watch
    /// leaves out is counted as filtered and only mirrored.
    Confirmed { recorded: Option<u64> },
    /// Published as `Confirmed` is, never confirmed: the DELETED of an object that left the
    /// watch's filter, which a crash must announce again rather than remember (docs/filters.md).
    Unconfirmed,
    /// Mirrored only: no news for subscribers, but the bucket holds every object the watch sees.
    MirrorOnly,
}

/// The outlet of one watch task.
pub(crate) struct Outlet {
    pub(super) delivery: Delivery<Outbox, Journal, Mirror>,
    messages: MessageBuilder,
    /// The event types published; the rest are counted as filtered.
    events: Vec<EventType>,
    /// What is stripped from what is published.
    noise: NoiseControl,
    /// The replica's term: nothing is published once it is over by the clock
    /// ([`crate::leader::clock`]).
    term: TermClock,
    metrics: WatchMetrics,
    /// The target's namespace (`*`: all), for the log lines.
    namespace: String,
}

/// What an [`Outlet`] is made of.
pub(crate) struct OutletParts {
    pub(crate) outbox: Outbox,
    pub(crate) mirror: Option<Mirror>,
    pub(crate) messages: MessageBuilder,
    pub(crate) events: Vec<EventType>,
    pub(crate) noise: NoiseControl,
    pub(crate) term: TermClock,
}

impl Outlet {
    pub(super) fn new(parts: OutletParts, metrics: WatchMetrics, namespace: String) -> Outlet {
        let OutletParts {
            outbox,
            mirror,
            messages,
            events,
            noise,
            term,
        } = parts;
        Outlet {
            delivery: Delivery::new(outbox, mirror),
            messages,
            events,
            noise,
            term,
            metrics,
            namespace,
        }
    }

    pub(super) fn messages(&self) -> &MessageBuilder {
        &self.messages
    }

    pub(super) fn payload(&self) -> PayloadMode {
        self.messages.payload
    }

    /// The resource moved to another version: the messages (and mirror keys) name it from now on.
    pub(super) fn move_to(&mut self, resource: ResourceInfo) {
        if let Some(mirror) = self.delivery.mirror_mut() {
            mirror.moved_to(&resource.version);
        }
        self.messages = self.messages.with_resource(resource);
    }

    /// Builds the message of `out` once and hands it to the delivery as `publication` says.
    pub(super) async fn hand(&mut self, out: Outgoing, publication: Publication) {
        let event_type = out.event.event_type;
        let left_out =
            !matches!(publication, Publication::MirrorOnly) && !self.events.contains(&event_type);
        if left_out {
            self.metrics.dropped_filtered.inc();
        }
        let event = match publication {
            _ if left_out => None,
            Publication::MirrorOnly => None,
            Publication::Confirmed { recorded } => Some(EventRoute {
                recorded,
                confirm: self.delivery.confirmation(&out.event.meta, event_type),
            }),
            Publication::Unconfirmed => Some(EventRoute {
                recorded: None,
                confirm: None,
            }),
        };
        if event.is_some() && out.origin != Origin::Received {
            self.metrics.synthesized(event_type);
        }
        let mirror = self.delivery.mirror_key(&out.event.meta);
        if event.is_some() || mirror.is_some() {
            let message = self.message(out);
            self.term.hold(&self.metrics.watch).await;
            if let Some(message) = message {
                let route = Route { mirror, event };
                self.delivery.submit(message, route).await;
            }
        }
        if left_out {
            // Its object may have been recorded: a full journal is written now, as a submit
            // would have.
            self.delivery.flush_if_full().await;
        }
    }

    /// The message of one event: stripped as configured, cut to its metadata where it does not
    /// fit; `None` (logged and counted) when it cannot be built.
    fn message(&mut self, out: Outgoing) -> Option<OutMessage> {
        let Outgoing { event, origin, fit } = out;
        let (event, fit) = match self.noise.stripped(&event.object) {
            Ok(None) => (event, fit),
            Ok(Some(object)) => {
                let stripped = ObjectEvent {
                    object,
                    watch_line: None,
                    ..event
                };
                (stripped, fit)
            }
            Err(e) => {
                // Never the unstripped object: a stripped path may hold what must not leave.
                tracing::warn!(watch = %self.metrics.watch, namespace = self.namespace.as_str(), name = ?event.meta.name, error = %e, "could not strip the object; publishing its metadata only");
                (event, Fit::MetadataOnly)
            }
        };
        let message = match fit {
            Fit::Whole => self.fitted_message(&event, origin),
            Fit::MetadataOnly => self.messages.truncated(&event, origin),
        };
        match message {
            Ok(message) => Some(message),
            Err(e) => {
                self.metrics.dropped_subject_too_long.inc();
                tracing::error!(watch = %self.metrics.watch, namespace = self.namespace.as_str(), name = ?event.meta.name, uid = ?event.meta.uid, error = %e, "event not published: its subject is longer than NATS accepts (shorten the subject template or the prefix)");
                None
            }
        }
    }

    /// The message for `event`, cut to its metadata (`Kube-Payload: truncated`) when it is larger
    /// than the NATS server accepts: subscribers still learn that the object changed.
    fn fitted_message(
        &self,
        event: &ObjectEvent,
        origin: Origin,
    ) -> Result<OutMessage, BuildError> {
        let message = self.messages.build(event, origin)?;
        let Some(limit) = self.delivery.sink().max_payload() else {
            return Ok(message);
        };
        let bytes = message.wire_len();
        if bytes <= limit {
            return Ok(message);
        }
        self.metrics.truncated_max_payload.inc();
        tracing::warn!(watch = %self.metrics.watch, namespace = self.namespace.as_str(), name = ?event.meta.name, bytes, max_payload = limit, "object larger than the NATS server's max_payload; publishing its metadata only (Kube-Payload: truncated)");
        self.messages.truncated(event, origin)
    }
}
