//! The voter set (KIP-853): which replicas vote, count toward the high watermark and
//! check-quorum, and may lead. It lives in the log as [`crate::RecordKind::Voters`] records,
//! each holding the whole set, never a delta; the newest one in a replica's log, committed or
//! not, is the set that replica acts on. Before the first such record, the bootstrap set from
//! the configuration (or the set a snapshot carries) applies.
//!
//! A voter is a replica key: an id and the directory id of the storage it voted with. An entry
//! without a directory id (a statically configured voter) matches its id whatever the directory,
//! as KRaft's static quorums do; every voter added online carries one, so a replica that comes
//! back with a wiped directory is no longer that voter.

use std::collections::BTreeMap;

use crate::types::{DirectoryId, ReplicaId};

/// Largest number of voters a set may hold; bounds what a decoder allocates.
pub const VOTERS_MAX: usize = 255;

/// Longest endpoint string a voter may advertise, in bytes.
pub const ENDPOINT_MAX: usize = 255;

/// One voter's entry.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Voter {
    /// The directory the voter votes with; `None` for a static voter, which matches any.
    pub directory: Option<DirectoryId>,
    /// Where peers reach it (`host:port`), opaque to the protocol; may be empty when the
    /// transport knows the address otherwise.
    pub endpoint: String,
}

/// Why a change of the voter set was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum VoterSetError {
    /// The id already votes (replacing a disk is remove, then add: ids are unique).
    #[error("{0} is already a voter")]
    Duplicate(ReplicaId),
    /// No voter with this id and directory.
    #[error("{id} with directory {directory:?} is not a voter")]
    NotFound {
        /// The id.
        id: ReplicaId,
        /// The directory asked for.
        directory: Option<DirectoryId>,
    },
    /// The last voter cannot be removed.
    #[error("the last voter cannot be removed")]
    LastVoter,
    /// The set would exceed [`VOTERS_MAX`].
    #[error("a voter set holds at most {VOTERS_MAX} voters")]
    TooMany,
    /// The endpoint is longer than [`ENDPOINT_MAX`] bytes.
    #[error("an endpoint is at most {ENDPOINT_MAX} bytes")]
    EndpointTooLong,
    /// A voter added online must name its directory.
    #[error("a voter added online needs a directory id")]
    NoDirectory,
}

/// The voters of a cluster, by id.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct VoterSet {
    voters: BTreeMap<ReplicaId, Voter>,
}

impl VoterSet {
    /// A static set: these ids, without directory ids or endpoints.
    pub fn from_ids(ids: impl IntoIterator<Item = ReplicaId>) -> VoterSet {
        VoterSet {
            voters: ids.into_iter().map(|id| (id, Voter::default())).collect(),
        }
    }

    /// A set from explicit entries (at most [`VOTERS_MAX`], endpoints at most
    /// [`ENDPOINT_MAX`] bytes).
    pub fn from_entries(
        entries: impl IntoIterator<Item = (ReplicaId, Voter)>,
    ) -> Result<VoterSet, VoterSetError> {
        let voters: BTreeMap<ReplicaId, Voter> = entries.into_iter().collect();
        if voters.len() > VOTERS_MAX {
            return Err(VoterSetError::TooMany);
        }
        if voters.values().any(|v| v.endpoint.len() > ENDPOINT_MAX) {
            return Err(VoterSetError::EndpointTooLong);
        }
        Ok(VoterSet { voters })
    }

    /// How many voters.
    pub fn len(&self) -> usize {
        self.voters.len()
    }

    /// Whether there are none (only a decoded or default value can be empty).
    pub fn is_empty(&self) -> bool {
        self.voters.is_empty()
    }

    /// Votes (or durable offsets) that make a majority.
    pub fn majority(&self) -> usize {
        self.voters.len() / 2 + 1
    }

