//! The framing every RPC shares: the version and kind header, the kind tags, the limits a
//! decoder enforces, and the field encodings (the writers `put_*` and the frame [`Reader`])
//! that the per-RPC modules are written in. Nothing here knows a message's fields.

use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};

use crate::codec::reader::LeReader;
use crate::codec::{decode_record, DecodeError, RECORD_HEADER_LEN};
use crate::message::ErrorCode;
use crate::types::{DirectoryId, Epoch, Offset, OffsetAndEpoch, Record, ReplicaId};

/// The wire version this build writes and the only one it reads.
pub const WIRE_VERSION: u8 = 5;

/// The kind tag of a version refusal frame.
pub const KIND_VERSION_REFUSED: u8 = 0xFF;

/// Bytes of every frame before its fields: the version and the kind tag.
pub const FRAME_HEADER_LEN: usize = 2;

// Kind tags: one per request, and the same with the high bit set for its response.
pub(super) const REQ_VOTE: u8 = 0x01;
pub(super) const REQ_BEGIN_QUORUM_EPOCH: u8 = 0x02;
pub(super) const REQ_END_QUORUM_EPOCH: u8 = 0x03;
pub(super) const REQ_FETCH: u8 = 0x04;
pub(super) const REQ_DESCRIBE_QUORUM: u8 = 0x05;
pub(super) const REQ_READ_INDEX: u8 = 0x06;
pub(super) const REQ_FORWARD: u8 = 0x07;
pub(super) const REQ_FETCH_SNAPSHOT: u8 = 0x08;
const RESP_FLAG: u8 = 0x80;
pub(super) const RESP_VOTE: u8 = RESP_FLAG | REQ_VOTE;
pub(super) const RESP_BEGIN_QUORUM_EPOCH: u8 = RESP_FLAG | REQ_BEGIN_QUORUM_EPOCH;
pub(super) const RESP_END_QUORUM_EPOCH: u8 = RESP_FLAG | REQ_END_QUORUM_EPOCH;
pub(super) const RESP_FETCH: u8 = RESP_FLAG | REQ_FETCH;
pub(super) const RESP_DESCRIBE_QUORUM: u8 = RESP_FLAG | REQ_DESCRIBE_QUORUM;
pub(super) const RESP_READ_INDEX: u8 = RESP_FLAG | REQ_READ_INDEX;
pub(super) const RESP_FORWARD: u8 = RESP_FLAG | REQ_FORWARD;
pub(super) const RESP_FETCH_SNAPSHOT: u8 = RESP_FLAG | REQ_FETCH_SNAPSHOT;

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

pub(super) fn put_epoch(out: &mut BytesMut, epoch: Epoch) {
    out.put_u32_le(epoch.0);
}

pub(super) fn put_replica(out: &mut BytesMut, id: ReplicaId) {
    out.put_u32_le(id.0);
}

pub(super) fn put_directory(out: &mut BytesMut, d: DirectoryId) {
    out.put_u128_le(d.0);
}

pub(super) fn put_offset_and_epoch(out: &mut BytesMut, v: OffsetAndEpoch) {
    out.put_u64_le(v.offset.0);
    put_epoch(out, v.epoch);
}

pub(super) fn put_bool(out: &mut BytesMut, v: bool) {
    out.put_u8(u8::from(v));
}

pub(super) fn put_opt<T>(out: &mut BytesMut, v: Option<T>, put: impl FnOnce(&mut BytesMut, T)) {
    match v {
        None => out.put_u8(0),
        Some(v) => {
            out.put_u8(1);
            put(out, v);
        }
    }
}

pub(super) fn put_duration(out: &mut BytesMut, d: Duration) {
    out.put_u64_le(d.as_secs());
    out.put_u32_le(d.subsec_nanos());
}

/// Lists longer than `u32::MAX` cannot be built from any frame a decoder accepts; saturating
/// keeps the encoder total, and such a frame is then refused by the receiver as truncated.
pub(super) fn put_count(out: &mut BytesMut, len: usize) {
    out.put_u32_le(u32::try_from(len).unwrap_or(u32::MAX));
}

