//! [`GroupStorage`] for [`RedbGroups`]: which groups are open, and opening, listing and
//! dropping them. A group's log and election state are keys of the shared database behind its
//! id; its snapshots a [`SnapshotDir`] of its own under `<dir>/snapshots/<group>`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};

use async_trait::async_trait;
use bytes::Bytes;
use raft_core::io::{
    GroupStorage, GroupStores, SnapshotMeta, SnapshotReader, SnapshotStore, SnapshotWriter,
    StorageError,
};
use raft_core::snapshot_dir::SnapshotDir;
use raft_core::stored::LogMeta;
use raft_core::{GroupId, OffsetAndEpoch};

use crate::engine::{io, lock, Keys, Op};
use crate::group::GroupCore;
use crate::{RedbGroups, RedbStore};

/// What the engine knows of a group it has seen since it was opened.
pub(crate) enum Slot {
    /// Being opened or dropped: every other open or drop of it is refused meanwhile.
    Busy,
    /// Opened before: its stores (alive while handed out) and its core (alive while a store or
    /// a queued write holds it, and then reused by the next open, whose bookkeeping must
    /// include that write).
    Known {
        store: Weak<RedbStore>,
        core: Weak<GroupCore>,
    },
}

pub(crate) type Table = Mutex<HashMap<GroupId, Slot>>;

/// Marks a group busy; puts back what was there unless [`Busy::finish`] says otherwise, so
/// that an open or drop given up half way leaves the group as it found it.
struct Busy<'a> {
    table: &'a Table,
    group: GroupId,
    previous: Option<Slot>,
}

impl<'a> Busy<'a> {
    /// Marks `group` busy, refusing (with `open_msg`) a group whose stores are open. Returns
    /// the group's core when one is still alive.
    fn take(
        table: &'a Table,
        group: GroupId,
        open_msg: &str,
    ) -> Result<(Busy<'a>, Option<Arc<GroupCore>>), StorageError> {
        let mut map = lock(table);
        let core = match map.get(&group) {
            Some(Slot::Busy) => {
                return Err(StorageError::Invalid(format!(
                    "group {group} is being opened or dropped"
                )))
            }
            Some(Slot::Known { store, .. }) if store.strong_count() > 0 => {
                return Err(StorageError::Invalid(format!("group {group} {open_msg}")))
            }
            Some(Slot::Known { core, .. }) => core.upgrade(),
            None => None,
        };
        let previous = map.insert(group, Slot::Busy);
        Ok((
            Busy {
                table,
                group,
                previous,
            },
            core,
        ))
    }

    fn finish(mut self, now: Option<Slot>) {
        self.previous = now;
    }
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        let mut map = lock(self.table);
        match self.previous.take() {
            Some(slot) => map.insert(self.group, slot),
            None => map.remove(&self.group),
        };
    }
}

/// Runs blocking file work off the async threads.
async fn unblock<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, StorageError> + Send + 'static,
) -> Result<T, StorageError> {
    tokio::task::spawn_blocking(f).await.map_err(io)?
}

/// Removes a group's snapshot directory, durably; nothing when there is none.
fn remove_snapshots(path: &Path) -> Result<(), StorageError> {
    match std::fs::remove_dir_all(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io(e)),
    }
    let parent = path.parent().unwrap_or(Path::new("."));
    std::fs::File::open(parent)
        .and_then(|d| d.sync_all())
        .map_err(io)
}

impl RedbGroups {
    fn snapshot_path(&self, group: GroupId) -> PathBuf {
        self.dir.join("snapshots").join(group.0.to_string())
    }
}

#[async_trait]
impl GroupStorage for RedbGroups {
    async fn groups(&self) -> Result<Vec<GroupId>, StorageError> {
        self.engine.check_poisoned()?;
        let engine = self.engine.clone();
        unblock(move || engine.list_groups()).await
    }

    async fn open_group(&self, group: GroupId) -> Result<GroupStores, StorageError> {
        self.engine.check_poisoned()?;
        let (busy, alive) = Busy::take(&self.table, group, "is already open")?;
        let keys = Keys::group(group);
        let path = self.snapshot_path(group);
        let core = match alive {
            Some(core) => core,
            None => match self.engine.load_meta(keys)? {
                Some(meta) => GroupCore::new(keys, meta),
                None => {
                    // A drop that a crash cut short may have left the snapshots behind.
                    let leftover = path.clone();
                    unblock(move || remove_snapshots(&leftover)).await?;
                    let core = GroupCore::new(keys, LogMeta::default());
                    core.submit(&self.engine, 64, |_| Ok((Op::Create, true)))
                        .await?;
                    core
                }
            },
        };
        let dir = unblock(move || SnapshotDir::open(path)).await?;
        let store = Arc::new(RedbStore {
            engine: self.engine.clone(),
            core: core.clone(),
            group: Some(group),
        });
        busy.finish(Some(Slot::Known {
            store: Arc::downgrade(&store),
            core: Arc::downgrade(&core),
        }));
        Ok(GroupStores {
            log: store.clone(),
            election: store.clone(),
            snapshots: Arc::new(GroupSnapshots { dir, _open: store }),
        })
    }

    async fn drop_group(&self, group: GroupId) -> Result<(), StorageError> {
        self.engine.check_poisoned()?;
        let open = "is open; stop its replica before dropping it";
        let (busy, alive) = Busy::take(&self.table, group, open)?;
        let keys = Keys::group(group);
        let listed = self.engine.load_meta(keys)?.is_some();
        if listed || alive.is_some() {
            let core = alive.unwrap_or_else(|| GroupCore::new(keys, LogMeta::default()));
            // Keys first: a crash before the snapshots go leaves an unlisted group, whose
            // leftover snapshots the next open of it removes.
            core.submit(&self.engine, 64, |_| Ok((Op::Drop, false)))
                .await?;
        }
        let path = self.snapshot_path(group);
        unblock(move || remove_snapshots(&path)).await?;
        busy.finish(None);
        Ok(())
    }
}

/// A group's snapshots: its [`SnapshotDir`], holding the group open while it is.
struct GroupSnapshots {
    dir: SnapshotDir,
    _open: Arc<RedbStore>,
}

#[async_trait]
impl SnapshotStore for GroupSnapshots {
    async fn latest(&self) -> Result<Option<SnapshotMeta>, StorageError> {
        self.dir.latest().await
    }

    async fn create(&self, id: OffsetAndEpoch) -> Result<Box<dyn SnapshotWriter>, StorageError> {
        self.dir.create(id).await
    }

    async fn read(
        &self,
        id: OffsetAndEpoch,
        position: u64,
        max_bytes: u32,
    ) -> Result<Option<(SnapshotMeta, Bytes)>, StorageError> {
        self.dir.read(id, position, max_bytes).await
    }

    async fn open(
        &self,
        id: OffsetAndEpoch,
    ) -> Result<Option<Box<dyn SnapshotReader>>, StorageError> {
        self.dir.open(id).await
    }

    async fn write_partial(
        &self,
        id: OffsetAndEpoch,
        position: u64,
        data: Bytes,
    ) -> Result<(), StorageError> {
        self.dir.write_partial(id, position, data).await
    }

    async fn finish_partial(
        &self,
        id: OffsetAndEpoch,
        size: u64,
        checksum: u32,
    ) -> Result<Option<SnapshotMeta>, StorageError> {
        self.dir.finish_partial(id, size, checksum).await
    }
}
