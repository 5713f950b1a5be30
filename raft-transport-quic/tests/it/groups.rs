//! Hosts that run many groups over one `QuicTransport` each ([`HostTransport`]): every call
//! reaches the handler of its own group with its true sender, a group the callee does not run
//! is turned away unsent, single-group nodes and hosts meet on the default group, many groups'
//! calls share one connection per host pair, and voter endpoints from several groups feed one
//! peer table.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use raft_core::io::{GroupRequestHandler, HostTransport, TransportError};
use raft_core::message::{
    ReadIndexRequest, ReadIndexResponse, Request, Response, VoteRequest, VoteResponse,
};
use raft_core::testing::transport::{run_all_hosts, HostTransportBuilder, HostTransportSet};
use raft_core::{DirectoryId, Epoch, GroupId, Offset, OffsetAndEpoch, ReplicaId, Voter, VoterSet};
use raft_transport_quic::certs::{self, CaMaterial};
use raft_transport_quic::{QuicConfig, QuicTransport};
use tokio::sync::Barrier;

use crate::{config, loopback, tls, Counting, QuicSet, T};

#[async_trait]
impl HostTransportSet for QuicSet {
    fn endpoint(&self, id: ReplicaId) -> Arc<dyn HostTransport> {
        self.endpoints[&id].clone()
    }

    async fn restart(&mut self, id: ReplicaId) -> Arc<dyn HostTransport> {
        self.restart_endpoint(id).await
    }
}

struct QuicHostBuilder;

