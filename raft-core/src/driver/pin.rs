//! Upgrading a static voter set in place: a leader whose voter set in force still has static
//! entries (voters without a directory id, from storage that predates formatting) binds each
//! to the directory it votes with once it can tell it (its own, and a caught-up fetcher's),
//! through one voter set record ([`VoterChange::PinDirectories`]). Until then, a static entry
//! counts an emptied disk as the voter it was; afterwards, such a disk is an observer, as on a
//! formatted cluster. Tried on the leader's timer wakes, at most once per fetch wait.

use super::replica_task::ReplicaTask;
use crate::protocol::{MembershipError, VoterChange};
use crate::Role;

impl ReplicaTask {
    /// Proposes the pin when this replica leads a set with static voters and the last try is
    /// at least a fetch wait old. Nothing waits on the record: it commits or is lost like any
    /// voter change, and the next leader tries again while static entries are left.
    pub(super) fn pin_static_voters(&mut self) {
        if !self.options.pin_static_voters
            || self.replica.role() != Role::Leader
            || !self.replica.voters().has_static()
        {
            return;
        }
        let wall = tokio::time::Instant::now();
        if self.pin_next_at.is_some_and(|at| wall < at) {
            return;
        }
        self.pin_next_at = Some(wall + self.cfg.fetch_max_wait);
        let now = self.now();
        match self
            .replica
            .change_voters(now, VoterChange::PinDirectories, &mut self.out)
        {
            Ok(id) => tracing::info!(replica = %self.cfg.id, offset = %id.offset,
                voters = %self.replica.voters(),
                "static voters bound to their directories"),
            Err(MembershipError::NothingToPin { waiting }) => {
                tracing::debug!(?waiting, "static voters not yet pinnable");
            }
            Err(e) => tracing::debug!(error = %e, "pinning static voters deferred"),
        }
    }
}
