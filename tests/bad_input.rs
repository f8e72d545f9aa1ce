//! The bad-input matrix: what the API server (or something pretending to be it) can send that
//! kube2nats must survive. Each case runs the real binary (`--log-format json`) and asserts
//!
//! - a clear log line: found by its message and its `watch` field, with the cause in `error`;
//! - the right counter, scraped from the process' own `/metrics`;
//! - recovery: a change made after the bad input reaches a NATS subscriber;
//! - no crash: the process is still running at the end.
//!
//! Bad watch lines are injected into the simulated API server's open watches
//! ([`ApiServer::inject_line`]). What the simulator cannot do — an HTML page with status 200, an
//! empty 200 body, a connection reset before the response headers — comes from [`RawServer`], a
//! few dozen lines of HTTP/1.1 that answer discovery, the access review, and scripted list and
//! watch responses (bad first, good afterwards). TLS failures use the simulator with a CA that
//! did not sign its certificate, or reached through a proxy at an address its certificate does
//! not name.
//!
//! Cases of one kind run concurrently, each against its own server and daemon, with one
//! nats-server per test and a subject prefix per case.
//!
//! A configuration file that is not TOML is covered twice: `config_cli.rs`
//! (`rejects_a_file_that_is_not_toml`) checks `--check-config`; [`config_that_is_not_toml_exits_2`]
//! below checks that a normal start refuses it the same way, before anything starts.

mod common;

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{eventually, metric, pod, Inbox, WAIT};
use kube2nats_harness::apiserver::{ApiServer, ApiServerOptions};
use kube2nats_harness::nats::NatsServer;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::process::{Child, Command};

/// The message of the log line for a line that could not be decoded.
const MALFORMED: &str = "malformed watch data; resuming from the last good resourceVersion";
/// The message of the log line for every other restart that waits before retrying.
const BACKING_OFF: &str = "backing off";
/// `kubernetes.max_line_bytes` in these tests.
const MAX_LINE_BYTES: usize = 4096;

// ---------------------------------------------------------------------------------------------
// The daemon under test.

/// The real binary with JSON logs; its stderr is collected (parsed) in the background.
struct Daemon {
    child: Child,
    log: Arc<Mutex<Vec<Value>>>,
    metrics_url: String,
    _config: tempfile::NamedTempFile,
}

