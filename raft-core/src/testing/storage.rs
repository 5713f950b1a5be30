//! The storage conformance suite: every promise of [`LogStore`] and [`ElectionStore`] as a named
//! check, run by [`run_all`] against fresh stores from a backend's [`StorageFixture`].
//!
//! A check panics (with the name of the promise in the message) when a backend breaks it, so a
//! backend's test is simply `run_all(builder).await`. The in-memory stores run it from raft-core's
//! own tests; redb and fjall run it from their `tests/it/main.rs`.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::Poll;

use async_trait::async_trait;
use bytes::Bytes;

use crate::io::{ElectionStore, EpochStart, LogState, LogStore, StorageError};
use crate::types::{ElectionState, Epoch, Offset, OffsetAndEpoch, Record, RecordKind, ReplicaId};

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

async fn open<X: StorageFixture>(fx: &mut X) -> (Arc<X::Log>, Arc<X::Election>) {
    match fx.open().await {
        Ok(stores) => stores,
        Err(e) => panic!("opening the store failed: {e}"),
    }
}

async fn append(log: &impl LogStore, recs: &[Record]) {
    if let Err(e) = log.append(recs).await {
        panic!("append at {:?} failed: {e}", recs.first().map(|r| r.offset));
    }
}

async fn read(log: &impl LogStore, from: u64, to: u64, max_bytes: u64) -> Vec<Record> {
    match log.read(Offset(from), Offset(to), max_bytes).await {
        Ok(r) => r,
        Err(e) => panic!("read [{from}, {to}) max {max_bytes} failed: {e}"),
    }
}

async fn state(log: &impl LogStore) -> LogState {
    match log.state().await {
        Ok(s) => s,
        Err(e) => panic!("state failed: {e}"),
    }
}

fn assert_same(got: &[Record], want: &[Record], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: record count");
    for (g, w) in got.iter().zip(want) {
        assert_eq!(g, w, "{what}: record {} differs", w.offset);
    }
}

fn assert_invalid<T: std::fmt::Debug>(r: Result<T, StorageError>, what: &str) {
    match r {
        Err(StorageError::Invalid(_)) => {}
        other => panic!("{what}: expected StorageError::Invalid, got {other:?}"),
    }
}

fn epochs(list: &[(u32, u64)]) -> Vec<EpochStart> {
    list.iter()
        .map(|&(e, s)| EpochStart {
            epoch: Epoch(e),
            start: Offset(s),
        })
        .collect()
}

fn log_state(start: u64, end: u64, end_epoch: u32, list: &[(u32, u64)]) -> LogState {
    assert_eq!(
        start, 0,
        "a purged log states its start epoch: use `purged`"
    );
    purged(0, 0, end, end_epoch, list)
}

/// The state of a log whose records before `start` are gone, the last of them of epoch
/// `start_epoch`.
fn purged(start: u64, start_epoch: u32, end: u64, end_epoch: u32, list: &[(u32, u64)]) -> LogState {
    LogState {
        start: Offset(start),
        end: OffsetAndEpoch::new(Offset(end), Epoch(end_epoch)),
        epochs: epochs(list),
        start_epoch: Epoch(start_epoch),
    }
}

/// A new store is empty, reads of nothing return nothing, and no election state is saved.
async fn empty_log<X: StorageFixture>(mut fx: X) -> bool {
    let (log, election) = open(&mut fx).await;
    assert_eq!(
        state(&*log).await,
        LogState::default(),
        "empty_log: state of a new log"
    );
    assert!(
        read(&*log, 0, 0, u64::MAX).await.is_empty(),
        "empty_log: empty range"
    );
    assert!(
        read(&*log, 0, 10, u64::MAX).await.is_empty(),
        "empty_log: range past the end"
    );
    assert_eq!(
        election.load().await.ok(),
        Some(None),
        "empty_log: nothing saved yet"
    );
    drop((log, election));
    let (log, _election) = open(&mut fx).await;
    assert_eq!(
        state(&*log).await,
        LogState::default(),
        "empty_log: reopened empty log"
    );
    true
}

