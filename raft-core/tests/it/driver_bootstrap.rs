//! Formatting and empty storage through the driver (W2, W9): a voter's storage is formatted
//! once with the founding voter set; a replica restarted on emptied storage with its unchanged
//! configuration never acts as the voter whose data it lost. A standalone founder refuses to
//! start; a founding voter of three comes back as an observer, and stays one across restarts,
//! until it is removed and added again with its new directory.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use raft_core::driver::{DriverOptions, Node, Parts, StartError};
use raft_core::mem::transport::MemNetwork;
use raft_core::mem::{MemElectionStore, MemLog, MemSnapshots};
use raft_core::{Config, DirectoryId, ReplicaId, Role, Voter, VoterSet};

use crate::driver::{start_on_stores, test_config, wait_for_leader, Bounded, Recorder, TestNode};

type Stores = (Arc<MemLog>, Arc<MemElectionStore>, Arc<MemSnapshots>);

fn new_stores() -> Stores {
    (
        Arc::new(MemLog::new()),
        Arc::new(MemElectionStore::new()),
        Arc::new(MemSnapshots::new()),
    )
}

fn voter_config(id: u32, voters: &[u32], directory: u128) -> Config {
    let ids: Vec<ReplicaId> = voters.iter().copied().map(ReplicaId).collect();
    let mut cfg = test_config(ReplicaId(id), &ids);
    cfg.directory = Some(DirectoryId(directory));
    cfg
}

/// Starts `cfg` on `stores` (formatting them first when they are new and `cfg` names this
/// replica a voter: the founders' first start).
async fn start(net: &MemNetwork, cfg: Config, stores: &Stores) -> TestNode {
    let kept = (
        stores.0.clone() as Arc<dyn raft_core::io::LogStore>,
        stores.1.clone(),
        stores.2.clone(),
    );
    let options = DriverOptions {
        seed: u64::from(cfg.id.0) * 7919,
        ..DriverOptions::default()
    };
    start_on_stores(net, cfg, kept, Arc::new(Recorder::default()), options).await
}

