//! The sans-IO protocol state machine of one replica.
//!
//! [`Replica`] holds everything one replica knows; [`Replica::step`] is the only way to change it.
//! It never reads a clock, a file, the network or an ambient RNG: time arrives with every input,
//! randomness comes from a PRNG seeded by the caller, and every effect is an [`Outputs`] value the
//! caller drains.
//!
//! # Driver contract
//!
//! 1. Create the replica with [`Replica::new`] from the durable election state and the log's
//!    state, then call [`Replica::step`] with [`Input::Tick`].
//! 2. Call `step` for every event: a request or response from a peer, a failed request, a
//!    completed persist, applied progress, or a tick when [`Replica::next_deadline`] has passed
//!    (an early tick is harmless). [`Replica::propose`] accepts client records on the leader.
//! 3. After each call act on the outputs, in any order:
//!    * [`Outputs::persist`]: save the election state durably, then step
//!      [`Input::ElectionPersisted`] with its sequence number. Messages that depend on it are held
//!      inside the core until then: the driver never has to order a send after an fsync.
//!    * [`Outputs::log`]: perform the operations in order on the log; they may be made durable
//!      in groups; step [`Input::LogPersisted`] with the sequence number of the last durable
//!      one. Appended records must be readable (for fetch responses) before they are durable.
//!    * [`Outputs::messages`]: send requests (answer with `Response` or `RequestFailed`) and
//!      responses (a response may ask the driver to fill in records from the log).
//!    * [`Outputs::committed`]: the new high watermark; apply the log up to it, in order, and
//!      step [`Input::Applied`].
//!    * [`Outputs::snapshot`]: write the chunks of a snapshot download, in order; on
//!      [`SnapshotOp::Finish`] verify and complete it, then step [`Input::SnapshotDownloaded`].
//!    * [`Outputs::restore`]: load this snapshot into the state machine before applying
//!      anything at or after its end offset (it comes with a [`LogOp::Reset`]).
//!    * After taking and durably saving a snapshot of the applied state, step
//!      [`Input::SnapshotTaken`]; the core then purges the log prefix it covers.
//!    * [`Outputs::events`]: role changes and lost proposals, for the embedding application.

mod election;
mod log;
mod read;
mod replication;
mod rng;
mod snapshot;
mod transfer;

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;

use crate::config::ValidatedConfig;
use crate::io::LogState;
use crate::message::{
    EpochResponse, ErrorCode, ReadBarrier, ReplicaProgress, Request, RequestId, Response, RpcKind,
};
use crate::types::{
    ElectionState, Epoch, Instant, Offset, OffsetAndEpoch, Record, ReplicaId, Role,
};

pub use self::log::LogSeq;
use self::log::LogView;
use self::read::{LeaderRead, LocalRead, ReadSource, Reads};
pub use self::read::{ReadFailure, ReadId, ReadMode};
use self::rng::Rng;
use self::transfer::Transfer;
pub use self::transfer::TransferError;

/// Sequence number of an election-state persist the core asked for.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default)]
pub struct PersistSeq(pub u64);

/// Everything that can happen to a replica.
#[derive(Clone, Debug)]
pub enum Input {
    /// Time passed; handle expired timers.
    Tick,
    /// A peer's request. `id` is chosen by the driver to match the eventual response.
    Request {
        /// The authenticated sender.
        from: ReplicaId,
        /// Driver-chosen correlation id for the response.
        id: RequestId,
        /// The request.
        request: Request,
    },
    /// The response to a request this replica sent.
    Response {
        /// The responder.
        from: ReplicaId,
        /// The id of the request.
        id: RequestId,
        /// The response.
        response: Response,
    },
    /// A request this replica sent got no response (timeout, unreachable, bad frame).
    RequestFailed {
        /// The peer.
        to: ReplicaId,
        /// The id of the request.
        id: RequestId,
    },
    /// The election state of this persist (and every earlier one) is durable.
    ElectionPersisted(PersistSeq),
    /// Every log operation up to this one is durable.
    LogPersisted(LogSeq),
    /// The state machine has applied every record below this offset.
    Applied(Offset),
    /// Resign gracefully (before shutdown): a leader hands over to a preferred successor.
    Resign,
    /// A client wants to read this replica's state machine (decisions D6).
    Read {
        /// Driver-chosen id, echoed in `ReadReady` / `ReadFailed`.
        id: ReadId,
        /// How the read is confirmed.
        mode: ReadMode,
        /// Give up (with a retriable error) at this time.
        deadline: Instant,
    },
    /// The driver saved a snapshot of the state machine covering every record below
    /// `id.offset` (at most the applied offset), durably.
    SnapshotTaken(OffsetAndEpoch),
    /// The download of snapshot `id` finished: `verified` when its size and checksum matched
    /// and it is now stored complete and durable.
    SnapshotDownloaded {
        /// The snapshot.
        id: OffsetAndEpoch,
        /// Whether it is complete and intact.
        verified: bool,
    },
}

/// A message for the driver to send.
#[derive(Clone, Debug, PartialEq)]
pub enum Outgoing {
    /// Send a request; answer with `Input::Response` or `Input::RequestFailed`.
    Request {
        /// The peer.
        to: ReplicaId,
        /// The id to report the outcome with.
        id: RequestId,
        /// The request.
        request: Request,
    },
    /// Answer an inbound request.
    Response {
        /// The peer that asked.
        to: ReplicaId,
        /// The id the driver gave the inbound request.
        id: RequestId,
        /// The response.
        response: Response,
        /// Data the driver adds from storage before sending.
        fill: Option<Fill>,
    },
}

