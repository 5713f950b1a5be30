//! The driver simulator: the real [`crate::driver::Node`] (its replica task, log writer,
//! applier, forwarding and snapshot transfer) on in-memory storage and a simulated network, on
//! virtual time, reproducible from one seed. It runs beside the pure-core simulator
//! ([`crate::sim`]), which plays its own driver: this one tests what library users run.
//!
//! Determinism: one current-thread tokio runtime with paused time (it jumps to the next timer
//! whenever every task waits), a network whose delays and losses come from a seeded PRNG
//! ([`crate::mem::transport::LinkModel`]), and a driver whose own choices are deterministic
//! (its task polls its sources in rotation rather than `tokio::select!`'s random order, and
//! keeps its maps on a fixed hasher). `cargo xtask sim --driver --seed S` replays a run.
//!
//! A run: clients on every replica (pipelined batches of counter increments, register writes
//! and compare-and-sets; reads in every mode) while faults come and go (partitions, one-way
//! cuts, crashes with restarts on the same stores, latency storms of 60 to 400 ms, stalls,
//! lossy periods). Then everything heals, and within a bound every replica must commit a write,
//! serve a linearizable read and know the leader. Finally the history is checked against what
//! the replicas really applied (the `verify` module).
//!
//! A crash drops every write still queued in the driver's log and election writers (`disk`);
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
mod kv;
mod membership;
mod verify;
mod world;

use std::sync::Arc;
use std::time::Duration;

use crate::driver::ReadMode;
use crate::types::ReplicaId;

use self::clients::{run_session, Clients, History};
use self::kv::{lock, KvOp, Tagged};
use self::membership::{run_membership, Membership};
use self::world::{run_faults, World};

/// What one driver-simulator run is asked to do.
#[derive(Clone, Debug)]
pub struct DriverSimOptions {
    /// The seed.
    pub seed: u64,
    /// Voters.
    pub voters: u32,
    /// Observers.
    pub observers: u32,
    /// Client sessions.
    pub sessions: u32,
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
            duration: Duration::from_secs(10),
            lease_reads: false,
            forward_timeout_ms: 1_000,
            unsafe_reads: false,
            forward_failure_refuses: false,
            lying_fsync: false,
            ignore_write_sessions: false,
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
             unknown) disks lost {} edited restarts {} refused starts {} virtual {:.1}s",
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

/// How long the healed cluster has to show it is live.
const LIVENESS_BOUND: Duration = Duration::from_secs(15);

async fn run_async(opts: DriverSimOptions) -> DriverSimReport {
    let origin = tokio::time::Instant::now();
    let world = Arc::new(World::new(&opts));
    for i in 0..world.len() {
        world.start(i).await;
    }
    let until = origin + opts.duration;
    let faults = tokio::spawn(run_faults(world.clone(), opts.seed, until));
    let membership = Arc::new(Membership::new(
        world.bootstrap_voters().unwrap_or_default(),
    ));
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
    let sessions: Vec<_> = (0..opts.sessions)
        .map(|s| tokio::spawn(run_session(clients.clone(), s, opts.seed, until)))
        .collect();
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
    for s in sessions {
        let _ = s.await;
    }
    world.heal().await;
    let mut violations: Vec<String> = lock(&world.start_failures).clone();
    violations.extend(liveness(&world).await);
    if opts.membership {
        violations.extend(membership.check_final(&world).await);
    }
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

    let history: History = std::mem::take(&mut *lock(&clients.history));
    let findings = {
        let hosts = lock(&world.hosts);
        let guards: Vec<_> = hosts.iter().map(|h| lock(&h.ledger)).collect();
        let ledgers: Vec<&kv::Ledger> = guards.iter().map(|g| &**g).collect();
        verify::check(&history, &ledgers)
    };
    violations.extend(findings.violations);
    DriverSimReport {
        violations,
        committed: findings.committed,
        not_applied: findings.not_applied,
        unknown: findings.unknown,
        unknown_applied: findings.unknown_applied,
        reads: history.reads.len() as u64,
        reads_failed: history.reads_failed,
        inconclusive: findings.inconclusive,
        snapshots_installed: world
            .snapshots_installed
            .load(std::sync::atomic::Ordering::Relaxed),
        voter_changes: [counts.committed, counts.refused, counts.unknown],
        wipes: counts.wipes,
        config_edits: counts.edits,
        refused_starts: world
            .refused_starts
            .load(std::sync::atomic::Ordering::Relaxed),
        timeline,
        virtual_time,
    }
}

