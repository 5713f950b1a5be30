//! Resident memory of real `raft-node` processes (three voters, fjall and redb, fsync on, QUIC
//! on loopback), against the targets: at most 64 MiB per node idle, and at most 2.5x
//! the live data per node in steady state.
//!
//! Per storage engine: each node's resident set (`VmRSS` in `/proc/<pid>/status`) once the
//! cluster has elected a leader and settled; the peak while `keys` SETs of 256 B values are
//! loaded through the leader (snapshots are taken on the way, every `snapshot.after_records`
//! records); and once every node has applied them all and the load stopped. Live data is what
//! a client stored: the keys and values, 8 + 256 bytes each.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::cluster_suite::error_figure;
use crate::proc_cluster::{node_binary, ProcCluster, Timers, READY_DEADLINE};
use crate::resp_load;
use crate::{Figure, Size};

/// A key's bytes (`resp_load::key`) plus a value's, per stored key.
const KEY_BYTES: u64 = 8;
const VALUE_BYTES: usize = 256;
const MIB: f64 = 1024.0 * 1024.0;

/// Runs the suite.
pub fn run(size: Size) -> Vec<Figure> {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return vec![error_figure("memory", "runtime", e.to_string())],
    };
    let mut out = Vec::new();
    for storage in ["fjall", "redb"] {
        let name = format!("resident memory ({storage})");
        match rt.block_on(measure(size, storage)) {
            Ok(f) => out.push(f),
            Err(e) => out.push(error_figure("memory", &name, e)),
        }
    }
    out
}

