//! The messages the replica task receives: commands from [`super::Node`], inbound RPCs, and
//! completions from the writer, applier and RPC tasks.

use super::waiters::Reply;
use super::{ReadError, ReadMode, ReadPermit};
use bytes::Bytes;
use tokio::sync::oneshot;

use crate::io::StorageError;
use crate::message::{Request, RequestId, Response, WriteOrder};
use crate::protocol::{LogSeq, PersistSeq, Status, TransferError};
use crate::types::{Epoch, OffsetAndEpoch, Record, ReplicaId};

pub(super) enum Command {
    /// Writes of one caller, in order: proposed here or forwarded together.
    Write {
        writes: Vec<(Bytes, Reply)>,
        order: Option<WriteOrder>,
    },
    Read {
        mode: ReadMode,
        reply: oneshot::Sender<Result<ReadPermit, ReadError>>,
    },
    /// Writes of one caller, in order, proposed here.
    Propose {
        writes: Vec<(Bytes, Reply)>,
        order: Option<WriteOrder>,
        /// For writes forwarded by another replica: the epoch in which it knew this replica
        /// as leader; they are proposed only while this replica leads that epoch.
        epoch: Option<Epoch>,
    },
    /// One write proposed here (`Node::propose`): no batch to allocate on the hottest path.
    ProposeOne {
        payload: Bytes,
        reply: Reply,
    },
    Status {
        reply: oneshot::Sender<Status>,
    },
    /// One voter change: `accepted` says whether it was appended, `reply` when it committed.
    ChangeVoters {
        change: crate::protocol::VoterChange,
        accepted: oneshot::Sender<Result<(), crate::protocol::MembershipError>>,
        reply: Reply,
    },
    Transfer {
        to: ReplicaId,
        reply: oneshot::Sender<Result<(), TransferError>>,
    },
    Shutdown {
        reply: oneshot::Sender<()>,
    },
    Abort {
        reply: oneshot::Sender<()>,
    },
}

pub(super) struct Inbound {
    pub(super) from: ReplicaId,
    pub(super) request: Request,
    pub(super) reply: oneshot::Sender<Response>,
}

pub(super) enum Done {
    Rpc {
        to: ReplicaId,
        id: RequestId,
        result: Result<Response, crate::io::TransportError>,
    },
    Log(Result<LogSeq, StorageError>),
    Election(Result<PersistSeq, StorageError>),
    Applied(Result<Vec<(OffsetAndEpoch, Bytes)>, String>),
    OldRecords {
        to: ReplicaId,
        id: RequestId,
        response: Response,
        records: Result<Vec<Record>, StorageError>,
    },
    /// A response whose data came from storage.
    Filled {
        id: RequestId,
        response: Result<Response, StorageError>,
    },
    SnapshotTaken(Result<OffsetAndEpoch, String>),
    Restored(Result<OffsetAndEpoch, String>),
    /// A download finished: its id, whether it verified, and the voter set it carries.
    SnapshotDownloaded(Result<(OffsetAndEpoch, bool, crate::voters::VoterSet), StorageError>),
    /// A task that reports here panicked (see `supervise`): what it would have reported never
    /// comes.
    Panicked(String),
}
