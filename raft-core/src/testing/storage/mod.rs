//! The storage conformance suite: every promise of [`LogStore`] and [`ElectionStore`] as a named
//! check, run by [`run_all`] against fresh stores from a backend's [`StorageFixture`].
//!
//! A check panics (with the name of the promise in the message) when a backend breaks it, so a
//! backend's test is simply `run_all(builder).await`. The in-memory stores run it from raft-core's
//! own tests; redb and fjall run it from their `tests/it/main.rs`.
//!
//! One file per kind of promise: `basics` (reads, appends, truncation, purge, reopening, the
//! epoch history, the election state), `stress` (large records, concurrency, corruption,
//! contract violations, failed writes); this file the fixture, the runner and the helpers.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::Poll;

use async_trait::async_trait;
use bytes::Bytes;

use crate::io::{ElectionStore, EpochStart, LogState, LogStore, StorageError};
use crate::types::{ElectionState, Epoch, Offset, OffsetAndEpoch, Record, RecordKind, ReplicaId};

mod basics;
mod stress;

use self::basics::*;
use self::stress::*;

/// One store location, as a backend's test provides it: a way to open it (again), and the fault
/// hooks the suite needs.
///
/// The suite drops every handle it got from [`StorageFixture::open`] before it calls `open` again
/// or calls [`StorageFixture::corrupt`], as a restarted process would.
#[async_trait]
pub trait StorageFixture: Send + 'static {
    /// The log type.
    type Log: LogStore;
    /// The election-state type (may be the same type as the log).
    type Election: ElectionStore;

    /// Opens the store at this location: creates it the first time, reopens what was written
    /// by earlier handles afterwards.
    async fn open(&mut self) -> Result<(Arc<Self::Log>, Arc<Self::Election>), StorageError>;

    /// Damages the stored bytes of the record at `offset` (which exists) so that its checksum no
    /// longer matches. Called while no handle is open.
    async fn corrupt(&mut self, offset: Offset) -> Result<(), StorageError>;

    /// Arranges for the next write of `log` to fail as a failed fsync would. Returns `false` when
    /// the backend has no such hook, and the poisoning check is then skipped.
    fn fail_next_write(&self, log: &Self::Log) -> bool {
        let _ = log;
        false
    }
}

/// What [`run_all`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SuiteReport {
    /// The checks that ran and passed, in order.
    pub passed: Vec<&'static str>,
    /// The checks the fixture could not support (see [`StorageFixture::fail_next_write`]).
    pub skipped: Vec<&'static str>,
}

/// Runs every check, each on a fresh fixture from `new_fixture`, printing one line per check.
/// Panics on the first broken promise; returns which checks ran.
pub async fn run_all<F, Fut, X>(mut new_fixture: F) -> SuiteReport
where
    F: FnMut() -> Fut,
    Fut: Future<Output = X>,
    X: StorageFixture,
{
    let mut report = SuiteReport::default();
    macro_rules! checks {
        ($($name:ident),* $(,)?) => {$(
            let fixture = new_fixture().await;
            let started = std::time::Instant::now();
            if $name(fixture).await {
                println!("storage check {} ... ok ({:?})", stringify!($name), started.elapsed());
                report.passed.push(stringify!($name));
            } else {
                println!("storage check {} ... skipped", stringify!($name));
                report.skipped.push(stringify!($name));
            }
        )*};
    }
    checks!(
        empty_log,
        appends_read_back_in_order,
        reads_cross_batch_boundaries,
        reads_respect_max_bytes,
        truncate_then_reappend,
        purge_then_read,
        state_persists_across_reopen,
        epoch_history_after_truncation,
        election_state_round_trips,
        records_of_a_mebibyte_and_more,
        concurrent_readers_while_appending,
        concurrent_appends_keep_their_order,
        corrupt_record_is_detected,
        contract_violations_are_invalid,
        failed_write_poisons_the_store,
    );
    report
}

/// The payload the suite writes at `offset`: deterministic, so any reader can check it.
pub fn payload_for(offset: Offset, epoch: Epoch, len: usize) -> Bytes {
    let mut x = offset.0.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ u64::from(epoch.0) ^ len as u64;
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let take = (len - out.len()).min(8);
        out.extend_from_slice(&x.to_le_bytes()[..take]);
    }
    Bytes::from(out)
}