/// Data the driver reads from storage into a response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fill {
    /// A fetch response's records, into `FetchResponse::records`.
    Records(RecordRange),
    /// A FetchSnapshot response's chunk, into `data`, with the snapshot's `size` and
    /// `checksum`; when the snapshot is not held (or the position is past its end) the driver
    /// answers `SnapshotNotFound` (or `PositionOutOfRange`) instead.
    SnapshotChunk {
        /// The snapshot.
        id: OffsetAndEpoch,
        /// The first byte.
        position: u64,
        /// At most this many bytes.
        max_bytes: u32,
    },
}

/// A step of a snapshot download, for the driver's snapshot store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SnapshotOp {
    /// Write `data` at `position` of the download of `id` (position 0 starts over).
    Write {
        /// The snapshot.
        id: OffsetAndEpoch,
        /// Where the bytes go.
        position: u64,
        /// The bytes.
        data: Bytes,
    },
    /// Every byte was written: verify the size and checksum, complete the snapshot durably,
    /// and step [`Input::SnapshotDownloaded`].
    Finish {
        /// The snapshot.
        id: OffsetAndEpoch,
        /// Its size.
        size: u64,
        /// Its CRC-32.
        checksum: u32,
    },
}

/// Records the driver reads from its log into a fetch response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordRange {
    /// The first offset.
    pub from: Offset,
    /// The end offset (exclusive).
    pub to: Offset,
    /// Stop once this many encoded bytes are collected (at least one record).
    pub max_bytes: u32,
}

/// An operation on the log.
#[derive(Clone, Debug, PartialEq)]
pub enum LogOp {
    /// Append these records at the end.
    Append {
        /// Sequence number for `Input::LogPersisted`.
        seq: LogSeq,
        /// Contiguous records starting at the log end.
        records: Vec<Record>,
    },
    /// Remove every record at or after `end`.
    Truncate {
        /// Sequence number for `Input::LogPersisted`.
        seq: LogSeq,
        /// The new end offset.
        end: Offset,
    },
    /// Remove every record before `start` (a snapshot covers them); may be lazy.
    Purge {
        /// Sequence number for `Input::LogPersisted`.
        seq: LogSeq,
        /// The new start offset.
        start: Offset,
    },
    /// Discard the whole log and restart it, empty, at `start.offset` (an installed
    /// snapshot's end; `start.epoch` is the epoch of the record before it).
    Reset {
        /// Sequence number for `Input::LogPersisted`.
        seq: LogSeq,
        /// The snapshot's id.
        start: OffsetAndEpoch,
    },
}

/// Something the embedding application may want to know.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// The released (durable) role, epoch or leader changed.
    RoleChanged {
        /// The new role.
        role: Role,
        /// The epoch.
        epoch: Epoch,
        /// The known leader.
        leader: Option<ReplicaId>,
    },
    /// Proposals of `epoch` at offsets `from..` were never appended and are lost.
    ProposalsDropped {
        /// Their epoch.
        epoch: Epoch,
        /// The first lost offset.
        from: Offset,
    },
    /// A read may be served: the state machine has applied through `offset`, which the leader
    /// confirmed.
    ReadReady {
        /// The read.
        id: ReadId,
        /// The confirmed read offset (exclusive).
        offset: Offset,
    },
    /// A read could not be confirmed.
    ReadFailed {
        /// The read.
        id: ReadId,
        /// Why.
        error: ReadFailure,
    },
    /// A peer sent something that contradicts this replica's view of who leads an epoch. A
    /// correct cluster never produces this; it is reported, not trusted.
    InconsistentLeader {
        /// The peer.
        from: ReplicaId,
        /// The epoch.
        epoch: Epoch,
        /// The leader the peer named.
        claimed: Option<ReplicaId>,
    },
    /// A leadership transfer started with [`Replica::transfer_leadership`] ended: `Ok` once this
    /// replica resigned in favour of the target (which then campaigns at once).
    TransferEnded {
        /// The target.
        to: ReplicaId,
        /// Whether the handover happened.
        result: Result<(), TransferError>,
    },
}

/// What one step produced. Reused across steps: call [`Outputs::clear`] or drain the fields.
#[derive(Debug, Default)]
pub struct Outputs {
    /// Election state to save durably, with its persist sequence number.
    pub persist: Option<(PersistSeq, ElectionState)>,
    /// Log operations, in order.
    pub log: Vec<LogOp>,
    /// Messages to send.
    pub messages: Vec<Outgoing>,
    /// The new high watermark, when it moved.
    pub committed: Option<Offset>,
    /// Notable events.
    pub events: Vec<Event>,
    /// Steps of a snapshot download.
    pub snapshot: Vec<SnapshotOp>,
    /// Restore the state machine from this (downloaded) snapshot before applying further.
    pub restore: Option<OffsetAndEpoch>,
}

impl Outputs {
    /// Empties every field, keeping allocations.
    pub fn clear(&mut self) {
        self.persist = None;
        self.log.clear();
        self.messages.clear();
        self.committed = None;
        self.events.clear();
        self.snapshot.clear();
        self.restore = None;
    }

    /// Whether nothing was produced.
    pub fn is_empty(&self) -> bool {
        self.persist.is_none()
            && self.log.is_empty()
            && self.messages.is_empty()
            && self.committed.is_none()
            && self.events.is_empty()
            && self.snapshot.is_empty()
            && self.restore.is_none()
    }
}

