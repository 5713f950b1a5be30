//! Writes entering a replica that does not lead: the follower forwards one caller's writes to
//! the leader together, in one `Forward` RPC, and the leader's request handler proposes them in
//! order and answers when they committed. The core never sees a `Forward`.
//!
//! Both ends keep the outcome contract (see [`super::outcome`]): a forward that failed after it
//! may have reached the leader is unknown, never a refusal; the leader refuses a write only when
//! it was not proposed.

use super::outcome::{Committed, Uncertain, WriteError};
use super::replica_task::ReplicaTask;
use super::task_messages::{Command, Inbound};
use super::waiters::Reply;
use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

use crate::io::{RequestHandler, TransportError};
use crate::message::{ErrorCode, Request, Response};
use crate::message::{ForwardRequest, ForwardResponse, ForwardResult, WriteOrder};
use crate::protocol::ProposeError;
use crate::types::{Epoch, ReplicaId};

pub(super) struct Handler {
    pub(super) inbound: mpsc::Sender<Inbound>,
    pub(super) commands: mpsc::Sender<Command>,
}

impl Handler {
    /// Writes forwarded by another replica: propose them here, in order, and answer when each
    /// committed or why not.
    pub(super) async fn forwarded(&self, req: ForwardRequest) -> Response {
        let (writes, waits): (Vec<_>, Vec<_>) = req
            .payloads
            .into_iter()
            .map(|payload| {
                let (reply, rx) = oneshot::channel();
                ((payload, reply), rx)
            })
            .unzip();
        if self
            .commands
            .send(Command::Propose {
                writes,
                order: req.order,
                epoch: Some(req.epoch),
            })
            .await
            .is_err()
        {
            // Stopped before anything was proposed: a refusal the forwarder may retry.
            return Request::Forward(ForwardRequest {
                payloads: vec![],
                order: None,
                epoch: Epoch::ZERO,
            })
            .error_response(ErrorCode::ShuttingDown);
        }
        let mut resp = ForwardResponse {
            error: None,
            epoch: Epoch::ZERO,
            leader: None,
            results: Vec::with_capacity(waits.len()),
        };
        for rx in waits {
            // A dropped reply means the task ended with the write proposed.
            let result = rx
                .await
                .unwrap_or(Err(WriteError::Unknown(Uncertain::Stopped)));
            let r = forward_result(&mut resp, result);
            resp.results.push(r);
        }
        Response::Forward(resp)
    }
}

/// One write's fate on the leader, for the wire. Refusals also tell the forwarder the epoch and
/// leader this replica knows.
fn forward_result(
    resp: &mut ForwardResponse,
    result: Result<Committed, WriteError>,
) -> ForwardResult {
    let mut r = ForwardResult {
        error: None,
        committed: None,
        limit: 0,
        response: Bytes::new(),
    };
    match result {
        Ok(c) => {
            resp.epoch = resp.epoch.max(c.id.epoch);
            r.committed = Some(c.id);
            r.response = c.response;
        }
        Err(WriteError::Refused(ProposeError::NotLeader { epoch, leader })) => {
            r.error = Some(ErrorCode::NotLeader);
            resp.epoch = resp.epoch.max(epoch);
            resp.leader = leader;
        }
        Err(WriteError::Refused(ProposeError::QueueFull { max })) => {
            r.error = Some(ErrorCode::QueueFull);
            r.limit = max;
        }
        Err(WriteError::Refused(ProposeError::TooLarge { max, .. })) => {
            r.error = Some(ErrorCode::TooLarge);
            r.limit = max;
        }
        // Just elected: the forwarder's caller may retry at once, at the same leader.
        Err(WriteError::Refused(ProposeError::NotReady)) => r.error = Some(ErrorCode::NotReady),
        // Retriable refusals: the forwarder learns the new leader once it is known.
        Err(WriteError::Refused(_)) => r.error = Some(ErrorCode::NotLeader),
        Err(WriteError::Lost(id)) => {
            r.error = Some(ErrorCode::WriteLost);
            r.committed = Some(id);
        }
        Err(WriteError::Unknown(_)) => r.error = Some(ErrorCode::OutcomeUnknown),
        Err(WriteError::Superseded) => r.error = Some(ErrorCode::Superseded),
        // Only a forwarder reports this, and the leader does not forward: nothing was sent on,
        // so nothing was proposed.
        Err(WriteError::NotSent { .. }) => r.error = Some(ErrorCode::NotLeader),
    }
    r
}

#[async_trait::async_trait]
impl RequestHandler for Handler {
    async fn handle(&self, from: ReplicaId, request: Request) -> Response {
        let request = match request {
            Request::Forward(req) => return self.forwarded(req).await,
            other => other,
        };
        let (reply, rx) = oneshot::channel();
        let fallback = request.error_response(ErrorCode::ShuttingDown);
        if self
            .inbound
            .send(Inbound {
                from,
                request,
                reply,
            })
            .await
            .is_err()
        {
            return fallback;
        }
        rx.await.unwrap_or(fallback)
    }
}