/// A data record at `offset` of `epoch` with a [`payload_for`] payload of `len` bytes.
pub fn record(offset: u64, epoch: u32, len: usize) -> Record {
    let (offset, epoch) = (Offset(offset), Epoch(epoch));
    Record {
        offset,
        epoch,
        kind: RecordKind::Data,
        payload: payload_for(offset, epoch, len),
    }
}

/// Records `[from, to)` of `epoch`, payloads of `len` bytes.
pub fn records(from: u64, to: u64, epoch: u32, len: usize) -> Vec<Record> {
    (from..to).map(|o| record(o, epoch, len)).collect()
}

pub(super) async fn open<X: StorageFixture>(fx: &mut X) -> (Arc<X::Log>, Arc<X::Election>) {
    match fx.open().await {
        Ok(stores) => stores,
        Err(e) => panic!("opening the store failed: {e}"),
    }
}

pub(super) async fn append(log: &impl LogStore, recs: &[Record]) {
    if let Err(e) = log.append(recs).await {
        panic!("append at {:?} failed: {e}", recs.first().map(|r| r.offset));
    }
}

pub(super) async fn read(log: &impl LogStore, from: u64, to: u64, max_bytes: u64) -> Vec<Record> {
    match log.read(Offset(from), Offset(to), max_bytes).await {
        Ok(r) => r,
        Err(e) => panic!("read [{from}, {to}) max {max_bytes} failed: {e}"),
    }
}

pub(super) async fn state(log: &impl LogStore) -> LogState {
    match log.state().await {
        Ok(s) => s,
        Err(e) => panic!("state failed: {e}"),
    }
}

pub(super) fn assert_same(got: &[Record], want: &[Record], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: record count");
    for (g, w) in got.iter().zip(want) {
        assert_eq!(g, w, "{what}: record {} differs", w.offset);
    }
}

pub(super) fn assert_invalid<T: std::fmt::Debug>(r: Result<T, StorageError>, what: &str) {
    match r {
        Err(StorageError::Invalid(_)) => {}
        other => panic!("{what}: expected StorageError::Invalid, got {other:?}"),
    }
}

pub(super) fn epochs(list: &[(u32, u64)]) -> Vec<EpochStart> {
    list.iter()
        .map(|&(e, s)| EpochStart {
            epoch: Epoch(e),
            start: Offset(s),
        })
        .collect()
}

pub(super) fn log_state(start: u64, end: u64, end_epoch: u32, list: &[(u32, u64)]) -> LogState {
    assert_eq!(
        start, 0,
        "a purged log states its start epoch: use `purged`"
    );
    purged(0, 0, end, end_epoch, list)
}

/// The state of a log whose records before `start` are gone, the last of them of epoch
/// `start_epoch`.
pub(super) fn purged(
    start: u64,
    start_epoch: u32,
    end: u64,
    end_epoch: u32,
    list: &[(u32, u64)],
) -> LogState {
    LogState {
        start: Offset(start),
        end: OffsetAndEpoch::new(Offset(end), Epoch(end_epoch)),
        epochs: epochs(list),
        start_epoch: Epoch(start_epoch),
    }
}

/// A fixture over the in-memory stores, for raft-core's own run of the suite.
pub struct MemFixture {
    log: crate::mem::MemLog,
    election: crate::mem::MemElectionStore,
}

impl MemFixture {
    /// A fixture over a new, empty in-memory log and election store.
    pub fn new() -> Self {
        MemFixture {
            log: crate::mem::MemLog::new(),
            election: crate::mem::MemElectionStore::new(),
        }
    }
}

impl Default for MemFixture {
    fn default() -> Self {
        MemFixture::new()
    }
}

#[async_trait]
impl StorageFixture for MemFixture {
    type Log = crate::mem::MemLog;
    type Election = crate::mem::MemElectionStore;

    async fn open(&mut self) -> Result<(Arc<Self::Log>, Arc<Self::Election>), StorageError> {
        Ok((
            Arc::new(self.log.reopen()),
            Arc::new(self.election.reopen()),
        ))
    }

    async fn corrupt(&mut self, offset: Offset) -> Result<(), StorageError> {
        self.log.corrupt(offset)
    }

    fn fail_next_write(&self, log: &Self::Log) -> bool {
        log.fail_next_write();
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn mem_stores_pass_the_suite() {
        let report = run_all(|| async { MemFixture::new() }).await;
        assert!(report.skipped.is_empty(), "skipped: {:?}", report.skipped);
        assert_eq!(report.passed.len(), 15);
    }
}
