//! The driver simulator: the real [`crate::driver::Node`] (its replica task, log writer,
//! applier, forwarding and snapshot transfer) on in-memory storage and a simulated network, on
//! virtual time, reproducible from one seed. It runs beside the pure-core simulator
//! ([`crate::sim`]), which plays its own driver: this one tests what library users run.
//!
//! Each simulated host is a [`crate::driver::Host`] running every group of the run (one by
//! default; `groups`) over one network endpoint and one disk of all groups' stores, so a
//! crash, a stall, a partition or a lost disk hits all of a host's groups at once. Each group
//! is founded on `voters` of the hosts in rotation and has its own clients, state machines,
//! ledgers and checks; a violation names its group. With more than one group, groups are also
//! created and dropped during the run (`lifecycle`), and every write and register value
//! carries its group, so a record, snapshot or read of one group reaching another is caught.
//!
//! Determinism: one current-thread tokio runtime with paused time (it jumps to the next timer
//! whenever every task waits), a network whose delays and losses come from a seeded PRNG
//! ([`crate::mem::transport::LinkModel`]), and a driver whose own choices are deterministic
//! (its task polls its sources in rotation rather than `tokio::select!`'s random order, and
//! keeps its maps on a fixed hasher). `cargo xtask sim --driver --seed S` replays a run.
//!
//! A run: clients on every replica of every group (pipelined batches of counter increments, register writes
//! and compare-and-sets; reads in every mode) while faults come and go (partitions, one-way
//! cuts, crashes with restarts on the same stores, latency storms of 60 to 400 ms, stalls,
//! lossy periods). Then everything heals, and within a bound every replica of every live group
//! must commit a write, serve a linearizable read and know the leader; a dropped group must be
//! gone from every host. Finally each group's history is checked against what its replicas
//! really applied (the `verify` module).
//!
//! A crash drops every write still queued in the drivers' log and election writers (`disk`,
//! `groups`);
//! storage keeps what it acknowledged, as the storage contract requires; `lying_fsync` breaks
//! that on purpose (a crash loses the last acknowledged records) to show the checks depend on
//! it. Not simulated: clock drift (one virtual clock; the pure-core simulator varies drift).
//!
//! The operator (with `--membership`): founders' storage is formatted once with the founding
//! set (keyed on three seeds in four); a lost disk comes back empty, with the host's file as
//! it was (its original configuration, or the voters it learned, as `--join` writes them),
//! never formatted again; a running host is sometimes restarted with an edited voter list
//! (the stored set must win). A standalone founder's refusal to start on empty storage is
//! counted, not a violation, and answered as its message says.

mod clients;
mod disk;
mod faults;
mod groups;
mod hosts;
mod kv;
mod lifecycle;
mod liveness;
mod membership;
mod verify;
mod world;

use std::sync::Arc;
use std::time::Duration;

use self::clients::{Clients, History};
use self::faults::run_faults;
use self::kv::lock;
use self::lifecycle::{check_dropped, run_groups, GroupSchedule, Sessions};
use self::liveness::{liveness, watch_leaders, LeaderWatch};
use self::membership::{run_membership, Membership};
use self::world::{Phase, World};

/// What one driver-simulator run is asked to do.
#[derive(Clone, Debug)]
pub struct DriverSimOptions {
    /// The seed.
    pub seed: u64,
    /// Voters of each group (its founders).
    pub voters: u32,
    /// Hosts beyond the voters: there are `voters + observers` hosts, and every group runs on
    /// all of them, founded on `voters` of them in rotation (so groups vote on different
    /// subsets when there are observers).
    pub observers: u32,
    /// Client sessions of each group.
    pub sessions: u32,
    /// Groups every host runs at the start; with more than one, groups are also created and
    /// dropped during the run (see the `lifecycle` module).
    pub groups: u32,
    /// Virtual time with faults and clients.
    pub duration: Duration,
    /// Serve lease reads too.
    pub lease_reads: bool,
    /// How long a forwarded write waits for the leader (`DriverOptions::forward_timeout`).
    pub forward_timeout_ms: u64,
    /// Negative control: followers serve reads without a confirmed read offset
    /// (`Config::test_unsafe_reads`).
    pub unsafe_reads: bool,
    /// Negative control: a failed forward is reported as refused
    /// (`DriverOptions::test_forward_failure_refuses`).
    pub forward_failure_refuses: bool,
    /// Negative control: write sessions are ignored
    /// (`DriverOptions::test_ignore_write_sessions`).
    pub ignore_write_sessions: bool,
    /// Negative control for the storage contract: a crash loses up to five records the log
    /// had acknowledged as durable (an fsync that lied).
    pub lying_fsync: bool,
    /// Negative control for group isolation: clients send every request of their group to
    /// the replica of another live group on the same host.
    pub misroute_groups: bool,
    /// Voter changes through `Node::change_voters` and disk losses (every replica then has a
    /// directory id); see the `membership` module.
    pub membership: bool,
    /// One planted bug (`Config::test_planted`), for `--planted NAME --expect-catch`.
    pub planted: Option<crate::planted::Planted>,
}

