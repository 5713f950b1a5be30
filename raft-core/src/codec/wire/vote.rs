//! Elections on the wire: Vote (and pre-vote), BeginQuorumEpoch and EndQuorumEpoch, and the
//! [`EpochResponse`] the two quorum-epoch requests share.

use bytes::BytesMut;

use super::frame::{
    put_bool, put_count, put_directory, put_epoch, put_error, put_offset_and_epoch, put_opt,
    put_replica, Reader,
};
use crate::codec::DecodeError;
use crate::message::{
    BeginQuorumEpochRequest, EndQuorumEpochRequest, EpochResponse, VoteRequest, VoteResponse,
};

pub(super) fn put_vote_request(out: &mut BytesMut, r: &VoteRequest) {
    put_epoch(out, r.epoch);
    put_replica(out, r.candidate);
    put_replica(out, r.voter);
    put_opt(out, r.voter_directory, put_directory);
    put_opt(out, r.candidate_directory, put_directory);
    put_offset_and_epoch(out, r.last);
    put_bool(out, r.pre_vote);
    put_bool(out, r.leader_invited);
}

pub(super) fn read_vote_request(r: &mut Reader) -> Result<VoteRequest, DecodeError> {
    Ok(VoteRequest {
        epoch: r.epoch()?,
        candidate: r.replica()?,
        voter: r.replica()?,
        voter_directory: r.opt("voter directory", Reader::directory)?,
        candidate_directory: r.opt("candidate directory", Reader::directory)?,
        last: r.offset_and_epoch()?,
        pre_vote: r.bool("pre_vote")?,
        leader_invited: r.bool("leader_invited")?,
    })
}

pub(super) fn put_vote_response(out: &mut BytesMut, r: &VoteResponse) {
    put_error(out, r.error);
    put_epoch(out, r.epoch);
    put_opt(out, r.leader, put_replica);
    put_bool(out, r.granted);
}

pub(super) fn read_vote_response(r: &mut Reader) -> Result<VoteResponse, DecodeError> {
    Ok(VoteResponse {
        error: r.error()?,
        epoch: r.epoch()?,
        leader: r.opt("leader", Reader::replica)?,
        granted: r.bool("granted")?,
    })
}

pub(super) fn put_begin_quorum_epoch_request(out: &mut BytesMut, r: &BeginQuorumEpochRequest) {
    put_epoch(out, r.epoch);
    put_replica(out, r.leader);
    put_replica(out, r.voter);
    put_opt(out, r.voter_directory, put_directory);
}

pub(super) fn read_begin_quorum_epoch_request(
    r: &mut Reader,
) -> Result<BeginQuorumEpochRequest, DecodeError> {
    Ok(BeginQuorumEpochRequest {
        epoch: r.epoch()?,
        leader: r.replica()?,
        voter: r.replica()?,
        voter_directory: r.opt("voter directory", Reader::directory)?,
    })
}

pub(super) fn put_end_quorum_epoch_request(out: &mut BytesMut, r: &EndQuorumEpochRequest) {
    put_epoch(out, r.epoch);
    put_replica(out, r.leader);
    put_count(out, r.preferred_successors.len());
    for id in &r.preferred_successors {
        put_replica(out, *id);
    }
}

pub(super) fn read_end_quorum_epoch_request(
    r: &mut Reader,
) -> Result<EndQuorumEpochRequest, DecodeError> {
    let epoch = r.epoch()?;
    let leader = r.replica()?;
    let count = r.count("preferred successors", 4, r.limits.replicas_max)?;
    let mut preferred_successors = Vec::with_capacity(count);
    for _ in 0..count {
        preferred_successors.push(r.replica()?);
    }
    Ok(EndQuorumEpochRequest {
        epoch,
        leader,
        preferred_successors,
    })
}

pub(super) fn put_epoch_response(out: &mut BytesMut, r: &EpochResponse) {
    put_error(out, r.error);
    put_epoch(out, r.epoch);
    put_opt(out, r.leader, put_replica);
}

pub(super) fn read_epoch_response(r: &mut Reader) -> Result<EpochResponse, DecodeError> {
    Ok(EpochResponse {
        error: r.error()?,
        epoch: r.epoch()?,
        leader: r.opt("leader", Reader::replica)?,
    })
}
