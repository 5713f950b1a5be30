//! A simulated host's disk holding every group's stores ([`HostDisk`]), and one incarnation's
//! view of it as a [`GroupStorage`] ([`SimGroupStorage`]): each group's log and election store
//! behind the incarnation's crash switch ([`Disk`]), so that a host crash loses every group's
//! writes still queued in its drivers at once, and a lost disk loses every group's data.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use async_trait::async_trait;

use crate::io::{GroupStorage, GroupStores, LogStore, StorageError};
use crate::mem::{MemElectionStore, MemLog, MemSnapshots};
use crate::types::GroupId;

use super::disk::Disk;
use super::kv::lock;

/// One group's durable stores on a host's disk.
struct GroupData {
    log: Arc<MemLog>,
    election: Arc<MemElectionStore>,
    snapshots: Arc<MemSnapshots>,
}

/// A host's disk: the stores of every group it holds, kept across crashes. Cheap to clone.
#[derive(Clone, Default)]
pub(super) struct HostDisk {
    groups: Arc<Mutex<BTreeMap<GroupId, GroupData>>>,
}

impl HostDisk {
    /// The disk is lost: every group's data is gone (the host comes back empty).
    pub(super) fn lose(&self) {
        lock(&self.groups).clear();
    }

    /// The logs of every group on the disk, for the negative control that makes a crash lose
    /// acknowledged records.
    pub(super) fn logs(&self) -> Vec<Arc<MemLog>> {
        lock(&self.groups).values().map(|g| g.log.clone()).collect()
    }

    /// The groups the disk holds (what [`GroupStorage::groups`] lists).
    pub(super) fn groups(&self) -> Vec<GroupId> {
        lock(&self.groups).keys().copied().collect()
    }
}

/// One incarnation's storage engine over a [`HostDisk`]: every call fails once the
/// incarnation crashed (its `alive` switch cleared), and a group's stores are open at most once
/// at a time within the incarnation (a new incarnation opens them afresh, as after a restart).
pub(super) struct SimGroupStorage {
    disk: HostDisk,
    alive: Arc<AtomicBool>,
    /// The log handle each open gave out: alive while that open's stores are.
    open: Mutex<BTreeMap<GroupId, Weak<Disk>>>,
}

impl SimGroupStorage {
    /// The engine of an incarnation whose switch is `alive`.
    pub(super) fn new(disk: HostDisk, alive: Arc<AtomicBool>) -> SimGroupStorage {
        SimGroupStorage {
            disk,
            alive,
            open: Mutex::default(),
        }
    }

    fn check(&self) -> Result<(), StorageError> {
        if self.alive.load(Ordering::SeqCst) {
            Ok(())
        } else {
            Err(StorageError::Poisoned("the process crashed".into()))
        }
    }

    fn is_open(&self, group: GroupId) -> bool {
        lock(&self.open)
            .get(&group)
            .is_some_and(|w| w.strong_count() > 0)
    }
}

#[async_trait]
impl GroupStorage for SimGroupStorage {
    async fn groups(&self) -> Result<Vec<GroupId>, StorageError> {
        self.check()?;
        Ok(self.disk.groups())
    }

    async fn open_group(&self, group: GroupId) -> Result<GroupStores, StorageError> {
        self.check()?;
        if self.is_open(group) {
            return Err(StorageError::Invalid(format!(
                "group {group} is already open"
            )));
        }
        let mut groups = lock(&self.disk.groups);
        let data = groups.entry(group).or_insert_with(|| GroupData {
            log: Arc::new(MemLog::new()),
            election: Arc::new(MemElectionStore::new()),
            snapshots: Arc::new(MemSnapshots::new()),
        });
        let disk = Arc::new(Disk {
            log: data.log.clone(),
            election: data.election.clone(),
            alive: self.alive.clone(),
        });
        let snapshots = data.snapshots.clone();
        drop(groups);
        lock(&self.open).insert(group, Arc::downgrade(&disk));
        Ok(GroupStores {
            log: disk.clone() as Arc<dyn LogStore>,
            election: disk,
            snapshots,
        })
    }

    async fn drop_group(&self, group: GroupId) -> Result<(), StorageError> {
        self.check()?;
        if self.is_open(group) {
            return Err(StorageError::Invalid(format!(
                "group {group} is open; stop its replica before dropping it"
            )));
        }
        lock(&self.disk.groups).remove(&group);
        lock(&self.open).remove(&group);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{Epoch, Offset, Record, RecordKind};

    /// Goal: the engine keeps groups apart, lists what it holds, refuses a second open and a
    /// drop while open, and stops at a crash while the disk keeps what reached it.
    #[tokio::test]
    async fn groups_are_isolated_listed_opened_once_and_die_with_the_incarnation() {
        let disk = HostDisk::default();
        let alive = Arc::new(AtomicBool::new(true));
        let engine = SimGroupStorage::new(disk.clone(), alive.clone());
        let (a, b) = (GroupId(1), GroupId(2));
        let stores = engine.open_group(a).await.unwrap();
        assert!(engine.open_group(a).await.is_err(), "opened twice");
        let b_stores = engine.open_group(b).await.unwrap();
        let record = Record {
            offset: Offset(0),
            epoch: Epoch(1),
            kind: RecordKind::Data,
            payload: bytes::Bytes::from_static(b"x"),
        };
        b_stores.log.append(&[record]).await.unwrap();
        assert_eq!(stores.log.state().await.unwrap().end.offset, Offset(0));
        assert_eq!(engine.groups().await.unwrap(), vec![a, b]);
        assert!(engine.drop_group(a).await.is_err(), "dropped while open");
        drop(stores);
        engine.drop_group(a).await.unwrap();
        assert_eq!(engine.groups().await.unwrap(), vec![b]);

        alive.store(false, Ordering::SeqCst);
        assert!(
            engine.groups().await.is_err(),
            "a crashed engine answers nothing"
        );
        let next = SimGroupStorage::new(disk.clone(), Arc::new(AtomicBool::new(true)));
        assert_eq!(
            next.groups().await.unwrap(),
            vec![b],
            "the disk outlives it"
        );
        let reopened = next.open_group(b).await.unwrap();
        assert!(
            next.open_group(b).await.is_err(),
            "opened twice in one incarnation"
        );
        assert_eq!(reopened.log.state().await.unwrap().end.offset, Offset(1));
        disk.lose();
        assert!(next.groups().await.unwrap().is_empty());
    }
}
