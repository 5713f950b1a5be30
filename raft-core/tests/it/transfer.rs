//! Leadership transfer: the leader hands its role to a named voter once that voter holds the
//! whole log, with the target invited so that sticky voters grant it (decisions D3); a target
//! that cannot catch up makes the transfer lapse and the old leader carries on.

use raft_core::protocol::{ProposeError, TransferError};
use raft_core::{ReplicaId, Role};

use crate::{assert_no_violations, cluster, commit, ms, settle};

#[test]
fn transfer_hands_leadership_to_the_chosen_voter_in_one_election() {
    // Goal: the named voter becomes leader in the very next epoch, and no committed record is
    // lost. Method: commit a few records, transfer to each follower in turn, and check the new
    // leader, the epoch, and that both records and a new write commit under the new leader.
    let mut c = cluster(21, 3, 0);
    let mut leader = settle(&mut c);
    let before = commit(&mut c, leader, b"a");
    for _ in 0..2 {
        let target = (1..=3).find(|v| *v != leader).expect("three voters");
        let epoch = c.replica(leader).epoch();
        c.transfer_leadership(leader, target)
            .expect("the leader accepts a transfer to a voter");
        let moved = c.run_until_cond(ms(500), |c| c.leader() == Some(target));
        assert!(moved, "leadership did not move to {target}:\n{}", c.trace());
        assert_eq!(
            c.replica(target).epoch(),
            epoch.next(),
            "the transfer took more than one election:\n{}",
            c.trace()
        );
        leader = settle(&mut c);
        assert_eq!(leader, target);
        commit(&mut c, leader, b"b");
    }
    assert_eq!(
        c.committed()[before.offset.0 as usize].payload.as_ref(),
        b"a"
    );
    assert_no_violations(&c);
}

#[test]
fn transfer_refuses_writes_until_the_target_caught_up_and_lapses_if_it_cannot() {
    // Goal: while a transfer waits for its target, the leader accepts no write (so the target
    // can catch up); a target that cannot be reached makes the transfer lapse after one
    // election timeout (100 ms here) and the leader carries on in its epoch.
    let mut c = cluster(22, 3, 0);
    let leader = settle(&mut c);
    let target = (1..=3).find(|v| *v != leader).expect("three voters");
    c.cut(leader, target);
    // A write the target misses: it cannot catch up.
    commit(&mut c, leader, b"missed");
    let epoch = c.replica(leader).epoch();
    c.transfer_leadership(leader, target)
        .expect("the transfer starts");
    assert_eq!(
        c.propose(leader, b"during"),
        Err(ProposeError::Transferring {
            to: ReplicaId(target)
        })
    );
    assert_eq!(
        c.transfer_leadership(leader, target),
        Err(TransferError::InProgress {
            to: ReplicaId(target)
        })
    );
    c.run_for(ms(150));
    assert!(
        c.trace().contains("ended: Err(Timeout)"),
        "the transfer did not lapse:\n{}",
        c.trace()
    );
    assert_eq!(c.replica(leader).role(), Role::Leader);
    assert_eq!(c.replica(leader).epoch(), epoch);
    c.heal();
    commit(&mut c, leader, b"after");
    assert_no_violations(&c);
}

#[test]
fn transfer_is_refused_off_the_leader_and_to_a_non_voter() {
    // Goal: the refusals are typed and change nothing.
    let mut c = cluster(23, 3, 1);
    let leader = settle(&mut c);
    let follower = (1..=3).find(|v| *v != leader).expect("three voters");
    assert!(matches!(
        c.transfer_leadership(follower, leader),
        Err(TransferError::NotLeader { leader: Some(l), .. }) if l == ReplicaId(leader)
    ));
    assert_eq!(
        c.transfer_leadership(leader, leader),
        Err(TransferError::NotAVoter(ReplicaId(leader)))
    );
    // Replica 4 is an observer: it may not lead.
    assert_eq!(
        c.transfer_leadership(leader, 4),
        Err(TransferError::NotAVoter(ReplicaId(4)))
    );
    commit(&mut c, leader, b"still leading");
    assert_no_violations(&c);
}
