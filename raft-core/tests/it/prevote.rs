//! Pre-vote (KIP-996, decisions D2 and D3): the disruptions it prevents, shown with it on and
//! off, and the rule that a pre-vote never changes the replica that answers it.

use expect_test::expect;
use raft_core::sim::{Cluster, ClusterOptions};
use raft_core::{ReplicaId, Role};

use crate::*;

#[test]
fn rejoining_partitioned_follower_does_not_depose_leader_with_prevote() {
    // Goal: protocol reference 2.5 A: a follower cut off from everyone keeps failing pre-vote
    // rounds but never raises its epoch, so when it rejoins the healthy leader stays.
    // Method: isolate a follower for 1 s (three fetch timeouts), check its epoch did not move,
    // heal, run 1 s more; the epoch and the leader are unchanged everywhere and the follower
    // fetches again.
    let mut c = cluster(1, 3, 0);
    let l = settle(&mut c);
    let epoch = c.replica(l).epoch();
    let f = if l == 1 { 2 } else { 1 };
    c.clear_trace();
    c.isolate(f);
    c.run_for(ms(1000));
    assert_eq!(
        c.replica(f).epoch(),
        epoch,
        "pre-vote rounds never raise the epoch"
    );
    assert!(
        c.replica(f).stats().elections >= 2,
        "it did try, more than once"
    );
    c.heal();
    c.run_for(ms(1000));
    commit(&mut c, l, b"after");
    assert_eq!(settle(&mut c), l);
    assert_eq!(max_epoch(&c, &[1, 2, 3]), epoch);
    expect![[r#"
        435ms r2 prospective e1 leader=r1
        596ms r2 follower e1 leader=r1
        896ms r2 prospective e1 leader=r1
        1030ms r2 follower e1 leader=r1
        1330ms r2 prospective e1 leader=r1
        1331ms r2 follower e1 leader=r1"#]]
    .assert_eq(&c.trace());
    assert_no_violations(&c);
}

#[test]
fn rejoining_partitioned_follower_deposes_leader_without_prevote() {
    // Goal: the counterpart of the test above: with pre-vote off, the isolated follower raises
    // its epoch at every election timeout, and on rejoining its higher epoch forces the healthy
    // leader to step down (here through its next vote request: a leader steps down to a
    // candidate's later epoch, and their logs being equal, grants it the vote).
    // Method: the same script with `pre_vote: false`.
    let mut c = Cluster::new(ClusterOptions {
        pre_vote: false,
        ..ClusterOptions::default()
    });
    let l = settle(&mut c);
    let epoch = c.replica(l).epoch();
    let f = if l == 1 { 2 } else { 1 };
    c.clear_trace();
    c.isolate(f);
    c.run_for(ms(1000));
    let isolated_epoch = c.replica(f).epoch();
    assert!(
        isolated_epoch.0 >= epoch.0 + 3,
        "its epoch grew while isolated"
    );
    assert_eq!(c.replica(l).epoch(), epoch);
    c.heal();
    let stepped_down = c.run_until_cond(ms(1000), |c| c.replica(l).epoch() > epoch);
    assert!(
        stepped_down,
        "the healthy leader is deposed:\n{}",
        c.trace()
    );
    settle(&mut c);
    assert!(c.replica(c.leader().unwrap()).epoch() > isolated_epoch);
    expect![[r#"
        434ms r2 candidate e2 leader=-
        596ms r2 candidate e3 leader=-
        729ms r2 candidate e4 leader=-
        829ms r2 candidate e5 leader=-
        998ms r2 candidate e6 leader=-
        1105ms r2 candidate e7 leader=-
        1237ms r2 candidate e8 leader=-
        1238ms r1 unattached e8 leader=-
        1239ms r2 leader e8 leader=r2
        1239ms r1 follower e8 leader=r2
        1239ms r3 follower e8 leader=r2"#]]
    .assert_eq(&c.trace());
    assert_no_violations(&c);
}

#[test]
fn voter_that_reaches_others_but_not_the_leader_causes_no_election() {
    // Goal: protocol reference 2.5 B (KIP-996 "Scenario A"): a voter that cannot reach the
    // leader but reaches the other follower keeps asking for pre-votes; that follower still
    // fetches from the leader and refuses (D3), so nobody becomes a candidate, the epoch stays,
    // and the leader keeps committing with the other follower.
    // Method: three voters, cut the link between the leader and one follower for 2 s while
    // proposing every 100 ms; check the epoch, the leader, commits and the fetching follower's
    // log; then heal and check the cut follower catches up.
    let mut c = cluster(2, 3, 0);
    let l = settle(&mut c);
    let epoch = c.replica(l).epoch();
    let f: Vec<u32> = (1..=3).filter(|&id| id != l).collect();
    let (cut_off, fetching) = (f[0], f[1]);
    c.clear_trace();
    c.cut(l, cut_off);
    for i in 0..20 {
        let payload = format!("p{i}");
        commit(&mut c, l, payload.as_bytes());
        c.run_for(ms(100));
    }
    assert!(
        c.replica(cut_off).stats().elections >= 2,
        "the cut-off voter kept trying"
    );
    assert_eq!(c.leader(), Some(l));
    assert_eq!(max_epoch(&c, &[1, 2, 3]), epoch);
    assert_eq!(c.replica(fetching).log_end(), c.replica(l).log_end());
    assert_eq!(
        c.replica(fetching).high_watermark(),
        c.replica(l).high_watermark()
    );
    assert!(!c.trace().contains("candidate"), "{}", c.trace());
    assert!(!c.trace().contains(&format!("{} ", ReplicaId(fetching))));
    c.heal();
    settle(&mut c);
    assert_eq!(c.leader(), Some(l));
    assert_eq!(log_text(&c, cut_off), log_text(&c, l));
    expect![[r#"
        448ms r1 prospective e1 leader=r3
        632ms r1 follower e1 leader=r3
        932ms r1 prospective e1 leader=r3
        1049ms r1 follower e1 leader=r3
        1349ms r1 prospective e1 leader=r3
        1468ms r1 follower e1 leader=r3
        1768ms r1 prospective e1 leader=r3
        1948ms r1 follower e1 leader=r3
        2248ms r1 prospective e1 leader=r3
        2249ms r1 follower e1 leader=r3"#]]
    .assert_eq(&trace_of(&c, &[cut_off]));
    assert_no_violations(&c);
}

#[test]
fn prevote_never_changes_the_receivers_durable_state() {
    // Goal: decisions D2: answering a pre-vote, granted or refused, touches neither the
    // receiver's durable election state nor its epoch or role.
    // Method: five voters with vote stickiness off, so that a receiver with an older log grants
    // the pre-vote. One follower reaches only one other follower; its pre-votes are granted by
    // that follower but two grants are not a majority of five, so it never becomes a candidate.
    // Compare every other replica's durable state, epoch and role before and after 2 s of such
    // rounds (a round lasts one fetch timeout plus one election timeout: 400 to 500 ms).
    let mut c = Cluster::new(ClusterOptions {
        seed: 3,
        voters: 5,
        sticky_votes: false,
        ..ClusterOptions::default()
    });
    let l = settle(&mut c);
    let others: Vec<u32> = (1..=5).filter(|&id| id != l).collect();
    let (asker, receiver) = (others[0], others[1]);
    let before: Vec<_> = (1..=5)
        .map(|id| {
            let r = c.replica(id);
            (c.durable_election(id), r.epoch(), r.role())
        })
        .collect();
    for id in (1..=5).filter(|&id| id != asker && id != receiver) {
        c.cut(asker, id);
    }
    c.clear_trace();
    c.run_for(ms(2000));
    assert!(
        c.replica(asker).stats().elections >= 3,
        "it ran several pre-vote rounds"
    );
    let after: Vec<_> = (1..=5)
        .map(|id| {
            let r = c.replica(id);
            (c.durable_election(id), r.epoch(), r.role())
        })
        .collect();
    for id in (1..=5).filter(|&id| id != asker) {
        let i = id as usize - 1;
        assert_eq!(after[i], before[i], "replica {id} changed");
    }
    assert_eq!(c.replica(receiver).role(), Role::Follower);
    expect![[r#"
        408ms r1 prospective e1 leader=r3
        535ms r1 follower e1 leader=r3
        835ms r1 prospective e1 leader=r3
        964ms r1 follower e1 leader=r3
        1264ms r1 prospective e1 leader=r3
        1367ms r1 follower e1 leader=r3
        1667ms r1 prospective e1 leader=r3
        1798ms r1 follower e1 leader=r3
        2098ms r1 prospective e1 leader=r3"#]]
    .assert_eq(&c.trace());
    assert_no_violations(&c);
}

#[test]
fn without_sticky_votes_a_voter_cut_from_the_leader_steals_leadership() {
    // Goal: the counterpart of `voter_that_reaches_others_but_not_the_leader_causes_no_election`
    // (cockroachdb PR #104042): pre-vote alone does not stop a voter that only lost its link
    // to the leader, because the other follower, whose log is no newer, grants its pre-vote
    // and then its vote. Stickiness (D3) is what prevents this.
    // Method: the same cut with `sticky_votes: false`; the cut-off voter becomes leader in the
    // next epoch although the old leader was healthy.
    let mut c = Cluster::new(ClusterOptions {
        seed: 2,
        sticky_votes: false,
        ..ClusterOptions::default()
    });
    let l = settle(&mut c);
    let epoch = c.replica(l).epoch();
    let cut_off = (1..=3).find(|&id| id != l).unwrap();
    c.clear_trace();
    c.cut(l, cut_off);
    let stolen = c.run_until_cond(ms(2000), |c| c.leader() == Some(cut_off));
    assert!(stolen, "{}", c.trace());
    assert_eq!(c.replica(cut_off).epoch(), epoch.next());
    c.heal();
    assert_eq!(settle(&mut c), cut_off);
    expect![[r#"
        448ms r1 prospective e1 leader=r3
        450ms r1 candidate e2 leader=-
        450ms r2 unattached e2 leader=-
        451ms r1 leader e2 leader=r1
        452ms r2 follower e2 leader=r1
        596ms r3 follower e2 leader=r1"#]]
    .assert_eq(&c.trace());
    assert_no_violations(&c);
}

#[test]
fn voter_with_a_stale_log_never_becomes_a_candidate_with_prevote() {
    // Goal: with pre-vote on, a voter whose log lacks committed records is refused at the
    // pre-vote stage, so it never raises the epoch at all (compare
    // `candidate_with_stale_log_cannot_win`, where pre-vote is off).
    // Method: isolate a follower while the leader commits three records with the other, crash
    // the leader, heal; the up-to-date voter wins one epoch up, and the stale one is never a
    // candidate.
    let mut c = cluster(1, 3, 0);
    let l = settle(&mut c);
    let epoch = c.replica(l).epoch();
    let f: Vec<u32> = (1..=3).filter(|&id| id != l).collect();
    let (stale, fresh) = (f[0], f[1]);
    c.isolate(stale);
    for p in ["x", "y", "z"] {
        commit(&mut c, l, p.as_bytes());
    }
    c.run_for(ms(500));
    assert_eq!(c.replica(stale).epoch(), epoch);
    c.clear_trace();
    c.crash(l);
    c.heal();
    assert_eq!(settle(&mut c), fresh);
    assert!(!c
        .trace()
        .contains(&format!("{} candidate", ReplicaId(stale))));
    expect![[r#"
        641ms r1 crashed
        896ms r2 prospective e1 leader=r1
        901ms r3 prospective e1 leader=r1
        902ms r3 candidate e2 leader=-
        903ms r2 unattached e2 leader=-
        903ms r3 leader e2 leader=r3
        904ms r2 follower e2 leader=r3"#]]
    .assert_eq(&c.trace());
    assert_eq!(log_text(&c, stale), log_text(&c, fresh));
    assert_no_violations(&c);
}

#[test]
fn stranded_candidate_one_epoch_ahead_costs_at_most_one_leader_change() {
    // Goal: protocol reference 6.1 #12 (review F7). A voter that won a pre-vote round, became
    // a Candidate at E+1 and was then cut off is stranded one epoch ahead: D2 keeps its
    // pre-votes from moving anyone, and D3 refuses them, but epochs never go back, so it can
    // only rejoin in a newer epoch. On healing it deposes the healthy leader through its
    // FencedLeaderEpoch answer to the leader's BeginQuorumEpoch heartbeat (the trace shows the
    // leader r1 leaving at e2, then winning e3). The cost must stay bounded: the cluster
    // converges within the liveness bound, no committed record is lost, and the leader changes
    // at most once.
    // Method: strand r3 (see `strand_voter_one_epoch_ahead`), commit three records with the
    // remaining majority, keep r3 stranded for 1 s (its pre-vote rounds change nothing), heal,
    // settle, count the elections in the trace, and check that every replica's log still
    // starts with the records committed before healing.
    let mut c = cluster(1, 3, 0);
    let s = strand_voter_one_epoch_ahead(&mut c);
    for p in ["x", "y", "z"] {
        commit(&mut c, s.leader, p.as_bytes());
    }
    c.run_for(ms(1000));
    assert_eq!(c.leader(), Some(s.leader), "a stranded voter is harmless");
    assert_eq!(max_epoch(&c, &[s.leader, s.follower]), s.epoch);
    assert_eq!(c.replica(s.stranded).epoch(), s.epoch.next());
    let committed = c.committed().to_vec();
    let committed_text = log_text(&c, s.leader);
    assert_eq!(
        committed.len() as u64,
        c.replica(s.leader).log_end().offset.0
    );

    c.clear_trace();
    let healed_at = c.now();
    c.heal();
    let leader = settle(&mut c);
    assert!(
        c.now() - healed_at <= c.liveness_bound(),
        "converged within the bound"
    );
    let elections = c
        .trace()
        .lines()
        .filter(|line| line.split_whitespace().nth(2) == Some("leader"))
        .count();
    assert!(
        elections <= 1,
        "at most one extra leader change:\n{}",
        c.trace()
    );
    assert!(c.committed().starts_with(&committed), "no committed loss");
    for id in 1..=3 {
        assert!(
            log_text(&c, id).starts_with(&committed_text),
            "replica {id} lost committed records: {}",
            log_text(&c, id)
        );
    }
    commit(&mut c, leader, b"after");
    assert_eq!(settle(&mut c), leader);
    expect![[r#"
        1571ms r3 unattached e2 leader=-
        1633ms r1 unattached e2 leader=-
        1644ms r2 unattached e2 leader=-
        1736ms r1 prospective e2 leader=-
        1737ms r1 candidate e3 leader=-
        1738ms r2 unattached e3 leader=-
        1738ms r3 unattached e3 leader=-
        1739ms r1 leader e3 leader=r1
        1739ms r2 follower e3 leader=r1
        1739ms r3 follower e3 leader=r1"#]]
    .assert_eq(&c.trace());
    assert_no_violations(&c);
}
