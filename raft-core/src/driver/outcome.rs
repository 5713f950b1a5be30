//! What a write ends as: the outcome contract every caller of [`super::Node::write`] relies on.
//!
//! A write ends as exactly one of three things:
//!
//! - **committed** ([`Committed`]): applied at its offset, with the state machine's answer;
//! - **definitely not applied** ([`WriteError::Refused`], [`WriteError::Lost`]): the record was
//!   never appended anywhere, or the committed log holds another record at its offset, so it can
//!   never commit. Retrying cannot apply it twice;
//! - **unknown** ([`WriteError::Unknown`]): it may or may not be applied, now or later. A caller
//!   that retries such a write may apply it twice.
//!
//! Anything the driver cannot prove to be one of the first two is reported as unknown.

use bytes::Bytes;

use crate::protocol::ProposeError;
use crate::types::{OffsetAndEpoch, ReplicaId};

/// Why a write did not commit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WriteError {
    /// The proposal was refused before it was appended anywhere: retrying is safe.
    #[error(transparent)]
    Refused(#[from] ProposeError),
    /// The record was appended, but the committed log holds another record at its offset (or
    /// it was dropped before being appended): it will never commit, and retrying is safe.
    #[error("the write at {0} was replaced in a leader change and will never be applied")]
    Lost(OffsetAndEpoch),
    /// The write may or may not be applied: retrying it may apply it twice.
    #[error("the write may or may not be applied: {0}")]
    Unknown(Uncertain),
}

impl WriteError {
    /// True when the write provably never took effect and never will, so it may be retried.
    pub fn is_definite_failure(&self) -> bool {
        matches!(self, WriteError::Refused(_) | WriteError::Lost(_))
    }
}

/// Why a write's outcome is unknown.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Uncertain {
    /// This node stopped with the write proposed and not yet applied.
    #[error("the node stopped with the write pending")]
    Stopped,
    /// This node stopped after a storage or state-machine failure with the write pending.
    #[error("the node failed: {0}")]
    Failed(String),
    /// The write was forwarded to the leader, and the forward failed or timed out after it may
    /// have arrived there.
    #[error("forwarding to leader {leader} failed: {reason}")]
    Forward {
        /// The leader the write was forwarded to.
        leader: ReplicaId,
        /// What went wrong.
        reason: String,
    },
    /// The leader the write was forwarded to could not tell (it stopped or failed with the
    /// write pending).
    #[error("leader {0} stopped with the write pending")]
    LeaderStopped(ReplicaId),
    /// A snapshot covering the write's offset was installed before the write was applied here,
    /// so this replica cannot tell which record committed there.
    #[error("a snapshot covering the write's offset replaced the log")]
    Snapshotted,
}

/// A committed and applied write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    /// Where the record sits.
    pub id: OffsetAndEpoch,
    /// What the state machine answered for it.
    pub response: Bytes,
}
