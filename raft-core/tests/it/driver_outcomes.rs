//! What the real driver tells a writer and a reader, in one process on the in-memory transport:
//! one caller's writes through a follower take effect in the order given, a write whose answer
//! was lost is reported as unknown (never as refused), and a restarted replica whose state
//! machine already covers the log serves reads without waiting for a new write.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use raft_core::driver::{DriverOptions, ReadMode, WriteError};
use raft_core::mem::transport::MemNetwork;
use raft_core::mem::{MemElectionStore, MemLog};
use raft_core::{Offset, ReplicaId, Role};

use super::driver::{
    start_cluster, start_node, start_on, start_restartable, start_with_sm, test_config,
    wait_for_leader, Bounded, TestNode,
};

/// Waits (bounded) until `node`'s state machine holds `payload`.
async fn wait_applied(node: &TestNode, payload: &[u8]) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !node
        .sm
        .applied
        .lock()
        .unwrap()
        .iter()
        .any(|(_, p)| p == payload)
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{:?} was not applied within 10 s",
            String::from_utf8_lossy(payload)
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Goal: a pipeline sent to a follower takes effect in the order sent (Redis's promise for one
/// connection). Regression: each forwarded write travelled in its own RPC, so the leader
/// appended them in whatever order they arrived. Method: several rounds of 40 writes in one
/// `write_batch` on a follower; every write commits, offsets rise in the order given, and the
/// leader's state machine applied them in that order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_followers_batch_commits_in_the_order_given() {
    let net = MemNetwork::new();
    let nodes = start_cluster(&net, 3).await;
    let leader = wait_for_leader(&nodes, None).await;
    let follower = (leader + 1) % 3;
    for round in 0..5u32 {
        let payloads: Vec<Bytes> = (0..40u32)
            .map(|i| Bytes::from(format!("r{round}-{i:02}")))
            .collect();
        let results = nodes[follower]
            .node
            .write_batch(payloads.clone())
            .bounded()
            .await;
        assert_eq!(results.len(), payloads.len(), "one result per write");
        let offsets: Vec<Offset> = results
            .iter()
            .map(|r| r.as_ref().expect("a healthy cluster commits").id.offset)
            .collect();
        assert!(
            offsets.windows(2).all(|w| w[0] < w[1]),
            "offsets follow the order given: {offsets:?}"
        );
        let applied: Vec<Bytes> = nodes[leader]
            .sm
            .applied
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, p)| p.starts_with(format!("r{round}-").as_bytes()))
            .map(|(_, p)| p.clone())
            .collect();
        assert_eq!(
            applied, payloads,
            "the leader applied round {round} in order"
        );
    }
    for n in &nodes {
        n.node.shutdown().bounded().await;
    }
}

/// Goal: "refused" means never applied. Regression: a forwarded write whose RPC failed after
/// reaching the leader was reported as `NotLeader`, which callers retry, though the leader
/// committed it. Method: cut the leader's link back to a follower, so the follower's forward
/// reaches the leader but its answer is lost; the follower must report the write as unknown,
/// and the leader indeed applies it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarded_write_whose_answer_is_lost_is_unknown_not_refused() {
    let net = MemNetwork::new();
    let nodes = start_cluster(&net, 3).await;
    let leader = wait_for_leader(&nodes, None).await;
    let follower = (leader + 1) % 3;
    // The follower must know the leader before the cut, or it refuses without forwarding.
    nodes[follower]
        .node
        .write(Bytes::from_static(b"warm-up"))
        .bounded()
        .await
        .expect("a healthy cluster commits");
    net.cut(nodes[leader].node.id(), nodes[follower].node.id());
    let result = nodes[follower]
        .node
        .write(Bytes::from_static(b"answer-lost"))
        .bounded()
        .await;
    match &result {
        Err(e @ WriteError::Unknown(_)) => assert!(!e.is_definite_failure()),
        other => panic!("expected an unknown outcome, got {other:?}"),
    }
    wait_applied(&nodes[leader], b"answer-lost").await;
    net.heal_all();
    for n in &nodes {
        n.node.shutdown().bounded().await;
    }
}

