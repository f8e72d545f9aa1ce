//! deploy/monitoring/: the alerts pass `promtool check rules` and their unit tests
//! (`promtool test rules`), and every metric the alerts and the Grafana dashboard query is one a
//! running kube2nats exports. docs/metrics.md: the metrics reference lists exactly the families
//! kube2nats exports, each with its labels.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use kube2nats_harness::apiserver::{ApiServer, ApiServerOptions, Failure, RequestFilter};
use kube2nats_harness::nats::NatsServer;

fn monitoring(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy/monitoring")
        .join(file)
}

fn read(file: &str) -> String {
    std::fs::read_to_string(monitoring(file)).unwrap_or_else(|e| panic!("reading {file}: {e}"))
}

/// The PrometheusRule manifest, read as YAML into a JSON value.
fn prometheus_rule() -> serde_json::Value {
    serde_saphyr::from_str(&read("prometheusrule.yaml")).unwrap()
}

fn promtool(args: &[&str], dir: &Path) -> String {
    let promtool = std::env::var("PROMTOOL_BIN").unwrap_or_else(|_| "promtool".into());
    let out = Command::new(&promtool)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {promtool}: {e}; install it with `apt-get install prometheus` or run scripts/test, which installs it"));
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?}:\n{report}");
    report
}

/// The PrometheusRule's `spec` is a plain Prometheus rule file: promtool checks it and runs the
/// unit tests of every alert (firing when it should, silent when it should not).
#[test]
fn alert_rules_pass_promtool_check_and_unit_tests() {
    let rule = prometheus_rule();
    assert_eq!(rule["kind"], "PrometheusRule");
    let dir = tempfile::tempdir().unwrap();
    // JSON is YAML: promtool reads the spec written as JSON.
    std::fs::write(
        dir.path().join("kube2nats.rules.yaml"),
        serde_json::to_string_pretty(&rule["spec"]).unwrap(),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("prometheusrule.test.yaml"),
        read("prometheusrule.test.yaml"),
    )
    .unwrap();
    let report = promtool(&["check", "rules", "kube2nats.rules.yaml"], dir.path());
    assert!(report.contains("SUCCESS: 13 rules found"), "{report}");
    promtool(&["test", "rules", "prometheusrule.test.yaml"], dir.path());

    // Every alert has a unit test.
    let tests = read("prometheusrule.test.yaml");
    for alert in rule["spec"]["groups"][0]["rules"].as_array().unwrap() {
        let name = alert["alert"].as_str().unwrap();
        assert!(
            tests.contains(&format!("alertname: {name}")),
            "{name} has no test"
        );
    }
}

/// Metric names in PromQL text: `kube2nats_*` and `process_*` identifiers, with a histogram's
/// `_bucket`/`_sum`/`_count` series mapped to its family.
fn metric_names(promql: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (start, _) in promql.match_indices(['k', 'p']) {
        let rest = &promql[start..];
        if !(rest.starts_with("kube2nats_") || rest.starts_with("process_")) {
            continue;
        }
        let preceded_by_ident = promql[..start]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        if preceded_by_ident {
            continue;
        }
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        let name = &rest[..end];
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .filter(|f| f.ends_with("_seconds"))
            .unwrap_or(name);
        names.insert(family.to_owned());
    }
    names
}

/// Every PromQL expression of the dashboard (panel targets and template variables).
fn dashboard_queries() -> Vec<String> {
    let dashboard: serde_json::Value = serde_json::from_str(&read("dashboard.json")).unwrap();
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        let targets = panel["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "panel {} has no query", panel["title"]);
        for target in targets {
            queries.push(target["expr"].as_str().unwrap().to_owned());
        }
    }
    for variable in dashboard["templating"]["list"].as_array().unwrap() {
        if let Some(q) = variable["definition"].as_str() {
            queries.push(q.to_owned());
        }
    }
    queries
}

