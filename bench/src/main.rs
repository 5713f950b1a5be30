//! `raft-bench`: the performance harness behind `cargo xtask bench [SUITE...] [--quick]
//! [--json FILE]`.
//!
//! Suites so far:
//! * `storage`: appends per second through the `LogStore` trait for redb and fjall at batch
//!   sizes 1, 16 and 256 with 256 B and 4 KiB records, next to the raw write + fdatasync rate of
//!   a plain file in the same directory (the disk's physical limit), with the ratio.
//! * `core`: the driver with 3 voters in one process (in-memory log and state machine,
//!   in-process transport); C concurrent clients each issuing sequential 16 B writes to the
//!   leader; writes per second and latency percentiles.
//! * `snapshot`: a leader holding a state machine of S bytes; an observer joins with an empty
//!   log after the prefix was purged and catches up through a snapshot download; MB/s and time.
//!   Then, per disk engine over QUIC, a state of 4 GiB taken as a snapshot while writes go on
//!   (write latency before and during) and installed on a joining observer (MiB/s, the growth
//!   of the resident set): see `snapshot_disk`.
//! * `reads`: the core suite's setup with preloaded keys and C concurrent readers per read mode
//!   (linearizable on the leader or on every replica, lease, sequential): reads per second,
//!   latency percentiles, messages, ReadIndex requests and barrier rounds per read, and the CPU
//!   time per read of each replica (each runs on a thread of its own).
//! * `transport`: small RPC round trips and 4 KiB / 64 KiB throughput over the QUIC transport,
//!   over TCP with the same mutual TLS, and over plain TCP, side by side.
//! * `cluster`: three real `raft-node` processes (QUIC on loopback, fsync on, each storage
//!   backend) under the etcd benchmark matrix through the Redis protocol, and a mixed workload
//!   of session hashes and a sorted-set leaderboard (per request kind too), next to a
//!   `redis-server` baseline with `appendfsync always` when one is installed; `redis-benchmark`
//!   against the leader, `raft-node dev` under the same SET loads, and the disk's own append +
//!   fdatasync latency ([`durable_writes`]).
//! * `failover`: kill -9 of the leader to the first successful write (real processes), and the
//!   leader changes a rejoining partitioned follower causes with pre-vote on and off.
//! * `membership`: adding a new machine as a voter, and replacing a voter whose disk was lost,
//!   on real processes, step by step, with the longest write stall each causes.
//! * `memory`: the resident memory of each of three real `raft-node` processes, idle, at its
//!   peak while keys are loaded (snapshots included) and in steady state, against the live data.
//! * `groups`: hosts of many groups (three in one process, in-memory transport and storage),
//!   idle: CPU per host, requests per second and memory per group replica at 100 to 10,000
//!   groups.
//!
//! After the suites, the performance targets are read off their figures ([`targets`]): each
//! target's figure, what it is compared with, the ratio and whether it meets the goal, printed
//! as a table, kept in the JSON file (suite `targets`) and drawn in `*-targets.svg`.
//!
//! `raft-bench sweep redb|fjall name=v1,v2 ...` is apart from the suites: the storage option
//! sweeps behind each backend's defaults (see `storage_sweep`). So is `raft-bench
//! groups-storage [groups=N] [seconds=S] [payload=B]`: the engines holding every group of a
//! host at many groups (open time, memory per open group, appends and syncs per second with
//! 1, 64 and N groups appending; see `groups_storage`).
//!
//! Every figure is printed with its parameters and, with `--json`, written as one JSON object
//! per figure. `--quick` shrinks every suite to a smoke test; `--check` then fails unless every
//! suite produced figures with positive rates (CI runs both: it asserts that the harness works,
//! never a timing).
//!
//! SVG charts of the figures (throughput and latency against concurrency, read scaling, the
//! cluster workloads per engine, the mixed workload's latency per request kind) go next
//! to the JSON file (`target/bench/` without `--json`), named after its stem; `--check` also
//! fails when a chart of a suite that ran is missing.

mod charts;
mod cluster_suite;
mod core_suite;
mod durable_writes;
mod failover_suite;
mod groups_hosts;
mod groups_storage;
mod groups_suite;
mod measure;
mod membership_suite;
mod memory_suite;
mod mixed_workload;
mod openraft;
mod proc_cluster;
mod reads_suite;
mod resp_load;
mod snapshot_disk;
mod snapshot_suite;
mod storage_suite;
mod storage_sweep;
mod targets;
mod transport_suite;

use std::time::Duration;

use serde_json::{json, Value};

/// One measured figure and the parameters it was measured with.
pub struct Figure {
    /// The suite.
    pub suite: &'static str,
    /// What was measured, e.g. "appends".
    pub name: String,
    /// The parameters, as a JSON object.
    pub params: Value,
    /// The measured values, as a JSON object.
    pub values: Value,
}

/// How big a run is.
#[derive(Clone, Copy)]
pub struct Size {
    /// Smoke-test size.
    pub quick: bool,
}

impl Size {
    /// `full` normally, `quick` with `--quick`.
    pub fn pick<T>(&self, full: T, quick: T) -> T {
        if self.quick {
            quick
        } else {
            full
        }
    }