pub(super) fn put_error(out: &mut BytesMut, error: Option<ErrorCode>) {
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
        Some(ErrorCode::OutcomeUnknown) => 14,
        Some(ErrorCode::Superseded) => 15,
        Some(ErrorCode::NotReady) => 16,
    };
    out.put_u8(code);
}

pub(super) fn put_bytes(out: &mut BytesMut, bytes: &Bytes) {
    out.put_u32_le(bytes.len() as u32);
    out.put_slice(bytes);
}

/// A cursor over one frame: the codec's little-endian reader plus the frame's limits, and the
/// frame itself for zero-copy slices.
pub(super) struct Reader<'a> {
    frame: &'a Bytes,
    le: LeReader<'a>,
    pub(super) limits: &'a FrameLimits,
}

impl<'a> Reader<'a> {
    /// Checks the frame size and version and returns the kind tag with a reader of the fields.
    pub(super) fn open(
        frame: &'a Bytes,
        limits: &'a FrameLimits,
    ) -> Result<(u8, Reader<'a>), DecodeError> {
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

    pub(super) fn remaining(&self) -> usize {
        self.le.remaining()
    }

    pub(super) fn u8(&mut self) -> Result<u8, DecodeError> {
        self.le.u8()
    }

    pub(super) fn u32(&mut self) -> Result<u32, DecodeError> {
        self.le.u32()
    }

    pub(super) fn u64(&mut self) -> Result<u64, DecodeError> {
        self.le.u64()
    }

    pub(super) fn epoch(&mut self) -> Result<Epoch, DecodeError> {
        Ok(Epoch(self.u32()?))
    }

    pub(super) fn replica(&mut self) -> Result<ReplicaId, DecodeError> {
        Ok(ReplicaId(self.u32()?))
    }

    /// A directory id; zero is reserved for "none" and refused.
    pub(super) fn directory(&mut self) -> Result<DirectoryId, DecodeError> {
        match u128::from_le_bytes(self.le.take()?) {
            0 => Err(DecodeError::InvalidValue {
                what: "directory id",
                value: 0,
            }),
            d => Ok(DirectoryId(d)),
        }
    }

    pub(super) fn offset(&mut self) -> Result<Offset, DecodeError> {
        Ok(Offset(self.u64()?))
    }

    pub(super) fn offset_and_epoch(&mut self) -> Result<OffsetAndEpoch, DecodeError> {
        Ok(OffsetAndEpoch::new(self.offset()?, self.epoch()?))
    }

    pub(super) fn bool(&mut self, what: &'static str) -> Result<bool, DecodeError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(DecodeError::InvalidValue {
                what,
                value: other.into(),
            }),
        }
    }

    pub(super) fn opt<T>(
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

    pub(super) fn duration(&mut self) -> Result<Duration, DecodeError> {
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

    pub(super) fn error(&mut self) -> Result<Option<ErrorCode>, DecodeError> {
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
            14 => ErrorCode::OutcomeUnknown,
            15 => ErrorCode::Superseded,
            16 => ErrorCode::NotReady,
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
    pub(super) fn count(
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
    pub(super) fn bytes(&mut self, what: &'static str) -> Result<Bytes, DecodeError> {
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

    pub(super) fn record(&mut self) -> Result<Record, DecodeError> {
        let rest = self.frame.slice(self.le.position()..);
        let (record, used) = decode_record(&rest, self.limits.record_payload_max)?;
        self.le.advance(used);
        Ok(record)
    }

    pub(super) fn finish(self) -> Result<(), DecodeError> {
        self.le.finish()
    }
}

/// Appends the header of every frame: [`WIRE_VERSION`] and the kind tag.
pub(super) fn put_header(out: &mut BytesMut, kind: u8) {
    out.put_u8(WIRE_VERSION);
    out.put_u8(kind);
}
