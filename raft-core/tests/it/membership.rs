//! Dynamic membership (KIP-853): voters added and removed one at a time through the log, the
//! leader removing itself, and a replica whose disk was lost coming back as a new replica.

use raft_core::protocol::{MembershipError, VoterChange};
use raft_core::{ReplicaId, Role, VoterSet};

use crate::{assert_no_violations, cluster, commit, ms, settle};

fn add(c: &raft_core::sim::Cluster, id: u32) -> VoterChange {
    VoterChange::Add {
        id: ReplicaId(id),
        directory: c.directory(id),
        endpoint: format!("host-{id}:9000"),
    }
}

/// Adds `id` on `leader` once caught up, then waits until the leader knows the change
/// committed (its high watermark reaches its log end with `id` in its set); fails with the
/// trace otherwise.
pub(crate) fn add_and_commit(c: &mut raft_core::sim::Cluster, leader: u32, id: u32) {
    assert!(
        add_when_caught_up(c, leader, id),
        "adding {id}:\n{}",
        c.trace()
    );
    let ok = c.run_until_cond(ms(1000), |c| {
        c.replica(leader).voters().contains_id(ReplicaId(id))
            && c.replica(leader).high_watermark() >= c.replica(leader).log_end().offset
    });
    assert!(ok, "adding {id} did not commit:\n{}", c.trace());
}

/// Adds `id` on `leader` once it has caught up (retrying refusals for a bounded while).
pub(crate) fn add_when_caught_up(c: &mut raft_core::sim::Cluster, leader: u32, id: u32) -> bool {
    for _ in 0..100 {
        let change = add(c, id);
        if c.change_voters(leader, change).is_ok() {
            return true;
        }
        c.run_for(ms(10));
    }
    false
}

fn ids(set: &VoterSet) -> Vec<u32> {
    set.ids().map(|r| r.0).collect()
}

#[test]
fn an_observer_is_added_and_then_counts_for_the_commit() {
    // Goal: a caught-up observer becomes a voter through the log; every replica acts on the new
    // set once it holds the record, and from then on the new voter is needed for a majority.
    // Method: one voter, one observer; add the observer, then cut it off and check that a write
    // no longer commits (two voters need both), then heal and check it does.
    let mut c = cluster(61, 1, 1);
    let leader = settle(&mut c);
    assert_eq!(leader, 1);
    commit(&mut c, leader, b"before");
    let id = c
        .change_voters(1, add(&c, 2))
        .expect("a caught-up observer is added");
    let spread = c.run_until_cond(ms(500), |c| {
        c.committed().len() > id.offset.0 as usize && ids(c.replica(2).voters()) == [1, 2]
    });
    assert!(
        spread,
        "the change did not commit everywhere:\n{}",
        c.trace()
    );
    assert_eq!(c.replica(2).role(), Role::Follower);
    c.isolate(2);
    let w = c.propose(1, b"needs-both").expect("the leader accepts");
    c.run_for(ms(100));
    assert!(
        c.committed().len() <= w.offset.0 as usize,
        "a write committed without the new voter:\n{}",
        c.trace()
    );
    c.heal();
    let ok = c.run_until_cond(ms(1000), |c| c.committed().len() > w.offset.0 as usize);
    assert!(ok, "the write did not commit after healing:\n{}", c.trace());
    assert_no_violations(&c);
}

