//! The raft-core log and election-state traits on `fjall`: [`FjallStore`] implements both
//! [`LogStore`] and [`ElectionStore`] over one fjall database in a data directory.
//!
//! # Durability
//!
//! * [`LogStore::append`], [`LogStore::truncate`], [`LogStore::purge`] and
//!   [`ElectionStore::save`] return once their change is in the journal and the journal is
//!   persisted (`fdatasync` by default, see [`SyncMode`]): after a crash it is there, and so is
//!   everything accepted before it. A call that returned an error may or may not have reached
//!   the disk.
//! * fjall writes are not durable by themselves. One writer thread takes every queued write,
//!   commits them as atomic write batches and then persists the journal once for the whole group
//!   (group commit). The order of first polls is the order of the log: a caller may issue the
//!   next append before the previous one returned.
//! * Every write batch carries the log bookkeeping matching its records, so whatever prefix of a
//!   group a crash leaves in the journal is a consistent log.
//! * [`LogStore::state`] reflects every accepted call, durable or not; [`LogStore::read`] of a
//!   range that is still being persisted waits for that persist.
//! * A failed commit or persist poisons the store: it and every later call return
//!   [`StorageError::Poisoned`] (a persist is never retried; fjall poisons itself too). Reopen
//!   the directory to recover.
//! * Opening syncs the journal it recovered before serving anything: after a process crash the
//!   journal may end in writes that reached the page cache but were never synced, and they must
//!   not be counted as durable until they are.
//!
//! # On-disk layout
//!
//! A fjall database with two keyspaces:
//!
//! * `log`: key the big-endian `u64` offset of a batch's first record, value the records of that
//!   batch in the raft-core record format (each with its own CRC-32), at most
//!   [`Options::batch_value_bytes_max`] per value unless a single record is larger. Values are
//!   read without copying: records are slices of fjall's buffers.
//! * `meta`: `format` (u32, [`FORMAT_VERSION`]), `cluster_id`, `log_meta` (bounds and epoch
//!   history, with a CRC-32) and `election` (with a CRC-32). The bounds live in a key of their
//!   own so that opening never scans the tombstones a purge leaves behind.
//!
//! Truncation rewrites the batch the new end cuts into and deletes the later ones; purge deletes
//! whole batches below the new start (tombstones, dropped by compaction) and leaves the batch
//! holding it, whose purged head reads skip.
#![warn(missing_docs)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use async_trait::async_trait;
use bytes::Bytes;
use fjall::{
    Database, Keyspace, KeyspaceCreateOptions, OwnedWriteBatch as WriteBatch, PersistMode, Readable,
};
use raft_core::io::{ElectionStore, LogState, LogStore, StorageError};
use raft_core::snapshot_dir::SnapshotDir;
use raft_core::stored::{
    batch_prefix_len, check_read, corrupt_in_batch, decode_election_state, decode_part,
    encode_batches, encode_election_state, locate_in_batch, LogMeta, ReadBudget,
};
use raft_core::{ElectionState, Offset, OffsetAndEpoch, Record};
use tokio::sync::{oneshot, watch};

/// The data-directory format this build writes. Opening a directory with a higher version fails
/// with [`StorageError::Incompatible`].
pub const FORMAT_VERSION: u32 = 1;

const KS_LOG: &str = "log";
const KS_META: &str = "meta";
const KEY_FORMAT: &str = "format";
const KEY_CLUSTER: &str = "cluster_id";
const KEY_LOG_META: &str = "log_meta";
const KEY_ELECTION: &str = "election";

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

/// A write for the writer thread.
enum Op {
    Append(Vec<(Offset, Bytes)>),
    Truncate,
    /// A purge; `previous_start` is the log start before it, where the first live batch is.
    Purge {
        previous_start: Offset,
    },
    /// A reset; `previous_start` as for a purge.
    Reset {
        previous_start: Offset,
    },
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
    log: Keyspace,
    meta: Keyspace,
    options: Options,
    accepted: Mutex<Accepted>,
    poisoned: Mutex<Option<String>>,
    /// The sequence number of the last write the writer finished (committed or failed).
    finished: watch::Sender<u64>,
    /// The end offset as of the last persist: reads below it never wait.
    committed_end: AtomicU64,
    fail_next_write: AtomicBool,
}

/// A raft log and election store in one fjall database. See the crate docs for what each call
/// makes durable. Dropping it stops the writer thread (waiting for the persist in progress) and
/// closes the database.
pub struct FjallStore {
    shared: Arc<Shared>,
    writer: Option<JoinHandle<()>>,
    dir: PathBuf,
}

impl std::fmt::Debug for FjallStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FjallStore")
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

fn key(offset: Offset) -> [u8; 8] {
    offset.0.to_be_bytes()
}