/// Batches of different sizes read back in order, byte for byte.
async fn appends_read_back_in_order<X: StorageFixture>(mut fx: X) -> bool {
    let (log, _election) = open(&mut fx).await;
    let mut all = Vec::new();
    let mut next = 0;
    for size in 1..=12u64 {
        let batch = records(next, next + size, 1, 10 * size as usize);
        append(&*log, &batch).await;
        all.extend(batch);
        next += size;
    }
    assert_eq!(
        state(&*log).await,
        log_state(0, next, 1, &[(1, 0)]),
        "in order: state"
    );
    assert_same(
        &read(&*log, 0, next, u64::MAX).await,
        &all,
        "in order: full read",
    );
    true
}

/// Every sub-range reads correctly, wherever the batch boundaries fall.
async fn reads_cross_batch_boundaries<X: StorageFixture>(mut fx: X) -> bool {
    let (log, _election) = open(&mut fx).await;
    let all = records(0, 30, 1, 33);
    for batch in all.chunks(3) {
        append(&*log, batch).await;
    }
    for from in 0..30u64 {
        for to in [from, from + 1, from + 2, from + 4, from + 7, 30] {
            let to = to.min(30);
            let got = read(&*log, from, to, u64::MAX).await;
            assert_same(&got, &all[from as usize..to as usize], "batch boundaries");
        }
    }
    true
}

/// A read stops before the record that would pass `max_bytes`, but returns at least one.
async fn reads_respect_max_bytes<X: StorageFixture>(mut fx: X) -> bool {
    let (log, _election) = open(&mut fx).await;
    let all = records(0, 20, 1, 100);
    for batch in all.chunks(4) {
        append(&*log, batch).await;
    }
    let one = all[0].encoded_len() as u64;
    assert_eq!(
        read(&*log, 0, 20, 0).await.len(),
        1,
        "max_bytes 0 still returns a record"
    );
    assert_eq!(
        read(&*log, 0, 20, 1).await.len(),
        1,
        "max_bytes 1 still returns a record"
    );
    assert_eq!(
        read(&*log, 0, 20, 3 * one).await.len(),
        3,
        "max_bytes of exactly 3 records"
    );
    assert_eq!(
        read(&*log, 0, 20, 3 * one - 1).await.len(),
        2,
        "max_bytes just under 3"
    );
    let got = read(&*log, 2, 20, 5 * one).await;
    assert_same(&got, &all[2..7], "max_bytes across a batch boundary");
    assert_same(&read(&*log, 0, 20, u64::MAX).await, &all, "unlimited read");
    true
}

/// Truncation removes a suffix (also inside a batch); the log then accepts the new suffix.
async fn truncate_then_reappend<X: StorageFixture>(mut fx: X) -> bool {
    let (log, _election) = open(&mut fx).await;
    let old = records(0, 10, 1, 40);
    append(&*log, &old).await;
    log.truncate(Offset(6))
        .await
        .expect("truncate inside a batch");
    assert_eq!(
        state(&*log).await,
        log_state(0, 6, 1, &[(1, 0)]),
        "after truncate"
    );
    assert_same(
        &read(&*log, 0, 10, u64::MAX).await,
        &old[..6],
        "read after truncate",
    );
    let new = records(6, 12, 2, 50);
    append(&*log, &new).await;
    let mut want = old[..6].to_vec();
    want.extend(new.iter().cloned());
    assert_same(
        &read(&*log, 0, 12, u64::MAX).await,
        &want,
        "read after re-append",
    );
    log.truncate(Offset(40))
        .await
        .expect("truncate past the end is a no-op");
    assert_eq!(
        state(&*log).await,
        log_state(0, 12, 2, &[(1, 0), (2, 6)]),
        "no-op truncate"
    );
    log.truncate(Offset(0)).await.expect("truncate everything");
    assert_eq!(
        state(&*log).await,
        LogState::default(),
        "truncated to empty"
    );
    append(&*log, &records(0, 2, 3, 5)).await;
    assert_same(
        &read(&*log, 0, 2, u64::MAX).await,
        &records(0, 2, 3, 5),
        "fresh start",
    );
    true
}

