//! Linearizable reads on any replica (decisions D6; protocol reference section 3).
//!
//! A read needs a *read offset*: the leader's high watermark taken after it has committed in its
//! epoch, confirmed by a round that starts after that moment. The leader raises a read barrier,
//! completes parked fetches at once so every follower sees it, and counts the barrier only when a
//! voter *echoes* it in a later Fetch: a fetch that merely arrives later may have left before a
//! newer election and proves nothing. Reads registered before a barrier share its round. The
//! reading replica then waits until it has applied through the read offset.
//!
//! Lease mode (opt-in) skips the round while the leader holds a lease. A voter's anchor is the
//! raise time of the newest barrier it echoed: the echo proves it received a fetch response sent
//! after that time, and reset its fetch timer then. The lease lasts until the anchor a majority
//! shares plus the fetch timeout, minus the drift margin. Sticky votes (D3) are what make the
//! lease sound: those voters refuse to help elect anyone else for a fetch timeout after such a
//! response. A fetch that merely arrives proves nothing (its response may have been lost).

use super::{Event, LeaderState, Outputs, Replica, RoleState};
use crate::message::{
    ErrorCode, ReadBarrier, ReadIndexRequest, ReadIndexResponse, Request, RequestId, Response,
};
use crate::types::{Instant, Offset, ReplicaId};

/// Identifies a read the driver asked for; chosen by the driver.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct ReadId(pub u64);

/// How a read is confirmed (sequential reads need no protocol step: the driver serves them from
/// the applied state).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum ReadMode {
    /// A read offset confirmed by a leadership round (the default).
    Linearizable,
    /// As linearizable, but the leader skips the round while it holds a lease.
    Lease,
}

/// Why a read could not be served.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadFailure {
    /// No leader was known before the deadline.
    #[error("no leader known before the read deadline")]
    NoLeader,
    /// The read offset was not confirmed and applied before the deadline; retriable.
    #[error("the read was not confirmed before its deadline")]
    Timeout,
    /// The replica is resigning or shutting down.
    #[error("shutting down")]
    ShuttingDown,
}

#[derive(Clone, Copy, Debug)]
pub(super) struct LocalRead {
    pub(super) id: ReadId,
    pub(super) mode: ReadMode,
    pub(super) deadline: Instant,
}

/// Who waits for a read offset on the leader.
#[cfg_attr(feature = "testing", derive(Clone))]
#[derive(Debug)]
pub(super) enum ReadSource {
    Local(LocalRead),
    Remote { from: ReplicaId, id: RequestId },
}

#[cfg_attr(feature = "testing", derive(Clone))]
#[derive(Debug)]
pub(super) struct LeaderRead {
    pub(super) source: ReadSource,
    pub(super) offset: Offset,
    /// The barrier whose echo by a majority confirms this read; none until one is raised.
    pub(super) barrier: Option<ReadBarrier>,
}

/// The reads of this replica, whatever its role.
#[cfg_attr(feature = "testing", derive(Clone))]
#[derive(Debug, Default)]
pub(super) struct Reads {
    /// Waiting for a read offset, not yet asked for.
    waiting: Vec<LocalRead>,
    /// Asked for in this ReadIndex request.
    in_flight: Option<(RequestId, Vec<LocalRead>)>,
    retry_at: Instant,
    /// Have a read offset; wait until applied through it.
    applying: Vec<(LocalRead, Offset)>,
}

impl Reads {
    /// No reads yet, none to retry before `now`. (A start time rather than time zero, so
    /// that replicas alike but for a shift of the clock are alike here too.)
    pub(super) fn starting_at(now: Instant) -> Reads {
        Reads {
            retry_at: now,
            ..Reads::default()
        }
    }
}

impl Replica {
    /// Registers a read of this replica's state machine. The outcome is an
    /// [`Event::ReadReady`] (serve once applied through its offset; it already is) or an
    /// [`Event::ReadFailed`].
    pub(super) fn read(&mut self, now: Instant, read: LocalRead, out: &mut Outputs) {
        if self.resigning {
            out.events.push(Event::ReadFailed {
                id: read.id,
                error: ReadFailure::ShuttingDown,
            });
            return;
        }
        if matches!(self.role, RoleState::Leader(_)) {
            self.leader_register_read(now, ReadSource::Local(read), read.mode, out);
        } else {
            self.reads.waiting.push(read);
        }
    }

