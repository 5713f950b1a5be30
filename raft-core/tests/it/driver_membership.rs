//! Membership through the driver: `Node::change_voters` grows a standalone node into three
//! voters and removes the leader; a replica that joins late learns the voter set from the
//! snapshot it installs (the header every stored snapshot carries); an add that times out is
//! answered "may still complete", and completes.

use std::time::Duration;

use bytes::Bytes;
use raft_core::driver::{Node, VoterChangeError};
use raft_core::mem::transport::MemNetwork;
use raft_core::protocol::{MembershipError, VoterChange};
use raft_core::{Config, DirectoryId, ReplicaId, Role};

use crate::driver::{start_node, test_config, wait_for_leader, Bounded, TestNode};

fn dir(id: u32) -> DirectoryId {
    DirectoryId(0xD1EC_0000 + u128::from(id))
}

/// Node `id` with its own directory; node 1 bootstraps alone, the others join through it.
fn config(id: u32) -> Config {
    let mut cfg = test_config(ReplicaId(id), &[ReplicaId(1)]);
    cfg.directory = Some(dir(id));
    cfg.snapshot_after_records = 20;
    cfg.snapshot_log_retention = 5;
    cfg.snapshot_chunk_bytes = 256;
    cfg
}

fn ids(status: &raft_core::protocol::Status) -> Vec<(u32, Option<DirectoryId>)> {
    status
        .voter_set
        .iter()
        .map(|(id, v)| (id.0, v.directory))
        .collect()
}

