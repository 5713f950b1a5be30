//! What a replica tells the outside: its getters, the [`Status`] snapshot for status pages and
//! tests, the [`Stats`] counters of stale and refused input, and the DescribeQuorum answer.

use super::{Replica, RoleState};
use crate::config::ValidatedConfig;
use crate::message::{ErrorCode, ReadBarrier, ReplicaProgress};
use crate::types::{ElectionState, Epoch, Instant, Offset, OffsetAndEpoch, ReplicaId, Role};

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
    /// This replica's directory id.
    pub directory: Option<crate::DirectoryId>,
    /// The voter set in force on this replica (KIP-853), with directory ids and endpoints.
    pub voter_set: crate::voters::VoterSet,
    /// Per-observer progress, with the directory each fetches with (leader only): who could
    /// be added as a voter.
    pub observers: Vec<ReplicaProgress>,
    /// Time since the last successful fetch from the leader (followers and observers).
    pub since_leader_contact: Option<std::time::Duration>,
}

impl Replica {
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
                    directory: p
                        .directory
                        .or_else(|| self.voters().get(*id).and_then(|v| v.directory)),
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
            directory: self.cfg.directory,
            voter_set: self.voters().clone(),
            observers: self.observer_progress(now),
            since_leader_contact: match &self.role {
                RoleState::Follower(f) => f.last_fetch_ok.map(|t| now.since(t)),
                _ => None,
            },
        }
    }

    fn observer_progress(&self, now: Instant) -> Vec<ReplicaProgress> {
        match &self.role {
            RoleState::Leader(l) => l
                .observers
                .iter()
                .map(|(id, p)| ReplicaProgress {
                    replica: *id,
                    directory: p.directory,
                    end_offset: p.end,
                    since_last_fetch: p.last_fetch.map(|t| now.since(t)),
                })
                .collect(),
            _ => Vec::new(),
        }
    }

    pub(super) fn describe_quorum(&self, now: Instant) -> crate::message::DescribeQuorumResponse {
        let status = self.status(now);
        let observers = status.observers;
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
