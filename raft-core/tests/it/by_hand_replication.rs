//! The leader's side of replication driven by hand, at the edges of its rules: what a proposal
//! is refused for, when a batch is appended without lingering, which fetches are refused,
//! answered at once or parked, and what an answer exposes before the leader's first commit;
//! and the follower's side: when it reports its high watermark, which records it drops, and
//! where it truncates.

use std::time::Duration;

use bytes::Bytes;
use raft_core::message::{
    ErrorCode, FetchRequest, FetchResponse, ReadBarrier, Request, RequestId, Response,
};
use raft_core::protocol::{Fill, Input, LogOp, Outgoing, Outputs, ProposeError, ReadId, ReadMode};
use raft_core::{
    Config, Epoch, Instant, Offset, OffsetAndEpoch, Record, RecordKind, ReplicaId, Role,
};

use crate::by_hand::{
    answer_from, begin_quorum_epoch, candidate_and_grant, core, epoch_1_records,
    established_leader, fetch_ok, next_request, step, sync_last_append,
};

/// Proposes `len` bytes at `now`, returning the result and the outputs.
fn propose(
    r: &mut raft_core::protocol::Replica,
    now: u64,
    len: usize,
) -> (Result<raft_core::OffsetAndEpoch, ProposeError>, Outputs) {
    let mut out = Outputs::default();
    let res = r.propose(Instant(now), Bytes::from(vec![7u8; len]), &mut out);
    (res, out)
}

/// Whether `out` appends records to the log.
fn appends(out: &Outputs) -> bool {
    out.log.iter().any(|op| matches!(op, LogOp::Append { .. }))
}

/// A fetch from replica `from` as a follower of epoch 1 would send it, with every field given.
fn fetch(
    from: u32,
    replica: u32,
    epoch: u32,
    offset: Offset,
    hwm: Option<Offset>,
    barrier: ReadBarrier,
    max_wait: Duration,
) -> Input {
    Input::Request {
        from: ReplicaId(from),
        id: raft_core::message::RequestId(77),
        request: Request::Fetch(FetchRequest {
            epoch: Epoch(epoch),
            replica: ReplicaId(replica),
            replica_directory: None,
            fetch_offset: offset,
            last_fetched_epoch: Epoch(1),
            high_watermark: hwm,
            read_barrier: barrier,
            max_wait,
            max_bytes: 1 << 20,
        }),
    }
}

/// The fetch answer in `out`, with its fill.
fn fetch_answer(out: &Outputs) -> Option<(FetchResponse, Option<Fill>)> {
    out.messages.iter().find_map(|m| match m {
        Outgoing::Response {
            response: Response::Fetch(f),
            fill,
            ..
        } => Some((f.clone(), *fill)),
        _ => None,
    })
}

#[test]
fn a_proposal_is_refused_past_the_size_and_queue_limits_and_not_before() {
    let (mut r, now) = established_leader(|c: &mut Config| {
        c.payload_bytes_max = 8;
        c.pending_proposals_max = 3;
        c.append_linger = Duration::from_secs(1);
    });
    let end = r.log_end().offset;
    assert_eq!(r.high_watermark(), end, "nothing pending at the start");
    let (too_large, _) = propose(&mut r, now, 9);
    assert_eq!(too_large, Err(ProposeError::TooLarge { len: 9, max: 8 }));
    for i in 0..3 {
        let (res, _) = propose(&mut r, now, 8);
        assert_eq!(res.map(|at| at.offset), Ok(end.plus(i)), "proposal {i}");
    }
    let (full, _) = propose(&mut r, now, 1);
    assert_eq!(full, Err(ProposeError::QueueFull { max: 3 }));
}

#[test]
fn a_batch_is_appended_at_once_when_it_reaches_either_size_limit() {
    let by_records = |c: &mut Config| {
        c.append_linger = Duration::from_secs(1);
        c.batch_records_max = 2;
        c.batch_bytes_max = 1 << 20;
    };
    let by_bytes = |c: &mut Config| {
        c.append_linger = Duration::from_secs(1);
        c.batch_records_max = 100;
        c.batch_bytes_max = 16;
    };
    for (name, tune) in [
        ("records", &by_records as &dyn Fn(&mut Config)),
        ("bytes", &by_bytes),
    ] {
        let (mut r, now) = established_leader(tune);
        let (first, out) = propose(&mut r, now, 8);
        assert!(first.is_ok());
        assert!(!appends(&out), "{name}: one record lingers");
        let (second, out) = propose(&mut r, now, 8);
        assert!(second.is_ok());
        assert!(appends(&out), "{name}: the full batch is appended at once");
    }
}