/// Asks `leader` for `change` (each try bounded by `timeout`) until it is no longer refused
/// for a reason `retry` accepts; returns that answer. Gives up after 10 s.
async fn change_retrying(
    leader: &Node,
    change: &VoterChange,
    timeout: Duration,
    retry: impl Fn(&MembershipError) -> bool,
) -> Result<raft_core::driver::Committed, VoterChangeError> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match leader.change_voters(change.clone(), timeout).await {
            Err(VoterChangeError::Refused(e)) if retry(&e) => {}
            other => return other,
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{change:?} still refused after 10 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Asks `leader` to add `id`, retrying while it is not caught up; every wait is bounded.
async fn add(leader: &Node, id: u32) {
    let change = VoterChange::Add {
        id: ReplicaId(id),
        directory: dir(id),
        endpoint: format!("node-{id}"),
    };
    let retry = |e: &MembershipError| {
        matches!(
            e,
            MembershipError::NotCaughtUp { .. } | MembershipError::ChangeInProgress { .. }
        )
    };
    if let Err(e) = change_retrying(leader, &change, Duration::from_secs(5), retry).await {
        panic!("adding {id} failed: {e}");
    }
}

/// Waits until `node` acts on the voter set `want`.
async fn wait_for_set(node: &TestNode, want: &[(u32, Option<DirectoryId>)]) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let status = node.node.status().await.expect("running");
        if ids(&status) == want {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "voter set {:?} is not {want:?} after 10 s",
            ids(&status)
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standalone_node_grows_to_three_voters_and_its_leader_leaves() {
    let net = MemNetwork::new();
    let mut nodes = vec![start_node(&net, config(1)).await];
    assert_eq!(wait_for_leader(&nodes, None).await, 0);
    for i in 0..30u32 {
        nodes[0]
            .node
            .write(Bytes::from(format!("a{i}")))
            .bounded()
            .await
            .expect("the standalone voter commits alone");
    }
    for id in [2, 3] {
        nodes.push(start_node(&net, config(id)).await);
        add(&nodes[0].node, id).await;
    }
    let three = [(1, Some(dir(1))), (2, Some(dir(2))), (3, Some(dir(3)))];
    for n in &nodes {
        wait_for_set(n, &three).await;
    }
    // Each driver told its transport the set in force, endpoints included: the way a real
    // transport reaches voters that no static configuration names.
    for id in 1..=3 {
        let told = net.voters_told(ReplicaId(id)).expect("told at start");
        let endpoints: Vec<_> = told
            .iter()
            .map(|(v, e)| (v.0, e.endpoint.clone()))
            .collect();
        assert_eq!(
            endpoints,
            [
                (1, String::new()),
                (2, "node-2".into()),
                (3, "node-3".into())
            ],
            "the set node {id}'s transport was told"
        );
    }
    for i in 0..30u32 {
        nodes[0]
            .node
            .write(Bytes::from(format!("b{i}")))
            .bounded()
            .await
            .expect("three voters commit");
    }
    // The leader removes itself: answered once committed by the new set, then it resigns.
    nodes[0]
        .node
        .remove_voter(ReplicaId(1), Some(dir(1)), Duration::from_secs(5))
        .await
        .expect("the removal commits");
    let two = [(2, Some(dir(2))), (3, Some(dir(3)))];
    for n in &nodes[1..] {
        wait_for_set(n, &two).await;
    }
    let leader = wait_for_leader(&nodes, Some(0)).await;
    assert_ne!(leader, 0, "a remaining voter leads");
    for i in 0..30u32 {
        nodes[leader]
            .node
            .write(Bytes::from(format!("c{i}")))
            .bounded()
            .await
            .expect("the remaining voters commit");
    }
    let status = nodes[0].node.status().await.expect("running");
    assert_ne!(status.role, Role::Leader, "the removed node does not lead");
    // A late joiner starts far behind the leader's snapshot: it learns {2, 3} from it.
    let late = start_node(&net, config(4)).await;
    wait_for_set(&late, &two).await;
    assert!(
        late.node
            .metrics()
            .snapshots_installed
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 1,
        "the late node installed a snapshot"
    );
    // And an add refused for a key that does not fetch names what it saw.
    let refused = nodes[leader]
        .node
        .add_voter(ReplicaId(4), DirectoryId(9), "", Duration::from_secs(1))
        .await;
    assert!(
        matches!(
            refused,
            Err(VoterChangeError::Refused(MembershipError::NotCaughtUp { seen: Some(d), .. })) if d == dir(4)
        ),
        "{refused:?}"
    );
    for n in nodes.iter().chain(std::iter::once(&late)) {
        n.node.shutdown().bounded().await;
    }
}

/// Cuts node `id` off from nodes 1 to 3 both ways, so that what it shows is its own state.
fn isolate(net: &MemNetwork, id: u32) {
    for other in (1..=3).filter(|o| *o != id) {
        net.cut_both(ReplicaId(id), ReplicaId(other));
    }
}

/// Starts node `id` on kept stores (log, election state, snapshots) with a fresh state machine.
async fn start_kept(
    net: &MemNetwork,
    id: u32,
    stores: &(
        std::sync::Arc<raft_core::mem::MemLog>,
        std::sync::Arc<raft_core::mem::MemElectionStore>,
        std::sync::Arc<raft_core::mem::MemSnapshots>,
    ),
) -> TestNode {
    let options = raft_core::driver::DriverOptions {
        seed: u64::from(id) * 104_729,
        ..raft_core::driver::DriverOptions::default()
    };
    let kept = (
        stores.0.clone() as std::sync::Arc<dyn raft_core::io::LogStore>,
        stores.1.clone(),
        stores.2.clone(),
    );
    let sm = std::sync::Arc::new(crate::driver::Recorder::default());
    crate::driver::start_on_stores(net, config(id), kept, sm, options).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_node_recovers_its_voter_set_from_its_log_and_snapshot() {
    // Goal: a node restarted on its own storage acts at once on the voter set it had (not on
    // the bootstrap set of its configuration), both when the voter set records are still in
    // its log and when only its snapshot's header carries the set. Method: grow a standalone
    // node to three voters, restart node 3 and read its status before it can fetch anything;
    // then write until every log start is past the voter records, restart node 2 likewise.
    let net = MemNetwork::new();
    let stores: Vec<_> = (1..=3)
        .map(|_| {
            (
                std::sync::Arc::new(raft_core::mem::MemLog::new()),
                std::sync::Arc::new(raft_core::mem::MemElectionStore::new()),
                std::sync::Arc::new(raft_core::mem::MemSnapshots::new()),
            )
        })
        .collect();
    let mut nodes = Vec::new();
    for id in 1..=3u32 {
        nodes.push(start_kept(&net, id, &stores[id as usize - 1]).await);
    }
    assert_eq!(wait_for_leader(&nodes, None).await, 0);
    for id in [2, 3] {
        add(&nodes[0].node, id).await;
    }
    let three = [(1, Some(dir(1))), (2, Some(dir(2))), (3, Some(dir(3)))];
    for n in &nodes {
        wait_for_set(n, &three).await;
    }
    // Restart node 3: its log still holds the voter set records.
    nodes[2].node.abort().bounded().await;
    isolate(&net, 3);
    nodes[2] = start_kept(&net, 3, &stores[2]).await;
    let st = nodes[2].node.status().await.expect("running");
    assert_eq!(ids(&st), three, "the set recovered from the log");
    net.heal_all();
    // Write until the voter records are below every log start, then restart node 2.
    let leader = wait_for_leader(&nodes, None).await;
    for i in 0..200u32 {
        nodes[leader]
            .node
            .write(Bytes::from(format!("w{i}")))
            .bounded()
            .await
            .expect("the write commits");
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let st = nodes[1].node.status().await.expect("running");
        if st.log_start.0 > 100 && st.applied.0 >= 200 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "node 2 did not compact past the voter records: {st:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    nodes[1].node.abort().bounded().await;
    isolate(&net, 2);
    nodes[1] = start_kept(&net, 2, &stores[1]).await;
    let st = nodes[1].node.status().await.expect("running");
    assert!(
        st.log_start.0 > 100,
        "the voter records are gone from the log"
    );
    assert_eq!(
        ids(&st),
        three,
        "the set recovered from the snapshot header"
    );
    net.heal_all();
    for n in &nodes {
        n.node.shutdown().bounded().await;
    }
}

/// Goal: an add that times out is reported as "may still complete", and it does (protocol.md
/// 4.2: an add that times out and then completes). While it is uncommitted, a second change is
/// refused (one at a time, tied to the log); once the held acknowledgements arrive it commits
/// on every replica, and adding again says the replica already votes. Method (virtual time):
/// the followers' messages to the leader are held for 1.5 s, so the voters record for {1, 2,
/// 3, 4} reaches only the leader and node 4 (2 of the 4 it needs) before the 300 ms timeout.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn an_add_that_times_out_is_unknown_and_then_completes() {
    use raft_core::driver::{Uncertain, WriteError};
    use raft_core::mem::transport::Delivery;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    let net = MemNetwork::new();
    let voters: Vec<ReplicaId> = (1..=3).map(ReplicaId).collect();
    let mut nodes = Vec::new();
    for id in 1..=4 {
        let mut cfg = test_config(ReplicaId(id), &voters);
        cfg.directory = Some(dir(id));
        // Long enough that held fetches start no election and check-quorum holds.
        cfg.fetch_timeout = Duration::from_secs(5);
        nodes.push(start_node(&net, cfg).await);
    }
    let leader = wait_for_leader(&nodes[..3], None).await;
    let l_id = nodes[leader].node.id();
    for i in 0..10u32 {
        nodes[leader]
            .node
            .write(Bytes::from(format!("w{i}")))
            .bounded()
            .await
            .expect("three voters commit");
    }
    let hold = Arc::new(AtomicBool::new(true));
    let held = hold.clone();
    net.set_link_model(Arc::new(move |from, to| {
        if held.load(Ordering::SeqCst) && to == l_id && from.0 <= 3 && from != l_id {
            Delivery::After(Duration::from_millis(1_500))
        } else {
            Delivery::After(Duration::ZERO)
        }
    }));
    let add = VoterChange::Add {
        id: ReplicaId(4),
        directory: dir(4),
        endpoint: "node-4".into(),
    };
    // Node 4 is not held: once it has caught up, the add is accepted and then waits.
    let not_caught_up = |e: &MembershipError| matches!(e, MembershipError::NotCaughtUp { .. });
    let timed_out = change_retrying(
        &nodes[leader].node,
        &add,
        Duration::from_millis(300),
        not_caught_up,
    )
    .await;
    assert!(
        matches!(
            timed_out,
            Err(VoterChangeError::NotConfirmed(WriteError::Unknown(
                Uncertain::TimedOut
            )))
        ),
        "{timed_out:?}"
    );
    let second = VoterChange::Remove {
        id: ReplicaId(4),
        directory: Some(dir(4)),
    };
    let refused = nodes[leader]
        .node
        .change_voters(second, Duration::from_millis(300))
        .await;
    assert!(
        matches!(
            refused,
            Err(VoterChangeError::Refused(
                MembershipError::ChangeInProgress { .. }
            ))
        ),
        "a second change waits for the first: {refused:?}"
    );
    hold.store(false, Ordering::SeqCst);
    let four = [(1, None), (2, None), (3, None), (4, Some(dir(4)))];
    // In force everywhere at once (the set in the log, committed or not) ...
    for n in &nodes {
        wait_for_set(n, &four).await;
    }
    // ... and committed once the held acknowledgements arrive: until then a new change is
    // refused as in progress, after that adding 4 again says it already votes.
    let in_progress = |e: &MembershipError| matches!(e, MembershipError::ChangeInProgress { .. });
    let again = change_retrying(
        &nodes[leader].node,
        &add,
        Duration::from_secs(1),
        in_progress,
    )
    .await;
    assert!(
        matches!(
            again,
            Err(VoterChangeError::Refused(MembershipError::Invalid(
                raft_core::voters::VoterSetError::Duplicate(ReplicaId(4))
            )))
        ),
        "the add completed: {again:?}"
    );
    for n in &nodes {
        n.node.shutdown().bounded().await;
    }
}
