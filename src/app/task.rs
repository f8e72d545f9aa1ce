//! What one watch target's task is built from: the parts a term hands over, and the factory its
//! supervisor builds a fresh task from after a crash.

use std::sync::Arc;

use tokio::sync::watch;

use super::plan::WatchPlan;
use super::shared::Shared;
use crate::backoff::Backoff;
use crate::budget::Budget;
use crate::config::{BackoffConfig, InitialState, NatsMode, PayloadMode};
use crate::event::EventType;
use crate::filter::Filter;
use crate::kube::discovery::Discovery;
use crate::kube::ApiClient;
use crate::leader::TermClock;
use crate::mirror::metrics::MirrorMetrics;
use crate::mirror::{Mirror, MirrorBucket};
use crate::noise::NoiseControl;
use crate::publish::metrics::PublishMetrics;
use crate::publish::{MessageBuilder, MessageSpec, Nats, Outbox, OutboxParts};
use crate::scope::{self, Scope};
use crate::state::StateStore;
use crate::telemetry::target::TargetGauges;
use crate::watcher::machine::{Machine, Target};
use crate::watcher::metrics::WatchMetrics;
use crate::watcher::{ListSlots, OutletParts, WatchParts, WatchTask};

/// What one watch target's task is built from.
pub(super) struct TaskParts<'a> {
    pub(super) shared: Shared<'a>,
    pub(super) plan: &'a WatchPlan,
    /// The matching namespaces of the watch's `namespace_selector`.
    pub(super) selected: Option<watch::Receiver<scope::Selected>>,
    /// The mirror bucket and the watch's mirror metrics, when the watch is mirrored.
    pub(super) mirror: Option<(&'a MirrorBucket, MirrorMetrics)>,
    /// The watch's filter (docs/filters.md).
    pub(super) filter: Option<Filter>,
}

impl TaskParts<'_> {
    pub(super) fn target(&self, namespace: Option<String>) -> Target {
        let (config, watch) = (self.shared.config, &*self.plan.watch);
        Target {
            resource: self.plan.resource.clone(),
            namespace,
            label_selector: watch.label_selector.clone(),
            field_selector: watch.field_selector.clone(),
            page_size: config.kubernetes.list_page_size,
            watch_timeout: config.kubernetes.watch_timeout,
            streaming_list: config.kubernetes.streaming_list,
            max_line_bytes: config.kubernetes.max_line_bytes,
            metadata_only: watch.payload == PayloadMode::Metadata,
            follow: Discovery::followed(&watch.resource, &self.plan.resource),
        }
    }

    /// What starts the task of one target (`namespace: None`: all namespaces): its list+watch
    /// state machine, its outbox and the messages it builds.
    pub(super) fn watch_task(
        &self,
        namespace: Option<String>,
        watch_metrics: WatchMetrics,
        publish_metrics: PublishMetrics,
        gauges: TargetGauges,
    ) -> TaskFactory {
        let (config, watch) = (self.shared.config, &*self.plan.watch);
        let target = Arc::new(self.target(namespace));
        // Cluster-scoped objects have no namespace to choose by (`plan` warned).
        let (exclude, selected) = match self.plan.resource.namespaced {
            true => (
                watch.namespaces_exclude.clone().into(),
                self.selected.clone(),
            ),
            false => (Arc::from([]), None),
        };
        let messages = MessageBuilder::new(MessageSpec {
            watch: watch.name.clone(),
            subject: watch.subject.clone(),
            prefix: watch.subject_prefix.clone(),
            cluster: watch.cluster.clone(),
            resource: self.plan.resource.clone(),
            payload: watch.payload,
            format: watch.format,
        });
        let max_in_flight = match &config.nats.mode {
            NatsMode::Core => 1,
            NatsMode::JetStream(js) => js.max_ack_inflight,
        };
        let mirror = self.mirror.as_ref().map(|(bucket, metrics)| MirrorParts {
            bucket: (*bucket).clone(),
            prefix: crate::mirror::key::watch_prefix(&watch.cluster, &self.plan.resource),
            metrics: metrics.clone(),
        });
        TaskFactory {
            mirror,
            client: self.shared.client.clone(),
            state: self.shared.state.clone(),
            watch_name: watch.name.clone(),
            target,
            backoff: config.kubernetes.backoff,
            nats: self.shared.nats.clone(),
            budget: self.shared.budget.clone(),
            list_slots: self.shared.list_slots.clone(),
            term: self.shared.term.clone(),
            max_in_flight,
            messages,
            events: watch.events.clone(),
            noise: NoiseControl::new(&watch.noise),
            filter: self.filter.clone(),
            initial_state: watch.initial_state,
            watch_metrics,
            publish_metrics,
            gauges,
            exclude,
            selected,
        }
    }
}

/// Everything one target's task is made of, owned, so that its supervisor can build a fresh task
/// after a crash.
pub(super) struct TaskFactory {
    mirror: Option<MirrorParts>,
    client: Arc<ApiClient>,
    /// Each build loads the target's saved state afresh: a restarted task resumes from the last
    /// checkpoint, which only ever holds what was published.
    state: StateStore,
    watch_name: String,
    target: Arc<Target>,
    backoff: BackoffConfig,
    nats: Nats,
    budget: Budget,
    list_slots: ListSlots,
    term: TermClock,
    max_in_flight: usize,
    messages: MessageBuilder,
    events: Vec<EventType>,
    noise: NoiseControl,
    filter: Option<Filter>,
    initial_state: InitialState,
    watch_metrics: WatchMetrics,
    publish_metrics: PublishMetrics,
    gauges: TargetGauges,
    exclude: Arc<[String]>,
    selected: Option<watch::Receiver<scope::Selected>>,
}

impl TaskFactory {
    pub(super) fn build(&self) -> WatchTask {
        let machine = Machine::new(
            self.client.clone(),
            self.target.clone(),
            Backoff::new(self.backoff),
        )
        .with_budget(self.budget.clone())
        .with_list_slots(self.list_slots.clone())
        .with_served(self.watch_metrics.sync.served().cloned());
        let outbox = Outbox::new(
            self.nats.clone(),
            OutboxParts {
                max_in_flight: self.max_in_flight,
                metrics: self.publish_metrics.clone(),
                gauges: self.gauges.clone(),
                budget: self.budget.clone(),
                term: self.term.clone(),
            },
        );
        let mirror = self.mirror.as_ref().map(|m| {
            Mirror::start(
                &m.bucket,
                m.prefix.clone(),
                self.target.namespace.as_deref(),
                &self.watch_name,
                m.metrics.clone(),
            )
        });
        WatchTask::new(WatchParts {
            machine,
            outlet: OutletParts {
                outbox,
                mirror,
                messages: self.messages.clone(),
                events: self.events.clone(),
                noise: self.noise.clone(),
                term: self.term.clone(),
            },
            noise: self.noise.clone(),
            filter: self.filter.clone(),
            initial_state: self.initial_state,
            metrics: self.watch_metrics.clone(),
            saved: self.state.target(&self.watch_name, &self.target),
            gauges: self.gauges.clone(),
            scope: Scope::new(self.exclude.clone(), self.selected.clone()),
        })
    }
}

/// What a mirrored target's writer is made of.
struct MirrorParts {
    bucket: MirrorBucket,
    /// The watch's keys: [`crate::mirror::key::watch_prefix`].
    prefix: String,
    metrics: MirrorMetrics,
}
