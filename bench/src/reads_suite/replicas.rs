//! The suite's three replicas in one process: each on a current-thread runtime in an OS thread
//! of its own, over the in-memory transport with every inbound request moved to the callee's
//! thread (and counted), holding a key-value state machine with preloaded keys.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use raft_core::codec::wire::{self, FrameLimits};
use raft_core::driver::{DriverOptions, Node, Parts};
use raft_core::io::{
    BytesReader, RequestHandler, SnapshotReader, StateMachine, StateMachineError, Transport,
    TransportError,
};
use raft_core::mem::transport::{MemNetwork, MemTransport};
use raft_core::mem::{MemElectionStore, MemLog, MemSnapshots};
use raft_core::message::{ErrorCode, Request, Response};
use raft_core::{Config, Offset, Record, ReplicaId, Role};

use crate::measure::current_tid;

/// A key-value state machine: a Data record is an 8-byte little-endian key and then its value.
#[derive(Default)]
pub(super) struct Kv {
    applied: AtomicU64,
    map: RwLock<HashMap<u64, Bytes>>,
}

impl Kv {
    pub(super) fn get(&self, key: u64) -> Option<Bytes> {
        // A poisoned lock only means a panicking reader; the map itself is intact.
        let map = self.map.read().unwrap_or_else(|p| p.into_inner());
        map.get(&key).cloned()
    }
}

#[async_trait]
impl StateMachine for Kv {
    async fn applied(&self) -> Offset {
        Offset(self.applied.load(Ordering::SeqCst))
    }

    async fn apply(
        &self,
        records: &[Record],
        responses: &mut Vec<Bytes>,
    ) -> Result<(), StateMachineError> {
        {
            let mut map = self.map.write().unwrap_or_else(|p| p.into_inner());
            for r in records {
                if let Some((key, value)) = r.payload.split_first_chunk::<8>() {
                    map.insert(u64::from_le_bytes(*key), Bytes::copy_from_slice(value));
                }
            }
        }
        if let Some(last) = records.last() {
            self.applied.store(last.offset.next().0, Ordering::SeqCst);
        }
        responses.resize(responses.len() + records.len(), Bytes::new());
        Ok(())
    }

    async fn snapshot(&self) -> Result<Box<dyn SnapshotReader>, StateMachineError> {
        // Snapshots are off in this suite (`snapshot_after_records = 0`).
        Ok(Box::new(BytesReader::new(Bytes::new())))
    }

    async fn restore(
        &self,
        applied: Offset,
        _data: &mut dyn SnapshotReader,
    ) -> Result<(), StateMachineError> {
        self.applied.store(applied.0, Ordering::SeqCst);
        Ok(())
    }
}

/// What a replica's transport saw, for per-read message counts.
#[derive(Default)]
pub(super) struct Wire {
    pub(super) read_index_requests: AtomicU64,
    pub(super) fetch_requests: AtomicU64,
    other_requests: AtomicU64,
    /// The highest read barrier seen in a Fetch response: the leader raises one per step that
    /// registers new reads.
    pub(super) barrier_seen: AtomicU64,
}

/// The in-process transport, counting requests by kind and the read barriers seen on the way.
struct Counted {
    inner: MemTransport,
    wire: Arc<Wire>,
}

#[async_trait]
impl Transport for Counted {
    async fn serve(&self, handler: Arc<dyn RequestHandler>) -> Result<(), TransportError> {
        // Called by `Node::start` on the replica's own runtime.
        let callee = OnCalleeThread {
            inner: handler,
            runtime: tokio::runtime::Handle::current(),
        };
        self.inner.serve(Arc::new(callee)).await
    }

    async fn call(
        &self,
        to: ReplicaId,
        request: Request,
        timeout: Duration,
    ) -> Result<Response, TransportError> {
        match request {
            Request::ReadIndex(_) => &self.wire.read_index_requests,
            Request::Fetch(_) => &self.wire.fetch_requests,
            _ => &self.wire.other_requests,
        }
        .fetch_add(1, Ordering::Relaxed);
        let response = self.inner.call(to, request, timeout).await?;
        if let Response::Fetch(f) = &response {
            self.wire
                .barrier_seen
                .fetch_max(f.read_barrier.0, Ordering::Relaxed);
        }
        Ok(response)
    }

    async fn close(&self) {
        self.inner.close().await
    }
}

/// Handles inbound requests on the callee's runtime (its thread), with the codec work a server
/// does: decoding the request and encoding the response.
struct OnCalleeThread {
    inner: Arc<dyn RequestHandler>,
    runtime: tokio::runtime::Handle,
}

#[async_trait]
impl RequestHandler for OnCalleeThread {
    async fn handle(&self, from: ReplicaId, request: Request) -> Response {
        let refusal = request.error_response(ErrorCode::ShuttingDown);
        let inner = self.inner.clone();
        let job = self.runtime.spawn(async move {
            let limits = FrameLimits::default();
            let mut buf = BytesMut::new();
            wire::encode_request(&request, &mut buf);
            // The frame was encoded from a valid request just above, so it decodes; should it
            // not, the request is used as it came.
            let request = wire::decode_request(buf.freeze(), &limits).unwrap_or(request);
            let response = inner.handle(from, request).await;
            let mut buf = BytesMut::new();
            wire::encode_response(&response, &mut buf);
            std::hint::black_box(buf);
            response
        });
        // The callee's runtime is gone only while the cluster is torn down.
        job.await.unwrap_or(refusal)
    }
}

