//! Round trips of every message through generated values, and the decoder's behaviour on
//! hostile input: arbitrary bytes, truncations, bit flips and huge declared counts.

use std::time::Duration;

use bytes::{Bytes, BytesMut};

use super::*;
use crate::codec::DecodeError;
use crate::message::{
    BeginQuorumEpochRequest, DescribeQuorumRequest, DescribeQuorumResponse, EndQuorumEpochRequest,
    EpochResponse, ErrorCode, FetchRequest, FetchResponse, FetchSnapshotRequest,
    FetchSnapshotResponse, ForwardRequest, ForwardResponse, ForwardResult, ReadBarrier,
    ReadIndexRequest, ReadIndexResponse, ReplicaProgress, Request, Response, VoteRequest,
    VoteResponse, WriteOrder,
};
use crate::types::{DirectoryId, Epoch, Offset, OffsetAndEpoch, Record, RecordKind, ReplicaId};
use proptest::collection::vec;
use proptest::prelude::*;

fn epoch() -> impl Strategy<Value = Epoch> {
    any::<u32>().prop_map(Epoch)
}

fn replica() -> impl Strategy<Value = ReplicaId> {
    any::<u32>().prop_map(ReplicaId)
}

fn offset() -> impl Strategy<Value = Offset> {
    any::<u64>().prop_map(Offset)
}

fn offset_and_epoch() -> impl Strategy<Value = OffsetAndEpoch> {
    (offset(), epoch()).prop_map(|(o, e)| OffsetAndEpoch::new(o, e))
}

fn duration() -> impl Strategy<Value = Duration> {
    (any::<u64>(), 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n))
}

fn error_code() -> impl Strategy<Value = Option<ErrorCode>> {
    prop_oneof![
        Just(None),
        Just(Some(ErrorCode::FencedLeaderEpoch)),
        Just(Some(ErrorCode::UnknownLeaderEpoch)),
        Just(Some(ErrorCode::NotLeader)),
        Just(Some(ErrorCode::InvalidRequest)),
        Just(Some(ErrorCode::UnknownReplica)),
        Just(Some(ErrorCode::WrongReceiver)),
        Just(Some(ErrorCode::ShuttingDown)),
        Just(Some(ErrorCode::RequestTimedOut)),
        Just(Some(ErrorCode::WriteLost)),
        Just(Some(ErrorCode::QueueFull)),
        Just(Some(ErrorCode::TooLarge)),
        Just(Some(ErrorCode::SnapshotNotFound)),
        Just(Some(ErrorCode::PositionOutOfRange)),
        Just(Some(ErrorCode::OutcomeUnknown)),
        Just(Some(ErrorCode::Superseded)),
        Just(Some(ErrorCode::NotReady)),
    ]
}

fn record() -> impl Strategy<Value = Record> {
    (offset(), epoch(), any::<bool>(), vec(any::<u8>(), 0..64)).prop_map(
        |(offset, epoch, control, payload)| Record {
            offset,
            epoch,
            kind: if control {
                RecordKind::LeaderChange
            } else {
                RecordKind::Data
            },
            payload: Bytes::from(payload),
        },
    )
}

fn directory() -> impl Strategy<Value = Option<DirectoryId>> {
    proptest::option::of((1u128..).prop_map(DirectoryId))
}

fn progress() -> impl Strategy<Value = ReplicaProgress> {
    (
        replica(),
        directory(),
        proptest::option::of(offset()),
        proptest::option::of(duration()),
    )
        .prop_map(
            |(replica, directory, end_offset, since_last_fetch)| ReplicaProgress {
                replica,
                directory,
                end_offset,
                since_last_fetch,
            },
        )
}

fn vote_request() -> impl Strategy<Value = Request> {
    (
        epoch(),
        replica(),
        replica(),
        offset_and_epoch(),
        any::<bool>(),
        any::<bool>(),
        (directory(), directory()),
    )
        .prop_map(
            |(epoch, candidate, voter, last, pre_vote, leader_invited, dirs)| {
                Request::Vote(VoteRequest {
                    epoch,
                    candidate,
                    voter,
                    voter_directory: dirs.0,
                    candidate_directory: dirs.1,
                    last,
                    pre_vote,
                    leader_invited,
                })
            },
        )
}

fn fetch_request() -> impl Strategy<Value = Request> {
    (
        (epoch(), replica(), offset(), epoch(), directory()),
        (
            proptest::option::of(offset()),
            any::<u64>(),
            duration(),
            any::<u32>(),
        ),
    )
        .prop_map(
            |(
                (epoch, replica, fetch_offset, last_fetched_epoch, replica_directory),
                (high_watermark, barrier, max_wait, max_bytes),
            )| {
                Request::Fetch(FetchRequest {
                    epoch,
                    replica,
                    replica_directory,
                    fetch_offset,
                    last_fetched_epoch,
                    high_watermark,
                    read_barrier: ReadBarrier(barrier),
                    max_wait,
                    max_bytes,
                })
            },
        )
}

