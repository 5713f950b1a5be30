//! An in-memory log ([`MemLog`]), election store ([`MemElectionStore`]) and snapshot store
//! ([`MemSnapshots`]), plus the log
//! bookkeeping every backend shares ([`LogMeta`]) and the helpers that store records as batches
//! of codec-encoded bytes.
//!
//! The in-memory stores keep exactly what a disk backend keeps (batches of encoded records with
//! their checksums, the log's bounds and epoch history), so the conformance suite in
//! `raft_core::testing::storage` exercises the same rules on them as on redb and fjall. They have
//! no crash model: everything a call accepted stays until the last handle is dropped. Every
//! handle can be "reopened" (a new handle over the same data) to play a restart.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use bytes::{BufMut, Bytes, BytesMut};

use crate::codec::{decode_record, encode_record, DecodeError, RECORD_HEADER_LEN};
use crate::io::{
    ElectionStore, EpochStart, LogState, LogStore, SnapshotMeta, SnapshotStore, StorageError,
};
use crate::types::{ElectionState, Epoch, Offset, OffsetAndEpoch, Record, ReplicaId};

/// The version of the [`LogMeta`] and election-state encodings.
pub const META_FORMAT_VERSION: u8 = 1;

/// The largest payload a stored record may declare; larger lengths are treated as corruption.
pub const STORED_PAYLOAD_MAX: usize = u32::MAX as usize;

/// The bounds and epoch history of a log: what a backend keeps in a key of its own so that
/// opening never scans the records.
///
/// Invariants: `start <= end`; `epochs` is ascending by epoch and by start, every start lies in
/// `[start, end)`, the first entry (if any) starts at `start`; `end_epoch` is the epoch of record
/// `end - 1`, or `base_epoch` when the log is empty; `base_epoch` is the epoch of record
/// `start - 1` (0 when nothing was ever purged).
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct LogMeta {
    /// The first offset present.
    pub start: Offset,
    /// The end offset (exclusive).
    pub end: Offset,
    /// The epoch of the last record, or `base_epoch` when the log is empty.
    pub end_epoch: Epoch,
    /// The epoch of the record just before `start`.
    pub base_epoch: Epoch,
    /// Where each epoch present in `[start, end)` starts.
    pub epochs: Vec<EpochStart>,
}

impl LogMeta {
    /// The state the driver sees.
    pub fn state(&self) -> LogState {
        LogState {
            start: self.start,
            end: OffsetAndEpoch::new(self.end, self.end_epoch),
            epochs: self.epochs.clone(),
            start_epoch: self.base_epoch,
        }
    }

    /// The epoch of the record at `offset`, which must lie in `[start, end)`.
    pub fn epoch_at(&self, offset: Offset) -> Option<Epoch> {
        if offset < self.start || offset >= self.end {
            return None;
        }
        let idx = self.epochs.partition_point(|e| e.start <= offset);
        idx.checked_sub(1).map(|i| self.epochs[i].epoch)
    }

    /// Checks that `records` may be appended: they start at `end`, are contiguous, carry no
    /// epoch 0 and never go back in epoch.
    pub fn check_append(&self, records: &[Record]) -> Result<(), StorageError> {
        let mut expected = self.end;
        let mut epoch = self.end_epoch;
        for r in records {
            if r.offset != expected {
                return Err(StorageError::Invalid(format!(
                    "append at offset {} but the log ends at {expected}",
                    r.offset
                )));
            }
            if r.epoch == Epoch::ZERO || r.epoch < epoch {
                return Err(StorageError::Invalid(format!(
                    "record {} has epoch {} after epoch {epoch}",
                    r.offset, r.epoch
                )));
            }
            if r.payload.len() > STORED_PAYLOAD_MAX {
                return Err(StorageError::Invalid(format!(
                    "record {} is too large",
                    r.offset
                )));
            }
            expected = expected.next();
            epoch = r.epoch;
        }
        Ok(())
    }

    /// Applies an append that [`LogMeta::check_append`] accepted.
    pub fn apply_append(&mut self, records: &[Record]) {
        for r in records {
            assert_eq!(r.offset, self.end, "appended records are contiguous");
            if self.epochs.last().is_none_or(|e| e.epoch != r.epoch) {
                self.epochs.push(EpochStart {
                    epoch: r.epoch,
                    start: r.offset,
                });
            }
            self.end = self.end.next();
            self.end_epoch = r.epoch;
        }
    }