impl Daemon {
    /// Starts kube2nats with `config` and waits until its HTTP endpoint is up.
    async fn spawn(config: &str) -> Daemon {
        let file = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
        std::fs::write(file.path(), config).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_kube2nats"))
            .arg("--config")
            .arg(file.path())
            .args(["--log-format", "json"])
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("starting kube2nats");
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let sink = log.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let parsed = serde_json::from_str(&line)
                    .unwrap_or_else(|_| serde_json::json!({ "message": line, "not_json": true }));
                sink.lock().unwrap().push(parsed);
            }
        });
        let mut daemon = Daemon {
            child,
            log,
            metrics_url: String::new(),
            _config: file,
        };
        let serving = daemon
            .log_line("serving /metrics, /healthz and /readyz", None)
            .await;
        daemon.metrics_url = format!("http://{}/metrics", serving["address"].as_str().unwrap());
        daemon
    }

    /// Waits for a log line with this message (and `watch` field, if given); returns it whole.
    async fn log_line(&self, message: &str, watch: Option<&str>) -> Value {
        self.nth_log_line(message, watch, 1).await
    }

    /// Waits for the `n`th (from 1) log line with this message (and `watch` field, if given).
    async fn nth_log_line(&self, message: &str, watch: Option<&str>, n: usize) -> Value {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let found = self
                .log
                .lock()
                .unwrap()
                .iter()
                .filter(|l| l["message"] == message && watch.is_none_or(|w| l["watch"] == w))
                .nth(n - 1)
                .cloned();
            if let Some(line) = found {
                return line;
            }
            if tokio::time::Instant::now() > deadline {
                panic!(
                    "no log line #{n} {message:?} (watch {watch:?}); log:\n{}",
                    self.log_text()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn log_text(&self) -> String {
        let lines = self.log.lock().unwrap();
        lines
            .iter()
            .map(Value::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    }

    async fn metrics(&self) -> String {
        reqwest::get(&self.metrics_url)
            .await
            .expect("scraping kube2nats")
            .text()
            .await
            .unwrap()
    }

    /// A sample of the exposition, 0 if absent (a counter never incremented).
    async fn sample(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        metric(&self.metrics().await, name, labels).unwrap_or(0.0)
    }

    /// Panics unless the process is still running.
    fn assert_running(&mut self) {
        if let Some(status) = self.child.try_wait().unwrap() {
            panic!("kube2nats exited ({status}); log:\n{}", self.log_text());
        }
    }

    /// Resident set size in KiB, from `/proc`.
    fn rss_kib(&self) -> u64 {
        let pid = self.child.id().expect("running");
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS in /proc/PID/status")
    }
}

/// A configuration for one case: the API server at `api_url` (trusting `ca`), NATS, a subject
/// prefix and a state bucket of its own (the cases share one nats-server, and each has its own
/// API server), small lines and fast retries, one watch of pods named `pods`.
fn config(api_url: &str, ca: Option<&Path>, token: &Path, nats: &str, prefix: &str) -> String {
    let ca = ca
        .map(|p| format!("ca_file = {:?}\n", p.display().to_string()))
        .unwrap_or_default();
    format!(
        r#"
[kubernetes]
api_url = "{api_url}"
token_file = {token:?}
{ca}watch_timeout = "30s"
request_timeout = "5s"
max_line_bytes = {MAX_LINE_BYTES}
[kubernetes.backoff]
initial = "50ms"
max = "1s"
jitter = 0.0
[nats]
url = "{nats}"
[publish]
subject_prefix = "{prefix}"
[state]
bucket = "{prefix}"
cluster_id = "raw-server" # the scripted server does not serve the kube-system Namespace
[http]
listen = "127.0.0.1:0"
[[watches]]
name = "pods"
resource = "pods"
namespaces = ["default"]
"#,
        token = token.display().to_string(),
    )
}

/// A nats-server that a client can talk to. The harness calls a server ready once its port
/// accepts a TCP connection; with the hundreds of loopback sockets these tests open at once (300
/// watches, a daemon and a server per case), the port it picked can be taken by another socket
/// before nats-server binds it, and the "ready" server is then someone else. Start again then.
async fn nats_server() -> NatsServer {
    let mut last_error = String::new();
    for _ in 0..5 {
        let server = NatsServer::start().await.expect("starting nats-server");
        let connect = async_nats::ConnectOptions::new()
            .connection_timeout(Duration::from_secs(2))
            .connect(server.url());
        match tokio::time::timeout(Duration::from_secs(5), connect).await {
            Ok(Ok(_client)) => return server,
            Ok(Err(e)) => last_error = e.to_string(),
            Err(_) => last_error = "connect timed out".into(),
        }
    }
    panic!("no usable nats-server after 5 starts: {last_error}");
}

/// Runs `cases` concurrently (each is named by its first element); fails with the panic message
/// of every case that failed, and prints the row each successful case reports.
async fn run_all<F>(cases: Vec<(String, F)>)
where
    F: std::future::Future<Output = String> + Send + 'static,
{
    let handles: Vec<_> = cases
        .into_iter()
        .map(|(name, case)| (name, tokio::spawn(case)))
        .collect();
    let mut failures = Vec::new();
    for (name, handle) in handles {
        match handle.await {
            Ok(row) => println!("{name}: {row}"),
            Err(e) => {
                let message = match e.try_into_panic() {
                    Ok(p) => p
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_default(),
                    Err(e) => e.to_string(),
                };
                failures.push(format!("case {name}: {message}"));
            }
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n\n"));
}

/// Takes the next message from the inbox and asserts it is `ADDED <name>`.
async fn expect_added(inbox: &mut Inbox, name: &str) {
    // The very next message: a repeat or a spurious relist before it is a failure too.
    let got = inbox.next().await;
    assert_eq!(
        got.short(),
        format!("ADDED {name}"),
        "the next message on {}",
        got.subject
    );
}

// ---------------------------------------------------------------------------------------------
// Bad lines inside a watch stream (the simulator).

/// One bad line and what kube2nats must say and count about it.
struct LineCase {
    name: &'static str,
    line: Vec<u8>,
    /// The log line's message.
    message: &'static str,
    /// Text the log line's `error` field contains.
    error: &'static str,
    /// The `watch_restarts_total` reason.
    reason: &'static str,
    /// Whether `decode_errors_total` counts it.
    decode_error: bool,
}

fn line_cases() -> Vec<LineCase> {
    let over_limit = format!(
        "{{\"type\":\"ADDED\",\"object\":{{\"data\":\"{}\",\"metadata\":{{\"name\":\"big\",\"uid\":\"u-big\",\"resourceVersion\":\"1\"}}}}}}\n",
        "x".repeat(MAX_LINE_BYTES)
    );
    let malformed = |name, line: &[u8], error| LineCase {
        name,
        line: line.to_vec(),
        message: MALFORMED,
        error,
        reason: "decode_error",
        decode_error: true,
    };
    vec![
        malformed(
            "malformed_json",
            b"{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\n",
            "malformed watch line",
        ),
        // Over the limit with the metadata late: only a relist can say what changed.
        LineCase {
            name: "line_over_size_limit",
            line: over_limit.into_bytes(),
            message: "relisting to learn which object changed (raise kubernetes.max_line_bytes to receive such objects whole)",
            error: "over max_line_bytes (4096), without the object's metadata in its first bytes",
            reason: "line_too_long",
            decode_error: true,
        },
        malformed(
            "unknown_event_type",
            b"{\"type\":\"RENAMED\",\"object\":{\"metadata\":{\"name\":\"x\"}}}\n",
            "unknown watch event type \"RENAMED\"",
        ),
        malformed(
            "object_without_metadata",
            b"{\"type\":\"ADDED\",\"object\":{\"kind\":\"Pod\",\"spec\":{}}}\n",
            "watch event without metadata",
        ),
        malformed(
            "object_without_uid",
            b"{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"x\",\"resourceVersion\":\"9\"}}}\n",
            "watch event without metadata.uid",
        ),
        malformed(
            "object_without_resource_version",
            b"{\"type\":\"MODIFIED\",\"object\":{\"metadata\":{\"name\":\"x\",\"uid\":\"u-x\"}}}\n",
            "watch event without metadata.resourceVersion",
        ),
        malformed(
            "non_utf8_bytes",
            b"{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"\xff\xfe\",\"uid\":\"u\",\"resourceVersion\":\"9\"}}}\n",
            "malformed watch line",
        ),
        LineCase {
            name: "error_event_500",
            line: br#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"etcdserver: leader changed","reason":"InternalError","code":500}}
"#
            .to_vec(),
            message: BACKING_OFF,
            error: "500 (InternalError): etcdserver: leader changed",
            reason: "error_event",
            decode_error: false,
        },
    ]
}

async fn run_line_case(case: LineCase, nats_url: String) -> String {
    let sim = ApiServer::start(ApiServerOptions::default()).await.unwrap();
    sim.create("pods", Some("default"), pod("before"));
    let nc = async_nats::connect(&nats_url).await.unwrap();
    let mut inbox = Inbox::subscribe(&nc, &format!("{}.>", case.name)).await;
    let mut daemon = Daemon::spawn(&config(
        &sim.url(),
        None,
        &sim.token_file(),
        &nats_url,
        case.name,
    ))
    .await;
    expect_added(&mut inbox, "before").await;
    assert!(sim.wait_for_watches(1, WAIT).await, "the watch opened");

    sim.inject_line(case.line);
    let line = daemon.log_line(case.message, Some("pods")).await;
    let error = line["error"].as_str().unwrap_or_default();
    assert!(
        error.contains(case.error),
        "error {error:?} lacks {:?}",
        case.error
    );
    assert_eq!(
        line["level"],
        if case.decode_error { "WARN" } else { "INFO" }
    );
    if case.reason != "decode_error" {
        assert_eq!(line["reason"], case.reason, "{line}");
    }

    sim.create("pods", Some("default"), pod("after"));
    expect_added(&mut inbox, "after").await;

    let restarts = daemon
        .sample(
            "kube2nats_watch_restarts_total",
            &[("watch", "pods"), ("reason", case.reason)],
        )
        .await;
    assert_eq!(
        restarts, 1.0,
        "watch_restarts_total{{reason={}}}",
        case.reason
    );
    let decode_errors = daemon
        .sample("kube2nats_decode_errors_total", &[("watch", "pods")])
        .await;
    assert_eq!(decode_errors, if case.decode_error { 1.0 } else { 0.0 });
    daemon.assert_running();
    format!(
        "log {:?} error {error:?}; watch_restarts_total{{reason={:?}}}=1, decode_errors_total={decode_errors}; recovered",
        case.message, case.reason
    )
}

/// Malformed JSON, a line over the size limit, an unknown event type, objects without metadata,
/// uid or resourceVersion, non-UTF-8 bytes, and an ERROR event with a 500 Status: each is logged
/// with its cause and counted, the watch resumes from the last good resourceVersion, and the
/// next change is published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_watch_lines() {
    let nats = nats_server().await;
    let cases = line_cases()
        .into_iter()
        .map(|case| (case.name.to_owned(), run_line_case(case, nats.url())))
        .collect();
    run_all(cases).await;
}

// ---------------------------------------------------------------------------------------------
// Responses the simulator cannot give: a tiny scripted API server.

/// How the raw server answers one list or watch request.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Reply {
    /// What a real server sends: an empty list at revision 1, or a watch that delivers an ADDED
    /// for pod `after` (revision 2) and then stays open.
    Good,
    /// `200 OK`, `text/html`: the login page of a misconfigured proxy.
    Html,
    /// `200 OK`, `application/json`, no body at all.
    Empty,
    /// The connection is reset (RST) after the request, before any response header.
    Reset,
}

const HTML_PAGE: &str =
    "<!DOCTYPE html>\n<html><head><title>Sign in</title></head><body>Corporate proxy</body></html>\n";
const GOOD_LIST: &str =
    r#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[]}"#;
const GOOD_WATCH_LINE: &str = "{\"type\":\"ADDED\",\"object\":{\"kind\":\"Pod\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"after\",\"namespace\":\"default\",\"uid\":\"uid-after\",\"resourceVersion\":\"2\"}}}\n";

/// A minimal API server over HTTP/1.1 (one request per connection, `Connection: close`): enough
/// discovery for `pods`, an access review that allows everything, and list and watch requests
/// answered from a script, then [`Reply::Good`] once the script runs out.
struct RawServer {
    url: String,
    accept: tokio::task::JoinHandle<()>,
}

#[derive(Default)]
struct Script {
    lists: VecDeque<Reply>,
    watches: VecDeque<Reply>,
}

impl RawServer {
    async fn start(lists: &[Reply], watches: &[Reply]) -> RawServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let script = Arc::new(Mutex::new(Script {
            lists: lists.iter().copied().collect(),
            watches: watches.iter().copied().collect(),
        }));
        let accept = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            while let Ok((stream, _)) = listener.accept().await {
                connections.spawn(serve(stream, script.clone()));
            }
        });
        RawServer { url, accept }
    }
}