/// Purge removes a prefix; reads below the start are refused; purging to the end empties the
/// log but keeps its end offset and epoch.
async fn purge_then_read<X: StorageFixture>(mut fx: X) -> bool {
    let (log, _election) = open(&mut fx).await;
    let all: Vec<Record> = (0..20)
        .map(|o| record(o, 1 + (o as u32) / 10, 20))
        .collect();
    for batch in all.chunks(5) {
        append(&*log, batch).await;
    }
    log.purge(Offset(7)).await.expect("purge inside a batch");
    assert_eq!(
        state(&*log).await,
        purged(7, 1, 20, 2, &[(1, 7), (2, 10)]),
        "after purge"
    );
    assert_same(
        &read(&*log, 7, 20, u64::MAX).await,
        &all[7..],
        "read after purge",
    );
    assert_invalid(
        log.read(Offset(3), Offset(20), u64::MAX).await,
        "read below the start",
    );
    log.purge(Offset(5))
        .await
        .expect("purge below the start is a no-op");
    assert_eq!(
        state(&*log).await.start,
        Offset(7),
        "no-op purge keeps the start"
    );
    log.purge(Offset(20)).await.expect("purge everything");
    assert_eq!(
        state(&*log).await,
        purged(20, 2, 20, 2, &[]),
        "purged to the end"
    );
    assert!(
        read(&*log, 20, 20, u64::MAX).await.is_empty(),
        "nothing left"
    );
    let more = records(20, 23, 3, 20);
    append(&*log, &more).await;
    assert_eq!(
        state(&*log).await,
        purged(20, 2, 23, 3, &[(3, 20)]),
        "append after purge"
    );
    drop(log);
    drop(_election);
    let (log, _election) = open(&mut fx).await;
    assert_eq!(
        state(&*log).await,
        purged(20, 2, 23, 3, &[(3, 20)]),
        "purge survives reopen"
    );
    assert_same(
        &read(&*log, 20, 23, u64::MAX).await,
        &more,
        "read after reopen",
    );
    true
}

/// Appends, truncations, purges and the election state all survive a reopen.
async fn state_persists_across_reopen<X: StorageFixture>(mut fx: X) -> bool {
    let (log, election) = open(&mut fx).await;
    for (from, to, epoch) in [(0, 12, 1), (12, 20, 2), (20, 30, 2)] {
        append(&*log, &records(from, to, epoch, 64)).await;
    }
    log.truncate(Offset(25)).await.expect("truncate");
    append(&*log, &records(25, 28, 3, 64)).await;
    log.purge(Offset(4)).await.expect("purge");
    let saved = ElectionState {
        epoch: Epoch(3),
        voted_for: Some(ReplicaId(2)),
        leader: None,
    };
    election.save(&saved).await.expect("save");
    let before = state(&*log).await;
    assert_eq!(
        before,
        purged(4, 1, 28, 3, &[(1, 4), (2, 12), (3, 25)]),
        "before reopen"
    );
    let content = read(&*log, 4, 28, u64::MAX).await;
    drop((log, election));

    let (log, election) = open(&mut fx).await;
    assert_eq!(state(&*log).await, before, "log state after reopen");
    assert_same(
        &read(&*log, 4, 28, u64::MAX).await,
        &content,
        "records after reopen",
    );
    assert_eq!(
        election.load().await.ok(),
        Some(Some(saved)),
        "election state after reopen"
    );
    append(&*log, &records(28, 30, 3, 64)).await;
    drop((log, election));
    let (log, _election) = open(&mut fx).await;
    assert_eq!(
        state(&*log).await.end,
        OffsetAndEpoch::new(Offset(30), Epoch(3)),
        "second reopen"
    );
    true
}

