//! What a write ends as: the outcome contract every caller of [`super::Node::write`] relies on.

use bytes::Bytes;

use crate::protocol::ProposeError;
use crate::types::OffsetAndEpoch;

/// Why a write did not commit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WriteError {
    /// The proposal was refused before it was appended.
    #[error(transparent)]
    Refused(#[from] ProposeError),
    /// The record was appended but a leader change replaced it: it will never commit.
    #[error("the write at {0} was lost in a leader change")]
    Lost(OffsetAndEpoch),
    /// The node stopped before the write's fate was known.
    #[error("the node is shutting down")]
    ShuttingDown,
    /// The node stopped after a storage or state-machine failure.
    #[error("the node failed: {0}")]
    Failed(String),
}

/// A committed and applied write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    /// Where the record sits.
    pub id: OffsetAndEpoch,
    /// What the state machine answered for it.
    pub response: Bytes,
}
