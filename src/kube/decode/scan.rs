//! A single-pass JSON scanner for watch lines and object heads.
//!
//! Decoding a watch line with serde_json takes two full passes: one to find the raw `object`
//! (validating the whole line), and a second over the object to read `kind` and `metadata`
//! (validating it again). This scanner makes one pass: it validates every byte by the same grammar serde_json applies
//! (strings, escapes, numbers, literals, nesting, no trailing commas or characters) and, on the
//! way, reads the handful of fields kube2nats needs. Strings are skipped sixteen bytes at a time
//! (two vector compares find the first quote, backslash, control or non-ASCII byte; `wide` gives
//! SSE2 on x86_64 and NEON on aarch64 without `unsafe` in this crate), and from a backslash on
//! sixty-four at a time by their quote and backslash masks ([`escapes`]); inside the object, which
//! is forwarded as text, they are also checked to be UTF-8 (outside strings the grammar admits
//! only ASCII, so that checks the whole object in the same pass).
//!
//! Why not a two-stage, simdjson-style scan (bitmasks of every 64-byte block first, then a walk
//! over the structural positions)? Measured on a pod line it costs more than this one pass
//! (27,731 against 15,898 instructions): with SSE2, the x86_64 baseline, classifying the bytes
//! into masks alone costs 2.4–2.7 instructions per byte, most of what this pass spends on the
//! values it does not read, and a Kubernetes object has a token every six bytes, each still
//! checked one by one (docs/performance.md, "Decode scan").
//!
//! It accepts and rejects what serde_json's derived structs do, with one deliberate exception:
//! those also accept a JSON *array* in place of an object (`["ADDED",{…}]`), which no API server
//! sends; here that is malformed. The tests in `super` check the two agree on
//! thousands of mutated lines.
//!
//! Errors are of two kinds. A *syntax* error (the bytes are not JSON) fails the whole scan. A
//! *field* error (valid JSON, but e.g. a duplicated `metadata` key or a `uid` that is a number)
//! inside the object is kept in [`Head`]'s result, because it matters only for event types whose
//! metadata is read: an event of another type is handled without it, so the error does not fail it.

use std::borrow::Cow;
use std::ops::Range;

use serde::de::Error as _;
use wide::{i8x16, u8x16};

pub(super) type Error = serde_json::Error;
type Result<T> = std::result::Result<T, Error>;

/// The parts of a watch line `{"type":…,"object":…}`.
pub(super) struct LineParts<'a> {
    pub(crate) event_type: &'a str,
    /// Where the object's JSON is in the line; `None` when absent or `null`.
    pub(crate) object: Option<Range<usize>>,
    /// The object's `kind` and metadata, or why they could not be read.
    pub(crate) head: Result<Head<'a>>,
}

/// The top of an object: whether it has `kind` and its metadata fields.
pub(super) struct Head<'a> {
    pub(crate) has_kind: bool,
    pub(crate) metadata: Option<Meta<'a>>,
}

/// `metadata` fields; `None` when absent or `null`. Borrowed unless they hold escapes.
#[derive(Default)]
pub(super) struct Meta<'a> {
    pub(crate) uid: Option<Cow<'a, str>>,
    pub(crate) resource_version: Option<Cow<'a, str>>,
    pub(crate) name: Option<Cow<'a, str>>,
    pub(crate) namespace: Option<Cow<'a, str>>,
    /// The last `generation` member, where it is an integer in `i64` range; any other value is
    /// no error (it only decides whether a change is news under `changes = "generation"`).
    pub(crate) generation: Option<i64>,
}

