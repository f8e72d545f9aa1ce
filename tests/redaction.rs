//! Credentials never reach the output (docs/troubleshooting.md, "Secrets in logs"): the real
//! binary, at debug level, is given a secret in each kind of error that shows a URL or a value;
//! and, at trace level, runs with the secrets it uses while it works — a NATS password in the
//! server URL across a NATS outage and the reconnects after it, a bearer token from a token file
//! and one from an exec credential plugin, each also refused with a 401 — and the secrets appear
//! nowhere in its stdout or stderr.

mod common;

use std::io::Read as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube2nats_harness::apiserver::{ApiServer, ApiServerOptions};
use kube2nats_harness::nats::{NatsAuth, NatsOptions, NatsServer};
use tokio::time::Instant;

const WATCH: &str = "[[watches]]\nname = \"pods\"\nresource = \"pods\"\n";
/// NATS that nothing listens on: these runs fail before or without it.
const NATS: &str = "nats://127.0.0.1:1";

/// What one run printed, and how it ended (`None`: still running after a few seconds, killed).
struct Run {
    output: String,
    code: Option<i32>,
}

/// Runs kube2nats with `config` at debug level, with `env` added, for at most 5 s.
fn run(dir: &Path, config: &str, env: &[(&str, &str)]) -> Run {
    let path = dir.join("kube2nats.toml");
    std::fs::write(&path, config).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_kube2nats"))
        .arg("--config")
        .arg(&path)
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env("HOME", dir)
        .env("RUST_LOG", "debug")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting kube2nats");
    let readers = [
        read_all(child.stdout.take().unwrap()),
        read_all(child.stderr.take().unwrap()),
    ];
    let started = Instant::now();
    let code = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status.code();
        }
        if started.elapsed() > Duration::from_secs(5) {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let output = readers
        .into_iter()
        .map(|r| r.join().unwrap())
        .collect::<Vec<_>>()
        .join("\n");
    Run { output, code }
}

fn read_all(mut from: impl std::io::Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = from.read_to_end(&mut bytes);
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

/// One case: the run must exit with `code`, say `needle` (so it did reach the error), and never
/// show `secret`.
fn assert_hidden(case: &str, run: &Run, secret: &str, needle: &str, code: i32) -> Option<String> {
    let mut problems = Vec::new();
    if run.output.contains(secret) {
        let lines: Vec<&str> = run.output.lines().filter(|l| l.contains(secret)).collect();
        problems.push(format!("shows {secret:?}:\n  {}", lines.join("\n  ")));
    }
    if !run.output.contains(needle) {
        problems.push(format!("does not say {needle:?}"));
    }
    if run.code != Some(code) {
        problems.push(format!("exit code {:?}, expected {code}", run.code));
    }
    (!problems.is_empty()).then(|| format!("{case}: {}", problems.join("; ")))
}

fn kubeconfig(dir: &Path, server: &str, proxy: Option<&str>) -> String {
    let proxy = proxy
        .map(|p| format!("    proxy-url: \"{p}\"\n"))
        .unwrap_or_default();
    let text = format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: k\n  cluster:\n    server: \"{server}\"\n{proxy}contexts:\n- name: c\n  context:\n    cluster: k\n    user: u\nusers:\n- name: u\n  user:\n    token: t\n"
    );
    let path = dir.join("kubeconfig");
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// Every kind of error that shows a URL or a configuration value, each with its own secret.
#[test]
fn secrets_never_reach_the_output() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let api = "[kubernetes]\napi_url = \"http://127.0.0.1:1\"\n";
    let mut problems = Vec::new();
    let mut check = |case: &str, config: String, env: &[(&str, &str)], secret, needle, code| {
        let run = run(d, &config, env);
        problems.extend(assert_hidden(case, &run, secret, needle, code));
    };

    check(
        "a NATS URL with a password, and a credentials file that cannot be read",
        format!("{api}[nats]\nurl = \"nats://kube:hunter2-nats@127.0.0.1:1\"\ncredentials_file = \"/nonexistent/kube2nats.creds\"\n{WATCH}"),
        &[],
        "hunter2-nats",
        "kube2nats.creds",
        1,
    );
    check(
        "a NATS URL that does not parse, with a password",
        format!("{api}[nats]\nurl = \"nats://kube:hunter2-broken@[::1\"\n{WATCH}"),
        &[],
        "hunter2-broken",
        "nats.url",
        2,
    );
    check(
        "kubernetes.api_url with credentials",
        format!("[kubernetes]\napi_url = \"http://admin:hunter2-api@127.0.0.1:1\"\n[nats]\nurl = \"{NATS}\"\n{WATCH}"),
        &[],
        "hunter2-api",
        "kubernetes.api_url",
        2,
    );
    check(
        "kubernetes.api_url that does not parse, with credentials",
        format!("[kubernetes]\napi_url = \"https://admin:hunter2-api-broken@[bad\"\n[nats]\nurl = \"{NATS}\"\n{WATCH}"),
        &[],
        "hunter2-api-broken",
        "kubernetes.api_url",
        2,
    );
    let path = kubeconfig(d, "https://admin:hunter2-kubeconfig@127.0.0.1:1", None);
    check(
        "a kubeconfig server URL with credentials",
        format!("[kubernetes]\nkubeconfig = \"{path}\"\n[nats]\nurl = \"{NATS}\"\n{WATCH}"),
        &[],
        "hunter2-kubeconfig",
        "server URL",
        1,
    );
    let path = kubeconfig(d, "https://admin:hunter2-kc-broken@[bad", None);
    check(
        "a kubeconfig server URL that does not parse, with credentials",
        format!("[kubernetes]\nkubeconfig = \"{path}\"\n[nats]\nurl = \"{NATS}\"\n{WATCH}"),
        &[],
        "hunter2-kc-broken",
        "API server address",
        1,
    );
    let path = kubeconfig(
        d,
        "https://127.0.0.1:1",
        Some("http://proxy:hunter2-proxy@[bad"),
    );
    check(
        "a kubeconfig proxy-url that does not parse, with credentials",
        format!("[kubernetes]\nkubeconfig = \"{path}\"\n[nats]\nurl = \"{NATS}\"\n{WATCH}"),
        &[],
        "hunter2-proxy",
        "proxy-url",
        1,
    );
    check(
        "an environment variable with a NATS URL that does not parse",
        format!("{api}{WATCH}"),
        &[("KUBE2NATS__NATS__URL", "nats://kube:hunter2-env@[::1")],
        "hunter2-env",
        "KUBE2NATS__NATS__URL",
        2,
    );
    check(
        "an environment variable with a secret under a key that takes a number",
        format!("{api}[nats]\nurl = \"{NATS}\"\n{WATCH}"),
        &[("KUBE2NATS__KUBERNETES__LIST_PAGE_SIZE", "hunter2-type")],
        "hunter2-type",
        "kubernetes.list_page_size",
        2,
    );
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}