/// Who led each epoch, as the watch saw it, and the contradictions found.
#[derive(Default)]
struct LeaderWatch {
    stop: std::sync::atomic::AtomicBool,
    led: std::sync::Mutex<
        std::collections::BTreeMap<crate::types::Epoch, (ReplicaId, Option<crate::DirectoryId>)>,
    >,
    violations: std::sync::Mutex<Vec<String>>,
}

/// How often the watch looks at every running replica's role-change counter.
const WATCH_EVERY: Duration = Duration::from_millis(5);

/// Election safety across every configuration and restart: every [`WATCH_EVERY`] until the
/// run stops, each running replica whose role changed since the last look is asked for its
/// status, and one that says it leads is recorded as the leader of its epoch, by id and
/// directory (a replica that lost its disk is another replica). Two leaders of one epoch are
/// a violation. Sampled, so a leadership shorter than the period may go unseen; it never
/// reports one that did not happen.
async fn watch_leaders(world: Arc<World>, watch: Arc<LeaderWatch>) {
    use std::sync::atomic::Ordering;
    // Per host: the incarnation's state machine (a new one per start) and its role changes.
    let mut seen: Vec<Option<(Arc<kv::Kv>, u64)>> = vec![None; world.len()];
    while !watch.stop.load(Ordering::Relaxed) {
        for (i, last) in seen.iter_mut().enumerate() {
            let Some((node, kv)) = world.live(i) else {
                continue;
            };
            let changes = node.metrics().role_changes.load(Ordering::Relaxed);
            let same = last
                .as_ref()
                .is_some_and(|(k, c)| Arc::ptr_eq(k, &kv) && *c == changes);
            if same {
                continue;
            }
            *last = Some((kv, changes));
            let Some(s) = node.status().await else {
                continue;
            };
            if s.role != crate::types::Role::Leader {
                continue;
            }
            let me = (s.id, s.directory);
            let mut led = lock(&watch.led);
            match led.get(&s.epoch) {
                Some(first) if *first != me => {
                    let msg = format!(
                        "election safety: epoch {} led by {} (directory {:?}) and by {} \
                         (directory {:?})",
                        s.epoch, first.0, first.1, me.0, me.1
                    );
                    let mut v = lock(&watch.violations);
                    if !v.contains(&msg) {
                        v.push(msg);
                    }
                }
                Some(_) => {}
                None => {
                    led.insert(s.epoch, me);
                }
            }
        }
        tokio::time::sleep(WATCH_EVERY).await;
    }
}

