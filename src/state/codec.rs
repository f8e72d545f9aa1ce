//! The stored form of one watch target's memory: a snapshot split into chunks, a manifest that
//! commits one snapshot, and journal records of the objects first published since.
//!
//! A chunk is a small binary record, self-contained so that it can be decoded alone (it carries
//! its own namespace table) and checked against the manifest (it names its generation and
//! index). Per object it holds the uid (16 bytes for a UUID), the version (a varint for an
//! integer), the name and a namespace index: about 45 bytes for a typical pod.
//!
//! ```text
//! chunk    = "K2NS" format:u8 generation:u64le index:u32le entry*
//! journal  = "K2NJ" format:u8 sequence:u64le identity:u64le (entry | confirmed)*
//! entry    = flags:u8 uid version namespace? name mark?   (mark: flags & MARK, 8 bytes)
//!          | flags:u8 uid                       (flags & TOMBSTONE without UNCONFIRMED: a
//!                                                 deleted uid)
//! confirmed= flags:u8 uid version               (flags & CONFIRMED: the object's message at
//!                                                 this version reached NATS; with TOMBSTONE,
//!                                                 its deletion)
//!          | flags:u8 version                   (flags == POSITION [| NUMBER]: every event up
//!                                                 to this resourceVersion reached NATS)
//! uid      = 16 bytes (flags & UUID) | varint length + UTF-8
//! version  = varint (flags & NUMBER) | varint length + UTF-8
//! namespace= varint index (a namespace named before in this chunk)
//!          | varint length + UTF-8 (flags & NEW_NAMESPACE: takes the next index)
//!          | nothing (flags & CLUSTER_SCOPED)
//! name     = varint length + UTF-8
//! mark     = u64le (flags & MARK: what `changes` compares; absent = 0, nothing to compare)
//! ```
//!
//! `flags & UNCONFIRMED` marks an object known only from the journal, whose first message may or
//! may not have been published before a crash; in a chunk, `UNCONFIRMED | TOMBSTONE` marks such
//! an object whose deletion the journal recorded (announced again at the same version after a
//! later crash). In a journal record, where every object is unconfirmed, `UNCONFIRMED` alone
//! marks a deletion. Confirmations (journal records only) name an
//! object by uid and version alone, about 20 bytes: they follow a message, so its object is
//! known already.
//!
//! The manifest is JSON, so an operator can read it with `nats kv get`.

use bytes::Bytes;
use rustc_hash::FxHashMap;

use crate::dedupe::{Saved, SavedObject, SavedUid, SavedVersion};

pub(crate) mod journal;

/// The version of both formats; a manifest of another version is treated as damaged.
pub(crate) const FORMAT: u32 = 1;
const MAGIC: &[u8; 4] = b"K2NS";
const JOURNAL_MAGIC: &[u8; 4] = b"K2NJ";
const HEADER_LEN: usize = MAGIC.len() + 1 + 8 + 4;

const UUID: u8 = 1;
const NUMBER: u8 = 2;
const CLUSTER_SCOPED: u8 = 4;
const NEW_NAMESPACE: u8 = 8;
const UNCONFIRMED: u8 = 16;
const TOMBSTONE: u8 = 32;
const MARK: u8 = 64;
const CONFIRMED: u8 = 128;
/// A confirmed position: no uid, so the flag an object without a namespace carries marks it.
const POSITION: u8 = CONFIRMED | CLUSTER_SCOPED;
const _KNOWN_FLAGS: () = assert!(
    UUID | NUMBER | CLUSTER_SCOPED | NEW_NAMESPACE | UNCONFIRMED | TOMBSTONE | MARK | CONFIRMED
        == u8::MAX
);

/// Which of the two chunk sets a snapshot is written to: the one the committed manifest does not
/// point at, so a crash while writing never damages the committed snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Slot {
    A,
    B,
}

impl Slot {
    pub(crate) fn other(self) -> Slot {
        match self {
            Slot::A => Slot::B,
            Slot::B => Slot::A,
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Slot::A => "a",
            Slot::B => "b",
        }
    }
}

