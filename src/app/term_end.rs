//! How a term of watching ends: at shutdown its tasks drain (publish what they hold, within the
//! grace period); after a lost term, what the NATS client holds is flushed before another
//! replica can take over, or the process exits.

use std::time::Duration;

use async_nats::connection::State;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::config::Config;
use crate::publish::Nats;
use crate::telemetry::logging::human;
use crate::telemetry::target::TargetGauges;

/// After a lost term, makes sure the messages already handed to the NATS client reach the
/// server before another replica can take over; if they cannot (NATS unreachable), the
/// client would send them on reconnecting, behind the next holder's: only ending the process
/// discards them.
pub(super) async fn flush_after_lost_term(
    config: &Config,
    nats: &Nats,
) -> Result<(), QueuedAfterLostTerm> {
    let election = &config.leader_election;
    // Another replica acquires no sooner than lease_duration after this one's last renewal,
    // which is renew_deadline before now: half that margin leaves the flush room to land.
    let within = election
        .lease_duration
        .saturating_sub(election.renew_deadline)
        / 2;
    match tokio::time::timeout(within, nats.client().flush()).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(_)) | Err(_) => Err(QueuedAfterLostTerm { within }),
    }
}

/// A term was lost while NATS did not take the messages already handed to the client (not
/// flushed within `within`). Once reconnected the client would publish them after another
/// replica had taken over, out of order with its messages, so kube2nats exits without draining
/// (its pod restarts as a standby) — as client-go's controllers exit on a lost lease.
#[derive(Debug, thiserror::Error)]
#[error("lost the Lease with messages still queued for NATS (not flushed within {within:?}); exiting so that they are never published after another replica took over")]
pub(super) struct QueuedAfterLostTerm {
    within: Duration,
}

/// Waits for the watch tasks, which publish what they hold and stop, within the grace period;
/// past it, aborts them and says how much was abandoned. With nothing left to lose by not
/// waiting ([`nothing_to_lose`]), aborts them at once.
pub(super) async fn drain(
    mut sets: Vec<JoinSet<()>>,
    grace_period: Duration,
    targets: &[TargetGauges],
    nats: &Nats,
) -> anyhow::Result<()> {
    tracing::info!(
        grace_period = human(grace_period),
        "shutting down: stopping watches and publishing what is in flight"
    );
    let tasks: usize = sets.iter().map(JoinSet::len).sum();
    let joined = tokio::select! {
        joined = join_within(&mut sets, grace_period, targets) => Some(joined),
        () = nothing_to_lose(nats, targets) => None,
    };
    let Some(joined) = joined else {
        for set in &mut sets {
            set.abort_all();
        }
        tracing::info!("NATS unreachable and no message unconfirmed: stopped the watches without waiting for NATS; the next start resumes from the saved state");
        return Ok(());
    };
    if let Err(abandoned) = joined {
        anyhow::bail!(
            "shutdown grace period of {:?} exceeded: abandoned {abandoned} message(s) not yet acknowledged or flushed by NATS, held by up to {tasks} watch task(s); the next start re-announces them (by its list, or from the checkpoint)",
            grace_period,
        );
    }
    tracing::info!("all watches stopped; in-flight messages published");
    Ok(())
}

/// How long NATS must stay unreachable, with no message unconfirmed, before a shutdown stops
/// waiting for it: a connection that is only reconnecting (a server restart, a blip) is back
/// sooner, and the watches then finish writing their state.
const NATS_AWAY_FOR: Duration = Duration::from_millis(250);

/// Resolves once nothing is lost by not waiting for the watch tasks: NATS has been unreachable
/// for [`NATS_AWAY_FOR`] and the `targets` hold no message NATS has not taken. What the tasks
/// would still write (a last checkpoint, journal records, the mirror) needs NATS, and left
/// undone costs nothing: the next start resumes from the saved state, as after a crash
/// (docs/durable-state.md), and anything the tasks had read and not yet handed over is read
/// again from there.
async fn nothing_to_lose(nats: &Nats, targets: &[TargetGauges]) {
    const LOOK_EVERY: Duration = Duration::from_millis(50);
    let mut away_since = None;
    loop {
        let away = nats.client().connection_state() != State::Connected;
        let unconfirmed: i64 = targets.iter().map(TargetGauges::unconfirmed).sum();
        away_since = match away && unconfirmed == 0 {
            true => Some(away_since.unwrap_or_else(Instant::now)),
            false => None,
        };
        if away_since.is_some_and(|since| since.elapsed() >= NATS_AWAY_FOR) {
            return;
        }
        tokio::time::sleep(LOOK_EVERY).await;
    }
}

/// Waits for the tasks of `sets`, asked to stop, within `grace_period`; past it, aborts those
/// left and returns how many messages `targets` held unconfirmed.
pub(super) async fn join_within(
    sets: &mut [JoinSet<()>],
    grace_period: Duration,
    targets: &[TargetGauges],
) -> Result<(), i64> {
    let drained = tokio::time::timeout(grace_period, async {
        for set in sets.iter_mut() {
            while set.join_next().await.is_some() {}
        }
    })
    .await;
    if drained.is_ok() {
        return Ok(());
    }
    let abandoned: i64 = targets.iter().map(TargetGauges::unconfirmed).sum();
    for set in sets.iter_mut() {
        set.abort_all();
    }
    Err(abandoned)
}