/// The epoch history follows truncations and new epochs, and is kept across a reopen.
async fn epoch_history_after_truncation<X: StorageFixture>(mut fx: X) -> bool {
    let (log, election) = open(&mut fx).await;
    append(&*log, &records(0, 3, 1, 8)).await;
    append(&*log, &records(3, 6, 2, 8)).await;
    append(&*log, &records(6, 9, 3, 8)).await;
    let three = [(1, 0), (2, 3), (3, 6)];
    assert_eq!(
        state(&*log).await,
        log_state(0, 9, 3, &three),
        "three epochs"
    );
    log.truncate(Offset(5)).await.expect("truncate");
    assert_eq!(
        state(&*log).await,
        log_state(0, 5, 2, &[(1, 0), (2, 3)]),
        "cut into epoch 2"
    );
    log.truncate(Offset(3)).await.expect("truncate");
    assert_eq!(
        state(&*log).await,
        log_state(0, 3, 1, &[(1, 0)]),
        "epoch 2 gone"
    );
    append(&*log, &records(3, 5, 4, 8)).await;
    let after = log_state(0, 5, 4, &[(1, 0), (4, 3)]);
    assert_eq!(state(&*log).await, after, "epoch 4 after the cut");
    drop((log, election));
    let (log, _election) = open(&mut fx).await;
    assert_eq!(state(&*log).await, after, "epoch history after reopen");
    log.purge(Offset(2)).await.expect("purge");
    assert_eq!(
        state(&*log).await,
        purged(2, 1, 5, 4, &[(1, 2), (4, 3)]),
        "history after purge"
    );
    log.purge(Offset(4)).await.expect("purge");
    assert_eq!(
        state(&*log).await,
        purged(4, 4, 5, 4, &[(4, 4)]),
        "epoch 1 purged"
    );
    true
}

/// The election state saved last is the one loaded, also after a reopen.
async fn election_state_round_trips<X: StorageFixture>(mut fx: X) -> bool {
    let (_log, election) = open(&mut fx).await;
    assert_eq!(election.load().await.ok(), Some(None), "nothing saved yet");
    let states = [
        ElectionState {
            epoch: Epoch(1),
            voted_for: Some(ReplicaId(1)),
            leader: None,
        },
        ElectionState {
            epoch: Epoch(1),
            voted_for: Some(ReplicaId(1)),
            leader: Some(ReplicaId(1)),
        },
        ElectionState {
            epoch: Epoch(7),
            voted_for: None,
            leader: Some(ReplicaId(u32::MAX)),
        },
        ElectionState {
            epoch: Epoch(u32::MAX),
            voted_for: None,
            leader: None,
        },
    ];
    for s in &states {
        election.save(s).await.expect("save");
        assert_eq!(
            election.load().await.ok(),
            Some(Some(*s)),
            "load after save"
        );
    }
    drop((_log, election));
    let (_log, election) = open(&mut fx).await;
    assert_eq!(
        election.load().await.ok(),
        Some(Some(states[3])),
        "load after reopen"
    );
    true
}

/// Records of 1 MiB and more are stored whole; a byte limit still returns one of them.
async fn records_of_a_mebibyte_and_more<X: StorageFixture>(mut fx: X) -> bool {
    let (log, election) = open(&mut fx).await;
    let mib = 1 << 20;
    let big = vec![
        record(0, 1, mib),
        record(1, 1, mib + 1),
        record(2, 1, 3 * mib),
    ];
    append(&*log, &big[..1]).await;
    append(&*log, &big[1..]).await;
    let mixed: Vec<Record> = (3..8)
        .map(|o| record(o, 1, if o % 2 == 0 { mib } else { 7 }))
        .collect();
    append(&*log, &mixed).await;
    for o in 0..8u64 {
        let got = read(&*log, o, 8, 1).await;
        assert_eq!(got.len(), 1, "large records: one record under a tiny limit");
        let want = if o < 3 {
            &big[o as usize]
        } else {
            &mixed[o as usize - 3]
        };
        assert_eq!(&got[0], want, "large record {o}");
    }
    drop((log, election));
    let (log, _election) = open(&mut fx).await;
    let got = read(&*log, 0, 8, u64::MAX).await;
    assert_same(&got[..3], &big, "large records after reopen");
    assert_same(&got[3..], &mixed, "mixed records after reopen");
    true
}

