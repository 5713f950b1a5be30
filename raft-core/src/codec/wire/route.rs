//! Routed request frames: a request of one group among the many a host runs
//! ([`crate::io::HostTransport`]). The group travels in front of an ordinary request frame:
//!
//! ```text
//! version u8    WIRE_VERSION
//! kind    u8    0x10 (routed request)
//! group   u64   the GroupId
//! request       a complete request frame (never itself routed)
//! ```
//!
//! A plain request frame is a request of [`GroupId::DEFAULT`] (which is never routed, so that
//! every request has one frame), so a node that runs one group
//! and a host that runs many speak to each other. Responses need no group: each answers the
//! request it was sent for.

use bytes::{BufMut, Bytes, BytesMut};

use super::frame::{put_header, Reader, FRAME_HEADER_LEN};
use super::{decode_request, encode_request, FrameLimits};
use crate::codec::DecodeError;
use crate::message::Request;
use crate::types::GroupId;

/// The kind tag of a routed request frame.
pub(super) const REQ_ROUTED: u8 = 0x10;

/// Bytes of a routed frame before the request frame it carries.
const ROUTE_LEN: usize = FRAME_HEADER_LEN + 8;

/// Appends the frame of `request` for `group`: plain for [`GroupId::DEFAULT`], routed for any
/// other group.
pub fn encode_group_request(group: GroupId, request: &Request, out: &mut BytesMut) {
    if group != GroupId::DEFAULT {
        put_header(out, REQ_ROUTED);
        out.put_u64_le(group.0);
    }
    encode_request(request, out);
}

/// Decodes one request frame, routed or plain (plain frames name [`GroupId::DEFAULT`]), which
/// must be exactly `frame`. The limits bound the whole frame, route included.
pub fn decode_group_request(
    frame: Bytes,
    limits: &FrameLimits,
) -> Result<(GroupId, Request), DecodeError> {
    let (kind, mut r) = Reader::open(&frame, limits)?;
    if kind != REQ_ROUTED {
        return Ok((GroupId::DEFAULT, decode_request(frame, limits)?));
    }
    let group = GroupId(r.u64()?);
    if group == GroupId::DEFAULT {
        // The default group travels plain: one request has one frame.
        return Err(DecodeError::InvalidValue {
            what: "routed frame naming the default group",
            value: 0,
        });
    }
    let inner = frame.slice(ROUTE_LEN..);
    if Reader::open(&inner, limits)?.0 == REQ_ROUTED {
        return Err(DecodeError::InvalidValue {
            what: "request kind inside a routed frame",
            value: REQ_ROUTED.into(),
        });
    }
    Ok((group, decode_request(inner, limits)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{BeginQuorumEpochRequest, DescribeQuorumRequest};
    use crate::types::{Epoch, ReplicaId};

    fn request() -> Request {
        Request::BeginQuorumEpoch(BeginQuorumEpochRequest {
            epoch: Epoch(7),
            leader: ReplicaId(1),
            voter: ReplicaId(3),
            voter_directory: None,
        })
    }

    fn encode(group: GroupId, request: &Request) -> Bytes {
        let mut out = BytesMut::new();
        encode_group_request(group, request, &mut out);
        out.freeze()
    }

    #[test]
    fn a_routed_frame_is_the_group_in_front_of_the_plain_frame() {
        let plain = encode(GroupId::DEFAULT, &request());
        let mut plain_only = BytesMut::new();
        encode_request(&request(), &mut plain_only);
        assert_eq!(
            plain,
            plain_only.freeze(),
            "the default group travels plain"
        );

        let routed = encode(GroupId(0x0102_0304_0506_0708), &request());
        assert_eq!(&routed[..2], &[super::super::WIRE_VERSION, REQ_ROUTED]);
        assert_eq!(&routed[2..10], &0x0102_0304_0506_0708u64.to_le_bytes());
        assert_eq!(&routed[10..], &plain[..]);
    }

    #[test]
    fn both_forms_decode_with_their_group() {
        let limits = FrameLimits::default();
        for group in [GroupId::DEFAULT, GroupId(1), GroupId(u64::MAX)] {
            let (got, req) = decode_group_request(encode(group, &request()), &limits).unwrap();
            assert_eq!((got, req), (group, request()));
        }
        // The default group has one frame, the plain one: a routed frame naming it is refused.
        let mut zero = BytesMut::new();
        put_header(&mut zero, REQ_ROUTED);
        zero.put_u64_le(0);
        encode_request(
            &Request::DescribeQuorum(DescribeQuorumRequest {}),
            &mut zero,
        );
        assert!(matches!(
            decode_group_request(zero.freeze(), &limits),
            Err(DecodeError::InvalidValue { .. })
        ));
    }

    #[test]
    fn a_route_inside_a_route_a_short_route_and_a_large_frame_are_refused() {
        let limits = FrameLimits::default();
        let mut nested = BytesMut::new();
        put_header(&mut nested, REQ_ROUTED);
        nested.put_u64_le(5);
        nested.extend_from_slice(&encode(GroupId(6), &request()));
        assert!(matches!(
            decode_group_request(nested.freeze(), &limits),
            Err(DecodeError::InvalidValue { .. })
        ));

        let routed = encode(GroupId(9), &request());
        for cut in 1..ROUTE_LEN + 2 {
            assert!(
                decode_group_request(routed.slice(..cut), &limits).is_err(),
                "a frame cut at {cut} bytes decodes"
            );
        }
        let small = FrameLimits::new(routed.len() - 1);
        assert!(matches!(
            decode_group_request(routed, &small),
            Err(DecodeError::TooLarge { .. })
        ));
    }
}
