//! The RESP server: accepts client connections, parses pipelined requests, and runs each one
//! against the node: writes through the connection's write session (`Server::run_writes`),
//! reads after [`Server::read_barrier`].
//!
//! Pipelining: every complete request in the input buffer (up to [`BATCH_MAX`]) is taken at
//! once. Consecutive writes are proposed together, as one ordered batch (forwarded as one when
//! this node does not lead), and their replies are sent in request order; a read after writes
//! waits for them, and one read barrier serves every read of a batch that follows the same
//! writes. Each connection has one `WriteSession`, so its batches take effect in the order
//! sent even when an earlier one's outcome was unknown.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use raft_core::driver::{Node, WriteError, WriteSession};
use raft_core::protocol::{ProposeError, Status, TransferError};
use raft_core::{ReplicaId, Role};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio_rustls::TlsAcceptor;

use crate::commands::{AdminOp, Conn, Context, Plan, ReadOp};
use crate::config::{NodeConfig, ReadMode};
use crate::kv::{self, Kv};
use crate::metrics::NodeMetrics;
use crate::multi;
use crate::resp::{Parser, Proto, Reply};

/// How long a client may take to complete its TLS handshake.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Most requests taken from one connection's buffer before replies are written.
pub const BATCH_MAX: usize = 1024;

/// Why a write failed, before it is turned into a RESP error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteFailure {
    /// No leader is known (an election is under way).
    NoLeader,
    /// Another replica leads.
    NotLeader(ReplicaId),
    /// The leader has not committed in its epoch yet.
    NotReady,
    /// The leader is handing leadership to this replica.
    Transferring(ReplicaId),
    /// Too many proposals pending.
    QueueFull,
    /// The command is larger than a record may be.
    TooLarge {
        /// Its encoded length.
        len: usize,
        /// The limit.
        max: u32,
    },
    /// The record was replaced in a leader change: it will never be applied.
    Lost,
    /// The leader could not be reached and the write was never sent to it.
    LeaderUnreachable(ReplicaId),
    /// Not confirmed in time: it may or may not be applied.
    Timeout(Duration),
    /// The node stopped before it was refused: nothing was proposed.
    Stopping,
    /// It may or may not be applied, for the reason given.
    Unknown(String),
}

/// The reply to `RAFT TRANSFER`.
fn transfer_reply(result: Result<(), TransferError>) -> Reply {
    let msg = match result {
        Ok(()) => return Reply::ok(),
        Err(TransferError::NotLeader {
            leader: Some(l), ..
        }) => format!("ERR not the leader; leader is r{}", l.0),
        Err(TransferError::NotLeader { leader: None, .. }) => {
            "TRYAGAIN no leader is known (election in progress)".into()
        }
        Err(TransferError::NotAVoter(id)) => format!("ERR r{} is not another voter", id.0),
        Err(TransferError::InProgress { to }) => {
            format!("TRYAGAIN a transfer to r{} is in progress", to.0)
        }
        Err(TransferError::Timeout) => {
            "TRYAGAIN the target did not catch up in time; the leader carries on".into()
        }
        Err(e) => format!("TRYAGAIN {e}"),
    };
    Reply::Error(msg)
}

impl WriteFailure {
    /// Nothing was applied and retrying here may succeed soon.
    fn retry_here(&self) -> bool {
        matches!(
            self,
            WriteFailure::NoLeader
                | WriteFailure::NotReady
                | WriteFailure::Transferring(_)
                | WriteFailure::QueueFull
                | WriteFailure::Lost
                | WriteFailure::LeaderUnreachable(_)
        )
    }

    fn from_write_error(e: WriteError) -> WriteFailure {
        match e {
            WriteError::Refused(p) => match p {
                ProposeError::NotLeader {
                    leader: Some(l), ..
                } => WriteFailure::NotLeader(l),
                ProposeError::NotLeader { leader: None, .. } => WriteFailure::NoLeader,
                ProposeError::NotReady => WriteFailure::NotReady,
                ProposeError::Transferring { to } => WriteFailure::Transferring(to),
                ProposeError::QueueFull { .. } => WriteFailure::QueueFull,
                ProposeError::TooLarge { len, max } => WriteFailure::TooLarge { len, max },
                _ => WriteFailure::Stopping,
            },
            WriteError::Lost(_) => WriteFailure::Lost,
            WriteError::NotSent { leader, .. } => WriteFailure::LeaderUnreachable(leader),
            WriteError::Unknown(why) => WriteFailure::Unknown(why.to_string()),
            // A future kind of error: not known to be a refusal, so not reported as one.
            other => WriteFailure::Unknown(other.to_string()),
        }
    }
}

