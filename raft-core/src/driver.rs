//! The tokio driver: runs one [`Replica`] over the [`crate::io`] traits. This is what a library
//! user embeds: [`Node::start`] with a log, an election store, a transport and a state machine,
//! then [`Node::propose`], [`Node::status`] and [`Node::shutdown`].
//!
//! One task owns the replica and follows the driver contract of [`crate::protocol`]. Around it:
//! a log writer task (applies log operations in order and coalesces consecutive appends into one
//! durable call: group commit), an election writer task, an applier task feeding the state
//! machine, and one short task per outgoing RPC. A bounded in-memory cache of the log's tail
//! serves fetch responses and the applier without touching storage; older ranges are read from
//! the log store. Every channel is bounded.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

use crate::config::ValidatedConfig;
use crate::io::{ElectionStore, LogStore, RequestHandler, StateMachine, StorageError, Transport};
use crate::message::{ErrorCode, Request, RequestId, Response};
use crate::message::{ForwardRequest, ForwardResponse};
use crate::protocol::{
    Event, Input, LogOp, LogSeq, Outgoing, Outputs, PersistSeq, ProposeError, ReadFailure, ReadId,
    RecordRange, Replica, Status,
};
use crate::types::{ElectionState, Epoch, Instant, Offset, OffsetAndEpoch, Record, ReplicaId};

/// Options of the driver itself (the protocol's are in [`crate::Config`]).
#[derive(Clone, Debug)]
pub struct DriverOptions {
    /// Seed of the protocol's PRNG (election timeouts). Use distinct seeds per replica.
    pub seed: u64,
    /// Bytes of recent log records kept in memory for fetch responses and the applier.
    pub cache_bytes_max: usize,
    /// Commands (proposals, status calls) queued for the replica task, at most.
    pub command_queue_max: usize,
    /// How long a graceful shutdown waits for the handover to be acknowledged.
    pub shutdown_timeout: Duration,
}

impl Default for DriverOptions {
    fn default() -> Self {
        DriverOptions {
            seed: 0x5eed,
            cache_bytes_max: 64 << 20,
            command_queue_max: 16 * 1024,
            shutdown_timeout: Duration::from_secs(2),
        }
    }
}

/// What the driver needs from the outside world.
pub struct Parts {
    /// The replicated log.
    pub log: Arc<dyn LogStore>,
    /// The durable election state.
    pub election: Arc<dyn ElectionStore>,
    /// Peer RPCs.
    pub transport: Arc<dyn Transport>,
    /// The user's state machine (keep a clone of the `Arc` to query it).
    pub state_machine: Arc<dyn StateMachine>,
}

/// Why a write did not commit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WriteError {
    /// The proposal was refused before it was appended.
    #[error(transparent)]
    Refused(#[from] ProposeError),
    /// The record was appended but a leader change replaced it: it will never commit.
    #[error("the write at {0} was lost in a leader change")]
    Lost(OffsetAndEpoch),
    /// The node stopped before the write's fate was known.
    #[error("the node is shutting down")]
    ShuttingDown,
    /// The node stopped after a storage or state-machine failure.
    #[error("the node failed: {0}")]
    Failed(String),
}

/// Why the node could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// Loading the log or the election state failed.
    #[error("loading storage failed: {0}")]
    Storage(#[from] StorageError),
    /// The transport could not start serving.
    #[error("starting the transport failed: {0}")]
    Transport(#[from] crate::io::TransportError),
}

/// A committed and applied write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    /// Where the record sits.
    pub id: OffsetAndEpoch,
    /// What the state machine answered for it.
    pub response: Bytes,
}

/// Counters a metrics exporter can read at any time.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Proposals accepted by the leader.
    pub proposals: AtomicU64,
    /// Proposals refused.
    pub proposals_refused: AtomicU64,
    /// Records applied to the state machine.
    pub applied: AtomicU64,
    /// Log append calls (each one durable sync, possibly for many records).
    pub log_syncs: AtomicU64,
    /// Records appended to the log.
    pub log_records: AtomicU64,
    /// Election-state saves.
    pub election_saves: AtomicU64,
    /// Outgoing RPCs.
    pub rpcs_sent: AtomicU64,
    /// Outgoing RPCs that failed (timeout, unreachable).
    pub rpcs_failed: AtomicU64,
    /// Inbound RPCs handled.
    pub rpcs_received: AtomicU64,
    /// Role changes.
    pub role_changes: AtomicU64,
}

