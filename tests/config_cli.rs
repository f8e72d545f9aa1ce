//! The command line as operators use it: `--version`, `--check-config`, and exit code 2 with one
//! line naming the key for every kind of bad configuration, before anything starts.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const WATCH: &str = "[[watches]]\nname = \"pods\"\nresource = \"pods\"\n";

fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("config.example.toml")
}

/// The binary with a clean environment as far as kube2nats is concerned.
fn kube2nats() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kube2nats"));
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("KUBE2NATS") {
            cmd.env_remove(key);
        }
    }
    cmd
}

fn config_file(contents: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::Builder::new()
        .suffix(".toml")
        .tempfile()
        .expect("temp file");
    f.write_all(contents.as_bytes()).expect("write temp file");
    f
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Runs `--check-config` on `contents` and asserts exit code 2 and a stderr line starting with `line`.
fn assert_rejected(contents: &str, line: &str) {
    let f = config_file(contents);
    let out = kube2nats()
        .arg("--check-config")
        .arg("--config")
        .arg(f.path())
        .output()
        .expect("run kube2nats");
    assert_config_error(&out, line);
}

fn assert_config_error(out: &Output, line: &str) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(2), "stderr: {err}");
    assert!(
        err.lines().any(|l| l.starts_with(line)),
        "no stderr line starting with {line:?}:\n{err}"
    );
    assert!(
        out.stdout.is_empty(),
        "nothing on stdout for an invalid configuration"
    );
}

#[test]
fn version_prints_name_and_version() {
    let out = kube2nats().arg("--version").output().unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("kube2nats {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn check_config_accepts_the_example_and_prints_it() {
    let out = kube2nats()
        .arg("--check-config")
        .arg("--config")
        .arg(example())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("[[watches]]") && stdout.contains("resource = \"deployments.apps\""),
        "{stdout}"
    );
}

#[test]
fn check_config_redacts_secrets() {
    let f = config_file(&format!("[nats]\nuser = \"app\"\n{WATCH}"));
    let out = kube2nats()
        .args(["--check-config", "--config"])
        .arg(f.path())
        .env("KUBE2NATS__NATS__PASSWORD", "s3cr3t-password")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("s3cr3t-password"), "{stdout}");
    assert!(stdout.contains("password = \"<redacted>\""), "{stdout}");

    let out = kube2nats()
        .arg("--check-config")
        .env("KUBE2NATS_CONFIG", example())
        .env("KUBE2NATS__NATS__TOKEN", "tok-123")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        !stdout.contains("tok-123") && stdout.contains("token = \"<redacted>\""),
        "{stdout}"
    );
}

#[test]
fn config_path_from_environment() {
    let out = kube2nats()
        .arg("--check-config")
        .env("KUBE2NATS_CONFIG", "/nonexistent/kube2nats.toml")
        .output()
        .unwrap();
    assert_config_error(&out, "/nonexistent/kube2nats.toml: ");
}

#[test]
fn config_error_on_a_normal_start_exits_2_before_starting() {
    let f = config_file("[nats]\nurl = \"nats//x\"\n");
    let out = kube2nats().arg("--config").arg(f.path()).output().unwrap();
    assert_config_error(&out, "nats.url: invalid URL \"nats//x\"");
}

#[test]
fn rejects_unknown_key() {
    assert_rejected(
        &format!("[nats]\nurll = \"nats://x\"\n{WATCH}"),
        "nats.urll: unknown key",
    );
}

#[test]
fn rejects_bad_duration() {
    assert_rejected(
        &format!("[kubernetes]\nwatch_timeout = \"5 mins ago\"\n{WATCH}"),
        "kubernetes.watch_timeout: invalid duration \"5 mins ago\" (expected humantime like 30s, 5m)",
    );
}

#[test]
fn rejects_bad_url() {
    assert_rejected(
        &format!("[nats]\nurl = \"nats//x\"\n{WATCH}"),
        "nats.url: invalid URL \"nats//x\": ",
    );
}

#[test]
fn rejects_empty_watch_list() {
    assert_rejected("[log]\nformat = \"json\"\n", "watches: no watch configured");
}

#[test]
fn rejects_duplicate_watch_names() {
    assert_rejected(
        &format!("{WATCH}{WATCH}"),
        "watches[1].name: duplicate watch name \"pods\"",
    );
}

#[test]
fn rejects_unknown_placeholder() {
    assert_rejected(
        &format!("{WATCH}subject = \"kube.{{kind}}.{{name}}\"\n"),
        "watches[0].subject: unknown placeholder {kind} in \"kube.{kind}.{name}\" (allowed: {prefix}, {cluster}, {group}, {version}, {resource}, {namespace}, {name}, {type}, {label:KEY}, {annotation:KEY})",
    );
}