impl Drop for RawServer {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Answers one request on `stream`.
async fn serve(mut stream: TcpStream, script: Arc<Mutex<Script>>) {
    let Some((method, target)) = read_request(&mut stream).await else {
        return;
    };
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    let is_watch = query
        .split('&')
        .any(|kv| kv == "watch=1" || kv == "watch=true");
    let reply = |status: &str, content_type: &str, body: &str| {
        format!(
            "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    let json = |body: &str| reply("200 OK", "application/json", body);
    let response = match (method.as_str(), path) {
        ("GET", "/api/v1") => json(
            r#"{"kind":"APIResourceList","groupVersion":"v1","resources":[{"name":"pods","singularName":"pod","namespaced":true,"kind":"Pod","verbs":["get","list","watch"],"shortNames":["po"]}]}"#,
        ),
        ("GET", "/apis") => json(r#"{"kind":"APIGroupList","apiVersion":"v1","groups":[]}"#),
        ("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews") => {
            json(r#"{"kind":"SelfSubjectAccessReview","status":{"allowed":true}}"#)
        }
        ("GET", "/api/v1/namespaces/default/pods") => {
            let next = {
                let mut s = script.lock().unwrap();
                let queue = if is_watch {
                    &mut s.watches
                } else {
                    &mut s.lists
                };
                queue.pop_front().unwrap_or(Reply::Good)
            };
            match (next, is_watch) {
                (Reply::Good, false) => json(GOOD_LIST),
                (Reply::Good, true) => {
                    let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n";
                    let _ = stream.write_all(head.as_bytes()).await;
                    let _ = stream.write_all(GOOD_WATCH_LINE.as_bytes()).await;
                    // Stay open as a quiet watch does; the body is delimited by the close.
                    tokio::time::sleep(Duration::from_secs(120)).await;
                    return;
                }
                (Reply::Html, _) => reply("200 OK", "text/html; charset=utf-8", HTML_PAGE),
                (Reply::Empty, _) => json(""),
                (Reply::Reset, _) => {
                    // SO_LINGER 0: closing sends RST instead of FIN. (Deprecated because a
                    // non-zero linger blocks the thread on drop; zero does not.)
                    #[allow(deprecated)]
                    let _ = stream.set_linger(Some(Duration::ZERO));
                    return;
                }
            }
        }
        _ => reply(
            "404 Not Found",
            "application/json",
            r#"{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}"#,
        ),
    };
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// Reads a request's head and body; returns its method and target.
async fn read_request(stream: &mut TcpStream) -> Option<(String, String)> {
    let mut buf = Vec::new();
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let content_length: usize = head
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse().ok())
        .unwrap_or(0);
    let mut body = buf.len() - head_end;
    while body < content_length {
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        body += n;
    }
    let mut request_line = head.lines().next()?.split(' ');
    Some((
        request_line.next()?.to_owned(),
        request_line.next()?.to_owned(),
    ))
}

/// One scripted response and what kube2nats must say and count about it.
struct RawCase {
    name: &'static str,
    lists: &'static [Reply],
    watches: &'static [Reply],
    message: &'static str,
    /// `reason` (and `verb`) fields of the log line; `None` where the message says it.
    reason: &'static str,
    verb: Option<&'static str>,
    error: &'static str,
    /// Whether `decode_errors_total` counts it.
    decode_error: bool,
}

fn raw_cases() -> Vec<RawCase> {
    vec![
        RawCase {
            name: "html_200_for_a_watch",
            lists: &[],
            watches: &[Reply::Html],
            message: BACKING_OFF,
            reason: "unexpected_response",
            verb: Some("watch"),
            error: "watch answered with content-type \"text/html; charset=utf-8\", not JSON: <!DOCTYPE html>",
            decode_error: false,
        },
        RawCase {
            name: "html_200_for_a_list",
            lists: &[Reply::Html],
            watches: &[],
            message: "malformed list response; retrying the list",
            reason: "decode_error",
            verb: Some("list"),
            error: "<!DOCTYPE html>",
            decode_error: true,
        },
        RawCase {
            name: "reset_before_headers_watch",
            lists: &[],
            watches: &[Reply::Reset],
            message: BACKING_OFF,
            reason: "transport",
            verb: Some("watch"),
            error: "Connection reset by peer",
            decode_error: false,
        },
        RawCase {
            name: "reset_before_headers_list",
            lists: &[Reply::Reset],
            watches: &[],
            message: BACKING_OFF,
            reason: "transport",
            verb: Some("list"),
            error: "Connection reset by peer",
            decode_error: false,
        },
        RawCase {
            name: "empty_200_for_a_watch",
            lists: &[],
            watches: &[Reply::Empty],
            message: BACKING_OFF,
            reason: "very_short_watch",
            verb: None,
            error: "watch ended within a second without a line",
            decode_error: false,
        },
        RawCase {
            name: "empty_200_for_a_list",
            lists: &[Reply::Empty],
            watches: &[],
            message: "malformed list response; retrying the list",
            reason: "decode_error",
            verb: Some("list"),
            error: "EOF while parsing",
            decode_error: true,
        },
    ]
}

async fn run_raw_case(case: RawCase, nats_url: String, token: PathBuf) -> String {
    let server = RawServer::start(case.lists, case.watches).await;
    let nc = async_nats::connect(&nats_url).await.unwrap();
    let mut inbox = Inbox::subscribe(&nc, &format!("{}.>", case.name)).await;
    let mut daemon = Daemon::spawn(&config(&server.url, None, &token, &nats_url, case.name)).await;

    let line = daemon.log_line(case.message, Some("pods")).await;
    let error = line["error"].as_str().unwrap_or_default();
    assert!(
        error.contains(case.error),
        "error {error:?} lacks {:?}",
        case.error
    );
    if case.message == BACKING_OFF {
        assert_eq!(line["reason"], case.reason, "{line}");
    }
    if let Some(verb) = case.verb {
        assert_eq!(line["verb"], verb, "{line}");
    }

    // Recovery: the scripted good watch delivers pod `after`.
    expect_added(&mut inbox, "after").await;
    let restarts = daemon
        .sample(
            "kube2nats_watch_restarts_total",
            &[("watch", "pods"), ("reason", case.reason)],
        )
        .await;
    assert_eq!(
        restarts, 1.0,
        "watch_restarts_total{{reason={}}}",
        case.reason
    );
    let decode_errors = daemon
        .sample("kube2nats_decode_errors_total", &[("watch", "pods")])
        .await;
    assert_eq!(decode_errors, if case.decode_error { 1.0 } else { 0.0 });
    daemon.assert_running();
    format!(
        "log {:?} error {error:?}; watch_restarts_total{{reason={:?}}}=1, decode_errors_total={decode_errors}; recovered",
        case.message, case.reason
    )
}

/// An HTML page with status 200 (a misconfigured proxy) for a watch and for a list, a connection
/// reset before the response headers, and an empty 200 body for a watch (a very short watch:
/// back off) and for a list (a decode error).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_responses() {
    let nats = nats_server().await;
    let dir = tempfile::tempdir().unwrap();
    let token = common::token_file(dir.path(), "raw-server-ignores-it");
    let cases = raw_cases()
        .into_iter()
        .map(|case| {
            (
                case.name.to_owned(),
                run_raw_case(case, nats.url(), token.clone()),
            )
        })
        .collect();
    run_all(cases).await;
}

// ---------------------------------------------------------------------------------------------
// TLS.

/// Forwards every connection to `127.0.0.2:PORT` to `target`: the same server reached by an
/// address its certificate does not name.
async fn proxy_from_127_0_0_2(target: std::net::SocketAddr) -> (u16, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.2:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let task = tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            tokio::spawn(async move {
                if let Ok(mut server) = TcpStream::connect(target).await {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                }
            });
        }
    });
    (port, task)
}

/// A certificate signed by a CA that kube2nats does not trust, and one that does not name the
/// address kube2nats connects to: discovery fails with a log line naming the certificate
/// problem, is retried with backoff (counted as API requests with code 0), readiness stays false
/// and the process keeps running. There is no recovery to wait for: only a configuration change
/// fixes this, so kube2nats must keep saying what is wrong.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_certificate_that_does_not_match() {
    let tls = ApiServerOptions {
        tls: true,
        ..ApiServerOptions::default()
    };
    let sim = ApiServer::start(tls.clone()).await.unwrap();
    let other = ApiServer::start(tls).await.unwrap();
    let (port, _proxy) = proxy_from_127_0_0_2(sim.addr()).await;
    let nats = nats_server().await;
    let sim_ca = sim.ca_file().unwrap();
    let other_ca = other.ca_file().unwrap();