/// Goal: a restarted replica whose state machine already covers the committed log serves a
/// linearizable read in an idle cluster. Regression: the core's applied offset started at 0
/// and only rose when a new record was applied, so reads waited for a write that never came.
/// Method: a follower restarts on its own log with its state machine intact (a persistent state
/// machine); no write follows; a linearizable read on it completes within a bounded wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_replica_serves_reads_without_a_new_write() {
    let net = MemNetwork::new();
    let voters: Vec<ReplicaId> = (1..=3).map(ReplicaId).collect();
    let (mut nodes, logs, elections) = start_restartable(&net, &voters, 131).await;
    let leader = wait_for_leader(&nodes, None).await;
    for i in 0..20u32 {
        nodes[leader]
            .node
            .write(Bytes::from(format!("w{i}")))
            .bounded()
            .await
            .expect("write commits");
    }
    let f = (leader + 1) % 3;
    wait_applied(&nodes[f], b"w19").await;
    nodes[f].node.shutdown().bounded().await;

    let options = DriverOptions {
        seed: 7,
        ..DriverOptions::default()
    };
    let (log, election, sm) = (logs[f].clone(), elections[f].clone(), nodes[f].sm.clone());
    let cfg = test_config(voters[f], &voters);
    nodes[f] = start_with_sm(&net, cfg, log, election, sm, options).await;
    let read = tokio::time::timeout(
        Duration::from_secs(10),
        nodes[f].node.read(ReadMode::Linearizable),
    )
    .await;
    let permit = match read {
        Ok(Ok(permit)) => permit,
        Ok(Err(e)) => panic!("the read failed: {e:?}"),
        Err(_) => panic!("the read did not complete within 10 s"),
    };
    assert!(
        permit.offset.0 >= 21,
        "the read covers every acknowledged write: {}",
        permit.offset
    );
    let status = nodes[f].node.status().await.expect("status");
    assert_eq!(status.role, Role::Follower);
    for n in &nodes {
        n.node.shutdown().bounded().await;
    }
}

