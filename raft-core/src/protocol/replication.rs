//! Pull replication (KIP-595, decisions D4): client proposals on the leader and its batch
//! accumulator; the leader's Fetch handling with long polls, diverging-epoch checks and the
//! high watermark; the follower's fetch loop, truncation and append; the leader's periodic
//! duties.

use bytes::Bytes;

use super::membership::{voter_records, VoterHistory};
use super::{
    Event, Fill, LeaderState, LogOp, Outgoing, Outputs, ParkedFetch, Progress, RecordRange,
    Replica, RoleState,
};
use crate::message::{
    ErrorCode, FetchRequest, FetchResponse, ReadBarrier, Request, RequestId, Response,
};
use crate::types::{Epoch, Instant, Offset, OffsetAndEpoch, Record, ReplicaId};

/// Why a proposal was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProposeError {
    /// Only the leader accepts proposals.
    #[error("not the leader (epoch {epoch}, leader {leader:?})")]
    NotLeader {
        /// This replica's epoch.
        epoch: Epoch,
        /// The leader it knows.
        leader: Option<ReplicaId>,
    },
    /// The leader has not yet committed in its epoch; retry shortly.
    #[error("the leader has not committed in its epoch yet")]
    NotReady,
    /// Too many proposals are pending.
    #[error("proposal queue is full ({max} pending)")]
    QueueFull {
        /// The configured bound.
        max: u32,
    },
    /// The payload is larger than allowed.
    #[error("payload of {len} bytes exceeds the limit of {max}")]
    TooLarge {
        /// The payload length.
        len: usize,
        /// The configured limit.
        max: u32,
    },
    /// The replica is resigning.
    #[error("shutting down")]
    ShuttingDown,
    /// The leader is handing leadership to `to`; retry with the new leader.
    #[error("leadership is being transferred to {to}")]
    Transferring {
        /// The transfer's target.
        to: ReplicaId,
    },
}

impl Replica {
    /// Accepts a client record on the leader and tells its `(offset, epoch)`. The record is
    /// appended with the current batch (see `append_linger`) and commits when the high watermark
    /// passes it, unless a leader change truncates it first.
    pub fn propose(
        &mut self,
        now: Instant,
        payload: Bytes,
        out: &mut Outputs,
    ) -> Result<OffsetAndEpoch, ProposeError> {
        if self.resigning {
            return Err(ProposeError::ShuttingDown);
        }
        let epoch = self.election.epoch;
        let max_payload = self.cfg.payload_bytes_max;
        let pending_max = self.cfg.pending_proposals_max;
        let linger = self.cfg.append_linger;
        let log_end = self.log.end;
        let hwm = self.high_watermark;
        let RoleState::Leader(l) = &mut self.role else {
            // A resigned leader does not name itself: it will not lead this epoch again.
            return Err(ProposeError::NotLeader {
                epoch,
                leader: self.known_leader(),
            });
        };
        if self.persisted_seq < self.persist_seq {
            return Err(ProposeError::NotReady);
        }
        if let Some(t) = l.transfer {
            return Err(ProposeError::Transferring { to: t.to });
        }
        if payload.len() > max_payload as usize {
            return Err(ProposeError::TooLarge {
                len: payload.len(),
                max: max_payload,
            });
        }
        let pending = (log_end.0 - hwm.0) + l.accumulator.len() as u64;
        if pending >= u64::from(pending_max) {
            return Err(ProposeError::QueueFull { max: pending_max });
        }
        let offset = log_end.plus(l.accumulator.len() as u64);
        l.accumulated_bytes += payload.len();
        l.accumulator.push(Record {
            offset,
            epoch,
            kind: crate::RecordKind::Data,
            payload,
        });
        if l.linger_deadline.is_none() {
            l.linger_deadline = Some(now.plus(linger));
        }
        if self.leader_batch_full() {
            self.leader_flush(now, out);
        }
        Ok(OffsetAndEpoch::new(offset, epoch))
    }

