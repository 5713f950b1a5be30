//! Failover, two ways:
//!
//! * Real processes: three `raft-node` processes (fjall, fsync on, QUIC on loopback); the leader
//!   is killed with SIGKILL and a client retries `SET` against both survivors (a fresh attempt
//!   on each every 20 ms, since an attempt on a follower may wait for the write's forwarding)
//!   until one succeeds. The time from the kill to that success is measured over many trials, the
//!   killed node being restarted between trials. The target is a median under one election
//!   timeout plus the fetch timeout: followers notice the silent leader after the fetch
//!   timeout, then an election takes about one election timeout. The next kill follows as soon
//!   as the restarted node is ready and the cluster agrees on a leader again (a survivor's
//!   connection to the restarted node's previous process is reset by the new process at once).
//! * In process (raft-core's driver on the `mem` network): a follower is cut off from both
//!   peers for several election timeouts, then healed; the leader changes and epoch changes
//!   this causes are counted with pre-vote on and off (and, as a control, with pre-vote and
//!   sticky votes both off). With pre-vote the isolated follower cannot raise its epoch, so
//!   its return changes nothing.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use raft_core::mem::transport::MemNetwork;
use raft_core::{Config, ReplicaId};
use serde_json::json;
use tokio::task::JoinSet;

use crate::cluster_suite::error_figure;
use crate::core_suite::{leader, member, Member};
use crate::proc_cluster::{node_binary, ProcCluster, Timers};
use crate::resp_load::Conn;
use crate::{Figure, Size};

/// Runs the suite.
pub fn run(size: Size) -> Vec<Figure> {
    let mut out = Vec::new();
    let name = "kill -9 leader to first write";
    match kill_leader_figure(size, name, size.pick(20, 2)) {
        Ok(f) => out.push(f),
        Err(e) => out.push(error_figure("failover", name, e)),
    }
    out.extend(rejoin_figures(size));
    out
}

/// The value at quantile `q` of sorted `xs` (nearest rank).
fn quantile(xs: &[f64], q: f64) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    let rank = (q * xs.len() as f64).ceil() as usize;
    xs[rank.clamp(1, xs.len()) - 1]
}

fn kill_leader_figure(size: Size, name: &str, trials: usize) -> Result<Figure, String> {
    let bin = node_binary()?;
    let timers = size.pick(
        Timers::NODE_DEFAULTS,
        Timers {
            election_ms: 300,
            fetch_ms: 1000,
            fetch_max_wait_ms: 250,
        },
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("runtime: {e}"))?;
    let mut ms = rt.block_on(kill_leader_trials(&bin, timers, trials))?;
    ms.sort_by(f64::total_cmp);
    let round = |x: f64| (x * 10.0).round() / 10.0;
    Ok(Figure {
        suite: "failover",
        name: name.into(),
        params: json!({
            "voters": 3, "storage": "fjall", "fsync": true, "trials": trials,
            "election_timeout_ms": timers.election_ms, "fetch_timeout_ms": timers.fetch_ms,
            "fetch_max_wait_ms": timers.fetch_max_wait_ms,
            "target_median_ms": timers.election_ms + timers.fetch_ms,
            "retry_interval_ms": 20,
        }),
        values: json!({
            "median_ms": round(quantile(&ms, 0.5)),
            "p99_ms": round(quantile(&ms, 0.99)),
            "min_ms": round(quantile(&ms, 0.0)),
            "max_ms": round(quantile(&ms, 1.0)),
        }),
    })
}