/// Scans a whole watch line.
pub(super) fn watch_line(line: &[u8]) -> Result<LineParts<'_>> {
    let mut s = Scanner::new(line);
    let mut event_type = None;
    let mut object = None;
    // Built only when missing: a serde error allocates.
    let mut head = None;
    let mut seen_object = false;
    s.ws();
    s.members(|s, key| {
        match &*s.key_text(&key, &["type", "object"])? {
            "type" => {
                if event_type.is_some() {
                    return Err(s.error("duplicate field `type`"));
                }
                event_type = Some(s.borrowed_str("type")?);
            }
            "object" => {
                if seen_object {
                    return Err(s.error("duplicate field `object`"));
                }
                seen_object = true;
                if s.peek() == Some(b'n') {
                    s.i = s.literal(s.i, b"null")?;
                } else {
                    // The object is forwarded as text: it must be UTF-8 throughout. Outside its
                    // strings the grammar admits ASCII only, so checking them checks it all.
                    let start = s.i;
                    s.utf8 = true;
                    head = Some(s.head()?);
                    s.utf8 = false;
                    object = Some(start..s.i);
                }
            }
            _ => s.skip_value()?,
        }
        Ok(())
    })?;
    s.end()?;
    let event_type = event_type.ok_or_else(|| Error::custom("missing field `type`"))?;
    Ok(LineParts {
        event_type,
        object,
        head: head.unwrap_or_else(|| Err(Error::custom("missing field `object`"))),
    })
}

/// Scans one object (a list item, say) for its head; any error is fatal here.
pub(super) fn object_head(object: &[u8]) -> Result<Head<'_>> {
    let mut s = Scanner::new(object);
    s.ws();
    let head = s.head()?;
    s.end()?;
    head
}

/// What the start of a watch line shows, cut anywhere: each field read before the cut.
#[derive(Default)]
pub(super) struct PrefixParts<'a> {
    pub(crate) event_type: Option<&'a str>,
    pub(crate) meta: Meta<'a>,
    /// The object's `metadata` ended before the cut: a field missing from it is absent.
    pub(crate) metadata_complete: bool,
}

/// Reads the event type and the object's metadata fields from the start of a watch line; stops
/// at the cut (or at anything that is not JSON) with what it has.
pub(super) fn watch_line_prefix(prefix: &[u8]) -> PrefixParts<'_> {
    let mut parts = PrefixParts::default();
    let mut s = Scanner::new(prefix);
    s.ws();
    // The cut always ends the scan with an error; what was read before it is the answer.
    let _cut = s.members(|s, key| match &*key.text()? {
        "type" => {
            parts.event_type = Some(s.borrowed_str("type")?);
            Ok(())
        }
        "object" => s.members(|s, key| match &*key.text()? {
            "metadata" => {
                s.members(|s, key| {
                    let slot = match &*key.text()? {
                        "uid" => &mut parts.meta.uid,
                        "resourceVersion" => &mut parts.meta.resource_version,
                        "name" => &mut parts.meta.name,
                        "namespace" => &mut parts.meta.namespace,
                        _ => return s.skip_value(),
                    };
                    if s.peek() != Some(b'"') {
                        return Err(s.error("metadata field is not a string"));
                    }
                    *slot = Some(s.string()?.text()?);
                    Ok(())
                })?;
                parts.metadata_complete = true;
                Ok(())
            }
            _ => s.skip_value(),
        }),
        _ => s.skip_value(),
    });
    parts
}

/// A cursor over the bytes of one JSON document.
struct Scanner<'a> {
    b: &'a [u8],
    i: usize,
    /// Whether the strings scanned must be UTF-8 (else, as serde_json does for values it skips,
    /// only their escapes and control characters are checked).
    utf8: bool,
}

/// A scanned string: its bytes between the quotes, and whether it holds escapes.
struct RawStr<'a> {
    /// With the quotes, for serde_json to decode when it holds escapes.
    token: &'a [u8],
    escaped: bool,
}

