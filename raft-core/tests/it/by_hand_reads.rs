//! A leader's read rules driven by hand (see `by_hand`): which ReadIndex requests it refuses,
//! and the exact instant its lease ends.

use std::time::Duration;

use raft_core::message::{ErrorCode, ReadBarrier, ReadIndexRequest, Request, RequestId, Response};
use raft_core::protocol::{Event, Input, Outgoing, Outputs, ReadId, ReadMode, Replica};
use raft_core::{Epoch, Instant, Offset, ReplicaId, Role};

use crate::by_hand::{begin_quorum_epoch, core, established_leader, fetch_from, request_to, step};

/// The error of the ReadIndex answer in `out`, if the request was answered.
fn read_index_answer(out: &Outputs) -> Option<Option<ErrorCode>> {
    out.messages.iter().find_map(|m| match m {
        Outgoing::Response {
            response: Response::ReadIndex(resp),
            ..
        } => Some(resp.error),
        _ => None,
    })
}

fn read_index(from: u32, replica: u32, epoch: u32) -> Input {
    Input::Request {
        from: ReplicaId(from),
        id: RequestId(77),
        request: Request::ReadIndex(ReadIndexRequest {
            epoch: Epoch(epoch),
            replica: ReplicaId(replica),
            read_count: 1,
            lease: false,
        }),
    }
}

#[test]
fn a_leader_refuses_read_index_requests_that_are_not_its_followers_in_its_epoch() {
    // Goal: a ReadIndex request is confirmed only for a follower of this leader in this epoch:
    // a sender naming another replica is refused as invalid, an earlier epoch as fenced, a
    // later one as unknown, and a replica that does not lead answers NotLeader, at once (so
    // that the asking follower retries elsewhere rather than waiting out its deadline).
    // Method: an established leader of epoch 1 gets each request; a follower core of r2 gets
    // a valid one.
    let (mut r, now) = established_leader(|_| {});
    for (input, expected) in [
        (read_index(2, 3, 1), Some(ErrorCode::InvalidRequest)),
        (read_index(2, 2, 0), Some(ErrorCode::FencedLeaderEpoch)),
        (read_index(2, 2, 2), Some(ErrorCode::UnknownLeaderEpoch)),
    ] {
        let out = step(&mut r, now, input);
        assert_eq!(read_index_answer(&out), Some(expected));
    }
    assert_eq!((r.role(), r.epoch()), (Role::Leader, Epoch(1)));
    // The valid request is taken into a confirmation round, not refused.
    let out = step(&mut r, now, read_index(2, 2, 1));
    assert_eq!(read_index_answer(&out), None, "answered before its round");

    let mut follower = core(2, 3, |_| {});
    let begin = begin_quorum_epoch(1, 1, 1, 2);
    step(&mut follower, 0, begin);
    assert_eq!(follower.role(), Role::Follower);
    let out = step(&mut follower, 0, read_index(3, 3, 1));
    assert_eq!(read_index_answer(&out), Some(Some(ErrorCode::NotLeader)));
}

#[test]
fn a_leader_refuses_read_index_requests_while_it_resigns() {
    // Goal: a resigning leader confirms no more reads (its successor may already be
    // elected): a ReadIndex request is answered NotLeader.
    // Method: an established leader is told to resign, then asked.
    let (mut r, now) = established_leader(|_| {});
    step(&mut r, now, Input::Resign);
    let out = step(&mut r, now, read_index(2, 2, 1));
    assert_eq!(read_index_answer(&out), Some(Some(ErrorCode::NotLeader)));
}

/// Whether a lease-mode read asked at `at` is ready in the step that asks for it.
fn served_at_once(r: &mut Replica, at: u64, id: u64) -> bool {
    let read = Input::Read {
        id: ReadId(id),
        mode: ReadMode::Lease,
        deadline: Instant(at + 1_000_000_000),
    };
    let out = step(r, at, read);
    out.events
        .iter()
        .any(|e| matches!(e, Event::ReadReady { id: got, .. } if *got == ReadId(id)))
}

/// An established leader with lease reads and this drift margin, and the time reached.
fn lease_leader(margin: Duration) -> (Replica, u64) {
    established_leader(|c| {
        c.lease_reads = true;
        c.lease_drift_margin = margin;
    })
}

