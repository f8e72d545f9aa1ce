//! A minimal cursor over an object's JSON for the noise-control walks.
//!
//! The objects it reads were validated when their watch line or list page was decoded, so it only
//! tokenizes; still, every unexpected byte is an error, never a panic or an endless loop.

use std::borrow::Cow;

/// The bytes are not the JSON they were validated as (cannot happen for decoded objects).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("malformed JSON at byte {0}")]
pub struct Malformed(pub usize);

pub(super) type Result<T> = std::result::Result<T, Malformed>;

pub(super) struct Cursor<'a> {
    pub(crate) b: &'a [u8],
    pub(crate) i: usize,
}

impl<'a> Cursor<'a> {
    pub(super) fn new(b: &'a [u8]) -> Cursor<'a> {
        Cursor { b, i: 0 }
    }

    pub(super) fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    pub(super) fn ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.peek() {
            self.i += 1;
        }
    }

    pub(super) fn eat(&mut self, byte: u8) -> Result<()> {
        self.ws();
        if self.peek() == Some(byte) {
            self.i += 1;
            Ok(())
        } else {
            Err(Malformed(self.i))
        }
    }

    /// The string at the cursor, as its text with escapes decoded (borrowed when it has none).
    pub(super) fn string(&mut self) -> Result<Cow<'a, str>> {
        let start = self.i;
        self.ws();
        if self.peek() != Some(b'"') {
            return Err(Malformed(start));
        }
        let open = self.i;
        self.i += 1;
        let mut escaped = false;
        loop {
            let rest = self.b.get(self.i..).ok_or(Malformed(self.i))?;
            let at = memchr::memchr2(b'"', b'\\', rest).ok_or(Malformed(self.i))?;
            self.i += at + 1;
            if rest[at] == b'"' {
                break;
            }
            escaped = true;
            self.i += 1;
        }
        let token = &self.b[open..self.i];
        if escaped {
            serde_json::from_slice::<String>(token)
                .map(Cow::Owned)
                .map_err(|_| Malformed(open))
        } else {
            std::str::from_utf8(&token[1..token.len() - 1])
                .map(Cow::Borrowed)
                .map_err(|_| Malformed(open))
        }
    }

    /// A number or literal (`true`, `false`, `null`) at the cursor, as its bytes.
    pub(super) fn scalar(&mut self) -> Result<&'a [u8]> {
        self.ws();
        let start = self.i;
        while let Some(b'-' | b'+' | b'.' | b'0'..=b'9' | b'a'..=b'z' | b'E') = self.peek() {
            self.i += 1;
        }
        if self.i == start {
            return Err(Malformed(start));
        }
        Ok(&self.b[start..self.i])
    }

    /// Consumes one value of any kind. Iterative, so nesting costs no stack.
    pub(super) fn skip_value(&mut self) -> Result<()> {
        let mut depth = 0usize;
        loop {
            self.ws();
            match self.peek() {
                Some(b'{' | b'[') => {
                    depth += 1;
                    self.i += 1;
                    continue;
                }
                Some(b'}' | b']') if depth > 0 => {
                    depth -= 1;
                    self.i += 1;
                }
                Some(b'"') => {
                    self.string_fast()?;
                }
                Some(b',' | b':') if depth > 0 => {
                    self.i += 1;
                    continue;
                }
                _ => {
                    self.scalar()?;
                }
            }
            if depth == 0 {
                return Ok(());
            }
        }
    }

    /// Skips a string without decoding it.
    fn string_fast(&mut self) -> Result<()> {
        self.i += 1;
        loop {
            let rest = self.b.get(self.i..).ok_or(Malformed(self.i))?;
            let at = memchr::memchr2(b'"', b'\\', rest).ok_or(Malformed(self.i))?;
            self.i += at + 1;
            if rest[at] == b'"' {
                return Ok(());
            }
            self.i += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skip_value_stops_after_one_value() {
        for (doc, end) in [
            (r#"{"a":[1,{"b":"}\"]"}],"c":null} x"#, 31),
            ("[] x", 2),
            ("-1.5e3 x", 6),
            (r#""a\\" x"#, 5),
            ("true,", 4),
        ] {
            let mut c = Cursor::new(doc.as_bytes());
            c.skip_value().unwrap();
            assert_eq!(c.i, end, "{doc}");
        }
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for doc in ["", "\"open", "\"a\\", "{\"a\":", "[1,", "}", "\u{1}"] {
            let mut c = Cursor::new(doc.as_bytes());
            assert!(c.skip_value().is_err(), "{doc:?}");
        }
    }

    #[test]
    fn strings_decode_escapes() {
        let mut c = Cursor::new(br#" "a\u00e9\"" "b""#);
        assert_eq!(c.string().unwrap(), "a\u{e9}\"");
        assert!(matches!(c.string().unwrap(), Cow::Borrowed("b")));
    }
}