impl<'a> RawStr<'a> {
    /// The bytes between the quotes.
    fn body(&self) -> &'a [u8] {
        &self.token[1..self.token.len() - 1]
    }

    /// The string's value, as serde_json would give it (escapes decoded, UTF-8 checked).
    fn text(&self) -> Result<Cow<'a, str>> {
        if self.escaped {
            serde_json::from_slice::<String>(self.token).map(Cow::Owned)
        } else {
            std::str::from_utf8(self.body())
                .map(Cow::Borrowed)
                .map_err(|e| Error::custom(format!("invalid UTF-8 in a string: {e}")))
        }
    }
}

/// The containers a skipped value has open, innermost first, as a bit stack in one word: bit 0
/// says whether the innermost is an object, bit 1 the one around it, and so on, up to a marker
/// bit above the last. One word keeps the walk's state in registers; 63 levels fit in it, and
/// deeper ones (legal, never seen in Kubernetes objects) move to a vector, a word at a time.
struct Open {
    bits: u64,
    spilled: Vec<u64>,
}

impl Open {
    const EMPTY: u64 = 1;

    fn new() -> Self {
        Open {
            bits: Self::EMPTY,
            spilled: Vec::new(),
        }
    }

    #[inline(always)]
    fn is_empty(&self) -> bool {
        self.bits == Self::EMPTY
    }

    /// The innermost open container is an object.
    #[inline(always)]
    fn in_object(&self) -> bool {
        self.bits & 1 != 0
    }

    #[inline(always)]
    fn push(&mut self, is_object: bool) {
        if self.bits >> 63 != 0 {
            self.bits = spill(&mut self.spilled, self.bits);
        }
        self.bits = (self.bits << 1) | u64::from(is_object);
    }

    #[inline(always)]
    fn pop(&mut self) {
        self.bits >>= 1;
        if self.bits == Self::EMPTY {
            self.bits = unspill(&mut self.spilled);
        }
    }
}

/// Moves a full word of [`Open`] to the vector; the bits to go on with. Out of line, and apart
/// from `Open::bits`, so that those stay in a register.
#[cold]
#[inline(never)]
fn spill(spilled: &mut Vec<u64>, bits: u64) -> u64 {
    spilled.push(bits);
    Open::EMPTY
}

/// The word [`spill`] moved last, or an empty one.
#[cold]
#[inline(never)]
fn unspill(spilled: &mut Vec<u64>) -> u64 {
    spilled.pop().unwrap_or(Open::EMPTY)
}

#[cold]
#[inline(never)]
fn error_at(i: usize, what: &str) -> Error {
    Error::custom(format!("{what} at byte {i}"))
}

/// Where `want` is: at `i`, or after whitespace from `i`; an error if it is not. The common
/// case costs one load and one compare.
#[inline(always)]
fn expect(b: &[u8], i: usize, want: u8, what: &str) -> Result<usize> {
    if byte_at(b, i) == want {
        return Ok(i);
    }
    let i = skip_ws(b, i);
    if byte_at(b, i) == want {
        Ok(i)
    } else {
        Err(error_at(i, what))
    }
}

/// The byte at `i`, or 0 past the end: 0 is a control character, wrong wherever a byte of JSON
/// structure is read, so the end of the line needs no test of its own.
#[inline(always)]
fn byte_at(b: &[u8], i: usize) -> u8 {
    b.get(i).copied().unwrap_or(0)
}

/// `i`, or past the whitespace at `i`. One compare when there is none (whitespace is at most
/// `' '`; what else is, a control character, is left for the caller to reject).
#[inline(always)]
fn after_ws(b: &[u8], i: usize) -> usize {
    if byte_at(b, i) <= b' ' {
        skip_ws(b, i)
    } else {
        i
    }
}

/// Past the whitespace at `i`. Out of line: API servers write none.
#[cold]
#[inline(never)]
fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while let b' ' | b'\n' | b'\t' | b'\r' = byte_at(b, i) {
        i += 1;
    }
    i
}

/// Past the digits at `i`.
#[inline(always)]
fn digits(b: &[u8], mut i: usize) -> usize {
    while byte_at(b, i).is_ascii_digit() {
        i += 1;
    }
    i
}