#[test]
fn changes_are_refused_while_one_is_uncommitted_and_for_unknown_or_lagging_replicas() {
    // Goal: the leader's preconditions, each with its own error: one change at a time (tied to
    // the log: the record is uncommitted), ids are unique, removal needs a voter, and only a
    // replica fetching with exactly the key may be added.
    let mut c = cluster(62, 3, 2);
    let leader = settle(&mut c);
    commit(&mut c, leader, b"x");
    let voter = (1..=3).find(|v| *v != leader).expect("three voters");
    assert_eq!(
        c.change_voters(leader, add(&c, voter)),
        Err(MembershipError::Invalid(
            raft_core::voters::VoterSetError::Duplicate(ReplicaId(voter))
        ))
    );
    let wrong_directory = VoterChange::Add {
        id: ReplicaId(4),
        directory: raft_core::DirectoryId(c.directory(4).0 + 7),
        endpoint: String::new(),
    };
    assert!(matches!(
        c.change_voters(leader, wrong_directory),
        Err(MembershipError::NotCaughtUp { seen: Some(_), .. })
    ));
    assert!(matches!(
        c.change_voters(voter, add(&c, 4)),
        Err(MembershipError::NotLeader { .. })
    ));
    // Hold the followers' syncs: the first change cannot commit, so the second must wait.
    for v in (1..=3).filter(|v| *v != leader) {
        c.hold_syncs(v, true);
    }
    let first = c
        .change_voters(leader, add(&c, 4))
        .expect("the first change");
    c.run_for(ms(20));
    assert_eq!(
        c.change_voters(leader, add(&c, 5)),
        Err(MembershipError::ChangeInProgress {
            offset: first.offset
        })
    );
    for v in (1..=3).filter(|v| *v != leader) {
        c.hold_syncs(v, false);
    }
    let done = c.run_until_cond(ms(1000), |c| c.committed().len() > first.offset.0 as usize);
    assert!(done, "the first change did not commit:\n{}", c.trace());
    c.change_voters(leader, add(&c, 5))
        .expect("the second change once the first committed");
    assert_no_violations(&c);

    // With the rule switched off (planted `concurrent-changes`) the second change is
    // appended while the first is still uncommitted.
    let mut c = raft_core::sim::Cluster::new(raft_core::sim::ClusterOptions {
        seed: 62,
        voters: 3,
        observers: 2,
        planted: Some(raft_core::planted::Planted::ConcurrentChanges),
        ..raft_core::sim::ClusterOptions::default()
    });
    let leader = settle(&mut c);
    commit(&mut c, leader, b"x");
    for v in (1..=3).filter(|v| *v != leader) {
        c.hold_syncs(v, true);
    }
    c.change_voters(leader, add(&c, 4))
        .expect("the first change");
    c.run_for(ms(20));
    let second = c.change_voters(leader, add(&c, 5));
    assert!(
        second.is_ok(),
        "with the rule off a second change is taken at once: {second:?}"
    );
}

#[test]
fn a_leader_that_removes_itself_resigns_once_the_removal_commits() {
    // Goal: KIP-853's self-removal: the leader keeps leading (without counting itself) until
    // its removal commits, then resigns, and the remaining voters elect a leader among
    // themselves; the removed replica stays an observer and never campaigns again.
    let mut c = cluster(63, 3, 0);
    let leader = settle(&mut c);
    commit(&mut c, leader, b"x");
    let removal = c
        .change_voters(
            leader,
            VoterChange::Remove {
                id: ReplicaId(leader),
                directory: None,
            },
        )
        .expect("a leader may remove itself");
    let moved = c.run_until_cond(ms(2000), |c| {
        c.committed().len() > removal.offset.0 as usize && c.leader().is_some_and(|l| l != leader)
    });
    assert!(moved, "no other leader after the removal:\n{}", c.trace());
    let next = settle(&mut c);
    assert_ne!(next, leader);
    assert!(!c.replica(next).voters().contains_id(ReplicaId(leader)));
    commit(&mut c, next, b"after");
    c.run_for(ms(1500));
    assert_ne!(
        c.replica(leader).role(),
        Role::Leader,
        "the removed replica led again"
    );
    assert_no_violations(&c);
}

#[test]
fn a_replica_with_a_lost_disk_is_a_new_replica_until_replaced() {
    // Goal: F8 (amnesia). A voter added with its directory id loses its disk and comes back
    // with a new one: it is not that voter (its fetches do not count), and it becomes one again
    // only by remove (old key) then add (new key). Method: grow to three voters with directory
    // ids, wipe one, check the set still names the old key and the wiped replica is an
    // observer, then replace it and check a write needs it again.
    let mut c = cluster(64, 1, 2);
    settle(&mut c);
    for id in [2, 3] {
        add_and_commit(&mut c, 1, id);
    }
    let old = c.directory(3);
    c.wipe(3);
    c.restart(3);
    assert_ne!(c.directory(3), old);
    let caught_up = c.run_until_cond(ms(2000), |c| {
        c.replica(3).log_end().offset >= c.replica(1).log_end().offset
    });
    assert!(
        caught_up,
        "the new replica did not catch up:\n{}",
        c.trace()
    );
    let set = c.replica(3).voters().clone();
    assert_eq!(set.get(ReplicaId(3)).and_then(|v| v.directory), Some(old));
    assert_ne!(c.replica(3).role(), Role::Leader);
    // Replace: remove the old key, then add the new one.
    let removed = c
        .change_voters(
            1,
            VoterChange::Remove {
                id: ReplicaId(3),
                directory: Some(old),
            },
        )
        .expect("the old key is removed");
    let ok = c.run_until_cond(ms(1000), |c| {
        c.committed().len() > removed.offset.0 as usize
    });
    assert!(ok, "the removal did not commit:\n{}", c.trace());
    assert!(
        add_when_caught_up(&mut c, 1, 3),
        "the new key was not added:\n{}",
        c.trace()
    );
    let ok = c.run_until_cond(ms(1000), |c| {
        c.replica(3)
            .voters()
            .get(ReplicaId(3))
            .and_then(|v| v.directory)
            == Some(c.directory(3))
    });
    assert!(ok, "the new key did not reach the replica:\n{}", c.trace());
    commit(&mut c, 1, b"after-replace");
    assert_no_violations(&c);
}