impl DriverSimOptions {
    /// Three voters, four sessions, 10 s of faults, the driver's own settings otherwise.
    pub fn new(seed: u64) -> DriverSimOptions {
        DriverSimOptions {
            seed,
            voters: 3,
            observers: 0,
            sessions: 4,
            groups: 1,
            duration: Duration::from_secs(10),
            lease_reads: false,
            forward_timeout_ms: 1_000,
            unsafe_reads: false,
            forward_failure_refuses: false,
            lying_fsync: false,
            ignore_write_sessions: false,
            misroute_groups: false,
            membership: false,
            planted: None,
        }
    }
}

/// What a run found.
#[derive(Debug, Default)]
pub struct DriverSimReport {
    /// Every violated property, described; empty when the run passed.
    pub violations: Vec<String>,
    /// Writes the clients were told committed.
    pub committed: u64,
    /// Writes told "not applied" (refused or lost).
    pub not_applied: u64,
    /// Writes of unknown outcome, and how many of them did take effect.
    pub unknown: u64,
    /// Unknown writes that were applied.
    pub unknown_applied: u64,
    /// Reads that got a permit, and reads that failed (timed out, no leader).
    pub reads: u64,
    /// Reads that did not get a permit.
    pub reads_failed: u64,
    /// Register histories the linearizability checker could not decide within its bound.
    pub inconclusive: u64,
    /// Snapshots replicas installed from the leader.
    pub snapshots_installed: u64,
    /// Voter changes reported committed, refused and unknown, and disks lost (membership runs).
    pub voter_changes: [u64; 3],
    /// Disks lost.
    pub wipes: u64,
    /// Restarts with an edited voter list in the configuration.
    pub config_edits: u64,
    /// Starts refused for empty storage under a standalone configuration (an expected
    /// outcome: the operator then starts the host with the voters it learns).
    pub refused_starts: u64,
    /// Crashes, restarts, disk losses and voter changes with their virtual times.
    pub timeline: Vec<String>,
    /// Groups created during the run (beyond the starting ones).
    pub groups_created: u64,
    /// Groups dropped during the run.
    pub groups_dropped: u64,
    /// Virtual time the run covered.
    pub virtual_time: Duration,
}

impl std::fmt::Display for DriverSimReport {
    /// One line of counts (without the violations).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "committed {} not applied {} unknown {} (applied {}) reads {} failed reads {} \
             inconclusive {} snapshots installed {} voter changes {}/{}/{} (committed/refused/\
             unknown) disks lost {} edited restarts {} refused starts {} groups created {} \
             dropped {} virtual {:.1}s",
            self.committed,
            self.not_applied,
            self.unknown,
            self.unknown_applied,
            self.reads,
            self.reads_failed,
            self.inconclusive,
            self.snapshots_installed,
            self.voter_changes[0],
            self.voter_changes[1],
            self.voter_changes[2],
            self.wipes,
            self.config_edits,
            self.refused_starts,
            self.groups_created,
            self.groups_dropped,
            self.virtual_time.as_secs_f64()
        )
    }
}

/// Runs one seed to the end and checks it.
pub fn run(opts: &DriverSimOptions) -> DriverSimReport {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime");
    runtime.block_on(run_async(opts.clone()))
}

