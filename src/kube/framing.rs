//! Newline-delimited JSON framing of a watch response body.
//!
//! The API server sends one JSON document per line over chunked transfer encoding, but chunk
//! boundaries fall anywhere: a chunk may hold many lines, or a line may span many chunks. The
//! [`LineDecoder`] buffers what has arrived and hands out whole lines without copying them.

use bytes::{Bytes, BytesMut};

/// Why the byte stream could not be cut into lines.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// A line grew past the configured limit; protects memory against a server (or proxy) that
    /// never sends a newline.
    #[error("watch line longer than {max_line_bytes} bytes")]
    LineTooLong { max_line_bytes: usize },
    /// The body ended in the middle of a line.
    #[error("watch stream ended inside a line ({leftover_bytes} bytes after the last newline)")]
    Truncated { leftover_bytes: usize },
}

/// Cuts a byte stream into lines.
///
/// Feed it chunks with [`push_bytes`](Self::push_bytes) (or [`push`](Self::push)) and take lines
/// with [`next_line`](Self::next_line) until it answers `Ok(None)` ("incomplete: push more").
///
/// Lines are handed out without copying: a line that lies within one received chunk is a slice of
/// that chunk. Only a line that spans chunks is copied, once, into a buffer of its own. Each byte is
/// searched for the newline once (with `memchr`), however the chunks fall.
#[derive(Debug)]
pub struct LineDecoder {
    /// The start of a line whose newline has not arrived yet; never holds a newline.
    partial: BytesMut,
    /// Received bytes after `partial`, not yet cut into lines.
    chunk: Bytes,
    max_line_bytes: usize,
}

impl LineDecoder {
    pub fn new(max_line_bytes: usize) -> Self {
        LineDecoder {
            partial: BytesMut::new(),
            chunk: Bytes::new(),
            max_line_bytes,
        }
    }

    /// Appends a received chunk (copied; see [`push_bytes`](Self::push_bytes)).
    pub fn push(&mut self, chunk: &[u8]) {
        self.push_bytes(Bytes::copy_from_slice(chunk));
    }

    /// Appends a received chunk; lines within it will be slices of it.
    pub fn push_bytes(&mut self, chunk: Bytes) {
        if self.chunk.is_empty() {
            self.chunk = chunk;
        } else {
            // Pushed again before the lines were taken: join the two (not the streaming case).
            let mut joined = BytesMut::with_capacity(self.chunk.len() + chunk.len());
            joined.extend_from_slice(&self.chunk);
            joined.extend_from_slice(&chunk);
            self.chunk = joined.freeze();
        }
    }

    /// The next complete line, without its `\n` (and without a `\r` before it). Empty lines are
    /// skipped: they carry no event.
    pub fn next_line(&mut self) -> Result<Option<Bytes>, FrameError> {
        loop {
            let Some(newline) = memchr::memchr(b'\n', &self.chunk) else {
                // No newline yet: keep the bytes as the start of a line.
                self.partial.extend_from_slice(&self.chunk);
                self.chunk = Bytes::new();
                return if self.partial.len() > self.max_line_bytes {
                    Err(self.too_long())
                } else {
                    Ok(None)
                };
            };
            if self.partial.len() + newline > self.max_line_bytes {
                return Err(self.too_long());
            }
            let mut line = if self.partial.is_empty() {
                self.chunk.split_to(newline + 1)
            } else {
                self.partial.extend_from_slice(&self.chunk[..=newline]);
                bytes::Buf::advance(&mut self.chunk, newline + 1);
                self.partial.split().freeze()
            };
            line.truncate(trim_line_end(&line));
            if !line.is_empty() {
                return Ok(Some(line));
            }
        }
    }

    fn too_long(&self) -> FrameError {
        FrameError::LineTooLong {
            max_line_bytes: self.max_line_bytes,
        }
    }

    /// Called when the body has ended: an empty buffer is a clean end, anything else a truncated line.
    /// A last line that is complete JSON but lacks its newline is still a truncation here; the
    /// caller decides whether to try it (see [`LineDecoder::take_unterminated`]).
    pub fn finish(&self) -> Result<(), FrameError> {
        let leftover_bytes = self
            .partial
            .iter()
            .chain(self.chunk.iter())
            .filter(|b| !b.is_ascii_whitespace())
            .count();
        if leftover_bytes == 0 {
            Ok(())
        } else {
            Err(FrameError::Truncated { leftover_bytes })
        }
    }

    /// Takes whatever follows the last newline. At the end of a body this is a final line that
    /// arrived without its newline; the caller may still decode it.
    pub fn take_unterminated(&mut self) -> Option<Bytes> {
        self.partial.extend_from_slice(&self.chunk);
        self.chunk = Bytes::new();
        let rest = self.partial.split().freeze();
        let len = trim_line_end(&rest);
        (rest[..len].iter().any(|b| !b.is_ascii_whitespace())).then(|| rest.slice(..len))
    }
}

