//! The raft-core storage traits on `fjall`, in two shapes over one implementation:
//!
//! * [`FjallStore`]: one log and its election state in one fjall database in a data directory
//!   ([`LogStore`] and [`ElectionStore`]); its snapshots beside it ([`open_snapshots`]).
//! * [`FjallGroups`]: the logs, election states and snapshots of every group a host runs
//!   ([`GroupStorage`]), in one fjall database with one journal, so that the writes of many
//!   groups become durable with one persist; each group's handles are [`FjallStore`]s.
//!
//! `engine` holds the database and its writer thread, `group` one log's calls, `groups` the
//! group table of [`FjallGroups`].
//!
//! # Durability
//!
//! * [`LogStore::append`], [`LogStore::truncate`], [`LogStore::purge`], [`LogStore::reset`] and
//!   [`ElectionStore::save`] return once their change is in the journal and the journal is
//!   persisted (`fdatasync` by default, see [`SyncMode`]): after a crash it is there, and so is
//!   everything accepted before it. A call that returned an error may or may not have reached
//!   the disk.
//! * fjall writes are not durable by themselves. One writer thread per database takes every
//!   queued write (of every group, for [`FjallGroups`]), commits them as atomic write batches
//!   and then persists the journal once for the whole group commit. The order of first polls is
//!   the order of a log: a caller may issue the next append before the previous one returned.
//!   [`FjallStore::syncs`] and [`FjallGroups::syncs`] count the persists.
//! * Every write batch carries the log bookkeeping matching its records, so whatever prefix of a
//!   group commit a crash leaves in the journal is a consistent log, for every group in it.
//! * [`LogStore::state`] reflects every accepted call, durable or not; [`LogStore::read`] of a
//!   range that is still being persisted waits for that persist.
//! * A failed commit or persist poisons the database: every later call of every log in it
//!   returns [`StorageError::Poisoned`] (a persist is never retried; fjall poisons itself too).
//!   Reopen the directory to recover.
//! * Opening syncs the journal it recovered before serving anything: after a process crash the
//!   journal may end in writes that reached the page cache but were never synced, and they must
//!   not be counted as durable until they are.
//! * [`GroupStorage::open_group`] of a new group and [`GroupStorage::drop_group`] are durable
//!   (one persist each, shared with whatever else is queued). A drop removes the group's keys
//!   first, then its snapshot directory; a crash between the two leaves snapshots of a group no
//!   longer listed, which the next open of that group removes before creating it.
//!
//! # On-disk layout
//!
//! Two layouts, told apart by the `format` key, and each type opens only its own (the other is
//! [`StorageError::Incompatible`]):
//!
//! * One log ([`FORMAT_VERSION`], 1, unchanged since the first release, so existing
//!   directories open as they are): keyspace `log`, key the big-endian `u64` offset of a
//!   batch's first record; keyspace `meta`: `format`, `cluster_id`, `log_meta` (bounds and
//!   epoch history, with a CRC-32) and `election` (with a CRC-32).
//! * Groups ([`GROUPS_FORMAT_VERSION`], 2: a build that knows only the single log refuses it as
//!   newer): keyspace `log`, key the big-endian `u64` group id followed by the big-endian
//!   offset; keyspace `groups`, key the group id followed by `log_meta` or `election`, the same
//!   values as above (a group is listed exactly when its `log_meta` exists, so the list is
//!   durable with the group's first commit); keyspace `meta`: `format` and `cluster_id`.
//!   Snapshots in `<dir>/snapshots/<group id>`, one [`SnapshotDir`] per group. Big-endian ids
//!   in front keep each group's batches contiguous and in offset order, so every range a log
//!   operation scans stays inside its group, and the groups list in ascending order.
//!
//! A value holds the records of one append in the raft-core record format (each with its own
//! CRC-32), at most [`Options::batch_value_bytes_max`] per value unless a single record is
//! larger. Values are read without copying: records are slices of fjall's buffers. The bounds
//! live in a key of their own so that opening never scans the tombstones a purge leaves behind.
//! Truncation rewrites the batch the new end cuts into and deletes the later ones; purge deletes
//! whole batches below the new start (tombstones, dropped by compaction) and leaves the batch
//! holding it, whose purged head reads skip.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

mod engine;
mod group;
mod groups;

use std::path::Path;
use std::sync::{Arc, Mutex};

