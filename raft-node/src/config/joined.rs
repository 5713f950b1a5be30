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

    /// The client password set so far, which a joining node also uses to ask a running node.
    pub fn requirepass(&self) -> Option<&str> {
        self.client.requirepass.as_deref()
    }

    /// Makes `voters` the voter list. A file or flag that also lists voters is refused (one
    /// source of truth); this replica, when not a voter, becomes an observer reached at its
    /// `listen.peer` address, which is then required.
    pub fn use_learned_voters(&mut self, voters: &[LearnedVoter]) -> Result<(), ConfigError> {
        if !self.voters.is_empty() {
            return Err(bad(
                "voters",
                "--join learns the voters from a running node: remove [[voters]] (and --voters)",
            ));
        }
        self.voters = voters
            .iter()
            .map(|v| PeerEntry {
                id: v.id,
                peer: v.peer.clone(),
                client: None,
            })
            .collect();
        let me = self
            .replica_id
            .ok_or_else(|| bad("replica_id", "required"))?;
        let listed = self
            .voters
            .iter()
            .chain(&self.observers)
            .any(|e| e.id == me);
        if !listed {
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
            });
        }
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
    fn a_joiner_that_is_a_learned_voter_stays_one() {
        let mut file =
            FileConfig::parse(&JOINER.replace("replica_id = 4", "replica_id = 2")).unwrap();
        file.use_learned_voters(&learned()).unwrap();
        let cfg = file.check().unwrap();
        assert!(cfg.voters.contains_key(&ReplicaId(2)));
        assert!(cfg.observers.is_empty());
    }

    #[test]
    fn voters_from_the_file_or_no_peer_address_are_refused() {
        let listed = format!("{JOINER}[[voters]]\nid = 1\npeer = \"127.0.0.1:7101\"\n");
        let err = FileConfig::parse(&listed)
            .unwrap()
            .use_learned_voters(&learned())
            .unwrap_err();
        assert!(
            err.to_string().contains("--join learns the voters"),
            "{err}"
        );
        let no_peer = JOINER.replace("peer = \"127.0.0.1:7104\"\n", "");
        let err = FileConfig::parse(&no_peer)
            .unwrap()
            .use_learned_voters(&learned())
            .unwrap_err();
        assert!(err.to_string().contains("listen.peer"), "{err}");
    }
}
