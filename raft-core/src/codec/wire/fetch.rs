//! Fetch on the wire: the pull of records from the leader, whose response carries the records
//! themselves in the record codec (CRC included), decoded as zero-copy slices of the frame.

use bytes::{BufMut, BytesMut};

use super::frame::{
    put_count, put_directory, put_duration, put_epoch, put_error, put_offset_and_epoch, put_opt,
    put_replica, Reader,
};
use crate::codec::{encode_record, DecodeError, RECORD_HEADER_LEN};
use crate::message::{FetchRequest, FetchResponse, ReadBarrier};
use crate::types::Record;

pub(super) fn put_fetch_request(out: &mut BytesMut, r: &FetchRequest) {
    put_epoch(out, r.epoch);
    put_replica(out, r.replica);
    put_opt(out, r.replica_directory, put_directory);
    out.put_u64_le(r.fetch_offset.0);
    put_epoch(out, r.last_fetched_epoch);
    put_opt(out, r.high_watermark, |o, v| o.put_u64_le(v.0));
    out.put_u64_le(r.read_barrier.0);
    put_duration(out, r.max_wait);
    out.put_u32_le(r.max_bytes);
}

pub(super) fn read_fetch_request(r: &mut Reader) -> Result<FetchRequest, DecodeError> {
    Ok(FetchRequest {
        epoch: r.epoch()?,
        replica: r.replica()?,
        replica_directory: r.opt("replica directory", Reader::directory)?,
        fetch_offset: r.offset()?,
        last_fetched_epoch: r.epoch()?,
        high_watermark: r.opt("high_watermark", Reader::offset)?,
        read_barrier: ReadBarrier(r.u64()?),
        max_wait: r.duration()?,
        max_bytes: r.u32()?,
    })
}

pub(super) fn put_fetch_response(out: &mut BytesMut, r: &FetchResponse) {
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

pub(super) fn read_fetch_response(r: &mut Reader) -> Result<FetchResponse, DecodeError> {
    let error = r.error()?;
    let epoch = r.epoch()?;
    let leader = r.opt("leader", Reader::replica)?;
    let high_watermark = r.opt("high_watermark", Reader::offset)?;
    let diverging = r.opt("diverging", Reader::offset_and_epoch)?;
    let read_barrier = ReadBarrier(r.u64()?);
    let snapshot = r.opt("snapshot", Reader::offset_and_epoch)?;
    let count = r.count("records", RECORD_HEADER_LEN, r.limits.records_max)?;
    let mut records = Vec::with_capacity(count);
    for _ in 0..count {
        records.push(r.record()?);
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
