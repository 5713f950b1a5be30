//! Three real `raft-node` processes over QUIC (mutual TLS) on loopback, fsync on, for each
//! storage backend, driven through the Redis protocol by [`crate::resp_load`]: the etcd
//! benchmark matrix (1 connection / 1 client, 50 / 50, 100 connections / 1000 clients) x
//! (writes to the leader, writes spread over all members, linearizable reads on the leader,
//! linearizable reads over all members, sequential reads over all members), 8 B keys and 256 B
//! values, plus a payload sweep of writes, plus a mixed workload of session hashes and a
//! sorted-set leaderboard spread over all members ([`crate::mixed_workload`], reported per
//! request kind too). When `redis-server` is installed, one
//! `redis-server` with `appendfsync always` is driven by the same generator (and by
//! `redis-benchmark`) as the baseline.
//!
//! The processes are the binary `raft-node` found by [`node_binary`], run by [`ProcCluster`].

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::durable_writes::{dev_cluster, disk_latency, redis_benchmark_levels};
use crate::mixed_workload::{self, MIX_PERCENT, PLAYERS};
use crate::proc_cluster::{free_ports, node_binary, ProcCluster, Spawned, Timers, READY_DEADLINE};
use crate::resp_load::{self, Conn, Load, Op};
use crate::{Figure, Size};

/// Keys every run draws from (preloaded before the reads).
pub const KEYSPACE: u64 = 10_000;

/// A figure that records why a suite could not measure (and makes `--check` fail).
pub fn error_figure(suite: &'static str, what: &str, error: String) -> Figure {
    eprintln!("raft-bench: {suite}: {what}: {error}");
    Figure {
        suite,
        name: what.to_string(),
        params: json!({}),
        values: json!({ "error": error }),
    }
}

/// Where a workload's connections go.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Target {
    Leader,
    All,
}

/// One cell of the etcd matrix.
struct Workload {
    name: &'static str,
    op: Op,
    target: Target,
    read_mode: Option<&'static str>,
}

const MATRIX: [Workload; 5] = [
    Workload {
        name: "writes to leader",
        op: Op::Set,
        target: Target::Leader,
        read_mode: None,
    },
    Workload {
        name: "writes to all members",
        op: Op::Set,
        target: Target::All,
        read_mode: None,
    },
    Workload {
        name: "linearizable reads, leader",
        op: Op::Get,
        target: Target::Leader,
        read_mode: Some("linearizable"),
    },
    Workload {
        name: "linearizable reads, all",
        op: Op::Get,
        target: Target::All,
        read_mode: Some("linearizable"),
    },
    Workload {
        name: "sequential reads, all",
        op: Op::Get,
        target: Target::All,
        read_mode: Some("sequential"),
    },
];

/// The figure name of `redis-benchmark`'s SET load on the leader of three processes.
pub const SET_REDIS_BENCHMARK: &str = "writes to leader (redis-benchmark)";

/// The mixed workload's figure name.
pub const MIXED: &str = "mixed: sessions and leaderboard, all";

/// Size of each session's `cart` field in the mixed workload.
const CART_BYTES: usize = 64;

/// `(connections, clients)` levels.
fn levels(size: Size) -> &'static [(usize, usize)] {
    size.pick(&[(1, 1), (50, 50), (100, 1000)], &[(1, 1), (4, 16)])
}

/// Load before each measurement window.
pub fn warmup(size: Size) -> Duration {
    size.pick(Duration::from_millis(500), Duration::from_millis(100))
}

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("runtime: {e}"))
}

/// The 1-minute load average (`/proc/loadavg`), recorded next to each figure: the machine is
/// shared, and a busy one lowers every figure.
pub fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The values of a measured load.
pub fn load_values(o: &resp_load::Outcome) -> Value {
    let mut v = json!({
        "ops_per_s": o.rate().round(),
        "ok": o.ok,
        "errors": o.errors,
        "p50_us": o.hist.value_at_quantile(0.5),
        "p99_us": o.hist.value_at_quantile(0.99),
        "p999_us": o.hist.value_at_quantile(0.999),
    });
    if let (Some(e), Some(map)) = (&o.first_error, v.as_object_mut()) {
        map.insert("first_error".into(), json!(e));
    }
    v
}

