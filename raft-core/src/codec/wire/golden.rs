//! The exact bytes of one frame of every request and response and of the version refusal,
//! checked in as text: the round trips in `tests` prove that decoding inverts encoding, this
//! proves that the layout itself stays put.

use std::time::Duration;

use bytes::{Bytes, BytesMut};

use super::tests::{request_frame, response_frame};
use super::*;
use crate::message::{
    BeginQuorumEpochRequest, DescribeQuorumRequest, DescribeQuorumResponse, EndQuorumEpochRequest,
    EpochResponse, ErrorCode, FetchRequest, FetchResponse, FetchSnapshotRequest,
    FetchSnapshotResponse, ForwardRequest, ForwardResponse, ForwardResult, ReadBarrier,
    ReadIndexRequest, ReadIndexResponse, ReplicaProgress, Request, Response, VoteRequest,
    VoteResponse, WriteOrder,
};
use crate::types::{DirectoryId, Epoch, Offset, OffsetAndEpoch, Record, RecordKind, ReplicaId};

/// One sample of every request, every response and the version refusal, as the hex of its
/// frame: the exact bytes on the wire, pinned so that a change to the layout shows up here.
fn golden_frames() -> Vec<(String, Bytes)> {
    let oe = |o, e| OffsetAndEpoch::new(Offset(o), Epoch(e));
    let requests = [
        (
            "vote",
            Request::Vote(VoteRequest {
                epoch: Epoch(7),
                candidate: ReplicaId(2),
                voter: ReplicaId(3),
                voter_directory: Some(DirectoryId(0x0123_4567_89ab_cdef_0011_2233_4455_6677)),
                candidate_directory: None,
                last: oe(41, 6),
                pre_vote: true,
                leader_invited: false,
            }),
        ),
        (
            "begin_quorum_epoch",
            Request::BeginQuorumEpoch(BeginQuorumEpochRequest {
                epoch: Epoch(7),
                leader: ReplicaId(1),
                voter: ReplicaId(3),
                voter_directory: None,
            }),
        ),
        (
            "end_quorum_epoch",
            Request::EndQuorumEpoch(EndQuorumEpochRequest {
                epoch: Epoch(7),
                leader: ReplicaId(1),
                preferred_successors: vec![ReplicaId(3), ReplicaId(2)],
            }),
        ),
        (
            "fetch",
            Request::Fetch(FetchRequest {
                epoch: Epoch(7),
                replica: ReplicaId(2),
                replica_directory: Some(DirectoryId(5)),
                fetch_offset: Offset(42),
                last_fetched_epoch: Epoch(6),
                high_watermark: Some(Offset(40)),
                read_barrier: ReadBarrier(9),
                max_wait: Duration::new(1, 500),
                max_bytes: 65536,
            }),
        ),
        (
            "describe_quorum",
            Request::DescribeQuorum(DescribeQuorumRequest {}),
        ),
        (
            "read_index",
            Request::ReadIndex(ReadIndexRequest {
                epoch: Epoch(7),
                replica: ReplicaId(2),
                read_count: 5,
                lease: true,
            }),
        ),
        (
            "forward",
            Request::Forward(ForwardRequest {
                payloads: vec![
                    Bytes::from_static(b"set k v"),
                    Bytes::from_static(b"incr n"),
                ],
                order: Some(WriteOrder {
                    session: 0x0102_0304_0506_0708,
                    seq: 9,
                }),
                epoch: Epoch(7),
            }),
        ),
        (
            "fetch_snapshot",
            Request::FetchSnapshot(FetchSnapshotRequest {
                epoch: Epoch(7),
                replica: ReplicaId(2),
                replica_directory: None,
                snapshot: oe(30, 5),
                position: 4096,
                max_bytes: 1024,
            }),
        ),
    ];
    let epoch_response = EpochResponse {
        error: Some(ErrorCode::FencedLeaderEpoch),
        epoch: Epoch(8),
        leader: Some(ReplicaId(3)),
    };
    let responses = [
        (
            "vote",
            Response::Vote(VoteResponse {
                error: None,
                epoch: Epoch(7),
                leader: None,
                granted: true,
            }),
        ),
        (
            "begin_quorum_epoch",
            Response::BeginQuorumEpoch(epoch_response.clone()),
        ),
        (
            "end_quorum_epoch",
            Response::EndQuorumEpoch(EpochResponse {
                error: None,
                ..epoch_response
            }),
        ),
        (
            "fetch",
            Response::Fetch(FetchResponse {
                error: None,
                epoch: Epoch(7),
                leader: Some(ReplicaId(1)),
                high_watermark: Some(Offset(43)),
                diverging: Some(oe(40, 6)),
                records: vec![
                    Record {
                        offset: Offset(42),
                        epoch: Epoch(7),
                        kind: RecordKind::LeaderChange,
                        payload: Bytes::new(),
                    },
                    Record {
                        offset: Offset(43),
                        epoch: Epoch(7),
                        kind: RecordKind::Data,
                        payload: Bytes::from_static(b"ab"),
                    },
                ],
                read_barrier: ReadBarrier(9),
                snapshot: None,
            }),
        ),
        (
            "describe_quorum",
            Response::DescribeQuorum(DescribeQuorumResponse {
                error: None,
                epoch: Epoch(7),
                leader: Some(ReplicaId(1)),
                high_watermark: Some(Offset(43)),
                voters: vec![
                    ReplicaProgress {
                        replica: ReplicaId(1),
                        directory: None,
                        end_offset: Some(Offset(44)),
                        since_last_fetch: None,
                    },
                    ReplicaProgress {
                        replica: ReplicaId(2),
                        directory: Some(DirectoryId(2)),
                        end_offset: Some(Offset(43)),
                        since_last_fetch: Some(Duration::from_millis(15)),
                    },
                ],
                observers: vec![ReplicaProgress {
                    replica: ReplicaId(9),
                    directory: None,
                    end_offset: None,
                    since_last_fetch: Some(Duration::new(2, 0)),
                }],
            }),
        ),
        (
            "read_index",
            Response::ReadIndex(ReadIndexResponse {
                error: Some(ErrorCode::NotLeader),
                epoch: Epoch(7),
                leader: Some(ReplicaId(1)),
                read_offset: Some(Offset(43)),
            }),
        ),
        (
            "forward",
            Response::Forward(ForwardResponse {
                error: None,
                epoch: Epoch(7),
                leader: Some(ReplicaId(1)),
                results: vec![
                    ForwardResult {
                        error: None,
                        committed: Some(oe(44, 7)),
                        limit: 0,
                        response: Bytes::from_static(b"OK"),
                    },
                    ForwardResult {
                        error: Some(ErrorCode::OutcomeUnknown),
                        committed: None,
                        limit: 0,
                        response: Bytes::new(),
                    },
                    ForwardResult {
                        error: Some(ErrorCode::TooLarge),
                        committed: None,
                        limit: 524288,
                        response: Bytes::new(),
                    },
                ],
            }),
        ),
        (
            "fetch_snapshot",
            Response::FetchSnapshot(FetchSnapshotResponse {
                error: None,
                epoch: Epoch(7),
                leader: Some(ReplicaId(1)),
                snapshot: oe(30, 5),
                size: 10000,
                checksum: 0xdead_beef,
                position: 4096,
                data: Bytes::from_static(b"xyz"),
            }),
        ),
    ];
    let mut frames = Vec::new();
    for (name, request) in &requests {
        let frame = request_frame(request);
        assert_eq!(
            &decode_request(frame.clone(), &FrameLimits::default()).unwrap(),
            request
        );
        frames.push((format!("{name} request"), frame));
    }
    for (name, response) in &responses {
        let frame = response_frame(response);
        assert_eq!(
            &decode_response(frame.clone(), &FrameLimits::default()).unwrap(),
            response
        );
        frames.push((format!("{name} response"), frame));
    }
    let mut refusal = BytesMut::new();
    encode_version_refusal(1, &mut refusal);
    frames.push(("version refusal".to_string(), refusal.freeze()));
    frames
}

