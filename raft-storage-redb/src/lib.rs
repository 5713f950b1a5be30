//! The raft-core log and election-state traits on `redb`: [`RedbStore`] implements both
//! [`LogStore`] and [`ElectionStore`] over one database file in a data directory.
//!
//! # Durability
//!
//! * [`LogStore::append`], [`LogStore::truncate`], [`LogStore::purge`] and
//!   [`ElectionStore::save`] return once their change is committed with
//!   `Durability::Immediate`: after a crash it is there, and so is everything accepted before it.
//!   A call that returned an error may or may not have reached the disk.
//! * Writes go through one writer thread. Calls issued while it is committing queue up and are
//!   committed together in the next transaction, with one `fdatasync` for the whole group (group
//!   commit). The order of first polls is the order of the log: a caller may issue the next
//!   append before the previous one returned.
//! * [`LogStore::state`] reflects every accepted call, durable or not; [`LogStore::read`] of a
//!   range that is still being committed waits for that commit.
//! * A failed commit poisons the store: it and every later call return
//!   [`StorageError::Poisoned`] (a commit is never retried). Reopen the directory to recover.
//!
//! # On-disk layout
//!
//! One file, `raft-log.redb`, with two tables:
//!
//! * `log`: `u64 -> bytes`, key the offset of a batch's first record, value the records of that
//!   batch in the raft-core record format (each with its own CRC-32), at most
//!   [`Options::batch_value_bytes_max`] per value unless a single record is larger. An append is
//!   cut into values that fill whole power-of-two page sizes (redb gives a value larger than a
//!   page a leaf of its own, rounded up to a power of two pages, and writes it whole), plus a
//!   tail smaller than a page that shares a leaf.
//! * `meta`: `str -> bytes`: `format` (u32, [`FORMAT_VERSION`]), `cluster_id`, `log_meta` (the
//!   bounds and epoch history, with a CRC-32) and `election` (with a CRC-32).
//!
//! Truncation rewrites the batch the new end cuts into; purge drops whole batches below the new
//! start and leaves the batch holding it, whose purged head reads skip.
#![warn(missing_docs)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use async_trait::async_trait;
use bytes::Bytes;
use raft_core::io::{ElectionStore, LogState, LogStore, StorageError};
use raft_core::snapshot_dir::SnapshotDir;
use raft_core::stored::{
    batch_prefix_len, check_read, corrupt_in_batch, decode_election_state, decode_part,
    encode_batches, encode_election_state, locate_in_batch, LogMeta, ReadBudget,
};
use raft_core::{ElectionState, Offset, OffsetAndEpoch, Record};
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition, WriteTransaction};
use tokio::sync::{oneshot, watch};

/// The data-directory format this build writes. Opening a directory with a higher version fails
/// with [`StorageError::Incompatible`].
pub const FORMAT_VERSION: u32 = 1;

/// The database file inside the data directory.
pub const FILE_NAME: &str = "raft-log.redb";

const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("log");
const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
const KEY_FORMAT: &str = "format";
const KEY_CLUSTER: &str = "cluster_id";
const KEY_LOG_META: &str = "log_meta";
const KEY_ELECTION: &str = "election";

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

/// A write for the writer thread.
enum Op {
    Append(Vec<(Offset, Bytes)>),
    Truncate,
    Purge,
    Reset,
    Save(ElectionState),
}

struct Request {
    op: Op,
    /// The log bookkeeping after this op (`None` for election saves).
    meta: Option<LogMeta>,
    seq: u64,
    bytes: usize,
    done: oneshot::Sender<Result<(), StorageError>>,
}

/// What callers have been promised: every accepted write, in order.
struct Accepted {
    meta: LogMeta,
    seq: u64,
    tx: Option<mpsc::Sender<Request>>,
}

struct Shared {
    db: Database,
    options: Options,
    accepted: Mutex<Accepted>,
    poisoned: Mutex<Option<String>>,
    /// The sequence number of the last write the writer finished (committed or failed).
    finished: watch::Sender<u64>,
    /// The end offset as of the last commit: reads below it never wait.
    committed_end: AtomicU64,
    fail_next_write: AtomicBool,
}

/// A raft log and election store in one redb file. See the crate docs for what each call makes
/// durable. Dropping it stops the writer thread (waiting for the commit in progress) and closes
/// the file.
pub struct RedbStore {
    shared: Arc<Shared>,
    writer: Option<JoinHandle<()>>,
    dir: PathBuf,
}

