//! Reads on any replica: 3 voters in one process (in-memory log, in-process transport) holding
//! preloaded keys; C concurrent readers each loop over `Node::read(mode)` and then look a key up
//! in the state machine of the replica they read from.
//!
//! Each replica runs on a current-thread tokio runtime in an OS thread of its own, so that the
//! CPU time of that thread (from `/proc/self/task/<tid>/schedstat`, the scheduler's run time in
//! nanoseconds, updated at least every scheduler tick) is the replica's cost: its replica task,
//! log writer, applier, and both ends of its RPCs. The in-process transport runs the whole of a
//! call on the caller's side; here every inbound request is moved to the callee's thread, which
//! also encodes the request and the response once more, as a server on a real wire would decode
//! and encode them (the callers keep paying their codec work too, so followers are charged a
//! little more than over a real wire, the leader about what it would pay). The readers run on a
//! separate runtime.
//!
//! Configurations: linearizable reads on the leader only; linearizable reads spread over all
//! replicas (followers ask the leader for a read offset with batched ReadIndex requests, the
//! leader confirms batches with one barrier round), and over the followers only (what a read
//! served elsewhere costs the leader); lease reads on the leader and on all replicas (the leader
//! skips the round while it holds a lease; requires sticky votes, on by default); sequential
//! reads on all replicas. Readers are closed loops assigned round-robin to the serving
//! replicas, so a replica that answers faster serves more reads. Counters, all per read: RPCs
//! sent by all replicas, Fetch and ReadIndex requests among them, and read barriers raised by
//! the leader (the highest barrier the followers saw in Fetch responses; the leader raises one
//! per step that registers new reads, and one Fetch from each follower echoes every barrier
//! raised before it).

mod replicas;

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use raft_core::driver::ReadMode;
use raft_core::mem::transport::MemNetwork;
use raft_core::ReplicaId;
use serde_json::{json, Value};

use self::replicas::{leader, preload, start_replica, stop_all, Failed, Replica};
use crate::measure::{histogram, record, thread_cpu_ns};
use crate::{Figure, Size};

/// Which replicas serve the reads.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Serve {
    Leader,
    All,
    /// The followers only: what serving a read elsewhere costs the leader.
    Followers,
}

/// One configuration of the suite.
#[derive(Clone, Copy)]
struct Setup {
    name: &'static str,
    mode: ReadMode,
    serve: Serve,
    lease: bool,
}

const SETUPS: [Setup; 6] = [
    Setup {
        name: "linearizable-leader",
        mode: ReadMode::Linearizable,
        serve: Serve::Leader,
        lease: false,
    },
    Setup {
        name: "linearizable-all",
        mode: ReadMode::Linearizable,
        serve: Serve::All,
        lease: false,
    },
    Setup {
        name: "linearizable-followers",
        mode: ReadMode::Linearizable,
        serve: Serve::Followers,
        lease: false,
    },
    Setup {
        name: "lease-leader",
        mode: ReadMode::Lease,
        serve: Serve::Leader,
        lease: true,
    },
    Setup {
        name: "lease-all",
        mode: ReadMode::Lease,
        serve: Serve::All,
        lease: true,
    },
    Setup {
        name: "sequential-all",
        mode: ReadMode::Sequential,
        serve: Serve::All,
        lease: false,
    },
];

/// The counters of every replica at one moment.
struct Snapshot {
    rpcs_sent: u64,
    read_index: u64,
    fetch: u64,
    barrier: u64,
    cpu_ns: Vec<Option<u64>>,
}

fn snapshot(replicas: &[Replica]) -> Snapshot {
    Snapshot {
        rpcs_sent: replicas
            .iter()
            .map(|r| r.node.metrics().rpcs_sent.load(Ordering::Relaxed))
            .sum(),
        read_index: replicas
            .iter()
            .map(|r| r.wire.read_index_requests.load(Ordering::Relaxed))
            .sum(),
        fetch: replicas
            .iter()
            .map(|r| r.wire.fetch_requests.load(Ordering::Relaxed))
            .sum(),
        barrier: replicas
            .iter()
            .map(|r| r.wire.barrier_seen.load(Ordering::Relaxed))
            .max()
            .unwrap_or(0),
        cpu_ns: replicas
            .iter()
            .map(|r| r.tid.and_then(thread_cpu_ns))
            .collect(),
    }
}

/// The outcome of one measurement.
struct Measured {
    rate: f64,
    hist: Histogram<u64>,
    errors: u64,
    misses: u64,
    keys: u64,
    rpcs: u64,
    read_index: u64,
    fetch: u64,
    barriers: u64,
    /// CPU microseconds per read of the leader, then of the two followers.
    cpu_us_per_read: Vec<Option<f64>>,
    /// Reads served by the leader, then by the followers.
    served: Vec<u64>,
}

