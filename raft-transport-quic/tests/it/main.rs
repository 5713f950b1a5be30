//! Integration tests of the QUIC transport on loopback with ephemeral ports: the raft-core
//! transport conformance suite, TLS identity checks, frame limits, version refusal, a peer
//! killed and restarted in a child process (`crash`), and hosts that run many groups over one
//! transport each (`groups`).
//!
//! Every test waits for events under timeouts; none sleeps.

use std::collections::BTreeMap;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use raft_core::codec::wire::{self, WIRE_VERSION};
use raft_core::codec::DecodeError;
use raft_core::io::{RequestHandler, Transport, TransportError};
use raft_core::message::{
    EndQuorumEpochRequest, FetchRequest, FetchResponse, ReadBarrier, Request, Response,
    VoteRequest, VoteResponse,
};
use raft_core::testing::transport::{run_all, TransportBuilder, TransportSet};
use raft_core::{Epoch, Offset, OffsetAndEpoch, Record, RecordKind, ReplicaId};
use raft_transport_quic::certs::{self, CaMaterial, Validity};
use raft_transport_quic::{QuicConfig, QuicTransport, TlsMaterial};

mod crash;
mod groups;

const T: Duration = Duration::from_secs(10);

fn tls(ca: &CaMaterial, node: certs::NodeMaterial) -> TlsMaterial {
    TlsMaterial {
        ca_cert_pem: ca.cert_pem.clone(),
        cert_pem: node.cert_pem,
        key_pem: node.key_pem,
    }
}

fn loopback() -> UdpSocket {
    UdpSocket::bind("127.0.0.1:0").expect("bind loopback")
}

fn config(id: u32, tls: TlsMaterial, peers: &[(u32, SocketAddr)]) -> QuicConfig {
    let peers = peers
        .iter()
        .map(|(id, addr)| (ReplicaId(*id), *addr))
        .collect::<BTreeMap<_, _>>();
    let mut config = QuicConfig::new(ReplicaId(id), "127.0.0.1:0".parse().unwrap(), peers, tls);
    config.connect_timeout = Duration::from_secs(2);
    config
}

/// Binds a socket on `addr`, which a just-closed endpoint may still hold for a moment: the
/// release is an event we wait for (bounded), yielding to the runtime in between.
async fn rebind(addr: SocketAddr) -> UdpSocket {
    let started = std::time::Instant::now();
    loop {
        match UdpSocket::bind(addr) {
            Ok(socket) => return socket,
            Err(e) if started.elapsed() < T => {
                assert_eq!(e.kind(), std::io::ErrorKind::AddrInUse, "{e}");
                tokio::task::yield_now().await;
            }
            Err(e) => panic!("port {addr} never released: {e}"),
        }
    }
}

struct QuicSet {
    ca: CaMaterial,
    addrs: BTreeMap<ReplicaId, SocketAddr>,
    endpoints: BTreeMap<ReplicaId, Arc<QuicTransport>>,
}

impl QuicSet {
    fn start(&self, id: ReplicaId, socket: UdpSocket) -> Arc<QuicTransport> {
        let node = certs::generate_node(&self.ca, id).expect("node cert");
        let peers: Vec<(u32, SocketAddr)> = self
            .addrs
            .iter()
            .filter(|(p, _)| **p != id)
            .map(|(p, a)| (p.0, *a))
            .collect();
        let config = config(id.0, tls(&self.ca, node), &peers);
        Arc::new(QuicTransport::with_socket(config, socket).expect("transport"))
    }

    /// A fresh set of endpoints for `ids`, each knowing all the others.
    fn new(ids: &[ReplicaId]) -> QuicSet {
        let ca = certs::generate_ca().expect("ca");
        let sockets: Vec<(ReplicaId, UdpSocket)> = ids.iter().map(|id| (*id, loopback())).collect();
        let addrs = sockets
            .iter()
            .map(|(id, s)| (*id, s.local_addr().unwrap()))
            .collect();
        let mut set = QuicSet {
            ca,
            addrs,
            endpoints: BTreeMap::new(),
        };
        for (id, socket) in sockets {
            let endpoint = set.start(id, socket);
            set.endpoints.insert(id, endpoint);
        }
        set
    }

