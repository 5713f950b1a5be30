//! The driver taking snapshots as streams: records go on being applied while a snapshot is
//! written, the log is purged only once it is durable, one snapshot is written at a time, and
//! a state machine whose stream fails stops the replica without publishing a snapshot.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use tokio::sync::watch;

use raft_core::driver::{DriverOptions, Node, Parts};
use raft_core::io::{read_to_end, SnapshotReader, SnapshotStore, StateMachine, StateMachineError};
use raft_core::mem::transport::MemNetwork;
use raft_core::mem::{MemElectionStore, MemLog, MemSnapshots};
use raft_core::{Offset, Record, ReplicaId, Role};

use super::driver::{test_config, Bounded};

/// A counter state machine whose snapshot streams hand out their bytes only once the gate is
/// open (or fail when it is set to fail).
struct Gated {
    next: Mutex<Offset>,
    captures: AtomicU64,
    /// The offset the last capture covers.
    captured_at: Mutex<Offset>,
    gate: watch::Receiver<Gate>,
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Gate {
    Closed,
    Open,
    Fail,
}

/// A capture: the offset it covers, handed out when the gate opens.
struct GatedReader {
    state: Option<Bytes>,
    gate: watch::Receiver<Gate>,
}

#[async_trait]
impl SnapshotReader for GatedReader {
    async fn next_chunk(&mut self) -> std::io::Result<Option<Bytes>> {
        let gate = *self
            .gate
            .wait_for(|g| *g != Gate::Closed)
            .await
            .map_err(std::io::Error::other)?;
        if gate == Gate::Fail {
            return Err(std::io::Error::other("the state machine's disk failed"));
        }
        Ok(self.state.take())
    }
}

#[async_trait]
impl StateMachine for Gated {
    async fn applied(&self) -> Offset {
        *self.next.lock().unwrap()
    }

    async fn apply(
        &self,
        records: &[Record],
        responses: &mut Vec<Bytes>,
    ) -> Result<(), StateMachineError> {
        let mut next = self.next.lock().unwrap();
        for r in records {
            assert_eq!(r.offset, *next, "records arrive in order without gaps");
            *next = r.offset.next();
            responses.push(Bytes::new());
        }
        Ok(())
    }

    async fn snapshot(&self) -> Result<Box<dyn SnapshotReader>, StateMachineError> {
        self.captures.fetch_add(1, Ordering::SeqCst);
        let next = *self.next.lock().unwrap();
        *self.captured_at.lock().unwrap() = next;
        Ok(Box::new(GatedReader {
            state: Some(Bytes::copy_from_slice(&next.0.to_le_bytes())),
            gate: self.gate.clone(),
        }))
    }