async fn run_async(opts: DriverSimOptions) -> DriverSimReport {
    let origin = tokio::time::Instant::now();
    let world = Arc::new(World::new(&opts));
    let membership = Arc::new(Membership::default());
    for group in world.groups_in(&[Phase::Creating]) {
        membership.add_group(group, world.founding(group));
        world.found_group(group).await;
    }
    for i in 0..world.len() {
        world.start(i).await;
    }
    let until = origin + opts.duration;
    let faults = tokio::spawn(run_faults(world.clone(), opts.seed, until));
    let changes = opts.membership.then(|| {
        tokio::spawn(run_membership(
            world.clone(),
            membership.clone(),
            opts.seed,
            until,
        ))
    });
    let clients = Arc::new(Clients {
        world: world.clone(),
        history: Default::default(),
        next_id: Default::default(),
        origin,
        lease_reads: opts.lease_reads,
        write_deadline: Duration::from_secs(3),
    });
    let sessions = Arc::new(Sessions::default());
    for group in world.live_groups() {
        sessions.spawn(&clients, group, opts.sessions, opts.seed, until);
    }
    let schedule = GroupSchedule {
        world: world.clone(),
        clients: clients.clone(),
        membership: membership.clone(),
        sessions: sessions.clone(),
    };
    let lifecycle = (opts.groups > 1).then(|| tokio::spawn(run_groups(schedule, until)));
    let leaders = Arc::new(LeaderWatch::default());
    // With the operator's restarts (membership runs) election safety is watched as it
    // happens; plain runs keep their interleavings as they were.
    let watch = opts
        .membership
        .then(|| tokio::spawn(watch_leaders(world.clone(), leaders.clone())));
    let _ = faults.await;
    if let Some(changes) = changes {
        let _ = changes.await;
    }
    if let Some(lifecycle) = lifecycle {
        let _ = lifecycle.await;
    }
    sessions.join(None).await;
    world.heal().await;
    let mut violations: Vec<String> = lock(&world.start_failures).clone();
    violations.extend(liveness(&world).await);
    if opts.membership {
        violations.extend(membership.check_final(&world).await);
    }
    violations.extend(check_dropped(&world).await);
    leaders
        .stop
        .store(true, std::sync::atomic::Ordering::Relaxed);
    if let Some(watch) = watch {
        let _ = watch.await;
    }
    violations.extend(std::mem::take(&mut *lock(&leaders.violations)));
    let counts = membership.counts();
    let timeline = std::mem::take(&mut *lock(&world.timeline));
    let virtual_time = origin.elapsed();
    world.stop_all().await;

    // Every group's history against its own ledgers, groups dropped during the run included.
    let mut histories = std::mem::take(&mut *lock(&clients.history));
    let mut totals = verify::Findings::default();
    let (mut reads, mut reads_failed) = (0, 0);
    let all = [
        Phase::Creating,
        Phase::Live,
        Phase::Stopping,
        Phase::Dropped,
    ];
    for group in world.groups_in(&all) {
        let history: History = histories.remove(&group).unwrap_or_default();
        let ledgers: Vec<Arc<std::sync::Mutex<kv::Ledger>>> = {
            let hosts = lock(&world.hosts);
            let ledgers = hosts.iter().filter_map(|h| h.ledgers.get(&group).cloned());
            ledgers.collect()
        };
        let guards: Vec<_> = ledgers.iter().map(|l| lock(l)).collect();
        let views: Vec<&kv::Ledger> = guards.iter().map(|g| &**g).collect();
        let f = verify::check(group, &history, &views);
        violations.extend(f.violations.iter().map(|v| format!("{group}: {v}")));
        totals.committed += f.committed;
        totals.not_applied += f.not_applied;
        totals.unknown += f.unknown;
        totals.unknown_applied += f.unknown_applied;
        totals.inconclusive += f.inconclusive;
        reads += history.reads.len() as u64;
        reads_failed += history.reads_failed;
    }
    DriverSimReport {
        violations,
        committed: totals.committed,
        not_applied: totals.not_applied,
        unknown: totals.unknown,
        unknown_applied: totals.unknown_applied,
        reads,
        reads_failed,
        inconclusive: totals.inconclusive,
        snapshots_installed: world
            .snapshots_installed
            .load(std::sync::atomic::Ordering::Relaxed),
        voter_changes: [counts.committed, counts.refused, counts.unknown],
        wipes: counts.wipes,
        config_edits: counts.edits,
        refused_starts: world
            .refused_starts
            .load(std::sync::atomic::Ordering::Relaxed),
        groups_created: sessions.created.load(std::sync::atomic::Ordering::Relaxed),
        groups_dropped: sessions.dropped.load(std::sync::atomic::Ordering::Relaxed),
        timeline,
        virtual_time,
    }
}
