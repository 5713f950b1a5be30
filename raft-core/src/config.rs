//! Protocol configuration: membership, timers (decisions D7), batching and queue bounds, and the
//! switches the tests flip (pre-vote, check-quorum, stickiness).
//!
//! Config is parsed, not validated: [`Config::validate`] turns it into a [`ValidatedConfig`],
//! the only form the protocol accepts, so a replica can never run with an unsafe combination.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::types::{DirectoryId, ReplicaId};
use crate::voters::{Voter, VoterSet, VOTERS_MAX};

/// Everything a replica needs to know before it starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// This replica.
    pub id: ReplicaId,
    /// The bootstrap voter set: in force until this replica's log or snapshot holds a voter
    /// set record (KIP-853), after which the log decides. Static voters carry no directory id,
    /// except that a standalone bootstrap (`voters` = this replica alone) binds this replica's
    /// own `directory`. An observer is any replica not in the set in force.
    pub voters: BTreeSet<ReplicaId>,
    /// The id of this replica's storage directory (KIP-853), made when the directory was
    /// first formatted; `None` for a replica that predates directory ids.
    pub directory: Option<DirectoryId>,
    /// Observers the replicas know of (observers may also appear by fetching).
    pub observers: BTreeSet<ReplicaId>,
    /// Base election timeout `T`; each wait is drawn from `[T, 2T)`.
    pub election_timeout: Duration,
    /// A follower that has not had a successful fetch for this long starts an election.
    pub fetch_timeout: Duration,
    /// Longest time the leader parks a fetch waiting for news (long poll).
    pub fetch_max_wait: Duration,
    /// Deadline of every outgoing request.
    pub request_timeout: Duration,
    /// Pause after a failed request before retrying the same peer.
    pub retry_backoff: Duration,
    /// Upper bound of the staggered election backoff after an EndQuorumEpoch.
    pub election_backoff_max: Duration,
    /// How long the leader lingers to batch proposals before appending them.
    pub append_linger: Duration,
    /// A batch is appended at once when it reaches this many records.
    pub batch_records_max: u32,
    /// A batch is appended at once when it reaches this many payload bytes.
    pub batch_bytes_max: u32,
    /// Records per fetch response are bounded by this many encoded bytes.
    pub fetch_bytes_max: u32,
    /// Proposals accepted but not yet committed, at most; more are refused with `QueueFull`.
    pub pending_proposals_max: u32,
    /// Largest single payload a proposal may carry.
    pub payload_bytes_max: u32,
    /// Ask for pre-votes before raising the epoch (KIP-996, D2).
    pub pre_vote: bool,
    /// A leader without fetches from a majority for 1.5 x fetch timeout resigns (D5).
    pub check_quorum: bool,
    /// Followers that heard from the leader recently refuse votes for others (D3).
    pub sticky_votes: bool,
    /// A linearizable read (on any replica) fails with a retriable error after this long.
    pub read_timeout: Duration,
    /// Allow `ReadMode::Lease`: the leader skips the confirmation round while it holds a lease
    /// (D6). Requires `sticky_votes`. Off by default: its safety rests on bounded clock drift.
    pub lease_reads: bool,
    /// Subtracted from the fetch timeout when computing a lease: the bound on how much faster
    /// any replica's clock may run than the leader's over one fetch timeout.
    pub lease_drift_margin: Duration,
    /// Take a state machine snapshot once this many records were applied since the last one
    /// (0: never, the log grows without bound).
    pub snapshot_after_records: u64,
    /// Take a snapshot once this many payload bytes were applied since the last one (0: no
    /// byte trigger). Whichever trigger fires first wins.
    pub snapshot_after_bytes: u64,
    /// Take a snapshot once this long passed since the last one and at least one record was
    /// applied since (zero: no time trigger). Checked as records are applied.
    pub snapshot_after_time: Duration,
    /// Records kept in the log below a new snapshot, so that followers slightly behind still
    /// catch up by fetching records rather than downloading the snapshot.
    pub snapshot_log_retention: u64,
    /// Bytes per FetchSnapshot chunk.
    pub snapshot_chunk_bytes: u32,
    /// Test-only fault switch (negative control for the linearizability checker): followers
    /// serve linearizable reads at their local high watermark without asking the leader.
    #[cfg(feature = "testing")]
    pub test_unsafe_reads: bool,
    /// Test-only fault switch (negative control for D6): the leader counts any fetch that
    /// arrives as confirming its newest read barrier, echoed or not.
    #[cfg(feature = "testing")]
    pub test_count_arrivals: bool,
    /// Test-only: one planted mistake in a protocol rule (see [`crate::planted`]).
    #[cfg(feature = "testing")]
    pub test_planted: Option<crate::planted::Planted>,
}