/// Why a proposal was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProposeError {
    /// Only the leader accepts proposals.
    #[error("not the leader (epoch {epoch}, leader {leader:?})")]
    NotLeader {
        /// This replica's epoch.
        epoch: Epoch,
        /// The leader it knows.
        leader: Option<ReplicaId>,
    },
    /// The leader has not yet committed in its epoch; retry shortly.
    #[error("the leader has not committed in its epoch yet")]
    NotReady,
    /// Too many proposals are pending.
    #[error("proposal queue is full ({max} pending)")]
    QueueFull {
        /// The configured bound.
        max: u32,
    },
    /// The payload is larger than allowed.
    #[error("payload of {len} bytes exceeds the limit of {max}")]
    TooLarge {
        /// The payload length.
        len: usize,
        /// The configured limit.
        max: u32,
    },
    /// The replica is resigning.
    #[error("shutting down")]
    ShuttingDown,
    /// The leader is handing leadership to `to`; retry with the new leader.
    #[error("leadership is being transferred to {to}")]
    Transferring {
        /// The transfer's target.
        to: ReplicaId,
    },
}

/// Counters of things that are not errors but worth seeing: stale, duplicate or refused input.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Responses that matched no in-flight request (late, duplicated, or from a past role), or
    /// that were dropped because they came from an older epoch or contradicted the leader.
    pub stale_responses: u64,
    /// Requests refused with an error code.
    pub refused_requests: u64,
    /// Fetch responses whose records did not fit the log (dropped).
    pub bad_records: u64,
    /// Diverging-epoch answers that would have truncated committed data (ignored).
    pub unsafe_truncations: u64,
    /// Peer messages that contradicted this replica's leader for an epoch.
    pub inconsistent_leaders: u64,
    /// Elections started (pre-vote rounds and candidacies).
    pub elections: u64,
    /// Snapshot ids or chunks that could not be used (not ahead of the high watermark, out of
    /// order, or inconsistent with the download).
    pub bad_snapshots: u64,
    /// Snapshot downloads that failed verification and restarted.
    pub snapshot_restarts: u64,
    /// Snapshots installed from a leader.
    pub snapshots_installed: u64,
}

/// A snapshot of the replica's state for status pages and tests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Status {
    /// This replica.
    pub id: ReplicaId,
    /// Released role.
    pub role: Role,
    /// Released epoch.
    pub epoch: Epoch,
    /// Released leader.
    pub leader: Option<ReplicaId>,
    /// The high watermark this replica knows.
    pub high_watermark: Offset,
    /// Log end offset and last epoch.
    pub log_end: OffsetAndEpoch,
    /// The first offset in the log.
    pub log_start: Offset,
    /// The newest snapshot this replica holds.
    pub snapshot: Option<OffsetAndEpoch>,
    /// Durable log end offset.
    pub durable_end: Offset,
    /// Applied offset reported by the driver.
    pub applied: Offset,
    /// Per-voter progress (leader only).
    pub voters: Vec<ReplicaProgress>,
    /// Time since the last successful fetch from the leader (followers and observers).
    pub since_leader_contact: Option<std::time::Duration>,
}

/// What KRaft's common response handling decided about a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CommonResponse {
    /// The response-specific handler runs.
    Handle,
    /// The response moved this replica to another role or epoch; the requests of the old role
    /// are forgotten with it.
    Transitioned,
    /// Stale (an older epoch) or contradicting this replica's leader: dropped. The request's
    /// in-flight slot is freed all the same.
    Dropped,
}

#[derive(Debug, Clone)]
struct InFlight {
    to: ReplicaId,
    kind: RpcKind,
}

#[derive(Debug, Default, Clone)]
struct Tally {
    granted: BTreeSet<ReplicaId>,
    rejected: BTreeSet<ReplicaId>,
    /// Voters whose request failed, to retry at the given time.
    retry_at: BTreeMap<ReplicaId, Instant>,
    /// The previous leader invited this election (EndQuorumEpoch).
    invited: bool,
}

#[derive(Debug)]
struct FollowerState {
    leader: ReplicaId,
    fetch_deadline: Instant,
    last_fetch_ok: Option<Instant>,
    fetch_in_flight: bool,
    next_fetch_at: Instant,
    barrier_seen: ReadBarrier,
    /// The leader invited an election (EndQuorumEpoch): the next one carries the flag.
    invited: bool,
}

#[derive(Debug, Clone, Default)]
struct Progress {
    end: Option<Offset>,
    last_fetch: Option<Instant>,
    barrier_acked: ReadBarrier,
    /// D6 lease: the raise time of the newest barrier this replica echoed. Its echo proves it
    /// received a fetch response sent after that time, and reset its fetch timer then.
    lease_anchor: Option<Instant>,
}

#[derive(Debug)]
struct ParkedFetch {
    from: ReplicaId,
    id: RequestId,
    fetch_offset: Offset,
    hwm_seen: Option<Offset>,
    barrier_seen: ReadBarrier,
    max_bytes: u32,
    deadline: Instant,
}

#[derive(Debug)]
struct LeaderState {
    epoch_start: Offset,
    /// The high watermark passed `epoch_start`: the leader has committed in its epoch.
    established: bool,
    voters: BTreeMap<ReplicaId, Progress>,
    observers: BTreeMap<ReplicaId, Progress>,
    check_quorum_contacts: BTreeSet<ReplicaId>,
    check_quorum_deadline: Instant,
    begin_quorum_next: Instant,
    begin_in_flight: BTreeSet<ReplicaId>,
    parked: Vec<ParkedFetch>,
    accumulator: Vec<Record>,
    accumulated_bytes: usize,
    linger_deadline: Option<Instant>,
    read_barrier: ReadBarrier,
    /// Reads waiting for their barrier's round.
    reads: Vec<LeaderRead>,
    /// Reads waiting for the leader to commit in its epoch.
    unestablished_reads: Vec<ReadSource>,
    /// When recent barriers were raised (ascending, bounded), for lease anchors.
    barrier_raised_at: std::collections::VecDeque<(ReadBarrier, Instant)>,
    /// A leadership transfer in progress.
    transfer: Option<Transfer>,
}

