//! Forward on the wire: client writes sent on to the leader in their caller's order, and the
//! leader's answer once they committed and applied there (or why not). Kept apart from the
//! other RPCs so that a change of its shape touches only this file, its kind tags and its
//! samples in the tests.

use bytes::{BufMut, BytesMut};

use super::frame::{
    put_bytes, put_count, put_epoch, put_error, put_offset_and_epoch, put_opt, put_replica, Reader,
};
use crate::codec::DecodeError;
use crate::message::{ForwardRequest, ForwardResponse, ForwardResult, WriteOrder};

/// The fewest bytes a payload takes on the wire (its length prefix).
const PAYLOAD_LEN_MIN: usize = 4;
/// The fewest bytes a result takes: error, committed flag, limit, response length.
const RESULT_LEN_MIN: usize = 1 + 1 + 4 + 4;

pub(super) fn put_forward_request(out: &mut BytesMut, r: &ForwardRequest) {
    put_count(out, r.payloads.len());
    for p in &r.payloads {
        put_bytes(out, p);
    }
    put_opt(out, r.order, |out, o| {
        out.put_u64_le(o.session);
        out.put_u64_le(o.seq);
    });
    put_epoch(out, r.epoch);
}

pub(super) fn read_forward_request(r: &mut Reader) -> Result<ForwardRequest, DecodeError> {
    let count = r.count("payloads", PAYLOAD_LEN_MIN, r.limits.records_max)?;
    let mut payloads = Vec::with_capacity(count);
    for _ in 0..count {
        payloads.push(r.bytes("payload")?);
    }
    let order = r.opt("order", |r| {
        Ok(WriteOrder {
            session: r.u64()?,
            seq: r.u64()?,
        })
    })?;
    let epoch = r.epoch()?;
    Ok(ForwardRequest {
        payloads,
        order,
        epoch,
    })
}

pub(super) fn put_forward_response(out: &mut BytesMut, r: &ForwardResponse) {
    put_error(out, r.error);
    put_epoch(out, r.epoch);
    put_opt(out, r.leader, put_replica);
    put_count(out, r.results.len());
    for result in &r.results {
        put_error(out, result.error);
        put_opt(out, result.committed, put_offset_and_epoch);
        out.put_u32_le(result.limit);
        put_bytes(out, &result.response);
    }
}

pub(super) fn read_forward_response(r: &mut Reader) -> Result<ForwardResponse, DecodeError> {
    let error = r.error()?;
    let epoch = r.epoch()?;
    let leader = r.opt("leader", Reader::replica)?;
    let count = r.count("results", RESULT_LEN_MIN, r.limits.records_max)?;
    let mut results = Vec::with_capacity(count);
    for _ in 0..count {
        results.push(ForwardResult {
            error: r.error()?,
            committed: r.opt("committed", Reader::offset_and_epoch)?,
            limit: r.u32()?,
            response: r.bytes("response")?,
        });
    }
    Ok(ForwardResponse {
        error,
        epoch,
        leader,
        results,
    })
}
