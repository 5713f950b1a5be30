//! The async traits the outside world implements: the log, the durable election state, the
//! transport, and the state machine. They mention only core types, so a storage crate and a
//! transport crate never need to know each other.
//!
//! The driver ([`crate::driver`]) is the only caller of these traits. Each trait documents what
//! the driver may assume when a call returns; the conformance suites in `raft_core::testing`
//! check those promises for every backend.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;

use crate::message::{Request, Response};
pub use crate::snapshot_stream::{
    load_bytes, read_to_end, save_bytes, BytesReader, SnapshotReader, SnapshotWriter,
    DEFAULT_CHUNK_BYTES,
};
use crate::types::{ElectionState, Epoch, Offset, OffsetAndEpoch, Record, ReplicaId};

/// Where an epoch starts in the log: the offset of its first record. The list of these, in
/// ascending order, is the log's epoch history (Kafka's leader-epoch cache), used to answer
/// "where does epoch `e` end" for diverging-epoch checks.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct EpochStart {
    /// The epoch.
    pub epoch: Epoch,
    /// The offset of its first record.
    pub start: Offset,
}

/// What the driver learns about a log when it opens it.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct LogState {
    /// The first offset still present (0 unless a prefix was purged).
    pub start: Offset,
    /// The end offset (exclusive) and the epoch of the last record (epoch 0 when empty).
    pub end: OffsetAndEpoch,
    /// The epoch history, ascending by epoch and by start offset, restricted to `[start, end)`.
    pub epochs: Vec<EpochStart>,
    /// The epoch of record `start - 1`, which was purged or replaced by a snapshot (0 when
    /// `start` is 0).
    pub start_epoch: Epoch,
}

/// A storage failure. After a failed write or sync a backend is poisoned and returns
/// [`StorageError::Poisoned`] from every later call: an fsync is never retried.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StorageError {
    /// An I/O error from the engine.
    #[error("storage i/o failed: {0}")]
    Io(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// A record failed its checksum or could not be decoded.
    #[error("corrupt record at offset {offset}: {source}")]
    Corrupt {
        /// Where the bad record is.
        offset: Offset,
        /// What was wrong with it.
        #[source]
        source: crate::codec::DecodeError,
    },
    /// A write or sync failed earlier; the store refuses all further work.
    #[error("storage is poisoned by an earlier failure: {0}")]
    Poisoned(String),
    /// The caller broke the contract (a gap in appended offsets, a range outside the log).
    #[error("invalid storage call: {0}")]
    Invalid(String),
    /// The data directory was written by an incompatible format version or another cluster.
    #[error("incompatible data: {0}")]
    Incompatible(String),
}

/// The replicated log.
///
/// Records are appended at the end, contiguously. The driver never appends a record whose offset
/// is not the current end offset.
#[async_trait]
pub trait LogStore: Send + Sync + 'static {
    /// The log's extent and epoch history, as of the last durable state plus anything appended
    /// since by this process.
    async fn state(&self) -> Result<LogState, StorageError>;

    /// Appends `records` (contiguous, starting at the end offset) and returns once they are
    /// durable. Concurrent calls may share one sync (group commit).
    async fn append(&self, records: &[Record]) -> Result<(), StorageError>;

    /// Reads records in `[from, to)`, stopping early once `max_bytes` of encoded records have
    /// been collected (at least one record is returned when the range is not empty).
    async fn read(
        &self,
        from: Offset,
        to: Offset,
        max_bytes: u64,
    ) -> Result<Vec<Record>, StorageError>;

    /// Removes every record at or after `end`, durably, before returning.
    async fn truncate(&self, end: Offset) -> Result<(), StorageError>;

    /// Removes every record before `start` (snapshots make this safe); may be lazy on disk.
    async fn purge(&self, start: Offset) -> Result<(), StorageError>;

    /// Discards every record and restarts the log, empty, at `start.offset`, as if the record
    /// before it had epoch `start.epoch` (installing a snapshot that ends there). Durable
    /// before returning.
    async fn reset(&self, start: OffsetAndEpoch) -> Result<(), StorageError>;
}

/// A complete snapshot's identity: the state after applying every record below `id.offset`,
/// the last of which has epoch `id.epoch` (KIP-630's snapshot id), with its size and checksum.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct SnapshotMeta {
    /// The end offset the snapshot covers and the epoch of the record before it.
    pub id: OffsetAndEpoch,
    /// Bytes.
    pub size: u64,
    /// CRC-32 of the bytes.
    pub checksum: u32,
}