    /// Checks a truncation to `end`: it may not cut into the purged prefix.
    pub fn check_truncate(&self, end: Offset) -> Result<(), StorageError> {
        if end < self.start {
            return Err(StorageError::Invalid(format!(
                "truncate to {end} is below the log start {}",
                self.start
            )));
        }
        Ok(())
    }

    /// Applies a checked truncation (a no-op when `end` is at or past the end).
    pub fn apply_truncate(&mut self, end: Offset) {
        if end >= self.end {
            return;
        }
        assert!(end >= self.start, "truncation stays inside the log");
        self.epochs.retain(|e| e.start < end);
        self.end = end;
        self.end_epoch = match end.0.checked_sub(1).map(Offset) {
            Some(last) if last >= self.start => self
                .epoch_at(last)
                .expect("every offset in the log has an epoch"),
            _ => self.base_epoch,
        };
    }

    /// Checks a purge to `start`: it may not go past the end.
    pub fn check_purge(&self, start: Offset) -> Result<(), StorageError> {
        if start > self.end {
            return Err(StorageError::Invalid(format!(
                "purge to {start} is past the log end {}",
                self.end
            )));
        }
        Ok(())
    }

    /// Applies a checked purge (a no-op when `start` is at or before the start).
    pub fn apply_purge(&mut self, start: Offset) {
        if start <= self.start {
            return;
        }
        assert!(start <= self.end, "purge stays inside the log");
        // `start - 1` is inside the old log because `start > self.start`.
        let before = Offset(start.0 - 1);
        self.base_epoch = self
            .epoch_at(before)
            .expect("every offset in the log has an epoch");
        if start == self.end {
            self.epochs.clear();
        } else {
            let idx = self.epochs.partition_point(|e| e.start <= start) - 1;
            self.epochs.drain(..idx);
            self.epochs[0].start = start;
        }
        self.start = start;
    }

    /// Empties the log and restarts it at `start.offset`, the record before which has epoch
    /// `start.epoch` (installing a snapshot).
    pub fn apply_reset(&mut self, start: OffsetAndEpoch) {
        self.start = start.offset;
        self.end = start.offset;
        self.end_epoch = start.epoch;
        self.base_epoch = start.epoch;
        self.epochs.clear();
    }

    /// Encodes the bookkeeping with a format version and a checksum.
    pub fn encode(&self) -> Vec<u8> {
        let mut body = Vec::with_capacity(1 + 8 + 8 + 4 + 4 + 4 + self.epochs.len() * 12);
        body.put_u8(META_FORMAT_VERSION);
        body.put_u64_le(self.start.0);
        body.put_u64_le(self.end.0);
        body.put_u32_le(self.end_epoch.0);
        body.put_u32_le(self.base_epoch.0);
        body.put_u32_le(self.epochs.len() as u32);
        for e in &self.epochs {
            body.put_u32_le(e.epoch.0);
            body.put_u64_le(e.start.0);
        }
        seal(body)
    }

    /// Decodes what [`LogMeta::encode`] wrote, checking the checksum, the version and the
    /// invariants.
    pub fn decode(bytes: &[u8]) -> Result<LogMeta, DecodeError> {
        let mut r = Reader(unseal(bytes)?);
        let start = Offset(r.u64()?);
        let end = Offset(r.u64()?);
        let end_epoch = Epoch(r.u32()?);
        let base_epoch = Epoch(r.u32()?);
        let count = r.u32()? as usize;
        if count > r.0.len() / 12 {
            return Err(DecodeError::Truncated {
                needed: count * 12 - r.0.len(),
            });
        }
        let mut epochs = Vec::with_capacity(count);
        for _ in 0..count {
            let epoch = Epoch(r.u32()?);
            epochs.push(EpochStart {
                epoch,
                start: Offset(r.u64()?),
            });
        }
        r.finish()?;
        let meta = LogMeta {
            start,
            end,
            end_epoch,
            base_epoch,
            epochs,
        };
        if !meta.is_consistent() {
            return Err(DecodeError::InvalidValue {
                what: "log bookkeeping",
                value: start.0,
            });
        }
        Ok(meta)
    }

