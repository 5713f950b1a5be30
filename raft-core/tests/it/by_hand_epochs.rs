//! BeginQuorumEpoch and EndQuorumEpoch at the edges of their rules, and a resigned leader's
//! retries, driven by hand (see `by_hand`).

use raft_core::message::{
    EndQuorumEpochRequest, EpochResponse, ErrorCode, Request, RequestId, Response,
};
use raft_core::protocol::{Event, Input, Outgoing, Outputs, Replica};
use raft_core::{Epoch, ReplicaId, Role};

use crate::by_hand::{begin_quorum_epoch, core, established_leader, request_to, step, tick_until};

fn end_epoch(from: u32, epoch: u32, successors: &[u32]) -> Input {
    Input::Request {
        from: ReplicaId(from),
        id: RequestId(600 + u64::from(from)),
        request: Request::EndQuorumEpoch(EndQuorumEpochRequest {
            epoch: Epoch(epoch),
            leader: ReplicaId(from),
            preferred_successors: successors.iter().map(|s| ReplicaId(*s)).collect(),
        }),
    }
}

/// The error of the (BeginQuorumEpoch or EndQuorumEpoch) answer in `out`.
fn epoch_answer(out: &Outputs) -> Option<Option<ErrorCode>> {
    out.messages.iter().find_map(|m| match m {
        Outgoing::Response {
            response: Response::BeginQuorumEpoch(e) | Response::EndQuorumEpoch(e),
            ..
        } => Some(e.error),
        _ => None,
    })
}

fn reported_inconsistent(out: &Outputs) -> bool {
    out.events
        .iter()
        .any(|e| matches!(e, Event::InconsistentLeader { .. }))
}

/// A core of r3 following r1 in `epoch`.
fn follower_of_1(epoch: u32) -> Replica {
    follower_of_1_among(3, epoch).0
}

/// A core of r3 of `voters` following r1 in `epoch`, with the output of the step that made
/// it follow.
fn follower_of_1_among(voters: u32, epoch: u32) -> (Replica, Outputs) {
    let mut r = core(3, voters, |_| {});
    let out = step(&mut r, 1_000, begin_quorum_epoch(1, epoch, 1, 3));
    assert_eq!(epoch_answer(&out), Some(None));
    assert_eq!((r.role(), r.leader()), (Role::Follower, Some(ReplicaId(1))));
    (r, out)
}

/// Whether `out` sends r1 a Fetch.
fn fetches_from_1(out: &Outputs) -> bool {
    request_to(out, 1, |q| matches!(q, Request::Fetch(_))).is_some()
}

#[test]
fn begin_quorum_epoch_in_the_current_epoch_is_followed_only_when_it_fits() {
    // Goal: in the epoch it is in, a replica accepts a BeginQuorumEpoch that names the leader
    // it knows (again) or the first leader it hears of, and refuses (and reports) one naming
    // another leader, or one that a leader receives naming itself.
    // Method: four cores driven by hand.
    let mut r = follower_of_1(1);
    let out = step(&mut r, 2_000, begin_quorum_epoch(1, 1, 1, 3));
    assert_eq!(epoch_answer(&out), Some(None), "the same leader again");
    assert!(!reported_inconsistent(&out));
    let out = step(&mut r, 2_000, begin_quorum_epoch(2, 1, 2, 3));
    assert_eq!(epoch_answer(&out), Some(Some(ErrorCode::InvalidRequest)));
    assert!(reported_inconsistent(&out), "a second leader of epoch 1");
    assert_eq!(r.leader(), Some(ReplicaId(1)));

    // A candidate of epoch 1 (pre-vote off) follows the leader it is told of.
    let mut r = core(3, 3, |c| c.pre_vote = false);
    let mut now = 0;
    tick_until(&mut r, &mut now, |r| r.role() == Role::Candidate);
    assert_eq!(r.epoch(), Epoch(1));
    let out = step(&mut r, now, begin_quorum_epoch(2, 1, 2, 3));
    assert_eq!(epoch_answer(&out), Some(None));
    assert_eq!((r.role(), r.leader()), (Role::Follower, Some(ReplicaId(2))));

    // A leader told by itself that it leads its own epoch does not follow itself.
    let (mut l, now) = established_leader(|_| {});
    let out = step(&mut l, now, begin_quorum_epoch(1, 1, 1, 1));
    assert_eq!(epoch_answer(&out), Some(Some(ErrorCode::InvalidRequest)));
    assert_eq!(l.role(), Role::Leader);
}

#[test]
fn end_quorum_epoch_from_an_earlier_epoch_is_fenced_and_changes_nothing() {
    // Goal: an EndQuorumEpoch of an earlier epoch is refused as fenced and does not hurry the
    // follower's election; one from its leader in its epoch is accepted and makes the first
    // preferred successor campaign at once (KIP-595).
    // Method: r3 follows r1 in epoch 2; r1's EndQuorumEpoch for epoch 1 naming r3 first, then
    // for epoch 2.
    let mut r = follower_of_1(2);
    let out = step(&mut r, 2_000, end_epoch(1, 1, &[3, 2]));
    assert_eq!(epoch_answer(&out), Some(Some(ErrorCode::FencedLeaderEpoch)));
    step(&mut r, 3_000, Input::Tick);
    assert_eq!(
        r.role(),
        Role::Follower,
        "an old epoch's resignation hurried it"
    );
    let out = step(&mut r, 4_000, end_epoch(1, 2, &[3, 2]));
    assert_eq!(epoch_answer(&out), Some(None));
    step(&mut r, 5_000, Input::Tick);
    assert_eq!(
        r.role(),
        Role::Prospective,
        "the first successor campaigns at once"
    );
}

