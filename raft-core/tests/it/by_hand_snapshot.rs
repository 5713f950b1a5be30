//! Snapshot downloads (KIP-630) driven by hand on one replica's core, at the edges of their
//! rules: which FetchSnapshot requests a leader serves, and how a follower's download treats
//! what an honest leader and snapshot store never send (a snapshot id not ahead of it, chunks of
//! another snapshot or position, a size or checksum that changes, chunks that do not add up to
//! the size, a verification that is early, for another snapshot or failed) and what becomes of a
//! download when its replica changes role. Counters are checked to the exact value: they are
//! the only trace some of these rules leave.

use bytes::Bytes;
use raft_core::message::{
    ErrorCode, FetchResponse, FetchSnapshotRequest, FetchSnapshotResponse, ReadBarrier, Request,
    RequestId, Response,
};
use raft_core::protocol::{Fill, Input, LogOp, Outgoing, Outputs, Replica, SnapshotOp};
use raft_core::{Epoch, Instant, Offset, OffsetAndEpoch, Record, RecordKind, ReplicaId, Role};

use crate::by_hand::{
    begin_quorum_epoch, core, established_leader, r2_grants, request_to, step, sync_last_append,
    tick_until,
};

/// The snapshot r1 names: it covers the offsets below 3, the last of them of epoch 1.
const SNAP: OffsetAndEpoch = OffsetAndEpoch {
    offset: Offset(3),
    epoch: Epoch(1),
};
/// A newer snapshot than [`SNAP`].
const NEWER: OffsetAndEpoch = OffsetAndEpoch {
    offset: Offset(5),
    epoch: Epoch(1),
};

/// Data records of epoch 1 at offsets `from..to`.
fn records(from: u64, to: u64) -> Vec<Record> {
    (from..to)
        .map(|o| Record {
            offset: Offset(o),
            epoch: Epoch(1),
            kind: RecordKind::Data,
            payload: Bytes::new(),
        })
        .collect()
}

/// r1's answer to a fetch, as leader of epoch 1: `records` with the high watermark `hwm`, or
/// the snapshot to download instead.
fn fetch_answer(snapshot: Option<OffsetAndEpoch>, records: Vec<Record>, hwm: u64) -> Response {
    Response::Fetch(FetchResponse {
        error: None,
        epoch: Epoch(1),
        leader: Some(ReplicaId(1)),
        high_watermark: Some(Offset(hwm)),
        diverging: None,
        records,
        read_barrier: ReadBarrier::default(),
        snapshot,
    })
}

/// r1's chunk `data` at `position` of snapshot `snap`, which it says has `size` bytes with
/// `checksum`.
fn chunk(snap: OffsetAndEpoch, size: u64, checksum: u32, position: u64, data: &[u8]) -> Response {
    Response::FetchSnapshot(FetchSnapshotResponse {
        error: None,
        epoch: Epoch(1),
        leader: Some(ReplicaId(1)),
        snapshot: snap,
        size,
        checksum,
        position,
        data: Bytes::copy_from_slice(data),
    })
}

/// r1's refusal of a FetchSnapshot request for [`SNAP`].
fn refusal(error: ErrorCode) -> Response {
    Response::FetchSnapshot(FetchSnapshotResponse {
        error: Some(error),
        epoch: Epoch(1),
        leader: Some(ReplicaId(1)),
        snapshot: SNAP,
        size: 0,
        checksum: 0,
        position: 0,
        data: Bytes::new(),
    })
}

/// Steps r1's `response` to the request `id`.
fn answer(r: &mut Replica, now: u64, id: RequestId, response: Response) -> Outputs {
    let from = ReplicaId(1);
    step(r, now, Input::Response { from, id, response })
}

/// The FetchSnapshot request to r1 in `out`.
fn snapshot_request(out: &Outputs) -> Option<(RequestId, FetchSnapshotRequest)> {
    out.messages.iter().find_map(|m| match m {
        Outgoing::Request {
            to,
            id,
            request: Request::FetchSnapshot(q),
        } if *to == ReplicaId(1) => Some((*id, q.clone())),
        _ => None,
    })
}

