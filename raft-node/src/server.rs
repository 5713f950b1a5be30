//! The RESP server: accepts client connections, parses pipelined requests, and runs each one
//! against the node: writes through the connection's write session (`Server::run_writes`),
//! reads after [`Server::read_barrier`].
//!
//! Pipelining: every complete request in the input buffer (up to [`BATCH_MAX`]) is taken at
//! once. Consecutive writes are proposed together, as one ordered batch (forwarded as one when
//! this node does not lead), and their replies are sent in request order, written as they are
//! produced and bounded per connection (see `replies`); a read after writes
//! waits for them, and one read barrier serves every read of a batch that follows the same
//! writes. Each connection has one `WriteSession`, so its batches take effect in the order
//! sent even when an earlier one's outcome was unknown.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use raft_core::driver::{Node, WriteSession};
use raft_core::{ReplicaId, Role};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio_rustls::TlsAcceptor;

use crate::clients::{ClientEntry, Clients};
use crate::cmdstats::{CommandStats, Outcome};
use crate::commands::{AdminOp, Conn, Context, LocalOp, Plan, ReadOp};
use crate::config::{NodeConfig, ReadMode};
use crate::kv::{self, Kv};
use crate::metrics::NodeMetrics;
use crate::multi;
use crate::replies::{Closed, Replies};
use crate::resp::{Parser, Proto, Reply};
use crate::wait::LastWrite;
use crate::write_failure::{transfer_reply, WriteFailure};

/// How long a client may take to complete its TLS handshake.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Most requests taken from one connection's buffer at once (their replies are written as
/// they come, see `replies`).
pub const BATCH_MAX: usize = 1024;

/// Everything a connection needs, shared by all of them.
pub struct Server {
    pub(crate) node: Node,
    pub(crate) kv: Arc<Kv>,
    pub(crate) cfg: Arc<NodeConfig>,
    pub(crate) started: std::time::Instant,
    pub(crate) client_addr: SocketAddr,
    pub(crate) connections: Arc<Semaphore>,
    pub(crate) next_conn: AtomicU64,
    /// Requests served since start (`INFO stats` `total_commands_processed`).
    pub(crate) commands_processed: AtomicU64,
    /// The peer transport, when the node has one: where it reaches replicas no configuration
    /// here names (the endpoint `RAFT ADD-VOTER` records for them).
    pub(crate) transport: Option<Arc<raft_transport_quic::QuicTransport>>,
    pub(crate) metrics: Arc<NodeMetrics>,
    /// The live connections (`CLIENT LIST`, `CLIENT KILL`).
    pub(crate) clients: Arc<Clients>,
    /// Per-command counters (`INFO commandstats`).
    pub(crate) stats: CommandStats,
}

/// What the server keeps per connection besides [`Conn`]: its write session, what it knows of
/// its last write (`WAIT`), and its entry in the registry.
struct Link {
    session: WriteSession,
    last_write: LastWrite,
    entry: Arc<ClientEntry>,
}

/// Whether a reply reports an error (a state machine answer starts with `-` then).
fn is_error(r: &Reply) -> bool {
    match r {
        Reply::Error(_) => true,
        Reply::Raw(b) => b.first() == Some(&b'-'),
        _ => false,
    }
}

