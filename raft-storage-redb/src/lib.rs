//! The raft-core storage traits on `redb`, in two shapes over one implementation:
//!
//! * [`RedbStore`]: one log and its election state in one database file in a data directory
//!   ([`LogStore`] and [`ElectionStore`]); its snapshots beside it ([`open_snapshots`]).
//! * [`RedbGroups`]: the logs, election states and snapshots of every group a host runs
//!   ([`GroupStorage`]), in one database file, so that the writes of many groups become durable
//!   with one commit; each group's handles are [`RedbStore`]s.
//!
//! `engine` holds the database and its writer thread, `group` one log's calls and the cutting
//! of appends into page-sized values, `groups` the group table of [`RedbGroups`].
//!
//! # Durability
//!
//! * [`LogStore::append`], [`LogStore::truncate`], [`LogStore::purge`], [`LogStore::reset`] and
//!   [`ElectionStore::save`] return once their change is committed with
//!   `Durability::Immediate`: after a crash it is there, and so is everything accepted before it.
//!   A call that returned an error may or may not have reached the disk.
//! * Writes go through one writer thread per database. Calls issued while it is committing
//!   queue up (from every group, for [`RedbGroups`]) and are committed together in the next
//!   transaction, with one `fdatasync` for the whole group commit (two in
//!   [`CommitMode::TwoPhase`] and [`CommitMode::QuickRepair`]). The order of first polls is the
//!   order of a log: a caller may issue the next append before the previous one returned.
//!   [`RedbStore::syncs`] and [`RedbGroups::syncs`] count the commits.
//! * [`LogStore::state`] reflects every accepted call, durable or not; [`LogStore::read`] of a
//!   range that is still being committed waits for that commit.
//! * A failed commit poisons the database: every later call of every log in it returns
//!   [`StorageError::Poisoned`] (a commit is never retried). Reopen the directory to recover.
//! * [`GroupStorage::open_group`] of a new group and [`GroupStorage::drop_group`] are durable
//!   (one commit each, shared with whatever else is queued). A drop removes the group's rows
//!   first, then its snapshot directory; a crash between the two leaves snapshots of a group no
//!   longer listed, which the next open of that group removes before creating it.
//!
//! # On-disk layout
//!
//! One file, [`FILE_NAME`], in one of two layouts told apart by the `format` row of `meta`;
//! each type opens only its own (the other is [`StorageError::Incompatible`]):
//!
//! * One log ([`FORMAT_VERSION`], 1, unchanged since the first release, so existing
//!   directories open as they are): `log: u64 -> bytes`, key the offset of a batch's first
//!   record; `meta: str -> bytes`: `format`, `cluster_id`, `log_meta` (the bounds and epoch
//!   history, with a CRC-32) and `election` (with a CRC-32).
//! * Groups ([`GROUPS_FORMAT_VERSION`], 2: a build that knows only the single log refuses it as
//!   newer): `group_log: u128 -> bytes`, key the group id in the high 64 bits and the batch's
//!   first offset in the low ones, so each group's batches are one contiguous key range in
//!   offset order; `group_meta: u64 -> bytes` each group's bookkeeping (a group is listed
//!   exactly when it has a row here, written in the commit that creates it);
//!   `group_election: u64 -> bytes`; `meta`: `format` and `cluster_id`. Snapshots in
//!   `<dir>/snapshots/<group id>`, one [`SnapshotDir`] per group.
//!
//! A value holds records of one append in the raft-core record format (each with its own
//! CRC-32), at most [`Options::batch_value_bytes_max`] per value unless a single record is
//! larger. An append is cut into values that fill whole power-of-two page sizes (redb gives a
//! value larger than a page a leaf of its own, rounded up to a power of two pages, and writes
//! it whole), plus a tail smaller than a page that shares a leaf. Truncation rewrites the batch
//! the new end cuts into; purge drops whole batches below the new start and leaves the batch
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

/// The format of a data directory holding one log ([`RedbStore`]). Opening a directory with a
/// higher version fails with [`StorageError::Incompatible`].
pub const FORMAT_VERSION: u32 = 1;

/// The format of a data directory holding many groups ([`RedbGroups`]).
pub const GROUPS_FORMAT_VERSION: u32 = 2;

/// The database file inside the data directory.
pub const FILE_NAME: &str = "raft-log.redb";

/// How each group commit reaches the disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum CommitMode {
    /// One-phase commit: one `fdatasync` per group. redb picks the newest commit slot with a
    /// valid checksum after a crash, and opening after a crash repairs by walking the file.
    #[default]
    Immediate,
    /// Two-phase commit: two `fdatasync`s per group, a commit slot that is valid without looking
    /// at checksums.
    TwoPhase,
    /// Two-phase commit that also saves the allocator state, so opening after a crash is
    /// almost instant for large files; commits cost more.
    QuickRepair,
}