/// How a read is served (decisions D6).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum ReadMode {
    /// Linearizable: a read offset confirmed by the leader's round (the default).
    Linearizable,
    /// Linearizable while the leader holds a lease, without a round; needs `lease_reads`.
    Lease,
    /// The local applied state: never uncommitted, possibly stale.
    Sequential,
}

/// Permission to query the local state machine.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ReadPermit {
    /// The state machine has applied every record below this offset; for a linearizable read,
    /// every write acknowledged before the read began is below it.
    pub offset: Offset,
    /// For sequential reads: how long since this replica last heard from the leader (none for
    /// the leader itself or when it never did).
    pub since_leader_contact: Option<Duration>,
}

/// Why a read could not be served. Every variant is retriable.
#[derive(Clone, Copy, PartialEq, Eq, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// No leader was known before the deadline.
    #[error("no leader known")]
    NoLeader,
    /// The read was not confirmed before the deadline.
    #[error("read not confirmed before its deadline")]
    Timeout,
    /// Lease reads are not enabled in the configuration.
    #[error("lease reads are not enabled")]
    LeaseDisabled,
    /// The node is shutting down.
    #[error("shutting down")]
    ShuttingDown,
}

impl From<ReadFailure> for ReadError {
    fn from(f: ReadFailure) -> ReadError {
        match f {
            ReadFailure::NoLeader => ReadError::NoLeader,
            ReadFailure::Timeout => ReadError::Timeout,
            _ => ReadError::ShuttingDown,
        }
    }
}

enum Command {
    Write {
        payload: Bytes,
        reply: oneshot::Sender<Result<Committed, WriteError>>,
    },
    Read {
        mode: ReadMode,
        reply: oneshot::Sender<Result<ReadPermit, ReadError>>,
    },
    Propose {
        payload: Bytes,
        reply: oneshot::Sender<Result<Committed, WriteError>>,
    },
    Status {
        reply: oneshot::Sender<Status>,
    },
    Shutdown {
        reply: oneshot::Sender<()>,
    },
}

struct Inbound {
    from: ReplicaId,
    request: Request,
    reply: oneshot::Sender<Response>,
}

enum Done {
    Rpc {
        to: ReplicaId,
        id: RequestId,
        result: Result<Response, crate::io::TransportError>,
    },
    Log(Result<LogSeq, StorageError>),
    Election(Result<PersistSeq, StorageError>),
    Applied(Result<Vec<(OffsetAndEpoch, Bytes)>, String>),
    OldRecords {
        to: ReplicaId,
        id: RequestId,
        response: Response,
        records: Result<Vec<Record>, StorageError>,
    },
}

/// A running replica. Cheap to clone; every clone talks to the same task.
#[derive(Clone)]
pub struct Node {
    id: ReplicaId,
    commands: mpsc::Sender<Command>,
    metrics: Arc<Metrics>,
}

impl Node {
    /// Loads storage, starts the transport with this node as its request handler, and spawns
    /// the replica task on the current tokio runtime.
    pub async fn start(
        cfg: ValidatedConfig,
        parts: Parts,
        options: DriverOptions,
    ) -> Result<Node, StartError> {
        let election = parts.election.load().await?;
        let log_state = parts.log.state().await?;
        let applied = parts.state_machine.applied().await;
        let clock = tokio::time::Instant::now();
        let replica = Replica::new(cfg.clone(), election, &log_state, options.seed, Instant(0));
        let (cmd_tx, cmd_rx) = mpsc::channel(options.command_queue_max);
        let (inbound_tx, inbound_rx) = mpsc::channel(1024);
        let (done_tx, done_rx) = mpsc::channel(4096);
        let metrics = Arc::new(Metrics::default());
        parts
            .transport
            .serve(Arc::new(Handler {
                inbound: inbound_tx,
                commands: cmd_tx.clone(),
            }))
            .await?;
        let log_writer = spawn_log_writer(parts.log.clone(), done_tx.clone(), metrics.clone());
        let election_writer =
            spawn_election_writer(parts.election.clone(), done_tx.clone(), metrics.clone());
        let applier = spawn_applier(
            parts.state_machine.clone(),
            done_tx.clone(),
            metrics.clone(),
        );
        let task = ReplicaTask {
            cfg,
            options,
            replica,
            clock,
            parts,
            out: Outputs::default(),
            cache: LogCache::new(log_state.end.offset),
            responders: HashMap::new(),
            next_inbound: 1,
            waiters: BTreeMap::new(),
            apply_sent: applied,
            applied,
            high_watermark: Offset::ZERO,
            log_writer,
            election_writer,
            applier,
            done_tx,
            metrics: metrics.clone(),
            failed: None,
            shutdown: None,
            reads: HashMap::new(),
            next_read: 1,
        };
        let id = task.cfg.id;
        tokio::spawn(task.run(cmd_rx, inbound_rx, done_rx));
        Ok(Node {
            id,
            commands: cmd_tx,
            metrics,
        })
    }

