//! Elections: Vote and pre-vote on both sides (KIP-996, decisions D2 and D3), the Prospective
//! and Candidate roles, BeginQuorumEpoch, and resignation with EndQuorumEpoch.

use std::collections::BTreeSet;
use std::time::Duration;

use bytes::Bytes;

use super::{LeaderState, LogOp, Outputs, Replica, ResignedState, RoleState, Tally};
use crate::message::{
    BeginQuorumEpochRequest, EndQuorumEpochRequest, EpochResponse, ErrorCode, ReadBarrier, Request,
    VoteRequest, VoteResponse,
};
use crate::types::{ElectionState, Epoch, Instant, Offset, Record, RecordKind, ReplicaId};

impl Replica {
    fn vote_response(&self, error: Option<ErrorCode>, granted: bool) -> VoteResponse {
        VoteResponse {
            error,
            epoch: self.election.epoch,
            leader: self.known_leader(),
            granted,
        }
    }

    /// A request addressed to this replica's key: no directory named (a static voter entry),
    /// or this replica's own.
    fn directory_matches(&self, directory: Option<crate::DirectoryId>) -> bool {
        directory.is_none() || directory == self.cfg.directory
    }

    /// Decisions D3: a voter that heard from a live leader within the fetch timeout does not
    /// help depose it, unless that leader invited the election.
    fn sticky_refuses(&self, now: Instant, req: &VoteRequest) -> bool {
        if !self.cfg.sticky_votes {
            return false;
        }
        // D3 with leases: a restarted voter forgot when it last heard from the leader, so it
        // honours any lease for one full fetch timeout before granting anything.
        if self.cfg.lease_reads && now.since(self.started_at) < self.cfg.fetch_timeout {
            return true;
        }
        if req.leader_invited && req.epoch == self.election.epoch.next() {
            return false;
        }
        match &self.role {
            RoleState::Leader(_) => true,
            RoleState::Follower(f) => {
                f.last_fetch_ok
                    .is_some_and(|t| now.since(t) < self.cfg.fetch_timeout)
                    && !planted!(self.cfg, VoteWhileLeaderLive)
            }
            _ => false,
        }
    }

    pub(super) fn handle_vote(
        &mut self,
        now: Instant,
        from: ReplicaId,
        req: VoteRequest,
        out: &mut Outputs,
    ) -> VoteResponse {
        if req.voter != self.cfg.id || !self.directory_matches(req.voter_directory) {
            return self.vote_response(Some(ErrorCode::WrongReceiver), false);
        }
        // Votes are not filtered by this replica's voter set (KIP-853): a candidate campaigns
        // with its own newest set, which may add or remove voters this replica has not heard
        // of yet; only the candidate's majority decides.
        if req.candidate != from {
            return self.vote_response(Some(ErrorCode::InvalidRequest), false);
        }
        // A candidate raised its epoch, so it holds no record of it; a pre-vote proposes an
        // epoch above its last record's too.
        if req.last.epoch >= req.epoch {
            return self.vote_response(Some(ErrorCode::InvalidRequest), false);
        }
        if req.epoch < self.election.epoch {
            return self.vote_response(Some(ErrorCode::FencedLeaderEpoch), false);
        }
        // A candidate already in a later epoch than this leader's (it won a pre-vote round,
        // then lost its candidacy) can never follow this epoch again, and when its voter set
        // is stale (its own removal not yet fetched) no BeginQuorumEpoch reaches it either: it
        // would stay leaderless for good. The leader steps down to the candidate's epoch, so
        // that the election of the next one takes it back. A pre-vote cannot cause this by
        // itself (it carries the candidate's epoch plus one; a candidate moved there durably).
        let candidate_epoch = if req.pre_vote {
            Epoch(req.epoch.0.saturating_sub(1))
        } else {
            req.epoch
        };
        let later = candidate_epoch > self.election.epoch;
        if matches!(self.role, RoleState::Leader(_))
            && later
            && !planted!(self.cfg, IgnoreLaterCandidates)
        {
            self.become_unattached(now, candidate_epoch, out);
        }
        let log_ok = req.last >= self.log.end_and_epoch();
        if req.pre_vote && !planted!(self.cfg, PrevoteChangesState) {
            // D2: a pre-vote never changes the receiver, whatever its answer.
            let granted =
                req.epoch > self.election.epoch && log_ok && !self.sticky_refuses(now, &req);
            return self.vote_response(None, granted);
        }
        if self.sticky_refuses(now, &req) {
            return self.vote_response(None, false);
        }
        if req.epoch > self.election.epoch {
            self.become_unattached(now, req.epoch, out);
        }
        let role_ok = matches!(
            self.role,
            RoleState::Unattached { .. } | RoleState::Prospective { .. }
        );
        // The vote binds the candidate's key: the same id with another directory is another
        // replica (a wiped disk), not the one this replica voted for.
        let vote_ok = match (self.election.voted_for, self.election.voted_directory) {
            (None, _) => true,
            (Some(v), None) => v == req.candidate,
            (Some(v), Some(d)) => v == req.candidate && req.candidate_directory == Some(d),
        };
        let granted = role_ok && vote_ok && self.election.leader.is_none() && log_ok;
        if granted && self.election.voted_for.is_none() {
            // The response is held until this vote is durable (KRaft: never grant before fsync).
            let state = ElectionState {
                voted_for: Some(req.candidate),
                voted_directory: req.candidate_directory,
                ..self.election
            };
            self.set_election(state, out);
            let timeout = self.election_timeout();
            if let RoleState::Unattached { deadline, .. } = &mut self.role {
                *deadline = now.plus(timeout);
            }
        }
        self.vote_response(None, granted)
    }

