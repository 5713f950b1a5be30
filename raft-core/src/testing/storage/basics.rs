//! The storage suite's basic promises: reads and appends, truncation, purge, reopening, the
//! epoch history and the election state.

use super::*;

/// A new store is empty, reads of nothing return nothing, and no election state is saved.
pub(super) async fn empty_log<X: StorageFixture>(mut fx: X) -> bool {
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
pub(super) async fn appends_read_back_in_order<X: StorageFixture>(mut fx: X) -> bool {
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
pub(super) async fn reads_cross_batch_boundaries<X: StorageFixture>(mut fx: X) -> bool {
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
pub(super) async fn reads_respect_max_bytes<X: StorageFixture>(mut fx: X) -> bool {
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
pub(super) async fn truncate_then_reappend<X: StorageFixture>(mut fx: X) -> bool {
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
pub(super) async fn purge_then_read<X: StorageFixture>(mut fx: X) -> bool {
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
pub(super) async fn state_persists_across_reopen<X: StorageFixture>(mut fx: X) -> bool {
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
        voted_directory: None,
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
pub(super) async fn epoch_history_after_truncation<X: StorageFixture>(mut fx: X) -> bool {
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
pub(super) async fn election_state_round_trips<X: StorageFixture>(mut fx: X) -> bool {
    let (_log, election) = open(&mut fx).await;
    assert_eq!(election.load().await.ok(), Some(None), "nothing saved yet");
    let states = [
        ElectionState {
            epoch: Epoch(1),
            voted_for: Some(ReplicaId(1)),
            voted_directory: None,
            leader: None,
        },
        ElectionState {
            epoch: Epoch(1),
            voted_for: Some(ReplicaId(1)),
            voted_directory: None,
            leader: Some(ReplicaId(1)),
        },
        ElectionState {
            epoch: Epoch(7),
            voted_for: None,
            voted_directory: None,
            leader: Some(ReplicaId(u32::MAX)),
        },
        ElectionState {
            epoch: Epoch(u32::MAX),
            voted_for: None,
            voted_directory: None,
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