    async fn restore(
        &self,
        applied: Offset,
        data: &mut dyn SnapshotReader,
    ) -> Result<(), StateMachineError> {
        let data = read_to_end(data, 8).await.map_err(|e| StateMachineError {
            offset: applied,
            reason: e.to_string(),
        })?;
        assert_eq!(
            data.as_ref(),
            applied.0.to_le_bytes(),
            "the capture's offset"
        );
        *self.next.lock().unwrap() = applied;
        Ok(())
    }
}

/// A one-voter node snapshotting every 10 records, keeping no log below a snapshot.
async fn gated_node(gate: watch::Receiver<Gate>) -> (Node, Arc<Gated>, Arc<MemSnapshots>) {
    let net = MemNetwork::new();
    let id = ReplicaId(1);
    let mut cfg = test_config(id, &[id]);
    cfg.snapshot_after_records = 10;
    cfg.snapshot_log_retention = 0;
    let sm = Arc::new(Gated {
        next: Mutex::new(Offset::ZERO),
        captures: AtomicU64::new(0),
        captured_at: Mutex::new(Offset::ZERO),
        gate,
    });
    let snapshots = Arc::new(MemSnapshots::new());
    let cfg = cfg.validate().unwrap();
    raft_core::driver::format(&*snapshots, &cfg.bootstrap_voters())
        .await
        .unwrap();
    let parts = Parts {
        log: Arc::new(MemLog::new()),
        election: Arc::new(MemElectionStore::new()),
        transport: Arc::new(net.endpoint(id)),
        state_machine: sm.clone(),
        snapshots: snapshots.clone(),
    };
    let node = Node::start(cfg, parts, DriverOptions::default())
        .await
        .unwrap();
    eventually("the lone voter leads", async || {
        node.status().await.is_some_and(|s| s.role == Role::Leader)
    })
    .await;
    (node, sm, snapshots)
}

/// Writes `n` records, each within 5 s.
async fn write(node: &Node, n: usize) {
    for i in 0..n {
        tokio::time::timeout(
            Duration::from_secs(5),
            node.write(Bytes::from(format!("w{i}"))),
        )
        .await
        .expect("a write answered within 5 s")
        .expect("the write commits");
    }
}

/// Waits (at most 5 s) until `cond` holds.
async fn eventually(what: &str, mut cond: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !cond().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not within 5 s: {what}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Goal: taking a snapshot does not hold writes up, and the log stays whole until the snapshot
/// is durable. Method: one voter snapshots every 10 records; its state machine's snapshot
/// stream stays blocked. 100 more writes still commit and are applied; meanwhile no snapshot
/// is published, the log start stays 0, and no second capture starts although ten were due.
/// Once the stream is released, the snapshot is published at the offset of its capture and
/// the log is purged up to it; the next writes take the next snapshot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_are_applied_while_a_snapshot_is_written() {
    let (gate_tx, gate) = watch::channel(Gate::Closed);
    let (node, sm, store) = gated_node(gate).await;
    write(&node, 10).await;
    eventually("the first capture", async || {
        sm.captures.load(Ordering::SeqCst) == 1
    })
    .await;
    let captured_at = *sm.captured_at.lock().unwrap();
    write(&node, 100).await;
    let status = node.status().await.expect("status");
    // Each of the 100 writes was sent after the capture, so each was applied after it. (The
    // capture itself may come before or after the tenth write is applied.)
    assert!(
        sm.applied().await >= Offset(captured_at.0 + 100),
        "writes were applied while the snapshot was pending"
    );
    assert_eq!(
        status.snapshot,
        Some(raft_core::driver::bootstrap::FORMAT_SNAPSHOT),
        "nothing published before it is durable (the formatted voter set is all there is)"
    );
    assert_eq!(status.log_start, Offset::ZERO, "the log is whole meanwhile");
    assert_eq!(
        store.latest().await.unwrap().map(|m| m.id),
        Some(raft_core::driver::bootstrap::FORMAT_SNAPSHOT)
    );
    assert_eq!(
        sm.captures.load(Ordering::SeqCst),
        1,
        "one snapshot is written at a time"
    );

    gate_tx.send(Gate::Open).unwrap();
    eventually("the snapshot is published", async || {
        node.status()
            .await
            .is_some_and(|s| s.snapshot.is_some_and(|id| id.offset >= captured_at))
    })
    .await;
    let status = node.status().await.expect("status");
    let published = status.snapshot.expect("published");
    assert_eq!(
        published.offset, captured_at,
        "the snapshot covers its capture"
    );
    assert_eq!(status.log_start, captured_at, "the log is purged up to it");
    write(&node, 1).await;
    eventually("the next capture", async || {
        sm.captures.load(Ordering::SeqCst) == 2
    })
    .await;
    node.shutdown().bounded().await;
}

/// Goal: a state machine's failing snapshot stream publishes nothing and stops the replica
/// (it cannot compact its log any more). Method: the stream fails once released; the store
/// holds no snapshot and the node answers writes no more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_snapshot_stream_publishes_nothing_and_stops_the_replica() {
    let (gate_tx, gate) = watch::channel(Gate::Closed);
    let (node, sm, store) = gated_node(gate).await;
    write(&node, 10).await;
    eventually("the capture", async || {
        sm.captures.load(Ordering::SeqCst) == 1
    })
    .await;
    gate_tx.send(Gate::Fail).unwrap();
    eventually("the replica stops", async || node.status().await.is_none()).await;
    assert_eq!(
        store.latest().await.unwrap().map(|m| m.id),
        Some(raft_core::driver::bootstrap::FORMAT_SNAPSHOT),
        "nothing published but the formatted voter set"
    );
    let after = tokio::time::timeout(Duration::from_secs(5), node.write(Bytes::from("late")))
        .await
        .expect("answered within 5 s");
    assert!(
        after.is_err(),
        "a stopped replica takes no writes: {after:?}"
    );
}