impl SnapshotMeta {
    /// The identity of `data` taken at `id`.
    pub fn of(id: OffsetAndEpoch, data: &[u8]) -> SnapshotMeta {
        SnapshotMeta {
            id,
            size: data.len() as u64,
            checksum: crc32fast::hash(data),
        }
    }
}

/// Durable state machine snapshots (KIP-630): the ones this replica took, and the one it is
/// downloading from the leader.
///
/// A snapshot becomes visible (to [`SnapshotStore::latest`] and [`SnapshotStore::read`]) only
/// when it is complete and durable; a partial download never survives a restart. A store keeps
/// at least the newest snapshot and may delete older ones once a newer one is durable.
#[async_trait]
pub trait SnapshotStore: Send + Sync + 'static {
    /// The newest complete snapshot.
    async fn latest(&self) -> Result<Option<SnapshotMeta>, StorageError>;

    /// Starts storing a snapshot this replica is taking. Its bytes go to the returned writer,
    /// and it becomes complete (atomically and durably) only by [`SnapshotWriter::finish`]. A
    /// store may hold several writers at once, each for another id.
    async fn create(&self, id: OffsetAndEpoch) -> Result<Box<dyn SnapshotWriter>, StorageError>;

    /// At most `max_bytes` of a complete snapshot from `position` (empty at its end), or
    /// `None` when no complete snapshot with this id is held.
    async fn read(
        &self,
        id: OffsetAndEpoch,
        position: u64,
        max_bytes: u32,
    ) -> Result<Option<(SnapshotMeta, Bytes)>, StorageError>;

    /// Reads a complete snapshot from its start, or `None` when it is not held. The reader
    /// checks the bytes against the snapshot's checksum and ends with an error instead of
    /// `None` when they differ. A snapshot deleted while open stays readable to the end.
    async fn open(
        &self,
        id: OffsetAndEpoch,
    ) -> Result<Option<Box<dyn SnapshotReader>>, StorageError>;

    /// Writes a chunk of a download at `position`, which must be the bytes written so far, or
    /// 0 to start over (discarding any other partial download).
    async fn write_partial(
        &self,
        id: OffsetAndEpoch,
        position: u64,
        data: Bytes,
    ) -> Result<(), StorageError>;

    /// Completes the download of `id`: when its bytes have this size and checksum it becomes
    /// the newest complete snapshot, durably, and its meta is returned; otherwise the partial
    /// download is discarded and `None` returned.
    async fn finish_partial(
        &self,
        id: OffsetAndEpoch,
        size: u64,
        checksum: u32,
    ) -> Result<Option<SnapshotMeta>, StorageError>;
}

/// The durable election state (KRaft's `quorum-state` file).
#[async_trait]
pub trait ElectionStore: Send + Sync + 'static {
    /// The last saved state, or `None` for a new replica.
    async fn load(&self) -> Result<Option<ElectionState>, StorageError>;

    /// Saves `state` atomically and durably: after a crash, `load` returns this state or the one
    /// before it, never a mix.
    async fn save(&self, state: &ElectionState) -> Result<(), StorageError>;
}

/// A transport failure for one RPC.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    /// The peer id is not configured.
    #[error("unknown peer {0}")]
    UnknownPeer(ReplicaId),
    /// The request was never sent (no connection could be established), or the peer turned it
    /// away before handling it (it does not serve yet). The peer did not act on it.
    #[error("request to {peer} not sent: {reason}")]
    NotSent {
        /// The peer.
        peer: ReplicaId,
        /// Why.
        reason: String,
    },
    /// The connection was lost mid-call: the peer may or may not have handled the request.
    #[error("peer {peer} unreachable: {reason}")]
    Unreachable {
        /// The peer.
        peer: ReplicaId,
        /// Why.
        reason: String,
    },
    /// The deadline passed before a response arrived.
    #[error("rpc to {0} timed out")]
    Timeout(ReplicaId),
    /// A frame could not be encoded or decoded.
    #[error("bad frame from {peer}: {source}")]
    Codec {
        /// The peer.
        peer: ReplicaId,
        /// What was wrong.
        #[source]
        source: crate::codec::DecodeError,
    },
    /// The transport is shut down; the request was not sent. Callers rely on this: only
    /// `UnknownPeer`, `NotSent` and `Closed` prove the peer never acted on the request (a
    /// forwarded write that fails with any other error may have reached the leader).
    #[error("transport is closed")]
    Closed,
}