    /// How long a timed measurement runs.
    pub fn window(&self) -> Duration {
        self.pick(Duration::from_secs(3), Duration::from_millis(300))
    }
}

fn machine() -> Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|l| l.trim_start_matches([' ', '\t', ':']).to_string())
        .unwrap_or_else(|| "unknown".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let commit = std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    let profile = if cfg!(debug_assertions) {
        "dev"
    } else {
        "release"
    };
    json!({ "cpu": model, "cores": cores, "commit": commit, "profile": profile })
}

/// Whether a suite produced figures, none of them an error, and every rate in them is positive.
fn harness_worked(figures: &[Figure]) -> bool {
    !figures.is_empty()
        && figures.iter().all(|f| {
            f.values.as_object().is_some_and(|values| {
                !values.contains_key("error")
                    && values
                        .iter()
                        .filter(|(k, _)| k.ends_with("_per_s"))
                        .all(|(_, v)| v.as_f64().is_some_and(|x| x > 0.0))
            })
        })
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("sweep") {
        if let Err(e) = storage_sweep::run(&args[1..]) {
            eprintln!("raft-bench: {e}");
            std::process::exit(2);
        }
        return;
    }
    if args.first().map(String::as_str) == Some("groups-storage-restart") {
        if let Err(e) = groups_storage::restart(&args[1..]) {
            eprintln!("raft-bench: {e}");
            std::process::exit(2);
        }
        return;
    }
    if args.first().map(String::as_str) == Some("groups-storage") {
        if let Err(e) = groups_storage::run(&args[1..]) {
            eprintln!("raft-bench: {e}");
            std::process::exit(2);
        }
        return;
    }
    let mut suites = Vec::new();
    let mut quick = false;
    let mut check = false;
    let mut json_out = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--quick" => quick = true,
            "--check" => check = true,
            "--json" => json_out = it.next().cloned(),
            "storage" | "core" | "snapshot" | "reads" | "transport" | "cluster" | "failover"
            | "membership" | "memory" | "groups" => suites.push(a.clone()),
            other => {
                eprintln!(
                    "raft-bench: unknown argument {other:?}; usage: raft-bench [storage] [core] \
                     [snapshot] [reads] [transport] [cluster] [failover] [membership] [memory] \
                     [groups] [--quick] [--check] [--json FILE]"
                );
                std::process::exit(2);
            }
        }
    }
    if suites.is_empty() {
        suites = [
            "storage",
            "core",
            "snapshot",
            "reads",
            "transport",
            "cluster",
            "failover",
            "membership",
            "memory",
            "groups",
        ]
        .map(String::from)
        .into();
    }
    let size = Size { quick };
    let machine = machine();
    println!("machine: {machine}");
    let mut figures = Vec::new();
    for suite in &suites {
        eprintln!("bench: running {suite} ...");
        let got = match suite.as_str() {
            "storage" => storage_suite::run(size),
            "core" => core_suite::run(size),
            "reads" => reads_suite::run(size),
            "transport" => transport_suite::run(size),
            "cluster" => cluster_suite::run(size),
            "failover" => failover_suite::run(size),
            "membership" => membership_suite::run(size),
            "memory" => memory_suite::run(size),
            "groups" => groups_suite::run(size),
            _ => snapshot_suite::run(size),
        };
        for f in &got {
            println!("{:<9} {:<28} {} -> {}", f.suite, f.name, f.params, f.values);
        }
        if check && !harness_worked(&got) {
            eprintln!("raft-bench: suite {suite} produced no usable figures");
            std::process::exit(1);
        }
        figures.extend(got);
    }
    let (dir, prefix) = charts::place(json_out.as_deref());
    match charts::write(&figures, &dir, &prefix) {
        Ok(written) => written
            .iter()
            .for_each(|p| eprintln!("bench: wrote {}", p.display())),
        Err(e) => eprintln!("raft-bench: {e}"),
    }
    // The targets come last, from every suite's figures of this run.
    let rows = targets::rows(&figures);
    print!("{}", targets::table(&rows));
    match targets::chart(&rows, &dir, &prefix) {
        Ok(Some(p)) => eprintln!("bench: wrote {}", p.display()),
        Ok(None) => {}
        Err(e) => eprintln!("raft-bench: {e}"),
    }
    figures.extend(targets::figures(&rows));
    if check {
        if let Err(e) = charts::check(&dir, &prefix, &suites) {
            eprintln!("raft-bench: {e}");
            std::process::exit(1);
        }
    }
    if let Some(path) = json_out {
        let doc = json!({
            "machine": machine,
            "quick": quick,
            "figures": figures.iter().map(|f| json!({
                "suite": f.suite,
                "name": f.name,
                "params": f.params,
                "values": f.values,
            })).collect::<Vec<_>>(),
        });
        if let Some(dir) = std::path::Path::new(&path).parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let text = serde_json::to_string_pretty(&doc).expect("figures serialize");
        if let Err(e) = std::fs::write(&path, text) {
            eprintln!("raft-bench: cannot write {path}: {e}");
            std::process::exit(1);
        }
        eprintln!("bench: wrote {path}");
    }
}
