//! Snapshots and log compaction (KIP-630): purging the log prefix a local snapshot covers,
//! the leader's FetchSnapshot handling, and the follower's download and install.
//!
//! A follower whose fetch offset falls below the leader's log start is sent the leader's
//! snapshot id in the Fetch response. It then pulls the snapshot in chunks with FetchSnapshot
//! (instead of Fetch), hands each chunk to the driver, and on the last one asks the driver to
//! verify and complete it. Once verified, the core replaces its log with an empty one starting
//! at the snapshot's end ([`LogOp::Reset`]) and asks the driver to restore the state machine
//! from it; fetching then resumes from there. The download is kept across leader changes: the
//! next leader is asked for the same snapshot at the same position, and when it holds a
//! different one (another size or checksum) the download starts over.

use super::{Fill, LogOp, Outgoing, Outputs, Replica, RoleState, SnapshotOp};
use crate::message::{
    ErrorCode, FetchSnapshotRequest, FetchSnapshotResponse, Request, RequestId, Response,
};
use crate::types::{Instant, Offset, OffsetAndEpoch, ReplicaId};

/// A snapshot download in progress.
#[derive(Debug, Clone)]
pub(super) struct Download {
    pub(super) id: OffsetAndEpoch,
    /// Bytes handed to the driver so far.
    pub(super) position: u64,
    /// Size and checksum, as the first chunk's responder stated them.
    pub(super) expect: Option<(u64, u32)>,
    /// Every byte was written; waiting for the driver's verification.
    pub(super) finishing: bool,
}

impl Replica {
    /// The driver saved a snapshot covering everything below `id.offset`: remember it and
    /// purge the log below it, keeping the configured retention.
    pub(super) fn snapshot_taken(&mut self, id: OffsetAndEpoch, out: &mut Outputs) {
        if self.snapshot.is_some_and(|s| s.offset >= id.offset) {
            return;
        }
        self.snapshot = Some(id);
        // Only records the snapshot covers go; after an install the log may start above an
        // older local snapshot, and then nothing is purged.
        let mut start = Offset(id.offset.0.saturating_sub(self.cfg.snapshot_log_retention));
        // Responses held until the election state is durable still name records to serve.
        for m in &self.held {
            if let Outgoing::Response {
                fill: Some(Fill::Records(range)),
                ..
            } = m
            {
                start = start.min(range.from);
            }
        }
        if start > self.log.start && start <= self.log.end {
            self.voter_history.purge(start);
            let seq = self.log.purge(start);
            out.log.push(LogOp::Purge { seq, start });
        }
    }

    /// Leader: a chunk of a snapshot. The core checks the epoch and membership; the driver
    /// fills in the bytes (or answers `SnapshotNotFound`).
    pub(super) fn handle_fetch_snapshot(
        &mut self,
        now: Instant,
        from: ReplicaId,
        id: RequestId,
        req: FetchSnapshotRequest,
        out: &mut Outputs,
    ) {
        let error = if req.replica != from || from == self.cfg.id {
            Some(ErrorCode::InvalidRequest)
        } else if req.epoch < self.election.epoch {
            Some(ErrorCode::FencedLeaderEpoch)
        } else if req.epoch > self.election.epoch {
            Some(ErrorCode::UnknownLeaderEpoch)
        } else if !matches!(self.role, RoleState::Leader(_)) {
            Some(ErrorCode::NotLeader)
        } else {
            None
        };
        let mut response = FetchSnapshotResponse {
            error,
            epoch: self.election.epoch,
            leader: self.known_leader(),
            snapshot: req.snapshot,
            size: 0,
            checksum: 0,
            position: req.position,
            data: bytes::Bytes::new(),
        };
        if error.is_some() {
            self.respond(from, id, Response::FetchSnapshot(response), out);
            return;
        }
        self.leader_record_contact(now, from, req.replica_directory);
        if self.snapshot.is_none_or(|s| req.snapshot > s) {
            response.error = Some(ErrorCode::SnapshotNotFound);
            self.respond(from, id, Response::FetchSnapshot(response), out);
            return;
        }
        let fill = Fill::SnapshotChunk {
            id: req.snapshot,
            position: req.position,
            max_bytes: req.max_bytes.clamp(1, self.cfg.snapshot_chunk_bytes),
        };
        self.emit(
            Outgoing::Response {
                to: from,
                id,
                response: Response::FetchSnapshot(response),
                fill: Some(fill),
            },
            out,
        );
    }

    /// Follower: the leader says our log is behind its start. Begin downloading `id`, unless
    /// it would not move us forward (a correct leader never sends such an id).
    pub(super) fn follower_start_download(&mut self, id: OffsetAndEpoch) {
        if id.offset <= self.high_watermark {
            self.stats.bad_snapshots += 1;
            tracing::warn!(snapshot = ?id, hwm = %self.high_watermark, "ignoring a snapshot that is not ahead");
            return;
        }
        if self.download.as_ref().is_some_and(|d| d.id == id) {
            return;
        }
        self.download = Some(Download {
            id,
            position: 0,
            expect: None,
            finishing: false,
        });
    }

