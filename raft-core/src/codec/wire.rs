//! The RPC wire codec: requests and responses as versioned, length-checked frames.
//!
//! A transport moves these frames as opaque bytes; it only adds its own framing (for example a
//! length prefix) around them. Every frame is self-describing, little-endian:
//!
//! ```text
//! version u8    WIRE_VERSION
//! kind    u8    0x01..=0x06 requests (Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch,
//!               DescribeQuorum, ReadIndex), 0x07 Forward, 0x08 FetchSnapshot, 0x81..=0x88
//!               the matching responses,
//!               0xFF a version refusal (see below)
//! fields        per message, in declaration order
//! ```
//!
//! Field encodings:
//!
//! ```text
//! Epoch, ReplicaId, u32    u32
//! Offset, ReadBarrier, u64 u64
//! bool                     u8, 0 or 1
//! Option<T>                u8 tag (0 = none, 1 = some) then T
//! Option<ErrorCode>        u8: 0 = none, 1..=13 the codes in declaration order
//! Duration                 u64 seconds then u32 nanoseconds (< 1e9)
//! list                     u32 count then the items
//! Record                   the record codec (`super::encode_record`), CRC included
//! ```
//!
//! Decoding never panics and allocates at most in proportion to the input it was handed: every
//! count is checked against [`FrameLimits`] and against the bytes left (each item has a known
//! minimum size) before a vector is reserved, frames above the size limit are refused unread,
//! and record payloads are zero-copy slices of the input. A frame of another version is refused with [`DecodeError::UnsupportedVersion`] before
//! anything else is read; bytes left after a complete message are [`DecodeError::Trailing`].
//!
//! A receiver that cannot read a request's version answers with a version refusal
//! ([`encode_version_refusal`]): its own version byte, `0xFF`, and the version it was sent.
//! Whoever decodes that as a response gets a [`DecodeError::UnsupportedVersion`] naming both
//! versions, so a mixed-version cluster reports the mismatch instead of a generic failure.

use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};

use super::reader::LeReader;
use super::{decode_record, encode_record, DecodeError, RECORD_HEADER_LEN};
use crate::message::{
    BeginQuorumEpochRequest, DescribeQuorumRequest, DescribeQuorumResponse, EndQuorumEpochRequest,
    EpochResponse, ErrorCode, FetchRequest, FetchResponse, FetchSnapshotRequest,
    FetchSnapshotResponse, ForwardRequest, ForwardResponse, ReadBarrier, ReadIndexRequest,
    ReadIndexResponse, ReplicaProgress, Request, Response, VoteRequest, VoteResponse,
};
use crate::types::{Epoch, Offset, OffsetAndEpoch, Record, ReplicaId};

/// The wire version this build writes and the only one it reads.
pub const WIRE_VERSION: u8 = 2;

/// The kind tag of a version refusal frame.
pub const KIND_VERSION_REFUSED: u8 = 0xFF;

/// Bytes of every frame before its fields: the version and the kind tag.
pub const FRAME_HEADER_LEN: usize = 2;

const REQ_VOTE: u8 = 0x01;
const REQ_BEGIN_QUORUM_EPOCH: u8 = 0x02;
const REQ_END_QUORUM_EPOCH: u8 = 0x03;
const REQ_FETCH: u8 = 0x04;
const REQ_DESCRIBE_QUORUM: u8 = 0x05;
const REQ_READ_INDEX: u8 = 0x06;
const REQ_FORWARD: u8 = 0x07;
const REQ_FETCH_SNAPSHOT: u8 = 0x08;
const RESP_FLAG: u8 = 0x80;

/// The smallest encoding of one [`ReplicaProgress`]: id plus two absent options.
const REPLICA_PROGRESS_LEN_MIN: usize = 4 + 1 + 1;

/// Bounds a decoder enforces before it allocates or slices anything.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct FrameLimits {
    /// The largest frame accepted, header included.
    pub frame_bytes_max: usize,
    /// The largest payload of one record inside a frame.
    pub record_payload_max: usize,
    /// The most records one Fetch response may carry.
    pub records_max: usize,
    /// The most replica ids or replica progress entries in one list.
    pub replicas_max: usize,
}

impl FrameLimits {
    /// The default frame size bound: room for a Fetch response of several default batches.
    pub const FRAME_BYTES_MAX_DEFAULT: usize = 16 << 20;