/// The record that commits a snapshot: written only after all of its chunks are stored.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Manifest {
    pub format: u32,
    /// What the target watches; state saved under another identity is not used.
    pub identity: String,
    /// The version to resume the watch from: every event up to it has been published.
    pub resume_version: String,
    pub generation: u64,
    pub slot: Slot,
    pub chunks: u32,
    pub objects: u64,
    pub bytes: u64,
    /// FNV-1a 64 of the chunks, in order.
    pub checksum: u64,
    /// Unix seconds of the write; for operators.
    pub saved_at: u64,
    /// Deleted uids remembered beside the objects (in the chunks, after the objects).
    #[serde(default)]
    pub tombstones: u64,
    /// The first journal record this snapshot does not contain: records from it on are read
    /// at load, on top of the snapshot.
    #[serde(default)]
    pub journal_next: u64,
}

/// A snapshot of one target's memory, encoded.
#[derive(Debug, Clone)]
pub(crate) struct Encoded {
    /// The chunks not taken before (by [`Encoder::take_chunks`]).
    pub(crate) chunks: Vec<Bytes>,
    /// Chunks in the whole snapshot, taken ones included.
    pub(crate) total_chunks: u32,
    pub(crate) objects: u64,
    pub(crate) tombstones: u64,
    pub(crate) bytes: u64,
    pub(crate) checksum: u64,
    pub(crate) generation: u64,
}

/// Why stored state cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CodecError {
    #[error("manifest is not valid: {0}")]
    Manifest(String),
    #[error("manifest has format {found}, this kube2nats reads format {FORMAT}")]
    Format { found: u32 },
    #[error("chunk {index} is missing")]
    MissingChunk { index: u32 },
    #[error("chunk {index} belongs to another snapshot")]
    StaleChunk { index: u32 },
    #[error("journal record {sequence} belongs to another watch or place")]
    StaleJournal { sequence: u64 },
    #[error("chunk {index} is malformed at byte {offset}")]
    Malformed { index: u32, offset: usize },
    #[error("snapshot does not match its manifest ({what})")]
    Mismatch { what: &'static str },
}

/// Encodes objects into chunks of at most `chunk_limit` bytes (an object larger than that gets a
/// chunk of its own). The finished chunks can be taken as they fill, so a large snapshot is
/// written chunk by chunk instead of held whole.
pub(crate) struct Encoder {
    chunk_limit: usize,
    generation: u64,
    chunks: Vec<Bytes>,
    /// The index of the chunk being filled.
    index: u32,
    bytes: u64,
    buf: Vec<u8>,
    namespaces: FxHashMap<Box<str>, u32>,
    entry: Vec<u8>,
    objects: u64,
    tombstones: u64,
    checksum: Fnv,
}

impl Encoder {
    pub(crate) fn new(generation: u64, chunk_limit: usize) -> Encoder {
        let mut encoder = Encoder {
            chunk_limit: chunk_limit.max(HEADER_LEN + 64),
            generation,
            chunks: Vec::new(),
            index: 0,
            bytes: 0,
            buf: Vec::new(),
            namespaces: FxHashMap::default(),
            entry: Vec::with_capacity(128),
            objects: 0,
            tombstones: 0,
            checksum: Fnv::new(),
        };
        encoder.start_chunk();
        encoder
    }

    pub(crate) fn push(&mut self, object: SavedObject<'_>) {
        if self.encode_entry(&object) {
            self.finish_chunk();
            self.start_chunk();
            let fits = self.encode_entry(&object);
            debug_assert!(!fits, "a fresh chunk takes any entry");
        }
        self.buf.extend_from_slice(&self.entry);
        self.objects += 1;
    }

    /// A deleted uid; pushed after every object, oldest first.
    pub(crate) fn push_tombstone(&mut self, uid: SavedUid<'_>) {
        self.entry.clear();
        encode_tombstone(&mut self.entry, uid);
        if self.buf.len() > HEADER_LEN && self.buf.len() + self.entry.len() > self.chunk_limit {
            self.finish_chunk();
            self.start_chunk();
        }
        self.buf.extend_from_slice(&self.entry);
        self.tombstones += 1;
    }

