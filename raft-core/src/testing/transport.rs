//! The transport conformance suite: the promises of [`Transport`] that every adapter keeps,
//! checked over a set of connected endpoints the adapter builds.
//!
//! An adapter implements [`TransportBuilder`] (a fresh set of endpoints per check) and
//! [`TransportSet`] (its endpoints, and a way to restart one), then calls [`run_all`]. The suite
//! serves every endpoint itself with a handler whose answers are a pure function of the request
//! and of the authenticated sender, so each response can be checked exactly.
//!
//! A [`HostTransport`] (one transport carrying the requests of many groups) passes the same
//! checks through [`run_all_hosts`]: every check of [`run_all`] with all calls in one group,
//! once in a routed group and once in the default one, and then [`groups_are_routed`]. Its
//! adapter implements [`HostTransportBuilder`] and [`HostTransportSet`].
//!
//! No check sleeps: each waits for the event it expects under a timeout, and a check that
//! cannot finish in time fails with the name of the promise it was checking.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use tokio::sync::watch;

use crate::io::{GroupRequestHandler, HostTransport, RequestHandler, Transport, TransportError};
use crate::message::{
    EpochResponse, FetchRequest, FetchResponse, ReadBarrier, ReadIndexRequest, ReadIndexResponse,
    Request, Response, VoteRequest, VoteResponse,
};
use crate::types::{Epoch, GroupId, Offset, OffsetAndEpoch, Record, RecordKind, ReplicaId};
use crate::voters::VoterSet;

/// A set of connected endpoints under test, one per replica id it was built with.
#[async_trait]
pub trait TransportSet: Send + Sync {
    /// The current endpoint of `id` (the suite calls `serve` on it exactly once).
    fn endpoint(&self, id: ReplicaId) -> Arc<dyn Transport>;

    /// Closes the endpoint of `id` and starts a new one for the same id, reachable by the others
    /// exactly as before (same address, same identity). The suite serves the new endpoint.
    async fn restart(&mut self, id: ReplicaId) -> Arc<dyn Transport>;
}

/// Builds connected endpoint sets for the suite.
#[async_trait]
pub trait TransportBuilder: Send + Sync {
    /// A fresh set of endpoints for `ids`, each knowing all the others as peers and no other id.
    async fn build(&self, ids: &[ReplicaId]) -> Box<dyn TransportSet>;
}

/// The replicas of every set the suite builds.
pub const SUITE_IDS: [ReplicaId; 3] = [ReplicaId(1), ReplicaId(2), ReplicaId(3)];

/// An id no endpoint of the suite knows.
pub const UNKNOWN_ID: ReplicaId = ReplicaId(99);

/// The size of the large Fetch response in [`large_response_does_not_block_small_ones`].
pub const LARGE_RESPONSE_BYTES: u32 = 8 << 20;

/// Payload bytes of each record the suite's handler returns for a Fetch.
const RECORD_PAYLOAD_BYTES: usize = 64 << 10;

/// The bound on any single step of a check.
const STEP_TIMEOUT: Duration = Duration::from_secs(20);

/// The deadline the suite gives each RPC that is expected to succeed.
const RPC_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs every check, each on a fresh set from `builder`. Panics naming the check that failed.
pub async fn run_all(builder: &dyn TransportBuilder) {
    round_trip_in_both_directions(builder).await;
    many_concurrent_rpcs(builder).await;
    large_response_does_not_block_small_ones(builder).await;
    deadline_expires(builder).await;
    peer_restart_reconnects(builder).await;
    unknown_peer_is_refused(builder).await;
    closed_transport_refuses_calls(builder).await;
}

/// The suite's request handler. A Vote is granted exactly when the candidate is the
/// authenticated sender; a Fetch returns `max_bytes` of records whose bytes derive from their
/// offset; a ReadIndex waits until the gate opens; everything else echoes its epoch.
struct SuiteHandler {
    id: ReplicaId,
    gate: watch::Receiver<bool>,
}