fn outcome_of(r: &Reply) -> Outcome {
    if is_error(r) {
        Outcome::Failed
    } else {
        Outcome::Ok
    }
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
            transport: None,
            clients: Arc::new(Clients::default()),
            stats: CommandStats::new(crate::commands::command_names()),
        }
    }

    /// The server of a node with this peer transport.
    pub fn with_transport(mut self, transport: Arc<raft_transport_quic::QuicTransport>) -> Server {
        self.transport = Some(transport);
        self
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
                        let local = stream.local_addr().unwrap_or(self.client_addr);
                        let server = self.clone();
                        let stop = stop.clone();
                        let tls = tls.clone();
                        conns.spawn(async move {
                            let Some(tls) = tls else {
                                return server.serve(stream, peer, local, stop).await;
                            };
                            // A client that does not speak TLS (or too slowly) is dropped here:
                            // nothing it sent reaches the RESP parser.
                            match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, tls.accept(stream)).await {
                                Ok(Ok(stream)) => server.serve(stream, peer, local, stop).await,
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
        // Ends the waits that only a kill ends (`WAIT 0`); the others end with `stop`.
        self.clients.kill_all();
        while conns.join_next().await.is_some() {}
    }

    async fn serve<S: AsyncRead + AsyncWrite + Unpin + Send>(
        &self,
        mut stream: S,
        peer: SocketAddr,
        local: SocketAddr,
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
            multi_bytes: 0,
            multi_denyoom: false,
            watched: Vec::new(),
        };
        let registration = self.clients.register(conn.id, peer, local);
        // The connection's writes take effect in the order sent, also across pipelines whose
        // outcome was unknown (see `WriteSession`).
        let mut link = Link {
            session: WriteSession::new(),
            last_write: LastWrite::None,
            entry: registration.entry.clone(),
        };
        let entry = registration.entry.clone();
        // Before AUTH (with a password) a connection's requests are small and taken one at a
        // time, so that a successful AUTH raises the limits for the very next request.
        let mut parser = Parser::new(self.cfg.client.limits_for(conn.authed));
        let capacity = parser.limits().request_bytes_max.saturating_add(1 << 10);
        let mut input = BytesMut::with_capacity(capacity.min(16 << 10));
        // Replies wait here until written, a chunk at a time (see `replies`).
        let mut out = BytesMut::new();
        loop {
            let mut batch = Vec::new();
            let mut fatal = None;
            let batch_max = if conn.authed { BATCH_MAX } else { 1 };
            while batch.len() < batch_max {
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
                if entry.is_killed() {
                    return;
                }
                tokio::select! {
                    read = stream.read_buf(&mut input) => match read {
                        Ok(0) | Err(_) => return,
                        Ok(_) => continue,
                    },
                    _ = stop.changed() => return,
                    _ = entry.killed() => return,
                }
            }
            let authed_before = conn.authed;
            let limit = self.cfg.client.output_buffer_bytes_max;
            let mut replies = Replies::new(&mut stream, &mut out, limit, &entry, &mut stop);
            let mut close = self
                .run_batch(&mut conn, &mut link, batch, &mut replies)
                .await;
            if conn.authed && !authed_before {
                parser.set_limits(self.cfg.client.limits);
            }
            entry.sync(
                conn.proto,
                conn.name.as_ref(),
                conn.multi.as_ref().map(Vec::len),
            );
            if let Some(e) = fatal {
                tracing::debug!(conn = conn.id, error = %e, "closing a connection");
                let reply = if conn.authed {
                    Reply::err(e)
                } else {
                    Reply::err(format_args!("{e} (unauthenticated)"))
                };
                replies.push(&reply, Proto::Resp2).await;
                close = true;
            }
            replies.flush().await;
            match replies.closed() {
                None => {}
                Some(Closed::OverLimit(pending)) => {
                    // Once per connection: it is closed now.
                    tracing::warn!(
                        conn = conn.id, %peer, pending, limit,
                        "closing a client connection whose replies waiting to be sent would pass \
                         client.output_buffer_bytes_max"
                    );
                    self.metrics.output_limit_disconnects.inc();
                    let _ = stream.shutdown().await;
                    return;
                }
                Some(Closed::Gone | Closed::Stopped) => return,
            }
            // A killed connection is closed once its batch is answered (`CLIENT KILL` of
            // itself gets its `+OK` first, as in Redis).
            if close || entry.is_killed() {
                let _ = stream.shutdown().await;
                return;
            }
        }
    }

    /// Runs a batch of requests and appends their replies in order; true to close afterwards.
    async fn run_batch(
        &self,
        conn: &mut Conn,
        link: &mut Link,
        batch: Vec<Vec<Bytes>>,
        out: &mut Replies<'_>,
    ) -> bool {
        let mut writes = Vec::new();
        // The command index of each pending write, for its counters.
        let mut write_cmds = Vec::new();
        let mut barrier_passed = false;
        self.commands_processed
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        for args in batch {
            if out.closed().is_some() {
                // Nobody will read the replies: the rest of the batch is not run.
                return true;
            }
            let ctx = Context {
                requirepass: self.cfg.client.requirepass.as_deref(),
                now_ms: now_ms(),
                lease_reads: self.cfg.lease.enabled,
                oom: self.cfg.maxmemory > 0 && self.kv.dataset_bytes() >= self.cfg.maxmemory,
            };
            let cmd = self.stats.index(&args[0]);
            link.entry.touch(cmd);
            let started = std::time::Instant::now();
            let plan = multi::plan(conn, &ctx, &args);
            if let Plan::Write(w) = plan {
                writes.push(w);
                write_cmds.push(cmd);
                continue;
            }
            if !writes.is_empty() {
                let cmds = std::mem::take(&mut write_cmds);
                self.run_writes(link, conn.proto, std::mem::take(&mut writes), cmds, out)
                    .await;
                if out.closed().is_some() {
                    return true;
                }
                barrier_passed = false;
            }
            let reply = match plan {
                Plan::Write(_) => continue,
                Plan::Reply(r) => {
                    // Refused while planning: Redis counts it as rejected, not as a call.
                    let outcome = if is_error(&r) {
                        Outcome::Rejected
                    } else {
                        Outcome::Ok
                    };
                    out.push(&r, conn.proto).await;
                    self.count(cmd, started, outcome);
                    continue;
                }
                Plan::Close(r) => {
                    out.push(&r, conn.proto).await;
                    self.count(cmd, started, Outcome::Ok);
                    return true;
                }
                Plan::Read(ReadOp::Watch(keys)) => {
                    // The offset after the barrier covers every write acknowledged before this
                    // WATCH: only later writes abort the transaction.
                    match self.barrier_once(conn.read_mode, &mut barrier_passed).await {
                        Ok(()) => {
                            let at = self.kv.applied().0;
                            conn.watch(keys, at)
                        }
                        Err(r) => r,
                    }
                }
                Plan::Read(op) => {
                    let _in_flight = InFlight::new(&self.metrics.reads_in_flight);
                    match self.barrier_once(conn.read_mode, &mut barrier_passed).await {
                        Ok(()) => {
                            let r = self.read(op);
                            self.metrics.observe_read(conn.read_mode, started.elapsed());
                            r
                        }
                        Err(r) => r,
                    }
                }
                Plan::Admin(op) => self.admin(conn, op).await,
                Plan::Local(op) => self.local(conn, link, op).await,
            };
            out.push(&reply, conn.proto).await;
            self.count(cmd, started, outcome_of(&reply));
        }
        if !writes.is_empty() {
            self.run_writes(link, conn.proto, writes, write_cmds, out)
                .await;
        }
        false
    }

    /// Counts one request of command `cmd` (if it names one) that started at `started`.
    fn count(&self, cmd: Option<usize>, started: std::time::Instant, outcome: Outcome) {
        if let Some(i) = cmd {
            self.stats.record(i, started.elapsed(), outcome);
        }
    }

    /// Passes the read barrier unless this batch already did since its last writes.
    async fn barrier_once(&self, mode: ReadMode, passed: &mut bool) -> Result<(), Reply> {
        if !*passed {
            self.read_barrier(mode).await?;
            *passed = true;
        }
        Ok(())
    }

    /// Answers a request from the server's own state.
    async fn local(&self, conn: &Conn, link: &Link, op: LocalOp) -> Reply {
        let names = |i: usize| self.stats.name(i);
        match op {
            LocalOp::ClientList(ids) => {
                let mode = conn.read_mode.name();
                let mut text = String::new();
                for e in self.clients.list(ids.as_deref()) {
                    // The asking connection's own state is newer than its last sync.
                    if e.id == conn.id {
                        e.sync(
                            conn.proto,
                            conn.name.as_ref(),
                            conn.multi.as_ref().map(Vec::len),
                        );
                    }
                    text += &e.line(names, mode);
                }
                Reply::bulk(text)
            }
            LocalOp::ClientInfo => {
                let e = &link.entry;
                e.sync(
                    conn.proto,
                    conn.name.as_ref(),
                    conn.multi.as_ref().map(Vec::len),
                );
                Reply::bulk(e.line(names, conn.read_mode.name()))
            }
            LocalOp::ClientKill { filter, old_form } => {
                let n = self.clients.kill(&filter, conn.id);
                match (old_form, n) {
                    (false, n) => Reply::Int(n as i64),
                    (true, 0) => Reply::err("No such client"),
                    (true, _) => Reply::ok(),
                }
            }
            LocalOp::ConfigGet(patterns) => crate::introspection::config_get(&self.cfg, &patterns),
            LocalOp::ResetStat => {
                self.stats.reset();
                Reply::ok()
            }
            LocalOp::Wait {
                replicas,
                timeout_ms,
            } => {
                let timeout = (timeout_ms > 0).then(|| Duration::from_millis(timeout_ms));
                self.wait_replicas(link.last_write, replicas, timeout, &link.entry)
                    .await
            }
        }
    }

    /// Proposes consecutive writes of one connection together, in order, and appends their
    /// replies in order; counts each under its command (`cmds`, one per write).
    ///
    /// They reach the leader as one ordered batch (also through a follower), so they apply in
    /// the order sent. A refusal refuses every later write of the batch, unproposed; when the
    /// refused suffix is retriable it is retried as a batch until the deadline, so a retry can
    /// never land after a later write of the same pipeline. Nothing else is retried: an
    /// unknown outcome is reported as such.
    async fn run_writes(
        &self,
        link: &mut Link,
        proto: Proto,
        cmds: Vec<kv::Command>,
        names: Vec<Option<usize>>,
        out: &mut Replies<'_>,
    ) {
        let started = std::time::Instant::now();
        // Stamped 0: the leader stamps every record with its clock when it proposes it (see
        // `kv::LeaderClock`), so a follower's clock never reaches the replicated one.
        let payloads: Vec<Bytes> = cmds.iter().map(|c| kv::encode(0, c)).collect();
        let timeout = self.cfg.timers.write_timeout;
        let deadline = tokio::time::Instant::now() + timeout;
        let mut backoff = Duration::from_millis(10);
        let mut next = 0;
        let mut outcomes = Vec::with_capacity(payloads.len());
        while next < payloads.len() {
            let attempt = tokio::time::timeout_at(
                deadline,
                self.propose_batch(&mut link.session, &payloads[next..]),
            );
            let results = match attempt.await {
                Ok(results) => results,
                Err(_) => {
                    // Submitted and not answered in time: every write left is unknown.
                    link.last_write.uncertain();
                    for _ in next..payloads.len() {
                        let r = self.write_reply(Err(WriteFailure::Timeout(timeout)));
                        out.push(&r, proto).await;
                        outcomes.push(Outcome::Failed);
                    }
                    break;
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
                let r = match r {
                    Ok((offset, response)) => {
                        link.last_write.committed(offset);
                        Ok(response)
                    }
                    Err(f @ (WriteFailure::Timeout(_) | WriteFailure::Unknown(_))) => {
                        link.last_write.uncertain();
                        Err(f)
                    }
                    Err(f) => Err(f),
                };
                let reply = self.write_reply(r);
                out.push(&reply, proto).await;
                outcomes.push(outcome_of(&reply));
            }
            next += settled;
            if retry && out.closed().is_some() {
                // Nobody reads the answers: the refused writes (nothing applied) are dropped.
                break;
            }
            if retry {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_millis(200));
            }
        }
        // Writes proposed together waited together: each is counted a share of the time.
        let share = started.elapsed() / payloads.len().max(1) as u32;
        for (cmd, outcome) in names.into_iter().zip(outcomes) {
            if let Some(i) = cmd {
                self.stats.record(i, share, outcome);
            }
        }
    }

    /// One attempt at a batch of one connection's writes, in order: each write's log offset
    /// and response, or why it failed.
    async fn propose_batch(
        &self,
        session: &mut WriteSession,
        payloads: &[Bytes],
    ) -> Vec<Result<(u64, Bytes), WriteFailure>> {
        let started = std::time::Instant::now();
        let _in_flight = InFlight::new(&self.metrics.proposals_in_flight);
        let results = session.write_batch(&self.node, payloads.to_vec()).await;
        results
            .into_iter()
            .map(|r| match r {
                Ok(c) => {
                    self.metrics.observe_commit(started.elapsed());
                    Ok((c.id.offset.0, c.response))
                }
                Err(e) => Err(WriteFailure::from_write_error(e)),
            })
            .collect()
    }

    pub(crate) fn leader_text(&self, leader: ReplicaId) -> String {
        match self.cfg.client_addr_of(leader) {
            Some(addr) => format!("leader is r{} at {addr}", leader.0),
            None => format!("leader is r{}", leader.0),
        }
    }

    fn write_reply(&self, r: Result<Bytes, WriteFailure>) -> Reply {
        match r {
            Ok(bytes) => Reply::Raw(bytes),
            Err(f) => f.reply(|l| self.leader_text(l)),
        }
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
        if let Some(read) = op.as_tx() {
            return self.kv.read(&read);
        }
        match op {
            ReadOp::MemoryUsage(key, samples) => self
                .kv
                .memory_usage(&key, samples)
                .map_or(Reply::Nil, |n| Reply::Int(n as i64)),
            ReadOp::Digest => {
                let (applied, digest) = self.kv.digest();
                Reply::Array(vec![
                    Reply::Int(applied.0 as i64),
                    Reply::bulk(format!("{digest:016x}")),
                ])
            }
            ReadOp::Keys(pattern) => Reply::Array(
                self.kv
                    .keys(&pattern)
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
                        .scan(cursor, pattern.as_deref(), count, type_name.as_deref());
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
            AdminOp::RaftVoters => {
                let addr_of = |id: ReplicaId| {
                    let cfg = &self.cfg;
                    let configured = cfg.voters.get(&id).or_else(|| cfg.observers.get(&id));
                    configured
                        .map(|a| a.peer)
                        .or_else(|| self.transport.as_ref()?.peer_addr(id))
                };
                Reply::bulk(crate::membership::voters_text(&st, addr_of))
            }
            AdminOp::RaftAddVoter(id, directory) => {
                // The configured address, else where the transport reaches it now (learned
                // from its connection when no configuration here names it).
                let endpoint = self
                    .cfg
                    .peers()
                    .get(&ReplicaId(id))
                    .copied()
                    .or_else(|| self.transport.as_ref()?.peer_addr(ReplicaId(id)))
                    .map_or(String::new(), |a| a.to_string());
                crate::membership::add_voter(&self.node, &st, id, directory, endpoint).await
            }
            AdminOp::RaftRemoveVoter(id) => {
                crate::membership::remove_voter(&self.node, &st, id).await
            }
            AdminOp::RaftUpdateVoter(id, endpoint) => {
                crate::membership::update_voter(&self.node, &st, id, endpoint).await
            }
            AdminOp::RaftTransfer(_) => unreachable!("answered above"),
        }
    }
}
