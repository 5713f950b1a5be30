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

mod applier;
mod batching;
pub mod bootstrap;
mod election_writer;
mod events;
mod forward;
pub mod host;
mod log_writer;
mod membership;
pub mod outcome;
mod pin;
pub mod progress;
#[cfg(test)]
mod progress_tests;
mod reachability;
mod replica_task;
mod session;
mod snapshot_writer;
mod stamp;
mod supervise;
mod tail_cache;
mod task_messages;
mod waiters;
mod wake;

pub use batching::PART_BYTES_MAX;
pub use bootstrap::{format, FormatError};
pub use events::NodeState;
pub use host::{GroupTransport, Host, HostError};
pub use membership::VoterChangeError;
pub use outcome::{Committed, Uncertain, WriteError};
pub use progress::{Progress, ProgressPacing};
pub use session::WriteSession;
pub use stamp::Stamp;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use applier::{restore_with_progress, spawn_applier, Applier, SnapshotTriggers};
use bytes::Bytes;
use election_writer::spawn_election_writer;
use forward::Handler;
use log_writer::spawn_log_writer;
use replica_task::ReplicaTask;
use snapshot_writer::spawn_snapshot_writer;
use tail_cache::LogCache;
use task_messages::Command;
use tokio::sync::{mpsc, oneshot};
use tracing::Instrument;
use waiters::Waiters;

use crate::config::ValidatedConfig;
use crate::io::{
    ElectionStore, LogState, LogStore, SnapshotStore, StateMachine, StorageError, Transport,
};
use crate::protocol::{Outputs, ProposeError, ReadFailure, Replica, Status, TransferError};
use crate::types::{Instant, Offset, OffsetAndEpoch, ReplicaId};

/// Options of the driver itself (the protocol's are in [`crate::Config`]).
#[derive(Clone, Debug)]
pub struct DriverOptions {
    /// Seed of the protocol's PRNG (election timeouts). The replica id is mixed into it, so
    /// replicas that all keep the default still draw different timeouts; a seed of your own
    /// only changes which ones (a simulation varies it per run).
    pub seed: u64,
    /// Bytes of recent log records kept in memory for fetch responses and the applier.
    pub cache_bytes_max: usize,
    /// Commands (proposals, status calls) queued for the replica task, at most.
    pub command_queue_max: usize,
    /// How long a graceful shutdown waits for the handover to be acknowledged.
    pub shutdown_timeout: Duration,
    /// How long a write forwarded to the leader waits for the leader's answer. Past it the
    /// write's outcome is unknown (the leader may still commit it), so set it to the longest
    /// a caller waits for a write, not to the RPC timeout.
    pub forward_timeout: Duration,
    /// When progress lines of log replays and snapshot restores are written.
    pub progress: ProgressPacing,
    /// Rewrites each data payload this replica proposes as leader (see [`Stamp`]); `None`
    /// proposes payloads as they came.
    pub stamp: Option<Arc<dyn Stamp>>,
    /// The span every task of the node runs in, so that its log lines carry it (a host of many
    /// groups gives each group's node a span naming the group). None by default.
    pub span: tracing::Span,
    /// A leader binds the static voters of its set (storage from before formatting) to the
    /// directories they vote with, once it can tell them (see [`VoterChange::PinDirectories`]).
    /// Default on.
    ///
    /// [`VoterChange::PinDirectories`]: crate::protocol::VoterChange::PinDirectories
    pub pin_static_voters: bool,
    /// Test-only fault switch (negative control for the outcome contract): a forward that
    /// fails after it may have reached the leader is reported as refused, as an early version
    /// did. The driver simulator must catch it.
    #[doc(hidden)]
    pub test_forward_failure_refuses: bool,
    /// Test-only fault switch (negative control for write sessions): every batch is admitted,
    /// so a late forwarded batch may land after a later one of its session. The driver
    /// simulator must catch it.
    #[doc(hidden)]
    pub test_ignore_write_sessions: bool,
}

