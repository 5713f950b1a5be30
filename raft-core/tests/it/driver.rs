//! The tokio driver end to end, in one process: three nodes on the in-memory transport and
//! in-memory storage. Goal: a library user's path (start, propose and await commit, status,
//! graceful shutdown with handover) works over the real `io` traits, not only in the simulator.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use raft_core::driver::{DriverOptions, Node, Parts, WriteError};
use raft_core::io::{read_to_end, BytesReader, SnapshotReader, StateMachine, StateMachineError};
use raft_core::mem::transport::MemNetwork;
use raft_core::mem::{MemElectionStore, MemLog, MemSnapshots};
use raft_core::protocol::{ProposeError, TransferError};
use raft_core::{Config, Offset, Record, RecordKind, ReplicaId, Role};

/// A state machine that records applied payloads and answers each with its offset.
#[derive(Default)]
pub(crate) struct Recorder {
    pub(crate) applied: Mutex<Vec<(u64, Bytes)>>,
    next: Mutex<Offset>,
}

#[async_trait]
impl StateMachine for Recorder {
    async fn applied(&self) -> Offset {
        *self.next.lock().unwrap()
    }

    async fn apply(
        &self,
        records: &[Record],
        responses: &mut Vec<Bytes>,
    ) -> Result<(), StateMachineError> {
        let mut applied = self.applied.lock().unwrap();
        let mut next = self.next.lock().unwrap();
        for r in records {
            assert_eq!(r.offset, *next, "records arrive in order without gaps");
            *next = r.offset.next();
            if r.kind == RecordKind::Data {
                applied.push((r.offset.0, r.payload.clone()));
            }
            responses.push(Bytes::from(r.offset.0.to_string()));
        }
        Ok(())
    }

    async fn snapshot(&self) -> Result<Box<dyn SnapshotReader>, StateMachineError> {
        let applied = self.applied.lock().unwrap();
        let mut out = Vec::new();
        out.extend_from_slice(&self.next.lock().unwrap().0.to_le_bytes());
        for (offset, payload) in applied.iter() {
            out.extend_from_slice(&offset.to_le_bytes());
            out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
            out.extend_from_slice(payload);
        }
        // Small chunks: the driver must carry a snapshot across chunk boundaries.
        Ok(Box::new(BytesReader::with_chunk_size(
            Bytes::from(out),
            100,
        )))
    }

    async fn restore(
        &self,
        applied: Offset,
        data: &mut dyn SnapshotReader,
    ) -> Result<(), StateMachineError> {
        let bad = |reason: &str| StateMachineError {
            offset: applied,
            reason: reason.to_string(),
        };
        let data = read_to_end(data, 1 << 30)
            .await
            .map_err(|e| bad(&e.to_string()))?;
        let word = |at: usize| -> Option<u64> {
            Some(u64::from_le_bytes(data.get(at..at + 8)?.try_into().ok()?))
        };
        let next = word(0).ok_or_else(|| bad("short snapshot"))?;
        if next != applied.0 {
            return Err(bad("snapshot covers another offset"));
        }
        let mut records = Vec::new();
        let mut at = 8;
        while at < data.len() {
            let offset = word(at).ok_or_else(|| bad("short entry"))?;
            let len = data
                .get(at + 8..at + 12)
                .map(|b| u32::from_le_bytes(b.try_into().unwrap()) as usize)
                .ok_or_else(|| bad("short entry"))?;
            let payload = data
                .get(at + 12..at + 12 + len)
                .ok_or_else(|| bad("short payload"))?;
            records.push((offset, Bytes::copy_from_slice(payload)));
            at += 12 + len;
        }
        *self.applied.lock().unwrap() = records;
        *self.next.lock().unwrap() = applied;
        Ok(())
    }
}

/// How long a test waits for any one driver call (write, propose, read, transfer, shutdown)
/// before it fails: on the paused clock this is virtual time, which the in-memory network keeps
/// moving even when replicas livelock (see `raft_core::mem::transport`).
pub(crate) const BOUND: Duration = Duration::from_secs(20);

