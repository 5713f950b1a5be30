//! The leader's voter changes driven by hand, at the edges of what it refuses: an observer that
//! stopped being caught up or stopped fetching, a change while a voter set record waits in the
//! leader's batch, and a change before the leader's election state is durable.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use raft_core::codec::encode_voters;
use raft_core::message::{FetchRequest, ReadBarrier, Request, RequestId, Response};
use raft_core::protocol::{Input, LogOp, MembershipError, Outputs, Replica, VoterChange};
use raft_core::voters::VoterSet;
use raft_core::{Config, DirectoryId, Epoch, Instant, Offset, Record, RecordKind, ReplicaId, Role};

use crate::by_hand::{
    begin_quorum_epoch, candidate_and_grant, core, established_leader, fetch_from, fetch_ok,
    request_to, step, sync_last_append,
};

/// The directory observer r4 fetches with.
const DIR: DirectoryId = DirectoryId(44);

/// A fetch from observer r4 with [`DIR`] at `offset`, in epoch 1.
fn observer_fetch(offset: Offset) -> Input {
    Input::Request {
        from: ReplicaId(4),
        id: RequestId(4_000 + offset.0),
        request: Request::Fetch(FetchRequest {
            epoch: Epoch(1),
            replica: ReplicaId(4),
            replica_directory: Some(DIR),
            fetch_offset: offset,
            last_fetched_epoch: Epoch(1),
            high_watermark: None,
            read_barrier: ReadBarrier::default(),
            max_wait: Duration::ZERO,
            max_bytes: 1 << 20,
        }),
    }
}

/// Adding r4 with [`DIR`].
fn add_r4() -> VoterChange {
    VoterChange::Add {
        id: ReplicaId(4),
        directory: DIR,
        endpoint: "r4:9000".into(),
    }
}

/// Asks `r` at `now` for `change`.
fn change(r: &mut Replica, now: u64, change: VoterChange) -> Result<(), MembershipError> {
    let mut out = Outputs::default();
    r.change_voters(Instant(now), change, &mut out).map(|_| ())
}

/// An established leader r1 (with `tune`) whose observer r4 fetched at its log end at the
/// returned time.
fn leader_with_caught_up_observer(tune: impl FnOnce(&mut Config)) -> (Replica, u64) {
    let (mut r, now) = established_leader(tune);
    let end = r.log_end().offset;
    step(&mut r, now, observer_fetch(end));
    (r, now)
}

fn is_not_caught_up(result: &Result<(), MembershipError>) -> bool {
    matches!(result, Err(MembershipError::NotCaughtUp { .. }))
}

#[test]
fn an_observer_counts_as_caught_up_for_one_fetch_timeout_after_it_reached_the_end() {
    // Goal: an observer may be added while less than one fetch timeout (2 s) has passed since
    // a fetch of it reached the log end, and no longer from then on.
    let fetch_timeout = 2_000_000_000;
    let (mut r, t) = leader_with_caught_up_observer(|_| {});
    assert_eq!(change(&mut r, t + fetch_timeout - 1, add_r4()), Ok(()));
    let (mut r, t) = leader_with_caught_up_observer(|_| {});
    assert!(is_not_caught_up(&change(
        &mut r,
        t + fetch_timeout,
        add_r4()
    )));
}

#[test]
fn an_observer_back_with_a_new_directory_is_judged_by_its_new_disk() {
    // Goal: a replica fetching under a known id with another directory is another replica (a
    // wiped disk): what the old directory caught up with is not its, so it may not be added
    // until the new disk has caught up (planted `stale-progress-across-directories` keeps the
    // old progress).
    // Method: observer r4 with DIR fetches at the log end; r4 with a new directory fetches
    // from offset 0; adding it is refused as not caught up; once it fetched at the end, the
    // same change is accepted.
    let (mut r, now) = leader_with_caught_up_observer(|_| {});
    let wiped = DirectoryId(45);
    step(&mut r, now, voter_fetch(4, Some(wiped), Offset(0)));
    let add = || VoterChange::Add {
        id: ReplicaId(4),
        directory: wiped,
        endpoint: "r4:9000".into(),
    };
    assert!(
        is_not_caught_up(&change(&mut r, now, add())),
        "judged by its lost disk"
    );
    let end = r.log_end().offset;
    step(&mut r, now, voter_fetch(4, Some(wiped), end));
    assert_eq!(change(&mut r, now, add()), Ok(()));
}

