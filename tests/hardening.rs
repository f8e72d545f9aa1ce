//! Failure modes that are easy to miss: input that could reach a panic, a dead watch task behind
//! a ready probe, messages too large to publish, deletions announced after a recreation, secrets
//! in output, and metrics that must add up. Each test runs the library daemon (or the real
//! binary where exit codes and logs are the contract) against the simulated API server and a
//! real nats-server.

mod common;

use std::time::Duration;

use common::*;
use kube2nats_harness::apiserver::{ApiServer, ApiServerOptions, INITIAL_TOKEN};
use kube2nats_harness::nats::NatsServer;

const PODS_WATCH: &str =
    "[[watches]]\nname = \"pods\"\nresource = \"pods\"\nnamespaces = [\"default\"]\n";

/// A simulated API server, a nats-server, and a daemon configured with `extra` after `[nats]`.
struct Env {
    sim: ApiServer,
    nats: NatsServer,
    nc: async_nats::Client,
    daemon: kube2nats::facade::Daemon,
    _dir: tempfile::TempDir,
}

impl Env {
    async fn start(extra: &str) -> Env {
        Env::start_with("", extra).await
    }

    /// `kube` goes into `[kubernetes]`.
    async fn start_with(kube: &str, extra: &str) -> Env {
        let sim = ApiServer::start(ApiServerOptions::default()).await.unwrap();
        let nats = NatsServer::start().await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let token = token_file(dir.path(), INITIAL_TOKEN);
        let text = format!(
            "{}\n[nats]\nurl = \"{}\"\n{extra}",
            kube_section(&sim, &token).replace(
                "watch_timeout = \"30s\"",
                &format!("watch_timeout = \"30s\"\n{kube}")
            ),
            nats.url()
        );
        let nc = async_nats::connect(nats.url()).await.unwrap();
        let daemon = kube2nats::facade::start(config_from(&text)).await.unwrap();
        Env {
            sim,
            nats,
            nc,
            daemon,
            _dir: dir,
        }
    }

    fn metric(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        metric(&self.daemon.metrics.render(), name, labels).unwrap_or(0.0)
    }

    async fn synced(&self) {
        self.synced_watch("pods").await;
    }