/// Readers that run while batches are appended always see a contiguous, correct prefix.
async fn concurrent_readers_while_appending<X: StorageFixture>(mut fx: X) -> bool {
    let (log, _election) = open(&mut fx).await;
    let done = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU64::new(0));
    let mut readers = Vec::new();
    for _ in 0..3 {
        let (log, done, reads) = (log.clone(), done.clone(), reads.clone());
        readers.push(tokio::spawn(async move {
            loop {
                let finished = done.load(Ordering::SeqCst);
                let s = log.state().await.expect("concurrent state");
                let got = log
                    .read(s.start, s.end.offset, u64::MAX)
                    .await
                    .expect("concurrent read");
                for (i, r) in got.iter().enumerate() {
                    let want = record(s.start.0 + i as u64, 1, 16 + (r.offset.0 % 50) as usize);
                    assert_eq!(r, &want, "concurrent reader saw a wrong record");
                }
                reads.fetch_add(1, Ordering::SeqCst);
                if finished {
                    return;
                }
                tokio::task::yield_now().await;
            }
        }));
    }
    let mut next = 0u64;
    for round in 0..150u64 {
        let batch: Vec<Record> = (next..next + 1 + round % 7)
            .map(|o| record(o, 1, 16 + (o % 50) as usize))
            .collect();
        append(&*log, &batch).await;
        next += batch.len() as u64;
        tokio::task::yield_now().await;
    }
    done.store(true, Ordering::SeqCst);
    for r in readers {
        r.await.expect("reader task");
    }
    assert!(reads.load(Ordering::SeqCst) >= 3, "every reader ran");
    assert_eq!(
        state(&*log).await.end.offset,
        Offset(next),
        "all appends landed"
    );
    true
}

/// Appends issued back to back without waiting (the driver's pipelining, and group commit in a
/// backend) all succeed and land in issue order.
async fn concurrent_appends_keep_their_order<X: StorageFixture>(mut fx: X) -> bool {
    let (log, _election) = open(&mut fx).await;
    let mut batches = Vec::new();
    let mut next = 0u64;
    for i in 0..64u64 {
        let epoch = 1 + (i / 20) as u32;
        batches.push(records(next, next + 1 + i % 4, epoch, 100 + i as usize));
        next += 1 + i % 4;
    }
    let futures: Vec<_> = batches.iter().map(|b| log.append(b)).collect();
    for (i, r) in join_in_order(futures).await.into_iter().enumerate() {
        if let Err(e) = r {
            panic!("pipelined append {i} failed: {e}");
        }
    }
    let all: Vec<Record> = batches.concat();
    assert_same(
        &read(&*log, 0, next, u64::MAX).await,
        &all,
        "pipelined appends in order",
    );
    let first_of = |e: u32| {
        all.iter()
            .find(|r| r.epoch.0 == e)
            .map(|r| r.offset.0)
            .unwrap_or(0)
    };
    let want = log_state(
        0,
        next,
        4,
        &[(1, 0), (2, first_of(2)), (3, first_of(3)), (4, first_of(4))],
    );
    assert_eq!(state(&*log).await, want, "pipelined appends: state");
    drop(log);
    drop(_election);
    let (log, _election) = open(&mut fx).await;
    assert_same(
        &read(&*log, 0, next, u64::MAX).await,
        &all,
        "pipelined appends after reopen",
    );
    true
}

