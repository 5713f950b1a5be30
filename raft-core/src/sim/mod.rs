//! The deterministic simulator: many replicas of the real protocol in one thread on virtual
//! time, over a simulated network and simulated storage, with invariant checkers that sit
//! outside the replicas.
//!
//! One `u64` seed decides a whole run: the cluster's fault settings ("swarm" testing, after
//! TigerBeetle's VOPR), every network delay, drop and duplicate, every crash and partition, and
//! every election timeout. A run has a safety phase (faults on, invariants checked after every
//! event) and a liveness phase (faults off, then a leader and commit progress are required
//! within a stated bound, and every replica must learn of that commit). A failing seed replays exactly with
//! `cargo xtask sim --seed S --voters V --observers K`.
//!
//! [`cluster::Cluster`] is also the harness of the scenario tests, which drive it by hand.

pub mod checks;
pub mod cluster;
pub mod explore;
pub mod faults;
pub mod linearizability;
mod rng;

use std::time::Duration;

pub use self::cluster::{Cluster, ClusterOptions, ReadOutcome};
pub use self::faults::Faults;
pub use self::rng::SimRng;

/// What one simulated run is asked to do.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// The seed.
    pub seed: u64,
    /// Number of voters (3 or 5 in sweeps).
    pub voters: u32,
    /// Number of observers.
    pub observers: u32,
    /// Virtual duration of the safety phase (faults on).
    pub safety_phase: Duration,
    /// Test-only: the protocol's pre-vote switch (on by default).
    pub pre_vote: bool,
    /// Keep the run's trace (role changes, crashes) in the report.
    pub keep_trace: bool,
    /// Negative control: followers serve linearizable reads without asking the leader.
    pub unsafe_reads: bool,
    /// Negative control: the leader counts any arriving fetch as an echo of its newest barrier.
    pub count_arrivals: bool,
    /// Override the seed's choice of lease reads.
    pub lease_reads: Option<bool>,
    /// Override the lease drift margin (a negative control sets it below the drift).
    pub lease_drift_margin: Option<Duration>,
    /// Override the seed's clock drift, in parts per million.
    pub drift_ppm: Option<u32>,
    /// Draw voter changes and disk losses (KIP-853) among the faults.
    pub membership: bool,
    /// One planted mistake in a protocol rule, to show the sweep catches it.
    pub planted: Option<crate::planted::Planted>,
}

impl RunOptions {
    /// Defaults for a sweep seed.
    pub fn new(seed: u64, voters: u32, observers: u32) -> RunOptions {
        RunOptions {
            seed,
            voters,
            observers,
            safety_phase: Duration::from_secs(6),
            pre_vote: true,
            keep_trace: false,
            unsafe_reads: false,
            count_arrivals: false,
            lease_reads: None,
            lease_drift_margin: None,
            drift_ppm: None,
            membership: false,
            planted: None,
        }
    }

    /// The command that replays this run, with every override it ran with.
    pub fn replay_command(&self) -> String {
        let mut cmd = format!(
            "cargo xtask sim --seed {} --voters {} --observers {}",
            self.seed, self.voters, self.observers
        );
        if self.membership {
            cmd.push_str(" --membership");
        }
        if let Some(p) = self.planted {
            cmd.push_str(&format!(" --planted {}", p.name()));
        }
        if self.unsafe_reads {
            cmd.push_str(" --unsafe-reads");
        }
        if self.count_arrivals {
            cmd.push_str(" --count-arrivals");
        }
        if let Some(lease) = self.lease_reads {
            cmd.push_str(&format!(" --lease {}", u8::from(lease)));
        }
        if let Some(margin) = self.lease_drift_margin {
            cmd.push_str(&format!(" --lease-margin-ms {}", margin.as_millis()));
        }
        if let Some(ppm) = self.drift_ppm {
            cmd.push_str(&format!(" --drift-ppm {ppm}"));
        }
        cmd
    }
}