    /// Limits for frames of at most `frame_bytes_max` bytes; the other bounds follow from it
    /// (a record payload or a record count can never need more than the frame holds).
    pub fn new(frame_bytes_max: usize) -> Self {
        FrameLimits {
            frame_bytes_max,
            record_payload_max: frame_bytes_max,
            records_max: frame_bytes_max / RECORD_HEADER_LEN,
            replicas_max: 1 << 16,
        }
    }
}

impl Default for FrameLimits {
    fn default() -> Self {
        FrameLimits::new(Self::FRAME_BYTES_MAX_DEFAULT)
    }
}

/// Appends the frame of `request` to `out`.
pub fn encode_request(request: &Request, out: &mut BytesMut) {
    out.put_u8(WIRE_VERSION);
    match request {
        Request::Vote(r) => {
            out.put_u8(REQ_VOTE);
            put_epoch(out, r.epoch);
            put_replica(out, r.candidate);
            put_replica(out, r.voter);
            put_offset_and_epoch(out, r.last);
            put_bool(out, r.pre_vote);
            put_bool(out, r.leader_invited);
        }
        Request::BeginQuorumEpoch(r) => {
            out.put_u8(REQ_BEGIN_QUORUM_EPOCH);
            put_epoch(out, r.epoch);
            put_replica(out, r.leader);
            put_replica(out, r.voter);
        }
        Request::EndQuorumEpoch(r) => {
            out.put_u8(REQ_END_QUORUM_EPOCH);
            put_epoch(out, r.epoch);
            put_replica(out, r.leader);
            put_count(out, r.preferred_successors.len());
            for id in &r.preferred_successors {
                put_replica(out, *id);
            }
        }
        Request::Fetch(r) => {
            out.put_u8(REQ_FETCH);
            put_epoch(out, r.epoch);
            put_replica(out, r.replica);
            out.put_u64_le(r.fetch_offset.0);
            put_epoch(out, r.last_fetched_epoch);
            put_opt(out, r.high_watermark, |o, v| o.put_u64_le(v.0));
            out.put_u64_le(r.read_barrier.0);
            put_duration(out, r.max_wait);
            out.put_u32_le(r.max_bytes);
        }
        Request::DescribeQuorum(DescribeQuorumRequest {}) => out.put_u8(REQ_DESCRIBE_QUORUM),
        Request::ReadIndex(r) => {
            out.put_u8(REQ_READ_INDEX);
            put_epoch(out, r.epoch);
            put_replica(out, r.replica);
            out.put_u32_le(r.read_count);
            put_bool(out, r.lease);
        }
        Request::Forward(r) => {
            out.put_u8(REQ_FORWARD);
            put_bytes(out, &r.payload);
        }
        Request::FetchSnapshot(r) => {
            out.put_u8(REQ_FETCH_SNAPSHOT);
            put_epoch(out, r.epoch);
            put_replica(out, r.replica);
            put_offset_and_epoch(out, r.snapshot);
            out.put_u64_le(r.position);
            out.put_u32_le(r.max_bytes);
        }
    }
}

