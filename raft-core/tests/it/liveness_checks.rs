//! The simulator's liveness checks after healing (L3 to L5) fire on what they are meant to
//! catch: a replica that never learns who leads, a read that fails in a settled cluster, and
//! leadership that moves without a fault.

use raft_core::sim::{Cluster, ClusterOptions};

use crate::{ms, settle};

fn violations_with(prefix: &str, c: &Cluster) -> Vec<String> {
    c.violations()
        .iter()
        .filter(|v| v.contains(prefix))
        .cloned()
        .collect()
}

#[test]
fn an_observer_that_never_hears_from_the_leader_fails_l3() {
    // Goal: L3: every running replica must come to name the leader. Method: a settled cluster
    // of three voters and an observer; then the observer is cut off from everyone and forgets
    // the leader (its fetch timeout); the check must name it.
    // Control: the same cluster without the cut passes.
    for cut in [false, true] {
        let mut c = Cluster::new(ClusterOptions {
            seed: 31,
            voters: 3,
            observers: 1,
            ..ClusterOptions::default()
        });
        settle(&mut c);
        if cut {
            c.isolate(4);
            c.run_for(ms(1_000));
        }
        c.check_settled_now();
        let l3 = violations_with("L3", &c);
        assert_eq!(!l3.is_empty(), cut, "cut: {cut}: {:?}", c.violations());
        if cut {
            assert!(l3[0].contains("r4"), "{l3:?}");
        }
    }
}

#[test]
fn a_leader_deposed_without_a_fault_fails_l5() {
    // Goal: L5: a healed cluster keeps its leader. Method: pre-vote off, a follower cut from
    // the leader's messages (one way) times out and campaigns in a later epoch, which deposes
    // the leader although the other follower hears it fine; the check must report the move.
    // Control: with pre-vote on, the same cut deposes nobody (the other voters refuse a
    // pre-vote while they hear from a leader) and L5 holds.
    for pre_vote in [true, false] {
        let mut c = Cluster::new(ClusterOptions {
            seed: 32,
            pre_vote,
            ..ClusterOptions::default()
        });
        let leader = settle(&mut c);
        let follower = (1..=3).find(|f| *f != leader).expect("three voters");
        c.block(leader, follower);
        c.check_settled_now();
        let l5 = violations_with("L5", &c);
        assert_eq!(
            l5.is_empty(),
            pre_vote,
            "pre-vote {pre_vote}: {:?}",
            c.violations()
        );
    }
}

#[test]
fn a_read_that_fails_in_the_settled_cluster_fails_l4() {
    // Goal: L4: once the cluster settled, a read on any replica succeeds within its deadline.
    // Method: a settled cluster; then one follower's messages to the leader are lost (one
    // way), so its ReadIndex request never arrives, while it still names the leader; the check
    // must name that follower's read. Control: without the cut every read succeeds.
    for cut in [false, true] {
        let mut c = Cluster::new(ClusterOptions {
            seed: 33,
            ..ClusterOptions::default()
        });
        let leader = settle(&mut c);
        let follower = (1..=3).find(|f| *f != leader).expect("three voters");
        if cut {
            c.block(follower, leader);
        }
        c.check_settled_now();
        let l4 = violations_with("L4", &c);
        assert_eq!(!l4.is_empty(), cut, "cut: {cut}: {:?}", c.violations());
        if cut {
            assert!(l4[0].contains(&format!("r{follower} ")), "{l4:?}");
            assert!(!l4[0].contains(&format!("r{leader} ")), "{l4:?}");
        }
    }
}