    /// This replica's id.
    pub fn id(&self) -> ReplicaId {
        self.id
    }

    /// Proposes a record and waits until it is committed and applied on this replica (the
    /// leader), returning the state machine's response.
    pub async fn propose(&self, payload: Bytes) -> Result<Committed, WriteError> {
        let (reply, rx) = oneshot::channel();
        self.commands
            .send(Command::Propose { payload, reply })
            .await
            .map_err(|_| WriteError::ShuttingDown)?;
        rx.await.unwrap_or(Err(WriteError::ShuttingDown))
    }

    /// Writes on any replica: proposes on the leader, or forwards to the leader this replica
    /// knows. Fails with `Refused(NotLeader)` (retriable) while no leader is known.
    pub async fn write(&self, payload: Bytes) -> Result<Committed, WriteError> {
        let (reply, rx) = oneshot::channel();
        self.commands
            .send(Command::Write { payload, reply })
            .await
            .map_err(|_| WriteError::ShuttingDown)?;
        rx.await.unwrap_or(Err(WriteError::ShuttingDown))
    }

    /// A read barrier: returns once the local state machine may be queried for `mode`, on any
    /// replica (leader, follower or observer). Concurrent reads share one ReadIndex request and
    /// one confirmation round.
    ///
    /// ```no_run
    /// # async fn demo(node: raft_core::driver::Node) -> Result<(), raft_core::driver::ReadError> {
    /// use raft_core::driver::ReadMode;
    /// // On a follower: ask the leader for a confirmed read offset, wait until applied...
    /// let permit = node.read(ReadMode::Linearizable).await?;
    /// // ...then query the local state machine: it reflects every write acknowledged before.
    /// println!("reading at offset {}", permit.offset);
    /// # Ok(()) }
    /// ```
    pub async fn read(&self, mode: ReadMode) -> Result<ReadPermit, ReadError> {
        let (reply, rx) = oneshot::channel();
        self.commands
            .send(Command::Read { mode, reply })
            .await
            .map_err(|_| ReadError::ShuttingDown)?;
        rx.await.unwrap_or(Err(ReadError::ShuttingDown))
    }

    /// The replica's status: role, epoch, leader, high watermark, per-voter progress.
    pub async fn status(&self) -> Option<Status> {
        let (reply, rx) = oneshot::channel();
        self.commands.send(Command::Status { reply }).await.ok()?;
        rx.await.ok()
    }

    /// Counters for a metrics exporter.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Resigns gracefully (a leader hands over to its preferred successor), waits for the
    /// handover within the configured timeout, then stops the task and the transport.
    pub async fn shutdown(&self) {
        let (reply, rx) = oneshot::channel();
        if self
            .commands
            .send(Command::Shutdown { reply })
            .await
            .is_ok()
        {
            let _ = rx.await;
        }
    }
}

struct Handler {
    inbound: mpsc::Sender<Inbound>,
    commands: mpsc::Sender<Command>,
}

impl Handler {
    /// A write forwarded by another replica: propose it here and answer when it committed.
    async fn forwarded(&self, req: ForwardRequest) -> Response {
        let (reply, rx) = oneshot::channel();
        let cmd = Command::Propose {
            payload: req.payload,
            reply,
        };
        let result = match self.commands.send(cmd).await {
            Ok(()) => rx.await.unwrap_or(Err(WriteError::ShuttingDown)),
            Err(_) => Err(WriteError::ShuttingDown),
        };
        let mut resp = ForwardResponse {
            error: None,
            epoch: Epoch::ZERO,
            leader: None,
            committed: None,
            response: Bytes::new(),
        };
        match result {
            Ok(c) => {
                resp.epoch = c.id.epoch;
                resp.committed = Some(c.id);
                resp.response = c.response;
            }
            Err(WriteError::Refused(ProposeError::NotLeader { epoch, leader })) => {
                resp.error = Some(ErrorCode::NotLeader);
                resp.epoch = epoch;
                resp.leader = leader;
            }
            Err(WriteError::Refused(ProposeError::QueueFull { .. })) => {
                resp.error = Some(ErrorCode::QueueFull)
            }
            Err(WriteError::Refused(ProposeError::TooLarge { .. })) => {
                resp.error = Some(ErrorCode::TooLarge)
            }
            Err(WriteError::Lost(id)) => {
                resp.error = Some(ErrorCode::WriteLost);
                resp.committed = Some(id);
            }
            Err(_) => resp.error = Some(ErrorCode::ShuttingDown),
        }
        Response::Forward(resp)
    }
}