/// Appends the frame of `response` to `out`.
pub fn encode_response(response: &Response, out: &mut BytesMut) {
    out.put_u8(WIRE_VERSION);
    match response {
        Response::Vote(r) => {
            out.put_u8(RESP_FLAG | REQ_VOTE);
            put_error(out, r.error);
            put_epoch(out, r.epoch);
            put_opt(out, r.leader, put_replica);
            put_bool(out, r.granted);
        }
        Response::BeginQuorumEpoch(r) => {
            out.put_u8(RESP_FLAG | REQ_BEGIN_QUORUM_EPOCH);
            put_epoch_response(out, r);
        }
        Response::EndQuorumEpoch(r) => {
            out.put_u8(RESP_FLAG | REQ_END_QUORUM_EPOCH);
            put_epoch_response(out, r);
        }
        Response::Fetch(r) => {
            out.put_u8(RESP_FLAG | REQ_FETCH);
            put_error(out, r.error);
            put_epoch(out, r.epoch);
            put_opt(out, r.leader, put_replica);
            put_opt(out, r.high_watermark, |o, v| o.put_u64_le(v.0));
            put_opt(out, r.diverging, put_offset_and_epoch);
            out.put_u64_le(r.read_barrier.0);
            put_opt(out, r.snapshot, put_offset_and_epoch);
            put_count(out, r.records.len());
            let bytes: usize = r.records.iter().map(Record::encoded_len).sum();
            out.reserve(bytes);
            for record in &r.records {
                encode_record(record, out);
            }
        }
        Response::DescribeQuorum(r) => {
            out.put_u8(RESP_FLAG | REQ_DESCRIBE_QUORUM);
            put_error(out, r.error);
            put_epoch(out, r.epoch);
            put_opt(out, r.leader, put_replica);
            put_opt(out, r.high_watermark, |o, v| o.put_u64_le(v.0));
            for list in [&r.voters, &r.observers] {
                put_count(out, list.len());
                for p in list {
                    put_replica(out, p.replica);
                    put_opt(out, p.end_offset, |o, v| o.put_u64_le(v.0));
                    put_opt(out, p.since_last_fetch, put_duration);
                }
            }
        }
        Response::ReadIndex(r) => {
            out.put_u8(RESP_FLAG | REQ_READ_INDEX);
            put_error(out, r.error);
            put_epoch(out, r.epoch);
            put_opt(out, r.leader, put_replica);
            put_opt(out, r.read_offset, |o, v| o.put_u64_le(v.0));
        }
        Response::Forward(r) => {
            out.put_u8(RESP_FLAG | REQ_FORWARD);
            put_error(out, r.error);
            put_epoch(out, r.epoch);
            put_opt(out, r.leader, put_replica);
            put_opt(out, r.committed, put_offset_and_epoch);
            put_bytes(out, &r.response);
        }
        Response::FetchSnapshot(r) => {
            out.put_u8(RESP_FLAG | REQ_FETCH_SNAPSHOT);
            put_error(out, r.error);
            put_epoch(out, r.epoch);
            put_opt(out, r.leader, put_replica);
            put_offset_and_epoch(out, r.snapshot);
            out.put_u64_le(r.size);
            out.put_u32_le(r.checksum);
            out.put_u64_le(r.position);
            put_bytes(out, &r.data);
        }
    }
}

/// Appends a version refusal: the answer to a request whose version byte was `found`.
pub fn encode_version_refusal(found: u8, out: &mut BytesMut) {
    out.put_u8(WIRE_VERSION);
    out.put_u8(KIND_VERSION_REFUSED);
    out.put_u8(found);
}

/// Decodes one request frame, which must be exactly `frame` (no bytes before or after).
pub fn decode_request(frame: Bytes, limits: &FrameLimits) -> Result<Request, DecodeError> {
    let (kind, mut r) = Reader::open(&frame, limits)?;
    let request = match kind {
        REQ_VOTE => Request::Vote(VoteRequest {
            epoch: r.epoch()?,
            candidate: r.replica()?,
            voter: r.replica()?,
            last: r.offset_and_epoch()?,
            pre_vote: r.bool("pre_vote")?,
            leader_invited: r.bool("leader_invited")?,
        }),
        REQ_BEGIN_QUORUM_EPOCH => Request::BeginQuorumEpoch(BeginQuorumEpochRequest {
            epoch: r.epoch()?,
            leader: r.replica()?,
            voter: r.replica()?,
        }),
        REQ_END_QUORUM_EPOCH => {
            let epoch = r.epoch()?;
            let leader = r.replica()?;
            let count = r.count("preferred successors", 4, limits.replicas_max)?;
            let mut preferred_successors = Vec::with_capacity(count);
            for _ in 0..count {
                preferred_successors.push(r.replica()?);
            }
            Request::EndQuorumEpoch(EndQuorumEpochRequest {
                epoch,
                leader,
                preferred_successors,
            })
        }
        REQ_FETCH => Request::Fetch(FetchRequest {
            epoch: r.epoch()?,
            replica: r.replica()?,
            fetch_offset: r.offset()?,
            last_fetched_epoch: r.epoch()?,
            high_watermark: r.opt("high_watermark", Reader::offset)?,
            read_barrier: ReadBarrier(r.u64()?),
            max_wait: r.duration()?,
            max_bytes: r.u32()?,
        }),
        REQ_DESCRIBE_QUORUM => Request::DescribeQuorum(DescribeQuorumRequest {}),
        REQ_READ_INDEX => Request::ReadIndex(ReadIndexRequest {
            epoch: r.epoch()?,
            replica: r.replica()?,
            read_count: r.u32()?,
            lease: r.bool("lease")?,
        }),
        REQ_FORWARD => Request::Forward(ForwardRequest {
            payload: r.bytes("payload")?,
        }),
        REQ_FETCH_SNAPSHOT => Request::FetchSnapshot(FetchSnapshotRequest {
            epoch: r.epoch()?,
            replica: r.replica()?,
            snapshot: r.offset_and_epoch()?,
            position: r.u64()?,
            max_bytes: r.u32()?,
        }),
        other => {
            return Err(DecodeError::InvalidValue {
                what: "request kind",
                value: other.into(),
            })
        }
    };
    r.finish()?;
    Ok(request)
}