use raft_core::io::StorageError;
#[cfg(doc)]
use raft_core::io::{ElectionStore, GroupStorage, LogStore};
use raft_core::snapshot_dir::SnapshotDir;
use raft_core::{GroupId, Offset};

use crate::engine::{io, Engine, Keys, Layout};
use crate::group::GroupCore;

/// The format of a data directory holding one log ([`FjallStore`]). Opening a directory with a
/// higher version fails with [`StorageError::Incompatible`].
pub const FORMAT_VERSION: u32 = 1;

/// The format of a data directory holding many groups ([`FjallGroups`]).
pub const GROUPS_FORMAT_VERSION: u32 = 2;

/// How the journal is synced at the end of each group commit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum SyncMode {
    /// `fdatasync`: the data and the metadata needed to read it back.
    #[default]
    Data,
    /// `fsync`: all metadata too.
    All,
}

/// Settings of a [`FjallStore`].
///
/// The defaults come from option sweeps on the bench's append workloads, recorded with the
/// command that produced them in the repository's `docs/storage-tuning.md`; the sweep is
/// `cargo run --release -p raft-bench -- sweep fjall OPTION=V1,V2,...`.
#[derive(Clone, Debug)]
pub struct Options {
    /// fjall's block cache. Default 16 MiB: the log is read mostly near its end, which is still
    /// in the memtable or in the OS page cache (4 and 64 MiB measured alike).
    pub cache_size_bytes: u64,
    /// How the journal is synced. Default [`SyncMode::Data`].
    pub sync_mode: SyncMode,
    /// fjall's flush and compaction threads. Default 1: on small machines the background work
    /// competes with the replicas for the cores and shows up as commit latency spikes.
    pub worker_threads: usize,
    /// Memtable size of each keyspace before it is flushed to a table. Default 16 MiB: smaller
    /// memtables keep the journal that a reopen after a crash replays short.
    pub max_memtable_bytes: u64,
    /// The journals fjall keeps before it forces flushes. Default 64 MiB, the least fjall
    /// accepts (smaller values are raised to it): the memtables waiting for a flush are held
    /// in memory until then, and larger journals were no faster.
    pub max_journal_bytes: u64,
    /// Appended records are stored in values of at most this many bytes (a larger record gets a
    /// value of its own). Default 256 KiB.
    pub batch_value_bytes_max: usize,
    /// A group commit stops taking queued writes once it holds this many bytes. Default 16 MiB.
    pub group_bytes_max: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            cache_size_bytes: 16 << 20,
            sync_mode: SyncMode::Data,
            worker_threads: 1,
            max_memtable_bytes: 16 << 20,
            max_journal_bytes: 64 << 20,
            batch_value_bytes_max: 256 << 10,
            group_bytes_max: 16 << 20,
        }
    }
}

/// A raft log and election store in a fjall database: the one log of a directory opened with
/// [`FjallStore::open`], or one group's of a [`FjallGroups`] (what its
/// [`GroupStorage::open_group`] hands out). See the crate docs for what each call makes
/// durable. Dropping the last handle on a database stops its writer thread (waiting for the
/// persist in progress) and closes it.
pub struct FjallStore {
    engine: Arc<Engine>,
    core: Arc<GroupCore>,
    group: Option<GroupId>,
}

impl std::fmt::Debug for FjallStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FjallStore")
            .field("dir", &self.engine.dir)
            .field("group", &self.group)
            .finish_non_exhaustive()
    }
}

impl FjallStore {
    /// Opens the store in `dir`, creating the directory and an empty store stamped with
    /// `cluster_id` if there is none. Fails with [`StorageError::Incompatible`] if the directory
    /// holds a newer format, the groups of a [`FjallGroups`], or belongs to another cluster.
    /// Blocks while fjall recovers its journal.
    pub fn open(
        dir: impl AsRef<Path>,
        cluster_id: &str,
        options: Options,
    ) -> Result<FjallStore, StorageError> {
        let engine = Engine::open(dir.as_ref(), cluster_id, options, Layout::Single)?;
        let meta = engine
            .load_meta(Keys::SINGLE)?
            .ok_or_else(|| engine::io_msg("the log bookkeeping is missing".into()))?;
        Ok(FjallStore {
            core: GroupCore::new(Keys::SINGLE, meta),
            engine: Arc::new(engine),
            group: None,
        })
    }

    /// The data directory.
    pub fn dir(&self) -> &Path {
        &self.engine.dir
    }

