//! Progress lines of log replays and snapshot restores. Goal: a large or slow replay or restore
//! tells the operator what it does, how far it got (at a bounded rate) and how long it took,
//! with exact figures; a small, quick one writes nothing at INFO. Method: tokio's paused clock
//! and a state machine that takes whole (virtual) seconds per call make an operation slow
//! without sleeping for real; a `tracing` subscriber captures what reaches INFO.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use tokio::sync::mpsc;

use super::applier::{restore_with_progress, Applier, ApplyJob, SnapshotTriggers};
use super::progress::ProgressPacing;
use super::task_messages::Done;
use super::Metrics;
use crate::io::{BytesReader, LogStore, SnapshotReader, StateMachine, StateMachineError};
use crate::mem::{MemLog, MemSnapshots};
use crate::types::{Epoch, Offset, Record, RecordKind, ReplicaId};
use crate::voters::VoterSet;

/// A state machine that spends `per_call` of tokio time on every apply and restore call.
struct SlowStateMachine {
    per_call: Duration,
    next: Mutex<Offset>,
}

#[async_trait]
impl StateMachine for SlowStateMachine {
    async fn applied(&self) -> Offset {
        *self.next.lock().unwrap()
    }

    async fn apply(
        &self,
        records: &[Record],
        responses: &mut Vec<Bytes>,
    ) -> Result<(), StateMachineError> {
        tokio::time::sleep(self.per_call).await;
        let mut next = self.next.lock().unwrap();
        for r in records {
            assert_eq!(r.offset, *next, "records arrive in order without gaps");
            *next = r.offset.next();
            responses.push(Bytes::new());
        }
        Ok(())
    }

    async fn snapshot(&self) -> Result<Box<dyn SnapshotReader>, StateMachineError> {
        Ok(Box::new(BytesReader::new(Bytes::new())))
    }

    async fn restore(
        &self,
        applied: Offset,
        data: &mut dyn SnapshotReader,
    ) -> Result<(), StateMachineError> {
        while data.next_chunk().await.expect("snapshot chunk").is_some() {}
        tokio::time::sleep(self.per_call).await;
        *self.next.lock().unwrap() = applied;
        Ok(())
    }
}

/// Pacing with small "large" thresholds, so that the tests need little data.
const PACING: ProgressPacing = ProgressPacing {
    every: Duration::from_secs(5),
    large_records: 10_000,
    large_bytes: 1 << 20,
};

/// What the subscriber wrote.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn lines(&self) -> Vec<String> {
        let text = String::from_utf8(self.0.lock().unwrap().clone()).unwrap();
        text.lines().map(str::to_string).collect()
    }
}

/// Captures every INFO (and more severe) event of this thread until the guard drops.
fn capture_info() -> (Captured, tracing::subscriber::DefaultGuard) {
    let out = Captured::default();
    let writer = out.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .without_time()
        .with_max_level(tracing::Level::INFO)
        .finish();
    (out, tracing::subscriber::set_default(subscriber))
}

fn applier(per_call: Duration) -> (Applier, mpsc::Receiver<Done>) {
    let (done, done_rx) = mpsc::channel(1024);
    let voters = VoterSet::from_ids([ReplicaId(1)]);
    let applier = Applier {
        sm: Arc::new(SlowStateMachine {
            per_call,
            next: Mutex::new(Offset::ZERO),
        }),
        snapshots: Arc::new(MemSnapshots::new()),
        triggers: SnapshotTriggers {
            records: 0,
            bytes: 0,
            every: Duration::ZERO,
            last: tokio::time::Instant::now(),
            records_since: 0,
            bytes_since: 0,
        },
        done,
        writing: None,
        metrics: Arc::new(Metrics::default()),
        voters: voters.clone(),
        bootstrap: voters,
        pacing: PACING,
    };
    (applier, done_rx)
}

/// A log holding `n` committed data records from offset 0.
async fn log_of(n: u64) -> Arc<MemLog> {
    let log = Arc::new(MemLog::new());
    let records: Vec<Record> = (0..n)
        .map(|i| Record {
            offset: Offset(i),
            epoch: Epoch(1),
            kind: RecordKind::Data,
            payload: Bytes::from_static(b"sixteen bytes..."),
        })
        .collect();
    log.append(&records).await.unwrap();
    log
}