    fn fetch_error(&self, error: ErrorCode) -> FetchResponse {
        FetchResponse {
            error: Some(error),
            epoch: self.election.epoch,
            leader: self.known_leader(),
            high_watermark: None,
            diverging: None,
            records: Vec::new(),
            read_barrier: ReadBarrier::default(),
            snapshot: None,
        }
    }

    fn validate_fetch(&self, from: ReplicaId, req: &FetchRequest) -> Result<(), ErrorCode> {
        if req.replica != from || from == self.cfg.id {
            return Err(ErrorCode::InvalidRequest);
        }
        if req.epoch < self.election.epoch {
            return Err(ErrorCode::FencedLeaderEpoch);
        }
        if req.epoch > self.election.epoch {
            return Err(ErrorCode::UnknownLeaderEpoch);
        }
        if !matches!(self.role, RoleState::Leader(_)) {
            return Err(ErrorCode::NotLeader);
        }
        if req.last_fetched_epoch > req.epoch {
            return Err(ErrorCode::InvalidRequest);
        }
        // Any authenticated replica may fetch: one that is not a voter (or fetches with another
        // directory than its voter entry) is an observer, counting for neither the high
        // watermark nor check-quorum (KIP-853).
        Ok(())
    }

    pub(super) fn handle_fetch(
        &mut self,
        now: Instant,
        from: ReplicaId,
        id: RequestId,
        req: FetchRequest,
        out: &mut Outputs,
    ) {
        if let Err(code) = self.validate_fetch(from, &req) {
            let resp = self.fetch_error(code);
            self.respond(from, id, Response::Fetch(resp), out);
            return;
        }
        // KRaft's log validation (the pull form of AppendEntries' consistency check).
        let end = self.log.end_offset_for_epoch(req.last_fetched_epoch);
        let purged = self.log.start > Offset::ZERO
            && (req.fetch_offset < self.log.start || end.epoch == crate::Epoch::ZERO);
        if purged {
            // KIP-630: the records the fetcher needs (or needs to compare) are gone; it must
            // install the snapshot that replaced them.
            self.leader_record_contact(now, from, req.replica_directory);
            let resp = match self.snapshot {
                Some(id) => {
                    let mut resp = self.fetch_ok_response();
                    resp.snapshot = Some(id);
                    resp
                }
                None => self.fetch_error(ErrorCode::SnapshotNotFound),
            };
            self.respond(from, id, Response::Fetch(resp), out);
            return;
        }
        if end.epoch != req.last_fetched_epoch || end.offset < req.fetch_offset {
            let mut resp = self.fetch_ok_response();
            resp.diverging = Some(end);
            self.respond(from, id, Response::Fetch(resp), out);
            return;
        }
        self.leader_record_fetch(now, from, &req);
        self.leader_update_high_watermark(now, out);
        let exposed = self.exposed_high_watermark();
        let end = self.log.end;
        let RoleState::Leader(l) = &mut self.role else {
            return;
        };
        // One in-flight fetch per fetcher: a newer one supersedes a parked one.
        if let Some(pos) = l.parked.iter().position(|p| p.from == from) {
            let old = l.parked.swap_remove(pos);
            self.answer_fetch(old.from, old.id, old.fetch_offset, old.max_bytes, out);
        }
        let RoleState::Leader(l) = &mut self.role else {
            return;
        };
        let fetch = ParkedFetch {
            from,
            id,
            fetch_offset: req.fetch_offset,
            hwm_seen: req.high_watermark,
            barrier_seen: req.read_barrier,
            max_bytes: req.max_bytes,
            deadline: now.plus(req.max_wait.min(self.cfg.fetch_max_wait)),
        };
        // The same rule that later completes a parked fetch decides whether to park this one.
        if fetch_due(&fetch, now, end, exposed, l.read_barrier) {
            self.answer_fetch(from, id, req.fetch_offset, req.max_bytes, out);
        } else {
            l.parked.push(fetch);
        }
    }