#[test]
fn two_voters_recover_when_the_leader_removes_itself_and_fails_before_the_other_heard() {
    // Goal: membership.md E6. The leader of {1, 2} removes itself, and crashes before 2
    // fetched the removal. 2 still acts on {1, 2} and needs 1's vote, which its shorter log
    // cannot get; 1 acts on {2}. KRaft never lets 1 campaign (it is outside its newest set):
    // nobody could win. With the Raft thesis rule (docs/spec-deviations.md 5a) 1 campaigns
    // without counting itself, 2 elects it, the removal commits, 1 resigns and 2 leads alone.
    let (mut c, other, recovered) = self_removal_then_crash(None);
    assert!(
        recovered,
        "the cluster did not recover from the self-removal:\n{}",
        c.trace()
    );
    commit(&mut c, other, b"after");
    assert_no_violations(&c);
    // With KRaft's rule (planted `no-campaign-when-removed`: a replica outside its newest set
    // never campaigns) the same run stays leaderless.
    let planted = Some(raft_core::planted::Planted::NoCampaignWhenRemoved);
    let (c, _, recovered) = self_removal_then_crash(planted);
    assert!(
        !recovered,
        "recovered although the removed leader may not campaign:\n{}",
        c.trace()
    );
}

/// The leader of {1, 2} removes itself, cut off from the other voter, and crashes before the
/// other fetched the removal; then the network heals and it restarts. Returns the cluster,
/// the other voter, and whether within 5 s it leads a set of itself alone.
fn self_removal_then_crash(
    planted: Option<raft_core::planted::Planted>,
) -> (raft_core::sim::Cluster, u32, bool) {
    let mut c = raft_core::sim::Cluster::new(raft_core::sim::ClusterOptions {
        seed: 65,
        voters: 2,
        observers: 0,
        planted,
        ..raft_core::sim::ClusterOptions::default()
    });
    let leader = settle(&mut c);
    let other = 3 - leader;
    commit(&mut c, leader, b"x");
    c.cut(leader, other);
    c.change_voters(
        leader,
        VoterChange::Remove {
            id: ReplicaId(leader),
            directory: None,
        },
    )
    .expect("the leader may remove itself");
    c.run_for(ms(5));
    c.crash(leader);
    c.heal();
    c.restart(leader);
    let recovered = c.run_until_cond(ms(5000), |c| {
        c.leader() == Some(other) && ids(c.replica(other).voters()) == [other]
    });
    (c, other, recovered)
}

/// The core of r3 (directory 33) in a fresh three-voter cluster, driven by hand.
fn lone_core_of_r3() -> raft_core::protocol::Replica {
    use raft_core::io::LogState;
    use raft_core::protocol::{Replica, VoterHistory};
    use raft_core::{Config, DirectoryId, Instant};

    let mut cfg = Config::new(ReplicaId(3), [ReplicaId(1), ReplicaId(2), ReplicaId(3)]);
    cfg.directory = Some(DirectoryId(33));
    let cfg = cfg.validate().unwrap();
    let voters = VoterHistory::new(cfg.bootstrap_voters());
    Replica::new(cfg, None, &LogState::default(), None, voters, 7, Instant(0))
}