impl std::fmt::Debug for RedbStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedbStore")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

fn io<E: std::error::Error + Send + Sync + 'static>(e: E) -> StorageError {
    StorageError::Io(Box::new(e))
}

fn io_msg(msg: String) -> StorageError {
    StorageError::Io(msg.into())
}

/// Locks `m`, recovering the data if a thread panicked while holding it: every update under
/// these locks is complete before anything that can panic.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl RedbStore {
    /// Opens the store in `dir`, creating the directory and an empty store stamped with
    /// `cluster_id` if there is none. Fails with [`StorageError::Incompatible`] if the directory
    /// holds a newer format or belongs to another cluster. Blocks while redb opens (and, after a
    /// crash, repairs) the file.
    pub fn open(
        dir: impl AsRef<Path>,
        cluster_id: &str,
        options: Options,
    ) -> Result<RedbStore, StorageError> {
        let dir = dir.as_ref().to_path_buf();
        std::fs::create_dir_all(&dir).map_err(io)?;
        let mut db = redb::Builder::new()
            .set_cache_size(options.cache_size_bytes)
            .create(dir.join(FILE_NAME))
            .map_err(io)?;
        let meta = init_or_check(&db, cluster_id)?;
        if options.compact_on_open {
            db.compact().map_err(io)?;
        }
        let (finished, _) = watch::channel(0);
        let (tx, rx) = mpsc::channel();
        let shared = Arc::new(Shared {
            db,
            options,
            committed_end: AtomicU64::new(meta.end.0),
            accepted: Mutex::new(Accepted {
                meta,
                seq: 0,
                tx: Some(tx),
            }),
            poisoned: Mutex::new(None),
            finished,
            fail_next_write: AtomicBool::new(false),
        });
        let for_writer = shared.clone();
        let writer = std::thread::Builder::new()
            .name("raft-redb-writer".into())
            .spawn(move || run_writer(&for_writer, rx))
            .map_err(io)?;
        Ok(RedbStore {
            shared,
            writer: Some(writer),
            dir,
        })
    }

    /// The data directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Fault injection for tests: the next commit fails as a failed fsync would (nothing of it
    /// reaches the file) and poisons the store.
    pub fn inject_write_failure(&self) {
        self.shared.fail_next_write.store(true, Ordering::SeqCst);
    }

    fn check_poisoned(&self) -> Result<(), StorageError> {
        match &*lock(&self.shared.poisoned) {
            Some(reason) => Err(StorageError::Poisoned(reason.clone())),
            None => Ok(()),
        }
    }

    /// Queues a write and waits for the writer thread to commit it. `prepare` checks the call
    /// against the accepted bookkeeping and updates it; it runs under the same lock as the send,
    /// so the queue order is the acceptance order.
    async fn submit(
        &self,
        op: Op,
        bytes: usize,
        prepare: impl FnOnce(&mut LogMeta) -> Result<bool, StorageError>,
    ) -> Result<(), StorageError> {
        self.check_poisoned()?;
        let (done, wait) = oneshot::channel();
        {
            let mut acc = lock(&self.shared.accepted);
            let logged = prepare(&mut acc.meta)?;
            acc.seq += 1;
            let request = Request {
                meta: logged.then(|| acc.meta.clone()),
                op,
                seq: acc.seq,
                bytes,
                done,
            };
            let sent = acc
                .tx
                .as_ref()
                .map(|tx| tx.send(request).is_ok())
                .unwrap_or(false);
            if !sent {
                return Err(StorageError::Poisoned(
                    "the writer thread has stopped".into(),
                ));
            }
        }
        match wait.await {
            Ok(result) => result,
            Err(_) => Err(StorageError::Poisoned(
                "the writer thread has stopped".into(),
            )),
        }
    }

    fn read_committed(
        &self,
        from: Offset,
        to: Offset,
        max_bytes: u64,
    ) -> Result<Vec<Record>, StorageError> {
        let txn = self.shared.db.begin_read().map_err(io)?;
        let meta = load_meta(&txn.open_table(META).map_err(io)?)?;
        let to = check_read(&meta, from, to)?;
        let mut out = Vec::new();
        if from >= to {
            return Ok(out);
        }
        let log = txn.open_table(LOG).map_err(io)?;
        let first = match log.range(..=from.0).map_err(io)?.next_back() {
            Some(entry) => entry.map_err(io)?.0.value(),
            None => from.0,
        };
        let mut budget = ReadBudget::new(max_bytes);
        for entry in log.range(first..to.0).map_err(io)? {
            let (key, value) = entry.map_err(io)?;
            let value = value.value();
            let part = locate_in_batch(value, Offset(key.value()), from, to, &mut budget)?;
            // The one copy of a read: from redb's page into the buffer the records share.
            let bytes = Bytes::copy_from_slice(&value[part.bytes.clone()]);
            decode_part(bytes, part.first, part.count, &mut out)?;
            if budget.exhausted {
                break;
            }
        }
        Ok(out)
    }
}

