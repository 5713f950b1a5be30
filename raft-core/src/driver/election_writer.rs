//! The election writer task: saves election states, the latest of several queued.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::supervise::spawn_reporting;
use super::task_messages::Done;
use super::Metrics;
use tokio::sync::mpsc;

use crate::io::ElectionStore;
use crate::protocol::PersistSeq;
use crate::types::ElectionState;

/// Saves election states; when several are queued only the latest is written (it supersedes
/// the others, and reporting its sequence number covers theirs).
pub(super) fn spawn_election_writer(
    store: Arc<dyn ElectionStore>,
    done: mpsc::Sender<Done>,
    metrics: Arc<Metrics>,
) -> mpsc::UnboundedSender<(PersistSeq, ElectionState)> {
    let (tx, mut rx) = mpsc::unbounded_channel::<(PersistSeq, ElectionState)>();
    spawn_reporting("election writer", done.clone(), async move {
        while let Some(mut latest) = rx.recv().await {
            while let Ok(next) = rx.try_recv() {
                latest = next;
            }
            let result = store.save(&latest.1).await.map(|()| latest.0);
            metrics.election_saves.fetch_add(1, Ordering::Relaxed);
            let failed = result.is_err();
            if done.send(Done::Election(result)).await.is_err() || failed {
                return;
            }
        }
    });
    tx
}