    /// The group this store is the log of, `None` for the single log of a [`FjallStore`]
    /// directory.
    pub fn group(&self) -> Option<GroupId> {
        self.group
    }

    /// Fault injection for tests: the next group commit of the database fails as a failed
    /// fsync would (nothing of it is written) and poisons it.
    pub fn inject_write_failure(&self) {
        self.engine.inject_write_failure();
    }

    /// The journal persists of the database's group commits since it was opened.
    pub fn syncs(&self) -> u64 {
        self.engine.syncs()
    }
}

/// The logs, election states and snapshots of every group a host runs, in one fjall database
/// (one journal, one writer thread) in a data directory: appends of many groups that are queued
/// together become durable with one persist. See the crate docs for the layout and what each
/// call makes durable. Dropping it and every store it handed out stops the writer thread and
/// closes the database.
pub struct FjallGroups {
    engine: Arc<Engine>,
    table: groups::Table,
    dir: std::path::PathBuf,
}

impl std::fmt::Debug for FjallGroups {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FjallGroups")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl FjallGroups {
    /// Opens the groups in `dir`, creating the directory and an empty engine stamped with
    /// `cluster_id` if there is none. Fails with [`StorageError::Incompatible`] if the directory
    /// holds a newer format, a single log of a [`FjallStore`], or belongs to another cluster.
    /// Blocks while fjall recovers its journal; reads no group (each is read when opened).
    pub fn open(
        dir: impl AsRef<Path>,
        cluster_id: &str,
        options: Options,
    ) -> Result<FjallGroups, StorageError> {
        let dir = dir.as_ref().to_path_buf();
        let engine = Engine::open(&dir, cluster_id, options, Layout::Groups)?;
        std::fs::create_dir_all(dir.join("snapshots")).map_err(io)?;
        Ok(FjallGroups {
            engine: Arc::new(engine),
            table: Mutex::default(),
            dir,
        })
    }

    /// The data directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Fault injection for tests: the next group commit fails as a failed fsync would (nothing
    /// of it is written) and poisons every group.
    pub fn inject_write_failure(&self) {
        self.engine.inject_write_failure();
    }

    /// The journal persists of group commits since the engine was opened: with many groups
    /// appending at once, far fewer than their appends.
    pub fn syncs(&self) -> u64 {
        self.engine.syncs()
    }

    /// Holds group commits until the returned guard is dropped, for tests and benchmarks:
    /// writes queue up meanwhile (their callers wait), and the first group commit after it
    /// takes all of them, up to [`Options::group_bytes_max`].
    pub fn hold_commits(&self) -> CommitHold {
        self.engine.hold();
        CommitHold {
            engine: self.engine.clone(),
        }
    }
}

/// Holds the group commits of a database while alive ([`FjallGroups::hold_commits`]).
#[must_use = "commits resume when the hold is dropped"]
pub struct CommitHold {
    engine: Arc<Engine>,
}

impl std::fmt::Debug for CommitHold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommitHold").finish_non_exhaustive()
    }
}

impl Drop for CommitHold {
    fn drop(&mut self) {
        self.engine.release();
    }
}

/// Opens the snapshot store of the data directory `dir` (its `snapshots` subdirectory).
///
/// Snapshots are large blobs written once and read sequentially, so both disk backends keep them
/// as files next to their database, in raft-core's [`SnapshotDir`]: a snapshot becomes visible
/// only once complete and synced, and a partial download is discarded on open.
pub fn open_snapshots(dir: impl AsRef<Path>) -> Result<SnapshotDir, StorageError> {
    SnapshotDir::open(dir.as_ref().join("snapshots"))
}

/// Fault injection for tests: flips a bit of the stored record at `offset` in the store in
/// `dir` (which no [`FjallStore`] may have open), so that reading it fails its checksum.
pub fn corrupt_record(dir: impl AsRef<Path>, offset: Offset) -> Result<(), StorageError> {
    engine::corrupt(dir.as_ref(), Layout::Single, Keys::SINGLE, offset)
}

/// Fault injection for tests: flips a bit of the stored record at `offset` of `group` in the
/// groups in `dir` (which no [`FjallGroups`] may have open).
pub fn corrupt_group_record(
    dir: impl AsRef<Path>,
    group: GroupId,
    offset: Offset,
) -> Result<(), StorageError> {
    engine::corrupt(dir.as_ref(), Layout::Groups, Keys::group(group), offset)
}
