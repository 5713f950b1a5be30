//! Membership in the driver (KIP-853): the voter sets recovered from storage at start-up, the
//! header that makes every stored snapshot carry its voter set, and [`Node::change_voters`]
//! with its three named forms [`Node::add_voter`], [`Node::remove_voter`], [`Node::update_voter`].

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::sync::oneshot;

use super::outcome::{Committed, Uncertain, WriteError};
use super::task_messages::Command;
use super::Node;
use crate::codec::{decode_snapshot_header, encode_snapshot_header, SNAPSHOT_HEADER_MAX};
use crate::io::{LogStore, SnapshotReader, SnapshotStore, StorageError};
use crate::protocol::{MembershipError, VoterChange, VoterHistory};
use crate::snapshot_stream::Prepended;
use crate::types::{DirectoryId, Offset, OffsetAndEpoch, RecordKind, ReplicaId};
use crate::voters::VoterSet;

/// Why [`Node::change_voters`] did not end with the change committed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum VoterChangeError {
    /// Refused before anything was appended: the voter set is unchanged.
    #[error("voter change refused: {0}")]
    Refused(#[from] MembershipError),
    /// The voter set record was appended and then lost, or its fate is unknown: as for a write
    /// (see [`WriteError`]). [`WriteError::Unknown`] means the change may still complete: read
    /// the voter set from [`Node::status`] before trying again.
    #[error("voter change not confirmed: {0}")]
    NotConfirmed(WriteError),
}

impl Node {
    /// Changes the voter set by one voter (on the leader): adds a caught-up observer, removes a
    /// voter (this one too: it resigns once the removal commits), or updates a voter's endpoint.
    /// Returns once the new set is committed (by a majority of the new set), or with an error
    /// that says whether the change may still take effect. `timeout` bounds the wait for the
    /// commit; when it passes the change may still complete (`Unknown`).
    pub async fn change_voters(
        &self,
        change: VoterChange,
        timeout: Duration,
    ) -> Result<Committed, VoterChangeError> {
        let (accepted, accepted_rx) = oneshot::channel();
        let (reply, rx) = oneshot::channel();
        let shutting_down = || VoterChangeError::Refused(MembershipError::ShuttingDown);
        self.commands
            .send(Command::ChangeVoters {
                change,
                accepted,
                reply,
            })
            .await
            .map_err(|_| shutting_down())?;
        accepted_rx.await.map_err(|_| shutting_down())??;
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(Ok(committed))) => Ok(committed),
            Ok(Ok(Err(e))) => Err(VoterChangeError::NotConfirmed(e)),
            Ok(Err(_)) => Err(VoterChangeError::NotConfirmed(WriteError::Unknown(
                Uncertain::Stopped,
            ))),
            Err(_) => Err(VoterChangeError::NotConfirmed(WriteError::Unknown(
                Uncertain::TimedOut,
            ))),
        }
    }

    /// Makes the observer `(id, directory)` a voter reached at `endpoint` (KIP-853 AddVoter);
    /// [`Node::change_voters`] with [`VoterChange::Add`]. The observer must be fetching from
    /// this leader with exactly that directory and have caught up with its log.
    pub async fn add_voter(
        &self,
        id: ReplicaId,
        directory: DirectoryId,
        endpoint: impl Into<String>,
        timeout: Duration,
    ) -> Result<Committed, VoterChangeError> {
        let endpoint = endpoint.into();
        let change = VoterChange::Add {
            id,
            directory,
            endpoint,
        };
        self.change_voters(change, timeout).await
    }

    /// Removes the voter `(id, directory)` (KIP-853 RemoveVoter; `None` names a static voter,
    /// which matches any directory); [`Node::change_voters`] with [`VoterChange::Remove`].
    /// The leader may remove itself: it resigns once the removal commits.
    pub async fn remove_voter(
        &self,
        id: ReplicaId,
        directory: Option<DirectoryId>,
        timeout: Duration,
    ) -> Result<Committed, VoterChangeError> {
        let change = VoterChange::Remove { id, directory };
        self.change_voters(change, timeout).await
    }

    /// Gives the voter `(id, directory)` a new endpoint (KIP-853 UpdateVoter);
    /// [`Node::change_voters`] with [`VoterChange::Update`].
    pub async fn update_voter(
        &self,
        id: ReplicaId,
        directory: Option<DirectoryId>,
        endpoint: impl Into<String>,
        timeout: Duration,
    ) -> Result<Committed, VoterChangeError> {
        let endpoint = endpoint.into();
        let change = VoterChange::Update {
            id,
            directory,
            endpoint,
        };
        self.change_voters(change, timeout).await
    }
}

