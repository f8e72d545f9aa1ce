//! Journal records: objects recorded before their first message, and confirmations of the
//! messages NATS has taken (the format is in [`super`]).

use bytes::Bytes;

use super::{
    decode_entries, encode_object, put_str, put_uid, put_varint, CodecError, Decoded, JournalEntry,
    Reader, CONFIRMED, FORMAT, HEADER_LEN, JOURNAL_MAGIC, NUMBER, POSITION, TOMBSTONE,
};
use crate::dedupe::{Saved, SavedObject, SavedUid, SavedVersion};

/// One journal record: the objects first published (or deleted) in one batch, written before
/// their messages, and the confirmations of messages that reached NATS since the last record.
/// Each entry carries its namespace inline, so entries are appended as they come.
#[derive(Debug, Default)]
pub struct JournalBatch {
    entries: Vec<u8>,
    entry: Vec<u8>,
    len: usize,
    confirmed: Vec<u8>,
    confirmations: usize,
    position: Vec<u8>,
}

impl JournalBatch {
    /// An object about to be published for the first time, or (`deleted`) its deletion.
    pub fn push(&mut self, object: &SavedObject<'_>, deleted: bool) {
        let object = SavedObject {
            unconfirmed: deleted,
            deleted: false,
            ..*object
        };
        encode_object(&mut self.entry, &object, None);
        self.entries.extend_from_slice(&self.entry);
        self.len += 1;
    }

    /// The message of the object `uid` at `version` (its deletion, when `deleted`) reached NATS.
    pub(crate) fn confirm(&mut self, uid: SavedUid<'_>, version: SavedVersion<'_>, deleted: bool) {
        let at = self.confirmed.len();
        self.confirmed.push(0);
        let mut flags = CONFIRMED | put_uid(&mut self.confirmed, uid);
        flags |= put_version(&mut self.confirmed, version);
        if deleted {
            flags |= TOMBSTONE;
        }
        self.confirmed[at] = flags;
        self.confirmations += 1;
    }

    /// Every event up to the resourceVersion `version` reached NATS; replaces an earlier one.
    pub(crate) fn confirm_position(&mut self, version: &str) {
        self.position.clear();
        self.position.push(0);
        let flags = POSITION | put_version(&mut self.position, SavedVersion::of_text(version));
        self.position[0] = flags;
    }

    /// Objects recorded (confirmations not counted).
    pub(crate) fn recorded(&self) -> usize {
        self.len
    }

    /// Confirmations waiting, the position counted as one.
    pub(crate) fn confirmations(&self) -> usize {
        self.confirmations + usize::from(!self.position.is_empty())
    }

    /// Nothing recorded and nothing confirmed.
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0 && self.confirmations() == 0
    }

    /// The record, for journal position `sequence` of the watch target whose identity hashes to
    /// `identity`. The batch stays as it is until [`clear`](Self::clear).
    pub fn record(&self, sequence: u64, identity: u64) -> Bytes {
        let body = self.entries.len() + self.confirmed.len() + self.position.len();
        let mut out = Vec::with_capacity(HEADER_LEN + 4 + body);
        out.extend_from_slice(JOURNAL_MAGIC);
        out.push(FORMAT as u8);
        out.extend_from_slice(&sequence.to_le_bytes());
        out.extend_from_slice(&identity.to_le_bytes());
        out.extend_from_slice(&self.position);
        out.extend_from_slice(&self.entries);
        out.extend_from_slice(&self.confirmed);
        Bytes::from(out)
    }

    pub(crate) fn clear(&mut self) {
        self.entries.clear();
        self.len = 0;
        self.confirmed.clear();
        self.confirmations = 0;
        self.position.clear();
    }
}

/// Appends a version; returns the flag it needs.
fn put_version(entry: &mut Vec<u8>, version: SavedVersion<'_>) -> u8 {
    match version {
        SavedVersion::Number(n) => {
            put_varint(entry, n);
            NUMBER
        }
        SavedVersion::Text(text) => {
            put_str(entry, text);
            0
        }
    }
}

