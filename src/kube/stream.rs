//! A watch response body as a sequence of lines.

use bytes::Bytes;

use super::framing::{Frame, FrameError, LineDecoder};

/// Why reading the stream failed (as opposed to ending cleanly).
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    #[error(transparent)]
    Frame(#[from] FrameError),
    /// Shown with its causes (see [`super::error::with_causes`]): "connection reset" is in them.
    #[error("watch connection broke: {}", super::error::with_causes(.0))]
    Transport(#[source] reqwest::Error),
}

/// One line of the body.
#[derive(Debug)]
pub struct Line {
    pub bytes: Bytes,
    /// False for a last line that arrived without its newline: if it does not decode, the body
    /// was cut short rather than garbled.
    pub terminated: bool,
    /// `Some(length)` for a line over `max_line_bytes`: `bytes` holds only its first bytes.
    pub oversized: Option<usize>,
}

/// The body of an open watch, cut into lines.
pub struct LineStream {
    response: reqwest::Response,
    lines: LineDecoder,
    ended: bool,
}

impl LineStream {
    pub fn new(response: reqwest::Response, max_line_bytes: usize) -> LineStream {
        LineStream {
            response,
            lines: LineDecoder::new(max_line_bytes),
            ended: false,
        }
    }

    /// The next line; `Ok(None)` once the server has ended the body cleanly.
    pub async fn next_line(&mut self) -> Result<Option<Line>, StreamError> {
        loop {
            match self.lines.next_frame() {
                Some(Frame::Line(bytes)) => {
                    return Ok(Some(Line {
                        bytes,
                        terminated: true,
                        oversized: None,
                    }))
                }
                Some(Frame::Oversized { prefix, line_bytes }) => {
                    return Ok(Some(Line {
                        bytes: prefix,
                        terminated: true,
                        oversized: Some(line_bytes),
                    }))
                }
                None => {}
            }
            if self.ended {
                return Ok(None);
            }
            match self.response.chunk().await {
                Ok(Some(chunk)) => self.lines.push_bytes(chunk),
                Ok(None) => {
                    self.ended = true;
                    if let Some(bytes) = self.lines.take_unterminated() {
                        return Ok(Some(Line {
                            bytes,
                            terminated: false,
                            oversized: None,
                        }));
                    }
                    // Only an over-long line cut off by the end is left to report.
                    self.lines.finish()?;
                }
                Err(e) => return Err(StreamError::Transport(e)),
            }
        }
    }
}
