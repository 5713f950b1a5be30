//! Dynamic membership (KIP-853): the voter set in force, its history along the log, and
//! single-voter changes through the log.
//!
//! Rules (KRaft's, see `docs/spec-deviations.md` for where this port differs):
//! * The newest [`RecordKind::Voters`] record in a replica's log, committed or not, is the set
//!   it acts on; a truncation reverts to the one before, an installed snapshot brings the set
//!   in force at its offset. Role, elections, the high watermark, check-quorum and read
//!   confirmation all follow it at once.
//! * A leader changes one voter at a time, only after it has committed in its epoch, and only
//!   while no voter set record is uncommitted (tied to the log and the batch, not to a handler's
//!   memory: KAFKA-20740). An added replica must be a caught-up observer fetching with exactly
//!   the key being added.
//! * A leader that removes itself keeps leading, without counting itself, until the removal
//!   commits, then resigns.

use std::collections::BTreeMap;

use bytes::{Bytes, BytesMut};

use super::roles::Progress;
use super::{Outputs, Replica, RoleState};
use crate::codec::{decode_voters, encode_voters, DecodeError};
use crate::types::{DirectoryId, Epoch, Instant, Offset, OffsetAndEpoch, Record, RecordKind};
use crate::voters::{Voter, VoterSet, VoterSetError};
use crate::ReplicaId;

/// The voter sets along a replica's log: the set before the first record that names one (the
/// bootstrap set or a snapshot's), then each voter set record by offset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VoterHistory {
    base: VoterSet,
    entries: Vec<(Offset, VoterSet)>,
}

impl VoterHistory {
    /// A history that starts with `base` (the bootstrap set, or the set a snapshot carries).
    pub fn new(base: VoterSet) -> VoterHistory {
        assert!(!base.is_empty(), "a voter set in force is never empty");
        VoterHistory {
            base,
            entries: Vec::new(),
        }
    }

    /// Adds the voter set record at `offset` (above every earlier one).
    pub fn push(&mut self, offset: Offset, set: VoterSet) {
        assert!(
            self.entries.last().is_none_or(|(o, _)| *o < offset),
            "voter set records are added in log order"
        );
        assert!(!set.is_empty(), "a voter set record is never empty");
        self.entries.push((offset, set));
    }

    /// The set in force: the newest record's, or the base.
    pub fn latest(&self) -> &VoterSet {
        self.entries.last().map_or(&self.base, |(_, s)| s)
    }

    /// The offset of the newest voter set record, if the log holds one.
    pub fn latest_offset(&self) -> Option<Offset> {
        self.entries.last().map(|(o, _)| *o)
    }

    /// The set in force for a record at `offset`: the newest record below it, or the base.
    pub fn at(&self, offset: Offset) -> &VoterSet {
        self.entries
            .iter()
            .rev()
            .find(|(o, _)| *o < offset)
            .map_or(&self.base, |(_, s)| s)
    }

    /// Forgets records at or after `end` (the log was truncated there).
    pub(super) fn truncate(&mut self, end: Offset) {
        self.entries.retain(|(o, _)| *o < end);
    }

    /// Folds records below `start` into the base (the log prefix below it was purged).
    pub(super) fn purge(&mut self, start: Offset) {
        let below = self.entries.partition_point(|(o, _)| *o < start);
        if below > 0 {
            let mut gone = self.entries.drain(..below);
            self.base = gone.next_back().expect("at least one entry").1;
        }
    }

    /// Starts over from `base` (the log was replaced by a snapshot carrying it).
    pub(super) fn reset(&mut self, base: VoterSet) {
        *self = VoterHistory::new(base);
    }
}