    /// Starts an election: a pre-vote round (Prospective) when pre-vote is on, else a candidacy.
    pub(super) fn start_election(&mut self, now: Instant, invited: bool, out: &mut Outputs) {
        if !self.may_campaign() || self.resigning {
            return;
        }
        if self.election.epoch.next() == self.election.epoch {
            tracing::error!("epoch space exhausted; this replica can no longer campaign");
            return;
        }
        self.stats.elections += 1;
        if !self.cfg.pre_vote {
            self.become_candidate(now, invited, out);
            return;
        }
        let leader = self.election.leader.filter(|l| *l != self.cfg.id);
        self.leave_role(now, out);
        let deadline = now.plus(self.election_timeout());
        let tally = self.new_tally(now, invited);
        self.role = RoleState::Prospective {
            deadline,
            tally,
            leader,
        };
        self.release(out);
        self.check_tally(now, out);
    }

    fn new_tally(&self, now: Instant, invited: bool) -> Tally {
        let me = self.cfg.id;
        // A replica outside its newest set (its removal is not committed yet) campaigns
        // without counting itself (Raft thesis 4.2.2).
        let own = self.is_voter().then_some(me);
        Tally {
            granted: own.into_iter().collect(),
            rejected: BTreeSet::new(),
            retry_at: self
                .voters()
                .ids()
                .filter(|v| *v != me)
                .map(|v| (v, now))
                .collect(),
            invited,
        }
    }

    fn become_candidate(&mut self, now: Instant, invited: bool, out: &mut Outputs) {
        let epoch = self.election.epoch.next();
        self.leave_role(now, out);
        let me = self.cfg.id;
        self.set_election(
            ElectionState {
                epoch,
                voted_for: Some(me),
                voted_directory: self.cfg.directory,
                leader: None,
            },
            out,
        );
        let deadline = now.plus(self.election_timeout());
        let tally = self.new_tally(now, invited);
        self.role = RoleState::Candidate { deadline, tally };
        self.release(out);
        self.check_tally(now, out);
    }

    /// Sends (or re-sends after a failure) vote requests to voters that have not answered.
    pub(super) fn send_vote_requests(&mut self, now: Instant, out: &mut Outputs) {
        let (pre_vote, tally) = match &mut self.role {
            RoleState::Prospective { tally, .. } => (true, tally),
            RoleState::Candidate { tally, .. } => (false, tally),
            _ => return,
        };
        let due: Vec<ReplicaId> = tally
            .retry_at
            .iter()
            .filter(|(_, t)| **t <= now)
            .map(|(v, _)| *v)
            .collect();
        for v in &due {
            tally.retry_at.remove(v);
        }
        let invited = tally.invited;
        let epoch = if pre_vote {
            self.election.epoch.next()
        } else {
            self.election.epoch
        };
        let last = self.log.end_and_epoch();
        for voter in due {
            let req = VoteRequest {
                epoch,
                candidate: self.cfg.id,
                voter,
                voter_directory: self.voters().get(voter).and_then(|v| v.directory),
                candidate_directory: self.cfg.directory,
                last,
                pre_vote,
                leader_invited: invited,
            };
            self.send_request(voter, Request::Vote(req), out);
        }
    }

