//! What loading a target's saved state builds up, bounded by `state.max_load_bytes`, with a
//! progress line while it takes long.
//!
//! The bucket is outside the process: a journal of millions of objects (a runaway, or written by
//! someone else, see docs/durable-state.md) would otherwise make every start allocate it all and
//! be OOM-killed again. The estimate is the encoded bytes read plus
//! [`LOAD_BYTES_PER_OBJECT`] per object (what an object costs in memory beyond its name) and
//! [`LOAD_BYTES_PER_RECORD`] per journal record, checked
//! before a snapshot is read (from what its manifest declares) and after every chunk and
//! journal record, so at most one of those (a NATS message) goes past the limit.

use std::time::Duration;

use tokio::time::Instant;

use crate::state::codec::Manifest;

/// What an object costs in memory once loaded beyond its encoded bytes (its entry and index
/// slot, see [`crate::dedupe`]; its name is about as long as encoded).
const LOAD_BYTES_PER_OBJECT: u64 = 48;
/// What reading one journal record costs beyond its bytes: 100,000 records of one object each
/// raised the peak RSS by ~55 MiB more than 400 records of 256 objects each did (the request
/// and reply of each read; docs/performance.md).
const LOAD_BYTES_PER_RECORD: u64 = 512;

/// How often a long load says how far it got.
const PROGRESS_EVERY: Duration = Duration::from_secs(2);

/// Loading state went past `state.max_load_bytes`.
#[derive(Debug, thiserror::Error)]
#[error("the saved state takes more than state.max_load_bytes ({limit} bytes) to load: {what} come to {estimate} bytes")]
pub(super) struct TooLarge {
    what: String,
    estimate: u64,
    limit: u64,
}

/// Counts what a load has read so far.
pub(super) struct LoadMeter {
    limit: u64,
    bytes: u64,
    objects: u64,
    records: u64,
    started: Instant,
    last_said: Instant,
}

impl LoadMeter {
    pub(super) fn new(limit: usize) -> LoadMeter {
        let now = Instant::now();
        LoadMeter {
            limit: limit as u64,
            bytes: 0,
            objects: 0,
            records: 0,
            started: now,
            last_said: now,
        }
    }

    /// Before its chunks are read: what the manifest says the snapshot holds.
    pub(super) fn admit(&self, manifest: &Manifest) -> Result<(), TooLarge> {
        let estimate = estimate(manifest.bytes, manifest.objects);
        if estimate > self.limit {
            return Err(TooLarge {
                what: format!(
                    "the checkpoint's {} objects ({} bytes encoded)",
                    manifest.objects, manifest.bytes
                ),
                estimate,
                limit: self.limit,
            });
        }
        Ok(())
    }

    /// A chunk of `bytes` was read; `objects` is the count of objects loaded so far.
    pub(super) fn chunk(&mut self, bytes: usize, objects: u64) -> Result<(), TooLarge> {
        self.bytes += bytes as u64;
        self.objects = objects;
        self.check()
    }

    /// A journal record of `bytes` was read; `objects` as for [`chunk`](Self::chunk).
    pub(super) fn record(&mut self, bytes: usize, objects: u64) -> Result<(), TooLarge> {
        self.records += 1;
        self.chunk(bytes, objects)
    }

    fn check(&mut self) -> Result<(), TooLarge> {
        let estimate = estimate(self.bytes, self.objects)
            .saturating_add(self.records.saturating_mul(LOAD_BYTES_PER_RECORD));
        if estimate > self.limit {
            return Err(TooLarge {
                what: format!(
                    "{} objects and {} journal records ({} bytes encoded) read so far",
                    self.objects, self.records, self.bytes
                ),
                estimate,
                limit: self.limit,
            });
        }
        if self.last_said.elapsed() >= PROGRESS_EVERY {
            self.last_said = Instant::now();
            tracing::info!(
                journal_records = self.records,
                objects = self.objects,
                bytes = self.bytes,
                elapsed = ?self.started.elapsed(),
                "loading saved state"
            );
        }
        Ok(())
    }
}

/// The share of `state.max_load_bytes` at which a checkpoint warns that a start will soon
/// refuse the state (`kube2nats_state_load_ratio`, the `Kube2natsStateNearLoadLimit` alert).
pub(crate) const WARN_SHARE: f64 = 0.8;

/// What loading the checkpoint `manifest` would take, as a share of `limit` (its journal
/// records since come on top, and are folded into the next checkpoint).
pub(crate) fn load_share(manifest: &Manifest, limit: usize) -> f64 {
    estimate(manifest.bytes, manifest.objects) as f64 / limit.max(1) as f64
}

fn estimate(bytes: u64, objects: u64) -> u64 {
    bytes.saturating_add(objects.saturating_mul(LOAD_BYTES_PER_OBJECT))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_past_the_limit_and_names_the_key() {
        let mut meter = LoadMeter::new(1_000);
        assert!(meter.chunk(400, 5).is_ok());
        let error = meter.record(400, 10).unwrap_err().to_string();
        assert!(
            error.contains("state.max_load_bytes (1000 bytes)"),
            "{error}"
        );
        assert!(
            error.contains("10 objects and 1 journal records"),
            "{error}"
        );
    }

    #[test]
    fn a_manifest_declaring_too_much_is_refused_before_its_chunks() {
        let meter = LoadMeter::new(1_000_000);
        let manifest: Manifest = serde_json::from_value(serde_json::json!({
            "format": 1, "identity": "", "resume_version": "1", "generation": 1, "slot": "a",
            "chunks": 1, "objects": 4_000_000u64, "bytes": 1_000u64, "checksum": 0,
            "saved_at": 0, "tombstones": 0, "journal_next": 0
        }))
        .unwrap();
        assert!(meter.admit(&manifest).is_err());
        assert!(LoadMeter::new(usize::MAX).admit(&manifest).is_ok());
    }
}