    /// A valid fetch is an acknowledgement: everything below its offset is durable on the
    /// fetcher. It also counts as contact for check-quorum.
    fn leader_record_fetch(&mut self, now: Instant, from: ReplicaId, req: &FetchRequest) {
        self.leader_record_contact(now, from, req.replica_directory);
        let log_end = self.log.end;
        let RoleState::Leader(l) = &mut self.role else {
            return;
        };
        #[cfg(feature = "testing")]
        let newest_barrier = l.read_barrier;
        // A fetch that echoes barrier b proves its sender received a response sent after b was
        // raised: that raise time anchors the lease. A fetch that merely arrives proves nothing
        // (its previous response may have been lost and the request retried).
        let raised = l
            .barrier_raised_at
            .iter()
            .rev()
            .find(|(b, _)| *b <= req.read_barrier)
            .map(|(_, t)| *t);
        let stale = planted!(self.cfg, StaleProgressAcrossDirectories);
        let progress = leader_progress(l, &self.voter_history, from, req.replica_directory, stale);
        // Caught up: the fetch reached the log end as it is now or as it was at the previous
        // fetch (a steady stream of writes keeps the end moving). Adding a voter requires it.
        let reached = progress.end_at_fetch.map_or(log_end, |e| e.min(log_end));
        if req.fetch_offset >= reached {
            progress.caught_up_at = Some(now);
        }
        progress.end_at_fetch = Some(log_end);
        progress.end = Some(req.fetch_offset);
        progress.barrier_acked = progress.barrier_acked.max(req.read_barrier);
        #[cfg(feature = "testing")]
        if self.cfg.test_count_arrivals {
            // Negative control: the unsafe rule D6 forbids. Never compiled into a release build.
            progress.barrier_acked = newest_barrier;
        }
        if let Some(t) = raised {
            progress.lease_anchor = Some(progress.lease_anchor.map_or(t, |a| a.max(t)));
        }
    }

    /// A valid Fetch or FetchSnapshot from `from`: it counts as contact for check-quorum and
    /// for the BeginQuorumEpoch heartbeat, whatever it acknowledges.
    pub(super) fn leader_record_contact(
        &mut self,
        now: Instant,
        from: ReplicaId,
        directory: Option<crate::DirectoryId>,
    ) {
        let majority = self.majority();
        let counts_itself = usize::from(self.is_voter());
        let cq_timeout = self.cfg.check_quorum_timeout();
        let RoleState::Leader(l) = &mut self.role else {
            return;
        };
        let is_voter = self.voter_history.latest().is_voter(from, directory);
        let stale = planted!(self.cfg, StaleProgressAcrossDirectories);
        let progress = leader_progress(l, &self.voter_history, from, directory, stale);
        progress.last_fetch = Some(now);
        if is_voter {
            // KRaft: once a majority of distinct voters fetched (the leader counts itself when it
            // is in the set: KAFKA-16531), the check-quorum window restarts.
            l.check_quorum_contacts.insert(from);
            if l.check_quorum_contacts.len() + counts_itself >= majority {
                l.check_quorum_contacts.clear();
                l.check_quorum_deadline = now.plus(cq_timeout);
            }
        }
    }

    fn exposed_high_watermark(&self) -> Option<Offset> {
        match &self.role {
            RoleState::Leader(l) if l.established => Some(self.high_watermark),
            _ => None,
        }
    }

    fn fetch_ok_response(&self) -> FetchResponse {
        let barrier = match &self.role {
            RoleState::Leader(l) => l.read_barrier,
            _ => ReadBarrier::default(),
        };
        FetchResponse {
            error: None,
            epoch: self.election.epoch,
            leader: Some(self.cfg.id),
            high_watermark: self.exposed_high_watermark(),
            diverging: None,
            records: Vec::new(),
            read_barrier: barrier,
            snapshot: None,
        }
    }

