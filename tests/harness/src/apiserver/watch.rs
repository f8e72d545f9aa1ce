//! One open watch: filters the store's changes and writes them as newline-delimited JSON.
//!
//! Each watch runs in its own task that owns the response body's sending half. Ending the task
//! cleanly ends the chunked body with its final chunk; sending an error through the body makes
//! hyper abort the connection without it, which is how a client experiences a dropped TCP
//! connection mid-stream. Both are needed to exercise the client's framing.

use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::resources::ResourceType;
use super::selector::{FieldSelector, LabelSelector};
use super::store::{Backlog, Change, ChangeType, WatchFault, WatchMsg};

/// What a watch follows and how it talks.
#[derive(Debug, Clone)]
pub struct WatchSpec {
    /// Resource type watched.
    pub resource: &'static ResourceType,
    /// Only this namespace, or all.
    pub namespace: Option<String>,
    /// `labelSelector`.
    pub labels: LabelSelector,
    /// `fieldSelector`.
    pub fields: FieldSelector,
    /// `allowWatchBookmarks=true`.
    pub allow_bookmarks: bool,
    /// `timeoutSeconds`: end the body cleanly after this long.
    pub timeout: Option<Duration>,
    /// Objects are sent as PartialObjectMetadata (negotiated from `Accept`).
    pub partial: bool,
}

impl WatchSpec {
    /// Whether an object is in this watch's scope (namespace and selectors).
    pub fn matches(&self, obj: &Value) -> bool {
        let ns_ok = match &self.namespace {
            Some(ns) => obj.pointer("/metadata/namespace").and_then(Value::as_str) == Some(ns),
            None => true,
        };
        ns_ok && self.labels.matches(obj) && self.fields.matches(obj)
    }

    /// The event this watch sees for `change`, if any. An object modified out of the selector
    /// is DELETED and one modified into it is ADDED, as the real watch cache reports them.
    pub fn event_for(&self, change: &Change) -> Option<Bytes> {
        let now = self.matches(&change.object);
        let before = change.previous.as_ref().is_some_and(|p| self.matches(p));
        let event_type = match change.change_type {
            ChangeType::Added if now => "ADDED",
            ChangeType::Modified if now && before => "MODIFIED",
            ChangeType::Modified if now => "ADDED",
            ChangeType::Modified if before => "DELETED",
            ChangeType::Deleted if before => "DELETED",
            _ => return None,
        };
        Some(self.line(event_type, &change.object))
    }

    /// The event line for `object`, cut to its metadata when the watch asked for that.
    pub fn line(&self, event_type: &str, object: &Value) -> Bytes {
        // A custom resource served at several versions reads as the version watched.
        let api_version = self.resource.api_version();
        let converted;
        let object = if object["apiVersion"].as_str() == Some(api_version.as_str()) {
            object
        } else {
            let mut copy = object.clone();
            copy["apiVersion"] = Value::from(api_version);
            converted = copy;
            &converted
        };
        match self.partial {
            true => event_line(event_type, &super::partial::cut(object)),
            false => event_line(event_type, object),
        }
    }

    /// A BOOKMARK line at `revision`; `initial_events_end` marks the end of the initial events
    /// of a `sendInitialEvents` watch.
    pub fn bookmark(&self, revision: u64, initial_events_end: bool) -> Bytes {
        let mut metadata =
            json!({ "resourceVersion": revision.to_string(), "creationTimestamp": null });
        if initial_events_end {
            metadata["annotations"] = json!({ "k8s.io/initial-events-end": "true" });
        }
        let object = json!({
            "kind": self.resource.kind,
            "apiVersion": self.resource.api_version(),
            "metadata": metadata,
        });
        self.line("BOOKMARK", &object)
    }
}

/// `{"type":…,"object":…}\n`, in the order kube-apiserver writes it: `type` first; a built-in
/// object's `kind`, `apiVersion` and `metadata` (in the field order of Go's `ObjectMeta`) before
/// its body; a custom resource, which the server encodes from unstructured JSON (a Go map: sorted
/// keys), with every key sorted, so its `metadata` may come late (after `data`, say).
pub fn event_line(event_type: &str, object: &Value) -> Bytes {
    let mut line = b"{\"type\":".to_vec();
    write_json(&mut line, &Value::from(event_type));
    line.extend_from_slice(b",\"object\":");
    if is_built_in(object) {
        write_ordered(&mut line, object, &["kind", "apiVersion", "metadata"]);
    } else {
        write_json(&mut line, object);
    }
    line.extend_from_slice(b"}\n");
    Bytes::from(line)
}

