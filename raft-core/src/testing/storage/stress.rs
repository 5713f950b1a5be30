//! The storage suite's promises under stress: records of a mebibyte and more, concurrent
//! readers and appenders, corruption, contract violations and failed writes.

use super::*;

/// Records of 1 MiB and more are stored whole; a byte limit still returns one of them.
pub(super) async fn records_of_a_mebibyte_and_more<X: StorageFixture>(mut fx: X) -> bool {
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
pub(super) async fn concurrent_readers_while_appending<X: StorageFixture>(mut fx: X) -> bool {
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
pub(super) async fn concurrent_appends_keep_their_order<X: StorageFixture>(mut fx: X) -> bool {
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
pub(super) async fn join_in_order<'a, T>(
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
pub(super) async fn corrupt_record_is_detected<X: StorageFixture>(mut fx: X) -> bool {
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
pub(super) async fn contract_violations_are_invalid<X: StorageFixture>(mut fx: X) -> bool {
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
pub(super) async fn failed_write_poisons_the_store<X: StorageFixture>(mut fx: X) -> bool {
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
