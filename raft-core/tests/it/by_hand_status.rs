//! What a replica's core reports about itself, driven by hand: the durable end of its log, the
//! status a leader gives of its voters and observers and a follower of its leader's contact,
//! and the DescribeQuorum answer of a leader and of a replica that does not lead.

use std::time::Duration;

use raft_core::message::{
    DescribeQuorumRequest, DescribeQuorumResponse, ErrorCode, ReadBarrier, ReplicaProgress,
    Request, RequestId, Response,
};
use raft_core::protocol::{Input, Outgoing, Outputs, Replica};
use raft_core::{Epoch, Instant, ReplicaId, Role};

use crate::by_hand::{
    begin_quorum_epoch, core, established_leader, fetch_from, fetch_ok, request_to, step,
};

/// The DescribeQuorum answer `r` gives at `now`.
fn describe(r: &mut Replica, now: u64) -> DescribeQuorumResponse {
    let ask = Input::Request {
        from: ReplicaId(9),
        id: RequestId(5),
        request: Request::DescribeQuorum(DescribeQuorumRequest {}),
    };
    let out = step(r, now, ask);
    out.messages
        .iter()
        .find_map(|m| match m {
            Outgoing::Response {
                response: Response::DescribeQuorum(d),
                ..
            } => Some(d.clone()),
            _ => None,
        })
        .expect("a DescribeQuorum answer")
}

#[test]
fn the_durable_end_follows_the_log_syncs() {
    // Goal: `durable_end` is the end of the synced log, not of the log: zero on an empty log,
    // the epoch-start record's end once it is synced, and unchanged by an append not yet
    // synced.
    assert_eq!(core(1, 3, |_| {}).durable_end().0, 0);
    let (mut r, now) = established_leader(|_| {});
    let end = r.log_end().offset;
    assert!(end.0 > 0);
    assert_eq!(r.durable_end(), end);
    let mut out = Outputs::default();
    r.propose(Instant(now), bytes::Bytes::from_static(b"x"), &mut out)
        .expect("the leader accepts a proposal");
    r.step(Instant(now + 10_000_000), Input::Tick, &mut out);
    assert!(r.log_end().offset > end, "the proposal is appended");
    assert_eq!(r.durable_end(), end, "but not synced");
}

#[test]
fn a_leader_reports_its_voters_and_observers_progress() {
    // Goal: the leader's status lists each voter with its fetch offset and time since its
    // last fetch (the leader itself with its durable end), and each observer that fetched;
    // DescribeQuorum gives the same lists without error, with the high watermark.
    let (mut r, now) = established_leader(|_| {});
    let end = r.log_end().offset;
    step(&mut r, now, fetch_from(4, end, ReadBarrier::default()));
    let later = now + 3_000_000;
    let status = r.status(Instant(later));
    let r4 = ReplicaProgress {
        replica: ReplicaId(4),
        directory: None,
        end_offset: Some(end),
        since_last_fetch: Some(Duration::from_millis(3)),
    };
    assert_eq!(status.observers, vec![r4.clone()]);
    let voters: Vec<(ReplicaId, Option<_>)> = status
        .voters
        .iter()
        .map(|p| (p.replica, p.end_offset))
        .collect();
    assert_eq!(
        voters,
        [
            (ReplicaId(1), Some(end)),
            (ReplicaId(2), Some(end)),
            (ReplicaId(3), None)
        ],
        "r2 fetched the epoch start, r3 never fetched"
    );
    let d = describe(&mut r, later);
    assert_eq!(d.error, None);
    assert_eq!((d.epoch, d.leader), (Epoch(1), Some(ReplicaId(1))));
    assert_eq!(d.high_watermark, Some(r.high_watermark()));
    assert_eq!(d.observers, vec![r4]);
    assert_eq!(d.voters, status.voters);
}

#[test]
fn a_follower_reports_its_leader_contact_and_refuses_to_describe_the_quorum() {
    // Goal: a follower's status says how long ago its leader last answered a fetch, and lists
    // no progress; asked to describe the quorum it answers NotLeader, naming its leader.
    let mut r = core(3, 3, |_| {});
    let begin = begin_quorum_epoch(1, 1, 1, 3);
    let now = 1_000_000;
    let out = step(&mut r, now, begin);
    assert_eq!(r.role(), Role::Follower);
    assert_eq!(
        r.status(Instant(now)).since_leader_contact,
        None,
        "no answer yet"
    );
    let fetch = request_to(&out, 1, |q| matches!(q, Request::Fetch(_)))
        .expect("the new follower fetches at once");
    let answer = Response::Fetch(fetch_ok(1, 1, None));
    let answered_at = now + 2_000_000;
    let input = Input::Response {
        from: ReplicaId(1),
        id: fetch,
        response: answer,
    };
    step(&mut r, answered_at, input);
    let status = r.status(Instant(answered_at + 7_000_000));
    assert_eq!(status.since_leader_contact, Some(Duration::from_millis(7)));
    assert!(status.voters.is_empty() && status.observers.is_empty());
    let d = describe(&mut r, answered_at);
    assert_eq!(d.error, Some(ErrorCode::NotLeader));
    assert_eq!((d.leader, d.high_watermark), (Some(ReplicaId(1)), None));
}