    /// Closes the endpoint of `id` and starts a new one on its address.
    async fn restart_endpoint(&mut self, id: ReplicaId) -> Arc<QuicTransport> {
        Transport::close(&*self.endpoints[&id]).await;
        let socket = rebind(self.addrs[&id]).await;
        let endpoint = self.start(id, socket);
        self.endpoints.insert(id, endpoint.clone());
        endpoint
    }
}

#[async_trait]
impl TransportSet for QuicSet {
    fn endpoint(&self, id: ReplicaId) -> Arc<dyn Transport> {
        self.endpoints[&id].clone()
    }

    async fn restart(&mut self, id: ReplicaId) -> Arc<dyn Transport> {
        self.restart_endpoint(id).await
    }
}

struct QuicBuilder;

#[async_trait]
impl TransportBuilder for QuicBuilder {
    async fn build(&self, ids: &[ReplicaId]) -> Box<dyn TransportSet> {
        Box::new(QuicSet::new(ids))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quic_transport_passes_the_conformance_suite() {
    run_all(&QuicBuilder).await;
}

/// Grants every vote and answers a Fetch with `max_bytes` of payload; counts what it handled.
#[derive(Default)]
struct Counting(AtomicUsize);

#[async_trait]
impl RequestHandler for Counting {
    async fn handle(&self, _from: ReplicaId, request: Request) -> Response {
        self.0.fetch_add(1, Ordering::SeqCst);
        match request {
            Request::Fetch(f) => Response::Fetch(FetchResponse {
                error: None,
                epoch: f.epoch,
                leader: None,
                high_watermark: None,
                diverging: None,
                records: vec![Record {
                    offset: f.fetch_offset,
                    epoch: f.epoch,
                    kind: RecordKind::Data,
                    payload: Bytes::from(vec![1; f.max_bytes as usize]),
                }],
                read_barrier: ReadBarrier(0),
                snapshot: None,
            }),
            _ => Response::Vote(VoteResponse {
                error: None,
                epoch: Epoch(1),
                leader: None,
                granted: true,
            }),
        }
    }
}

fn vote(candidate: u32, voter: u32) -> Request {
    Request::Vote(VoteRequest {
        epoch: Epoch(1),
        candidate: ReplicaId(candidate),
        voter: ReplicaId(voter),
        voter_directory: None,
        candidate_directory: None,
        last: OffsetAndEpoch::default(),
        pre_vote: true,
        leader_invited: false,
    })
}

/// Two nodes from `configs` served by counting handlers, already bound.
async fn pair(
    a: QuicConfig,
    a_socket: UdpSocket,
    b: QuicConfig,
    b_socket: UdpSocket,
) -> (QuicTransport, Arc<Counting>, QuicTransport, Arc<Counting>) {
    let a = QuicTransport::with_socket(a, a_socket).expect("transport a");
    let b = QuicTransport::with_socket(b, b_socket).expect("transport b");
    let (ha, hb) = (Arc::new(Counting::default()), Arc::new(Counting::default()));
    a.serve(ha.clone()).await.unwrap();
    b.serve(hb.clone()).await.unwrap();
    (a, ha, b, hb)
}

fn expect_refused(result: Result<Response, TransportError>) {
    match result {
        Err(TransportError::NotSent { .. }) => {}
        other => panic!("expected a refused connection, got {other:?}"),
    }
}

async fn call(t: &QuicTransport, to: u32, req: Request) -> Result<Response, TransportError> {
    tokio::time::timeout(T * 2, t.call(ReplicaId(to), req, T))
        .await
        .expect("call hung")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peer_with_a_certificate_from_another_ca_is_refused() {
    // Goal: a valid-looking certificate for a configured replica id, but from a foreign CA, is
    // refused in both directions. Method: node 2 uses a second CA for everything.
    let (ca, other_ca) = (certs::generate_ca().unwrap(), certs::generate_ca().unwrap());
    let (sa, sb) = (loopback(), loopback());
    let (aa, ab) = (sa.local_addr().unwrap(), sb.local_addr().unwrap());
    let a = config(
        1,
        tls(&ca, certs::generate_node(&ca, ReplicaId(1)).unwrap()),
        &[(2, ab)],
    );
    let b = config(
        2,
        tls(
            &other_ca,
            certs::generate_node(&other_ca, ReplicaId(2)).unwrap(),
        ),
        &[(1, aa)],
    );
    let (a, ha, b, hb) = pair(a, sa, b, sb).await;
    expect_refused(call(&b, 1, vote(2, 1)).await);
    expect_refused(call(&a, 2, vote(1, 2)).await);
    assert_eq!(ha.0.load(Ordering::SeqCst) + hb.0.load(Ordering::SeqCst), 0);
    assert!(a.metrics().errors.tls_refused >= 1, "{:?}", a.metrics());
    assert!(b.metrics().errors.tls_refused >= 1, "{:?}", b.metrics());
    a.close().await;
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peer_naming_an_unknown_replica_is_refused_when_only_listed_peers_are_accepted() {
    // Goal: with `accept_unlisted` off, a certificate from the cluster CA for a replica the
    // receiver does not know is refused. Method: node 9 dials node 1, whose only configured
    // peer is 2.
    let ca = certs::generate_ca().unwrap();
    let (sa, s9) = (loopback(), loopback());
    let aa = sa.local_addr().unwrap();
    let mut a = config(
        1,
        tls(&ca, certs::generate_node(&ca, ReplicaId(1)).unwrap()),
        &[(2, aa)],
    );
    a.accept_unlisted = false;
    let n9 = config(
        9,
        tls(&ca, certs::generate_node(&ca, ReplicaId(9)).unwrap()),
        &[(1, aa)],
    );
    let (a, ha, n9, _) = pair(a, sa, n9, s9).await;
    expect_refused(call(&n9, 1, vote(9, 1)).await);
    assert_eq!(ha.0.load(Ordering::SeqCst), 0);
    assert!(a.metrics().errors.tls_refused >= 1, "{:?}", a.metrics());
    assert_eq!(a.metrics().connections_accepted, 0);
    a.close().await;
    n9.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unlisted_replica_is_accepted_and_reached_back_at_its_address() {
    // Goal: by default a replica nobody configured, certified by the cluster CA, may call in
    // (it joins as an observer), and the receiver calls it back at the address it came from;
    // one with a foreign CA is still refused. Method: node 9 (knowing node 1) calls node 1,
    // whose only configured peer is 2; then node 1 calls node 9.
    let ca = certs::generate_ca().unwrap();
    let (sa, s9) = (loopback(), loopback());
    let (aa, a9) = (sa.local_addr().unwrap(), s9.local_addr().unwrap());
    let a = config(
        1,
        tls(&ca, certs::generate_node(&ca, ReplicaId(1)).unwrap()),
        &[(2, aa)],
    );
    let n9 = config(
        9,
        tls(&ca, certs::generate_node(&ca, ReplicaId(9)).unwrap()),
        &[(1, aa)],
    );
    let (a, ha, n9, h9) = pair(a, sa, n9, s9).await;
    assert_eq!(a.peer_addr(ReplicaId(9)), None);
    call(&n9, 1, vote(9, 1))
        .await
        .expect("node 1 answers node 9");
    assert_eq!(ha.0.load(Ordering::SeqCst), 1);
    assert_eq!(
        a.peer_addr(ReplicaId(9)),
        Some(a9),
        "learned from the connection"
    );
    call(&a, 9, vote(1, 9))
        .await
        .expect("node 9 is reached back");
    assert_eq!(h9.0.load(Ordering::SeqCst), 1);
    a.close().await;
    n9.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_voter_endpoint_becomes_the_way_to_that_voter() {
    // Goal: a voter added online is reached at the endpoint its voter set entry advertises,
    // without any configuration naming it; an endpoint that is no address changes nothing.
    let ca = certs::generate_ca().unwrap();
    let (sa, s9) = (loopback(), loopback());
    let (aa, a9) = (sa.local_addr().unwrap(), s9.local_addr().unwrap());
    let a = config(
        1,
        tls(&ca, certs::generate_node(&ca, ReplicaId(1)).unwrap()),
        &[],
    );
    let n9 = config(
        9,
        tls(&ca, certs::generate_node(&ca, ReplicaId(9)).unwrap()),
        &[(1, aa)],
    );
    let (a, _, n9, h9) = pair(a, sa, n9, s9).await;
    let entry = |endpoint: String| raft_core::Voter {
        directory: Some(raft_core::DirectoryId(9)),
        endpoint,
    };
    let set = |endpoint: String| {
        raft_core::VoterSet::from_entries([
            (ReplicaId(1), entry(aa.to_string())),
            (ReplicaId(9), entry(endpoint)),
        ])
        .unwrap()
    };
    a.voters_changed(&set("not an address".into()));
    assert_eq!(a.peer_addr(ReplicaId(9)), None);
    a.voters_changed(&set(a9.to_string()));
    assert_eq!(a.peer_addr(ReplicaId(9)), Some(a9));
    assert_eq!(a.peer_addr(ReplicaId(1)), None, "not its own peer");
    call(&a, 9, vote(1, 9)).await.expect("node 9 is reached");
    assert_eq!(h9.0.load(Ordering::SeqCst), 1);
    a.close().await;
    n9.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peer_presenting_another_replica_than_dialled_is_refused() {
    // Goal: dialling replica 2 and reaching a node whose certificate names replica 3 fails.
    // Method: node 1's config points replica 2 at node 3's address.
    let ca = certs::generate_ca().unwrap();
    let (s1, s3) = (loopback(), loopback());
    let (a1, a3) = (s1.local_addr().unwrap(), s3.local_addr().unwrap());
    let n1 = config(
        1,
        tls(&ca, certs::generate_node(&ca, ReplicaId(1)).unwrap()),
        &[(2, a3), (3, a3)],
    );
    let n3 = config(
        3,
        tls(&ca, certs::generate_node(&ca, ReplicaId(3)).unwrap()),
        &[(1, a1)],
    );
    let (n1, _, n3, h3) = pair(n1, s1, n3, s3).await;
    expect_refused(call(&n1, 2, vote(1, 2)).await);
    assert_eq!(h3.0.load(Ordering::SeqCst), 0);
    assert!(n1.metrics().errors.tls_refused >= 1, "{:?}", n1.metrics());
    // The same node dialled under its true id is accepted.
    call(&n1, 3, vote(1, 3))
        .await
        .expect("dialled under its own id");
    n1.close().await;
    n3.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificate_naming_several_replicas_is_refused() {
    // Goal: one certificate must not speak for two replicas. Method: node "2" presents a
    // certificate naming replicas 2 and 3, both configured at node 1.
    let ca = certs::generate_ca().unwrap();
    let (s1, s2) = (loopback(), loopback());
    let (a1, a2) = (s1.local_addr().unwrap(), s2.local_addr().unwrap());
    let n1 = config(
        1,
        tls(&ca, certs::generate_node(&ca, ReplicaId(1)).unwrap()),
        &[(2, a2), (3, a2)],
    );
    let both = certs::generate_node_with(&ca, &[ReplicaId(2), ReplicaId(3)], Validity::default());
    let n2 = config(2, tls(&ca, both.unwrap()), &[(1, a1)]);
    let (n1, h1, n2, _) = pair(n1, s1, n2, s2).await;
    expect_refused(call(&n2, 1, vote(2, 1)).await);
    assert_eq!(h1.0.load(Ordering::SeqCst), 0);
    assert!(n1.metrics().errors.tls_refused >= 1, "{:?}", n1.metrics());
    n1.close().await;
    n2.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_certificate_is_refused() {
    // Goal: an expired certificate is refused whether it is the dialler's or the dialled's.
    let ca = certs::generate_ca().unwrap();
    let expired = Validity {
        not_before: (2000, 1, 1),
        not_after: (2001, 1, 1),
    };
    let (s1, s2) = (loopback(), loopback());
    let (a1, a2) = (s1.local_addr().unwrap(), s2.local_addr().unwrap());
    let n1 = config(
        1,
        tls(&ca, certs::generate_node(&ca, ReplicaId(1)).unwrap()),
        &[(2, a2)],
    );
    let old = certs::generate_node_with(&ca, &[ReplicaId(2)], expired).unwrap();
    let n2 = config(2, tls(&ca, old), &[(1, a1)]);
    let (n1, h1, n2, h2) = pair(n1, s1, n2, s2).await;
    expect_refused(call(&n2, 1, vote(2, 1)).await);
    expect_refused(call(&n1, 2, vote(1, 2)).await);
    assert_eq!(h1.0.load(Ordering::SeqCst) + h2.0.load(Ordering::SeqCst), 0);
    assert!(n1.metrics().errors.tls_refused >= 2, "{:?}", n1.metrics());
    n1.close().await;
    n2.close().await;
}

/// Two good nodes; node 1 with frame limit `limit1`, node 2 with `limit2`.
async fn good_pair(
    limit1: usize,
    limit2: usize,
) -> (QuicTransport, Arc<Counting>, QuicTransport, Arc<Counting>) {
    let ca = certs::generate_ca().unwrap();
    let (s1, s2) = (loopback(), loopback());
    let (a1, a2) = (s1.local_addr().unwrap(), s2.local_addr().unwrap());
    let mut n1 = config(
        1,
        tls(&ca, certs::generate_node(&ca, ReplicaId(1)).unwrap()),
        &[(2, a2)],
    );
    let mut n2 = config(
        2,
        tls(&ca, certs::generate_node(&ca, ReplicaId(2)).unwrap()),
        &[(1, a1)],
    );
    n1.frame_bytes_max = limit1;
    n2.frame_bytes_max = limit2;
    pair(n1, s1, n2, s2).await
}

fn fetch(max_bytes: u32) -> Request {
    Request::Fetch(FetchRequest {
        epoch: Epoch(1),
        replica: ReplicaId(1),
        replica_directory: None,
        fetch_offset: Offset(0),
        last_fetched_epoch: Epoch(0),
        high_watermark: None,
        read_barrier: ReadBarrier(0),
        max_wait: Duration::ZERO,
        max_bytes,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_frames_are_refused_and_the_connection_stays_usable() {
    // Goal: a frame over the limit, in either direction, is a typed and counted error on its
    // stream only. Method: node 1 accepts 64 KiB frames and asks for a 1 MiB response; then it
    // sends a request larger than node 2's 64 KiB limit; between and after, small calls work
    // over the same connection.
    let limit = 64 << 10;
    let (n1, _, n2, _) = good_pair(limit, 16 << 20).await;
    call(&n1, 2, vote(1, 2)).await.expect("warm-up");
    match call(&n1, 2, fetch(1 << 20)).await {
        Err(TransportError::Codec {
            source: DecodeError::TooLarge { what, .. },
            ..
        }) => {
            assert_eq!(what, "response frame")
        }
        other => panic!("expected a too-large response, got {other:?}"),
    }
    call(&n1, 2, fetch(1024))
        .await
        .expect("small fetch after an oversized one");
    assert_eq!(n1.metrics().errors.frame_too_large, 1);
    assert_eq!(
        n1.metrics().connections_dialled,
        1,
        "the connection was kept"
    );
    n1.close().await;
    n2.close().await;

    let (n1, _, n2, h2) = good_pair(16 << 20, limit).await;
    call(&n1, 2, vote(1, 2)).await.expect("warm-up");
    let big = Request::EndQuorumEpoch(EndQuorumEpochRequest {
        epoch: Epoch(1),
        leader: ReplicaId(1),
        preferred_successors: vec![ReplicaId(2); 40_000],
    });
    match call(&n1, 2, big).await {
        Err(TransportError::Codec {
            source: DecodeError::TooLarge { .. },
            ..
        }) => {}
        other => panic!("expected a too-large request refusal, got {other:?}"),
    }
    assert_eq!(
        h2.0.load(Ordering::SeqCst),
        1,
        "the oversized request never reached the handler"
    );
    assert_eq!(n2.metrics().errors.frame_too_large, 1);
    call(&n1, 2, vote(1, 2))
        .await
        .expect("small call after an oversized request");
    assert_eq!(
        n1.metrics().connections_dialled,
        1,
        "the connection was kept"
    );
    n1.close().await;
    n2.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_wire_version_gets_a_version_error() {
    // Goal: a peer speaking another codec version learns so with a typed version error, and a
    // malformed frame is refused on its stream only. Method: raw frames via `call_frame`.
    let (n1, _, n2, h2) = good_pair(16 << 20, 16 << 20).await;
    let future = Bytes::from_static(&[WIRE_VERSION + 1, 0x01, 0, 0]);
    let reply = n1
        .call_frame(ReplicaId(2), future, T)
        .await
        .expect("version refusal");
    let err = wire::decode_response(reply, &Default::default()).unwrap_err();
    assert_eq!(
        err,
        DecodeError::UnsupportedVersion {
            what: "wire (refused by peer)",
            found: WIRE_VERSION + 1,
            supported: WIRE_VERSION
        }
    );
    assert_eq!(n2.metrics().errors.version_mismatch, 1);

    let garbage = Bytes::from_static(&[WIRE_VERSION, 0x77, 1, 2, 3]);
    match n1.call_frame(ReplicaId(2), garbage, T).await {
        Err(TransportError::Codec {
            source: DecodeError::InvalidValue { .. },
            ..
        }) => {}
        other => panic!("expected a malformed-frame refusal, got {other:?}"),
    }
    assert_eq!(n2.metrics().errors.malformed, 1);
    assert_eq!(h2.0.load(Ordering::SeqCst), 0);
    call(&n1, 2, vote(1, 2))
        .await
        .expect("the connection still serves");
    n1.close().await;
    n2.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_rpcs_bytes_and_latency() {
    let (n1, _, n2, _) = good_pair(16 << 20, 16 << 20).await;
    for _ in 0..3 {
        call(&n1, 2, vote(1, 2)).await.expect("vote");
    }
    call(&n1, 2, fetch(1000)).await.expect("fetch");
    // The inbound connection is reused for calls back.
    call(&n2, 1, vote(2, 1)).await.expect("vote back");
    let m1 = n1.metrics();
    let m2 = n2.metrics();
    assert_eq!(m1.rpcs_sent.vote, 3);
    assert_eq!(m1.rpcs_sent.fetch, 1);
    assert_eq!(m2.rpcs_received.total(), 4);
    assert_eq!(m1.latency.count, 4);
    assert_eq!(m1.latency.buckets.iter().sum::<u64>(), 4);
    assert!(
        m1.bytes_received > 1000 && m2.bytes_sent > 1000,
        "{m1:?} {m2:?}"
    );
    assert_eq!(m1.connections_dialled, 1);
    assert_eq!(
        m2.connections_dialled, 0,
        "node 2 called back over node 1's connection"
    );
    assert_eq!(m2.connections_accepted, 1);
    assert_eq!(
        call(&n1, 7, vote(1, 7)).await.unwrap_err().to_string(),
        "unknown peer r7"
    );
    assert_eq!(n1.metrics().errors.unknown_peer, 1);
    n1.close().await;
    n2.close().await;
}

/// Node 1 and node 2, with path MTU discovery up to `mtu` bytes on both ends when given.
async fn pair_with_mtu(
    mtu: Option<u16>,
) -> (QuicTransport, Arc<Counting>, QuicTransport, Arc<Counting>) {
    let ca = certs::generate_ca().unwrap();
    let (s1, s2) = (loopback(), loopback());
    let (a1, a2) = (s1.local_addr().unwrap(), s2.local_addr().unwrap());
    let node = |id: u32, peer: (u32, SocketAddr)| {
        let material = tls(&ca, certs::generate_node(&ca, ReplicaId(id)).unwrap());
        let mut c = config(id, material, &[peer]);
        if let Some(mtu) = mtu {
            c.mtu_upper_bound = mtu;
        }
        c
    };
    pair(node(1, (2, a2)), s1, node(2, (1, a1)), s2).await
}

/// Calls node 2 until the connection's path MTU passes `above` or `T` runs out; the MTU then.
async fn discovered_mtu(t1: &QuicTransport, above: u16) -> u16 {
    let started = std::time::Instant::now();
    loop {
        call(t1, 2, fetch(4096)).await.expect("call");
        let mtu = t1.path_mtu(ReplicaId(2)).await.expect("a live connection");
        if mtu > above || started.elapsed() > T {
            return mtu;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raised_mtu_bound_is_discovered_on_loopback() {
    // Goal: `mtu_upper_bound` takes effect above 1472 bytes. Path MTU discovery never probes
    // above what the peer advertises it accepts, so the bound must be advertised as well; it
    // once was not, and the setting silently did nothing.
    // Scenario: two nodes on loopback (MTU 65536) with bounds of 8952 bytes exchange fetches
    // until discovery raises the path MTU past Ethernet's, bounded by `T`.
    let (t1, _h1, _t2, _h2) = pair_with_mtu(Some(8952)).await;
    let mtu = discovered_mtu(&t1, 1500).await;
    assert!(mtu > 1500 && mtu <= 8952, "path MTU {mtu}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_mtu_bound_stays_at_ethernet_size() {
    // Goal: the default bound keeps packets Ethernet-sized (and quinn's receive buffer small).
    // Scenario: the same exchange with default configs on loopback, where discovery could go
    // far higher: after 20 calls the MTU is still at most 1452 bytes.
    let (t1, _h1, _t2, _h2) = pair_with_mtu(None).await;
    for _ in 0..20 {
        call(&t1, 2, fetch(4096)).await.expect("call");
    }
    let mtu = t1.path_mtu(ReplicaId(2)).await.expect("a live connection");
    assert!(mtu <= 1452, "path MTU {mtu}");
}