impl Default for DriverOptions {
    fn default() -> Self {
        DriverOptions {
            seed: 0x5eed,
            cache_bytes_max: 64 << 20,
            command_queue_max: 16 * 1024,
            shutdown_timeout: Duration::from_secs(2),
            forward_timeout: Duration::from_secs(10),
            progress: ProgressPacing::default(),
            stamp: None,
            span: tracing::Span::none(),
            pin_static_voters: true,
            test_forward_failure_refuses: false,
            test_ignore_write_sessions: false,
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
    /// Empty storage with no other voter to learn the cluster from: it must be formatted.
    #[error(transparent)]
    NotFormatted(#[from] crate::config::NotFormatted),
    /// The state machine is behind the log's start and no snapshot covers the gap.
    #[error("the state machine has applied up to {applied} but the log starts at {log_start} and no snapshot covers the gap")]
    MissingSnapshot {
        /// Where the state machine is.
        applied: Offset,
        /// Where the log starts.
        log_start: Offset,
    },
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

/// Why a node stopped (see [`Node::stopped`]).
#[derive(Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub enum StopCause {
    /// [`Node::shutdown`] or [`Node::abort`] stopped it.
    Requested,
    /// It stopped on its own: a storage, state machine or snapshot failure, or a panic in one of
    /// its tasks. The text says which.
    Failed(String),
}

/// A running replica. Cheap to clone; every clone talks to the same task.
#[derive(Clone)]
pub struct Node {
    id: ReplicaId,
    commands: mpsc::Sender<Command>,
    metrics: Arc<Metrics>,
    stopped: tokio::sync::watch::Receiver<Option<StopCause>>,
    state: tokio::sync::watch::Receiver<NodeState>,
}

impl Node {
    /// Loads storage, starts the transport with this node as its request handler, and spawns
    /// the replica task on the current tokio runtime.
    pub async fn start(
        cfg: ValidatedConfig,
        parts: Parts,
        options: DriverOptions,
    ) -> Result<Node, StartError> {
        let span = options.span.clone();
        Self::start_in_span(cfg, parts, options)
            .instrument(span)
            .await
    }

    async fn start_in_span(
        cfg: ValidatedConfig,
        parts: Parts,
        options: DriverOptions,
    ) -> Result<Node, StartError> {
        let election = parts.election.load().await?;
        let mut snapshot = parts.snapshots.latest().await?;
        let mut log_state = parts.log.state().await?;
        if snapshot.is_none() && election.is_none() && log_state.end.offset == Offset::ZERO {
            // Empty storage that was never formatted, or was wiped: its voter set is its
            // contacts, never itself, kept in storage so that later starts agree.
            let contacts = cfg.start_voters(true)?;
            tracing::info!(replica = %cfg.id, contacts = ?contacts.ids().collect::<Vec<_>>(),
                "empty storage: starting as an observer of the configured voters");
            bootstrap::write_voter_snapshot(&*parts.snapshots, &contacts)
                .await
                .map_err(|e| match e {
                    bootstrap::FormatError::Storage(e) => StartError::Storage(e),
                    other => StartError::Storage(StorageError::Invalid(other.to_string())),
                })?;
            snapshot = parts.snapshots.latest().await?;
        }
        if let Some(snap) = snapshot {
            if !log_continues_snapshot(&log_state, snap.id) {
                // A crash between completing a downloaded snapshot and resetting the log (or
                // a log that was behind it): the snapshot is committed state, the log is not.
                parts.log.reset(snap.id).await?;
                log_state = parts.log.state().await?;
            }
        }
        let bootstrap = cfg.bootstrap_voters();
        let mut applied = parts.state_machine.applied().await;
        if let Some(snap) = snapshot.filter(|s| s.id.offset > applied) {
            let (meta, reader) = applier::open_snapshot(&*parts.snapshots, snap.id).await?;
            let (_, mut state) = membership::unframe_snapshot(reader, &bootstrap).await?;
            restore_with_progress(
                &*parts.state_machine,
                snap.id.offset,
                &mut *state,
                meta.size,
                &options.progress,
            )
            .await?;
            applied = snap.id.offset;
        }
        // The voter sets: the snapshot's (or the bootstrap set), then every voter set record in
        // the log above the snapshot.
        let (base, scan_from) = match snapshot {
            Some(s) => (
                membership::snapshot_voters(&*parts.snapshots, s.id, &bootstrap).await?,
                s.id.offset.max(log_state.start),
            ),
            None => (bootstrap.clone(), log_state.start),
        };
        let voters =
            membership::recover_voters(&*parts.log, base, scan_from, log_state.end.offset).await?;
        let applier_voters = voters.at(applied).clone();
        if applied < log_state.start {
            return Err(StartError::MissingSnapshot {
                applied,
                log_start: log_state.start,
            });
        }
        parts.transport.voters_changed(voters.latest());
        let clock = tokio::time::Instant::now();
        let replica = Replica::new(
            cfg.clone(),
            election,
            &log_state,
            snapshot.map(|s| s.id),
            voters,
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
            voters: applier_voters,
            bootstrap: bootstrap.clone(),
            pacing: options.progress,
            writing: None,
        });
        let snapshot_writer =
            spawn_snapshot_writer(parts.snapshots.clone(), bootstrap, done_tx.clone());
        let reachability = reachability::Reachability::new(cfg.id);
        let initial = NodeState {
            id: cfg.id,
            role: replica.role(),
            epoch: replica.epoch(),
            leader: replica.leader(),
            voters: replica.voters().clone(),
            high_watermark: replica.high_watermark(),
            applied,
        };
        let (state_tx, state) = tokio::sync::watch::channel(initial);
        let task = ReplicaTask {
            cfg,
            options,
            replica,
            clock,
            parts,
            out: Outputs::default(),
            cache: LogCache::new(log_state.end.offset),
            responders: Default::default(),
            next_inbound: 1,
            waiters: Waiters::default(),
            apply_sent: applied,
            applied,
            applied_reported: Offset::ZERO,
            high_watermark: Offset::ZERO,
            log_writer,
            election_writer,
            applier,
            snapshot_writer,
            done_tx,
            metrics: metrics.clone(),
            failed: None,
            shutdown: None,
            reads: Default::default(),
            next_read: 1,
            sessions: Default::default(),
            truncations: Default::default(),
            reachability,
            transfer: None,
            state: state_tx,
            pin_next_at: None,
        };
        let id = task.cfg.id;
        let transport = task.parts.transport.clone();
        let (stopped_tx, stopped) = tokio::sync::watch::channel(None);
        let run = task.run(cmd_rx, inbound_rx, done_rx);
        supervise::spawn_replica(id, transport, stopped_tx, run);
        Ok(Node {
            id,
            commands: cmd_tx,
            metrics,
            stopped,
            state,
        })
    }

    /// This replica's id.
    pub fn id(&self) -> ReplicaId {
        self.id
    }

    /// Proposes a record and waits until it is committed and applied on this replica (the
    /// leader), returning the state machine's response. See [`outcome`] for
    /// what each error means and which ones are safe to retry.
    pub async fn propose(&self, payload: Bytes) -> Result<Committed, WriteError> {
        let (reply, rx) = oneshot::channel();
        self.submit(Command::ProposeOne { payload, reply }).await?;
        rx.await
            .unwrap_or(Err(WriteError::Unknown(Uncertain::Stopped)))
    }

    /// Writes on any replica: proposes on the leader, or forwards to the leader this replica
    /// knows. Fails with `Refused(NotLeader)` (retriable) while no leader is known.
    pub async fn write(&self, payload: Bytes) -> Result<Committed, WriteError> {
        let mut results = self.write_batch(vec![payload]).await;
        results
            .pop()
            .unwrap_or(Err(WriteError::Unknown(Uncertain::Stopped)))
    }

    /// Writes of one caller on any replica, applied in the order given: proposed together on
    /// the leader, or forwarded together to it. Returns one result per payload, in order. Once
    /// one write is refused, every later one is refused too (none of them was proposed), so
    /// retrying the refused suffix keeps the caller's order. A batch of more than
    /// [`PART_BYTES_MAX`] payload bytes goes in parts, each after the previous one
    /// committed (see `batching`), so that no part is too large to forward. Separate calls are not ordered
    /// with each other when an earlier one's outcome is unknown; a [`WriteSession`] orders
    /// them.
    pub async fn write_batch(&self, payloads: Vec<Bytes>) -> Vec<Result<Committed, WriteError>> {
        self.write_in_parts(payloads, || None).await
    }

    async fn write_ordered(
        &self,
        payloads: Vec<Bytes>,
        order: Option<crate::message::WriteOrder>,
    ) -> Vec<Result<Committed, WriteError>> {
        let (writes, waits): (Vec<_>, Vec<_>) = payloads
            .into_iter()
            .map(|payload| {
                let (reply, rx) = oneshot::channel();
                ((payload, reply), rx)
            })
            .unzip();
        let count = waits.len();
        if let Err(e) = self.submit(Command::Write { writes, order }).await {
            return vec![Err(e); count];
        }
        let mut results = Vec::with_capacity(count);
        for rx in waits {
            // A dropped reply: the task ended with the write proposed (or forwarded).
            results.push(
                rx.await
                    .unwrap_or(Err(WriteError::Unknown(Uncertain::Stopped))),
            );
        }
        results
    }

    /// Hands a command to the replica task; a stopped task has proposed nothing.
    async fn submit(&self, cmd: Command) -> Result<(), WriteError> {
        self.commands
            .send(cmd)
            .await
            .map_err(|_| WriteError::Refused(ProposeError::ShuttingDown))
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

    /// Stops at once, as a crash would: no resignation and no handover, so the others notice
    /// only when their timers run out. Writes in flight end as unknown. For tests and
    /// simulations of process crashes; what the stores accepted before stays.
    pub async fn abort(&self) {
        let (reply, rx) = oneshot::channel();
        if self.commands.send(Command::Abort { reply }).await.is_ok() {
            let _ = rx.await;
        }
    }

    /// Waits until the node has stopped, and says why: after [`Node::shutdown`] or
    /// [`Node::abort`], or on its own after a failure, which leaves it unable to serve (its
    /// transport closed, every call refused). A process that embeds one node can select on this
    /// to exit, so that its supervisor restarts it, rather than run on without a replica.
    pub async fn stopped(&self) -> StopCause {
        let mut stopped = self.stopped.clone();
        let cause = match stopped.wait_for(Option::is_some).await {
            Ok(cause) => cause.clone(),
            Err(_) => None,
        };
        // No cause: the runtime dropped the task before it ended (it is shutting down).
        cause.unwrap_or_else(|| {
            StopCause::Failed("the replica task was dropped before it ended".into())
        })
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

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("id", &self.id)
            .finish_non_exhaustive()
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
