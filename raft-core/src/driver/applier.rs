//! The applier task: feeds committed records to the state machine in order, restores
//! downloaded snapshots, and takes snapshots when `Config::snapshot_after_*` fire. Records read
//! back from the log (a replay after a restart, a follower far behind) are applied in batches
//! of at most [`APPLY_BATCH_RECORDS`], with progress lines when the replay is large or slow
//! ([`super::progress`]); so are snapshot restores.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::membership::{snapshot_header, unframe_snapshot};
use super::progress::{Progress, ProgressPacing};
use super::supervise::spawn_reporting;
use super::task_messages::Done;
use super::Metrics;
use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

use crate::config::ValidatedConfig;
use crate::io::{
    LogStore, SnapshotReader, SnapshotStore, StateMachine, StateMachineError, StorageError,
};
use crate::snapshot_stream::Counted;
use crate::types::{Offset, OffsetAndEpoch, Record, RecordKind};
use crate::voters::VoterSet;

/// The most records of a replay handed to the state machine in one call: a replay of millions
/// of records then reports its progress (to the replica task, whose waiters and reads follow
/// the applied offset, and in progress lines) as it goes, and its responses stay small.
pub(super) const APPLY_BATCH_RECORDS: usize = 4096;

/// The bytes of log read per storage call during a replay.
const REPLAY_READ_BYTES: u64 = 8 << 20;

pub(super) enum ApplyJob {
    Records(Vec<Record>),
    FromLog {
        log: Arc<dyn LogStore>,
        from: Offset,
        to: Offset,
    },
    /// Open `reached` (every earlier job is done), then load snapshot `id` into the state
    /// machine.
    Restore {
        id: OffsetAndEpoch,
        reached: oneshot::Sender<()>,
    },
}

/// When the applier takes a snapshot (`Config::snapshot_after_*`).
pub(super) struct SnapshotTriggers {
    pub(super) records: u64,
    pub(super) bytes: u64,
    pub(super) every: Duration,
    /// When the last snapshot was taken or restored (or the applier started).
    pub(super) last: tokio::time::Instant,
    /// Applied since the last snapshot.
    pub(super) records_since: u64,
    pub(super) bytes_since: u64,
}

impl SnapshotTriggers {
    pub(super) fn of(cfg: &ValidatedConfig) -> SnapshotTriggers {
        SnapshotTriggers {
            records: cfg.snapshot_after_records,
            bytes: cfg.snapshot_after_bytes,
            every: cfg.snapshot_after_time,
            last: tokio::time::Instant::now(),
            records_since: 0,
            bytes_since: 0,
        }
    }

    pub(super) fn applied(&mut self, records: &[Record]) {
        self.records_since += records.len() as u64;
        self.bytes_since += records.iter().map(|r| r.payload.len() as u64).sum::<u64>();
    }

    pub(super) fn due(&self) -> bool {
        (self.records > 0 && self.records_since >= self.records)
            || (self.bytes > 0 && self.bytes_since >= self.bytes)
            || (!self.every.is_zero()
                && self.records_since > 0
                && self.last.elapsed() >= self.every)
    }

    pub(super) fn reset(&mut self) {
        self.records_since = 0;
        self.bytes_since = 0;
        self.last = tokio::time::Instant::now();
    }
}

pub(super) struct Applier {
    pub(super) sm: Arc<dyn StateMachine>,
    pub(super) snapshots: Arc<dyn SnapshotStore>,
    pub(super) triggers: SnapshotTriggers,
    pub(super) done: mpsc::Sender<Done>,
    pub(super) metrics: Arc<Metrics>,
    /// The voter set in force after the records applied so far: every snapshot taken carries
    /// it (KIP-853).
    pub(super) voters: VoterSet,
    /// The set for snapshots without one.
    pub(super) bootstrap: VoterSet,
    /// When replays and restores write progress lines.
    pub(super) pacing: ProgressPacing,
    /// The snapshot being written to the store, if any: at most one at a time. Aborted when
    /// the applier stops, as a crash would end it.
    pub(super) writing: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for Applier {
    fn drop(&mut self) {
        if let Some(task) = self.writing.take() {
            task.abort();
        }
    }
}

impl Applier {
    /// Reads the records from `next` on (below `to`, at most [`REPLAY_READ_BYTES`]).
    async fn read_chunk(
        log: &dyn LogStore,
        next: Offset,
        to: Offset,
    ) -> Result<Vec<Record>, StorageError> {
        let chunk = log.read(next, to, REPLAY_READ_BYTES).await?;
        // A short or gapped read would silently skip records: the state machine must see every
        // committed record exactly once, in order.
        if chunk.first().map(|r| r.offset) != Some(next)
            || chunk.windows(2).any(|w| w[1].offset != w[0].offset.next())
        {
            return Err(StorageError::Invalid(format!(
                "the log returned no contiguous records at {next} for the state machine"
            )));
        }
        Ok(chunk)
    }