/// The FetchSnapshot request to r1 in `out`, which must be there, asking for `position` of
/// [`SNAP`]; its id.
#[track_caller]
fn next_chunk_request(out: &Outputs, position: u64) -> RequestId {
    let (id, q) = snapshot_request(out).expect("a FetchSnapshot request to r1");
    assert_eq!((q.snapshot, q.position), (SNAP, position), "{q:?}");
    id
}

/// The Fetch request to r1 in `out`.
fn fetch_request(out: &Outputs) -> Option<RequestId> {
    request_to(out, 1, |q| matches!(q, Request::Fetch(_)))
}

/// Whether `out` installs a snapshot: the log is reset to it and the state machine restored.
fn installs(out: &Outputs, snap: OffsetAndEpoch) -> bool {
    let reset = out
        .log
        .iter()
        .any(|op| matches!(op, LogOp::Reset { start, .. } if *start == snap));
    assert_eq!(
        reset,
        out.restore == Some(snap),
        "reset and restore go together"
    );
    reset
}

/// The driver's verification of [`SNAP`] (or another snapshot), with r's bootstrap voters.
fn downloaded(r: &Replica, id: OffsetAndEpoch, verified: bool) -> Input {
    let voters = r.config().bootstrap_voters();
    Input::SnapshotDownloaded {
        id,
        verified,
        voters,
    }
}

/// Voter r3 of three (with `tune`), following r1 in epoch 1 at time 1 µs; the id of its first
/// fetch.
fn follower(tune: impl FnOnce(&mut raft_core::Config)) -> (Replica, u64, RequestId) {
    let mut r = core(3, 3, tune);
    let now = 1_000;
    let begin = begin_quorum_epoch(1, 1, 1, 3);
    let out = step(&mut r, now, begin);
    assert_eq!((r.role(), r.leader()), (Role::Follower, Some(ReplicaId(1))));
    let fetch = fetch_request(&out).expect("a fetch to r1");
    (r, now, fetch)
}

/// [`follower`] told by r1's answer to its first fetch to download [`SNAP`]; the id of its first
/// FetchSnapshot request.
fn downloading(tune: impl FnOnce(&mut raft_core::Config)) -> (Replica, u64, RequestId) {
    let (mut r, now, fetch) = follower(tune);
    let out = answer(&mut r, now, fetch, fetch_answer(Some(SNAP), Vec::new(), 0));
    assert_eq!(r.snapshot_download(), Some((SNAP, 0)));
    let (id, q) = snapshot_request(&out).expect("a FetchSnapshot request to r1");
    let expected = (Epoch(1), ReplicaId(3), SNAP, 0, 1 << 20);
    assert_eq!(
        (q.epoch, q.replica, q.snapshot, q.position, q.max_bytes),
        expected
    );
    (r, now, id)
}

/// Observer r2 of the single voter r1, which leads epoch 1: it finds r1 by a probe, fetches,
/// and is told to download [`SNAP`]. Returns it, the time and the id of its first FetchSnapshot
/// request. (With one voter every probe goes to r1.)
fn observer_downloading() -> (Replica, u64, RequestId) {
    let mut r = core(2, 1, |_| {});
    let now = 1_000;
    let out = step(&mut r, now, Input::Tick);
    let probe = fetch_request(&out).expect("a probe of r1");
    let out = answer(&mut r, now, probe, fetch_answer(None, Vec::new(), 0));
    assert_eq!((r.role(), r.leader()), (Role::Follower, Some(ReplicaId(1))));
    let fetch = fetch_request(&out).expect("a fetch from the leader r1");
    let out = answer(&mut r, now, fetch, fetch_answer(Some(SNAP), Vec::new(), 0));
    let id = next_chunk_request(&out, 0);
    (r, now, id)
}

/// Ticks the observer until its fetch timeout makes it forget r1; the id of its next probe.
fn observer_times_out(r: &mut Replica, now: &mut u64) -> RequestId {
    let outs = tick_until(r, now, |r| r.role() == Role::Unattached);
    assert_eq!(r.role(), Role::Unattached, "the observer timed out");
    outs.iter()
        .find_map(fetch_request)
        .expect("a probe of r1 once unattached")
}