impl Drop for RedbStore {
    fn drop(&mut self) {
        lock(&self.shared.accepted).tx = None;
        if let Some(writer) = self.writer.take() {
            // The writer only returns or panics; a panic was already reported on its thread.
            let _ = writer.join();
        }
    }
}

/// Stamps a new file with the format and cluster id, or checks them on an existing one; returns
/// the log bookkeeping.
fn init_or_check(db: &Database, cluster_id: &str) -> Result<LogMeta, StorageError> {
    let txn = db.begin_write().map_err(io)?;
    let stamped = {
        let mut meta = txn.open_table(META).map_err(io)?;
        let format = meta
            .get(KEY_FORMAT)
            .map_err(io)?
            .map(|v| v.value().to_vec());
        match format {
            Some(format) => {
                let cluster = meta
                    .get(KEY_CLUSTER)
                    .map_err(io)?
                    .map(|v| v.value().to_vec());
                check_stamp(&format, cluster.as_deref(), cluster_id)?;
                true
            }
            None => {
                meta.insert(KEY_FORMAT, FORMAT_VERSION.to_le_bytes().as_slice())
                    .map_err(io)?;
                meta.insert(KEY_CLUSTER, cluster_id.as_bytes())
                    .map_err(io)?;
                meta.insert(KEY_LOG_META, LogMeta::default().encode().as_slice())
                    .map_err(io)?;
                let _ = txn.open_table(LOG).map_err(io)?;
                false
            }
        }
    };
    if stamped {
        txn.abort().map_err(io)?;
    } else {
        txn.commit().map_err(io)?;
    }
    let read = db.begin_read().map_err(io)?;
    load_meta(&read.open_table(META).map_err(io)?)
}

fn check_stamp(
    format: &[u8],
    cluster: Option<&[u8]>,
    cluster_id: &str,
) -> Result<(), StorageError> {
    let version = <[u8; 4]>::try_from(format)
        .map(u32::from_le_bytes)
        .map_err(|_| StorageError::Incompatible("unreadable format version".into()))?;
    if version > FORMAT_VERSION {
        return Err(StorageError::Incompatible(format!(
            "data format version {version} is newer than this build's {FORMAT_VERSION}"
        )));
    }
    if cluster != Some(cluster_id.as_bytes()) {
        let found = cluster.map(String::from_utf8_lossy).unwrap_or_default();
        return Err(StorageError::Incompatible(format!(
            "data belongs to cluster {found:?}, not {cluster_id:?}"
        )));
    }
    Ok(())
}

fn load_meta(
    meta: &impl ReadableTable<&'static str, &'static [u8]>,
) -> Result<LogMeta, StorageError> {
    let value = meta
        .get(KEY_LOG_META)
        .map_err(io)?
        .ok_or_else(|| io_msg("the log bookkeeping is missing".into()))?;
    LogMeta::decode(value.value())
        .map_err(|e| io_msg(format!("the log bookkeeping is unreadable: {e}")))
}

