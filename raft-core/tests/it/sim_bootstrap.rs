//! W2 under the simulator, scripted: a standalone founder grown to three voters loses its
//! disk and is restarted with its unchanged configuration (`voters = [1]`). Its start is
//! refused (empty storage, no other voter to learn from); the operator answers as the refusal
//! says, starting it with the voters it learns from the cluster, and it comes back as an
//! observer. With the rule switched off (planted `bootstrap-on-empty-disk`) it leads a cluster
//! of its own at once, and the checkers see the fork.

use raft_core::planted::Planted;
use raft_core::sim::{Cluster, ClusterOptions};
use raft_core::{ReplicaId, Role};

use crate::membership::add_and_commit;
use crate::{assert_no_violations, commit, ms, settle};

/// One voter grown to {1, 2, 3} (with "x" committed), whose founder then loses its disk and is
/// restarted with its own configuration; run for two seconds.
fn founder_wiped_and_restarted(planted: Option<Planted>) -> Cluster {
    let mut c = Cluster::new(ClusterOptions {
        seed: 37,
        voters: 1,
        observers: 2,
        planted,
        ..ClusterOptions::default()
    });
    let leader = settle(&mut c);
    assert_eq!(leader, 1);
    for id in [2, 3] {
        add_and_commit(&mut c, 1, id);
    }
    commit(&mut c, 1, b"x");
    c.wipe(1);
    c.restart(1);
    c.run_for(ms(2000));
    c
}

#[test]
fn a_standalone_founder_on_an_emptied_disk_is_refused_then_rejoins_as_an_observer() {
    // Goal (W2): the emptied founder never leads a cluster of its own; its refused start is
    // answered by a start with learned voters, as an observer of {2, 3}'s cluster, which
    // keeps committing. Method: grow from one voter to three, commit, wipe and restart the
    // founder, run two seconds, then commit "y" through the new leader.
    let mut c = founder_wiped_and_restarted(None);
    assert_eq!(c.refused_starts(), 1, "{}", c.trace());
    assert!(c.is_up(1), "started again with learned voters");
    let r1 = c.replica(1);
    assert_ne!(r1.role(), Role::Leader);
    assert!(
        !r1.voters().is_voter(ReplicaId(1), r1.config().directory),
        "the emptied founder acts as a voter: {}",
        r1.voters()
    );
    let leader = settle(&mut c);
    assert_ne!(leader, 1);
    commit(&mut c, leader, b"y");
    assert_no_violations(&c);

    // With the rule off the emptied founder is a standalone voter again: it elects itself and
    // commits on its own empty log, which the checkers report as committed records replaced.
    let c = founder_wiped_and_restarted(Some(Planted::BootstrapOnEmptyDisk));
    assert_eq!(c.refused_starts(), 0);
    assert!(
        c.violations()
            .iter()
            .any(|v| v.contains(": S4 ") || v.contains(": S6 ")),
        "no safety violation with the rule off:\n{:?}\n{}",
        c.violations(),
        c.trace()
    );
}
