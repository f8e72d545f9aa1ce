//! The real sides of a delivery: the outbox as its [`Sink`], the state's journal as its [`Log`].
//! Each method forwards to the inherent one of the same name (documented there).

use std::future::Future;

use tokio::time::Instant;

use super::sides::{Log, Sink};
use crate::budget::Charge;
use crate::dedupe::{SavedUid, SavedVersion};
use crate::event::ObjectMeta;
use crate::publish::{OutMessage, Outbox};
use crate::state::Journal;

impl Sink for Outbox {
    fn published(&self) -> u64 {
        Outbox::published(self)
    }

    fn settled(&self) -> u64 {
        Outbox::settled(self)
    }

    fn charge(&self, bytes: usize) -> Charge {
        Outbox::charge(self, bytes)
    }

    fn publish(&mut self, message: OutMessage, charge: Charge) -> impl Future<Output = ()> {
        Outbox::publish(self, message, charge)
    }

    fn settle_objects(&mut self, keys: &[u64]) -> impl Future<Output = ()> {
        Outbox::settle_objects(self, keys)
    }

    fn unflushed(&self) -> bool {
        Outbox::unflushed(self)
    }

    fn flush_idle(&mut self) -> impl Future<Output = ()> {
        Outbox::flush_idle(self)
    }

    fn settle(&mut self) -> impl Future<Output = bool> {
        Outbox::settle(self)
    }
}

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