    /// Answers a fetch with whatever the log holds from `fetch_offset` (the driver fills in the
    /// records from its log).
    fn answer_fetch(
        &mut self,
        to: ReplicaId,
        id: RequestId,
        fetch_offset: Offset,
        max_bytes: u32,
        out: &mut Outputs,
    ) {
        let mut response = self.fetch_ok_response();
        if fetch_offset < self.log.start {
            // A parked fetch whose records a snapshot purged meanwhile: it must install the
            // snapshot, as a fetch arriving now would be told.
            match self.snapshot {
                Some(id) => response.snapshot = Some(id),
                None => response = self.fetch_error(ErrorCode::SnapshotNotFound),
            }
            self.respond(to, id, Response::Fetch(response), out);
            return;
        }
        let records = (fetch_offset < self.log.end).then(|| RecordRange {
            from: fetch_offset,
            to: self.log.end,
            max_bytes: max_bytes.min(self.cfg.fetch_bytes_max).max(1),
        });
        self.emit(
            Outgoing::Response {
                to,
                id,
                response: Response::Fetch(response),
                fill: records.map(Fill::Records),
            },
            out,
        );
    }

    /// Completes parked fetches that have news (records, a newer high watermark, a pending read
    /// barrier) or whose wait expired; all of them when `all`.
    pub(super) fn leader_complete_parked(&mut self, now: Instant, all: bool, out: &mut Outputs) {
        let exposed = self.exposed_high_watermark();
        let end = self.log.end;
        let RoleState::Leader(l) = &mut self.role else {
            return;
        };
        let barrier = l.read_barrier;
        let mut due = Vec::new();
        l.parked.retain(|p| {
            if all || fetch_due(p, now, end, exposed, barrier) {
                due.push((p.from, p.id, p.fetch_offset, p.max_bytes));
                false
            } else {
                true
            }
        });
        for (from, id, offset, max_bytes) in due {
            self.answer_fetch(from, id, offset, max_bytes, out);
        }
    }

    /// Recomputes the high watermark: the majority-th largest durable voter offset, accepted
    /// only above the epoch start offset and only when it grows (decisions D4).
    pub(super) fn leader_update_high_watermark(&mut self, now: Instant, out: &mut Outputs) {
        let me = self.cfg.id;
        let majority = self.majority();
        let durable = if planted!(self.cfg, HwCountsUnsyncedLeader) {
            self.log.end
        } else {
            self.log.durable_end
        };
        let epoch_start_checked = !planted!(self.cfg, SkipEpochStartCheck);
        let RoleState::Leader(l) = &mut self.role else {
            return;
        };
        let end_of = |(id, p): (&ReplicaId, &Progress)| {
            if *id == me {
                durable
            } else {
                p.end.unwrap_or(Offset::ZERO)
            }
        };
        // The majority-th largest end: the largest end that at least `majority` voters have
        // reached. Voter sets are small, so counting beats collecting and sorting (this runs
        // on every fetch and every log sync, and allocated each time).
        let candidate = l
            .voters
            .iter()
            .map(end_of)
            .filter(|&e| l.voters.iter().map(end_of).filter(|&o| o >= e).count() >= majority)
            .max()
            .unwrap_or(Offset::ZERO);
        let above_start = candidate > l.epoch_start || !epoch_start_checked;
        if above_start
            && candidate > Offset::ZERO
            && (!l.established || candidate > self.high_watermark)
        {
            assert!(
                candidate >= self.high_watermark,
                "the high watermark never decreases"
            );
            let newly = !l.established;
            l.established = true;
            self.high_watermark = candidate;
            out.committed = Some(candidate);
            self.leader_complete_parked(now, true, out);
            if newly {
                self.leader_established(now, out);
            }
            self.leader_maybe_leave_after_removal(now, out);
        }
    }

    /// Appends the batch of accepted proposals to the log.
    pub(super) fn leader_flush(&mut self, now: Instant, out: &mut Outputs) {
        let RoleState::Leader(l) = &mut self.role else {
            return;
        };
        l.linger_deadline = None;
        if l.accumulator.is_empty() {
            return;
        }
        // The next batch is likely as large as this one: start it with the same capacity
        // rather than growing it from empty by doubling.
        let capacity = l.accumulator.len();
        let records = std::mem::replace(&mut l.accumulator, Vec::with_capacity(capacity));
        l.accumulated_bytes = 0;
        let sets = voter_records(&records).expect("the leader encodes its own voter sets");
        let seq = self.log.append(&records);
        out.log.push(LogOp::Append { seq, records });
        self.voters_appended(now, sets, out);
        self.leader_complete_parked(now, false, out);
        // A single voter commits on its own durability alone.
        self.leader_update_high_watermark(now, out);
    }