#[test]
fn an_observer_must_still_be_fetching_two_long_polls_and_a_request_timeout_later() {
    // Goal: a caught-up observer must also be fetching now: its last fetch less than two long
    // polls (2 x 500 ms) plus a request timeout (2 s) ago, so that a replica that died just
    // after catching up is not added. Method: a fetch timeout of 10 s, so that being caught up
    // is not what decides; the change is asked for 2.5 s (accepted) and 3 s (refused) after
    // the observer's only fetch.
    let tune = |c: &mut Config| c.fetch_timeout = Duration::from_secs(10);
    let (mut r, t) = leader_with_caught_up_observer(tune);
    assert_eq!(change(&mut r, t + 2_500_000_000, add_r4()), Ok(()));
    let (mut r, t) = leader_with_caught_up_observer(tune);
    assert!(is_not_caught_up(&change(
        &mut r,
        t + 3_000_000_000,
        add_r4()
    )));
}

#[test]
fn only_a_voter_set_record_in_the_leaders_batch_blocks_a_change() {
    // Goal: one voter change at a time counts a voter set record still lingering in the
    // leader's batch, and nothing else there. Method: a leader that lingers a second before
    // appending; a proposal waits in the batch and a change is still accepted; a second
    // change is refused, naming the first one's record, right after the proposal.
    let (mut r, t) = leader_with_caught_up_observer(|c| c.append_linger = Duration::from_secs(1));
    let mut out = Outputs::default();
    let proposal = r
        .propose(Instant(t), Bytes::from_static(b"x"), &mut out)
        .expect("the leader takes a proposal");
    assert!(
        !out.log.iter().any(|op| matches!(op, LogOp::Append { .. })),
        "the proposal lingers"
    );
    assert_eq!(change(&mut r, t, add_r4()), Ok(()));
    let remove = VoterChange::Remove {
        id: ReplicaId(3),
        directory: None,
    };
    assert_eq!(
        change(&mut r, t, remove),
        Err(MembershipError::ChangeInProgress {
            offset: proposal.offset.next()
        }),
        "the first change's record follows the proposal"
    );
}

#[test]
fn a_leader_whose_election_state_is_not_durable_changes_nothing() {
    // Goal: the leader refuses voter changes until its election state is durable, even once
    // it committed in its epoch. Method: r1 wins, its epoch-start record is synced and r2
    // fetches it, but the persist of r1's election state has not landed; the removal of r3 is
    // refused as not ready, and accepted once the persist lands.
    let (mut r, now, granted) = candidate_and_grant(|_| {});
    let mut out = Outputs::default();
    r.step(Instant(now), granted, &mut out);
    let (persist, _) = out.persist.expect("the leader persists its election state");
    let seq = out
        .log
        .iter()
        .find_map(|op| match op {
            LogOp::Append { seq, .. } => Some(*seq),
            _ => None,
        })
        .expect("the epoch-start record is appended");
    let mut later = Outputs::default();
    r.step(Instant(now), Input::LogPersisted(seq), &mut later);
    let end = r.log_end().offset;
    r.step(
        Instant(now),
        fetch_from(2, end, ReadBarrier::default()),
        &mut later,
    );
    assert_eq!(r.high_watermark(), end, "committed in its epoch");
    let remove = || VoterChange::Remove {
        id: ReplicaId(3),
        directory: None,
    };
    assert_eq!(
        change(&mut r, now, remove()),
        Err(MembershipError::NotReady)
    );
    r.step(Instant(now), Input::ElectionPersisted(persist), &mut later);
    assert_eq!(r.role(), Role::Leader);
    assert_eq!(change(&mut r, now, remove()), Ok(()));
}

/// A fetch from voter `replica` with `directory` at `offset`, in epoch 1.
fn voter_fetch(replica: u32, directory: Option<DirectoryId>, offset: Offset) -> Input {
    let mut fetch = observer_fetch(offset);
    if let Input::Request { from, request, .. } = &mut fetch {
        *from = ReplicaId(replica);
        if let Request::Fetch(f) = request {
            f.replica = ReplicaId(replica);
            f.replica_directory = directory;
        }
    }
    fetch
}

/// The leader's view of replica `id`: its directory and fetch offset, among the voters or
/// among the observers.
fn progress(
    r: &Replica,
    now: u64,
    voters: bool,
    id: u32,
) -> Option<(Option<DirectoryId>, Option<Offset>)> {
    let status = r.status(Instant(now));
    let list = if voters {
        status.voters
    } else {
        status.observers
    };
    list.iter()
        .find(|p| p.replica == ReplicaId(id))
        .map(|p| (p.directory, p.end_offset))
}