/// Everything a connection needs, shared by all of them.
pub struct Server {
    node: Node,
    kv: Arc<Kv>,
    cfg: Arc<NodeConfig>,
    started: std::time::Instant,
    client_addr: SocketAddr,
    connections: Arc<Semaphore>,
    next_conn: AtomicU64,
    /// Requests served since start (`INFO stats` `total_commands_processed`).
    commands_processed: AtomicU64,
    metrics: Arc<NodeMetrics>,
}

/// Counts one in-flight operation on a gauge for as long as it lives (also when the future
/// holding it is dropped, e.g. by a timeout).
struct InFlight<'a>(&'a prometheus_client::metrics::gauge::Gauge);

impl<'a> InFlight<'a> {
    fn new(gauge: &'a prometheus_client::metrics::gauge::Gauge) -> InFlight<'a> {
        gauge.inc();
        InFlight(gauge)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Wall-clock milliseconds since the Unix epoch (0 if the clock is before 1970).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A running accept loop; dropping the sender of `stop` ends it and every connection.
pub struct ServerHandle {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl ServerHandle {
    /// Stops accepting, closes every connection after its current batch, and waits.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

impl Server {
    /// A server for `node` and its state machine, keeping `metrics` up to date.
    pub fn new(
        node: Node,
        kv: Arc<Kv>,
        cfg: Arc<NodeConfig>,
        client_addr: SocketAddr,
        metrics: Arc<NodeMetrics>,
    ) -> Server {
        Server {
            node,
            kv,
            metrics,
            connections: Arc::new(Semaphore::new(cfg.client.connections_max)),
            cfg,
            started: std::time::Instant::now(),
            client_addr,
            next_conn: AtomicU64::new(1),
            commands_processed: AtomicU64::new(0),
        }
    }

    /// Spawns the accept loop on `listener`; with `tls`, every connection must complete a TLS
    /// handshake first.
    pub fn spawn(self: Arc<Self>, listener: TcpListener, tls: Option<TlsAcceptor>) -> ServerHandle {
        let (stop, stop_rx) = watch::channel(false);
        let task = tokio::spawn(self.accept_loop(listener, tls, stop_rx));
        ServerHandle { stop, task }
    }

    async fn accept_loop(
        self: Arc<Self>,
        listener: TcpListener,
        tls: Option<TlsAcceptor>,
        mut stop: watch::Receiver<bool>,
    ) {
        let mut conns = tokio::task::JoinSet::new();
        loop {
            tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((stream, peer)) => {
                        let _ = stream.set_nodelay(true);
                        let server = self.clone();
                        let stop = stop.clone();
                        let tls = tls.clone();
                        conns.spawn(async move {
                            let Some(tls) = tls else {
                                return server.serve(stream, stop).await;
                            };
                            // A client that does not speak TLS (or too slowly) is dropped here:
                            // nothing it sent reaches the RESP parser.
                            match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, tls.accept(stream)).await {
                                Ok(Ok(stream)) => server.serve(stream, stop).await,
                                Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                                Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                            }
                        });
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                },
                Some(_) = conns.join_next(), if !conns.is_empty() => {}
                _ = stop.changed() => break,
            }
        }
        drop(listener);
        while conns.join_next().await.is_some() {}
    }

    async fn serve<S: AsyncRead + AsyncWrite + Unpin>(
        &self,
        mut stream: S,
        mut stop: watch::Receiver<bool>,
    ) {
        let Ok(_permit) = self.connections.clone().try_acquire_owned() else {
            let r = Reply::err("max number of clients reached").to_bytes();
            let _ = stream.write_all(&r).await;
            return;
        };
        let mut conn = Conn {
            id: self.next_conn.fetch_add(1, Ordering::Relaxed),
            authed: self.cfg.client.requirepass.is_none(),
            read_mode: self.cfg.client.read_mode,
            name: None,
            proto: Proto::Resp2,
            multi: None,
            multi_failed: false,
            watched: Vec::new(),
        };
        // The connection's writes take effect in the order sent, also across pipelines whose
        // outcome was unknown (see `WriteSession`).
        let mut session = WriteSession::new();
        let mut parser = Parser::new(self.cfg.client.limits);
        let mut input = BytesMut::with_capacity(16 << 10);
        let mut out = BytesMut::with_capacity(16 << 10);
        loop {
            let mut batch = Vec::new();
            let mut fatal = None;
            while batch.len() < BATCH_MAX {
                match parser.next(&mut input) {
                    Ok(Some(cmd)) => batch.push(cmd),
                    Ok(None) => break,
                    Err(e) => {
                        fatal = Some(e);
                        break;
                    }
                }
            }
            if batch.is_empty() && fatal.is_none() {
                tokio::select! {
                    read = stream.read_buf(&mut input) => match read {
                        Ok(0) | Err(_) => return,
                        Ok(_) => continue,
                    },
                    _ = stop.changed() => return,
                }
            }
            let mut close = self
                .run_batch(&mut conn, &mut session, batch, &mut out)
                .await;
            if let Some(e) = fatal {
                tracing::debug!(conn = conn.id, error = %e, "closing a connection");
                Reply::err(e).encode(&mut out);
                close = true;
            }
            if stream.write_all(&out).await.is_err() {
                return;
            }
            out.clear();
            if close {
                let _ = stream.shutdown().await;
                return;
            }
        }
    }

    /// Runs a batch of requests and appends their replies in order; true to close afterwards.
    async fn run_batch(
        &self,
        conn: &mut Conn,
        session: &mut WriteSession,
        batch: Vec<Vec<Bytes>>,
        out: &mut BytesMut,
    ) -> bool {
        let mut writes = Vec::new();
        let mut barrier_passed = false;
        self.commands_processed
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        for args in batch {
            let ctx = Context {
                requirepass: self.cfg.client.requirepass.as_deref(),
                now_ms: now_ms(),
                lease_reads: self.cfg.lease.enabled,
            };
            let plan = multi::plan(conn, &ctx, &args);
            if let Plan::Write(cmd) = plan {
                writes.push(cmd);
                continue;
            }
            if !writes.is_empty() {
                self.run_writes(session, conn.proto, std::mem::take(&mut writes), out)
                    .await;
                barrier_passed = false;
            }
            match plan {
                Plan::Write(_) => {}
                Plan::Reply(r) => r.encode_as(out, conn.proto),
                Plan::Close(r) => {
                    r.encode_as(out, conn.proto);
                    return true;
                }
                Plan::Read(ReadOp::Watch(keys)) => {
                    // The offset after the barrier covers every write acknowledged before this
                    // WATCH: only later writes abort the transaction.
                    if !barrier_passed {
                        match self.read_barrier(conn.read_mode).await {
                            Ok(()) => barrier_passed = true,
                            Err(r) => {
                                r.encode_as(out, conn.proto);
                                continue;
                            }
                        }
                    }
                    let at = self.kv.applied().0;
                    conn.watch(keys, at).encode_as(out, conn.proto);
                }
                Plan::Read(op) => {
                    let started = std::time::Instant::now();
                    let _in_flight = InFlight::new(&self.metrics.reads_in_flight);
                    if !barrier_passed {
                        match self.read_barrier(conn.read_mode).await {
                            Ok(()) => barrier_passed = true,
                            Err(r) => {
                                r.encode_as(out, conn.proto);
                                continue;
                            }
                        }
                    }
                    self.read(op).encode_as(out, conn.proto);
                    self.metrics.observe_read(conn.read_mode, started.elapsed());
                }
                Plan::Admin(op) => {
                    let reply = self.admin(conn, op).await;
                    reply.encode_as(out, conn.proto);
                }
            }
        }
        if !writes.is_empty() {
            self.run_writes(session, conn.proto, writes, out).await;
        }
        false
    }

    /// Proposes consecutive writes of one connection together, in order, and appends their
    /// replies in order.
    ///
    /// They reach the leader as one ordered batch (also through a follower), so they apply in
    /// the order sent. A refusal refuses every later write of the batch, unproposed; when the
    /// refused suffix is retriable it is retried as a batch until the deadline, so a retry can
    /// never land after a later write of the same pipeline. Nothing else is retried: an
    /// unknown outcome is reported as such.
    async fn run_writes(
        &self,
        session: &mut WriteSession,
        proto: Proto,
        cmds: Vec<kv::Command>,
        out: &mut BytesMut,
    ) {
        let ts = now_ms();
        let payloads: Vec<Bytes> = cmds.iter().map(|c| kv::encode(ts, c)).collect();
        let timeout = self.cfg.timers.write_timeout;
        let deadline = tokio::time::Instant::now() + timeout;
        let mut backoff = Duration::from_millis(10);
        let mut next = 0;
        while next < payloads.len() {
            let attempt =
                tokio::time::timeout_at(deadline, self.propose_batch(session, &payloads[next..]));
            let results = match attempt.await {
                Ok(results) => results,
                Err(_) => {
                    // Submitted and not answered in time: every write left is unknown.
                    for _ in next..payloads.len() {
                        self.write_reply(Err(WriteFailure::Timeout(timeout)))
                            .encode_as(out, proto);
                    }
                    return;
                }
            };
            // Replies up to the start of a retriable refused suffix are final.
            let retry_from = results
                .iter()
                .rposition(|r| !matches!(r, Err(f) if f.retry_here()))
                .map_or(0, |i| i + 1);
            let retry =
                retry_from < results.len() && tokio::time::Instant::now() + backoff < deadline;
            let settled = if retry { retry_from } else { results.len() };
            for r in results.into_iter().take(settled) {
                self.write_reply(r).encode_as(out, proto);
            }
            next += settled;
            if retry {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_millis(200));
            }
        }
    }

    /// One attempt at a batch of one connection's writes, in order.
    async fn propose_batch(
        &self,
        session: &mut WriteSession,
        payloads: &[Bytes],
    ) -> Vec<Result<Bytes, WriteFailure>> {
        let started = std::time::Instant::now();
        let _in_flight = InFlight::new(&self.metrics.proposals_in_flight);
        let results = session.write_batch(&self.node, payloads.to_vec()).await;
        results
            .into_iter()
            .map(|r| match r {
                Ok(c) => {
                    self.metrics.observe_commit(started.elapsed());
                    Ok(c.response)
                }
                Err(e) => Err(WriteFailure::from_write_error(e)),
            })
            .collect()
    }

    fn leader_text(&self, leader: ReplicaId) -> String {
        match self.cfg.client_addr_of(leader) {
            Some(addr) => format!("leader is r{} at {addr}", leader.0),
            None => format!("leader is r{}", leader.0),
        }
    }

    fn write_reply(&self, r: Result<Bytes, WriteFailure>) -> Reply {
        let f = match r {
            Ok(bytes) => return Reply::Raw(bytes),
            Err(f) => f,
        };
        let msg = match f {
            WriteFailure::NotLeader(l) => format!("TRYAGAIN not leader; {}", self.leader_text(l)),
            WriteFailure::NoLeader => "TRYAGAIN no leader is known (election in progress)".into(),
            WriteFailure::NotReady => {
                "TRYAGAIN the leader has not committed in its epoch yet".into()
            }
            WriteFailure::Transferring(to) => {
                format!("TRYAGAIN leadership is being transferred to r{}", to.0)
            }
            WriteFailure::QueueFull => "TRYAGAIN too many writes pending".into(),
            WriteFailure::Lost => {
                "TRYAGAIN the write was replaced in a leader change and not applied".into()
            }
            WriteFailure::LeaderUnreachable(l) => format!(
                "TRYAGAIN the leader r{} could not be reached; the write was not sent",
                l.0
            ),
            WriteFailure::TooLarge { len, max } => {
                format!("ERR command of {len} bytes exceeds the record limit of {max}")
            }
            WriteFailure::Timeout(t) => format!(
                "TIMEOUT the write was not confirmed within {} ms; it may or may not be applied",
                t.as_millis()
            ),
            WriteFailure::Stopping => "TRYAGAIN the node is shutting down".into(),
            WriteFailure::Unknown(why) => {
                format!("UNKNOWN the write may or may not be applied ({why}); do not retry blindly")
            }
        };
        Reply::Error(msg)
    }

    /// Waits until this node may serve a read in `mode` from its local state: linearizable and
    /// lease reads go through the driver's read barrier (a confirmed read offset, applied
    /// locally) on any replica; sequential reads serve the local applied state at once.
    pub async fn read_barrier(&self, mode: ReadMode) -> Result<(), Reply> {
        let core_mode = match mode {
            ReadMode::Sequential => return Ok(()),
            ReadMode::Linearizable => raft_core::driver::ReadMode::Linearizable,
            ReadMode::Lease => raft_core::driver::ReadMode::Lease,
        };
        match self.node.read(core_mode).await {
            Ok(_permit) => Ok(()),
            Err(raft_core::driver::ReadError::LeaseDisabled) => Err(Reply::Error(
                "ERR lease reads are not enabled on this node (use READMODE linearizable)".into(),
            )),
            Err(raft_core::driver::ReadError::NoLeader) => Err(Reply::Error(
                "TRYAGAIN no leader is known (election in progress)".into(),
            )),
            Err(raft_core::driver::ReadError::ShuttingDown) => {
                Err(Reply::Error("TRYAGAIN the node is shutting down".into()))
            }
            Err(e) => Err(Reply::Error(format!("TRYAGAIN {e}"))),
        }
    }

    fn read(&self, op: ReadOp) -> Reply {
        let now = now_ms();
        if let Some(read) = op.as_tx() {
            return self.kv.read(&read, now);
        }
        match op {
            ReadOp::Keys(pattern) => Reply::Array(
                self.kv
                    .keys(&pattern, now)
                    .into_iter()
                    .map(Reply::Bulk)
                    .collect(),
            ),
            ReadOp::Scan {
                cursor,
                pattern,
                count,
                type_name,
            } => {
                let (next, keys) =
                    self.kv
                        .scan(cursor, pattern.as_deref(), count, type_name.as_deref(), now);
                Reply::Array(vec![
                    Reply::bulk(next.to_string()),
                    Reply::Array(keys.into_iter().map(Reply::Bulk).collect()),
                ])
            }
            // Answered by the state machine above.
            _ => Reply::err("internal: a read the state machine answers reached the server"),
        }
    }

    async fn admin(&self, conn: &Conn, op: AdminOp) -> Reply {
        if let AdminOp::RaftTransfer(to) = op {
            return transfer_reply(self.node.transfer_leadership(ReplicaId(to)).await);
        }
        let Some(st) = self.node.status().await else {
            return Reply::Error("TRYAGAIN the node is shutting down".into());
        };
        match op {
            AdminOp::Info(sections) => Reply::bulk(self.info(conn, &st, &sections)),
            AdminOp::RaftStatus => Reply::bulk(self.raft_status(&st)),
            AdminOp::RaftDescribe => Reply::bulk(self.raft_describe(&st)),
            AdminOp::Role => self.role(&st),
            AdminOp::Hello(mut fields) => {
                // Redis lists the role before the modules.
                let role = if st.role == Role::Leader {
                    "master"
                } else {
                    "replica"
                };
                let at = fields.len().saturating_sub(1);
                fields.insert(at, (Reply::bulk("role"), Reply::bulk(role)));
                Reply::Map(fields)
            }
            AdminOp::RaftVoters => Reply::bulk(crate::membership::voters_text(&st)),
            AdminOp::RaftAddVoter(id, directory) => {
                let endpoint = self
                    .cfg
                    .peers()
                    .get(&ReplicaId(id))
                    .map_or(String::new(), |a| a.to_string());
                crate::membership::add_voter(&self.node, &st, id, directory, endpoint).await
            }
            AdminOp::RaftRemoveVoter(id) => {
                crate::membership::remove_voter(&self.node, &st, id).await
            }
            AdminOp::RaftTransfer(_) => unreachable!("answered above"),
        }
    }

    fn info(&self, conn: &Conn, st: &Status, sections: &[String]) -> String {
        let all = sections.is_empty()
            || sections
                .iter()
                .any(|s| matches!(s.as_str(), "all" | "everything" | "default"));
        let want = |name: &str| all || sections.iter().any(|s| s == name);
        let mut s = String::new();
        if want("server") {
            s += &format!(
                "# Server\r\nredis_version:7.0.0\r\nraft_node_version:{}\r\nredis_mode:standalone\r\n\
                 process_id:{}\r\ntcp_port:{}\r\nuptime_in_seconds:{}\r\ncluster_id:{}\r\n\
                 replica_id:{}\r\nstorage:{}\r\n\r\n",
                env!("CARGO_PKG_VERSION"),
                std::process::id(),
                self.client_addr.port(),
                self.started.elapsed().as_secs(),
                self.cfg.cluster_id,
                self.cfg.id.0,
                self.cfg.storage.name(),
            );
        }
        if want("clients") {
            s += &format!(
                "# Clients\r\nconnected_clients:{}\r\nblocked_clients:0\r\nclient_id:{}\r\n\
                 read_mode:{}\r\n\r\n",
                self.cfg.client.connections_max - self.connections.available_permits(),
                conn.id,
                conn.read_mode.name()
            );
        }
        if want("memory") {
            // The process's resident memory: the map lives in it, and an allocator's own
            // figure is not at hand.
            let rss = resident_bytes();
            s += &format!(
                "# Memory\r\nused_memory:{rss}\r\nused_memory_human:{:.2}M\r\n\
                 used_memory_rss:{rss}\r\nmaxmemory:0\r\n\r\n",
                rss as f64 / (1 << 20) as f64
            );
        }
        if want("persistence") {
            s += "# Persistence\r\nloading:0\r\naof_enabled:0\r\nrdb_bgsave_in_progress:0\r\n\r\n";
        }
        if want("stats") {
            s += &format!(
                "# Stats\r\ntotal_connections_received:{}\r\ntotal_commands_processed:{}\r\n\r\n",
                self.next_conn.load(Ordering::Relaxed) - 1,
                self.commands_processed.load(Ordering::Relaxed),
            );
        }
        if want("replication") {
            s += &self.replication_section(conn, st);
        }
        if want("keyspace") {
            s += &format!("# Keyspace\r\ndb0:keys={}\r\n", self.kv.dbsize(now_ms()));
        }
        s
    }

    /// A replica's client address as Redis tools want it: host and port apart.
    fn host_port(&self, id: ReplicaId) -> (String, u16) {
        let addr = self.cfg.client_addr_of(id).unwrap_or_default();
        match addr.rsplit_once(':') {
            Some((host, port)) => (host.to_string(), port.parse().unwrap_or(0)),
            None => (addr, 0),
        }
    }

    /// Whether this replica heard from its leader within a fetch timeout.
    fn leader_link_up(&self, st: &Status) -> bool {
        st.leader.is_some()
            && st
                .since_leader_contact
                .is_some_and(|d| d < self.cfg.timers.fetch_timeout)
    }

    /// `ROLE`: `master`, its offset and its replicas, or `slave` with its master and offset.
    fn role(&self, st: &Status) -> Reply {
        let offset = |o: raft_core::Offset| Reply::Int(o.0 as i64);
        if st.role == Role::Leader {
            let replicas = st
                .voters
                .iter()
                .filter(|p| p.replica != st.id)
                .map(|p| {
                    let (host, port) = self.host_port(p.replica);
                    Reply::Array(vec![
                        Reply::bulk(host),
                        Reply::bulk(port.to_string()),
                        Reply::bulk(p.end_offset.map_or(0, |o| o.0).to_string()),
                    ])
                })
                .collect();
            return Reply::Array(vec![
                Reply::bulk("master"),
                offset(st.high_watermark),
                Reply::Array(replicas),
            ]);
        }
        let (host, port) = st.leader.map_or((String::new(), 0), |l| self.host_port(l));
        let link = if self.leader_link_up(st) {
            "connected"
        } else {
            "connect"
        };
        Reply::Array(vec![
            Reply::bulk("slave"),
            Reply::bulk(host),
            Reply::Int(i64::from(port)),
            Reply::bulk(link),
            offset(self.kv.applied()),
        ])
    }

    fn replication_section(&self, conn: &Conn, st: &Status) -> String {
        let applied = self.kv.applied();
        let leader = st.leader.map_or(String::new(), |l| l.0.to_string());
        let leader_addr = st
            .leader
            .and_then(|l| self.cfg.client_addr_of(l))
            .unwrap_or_default();
        // Redis's names first, for tools that key on them; the Raft role beside them.
        let redis_role = if st.role == Role::Leader {
            "role:master\r\n".to_string()
        } else {
            let (host, port) = st.leader.map_or((String::new(), 0), |l| self.host_port(l));
            let link = if self.leader_link_up(st) {
                "up"
            } else {
                "down"
            };
            format!(
                "role:slave\r\nmaster_host:{host}\r\nmaster_port:{port}\r\nmaster_link_status:{link}\r\n"
            )
        };
        format!(
            "# Replication\r\n{redis_role}raft_role:{}\r\nreplica_id:{}\r\nepoch:{}\r\nleader:{leader}\r\n\
             leader_addr:{leader_addr}\r\nhigh_watermark:{}\r\napplied_offset:{}\r\n\
             log_end_offset:{}\r\ndurable_end_offset:{}\r\nlag:{}\r\nvoters:{}\r\n\
             observers:{}\r\nread_mode:{}\r\n\r\n",
            st.role,
            st.id.0,
            st.epoch.0,
            st.high_watermark.0,
            applied.0,
            st.log_end.offset.0,
            st.durable_end.0,
            st.high_watermark.0.saturating_sub(applied.0),
            ids(self.cfg.voters.keys()),
            ids(self.cfg.observers.keys()),
            conn.read_mode.name(),
        )
    }

    fn raft_status(&self, st: &Status) -> String {
        let applied = self.kv.applied();
        format!(
            "replica_id:{}\r\ncluster_id:{}\r\nrole:{}\r\nepoch:{}\r\nleader:{}\r\n\
             high_watermark:{}\r\napplied_offset:{}\r\nlog_end_offset:{}\r\nlog_end_epoch:{}\r\n\
             durable_end_offset:{}\r\nlog_start_offset:{}\r\nsnapshot_offset:{}\r\n\
             directory_id:{}\r\nvoter:{}\r\n",
            st.id.0,
            self.cfg.cluster_id,
            st.role,
            st.epoch.0,
            st.leader.map_or("none".into(), |l| self.leader_text(l)),
            st.high_watermark.0,
            applied.0,
            st.log_end.offset.0,
            st.log_end.epoch.0,
            st.durable_end.0,
            st.log_start.0,
            st.snapshot
                .map_or("none".into(), |id| id.offset.0.to_string()),
            st.directory.map_or("none".into(), |d| d.to_string()),
            u8::from(st.voter_set.is_voter(st.id, st.directory)),
        )
    }

    fn raft_describe(&self, st: &Status) -> String {
        let mut s = format!(
            "epoch:{}\r\nleader:{}\r\nhigh_watermark:{}\r\n",
            st.epoch.0,
            st.leader.map_or("none".into(), |l| l.0.to_string()),
            st.high_watermark.0
        );
        if st.role != Role::Leader {
            s += "voters: (progress is known to the leader only)\r\n";
            for id in st.voter_set.ids() {
                s += &format!("voter:{}\r\n", id.0);
            }
            return s;
        }
        for p in &st.voters {
            let end = p.end_offset.map_or("-".into(), |o| o.0.to_string());
            let lag = p.end_offset.map_or("-".into(), |o| {
                st.log_end.offset.0.saturating_sub(o.0).to_string()
            });
            let since = p
                .since_last_fetch
                .map_or("-".into(), |d| d.as_millis().to_string());
            s += &format!(
                "voter:{} end_offset={end} lag={lag} last_fetch_ms_ago={since}\r\n",
                p.replica.0
            );
        }
        for p in &st.observers {
            s += &format!("observer:{}\r\n", p.replica.0);
        }
        s
    }
}

/// The process's resident set size in bytes (Linux `/proc/self/statm`; 0 elsewhere).
fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    // The page size of every Linux platform this runs on; a wrong guess only scales a gauge.
    pages * 4096
}

fn ids<'a>(it: impl Iterator<Item = &'a ReplicaId>) -> String {
    it.map(|i| i.0.to_string()).collect::<Vec<_>>().join(",")
}