/// After healing, within [`LIVENESS_BOUND`]: every replica commits a write (retrying while it
/// is refused) and serves a linearizable read, and all of them know the same leader. The
/// writes also make sure every replica has applied what was committed before.
async fn liveness(world: &World) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + LIVENESS_BOUND;
    let mut problems = Vec::new();
    for i in 0..world.len() {
        let id = world.id(i);
        let Some((node, _)) = world.live(i) else {
            problems.push(format!("liveness: {id} is not running after healing"));
            continue;
        };
        // A write may end unknown (a leader change right after healing); a new write then
        // tries again. Ids from the top of the range, apart from the clients'.
        let mut attempt = 0u64;
        let committed = loop {
            attempt += 1;
            let tagged = Tagged {
                id: u64::MAX - ((i as u64) << 32) - attempt,
                op: KvOp::Incr { key: 0 },
            };
            // The deadline is checked here, not only by `timeout_at`: that polls the write
            // first, so a write refused at once (a stopped node) never times out, and the
            // retries would go on forever.
            let in_time = || tokio::time::Instant::now() < deadline;
            let result = if in_time() {
                let write = node.write(tagged.encode());
                tokio::time::timeout_at(deadline, write).await.ok()
            } else {
                None
            };
            match result {
                Some(Ok(c)) => break Some(c),
                Some(Err(_)) if in_time() => tokio::time::sleep(Duration::from_millis(20)).await,
                _ => {
                    problems.push(format!("liveness: no write committed on {id} in time"));
                    break None;
                }
            }
        };
        let Some(_) = committed else { continue };
        match tokio::time::timeout_at(deadline, node.read(ReadMode::Linearizable)).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => problems.push(format!("liveness: linearizable read on {id}: {e}")),
            Err(_) => problems.push(format!("liveness: linearizable read on {id} hung")),
        }
    }
    // A change committed just before healing can still move leadership (a removed leader
    // resigns), so agreement on the leader is awaited, within the same bound.
    loop {
        let (leaders, unaware) = leaders_known(world).await;
        if unaware.is_empty() && leaders.len() <= 1 {
            break;
        }
        if tokio::time::Instant::now() >= deadline {
            problems.extend(unaware.iter().map(|id| {
                format!("liveness: {id} knows no leader {LIVENESS_BOUND:?} after healing")
            }));
            if leaders.len() > 1 {
                problems.push(format!(
                    "liveness: replicas name different leaders {leaders:?}"
                ));
            }
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if !problems.is_empty() {
        for i in 0..world.len() {
            let status = match world.live(i) {
                Some((node, _)) => node.status().await.map(|s| {
                    format!(
                        "{:?} epoch {} leader {:?} hwm {} log end {:?} durable {} applied {} contact {:?} voters {} directory {:?}",
                        s.role, s.epoch, s.leader, s.high_watermark, s.log_end, s.durable_end, s.applied, s.since_leader_contact,
                        membership::describe(&s.voter_set), s.directory
                    )
                }),
                None => None,
            };
            problems.push(format!("  state of {}: {status:?}", world.id(i)));
        }
    }
    problems
}

/// The leaders the running replicas name, and the replicas that name none.
async fn leaders_known(
    world: &World,
) -> (
    std::collections::BTreeSet<crate::types::ReplicaId>,
    Vec<crate::types::ReplicaId>,
) {
    let mut leaders = std::collections::BTreeSet::new();
    let mut unaware = Vec::new();
    for i in 0..world.len() {
        if let Some((node, _)) = world.live(i) {
            match node.status().await.and_then(|s| s.leader) {
                Some(l) => {
                    leaders.insert(l);
                }
                None => unaware.push(world.id(i)),
            }
        }
    }
    (leaders, unaware)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: the liveness check ends within its bound when a replica has stopped on its own
    /// (a failure the world did not order), and reports it. Regression: writes to a stopped
    /// replica are refused at once, and `timeout_at` polls its future before its deadline, so
    /// the check retried forever in virtual time.
    #[test]
    fn liveness_reports_a_replica_that_stopped_on_its_own_instead_of_waiting_forever() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("a current-thread runtime");
        runtime.block_on(async {
            let world = World::new(&DriverSimOptions::new(1));
            for i in 0..world.len() {
                world.start(i).await;
            }
            let (node, _) = world.live(0).expect("replica 0 runs");
            node.abort().await;
            let problems = tokio::time::timeout(LIVENESS_BOUND * 2, liveness(&world))
                .await
                .expect("the liveness check ends within its bound");
            let stopped = format!("liveness: no write committed on {} in time", world.id(0));
            assert!(problems.contains(&stopped), "{problems:?}");
            world.stop_all().await;
        });
    }
}
