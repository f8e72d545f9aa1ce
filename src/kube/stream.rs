//! A watch response body as a sequence of lines.

use bytes::Bytes;
use tokio::sync::{OwnedMutexGuard, OwnedSemaphorePermit};

use super::framing::{Frame, FrameError, LineDecoder};
use crate::budget::{Budget, Charge, RESUME_IDLE};

/// Why reading the stream failed (as opposed to ending cleanly).
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    #[error(transparent)]
    Frame(#[from] FrameError),
    /// Shown with its causes (see [`super::error::with_causes`]): "connection reset" is in them.
    #[error("watch connection broke: {}", super::error::with_causes(.0))]
    Transport(#[source] reqwest::Error),
    /// The byte budget could not take what arrived, while another stream was finishing its
    /// line past it: the stream lets go of its connection and of what it holds, to be read again
    /// from the watch's last version ([`crate::budget`]).
    #[error("buffered data reached nats.max_buffered_bytes")]
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
    /// What the line holds of the byte budget, handed on with it: whoever publishes the line
    /// takes the charge over, so its bytes are never uncounted on the way (the delivery's
    /// `Sinks`, src/delivery/ports.rs).
    pub(crate) charge: Charge,
}

/// The body of an open watch, cut into lines.
pub struct LineStream {
    response: reqwest::Response,
    lines: LineDecoder,
    ended: bool,
    budget: Budget,
    /// What this stream holds of the budget: the bytes buffered. A line handed out takes its
    /// part with it ([`Line::charge`]).
    held: Charge,
    /// The right to finish the current line past the budget.
    overdraft: Option<OwnedMutexGuard<()>>,
    /// The read slot held while in the middle of a line.
    read_slot: Option<OwnedSemaphorePermit>,
    /// Held from reopening after letting go for the budget until the first line is complete.
    resume_slot: Option<OwnedSemaphorePermit>,
    /// Set while waiting for the budget: the server is not silent, kube2nats is not reading.
    waiting_for_room: bool,
}

impl LineStream {
    pub fn new(response: reqwest::Response, max_line_bytes: usize) -> LineStream {
        LineStream::with_budget(response, max_line_bytes, Budget::unlimited())
    }

    /// A stream that charges what it buffers to `budget` and reads only what the budget admits.
    pub(crate) fn with_budget(
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
            resume_slot: None,
            waiting_for_room: false,
        }
    }

    /// Keeps `slot` (see [`Budget::resume_slot`]) until the first line is complete.
    pub(crate) fn hold_resume_slot(&mut self, slot: Option<OwnedSemaphorePermit>) {
        self.resume_slot = slot;
    }

    /// Whether the stream is waiting for the byte budget rather than for the server.
    pub(crate) fn waiting_for_room(&self) -> bool {
        self.waiting_for_room
    }

    /// The next line; `Ok(None)` once the server has ended the body cleanly.
    pub async fn next_line(&mut self) -> Result<Option<Line>, StreamError> {
        let mut line = self.read_line().await;
        if let Ok(Some(line)) = &mut line {
            // The line is done: the right to finish it past the budget goes back, and so does
            // the resume slot (the watch has caught up with what it let go of), and the read slot
            // unless the next line has begun.
            self.overdraft = None;
            self.resume_slot = None;
            if self.lines.buffered_bytes() == 0 {
                self.read_slot = None;
            }
            let handed = self
                .held
                .bytes()
                .saturating_sub(self.lines.buffered_bytes());
            line.charge = self.held.split_off(handed);
        }
        line
    }

    /// Waits before reading more: at a line boundary while the budget is spent; in the middle
    /// of a line for a read slot. In the middle of a line with the budget spent, finishes the line
    /// under the overdraft or lets go at once (what it would read could not be kept).
    async fn wait_for_room(&mut self) -> Result<(), StreamError> {
        if self.budget.exhausted() && self.overdraft.is_none() {
            if self.lines.buffered_bytes() > 0 {
                self.overdraw()?;
            } else {
                self.waiting_for_room = true;
                self.budget.room().await;
                self.waiting_for_room = false;
            }
        }
        if self.lines.buffered_bytes() > 0 && self.read_slot.is_none() {
            self.read_slot = self.budget.read_slot().await;
        }
        Ok(())
    }

    /// Keeps `chunk` if the budget admits it, or under the overdraft; else lets go.
    fn admit(&mut self, chunk: Bytes) -> Result<(), StreamError> {
        let wanted = self.lines.buffered_bytes() + chunk.len();
        if !self.held.try_set(wanted) {
            self.overdraw()?;
            self.held.set(wanted);
        }
        self.lines.push_bytes(chunk);
        Ok(())
    }

    /// Takes the right to finish the line past the budget, unless it is held already; a stream
    /// that cannot get it lets go.
    fn overdraw(&mut self) -> Result<(), StreamError> {
        if self.overdraft.is_none() {
            self.overdraft = self.budget.try_overdraft();
        }
        match self.overdraft {
            Some(_) => Ok(()),
            None => Err(StreamError::BudgetSpent),
        }
    }

    /// The next chunk of the body. A watch that holds a resume slot and has nothing to catch up
    /// on gives the slot back after [`RESUME_IDLE`].
    async fn read_chunk(&mut self) -> reqwest::Result<Option<Bytes>> {
        if self.resume_slot.is_some() && self.lines.buffered_bytes() == 0 {
            // Cancelling `chunk` loses nothing: it only polls the body for its next frame.
            if let Ok(read) = tokio::time::timeout(RESUME_IDLE, self.response.chunk()).await {
                return read;
            }
            self.resume_slot = None;
        }
        self.response.chunk().await
    }

    async fn read_line(&mut self) -> Result<Option<Line>, StreamError> {
        loop {
            match self.lines.next_frame() {
                Some(Frame::Line(bytes)) => {
                    return Ok(Some(Line {
                        bytes,
                        terminated: true,
                        oversized: None,
                        charge: Charge::none(),
                    }))
                }
                Some(Frame::Oversized { prefix, line_bytes }) => {
                    return Ok(Some(Line {
                        bytes: prefix,
                        terminated: true,
                        oversized: Some(line_bytes),
                        charge: Charge::none(),
                    }))
                }
                None => {}
            }
            if self.ended {
                return Ok(None);
            }
            self.wait_for_room().await?;
            match self.read_chunk().await {
                Ok(Some(chunk)) => self.admit(chunk)?,
                Ok(None) => {
                    self.ended = true;
                    if let Some(bytes) = self.lines.take_unterminated() {
                        return Ok(Some(Line {
                            bytes,
                            terminated: false,
                            oversized: None,
                            charge: Charge::none(),
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