    /// The leader's side of a read, local or from a ReadIndex request.
    fn leader_register_read(
        &mut self,
        now: Instant,
        source: ReadSource,
        mode: ReadMode,
        out: &mut Outputs,
    ) {
        let lease = mode == ReadMode::Lease && self.leader_holds_lease(now);
        let hwm = self.high_watermark;
        let RoleState::Leader(l) = &mut self.role else {
            return;
        };
        // Taken now or later is safe; only a read offset taken before the leader committed in
        // its epoch could miss acknowledged writes, so those reads wait for that (KAFKA-12619).
        if !l.established {
            l.unestablished_reads.push(source);
            return;
        }
        if lease {
            self.leader_confirm(source, hwm, out);
            return;
        }
        l.reads.push(LeaderRead {
            source,
            offset: hwm,
            barrier: None,
        });
    }

    /// Whether the leader may skip the round (D6 lease).
    pub(super) fn leader_holds_lease(&self, now: Instant) -> bool {
        if !self.cfg.lease_reads || self.resigning {
            return false;
        }
        let RoleState::Leader(l) = &self.role else {
            return false;
        };
        // A leader handing over must not outlive its role on a lease (D6): fall back to a round.
        if !l.established || l.transfer.is_some() {
            return false;
        }
        self.lease_end(l).is_some_and(|end| now < end)
    }

    fn lease_end(&self, l: &LeaderState) -> Option<Instant> {
        let me = self.cfg.id;
        let needed = self.confirmations_needed();
        if needed == 0 {
            return Some(Instant::NEVER);
        }
        let mut anchors: Vec<Instant> = l
            .voters
            .iter()
            .filter(|(id, _)| **id != me)
            .filter_map(|(_, p)| p.lease_anchor)
            .collect();
        anchors.sort_unstable_by(|a, b| b.cmp(a));
        let anchor = *anchors.get(needed - 1)?;
        let margin = self.cfg.lease_drift_margin;
        let margin = if planted!(self.cfg, LeaseWithoutDriftMargin) {
            std::time::Duration::ZERO
        } else {
            margin
        };
        let window = self.cfg.fetch_timeout.saturating_sub(margin);
        Some(anchor.plus(window))
    }

    fn leader_confirm(&mut self, source: ReadSource, offset: Offset, out: &mut Outputs) {
        match source {
            ReadSource::Local(read) => self.reads.applying.push((read, offset)),
            ReadSource::Remote { from, id } => {
                let resp = ReadIndexResponse {
                    error: None,
                    epoch: self.election.epoch,
                    leader: Some(self.cfg.id),
                    read_offset: Some(offset),
                };
                self.respond(from, id, Response::ReadIndex(resp), out);
            }
        }
    }

    pub(super) fn handle_read_index(
        &mut self,
        now: Instant,
        from: ReplicaId,
        id: RequestId,
        req: ReadIndexRequest,
        out: &mut Outputs,
    ) {
        let error = if req.replica != from || from == self.cfg.id {
            Some(ErrorCode::InvalidRequest)
        } else if req.epoch < self.election.epoch {
            Some(ErrorCode::FencedLeaderEpoch)
        } else if req.epoch > self.election.epoch {
            Some(ErrorCode::UnknownLeaderEpoch)
        } else if !matches!(self.role, RoleState::Leader(_)) || self.resigning {
            Some(ErrorCode::NotLeader)
        } else {
            None
        };
        if let Some(error) = error {
            let resp = ReadIndexResponse {
                error: Some(error),
                epoch: self.election.epoch,
                leader: self.known_leader(),
                read_offset: None,
            };
            self.respond(from, id, Response::ReadIndex(resp), out);
            return;
        }
        let mode = if req.lease {
            ReadMode::Lease
        } else {
            ReadMode::Linearizable
        };
        self.leader_register_read(now, ReadSource::Remote { from, id }, mode, out);
    }

    pub(super) fn handle_read_index_response(
        &mut self,
        now: Instant,
        id: RequestId,
        resp: ReadIndexResponse,
    ) {
        let Some((sent, reads)) = self.reads.in_flight.take() else {
            return;
        };
        if sent != id {
            self.reads.in_flight = Some((sent, reads));
            return;
        }
        match (resp.error, resp.read_offset) {
            (None, Some(offset)) => {
                self.reads
                    .applying
                    .extend(reads.into_iter().map(|r| (r, offset)));
            }
            _ => {
                // Not the leader (any more): retry with whichever leader we learn of, until the
                // reads' deadlines.
                self.reads.waiting.extend(reads);
                self.reads.retry_at = now.plus(self.cfg.retry_backoff);
            }
        }
    }