/// Runs the suite.
pub fn run(size: Size) -> Vec<Figure> {
    let bin = match node_binary() {
        Ok(b) => b,
        Err(e) => return vec![error_figure("cluster", "raft-node binary", e)],
    };
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(e) => return vec![error_figure("cluster", "runtime", e)],
    };
    let mut out = Vec::new();
    for storage in size.pick(&["redb", "fjall"][..], &["fjall"][..]) {
        if let Err(e) = rt.block_on(backend(&bin, storage, size, &mut out)) {
            out.push(error_figure("cluster", storage, e));
        }
    }
    let tool = on_path("redis-benchmark");
    rt.block_on(dev_cluster(
        &bin,
        tool.as_deref(),
        levels(size),
        size,
        &mut out,
    ));
    out.push(disk_latency(size.pick(2_000, 200)));
    if size.quick {
        eprintln!("bench: cluster: the redis-server baseline is skipped in quick mode");
    } else {
        rt.block_on(redis_baseline(size, &mut out));
    }
    out
}

async fn backend(
    bin: &Path,
    storage: &'static str,
    size: Size,
    out: &mut Vec<Figure>,
) -> Result<(), String> {
    let cluster = ProcCluster::start(bin, storage, Timers::NODE_DEFAULTS).await?;
    let leader = cluster.wait_leader().await?;
    resp_load::preload(cluster.port(leader), KEYSPACE, 256).await?;
    let mut cells: Vec<(&Workload, usize, usize)> = Vec::new();
    for &(connections, clients) in levels(size) {
        for w in &MATRIX {
            cells.push((w, connections, clients));
        }
    }
    let sweep_levels = size.pick(levels(size), &[(4, 16)]);
    let mut sweep = Vec::new();
    for &(connections, clients) in sweep_levels {
        for value_bytes in [16, 128, 1024] {
            sweep.push((connections, clients, value_bytes));
        }
    }
    let total = cells.len() + sweep.len();
    let cells = cells
        .into_iter()
        .map(|(w, c, n)| (w, c, n, 256))
        .chain(sweep.into_iter().map(|(c, n, v)| (&MATRIX[0], c, n, v)));
    for (i, (w, connections, clients, value_bytes)) in cells.enumerate() {
        eprintln!(
            "bench: cluster [{}/{total}] {storage}: {} at {connections} connections / {clients} \
             clients, {value_bytes} B values",
            i + 1,
            w.name
        );
        let load = Load {
            ports: ports(&cluster, w.target).await?,
            connections,
            clients,
            op: w.op,
            value_bytes,
            keyspace: KEYSPACE,
            setup: w
                .read_mode
                .map(|m| vec!["READMODE".to_string(), m.to_string()])
                .into_iter()
                .collect(),
            warmup: warmup(size),
            window: size.window(),
        };
        let got = resp_load::run(&load)
            .await
            .map_err(|e| format!("{}: {e}{}", w.name, cluster.log_tails()))?;
        out.push(Figure {
            suite: "cluster",
            name: w.name.into(),
            params: json!({
                "storage": storage, "voters": 3, "transport": "quic, mutual TLS, loopback",
                "fsync": true, "connections": connections, "clients": clients,
                "key_bytes": 8, "value_bytes": if w.op == Op::Set { value_bytes } else { 256 },
                "keyspace": KEYSPACE, "window_s": size.window().as_secs_f64(),
                "read_mode": w.read_mode, "load_average_1m": load_average(),
            }),
            values: load_values(&got),
        });
    }
    if let Some(tool) = on_path("redis-benchmark") {
        let leader = cluster.port(cluster.wait_leader().await?);
        for &(clients, requests) in redis_benchmark_levels(size) {
            eprintln!("bench: cluster {storage}: redis-benchmark -c {clients} against the leader");
            let values = redis_benchmark(&tool, leader, clients, requests)?;
            out.push(Figure {
                suite: "cluster",
                name: SET_REDIS_BENCHMARK.into(),
                params: json!({
                    "storage": storage, "voters": 3, "transport": "quic, mutual TLS, loopback",
                    "fsync": true, "connections": clients, "clients": clients, "key_bytes": 16,
                    "value_bytes": 256, "generator": "redis-benchmark",
                    "load_average_1m": load_average(),
                }),
                values,
            });
        }
    }
    mixed(&cluster, storage, size, out).await
}