/// SETs every key of `0..keys` in pipelines of 256 through the node at `ports[first]`. A
/// batch that fails (a leader change, a write timeout while the machine is busy) is sent
/// again, to the next node when the answer was not `OK`: a SET of the same key to the same
/// value is idempotent, so a resent batch changes nothing but the versions. Returns how many
/// batches were resent and the longest a batch took, in milliseconds (a snapshot that holds
/// up writes shows there); fails after 20 failures in a row.
async fn load_keys(ports: Vec<u16>, first: usize, keys: u64) -> Result<(u64, u64), String> {
    let value = vec![b'v'; VALUE_BYTES];
    let mut at = first;
    let mut conn = None;
    let (mut n, mut retried, mut failures, mut longest_ms) = (0, 0, 0, 0);
    while n < keys {
        let to = keys.min(n + resp_load::PRELOAD_BATCH);
        let c = match &mut conn {
            Some(c) => c,
            None => conn.insert(resp_load::Conn::connect(ports[at], Duration::from_secs(5)).await?),
        };
        let sent = Instant::now();
        match resp_load::set_keys(c, n..to, &value).await {
            Ok(()) => {
                longest_ms = longest_ms.max(sent.elapsed().as_millis() as u64);
                n = to;
                failures = 0;
            }
            Err(why) => {
                failures += 1;
                retried += 1;
                if failures >= 20 {
                    return Err(format!(
                        "loading keys: 20 failures in a row, the last: {why}"
                    ));
                }
                // Ask the next node; its forward or its refusal leads to the leader.
                at = (at + 1) % ports.len();
                conn = None;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    Ok((retried, longest_ms))
}

/// The resident set of process `pid`, in bytes.
pub fn rss_bytes(pid: u32) -> Result<u64, String> {
    let path = format!("/proc/{pid}/status");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
    parse_vm_rss(&text).ok_or_else(|| format!("{path} has no VmRSS line"))
}

/// `VmRSS:   1234 kB` in a `/proc/<pid>/status` text, in bytes.
fn parse_vm_rss(status: &str) -> Option<u64> {
    let line = status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?;
    let kib: u64 = line.trim().strip_suffix("kB")?.trim().parse().ok()?;
    Some(kib * 1024)
}

/// Every node's resident set, in bytes, in id order.
fn sample(cluster: &ProcCluster, ids: &[u32]) -> Result<Vec<u64>, String> {
    ids.iter()
        .map(|id| {
            let pid = cluster
                .pid(*id)
                .ok_or_else(|| format!("node {id} is not running"))?;
            rss_bytes(pid)
        })
        .collect()
}

fn mib(bytes: u64) -> f64 {
    (bytes as f64 / MIB * 10.0).round() / 10.0
}

async fn measure(size: Size, storage: &str) -> Result<Figure, String> {
    let bin = node_binary()?;
    let keys: u64 = size.pick(1_000_000, 2_000);
    let cluster = ProcCluster::start(&bin, storage, Timers::NODE_DEFAULTS).await?;
    let leader = cluster.wait_leader().await?;
    let ids = [1, 2, 3];
    // Settled: a few heartbeats after the election.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let idle = sample(&cluster, &ids)?;

    // Load through the leader while a sampler keeps the highest resident set of each node.
    let ports: Vec<u16> = ids.iter().map(|id| cluster.port(*id)).collect();
    let first = ids.iter().position(|id| *id == leader).unwrap_or(0);
    let load = tokio::spawn(load_keys(ports, first, keys));
    let mut peak = idle.clone();
    while !load.is_finished() {
        for (p, now) in peak.iter_mut().zip(sample(&cluster, &ids)?) {
            *p = (*p).max(now);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (retried, longest_batch_ms) = load.await.map_err(|e| format!("loader: {e}"))??;

    // Every node holds every key (the bench's readiness key too), then settles.
    let deadline = Instant::now() + READY_DEADLINE;
    for id in ids {
        loop {
            let held: u64 = cluster
                .cmd(id, &["DBSIZE"])
                .await?
                .trim()
                .parse()
                .map_err(|e| format!("DBSIZE of node {id}: {e}"))?;
            if held > keys {
                break;
            }
            if Instant::now() > deadline {
                return Err(format!("node {id} holds {held} of {keys} keys after 60 s"));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let steady = sample(&cluster, &ids)?;
    for (p, now) in peak.iter_mut().zip(&steady) {
        *p = (*p).max(*now);
    }

    let live = keys * (KEY_BYTES + VALUE_BYTES as u64);
    let worst = |v: &[u64]| v.iter().copied().max().unwrap_or(0);
    let per_node = |v: &[u64]| v.iter().map(|b| mib(*b)).collect::<Vec<_>>();
    let ratio = (worst(&steady) as f64 / live as f64 * 100.0).round() / 100.0;
    Ok(Figure {
        suite: "memory",
        name: format!("resident memory ({storage})"),
        params: json!({
            "voters": 3, "storage": storage, "fsync": true, "keys": keys,
            "key_bytes": KEY_BYTES, "value_bytes": VALUE_BYTES,
            "target_idle_mib": 64, "target_steady_over_live": 2.5,
        }),
        values: json!({
            "live_data_mib": mib(live),
            "idle_rss_mib": per_node(&idle),
            "steady_rss_mib": per_node(&steady),
            "peak_rss_mib": per_node(&peak),
            "idle_worst_mib": mib(worst(&idle)),
            "steady_worst_mib": mib(worst(&steady)),
            "peak_worst_mib": mib(worst(&peak)),
            "steady_over_live": ratio,
            "batches_retried": retried,
            "longest_batch_ms": longest_batch_ms,
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_resident_set_is_read_from_proc_status() {
        let status = "Name:\traft-node\nVmPeak:\t  99 kB\nVmRSS:\t   12288 kB\nThreads:\t4\n";
        assert_eq!(parse_vm_rss(status), Some(12 * 1024 * 1024));
        assert_eq!(parse_vm_rss("Name:\tx\n"), None);
        assert_eq!(parse_vm_rss("VmRSS:\tlots kB\n"), None);
    }

    #[test]
    fn this_process_has_a_resident_set() {
        assert!(rss_bytes(std::process::id()).unwrap() > 0);
    }
}
