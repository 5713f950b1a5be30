//! The peer table: where each replica is reached, and its cached connection.
//!
//! It starts from the configured peers and grows at run time: from the endpoints of voters
//! added online (through [`raft_core::io::Transport::voters_changed`] and
//! [`raft_core::io::HostTransport::voters_changed`]), and, when unlisted replicas are accepted,
//! from inbound connections, whose remote address is the way back (the endpoint sends and
//! receives on one socket).
//!
//! Voter endpoints are host endpoints, the same in every group a host runs, so the endpoints
//! every group advertises feed one table. Each group's are kept apart ([`Endpoints`]): a voter
//! removed from one group keeps the endpoint another group still names.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use quinn::Connection;
use raft_core::{GroupId, ReplicaId};

use crate::certs;

/// One peer: its address and its connection slot.
pub(crate) struct Peer {
    pub(crate) addr: SocketAddr,
    pub(crate) server_name: String,
    pub(crate) slot: tokio::sync::Mutex<Slot>,
}

impl Peer {
    fn new(id: ReplicaId, addr: SocketAddr) -> Arc<Peer> {
        Arc::new(Peer {
            addr,
            server_name: certs::replica_dns_name(id),
            slot: tokio::sync::Mutex::new(Slot::default()),
        })
    }
}

/// A peer's cached connection and dial backoff.
#[derive(Default)]
pub(crate) struct Slot {
    pub(crate) conn: Option<Connection>,
    pub(crate) backoff: Duration,
    pub(crate) retry_at: Option<tokio::time::Instant>,
    pub(crate) ever_connected: bool,
}

/// Every peer this endpoint knows, by id. The lock is never held across an await: entries are
/// shared `Arc`s, replaced whole.
pub(crate) struct Peers {
    map: RwLock<HashMap<ReplicaId, Arc<Peer>>>,
    /// What each group's voter set advertises. Its lock is taken before the map's, and held
    /// while the map follows it, so that two groups' updates apply in the order they were
    /// reckoned.
    advertised: Mutex<Endpoints>,
}

/// What an advertisement changed in the peer table, for the log.
#[derive(Clone, PartialEq, Eq, Debug)]
pub(crate) enum Advertised {
    /// The replica is now reached at this address.
    Moved(ReplicaId, SocketAddr),
    /// Groups name different endpoints for the replica (one of them is stale); all of them.
    Conflict(ReplicaId, Vec<SocketAddr>),
}

/// The voter endpoints each group advertises, each stamped with when it was first advertised
/// at that address by that group.
#[derive(Default, Debug)]
pub(crate) struct Endpoints {
    groups: HashMap<GroupId, HashMap<ReplicaId, Stamped>>,
    stamps: u64,
}

#[derive(Clone, Copy, Debug)]
struct Stamped {
    addr: SocketAddr,
    stamp: u64,
}

impl Endpoints {
    /// Replaces what `group` advertises with `endpoints` (an empty map forgets the group), and
    /// returns every replica whose endpoint this may have changed.
    fn update(
        &mut self,
        group: GroupId,
        endpoints: BTreeMap<ReplicaId, SocketAddr>,
    ) -> BTreeSet<ReplicaId> {
        let old = self.groups.remove(&group).unwrap_or_default();
        let mut new = HashMap::with_capacity(endpoints.len());
        for (id, addr) in endpoints {
            let stamp = match old.get(&id) {
                Some(s) if s.addr == addr => s.stamp,
                _ => {
                    self.stamps += 1;
                    self.stamps
                }
            };
            new.insert(id, Stamped { addr, stamp });
        }
        let touched = old.keys().chain(new.keys()).copied().collect();
        if !new.is_empty() {
            self.groups.insert(group, new);
        }
        touched
    }

    /// Where `id` is reached by the groups' word: the newest endpoint any group names for it,
    /// or `None` when no group does.
    fn endpoint(&self, id: ReplicaId) -> Option<SocketAddr> {
        self.named(id).max_by_key(|s| s.stamp).map(|s| s.addr)
    }

    /// The distinct endpoints the groups name for `id`, when there is more than one.
    fn conflict(&self, id: ReplicaId) -> Option<Vec<SocketAddr>> {
        let addrs: BTreeSet<SocketAddr> = self.named(id).map(|s| s.addr).collect();
        (addrs.len() > 1).then(|| addrs.into_iter().collect())
    }

    fn named(&self, id: ReplicaId) -> impl Iterator<Item = Stamped> + '_ {
        self.groups
            .values()
            .filter_map(move |g| g.get(&id).copied())
    }
}