/// The results of `count` writes forwarded to `leader`, from its answer.
pub(super) fn forwarded_results(
    leader: ReplicaId,
    count: usize,
    r: ForwardResponse,
    payload_lens: &[usize],
) -> Vec<Result<Committed, WriteError>> {
    // Refused as a whole: nothing was proposed. Codes other than a refusal's would be the
    // leader's bug; a refusal is only claimed when the code says so.
    let not_leader = WriteError::Refused(ProposeError::NotLeader {
        epoch: r.epoch,
        leader: r.leader,
    });
    if let Some(code) = r.error {
        let e = match code {
            ErrorCode::NotLeader | ErrorCode::ShuttingDown => not_leader,
            other => WriteError::Unknown(Uncertain::Forward {
                leader,
                reason: format!("the leader answered {other:?}"),
            }),
        };
        return vec![Err(e); count];
    }
    let mut out: Vec<_> = r
        .results
        .into_iter()
        .take(count)
        .enumerate()
        .map(|(i, res)| match (res.error, res.committed) {
            (None, Some(id)) => Ok(Committed {
                id,
                response: res.response,
            }),
            (Some(ErrorCode::WriteLost), Some(id)) => Err(WriteError::Lost(id)),
            (Some(ErrorCode::QueueFull), _) => Err(WriteError::Refused(ProposeError::QueueFull {
                max: res.limit,
            })),
            (Some(ErrorCode::TooLarge), _) => Err(WriteError::Refused(ProposeError::TooLarge {
                len: payload_lens.get(i).copied().unwrap_or(0),
                max: res.limit,
            })),
            // The replica does not lead; it names the leader it knows, if any. None (an
            // election or a leadership transfer under way) is "no leader known", which callers
            // retry; it must not fall back to naming the replica that just said it does not
            // lead.
            (Some(ErrorCode::NotLeader), _) => Err(not_leader.clone()),
            (Some(ErrorCode::NotReady), _) => Err(WriteError::Refused(ProposeError::NotReady)),
            (Some(ErrorCode::Superseded), _) => Err(WriteError::Superseded),
            (Some(ErrorCode::OutcomeUnknown), _) => {
                Err(WriteError::Unknown(Uncertain::LeaderStopped(leader)))
            }
            (error, committed) => Err(WriteError::Unknown(Uncertain::Forward {
                leader,
                reason: format!("odd answer: error {error:?}, committed {committed:?}"),
            })),
        })
        .collect();
    // An answer with too few results leaves the rest's fate unknown.
    while out.len() < count {
        out.push(Err(WriteError::Unknown(Uncertain::Forward {
            leader,
            reason: "the leader's answer left the write out".into(),
        })));
    }
    out
}

/// What a failed forward call means for its writes: a refusal only when the request provably
/// never left this replica.
fn forward_failed(leader: ReplicaId, e: &TransportError) -> WriteError {
    match e {
        TransportError::NotSent { reason, .. } => WriteError::NotSent {
            leader,
            reason: reason.clone(),
        },
        TransportError::UnknownPeer(_) | TransportError::Closed => {
            WriteError::Refused(ProposeError::NotLeader {
                epoch: Epoch::ZERO,
                leader: None,
            })
        }
        _ => WriteError::Unknown(Uncertain::Forward {
            leader,
            reason: e.to_string(),
        }),
    }
}

