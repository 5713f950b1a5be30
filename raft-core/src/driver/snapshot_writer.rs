//! Snapshot downloads written chunk by chunk, and snapshot chunks served to followers.

use std::sync::Arc;

use super::supervise::spawn_reporting;
use super::task_messages::Done;
use bytes::Bytes;
use tokio::sync::mpsc;

use crate::io::SnapshotStore;
use crate::message::{ErrorCode, Response};
use crate::protocol::SnapshotOp;

/// Completes a FetchSnapshot response with a chunk read from the store, or refuses it.
pub(super) fn fill_snapshot_chunk(
    response: Response,
    chunk: Option<(crate::io::SnapshotMeta, Bytes)>,
) -> Response {
    let Response::FetchSnapshot(mut r) = response else {
        return response;
    };
    match chunk {
        None => r.error = Some(ErrorCode::SnapshotNotFound),
        Some((meta, _)) if r.position > meta.size => r.error = Some(ErrorCode::PositionOutOfRange),
        Some((meta, data)) => {
            r.size = meta.size;
            r.checksum = meta.checksum;
            r.data = data;
        }
    }
    Response::FetchSnapshot(r)
}

/// Writes the chunks of a snapshot download in order and completes it.
pub(super) fn spawn_snapshot_writer(
    store: Arc<dyn SnapshotStore>,
    bootstrap: crate::voters::VoterSet,
    done: mpsc::Sender<Done>,
) -> mpsc::UnboundedSender<SnapshotOp> {
    let (tx, mut rx) = mpsc::unbounded_channel::<SnapshotOp>();
    spawn_reporting("snapshot writer", done.clone(), async move {
        while let Some(op) = rx.recv().await {
            let result = match op {
                SnapshotOp::Write { id, position, data } => {
                    store.write_partial(id, position, data).await.map(|()| None)
                }
                SnapshotOp::Finish { id, size, checksum } => {
                    match store.finish_partial(id, size, checksum).await {
                        // The core installs the snapshot's voter set with it.
                        Ok(Some(_)) => super::membership::snapshot_voters(&*store, id, &bootstrap)
                            .await
                            .map(|voters| Some((id, true, voters))),
                        Ok(None) => Ok(Some((id, false, bootstrap.clone()))),
                        Err(e) => Err(e),
                    }
                }
            };
            let report = match result {
                Ok(None) => continue,
                Ok(Some(outcome)) => Ok(outcome),
                Err(e) => Err(e),
            };
            let failed = report.is_err();
            if done.send(Done::SnapshotDownloaded(report)).await.is_err() || failed {
                return;
            }
        }
    });
    tx
}