    /// Whether the batch reached a size limit and should be appended without lingering.
    pub(super) fn leader_batch_full(&self) -> bool {
        match &self.role {
            RoleState::Leader(l) => {
                l.accumulator.len() >= self.cfg.batch_records_max as usize
                    || l.accumulated_bytes >= self.cfg.batch_bytes_max as usize
            }
            _ => false,
        }
    }

    /// The leader's timers: check-quorum, batching, parked fetches, BeginQuorumEpoch resends.
    pub(super) fn leader_poll(&mut self, now: Instant, out: &mut Outputs) {
        let RoleState::Leader(l) = &self.role else {
            return;
        };
        if self.leader_checks_quorum() && now >= l.check_quorum_deadline {
            self.check_quorum_expired(now, out);
            return;
        }
        if l.linger_deadline.is_some_and(|d| now >= d) || self.leader_batch_full() {
            self.leader_flush(now, out);
        }
        self.leader_complete_parked(now, false, out);
        self.leader_send_begin_quorum(now, out);
    }

    /// KRaft uses BeginQuorumEpoch as a heartbeat to voters that are not fetching: sent at
    /// election and then every fetch timeout / 2 to voters that have not fetched for that long.
    fn leader_send_begin_quorum(&mut self, now: Instant, out: &mut Outputs) {
        let me = self.cfg.id;
        let epoch = self.election.epoch;
        let half = self.cfg.fetch_timeout / 2;
        let RoleState::Leader(l) = &mut self.role else {
            return;
        };
        if now < l.begin_quorum_next {
            return;
        }
        l.begin_quorum_next = now.plus(half);
        let targets: Vec<ReplicaId> = l
            .voters
            .iter()
            .filter(|(id, p)| {
                **id != me
                    && !l.begin_in_flight.contains(id)
                    && p.last_fetch.is_none_or(|t| now.since(t) >= half)
            })
            .map(|(id, _)| *id)
            .collect();
        l.begin_in_flight.extend(targets.iter().copied());
        for voter in targets {
            let req = crate::message::BeginQuorumEpochRequest {
                epoch,
                leader: me,
                voter,
                voter_directory: self
                    .voter_history
                    .latest()
                    .get(voter)
                    .and_then(|v| v.directory),
            };
            self.send_request(voter, Request::BeginQuorumEpoch(req), out);
        }
    }

    /// Called when leadership ends: parked fetches learn at once (KAFKA-10677) and the
    /// unappended batch is reported lost.
    pub(super) fn leader_abandon(&mut self, mut l: LeaderState, out: &mut Outputs) {
        for p in l.parked.drain(..) {
            let resp = self.fetch_error(ErrorCode::NotLeader);
            self.respond(p.from, p.id, Response::Fetch(resp), out);
        }
        if let Some(first) = l.accumulator.first() {
            out.events.push(Event::ProposalsDropped {
                epoch: first.epoch,
                from: first.offset,
            });
        }
    }

    // ----- follower side -----

    pub(super) fn follower_maybe_fetch(&mut self, now: Instant, out: &mut Outputs) {
        if !self.log.all_durable() && !planted!(self.cfg, AckUnsynced) {
            // D4: the fetch offset acknowledges durability, so wait for the log to sync.
            return;
        }
        if self.download.is_some() {
            self.follower_fetch_snapshot(now, out);
            return;
        }
        let me = self.cfg.id;
        let req = FetchRequest {
            epoch: self.election.epoch,
            replica: me,
            replica_directory: self.cfg.directory,
            fetch_offset: self.log.end,
            last_fetched_epoch: self.log.last_epoch(),
            high_watermark: Some(self.high_watermark),
            read_barrier: ReadBarrier::default(),
            max_wait: self.cfg.fetch_max_wait,
            max_bytes: self.cfg.fetch_bytes_max,
        };
        let RoleState::Follower(f) = &mut self.role else {
            return;
        };
        if f.fetch_in_flight || now < f.next_fetch_at {
            return;
        }
        f.fetch_in_flight = true;
        let to = f.leader;
        let req = FetchRequest {
            read_barrier: f.barrier_seen,
            ..req
        };
        self.send_request(to, Request::Fetch(req), out);
    }