impl Config {
    /// A configuration with the defaults of decisions D7 for replica `id` among `voters`.
    pub fn new(id: ReplicaId, voters: impl IntoIterator<Item = ReplicaId>) -> Config {
        Config {
            id,
            voters: voters.into_iter().collect(),
            directory: None,
            observers: BTreeSet::new(),
            election_timeout: Duration::from_millis(1000),
            fetch_timeout: Duration::from_millis(2000),
            fetch_max_wait: Duration::from_millis(500),
            request_timeout: Duration::from_millis(2000),
            retry_backoff: Duration::from_millis(20),
            election_backoff_max: Duration::from_millis(1000),
            append_linger: Duration::from_millis(0),
            batch_records_max: 512,
            batch_bytes_max: 1 << 20,
            fetch_bytes_max: 1 << 20,
            pending_proposals_max: 16 * 1024,
            payload_bytes_max: 512 << 10,
            pre_vote: true,
            check_quorum: true,
            sticky_votes: true,
            read_timeout: Duration::from_millis(2000),
            lease_reads: false,
            lease_drift_margin: Duration::from_millis(200),
            snapshot_after_records: 100_000,
            snapshot_after_bytes: 256 << 20,
            snapshot_after_time: Duration::from_secs(3600),
            snapshot_log_retention: 10_000,
            snapshot_chunk_bytes: 1 << 20,
            #[cfg(feature = "testing")]
            test_unsafe_reads: false,
            #[cfg(feature = "testing")]
            test_count_arrivals: false,
            #[cfg(feature = "testing")]
            test_planted: None,
        }
    }

    /// Checks every rule a safe and live replica needs.
    pub fn validate(self) -> Result<ValidatedConfig, ConfigError> {
        if self.voters.is_empty() {
            return Err(ConfigError::NoVoters);
        }
        if self.voters.len() > VOTERS_MAX {
            return Err(ConfigError::TooManyVoters);
        }
        if let Some(both) = self.voters.intersection(&self.observers).next() {
            return Err(ConfigError::VoterIsObserver(*both));
        }
        let nonzero = [
            ("election_timeout", self.election_timeout),
            ("fetch_timeout", self.fetch_timeout),
            ("request_timeout", self.request_timeout),
        ];
        for (field, value) in nonzero {
            if value.is_zero() {
                return Err(ConfigError::Zero(field));
            }
        }
        // KIP-1236: a follower must be able to sit through two long polls without timing out.
        if self.fetch_timeout < self.fetch_max_wait * 2 {
            return Err(ConfigError::FetchTimeoutTooShort {
                fetch_timeout: self.fetch_timeout,
                fetch_max_wait: self.fetch_max_wait,
            });
        }
        if self.batch_records_max == 0 || self.pending_proposals_max == 0 {
            return Err(ConfigError::Zero(
                "batch_records_max / pending_proposals_max",
            ));
        }
        if self.snapshot_chunk_bytes == 0 {
            return Err(ConfigError::Zero("snapshot_chunk_bytes"));
        }
        if self.lease_reads && !self.sticky_votes {
            return Err(ConfigError::LeaseWithoutStickyVotes);
        }
        if self.lease_reads && self.lease_drift_margin >= self.fetch_timeout {
            return Err(ConfigError::LeaseMarginTooLarge);
        }
        if self.fetch_bytes_max < self.payload_bytes_max + crate::codec::RECORD_HEADER_LEN as u32 {
            return Err(ConfigError::FetchSmallerThanRecord);
        }
        Ok(ValidatedConfig(self))
    }
}

/// A configuration that passed [`Config::validate`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValidatedConfig(Config);