/// Starts 3 voters, waits for a leader and preloads `keys` keys; the leader comes first.
async fn start_cluster(setup: Setup, keys: u64) -> Result<Vec<Replica>, Failed> {
    let net = MemNetwork::new();
    let voters: Vec<ReplicaId> = (1..=3).map(ReplicaId).collect();
    let mut replicas = voters
        .iter()
        .map(|id| start_replica(&net, *id, &voters, setup.lease))
        .collect::<Result<Vec<Replica>, Failed>>()?;
    let l = leader(&replicas).await?;
    // The leader first: per-replica figures list it first.
    replicas.swap(0, l);
    preload(&replicas, 0, keys).await?;
    Ok(replicas)
}

/// What the readers of one measurement saw.
struct Outcome {
    hist: Histogram<u64>,
    errors: u64,
    misses: u64,
    served: Vec<u64>,
    secs: f64,
}

/// Runs `readers` closed-loop readers, assigned round-robin to `targets`, until `window` ends.
async fn read_for(
    replicas: &[Replica],
    targets: &[usize],
    mode: ReadMode,
    readers: usize,
    keys: u64,
    window: Duration,
) -> Outcome {
    let stop = Instant::now() + window;
    let mut tasks = Vec::new();
    for i in 0..readers {
        let t = targets[i % targets.len()];
        let node = replicas[t].node.clone();
        let sm = replicas[t].sm.clone();
        tasks.push(tokio::spawn(async move {
            let mut hist = histogram();
            let (mut errors, mut misses) = (0u64, 0u64);
            let mut key = (i as u64).wrapping_mul(7919);
            while Instant::now() < stop {
                let started = Instant::now();
                if node.read(mode).await.is_err() {
                    errors += 1;
                    continue;
                }
                key = key.wrapping_add(1);
                misses += u64::from(sm.get(key % keys).is_none());
                record(&mut hist, started.elapsed().as_micros() as u64);
            }
            (t, hist, errors, misses)
        }));
    }
    let started = Instant::now();
    let mut out = Outcome {
        hist: histogram(),
        errors: 0,
        misses: 0,
        served: vec![0; replicas.len()],
        secs: 0.0,
    };
    for task in tasks {
        // A reader task only panics if the harness itself is broken; it then counts as a reader
        // that saw nothing.
        let Ok((t, hist, errors, misses)) = task.await else {
            out.errors += 1;
            continue;
        };
        out.served[t] += hist.len();
        // Both histograms resize themselves: merging cannot run out of range.
        out.hist.add(hist).expect("auto-resizing histograms merge");
        out.errors += errors;
        out.misses += misses;
    }
    out.secs = started.elapsed().as_secs_f64();
    out
}

async fn measure(
    setup: Setup,
    readers: usize,
    keys: u64,
    window: Duration,
) -> Result<Measured, Failed> {
    let mut replicas = start_cluster(setup, keys).await?;
    let targets: Vec<usize> = match setup.serve {
        Serve::Leader => vec![0],
        Serve::All => (0..replicas.len()).collect(),
        Serve::Followers => (1..replicas.len()).collect(),
    };
    // Warm up: a few reads on every serving replica (a lease needs echoed barriers first).
    for &t in &targets {
        for _ in 0..20 {
            let _ = replicas[t].node.read(setup.mode).await;
        }
    }
    let before = snapshot(&replicas);
    let o = read_for(&replicas, &targets, setup.mode, readers, keys, window).await;
    let after = snapshot(&replicas);
    stop_all(&mut replicas);
    let reads = o.hist.len().max(1) as f64;
    let cpu_us_per_read = before
        .cpu_ns
        .iter()
        .zip(&after.cpu_ns)
        .map(|(b, a)| Some(a.as_ref()?.saturating_sub((*b)?) as f64 / 1000.0 / reads))
        .collect();
    Ok(Measured {
        rate: o.hist.len() as f64 / o.secs,
        hist: o.hist,
        errors: o.errors,
        misses: o.misses,
        keys,
        rpcs: after.rpcs_sent - before.rpcs_sent,
        read_index: after.read_index - before.read_index,
        fetch: after.fetch - before.fetch,
        barriers: after.barrier - before.barrier,
        cpu_us_per_read,
        served: o.served,
    })
}

/// Rounds to 3 significant decimals for the JSON figures.
fn r3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

