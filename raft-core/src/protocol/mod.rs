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
//!
//! # Where things are
//!
//! This file holds the driver contract, the inputs and outputs, the [`Replica`] value and
//! [`Replica::step`], which dispatches every input. Each role's state is in `roles.rs` (with the
//! transitions to Unattached and Follower), its timers in `timers.rs`, what every role shares
//! (sending, holding messages until durable, common response handling) in `common.rs`, and
//! getters and status in `status.rs`. The protocols: `election.rs` (Vote, pre-vote,
//! BeginQuorumEpoch, resignation), `replication.rs` (proposals and Fetch on both sides),
//! `read.rs`, `snapshot.rs`, `transfer.rs`; `log.rs` is the core's view of its log.

mod common;
mod election;
#[cfg(feature = "testing")]
pub(crate) mod fingerprint;
mod log;
mod membership;
mod read;
mod replication;
mod rng;
mod roles;
mod snapshot;
mod status;
mod timers;
mod transfer;

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;

use crate::config::ValidatedConfig;
use crate::io::LogState;
use crate::message::{ErrorCode, Request, RequestId, Response};
use crate::types::{
    ElectionState, Epoch, Instant, Offset, OffsetAndEpoch, Record, ReplicaId, Role,
};

use self::common::{CommonResponse, InFlight};
pub use self::log::LogSeq;
use self::log::LogView;
pub use self::membership::{MembershipError, VoterChange, VoterHistory};
use self::read::{LocalRead, Reads};
pub use self::read::{ReadFailure, ReadId, ReadMode};
pub use self::replication::ProposeError;
use self::rng::Rng;
use self::roles::{LeaderState, ParkedFetch, Progress, ResignedState, RoleState, Tally};
pub use self::status::{Stats, Status};
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
        /// The voter set in force at the snapshot's offset, as the snapshot carries it (the
        /// bootstrap set for a snapshot that predates voter sets in snapshots).
        voters: crate::voters::VoterSet,
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
    /// The voter set in force on this replica changed (a voter set record was appended or
    /// truncated, or a snapshot brought one).
    VotersChanged {
        /// The set now in force.
        voters: crate::voters::VoterSet,
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

/// One replica's protocol state. See the module documentation for the driver contract.
#[cfg_attr(feature = "testing", derive(Clone))]
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
    /// The voter sets along the log; the newest is in force.
    voter_history: VoterHistory,
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
    /// loaded from storage, and the voter sets along that log (the snapshot's set, or the
    /// bootstrap set, then every voter set record in the log above the snapshot). `seed` drives every random choice (election timeouts); `now` starts
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
        voters: VoterHistory,
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
                voted_directory: None,
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
            voter_history: voters,
            // Everything a snapshot covers was committed.
            high_watermark: snapshot.map_or(Offset::ZERO, |s| s.offset),
            applied: Offset::ZERO,
            next_request: 1,
            in_flight: BTreeMap::new(),
            resigning: false,
            stats: Stats::default(),
            reads: Reads::starting_at(now),
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
            Input::SnapshotDownloaded {
                id,
                verified,
                voters,
            } => self.snapshot_downloaded(now, id, verified, voters, out),
        }
        self.poll_timers(now, out);
        self.leader_poll_transfer(now, out);
        self.leader_poll_reads(now, out);
        self.poll_reads(now, out);
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
                    payloads: Vec::new(),
                    order: None,
                    epoch: crate::types::Epoch::ZERO,
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
        // An answer that does not fit the request under its id (another sender or another
        // kind) is dropped and leaves the request waiting for its own answer.
        let fits = self
            .in_flight
            .get(&id)
            .is_some_and(|sent| sent.to == from && sent.kind == response.kind());
        let Some(sent) = fits.then(|| self.in_flight.remove(&id)).flatten() else {
            self.stats.stale_responses += 1;
            return;
        };
        // KRaft's common response handling: learn a newer epoch or an unknown leader first.
        match self.maybe_transition_from_response(now, from, &response, out) {
            CommonResponse::Handle => {}
            CommonResponse::Transitioned => return,
            CommonResponse::Dropped => {
                // The request is answered even though its answer is of no use: whatever the
                // outcome, its role must be free to send the next one, or an observer probing a
                // voter at an older epoch would never probe again.
                self.stats.stale_responses += 1;
                if !planted!(self.cfg, StopReprobingAfterStaleAnswer) {
                    self.request_ended(now, from, id, sent.kind);
                }
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
        // As with answers: a failure reported for another peer leaves the request waiting.
        let fits = self.in_flight.get(&id).is_some_and(|sent| sent.to == to);
        let Some(sent) = fits.then(|| self.in_flight.remove(&id)).flatten() else {
            self.stats.stale_responses += 1;
            return;
        };
        self.request_ended(now, to, id, sent.kind);
    }
}

#[cfg(test)]
mod outputs_tests {
    use bytes::Bytes;

    use super::*;
    use crate::message::{DescribeQuorumRequest, Request, RequestId};

    /// Sets one field of the outputs.
    type Setter = fn(&mut Outputs);

    /// Outputs with every field set, each by a setter, so that each field is checked alone.
    fn setters() -> Vec<(&'static str, Setter)> {
        vec![
            ("persist", |o| {
                o.persist = Some((PersistSeq(1), ElectionState::default()))
            }),
            ("log", |o| {
                o.log.push(LogOp::Truncate {
                    seq: LogSeq(1),
                    end: Offset(0),
                })
            }),
            ("messages", |o| {
                o.messages.push(Outgoing::Request {
                    to: ReplicaId(2),
                    id: RequestId(1),
                    request: Request::DescribeQuorum(DescribeQuorumRequest {}),
                })
            }),
            ("committed", |o| o.committed = Some(Offset(1))),
            ("events", |o| {
                o.events.push(Event::ProposalsDropped {
                    epoch: Epoch(1),
                    from: Offset(0),
                })
            }),
            ("snapshot", |o| {
                o.snapshot.push(SnapshotOp::Write {
                    id: OffsetAndEpoch::default(),
                    position: 0,
                    data: Bytes::new(),
                })
            }),
            ("restore", |o| o.restore = Some(OffsetAndEpoch::default())),
        ]
    }

    #[test]
    fn outputs_are_empty_only_with_no_field_set() {
        assert!(Outputs::default().is_empty());
        for (field, set) in setters() {
            let mut o = Outputs::default();
            set(&mut o);
            assert!(!o.is_empty(), "{field} set, yet empty");
        }
    }

    #[test]
    fn clear_empties_every_field() {
        for (field, set) in setters() {
            let mut o = Outputs::default();
            set(&mut o);
            o.clear();
            assert!(o.is_empty(), "{field} survived clear: {o:?}");
        }
        let mut all = Outputs::default();
        for (_, set) in setters() {
            set(&mut all);
        }
        all.clear();
        assert!(
            all.persist.is_none()
                && all.log.is_empty()
                && all.messages.is_empty()
                && all.committed.is_none()
                && all.events.is_empty()
                && all.snapshot.is_empty()
                && all.restore.is_none(),
            "{all:?}"
        );
    }
}
