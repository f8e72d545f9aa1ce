//! Stage two, the meaning: `Config::try_from(RawConfig)` checks every section with its own file's
//! check and builds the typed [`Config`], recording every problem in a [`Checker`] rather than
//! stopping at the first; then the checks that span sections (the stream covers the watches'
//! subjects, the replay window covers a leader's takeover).

use super::checker::Checker;
use super::coverage::check_stream_covers_watches;
use super::error::ConfigErrors;
use super::kubernetes::check_kubernetes;
use super::log::check_log;
use super::nats::{check_nats, NatsMode};
use super::root::Config;
use super::root::RawConfig;
use super::shutdown::check_shutdown;
use super::watches::check_watches;

impl TryFrom<RawConfig> for Config {
    type Error = ConfigErrors;

    /// Validates every key and reports every problem, not just the first.
    fn try_from(raw: RawConfig) -> Result<Config, ConfigErrors> {
        let RawConfig {
            log,
            kubernetes,
            nats,
            publish,
            http,
            shutdown,
            state,
            leader_election,
            mirror,
            watches,
        } = raw;
        let mut c = Checker::default();
        let log = check_log(&mut c, &log);
        let kubernetes = check_kubernetes(&mut c, &kubernetes);
        let nats = check_nats(&mut c, &nats);
        let mirrored: Vec<Option<bool>> = watches.iter().map(|w| w.mirror).collect();
        let watches = check_watches(&mut c, &publish, &watches);
        if let (Some(NatsMode::JetStream(js)), Some(watches)) =
            (nats.as_ref().map(|n| &n.mode), &watches)
        {
            if let Some(stream) = &js.stream {
                check_stream_covers_watches(&mut c, stream, watches);
            }
        }
        let http = super::http::check_http(&mut c, &http);
        let shutdown = check_shutdown(&mut c, &shutdown);
        let state = super::state::check_state(&mut c, &state);
        let leader_election = super::leader::check_leader_election(&mut c, &leader_election);
        let mirror = super::mirror::check_mirror(&mut c, &mirror);
        if let (Some(nats), Some(state), Some(election)) = (&nats, &state, &leader_election) {
            super::leader::check_replay_window(&mut c, &nats.mode, state, election);
        }
        match (
            log,
            kubernetes,
            nats,
            watches,
            http,
            shutdown,
            state,
            leader_election,
            mirror,
        ) {
            (
                Some(log),
                Some(kubernetes),
                Some(nats),
                Some(watches),
                Some(http),
                Some(shutdown),
                Some(state),
                Some(leader_election),
                Some(mirror),
            ) if c.errors.is_empty() => Ok(Config {
                log,
                kubernetes,
                nats,
                http,
                shutdown,
                state,
                leader_election,
                watches: super::mirror::resolve_watches(watches, &mirrored, &mirror),
                mirror,
            }),
            _ => Err(ConfigErrors(c.errors)),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::testing::*;

    #[test]
    fn durations() {
        assert_error(
            "[kubernetes]\nwatch_timeout = \"soon\"",
            "kubernetes.watch_timeout: invalid duration \"soon\" (expected humantime like 30s, 5m)",
        );
        assert_error(
            "[kubernetes]\nwatch_timeout = \"500ms\"",
            "kubernetes.watch_timeout: \"500ms\" is too short (allowed: >= 1s)",
        );
        assert_error(
            "[shutdown]\ngrace_period = \"10\"",
            "shutdown.grace_period: invalid duration \"10\"",
        );
        assert_error(
            "[nats]\nconnect_timeout = \"0s\"",
            "nats.connect_timeout: \"0s\" is too short (allowed: > 0)",
        );
    }

    #[test]
    fn numeric_ranges() {
        assert_error(
            "[kubernetes]\nmax_concurrent_lists = 0",
            "kubernetes.max_concurrent_lists: 0 is out of range (allowed: >= 1)",
        );
        assert_error(
            "[kubernetes]\nlist_page_size = 0",
            "kubernetes.list_page_size: 0 is out of range (allowed: 1..=10000)",
        );
        assert_error(
            "[kubernetes]\nlist_page_size = 10001",
            "kubernetes.list_page_size: 10001 is out of range",
        );
        assert_error(
            "[kubernetes]\nmax_line_bytes = 100",
            "kubernetes.max_line_bytes: 100 is out of range (allowed: >= 1024)",
        );
        assert_error(
            "[nats]\nqueue_capacity = 0",
            "nats.queue_capacity: 0 is out of range (allowed: >= 1)",
        );
        assert_error(
            "[nats]\nmax_buffered_bytes = 1000",
            "nats.max_buffered_bytes: 1000 is out of range (allowed: >= 1048576)",
        );
        assert_error(
            "[nats.jetstream]\nmax_ack_inflight = 0",
            "nats.jetstream.max_ack_inflight: 0 is out of range",
        );
    }

    #[test]
    fn enums_list_allowed_values() {
        assert_error(
            "[log]\nformat = \"xml\"",
            "log.format: invalid value \"xml\" (allowed: text, json)",
        );
        assert_error(
            "[kubernetes]\nrbac_check = \"ignore\"",
            "kubernetes.rbac_check: invalid value \"ignore\" (allowed: warn, fail)",
        );
        assert_error(
            "[nats]\nmode = \"stream\"",
            "nats.mode: invalid value \"stream\" (allowed: core, jetstream)",
        );
        assert_error(
            "[publish]\npayload = \"raw\"",
            "publish.payload: invalid value \"raw\" (allowed: event, object, metadata)",
        );
        assert_error(
            "[nats.jetstream.stream]\nretention = \"forever\"",
            "nats.jetstream.stream.retention: invalid value \"forever\" (allowed: limits, interest, workqueue)",
        );
        assert_error(
            "[nats.jetstream.stream]\nstorage = \"disk\"",
            "nats.jetstream.stream.storage: invalid value \"disk\" (allowed: file, memory)",
        );
        assert_error(
            "[log]\nfilter = \"x=loud\"",
            "log.filter: invalid filter \"x=loud\"",
        );
    }
}
