//! Shared helpers of the integration tests: a whole daemon pointed at the simulated API server,
//! and a collector of NATS messages.

#![allow(dead_code)]

pub mod daemon_env;
pub mod restart;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use kube2nats_harness::apiserver::ApiServer;
use serde_json::{json, Value};

/// How long a test waits for something that should happen promptly.
pub const WAIT: Duration = Duration::from_secs(10);

/// How long a test listens for a message that must not come: a repeat caused by a publish retry
/// or a watch resume arrives after a backoff of a second or two, so shorter windows prove little.
pub const QUIET: Duration = Duration::from_millis(2500);

pub fn pod(name: &str) -> Value {
    json!({
        "metadata": {"name": name, "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "main", "image": "nginx:1.27"}]}
    })
}

/// A file holding `token`, as a mounted service-account token.
pub fn token_file(dir: &Path, token: &str) -> PathBuf {
    let path = dir.join("token");
    std::fs::write(&path, token).expect("writing the test token file");
    path
}

/// The text of kube2nats' `/metrics`, served on loopback at `port`.
pub async fn scrape_metrics(port: u16) -> String {
    reqwest::get(format!("http://127.0.0.1:{port}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// A header of a NATS message as text; empty when absent.
pub fn header_text(headers: Option<&async_nats::HeaderMap>, name: &str) -> String {
    headers
        .and_then(|h| h.get(name))
        .map(|v| v.as_str().to_owned())
        .unwrap_or_default()
}

/// The resourceVersion of a simulator object.
pub fn rv(obj: &Value) -> String {
    obj["metadata"]["resourceVersion"]
        .as_str()
        .expect("object has a resourceVersion")
        .to_owned()
}

/// A NATS message as a test looks at it.
#[derive(Debug, Clone)]
pub struct Got {
    pub subject: String,
    pub headers: HashMap<String, String>,
    pub payload: Value,
}

impl Got {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }

    /// `ADDED web-1`: the event type and name, the usual thing to compare.
    pub fn short(&self) -> String {
        format!(
            "{} {}",
            self.header("Kube-Event-Type").unwrap_or("?"),
            self.header("Kube-Name").unwrap_or("?")
        )
    }
}

pub fn got(msg: async_nats::Message) -> Got {
    let headers = msg
        .headers
        .as_ref()
        .map(|h| {
            h.iter()
                .map(|(k, v)| {
                    (
                        k.to_string(),
                        v.first().map(|v| v.as_str().to_owned()).unwrap_or_default(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let payload = serde_json::from_slice(&msg.payload)
        .unwrap_or_else(|e| panic!("payload on {} is not JSON: {e}", msg.subject));
    Got {
        subject: msg.subject.to_string(),
        headers,
        payload,
    }
}

/// Collects messages from a subscription.
pub struct Inbox {
    sub: async_nats::Subscriber,
}

impl Inbox {
    pub async fn subscribe(nc: &async_nats::Client, subject: &str) -> Inbox {
        let sub = nc.subscribe(subject.to_owned()).await.expect("subscribing");
        kube2nats_harness::nats::round_trip(nc)
            .await
            .expect("the server has the subscription");
        Inbox { sub }
    }

    pub async fn next(&mut self) -> Got {
        match tokio::time::timeout(WAIT, self.sub.next()).await {
            Ok(Some(m)) => got(m),
            Ok(None) => panic!("subscription closed"),
            Err(_) => panic!("no NATS message within {WAIT:?}"),
        }
    }

    /// The next `n` messages.
    pub async fn take(&mut self, n: usize) -> Vec<Got> {
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(self.next().await);
        }
        out
    }

    /// Asserts that nothing more arrives for `d`.
    pub async fn quiet_for(&mut self, d: Duration) {
        if let Ok(Some(m)) = tokio::time::timeout(d, self.sub.next()).await {
            panic!("unexpected extra message: {:?}", got(m).short());
        }
    }
}

/// Loads a kube2nats configuration from TOML text, with no environment.
pub fn config_from(toml: &str) -> kube2nats::facade::Config {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("kube2nats.toml");
    std::fs::write(&path, toml).expect("writing config");
    kube2nats::facade::load(Some(&path), Some(HashMap::new()))
        .unwrap_or_else(|e| panic!("test config invalid:\n{e}\n---\n{toml}"))
}

/// The `[kubernetes]` and `[http]` sections pointing at `sim` with fast timings for tests.
pub fn kube_section(sim: &ApiServer, token_file: &Path) -> String {
    let ca = sim
        .ca_file()
        .map(|p| format!("ca_file = {:?}\n", p.display().to_string()))
        .unwrap_or_default();
    format!(
        r#"
[kubernetes]
api_url = "{url}"
token_file = {token:?}
{ca}watch_timeout = "30s"
[kubernetes.backoff]
initial = "50ms"
max = "1s"
jitter = 0.0
[http]
listen = "127.0.0.1:0"
[shutdown]
grace_period = "5s"
"#,
        url = sim.url(),
        token = token_file.display().to_string(),
    )
}

/// A daemon configuration pointed at `sim` (the initial token written into `dir`) and core NATS
/// at `nats`, followed by `extra` (watches, sections).
pub fn core_config(
    sim: &ApiServer,
    nats: &kube2nats_harness::nats::NatsServer,
    dir: &Path,
    extra: &str,
) -> String {
    let token = token_file(dir, kube2nats_harness::apiserver::INITIAL_TOKEN);
    format!(
        "{}\n[nats]\nurl = \"{}\"\n{extra}",
        kube_section(sim, &token),
        nats.url()
    )
}

/// A daemon configuration watching pods in `default` of `sim` (token file written into `dir`),
/// publishing to `nats` in JetStream mode into the default managed stream.
pub fn jetstream_pods_config(
    sim: &ApiServer,
    nats: &kube2nats_harness::nats::NatsServer,
    dir: &Path,
) -> String {
    let token = token_file(dir, kube2nats_harness::apiserver::INITIAL_TOKEN);
    format!(
        "{}\n[nats]\nurl = \"{}\"\nmode = \"jetstream\"\n[nats.jetstream.stream]\n[[watches]]\nname = \"pods\"\nresource = \"pods\"\nnamespaces = [\"default\"]\n",
        kube_section(sim, &token),
        nats.url()
    )
}

/// Waits until `f` holds, polling.
pub async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !f() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The value of a sample in a Prometheus text exposition, e.g.
/// `metric(&text, "kube2nats_events_published_total", &[("watch", "pods"), ("type", "ADDED")])`.
pub fn metric(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples(text, name, labels).next()
}

/// The sum of every sample of `name` that has `labels` (e.g. over all watches).
pub fn metric_sum(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    samples(text, name, labels).sum()
}

/// The values of the samples of `name` that carry every one of `labels`.
fn samples<'a>(
    text: &'a str,
    name: &'a str,
    labels: &'a [(&'a str, &'a str)],
) -> impl Iterator<Item = f64> + 'a {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(move |line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (metric_name, label_text) = match series.split_once('{') {
                Some((n, rest)) => (n, rest.trim_end_matches('}')),
                None => (series, ""),
            };
            let all = labels
                .iter()
                .all(|(k, v)| label_text.split(',').any(|kv| kv == format!("{k}=\"{v}\"")));
            if metric_name == name && all {
                value.parse().ok()
            } else {
                None
            }
        })
}

/// The real binary, its stderr lines collected in the background.
pub struct Process {
    child: Child,
    /// The lines the reader thread has read and no method has taken yet.
    lines: std::sync::mpsc::Receiver<String>,
    /// Every line taken from `lines` so far, in order: [`Process::log`] searches all of them,
    /// those [`Process::line_with`] passed over included.
    taken: std::cell::RefCell<Vec<String>>,
    _config: Option<tempfile::NamedTempFile>,
    /// [`Process::http_url`], once read from the log.
    http: std::sync::OnceLock<String>,
}

impl Process {
    /// Starts the binary with `config` (TOML text) and `RUST_LOG=info`.
    pub fn spawn(config: &str) -> Process {
        Process::spawn_with(config, &[])
    }

    /// As [`Process::spawn`], with extra arguments (e.g. `--log-format json`).
    pub fn spawn_with(config: &str, args: &[&str]) -> Process {
        Process::spawn_env(config, args, &[])
    }

    /// As [`Process::spawn_with`], with extra environment variables (e.g. `POD_NAME`).
    pub fn spawn_env(config: &str, args: &[&str], env: &[(&str, &str)]) -> Process {
        Process::spawn_command(config, |command| {
            command.args(args).envs(env.iter().copied());
        })
    }

    /// As [`Process::spawn`], with the command adjusted by `adjust` (arguments, environment,
    /// limits set in `pre_exec`) before it starts.
    pub fn spawn_command(config: &str, adjust: impl FnOnce(&mut Command)) -> Process {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        file.write_all(config.as_bytes()).unwrap();
        let mut process = Process::spawn_file(file.path(), adjust);
        process._config = Some(file);
        process
    }

    /// Starts the binary with `--config path`, a file the test owns (and may rewrite), adjusted
    /// as by [`Process::spawn_command`].
    pub fn spawn_file(path: &Path, adjust: impl FnOnce(&mut Command)) -> Process {
        let mut command = Command::new(env!("CARGO_BIN_EXE_kube2nats"));
        command
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        adjust(&mut command);
        let mut child = command
            .arg("--config")
            .arg(path)
            .spawn()
            .expect("starting kube2nats");
        let stderr = child.stderr.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Process {
            child,
            lines,
            taken: std::cell::RefCell::default(),
            _config: None,
            http: std::sync::OnceLock::new(),
        }
    }

    /// The base URL of the HTTP endpoints (`http://ADDRESS`), from the `serving /metrics` line
    /// of a process started with `--log-format json` (waited for at the first call).
    pub fn http_url(&self) -> String {
        self.http
            .get_or_init(|| {
                let line = self.line_with(&["serving /metrics"]);
                let line: serde_json::Value = serde_json::from_str(&line).expect("a JSON log line");
                let address = line["address"].as_str().expect("the HTTP address");
                format!("http://{address}")
            })
            .clone()
    }

    /// The text of `/metrics` (see [`Process::http_url`]).
    pub async fn metrics(&self) -> String {
        reqwest::get(format!("{}/metrics", self.http_url()))
            .await
            .expect("kube2nats /metrics")
            .text()
            .await
            .unwrap_or_default()
    }

    /// Waits for a line containing every one of `needles`, after the lines taken so far.
    pub fn line_with(&self, needles: &[&str]) -> String {
        self.line_within(needles, WAIT)
    }

    /// Waits at most `within` for a line containing every one of `needles`, after the lines
    /// taken so far. The lines it passes over stay in [`Process::log`].
    pub fn line_within(&self, needles: &[&str], within: Duration) -> String {
        let deadline = tokio::time::Instant::now() + within;
        let from = self.taken.borrow().len();
        while tokio::time::Instant::now() < deadline {
            if let Ok(line) = self.lines.recv_timeout(Duration::from_millis(100)) {
                self.taken.borrow_mut().push(line.clone());
                if needles.iter().all(|n| line.contains(n)) {
                    return line;
                }
            }
        }
        panic!(
            "no log line with {needles:?}; saw:\n{}",
            self.taken.borrow()[from..].join("\n")
        );
    }

    /// The lines not taken yet (see [`Process::take_rest`]).
    pub fn rest(&self) -> String {
        let from = self.taken.borrow().len();
        self.take_rest();
        self.taken.borrow()[from..].join("\n")
    }

    /// Every line the process has printed, from its first: for checks that something was never
    /// logged (see [`Process::take_rest`]).
    pub fn log(&self) -> String {
        self.take_rest();
        self.taken.borrow().join("\n")
    }

    /// Takes the lines not taken yet. The reader thread may still be behind the process (it has
    /// exited, but its last lines sit in the pipe), so this takes lines until the reader reaches
    /// the end of stderr or falls quiet for a second, at most five seconds in all.
    fn take_rest(&self) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while tokio::time::Instant::now() < deadline {
            match self.lines.recv_timeout(Duration::from_secs(1)) {
                Ok(line) => self.taken.borrow_mut().push(line),
                Err(_) => break,
            }
        }
    }

    pub fn terminate(&self) {
        let ok = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok);
    }

    /// Waits for exit; returns the code and how long it took.
    pub fn wait_exit(&mut self, within: Duration) -> (Option<i32>, Duration) {
        let started = tokio::time::Instant::now();
        while started.elapsed() < within {
            if let Some(status) = self.child.try_wait().unwrap() {
                return (status.code(), started.elapsed());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        panic!(
            "kube2nats did not exit within {within:?}; log:\n{}",
            self.rest()
        );
    }
}

impl Process {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `kill -9`: the process gets no chance to clean up, as in an OOM kill or a node loss.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Resident memory of a process, from /proc (KiB; 0 once it has exited).
pub fn rss_kib(pid: u32) -> u64 {
    proc_status_kib(pid, "VmRSS:")
}

/// Peak resident memory of a process so far (VmHWM, KiB; 0 once it has exited).
pub fn peak_rss_kib(pid: u32) -> u64 {
    proc_status_kib(pid, "VmHWM:")
}

fn proc_status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// A loopback port that was free a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// `(Kube-Uid, Kube-Resource-Version, Kube-Event-Type)`: what identifies one publish.
pub type EventKey = (String, String, String);

/// Every message kube2nats publishes, counted on a plain core subscription beside a JetStream
/// stream, whose own de-duplication (by `Nats-Msg-Id`) would otherwise hide kube2nats' repeats.
///
/// One connection per NATS epoch (the time between two restarts of nats-server): a repeat within
/// one epoch is kube2nats' own; a repeat across a restart is a publish retried because its
/// acknowledgement was lost, which the stream absorbs.
pub struct CoreTap {
    url: String,
    seen: Arc<std::sync::Mutex<Vec<(EventKey, usize, tokio::time::Instant)>>>,
    epoch: usize,
    /// When each epoch's connection was opened.
    epoch_started: Vec<tokio::time::Instant>,
    running: Option<(
        tokio::task::JoinHandle<()>,
        tokio::sync::oneshot::Sender<()>,
    )>,
}

impl CoreTap {
    /// Subscribes to `subject` on the server at `url`.
    pub async fn start(url: &str, subject: &str) -> CoreTap {
        let mut tap = CoreTap {
            url: url.to_owned(),
            seen: Arc::default(),
            epoch: 0,
            epoch_started: Vec::new(),
            running: None,
        };
        tap.open_epoch(subject).await;
        tap
    }

    async fn open_epoch(&mut self, subject: &str) {
        let nc = async_nats::ConnectOptions::new()
            .subscription_capacity(1 << 20)
            .connect(&self.url)
            .await
            .expect("the core tap connects");
        let mut sub = nc
            .subscribe(subject.to_owned())
            .await
            .expect("the core tap subscribes");
        kube2nats_harness::nats::round_trip(&nc)
            .await
            .expect("the server has the core tap's subscription");
        self.epoch_started.push(tokio::time::Instant::now());
        let (stop_tx, mut stop) = tokio::sync::oneshot::channel::<()>();
        let (seen, epoch) = (self.seen.clone(), self.epoch);
        let record = move |m: async_nats::Message| {
            let h = |k: &str| header_text(m.headers.as_ref(), k);
            let key = (
                h("Kube-Uid"),
                h("Kube-Resource-Version"),
                h("Kube-Event-Type"),
            );
            seen.lock()
                .unwrap()
                .push((key, epoch, tokio::time::Instant::now()));
        };
        let task = tokio::spawn(async move {
            loop {
                tokio::select! {
                    m = sub.next() => match m {
                        Some(m) => record(m),
                        None => return,
                    },
                    _ = &mut stop => break,
                }
            }
            // The server is gone: what it delivered is buffered here; take it, then let go.
            while let Ok(Some(m)) =
                tokio::time::timeout(Duration::from_millis(300), sub.next()).await
            {
                record(m);
            }
            drop(nc);
        });
        self.running = Some((task, stop_tx));
    }

    /// Call after nats-server stopped: closes this epoch's connection once it has handed over
    /// what it received.
    pub async fn server_stopped(&mut self) {
        if let Some((task, stop)) = self.running.take() {
            let _ = stop.send(());
            let _ = task.await;
        }
        self.epoch += 1;
    }

    /// Call after nats-server is back: a new connection for the new epoch.
    pub async fn server_restarted(&mut self, subject: &str) {
        self.open_epoch(subject).await;
    }

    /// Messages counted so far.
    pub fn count(&self) -> usize {
        self.seen.lock().unwrap().len()
    }

    /// Every message counted, in arrival order.
    pub fn keys(&self) -> Vec<EventKey> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .map(|(k, _, _)| k.clone())
            .collect()
    }

    /// Per uid, the resourceVersion and type of the last message that arrived.
    pub fn last_by_uid(&self) -> HashMap<String, (String, String)> {
        self.keys()
            .into_iter()
            .map(|(uid, rv, t)| (uid, (rv, t)))
            .collect()
    }

    /// Repeats kube2nats cannot blame on NATS (each a problem), and the number of repeats a
    /// restart explains. A JetStream publish made while NATS is down sits in the client's queue;
    /// when its acknowledgement times out kube2nats publishes it again, and after the restart both
    /// go out. So a repeat is explained when its copies arrived in different epochs, or both
    /// within [`RESTART_SETTLING`] of the restart that began their epoch.
    pub fn repeats(&self) -> (Vec<String>, usize) {
        let mut first: HashMap<&EventKey, (usize, tokio::time::Instant)> = HashMap::new();
        let (mut own, mut explained) = (Vec::new(), 0);
        let seen = self.seen.lock().unwrap();
        for (key, epoch, at) in seen.iter() {
            let Some(&(first_epoch, first_at)) = first.get(key) else {
                first.insert(key, (*epoch, *at));
                continue;
            };
            let settling = *epoch > 0 && first_at - self.epoch_started[*epoch] < RESTART_SETTLING;
            if first_epoch != *epoch || settling {
                explained += 1;
            } else {
                own.push(format!(
                    "published twice: {} {} {} ({:?} apart, {:?} after NATS epoch {epoch} began)",
                    key.0,
                    key.1,
                    key.2,
                    *at - first_at,
                    first_at - self.epoch_started[*epoch]
                ));
            }
        }
        (own, explained)
    }
}

/// How long after a NATS restart publishes queued during the outage and their retries may both
/// arrive (observed: about 2 s; generous for a loaded machine).
pub const RESTART_SETTLING: Duration = Duration::from_secs(10);

impl Drop for CoreTap {
    fn drop(&mut self) {
        if let Some((task, _)) = self.running.take() {
            task.abort();
        }
    }
}

impl Process {
    /// Whether the process has not exited.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}