    /// Applies one job; returns `false` once the applier must stop.
    pub(super) async fn run_job(
        &mut self,
        job: ApplyJob,
        last: &mut Option<OffsetAndEpoch>,
        responses: &mut Vec<Bytes>,
    ) -> bool {
        match job {
            ApplyJob::Records(records) => self.apply(&records, last, responses).await,
            ApplyJob::FromLog { log, from, to } => {
                self.replay(&*log, from, to, last, responses).await
            }
            ApplyJob::Restore { id, reached } => {
                let _ = reached.send(());
                let result = self.restore(id).await.map(|()| id);
                let ok = result.is_ok();
                if ok {
                    *last = Some(id);
                    self.triggers.reset();
                }
                self.done.send(Done::Restored(result)).await.is_ok() && ok
            }
        }
    }

    /// Applies the committed records `from..to` read back from `log`, in batches, with
    /// progress lines; returns `false` once the applier must stop.
    async fn replay(
        &mut self,
        log: &dyn LogStore,
        from: Offset,
        to: Offset,
        last: &mut Option<OffsetAndEpoch>,
        responses: &mut Vec<Bytes>,
    ) -> bool {
        let total = to.0.saturating_sub(from.0);
        let mut progress = Progress::start(
            "replaying",
            "replayed",
            format!("{total} committed records from offset {from} to {to} into the state machine"),
            total,
            "records",
            total >= self.pacing.large_records,
            self.pacing.every,
        );
        let mut next = from;
        while next < to {
            let chunk = match Self::read_chunk(log, next, to).await {
                Ok(chunk) => chunk,
                Err(e) => {
                    let _ = self.done.send(Done::Applied(Err(e.to_string()))).await;
                    return false;
                }
            };
            next = chunk.last().map_or(next, |r| r.offset.next());
            for batch in chunk.chunks(APPLY_BATCH_RECORDS) {
                if !self.apply(batch, last, responses).await {
                    return false;
                }
                progress.advance(batch.len() as u64);
            }
        }
        progress.finish();
        true
    }

    /// Applies `records` (the next ones after those applied), reports them, and takes a
    /// snapshot if one is due; returns `false` once the applier must stop.
    async fn apply(
        &mut self,
        records: &[Record],
        last: &mut Option<OffsetAndEpoch>,
        responses: &mut Vec<Bytes>,
    ) -> bool {
        responses.clear();
        if let Err(e) = self.sm.apply(records, responses).await {
            let _ = self.done.send(Done::Applied(Err(e.to_string()))).await;
            return false;
        }
        self.metrics
            .applied
            .fetch_add(records.len() as u64, Ordering::Relaxed);
        self.triggers.applied(records);
        for r in records.iter().filter(|r| r.kind == RecordKind::Voters) {
            match crate::codec::decode_voters(&r.payload) {
                Ok((set, _)) => self.voters = set,
                Err(e) => {
                    // The core refused to append an undecodable voter set: this is storage
                    // returning other bytes than it was given.
                    let reason = format!("voter set record at {}: {e}", r.offset);
                    let _ = self.done.send(Done::Applied(Err(reason))).await;
                    return false;
                }
            }
        }
        if let Some(r) = records.last() {
            *last = Some(OffsetAndEpoch::new(r.offset.next(), r.epoch));
        }
        let applied: Vec<(OffsetAndEpoch, Bytes)> = records
            .iter()
            .zip(responses.drain(..).chain(std::iter::repeat(Bytes::new())))
            .map(|(r, resp)| (r.id(), resp))
            .collect();
        if self.done.send(Done::Applied(Ok(applied))).await.is_err() {
            return false;
        }
        let writing = self.writing.as_ref().is_some_and(|t| !t.is_finished());
        match *last {
            // While a snapshot is still being written the triggers keep counting, and the
            // next one is taken after it.
            Some(id) if self.triggers.due() && !writing => {
                self.triggers.reset();
                match self.take_snapshot(id).await {
                    Ok(()) => true,
                    Err(e) => {
                        let _ = self.done.send(Done::SnapshotTaken(Err(e))).await;
                        false
                    }
                }
            }
            _ => true,
        }
    }

