//! The watch loop's timers.

/// A timer of the watch loop (the checkpoint's; the paced confirmations'), kept from one turn to
/// the next. A busy stream turns the loop once per event; a timer made each turn is registered with the runtime's timer wheel
/// and removed again every event, which costs more than everything else durable state adds.
#[derive(Default)]
pub(super) struct LoopTimer {
    sleep: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
}

impl LoopTimer {
    /// Sleeps until `at`, or forever when there is nothing to wait for. The timer is moved only
    /// when `at` changes (once per checkpoint).
    pub(super) async fn until(&mut self, at: Option<tokio::time::Instant>) {
        let Some(at) = at else {
            return std::future::pending().await;
        };
        let sleep = match &mut self.sleep {
            Some(sleep) => {
                if sleep.deadline() != at {
                    sleep.as_mut().reset(at);
                }
                sleep
            }
            None => self.sleep.insert(Box::pin(tokio::time::sleep_until(at))),
        };
        sleep.as_mut().await;
    }
}