    pub(super) fn read_index_failed(&mut self, now: Instant, id: RequestId) {
        if let Some((sent, reads)) = self.reads.in_flight.take() {
            if sent == id {
                self.reads.waiting.extend(reads);
                self.reads.retry_at = now.plus(self.cfg.retry_backoff);
            } else {
                self.reads.in_flight = Some((sent, reads));
            }
        }
    }

    /// When leadership ends, pending reads fail over: local ones retry with the next leader,
    /// remote ones are refused so their replicas do the same.
    pub(super) fn leader_abandon_reads(&mut self, l: &mut LeaderState, out: &mut Outputs) {
        let sources = l
            .reads
            .drain(..)
            .map(|r| r.source)
            .chain(l.unestablished_reads.drain(..))
            .collect::<Vec<_>>();
        for source in sources {
            match source {
                ReadSource::Local(read) => self.reads.waiting.push(read),
                ReadSource::Remote { from, id } => {
                    let resp = ReadIndexResponse {
                        error: Some(ErrorCode::NotLeader),
                        epoch: self.election.epoch,
                        leader: None,
                        read_offset: None,
                    };
                    self.respond(from, id, Response::ReadIndex(resp), out);
                }
            }
        }
    }

    /// Called once the leader has committed in its epoch: reads that waited for it register.
    pub(super) fn leader_established(&mut self, now: Instant, out: &mut Outputs) {
        let RoleState::Leader(l) = &mut self.role else {
            return;
        };
        let waiting = std::mem::take(&mut l.unestablished_reads);
        for source in waiting {
            let mode = match &source {
                ReadSource::Local(r) => r.mode,
                ReadSource::Remote { .. } => ReadMode::Linearizable,
            };
            self.leader_register_read(now, source, mode, out);
        }
    }

    /// The leader's read duties each step: confirm reads whose barrier a majority has echoed,
    /// and start a round for reads that have none yet (completing parked fetches so followers
    /// see the barrier at once).
    ///
    /// At most one round is in flight: reads that arrive while one is pending wait for it to
    /// end and then share the next one. A barrier raised for every step that adds reads would
    /// be just as safe, but under load it makes one round (and one wave of fetch responses) per
    /// read instead of one per round trip.
    pub(super) fn leader_poll_reads(&mut self, now: Instant, out: &mut Outputs) {
        let me = self.cfg.id;
        let needed = self.confirmations_needed();
        let RoleState::Leader(l) = &mut self.role else {
            return;
        };
        let confirmed = if needed == 0 {
            l.read_barrier
        } else {
            let mut acked: Vec<ReadBarrier> = l
                .voters
                .iter()
                .filter(|(id, _)| **id != me)
                .map(|(_, p)| p.barrier_acked)
                .collect();
            acked.sort_unstable_by(|a, b| b.cmp(a));
            acked.get(needed - 1).copied().unwrap_or_default()
        };
        if l.reads
            .iter()
            .any(|r| r.barrier.is_some_and(|b| b <= confirmed))
        {
            let (done, waiting): (Vec<LeaderRead>, Vec<LeaderRead>) = std::mem::take(&mut l.reads)
                .into_iter()
                .partition(|r| r.barrier.is_some_and(|b| b <= confirmed));
            l.reads = waiting;
            for r in done {
                self.leader_confirm(r.source, r.offset, out);
            }
        }
        let RoleState::Leader(l) = &mut self.role else {
            return;
        };
        let round_in_flight = l.read_barrier > confirmed;
        // With leases, barriers are also raised periodically so that echoes keep renewing it.
        let lease_refresh = self.cfg.lease_reads
            && l.barrier_raised_at
                .back()
                .is_none_or(|(_, t)| now.since(*t) >= self.cfg.fetch_timeout / 4);
        let unassigned = l.reads.iter().any(|r| r.barrier.is_none());
        if round_in_flight || !(lease_refresh || unassigned) {
            return;
        }
        l.read_barrier = ReadBarrier(l.read_barrier.0 + 1);
        let barrier = l.read_barrier;
        l.barrier_raised_at.push_back((barrier, now));
        if l.barrier_raised_at.len() > 64 {
            l.barrier_raised_at.pop_front();
        }
        for r in l.reads.iter_mut().filter(|r| r.barrier.is_none()) {
            r.barrier = Some(barrier);
        }
        self.leader_complete_parked(now, false, out);
        if needed == 0 {
            // A single voter confirms its own barrier: no step would come to do it.
            self.leader_poll_reads(now, out);
        }
    }