impl Peers {
    pub(crate) fn new(configured: impl IntoIterator<Item = (ReplicaId, SocketAddr)>) -> Peers {
        let map = configured
            .into_iter()
            .map(|(id, addr)| (id, Peer::new(id, addr)))
            .collect();
        Peers {
            map: RwLock::new(map),
            advertised: Mutex::new(Endpoints::default()),
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<ReplicaId, Arc<Peer>>> {
        self.map.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<ReplicaId, Arc<Peer>>> {
        self.map.write().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn get(&self, id: ReplicaId) -> Option<Arc<Peer>> {
        self.read().get(&id).cloned()
    }

    pub(crate) fn ids(&self) -> Vec<ReplicaId> {
        self.read().keys().copied().collect()
    }

    pub(crate) fn all(&self) -> Vec<Arc<Peer>> {
        self.read().values().cloned().collect()
    }

    /// Reaches `id` at `addr` from now on. A changed address starts a fresh slot (the old
    /// connection, if any, stays open until it idles out). Returns whether anything changed.
    pub(crate) fn set(&self, id: ReplicaId, addr: SocketAddr) -> bool {
        let mut map = self.write();
        if map.get(&id).is_some_and(|p| p.addr == addr) {
            return false;
        }
        map.insert(id, Peer::new(id, addr));
        true
    }

    /// Takes `endpoints` as what `group`'s voter set advertises now, and moves every replica
    /// whose endpoint that changes to the newest endpoint any group names for it. A replica no
    /// group names any more keeps its address: it may still be an observer that dials in, and
    /// with only listed peers accepted, the table is also who may.
    pub(crate) fn advertise(
        &self,
        group: GroupId,
        endpoints: BTreeMap<ReplicaId, SocketAddr>,
    ) -> Vec<Advertised> {
        let mut advertised = self.advertised.lock().unwrap_or_else(|p| p.into_inner());
        let mut changes = Vec::new();
        for id in advertised.update(group, endpoints) {
            if let Some(addrs) = advertised.conflict(id) {
                changes.push(Advertised::Conflict(id, addrs));
            }
            if let Some(addr) = advertised.endpoint(id) {
                if self.set(id, addr) {
                    changes.push(Advertised::Moved(id, addr));
                }
            }
        }
        changes
    }

    /// The entry for `id`, made from an inbound connection's remote address when there is
    /// none yet (a known peer keeps its configured or advertised address).
    pub(crate) fn learn(&self, id: ReplicaId, remote: SocketAddr) -> Arc<Peer> {
        if let Some(p) = self.get(id) {
            return p;
        }
        self.write()
            .entry(id)
            .or_insert_with(|| Peer::new(id, remote))
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_is_learned_once_and_moved_only_on_purpose() {
        let a: SocketAddr = "127.0.0.1:7001".parse().unwrap();
        let b: SocketAddr = "127.0.0.1:7002".parse().unwrap();
        let peers = Peers::new([(ReplicaId(2), a)]);
        // An inbound connection from a known peer does not move it.
        assert_eq!(peers.learn(ReplicaId(2), b).addr, a);
        // An unknown one is reached back at its remote address.
        assert_eq!(peers.learn(ReplicaId(9), b).addr, b);
        assert_eq!(peers.learn(ReplicaId(9), a).addr, b);
        // An advertised endpoint replaces the address; the same one changes nothing.
        assert!(peers.set(ReplicaId(9), a));
        assert!(!peers.set(ReplicaId(9), a));
        assert_eq!(peers.get(ReplicaId(9)).map(|p| p.addr), Some(a));
        let mut ids = peers.ids();
        ids.sort();
        assert_eq!(ids, vec![ReplicaId(2), ReplicaId(9)]);
    }

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    fn advertise(peers: &Peers, group: u64, endpoints: &[(u32, u16)]) -> Vec<Advertised> {
        let endpoints = endpoints
            .iter()
            .map(|(id, port)| (ReplicaId(*id), addr(*port)))
            .collect();
        peers.advertise(GroupId(group), endpoints)
    }

    fn at(peers: &Peers, id: u32) -> Option<u16> {
        peers.get(ReplicaId(id)).map(|p| p.addr.port())
    }

    #[test]
    fn an_endpoint_stays_while_any_group_names_it() {
        let peers = Peers::new([(ReplicaId(2), addr(7002))]);
        // Groups 1 and 2 both name host 9; a static voter (2) keeps its configured address.
        let moved = advertise(&peers, 1, &[(9, 7009)]);
        assert_eq!(moved, vec![Advertised::Moved(ReplicaId(9), addr(7009))]);
        assert!(
            advertise(&peers, 2, &[(9, 7009)]).is_empty(),
            "nothing moved"
        );
        // Group 1 drops host 9: group 2 still names it.
        assert!(advertise(&peers, 1, &[]).is_empty());
        assert_eq!(at(&peers, 9), Some(7009));
        // Group 2 drops it too: no group names it, and the address stays as it was.
        assert!(advertise(&peers, 2, &[]).is_empty());
        assert_eq!(at(&peers, 9), Some(7009));
        assert_eq!(at(&peers, 2), Some(7002));
    }

    #[test]
    fn the_newest_endpoint_wins_and_a_dropped_one_falls_back_to_another_groups() {
        let peers = Peers::new([]);
        advertise(&peers, 1, &[(9, 7009), (8, 7008)]);
        // Group 2 learns that host 9 moved; group 1 has not yet.
        let changes = advertise(&peers, 2, &[(9, 7109)]);
        assert_eq!(
            changes,
            vec![
                Advertised::Conflict(ReplicaId(9), vec![addr(7009), addr(7109)]),
                Advertised::Moved(ReplicaId(9), addr(7109)),
            ]
        );
        // Group 1 repeating its older word does not move it back.
        let changes = advertise(&peers, 1, &[(9, 7009), (8, 7008)]);
        assert!(
            changes.iter().all(|c| !matches!(c, Advertised::Moved(..))),
            "{changes:?}"
        );
        assert_eq!(at(&peers, 9), Some(7109));
        // Group 2 forgets host 9: the endpoint group 1 still names is the one left.
        assert_eq!(
            advertise(&peers, 2, &[]),
            vec![Advertised::Moved(ReplicaId(9), addr(7009))]
        );
        // Group 1 catches up with the move.
        advertise(&peers, 1, &[(9, 7109), (8, 7008)]);
        assert_eq!(at(&peers, 9), Some(7109));
        assert_eq!(at(&peers, 8), Some(7008));
    }
}