#[async_trait]
impl RequestHandler for SuiteHandler {
    async fn handle(&self, from: ReplicaId, request: Request) -> Response {
        match request {
            Request::Vote(r) => Response::Vote(VoteResponse {
                error: None,
                epoch: r.epoch,
                leader: Some(self.id),
                granted: r.candidate == from && r.voter == self.id,
            }),
            Request::Fetch(r) => Response::Fetch(FetchResponse {
                error: None,
                epoch: r.epoch,
                leader: Some(self.id),
                high_watermark: Some(r.fetch_offset),
                diverging: None,
                records: records(r.fetch_offset, r.max_bytes as usize),
                read_barrier: r.read_barrier,
                snapshot: None,
            }),
            Request::ReadIndex(r) => {
                let mut gate = self.gate.clone();
                // A dropped sender also releases the gate, so no handler outlives the check.
                let _ = gate.wait_for(|open| *open).await;
                Response::ReadIndex(ReadIndexResponse {
                    error: None,
                    epoch: r.epoch,
                    leader: Some(self.id),
                    read_offset: Some(Offset(u64::from(r.read_count))),
                })
            }
            other => {
                let epoch = match &other {
                    Request::BeginQuorumEpoch(r) => r.epoch,
                    Request::EndQuorumEpoch(r) => r.epoch,
                    _ => Epoch(0),
                };
                Response::BeginQuorumEpoch(EpochResponse {
                    error: None,
                    epoch,
                    leader: Some(self.id),
                })
            }
        }
    }
}

/// Records from `start` whose payloads add up to `bytes`, each filled with its offset's low byte.
fn records(start: Offset, bytes: usize) -> Vec<Record> {
    let mut out = Vec::with_capacity(bytes.div_ceil(RECORD_PAYLOAD_BYTES));
    let mut left = bytes;
    let mut offset = start;
    while left > 0 {
        let len = left.min(RECORD_PAYLOAD_BYTES);
        out.push(Record {
            offset,
            epoch: Epoch(1),
            kind: RecordKind::Data,
            payload: Bytes::from(vec![offset.0 as u8; len]),
        });
        left -= len;
        offset = offset.next();
    }
    out
}

fn vote(epoch: u32, candidate: ReplicaId, voter: ReplicaId) -> Request {
    Request::Vote(VoteRequest {
        epoch: Epoch(epoch),
        candidate,
        voter,
        voter_directory: Some(crate::DirectoryId(7)),
        candidate_directory: None,
        last: OffsetAndEpoch::default(),
        pre_vote: false,
        leader_invited: false,
    })
}

fn fetch(replica: ReplicaId, max_bytes: u32) -> Request {
    Request::Fetch(FetchRequest {
        epoch: Epoch(1),
        replica,
        replica_directory: Some(crate::DirectoryId(u128::MAX)),
        fetch_offset: Offset(10),
        last_fetched_epoch: Epoch(1),
        high_watermark: None,
        read_barrier: ReadBarrier(4),
        max_wait: Duration::ZERO,
        max_bytes,
    })
}

fn read_index(replica: ReplicaId, read_count: u32) -> Request {
    Request::ReadIndex(ReadIndexRequest {
        epoch: Epoch(1),
        replica,
        read_count,
        lease: false,
    })
}

/// Awaits `fut` or fails the check `what` after [`STEP_TIMEOUT`].
async fn within<T>(what: &str, fut: impl Future<Output = T>) -> T {
    match tokio::time::timeout(STEP_TIMEOUT, fut).await {
        Ok(v) => v,
        Err(_) => panic!("transport suite: {what}: no result within {STEP_TIMEOUT:?}"),
    }
}

/// A built set with every endpoint served. Dropping it opens the gate of pending ReadIndexes.
struct Harness {
    set: Box<dyn TransportSet>,
    gate: watch::Sender<bool>,
}

impl Harness {
    async fn new(builder: &dyn TransportBuilder) -> Harness {
        let set = within("build", builder.build(&SUITE_IDS)).await;
        let (gate, _) = watch::channel(false);
        let h = Harness { set, gate };
        for id in SUITE_IDS {
            h.serve(id, h.set.endpoint(id)).await;
        }
        h
    }