#[test]
fn a_snapshot_not_ahead_of_the_high_watermark_is_refused_and_counted() {
    // Goal: a follower downloads only a snapshot past its high watermark (a correct leader never
    // names another); one at or below it is ignored, counted each time, and fetching goes on.
    // Method: r3 fetches two records with the high watermark 2; r1's next answers name
    // snapshots ending at 2 (the boundary), at 1, then at 3.
    let (mut r, now, fetch) = follower(|_| {});
    let out = answer(&mut r, now, fetch, fetch_answer(None, records(0, 2), 2));
    assert_eq!(r.high_watermark(), Offset(2));
    let mut out = sync_last_append(&mut r, now, &out, "the records");
    for (n, offset) in [2, 1].into_iter().enumerate() {
        let fetch = fetch_request(&out).expect("a fetch to r1");
        let id = OffsetAndEpoch::new(Offset(offset), Epoch(1));
        out = answer(&mut r, now, fetch, fetch_answer(Some(id), Vec::new(), 2));
        assert_eq!(r.stats().bad_snapshots, n as u64 + 1, "snapshot {id}");
        assert_eq!(r.snapshot_download(), None, "snapshot {id}");
        assert!(snapshot_request(&out).is_none(), "snapshot {id}: {out:?}");
    }
    let fetch = fetch_request(&out).expect("fetching goes on");
    let out = answer(&mut r, now, fetch, fetch_answer(Some(SNAP), Vec::new(), 2));
    assert_eq!(r.snapshot_download(), Some((SNAP, 0)));
    assert_eq!(r.stats().bad_snapshots, 2);
    next_chunk_request(&out, 0);
}

/// A FetchSnapshot request from `from` naming `replica`, in `epoch`, for `snapshot` from byte 7.
fn fetch_snapshot(
    from: u32,
    replica: u32,
    epoch: u32,
    snapshot: OffsetAndEpoch,
    max: u32,
) -> Input {
    Input::Request {
        from: ReplicaId(from),
        id: RequestId(9),
        request: Request::FetchSnapshot(FetchSnapshotRequest {
            epoch: Epoch(epoch),
            replica: ReplicaId(replica),
            replica_directory: None,
            snapshot,
            position: 7,
            max_bytes: max,
        }),
    }
}

/// The FetchSnapshot answer in `out`, with its fill.
fn snapshot_answer(out: &Outputs) -> (FetchSnapshotResponse, Option<Fill>) {
    let found = out.messages.iter().find_map(|m| match m {
        Outgoing::Response {
            response: Response::FetchSnapshot(a),
            fill,
            ..
        } => Some((a.clone(), *fill)),
        _ => None,
    });
    found.expect("a FetchSnapshot answer")
}

