//! Newline-delimited JSON framing of a watch response body.
//!
//! The API server sends one JSON document per line over chunked transfer encoding, but chunk
//! boundaries fall anywhere: a chunk may hold many lines, or a line may span many chunks. The
//! [`LineDecoder`] buffers what has arrived and hands out whole lines without copying them.
//!
//! A line over `max_line_bytes` is not buffered: the decoder keeps its first bytes (at most
//! [`OVERSIZED_PREFIX_BYTES`]), skips the rest up to the newline, and hands out the prefix as
//! [`Frame::Oversized`], so the watcher can still say which object changed (its metadata comes
//! first in what kube-apiserver writes) and the stream goes on with the next line.

use bytes::{Bytes, BytesMut};

/// How much of an over-long line is kept: enough for the event type and the object's metadata
/// fields that kube-apiserver writes first (kind, apiVersion, name, namespace, uid,
/// resourceVersion), even behind long labels; small enough that many watches may hold one.
pub const OVERSIZED_PREFIX_BYTES: usize = 64 * 1024;

/// Why the byte stream could not be cut into lines.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The body ended in the middle of a line.
    #[error("watch stream ended inside a line ({leftover_bytes} bytes after the last newline)")]
    Truncated { leftover_bytes: usize },
}

/// One item of the stream: a whole line, or the start of a line too long to keep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Frame {
    /// A complete line, without its newline (and any `\r` before it).
    Line(Bytes),
    /// A line over `max_line_bytes`: its first bytes (at most [`OVERSIZED_PREFIX_BYTES`] and at
    /// most `max_line_bytes`), and its whole length before the newline. The rest was skipped.
    Oversized { prefix: Bytes, line_bytes: usize },
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
    /// Set while skipping the rest of an over-long line: its kept prefix is `partial`, and this
    /// is how many bytes the line has had so far.
    skipping: Option<usize>,
}

impl LineDecoder {
    pub fn new(max_line_bytes: usize) -> Self {
        LineDecoder {
            partial: BytesMut::new(),
            chunk: Bytes::new(),
            max_line_bytes,
            skipping: None,
        }
    }

    /// Bytes held that have not been handed out as a line yet.
    pub(crate) fn buffered_bytes(&self) -> usize {
        self.partial.len() + self.chunk.len()
    }

    /// The most of an over-long line that is kept.
    fn prefix_cap(&self) -> usize {
        self.max_line_bytes.min(OVERSIZED_PREFIX_BYTES)
    }

    /// Appends a received chunk (copied; see [`push_bytes`](Self::push_bytes)).
    pub fn push(&mut self, chunk: &[u8]) {
        self.push_bytes(Bytes::copy_from_slice(chunk));
    }

