//! Panics in the node's tasks. Storage, transport and state machine calls run the embedder's
//! code, and one of them may panic. A task that panics ends without reporting its completion, and
//! the replica would wait for it forever: writes never answered, a follower that never fetches
//! again, a snapshot never taken again. So every task that reports a completion to the replica
//! task reports its panic instead, and the replica task stops on it as on a storage error:
//! pending writes are answered as unknown and the transport closes. A panic of the replica task
//! itself closes the transport too, so its peers see a crashed replica rather than one that
//! answers every request with "shutting down".

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures_util::FutureExt;
use tokio::sync::{mpsc, watch};

use super::task_messages::Done;
use super::StopCause;
use tracing::Instrument;

use crate::io::Transport;
use crate::types::ReplicaId;

/// Spawns `task`, one of the replica task's helpers (named by `what`, for the log); if it
/// panics, the replica task is told by a [`Done::Panicked`] on `done`.
pub(super) fn spawn_reporting<F>(
    what: &'static str,
    done: mpsc::Sender<Done>,
    task: F,
) -> tokio::task::JoinHandle<()>
where
    F: Future<Output = ()> + Send + 'static,
{
    // In the span of whoever spawns it (the node's, `DriverOptions::span`), so that its log
    // lines name the node's group on a host of many.
    tokio::spawn(
        async move {
            // Unwind safety: the task's state is dropped with it, and the replica task it
            // reports to stops on the report, so no half-updated state is ever used again.
            if let Err(panic) = AssertUnwindSafe(task).catch_unwind().await {
                let reason = format!("the {what} panicked: {}", panic_message(&*panic));
                tracing::error!(reason, "a task of the node panicked; stopping");
                let _ = done.send(Done::Panicked(reason)).await;
            }
        }
        .in_current_span(),
    )
}

/// Spawns the replica task `run`, and publishes why it ended on `stopped`; if it panics,
/// closes `transport` first.
pub(super) fn spawn_replica<F>(
    id: ReplicaId,
    transport: Arc<dyn Transport>,
    stopped: watch::Sender<Option<StopCause>>,
    run: F,
) where
    F: Future<Output = StopCause> + Send + 'static,
{
    tokio::spawn(
        async move {
            let cause = match AssertUnwindSafe(run).catch_unwind().await {
                Ok(cause) => cause,
                Err(panic) => {
                    let reason = format!("the replica task panicked: {}", panic_message(&*panic));
                    tracing::error!(replica = %id, reason, "closing its transport");
                    transport.close().await;
                    StopCause::Failed(reason)
                }
            };
            stopped.send_replace(Some(cause));
        }
        .in_current_span(),
    );
}

/// The text a panic carries, when it is a string (as `panic!` and `assert!` make it).
fn panic_message(panic: &(dyn Any + Send)) -> &str {
    if let Some(s) = panic.downcast_ref::<&'static str>() {
        s
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s
    } else {
        "a panic without a message"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mem::transport::MemNetwork;
    use crate::message::{Request, VoteRequest};
    use crate::types::{Epoch, OffsetAndEpoch};
    use std::time::Duration;

    const BOUND: Duration = Duration::from_secs(10);

    fn vote(candidate: ReplicaId, voter: ReplicaId) -> Request {
        Request::Vote(VoteRequest {
            epoch: Epoch(1),
            candidate,
            voter,
            voter_directory: None,
            candidate_directory: None,
            last: OffsetAndEpoch::default(),
            pre_vote: true,
            leader_invited: false,
        })
    }

    #[tokio::test]
    async fn a_helper_that_panics_is_reported_with_its_message_and_one_that_ends_is_not() {
        let (done, mut reports) = mpsc::channel(4);
        spawn_reporting("log writer", done.clone(), async {});
        spawn_reporting("applier", done.clone(), async {
            tokio::task::yield_now().await;
            panic!("applied past the end");
        });
        drop(done);
        let report = tokio::time::timeout(BOUND, reports.recv())
            .await
            .expect("the panic is reported in time");
        match report {
            Some(Done::Panicked(reason)) => {
                assert_eq!(reason, "the applier panicked: applied past the end");
            }
            Some(_) => panic!("expected a panic report"),
            None => panic!("the panic was not reported"),
        }
        // Both senders are gone once both tasks ended: nothing else was reported.
        let rest = tokio::time::timeout(BOUND, reports.recv())
            .await
            .expect("both tasks end in time");
        assert!(rest.is_none(), "the task that ended reported something");
    }

    #[tokio::test]
    async fn a_replica_task_that_panics_closes_its_transport_and_both_say_why_they_ended() {
        let net = MemNetwork::new();
        let (a, b, c) = (ReplicaId(1), ReplicaId(2), ReplicaId(3));
        let (ea, eb): (Arc<dyn Transport>, Arc<dyn Transport>) =
            (Arc::new(net.endpoint(a)), Arc::new(net.endpoint(b)));
        let ec: Arc<dyn Transport> = Arc::new(net.endpoint(c));
        let (a_stopped, mut a_cause) = watch::channel(None);
        let (b_stopped, mut b_cause) = watch::channel(None);
        spawn_replica(b, eb.clone(), b_stopped, async { StopCause::Requested });
        spawn_replica(a, ea.clone(), a_stopped, async {
            panic!("the replica broke a rule")
        });
        // A closed endpoint refuses its own calls with `Closed`; wait for that (bounded).
        let closed = async {
            loop {
                let probe = ea.call(c, vote(a, c), Duration::from_millis(10)).await;
                if matches!(probe, Err(crate::io::TransportError::Closed)) {
                    return;
                }
                tokio::task::yield_now().await;
            }
        };
        tokio::time::timeout(BOUND, closed)
            .await
            .expect("the panicked replica's transport closes");
        let a_cause = tokio::time::timeout(BOUND, a_cause.wait_for(Option::is_some))
            .await
            .expect("the panicked replica's cause is published")
            .expect("published before the sender went")
            .clone();
        assert_eq!(
            a_cause,
            Some(StopCause::Failed(
                "the replica task panicked: the replica broke a rule".into()
            ))
        );
        let b_cause = tokio::time::timeout(BOUND, b_cause.wait_for(Option::is_some))
            .await
            .expect("the ended replica's cause is published")
            .expect("published before the sender went")
            .clone();
        assert_eq!(b_cause, Some(StopCause::Requested));
        let probe = eb.call(c, vote(b, c), Duration::from_millis(10)).await;
        assert!(
            !matches!(probe, Err(crate::io::TransportError::Closed)),
            "the transport of a replica task that ended normally was closed: {probe:?}"
        );
        drop(ec);
    }
}
