//! The simulated cluster: real driver nodes on in-memory storage, a network whose every message
//! the run's PRNG delays or loses, partitions, stalls and crashes with restarts.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::config::Config;
use crate::driver::{DriverOptions, Node, Parts};
use crate::mem::transport::{Delivery, MemNetwork};
use crate::mem::{MemElectionStore, MemLog, MemSnapshots};
use crate::sim::SimRng;
use crate::types::{DirectoryId, ReplicaId};

use super::disk::Disk;
use super::kv::{lock, Kv, Ledger};
use super::DriverSimOptions;

/// The network's state: what the link model consults for every message.
pub(super) struct Links {
    rng: SimRng,
    /// Directed links that lose everything.
    pub(super) cut: BTreeSet<(ReplicaId, ReplicaId)>,
    /// Chance that a message is slow (60 to 400 ms), raised during latency storms.
    pub(super) slow_chance: f64,
    /// Chance that a message is lost.
    pub(super) loss: f64,
    /// Replicas whose messages are held until then (a stalled process, as the network sees
    /// it).
    pub(super) stalled: Vec<(ReplicaId, tokio::time::Instant)>,
    /// Set when the run heals for good: faults still being undone must not come back.
    pub(super) healed: bool,
}

impl Links {
    fn deliver(&mut self, from: ReplicaId, to: ReplicaId) -> Delivery {
        if self.cut.contains(&(from, to)) || self.rng.chance(self.loss) {
            return Delivery::Lost;
        }
        let mut delay = if self.rng.chance(self.slow_chance) {
            Duration::from_micros(self.rng.range(60_000, 400_000))
        } else {
            Duration::from_micros(self.rng.range(100, 3_000))
        };
        let now = tokio::time::Instant::now();
        for (id, until) in &self.stalled {
            if (*id == from || *id == to) && *until > now {
                delay = delay.max(*until - now);
            }
        }
        Delivery::After(delay)
    }
}

/// One replica's durable parts, its ledger, and its current incarnation.
pub(super) struct Host {
    pub(super) id: ReplicaId,
    log: Arc<MemLog>,
    election: Arc<MemElectionStore>,
    snapshots: Arc<MemSnapshots>,
    pub(super) ledger: Arc<Mutex<Ledger>>,
    incarnation: u64,
    /// The id of its current storage directory; a disk loss makes a new one.
    directory: DirectoryId,
    /// Its disk was lost: it starts as a joiner, with the other hosts as contacts, until its
    /// log or a snapshot names the voters.
    reformatted: bool,
    /// The running node and its state machine; `None` while crashed.
    pub(super) live: Option<(Node, Arc<Kv>)>,
    /// The current incarnation's switch on its stores (see [`Disk`]).
    alive: Arc<AtomicBool>,
}

/// Every host, behind one lock that is never held across an await.
pub(super) struct World {
    pub(super) hosts: Mutex<Vec<Host>>,
    pub(super) net: MemNetwork,
    pub(super) links: Arc<Mutex<Links>>,
    voters: Vec<ReplicaId>,
    observers: Vec<ReplicaId>,
    opts: DriverSimOptions,
    /// Restarts that failed (a violation: a replica must always come back).
    pub(super) start_failures: Mutex<Vec<String>>,
    /// Snapshots installed by incarnations that ended.
    pub(super) snapshots_installed: AtomicU64,
    /// What happened to the hosts when, for the report of a failing seed.
    pub(super) timeline: Mutex<Vec<String>>,
    origin: tokio::time::Instant,
}