/// Decodes one response frame, which must be exactly `frame`. Record payloads in a Fetch
/// response are zero-copy slices of `frame`.
pub fn decode_response(frame: Bytes, limits: &FrameLimits) -> Result<Response, DecodeError> {
    let (kind, mut r) = Reader::open(&frame, limits)?;
    let response = match kind {
        k if k == RESP_FLAG | REQ_VOTE => Response::Vote(VoteResponse {
            error: r.error()?,
            epoch: r.epoch()?,
            leader: r.opt("leader", Reader::replica)?,
            granted: r.bool("granted")?,
        }),
        k if k == RESP_FLAG | REQ_BEGIN_QUORUM_EPOCH => {
            Response::BeginQuorumEpoch(r.epoch_response()?)
        }
        k if k == RESP_FLAG | REQ_END_QUORUM_EPOCH => Response::EndQuorumEpoch(r.epoch_response()?),
        k if k == RESP_FLAG | REQ_FETCH => Response::Fetch(r.fetch_response()?),
        k if k == RESP_FLAG | REQ_DESCRIBE_QUORUM => {
            Response::DescribeQuorum(r.describe_quorum_response()?)
        }
        k if k == RESP_FLAG | REQ_READ_INDEX => Response::ReadIndex(ReadIndexResponse {
            error: r.error()?,
            epoch: r.epoch()?,
            leader: r.opt("leader", Reader::replica)?,
            read_offset: r.opt("read_offset", Reader::offset)?,
        }),
        k if k == RESP_FLAG | REQ_FORWARD => Response::Forward(ForwardResponse {
            error: r.error()?,
            epoch: r.epoch()?,
            leader: r.opt("leader", Reader::replica)?,
            committed: r.opt("committed", Reader::offset_and_epoch)?,
            response: r.bytes("response")?,
        }),
        k if k == RESP_FLAG | REQ_FETCH_SNAPSHOT => {
            Response::FetchSnapshot(FetchSnapshotResponse {
                error: r.error()?,
                epoch: r.epoch()?,
                leader: r.opt("leader", Reader::replica)?,
                snapshot: r.offset_and_epoch()?,
                size: r.u64()?,
                checksum: r.u32()?,
                position: r.u64()?,
                data: r.bytes("data")?,
            })
        }
        KIND_VERSION_REFUSED => {
            // The peer reads our version byte but not our version: it names what it was sent.
            let sent = r.u8()?;
            r.finish()?;
            return Err(DecodeError::UnsupportedVersion {
                what: "wire (refused by peer)",
                found: sent,
                supported: WIRE_VERSION,
            });
        }
        other => {
            return Err(DecodeError::InvalidValue {
                what: "response kind",
                value: other.into(),
            })
        }
    };
    r.finish()?;
    Ok(response)
}

fn put_epoch(out: &mut BytesMut, epoch: Epoch) {
    out.put_u32_le(epoch.0);
}

fn put_replica(out: &mut BytesMut, id: ReplicaId) {
    out.put_u32_le(id.0);
}

fn put_offset_and_epoch(out: &mut BytesMut, v: OffsetAndEpoch) {
    out.put_u64_le(v.offset.0);
    put_epoch(out, v.epoch);
}

fn put_bool(out: &mut BytesMut, v: bool) {
    out.put_u8(u8::from(v));
}

