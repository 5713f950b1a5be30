//! An in-memory log ([`MemLog`]), election store ([`MemElectionStore`]) and snapshot store
//! ([`MemSnapshots`]). The log bookkeeping every backend shares ([`LogMeta`]) and the helpers
//! that store records as batches of codec-encoded bytes live in [`crate::stored`] and are
//! re-exported here.
//!
//! The in-memory stores keep exactly what a disk backend keeps (batches of encoded records with
//! their checksums, the log's bounds and epoch history), so the conformance suite in
//! `raft_core::testing::storage` exercises the same rules on them as on redb and fjall. They have
//! no crash model: everything a call accepted stays until the last handle is dropped. Every
//! handle can be "reopened" (a new handle over the same data) to play a restart.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};

use crate::io::{
    ElectionStore, LogState, LogStore, SnapshotMeta, SnapshotReader, SnapshotStore, SnapshotWriter,
    StorageError,
};
use crate::types::{ElectionState, Offset, OffsetAndEpoch, Record};

// The stored form of a log lives in `stored`; the names stay here so that code written
// against this module keeps compiling.
pub use crate::stored::{
    batch_prefix_len, check_read, corrupt_in_batch, decode_election_state, decode_part,
    encode_batches, encode_election_state, locate_in_batch, BatchPart, LogMeta, ReadBudget,
    META_FORMAT_VERSION, STORED_PAYLOAD_MAX,
};

/// What an in-memory log holds.
#[derive(Debug, Default)]
struct MemLogData {
    meta: LogMeta,
    batches: BTreeMap<Offset, Bytes>,
}

/// An in-memory [`LogStore`]. Records are kept as batches of encoded records with their
/// checksums, exactly as the disk backends keep them. Cloning the data is never needed:
/// [`MemLog::reopen`] makes a new handle over the same records, as a restart would see them.
#[derive(Debug)]
pub struct MemLog {
    data: Arc<Mutex<MemLogData>>,
    poisoned: Mutex<Option<String>>,
    fail_next_write: AtomicBool,
}

impl Default for MemLog {
    fn default() -> Self {
        MemLog::new()
    }
}

/// The largest batch value the in-memory log builds.
const MEM_VALUE_BYTES_MAX: usize = 64 * 1024;

impl MemLog {
    /// A new empty log.
    pub fn new() -> Self {
        MemLog::over(Arc::new(Mutex::new(MemLogData::default())))
    }

    fn over(data: Arc<Mutex<MemLogData>>) -> Self {
        MemLog {
            data,
            poisoned: Mutex::new(None),
            fail_next_write: AtomicBool::new(false),
        }
    }

    /// A new handle over the same records, as a restarted process would find them: the
    /// poisoned flag and pending fault injections are not carried over.
    pub fn reopen(&self) -> MemLog {
        MemLog::over(self.data.clone())
    }

    /// Fault injection: the next write fails as a failed fsync would, poisoning this handle.
    pub fn fail_next_write(&self) {
        self.fail_next_write.store(true, Ordering::SeqCst);
    }

    /// Fault injection: flips a bit of the stored record at `offset` so that reading it fails
    /// its checksum.
    pub fn corrupt(&self, offset: Offset) -> Result<(), StorageError> {
        let mut data = lock(&self.data);
        let (&base, value) = data
            .batches
            .range(..=offset)
            .next_back()
            .ok_or_else(|| StorageError::Invalid(format!("no record at {offset}")))?;
        let changed = corrupt_in_batch(value, base, offset)?;
        data.batches.insert(base, Bytes::from(changed));
        Ok(())
    }

    fn check_poisoned(&self) -> Result<(), StorageError> {
        match &*lock(&self.poisoned) {
            Some(reason) => Err(StorageError::Poisoned(reason.clone())),
            None => Ok(()),
        }
    }

    /// Runs the fault injection: a write that "fails" poisons the handle.
    fn write_fault(&self) -> Result<(), StorageError> {
        if self.fail_next_write.swap(false, Ordering::SeqCst) {
            let reason = "injected write failure".to_string();
            *lock(&self.poisoned) = Some(reason.clone());
            return Err(StorageError::Io(reason.into()));
        }
        Ok(())
    }
}

/// Locks `m`, recovering the data if another thread panicked while holding it: every update
/// below is finished before it can panic, so the data is never half-changed.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[async_trait]
impl LogStore for MemLog {
    async fn state(&self) -> Result<LogState, StorageError> {
        self.check_poisoned()?;
        Ok(lock(&self.data).meta.state())
    }

    async fn append(&self, records: &[Record]) -> Result<(), StorageError> {
        self.check_poisoned()?;
        let mut data = lock(&self.data);
        data.meta.check_append(records)?;
        self.write_fault()?;
        for (base, value) in encode_batches(records, MEM_VALUE_BYTES_MAX) {
            data.batches.insert(base, value);
        }
        data.meta.apply_append(records);
        Ok(())
    }

