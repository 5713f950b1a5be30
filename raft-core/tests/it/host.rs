//! Hosts of many groups (`raft_core::driver::Host`) on the in-memory network and storage: each
//! group elects, commits and applies on its own; no record of one group reaches another's state
//! machine; a group some host does not run is turned away there; groups survive a restart of
//! every host through the engine's group list; a dropped group is gone.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use raft_core::driver::{DriverOptions, Host, HostError};
use raft_core::io::{HostTransport, TransportError};
use raft_core::mem::transport::MemNetwork;
use raft_core::mem::MemGroupStorage;
use raft_core::message::{DescribeQuorumRequest, Request};
use raft_core::{Config, DirectoryId, GroupId, Offset, ReplicaId, Voter, VoterSet};

use crate::driver::{test_config, Bounded, Recorder};

const HOSTS: [u32; 3] = [1, 2, 3];

/// Group `g`'s voters: every host for even groups, hosts 1 and 2 for odd ones (host 3 does not
/// run the odd groups at all).
fn voters_of(group: GroupId) -> Vec<ReplicaId> {
    if group.0.is_multiple_of(2) {
        HOSTS.iter().map(|h| ReplicaId(*h)).collect()
    } else {
        vec![ReplicaId(1), ReplicaId(2)]
    }
}

fn directory(host: ReplicaId) -> DirectoryId {
    DirectoryId(0xd1d0_0000 + u128::from(host.0))
}

fn founding_set(group: GroupId) -> VoterSet {
    VoterSet::from_entries(voters_of(group).into_iter().map(|id| {
        let voter = Voter {
            directory: Some(directory(id)),
            endpoint: String::new(),
        };
        (id, voter)
    }))
    .unwrap()
}

fn group_config(host: ReplicaId, group: GroupId) -> raft_core::ValidatedConfig {
    let mut cfg: Config = test_config(host, &voters_of(group));
    cfg.directory = Some(directory(host));
    cfg.validate().unwrap()
}

fn options(host: ReplicaId, group: GroupId) -> DriverOptions {
    DriverOptions {
        seed: u64::from(host.0) * 7919 + group.0 * 104_729,
        ..DriverOptions::default()
    }
}

/// One host with its storage and the state machines of its groups.
struct TestHost {
    host: Host,
    storage: MemGroupStorage,
    sms: BTreeMap<GroupId, Arc<Recorder>>,
}

impl TestHost {
    async fn start(net: &MemNetwork, id: ReplicaId, storage: MemGroupStorage) -> TestHost {
        let transport = Arc::new(net.endpoint(id));
        let host = Host::start(id, transport, Arc::new(storage.clone()))
            .await
            .unwrap();
        TestHost {
            host,
            storage,
            sms: BTreeMap::new(),
        }
    }

    async fn open(&mut self, group: GroupId) {
        let id = self.host.id();
        let sm = Arc::new(Recorder::default());
        self.host
            .open_group(
                group,
                group_config(id, group),
                sm.clone(),
                options(id, group),
            )
            .await
            .unwrap();
        self.sms.insert(group, sm);
    }

    fn payloads(&self, group: GroupId) -> Vec<Bytes> {
        let sm = &self.sms[&group];
        let applied = sm.applied.lock().unwrap();
        applied.iter().map(|(_, p)| p.clone()).collect()
    }
}

/// Starts three hosts and creates `groups` on them: formatted on their founding voters, then
/// opened.
async fn start_hosts(net: &MemNetwork, groups: &[GroupId]) -> Vec<TestHost> {
    let mut hosts = Vec::new();
    for h in HOSTS {
        let mut host = TestHost::start(net, ReplicaId(h), MemGroupStorage::new()).await;
        for g in groups {
            if voters_of(*g).contains(&ReplicaId(h)) {
                host.host.format_group(*g, &founding_set(*g)).await.unwrap();
                host.open(*g).await;
            }
        }
        hosts.push(host);
    }
    hosts
}

/// Writes `payload` to `group` through host 1 (forwarded to the group's leader wherever it is),
/// retrying while the group has no leader yet.
async fn write(hosts: &[TestHost], group: GroupId, payload: Bytes) -> Offset {
    let node = hosts[0].host.group(group).expect("host 1 runs every group");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        match node.write(payload.clone()).bounded().await {
            Ok(c) => return c.id.offset,
            Err(e) if e.is_definite_failure() && tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("write to {group} failed: {e}"),
        }
    }
}

/// Waits until every replica of `group` applied `through`.
async fn wait_applied(hosts: &[TestHost], group: GroupId, through: Offset) {
    for h in hosts {
        let Some(node) = h.host.group(group) else {
            continue;
        };
        let mut watch = node.watch();
        watch
            .wait_for(|s| s.applied > through)
            .bounded()
            .await
            .expect("the node runs");
    }
}

fn payload(group: GroupId, i: u32) -> Bytes {
    Bytes::from(format!("{group}-{i}"))
}