/// Goal: a write session's batches take effect in the order sent, even when an earlier batch
/// reaches the leader late. Regression: a forward that timed out could still arrive after the
/// caller's next batch and be applied after it (one connection's writes out of order). Method:
/// on virtual time, the follower's messages to the leader are held for 1.5 s while batch A is
/// forwarded (its forward times out after 0.5 s: outcome unknown); batch B then commits; when
/// A finally arrives, the leader must drop it unapplied.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_late_batch_of_a_session_is_dropped_not_applied_after_a_later_one() {
    use raft_core::driver::WriteSession;
    use raft_core::mem::transport::Delivery;
    use std::sync::atomic::{AtomicBool, Ordering};

    let net = MemNetwork::new();
    let voters: Vec<ReplicaId> = (1..=3).map(ReplicaId).collect();
    let hold = Arc::new(AtomicBool::new(false));
    let mut nodes = Vec::new();
    for id in &voters {
        let mut cfg = test_config(*id, &voters);
        // Long enough that held fetches do not start an election.
        cfg.fetch_timeout = Duration::from_secs(5);
        let options = DriverOptions {
            seed: u64::from(id.0) * 17,
            forward_timeout: Duration::from_millis(500),
            ..DriverOptions::default()
        };
        let (log, election) = (Arc::new(MemLog::new()), Arc::new(MemElectionStore::new()));
        nodes.push(start_on(&net, cfg, log, election, options).await);
    }
    let leader = wait_for_leader(&nodes, None).await;
    let follower = (leader + 1) % 3;
    let (l_id, f_id) = (nodes[leader].node.id(), nodes[follower].node.id());
    let held = hold.clone();
    net.set_link_model(Arc::new(move |from, to| {
        if held.load(Ordering::SeqCst) && from == f_id && to == l_id {
            Delivery::After(Duration::from_millis(1_500))
        } else {
            Delivery::After(Duration::ZERO)
        }
    }));
    let mut session = WriteSession::new();
    let warm = session
        .write_batch(&nodes[follower].node, vec![Bytes::from_static(b"warm-up")])
        .bounded()
        .await;
    assert!(warm[0].is_ok(), "{warm:?}");

    hold.store(true, Ordering::SeqCst);
    let node = nodes[follower].node.clone();
    let a = tokio::spawn(async move {
        let r = session
            .write_batch(&node, vec![Bytes::from_static(b"A")])
            .bounded()
            .await;
        (session, r)
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    hold.store(false, Ordering::SeqCst);
    let (mut session, a) = a.await.unwrap();
    assert!(
        matches!(&a[0], Err(WriteError::Unknown(_))),
        "A's forward timed out: {a:?}"
    );
    let b = session
        .write_batch(&nodes[follower].node, vec![Bytes::from_static(b"B")])
        .bounded()
        .await;
    assert!(b[0].is_ok(), "B commits: {b:?}");
    // A reaches the leader after B was proposed.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let applied: Vec<Bytes> = nodes[leader]
        .sm
        .applied
        .lock()
        .unwrap()
        .iter()
        .map(|(_, p)| p.clone())
        .filter(|p| p == "A" || p == "B")
        .collect();
    assert_eq!(
        applied,
        vec![Bytes::from_static(b"B")],
        "A was dropped, not applied after B"
    );
    for n in &nodes {
        n.node.shutdown().bounded().await;
    }
}

/// Goal: a write truncated from one replica is not reported lost while another replica may
/// still get it committed (review F3). Method (5 voters, virtual time): the leader A and one
/// follower B are cut off from the other three, and A appends W, which only B fetches. The three
/// elect X; X is cut from the other two before they fetch its first record. The partition
/// becomes {A, X} | {B, Y, Z}: A follows X and truncates W, while B, whose log is the longest,
/// wins the next epoch with Y and Z and commits W. W's writer on A must not be told "lost":
/// it gets committed (A applies W once it rejoins) or unknown, and W is in the committed log.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_write_truncated_on_its_leader_but_committed_elsewhere_is_not_reported_lost() {
    use raft_core::mem::transport::Delivery;

    let net = MemNetwork::new();
    net.set_link_model(Arc::new(|_, _| Delivery::After(Duration::from_millis(2))));
    let voters: Vec<ReplicaId> = (1..=5).map(ReplicaId).collect();
    let mut nodes = Vec::new();
    for id in &voters {
        nodes.push(start_node(&net, test_config(*id, &voters)).await);
    }
    let a = wait_for_leader(&nodes, None).await;
    let ids: Vec<ReplicaId> = nodes.iter().map(|n| n.node.id()).collect();
    let b = (a + 1) % 5;
    let rest: Vec<usize> = (0..5).filter(|i| *i != a && *i != b).collect();
    for &i in &[a, b] {
        for &j in &rest {
            net.cut_both(ids[i], ids[j]);
        }
    }
    let leader = nodes[a].node.clone();
    let w = tokio::spawn(async move { leader.propose(Bytes::from_static(b"W")).bounded().await });
    // W reaches B and no one else.
    let a_end = loop {
        let (sa, sb) = (
            nodes[a].node.status().await.unwrap(),
            nodes[b].node.status().await.unwrap(),
        );
        if sa.log_end.offset > sa.high_watermark && sb.durable_end >= sa.log_end.offset {
            break sa.log_end;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    };
    // The three elect one of them; it is cut from the other two at once.
    let x = 'elected: loop {
        for &i in &rest {
            let s = nodes[i].node.status().await.unwrap();
            if s.role == Role::Leader {
                break 'elected i;
            }
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    };
    let yz: Vec<usize> = rest.iter().copied().filter(|i| *i != x).collect();
    for &y in &yz {
        net.cut_both(ids[x], ids[y]);
    }
    let x_epoch = nodes[x].node.status().await.unwrap().epoch;
    for &y in &yz {
        let s = nodes[y].node.status().await.unwrap();
        assert!(
            s.log_end.epoch < x_epoch,
            "{} must not hold X's first record yet: {:?}",
            ids[y],
            s.log_end
        );
    }
    // {A, X} | {B, Y, Z}.
    net.heal_all();
    for &i in &[a, x] {
        for &j in [b].iter().chain(&yz) {
            net.cut_both(ids[i], ids[j]);
        }
    }
    // A follows X and truncates W.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let s = nodes[a].node.status().await.unwrap();
        if s.log_end.offset < a_end.offset || s.log_end.epoch >= x_epoch {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "A never truncated W"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // B leads a later epoch and commits W with Y and Z.
    let w_offset = a_end.offset.0 - 1;
    loop {
        let applied = nodes[b].sm.applied.lock().unwrap().clone();
        if applied.iter().any(|(o, p)| *o == w_offset && p == "W") {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "B did not commit W: {:?}",
            nodes[b].node.status().await
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    net.heal_all();
    let outcome = tokio::time::timeout(Duration::from_secs(30), w)
        .await
        .expect("W's writer gets an answer")
        .unwrap();
    match &outcome {
        Ok(c) => assert_eq!(c.id.offset.0, w_offset, "committed where B committed it"),
        Err(e) => assert!(
            !e.is_definite_failure(),
            "W was committed, so it must not be reported as not applied: {e:?}"
        ),
    }
    for n in &nodes {
        n.node.shutdown().bounded().await;
    }
}

/// Goal: writes pending on a deposed leader whose log is then replaced by a snapshot get an
/// answer (review F6): they are unknown to it, not left waiting forever. Method (3 voters,
/// virtual time, snapshots every 10 records): the leader is isolated and takes 5 proposals it
/// cannot commit; the other two elect a leader and commit 60 writes, snapshotting and purging
/// their logs past the old leader's tail. After healing, the old leader installs a snapshot:
/// its 5 writers must hear "unknown: a snapshot replaced the log" at once.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn writes_pending_below_an_installed_snapshot_are_answered_unknown() {
    use raft_core::driver::Uncertain;

    let net = MemNetwork::new();
    let voters: Vec<ReplicaId> = (1..=3).map(ReplicaId).collect();
    let mut nodes = Vec::new();
    for id in &voters {
        let mut cfg = test_config(*id, &voters);
        cfg.snapshot_after_records = 10;
        cfg.snapshot_log_retention = 2;
        nodes.push(start_node(&net, cfg).await);
    }
    let old = wait_for_leader(&nodes, None).await;
    let ids: Vec<ReplicaId> = nodes.iter().map(|n| n.node.id()).collect();
    for j in (0..3).filter(|j| *j != old) {
        net.cut_both(ids[old], ids[j]);
    }
    let pending: Vec<_> = (0..5)
        .map(|i| {
            let node = nodes[old].node.clone();
            tokio::spawn(async move {
                node.propose(Bytes::from(format!("pending-{i}")))
                    .bounded()
                    .await
            })
        })
        .collect();
    let new = wait_for_leader(&nodes, Some(old)).await;
    for i in 0..60u32 {
        nodes[new]
            .node
            .write(Bytes::from(format!("after-{i}")))
            .bounded()
            .await
            .expect("the majority commits");
    }
    let s = nodes[new].node.status().await.unwrap();
    assert!(s.log_start.0 > 10, "the new leader purged its log: {s:?}");
    let healed = tokio::time::Instant::now();
    net.heal_all();
    for p in pending {
        let r = tokio::time::timeout(Duration::from_secs(30), p)
            .await
            .expect("every pending write gets an answer")
            .unwrap();
        assert_eq!(r, Err(WriteError::Unknown(Uncertain::Snapshotted)));
    }
    assert!(
        healed.elapsed() < Duration::from_secs(1),
        "answered when the snapshot was installed, not by a timeout: {:?}",
        healed.elapsed()
    );
    for n in &nodes {
        n.node.shutdown().bounded().await;
    }
}
