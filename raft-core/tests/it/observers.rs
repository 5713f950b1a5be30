//! Observers: they fetch and learn the high watermark, but never vote, never campaign, and
//! never count toward the high watermark or toward check-quorum.

use expect_test::expect;
use raft_core::{ReplicaId, Role};

use crate::*;

#[test]
fn observers_never_count_toward_the_high_watermark() {
    // Goal: with three voters and two observers, a leader that only observers still fetch
    // from cannot commit: the high watermark is a majority of voters' durable offsets.
    // Method: settle, then cut both voter followers off the leader and propose three records.
    // For 300 ms (less than the check-quorum window) the observers fetch every record but the
    // leader's high watermark does not move. Check-quorum also ignores observers: the leader
    // resigns within 450 ms. After healing, the records of the deposed leader are truncated
    // everywhere, including on the observers.
    let mut c = cluster(1, 3, 2);
    let l = settle(&mut c);
    let hwm = c.replica(l).high_watermark();
    let voters: Vec<u32> = (1..=3).filter(|&id| id != l).collect();
    for &v in &voters {
        c.cut(l, v);
    }
    c.clear_trace();
    let cut_at = c.now();
    for p in ["o1", "o2", "o3"] {
        c.propose(l, p.as_bytes()).expect("still leader");
    }
    c.run_for(ms(300));
    let end = c.replica(l).log_end();
    for obs in [4, 5] {
        assert_eq!(
            c.replica(obs).log_end(),
            end,
            "observer {obs} fetched everything"
        );
        assert_eq!(c.replica(obs).high_watermark(), hwm);
    }
    assert_eq!(c.replica(l).role(), Role::Leader);
    assert_eq!(
        c.replica(l).high_watermark(),
        hwm,
        "observers do not commit"
    );
    assert_eq!(c.committed().len() as u64, hwm.0);

    let resigned = c.run_until_cond(ms(200), |c| c.replica(l).role() != Role::Leader);
    assert!(resigned, "{}", c.trace());
    assert!(
        c.now() - cut_at <= ms(452),
        "observers' fetches kept the leader alive"
    );
    c.heal();
    settle(&mut c);
    for id in 1..=5 {
        assert!(
            !log_text(&c, id).contains("o1"),
            "replica {id}: {}",
            log_text(&c, id)
        );
    }
    expect![[r#"
        417ms r1 prospective e1 leader=r2
        417ms r3 prospective e1 leader=r2
        418ms r1 candidate e2 leader=-
        418ms r3 candidate e2 leader=-
        561ms r3 prospective e2 leader=-
        563ms r3 candidate e3 leader=-
        563ms r1 unattached e3 leader=-
        564ms r3 leader e3 leader=r3
        565ms r1 follower e3 leader=r3
        567ms r2 resigned e1 leader=r2
        708ms r2 unattached e2 leader=-
        711ms r4 unattached e2 leader=-
        711ms r5 unattached e2 leader=-
        763ms r4 follower e3 leader=r3
        763ms r5 follower e3 leader=r3
        824ms r2 prospective e2 leader=-
        825ms r2 follower e3 leader=r3"#]]
    .assert_eq(&c.trace());
    assert_no_violations(&c);
}

#[test]
fn observers_follow_the_leader_and_never_campaign() {
    // Goal: observers learn the committed records and the high watermark, and never become
    // Prospective or Candidate, even when the leader dies.
    // Method: three voters, two observers; commit three records and check the observers' logs
    // and high watermarks; crash the leader, let the voters elect a new one, and check the
    // observers' part of the trace: they only ever move between Unattached and Follower.
    let mut c = cluster(2, 3, 2);
    let l = settle(&mut c);
    for p in ["a", "b", "c"] {
        commit(&mut c, l, p.as_bytes());
    }
    settle(&mut c);
    for obs in [4, 5] {
        assert_eq!(log_text(&c, obs), log_text(&c, l));
        assert_eq!(
            c.replica(obs).high_watermark(),
            c.replica(l).high_watermark()
        );
    }
    c.crash(l);
    settle(&mut c);
    let observers_trace = trace_of(&c, &[4, 5]);
    assert!(!observers_trace.contains("prospective") && !observers_trace.contains("candidate"));
    expect![[r#"
        154ms r4 follower e1 leader=r1
        154ms r5 follower e1 leader=r1
        462ms r4 unattached e1 leader=-
        462ms r5 unattached e1 leader=-
        463ms r4 follower e1 leader=r1
        463ms r5 follower e1 leader=r1
        763ms r4 unattached e1 leader=-
        763ms r5 unattached e1 leader=-
        764ms r4 follower e3 leader=r3
        764ms r5 follower e3 leader=r3"#]]
    .assert_eq(&observers_trace);
    assert_no_violations(&c);
}

#[test]
fn observer_answered_from_an_older_epoch_keeps_probing() {
    // Goal: an observer whose probe is answered from an epoch older than its own drops the
    // answer as stale but keeps looking for the leader, and finds it once the network heals
    // (liveness L5).
    // The bug (review F4): the probe's in-flight flag was cleared only by the fetch handler,
    // which never ran for a stale answer, and an Unattached observer with a probe in flight
    // has no deadline. It never probed again, and nothing else ever contacts an observer.
    // Method: strand voter r3 as a Candidate one epoch ahead of the healthy leader (protocol
    // reference 6.1 #12). The observer loses the leader and reaches only r3, so it learns the
    // newer epoch from r3's answer. Then it reaches only the follower, still in the older
    // epoch, until the follower has answered a probe (stale to the observer), and 500 ms
    // more. After healing, the stranded voter deposes the leader (review F7) and the voters
    // elect one; the observer must follow it within one request timeout plus one long poll.
    let mut c = cluster(1, 3, 1);
    let obs = 4;
    let s = strand_voter_one_epoch_ahead(&mut c);
    let ahead = s.epoch.next();
    c.clear_trace();
    c.cut(obs, s.leader);
    c.cut(obs, s.follower);
    let learned = c.run_until_cond(ms(2000), |c| {
        c.replica(obs).epoch() == ahead && c.replica(obs).role() == Role::Unattached
    });
    assert!(
        learned,
        "the observer learned the newer epoch:\n{}",
        c.trace()
    );
    // Only the follower is reachable now: every answer it gives is stale to the observer.
    c.heal();
    c.cut(s.stranded, s.leader);
    c.cut(s.stranded, s.follower);
    c.cut(obs, s.stranded);
    c.cut(obs, s.leader);
    // The follower refuses the observer's probe (its epoch is newer), and its answer names
    // the older epoch. Probes to the other two voters fail after the request timeout.
    let refused = c.replica(s.follower).stats().refused_requests;
    let stale = c.replica(obs).stats().stale_responses;
    let answered = c.run_until_cond(ms(3000), |c| {
        c.replica(s.follower).stats().refused_requests > refused
    });
    assert!(answered, "the observer probed the follower:\n{}", c.trace());
    c.run_for(ms(500));
    assert!(
        c.replica(obs).stats().stale_responses > stale,
        "the observer counted the follower's answer as stale"
    );
    assert_eq!(c.replica(obs).epoch(), ahead);
    assert_eq!(c.replica(obs).role(), Role::Unattached);
    assert_eq!(c.leader(), Some(s.leader), "the voters were left alone");

    c.heal();
    let bound = c.liveness_bound();
    let voters_agree = c.run_until_cond(bound, |c| {
        c.leader().is_some_and(|l| {
            let epoch = c.replica(l).epoch();
            (1..=3).all(|v| {
                v == l
                    || (c.replica(v).leader() == Some(ReplicaId(l))
                        && c.replica(v).epoch() == epoch)
            })
        })
    });
    assert!(voters_agree, "the voters converged:\n{}", c.trace());
    let elected_at = c.now();
    let found = c.run_until_cond(ms(350), |c| {
        c.leader().is_some_and(|l| {
            c.replica(obs).role() == Role::Follower && c.replica(obs).leader() == Some(ReplicaId(l))
        })
    });
    assert!(
        found,
        "the observer did not find the leader within 350 ms of its election:\n{}",
        c.trace()
    );
    assert!(c.now() - elected_at <= ms(350));
    settle(&mut c);
    expect![[r#"
        599ms r3 prospective e2 leader=-
        702ms r3 unattached e2 leader=-
        807ms r3 prospective e2 leader=-
        812ms r4 unattached e1 leader=-
        813ms r4 unattached e2 leader=-
        998ms r3 unattached e2 leader=-
        1115ms r3 prospective e2 leader=-
        1274ms r3 unattached e2 leader=-
        1405ms r3 prospective e2 leader=-
        1599ms r3 unattached e2 leader=-
        1736ms r3 prospective e2 leader=-
        1906ms r3 unattached e2 leader=-
        2065ms r3 prospective e2 leader=-
        2183ms r3 unattached e2 leader=-
        2376ms r3 prospective e2 leader=-
        2478ms r3 unattached e2 leader=-
        2614ms r3 prospective e2 leader=-
        2615ms r1 unattached e2 leader=-
        2616ms r3 candidate e3 leader=-
        2616ms r1 unattached e3 leader=-
        2617ms r3 leader e3 leader=r3
        2618ms r1 follower e3 leader=r3
        2618ms r2 follower e3 leader=r3
        2686ms r4 follower e3 leader=r3"#]]
    .assert_eq(&c.trace());
    assert_no_violations(&c);
}
