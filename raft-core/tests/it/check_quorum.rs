//! Check-quorum (decisions D5): a leader that stops hearing from a majority resigns within
//! 1.5 x fetch timeout; a single voter never does (KAFKA-16144).

use expect_test::expect;
use raft_core::protocol::ProposeError;
use raft_core::Role;

use crate::*;

#[test]
fn leader_cut_off_from_the_majority_resigns_within_the_check_quorum_bound() {
    // Goal: protocol reference 6.1.1 (KAFKA-15489): a leader isolated from every voter resigns
    // within 1.5 x fetch timeout (450 ms here), no sooner than its last contact allows, refuses
    // writes from then on, and the majority elects a new leader.
    // Method: three voters; isolate the leader and measure the virtual time until its released
    // role is no longer Leader; then run until the two others settle on a new leader.
    let mut c = cluster(1, 3, 0);
    let l = settle(&mut c);
    let epoch = c.replica(l).epoch();
    c.run_for(ms(100));
    c.clear_trace();
    let isolated_at = c.now();
    c.isolate(l);
    let resigned = c.run_until_cond(ms(1000), |c| c.replica(l).role() != Role::Leader);
    assert!(resigned, "{}", c.trace());
    let after = c.now() - isolated_at;
    // Fetches arrive at least every long-poll wait (50 ms) plus a round trip, so the last
    // contact was at most ~52 ms before the cut; the bound allows 2 ms of slack.
    assert!(after <= ms(450 + 2), "resigned {after:?} after the cut");
    assert!(
        after >= ms(450 - 55),
        "resigned early, {after:?} after the cut"
    );
    assert_eq!(c.replica(l).role(), Role::Resigned);
    // It refuses writes without naming itself: it will not lead this epoch again, and a
    // client told "the leader is r{l}" would come straight back.
    assert!(matches!(
        c.propose(l, b"late"),
        Err(ProposeError::NotLeader { leader: None, .. })
    ));

    let others: Vec<u32> = (1..=3).filter(|&id| id != l).collect();
    let elected = c.run_until_cond(c.liveness_bound(), |c| {
        c.leader()
            .is_some_and(|n| n != l && c.replica(n).epoch() > epoch)
    });
    assert!(elected, "{}", c.trace());
    assert!(others.contains(&c.leader().unwrap()));
    expect![[r#"
        486ms r2 prospective e1 leader=r1
        486ms r3 prospective e1 leader=r1
        487ms r2 candidate e2 leader=-
        487ms r3 candidate e2 leader=-
        620ms r2 prospective e2 leader=-
        621ms r2 candidate e3 leader=-
        622ms r3 unattached e3 leader=-
        623ms r2 leader e3 leader=r2
        623ms r3 follower e3 leader=r2
        636ms r1 resigned e1 leader=r1"#]]
    .assert_eq(&c.trace());
    assert_no_violations(&c);
}

#[test]
fn single_voter_leader_never_resigns_for_lack_of_quorum() {
    // Goal: protocol reference 6.1.2 (KAFKA-16144): a one-voter cluster has no one to hear
    // from; its leader must not run check-quorum and stays leader indefinitely.
    // Method: run a single voter for 5 s (over ten check-quorum windows) and propose now and
    // then; the trace shows a single election and every proposal commits.
    let mut c = cluster(2, 1, 0);
    let l = settle(&mut c);
    for i in 0..10 {
        c.run_for(ms(500));
        commit(&mut c, l, format!("r{i}").as_bytes());
    }
    assert_eq!(c.replica(l).role(), Role::Leader);
    expect![[r#"
        158ms r1 prospective e0 leader=-
        158ms r1 voters {r1@00000000-0000-0001-0000-000000000001}
        158ms r1 leader e1 leader=r1"#]]
    .assert_eq(&c.trace());
    assert_no_violations(&c);
}

#[test]
fn resigned_leader_rejoins_without_raising_the_epoch() {
    // Goal: protocol reference 2.5 D: the "zombie" ex-leader of an isolated minority cycles
    // through pre-vote rounds without raising its epoch past the one it moved to on leaving
    // Resigned; when it rejoins it learns the new leader from the first answer and follows,
    // and the new leader is not disturbed.
    // Method: isolate the leader of three voters for 1.5 s (it resigns; the others elect a
    // leader); heal; check the epochs and that the new leader stays.
    let mut c = cluster(5, 3, 0);
    let old = settle(&mut c);
    let epoch = c.replica(old).epoch();
    c.clear_trace();
    c.isolate(old);
    c.run_for(ms(1500));
    let new = c.leader().expect("the majority elected a leader");
    assert_ne!(new, old);
    let new_epoch = c.replica(new).epoch();
    assert_eq!(
        c.replica(old).epoch(),
        epoch.next(),
        "one step, for leaving Resigned"
    );
    c.heal();
    settle(&mut c);
    assert_eq!(c.leader(), Some(new));
    assert_eq!(c.replica(old).epoch(), new_epoch);
    expect![[r#"
        435ms r2 prospective e1 leader=r1
        435ms r3 prospective e1 leader=r1
        436ms r2 candidate e2 leader=-
        436ms r3 candidate e2 leader=-
        550ms r3 prospective e2 leader=-
        551ms r3 candidate e3 leader=-
        552ms r2 unattached e3 leader=-
        553ms r3 leader e3 leader=r3
        554ms r2 follower e3 leader=r3
        586ms r1 resigned e1 leader=r1
        771ms r1 unattached e2 leader=-
        904ms r1 prospective e2 leader=-
        1094ms r1 unattached e2 leader=-
        1292ms r1 prospective e2 leader=-
        1465ms r1 unattached e2 leader=-
        1583ms r1 prospective e2 leader=-
        1685ms r1 unattached e2 leader=-
        1866ms r1 prospective e2 leader=-
        1868ms r1 follower e3 leader=r3"#]]
    .assert_eq(&c.trace());
    assert_no_violations(&c);
}