async fn kill_leader_trials(
    bin: &std::path::Path,
    timers: Timers,
    trials: usize,
) -> Result<Vec<f64>, String> {
    let mut cluster = ProcCluster::start(bin, "fjall", timers).await?;
    let mut ms = Vec::with_capacity(trials);
    for trial in 0..trials {
        let leader = cluster.wait_leader().await?;
        let survivors: Vec<u16> = cluster
            .ids()
            .into_iter()
            .filter(|id| *id != leader)
            .map(|id| cluster.port(id))
            .collect();
        let killed_at = Instant::now();
        cluster.kill(leader);
        let took = first_write(&survivors, killed_at, trial)
            .await
            .map_err(|e| format!("trial {trial}: {e}{}", cluster.log_tails()))?;
        eprintln!(
            "bench: failover trial {}/{trials}: leader r{leader} killed, first write after \
             {:.0} ms",
            trial + 1,
            took.as_secs_f64() * 1000.0
        );
        ms.push(took.as_secs_f64() * 1000.0);
        cluster.spawn(leader)?;
        cluster.wait_ready(leader).await?;
    }
    Ok(ms)
}

/// One `SET` on a fresh connection; `Ok` only on `+OK`.
async fn attempt(port: u16, key: String) -> Result<(), String> {
    let mut c = Conn::connect(port, Duration::from_secs(1)).await?;
    c.cmd(&["SET", &key, "after-failover"], Duration::from_secs(30))
        .await
        .map(drop)
}

/// Starts an attempt on every survivor every 20 ms until one succeeds; the time since
/// `killed_at`.
async fn first_write(
    survivors: &[u16],
    killed_at: Instant,
    trial: usize,
) -> Result<Duration, String> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut tick = tokio::time::interval(Duration::from_millis(20));
    let mut attempts = JoinSet::new();
    let mut last_error = String::new();
    loop {
        tokio::select! {
            _ = tick.tick() => {
                for &port in survivors {
                    attempts.spawn(attempt(port, format!("failover:{trial}")));
                }
            }
            Some(done) = attempts.join_next() => match done {
                Ok(Ok(())) => return Ok(killed_at.elapsed()),
                Ok(Err(e)) => last_error = e,
                Err(e) => last_error = e.to_string(),
            },
            _ = tokio::time::sleep_until(deadline) => {
                return Err(format!("no write succeeded within 60 s; last error: {last_error}"));
            }
        }
    }
}

/// What one rejoin trial saw.
struct Rejoin {
    /// Distinct `(epoch, leader)` pairs reported after the first, on connected members.
    leader_changes: u64,
    /// Epoch at the end minus epoch before the partition.
    epoch_changes: u64,
    /// How far the isolated follower raised its own epoch while cut off.
    isolated_epoch_rise: u64,
    /// Whether the cluster ended with one leader that every member follows.
    recovered: bool,
}

const REJOIN_ELECTION: Duration = Duration::from_millis(150);
const REJOIN_FETCH: Duration = Duration::from_millis(600);

