//! The rig of the list+watch state machine's tests: a pods target, and a recorder of the
//! machine's outcomes as short lines, so a test states the exact sequence it expects. The API
//! client pointed at the simulated API server is `crate::kube::testing`'s.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::mpsc;

use crate::backoff::Backoff;
use crate::event::ResourceInfo;
use crate::kube::testing::FAST_BACKOFF;
use crate::kube::ApiClient;
use crate::watcher::machine::{Machine, Outcome, Target};

/// How long a test waits for something that should happen promptly.
pub(super) const WAIT: Duration = Duration::from_secs(10);

pub(super) fn pods() -> ResourceInfo {
    ResourceInfo::core("pods", "Pod", true)
}

pub(super) fn target(resource: ResourceInfo, namespace: Option<&str>) -> Target {
    Target {
        resource,
        namespace: namespace.map(str::to_owned),
        label_selector: None,
        field_selector: None,
        page_size: 500,
        watch_timeout: Duration::from_secs(60),
        streaming_list: false,
        max_line_bytes: 1 << 20,
        metadata_only: false,
        follow: None,
    }
}

/// Runs a watch state machine in the background and records each outcome as a short line, so a
/// test states the exact sequence it expects.
pub(super) struct Recorder {
    rx: mpsc::UnboundedReceiver<(String, Outcome)>,
    task: tokio::task::JoinHandle<()>,
}

impl Recorder {
    pub(super) fn start(client: Arc<ApiClient>, target: Target) -> Recorder {
        Recorder::machine(Machine::new(
            client,
            Arc::new(target),
            Backoff::new(FAST_BACKOFF),
        ))
    }

    /// Records what `machine` sees, from its first list.
    pub(super) fn machine(mut machine: Machine) -> Recorder {
        let (tx, rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(async move {
            let mut state = machine.start();
            loop {
                let (outcome, next) = machine.step(state).await;
                state = next;
                if !matches!(outcome, Outcome::Idle)
                    && tx.send((describe(&outcome), outcome)).is_err()
                {
                    return;
                }
            }
        });
        Recorder { rx, task }
    }

    /// The next outcome, described.
    pub(super) async fn next(&mut self) -> String {
        self.next_outcome().await.0
    }

    pub(super) async fn next_outcome(&mut self) -> (String, Outcome) {
        match tokio::time::timeout(WAIT, self.rx.recv()).await {
            Ok(Some(o)) => o,
            Ok(None) => panic!("the watch machine stopped"),
            Err(_) => panic!("no outcome from the watch machine within {WAIT:?}"),
        }
    }

    /// Skips outcomes until one starting with `prefix`; returns it and what was skipped.
    pub(super) async fn until(&mut self, prefix: &str) -> (String, Vec<String>) {
        let mut skipped = Vec::new();
        loop {
            let next = self.next().await;
            if next.starts_with(prefix) {
                return (next, skipped);
            }
            skipped.push(next);
        }
    }

    /// Asserts nothing is emitted for `d`.
    pub(super) async fn quiet_for(&mut self, d: Duration) {
        if let Ok(Some((o, _))) = tokio::time::timeout(d, self.rx.recv()).await {
            panic!("expected no outcome, got {o}");
        }
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// `list start:initial [a b] complete:12`, `ADDED a 13`, `bookmark 14`, `opened 14`,
/// `restart transport`.
pub(super) fn describe(outcome: &Outcome) -> String {
    match outcome {
        Outcome::ListPage {
            started,
            items,
            complete,
            ..
        } => {
            let mut s = "list".to_owned();
            if let Some(r) = started {
                s += &format!(" start:{}", r.as_str());
            }
            let names: Vec<&str> = items.iter().map(|i| i.meta.name.as_str()).collect();
            s += &format!(" [{}]", names.join(" "));
            if let Some(rv) = complete {
                s += &format!(" complete:{rv}");
            }
            s
        }
        Outcome::Event(e) => format!(
            "{} {} {}",
            e.event_type, e.meta.name, e.meta.resource_version
        ),
        Outcome::Oversized { event: e, .. } => format!(
            "{} {} {} (oversized)",
            e.event_type, e.meta.name, e.meta.resource_version
        ),
        Outcome::Bookmark(rv) => format!("bookmark {rv}"),
        Outcome::WatchOpened(rv) => format!("opened {rv}"),
        Outcome::Restart(r) => format!("restart {}", r.reason.as_str()),
        Outcome::Unserved(_) => "unserved".into(),
        Outcome::VersionMoved(moved) => format!("moved {}", moved.to.version),
        Outcome::Idle => "idle".into(),
    }
}

/// The resourceVersion of a simulator object.
pub(super) fn rv(obj: &Value) -> String {
    obj["metadata"]["resourceVersion"]
        .as_str()
        .expect("object has a resourceVersion")
        .to_owned()
}
