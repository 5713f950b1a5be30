//! What a client is told when a write or a leadership transfer fails: the driver's errors
//! sorted into refusals (nothing took effect, retrying may help) and unknown outcomes, and the
//! RESP error each becomes. A refusal's reply starts with `TRYAGAIN` or `ERR`; a write that may
//! have been applied is answered `TIMEOUT` or `UNKNOWN`, never as refused.

use std::time::Duration;

use raft_core::driver::WriteError;
use raft_core::protocol::{ProposeError, TransferError};
use raft_core::ReplicaId;

use crate::resp::Reply;

/// Why a write failed, before it is turned into a RESP error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteFailure {
    /// No leader is known (an election is under way).
    NoLeader,
    /// Another replica leads.
    NotLeader(ReplicaId),
    /// The leader has not committed in its epoch yet.
    NotReady,
    /// The leader is handing leadership to this replica.
    Transferring(ReplicaId),
    /// Too many proposals pending.
    QueueFull,
    /// The command is larger than a record may be.
    TooLarge {
        /// Its encoded length.
        len: usize,
        /// The limit.
        max: u32,
    },
    /// The record was replaced in a leader change: it will never be applied.
    Lost,
    /// The leader could not be reached and the write was never sent to it.
    LeaderUnreachable(ReplicaId),
    /// Not confirmed in time: it may or may not be applied.
    Timeout(Duration),
    /// The node stopped before it was refused: nothing was proposed.
    Stopping,
    /// It may or may not be applied, for the reason given.
    Unknown(String),
}

impl WriteFailure {
    /// Nothing was applied and retrying here may succeed soon.
    pub fn retry_here(&self) -> bool {
        matches!(
            self,
            WriteFailure::NoLeader
                | WriteFailure::NotReady
                | WriteFailure::Transferring(_)
                | WriteFailure::QueueFull
                | WriteFailure::Lost
                | WriteFailure::LeaderUnreachable(_)
        )
    }

    /// The failure a driver error reports: a refusal only when the driver says nothing took
    /// effect.
    pub fn from_write_error(e: WriteError) -> WriteFailure {
        match e {
            WriteError::Refused(p) => match p {
                ProposeError::NotLeader {
                    leader: Some(l), ..
                } => WriteFailure::NotLeader(l),
                ProposeError::NotLeader { leader: None, .. } => WriteFailure::NoLeader,
                ProposeError::NotReady => WriteFailure::NotReady,
                ProposeError::Transferring { to } => WriteFailure::Transferring(to),
                ProposeError::QueueFull { .. } => WriteFailure::QueueFull,
                ProposeError::TooLarge { len, max } => WriteFailure::TooLarge { len, max },
                // Shutting down, or a refusal of a later kind: still nothing was proposed.
                _ => WriteFailure::Stopping,
            },
            WriteError::Lost(_) => WriteFailure::Lost,
            WriteError::NotSent { leader, .. } => WriteFailure::LeaderUnreachable(leader),
            WriteError::Unknown(why) => WriteFailure::Unknown(why.to_string()),
            // Never applied, but a later write of the connection was: a retry would land after
            // it, so the client is not invited to retry.
            e @ WriteError::Superseded => WriteFailure::Unknown(e.to_string()),
            // A future kind of error: not known to be a refusal, so not reported as one.
            other => WriteFailure::Unknown(other.to_string()),
        }
    }

    /// The RESP error for this failure; `leader_text` describes a leader to redirect to.
    pub fn reply(self, leader_text: impl Fn(ReplicaId) -> String) -> Reply {
        let msg = match self {
            WriteFailure::NotLeader(l) => format!("TRYAGAIN not leader; {}", leader_text(l)),
            WriteFailure::NoLeader => "TRYAGAIN no leader is known (election in progress)".into(),
            WriteFailure::NotReady => {
                "TRYAGAIN the leader has not committed in its epoch yet".into()
            }
            WriteFailure::Transferring(to) => {
                format!("TRYAGAIN leadership is being transferred to r{}", to.0)
            }
            WriteFailure::QueueFull => "TRYAGAIN too many writes pending".into(),
            WriteFailure::Lost => {
                "TRYAGAIN the write was replaced in a leader change and not applied".into()
            }
            WriteFailure::LeaderUnreachable(l) => format!(
                "TRYAGAIN the leader r{} could not be reached; the write was not sent",
                l.0
            ),
            WriteFailure::TooLarge { len, max } => {
                format!("ERR command of {len} bytes exceeds the record limit of {max}")
            }
            WriteFailure::Timeout(t) => format!(
                "TIMEOUT the write was not confirmed within {} ms; it may or may not be applied",
                t.as_millis()
            ),
            WriteFailure::Stopping => "TRYAGAIN the node is shutting down".into(),
            WriteFailure::Unknown(why) => {
                format!("UNKNOWN the write may or may not be applied ({why}); do not retry blindly")
            }
        };
        Reply::Error(msg)
    }
}