fn offset_of(key: &[u8]) -> Result<Offset, StorageError> {
    <[u8; 8]>::try_from(key)
        .map(|k| Offset(u64::from_be_bytes(k)))
        .map_err(|_| io_msg(format!("a log key of {} bytes", key.len())))
}

fn open_db(dir: &Path, options: &Options) -> Result<(Database, Keyspace, Keyspace), StorageError> {
    let db = Database::builder(dir)
        .cache_size(options.cache_size_bytes)
        .manual_journal_persist(true)
        .worker_threads(options.worker_threads.max(1))
        .max_journaling_size(options.max_journal_bytes.max(64 << 20))
        .open()
        .map_err(io)?;
    let memtable = options.max_memtable_bytes.max(1 << 20);
    let create = || {
        KeyspaceCreateOptions::default()
            .manual_journal_persist(true)
            .max_memtable_size(memtable)
    };
    let log = db.keyspace(KS_LOG, create).map_err(io)?;
    let meta = db.keyspace(KS_META, create).map_err(io)?;
    Ok((db, log, meta))
}

impl FjallStore {
    /// Opens the store in `dir`, creating the directory and an empty store stamped with
    /// `cluster_id` if there is none. Fails with [`StorageError::Incompatible`] if the directory
    /// holds a newer format or belongs to another cluster. Blocks while fjall recovers its
    /// journal.
    pub fn open(
        dir: impl AsRef<Path>,
        cluster_id: &str,
        options: Options,
    ) -> Result<FjallStore, StorageError> {
        let dir = dir.as_ref().to_path_buf();
        std::fs::create_dir_all(&dir).map_err(io)?;
        let (db, log, meta_ks) = open_db(&dir, &options)?;
        // Recovery replays the active journal as the previous process left it, including
        // writes it had not synced yet (a process crash keeps them in the page cache). They are
        // about to be served as durable, so they must be: sync before reading anything. (fjall
        // 3.1 does so in its own recovery too; this keeps the guarantee ours.)
        db.persist(PersistMode::SyncAll).map_err(io)?;
        let meta = init_or_check(&db, &meta_ks, cluster_id)?;
        let (finished, _) = watch::channel(0);
        let (tx, rx) = mpsc::channel();
        let shared = Arc::new(Shared {
            db,
            log,
            meta: meta_ks,
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
            .name("raft-fjall-writer".into())
            .spawn(move || run_writer(&for_writer, rx))
            .map_err(io)?;
        Ok(FjallStore {
            shared,
            writer: Some(writer),
            dir,
        })
    }

    /// The data directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Fault injection for tests: the next group commit fails as a failed fsync would (nothing
    /// of it is written) and poisons the store.
    pub fn inject_write_failure(&self) {
        self.shared.fail_next_write.store(true, Ordering::SeqCst);
    }

    fn check_poisoned(&self) -> Result<(), StorageError> {
        match &*lock(&self.shared.poisoned) {
            Some(reason) => Err(StorageError::Poisoned(reason.clone())),
            None => Ok(()),
        }
    }

    /// Queues a write and waits for the writer thread to persist it. `prepare` checks the call
    /// against the accepted bookkeeping, updates it and builds the op; it runs under the same
    /// lock as the send, so the queue order is the acceptance order.
    async fn submit(
        &self,
        bytes: usize,
        prepare: impl FnOnce(&mut LogMeta) -> Result<(Op, bool), StorageError>,
    ) -> Result<(), StorageError> {
        self.check_poisoned()?;
        let (done, wait) = oneshot::channel();
        {
            let mut acc = lock(&self.shared.accepted);
            let (op, logged) = prepare(&mut acc.meta)?;
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
        let shared = &self.shared;
        let snapshot = shared.db.snapshot();
        let meta = snapshot
            .get(&shared.meta, KEY_LOG_META)
            .map_err(io)?
            .ok_or_else(|| io_msg("the log bookkeeping is missing".into()))?;
        let meta = LogMeta::decode(&meta)
            .map_err(|e| io_msg(format!("the log bookkeeping is unreadable: {e}")))?;
        let to = check_read(&meta, from, to)?;
        let mut out = Vec::new();
        if from >= to {
            return Ok(out);
        }
        let first = match snapshot.range(&shared.log, ..=key(from)).next_back() {
            Some(guard) => offset_of(&guard.key().map_err(io)?)?,
            None => from,
        };
        let mut budget = ReadBudget::new(max_bytes);
        for guard in snapshot.range(&shared.log, key(first)..key(to)) {
            let (k, value) = guard.into_inner().map_err(io)?;
            let value = Bytes::from(value);
            let part = locate_in_batch(&value, offset_of(&k)?, from, to, &mut budget)?;
            // No copy: the records are slices of the buffer fjall handed out.
            decode_part(value.slice(part.bytes), part.first, part.count, &mut out)?;
            if budget.exhausted {
                break;
            }
        }
        Ok(out)
    }
}

impl Drop for FjallStore {
    fn drop(&mut self) {
        lock(&self.shared.accepted).tx = None;
        if let Some(writer) = self.writer.take() {
            // The writer only returns or panics; a panic was already reported on its thread.
            let _ = writer.join();
        }
    }
}

/// Stamps a new database with the format and cluster id, or checks them on an existing one;
/// returns the log bookkeeping.
fn init_or_check(
    db: &Database,
    meta: &Keyspace,
    cluster_id: &str,
) -> Result<LogMeta, StorageError> {
    match meta.get(KEY_FORMAT).map_err(io)? {
        Some(format) => {
            let cluster = meta.get(KEY_CLUSTER).map_err(io)?;
            check_stamp(&format, cluster.as_deref(), cluster_id)?;
        }
        None => {
            let mut batch = db.batch();
            batch.insert(meta, KEY_FORMAT, FORMAT_VERSION.to_le_bytes().to_vec());
            batch.insert(meta, KEY_CLUSTER, cluster_id.as_bytes().to_vec());
            batch.insert(meta, KEY_LOG_META, LogMeta::default().encode());
            batch.commit().map_err(io)?;
            db.persist(PersistMode::SyncAll).map_err(io)?;
        }
    }
    let value = meta
        .get(KEY_LOG_META)
        .map_err(io)?
        .ok_or_else(|| io_msg("the log bookkeeping is missing".into()))?;
    LogMeta::decode(&value).map_err(|e| io_msg(format!("the log bookkeeping is unreadable: {e}")))
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

/// The writer thread: takes every queued write, commits them, persists once, answers each.
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

/// The write batch being built, and the bookkeeping that must go into it.
struct Pending<'a> {
    batch: WriteBatch,
    meta: Option<&'a LogMeta>,
}

impl<'a> Pending<'a> {
    /// Commits the batch with its bookkeeping (visible, not yet durable) and starts a new one.
    fn commit(&mut self, shared: &Shared) -> Result<(), StorageError> {
        if let Some(meta) = self.meta.take() {
            self.batch.insert(&shared.meta, KEY_LOG_META, meta.encode());
        }
        let batch = std::mem::replace(&mut self.batch, shared.db.batch());
        if !batch.is_empty() {
            batch.commit().map_err(io)?;
        }
        Ok(())
    }
}

fn commit_group(shared: &Shared, group: &[Request]) -> Result<(), StorageError> {
    if shared.fail_next_write.swap(false, Ordering::SeqCst) {
        return Err(io_msg("injected write failure".into()));
    }
    let mut pending = Pending {
        batch: shared.db.batch(),
        meta: None,
    };
    for request in group {
        match (&request.op, &request.meta) {
            (Op::Append(batches), _) => {
                for (base, value) in batches {
                    pending.batch.insert(&shared.log, key(*base), value.clone());
                }
            }
            (Op::Truncate, Some(meta)) => {
                // The rewrite reads the batch it cuts into: earlier writes must be visible.
                pending.commit(shared)?;
                truncate_ops(shared, &mut pending.batch, meta.end)?;
            }
            (Op::Purge { previous_start }, Some(meta)) => {
                pending.commit(shared)?;
                purge_ops(shared, &mut pending.batch, *previous_start, meta)?;
            }
            (Op::Reset { previous_start }, Some(_)) => {
                pending.commit(shared)?;
                let first = match shared.log.range(..=key(*previous_start)).next_back() {
                    Some(guard) => offset_of(&guard.key().map_err(io)?)?,
                    None => *previous_start,
                };
                for guard in shared.log.range(key(first)..) {
                    pending.batch.remove(&shared.log, guard.key().map_err(io)?);
                }
            }
            (Op::Save(state), _) => {
                pending
                    .batch
                    .insert(&shared.meta, KEY_ELECTION, encode_election_state(state));
            }
            (Op::Truncate | Op::Purge { .. } | Op::Reset { .. }, None) => {
                unreachable!("log ops always carry their meta")
            }
        }
        if request.meta.is_some() {
            pending.meta = request.meta.as_ref();
        }
    }
    pending.commit(shared)?;
    let mode = match shared.options.sync_mode {
        SyncMode::Data => PersistMode::SyncData,
        SyncMode::All => PersistMode::SyncAll,
    };
    shared.db.persist(mode).map_err(io)
}

/// Removes every record at or after `end`: whole batches past it, and the tail of the batch it
/// cuts into.
fn truncate_ops(shared: &Shared, batch: &mut WriteBatch, end: Offset) -> Result<(), StorageError> {
    for guard in shared.log.range(key(end)..) {
        batch.remove(&shared.log, guard.key().map_err(io)?);
    }
    if let Some(guard) = shared.log.range(..key(end)).next_back() {
        let (k, value) = guard.into_inner().map_err(io)?;
        let keep = batch_prefix_len(&value, offset_of(&k)?, end)?;
        if keep < value.len() {
            batch.insert(&shared.log, k, Bytes::from(value).slice(..keep));
        }
    }
    Ok(())
}

/// Removes the batches that hold only records before `meta.start`; the batch holding the start
/// stays. Starts at the first live batch (the one holding `previous_start`), so the tombstones of
/// earlier purges are never walked.
fn purge_ops(
    shared: &Shared,
    batch: &mut WriteBatch,
    previous_start: Offset,
    meta: &LogMeta,
) -> Result<(), StorageError> {
    let keep_from = if meta.start == meta.end {
        meta.start
    } else {
        match shared.log.range(..=key(meta.start)).next_back() {
            Some(guard) => offset_of(&guard.key().map_err(io)?)?,
            None => return Ok(()),
        }
    };
    let first = match shared.log.range(..=key(previous_start)).next_back() {
        Some(guard) => offset_of(&guard.key().map_err(io)?)?,
        None => previous_start,
    };
    for guard in shared.log.range(key(first)..key(keep_from)) {
        batch.remove(&shared.log, guard.key().map_err(io)?);
    }
    Ok(())
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
impl LogStore for FjallStore {
    async fn state(&self) -> Result<LogState, StorageError> {
        self.check_poisoned()?;
        Ok(lock(&self.shared.accepted).meta.state())
    }

    async fn append(&self, records: &[Record]) -> Result<(), StorageError> {
        if records.is_empty() {
            return self.check_poisoned();
        }
        let batches = encode_batches(records, self.shared.options.batch_value_bytes_max);
        let bytes = batches.iter().map(|(_, v)| v.len()).sum();
        self.submit(bytes, move |meta| {
            meta.check_append(records)?;
            meta.apply_append(records);
            Ok((Op::Append(batches), true))
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
            // Part of the range is still being persisted: wait for the writer to get there.
            let mut finished = self.shared.finished.subscribe();
            // The sender lives in `shared`, which this store holds, so it cannot be dropped.
            let _ = finished.wait_for(|&done| done >= seq).await;
            self.check_poisoned()?;
        }
        self.read_committed(from, to, max_bytes)
    }

    async fn truncate(&self, end: Offset) -> Result<(), StorageError> {
        self.submit(64, |meta| {
            meta.check_truncate(end)?;
            meta.apply_truncate(end);
            Ok((Op::Truncate, true))
        })
        .await
    }

    async fn purge(&self, start: Offset) -> Result<(), StorageError> {
        self.submit(64, |meta| {
            meta.check_purge(start)?;
            let previous_start = meta.start;
            meta.apply_purge(start);
            Ok((Op::Purge { previous_start }, true))
        })
        .await
    }

    async fn reset(&self, start: OffsetAndEpoch) -> Result<(), StorageError> {
        self.submit(64, |meta| {
            let previous_start = meta.start;
            meta.apply_reset(start);
            Ok((Op::Reset { previous_start }, true))
        })
        .await
    }
}

#[async_trait]
impl ElectionStore for FjallStore {
    async fn load(&self) -> Result<Option<ElectionState>, StorageError> {
        self.check_poisoned()?;
        let Some(value) = self.shared.meta.get(KEY_ELECTION).map_err(io)? else {
            return Ok(None);
        };
        decode_election_state(&value)
            .map(Some)
            .map_err(|e| io_msg(format!("the election state is unreadable: {e}")))
    }

    async fn save(&self, state: &ElectionState) -> Result<(), StorageError> {
        let state = *state;
        self.submit(32, move |_| Ok((Op::Save(state), false))).await
    }
}

/// Fault injection for tests: flips a bit of the stored record at `offset` in the store in
/// `dir` (which no [`FjallStore`] may have open), so that reading it fails its checksum.
pub fn corrupt_record(dir: impl AsRef<Path>, offset: Offset) -> Result<(), StorageError> {
    let (db, log, _meta) = open_db(dir.as_ref(), &Options::default())?;
    let guard = log
        .range(..=key(offset))
        .next_back()
        .ok_or_else(|| StorageError::Invalid(format!("no record at {offset}")))?;
    let (k, value) = guard.into_inner().map_err(io)?;
    let changed = corrupt_in_batch(&value, offset_of(&k)?, offset)?;
    log.insert(k, changed).map_err(io)?;
    db.persist(PersistMode::SyncAll).map_err(io)
}