    let cases = [
        // Both CAs carry the same name, so rustls finds the issuer and rejects its signature.
        (
            "unknown_ca",
            sim.url(),
            other_ca,
            "invalid peer certificate: BadSignature",
        ),
        (
            "name_mismatch",
            format!("https://127.0.0.2:{port}"),
            sim_ca,
            "invalid peer certificate: certificate not valid for name \"127.0.0.2\"",
        ),
    ];
    let token = sim.token_file();
    let cases = cases
        .into_iter()
        .map(|(name, url, ca, cause)| {
            let text = config(&url, Some(&ca), &token, &nats.url(), name);
            (name.to_owned(), async move {
                let mut daemon = Daemon::spawn(&text).await;
                // The second attempt: it is retried, and says the same again.
                let line = daemon
                    .nth_log_line("API discovery failed; retrying", None, 2)
                    .await;
                let error = line["error"].as_str().unwrap_or_default().to_owned();
                assert!(error.contains(cause), "error {error:?} does not name {cause}");
                let failed = daemon
                    .sample("kube2nats_api_requests_total", &[("verb", "get"), ("code", "0")])
                    .await;
                assert!(failed >= 2.0, "api_requests_total{{verb=get,code=0}} = {failed}");
                let ready = reqwest::get(daemon.metrics_url.replace("/metrics", "/readyz"))
                    .await
                    .unwrap()
                    .status();
                assert_eq!(ready.as_u16(), 503, "not ready while the API server is unusable");
                daemon.assert_running();
                format!("log \"API discovery failed; retrying\" error {error:?}; api_requests_total{{verb=get,code=0}}={failed}; retried, not ready, running")
            })
        })
        .collect();
    run_all(cases).await;
}

