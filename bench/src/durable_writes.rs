//! The inputs of the durable-write comparison with Redis that the cluster suite's matrix does
//! not already give: `raft-node dev` (three voters in one process, fjall, fsync on, QUIC with
//! mutual TLS on loopback) under the SET loads the `redis-server` baseline gets, through this
//! bench's generator and through `redis-benchmark`; and the disk's own latency for one 256 B
//! append and its `fdatasync`, the floor under a single client's durable write.

use std::fs::OpenOptions;
use std::io::Write;
use std::net::{TcpListener, UdpSocket};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde_json::json;

use crate::cluster_suite::{error_figure, redis_benchmark, set_load, KEYSPACE};
use crate::proc_cluster::{NodeStatus, Spawned, READY_DEADLINE};
use crate::resp_load::{self, Conn};
use crate::{Figure, Size};

/// The figure name of `raft-node dev` under a SET load.
pub const DEV_SET: &str = "raft-node dev SET";

/// The figure name of the disk's append + fdatasync latency.
pub const DISK_LATENCY: &str = "append + fdatasync";

/// `(clients, requests)` for each `redis-benchmark` run: the same for every server.
pub fn redis_benchmark_levels(size: Size) -> &'static [(usize, u32)] {
    size.pick(
        &[(1, 3_000), (50, 60_000), (1000, 100_000)],
        &[(1, 300), (16, 3_000)],
    )
}

/// A `raft-node dev` process on a temp directory that dies with this value.
struct Dev {
    process: Spawned,
    base: u16,
}

impl Dev {
    /// Client port of node `i` (1 to 3).
    fn port(&self, i: u16) -> u16 {
        self.base + i
    }