#[test]
fn a_new_voter_keeps_its_progress_and_the_voters_keep_theirs_across_changes() {
    // Goal: when the voter set changes, the leader carries each replica's progress over: an
    // added observer's becomes its voter progress, the other voters (a keyed one included)
    // keep theirs, and an observer fetching under a voter's id with another directory (a
    // voter that lost its disk) stays an observer with its own progress.
    // Method: r4 is added (keyed with its directory) and the change committed; r4 then
    // fetches once with another directory; r3 is removed.
    let (mut r, t) = leader_with_caught_up_observer(|_| {});
    let end = r.log_end().offset;
    let mut out = Outputs::default();
    r.change_voters(Instant(t), add_r4(), &mut out)
        .expect("r4 is caught up");
    sync_last_append(&mut r, t, &out, "the voter set record");
    assert_eq!(
        progress(&r, t, true, 4),
        Some((Some(DIR), Some(end))),
        "r4's fetch carried over"
    );
    assert_eq!(progress(&r, t, false, 4), None, "no longer an observer");
    let end = r.log_end().offset;
    step(&mut r, t, fetch_from(2, end, ReadBarrier::default()));
    step(&mut r, t, observer_fetch(end));
    assert_eq!(r.high_watermark(), end, "the addition committed");
    let lost = DirectoryId(45);
    step(&mut r, t, voter_fetch(4, Some(lost), Offset::ZERO));
    let remove = VoterChange::Remove {
        id: ReplicaId(3),
        directory: None,
    };
    assert_eq!(change(&mut r, t, remove), Ok(()));
    assert_eq!(
        progress(&r, t, true, 2),
        Some((None, Some(end))),
        "r2 kept its progress"
    );
    assert_eq!(
        progress(&r, t, true, 4).map(|p| p.0),
        Some(Some(DIR)),
        "r4 is still a voter"
    );
    assert_eq!(progress(&r, t, true, 3), None, "r3 is no voter");
    assert_eq!(
        progress(&r, t, false, 4),
        Some((Some(lost), Some(Offset::ZERO))),
        "the replica under r4's id with another directory is still an observer"
    );
}

#[test]
fn a_leader_that_removed_itself_resigns_only_once_the_removal_is_committed() {
    // Goal: a leader outside the set in force leaves once the record that removed it is
    // committed, not when everything before that record is. Method: r1 takes a write, then
    // removes itself; r2 and r3 acknowledge up to the record (the high watermark moves to its
    // offset), then past it.
    let (mut r, t) = established_leader(|_| {});
    let mut out = Outputs::default();
    // A write ahead of the removal, so that the high watermark moves to the record's offset
    // (rather than already standing there).
    r.propose(Instant(t), Bytes::from_static(b"x"), &mut out)
        .expect("the leader takes a proposal");
    let remove = VoterChange::Remove {
        id: ReplicaId(1),
        directory: None,
    };
    let record = r
        .change_voters(Instant(t), remove, &mut out)
        .expect("a leader may remove itself");
    sync_last_append(&mut r, t, &out, "the voter set record");
    for voter in [2, 3] {
        step(
            &mut r,
            t,
            fetch_from(voter, record.offset, ReadBarrier::default()),
        );
    }
    assert_eq!(r.high_watermark(), record.offset);
    assert_eq!(r.role(), Role::Leader, "the removal is not committed yet");
    for voter in [2, 3] {
        step(
            &mut r,
            t,
            fetch_from(voter, record.offset.next(), ReadBarrier::default()),
        );
    }
    assert!(r.high_watermark() > record.offset);
    assert_eq!(r.role(), Role::Resigned, "committed: it leaves");
}

/// Voter r3 of three, following r1 in epoch 1, after r1's answer brought the epoch-start
/// record and a voter set record removing r3 at offset 1, with the high watermark `hwm`; the
/// records are durable. Returns it and the time.
fn removed_follower(hwm: u64) -> (Replica, u64) {
    let mut r = core(3, 3, |_| {});
    let now = 1_000;
    let out = step(&mut r, now, begin_quorum_epoch(1, 1, 1, 3));
    let fetch =
        request_to(&out, 1, |q| matches!(q, Request::Fetch(_))).expect("the follower fetches");
    let mut set = BytesMut::new();
    let remaining = VoterSet::from_ids([ReplicaId(1), ReplicaId(2)]);
    encode_voters(&remaining, &mut set);
    let record = |offset: u64, kind: RecordKind, payload: Bytes| Record {
        offset: Offset(offset),
        epoch: Epoch(1),
        kind,
        payload,
    };
    let mut answer = fetch_ok(1, 1, Some(Offset(hwm)));
    answer.records = vec![
        record(0, RecordKind::LeaderChange, Bytes::new()),
        record(1, RecordKind::Voters, set.freeze()),
    ];
    let input = Input::Response {
        from: ReplicaId(1),
        id: fetch,
        response: Response::Fetch(answer),
    };
    let out = step(&mut r, now, input);
    sync_last_append(&mut r, now, &out, "the records");
    assert_eq!(r.high_watermark(), Offset(hwm));
    (r, now)
}