#[tokio::test(start_paused = true)]
async fn groups_elect_commit_and_apply_apart_and_survive_a_restart_of_every_host() {
    let net = MemNetwork::new();
    let groups: Vec<GroupId> = (1..=8).map(GroupId).collect();
    let mut hosts = start_hosts(&net, &groups).await;
    for (i, h) in hosts.iter().enumerate() {
        let runs: Vec<GroupId> = groups
            .iter()
            .copied()
            .filter(|g| voters_of(*g).contains(&ReplicaId(HOSTS[i])))
            .collect();
        assert_eq!(h.host.groups(), runs);
    }

    for g in &groups {
        let mut last = Offset::ZERO;
        for i in 0..5 {
            last = write(&hosts, *g, payload(*g, i)).await;
        }
        wait_applied(&hosts, *g, last).await;
    }
    for h in &hosts {
        for g in h.sms.keys() {
            let want: Vec<Bytes> = (0..5).map(|i| payload(*g, i)).collect();
            assert_eq!(h.payloads(*g), want, "{g} on host {}", h.host.id());
        }
    }

    // Host 3 does not run the odd groups: a request for one is turned away unhandled.
    let outsider = net.endpoint(ReplicaId(9));
    let asked = HostTransport::call(
        &outsider,
        ReplicaId(3),
        GroupId(1),
        Request::DescribeQuorum(DescribeQuorumRequest {}),
        Duration::from_secs(1),
    )
    .await;
    assert!(
        matches!(asked, Err(TransportError::NotSent { .. })),
        "{asked:?}"
    );

    // Every host stops and restarts on its storage: the engine lists its groups, and each
    // replays its log into a new state machine.
    for h in &hosts {
        h.host.shutdown().bounded().await;
    }
    let mut restarted = Vec::new();
    for h in &hosts {
        let id = h.host.id();
        let mut host = TestHost::start(&net, id, h.storage.reopen()).await;
        let stored = host.host.stored_groups().await.unwrap();
        let ran: Vec<GroupId> = h.sms.keys().copied().collect();
        assert_eq!(stored, ran, "the groups host {id} ran");
        for g in stored {
            host.open(g).await;
        }
        restarted.push(host);
    }
    hosts = restarted;
    for g in &groups {
        let last = write(&hosts, *g, payload(*g, 5)).await;
        wait_applied(&hosts, *g, last).await;
    }
    for h in &hosts {
        for g in h.sms.keys() {
            let want: Vec<Bytes> = (0..6).map(|i| payload(*g, i)).collect();
            assert_eq!(
                h.payloads(*g),
                want,
                "{g} on restarted host {}",
                h.host.id()
            );
        }
    }
    for h in &hosts {
        h.host.shutdown().bounded().await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_dropped_group_is_gone_and_a_group_runs_once_per_host() {
    let net = MemNetwork::new();
    let groups = [GroupId(2), GroupId(4)];
    let mut hosts = start_hosts(&net, &groups).await;
    let last = write(&hosts, GroupId(2), payload(GroupId(2), 0)).await;
    wait_applied(&hosts, GroupId(2), last).await;

    // A second replica of a running group, or one configured as another replica, is refused.
    let h1 = &hosts[0].host;
    let again = h1
        .open_group(
            GroupId(2),
            group_config(ReplicaId(1), GroupId(2)),
            Arc::new(Recorder::default()),
            options(ReplicaId(1), GroupId(2)),
        )
        .await;
    assert!(
        matches!(again, Err(HostError::Running(GroupId(2)))),
        "{again:?}"
    );
    let wrong = h1
        .open_group(
            GroupId(6),
            group_config(ReplicaId(2), GroupId(6)),
            Arc::new(Recorder::default()),
            options(ReplicaId(2), GroupId(6)),
        )
        .await;
    assert!(
        matches!(wrong, Err(HostError::WrongReplica { .. })),
        "{wrong:?}"
    );

    for h in &hosts {
        h.host.drop_group(GroupId(2)).bounded().await.unwrap();
        assert_eq!(h.host.groups(), vec![GroupId(4)]);
        assert_eq!(h.host.stored_groups().await.unwrap(), vec![GroupId(4)]);
    }
    let outsider = net.endpoint(ReplicaId(9));
    let asked = HostTransport::call(
        &outsider,
        ReplicaId(1),
        GroupId(2),
        Request::DescribeQuorum(DescribeQuorumRequest {}),
        Duration::from_secs(1),
    )
    .await;
    assert!(
        matches!(asked, Err(TransportError::NotSent { .. })),
        "{asked:?}"
    );

    // The other group goes on, and group 2 can be created anew, empty.
    let last = write(&hosts, GroupId(4), payload(GroupId(4), 0)).await;
    wait_applied(&hosts, GroupId(4), last).await;
    for h in &mut hosts {
        h.host
            .format_group(GroupId(2), &founding_set(GroupId(2)))
            .await
            .unwrap();
        h.open(GroupId(2)).await;
    }
    let last = write(&hosts, GroupId(2), payload(GroupId(2), 7)).await;
    wait_applied(&hosts, GroupId(2), last).await;
    for h in &hosts {
        assert_eq!(h.payloads(GroupId(2)), vec![payload(GroupId(2), 7)]);
    }
    for h in &hosts {
        h.host.shutdown().bounded().await;
    }
}
