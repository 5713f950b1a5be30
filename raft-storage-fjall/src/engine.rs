//! The fjall database of a data directory and its writer thread, shared by every log it holds:
//! the one log of a [`crate::FjallStore`] directory, or every group of a [`crate::FjallGroups`]
//! directory. A log's keys carry its [`Keys`] prefix (none for the single log), so one group
//! commit covers the writes of every log and ends with one persist of the journal.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use bytes::Bytes;
use fjall::{
    Database, Keyspace, KeyspaceCreateOptions, OwnedWriteBatch as WriteBatch, PersistMode, Readable,
};
use raft_core::io::StorageError;
use raft_core::stored::{
    batch_prefix_len, check_read, corrupt_in_batch, decode_part, encode_election_state,
    locate_in_batch, LogMeta, ReadBudget,
};
use raft_core::{ElectionState, GroupId, Offset, Record};
use tokio::sync::oneshot;

use crate::group::GroupCore;
use crate::{Options, SyncMode, FORMAT_VERSION, GROUPS_FORMAT_VERSION};

const KS_LOG: &str = "log";
const KS_META: &str = "meta";
const KS_GROUPS: &str = "groups";
const KEY_FORMAT: &str = "format";
const KEY_CLUSTER: &str = "cluster_id";
const KEY_LOG_META: &str = "log_meta";
const KEY_ELECTION: &str = "election";

pub(crate) fn io<E: std::error::Error + Send + Sync + 'static>(e: E) -> StorageError {
    StorageError::Io(Box::new(e))
}

pub(crate) fn io_msg(msg: String) -> StorageError {
    StorageError::Io(msg.into())
}

/// Locks `m`, recovering the data if a thread panicked while holding it: every update under
/// these locks is complete before anything that can panic.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Which kind of data directory a database is.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Layout {
    /// One log, unprefixed keys, its bookkeeping in `meta` ([`FORMAT_VERSION`]).
    Single,
    /// Many groups, keys prefixed by the group id, their bookkeeping in `groups`
    /// ([`GROUPS_FORMAT_VERSION`]).
    Groups,
}

/// Where the keys of one log live: behind an 8-byte big-endian group id, or (the single log of
/// a [`Layout::Single`] directory) behind nothing.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(crate) struct Keys {
    prefix: [u8; 8],
    len: usize,
}

impl Keys {
    pub(crate) const SINGLE: Keys = Keys {
        prefix: [0; 8],
        len: 0,
    };

    pub(crate) fn group(group: GroupId) -> Keys {
        Keys {
            prefix: group.0.to_be_bytes(),
            len: 8,
        }
    }

    fn with(&self, tail: &[u8]) -> Vec<u8> {
        let mut key = Vec::with_capacity(self.len + tail.len());
        key.extend_from_slice(&self.prefix[..self.len]);
        key.extend_from_slice(tail);
        key
    }

    /// The key of the stored batch whose first record is `offset`.
    pub(crate) fn log(&self, offset: Offset) -> Vec<u8> {
        self.with(&offset.0.to_be_bytes())
    }

    /// The last key this log's batches may have.
    fn log_end(&self) -> Vec<u8> {
        self.log(Offset(u64::MAX))
    }

    fn offset_of(&self, key: &[u8]) -> Result<Offset, StorageError> {
        key.strip_prefix(&self.prefix[..self.len])
            .and_then(|k| <[u8; 8]>::try_from(k).ok())
            .map(|k| Offset(u64::from_be_bytes(k)))
            .ok_or_else(|| io_msg(format!("a log key of {} bytes outside its log", key.len())))
    }

    fn state(&self, name: &str) -> Vec<u8> {
        self.with(name.as_bytes())
    }
}

/// A write for the writer thread.
pub(crate) enum Op {
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
    /// A new group: its bookkeeping (the request's meta) makes it listed.
    Create,
    /// Removes every key of a group.
    Drop,
}

pub(crate) struct Request {
    pub(crate) group: Arc<GroupCore>,
    pub(crate) op: Op,
    /// The log bookkeeping after this op (`None` for election saves and drops).
    pub(crate) meta: Option<LogMeta>,
    pub(crate) seq: u64,
    pub(crate) bytes: usize,
    pub(crate) done: oneshot::Sender<Result<(), StorageError>>,
}

