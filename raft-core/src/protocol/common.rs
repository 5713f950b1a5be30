//! Plumbing every role shares: sending requests and answering them, holding messages until
//! the election state they depend on is durable (decisions D4), the persist-then-release cycle
//! of the election state, and KRaft's common response handling (`maybeHandleCommonResponse`),
//! which runs before any response-specific handler and frees a request's in-flight slot
//! whatever its outcome.

use super::{Event, Outgoing, Outputs, PersistSeq, Replica, RoleState};
use crate::message::{EpochResponse, ErrorCode, Request, RequestId, Response, RpcKind};
use crate::types::{ElectionState, Epoch, Instant, ReplicaId};

/// What KRaft's common response handling decided about a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CommonResponse {
    /// The response-specific handler runs.
    Handle,
    /// The response moved this replica to another role or epoch; the requests of the old role
    /// are forgotten with it.
    Transitioned,
    /// Stale (an older epoch) or contradicting this replica's leader: dropped. The request's
    /// in-flight slot is freed all the same.
    Dropped,
}

/// A request this replica sent and still expects an answer to.
#[derive(Debug, Clone)]
pub(super) struct InFlight {
    pub(super) to: ReplicaId,
    pub(super) kind: RpcKind,
}

impl Replica {
    pub(super) fn send_request(
        &mut self,
        to: ReplicaId,
        request: Request,
        out: &mut Outputs,
    ) -> RequestId {
        let id = RequestId(self.next_request);
        self.next_request += 1;
        self.in_flight.insert(
            id,
            InFlight {
                to,
                kind: request.kind(),
            },
        );
        self.emit(Outgoing::Request { to, id, request }, out);
        id
    }

    pub(super) fn respond(
        &mut self,
        to: ReplicaId,
        id: RequestId,
        response: Response,
        out: &mut Outputs,
    ) {
        if response.error().is_some() {
            self.stats.refused_requests += 1;
        }
        self.emit(
            Outgoing::Response {
                to,
                id,
                response,
                fill: None,
            },
            out,
        );
    }

    /// Sends now, or holds until the pending election state is durable (decisions D4).
    pub(super) fn emit(&mut self, msg: Outgoing, out: &mut Outputs) {
        if self.persisted_seq < self.persist_seq {
            self.held.push(msg);
        } else {
            out.messages.push(msg);
        }
    }

    pub(super) fn handle_election_persisted(&mut self, seq: PersistSeq, out: &mut Outputs) {
        assert!(
            seq <= self.persist_seq,
            "persisted a state that was never asked for"
        );
        self.persisted_seq = self.persisted_seq.max(seq);
        if self.persisted_seq == self.persist_seq {
            out.messages.append(&mut self.held);
            self.release(out);
        }
    }

    /// Changes the election state; it is released (and dependent messages sent) once durable.
    pub(super) fn set_election(&mut self, state: ElectionState, out: &mut Outputs) {
        assert!(state.epoch >= self.election.epoch, "epochs never decrease");
        if state.epoch == self.election.epoch && self.election.voted_for.is_some() {
            assert!(
                state.voted_for == self.election.voted_for,
                "a replica votes at most once per epoch"
            );
        }
        if state == self.election {
            return;
        }
        self.election = state;
        self.persist_seq = PersistSeq(self.persist_seq.0 + 1);
        out.persist = Some((self.persist_seq, state));
    }

    /// Publishes the current role and election state if nothing is waiting to become durable.
    pub(super) fn release(&mut self, out: &mut Outputs) {
        if self.persisted_seq < self.persist_seq {
            return;
        }
        let now = (self.role.role(), self.election);
        if now != self.released {
            self.released = now;
            out.events.push(Event::RoleChanged {
                role: now.0,
                epoch: now.1.epoch,
                leader: now.1.leader,
            });
        }
    }

    pub(super) fn epoch_response(&self, error: Option<ErrorCode>) -> EpochResponse {
        EpochResponse {
            error,
            epoch: self.election.epoch,
            leader: self.known_leader(),
        }
    }