    fn is_consistent(&self) -> bool {
        let ascending = self
            .epochs
            .windows(2)
            .all(|w| w[0].epoch < w[1].epoch && w[0].start < w[1].start);
        let inside = self
            .epochs
            .iter()
            .all(|e| e.start >= self.start && e.start < self.end);
        let first = self.epochs.first().is_none_or(|e| e.start == self.start);
        let covered = (self.start == self.end) == self.epochs.is_empty();
        self.start <= self.end && ascending && inside && first && covered
    }
}

/// Encodes an election state with a format version and a checksum.
pub fn encode_election_state(state: &ElectionState) -> Vec<u8> {
    let mut body = Vec::with_capacity(1 + 4 + 2 * 5);
    body.put_u8(META_FORMAT_VERSION);
    body.put_u32_le(state.epoch.0);
    for id in [state.voted_for, state.leader] {
        match id {
            Some(ReplicaId(v)) => {
                body.put_u8(1);
                body.put_u32_le(v);
            }
            None => {
                body.put_u8(0);
                body.put_u32_le(0);
            }
        }
    }
    seal(body)
}

/// Decodes what [`encode_election_state`] wrote.
pub fn decode_election_state(bytes: &[u8]) -> Result<ElectionState, DecodeError> {
    let mut r = Reader(unseal(bytes)?);
    let epoch = Epoch(r.u32()?);
    let mut ids = [None, None];
    for id in &mut ids {
        let tag = r.u8()?;
        let v = r.u32()?;
        *id = match tag {
            0 => None,
            1 => Some(ReplicaId(v)),
            other => {
                return Err(DecodeError::InvalidValue {
                    what: "replica tag",
                    value: other as u64,
                })
            }
        };
    }
    r.finish()?;
    Ok(ElectionState {
        epoch,
        voted_for: ids[0],
        leader: ids[1],
    })
}

/// Prefixes `body` (whose first byte is the version) with its CRC-32.
fn seal(body: Vec<u8>) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + body.len());
    out.put_u32_le(crc32fast::hash(&body));
    out.extend_from_slice(&body);
    out
}

/// Checks the CRC-32 and the version written by [`seal`]; returns the bytes after the version.
fn unseal(bytes: &[u8]) -> Result<&[u8], DecodeError> {
    if bytes.len() < 5 {
        return Err(DecodeError::Truncated {
            needed: 5 - bytes.len(),
        });
    }
    let stored = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    let computed = crc32fast::hash(&bytes[4..]);
    if stored != computed {
        return Err(DecodeError::Checksum { stored, computed });
    }
    if bytes[4] != META_FORMAT_VERSION {
        return Err(DecodeError::UnsupportedVersion {
            what: "storage metadata",
            found: bytes[4],
            supported: META_FORMAT_VERSION,
        });
    }
    Ok(&bytes[5..])
}

/// A little-endian cursor over a byte slice.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        if self.0.len() < N {
            return Err(DecodeError::Truncated {
                needed: N - self.0.len(),
            });
        }
        let mut out = [0u8; N];
        out.copy_from_slice(&self.0[..N]);
        self.0 = &self.0[N..];
        Ok(out)
    }
    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take::<1>()?[0])
    }
    fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.take()?))
    }
    fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.take()?))
    }
    fn finish(self) -> Result<(), DecodeError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::Trailing(self.0.len()))
        }
    }
}

/// Encodes `records` into stored batches: each value holds consecutive encoded records and is
/// keyed by the offset of its first record. A value is closed once it reaches `value_bytes_max`
/// (a single larger record gets a value of its own).
pub fn encode_batches(records: &[Record], value_bytes_max: usize) -> Vec<(Offset, Bytes)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < records.len() {
        let base = records[i].offset;
        let mut size = 0;
        let mut j = i;
        while j < records.len() && (j == i || size + records[j].encoded_len() <= value_bytes_max) {
            size += records[j].encoded_len();
            j += 1;
        }
        let mut buf = BytesMut::with_capacity(size);
        for r in &records[i..j] {
            encode_record(r, &mut buf);
        }
        debug_assert_eq!(buf.len(), size);
        out.push((base, buf.freeze()));
        i = j;
    }
    out
}

/// A byte limit for one read: records are admitted while they fit, and the first always is.
#[derive(Clone, Copy, Debug)]
pub struct ReadBudget {
    /// The limit.
    pub max_bytes: u64,
    /// Encoded bytes admitted so far.
    pub used: u64,
    /// Records admitted so far.
    pub records: u64,
    /// Set once a record was refused: the read is over.
    pub exhausted: bool,
}