#[test]
fn a_leader_serves_a_chunk_only_of_a_snapshot_it_holds_to_a_fetcher_of_its_epoch() {
    // Goal: the leader answers FetchSnapshot with an error, and no chunk, for a request naming
    // another replica or the leader itself, from another epoch, or for a snapshot newer than the
    // one it holds (or when it holds none); it asks the driver for a chunk of the one it holds
    // or an older one, of at least 1 and at most the configured chunk size.
    // Method: an established r1 with 4 KiB chunks is asked before and after it takes a snapshot
    // at its high watermark.
    let (mut r, now) = established_leader(|c| c.snapshot_chunk_bytes = 4096);
    let held = OffsetAndEpoch::new(r.high_watermark(), Epoch(1));
    assert!(held.offset > Offset::ZERO);
    let (none, fill) = snapshot_answer(&step(&mut r, now, fetch_snapshot(2, 2, 1, held, 100)));
    assert_eq!(
        (none.error, fill),
        (Some(ErrorCode::SnapshotNotFound), None)
    );
    step(&mut r, now, Input::SnapshotTaken(held));
    assert_eq!(r.status(raft_core::Instant(now)).snapshot, Some(held));

    let newer = OffsetAndEpoch::new(held.offset.next(), Epoch(1));
    let refused = [
        (
            "another replica's request",
            2,
            3,
            1,
            held,
            ErrorCode::InvalidRequest,
        ),
        ("its own id", 1, 1, 1, held, ErrorCode::InvalidRequest),
        (
            "an older epoch",
            2,
            2,
            0,
            held,
            ErrorCode::FencedLeaderEpoch,
        ),
        (
            "a later epoch",
            2,
            2,
            2,
            held,
            ErrorCode::UnknownLeaderEpoch,
        ),
        (
            "a newer snapshot",
            2,
            2,
            1,
            newer,
            ErrorCode::SnapshotNotFound,
        ),
    ];
    for (name, from, replica, epoch, snap, error) in refused {
        let out = step(&mut r, now, fetch_snapshot(from, replica, epoch, snap, 100));
        let (a, fill) = snapshot_answer(&out);
        assert_eq!((a.error, fill), (Some(error), None), "{name}");
        assert_eq!(
            (a.epoch, a.leader),
            (Epoch(1), Some(ReplicaId(1))),
            "{name}"
        );
    }

    let older = OffsetAndEpoch::new(Offset(held.offset.0 - 1), Epoch(1));
    let served = [
        ("the held snapshot", held, 100, 100),
        ("an older snapshot", older, 100, 100),
        ("no bytes asked for", held, 0, 1),
        ("the chunk size", held, 4096, 4096),
        ("more than a chunk", held, u32::MAX, 4096),
    ];
    for (name, snap, asked, max_bytes) in served {
        let out = step(&mut r, now, fetch_snapshot(2, 2, 1, snap, asked));
        let (a, fill) = snapshot_answer(&out);
        assert_eq!(a.error, None, "{name}");
        assert_eq!((a.snapshot, a.position), (snap, 7), "{name}");
        let chunk = Fill::SnapshotChunk {
            id: snap,
            position: 7,
            max_bytes,
        };
        assert_eq!(fill, Some(chunk), "{name}");
    }
    assert_eq!(r.role(), Role::Leader);
}

#[test]
fn a_chunk_of_another_snapshot_or_position_is_dropped_and_counted() {
    // Goal: a chunk is written only if it is of the snapshot and at the position the download
    // asked for; else it is dropped and counted as stale, nothing is written, the download keeps
    // its place, and the chunk is asked for again.
    // Method: r3 asks for byte 0 of SNAP; r1 answers with a chunk of another snapshot, then
    // with one at byte 1, then with the right one.
    let (mut r, now, id) = downloading(|_| {});
    assert_eq!(r.stats().stale_responses, 0);
    let wrong = [
        ("another snapshot", chunk(NEWER, 4, 9, 0, &[1, 2])),
        ("another position", chunk(SNAP, 4, 9, 1, &[2])),
    ];
    let mut id = id;
    for (n, (name, response)) in wrong.into_iter().enumerate() {
        let out = answer(&mut r, now, id, response);
        assert_eq!(r.stats().stale_responses, n as u64 + 1, "{name}");
        assert!(out.snapshot.is_empty(), "{name}: {:?}", out.snapshot);
        assert_eq!(r.snapshot_download(), Some((SNAP, 0)), "{name}");
        id = next_chunk_request(&out, 0);
    }
    let out = answer(&mut r, now, id, chunk(SNAP, 4, 9, 0, &[1, 2]));
    let write = SnapshotOp::Write {
        id: SNAP,
        position: 0,
        data: Bytes::from_static(&[1, 2]),
    };
    assert_eq!(out.snapshot, vec![write]);
    assert_eq!(r.snapshot_download(), Some((SNAP, 2)));
    assert_eq!(r.stats().stale_responses, 2);
    next_chunk_request(&out, 2);
}