/// Handles RPCs that arrive from peers. The driver implements it; a transport calls it for every
/// inbound request and sends back what it returns.
#[async_trait]
pub trait RequestHandler: Send + Sync + 'static {
    /// Answers one request from `from` (the authenticated peer id).
    async fn handle(&self, from: ReplicaId, request: Request) -> Response;
}

/// Request/response RPCs between replicas.
#[async_trait]
pub trait Transport: Send + Sync + 'static {
    /// Starts serving inbound RPCs with `handler`. Called once by the driver before any `call`.
    async fn serve(&self, handler: Arc<dyn RequestHandler>) -> Result<(), TransportError>;

    /// Sends `request` to `to` and waits at most `timeout` for the response. Many calls may be
    /// in flight at once, to one peer or many; none blocks another. A request is delivered at
    /// most once: a transport may retry only what it has not sent (a forwarded write sent twice
    /// could be applied twice).
    async fn call(
        &self,
        to: ReplicaId,
        request: Request,
        timeout: Duration,
    ) -> Result<Response, TransportError>;

    /// Stops serving and closes connections.
    async fn close(&self);

    /// The voter set in force on this replica, once at start and after every change: a
    /// transport that reaches replicas by the endpoints voters advertise (voters added online,
    /// which no static configuration lists) learns them here. The default ignores it.
    fn voters_changed(&self, _voters: &crate::voters::VoterSet) {}
}

/// A failure of the user's state machine. Applying is not allowed to fail for a valid record, so
/// this stops the driver: the replica would otherwise diverge from the others. So does a failed
/// [`StateMachine::snapshot`], a failed read of the reader it returned, and a failed
/// [`StateMachine::restore`]: [`crate::driver::Node::stopped`] then says why.
#[derive(Debug, thiserror::Error)]
#[error("state machine failed at offset {offset}: {reason}")]
pub struct StateMachineError {
    /// The record that could not be applied; from `snapshot` or `restore`, the offset the
    /// snapshot covers up to (`restore`'s `applied`).
    pub offset: Offset,
    /// Why.
    pub reason: String,
}

/// The user's replicated state machine. It sees every committed record in offset order, each
/// exactly once per process lifetime (after a restart it is restored from the latest snapshot
/// when that is ahead of its own [`StateMachine::applied`] offset, then replayed from the log).
/// Control records ([`crate::RecordKind::LeaderChange`]) carry no client data: the state
/// machine only notes their offset.
#[async_trait]
pub trait StateMachine: Send + Sync + 'static {
    /// Where to resume: the offset after the last record applied (0 for a fresh one).
    async fn applied(&self) -> Offset;

    /// Applies committed records in order and pushes one response per record to `responses`
    /// (handed to the proposer, if it is waiting on this replica; empty for control records).
    async fn apply(
        &self,
        records: &[Record],
        responses: &mut Vec<Bytes>,
    ) -> Result<(), StateMachineError>;

    /// Captures the state after every record applied so far and returns a reader of its
    /// serialization. The driver calls it between `apply` calls, so the snapshot covers exactly
    /// [`StateMachine::applied`]; it then drains the reader into the snapshot store on a task
    /// of its own while later records are applied. So capture cheaply here (a copy-on-write
    /// handle, a storage engine's read snapshot) and serialize as the reader is read: the
    /// state must not have to fit in memory twice, and applying must not wait for the
    /// serialization.
    async fn snapshot(&self) -> Result<Box<dyn SnapshotReader>, StateMachineError>;

    /// Replaces the whole state with a snapshot's (one that [`StateMachine::snapshot`]
    /// produced, here or on another replica), read from `data` to its end; afterwards
    /// `applied()` returns `applied`. When `data` fails (a damaged snapshot reports its
    /// checksum mismatch only at its end), return an error and keep the state as it was.
    async fn restore(
        &self,
        applied: Offset,
        data: &mut dyn SnapshotReader,
    ) -> Result<(), StateMachineError>;
}

