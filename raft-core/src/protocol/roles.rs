//! The role states: what each role remembers (Unattached, Prospective and Candidate with
//! their vote tally, Leader with per-replica progress and parked fetches, Follower, Resigned),
//! and the transitions every role takes to Unattached or Follower. What a role does lives with
//! its protocol: elections in `election.rs`, fetching in `replication.rs`, timers in
//! `timers.rs`.

use std::collections::{BTreeMap, BTreeSet};

use super::read::{LeaderRead, ReadSource};
use super::transfer::Transfer;
use super::{Event, Outgoing, Outputs, Replica, TransferError};
use crate::message::{ReadBarrier, RequestId};
use crate::types::{ElectionState, Epoch, Instant, Offset, Record, ReplicaId, Role};

/// The votes of one election round, a pre-vote round (Prospective) or a candidacy.
#[derive(Debug, Default, Clone)]
pub(super) struct Tally {
    pub(super) granted: BTreeSet<ReplicaId>,
    pub(super) rejected: BTreeSet<ReplicaId>,
    /// Voters whose request failed, to retry at the given time.
    pub(super) retry_at: BTreeMap<ReplicaId, Instant>,
    /// The previous leader invited this election (EndQuorumEpoch).
    pub(super) invited: bool,
}

/// A follower's (voter's or observer's) leader and fetch loop.
#[cfg_attr(feature = "testing", derive(Clone))]
#[derive(Debug)]
pub(super) struct FollowerState {
    pub(super) leader: ReplicaId,
    pub(super) fetch_deadline: Instant,
    pub(super) last_fetch_ok: Option<Instant>,
    pub(super) fetch_in_flight: bool,
    pub(super) next_fetch_at: Instant,
    pub(super) barrier_seen: ReadBarrier,
    /// The leader invited an election (EndQuorumEpoch): the next one carries the flag.
    pub(super) invited: bool,
}

/// The leader's view of one replica's fetching.
#[derive(Debug, Clone, Default)]
pub(super) struct Progress {
    /// The directory the replica fetches with (KIP-853).
    pub(super) directory: Option<crate::DirectoryId>,
    pub(super) end: Option<Offset>,
    /// The leader's log end when this replica last fetched.
    pub(super) end_at_fetch: Option<Offset>,
    /// When a fetch last reached the log end: a replica must be caught up to be added.
    pub(super) caught_up_at: Option<Instant>,
    pub(super) last_fetch: Option<Instant>,
    pub(super) barrier_acked: ReadBarrier,
    /// D6 lease: the raise time of the newest barrier this replica echoed. Its echo proves it
    /// received a fetch response sent after that time, and reset its fetch timer then.
    pub(super) lease_anchor: Option<Instant>,
}

/// A fetch the leader holds until it has something new to say or the wait ends (long poll).
#[cfg_attr(feature = "testing", derive(Clone))]
#[derive(Debug)]
pub(super) struct ParkedFetch {
    pub(super) from: ReplicaId,
    pub(super) id: RequestId,
    pub(super) fetch_offset: Offset,
    pub(super) hwm_seen: Option<Offset>,
    pub(super) barrier_seen: ReadBarrier,
    pub(super) max_bytes: u32,
    pub(super) deadline: Instant,
}

/// The leader: progress of every replica, check-quorum, parked fetches, the proposal batch,
/// read rounds and a transfer in progress.
#[cfg_attr(feature = "testing", derive(Clone))]
#[derive(Debug)]
pub(super) struct LeaderState {
    pub(super) epoch_start: Offset,
    /// The high watermark passed `epoch_start`: the leader has committed in its epoch.
    pub(super) established: bool,
    pub(super) voters: BTreeMap<ReplicaId, Progress>,
    pub(super) observers: BTreeMap<ReplicaId, Progress>,
    pub(super) check_quorum_contacts: BTreeSet<ReplicaId>,
    pub(super) check_quorum_deadline: Instant,
    pub(super) begin_quorum_next: Instant,
    pub(super) begin_in_flight: BTreeSet<ReplicaId>,
    pub(super) parked: Vec<ParkedFetch>,
    pub(super) accumulator: Vec<Record>,
    pub(super) accumulated_bytes: usize,
    pub(super) linger_deadline: Option<Instant>,
    pub(super) read_barrier: ReadBarrier,
    /// Reads waiting for their barrier's round.
    pub(super) reads: Vec<LeaderRead>,
    /// Reads waiting for the leader to commit in its epoch.
    pub(super) unestablished_reads: Vec<ReadSource>,
    /// When recent barriers were raised (ascending, bounded), for lease anchors.
    pub(super) barrier_raised_at: std::collections::VecDeque<(ReadBarrier, Instant)>,
    /// A leadership transfer in progress.
    pub(super) transfer: Option<Transfer>,
}

/// A leader that resigned: EndQuorumEpoch to every voter, with the preferred successors, until
/// each acknowledged or the election timeout moves it to the next epoch.
#[cfg_attr(feature = "testing", derive(Clone))]
#[derive(Debug)]
pub(super) struct ResignedState {
    pub(super) deadline: Instant,
    pub(super) successors: Vec<ReplicaId>,
    pub(super) acked: BTreeSet<ReplicaId>,
    pub(super) in_flight: BTreeSet<ReplicaId>,
    pub(super) retry_at: Instant,
}

/// The role and everything that only it remembers; leaving a role drops its state.
#[cfg_attr(feature = "testing", derive(Clone))]
#[derive(Debug)]
pub(super) enum RoleState {
    /// No leader known. A voter campaigns at `deadline`; an observer probes a voter at
    /// `probe_at`, one probe at a time.
    Unattached {
        deadline: Instant,
        probe_at: Instant,
        probing: bool,
    },
    /// Asking for pre-votes (D2), in the same epoch; keeps the leader it knew.
    Prospective {
        deadline: Instant,
        tally: Tally,
        leader: Option<ReplicaId>,
    },
    /// Asking for votes in the epoch it raised.
    Candidate { deadline: Instant, tally: Tally },
    /// Leading the epoch.
    Leader(Box<LeaderState>),
    /// Fetching from the leader of the epoch.
    Follower(FollowerState),
    /// Handing over after leading the epoch; never leads it again (KAFKA-10527).
    Resigned(ResignedState),
}

impl RoleState {
    pub(super) fn role(&self) -> Role {
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

impl Replica {
    /// Leaves the current role: forgets in-flight requests (their answers are now stale) and
    /// lets the leader's parked fetches and batch go.
    pub(super) fn leave_role(&mut self, now: Instant, out: &mut Outputs) {
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
                voted_directory: None,
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
        let (voted_for, voted_directory) = if epoch == self.election.epoch {
            (self.election.voted_for, self.election.voted_directory)
        } else {
            (None, None)
        };
        self.leave_role(now, out);
        self.set_election(
            ElectionState {
                epoch,
                voted_for,
                voted_directory,
                leader: Some(leader),
            },
            out,
        );
        self.role = RoleState::Follower(self.new_follower(now, leader));
        self.release(out);
    }

    pub(super) fn new_follower(&self, now: Instant, leader: ReplicaId) -> FollowerState {
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
}