#[async_trait::async_trait]
impl RequestHandler for Handler {
    async fn handle(&self, from: ReplicaId, request: Request) -> Response {
        let request = match request {
            Request::Forward(req) => return self.forwarded(req).await,
            other => other,
        };
        let (reply, rx) = oneshot::channel();
        let fallback = request.error_response(ErrorCode::ShuttingDown);
        if self
            .inbound
            .send(Inbound {
                from,
                request,
                reply,
            })
            .await
            .is_err()
        {
            return fallback;
        }
        rx.await.unwrap_or(fallback)
    }
}

/// Recent log records in memory, from `start` to the log end.
struct LogCache {
    start: Offset,
    records: VecDeque<Record>,
    bytes: usize,
}

impl LogCache {
    fn new(end: Offset) -> LogCache {
        LogCache {
            start: end,
            records: VecDeque::new(),
            bytes: 0,
        }
    }

    fn end(&self) -> Offset {
        self.start.plus(self.records.len() as u64)
    }

    fn append(&mut self, records: &[Record]) {
        for r in records {
            assert_eq!(
                r.offset,
                self.end(),
                "the cache follows the log contiguously"
            );
            self.bytes += r.encoded_len();
            self.records.push_back(r.clone());
        }
    }

    fn truncate(&mut self, end: Offset) {
        if end < self.start {
            self.records.clear();
            self.bytes = 0;
            self.start = end;
            return;
        }
        while self.end() > end {
            let r = self
                .records
                .pop_back()
                .expect("end > start implies a record");
            self.bytes -= r.encoded_len();
        }
    }

    /// Drops the oldest records while over budget, keeping everything at or above `keep_from`.
    fn evict(&mut self, budget: usize, keep_from: Offset) {
        while self.bytes > budget && self.start < keep_from {
            let Some(r) = self.records.pop_front() else {
                break;
            };
            self.bytes -= r.encoded_len();
            self.start = self.start.next();
        }
    }

    /// The records of `[from, to)` within `max_bytes`, if the cache holds `from`.
    fn read(&self, from: Offset, to: Offset, max_bytes: u64) -> Option<Vec<Record>> {
        if from < self.start {
            return None;
        }
        let skip = (from.0 - self.start.0) as usize;
        let take = to.0.min(self.end().0).saturating_sub(from.0) as usize;
        let mut out = Vec::new();
        let mut bytes = 0u64;
        for r in self.records.iter().skip(skip).take(take) {
            bytes += r.encoded_len() as u64;
            if !out.is_empty() && bytes > max_bytes {
                break;
            }
            out.push(r.clone());
        }
        Some(out)
    }
}

struct ReplicaTask {
    cfg: ValidatedConfig,
    options: DriverOptions,
    replica: Replica,
    clock: tokio::time::Instant,
    parts: Parts,
    out: Outputs,
    cache: LogCache,
    responders: HashMap<u64, oneshot::Sender<Response>>,
    next_inbound: u64,
    waiters: BTreeMap<Offset, (Epoch, oneshot::Sender<Result<Committed, WriteError>>)>,
    /// Records below this were handed to the applier.
    apply_sent: Offset,
    /// Records below this are applied.
    applied: Offset,
    high_watermark: Offset,
    log_writer: mpsc::UnboundedSender<LogOp>,
    election_writer: mpsc::UnboundedSender<(PersistSeq, ElectionState)>,
    applier: mpsc::UnboundedSender<ApplyJob>,
    done_tx: mpsc::Sender<Done>,
    metrics: Arc<Metrics>,
    failed: Option<String>,
    shutdown: Option<(tokio::time::Instant, oneshot::Sender<()>)>,
    reads: HashMap<u64, oneshot::Sender<Result<ReadPermit, ReadError>>>,
    next_read: u64,
}

impl ReplicaTask {
    fn now(&self) -> Instant {
        Instant(self.clock.elapsed().as_nanos() as u64)
    }

