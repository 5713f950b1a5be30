//! Formatting: the one act that makes storage a founding member of a cluster (KIP-853's
//! bootstrap checkpoint, written by `kafka-storage format`).
//!
//! A replica learns whether it votes only from its storage: the voter set a snapshot header
//! carries, then the voter set records of its log. [`format()`] writes the founding voter set as
//! the header of an empty snapshot at offset 0, before the first start. Storage found empty at
//! a start (never formatted, or wiped since) gets such a snapshot too, but naming only the
//! configured voters other than this replica ([`crate::ValidatedConfig::start_voters`]): its
//! contacts. So a replica restarted on an emptied disk with its unchanged configuration comes
//! back as an observer, at this start and every later one, and never as the voter whose data
//! it lost; a standalone configuration on empty storage refuses to start.

use crate::io::SnapshotStore;
use crate::types::{Epoch, Offset, OffsetAndEpoch};
use crate::voters::VoterSet;

use super::membership::snapshot_header;

/// Where the formatted voter set lives: an empty snapshot before the first record.
pub const FORMAT_SNAPSHOT: OffsetAndEpoch = OffsetAndEpoch {
    offset: Offset::ZERO,
    epoch: Epoch(0),
};

/// Why storage could not be formatted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FormatError {
    /// The store already holds a snapshot: it was formatted, or holds a replica's data.
    #[error(
        "the storage already holds snapshot {0}: it was formatted before or holds a replica's \
         data; format only a founder's new, empty storage, once"
    )]
    AlreadyFormatted(OffsetAndEpoch),
    /// The founding set is empty.
    #[error("the founding voter set is empty")]
    NoVoters,
    /// Reading or writing the store failed.
    #[error("formatting failed: {0}")]
    Storage(#[from] crate::io::StorageError),
}

/// Formats empty storage as a founding member of a cluster whose first voter set is `voters`
/// (every founding replica formats with the same set; give each voter its directory id so
/// that a replica that loses its disk is never counted as the voter it was). Done once,
/// before the replica's first [`super::Node::start`]; storage holding a snapshot is refused.
pub async fn format(snapshots: &dyn SnapshotStore, voters: &VoterSet) -> Result<(), FormatError> {
    if voters.is_empty() {
        return Err(FormatError::NoVoters);
    }
    if let Some(s) = snapshots.latest().await? {
        return Err(FormatError::AlreadyFormatted(s.id));
    }
    write_voter_snapshot(snapshots, voters).await
}

/// Writes `voters` as the header of an empty snapshot at [`FORMAT_SNAPSHOT`].
pub(super) async fn write_voter_snapshot(
    snapshots: &dyn SnapshotStore,
    voters: &VoterSet,
) -> Result<(), FormatError> {
    let mut writer = snapshots.create(FORMAT_SNAPSHOT).await?;
    writer.write(snapshot_header(voters)).await?;
    writer.finish().await?;
    Ok(())
}
