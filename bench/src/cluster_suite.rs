//! Three real `raft-node` processes over QUIC (mutual TLS) on loopback, fsync on, for each
//! storage backend, driven through the Redis protocol by [`crate::resp_load`]: the etcd
//! benchmark matrix (1 connection / 1 client, 50 / 50, 100 connections / 1000 clients) x
//! (writes to the leader, writes spread over all members, linearizable reads on the leader,
//! linearizable reads over all members, sequential reads over all members), 8 B keys and 256 B
//! values, plus a payload sweep of writes. When `redis-server` is installed, one
//! `redis-server` with `appendfsync always` is driven by the same generator (and by
//! `redis-benchmark`) as the baseline.
//!
//! The processes are the binary `raft-node` found by [`node_binary`]; [`ProcCluster`] is also
//! what the failover suite kills and restarts.

use std::fs::OpenOptions;
use std::net::{TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::resp_load::{self, Conn, Load, Op};
use crate::{Figure, Size};

/// Keys every run draws from (preloaded before the reads).
const KEYSPACE: u64 = 10_000;

/// How long a cluster may take to start, elect, or answer.
const READY_DEADLINE: Duration = Duration::from_secs(60);

/// Where the `raft-node` binary is: `$RAFT_BENCH_NODE_BIN` (set by `cargo xtask bench`, which
/// builds it first), else the `raft-node` next to this executable (the same cargo profile).
pub fn node_binary() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("RAFT_BENCH_NODE_BIN") {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(format!("RAFT_BENCH_NODE_BIN={} is not a file", p.display()))
        };
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    let beside = exe.with_file_name("raft-node");
    if beside.is_file() {
        Ok(beside)
    } else {
        let release = if cfg!(debug_assertions) {
            ""
        } else {
            "--release "
        };
        Err(format!(
            "no raft-node binary at {}: the cluster and failover suites run real nodes; build it \
             with `cargo build {release}-p raft-node` (`cargo xtask bench` does), or set \
             RAFT_BENCH_NODE_BIN",
            beside.display()
        ))
    }
}

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

/// The node timers written into every config, in milliseconds.
#[derive(Clone, Copy, Debug)]
pub struct Timers {
    /// `timers.election_timeout_ms`.
    pub election_ms: u64,
    /// `timers.fetch_timeout_ms`.
    pub fetch_ms: u64,
    /// `timers.fetch_max_wait_ms`.
    pub fetch_max_wait_ms: u64,
}

impl Timers {
    /// `raft-node`'s defaults.
    pub const NODE_DEFAULTS: Timers = Timers {
        election_ms: 1000,
        fetch_ms: 2000,
        fetch_max_wait_ms: 500,
    };
}

/// What `RAFT STATUS` says about a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeStatus {
    /// `role:`.
    pub role: String,
    /// `epoch:`.
    pub epoch: u64,
    /// `leader:` as a replica id.
    pub leader: Option<u32>,
}

impl NodeStatus {
    fn parse(text: &str) -> Option<NodeStatus> {
        let field = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .map(str::trim)
        };
        let leader = field("leader")?;
        Some(NodeStatus {
            role: field("role")?.to_string(),
            epoch: field("epoch")?.parse().ok()?,
            // `leader is r3 at ADDR`, `leader is r3` or `none`.
            leader: leader
                .strip_prefix("leader is ")
                .unwrap_or(leader)
                .strip_prefix('r')
                .and_then(|l| l.split_whitespace().next())
                .and_then(|l| l.parse().ok()),
        })
    }
}

struct ProcNode {
    id: u32,
    client_port: u16,
    peer_port: u16,
    child: Option<Child>,
}

/// Three `raft-node run` processes sharing a temp directory (certificates, configs, data, logs).
/// Dropping it kills every process.
pub struct ProcCluster {
    dir: tempfile::TempDir,
    bin: PathBuf,
    nodes: Vec<ProcNode>,
}

/// Free TCP and UDP ports on loopback, all held until every one is chosen.
fn free_ports(n: usize) -> Result<Vec<(u16, u16)>, String> {
    let err = |e: std::io::Error| format!("cannot reserve a port: {e}");
    let tcp = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<Vec<_>, _>>()
        .map_err(err)?;
    let udp = (0..n)
        .map(|_| UdpSocket::bind("127.0.0.1:0"))
        .collect::<Result<Vec<_>, _>>()
        .map_err(err)?;
    tcp.iter()
        .zip(&udp)
        .map(|(t, u)| {
            Ok((
                t.local_addr().map_err(err)?.port(),
                u.local_addr().map_err(err)?.port(),
            ))
        })
        .collect()
}

