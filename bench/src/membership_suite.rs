//! Voter changes on real processes (three `raft-node` voters, fjall and redb, fsync on, QUIC on
//! loopback), timed step by step as an operator runs them (`raft-node/README.md`, "Changing
//! the voters"), while a client keeps writing through the leader:
//!
//! * **add**: a new, empty machine (its configuration names the voters and itself; theirs do
//!   not name it) is started after the keyspace was preloaded; measured: start to answering
//!   `PING`, to fetching from the leader (it shows as an observer in `RAFT VOTERS`), and to
//!   `RAFT ADD-VOTER` answering `+OK` (retried while it is `TRYAGAIN`: not caught up yet).
//! * **replace**: a follower voter is SIGKILLed and its disk wiped; `RAFT REMOVE-VOTER`, then
//!   (it was a configured voter) a wait until no running node lists it, then it starts empty
//!   with `run --join` (its file names its lost directory, which it refuses; through a running
//!   node it comes up as an observer with a new directory) and is added again. Measured: each step and the whole, from the kill.
//!
//! For both, the longest gap between two acknowledged writes of the background writer (one
//! `SET` at a time on the leader) says whether the change stalled the cluster.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::cluster_suite::error_figure;
use crate::proc_cluster::{node_binary, ProcCluster, Timers, READY_DEADLINE};
use crate::resp_load::{self, Conn};
use crate::{Figure, Size};

/// Runs the suite.
pub fn run(size: Size) -> Vec<Figure> {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return vec![error_figure("membership", "runtime", e.to_string())],
    };
    let mut out = Vec::new();
    for storage in ["fjall", "redb"] {
        match rt.block_on(measure(size, storage)) {
            Ok(figures) => out.extend(figures),
            Err(e) => out.push(error_figure(
                "membership",
                &format!("add and replace ({storage})"),
                e,
            )),
        }
    }
    out
}

/// Milliseconds since `t`, to a tenth.
fn ms_since(t: Instant) -> f64 {
    (t.elapsed().as_secs_f64() * 10_000.0).round() / 10.0
}

async fn measure(size: Size, storage: &str) -> Result<Vec<Figure>, String> {
    let bin = node_binary()?;
    let keys = size.pick(50_000, 1_000);
    let mut cluster =
        ProcCluster::start_with_joiners(&bin, storage, Timers::NODE_DEFAULTS, 1).await?;
    let leader = cluster.wait_leader().await?;
    resp_load::preload(cluster.port(leader), keys, 256).await?;
    let params = json!({
        "voters_before": 3, "storage": storage, "fsync": true,
        "preloaded_keys": keys, "value_bytes": 256,
    });
    let writer = Writer::start(cluster.port(leader));

    // Add: node 4, empty, joins and is made a voter.
    let started = Instant::now();
    cluster.spawn(4)?;
    cluster.wait_ready(4).await?;
    let ready_ms = ms_since(started);
    wait_for(&cluster, leader, "node 4 to fetch as an observer", |v| {
        v.lines().any(|l| l.starts_with("observer:4 "))
    })
    .await?;
    let fetching_ms = ms_since(started);
    change(&cluster, leader, &["RAFT", "ADD-VOTER", "4"]).await?;
    let add = Figure {
        suite: "membership",
        name: "add a new machine as voter".into(),
        params: params.clone(),
        values: json!({
            "to_ready_ms": ready_ms,
            "to_fetching_ms": fetching_ms,
            "to_voter_ms": ms_since(started),
            "longest_write_gap_ms": writer.take_longest_gap_ms(),
        }),
    };

    // Replace: a follower that was a configured voter loses its disk.
    let lost = (1..=3).find(|id| *id != leader).unwrap_or(2);
    let killed = Instant::now();
    cluster.kill(lost);
    cluster.wipe(lost)?;
    let id = lost.to_string();
    change(&cluster, leader, &["RAFT", "REMOVE-VOTER", &id]).await?;
    let removed_ms = ms_since(killed);
    let listed = format!("voter:{lost} ");
    for other in (1..=4).filter(|o| *o != lost) {
        wait_for(&cluster, other, "every node to drop the lost voter", |v| {
            !v.lines().any(|l| l.starts_with(&listed))
        })
        .await?;
    }
    let dropped_everywhere_ms = ms_since(killed);
    // Its unchanged file names its lost directory, so it would refuse to start: it comes back
    // through a running node, as an observer with a new directory, and is added again.
    cluster.spawn_joining(lost, leader)?;
    cluster.wait_ready(lost).await?;
    change(&cluster, leader, &["RAFT", "ADD-VOTER", &id]).await?;
    let replace = Figure {
        suite: "membership",
        name: "replace a voter whose disk was lost".into(),
        params,
        values: json!({
            "to_removed_ms": removed_ms,
            "to_dropped_everywhere_ms": dropped_everywhere_ms,
            "to_voter_again_ms": ms_since(killed),
            "longest_write_gap_ms": writer.take_longest_gap_ms(),
            "writes_acknowledged": writer.stop(),
        }),
    };
    Ok(vec![add, replace])
}