/// The stores of one group inside a storage engine that holds many
/// ([`GroupStorage::open_group`]).
#[derive(Clone)]
pub struct GroupStores {
    /// The group's replicated log.
    pub log: Arc<dyn LogStore>,
    /// The group's durable election state.
    pub election: Arc<dyn ElectionStore>,
    /// The group's state machine snapshots.
    pub snapshots: Arc<dyn SnapshotStore>,
}

/// One storage engine holding the logs, election states and snapshots of every group a host
/// runs, so that writes of many groups become durable with one sync: appends of different
/// groups that are in flight together share a group commit, as the appends of one log do.
///
/// Each group's stores keep every promise of [`LogStore`], [`ElectionStore`] and
/// [`SnapshotStore`] on their own: one group's truncation, purge, reset or snapshot never
/// touches another's records, and a failed sync poisons the whole engine (every group's later
/// calls fail), since the sync that failed was shared.
#[async_trait]
pub trait GroupStorage: Send + Sync + 'static {
    /// The groups the engine holds, ascending: every group opened and not dropped since.
    async fn groups(&self) -> Result<Vec<crate::types::GroupId>, StorageError>;

    /// The stores of `group`, created empty (durably listed by [`GroupStorage::groups`]) when
    /// the engine does not hold it yet. Opening a group whose stores are still open elsewhere
    /// is refused with [`StorageError::Invalid`]: two drivers on one log would corrupt it.
    async fn open_group(&self, group: crate::types::GroupId) -> Result<GroupStores, StorageError>;

    /// Removes `group`'s log, election state and snapshots, durably; dropping a group the engine
    /// does not hold does nothing. Refused with [`StorageError::Invalid`] while its stores are
    /// open.
    async fn drop_group(&self, group: crate::types::GroupId) -> Result<(), StorageError>;
}

/// Answers requests for the groups a host runs. The host's driver implements it; a
/// [`HostTransport`] calls it for every inbound request and sends back what it returns.
#[async_trait]
pub trait GroupRequestHandler: Send + Sync + 'static {
    /// Answers one request for `group` from `from` (the authenticated peer id), or `None` when
    /// this host does not run `group`: the transport then turns the request away unhandled, and
    /// the caller sees [`TransportError::NotSent`].
    async fn handle(
        &self,
        from: ReplicaId,
        group: crate::types::GroupId,
        request: Request,
    ) -> Option<Response>;
}

/// The handler of a replica that runs one group, serving as a host of [`GroupId::DEFAULT`]
/// only: what a transport that implements [`HostTransport`] serves when it is given a
/// [`RequestHandler`] through [`Transport::serve`].
///
/// [`GroupId::DEFAULT`]: crate::types::GroupId::DEFAULT
pub struct DefaultGroupHandler(pub Arc<dyn RequestHandler>);

#[async_trait]
impl GroupRequestHandler for DefaultGroupHandler {
    async fn handle(
        &self,
        from: ReplicaId,
        group: crate::types::GroupId,
        request: Request,
    ) -> Option<Response> {
        if group != crate::types::GroupId::DEFAULT {
            return None;
        }
        Some(self.0.handle(from, request).await)
    }
}

/// Request/response RPCs between hosts that each run many groups: one transport (one
/// connection per host pair) carries the requests of every group, each naming its group.
/// A host's replica id is its replica id in every group.
///
/// The promises are [`Transport`]'s, per call: many calls in flight, none blocking another, and
/// at most one delivery of each request.
#[async_trait]
pub trait HostTransport: Send + Sync + 'static {
    /// Starts serving inbound RPCs of every group with `handler`. Called once, before any call.
    async fn serve(&self, handler: Arc<dyn GroupRequestHandler>) -> Result<(), TransportError>;

    /// Sends `request` of `group` to host `to` and waits at most `timeout` for the response.
    async fn call(
        &self,
        to: ReplicaId,
        group: crate::types::GroupId,
        request: Request,
        timeout: Duration,
    ) -> Result<Response, TransportError>;

    /// Stops serving and closes connections.
    async fn close(&self);

    /// The voter set in force in `group`, at its start and after every change (see
    /// [`Transport::voters_changed`]); a voter's endpoint is its host's. The default ignores it.
    fn voters_changed(&self, _group: crate::types::GroupId, _voters: &crate::voters::VoterSet) {}
}