impl ProcCluster {
    /// Writes certificates and configs for three voters on `storage` and starts them, waiting
    /// until each answers `PING`.
    pub async fn start(bin: &Path, storage: &str, timers: Timers) -> Result<ProcCluster, String> {
        let dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
        let certs = Command::new(bin)
            .args(["certs", "--out"])
            .arg(dir.path().join("certs"))
            .args(["--replicas", "1,2,3"])
            .stdout(Stdio::null())
            .status()
            .map_err(|e| format!("{}: {e}", bin.display()))?;
        if !certs.success() {
            return Err(format!("`raft-node certs` failed ({certs})"));
        }
        let nodes: Vec<ProcNode> = free_ports(3)?
            .into_iter()
            .zip(1..)
            .map(|((client_port, peer_port), id)| ProcNode {
                id,
                client_port,
                peer_port,
                child: None,
            })
            .collect();
        let mut cluster = ProcCluster {
            dir,
            bin: bin.to_path_buf(),
            nodes,
        };
        for n in &cluster.nodes {
            let text = cluster.config_text(n.id, storage, timers);
            std::fs::write(cluster.config_path(n.id), text)
                .map_err(|e| format!("write config: {e}"))?;
        }
        for id in cluster.ids() {
            cluster.spawn(id)?;
        }
        for id in cluster.ids() {
            cluster.wait_ready(id).await?;
        }
        Ok(cluster)
    }

    fn config_path(&self, id: u32) -> PathBuf {
        self.dir.path().join(format!("node{id}.toml"))
    }

    fn log_path(&self, id: u32) -> PathBuf {
        self.dir.path().join(format!("node{id}.log"))
    }

    fn config_text(&self, id: u32, storage: &str, t: Timers) -> String {
        let mut s = format!(
            "cluster_id = \"bench\"\nreplica_id = {id}\ndata_dir = \"data{id}\"\n\
             storage = \"{storage}\"\nlog = \"warn\"\n\n[tls]\nca_cert = \"certs/ca.pem\"\n\
             cert = \"certs/node-{id}.pem\"\nkey = \"certs/node-{id}.key\"\n\n[timers]\n\
             election_timeout_ms = {}\nfetch_timeout_ms = {}\nfetch_max_wait_ms = {}\n",
            t.election_ms, t.fetch_ms, t.fetch_max_wait_ms
        );
        for n in &self.nodes {
            s += &format!(
                "\n[[voters]]\nid = {}\npeer = \"127.0.0.1:{}\"\nclient = \"127.0.0.1:{}\"\n",
                n.id, n.peer_port, n.client_port
            );
        }
        s
    }

    /// The replica ids.
    pub fn ids(&self) -> Vec<u32> {
        self.nodes.iter().map(|n| n.id).collect()
    }

    /// The client (RESP) port of node `id`.
    pub fn port(&self, id: u32) -> u16 {
        self.nodes
            .iter()
            .find(|n| n.id == id)
            .map_or(0, |n| n.client_port)
    }