/// The reply to `RAFT TRANSFER`.
pub fn transfer_reply(result: Result<(), TransferError>) -> Reply {
    let msg = match result {
        Ok(()) => return Reply::ok(),
        Err(TransferError::NotLeader {
            leader: Some(l), ..
        }) => format!("ERR not the leader; leader is r{}", l.0),
        Err(TransferError::NotLeader { leader: None, .. }) => {
            "TRYAGAIN no leader is known (election in progress)".into()
        }
        Err(TransferError::NotAVoter(id)) => format!("ERR r{} is not another voter", id.0),
        Err(TransferError::InProgress { to }) => {
            format!("TRYAGAIN a transfer to r{} is in progress", to.0)
        }
        Err(TransferError::Timeout) => {
            "TRYAGAIN the target did not catch up in time; the leader carries on".into()
        }
        Err(e) => format!("TRYAGAIN {e}"),
    };
    Reply::Error(msg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use raft_core::driver::Uncertain;

    fn text(r: Reply) -> String {
        match r {
            Reply::Error(m) => m,
            other => panic!("not an error reply: {other:?}"),
        }
    }

    #[test]
    fn only_refusals_invite_a_retry() {
        let refused = [
            WriteError::Refused(ProposeError::NotReady),
            WriteError::Refused(ProposeError::NotLeader {
                leader: None,
                epoch: raft_core::Epoch(3),
            }),
            WriteError::Lost(raft_core::OffsetAndEpoch::new(
                raft_core::Offset(4),
                raft_core::Epoch(2),
            )),
            WriteError::NotSent {
                leader: ReplicaId(2),
                reason: "connection refused".into(),
            },
        ];
        for e in refused {
            let f = WriteFailure::from_write_error(e.clone());
            assert!(f.retry_here(), "{e:?} -> {f:?}");
            assert!(text(f.reply(|_| String::new())).starts_with("TRYAGAIN"));
        }
        let uncertain = [
            WriteError::Unknown(Uncertain::Truncated),
            WriteError::Superseded,
        ];
        for e in uncertain {
            let f = WriteFailure::from_write_error(e.clone());
            assert!(!f.retry_here(), "{e:?} -> {f:?}");
            assert!(text(f.reply(|_| String::new())).starts_with("UNKNOWN"));
        }
        let timeout = WriteFailure::Timeout(Duration::from_millis(1500));
        assert!(!timeout.retry_here());
        let msg = text(timeout.reply(|_| String::new()));
        assert!(
            msg.starts_with("TIMEOUT") && msg.contains("1500 ms"),
            "{msg}"
        );
    }

    #[test]
    fn a_redirect_names_the_leader() {
        let f = WriteFailure::from_write_error(WriteError::Refused(ProposeError::NotLeader {
            leader: Some(ReplicaId(3)),
            epoch: raft_core::Epoch(7),
        }));
        assert_eq!(f, WriteFailure::NotLeader(ReplicaId(3)));
        let msg = text(f.reply(|l| format!("leader is r{} at 127.0.0.1:7003", l.0)));
        assert_eq!(msg, "TRYAGAIN not leader; leader is r3 at 127.0.0.1:7003");
    }

    #[test]
    fn a_too_large_write_is_an_error_not_a_retry() {
        let f = WriteFailure::from_write_error(WriteError::Refused(ProposeError::TooLarge {
            len: 2048,
            max: 1024,
        }));
        assert!(!f.retry_here());
        let msg = text(f.reply(|_| String::new()));
        assert_eq!(
            msg,
            "ERR command of 2048 bytes exceeds the record limit of 1024"
        );
    }
}
