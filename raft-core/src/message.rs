//! The RPCs replicas exchange, as request/response pairs (KIP-595 shapes, our own fields and
//! codec; see `docs/spec-deviations.md`).
//!
//! Every response carries the responder's epoch and the leader it knows, so that a replica that
//! is behind catches up from any answer, including a refusal.

use std::time::Duration;

use bytes::Bytes;

use crate::types::{DirectoryId, Epoch, Offset, OffsetAndEpoch, Record, ReplicaId};

/// Correlates a response with its request. Chosen by the sender, unique per sender.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct RequestId(pub u64);

/// A number the leader raises to start a read-confirmation round (decisions D6). Followers echo
/// the highest barrier they have seen in their next Fetch.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default)]
pub struct ReadBarrier(pub u64);

/// Error codes carried in responses. Small, closed, and mapped one-to-one by the codec.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
#[non_exhaustive]
pub enum ErrorCode {
    /// The request's epoch is older than the receiver's (`FENCED_LEADER_EPOCH`).
    FencedLeaderEpoch,
    /// The request's epoch is newer than the receiver's (`UNKNOWN_LEADER_EPOCH`).
    UnknownLeaderEpoch,
    /// A leader-only request reached a replica that does not lead (`NOT_LEADER_OR_FOLLOWER`).
    NotLeader,
    /// The request is malformed: impossible offsets or epochs (`INVALID_REQUEST`).
    InvalidRequest,
    /// The sender is not a member this receiver knows.
    UnknownReplica,
    /// The request named another replica key (id, or directory) as its receiver
    /// (`INVALID_VOTER_KEY`).
    WrongReceiver,
    /// The receiver is shutting down (`BROKER_NOT_AVAILABLE`).
    ShuttingDown,
    /// A read could not be confirmed in time (`REQUEST_TIMED_OUT`); retriable.
    RequestTimedOut,
    /// A forwarded write was appended but lost in a leader change; retriable.
    WriteLost,
    /// The leader's proposal queue is full; retriable.
    QueueFull,
    /// A forwarded write's payload exceeds the leader's limit.
    TooLarge,
    /// The responder holds no snapshot with the requested id (`SNAPSHOT_NOT_FOUND`).
    SnapshotNotFound,
    /// The requested byte position lies past the snapshot's end (`POSITION_OUT_OF_RANGE`).
    PositionOutOfRange,
    /// A forwarded write was proposed but its fate is unknown to the responder (it stopped or
    /// failed with the write pending): it may or may not be applied; not safe to retry.
    OutcomeUnknown,
    /// A forwarded batch arrived after a later batch of its write session had been proposed:
    /// it was dropped unproposed, so that the session's writes keep their order.
    Superseded,
    /// The leader has not committed in its epoch yet (just elected); retriable at once.
    NotReady,
}

/// Vote and pre-vote (KIP-996, decisions D2/D3).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct VoteRequest {
    /// For a standard vote, the candidate's epoch. For a pre-vote, the epoch the sender proposes
    /// to campaign in (its epoch + 1); the receiver's state is not touched either way (D2).
    pub epoch: Epoch,
    /// The replica asking.
    pub candidate: ReplicaId,
    /// The replica asked (KRaft's `VoterId`); a mismatch is `WrongReceiver`.
    pub voter: ReplicaId,
    /// The directory the asked replica votes with in the candidate's voter set (`None` for a
    /// static voter); a replica with another directory answers `WrongReceiver` (KIP-853).
    pub voter_directory: Option<DirectoryId>,
    /// The candidate's own directory.
    pub candidate_directory: Option<DirectoryId>,
    /// The sender's log end offset and the epoch of its last record.
    pub last: OffsetAndEpoch,
    /// A pre-vote asks "would you vote for me" without changing anything.
    pub pre_vote: bool,
    /// The leader of the sender's previous epoch invited this election (EndQuorumEpoch or a
    /// leadership transfer): sticky followers grant it anyway (D3).
    pub leader_invited: bool,
}

