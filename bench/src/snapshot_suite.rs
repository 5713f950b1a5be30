//! Snapshot transfer: three voters whose state machine holds S bytes snapshot and purge their
//! log; an observer then joins from empty storage and must download the snapshot. Measures the
//! time from its start to having applied the leader's high watermark, and the bytes per second.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use raft_core::mem::transport::MemNetwork;
use raft_core::ReplicaId;
use serde_json::json;

use crate::core_suite::{leader, member};
use crate::{Figure, Size};

async fn transfer(state_bytes: usize, chunk: u32) -> (Duration, u64) {
    let net = MemNetwork::new();
    let voters: Vec<ReplicaId> = (1..=3).map(ReplicaId).collect();
    let observer = ReplicaId(4);
    let tune = move |c: &mut raft_core::Config| {
        c.observers = [observer].into_iter().collect();
        c.snapshot_after_records = 20;
        c.snapshot_log_retention = 0;
        c.snapshot_chunk_bytes = chunk;
    };
    let mut members = Vec::new();
    for id in &voters {
        let m = member(&net, *id, &voters, &tune).await;
        *m.sm.state.lock().unwrap() = Bytes::from(vec![0x5a; state_bytes]);
        members.push(m);
    }
    // Copying a large snapshot into the in-memory store can hold a worker up long enough for
    // an election: a refused proposal goes to the new leader (bounded).
    let mut l = leader(&members).await;
    let (mut done, mut refused) = (0, 0);
    while done < 40 {
        match members[l].node.propose(Bytes::from_static(b"x")).await {
            Ok(_) => done += 1,
            Err(e) => {
                refused += 1;
                assert!(refused < 100, "proposals keep failing: {e:?}");
                l = leader(&members).await;
            }
        }
    }
    let target = members[l]
        .node
        .status()
        .await
        .expect("status")
        .high_watermark;
    let started = Instant::now();
    let late = member(&net, observer, &voters, &tune).await;
    let deadline = started + Duration::from_secs(600);
    while late.sm.applied.load(Ordering::SeqCst) < target.0 {
        assert!(Instant::now() < deadline, "the observer did not catch up");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let took = started.elapsed();
    let installed = late
        .node
        .metrics()
        .snapshots_installed
        .load(Ordering::Relaxed);
    assert!(installed >= 1, "the observer caught up through a snapshot");
    let got = late.sm.state.lock().unwrap().len() as u64;
    for m in members.iter().chain(std::iter::once(&late)) {
        m.node.shutdown().await;
    }
    (took, got)
}

/// Runs the suite.
pub fn run(size: Size) -> Vec<Figure> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let state_bytes = size.pick(1 << 30, 4 << 20);
    let chunk = 1 << 20;
    let (took, got) = rt.block_on(transfer(state_bytes, chunk));
    drop(rt);
    let mut figures = vec![Figure {
        suite: "snapshot",
        name: "catch-up through a snapshot".into(),
        params: json!({
            "state_bytes": state_bytes, "chunk_bytes": chunk,
            "transport": "in-process", "storage": "in-memory",
        }),
        values: json!({
            "seconds": (took.as_secs_f64() * 1000.0).round() / 1000.0,
            "mib_per_s": ((got as f64 / (1 << 20) as f64) / took.as_secs_f64()).round(),
            "bytes_installed": got,
        }),
    }];
    figures.extend(crate::snapshot_disk::run(size));
    figures
}
