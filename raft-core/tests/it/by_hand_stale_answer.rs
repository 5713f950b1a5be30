//! An observer's core driven by hand through an interleaving in which a fetch answer moves its
//! high watermark past the snapshot it is downloading: the case the guard against installing
//! an old snapshot exists for (planted `install-old-snapshot`, README "Planted bugs"), which
//! the random sweep reaches only on seeds where replicas keep logs of different lengths below
//! their snapshots.
//!
//! How it arises: a downloading replica sends no Fetch, only FetchSnapshot, so its high
//! watermark stays put while it downloads, except through one door. An observer downloading
//! from the leader of epoch 1 learns of epoch 2 without its leader and probes a voter; that
//! voter now leads epoch 2 and, still holding its log from the observer's fetch offset (a long
//! retention), answers the probe with records and a high watermark past the snapshot. The
//! observer follows it and takes the answer as its own fetch's. The new leader holds the same
//! snapshot, so the download finishes from it.

use bytes::Bytes;
use raft_core::message::{FetchSnapshotResponse, Request, Response};
use raft_core::planted::Planted;
use raft_core::protocol::{Input, LogOp, Outputs, SnapshotOp};
use raft_core::voters::VoterSet;
use raft_core::{Epoch, Offset, OffsetAndEpoch, ReplicaId, Role};

use crate::by_hand::{
    answer_from, core, epoch_1_records, fetch_ok, next_request, step, sync_last_append,
};

/// What the observer did with the finished download: whether it reset its log or restored
/// its state machine, and its high watermark before and after.
struct Outcome {
    installed: bool,
    hwm_before: Offset,
    hwm_after: Offset,
}

/// Runs the interleaving on observer r4 (voters 1 to 3) with `planted` switched on, and
/// reports what the verified download did.
fn run(planted: Option<Planted>) -> Outcome {
    let mut r = core(4, 3, |c| c.test_planted = planted);
    let mut now = 1_000;
    let is_fetch = |q: &Request| matches!(q, Request::Fetch(_));
    let is_chunk_request = |q: &Request| matches!(q, Request::FetchSnapshot(_));
    // The observer probes a voter, which names r1 as the leader of epoch 1.
    let probe = next_request(
        &mut r,
        &mut now,
        Outputs::default(),
        "first probe",
        is_fetch,
    );
    let out = step(
        &mut r,
        now,
        answer_from(probe, Response::Fetch(fetch_ok(1, 1, None))),
    );
    assert_eq!((r.role(), r.leader()), (Role::Follower, Some(ReplicaId(1))));
    // r1 answers the observer's fetch with the snapshot at offset 10 (its log starts above).
    let fetch = next_request(&mut r, &mut now, out, "fetch", is_fetch);
    assert_eq!(fetch.0, ReplicaId(1));
    let snapshot = OffsetAndEpoch::new(Offset(10), Epoch(1));
    let mut pointer = fetch_ok(1, 1, None);
    pointer.snapshot = Some(snapshot);
    let out = step(&mut r, now, answer_from(fetch, Response::Fetch(pointer)));
    assert_eq!(r.snapshot_download(), Some((snapshot, 0)));
    // Its first chunk request is answered from epoch 2, which has no leader yet.
    let chunk_request = next_request(&mut r, &mut now, out, "chunk request", is_chunk_request);
    let unknown = FetchSnapshotResponse {
        error: Some(raft_core::message::ErrorCode::UnknownLeaderEpoch),
        epoch: Epoch(2),
        leader: None,
        snapshot,
        size: 0,
        checksum: 0,
        position: 0,
        data: Bytes::new(),
    };
    let out = step(
        &mut r,
        now,
        answer_from(chunk_request, Response::FetchSnapshot(unknown)),
    );
    assert_eq!((r.role(), r.epoch()), (Role::Unattached, Epoch(2)));
    assert_eq!(r.snapshot_download(), Some((snapshot, 0)), "kept");
    // It probes again; the voter it asks now leads epoch 2 and still holds epoch 1's records
    // from offset 0: it answers with 15 of them and a high watermark of 15.
    let probe = next_request(&mut r, &mut now, out, "second probe", is_fetch);
    let mut records = fetch_ok(2, probe.0 .0, Some(Offset(15)));
    records.records = epoch_1_records(0, 15);
    let mut out = step(&mut r, now, answer_from(probe, Response::Fetch(records)));
    // The records become durable before the next request (a fetch offset acknowledges them).
    let synced = sync_last_append(&mut r, now, &out, "the probe's records");
    out.messages.extend(synced.messages);
    assert_eq!((r.role(), r.leader()), (Role::Follower, Some(probe.0)));
    let hwm_before = r.high_watermark();
    // The download resumes from the new leader, which holds the same snapshot: one chunk of
    // 4 bytes, then the driver's verification.
    let chunk_request = next_request(
        &mut r,
        &mut now,
        out,
        "resumed chunk request",
        is_chunk_request,
    );
    assert_eq!(chunk_request.0, probe.0);
    let chunk = FetchSnapshotResponse {
        error: None,
        epoch: Epoch(2),
        leader: Some(probe.0),
        snapshot,
        size: 4,
        checksum: 9,
        position: 0,
        data: Bytes::from_static(b"snap"),
    };
    let out = step(
        &mut r,
        now,
        answer_from(chunk_request, Response::FetchSnapshot(chunk)),
    );
    let finished = out
        .snapshot
        .iter()
        .any(|op| matches!(op, SnapshotOp::Finish { id, .. } if *id == snapshot));
    assert!(finished, "the one chunk completes the download: {out:?}");
    let verified = Input::SnapshotDownloaded {
        id: snapshot,
        verified: true,
        voters: VoterSet::from_ids((1..=3).map(ReplicaId)),
    };
    let out: Outputs = step(&mut r, now, verified);
    let reset = out.log.iter().any(|op| matches!(op, LogOp::Reset { .. }));
    Outcome {
        installed: reset || out.restore.is_some(),
        hwm_before,
        hwm_after: r.high_watermark(),
    }
}

#[test]
fn a_download_passed_by_the_high_watermark_is_kept_but_not_installed() {
    // Goal: a replica whose high watermark passed the snapshot it was downloading records the
    // snapshot but keeps its log: installing it would reset the log below records it already
    // knows committed, and move its high watermark back.
    let o = run(None);
    assert_eq!(
        o.hwm_before,
        Offset(15),
        "the probe's answer committed 0..15"
    );
    assert!(!o.installed, "the log is kept and nothing is restored");
    assert_eq!(o.hwm_after, Offset(15));
}

#[test]
fn the_interleaving_catches_install_old_snapshot() {
    // Goal: the scenario above is a real test of the guard: with the planted bug that skips
    // it, the replica resets its log to the snapshot and its high watermark goes back.
    let o = run(Some(Planted::InstallOldSnapshot));
    assert_eq!(o.hwm_before, Offset(15));
    assert!(o.installed, "the planted bug installs the old snapshot");
    assert_eq!(o.hwm_after, Offset(10), "and the high watermark moves back");
}