#[test]
fn a_snapshot_whose_size_or_checksum_changes_is_downloaded_again_from_the_start() {
    // Goal: every chunk must state the size and checksum the first one stated (a replica may
    // hold another snapshot with the same id); a change restarts the download from byte 0,
    // writes nothing, and is counted each time.
    // Method: r3 gets bytes 0..2 of SNAP stated as 4 bytes with checksum 9; the next chunk
    // states checksum 8. After the restart, bytes 0..2 with checksum 8, then a chunk stating
    // 5 bytes.
    let (mut r, now, id) = downloading(|_| {});
    let out = answer(&mut r, now, id, chunk(SNAP, 4, 9, 0, &[1, 2]));
    let id = next_chunk_request(&out, 2);
    let out = answer(&mut r, now, id, chunk(SNAP, 4, 8, 2, &[3, 4]));
    assert_eq!(r.stats().snapshot_restarts, 1);
    assert!(out.snapshot.is_empty(), "{:?}", out.snapshot);
    assert_eq!(r.snapshot_download(), Some((SNAP, 0)));
    let id = next_chunk_request(&out, 0);
    // The first chunk after a restart sets what the rest must state.
    let out = answer(&mut r, now, id, chunk(SNAP, 4, 8, 0, &[1, 2]));
    assert_eq!(out.snapshot.len(), 1, "{:?}", out.snapshot);
    assert_eq!(r.stats().snapshot_restarts, 1);
    let id = next_chunk_request(&out, 2);
    let out = answer(&mut r, now, id, chunk(SNAP, 5, 8, 2, &[3, 4]));
    assert_eq!(r.stats().snapshot_restarts, 2);
    assert!(out.snapshot.is_empty(), "{:?}", out.snapshot);
    assert_eq!(r.snapshot_download(), Some((SNAP, 0)));
    next_chunk_request(&out, 0);
    assert_eq!(r.stats().bad_snapshots, 0);
}

#[test]
fn chunks_must_add_up_to_the_stated_size() {
    // Goal: a chunk that ends past the stated size, or an empty one before the end, cannot be
    // part of the snapshot: the download restarts from byte 0, nothing is written, and it is
    // counted each time. A chunk ending exactly at the size completes the download (the driver
    // is asked to verify it, and nothing more is fetched), and so does an empty chunk at the
    // end of an empty snapshot.
    // Method: bytes 0..2 of a 4-byte SNAP, then bytes 2..5; again 0..2, then an empty chunk at
    // 2; again 0..2, then 2..4. Last, a fresh download of SNAP stated as 0 bytes.
    let (mut r, now, id) = downloading(|_| {});
    let mut id = id;
    for (n, bad) in [&[3u8, 4, 5][..], &[]].into_iter().enumerate() {
        let out = answer(&mut r, now, id, chunk(SNAP, 4, 9, 0, &[1, 2]));
        assert_eq!(out.snapshot.len(), 1, "{:?}", out.snapshot);
        let at_2 = next_chunk_request(&out, 2);
        let out = answer(&mut r, now, at_2, chunk(SNAP, 4, 9, 2, bad));
        assert_eq!(r.stats().bad_snapshots, n as u64 + 1, "{bad:?}");
        assert!(out.snapshot.is_empty(), "{bad:?}: {:?}", out.snapshot);
        assert_eq!(r.snapshot_download(), Some((SNAP, 0)), "{bad:?}");
        id = next_chunk_request(&out, 0);
    }
    let out = answer(&mut r, now, id, chunk(SNAP, 4, 9, 0, &[1, 2]));
    let at_2 = next_chunk_request(&out, 2);
    let out = answer(&mut r, now, at_2, chunk(SNAP, 4, 9, 2, &[3, 4]));
    let expected = vec![
        SnapshotOp::Write {
            id: SNAP,
            position: 2,
            data: Bytes::from_static(&[3, 4]),
        },
        SnapshotOp::Finish {
            id: SNAP,
            size: 4,
            checksum: 9,
        },
    ];
    assert_eq!(out.snapshot, expected);
    assert_eq!(r.snapshot_download(), Some((SNAP, 4)));
    assert!(snapshot_request(&out).is_none(), "nothing left to fetch");
    assert_eq!(
        (r.stats().bad_snapshots, r.stats().snapshot_restarts),
        (2, 0)
    );

    let (mut r, now, id) = downloading(|_| {});
    let out = answer(&mut r, now, id, chunk(SNAP, 0, 0, 0, &[]));
    let finish = SnapshotOp::Finish {
        id: SNAP,
        size: 0,
        checksum: 0,
    };
    assert_eq!(out.snapshot, vec![finish], "an empty snapshot is complete");
    assert_eq!(r.stats().bad_snapshots, 0);
}

