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
//!               0x10 a routed request (a group id, then a request frame: `route`),
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
//! Record                   the record codec (`codec::encode_record`), CRC included
//! ```
//!
//! Decoding never panics and allocates at most in proportion to the input it was handed: every
//! count is checked against [`FrameLimits`] and against the bytes left (each item has a known
//! minimum size) before a vector is reserved, frames above the size limit are refused unread,
//! and record payloads are zero-copy slices of the input. A frame of another version is refused
//! with [`DecodeError::UnsupportedVersion`] before anything else is read; bytes left after a
//! complete message are [`DecodeError::Trailing`].
//!
//! A receiver that cannot read a request's version answers with a version refusal
//! ([`encode_version_refusal`]): its own version byte, `0xFF`, and the version it was sent.
//! Whoever decodes that as a response gets a [`DecodeError::UnsupportedVersion`] naming both
//! versions, so a mixed-version cluster reports the mismatch instead of a generic failure.
//!
//! This module dispatches on the kind tag; `frame` holds the header, the kind tags, the limits
//! and the field encodings, and one module per RPC family holds its messages' fields: `vote`
//! (Vote, BeginQuorumEpoch, EndQuorumEpoch), `fetch`, `fetch_snapshot`, `read_index`
//! (ReadIndex, DescribeQuorum) and `forward`; `route` the routed frames of hosts that run many
//! groups.

use bytes::{BufMut, Bytes, BytesMut};

use crate::codec::DecodeError;
use crate::message::{DescribeQuorumRequest, Request, Response};

mod fetch;
mod fetch_snapshot;
mod forward;
mod frame;
mod read_index;
mod route;
mod vote;

#[cfg(test)]
mod golden;
#[cfg(test)]
mod tests;

use frame::*;
pub use frame::{FrameLimits, FRAME_HEADER_LEN, KIND_VERSION_REFUSED, WIRE_VERSION};
pub use route::{decode_group_request, encode_group_request};

/// Appends the frame of `request` to `out`.
pub fn encode_request(request: &Request, out: &mut BytesMut) {
    match request {
        Request::Vote(r) => {
            put_header(out, REQ_VOTE);
            vote::put_vote_request(out, r);
        }
        Request::BeginQuorumEpoch(r) => {
            put_header(out, REQ_BEGIN_QUORUM_EPOCH);
            vote::put_begin_quorum_epoch_request(out, r);
        }
        Request::EndQuorumEpoch(r) => {
            put_header(out, REQ_END_QUORUM_EPOCH);
            vote::put_end_quorum_epoch_request(out, r);
        }
        Request::Fetch(r) => {
            put_header(out, REQ_FETCH);
            fetch::put_fetch_request(out, r);
        }
        Request::DescribeQuorum(DescribeQuorumRequest {}) => {
            put_header(out, REQ_DESCRIBE_QUORUM);
        }
        Request::ReadIndex(r) => {
            put_header(out, REQ_READ_INDEX);
            read_index::put_read_index_request(out, r);
        }
        Request::Forward(r) => {
            put_header(out, REQ_FORWARD);
            forward::put_forward_request(out, r);
        }
        Request::FetchSnapshot(r) => {
            put_header(out, REQ_FETCH_SNAPSHOT);
            fetch_snapshot::put_fetch_snapshot_request(out, r);
        }
    }
}

/// Appends the frame of `response` to `out`.
pub fn encode_response(response: &Response, out: &mut BytesMut) {
    match response {
        Response::Vote(r) => {
            put_header(out, RESP_VOTE);
            vote::put_vote_response(out, r);
        }
        Response::BeginQuorumEpoch(r) => {
            put_header(out, RESP_BEGIN_QUORUM_EPOCH);
            vote::put_epoch_response(out, r);
        }
        Response::EndQuorumEpoch(r) => {
            put_header(out, RESP_END_QUORUM_EPOCH);
            vote::put_epoch_response(out, r);
        }
        Response::Fetch(r) => {
            put_header(out, RESP_FETCH);
            fetch::put_fetch_response(out, r);
        }
        Response::DescribeQuorum(r) => {
            put_header(out, RESP_DESCRIBE_QUORUM);
            read_index::put_describe_quorum_response(out, r);
        }
        Response::ReadIndex(r) => {
            put_header(out, RESP_READ_INDEX);
            read_index::put_read_index_response(out, r);
        }
        Response::Forward(r) => {
            put_header(out, RESP_FORWARD);
            forward::put_forward_response(out, r);
        }
        Response::FetchSnapshot(r) => {
            put_header(out, RESP_FETCH_SNAPSHOT);
            fetch_snapshot::put_fetch_snapshot_response(out, r);
        }
    }
}

/// Appends a version refusal: the answer to a request whose version byte was `found`.
pub fn encode_version_refusal(found: u8, out: &mut BytesMut) {
    put_header(out, KIND_VERSION_REFUSED);
    out.put_u8(found);
}

/// Decodes one request frame, which must be exactly `frame` (no bytes before or after).
pub fn decode_request(frame: Bytes, limits: &FrameLimits) -> Result<Request, DecodeError> {
    let (kind, mut r) = Reader::open(&frame, limits)?;
    let request = match kind {
        REQ_VOTE => Request::Vote(vote::read_vote_request(&mut r)?),
        REQ_BEGIN_QUORUM_EPOCH => {
            Request::BeginQuorumEpoch(vote::read_begin_quorum_epoch_request(&mut r)?)
        }
        REQ_END_QUORUM_EPOCH => {
            Request::EndQuorumEpoch(vote::read_end_quorum_epoch_request(&mut r)?)
        }
        REQ_FETCH => Request::Fetch(fetch::read_fetch_request(&mut r)?),
        REQ_DESCRIBE_QUORUM => Request::DescribeQuorum(DescribeQuorumRequest {}),
        REQ_READ_INDEX => Request::ReadIndex(read_index::read_read_index_request(&mut r)?),
        REQ_FORWARD => Request::Forward(forward::read_forward_request(&mut r)?),
        REQ_FETCH_SNAPSHOT => {
            Request::FetchSnapshot(fetch_snapshot::read_fetch_snapshot_request(&mut r)?)
        }
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
        RESP_VOTE => Response::Vote(vote::read_vote_response(&mut r)?),
        RESP_BEGIN_QUORUM_EPOCH => Response::BeginQuorumEpoch(vote::read_epoch_response(&mut r)?),
        RESP_END_QUORUM_EPOCH => Response::EndQuorumEpoch(vote::read_epoch_response(&mut r)?),
        RESP_FETCH => Response::Fetch(fetch::read_fetch_response(&mut r)?),
        RESP_DESCRIBE_QUORUM => {
            Response::DescribeQuorum(read_index::read_describe_quorum_response(&mut r)?)
        }
        RESP_READ_INDEX => Response::ReadIndex(read_index::read_read_index_response(&mut r)?),
        RESP_FORWARD => Response::Forward(forward::read_forward_response(&mut r)?),
        RESP_FETCH_SNAPSHOT => {
            Response::FetchSnapshot(fetch_snapshot::read_fetch_snapshot_response(&mut r)?)
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
