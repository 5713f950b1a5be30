//! One log inside an [`Engine`]: its accepted bookkeeping and the [`LogStore`] and
//! [`ElectionStore`] calls of [`RedbStore`], which queue writes for the engine's writer
//! thread and wait for the commit that makes them durable; and how an append is cut into
//! values that fit redb's pages.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use raft_core::io::{ElectionStore, LogState, LogStore, StorageError};
use raft_core::stored::{check_read, decode_election_state, encode_batches, LogMeta};
use raft_core::{ElectionState, Offset, OffsetAndEpoch, Record};
use tokio::sync::{oneshot, watch};

use crate::engine::{io_msg, lock, Engine, Keys, Op, Request};
use crate::RedbStore;

/// What callers of one log have been promised: every accepted write, in order.
struct Accepted {
    meta: LogMeta,
    seq: u64,
}

/// The state of one log the writer thread and the store handles share.
pub(crate) struct GroupCore {
    pub(crate) keys: Keys,
    accepted: Mutex<Accepted>,
    /// The sequence number of the last write of this log the writer finished (committed or
    /// failed).
    finished: watch::Sender<u64>,
    /// The end offset as of the last commit: reads below it never wait.
    committed_end: AtomicU64,
}

impl GroupCore {
    /// A log at `keys` whose durable bookkeeping is `meta`.
    pub(crate) fn new(keys: Keys, meta: LogMeta) -> Arc<GroupCore> {
        Arc::new(GroupCore {
            keys,
            committed_end: AtomicU64::new(meta.end.0),
            accepted: Mutex::new(Accepted { meta, seq: 0 }),
            finished: watch::Sender::new(0),
        })
    }

    /// The writer committed a write of this log that leaves it ending at `end`.
    pub(crate) fn committed(&self, end: Offset) {
        self.committed_end.store(end.0, Ordering::SeqCst);
    }

    /// The writer finished write `seq` of this log.
    pub(crate) fn finished(&self, seq: u64) {
        self.finished.send_replace(seq);
    }

    /// Queues a write of this log and waits for the writer thread to commit it. `prepare`
    /// checks the call against the accepted bookkeeping, updates it and builds the op; it runs
    /// under the same lock as the send, so the queue order of one log is its acceptance order.
    pub(crate) async fn submit(
        self: &Arc<Self>,
        engine: &Engine,
        bytes: usize,
        prepare: impl FnOnce(&mut LogMeta) -> Result<(Op, bool), StorageError>,
    ) -> Result<(), StorageError> {
        engine.check_poisoned()?;
        let (done, wait) = oneshot::channel();
        {
            let mut acc = lock(&self.accepted);
            let (op, logged) = prepare(&mut acc.meta)?;
            acc.seq += 1;
            engine.send(Request {
                group: self.clone(),
                meta: logged.then(|| acc.meta.clone()),
                op,
                seq: acc.seq,
                bytes,
                done,
            })?;
        }
        match wait.await {
            Ok(result) => result,
            Err(_) => Err(StorageError::Poisoned(
                "the writer thread has stopped".into(),
            )),
        }
    }
}

#[async_trait]
impl LogStore for RedbStore {
    async fn state(&self) -> Result<LogState, StorageError> {
        self.engine.check_poisoned()?;
        Ok(lock(&self.core.accepted).meta.state())
    }

    async fn append(&self, records: &[Record]) -> Result<(), StorageError> {
        if records.is_empty() {
            return self.engine.check_poisoned();
        }
        let batches = page_fitted_batches(records, self.engine.batch_value_bytes_max());
        let bytes = batches.iter().map(|(_, v)| v.len()).sum();
        self.core
            .submit(&self.engine, bytes, move |meta| {
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
        self.engine.check_poisoned()?;
        let (to, seq) = {
            let acc = lock(&self.core.accepted);
            (check_read(&acc.meta, from, to)?, acc.seq)
        };
        if to.0 > self.core.committed_end.load(Ordering::SeqCst) {
            // Part of the range is still being commited: wait for the writer to get there.
            let mut finished = self.core.finished.subscribe();
            // The sender lives in the core, which this store holds, so it cannot be dropped.
            let _ = finished.wait_for(|&done| done >= seq).await;
            self.engine.check_poisoned()?;
        }
        self.engine
            .read_committed(self.core.keys, from, to, max_bytes)
    }

    async fn truncate(&self, end: Offset) -> Result<(), StorageError> {
        self.core
            .submit(&self.engine, 64, |meta| {
                meta.check_truncate(end)?;
                meta.apply_truncate(end);
                Ok((Op::Truncate, true))
            })
            .await
    }

    async fn purge(&self, start: Offset) -> Result<(), StorageError> {
        self.core
            .submit(&self.engine, 64, |meta| {
                meta.check_purge(start)?;
                meta.apply_purge(start);
                Ok((Op::Purge, true))
            })
            .await
    }

    async fn reset(&self, start: OffsetAndEpoch) -> Result<(), StorageError> {
        self.core
            .submit(&self.engine, 64, |meta| {
                meta.apply_reset(start);
                Ok((Op::Reset, true))
            })
            .await
    }
}

#[async_trait]
impl ElectionStore for RedbStore {
    async fn load(&self) -> Result<Option<ElectionState>, StorageError> {
        self.engine.check_poisoned()?;
        let Some(value) = self.engine.load_election(self.core.keys)? else {
            return Ok(None);
        };
        decode_election_state(&value)
            .map(Some)
            .map_err(|e| io_msg(format!("the election state is unreadable: {e}")))
    }

    async fn save(&self, state: &ElectionState) -> Result<(), StorageError> {
        let state = *state;
        self.core
            .submit(&self.engine, 32, move |_| Ok((Op::Save(state), false)))
            .await
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use raft_core::stored::decode_part;
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