#[test]
fn a_follower_asks_for_one_chunk_at_a_time_and_waits_out_the_backoff_after_a_refusal() {
    // Goal: while a FetchSnapshot request is unanswered no other is sent; after a refusal the
    // next one goes out exactly one retry backoff (20 ms) later, not before; a leader that no
    // longer holds the snapshot makes the follower drop the download and fetch again at once.
    // Method: r3 asks for byte 0 of SNAP and ticks a second later (within its fetch timeout);
    // r1 then refuses (shutting down); r3 ticks just before and at the backoff's end; r1 last
    // answers that it holds no such snapshot.
    let (mut r, now, id) = downloading(|_| {});
    let out = step(&mut r, now + 1_000_000_000, Input::Tick);
    assert!(
        snapshot_request(&out).is_none(),
        "a second request: {out:?}"
    );
    let t = now + 1_000_000_000;
    let out = answer(&mut r, t, id, refusal(ErrorCode::ShuttingDown));
    assert!(
        snapshot_request(&out).is_none(),
        "asked again at once: {out:?}"
    );
    assert_eq!(r.snapshot_download(), Some((SNAP, 0)));
    let backoff = 20_000_000;
    let out = step(&mut r, t + backoff - 1, Input::Tick);
    assert!(snapshot_request(&out).is_none(), "asked before the backoff");
    let out = step(&mut r, t + backoff, Input::Tick);
    let id = next_chunk_request(&out, 0);
    let out = answer(
        &mut r,
        t + backoff,
        id,
        refusal(ErrorCode::SnapshotNotFound),
    );
    assert_eq!(r.snapshot_download(), None);
    assert!(fetch_request(&out).is_some(), "a fetch at once: {out:?}");
}

#[test]
fn the_same_snapshot_named_again_resumes_its_download_and_another_restarts_it() {
    // Goal: a download survives losing the leader. When a leader names the same snapshot again
    // the download resumes where it stopped; when it names another, it starts over with that.
    // Method: observer r2 (the only way back to a Fetch with a download under way: voters keep
    // asking for chunks) gets bytes 0..2 of SNAP, times out and probes r1, whose answer names
    // SNAP; on a copy of it, NEWER.
    let (mut r, mut now, id) = observer_downloading();
    let out = answer(&mut r, now, id, chunk(SNAP, 4, 9, 0, &[1, 2]));
    next_chunk_request(&out, 2);
    let probe = observer_times_out(&mut r, &mut now);
    assert_eq!(
        r.snapshot_download(),
        Some((SNAP, 2)),
        "kept while unattached"
    );
    let mut other = r.clone();

    let out = answer(&mut r, now, probe, fetch_answer(Some(SNAP), Vec::new(), 0));
    assert_eq!(r.role(), Role::Follower);
    assert_eq!(r.snapshot_download(), Some((SNAP, 2)));
    next_chunk_request(&out, 2);

    let out = answer(
        &mut other,
        now,
        probe,
        fetch_answer(Some(NEWER), Vec::new(), 0),
    );
    assert_eq!(other.snapshot_download(), Some((NEWER, 0)));
    let (_, q) = snapshot_request(&out).expect("a FetchSnapshot request to r1");
    assert_eq!((q.snapshot, q.position), (NEWER, 0));
}

#[test]
fn a_follower_verifying_its_download_has_nothing_due_until_its_fetch_timeout() {
    // Goal: while the driver verifies a finished download, the follower sends nothing, so its
    // next deadline is its fetch timeout, not the next fetch time it will not use. Regression:
    // the next fetch time stayed a deadline, already passed, and the driver woke the replica
    // again at once for as long as the verification ran (a core spinning; in the simulator
    // the L0 check, in driver tests a paused clock that stood still).
    // Method: r3 gets all 4 bytes of SNAP in one chunk; at that instant and 50 ms later its
    // deadline is after the step, and a tick then sends nothing.
    let (mut r, now, id) = downloading(|_| {});
    let out = answer(&mut r, now, id, chunk(SNAP, 4, 9, 0, &[1, 2, 3, 4]));
    assert!(matches!(
        out.snapshot.last(),
        Some(SnapshotOp::Finish { .. })
    ));
    assert!(r.next_deadline() > Instant(now), "{:?}", r.next_deadline());
    let later = now + 50_000_000;
    let out = step(&mut r, later, Input::Tick);
    assert!(
        snapshot_request(&out).is_none() && out.messages.is_empty(),
        "{out:?}"
    );
    assert!(
        r.next_deadline() > Instant(later),
        "{:?}",
        r.next_deadline()
    );
    assert_eq!(r.snapshot_download(), Some((SNAP, 4)));
}