/// The client ports a load goes to, the leader's last.
async fn ports(cluster: &ProcCluster, target: Target) -> Result<Vec<u16>, String> {
    let leader = cluster.wait_leader().await?;
    Ok(match target {
        Target::Leader => vec![cluster.port(leader)],
        // Followers first, so that a single connection measures a follower.
        Target::All => cluster
            .ids()
            .into_iter()
            .filter(|id| *id != leader)
            .chain([leader])
            .map(|id| cluster.port(id))
            .collect(),
    })
}

/// The mixed workload at every level, over all members with linearizable reads, after its
/// sessions and players are preloaded.
async fn mixed(
    cluster: &ProcCluster,
    storage: &'static str,
    size: Size,
    out: &mut Vec<Figure>,
) -> Result<(), String> {
    let sessions = size.pick(KEYSPACE, 1_000);
    let cart = vec![b'c'; CART_BYTES];
    let leader = cluster.wait_leader().await?;
    mixed_workload::preload(cluster.port(leader), sessions, &cart).await?;
    let mix: serde_json::Map<String, Value> = mixed_workload::KINDS
        .iter()
        .zip(MIX_PERCENT)
        .map(|(k, p)| (k.to_string(), json!(p)))
        .collect();
    for &(connections, clients) in levels(size) {
        eprintln!(
            "bench: cluster {storage}: {MIXED} at {connections} connections / {clients} clients"
        );
        let load = Load {
            ports: ports(cluster, Target::All).await?,
            connections,
            clients,
            op: Op::Mixed,
            value_bytes: CART_BYTES,
            keyspace: sessions,
            setup: vec![vec!["READMODE".into(), "linearizable".into()]],
            warmup: warmup(size),
            window: size.window(),
        };
        let got = resp_load::run(&load)
            .await
            .map_err(|e| format!("{MIXED}: {e}{}", cluster.log_tails()))?;
        out.push(Figure {
            suite: "cluster",
            name: MIXED.into(),
            params: json!({
                "storage": storage, "voters": 3, "transport": "quic, mutual TLS, loopback",
                "fsync": true, "connections": connections, "clients": clients,
                "sessions": sessions, "session_fields": 4, "cart_bytes": CART_BYTES,
                "players": PLAYERS, "mix_percent": mix, "read_mode": "linearizable",
                "window_s": size.window().as_secs_f64(), "load_average_1m": load_average(),
            }),
            values: mixed_values(&got),
        });
    }
    Ok(())
}

/// [`load_values`] plus, for each request kind, its rate (`hgetall_per_s`, which `--check`
/// requires to be positive like every rate), error count and latency percentiles.
fn mixed_values(o: &resp_load::Outcome) -> Value {
    let mut v = load_values(o);
    if let Some(map) = v.as_object_mut() {
        for k in &o.by_kind {
            let name = k.kind.to_ascii_lowercase();
            map.insert(
                format!("{name}_per_s"),
                json!((k.ok as f64 / o.seconds).round()),
            );
            map.insert(format!("{name}_errors"), json!(k.errors));
            map.insert(
                format!("{name}_p50_us"),
                json!(k.hist.value_at_quantile(0.5)),
            );
            map.insert(
                format!("{name}_p99_us"),
                json!(k.hist.value_at_quantile(0.99)),
            );
        }
    }
    v
}

/// Whether `name` is an executable on `PATH`.
pub fn on_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// A `redis-server` on a temp dir that dies with this value.
struct Redis {
    _process: Spawned,
    port: u16,
}