    async fn serve(&self, id: ReplicaId, endpoint: Arc<dyn Transport>) {
        let handler = Arc::new(SuiteHandler {
            id,
            gate: self.gate.subscribe(),
        });
        within("serve", endpoint.serve(handler))
            .await
            .unwrap_or_else(|e| panic!("transport suite: serve on {id} failed: {e}"));
    }

    fn ep(&self, id: ReplicaId) -> Arc<dyn Transport> {
        self.set.endpoint(id)
    }

    async fn close(self) {
        self.gate.send_replace(true);
        for id in SUITE_IDS {
            within("close", self.set.endpoint(id).close()).await;
        }
    }
}

fn expect_vote_granted(what: &str, resp: Response, epoch: u32, voter: ReplicaId) {
    match resp {
        Response::Vote(v) => {
            assert!(
                v.granted,
                "transport suite: {what}: the voter did not see the true sender"
            );
            assert_eq!(
                v.epoch,
                Epoch(epoch),
                "transport suite: {what}: response mismatched"
            );
            assert_eq!(
                v.leader,
                Some(voter),
                "transport suite: {what}: wrong responder"
            );
        }
        other => panic!("transport suite: {what}: expected a vote response, got {other:?}"),
    }
}

/// Every endpoint reaches every other, and the receiver sees the caller's own id as sender.
pub async fn round_trip_in_both_directions(builder: &dyn TransportBuilder) {
    let h = Harness::new(builder).await;
    for from in SUITE_IDS {
        for to in SUITE_IDS.into_iter().filter(|to| *to != from) {
            let what = format!("round trip {from} -> {to}");
            let epoch = from.0 * 10 + to.0;
            let resp = within(
                &what,
                h.ep(from).call(to, vote(epoch, from, to), RPC_TIMEOUT),
            )
            .await
            .unwrap_or_else(|e| panic!("transport suite: {what}: {e}"));
            expect_vote_granted(&what, resp, epoch, to);
        }
    }
    h.close().await;
}

/// Hundreds of RPCs in flight at once, both ways, each answered with its own response.
pub async fn many_concurrent_rpcs(builder: &dyn TransportBuilder) {
    let h = Harness::new(builder).await;
    let (a, b) = (SUITE_IDS[0], SUITE_IDS[1]);
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..200u32 {
        let (from, to) = if i % 2 == 0 { (a, b) } else { (b, a) };
        let ep = h.ep(from);
        tasks.spawn(async move { (i, to, ep.call(to, vote(i, from, to), RPC_TIMEOUT).await) });
    }
    let mut done = 0;
    while let Some(joined) = within("many concurrent rpcs", tasks.join_next()).await {
        let (i, to, result) = joined.expect("rpc task panicked");
        let what = format!("concurrent rpc {i}");
        let resp = result.unwrap_or_else(|e| panic!("transport suite: {what}: {e}"));
        expect_vote_granted(&what, resp, i, to);
        done += 1;
    }
    assert_eq!(done, 200);
    h.close().await;
}

/// A Fetch response of [`LARGE_RESPONSE_BYTES`] arrives intact while small RPCs on the same
/// pair keep completing; none of them waits for the large one.
pub async fn large_response_does_not_block_small_ones(builder: &dyn TransportBuilder) {
    let h = Harness::new(builder).await;
    let (a, b) = (SUITE_IDS[0], SUITE_IDS[1]);
    let big = {
        let ep = h.ep(a);
        tokio::spawn(async move {
            ep.call(b, fetch(a, LARGE_RESPONSE_BYTES), RPC_TIMEOUT)
                .await
        })
    };
    for i in 0..20 {
        let what = format!("small rpc {i} beside a large response");
        let resp = within(&what, h.ep(a).call(b, vote(i, a, b), RPC_TIMEOUT))
            .await
            .unwrap_or_else(|e| panic!("transport suite: {what}: {e}"));
        expect_vote_granted(&what, resp, i, b);
    }
    let resp = within("large response", big)
        .await
        .expect("large rpc task panicked")
        .unwrap_or_else(|e| panic!("transport suite: large response: {e}"));
    let Response::Fetch(f) = resp else {
        panic!("transport suite: large response: not a fetch")
    };
    let total: usize = f.records.iter().map(|r| r.payload.len()).sum();
    assert_eq!(
        total, LARGE_RESPONSE_BYTES as usize,
        "transport suite: large response size"
    );
    assert_eq!(
        f.records,
        records(Offset(10), LARGE_RESPONSE_BYTES as usize)
    );
    assert_eq!(f.read_barrier, ReadBarrier(4));
    h.close().await;
}