fn request() -> impl Strategy<Value = Request> {
    prop_oneof![
        vote_request(),
        (epoch(), replica(), replica(), directory()).prop_map(
            |(epoch, leader, voter, voter_directory)| {
                Request::BeginQuorumEpoch(BeginQuorumEpochRequest {
                    epoch,
                    leader,
                    voter,
                    voter_directory,
                })
            }
        ),
        (epoch(), replica(), vec(replica(), 0..8)).prop_map(|(epoch, leader, successors)| {
            Request::EndQuorumEpoch(EndQuorumEpochRequest {
                epoch,
                leader,
                preferred_successors: successors,
            })
        }),
        fetch_request(),
        Just(Request::DescribeQuorum(DescribeQuorumRequest {})),
        (epoch(), replica(), any::<u32>(), any::<bool>()).prop_map(
            |(epoch, replica, read_count, lease)| {
                Request::ReadIndex(ReadIndexRequest {
                    epoch,
                    replica,
                    read_count,
                    lease,
                })
            }
        ),
        (
            vec(vec(any::<u8>(), 0..64), 0..4),
            proptest::option::of((any::<u64>(), any::<u64>())),
            epoch()
        )
            .prop_map(|(ps, order, epoch)| Request::Forward(ForwardRequest {
                payloads: ps.into_iter().map(Bytes::from).collect(),
                order: order.map(|(session, seq)| WriteOrder { session, seq }),
                epoch,
            })),
        (
            epoch(),
            replica(),
            offset_and_epoch(),
            any::<u64>(),
            any::<u32>(),
            directory()
        )
            .prop_map(
                |(epoch, replica, snapshot, position, max_bytes, replica_directory)| {
                    Request::FetchSnapshot(FetchSnapshotRequest {
                        epoch,
                        replica,
                        replica_directory,
                        snapshot,
                        position,
                        max_bytes,
                    })
                }
            ),
    ]
}

fn epoch_response() -> impl Strategy<Value = EpochResponse> {
    (error_code(), epoch(), proptest::option::of(replica())).prop_map(|(error, epoch, leader)| {
        EpochResponse {
            error,
            epoch,
            leader,
        }
    })
}

fn fetch_response() -> impl Strategy<Value = Response> {
    (
        (error_code(), epoch(), proptest::option::of(replica())),
        (
            proptest::option::of(offset()),
            proptest::option::of(offset_and_epoch()),
        ),
        (
            vec(record(), 0..6),
            any::<u64>(),
            proptest::option::of(offset_and_epoch()),
        ),
    )
        .prop_map(
            |((error, epoch, leader), (high_watermark, diverging), (records, b, snapshot))| {
                Response::Fetch(FetchResponse {
                    error,
                    epoch,
                    leader,
                    high_watermark,
                    diverging,
                    records,
                    read_barrier: ReadBarrier(b),
                    snapshot,
                })
            },
        )
}

fn describe_quorum_response() -> impl Strategy<Value = Response> {
    (
        (error_code(), epoch(), proptest::option::of(replica())),
        proptest::option::of(offset()),
        (vec(progress(), 0..5), vec(progress(), 0..5)),
    )
        .prop_map(
            |((error, epoch, leader), high_watermark, (voters, observers))| {
                Response::DescribeQuorum(DescribeQuorumResponse {
                    error,
                    epoch,
                    leader,
                    high_watermark,
                    voters,
                    observers,
                })
            },
        )
}

