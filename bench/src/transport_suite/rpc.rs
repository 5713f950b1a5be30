//! What every transport of the suite carries: the Fetch RPC and its answer, encoded with
//! raft-core's wire codec, the certificates both TLS paths use, and the client side each path
//! implements.

use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use hdrhistogram::Histogram;
use raft_core::codec::wire;
use raft_core::message::{FetchRequest, FetchResponse, ReadBarrier, Request, Response};
use raft_core::{Epoch, Offset, Record, RecordKind, ReplicaId};
use raft_transport_quic::{certs, TlsMaterial};

pub(super) const CLIENT: ReplicaId = ReplicaId(1);
pub(super) const SERVER: ReplicaId = ReplicaId(2);
/// RPCs in flight during the throughput measurements.
pub(super) const IN_FLIGHT: usize = 8;
/// The deadline of each QUIC call.
pub(super) const RPC_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the suite could not measure: setup or a transport failing on loopback.
pub(super) type Failed = String;

/// Maps any error to a [`Failed`] that says what was being done.
pub(super) fn failed<E: std::fmt::Display>(what: &'static str) -> impl FnOnce(E) -> Failed {
    move |e| format!("{what}: {e}")
}

/// A Fetch asking for `payload` bytes (0: the small RPC).
pub(super) fn request(payload: usize) -> Request {
    Request::Fetch(FetchRequest {
        epoch: Epoch(1),
        replica: CLIENT,
        replica_directory: None,
        fetch_offset: Offset(1),
        last_fetched_epoch: Epoch(1),
        high_watermark: Some(Offset(1)),
        read_barrier: ReadBarrier(0),
        max_wait: Duration::ZERO,
        max_bytes: payload as u32,
    })
}

/// The answer to a request of [`request`]: one record of `max_bytes` bytes taken from `data`.
pub(super) fn respond(request: Request, data: &Bytes) -> Response {
    let (epoch, offset, bytes) = match &request {
        Request::Fetch(f) => (f.epoch, f.fetch_offset, f.max_bytes as usize),
        _ => (Epoch(1), Offset(0), 0),
    };
    let records = if bytes == 0 {
        Vec::new()
    } else {
        vec![Record {
            offset,
            epoch,
            kind: RecordKind::Data,
            payload: data.slice(..bytes.min(data.len())),
        }]
    };
    Response::Fetch(FetchResponse {
        error: None,
        epoch,
        leader: Some(SERVER),
        high_watermark: Some(offset.next()),
        diverging: None,
        records,
        read_barrier: ReadBarrier(0),
        snapshot: None,
    })
}

/// The payload bytes a response carries.
pub(super) fn payload_len(response: &Response) -> usize {
    match response {
        Response::Fetch(f) => f.records.iter().map(|r| r.payload.len()).sum(),
        _ => 0,
    }
}

/// The largest payload of the suite, shared by every response.
pub(super) fn data() -> Bytes {
    Bytes::from((0..(64u32 << 10)).map(|i| i as u8).collect::<Vec<u8>>())
}

pub(super) fn frame_len_of_request(payload: usize) -> usize {
    let mut buf = BytesMut::new();
    wire::encode_request(&request(payload), &mut buf);
    buf.len()
}

pub(super) fn frame_len_of_response(payload: usize) -> usize {
    let mut buf = BytesMut::new();
    wire::encode_response(&respond(request(payload), &data()), &mut buf);
    buf.len()
}

/// One side of an RPC path: issue a request, get the decoded response.
#[async_trait]
pub(super) trait Client: Send + Sync {
    /// Round trips with one RPC at a time until `stop`.
    async fn round_trips(&self, stop: Instant) -> Result<Histogram<u64>, Failed>;
    /// RPCs asking for `payload` bytes, `IN_FLIGHT` at once, until `stop`; returns the RPCs
    /// completed and the payload bytes received.
    async fn stream(&self, payload: usize, stop: Instant) -> Result<(u64, u64), Failed>;
}

pub(super) fn tls(ca: &certs::CaMaterial, id: ReplicaId) -> Result<TlsMaterial, Failed> {
    let node = certs::generate_node(ca, id).map_err(failed("node certificate"))?;
    Ok(TlsMaterial {
        ca_cert_pem: ca.cert_pem.clone(),
        cert_pem: node.cert_pem,
        key_pem: node.key_pem,
    })
}

#[cfg(test)]
mod tests {
    use raft_core::codec::wire::FrameLimits;

    use super::*;

    #[test]
    fn a_response_carries_the_requested_payload_through_the_codec() {
        let limits = FrameLimits::default();
        for payload in [0usize, 4 << 10, 64 << 10] {
            let mut buf = BytesMut::new();
            wire::encode_request(&request(payload), &mut buf);
            let req = wire::decode_request(buf.freeze(), &limits).expect("request decodes");
            let mut buf = BytesMut::new();
            wire::encode_response(&respond(req, &data()), &mut buf);
            let resp = wire::decode_response(buf.freeze(), &limits).expect("response decodes");
            assert_eq!(payload_len(&resp), payload);
        }
    }
}
