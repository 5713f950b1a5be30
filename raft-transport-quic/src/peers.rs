//! The peer table: where each replica is reached, and its cached connection.
//!
//! It starts from the configured peers and grows at run time: from the endpoints of voters
//! added online (through [`raft_core::io::Transport::voters_changed`]), and, when unlisted
//! replicas are accepted, from inbound connections, whose remote address is the way back (the
//! endpoint sends and receives on one socket).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use quinn::Connection;
use raft_core::ReplicaId;

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
}

impl Peers {
    pub(crate) fn new(configured: impl IntoIterator<Item = (ReplicaId, SocketAddr)>) -> Peers {
        let map = configured
            .into_iter()
            .map(|(id, addr)| (id, Peer::new(id, addr)))
            .collect();
        Peers {
            map: RwLock::new(map),
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
}