fn put_opt<T>(out: &mut BytesMut, v: Option<T>, put: impl FnOnce(&mut BytesMut, T)) {
    match v {
        None => out.put_u8(0),
        Some(v) => {
            out.put_u8(1);
            put(out, v);
        }
    }
}

fn put_duration(out: &mut BytesMut, d: Duration) {
    out.put_u64_le(d.as_secs());
    out.put_u32_le(d.subsec_nanos());
}

/// Lists longer than `u32::MAX` cannot be built from any frame a decoder accepts; saturating
/// keeps the encoder total, and such a frame is then refused by the receiver as truncated.
fn put_count(out: &mut BytesMut, len: usize) {
    out.put_u32_le(u32::try_from(len).unwrap_or(u32::MAX));
}

fn put_error(out: &mut BytesMut, error: Option<ErrorCode>) {
    let code = match error {
        None => 0,
        Some(ErrorCode::FencedLeaderEpoch) => 1,
        Some(ErrorCode::UnknownLeaderEpoch) => 2,
        Some(ErrorCode::NotLeader) => 3,
        Some(ErrorCode::InvalidRequest) => 4,
        Some(ErrorCode::UnknownReplica) => 5,
        Some(ErrorCode::WrongReceiver) => 6,
        Some(ErrorCode::ShuttingDown) => 7,
        Some(ErrorCode::RequestTimedOut) => 8,
        Some(ErrorCode::WriteLost) => 9,
        Some(ErrorCode::QueueFull) => 10,
        Some(ErrorCode::TooLarge) => 11,
        Some(ErrorCode::SnapshotNotFound) => 12,
        Some(ErrorCode::PositionOutOfRange) => 13,
    };
    out.put_u8(code);
}

fn put_bytes(out: &mut BytesMut, bytes: &Bytes) {
    out.put_u32_le(bytes.len() as u32);
    out.put_slice(bytes);
}

fn put_epoch_response(out: &mut BytesMut, r: &EpochResponse) {
    put_error(out, r.error);
    put_epoch(out, r.epoch);
    put_opt(out, r.leader, put_replica);
}

/// A cursor over one frame: the codec's little-endian reader plus the frame's limits, and the
/// frame itself for zero-copy slices.
struct Reader<'a> {
    frame: &'a Bytes,
    le: LeReader<'a>,
    limits: &'a FrameLimits,
}

impl<'a> Reader<'a> {
    /// Checks the frame size and version and returns the kind tag with a reader of the fields.
    fn open(frame: &'a Bytes, limits: &'a FrameLimits) -> Result<(u8, Reader<'a>), DecodeError> {
        if frame.len() > limits.frame_bytes_max {
            return Err(DecodeError::TooLarge {
                what: "frame",
                len: frame.len() as u64,
                limit: limits.frame_bytes_max as u64,
            });
        }
        let mut r = Reader {
            frame,
            le: LeReader::new(frame),
            limits,
        };
        let version = r.u8()?;
        if version != WIRE_VERSION {
            return Err(DecodeError::UnsupportedVersion {
                what: "wire",
                found: version,
                supported: WIRE_VERSION,
            });
        }
        let kind = r.u8()?;
        Ok((kind, r))
    }

    fn remaining(&self) -> usize {
        self.le.remaining()
    }

    fn u8(&mut self) -> Result<u8, DecodeError> {
        self.le.u8()
    }

    fn u32(&mut self) -> Result<u32, DecodeError> {
        self.le.u32()
    }

    fn u64(&mut self) -> Result<u64, DecodeError> {
        self.le.u64()
    }

    fn epoch(&mut self) -> Result<Epoch, DecodeError> {
        Ok(Epoch(self.u32()?))
    }

    fn replica(&mut self) -> Result<ReplicaId, DecodeError> {
        Ok(ReplicaId(self.u32()?))
    }

    fn offset(&mut self) -> Result<Offset, DecodeError> {
        Ok(Offset(self.u64()?))
    }

    fn offset_and_epoch(&mut self) -> Result<OffsetAndEpoch, DecodeError> {
        Ok(OffsetAndEpoch::new(self.offset()?, self.epoch()?))
    }