#[test]
fn the_lease_ends_exactly_one_fetch_timeout_less_the_drift_margin_after_its_anchor() {
    // Goal: D6: a lease read skips the round only strictly before anchor + fetch timeout -
    // drift margin, where the anchor is when the barrier one follower echoed was raised (one
    // follower plus the leader is a majority of three). Without lease reads configured, a
    // lease-mode read always waits for its round.
    // Method: the leader raises a barrier on a tick at time b; r2 echoes it later; lease
    // reads are asked 1 ns before the end and at the end. The other follower never fetches.
    let margin = Duration::from_millis(40);
    let (mut r, now) = lease_leader(margin);
    let fetch_timeout = r.config().fetch_timeout;
    // With leases, the leader raises a barrier as soon as it is established (to have echoes
    // renew the lease), in the step that established it.
    let barrier = r.read_barrier();
    assert!(barrier > ReadBarrier::default(), "a barrier was raised");
    let raised = now;
    let end = r.log_end().offset;
    step(&mut r, raised + 5_000_000, fetch_from(2, end, barrier));
    let lease_end = raised + (fetch_timeout - margin).as_nanos() as u64;
    assert!(served_at_once(&mut r, lease_end - 1, 1), "inside the lease");
    assert!(!served_at_once(&mut r, lease_end, 2), "at the lease's end");

    let (mut r, mut now) = established_leader(|c| c.lease_reads = false);
    now += 1_000_000;
    step(
        &mut r,
        now,
        Input::Read {
            id: ReadId(9),
            mode: ReadMode::Linearizable,
            deadline: Instant(now + 1_000_000_000),
        },
    );
    let barrier = r.read_barrier();
    let end = r.log_end().offset;
    step(&mut r, now + 1_000_000, fetch_from(2, end, barrier));
    assert!(
        !served_at_once(&mut r, now + 2_000_000, 3),
        "a lease without lease reads configured"
    );
}

#[test]
fn with_leases_an_idle_leader_raises_a_barrier_every_quarter_fetch_timeout() {
    // Goal: D6: without client reads, a leader with leases raises a new read barrier every
    // quarter of the fetch timeout, so that the followers' echoes keep renewing the lease;
    // neither far more often (a round per step) nor far less (the lease would lapse between
    // renewals). Method: an established leader whose followers echo each barrier at once is
    // stepped every 5 ms for ten fetch timeouts; about forty barriers must be raised.
    let (mut r, mut now) = established_leader(|c| c.lease_reads = true);
    let fetch_timeout = r.config().fetch_timeout.as_nanos() as u64;
    let start = r.read_barrier();
    let until = now + 10 * fetch_timeout;
    let end = r.log_end().offset;
    while now < until {
        now += 5_000_000;
        step(&mut r, now, Input::Tick);
        for follower in [2, 3] {
            let echo = r.read_barrier();
            step(&mut r, now, fetch_from(follower, end, echo));
        }
    }
    let raised = r.read_barrier().0 - start.0;
    assert!((36..=44).contains(&raised), "{raised} barriers raised");
}

/// The failure reported for read `id` in `out`, if any.
fn read_failure(out: &Outputs, id: u64) -> Option<raft_core::protocol::ReadFailure> {
    out.events.iter().find_map(|e| match e {
        Event::ReadFailed { id: got, error } if *got == ReadId(id) => Some(*error),
        _ => None,
    })
}

#[test]
fn a_read_that_runs_out_of_time_says_whether_a_leader_was_known() {
    // Goal: a read failing at its deadline tells the client why: `Timeout` when the replica
    // follows a leader it could not get a confirmation from in time (retrying there may
    // work), `NoLeader` when it knows of none (retry elsewhere, or later).
    // Method: r3 follows r1; its ReadIndex request for a read fails (unreachable), so the read
    // waits for the retry backoff and meets its deadline first. A fresh r3 that knows no
    // leader gets the same read.
    use raft_core::protocol::ReadFailure;
    let mut r = core(3, 3, |_| {});
    let begin = begin_quorum_epoch(1, 1, 1, 3);
    let now = 1_000_000;
    step(&mut r, now, begin);
    let read = Input::Read {
        id: ReadId(1),
        mode: ReadMode::Linearizable,
        deadline: Instant(now + 2_000_000),
    };
    let out = step(&mut r, now, read);
    let asked = request_to(&out, 1, |q| matches!(q, Request::ReadIndex(_)))
        .expect("the follower asks the leader");
    let failed = Input::RequestFailed {
        to: ReplicaId(1),
        id: asked,
    };
    step(&mut r, now, failed);
    let out = step(&mut r, now + 2_000_000, Input::Tick);
    assert_eq!(read_failure(&out, 1), Some(ReadFailure::Timeout));

    let mut r = core(3, 3, |_| {});
    let read = Input::Read {
        id: ReadId(2),
        mode: ReadMode::Linearizable,
        deadline: Instant(now + 2_000_000),
    };
    step(&mut r, now, read);
    let out = step(&mut r, now + 2_000_000, Input::Tick);
    assert_eq!(read_failure(&out, 2), Some(ReadFailure::NoLeader));
}

