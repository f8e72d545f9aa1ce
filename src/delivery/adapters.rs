//! The adapters of a delivery's ports to the real types outside the publishing stage: the
//! state's journal as its [`Log`], the mirror's writer as its [`MirrorSink`]. Each method
//! forwards to the inherent one of the same name (documented there). The outboxes implement
//! [`super::Sink`] themselves (`src/publish/outbox/`).

use std::future::Future;

use tokio::time::Instant;

use super::ports::{Log, MirrorSink};
use crate::dedupe::{SavedUid, SavedVersion};
use crate::event::ObjectMeta;
use crate::mirror::{Mirror, MirrorKey};
use crate::publish::OutMessage;
use crate::state::{Journal, Presence};

impl Log for Journal {
    fn record(&mut self, meta: &ObjectMeta, presence: Presence) -> Option<u64> {
        Journal::record(self, meta, presence)
    }

    fn confirm(&mut self, uid: SavedUid<'_>, version: SavedVersion<'_>, presence: Presence) {
        Journal::confirm(self, uid, version, presence);
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
