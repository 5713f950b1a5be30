//! The tokio driver: runs one [`Replica`] over the [`crate::io`] traits. This is what a library
//! user embeds: [`Node::start`] with a log, an election store, a snapshot store, a transport and a
//! state machine, then [`Node::propose`], [`Node::status`] and [`Node::shutdown`].
//!
//! One task owns the replica and follows the driver contract of [`crate::protocol`]. Around it:
//! a log writer task (applies log operations in order and coalesces consecutive appends into one
//! durable call: group commit), an election writer task, an applier task feeding the state
//! machine (and taking snapshots of it when `Config`'s triggers fire), a snapshot writer task
//! for downloads, and one short task per outgoing RPC. A bounded in-memory cache of the log's tail
//! serves fetch responses and the applier without touching storage; older ranges are read from
//! the log store. Every channel is bounded.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

use crate::config::ValidatedConfig;
use crate::io::{
    ElectionStore, LogState, LogStore, RequestHandler, SnapshotStore, StateMachine, StorageError,
    Transport,
};
use crate::message::{ErrorCode, Request, RequestId, Response};
use crate::message::{ForwardRequest, ForwardResponse};
use crate::protocol::{
    Event, Fill, Input, LogOp, LogSeq, Outgoing, Outputs, PersistSeq, ProposeError, ReadFailure,
    ReadId, RecordRange, Replica, SnapshotOp, Status, TransferError,
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
    /// State machine snapshots.
    pub snapshots: Arc<dyn SnapshotStore>,
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
    /// The state machine could not be restored from the latest snapshot.
    #[error("restoring the state machine failed: {0}")]
    Restore(#[from] crate::io::StateMachineError),
    /// The state machine is behind the log's start and no snapshot covers the gap.
    #[error("the state machine has applied up to {applied} but the log starts at {log_start} and no snapshot covers the gap")]
    MissingSnapshot {
        /// Where the state machine is.
        applied: Offset,
        /// Where the log starts.
        log_start: Offset,
    },
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
    /// Snapshots of the state machine taken locally.
    pub snapshots_taken: AtomicU64,
    /// Snapshots downloaded from a leader and installed.
    pub snapshots_installed: AtomicU64,
    /// Snapshot chunks served to followers.
    pub snapshot_chunks_served: AtomicU64,
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
    Transfer {
        to: ReplicaId,
        reply: oneshot::Sender<Result<(), TransferError>>,
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
    /// A response whose data came from storage.
    Filled {
        id: RequestId,
        response: Result<Response, StorageError>,
    },
    SnapshotTaken(Result<OffsetAndEpoch, String>),
    Restored(Result<OffsetAndEpoch, String>),
    SnapshotDownloaded(Result<(OffsetAndEpoch, bool), StorageError>),
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
        let snapshot = parts.snapshots.latest().await?;
        let mut log_state = parts.log.state().await?;
        if let Some(snap) = snapshot {
            if !log_continues_snapshot(&log_state, snap.id) {
                // A crash between completing a downloaded snapshot and resetting the log (or
                // a log that was behind it): the snapshot is committed state, the log is not.
                parts.log.reset(snap.id).await?;
                log_state = parts.log.state().await?;
            }
        }
        let mut applied = parts.state_machine.applied().await;
        if let Some(snap) = snapshot.filter(|s| s.id.offset > applied) {
            let data =
                parts.snapshots.load(snap.id).await?.ok_or_else(|| {
                    StorageError::Invalid(format!("snapshot {:?} vanished", snap.id))
                })?;
            parts.state_machine.restore(snap.id.offset, data).await?;
            applied = snap.id.offset;
        }
        if applied < log_state.start {
            return Err(StartError::MissingSnapshot {
                applied,
                log_start: log_state.start,
            });
        }
        let clock = tokio::time::Instant::now();
        let replica = Replica::new(
            cfg.clone(),
            election,
            &log_state,
            snapshot.map(|s| s.id),
            options.seed,
            Instant(0),
        );
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
        let applier = spawn_applier(Applier {
            sm: parts.state_machine.clone(),
            snapshots: parts.snapshots.clone(),
            triggers: SnapshotTriggers::of(&cfg),
            done: done_tx.clone(),
            metrics: metrics.clone(),
        });
        let snapshot_writer = spawn_snapshot_writer(parts.snapshots.clone(), done_tx.clone());
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
            waiters: Waiters::default(),
            apply_sent: applied,
            applied,
            high_watermark: Offset::ZERO,
            log_writer,
            election_writer,
            applier,
            snapshot_writer,
            done_tx,
            metrics: metrics.clone(),
            failed: None,
            shutdown: None,
            reads: HashMap::new(),
            next_read: 1,
            transfer: None,
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

    /// Hands leadership to voter `to` (on the leader): new writes are refused while the target
    /// catches up, then this replica resigns with `to` as its preferred successor and `to`
    /// campaigns at once. Returns once the handover has started; the target is normally leader
    /// one vote round later. Fails if this replica does not lead, `to` is not another voter, or
    /// the target does not catch up within one election timeout (the leader then carries on).
    pub async fn transfer_leadership(&self, to: ReplicaId) -> Result<(), TransferError> {
        let (reply, rx) = oneshot::channel();
        self.commands
            .send(Command::Transfer { to, reply })
            .await
            .map_err(|_| TransferError::ShuttingDown)?;
        rx.await.unwrap_or(Err(TransferError::ShuttingDown))
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
            Err(WriteError::Refused(ProposeError::Transferring { .. })) => {
                // Retriable: the forwarder learns the new leader once the handover is done.
                resp.error = Some(ErrorCode::NotLeader);
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

/// Where a proposal's caller waits for its result.
type Reply = oneshot::Sender<Result<Committed, WriteError>>;

/// Proposals waiting to be applied, by offset (ascending, one per offset). Proposals arrive in
/// offset order and apply in offset order, so the common cases are a push at the back and a pop
/// at the front: cheaper than a map, which the driver paid for on every write. Other orders
/// (a proposal below a waiting one, a record applied past a waiter that will never apply) are
/// handled by searching, with the same results a map would give.
#[derive(Default)]
struct Waiters(VecDeque<(Offset, Epoch, Reply)>);

impl Waiters {
    /// Adds the waiter of `offset`, replacing (and dropping) any waiter already there.
    fn insert(&mut self, offset: Offset, epoch: Epoch, reply: Reply) {
        match self.0.back() {
            Some((last, _, _)) if *last >= offset => {
                match self.0.binary_search_by_key(&offset, |(o, _, _)| *o) {
                    Ok(i) => self.0[i] = (offset, epoch, reply),
                    Err(i) => self.0.insert(i, (offset, epoch, reply)),
                }
            }
            _ => self.0.push_back((offset, epoch, reply)),
        }
    }

    /// Removes and returns the waiter of `offset`, if any.
    fn take(&mut self, offset: Offset) -> Option<(Epoch, Reply)> {
        let (first, _, _) = self.0.front()?;
        if *first == offset {
            return self.0.pop_front().map(|(_, e, r)| (e, r));
        }
        if *first > offset {
            return None;
        }
        let i = self.0.binary_search_by_key(&offset, |(o, _, _)| *o).ok()?;
        self.0.remove(i).map(|(_, e, r)| (e, r))
    }

    /// Removes and returns the waiters at or above `from`, in offset order.
    fn split_off(&mut self, from: Offset) -> VecDeque<(Offset, Epoch, Reply)> {
        let i = self.0.partition_point(|(o, _, _)| *o < from);
        self.0.split_off(i)
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
    waiters: Waiters,
    /// Records below this were handed to the applier.
    apply_sent: Offset,
    /// Records below this are applied.
    applied: Offset,
    high_watermark: Offset,
    log_writer: mpsc::UnboundedSender<GatedLogOp>,
    election_writer: mpsc::UnboundedSender<(PersistSeq, ElectionState)>,
    applier: mpsc::UnboundedSender<ApplyJob>,
    snapshot_writer: mpsc::UnboundedSender<SnapshotOp>,
    done_tx: mpsc::Sender<Done>,
    metrics: Arc<Metrics>,
    failed: Option<String>,
    shutdown: Option<(tokio::time::Instant, oneshot::Sender<()>)>,
    reads: HashMap<u64, oneshot::Sender<Result<ReadPermit, ReadError>>>,
    next_read: u64,
    /// The caller of a leadership transfer in progress.
    transfer: Option<oneshot::Sender<Result<(), TransferError>>>,
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
        // One timer for the task's life, moved only when the deadline changes: a new `Sleep`
        // per loop turn registered and cancelled a timer entry for every message handled.
        let timer = tokio::time::sleep_until(self.clock);
        tokio::pin!(timer);
        loop {
            let deadline = self.replica.next_deadline();
            let sleep_until = self.clock + Duration::from_nanos(deadline.0.min(u64::MAX / 4));
            let sleep_until = match &self.shutdown {
                Some((until, _)) => sleep_until.min(*until),
                None => sleep_until,
            };
            if timer.deadline() != sleep_until || timer.is_elapsed() {
                timer.as_mut().reset(sleep_until);
            }
            tokio::select! {
                _ = &mut timer => self.step(Input::Tick),
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
        for (_, _, w) in std::mem::take(&mut self.waiters).0 {
            let _ = w.send(Err(err.clone()));
        }
        for (_, r) in std::mem::take(&mut self.reads) {
            let _ = r.send(Err(ReadError::ShuttingDown));
        }
        if let Some(t) = self.transfer.take() {
            let _ = t.send(Err(TransferError::ShuttingDown));
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
                        self.waiters.insert(id.offset, id.epoch, reply);
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
            Command::Transfer { to, reply } => {
                let now = self.now();
                match self.replica.transfer_leadership(now, to, &mut self.out) {
                    // The core allows one transfer at a time, so one caller waits at most.
                    Ok(()) => self.transfer = Some(reply),
                    Err(e) => {
                        let _ = reply.send(Err(e));
                    }
                }
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
            Done::Filled { id, response } => match response {
                Ok(response) => self.reply(id, response),
                Err(e) => {
                    tracing::error!(error = %e, "reading a snapshot failed; stopping");
                    self.failed = Some(e.to_string());
                }
            },
            Done::SnapshotTaken(Ok(id)) => {
                self.metrics.snapshots_taken.fetch_add(1, Ordering::Relaxed);
                tracing::info!(replica = %self.cfg.id, snapshot = ?id, "snapshot taken");
                self.step(Input::SnapshotTaken(id));
            }
            Done::Restored(Ok(id)) => {
                self.metrics
                    .snapshots_installed
                    .fetch_add(1, Ordering::Relaxed);
                self.applied = self.applied.max(id.offset);
                let applied = self.applied.min(self.replica.high_watermark());
                self.step(Input::Applied(applied));
            }
            Done::SnapshotTaken(Err(e)) | Done::Restored(Err(e)) => {
                tracing::error!(error = %e, "snapshot failed; stopping");
                self.failed = Some(e);
            }
            Done::SnapshotDownloaded(Ok((id, verified))) => {
                self.step(Input::SnapshotDownloaded { id, verified })
            }
            Done::SnapshotDownloaded(Err(e)) => {
                tracing::error!(error = %e, "storing a snapshot download failed; stopping");
                self.failed = Some(e.to_string());
            }
        }
    }

    fn applied_done(&mut self, applied: Vec<(OffsetAndEpoch, Bytes)>) {
        for (id, response) in applied {
            self.applied = id.offset.next();
            if let Some((epoch, w)) = self.waiters.take(id.offset) {
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
        let restore = out.restore.take();
        for op in out.log.drain(..) {
            let mut gate = None;
            match &op {
                LogOp::Purge { .. } => {}
                LogOp::Reset { start, .. } => {
                    self.cache = LogCache::new(start.offset);
                    // The log may be reset only once the applier is done with the records
                    // before the snapshot (it may still be reading them from the log).
                    let (reached, wait) = oneshot::channel();
                    gate = Some(wait);
                    debug_assert_eq!(restore, Some(*start), "a reset comes with its restore");
                    self.apply_sent = start.offset;
                    let _ = self.applier.send(ApplyJob::Restore {
                        id: *start,
                        reached,
                    });
                }
                LogOp::Append { records, .. } => self.cache.append(records),
                LogOp::Truncate { end, .. } => {
                    self.cache.truncate(*end);
                    // Writes waiting at truncated offsets are lost.
                    for (o, epoch, w) in self.waiters.split_off(*end) {
                        let _ = w.send(Err(WriteError::Lost(OffsetAndEpoch::new(o, epoch))));
                    }
                }
            }
            let _ = self.log_writer.send(GatedLogOp { op, gate });
        }
        for op in out.snapshot.drain(..) {
            let _ = self.snapshot_writer.send(op);
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
                    // The tail is in offset order and above what stays: kept entries go back
                    // at the end in order.
                    for (o, e, w) in self.waiters.split_off(from) {
                        if e == epoch {
                            let _ = w.send(Err(WriteError::Lost(OffsetAndEpoch::new(o, e))));
                        } else {
                            self.waiters.0.push_back((o, e, w));
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
                Event::TransferEnded { to, result } => {
                    tracing::info!(replica = %self.cfg.id, target = %to, ?result, "transfer ended");
                    if let Some(t) = self.transfer.take() {
                        let _ = t.send(result);
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
        // Below the cache everything is durable in the store and no queued operation touches
        // it; from the cache's start on, the store may lag behind the log writer's queue (an
        // append not yet written, a truncation not yet done), so those records come from the
        // cache, which holds every record from its start to the log end.
        let split = to.min(self.cache.start).max(from);
        if from < split {
            let _ = self.applier.send(ApplyJob::FromLog {
                log: self.parts.log.clone(),
                from,
                to: split,
            });
        }
        if split < to {
            let records = self
                .cache
                .read(split, to, u64::MAX)
                .expect("the cache holds every record from its start to the log end");
            assert_eq!(
                records.last().map(|r| r.offset.next()),
                Some(to),
                "the high watermark never passes the log end"
            );
            let _ = self.applier.send(ApplyJob::Records(records));
        }
        self.apply_sent = to;
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
                fill,
            } => {
                let (from, end, max_bytes) = match fill {
                    None => {
                        self.reply(id, response);
                        return;
                    }
                    Some(Fill::SnapshotChunk {
                        id: snapshot,
                        position,
                        max_bytes,
                    }) => {
                        self.metrics
                            .snapshot_chunks_served
                            .fetch_add(1, Ordering::Relaxed);
                        let store = self.parts.snapshots.clone();
                        let done = self.done_tx.clone();
                        tokio::spawn(async move {
                            let chunk = store.read(snapshot, position, max_bytes).await;
                            let response = chunk.map(|c| fill_snapshot_chunk(response, c));
                            let _ = done.send(Done::Filled { id, response }).await;
                        });
                        return;
                    }
                    Some(Fill::Records(RecordRange {
                        from,
                        to: end,
                        max_bytes,
                    })) => (from, end, max_bytes),
                };
                if let Some(recs) = self.cache.read(from, end, u64::from(max_bytes)) {
                    if let Response::Fetch(f) = &mut response {
                        f.records = recs;
                    }
                    self.reply(id, response);
                    return;
                }
                // Older than the cache: read from the log store without blocking the task,
                // only below the cache, where the store holds exactly the log (above it a
                // queued truncation may not have reached the store yet). The follower fetches
                // the rest next time.
                let end = end.min(self.cache.start);
                let log = self.parts.log.clone();
                let done = self.done_tx.clone();
                tokio::spawn(async move {
                    let records = read_for_fetch(&*log, from, end, max_bytes).await;
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
        // The replica no longer leads; it names the leader it knows, if any. None (an election
        // or a leadership transfer under way) is "no leader known", which callers retry; it
        // must not fall back to naming the replica that just said it does not lead.
        (Some(ErrorCode::NotLeader), _) => Err(WriteError::Refused(ProposeError::NotLeader {
            epoch: r.epoch,
            leader: r.leader,
        })),
        _ => Err(WriteError::Refused(ProposeError::NotLeader {
            epoch: r.epoch,
            leader: r.leader.or(Some(leader)),
        })),
    }
}

/// A log operation, possibly held until a gate opens (a reset waits for the applier).
struct GatedLogOp {
    op: LogOp,
    gate: Option<oneshot::Receiver<()>>,
}

/// Applies log operations in order. Consecutive appends queued together go to storage as one
/// call, so one sync covers them all (group commit).
fn spawn_log_writer(
    log: Arc<dyn LogStore>,
    done: mpsc::Sender<Done>,
    metrics: Arc<Metrics>,
) -> mpsc::UnboundedSender<GatedLogOp> {
    let (tx, mut rx) = mpsc::unbounded_channel::<GatedLogOp>();
    tokio::spawn(async move {
        let mut queue: Vec<GatedLogOp> = Vec::new();
        let mut batch: Vec<Record> = Vec::new();
        while let Some(op) = rx.recv().await {
            queue.push(op);
            while let Ok(op) = rx.try_recv() {
                queue.push(op);
            }
            let mut last = None;
            for GatedLogOp { op, gate } in queue.drain(..) {
                let result = match op {
                    LogOp::Append { seq, records } => {
                        // Most rounds hold one append: take its records as they are rather
                        // than copying them into a fresh batch.
                        if batch.is_empty() {
                            batch = records;
                        } else {
                            batch.extend(records);
                        }
                        last = Some(seq);
                        Ok(())
                    }
                    LogOp::Truncate { seq, end } => {
                        last = Some(seq);
                        match flush_batch(&*log, &mut batch, &metrics).await {
                            Ok(()) => log.truncate(end).await,
                            Err(e) => Err(e),
                        }
                    }
                    LogOp::Purge { seq, start } => {
                        last = Some(seq);
                        match flush_batch(&*log, &mut batch, &metrics).await {
                            Ok(()) => log.purge(start).await,
                            Err(e) => Err(e),
                        }
                    }
                    LogOp::Reset { seq, start } => {
                        last = Some(seq);
                        match flush_batch(&*log, &mut batch, &metrics).await {
                            Ok(()) => {
                                if let Some(gate) = gate {
                                    // A dropped gate means the applier stopped: stop too.
                                    if gate.await.is_err() {
                                        return;
                                    }
                                }
                                log.reset(start).await
                            }
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

/// Reads the records of a fetch response. A snapshot may have purged the range after the core
/// chose it: then the answer carries no records, and the fetcher's retry is sent the snapshot's
/// id. Any other failure is a storage failure.
async fn read_for_fetch(
    log: &dyn LogStore,
    from: Offset,
    to: Offset,
    max_bytes: u32,
) -> Result<Vec<Record>, StorageError> {
    match log.read(from, to, u64::from(max_bytes)).await {
        Err(StorageError::Invalid(_)) if log.state().await.is_ok_and(|s| from < s.start) => {
            Ok(Vec::new())
        }
        other => other,
    }
}

/// Whether `log` carries on from snapshot `id`: the snapshot's end lies inside it and the
/// record before that end has the snapshot's epoch.
fn log_continues_snapshot(log: &LogState, id: OffsetAndEpoch) -> bool {
    if id.offset < log.start || id.offset > log.end.offset {
        return false;
    }
    if id.offset == log.start {
        return log.start_epoch == id.epoch;
    }
    let before = Offset(id.offset.0 - 1);
    let idx = log.epochs.partition_point(|e| e.start <= before);
    idx > 0 && log.epochs[idx - 1].epoch == id.epoch
}

/// Completes a FetchSnapshot response with a chunk read from the store, or refuses it.
fn fill_snapshot_chunk(
    response: Response,
    chunk: Option<(crate::io::SnapshotMeta, Bytes)>,
) -> Response {
    let Response::FetchSnapshot(mut r) = response else {
        return response;
    };
    match chunk {
        None => r.error = Some(ErrorCode::SnapshotNotFound),
        Some((meta, _)) if r.position > meta.size => r.error = Some(ErrorCode::PositionOutOfRange),
        Some((meta, data)) => {
            r.size = meta.size;
            r.checksum = meta.checksum;
            r.data = data;
        }
    }
    Response::FetchSnapshot(r)
}

/// Writes the chunks of a snapshot download in order and completes it.
fn spawn_snapshot_writer(
    store: Arc<dyn SnapshotStore>,
    done: mpsc::Sender<Done>,
) -> mpsc::UnboundedSender<SnapshotOp> {
    let (tx, mut rx) = mpsc::unbounded_channel::<SnapshotOp>();
    tokio::spawn(async move {
        while let Some(op) = rx.recv().await {
            let result = match op {
                SnapshotOp::Write { id, position, data } => {
                    store.write_partial(id, position, data).await.map(|()| None)
                }
                SnapshotOp::Finish { id, size, checksum } => store
                    .finish_partial(id, size, checksum)
                    .await
                    .map(|meta| Some((id, meta.is_some()))),
            };
            let report = match result {
                Ok(None) => continue,
                Ok(Some(outcome)) => Ok(outcome),
                Err(e) => Err(e),
            };
            let failed = report.is_err();
            if done.send(Done::SnapshotDownloaded(report)).await.is_err() || failed {
                return;
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
    /// Open `reached` (every earlier job is done), then load snapshot `id` into the state
    /// machine.
    Restore {
        id: OffsetAndEpoch,
        reached: oneshot::Sender<()>,
    },
}

/// When the applier takes a snapshot (`Config::snapshot_after_*`).
struct SnapshotTriggers {
    records: u64,
    bytes: u64,
    every: Duration,
    /// When the last snapshot was taken or restored (or the applier started).
    last: std::time::Instant,
    /// Applied since the last snapshot.
    records_since: u64,
    bytes_since: u64,
}

impl SnapshotTriggers {
    fn of(cfg: &ValidatedConfig) -> SnapshotTriggers {
        SnapshotTriggers {
            records: cfg.snapshot_after_records,
            bytes: cfg.snapshot_after_bytes,
            every: cfg.snapshot_after_time,
            last: std::time::Instant::now(),
            records_since: 0,
            bytes_since: 0,
        }
    }

    fn applied(&mut self, records: &[Record]) {
        self.records_since += records.len() as u64;
        self.bytes_since += records.iter().map(|r| r.payload.len() as u64).sum::<u64>();
    }

    fn due(&self) -> bool {
        (self.records > 0 && self.records_since >= self.records)
            || (self.bytes > 0 && self.bytes_since >= self.bytes)
            || (!self.every.is_zero()
                && self.records_since > 0
                && self.last.elapsed() >= self.every)
    }

    fn reset(&mut self) {
        self.records_since = 0;
        self.bytes_since = 0;
        self.last = std::time::Instant::now();
    }
}

struct Applier {
    sm: Arc<dyn StateMachine>,
    snapshots: Arc<dyn SnapshotStore>,
    triggers: SnapshotTriggers,
    done: mpsc::Sender<Done>,
    metrics: Arc<Metrics>,
}

impl Applier {
    async fn read_log(
        log: &dyn LogStore,
        from: Offset,
        to: Offset,
    ) -> Result<Vec<Record>, StorageError> {
        let mut all = Vec::new();
        let mut next = from;
        while next < to {
            let chunk = log.read(next, to, 8 << 20).await?;
            // A short or gapped read would silently skip records: the state machine must see
            // every committed record exactly once, in order.
            if chunk.first().map(|r| r.offset) != Some(next)
                || chunk.windows(2).any(|w| w[1].offset != w[0].offset.next())
            {
                return Err(StorageError::Invalid(format!(
                    "the log returned no contiguous records at {next} for the state machine"
                )));
            }
            next = chunk.last().map_or(next, |r| r.offset.next());
            all.extend(chunk);
        }
        Ok(all)
    }

    /// Applies one job; returns `false` once the applier must stop.
    async fn run_job(
        &mut self,
        job: ApplyJob,
        last: &mut Option<OffsetAndEpoch>,
        responses: &mut Vec<Bytes>,
    ) -> bool {
        let records = match job {
            ApplyJob::Records(r) => r,
            ApplyJob::FromLog { log, from, to } => match Self::read_log(&*log, from, to).await {
                Ok(r) => r,
                Err(e) => {
                    let _ = self.done.send(Done::Applied(Err(e.to_string()))).await;
                    return false;
                }
            },
            ApplyJob::Restore { id, reached } => {
                let _ = reached.send(());
                let result = self.restore(id).await.map(|()| id);
                let ok = result.is_ok();
                if ok {
                    *last = Some(id);
                    self.triggers.reset();
                }
                return self.done.send(Done::Restored(result)).await.is_ok() && ok;
            }
        };
        responses.clear();
        if let Err(e) = self.sm.apply(&records, responses).await {
            let _ = self.done.send(Done::Applied(Err(e.to_string()))).await;
            return false;
        }
        self.metrics
            .applied
            .fetch_add(records.len() as u64, Ordering::Relaxed);
        self.triggers.applied(&records);
        if let Some(r) = records.last() {
            *last = Some(OffsetAndEpoch::new(r.offset.next(), r.epoch));
        }
        let applied: Vec<(OffsetAndEpoch, Bytes)> = records
            .iter()
            .zip(responses.drain(..).chain(std::iter::repeat(Bytes::new())))
            .map(|(r, resp)| (r.id(), resp))
            .collect();
        if self.done.send(Done::Applied(Ok(applied))).await.is_err() {
            return false;
        }
        match *last {
            Some(id) if self.triggers.due() => {
                self.triggers.reset();
                let result = self.take_snapshot(id).await;
                let ok = result.is_ok();
                self.done.send(Done::SnapshotTaken(result)).await.is_ok() && ok
            }
            _ => true,
        }
    }

    async fn restore(&self, id: OffsetAndEpoch) -> Result<(), String> {
        let data = self
            .snapshots
            .load(id)
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("snapshot {id:?} is not in the store"))?;
        self.sm
            .restore(id.offset, data)
            .await
            .map_err(|e| e.to_string())
    }

    /// Snapshots the state machine, which has applied exactly the records below `id.offset`.
    async fn take_snapshot(&self, id: OffsetAndEpoch) -> Result<OffsetAndEpoch, String> {
        let data = self.sm.snapshot().await.map_err(|e| e.to_string())?;
        self.snapshots
            .save(id, data)
            .await
            .map_err(|e| e.to_string())?;
        Ok(id)
    }
}

fn spawn_applier(mut applier: Applier) -> mpsc::UnboundedSender<ApplyJob> {
    let (tx, mut rx) = mpsc::unbounded_channel::<ApplyJob>();
    tokio::spawn(async move {
        let mut responses = Vec::new();
        // The id of the last record applied; a snapshot is taken only after this process
        // applied at least one record (it then knows the epoch the snapshot ends with).
        let mut last: Option<OffsetAndEpoch> = None;
        while let Some(job) = rx.recv().await {
            if !applier.run_job(job, &mut last, &mut responses).await {
                return;
            }
        }
    });
    tx
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_forward_refused_without_a_known_leader_names_no_leader() {
        // A leader handing over (or a replica that lost leadership and knows no successor)
        // answers NotLeader without a leader: the write must come back as "no leader known",
        // which the node retries, not as "the leader is the replica that refused".
        let refused = ForwardResponse {
            error: Some(ErrorCode::NotLeader),
            epoch: Epoch(3),
            leader: None,
            committed: None,
            response: Bytes::new(),
        };
        assert_eq!(
            forwarded_result(ReplicaId(1), refused.clone()),
            Err(WriteError::Refused(ProposeError::NotLeader {
                epoch: Epoch(3),
                leader: None
            }))
        );
        let redirected = ForwardResponse {
            leader: Some(ReplicaId(2)),
            ..refused
        };
        assert_eq!(
            forwarded_result(ReplicaId(1), redirected),
            Err(WriteError::Refused(ProposeError::NotLeader {
                epoch: Epoch(3),
                leader: Some(ReplicaId(2))
            }))
        );
    }

    use super::*;
    use crate::mem::MemLog;
    use crate::RecordKind;

    fn waiter(
        waiters: &mut Waiters,
        offset: u64,
        epoch: u32,
    ) -> oneshot::Receiver<Result<Committed, WriteError>> {
        let (tx, rx) = oneshot::channel();
        waiters.insert(Offset(offset), Epoch(epoch), tx);
        rx
    }

    fn offsets(waiters: &Waiters) -> Vec<u64> {
        waiters.0.iter().map(|(o, _, _)| o.0).collect()
    }

    #[test]
    fn waiters_stay_in_offset_order_whatever_the_insertion_order() {
        let mut w = Waiters::default();
        let _a = waiter(&mut w, 5, 1);
        let _b = waiter(&mut w, 7, 1);
        let _c = waiter(&mut w, 6, 1);
        let _d = waiter(&mut w, 2, 1);
        assert_eq!(offsets(&w), vec![2, 5, 6, 7]);
        // A second waiter at an offset replaces the first, whose caller learns it is gone.
        let mut replaced = waiter(&mut w, 0, 1);
        let _e = waiter(&mut w, 0, 2);
        assert_eq!(offsets(&w), vec![0, 2, 5, 6, 7]);
        assert!(
            matches!(
                replaced.try_recv(),
                Err(oneshot::error::TryRecvError::Closed)
            ),
            "the replaced sender was dropped"
        );
        assert_eq!(w.0[0].1, Epoch(2));
    }

    #[test]
    fn waiters_are_taken_by_offset_at_the_front_or_further_in() {
        let mut w = Waiters::default();
        let _r: Vec<_> = [3, 4, 6, 9].iter().map(|o| waiter(&mut w, *o, 1)).collect();
        assert!(w.take(Offset(1)).is_none(), "below every waiter");
        assert!(w.take(Offset(3)).is_some());
        assert_eq!(offsets(&w), vec![4, 6, 9]);
        // Past a waiter that never applied: found by searching, the one below stays.
        assert!(w.take(Offset(6)).is_some());
        assert!(w.take(Offset(7)).is_none());
        assert_eq!(offsets(&w), vec![4, 9]);
        assert!(w.take(Offset(4)).is_some());
        assert!(w.take(Offset(9)).is_some());
        assert!(w.take(Offset(9)).is_none());
        assert!(w.0.is_empty());
    }

    #[test]
    fn waiters_split_off_everything_at_or_above_an_offset() {
        let mut w = Waiters::default();
        let _r: Vec<_> = [1, 2, 4, 5].iter().map(|o| waiter(&mut w, *o, 1)).collect();
        let tail: Vec<u64> = w.split_off(Offset(3)).iter().map(|(o, _, _)| o.0).collect();
        assert_eq!(tail, vec![4, 5]);
        assert_eq!(offsets(&w), vec![1, 2]);
        assert!(w.split_off(Offset(9)).is_empty());
        assert_eq!(w.split_off(Offset(0)).len(), 2);
        assert!(w.0.is_empty());
    }

    #[tokio::test]
    async fn a_fetch_of_a_range_purged_meanwhile_gets_no_records_not_a_failure() {
        let log = MemLog::new();
        let records: Vec<Record> = (0..10)
            .map(|o| Record {
                offset: Offset(o),
                epoch: Epoch(1),
                kind: RecordKind::Data,
                payload: Bytes::from_static(b"x"),
            })
            .collect();
        log.append(&records).await.expect("append");
        log.purge(Offset(6)).await.expect("purge");
        let purged = read_for_fetch(&log, Offset(2), Offset(10), 1 << 20).await;
        assert_eq!(purged.expect("no failure"), Vec::new());
        let live = read_for_fetch(&log, Offset(6), Offset(10), 1 << 20).await;
        assert_eq!(live.expect("read").len(), 4);
        let beyond = read_for_fetch(&log, Offset(12), Offset(14), 1 << 20).await;
        assert!(
            matches!(beyond, Err(StorageError::Invalid(_))),
            "a range past the end is still an error"
        );
    }
}