/// Starts `cfg` on `stores` exactly as given: no formatting, whatever the stores hold.
async fn start_unformatted(
    net: &MemNetwork,
    cfg: Config,
    stores: &Stores,
) -> Result<TestNode, StartError> {
    let sm = Arc::new(Recorder::default());
    let parts = Parts {
        log: stores.0.clone(),
        election: stores.1.clone(),
        transport: Arc::new(net.endpoint(cfg.id)),
        state_machine: sm.clone(),
        snapshots: stores.2.clone(),
    };
    let node = Node::start(cfg.validate().unwrap(), parts, DriverOptions::default()).await?;
    Ok(TestNode { node, sm })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standalone_founder_on_emptied_storage_refuses_to_start() {
    let net = MemNetwork::new();
    let cfg = voter_config(1, &[1], 0xA1);
    let first = start(&net, cfg.clone(), &new_stores()).await;
    wait_for_leader(std::slice::from_ref(&first), None).await;
    first
        .node
        .write(Bytes::from_static(b"k"))
        .bounded()
        .await
        .unwrap();
    first.node.shutdown().bounded().await;

    // The disk is replaced; the node restarts with its unchanged configuration.
    let refused = start_unformatted(&net, voter_config(1, &[1], 0xA2), &new_stores()).await;
    match refused {
        Err(StartError::NotFormatted(e)) => assert_eq!(e.id, ReplicaId(1)),
        Err(other) => panic!("refused for another reason: {other}"),
        Ok(_) => panic!("a standalone voter started on empty storage: a second cluster"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_founding_voter_on_emptied_storage_is_an_observer_until_added_again() {
    let net = MemNetwork::new();
    let voters = [1, 2, 3];
    let mut stores: Vec<Stores> = (0..3).map(|_| new_stores()).collect();
    // The founding set names every voter with its directory, as `raft-node format` writes it.
    let founding = VoterSet::from_entries(voters.iter().map(|id| {
        let voter = Voter {
            directory: Some(DirectoryId(0xB0 + u128::from(*id))),
            endpoint: String::new(),
        };
        (ReplicaId(*id), voter)
    }))
    .unwrap();
    let mut nodes = Vec::new();
    for id in voters {
        let s = &stores[id as usize - 1];
        raft_core::driver::format(&*s.2, &founding).await.unwrap();
        let cfg = voter_config(id, &voters, 0xB0 + u128::from(id));
        nodes.push(start_unformatted(&net, cfg, s).await.unwrap());
    }
    let leader = wait_for_leader(&nodes, None).await;
    let wiped = (leader + 1) % 3;
    let wiped_id = ReplicaId(wiped as u32 + 1);
    nodes[leader]
        .node
        .write(Bytes::from_static(b"before"))
        .bounded()
        .await
        .unwrap();

    // Its disk is emptied; it restarts with its unchanged configuration (a new directory).
    nodes[wiped].node.shutdown().bounded().await;
    stores[wiped] = new_stores();
    let cfg = voter_config(wiped_id.0, &voters, 0xC0);
    nodes[wiped] = start_unformatted(&net, cfg.clone(), &stores[wiped])
        .await
        .expect("starts as an observer");
    // It starts on its contacts (the others), and whatever it has fetched since names its old
    // directory: it is not a voter under its new one.
    let status = nodes[wiped].node.status().bounded().await.unwrap();
    assert_eq!(status.directory, Some(DirectoryId(0xC0)));
    assert!(
        !status.voter_set.is_voter(wiped_id, status.directory),
        "not a voter with its new directory: {:?}",
        status.voter_set
    );

    // It catches up as an observer: it learns the real set, which names its old directory.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let s = nodes[wiped].node.status().bounded().await.unwrap();
        if s.applied >= raft_core::Offset(2) && s.voter_set.contains_id(wiped_id) {
            assert_ne!(s.role, Role::Leader);
            assert_ne!(s.role, Role::Candidate);
            let entry = s.voter_set.get(wiped_id).unwrap();
            assert_eq!(
                entry.directory,
                Some(DirectoryId(0xB0 + u128::from(wiped_id.0)))
            );
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never caught up: {s:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // A second restart on the storage it has now keeps it an observer.
    nodes[wiped].node.shutdown().bounded().await;
    nodes[wiped] = start_unformatted(&net, cfg, &stores[wiped]).await.unwrap();
    let s = nodes[wiped].node.status().bounded().await.unwrap();
    assert!(
        !s.voter_set.is_voter(wiped_id, s.directory),
        "not a voter after a restart either: {:?}",
        s.voter_set
    );

    // The documented replacement: remove the old key, add the new one.
    let leader = wait_for_leader(&nodes, Some(wiped)).await;
    let old_dir = Some(DirectoryId(0xB0 + u128::from(wiped_id.0)));
    nodes[leader]
        .node
        .remove_voter(wiped_id, old_dir, Duration::from_secs(5))
        .bounded()
        .await
        .expect("removed");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let leader = wait_for_leader(&nodes, Some(wiped)).await;
        let added = nodes[leader]
            .node
            .add_voter(wiped_id, DirectoryId(0xC0), "", Duration::from_secs(2))
            .bounded()
            .await;
        if added.is_ok() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never added: {added:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let s = nodes[wiped].node.status().bounded().await.unwrap();
        if s.voter_set.is_voter(wiped_id, s.directory) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not a voter again: {s:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_rule_switched_off_the_emptied_standalone_founder_forks_a_cluster() {
    // The negative control of the first test (W2 as it was): the planted switch restores the
    // old start-up, and the emptied founder leads a one-voter cluster of its own at once.
    let net = MemNetwork::new();
    let mut cfg = voter_config(1, &[1], 0xA2);
    cfg.test_planted = Some(raft_core::planted::Planted::BootstrapOnEmptyDisk);
    let forked = start_unformatted(&net, cfg, &new_stores())
        .await
        .expect("the old rule starts it");
    wait_for_leader(std::slice::from_ref(&forked), None).await;
    forked.node.shutdown().bounded().await;
}

/// Three voters on storage from before formatting (an election state, no snapshot), so the
/// configured set is in force as static entries; each with its own directory.
async fn start_static_cluster(net: &MemNetwork, pin: bool) -> Vec<TestNode> {
    let mut nodes = Vec::new();
    for id in 1..=3u32 {
        let stores = new_stores();
        let old = raft_core::ElectionState {
            epoch: raft_core::Epoch(0),
            voted_for: None,
            voted_directory: None,
            leader: None,
        };
        raft_core::io::ElectionStore::save(&*stores.1, &old)
            .await
            .unwrap();
        let cfg = voter_config(id, &[1, 2, 3], 0xd0 + u128::from(id));
        let sm = Arc::new(Recorder::default());
        let parts = Parts {
            log: stores.0.clone(),
            election: stores.1.clone(),
            transport: Arc::new(net.endpoint(cfg.id)),
            state_machine: sm.clone(),
            snapshots: stores.2.clone(),
        };
        let options = DriverOptions {
            seed: u64::from(id) * 7919,
            pin_static_voters: pin,
            ..DriverOptions::default()
        };
        let node = Node::start(cfg.validate().unwrap(), parts, options)
            .await
            .unwrap();
        nodes.push(TestNode { node, sm });
    }
    nodes
}

fn keyed(ids: &[u32]) -> VoterSet {
    VoterSet::from_entries(ids.iter().map(|id| {
        let voter = Voter {
            directory: Some(DirectoryId(0xd0 + u128::from(*id))),
            endpoint: String::new(),
        };
        (ReplicaId(*id), voter)
    }))
    .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_static_voter_set_is_bound_to_the_voters_directories_in_place() {
    // Goal: a cluster on storage from before formatting (static voters, which count an emptied
    // disk as the voter it was) is upgraded without an operator: its leader binds every voter
    // to the directory it votes with, and every replica ends on the keyed set. With the
    // upgrade switched off the set stays static (the negative control).
    let net = MemNetwork::new();
    let nodes = start_static_cluster(&net, true).await;
    let leader = wait_for_leader(&nodes, None).await;
    nodes[leader]
        .node
        .write(Bytes::from_static(b"x"))
        .bounded()
        .await
        .unwrap();
    for n in &nodes {
        n.node
            .watch()
            .wait_for(|s| s.voters == keyed(&[1, 2, 3]))
            .bounded()
            .await
            .expect("the node runs");
    }
    for n in &nodes {
        n.node.shutdown().bounded().await;
    }

    let net = MemNetwork::new();
    let nodes = start_static_cluster(&net, false).await;
    let leader = wait_for_leader(&nodes, None).await;
    for _ in 0..20 {
        nodes[leader]
            .node
            .write(Bytes::from_static(b"y"))
            .bounded()
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for n in &nodes {
        let voters = n.node.watch().borrow().voters.clone();
        assert_eq!(voters, VoterSet::from_ids([1, 2, 3].map(ReplicaId)));
    }
    for n in &nodes {
        n.node.shutdown().bounded().await;
    }
}
