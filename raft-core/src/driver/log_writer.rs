//! The log writer task: applies log operations in order and coalesces consecutive appends into
//! one durable call (group commit); and the reads of old records for fetches.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::supervise::spawn_reporting;
use super::task_messages::Done;
use super::Metrics;
use tokio::sync::{mpsc, oneshot};

use crate::io::{LogStore, StorageError};
use crate::protocol::LogOp;
use crate::types::{Offset, Record};

/// A log operation, possibly held until a gate opens (a reset waits for the applier).
pub(super) struct GatedLogOp {
    pub(super) op: LogOp,
    pub(super) gate: Option<oneshot::Receiver<()>>,
}

/// Applies log operations in order. Consecutive appends queued together go to storage as one
/// call, so one sync covers them all (group commit).
pub(super) fn spawn_log_writer(
    log: Arc<dyn LogStore>,
    done: mpsc::Sender<Done>,
    metrics: Arc<Metrics>,
) -> mpsc::UnboundedSender<GatedLogOp> {
    let (tx, mut rx) = mpsc::unbounded_channel::<GatedLogOp>();
    spawn_reporting("log writer", done.clone(), async move {
        let mut queue: Vec<GatedLogOp> = Vec::new();
        let mut batch: Vec<Record> = Vec::new();
        while let Some(op) = rx.recv().await {
            queue.push(op);
            while let Ok(op) = rx.try_recv() {
                queue.push(op);
            }
            let mut last = None;
            for GatedLogOp { op, gate } in queue.drain(..) {
                let result = match op {
                    LogOp::Append { seq, records } => {
                        // Most rounds hold one append: take its records as they are rather
                        // than copying them into a fresh batch.
                        if batch.is_empty() {
                            batch = records;
                        } else {
                            batch.extend(records);
                        }
                        last = Some(seq);
                        Ok(())
                    }
                    LogOp::Truncate { seq, end } => {
                        last = Some(seq);
                        match flush_batch(&*log, &mut batch, &metrics).await {
                            Ok(()) => log.truncate(end).await,
                            Err(e) => Err(e),
                        }
                    }
                    LogOp::Purge { seq, start } => {
                        last = Some(seq);
                        match flush_batch(&*log, &mut batch, &metrics).await {
                            Ok(()) => log.purge(start).await,
                            Err(e) => Err(e),
                        }
                    }
                    LogOp::Reset { seq, start } => {
                        last = Some(seq);
                        match flush_batch(&*log, &mut batch, &metrics).await {
                            Ok(()) => {
                                if let Some(gate) = gate {
                                    // A dropped gate means the applier stopped: stop too.
                                    if gate.await.is_err() {
                                        return;
                                    }
                                }
                                log.reset(start).await
                            }
                            Err(e) => Err(e),
                        }
                    }
                };
                if let Err(e) = result {
                    let _ = done.send(Done::Log(Err(e))).await;
                    return;
                }
            }
            if let Err(e) = flush_batch(&*log, &mut batch, &metrics).await {
                let _ = done.send(Done::Log(Err(e))).await;
                return;
            }
            if let Some(seq) = last {
                if done.send(Done::Log(Ok(seq))).await.is_err() {
                    return;
                }
            }
        }
    });
    tx
}

pub(super) async fn flush_batch(
    log: &dyn LogStore,
    batch: &mut Vec<Record>,
    metrics: &Metrics,
) -> Result<(), StorageError> {
    if batch.is_empty() {
        return Ok(());
    }
    log.append(batch).await?;
    metrics.log_syncs.fetch_add(1, Ordering::Relaxed);
    metrics
        .log_records
        .fetch_add(batch.len() as u64, Ordering::Relaxed);
    batch.clear();
    Ok(())
}

/// Reads the records of a fetch response. A snapshot may have purged the range after the core
/// chose it: then the answer carries no records, and the fetcher's retry is sent the snapshot's
/// id. Any other failure is a storage failure.
pub(super) async fn read_for_fetch(
    log: &dyn LogStore,
    from: Offset,
    to: Offset,
    max_bytes: u32,
) -> Result<Vec<Record>, StorageError> {
    match log.read(from, to, u64::from(max_bytes)).await {
        Err(StorageError::Invalid(_)) if log.state().await.is_ok_and(|s| from < s.start) => {
            Ok(Vec::new())
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mem::MemLog;
    use crate::types::Epoch;
    use crate::RecordKind;
    use bytes::Bytes;

    #[tokio::test]
    async fn a_fetch_of_a_range_purged_meanwhile_gets_no_records_not_a_failure() {
        let log = MemLog::new();
        let records: Vec<Record> = (0..10)
            .map(|o| Record {
                offset: Offset(o),
                epoch: Epoch(1),
                kind: RecordKind::Data,
                payload: Bytes::from_static(b"x"),
            })
            .collect();
        log.append(&records).await.expect("append");
        log.purge(Offset(6)).await.expect("purge");
        let purged = read_for_fetch(&log, Offset(2), Offset(10), 1 << 20).await;
        assert_eq!(purged.expect("no failure"), Vec::new());
        let live = read_for_fetch(&log, Offset(6), Offset(10), 1 << 20).await;
        assert_eq!(live.expect("read").len(), 4);
        let beyond = read_for_fetch(&log, Offset(12), Offset(14), 1 << 20).await;
        assert!(
            matches!(beyond, Err(StorageError::Invalid(_))),
            "a range past the end is still an error"
        );
    }
}