    /// Appends a received chunk; lines within it will be slices of it.
    pub(crate) fn push_bytes(&mut self, chunk: Bytes) {
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
    /// skipped: they carry no event. An over-long line comes out as its prefix once its newline
    /// has arrived; the lines after it follow as usual.
    pub(crate) fn next_frame(&mut self) -> Option<Frame> {
        loop {
            let Some(newline) = memchr::memchr(b'\n', &self.chunk) else {
                // No newline yet: keep the bytes as the start of a line (or of its prefix).
                let chunk = std::mem::take(&mut self.chunk);
                self.keep(&chunk);
                return None;
            };
            if self.skipping.is_some() || self.partial.len() + newline > self.max_line_bytes {
                // The end of a line over the limit: keep its prefix and report it.
                let rest = self.chunk.split_to(newline + 1);
                self.keep(&rest[..newline]);
                self.let_go_of_empty_chunk();
                let line_bytes = self.skipping.take().unwrap_or(newline);
                return Some(Frame::Oversized {
                    prefix: self.take_partial(),
                    line_bytes,
                });
            }
            let mut line = if self.partial.is_empty() {
                self.chunk.split_to(newline + 1)
            } else {
                self.partial.extend_from_slice(&self.chunk[..=newline]);
                bytes::Buf::advance(&mut self.chunk, newline + 1);
                self.take_partial()
            };
            self.let_go_of_empty_chunk();
            line.truncate(trim_line_end(&line));
            if !line.is_empty() {
                return Some(Frame::Line(line));
            }
        }
    }

    /// The next complete line; an over-long line is skipped (see [`next_frame`](Self::next_frame)).
    pub fn next_line(&mut self) -> Option<Bytes> {
        loop {
            match self.next_frame()? {
                Frame::Line(line) => return Some(line),
                Frame::Oversized { .. } => continue,
            }
        }
    }

    /// Adds `bytes` (without a newline) to the line being assembled: all of them while the line
    /// is within the limit, only up to the prefix cap once it is not.
    fn keep(&mut self, bytes: &[u8]) {
        let total = self.skipping.unwrap_or(self.partial.len()) + bytes.len();
        if self.skipping.is_none() && total <= self.max_line_bytes {
            self.partial.extend_from_slice(bytes);
            return;
        }
        let cap = self.prefix_cap();
        if self.partial.len() > cap {
            // A fresh buffer of just the prefix gives back the memory of the rest.
            self.partial = BytesMut::from(&self.partial[..cap]);
        }
        let room = cap - self.partial.len();
        self.partial
            .extend_from_slice(&bytes[..room.min(bytes.len())]);
        self.skipping = Some(total);
    }

    /// An empty slice still holds the whole received buffer (hyper's read buffer, up to
    /// ~400 kB): let it go, so an idle watch holds nothing.
    fn let_go_of_empty_chunk(&mut self) {
        if self.chunk.is_empty() {
            self.chunk = Bytes::new();
        }
    }

    /// The line assembled in `partial`, which starts over empty. (`BytesMut::split` would leave
    /// `partial` sharing the line's buffer, keeping megabytes alive for as long as the watch is
    /// idle after a large object.)
    fn take_partial(&mut self) -> Bytes {
        std::mem::take(&mut self.partial).freeze()
    }

    /// Called when the body has ended: an empty buffer is a clean end, anything else a truncated line.
    /// A last line that is complete JSON but lacks its newline is still a truncation here; the
    /// caller decides whether to try it (see [`LineDecoder::take_unterminated`]).
    pub(crate) fn finish(&self) -> Result<(), FrameError> {
        if let Some(seen) = self.skipping {
            return Err(FrameError::Truncated {
                leftover_bytes: seen + self.chunk.len(),
            });
        }
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
    pub(crate) fn take_unterminated(&mut self) -> Option<Bytes> {
        if self.skipping.is_some() {
            // An over-long line cut off by the end of the body: only `finish` can report it.
            return None;
        }
        self.partial.extend_from_slice(&self.chunk);
        self.chunk = Bytes::new();
        let rest = self.take_partial();
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

    /// Once a line is handed out, the decoder keeps no reference to its memory or to the
    /// received buffer it came from: an idle watch must not pin the last large object.
    #[test]
    fn lines_handed_out_share_no_memory_with_the_decoder() {
        let mut d = LineDecoder::new(1 << 20);
        let first = Bytes::from(vec![b'x'; 1000]);
        let second = Bytes::from([&b"yy"[..], b"\n"].concat());
        d.push_bytes(first.clone());
        assert!(d.next_frame().is_none());
        d.push_bytes(second.clone());
        let Some(Frame::Line(spanning)) = d.next_frame() else {
            panic!("a line");
        };
        assert_eq!(spanning.len(), 1002);
        assert!(
            spanning.is_unique(),
            "the assembled line's buffer is the line's alone"
        );
        drop(spanning);
        assert!(second.is_unique(), "the received chunk is let go");
        assert!(first.is_unique());

        let within = Bytes::from(b"{\"a\":1}\n".to_vec());
        d.push_bytes(within.clone());
        let line = d.next_line();
        assert_eq!(line.as_deref(), Some(&b"{\"a\":1}"[..]));
        drop(line);
        assert!(within.is_unique(), "the received chunk is let go");
    }

    fn lines_of(chunks: &[&[u8]], max: usize) -> (Vec<Bytes>, Result<(), FrameError>) {
        let mut d = LineDecoder::new(max);
        let mut out = Vec::new();
        for chunk in chunks {
            d.push(chunk);
            while let Some(line) = d.next_line() {
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
        assert_eq!(d.next_line().as_deref(), Some(&b"{\"a\":1}"[..]));
        assert_eq!(d.next_line(), None);
        assert_eq!(d.take_unterminated().as_deref(), Some(&b"{\"b\":2}"[..]));
        assert_eq!(d.finish(), Ok(()));
    }

    fn oversized(prefix: &'static [u8], line_bytes: usize) -> Option<Frame> {
        Some(Frame::Oversized {
            prefix: Bytes::from_static(prefix),
            line_bytes,
        })
    }

    #[test]
    fn over_long_line_comes_out_as_its_prefix_and_the_next_line_follows() {
        let mut d = LineDecoder::new(8);
        d.push(b"0123456789");
        assert_eq!(d.next_frame(), None, "not reported before its newline");
        d.push(b"abc\r\n{\"a\":1}\n");
        assert_eq!(d.next_frame(), oversized(b"01234567", 14));
        assert_eq!(
            d.next_frame(),
            Some(Frame::Line(Bytes::from_static(b"{\"a\":1}")))
        );
        assert_eq!(d.next_frame(), None);
        assert_eq!(d.finish(), Ok(()));
    }

    #[test]
    fn an_over_long_line_keeps_only_a_bounded_prefix() {
        let max = OVERSIZED_PREFIX_BYTES * 4;
        let mut d = LineDecoder::new(max);
        for _ in 0..16 {
            d.push(&[b'x'; OVERSIZED_PREFIX_BYTES]);
            assert_eq!(d.next_frame(), None);
            assert!(d.partial.capacity() <= max + OVERSIZED_PREFIX_BYTES);
        }
        assert!(d.partial.len() <= OVERSIZED_PREFIX_BYTES);
        d.push(b"\n");
        let Some(Frame::Oversized { prefix, line_bytes }) = d.next_frame() else {
            panic!("an oversized frame")
        };
        assert_eq!(prefix.len(), OVERSIZED_PREFIX_BYTES);
        assert_eq!(line_bytes, 16 * OVERSIZED_PREFIX_BYTES);
    }

    #[test]
    fn every_split_point_of_an_over_long_line_gives_the_same_frames() {
        const BODY: &[u8] = b"{\"a\":1}\n0123456789ab\n{\"b\":2}\n";
        for i in 0..=BODY.len() {
            for j in i..=BODY.len() {
                let mut d = LineDecoder::new(8);
                let mut frames = Vec::new();
                for part in [&BODY[..i], &BODY[i..j], &BODY[j..]] {
                    d.push(part);
                    while let Some(f) = d.next_frame() {
                        frames.push(f);
                    }
                }
                assert_eq!(
                    frames,
                    vec![
                        Frame::Line(Bytes::from_static(b"{\"a\":1}")),
                        oversized(b"01234567", 12).unwrap(),
                        Frame::Line(Bytes::from_static(b"{\"b\":2}")),
                    ],
                    "split at {i},{j}"
                );
            }
        }
    }

    #[test]
    fn a_body_that_ends_inside_an_over_long_line_is_truncated() {
        let mut d = LineDecoder::new(8);
        d.push(b"0123456789");
        assert_eq!(d.next_frame(), None);
        assert_eq!(d.take_unterminated(), None);
        assert_eq!(
            d.finish(),
            Err(FrameError::Truncated { leftover_bytes: 10 })
        );
    }

    #[test]
    fn lines_within_a_chunk_are_not_copied() {
        let chunk = Bytes::from_static(b"{\"a\":1}\n{\"b\":22}\n{\"c\":");
        let mut d = LineDecoder::new(64);
        d.push_bytes(chunk.clone());
        let within = |l: &Bytes| chunk.as_ptr_range().contains(&l.as_ptr());
        let a = d.next_line().unwrap();
        let b = d.next_line().unwrap();
        assert!(within(&a) && within(&b));
        assert_eq!(d.next_line(), None);
        d.push_bytes(Bytes::from_static(b"333}\n"));
        assert_eq!(d.next_line().as_deref(), Some(&b"{\"c\":333}"[..]));
        assert_eq!(d.finish(), Ok(()));
    }

    #[test]
    fn a_line_spanning_chunks_counts_towards_the_limit() {
        let mut d = LineDecoder::new(8);
        d.push_bytes(Bytes::from_static(b"12345"));
        assert_eq!(d.next_frame(), None);
        d.push_bytes(Bytes::from_static(b"678\n"));
        assert_eq!(
            d.next_frame(),
            Some(Frame::Line(Bytes::from_static(b"12345678")))
        );
        d.push_bytes(Bytes::from_static(b"12345"));
        assert_eq!(d.next_frame(), None);
        d.push_bytes(Bytes::from_static(b"6789\n"));
        assert_eq!(d.next_frame(), oversized(b"12345678", 9));
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