/// The NATS password, written into the server URL.
const NATS_PASSWORD: &str = "hunter2-nats-run";
/// The bearer token in the token file.
const FILE_TOKEN: &str = "hunter2-token-file";
/// The bearer token the exec credential plugin prints.
const EXEC_TOKEN: &str = "hunter2-exec-token";

/// kube2nats running at trace level, everything it prints on stdout and stderr collected.
struct Traced {
    child: Child,
    output: Arc<Mutex<String>>,
}

impl Traced {
    fn start(dir: &Path, config: &str) -> Traced {
        let path = dir.join("kube2nats.toml");
        std::fs::write(&path, config).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_kube2nats"))
            .arg("--config")
            .arg(&path)
            .env_remove("KUBECONFIG")
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env("HOME", dir)
            .env("RUST_LOG", "trace")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting kube2nats");
        let output = Arc::new(Mutex::new(String::new()));
        for pipe in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let output = output.clone();
            std::thread::spawn(move || {
                let mut pipe = pipe;
                let mut buf = [0; 64 * 1024];
                while let Ok(n @ 1..) = pipe.read(&mut buf) {
                    output
                        .lock()
                        .unwrap()
                        .push_str(&String::from_utf8_lossy(&buf[..n]));
                }
            });
        }
        Traced { child, output }
    }

    /// Waits until the output holds `needle`.
    async fn says(&self, needle: &str) {
        let deadline = Instant::now() + common::WAIT;
        while !self.output.lock().unwrap().contains(needle) {
            assert!(
                Instant::now() < deadline,
                "kube2nats did not say {needle:?} within {:?}",
                common::WAIT
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Stops the process; everything it printed.
    fn output(mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // The readers reach the end of the pipes once the process is gone.
        std::thread::sleep(Duration::from_millis(200));
        let output = self.output.lock().unwrap().clone();
        output
    }
}

impl Drop for Traced {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The lines of `output` that show one of `secrets`.
fn shown(output: &str, secrets: &[&str]) -> Vec<String> {
    output
        .lines()
        .filter(|l| secrets.iter().any(|s| l.contains(s)))
        .map(|l| l.chars().take(400).collect())
        .collect()
}

/// A pod created on `sim` is published: the API server took the token, NATS the password.
/// Messages before it (a start's list announces the pods there) are passed over.
async fn a_pod_is_published(sim: &ApiServer, inbox: &mut common::Inbox, name: &str) {
    sim.create("pods", Some("default"), common::pod(name));
    let added = format!("ADDED {name}");
    while inbox.next().await.short() != added {}
}

/// Tokens that are refused now: the next watch request answers 401, then `tokens` again.
async fn refused_for_a_while(sim: &ApiServer, daemon: &Traced, tokens: &[&str]) {
    // The simulator writes the first token into its own token file, which kube2nats does not
    // read here.
    sim.set_valid_tokens(&["hunter2-nobody-has-it"]);
    sim.drop_watches();
    // The line of the refusal itself: a bare "401" also turns up in timestamps and byte counts
    // of trace lines, and the tokens would come back before any request was refused.
    daemon.says("rejected the token (401)").await;
    sim.set_valid_tokens(tokens);
}

/// The secrets kube2nats uses while it runs, each through the paths that log at debug and
/// trace level: the NATS client's connects and reconnects (the password written into the
/// server URL), the API requests and their 401s (a bearer token from the token file, and one
/// from an exec credential plugin, whose run and output are logged about).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_used_at_run_time_never_reach_the_output() {
    let dir = tempfile::tempdir().unwrap();
    let mut nats = NatsServer::start_with(NatsOptions {
        auth: NatsAuth::UserPassword("kube".into(), NATS_PASSWORD.into()),
        ..Default::default()
    })
    .await
    .unwrap();
    let nats_url = format!("nats://kube:{NATS_PASSWORD}@127.0.0.1:{}", nats.port());
    let sim = ApiServer::start(ApiServerOptions::default()).await.unwrap();
    let tokens = [FILE_TOKEN, EXEC_TOKEN];
    sim.set_valid_tokens(&tokens);
    let subscriber =
        async_nats::ConnectOptions::with_user_and_password("kube".into(), NATS_PASSWORD.into())
            .connect(nats.url())
            .await
            .unwrap();
    let mut inbox = common::Inbox::subscribe(&subscriber, "kube.>").await;
    let watch = "[[watches]]\nname = \"pods\"\nresource = \"pods\"\nnamespaces = [\"default\"]\n";
    let mut problems = Vec::new();

    // The token file, and the password in the NATS URL across an outage.
    let config = format!(
        "{}[nats]\nurl = \"{nats_url}\"\n[state]\nenabled = false\n{watch}",
        common::kube_section(&sim, &common::token_file(dir.path(), FILE_TOKEN))
    );
    let daemon = Traced::start(dir.path(), &config);
    a_pod_is_published(&sim, &mut inbox, "before-outage").await;
    refused_for_a_while(&sim, &daemon, &tokens).await;
    nats.stop().await;
    daemon.says("disconnected from NATS").await;
    // Reconnects fail for a while (each logged by the client), then one succeeds.
    tokio::time::sleep(Duration::from_secs(2)).await;
    nats.restart().await.unwrap();
    daemon.says("connected to NATS").await;
    let subscriber =
        async_nats::ConnectOptions::with_user_and_password("kube".into(), NATS_PASSWORD.into())
            .connect(nats.url())
            .await
            .unwrap();
    let mut inbox = common::Inbox::subscribe(&subscriber, "kube.>").await;
    a_pod_is_published(&sim, &mut inbox, "after-outage").await;
    let output = daemon.output();
    // The paths the secrets went through, as logged: the connect and reconnect, a failed
    // reconnect attempt (the client logs the server address with each), the 401.
    let connects = output.matches("connected to NATS").count();
    let failed = output.contains("NATS connection event event=client error");
    let refused = output.contains("rejected the token (401)");
    if connects < 2 || !failed || !refused {
        problems.push(format!(
            "token file and NATS URL: not every path logged: {connects} NATS connects (one and a reconnect expected), a failed reconnect {failed}, a 401 {refused}"
        ));
    }
    let lines = shown(&output, &[NATS_PASSWORD, FILE_TOKEN]);
    if !lines.is_empty() {
        problems.push(format!(
            "token file and NATS URL: shown in\n  {}",
            lines.join("\n  ")
        ));
    }

    // A token from an exec credential plugin. The command is `/bin/sh` with the script as
    // argument: a script written and then executed by a multi-threaded process can fail with
    // ETXTBSY when another thread forks meanwhile.
    let plugin = dir.path().join("plugin.sh");
    std::fs::write(
        &plugin,
        format!(
            "printf '%s' '{{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",\"status\":{{\"token\":\"{EXEC_TOKEN}\"}}}}'\n"
        ),
    )
    .unwrap();
    let kubeconfig = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": sim.url()}}],
        "users": [{"name": "u", "user": {"exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": "/bin/sh",
            "args": [plugin],
            "interactiveMode": "Never",
        }}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
    });
    let kubeconfig_path = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig_path, kubeconfig.to_string()).unwrap();
    let config = format!(
        "[kubernetes]\nkubeconfig = {:?}\nwatch_timeout = \"30s\"\n[kubernetes.backoff]\ninitial = \"50ms\"\nmax = \"1s\"\n[http]\nlisten = \"127.0.0.1:0\"\n[nats]\nurl = \"{nats_url}\"\n[state]\nenabled = false\n{watch}",
        kubeconfig_path.display().to_string()
    );
    let daemon = Traced::start(dir.path(), &config);
    a_pod_is_published(&sim, &mut inbox, "through-exec").await;
    refused_for_a_while(&sim, &daemon, &tokens).await;
    a_pod_is_published(&sim, &mut inbox, "through-exec-again").await;
    let output = daemon.output();
    let runs = output.matches("running the exec credential plugin").count();
    let refused = output.contains("rejected the token (401)");
    if runs < 2 || !refused {
        problems.push(format!(
            "exec plugin: not every path logged: {runs} plugin runs (one, and one after the 401, expected), a 401 {refused}"
        ));
    }
    let lines = shown(&output, &[NATS_PASSWORD, EXEC_TOKEN]);
    if !lines.is_empty() {
        problems.push(format!("exec plugin: shown in\n  {}", lines.join("\n  ")));
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}