impl<'a> Scanner<'a> {
    fn new(b: &'a [u8]) -> Self {
        Scanner {
            b,
            i: 0,
            utf8: false,
        }
    }

    #[cold]
    #[inline(never)]
    fn error(&self, what: &str) -> Error {
        error_at(self.i, what)
    }

    #[inline(always)]
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    #[inline(always)]
    fn ws(&mut self) {
        self.i = after_ws(self.b, self.i);
    }

    #[inline(always)]
    fn eat(&mut self, byte: u8, what: &str) -> Result<()> {
        if self.peek() == Some(byte) {
            self.i += 1;
            Ok(())
        } else {
            Err(self.error(what))
        }
    }

    /// Only whitespace may follow the document.
    fn end(&mut self) -> Result<()> {
        self.ws();
        if self.i == self.b.len() {
            Ok(())
        } else {
            Err(self.error("trailing characters"))
        }
    }

    /// Reads the members of the object at the cursor; `member` is called with each key and the
    /// cursor on its value, which it must consume.
    fn members(
        &mut self,
        mut member: impl FnMut(&mut Self, RawStr<'a>) -> Result<()>,
    ) -> Result<()> {
        self.eat(b'{', "expected a JSON object")?;
        self.ws();
        if self.peek() == Some(b'}') {
            self.i += 1;
            return Ok(());
        }
        loop {
            self.ws();
            if self.peek() != Some(b'"') {
                return Err(self.error("key must be a string"));
            }
            let key = self.string()?;
            self.ws();
            self.eat(b':', "expected `:`")?;
            self.ws();
            member(self, key)?;
            self.ws();
            match self.peek() {
                Some(b',') => self.i += 1,
                Some(b'}') => {
                    self.i += 1;
                    return Ok(());
                }
                _ => return Err(self.error("expected `,` or `}`")),
            }
        }
    }

    /// A key's text, for matching against the field names `known`. An unescaped key is compared
    /// as bytes first: one of `known` is UTF-8 without a check. Inside the object the scan has
    /// checked every string to be UTF-8 already: there any other unescaped key comes back empty
    /// (its member is skipped).
    fn key_text(&self, key: &RawStr<'a>, known: &[&'static str]) -> Result<Cow<'a, str>> {
        if !key.escaped {
            let body = key.body();
            // Equal to a field name, the key is UTF-8: no need to check it.
            if let Some(name) = known.iter().find(|k| k.as_bytes() == body) {
                return Ok(Cow::Borrowed(name));
            }
            if self.utf8 {
                return Ok(Cow::Borrowed(""));
            }
        }
        key.text()
    }

    /// A string value without escapes, as serde borrows it (`"type"` must be one).
    fn borrowed_str(&mut self, field: &str) -> Result<&'a str> {
        if self.peek() != Some(b'"') {
            self.skip_value()?;
            return Err(self.error(&format!("`{field}` is not a string")));
        }
        let raw = self.string()?;
        if raw.escaped {
            return Err(self.error(&format!("`{field}` holds an escape sequence")));
        }
        match raw.text()? {
            Cow::Borrowed(s) => Ok(s),
            Cow::Owned(_) => Err(self.error(&format!("`{field}` holds an escape sequence"))),
        }
    }

    /// Reads an object's `kind` and `metadata` and skips the rest, validating all of it. The
    /// outer result fails on a syntax error; the inner one on valid JSON of the wrong shape.
    fn head(&mut self) -> Result<Result<Head<'a>>> {
        if self.peek() != Some(b'{') {
            self.skip_value()?;
            return Ok(Err(self.error("the object is not a JSON object")));
        }
        let mut field_error = None;
        let mut kind: Option<Option<()>> = None;
        let mut metadata: Option<Option<Meta<'a>>> = None;
        self.members(|s, key| {
            let key = match s.key_text(&key, &["kind", "metadata"]) {
                Ok(key) => key,
                Err(e) => {
                    field_error.get_or_insert(e);
                    return s.skip_value();
                }
            };
            match &*key {
                "kind" => {
                    let value = s.optional(|s| s.borrowed_str("kind").map(|_| ()));
                    if kind.is_some() {
                        field_error.get_or_insert(s.error("duplicate field `kind`"));
                    }
                    match value? {
                        Ok(v) => kind = Some(v),
                        Err(e) => {
                            field_error.get_or_insert(e);
                        }
                    }
                }
                "metadata" => {
                    let value = s.optional(Scanner::meta);
                    if metadata.is_some() {
                        field_error.get_or_insert(s.error("duplicate field `metadata`"));
                    }
                    match value? {
                        Ok(v) => metadata = Some(v),
                        Err(e) => {
                            field_error.get_or_insert(e);
                        }
                    }
                }
                _ => s.skip_value()?,
            }
            Ok(())
        })?;
        Ok(match field_error {
            Some(e) => Err(e),
            None => Ok(Head {
                has_kind: matches!(kind, Some(Some(()))),
                metadata: metadata.flatten(),
            }),
        })
    }

    /// `null` as `None`, else `read`. A syntax error from `read` is returned as the outer error
    /// (the scan must stop); anything else as the inner one (after the value has been consumed).
    fn optional<T>(
        &mut self,
        read: impl FnOnce(&mut Self) -> Result<T>,
    ) -> Result<Result<Option<T>>> {
        if self.peek() == Some(b'n') {
            self.i = self.literal(self.i, b"null")?;
            return Ok(Ok(None));
        }
        let start = self.i;
        match read(self) {
            Ok(v) => Ok(Ok(Some(v))),
            Err(e) => {
                // Tell a wrong shape from broken JSON: rescan the value as JSON only.
                self.i = start;
                self.skip_value()?;
                Ok(Err(e))
            }
        }
    }

    /// The fields of `metadata`; any error (syntax or shape) is returned, and
    /// [`optional`](Self::optional) sorts them out.
    fn meta(&mut self) -> Result<Meta<'a>> {
        if self.peek() != Some(b'{') {
            return Err(self.error("`metadata` is not an object"));
        }
        let mut meta = Meta::default();
        let mut field_error = None;
        // Which of the four fields have appeared (`null` included), to reject duplicates.
        let mut seen = [false; 4];
        self.members(|s, key| {
            let key = match s.key_text(
                &key,
                &["uid", "resourceVersion", "name", "namespace", "generation"],
            ) {
                Ok(key) => key,
                Err(e) => {
                    field_error.get_or_insert(e);
                    return s.skip_value();
                }
            };
            let (slot, index) = match &*key {
                "uid" => (&mut meta.uid, 0),
                "resourceVersion" => (&mut meta.resource_version, 1),
                "name" => (&mut meta.name, 2),
                "namespace" => (&mut meta.namespace, 3),
                "generation" => {
                    meta.generation = s.integer()?;
                    return Ok(());
                }
                _ => return s.skip_value(),
            };
            let value = s.optional(|s| {
                if s.peek() != Some(b'"') {
                    return Err(s.error(&format!("`metadata.{key}` is not a string")));
                }
                s.string()?.text()
            })?;
            if std::mem::replace(&mut seen[index], true) {
                field_error.get_or_insert(s.error(&format!("duplicate field `{key}`")));
            }
            match value {
                Ok(v) => *slot = v,
                Err(e) => {
                    field_error.get_or_insert(e);
                }
            }
            Ok(())
        })?;
        match field_error {
            Some(e) => Err(e),
            None => Ok(meta),
        }
    }

    /// Consumes one value: an integer in `i64` range comes back as such, any other value as
    /// `None`; only a syntax error is an error.
    fn integer(&mut self) -> Result<Option<i64>> {
        if !matches!(self.peek(), Some(b'-' | b'0'..=b'9')) {
            self.skip_value()?;
            return Ok(None);
        }
        let start = self.i;
        self.i = self.number(self.i)?;
        let token = std::str::from_utf8(&self.b[start..self.i]).unwrap_or("");
        // serde_json reads `-0` as a float.
        Ok(token.parse().ok().filter(|_| token != "-0"))
    }

    /// Consumes one JSON value of any kind, validating it. Iterative, so nesting depth costs
    /// no stack.
    ///
    /// Most of an object (a pod's `spec` and `status`) passes through here unread, so this is the
    /// scan's inner loop, kept to the states validation needs: the cursor in a local, one
    /// dispatch on the byte where a value or what follows one must start, and the open containers
    /// as a count and a bit stack ([`Open`]). Whitespace is tested for only where the expected
    /// byte is not found: API servers write none, but JSON allows it.
    #[inline(always)]
    fn skip_value(&mut self) -> Result<()> {
        // Strings (`apiVersion`, most of `metadata`) without entering the walk.
        self.i = if self.peek() == Some(b'"') {
            self.string_end(self.i)?.0
        } else {
            self.skip(self.i)?
        };
        Ok(())
    }

    /// [`skip_value`](Self::skip_value) from `i`; where the value ends. Taking `&self` keeps the
    /// line and its length in registers across the calls out of the loop.
    fn skip(&self, mut i: usize) -> Result<usize> {
        let b = self.b;
        let mut open = Open::new();
        'value: loop {
            let c = byte_at(b, i);
            // Strings first: most values are.
            if c == b'"' {
                i = self.string_end(i)?.0;
            } else {
                match c {
                    b'{' => {
                        i += 1;
                        let mut c = byte_at(b, i);
                        if c == b'"' {
                            open.push(true);
                            i = self.key_rest(i)?;
                            continue;
                        }
                        i = skip_ws(b, i);
                        c = byte_at(b, i);
                        if c == b'}' {
                            i += 1;
                        } else {
                            open.push(true);
                            i = self.key_colon(i)?;
                            continue;
                        }
                    }
                    b'[' => {
                        i = after_ws(b, i + 1);
                        if byte_at(b, i) == b']' {
                            i += 1;
                        } else {
                            open.push(false);
                            continue;
                        }
                    }
                    b'-' | b'0'..=b'9' => i = self.number(i)?,
                    b't' => i = self.literal(i, b"true")?,
                    b'f' => i = self.literal(i, b"false")?,
                    b'n' => i = self.literal(i, b"null")?,
                    b' ' | b'\n' | b'\t' | b'\r' => {
                        i = skip_ws(b, i);
                        continue;
                    }
                    _ => return Err(error_at(i, "expected a value")),
                }
            }
            // A value is complete: close the containers it completes.
            loop {
                if open.is_empty() {
                    return Ok(i);
                }
                match byte_at(b, i) {
                    b',' => {
                        i += 1;
                        if open.in_object() {
                            i = self.key_colon(i)?;
                        }
                        continue 'value;
                    }
                    b'}' if open.in_object() => {
                        i += 1;
                        open.pop();
                    }
                    b']' if !open.in_object() => {
                        i += 1;
                        open.pop();
                    }
                    b' ' | b'\n' | b'\t' | b'\r' => i = skip_ws(b, i),
                    _ => return Err(error_at(i, "expected `,` or the end of a container")),
                }
            }
        }
    }

    /// A key and its colon from `i`, inside a skipped object; where its value may start.
    /// Inlined: called for every key skipped (over a hundred per pod), its call frame cost as
    /// much as scanning a short key.
    #[inline(always)]
    fn key_colon(&self, i: usize) -> Result<usize> {
        self.key_rest(expect(self.b, i, b'"', "key must be a string")?)
    }

    /// [`key_colon`](Self::key_colon) from the key's opening quote at `i`.
    #[inline(always)]
    fn key_rest(&self, i: usize) -> Result<usize> {
        let i = self.string_end(i)?.0;
        Ok(expect(self.b, i, b':', "expected `:`")? + 1)
    }

    /// The literal `lit` at `i`; where it ends.
    fn literal(&self, i: usize, lit: &[u8]) -> Result<usize> {
        if self.b[i..].starts_with(lit) {
            Ok(i + lit.len())
        } else {
            Err(error_at(i, "invalid literal"))
        }
    }

    /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?` at `i`; where it ends.
    fn number(&self, mut i: usize) -> Result<usize> {
        let b = self.b;
        if byte_at(b, i) == b'-' {
            i += 1;
        }
        match byte_at(b, i) {
            b'0' => {
                i += 1;
                if byte_at(b, i).is_ascii_digit() {
                    return Err(error_at(i, "invalid number"));
                }
            }
            b'1'..=b'9' => i = digits(b, i),
            _ => return Err(error_at(i, "invalid number")),
        }
        if byte_at(b, i) == b'.' {
            i += 1;
            if !byte_at(b, i).is_ascii_digit() {
                return Err(error_at(i, "invalid number"));
            }
            i = digits(b, i);
        }
        if let b'e' | b'E' = byte_at(b, i) {
            i += 1;
            if let b'+' | b'-' = byte_at(b, i) {
                i += 1;
            }
            if !byte_at(b, i).is_ascii_digit() {
                return Err(error_at(i, "invalid number"));
            }
            i = digits(b, i);
        }
        Ok(i)
    }

    /// A string whose opening quote is at the cursor. Escapes are checked (`\uXXXX` for four hex
    /// digits); raw control characters are rejected, as JSON requires.
    #[inline(always)]
    fn string(&mut self) -> Result<RawStr<'a>> {
        let start = self.i;
        let escaped = self.skip_string()?;
        Ok(RawStr {
            token: &self.b[start..self.i],
            escaped,
        })
    }

    /// Moves the cursor past the string whose opening quote is at it; says whether the string
    /// holds escapes.
    #[inline(always)]
    fn skip_string(&mut self) -> Result<bool> {
        let (end, escaped) = self.string_end(self.i)?;
        self.i = end;
        Ok(escaped)
    }

    /// Where the string whose opening quote is at `i` ends (past its closing quote), and whether
    /// it holds escapes. The common string (short, plain ASCII) costs one 16-byte test.
    #[inline(always)]
    fn string_end(&self, mut i: usize) -> Result<(usize, bool)> {
        i += 1;
        let mut escaped = false;
        loop {
            // Sixteen bytes at a time while sixteen remain. The line's last few are searched out
            // of line: handled here, that path cost the loop its registers (a fifth more
            // instructions per pod line).
            match self.b.get(i..).and_then(<[u8]>::first_chunk::<16>) {
                Some(chunk) => {
                    let hits = special_bytes(chunk);
                    if hits == 0 {
                        i += 16;
                        continue;
                    }
                    // `hits` has 16 bits: `& 15` only tells the compiler `at` is in the chunk.
                    let at = hits.trailing_zeros() as usize & 15;
                    if chunk[at] == b'"' {
                        return Ok((i + at + 1, escaped));
                    }
                    i += at;
                }
                None => i = self.special_in_tail(i),
            }
            match self.b.get(i) {
                Some(b'"') => return Ok((i + 1, escaped)),
                Some(_) => {
                    let (next, escape) = self.special(i)?;
                    escaped |= escape;
                    i = next;
                }
                None => return Err(error_at(i, "end of line inside a string")),
            }
        }
    }

    /// The first [`is_special`] byte from `i`, in the last sixteen bytes of the line (or where
    /// the line ends).
    #[cold]
    #[inline(never)]
    fn special_in_tail(&self, i: usize) -> usize {
        let tail = self.b.get(i..).unwrap_or_default();
        i + tail
            .iter()
            .position(|&c| is_special(c))
            .unwrap_or(tail.len())
    }

    /// Consumes the byte at `i` [`is_special`] flagged inside a string, other than its closing
    /// quote: an escape (`true`; from a backslash, as far as [`escapes::escaped_run`] gets), a
    /// UTF-8 encoded character, or an error. Where it ends.
    #[inline(never)]
    fn special(&self, mut i: usize) -> Result<(usize, bool)> {
        match byte_at(self.b, i) {
            b'\\' => {
                let stop = escapes::escaped_run(self.b, i, self.utf8);
                if stop > i {
                    return Ok((stop, true));
                }
                i += 1;
                match byte_at(self.b, i) {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => i += 1,
                    b'u' => {
                        let hex = self.b.get(i + 1..i + 5);
                        if !hex.is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit)) {
                            return Err(error_at(i, "invalid \\u escape"));
                        }
                        i += 5;
                    }
                    _ => return Err(error_at(i, "invalid escape")),
                }
                Ok((i, true))
            }
            0x80.. if !self.utf8 => Ok((i + 1, false)),
            0x80.. => match utf8_char_len(&self.b[i..]) {
                Some(len) => Ok((i + len, false)),
                None => Err(error_at(i, "invalid UTF-8 in a string")),
            },
            _ => Err(error_at(i, "control character in a string")),
        }
    }
}

/// Whether a byte ends the plain run of a string: `"`, `\`, a control character (< 0x20) or a
/// non-ASCII byte.
fn is_special(c: u8) -> bool {
    c == b'"' || c == b'\\' || !(0x20..0x80).contains(&c)
}