    /// An observer without a leader asks a voter; any answer names the leader it knows.
    pub(super) fn observer_probe(&mut self, now: Instant, out: &mut Outputs) {
        let me = self.cfg.id;
        let voters: Vec<ReplicaId> = self.voters().ids().filter(|v| *v != me).collect();
        if voters.is_empty() {
            // Only this id is a voter, with another directory: nobody to ask.
            return;
        }
        let pick = voters[self.rng.below(voters.len() as u64) as usize];
        let req = FetchRequest {
            epoch: self.election.epoch,
            replica: self.cfg.id,
            replica_directory: self.cfg.directory,
            fetch_offset: self.log.end,
            last_fetched_epoch: self.log.last_epoch(),
            high_watermark: Some(self.high_watermark),
            read_barrier: ReadBarrier::default(),
            max_wait: std::time::Duration::ZERO,
            max_bytes: self.cfg.fetch_bytes_max,
        };
        let RoleState::Unattached {
            probe_at, probing, ..
        } = &mut self.role
        else {
            return;
        };
        if *probing || now < *probe_at {
            return;
        }
        *probing = true;
        self.send_request(pick, Request::Fetch(req), out);
    }

    pub(super) fn handle_fetch_response(
        &mut self,
        now: Instant,
        from: ReplicaId,
        mut resp: FetchResponse,
        out: &mut Outputs,
    ) {
        let retry = now.plus(self.cfg.retry_backoff);
        let probe_wait = now.plus(self.cfg.fetch_max_wait);
        let fetch_timeout = self.cfg.fetch_timeout;
        match &mut self.role {
            RoleState::Unattached {
                probing, probe_at, ..
            } => {
                *probing = false;
                *probe_at = probe_wait;
                return;
            }
            RoleState::Follower(f) if f.leader == from => {
                f.fetch_in_flight = false;
                if resp.error.is_some() {
                    f.next_fetch_at = retry;
                    return;
                }
                // The follower's liveness signal is a successful fetch response (KRaft).
                f.last_fetch_ok = Some(now);
                f.fetch_deadline = now.plus(fetch_timeout);
                f.barrier_seen = f.barrier_seen.max(resp.read_barrier);
                f.next_fetch_at = now;
            }
            _ => {
                self.stats.stale_responses += 1;
                return;
            }
        }
        if let Some(id) = resp.snapshot {
            self.follower_start_download(id);
            return;
        }
        if let Some(diverging) = resp.diverging {
            self.follower_truncate(now, diverging, out);
            return;
        }
        let records = std::mem::take(&mut resp.records);
        if !records.is_empty() && !self.follower_append(now, records, resp.epoch, out) {
            return;
        }
        if let Some(leader_hwm) = resp.high_watermark {
            let hwm = leader_hwm.min(self.log.end);
            if hwm > self.high_watermark {
                self.high_watermark = hwm;
                out.committed = Some(hwm);
            }
        }
    }

    /// KRaft's truncation on a diverging epoch: cut to where the leader's epoch ends, or where
    /// our largest epoch not above it ends, whichever is lower; the next fetch re-checks.
    fn follower_truncate(&mut self, now: Instant, diverging: OffsetAndEpoch, out: &mut Outputs) {
        let local = self.log.end_offset_for_epoch(diverging.epoch);
        let target = local.offset.min(diverging.offset).min(self.log.end);
        if target < self.high_watermark {
            // The leader would be asking us to drop committed records: never do that.
            self.stats.unsafe_truncations += 1;
            tracing::error!(%target, hwm = %self.high_watermark, "refusing to truncate committed records");
            return;
        }
        if target < self.log.end {
            let seq = self.log.truncate(target);
            out.log.push(LogOp::Truncate { seq, end: target });
            let before = self.voter_history.latest_offset();
            self.voter_history.truncate(target);
            if self.voter_history.latest_offset() != before {
                // The truncated suffix held a voter set: the one before it is in force again.
                self.voters_changed(now, out);
            }
        }
    }

