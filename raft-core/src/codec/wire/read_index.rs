//! The leader's view on the wire: ReadIndex (a read offset for a batch of reads on another
//! replica) and DescribeQuorum (the replication progress of every voter and observer).

use bytes::{BufMut, BytesMut};

use super::frame::{
    put_bool, put_count, put_directory, put_duration, put_epoch, put_error, put_opt, put_replica,
    Reader,
};
use crate::codec::DecodeError;
use crate::message::{
    DescribeQuorumResponse, ReadIndexRequest, ReadIndexResponse, ReplicaProgress,
};

/// The smallest encoding of one [`ReplicaProgress`]: id plus three absent options.
const REPLICA_PROGRESS_LEN_MIN: usize = 4 + 1 + 1 + 1;

pub(super) fn put_read_index_request(out: &mut BytesMut, r: &ReadIndexRequest) {
    put_epoch(out, r.epoch);
    put_replica(out, r.replica);
    out.put_u32_le(r.read_count);
    put_bool(out, r.lease);
}

pub(super) fn read_read_index_request(r: &mut Reader) -> Result<ReadIndexRequest, DecodeError> {
    Ok(ReadIndexRequest {
        epoch: r.epoch()?,
        replica: r.replica()?,
        read_count: r.u32()?,
        lease: r.bool("lease")?,
    })
}

pub(super) fn put_read_index_response(out: &mut BytesMut, r: &ReadIndexResponse) {
    put_error(out, r.error);
    put_epoch(out, r.epoch);
    put_opt(out, r.leader, put_replica);
    put_opt(out, r.read_offset, |o, v| o.put_u64_le(v.0));
}

pub(super) fn read_read_index_response(r: &mut Reader) -> Result<ReadIndexResponse, DecodeError> {
    Ok(ReadIndexResponse {
        error: r.error()?,
        epoch: r.epoch()?,
        leader: r.opt("leader", Reader::replica)?,
        read_offset: r.opt("read_offset", Reader::offset)?,
    })
}

// A DescribeQuorum request has no fields: its kind tag is the whole frame body.

pub(super) fn put_describe_quorum_response(out: &mut BytesMut, r: &DescribeQuorumResponse) {
    put_error(out, r.error);
    put_epoch(out, r.epoch);
    put_opt(out, r.leader, put_replica);
    put_opt(out, r.high_watermark, |o, v| o.put_u64_le(v.0));
    for list in [&r.voters, &r.observers] {
        put_count(out, list.len());
        for p in list {
            put_replica(out, p.replica);
            put_opt(out, p.directory, put_directory);
            put_opt(out, p.end_offset, |o, v| o.put_u64_le(v.0));
            put_opt(out, p.since_last_fetch, put_duration);
        }
    }
}

pub(super) fn read_describe_quorum_response(
    r: &mut Reader,
) -> Result<DescribeQuorumResponse, DecodeError> {
    let error = r.error()?;
    let epoch = r.epoch()?;
    let leader = r.opt("leader", Reader::replica)?;
    let high_watermark = r.opt("high_watermark", Reader::offset)?;
    let voters = read_progress_list(r, "voters")?;
    let observers = read_progress_list(r, "observers")?;
    Ok(DescribeQuorumResponse {
        error,
        epoch,
        leader,
        high_watermark,
        voters,
        observers,
    })
}

fn read_progress_list(
    r: &mut Reader,
    what: &'static str,
) -> Result<Vec<ReplicaProgress>, DecodeError> {
    let count = r.count(what, REPLICA_PROGRESS_LEN_MIN, r.limits.replicas_max)?;
    let mut list = Vec::with_capacity(count);
    for _ in 0..count {
        list.push(ReplicaProgress {
            replica: r.replica()?,
            directory: r.opt("directory", Reader::directory)?,
            end_offset: r.opt("end_offset", Reader::offset)?,
            since_last_fetch: r.opt("since_last_fetch", Reader::duration)?,
        });
    }
    Ok(list)
}