#[test]
fn every_frame_has_pinned_bytes() {
    // Goal: the byte layout of every message is fixed, so that moving or rewriting the
    // codec cannot change what goes on the wire. Method: one sample of each request and
    // response (decoded back as a check), printed as hex, compared with checked-in text.
    let mut text = String::new();
    for (name, frame) in golden_frames() {
        text.push_str(&format!("{name}:\n"));
        for line in frame.chunks(16) {
            let hex: Vec<String> = line.iter().map(|b| format!("{b:02x}")).collect();
            text.push_str(&format!("    {}\n", hex.join(" ")));
        }
    }
    expect_test::expect![[r#"
        vote request:
            05 01 07 00 00 00 02 00 00 00 03 00 00 00 01 77
            66 55 44 33 22 11 00 ef cd ab 89 67 45 23 01 00
            29 00 00 00 00 00 00 00 06 00 00 00 01 00
        begin_quorum_epoch request:
            05 02 07 00 00 00 01 00 00 00 03 00 00 00 00
        end_quorum_epoch request:
            05 03 07 00 00 00 01 00 00 00 02 00 00 00 03 00
            00 00 02 00 00 00
        fetch request:
            05 04 07 00 00 00 02 00 00 00 01 05 00 00 00 00
            00 00 00 00 00 00 00 00 00 00 00 2a 00 00 00 00
            00 00 00 06 00 00 00 01 28 00 00 00 00 00 00 00
            09 00 00 00 00 00 00 00 01 00 00 00 00 00 00 00
            f4 01 00 00 00 00 01 00
        describe_quorum request:
            05 05
        read_index request:
            05 06 07 00 00 00 02 00 00 00 05 00 00 00 01
        forward request:
            05 07 02 00 00 00 07 00 00 00 73 65 74 20 6b 20
            76 06 00 00 00 69 6e 63 72 20 6e 01 08 07 06 05
            04 03 02 01 09 00 00 00 00 00 00 00 07 00 00 00
        fetch_snapshot request:
            05 08 07 00 00 00 02 00 00 00 00 1e 00 00 00 00
            00 00 00 05 00 00 00 00 10 00 00 00 00 00 00 00
            04 00 00
        vote response:
            05 81 00 07 00 00 00 00 01
        begin_quorum_epoch response:
            05 82 01 08 00 00 00 01 03 00 00 00
        end_quorum_epoch response:
            05 83 00 08 00 00 00 01 03 00 00 00
        fetch response:
            05 84 00 07 00 00 00 01 01 00 00 00 01 2b 00 00
            00 00 00 00 00 01 28 00 00 00 00 00 00 00 06 00
            00 00 09 00 00 00 00 00 00 00 00 02 00 00 00 a7
            7a a6 e6 01 01 2a 00 00 00 00 00 00 00 07 00 00
            00 00 00 00 00 75 8b 6d ba 01 00 2b 00 00 00 00
            00 00 00 07 00 00 00 02 00 00 00 61 62
        describe_quorum response:
            05 85 00 07 00 00 00 01 01 00 00 00 01 2b 00 00
            00 00 00 00 00 02 00 00 00 01 00 00 00 00 01 2c
            00 00 00 00 00 00 00 00 02 00 00 00 01 02 00 00
            00 00 00 00 00 00 00 00 00 00 00 00 00 01 2b 00
            00 00 00 00 00 00 01 00 00 00 00 00 00 00 00 c0
            e1 e4 00 01 00 00 00 09 00 00 00 00 00 01 02 00
            00 00 00 00 00 00 00 00 00 00
        read_index response:
            05 86 03 07 00 00 00 01 01 00 00 00 01 2b 00 00
            00 00 00 00 00
        forward response:
            05 87 00 07 00 00 00 01 01 00 00 00 03 00 00 00
            00 01 2c 00 00 00 00 00 00 00 07 00 00 00 00 00
            00 00 02 00 00 00 4f 4b 0e 00 00 00 00 00 00 00
            00 00 0b 00 00 00 08 00 00 00 00 00
        fetch_snapshot response:
            05 88 00 07 00 00 00 01 01 00 00 00 1e 00 00 00
            00 00 00 00 05 00 00 00 10 27 00 00 00 00 00 00
            ef be ad de 00 10 00 00 00 00 00 00 03 00 00 00
            78 79 7a
        version refusal:
            05 ff 01
    "#]]
    .assert_eq(&text);
}