    /// Follower: ask the leader for the next chunk.
    pub(super) fn follower_fetch_snapshot(&mut self, now: Instant, out: &mut Outputs) {
        let Some(d) = &self.download else {
            return;
        };
        if d.finishing {
            return;
        }
        let req = FetchSnapshotRequest {
            epoch: self.election.epoch,
            replica: self.cfg.id,
            replica_directory: self.cfg.directory,
            snapshot: d.id,
            position: d.position,
            max_bytes: self.cfg.snapshot_chunk_bytes,
        };
        let RoleState::Follower(f) = &mut self.role else {
            return;
        };
        if f.fetch_in_flight || now < f.next_fetch_at {
            return;
        }
        f.fetch_in_flight = true;
        let to = f.leader;
        self.send_request(to, Request::FetchSnapshot(req), out);
    }

    /// Follower: a chunk (or a refusal) from the leader.
    pub(super) fn handle_fetch_snapshot_response(
        &mut self,
        now: Instant,
        from: ReplicaId,
        resp: FetchSnapshotResponse,
        out: &mut Outputs,
    ) {
        let retry = now.plus(self.cfg.retry_backoff);
        let fetch_timeout = self.cfg.fetch_timeout;
        let RoleState::Follower(f) = &mut self.role else {
            self.stats.stale_responses += 1;
            return;
        };
        if f.leader != from {
            self.stats.stale_responses += 1;
            return;
        }
        f.fetch_in_flight = false;
        match resp.error {
            None => {}
            Some(ErrorCode::SnapshotNotFound | ErrorCode::PositionOutOfRange) => {
                // The leader no longer holds it (a newer one replaced it): fetch again to
                // learn which snapshot to get.
                f.next_fetch_at = now;
                self.download = None;
                return;
            }
            Some(_) => {
                f.next_fetch_at = retry;
                return;
            }
        }
        // An answer from the leader in our epoch: the same liveness signal as a fetch.
        f.last_fetch_ok = Some(now);
        f.fetch_deadline = now.plus(fetch_timeout);
        f.next_fetch_at = now;
        let Some(d) = self.download.as_mut() else {
            self.stats.stale_responses += 1;
            return;
        };
        if resp.snapshot != d.id || resp.position != d.position || d.finishing {
            self.stats.stale_responses += 1;
            return;
        }
        let stated = (resp.size, resp.checksum);
        if d.expect.is_some_and(|e| e != stated) {
            // Another replica's snapshot with the same id but other bytes: start over.
            self.stats.snapshot_restarts += 1;
            d.position = 0;
            d.expect = None;
            return;
        }
        let end = resp.position.saturating_add(resp.data.len() as u64);
        if end > resp.size || (resp.data.is_empty() && end < resp.size) {
            self.stats.bad_snapshots += 1;
            d.position = 0;
            d.expect = None;
            return;
        }
        d.expect = Some(stated);
        if !resp.data.is_empty() {
            out.snapshot.push(SnapshotOp::Write {
                id: d.id,
                position: d.position,
                data: resp.data,
            });
        }
        d.position = end;
        if end == resp.size {
            d.finishing = true;
            out.snapshot.push(SnapshotOp::Finish {
                id: d.id,
                size: resp.size,
                checksum: resp.checksum,
            });
        }
    }

    /// The driver verified (or refused) a finished download.
    pub(super) fn snapshot_downloaded(
        &mut self,
        now: Instant,
        id: OffsetAndEpoch,
        verified: bool,
        voters: crate::voters::VoterSet,
        out: &mut Outputs,
    ) {
        let Some(d) = self.download.as_mut() else {
            return;
        };
        if d.id != id || !d.finishing {
            return;
        }
        if !verified {
            self.stats.snapshot_restarts += 1;
            tracing::warn!(snapshot = ?id, "snapshot download failed verification; restarting");
            d.position = 0;
            d.expect = None;
            d.finishing = false;
            return;
        }
        self.download = None;
        let installable = matches!(self.role, RoleState::Follower(_)) || !self.is_voter();
        let behind = id.offset <= self.high_watermark && !planted!(self.cfg, InstallOldSnapshot);
        if !installable || behind {
            // Became a candidate or leader meanwhile, or caught up otherwise: keep the log.
            self.snapshot = Some(self.snapshot.map_or(id, |s| s.max(id)));
            return;
        }
        self.stats.snapshots_installed += 1;
        tracing::info!(snapshot = ?id, "installing snapshot");
        let seq = self.log.reset(id);
        out.log.push(LogOp::Reset { seq, start: id });
        if voters.is_empty() {
            // A driver bug, not a peer's: never act on an empty set.
            tracing::error!(snapshot = ?id, "installed snapshot named no voters; keeping the bootstrap set");
            self.voter_history.reset(self.cfg.bootstrap_voters());
        } else {
            self.voter_history.reset(voters);
        }
        self.voters_changed(now, out);
        out.restore = Some(id);
        self.snapshot = Some(id);
        self.high_watermark = id.offset;
        out.committed = Some(id.offset);
        if let RoleState::Follower(f) = &mut self.role {
            f.next_fetch_at = now;
        }
    }

    /// Leaving for a role that never installs (leader): drop any download.
    pub(super) fn abandon_download(&mut self) {
        self.download = None;
    }
}