/// The outcome of one run.
#[derive(Clone, Debug)]
pub struct RunReport {
    /// The options it ran with.
    pub options: RunOptions,
    /// The fault settings the seed drew.
    pub faults: Faults,
    /// Every invariant violation found (empty for a passing run).
    pub violations: Vec<String>,
    /// Records committed by the end.
    pub committed: u64,
    /// Proposals the clients saw acknowledged.
    pub acknowledged: u64,
    /// Client operations checked for linearizability.
    pub operations: u64,
    /// Histories too large for the checker's step bound (a sweep fails on any).
    pub inconclusive: u64,
    /// Client reads that failed (their deadline passed, or the replica shut down), which a
    /// client retries; counted so that a run where reads mostly fail shows.
    pub reads_failed: u64,
    /// Snapshots replicas downloaded and installed.
    pub snapshots_installed: u64,
    /// The highest epoch reached.
    pub max_epoch: u32,
    /// Events processed.
    pub events: u64,
    /// The run's trace, when asked for.
    pub trace: String,
}

/// Runs one seed: safety phase, then liveness phase. Never panics on a protocol bug: every
/// problem is a violation in the report (a core assertion is caught and reported too).
pub fn run(options: RunOptions) -> RunReport {
    let opts = options.clone();
    let result = std::panic::catch_unwind(move || run_inner(opts));
    match result {
        Ok(report) => report,
        Err(panic) => {
            let msg = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown panic".into());
            RunReport {
                faults: Faults::draw(options.seed),
                options,
                violations: vec![format!("panic: {msg}")],
                committed: 0,
                acknowledged: 0,
                operations: 0,
                inconclusive: 0,
                reads_failed: 0,
                snapshots_installed: 0,
                max_epoch: 0,
                events: 0,
                trace: String::new(),
            }
        }
    }
}

/// The smallest lease margin that is safe for clocks whose rates differ from true time by at
/// most `drift_ppm` either way, plus a millisecond: the lease (`fetch_timeout - margin` on the
/// slowest clock) must end before a voter on the fastest clock stops refusing votes
/// (`fetch_timeout` on its clock), i.e. `margin >= 2 * d * fetch_timeout / (1 + d)`. A sweep runs
/// at this bound, where a margin rule that is slightly wrong shows, and a planted lease without
/// a margin is wrong by the whole gap.
pub fn tight_drift_margin(fetch_timeout: Duration, drift_ppm: u32) -> Duration {
    let d = f64::from(drift_ppm) * 1e-6;
    let needed = 2.0 * d * fetch_timeout.as_secs_f64() / (1.0 + d);
    Duration::from_secs_f64(needed) + Duration::from_millis(1)
}

fn run_inner(options: RunOptions) -> RunReport {
    let mut faults = Faults::draw(options.seed);
    if let Some(ppm) = options.drift_ppm {
        faults.drift_ppm = ppm;
    }
    let defaults = ClusterOptions::default();
    // Half the seeds also exercise lease reads, within the drift the seed drew.
    let lease = options
        .lease_reads
        .unwrap_or(options.seed.is_multiple_of(2));
    let mut cluster = Cluster::new(ClusterOptions {
        seed: options.seed,
        voters: options.voters,
        observers: options.observers,
        faults: faults.clone(),
        pre_vote: options.pre_vote,
        lease_reads: lease,
        lease_drift_margin: options
            .lease_drift_margin
            .unwrap_or_else(|| tight_drift_margin(defaults.fetch_timeout, faults.drift_ppm)),
        unsafe_reads: options.unsafe_reads,
        count_arrivals: options.count_arrivals,
        membership: options.membership,
        planted: options.planted,
        // With voter changes, three seeds in four format the founders with their directory
        // ids (so a founding voter's lost disk is drawn too); the fourth keeps static founders,
        // as storage from before formatting has them.
        keyed_founders: options.membership && !options.seed.is_multiple_of(4),
        ..defaults
    });
    cluster.set_workload(true);
    let safety_end = cluster.now() + options.safety_phase;
    cluster.run_with_faults_until(safety_end);
    // Liveness: the network heals, crashed replicas come back, and nothing fails any more.
    cluster.heal_all();
    let marker = cluster.now();
    cluster.check_liveness(marker);
    cluster.check_final();
    cluster.check_linearizability();
    cluster.report(options, faults)
}
