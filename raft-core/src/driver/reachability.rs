//! Which peers this replica can reach, from the outcome of its own calls, so that the log says
//! it once when something changes rather than at debug level on every failed call: a WARN
//! naming a peer after [`FAILURES_TO_UNREACHABLE`] calls to it failed in a row and an INFO when
//! a call succeeds again; a WARN when fewer voters than a majority are reachable (this replica
//! counts itself when it votes), naming the unreachable ones, and an INFO when a majority is
//! back. An isolated voter otherwise only logs its role changes, every election timeout.

use std::collections::BTreeMap;

use crate::types::ReplicaId;
use crate::voters::VoterSet;

/// Calls in a row that must fail before a peer is reported unreachable (one lost call is
/// ordinary on a real network).
pub(super) const FAILURES_TO_UNREACHABLE: u32 = 3;

/// What changed, for the caller to log.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Change {
    /// The peer failed this many calls in a row; the last error.
    PeerUnreachable(ReplicaId, String),
    /// A call to the peer succeeded again.
    PeerReachable(ReplicaId),
    /// Fewer than a majority of the voters are reachable: these are not.
    QuorumLost(Vec<ReplicaId>),
    /// A majority of the voters is reachable again.
    QuorumBack,
}

/// The reachability of every peer this replica called.
#[derive(Debug)]
pub(super) struct Reachability {
    me: ReplicaId,
    /// Consecutive failed calls per peer; at or above the threshold it is unreachable.
    failures: BTreeMap<ReplicaId, u32>,
    quorum_lost: bool,
}

impl Reachability {
    pub(super) fn new(me: ReplicaId) -> Reachability {
        Reachability {
            me,
            failures: BTreeMap::new(),
            quorum_lost: false,
        }
    }

    fn unreachable(&self, id: ReplicaId) -> bool {
        self.failures
            .get(&id)
            .is_some_and(|f| *f >= FAILURES_TO_UNREACHABLE)
    }

    /// A call to `peer` ended: `Err` with its error. Returns what changed, in order.
    pub(super) fn call_ended(
        &mut self,
        peer: ReplicaId,
        result: Result<(), String>,
        voters: &VoterSet,
    ) -> Vec<Change> {
        let was = self.unreachable(peer);
        if result.is_ok() && !self.failures.contains_key(&peer) {
            // The common case (a peer that answers, answering again) changes nothing.
            return Vec::new();
        }
        let mut changes = Vec::new();
        match result {
            Ok(()) => {
                self.failures.remove(&peer);
                if was {
                    changes.push(Change::PeerReachable(peer));
                }
            }
            Err(e) => {
                let f = self.failures.entry(peer).or_insert(0);
                *f = f.saturating_add(1);
                if !was && self.unreachable(peer) {
                    changes.push(Change::PeerUnreachable(peer, e));
                }
            }
        }
        changes.extend(self.check_quorum(voters));
        changes
    }

    /// Re-evaluates the quorum against `voters` (after a change of the voter set too).
    pub(super) fn check_quorum(&mut self, voters: &VoterSet) -> Option<Change> {
        if voters.is_empty() {
            return None;
        }
        // Called after every call, fetches included: count without allocating, name the
        // unreachable voters only when the quorum is lost.
        let is_down = |id: &ReplicaId| *id != self.me && self.unreachable(*id);
        let down = voters.ids().filter(is_down).count();
        let lost = voters.len() - down < voters.majority();
        match (lost, self.quorum_lost) {
            (true, false) => {
                let names = voters.ids().filter(is_down).collect();
                self.quorum_lost = true;
                Some(Change::QuorumLost(names))
            }
            (false, true) => {
                self.quorum_lost = false;
                Some(Change::QuorumBack)
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(ids: &[u32]) -> VoterSet {
        VoterSet::from_ids(ids.iter().map(|i| ReplicaId(*i)))
    }

    #[test]
    fn peers_and_the_quorum_are_reported_once_per_change() {
        let voters = set(&[1, 2, 3]);
        let mut r = Reachability::new(ReplicaId(1));
        let fail = |r: &mut Reachability, id: u32| {
            r.call_ended(ReplicaId(id), Err("timed out".into()), &voters)
        };
        assert!(fail(&mut r, 2).is_empty(), "one lost call is ordinary");
        assert!(fail(&mut r, 2).is_empty());
        assert_eq!(
            fail(&mut r, 2),
            [Change::PeerUnreachable(ReplicaId(2), "timed out".into())],
            "two of three voters are still reachable"
        );
        assert!(fail(&mut r, 2).is_empty(), "said once");
        for _ in 0..2 {
            assert!(fail(&mut r, 3).is_empty());
        }
        assert_eq!(
            fail(&mut r, 3),
            [
                Change::PeerUnreachable(ReplicaId(3), "timed out".into()),
                Change::QuorumLost(vec![ReplicaId(2), ReplicaId(3)])
            ]
        );
        assert!(fail(&mut r, 3).is_empty(), "said once");
        assert_eq!(
            r.call_ended(ReplicaId(3), Ok(()), &voters),
            [Change::PeerReachable(ReplicaId(3)), Change::QuorumBack]
        );
        assert!(r.call_ended(ReplicaId(3), Ok(()), &voters).is_empty());
    }

    #[test]
    fn a_replica_outside_the_set_needs_a_majority_of_others() {
        // An observer (or a removed voter) does not count itself.
        let voters = set(&[1, 2, 3]);
        let mut r = Reachability::new(ReplicaId(4));
        for _ in 0..FAILURES_TO_UNREACHABLE {
            r.call_ended(ReplicaId(1), Err("refused".into()), &voters);
        }
        let mut last = Vec::new();
        for _ in 0..FAILURES_TO_UNREACHABLE {
            last = r.call_ended(ReplicaId(2), Err("refused".into()), &voters);
        }
        assert_eq!(
            last.last(),
            Some(&Change::QuorumLost(vec![ReplicaId(1), ReplicaId(2)]))
        );
        assert_eq!(r.check_quorum(&set(&[3])), Some(Change::QuorumBack));
    }
}