    fn bool(&mut self, what: &'static str) -> Result<bool, DecodeError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(DecodeError::InvalidValue {
                what,
                value: other.into(),
            }),
        }
    }

    fn opt<T>(
        &mut self,
        what: &'static str,
        read: impl FnOnce(&mut Self) -> Result<T, DecodeError>,
    ) -> Result<Option<T>, DecodeError> {
        if self.bool(what)? {
            read(self).map(Some)
        } else {
            Ok(None)
        }
    }

    fn duration(&mut self) -> Result<Duration, DecodeError> {
        let secs = self.u64()?;
        let nanos = self.u32()?;
        if nanos >= 1_000_000_000 {
            return Err(DecodeError::InvalidValue {
                what: "duration nanos",
                value: nanos.into(),
            });
        }
        Ok(Duration::new(secs, nanos))
    }

    fn error(&mut self) -> Result<Option<ErrorCode>, DecodeError> {
        let code = match self.u8()? {
            0 => return Ok(None),
            1 => ErrorCode::FencedLeaderEpoch,
            2 => ErrorCode::UnknownLeaderEpoch,
            3 => ErrorCode::NotLeader,
            4 => ErrorCode::InvalidRequest,
            5 => ErrorCode::UnknownReplica,
            6 => ErrorCode::WrongReceiver,
            7 => ErrorCode::ShuttingDown,
            8 => ErrorCode::RequestTimedOut,
            9 => ErrorCode::WriteLost,
            10 => ErrorCode::QueueFull,
            11 => ErrorCode::TooLarge,
            12 => ErrorCode::SnapshotNotFound,
            13 => ErrorCode::PositionOutOfRange,
            other => {
                return Err(DecodeError::InvalidValue {
                    what: "error code",
                    value: other.into(),
                })
            }
        };
        Ok(Some(code))
    }

    /// Reads a list count and checks it before anything is reserved for it: against `limit`, and
    /// against the bytes left given that each item takes at least `item_len_min` bytes.
    fn count(
        &mut self,
        what: &'static str,
        item_len_min: usize,
        limit: usize,
    ) -> Result<usize, DecodeError> {
        let count = self.u32()? as usize;
        if count > limit {
            return Err(DecodeError::TooLarge {
                what,
                len: count as u64,
                limit: limit as u64,
            });
        }
        let needed = count.saturating_mul(item_len_min);
        if needed > self.remaining() {
            return Err(DecodeError::Truncated {
                needed: needed - self.remaining(),
            });
        }
        Ok(count)
    }

    /// A length-prefixed byte string, bounded like a record payload; a zero-copy slice.
    fn bytes(&mut self, what: &'static str) -> Result<Bytes, DecodeError> {
        let len = self.u32()? as usize;
        if len > self.limits.record_payload_max {
            return Err(DecodeError::TooLarge {
                what,
                len: len as u64,
                limit: self.limits.record_payload_max as u64,
            });
        }
        if len > self.remaining() {
            return Err(DecodeError::Truncated {
                needed: len - self.remaining(),
            });
        }
        let pos = self.le.position();
        let out = self.frame.slice(pos..pos + len);
        self.le.advance(len);
        Ok(out)
    }

    fn record(&mut self) -> Result<Record, DecodeError> {
        let rest = self.frame.slice(self.le.position()..);
        let (record, used) = decode_record(&rest, self.limits.record_payload_max)?;
        self.le.advance(used);
        Ok(record)
    }

    fn epoch_response(&mut self) -> Result<EpochResponse, DecodeError> {
        Ok(EpochResponse {
            error: self.error()?,
            epoch: self.epoch()?,
            leader: self.opt("leader", Reader::replica)?,
        })
    }

    fn fetch_response(&mut self) -> Result<FetchResponse, DecodeError> {
        let error = self.error()?;
        let epoch = self.epoch()?;
        let leader = self.opt("leader", Reader::replica)?;
        let high_watermark = self.opt("high_watermark", Reader::offset)?;
        let diverging = self.opt("diverging", Reader::offset_and_epoch)?;
        let read_barrier = ReadBarrier(self.u64()?);
        let snapshot = self.opt("snapshot", Reader::offset_and_epoch)?;
        let count = self.count("records", RECORD_HEADER_LEN, self.limits.records_max)?;
        let mut records = Vec::with_capacity(count);
        for _ in 0..count {
            records.push(self.record()?);
        }
        Ok(FetchResponse {
            error,
            epoch,
            leader,
            high_watermark,
            diverging,
            records,
            read_barrier,
            snapshot,
        })
    }

    fn describe_quorum_response(&mut self) -> Result<DescribeQuorumResponse, DecodeError> {
        let error = self.error()?;
        let epoch = self.epoch()?;
        let leader = self.opt("leader", Reader::replica)?;
        let high_watermark = self.opt("high_watermark", Reader::offset)?;
        let voters = self.progress_list("voters")?;
        let observers = self.progress_list("observers")?;
        Ok(DescribeQuorumResponse {
            error,
            epoch,
            leader,
            high_watermark,
            voters,
            observers,
        })
    }

    fn progress_list(&mut self, what: &'static str) -> Result<Vec<ReplicaProgress>, DecodeError> {
        let count = self.count(what, REPLICA_PROGRESS_LEN_MIN, self.limits.replicas_max)?;
        let mut list = Vec::with_capacity(count);
        for _ in 0..count {
            list.push(ReplicaProgress {
                replica: self.replica()?,
                end_offset: self.opt("end_offset", Reader::offset)?,
                since_last_fetch: self.opt("since_last_fetch", Reader::duration)?,
            });
        }
        Ok(list)
    }

    fn finish(self) -> Result<(), DecodeError> {
        self.le.finish()
    }
}