    pub(super) fn handle_vote_response(
        &mut self,
        now: Instant,
        from: ReplicaId,
        resp: VoteResponse,
        out: &mut Outputs,
    ) {
        if !self.voters().contains_id(from) {
            return;
        }
        let my_epoch = self.election.epoch;
        let tally = match &mut self.role {
            RoleState::Prospective { tally, .. } => tally,
            // A standard vote is only meaningful in the candidate's own epoch.
            RoleState::Candidate { tally, .. } if resp.epoch == my_epoch || !resp.granted => tally,
            _ => return,
        };
        if resp.granted && resp.error.is_none() {
            tally.granted.insert(from);
        } else {
            tally.rejected.insert(from);
        }
        self.check_tally(now, out);
    }

    /// Moves an election forward once its outcome is decided.
    fn check_tally(&mut self, now: Instant, out: &mut Outputs) {
        let majority = self.majority();
        let voters = self.voters().len();
        let tally = match &self.role {
            RoleState::Prospective { tally, .. } | RoleState::Candidate { tally, .. } => tally,
            _ => return,
        };
        // The set may have changed since the campaign began (a snapshot installed, W10): only
        // answers from the set in force count, and the replica's own vote only while it is a
        // voter of that set.
        let stale = planted!(self.cfg, CountGrantsOutsideSet);
        let me = self.cfg.id;
        let counts = |id: &ReplicaId| {
            stale
                || if *id == me {
                    self.is_voter()
                } else {
                    self.voters().contains_id(*id)
                }
        };
        let granted = tally.granted.iter().filter(|id| counts(id)).count();
        let rejected = tally.rejected.iter().filter(|id| counts(id)).count();
        match &self.role {
            RoleState::Prospective { tally, .. } => {
                if granted >= majority {
                    let invited = tally.invited;
                    self.become_candidate(now, invited, out);
                } else if rejected > voters - majority {
                    self.prospective_lost(now, out);
                }
            }
            // A lost candidacy waits out its election timeout (KRaft), then tries again.
            RoleState::Candidate { .. } if granted >= majority => {
                self.become_leader(now, out);
            }
            _ => {}
        }
    }

    /// KRaft: a lost or timed-out pre-vote round goes back to following the leader it knew, or
    /// to Unattached in the same epoch.
    pub(super) fn prospective_lost(&mut self, now: Instant, out: &mut Outputs) {
        let epoch = self.election.epoch;
        let leader = match &self.role {
            RoleState::Prospective { leader, .. } => *leader,
            _ => None,
        };
        match leader {
            Some(l) => self.become_follower(now, epoch, l, out),
            None => self.become_unattached(now, epoch, out),
        }
    }