/// One change of the voter set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VoterChange {
    /// Make the observer `(id, directory)` a voter; it must be fetching and caught up.
    Add {
        /// The replica.
        id: ReplicaId,
        /// The directory it fetches with.
        directory: DirectoryId,
        /// Where peers reach it.
        endpoint: String,
    },
    /// Remove the voter `(id, directory)` (a static voter: any directory). The leader may
    /// remove itself: it resigns once the removal commits.
    Remove {
        /// The voter.
        id: ReplicaId,
        /// Its directory.
        directory: Option<DirectoryId>,
    },
    /// Bind every static voter (one without a directory id, from a configuration that predates
    /// formatting) to the directory it votes with now: the leader's own, and each other's as
    /// seen in its fetches, for those fetching and caught up as an added replica must be. The
    /// ones not qualifying yet stay static for a later pin. This closes the static entries'
    /// weakness (an emptied disk counted as the voter it was) in place, without a removal.
    PinDirectories,
    /// Replace the endpoint of voter `(id, directory)`.
    Update {
        /// The voter.
        id: ReplicaId,
        /// Its directory.
        directory: Option<DirectoryId>,
        /// The new endpoint.
        endpoint: String,
    },
}

/// Why a voter change was refused. Nothing was appended.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MembershipError {
    /// Only the leader changes the voter set.
    #[error("not the leader (epoch {epoch}, leader {leader:?})")]
    NotLeader {
        /// This replica's epoch.
        epoch: Epoch,
        /// The leader it knows.
        leader: Option<ReplicaId>,
    },
    /// The leader has not committed in its epoch yet (the fix of Raft's single-server change
    /// bug); retry shortly.
    #[error("the leader has not committed in its epoch yet")]
    NotReady,
    /// A voter set record is not committed yet; one change at a time. Retry once it is.
    #[error("a voter change is in progress (offset {offset})")]
    ChangeInProgress {
        /// Where the uncommitted record is (or will be) in the log.
        offset: Offset,
    },
    /// The change itself is impossible (duplicate, not found, the last voter, ...).
    #[error(transparent)]
    Invalid(#[from] VoterSetError),
    /// The replica to add is not fetching with this key, or has not caught up with the log
    /// within the last fetch timeout.
    #[error("{id} is not a caught-up observer with directory {directory} (seen: {seen:?})")]
    NotCaughtUp {
        /// The replica.
        id: ReplicaId,
        /// The directory asked for.
        directory: DirectoryId,
        /// The directory it is fetching with, if it fetches at all.
        seen: Option<DirectoryId>,
    },
    /// No static voter can be pinned now: there is none, or none is fetching and caught up.
    #[error(
        "no static voter to pin (static voters without a known, caught-up directory: {waiting:?})"
    )]
    NothingToPin {
        /// The static voters left.
        waiting: Vec<ReplicaId>,
    },
    /// The leader is handing over leadership; retry with the next one.
    #[error("leadership is being transferred to {to}")]
    Transferring {
        /// The transfer's target.
        to: ReplicaId,
    },
    /// The replica is shutting down.
    #[error("shutting down")]
    ShuttingDown,
}

/// Decodes the voter set records among `records`; an undecodable one refuses them all.
pub(super) fn voter_records(records: &[Record]) -> Result<Vec<(Offset, VoterSet)>, DecodeError> {
    let mut found = Vec::new();
    for r in records.iter().filter(|r| r.kind == RecordKind::Voters) {
        let (set, used) = decode_voters(&r.payload)?;
        if used != r.payload.len() {
            return Err(DecodeError::Trailing(r.payload.len() - used));
        }
        found.push((r.offset, set));
    }
    Ok(found)
}

impl Replica {
    /// The voter set this replica acts on: the newest voter set record in its log, committed or
    /// not, else its snapshot's or the bootstrap set.
    pub fn voters(&self) -> &VoterSet {
        self.voter_history.latest()
    }

    /// This replica's key is in the voter set in force.
    pub(super) fn is_voter(&self) -> bool {
        self.voters().is_voter(self.cfg.id, self.cfg.directory)
    }

