//! The real sides of a delivery: the outboxes as its [`Sink`] (the watch task's [`Outbox`], and
//! each of the two it is one of), the state's journal as its [`Log`], the mirror's writer as its
//! [`MirrorSink`].
//! Each method forwards to the inherent one of the same name (documented there).

use std::future::Future;

use tokio::time::Instant;

use super::sides::{Log, MirrorSink, Sink};
use crate::budget::Charge;
use crate::dedupe::{SavedUid, SavedVersion};
use crate::event::ObjectMeta;
use crate::mirror::{Mirror, MirrorKey};
use crate::publish::outbox::{CoreLink, CoreOutbox, JetStreamLink, JetStreamOutbox};
use crate::publish::{OutMessage, Outbox};
use crate::state::Journal;

/// Implements [`Sink`] for an outbox by its inherent methods of the same names.
macro_rules! sink_by_inherent_methods {
    ($outbox:ty $(, $link:ident: $bound:path)?) => {
        impl$(<$link: $bound>)? Sink for $outbox {
            fn published(&self) -> u64 {
                <$outbox>::published(self)
            }

            fn settled(&self) -> u64 {
                <$outbox>::settled(self)
            }

            fn charge(&self, bytes: usize) -> Charge {
                <$outbox>::charge(self, bytes)
            }

            fn publish(&mut self, message: OutMessage, charge: Charge) -> impl Future<Output = ()> {
                <$outbox>::publish(self, message, charge)
            }

            fn settle_objects(&mut self, keys: &[u64]) -> impl Future<Output = ()> {
                <$outbox>::settle_objects(self, keys)
            }

            fn unflushed(&self) -> bool {
                <$outbox>::unflushed(self)
            }

            fn flush_idle(&mut self) -> impl Future<Output = ()> {
                <$outbox>::flush_idle(self)
            }

            fn settle(&mut self) -> impl Future<Output = bool> {
                <$outbox>::settle(self)
            }
        }
    };
}

sink_by_inherent_methods!(Outbox);
sink_by_inherent_methods!(CoreOutbox<C>, C: CoreLink);
sink_by_inherent_methods!(JetStreamOutbox<J>, J: JetStreamLink);

impl Log for Journal {
    fn record(&mut self, meta: &ObjectMeta, deleted: bool) -> Option<u64> {
        Journal::record(self, meta, deleted)
    }

    fn confirm(&mut self, uid: SavedUid<'_>, version: SavedVersion<'_>, deleted: bool) {
        Journal::confirm(self, uid, version, deleted);
    }

    fn confirm_position(&mut self, position: &str) {
        Journal::confirm_position(self, position);
    }

    fn pending(&self) -> usize {
        Journal::pending(self)
    }

    fn can_begin_write(&self) -> bool {
        Journal::can_begin_write(self)
    }

    fn confirmations_due(&self) -> Option<Instant> {
        Journal::confirmations_due(self)
    }

    fn is_writing(&self) -> bool {
        Journal::is_writing(self)
    }

    fn stored_below(&self) -> u64 {
        Journal::stored_below(self)
    }

    fn begin_write(&mut self) {
        Journal::begin_write(self);
    }

    fn written(&mut self) -> impl Future<Output = ()> {
        Journal::written(self)
    }
}

impl MirrorSink for Mirror {
    fn key(&self, meta: &ObjectMeta) -> MirrorKey {
        Mirror::key(self, meta)
    }

    fn write(
        &mut self,
        key: MirrorKey,
        message: &OutMessage,
        object: bytes::Bytes,
    ) -> impl Future<Output = ()> {
        Mirror::write(self, key, message, object)
    }
}