/// The metric families of a scrape (`# TYPE` lines).
fn exported(scrape: &str) -> BTreeSet<String> {
    scrape
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

/// A scrape of kube2nats after it has published (JetStream, durable state), relisted (410),
/// restarted its watch (500s), dropped duplicates and met a garbage line: every family it
/// registers has samples by then.
async fn exercised_scrape() -> String {
    let sim = ApiServer::start(ApiServerOptions::default()).await.unwrap();
    sim.create("pods", Some("default"), pod("a"));
    let nats = NatsServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    // Mirrored, so that the mirror's families are in the scrape too.
    let config = jetstream_pods_config(&sim, &nats, dir.path())
        .replace("[[watches]]", "[mirror]\nenabled = true\n[[watches]]");
    let daemon = kube2nats::facade::start(config_from(&config))
        .await
        .unwrap();
    let synced = |daemon: &kube2nats::facade::Daemon| {
        metric(
            &daemon.metrics.render(),
            "kube2nats_watch_synced",
            &[("watch", "pods")],
        ) == Some(1.0)
    };
    eventually("synced", || synced(&daemon)).await;
    sim.inject_garbage_line();
    assert!(sim.wait_for_watches(1, WAIT).await);
    // Keep the watch from resuming until the history it would resume from is gone: a 410.
    sim.fail_next_matching(2, RequestFilter::Watch, Failure::Internal);
    sim.drop_watches();
    sim.create("pods", Some("default"), pod("gap"));
    sim.compact();
    eventually("relisted after 410", || {
        metric(
            &daemon.metrics.render(),
            "kube2nats_relists_total",
            &[("watch", "pods"), ("reason", "expired")],
        ) >= Some(1.0)
    })
    .await;
    eventually("synced again", || synced(&daemon)).await;
    eventually("checkpointed", || {
        metric(
            &daemon.metrics.render(),
            "kube2nats_state_checkpoints_total",
            &[("watch", "pods")],
        ) >= Some(1.0)
    })
    .await;
    let scrape = daemon.metrics.render();
    daemon.shutdown();
    daemon.wait().await.unwrap();
    scrape
}

/// Every metric the dashboard and the alerts query is in a real scrape of kube2nats after it
/// has published, relisted (410), dropped duplicates and met a garbage line: a renamed metric
/// or a typo in a panel fails here, not on an operator's screen.
#[tokio::test]
async fn dashboard_and_alerts_query_only_exported_metrics() {
    let scrape = exercised_scrape().await;
    let exported = exported(&scrape);

    let mut queries = dashboard_queries();
    let rule = prometheus_rule();
    for alert in rule["spec"]["groups"][0]["rules"].as_array().unwrap() {
        queries.push(alert["expr"].as_str().unwrap().to_owned());
    }
    let mut used = BTreeSet::new();
    for q in &queries {
        let names = metric_names(q);
        assert!(!names.is_empty(), "query uses no kube2nats metric: {q}");
        used.extend(names);
    }
    let unknown: Vec<&String> = used.difference(&exported).collect();
    assert!(
        unknown.is_empty(),
        "queried but not exported: {unknown:?}\nexported: {exported:?}"
    );
    // The dashboard and alerts cover the watch, publish, NATS, state and leader stages at least.
    for family in [
        "kube2nats_watch_synced",
        "kube2nats_events_published_total",
        "kube2nats_publish_errors_total",
        "kube2nats_nats_connected",
        "kube2nats_watch_last_event_timestamp_seconds",
        "kube2nats_leader",
        "kube2nats_state_checkpoint_age_seconds",
    ] {
        assert!(
            used.contains(family),
            "{family} is not on the dashboard or in an alert"
        );
    }
}

/// The label names of a sample line's `{...}`, or none; values may hold escaped quotes.
fn sample_label_names(labels: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = labels;
    while let Some((name, after)) = rest.split_once("=\"") {
        names.insert(name.trim_start_matches(',').trim().to_owned());
        let mut escaped = false;
        let end = after
            .char_indices()
            .find(|&(_, c)| {
                let closes = c == '"' && !escaped;
                escaped = c == '\\' && !escaped;
                closes
            })
            .map_or(after.len(), |(i, _)| i + 1);
        rest = &after[end..];
    }
    names
}

/// Every `kube2nats_` family of a scrape with the label names of its samples (a histogram's
/// `le` left out: it belongs to every histogram).
fn families_with_labels(scrape: &str) -> BTreeMap<String, BTreeSet<String>> {
    let families = exported(scrape);
    let mut labels: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in scrape.lines().filter(|l| l.starts_with("kube2nats_")) {
        let (name, rest) = match line.split_once('{') {
            Some((name, rest)) => (name, rest.rsplit_once('}').map_or("", |(l, _)| l)),
            None => (line.split_whitespace().next().unwrap_or(line), ""),
        };
        let family = ["", "_bucket", "_sum", "_count"]
            .iter()
            .filter_map(|suffix| name.strip_suffix(suffix))
            .find(|f| families.contains(*f))
            .unwrap_or_else(|| panic!("sample {name} of no family"));
        let mut names = sample_label_names(rest);
        names.remove("le");
        labels.entry(family.to_owned()).or_default().extend(names);
    }
    labels
}

/// The reference table of docs/metrics.md: each metric with its label names.
fn documented_metrics() -> BTreeMap<String, BTreeSet<String>> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/metrics.md");
    let doc = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {path:?}: {e}"));
    let mut metrics = BTreeMap::new();
    for row in doc.lines().filter(|l| l.starts_with("| `kube2nats_")) {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let name = cells[1].trim_matches('`').to_owned();
        let labels: BTreeSet<String> = cells[3]
            .split(',')
            .map(|l| l.trim().trim_matches('`'))
            .filter(|l| !l.is_empty() && *l != "—")
            .map(str::to_owned)
            .collect();
        assert!(
            metrics.insert(name.clone(), labels).is_none(),
            "{name} is documented twice"
        );
    }
    assert!(!metrics.is_empty(), "no metric rows in {path:?}");
    metrics
}

