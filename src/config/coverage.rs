//! Whether the JetStream stream kube2nats manages can ever store what the watches publish.
//!
//! A watch whose subjects no stream subject can match publishes into nothing: every publish
//! fails with "no responders" and is retried forever. That is a configuration that cannot work,
//! so it is refused at start, naming the watch and the stream's subjects.
//!
//! The check is for disjointness, not for full coverage: what a watch's `{group}`, `{version}`,
//! `{resource}`, `{namespace}`, `{name}` and `{type}` render to is known only per object (or
//! after discovery), so those tokens are wildcards here, and a stream that matches some of the
//! watch's subjects (say `kube.core.>` for a watch of pods) passes.

use super::checker::Checker;
use super::nats::StreamConfig;
use super::watches::WatchConfig;

/// Refuses every watch none of whose subjects the stream's subjects can match.
pub(super) fn check_stream_covers_watches(
    c: &mut Checker,
    stream: &StreamConfig,
    watches: &[WatchConfig],
) {
    for (i, watch) in watches.iter().enumerate() {
        let pattern = watch
            .subject
            .token_pattern(&watch.subject_prefix, &watch.cluster);
        if !stream.subjects.iter().any(|s| intersects(&pattern, s)) {
            c.fail::<()>(
                "nats.jetstream.stream.subjects",
                format!(
                    "{:?} match no subject of watches[{i}] ({:?}, subjects {}): its messages could never be stored",
                    stream.subjects,
                    watch.name,
                    shown(&pattern)
                ),
            );
        }
    }
}

/// Whether some subject of `pattern` (literal tokens, `None` = any one token) matches the NATS
/// subscription `filter` (`*` is one token, a last `>` one or more).
fn intersects(pattern: &[Option<String>], filter: &str) -> bool {
    let filter: Vec<&str> = filter.split('.').collect();
    for (i, f) in filter.iter().enumerate() {
        if *f == ">" {
            return pattern.len() > i;
        }
        let Some(token) = pattern.get(i) else {
            return false;
        };
        match token {
            Some(literal) if *f != "*" && f != literal => return false,
            _ => {}
        }
    }
    pattern.len() == filter.len()
}

/// The pattern as a NATS subject with `*` for the tokens that vary.
fn shown(pattern: &[Option<String>]) -> String {
    pattern
        .iter()
        .map(|t| t.as_deref().unwrap_or("*"))
        .collect::<Vec<_>>()
        .join(".")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::testing::*;

    fn p(s: &str) -> Vec<Option<String>> {
        s.split('.')
            .map(|t| (t != "*").then(|| t.to_owned()))
            .collect()
    }

    #[test]
    fn wildcard_semantics() {
        let watch = p("kube.*.*.*.*.*.*");
        assert!(intersects(&watch, "kube.>"));
        assert!(intersects(&watch, ">"));
        assert!(intersects(&watch, "kube.core.>"));
        assert!(intersects(&watch, "kube.*.v1.pods.*.*.*"));
        assert!(intersects(&watch, "*.*.*.*.*.*.added"));
        assert!(!intersects(&watch, "k8s.>"));
        assert!(!intersects(&watch, "kube.*"), "* is one token");
        assert!(
            !intersects(&watch, "kube.*.*.*.*.*.*.*"),
            "one token too many"
        );
        assert!(
            !intersects(&p("kube"), "kube.>"),
            "> needs at least one token"
        );
        assert!(intersects(&p("a.b.kube.*"), "a.b.>"));
    }

    #[test]
    fn a_stream_that_cannot_store_a_watch_is_refused() {
        let stream = "[nats]\nmode = \"jetstream\"\n[nats.jetstream.stream]\nname = \"KUBE\"\n";
        assert_error(
            &format!("{stream}subjects = [\"k8s.>\"]"),
            "nats.jetstream.stream.subjects: [\"k8s.>\"] match no subject of watches[0] (\"pods\", subjects kube.*.*.*.*.*.*): its messages could never be stored",
        );
        assert_error(
            &format!("{stream}subjects = [\"kube.*\"]\n[publish]\nsubject_prefix = \"kube\""),
            "nats.jetstream.stream.subjects: [\"kube.*\"] match no subject of watches[0] (\"pods\", subjects kube.*.*.*.*.*.*): its messages could never be stored",
        );
        for ok in ["[\"kube.>\"]", "[\"other.>\", \"kube.core.>\"]", "[\">\"]"] {
            load_str(&format!("{stream}subjects = {ok}\n{MINIMAL}"))
                .unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        // Core mode has no stream to check.
        load_str(&format!(
            "[nats.jetstream.stream]\nname = \"K\"\nsubjects = [\"k8s.>\"]\n{MINIMAL}"
        ))
        .unwrap();
    }
}