impl World {
    pub(super) fn new(opts: &DriverSimOptions) -> World {
        let voters: Vec<ReplicaId> = (1..=opts.voters).map(ReplicaId).collect();
        let observers: Vec<ReplicaId> = (0..opts.observers)
            .map(|i| ReplicaId(opts.voters + 1 + i))
            .collect();
        let links = Arc::new(Mutex::new(Links {
            rng: SimRng::new(opts.seed ^ 0x6c69_6e6b),
            cut: BTreeSet::new(),
            slow_chance: 0.01,
            loss: 0.01,
            stalled: Vec::new(),
            healed: false,
        }));
        let net = MemNetwork::new();
        let model = links.clone();
        net.set_link_model(Arc::new(move |from, to| lock(&model).deliver(from, to)));
        let hosts = voters
            .iter()
            .chain(&observers)
            .map(|id| Host {
                id: *id,
                log: Arc::new(MemLog::new()),
                election: Arc::new(MemElectionStore::new()),
                snapshots: Arc::new(MemSnapshots::new()),
                ledger: Arc::default(),
                incarnation: 0,
                directory: DirectoryId((u128::from(id.0) << 64) | 1),
                reformatted: false,
                live: None,
                alive: Arc::new(AtomicBool::new(false)),
            })
            .collect();
        World {
            hosts: Mutex::new(hosts),
            net,
            links,
            voters,
            observers,
            opts: opts.clone(),
            start_failures: Mutex::default(),
            snapshots_installed: AtomicU64::new(0),
            timeline: Mutex::default(),
            origin: tokio::time::Instant::now(),
        }
    }

    /// Notes an event on the timeline, at the current virtual time.
    pub(super) fn note(&self, what: impl std::fmt::Display) {
        let at = self.origin.elapsed().as_millis();
        lock(&self.timeline).push(format!("{at}ms {what}"));
    }

    pub(super) fn len(&self) -> usize {
        lock(&self.hosts).len()
    }

    pub(super) fn id(&self, i: usize) -> ReplicaId {
        lock(&self.hosts)[i].id
    }

    /// The running node of host `i` and its state machine, if it runs.
    pub(super) fn live(&self, i: usize) -> Option<(Node, Arc<Kv>)> {
        lock(&self.hosts)[i].live.clone()
    }

    /// The directory id host `id` runs with now.
    pub(super) fn directory_of(&self, id: ReplicaId) -> DirectoryId {
        let hosts = lock(&self.hosts);
        hosts
            .iter()
            .find(|h| h.id == id)
            .map_or(DirectoryId(0), |h| h.directory)
    }

    /// Whether `id` is one of the configured (static) voters.
    pub(super) fn is_bootstrap_voter(&self, id: ReplicaId) -> bool {
        self.voters.contains(&id)
    }

    /// The voter set every host starts from.
    pub(super) fn bootstrap_voters(&self) -> Option<crate::voters::VoterSet> {
        let first = *self.voters.first()?;
        let directory = self.directory_of(first);
        Some(
            self.config(first, directory, false)
                .validate()
                .ok()?
                .bootstrap_voters(),
        )
    }

    fn config(&self, id: ReplicaId, directory: DirectoryId, reformatted: bool) -> Config {
        let mut c = if reformatted {
            // A reformatted machine is never bootstrapped as a voter again (that would be a
            // static voter without its data); the others are its contacts.
            let mut c = Config::new(id, self.all_ids().filter(|o| *o != id));
            c.observers = std::iter::once(id).collect();
            c
        } else {
            let mut c = Config::new(id, self.voters.iter().copied());
            c.observers = self.observers.iter().copied().collect();
            c
        };
        if self.opts.membership {
            c.directory = Some(directory);
        }
        c.election_timeout = Duration::from_millis(150);
        c.fetch_timeout = Duration::from_millis(500);
        c.fetch_max_wait = Duration::from_millis(100);
        c.request_timeout = Duration::from_millis(300);
        c.read_timeout = Duration::from_millis(1_000);
        c.snapshot_after_records = 40;
        c.snapshot_log_retention = 10;
        c.snapshot_chunk_bytes = 256;
        c.lease_reads = self.opts.lease_reads;
        c.lease_drift_margin = Duration::from_millis(100);
        c.test_unsafe_reads = self.opts.unsafe_reads;
        c.test_planted = self.opts.planted;
        c
    }