#[test]
fn a_follower_asks_for_a_lease_only_when_every_read_in_the_batch_accepts_one() {
    // Goal: D6: the leader may answer a ReadIndex request from its lease only when every read
    // it stands for asked for lease mode; a linearizable read always gets its round.
    // Method: r3 follows r1; a lease-mode read goes out with `lease` set; after its answer, a
    // linearizable read goes out without it.
    let mut r = core(3, 3, |_| {});
    let begin = begin_quorum_epoch(1, 1, 1, 3);
    let now = 1_000_000;
    step(&mut r, now, begin);
    for (n, mode) in [ReadMode::Lease, ReadMode::Linearizable]
        .into_iter()
        .enumerate()
    {
        let read = Input::Read {
            id: ReadId(n as u64),
            mode,
            deadline: Instant(now + 1_000_000_000),
        };
        let out = step(&mut r, now, read);
        let (id, lease) = out
            .messages
            .iter()
            .find_map(|m| match m {
                Outgoing::Request {
                    id,
                    request: Request::ReadIndex(q),
                    ..
                } => Some((*id, q.lease)),
                _ => None,
            })
            .expect("the follower asks the leader");
        assert_eq!(lease, mode == ReadMode::Lease, "{mode:?}");
        let answer = Input::Response {
            from: ReplicaId(1),
            id,
            response: Response::ReadIndex(raft_core::message::ReadIndexResponse {
                error: None,
                epoch: Epoch(1),
                leader: Some(ReplicaId(1)),
                read_offset: Some(Offset(0)),
            }),
        };
        step(&mut r, now, answer);
    }
}

#[test]
fn an_echo_anchors_the_lease_when_its_own_barrier_was_raised_not_a_newer_one() {
    // Goal: D6: an echo of barrier b proves only that its sender heard from the leader after b
    // was raised. A newer barrier raised meanwhile must not anchor it: the lease would outlast
    // what the echo proves, by as long as the two raises are apart.
    // Method: r3 echoes the barrier raised at establishment (b1, at t0), confirming it; a tick
    // a quarter fetch timeout later raises a refresh barrier b2; r2's fetch, sent before it saw
    // b2, echoes b1. The lease must end one fetch timeout less the margin after t0.
    let margin = Duration::from_millis(40);
    let (mut r, t0) = lease_leader(margin);
    let fetch_timeout = r.config().fetch_timeout;
    let b1 = r.read_barrier();
    let end = r.log_end().offset;
    step(&mut r, t0 + 1_000_000, fetch_from(3, end, b1));
    let t1 = t0 + (fetch_timeout / 4).as_nanos() as u64 + 1_000_000;
    step(&mut r, t1, Input::Tick);
    assert!(r.read_barrier() > b1, "a refresh barrier was raised at t1");
    step(&mut r, t1 + 1_000_000, fetch_from(2, end, b1));
    let lease_end = t0 + (fetch_timeout - margin).as_nanos() as u64;
    assert!(served_at_once(&mut r, lease_end - 1, 1), "inside the lease");
    assert!(
        !served_at_once(&mut r, lease_end, 2),
        "the lease outlived its anchor: a newer barrier's raise anchored it"
    );
}

#[test]
fn a_follower_asks_again_after_its_read_index_request_fails_but_not_for_a_stale_failure() {
    // Goal: a ReadIndex request that fails (the leader unreachable) puts its reads back to
    // wait, and they are asked for again after the retry backoff, well before their deadline;
    // the failure reported again, once its request is forgotten, leaves the new request in
    // flight alone (no second request beside it). Method: r3 follows r1 with a 20 ms backoff;
    // its read's request fails; a tick just before the backoff ends asks nothing, one at its
    // end asks again; the old request's failure, reported once more, changes nothing a long
    // while after.
    let mut r = core(3, 3, |c| c.retry_backoff = Duration::from_millis(20));
    let now = 1_000_000;
    step(&mut r, now, begin_quorum_epoch(1, 1, 1, 3));
    let read = Input::Read {
        id: ReadId(1),
        mode: ReadMode::Linearizable,
        deadline: Instant(now + 10_000_000_000),
    };
    let out = step(&mut r, now, read);
    let is_read_index = |q: &Request| matches!(q, Request::ReadIndex(_));
    let first = request_to(&out, 1, is_read_index).expect("the follower asks the leader");
    let failed = |id| Input::RequestFailed {
        to: ReplicaId(1),
        id,
    };
    let out = step(&mut r, now, failed(first));
    assert_eq!(
        request_to(&out, 1, is_read_index),
        None,
        "asked again at once"
    );
    let backoff = 20_000_000;
    let out = step(&mut r, now + backoff - 1, Input::Tick);
    assert_eq!(
        request_to(&out, 1, is_read_index),
        None,
        "asked before the backoff"
    );
    let out = step(&mut r, now + backoff, Input::Tick);
    let second = request_to(&out, 1, is_read_index).expect("asked again after the backoff");
    assert_ne!(second, first);
    assert_eq!(read_failure(&out, 1), None);

    step(&mut r, now + backoff, failed(first));
    for later in [2, 5, 50] {
        let out = step(&mut r, now + later * backoff, Input::Tick);
        assert_eq!(
            request_to(&out, 1, is_read_index),
            None,
            "a stale failure set off another request beside {second:?}"
        );
        assert_eq!(read_failure(&out, 1), None);
    }
}