/// A filter that does not parse, or reads a variable other than `object`, stops the start
/// (`--check-config` and a normal start alike) naming the key and the position.
#[test]
fn rejects_a_malformed_filter_with_its_position() {
    assert_rejected(
        &format!("{WATCH}filter = \"object.status.phase == \"\n"),
        "watches[0].filter: invalid CEL expression \"object.status.phase ==\": at 1:",
    );
    assert_rejected(
        &format!("{WATCH}filter = \"pod.status.phase == 'Failed'\"\n"),
        "watches[0].filter: invalid CEL expression \"pod.status.phase == 'Failed'\": at 1:1: undeclared reference to \"pod\"",
    );
    let f = config_file(&format!("{WATCH}filter = \"object.spec.replicas >> 3\"\n"));
    let out = kube2nats().arg("--config").arg(f.path()).output().unwrap();
    assert_config_error(&out, "watches[0].filter: invalid CEL expression");
}

#[test]
fn rejects_unknown_message_format() {
    assert_rejected(
        "[publish]\nformat = \"cloudevents\"\n[[watches]]\nname = \"pods\"\nresource = \"pods\"\nformat = \"cloudevent\"",
        "watches[0].format: invalid value \"cloudevent\" (allowed: native, cloudevents)",
    );
}

#[test]
fn rejects_invalid_label_selector() {
    assert_rejected(
        &format!("{WATCH}label_selector = \"app in (web\"\n"),
        "watches[0].label_selector: invalid label selector",
    );
}

#[test]
fn rejects_invalid_field_selector() {
    assert_rejected(
        &format!("{WATCH}field_selector = \"status.phase\"\n"),
        "watches[0].field_selector: invalid field selector",
    );
}

#[test]
fn rejects_conflicting_nats_auth() {
    assert_rejected(
        &format!("[nats]\ntoken = \"t\"\ncredentials_file = \"/etc/nats/app.creds\"\n{WATCH}"),
        "nats.token, nats.credentials_file: conflicting NATS authentication methods",
    );
}

#[test]
fn rejects_a_file_that_is_not_toml() {
    let f = config_file("{\"watches\": []}\n");
    let out = kube2nats()
        .arg("--check-config")
        .arg("--config")
        .arg(f.path())
        .output()
        .unwrap();
    assert_config_error(
        &out,
        &format!("{}: not a valid TOML file", f.path().display()),
    );
}

#[test]
fn rejects_bad_environment_override() {
    let out = kube2nats()
        .arg("--check-config")
        .arg("--config")
        .arg(example())
        .env("KUBE2NATS__KUBERNETES__WATCH_TIMEOUT", "forever")
        .output()
        .unwrap();
    assert_config_error(
        &out,
        "kubernetes.watch_timeout: invalid duration \"forever\" (expected humantime like 30s, 5m) (set by environment variable KUBE2NATS__KUBERNETES__WATCH_TIMEOUT)",
    );
}

#[test]
fn reports_every_problem_in_one_run() {
    let f = config_file("[kubernetes]\nrbac_check = \"maybe\"\n[nats]\nmode = \"fast\"\n[[watches]]\nname = \"a\"\nresource = \"Pods\"\n");
    let out = kube2nats()
        .arg("--check-config")
        .arg("--config")
        .arg(f.path())
        .output()
        .unwrap();
    assert_config_error(
        &out,
        "kubernetes.rbac_check: invalid value \"maybe\" (allowed: warn, fail)",
    );
    assert_config_error(
        &out,
        "nats.mode: invalid value \"fast\" (allowed: core, jetstream)",
    );
    assert_config_error(&out, "watches[0].resource: invalid resource \"Pods\"");
}

/// A misspelt key, a value of the wrong type and a bad value (one from the environment) are all
/// reported by the same run: fixing one does not reveal the next.
#[test]
fn unknown_key_wrong_type_and_bad_value_in_one_run() {
    let f = config_file(&format!(
        "[nats]\nurll = \"nats://nats:4222\"\nmode = \"fast\"\n\
         [kubernetes]\nlist_page_size = \"many\"\n{WATCH}"
    ));
    let out = kube2nats()
        .arg("--check-config")
        .arg(f.path())
        .env("KUBE2NATS__SHUTDOWN__GRACE_PERIOD", "forever")
        .output()
        .unwrap();
    assert_config_error(&out, "nats.urll: unknown key (allowed here: ");
    assert_config_error(
        &out,
        "kubernetes.list_page_size: invalid type: a string, expected an integer",
    );
    assert_config_error(
        &out,
        "nats.mode: invalid value \"fast\" (allowed: core, jetstream)",
    );
    assert_config_error(&out, "shutdown.grace_period: invalid duration \"forever\"");
    let err = stderr(&out);
    assert!(
        err.lines().any(|l| l.starts_with("shutdown.grace_period: ")
            && l.ends_with("(set by environment variable KUBE2NATS__SHUTDOWN__GRACE_PERIOD)")),
        "{err}"
    );
    // The heading and one line per problem, nothing else.
    assert_eq!(err.lines().count(), 5, "{err}");
}

