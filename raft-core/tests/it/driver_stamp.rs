//! The leader's stamp hook (`DriverOptions::stamp`). Goal: every data payload that enters the
//! log passes the leader's stamp exactly once, whether a client wrote it on the leader or on a
//! follower that forwarded it, and no other replica's stamp touches it.

use std::sync::Arc;

use bytes::Bytes;
use raft_core::driver::{DriverOptions, Stamp};
use raft_core::mem::transport::MemNetwork;
use raft_core::mem::{MemElectionStore, MemLog};
use raft_core::ReplicaId;

use super::driver::{start_on, test_config, wait_for_leader, Bounded, TestNode};

/// Prefixes each payload with the name of the replica that stamped it.
#[derive(Debug)]
struct Prefix(u32);

impl Stamp for Prefix {
    fn stamp(&self, payload: Bytes) -> Bytes {
        let mut out = format!("{}:", self.0).into_bytes();
        out.extend_from_slice(&payload);
        Bytes::from(out)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_stamps_local_and_forwarded_writes_once() {
    let net = MemNetwork::new();
    let voters: Vec<ReplicaId> = (1..=3).map(ReplicaId).collect();
    let mut nodes: Vec<TestNode> = Vec::new();
    for id in &voters {
        let options = DriverOptions {
            seed: u64::from(id.0) * 7919,
            stamp: Some(Arc::new(Prefix(id.0))),
            ..DriverOptions::default()
        };
        let log = Arc::new(MemLog::new());
        let election = Arc::new(MemElectionStore::new());
        nodes.push(start_on(&net, test_config(*id, &voters), log, election, options).await);
    }
    let leader = wait_for_leader(&nodes, None).await;
    let follower = (leader + 1) % 3;
    nodes[leader]
        .node
        .write(Bytes::from_static(b"local"))
        .bounded()
        .await
        .expect("a write on the leader commits");
    nodes[follower]
        .node
        .write_batch(vec![
            Bytes::from_static(b"fwd1"),
            Bytes::from_static(b"fwd2"),
        ])
        .bounded()
        .await
        .into_iter()
        .for_each(|r| assert!(r.is_ok(), "a forwarded write commits: {r:?}"));
    let id = nodes[leader].node.id().0;
    let want: Vec<Bytes> = ["local", "fwd1", "fwd2"]
        .iter()
        .map(|p| Bytes::from(format!("{id}:{p}")))
        .collect();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    for n in &nodes {
        loop {
            let got: Vec<Bytes> =
                n.sm.applied
                    .lock()
                    .unwrap()
                    .iter()
                    .map(|(_, p)| p.clone())
                    .collect();
            if got == want {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "a replica applied {got:?}, not {want:?}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }
    for n in &nodes {
        n.node.shutdown().bounded().await;
    }
}
