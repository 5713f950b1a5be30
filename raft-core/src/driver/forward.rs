//! Writes entering a replica that does not lead: the follower forwards them to the leader with
//! the `Forward` RPC, and the leader's request handler proposes them and answers when they
//! committed. The core never sees a `Forward`.

use super::outcome::{Committed, WriteError};
use super::replica_task::ReplicaTask;
use super::task_messages::{Command, Inbound};
use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

use crate::io::RequestHandler;
use crate::message::{ErrorCode, Request, Response};
use crate::message::{ForwardRequest, ForwardResponse};
use crate::protocol::ProposeError;
use crate::types::{Epoch, ReplicaId};

pub(super) struct Handler {
    pub(super) inbound: mpsc::Sender<Inbound>,
    pub(super) commands: mpsc::Sender<Command>,
}

impl Handler {
    /// A write forwarded by another replica: propose it here and answer when it committed.
    pub(super) async fn forwarded(&self, req: ForwardRequest) -> Response {
        let (reply, rx) = oneshot::channel();
        let cmd = Command::Propose {
            payload: req.payload,
            reply,
        };
        let result = match self.commands.send(cmd).await {
            Ok(()) => rx.await.unwrap_or(Err(WriteError::ShuttingDown)),
            Err(_) => Err(WriteError::ShuttingDown),
        };
        let mut resp = ForwardResponse {
            error: None,
            epoch: Epoch::ZERO,
            leader: None,
            committed: None,
            response: Bytes::new(),
        };
        match result {
            Ok(c) => {
                resp.epoch = c.id.epoch;
                resp.committed = Some(c.id);
                resp.response = c.response;
            }
            Err(WriteError::Refused(ProposeError::NotLeader { epoch, leader })) => {
                resp.error = Some(ErrorCode::NotLeader);
                resp.epoch = epoch;
                resp.leader = leader;
            }
            Err(WriteError::Refused(ProposeError::QueueFull { .. })) => {
                resp.error = Some(ErrorCode::QueueFull)
            }
            Err(WriteError::Refused(ProposeError::TooLarge { .. })) => {
                resp.error = Some(ErrorCode::TooLarge)
            }
            Err(WriteError::Refused(ProposeError::Transferring { .. })) => {
                // Retriable: the forwarder learns the new leader once the handover is done.
                resp.error = Some(ErrorCode::NotLeader);
            }
            Err(WriteError::Lost(id)) => {
                resp.error = Some(ErrorCode::WriteLost);
                resp.committed = Some(id);
            }
            Err(_) => resp.error = Some(ErrorCode::ShuttingDown),
        }
        Response::Forward(resp)
    }
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

pub(super) fn forwarded_result(
    leader: ReplicaId,
    r: ForwardResponse,
) -> Result<Committed, WriteError> {
    match (r.error, r.committed) {
        (None, Some(id)) => Ok(Committed {
            id,
            response: r.response,
        }),
        (Some(ErrorCode::WriteLost), Some(id)) => Err(WriteError::Lost(id)),
        (Some(ErrorCode::QueueFull), _) => {
            Err(WriteError::Refused(ProposeError::QueueFull { max: 0 }))
        }
        (Some(ErrorCode::TooLarge), _) => Err(WriteError::Refused(ProposeError::TooLarge {
            len: 0,
            max: 0,
        })),
        // The replica no longer leads; it names the leader it knows, if any. None (an election
        // or a leadership transfer under way) is "no leader known", which callers retry; it
        // must not fall back to naming the replica that just said it does not lead.
        (Some(ErrorCode::NotLeader), _) => Err(WriteError::Refused(ProposeError::NotLeader {
            epoch: r.epoch,
            leader: r.leader,
        })),
        _ => Err(WriteError::Refused(ProposeError::NotLeader {
            epoch: r.epoch,
            leader: r.leader.or(Some(leader)),
        })),
    }
}

impl ReplicaTask {
    /// A write on any replica: proposed here when this replica leads (or knows no leader, which
    /// the core refuses), otherwise forwarded to the leader it knows.
    pub(super) fn write(
        &mut self,
        payload: Bytes,
        reply: oneshot::Sender<Result<Committed, WriteError>>,
    ) {
        let leader = self.replica.leader();
        match leader {
            Some(l) if l != self.cfg.id => {
                let transport = self.parts.transport.clone();
                let timeout = self.cfg.request_timeout;
                tokio::spawn(async move {
                    let request = Request::Forward(ForwardRequest { payload });
                    let result = match transport.call(l, request, timeout).await {
                        Ok(Response::Forward(r)) => forwarded_result(l, r),
                        Ok(_) => Err(WriteError::Failed("leader answered a forward oddly".into())),
                        Err(e) => {
                            tracing::debug!(leader = %l, error = %e, "forwarding a write failed");
                            Err(WriteError::Refused(ProposeError::NotLeader {
                                epoch: Epoch::ZERO,
                                leader: Some(l),
                            }))
                        }
                    };
                    let _ = reply.send(result);
                });
            }
            _ => self.command(Command::Propose { payload, reply }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_forward_refused_without_a_known_leader_names_no_leader() {
        // A leader handing over (or a replica that lost leadership and knows no successor)
        // answers NotLeader without a leader: the write must come back as "no leader known",
        // which the node retries, not as "the leader is the replica that refused".
        let refused = ForwardResponse {
            error: Some(ErrorCode::NotLeader),
            epoch: Epoch(3),
            leader: None,
            committed: None,
            response: Bytes::new(),
        };
        assert_eq!(
            forwarded_result(ReplicaId(1), refused.clone()),
            Err(WriteError::Refused(ProposeError::NotLeader {
                epoch: Epoch(3),
                leader: None
            }))
        );
        let redirected = ForwardResponse {
            leader: Some(ReplicaId(2)),
            ..refused
        };
        assert_eq!(
            forwarded_result(ReplicaId(1), redirected),
            Err(WriteError::Refused(ProposeError::NotLeader {
                epoch: Epoch(3),
                leader: Some(ReplicaId(2))
            }))
        );
    }
}
