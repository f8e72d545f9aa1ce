//! Cutting one client off the API server while every other client is served: the network
//! partition that leader election exists for ("the holder only loses the API server").
//!
//! Clients are told apart by their bearer token, which is how the real server tells them apart
//! too. A cut-off client's new requests get no answer at all — not an error status — until the
//! cut is lifted, as when its packets are dropped; it notices only through its own timeouts.

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

use super::lock;

/// How often a held request looks whether its client has been reconnected.
const POLL: Duration = Duration::from_millis(20);

/// The tokens whose requests currently get no answer.
#[derive(Default)]
pub struct CutOff {
    tokens: Mutex<HashSet<String>>,
}

impl CutOff {
    pub fn add(&self, token: &str) {
        lock(&self.tokens).insert(token.to_owned());
    }

    pub fn remove(&self, token: &str) {
        lock(&self.tokens).remove(token);
    }

    fn contains(&self, token: Option<&str>) -> bool {
        token.is_some_and(|t| lock(&self.tokens).contains(t))
    }

    /// Holds a request of a cut-off client until it is reconnected (or gives up and closes the
    /// connection, which drops this future).
    pub async fn wait_while_cut_off(&self, token: Option<&str>) {
        while self.contains(token) {
            tokio::time::sleep(POLL).await;
        }
    }
}
