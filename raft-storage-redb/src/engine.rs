//! The redb database of a data directory and its writer thread, shared by every log it holds:
//! the one log of a [`crate::RedbStore`] directory, or every group of a [`crate::RedbGroups`]
//! directory. One group commit is one write transaction over the writes of every log, and one
//! commit (one `fdatasync` in the default mode).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use bytes::Bytes;
use raft_core::io::StorageError;
use raft_core::stored::{
    batch_prefix_len, check_read, corrupt_in_batch, decode_part, encode_election_state,
    locate_in_batch, LogMeta, ReadBudget,
};
use raft_core::{ElectionState, GroupId, Offset, Record};
use redb::{
    Database, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition,
    WriteTransaction,
};
use tokio::sync::oneshot;

use crate::group::GroupCore;
use crate::{CommitMode, Options, FILE_NAME, FORMAT_VERSION, GROUPS_FORMAT_VERSION};

/// The single log's batches, by first offset.
const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("log");
/// The format, the cluster id, and the single log's bookkeeping and election state.
const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
/// Every group's batches, by `group << 64 | first offset`.
const GROUP_LOG: TableDefinition<u128, &[u8]> = TableDefinition::new("group_log");
/// Every group's bookkeeping, by group: the durable group list.
const GROUP_META: TableDefinition<u64, &[u8]> = TableDefinition::new("group_meta");
/// Every group's election state, by group.
const GROUP_ELECTION: TableDefinition<u64, &[u8]> = TableDefinition::new("group_election");
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
    /// One log in `log` and `meta` ([`FORMAT_VERSION`]).
    Single,
    /// Many groups in `group_log`, `group_meta` and `group_election`
    /// ([`GROUPS_FORMAT_VERSION`]).
    Groups,
}

/// Which log: the single one, or a group.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(crate) enum Keys {
    Single,
    Group(u64),
}

impl Keys {
    pub(crate) fn group(group: GroupId) -> Keys {
        Keys::Group(group.0)
    }

    /// The full key of the batch whose first record is `offset` (the group in the high half).
    fn log(self, offset: Offset) -> u128 {
        match self {
            Keys::Single => u128::from(offset.0),
            Keys::Group(g) => (u128::from(g) << 64) | u128::from(offset.0),
        }
    }
}

/// Runs `$body` with `$t` the log table of either layout, `$k` turning a full key into that
/// table's key type and `$o` a key of it back into an offset.
macro_rules! with_log {
    ($table:expr, |$t:ident, $k:ident, $o:ident| $body:expr) => {
        match $table {
            LogTable::Single($t) => {
                let $k = |full: u128| full as u64;
                let $o = |key: u64| Offset(key);
                $body
            }
            LogTable::Groups($t) => {
                let $k = |full: u128| full;
                let $o = |key: u128| Offset(key as u64);
                $body
            }
        }
    };
}

enum LogTable<T64, T128> {
    Single(T64),
    Groups(T128),
}

type WriteLog<'t> =
    LogTable<redb::Table<'t, u64, &'static [u8]>, redb::Table<'t, u128, &'static [u8]>>;

fn write_log<'t>(txn: &'t WriteTransaction, layout: Layout) -> Result<WriteLog<'t>, StorageError> {
    Ok(match layout {
        Layout::Single => LogTable::Single(txn.open_table(LOG).map_err(io)?),
        Layout::Groups => LogTable::Groups(txn.open_table(GROUP_LOG).map_err(io)?),
    })
}

impl WriteLog<'_> {
    fn insert(&mut self, keys: Keys, base: Offset, value: &[u8]) -> Result<(), StorageError> {
        with_log!(self, |t, k, _o| t
            .insert(k(keys.log(base)), value)
            .map(drop))
        .map_err(io)
    }

    /// Removes the batches of `keys` starting in `[from, to)`.
    fn remove_range(&mut self, keys: Keys, from: Offset, to: Offset) -> Result<(), StorageError> {
        let (lo, hi) = (keys.log(from), keys.log(to));
        with_log!(self, |t, k, _o| t.retain_in(k(lo)..k(hi), |_, _| false)).map_err(io)?;
        if to == Offset(u64::MAX) {
            let last = keys.log(to);
            with_log!(self, |t, k, _o| t.remove(k(last)).map(drop)).map_err(io)?;
        }
        Ok(())
    }

    /// The batch of `keys` with the highest first offset below `end`, and its bytes.
    fn last_below(
        &self,
        keys: Keys,
        end: Offset,
    ) -> Result<Option<(Offset, Vec<u8>)>, StorageError> {
        let (lo, hi) = (keys.log(Offset(0)), keys.log(end));
        with_log!(
            self,
            |t, k, o| match t.range(k(lo)..k(hi)).map_err(io)?.next_back() {
                Some(entry) => {
                    let (key, value) = entry.map_err(io)?;
                    Ok(Some((o(key.value()), value.value().to_vec())))
                }
                None => Ok(None),
            }
        )
    }

    /// The first offset of the batch holding `at`, if any batch of `keys` starts at or below it.
    fn holding(&self, keys: Keys, at: Offset) -> Result<Option<Offset>, StorageError> {
        let (lo, hi) = (keys.log(Offset(0)), keys.log(at));
        with_log!(
            self,
            |t, k, o| match t.range(k(lo)..=k(hi)).map_err(io)?.next_back() {
                Some(entry) => Ok(Some(o(entry.map_err(io)?.0.value()))),
                None => Ok(None),
            }
        )
    }
}

