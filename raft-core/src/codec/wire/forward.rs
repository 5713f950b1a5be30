//! Forward on the wire: a client write sent on to the leader, and the leader's answer once the
//! write committed and applied there (or why not). Kept apart from the other RPCs so that a
//! change of its shape touches only this file, its kind tags and its samples in the tests.

use bytes::BytesMut;

use super::frame::{
    put_bytes, put_epoch, put_error, put_offset_and_epoch, put_opt, put_replica, Reader,
};
use crate::codec::DecodeError;
use crate::message::{ForwardRequest, ForwardResponse};

pub(super) fn put_forward_request(out: &mut BytesMut, r: &ForwardRequest) {
    put_bytes(out, &r.payload);
}

pub(super) fn read_forward_request(r: &mut Reader) -> Result<ForwardRequest, DecodeError> {
    Ok(ForwardRequest {
        payload: r.bytes("payload")?,
    })
}

pub(super) fn put_forward_response(out: &mut BytesMut, r: &ForwardResponse) {
    put_error(out, r.error);
    put_epoch(out, r.epoch);
    put_opt(out, r.leader, put_replica);
    put_opt(out, r.committed, put_offset_and_epoch);
    put_bytes(out, &r.response);
}

pub(super) fn read_forward_response(r: &mut Reader) -> Result<ForwardResponse, DecodeError> {
    Ok(ForwardResponse {
        error: r.error()?,
        epoch: r.epoch()?,
        leader: r.opt("leader", Reader::replica)?,
        committed: r.opt("committed", Reader::offset_and_epoch)?,
        response: r.bytes("response")?,
    })
}
