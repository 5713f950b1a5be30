//! The voters a joining node learned (`run --join`), laid over the file and flags in place of
//! `[[voters]]`.

use std::path::PathBuf;

use super::file::{FileConfig, PeerEntry};
use super::{bad, ConfigError};
use crate::join::LearnedVoter;

impl FileConfig {
    /// The data directory as configured so far (relative to the file), if set.
    pub fn data_dir_path(&self) -> Option<PathBuf> {
        self.data_dir.as_deref().map(|p| self.path(p))
    }

    /// The cluster CA and this node's certificate and key, when the client ports speak TLS
    /// (`client.tls_cert` set): a joining node then asks the running nodes over TLS.
    pub fn join_tls_paths(&self) -> Option<super::TlsPaths> {
        self.client.tls_cert.as_ref()?;
        Some(super::TlsPaths {
            ca_cert: self.path(self.tls.ca_cert.as_deref()?),
            cert: self.path(self.tls.cert.as_deref()?),
            key: self.path(self.tls.key.as_deref()?),
        })
    }

    /// The cluster id set so far, which a joining node checks the node it asks against.
    pub fn cluster_id(&self) -> Option<&str> {
        self.cluster_id.as_deref()
    }

    /// The client password set so far, which a joining node also uses to ask a running node.
    pub fn requirepass(&self) -> Option<&str> {
        self.client.requirepass.as_deref()
    }

    /// Makes `voters`, less this replica, the voter list: the contacts a joining node learns
    /// the cluster from. This replica is always an observer, reached at its `listen.peer`
    /// address (or its own entry's in the file; one of them is required): an entry naming its own id is the voter it was before it lost
    /// its disk (or another machine), and counting itself as that voter would let it vote
    /// without the data that voter acknowledged (W1). It becomes a voter only when the log
    /// names it, with its new directory (`RAFT ADD-VOTER`). Voters the file or flags list are
    /// replaced: the running cluster knows its voters better than a file (and a founder's
    /// file, kept unchanged for its rejoin after a disk loss, names its old directory).
    pub fn use_learned_voters(&mut self, voters: &[LearnedVoter]) -> Result<(), ConfigError> {
        let me = self
            .replica_id
            .ok_or_else(|| bad("replica_id", "required"))?;
        // The file's own entry (a founder's file kept for a rejoin) still says where this node
        // listens.
        let own = self
            .voters
            .iter()
            .chain(&self.observers)
            .find(|e| e.id == me)
            .map(|e| (e.peer.clone(), e.client.clone()));
        if let Some((peer, client)) = own {
            self.listen.peer.get_or_insert(peer);
            if self.listen.client.is_none() {
                self.listen.client = client;
            }
        }
        self.voters = voters
            .iter()
            .filter(|v| v.id != me)
            .map(|v| PeerEntry {
                id: v.id,
                peer: v.peer.clone(),
                client: None,
                directory: v.directory.clone(),
            })
            .collect();
        if self.voters.is_empty() {
            return Err(bad(
                "voters",
                format!(
                    "the node asked names replica {me} as the only voter: a node cannot join a \
                     cluster of itself (if its disk was lost, the cluster has no other copy)"
                ),
            ));
        }
        self.observers.retain(|e| e.id != me);
        let peer = self.listen.peer.clone().ok_or_else(|| {
            bad(
                "listen.peer",
                "required with --join: the address peers reach this node at",
            )
        })?;
        self.observers.push(PeerEntry {
            id: me,
            peer,
            client: self.listen.client.clone(),
            directory: None,
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use raft_core::ReplicaId;

    use super::*;

    const JOINER: &str = "cluster_id = \"c\"\nreplica_id = 4\ndata_dir = \"d\"\n\
        [listen]\npeer = \"127.0.0.1:7104\"\nclient = \"127.0.0.1:7004\"\n\
        [tls]\nca_cert = \"ca.pem\"\ncert = \"n.pem\"\nkey = \"n.key\"\n";

    fn learned() -> Vec<LearnedVoter> {
        (1..=3)
            .map(|id| LearnedVoter {
                id,
                peer: format!("127.0.0.1:710{id}"),
                directory: Some(format!("0b7e6d1c-0000-4000-8000-00000000000{id}")),
            })
            .collect()
    }

    #[test]
    fn a_joiner_listed_nowhere_becomes_an_observer_of_the_learned_voters() {
        let mut file = FileConfig::parse(JOINER).unwrap();
        file.use_learned_voters(&learned()).unwrap();
        let cfg = file.check().unwrap();
        assert_eq!(
            cfg.voters.keys().copied().collect::<Vec<_>>(),
            [ReplicaId(1), ReplicaId(2), ReplicaId(3)]
        );
        assert_eq!(
            cfg.voters[&ReplicaId(2)].peer,
            "127.0.0.1:7102".parse().unwrap()
        );
        assert_eq!(
            cfg.observers.keys().copied().collect::<Vec<_>>(),
            [ReplicaId(4)]
        );
        assert_eq!(cfg.listen_peer, "127.0.0.1:7104".parse().unwrap());
    }

    #[test]
    fn a_joiner_whose_id_is_a_learned_voter_is_an_observer_that_keeps_directories() {
        let mut file =
            FileConfig::parse(&JOINER.replace("replica_id = 4", "replica_id = 2")).unwrap();
        file.use_learned_voters(&learned()).unwrap();
        let cfg = file.check().unwrap();
        assert_eq!(
            cfg.voters.keys().copied().collect::<Vec<_>>(),
            [ReplicaId(1), ReplicaId(3)]
        );
        assert_eq!(
            cfg.voters[&ReplicaId(3)].directory.map(|d| d.to_string()),
            Some("0b7e6d1c-0000-4000-8000-000000000003".to_string())
        );
        assert_eq!(
            cfg.observers.keys().copied().collect::<Vec<_>>(),
            [ReplicaId(2)]
        );
    }

    #[test]
    fn a_joiner_named_as_the_only_voter_is_refused() {
        let mut file =
            FileConfig::parse(&JOINER.replace("replica_id = 4", "replica_id = 1")).unwrap();
        let err = file.use_learned_voters(&learned()[..1]).unwrap_err();
        assert!(err.to_string().contains("only voter"), "{err}");
    }

    #[test]
    fn learned_voters_replace_the_files_and_no_peer_address_is_refused() {
        let listed = format!(
            "{JOINER}[[voters]]\nid = 4\npeer = \"127.0.0.1:7104\"\n\
             directory = \"0b7e6d1c-0000-4000-8000-0000000000ff\"\n"
        );
        let mut file = FileConfig::parse(&listed).unwrap();
        file.use_learned_voters(&learned()).unwrap();
        let cfg = file.check().unwrap();
        assert_eq!(cfg.voters.len(), 3, "the learned voters, not the file's");
        assert!(cfg.observers.contains_key(&ReplicaId(4)));
        let no_peer = JOINER.replace("peer = \"127.0.0.1:7104\"\n", "");
        let err = FileConfig::parse(&no_peer)
            .unwrap()
            .use_learned_voters(&learned())
            .unwrap_err();
        assert!(err.to_string().contains("listen.peer"), "{err}");
    }
}