#[test]
fn only_the_verification_of_the_finished_download_installs_it() {
    // Goal: the driver's verification counts only for the download's snapshot once every byte
    // is written; an early one, or one for another snapshot, changes nothing. A failed one
    // restarts the download (counted); a successful one installs the snapshot: the log is reset
    // to it, the state machine restored from it, and it is committed.
    // Method: r3 gets bytes 0..2 of a 4-byte SNAP, is told SNAP is verified; gets bytes 2..4,
    // is told NEWER is verified, then that SNAP failed; downloads it again, and is told it is
    // verified.
    let (mut r, now, id) = downloading(|_| {});
    let out = answer(&mut r, now, id, chunk(SNAP, 4, 9, 0, &[1, 2]));
    let id = next_chunk_request(&out, 2);
    let early = downloaded(&r, SNAP, true);
    let out = step(&mut r, now, early);
    assert!(!installs(&out, SNAP), "installed before the end");
    assert_eq!(r.snapshot_download(), Some((SNAP, 2)));

    let out = answer(&mut r, now, id, chunk(SNAP, 4, 9, 2, &[3, 4]));
    assert!(matches!(
        out.snapshot.last(),
        Some(SnapshotOp::Finish { .. })
    ));
    let another = downloaded(&r, NEWER, true);
    let out = step(&mut r, now, another);
    assert!(!installs(&out, NEWER) && !installs(&out, SNAP));
    assert_eq!(r.snapshot_download(), Some((SNAP, 4)));
    assert_eq!(r.stats().snapshot_restarts, 0);

    let failed = downloaded(&r, SNAP, false);
    let out = step(&mut r, now, failed);
    assert!(!installs(&out, SNAP));
    assert_eq!(r.stats().snapshot_restarts, 1);
    assert_eq!(r.snapshot_download(), Some((SNAP, 0)));
    let id = next_chunk_request(&out, 0);
    let out = answer(&mut r, now, id, chunk(SNAP, 4, 9, 0, &[1, 2, 3, 4]));
    assert_eq!(
        out.snapshot.len(),
        2,
        "written and finished: {:?}",
        out.snapshot
    );

    let verified = downloaded(&r, SNAP, true);
    let out = step(&mut r, now, verified);
    assert!(installs(&out, SNAP), "{out:?}");
    assert_eq!(out.committed, Some(SNAP.offset));
    assert_eq!((r.high_watermark(), r.log_end()), (SNAP.offset, SNAP));
    assert_eq!(r.snapshot_download(), None);
    assert_eq!(r.stats().snapshots_installed, 1);
    assert_eq!(r.status(raft_core::Instant(now)).snapshot, Some(SNAP));
}

/// Answers `id` with all of [`SNAP`] (4 bytes) in one chunk; checks the driver is asked to
/// verify it.
fn whole_snapshot(r: &mut Replica, now: u64, id: RequestId) {
    let out = answer(r, now, id, chunk(SNAP, 4, 9, 0, &[1, 2, 3, 4]));
    let finish = SnapshotOp::Finish {
        id: SNAP,
        size: 4,
        checksum: 9,
    };
    assert_eq!(out.snapshot.last(), Some(&finish));
}

