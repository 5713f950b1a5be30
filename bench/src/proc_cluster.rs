//! Real `raft-node` processes on loopback for the suites that run them: certificates, configs,
//! ports, start, SIGKILL, restart, status, and waits that fail with the nodes' log tails.
//! Nodes `1..=voters` are the configured voters; joiners (nodes above them) are machines that
//! join later: their own configuration lists the voters and themselves, the voters'
//! configurations do not name them (the peers accept any replica the cluster CA certified).

use std::fs::OpenOptions;
use std::net::{TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::resp_load::Conn;

/// A child process and the temp directory it works in; dropping it kills the process (and
/// then removes the directory).
pub struct Spawned {
    /// The process.
    pub child: Child,
    /// Its directory.
    pub dir: tempfile::TempDir,
}

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The configured voters: nodes 1 to 3.
const VOTERS: u32 = 3;

/// How long a cluster may take to start, elect, or answer.
pub const READY_DEADLINE: Duration = Duration::from_secs(60);

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
    /// Reads the fields of a `RAFT STATUS` reply.
    pub fn parse(text: &str) -> Option<NodeStatus> {
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

/// Three `raft-node run` voters, and the joiners prepared for later, sharing a temp directory
/// (certificates, configs, data, logs). Dropping it kills every process.
pub struct ProcCluster {
    dir: tempfile::TempDir,
    bin: PathBuf,
    nodes: Vec<ProcNode>,
}

/// Free TCP and UDP ports on loopback, all held until every one is chosen.
pub fn free_ports(n: usize) -> Result<Vec<(u16, u16)>, String> {
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
        ProcCluster::start_with_joiners(bin, storage, timers, 0).await
    }

    /// As [`ProcCluster::start`], with `joiners` more machines prepared (certificate, ports,
    /// configuration) but not started: nodes `4..=3 + joiners`, for [`ProcCluster::spawn`].
    pub async fn start_with_joiners(
        bin: &Path,
        storage: &str,
        timers: Timers,
        joiners: u32,
    ) -> Result<ProcCluster, String> {
        let total = VOTERS + joiners;
        let dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
        let replicas: Vec<String> = (1..=total).map(|i| i.to_string()).collect();
        let certs = Command::new(bin)
            .args(["certs", "--out"])
            .arg(dir.path().join("certs"))
            .args(["--replicas", &replicas.join(",")])
            .stdout(Stdio::null())
            .status()
            .map_err(|e| format!("{}: {e}", bin.display()))?;
        if !certs.success() {
            return Err(format!("`raft-node certs` failed ({certs})"));
        }
        let nodes: Vec<ProcNode> = free_ports(total as usize)?
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
        for id in 1..=VOTERS {
            // Each founding voter's one-time format, before its first start.
            let out = Command::new(bin)
                .args(["format", "--config"])
                .arg(cluster.config_path(id))
                .output()
                .map_err(|e| format!("{}: {e}", bin.display()))?;
            if !out.status.success() {
                return Err(format!(
                    "`raft-node format` of node {id} failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
        }
        for id in 1..=VOTERS {
            cluster.spawn(id)?;
        }
        for id in 1..=VOTERS {
            cluster.wait_ready(id).await?;
        }
        Ok(cluster)
    }

    /// Removes node `id`'s data directory (its process must not be running): a lost disk.
    pub fn wipe(&self, id: u32) -> Result<(), String> {
        let data = self.dir.path().join(format!("data{id}"));
        std::fs::remove_dir_all(&data).map_err(|e| format!("wipe {}: {e}", data.display()))
    }

    /// Sends one command to node `id` on a fresh connection: its reply, or the error reply or
    /// failure as text.
    pub async fn cmd(&self, id: u32, args: &[&str]) -> Result<String, String> {
        let mut c = Conn::connect(self.port(id), Duration::from_secs(1)).await?;
        c.cmd(args, Duration::from_secs(30)).await
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
        // A joiner's configuration names the voters and itself; the voters' name no joiner.
        for n in self.nodes.iter().filter(|n| n.id <= VOTERS || n.id == id) {
            let table = if n.id <= VOTERS {
                "voters"
            } else {
                "observers"
            };
            s += &format!(
                "\n[[{table}]]\nid = {}\npeer = \"127.0.0.1:{}\"\nclient = \"127.0.0.1:{}\"\n",
                n.id, n.peer_port, n.client_port
            );
            if n.id <= VOTERS {
                // The founding voters' directory ids, the same in every configuration.
                s += &format!("directory = \"0b7e6d1c-0000-4000-8000-{:012x}\"\n", n.id);
            }
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

    /// The operating-system process id of node `id`, while it runs.
    pub fn pid(&self, id: u32) -> Option<u32> {
        let node = self.nodes.iter().find(|n| n.id == id)?;
        node.child.as_ref().map(Child::id)
    }

    /// Starts node `id` with `run --join` through node `via`'s client port: the documented way
    /// back for a voter whose disk was lost (it comes up as an observer, to be added again).
    pub fn spawn_joining(&mut self, id: u32, via: u32) -> Result<(), String> {
        let join = format!("127.0.0.1:{}", self.port(via));
        self.spawn_with(id, &["--join", &join])
    }

    /// Starts node `id` (its process must not be running).
    pub fn spawn(&mut self, id: u32) -> Result<(), String> {
        self.spawn_with(id, &[])
    }

    fn spawn_with(&mut self, id: u32, extra: &[&str]) -> Result<(), String> {
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path(id))
            .map_err(|e| format!("node log: {e}"))?;
        let log2 = log.try_clone().map_err(|e| format!("node log: {e}"))?;
        let child = Command::new(&self.bin)
            .args(["run", "--config"])
            .arg(self.config_path(id))
            .args(extra)
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