    /// The chunks filled so far, in order, and not taken before.
    pub(crate) fn take_chunks(&mut self) -> Vec<Bytes> {
        std::mem::take(&mut self.chunks)
    }

    pub(crate) fn finish(mut self) -> Encoded {
        self.finish_chunk();
        Encoded {
            chunks: self.chunks,
            total_chunks: self.index,
            objects: self.objects,
            tombstones: self.tombstones,
            bytes: self.bytes,
            checksum: self.checksum.0,
            generation: self.generation,
        }
    }

    fn start_chunk(&mut self) {
        let index = self.index;
        self.buf = Vec::with_capacity(self.chunk_limit.min(1 << 20));
        self.buf.extend_from_slice(MAGIC);
        self.buf.push(FORMAT as u8);
        self.buf.extend_from_slice(&self.generation.to_le_bytes());
        self.buf.extend_from_slice(&index.to_le_bytes());
        self.namespaces.clear();
    }

    fn finish_chunk(&mut self) {
        let chunk = std::mem::take(&mut self.buf);
        self.checksum.write(&chunk);
        self.bytes += chunk.len() as u64;
        self.index = self.index.saturating_add(1);
        self.chunks.push(Bytes::from(chunk));
    }

    /// Encodes one entry into `self.entry`; `true` if the current chunk has no room for it (and
    /// it is not the chunk's first entry), in which case nothing was recorded.
    fn encode_entry(&mut self, object: &SavedObject<'_>) -> bool {
        let known = object
            .namespace
            .and_then(|ns| self.namespaces.get(ns).copied());
        encode_object(&mut self.entry, object, known);
        let full =
            self.buf.len() > HEADER_LEN && self.buf.len() + self.entry.len() > self.chunk_limit;
        if let (false, None, Some(ns)) = (full, known, object.namespace) {
            let index = u32::try_from(self.namespaces.len()).unwrap_or(u32::MAX);
            self.namespaces.insert(ns.into(), index);
        }
        full
    }
}

/// Encodes one object into `entry`, its namespace as an index into the chunk's table when
/// `namespace_index` names one, else inline (the next index of the table).
fn encode_object(entry: &mut Vec<u8>, object: &SavedObject<'_>, namespace_index: Option<u32>) {
    entry.clear();
    entry.push(0);
    let mut flags = match (object.unconfirmed, object.deleted) {
        (true, true) => UNCONFIRMED | TOMBSTONE,
        (true, false) => UNCONFIRMED,
        (false, _) => 0,
    };
    flags |= put_uid(entry, object.uid);
    match object.version {
        SavedVersion::Number(n) => {
            flags |= NUMBER;
            put_varint(entry, n);
        }
        SavedVersion::Text(text) => put_str(entry, text),
    }
    match (object.namespace, namespace_index) {
        (None, _) => flags |= CLUSTER_SCOPED,
        (Some(_), Some(index)) => put_varint(entry, u64::from(index)),
        (Some(ns), None) => {
            flags |= NEW_NAMESPACE;
            put_str(entry, ns);
        }
    }
    put_str(entry, object.name);
    if object.mark != 0 {
        flags |= MARK;
        entry.extend_from_slice(&object.mark.to_le_bytes());
    }
    entry[0] = flags;
}

fn encode_tombstone(entry: &mut Vec<u8>, uid: SavedUid<'_>) {
    entry.push(0);
    let flags = TOMBSTONE | put_uid(entry, uid);
    entry[0] = flags;
}

/// Appends the uid; returns the flag it needs.
fn put_uid(entry: &mut Vec<u8>, uid: SavedUid<'_>) -> u8 {
    match uid {
        SavedUid::Uuid(bytes) => {
            entry.extend_from_slice(&bytes);
            UUID
        }
        SavedUid::Text(text) => {
            put_str(entry, text);
            0
        }
    }
}