fn response() -> impl Strategy<Value = Response> {
    prop_oneof![
        (
            error_code(),
            epoch(),
            proptest::option::of(replica()),
            any::<bool>()
        )
            .prop_map(|(error, epoch, leader, granted)| {
                Response::Vote(VoteResponse {
                    error,
                    epoch,
                    leader,
                    granted,
                })
            }),
        epoch_response().prop_map(Response::BeginQuorumEpoch),
        epoch_response().prop_map(Response::EndQuorumEpoch),
        fetch_response(),
        describe_quorum_response(),
        (
            error_code(),
            epoch(),
            proptest::option::of(replica()),
            proptest::option::of(offset())
        )
            .prop_map(|(error, epoch, leader, read_offset)| {
                Response::ReadIndex(ReadIndexResponse {
                    error,
                    epoch,
                    leader,
                    read_offset,
                })
            }),
        (
            error_code(),
            epoch(),
            proptest::option::of(replica()),
            vec(
                (
                    error_code(),
                    proptest::option::of(offset_and_epoch()),
                    any::<u32>(),
                    vec(any::<u8>(), 0..64)
                ),
                0..4
            )
        )
            .prop_map(|(error, epoch, leader, results)| {
                Response::Forward(ForwardResponse {
                    error,
                    epoch,
                    leader,
                    results: results
                        .into_iter()
                        .map(|(error, committed, limit, response)| ForwardResult {
                            error,
                            committed,
                            limit,
                            response: Bytes::from(response),
                        })
                        .collect(),
                })
            }),
        (
            (error_code(), epoch(), proptest::option::of(replica())),
            (offset_and_epoch(), any::<u64>(), any::<u32>(), any::<u64>()),
            vec(any::<u8>(), 0..64)
        )
            .prop_map(
                |((error, epoch, leader), (snapshot, size, checksum, position), data)| {
                    Response::FetchSnapshot(FetchSnapshotResponse {
                        error,
                        epoch,
                        leader,
                        snapshot,
                        size,
                        checksum,
                        position,
                        data: Bytes::from(data),
                    })
                }
            ),
    ]
}

pub(super) fn request_frame(r: &Request) -> Bytes {
    let mut buf = BytesMut::new();
    encode_request(r, &mut buf);
    buf.freeze()
}

pub(super) fn response_frame(r: &Response) -> Bytes {
    let mut buf = BytesMut::new();
    encode_response(r, &mut buf);
    buf.freeze()
}

/// Limits small enough that generated input can hit every bound.
fn small_limits() -> FrameLimits {
    FrameLimits {
        frame_bytes_max: 4096,
        record_payload_max: 256,
        records_max: 16,
        replicas_max: 16,
    }
}

proptest! {
    #[test]
    fn every_request_round_trips(req in request()) {
        let frame = request_frame(&req);
        prop_assert_eq!(decode_request(frame, &FrameLimits::default())?, req);
    }

    #[test]
    fn every_response_round_trips(resp in response()) {
        let frame = response_frame(&resp);
        prop_assert_eq!(decode_response(frame, &FrameLimits::default())?, resp);
    }

    #[test]
    fn decoding_arbitrary_bytes_never_panics(bytes in vec(any::<u8>(), 0..512), versioned: bool) {
        // Goal: any input yields a value or an error. Method: raw bytes, and raw bytes behind
        // a valid version byte so that the field decoders are reached too.
        let mut input = bytes;
        if versioned {
            input.insert(0, WIRE_VERSION);
        }
        let frame = Bytes::from(input);
        let _ = decode_request(frame.clone(), &small_limits());
        let _ = decode_response(frame, &small_limits());
    }

    #[test]
    fn truncated_request_is_refused(req in request(), cut_seed: usize) {
        let frame = request_frame(&req);
        let cut = cut_seed % frame.len();
        prop_assert!(decode_request(frame.slice(..cut), &FrameLimits::default()).is_err());
    }

    #[test]
    fn truncated_response_is_refused(resp in response(), cut_seed: usize) {
        let frame = response_frame(&resp);
        let cut = cut_seed % frame.len();
        prop_assert!(decode_response(frame.slice(..cut), &FrameLimits::default()).is_err());
    }

    #[test]
    fn flipped_request_byte_is_refused_or_reencodes(req in request(), pos_seed: usize, bit in 0u8..8) {
        // A flip either breaks the frame or yields another valid message, which must then
        // encode back to exactly the mutated bytes (no two encodings for one message).
        let mut bytes = request_frame(&req).to_vec();
        let pos = pos_seed % bytes.len();
        bytes[pos] ^= 1 << bit;
        let mutated = Bytes::from(bytes);
        if let Ok(other) = decode_request(mutated.clone(), &FrameLimits::default()) {
            prop_assert_ne!(&other, &req);
            prop_assert_eq!(request_frame(&other), mutated);
        }
    }

    #[test]
    fn flipped_response_byte_is_refused_or_reencodes(resp in response(), pos_seed: usize, bit in 0u8..8) {
        let mut bytes = response_frame(&resp).to_vec();
        let pos = pos_seed % bytes.len();
        bytes[pos] ^= 1 << bit;
        let mutated = Bytes::from(bytes);
        if let Ok(other) = decode_response(mutated.clone(), &FrameLimits::default()) {
            prop_assert_ne!(&other, &resp);
            prop_assert_eq!(response_frame(&other), mutated);
        }
    }

    #[test]
    fn appended_bytes_are_trailing(resp in response(), extra in vec(any::<u8>(), 1..8)) {
        let mut bytes = response_frame(&resp).to_vec();
        bytes.extend_from_slice(&extra);
        let err = decode_response(Bytes::from(bytes), &FrameLimits::default()).unwrap_err();
        // Extra bytes after a list of records may be read as the start of another record
        // only if the count says so; it does not, so they are always trailing.
        prop_assert_eq!(err, DecodeError::Trailing(extra.len()));
    }
}

