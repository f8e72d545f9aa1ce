//! Log lines a person reads: tokens never shown, every line about a watch naming it, a broken
//! watch logged with the request that broke and a readable retry, and a refusal (403) that names
//! the RBAC rule to add only once it persists (docs/troubleshooting.md).

mod common;

use std::io::{BufRead, BufReader, Write as _};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use kube2nats_harness::apiserver::{ApiServer, ApiServerOptions, Rule, INITIAL_TOKEN};
use kube2nats_harness::nats::NatsServer;

const PODS_WATCH: &str =
    "[[watches]]\nname = \"pods\"\nresource = \"pods\"\nnamespaces = [\"default\"]\n";

/// Tokens never appear in the logs, even at debug level and through a 401 and a rotation; and
/// every line about a watch carries its watch, resource and namespace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_never_show_a_token_and_name_the_watch() {
    let sim = ApiServer::start(ApiServerOptions::default()).await.unwrap();
    let (first, second) = ("tok-first-6b1f0c", "tok-second-99d2e7");
    sim.set_valid_tokens(&[first]);
    let nats = NatsServer::start().await.unwrap();
    let config = format!(
        "{}\n[nats]\nurl = \"{}\"\n{PODS_WATCH}",
        kube_section(&sim, &sim.token_file()).replace("[log]", ""),
        nats.url()
    );
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(config.as_bytes()).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_kube2nats"))
        .args(["--log-format", "json", "--config"])
        .arg(file.path())
        .env("RUST_LOG", "debug")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
            .collect::<Vec<_>>()
    });
    assert!(sim.wait_for_watches(1, WAIT).await, "watch opened");
    sim.set_valid_tokens(&[second]);
    sim.drop_watches();
    assert!(
        sim.wait_for_watches(1, WAIT).await,
        "watch reopened with the rotated token"
    );
    sim.create("pods", Some("default"), pod("after-rotation"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    assert_eq!(child.wait().unwrap().code(), Some(0));
    let lines = reader.join().unwrap();
    assert!(lines.len() > 10, "debug logging produced lines");
    for line in &lines {
        assert!(
            !line.contains(first) && !line.contains(second),
            "a token leaked into the log: {line}"
        );
    }
    let unauthorized = lines
        .iter()
        .find(|l| l.contains("rejected the token (401)"))
        .expect("the 401 is logged");
    let entry: serde_json::Value = serde_json::from_str(unauthorized).expect("JSON log line");
    assert_eq!(entry["watch"], "pods");
    assert_eq!(entry["span"]["resource"], "pods");
    assert_eq!(entry["span"]["namespace"], "default");
}

/// The lines of `process` (started with `--log-format json`) up to the first whose message
/// contains every one of `needles`, that one last, as JSON.
fn entries_until(process: &Process, needles: &[&str]) -> Vec<serde_json::Value> {
    let mut entries = Vec::new();
    loop {
        let line = process.line_within(&[""], WAIT);
        let entry: serde_json::Value = serde_json::from_str(&line).expect("a JSON log line");
        let message = entry["message"].as_str().unwrap_or_default().to_owned();
        entries.push(entry);
        if needles.iter().all(|n| message.contains(n)) {
            return entries;
        }
    }
}

/// A watch connection that breaks is logged with the request that broke (`verb`) and the pause
/// before the retry as a person writes it (`retry_in`: `50ms`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_watch_is_logged_with_its_verb_and_a_readable_retry() {
    let sim = ApiServer::start(ApiServerOptions::default()).await.unwrap();
    let nats = NatsServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let text = core_config(&sim, &nats, dir.path(), PODS_WATCH);
    let process = Process::spawn_with(&text, &["--log-format", "json"]);
    process.line_with(&["watching from resourceVersion"]);
    sim.drop_watches();
    let line = process.line_with(&["backing off"]);
    let entry: serde_json::Value = serde_json::from_str(&line).expect("a JSON log line");
    assert_eq!(entry["verb"], "watch", "{line}");
    let retry_in = entry["retry_in"].as_str().unwrap_or_default();
    assert_eq!(
        humantime::parse_duration(retry_in).ok(),
        Some(Duration::from_millis(50)),
        "the first pause of the test's backoff: {line}"
    );
}

/// A refusal (403) that ends within moments, as a restarted API server's while its authorizer
/// loads, is a warning that kube2nats retries, not an error asking for a rule that exists; one
/// that persists for five seconds is the error that names the rule to add.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_brief_refusal_is_a_warning_and_a_persisting_one_names_the_rule() {
    let sim = ApiServer::start(ApiServerOptions::default()).await.unwrap();
    let nats = NatsServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let text = core_config(&sim, &nats, dir.path(), PODS_WATCH);
    let process = Process::spawn_with(&text, &["--log-format", "json"]);
    process.line_with(&["watching from resourceVersion"]);
    // Durable state read the cluster id at start: only pods are refused.
    let refuse_pods = || {
        sim.set_rules(
            INITIAL_TOKEN,
            vec![Rule::new(&["get"], &[""], &["namespaces"], &[]).named(&["kube-system"])],
        )
    };
    let allow_pods = || {
        sim.set_rules(
            INITIAL_TOKEN,
            vec![Rule::new(
                &["get", "list", "watch"],
                &[""],
                &["pods"],
                &["default"],
            )],
        )
    };

    refuse_pods();
    sim.drop_watches();
    tokio::time::sleep(Duration::from_millis(800)).await;
    allow_pods();
    let brief = entries_until(&process, &["watching from resourceVersion"]);
    let refused: Vec<_> = brief
        .iter()
        .filter(|e| {
            e["message"]
                .as_str()
                .unwrap_or_default()
                .contains("refused")
        })
        .collect();
    assert_eq!(
        refused.len(),
        1,
        "one line for the brief refusal: {brief:#?}"
    );
    assert_eq!(refused[0]["level"], "WARN", "{:#}", refused[0]);
    assert_eq!(refused[0]["verb"], "watch", "{:#}", refused[0]);
    let message = refused[0]["message"].as_str().unwrap_or_default();
    assert!(message.contains("retrying"), "{message}");
    assert!(
        refused[0]["rule"].is_null(),
        "no rule to add yet: {:#}",
        refused[0]
    );

    refuse_pods();
    sim.drop_watches();
    let persisting = entries_until(&process, &["add the rule"]);
    let error = persisting.last().expect("the line found");
    assert_eq!(error["level"], "ERROR", "{error:#}");
    let refused_for = humantime::parse_duration(error["refused_for"].as_str().unwrap_or_default())
        .unwrap_or_else(|e| panic!("refused_for: {e}: {error:#}"));
    assert!(refused_for >= Duration::from_secs(5), "{error:#}");
    let rule = error["rule"].as_str().unwrap_or_default();
    assert!(rule.contains(r#"resources: ["pods"]"#), "{error:#}");
    let warnings = persisting
        .iter()
        .filter(|e| {
            e["level"] == "WARN"
                && e["message"]
                    .as_str()
                    .unwrap_or_default()
                    .contains("refused")
        })
        .count();
    assert_eq!(warnings, 1, "one warning before the error: {persisting:#?}");
}
