//! Leadership transfer: the leader hands its role to a voter the operator names.
//!
//! KRaft only resigns (EndQuorumEpoch with preferred successors ranked by fetch offset); a
//! transfer adds a chosen target. The leader stops accepting proposals, appends what it had
//! accepted, waits until the target has fetched (and so made durable) its whole log, then
//! resigns with the target first among the preferred successors: the target starts its election
//! at once, and its vote request carries the leader's invitation, which sticky voters honour (D3).
//! Because the target holds the whole log, every voter's log check grants it.
//!
//! While a transfer is pending the leader holds no lease (D6): a lease read falls back to a
//! confirmation round. A target that does not catch up within one election timeout abandons the
//! transfer and the leader carries on.

use super::{Event, Outputs, Replica, RoleState};
use crate::types::{Epoch, Instant, ReplicaId};

/// A transfer in progress on the leader.
#[derive(Clone, Copy, Debug)]
pub(super) struct Transfer {
    pub(super) to: ReplicaId,
    pub(super) deadline: Instant,
}

/// Why a leadership transfer was refused or did not happen.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransferError {
    /// Only the leader can transfer leadership.
    #[error("not the leader (epoch {epoch}, leader {leader:?})")]
    NotLeader {
        /// This replica's epoch.
        epoch: Epoch,
        /// The leader it knows.
        leader: Option<ReplicaId>,
    },
    /// The target is not another voter.
    #[error("replica {0} is not another voter")]
    NotAVoter(ReplicaId),
    /// Another transfer is already in progress.
    #[error("a transfer to {to} is already in progress")]
    InProgress {
        /// Its target.
        to: ReplicaId,
    },
    /// The target did not catch up within one election timeout; the leader carries on.
    #[error("the target did not catch up in time")]
    Timeout,
    /// The replica is shutting down.
    #[error("shutting down")]
    ShuttingDown,
}

impl Replica {
    /// Starts handing leadership to voter `to`. `Ok` means the transfer started; its outcome is
    /// an [`Event::TransferEnded`]. Proposals are refused with [`super::ProposeError::Transferring`]
    /// until it ends.
    pub fn transfer_leadership(
        &mut self,
        now: Instant,
        to: ReplicaId,
        out: &mut Outputs,
    ) -> Result<(), TransferError> {
        if self.resigning {
            return Err(TransferError::ShuttingDown);
        }
        if to == self.cfg.id || !self.voters().contains_id(to) {
            return Err(TransferError::NotAVoter(to));
        }
        let deadline = now.plus(self.cfg.election_timeout);
        let (epoch, leader) = (self.election.epoch, self.known_leader());
        let RoleState::Leader(l) = &mut self.role else {
            return Err(TransferError::NotLeader { epoch, leader });
        };
        if let Some(t) = l.transfer {
            return Err(TransferError::InProgress { to: t.to });
        }
        l.transfer = Some(Transfer { to, deadline });
        tracing::info!(replica = %self.cfg.id, %epoch, target = %to, "leadership transfer started");
        // Everything accepted so far goes to the log now, so that the target can fetch it.
        self.leader_flush(now, out);
        self.leader_poll_transfer(now, out);
        Ok(())
    }

    /// Resigns in favour of the target once it holds the whole log; abandons at the deadline.
    pub(super) fn leader_poll_transfer(&mut self, now: Instant, out: &mut Outputs) {
        let end = self.log.end;
        let RoleState::Leader(l) = &mut self.role else {
            return;
        };
        let Some(t) = l.transfer else {
            return;
        };
        // A fetch offset is an acknowledgement of durability (D4): the target has it all.
        let caught_up = l.accumulator.is_empty()
            && l.voters
                .get(&t.to)
                .and_then(|p| p.end)
                .is_some_and(|e| e >= end);
        if caught_up {
            l.transfer = None;
            out.events.push(Event::TransferEnded {
                to: t.to,
                result: Ok(()),
            });
            self.leader_resign_to(now, Some(t.to), out);
        } else if now >= t.deadline {
            l.transfer = None;
            tracing::warn!(replica = %self.cfg.id, target = %t.to,
                "leadership transfer abandoned: the target did not catch up");
            out.events.push(Event::TransferEnded {
                to: t.to,
                result: Err(TransferError::Timeout),
            });
        }
    }
}