/// Whether `r` stands for election (a pre-vote or a vote) within ten seconds of ticks.
fn campaigns_within_ten_seconds(r: &mut Replica, mut now: u64) -> bool {
    let end = now + 10_000_000_000;
    while now < end {
        now += 10_000_000;
        step(r, now, Input::Tick);
        if matches!(r.role(), Role::Prospective | Role::Candidate) {
            return true;
        }
    }
    false
}

#[test]
fn a_replica_whose_removal_is_committed_never_campaigns() {
    // Goal: a replica outside the set in force stands for election only while the record that
    // removed it is uncommitted (the thesis rule); once it is committed, it never does.
    // Method: r3 learns of its removal at offset 1 with the high watermark at 1 (uncommitted:
    // its leader then goes silent and it campaigns) and at 2 (committed: it does not).
    let (mut r, now) = removed_follower(1);
    assert!(
        campaigns_within_ten_seconds(&mut r, now),
        "the removal is uncommitted"
    );
    let (mut r, now) = removed_follower(2);
    assert!(
        !campaigns_within_ten_seconds(&mut r, now),
        "the removal is committed"
    );
    assert_eq!(r.stats().elections, 0);
}

#[test]
fn a_leader_pins_each_static_voter_to_the_directory_it_fetches_with_once_caught_up() {
    // Goal: upgrading a static set in place binds a voter to a directory only when the leader
    // can tell it: its own at once, another's once that voter fetches with it and has caught
    // up (as for an added replica), so that a lagging disk (perhaps an emptied one) is never
    // pinned as the voter; the voters not pinnable stay static; with none, nothing is written.
    // Method: an established leader r1 of the static set {1, 2, 3} with directory 11, whose r2
    // fetched without a directory; pin; commit; r2 fetches with 22 at the end and r3 with 33
    // from offset 0; pin; commit; pin again.
    let (mut r, now) = established_leader(|c| c.directory = Some(DirectoryId(11)));
    let pin = |r: &mut Replica| {
        let mut out = Outputs::default();
        let result = r.change_voters(Instant(now), VoterChange::PinDirectories, &mut out);
        (result.map(|_| ()), out)
    };
    let dir = |r: &Replica, id: u32| r.voters().get(ReplicaId(id)).unwrap().directory;

    let (pinned, out) = pin(&mut r);
    assert_eq!(pinned, Ok(()));
    assert_eq!(
        (dir(&r, 1), dir(&r, 2), dir(&r, 3)),
        (Some(DirectoryId(11)), None, None),
        "only the leader's own directory is known"
    );
    sync_last_append(&mut r, now, &out, "the first pin");
    let end = r.log_end().offset;
    step(&mut r, now, voter_fetch(2, Some(DirectoryId(22)), end));
    assert_eq!(r.high_watermark(), end, "the first pin committed");
    step(
        &mut r,
        now,
        voter_fetch(3, Some(DirectoryId(33)), Offset(0)),
    );

    let (pinned, out) = pin(&mut r);
    assert_eq!(pinned, Ok(()));
    assert_eq!(
        (dir(&r, 2), dir(&r, 3)),
        (Some(DirectoryId(22)), None),
        "r2 is caught up with 22; r3 lags with 33 and stays static"
    );
    sync_last_append(&mut r, now, &out, "the second pin");
    let end = r.log_end().offset;
    step(&mut r, now, voter_fetch(2, Some(DirectoryId(22)), end));
    assert_eq!(r.high_watermark(), end, "the second pin committed");
    let before = r.log_end();
    assert_eq!(
        pin(&mut r).0,
        Err(MembershipError::NothingToPin {
            waiting: vec![ReplicaId(3)]
        })
    );
    assert_eq!(r.log_end(), before, "nothing was appended");
}
