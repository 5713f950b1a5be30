//! Pull replication and reconciliation (decisions D4): divergent tails are truncated at the
//! diverging epoch's end offset, and a new leader never counts an older epoch's records as
//! committed before a record of its own epoch commits.

use expect_test::expect;
use raft_core::{Epoch, Offset, Role};

use crate::*;

#[test]
fn follower_with_divergent_tail_truncates_to_the_diverging_epoch_end_and_matches_leader() {
    // Goal: KIP-595 reconciliation (protocol reference 6.1.21): an ex-leader holding an
    // uncommitted tail of its epoch fetches from the new leader with that epoch, gets a
    // DivergingEpoch naming where the epoch ends in the new leader's log, truncates exactly
    // there, and then fetches the new leader's records; its uncommitted records are gone.
    // Method: three voters; commit two records; isolate the leader and propose three more on
    // it (appended, never committed); the majority elects a new leader, which commits two
    // records of its own; heal; catch the moment the ex-leader's log is cut, then let it
    // catch up and compare logs.
    let mut c = cluster(1, 3, 0);
    let old = settle(&mut c);
    commit(&mut c, old, b"a");
    commit(&mut c, old, b"b");
    c.isolate(old);
    for p in ["lost1", "lost2", "lost3"] {
        c.propose(old, p.as_bytes()).expect("still leader for now");
    }
    c.run_for(ms(5));
    assert_eq!(
        log_text(&c, old),
        "LC@e1 a@e1 b@e1 lost1@e1 lost2@e1 lost3@e1"
    );

    let elected = c.run_until_cond(c.liveness_bound(), |c| c.leader().is_some_and(|l| l != old));
    assert!(elected, "{}", c.trace());
    let new = c.leader().unwrap();
    settle_without(&mut c, old);
    commit(&mut c, new, b"c");
    commit(&mut c, new, b"d");
    let new_epoch = c.replica(new).epoch();
    // The new leader's log: the committed prefix, then its own epoch from offset 3.
    let diverging_end = Offset(3);
    assert_eq!(c.replica(new).epoch_at(diverging_end), Some(new_epoch));
    assert_eq!(c.replica(new).epoch_at(Offset(2)), Some(Epoch(1)));

    c.clear_trace();
    c.heal();
    let truncated = c.run_until_cond(ms(1000), |c| c.log(old).len() as u64 <= diverging_end.0);
    assert!(truncated, "{}", c.trace());
    assert_eq!(
        log_text(&c, old),
        "LC@e1 a@e1 b@e1",
        "cut at the diverging epoch's end"
    );
    settle(&mut c);
    assert_eq!(log_text(&c, old), log_text(&c, new));
    assert_eq!(
        log_text(&c, new),
        format!("LC@e1 a@e1 b@e1 LC@{new_epoch} c@{new_epoch} d@{new_epoch}")
    );
    assert!(c
        .committed()
        .iter()
        .all(|r| !r.payload.starts_with(b"lost")));
    expect![[r#"
        589ms r1 resigned e1 leader=r1
        590ms r1 follower e2 leader=r2"#]]
    .assert_eq(&c.trace());
    assert_no_violations(&c);
}

#[test]
fn earlier_epoch_record_is_not_committed_until_a_current_epoch_record_commits() {
    // Goal: Raft figure 8 / KAFKA-12619: a new leader must not count a record of an earlier
    // epoch as committed just because it is on a majority; only once its own LeaderChange
    // record is on a majority does the high watermark move past its epoch start, committing
    // both.
    // Method: three voters. Commit one record, then hold both followers' syncs and propose X:
    // the followers receive X but cannot acknowledge it, so it is uncommitted. Crash the
    // leader and release the syncs: X is now durable on both survivors, a majority. One of
    // them wins and appends its LeaderChange record at offset 3. Once the follower has fetched
    // at offset 3 (X durable on both), hold its syncs again so the LeaderChange record cannot
    // become durable there: for 200 ms the leader's high watermark stays at 2 and X is not
    // committed. Release: both commit at once.
    let mut c = cluster(2, 3, 0);
    let l = settle(&mut c);
    commit(&mut c, l, b"a");
    let f: Vec<u32> = (1..=3).filter(|&id| id != l).collect();
    for &id in &f {
        c.hold_syncs(id, true);
    }
    let x = c.propose(l, b"x").expect("leader");
    assert_eq!(x.offset, Offset(2));
    let spread = c.run_until_cond(ms(100), |c| f.iter().all(|&id| c.log(id).len() == 3));
    assert!(spread);
    assert!(!is_committed(&c, x, b"x"), "nobody acknowledged x");
    c.crash(l);
    for &id in &f {
        c.hold_syncs(id, false);
    }
    c.clear_trace();
    let elected = c.run_until_cond(c.liveness_bound(), |c| c.leader().is_some());
    assert!(elected, "{}", c.trace());
    let new = c.leader().unwrap();
    let follower = if f[0] == new { f[1] } else { f[0] };
    let epoch_start = Offset(3);
    assert_eq!(
        c.replica(new).epoch_at(epoch_start),
        Some(c.replica(new).epoch())
    );

    let fetched = c.run_until_cond(ms(1000), |c| {
        fetch_offset_seen_by(c, new, follower) == Some(epoch_start)
    });
    assert!(fetched, "{}", c.trace());
    c.hold_syncs(follower, true);
    let mut hwm_seen = Vec::new();
    for _ in 0..20 {
        c.run_for(ms(10));
        hwm_seen.push(c.replica(new).high_watermark());
        assert_eq!(c.replica(new).role(), Role::Leader);
    }
    assert!(
        hwm_seen.iter().all(|h| *h <= Offset(2)),
        "x (on a majority, but of an earlier epoch) counted as committed: {hwm_seen:?}"
    );
    assert!(!is_committed(&c, x, b"x"));
    assert_eq!(c.committed().len(), 2);

    c.hold_syncs(follower, false);
    let committed = c.run_until_cond(ms(100), |c| c.replica(new).high_watermark() == Offset(4));
    assert!(committed, "{}", c.trace());
    assert!(is_committed(&c, x, b"x"));
    assert_eq!(c.committed().len(), 4);
    expect![[r#"
        452ms r2 prospective e1 leader=r3
        452ms r1 prospective e1 leader=r3
        453ms r2 candidate e2 leader=-
        453ms r1 candidate e2 leader=-
        570ms r1 prospective e2 leader=-
        571ms r1 candidate e3 leader=-
        572ms r2 unattached e3 leader=-
        573ms r1 leader e3 leader=r1
        573ms r2 follower e3 leader=r1"#]]
    .assert_eq(&c.trace());
    assert_no_violations(&c);
}

/// Runs until every running replica other than `away` follows the leader and knows its log end
/// as committed.
fn settle_without(c: &mut raft_core::sim::Cluster, away: u32) {
    let ok = c.run_until_cond(ms(2000), |c| {
        let Some(l) = c.leader() else {
            return false;
        };
        let end = c.replica(l).log_end().offset;
        (1..=3)
            .filter(|&id| id != away && c.is_up(id))
            .all(|id| c.replica(id).high_watermark() == end)
    });
    assert!(ok, "{}", c.trace());
}
