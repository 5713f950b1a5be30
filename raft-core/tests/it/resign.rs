//! Graceful resignation: the leader sends EndQuorumEpoch with its preferred successors ordered
//! by fetch offset, and the first of them starts its election at once.

use expect_test::expect;
use raft_core::{ReplicaId, Role};

use crate::*;

#[test]
fn graceful_resign_elects_the_preferred_successor_without_waiting_for_a_timeout() {
    // Goal: on shutdown the leader hands over: its first preferred successor (the voter with
    // the highest fetch offset) is elected at once, well inside one election timeout plus one
    // fetch timeout (400 ms here), in the next epoch.
    // Method: three voters. Hold the syncs of the follower with the lower id so it falls
    // behind while three records commit with the other (so the id tie-break cannot be what
    // picks the successor); release the syncs and resign the leader in the same instant; run
    // until a new leader is elected.
    let mut c = cluster(6, 3, 0);
    let l = settle(&mut c);
    let epoch = c.replica(l).epoch();
    let f: Vec<u32> = (1..=3).filter(|&id| id != l).collect();
    let (behind, ahead) = (f[0], f[1]);
    c.hold_syncs(behind, true);
    for p in ["a", "b", "c"] {
        commit(&mut c, l, p.as_bytes());
    }
    let offsets = (
        fetch_offset_seen_by(&c, l, ahead),
        fetch_offset_seen_by(&c, l, behind),
    );
    assert!(offsets.0 > offsets.1, "fetch offsets {offsets:?}");
    c.hold_syncs(behind, false);
    c.clear_trace();
    let resigned_at = c.now();
    c.resign(l);
    assert_eq!(c.replica(l).role(), Role::Resigned);
    let elected = c.run_until_cond(ms(400), |c| c.leader().is_some());
    let took = c.now() - resigned_at;
    assert!(elected, "{}", c.trace());
    assert_eq!(
        c.leader(),
        Some(ahead),
        "the first preferred successor wins"
    );
    assert_eq!(c.replica(ahead).epoch(), epoch.next());
    assert!(took <= ms(20), "the handover took {took:?}");
    assert!(
        !c.trace()
            .contains(&format!("{} prospective", ReplicaId(behind))),
        "the second successor never had to campaign"
    );
    expect![[r#"
        133ms r2 resigned e1 leader=r2
        133ms r3 prospective e1 leader=r2
        134ms r3 candidate e2 leader=-
        135ms r1 unattached e2 leader=-
        135ms r2 unattached e2 leader=-
        136ms r3 leader e2 leader=r3"#]]
    .assert_eq(&c.trace());
    assert_no_violations(&c);
}

#[test]
fn graceful_resign_in_five_voters_takes_one_epoch() {
    // Goal: protocol reference 6.1.9 (KAFKA-20895): with five voters the first preferred
    // successor's pre-vote must not be refused by followers that still fetched recently; the
    // leader invited the election, so they grant it and the handover takes exactly one epoch.
    // Method: five voters with all followers caught up (the successor is then the lowest id
    // among them); resign the leader and run until a new leader is elected.
    let mut c = cluster(7, 5, 0);
    let l = settle(&mut c);
    let epoch = c.replica(l).epoch();
    commit(&mut c, l, b"a");
    c.run_for(ms(20));
    let first = (1..=5).find(|&id| id != l).unwrap();
    c.clear_trace();
    c.resign(l);
    let elected = c.run_until_cond(ms(400), |c| c.leader().is_some());
    assert!(elected, "{}", c.trace());
    assert_eq!(c.leader(), Some(first));
    assert_eq!(c.replica(first).epoch(), epoch.next());
    settle(&mut c);
    expect![[r#"
        139ms r1 resigned e1 leader=r1
        140ms r2 prospective e1 leader=r1
        141ms r2 candidate e2 leader=-
        142ms r1 unattached e2 leader=-
        142ms r3 unattached e2 leader=-
        142ms r4 unattached e2 leader=-
        142ms r5 unattached e2 leader=-
        143ms r2 leader e2 leader=r2
        143ms r1 follower e2 leader=r2
        143ms r3 follower e2 leader=r2
        143ms r4 follower e2 leader=r2
        143ms r5 follower e2 leader=r2"#]]
    .assert_eq(&c.trace());
    assert_no_violations(&c);
}