#[cfg(test)]
mod tests {
    //! Round trips of every message through generated values, and the decoder's behaviour on
    //! hostile input: arbitrary bytes, truncations, bit flips and huge declared counts.

    use super::*;
    use crate::types::RecordKind;
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

    fn progress() -> impl Strategy<Value = ReplicaProgress> {
        (
            replica(),
            proptest::option::of(offset()),
            proptest::option::of(duration()),
        )
            .prop_map(|(replica, end_offset, since_last_fetch)| ReplicaProgress {
                replica,
                end_offset,
                since_last_fetch,
            })
    }

    fn vote_request() -> impl Strategy<Value = Request> {
        (
            epoch(),
            replica(),
            replica(),
            offset_and_epoch(),
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(
                |(epoch, candidate, voter, last, pre_vote, leader_invited)| {
                    Request::Vote(VoteRequest {
                        epoch,
                        candidate,
                        voter,
                        last,
                        pre_vote,
                        leader_invited,
                    })
                },
            )
    }

    fn fetch_request() -> impl Strategy<Value = Request> {
        (
            (epoch(), replica(), offset(), epoch()),
            (
                proptest::option::of(offset()),
                any::<u64>(),
                duration(),
                any::<u32>(),
            ),
        )
            .prop_map(
                |(
                    (epoch, replica, fetch_offset, last_fetched_epoch),
                    (high_watermark, barrier, max_wait, max_bytes),
                )| {
                    Request::Fetch(FetchRequest {
                        epoch,
                        replica,
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
            (epoch(), replica(), replica()).prop_map(|(epoch, leader, voter)| {
                Request::BeginQuorumEpoch(BeginQuorumEpochRequest {
                    epoch,
                    leader,
                    voter,
                })
            }),
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
            vec(any::<u8>(), 0..64).prop_map(|p| Request::Forward(ForwardRequest {
                payload: Bytes::from(p)
            })),
            (
                epoch(),
                replica(),
                offset_and_epoch(),
                any::<u64>(),
                any::<u32>()
            )
                .prop_map(|(epoch, replica, snapshot, position, max_bytes)| {
                    Request::FetchSnapshot(FetchSnapshotRequest {
                        epoch,
                        replica,
                        snapshot,
                        position,
                        max_bytes,
                    })
                }),
        ]
    }

    fn epoch_response() -> impl Strategy<Value = EpochResponse> {
        (error_code(), epoch(), proptest::option::of(replica())).prop_map(
            |(error, epoch, leader)| EpochResponse {
                error,
                epoch,
                leader,
            },
        )
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
                proptest::option::of(offset_and_epoch()),
                vec(any::<u8>(), 0..64)
            )
                .prop_map(|(error, epoch, leader, committed, response)| {
                    Response::Forward(ForwardResponse {
                        error,
                        epoch,
                        leader,
                        committed,
                        response: Bytes::from(response),
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

    fn request_frame(r: &Request) -> Bytes {
        let mut buf = BytesMut::new();
        encode_request(r, &mut buf);
        buf.freeze()
    }

    fn response_frame(r: &Response) -> Bytes {
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
        let Response::Fetch(back) =
            decode_response(frame.clone(), &FrameLimits::default()).unwrap()
        else {
            panic!("not a fetch response");
        };
        let payload = back.records[0].payload.as_ptr();
        assert!(range.contains(&payload));
    }

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
                    payload: Bytes::from_static(b"set k v"),
                }),
            ),
            (
                "fetch_snapshot",
                Request::FetchSnapshot(FetchSnapshotRequest {
                    epoch: Epoch(7),
                    replica: ReplicaId(2),
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
                            end_offset: Some(Offset(44)),
                            since_last_fetch: None,
                        },
                        ReplicaProgress {
                            replica: ReplicaId(2),
                            end_offset: Some(Offset(43)),
                            since_last_fetch: Some(Duration::from_millis(15)),
                        },
                    ],
                    observers: vec![ReplicaProgress {
                        replica: ReplicaId(9),
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
                    error: Some(ErrorCode::PositionOutOfRange),
                    epoch: Epoch(7),
                    leader: Some(ReplicaId(1)),
                    committed: Some(oe(44, 7)),
                    response: Bytes::from_static(b"OK"),
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
                02 01 07 00 00 00 02 00 00 00 03 00 00 00 29 00
                00 00 00 00 00 00 06 00 00 00 01 00
            begin_quorum_epoch request:
                02 02 07 00 00 00 01 00 00 00 03 00 00 00
            end_quorum_epoch request:
                02 03 07 00 00 00 01 00 00 00 02 00 00 00 03 00
                00 00 02 00 00 00
            fetch request:
                02 04 07 00 00 00 02 00 00 00 2a 00 00 00 00 00
                00 00 06 00 00 00 01 28 00 00 00 00 00 00 00 09
                00 00 00 00 00 00 00 01 00 00 00 00 00 00 00 f4
                01 00 00 00 00 01 00
            describe_quorum request:
                02 05
            read_index request:
                02 06 07 00 00 00 02 00 00 00 05 00 00 00 01
            forward request:
                02 07 07 00 00 00 73 65 74 20 6b 20 76
            fetch_snapshot request:
                02 08 07 00 00 00 02 00 00 00 1e 00 00 00 00 00
                00 00 05 00 00 00 00 10 00 00 00 00 00 00 00 04
                00 00
            vote response:
                02 81 00 07 00 00 00 00 01
            begin_quorum_epoch response:
                02 82 01 08 00 00 00 01 03 00 00 00
            end_quorum_epoch response:
                02 83 00 08 00 00 00 01 03 00 00 00
            fetch response:
                02 84 00 07 00 00 00 01 01 00 00 00 01 2b 00 00
                00 00 00 00 00 01 28 00 00 00 00 00 00 00 06 00
                00 00 09 00 00 00 00 00 00 00 00 02 00 00 00 a7
                7a a6 e6 01 01 2a 00 00 00 00 00 00 00 07 00 00
                00 00 00 00 00 75 8b 6d ba 01 00 2b 00 00 00 00
                00 00 00 07 00 00 00 02 00 00 00 61 62
            describe_quorum response:
                02 85 00 07 00 00 00 01 01 00 00 00 01 2b 00 00
                00 00 00 00 00 02 00 00 00 01 00 00 00 01 2c 00
                00 00 00 00 00 00 00 02 00 00 00 01 2b 00 00 00
                00 00 00 00 01 00 00 00 00 00 00 00 00 c0 e1 e4
                00 01 00 00 00 09 00 00 00 00 01 02 00 00 00 00
                00 00 00 00 00 00 00
            read_index response:
                02 86 03 07 00 00 00 01 01 00 00 00 01 2b 00 00
                00 00 00 00 00
            forward response:
                02 87 0d 07 00 00 00 01 01 00 00 00 01 2c 00 00
                00 00 00 00 00 07 00 00 00 02 00 00 00 4f 4b
            fetch_snapshot response:
                02 88 00 07 00 00 00 01 01 00 00 00 1e 00 00 00
                00 00 00 00 05 00 00 00 10 27 00 00 00 00 00 00
                ef be ad de 00 10 00 00 00 00 00 00 03 00 00 00
                78 79 7a
            version refusal:
                02 ff 01
        "#]]
        .assert_eq(&text);
    }
}
