//! The driver alone: 3 voters in one process on the in-memory log, state machine and transport;
//! C clients each issue sequential writes to the leader for a fixed window.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use hdrhistogram::Histogram;
use raft_core::driver::{DriverOptions, Node, Parts};
use raft_core::io::{read_to_end, BytesReader, SnapshotReader, StateMachine, StateMachineError};
use raft_core::mem::transport::MemNetwork;
use raft_core::mem::{MemElectionStore, MemLog, MemSnapshots};
use raft_core::{Config, Offset, Record, ReplicaId, Role};
use serde_json::json;

use crate::{Figure, Size};

/// A state machine holding one blob (its size is what a snapshot costs) and counting records.
#[derive(Default)]
pub struct Blob {
    pub applied: AtomicU64,
    pub state: Mutex<Bytes>,
}

#[async_trait]
impl StateMachine for Blob {
    async fn applied(&self) -> Offset {
        Offset(self.applied.load(Ordering::SeqCst))
    }

    async fn apply(
        &self,
        records: &[Record],
        responses: &mut Vec<Bytes>,
    ) -> Result<(), StateMachineError> {
        if let Some(last) = records.last() {
            self.applied.store(last.offset.next().0, Ordering::SeqCst);
        }
        responses.resize(responses.len() + records.len(), Bytes::new());
        Ok(())
    }

    async fn snapshot(&self) -> Result<Box<dyn SnapshotReader>, StateMachineError> {
        Ok(Box::new(BytesReader::new(
            self.state.lock().unwrap().clone(),
        )))
    }

    async fn restore(
        &self,
        applied: Offset,
        data: &mut dyn SnapshotReader,
    ) -> Result<(), StateMachineError> {
        let data = read_to_end(data, u64::MAX)
            .await
            .map_err(|e| StateMachineError {
                offset: applied,
                reason: e.to_string(),
            })?;
        *self.state.lock().unwrap() = data;
        self.applied.store(applied.0, Ordering::SeqCst);
        Ok(())
    }
}

/// A started in-memory replica.
pub struct Member {
    pub node: Node,
    pub sm: Arc<Blob>,
}

/// Starts replica `id` with `tune` applied to its configuration.
pub async fn member(
    net: &MemNetwork,
    id: ReplicaId,
    voters: &[ReplicaId],
    tune: &dyn Fn(&mut Config),
) -> Member {
    let mut cfg = Config::new(id, voters.iter().copied());
    cfg.election_timeout = Duration::from_millis(150);
    cfg.fetch_timeout = Duration::from_millis(600);
    cfg.fetch_max_wait = Duration::from_millis(200);
    tune(&mut cfg);
    let sm = Arc::new(Blob::default());
    let cfg = cfg.validate().expect("config");
    let snapshots = Arc::new(MemSnapshots::new());
    if cfg.voters.contains(&id) {
        raft_core::driver::format(&*snapshots, &cfg.bootstrap_voters())
            .await
            .expect("format");
    }
    let parts = Parts {
        log: Arc::new(MemLog::new()),
        election: Arc::new(MemElectionStore::new()),
        transport: Arc::new(net.endpoint(id)),
        state_machine: sm.clone(),
        snapshots,
    };
    let options = DriverOptions {
        seed: u64::from(id.0),
        ..DriverOptions::default()
    };
    let node = Node::start(cfg, parts, options).await.expect("start");
    Member { node, sm }
}

/// Waits for a leader that has committed in its epoch.
pub async fn leader(members: &[Member]) -> usize {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        for (i, m) in members.iter().enumerate() {
            if let Some(s) = m.node.status().await {
                if s.role == Role::Leader && s.high_watermark > Offset::ZERO {
                    return i;
                }
            }
        }
        assert!(Instant::now() < deadline, "no leader within 10 s");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// A latency histogram in microseconds with a fixed range (up to 100 s): recording into it
/// never resizes it.
fn latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 100_000_000, 3).expect("valid bounds")
}

/// Histograms the clients share, client `i` recording into shard `i % SHARDS`. One histogram
/// per client would be thousands of them (about 140 KiB each), so each record would touch cold
/// memory and the clients' bookkeeping would cost more than the writes they measure; a few
/// shards stay in cache, and with two worker threads a shard's lock is almost never contended.
const SHARDS: usize = 8;