/// The answer to a [`VoteRequest`].
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct VoteResponse {
    /// Why the request was refused outright, if it was.
    pub error: Option<ErrorCode>,
    /// The responder's epoch.
    pub epoch: Epoch,
    /// The leader the responder knows in `epoch`.
    pub leader: Option<ReplicaId>,
    /// Whether the (pre-)vote was granted.
    pub granted: bool,
}

/// A new leader announces itself to a voter; resent to voters that have not fetched recently.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct BeginQuorumEpochRequest {
    /// The leader's epoch.
    pub epoch: Epoch,
    /// The leader.
    pub leader: ReplicaId,
    /// The receiver.
    pub voter: ReplicaId,
    /// The receiver's directory in the leader's voter set (`None` for a static voter); a
    /// replica with another directory answers `WrongReceiver` (KIP-853).
    pub voter_directory: Option<DirectoryId>,
}

/// The answer to a [`BeginQuorumEpochRequest`], [`EndQuorumEpochRequest`] and others that carry
/// no payload of their own.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct EpochResponse {
    /// Why the request was refused, if it was.
    pub error: Option<ErrorCode>,
    /// The responder's epoch.
    pub epoch: Epoch,
    /// The leader the responder knows in `epoch`.
    pub leader: Option<ReplicaId>,
}

/// A resigning leader tells voters to elect a successor now.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct EndQuorumEpochRequest {
    /// The resigning leader's epoch.
    pub epoch: Epoch,
    /// The resigning leader.
    pub leader: ReplicaId,
    /// Voters ordered by descending fetch offset; the first starts its election at once.
    pub preferred_successors: Vec<ReplicaId>,
}

/// A follower or observer pulls records from the leader. Its fetch offset is an acknowledgement:
/// everything below it is durable on the fetcher (decisions D4).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct FetchRequest {
    /// The fetcher's epoch (`CurrentLeaderEpoch`).
    pub epoch: Epoch,
    /// The fetcher.
    pub replica: ReplicaId,
    /// The fetcher's directory: its fetches count as a voter's only when the voter set has
    /// this key (KIP-853).
    pub replica_directory: Option<DirectoryId>,
    /// The fetcher's log end offset: the first record it wants.
    pub fetch_offset: Offset,
    /// The epoch of the fetcher's last record (0 for an empty log).
    pub last_fetched_epoch: Epoch,
    /// The fetcher's high watermark; the leader answers at once when it is behind (KIP-1166).
    pub high_watermark: Option<Offset>,
    /// The highest read barrier the fetcher has seen from this leader (D6).
    pub read_barrier: ReadBarrier,
    /// How long the leader may park the request waiting for news.
    pub max_wait: Duration,
    /// Upper bound on the records' encoded size in the response (at least one record is sent).
    pub max_bytes: u32,
}

/// The answer to a [`FetchRequest`].
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct FetchResponse {
    /// Why the request was refused, if it was.
    pub error: Option<ErrorCode>,
    /// The responder's epoch.
    pub epoch: Epoch,
    /// The leader the responder knows in `epoch`.
    pub leader: Option<ReplicaId>,
    /// The leader's high watermark (absent until it has committed in its epoch).
    pub high_watermark: Option<Offset>,
    /// Set when the fetcher's log diverges: truncate to this epoch's end offset, then refetch.
    pub diverging: Option<OffsetAndEpoch>,
    /// Records from the fetch offset, in order, contiguous.
    pub records: Vec<Record>,
    /// The leader's current read barrier; the fetcher echoes it in its next Fetch.
    pub read_barrier: ReadBarrier,
    /// Set when the records the fetcher needs are purged: download this snapshot (KIP-630)
    /// with [`FetchSnapshotRequest`], install it, then fetch from its end offset.
    pub snapshot: Option<OffsetAndEpoch>,
}