/// A replica running on its own thread.
pub(super) struct Replica {
    pub(super) node: Node,
    pub(super) sm: Arc<Kv>,
    pub(super) wire: Arc<Wire>,
    /// The thread's id, for its CPU time; none where /proc does not tell.
    pub(super) tid: Option<u64>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Why a measurement could not be made.
pub(super) type Failed = String;

pub(super) fn start_replica(
    net: &MemNetwork,
    id: ReplicaId,
    voters: &[ReplicaId],
    lease: bool,
) -> Result<Replica, Failed> {
    let mut cfg = Config::new(id, voters.iter().copied());
    cfg.election_timeout = Duration::from_millis(150);
    cfg.fetch_timeout = Duration::from_millis(600);
    cfg.fetch_max_wait = Duration::from_millis(200);
    cfg.snapshot_after_records = 0;
    cfg.lease_reads = lease;
    let cfg = cfg
        .validate()
        .map_err(|e| format!("replica {id} config: {e}"))?;
    let sm = Arc::new(Kv::default());
    let wire = Arc::new(Wire::default());
    let transport = Counted {
        inner: net.endpoint(id),
        wire: wire.clone(),
    };
    let snapshots = Arc::new(MemSnapshots::new());
    let founding = cfg.voters.contains(&id).then(|| cfg.bootstrap_voters());
    let parts = Parts {
        log: Arc::new(MemLog::new()),
        election: Arc::new(MemElectionStore::new()),
        transport: Arc::new(transport),
        state_machine: sm.clone(),
        snapshots,
    };
    let options = DriverOptions {
        seed: u64::from(id.0),
        ..DriverOptions::default()
    };
    let (started_tx, started_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::Builder::new()
        .name(format!("replica-{}", id.0))
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = started_tx.send(Err(format!("replica {id} runtime: {e}")));
                    return;
                }
            };
            rt.block_on(async move {
                if let Some(set) = founding {
                    // The founding voter's one-time format, before its first start.
                    if let Err(e) = raft_core::driver::format(&*parts.snapshots, &set).await {
                        let _ = started_tx.send(Err(format!("replica {id} format: {e}")));
                        return;
                    }
                }
                match Node::start(cfg, parts, options).await {
                    Ok(node) => {
                        let _ = started_tx.send(Ok((node, current_tid())));
                        let _ = stop_rx.await;
                    }
                    Err(e) => {
                        let _ = started_tx.send(Err(format!("replica {id} start: {e}")));
                    }
                }
            });
            // Dropping the runtime ends the replica's tasks: the whole in-memory cluster goes
            // away together, so there is no handover to wait for.
        })
        .map_err(|e| format!("replica {id} thread: {e}"))?;
    let (node, tid) = started_rx
        .recv()
        .map_err(|_| format!("replica {id} thread ended before starting"))??;
    Ok(Replica {
        node,
        sm,
        wire,
        tid,
        stop: Some(stop_tx),
        thread: Some(thread),
    })
}

impl Drop for Replica {
    fn drop(&mut self) {
        stop_all(std::slice::from_mut(self));
    }
}

pub(super) fn stop_all(replicas: &mut [Replica]) {
    for r in replicas.iter_mut() {
        if let Some(stop) = r.stop.take() {
            let _ = stop.send(());
        }
    }
    for r in replicas.iter_mut() {
        if let Some(t) = r.thread.take() {
            let _ = t.join();
        }
    }
}

/// Waits for a leader that has committed in its epoch.
pub(super) async fn leader(replicas: &[Replica]) -> Result<usize, Failed> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        for (i, r) in replicas.iter().enumerate() {
            if let Some(s) = r.node.status().await {
                if s.role == Role::Leader && s.high_watermark > Offset::ZERO {
                    return Ok(i);
                }
            }
        }
        if Instant::now() >= deadline {
            return Err("no leader within 10 s".into());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Writes `keys` keys with 16-byte values through the leader, then waits until every replica
/// applied them (so that even sequential reads find every key).
pub(super) async fn preload(replicas: &[Replica], leader: usize, keys: u64) -> Result<(), Failed> {
    let node = &replicas[leader].node;
    let mut pending = Vec::new();
    for key in 0..keys {
        let node = node.clone();
        pending.push(tokio::spawn(async move {
            let mut payload = key.to_le_bytes().to_vec();
            payload.extend_from_slice(&[0x6b; 16]);
            node.propose(Bytes::from(payload)).await
        }));
    }
    let mut last = Offset::ZERO;
    for p in pending {
        let committed = p
            .await
            .map_err(|e| format!("preload task: {e}"))?
            .map_err(|e| format!("preload write: {e}"))?;
        last = last.max(committed.id.offset);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while replicas
        .iter()
        .any(|r| r.sm.applied.load(Ordering::SeqCst) <= last.0)
    {
        if Instant::now() >= deadline {
            return Err("preload not applied on every replica within 10 s".into());
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use raft_core::{Epoch, RecordKind};

    use super::*;

    #[tokio::test]
    async fn the_state_machine_maps_keys_to_values() {
        let kv = Kv::default();
        let record = |offset: u64, key: u64, value: &[u8]| {
            let mut payload = key.to_le_bytes().to_vec();
            payload.extend_from_slice(value);
            Record {
                offset: Offset(offset),
                epoch: Epoch(1),
                kind: RecordKind::Data,
                payload: Bytes::from(payload),
            }
        };
        let mut responses = Vec::new();
        kv.apply(
            &[record(1, 7, b"a"), record(2, 9, b"b"), record(3, 7, b"c")],
            &mut responses,
        )
        .await
        .expect("apply");
        assert_eq!(responses.len(), 3);
        assert_eq!(kv.applied().await, Offset(4));
        assert_eq!(kv.get(7).as_deref(), Some(&b"c"[..]));
        assert_eq!(kv.get(9).as_deref(), Some(&b"b"[..]));
        assert_eq!(kv.get(8), None);
    }
}