/// Polls every member's status for `span`, adding the `(epoch, leader)` pairs reported by all
/// but `skip` to `seen`.
async fn watch(
    members: &[Member],
    skip: Option<usize>,
    span: Duration,
    seen: &mut BTreeSet<(u64, u32)>,
) {
    let until = Instant::now() + span;
    while Instant::now() < until {
        for (i, m) in members.iter().enumerate() {
            if Some(i) == skip {
                continue;
            }
            if let Some(s) = m.node.status().await {
                if let Some(l) = s.leader {
                    seen.insert((u64::from(s.epoch.0), l.0));
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

async fn rejoin_trial(pre_vote: bool, sticky_votes: bool) -> Rejoin {
    let net = MemNetwork::new();
    let voters: Vec<ReplicaId> = (1..=3).map(ReplicaId).collect();
    let tune = move |c: &mut Config| {
        c.pre_vote = pre_vote;
        c.sticky_votes = sticky_votes;
        c.snapshot_after_records = 0;
        c.election_timeout = REJOIN_ELECTION;
        c.fetch_timeout = REJOIN_FETCH;
    };
    let mut members = Vec::new();
    for id in &voters {
        members.push(member(&net, *id, &voters, &tune).await);
    }
    let l = leader(&members).await;
    let f = (l + 1) % members.len();
    let isolated = voters[f];
    let epoch_of = |s: Option<raft_core::protocol::Status>| s.map_or(0, |s| u64::from(s.epoch.0));
    let start_epoch = epoch_of(members[l].node.status().await);
    let mut seen = BTreeSet::new();
    for other in voters.iter().filter(|v| **v != isolated) {
        net.cut_both(isolated, *other);
    }
    // Cut off for the fetch timeout (to notice) and then several election timeouts.
    watch(
        &members,
        Some(f),
        REJOIN_FETCH + REJOIN_ELECTION * 6,
        &mut seen,
    )
    .await;
    let isolated_epoch = epoch_of(members[f].node.status().await);
    net.heal_all();
    watch(&members, None, REJOIN_FETCH * 3, &mut seen).await;
    let mut end = Vec::new();
    for m in &members {
        end.push(m.node.status().await);
    }
    let end_epoch = end.iter().map(|s| epoch_of(s.clone())).max().unwrap_or(0);
    let recovered = end.iter().all(|s| {
        s.as_ref()
            .is_some_and(|s| u64::from(s.epoch.0) == end_epoch && s.leader.is_some())
    }) && end
        .iter()
        .flatten()
        .map(|s| s.leader)
        .collect::<BTreeSet<_>>()
        .len()
        == 1;
    for m in &members {
        m.node.shutdown().await;
    }
    Rejoin {
        leader_changes: (seen.len() as u64).saturating_sub(1),
        epoch_changes: end_epoch.saturating_sub(start_epoch),
        isolated_epoch_rise: isolated_epoch.saturating_sub(start_epoch),
        recovered,
    }
}

fn rejoin_figures(size: Size) -> Vec<Figure> {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return vec![error_figure("failover", "runtime", e.to_string())],
    };
    let trials = size.pick(5, 1);
    let mut out = Vec::new();
    for (pre_vote, sticky_votes) in [(true, true), (false, true), (false, false)] {
        eprintln!(
            "bench: failover rejoin, pre-vote {}, sticky votes {} ({trials} trials)",
            on_off(pre_vote),
            on_off(sticky_votes)
        );
        let runs: Vec<Rejoin> = (0..trials)
            .map(|_| rt.block_on(rejoin_trial(pre_vote, sticky_votes)))
            .collect();
        let sum = |f: fn(&Rejoin) -> u64| runs.iter().map(f).sum::<u64>();
        let max = |f: fn(&Rejoin) -> u64| runs.iter().map(f).max().unwrap_or(0);
        out.push(Figure {
            suite: "failover",
            name: "partitioned follower rejoins".into(),
            params: json!({
                "voters": 3, "transport": "in-process", "storage": "in-memory",
                "pre_vote": pre_vote, "sticky_votes": sticky_votes, "check_quorum": true,
                "election_timeout_ms": REJOIN_ELECTION.as_millis(),
                "fetch_timeout_ms": REJOIN_FETCH.as_millis(),
                "isolated_ms": (REJOIN_FETCH + REJOIN_ELECTION * 6).as_millis(),
                "trials": trials,
            }),
            values: json!({
                "leader_changes_total": sum(|r| r.leader_changes),
                "leader_changes_max": max(|r| r.leader_changes),
                "epoch_changes_total": sum(|r| r.epoch_changes),
                "isolated_epoch_rise_max": max(|r| r.isolated_epoch_rise),
                "recovered_trials": runs.iter().filter(|r| r.recovered).count(),
            }),
        });
    }
    out
}

fn on_off(b: bool) -> &'static str {
    if b {
        "on"
    } else {
        "off"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantile_is_nearest_rank() {
        let xs: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(quantile(&xs, 0.5), 10.0);
        assert_eq!(quantile(&xs, 0.99), 20.0);
        assert_eq!(quantile(&xs, 0.0), 1.0);
        assert_eq!(quantile(&[], 0.5), 0.0);
    }
}