/// Settings of a [`RedbStore`].
///
/// The defaults come from option sweeps on the bench's append workloads, recorded with the
/// command that produced them in the repository's `docs/storage-tuning.md`; the sweep is
/// `cargo run --release -p raft-bench -- sweep redb OPTION=V1,V2,...`.
#[derive(Clone, Debug)]
pub struct Options {
    /// Memory redb uses to cache pages. Default 64 MiB: the log is read mostly near its end,
    /// which stays in the OS page cache anyway.
    pub cache_size_bytes: usize,
    /// How commits reach the disk. Default [`CommitMode::Immediate`].
    pub commit_mode: CommitMode,
    /// Appended records are stored in values of at most this many bytes (a larger record gets
    /// a value of its own); values are cut to the largest power-of-two page size (less a leaf
    /// header) that fits, so a limit between two such sizes acts as the lower one. Default
    /// 256 KiB: well above a 4 KiB page, so a batch costs few pages, and small enough that a
    /// read never walks much it does not return.
    pub batch_value_bytes_max: usize,
    /// A group commit stops taking queued writes once it holds this many bytes. Default 16 MiB.
    pub group_bytes_max: usize,
    /// Compact the file (give freed pages back to the file system) when opening. Compaction
    /// rewrites the file and can take a while on large logs. Default `false`: freed pages are
    /// reused by later appends.
    pub compact_on_open: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            cache_size_bytes: 64 << 20,
            commit_mode: CommitMode::Immediate,
            batch_value_bytes_max: 256 << 10,
            group_bytes_max: 16 << 20,
            compact_on_open: false,
        }
    }
}

/// A raft log and election store in a redb database: the one log of a directory opened with
/// [`RedbStore::open`], or one group's of a [`RedbGroups`] (what its
/// [`GroupStorage::open_group`] hands out). See the crate docs for what each call makes
/// durable. Dropping the last handle on a database stops its writer thread (waiting for the
/// commit in progress) and closes it.
pub struct RedbStore {
    engine: Arc<Engine>,
    core: Arc<GroupCore>,
    group: Option<GroupId>,
}

impl std::fmt::Debug for RedbStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedbStore")
            .field("dir", &self.engine.dir)
            .field("group", &self.group)
            .finish_non_exhaustive()
    }
}

impl RedbStore {
    /// Opens the store in `dir`, creating the directory and an empty store stamped with
    /// `cluster_id` if there is none. Fails with [`StorageError::Incompatible`] if the directory
    /// holds a newer format, the groups of a [`RedbGroups`], or belongs to another cluster.
    /// Blocks while redb opens (and, after a crash, repairs) the file.
    pub fn open(
        dir: impl AsRef<Path>,
        cluster_id: &str,
        options: Options,
    ) -> Result<RedbStore, StorageError> {
        let engine = Engine::open(dir.as_ref(), cluster_id, options, Layout::Single)?;
        let meta = engine
            .load_meta(Keys::Single)?
            .ok_or_else(|| engine::io_msg("the log bookkeeping is missing".into()))?;
        Ok(RedbStore {
            core: GroupCore::new(Keys::Single, meta),
            engine: Arc::new(engine),
            group: None,
        })
    }

    /// The data directory.
    pub fn dir(&self) -> &Path {
        &self.engine.dir
    }

    /// The group this store is the log of, `None` for the single log of a [`RedbStore`]
    /// directory.
    pub fn group(&self) -> Option<GroupId> {
        self.group
    }

    /// Fault injection for tests: the next group commit of the database fails as a failed
    /// fsync would (nothing of it is written) and poisons it.
    pub fn inject_write_failure(&self) {
        self.engine.inject_write_failure();
    }

    /// The commits of the database's group commits since it was opened.
    pub fn syncs(&self) -> u64 {
        self.engine.syncs()
    }
}

/// The logs, election states and snapshots of every group a host runs, in one redb file (one
/// writer thread) in a data directory: appends of many groups that are queued together become
/// durable with one commit. See the crate docs for the layout and what each
/// call makes durable. Dropping it and every store it handed out stops the writer thread and
/// closes the database.
pub struct RedbGroups {
    engine: Arc<Engine>,
    table: groups::Table,
    dir: std::path::PathBuf,
}

impl std::fmt::Debug for RedbGroups {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedbGroups")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl RedbGroups {
    /// Opens the groups in `dir`, creating the directory and an empty engine stamped with
    /// `cluster_id` if there is none. Fails with [`StorageError::Incompatible`] if the directory
    /// holds a newer format, a single log of a [`RedbStore`], or belongs to another cluster.
    /// Blocks while redb opens (and, after a crash, repairs) the file; reads no group (each is
    /// read when opened).
    pub fn open(
        dir: impl AsRef<Path>,
        cluster_id: &str,
        options: Options,
    ) -> Result<RedbGroups, StorageError> {
        let dir = dir.as_ref().to_path_buf();
        let engine = Engine::open(&dir, cluster_id, options, Layout::Groups)?;
        std::fs::create_dir_all(dir.join("snapshots")).map_err(io)?;
        Ok(RedbGroups {
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

    /// The group commits (write transactions committed) since the engine was opened: with many
    /// groups appending at once, far fewer than their appends.
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

/// Holds the group commits of a database while alive ([`RedbGroups::hold_commits`]).
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
/// `dir` (which no [`RedbStore`] may have open), so that reading it fails its checksum.
pub fn corrupt_record(dir: impl AsRef<Path>, offset: Offset) -> Result<(), StorageError> {
    engine::corrupt(dir.as_ref(), Layout::Single, Keys::Single, offset)
}

/// Fault injection for tests: flips a bit of the stored record at `offset` of `group` in the
/// groups in `dir` (which no [`RedbGroups`] may have open).
pub fn corrupt_group_record(
    dir: impl AsRef<Path>,
    group: GroupId,
    offset: Offset,
) -> Result<(), StorageError> {
    engine::corrupt(dir.as_ref(), Layout::Groups, Keys::group(group), offset)
}
