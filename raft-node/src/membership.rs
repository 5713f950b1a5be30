//! `RAFT VOTERS`, `ADD-VOTER`, `REMOVE-VOTER` and `UPDATE-VOTER`: the voter set (KIP-853) for an
//! operator. Changes go to the leader, one voter at a time, and are answered once the new set
//! is committed, or with an error that says whether the change may still take effect.

use std::net::SocketAddr;
use std::time::Duration;

use raft_core::driver::{Node, VoterChangeError, WriteError};
use raft_core::protocol::{MembershipError, Status};
use raft_core::voters::VoterSetError;
use raft_core::{DirectoryId, ReplicaId, Role};

use crate::resp::Reply;

/// How long a change may take to commit before the answer says it may still complete.
pub const CHANGE_TIMEOUT: Duration = Duration::from_secs(10);

/// `RAFT VOTERS`: one line per voter of the set in force here (`voter:<id> directory=<uuid>
/// endpoint=<addr>`), then, on the leader, one per observer with the directory it fetches
/// with (those an operator can add). A voter whose entry has no endpoint (a configured one)
/// shows the address this node reaches it at (`addr_of`), `-` when it knows none: a node
/// joining with `run --join` learns the voters from these lines.
pub fn voters_text(st: &Status, addr_of: impl Fn(ReplicaId) -> Option<SocketAddr>) -> String {
    let mut s = String::new();
    for (id, v) in st.voter_set.iter() {
        let dir = v.directory.map_or("static".into(), |d| d.to_string());
        let endpoint = match (v.endpoint.is_empty(), addr_of(id)) {
            (false, _) => v.endpoint.clone(),
            (true, Some(addr)) => addr.to_string(),
            (true, None) => "-".into(),
        };
        s += &format!("voter:{} directory={dir} endpoint={endpoint}\r\n", id.0);
    }
    if st.role == Role::Leader {
        for p in &st.observers {
            let dir = p.directory.map_or("-".into(), |d| d.to_string());
            let end = p.end_offset.map_or("-".into(), |o| o.0.to_string());
            s += &format!(
                "observer:{} directory={dir} end_offset={end}\r\n",
                p.replica.0
            );
        }
    }
    s
}

/// `RAFT ADD-VOTER <id> [<directory>]`: without a directory, the one the observer fetches with
/// (read from the leader's status).
pub async fn add_voter(
    node: &Node,
    st: &Status,
    id: u32,
    directory: Option<DirectoryId>,
    endpoint: String,
) -> Reply {
    let directory = match directory {
        Some(d) => d,
        None => {
            if st.role != Role::Leader {
                return not_leader(st);
            }
            let seen = st
                .observers
                .iter()
                .find(|p| p.replica.0 == id)
                .and_then(|p| p.directory);
            match seen {
                Some(d) => d,
                None => {
                    return Reply::Error(format!(
                        "TRYAGAIN r{id} is not fetching from the leader; start it (as an observer) first"
                    ))
                }
            }
        }
    };
    let added = node.add_voter(ReplicaId(id), directory, endpoint, CHANGE_TIMEOUT);
    change_reply(st, added.await)
}

/// `RAFT REMOVE-VOTER <id>`: the voter with this id, whatever its directory.
pub async fn remove_voter(node: &Node, st: &Status, id: u32) -> Reply {
    let directory = st.voter_set.get(ReplicaId(id)).and_then(|v| v.directory);
    let removed = node.remove_voter(ReplicaId(id), directory, CHANGE_TIMEOUT);
    change_reply(st, removed.await)
}

/// `RAFT UPDATE-VOTER <id> <ip:port>`: the voter with this id, whatever its directory, is
/// reached at `endpoint` from now on (a machine that moved, or a voter added with no address).
pub async fn update_voter(node: &Node, st: &Status, id: u32, endpoint: SocketAddr) -> Reply {
    let directory = st.voter_set.get(ReplicaId(id)).and_then(|v| v.directory);
    let updated = node.update_voter(
        ReplicaId(id),
        directory,
        endpoint.to_string(),
        CHANGE_TIMEOUT,
    );
    change_reply(st, updated.await)
}

fn not_leader(st: &Status) -> Reply {
    Reply::Error(match st.leader {
        Some(l) if st.role != Role::Leader => format!("ERR not the leader; leader is r{}", l.0),
        _ => "TRYAGAIN no leader is known (election in progress)".into(),
    })
}

fn change_reply<T>(st: &Status, result: Result<T, VoterChangeError>) -> Reply {
    let msg = match result {
        Ok(_) => return Reply::ok(),
        Err(VoterChangeError::Refused(e)) => match e {
            MembershipError::NotLeader { .. } => return not_leader(st),
            MembershipError::NotReady => {
                "TRYAGAIN the leader has not committed in its epoch yet".into()
            }
            MembershipError::ChangeInProgress { offset } => format!(
                "TRYAGAIN a voter change is in progress (offset {}); one at a time",
                offset.0
            ),
            MembershipError::NotCaughtUp {
                id,
                directory,
                seen,
            } => match seen {
                Some(s) if s != directory => {
                    format!("ERR r{} fetches with directory {s}, not {directory}", id.0)
                }
                _ => format!(
                    "TRYAGAIN r{} has not caught up with the leader's log yet",
                    id.0
                ),
            },
            MembershipError::Invalid(VoterSetError::Duplicate(id)) => {
                format!("ERR r{} is already a voter", id.0)
            }
            MembershipError::Invalid(VoterSetError::NotFound { id, .. }) => {
                format!("ERR r{} is not a voter", id.0)
            }
            MembershipError::Invalid(VoterSetError::LastVoter) => {
                "ERR the last voter cannot be removed".into()
            }
            other => format!("ERR {other}"),
        },
        Err(VoterChangeError::NotConfirmed(WriteError::Unknown(why))) => {
            format!("UNKNOWN the change may still take effect ({why}); check RAFT VOTERS")
        }
        Err(VoterChangeError::NotConfirmed(e)) => {
            format!("TRYAGAIN the change did not take effect ({e})")
        }
        Err(e) => format!("ERR {e}"),
    };
    Reply::Error(msg)
}