pub(crate) struct Shared {
    db: Database,
    log: Keyspace,
    /// Where each log's bookkeeping and election state live: `meta` for the single log,
    /// `groups` for groups.
    state: Keyspace,
    options: Options,
    poisoned: Mutex<Option<String>>,
    fail_next_write: AtomicBool,
    syncs: AtomicU64,
    holds: Mutex<usize>,
    released: Condvar,
}

/// The database and its writer thread. Dropping the last handle stops the thread (after the
/// commit in progress) and closes the database.
pub(crate) struct Engine {
    pub(crate) shared: Arc<Shared>,
    tx: Mutex<Option<mpsc::Sender<Request>>>,
    writer: Option<JoinHandle<()>>,
    pub(crate) dir: PathBuf,
}

fn open_db(dir: &Path, options: &Options, layout: Layout) -> Result<Shared, StorageError> {
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
    let state = match layout {
        Layout::Single => db.keyspace(KS_META, create).map_err(io)?,
        Layout::Groups => db.keyspace(KS_GROUPS, create).map_err(io)?,
    };
    Ok(Shared {
        db,
        log,
        state,
        options: options.clone(),
        poisoned: Mutex::new(None),
        fail_next_write: AtomicBool::new(false),
        syncs: AtomicU64::new(0),
        holds: Mutex::new(0),
        released: Condvar::new(),
    })
}

impl Engine {
    /// Opens (creating it stamped with `cluster_id` if empty) the database in `dir`, checks its
    /// format and cluster, and starts the writer thread.
    pub(crate) fn open(
        dir: &Path,
        cluster_id: &str,
        options: Options,
        layout: Layout,
    ) -> Result<Engine, StorageError> {
        std::fs::create_dir_all(dir).map_err(io)?;
        let shared = open_db(dir, &options, layout)?;
        // Recovery replays the active journal as the previous process left it, including
        // writes it had not synced yet (a process crash keeps them in the page cache). They are
        // about to be served as durable, so they must be: sync before reading anything. (fjall
        // 3.1 does so in its own recovery too; this keeps the guarantee ours.)
        shared.db.persist(PersistMode::SyncAll).map_err(io)?;
        init_or_check(&shared, cluster_id, layout)?;
        let shared = Arc::new(shared);
        let (tx, rx) = mpsc::channel();
        let for_writer = shared.clone();
        let writer = std::thread::Builder::new()
            .name("raft-fjall-writer".into())
            .spawn(move || run_writer(&for_writer, rx))
            .map_err(io)?;
        Ok(Engine {
            shared,
            tx: Mutex::new(Some(tx)),
            writer: Some(writer),
            dir: dir.to_path_buf(),
        })
    }

    pub(crate) fn check_poisoned(&self) -> Result<(), StorageError> {
        match &*lock(&self.shared.poisoned) {
            Some(reason) => Err(StorageError::Poisoned(reason.clone())),
            None => Ok(()),
        }
    }

    pub(crate) fn inject_write_failure(&self) {
        self.shared.fail_next_write.store(true, Ordering::SeqCst);
    }

    pub(crate) fn syncs(&self) -> u64 {
        self.shared.syncs.load(Ordering::SeqCst)
    }

    /// Holds group commits until [`Engine::release`].
    pub(crate) fn hold(&self) {
        *lock(&self.shared.holds) += 1;
    }

    pub(crate) fn release(&self) {
        let mut holds = lock(&self.shared.holds);
        *holds = holds.saturating_sub(1);
        self.shared.released.notify_all();
    }

    pub(crate) fn batch_value_bytes_max(&self) -> usize {
        self.shared.options.batch_value_bytes_max
    }

    /// Queues `request` for the writer thread.
    pub(crate) fn send(&self, request: Request) -> Result<(), StorageError> {
        let sent = lock(&self.tx)
            .as_ref()
            .map(|tx| tx.send(request).is_ok())
            .unwrap_or(false);
        if sent {
            Ok(())
        } else {
            Err(StorageError::Poisoned(
                "the writer thread has stopped".into(),
            ))
        }
    }

