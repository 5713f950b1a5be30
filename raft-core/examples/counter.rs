//! The smallest replicated state machine: a counter on three replicas in one process, over
//! the in-memory transport and storage.
//!
//! Run it with `cargo run -p raft-core --example counter`. It formats the three founding
//! voters, starts them, waits (without polling) until one leads, adds to the counter through a
//! follower (the write is forwarded to the leader), reads it back linearizably on the other
//! follower, and stops.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use raft_core::driver::{DriverOptions, Node, Parts, ReadMode};
use raft_core::io::{StateMachine, StateMachineError};
use raft_core::mem::transport::MemNetwork;
use raft_core::mem::{MemElectionStore, MemLog, MemSnapshots};
use raft_core::snapshot_stream::{read_to_end, BytesReader, SnapshotReader};
use raft_core::{Config, DirectoryId, Offset, Record, RecordKind, ReplicaId, Voter, VoterSet};

/// The state: a sum, and where applying stands. `apply` is deterministic (the same records
/// give the same sum on every replica) and reads no clock or randomness.
#[derive(Default)]
struct Counter {
    sum: AtomicU64,
    applied: AtomicU64,
}

#[async_trait]
impl StateMachine for Counter {
    async fn applied(&self) -> Offset {
        Offset(self.applied.load(Ordering::SeqCst))
    }

    async fn apply(
        &self,
        records: &[Record],
        responses: &mut Vec<Bytes>,
    ) -> Result<(), StateMachineError> {
        for r in records {
            if r.kind == RecordKind::Data {
                // A payload is the amount to add, as 8 little-endian bytes.
                let add = r
                    .payload
                    .as_ref()
                    .try_into()
                    .map(u64::from_le_bytes)
                    .unwrap_or(0);
                self.sum.fetch_add(add, Ordering::SeqCst);
            }
            // The answer the writer gets: the sum after its record.
            let sum = self.sum.load(Ordering::SeqCst);
            responses.push(Bytes::copy_from_slice(&sum.to_le_bytes()));
            self.applied.store(r.offset.0 + 1, Ordering::SeqCst);
        }
        Ok(())
    }

    async fn snapshot(&self) -> Result<Box<dyn SnapshotReader>, StateMachineError> {
        let sum = self.sum.load(Ordering::SeqCst);
        Ok(Box::new(BytesReader::new(Bytes::copy_from_slice(
            &sum.to_le_bytes(),
        ))))
    }

    async fn restore(
        &self,
        applied: Offset,
        data: &mut dyn SnapshotReader,
    ) -> Result<(), StateMachineError> {
        let bytes = read_to_end(data, 8).await.map_err(|e| StateMachineError {
            offset: applied,
            reason: e.to_string(),
        })?;
        let sum = bytes
            .as_ref()
            .try_into()
            .map(u64::from_le_bytes)
            .map_err(|_| StateMachineError {
                offset: applied,
                reason: "a counter snapshot is 8 bytes".into(),
            })?;
        self.sum.store(sum, Ordering::SeqCst);
        self.applied.store(applied.0, Ordering::SeqCst);
        Ok(())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let ids = [ReplicaId(1), ReplicaId(2), ReplicaId(3)];
    // The founding voters, each with the id of its storage directory.
    let founding = VoterSet::from_entries(ids.iter().map(|id| {
        let voter = Voter {
            directory: Some(DirectoryId(0xC0DE_0000 + u128::from(id.0))),
            endpoint: String::new(),
        };
        (*id, voter)
    }))?;
    let net = MemNetwork::new();
    let mut nodes = Vec::new();
    let mut counters = Vec::new();
    for id in ids {
        let mut cfg = Config::new(id, ids);
        cfg.directory = founding.get(id).and_then(|v| v.directory);
        cfg.election_timeout = Duration::from_millis(150);
        cfg.fetch_timeout = Duration::from_millis(600);
        cfg.fetch_max_wait = Duration::from_millis(200);
        let snapshots = Arc::new(MemSnapshots::new());
        // Once, before a founding voter's first start.
        raft_core::driver::format(&*snapshots, &founding).await?;
        let counter = Arc::new(Counter::default());
        let parts = Parts {
            log: Arc::new(MemLog::new()),
            election: Arc::new(MemElectionStore::new()),
            transport: Arc::new(net.endpoint(id)),
            state_machine: counter.clone(),
            snapshots,
        };
        let options = DriverOptions {
            seed: u64::from(id.0),
            ..DriverOptions::default()
        };
        nodes.push(Node::start(cfg.validate()?, parts, options).await?);
        counters.push(counter);
    }

    // Wait for a leader that has committed in its epoch, from replica 1's state channel.
    let mut state = nodes[0].watch();
    let leader = tokio::time::timeout(
        Duration::from_secs(10),
        state.wait_for(|s| s.leader.is_some() && s.high_watermark > Offset::ZERO),
    )
    .await??
    .leader
    .expect("a leader");
    println!("{leader} leads");
    let followers: Vec<usize> = (0..3).filter(|i| ids[*i] != leader).collect();

    // Add 5 through a follower: it forwards the write to the leader and answers once the
    // record is committed and applied there.
    let committed = nodes[followers[0]]
        .write(Bytes::copy_from_slice(&5u64.to_le_bytes()))
        .await?;
    let sum_after = u64::from_le_bytes(committed.response.as_ref().try_into()?);
    println!(
        "added 5 at offset {}: the sum is {sum_after}",
        committed.id.offset
    );

    // A linearizable read on the other follower: once the permit is granted, its counter has
    // applied every write acknowledged before the read began.
    let reader = followers[1];
    nodes[reader].read(ReadMode::Linearizable).await?;
    let read = counters[reader].sum.load(Ordering::SeqCst);
    println!("{} reads {read}", ids[reader]);
    assert_eq!(read, 5, "a linearizable read sees the acknowledged write");

    for node in &nodes {
        node.shutdown().await;
    }
    Ok(())
}