    async fn run(
        mut self,
        mut commands: mpsc::Receiver<Command>,
        mut inbound: mpsc::Receiver<Inbound>,
        mut done: mpsc::Receiver<Done>,
    ) {
        self.step(Input::Tick);
        loop {
            let deadline = self.replica.next_deadline();
            let sleep_until = self.clock + Duration::from_nanos(deadline.0.min(u64::MAX / 4));
            let sleep_until = match &self.shutdown {
                Some((until, _)) => sleep_until.min(*until),
                None => sleep_until,
            };
            tokio::select! {
                _ = tokio::time::sleep_until(sleep_until) => self.step(Input::Tick),
                Some(cmd) = commands.recv() => {
                    self.command(cmd);
                    // Batch: take what else is queued before stepping again.
                    for _ in 0..1024 {
                        match commands.try_recv() {
                            Ok(cmd) => self.command(cmd),
                            Err(_) => break,
                        }
                    }
                    self.step(Input::Tick);
                }
                Some(req) = inbound.recv() => self.inbound(req),
                Some(d) = done.recv() => self.done(d),
            }
            if self.should_stop() {
                break;
            }
        }
        self.stop().await;
    }

    fn should_stop(&self) -> bool {
        if self.failed.is_some() {
            return true;
        }
        let Some((until, _)) = &self.shutdown else {
            return false;
        };
        // A graceful stop waits for the handover (the resigned leader's EndQuorumEpoch) to be
        // acknowledged or the timeout, whichever first.
        tokio::time::Instant::now() >= *until || self.replica.role() != crate::Role::Resigned
    }

    async fn stop(mut self) {
        let err = match &self.failed {
            Some(e) => WriteError::Failed(e.clone()),
            None => WriteError::ShuttingDown,
        };
        for (_, (_, w)) in std::mem::take(&mut self.waiters) {
            let _ = w.send(Err(err.clone()));
        }
        for (_, r) in std::mem::take(&mut self.reads) {
            let _ = r.send(Err(ReadError::ShuttingDown));
        }
        self.parts.transport.close().await;
        if let Some((_, reply)) = self.shutdown.take() {
            let _ = reply.send(());
        }
    }

    fn command(&mut self, cmd: Command) {
        match cmd {
            Command::Propose { payload, reply } => {
                let now = self.now();
                match self.replica.propose(now, payload, &mut self.out) {
                    Ok(id) => {
                        self.metrics.proposals.fetch_add(1, Ordering::Relaxed);
                        self.waiters.insert(id.offset, (id.epoch, reply));
                    }
                    Err(e) => {
                        self.metrics
                            .proposals_refused
                            .fetch_add(1, Ordering::Relaxed);
                        let _ = reply.send(Err(WriteError::Refused(e)));
                    }
                }
            }
            Command::Write { payload, reply } => self.write(payload, reply),
            Command::Read { mode, reply } => self.read(mode, reply),
            Command::Status { reply } => {
                let _ = reply.send(self.replica.status(self.now()));
            }
            Command::Shutdown { reply } => {
                let until = tokio::time::Instant::now() + self.options.shutdown_timeout;
                self.shutdown = Some((until, reply));
                self.step(Input::Resign);
                // A leader stays Resigned until its handover is acknowledged; others stop now.
                if self.replica.role() != crate::Role::Resigned {
                    self.shutdown = Some((
                        tokio::time::Instant::now(),
                        self.shutdown.take().expect("set above").1,
                    ));
                }
            }
        }
    }

    fn write(&mut self, payload: Bytes, reply: oneshot::Sender<Result<Committed, WriteError>>) {
        let leader = self.replica.leader();
        match leader {
            Some(l) if l != self.cfg.id => {
                let transport = self.parts.transport.clone();
                let timeout = self.cfg.request_timeout;
                tokio::spawn(async move {
                    let request = Request::Forward(ForwardRequest { payload });
                    let result = match transport.call(l, request, timeout).await {
                        Ok(Response::Forward(r)) => forwarded_result(l, r),
                        Ok(_) => Err(WriteError::Failed("leader answered a forward oddly".into())),
                        Err(e) => {
                            tracing::debug!(leader = %l, error = %e, "forwarding a write failed");
                            Err(WriteError::Refused(ProposeError::NotLeader {
                                epoch: Epoch::ZERO,
                                leader: Some(l),
                            }))
                        }
                    };
                    let _ = reply.send(result);
                });
            }
            _ => self.command(Command::Propose { payload, reply }),
        }
    }

