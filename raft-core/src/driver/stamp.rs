//! The leader's hook on what it proposes: [`Stamp`] sees every data payload once, where the
//! leader hands it to the protocol, and may rewrite it, for example to carry the leader's
//! clock. Payloads written on a follower are forwarded to the leader and stamped there, so a
//! record carries what the replica that ordered it decided, not what the one that received it
//! thought.

use bytes::Bytes;

/// Rewrites the data payloads a leader proposes, in the order they enter the log.
///
/// Called on the replica task, once per payload proposed here (a client's writes on this
/// replica and writes forwarded by followers alike), immediately before the protocol appends
/// it: keep it short and never block. A payload the implementation does not recognise must
/// come back unchanged. A payload the protocol then refuses (this replica no longer leads) is
/// simply not proposed; the caller learns it was refused as usual.
pub trait Stamp: Send + Sync + std::fmt::Debug {
    /// The payload to propose in place of `payload`.
    fn stamp(&self, payload: Bytes) -> Bytes;
}