#[derive(Debug)]
struct ResignedState {
    deadline: Instant,
    successors: Vec<ReplicaId>,
    acked: BTreeSet<ReplicaId>,
    in_flight: BTreeSet<ReplicaId>,
    retry_at: Instant,
}

#[derive(Debug)]
enum RoleState {
    Unattached {
        deadline: Instant,
        probe_at: Instant,
        probing: bool,
    },
    Prospective {
        deadline: Instant,
        tally: Tally,
        leader: Option<ReplicaId>,
    },
    Candidate {
        deadline: Instant,
        tally: Tally,
    },
    Leader(Box<LeaderState>),
    Follower(FollowerState),
    Resigned(ResignedState),
}

impl RoleState {
    fn role(&self) -> Role {
        match self {
            RoleState::Unattached { .. } => Role::Unattached,
            RoleState::Prospective { .. } => Role::Prospective,
            RoleState::Candidate { .. } => Role::Candidate,
            RoleState::Leader(_) => Role::Leader,
            RoleState::Follower(_) => Role::Follower,
            RoleState::Resigned(_) => Role::Resigned,
        }
    }
}

/// One replica's protocol state. See the module documentation for the driver contract.
#[derive(Debug)]
pub struct Replica {
    cfg: ValidatedConfig,
    rng: Rng,
    /// The election state as the core knows it (possibly not yet durable).
    election: ElectionState,
    persist_seq: PersistSeq,
    persisted_seq: PersistSeq,
    /// Messages waiting for the election state to become durable.
    held: Vec<Outgoing>,
    /// The role, epoch and leader last released to the outside.
    released: (Role, ElectionState),
    role: RoleState,
    log: LogView,
    high_watermark: Offset,
    applied: Offset,
    next_request: u64,
    in_flight: BTreeMap<RequestId, InFlight>,
    resigning: bool,
    stats: Stats,
    reads: Reads,
    started_at: Instant,
    /// The newest complete snapshot held (taken here or installed).
    snapshot: Option<OffsetAndEpoch>,
    /// A snapshot download in progress; it survives leader changes.
    download: Option<snapshot::Download>,
}