/// A write for the writer thread.
pub(crate) enum Op {
    Append(Vec<(Offset, Bytes)>),
    Truncate,
    Purge,
    Reset,
    Save(ElectionState),
    /// A new group: its bookkeeping (the request's meta) makes it listed.
    Create,
    /// Removes every record and row of a group.
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

struct Shared {
    db: Database,
    layout: Layout,
    options: Options,
    poisoned: Mutex<Option<String>>,
    fail_next_write: AtomicBool,
    syncs: AtomicU64,
    holds: Mutex<usize>,
    released: Condvar,
}

/// The database and its writer thread. Dropping the last handle stops the thread (after the
/// commit in progress) and closes the file.
pub(crate) struct Engine {
    shared: Arc<Shared>,
    tx: Mutex<Option<mpsc::Sender<Request>>>,
    writer: Option<JoinHandle<()>>,
    pub(crate) dir: PathBuf,
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
        let mut db = redb::Builder::new()
            .set_cache_size(options.cache_size_bytes)
            .create(dir.join(FILE_NAME))
            .map_err(io)?;
        init_or_check(&db, cluster_id, layout)?;
        if options.compact_on_open {
            db.compact().map_err(io)?;
        }
        let shared = Arc::new(Shared {
            db,
            layout,
            options,
            poisoned: Mutex::new(None),
            fail_next_write: AtomicBool::new(false),
            syncs: AtomicU64::new(0),
            holds: Mutex::new(0),
            released: Condvar::new(),
        });
        let (tx, rx) = mpsc::channel();
        let for_writer = shared.clone();
        let writer = std::thread::Builder::new()
            .name("raft-redb-writer".into())
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

    /// The committed bookkeeping of the log at `keys`, `None` when there is none (a group the
    /// engine does not hold).
    pub(crate) fn load_meta(&self, keys: Keys) -> Result<Option<LogMeta>, StorageError> {
        let txn = self.shared.db.begin_read().map_err(io)?;
        read_meta(&txn, keys)
    }

    /// The election state saved for the log at `keys`, raw.
    pub(crate) fn load_election(&self, keys: Keys) -> Result<Option<Vec<u8>>, StorageError> {
        let txn = self.shared.db.begin_read().map_err(io)?;
        let value = match keys {
            Keys::Single => txn
                .open_table(META)
                .map_err(io)?
                .get(KEY_ELECTION)
                .map_err(io)?,
            Keys::Group(g) => txn
                .open_table(GROUP_ELECTION)
                .map_err(io)?
                .get(g)
                .map_err(io)?,
        };
        Ok(value.map(|v| v.value().to_vec()))
    }