#[test]
fn a_voter_that_stopped_following_keeps_its_log_an_observer_installs() {
    // Goal: a voter that is campaigning when its download is verified does not install it (it
    // may be about to lead, and a leader's log is the one others catch up with); it only
    // remembers the snapshot. An observer installs whatever its role.
    // Method: voter r3 and observer r2 download all of SNAP, tick until their fetch timeout
    // moved them on (r3 to a pre-vote, r2 to unattached), and are told it is verified.
    let (mut r, mut now, id) = downloading(|_| {});
    whole_snapshot(&mut r, now, id);
    tick_until(&mut r, &mut now, |r| r.role() != Role::Follower);
    assert_eq!(r.role(), Role::Prospective);
    let verified = downloaded(&r, SNAP, true);
    let out = step(&mut r, now, verified);
    assert!(!installs(&out, SNAP), "a campaigning voter installed");
    assert_eq!(out.committed, None);
    assert_eq!(r.log_end().offset, Offset::ZERO);
    assert_eq!(r.status(raft_core::Instant(now)).snapshot, Some(SNAP));
    assert_eq!(r.snapshot_download(), None);
    assert_eq!(r.stats().snapshots_installed, 0);

    let (mut o, mut now, id) = observer_downloading();
    whole_snapshot(&mut o, now, id);
    observer_times_out(&mut o, &mut now);
    let verified = downloaded(&o, SNAP, true);
    let out = step(&mut o, now, verified);
    assert!(
        installs(&out, SNAP),
        "an unattached observer did not install"
    );
    assert_eq!(o.high_watermark(), SNAP.offset);
    assert_eq!(o.stats().snapshots_installed, 1);
}

#[test]
fn a_snapshot_the_committed_log_already_reached_is_kept_not_installed() {
    // Goal: a verified snapshot is installed only if it ends past the high watermark; once the
    // replica committed up to its end (the boundary) or past it by fetching, the log stays and
    // the snapshot is only remembered: installing would lower the high watermark.
    // Method: observer r2 downloads all of SNAP (it ends at 3), times out, and r1's answer to
    // its probe brings records with the high watermark 3; on copies, 4 and 2. Then the
    // verification.
    let (mut o, mut now, id) = observer_downloading();
    whole_snapshot(&mut o, now, id);
    let probe = observer_times_out(&mut o, &mut now);
    for (hwm, install) in [(3, false), (4, false), (2, true)] {
        let mut r = o.clone();
        answer(&mut r, now, probe, fetch_answer(None, records(0, hwm), hwm));
        assert_eq!(r.role(), Role::Follower);
        assert_eq!(r.high_watermark(), Offset(hwm));
        let verified = downloaded(&r, SNAP, true);
        let out = step(&mut r, now, verified);
        assert_eq!(installs(&out, SNAP), install, "high watermark {hwm}");
        assert_eq!(r.stats().snapshots_installed, u64::from(install));
        assert_eq!(r.snapshot_download(), None, "high watermark {hwm}");
        assert_eq!(r.status(raft_core::Instant(now)).snapshot, Some(SNAP));
        assert_eq!(r.high_watermark(), SNAP.offset.max(Offset(hwm)));
        let end = if install { SNAP.offset } else { Offset(hwm) };
        assert_eq!(r.log_end().offset, end, "high watermark {hwm}");
    }
}

#[test]
fn a_voter_that_becomes_leader_drops_its_download() {
    // Goal: a leader never installs a snapshot, so winning an election ends any download; when
    // the replica follows again it fetches from its log, rather than resuming the old download.
    // Method: pre-vote off; r3 gets bytes 0..2 of SNAP, times out, campaigns in epoch 2 and
    // wins with r2's vote; its epoch-start record is made durable; r1 then begins epoch 3.
    let (mut r, mut now, id) = downloading(|c| c.pre_vote = false);
    let out = answer(&mut r, now, id, chunk(SNAP, 4, 9, 0, &[1, 2]));
    next_chunk_request(&out, 2);
    let outs = tick_until(&mut r, &mut now, |r| r.role() == Role::Candidate);
    assert_eq!(
        r.snapshot_download(),
        Some((SNAP, 2)),
        "kept while campaigning"
    );
    let out = step(&mut r, now, r2_grants(&outs, 2));
    assert_eq!((r.role(), r.epoch()), (Role::Leader, Epoch(2)));
    assert_eq!(r.snapshot_download(), None, "a leader kept its download");
    sync_last_append(&mut r, now, &out, "the epoch-start record");

    let begin = begin_quorum_epoch(1, 3, 1, 3);
    let out = step(&mut r, now, begin);
    assert_eq!((r.role(), r.leader()), (Role::Follower, Some(ReplicaId(1))));
    assert!(snapshot_request(&out).is_none(), "resumed the old download");
    assert!(
        fetch_request(&out).is_some(),
        "fetches from its log: {out:?}"
    );
    assert_eq!(r.snapshot_download(), None);
}