/// Checks a chunk's header and calls `f` with each object and tombstone in it.
pub(crate) fn decode_chunk<'a>(
    chunk: &'a [u8],
    generation: u64,
    index: u32,
    f: impl FnMut(Saved<'a>),
) -> Result<(), CodecError> {
    let (mut r, stored_generation) = Reader::open(chunk, index, MAGIC)?;
    let stored_index = u32::from_le_bytes(r.array()?);
    if stored_generation != generation || stored_index != index {
        return Err(CodecError::StaleChunk { index });
    }
    let mut f = f;
    decode_entries(r, |entry| match entry {
        Decoded::Saved(saved) => {
            f(saved);
            true
        }
        // Chunks hold no confirmations.
        Decoded::Journal(_) => false,
    })
}

/// One entry of a journal record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JournalEntry<'a> {
    /// An object recorded before its first message, or (`deleted`) its deletion, went out.
    Recorded {
        object: SavedObject<'a>,
        deleted: bool,
    },
    /// A message of the object reached NATS: at `version`, its deletion when `deleted`.
    Confirmed {
        uid: SavedUid<'a>,
        version: SavedVersion<'a>,
        deleted: bool,
    },
    /// Every event up to this resourceVersion reached NATS: where the watch resumes.
    Position(SavedVersion<'a>),
}

/// One entry as decoded, before the caller says whether it belongs where it was found.
enum Decoded<'a> {
    Saved(Saved<'a>),
    Journal(JournalEntry<'a>),
}

/// Decodes entries until the end; `f` returns `false` for an entry that does not belong there.
fn decode_entries<'a>(
    mut r: Reader<'a>,
    mut f: impl FnMut(Decoded<'a>) -> bool,
) -> Result<(), CodecError> {
    let mut namespaces: Vec<&str> = Vec::new();
    while !r.done() {
        let at = r.malformed();
        // Every bit of the flags has a meaning (`_KNOWN_FLAGS`): no byte is unknown, but a
        // combination that does not belong where it is found is refused below.
        let flags = r.byte()?;
        let version = |r: &mut Reader<'a>| -> Result<SavedVersion<'a>, CodecError> {
            Ok(if flags & NUMBER != 0 {
                SavedVersion::Number(r.varint()?)
            } else {
                SavedVersion::Text(r.str()?)
            })
        };
        if flags & !NUMBER == POSITION {
            if !f(Decoded::Journal(JournalEntry::Position(version(&mut r)?))) {
                return Err(at);
            }
            continue;
        }
        let uid = if flags & UUID != 0 {
            SavedUid::Uuid(r.array()?)
        } else {
            SavedUid::Text(r.str()?)
        };
        if flags & CONFIRMED != 0 {
            let confirmed = JournalEntry::Confirmed {
                uid,
                version: version(&mut r)?,
                deleted: flags & TOMBSTONE != 0,
            };
            if !f(Decoded::Journal(confirmed)) {
                return Err(at);
            }
            continue;
        }
        if flags & (TOMBSTONE | UNCONFIRMED) == TOMBSTONE {
            if !f(Decoded::Saved(Saved::Tombstone(uid))) {
                return Err(at);
            }
            continue;
        }
        let version = version(&mut r)?;
        let namespace = if flags & CLUSTER_SCOPED != 0 {
            None
        } else if flags & NEW_NAMESPACE != 0 {
            let ns = r.str()?;
            namespaces.push(ns);
            Some(ns)
        } else {
            let i = usize::try_from(r.varint()?).map_err(|_| r.malformed())?;
            Some(*namespaces.get(i).ok_or_else(|| r.malformed())?)
        };
        let name = r.str()?;
        let mark = if flags & MARK != 0 {
            u64::from_le_bytes(r.array()?)
        } else {
            0
        };
        let object = SavedObject {
            uid,
            version,
            name,
            namespace,
            unconfirmed: flags & UNCONFIRMED != 0,
            deleted: flags & TOMBSTONE != 0,
            mark,
        };
        if !f(Decoded::Saved(Saved::Object(object))) {
            return Err(at);
        }
    }
    Ok(())
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
    index: u32,
}

impl<'a> Reader<'a> {
    /// A reader of `bytes` (chunk `index`, for errors) past its header: `magic`, the [`FORMAT`]
    /// and the header's first number, returned (a chunk's generation, a record's sequence).
    fn open(bytes: &'a [u8], index: u32, magic: &[u8; 4]) -> Result<(Reader<'a>, u64), CodecError> {
        let mut r = Reader {
            bytes,
            pos: 0,
            index,
        };
        if r.take(magic.len())? != magic || r.byte()? != FORMAT as u8 {
            return Err(r.malformed());
        }
        let first = u64::from_le_bytes(r.array()?);
        Ok((r, first))
    }

    fn malformed(&self) -> CodecError {
        CodecError::Malformed {
            index: self.index,
            offset: self.pos,
        }
    }

    fn done(&self) -> bool {
        self.pos >= self.bytes.len()
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], CodecError> {
        let end = self.pos.checked_add(n).ok_or_else(|| self.malformed())?;
        let bytes = self
            .bytes
            .get(self.pos..end)
            .ok_or_else(|| self.malformed())?;
        self.pos = end;
        Ok(bytes)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], CodecError> {
        let bytes = self.take(N)?;
        bytes.try_into().map_err(|_| self.malformed())
    }

    fn byte(&mut self) -> Result<u8, CodecError> {
        Ok(self.take(1)?[0])
    }

    fn varint(&mut self) -> Result<u64, CodecError> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            value |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(self.malformed())
    }

    fn str(&mut self) -> Result<&'a str, CodecError> {
        let len = usize::try_from(self.varint()?).map_err(|_| self.malformed())?;
        let at = self.pos;
        let bytes = self.take(len)?;
        std::str::from_utf8(bytes).map_err(|_| CodecError::Malformed {
            index: self.index,
            offset: at,
        })
    }
}

