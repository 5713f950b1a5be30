//! Planted bugs (feature `testing`): each a one-line mistake in one safety or liveness rule,
//! switched on by [`crate::Config::test_planted`], so that the simulators can show they catch
//! it (`cargo xtask sim --planted NAME`). None is compiled into a build without the feature.

/// One deliberate mistake in a protocol rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Planted {
    /// The leader counts its own unsynced log end toward the high watermark (D4).
    HwCountsUnsyncedLeader,
    /// The leader exposes a high watermark before it committed in its epoch (KAFKA-12619).
    SkipEpochStartCheck,
    /// A follower fetches (acknowledging its log end) before that end is durable (D4).
    AckUnsynced,
    /// A follower installs a finished download although it caught up past it meanwhile
    /// (replacing committed records it holds with an older snapshot).
    InstallOldSnapshot,
    /// A voter change is accepted before the leader committed in its epoch (Raft's
    /// single-server change bug).
    ChangeBeforeCommit,
    /// A second voter change is accepted while one is uncommitted (KAFKA-20740).
    ConcurrentChanges,
    /// A replica whose removal is uncommitted never campaigns (KRaft's rule; membership.md E6).
    NoCampaignWhenRemoved,
    /// A replica fetching with a new directory inherits the progress of the old one.
    StaleProgressAcrossDirectories,
    /// A leader ignores a candidate already in a later epoch, which then stays leaderless
    /// for good when its voter set is stale (a removed voter that has not fetched its removal).
    IgnoreLaterCandidates,
    /// Granting a pre-vote is handled as a standard vote: the receiver moves to the proposed
    /// epoch and records its vote there (D2: a pre-vote never changes the receiver).
    PrevoteChangesState,
    /// A follower grants a (pre-)vote although it heard from a live leader within the fetch
    /// timeout (D3, the rule that stops a disrupting replica and makes leases sound).
    VoteWhileLeaderLive,
    /// A stale answer (an older epoch) to a request leaves its in-flight slot taken, so that an
    /// observer probing a lagging voter never probes again.
    StopReprobingAfterStaleAnswer,
    /// The lease lasts a full fetch timeout from its anchor, without the clock-drift margin
    /// (D6).
    LeaseWithoutDriftMargin,
    /// A replica restarted on empty storage trusts its configured bootstrap set: a standalone
    /// founder forks a cluster of its own, a static voter votes without its data (W2, W9).
    BootstrapOnEmptyDisk,
    /// A campaign counts grants from replicas that left the voter set during it (W10).
    CountGrantsOutsideSet,
}

impl Planted {
    /// Every planted bug.
    pub const ALL: [Planted; 15] = [
        Planted::HwCountsUnsyncedLeader,
        Planted::SkipEpochStartCheck,
        Planted::AckUnsynced,
        Planted::InstallOldSnapshot,
        Planted::ChangeBeforeCommit,
        Planted::ConcurrentChanges,
        Planted::NoCampaignWhenRemoved,
        Planted::StaleProgressAcrossDirectories,
        Planted::IgnoreLaterCandidates,
        Planted::PrevoteChangesState,
        Planted::VoteWhileLeaderLive,
        Planted::StopReprobingAfterStaleAnswer,
        Planted::LeaseWithoutDriftMargin,
        Planted::BootstrapOnEmptyDisk,
        Planted::CountGrantsOutsideSet,
    ];

    /// The name `--planted` takes.
    pub fn name(self) -> &'static str {
        match self {
            Planted::HwCountsUnsyncedLeader => "hw-counts-unsynced-leader",
            Planted::SkipEpochStartCheck => "skip-epoch-start-check",
            Planted::AckUnsynced => "ack-unsynced",
            Planted::InstallOldSnapshot => "install-old-snapshot",
            Planted::ChangeBeforeCommit => "change-before-commit",
            Planted::ConcurrentChanges => "concurrent-changes",
            Planted::NoCampaignWhenRemoved => "no-campaign-when-removed",
            Planted::StaleProgressAcrossDirectories => "stale-progress-across-directories",
            Planted::IgnoreLaterCandidates => "ignore-later-candidates",
            Planted::PrevoteChangesState => "prevote-changes-state",
            Planted::VoteWhileLeaderLive => "vote-while-leader-live",
            Planted::StopReprobingAfterStaleAnswer => "stop-reprobing-after-stale-answer",
            Planted::LeaseWithoutDriftMargin => "lease-without-drift-margin",
            Planted::BootstrapOnEmptyDisk => "bootstrap-on-empty-disk",
            Planted::CountGrantsOutsideSet => "count-grants-outside-set",
        }
    }

    /// The bug with this name.
    pub fn from_name(name: &str) -> Option<Planted> {
        Planted::ALL.into_iter().find(|p| p.name() == name)
    }

    /// Whether only a sweep with voter changes can show it (`--membership`).
    pub fn needs_membership(self) -> bool {
        matches!(
            self,
            Planted::ChangeBeforeCommit
                | Planted::ConcurrentChanges
                | Planted::NoCampaignWhenRemoved
                | Planted::StaleProgressAcrossDirectories
                | Planted::IgnoreLaterCandidates
                | Planted::BootstrapOnEmptyDisk
                | Planted::CountGrantsOutsideSet
        )
    }
}