impl ReplicaTask {
    /// Writes of one caller on any replica: proposed here when this replica leads (or knows no
    /// leader, which the core refuses), otherwise forwarded together, in order, to the leader
    /// it knows.
    pub(super) fn write(&mut self, writes: Vec<(Bytes, Reply)>, order: Option<WriteOrder>) {
        let leader = self.replica.leader();
        let l = match leader {
            Some(l) if l != self.cfg.id => l,
            _ => {
                return self.command(Command::Propose {
                    writes,
                    order,
                    epoch: None,
                })
            }
        };
        // The epoch in which this replica knows `l` as leader: `l` proposes only in it.
        let epoch = self.replica.epoch();
        let transport = self.parts.transport.clone();
        let timeout = self.options.forward_timeout;
        let failure_refuses = self.options.test_forward_failure_refuses;
        tokio::spawn(tracing::Instrument::in_current_span(async move {
            let (payloads, replies): (Vec<Bytes>, Vec<Reply>) = writes.into_iter().unzip();
            let lens: Vec<usize> = payloads.iter().map(Bytes::len).collect();
            let count = payloads.len();
            let request = Request::Forward(ForwardRequest {
                payloads,
                order,
                epoch,
            });
            let results = match transport.call(l, request, timeout).await {
                Ok(Response::Forward(r)) => forwarded_results(l, count, r, &lens),
                Ok(other) => {
                    let e = WriteError::Unknown(Uncertain::Forward {
                        leader: l,
                        reason: format!("the leader answered a forward with {:?}", other.kind()),
                    });
                    vec![Err(e); count]
                }
                Err(e) => {
                    tracing::debug!(leader = %l, error = %e, "forwarding writes failed");
                    let e = if failure_refuses {
                        WriteError::Refused(ProposeError::NotLeader {
                            epoch: Epoch::ZERO,
                            leader: Some(l),
                        })
                    } else {
                        forward_failed(l, &e)
                    };
                    vec![Err(e); count]
                }
            };
            for (reply, result) in replies.into_iter().zip(results) {
                let _ = reply.send(result);
            }
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::OffsetAndEpoch;

    fn result(error: Option<ErrorCode>, committed: Option<OffsetAndEpoch>) -> ForwardResult {
        ForwardResult {
            error,
            committed,
            limit: 7,
            response: Bytes::new(),
        }
    }

    #[test]
    fn a_forward_refused_without_a_known_leader_names_no_leader() {
        // A leader handing over (or a replica that lost leadership and knows no successor)
        // answers NotLeader without a leader: the write must come back as "no leader known",
        // which the node retries, not as "the leader is the replica that refused".
        let refused = ForwardResponse {
            error: None,
            epoch: Epoch(3),
            leader: None,
            results: vec![result(Some(ErrorCode::NotLeader), None)],
        };
        assert_eq!(
            forwarded_results(ReplicaId(1), 1, refused.clone(), &[5]),
            vec![Err(WriteError::Refused(ProposeError::NotLeader {
                epoch: Epoch(3),
                leader: None
            }))]
        );
        let redirected = ForwardResponse {
            leader: Some(ReplicaId(2)),
            ..refused
        };
        assert_eq!(
            forwarded_results(ReplicaId(1), 1, redirected, &[5]),
            vec![Err(WriteError::Refused(ProposeError::NotLeader {
                epoch: Epoch(3),
                leader: Some(ReplicaId(2))
            }))]
        );
    }

    #[test]
    fn a_leader_not_yet_committed_in_its_epoch_is_retriable_at_that_leader() {
        // Just after an election the leader refuses writes until it has committed in its
        // epoch: the forwarder must learn "not ready" (the node retries at once), not "not the
        // leader", which named the leader itself and reached clients as TRYAGAIN.
        let early = ForwardResponse {
            error: None,
            epoch: Epoch(4),
            leader: Some(ReplicaId(1)),
            results: vec![result(Some(ErrorCode::NotReady), None)],
        };
        assert_eq!(
            forwarded_results(ReplicaId(1), 1, early, &[5]),
            vec![Err(WriteError::Refused(ProposeError::NotReady))]
        );
    }

    #[test]
    fn only_provable_refusals_come_back_as_refusals() {
        let l = ReplicaId(1);
        let id = OffsetAndEpoch::new(crate::types::Offset(4), Epoch(2));
        let answer = ForwardResponse {
            error: None,
            epoch: Epoch(2),
            leader: Some(l),
            results: vec![
                result(None, Some(id)),
                result(Some(ErrorCode::OutcomeUnknown), None),
                result(Some(ErrorCode::TooLarge), None),
                result(Some(ErrorCode::WriteLost), Some(id)),
            ],
        };
        let got = forwarded_results(l, 5, answer, &[1, 2, 3, 4, 5]);
        assert!(matches!(&got[0], Ok(c) if c.id == id));
        assert_eq!(
            got[1],
            Err(WriteError::Unknown(Uncertain::LeaderStopped(l)))
        );
        assert_eq!(
            got[2],
            Err(WriteError::Refused(ProposeError::TooLarge {
                len: 3,
                max: 7
            })),
            "the leader's limit and the write's length reach the caller"
        );
        assert_eq!(got[3], Err(WriteError::Lost(id)));
        assert!(
            matches!(&got[4], Err(WriteError::Unknown(Uncertain::Forward { .. }))),
            "a result the leader left out is unknown"
        );
        // Transport failures: only those that prove the request never left are refusals.
        assert!(forward_failed(l, &TransportError::Closed).is_definite_failure());
        assert!(!forward_failed(l, &TransportError::Timeout(l)).is_definite_failure());
        let cut = TransportError::Unreachable {
            peer: l,
            reason: "connection lost".into(),
        };
        assert!(!forward_failed(l, &cut).is_definite_failure());
        let never_connected = TransportError::NotSent {
            peer: l,
            reason: "connection refused".into(),
        };
        assert!(forward_failed(l, &never_connected).is_definite_failure());
        // A leader that stopped with the write pending says so, whole-request codes other than
        // a refusal are unknown.
        let stopped = ForwardResponse {
            error: Some(ErrorCode::InvalidRequest),
            epoch: Epoch::ZERO,
            leader: None,
            results: vec![],
        };
        assert!(!forwarded_results(l, 1, stopped, &[1])[0]
            .as_ref()
            .unwrap_err()
            .is_definite_failure());
    }
}