    fn read(&mut self, mode: ReadMode, reply: oneshot::Sender<Result<ReadPermit, ReadError>>) {
        let protocol_mode = match mode {
            ReadMode::Sequential => {
                let status = self.replica.status(self.now());
                let permit = ReadPermit {
                    offset: self.applied,
                    since_leader_contact: status.since_leader_contact,
                };
                let _ = reply.send(Ok(permit));
                return;
            }
            ReadMode::Lease if !self.cfg.lease_reads => {
                let _ = reply.send(Err(ReadError::LeaseDisabled));
                return;
            }
            ReadMode::Lease => crate::protocol::ReadMode::Lease,
            ReadMode::Linearizable => crate::protocol::ReadMode::Linearizable,
        };
        let id = self.next_read;
        self.next_read += 1;
        self.reads.insert(id, reply);
        let deadline = self.now().plus(self.cfg.read_timeout);
        self.step(Input::Read {
            id: ReadId(id),
            mode: protocol_mode,
            deadline,
        });
    }

    fn inbound(&mut self, req: Inbound) {
        self.metrics.rpcs_received.fetch_add(1, Ordering::Relaxed);
        let id = self.next_inbound;
        self.next_inbound += 1;
        self.responders.insert(id, req.reply);
        self.step(Input::Request {
            from: req.from,
            id: RequestId(id),
            request: req.request,
        });
    }

    fn done(&mut self, d: Done) {
        match d {
            Done::Rpc { to, id, result } => match result {
                Ok(response) => self.step(Input::Response {
                    from: to,
                    id,
                    response,
                }),
                Err(e) => {
                    tracing::debug!(peer = %to, error = %e, "rpc failed");
                    self.metrics.rpcs_failed.fetch_add(1, Ordering::Relaxed);
                    self.step(Input::RequestFailed { to, id });
                }
            },
            Done::Log(Ok(seq)) => self.step(Input::LogPersisted(seq)),
            Done::Election(Ok(seq)) => self.step(Input::ElectionPersisted(seq)),
            Done::Log(Err(e)) | Done::Election(Err(e)) => {
                tracing::error!(error = %e, "storage failed; stopping");
                self.failed = Some(e.to_string());
            }
            Done::Applied(Ok(applied)) => self.applied_done(applied),
            Done::Applied(Err(e)) => {
                tracing::error!(error = %e, "state machine failed; stopping");
                self.failed = Some(e);
            }
            Done::OldRecords {
                to,
                id,
                mut response,
                records,
            } => match records {
                Ok(records) => {
                    if let Response::Fetch(f) = &mut response {
                        f.records = records;
                    }
                    self.reply(id, response);
                    let _ = to;
                }
                Err(e) => {
                    tracing::error!(error = %e, "reading the log failed; stopping");
                    self.failed = Some(e.to_string());
                }
            },
        }
    }

    fn applied_done(&mut self, applied: Vec<(OffsetAndEpoch, Bytes)>) {
        for (id, response) in applied {
            self.applied = id.offset.next();
            if let Some((epoch, w)) = self.waiters.remove(&id.offset) {
                let result = if epoch == id.epoch {
                    Ok(Committed { id, response })
                } else {
                    Err(WriteError::Lost(OffsetAndEpoch::new(id.offset, epoch)))
                };
                let _ = w.send(result);
            }
        }
        let applied = self.applied.min(self.replica.high_watermark());
        self.step(Input::Applied(applied));
    }

    fn reply(&mut self, id: RequestId, response: Response) {
        if let Some(r) = self.responders.remove(&id.0) {
            let _ = r.send(response);
        }
    }

    fn step(&mut self, input: Input) {
        let now = self.now();
        let mut out = std::mem::take(&mut self.out);
        self.replica.step(now, input, &mut out);
        self.act(&mut out);
        out.clear();
        self.out = out;
    }

