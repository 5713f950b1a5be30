//! The data directory's identity file, `identity.toml`: which cluster, replica and storage
//! engine the directory belongs to, and its directory id (KIP-853). Written once when the
//! directory is first used; checked at every later start, so a node pointed at another node's or
//! another cluster's data refuses to start instead of joining with someone else's log and votes.
//!
//! The directory id is random, made with the directory: a machine whose disk was replaced
//! comes back with a new one, and the voter set, which names voters by id and directory, no
//! longer counts it as the voter that held the lost data (it is an observer until it is added
//! again). A directory from before directory ids gets one at its first start.

use std::path::Path;

use raft_core::DirectoryId;
use raft_node::durable_file::write_durably;
use serde::{Deserialize, Serialize};

use crate::config::NodeConfig;

/// The file name inside the data directory.
pub const FILE_NAME: &str = "identity.toml";

#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
struct Identity {
    cluster_id: String,
    replica_id: u32,
    storage: String,
    /// The directory id in UUID form; absent in directories made before directory ids.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    directory_id: Option<String>,
}

impl Identity {
    fn describe(&self) -> String {
        format!(
            "cluster {:?} replica {} ({})",
            self.cluster_id, self.replica_id, self.storage
        )
    }
}

/// Why the data directory cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    /// The directory or the file could not be read or written.
    #[error("data directory {dir}: {reason}")]
    Io {
        /// The directory.
        dir: String,
        /// What failed.
        reason: String,
    },
    /// The directory is empty, but the configuration names this node a founding voter with a
    /// directory id: that voter's data is gone, or it was never formatted.
    #[error(
        "data directory {dir} is empty, but [[voters]] names replica {id} with directory {directory}: \
         if this is the first start of a new cluster, run `raft-node format` first; if this \
         machine lost its data, it must not vote as that voter again: remove the old voter on \
         the leader (`RAFT REMOVE-VOTER {id}`), start this node with \
         `--join <client address of a running node>` (it comes up as an observer) and add it \
         back (`RAFT ADD-VOTER {id}`); see \"Replacing a failed machine\" in the README"
    )]
    NotFormatted {
        /// The directory.
        dir: String,
        /// This replica.
        id: u32,
        /// The directory id the configuration names.
        directory: DirectoryId,
    },
    /// The directory was formatted already.
    #[error("data directory {dir} holds {FILE_NAME} already: it was formatted (or used) before")]
    AlreadyFormatted {
        /// The directory.
        dir: String,
    },
    /// The directory belongs to someone else.
    #[error(
        "data directory {dir} belongs to {found}, but this node is {expected}; refusing to start"
    )]
    Mismatch {
        /// The directory.
        dir: String,
        /// Whose it is: cluster, replica and engine.
        found: String,
        /// Whose this node would make it.
        expected: String,
    },
}

/// A new random directory id (never zero).
pub fn new_directory_id() -> Result<DirectoryId, String> {
    loop {
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes)
            .map_err(|e| format!("no randomness for a directory id: {e}"))?;
        let id = u128::from_le_bytes(bytes);
        if id != 0 {
            return Ok(DirectoryId(id));
        }
    }
}

/// Whether `dir` holds an identity file (it was formatted, or used by a start).
pub fn exists(dir: &Path) -> bool {
    dir.join(FILE_NAME).exists()
}

/// Writes the identity file of a directory being formatted with `directory`; refuses a
/// directory that has one.
pub fn create(cfg: &NodeConfig, directory: DirectoryId) -> Result<(), IdentityError> {
    let dir = &cfg.data_dir;
    if exists(dir) {
        return Err(IdentityError::AlreadyFormatted {
            dir: dir.display().to_string(),
        });
    }
    let mine = Identity {
        cluster_id: cfg.cluster_id.clone(),
        replica_id: cfg.id.0,
        storage: cfg.storage.name().to_string(),
        directory_id: Some(directory.to_string()),
    };
    write_identity(&dir.join(FILE_NAME), &mine).map_err(|reason| IdentityError::Io {
        dir: dir.display().to_string(),
        reason,
    })
}