    async fn read(
        &self,
        from: Offset,
        to: Offset,
        max_bytes: u64,
    ) -> Result<Vec<Record>, StorageError> {
        self.check_poisoned()?;
        let data = lock(&self.data);
        let to = check_read(&data.meta, from, to)?;
        let mut out = Vec::new();
        if from >= to {
            return Ok(out);
        }
        let first = data
            .batches
            .range(..=from)
            .next_back()
            .map(|(k, _)| *k)
            .unwrap_or(from);
        let mut budget = ReadBudget::new(max_bytes);
        for (&base, value) in data.batches.range(first..to) {
            let part = locate_in_batch(value, base, from, to, &mut budget)?;
            decode_part(value.slice(part.bytes), part.first, part.count, &mut out)?;
            if budget.exhausted {
                break;
            }
        }
        Ok(out)
    }

    async fn truncate(&self, end: Offset) -> Result<(), StorageError> {
        self.check_poisoned()?;
        let mut data = lock(&self.data);
        data.meta.check_truncate(end)?;
        self.write_fault()?;
        if end >= data.meta.end {
            return Ok(());
        }
        let _removed = data.batches.split_off(&end);
        if let Some((&base, value)) = data.batches.range(..end).next_back() {
            let keep = batch_prefix_len(value, base, end)?;
            let prefix = value.slice(..keep);
            data.batches.insert(base, prefix);
        }
        data.meta.apply_truncate(end);
        Ok(())
    }

    async fn purge(&self, start: Offset) -> Result<(), StorageError> {
        self.check_poisoned()?;
        let mut data = lock(&self.data);
        data.meta.check_purge(start)?;
        self.write_fault()?;
        if start <= data.meta.start {
            return Ok(());
        }
        let whole_log = start == data.meta.end;
        // The batch holding `start` stays (reads skip its purged head); all before it go.
        let keep_from = if whole_log {
            start
        } else {
            data.batches
                .range(..=start)
                .next_back()
                .map(|(k, _)| *k)
                .unwrap_or(start)
        };
        data.batches = data.batches.split_off(&keep_from);
        data.meta.apply_purge(start);
        Ok(())
    }

    async fn reset(&self, start: OffsetAndEpoch) -> Result<(), StorageError> {
        self.check_poisoned()?;
        let mut data = lock(&self.data);
        self.write_fault()?;
        data.batches.clear();
        data.meta.apply_reset(start);
        Ok(())
    }
}

/// An in-memory [`SnapshotStore`] keeping the newest two complete snapshots.
/// [`MemSnapshots::reopen`] plays a restart: complete snapshots stay, a partial download is
/// gone.
#[derive(Debug, Default)]
pub struct MemSnapshots {
    complete: Arc<Mutex<Vec<(SnapshotMeta, Bytes)>>>,
    partial: Mutex<Option<(OffsetAndEpoch, Vec<u8>)>>,
}

/// Complete snapshots the in-memory store keeps.
const MEM_SNAPSHOTS_KEPT: usize = 2;

impl MemSnapshots {
    /// An empty store.
    pub fn new() -> Self {
        MemSnapshots::default()
    }

    /// A new handle over the same complete snapshots, without the partial download.
    pub fn reopen(&self) -> MemSnapshots {
        MemSnapshots {
            complete: self.complete.clone(),
            partial: Mutex::new(None),
        }
    }

    fn insert(&self, meta: SnapshotMeta, data: Bytes) {
        insert_complete(&self.complete, meta, data);
    }

    fn find(&self, id: OffsetAndEpoch) -> Option<(SnapshotMeta, Bytes)> {
        lock(&self.complete)
            .iter()
            .find(|(m, _)| m.id == id)
            .cloned()
    }
}

/// Adds a complete snapshot, keeping the newest [`MEM_SNAPSHOTS_KEPT`].
fn insert_complete(complete: &Mutex<Vec<(SnapshotMeta, Bytes)>>, meta: SnapshotMeta, data: Bytes) {
    let mut complete = lock(complete);
    complete.retain(|(m, _)| m.id != meta.id);
    complete.push((meta, data));
    complete.sort_by_key(|(m, _)| m.id);
    let excess = complete.len().saturating_sub(MEM_SNAPSHOTS_KEPT);
    complete.drain(..excess);
}

/// A snapshot being taken into a [`MemSnapshots`].
struct MemWriter {
    complete: Arc<Mutex<Vec<(SnapshotMeta, Bytes)>>>,
    id: OffsetAndEpoch,
    data: BytesMut,
}

#[async_trait]
impl SnapshotWriter for MemWriter {
    async fn write(&mut self, chunk: Bytes) -> Result<(), StorageError> {
        self.data.extend_from_slice(&chunk);
        Ok(())
    }

