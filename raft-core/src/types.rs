//! The vocabulary every layer shares: ids, epochs, offsets, core time, records and the
//! durable election state.
//!
//! These are concrete newtypes rather than generics: a replica id is always a `u32`, an offset
//! always a `u64`, and mixing them up is a compile error rather than a consensus bug.

use std::fmt;
use std::time::Duration;

use bytes::Bytes;

/// The id of a replica (voter or observer). Unique within a cluster.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct ReplicaId(pub u32);

impl fmt::Display for ReplicaId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "r{}", self.0)
    }
}

/// The id of a replica group (one replicated log, with its own voters, epochs, log, snapshots
/// and state machine) among the many a host may run (see [`crate::driver::host`]). A replica's
/// id is its host's id in every group it belongs to, as a Kafka broker's id is in every
/// partition. A node that runs one group runs [`GroupId::DEFAULT`].
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default)]
pub struct GroupId(pub u64);

impl GroupId {
    /// The group of a node that runs one: the one a frame without a group names.
    pub const DEFAULT: GroupId = GroupId(0);
}

impl fmt::Display for GroupId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "g{}", self.0)
    }
}

/// A replica's storage incarnation (KIP-853's directory id): a random non-zero 128-bit id made
/// when a data directory is first formatted and kept with it. A replica whose directory was
/// wiped comes back with a new one, so the voter set can tell it from the replica that held the
/// lost data: it is an observer until it is added again.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct DirectoryId(pub u128);

impl fmt::Display for DirectoryId {
    /// The UUID form, `8-4-4-4-12` hex digits.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let h = format!("{:032x}", self.0);
        write!(
            f,
            "{}-{}-{}-{}-{}",
            &h[0..8],
            &h[8..12],
            &h[12..16],
            &h[16..20],
            &h[20..32]
        )
    }
}

impl std::str::FromStr for DirectoryId {
    type Err = String;

    /// Accepts the UUID form or 32 bare hex digits; refuses zero, which means "none".
    fn from_str(s: &str) -> Result<DirectoryId, String> {
        let hex: String = s.chars().filter(|c| *c != '-').collect();
        if hex.len() != 32 {
            return Err(format!(
                "a directory id has 32 hex digits, not {}",
                hex.len()
            ));
        }
        let value = u128::from_str_radix(&hex, 16)
            .map_err(|_| format!("a directory id is hexadecimal: {s:?}"))?;
        if value == 0 {
            return Err("the zero directory id is reserved".into());
        }
        Ok(DirectoryId(value))
    }
}

/// A leader epoch (Raft's "term"). Epoch 0 is the primordial epoch of an empty log: no leader
/// and no record ever carries it.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default)]
pub struct Epoch(pub u32);

impl Epoch {
    /// The primordial epoch of an empty log.
    pub const ZERO: Epoch = Epoch(0);

    /// The next epoch. Saturates instead of wrapping: an epoch that wraps would break every
    /// ordering argument the protocol rests on, so a replica at `u32::MAX` simply cannot campaign.
    pub fn next(self) -> Epoch {
        Epoch(self.0.saturating_add(1))
    }
}

impl fmt::Display for Epoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "e{}", self.0)
    }
}

/// A position in the log. Offsets are dense: record `n` is followed by record `n + 1`.
/// End offsets and the high watermark are exclusive (the first offset *not* included).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default)]
pub struct Offset(pub u64);

impl Offset {
    /// The first offset of every log.
    pub const ZERO: Offset = Offset(0);

    /// The offset after this one.
    pub fn next(self) -> Offset {
        Offset(self.0 + 1)
    }

    /// `self + n`.
    pub fn plus(self, n: u64) -> Offset {
        Offset(self.0 + n)
    }
}

impl fmt::Display for Offset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// An offset together with the epoch of the record there (or, for a log end, the epoch of the
/// last record). Ordered epoch first, which is exactly Raft's "log is at least as up to date".
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct OffsetAndEpoch {
    /// The offset.
    pub offset: Offset,
    /// The epoch.
    pub epoch: Epoch,
}

impl OffsetAndEpoch {
    /// Builds the pair.
    pub fn new(offset: Offset, epoch: Epoch) -> Self {
        OffsetAndEpoch { offset, epoch }
    }
}

impl PartialOrd for OffsetAndEpoch {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for OffsetAndEpoch {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.epoch, self.offset).cmp(&(other.epoch, other.offset))
    }
}

impl fmt::Display for OffsetAndEpoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.offset, self.epoch)
    }
}

