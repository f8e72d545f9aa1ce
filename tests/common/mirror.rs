//! The two sides of the object mirror (docs/subscribers.md) for the informer tests: the subscriber
//! kits' example informers (clients/*/examples), run as real processes, and a stand-in writer.
//!
//! kube2nats' own mirror (docs/mirror.md) writes the bucket in the informer tests; it deletes with
//! TTL'd delete markers and never purges. [`Mirror`] writes the contract's other deletion, a
//! purge, which kube2nats does not produce: the key, value and `Kube-*` headers as kube2nats
//! writes them, and purges with a per-message TTL.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::{self, kv, stream::StorageType};
use async_nats::HeaderMap;
use serde_json::Value;

/// How long a purge's marker lives before it expires; the bucket's marker TTL. (The server
/// leaves a marker in place of an expired delete marker, none in place of an expired purge.)
pub const MARKER_TTL: Duration = Duration::from_secs(1);

pub use kube2nats_harness::cluster::{core_key, BUCKET};

/// The stand-in writer: the bucket, and puts and purges written into it.
pub struct Mirror {
    js: jetstream::Context,
}

impl Mirror {
    /// Creates the bucket as kube2nats does: one value per key, file storage, per-message TTLs
    /// and server markers.
    pub async fn create(nats_url: &str) -> Mirror {
        let client = async_nats::connect(nats_url)
            .await
            .expect("the mirror connects to NATS");
        let js = jetstream::new(client);
        // Just after a nats-server (re)start JetStream may not answer yet: try for a while.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let created = js
                .create_key_value(kv::Config {
                    bucket: BUCKET.to_owned(),
                    history: 1,
                    storage: StorageType::File,
                    limit_markers: Some(MARKER_TTL),
                    ..Default::default()
                })
                .await;
            match created {
                Ok(_) => return Mirror { js },
                Err(e) if tokio::time::Instant::now() < deadline => {
                    eprintln!("creating the bucket: {e}; again");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => panic!("creating the bucket: {e}"),
            }
        }
    }

    /// Writes an object's current state: the object as the event message carries it, with its
    /// `Kube-*` headers.
    pub async fn put(&self, resource: &str, kind: &str, obj: &Value) {
        let meta = &obj["metadata"];
        let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
        let mut headers = HeaderMap::new();
        headers.insert(
            "Kube-Resource-Version",
            text(&meta["resourceVersion"]).as_str(),
        );
        headers.insert("Kube-Uid", text(&meta["uid"]).as_str());
        headers.insert("Kube-Kind", kind);
        headers.insert("Kube-Api-Version", "v1");
        headers.insert("Kube-Namespace", text(&meta["namespace"]).as_str());
        headers.insert("Kube-Name", text(&meta["name"]).as_str());
        let payload = serde_json::to_vec(obj).expect("an object serializes");
        self.publish(core_key(resource, obj), headers, payload)
            .await;
    }

    /// A deletion as a purge (which also drops the key's older values), with a TTL.
    pub async fn purge(&self, resource: &str, obj: &Value) {
        let mut headers = HeaderMap::new();
        headers.insert("KV-Operation", "PURGE");
        headers.insert("Nats-Rollup", "sub");
        headers.insert("Nats-TTL", format!("{}s", MARKER_TTL.as_secs()).as_str());
        self.publish(core_key(resource, obj), headers, Vec::new())
            .await;
    }