/// Sends a voter change to `leader` until it answers `+OK`; `TRYAGAIN` (not caught up, a
/// change in progress) is retried every 20 ms, anything else is an error.
async fn change(cluster: &ProcCluster, leader: u32, args: &[&str]) -> Result<(), String> {
    let deadline = Instant::now() + READY_DEADLINE;
    loop {
        match cluster.cmd(leader, args).await {
            Ok(reply) if reply == "OK" => return Ok(()),
            Err(e) if e.contains("TRYAGAIN") && Instant::now() < deadline => {}
            other => {
                return Err(format!(
                    "{args:?} answered {other:?}{}",
                    cluster.log_tails()
                ))
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Polls node `id`'s `RAFT VOTERS` every 10 ms until `done` holds.
async fn wait_for(
    cluster: &ProcCluster,
    id: u32,
    what: &str,
    done: impl Fn(&str) -> bool,
) -> Result<(), String> {
    let deadline = Instant::now() + READY_DEADLINE;
    loop {
        if let Ok(text) = cluster.cmd(id, &["RAFT", "VOTERS"]).await {
            if done(&text) {
                return Ok(());
            }
        }
        if Instant::now() > deadline {
            return Err(format!(
                "timed out waiting for {what}{}",
                cluster.log_tails()
            ));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// One `SET` at a time on the leader, recording the longest gap between acknowledgements.
struct Writer {
    stop: Arc<AtomicBool>,
    acknowledged: Arc<AtomicU64>,
    longest_gap_us: Arc<AtomicU64>,
}

impl Writer {
    fn start(port: u16) -> Writer {
        let w = Writer {
            stop: Arc::new(AtomicBool::new(false)),
            acknowledged: Arc::new(AtomicU64::new(0)),
            longest_gap_us: Arc::new(AtomicU64::new(0)),
        };
        let (stop, acked, gap) = (
            w.stop.clone(),
            w.acknowledged.clone(),
            w.longest_gap_us.clone(),
        );
        tokio::spawn(async move {
            let mut last = Instant::now();
            let mut conn = None;
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                if conn.is_none() {
                    conn = Conn::connect(port, Duration::from_secs(1)).await.ok();
                }
                let Some(c) = conn.as_mut() else {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                let key = format!("membership:{n}");
                match c.cmd(&["SET", &key, "v"], Duration::from_secs(10)).await {
                    Ok(_) => {
                        n += 1;
                        acked.fetch_add(1, Ordering::Relaxed);
                        let us = last.elapsed().as_micros() as u64;
                        gap.fetch_max(us, Ordering::Relaxed);
                        last = Instant::now();
                    }
                    Err(_) => {
                        // TRYAGAIN or a lost connection alike: a fresh connection shortly.
                        conn = None;
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                }
            }
        });
        w
    }

    /// The longest gap since the last call, in milliseconds.
    fn take_longest_gap_ms(&self) -> f64 {
        self.longest_gap_us.swap(0, Ordering::Relaxed) as f64 / 1000.0
    }

    /// Stops the writer; the writes acknowledged in all.
    fn stop(&self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.acknowledged.load(Ordering::Relaxed)
    }
}
