//! One log inside an [`Engine`]: its accepted bookkeeping and the [`LogStore`] and
//! [`ElectionStore`] calls of [`FjallStore`], which queue writes for the engine's writer
//! thread and wait for the persist that makes them durable.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use raft_core::io::{ElectionStore, LogState, LogStore, StorageError};
use raft_core::stored::{check_read, decode_election_state, encode_batches, LogMeta};
use raft_core::{ElectionState, Offset, OffsetAndEpoch, Record};
use tokio::sync::{oneshot, watch};

use crate::engine::{io_msg, lock, Engine, Keys, Op, Request};
use crate::FjallStore;

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

    /// Queues a write of this log and waits for the writer thread to persist it. `prepare`
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
impl LogStore for FjallStore {
    async fn state(&self) -> Result<LogState, StorageError> {
        self.engine.check_poisoned()?;
        Ok(lock(&self.core.accepted).meta.state())
    }

    async fn append(&self, records: &[Record]) -> Result<(), StorageError> {
        if records.is_empty() {
            return self.engine.check_poisoned();
        }
        let batches = encode_batches(records, self.engine.batch_value_bytes_max());
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
            // Part of the range is still being persisted: wait for the writer to get there.
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
                let previous_start = meta.start;
                meta.apply_purge(start);
                Ok((Op::Purge { previous_start }, true))
            })
            .await
    }

    async fn reset(&self, start: OffsetAndEpoch) -> Result<(), StorageError> {
        self.core
            .submit(&self.engine, 64, |meta| {
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