    /// Whether this replica may stand for election: it is a voter of the set in force, or it
    /// was one of the set before and the record removing it is not committed yet. The second
    /// case is the Raft thesis's rule (4.2.2), which KRaft lacks: without it, a leader that
    /// removes itself from two voters and fails before the other fetched the removal leaves
    /// a cluster where nobody can win (the remaining voter needs the removed one's vote, which
    /// its shorter log cannot get; the removed one never campaigns). It does not count its own
    /// vote: only the set in force elects.
    pub(super) fn may_campaign(&self) -> bool {
        if self.is_voter() {
            return true;
        }
        if planted!(self.cfg, NoCampaignWhenRemoved) {
            return false;
        }
        let Some(latest) = self.voter_history.latest_offset() else {
            return false;
        };
        latest >= self.high_watermark
            && self
                .voter_history
                .at(latest)
                .is_voter(self.cfg.id, self.cfg.directory)
    }

    /// Whether the leader may key a voter by the directory `p` fetches with, as it does when
    /// adding or pinning one: caught up within the fetch timeout, and fetching now. A healthy
    /// fetcher's long polls come back at least every fetch_max_wait, so a key whose replica
    /// died (a wiped disk's old key, say) stops qualifying after two of them.
    fn fetching_and_caught_up(&self, p: &Progress, now: Instant) -> bool {
        let alive = self.cfg.fetch_max_wait * 2 + self.cfg.request_timeout;
        p.caught_up_at
            .is_some_and(|t| now.since(t) < self.cfg.fetch_timeout)
            && p.last_fetch.is_some_and(|t| now.since(t) < alive)
    }

    /// Votes (or durable offsets) that make a majority of the set in force.
    pub(super) fn majority(&self) -> usize {
        self.voters().majority()
    }

    /// Voters other than the leader whose acknowledgement completes a majority of the set in
    /// force: one fewer when the leader is itself in the set (it is not while it removes
    /// itself).
    pub(super) fn confirmations_needed(&self) -> usize {
        self.majority() - usize::from(self.is_voter())
    }

    /// Whether a voter set record is not yet committed: in the log at or above the high
    /// watermark, or still in the leader's batch. Returns its offset.
    fn uncommitted_change(&self) -> Option<Offset> {
        if let RoleState::Leader(l) = &self.role {
            if let Some(r) = l.accumulator.iter().find(|r| r.kind == RecordKind::Voters) {
                return Some(r.offset);
            }
        }
        self.voter_history
            .latest_offset()
            .filter(|o| *o >= self.high_watermark)
    }

    /// Proposes one voter change on the leader. The returned `(offset, epoch)` is the voter set
    /// record's: the change is done when that record commits (by a majority of the new set),
    /// and lost if the record is truncated.
    pub fn change_voters(
        &mut self,
        now: Instant,
        change: VoterChange,
        out: &mut Outputs,
    ) -> Result<OffsetAndEpoch, MembershipError> {
        if self.resigning {
            return Err(MembershipError::ShuttingDown);
        }
        let (epoch, leader) = (self.election.epoch, self.known_leader());
        let RoleState::Leader(l) = &self.role else {
            return Err(MembershipError::NotLeader { epoch, leader });
        };
        let established = l.established || planted!(self.cfg, ChangeBeforeCommit);
        if !established || self.persisted_seq < self.persist_seq {
            return Err(MembershipError::NotReady);
        }
        if let Some(t) = l.transfer {
            return Err(MembershipError::Transferring { to: t.to });
        }
        if let Some(offset) = self.uncommitted_change() {
            if !planted!(self.cfg, ConcurrentChanges) {
                return Err(MembershipError::ChangeInProgress { offset });
            }
        }
        let current = self.voters();
        let next = match change {
            VoterChange::Add {
                id,
                directory,
                endpoint,
            } => {
                if current.contains_id(id) {
                    return Err(VoterSetError::Duplicate(id).into());
                }
                let seen = l.observers.get(&id).and_then(|p| p.directory);
                let caught_up = l.observers.get(&id).is_some_and(|p| {
                    p.directory == Some(directory) && self.fetching_and_caught_up(p, now)
                });
                if !caught_up {
                    return Err(MembershipError::NotCaughtUp {
                        id,
                        directory,
                        seen,
                    });
                }
                let voter = Voter {
                    directory: Some(directory),
                    endpoint,
                };
                current.with_added(id, voter)?
            }
            VoterChange::Remove { id, directory } => current.with_removed(id, directory)?,
            VoterChange::PinDirectories => {
                let mut next = current.clone();
                let mut waiting = Vec::new();
                for (id, _) in current.iter().filter(|(_, v)| v.directory.is_none()) {
                    let directory = if id == self.cfg.id {
                        self.cfg.directory
                    } else {
                        l.voters
                            .get(&id)
                            .filter(|p| self.fetching_and_caught_up(p, now))
                            .and_then(|p| p.directory)
                    };
                    match directory {
                        Some(d) => next = next.with_pinned(id, d)?,
                        None => waiting.push(id),
                    }
                }
                if next == *current {
                    return Err(MembershipError::NothingToPin { waiting });
                }
                next
            }
            VoterChange::Update {
                id,
                directory,
                endpoint,
            } => current.with_endpoint(id, directory, endpoint)?,
        };
        let mut payload = BytesMut::new();
        encode_voters(&next, &mut payload);
        let id = self.leader_append_control(now, RecordKind::Voters, payload.freeze(), out);
        tracing::info!(replica = %self.cfg.id, %epoch, offset = %id.offset, voters = %next,
            "voter change appended");
        Ok(id)
    }