/// A call whose handler does not answer in time fails with `Timeout` close to its deadline,
/// and the endpoint keeps working afterwards.
pub async fn deadline_expires(builder: &dyn TransportBuilder) {
    let h = Harness::new(builder).await;
    let (a, b) = (SUITE_IDS[0], SUITE_IDS[1]);
    // Establish the path first so that the deadline measures the handler, not a handshake.
    let warm = within(
        "deadline warm-up",
        h.ep(a).call(b, vote(1, a, b), RPC_TIMEOUT),
    )
    .await;
    expect_vote_granted("deadline warm-up", warm.expect("warm-up rpc"), 1, b);

    let started = std::time::Instant::now();
    let deadline = Duration::from_millis(200);
    let result = within(
        "deadline expiry",
        h.ep(a).call(b, read_index(a, 7), deadline),
    )
    .await;
    match result {
        Err(TransportError::Timeout(peer)) => assert_eq!(peer, b),
        other => panic!("transport suite: deadline expiry: expected a timeout, got {other:?}"),
    }
    assert!(
        started.elapsed() < deadline + Duration::from_secs(5),
        "transport suite: deadline expiry: the call outlived its deadline by far"
    );
    let after = within(
        "after a deadline",
        h.ep(a).call(b, vote(2, a, b), RPC_TIMEOUT),
    )
    .await;
    expect_vote_granted(
        "after a deadline",
        after.expect("rpc after a deadline"),
        2,
        b,
    );

    // Once the handler may answer, a gated call with room to spare completes.
    h.gate.send_replace(true);
    let resp = within(
        "gated read index",
        h.ep(a).call(b, read_index(a, 7), RPC_TIMEOUT),
    )
    .await;
    match resp {
        Ok(Response::ReadIndex(r)) => assert_eq!(r.read_offset, Some(Offset(7))),
        other => panic!("transport suite: gated read index: {other:?}"),
    }
    h.close().await;
}

/// A peer that is down fails calls without hanging past their deadline; once it restarts, calls
/// in both directions succeed again within a few attempts (reconnection is the transport's job).
pub async fn peer_restart_reconnects(builder: &dyn TransportBuilder) {
    let mut h = Harness::new(builder).await;
    let (a, b) = (SUITE_IDS[0], SUITE_IDS[1]);
    let first = within(
        "before restart",
        h.ep(a).call(b, vote(1, a, b), RPC_TIMEOUT),
    )
    .await;
    expect_vote_granted("before restart", first.expect("rpc before restart"), 1, b);

    within("close peer", h.ep(b).close()).await;
    let down = within(
        "call to a down peer",
        h.ep(a).call(b, vote(2, a, b), RPC_TIMEOUT),
    )
    .await;
    match down {
        Err(
            TransportError::Unreachable { .. }
            | TransportError::NotSent { .. }
            | TransportError::Timeout(_),
        ) => {}
        other => panic!("transport suite: call to a down peer: expected an error, got {other:?}"),
    }

    let restarted = within("restart", h.set.restart(b)).await;
    h.serve(b, restarted).await;
    for (from, to) in [(a, b), (b, a)] {
        let what = format!("after restart {from} -> {to}");
        let mut last_error = None;
        let mut ok = false;
        // Calls on a connection that died with the old endpoint may fail while the transport
        // notices; a bounded number of retries, each with a full deadline, must get through.
        for attempt in 0..5 {
            let epoch = 100 + attempt;
            match within(
                &what,
                h.ep(from).call(to, vote(epoch, from, to), RPC_TIMEOUT),
            )
            .await
            {
                Ok(resp) => {
                    expect_vote_granted(&what, resp, epoch, to);
                    ok = true;
                    break;
                }
                Err(e) => last_error = Some(e),
            }
        }
        assert!(
            ok,
            "transport suite: {what}: never reconnected: {last_error:?}"
        );
    }
    h.close().await;
}