/// Bounds a driver call's wait, so that a test never hangs on one: a call not answered within
/// [`BOUND`] fails the test, naming where it waited.
pub(crate) trait Bounded: std::future::Future + Sized {
    /// This future, failing the test if it takes longer than [`BOUND`].
    #[track_caller]
    fn bounded(self) -> impl std::future::Future<Output = Self::Output> {
        let at = std::panic::Location::caller();
        async move {
            match tokio::time::timeout(BOUND, self).await {
                Ok(output) => output,
                Err(_) => panic!("not answered within {BOUND:?}: the call at {at}"),
            }
        }
    }
}

impl<F: std::future::Future> Bounded for F {}

pub(crate) struct TestNode {
    pub(crate) node: Node,
    pub(crate) sm: Arc<Recorder>,
}

pub(crate) fn test_config(id: ReplicaId, voters: &[ReplicaId]) -> Config {
    let mut cfg = Config::new(id, voters.iter().copied());
    cfg.election_timeout = Duration::from_millis(150);
    cfg.fetch_timeout = Duration::from_millis(400);
    cfg.fetch_max_wait = Duration::from_millis(100);
    cfg.request_timeout = Duration::from_millis(300);
    cfg
}

pub(crate) async fn start_node(net: &MemNetwork, cfg: Config) -> TestNode {
    let options = DriverOptions {
        seed: u64::from(cfg.id.0) * 7919,
        ..DriverOptions::default()
    };
    start_on(
        net,
        cfg,
        Arc::new(MemLog::new()),
        Arc::new(MemElectionStore::new()),
        options,
    )
    .await
}

/// Starts a node on the given stores (kept by the caller to restart it on them) with a fresh
/// state machine.
pub(crate) async fn start_on(
    net: &MemNetwork,
    cfg: Config,
    log: Arc<dyn raft_core::io::LogStore>,
    election: Arc<MemElectionStore>,
    options: DriverOptions,
) -> TestNode {
    start_with_sm(
        net,
        cfg,
        log,
        election,
        Arc::new(Recorder::default()),
        options,
    )
    .await
}

/// As [`start_on`], with a given state machine (one that outlives a restart).
pub(crate) async fn start_with_sm(
    net: &MemNetwork,
    cfg: Config,
    log: Arc<dyn raft_core::io::LogStore>,
    election: Arc<MemElectionStore>,
    sm: Arc<Recorder>,
    options: DriverOptions,
) -> TestNode {
    let snapshots = Arc::new(MemSnapshots::new());
    start_on_stores(net, cfg, (log, election, snapshots), sm, options).await
}

/// As [`start_with_sm`], with a snapshot store too (kept to restart on it).
pub(crate) async fn start_on_stores(
    net: &MemNetwork,
    cfg: Config,
    (log, election, snapshots): (
        Arc<dyn raft_core::io::LogStore>,
        Arc<MemElectionStore>,
        Arc<MemSnapshots>,
    ),
    sm: Arc<Recorder>,
    options: DriverOptions,
) -> TestNode {
    let cfg = cfg.validate().unwrap();
    format_founder(&cfg, &*log, &*election, &*snapshots).await;
    let parts = Parts {
        log,
        election,
        transport: Arc::new(net.endpoint(cfg.id)),
        state_machine: sm.clone(),
        snapshots,
    };
    let node = Node::start(cfg, parts, options).await.unwrap();
    TestNode { node, sm }
}

/// Formats the stores of a replica whose configuration names it a founding voter, when they
/// are new: the operator's one-time act before a founder's first start. Stores that hold
/// anything (a restart) are left as they are.
pub(crate) async fn format_founder(
    cfg: &raft_core::ValidatedConfig,
    log: &dyn raft_core::io::LogStore,
    election: &dyn raft_core::io::ElectionStore,
    snapshots: &dyn raft_core::io::SnapshotStore,
) {
    let new = snapshots.latest().await.unwrap().is_none()
        && election.load().await.unwrap().is_none()
        && log.state().await.unwrap().end.offset == raft_core::Offset::ZERO;
    if new && cfg.voters.contains(&cfg.id) {
        raft_core::driver::format(snapshots, &cfg.bootstrap_voters())
            .await
            .unwrap();
    }
}

