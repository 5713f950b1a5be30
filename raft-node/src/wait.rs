//! `WAIT numreplicas timeout`: how many other replicas hold the connection's last write.
//!
//! A write acknowledged to a client is already committed, so a majority of the voters holds
//! it; `WAIT` answers how many replicas besides this one are known to hold it, never more:
//!
//! - on the leader, the replicas (voters and observers) whose acknowledged fetch offset is past
//!   the write: the leader validated their logs up to that offset, and a committed record is
//!   never truncated;
//! - elsewhere, only the leader's progress is unknown here, but a committed write is held by
//!   every leader from its commit on, so the answer is 1 (0 if no write of the connection was
//!   confirmed and no leader is known).
//!
//! A write whose outcome was unknown (`TIMEOUT`, `UNKNOWN`) may still be applied at an offset
//! nobody told this connection: until a later write of the connection commits (which orders
//! after it, see `WriteSession`), `WAIT` answers 0. As in Redis, a timeout of 0 waits without
//! bound, until the count is reached or the connection is killed or the node stops.

use std::collections::BTreeSet;
use std::time::Duration;

use raft_core::Role;

use crate::clients::ClientEntry;
use crate::resp::Reply;
use crate::server::Server;

/// How often `WAIT` looks at the replicas' progress again.
const POLL: Duration = Duration::from_millis(10);

/// What a connection knows of its last write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LastWrite {
    /// It wrote nothing yet.
    #[default]
    None,
    /// Its last write committed at this log offset.
    At(u64),
    /// A write's outcome was unknown and no later write committed.
    Uncertain,
}

impl LastWrite {
    /// The state after a write committed at `offset`.
    pub fn committed(&mut self, offset: u64) {
        *self = match *self {
            LastWrite::At(prev) => LastWrite::At(prev.max(offset)),
            _ => LastWrite::At(offset),
        };
    }

    /// The state after a write whose outcome is unknown.
    pub fn uncertain(&mut self) {
        *self = LastWrite::Uncertain;
    }
}

impl Server {
    /// Waits until `want` other replicas hold `last`, at most `timeout` (`None`: until the
    /// connection is killed), and answers how many do.
    pub(crate) async fn wait_replicas(
        &self,
        last: LastWrite,
        want: u64,
        timeout: Option<Duration>,
        entry: &ClientEntry,
    ) -> Reply {
        let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
        loop {
            let have = self.replicas_holding(last).await;
            let now = tokio::time::Instant::now();
            if have >= want || deadline.is_some_and(|d| now >= d) || entry.is_killed() {
                return Reply::Int(have as i64);
            }
            let next = deadline.map_or(now + POLL, |d| d.min(now + POLL));
            tokio::select! {
                _ = tokio::time::sleep_until(next) => {}
                _ = entry.killed() => {}
            }
        }
    }

    /// How many replicas other than this one are known to hold `last` now.
    async fn replicas_holding(&self, last: LastWrite) -> u64 {
        let Some(st) = self.node.status().await else {
            return 0;
        };
        let offset = match last {
            LastWrite::Uncertain => return 0,
            LastWrite::None => None,
            LastWrite::At(o) => Some(o),
        };
        if st.role != Role::Leader {
            let leader_known = st.leader.is_some_and(|l| l != st.id);
            return u64::from(offset.is_some() || leader_known);
        }
        holding(&st, offset)
    }
}

/// On the leader: the other replicas whose acknowledged fetch offset is past `offset` (any
/// that fetched, for `None`), each counted once.
fn holding(st: &raft_core::protocol::Status, offset: Option<u64>) -> u64 {
    let ids: BTreeSet<_> = st
        .voters
        .iter()
        .chain(&st.observers)
        .filter(|p| p.replica != st.id)
        .filter(|p| {
            p.end_offset
                .is_some_and(|end| offset.is_none_or(|o| end.0 > o))
        })
        .map(|p| p.replica)
        .collect();
    ids.len() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_later_commit_settles_an_unknown_write() {
        let mut w = LastWrite::default();
        w.committed(5);
        assert_eq!(w, LastWrite::At(5));
        w.uncertain();
        assert_eq!(w, LastWrite::Uncertain);
        w.committed(9);
        assert_eq!(w, LastWrite::At(9));
        w.committed(7);
        assert_eq!(w, LastWrite::At(9), "never goes back");
    }
}