/// A call to an id that is not configured fails with `UnknownPeer`.
pub async fn unknown_peer_is_refused(builder: &dyn TransportBuilder) {
    let h = Harness::new(builder).await;
    let a = SUITE_IDS[0];
    let result = within(
        "unknown peer",
        h.ep(a)
            .call(UNKNOWN_ID, vote(1, a, UNKNOWN_ID), RPC_TIMEOUT),
    )
    .await;
    match result {
        Err(TransportError::UnknownPeer(id)) => assert_eq!(id, UNKNOWN_ID),
        other => panic!("transport suite: unknown peer: expected UnknownPeer, got {other:?}"),
    }
    h.close().await;
}

/// After `close`, an endpoint refuses calls with `Closed`.
pub async fn closed_transport_refuses_calls(builder: &dyn TransportBuilder) {
    let h = Harness::new(builder).await;
    let (a, b) = (SUITE_IDS[0], SUITE_IDS[1]);
    within("close", h.ep(a).close()).await;
    let result = within(
        "call after close",
        h.ep(a).call(b, vote(1, a, b), RPC_TIMEOUT),
    )
    .await;
    match result {
        Err(TransportError::Closed) => {}
        other => panic!("transport suite: call after close: expected Closed, got {other:?}"),
    }
    h.close().await;
}

/// A set of connected hosts under test, one per replica id it was built with: what
/// [`TransportSet`] is for [`Transport`].
#[async_trait]
pub trait HostTransportSet: Send + Sync {
    /// The current endpoint of `id` (the suite calls `serve` on it exactly once).
    fn endpoint(&self, id: ReplicaId) -> Arc<dyn HostTransport>;

    /// Closes the endpoint of `id` and starts a new one for the same id, reachable by the others
    /// exactly as before. The suite serves the new endpoint.
    async fn restart(&mut self, id: ReplicaId) -> Arc<dyn HostTransport>;
}

/// Builds connected host sets for the suite.
#[async_trait]
pub trait HostTransportBuilder: Send + Sync {
    /// A fresh set of endpoints for `ids`, each knowing all the others as peers and no other id.
    async fn build(&self, ids: &[ReplicaId]) -> Box<dyn HostTransportSet>;
}

/// The group other than the default one in which [`run_all_hosts`] runs the checks of
/// [`run_all`].
pub const ROUTED_GROUP: GroupId = GroupId(7);

/// Runs every check of [`run_all`] over hosts from `builder` with every call in
/// [`ROUTED_GROUP`], then again in [`GroupId::DEFAULT`], then [`groups_are_routed`]. Panics
/// naming the check that failed.
pub async fn run_all_hosts(builder: &dyn HostTransportBuilder) {
    for group in [ROUTED_GROUP, GroupId::DEFAULT] {
        run_all(&InGroup { builder, group }).await;
    }
    groups_are_routed(builder).await;
}

/// Hosts seen as single-group endpoints that run and call only `group`.
struct InGroup<'a> {
    builder: &'a dyn HostTransportBuilder,
    group: GroupId,
}

#[async_trait]
impl TransportBuilder for InGroup<'_> {
    async fn build(&self, ids: &[ReplicaId]) -> Box<dyn TransportSet> {
        let hosts = self.builder.build(ids).await;
        Box::new(GroupSet {
            hosts,
            group: self.group,
        })
    }
}

struct GroupSet {
    hosts: Box<dyn HostTransportSet>,
    group: GroupId,
}

#[async_trait]
impl TransportSet for GroupSet {
    fn endpoint(&self, id: ReplicaId) -> Arc<dyn Transport> {
        Arc::new(GroupView {
            host: self.hosts.endpoint(id),
            group: self.group,
        })
    }