    /// The groups with bookkeeping, ascending.
    pub(crate) fn list_groups(&self) -> Result<Vec<GroupId>, StorageError> {
        let txn = self.shared.db.begin_read().map_err(io)?;
        let table = txn.open_table(GROUP_META).map_err(io)?;
        let mut out = Vec::with_capacity(table.len().map_err(io)? as usize);
        for entry in table.iter().map_err(io)? {
            out.push(GroupId(entry.map_err(io)?.0.value()));
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
        let txn = self.shared.db.begin_read().map_err(io)?;
        let meta = read_meta(&txn, keys)?
            .ok_or_else(|| io_msg("the log bookkeeping is missing".into()))?;
        let to = check_read(&meta, from, to)?;
        let mut out = Vec::new();
        if from >= to {
            return Ok(out);
        }
        let table = match keys {
            Keys::Single => LogTable::Single(txn.open_table(LOG).map_err(io)?),
            Keys::Group(_) => LogTable::Groups(txn.open_table(GROUP_LOG).map_err(io)?),
        };
        let (lo, at, hi) = (keys.log(Offset(0)), keys.log(from), keys.log(to));
        let mut budget = ReadBudget::new(max_bytes);
        with_log!(&table, |t, k, o| {
            let first = match t.range(k(lo)..=k(at)).map_err(io)?.next_back() {
                Some(entry) => entry.map_err(io)?.0.value(),
                None => k(at),
            };
            for entry in t.range(first..k(hi)).map_err(io)? {
                let (key, value) = entry.map_err(io)?;
                let value = value.value();
                let part = locate_in_batch(value, o(key.value()), from, to, &mut budget)?;
                // The one copy of a read: from redb's page into the buffer the records share.
                let bytes = Bytes::copy_from_slice(&value[part.bytes.clone()]);
                decode_part(bytes, part.first, part.count, &mut out)?;
                if budget.exhausted {
                    break;
                }
            }
            Ok::<(), StorageError>(())
        })?;
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

fn read_meta(txn: &redb::ReadTransaction, keys: Keys) -> Result<Option<LogMeta>, StorageError> {
    let value = match keys {
        Keys::Single => txn
            .open_table(META)
            .map_err(io)?
            .get(KEY_LOG_META)
            .map_err(io)?,
        Keys::Group(g) => txn.open_table(GROUP_META).map_err(io)?.get(g).map_err(io)?,
    };
    let Some(value) = value else {
        return Ok(None);
    };
    LogMeta::decode(value.value())
        .map(Some)
        .map_err(|e| io_msg(format!("the log bookkeeping is unreadable: {e}")))
}

/// Stamps a new file with the format and cluster id (and creates its tables), or checks them
/// on an existing one.
fn init_or_check(db: &Database, cluster_id: &str, layout: Layout) -> Result<(), StorageError> {
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
                check_stamp(&format, cluster.as_deref(), cluster_id, layout)?;
                true
            }
            None => {
                let version = match layout {
                    Layout::Single => FORMAT_VERSION,
                    Layout::Groups => GROUPS_FORMAT_VERSION,
                };
                meta.insert(KEY_FORMAT, version.to_le_bytes().as_slice())
                    .map_err(io)?;
                meta.insert(KEY_CLUSTER, cluster_id.as_bytes())
                    .map_err(io)?;
                match layout {
                    Layout::Single => {
                        let empty = LogMeta::default().encode();
                        meta.insert(KEY_LOG_META, empty.as_slice()).map_err(io)?;
                        txn.open_table(LOG).map_err(io)?;
                    }
                    Layout::Groups => {
                        txn.open_table(GROUP_LOG).map_err(io)?;
                        txn.open_table(GROUP_META).map_err(io)?;
                        txn.open_table(GROUP_ELECTION).map_err(io)?;
                    }
                }
                false
            }
        }
    };
    if stamped {
        txn.abort().map_err(io)
    } else {
        txn.commit().map_err(io)
    }
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
                "the directory holds the logs of many groups: open it with RedbGroups".into(),
            ))
        }
        (Layout::Groups, v) if v <= FORMAT_VERSION => {
            return Err(StorageError::Incompatible(
                "the directory holds a single log: open it with RedbStore".into(),
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

/// The writer thread: takes every queued write of every log, commits them in one transaction,
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

fn commit_group(shared: &Shared, group: &[Request]) -> Result<(), StorageError> {
    let mut txn = shared.db.begin_write().map_err(io)?;
    match shared.options.commit_mode {
        CommitMode::Immediate => {}
        CommitMode::TwoPhase => txn.set_two_phase_commit(true),
        CommitMode::QuickRepair => txn.set_quick_repair(true),
    }
    apply_group(&txn, shared.layout, group)?;
    if shared.fail_next_write.swap(false, Ordering::SeqCst) {
        txn.abort().map_err(io)?;
        return Err(io_msg("injected write failure".into()));
    }
    shared.syncs.fetch_add(1, Ordering::SeqCst);
    txn.commit().map_err(io)
}

fn apply_group(
    txn: &WriteTransaction,
    layout: Layout,
    group: &[Request],
) -> Result<(), StorageError> {
    let mut log = write_log(txn, layout)?;
    let mut state = StateTables::open(txn, layout)?;
    // The last bookkeeping of each log, written once at the end.
    let mut metas = std::collections::HashMap::new();
    for request in group {
        let keys = request.group.keys;
        match (&request.op, &request.meta) {
            (Op::Append(batches), _) => {
                for (base, value) in batches {
                    log.insert(keys, *base, value)?;
                }
            }
            (Op::Truncate, Some(meta)) => truncate(&mut log, keys, meta.end)?,
            (Op::Purge, Some(meta)) => purge(&mut log, keys, meta)?,
            (Op::Reset, Some(_)) => log.remove_range(keys, Offset(0), Offset(u64::MAX))?,
            (Op::Save(election), _) => {
                state.save_election(keys, &encode_election_state(election))?
            }
            (Op::Create, _) => {}
            (Op::Drop, _) => {
                metas.remove(&keys);
                log.remove_range(keys, Offset(0), Offset(u64::MAX))?;
                state.remove(keys)?;
            }
            (Op::Truncate | Op::Purge | Op::Reset, None) => {
                return Err(io_msg("a log write without its bookkeeping".into()));
            }
        }
        if let Some(meta) = &request.meta {
            metas.insert(keys, meta);
        }
    }
    for (keys, meta) in metas {
        state.save_meta(keys, &meta.encode())?;
    }
    Ok(())
}

/// The bookkeeping and election tables of a write transaction.
enum StateTables<'t> {
    Single(redb::Table<'t, &'static str, &'static [u8]>),
    Groups(
        redb::Table<'t, u64, &'static [u8]>,
        redb::Table<'t, u64, &'static [u8]>,
    ),
}

impl<'t> StateTables<'t> {
    fn open(txn: &'t WriteTransaction, layout: Layout) -> Result<Self, StorageError> {
        Ok(match layout {
            Layout::Single => StateTables::Single(txn.open_table(META).map_err(io)?),
            Layout::Groups => StateTables::Groups(
                txn.open_table(GROUP_META).map_err(io)?,
                txn.open_table(GROUP_ELECTION).map_err(io)?,
            ),
        })
    }

    fn put(&mut self, keys: Keys, election: bool, value: &[u8]) -> Result<(), StorageError> {
        let name = if election { KEY_ELECTION } else { KEY_LOG_META };
        match (self, keys) {
            (StateTables::Single(t), Keys::Single) => t.insert(name, value).map(drop),
            (StateTables::Groups(m, e), Keys::Group(g)) => {
                let table = if election { e } else { m };
                table.insert(g, value).map(drop)
            }
            _ => return Err(io_msg("a log of the other layout".into())),
        }
        .map_err(io)
    }

    fn save_meta(&mut self, keys: Keys, value: &[u8]) -> Result<(), StorageError> {
        self.put(keys, false, value)
    }

    fn save_election(&mut self, keys: Keys, value: &[u8]) -> Result<(), StorageError> {
        self.put(keys, true, value)
    }

    fn remove(&mut self, keys: Keys) -> Result<(), StorageError> {
        match (self, keys) {
            (StateTables::Groups(m, e), Keys::Group(g)) => {
                m.remove(g).map_err(io)?;
                e.remove(g).map_err(io)?;
                Ok(())
            }
            _ => Err(io_msg("only a group can be dropped".into())),
        }
    }
}

/// Removes every record at or after `end`: whole batches past it, and the tail of the batch it
/// cuts into.
fn truncate(log: &mut WriteLog<'_>, keys: Keys, end: Offset) -> Result<(), StorageError> {
    log.remove_range(keys, end, Offset(u64::MAX))?;
    if let Some((base, value)) = log.last_below(keys, end)? {
        let keep = batch_prefix_len(&value, base, end)?;
        if keep < value.len() {
            log.insert(keys, base, &value[..keep])?;
        }
    }
    Ok(())
}

/// Removes the batches that hold only records before `meta.start`; the batch holding the start
/// stays.
fn purge(log: &mut WriteLog<'_>, keys: Keys, meta: &LogMeta) -> Result<(), StorageError> {
    let keep_from = if meta.start == meta.end {
        meta.start
    } else {
        match log.holding(keys, meta.start)? {
            Some(base) => base,
            None => return Ok(()),
        }
    };
    log.remove_range(keys, Offset(0), keep_from)
}

/// Flips a bit of the stored record at `offset` of the log at `keys` in the directory `dir`
/// (not open).
pub(crate) fn corrupt(
    dir: &Path,
    layout: Layout,
    keys: Keys,
    offset: Offset,
) -> Result<(), StorageError> {
    let db = Database::create(dir.join(FILE_NAME)).map_err(io)?;
    let txn = db.begin_write().map_err(io)?;
    {
        let mut log = write_log(&txn, layout)?;
        let (base, value) = log
            .last_below(keys, Offset(offset.0.saturating_add(1)))?
            .ok_or_else(|| StorageError::Invalid(format!("no record at {offset}")))?;
        let changed = corrupt_in_batch(&value, base, offset)?;
        log.insert(keys, base, &changed)?;
    }
    txn.commit().map_err(io)
}