    /// Every replica's read duties each step: expire, (re)send ReadIndex, release applied reads.
    pub(super) fn poll_reads(&mut self, now: Instant, out: &mut Outputs) {
        let leader_known = self.election.leader.is_some_and(|l| l != self.cfg.id);
        // Reads whose ReadIndex request was forgotten by a role change go back to waiting.
        if let Some((id, _)) = &self.reads.in_flight {
            if !self.in_flight.contains_key(id) {
                let (_, reads) = self.reads.in_flight.take().expect("checked just above");
                self.reads.waiting.extend(reads);
            }
        }
        let mut failed = Vec::new();
        self.reads.waiting.retain(|r| {
            if now >= r.deadline {
                let error = if leader_known {
                    ReadFailure::Timeout
                } else {
                    ReadFailure::NoLeader
                };
                failed.push((r.id, error));
                false
            } else {
                true
            }
        });
        if let Some((_, reads)) = &mut self.reads.in_flight {
            reads.retain(|r| {
                let expired = now >= r.deadline;
                if expired {
                    failed.push((r.id, ReadFailure::Timeout));
                }
                !expired
            });
        }
        let applied = self.applied;
        let mut ready = Vec::new();
        self.reads.applying.retain(|(r, offset)| {
            if applied >= *offset {
                ready.push((r.id, *offset));
                false
            } else if now >= r.deadline {
                failed.push((r.id, ReadFailure::Timeout));
                false
            } else {
                true
            }
        });
        for (id, offset) in ready {
            out.events.push(Event::ReadReady { id, offset });
        }
        for (id, error) in failed {
            out.events.push(Event::ReadFailed { id, error });
        }
        if self.reads.waiting.is_empty() {
            return;
        }
        if matches!(self.role, RoleState::Leader(_)) {
            for read in std::mem::take(&mut self.reads.waiting) {
                self.leader_register_read(now, ReadSource::Local(read), read.mode, out);
            }
            return;
        }
        let leader = match &self.role {
            RoleState::Follower(f) => Some(f.leader),
            _ => None,
        };
        let Some(leader) = leader else { return };
        if self.reads.in_flight.is_some() || now < self.reads.retry_at {
            return;
        }
        #[cfg(feature = "testing")]
        if self.cfg.test_unsafe_reads {
            // Negative control for the linearizability checker: serve at the local high
            // watermark without asking the leader. Never compiled into a release build.
            let hwm = self.high_watermark;
            for read in std::mem::take(&mut self.reads.waiting) {
                self.reads.applying.push((read, hwm));
            }
            return;
        }
        let reads = std::mem::take(&mut self.reads.waiting);
        let req = ReadIndexRequest {
            epoch: self.election.epoch,
            replica: self.cfg.id,
            read_count: reads.len() as u32,
            lease: reads.iter().all(|r| r.mode == ReadMode::Lease),
        };
        let id = self.send_request(leader, Request::ReadIndex(req), out);
        self.reads.in_flight = Some((id, reads));
    }

    /// When the replica next needs a tick for its reads.
    pub(super) fn reads_deadline(&self) -> Instant {
        let mut d = Instant::NEVER;
        for r in self
            .reads
            .waiting
            .iter()
            .chain(self.reads.applying.iter().map(|(r, _)| r))
        {
            d = d.min(r.deadline);
        }
        // A retry is due only when there is a leader to ask (or this replica leads).
        let can_ask = matches!(self.role, RoleState::Follower(_) | RoleState::Leader(_));
        if can_ask && !self.reads.waiting.is_empty() && self.reads.in_flight.is_none() {
            d = d.min(self.reads.retry_at);
        }
        if let Some((_, reads)) = &self.reads.in_flight {
            d = reads.iter().map(|r| r.deadline).fold(d, Instant::min);
        }
        d
    }
}