#[test]
fn a_new_leader_accepts_proposals_only_once_its_election_state_is_durable() {
    let (mut r, now, granted) = candidate_and_grant(|_| {});
    // Stepped without making the leader's election state durable.
    let mut out = Outputs::default();
    r.step(Instant(now), granted, &mut out);
    // Leading, but its role is released (and its messages sent) only once that is durable.
    let (seq, _) = out.persist.expect("the leader persists its election state");
    assert_eq!(r.role(), Role::Candidate, "not yet released");
    let (early, _) = propose(&mut r, now, 1);
    assert_eq!(early, Err(ProposeError::NotReady));
    step(&mut r, now, Input::ElectionPersisted(seq));
    assert_eq!(r.role(), Role::Leader);
    let (ready, _) = propose(&mut r, now, 1);
    assert!(ready.is_ok(), "{ready:?}");
}

#[test]
fn a_fetch_is_refused_for_a_wrong_sender_or_epoch() {
    let (mut r, now) = established_leader(|_| {});
    let end = r.log_end().offset;
    let cases = [
        (
            "another replica's fetch",
            2,
            3,
            1,
            ErrorCode::InvalidRequest,
        ),
        ("its own id", 1, 1, 1, ErrorCode::InvalidRequest),
        ("an older epoch", 2, 2, 0, ErrorCode::FencedLeaderEpoch),
        ("a later epoch", 2, 2, 2, ErrorCode::UnknownLeaderEpoch),
    ];
    for (name, from, replica, epoch, error) in cases {
        let input = fetch(
            from,
            replica,
            epoch,
            end,
            None,
            ReadBarrier::default(),
            Duration::ZERO,
        );
        let out = step(&mut r, now, input);
        let (answer, _) = fetch_answer(&out).expect("an answer");
        assert_eq!(answer.error, Some(error), "{name}");
    }
    assert_eq!(r.role(), Role::Leader);
}

#[test]
fn a_fetch_is_parked_only_when_it_has_nothing_to_learn() {
    let wait = Duration::from_millis(500);
    let (mut r, now) = established_leader(|c| c.lease_reads = false);
    let end = r.log_end().offset;
    let hwm = r.high_watermark();
    assert!(hwm > Offset::ZERO);
    let barrier = r.read_barrier();
    let nothing_new = fetch(2, 2, 1, end, Some(hwm), barrier, wait);
    assert!(
        fetch_answer(&step(&mut r, now, nothing_new)).is_none(),
        "parked"
    );

    let cases = [
        ("records below the end", Offset(end.0 - 1), Some(hwm), wait),
        ("no wait asked for", end, Some(hwm), Duration::ZERO),
        (
            "an older high watermark",
            end,
            Some(Offset(hwm.0 - 1)),
            wait,
        ),
        ("no high watermark", end, None, wait),
    ];
    for (name, offset, seen, max_wait) in cases {
        let (mut r, now) = established_leader(|c| c.lease_reads = false);
        let input = fetch(3, 3, 1, offset, seen, barrier, max_wait);
        assert!(fetch_answer(&step(&mut r, now, input)).is_some(), "{name}");
    }

    // A read raises the barrier: a fetch that has not seen it is answered at once.
    let (mut r, now) = established_leader(|c| c.lease_reads = false);
    step(
        &mut r,
        now,
        Input::Read {
            id: ReadId(1),
            mode: ReadMode::Linearizable,
            deadline: Instant(now + 1_000_000_000),
        },
    );
    assert!(r.read_barrier() > barrier);
    let input = fetch(3, 3, 1, end, Some(hwm), barrier, wait);
    assert!(
        fetch_answer(&step(&mut r, now, input)).is_some(),
        "an older barrier"
    );
}

#[test]
fn a_parked_fetch_is_answered_when_records_are_appended() {
    let (mut r, now) = established_leader(|c| c.batch_records_max = 1);
    let end = r.log_end().offset;
    let hwm = r.high_watermark();
    let parked = fetch(
        2,
        2,
        1,
        end,
        Some(hwm),
        r.read_barrier(),
        Duration::from_millis(500),
    );
    assert!(fetch_answer(&step(&mut r, now, parked)).is_none());
    let (res, out) = propose(&mut r, now, 4);
    assert!(res.is_ok());
    let (answer, fill) = fetch_answer(&out).expect("the parked fetch is answered");
    assert_eq!(answer.error, None);
    assert!(matches!(fill, Some(Fill::Records(range)) if range.from == end));
}