#[test]
fn a_vote_binds_the_candidates_directory() {
    // Goal: KAFKA-16526. A replica that voted for (r2, directory A) in an epoch gives no vote in
    // that epoch to (r2, directory B), which is another replica (r2's disk was replaced), and
    // the binding survives in the durable election state. Method: drive one replica's core by
    // hand: a vote request from A, its persist, then the same request from B.
    use raft_core::message::{Request, RequestId, Response, VoteRequest};
    use raft_core::protocol::{Input, Outgoing, Outputs};
    use raft_core::{DirectoryId, Epoch, Instant, OffsetAndEpoch};

    let mut r = lone_core_of_r3();
    let mut out = Outputs::default();
    let ask = |directory: u128| {
        Request::Vote(VoteRequest {
            epoch: Epoch(1),
            candidate: ReplicaId(2),
            voter: ReplicaId(3),
            voter_directory: None,
            candidate_directory: Some(DirectoryId(directory)),
            last: OffsetAndEpoch::default(),
            pre_vote: false,
            leader_invited: false,
        })
    };
    let granted = |out: &Outputs| {
        out.messages.iter().find_map(|m| match m {
            Outgoing::Response {
                response: Response::Vote(v),
                ..
            } => Some(v.granted),
            _ => None,
        })
    };
    r.step(
        Instant(1),
        Input::Request {
            from: ReplicaId(2),
            id: RequestId(1),
            request: ask(0xA),
        },
        &mut out,
    );
    let (seq, state) = out.persist.take().expect("the vote is persisted first");
    assert_eq!(state.voted_directory, Some(DirectoryId(0xA)));
    out.clear();
    r.step(Instant(2), Input::ElectionPersisted(seq), &mut out);
    assert_eq!(
        granted(&out),
        Some(true),
        "the first candidate gets the vote"
    );
    out.clear();
    r.step(
        Instant(3),
        Input::Request {
            from: ReplicaId(2),
            id: RequestId(2),
            request: ask(0xB),
        },
        &mut out,
    );
    assert_eq!(
        granted(&out),
        Some(false),
        "the same id with another directory is another replica"
    );
    out.clear();
    r.step(
        Instant(4),
        Input::Request {
            from: ReplicaId(2),
            id: RequestId(3),
            request: ask(0xA),
        },
        &mut out,
    );
    assert_eq!(
        granted(&out),
        Some(true),
        "the voted candidate may ask again"
    );
    // A request aimed at this id's previous directory is not for this replica.
    out.clear();
    let Request::Vote(mut aimed) = ask(0xA) else {
        unreachable!("a vote request")
    };
    aimed.voter_directory = Some(DirectoryId(34));
    let request = Request::Vote(aimed);
    r.step(
        Instant(5),
        Input::Request {
            from: ReplicaId(2),
            id: RequestId(4),
            request,
        },
        &mut out,
    );
    let error = out.messages.iter().find_map(|m| match m {
        Outgoing::Response {
            response: Response::Vote(v),
            ..
        } => Some(v.error),
        _ => None,
    });
    assert_eq!(
        error,
        Some(Some(raft_core::message::ErrorCode::WrongReceiver))
    );
}

/// A new leader of three voters, cut off as soon as it is elected: nothing committed in its
/// epoch. Returns the cluster and the leader.
fn fresh_leader(planted: Option<raft_core::planted::Planted>) -> (raft_core::sim::Cluster, u32) {
    let mut c = raft_core::sim::Cluster::new(raft_core::sim::ClusterOptions {
        seed: 66,
        voters: 3,
        observers: 1,
        planted,
        ..raft_core::sim::ClusterOptions::default()
    });
    let old = settle(&mut c);
    commit(&mut c, old, b"x");
    c.crash(old);
    // Stop at the first event that shows the new leader, and cut it off before any follower
    // acknowledges its LeaderChange record.
    let elected = c.run_until_cond(ms(2000), |c| c.leader().is_some_and(|l| l != old));
    assert!(elected, "no new leader:\n{}", c.trace());
    let leader = c.leader().expect("elected");
    c.isolate(leader);
    (c, leader)
}