impl ReadBudget {
    /// A fresh budget of `max_bytes`.
    pub fn new(max_bytes: u64) -> Self {
        ReadBudget {
            max_bytes,
            used: 0,
            records: 0,
            exhausted: false,
        }
    }

    fn admit(&mut self, len: u64) -> bool {
        if self.records > 0 && self.used.saturating_add(len) > self.max_bytes {
            self.exhausted = true;
            return false;
        }
        self.used += len;
        self.records += 1;
        true
    }
}

/// The part of one stored batch a read wants.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct BatchPart {
    /// Byte range inside the batch value.
    pub bytes: Range<usize>,
    /// Offset of the first record in the range.
    pub first: Offset,
    /// Records in the range.
    pub count: u64,
    /// The offset after the last record of the whole batch (where the next batch starts).
    pub batch_end: Option<Offset>,
}

/// Finds the records of `[from, to)` inside the stored batch `value` whose first record is
/// `base`, admitting them into `budget`. Only the record headers are looked at (no checksum and
/// no copy); [`decode_part`] checks every record it returns.
///
/// `batch_end` is filled in only when the whole batch was walked.
pub fn locate_in_batch(
    value: &[u8],
    base: Offset,
    from: Offset,
    to: Offset,
    budget: &mut ReadBudget,
) -> Result<BatchPart, StorageError> {
    let mut pos = 0usize;
    let mut offset = base;
    let mut part = BatchPart {
        bytes: 0..0,
        first: from.max(base),
        count: 0,
        batch_end: None,
    };
    while pos < value.len() {
        if offset >= to || budget.exhausted {
            return Ok(part);
        }
        let len = stored_record_len(&value[pos..], offset)?;
        if offset >= from {
            if !budget.admit(len as u64) {
                return Ok(part);
            }
            if part.count == 0 {
                part.bytes = pos..pos;
            }
            part.bytes.end = pos + len;
            part.count += 1;
        }
        pos += len;
        offset = offset.next();
    }
    part.batch_end = Some(offset);
    Ok(part)
}

/// The byte length of the stored batch prefix holding the records before `end`.
pub fn batch_prefix_len(value: &[u8], base: Offset, end: Offset) -> Result<usize, StorageError> {
    let mut pos = 0usize;
    let mut offset = base;
    while pos < value.len() && offset < end {
        pos += stored_record_len(&value[pos..], offset)?;
        offset = offset.next();
    }
    Ok(pos)
}

/// The encoded length of the record at the front of `rest`, read from its header.
fn stored_record_len(rest: &[u8], offset: Offset) -> Result<usize, StorageError> {
    if rest.len() < RECORD_HEADER_LEN {
        let needed = RECORD_HEADER_LEN - rest.len();
        return Err(StorageError::Corrupt {
            offset,
            source: DecodeError::Truncated { needed },
        });
    }
    let len = u32::from_le_bytes([rest[18], rest[19], rest[20], rest[21]]) as usize;
    let total = RECORD_HEADER_LEN + len;
    if rest.len() < total {
        let needed = total - rest.len();
        return Err(StorageError::Corrupt {
            offset,
            source: DecodeError::Truncated { needed },
        });
    }
    Ok(total)
}

/// Decodes `count` records starting at `first` from `bytes` (the part [`locate_in_batch`]
/// found, shared so payloads are zero-copy slices of it), checking each checksum and offset.
pub fn decode_part(
    bytes: Bytes,
    first: Offset,
    count: u64,
    out: &mut Vec<Record>,
) -> Result<(), StorageError> {
    let mut rest = bytes;
    let mut offset = first;
    for _ in 0..count {
        let (record, used) = decode_record(&rest, STORED_PAYLOAD_MAX)
            .map_err(|source| StorageError::Corrupt { offset, source })?;
        if record.offset != offset {
            let source = DecodeError::InvalidValue {
                what: "record offset",
                value: record.offset.0,
            };
            return Err(StorageError::Corrupt { offset, source });
        }
        out.push(record);
        rest = rest.slice(used..);
        offset = offset.next();
    }
    if !rest.is_empty() {
        return Err(StorageError::Corrupt {
            offset,
            source: DecodeError::Trailing(rest.len()),
        });
    }
    Ok(())
}