async fn start_redis(bin: &Path) -> Result<Redis, String> {
    let dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
    let port = free_ports(1)?.first().map_or(0, |p| p.0);
    let child = Command::new(bin)
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--dir"])
        .arg(dir.path())
        .args([
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
            "--save",
            "",
        ])
        .args(["--protected-mode", "no", "--daemonize", "no", "--logfile"])
        .arg(dir.path().join("redis.log"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("start {}: {e}", bin.display()))?;
    let redis = Redis {
        _process: Spawned { child, dir },
        port,
    };
    let deadline = Instant::now() + READY_DEADLINE;
    loop {
        if let Ok(mut c) = Conn::connect(port, Duration::from_secs(1)).await {
            if c.cmd(&["PING"], Duration::from_secs(2)).await.as_deref() == Ok("PONG") {
                return Ok(redis);
            }
        }
        if Instant::now() > deadline {
            return Err("redis-server did not answer PING".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// SET with 256 B values over the suite's key space, on one server's `port`: the load the
/// redis baseline and `raft-node dev` are compared under.
pub fn set_load(port: u16, connections: usize, clients: usize, size: Size) -> Load {
    Load {
        ports: vec![port],
        connections,
        clients,
        op: Op::Set,
        value_bytes: 256,
        keyspace: KEYSPACE,
        setup: Vec::new(),
        warmup: warmup(size),
        window: size.window(),
    }
}

/// One `redis-server` with `appendfsync always`, SET with 256 B values at 1, 50 and 1000
/// clients, through this bench's generator and through `redis-benchmark`.
async fn redis_baseline(size: Size, out: &mut Vec<Figure>) {
    let Some(bin) = on_path("redis-server") else {
        let note = "redis-server is not installed, no baseline measured \
                    (apt-get install -y redis-server)";
        eprintln!("bench: cluster: {note}");
        out.push(Figure {
            suite: "cluster",
            name: "redis baseline".into(),
            params: json!({}),
            values: json!({ "skipped": note }),
        });
        return;
    };
    let redis = match start_redis(&bin).await {
        Ok(r) => r,
        Err(e) => return out.push(error_figure("cluster", "redis baseline", e)),
    };
    // redis-benchmark's keys are `key:` and twelve digits.
    let params = |connections: usize, clients: usize, tool: &str, key_bytes: usize| {
        json!({
            "server": "redis-server, appendonly yes, appendfsync always", "fsync": true,
            "connections": connections, "clients": clients, "key_bytes": key_bytes,
            "value_bytes": 256, "generator": tool, "load_average_1m": load_average(),
        })
    };
    for &(connections, clients) in levels(size) {
        eprintln!("bench: cluster redis baseline at {connections} connections / {clients} clients");
        match resp_load::run(&set_load(redis.port, connections, clients, size)).await {
            Ok(got) => out.push(Figure {
                suite: "cluster",
                name: "redis SET (baseline)".into(),
                params: params(connections, clients, "resp_load", 8),
                values: load_values(&got),
            }),
            Err(e) => out.push(error_figure("cluster", "redis baseline", e)),
        }
    }
    let Some(tool) = on_path("redis-benchmark") else {
        return;
    };
    for &(clients, requests) in redis_benchmark_levels(size) {
        eprintln!("bench: cluster redis-benchmark -c {clients}");
        match redis_benchmark(&tool, redis.port, clients, requests) {
            Ok(values) => out.push(Figure {
                suite: "cluster",
                name: "redis SET (redis-benchmark)".into(),
                params: params(clients, clients, "redis-benchmark", 16),
                values,
            }),
            Err(e) => out.push(error_figure("cluster", "redis-benchmark", e)),
        }
    }
}

/// Runs `redis-benchmark -t set` and reads its CSV line
/// (`"SET","rps","avg","min","p50","p95","p99","max"`, latencies in ms).
pub fn redis_benchmark(
    tool: &Path,
    port: u16,
    clients: usize,
    requests: u32,
) -> Result<Value, String> {
    let output = Command::new(tool)
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-t",
            "set",
            "-d",
            "256",
        ])
        .args(["-c", &clients.to_string(), "-n", &requests.to_string()])
        .args(["-r", &KEYSPACE.to_string(), "--csv"])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{}: {e}", tool.display()))?;
    let text = String::from_utf8_lossy(&output.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with("\"SET\""))
        .ok_or_else(|| format!("no SET line in redis-benchmark output: {text:?}"))?;
    let fields: Vec<f64> = line
        .split(',')
        .skip(1)
        .map(|f| f.trim_matches('"').parse::<f64>())
        .collect::<Result<_, _>>()
        .map_err(|e| format!("redis-benchmark line {line:?}: {e}"))?;
    let [rps, _avg, _min, p50, _p95, p99, max] = fields[..] else {
        return Err(format!(
            "redis-benchmark line {line:?} has an unexpected shape"
        ));
    };
    let us = |ms: f64| (ms * 1000.0).round();
    Ok(json!({
        "ops_per_s": rps.round(), "ok": requests,
        "p50_us": us(p50), "p99_us": us(p99), "max_us": us(max),
    }))
}