    fn all_ids(&self) -> impl Iterator<Item = ReplicaId> + '_ {
        self.voters.iter().chain(&self.observers).copied()
    }

    /// Loses host `i`'s disk: it crashes, and its stores are replaced by empty ones under a
    /// new directory id. Its ledger stays: what it applied before still counts.
    pub(super) async fn wipe(&self, i: usize) {
        self.crash(i).await;
        let mut hosts = lock(&self.hosts);
        let h = &mut hosts[i];
        h.log = Arc::new(MemLog::new());
        h.election = Arc::new(MemElectionStore::new());
        h.snapshots = Arc::new(MemSnapshots::new());
        h.directory = DirectoryId(h.directory.0 + 1);
        h.reformatted = true;
        let (id, directory) = (h.id, h.directory);
        drop(hosts);
        self.note(format_args!(
            "{id} lost its disk; new directory {directory}"
        ));
    }

    /// Starts host `i` on its durable parts with a fresh state machine.
    pub(super) async fn start(&self, i: usize) {
        let (id, parts, kv, seed, directory, reformatted, first) = {
            let mut hosts = lock(&self.hosts);
            let h = &mut hosts[i];
            if h.live.is_some() {
                return;
            }
            h.incarnation += 1;
            h.alive = Arc::new(AtomicBool::new(true));
            let disk = Arc::new(Disk {
                log: h.log.clone(),
                election: h.election.clone(),
                alive: h.alive.clone(),
            });
            let kv = Arc::new(Kv::new(h.ledger.clone()));
            let parts = Parts {
                log: disk.clone(),
                election: disk,
                transport: Arc::new(self.net.endpoint(h.id)),
                state_machine: kv.clone(),
                snapshots: h.snapshots.clone(),
            };
            let seed = self.opts.seed ^ (u64::from(h.id.0) << 40) ^ (h.incarnation << 20);
            (
                h.id,
                parts,
                kv,
                seed,
                h.directory,
                h.reformatted,
                h.incarnation == 1,
            )
        };
        let cfg = match self.config(id, directory, reformatted).validate() {
            Ok(c) => c,
            Err(e) => {
                lock(&self.start_failures).push(format!("config of {id}: {e}"));
                return;
            }
        };
        let options = DriverOptions {
            seed,
            shutdown_timeout: Duration::from_millis(500),
            forward_timeout: Duration::from_millis(self.opts.forward_timeout_ms),
            test_forward_failure_refuses: self.opts.forward_failure_refuses,
            test_ignore_write_sessions: self.opts.ignore_write_sessions,
            ..DriverOptions::default()
        };
        if first && !reformatted && cfg.voters.contains(&id) {
            // The operator formats each founding voter once, before its first start.
            if let Err(e) = crate::driver::format(&*parts.snapshots, &cfg.bootstrap_voters()).await
            {
                lock(&self.start_failures).push(format!("format of {id}: {e}"));
                return;
            }
        }
        self.note(format_args!("{id} starts"));
        match Node::start(cfg, parts, options).await {
            Ok(node) => lock(&self.hosts)[i].live = Some((node, kv)),
            Err(e) => lock(&self.start_failures).push(format!("restart of {id}: {e}")),
        }
    }

    /// Crashes host `i`: its tasks stop at once, its state machine is gone, its stores keep
    /// what reached them and nothing after (with `lying_fsync`, they also lose the last few
    /// records they had acknowledged as durable).
    pub(super) async fn crash(&self, i: usize) {
        let (live, log) = {
            let mut hosts = lock(&self.hosts);
            hosts[i].alive.store(false, Ordering::SeqCst);
            (hosts[i].live.take(), hosts[i].log.clone())
        };
        if let Some((node, _)) = live {
            self.note(format_args!("{} crashes", lock(&self.hosts)[i].id));
            let installed = node.metrics().snapshots_installed.load(Ordering::Relaxed);
            self.snapshots_installed
                .fetch_add(installed, Ordering::Relaxed);
            node.abort().await;
            if self.opts.lying_fsync {
                forget_tail(&log, &self.links).await;
            }
        }
    }

    /// Ends every fault: links whole, no stalls, no slow or lost messages, every host running.
    pub(super) async fn heal(&self) {
        {
            let mut links = lock(&self.links);
            links.cut.clear();
            links.stalled.clear();
            links.slow_chance = 0.0;
            links.loss = 0.0;
            links.healed = true;
        }
        for i in 0..self.len() {
            self.start(i).await;
        }
    }

    /// Stops every node (the end of a run).
    pub(super) async fn stop_all(&self) {
        for i in 0..self.len() {
            self.crash(i).await;
        }
    }
}