/// Creates the data directory and its identity file, or checks the existing one against `cfg`;
/// returns the directory id. A new directory of a node that `cfg` names a founding voter
/// with a directory id is refused: formatting makes that directory, and an empty one is a
/// lost disk ([`IdentityError::NotFormatted`]).
pub fn check_or_create(cfg: &NodeConfig) -> Result<DirectoryId, IdentityError> {
    let dir = &cfg.data_dir;
    let io = |reason: String| IdentityError::Io {
        dir: dir.display().to_string(),
        reason,
    };
    let mut mine = Identity {
        cluster_id: cfg.cluster_id.clone(),
        replica_id: cfg.id.0,
        storage: cfg.storage.name().to_string(),
        directory_id: None,
    };
    let path = dir.join(FILE_NAME);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let found: Identity = toml::from_str(&text)
                .map_err(|e| io(format!("{FILE_NAME} is unreadable: {}", e.message())))?;
            mine.directory_id = found.directory_id.clone();
            if found != mine {
                return Err(IdentityError::Mismatch {
                    dir: dir.display().to_string(),
                    found: found.describe(),
                    expected: mine.describe(),
                });
            }
            match &found.directory_id {
                Some(text) => text
                    .parse::<DirectoryId>()
                    .map_err(|e| io(format!("{FILE_NAME}: directory_id {text:?}: {e}"))),
                None => {
                    // Made before directory ids: give it one now, once.
                    let id = new_directory_id().map_err(io)?;
                    mine.directory_id = Some(id.to_string());
                    write_identity(&path, &mine).map_err(io)?;
                    Ok(id)
                }
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if let Some(directory) = cfg.voters.get(&cfg.id).and_then(|v| v.directory) {
                return Err(IdentityError::NotFormatted {
                    dir: dir.display().to_string(),
                    id: cfg.id.0,
                    directory,
                });
            }
            if non_empty(dir) {
                return Err(io(format!(
                    "not empty and has no {FILE_NAME}: not a raft-node data directory"
                )));
            }
            std::fs::create_dir_all(dir).map_err(|e| io(e.to_string()))?;
            let id = new_directory_id().map_err(io)?;
            mine.directory_id = Some(id.to_string());
            write_identity(&path, &mine).map_err(io)?;
            Ok(id)
        }
        Err(e) => Err(io(format!("cannot read {FILE_NAME}: {e}"))),
    }
}

fn write_identity(path: &Path, identity: &Identity) -> Result<(), String> {
    let text = format!(
        "# Written by raft-node when this directory was created; do not edit.\n{}",
        toml::to_string(identity).map_err(|e| e.to_string())?
    );
    write_durably(path, text.as_bytes()).map_err(|e| e.to_string())
}

fn non_empty(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|mut it| it.next().is_some())
}

/// The storage engine recorded in `dir`'s identity file, if the directory has one.
pub fn recorded_storage(dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(dir.join(FILE_NAME)).ok()?;
    toml::from_str::<Identity>(&text).ok().map(|i| i.storage)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(dir: &Path) -> NodeConfig {
        crate::fixtures::one_voter(dir)
    }

    #[test]
    fn a_new_directory_gets_a_directory_id_that_stays() {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = config(&tmp.path().join("data"));
        let first = check_or_create(&cfg).unwrap();
        assert_eq!(check_or_create(&cfg).unwrap(), first, "the id is kept");
        let other = config(&tmp.path().join("other"));
        assert_ne!(
            check_or_create(&other).unwrap(),
            first,
            "each directory has its own"
        );
    }

    #[test]
    fn a_directory_from_before_directory_ids_gets_one_once() {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().join("data");
        std::fs::create_dir_all(&data).unwrap();
        let cfg = config(&data);
        let old = format!(
            "cluster_id = \"c1\"\nreplica_id = 1\nstorage = \"{}\"\n",
            cfg.storage.name()
        );
        std::fs::write(data.join(FILE_NAME), old).unwrap();
        let id = check_or_create(&cfg).unwrap();
        assert_eq!(
            check_or_create(&cfg).unwrap(),
            id,
            "written once, then read back"
        );
        let text = std::fs::read_to_string(data.join(FILE_NAME)).unwrap();
        assert!(text.contains(&id.to_string()), "{text}");
    }

    #[test]
    fn a_damaged_directory_id_is_refused_with_the_field() {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().join("data");
        let cfg = config(&data);
        check_or_create(&cfg).unwrap();
        let path = data.join(FILE_NAME);
        let text = std::fs::read_to_string(&path).unwrap();
        let damaged: String = text
            .lines()
            .map(|l| {
                if l.starts_with("directory_id") {
                    "directory_id = \"not-a-uuid\"".to_string()
                } else {
                    l.to_string()
                }
            })
            .collect::<Vec<_>>()
            .join("\n");
        std::fs::write(&path, damaged).unwrap();
        let err = check_or_create(&cfg).unwrap_err().to_string();
        assert!(err.contains("directory_id"), "{err}");
    }
}