// ---------------------------------------------------------------------------------------------
// Configuration.

/// 300 namespaces in one watch: 300 list+watch targets start, all sync, a change in the last
/// namespace is published, and memory stays small (the RSS is printed; the bound is generous,
/// a leak per target would be in the megabytes each).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hundred_namespaces() {
    const N: usize = 300;
    const RSS_BOUND_KIB: u64 = 128 * 1024;
    let sim = ApiServer::start(ApiServerOptions::default()).await.unwrap();
    let nats = nats_server().await;
    let namespaces: Vec<String> = (0..N).map(|i| format!("ns-{i:03}")).collect();
    for ns in &namespaces {
        sim.create("pods", Some(ns), pod("before"));
    }
    let nc = async_nats::connect(&nats.url()).await.unwrap();
    let mut inbox = Inbox::subscribe(&nc, "many.>").await;
    let list = namespaces
        .iter()
        .map(|n| format!("{n:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    let text = config(&sim.url(), None, &sim.token_file(), &nats.url(), "many").replace(
        "namespaces = [\"default\"]",
        &format!("namespaces = [{list}]"),
    );
    let started = tokio::time::Instant::now();
    let mut daemon = Daemon::spawn(&text).await;
    let sync_wait = Duration::from_secs(30);
    let deadline = tokio::time::Instant::now() + sync_wait;
    while daemon
        .sample("kube2nats_watch_synced", &[("watch", "pods")])
        .await
        != 1.0
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not synced within {sync_wait:?}; log:\n{}",
            daemon.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let synced_in = started.elapsed();
    let mut announced: Vec<String> = inbox
        .take(N)
        .await
        .iter()
        .map(|m| {
            assert_eq!(m.short(), "ADDED before", "{}", m.subject);
            m.header("Kube-Namespace").unwrap_or_default().to_owned()
        })
        .collect();
    announced.sort();
    assert_eq!(
        announced, namespaces,
        "every namespace's pod announced once"
    );
    eventually("every watch open", || sim.open_watches() == N).await;
    sim.create("pods", Some("ns-299"), pod("after"));
    expect_added(&mut inbox, "after").await;
    let tracked = daemon
        .sample("kube2nats_tracked_objects", &[("watch", "pods")])
        .await;
    assert_eq!(tracked, (N + 1) as f64);
    let rss = daemon.rss_kib();
    println!("{N} namespaces: synced in {synced_in:?}, RSS {rss} KiB");
    assert!(rss < RSS_BOUND_KIB, "RSS {rss} KiB with {N} namespaces");
    daemon.assert_running();
}

/// A configuration file that is not TOML stops a normal start with exit code 2 and a line naming
/// the file, before anything starts (`config_cli.rs` checks the same for `--check-config`).
#[tokio::test]
async fn config_that_is_not_toml_exits_2() {
    let file = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
    std::fs::write(file.path(), "{\"watches\": [{\"name\": \"pods\"}]}\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_kube2nats"))
        .arg("--config")
        .arg(file.path())
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr:\n{stderr}");
    assert!(
        stderr.contains(&format!("{}: not a valid TOML file", file.path().display())),
        "{stderr}"
    );
}