/// The writer thread: takes every queued write, commits them in one transaction, answers each.
fn run_writer(shared: &Shared, rx: mpsc::Receiver<Request>) {
    while let Ok(first) = rx.recv() {
        let mut bytes = first.bytes;
        let mut group = vec![first];
        while bytes < shared.options.group_bytes_max {
            match rx.try_recv() {
                Ok(next) => {
                    bytes += next.bytes;
                    group.push(next);
                }
                Err(_) => break,
            }
        }
        let last_seq = group.last().map(|r| r.seq).unwrap_or(0);
        let poisoned = lock(&shared.poisoned).clone();
        let was_poisoned = poisoned.is_some();
        let result = match poisoned {
            Some(reason) => Err(reason),
            None => commit_group(shared, &group).map_err(|e| {
                let reason = format!("a commit failed: {e}");
                *lock(&shared.poisoned) = Some(reason.clone());
                e.to_string()
            }),
        };
        if result.is_ok() {
            if let Some(meta) = group.iter().rev().find_map(|r| r.meta.as_ref()) {
                shared.committed_end.store(meta.end.0, Ordering::SeqCst);
            }
        }
        for request in group {
            let answer = match &result {
                Ok(()) => Ok(()),
                Err(reason) if was_poisoned => Err(StorageError::Poisoned(reason.clone())),
                Err(reason) => Err(io_msg(reason.clone())),
            };
            // The caller may have stopped waiting; the write stands either way.
            let _ = request.done.send(answer);
        }
        shared.finished.send_replace(last_seq);
    }
}

fn commit_group(shared: &Shared, group: &[Request]) -> Result<(), StorageError> {
    let mut txn = shared.db.begin_write().map_err(io)?;
    match shared.options.commit_mode {
        CommitMode::Immediate => {}
        CommitMode::TwoPhase => txn.set_two_phase_commit(true),
        CommitMode::QuickRepair => txn.set_quick_repair(true),
    }
    apply_group(&txn, group)?;
    if shared.fail_next_write.swap(false, Ordering::SeqCst) {
        txn.abort().map_err(io)?;
        return Err(io_msg("injected write failure".into()));
    }
    txn.commit().map_err(io)
}

fn apply_group(txn: &WriteTransaction, group: &[Request]) -> Result<(), StorageError> {
    let mut log = txn.open_table(LOG).map_err(io)?;
    let mut meta_table = txn.open_table(META).map_err(io)?;
    let mut last_meta = None;
    for request in group {
        match (&request.op, &request.meta) {
            (Op::Append(batches), _) => {
                for (base, value) in batches {
                    log.insert(base.0, value.as_ref()).map_err(io)?;
                }
            }
            (Op::Truncate, Some(meta)) => truncate_table(&mut log, meta.end)?,
            (Op::Purge, Some(meta)) => purge_table(&mut log, meta)?,
            (Op::Reset, Some(_)) => log.retain(|_, _| false).map_err(io)?,
            (Op::Save(state), _) => {
                let value = encode_election_state(state);
                meta_table
                    .insert(KEY_ELECTION, value.as_slice())
                    .map_err(io)?;
            }
            (Op::Truncate | Op::Purge | Op::Reset, None) => {
                unreachable!("log ops always carry their meta")
            }
        }
        if request.meta.is_some() {
            last_meta = request.meta.as_ref();
        }
    }
    if let Some(meta) = last_meta {
        meta_table
            .insert(KEY_LOG_META, meta.encode().as_slice())
            .map_err(io)?;
    }
    Ok(())
}

type LogTable<'t> = redb::Table<'t, u64, &'static [u8]>;

/// redb's page size.
const PAGE_BYTES: usize = 4096;

/// What a redb leaf holding a single `u64 -> &[u8]` pair needs besides the value: page header
/// (4), value end (4) and key (8), rounded up for slack.
const LEAF_OVERHEAD: usize = 64;

/// The largest value that fills a leaf of a whole power-of-two number of pages without spilling
/// into the next size and is at most `bytes`; `bytes` itself below one page (such values share
/// leaves with their neighbours).
fn value_class(bytes: usize) -> usize {
    if bytes + LEAF_OVERHEAD <= PAGE_BYTES {
        return bytes;
    }
    let pages = (bytes + LEAF_OVERHEAD) / PAGE_BYTES;
    let pow = 1usize << pages.ilog2();
    pow * PAGE_BYTES - LEAF_OVERHEAD
}