    fn act(&mut self, out: &mut Outputs) {
        if let Some(p) = out.persist.take() {
            let _ = self.election_writer.send(p);
        }
        for op in out.log.drain(..) {
            match &op {
                LogOp::Append { records, .. } => self.cache.append(records),
                LogOp::Truncate { end, .. } => {
                    self.cache.truncate(*end);
                    // Writes waiting at truncated offsets are lost.
                    let lost: Vec<Offset> = self.waiters.range(*end..).map(|(o, _)| *o).collect();
                    for o in lost {
                        if let Some((epoch, w)) = self.waiters.remove(&o) {
                            let _ = w.send(Err(WriteError::Lost(OffsetAndEpoch::new(o, epoch))));
                        }
                    }
                }
            }
            let _ = self.log_writer.send(op);
        }
        for msg in out.messages.drain(..) {
            self.send(msg);
        }
        if let Some(hwm) = out.committed.take() {
            self.high_watermark = hwm;
            self.feed_applier();
        }
        for ev in out.events.drain(..) {
            match ev {
                Event::RoleChanged {
                    role,
                    epoch,
                    leader,
                } => {
                    self.metrics.role_changes.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(replica = %self.cfg.id, %role, %epoch, ?leader, "role changed");
                }
                Event::ProposalsDropped { epoch, from } => {
                    let lost: Vec<Offset> = self.waiters.range(from..).map(|(o, _)| *o).collect();
                    for o in lost {
                        if let Some((e, w)) = self.waiters.remove(&o) {
                            if e == epoch {
                                let _ = w.send(Err(WriteError::Lost(OffsetAndEpoch::new(o, e))));
                            } else {
                                self.waiters.insert(o, (e, w));
                            }
                        }
                    }
                }
                Event::InconsistentLeader {
                    from,
                    epoch,
                    claimed,
                } => {
                    tracing::error!(%from, %epoch, ?claimed, "inconsistent leader reported");
                }
                Event::ReadReady { id, offset } => {
                    if let Some(r) = self.reads.remove(&id.0) {
                        let permit = ReadPermit {
                            offset,
                            since_leader_contact: None,
                        };
                        let _ = r.send(Ok(permit));
                    }
                }
                Event::ReadFailed { id, error } => {
                    if let Some(r) = self.reads.remove(&id.0) {
                        let _ = r.send(Err(error.into()));
                    }
                }
            }
        }
        let keep_from = self.apply_sent.min(self.replica.durable_end());
        self.cache.evict(self.options.cache_bytes_max, keep_from);
    }

    fn feed_applier(&mut self) {
        if self.apply_sent >= self.high_watermark {
            return;
        }
        let (from, to) = (self.apply_sent, self.high_watermark);
        let job = match self.cache.read(from, to, u64::MAX) {
            Some(records) if records.last().map(|r| r.offset.next()) == Some(to) => {
                ApplyJob::Records(records)
            }
            _ => ApplyJob::FromLog {
                log: self.parts.log.clone(),
                from,
                to,
            },
        };
        self.apply_sent = to;
        let _ = self.applier.send(job);
    }

    fn send(&mut self, msg: Outgoing) {
        match msg {
            Outgoing::Request { to, id, request } => {
                self.metrics.rpcs_sent.fetch_add(1, Ordering::Relaxed);
                let transport = self.parts.transport.clone();
                let done = self.done_tx.clone();
                let timeout = self.cfg.request_timeout;
                tokio::spawn(async move {
                    let result = transport.call(to, request, timeout).await;
                    let _ = done.send(Done::Rpc { to, id, result }).await;
                });
            }
            Outgoing::Response {
                to,
                id,
                mut response,
                records,
            } => {
                let Some(RecordRange {
                    from,
                    to: end,
                    max_bytes,
                }) = records
                else {
                    self.reply(id, response);
                    return;
                };
                if let Some(recs) = self.cache.read(from, end, u64::from(max_bytes)) {
                    if let Response::Fetch(f) = &mut response {
                        f.records = recs;
                    }
                    self.reply(id, response);
                    return;
                }
                // Older than the cache: read from the log store without blocking the task.
                let log = self.parts.log.clone();
                let done = self.done_tx.clone();
                tokio::spawn(async move {
                    let records = log.read(from, end, u64::from(max_bytes)).await;
                    let _ = done
                        .send(Done::OldRecords {
                            to,
                            id,
                            response,
                            records,
                        })
                        .await;
                });
            }
        }
    }
}

fn forwarded_result(leader: ReplicaId, r: ForwardResponse) -> Result<Committed, WriteError> {
    match (r.error, r.committed) {
        (None, Some(id)) => Ok(Committed {
            id,
            response: r.response,
        }),
        (Some(ErrorCode::WriteLost), Some(id)) => Err(WriteError::Lost(id)),
        (Some(ErrorCode::QueueFull), _) => {
            Err(WriteError::Refused(ProposeError::QueueFull { max: 0 }))
        }
        (Some(ErrorCode::TooLarge), _) => Err(WriteError::Refused(ProposeError::TooLarge {
            len: 0,
            max: 0,
        })),
        _ => Err(WriteError::Refused(ProposeError::NotLeader {
            epoch: r.epoch,
            leader: r.leader.or(Some(leader)),
        })),
    }
}