/// Polls every future in list order (so the first poll of each happens in that order) until all
/// are done.
async fn join_in_order<'a, T>(
    futures: Vec<Pin<Box<dyn Future<Output = T> + Send + 'a>>>,
) -> Vec<T> {
    let mut futures: Vec<_> = futures.into_iter().map(Some).collect();
    let mut out: Vec<Option<T>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (slot, result) in futures.iter_mut().zip(out.iter_mut()) {
            if let Some(f) = slot {
                match f.as_mut().poll(cx) {
                    Poll::Ready(v) => {
                        *result = Some(v);
                        *slot = None;
                    }
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    out.into_iter()
        .map(|v| v.expect("every future completed"))
        .collect()
}

/// A damaged record is reported as `Corrupt` naming its offset, never returned as data; the
/// records around it stay readable.
async fn corrupt_record_is_detected<X: StorageFixture>(mut fx: X) -> bool {
    let (log, election) = open(&mut fx).await;
    let all = records(0, 10, 1, 64);
    append(&*log, &all[..2]).await;
    append(&*log, &all[2..8]).await;
    append(&*log, &all[8..]).await;
    drop((log, election));
    fx.corrupt(Offset(4)).await.expect("corrupting a record");
    let (log, _election) = open(&mut fx).await;
    match log.read(Offset(0), Offset(10), u64::MAX).await {
        Err(StorageError::Corrupt { offset, .. }) => {
            assert_eq!(
                offset,
                Offset(4),
                "corruption reported at the damaged offset"
            )
        }
        other => panic!("corrupt record: expected StorageError::Corrupt, got {other:?}"),
    }
    match log.read(Offset(4), Offset(5), u64::MAX).await {
        Err(StorageError::Corrupt { offset, .. }) => assert_eq!(offset, Offset(4)),
        other => panic!("corrupt record alone: expected StorageError::Corrupt, got {other:?}"),
    }
    assert_same(
        &read(&*log, 0, 4, u64::MAX).await,
        &all[..4],
        "records before the damage",
    );
    assert_same(
        &read(&*log, 5, 10, u64::MAX).await,
        &all[5..],
        "records after the damage",
    );
    true
}

/// Calls that break the contract are refused with `Invalid` and change nothing.
async fn contract_violations_are_invalid<X: StorageFixture>(mut fx: X) -> bool {
    let (log, _election) = open(&mut fx).await;
    append(&*log, &records(0, 5, 2, 8)).await;
    let before = state(&*log).await;
    assert_invalid(log.append(&records(6, 8, 2, 8)).await, "append with a gap");
    assert_invalid(
        log.append(&records(3, 8, 2, 8)).await,
        "append over existing records",
    );
    let mut holey = records(5, 8, 2, 8);
    holey.remove(1);
    assert_invalid(
        log.append(&holey).await,
        "append with a gap inside the batch",
    );
    assert_invalid(
        log.append(&records(5, 6, 1, 8)).await,
        "append going back in epoch",
    );
    assert_invalid(log.append(&records(5, 6, 0, 8)).await, "append in epoch 0");
    assert_invalid(
        log.read(Offset(6), Offset(9), u64::MAX).await,
        "read from past the end",
    );
    log.purge(Offset(2)).await.expect("purge");
    assert_invalid(
        log.read(Offset(1), Offset(3), u64::MAX).await,
        "read below the start",
    );
    assert_invalid(log.truncate(Offset(1)).await, "truncate below the start");
    assert_invalid(log.purge(Offset(9)).await, "purge past the end");
    let mut want = before;
    want.start = Offset(2);
    want.epochs[0].start = Offset(2);
    want.start_epoch = want.epochs[0].epoch;
    assert_eq!(state(&*log).await, want, "refused calls change nothing");
    append(&*log, &records(5, 6, 2, 8)).await;
    assert_eq!(
        state(&*log).await.end.offset,
        Offset(6),
        "the store still works"
    );
    true
}

/// After a failed write every call is refused with `Poisoned`; a reopen finds what was
/// acknowledged before.
async fn failed_write_poisons_the_store<X: StorageFixture>(mut fx: X) -> bool {
    let (log, election) = open(&mut fx).await;
    let kept = records(0, 4, 1, 8);
    append(&*log, &kept).await;
    if !fx.fail_next_write(&log) {
        return false;
    }
    match log.append(&records(4, 6, 1, 8)).await {
        Err(StorageError::Io(_)) | Err(StorageError::Poisoned(_)) => {}
        other => panic!("failed write: expected an i/o error, got {other:?}"),
    }
    fn poisoned<T: std::fmt::Debug>(r: Result<T, StorageError>, what: &str) {
        match r {
            Err(StorageError::Poisoned(_)) => {}
            other => panic!("{what} after a failed write: expected Poisoned, got {other:?}"),
        }
    }
    poisoned(log.state().await, "state");
    poisoned(log.read(Offset(0), Offset(4), u64::MAX).await, "read");
    poisoned(log.append(&records(4, 5, 1, 8)).await, "append");
    poisoned(log.truncate(Offset(2)).await, "truncate");
    poisoned(log.purge(Offset(1)).await, "purge");
    drop((log, election));
    let (log, _election) = open(&mut fx).await;
    let s = state(&*log).await;
    assert!(
        s.end.offset >= Offset(4),
        "acknowledged records survive the failure"
    );
    assert_same(
        &read(&*log, 0, 4, u64::MAX).await,
        &kept,
        "acknowledged records after reopen",
    );
    true
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