    /// Appends fetched records after checking they continue our log; returns whether they did.
    fn follower_append(
        &mut self,
        now: Instant,
        records: Vec<Record>,
        leader_epoch: crate::Epoch,
        out: &mut Outputs,
    ) -> bool {
        if !records_continue(&records, self.log.end_and_epoch(), leader_epoch) {
            self.stats.bad_records += 1;
            return false;
        }
        let Ok(sets) = voter_records(&records) else {
            self.stats.bad_records += 1;
            return false;
        };
        let seq = self.log.append(&records);
        out.log.push(LogOp::Append { seq, records });
        self.voters_appended(now, sets, out);
        true
    }

    /// Whether check-quorum applies: on, and the leader is not the only voter (a one-voter
    /// set never expires: KAFKA-16144; a leader removing itself does need its followers).
    pub(super) fn leader_checks_quorum(&self) -> bool {
        let set = self.voters();
        self.cfg.check_quorum && !(set.len() == 1 && self.is_voter())
    }
}

/// Whether `records` are contiguous from `end`, with epochs that never decrease, are positive,
/// and do not exceed the leader's epoch.
fn records_continue(records: &[Record], end: OffsetAndEpoch, leader_epoch: crate::Epoch) -> bool {
    let mut expect = end.offset;
    let mut epoch = end.epoch;
    for r in records {
        if r.offset != expect || r.epoch < epoch || r.epoch > leader_epoch || r.epoch.0 == 0 {
            return false;
        }
        expect = expect.next();
        epoch = r.epoch;
    }
    true
}

/// The leader's progress entry for `(from, directory)`: its voter entry when the voter set in
/// force has that key, else its observer entry (created on first contact).
fn leader_progress<'a>(
    l: &'a mut LeaderState,
    history: &VoterHistory,
    from: ReplicaId,
    directory: Option<crate::DirectoryId>,
    planted_keep_stale: bool,
) -> &'a mut Progress {
    let set = history.latest();
    let progress = if set.is_voter(from, directory) {
        l.voters.get_mut(&from)
    } else {
        // The voter with this id but another directory has lost its disk (ids are unique to a
        // machine): what it acknowledged is gone with it, so its last fetch offset, barrier
        // echo and lease anchor stop counting for the high watermark, reads and leases. (The
        // high watermark already reached never goes back.)
        let keyed = set.get(from).is_some_and(|v| v.directory.is_some());
        if keyed && !planted_keep_stale {
            if let Some(lost) = l.voters.get_mut(&from) {
                let entry = lost.directory;
                *lost = Progress::default();
                lost.directory = entry;
                l.check_quorum_contacts.remove(&from);
            }
        }
        None
    };
    let progress = match progress {
        Some(p) => p,
        None => l.observers.entry(from).or_default(),
    };
    if progress.directory != directory {
        // Another directory under the same id is another replica (a wiped disk, or a static
        // voter's first fetch): nothing the old one acknowledged or caught up with is its.
        let fresh = progress.end.is_none() && progress.last_fetch.is_none();
        if !fresh && !planted_keep_stale {
            *progress = Progress::default();
        }
        progress.directory = directory;
    }
    progress
}

/// Whether a fetch is to be answered now: it has news (records past its offset, a high
/// watermark newer than it has seen, a read barrier it has not echoed) or its wait is over.
fn fetch_due(
    p: &ParkedFetch,
    now: Instant,
    end: Offset,
    exposed: Option<Offset>,
    barrier: ReadBarrier,
) -> bool {
    p.fetch_offset < end
        || exposed.is_some_and(|h| p.hwm_seen.is_none_or(|f| f < h))
        || p.barrier_seen < barrier
        || now >= p.deadline
}