/// docs/metrics.md lists every family kube2nats exports, with exactly its labels, and nothing
/// it does not export: a metric added, renamed or relabelled without its documentation fails
/// here.
#[tokio::test]
async fn metrics_reference_matches_what_kube2nats_exports() {
    let exported = families_with_labels(&exercised_scrape().await);
    let documented = documented_metrics();
    let undocumented: Vec<&String> = exported
        .keys()
        .filter(|f| !documented.contains_key(*f))
        .collect();
    assert!(
        undocumented.is_empty(),
        "exported but missing from docs/metrics.md: {undocumented:?}"
    );
    let unexported: Vec<&String> = documented
        .keys()
        .filter(|f| !exported.contains_key(*f))
        .collect();
    assert!(
        unexported.is_empty(),
        "in docs/metrics.md but not exported: {unexported:?}"
    );
    for (family, labels) in &exported {
        assert_eq!(
            &documented[family], labels,
            "labels of {family}: docs/metrics.md vs /metrics"
        );
    }
}

#[test]
fn sample_label_names_skip_values() {
    let names = sample_label_names(r#"watch="a,b=\"c\"",reason="x""#);
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    assert_eq!(names, ["reason", "watch"]);
}

#[test]
fn metric_names_are_found_in_promql() {
    let names = metric_names(
        "histogram_quantile(0.99, sum by (le) (rate(kube2nats_publish_duration_seconds_bucket[5m]))) and on (instance) kube2nats_build_info + process_cpu_seconds_total + my_kube2nats_x",
    );
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "kube2nats_build_info",
            "kube2nats_publish_duration_seconds",
            "process_cpu_seconds_total"
        ]
    );
}