    async fn synced_watch(&self, watch: &str) {
        let deadline = tokio::time::Instant::now() + WAIT;
        while self.metric("kube2nats_watch_synced", &[("watch", watch)]) != 1.0 {
            assert!(tokio::time::Instant::now() < deadline, "watch not synced");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(self.sim.wait_for_watches(1, WAIT).await, "the watch opened");
    }
}

/// Waits for `ADDED <name>` (as `Kube-Name` spells it), skipping anything else.
async fn added(inbox: &mut Inbox, name: &str) -> Got {
    loop {
        let got = inbox.next().await;
        if got.short() == format!("ADDED {name}") {
            return got;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// No input reaches a panic.

/// An object whose name holds CR and LF (RBAC names may) is published with its header values and
/// subject token escaped by the documented rule, and the watch keeps publishing afterwards.
#[tokio::test]
async fn a_name_with_cr_lf_is_published_escaped_and_the_watch_goes_on() {
    let env = Env::start(PODS_WATCH).await;
    let mut inbox = Inbox::subscribe(&env.nc, "kube.>").await;
    env.synced().await;

    env.sim
        .create("pods", Some("default"), pod("evil\r\nname.50%"));
    let got = added(&mut inbox, "evil%0D%0Aname_50%25").await;
    assert_eq!(
        got.subject,
        "kube.core.v1.pods.default.evil%0D%0Aname_50%25.added"
    );
    assert_eq!(got.header("Kube-Namespace"), Some("default"));
    assert_eq!(
        got.payload["object"]["metadata"]["name"],
        "evil\r\nname.50%"
    );

    env.sim.create("pods", Some("default"), pod("after"));
    added(&mut inbox, "after").await;
}

/// A subject longer than a NATS protocol line may be is refused before publishing: counted as
/// `events_dropped_total{reason="subject_too_long"}`, and the shared connection survives (the
/// server never sees the line, so it never closes the connection for it).
#[tokio::test]
async fn a_subject_too_long_is_refused_without_costing_the_connection() {
    let env = Env::start(PODS_WATCH).await;
    let mut inbox = Inbox::subscribe(&env.nc, "kube.>").await;
    env.synced().await;

    // 700 × `é` escapes to 4200 bytes: longer than nats-server's 4 KiB control line.
    env.sim
        .create("pods", Some("default"), pod(&"é".repeat(700)));
    env.sim.create("pods", Some("default"), pod("after"));
    let got = inbox.next().await;
    assert_eq!(
        got.short(),
        "ADDED after",
        "the long subject is not published"
    );
    let dropped = env.metric(
        "kube2nats_events_dropped_total",
        &[("watch", "pods"), ("reason", "subject_too_long")],
    );
    assert_eq!(dropped, 1.0);
    let log = env.nats.log();
    assert!(
        !log.to_lowercase().contains("control line"),
        "nats-server saw the long subject:\n{log}"
    );
}

// ---------------------------------------------------------------------------------------------
// Too large is not silent.

/// An object larger than the NATS server's `max_payload` (1 MiB by default) is published with its
/// metadata only and `Kube-Payload: truncated`, on its usual subject and in order, and counted.
#[tokio::test]
async fn an_object_over_max_payload_is_published_with_metadata_only() {
    let env = Env::start(PODS_WATCH).await;
    let mut inbox = Inbox::subscribe(&env.nc, "kube.>").await;
    env.synced().await;

    let mut big = pod("big");
    big["metadata"]["annotations"] = serde_json::json!({ "blob": "x".repeat(1_200_000) });
    let created = env.sim.create("pods", Some("default"), big);
    env.sim.create("pods", Some("default"), pod("after"));

    let got = inbox.next().await;
    assert_eq!(got.short(), "ADDED big");
    assert_eq!(got.subject, "kube.core.v1.pods.default.big.added");
    assert_eq!(got.header("Kube-Payload"), Some("truncated"));
    assert_eq!(got.header("Kube-Uid"), created["metadata"]["uid"].as_str());
    let object = &got.payload["object"];
    assert_eq!(got.payload["type"], "ADDED");
    assert_eq!(object["kind"], "Pod");
    assert_eq!(object["metadata"]["name"], "big");
    assert_eq!(
        object["metadata"]["resourceVersion"],
        created["metadata"]["resourceVersion"]
    );
    assert!(object["metadata"].get("annotations").is_none());
    let next = inbox.next().await;
    assert_eq!(next.short(), "ADDED after");
    assert_eq!(next.header("Kube-Payload"), None);
    assert_eq!(
        env.metric(
            "kube2nats_events_truncated_total",
            &[("watch", "pods"), ("reason", "max_payload")]
        ),
        1.0
    );
}

/// `kubernetes.max_line_bytes` of the tests below: an object of 10 kB is over it.
const SMALL_LINES: &str = "max_line_bytes = 4096";

/// A pod of about 10 kB: over [`SMALL_LINES`], with its metadata first (as kube-apiserver
/// writes a built-in object) and the bulk in its spec.
fn big_pod(name: &str) -> serde_json::Value {
    let mut big = pod(name);
    big["spec"]["blob"] = "x".repeat(10_000).into();
    big
}

/// A watch line over `max_line_bytes` whose first bytes hold the object's metadata (as
/// kube-apiserver writes built-in objects): the change is published with the metadata only and
/// `Kube-Payload: truncated`, in order, counted as `events_truncated_total{reason="max_line_bytes"}`;
/// the watch goes on from the line's version (no decode-error loop, no relist), and a resumed
/// watch does not repeat it.
#[tokio::test]
async fn a_watch_line_over_max_line_bytes_is_published_with_metadata_only() {
    let env = Env::start_with(SMALL_LINES, PODS_WATCH).await;
    let mut inbox = Inbox::subscribe(&env.nc, "kube.>").await;
    env.synced().await;

    let created = env.sim.create("pods", Some("default"), big_pod("big"));
    let modified = env.sim.update("pods", Some("default"), "big", |p| {
        p["spec"]["blob"] = "y".repeat(10_000).into();
    });
    env.sim.create("pods", Some("default"), pod("after"));
    for (expected, version) in [("ADDED big", &created), ("MODIFIED big", &modified)] {
        let got = inbox.next().await;
        assert_eq!(got.short(), expected);
        assert_eq!(got.header("Kube-Payload"), Some("truncated"));
        assert_eq!(got.header("Kube-Uid"), created["metadata"]["uid"].as_str());
        assert_eq!(
            got.header("Kube-Resource-Version"),
            version["metadata"]["resourceVersion"].as_str()
        );
        let object = &got.payload["object"];
        assert_eq!(object["kind"], "Pod");
        assert_eq!(object["metadata"]["namespace"], "default");
        assert!(object.get("spec").is_none(), "metadata only: {object}");
    }
    let after = inbox.next().await;
    assert_eq!(after.short(), "ADDED after");
    assert_eq!(after.header("Kube-Payload"), None);

    // Resumed from the last version: nothing is repeated.
    env.sim.drop_watches();
    assert!(
        env.sim.wait_for_watches(1, WAIT).await,
        "the watch reopened"
    );
    env.sim.create("pods", Some("default"), pod("later"));
    assert_eq!(inbox.next().await.short(), "ADDED later");
    let pods = [("watch", "pods")];
    assert_eq!(
        env.metric(
            "kube2nats_events_truncated_total",
            &[("watch", "pods"), ("reason", "max_line_bytes")]
        ),
        2.0
    );
    assert_eq!(env.metric("kube2nats_decode_errors_total", &pods), 0.0);
    assert_eq!(
        env.metric(
            "kube2nats_relists_total",
            &[("watch", "pods"), ("reason", "line_too_long")]
        ),
        0.0
    );
}

/// A watch line over `max_line_bytes` whose first bytes do not say which object changed (a
/// custom resource: the API server writes it with sorted keys, so a large `data` comes before
/// `metadata`): counted as a decode error, and one relist (whose pages have no line limit)
/// publishes the object whole; the watch then goes on, without a loop.
#[tokio::test]
async fn a_watch_line_over_max_line_bytes_without_early_metadata_relists_once() {
    const WIDGETS: &str = "[[watches]]\nname = \"widgets\"\nresource = \"widgets.example.com\"\nnamespaces = [\"default\"]\n";
    let env = Env::start_with(SMALL_LINES, WIDGETS).await;
    let mut inbox = Inbox::subscribe(&env.nc, "kube.>").await;
    env.synced_watch("widgets").await;

    let widget = |name: &str, data: usize| {
        serde_json::json!({
            "apiVersion": "example.com/v1",
            "kind": "Widget",
            "data": "d".repeat(data),
            "metadata": {"name": name},
        })
    };
    env.sim
        .create("widgets", Some("default"), widget("big", 10_000));
    let got = inbox.next().await;
    assert_eq!(got.short(), "ADDED big");
    assert_eq!(got.header("Kube-Synthesized"), Some("relist"));
    assert_eq!(got.header("Kube-Payload"), None);
    assert_eq!(
        got.payload["object"]["data"].as_str().map(str::len),
        Some(10_000)
    );
    env.sim
        .create("widgets", Some("default"), widget("after", 1));
    assert_eq!(inbox.next().await.short(), "ADDED after");
    let widgets = [("watch", "widgets")];
    assert_eq!(env.metric("kube2nats_decode_errors_total", &widgets), 1.0);
    assert_eq!(
        env.metric(
            "kube2nats_relists_total",
            &[("watch", "widgets"), ("reason", "line_too_long")]
        ),
        1.0
    );
}

// ---------------------------------------------------------------------------------------------
// Metrics tell the truth.

/// `publish_queue_depth` is the sum over a watch's namespaces: with JetStream publishes that no
/// stream acknowledges, namespace `a` holds 3 messages and `b` holds 2 unacknowledged, and the
/// watch's gauge says 5 (each namespace used to overwrite the other's figure).
#[tokio::test]
async fn publish_queue_depth_sums_a_watchs_namespaces() {
    let sim = ApiServer::start(ApiServerOptions::default()).await.unwrap();
    for (ns, n) in [("a", 3), ("b", 2)] {
        for i in 0..n {
            sim.create("pods", Some(ns), pod(&format!("p{i}")));
        }
    }
    // JetStream mode without a stream: every publish is sent, none is acknowledged.
    let (_nats, _dir, daemon) =
        start_jetstream_for_a_and_b(&sim, "[nats.jetstream]\nack_timeout = \"30s\"\n").await;
    let depth = || {
        metric(
            &daemon.metrics.render(),
            "kube2nats_publish_queue_depth",
            &[("watch", "pods")],
        )
    };
    eventually("publish_queue_depth = 3 + 2", || depth() == Some(5.0)).await;
    daemon.shutdown();
    let _ = daemon.wait().await;
}

/// A JetStream nats-server and kube2nats in JetStream mode watching pods in namespaces `a` and
/// `b`; `extra` is appended to the config after `[nats]`.
async fn start_jetstream_for_a_and_b(
    sim: &ApiServer,
    extra: &str,
) -> (NatsServer, tempfile::TempDir, kube2nats::facade::Daemon) {
    let nats = NatsServer::start_with(kube2nats_harness::nats::NatsOptions {
        jetstream: true,
        ..Default::default()
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let token = token_file(dir.path(), INITIAL_TOKEN);
    let text = format!(
        "{}\n[[watches]]\nname = \"pods\"\nresource = \"pods\"\nnamespaces = [\"a\", \"b\"]\n\
         [nats]\nurl = \"{}\"\nmode = \"jetstream\"\n{extra}",
        kube_section(sim, &token),
        nats.url()
    );
    let daemon = kube2nats::facade::start(config_from(&text)).await.unwrap();
    (nats, dir, daemon)
}

/// Core mode, NATS down: `publish_queue_depth` counts the messages handed to the NATS client and
/// not yet on the socket, summed over the watch's namespaces (3 + 2), and `buffered_bytes` holds
/// their bytes; once NATS is back and the watch is idle, both drop to 0 without another event.
/// (The depth used to read 0 in core mode, and the bytes stayed charged until the budget ran out.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn core_mode_queue_depth_and_buffered_bytes_count_what_the_client_holds_until_flushed() {
    let mut env = Env::start(
        "[state]\nenabled = false\n\
         [[watches]]\nname = \"pods\"\nresource = \"pods\"\nnamespaces = [\"a\", \"b\"]\n",
    )
    .await;
    eventually("both namespaces synced", || {
        env.metric("kube2nats_watch_synced", &[("watch", "pods")]) == 1.0
    })
    .await;
    assert!(env.sim.wait_for_watches(2, WAIT).await, "both watches open");
    env.nats.stop().await;
    let connected = || env.metric("kube2nats_nats_connected", &[]);
    eventually("the client saw NATS go", || connected() == 0.0).await;
    for (ns, n) in [("a", 3), ("b", 2)] {
        for i in 0..n {
            env.sim.create("pods", Some(ns), pod(&format!("p{i}")));
        }
    }
    let depth = |env: &Env| env.metric("kube2nats_publish_queue_depth", &[("watch", "pods")]);
    let buffered = |env: &Env| env.metric("kube2nats_buffered_bytes", &[]);
    eventually("publish_queue_depth = 3 + 2 while NATS is down", || {
        depth(&env) == 5.0
    })
    .await;
    assert!(
        buffered(&env) > 5.0 * 100.0,
        "the 5 messages' bytes are charged"
    );
    // Idle, still down: nothing is on the socket, so nothing is given back.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(depth(&env), 5.0);
    assert!(buffered(&env) > 0.0);

    env.nats.restart().await.unwrap();
    eventually(
        "publish_queue_depth and buffered_bytes back to 0 once NATS is back",
        || depth(&env) == 0.0 && buffered(&env) == 0.0,
    )
    .await;
    // The connection carries events again, and an idle watch holds nothing afterwards.
    let nc = async_nats::connect(env.nats.url()).await.unwrap();
    let mut inbox = Inbox::subscribe(&nc, "kube.>").await;
    env.sim.create("pods", Some("b"), pod("after"));
    added(&mut inbox, "after").await;
    eventually("nothing held once idle", || {
        depth(&env) == 0.0 && buffered(&env) == 0.0
    })
    .await;
    env.daemon.shutdown();
    let _ = env.daemon.wait().await;
}

/// JetStream mode, state off (so no checkpoint ever settles the window): once a quiet watch's last
/// messages are acknowledged, they count as published and leave `publish_queue_depth` and
/// `buffered_bytes` without another event (not only at the watch's next event).
#[tokio::test]
async fn jetstream_acknowledgements_of_a_quiet_watch_are_collected_while_it_waits() {
    let sim = ApiServer::start(ApiServerOptions::default()).await.unwrap();
    let (_nats, _dir, daemon) = start_jetstream_for_a_and_b(
        &sim,
        "[nats.jetstream.stream]\nname = \"KUBE\"\nsubjects = [\"kube.>\"]\n\
         [state]\nenabled = false\n",
    )
    .await;
    let value = |name: &str, labels: &[(&str, &str)]| {
        metric(&daemon.metrics.render(), name, labels).unwrap_or(0.0)
    };
    eventually("both namespaces synced", || {
        value("kube2nats_watch_synced", &[("watch", "pods")]) == 1.0
    })
    .await;
    assert!(sim.wait_for_watches(2, WAIT).await, "both watches open");
    for (ns, n) in [("a", 3), ("b", 2)] {
        for i in 0..n {
            sim.create("pods", Some(ns), pod(&format!("p{i}")));
        }
    }
    eventually(
        "5 ADDED published (acknowledged), none in the window, no bytes held, no further event",
        || {
            value(
                "kube2nats_events_published_total",
                &[("watch", "pods"), ("type", "ADDED")],
            ) == 5.0
                && value("kube2nats_publish_queue_depth", &[("watch", "pods")]) == 0.0
                && value("kube2nats_buffered_bytes", &[]) == 0.0
        },
    )
    .await;
    daemon.shutdown();
    let _ = daemon.wait().await;
}

// ---------------------------------------------------------------------------------------------
// No secret in any output.

/// With debug logging, a NATS URL holding a password and an API server reached over plain
/// http:// with a token: the password appears in no log line (the NATS client logs its server
/// addresses, so credentials are taken out of them), and one warning says the token travels in
/// clear.
#[tokio::test]
async fn debug_logs_show_no_password_and_warn_about_a_token_over_http() {
    let sim = ApiServer::start(ApiServerOptions::default()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let token = token_file(dir.path(), INITIAL_TOKEN);
    let text = format!(
        "{}\n[nats]\nurl = \"nats://kube:s3cr3t-pw@127.0.0.1:{}\"\n{PODS_WATCH}",
        kube_section(&sim, &token),
        free_port()
    );
    let file = dir.path().join("kube2nats.toml");
    std::fs::write(&file, text).unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_kube2nats"))
        .arg("--config")
        .arg(&file)
        .env("RUST_LOG", "debug")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("starting kube2nats");
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let mut lines = Vec::new();
    let deadline = tokio::time::Instant::now() + WAIT;
    // Two failed NATS connection attempts (logged by the client with its server address) and
    // a request to the API server (which carries the token).
    while lines
        .iter()
        .filter(|l: &&String| l.contains("connection attempt failed"))
        .count()
        < 2
        || !lines.iter().any(|l| l.contains("connected to 127.0.0.1"))
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "log so far:\n{}",
            lines.join("\n")
        );
        if let Ok(line) = rx.recv_timeout(Duration::from_millis(100)) {
            lines.push(line);
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let _ = reader.join();
    lines.extend(rx.try_iter());
    let log = lines.join("\n");
    assert!(!log.contains("s3cr3t-pw"), "a password in the log:\n{log}");
    assert!(!log.contains(INITIAL_TOKEN), "the token in the log:\n{log}");
    let warnings = lines
        .iter()
        .filter(|l| l.contains("bearer token is sent over plain http://"))
        .count();
    assert_eq!(
        warnings, 1,
        "one warning about the token over http://:\n{log}"
    );
}

/// Credentials written into the NATS URL authenticate (async-nats itself ignores them; kube2nats
/// passes them to the client as options, which also keeps them out of its logged addresses): a
/// user and password, and a token.
#[tokio::test]
async fn credentials_in_the_nats_url_authenticate() {
    use kube2nats_harness::nats::{NatsAuth, NatsOptions};
    let user = || async_nats::ConnectOptions::with_user_and_password("kube".into(), "pw".into());
    let token = || async_nats::ConnectOptions::with_token("t0ken".into());
    for (auth, userinfo, options) in [
        (
            NatsAuth::UserPassword("kube".into(), "pw".into()),
            "kube:pw@",
            user(),
        ),
        (NatsAuth::Token("t0ken".into()), "t0ken@", token()),
    ] {
        let sim = ApiServer::start(ApiServerOptions::default()).await.unwrap();
        let nats = NatsServer::start_with(NatsOptions {
            auth: auth.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
        let url_with = nats.url().replace("nats://", &format!("nats://{userinfo}"));
        let nc = options.connect(nats.url()).await.unwrap();
        let mut inbox = Inbox::subscribe(&nc, "kube.>").await;
        let dir = tempfile::tempdir().unwrap();
        let token = token_file(dir.path(), INITIAL_TOKEN);
        let text = format!(
            "{}\n[nats]\nurl = \"{url_with}\"\n{PODS_WATCH}",
            kube_section(&sim, &token)
        );
        let daemon = kube2nats::facade::start(config_from(&text)).await.unwrap();
        sim.create("pods", Some("default"), pod("web"));
        added(&mut inbox, "web").await;
        daemon.shutdown();
        daemon.wait().await.unwrap();
    }
}

// ---------------------------------------------------------------------------------------------
// Configuration that cannot work is refused at start.

/// `kube2nats --check-config FILE`: exit code and stderr.
fn check_config(text: &str) -> (Option<i32>, String) {
    let file = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
    std::fs::write(file.path(), text).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kube2nats"))
        .arg("--check-config")
        .arg(file.path())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A JetStream stream whose subjects match none of a watch's subjects (here: the prefix differs)
/// exits 2 naming the key; label selectors with `>` and `<`, which Kubernetes accepts, pass.
#[test]
fn a_stream_that_cannot_store_the_watches_exits_2_and_gt_lt_selectors_pass() {
    let stream = "[nats]\nmode = \"jetstream\"\n[nats.jetstream.stream]\nname = \"KUBE\"\n";
    let (code, stderr) = check_config(&format!("{stream}subjects = [\"k8s.>\"]\n{PODS_WATCH}"));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr
            .contains("nats.jetstream.stream.subjects: [\"k8s.>\"] match no subject of watches[0]"),
        "{stderr}"
    );
    let (code, stderr) = check_config(&format!(
        "{stream}subjects = [\"kube.core.>\"]\n{PODS_WATCH}label_selector = \"tier>1,rev<3\"\n"
    ));
    assert_eq!(code, Some(0), "{stderr}");
}

// ---------------------------------------------------------------------------------------------
// Shutdown never hangs.

/// The real binary publishing to a NATS server that is down, with a tiny client queue (core
/// mode) and a steady stream of changes, so that a publish is waiting when SIGTERM comes.
fn stuck_publisher(sim: &ApiServer, dir: &tempfile::TempDir, grace: &str) -> Process {
    let token = token_file(dir.path(), INITIAL_TOKEN);
    let text = format!(
        // Durable state waits for its bucket (NATS is down for good here): off, so the watch
        // lists and its publisher gets stuck.
        "{}\n[nats]\nurl = \"nats://127.0.0.1:{}\"\nqueue_capacity = 8\n[state]\nenabled = false\n{PODS_WATCH}",
        kube_section(sim, &token).replace(
            "grace_period = \"5s\"",
            &format!("grace_period = \"{grace}\"")
        ),
        free_port()
    );
    for i in 0..50 {
        sim.create("pods", Some("default"), pod(&format!("p{i}")));
    }
    let process = Process::spawn(&text);
    process.line_with(&["listing"]);
    process
}

/// SIGTERM while NATS is down and a publish waits for room: kube2nats exits with code 1 within
/// the grace period and 2 s, saying what it abandoned; it never waits for SIGKILL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_nats_down_exits_1_within_the_grace_period() {
    let sim = ApiServer::start(ApiServerOptions::default()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = stuck_publisher(&sim, &dir, "2s");
    std::thread::sleep(Duration::from_millis(500));
    daemon.terminate();
    let (code, took) = daemon.wait_exit(Duration::from_secs(15));
    let log = daemon.rest();
    assert_eq!(code, Some(1), "{log}");
    assert!(
        took < Duration::from_secs(4),
        "exited after {took:?}:\n{log}"
    );
    assert!(
        log.contains("shutdown grace period of 2s exceeded: abandoned"),
        "{log}"
    );
}

/// SIGTERM, then `signal` during the graceful shutdown: exits at once with code 1, however
/// long the grace period.
async fn a_second_signal_exits_at_once(signal: &str) {
    let sim = ApiServer::start(ApiServerOptions::default()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = stuck_publisher(&sim, &dir, "60s");
    std::thread::sleep(Duration::from_millis(500));
    daemon.terminate();
    daemon.line_with(&["shutting down"]);
    let sent = std::process::Command::new("kill")
        .args([signal, &daemon.pid().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let (code, took) = daemon.wait_exit(Duration::from_secs(15));
    let log = daemon.rest();
    assert_eq!(code, Some(1), "{log}");
    assert!(
        took < Duration::from_secs(3),
        "exited after {took:?}:\n{log}"
    );
    assert!(log.contains("second signal during shutdown"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_sigterm_exits_at_once() {
    a_second_signal_exits_at_once("-TERM").await;
}

/// Ctrl-C after SIGTERM, as an operator at a terminal does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigint_after_sigterm_exits_at_once() {
    a_second_signal_exits_at_once("-INT").await;
}

/// The number in "abandoned N message(s)" of a shutdown log.
fn abandoned_count(log: &str) -> u64 {
    let after = log
        .split("exceeded: abandoned ")
        .nth(1)
        .unwrap_or_else(|| panic!("no abandoned count in the log:\n{log}"));
    after
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no number after \"abandoned\":\n{log}"))
}

/// Core mode: the abandoned count is the messages the NATS client holds unsent (its queue of
/// `queue_capacity` = 8, full) plus the one waiting for room: 8 or 9, never 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_in_core_mode_counts_the_messages_the_client_still_holds() {
    let sim = ApiServer::start(ApiServerOptions::default()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = stuck_publisher(&sim, &dir, "2s");
    std::thread::sleep(Duration::from_millis(500));
    daemon.terminate();
    let (code, _) = daemon.wait_exit(Duration::from_secs(15));
    let log = daemon.rest();
    assert_eq!(code, Some(1), "{log}");
    let abandoned = abandoned_count(&log);
    println!("abandoned {abandoned}");
    assert!(
        (8..=9).contains(&abandoned),
        "abandoned {abandoned}, expected the client's 8 queued messages and maybe the one in hand:\n{log}"
    );
}

/// JetStream mode, 20 busy namespaces, NATS gone: every target waits for acknowledgements that
/// never come. SIGTERM exits with code 1 within the grace period and 2 s, and the log counts
/// every unacknowledged message (at least one per target, at most the ack window and the one
/// in hand each).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_jetstream_down_and_busy_targets_exits_1_with_the_abandoned_count() {
    const TARGETS: usize = 20;
    const ACK_WINDOW: u64 = 4;
    let sim = ApiServer::start(ApiServerOptions::default()).await.unwrap();
    let mut nats = NatsServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let token = token_file(dir.path(), INITIAL_TOKEN);
    let namespaces: Vec<String> = (0..TARGETS).map(|i| format!("\"ns-{i}\"")).collect();
    let text = format!(
        "{}\n[nats]\nurl = \"{}\"\nmode = \"jetstream\"\n[nats.jetstream]\nack_timeout = \"1s\"\nmax_ack_inflight = {ACK_WINDOW}\n\
         [state]\nenabled = false\n[[watches]]\nname = \"pods\"\nresource = \"pods\"\nnamespaces = [{}]\n",
        kube_section(&sim, &token).replace("grace_period = \"5s\"", "grace_period = \"2s\""),
        nats.url(),
        namespaces.join(", ")
    );
    let mut daemon = Process::spawn(&text);
    assert!(
        sim.wait_for_watches(TARGETS, WAIT).await,
        "every target watching"
    );
    nats.kill().await;
    for i in 0..TARGETS {
        for j in 0..10 {
            sim.create("pods", Some(&format!("ns-{i}")), pod(&format!("p{j}")));
        }
    }
    daemon.line_with(&["publish to NATS failed; retrying"]);
    daemon.terminate();
    let (code, took) = daemon.wait_exit(Duration::from_secs(30));
    let log = daemon.rest();
    assert_eq!(code, Some(1), "{log}");
    assert!(
        took < Duration::from_secs(4),
        "exited after {took:?}:\n{log}"
    );
    let abandoned = abandoned_count(&log);
    println!("abandoned {abandoned}");
    let most = TARGETS as u64 * (ACK_WINDOW + 2);
    assert!(
        (TARGETS as u64..=most).contains(&abandoned),
        "abandoned {abandoned}, expected {TARGETS}..={most}:\n{log}"
    );
}

// ---------------------------------------------------------------------------------------------
// Every read has a deadline.

/// A watch answered by the headers of a 500 whose body never comes (a stalling proxy): the
/// body read ends at the request timeout, the watch backs off and reopens, and the next change
/// is published.
#[tokio::test]
async fn a_watch_error_that_stalls_after_its_headers_does_not_hang_the_watch() {
    use kube2nats_harness::apiserver::{Failure, RequestFilter};
    let sim = ApiServer::start(ApiServerOptions::default()).await.unwrap();
    let nats = NatsServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let token = token_file(dir.path(), INITIAL_TOKEN);
    let text = format!(
        "{}\n[nats]\nurl = \"{}\"\n{PODS_WATCH}",
        kube_section(&sim, &token).replace(
            "watch_timeout = \"30s\"",
            "watch_timeout = \"30s\"\nrequest_timeout = \"1s\""
        ),
        nats.url()
    );
    let nc = async_nats::connect(nats.url()).await.unwrap();
    let mut inbox = Inbox::subscribe(&nc, "kube.>").await;
    let daemon = kube2nats::facade::start(config_from(&text)).await.unwrap();
    assert!(sim.wait_for_watches(1, WAIT).await, "the watch opened");

    sim.fail_next_matching(1, RequestFilter::Watch, Failure::StallAfterHeaders);
    sim.drop_watches();
    sim.create("pods", Some("default"), pod("after"));
    added(&mut inbox, "after").await;
    daemon.shutdown();
    let _ = daemon.wait().await;
}
