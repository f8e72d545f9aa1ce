//! A fast, minimal kube-apiserver for one resource (`pods`), over plain HTTP/1.1 on loopback.
//!
//! It answers exactly what kube2nats asks: discovery (`/api/v1`, `/apis`), paged lists
//! (`limit`/`continue`, every page carrying the list's resourceVersion) and one watch from that
//! version, which streams the scenario's events (chunked transfer encoding, one chunk an event, as
//! kube-apiserver sends them, or events gathered into larger chunks:
//! `Scenario::watch_chunk_bytes`) as fast as the socket takes them, or paced. Later watches (a
//! reconnect) stay open and idle. The test harness's full simulator
//! (`kube2nats_harness::apiserver`) is far more faithful, but too slow to load anyone.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::pods::{uuid, PodTemplate, NAMESPACES};

/// The resourceVersion of object `slot` at the time of the list (they predate the list).
const FIRST_OBJECT_RV: u64 = 1_000_000;
/// Bytes of chunks gathered into one socket write when streaming as fast as possible. Each event
/// is still its own HTTP chunk (unless `Scenario::watch_chunk_bytes` says otherwise), as
/// kube-apiserver sends it (Go's net/http writes a response write of over 2 KB as a chunk of its
/// own, and the watch handler writes one event at a time): how the body is cut into chunks
/// decides how hyper hands it on, so the client's work per event depends on it.
const BURST_WRITE_BYTES: usize = 64 * 1024;

/// What the server serves.
pub struct Scenario {
    pub pods: Vec<PodTemplate>,
    /// The pods as PartialObjectMetadata, served to requests that ask for it; empty: never.
    pub partial_pods: Vec<PodTemplate>,
    /// Bytes of list and watch bodies written.
    pub bytes_sent: AtomicU64,
    /// Watch events after the list (bookmarks included).
    pub events: u64,
    /// `Some(rate)`: one event per chunk at this many events per second; `None`: as fast as possible.
    pub rate: Option<u64>,
    /// Set when the first watch request arrives.
    pub watch_started_at: std::sync::OnceLock<Instant>,
    /// The send time of change `k` (`rv = list_rv + k + 1`), in ns since `epoch`; paced runs only.
    pub sent_ns: Vec<AtomicU64>,
    pub epoch: Instant,
    /// Set once every event has been written to the socket.
    pub all_sent: AtomicBool,
    /// Watch events gathered into one HTTP chunk until it holds this many bytes
    /// (`LOADTEST_WATCH_CHUNK_BYTES`); 0: one chunk an event, as kube-apiserver sends them.
    /// Coalesced chunks are what a proxy or a client reading a backlog may see, and where the
    /// cost of reading the body shrinks to the floor's: the per-event work shows alone.
    pub watch_chunk_bytes: usize,
    first_watch: AtomicBool,
}

/// One event of the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Added,
    Modified,
    Deleted,
    Bookmark,
}

impl Scenario {
    pub fn new(objects: u64, events: u64, rate: Option<u64>, epoch: Instant) -> Scenario {
        Scenario::shaped(objects, events, rate, epoch, 0)
    }

    /// As [`Scenario::new`], with `padding` bytes of data per object; such a scenario also
    /// serves metadata-only requests (PartialObjectMetadata).
    pub fn shaped(
        objects: u64,
        events: u64,
        rate: Option<u64>,
        epoch: Instant,
        padding: usize,
    ) -> Scenario {
        let sent_ns = if rate.is_some() {
            (0..events).map(|_| AtomicU64::new(0)).collect()
        } else {
            Vec::new()
        };
        Scenario {
            pods: (0..objects)
                .map(|slot| PodTemplate::shaped(slot, padding, false))
                .collect(),
            partial_pods: match padding {
                0 => Vec::new(),
                _ => (0..objects)
                    .map(|slot| PodTemplate::shaped(slot, 0, true))
                    .collect(),
            },
            bytes_sent: AtomicU64::new(0),
            events,
            rate,
            watch_started_at: std::sync::OnceLock::new(),
            sent_ns,
            epoch,
            all_sent: AtomicBool::new(false),
            watch_chunk_bytes: std::env::var("LOADTEST_WATCH_CHUNK_BYTES")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
            first_watch: AtomicBool::new(true),
        }
    }

    /// The list's resourceVersion: newer than every listed object.
    pub fn list_rv(&self) -> u64 {
        FIRST_OBJECT_RV + self.pods.len() as u64
    }