/// Replays `n` records from `log` through `applier`; returns how many records each
/// `Done::Applied` reported.
async fn replay(
    applier: &mut Applier,
    done: &mut mpsc::Receiver<Done>,
    log: Arc<MemLog>,
    n: u64,
) -> Vec<usize> {
    let job = ApplyJob::FromLog {
        log,
        from: Offset::ZERO,
        to: Offset(n),
    };
    assert!(applier.run_job(job, &mut None, &mut Vec::new()).await);
    let mut batches = Vec::new();
    while let Ok(d) = done.try_recv() {
        match d {
            Done::Applied(Ok(applied)) => batches.push(applied.len()),
            _ => panic!("a replay reports only applied records"),
        }
    }
    batches
}

#[tokio::test(start_paused = true)]
async fn a_large_slow_replay_announces_itself_reports_progress_and_its_duration() {
    let log = log_of(20_000).await;
    let (mut applier, mut done) = applier(Duration::from_secs(3));
    let (captured, _guard) = capture_info();
    let batches = replay(&mut applier, &mut done, log, 20_000).await;
    // Batches of 4096 records, 3 s each: done at 3, 6, 9, 12 and 15 s; a progress line at most
    // every 5 s, so at 6 s (8192 records) and 12 s (16384).
    assert_eq!(batches, [4096, 4096, 4096, 4096, 3616]);
    let lines = captured.lines();
    let subject = "20000 committed records from offset 0 to 20000 into the state machine";
    let expected = [
        format!("replaying {subject}"),
        format!("replaying {subject}: 8192 of 20000 records done (40 %), 6.0 s so far"),
        format!("replaying {subject}: 16384 of 20000 records done (81 %), 12.0 s so far"),
        format!("replayed {subject} in 15.0 s"),
    ];
    assert_eq!(lines.len(), expected.len(), "{lines:#?}");
    for (line, want) in lines.iter().zip(&expected) {
        assert!(line.contains(" INFO "), "{line}");
        assert!(
            line.contains(want.as_str()),
            "{line:?} should contain {want:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_small_quick_replay_writes_nothing_at_info() {
    let log = log_of(100).await;
    let (mut applier, mut done) = applier(Duration::from_millis(1));
    let (captured, _guard) = capture_info();
    let batches = replay(&mut applier, &mut done, log, 100).await;
    assert_eq!(batches, [100]);
    assert_eq!(captured.lines(), Vec::<String>::new());
}

#[tokio::test(start_paused = true)]
async fn restores_are_announced_when_large_and_timed_when_slow() {
    let (captured, _guard) = capture_info();
    let restore = |per_call: Duration, bytes: usize| async move {
        let sm = SlowStateMachine {
            per_call,
            next: Mutex::new(Offset::ZERO),
        };
        let mut state = BytesReader::new(Bytes::from(vec![0u8; bytes]));
        restore_with_progress(&sm, Offset(500), &mut state, bytes as u64, &PACING)
            .await
            .unwrap();
        assert_eq!(sm.applied().await, Offset(500));
    };
    // Small and quick: nothing.
    restore(Duration::from_millis(1), 1024).await;
    assert_eq!(captured.lines(), Vec::<String>::new());
    // Large: announced, and its duration given.
    restore(Duration::from_secs(7), 2 << 20).await;
    let subject = "the state machine from the snapshot at offset 500, 2097152 bytes";
    let lines = captured.lines();
    assert_eq!(lines.len(), 2, "{lines:#?}");
    assert!(
        lines[0].contains(&format!("restoring {subject}")),
        "{lines:#?}"
    );
    assert!(
        lines[1].contains(&format!("restored {subject} in 7.0 s")),
        "{lines:#?}"
    );
    // Small but slow: only the closing line.
    restore(Duration::from_secs(6), 1024).await;
    let lines = captured.lines();
    assert_eq!(lines.len(), 3, "{lines:#?}");
    assert!(
        lines[2].contains(
            "restored the state machine from the snapshot at offset 500, 1024 bytes in 6.0 s"
        ),
        "{lines:#?}"
    );
}
