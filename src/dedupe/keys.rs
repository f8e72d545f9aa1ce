//! How the memory keys objects and holds versions: a uid as 16 bytes where it is a UUID, and a
//! resourceVersion as an integer where it is one, so that the common case costs no allocation.

use crate::event::ResourceVersion;

/// A uid as a map key: 16 bytes for the UUIDs Kubernetes assigns, the string otherwise.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum UidKey {
    Uuid([u8; 16]),
    Other(Box<str>),
}

impl UidKey {
    pub(super) fn new(uid: &str) -> UidKey {
        parse_uuid(uid).map_or_else(|| UidKey::Other(uid.into()), UidKey::Uuid)
    }

    pub(super) fn to_uid_string(&self) -> String {
        match self {
            UidKey::Uuid(b) => format_uuid(b),
            UidKey::Other(s) => s.to_string(),
        }
    }
}

/// A resourceVersion as received: an integer where it is one (every conforming server).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Version {
    Number(u64),
    Opaque(Box<str>),
}

/// The resourceVersion `text` as the integer the memory keeps, where it is one. Only the
/// canonical spelling of an integer round-trips through u64 (no sign, no leading zero); u64::MAX
/// marks an opaque version in storage, so it is kept as text.
pub(super) fn number(text: &str) -> Option<u64> {
    let canonical =
        text.bytes().all(|c| c.is_ascii_digit()) && (text.len() == 1 || !text.starts_with('0'));
    match text.parse() {
        Ok(n) if canonical && n != OPAQUE => Some(n),
        _ => None,
    }
}

impl Version {
    pub(super) fn new(rv: &ResourceVersion) -> Version {
        let text = rv.as_str();
        match number(text) {
            Some(n) => Version::Number(n),
            None => Version::Opaque(text.into()),
        }
    }

    /// Only integers are ordered; opaque versions are never "older".
    pub(super) fn older_than(&self, other: &StoredVersion<'_>) -> bool {
        matches!((self, other), (Version::Number(a), StoredVersion::Number(b)) if a < b)
    }

    pub(super) fn same_as(&self, other: &StoredVersion<'_>) -> bool {
        match (self, other) {
            (Version::Number(a), StoredVersion::Number(b)) => a == b,
            (Version::Opaque(a), StoredVersion::Opaque(b)) => **a == **b,
            _ => false,
        }
    }
}

/// The version a [`Tracked`] holds, read back.
pub(super) enum StoredVersion<'a> {
    Number(u64),
    Opaque(&'a str),
}

impl StoredVersion<'_> {
    pub(super) fn to_resource_version(&self) -> ResourceVersion {
        match self {
            StoredVersion::Number(n) => ResourceVersion::new(n.to_string()),
            StoredVersion::Opaque(s) => ResourceVersion::new(*s),
        }
    }
}

/// `Tracked::version` of an object whose version is not an integer; the text is in
/// `Dedupe::opaque_versions`.
pub(super) const OPAQUE: u64 = u64::MAX;
/// Parses the canonical `8-4-4-4-12` hex form; anything else is not a UUID here. Called twice
/// for most events (the memory's key, the journal's confirmation), so the digits are read
/// through a table, with one test for them all at the end.
pub(super) fn parse_uuid(s: &str) -> Option<[u8; 16]> {
    let b: &[u8; 36] = s.as_bytes().try_into().ok()?;
    if b[8] != b'-' || b[13] != b'-' || b[18] != b'-' || b[23] != b'-' {
        return None;
    }
    // Where each byte's two hex digits start (the dashes checked above sit between).
    const AT: [usize; 16] = [0, 2, 4, 6, 9, 11, 14, 16, 19, 21, 24, 26, 28, 30, 32, 34];
    let mut out = [0u8; 16];
    let mut invalid = 0u8;
    for (byte, at) in out.iter_mut().zip(AT) {
        let (high, low) = (HEX[usize::from(b[at])], HEX[usize::from(b[at + 1])]);
        invalid |= high | low;
        *byte = high << 4 | low;
    }
    (invalid & NOT_HEX == 0).then_some(out)
}

/// [`HEX`]'s entry for a byte that is not a lower-case hex digit.
const NOT_HEX: u8 = 0x80;

/// Each byte's [`hex_value`], or [`NOT_HEX`].
const HEX: [u8; 256] = {
    let mut table = [NOT_HEX; 256];
    let mut c = 0;
    while c < 256 {
        if let Some(v) = hex_value(c as u8) {
            table[c] = v;
        }
        c += 1;
    }
    table
};

/// Lower-case only: an upper-case UUID would not survive the round trip, so it stays a string.
pub(super) const fn hex_value(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

pub(super) fn format_uuid(b: &[u8; 16]) -> String {
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}