fn put_varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8 & 0x7f) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_varint(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

/// FNV-1a, 64 bits: stable across platforms and versions (unlike the std and Fx hashers), which
/// a checksum stored on disk needs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fnv(pub u64);

impl Fnv {
    pub(crate) fn new() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }

    pub(crate) fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

impl Default for Fnv {
    fn default() -> Self {
        Fnv::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn objects() -> Vec<(
        SavedUid<'static>,
        SavedVersion<'static>,
        String,
        Option<String>,
    )> {
        let mut out = Vec::new();
        for i in 0..500u64 {
            let mut uuid = [0u8; 16];
            uuid[..8].copy_from_slice(&i.to_le_bytes());
            let ns = match i % 4 {
                0 => None,
                n => Some(format!("ns-{n}")),
            };
            out.push((
                SavedUid::Uuid(uuid),
                SavedVersion::Number(1000 + i * 131),
                format!("pod-{i}"),
                ns,
            ));
        }
        out.push((
            SavedUid::Text("not-a-uuid"),
            SavedVersion::Text("opaque-7"),
            "odd".into(),
            Some("ns-1".into()),
        ));
        out
    }

    /// Objects with a mark (a fingerprint, a generation) and without.
    fn mark_of(i: usize) -> u64 {
        [0, 3, 0x9e37_79b9_7f4a_7c15][i % 3]
    }

    /// The `i`th of [`objects`] as saved: some unconfirmed, some deleted, some with a mark.
    fn saved_at<'a>(
        i: usize,
        (uid, version, name, ns): &'a (SavedUid<'a>, SavedVersion<'a>, String, Option<String>),
    ) -> SavedObject<'a> {
        SavedObject {
            uid: *uid,
            version: *version,
            name,
            namespace: ns.as_deref(),
            unconfirmed: name.ends_with('7'),
            deleted: name.ends_with("17"),
            mark: mark_of(i),
        }
    }

    fn round_trip(chunk_limit: usize) -> (Encoded, usize) {
        let objects = objects();
        let mut encoder = Encoder::new(7, chunk_limit);
        for (i, object) in objects.iter().enumerate() {
            encoder.push(saved_at(i, object));
        }
        let encoded = encoder.finish();
        let mut decoded = Vec::new();
        for (i, chunk) in encoded.chunks.iter().enumerate() {
            decode_chunk(chunk, 7, i as u32, |o| decoded.push(format!("{o:?}"))).unwrap();
        }
        let objects: Vec<String> = objects
            .iter()
            .enumerate()
            .map(|(i, object)| format!("{:?}", Saved::Object(saved_at(i, object))))
            .collect();
        assert_eq!(decoded, objects);
        (encoded, objects.len())
    }

    #[test]
    fn objects_round_trip_in_one_chunk_and_in_many() {
        let (one, n) = round_trip(1 << 20);
        assert_eq!(one.chunks.len(), 1);
        assert_eq!(one.objects, n as u64);
        let (many, _) = round_trip(512);
        assert!(many.chunks.len() > 10, "{}", many.chunks.len());
        assert!(many.chunks.iter().all(|c| c.len() <= 512));
        assert_ne!(one.checksum, many.checksum);
    }

    #[test]
    fn a_chunk_of_another_snapshot_or_position_is_refused() {
        let (encoded, _) = round_trip(512);
        assert_eq!(
            decode_chunk(&encoded.chunks[1], 8, 1, |_| {}),
            Err(CodecError::StaleChunk { index: 1 })
        );
        assert_eq!(
            decode_chunk(&encoded.chunks[1], 7, 2, |_| {}),
            Err(CodecError::StaleChunk { index: 2 })
        );
    }

    #[test]
    fn damaged_chunks_are_errors_never_panics() {
        let (encoded, _) = round_trip(4096);
        let chunk = &encoded.chunks[0];
        for cut in 0..chunk.len() {
            let _ = decode_chunk(&chunk[..cut], 7, 0, |_| {});
        }
        for i in HEADER_LEN..chunk.len().min(HEADER_LEN + 300) {
            let mut bad = chunk.to_vec();
            bad[i] ^= 0xff;
            let _ = decode_chunk(&bad, 7, 0, |_| {});
        }
        assert!(matches!(
            decode_chunk(b"garbage", 7, 0, |_| {}),
            Err(CodecError::Malformed { .. })
        ));
    }

    #[test]
    fn tombstones_follow_the_objects_and_round_trip() {
        let mut encoder = Encoder::new(3, 64);
        encoder.push(SavedObject {
            uid: SavedUid::Text("live"),
            version: SavedVersion::Number(5),
            name: "a",
            namespace: None,
            unconfirmed: false,
            deleted: false,
            mark: 0,
        });
        let gone: Vec<[u8; 16]> = (0..20u8).map(|i| [i; 16]).collect();
        for uid in &gone {
            encoder.push_tombstone(SavedUid::Uuid(*uid));
        }
        encoder.push_tombstone(SavedUid::Text("odd-uid"));
        let encoded = encoder.finish();
        assert_eq!((encoded.objects, encoded.tombstones), (1, 21));
        assert!(encoded.chunks.len() > 1, "tombstones split across chunks");
        let mut tombstones = Vec::new();
        for (i, chunk) in encoded.chunks.iter().enumerate() {
            decode_chunk(chunk, 3, i as u32, |s| {
                if let Saved::Tombstone(uid) = s {
                    tombstones.push(format!("{uid:?}"));
                }
            })
            .unwrap();
        }
        let mut expected: Vec<String> = gone
            .iter()
            .map(|u| format!("{:?}", SavedUid::Uuid(*u)))
            .collect();
        expected.push(format!("{:?}", SavedUid::Text("odd-uid")));
        assert_eq!(tombstones, expected);
    }

    #[test]
    fn a_typical_pod_costs_under_50_bytes() {
        let names: Vec<String> = (0..1000).map(|i| format!("web-7d9f8c6b5-{i:05}")).collect();
        let per_object = |mark: u64| {
            let mut encoder = Encoder::new(1, 1 << 20);
            for name in &names {
                encoder.push(SavedObject {
                    uid: SavedUid::Uuid([7u8; 16]),
                    version: SavedVersion::Number(123_456_789),
                    name,
                    namespace: Some("default"),
                    unconfirmed: false,
                    deleted: false,
                    mark,
                });
            }
            let encoded = encoder.finish();
            encoded.bytes / encoded.objects
        };
        let plain = per_object(0);
        assert!(plain < 50, "{plain} bytes per object");
        // A watch with `changes = "content"` stores an 8-byte fingerprint more.
        assert_eq!(per_object(u64::MAX), plain + 8);
    }
}