/// Splits `records` into stored batches sized for redb's allocator.
///
/// A value larger than a page gets a leaf of its own whose size redb rounds up to a power of two
/// pages, and writes whole: a 70 KiB value costs a 128 KiB page. So each value is cut to the
/// largest power-of-two page size the remaining bytes fill (at most `value_bytes_max`), and the
/// rest of the append is cut the same way, down to a sub-page tail that shares a leaf. A record
/// larger than its size class gets a value of its own.
fn page_fitted_batches(records: &[Record], value_bytes_max: usize) -> Vec<(Offset, Bytes)> {
    let mut out = Vec::new();
    let mut remaining: usize = records.iter().map(Record::encoded_len).sum();
    let mut rest = records;
    while !rest.is_empty() {
        let class = value_class(remaining.min(value_bytes_max));
        let mut take = 0;
        let mut size = 0;
        while take < rest.len() && (take == 0 || size + rest[take].encoded_len() <= class) {
            size += rest[take].encoded_len();
            take += 1;
        }
        // Unlimited: the group was already cut to size, so it becomes exactly one value.
        out.extend(encode_batches(&rest[..take], usize::MAX));
        remaining -= size;
        rest = &rest[take..];
    }
    out
}

/// Removes every record at or after `end`: whole batches past it, and the tail of the batch it
/// cuts into.
fn truncate_table(log: &mut LogTable<'_>, end: Offset) -> Result<(), StorageError> {
    log.retain_in(end.0.., |_, _| false).map_err(io)?;
    let cut = match log.range(..end.0).map_err(io)?.next_back() {
        Some(entry) => {
            let (key, value) = entry.map_err(io)?;
            let (base, value) = (Offset(key.value()), value.value());
            let keep = batch_prefix_len(value, base, end)?;
            (keep < value.len()).then(|| (base, value[..keep].to_vec()))
        }
        None => None,
    };
    if let Some((base, prefix)) = cut {
        log.insert(base.0, prefix.as_slice()).map_err(io)?;
    }
    Ok(())
}

/// Removes the batches that hold only records before `meta.start`; the batch holding the start
/// stays.
fn purge_table(log: &mut LogTable<'_>, meta: &LogMeta) -> Result<(), StorageError> {
    let keep_from = if meta.start == meta.end {
        meta.start.0
    } else {
        match log.range(..=meta.start.0).map_err(io)?.next_back() {
            Some(entry) => entry.map_err(io)?.0.value(),
            None => return Ok(()),
        }
    };
    log.retain_in(..keep_from, |_, _| false).map_err(io)
}

/// Opens the snapshot store of the data directory `dir` (its `snapshots` subdirectory).
///
/// Snapshots are large blobs written once and read sequentially, so both disk backends keep them
/// as files next to their database, in raft-core's [`SnapshotDir`]: a snapshot becomes visible
/// only once complete and synced, and a partial download is discarded on open.
pub fn open_snapshots(dir: impl AsRef<Path>) -> Result<SnapshotDir, StorageError> {
    SnapshotDir::open(dir.as_ref().join("snapshots"))
}

#[async_trait]
impl LogStore for RedbStore {
    async fn state(&self) -> Result<LogState, StorageError> {
        self.check_poisoned()?;
        Ok(lock(&self.shared.accepted).meta.state())
    }

    async fn append(&self, records: &[Record]) -> Result<(), StorageError> {
        if records.is_empty() {
            return self.check_poisoned();
        }
        let batches = page_fitted_batches(records, self.shared.options.batch_value_bytes_max);
        let bytes = batches.iter().map(|(_, v)| v.len()).sum();
        self.submit(Op::Append(batches), bytes, |meta| {
            meta.check_append(records)?;
            meta.apply_append(records);
            Ok(true)
        })
        .await
    }

    async fn read(
        &self,
        from: Offset,
        to: Offset,
        max_bytes: u64,
    ) -> Result<Vec<Record>, StorageError> {
        self.check_poisoned()?;
        let (to, seq) = {
            let acc = lock(&self.shared.accepted);
            (check_read(&acc.meta, from, to)?, acc.seq)
        };
        if to.0 > self.shared.committed_end.load(Ordering::SeqCst) {
            // Part of the range is still being committed: wait for the writer to get there.
            let mut finished = self.shared.finished.subscribe();
            // The sender lives in `shared`, which this store holds, so it cannot be dropped.
            let _ = finished.wait_for(|&done| done >= seq).await;
            self.check_poisoned()?;
        }
        self.read_committed(from, to, max_bytes)
    }

    async fn truncate(&self, end: Offset) -> Result<(), StorageError> {
        self.submit(Op::Truncate, 64, |meta| {
            meta.check_truncate(end)?;
            meta.apply_truncate(end);
            Ok(true)
        })
        .await
    }

    async fn purge(&self, start: Offset) -> Result<(), StorageError> {
        self.submit(Op::Purge, 64, |meta| {
            meta.check_purge(start)?;
            meta.apply_purge(start);
            Ok(true)
        })
        .await
    }