#[async_trait]
impl HostTransportBuilder for QuicHostBuilder {
    async fn build(&self, ids: &[ReplicaId]) -> Box<dyn HostTransportSet> {
        Box::new(QuicSet::new(ids))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quic_hosts_pass_the_conformance_suite() {
    run_all_hosts(&QuicHostBuilder).await;
}

/// What one group of one host was asked: `(from, epoch)` of every request it answered.
type Asked = Arc<Mutex<Vec<(ReplicaId, u32)>>>;

/// A host's handler: one log per group it runs; every other group is turned away. A Vote is
/// granted when its candidate is the authenticated sender, and its epoch is echoed; a
/// ReadIndex waits at the barrier, when there is one, before it is answered.
struct HostHandler {
    id: ReplicaId,
    groups: BTreeMap<GroupId, Asked>,
    barrier: Option<Arc<Barrier>>,
}

#[async_trait]
impl GroupRequestHandler for HostHandler {
    async fn handle(&self, from: ReplicaId, group: GroupId, request: Request) -> Option<Response> {
        let asked = self.groups.get(&group)?;
        match request {
            Request::Vote(v) => {
                asked.lock().unwrap().push((from, v.epoch.0));
                Some(Response::Vote(VoteResponse {
                    error: None,
                    epoch: v.epoch,
                    leader: Some(self.id),
                    granted: v.candidate == from,
                }))
            }
            Request::ReadIndex(r) => {
                asked.lock().unwrap().push((from, r.epoch.0));
                if let Some(barrier) = &self.barrier {
                    barrier.wait().await;
                }
                Some(Response::ReadIndex(ReadIndexResponse {
                    error: None,
                    epoch: r.epoch,
                    leader: Some(self.id),
                    read_offset: Some(Offset(u64::from(r.read_count))),
                }))
            }
            _ => None,
        }
    }
}

/// A host under test: its transport and what each of its groups was asked.
struct Host {
    transport: QuicTransport,
    asked: BTreeMap<GroupId, Asked>,
}

/// Hosts with the given ids, each running the groups listed beside it, each knowing all the
/// others as peers, served; `barrier` is shared by every host's handler.
async fn hosts(spec: &[(u32, &[u64])], barrier: Option<Arc<Barrier>>) -> BTreeMap<u32, Host> {
    let ca = certs::generate_ca().expect("ca");
    let sockets: Vec<(u32, UdpSocket)> = spec.iter().map(|(id, _)| (*id, loopback())).collect();
    let addrs: Vec<(u32, SocketAddr)> = sockets
        .iter()
        .map(|(id, s)| (*id, s.local_addr().unwrap()))
        .collect();
    let mut out = BTreeMap::new();
    for ((id, socket), (_, groups)) in sockets.into_iter().zip(spec) {
        let peers: Vec<(u32, SocketAddr)> =
            addrs.iter().filter(|(p, _)| *p != id).copied().collect();
        let transport =
            QuicTransport::with_socket(node_config(&ca, id, &peers), socket).expect("transport");
        let asked: BTreeMap<GroupId, Asked> = groups
            .iter()
            .map(|g| (GroupId(*g), Asked::default()))
            .collect();
        let handler = HostHandler {
            id: ReplicaId(id),
            groups: asked.clone(),
            barrier: barrier.clone(),
        };
        HostTransport::serve(&transport, Arc::new(handler))
            .await
            .expect("serve");
        out.insert(id, Host { transport, asked });
    }
    out
}

fn node_config(ca: &CaMaterial, id: u32, peers: &[(u32, SocketAddr)]) -> QuicConfig {
    let node = certs::generate_node(ca, ReplicaId(id)).expect("node cert");
    config(id, tls(ca, node), peers)
}

async fn host_call(
    t: &QuicTransport,
    to: u32,
    group: GroupId,
    request: Request,
) -> Result<Response, TransportError> {
    tokio::time::timeout(
        T * 2,
        HostTransport::call(t, ReplicaId(to), group, request, T),
    )
    .await
    .expect("call hung")
}

fn expect_granted(what: &str, result: Result<Response, TransportError>, epoch: u32, by: u32) {
    match result {
        Ok(Response::Vote(v)) => {
            assert!(v.granted, "{what}: the callee did not see the true sender");
            assert_eq!(v.epoch, Epoch(epoch), "{what}: another call's answer");
            assert_eq!(
                v.leader,
                Some(ReplicaId(by)),
                "{what}: answered by another host"
            );
        }
        other => panic!("{what}: expected a vote answer, got {other:?}"),
    }
}

fn expect_not_sent(what: &str, result: Result<Response, TransportError>) {
    match result {
        Err(TransportError::NotSent { .. }) => {}
        other => panic!("{what}: expected NotSent, got {other:?}"),
    }
}

async fn close_all(hosts: BTreeMap<u32, Host>) {
    for host in hosts.values() {
        HostTransport::close(&host.transport).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_reaches_its_groups_handler_and_a_group_not_run_is_not_sent() {
    // Goal: with three hosts running overlapping sets of groups, each call is answered by the
    // handler of the group it names on the host it names, which sees the caller as sender; a
    // call in a group the callee does not run is turned away unhandled (`NotSent`).
    // Method: every host calls every other in every group (the default one included), each
    // call with an epoch of its own; then each group's log is compared with the calls the
    // group's host should have answered.
    let spec: &[(u32, &[u64])] = &[(1, &[0, 1, 2, 3]), (2, &[1, 2, 3]), (3, &[2, 3, 4])];
    let hosts = hosts(spec, None).await;
    let mut expected: BTreeMap<(u32, GroupId), BTreeSet<(ReplicaId, u32)>> = BTreeMap::new();
    let mut epoch = 0;
    for (&from, host) in &hosts {
        for (&to, callee) in &hosts {
            if to == from {
                continue;
            }
            for group in (0..=4).map(GroupId) {
                epoch += 1;
                let what = format!("{from} -> {to} in {group}");
                let result = host_call(&host.transport, to, group, vote_at(from, to, epoch)).await;
                if callee.asked.contains_key(&group) {
                    expect_granted(&what, result, epoch, to);
                    expected
                        .entry((to, group))
                        .or_default()
                        .insert((ReplicaId(from), epoch));
                } else {
                    expect_not_sent(&what, result);
                }
            }
        }
    }
    for (&id, host) in &hosts {
        for (&group, asked) in &host.asked {
            let asked: BTreeSet<_> = asked.lock().unwrap().iter().copied().collect();
            let want = expected.remove(&(id, group)).unwrap_or_default();
            assert_eq!(asked, want, "what host {id} answered in {group}");
        }
    }
    assert!(expected.is_empty(), "answers nobody logged: {expected:?}");
    // Turned-away requests are not counted as received.
    let received: u64 = hosts
        .values()
        .map(|h| h.transport.metrics().rpcs_received.total())
        .sum();
    let answered: usize = hosts
        .values()
        .flat_map(|h| h.asked.values())
        .map(|a| a.lock().unwrap().len())
        .sum();
    assert_eq!(received, answered as u64);
    close_all(hosts).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_group_node_and_hosts_meet_on_the_default_group() {
    // Goal: a node served through `Transport` (one group, plain frames) and hosts served
    // through `HostTransport` interoperate on the default group; the node turns away every
    // other group, and a host that does not run the default group turns the node away.
    // Method: node 1, host 2 (default group and group 7), host 3 (group 7 only).
    use raft_core::io::Transport;
    let ca = certs::generate_ca().expect("ca");
    let (s1, s2, s3) = (loopback(), loopback(), loopback());
    let (a1, a2, a3) = (
        s1.local_addr().unwrap(),
        s2.local_addr().unwrap(),
        s3.local_addr().unwrap(),
    );
    let node = QuicTransport::with_socket(node_config(&ca, 1, &[(2, a2), (3, a3)]), s1).unwrap();
    let counting = Arc::new(Counting::default());
    Transport::serve(&node, counting.clone()).await.unwrap();
    let mut hosts = BTreeMap::new();
    for (id, socket, groups) in [(2, s2, vec![0, 7]), (3, s3, vec![7])] {
        let peers = [(1, a1), (2, a2), (3, a3)];
        let peers: Vec<_> = peers.into_iter().filter(|(p, _)| *p != id).collect();
        let transport = QuicTransport::with_socket(node_config(&ca, id, &peers), socket).unwrap();
        let asked: BTreeMap<GroupId, Asked> = groups
            .into_iter()
            .map(|g| (GroupId(g), Asked::default()))
            .collect();
        let handler = HostHandler {
            id: ReplicaId(id),
            groups: asked.clone(),
            barrier: None,
        };
        HostTransport::serve(&transport, Arc::new(handler))
            .await
            .unwrap();
        hosts.insert(id, Host { transport, asked });
    }
    let node_call = |to: u32, epoch: u32| {
        let request = vote_at(1, to, epoch);
        tokio::time::timeout(T * 2, Transport::call(&node, ReplicaId(to), request, T))
    };

    // The node reaches host 2's default group; host 3 runs no default group.
    expect_granted("node -> host 2", node_call(2, 1).await.unwrap(), 1, 2);
    assert_eq!(
        *hosts[&2].asked[&GroupId::DEFAULT].lock().unwrap(),
        vec![(ReplicaId(1), 1)]
    );
    expect_not_sent("node -> host 3", node_call(3, 2).await.unwrap());
    assert!(hosts[&3].asked[&GroupId(7)].lock().unwrap().is_empty());

    // Host 2 reaches the node in the default group, and only there.
    let host2 = &hosts[&2].transport;
    let result = host_call(host2, 1, GroupId::DEFAULT, vote_at(2, 1, 3)).await;
    match result {
        Ok(Response::Vote(v)) => assert!(v.granted),
        other => panic!("host 2 -> node: {other:?}"),
    }
    assert_eq!(counting.0.load(Ordering::SeqCst), 1);
    let result = host_call(host2, 1, GroupId(7), vote_at(2, 1, 1)).await;
    expect_not_sent("host 2 -> node in g7", result);
    assert_eq!(counting.0.load(Ordering::SeqCst), 1, "the node acted on g7");

    // Between hosts, group 7 still works.
    let result = host_call(&hosts[&3].transport, 2, GroupId(7), vote_at(3, 2, 4)).await;
    expect_granted("host 3 -> host 2 in g7", result, 4, 2);
    Transport::close(&node).await;
    close_all(hosts).await;
}

/// A pre-vote of `candidate` for `voter` in `epoch`.
fn vote_at(candidate: u32, voter: u32, epoch: u32) -> Request {
    Request::Vote(VoteRequest {
        epoch: Epoch(epoch),
        candidate: ReplicaId(candidate),
        voter: ReplicaId(voter),
        voter_directory: None,
        candidate_directory: None,
        last: OffsetAndEpoch::default(),
        pre_vote: true,
        leader_invited: false,
    })
}

fn read_index(epoch: u32) -> Request {
    Request::ReadIndex(ReadIndexRequest {
        epoch: Epoch(epoch),
        replica: ReplicaId(0),
        read_count: epoch,
        lease: false,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_groups_calls_in_flight_at_once_share_one_connection_per_host_pair() {
    // Goal: the calls of many groups are in flight at once between every pair of hosts, both
    // ways, and all travel over one connection per host pair.
    // Method: three hosts running groups 1 to 8 first call each other once (lower id to
    // higher, so that each pair's connection is dialled once and reused back); then every host
    // calls every other in every group 4 times at once, and every handler holds its answer at
    // a barrier until all of those requests have arrived, which happens only if none waits for
    // another. Then the connections counted over the whole run are one per pair.
    const GROUPS: u64 = 8;
    const PER_GROUP: u32 = 4;
    const IDS: [u32; 3] = [1, 2, 3];
    let total = IDS.len() * (IDS.len() - 1) * GROUPS as usize * PER_GROUP as usize;
    let groups: Vec<u64> = (1..=GROUPS).collect();
    let spec: Vec<(u32, &[u64])> = IDS.iter().map(|id| (*id, &groups[..])).collect();
    let barrier = Arc::new(Barrier::new(total));
    let hosts = Arc::new(hosts(&spec, Some(barrier)).await);

    for (i, (from, to)) in [(1, 2), (1, 3), (2, 3)].into_iter().enumerate() {
        let epoch = i as u32 + 1;
        let result = host_call(
            &hosts[&from].transport,
            to,
            GroupId(1),
            vote_at(from, to, epoch),
        )
        .await;
        expect_granted("warm-up", result, epoch, to);
    }

    let mut calls = tokio::task::JoinSet::new();
    let mut epoch = 1000;
    for from in IDS {
        for to in IDS.into_iter().filter(|to| *to != from) {
            for group in (1..=GROUPS).map(GroupId) {
                for _ in 0..PER_GROUP {
                    epoch += 1;
                    let hosts = hosts.clone();
                    calls.spawn(async move {
                        let t = &hosts[&from].transport;
                        let result = host_call(t, to, group, read_index(epoch)).await;
                        (from, to, group, epoch, result)
                    });
                }
            }
        }
    }
    let mut answered = 0;
    while let Some(joined) = tokio::time::timeout(T * 3, calls.join_next())
        .await
        .expect("calls hung")
    {
        let (from, to, group, epoch, result) = joined.expect("call task panicked");
        match result {
            Ok(Response::ReadIndex(r)) => {
                assert_eq!(r.read_offset, Some(Offset(u64::from(epoch))));
                assert_eq!(r.leader, Some(ReplicaId(to)));
            }
            other => panic!("{from} -> {to} in {group}: {other:?}"),
        }
        answered += 1;
    }
    assert_eq!(answered, total);
    for (&id, host) in hosts.iter() {
        for (group, asked) in &host.asked {
            let asked = asked.lock().unwrap();
            // Every other host's calls of this group, and host 1's or 2's warm-up in group 1.
            let warm_ups = match (id, group.0) {
                (2, 1) => 1,
                (3, 1) => 2,
                _ => 0,
            };
            let want = (IDS.len() - 1) * PER_GROUP as usize + warm_ups;
            assert_eq!(asked.len(), want, "host {id} in {group}");
        }
    }
    let metrics: Vec<_> = hosts.values().map(|h| h.transport.metrics()).collect();
    let dialled: u64 = metrics.iter().map(|m| m.connections_dialled).sum();
    let accepted: u64 = metrics.iter().map(|m| m.connections_accepted).sum();
    assert_eq!(
        (dialled, accepted),
        (3, 3),
        "one connection per host pair: {metrics:?}"
    );
    let hosts = Arc::try_unwrap(hosts).unwrap_or_else(|_| panic!("a call task outlived the test"));
    close_all(hosts).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_voter_endpoint_stays_while_any_group_names_it() {
    // Goal: voter endpoints of several groups feed one peer table; a host removed from one
    // group keeps the endpoint another group still names, and when groups disagree the
    // newest endpoint is used, falling back to another group's when its group drops it.
    // Method: host 1 knows no peer; groups 1 and 2 name host 9 at its address; group 2 then
    // names it at an address nobody serves, and drops it again.
    let ca = certs::generate_ca().expect("ca");
    let (s1, s9, elsewhere) = (loopback(), loopback(), loopback());
    let (a1, a9, gone) = (
        s1.local_addr().unwrap(),
        s9.local_addr().unwrap(),
        elsewhere.local_addr().unwrap(),
    );
    let host1 = QuicTransport::with_socket(node_config(&ca, 1, &[]), s1).unwrap();
    let host9 = QuicTransport::with_socket(node_config(&ca, 9, &[(1, a1)]), s9).unwrap();
    for t in [&host1, &host9] {
        let handler = HostHandler {
            id: t.id(),
            groups: [1, 2].map(|g| (GroupId(g), Asked::default())).into(),
            barrier: None,
        };
        HostTransport::serve(t, Arc::new(handler)).await.unwrap();
    }
    let voters = |nine: Option<SocketAddr>| {
        let entry = |addr: SocketAddr| Voter {
            directory: Some(DirectoryId(1)),
            endpoint: addr.to_string(),
        };
        let mut entries = vec![(ReplicaId(1), entry(a1))];
        entries.extend(nine.map(|a| (ReplicaId(9), entry(a))));
        VoterSet::from_entries(entries).unwrap()
    };
    let (g1, g2) = (GroupId(1), GroupId(2));
    HostTransport::voters_changed(&host1, g1, &voters(Some(a9)));
    HostTransport::voters_changed(&host1, g2, &voters(Some(a9)));
    assert_eq!(host1.peer_addr(ReplicaId(9)), Some(a9));
    assert_eq!(host1.peer_addr(ReplicaId(1)), None, "not its own peer");

    // Group 1 drops host 9; group 2 still names it, and calls in group 2 reach it.
    HostTransport::voters_changed(&host1, g1, &voters(None));
    assert_eq!(host1.peer_addr(ReplicaId(9)), Some(a9));
    let result = host_call(&host1, 9, g2, vote_at(1, 9, 5)).await;
    expect_granted("host 1 -> host 9 in g2", result, 5, 9);

    // Group 1 names it again; group 2 names a newer endpoint, then drops it: the endpoint
    // group 1 names is the one left.
    HostTransport::voters_changed(&host1, g1, &voters(Some(a9)));
    HostTransport::voters_changed(&host1, g2, &voters(Some(gone)));
    assert_eq!(host1.peer_addr(ReplicaId(9)), Some(gone));
    HostTransport::voters_changed(&host1, g2, &voters(None));
    assert_eq!(host1.peer_addr(ReplicaId(9)), Some(a9));
    let result = host_call(&host1, 9, g1, vote_at(1, 9, 6)).await;
    expect_granted("host 1 -> host 9 in g1", result, 6, 9);

    // No group names it any more: it keeps the address it had.
    HostTransport::voters_changed(&host1, g1, &voters(None));
    assert_eq!(host1.peer_addr(ReplicaId(9)), Some(a9));
    drop(elsewhere);
    HostTransport::close(&host1).await;
    HostTransport::close(&host9).await;
}
