//! Credentials never reach the output (docs/troubleshooting.md, "Secrets in logs"): the real
//! binary, at debug level, is given a secret in each kind of error that shows a URL or a value,
//! and the secret appears nowhere in its stdout or stderr.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

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
