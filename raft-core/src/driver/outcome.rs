//! What a write ends as: the outcome contract every caller of [`super::Node::write`] relies on.
//!
//! A write ends as exactly one of three things:
//!
//! - **committed** ([`Committed`]): applied at its offset, with the state machine's answer;
//! - **definitely not applied** ([`WriteError::Refused`], [`WriteError::NotSent`],
//!   [`WriteError::Lost`], [`WriteError::Superseded`]): the record was never appended anywhere
//!   (refused, never sent to the leader, or dropped as a late batch of its session), or the
//!   committed log holds another record at its offset, so it can never commit. Retrying cannot
//!   apply it twice;
//! - **unknown** ([`WriteError::Unknown`]): it may or may not be applied, now or later. A caller
//!   that retries such a write may apply it twice.
//!
//! Anything the driver cannot prove to be one of the first two is reported as unknown.
//! [`WriteError::is_definite_failure`] tells the two failure kinds apart.
//!
//! Idempotent retries (a request id the state machine deduplicates, as Raft's client sessions
//! and Kafka's producer ids do) are not built in: deduplication belongs in the replicated
//! state, which the driver does not own. A caller that needs exactly-once writes through
//! unknown outcomes puts a request id in its payloads and has its state machine skip ids it has
//! applied. Within the driver, [`super::WriteSession`] keeps one caller's batches in order and
//! stops a batch delivered twice from being proposed twice.

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
    /// The leader could not be reached, and the write was never sent to it: retrying is safe.
    #[error("leader {leader} could not be reached; the write was not sent: {reason}")]
    NotSent {
        /// The leader this replica knows.
        leader: ReplicaId,
        /// Why.
        reason: String,
    },
    /// The batch reached the leader after a later batch of its [`super::WriteSession`], so it
    /// was dropped unproposed and will never be applied. (A retry would land after the later
    /// batch: by then its caller has been told the outcome was unknown, so it never retries.)
    #[error(
        "a later write of the same session reached the leader first; this one was never applied"
    )]
    Superseded,
}

impl WriteError {
    /// True when the write provably never took effect and never will, so it may be retried.
    pub fn is_definite_failure(&self) -> bool {
        matches!(
            self,
            WriteError::Refused(_)
                | WriteError::Lost(_)
                | WriteError::NotSent { .. }
                | WriteError::Superseded
        )
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
    /// This replica's copy of the record was replaced in a leader change, and no record was
    /// applied at its offset for a while: another replica may still hold it, and a later
    /// leader may commit it.
    #[error("the write's record was replaced here in a leader change; another replica may still commit it")]
    Truncated,
    /// The leader received this batch twice (a transport retry after a lost connection): the
    /// copy is not proposed again, and the first copy's fate is not known here.
    #[error("a duplicate of a batch the leader already proposed")]
    Duplicate,
    /// A snapshot covering the write's offset was installed before the write was applied here,
    /// so this replica cannot tell which record committed there.
    #[error("a snapshot covering the write's offset replaced the log")]
    Snapshotted,
    /// The caller's deadline passed with the record appended and not yet committed; it may
    /// still commit.
    #[error("not committed before the deadline; it may still complete")]
    TimedOut,
}

/// A committed and applied write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    /// Where the record sits.
    pub id: OffsetAndEpoch,
    /// What the state machine answered for it.
    pub response: Bytes,
}
