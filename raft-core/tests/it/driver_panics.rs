//! A storage call that panics (a bug in the embedder's store) stops the node as a storage error
//! does: its pending writes are answered as unknown, `Node::stopped` says why, and the other
//! replicas go on without it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use raft_core::driver::{DriverOptions, StopCause, Uncertain, WriteError};
use raft_core::io::{LogState, LogStore, StorageError};
use raft_core::mem::transport::MemNetwork;
use raft_core::mem::{MemElectionStore, MemLog};
use raft_core::{Offset, OffsetAndEpoch, Record, ReplicaId};

use super::driver::{start_on, test_config, wait_for_leader, Bounded, TestNode};

/// A log whose appends panic once it is armed.
#[derive(Default)]
struct PanicsOnAppend {
    log: MemLog,
    armed: AtomicBool,
}

#[async_trait]
impl LogStore for PanicsOnAppend {
    async fn state(&self) -> Result<LogState, StorageError> {
        self.log.state().await
    }
    async fn append(&self, records: &[Record]) -> Result<(), StorageError> {
        assert!(!self.armed.load(Ordering::SeqCst), "the disk driver broke");
        self.log.append(records).await
    }
    async fn read(&self, from: Offset, to: Offset, max: u64) -> Result<Vec<Record>, StorageError> {
        self.log.read(from, to, max).await
    }
    async fn truncate(&self, end: Offset) -> Result<(), StorageError> {
        self.log.truncate(end).await
    }
    async fn purge(&self, start: Offset) -> Result<(), StorageError> {
        self.log.purge(start).await
    }
    async fn reset(&self, start: OffsetAndEpoch) -> Result<(), StorageError> {
        self.log.reset(start).await
    }
}

/// Goal: a leader whose log store panics answers its pending write as unknown (it may already
/// be on a follower, which may commit it), refuses what comes after, and the others elect a new
/// leader. Regression: the log writer task died silently and the leader went on leading, its
/// writes committed by the followers' copies alone while its own log no longer reached its
/// store (both writes here were answered as committed).
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_leader_whose_log_store_panics_stops_and_its_pending_write_is_unknown() {
    let net = MemNetwork::new();
    let voters: Vec<ReplicaId> = (1..=3).map(ReplicaId).collect();
    let mut nodes: Vec<TestNode> = Vec::new();
    let mut logs = Vec::new();
    for id in &voters {
        let log = Arc::new(PanicsOnAppend::default());
        logs.push(log.clone());
        let options = DriverOptions {
            seed: u64::from(id.0) * 613,
            ..DriverOptions::default()
        };
        let election = Arc::new(MemElectionStore::new());
        nodes.push(start_on(&net, test_config(*id, &voters), log, election, options).await);
    }
    let leader = wait_for_leader(&nodes, None).await;
    nodes[leader]
        .node
        .write(Bytes::from_static(b"before"))
        .bounded()
        .await
        .expect("a write commits while the store works");

    logs[leader].armed.store(true, Ordering::SeqCst);
    let pending = nodes[leader]
        .node
        .write(Bytes::from_static(b"pending"))
        .bounded()
        .await;
    match pending {
        Err(WriteError::Unknown(Uncertain::Failed(reason))) => assert!(
            reason.contains("log writer panicked") && reason.contains("the disk driver broke"),
            "the failure names the task and the panic: {reason}"
        ),
        other => panic!("the pending write must be unknown after the panic, got {other:?}"),
    }
    let after = nodes[leader]
        .node
        .write(Bytes::from_static(b"after"))
        .bounded()
        .await;
    assert!(
        matches!(after, Err(WriteError::Refused(_))),
        "a write to the stopped node is refused (never proposed), got {after:?}"
    );

    match nodes[leader].node.stopped().bounded().await {
        StopCause::Failed(reason) => assert!(
            reason.contains("log writer panicked"),
            "the node says why it stopped: {reason}"
        ),
        other => panic!("the node whose store panicked stopped on its own, not {other:?}"),
    }
    assert!(
        nodes[leader].node.status().bounded().await.is_none(),
        "the node whose store panicked answers no calls"
    );
    let next = wait_for_leader(&nodes, Some(leader)).await;
    nodes[next]
        .node
        .write(Bytes::from_static(b"elsewhere"))
        .bounded()
        .await
        .expect("the others elect a leader and commit");
    for (i, n) in nodes.iter().enumerate() {
        if i != leader {
            n.node.shutdown().bounded().await;
            assert_eq!(n.node.stopped().bounded().await, StopCause::Requested);
        }
    }
}