/// Checks a journal record's header and calls `f` with each entry in it.
pub fn decode_journal<'a>(
    record: &'a [u8],
    sequence: u64,
    identity: u64,
    mut f: impl FnMut(JournalEntry<'a>),
) -> Result<(), CodecError> {
    let (mut r, stored_sequence) = Reader::open(record, 0, JOURNAL_MAGIC)?;
    let stored_identity = u64::from_le_bytes(r.array()?);
    if stored_sequence != sequence || stored_identity != identity {
        return Err(CodecError::StaleJournal { sequence });
    }
    decode_entries(r, |entry| {
        match entry {
            // In a journal record the flag chunks use for "unconfirmed" marks a deletion.
            Decoded::Saved(Saved::Object(object)) => f(JournalEntry::Recorded {
                object: SavedObject {
                    unconfirmed: false,
                    deleted: false,
                    ..object
                },
                deleted: object.unconfirmed,
            }),
            Decoded::Journal(entry) => f(entry),
            // Journal records hold no tombstones.
            Decoded::Saved(Saved::Tombstone(_)) => return false,
        }
        true
    })
}

#[cfg(test)]
mod tests {
    use super::super::{decode_chunk, Encoder};
    use super::*;

    #[test]
    fn journal_records_round_trip_and_name_their_place() {
        let mut batch = JournalBatch::default();
        for (i, ns) in [Some("a"), None, Some("a"), Some("b")]
            .into_iter()
            .enumerate()
        {
            let name = format!("n{i}");
            let object = SavedObject {
                uid: SavedUid::Uuid([i as u8; 16]),
                version: SavedVersion::Number(100 + i as u64),
                name: &name,
                namespace: ns,
                unconfirmed: false,
                deleted: false,
                mark: 0,
            };
            batch.push(&object, i == 3);
        }
        assert_eq!(batch.recorded(), 4);
        let record = batch.record(9, 42);
        let mut seen = Vec::new();
        decode_journal(&record, 9, 42, |s| {
            if let JournalEntry::Recorded { object: o, deleted } = s {
                assert!(!o.unconfirmed);
                seen.push((o.name.to_owned(), o.namespace.map(str::to_owned), deleted));
            }
        })
        .unwrap();
        assert_eq!(
            seen,
            vec![
                ("n0".into(), Some("a".into()), false),
                ("n1".into(), None, false),
                ("n2".into(), Some("a".into()), false),
                ("n3".into(), Some("b".into()), true)
            ]
        );
        assert_eq!(
            decode_journal(&record, 10, 42, |_| {}),
            Err(CodecError::StaleJournal { sequence: 10 })
        );
        assert_eq!(
            decode_journal(&record, 9, 43, |_| {}),
            Err(CodecError::StaleJournal { sequence: 9 })
        );
        for cut in 0..record.len() {
            let _ = decode_journal(&record[..cut], 9, 42, |_| {});
        }
        batch.clear();
        assert!(batch.is_empty());
    }

    #[test]
    fn confirmations_round_trip_compactly_and_only_in_the_journal() {
        let mut batch = JournalBatch::default();
        batch.confirm(
            SavedUid::Uuid([3; 16]),
            SavedVersion::Number(123_456_789),
            false,
        );
        batch.confirm(SavedUid::Text("not-a-uuid"), SavedVersion::Text("x1"), true);
        batch.confirm_position("123456000");
        batch.confirm_position("123456790");
        assert_eq!((batch.recorded(), batch.confirmations()), (0, 3));
        let record = batch.record(1, 7);
        let mut seen = Vec::new();
        decode_journal(&record, 1, 7, |e| seen.push(e)).unwrap();
        assert_eq!(
            seen,
            vec![
                JournalEntry::Position(SavedVersion::Number(123_456_790)),
                JournalEntry::Confirmed {
                    uid: SavedUid::Uuid([3; 16]),
                    version: SavedVersion::Number(123_456_789),
                    deleted: false
                },
                JournalEntry::Confirmed {
                    uid: SavedUid::Text("not-a-uuid"),
                    version: SavedVersion::Text("x1"),
                    deleted: true
                },
            ]
        );
        // A typical pod's confirmation: flags, 16-byte uid, a 4-byte varint version.
        let mut one = JournalBatch::default();
        one.confirm(
            SavedUid::Uuid([3; 16]),
            SavedVersion::Number(123_456_789),
            false,
        );
        assert_eq!(one.record(0, 0).len() - HEADER_LEN - 4, 21);
        // A confirmation in a chunk is damage, not state.
        let mut chunk = Encoder::new(1, 1 << 20).finish().chunks.remove(0).to_vec();
        chunk.extend_from_slice(&record[HEADER_LEN + 4..]);
        assert!(matches!(
            decode_chunk(&chunk, 1, 0, |_| {}),
            Err(CodecError::Malformed { .. })
        ));
        for cut in 0..record.len() {
            let _ = decode_journal(&record[..cut], 1, 7, |_| {});
        }
        batch.clear();
        assert!(batch.is_empty());
    }
}
