//! The test harness: clusters of real `raft-node` processes in a temp directory, a tiny RESP
//! client (`clients`), and polling with deadlines.

mod clients;

pub use self::clients::*;

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read};
use std::net::{TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_raft-node");

/// How long anything in these tests may take to become true.
const DEADLINE: Duration = Duration::from_secs(30);

/// Polls `f` until it is true: false if it is still false at the deadline.
pub fn poll(mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + DEADLINE;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// Polls `f` until it is true; panics naming `what` after the deadline.
pub fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + DEADLINE;
    while Instant::now() < deadline {
        if f() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("timed out waiting for {what}");
}

struct NodeProc {
    id: u32,
    client_port: u16,
    peer_port: u16,
    metrics_port: u16,
    child: Option<Child>,
}

/// A cluster of `raft-node run` processes sharing a temp directory.
pub struct Cluster {
    dir: tempfile::TempDir,
    nodes: Vec<NodeProc>,
    extra: String,
    password: Option<String>,
    /// Per-node replacements of the `[timers]` table's body.
    timers: std::collections::BTreeMap<u32, String>,
    /// Nodes `1..=voters` are the configured voters, the others observers.
    voters: u32,
    /// Observers are listed only in their own configuration (machines joining a running
    /// cluster whose nodes were configured without them).
    unlisted_observers: bool,
    /// Nodes started with `run --join` instead of a voter list: the client ports they ask.
    join_addrs: std::collections::BTreeMap<u32, Vec<String>>,
    /// Per-node environment variables (a shifted wall clock, for one).
    envs: std::collections::BTreeMap<u32, Vec<(String, String)>>,
}

/// `(client, peer, metrics)` ports for `n` nodes.
fn free_ports(n: usize) -> Vec<(u16, u16, u16)> {
    // Hold every socket until all are chosen so that no two nodes get the same port.
    let tcp: Vec<TcpListener> = (0..2 * n)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    let udp: Vec<UdpSocket> = (0..n)
        .map(|_| UdpSocket::bind("127.0.0.1:0").unwrap())
        .collect();
    let port = |t: &TcpListener| t.local_addr().unwrap().port();
    tcp.chunks(2)
        .zip(&udp)
        .map(|(t, u)| (port(&t[0]), u.local_addr().unwrap().port(), port(&t[1])))
        .collect()
}

impl Cluster {
    /// Writes certificates and configs for `n` voters; `extra` goes into every config (its
    /// top-level keys first, its tables last).
    pub fn prepare(n: u32, extra: &str) -> Cluster {
        Cluster::prepare_with_observers(n, 0, extra)
    }

    /// As [`Cluster::prepare`], with `observers` more nodes configured as observers (ids after
    /// the voters).
    pub fn prepare_with_observers(voters: u32, observers: u32, extra: &str) -> Cluster {
        let n = voters + observers;
        let dir = tempfile::tempdir().unwrap();
        let replicas: Vec<String> = (1..=n.max(3)).map(|i| i.to_string()).collect();
        let status = Command::new(BIN)
            .args(["certs", "--out"])
            .arg(dir.path().join("certs"))
            .args(["--replicas", &replicas.join(",")])
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "raft-node certs failed");
        let nodes = free_ports(n as usize)
            .into_iter()
            .zip(1..)
            .map(|((client_port, peer_port, metrics_port), id)| NodeProc {
                id,
                client_port,
                peer_port,
                metrics_port,
                child: None,
            })
            .collect();
        let password = extra
            .split("requirepass = \"")
            .nth(1)
            .and_then(|s| s.split('"').next())
            .map(str::to_string);
        let cluster = Cluster {
            dir,
            nodes,
            extra: extra.to_string(),
            password,
            timers: std::collections::BTreeMap::new(),
            voters,
            unlisted_observers: false,
            join_addrs: Default::default(),
            envs: Default::default(),
        };
        for n in &cluster.nodes {
            std::fs::write(cluster.config_path(n.id), cluster.config_text(n.id)).unwrap();
        }
        for id in 1..=voters {
            cluster.format(id);
        }
        cluster
    }

    /// The directory id founding voter `id` is formatted with.
    pub fn founding_directory(&self, id: u32) -> String {
        format!("0b7e6d1c-0000-4000-8000-{id:012x}")
    }

    /// `raft-node format --config nodeN.toml`: the founding voter's one-time act.
    pub fn format(&self, id: u32) {
        let out = Command::new(BIN)
            .args(["format", "--config"])
            .arg(self.config_path(id))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "raft-node format of node {id} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// As [`Cluster::prepare_with_observers`], but the voters' configurations do not name the
    /// observers, and each observer's names only the voters and itself: machines that join a
    /// cluster configured before them.
    pub fn prepare_with_joiners(voters: u32, joiners: u32, extra: &str) -> Cluster {
        let mut c = Cluster::prepare_with_observers(voters, joiners, extra);
        c.unlisted_observers = true;
        for n in &c.nodes {
            std::fs::write(c.config_path(n.id), c.config_text(n.id)).unwrap();
        }
        c
    }

    /// Prepares and starts `n` voters and waits until each answers PING.
    pub fn start(n: u32, extra: &str) -> Cluster {
        let mut c = Cluster::prepare(n, extra);
        c.restart_all();
        c
    }

    /// The cluster's directory (certificates in `certs/`, configs, data and logs).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    fn config_path(&self, id: u32) -> PathBuf {
        self.dir.path().join(format!("node{id}.toml"))
    }

    fn log_path(&self, id: u32) -> PathBuf {
        self.dir.path().join(format!("node{id}.log"))
    }

    /// Makes node `id` start with `run --join` through the client ports `ports` (a closed
    /// port too, to see it fall back): its configuration lists no voters, only its own
    /// listen addresses (rewrites its config file; takes effect at its next start).
    pub fn join_through(&mut self, id: u32, ports: &[u16]) {
        self.join_addrs.insert(id, loopback(ports));
        std::fs::write(self.config_path(id), self.config_text(id)).unwrap();
    }

    /// Makes node `id` start with `run --join` through the client ports `ports` on its own,
    /// unchanged configuration file (a founder's file, kept for its rejoin after a disk loss).
    pub fn rejoin_with_own_file(&mut self, id: u32, ports: &[u16]) {
        self.join_addrs.insert(id, loopback(ports));
    }

    /// As [`Cluster::join_through`], with the `--join` addresses as given (`N@host:port`
    /// names the replica whose TLS certificate the joiner expects there).
    pub fn join_through_addrs(&mut self, id: u32, addrs: &[String]) {
        self.join_addrs.insert(id, addrs.to_vec());
        std::fs::write(self.config_path(id), self.config_text(id)).unwrap();
    }

    /// Replaces the body of node `id`'s `[timers]` table (rewrites its config file; takes
    /// effect at its next start).
    pub fn set_timers(&mut self, id: u32, timers: &str) {
        self.timers.insert(id, timers.to_string());
        std::fs::write(self.config_path(id), self.config_text(id)).unwrap();
    }

    /// The config file of node `id`.
    pub fn config_text(&self, id: u32) -> String {
        let timers = self.timers.get(&id).map_or(
            // Generous for a loaded 2-core machine: a follower starved for a second must not
            // start an election or make the leader resign.
            "election_timeout_ms = 500\nfetch_timeout_ms = 2000\nfetch_max_wait_ms = 250\n\
             request_timeout_ms = 1000\nwrite_timeout_ms = 5000\nshutdown_timeout_ms = 1000\n",
            String::as_str,
        );
        let metrics = self.metrics_port(id);
        let joining = self.join_addrs.contains_key(&id);
        let listen = if joining {
            format!(
                "peer = \"127.0.0.1:{}\"\nclient = \"127.0.0.1:{}\"\n",
                self.peer_port(id),
                self.port(id)
            )
        } else {
            String::new()
        };
        let mut s = format!(
            "cluster_id = \"it\"\nreplica_id = {id}\ndata_dir = \"data{id}\"\n\n\
             [listen]\n{listen}metrics = \"127.0.0.1:{metrics}\"\n\n[tls]\n\
             ca_cert = \"certs/ca.pem\"\ncert = \"certs/node-{id}.pem\"\nkey = \"certs/node-{id}.key\"\n\n\
             [timers]\n{timers}"
        );
        for n in &self.nodes {
            if joining || (self.unlisted_observers && n.id > self.voters && n.id != id) {
                continue;
            }
            let table = if n.id <= self.voters {
                "voters"
            } else {
                "observers"
            };
            s += &format!(
                "\n[[{table}]]\nid = {}\npeer = \"127.0.0.1:{}\"\nclient = \"127.0.0.1:{}\"\n",
                n.id, n.peer_port, n.client_port
            );
            if n.id <= self.voters {
                s += &format!("directory = \"{}\"\n", self.founding_directory(n.id));
            }
        }
        // Lines of `extra` before its first table header are top-level keys.
        let (top, tables) = match self
            .extra
            .find("\n[")
            .or(self.extra.starts_with('[').then_some(0))
        {
            Some(i) => self.extra.split_at(i),
            None => (self.extra.as_str(), ""),
        };
        format!("{top}\n{s}\n{tables}")
    }

    /// Starts node `id` (from its next start on) with the environment variable `key=value`.
    pub fn set_env(&mut self, id: u32, key: &str, value: &str) {
        self.envs
            .entry(id)
            .or_default()
            .push((key.to_string(), value.to_string()));
    }

    fn spawn(&self, id: u32, config: &Path, log: &Path, join: Option<&[String]>) -> Child {
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .unwrap();
        let mut cmd = Command::new(BIN);
        cmd.args(["run", "--config"]).arg(config);
        if let Some(addrs) = join {
            cmd.arg("--join").arg(addrs.join(","));
        }
        for (k, v) in self.envs.get(&id).into_iter().flatten() {
            cmd.env(k, v);
        }
        cmd.env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap()
    }

    /// Starts every node that is not running, without waiting for anything.
    pub fn launch_all(&mut self) {
        for i in 0..self.nodes.len() {
            if self.nodes[i].child.is_none() {
                let id = self.nodes[i].id;
                let join = self.join_addrs.get(&id).map(Vec::as_slice);
                let child = self.spawn(id, &self.config_path(id), &self.log_path(id), join);
                self.nodes[i].child = Some(child);
            }
        }
    }

    /// Starts every node that is not running and waits until each answers PING.
    pub fn restart_all(&mut self) {
        self.launch_all();
        for n in &self.nodes {
            self.wait_for_ping(n.id, n.client_port);
        }
    }

    /// Waits until node `id` answers PING on `port`; on the deadline, fails with the end of
    /// its log (why it did not start, if it exited).
    fn wait_for_ping(&self, id: u32, port: u16) {
        let answered = poll(|| {
            Client::connect(port)
                .and_then(|mut c| c.try_cmd(&["PING"]))
                .is_ok_and(|v| v == Value::Simple("PONG".into()))
        });
        if !answered {
            let log = self.log_text(id);
            let tail: Vec<&str> = log.lines().rev().take(30).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            panic!(
                "timed out waiting for node {id} to answer PING; its log ends:\n{}",
                tail.join("\n")
            );
        }
    }

    /// SIGKILLs every node.
    pub fn kill_all(&mut self) {
        for n in &mut self.nodes {
            if let Some(mut c) = n.child.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }

    /// Runs node `id` with config `text` until it exits (or the deadline passes, then it is
    /// killed and counted as started): `(exited successfully or kept running, stderr+stdout)`.
    pub fn run_to_exit_with(&self, id: u32, text: &str) -> (bool, String) {
        let config = self.dir.path().join(format!("alt{id}.toml"));
        std::fs::write(&config, text).unwrap();
        let log = self.dir.path().join(format!("alt{id}.log"));
        let _ = std::fs::remove_file(&log);
        let mut child = self.spawn(id, &config, &log, None);
        let deadline = Instant::now() + DEADLINE;
        let ok = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status.success();
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                break true;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        (ok, std::fs::read_to_string(&log).unwrap_or_default())
    }

    pub fn ids(&self) -> Vec<u32> {
        self.nodes.iter().map(|n| n.id).collect()
    }

    pub fn port(&self, id: u32) -> u16 {
        self.nodes.iter().find(|n| n.id == id).unwrap().client_port
    }

    /// What node `id` has logged so far.
    pub fn log_text(&self, id: u32) -> String {
        std::fs::read_to_string(self.log_path(id)).unwrap_or_default()
    }

    /// The UDP port node `id`'s peer transport listens on.
    pub fn peer_port(&self, id: u32) -> u16 {
        self.nodes.iter().find(|n| n.id == id).unwrap().peer_port
    }

    /// The port of node `id`'s metrics endpoint.
    pub fn metrics_port(&self, id: u32) -> u16 {
        self.nodes.iter().find(|n| n.id == id).unwrap().metrics_port
    }

    /// A client of node `id`, authenticated if the cluster has a password.
    pub fn client(&self, id: u32) -> Client {
        let mut c = self.client_unauthenticated(id);
        if let Some(p) = &self.password {
            assert_eq!(c.cmd(&["AUTH", p]), Value::ok());
        }
        c
    }

    pub fn client_unauthenticated(&self, id: u32) -> Client {
        Client::connect(self.port(id)).unwrap()
    }

    /// Waits until some node reports itself leader and returns its id.
    pub fn wait_for_leader(&self) -> u32 {
        let mut leader = None;
        wait_until("a leader", || {
            leader = self.ids().into_iter().find(|id| {
                let status = Client::connect(self.port(*id)).and_then(|mut c| {
                    if let Some(p) = &self.password {
                        c.try_cmd(&["AUTH", p])?;
                    }
                    c.try_cmd(&["RAFT", "STATUS"])
                });
                status.is_ok_and(|s| s.text().contains("role:leader"))
            });
            leader.is_some()
        });
        leader.unwrap()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.kill_all();
        if std::thread::panicking() {
            for n in &self.nodes {
                let mut log = String::new();
                if let Ok(mut f) = File::open(self.log_path(n.id)) {
                    let _ = f.read_to_string(&mut log);
                }
                eprintln!("---- node {} log ----\n{log}", n.id);
            }
        }
    }
}

impl Cluster {
    /// Sends SIGTERM to node `id` and waits (up to the deadline) for it to exit; `Some(code)`
    /// is its exit code, `None` a death by signal or no exit in time (then it is killed).
    pub fn terminate(&mut self, id: u32) -> Option<i32> {
        let n = self.nodes.iter_mut().find(|n| n.id == id)?;
        let mut child = n.child.take()?;
        let sent = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success(), "kill -TERM failed");
        let deadline = Instant::now() + DEADLINE;
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status.code();
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Node `id`'s `RAFT STATUS` as field/value pairs, or `None` if it does not answer.
    pub fn status(&self, id: u32) -> Option<std::collections::BTreeMap<String, String>> {
        let mut c = Client::connect(self.port(id)).ok()?;
        if let Some(p) = &self.password {
            c.try_cmd(&["AUTH", p]).ok()?;
        }
        let text = match c.try_cmd(&["RAFT", "STATUS"]).ok()? {
            Value::Bulk(b) => String::from_utf8_lossy(&b).into_owned(),
            _ => return None,
        };
        Some(
            text.lines()
                .filter_map(|l| l.split_once(':'))
                .map(|(k, v)| (k.to_string(), v.trim().to_string()))
                .collect(),
        )
    }

    /// A numeric field of node `id`'s `RAFT STATUS` (panics if it does not answer).
    pub fn status_u64(&self, id: u32, field: &str) -> u64 {
        let st = self
            .status(id)
            .unwrap_or_else(|| panic!("node {id} does not answer RAFT STATUS"));
        st.get(field)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no numeric {field} in node {id}'s status: {st:?}"))
    }

    /// A connection of the `redis` client crate to node `id`.
    pub fn redis(&self, id: u32) -> redis::Connection {
        redis_connect(self.port(id))
    }

    /// SIGKILLs node `id`.
    /// Freezes (`SIGSTOP`) or thaws (`SIGCONT`) node `id`: a process pause, as a GC or a
    /// suspended VM gives; its sockets keep receiving.
    pub fn signal(&self, id: u32, signal: &str) {
        let pid = self
            .nodes
            .iter()
            .find(|n| n.id == id)
            .and_then(|n| n.child.as_ref())
            .map(Child::id)
            .expect("the node runs");
        let status = Command::new("kill")
            .args([signal, &pid.to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill {signal} {pid}");
    }

    /// Waits until a write through every node succeeds, leaving no key behind: just after an
    /// election a write may be refused with TRYAGAIN (nothing applied) while the cluster
    /// settles.
    pub fn wait_for_writes_everywhere(&self) {
        for id in self.ids() {
            let mut c = self.client(id);
            wait_until(&format!("a write through node {id}"), || {
                c.cmd(&["SET", "settle", "1"]) == Value::ok()
            });
            assert_eq!(c.cmd(&["DEL", "settle"]), Value::Int(1));
        }
    }

    /// Deletes node `id`'s data directory (the node must be stopped): a replaced disk.
    pub fn wipe(&self, id: u32) {
        let data = self.dir.path().join(format!("data{id}"));
        std::fs::remove_dir_all(&data).unwrap();
    }

    /// Starts node `id` if it is not running and waits until it answers PING.
    pub fn start_one(&mut self, id: u32) {
        let i = self
            .nodes
            .iter()
            .position(|n| n.id == id)
            .expect("known node");
        if self.nodes[i].child.is_none() {
            let join = self.join_addrs.get(&id).map(Vec::as_slice);
            let child = self.spawn(id, &self.config_path(id), &self.log_path(id), join);
            self.nodes[i].child = Some(child);
        }
        let port = self.nodes[i].client_port;
        self.wait_for_ping(id, port);
    }

    pub fn kill(&mut self, id: u32) {
        if let Some(n) = self.nodes.iter_mut().find(|n| n.id == id) {
            if let Some(mut c) = n.child.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

/// `127.0.0.1:<port>` for each port.
fn loopback(ports: &[u16]) -> Vec<String> {
    ports.iter().map(|p| format!("127.0.0.1:{p}")).collect()
}

/// A base port for `raft-node dev` whose nine ports (`base+1..=3` and `base+201..=203` TCP,
/// `base+101..=103` UDP) are free right now.
pub fn free_base_port() -> u16 {
    free_base_port_for(3)
}

/// As [`free_base_port`], for a dev cluster of `nodes` nodes.
pub fn free_base_port_for(nodes: u16) -> u16 {
    let seed = std::process::id() as u64 * 7919
        + std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos() as u64;
    for i in 0..500u64 {
        // Below Linux's ephemeral range (32768..), so that no node of another test gets one of
        // these ports between this check and the dev cluster's bind.
        let base = 10_000 + ((seed + i * 613) % 22_000) as u16;
        let tcp: Vec<_> = (1..=nodes)
            .chain((1..=nodes).map(|k| 200 + k))
            .map(|k| TcpListener::bind(("127.0.0.1", base + k)))
            .collect();
        let udp: Vec<_> = (1..=nodes)
            .map(|k| UdpSocket::bind(("127.0.0.1", base + 100 + k)))
            .collect();
        if tcp.iter().all(Result::is_ok) && udp.iter().all(Result::is_ok) {
            return base;
        }
    }
    panic!("no free base port found");
}

/// A `raft-node dev` process.
pub struct Dev {
    child: Option<Child>,
    lines: std::sync::mpsc::Receiver<String>,
    seen: Vec<String>,
    pub leader_port: u16,
}

impl Dev {
    /// Starts `raft-node dev` and waits until it has printed its whole banner.
    pub fn start(dir: &Path, base: u16) -> Dev {
        Dev::start_with(dir, base, &[])
    }

    /// As [`Dev::start`], with more `raft-node dev` arguments.
    pub fn start_with(dir: &Path, base: u16, args: &[&str]) -> Dev {
        let mut child = Command::new(BIN)
            .args(["dev", "--dir"])
            .arg(dir)
            .args(["--base-port", &base.to_string()])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        let tx2 = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        // Warnings and a start failure's reason, shown with the output when a test fails.
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx2.send(format!("stderr: {line}")).is_err() {
                    break;
                }
            }
        });
        let mut dev = Dev {
            child: Some(child),
            lines,
            seen: Vec::new(),
            leader_port: 0,
        };
        let deadline = Instant::now() + DEADLINE;
        // The banner ends with the Ctrl-C line, after the leader and the redis-cli example.
        while !dev.seen.last().is_some_and(|l| l.starts_with("Ctrl-C")) {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = dev
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no leader line from dev:\n{}", dev.output()));
            if let Some(rest) = line.strip_prefix("leader: node ") {
                dev.leader_port = rest.rsplit(':').next().unwrap().parse().unwrap();
            }
            dev.seen.push(line);
        }
        dev
    }

    /// Everything printed so far.
    pub fn output(&mut self) -> String {
        while let Ok(line) = self.lines.try_recv() {
            self.seen.push(line);
        }
        self.seen.join("\n")
    }

    /// Sends SIGTERM and waits for the exit: true if it exited with status 0.
    pub fn terminate(&mut self) -> bool {
        let Some(mut child) = self.child.take() else {
            return false;
        };
        let status = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let deadline = Instant::now() + DEADLINE;
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status.success();
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Dev {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