/// A follower or observer downloads a chunk of the leader's snapshot (KIP-630).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct FetchSnapshotRequest {
    /// The fetcher's epoch.
    pub epoch: Epoch,
    /// The fetcher.
    pub replica: ReplicaId,
    /// The fetcher's directory.
    pub replica_directory: Option<DirectoryId>,
    /// The snapshot: the end offset it covers and the epoch of the record before that offset.
    pub snapshot: OffsetAndEpoch,
    /// The first byte wanted.
    pub position: u64,
    /// At most this many bytes in the response.
    pub max_bytes: u32,
}

/// A chunk of a snapshot.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct FetchSnapshotResponse {
    /// Why the request was refused, if it was.
    pub error: Option<ErrorCode>,
    /// The responder's epoch.
    pub epoch: Epoch,
    /// The leader the responder knows in `epoch`.
    pub leader: Option<ReplicaId>,
    /// The snapshot the chunk belongs to.
    pub snapshot: OffsetAndEpoch,
    /// The snapshot's total size in bytes.
    pub size: u64,
    /// CRC-32 of the whole snapshot: the downloader verifies it before installing, and a
    /// download resumed from another replica restarts when it differs.
    pub checksum: u32,
    /// Where `data` starts in the snapshot.
    pub position: u64,
    /// The bytes.
    pub data: Bytes,
}

/// Asks the leader for its view of the quorum.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct DescribeQuorumRequest {}

/// The replication state of one replica as the leader sees it.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ReplicaProgress {
    /// The replica.
    pub replica: ReplicaId,
    /// The directory it fetches with (for a voter: its voter entry's, if it has not fetched).
    pub directory: Option<DirectoryId>,
    /// Its last acknowledged fetch offset (the leader's own durable end offset for itself).
    pub end_offset: Option<Offset>,
    /// Nanoseconds of core time since its last valid fetch, if it ever fetched.
    pub since_last_fetch: Option<Duration>,
}

/// The answer to a [`DescribeQuorumRequest`].
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct DescribeQuorumResponse {
    /// `NotLeader` unless the responder leads.
    pub error: Option<ErrorCode>,
    /// The responder's epoch.
    pub epoch: Epoch,
    /// The leader the responder knows.
    pub leader: Option<ReplicaId>,
    /// The leader's high watermark.
    pub high_watermark: Option<Offset>,
    /// Every voter's progress.
    pub voters: Vec<ReplicaProgress>,
    /// Every observer that fetched recently.
    pub observers: Vec<ReplicaProgress>,
}

/// A follower or observer asks the leader for a read offset on behalf of `read_count` reads
/// (decisions D6). Leader-only, batched.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ReadIndexRequest {
    /// The sender's epoch.
    pub epoch: Epoch,
    /// The sender.
    pub replica: ReplicaId,
    /// How many client reads this request stands for (for metrics; one round serves them all).
    pub read_count: u32,
    /// Every read in the batch accepts a lease (D6): the leader may skip the round while it
    /// holds one.
    pub lease: bool,
}

/// The answer to a [`ReadIndexRequest`].
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ReadIndexResponse {
    /// Why no read offset was given.
    pub error: Option<ErrorCode>,
    /// The responder's epoch.
    pub epoch: Epoch,
    /// The leader the responder knows.
    pub leader: Option<ReplicaId>,
    /// The confirmed read offset: serve once applied through it (exclusive).
    pub read_offset: Option<Offset>,
}

/// Client writes forwarded by a replica that does not lead to the leader, in the order one
/// caller submitted them. The driver handles it; the protocol core never sees it.
///
/// The leader proposes them in order; once one is refused, the rest are refused too, so a
/// retry of the refused suffix can never be applied before a write that was accepted.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ForwardRequest {
    /// The record payloads to propose, in order.
    pub payloads: Vec<Bytes>,
    /// The batch's place in its caller's write session, if it has one: the leader drops a
    /// batch that arrives after a later one of the same session (a late delivery).
    pub order: Option<WriteOrder>,
    /// The epoch in which the forwarder knew the receiver as leader. The receiver proposes
    /// the batch only while it leads that very epoch: a batch delayed across a leader change
    /// is never appended by the same replica leading again later, after writes of its session
    /// that another leader took in between.
    pub epoch: Epoch,
}