    /// The durable bookkeeping of the log at `keys`, `None` when there is none (a group the
    /// engine does not hold).
    pub(crate) fn load_meta(&self, keys: Keys) -> Result<Option<LogMeta>, StorageError> {
        let Some(value) = self
            .shared
            .state
            .get(keys.state(KEY_LOG_META))
            .map_err(io)?
        else {
            return Ok(None);
        };
        LogMeta::decode(&value)
            .map(Some)
            .map_err(|e| io_msg(format!("the log bookkeeping is unreadable: {e}")))
    }

    /// The election state saved for the log at `keys`, raw.
    pub(crate) fn load_election(&self, keys: Keys) -> Result<Option<Vec<u8>>, StorageError> {
        let value = self
            .shared
            .state
            .get(keys.state(KEY_ELECTION))
            .map_err(io)?;
        Ok(value.map(|v| v.to_vec()))
    }

    /// The groups with bookkeeping, ascending.
    pub(crate) fn list_groups(&self) -> Result<Vec<GroupId>, StorageError> {
        let mut out = Vec::new();
        for guard in self.shared.state.iter() {
            let key = guard.key().map_err(io)?;
            if let Some(id) = key
                .strip_suffix(KEY_LOG_META.as_bytes())
                .and_then(|k| <[u8; 8]>::try_from(k).ok())
            {
                out.push(GroupId(u64::from_be_bytes(id)));
            }
        }
        Ok(out)
    }

    /// Records of the log at `keys` in `[from, to)` as of the last commit.
    pub(crate) fn read_committed(
        &self,
        keys: Keys,
        from: Offset,
        to: Offset,
        max_bytes: u64,
    ) -> Result<Vec<Record>, StorageError> {
        let shared = &self.shared;
        let snapshot = shared.db.snapshot();
        let meta = snapshot
            .get(&shared.state, keys.state(KEY_LOG_META))
            .map_err(io)?
            .ok_or_else(|| io_msg("the log bookkeeping is missing".into()))?;
        let meta = LogMeta::decode(&meta)
            .map_err(|e| io_msg(format!("the log bookkeeping is unreadable: {e}")))?;
        let to = check_read(&meta, from, to)?;
        let mut out = Vec::new();
        if from >= to {
            return Ok(out);
        }
        let below = keys.log(Offset(0))..=keys.log(from);
        let first = match snapshot.range(&shared.log, below).next_back() {
            Some(guard) => keys.offset_of(&guard.key().map_err(io)?)?,
            None => from,
        };
        let mut budget = ReadBudget::new(max_bytes);
        for guard in snapshot.range(&shared.log, keys.log(first)..keys.log(to)) {
            let (k, value) = guard.into_inner().map_err(io)?;
            let value = Bytes::from(value);
            let part = locate_in_batch(&value, keys.offset_of(&k)?, from, to, &mut budget)?;
            // No copy: the records are slices of the buffer fjall handed out.
            decode_part(value.slice(part.bytes), part.first, part.count, &mut out)?;
            if budget.exhausted {
                break;
            }
        }
        Ok(out)
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        lock(&self.tx).take();
        if let Some(writer) = self.writer.take() {
            // The writer only returns or panics; a panic was already reported on its thread.
            let _ = writer.join();
        }
    }
}

/// Stamps a new database with the format and cluster id, or checks them on an existing one.
fn init_or_check(shared: &Shared, cluster_id: &str, layout: Layout) -> Result<(), StorageError> {
    let meta = match layout {
        Layout::Single => shared.state.clone(),
        Layout::Groups => shared
            .db
            .keyspace(KS_META, KeyspaceCreateOptions::default)
            .map_err(io)?,
    };
    let version = match layout {
        Layout::Single => FORMAT_VERSION,
        Layout::Groups => GROUPS_FORMAT_VERSION,
    };
    if let Some(format) = meta.get(KEY_FORMAT).map_err(io)? {
        let cluster = meta.get(KEY_CLUSTER).map_err(io)?;
        return check_stamp(&format, cluster.as_deref(), cluster_id, layout);
    }
    let mut batch = shared.db.batch();
    batch.insert(&meta, KEY_FORMAT, version.to_le_bytes().to_vec());
    batch.insert(&meta, KEY_CLUSTER, cluster_id.as_bytes().to_vec());
    if layout == Layout::Single {
        batch.insert(&meta, KEY_LOG_META, LogMeta::default().encode());
    }
    batch.commit().map_err(io)?;
    shared.db.persist(PersistMode::SyncAll).map_err(io)
}

