//! Changes of a replica, without polling: [`Node::watch`] gives a `tokio::sync::watch`
//! receiver of [`NodeState`], updated by the replica task after every step that changed it
//! (role, epoch, leader, voter set, high watermark or applied offset).
//!
//! A watch channel keeps only the newest value: a receiver that falls behind sees the latest
//! state, never a queue of old ones, so a slow observer costs the replica nothing. The channel
//! closes when the replica stops ([`Node::stopped`] says why).

use tokio::sync::watch;

use super::replica_task::ReplicaTask;
use super::Node;
use crate::types::{Epoch, Offset, ReplicaId, Role};
use crate::voters::VoterSet;

/// What a replica is, as of its latest change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeState {
    /// This replica.
    pub id: ReplicaId,
    /// Its role (released: a durable transition shows once persisted).
    pub role: Role,
    /// Its epoch.
    pub epoch: Epoch,
    /// The leader it knows in that epoch.
    pub leader: Option<ReplicaId>,
    /// The voter set in force on it.
    pub voters: VoterSet,
    /// The high watermark it knows.
    pub high_watermark: Offset,
    /// The offset below which its state machine has applied every record.
    pub applied: Offset,
}

impl NodeState {
    /// Whether this replica leads.
    pub fn is_leader(&self) -> bool {
        self.role == Role::Leader
    }

    /// Whether this replica is a voter of the set in force (else an observer), by id.
    pub fn is_voter(&self) -> bool {
        self.voters.contains_id(self.id)
    }
}

/// The sending side, held by the replica task.
pub(super) type StateSender = watch::Sender<NodeState>;

impl ReplicaTask {
    /// Publishes the state if it changed (the voter set is cloned only when it did).
    pub(super) fn publish_state(&self) {
        let r = &self.replica;
        let applied = self.applied;
        self.state.send_if_modified(|s| {
            let same = s.role == r.role()
                && s.epoch == r.epoch()
                && s.leader == r.leader()
                && s.high_watermark == r.high_watermark()
                && s.applied == applied
                && s.voters == *r.voters();
            if !same {
                s.role = r.role();
                s.epoch = r.epoch();
                s.leader = r.leader();
                s.high_watermark = r.high_watermark();
                s.applied = applied;
                if s.voters != *r.voters() {
                    s.voters = r.voters().clone();
                }
            }
            !same
        });
    }
}

impl Node {
    /// The replica's state, updated on every change until it stops: wait with
    /// `changed().await` or `wait_for(..)` instead of polling [`Node::status`].
    ///
    /// ```no_run
    /// # async fn demo(node: raft_core::driver::Node) {
    /// let mut state = node.watch();
    /// // Wait until some replica leads (or the replica stops: then `wait_for` fails).
    /// if let Ok(s) = state.wait_for(|s| s.leader.is_some()).await.map(|s| s.clone()) {
    ///     println!("{} leads epoch {}", s.leader.unwrap(), s.epoch);
    /// }
    /// # }
    /// ```
    pub fn watch(&self) -> watch::Receiver<NodeState> {
        self.state.clone()
    }
}
