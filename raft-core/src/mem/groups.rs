//! [`MemGroupStorage`]: the stores of many groups in memory, for hosts in tests, the simulator
//! and examples. Each group is a [`MemLog`], a [`MemElectionStore`] and a [`MemSnapshots`];
//! there is no shared sync to share, so this backend checks the contract of
//! [`GroupStorage`] (groups listed, isolated, opened once, dropped) and nothing of its
//! performance.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, Weak};

use async_trait::async_trait;

use super::storage::{MemElectionStore, MemLog, MemSnapshots};
use crate::io::{GroupStorage, GroupStores, StorageError};
use crate::types::GroupId;

/// One group's data and whether a handle over it is open.
struct Slot {
    log: MemLog,
    election: MemElectionStore,
    snapshots: MemSnapshots,
    /// The log handle given out by the last open: alive while that open's stores are.
    open: Weak<MemLog>,
}

/// An in-memory [`GroupStorage`]. [`MemGroupStorage::reopen`] makes a new handle over the same
/// groups, as a restarted host would find them.
#[derive(Clone, Default)]
pub struct MemGroupStorage {
    groups: Arc<Mutex<BTreeMap<GroupId, Slot>>>,
}

impl MemGroupStorage {
    /// An engine holding no group.
    pub fn new() -> Self {
        MemGroupStorage::default()
    }

    /// A new handle over the same groups, as a restart would see them: groups whose stores
    /// the previous handle had open may be opened again.
    pub fn reopen(&self) -> MemGroupStorage {
        let groups = self.groups.lock().expect("group table lock");
        let fresh = groups
            .iter()
            .map(|(g, s)| {
                let slot = Slot {
                    log: s.log.reopen(),
                    election: s.election.reopen(),
                    snapshots: s.snapshots.reopen(),
                    open: Weak::new(),
                };
                (*g, slot)
            })
            .collect();
        MemGroupStorage {
            groups: Arc::new(Mutex::new(fresh)),
        }
    }
}

#[async_trait]
impl GroupStorage for MemGroupStorage {
    async fn groups(&self) -> Result<Vec<GroupId>, StorageError> {
        Ok(self
            .groups
            .lock()
            .expect("group table lock")
            .keys()
            .copied()
            .collect())
    }

    async fn open_group(&self, group: GroupId) -> Result<GroupStores, StorageError> {
        let mut groups = self.groups.lock().expect("group table lock");
        let slot = groups.entry(group).or_insert_with(|| Slot {
            log: MemLog::new(),
            election: MemElectionStore::new(),
            snapshots: MemSnapshots::new(),
            open: Weak::new(),
        });
        if slot.open.strong_count() > 0 {
            return Err(StorageError::Invalid(format!(
                "group {group} is already open"
            )));
        }
        let log = Arc::new(slot.log.reopen());
        slot.open = Arc::downgrade(&log);
        Ok(GroupStores {
            log,
            election: Arc::new(slot.election.reopen()),
            snapshots: Arc::new(slot.snapshots.reopen()),
        })
    }

    async fn drop_group(&self, group: GroupId) -> Result<(), StorageError> {
        let mut groups = self.groups.lock().expect("group table lock");
        if groups
            .get(&group)
            .is_some_and(|s| s.open.strong_count() > 0)
        {
            return Err(StorageError::Invalid(format!(
                "group {group} is open; stop its replica before dropping it"
            )));
        }
        groups.remove(&group);
        Ok(())
    }
}