impl Replica {
    /// Creates a replica from its durable election state, its log and its newest snapshot, as
    /// loaded from storage. `seed` drives every random choice (election timeouts); `now` starts
    /// the timers.
    ///
    /// KRaft start-up rules: a replica that was leader comes back Resigned in the same epoch
    /// (KAFKA-10527: it must not lead that epoch again, its unsynced tail may be gone), one that
    /// voted for itself comes back a candidate's voter, and a stored epoch older than the log's
    /// last epoch is raised to it.
    pub fn new(
        cfg: ValidatedConfig,
        election: Option<ElectionState>,
        log: &LogState,
        snapshot: Option<OffsetAndEpoch>,
        seed: u64,
        now: Instant,
    ) -> Replica {
        let log = LogView::new(log);
        assert!(
            snapshot.map_or(log.start == Offset::ZERO, |s| log.start <= s.offset),
            "a purged log prefix is covered by a snapshot"
        );
        let mut election = election.unwrap_or_default();
        if election.epoch < log.last_epoch() {
            election = ElectionState {
                epoch: log.last_epoch(),
                voted_for: None,
                leader: None,
            };
        }
        let rng = Rng::new(seed ^ u64::from(cfg.id.0).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let mut replica = Replica {
            cfg,
            rng,
            election,
            persist_seq: PersistSeq(0),
            persisted_seq: PersistSeq(0),
            held: Vec::new(),
            released: (Role::Unattached, election),
            role: RoleState::Unattached {
                deadline: now,
                probe_at: now,
                probing: false,
            },
            log,
            // Everything a snapshot covers was committed.
            high_watermark: snapshot.map_or(Offset::ZERO, |s| s.offset),
            applied: Offset::ZERO,
            next_request: 1,
            in_flight: BTreeMap::new(),
            resigning: false,
            stats: Stats::default(),
            reads: Reads::default(),
            started_at: now,
            snapshot,
            download: None,
        };
        replica.start(now);
        replica
    }

    fn start(&mut self, now: Instant) {
        let me = self.cfg.id;
        if self.election.leader == Some(me) {
            self.role = RoleState::Resigned(ResignedState {
                deadline: now.plus(self.election_timeout()),
                successors: Vec::new(),
                acked: BTreeSet::new(),
                in_flight: BTreeSet::new(),
                retry_at: Instant::NEVER,
            });
        } else if let Some(leader) = self.election.leader {
            self.role = RoleState::Follower(self.new_follower(now, leader));
        } else {
            self.role = RoleState::Unattached {
                deadline: now.plus(self.election_timeout()),
                probe_at: now,
                probing: false,
            };
        }
        self.released = (self.role.role(), self.election);
    }

    /// Changes state in response to `input` at time `now`, appending effects to `out`.
    pub fn step(&mut self, now: Instant, input: Input, out: &mut Outputs) {
        match input {
            Input::Tick => {}
            Input::Request { from, id, request } => {
                self.handle_request(now, from, id, request, out)
            }
            Input::Response { from, id, response } => {
                self.handle_response(now, from, id, response, out)
            }
            Input::RequestFailed { to, id } => self.handle_request_failed(now, to, id),
            Input::ElectionPersisted(seq) => self.handle_election_persisted(seq, out),
            Input::LogPersisted(seq) => {
                self.log.persisted(seq);
                if matches!(self.role, RoleState::Leader(_)) {
                    self.leader_update_high_watermark(now, out);
                }
            }
            Input::Applied(offset) => {
                assert!(
                    offset <= self.high_watermark,
                    "applied never passes the high watermark"
                );
                self.applied = self.applied.max(offset);
            }
            Input::Resign => self.resign(now, out),
            Input::Read { id, mode, deadline } => {
                self.read(now, LocalRead { id, mode, deadline }, out)
            }
            Input::SnapshotTaken(id) => self.snapshot_taken(id, out),
            Input::SnapshotDownloaded { id, verified } => {
                self.snapshot_downloaded(now, id, verified, out)
            }
        }
        self.poll_timers(now, out);
        self.leader_poll_transfer(now, out);
        self.leader_poll_reads(now, out);
        self.poll_reads(now, out);
    }

    /// The earliest time at which [`Replica::step`] with [`Input::Tick`] has work to do.
    pub fn next_deadline(&self) -> Instant {
        self.role_deadline().min(self.reads_deadline())
    }

    fn role_deadline(&self) -> Instant {
        match &self.role {
            RoleState::Unattached {
                deadline,
                probe_at,
                probing,
            } => {
                if self.cfg.is_voter() {
                    *deadline
                } else if *probing {
                    Instant::NEVER
                } else {
                    *probe_at
                }
            }
            RoleState::Prospective {
                deadline, tally, ..
            }
            | RoleState::Candidate { deadline, tally } => tally
                .retry_at
                .values()
                .copied()
                .fold(*deadline, Instant::min),
            RoleState::Follower(f) => {
                let mut d = f.fetch_deadline;
                if !f.fetch_in_flight && self.log.all_durable() {
                    d = d.min(f.next_fetch_at);
                }
                d
            }
            RoleState::Leader(l) => {
                let mut d = l.begin_quorum_next;
                if self.cfg.check_quorum && self.cfg.voters.len() > 1 {
                    d = d.min(l.check_quorum_deadline);
                }
                if let Some(linger) = l.linger_deadline {
                    d = d.min(linger);
                }
                if let Some(t) = &l.transfer {
                    d = d.min(t.deadline);
                }
                l.parked.iter().map(|p| p.deadline).fold(d, Instant::min)
            }
            RoleState::Resigned(r) => r.deadline.min(r.retry_at),
        }
    }

    /// Accepts a client record on the leader and tells its `(offset, epoch)`. The record is
    /// appended with the current batch (see `append_linger`) and commits when the high watermark
    /// passes it, unless a leader change truncates it first.
    pub fn propose(
        &mut self,
        now: Instant,
        payload: Bytes,
        out: &mut Outputs,
    ) -> Result<OffsetAndEpoch, ProposeError> {
        if self.resigning {
            return Err(ProposeError::ShuttingDown);
        }
        let epoch = self.election.epoch;
        let max_payload = self.cfg.payload_bytes_max;
        let pending_max = self.cfg.pending_proposals_max;
        let linger = self.cfg.append_linger;
        let log_end = self.log.end;
        let hwm = self.high_watermark;
        let RoleState::Leader(l) = &mut self.role else {
            return Err(ProposeError::NotLeader {
                epoch,
                leader: self.election.leader,
            });
        };
        if self.persisted_seq < self.persist_seq {
            return Err(ProposeError::NotReady);
        }
        if let Some(t) = l.transfer {
            return Err(ProposeError::Transferring { to: t.to });
        }
        if payload.len() > max_payload as usize {
            return Err(ProposeError::TooLarge {
                len: payload.len(),
                max: max_payload,
            });
        }
        let pending = (log_end.0 - hwm.0) + l.accumulator.len() as u64;
        if pending >= u64::from(pending_max) {
            return Err(ProposeError::QueueFull { max: pending_max });
        }
        let offset = log_end.plus(l.accumulator.len() as u64);
        l.accumulated_bytes += payload.len();
        l.accumulator.push(Record {
            offset,
            epoch,
            kind: crate::RecordKind::Data,
            payload,
        });
        if l.linger_deadline.is_none() {
            l.linger_deadline = Some(now.plus(linger));
        }
        if self.leader_batch_full() {
            self.leader_flush(now, out);
        }
        Ok(OffsetAndEpoch::new(offset, epoch))
    }

    /// This replica's id.
    pub fn id(&self) -> ReplicaId {
        self.cfg.id
    }

    /// The released role (durable transitions are released once persisted).
    pub fn role(&self) -> Role {
        self.released.0
    }

    /// The released epoch.
    pub fn epoch(&self) -> Epoch {
        self.released.1.epoch
    }

    /// The released leader.
    pub fn leader(&self) -> Option<ReplicaId> {
        self.released.1.leader
    }

    /// The newest read barrier this replica raised as leader (zero otherwise): how many
    /// confirmation rounds it started in its epoch.
    pub fn read_barrier(&self) -> ReadBarrier {
        match &self.role {
            RoleState::Leader(l) => l.read_barrier,
            _ => ReadBarrier::default(),
        }
    }

    /// The high watermark this replica knows: every record below it is committed.
    pub fn high_watermark(&self) -> Offset {
        self.high_watermark
    }

    /// The log's end offset and last epoch, as the core sees it.
    pub fn log_end(&self) -> OffsetAndEpoch {
        self.log.end_and_epoch()
    }

    /// The end of the durable part of the log.
    pub fn durable_end(&self) -> Offset {
        self.log.durable_end
    }

    /// The election state the core currently holds (durable once the pending persist lands).
    pub fn election_state(&self) -> ElectionState {
        self.election
    }

    /// The epoch of the record at `offset` according to the core's epoch history.
    pub fn epoch_at(&self, offset: Offset) -> Option<Epoch> {
        self.log.epoch_at(offset)
    }

    /// The validated configuration this replica runs with.
    pub fn config(&self) -> &ValidatedConfig {
        &self.cfg
    }

    /// The snapshot download in progress, if any: its id and the bytes received so far.
    pub fn snapshot_download(&self) -> Option<(OffsetAndEpoch, u64)> {
        self.download.as_ref().map(|d| (d.id, d.position))
    }

    /// Counters of stale and refused input.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// A status snapshot.
    pub fn status(&self, now: Instant) -> Status {
        let voters = match &self.role {
            RoleState::Leader(l) => l
                .voters
                .iter()
                .map(|(id, p)| ReplicaProgress {
                    replica: *id,
                    end_offset: if *id == self.cfg.id {
                        Some(self.log.durable_end)
                    } else {
                        p.end
                    },
                    since_last_fetch: p.last_fetch.map(|t| now.since(t)),
                })
                .collect(),
            _ => Vec::new(),
        };
        Status {
            id: self.cfg.id,
            role: self.role(),
            epoch: self.epoch(),
            leader: self.leader(),
            high_watermark: self.high_watermark,
            log_end: self.log.end_and_epoch(),
            log_start: self.log.start,
            snapshot: self.snapshot,
            durable_end: self.log.durable_end,
            applied: self.applied,
            voters,
            since_leader_contact: match &self.role {
                RoleState::Follower(f) => f.last_fetch_ok.map(|t| now.since(t)),
                _ => None,
            },
        }
    }

    // ----- plumbing shared by every role -----

    fn election_timeout(&mut self) -> std::time::Duration {
        let t = self.cfg.election_timeout;
        let extra = self.rng.below(t.as_nanos().min(u64::MAX as u128) as u64);
        t + std::time::Duration::from_nanos(extra)
    }

    fn send_request(&mut self, to: ReplicaId, request: Request, out: &mut Outputs) -> RequestId {
        let id = RequestId(self.next_request);
        self.next_request += 1;
        self.in_flight.insert(
            id,
            InFlight {
                to,
                kind: request.kind(),
            },
        );
        self.emit(Outgoing::Request { to, id, request }, out);
        id
    }

    fn respond(&mut self, to: ReplicaId, id: RequestId, response: Response, out: &mut Outputs) {
        if response.error().is_some() {
            self.stats.refused_requests += 1;
        }
        self.emit(
            Outgoing::Response {
                to,
                id,
                response,
                fill: None,
            },
            out,
        );
    }

    /// Sends now, or holds until the pending election state is durable (decisions D4).
    fn emit(&mut self, msg: Outgoing, out: &mut Outputs) {
        if self.persisted_seq < self.persist_seq {
            self.held.push(msg);
        } else {
            out.messages.push(msg);
        }
    }

    fn handle_election_persisted(&mut self, seq: PersistSeq, out: &mut Outputs) {
        assert!(
            seq <= self.persist_seq,
            "persisted a state that was never asked for"
        );
        self.persisted_seq = self.persisted_seq.max(seq);
        if self.persisted_seq == self.persist_seq {
            out.messages.append(&mut self.held);
            self.release(out);
        }
    }

    /// Changes the election state; it is released (and dependent messages sent) once durable.
    fn set_election(&mut self, state: ElectionState, out: &mut Outputs) {
        assert!(state.epoch >= self.election.epoch, "epochs never decrease");
        if state.epoch == self.election.epoch && self.election.voted_for.is_some() {
            assert!(
                state.voted_for == self.election.voted_for,
                "a replica votes at most once per epoch"
            );
        }
        if state == self.election {
            return;
        }
        self.election = state;
        self.persist_seq = PersistSeq(self.persist_seq.0 + 1);
        out.persist = Some((self.persist_seq, state));
    }

    /// Publishes the current role and election state if nothing is waiting to become durable.
    fn release(&mut self, out: &mut Outputs) {
        if self.persisted_seq < self.persist_seq {
            return;
        }
        let now = (self.role.role(), self.election);
        if now != self.released {
            self.released = now;
            out.events.push(Event::RoleChanged {
                role: now.0,
                epoch: now.1.epoch,
                leader: now.1.leader,
            });
        }
    }

    fn epoch_response(&self, error: Option<ErrorCode>) -> EpochResponse {
        EpochResponse {
            error,
            epoch: self.election.epoch,
            leader: self.known_leader(),
        }
    }

    /// The leader of the current epoch as peers should learn it: a resigned leader no longer
    /// names itself.
    fn known_leader(&self) -> Option<ReplicaId> {
        match &self.role {
            RoleState::Resigned(_) => None,
            _ => self.election.leader,
        }
    }

    fn handle_request(
        &mut self,
        now: Instant,
        from: ReplicaId,
        id: RequestId,
        request: Request,
        out: &mut Outputs,
    ) {
        match request {
            Request::Vote(req) => {
                let resp = self.handle_vote(now, from, req, out);
                self.respond(from, id, Response::Vote(resp), out);
            }
            Request::BeginQuorumEpoch(req) => {
                let resp = self.handle_begin_quorum_epoch(now, from, req, out);
                self.respond(from, id, Response::BeginQuorumEpoch(resp), out);
            }
            Request::EndQuorumEpoch(req) => {
                let resp = self.handle_end_quorum_epoch(now, from, req, out);
                self.respond(from, id, Response::EndQuorumEpoch(resp), out);
            }
            Request::Fetch(req) => self.handle_fetch(now, from, id, req, out),
            Request::DescribeQuorum(_) => {
                let resp = self.describe_quorum(now);
                self.respond(from, id, Response::DescribeQuorum(resp), out);
            }
            Request::ReadIndex(req) => self.handle_read_index(now, from, id, req, out),
            Request::FetchSnapshot(req) => self.handle_fetch_snapshot(now, from, id, req, out),
            Request::Forward(_) => {
                // Forwarded writes are the driver's business; one reaching the core is a bug
                // of the sender's driver.
                let resp = Request::Forward(crate::message::ForwardRequest {
                    payload: Bytes::new(),
                })
                .error_response(ErrorCode::InvalidRequest);
                self.respond(from, id, resp, out);
            }
        }
    }

    fn handle_response(
        &mut self,
        now: Instant,
        from: ReplicaId,
        id: RequestId,
        response: Response,
        out: &mut Outputs,
    ) {
        let Some(sent) = self.in_flight.remove(&id) else {
            self.stats.stale_responses += 1;
            return;
        };
        if sent.to != from || sent.kind != response.kind() {
            self.stats.stale_responses += 1;
            return;
        }
        // KRaft's common response handling: learn a newer epoch or an unknown leader first.
        match self.maybe_transition_from_response(now, from, &response, out) {
            CommonResponse::Handle => {}
            CommonResponse::Transitioned => return,
            CommonResponse::Dropped => {
                // The request is answered even though its answer is of no use: whatever the
                // outcome, its role must be free to send the next one, or an observer probing a
                // voter at an older epoch would never probe again.
                self.stats.stale_responses += 1;
                self.request_ended(now, from, id, sent.kind);
                return;
            }
        }
        match response {
            Response::Vote(r) => self.handle_vote_response(now, from, r, out),
            Response::BeginQuorumEpoch(r) => {
                if let RoleState::Leader(l) = &mut self.role {
                    l.begin_in_flight.remove(&from);
                }
                let _ = r;
            }
            Response::EndQuorumEpoch(r) => {
                if let RoleState::Resigned(s) = &mut self.role {
                    s.in_flight.remove(&from);
                    if r.error.is_none() {
                        s.acked.insert(from);
                    }
                }
            }
            Response::Fetch(r) => self.handle_fetch_response(now, from, r, out),
            Response::FetchSnapshot(r) => self.handle_fetch_snapshot_response(now, from, r, out),
            Response::ReadIndex(r) => self.handle_read_index_response(now, id, r),
            Response::DescribeQuorum(_) | Response::Forward(_) => {}
        }
    }

    fn handle_request_failed(&mut self, now: Instant, to: ReplicaId, id: RequestId) {
        let Some(sent) = self.in_flight.remove(&id) else {
            self.stats.stale_responses += 1;
            return;
        };
        if sent.to != to {
            self.stats.stale_responses += 1;
            return;
        }
        self.request_ended(now, to, id, sent.kind);
    }

    /// Frees the in-flight slot of the current role's request `id` to `to` of this `kind`,
    /// which ended without a usable answer (it failed, or its response was dropped), and
    /// schedules the retry after the backoff.
    fn request_ended(&mut self, now: Instant, to: ReplicaId, id: RequestId, kind: RpcKind) {
        let retry = now.plus(self.cfg.retry_backoff);
        match (&mut self.role, kind) {
            (RoleState::Prospective { tally, .. }, RpcKind::Vote)
            | (RoleState::Candidate { tally, .. }, RpcKind::Vote) => {
                tally.retry_at.insert(to, retry);
            }
            (RoleState::Follower(f), RpcKind::Fetch | RpcKind::FetchSnapshot) => {
                f.fetch_in_flight = false;
                f.next_fetch_at = retry;
            }
            (
                RoleState::Unattached {
                    probing, probe_at, ..
                },
                RpcKind::Fetch,
            ) => {
                *probing = false;
                *probe_at = retry;
            }
            (RoleState::Leader(l), RpcKind::BeginQuorumEpoch) => {
                l.begin_in_flight.remove(&to);
            }
            (RoleState::Resigned(r), RpcKind::EndQuorumEpoch) => {
                r.in_flight.remove(&to);
                r.retry_at = r.retry_at.min(retry);
            }
            (_, RpcKind::ReadIndex) => self.read_index_failed(now, id),
            _ => {}
        }
    }

    /// KRaft's `maybeHandleCommonResponse`: says whether the response-specific handler should
    /// still run, or why not.
    fn maybe_transition_from_response(
        &mut self,
        now: Instant,
        from: ReplicaId,
        response: &Response,
        out: &mut Outputs,
    ) -> CommonResponse {
        let (epoch, leader) = response.epoch_and_leader();
        let me = self.cfg.id;
        if epoch > self.election.epoch {
            match leader {
                Some(l) if l != me => self.become_follower(now, epoch, l, out),
                _ => self.become_unattached(now, epoch, out),
            }
            return CommonResponse::Transitioned;
        }
        if epoch < self.election.epoch {
            // Stale, except that a vote refusal from a lagging voter still counts as a refusal.
            return if matches!(response, Response::Vote(_)) {
                CommonResponse::Handle
            } else {
                CommonResponse::Dropped
            };
        }
        if let Some(l) = leader {
            if l == me {
                if !matches!(self.role, RoleState::Leader(_) | RoleState::Resigned(_)) {
                    self.report_inconsistent(from, epoch, leader, out);
                }
                return CommonResponse::Handle;
            }
            match self.election.leader {
                None => {
                    // KRaft: a resigned replica must not follow itself, and never follows
                    // another in its own epoch (KAFKA-18379).
                    if matches!(self.role, RoleState::Resigned(_) | RoleState::Leader(_)) {
                        self.report_inconsistent(from, epoch, leader, out);
                        return CommonResponse::Dropped;
                    }
                    self.become_follower(now, epoch, l, out);
                    return if matches!(response, Response::Fetch(_) | Response::FetchSnapshot(_)) {
                        CommonResponse::Handle
                    } else {
                        CommonResponse::Transitioned
                    };
                }
                Some(known) if known != l => {
                    self.report_inconsistent(from, epoch, leader, out);
                    return CommonResponse::Dropped;
                }
                Some(_) => {}
            }
        }
        CommonResponse::Handle
    }

    fn report_inconsistent(
        &mut self,
        from: ReplicaId,
        epoch: Epoch,
        claimed: Option<ReplicaId>,
        out: &mut Outputs,
    ) {
        self.stats.inconsistent_leaders += 1;
        tracing::error!(%from, %epoch, ?claimed, "peer contradicts this replica's leader");
        out.events.push(Event::InconsistentLeader {
            from,
            epoch,
            claimed,
        });
    }

    // ----- transitions -----

    /// Leaves the current role: forgets in-flight requests (their answers are now stale) and
    /// lets the leader's parked fetches and batch go.
    fn leave_role(&mut self, now: Instant, out: &mut Outputs) {
        self.in_flight.clear();
        // Requests still held for durability belong to the old role: their answers would be
        // dropped as stale, so they need not leave at all. Held responses still answer peers.
        self.held.retain(|m| matches!(m, Outgoing::Response { .. }));
        let old = std::mem::replace(
            &mut self.role,
            RoleState::Unattached {
                deadline: now,
                probe_at: now,
                probing: false,
            },
        );
        if let RoleState::Leader(mut l) = old {
            if let Some(t) = l.transfer.take() {
                out.events.push(Event::TransferEnded {
                    to: t.to,
                    result: Err(TransferError::NotLeader {
                        epoch: self.election.epoch,
                        leader: None,
                    }),
                });
            }
            self.leader_abandon_reads(&mut l, out);
            self.leader_abandon(*l, out);
        }
    }

    pub(crate) fn become_unattached(&mut self, now: Instant, epoch: Epoch, out: &mut Outputs) {
        let state = if epoch == self.election.epoch {
            ElectionState {
                leader: None,
                ..self.election
            }
        } else {
            ElectionState {
                epoch,
                voted_for: None,
                leader: None,
            }
        };
        self.leave_role(now, out);
        self.set_election(state, out);
        let deadline = now.plus(self.election_timeout());
        self.role = RoleState::Unattached {
            deadline,
            probe_at: now,
            probing: false,
        };
        self.release(out);
    }

    pub(crate) fn become_follower(
        &mut self,
        now: Instant,
        epoch: Epoch,
        leader: ReplicaId,
        out: &mut Outputs,
    ) {
        assert!(leader != self.cfg.id, "a replica never follows itself");
        let voted_for = if epoch == self.election.epoch {
            self.election.voted_for
        } else {
            None
        };
        self.leave_role(now, out);
        self.set_election(
            ElectionState {
                epoch,
                voted_for,
                leader: Some(leader),
            },
            out,
        );
        self.role = RoleState::Follower(self.new_follower(now, leader));
        self.release(out);
    }

    fn new_follower(&self, now: Instant, leader: ReplicaId) -> FollowerState {
        FollowerState {
            leader,
            fetch_deadline: now.plus(self.cfg.fetch_timeout),
            last_fetch_ok: None,
            fetch_in_flight: false,
            next_fetch_at: now,
            barrier_seen: ReadBarrier::default(),
            invited: false,
        }
    }

    // ----- timers -----

    fn poll_timers(&mut self, now: Instant, out: &mut Outputs) {
        // Bounded: each pass either changes role or leaves nothing due; a role change can make
        // at most a few further transitions due at once (e.g. a single voter winning at start).
        for _ in 0..8 {
            if !self.poll_timers_once(now, out) {
                return;
            }
        }
    }

    /// Handles due timers of the current role; returns whether the role changed.
    fn poll_timers_once(&mut self, now: Instant, out: &mut Outputs) -> bool {
        let before = self.role.role();
        let epoch_before = self.election.epoch;
        match &self.role {
            RoleState::Unattached { deadline, .. } => {
                if self.cfg.is_voter() {
                    if now >= *deadline {
                        self.start_election(now, false, out);
                    }
                } else {
                    self.observer_probe(now, out);
                }
            }
            RoleState::Prospective { deadline, .. } => {
                if now >= *deadline {
                    self.prospective_lost(now, out);
                } else {
                    self.send_vote_requests(now, out);
                }
            }
            RoleState::Candidate { deadline, .. } => {
                if now >= *deadline {
                    self.start_election(now, false, out);
                } else {
                    self.send_vote_requests(now, out);
                }
            }
            RoleState::Follower(f) => {
                if now >= f.fetch_deadline {
                    let invited = f.invited;
                    if self.cfg.is_voter() {
                        self.start_election(now, invited, out);
                    } else {
                        // An observer forgets the leader and looks for it again.
                        let epoch = self.election.epoch;
                        self.become_unattached(now, epoch, out);
                    }
                } else {
                    self.follower_maybe_fetch(now, out);
                }
            }
            RoleState::Leader(_) => self.leader_poll(now, out),
            RoleState::Resigned(r) => {
                if now >= r.deadline {
                    // KAFKA-18379: leaving Resigned moves to the next epoch, never back into
                    // the one this replica led.
                    let next = self.election.epoch.next();
                    self.become_unattached(now, next, out);
                } else {
                    self.resigned_send_end_quorum(now, out);
                }
            }
        }
        self.role.role() != before || self.election.epoch != epoch_before
    }

    fn describe_quorum(&self, now: Instant) -> crate::message::DescribeQuorumResponse {
        let status = self.status(now);
        let observers = match &self.role {
            RoleState::Leader(l) => l
                .observers
                .iter()
                .map(|(id, p)| ReplicaProgress {
                    replica: *id,
                    end_offset: p.end,
                    since_last_fetch: p.last_fetch.map(|t| now.since(t)),
                })
                .collect(),
            _ => Vec::new(),
        };
        let leading = matches!(self.role, RoleState::Leader(_));
        crate::message::DescribeQuorumResponse {
            error: (!leading).then_some(ErrorCode::NotLeader),
            epoch: self.election.epoch,
            leader: self.known_leader(),
            high_watermark: leading.then_some(self.high_watermark),
            voters: status.voters,
            observers,
        }
    }
}