/// Negative control for the storage contract: drops up to five records from the end of a log
/// that acknowledged them as durable, as a disk whose fsync lied would after a power loss.
async fn forget_tail(log: &MemLog, links: &Mutex<Links>) {
    use crate::io::LogStore;
    let Ok(state) = log.state().await else { return };
    let lost = lock(links).rng.range(1, 5);
    let end = state.end.offset.0.saturating_sub(lost).max(state.start.0);
    let _ = log.truncate(crate::types::Offset(end)).await;
}

/// The fault schedule: until `until`, a fault every 0.2 to 1.5 s, each undone after its own
/// duration, so faults overlap.
pub(super) async fn run_faults(world: Arc<World>, seed: u64, until: tokio::time::Instant) {
    let mut rng = SimRng::new(seed ^ 0x6661_756c);
    let n = world.len();
    while tokio::time::Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(rng.range(200, 1_500))).await;
        let i = rng.below(n as u64) as usize;
        let id = world.id(i);
        let lasts = Duration::from_millis(rng.range(200, 3_000));
        let roll = rng.below(100);
        let w = world.clone();
        if roll < 25 {
            // Isolate one replica, both ways.
            let pairs: Vec<_> = (0..n)
                .map(|j| world.id(j))
                .filter(|o| *o != id)
                .flat_map(|o| [(id, o), (o, id)])
                .collect();
            lock(&world.links).cut.extend(pairs.iter().copied());
            tokio::spawn(async move {
                tokio::time::sleep(lasts).await;
                let mut links = lock(&w.links);
                for p in &pairs {
                    links.cut.remove(p);
                }
            });
        } else if roll < 40 {
            // One direction of one link.
            let other = world.id((i + 1 + rng.below(n as u64 - 1) as usize) % n);
            lock(&world.links).cut.insert((id, other));
            tokio::spawn(async move {
                tokio::time::sleep(lasts).await;
                lock(&w.links).cut.remove(&(id, other));
            });
        } else if roll < 60 {
            // A crash, and a restart later.
            world.crash(i).await;
            tokio::spawn(async move {
                tokio::time::sleep(lasts.min(Duration::from_millis(2_000))).await;
                w.start(i).await;
            });
        } else if roll < 72 {
            // A latency storm: many messages take 60 to 400 ms.
            lock(&world.links).slow_chance = 0.3;
            tokio::spawn(async move {
                tokio::time::sleep(lasts).await;
                let mut links = lock(&w.links);
                if !links.healed {
                    links.slow_chance = 0.01;
                }
            });
        } else if roll < 84 {
            // A stall: nothing reaches or leaves the replica for a while, then all of it does.
            let until = tokio::time::Instant::now() + lasts.min(Duration::from_millis(1_500));
            lock(&world.links).stalled.push((id, until));
        } else if roll < 92 {
            // A lossy period.
            lock(&world.links).loss = 0.2;
            tokio::spawn(async move {
                tokio::time::sleep(lasts).await;
                let mut links = lock(&w.links);
                if !links.healed {
                    links.loss = 0.01;
                }
            });
        }
    }
}