fn check_stamp(
    format: &[u8],
    cluster: Option<&[u8]>,
    cluster_id: &str,
    layout: Layout,
) -> Result<(), StorageError> {
    let version = <[u8; 4]>::try_from(format)
        .map(u32::from_le_bytes)
        .map_err(|_| StorageError::Incompatible("unreadable format version".into()))?;
    match (layout, version) {
        (Layout::Single, v) if v <= FORMAT_VERSION => {}
        (Layout::Groups, GROUPS_FORMAT_VERSION) => {}
        (Layout::Single, GROUPS_FORMAT_VERSION) => {
            return Err(StorageError::Incompatible(
                "the directory holds the logs of many groups: open it with FjallGroups".into(),
            ))
        }
        (Layout::Groups, v) if v <= FORMAT_VERSION => {
            return Err(StorageError::Incompatible(
                "the directory holds a single log: open it with FjallStore".into(),
            ))
        }
        (_, v) => {
            return Err(StorageError::Incompatible(format!(
                "data format version {v} is newer than this build's \
                 {FORMAT_VERSION} (one log) and {GROUPS_FORMAT_VERSION} (groups)"
            )))
        }
    }
    if cluster != Some(cluster_id.as_bytes()) {
        let found = cluster.map(String::from_utf8_lossy).unwrap_or_default();
        return Err(StorageError::Incompatible(format!(
            "data belongs to cluster {found:?}, not {cluster_id:?}"
        )));
    }
    Ok(())
}

/// The writer thread: takes every queued write of every log, commits them, persists once,
/// answers each.
fn run_writer(shared: &Shared, rx: mpsc::Receiver<Request>) {
    while let Ok(first) = rx.recv() {
        {
            let mut holds = lock(&shared.holds);
            while *holds > 0 {
                holds = shared
                    .released
                    .wait(holds)
                    .unwrap_or_else(|e| e.into_inner());
            }
        }
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
        for request in group {
            if let (Ok(()), Some(meta)) = (&result, &request.meta) {
                request.group.committed(meta.end);
            }
            let answer = match &result {
                Ok(()) => Ok(()),
                Err(reason) if was_poisoned => Err(StorageError::Poisoned(reason.clone())),
                Err(reason) => Err(io_msg(reason.clone())),
            };
            // The caller may have stopped waiting; the write stands either way.
            let _ = request.done.send(answer);
            request.group.finished(request.seq);
        }
    }
}

/// The write batch being built, and the bookkeeping of each log that must go into it.
struct Pending<'a> {
    batch: WriteBatch,
    metas: HashMap<Keys, &'a LogMeta>,
}