    /// Appends a control record at once, behind the batch (so that it is never reordered with
    /// the proposals accepted before it).
    fn leader_append_control(
        &mut self,
        now: Instant,
        kind: RecordKind,
        payload: Bytes,
        out: &mut Outputs,
    ) -> OffsetAndEpoch {
        let epoch = self.election.epoch;
        let end = self.log.end;
        let RoleState::Leader(l) = &mut self.role else {
            unreachable!("only a leader appends control records");
        };
        let offset = end.plus(l.accumulator.len() as u64);
        l.accumulator.push(Record {
            offset,
            epoch,
            kind,
            payload,
        });
        self.leader_flush(now, out);
        OffsetAndEpoch::new(offset, epoch)
    }

    /// Records appended to the log (by this leader or from a fetch) may carry voter sets: the
    /// newest takes effect now.
    pub(super) fn voters_appended(
        &mut self,
        now: Instant,
        sets: Vec<(Offset, VoterSet)>,
        out: &mut Outputs,
    ) {
        if sets.is_empty() {
            return;
        }
        for (offset, set) in sets {
            self.voter_history.push(offset, set);
        }
        self.voters_changed(now, out);
    }

    /// The set in force changed (an append, a truncation or a snapshot). A leader re-sorts its
    /// progress into voters and observers; other roles consult the set as they go.
    pub(super) fn voters_changed(&mut self, now: Instant, out: &mut Outputs) {
        tracing::info!(replica = %self.cfg.id, voters = %self.voter_history.latest(),
            "voter set in force changed");
        let set = self.voter_history.latest().clone();
        out.events.push(super::Event::VotersChanged {
            voters: set.clone(),
        });
        let RoleState::Leader(l) = &mut self.role else {
            return;
        };
        let mut old_voters = std::mem::take(&mut l.voters);
        let mut voters = BTreeMap::new();
        for (id, v) in set.iter() {
            let matches = |p: &Progress| v.directory.is_none() || p.directory == v.directory;
            let progress = match old_voters.remove(&id) {
                Some(p) if matches(&p) => p,
                other => {
                    if let Some(p) = other {
                        l.observers.insert(id, p);
                    }
                    match l.observers.remove(&id) {
                        Some(p) if matches(&p) => p,
                        Some(p) => {
                            l.observers.insert(id, p);
                            Progress::default()
                        }
                        None => Progress::default(),
                    }
                }
            };
            voters.insert(id, progress);
        }
        // A removed voter keeps fetching (it must, to learn of its removal): as an observer.
        for (id, p) in old_voters {
            l.observers.insert(id, p);
        }
        l.check_quorum_contacts.retain(|id| voters.contains_key(id));
        l.voters = voters;
        // A new set is given a whole window to show its majority: the window of the old set
        // may have run out unnoticed (a one-voter set never checks).
        l.check_quorum_deadline = now.plus(self.cfg.check_quorum_timeout());
    }