#[test]
fn a_leader_changes_voters_only_after_committing_in_its_epoch() {
    // Goal: the fix of Raft's single-server change bug (M14): a new leader may hold an
    // uncommitted change of an earlier leader, so it changes nothing before its own epoch's
    // first record commits. Method: cut a just-elected leader off before any follower
    // acknowledged its LeaderChange record, ask for a change: refused as NotReady; with the
    // rule switched off (planted `change-before-commit`) the same request is accepted; heal
    // and the change is accepted once the epoch's record committed.
    let (mut c, leader) = fresh_leader(None);
    let change = add(&c, 4);
    assert_eq!(
        c.change_voters(leader, change.clone()),
        Err(MembershipError::NotReady)
    );
    assert_eq!(
        c.replica(leader).role(),
        raft_core::Role::Leader,
        "still leading"
    );
    c.heal();
    let ok = c.run_until_cond(ms(2000), |c| {
        c.replica(leader).high_watermark() >= c.replica(leader).log_end().offset
    });
    assert!(ok, "the new epoch did not commit:\n{}", c.trace());
    assert!(
        add_when_caught_up(&mut c, leader, 4),
        "the change once committed:\n{}",
        c.trace()
    );

    let (mut c, leader) = fresh_leader(Some(raft_core::planted::Planted::ChangeBeforeCommit));
    let change = add(&c, 4);
    let accepted = c.change_voters(leader, change);
    assert!(
        !matches!(accepted, Err(MembershipError::NotReady)),
        "with the rule off the leader does not wait: {accepted:?}"
    );
}

/// Leader 1 of keyed voters {1, 2, 3} holds a write that voter 3 acknowledged and voter 2 never
/// saw, not yet durable on the leader itself; then voter 3's disk is lost and it comes back
/// fetching with a new directory. Returns the cluster and the write.
fn write_acked_only_by_a_lost_disk(
    planted: Option<raft_core::planted::Planted>,
) -> (raft_core::sim::Cluster, raft_core::OffsetAndEpoch) {
    let mut c = raft_core::sim::Cluster::new(raft_core::sim::ClusterOptions {
        seed: 67,
        voters: 1,
        observers: 2,
        planted,
        ..raft_core::sim::ClusterOptions::default()
    });
    settle(&mut c);
    for id in [2, 3] {
        add_and_commit(&mut c, 1, id);
    }
    c.cut(1, 2);
    c.hold_syncs(1, true);
    let w = c.propose(1, b"w").expect("the leader accepts");
    let acked = c.run_until_cond(ms(100), |c| c.replica(3).log_end().offset > w.offset);
    assert!(acked, "voter 3 did not fetch the write:\n{}", c.trace());
    c.run_for(ms(20));
    assert!(
        c.replica(1).high_watermark() <= w.offset,
        "not durable on the leader yet"
    );
    c.wipe(3);
    c.restart(3);
    c.run_for(ms(60));
    c.hold_syncs(1, false);
    c.run_for(ms(60));
    (c, w)
}

#[test]
fn a_lost_disks_acknowledgements_stop_counting_once_its_replacement_fetches() {
    // Goal: once a voter's id fetches with another directory, the leader knows that voter's
    // disk is gone, and what it acknowledged no longer counts toward a commit: a write held
    // only by the leader and the lost disk does not commit. With the rule switched off
    // (planted `stale-progress-across-directories`) it does, on one durable copy.
    let (mut c, w) = write_acked_only_by_a_lost_disk(None);
    assert!(
        c.replica(1).high_watermark() <= w.offset,
        "committed on a lost disk's acknowledgement:\n{}",
        c.trace()
    );
    c.heal();
    let ok = c.run_until_cond(ms(1000), |c| c.replica(1).high_watermark() > w.offset);
    assert!(
        ok,
        "the write did not commit once voter 2 fetched:\n{}",
        c.trace()
    );
    assert_no_violations(&c);

    let (c, w) = write_acked_only_by_a_lost_disk(Some(
        raft_core::planted::Planted::StaleProgressAcrossDirectories,
    ));
    assert!(
        c.replica(1).high_watermark() > w.offset,
        "with the rule off the stale acknowledgement counts:\n{}",
        c.trace()
    );
}