/// The header every stored snapshot starts with: the voter set in force at its offset.
pub(super) fn snapshot_header(voters: &VoterSet) -> Bytes {
    let mut out = BytesMut::with_capacity(SNAPSHOT_HEADER_MAX.min(1024));
    encode_snapshot_header(voters, &mut out);
    out.freeze()
}

/// Reads a stored snapshot's voter set (`bootstrap` for a snapshot without a header) from the
/// start of `reader`; returns it with a reader of the state machine's bytes that follow.
pub(super) async fn unframe_snapshot(
    mut reader: Box<dyn SnapshotReader>,
    bootstrap: &VoterSet,
) -> Result<(VoterSet, Box<dyn SnapshotReader>), StorageError> {
    let read_err = |e: std::io::Error| StorageError::Io(Box::new(e));
    // The header lies within the first SNAPSHOT_HEADER_MAX bytes (or the whole snapshot).
    let mut head = reader
        .next_chunk()
        .await
        .map_err(read_err)?
        .unwrap_or_default();
    while head.len() < SNAPSHOT_HEADER_MAX {
        let Some(more) = reader.next_chunk().await.map_err(read_err)? else {
            break;
        };
        let mut joined = BytesMut::with_capacity(head.len() + more.len());
        joined.extend_from_slice(&head);
        joined.extend_from_slice(&more);
        head = joined.freeze();
    }
    let (set, header) = decode_snapshot_header(&head)
        .map_err(|e| StorageError::Invalid(format!("snapshot voter set: {e}")))?;
    let rest = Prepended {
        head: Some(head.slice(header..)),
        inner: reader,
    };
    Ok((set.unwrap_or_else(|| bootstrap.clone()), Box::new(rest)))
}

/// The voter set a stored snapshot carries, read from its first bytes.
pub(super) async fn snapshot_voters(
    store: &dyn SnapshotStore,
    id: OffsetAndEpoch,
    bootstrap: &VoterSet,
) -> Result<VoterSet, StorageError> {
    let head = store
        .read(id, 0, SNAPSHOT_HEADER_MAX as u32)
        .await?
        .ok_or_else(|| StorageError::Invalid(format!("snapshot {id:?} vanished")))?
        .1;
    let (set, _) = decode_snapshot_header(&head)
        .map_err(|e| StorageError::Invalid(format!("snapshot voter set: {e}")))?;
    Ok(set.unwrap_or_else(|| bootstrap.clone()))
}

/// The voter sets along the log at start-up: `base` (the snapshot's set or the bootstrap set),
/// then every voter set record in `[from, to)`. Reads the log in bounded chunks and keeps only
/// voter set records.
pub(super) async fn recover_voters(
    log: &dyn LogStore,
    base: VoterSet,
    from: Offset,
    to: Offset,
) -> Result<VoterHistory, StorageError> {
    let mut history = VoterHistory::new(base);
    let mut next = from;
    while next < to {
        let chunk = log.read(next, to, 8 << 20).await?;
        let Some(last) = chunk.last() else {
            return Err(StorageError::Invalid(format!(
                "the log returned nothing at {next} while recovering voter sets"
            )));
        };
        next = last.offset.next();
        for r in chunk.iter().filter(|r| r.kind == RecordKind::Voters) {
            let (set, _) = crate::codec::decode_voters(&r.payload).map_err(|e| {
                StorageError::Invalid(format!("voter set record at {}: {e}", r.offset))
            })?;
            history.push(r.offset, set);
        }
    }
    Ok(history)
}
