//! FetchSnapshot on the wire (KIP-630): a follower's request for a chunk of the leader's
//! snapshot, and the chunk with the snapshot's size and checksum.

use bytes::{BufMut, BytesMut};

use super::frame::{
    put_bytes, put_directory, put_epoch, put_error, put_offset_and_epoch, put_opt, put_replica,
    Reader,
};
use crate::codec::DecodeError;
use crate::message::{FetchSnapshotRequest, FetchSnapshotResponse};

pub(super) fn put_fetch_snapshot_request(out: &mut BytesMut, r: &FetchSnapshotRequest) {
    put_epoch(out, r.epoch);
    put_replica(out, r.replica);
    put_opt(out, r.replica_directory, put_directory);
    put_offset_and_epoch(out, r.snapshot);
    out.put_u64_le(r.position);
    out.put_u32_le(r.max_bytes);
}

pub(super) fn read_fetch_snapshot_request(
    r: &mut Reader,
) -> Result<FetchSnapshotRequest, DecodeError> {
    Ok(FetchSnapshotRequest {
        epoch: r.epoch()?,
        replica: r.replica()?,
        replica_directory: r.opt("replica directory", Reader::directory)?,
        snapshot: r.offset_and_epoch()?,
        position: r.u64()?,
        max_bytes: r.u32()?,
    })
}

pub(super) fn put_fetch_snapshot_response(out: &mut BytesMut, r: &FetchSnapshotResponse) {
    put_error(out, r.error);
    put_epoch(out, r.epoch);
    put_opt(out, r.leader, put_replica);
    put_offset_and_epoch(out, r.snapshot);
    out.put_u64_le(r.size);
    out.put_u32_le(r.checksum);
    out.put_u64_le(r.position);
    put_bytes(out, &r.data);
}

pub(super) fn read_fetch_snapshot_response(
    r: &mut Reader,
) -> Result<FetchSnapshotResponse, DecodeError> {
    Ok(FetchSnapshotResponse {
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