    /// Event `k`: every 1000th a BOOKMARK; of the rest, every 100th deletes an object and the next
    /// re-creates it (same name, new uid, like a StatefulSet pod); the others modify one object.
    pub fn event_kind(&self, k: u64) -> (Kind, u64) {
        let n = self.pods.len().max(1) as u64;
        if k % 1000 == 999 {
            return (Kind::Bookmark, 0);
        }
        let slot_of_churn = (k / 100) % n;
        match k % 100 {
            0 => (Kind::Deleted, slot_of_churn),
            1 => (Kind::Added, slot_of_churn),
            _ => (Kind::Modified, (k.wrapping_mul(7919)) % n),
        }
    }

    /// How many of the events are changes (and so published).
    pub fn changes(&self) -> u64 {
        self.events - self.events / 1000
    }

    /// The uid of `slot` after `generation` re-creations.
    fn uid(slot: u64, generation: u64) -> String {
        uuid(slot * 1_000_003 + generation)
    }
}

/// Binds a loopback port and serves until the process ends.
pub async fn serve(scenario: Arc<Scenario>) -> std::io::Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let _ = stream.set_nodelay(true);
            tokio::spawn(connection(stream, scenario.clone()));
        }
    });
    Ok(port)
}

async fn connection(mut stream: TcpStream, scenario: Arc<Scenario>) {
    let mut buf = Vec::with_capacity(4096);
    loop {
        let Some(head_end) = read_head(&mut stream, &mut buf).await else {
            return;
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
        let content_length = head
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse::<usize>().ok())?
            })
            .unwrap_or(0);
        // Drop the head and any request body (discovery and lists are GETs; be lenient).
        let consumed = (head_end + content_length).min(buf.len());
        buf.drain(..consumed);
        let target = head.split_whitespace().nth(1).unwrap_or("/").to_owned();
        let partial =
            head.contains("as=PartialObjectMetadata") && !scenario.partial_pods.is_empty();
        let (path, query) = target.split_once('?').unwrap_or((&target, ""));
        let param = |name: &str| {
            query.split('&').find_map(|kv| {
                let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
                (k == name).then(|| v.to_owned())
            })
        };
        let result = match path {
            "/api" => respond(&mut stream, 200, br#"{"kind":"APIVersions","versions":["v1"]}"#).await,
            "/api/v1" => respond(&mut stream, 200, br#"{"kind":"APIResourceList","groupVersion":"v1","resources":[{"name":"pods","singularName":"pod","namespaced":true,"kind":"Pod","verbs":["create","delete","get","list","patch","update","watch"],"shortNames":["po"]}]}"#).await,
            "/apis" => respond(&mut stream, 200, br#"{"kind":"APIGroupList","apiVersion":"v1","groups":[]}"#).await,
            p if p.ends_with("/pods") && param("watch").is_some_and(|w| w == "1" || w == "true") => {
                watch(&mut stream, &scenario, partial).await;
                return;
            }
            p if p.ends_with("/pods") => {
                let limit = param("limit").and_then(|l| l.parse().ok()).unwrap_or(500usize);
                let offset = param("continue").and_then(|c| c.parse().ok()).unwrap_or(0usize);
                let namespace = p
                    .strip_prefix("/api/v1/namespaces/")
                    .and_then(|rest| rest.strip_suffix("/pods"));
                let body = list_page(&scenario, namespace, offset, limit, partial);
                scenario
                    .bytes_sent
                    .fetch_add(body.len() as u64, Ordering::Relaxed);
                respond(&mut stream, 200, &body).await
            }
            _ => respond(&mut stream, 404, br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","reason":"NotFound","code":404}"#).await,
        };
        if result.is_err() {
            return;
        }
    }
}

/// Reads until a full request head is buffered; returns its length (with the blank line).
async fn read_head(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Option<usize> {
    loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            return Some(i + 4);
        }
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

async fn respond(stream: &mut TcpStream, code: u16, body: &[u8]) -> std::io::Result<()> {
    let reason = if code == 200 { "OK" } else { "Not Found" };
    let head = format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body).await
}

/// One page of the list: of every pod, or of the pods of `namespace` (`offset` and the
/// `continue` token count those). Watches are not filtered by namespace.
fn list_page(
    scenario: &Scenario,
    namespace: Option<&str>,
    offset: usize,
    limit: usize,
    partial: bool,
) -> Vec<u8> {
    let pods = match partial {
        true => &scenario.partial_pods,
        false => &scenario.pods,
    };
    let (first, step) = match namespace {
        None => (0, 1),
        Some(ns) => (
            NAMESPACES
                .iter()
                .position(|n| *n == ns)
                .unwrap_or(pods.len()),
            NAMESPACES.len(),
        ),
    };
    let listed = pods.len().saturating_sub(first).div_ceil(step);
    let end = (offset + limit.max(1)).min(listed);
    let mut body = Vec::with_capacity((end - offset) * 3700 + 256);
    body.extend_from_slice(match partial {
        true => br#"{"kind":"PartialObjectMetadataList","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":""#,
        false => br#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":""#,
    });
    body.extend_from_slice(scenario.list_rv().to_string().as_bytes());
    body.extend_from_slice(b"\"");
    if end < listed {
        // As kube-apiserver: the token, and how many items the pages after this one hold.
        let remaining = listed - end;
        body.extend_from_slice(
            format!(r#","continue":"{end}","remainingItemCount":{remaining}"#).as_bytes(),
        );
    }
    body.extend_from_slice(br#"},"items":["#);
    for k in offset..end {
        let slot = first + k * step;
        let pod = &pods[slot];
        if k > offset {
            body.push(b',');
        }
        let uid = Scenario::uid(slot as u64, 0);
        pod.write_list_item(&uid, FIRST_OBJECT_RV + slot as u64, &mut body);
    }
    body.extend_from_slice(b"]}");
    body
}

async fn watch(stream: &mut TcpStream, scenario: &Scenario, partial: bool) {
    let head =
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
    if stream.write_all(head.as_bytes()).await.is_err() {
        return;
    }
    if scenario.first_watch.swap(false, Ordering::SeqCst) {
        let _ = scenario.watch_started_at.set(Instant::now());
        if stream_events(stream, scenario, partial).await.is_err() {
            return;
        }
        scenario.all_sent.store(true, Ordering::SeqCst);
    }
    // Stay open and idle until the client goes away.
    let mut sink = [0u8; 1024];
    while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
}

async fn stream_events(
    stream: &mut TcpStream,
    scenario: &Scenario,
    partial: bool,
) -> std::io::Result<()> {
    let pods = match partial {
        true => &scenario.partial_pods,
        false => &scenario.pods,
    };
    let list_rv = scenario.list_rv();
    let mut generation = vec![0u64; scenario.pods.len()];
    let mut rv = list_rv;
    let mut body: Vec<u8> = Vec::with_capacity(8192);
    let mut wire: Vec<u8> = Vec::with_capacity(BURST_WRITE_BYTES + 8192);
    let mut change = 0u64;
    let pace = scenario
        .rate
        .map(|r| Duration::from_nanos(1_000_000_000 / r.max(1)));
    let start = tokio::time::Instant::now();
    for k in 0..scenario.events {
        let event_start = body.len();
        let (kind, slot) = scenario.event_kind(k);
        let type_name = match kind {
            Kind::Added => "ADDED",
            Kind::Modified => "MODIFIED",
            Kind::Deleted => "DELETED",
            Kind::Bookmark => "BOOKMARK",
        };
        body.extend_from_slice(br#"{"type":""#);
        body.extend_from_slice(type_name.as_bytes());
        body.extend_from_slice(br#"","object":"#);
        if kind == Kind::Bookmark {
            body.extend_from_slice(
                br#"{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":""#,
            );
            body.extend_from_slice(rv.to_string().as_bytes());
            body.extend_from_slice(br#"","creationTimestamp":null}}"#);
        } else {
            rv += 1;
            if kind == Kind::Added {
                generation[slot as usize] += 1;
            }
            let uid = Scenario::uid(slot, generation[slot as usize]);
            pods[slot as usize].write(&uid, rv, &mut body);
        }
        body.extend_from_slice(b"}\n");
        let flush_now = match pace {
            Some(p) => {
                tokio::time::sleep_until(start + p * (k as u32)).await;
                if kind != Kind::Bookmark {
                    let ns = scenario.epoch.elapsed().as_nanos() as u64;
                    scenario.sent_ns[change as usize].store(ns, Ordering::Relaxed);
                }
                true
            }
            None => false,
        };
        if kind != Kind::Bookmark {
            change += 1;
        }
        scenario
            .bytes_sent
            .fetch_add((body.len() - event_start) as u64, Ordering::Relaxed);
        let last = k + 1 == scenario.events;
        if flush_now || last || body.len() >= scenario.watch_chunk_bytes {
            push_chunk(&mut wire, &body);
            body.clear();
        }
        if flush_now || last || wire.len() >= BURST_WRITE_BYTES {
            stream.write_all(&wire).await?;
            wire.clear();
        }
    }
    Ok(())
}

/// Appends `data` as one HTTP/1.1 chunk (chunked transfer encoding).
fn push_chunk(wire: &mut Vec<u8>, data: &[u8]) {
    use std::io::Write as _;
    // Writing to a Vec cannot fail.
    let _ = write!(wire, "{:x}\r\n", data.len());
    wire.extend_from_slice(data);
    wire.extend_from_slice(b"\r\n");
}