/// The EndQuorumEpoch requests in `out`: receiver and id.
fn end_epochs_sent(out: &Outputs) -> Vec<(ReplicaId, RequestId)> {
    out.messages
        .iter()
        .filter_map(|m| match m {
            Outgoing::Request {
                to,
                id,
                request: Request::EndQuorumEpoch(_),
            } => Some((*to, *id)),
            _ => None,
        })
        .collect()
}

#[test]
fn a_resigned_leader_sends_a_failed_end_quorum_epoch_again() {
    // Goal: a leader that resigns tells each other voter with EndQuorumEpoch, once, and never
    // itself; a request that fails (the peer was unreachable) is sent again after the retry
    // backoff, while it still waits for a successor, so that the handover is not left to the
    // followers' fetch timeouts; one that was answered, or is still waiting for its answer,
    // is not sent again.
    // Method: an established leader of three resigns; r3 answers its EndQuorumEpoch, r2's
    // fails; ticks every 10 ms for 200 ms.
    let (mut r, mut now) = established_leader(|_| {});
    let out = step(&mut r, now, Input::Resign);
    assert_eq!(r.role(), Role::Resigned);
    let sent = end_epochs_sent(&out);
    let to: Vec<ReplicaId> = sent.iter().map(|(to, _)| *to).collect();
    assert_eq!(to, [ReplicaId(2), ReplicaId(3)], "each other voter, once");
    let ack = Response::EndQuorumEpoch(EpochResponse {
        error: None,
        epoch: Epoch(1),
        leader: Some(ReplicaId(1)),
    });
    step(
        &mut r,
        now,
        Input::Response {
            from: ReplicaId(3),
            id: sent[1].1,
            response: ack,
        },
    );
    step(
        &mut r,
        now,
        Input::RequestFailed {
            to: ReplicaId(2),
            id: sent[0].1,
        },
    );
    let mut again = Vec::new();
    for _ in 0..20 {
        now += 10_000_000;
        let out = step(&mut r, now, Input::Tick);
        again.extend(end_epochs_sent(&out).into_iter().map(|(to, _)| to));
    }
    assert_eq!(r.role(), Role::Resigned, "still waiting for a successor");
    assert_eq!(
        again,
        [ReplicaId(2)],
        "only the failed EndQuorumEpoch is sent again, once while its retry is unanswered"
    );
}

#[test]
fn end_quorum_epoch_of_a_later_epoch_is_followed_and_hurries_the_first_successor() {
    // Goal: a replica told by EndQuorumEpoch of an epoch later than its own moves to that
    // epoch following the leader it names (as for any request of a later epoch), and
    // campaigns by its place among the preferred successors: the first at once.
    // Method: r3 follows r1 in epoch 1; r2, leader of epoch 2, resigns naming r3 first: r3
    // follows it and, in the same step, campaigns.
    let mut r = follower_of_1(1);
    let out = step(&mut r, 2_000, end_epoch(2, 2, &[3, 1]));
    assert_eq!(epoch_answer(&out), Some(None));
    assert_eq!((r.epoch(), r.leader()), (Epoch(2), Some(ReplicaId(2))));
    assert_eq!(
        r.role(),
        Role::Prospective,
        "the first successor campaigns at once"
    );
}

#[test]
fn end_quorum_epoch_in_the_follower_s_epoch_only_shortens_its_wait_by_its_place() {
    // Goal: KIP-595: the leader's EndQuorumEpoch in the follower's own epoch shortens its wait
    // to a backoff set by its place among the preferred successors (position p of n waits
    // max / 2^(n-1) * 2^(p-1); an unlisted one the maximum), and does not start the follower
    // over: the fetch it has in flight stays the one it waits for (a second would go out
    // beside it, and the first one's answer would be dropped).
    // Method: r3 follows r1 in epoch 2 with its first fetch in flight; r1 resigns naming r3
    // second of two, third of four, or not at all; ticks 1 ns before and at the backoff.
    let max = core(3, 3, |_| {}).config().election_backoff_max;
    for (voters, successors, wait) in [
        (3, &[2, 3][..], max / 2),
        (5, &[2, 4, 3, 5][..], max / 4),
        (5, &[2, 4, 5][..], max),
    ] {
        let (mut r, out) = follower_of_1_among(voters, 2);
        assert!(fetches_from_1(&out), "the new follower fetches at once");
        let t = 2_000;
        let out = step(&mut r, t, end_epoch(1, 2, successors));
        assert_eq!(epoch_answer(&out), Some(None));
        let out2 = step(&mut r, t, Input::Tick);
        assert!(
            !fetches_from_1(&out) && !fetches_from_1(&out2),
            "{successors:?}: a second fetch beside the one in flight"
        );
        let wait = wait.as_nanos() as u64;
        step(&mut r, t + wait - 1, Input::Tick);
        assert_eq!(r.role(), Role::Follower, "{successors:?}: campaigned early");
        step(&mut r, t + wait, Input::Tick);
        assert_eq!(
            r.role(),
            Role::Prospective,
            "{successors:?}: campaigned late"
        );
    }
}