fn figure(setup: Setup, readers: usize, window: Duration, m: &Measured) -> Figure {
    let reads = m.hist.len().max(1) as f64;
    let cpu: Vec<Value> = m
        .cpu_us_per_read
        .iter()
        .map(|c| c.map_or(Value::Null, |c| json!(r3(c))))
        .collect();
    Figure {
        suite: "reads",
        name: setup.name.into(),
        params: json!({
            "voters": 3, "readers": readers, "mode": format!("{:?}", setup.mode),
            "served_by": match setup.serve {
                Serve::Leader => "leader",
                Serve::All => "all replicas",
                Serve::Followers => "followers",
            },
            "lease_reads": setup.lease, "keys": m.keys,
            "window_s": window.as_secs_f64(), "transport": "in-process", "storage": "in-memory",
        }),
        values: json!({
            "reads_per_s": m.rate.round(),
            "reads": m.hist.len(),
            "p50_us": m.hist.value_at_quantile(0.5),
            "p99_us": m.hist.value_at_quantile(0.99),
            "p999_us": m.hist.value_at_quantile(0.999),
            "errors": m.errors,
            "misses": m.misses,
            "rpcs_per_read": r3(m.rpcs as f64 / reads),
            "fetch_per_read": r3(m.fetch as f64 / reads),
            "read_index_per_read": r3(m.read_index as f64 / reads),
            "barriers_per_read": r3(m.barriers as f64 / reads),
            "reads_served": m.served,
            "leader_cpu_us_per_read": cpu.first().cloned().unwrap_or(Value::Null),
            "cpu_us_per_read": cpu,
        }),
    }
}

/// How spreading linearizable reads over the replicas compares with serving them on the leader,
/// against the targets of the bench issue (throughput at least 1.5x, leader CPU per read at most
/// a fifth).
fn scaling(readers: usize, leader_only: &Measured, spread: &Measured, name: &str) -> Figure {
    let cpu = |m: &Measured| m.cpu_us_per_read.first().copied().flatten();
    let cpu_ratio = match (cpu(spread), cpu(leader_only)) {
        (Some(s), Some(l)) if l > 0.0 => json!(r3(s / l)),
        _ => Value::Null,
    };
    Figure {
        suite: "reads",
        name: format!("scaling {name}"),
        params: json!({ "readers": readers, "voters": 3 }),
        values: json!({
            "throughput_ratio": r3(spread.rate / leader_only.rate.max(1e-9)),
            "throughput_ratio_target": 1.5,
            "leader_cpu_ratio": cpu_ratio,
            "leader_cpu_ratio_target": 0.2,
        }),
    }
}

/// Runs the suite. A configuration that fails gets a figure with a zero rate and the error,
/// which `--check` reports.
pub fn run(size: Size) -> Vec<Figure> {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("raft-bench: reads suite: no runtime: {e}");
            return Vec::new();
        }
    };
    let levels: &[usize] = size.pick(&[1, 64, 256, 1024], &[8]);
    let keys = size.pick(1000, 100);
    let window = size.window();
    let mut out = Vec::new();
    for &readers in levels {
        let mut by_name = HashMap::new();
        for setup in SETUPS {
            eprintln!("bench: reads {} with {readers} readers", setup.name);
            match rt.block_on(measure(setup, readers, keys, window)) {
                Ok(m) => {
                    out.push(figure(setup, readers, window, &m));
                    by_name.insert(setup.name, m);
                }
                Err(e) => {
                    eprintln!("raft-bench: reads {}: {e}", setup.name);
                    out.push(Figure {
                        suite: "reads",
                        name: setup.name.into(),
                        params: json!({ "readers": readers }),
                        values: json!({ "reads_per_s": 0, "error": e }),
                    });
                }
            }
        }
        // Fewer readers than replicas cannot spread: the comparison would be with itself.
        if readers < 3 {
            continue;
        }
        for (leader_only, spread) in [
            ("linearizable-leader", "linearizable-all"),
            ("linearizable-leader", "linearizable-followers"),
            ("lease-leader", "lease-all"),
        ] {
            if let (Some(l), Some(s)) = (by_name.get(leader_only), by_name.get(spread)) {
                out.push(scaling(readers, l, s, spread));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {

    use super::*;

    /// Goal: the suite measures what it claims. Method: a short linearizable run over every
    /// replica; each replica serves reads, followers ask the leader (ReadIndex), every read
    /// finds its preloaded key, and the CPU time of each replica thread is known.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn reads_spread_over_replicas_are_counted() {
        let setup = SETUPS[1];
        assert_eq!(setup.name, "linearizable-all");
        let m = measure(setup, 6, 20, Duration::from_millis(100))
            .await
            .expect("measured");
        assert!(!m.hist.is_empty(), "reads completed");
        assert_eq!(m.misses, 0, "a read after the preload finds its key");
        assert!(m.served.iter().all(|&n| n > 0), "served: {:?}", m.served);
        assert!(
            m.read_index > 0,
            "followers asked the leader for read offsets"
        );
        assert!(m.fetch > 0, "followers fetched");
        assert_eq!(m.cpu_us_per_read.len(), 3);
        assert!(
            m.cpu_us_per_read.iter().all(Option::is_some),
            "cpu time per replica"
        );
    }
}