/// A batch's place in a write session: the session's id and the batch's sequence number.
#[derive(Clone, Copy, PartialEq, Eq, Debug, PartialOrd, Ord, Hash)]
pub struct WriteOrder {
    /// Unique per session.
    pub session: u64,
    /// Rises with every batch of the session.
    pub seq: u64,
}

/// The answer to a [`ForwardRequest`], once every write committed and applied on the leader,
/// or why not.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ForwardResponse {
    /// Why the request as a whole was refused (then `results` is empty and nothing was
    /// proposed).
    pub error: Option<ErrorCode>,
    /// The responder's epoch.
    pub epoch: Epoch,
    /// The leader the responder knows.
    pub leader: Option<ReplicaId>,
    /// One result per payload, in order.
    pub results: Vec<ForwardResult>,
}

/// The fate of one forwarded write.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ForwardResult {
    /// Why the write did not commit.
    pub error: Option<ErrorCode>,
    /// Where the write committed (or, with `WriteLost`, where it was appended).
    pub committed: Option<OffsetAndEpoch>,
    /// With `QueueFull` or `TooLarge`: the leader's limit.
    pub limit: u32,
    /// The state machine's response to the write.
    pub response: Bytes,
}

/// Every request.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Request {
    /// Vote or pre-vote.
    Vote(VoteRequest),
    /// A new leader announces itself.
    BeginQuorumEpoch(BeginQuorumEpochRequest),
    /// A leader resigns.
    EndQuorumEpoch(EndQuorumEpochRequest),
    /// Pull replication.
    Fetch(FetchRequest),
    /// Quorum introspection.
    DescribeQuorum(DescribeQuorumRequest),
    /// A read offset for follower reads.
    ReadIndex(ReadIndexRequest),
    /// A client write forwarded to the leader.
    Forward(ForwardRequest),
    /// A chunk of a snapshot.
    FetchSnapshot(FetchSnapshotRequest),
}

/// Every response.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Response {
    /// To a Vote.
    Vote(VoteResponse),
    /// To a BeginQuorumEpoch.
    BeginQuorumEpoch(EpochResponse),
    /// To an EndQuorumEpoch.
    EndQuorumEpoch(EpochResponse),
    /// To a Fetch.
    Fetch(FetchResponse),
    /// To a DescribeQuorum.
    DescribeQuorum(DescribeQuorumResponse),
    /// To a ReadIndex.
    ReadIndex(ReadIndexResponse),
    /// To a Forward.
    Forward(ForwardResponse),
    /// To a FetchSnapshot.
    FetchSnapshot(FetchSnapshotResponse),
}

impl Request {
    /// A refusal of this request with `code`, from a replica that cannot say more (epoch 0,
    /// no leader): receivers treat it as stale and retry.
    pub fn error_response(&self, code: ErrorCode) -> Response {
        let epoch = Epoch::ZERO;
        let error = Some(code);
        match self {
            Request::Vote(_) => Response::Vote(VoteResponse {
                error,
                epoch,
                leader: None,
                granted: false,
            }),
            Request::BeginQuorumEpoch(_) => Response::BeginQuorumEpoch(EpochResponse {
                error,
                epoch,
                leader: None,
            }),
            Request::EndQuorumEpoch(_) => Response::EndQuorumEpoch(EpochResponse {
                error,
                epoch,
                leader: None,
            }),
            Request::Fetch(_) => Response::Fetch(FetchResponse {
                error,
                epoch,
                leader: None,
                high_watermark: None,
                diverging: None,
                records: Vec::new(),
                read_barrier: ReadBarrier::default(),
                snapshot: None,
            }),
            Request::DescribeQuorum(_) => Response::DescribeQuorum(DescribeQuorumResponse {
                error,
                epoch,
                leader: None,
                high_watermark: None,
                voters: Vec::new(),
                observers: Vec::new(),
            }),
            Request::ReadIndex(_) => Response::ReadIndex(ReadIndexResponse {
                error,
                epoch,
                leader: None,
                read_offset: None,
            }),
            Request::Forward(_) => Response::Forward(ForwardResponse {
                error,
                epoch,
                leader: None,
                results: Vec::new(),
            }),
            Request::FetchSnapshot(r) => Response::FetchSnapshot(FetchSnapshotResponse {
                error,
                epoch,
                leader: None,
                snapshot: r.snapshot,
                size: 0,
                checksum: 0,
                position: r.position,
                data: Bytes::new(),
            }),
        }
    }

