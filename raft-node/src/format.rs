//! `raft-node format`: the one-time act that makes a data directory a founding voter of a new
//! cluster (KRaft's `kafka-storage format`, KIP-853).
//!
//! Only formatted storage votes by its configuration. Formatting writes the founding voter set,
//! every founding voter with its directory id, into the storage (as the header of an empty
//! snapshot, raft-core's `driver::format`), and then the identity file with this directory's
//! id. Two forms:
//! - every `[[voters]]` entry names its `directory` (a UUID, from `raft-node directory-id`),
//!   the same list in each founder's file; each founder formats with its own entry's id;
//! - `--standalone`: a cluster of this one voter, with a new directory id; others join it.
//!
//! A node that is not a founder is never formatted: it starts on an empty directory as an
//! observer (`run --join`, or a file that does not list it among the voters) and becomes a
//! voter by `RAFT ADD-VOTER`. A founder whose disk is lost is not formatted again either: see
//! "Replacing a failed machine" in the README.

use raft_core::{DirectoryId, Voter, VoterSet};

use crate::config::NodeConfig;
use crate::identity;
use crate::node;

/// Formats `cfg.data_dir` as a founding voter; returns the directory id and the founding set.
pub async fn format(cfg: &NodeConfig, standalone: bool) -> Result<(DirectoryId, VoterSet), String> {
    let (directory, voters) = founding_set(cfg, standalone)?;
    let dir = &cfg.data_dir;
    if identity::exists(dir) || std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_some()) {
        return Err(format!(
            "data directory {} is not empty: a directory is formatted once, before its first \
             start",
            dir.display()
        ));
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let for_open = cfg.clone();
    let (_, _, snapshots) = tokio::task::spawn_blocking(move || node::open_storage(&for_open))
        .await
        .map_err(|e| format!("storage open task failed: {e}"))?
        .map_err(|e| e.to_string())?;
    raft_core::driver::format(&*snapshots, &voters)
        .await
        .map_err(|e| e.to_string())?;
    // The identity file last: a directory without one is not a usable data directory, so a
    // format cut short is refused at start rather than taken for a formatted one.
    identity::create(cfg, directory).map_err(|e| e.to_string())?;
    Ok((directory, voters))
}

/// The founding voter set and this node's directory id in it.
pub fn founding_set(cfg: &NodeConfig, standalone: bool) -> Result<(DirectoryId, VoterSet), String> {
    let me = cfg.id;
    let Some(mine) = cfg.voters.get(&me) else {
        return Err(format!(
            "replica {me} is not among the voters: only founding voters are formatted; any \
             other node starts unformatted as an observer and is added with RAFT ADD-VOTER"
        ));
    };
    if standalone {
        if cfg.voters.len() != 1 {
            return Err(format!(
                "--standalone formats a cluster of this voter alone, but the configuration \
                 lists {} voters",
                cfg.voters.len()
            ));
        }
        let directory = match mine.directory {
            Some(d) => d,
            None => identity::new_directory_id()?,
        };
        let voter = Voter {
            directory: Some(directory),
            endpoint: mine.peer.to_string(),
        };
        let set = VoterSet::from_entries([(me, voter)]).map_err(|e| e.to_string())?;
        return Ok((directory, set));
    }
    let mut entries = Vec::new();
    for (id, v) in &cfg.voters {
        let Some(directory) = v.directory else {
            return Err(format!(
                "voter {id} has no `directory` in [[voters]]: every founding voter needs one \
                 (the same list in every founder's file; `raft-node directory-id` makes one), \
                 or use --standalone for a one-voter cluster"
            ));
        };
        let voter = Voter {
            directory: Some(directory),
            endpoint: v.peer.to_string(),
        };
        entries.push((*id, voter));
    }
    let set = VoterSet::from_entries(entries).map_err(|e| e.to_string())?;
    let directory = mine.directory.expect("checked above");
    Ok((directory, set))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_standalone_founder_gets_a_new_directory_and_a_keyed_set() {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = crate::fixtures::one_voter(&tmp.path().join("data"));
        let (dir, set) = founding_set(&cfg, true).unwrap();
        assert_eq!(set.len(), 1);
        assert_eq!(set.get(cfg.id).unwrap().directory, Some(dir));
        let (other, _) = founding_set(&cfg, true).unwrap();
        assert_ne!(dir, other, "each format makes a new directory id");
    }

    #[test]
    fn founders_without_directories_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = crate::fixtures::one_voter(&tmp.path().join("data"));
        let err = founding_set(&cfg, false).unwrap_err();
        assert!(err.contains("no `directory`"), "{err}");
    }

    #[tokio::test]
    async fn a_directory_is_formatted_once() {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = crate::fixtures::one_voter(&tmp.path().join("data"));
        let (dir, _) = format(&cfg, true).await.unwrap();
        assert_eq!(identity::check_or_create(&cfg).unwrap(), dir);
        let again = format(&cfg, true).await.unwrap_err();
        assert!(again.contains("not empty"), "{again}");
    }
}