#[test]
fn other_version_is_refused_first() {
    let mut bytes = request_frame(&Request::DescribeQuorum(DescribeQuorumRequest {})).to_vec();
    bytes[0] = WIRE_VERSION + 1;
    let err = decode_request(Bytes::from(bytes), &FrameLimits::default()).unwrap_err();
    assert_eq!(
        err,
        DecodeError::UnsupportedVersion {
            what: "wire",
            found: WIRE_VERSION + 1,
            supported: WIRE_VERSION
        }
    );
}

#[test]
fn version_refusal_decodes_to_a_version_error() {
    let mut buf = BytesMut::new();
    encode_version_refusal(9, &mut buf);
    let err = decode_response(buf.freeze(), &FrameLimits::default()).unwrap_err();
    assert_eq!(
        err,
        DecodeError::UnsupportedVersion {
            what: "wire (refused by peer)",
            found: 9,
            supported: WIRE_VERSION
        }
    );
}

#[test]
fn huge_declared_record_count_is_refused_before_allocating() {
    // A Fetch response header claiming u32::MAX records in a few bytes: the count is refused
    // against the limit, and with a huge limit against the bytes actually present.
    let resp = Response::Fetch(FetchResponse {
        error: None,
        epoch: Epoch(1),
        leader: None,
        high_watermark: None,
        diverging: None,
        records: vec![],
        read_barrier: ReadBarrier(0),
        snapshot: None,
    });
    let mut bytes = response_frame(&resp).to_vec();
    let n = bytes.len();
    bytes[n - 4..].copy_from_slice(&u32::MAX.to_le_bytes());
    let frame = Bytes::from(bytes);
    let err = decode_response(frame.clone(), &FrameLimits::default()).unwrap_err();
    assert!(
        matches!(
            err,
            DecodeError::TooLarge {
                what: "records",
                ..
            }
        ),
        "{err:?}"
    );
    let unbounded = FrameLimits {
        records_max: usize::MAX,
        ..FrameLimits::default()
    };
    let err = decode_response(frame, &unbounded).unwrap_err();
    assert!(matches!(err, DecodeError::Truncated { .. }), "{err:?}");
}

#[test]
fn huge_declared_successor_count_is_refused_before_allocating() {
    let req = Request::EndQuorumEpoch(EndQuorumEpochRequest {
        epoch: Epoch(1),
        leader: ReplicaId(1),
        preferred_successors: vec![],
    });
    let mut bytes = request_frame(&req).to_vec();
    let n = bytes.len();
    bytes[n - 4..].copy_from_slice(&(1u32 << 20).to_le_bytes());
    let err = decode_request(Bytes::from(bytes), &FrameLimits::default()).unwrap_err();
    assert!(matches!(
        err,
        DecodeError::TooLarge {
            what: "preferred successors",
            ..
        }
    ));
}

#[test]
fn oversized_frame_is_refused() {
    let resp = Response::Fetch(FetchResponse {
        error: None,
        epoch: Epoch(1),
        leader: Some(ReplicaId(1)),
        high_watermark: Some(Offset(1)),
        diverging: None,
        records: vec![Record {
            offset: Offset(0),
            epoch: Epoch(1),
            kind: RecordKind::Data,
            payload: Bytes::from(vec![7; 5000]),
        }],
        read_barrier: ReadBarrier(0),
        snapshot: None,
    });
    let err = decode_response(response_frame(&resp), &small_limits()).unwrap_err();
    assert!(
        matches!(err, DecodeError::TooLarge { what: "frame", .. }),
        "{err:?}"
    );
}

#[test]
fn fetch_payloads_are_slices_of_the_frame() {
    let resp = Response::Fetch(FetchResponse {
        error: None,
        epoch: Epoch(2),
        leader: Some(ReplicaId(1)),
        high_watermark: None,
        diverging: None,
        records: vec![Record {
            offset: Offset(5),
            epoch: Epoch(2),
            kind: RecordKind::Data,
            payload: Bytes::from_static(b"hello"),
        }],
        read_barrier: ReadBarrier(3),
        snapshot: None,
    });
    let frame = response_frame(&resp);
    let range = frame.as_ptr_range();
    let Response::Fetch(back) = decode_response(frame.clone(), &FrameLimits::default()).unwrap()
    else {
        panic!("not a fetch response");
    };
    let payload = back.records[0].payload.as_ptr();
    assert!(range.contains(&payload));
}