async fn measure(clients: usize, payload: usize, window: Duration) -> Measured {
    let net = MemNetwork::new();
    let voters: Vec<ReplicaId> = (1..=3).map(ReplicaId).collect();
    let mut members = Vec::new();
    for id in &voters {
        members.push(member(&net, *id, &voters, &|c| c.snapshot_after_records = 0).await);
    }
    let l = leader(&members).await;
    let node = members[l].node.clone();
    let shards: Arc<Vec<Mutex<Histogram<u64>>>> = Arc::new(
        (0..SHARDS)
            .map(|_| Mutex::new(latency_histogram()))
            .collect(),
    );
    let cpu_before = crate::openraft::cpu_times();
    let started = Instant::now();
    let stop = started + window;
    let mut tasks = Vec::new();
    for i in 0..clients {
        let node = node.clone();
        let shards = shards.clone();
        tasks.push(tokio::spawn(async move {
            let body = Bytes::from(vec![1u8; payload]);
            let mut now = Instant::now();
            while now < stop {
                let t = now;
                let ok = node.propose(body.clone()).await.is_ok();
                now = Instant::now();
                if ok {
                    let micros = now.duration_since(t).as_micros() as u64;
                    shards[i % SHARDS]
                        .lock()
                        .expect("no client panics holding it")
                        .saturating_record(micros);
                }
            }
        }));
    }
    for t in tasks {
        t.await.expect("client");
    }
    let elapsed = started.elapsed().as_secs_f64();
    let cpu = match (cpu_before, crate::openraft::cpu_times()) {
        (Some((before, _)), Some((after, _))) => Some(after.saturating_sub(before)),
        _ => None,
    };
    let mut all = latency_histogram();
    for shard in shards.iter() {
        all.add(&*shard.lock().expect("no client panics holding it"))
            .expect("merge");
    }
    for m in &members {
        m.node.shutdown().await;
    }
    Measured {
        rate: all.len() as f64 / elapsed,
        cpu,
        hist: all,
    }
}

/// What one level measured.
struct Measured {
    /// Writes per second.
    rate: f64,
    /// CPU time the process spent during the window.
    cpu: Option<Duration>,
    /// Write latencies in microseconds.
    hist: Histogram<u64>,
}

/// Writes per CPU second, rounded, or null when the CPU time is unknown.
fn per_cpu_second(writes: u64, cpu: Option<Duration>) -> serde_json::Value {
    match cpu {
        Some(cpu) if !cpu.is_zero() => json!((writes as f64 / cpu.as_secs_f64()).round()),
        _ => serde_json::Value::Null,
    }
}

/// Client counts to run: `RAFT_BENCH_CORE_CLIENTS` (a comma-separated list, e.g. `1024` to
/// profile one level) or the suite's defaults.
fn levels(size: Size) -> Vec<usize> {
    let chosen: Option<Vec<usize>> = std::env::var("RAFT_BENCH_CORE_CLIENTS")
        .ok()
        .map(|v| v.split(',').filter_map(|c| c.trim().parse().ok()).collect())
        .filter(|v: &Vec<usize>| !v.is_empty());
    chosen.unwrap_or_else(|| {
        size.pick(&[1, 64, 256, 1024, 4096][..], &[1, 64][..])
            .to_vec()
    })
}

/// The quantiles at which the latency CDF is sampled (`cdf_us`: `[quantile, microseconds]`).
const CDF_QUANTILES: [f64; 12] = [
    0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999, 0.9999, 1.0,
];

/// Runs the suite; with `OPENRAFT_BENCH_BIN` set, runs openraft's minimal bench after each
/// level too (see [`crate::openraft`]).
pub fn run(size: Size) -> Vec<Figure> {
    let rt = runtime();
    let openraft_bin = std::env::var_os("OPENRAFT_BENCH_BIN").map(std::path::PathBuf::from);
    let mut out = Vec::new();
    for clients in levels(size) {
        let Measured { rate, cpu, hist } = rt.block_on(measure(clients, 16, size.window()));
        out.push(Figure {
            suite: "core",
            name: "writes".into(),
            params: json!({
                "voters": 3, "clients": clients, "payload_bytes": 16,
                "window_s": size.window().as_secs_f64(), "fsync": false,
            }),
            values: json!({
                "writes_per_s": rate.round(),
                "writes": hist.len(),
                "p50_us": hist.value_at_quantile(0.5),
                "p99_us": hist.value_at_quantile(0.99),
                "p999_us": hist.value_at_quantile(0.999),
                "cdf_us": CDF_QUANTILES
                    .iter()
                    .map(|q| json!([q, hist.value_at_quantile(*q)]))
                    .collect::<Vec<_>>(),
                "writes_per_cpu_s": per_cpu_second(hist.len(), cpu),
            }),
        });
        let Some(bin) = &openraft_bin else {
            continue;
        };
        // About one window's worth of writes at our rate: the run then lasts a few seconds
        // whichever of the two is faster.
        let operations = (rate * size.window().as_secs_f64()) as u64;
        match crate::openraft::run(bin, clients, operations.max(clients as u64 * 4)) {
            Ok(r) => {
                let (client_workers, server_workers) = crate::openraft::workers();
                out.push(Figure {
                    suite: "core",
                    name: "openraft-minimal".into(),
                    params: json!({
                        "voters": 3, "clients": clients, "payload_bytes": 0,
                        "client_workers": client_workers, "server_workers": server_workers,
                        "fsync": false,
                    }),
                    values: json!({
                        "writes_per_s": r.rate().round(),
                        "writes": r.writes,
                        "elapsed_s": r.elapsed.as_secs_f64(),
                        "writes_per_cpu_s": per_cpu_second(r.writes, r.cpu),
                        "ours_over_openraft": (rate / r.rate() * 100.0).round() / 100.0,
                    }),
                });
            }
            Err(e) => eprintln!("bench: openraft's minimal bench at {clients} clients: {e}"),
        }
    }
    out
}
