//! One incarnation's view of a host's durable stores: the in-memory log and election store
//! behind a switch that the crash turns off. A write that reaches the store before the crash is
//! durable (the in-memory stores apply a call at once); one still queued in the driver's log or
//! election writer when the process dies never lands, as on a real disk.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use async_trait::async_trait;

use crate::io::{ElectionStore, LogState, LogStore, StorageError};
use crate::mem::{MemElectionStore, MemLog};
use crate::types::{ElectionState, Offset, OffsetAndEpoch, Record};

/// The stores as one incarnation sees them; dead once `alive` is cleared.
pub(super) struct Disk {
    pub(super) log: Arc<MemLog>,
    pub(super) election: Arc<MemElectionStore>,
    pub(super) alive: Arc<AtomicBool>,
}

impl Disk {
    fn check(&self) -> Result<(), StorageError> {
        if self.alive.load(Ordering::SeqCst) {
            Ok(())
        } else {
            Err(StorageError::Poisoned("the process crashed".into()))
        }
    }
}

#[async_trait]
impl LogStore for Disk {
    async fn state(&self) -> Result<LogState, StorageError> {
        self.check()?;
        self.log.state().await
    }

    async fn append(&self, records: &[Record]) -> Result<(), StorageError> {
        self.check()?;
        self.log.append(records).await
    }

    async fn read(
        &self,
        from: Offset,
        to: Offset,
        max_bytes: u64,
    ) -> Result<Vec<Record>, StorageError> {
        self.check()?;
        self.log.read(from, to, max_bytes).await
    }

    async fn truncate(&self, end: Offset) -> Result<(), StorageError> {
        self.check()?;
        self.log.truncate(end).await
    }

    async fn purge(&self, start: Offset) -> Result<(), StorageError> {
        self.check()?;
        self.log.purge(start).await
    }

    async fn reset(&self, start: OffsetAndEpoch) -> Result<(), StorageError> {
        self.check()?;
        self.log.reset(start).await
    }
}

#[async_trait]
impl ElectionStore for Disk {
    async fn load(&self) -> Result<Option<ElectionState>, StorageError> {
        self.check()?;
        self.election.load().await
    }

    async fn save(&self, state: &ElectionState) -> Result<(), StorageError> {
        self.check()?;
        self.election.save(state).await
    }
}