    async fn restart(&mut self, id: ReplicaId) -> Arc<dyn Transport> {
        Arc::new(GroupView {
            host: self.hosts.restart(id).await,
            group: self.group,
        })
    }
}

/// One group of a host, as a [`Transport`].
struct GroupView {
    host: Arc<dyn HostTransport>,
    group: GroupId,
}

#[async_trait]
impl Transport for GroupView {
    async fn serve(&self, handler: Arc<dyn RequestHandler>) -> Result<(), TransportError> {
        let handler = Arc::new(OneGroup {
            group: self.group,
            handler,
        });
        self.host.serve(handler).await
    }

    async fn call(
        &self,
        to: ReplicaId,
        request: Request,
        timeout: Duration,
    ) -> Result<Response, TransportError> {
        self.host.call(to, self.group, request, timeout).await
    }

    async fn close(&self) {
        self.host.close().await;
    }

    fn voters_changed(&self, voters: &VoterSet) {
        self.host.voters_changed(self.group, voters);
    }
}

/// A single-group handler on a host that runs only that group.
struct OneGroup {
    group: GroupId,
    handler: Arc<dyn RequestHandler>,
}

#[async_trait]
impl GroupRequestHandler for OneGroup {
    async fn handle(&self, from: ReplicaId, group: GroupId, request: Request) -> Option<Response> {
        if group != self.group {
            return None;
        }
        Some(self.handler.handle(from, request).await)
    }
}

/// The groups each host of [`groups_are_routed`] runs: the first two run the default group
/// and groups 1 and 2, the third only group 1; nobody runs group 3.
fn routed_groups(host: ReplicaId) -> &'static [GroupId] {
    if host == SUITE_IDS[2] {
        &[GroupId(1)]
    } else {
        &[GroupId::DEFAULT, GroupId(1), GroupId(2)]
    }
}

/// Grants a vote exactly when its candidate is the authenticated sender, its voter this host,
/// and its epoch the number of the group it arrived in; turns away the groups the host does not
/// run.
struct RoutedHandler {
    id: ReplicaId,
}

#[async_trait]
impl GroupRequestHandler for RoutedHandler {
    async fn handle(&self, from: ReplicaId, group: GroupId, request: Request) -> Option<Response> {
        if !routed_groups(self.id).contains(&group) {
            return None;
        }
        let Request::Vote(r) = request else {
            return None;
        };
        Some(Response::Vote(VoteResponse {
            error: None,
            epoch: r.epoch,
            leader: Some(self.id),
            granted: r.candidate == from && r.voter == self.id && u64::from(r.epoch.0) == group.0,
        }))
    }
}

/// Each call reaches the handler of the group it names on the host it names, which sees the
/// caller as sender; a call in a group the callee does not run is turned away unhandled and
/// fails with `NotSent`.
pub async fn groups_are_routed(builder: &dyn HostTransportBuilder) {
    let hosts = within("build", builder.build(&SUITE_IDS)).await;
    for id in SUITE_IDS {
        within(
            "serve",
            hosts.endpoint(id).serve(Arc::new(RoutedHandler { id })),
        )
        .await
        .unwrap_or_else(|e| panic!("transport suite: serve on {id} failed: {e}"));
    }
    for from in SUITE_IDS {
        for to in SUITE_IDS.into_iter().filter(|to| *to != from) {
            for group in (0..=3).map(GroupId) {
                let what = format!("{from} -> {to} in {group}");
                let epoch = group.0 as u32;
                let caller = hosts.endpoint(from);
                let call = caller.call(to, group, vote(epoch, from, to), RPC_TIMEOUT);
                match within(&what, call).await {
                    Ok(resp) if routed_groups(to).contains(&group) => {
                        expect_vote_granted(&what, resp, epoch, to)
                    }
                    Err(TransportError::NotSent { .. }) if !routed_groups(to).contains(&group) => {}
                    other => panic!("transport suite: {what}: {other:?}"),
                }
            }
        }
    }
    for id in SUITE_IDS {
        within("close", hosts.endpoint(id).close()).await;
    }
}