/// Strands a voter one epoch ahead of the leader, then removes it while it cannot hear of the
/// removal, and heals. Returns the cluster and the removed voter.
fn removed_voter_ahead_in_epoch(
    planted: Option<raft_core::planted::Planted>,
) -> (raft_core::sim::Cluster, u32) {
    let mut c = raft_core::sim::Cluster::new(raft_core::sim::ClusterOptions {
        seed: 71,
        voters: 3,
        planted,
        ..raft_core::sim::ClusterOptions::default()
    });
    let s = crate::strand_voter_one_epoch_ahead(&mut c);
    let removal = c
        .change_voters(
            s.leader,
            VoterChange::Remove {
                id: ReplicaId(s.stranded),
                directory: None,
            },
        )
        .expect("the leader removes the stranded voter");
    let ok = c.run_until_cond(ms(1000), |c| {
        c.replica(s.leader).high_watermark() > removal.offset
    });
    assert!(ok, "the removal committed:\n{}", c.trace());
    assert!(
        c.replica(s.stranded)
            .voters()
            .contains_id(ReplicaId(s.stranded)),
        "the stranded voter has not heard of its removal"
    );
    c.heal();
    (c, s.stranded)
}

#[test]
fn a_removed_voter_stranded_in_a_later_epoch_is_taken_back() {
    // Goal: a voter that campaigned into a later epoch and was removed before it heard of it
    // believes it still votes, so it does not probe as an observer, and no BeginQuorumEpoch
    // reaches it (it is not a voter of the leader's set); its pre-votes reach the sticky
    // leader. The leader steps down to the candidate's epoch on such a request, and the next
    // election takes the stranded replica back: it follows the leader and learns its removal.
    // With that rule switched off (planted `ignore-later-candidates`), it stays leaderless.
    let (mut c, stranded) = removed_voter_ahead_in_epoch(None);
    let bound = c.liveness_bound();
    let back = c.run_until_cond(bound, |c| {
        c.replica(stranded).leader().is_some()
            && !c
                .replica(stranded)
                .voters()
                .contains_id(ReplicaId(stranded))
    });
    assert!(back, "the stranded replica came back:\n{}", c.trace());
    assert_no_violations(&c);

    let (mut c, stranded) =
        removed_voter_ahead_in_epoch(Some(raft_core::planted::Planted::IgnoreLaterCandidates));
    let bound = c.liveness_bound();
    c.run_for(bound);
    assert_eq!(
        c.replica(stranded).leader(),
        None,
        "with the rule off it stays leaderless:\n{}",
        c.trace()
    );
}

#[test]
fn begin_quorum_epoch_for_another_directory_changes_nothing() {
    // Goal: KIP-853's receiver check on BeginQuorumEpoch. A leader whose set names this id
    // with a previous directory (the disk was replaced) is not this replica's leader: the
    // request is answered WrongReceiver and the replica neither adopts the epoch nor follows.
    // Method: one replica's core by hand, the request aimed at another directory, then at its
    // own, which it accepts (the control).
    use raft_core::message::{BeginQuorumEpochRequest, ErrorCode, Request, RequestId, Response};
    use raft_core::protocol::{Input, Outgoing, Outputs};
    use raft_core::{DirectoryId, Epoch, Instant, Role};

    let mut r = lone_core_of_r3();
    let begin = |directory: u128, id: u64| Input::Request {
        from: ReplicaId(1),
        id: RequestId(id),
        request: Request::BeginQuorumEpoch(BeginQuorumEpochRequest {
            epoch: Epoch(4),
            leader: ReplicaId(1),
            voter: ReplicaId(3),
            voter_directory: Some(DirectoryId(directory)),
        }),
    };
    let error = |out: &Outputs| {
        out.messages.iter().find_map(|m| match m {
            Outgoing::Response {
                response: Response::BeginQuorumEpoch(e),
                ..
            } => Some(e.error),
            _ => None,
        })
    };
    let mut out = Outputs::default();
    r.step(Instant(1), begin(34, 1), &mut out);
    assert_eq!(error(&out), Some(Some(ErrorCode::WrongReceiver)));
    assert!(out.persist.is_none(), "nothing is persisted");
    assert_eq!(r.epoch(), Epoch(0), "the epoch is not adopted");
    assert_ne!(r.role(), Role::Follower, "it follows no one");
    out.clear();
    r.step(Instant(2), begin(33, 2), &mut out);
    let (seq, state) = out.persist.take().expect("the new epoch is persisted");
    assert_eq!((state.epoch, state.leader), (Epoch(4), Some(ReplicaId(1))));
    out.clear();
    r.step(Instant(3), Input::ElectionPersisted(seq), &mut out);
    assert_eq!(r.epoch(), Epoch(4));
    assert_eq!(r.role(), Role::Follower);
}