/// Core time: nanoseconds on a monotonic clock chosen by the driver. The protocol never reads a
/// clock; it is handed an `Instant` with every input.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default)]
pub struct Instant(pub u64);

impl Instant {
    /// The instant `d` after `self`, saturating.
    pub fn plus(self, d: Duration) -> Instant {
        Instant(
            self.0
                .saturating_add(d.as_nanos().min(u64::MAX as u128) as u64),
        )
    }

    /// The time elapsed from `earlier` to `self`, zero if `earlier` is later.
    pub fn since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// The instant `d` before `self`, saturating at zero.
    pub fn minus(self, d: Duration) -> Instant {
        Instant(
            self.0
                .saturating_sub(d.as_nanos().min(u64::MAX as u128) as u64),
        )
    }

    /// Never: later than every real deadline.
    pub const NEVER: Instant = Instant(u64::MAX);
}

impl fmt::Display for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}ms", self.0 / 1_000_000)
    }
}

/// What a record carries.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum RecordKind {
    /// A client payload, handed to the state machine when committed.
    Data,
    /// The control record a new leader appends at its epoch start offset; once it is committed
    /// the leader has committed in its own epoch (KAFKA-12619). The state machine never sees it.
    LeaderChange,
    /// A control record holding the whole voter set (KIP-853's `VotersRecord`), encoded by
    /// [`crate::codec::encode_voters`]. It takes effect on every replica as soon as it is in the
    /// log, committed or not; the state machine never sees it.
    Voters,
}

/// The record format this build writes and reads. The format itself (the layout behind
/// [`RECORD_HEADER_LEN`]) is [`crate::codec`]'s; the constants live with [`Record`] so that the
/// vocabulary needs nothing from the codec.
pub const RECORD_FORMAT_VERSION: u8 = 1;

/// Bytes of a record before its payload: CRC-32 (4), format version (1), kind (1), offset (8),
/// epoch (4) and payload length (4).
pub const RECORD_HEADER_LEN: usize = 4 + 1 + 1 + 8 + 4 + 4;

/// One log record. The payload is reference counted: moving a record between the transport,
/// the core and the log never copies its bytes.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Record {
    /// Position in the log.
    pub offset: Offset,
    /// Epoch of the leader that appended it.
    pub epoch: Epoch,
    /// Data or control.
    pub kind: RecordKind,
    /// Opaque client bytes (empty for control records).
    pub payload: Bytes,
}

impl Record {
    /// The record's `(offset, epoch)` identity.
    pub fn id(&self) -> OffsetAndEpoch {
        OffsetAndEpoch::new(self.offset, self.epoch)
    }

    /// Bytes this record occupies in a frame, for byte limits (payload plus fixed header).
    pub fn encoded_len(&self) -> usize {
        RECORD_HEADER_LEN + self.payload.len()
    }
}

/// The durable election state: what a replica must remember across a crash to never vote twice
/// in an epoch and never lead an epoch twice.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct ElectionState {
    /// The latest epoch this replica knows.
    pub epoch: Epoch,
    /// Whom it voted for in `epoch` (a standard vote; pre-votes are never stored).
    pub voted_for: Option<ReplicaId>,
    /// The directory of the candidate it voted for, when the candidate named one: a replica
    /// with the same id and another directory is another replica, and gets no vote in this
    /// epoch (KAFKA-16526).
    pub voted_directory: Option<DirectoryId>,
    /// The leader of `epoch`, if known.
    pub leader: Option<ReplicaId>,
}

impl fmt::Display for ElectionState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.epoch)?;
        if let Some(v) = self.voted_for {
            write!(f, " voted={v}")?;
        }
        if let Some(l) = self.leader {
            write!(f, " leader={l}")?;
        }
        Ok(())
    }
}

/// The roles of a replica, as KRaft names them.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Role {
    /// Knows an epoch but no leader; may have voted in it.
    Unattached,
    /// Asking for pre-votes before it raises the epoch (memory only).
    Prospective,
    /// Raised the epoch, voted for itself, asking for votes.
    Candidate,
    /// Leads the epoch.
    Leader,
    /// Fetches from a known leader.
    Follower,
    /// A former leader that stopped serving and hands over (memory only).
    Resigned,
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            Role::Unattached => "unattached",
            Role::Prospective => "prospective",
            Role::Candidate => "candidate",
            Role::Leader => "leader",
            Role::Follower => "follower",
            Role::Resigned => "resigned",
        };
        f.write_str(s)
    }
}