/// The bytes of `chunk` that [`is_special`] flags, as a bit mask (bit k for byte k): sixteen
/// compared at once (SSE2 on x86_64, NEON on aarch64, through `wide`'s safe vectors).
#[inline(always)]
fn special_bytes(chunk: &[u8; 16]) -> u32 {
    let v = u8x16::new(*chunk);
    let backslash = v.simd_eq(u8x16::splat(b'\\'));
    // Flipping bit 1 moves `"` (0x22) to 0x20, the one byte that lands there, and keeps the
    // controls below 0x20 and the non-ASCII bytes negative (as signed bytes): one compare,
    // "below 0x21", finds all three.
    let quote_control_or_high = (v ^ u8x16::splat(0x02))
        .cast_signed()
        .simd_lt(i8x16::splat(0x21))
        .cast_unsigned();
    (quote_control_or_high | backslash).to_bitmask()
}

/// The length of the UTF-8 encoded character `bytes` start with (a non-ASCII lead byte), or
/// `None` if they do not start with one: no overlong forms, surrogates or values past U+10FFFF
/// (the ranges of the Unicode standard's table 3-7, which `str::from_utf8` applies too).
fn utf8_char_len(bytes: &[u8]) -> Option<usize> {
    let cont = |i: usize, range: std::ops::RangeInclusive<u8>| {
        bytes.get(i).is_some_and(|b| range.contains(b))
    };
    let len = match bytes.first()? {
        0xc2..=0xdf => 2,
        0xe0 => 3 * usize::from(cont(1, 0xa0..=0xbf)),
        0xe1..=0xec | 0xee..=0xef => 3 * usize::from(cont(1, 0x80..=0xbf)),
        0xed => 3 * usize::from(cont(1, 0x80..=0x9f)),
        0xf0 => 4 * usize::from(cont(1, 0x90..=0xbf)),
        0xf1..=0xf3 => 4 * usize::from(cont(1, 0x80..=0xbf)),
        0xf4 => 4 * usize::from(cont(1, 0x80..=0x8f)),
        _ => 0,
    };
    // The lead byte and the second were checked above (the second only for 3 and 4).
    let rest_ok = (if len == 2 { 1 } else { 2 }..len).all(|i| cont(i, 0x80..=0xbf));
    (len > 0 && rest_ok).then_some(len)
}

mod escapes;
#[cfg(test)]
mod tests;