/// Length of `line` without a trailing `\n` and `\r`.
fn trim_line_end(line: &[u8]) -> usize {
    let mut len = line.len();
    while len > 0 && matches!(line[len - 1], b'\n' | b'\r') {
        len -= 1;
    }
    len
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIXTURE: &[u8] = b"{\"a\":1}\n{\"b\":22}\n\n{\"c\":333}\r\n";

    fn lines_of(chunks: &[&[u8]], max: usize) -> (Vec<Bytes>, Result<(), FrameError>) {
        let mut d = LineDecoder::new(max);
        let mut out = Vec::new();
        for chunk in chunks {
            d.push(chunk);
            while let Some(line) = d.next_line().unwrap() {
                out.push(line);
            }
        }
        (out, d.finish())
    }

    #[test]
    fn every_split_point_yields_the_same_lines() {
        let expected = vec![
            Bytes::from_static(b"{\"a\":1}"),
            Bytes::from_static(b"{\"b\":22}"),
            Bytes::from_static(b"{\"c\":333}"),
        ];
        for i in 0..=FIXTURE.len() {
            for j in i..=FIXTURE.len() {
                let (lines, end) = lines_of(&[&FIXTURE[..i], &FIXTURE[i..j], &FIXTURE[j..]], 64);
                assert_eq!(lines, expected, "split at {i},{j}");
                assert_eq!(end, Ok(()));
            }
        }
    }

    #[test]
    fn one_byte_at_a_time() {
        let chunks: Vec<&[u8]> = FIXTURE.chunks(1).collect();
        let (lines, end) = lines_of(&chunks, 64);
        assert_eq!(lines.len(), 3);
        assert_eq!(end, Ok(()));
    }

    #[test]
    fn truncated_tail_is_reported_at_finish() {
        let (lines, end) = lines_of(&[b"{\"a\":1}\n{\"b\":"], 64);
        assert_eq!(lines.len(), 1);
        assert_eq!(end, Err(FrameError::Truncated { leftover_bytes: 5 }));
    }

    #[test]
    fn unterminated_final_line_can_be_taken() {
        let mut d = LineDecoder::new(64);
        d.push(b"{\"a\":1}\n{\"b\":2}");
        assert_eq!(d.next_line().unwrap().as_deref(), Some(&b"{\"a\":1}"[..]));
        assert_eq!(d.next_line().unwrap(), None);
        assert_eq!(d.take_unterminated().as_deref(), Some(&b"{\"b\":2}"[..]));
        assert_eq!(d.finish(), Ok(()));
    }

    #[test]
    fn over_long_line_is_an_error_even_before_its_newline() {
        let mut d = LineDecoder::new(8);
        d.push(b"0123456789");
        assert_eq!(
            d.next_line(),
            Err(FrameError::LineTooLong { max_line_bytes: 8 })
        );
        let mut d = LineDecoder::new(8);
        d.push(b"0123456789\n");
        assert_eq!(
            d.next_line(),
            Err(FrameError::LineTooLong { max_line_bytes: 8 })
        );
    }

    #[test]
    fn lines_within_a_chunk_are_not_copied() {
        let chunk = Bytes::from_static(b"{\"a\":1}\n{\"b\":22}\n{\"c\":");
        let mut d = LineDecoder::new(64);
        d.push_bytes(chunk.clone());
        let within = |l: &Bytes| chunk.as_ptr_range().contains(&l.as_ptr());
        let a = d.next_line().unwrap().unwrap();
        let b = d.next_line().unwrap().unwrap();
        assert!(within(&a) && within(&b));
        assert_eq!(d.next_line().unwrap(), None);
        d.push_bytes(Bytes::from_static(b"333}\n"));
        assert_eq!(d.next_line().unwrap().as_deref(), Some(&b"{\"c\":333}"[..]));
        assert_eq!(d.finish(), Ok(()));
    }

    #[test]
    fn a_line_spanning_chunks_counts_towards_the_limit() {
        let mut d = LineDecoder::new(8);
        d.push_bytes(Bytes::from_static(b"12345"));
        assert_eq!(d.next_line(), Ok(None));
        d.push_bytes(Bytes::from_static(b"678\n"));
        assert_eq!(d.next_line().unwrap().as_deref(), Some(&b"12345678"[..]));
        d.push_bytes(Bytes::from_static(b"12345"));
        assert_eq!(d.next_line(), Ok(None));
        d.push_bytes(Bytes::from_static(b"6789\n"));
        assert_eq!(
            d.next_line(),
            Err(FrameError::LineTooLong { max_line_bytes: 8 })
        );
    }

    #[test]
    fn weird_inputs() {
        let (lines, end) = lines_of(&[b"", b"\n\n\r\n", b""], 8);
        assert!(lines.is_empty());
        assert_eq!(end, Ok(()));
        let (lines, end) = lines_of(&[b"12345678\n"], 8);
        assert_eq!(lines, vec![Bytes::from_static(b"12345678")]);
        assert_eq!(end, Ok(()));
    }
}
