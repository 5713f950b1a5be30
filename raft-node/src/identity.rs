//! The data directory's identity file, `identity.toml`: which cluster, replica and storage
//! engine the directory belongs to. Written once when the directory is first used; checked at
//! every later start, so a node pointed at another node's or another cluster's data refuses to
//! start instead of joining with someone else's log and votes.

use std::path::Path;

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

/// Creates the data directory and its identity file, or checks the existing one against `cfg`.
pub fn check_or_create(cfg: &NodeConfig) -> Result<(), IdentityError> {
    let dir = &cfg.data_dir;
    let io = |reason: String| IdentityError::Io {
        dir: dir.display().to_string(),
        reason,
    };
    let mine = Identity {
        cluster_id: cfg.cluster_id.clone(),
        replica_id: cfg.id.0,
        storage: cfg.storage.name().to_string(),
    };
    let path = dir.join(FILE_NAME);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let found: Identity = toml::from_str(&text)
                .map_err(|e| io(format!("{FILE_NAME} is unreadable: {}", e.message())))?;
            if found != mine {
                return Err(IdentityError::Mismatch {
                    dir: dir.display().to_string(),
                    found: found.describe(),
                    expected: mine.describe(),
                });
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if non_empty(dir) {
                return Err(io(format!(
                    "not empty and has no {FILE_NAME}: not a raft-node data directory"
                )));
            }
            std::fs::create_dir_all(dir).map_err(|e| io(e.to_string()))?;
            let text = format!(
                "# Written by raft-node when this directory was created; do not edit.\n{}",
                toml::to_string(&mine).map_err(|e| io(e.to_string()))?
            );
            write_durably(&path, text.as_bytes()).map_err(|e| io(e.to_string()))
        }
        Err(e) => Err(io(format!("cannot read {FILE_NAME}: {e}"))),
    }
}

fn non_empty(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|mut it| it.next().is_some())
}

/// Writes a temporary file, syncs it, renames it into place and syncs the directory.
fn write_durably(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    if let Some(parent) = path.parent() {
        std::fs::File::open(parent)?.sync_all()?;
    }
    Ok(())
}

/// The storage engine recorded in `dir`'s identity file, if the directory has one.
pub fn recorded_storage(dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(dir.join(FILE_NAME)).ok()?;
    toml::from_str::<Identity>(&text).ok().map(|i| i.storage)
}