/// Checks the bounds of a read against `meta` and clamps `to` to the end of the log.
pub fn check_read(meta: &LogMeta, from: Offset, to: Offset) -> Result<Offset, StorageError> {
    if from < meta.start || from > meta.end {
        return Err(StorageError::Invalid(format!(
            "read from {from} outside the log [{}, {})",
            meta.start, meta.end
        )));
    }
    Ok(to.min(meta.end))
}

/// Flips one payload bit (or, for an empty payload, one header bit) of the record at `offset`
/// inside a stored batch: the fault-injection hook of every backend.
pub fn corrupt_in_batch(
    value: &[u8],
    base: Offset,
    offset: Offset,
) -> Result<Vec<u8>, StorageError> {
    let pos = batch_prefix_len(value, base, offset)?;
    let len = stored_record_len(&value[pos..], offset)?;
    let mut out = value.to_vec();
    let at = if len > RECORD_HEADER_LEN {
        pos + RECORD_HEADER_LEN
    } else {
        pos + 6
    };
    out[at] ^= 0x01;
    Ok(out)
}

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
        let mut complete = lock(&self.complete);
        complete.retain(|(m, _)| m.id != meta.id);
        complete.push((meta, data));
        complete.sort_by_key(|(m, _)| m.id);
        let excess = complete.len().saturating_sub(MEM_SNAPSHOTS_KEPT);
        complete.drain(..excess);
    }

    fn find(&self, id: OffsetAndEpoch) -> Option<(SnapshotMeta, Bytes)> {
        lock(&self.complete)
            .iter()
            .find(|(m, _)| m.id == id)
            .cloned()
    }
}

#[async_trait]
impl SnapshotStore for MemSnapshots {
    async fn latest(&self) -> Result<Option<SnapshotMeta>, StorageError> {
        Ok(lock(&self.complete).last().map(|(m, _)| *m))
    }

    async fn save(&self, id: OffsetAndEpoch, data: Bytes) -> Result<SnapshotMeta, StorageError> {
        let meta = SnapshotMeta::of(id, &data);
        self.insert(meta, data);
        Ok(meta)
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

    async fn load(&self, id: OffsetAndEpoch) -> Result<Option<Bytes>, StorageError> {
        Ok(self.find(id).map(|(_, data)| data))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::RecordKind;

    fn rec(offset: u64, epoch: u32) -> Record {
        Record {
            offset: Offset(offset),
            epoch: Epoch(epoch),
            kind: RecordKind::Data,
            payload: Bytes::from(vec![offset as u8; 3]),
        }
    }

    #[test]
    fn meta_round_trips_and_tracks_epochs() {
        let mut m = LogMeta::default();
        let recs: Vec<Record> = (0..6).map(|o| rec(o, 1 + (o as u32) / 2)).collect();
        m.check_append(&recs).unwrap();
        m.apply_append(&recs);
        assert_eq!(m.epochs.len(), 3);
        m.apply_purge(Offset(3));
        assert_eq!(m.base_epoch, Epoch(2));
        assert_eq!(
            m.epochs[0],
            EpochStart {
                epoch: Epoch(2),
                start: Offset(3)
            }
        );
        m.apply_truncate(Offset(3));
        assert_eq!(m.end_epoch, Epoch(2));
        assert!(m.epochs.is_empty());
        assert_eq!(LogMeta::decode(&m.encode()).unwrap(), m);
    }

    #[test]
    fn election_state_round_trips() {
        let s = ElectionState {
            epoch: Epoch(9),
            voted_for: Some(ReplicaId(2)),
            leader: None,
        };
        assert_eq!(
            decode_election_state(&encode_election_state(&s)).unwrap(),
            s
        );
        let mut bad = encode_election_state(&s);
        bad[6] ^= 1;
        assert!(decode_election_state(&bad).is_err());
    }

    #[test]
    fn batches_split_at_the_value_limit() {
        let recs: Vec<Record> = (0..10).map(|o| rec(o, 1)).collect();
        let len = recs[0].encoded_len();
        let batches = encode_batches(&recs, len * 4);
        let bases: Vec<u64> = batches.iter().map(|(b, _)| b.0).collect();
        assert_eq!(bases, vec![0, 4, 8]);
    }
}
