//! A watch response body as a sequence of lines.

use bytes::Bytes;
use tokio::sync::{OwnedMutexGuard, OwnedSemaphorePermit};

use super::framing::{Frame, FrameError, LineDecoder};
use crate::budget::{Budget, Charge};

/// Why reading the stream failed (as opposed to ending cleanly).
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    #[error(transparent)]
    Frame(#[from] FrameError),
    /// Shown with its causes (see [`super::error::with_causes`]): "connection reset" is in them.
    #[error("watch connection broke: {}", super::error::with_causes(.0))]
    Transport(#[source] reqwest::Error),
    /// The byte budget ran out in the middle of a line, while another stream was finishing
    /// its own: the line is dropped, to be read again from the watch's last version.
    #[error("buffered data reached nats.max_buffered_bytes in the middle of a line")]
    BudgetSpent,
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
    budget: Budget,
    /// What this stream holds of the budget: the bytes buffered. A line handed out is charged
    /// by the outbox that publishes it (the payload shares the line's memory).
    held: Charge,
    /// The right to finish the current line past the budget.
    overdraft: Option<OwnedMutexGuard<()>>,
    /// The read slot held while in the middle of a line.
    read_slot: Option<OwnedSemaphorePermit>,
    /// Set while waiting for the budget: the server is not silent, kube2nats is not reading.
    waiting_for_room: bool,
}

impl LineStream {
    pub fn new(response: reqwest::Response, max_line_bytes: usize) -> LineStream {
        LineStream::with_budget(response, max_line_bytes, Budget::unlimited())
    }

    /// A stream that charges what it buffers to `budget` and stops reading while it is spent.
    pub fn with_budget(
        response: reqwest::Response,
        max_line_bytes: usize,
        budget: Budget,
    ) -> LineStream {
        LineStream {
            response,
            lines: LineDecoder::new(max_line_bytes),
            ended: false,
            held: budget.charge(0),
            budget,
            overdraft: None,
            read_slot: None,
            waiting_for_room: false,
        }
    }

    /// Whether the stream is waiting for the byte budget rather than for the server.
    pub fn waiting_for_room(&self) -> bool {
        self.waiting_for_room
    }

    /// The next line; `Ok(None)` once the server has ended the body cleanly.
    pub async fn next_line(&mut self) -> Result<Option<Line>, StreamError> {
        let line = self.read_line().await;
        if let Ok(Some(_)) = &line {
            // The line is done: the right to finish it past the budget goes back, and so does
            // the read slot unless the next line has begun.
            self.overdraft = None;
            if self.lines.buffered_bytes() == 0 {
                self.read_slot = None;
            }
            self.held.set(self.lines.buffered_bytes());
        }
        line
    }

    /// Waits before reading more while the budget is spent: at a line boundary until there is
    /// room; in the middle of a line, finishes it if no other stream is finishing one, else
    /// gives the line up. In the middle of a line, reads only with a read slot.
    async fn wait_for_room(&mut self) -> Result<(), StreamError> {
        self.check_budget().await?;
        if self.lines.buffered_bytes() > 0 && self.read_slot.is_none() {
            self.read_slot = self.budget.read_slot().await;
        }
        Ok(())
    }

    async fn check_budget(&mut self) -> Result<(), StreamError> {
        if !self.budget.exhausted() || self.overdraft.is_some() {
            return Ok(());
        }
        if self.lines.buffered_bytes() == 0 {
            self.waiting_for_room = true;
            self.budget.room().await;
            self.waiting_for_room = false;
            return Ok(());
        }
        match self.budget.try_overdraft() {
            Some(overdraft) => {
                self.overdraft = Some(overdraft);
                Ok(())
            }
            None => Err(StreamError::BudgetSpent),
        }
    }

    async fn read_line(&mut self) -> Result<Option<Line>, StreamError> {
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
            self.wait_for_room().await?;
            match self.response.chunk().await {
                Ok(Some(chunk)) => {
                    self.lines.push_bytes(chunk);
                    self.held.set(self.lines.buffered_bytes());
                }
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