    /// Starts node `id` (its process must not be running).
    pub fn spawn(&mut self, id: u32) -> Result<(), String> {
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path(id))
            .map_err(|e| format!("node log: {e}"))?;
        let log2 = log.try_clone().map_err(|e| format!("node log: {e}"))?;
        let child = Command::new(&self.bin)
            .args(["run", "--config"])
            .arg(self.config_path(id))
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .spawn()
            .map_err(|e| format!("start {}: {e}", self.bin.display()))?;
        if let Some(n) = self.nodes.iter_mut().find(|n| n.id == id) {
            n.child = Some(child);
        }
        Ok(())
    }

    /// SIGKILLs node `id` and reaps it.
    pub fn kill(&mut self, id: u32) {
        if let Some(mut c) = self
            .nodes
            .iter_mut()
            .find(|n| n.id == id)
            .and_then(|n| n.child.take())
        {
            // Child::kill sends SIGKILL on Unix: the node gets no chance to hand over.
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// The last lines of every node's log, for an error message.
    pub fn log_tails(&self) -> String {
        let mut s = String::new();
        for id in self.ids() {
            let log = std::fs::read_to_string(self.log_path(id)).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            s += &format!("\n---- node {id} log (tail) ----\n");
            s += &lines[lines.len().saturating_sub(15)..].join("\n");
        }
        s
    }

    /// Waits until node `id` answers `PING`, failing early if its process exited.
    pub async fn wait_ready(&mut self, id: u32) -> Result<(), String> {
        let deadline = Instant::now() + READY_DEADLINE;
        let port = self.port(id);
        loop {
            if let Ok(mut c) = Conn::connect(port, Duration::from_secs(1)).await {
                if c.cmd(&["PING"], Duration::from_secs(2)).await.as_deref() == Ok("PONG") {
                    return Ok(());
                }
            }
            let exited = self
                .nodes
                .iter_mut()
                .find(|n| n.id == id)
                .and_then(|n| n.child.as_mut())
                .and_then(|c| c.try_wait().ok().flatten());
            if let Some(status) = exited {
                return Err(format!("node {id} exited ({status}){}", self.log_tails()));
            }
            if Instant::now() > deadline {
                return Err(format!("node {id} did not answer PING{}", self.log_tails()));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// `RAFT STATUS` of node `id`.
    pub async fn status(&self, id: u32) -> Result<NodeStatus, String> {
        let mut c = Conn::connect(self.port(id), Duration::from_secs(1)).await?;
        let text = c.cmd(&["RAFT", "STATUS"], Duration::from_secs(2)).await?;
        NodeStatus::parse(&text).ok_or_else(|| format!("unreadable RAFT STATUS: {text:?}"))
    }

    /// Waits until every running node follows one leader in one epoch and a write through that
    /// leader succeeds; returns the leader's id.
    pub async fn wait_leader(&self) -> Result<u32, String> {
        let deadline = Instant::now() + READY_DEADLINE;
        let running: Vec<u32> = self
            .nodes
            .iter()
            .filter(|n| n.child.is_some())
            .map(|n| n.id)
            .collect();
        loop {
            if let Some(leader) = self.agreed_leader(&running).await {
                let mut c = Conn::connect(self.port(leader), Duration::from_secs(1)).await?;
                let set = c.cmd(&["SET", "bench:ready", "1"], Duration::from_secs(10));
                if set.await.is_ok() {
                    return Ok(leader);
                }
            }
            if Instant::now() > deadline {
                return Err(format!("no agreed leader{}", self.log_tails()));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn agreed_leader(&self, running: &[u32]) -> Option<u32> {
        let mut seen = None;
        for id in running {
            let s = self.status(*id).await.ok()?;
            let this = (s.epoch, s.leader?);
            if *seen.get_or_insert(this) != this {
                return None;
            }
        }
        let (_, leader) = seen?;
        let s = self.status(leader).await.ok()?;
        (s.role == "leader").then_some(leader)
    }
}

impl Drop for ProcCluster {
    fn drop(&mut self) {
        for id in self.ids() {
            self.kill(id);
        }
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

/// `(connections, clients)` levels.
fn levels(size: Size) -> &'static [(usize, usize)] {
    size.pick(&[(1, 1), (50, 50), (100, 1000)], &[(1, 1), (4, 16)])
}

fn warmup(size: Size) -> Duration {
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
fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The values of a measured load.
fn load_values(o: &resp_load::Outcome) -> Value {
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
        let leader = cluster.wait_leader().await?;
        let load = Load {
            ports: match w.target {
                Target::Leader => vec![cluster.port(leader)],
                // Followers first, so that a single connection measures a follower.
                Target::All => cluster
                    .ids()
                    .into_iter()
                    .filter(|id| *id != leader)
                    .chain([leader])
                    .map(|id| cluster.port(id))
                    .collect(),
            },
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
    Ok(())
}

/// Whether `name` is an executable on `PATH`.
fn on_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// A `redis-server` on a temp dir that dies with this value.
struct Redis {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
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
        child,
        port,
        _dir: dir,
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
        let load = Load {
            ports: vec![redis.port],
            connections,
            clients,
            op: Op::Set,
            value_bytes: 256,
            keyspace: KEYSPACE,
            setup: Vec::new(),
            warmup: warmup(size),
            window: size.window(),
        };
        match resp_load::run(&load).await {
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
    for (clients, requests) in [(1, 3_000), (50, 60_000), (1000, 100_000)] {
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
fn redis_benchmark(tool: &Path, port: u16, clients: usize, requests: u32) -> Result<Value, String> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raft_status_is_parsed() {
        let text = "replica_id:2\r\ncluster_id:bench\r\nrole:follower\r\nepoch:7\r\n\
                    leader:leader is r3 at 127.0.0.1:7003\r\nhigh_watermark:10\r\n";
        let s = NodeStatus::parse(text).unwrap();
        assert_eq!(s.role, "follower");
        assert_eq!(s.epoch, 7);
        assert_eq!(s.leader, Some(3));
        let none = NodeStatus::parse("role:candidate\r\nepoch:8\r\nleader:none\r\n").unwrap();
        assert_eq!(none.leader, None);
        assert!(NodeStatus::parse("role:leader\r\n").is_none());
    }
}