    /// A leader outside the set in force resigns once that set is committed: the removal of
    /// itself is done, and the remaining voters elect the next leader.
    pub(super) fn leader_maybe_leave_after_removal(&mut self, now: Instant, out: &mut Outputs) {
        if !matches!(self.role, RoleState::Leader(_)) || self.is_voter() {
            return;
        }
        let committed = self
            .voter_history
            .latest_offset()
            .is_some_and(|o| o < self.high_watermark);
        if committed {
            tracing::info!(replica = %self.cfg.id, epoch = %self.election.epoch,
                "removed from the voter set; resigning");
            self.leader_resign(now, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(ids: &[u32]) -> VoterSet {
        VoterSet::from_ids(ids.iter().map(|i| ReplicaId(*i)))
    }

    /// Base {1}, then {1, 2} at offset 5 and {1, 2, 3} at offset 9.
    fn history() -> VoterHistory {
        let mut h = VoterHistory::new(set(&[1]));
        h.push(Offset(5), set(&[1, 2]));
        h.push(Offset(9), set(&[1, 2, 3]));
        h
    }

    /// A record of `kind` at `offset` carrying `payload`.
    fn record(offset: u64, kind: RecordKind, payload: &[u8]) -> Record {
        Record {
            offset: Offset(offset),
            epoch: Epoch(1),
            kind,
            payload: Bytes::copy_from_slice(payload),
        }
    }

    #[test]
    fn voter_records_are_decoded_whole_or_refused() {
        let mut buf = BytesMut::new();
        encode_voters(&set(&[1, 2]), &mut buf);
        let records = [
            record(3, RecordKind::Data, b"not a voter set"),
            record(4, RecordKind::Voters, &buf),
        ];
        assert_eq!(
            voter_records(&records).unwrap(),
            vec![(Offset(4), set(&[1, 2]))]
        );
        let mut long = buf.to_vec();
        long.extend_from_slice(&[0, 0, 0]);
        let refused = [records[1].clone(), record(5, RecordKind::Voters, &long)];
        assert_eq!(voter_records(&refused), Err(DecodeError::Trailing(3)));
    }

    #[test]
    fn the_set_in_force_for_a_record_is_the_newest_strictly_below_it() {
        let h = history();
        assert_eq!(
            h.at(Offset(5)),
            &set(&[1]),
            "a record does not govern itself"
        );
        assert_eq!(h.at(Offset(6)), &set(&[1, 2]));
        assert_eq!(h.at(Offset(9)), &set(&[1, 2]));
        assert_eq!(h.at(Offset(10)), &set(&[1, 2, 3]));
        assert_eq!(h.latest(), &set(&[1, 2, 3]));
        assert_eq!(h.latest_offset(), Some(Offset(9)));
    }

    #[test]
    fn truncating_forgets_the_records_at_and_after_the_new_end() {
        let mut h = history();
        h.truncate(Offset(10));
        assert_eq!(h.latest_offset(), Some(Offset(9)), "nothing at or after 10");
        h.truncate(Offset(9));
        assert_eq!(h.latest_offset(), Some(Offset(5)));
        assert_eq!(h.latest(), &set(&[1, 2]));
        h.truncate(Offset(0));
        assert_eq!((h.latest_offset(), h.latest()), (None, &set(&[1])));
    }

    #[test]
    fn purging_folds_the_records_below_the_new_start_into_the_base() {
        let mut h = history();
        h.purge(Offset(5));
        assert_eq!(h, history(), "the record at the start stays");
        h.purge(Offset(6));
        assert_eq!(h.at(Offset(6)), &set(&[1, 2]));
        assert_eq!(h.latest_offset(), Some(Offset(9)));
        h.purge(Offset(20));
        assert_eq!((h.latest_offset(), h.latest()), (None, &set(&[1, 2, 3])));
    }
}