    async fn finish(self: Box<Self>) -> Result<SnapshotMeta, StorageError> {
        let data = self.data.freeze();
        let meta = SnapshotMeta::of(self.id, &data);
        insert_complete(&self.complete, meta, data);
        Ok(meta)
    }
}

#[async_trait]
impl SnapshotStore for MemSnapshots {
    async fn latest(&self) -> Result<Option<SnapshotMeta>, StorageError> {
        Ok(lock(&self.complete).last().map(|(m, _)| *m))
    }

    async fn create(&self, id: OffsetAndEpoch) -> Result<Box<dyn SnapshotWriter>, StorageError> {
        Ok(Box::new(MemWriter {
            complete: self.complete.clone(),
            id,
            data: BytesMut::new(),
        }))
    }

    async fn read(
        &self,
        id: OffsetAndEpoch,
        position: u64,
        max_bytes: u32,
    ) -> Result<Option<(SnapshotMeta, Bytes)>, StorageError> {
        Ok(self
            .find(id)
            .map(|(meta, data)| (meta, snapshot_chunk(&data, position, max_bytes))))
    }

    async fn open(
        &self,
        id: OffsetAndEpoch,
    ) -> Result<Option<Box<dyn SnapshotReader>>, StorageError> {
        Ok(self.find(id).map(|(_, data)| {
            Box::new(crate::io::BytesReader::new(data)) as Box<dyn SnapshotReader>
        }))
    }

    async fn write_partial(
        &self,
        id: OffsetAndEpoch,
        position: u64,
        data: Bytes,
    ) -> Result<(), StorageError> {
        let mut partial = lock(&self.partial);
        if position == 0 {
            *partial = Some((id, Vec::new()));
        }
        match partial.as_mut() {
            Some((pid, bytes)) if *pid == id && bytes.len() as u64 == position => {
                bytes.extend_from_slice(&data);
                Ok(())
            }
            _ => Err(StorageError::Invalid(format!(
                "snapshot chunk for {id:?} at {position} does not continue the download"
            ))),
        }
    }

    async fn finish_partial(
        &self,
        id: OffsetAndEpoch,
        size: u64,
        checksum: u32,
    ) -> Result<Option<SnapshotMeta>, StorageError> {
        let Some((pid, bytes)) = lock(&self.partial).take() else {
            return Ok(None);
        };
        let meta = SnapshotMeta::of(pid, &bytes);
        if pid != id || meta.size != size || meta.checksum != checksum {
            return Ok(None);
        }
        self.insert(meta, Bytes::from(bytes));
        Ok(Some(meta))
    }
}

/// The bytes of `data` from `position`, at most `max_bytes` (empty past the end).
pub fn snapshot_chunk(data: &Bytes, position: u64, max_bytes: u32) -> Bytes {
    let len = data.len() as u64;
    let from = position.min(len) as usize;
    let to = position.saturating_add(u64::from(max_bytes)).min(len) as usize;
    data.slice(from..to)
}

/// An in-memory [`ElectionStore`]. [`MemElectionStore::reopen`] makes a new handle over the
/// same saved state, as a restart would see it.
#[derive(Debug, Default)]
pub struct MemElectionStore {
    saved: Arc<Mutex<Option<ElectionState>>>,
    poisoned: Mutex<Option<String>>,
    fail_next_write: AtomicBool,
}

impl MemElectionStore {
    /// A new store with nothing saved.
    pub fn new() -> Self {
        MemElectionStore::default()
    }

    /// A new handle over the same saved state.
    pub fn reopen(&self) -> MemElectionStore {
        MemElectionStore {
            saved: self.saved.clone(),
            poisoned: Mutex::new(None),
            fail_next_write: AtomicBool::new(false),
        }
    }

    /// Fault injection: the next save fails as a failed fsync would, poisoning this handle.
    pub fn fail_next_write(&self) {
        self.fail_next_write.store(true, Ordering::SeqCst);
    }

    fn check_poisoned(&self) -> Result<(), StorageError> {
        match &*lock(&self.poisoned) {
            Some(reason) => Err(StorageError::Poisoned(reason.clone())),
            None => Ok(()),
        }
    }
}

#[async_trait]
impl ElectionStore for MemElectionStore {
    async fn load(&self) -> Result<Option<ElectionState>, StorageError> {
        self.check_poisoned()?;
        Ok(*lock(&self.saved))
    }

    async fn save(&self, state: &ElectionState) -> Result<(), StorageError> {
        self.check_poisoned()?;
        if self.fail_next_write.swap(false, Ordering::SeqCst) {
            let reason = "injected write failure".to_string();
            *lock(&self.poisoned) = Some(reason.clone());
            return Err(StorageError::Io(reason.into()));
        }
        *lock(&self.saved) = Some(*state);
        Ok(())
    }
}
