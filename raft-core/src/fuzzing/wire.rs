//! Properties of the RPC wire codec: a frame decodes to at most one message, a decoded message
//! encodes back to exactly the frame (the codec is canonical), decoding under tighter limits
//! accepts a subset with equal results and never returns a value outside those limits, and
//! the decode allocates in proportion to the frame.

use bytes::{Bytes, BytesMut};

use super::{assert_alloc_bounded, measure};
use crate::codec::wire::{
    decode_group_request, decode_request, decode_response, encode_group_request, encode_request,
    encode_response, FrameLimits,
};
use crate::message::{Request, Response};

/// Limits small enough that a fuzzer reaches every limit check with short inputs.
pub fn tight_limits() -> FrameLimits {
    FrameLimits {
        frame_bytes_max: 512,
        record_payload_max: 32,
        records_max: 4,
        replicas_max: 4,
    }
}

/// The same frame read as a request of some group: a plain request is one of the default
/// group, and a decoded routed request encodes back to exactly the frame.
fn check_group_request_frame(frame: &Bytes) {
    let limits = FrameLimits::default();
    let (decoded, stats) = measure(|| decode_group_request(frame.clone(), &limits));
    assert_alloc_bounded("routed request frame", frame.len(), stats);
    if let Ok(plain) = decode_request(frame.clone(), &limits) {
        assert_eq!(
            decoded.as_ref().ok(),
            Some(&(crate::types::GroupId::DEFAULT, plain)),
            "a plain request is not one of the default group"
        );
    }
    let Ok((group, request)) = decoded else {
        return;
    };
    let mut out = BytesMut::new();
    encode_group_request(group, &request, &mut out);
    assert_eq!(
        &out[..],
        &frame[..],
        "a decoded routed request does not encode back to its frame: {group} {request:?}"
    );
}

/// Checks the properties of `data` read as a request frame.
pub fn check_request_frame(data: &[u8]) {
    let frame = Bytes::copy_from_slice(data);
    check_group_request_frame(&frame);
    let (decoded, stats) = measure(|| decode_request(frame.clone(), &FrameLimits::default()));
    assert_alloc_bounded("request frame", data.len(), stats);

    let tight = tight_limits();
    if let Ok(small) = decode_request(frame.clone(), &tight) {
        assert_eq!(
            decoded.as_ref(),
            Ok(&small),
            "tighter limits changed a decoded request"
        );
        request_within(&small, &tight);
    }

    let Ok(request) = decoded else { return };
    request_within(&request, &FrameLimits::default());
    let mut out = BytesMut::new();
    encode_request(&request, &mut out);
    assert_eq!(
        &out[..],
        data,
        "a decoded request does not encode back to its frame: {request:?}"
    );
    assert!(
        decode_response(frame, &FrameLimits::default()).is_err(),
        "a frame decoded both as a request and as a response"
    );
}

/// Checks the properties of `data` read as a response frame.
pub fn check_response_frame(data: &[u8]) {
    let frame = Bytes::copy_from_slice(data);
    let (decoded, stats) = measure(|| decode_response(frame.clone(), &FrameLimits::default()));
    assert_alloc_bounded("response frame", data.len(), stats);

    let tight = tight_limits();
    if let Ok(small) = decode_response(frame.clone(), &tight) {
        assert_eq!(
            decoded.as_ref(),
            Ok(&small),
            "tighter limits changed a decoded response"
        );
        response_within(&small, &tight);
    }

    let Ok(response) = decoded else { return };
    response_within(&response, &FrameLimits::default());
    let mut out = BytesMut::new();
    encode_response(&response, &mut out);
    assert_eq!(
        &out[..],
        data,
        "a decoded response does not encode back to its frame: {response:?}"
    );
    assert!(
        decode_request(frame, &FrameLimits::default()).is_err(),
        "a frame decoded both as a response and as a request"
    );
}

fn bytes_within(what: &str, len: usize, limits: &FrameLimits) {
    assert!(
        len <= limits.record_payload_max,
        "{what} of {len} bytes decoded under a limit of {}",
        limits.record_payload_max
    );
}

fn count_within(what: &str, len: usize, limit: usize) {
    assert!(
        len <= limit,
        "{len} {what} decoded under a limit of {limit}"
    );
}

// New message kinds fall into the wildcard arms: they are still round-tripped above, only
// their lists are not checked against the limits until they are named here.
fn request_within(request: &Request, limits: &FrameLimits) {
    match request {
        Request::EndQuorumEpoch(r) => count_within(
            "preferred successors",
            r.preferred_successors.len(),
            limits.replicas_max,
        ),
        Request::Forward(r) => {
            count_within("payloads", r.payloads.len(), limits.records_max);
            for p in &r.payloads {
                bytes_within("a forwarded payload", p.len(), limits);
            }
        }
        _ => {}
    }
}

fn response_within(response: &Response, limits: &FrameLimits) {
    match response {
        Response::Fetch(r) => {
            count_within("records", r.records.len(), limits.records_max);
            for record in &r.records {
                bytes_within("a record payload", record.payload.len(), limits);
            }
        }
        Response::DescribeQuorum(r) => {
            count_within("voters", r.voters.len(), limits.replicas_max);
            count_within("observers", r.observers.len(), limits.replicas_max);
        }
        Response::Forward(r) => {
            count_within("results", r.results.len(), limits.records_max);
            for result in &r.results {
                bytes_within("a forward response", result.response.len(), limits);
            }
        }
        Response::FetchSnapshot(r) => bytes_within("snapshot data", r.data.len(), limits),
        _ => {}
    }
}