#[test]
fn a_fetch_at_the_log_end_is_answered_without_records() {
    let (mut r, now) = established_leader(|_| {});
    let end = r.log_end().offset;
    let input = fetch(2, 2, 1, end, None, ReadBarrier::default(), Duration::ZERO);
    let (answer, fill) = fetch_answer(&step(&mut r, now, input)).expect("an answer");
    assert_eq!(answer.high_watermark, Some(r.high_watermark()));
    assert!(fill.is_none(), "nothing to read: {fill:?}");
}

#[test]
fn a_leader_exposes_no_high_watermark_before_its_first_commit() {
    let (mut r, now, granted) = candidate_and_grant(|_| {});
    step(&mut r, now, granted);
    assert_eq!(r.role(), Role::Leader);
    // r2 has none of the epoch's records yet: nothing is committed in epoch 1.
    let input = fetch(
        2,
        2,
        1,
        Offset::ZERO,
        None,
        ReadBarrier::default(),
        Duration::ZERO,
    );
    let (answer, _) = fetch_answer(&step(&mut r, now, input)).expect("an answer");
    assert_eq!(answer.error, None);
    assert_eq!(answer.high_watermark, None);
}

fn is_fetch(q: &Request) -> bool {
    matches!(q, Request::Fetch(_))
}

/// r3 following r1 in `epoch`, its first fetch waiting for an answer, and the time.
fn follower_fetching(epoch: u32) -> (raft_core::protocol::Replica, u64, (ReplicaId, RequestId)) {
    let mut r = core(3, 3, |_| {});
    let mut now = 1_000;
    let out = step(&mut r, now, begin_quorum_epoch(1, epoch, 1, 3));
    let fetch = next_request(&mut r, &mut now, out, "first fetch", is_fetch);
    (r, now, fetch)
}

/// Answers `fetch` with `answer` and makes what it wrote to the log durable: the log
/// operations of the answer's step, and the next fetch.
fn answer_fetch(
    r: &mut raft_core::protocol::Replica,
    now: &mut u64,
    fetch: (ReplicaId, RequestId),
    answer: FetchResponse,
) -> (Vec<LogOp>, (ReplicaId, RequestId)) {
    let mut out = step(r, *now, answer_from(fetch, Response::Fetch(answer)));
    let last_write = out.log.iter().rev().find_map(|op| match op {
        LogOp::Append { seq, .. } | LogOp::Truncate { seq, .. } => Some(*seq),
        _ => None,
    });
    if let Some(seq) = last_write {
        let synced = step(r, *now, Input::LogPersisted(seq));
        out.messages.extend(synced.messages);
    }
    let log = std::mem::take(&mut out.log);
    let next = next_request(r, now, out, "next fetch", is_fetch);
    (log, next)
}

/// Whether `log` appends records.
fn appended(log: &[LogOp]) -> bool {
    log.iter().any(|op| matches!(op, LogOp::Append { .. }))
}

#[test]
fn a_follower_reports_its_high_watermark_only_when_it_moves() {
    // Goal: `Outputs::committed` is the high watermark when it moved, and only then: an answer
    // repeating the high watermark the follower already has reports nothing (each report
    // makes the driver run an apply pass).
    // Method: r3 follows r1 in epoch 1; r1 answers its fetches with 5 records and a high
    // watermark of 3, then with no records and 3 again, then with 5.
    let (mut r, now, mut fetch) = follower_fetching(1);
    let mut answers = vec![
        (Some(Offset(5)), Vec::new()),
        (Some(Offset(3)), Vec::new()),
        (Some(Offset(3)), epoch_1_records(0, 5)),
    ];
    for expected in [Some(Offset(3)), None, Some(Offset(5))] {
        let (hwm, records) = answers.pop().expect("one answer per step");
        let appending = !records.is_empty();
        let mut answer = fetch_ok(1, 1, hwm);
        answer.records = records;
        let mut out = step(&mut r, now, answer_from(fetch, Response::Fetch(answer)));
        assert_eq!(
            out.committed, expected,
            "answer with high watermark {hwm:?}"
        );
        if appending {
            let synced = sync_last_append(&mut r, now, &out, "the records");
            assert_eq!(synced.committed, None, "reported twice");
            out.messages.extend(synced.messages);
        }
        assert_eq!(Some(r.high_watermark()), hwm);
        let mut at = now;
        fetch = next_request(&mut r, &mut at, out, "next fetch", is_fetch);
    }
}