/// Three voters whose stores the test keeps, to restart a node on them.
pub(crate) async fn start_restartable(
    net: &MemNetwork,
    voters: &[ReplicaId],
    seed: u64,
) -> (Vec<TestNode>, Vec<Arc<MemLog>>, Vec<Arc<MemElectionStore>>) {
    let (mut nodes, mut logs, mut elections) = (Vec::new(), Vec::new(), Vec::new());
    for id in voters {
        let (log, election) = (Arc::new(MemLog::new()), Arc::new(MemElectionStore::new()));
        logs.push(log.clone());
        elections.push(election.clone());
        let options = DriverOptions {
            seed: u64::from(id.0) * seed,
            ..DriverOptions::default()
        };
        nodes.push(start_on(net, test_config(*id, voters), log, election, options).await);
    }
    (nodes, logs, elections)
}

pub(crate) async fn start_cluster(net: &MemNetwork, n: u32) -> Vec<TestNode> {
    let voters: Vec<ReplicaId> = (1..=n).map(ReplicaId).collect();
    let mut nodes = Vec::new();
    for id in &voters {
        nodes.push(start_node(net, test_config(*id, &voters)).await);
    }
    nodes
}

/// Polls statuses until exactly one node is leader; waits on real events with a deadline.
pub(crate) async fn wait_for_leader(nodes: &[TestNode], skip: Option<usize>) -> usize {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        for (i, n) in nodes.iter().enumerate() {
            if Some(i) == skip {
                continue;
            }
            if let Some(s) = n.node.status().await {
                if s.role == Role::Leader && s.high_watermark > Offset::ZERO {
                    return i;
                }
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no leader elected within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_elect_commit_and_hand_over_on_shutdown() {
    let net = MemNetwork::new();
    let nodes = start_cluster(&net, 3).await;
    let leader = wait_for_leader(&nodes, None).await;

    // A follower refuses proposals and names the leader.
    let follower = (leader + 1) % 3;
    let refused = nodes[follower]
        .node
        .propose(Bytes::from_static(b"x"))
        .bounded()
        .await;
    assert!(
        matches!(
            refused,
            Err(WriteError::Refused(ProposeError::NotLeader { .. }))
        ),
        "{refused:?}"
    );

    // Concurrent proposals all commit, in one order, on every replica.
    let mut tasks = Vec::new();
    for i in 0..200u32 {
        let node = nodes[leader].node.clone();
        tasks.push(tokio::spawn(async move {
            node.propose(Bytes::from(format!("w{i}"))).bounded().await
        }));
    }
    let mut offsets = Vec::new();
    for t in tasks {
        let committed = t
            .await
            .unwrap()
            .expect("write commits on a healthy cluster");
        assert_eq!(
            committed.response,
            Bytes::from(committed.id.offset.0.to_string())
        );
        offsets.push(committed.id.offset);
    }
    offsets.sort();
    offsets.dedup();
    assert_eq!(offsets.len(), 200, "each write has its own offset");

    let leader_hwm = nodes[leader].node.status().await.unwrap().high_watermark;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let counts: Vec<usize> = nodes
            .iter()
            .map(|n| n.sm.applied.lock().unwrap().len())
            .collect();
        if counts.iter().all(|c| *c == 200) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "followers did not apply: {counts:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let first = nodes[0].sm.applied.lock().unwrap().clone();
    for n in &nodes[1..] {
        assert_eq!(
            *n.sm.applied.lock().unwrap(),
            first,
            "replicas apply identical sequences"
        );
    }
    assert!(
        leader_hwm.0 >= 201,
        "the high watermark covers the writes and the leader record"
    );

    // Graceful shutdown of the leader hands over: another node leads without a full timeout.
    let stopped = tokio::time::Instant::now();
    nodes[leader].node.shutdown().bounded().await;
    let next = wait_for_leader(&nodes, Some(leader)).await;
    assert_ne!(next, leader);
    assert!(
        stopped.elapsed() < Duration::from_secs(5),
        "handover took {:?}",
        stopped.elapsed()
    );
    let after = nodes[next]
        .node
        .propose(Bytes::from_static(b"after"))
        .bounded()
        .await;
    assert!(after.is_ok(), "the new leader commits: {after:?}");
    for n in &nodes {
        n.node.shutdown().bounded().await;
    }
}

/// Goal: compaction bounds the log, and a replica that joins after the prefix is gone catches
/// up through a snapshot (KIP-630). Method: three voters snapshot every 20 records and keep 5
/// below; after 200 writes every voter's log starts well above 0. An observer then starts from
/// empty storage: its first fetch is below the leader's log start, so it must download and
/// install the snapshot, then fetch the rest. Its state machine ends equal to the leader's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_observer_catches_up_through_a_snapshot() {
    let net = MemNetwork::new();
    let voters: Vec<ReplicaId> = (1..=3).map(ReplicaId).collect();
    let observer = ReplicaId(4);
    let config = |id: ReplicaId| {
        let mut cfg = test_config(id, &voters);
        cfg.observers = [observer].into_iter().collect();
        cfg.snapshot_after_records = 20;
        cfg.snapshot_log_retention = 5;
        cfg.snapshot_chunk_bytes = 256;
        cfg
    };
    let mut nodes = Vec::new();
    for id in &voters {
        nodes.push(start_node(&net, config(*id)).await);
    }
    let leader = wait_for_leader(&nodes, None).await;
    for i in 0..200u32 {
        nodes[leader]
            .node
            .write(Bytes::from(format!("value-{i}")))
            .bounded()
            .await
            .expect("write commits");
    }
    let status = nodes[leader].node.status().await.expect("status");
    assert!(
        status.snapshot.is_some_and(|s| s.offset.0 >= 150),
        "the leader snapshotted recently: {:?}",
        status.snapshot
    );
    assert!(
        status.log_start.0 >= 140,
        "the log prefix was purged: start {}",
        status.log_start
    );

    let late = start_node(&net, config(observer)).await;
    let target = status.high_watermark;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while late.sm.applied().await < target {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the observer did not catch up within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(
        late.node
            .metrics()
            .snapshots_installed
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 1,
        "the observer installed a snapshot"
    );
    let leader_applied: Vec<(u64, Bytes)> = nodes[leader].sm.applied.lock().unwrap().clone();
    let late_applied: Vec<(u64, Bytes)> = late.sm.applied.lock().unwrap().clone();
    let upto = |v: &[(u64, Bytes)]| -> Vec<(u64, Bytes)> {
        v.iter().filter(|(o, _)| *o < target.0).cloned().collect()
    };
    assert_eq!(
        upto(&late_applied),
        upto(&leader_applied),
        "the observer's state equals the leader's"
    );
    for n in nodes.iter().chain(std::iter::once(&late)) {
        n.node.shutdown().bounded().await;
    }
}

/// Goal: a library user moves leadership to a chosen voter. Method: three voters; the leader
/// transfers to a follower, which must lead the very next epoch and commit writes; the old
/// leader, now a follower, refuses a transfer with a typed error naming the new leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leadership_moves_to_the_chosen_voter() {
    let net = MemNetwork::new();
    let nodes = start_cluster(&net, 3).await;
    let leader = wait_for_leader(&nodes, None).await;
    nodes[leader]
        .node
        .write(Bytes::from_static(b"before"))
        .bounded()
        .await
        .expect("write commits");
    let epoch = nodes[leader].node.status().await.expect("status").epoch;
    let target = (leader + 1) % 3;
    let target_id = nodes[target].node.id();
    nodes[leader]
        .node
        .transfer_leadership(target_id)
        .bounded()
        .await
        .expect("the handover starts");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let s = nodes[target].node.status().await.expect("status");
        if s.role == Role::Leader && s.high_watermark > Offset::ZERO {
            assert_eq!(s.epoch, epoch.next(), "the target won the next election");
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the target did not take over within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let after = nodes[target]
        .node
        .write(Bytes::from_static(b"after"))
        .bounded()
        .await;
    assert!(after.is_ok(), "the new leader commits: {after:?}");
    let refused = nodes[leader]
        .node
        .transfer_leadership(target_id)
        .bounded()
        .await;
    assert!(
        matches!(refused, Err(TransferError::NotLeader { .. })),
        "{refused:?}"
    );
    for n in &nodes {
        n.node.shutdown().bounded().await;
    }
}

/// A log whose appends reach the store late, as a slow disk's would.
struct SlowAppends(Arc<MemLog>);

#[async_trait]
impl raft_core::io::LogStore for SlowAppends {
    async fn state(&self) -> Result<raft_core::io::LogState, raft_core::io::StorageError> {
        self.0.state().await
    }
    async fn append(&self, records: &[Record]) -> Result<(), raft_core::io::StorageError> {
        tokio::time::sleep(Duration::from_millis(20)).await;
        self.0.append(records).await
    }
    async fn read(
        &self,
        from: Offset,
        to: Offset,
        max_bytes: u64,
    ) -> Result<Vec<Record>, raft_core::io::StorageError> {
        self.0.read(from, to, max_bytes).await
    }
    async fn truncate(&self, end: Offset) -> Result<(), raft_core::io::StorageError> {
        self.0.truncate(end).await
    }
    async fn purge(&self, start: Offset) -> Result<(), raft_core::io::StorageError> {
        self.0.purge(start).await
    }
    async fn reset(
        &self,
        start: raft_core::OffsetAndEpoch,
    ) -> Result<(), raft_core::io::StorageError> {
        self.0.reset(start).await
    }
}

/// Goal: a restarted follower applies every committed record, including records that arrive
/// while its store still lags behind the log writer. Regression: the applier read the whole
/// range from the store, whose appends were still queued; the short read was taken as the end
/// and the follower stopped applying for good. Method: a follower restarts on its log with an
/// empty state machine (so it must re-apply from its store) and a store whose appends are slow,
/// while the leader keeps committing; its state machine must reach the leader's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_follower_applies_records_its_store_has_not_written_yet() {
    let net = MemNetwork::new();
    let voters: Vec<ReplicaId> = (1..=3).map(ReplicaId).collect();
    let (mut nodes, logs, elections) = start_restartable(&net, &voters, 31).await;
    let leader = wait_for_leader(&nodes, None).await;
    for i in 0..50u32 {
        nodes[leader]
            .node
            .write(Bytes::from(format!("a{i}")))
            .bounded()
            .await
            .expect("write commits");
    }
    let f = (leader + 1) % 3;
    nodes[f].node.shutdown().bounded().await;
    // Committed while the follower is down: its first fetch after the restart brings these
    // records and a high watermark above its log end at once.
    for i in 0..10u32 {
        nodes[leader]
            .node
            .write(Bytes::from(format!("gap{i}")))
            .bounded()
            .await
            .expect("write commits");
    }
    let options = DriverOptions {
        seed: 99,
        ..DriverOptions::default()
    };
    let slow = Arc::new(SlowAppends(logs[f].clone()));
    let cfg = test_config(voters[f], &voters);
    nodes[f] = start_on(&net, cfg, slow, elections[f].clone(), options).await;
    for i in 0..50u32 {
        nodes[leader]
            .node
            .write(Bytes::from(format!("b{i}")))
            .bounded()
            .await
            .expect("write commits");
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let want = nodes[leader].sm.applied.lock().unwrap().clone();
        let got = nodes[f].sm.applied.lock().unwrap().clone();
        if want.len() == 110 && got == want {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the restarted follower applied {} of {} records",
            got.len(),
            want.len()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for n in &nodes {
        n.node.shutdown().bounded().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_reports_leadership_and_applied_offsets_without_polling() {
    // Goal: `Node::watch` tells a replica's changes as they happen: a follower learns who
    // leads, its applied offset passes a write committed elsewhere, and its voter set is the
    // set in force; the channel closes when the replica stops.
    let net = MemNetwork::new();
    let nodes = start_cluster(&net, 3).await;
    let mut state = nodes[2].node.watch();
    let s = state
        .wait_for(|s| s.leader.is_some() && s.high_watermark > Offset::ZERO)
        .bounded()
        .await
        .expect("running")
        .clone();
    assert_eq!(s.voters.len(), 3);
    assert!(s.is_voter());
    let leader = nodes
        .iter()
        .position(|n| n.node.id() == s.leader.unwrap())
        .unwrap();
    let committed = nodes[leader]
        .node
        .write(Bytes::from_static(b"watched"))
        .bounded()
        .await
        .unwrap();
    state
        .wait_for(|s| s.applied > committed.id.offset)
        .bounded()
        .await
        .expect("running");
    for n in &nodes {
        n.node.shutdown().bounded().await;
    }
    // The last changes (the hand-over) may still be unseen; then the channel ends.
    async { while state.changed().await.is_ok() {} }
        .bounded()
        .await;
}