/// The fields of Go's `ObjectMeta`, in the order they are encoded.
const OBJECT_META_ORDER: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

/// Core and `*.k8s.io` groups are Go structs; anything else here is a custom resource.
fn is_built_in(object: &Value) -> bool {
    match object["apiVersion"]
        .as_str()
        .and_then(|v| v.split_once('/'))
    {
        Some((group, _)) => !group.contains('.') || group.ends_with(".k8s.io"),
        None => true,
    }
}

/// Writes `value`, an object, with the keys of `first` first (in that order), then the rest
/// sorted; `metadata` in `ObjectMeta`'s order.
fn write_ordered(out: &mut Vec<u8>, value: &Value, first: &[&str]) {
    let Some(map) = value.as_object() else {
        return write_json(out, value);
    };
    let mut keys: Vec<&String> = first
        .iter()
        .filter_map(|k| map.get_key_value(*k).map(|(k, _)| k))
        .collect();
    keys.extend(map.keys().filter(|k| !first.contains(&k.as_str())));
    out.push(b'{');
    for (i, key) in keys.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_json(out, &Value::from(key.as_str()));
        out.push(b':');
        match key.as_str() {
            "metadata" if first.contains(&"metadata") => {
                write_ordered(out, &map[key], OBJECT_META_ORDER)
            }
            _ => write_json(out, &map[key]),
        }
    }
    out.push(b'}');
}

fn write_json(out: &mut Vec<u8>, value: &Value) {
    // Writing a `Value` into a `Vec` cannot fail.
    let _ = serde_json::to_writer(out, value);
}

/// Upper bound on waiting for hyper to take queued chunks before an abort (the client may not
/// be reading at all).
const FLUSH_WAIT: Duration = Duration::from_millis(500);

/// The sending half of a streamed response body.
pub type BodyTx = mpsc::Sender<Result<Bytes, io::Error>>;

/// How the next line is to be cut short, if at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cut {
    Abort,
    Clean,
}

/// Whether the stream goes on after a write.
enum Flow {
    Continue,
    End,
}

/// How watch lines are cut into HTTP chunks (HTTP/2 data frames). A real server flushes after
/// each event, but proxies and TCP re-chunk freely, so a client must not assume one line per
/// chunk; these modes make both failure modes of such an assumption show up in tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Framing {
    /// Each line is its own chunk (what kube-apiserver does).
    #[default]
    PerLine,
    /// Lines that are ready together (the initial events, a burst of changes) go out as one chunk.
    Coalesce,
    /// Each line is cut into chunks of at most this many bytes (0 is treated as 1).
    Split(usize),
}

/// Stream settings a test may change while watches are open.
#[derive(Debug, Clone, Copy, Default)]
pub struct StreamSettings {
    /// Sleep before each event.
    pub delay: Duration,
    /// Chunking of lines.
    pub framing: Framing,
}