    pub(super) async fn restore(&mut self, id: OffsetAndEpoch) -> Result<(), String> {
        let (meta, reader) = open_snapshot(&*self.snapshots, id)
            .await
            .map_err(|e| e.to_string())?;
        let (voters, mut state) = unframe_snapshot(reader, &self.bootstrap)
            .await
            .map_err(|e| e.to_string())?;
        restore_with_progress(&*self.sm, id.offset, &mut *state, meta.size, &self.pacing)
            .await
            .map_err(|e| e.to_string())?;
        self.voters = voters;
        Ok(())
    }

    /// Captures the state machine, which has applied exactly the records below `id.offset`,
    /// and writes the snapshot on a task of its own, which reports `Done::SnapshotTaken` once
    /// it is durable. Records are applied meanwhile.
    pub(super) async fn take_snapshot(&mut self, id: OffsetAndEpoch) -> Result<(), String> {
        let state = self.sm.snapshot().await.map_err(|e| e.to_string())?;
        let header = snapshot_header(&self.voters);
        let store = self.snapshots.clone();
        let done = self.done.clone();
        self.writing = Some(spawn_reporting(
            "snapshot writing",
            done.clone(),
            async move {
                let started = tokio::time::Instant::now();
                let result = write_snapshot(&*store, id, header, state).await;
                if let Ok(bytes) = result {
                    tracing::debug!(
                        snapshot = ?id,
                        bytes,
                        ms = started.elapsed().as_millis() as u64,
                        "snapshot written"
                    );
                }
                let _ = done.send(Done::SnapshotTaken(result.map(|_| id))).await;
            },
        ));
        Ok(())
    }
}

/// Opens the complete snapshot `id`, with its size.
pub(super) async fn open_snapshot(
    store: &dyn SnapshotStore,
    id: OffsetAndEpoch,
) -> Result<(crate::io::SnapshotMeta, Box<dyn SnapshotReader>), StorageError> {
    let vanished = || StorageError::Invalid(format!("snapshot {id:?} is not in the store"));
    let meta = store.read(id, 0, 0).await?.ok_or_else(vanished)?.0;
    let reader = store.open(id).await?.ok_or_else(vanished)?;
    Ok((meta, reader))
}

/// Writes snapshot `id` (the voter set header, then the state machine's stream) to `store`
/// and completes it; returns its size.
async fn write_snapshot(
    store: &dyn SnapshotStore,
    id: OffsetAndEpoch,
    header: Bytes,
    mut state: Box<dyn SnapshotReader>,
) -> Result<u64, String> {
    let mut writer = store.create(id).await.map_err(|e| e.to_string())?;
    writer.write(header).await.map_err(|e| e.to_string())?;
    while let Some(chunk) = state
        .next_chunk()
        .await
        .map_err(|e| format!("the state machine's snapshot at {id:?} failed: {e}"))?
    {
        writer.write(chunk).await.map_err(|e| e.to_string())?;
    }
    let meta = writer.finish().await.map_err(|e| e.to_string())?;
    Ok(meta.size)
}

/// Restores the state machine from a snapshot's state of `bytes` bytes (about: the snapshot's
/// size), with an opening line (INFO for a large snapshot), progress lines as it is read, and a
/// closing line with the duration (INFO when it took long).
pub(super) async fn restore_with_progress(
    sm: &dyn StateMachine,
    offset: Offset,
    state: &mut dyn SnapshotReader,
    bytes: u64,
    pacing: &ProgressPacing,
) -> Result<(), StateMachineError> {
    let mut progress = Progress::start(
        "restoring",
        "restored",
        format!("the state machine from the snapshot at offset {offset}, {bytes} bytes"),
        bytes,
        "bytes",
        bytes >= pacing.large_bytes,
        pacing.every,
    );
    {
        let mut on_chunk = |n: u64| progress.advance(n);
        let mut counted = Counted {
            inner: state,
            on_chunk: &mut on_chunk,
        };
        sm.restore(offset, &mut counted).await?;
    }
    progress.finish();
    Ok(())
}

pub(super) fn spawn_applier(mut applier: Applier) -> mpsc::UnboundedSender<ApplyJob> {
    let (tx, mut rx) = mpsc::unbounded_channel::<ApplyJob>();
    let done = applier.done.clone();
    spawn_reporting("applier", done, async move {
        let mut responses = Vec::new();
        // The id of the last record applied; a snapshot is taken only after this process
        // applied at least one record (it then knows the epoch the snapshot ends with).
        let mut last: Option<OffsetAndEpoch> = None;
        while let Some(job) = rx.recv().await {
            if !applier.run_job(job, &mut last, &mut responses).await {
                return;
            }
        }
    });
    tx
}