    async fn reset(&self, start: OffsetAndEpoch) -> Result<(), StorageError> {
        self.submit(Op::Reset, 64, |meta| {
            meta.apply_reset(start);
            Ok(true)
        })
        .await
    }
}

#[async_trait]
impl ElectionStore for RedbStore {
    async fn load(&self) -> Result<Option<ElectionState>, StorageError> {
        self.check_poisoned()?;
        let txn = self.shared.db.begin_read().map_err(io)?;
        let meta = txn.open_table(META).map_err(io)?;
        let Some(value) = meta.get(KEY_ELECTION).map_err(io)? else {
            return Ok(None);
        };
        decode_election_state(value.value())
            .map(Some)
            .map_err(|e| io_msg(format!("the election state is unreadable: {e}")))
    }

    async fn save(&self, state: &ElectionState) -> Result<(), StorageError> {
        self.submit(Op::Save(*state), 32, |_| Ok(false)).await
    }
}

/// Fault injection for tests: flips a bit of the stored record at `offset` in the store in
/// `dir` (which no [`RedbStore`] may have open), so that reading it fails its checksum.
pub fn corrupt_record(dir: impl AsRef<Path>, offset: Offset) -> Result<(), StorageError> {
    let db = Database::create(dir.as_ref().join(FILE_NAME)).map_err(io)?;
    let txn = db.begin_write().map_err(io)?;
    {
        let mut log = txn.open_table(LOG).map_err(io)?;
        let (base, changed) = {
            let entry = log
                .range(..=offset.0)
                .map_err(io)?
                .next_back()
                .ok_or_else(|| StorageError::Invalid(format!("no record at {offset}")))?;
            let (key, value) = entry.map_err(io)?;
            (
                key.value(),
                corrupt_in_batch(value.value(), Offset(key.value()), offset)?,
            )
        };
        log.insert(base, changed.as_slice()).map_err(io)?;
    }
    txn.commit().map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;
    use raft_core::testing::storage::records;

    /// The pages redb allocates for a leaf holding one value of `len` bytes.
    fn leaf_pages(len: usize) -> usize {
        (len + 16).div_ceil(PAGE_BYTES).next_power_of_two()
    }

    /// Goal: values are cut so that redb's power-of-two page rounding wastes little, while every
    /// record is stored once, in order. Method: split appends of the bench's shapes and of odd
    /// shapes, and check coverage, the size limit and the allocated pages.
    #[test]
    fn page_fitted_batches_cover_every_record_and_waste_little() {
        for (count, len, max) in [
            (256, 256, 256 << 10),
            (256, 4096, 256 << 10),
            (16, 4096, 256 << 10),
            (16, 256, 256 << 10),
            (1, 256, 256 << 10),
            (300, 1000, 100 << 10),
            (3, 70_000, 16 << 10),
        ] {
            let recs = records(10, 10 + count, 1, len);
            let batches = page_fitted_batches(&recs, max);
            let mut next = Offset(10);
            let mut allocated = 0;
            let mut stored = 0;
            for (base, value) in &batches {
                assert_eq!(*base, next, "{count} x {len}: batches are contiguous");
                let mut out = Vec::new();
                let n = (value.len() / (len + raft_core::codec::RECORD_HEADER_LEN)) as u64;
                decode_part(value.clone(), *base, n, &mut out).unwrap();
                assert!(
                    value.len() <= max || out.len() == 1,
                    "{count} x {len}: a value of {} bytes over the limit {max}",
                    value.len()
                );
                next = Offset(base.0 + n);
                stored += value.len();
                if value.len() + LEAF_OVERHEAD > PAGE_BYTES {
                    allocated += leaf_pages(value.len()) * PAGE_BYTES;
                }
            }
            assert_eq!(
                next,
                Offset(10 + count),
                "{count} x {len}: every record stored"
            );
            let large: usize = batches
                .iter()
                .map(|(_, v)| v.len())
                .filter(|l| l + LEAF_OVERHEAD > PAGE_BYTES)
                .sum();
            assert!(
                allocated <= large + large / 4 + 2 * PAGE_BYTES || len > max,
                "{count} x {len}: {allocated} bytes of pages for {large} bytes of large values \
                 ({stored} stored)"
            );
        }
    }
}