    fn become_leader(&mut self, now: Instant, out: &mut Outputs) {
        let me = self.cfg.id;
        let epoch = self.election.epoch;
        self.leave_role(now, out);
        self.set_election(
            ElectionState {
                epoch,
                voted_for: Some(me),
                voted_directory: self.cfg.directory,
                leader: Some(me),
            },
            out,
        );
        // KAFKA-12619: the leader appends a control record at its epoch start; once it commits,
        // the leader has committed in its own epoch and may expose a high watermark.
        let epoch_start = self.log.end;
        let record = Record {
            offset: epoch_start,
            epoch,
            kind: RecordKind::LeaderChange,
            payload: Bytes::new(),
        };
        let mut records = vec![record];
        // KAFKA-16532: the first leader of a cluster bootstrapped with directory ids copies the
        // bootstrap set into the log, so that every replica learns it from the log rather than
        // from a configuration that may say less (a static list knows no directories).
        let bootstrap = self.voter_history.latest();
        // A snapshot at offset 0 covers no record: it only carries the formatted set.
        let unlogged = self.voter_history.latest_offset().is_none()
            && self.snapshot.is_none_or(|s| s.offset == Offset::ZERO);
        if unlogged && bootstrap.iter().any(|(_, v)| v.directory.is_some()) {
            let mut payload = bytes::BytesMut::new();
            crate::codec::encode_voters(bootstrap, &mut payload);
            records.push(Record {
                offset: epoch_start.next(),
                epoch,
                kind: RecordKind::Voters,
                payload: payload.freeze(),
            });
        }
        let sets = super::membership::voter_records(&records).expect("encoded just above");
        let seq = self.log.append(&records);
        out.log.push(LogOp::Append { seq, records });
        let voters = self
            .voters()
            .iter()
            .map(|(id, v)| {
                let progress = super::roles::Progress {
                    directory: v.directory,
                    ..Default::default()
                };
                (id, progress)
            })
            .collect();
        let observers = self
            .cfg
            .observers
            .iter()
            .map(|v| (*v, Default::default()))
            .collect();
        // A leader never installs a snapshot: its log is the one others catch up with.
        self.abandon_download();
        self.role = RoleState::Leader(Box::new(LeaderState {
            epoch_start,
            established: false,
            voters,
            observers,
            check_quorum_contacts: BTreeSet::new(),
            check_quorum_deadline: now.plus(self.cfg.check_quorum_timeout()),
            begin_quorum_next: now,
            begin_in_flight: BTreeSet::new(),
            parked: Vec::new(),
            accumulator: Vec::new(),
            accumulated_bytes: 0,
            linger_deadline: None,
            read_barrier: ReadBarrier::default(),
            reads: Vec::new(),
            unestablished_reads: Vec::new(),
            barrier_raised_at: std::collections::VecDeque::new(),
            transfer: None,
        }));
        self.voters_appended(now, sets, out);
        tracing::info!(replica = %me, %epoch, %epoch_start, "elected leader");
        self.release(out);
        self.leader_update_high_watermark(now, out);
    }

    pub(super) fn handle_begin_quorum_epoch(
        &mut self,
        now: Instant,
        from: ReplicaId,
        req: BeginQuorumEpochRequest,
        out: &mut Outputs,
    ) -> EpochResponse {
        if req.voter != self.cfg.id || !self.directory_matches(req.voter_directory) {
            return self.epoch_response(Some(ErrorCode::WrongReceiver));
        }
        // The leader may lead with a voter set this replica has not fetched yet.
        if req.leader != from {
            return self.epoch_response(Some(ErrorCode::InvalidRequest));
        }
        if req.epoch < self.election.epoch {
            return self.epoch_response(Some(ErrorCode::FencedLeaderEpoch));
        }
        if req.epoch > self.election.epoch {
            self.become_follower(now, req.epoch, req.leader, out);
            return self.epoch_response(None);
        }
        match self.election.leader {
            Some(l) if l != req.leader => {
                self.report_inconsistent(from, req.epoch, Some(req.leader), out);
                return self.epoch_response(Some(ErrorCode::InvalidRequest));
            }
            Some(_) if matches!(self.role, RoleState::Follower(_)) => {}
            _ if matches!(self.role, RoleState::Leader(_) | RoleState::Resigned(_)) => {
                self.report_inconsistent(from, req.epoch, Some(req.leader), out);
                return self.epoch_response(Some(ErrorCode::InvalidRequest));
            }
            _ => self.become_follower(now, req.epoch, req.leader, out),
        }
        self.epoch_response(None)
    }

    pub(super) fn handle_end_quorum_epoch(
        &mut self,
        now: Instant,
        from: ReplicaId,
        req: EndQuorumEpochRequest,
        out: &mut Outputs,
    ) -> EpochResponse {
        if req.leader != from {
            return self.epoch_response(Some(ErrorCode::InvalidRequest));
        }
        if req.epoch < self.election.epoch {
            return self.epoch_response(Some(ErrorCode::FencedLeaderEpoch));
        }
        if req.epoch > self.election.epoch {
            self.become_follower(now, req.epoch, req.leader, out);
        }
        let backoff = self.end_quorum_backoff(&req.preferred_successors);
        if let RoleState::Follower(f) = &mut self.role {
            if f.leader == req.leader {
                f.fetch_deadline = f.fetch_deadline.min(now.plus(backoff));
                f.invited = true;
            }
        }
        self.epoch_response(None)
    }