    /// The voter ids, ascending.
    pub fn ids(&self) -> impl Iterator<Item = ReplicaId> + '_ {
        self.voters.keys().copied()
    }

    /// The entries, by ascending id.
    pub fn iter(&self) -> impl Iterator<Item = (ReplicaId, &Voter)> + '_ {
        self.voters.iter().map(|(id, v)| (*id, v))
    }

    /// The entry of `id`.
    pub fn get(&self, id: ReplicaId) -> Option<&Voter> {
        self.voters.get(&id)
    }

    /// Whether some voter has this id, whatever its directory.
    pub fn contains_id(&self, id: ReplicaId) -> bool {
        self.voters.contains_key(&id)
    }

    /// KRaft's membership test: the replica key `(id, directory)` is a voter when the set has
    /// `id` and the entry has no directory or the same one.
    pub fn is_voter(&self, id: ReplicaId, directory: Option<DirectoryId>) -> bool {
        self.voters
            .get(&id)
            .is_some_and(|v| v.directory.is_none() || v.directory == directory)
    }

    /// The set with `id` added. Ids are unique: an id that votes with another directory must be
    /// removed first.
    pub fn with_added(&self, id: ReplicaId, voter: Voter) -> Result<VoterSet, VoterSetError> {
        if self.voters.contains_key(&id) {
            return Err(VoterSetError::Duplicate(id));
        }
        if voter.directory.is_none() {
            return Err(VoterSetError::NoDirectory);
        }
        let mut next = self.clone();
        next.voters.insert(id, voter);
        VoterSet::from_entries(next.voters)
    }

    /// The set without the voter `(id, directory)`; a static entry is removed by its id alone.
    pub fn with_removed(
        &self,
        id: ReplicaId,
        directory: Option<DirectoryId>,
    ) -> Result<VoterSet, VoterSetError> {
        let found = self
            .voters
            .get(&id)
            .is_some_and(|v| v.directory.is_none() || v.directory == directory);
        if !found {
            return Err(VoterSetError::NotFound { id, directory });
        }
        if self.voters.len() == 1 {
            return Err(VoterSetError::LastVoter);
        }
        let mut next = self.clone();
        next.voters.remove(&id);
        Ok(next)
    }

    /// Whether some voter is static (has no directory id).
    pub fn has_static(&self) -> bool {
        self.voters.values().any(|v| v.directory.is_none())
    }

    /// The set with the static voter `id` bound to `directory`. Every majority of the result
    /// is a majority of this set (the same ids, each matching fewer directories), so a leader
    /// may pin any number of static voters in one record.
    pub fn with_pinned(
        &self,
        id: ReplicaId,
        directory: DirectoryId,
    ) -> Result<VoterSet, VoterSetError> {
        let mut next = self.clone();
        match next.voters.get_mut(&id) {
            Some(v) if v.directory.is_none() => v.directory = Some(directory),
            _ => {
                return Err(VoterSetError::NotFound {
                    id,
                    directory: None,
                })
            }
        }
        Ok(next)
    }

    /// The set with the endpoint of voter `(id, directory)` replaced.
    pub fn with_endpoint(
        &self,
        id: ReplicaId,
        directory: Option<DirectoryId>,
        endpoint: String,
    ) -> Result<VoterSet, VoterSetError> {
        if !self.is_voter(id, directory) {
            return Err(VoterSetError::NotFound { id, directory });
        }
        if endpoint.len() > ENDPOINT_MAX {
            return Err(VoterSetError::EndpointTooLong);
        }
        let mut next = self.clone();
        if let Some(v) = next.voters.get_mut(&id) {
            v.endpoint = endpoint;
        }
        Ok(next)
    }
}

impl std::fmt::Display for VoterSet {
    /// `{r1, r2@00000000-…}`: ids, with the directory when there is one.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("{")?;
        for (i, (id, v)) in self.voters.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            match v.directory {
                Some(d) => write!(f, "{id}@{d}")?,
                None => write!(f, "{id}")?,
            }
        }
        f.write_str("}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(n: u128) -> Option<DirectoryId> {
        Some(DirectoryId(n))
    }

    fn voter(n: u128) -> Voter {
        Voter {
            directory: dir(n),
            endpoint: String::new(),
        }
    }

    #[test]
    fn a_static_entry_matches_any_directory_and_a_dynamic_one_only_its_own() {
        let set = VoterSet::from_ids([ReplicaId(1)])
            .with_added(ReplicaId(2), voter(7))
            .unwrap();
        assert!(set.is_voter(ReplicaId(1), None));
        assert!(set.is_voter(ReplicaId(1), dir(9)));
        assert!(set.is_voter(ReplicaId(2), dir(7)));
        assert!(
            !set.is_voter(ReplicaId(2), dir(8)),
            "a wiped directory is not the voter"
        );
        assert!(!set.is_voter(ReplicaId(2), None));
        assert!(!set.is_voter(ReplicaId(3), dir(7)));
    }

    #[test]
    fn ids_are_unique_and_removal_needs_the_key() {
        let set = VoterSet::from_ids([ReplicaId(1)])
            .with_added(ReplicaId(2), voter(7))
            .unwrap();
        assert_eq!(
            set.with_added(ReplicaId(2), voter(8)),
            Err(VoterSetError::Duplicate(ReplicaId(2)))
        );
        assert_eq!(
            set.with_added(ReplicaId(3), Voter::default()),
            Err(VoterSetError::NoDirectory)
        );
        assert!(matches!(
            set.with_removed(ReplicaId(2), dir(8)),
            Err(VoterSetError::NotFound { .. })
        ));
        let one = set.with_removed(ReplicaId(2), dir(7)).unwrap();
        assert_eq!(one.len(), 1);
        assert_eq!(
            one.with_removed(ReplicaId(1), None),
            Err(VoterSetError::LastVoter)
        );
        assert_eq!(set.majority(), 2);
        assert_eq!(one.majority(), 1);
    }

    #[test]
    fn endpoints_are_bounded_and_updated_in_place() {
        let set = VoterSet::from_ids([ReplicaId(1)]);
        let set = set.with_endpoint(ReplicaId(1), None, "h:1".into()).unwrap();
        assert_eq!(set.get(ReplicaId(1)).unwrap().endpoint, "h:1");
        assert_eq!(
            set.with_endpoint(ReplicaId(1), None, "x".repeat(ENDPOINT_MAX + 1)),
            Err(VoterSetError::EndpointTooLong)
        );
    }
}