impl std::ops::Deref for ValidatedConfig {
    type Target = Config;
    fn deref(&self) -> &Config {
        &self.0
    }
}

impl ValidatedConfig {
    /// The voter set in force before the log or a snapshot names one: the configured ids
    /// without directory ids, or, for a standalone bootstrap, this replica with its directory.
    pub fn bootstrap_voters(&self) -> VoterSet {
        let standalone = self.0.voters.len() == 1 && self.0.voters.contains(&self.0.id);
        if standalone && self.0.directory.is_some() {
            let me = Voter {
                directory: self.0.directory,
                endpoint: String::new(),
            };
            return VoterSet::from_entries([(self.0.id, me)]).expect("one voter is a valid set");
        }
        VoterSet::from_ids(self.0.voters.iter().copied())
    }

    /// The voter set a replica starts from when its storage names none (no snapshot, so no
    /// formatted voter set), given whether that storage is `empty` (no election state, no log).
    ///
    /// A replica votes only in a cluster it was formatted into (KIP-853's bootstrap act, see
    /// [`crate::driver::format`]): an empty directory, whatever its configuration says, is a
    /// replica that lost its data or never had any, so the configured voters are only its
    /// contacts and the replica itself is left out of them. It is an observer until the log
    /// it fetches names it, with its directory, as a voter. When no contact is left (a
    /// standalone configuration) it cannot start: [`NotFormatted`].
    ///
    /// Storage that is not empty but holds no voter set predates formatting: the configured
    /// (static) set applies, as it did when that storage was made.
    pub fn start_voters(&self, empty: bool) -> Result<VoterSet, NotFormatted> {
        if !empty || planted!(self.0, BootstrapOnEmptyDisk) {
            return Ok(self.bootstrap_voters());
        }
        let me = self.0.id;
        let contacts = VoterSet::from_ids(self.0.voters.iter().copied().filter(|v| *v != me));
        if contacts.is_empty() {
            return Err(NotFormatted { id: me });
        }
        Ok(contacts)
    }

    /// The check-quorum window: 1.5 x fetch timeout (D5).
    pub fn check_quorum_timeout(&self) -> Duration {
        self.0.fetch_timeout * 3 / 2
    }

    /// The original configuration.
    pub fn into_inner(self) -> Config {
        self.0
    }
}

/// Why a configuration was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The voter set is empty.
    #[error("the voter set is empty")]
    NoVoters,
    /// More voters than a voter set can hold.
    #[error("a voter set holds at most {VOTERS_MAX} voters")]
    TooManyVoters,
    /// A replica is listed as both voter and observer.
    #[error("replica {0} is listed as both voter and observer")]
    VoterIsObserver(ReplicaId),
    /// A duration or count that must be positive is zero.
    #[error("{0} must be greater than zero")]
    Zero(&'static str),
    /// `fetch_timeout < 2 x fetch_max_wait`.
    #[error(
        "fetch_timeout ({fetch_timeout:?}) must be at least twice fetch_max_wait ({fetch_max_wait:?})"
    )]
    FetchTimeoutTooShort {
        /// The configured fetch timeout.
        fetch_timeout: Duration,
        /// The configured long-poll wait.
        fetch_max_wait: Duration,
    },
    /// Lease reads are only sound when followers refuse votes while they hear from the leader.
    #[error("lease_reads requires sticky_votes")]
    LeaseWithoutStickyVotes,
    /// The drift margin leaves no lease at all.
    #[error("lease_drift_margin must be smaller than fetch_timeout")]
    LeaseMarginTooLarge,
    /// A fetch response could not carry the largest allowed record.
    #[error("fetch_bytes_max must hold at least one record of payload_bytes_max")]
    FetchSmallerThanRecord,
}

/// A replica with empty storage whose configuration names no other replica to learn the
/// cluster from: only formatting makes it a voter (see [`ValidatedConfig::start_voters`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "replica {id} has empty storage and no other voter to learn the cluster from: a voter's \
     storage must be formatted with the founding voter set before its first start (a storage \
     that was lost is not formatted again: the replica comes back as an observer of the \
     surviving voters and is added again)"
)]
pub struct NotFormatted {
    /// The replica.
    pub id: ReplicaId,
}