    /// KRaft's strict exponential backoff by position among the preferred successors: the first
    /// starts at once, later ones wait longer, unlisted ones wait the maximum.
    fn end_quorum_backoff(&self, successors: &[ReplicaId]) -> Duration {
        let max = self.cfg.election_backoff_max;
        match successors.iter().position(|s| *s == self.cfg.id) {
            Some(0) => Duration::ZERO,
            Some(p) => {
                let n = successors.len() as u32;
                let unit = max
                    .checked_div(1 << (n - 1).min(30))
                    .unwrap_or(Duration::ZERO);
                (unit * (1 << (p as u32 - 1).min(30))).min(max)
            }
            None => max,
        }
    }

    /// Graceful resignation (shutdown): the leader hands over; others just stop campaigning.
    pub(super) fn resign(&mut self, now: Instant, out: &mut Outputs) {
        if self.resigning {
            return;
        }
        self.resigning = true;
        if matches!(self.role, RoleState::Leader(_)) {
            self.leader_resign(now, out);
        }
    }

    /// Leader -> Resigned, with preferred successors by descending fetch offset (KRaft).
    pub(super) fn leader_resign(&mut self, now: Instant, out: &mut Outputs) {
        self.leader_resign_to(now, None, out);
    }

    /// Leader -> Resigned; `first`, when given, heads the preferred successors (a transfer's
    /// target), the others follow by descending fetch offset.
    pub(super) fn leader_resign_to(
        &mut self,
        now: Instant,
        first: Option<ReplicaId>,
        out: &mut Outputs,
    ) {
        let me = self.cfg.id;
        let mut successors: Vec<(Option<crate::Offset>, ReplicaId)> = match &self.role {
            RoleState::Leader(l) => l
                .voters
                .iter()
                .filter(|(id, _)| **id != me)
                .map(|(id, p)| (p.end, *id))
                .collect(),
            _ => return,
        };
        successors.sort_by(|a, b| {
            let chosen = |s: &(Option<crate::Offset>, ReplicaId)| Some(s.1) == first;
            chosen(b)
                .cmp(&chosen(a))
                .then(b.0.cmp(&a.0))
                .then(a.1.cmp(&b.1))
        });
        self.leave_role(now, out);
        let deadline = now.plus(self.election_timeout());
        self.role = RoleState::Resigned(ResignedState {
            deadline,
            successors: successors.into_iter().map(|(_, id)| id).collect(),
            acked: BTreeSet::new(),
            in_flight: BTreeSet::new(),
            retry_at: now,
        });
        tracing::info!(replica = %me, epoch = %self.election.epoch, "resigned");
        self.release(out);
        self.resigned_send_end_quorum(now, out);
    }

    pub(super) fn resigned_send_end_quorum(&mut self, now: Instant, out: &mut Outputs) {
        let me = self.cfg.id;
        let epoch = self.election.epoch;
        let RoleState::Resigned(r) = &mut self.role else {
            return;
        };
        if r.retry_at > now {
            return;
        }
        r.retry_at = Instant::NEVER;
        let targets: Vec<ReplicaId> = self
            .voter_history
            .latest()
            .ids()
            .filter(|v| *v != me && !r.acked.contains(v) && !r.in_flight.contains(v))
            .collect();
        r.in_flight.extend(targets.iter().copied());
        let successors = r.successors.clone();
        for to in targets {
            let req = EndQuorumEpochRequest {
                epoch,
                leader: me,
                preferred_successors: successors.clone(),
            };
            self.send_request(to, Request::EndQuorumEpoch(req), out);
        }
    }

    /// Leaves the leader role because check-quorum expired (D5).
    pub(super) fn check_quorum_expired(&mut self, now: Instant, out: &mut Outputs) {
        tracing::warn!(replica = %self.cfg.id, epoch = %self.election.epoch,
            "no fetches from a majority within the check-quorum window; resigning");
        self.leader_resign(now, out);
    }
}