/// Without a cluster (no service account, no kubeconfig) kube2nats says so in one line and exits
/// 1, before it claims to serve anything.
#[test]
fn no_cluster_found_is_one_line_and_exit_1_before_serving() {
    let home = tempfile::tempdir().unwrap();
    let f = config_file(&format!(
        "[nats]\nurl = \"nats://127.0.0.1:9\"\n[http]\nlisten = \"127.0.0.1:0\"\n{WATCH}"
    ));
    let out = kube2nats()
        .arg("--config")
        .arg(f.path())
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env("HOME", home.path())
        .env("RUST_LOG", "info")
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(!err.contains("serving"), "claims to serve:\n{err}");
    let errors: Vec<&str> = err
        .lines()
        .filter(|l| !l.contains("kube2nats starting"))
        .collect();
    assert_eq!(
        errors.len(),
        1,
        "one line besides the start-up line:\n{err}"
    );
    assert!(
        errors[0].starts_with("kube2nats: error: resolving the Kubernetes API credentials: ")
            && errors[0].contains(".kube/config"),
        "{err}"
    );
}

/// A normal start logs, runs until SIGTERM, logs which signal stopped it and exits 0 — even while
/// the API server is still unreachable and discovery is being retried.
#[test]
fn sigterm_stops_a_normal_run_cleanly() {
    use std::io::{BufRead as _, BufReader};
    use std::process::Stdio;

    let unreachable = config_file(
        r#"
[kubernetes]
api_url = "http://127.0.0.1:9"
[nats]
url = "nats://127.0.0.1:9"
[http]
listen = "127.0.0.1:0"
[[watches]]
name = "pods"
resource = "pods"
"#,
    );
    let mut child = kube2nats()
        .args(["--log-format", "json", "--config"])
        .arg(unreachable.path())
        .env("RUST_LOG", "info")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    // The start-up line is logged after the signal handlers are installed.
    let first = lines.next().expect("a start-up log line").unwrap();
    assert!(
        first.starts_with('{') && first.contains("\"message\":\"kube2nats starting\""),
        "{first}"
    );
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert_eq!(child.wait().unwrap().code(), Some(0));
    assert!(
        rest.iter().any(|l| l.contains("\"signal\":\"SIGTERM\"")),
        "{rest:?}"
    );
}

/// `--check-config FILE` checks that file, as the README and CI use it.
#[test]
fn check_config_takes_the_file_as_its_value() {
    let out = kube2nats()
        .arg("--check-config")
        .arg(example())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    let bad = config_file("[[watches]]\nname = \"x\"\nresource = \"pods\"\nunknown = 1\n");
    let out = kube2nats()
        .arg("--check-config")
        .arg(bad.path())
        .output()
        .unwrap();
    assert_config_error(&out, "watches[0].unknown");
}

/// Every TOML snippet in the README (what a newcomer copies first) is a valid configuration.
#[test]
fn the_readme_configuration_snippets_are_valid() {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
        .expect("README.md");
    let snippets: Vec<&str> = readme
        .split("```toml\n")
        .skip(1)
        .filter_map(|rest| rest.split_once("```").map(|(snippet, _)| snippet))
        .collect();
    assert!(!snippets.is_empty(), "the README shows no configuration");
    for snippet in snippets {
        let f = config_file(snippet);
        let out = kube2nats()
            .arg("--check-config")
            .arg(f.path())
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "README snippet:\n{snippet}\nstderr: {}",
            stderr(&out)
        );
    }
}

/// Leader election timings that would let a new holder start before the old one stops are
/// refused, naming the key.
#[test]
fn rejects_leader_election_timings_that_could_overlap_two_publishers() {
    assert_rejected(
        &format!("[leader_election]\nenabled = true\nlease_duration = \"10s\"\nrenew_deadline = \"10s\"\n{WATCH}"),
        "leader_election.renew_deadline: \"10s\" must be shorter than leader_election.lease_duration (\"10s\")",
    );
}

/// Leader election with no namespace for the Lease (none configured, no POD_NAMESPACE, no
/// service-account namespace file) stops at start with exit 2, naming the key to set.
#[test]
fn leader_election_without_a_namespace_exits_2_naming_the_key() {
    let f = config_file(&format!(
        "[kubernetes]\napi_url = \"http://127.0.0.1:1\"\n[http]\nlisten = \"127.0.0.1:0\"\n[leader_election]\nenabled = true\n{WATCH}"
    ));
    let out = kube2nats()
        .env_remove("POD_NAMESPACE")
        .arg("--config")
        .arg(f.path())
        .output()
        .unwrap();
    assert_config_error(&out, "kube2nats: error: leader_election.namespace: not set");
}