#[test]
fn a_follower_drops_records_that_do_not_continue_its_log_and_counts_them() {
    // Goal: fetched records are appended only when they continue the log: from its end, in
    // order, with epochs that are positive, never decrease and do not exceed the leader's,
    // and with every voters record decodable. Others are dropped whole and counted in
    // `Stats::bad_records`, nothing appended.
    // Method: r3 follows r1 in epoch 2 with an empty log; r1 answers with one bad batch of
    // each kind, then with records that fit.
    let (mut r, mut now, mut fetch) = follower_fetching(2);
    let batch = |spec: &[(u64, u32)]| -> Vec<Record> {
        spec.iter()
            .map(|&(offset, epoch)| Record {
                offset: Offset(offset),
                epoch: Epoch(epoch),
                kind: RecordKind::Data,
                payload: Bytes::from(vec![offset as u8]),
            })
            .collect()
    };
    let mut bad_voters = batch(&[(0, 1), (1, 1)]);
    bad_voters[1].kind = RecordKind::Voters;
    bad_voters[1].payload = Bytes::from_static(b"not a voter set");
    let bad = [
        ("a gap", batch(&[(2, 1), (3, 1)])),
        ("a decreasing epoch", batch(&[(0, 2), (1, 1)])),
        ("an epoch above the leader's", batch(&[(0, 3)])),
        ("epoch zero", batch(&[(0, 0)])),
        ("an undecodable voter set", bad_voters),
    ];
    for (n, (what, records)) in bad.into_iter().enumerate() {
        let mut answer = fetch_ok(2, 1, None);
        answer.records = records;
        let (log, next) = answer_fetch(&mut r, &mut now, fetch, answer);
        fetch = next;
        assert!(!appended(&log), "records with {what} appended");
        assert_eq!(
            (r.stats().bad_records, r.log_end().offset),
            (n as u64 + 1, Offset(0)),
            "{what}"
        );
    }
    let mut fits = fetch_ok(2, 1, None);
    fits.records = batch(&[(0, 1), (1, 2), (2, 2)]);
    let (log, _) = answer_fetch(&mut r, &mut now, fetch, fits);
    assert!(appended(&log));
    assert_eq!((r.stats().bad_records, r.log_end().offset), (5, Offset(3)));
}

#[test]
fn a_follower_truncates_on_a_diverging_epoch_but_never_below_its_high_watermark() {
    // Goal: KRaft's truncation: a diverging answer cuts the log to where the leader's epoch
    // ends (when that is below the log end), never below the high watermark (refused and
    // counted in `Stats::unsafe_truncations`), and a divergence at the log end changes
    // nothing (no truncation is written).
    // Method: r3 holds 6 records of epoch 1, 3 of them committed; answers diverge at 2
    // (below the high watermark), at 6 (the end), then at 4.
    let (mut r, mut now, fetch) = follower_fetching(1);
    let mut first = fetch_ok(1, 1, Some(Offset(3)));
    first.records = epoch_1_records(0, 6);
    let (_, mut fetch) = answer_fetch(&mut r, &mut now, fetch, first);
    assert_eq!(
        (r.log_end().offset, r.high_watermark()),
        (Offset(6), Offset(3))
    );
    for (at, truncated_to, refused) in [(2, None, 1), (6, None, 1), (4, Some(Offset(4)), 1)] {
        let mut diverging = fetch_ok(1, 1, None);
        diverging.diverging = Some(OffsetAndEpoch::new(Offset(at), Epoch(1)));
        let (log, next) = answer_fetch(&mut r, &mut now, fetch, diverging);
        fetch = next;
        let truncation = log.iter().find_map(|op| match op {
            LogOp::Truncate { end, .. } => Some(*end),
            _ => None,
        });
        assert_eq!(truncation, truncated_to, "diverging at {at}");
        assert_eq!(r.stats().unsafe_truncations, refused, "diverging at {at}");
        assert_eq!(r.log_end().offset, truncated_to.unwrap_or(Offset(6)));
    }
}