/// Runs one watch until the client goes away, the timeout passes, or a fault ends it.
/// `initial` lines are written first; then messages from the store. With a `backlog`, a watch
/// the store has terminated for falling behind ends cleanly at once, its queue discarded.
pub async fn run(
    spec: WatchSpec,
    initial: Vec<Bytes>,
    mut rx: mpsc::UnboundedReceiver<WatchMsg>,
    body: BodyTx,
    settings: Arc<Mutex<StreamSettings>>,
    backlog: Option<Arc<Backlog>>,
) {
    let deadline = spec.timeout.map(|t| tokio::time::Instant::now() + t);
    let mut writer = Writer {
        body,
        cut: None,
        settings,
        pending: Vec::new(),
    };
    for line in initial {
        if let Flow::End = writer.write_event(line).await {
            return;
        }
    }
    loop {
        // Coalesced lines go out once nothing else is ready.
        if rx.is_empty() {
            if let Flow::End = writer.flush().await {
                return;
            }
        }
        let msg = tokio::select! {
            msg = rx.recv() => msg,
            _ = sleep_until(deadline) => None,
            _ = writer.body.closed() => return,
        };
        let flow = match msg {
            // Timeout, or the server is gone: end cleanly with whatever was pending.
            None => {
                let _ = writer.flush().await;
                Flow::End
            }
            Some(WatchMsg::Change(_)) if backlog.as_ref().is_some_and(|b| b.take_one()) => {
                Flow::End
            }
            Some(WatchMsg::Change(change)) => match spec.event_for(&change) {
                Some(line) => writer.write_event(line).await,
                None => Flow::Continue,
            },
            Some(WatchMsg::Bookmark(revision)) if spec.allow_bookmarks => {
                writer.write_line(spec.bookmark(revision, false)).await
            }
            Some(WatchMsg::Bookmark(_)) => Flow::Continue,
            Some(WatchMsg::Fault(fault)) => writer.fault(fault).await,
            Some(WatchMsg::Raw(bytes)) => writer.write_line(bytes).await,
        };
        if let Flow::End = flow {
            return;
        }
    }
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

struct Writer {
    body: BodyTx,
    cut: Option<Cut>,
    settings: Arc<Mutex<StreamSettings>>,
    /// Lines held back by [`Framing::Coalesce`].
    pending: Vec<u8>,
}

impl Writer {
    fn settings(&self) -> StreamSettings {
        self.settings.lock().map(|s| *s).unwrap_or_default()
    }

    /// Writes an event line after the configured stream delay.
    async fn write_event(&mut self, line: Bytes) -> Flow {
        let delay = self.settings().delay;
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        self.write_line(line).await
    }

    /// Sends one chunk.
    async fn send(&mut self, chunk: Bytes) -> Flow {
        match self.body.send(Ok(chunk)).await {
            Ok(()) => Flow::Continue,
            Err(_) => Flow::End,
        }
    }

    /// Sends the coalesced lines, if any.
    async fn flush(&mut self) -> Flow {
        if self.pending.is_empty() {
            return Flow::Continue;
        }
        let chunk = Bytes::from(std::mem::take(&mut self.pending));
        self.send(chunk).await
    }

    /// Writes one line framed as configured, or half of it if a cut is pending.
    async fn write_line(&mut self, line: Bytes) -> Flow {
        if let Some(cut) = self.cut.take() {
            if let Flow::End = self.flush().await {
                return Flow::End;
            }
            let half = line.slice(..line.len() / 2);
            let _ = self.body.send(Ok(half)).await;
            if cut == Cut::Abort {
                self.wait_until_written().await;
                let _ = self.body.send(Err(aborted())).await;
            }
            return Flow::End;
        }
        match self.settings().framing {
            Framing::PerLine => self.send(line).await,
            Framing::Coalesce => {
                self.pending.extend_from_slice(&line);
                Flow::Continue
            }
            Framing::Split(n) => {
                let n = n.max(1);
                let mut start = 0;
                while start < line.len() {
                    let end = (start + n).min(line.len());
                    if let Flow::End = self.send(line.slice(start..end)).await {
                        return Flow::End;
                    }
                    start = end;
                }
                Flow::Continue
            }
        }
    }

    /// Waits until hyper has taken every queued chunk and had time to write it. hyper flushes
    /// only when the body has nothing more ready, and drops unflushed bytes when the body fails,
    /// so without this wait "half a line, then abort" would lose the half line.
    async fn wait_until_written(&self) {
        let deadline = tokio::time::Instant::now() + FLUSH_WAIT;
        while self.body.capacity() < self.body.max_capacity()
            && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    async fn fault(&mut self, fault: WatchFault) -> Flow {
        match fault {
            WatchFault::Drop => {
                let _ = self.body.send(Err(aborted())).await;
                Flow::End
            }
            WatchFault::DropMidLine => {
                self.cut = Some(Cut::Abort);
                Flow::Continue
            }
            WatchFault::Truncate => {
                self.cut = Some(Cut::Clean);
                Flow::Continue
            }
            WatchFault::Garbage => {
                self.write_line(Bytes::from_static(b"<html>oops</html>\n"))
                    .await
            }
            WatchFault::Hang => {
                let _ = self.flush().await;
                self.body.closed().await;
                Flow::End
            }
        }
    }
}

fn aborted() -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionAborted,
        "watch dropped by fault injection",
    )
}