/// Applies log operations in order. Consecutive appends queued together go to storage as one
/// call, so one sync covers them all (group commit).
fn spawn_log_writer(
    log: Arc<dyn LogStore>,
    done: mpsc::Sender<Done>,
    metrics: Arc<Metrics>,
) -> mpsc::UnboundedSender<LogOp> {
    let (tx, mut rx) = mpsc::unbounded_channel::<LogOp>();
    tokio::spawn(async move {
        let mut queue: Vec<LogOp> = Vec::new();
        while let Some(op) = rx.recv().await {
            queue.push(op);
            while let Ok(op) = rx.try_recv() {
                queue.push(op);
            }
            let mut last = None;
            let mut batch: Vec<Record> = Vec::new();
            for op in queue.drain(..) {
                let result = match op {
                    LogOp::Append { seq, records } => {
                        batch.extend(records);
                        last = Some(seq);
                        Ok(())
                    }
                    LogOp::Truncate { seq, end } => {
                        let flushed = flush_batch(&*log, &mut batch, &metrics).await;
                        last = Some(seq);
                        match flushed {
                            Ok(()) => log.truncate(end).await,
                            Err(e) => Err(e),
                        }
                    }
                };
                if let Err(e) = result {
                    let _ = done.send(Done::Log(Err(e))).await;
                    return;
                }
            }
            if let Err(e) = flush_batch(&*log, &mut batch, &metrics).await {
                let _ = done.send(Done::Log(Err(e))).await;
                return;
            }
            if let Some(seq) = last {
                if done.send(Done::Log(Ok(seq))).await.is_err() {
                    return;
                }
            }
        }
    });
    tx
}

async fn flush_batch(
    log: &dyn LogStore,
    batch: &mut Vec<Record>,
    metrics: &Metrics,
) -> Result<(), StorageError> {
    if batch.is_empty() {
        return Ok(());
    }
    log.append(batch).await?;
    metrics.log_syncs.fetch_add(1, Ordering::Relaxed);
    metrics
        .log_records
        .fetch_add(batch.len() as u64, Ordering::Relaxed);
    batch.clear();
    Ok(())
}

/// Saves election states; when several are queued only the latest is written (it supersedes
/// the others, and reporting its sequence number covers theirs).
fn spawn_election_writer(
    store: Arc<dyn ElectionStore>,
    done: mpsc::Sender<Done>,
    metrics: Arc<Metrics>,
) -> mpsc::UnboundedSender<(PersistSeq, ElectionState)> {
    let (tx, mut rx) = mpsc::unbounded_channel::<(PersistSeq, ElectionState)>();
    tokio::spawn(async move {
        while let Some(mut latest) = rx.recv().await {
            while let Ok(next) = rx.try_recv() {
                latest = next;
            }
            let result = store.save(&latest.1).await.map(|()| latest.0);
            metrics.election_saves.fetch_add(1, Ordering::Relaxed);
            let failed = result.is_err();
            if done.send(Done::Election(result)).await.is_err() || failed {
                return;
            }
        }
    });
    tx
}

enum ApplyJob {
    Records(Vec<Record>),
    FromLog {
        log: Arc<dyn LogStore>,
        from: Offset,
        to: Offset,
    },
}

fn spawn_applier(
    sm: Arc<dyn StateMachine>,
    done: mpsc::Sender<Done>,
    metrics: Arc<Metrics>,
) -> mpsc::UnboundedSender<ApplyJob> {
    let (tx, mut rx) = mpsc::unbounded_channel::<ApplyJob>();
    tokio::spawn(async move {
        let mut responses = Vec::new();
        while let Some(job) = rx.recv().await {
            let records = match job {
                ApplyJob::Records(r) => r,
                ApplyJob::FromLog { log, from, to } => {
                    let mut all = Vec::new();
                    let mut next = from;
                    while next < to {
                        match log.read(next, to, 8 << 20).await {
                            Ok(chunk) if !chunk.is_empty() => {
                                next = chunk.last().map_or(to, |r| r.offset.next());
                                all.extend(chunk);
                            }
                            Ok(_) => break,
                            Err(e) => {
                                let _ = done.send(Done::Applied(Err(e.to_string()))).await;
                                return;
                            }
                        }
                    }
                    all
                }
            };
            responses.clear();
            if let Err(e) = sm.apply(&records, &mut responses).await {
                let _ = done.send(Done::Applied(Err(e.to_string()))).await;
                return;
            }
            metrics
                .applied
                .fetch_add(records.len() as u64, Ordering::Relaxed);
            let applied: Vec<(OffsetAndEpoch, Bytes)> = records
                .iter()
                .zip(responses.drain(..).chain(std::iter::repeat(Bytes::new())))
                .map(|(r, resp)| (r.id(), resp))
                .collect();
            if done.send(Done::Applied(Ok(applied))).await.is_err() {
                return;
            }
        }
    });
    tx
}