impl Pending<'_> {
    /// Commits the batch with its bookkeeping (visible, not yet durable) and starts a new one.
    fn commit(&mut self, shared: &Shared) -> Result<(), StorageError> {
        for (keys, meta) in self.metas.drain() {
            self.batch
                .insert(&shared.state, keys.state(KEY_LOG_META), meta.encode());
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
        metas: HashMap::new(),
    };
    for request in group {
        let keys = request.group.keys;
        match (&request.op, &request.meta) {
            (Op::Append(batches), _) => {
                for (base, value) in batches {
                    pending
                        .batch
                        .insert(&shared.log, keys.log(*base), value.clone());
                }
            }
            (Op::Truncate, Some(meta)) => {
                // The rewrite reads the batch it cuts into: earlier writes must be visible.
                pending.commit(shared)?;
                truncate_ops(shared, &mut pending.batch, keys, meta.end)?;
            }
            (Op::Purge { previous_start }, Some(meta)) => {
                pending.commit(shared)?;
                purge_ops(shared, &mut pending.batch, keys, *previous_start, meta)?;
            }
            (Op::Reset { previous_start }, Some(_)) => {
                pending.commit(shared)?;
                let first = first_live(shared, keys, *previous_start)?;
                for guard in shared.log.range(keys.log(first)..=keys.log_end()) {
                    pending.batch.remove(&shared.log, guard.key().map_err(io)?);
                }
            }
            (Op::Save(state), _) => {
                let value = encode_election_state(state);
                pending
                    .batch
                    .insert(&shared.state, keys.state(KEY_ELECTION), value);
            }
            (Op::Create, _) => {}
            (Op::Drop, _) => {
                pending.metas.remove(&keys);
                pending.commit(shared)?;
                for guard in shared.log.range(keys.log(Offset(0))..=keys.log_end()) {
                    pending.batch.remove(&shared.log, guard.key().map_err(io)?);
                }
                pending
                    .batch
                    .remove(&shared.state, keys.state(KEY_LOG_META));
                pending
                    .batch
                    .remove(&shared.state, keys.state(KEY_ELECTION));
            }
            (Op::Truncate | Op::Purge { .. } | Op::Reset { .. }, None) => {
                return Err(io_msg("a log write without its bookkeeping".into()));
            }
        }
        if let Some(meta) = &request.meta {
            pending.metas.insert(keys, meta);
        }
    }
    pending.commit(shared)?;
    let mode = match shared.options.sync_mode {
        SyncMode::Data => PersistMode::SyncData,
        SyncMode::All => PersistMode::SyncAll,
    };
    shared.syncs.fetch_add(1, Ordering::SeqCst);
    shared.db.persist(mode).map_err(io)
}

/// The key offset of the batch holding `start` (the first live batch), or `start`.
fn first_live(shared: &Shared, keys: Keys, start: Offset) -> Result<Offset, StorageError> {
    match shared
        .log
        .range(keys.log(Offset(0))..=keys.log(start))
        .next_back()
    {
        Some(guard) => keys.offset_of(&guard.key().map_err(io)?),
        None => Ok(start),
    }
}

/// Removes every record at or after `end`: whole batches past it, and the tail of the batch it
/// cuts into.
fn truncate_ops(
    shared: &Shared,
    batch: &mut WriteBatch,
    keys: Keys,
    end: Offset,
) -> Result<(), StorageError> {
    for guard in shared.log.range(keys.log(end)..=keys.log_end()) {
        batch.remove(&shared.log, guard.key().map_err(io)?);
    }
    let below = keys.log(Offset(0))..keys.log(end);
    if let Some(guard) = shared.log.range(below).next_back() {
        let (k, value) = guard.into_inner().map_err(io)?;
        let keep = batch_prefix_len(&value, keys.offset_of(&k)?, end)?;
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
    keys: Keys,
    previous_start: Offset,
    meta: &LogMeta,
) -> Result<(), StorageError> {
    let keep_from = if meta.start == meta.end {
        meta.start
    } else {
        let below = keys.log(Offset(0))..=keys.log(meta.start);
        match shared.log.range(below).next_back() {
            Some(guard) => keys.offset_of(&guard.key().map_err(io)?)?,
            None => return Ok(()),
        }
    };
    let first = first_live(shared, keys, previous_start)?;
    for guard in shared.log.range(keys.log(first)..keys.log(keep_from)) {
        batch.remove(&shared.log, guard.key().map_err(io)?);
    }
    Ok(())
}

/// Flips a bit of the stored record at `offset` of the log at `keys` in the directory `dir`
/// (not open).
pub(crate) fn corrupt(
    dir: &Path,
    layout: Layout,
    keys: Keys,
    offset: Offset,
) -> Result<(), StorageError> {
    let shared = open_db(dir, &Options::default(), layout)?;
    let guard = shared
        .log
        .range(keys.log(Offset(0))..=keys.log(offset))
        .next_back()
        .ok_or_else(|| StorageError::Invalid(format!("no record at {offset}")))?;
    let (k, value) = guard.into_inner().map_err(io)?;
    let changed = corrupt_in_batch(&value, keys.offset_of(&k)?, offset)?;
    shared.log.insert(k, changed).map_err(io)?;
    shared.db.persist(PersistMode::SyncAll).map_err(io)
}