    /// The name of the RPC, for metrics and traces.
    pub fn kind(&self) -> RpcKind {
        match self {
            Request::Vote(_) => RpcKind::Vote,
            Request::BeginQuorumEpoch(_) => RpcKind::BeginQuorumEpoch,
            Request::EndQuorumEpoch(_) => RpcKind::EndQuorumEpoch,
            Request::Fetch(_) => RpcKind::Fetch,
            Request::DescribeQuorum(_) => RpcKind::DescribeQuorum,
            Request::ReadIndex(_) => RpcKind::ReadIndex,
            Request::Forward(_) => RpcKind::Forward,
            Request::FetchSnapshot(_) => RpcKind::FetchSnapshot,
        }
    }
}

impl Response {
    /// The name of the RPC, for metrics and traces.
    pub fn kind(&self) -> RpcKind {
        match self {
            Response::Vote(_) => RpcKind::Vote,
            Response::BeginQuorumEpoch(_) => RpcKind::BeginQuorumEpoch,
            Response::EndQuorumEpoch(_) => RpcKind::EndQuorumEpoch,
            Response::Fetch(_) => RpcKind::Fetch,
            Response::DescribeQuorum(_) => RpcKind::DescribeQuorum,
            Response::ReadIndex(_) => RpcKind::ReadIndex,
            Response::Forward(_) => RpcKind::Forward,
            Response::FetchSnapshot(_) => RpcKind::FetchSnapshot,
        }
    }

    /// The responder's epoch and known leader, common to every response.
    pub fn epoch_and_leader(&self) -> (Epoch, Option<ReplicaId>) {
        match self {
            Response::Vote(r) => (r.epoch, r.leader),
            Response::BeginQuorumEpoch(r) | Response::EndQuorumEpoch(r) => (r.epoch, r.leader),
            Response::Fetch(r) => (r.epoch, r.leader),
            Response::DescribeQuorum(r) => (r.epoch, r.leader),
            Response::ReadIndex(r) => (r.epoch, r.leader),
            Response::Forward(r) => (r.epoch, r.leader),
            Response::FetchSnapshot(r) => (r.epoch, r.leader),
        }
    }

    /// The error code, common to every response.
    pub fn error(&self) -> Option<ErrorCode> {
        match self {
            Response::Vote(r) => r.error,
            Response::BeginQuorumEpoch(r) | Response::EndQuorumEpoch(r) => r.error,
            Response::Fetch(r) => r.error,
            Response::DescribeQuorum(r) => r.error,
            Response::ReadIndex(r) => r.error,
            Response::Forward(r) => r.error,
            Response::FetchSnapshot(r) => r.error,
        }
    }
}

/// The RPC types, for metrics.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum RpcKind {
    /// Vote and pre-vote.
    Vote,
    /// BeginQuorumEpoch.
    BeginQuorumEpoch,
    /// EndQuorumEpoch.
    EndQuorumEpoch,
    /// Fetch.
    Fetch,
    /// DescribeQuorum.
    DescribeQuorum,
    /// ReadIndex.
    ReadIndex,
    /// Forward.
    Forward,
    /// FetchSnapshot.
    FetchSnapshot,
}