    /// Waits until the bucket's stream holds `live` messages, the values of the live keys alone:
    /// every marker expired.
    pub async fn markers_expired(&self, live: u64) {
        let deadline = tokio::time::Instant::now() + INFORMER_WAIT;
        loop {
            let mut stream = self
                .js
                .get_stream(format!("KV_{BUCKET}"))
                .await
                .expect("the bucket's stream");
            let messages = stream
                .info()
                .await
                .expect("the stream's info")
                .state
                .messages;
            if messages == live {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the bucket holds {messages} messages after {INFORMER_WAIT:?}, not {live}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn publish(&self, key: String, headers: HeaderMap, payload: Vec<u8>) {
        let subject = format!("$KV.{BUCKET}.{key}");
        self.js
            .publish_with_headers(subject, headers, payload.into())
            .await
            .expect("publishing to the bucket")
            .await
            .expect("the bucket acknowledges");
    }
}

/// `(namespace, name, resourceVersion)`, sorted: a cache as an informer dumps it, or the API
/// server's objects.
pub type Objects = Vec<(String, String, String)>;

/// The objects of `resource` in every namespace, as the API server lists them.
pub async fn api_objects(api_url: &str, resource: &str) -> Objects {
    let body = reqwest::Client::new()
        .get(format!("{api_url}/api/v1/{resource}"))
        .bearer_auth(kube2nats_harness::apiserver::INITIAL_TOKEN)
        .send()
        .await
        .expect("listing the API server")
        .bytes()
        .await
        .expect("reading the list");
    let list: Value = serde_json::from_slice(&body).expect("the list is JSON");
    let items = list["items"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut objects: Objects = items
        .iter()
        .map(|o| {
            let m = &o["metadata"];
            let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
            (s(&m["namespace"]), s(&m["name"]), s(&m["resourceVersion"]))
        })
        .collect();
    objects.sort();
    objects
}

/// Which example informer.
#[derive(Debug, Clone, Copy)]
pub enum Language {
    Python,
    Rust,
    Node,
}

const INSTALL: &str =
    "run `scripts/install-test-tools kits` and export the lines it prints (scripts/test does both)";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The example informer of each kit (clients/*/examples): the same command line and output.
fn informer_command(language: Language) -> Command {
    match language {
        Language::Python => {
            let python = std::env::var("KITS_PYTHON").unwrap_or_else(|_| {
                panic!("KITS_PYTHON (a Python with the kube2nats kit) is not set: {INSTALL}")
            });
            let mut c = Command::new(python);
            c.arg(repo().join("clients/python/examples/informer.py"));
            c
        }
        Language::Node => {
            let dir = repo().join("clients/node");
            assert!(
                dir.join("dist").is_dir() && dir.join("node_modules").is_dir(),
                "the TypeScript kit is not built in {}: {INSTALL}",
                dir.display()
            );
            let node = std::env::var("KITS_NODE").unwrap_or_else(|_| "node".to_owned());
            let mut c = Command::new(node);
            c.arg(dir.join("examples/informer.mjs"));
            c
        }
        Language::Rust => Command::new(rust_informer()),
    }
}

/// Builds the Rust kit's example informer (the kit is a member of this workspace) if needed; its
/// path.
fn rust_informer() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
            let status = Command::new(cargo)
                .args([
                    "build",
                    "--quiet",
                    "-p",
                    "kube2nats-client",
                    "--example",
                    "informer",
                ])
                .current_dir(repo())
                .status()
                .expect("running cargo to build the Rust kit's example informer");
            assert!(
                status.success(),
                "building the Rust kit's example informer failed"
            );
            // This test runs from target/<profile>/deps/; the example is in
            // target/<profile>/examples/.
            let exe = std::env::current_exe().expect("the test's own path");
            let profile_dir: &Path = exe
                .parent()
                .and_then(Path::parent)
                .expect("the test runs from target/<profile>/deps");
            profile_dir.join("examples/informer")
        })
        .clone()
}

/// A running example informer, its output collected line by line.
pub struct Informer {
    language: Language,
    child: Child,
    stdout: Arc<Mutex<Vec<String>>>,
    stderr: Arc<Mutex<Vec<String>>>,
    /// The thread reading stdout: it ends at end of file, once the process has exited.
    stdout_reader: Option<std::thread::JoinHandle<()>>,
}

/// How long an informer may take to show a change: generous, for a loaded machine and a NATS
/// restart with its reconnect backoff.
pub const INFORMER_WAIT: Duration = Duration::from_secs(30);

impl Informer {
    /// Starts the example informer of `language` on `resource` (a core-group plural, every
    /// namespace) of the bucket at `nats_url`.
    pub fn start(language: Language, nats_url: &str, resource: &str) -> Informer {
        let mut child = informer_command(language)
            .args([nats_url, BUCKET, resource])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("starting the {language:?} informer: {e}; {INSTALL}"));
        let (stdout, stdout_reader) = collect(child.stdout.take().expect("piped stdout"));
        let (stderr, _) = collect(child.stderr.take().expect("piped stderr"));
        Informer {
            language,
            child,
            stdout,
            stderr,
            stdout_reader: Some(stdout_reader),
        }
    }

    /// Every line printed so far.
    pub fn lines(&self) -> Vec<String> {
        self.stdout.lock().unwrap().clone()
    }

    /// Waits for a line equal to `line`; returns its index.
    pub async fn wait_for(&self, line: &str) -> usize {
        let deadline = tokio::time::Instant::now() + INFORMER_WAIT;
        loop {
            if let Some(i) = self.lines().iter().position(|l| l == line) {
                return i;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the {:?} informer did not print {line:?} within {INFORMER_WAIT:?}\n{}",
                self.language,
                self.transcript()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGTERM; waits for exit 0 and returns the cache it printed.
    pub async fn terminate(mut self) -> Objects {
        let printed = self.lines().len();
        let ok = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "signalling the {:?} informer", self.language);
        let deadline = tokio::time::Instant::now() + INFORMER_WAIT;
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("waiting for the informer") {
                break status;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the {:?} informer did not exit on SIGTERM\n{}",
                self.language,
                self.transcript()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        // Every line the process printed, up to the end of its output.
        if let Some(reader) = self.stdout_reader.take() {
            let _ = reader.join();
        }
        assert_eq!(
            status.code(),
            Some(0),
            "the {:?} informer's exit status\n{}",
            self.language,
            self.transcript()
        );
        let lines = self.lines();
        lines[printed..]
            .iter()
            .map(|l| {
                let v: Value = serde_json::from_str(l)
                    .unwrap_or_else(|e| panic!("a cache line that is not JSON: {l:?}: {e}"));
                let s = |k: &str| v[k].as_str().unwrap_or_default().to_owned();
                (s("namespace"), s("name"), s("resourceVersion"))
            })
            .collect()
    }

    /// Stdout and stderr so far, for a failure message.
    pub fn transcript(&self) -> String {
        format!(
            "--- stdout\n{}\n--- stderr\n{}",
            self.lines().join("\n"),
            self.stderr.lock().unwrap().join("\n")
        )
    }
}

impl Drop for Informer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The lines of `pipe`, collected by a thread until its end.
fn collect(
    pipe: impl std::io::Read + Send + 'static,
) -> (Arc<Mutex<Vec<String>>>, std::thread::JoinHandle<()>) {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let sink = lines.clone();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines().map_while(Result::ok) {
            sink.lock().unwrap().push(line);
        }
    });
    (lines, reader)
}