    /// The leader of the current epoch as peers should learn it: a resigned leader no longer
    /// names itself.
    pub(super) fn known_leader(&self) -> Option<ReplicaId> {
        match &self.role {
            RoleState::Resigned(_) => None,
            _ => self.election.leader,
        }
    }

    /// Frees the in-flight slot of the current role's request `id` to `to` of this `kind`,
    /// which ended without a usable answer (it failed, or its response was dropped), and
    /// schedules the retry after the backoff.
    pub(super) fn request_ended(
        &mut self,
        now: Instant,
        to: ReplicaId,
        id: RequestId,
        kind: RpcKind,
    ) {
        let retry = now.plus(self.cfg.retry_backoff);
        match (&mut self.role, kind) {
            (RoleState::Prospective { tally, .. }, RpcKind::Vote)
            | (RoleState::Candidate { tally, .. }, RpcKind::Vote) => {
                tally.retry_at.insert(to, retry);
            }
            (RoleState::Follower(f), RpcKind::Fetch | RpcKind::FetchSnapshot) => {
                f.fetch_in_flight = false;
                f.next_fetch_at = retry;
            }
            (
                RoleState::Unattached {
                    probing, probe_at, ..
                },
                RpcKind::Fetch,
            ) => {
                *probing = false;
                *probe_at = retry;
            }
            (RoleState::Leader(l), RpcKind::BeginQuorumEpoch) => {
                l.begin_in_flight.remove(&to);
            }
            (RoleState::Resigned(r), RpcKind::EndQuorumEpoch) => {
                r.in_flight.remove(&to);
                r.retry_at = r.retry_at.min(retry);
            }
            (_, RpcKind::ReadIndex) => self.read_index_failed(now, id),
            _ => {}
        }
    }

    /// KRaft's `maybeHandleCommonResponse`: says whether the response-specific handler should
    /// still run, or why not.
    pub(super) fn maybe_transition_from_response(
        &mut self,
        now: Instant,
        from: ReplicaId,
        response: &Response,
        out: &mut Outputs,
    ) -> CommonResponse {
        let (epoch, leader) = response.epoch_and_leader();
        let me = self.cfg.id;
        if epoch > self.election.epoch {
            match leader {
                Some(l) if l != me => self.become_follower(now, epoch, l, out),
                _ => self.become_unattached(now, epoch, out),
            }
            return CommonResponse::Transitioned;
        }
        if epoch < self.election.epoch {
            // Stale, except that a vote refusal from a lagging voter still counts as a refusal.
            return if matches!(response, Response::Vote(_)) {
                CommonResponse::Handle
            } else {
                CommonResponse::Dropped
            };
        }
        if let Some(l) = leader {
            if l == me {
                if !matches!(self.role, RoleState::Leader(_) | RoleState::Resigned(_)) {
                    self.report_inconsistent(from, epoch, leader, out);
                }
                return CommonResponse::Handle;
            }
            match self.election.leader {
                None => {
                    // KRaft: a resigned replica must not follow itself, and never follows
                    // another in its own epoch (KAFKA-18379).
                    if matches!(self.role, RoleState::Resigned(_) | RoleState::Leader(_)) {
                        self.report_inconsistent(from, epoch, leader, out);
                        return CommonResponse::Dropped;
                    }
                    self.become_follower(now, epoch, l, out);
                    return if matches!(response, Response::Fetch(_) | Response::FetchSnapshot(_)) {
                        CommonResponse::Handle
                    } else {
                        CommonResponse::Transitioned
                    };
                }
                Some(known) if known != l => {
                    self.report_inconsistent(from, epoch, leader, out);
                    return CommonResponse::Dropped;
                }
                Some(_) => {}
            }
        }
        CommonResponse::Handle
    }

    pub(super) fn report_inconsistent(
        &mut self,
        from: ReplicaId,
        epoch: Epoch,
        claimed: Option<ReplicaId>,
        out: &mut Outputs,
    ) {
        self.stats.inconsistent_leaders += 1;
        tracing::error!(%from, %epoch, ?claimed, "peer contradicts this replica's leader");
        out.events.push(Event::InconsistentLeader {
            from,
            epoch,
            claimed,
        });
    }
}