    fn log_tail(&self) -> String {
        let log =
            std::fs::read_to_string(self.process.dir.path().join("dev.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        format!(
            "\n---- raft-node dev log (tail) ----\n{}",
            lines[lines.len().saturating_sub(15)..].join("\n")
        )
    }
}

/// A base port whose nine ports `raft-node dev` uses (client `+1..=3` and metrics `+201..=203`
/// over TCP, peers `+101..=103` over UDP) are free now.
fn free_base() -> Result<u16, String> {
    let free = |base: u16| {
        (1..=3).all(|i| {
            TcpListener::bind(("127.0.0.1", base + i)).is_ok()
                && UdpSocket::bind(("127.0.0.1", base + 100 + i)).is_ok()
                && TcpListener::bind(("127.0.0.1", base + 200 + i)).is_ok()
        })
    };
    // Spread the candidates so that parallel runs rarely try the same one first.
    let start = 20_000 + (std::process::id() % 97) as u16 * 300;
    (0..100)
        .map(|k| 20_000 + (start - 20_000 + k * 300) % 40_000)
        .find(|&b| free(b))
        .ok_or_else(|| "no free base port for raft-node dev".to_string())
}

async fn start_dev(bin: &Path) -> Result<Dev, String> {
    let dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
    let base = free_base()?;
    let log =
        std::fs::File::create(dir.path().join("dev.log")).map_err(|e| format!("dev log: {e}"))?;
    let err = log.try_clone().map_err(|e| format!("dev log: {e}"))?;
    let child = Command::new(bin)
        .args([
            "dev",
            "--storage",
            "fjall",
            "--base-port",
            &base.to_string(),
            "--dir",
        ])
        .arg(dir.path().join("cluster"))
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(err)
        .spawn()
        .map_err(|e| format!("start {} dev: {e}", bin.display()))?;
    let dev = Dev {
        process: Spawned { child, dir },
        base,
    };
    Ok(dev)
}

/// Waits until one of the three reports itself leader and a write through it succeeds.
async fn wait_leader(dev: &mut Dev) -> Result<u16, String> {
    let deadline = Instant::now() + READY_DEADLINE;
    loop {
        for i in 1..=3 {
            let Ok(mut c) = Conn::connect(dev.port(i), Duration::from_secs(1)).await else {
                continue;
            };
            let status = c.cmd(&["RAFT", "STATUS"], Duration::from_secs(2)).await;
            let leads = status
                .ok()
                .and_then(|t| NodeStatus::parse(&t))
                .is_some_and(|s| s.role == "leader");
            if leads
                && c.cmd(&["SET", "bench:ready", "1"], Duration::from_secs(10))
                    .await
                    .is_ok()
            {
                return Ok(dev.port(i));
            }
        }
        if let Ok(Some(status)) = dev.process.child.try_wait() {
            return Err(format!("raft-node dev exited ({status}){}", dev.log_tail()));
        }
        if Instant::now() > deadline {
            return Err(format!("raft-node dev elected no leader{}", dev.log_tail()));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `raft-node dev` under SET with 256 B values at each of the suite's levels through this
/// bench's generator, then through `redis-benchmark` when it is installed (`tool`).
pub async fn dev_cluster(
    bin: &Path,
    tool: Option<&Path>,
    levels: &[(usize, usize)],
    size: Size,
    out: &mut Vec<Figure>,
) {
    if let Err(e) = dev_cluster_inner(bin, tool, levels, size, out).await {
        out.push(error_figure("cluster", DEV_SET, e));
    }
}

async fn dev_cluster_inner(
    bin: &Path,
    tool: Option<&Path>,
    levels: &[(usize, usize)],
    size: Size,
    out: &mut Vec<Figure>,
) -> Result<(), String> {
    let mut dev = start_dev(bin).await?;
    let leader = wait_leader(&mut dev).await?;
    resp_load::preload(leader, KEYSPACE, 256).await?;
    let params = |connections: usize, clients: usize, generator: &str, key_bytes: usize| {
        json!({
            "server": "raft-node dev (3 voters in one process)", "storage": "fjall",
            "voters": 3, "transport": "quic, mutual TLS, loopback", "fsync": true,
            "connections": connections, "clients": clients, "key_bytes": key_bytes,
            "value_bytes": 256, "generator": generator,
            "load_average_1m": crate::cluster_suite::load_average(),
        })
    };
    for &(connections, clients) in levels {
        eprintln!("bench: cluster raft-node dev at {connections} connections / {clients} clients");
        let load = set_load(leader, connections, clients, size);
        let got = resp_load::run(&load)
            .await
            .map_err(|e| format!("{e}{}", dev.log_tail()))?;
        out.push(Figure {
            suite: "cluster",
            name: DEV_SET.into(),
            params: params(connections, clients, "resp_load", 8),
            values: crate::cluster_suite::load_values(&got),
        });
    }
    let Some(tool) = tool else {
        return Ok(());
    };
    for &(clients, requests) in redis_benchmark_levels(size) {
        eprintln!("bench: cluster raft-node dev, redis-benchmark -c {clients}");
        let values = redis_benchmark(tool, leader, clients, requests)?;
        out.push(Figure {
            suite: "cluster",
            name: DEV_SET.into(),
            params: params(clients, clients, "redis-benchmark", 16),
            values,
        });
    }
    Ok(())
}

/// The latency of one 256 B append and its `fdatasync` to a plain file in a temp directory
/// (where the clusters keep their data): `writes` of them to a file that grows with each (as
/// an appended log does); the same by three writers at once, each to its own file (what three
/// replicas sharing this disk do); then into a preallocated file.
pub fn disk_latency(writes: usize) -> Figure {
    match measure_disk(writes) {
        Ok((growing, three, preallocated)) => {
            let us = |h: &Histogram<u64>, q: f64| h.value_at_quantile(q);
            Figure {
                suite: "cluster",
                name: DISK_LATENCY.into(),
                params: json!({ "record_bytes": 256, "writes": writes, "dir": "temp dir" }),
                values: json!({
                    "p50_us": us(&growing, 0.5), "p99_us": us(&growing, 0.99),
                    "three_writers_p50_us": us(&three, 0.5),
                    "three_writers_p99_us": us(&three, 0.99),
                    "preallocated_p50_us": us(&preallocated, 0.5),
                    "preallocated_p99_us": us(&preallocated, 0.99),
                }),
            }
        }
        Err(e) => error_figure("cluster", DISK_LATENCY, e),
    }
}

fn histogram() -> Result<Histogram<u64>, String> {
    Histogram::<u64>::new(3).map_err(|e| format!("histogram: {e}"))
}

/// `writes` appends of 256 B, each followed by `fdatasync`, to a new file at `path`.
fn appends(path: &Path, writes: usize) -> Result<Histogram<u64>, String> {
    let err = |e: std::io::Error| format!("disk latency: {e}");
    let record = [0x5au8; 256];
    let mut hist = histogram()?;
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(err)?;
    for _ in 0..writes {
        let t = Instant::now();
        file.write_all(&record).map_err(err)?;
        file.sync_data().map_err(err)?;
        hist.saturating_record(t.elapsed().as_micros() as u64);
    }
    Ok(hist)
}

type DiskLatencies = (Histogram<u64>, Histogram<u64>, Histogram<u64>);

fn measure_disk(writes: usize) -> Result<DiskLatencies, String> {
    let dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
    let err = |e: std::io::Error| format!("disk latency: {e}");
    let record = [0x5au8; 256];
    let growing = appends(&dir.path().join("growing"), writes)?;
    let mut three = histogram()?;
    let results: Vec<Result<Histogram<u64>, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..3)
            .map(|i| {
                let path = dir.path().join(format!("writer-{i}"));
                s.spawn(move || appends(&path, writes))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a writer panicked".into())))
            .collect()
    });
    for r in results {
        three.add(r?).map_err(|e| format!("histogram: {e}"))?;
    }
    let mut preallocated = histogram()?;
    let file = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .open(dir.path().join("preallocated"))
        .map_err(err)?;
    file.write_all_at(&vec![0u8; writes * record.len()], 0)
        .map_err(err)?;
    file.sync_all().map_err(err)?;
    for i in 0..writes {
        let t = Instant::now();
        file.write_all_at(&record, (i * record.len()) as u64)
            .map_err(err)?;
        file.sync_data().map_err(err)?;
        preallocated.saturating_record(t.elapsed().as_micros() as u64);
    }
    Ok((growing, three, preallocated))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_disk_latency_figure_has_both_files() {
        let f = disk_latency(20);
        assert!(f.values["p50_us"].as_u64().is_some(), "{}", f.values);
        assert!(f.values["preallocated_p50_us"].as_u64().is_some());
        assert!(f.values["three_writers_p50_us"].as_u64().is_some());
    }

    #[test]
    fn a_free_base_leaves_room_for_nine_ports() {
        let base = free_base().unwrap();
        assert!((20_000..60_000).contains(&base), "{base}");
    }
}
