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
    /// The voters its configuration file lists, when the operator changed them (an edited
    /// list, or voters learned from the cluster as `--join` writes them); `None`: the file it
    /// was first started with. A lost disk does not change the file.
    voters_file: Option<Vec<ReplicaId>>,
    /// Its disk was lost and it has not run since: `Some(join)`, where `join` says the
    /// replacement is started with the voters it learns from the cluster.
    replacement: Option<bool>,
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
    /// The founding voter set every founder's storage is formatted with: keyed (each founder
    /// with its first directory id) or static (ids only, as storage from before formatting).
    founding: crate::voters::VoterSet,
    opts: DriverSimOptions,
    /// Starts refused because the storage was empty and the configuration named no other
    /// replica (a standalone founder that lost its disk: expected, not a violation), each
    /// answered by the operator's documented step: a start with the voters it learns from the
    /// cluster, as an observer.
    pub(super) refused_starts: AtomicU64,
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
                directory: first_directory(*id),
                voters_file: None,
                replacement: None,
                live: None,
                alive: Arc::new(AtomicBool::new(false)),
            })
            .collect();
        // With voter changes, three seeds in four format the founders with their directory
        // ids, so that a founder's lost disk is drawn too; the fourth keeps static founders (as
        // storage from before formatting has them), whose disks are never lost.
        let keyed = opts.membership && !opts.seed.is_multiple_of(4);
        let founding = if keyed {
            crate::voters::VoterSet::from_entries(voters.iter().map(|id| {
                let voter = crate::voters::Voter {
                    directory: Some(first_directory(*id)),
                    endpoint: format!("sim-{id}"),
                };
                (*id, voter)
            }))
            .expect("a valid founding set")
        } else {
            let mut c = Config::new(voters[0], voters.iter().copied());
            c.directory = opts.membership.then(|| first_directory(voters[0]));
            c.validate()
                .map(|c| c.bootstrap_voters())
                .unwrap_or_default()
        };
        World {
            hosts: Mutex::new(hosts),
            net,
            links,
            voters,
            observers,
            founding,
            refused_starts: AtomicU64::new(0),
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

    /// Whether `id` is a founder named without a directory id (a static founding set): a
    /// replica that has not fetched its removal takes any machine with that id for it.
    pub(super) fn is_static_founder(&self, id: ReplicaId) -> bool {
        self.founding.get(id).is_some_and(|v| v.directory.is_none())
    }

    /// The voter set the founders' storage is formatted with.
    pub(super) fn bootstrap_voters(&self) -> Option<crate::voters::VoterSet> {
        (!self.founding.is_empty()).then(|| self.founding.clone())
    }

    /// The configuration of host `id`: its file's voters (the founders, or what the operator
    /// put there since), every other host as an observer.
    fn config(
        &self,
        id: ReplicaId,
        directory: DirectoryId,
        voters: Option<&[ReplicaId]>,
    ) -> Config {
        let mut c = match voters {
            Some(listed) => {
                let mut c = Config::new(id, listed.iter().copied());
                c.observers = self.all_ids().filter(|o| !listed.contains(o)).collect();
                c
            }
            None => {
                let mut c = Config::new(id, self.voters.iter().copied());
                c.observers = self.observers.iter().copied().collect();
                c
            }
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

    /// The voters host `i`'s configuration file lists now.
    pub(super) fn voters_file(&self, i: usize) -> Vec<ReplicaId> {
        let hosts = lock(&self.hosts);
        hosts[i]
            .voters_file
            .clone()
            .unwrap_or_else(|| self.voters.clone())
    }

    /// Marks host `i`, whose disk was just lost, as a replacement machine for its next start
    /// (`join`: started with the voters it learns from the cluster).
    pub(super) fn replace_later(&self, i: usize, join: bool) {
        lock(&self.hosts)[i].replacement = Some(join);
    }

    /// The operator edits host `i`'s configuration file: its voters become `voters` (taking
    /// effect at its next start).
    pub(super) fn set_voters_file(&self, i: usize, voters: Vec<ReplicaId>) {
        let id = {
            let mut hosts = lock(&self.hosts);
            hosts[i].voters_file = Some(voters.clone());
            hosts[i].id
        };
        self.note(format_args!("{id}'s file now lists voters {voters:?}"));
    }

    /// The voters a replica learns from the cluster, as `--join` does (it retries until a node
    /// in the newest epoch answers): the set of the running replica in the newest epoch (a
    /// leader first, then the furthest high watermark), else every host.
    pub(super) async fn learned_voters(&self, except: usize) -> Vec<ReplicaId> {
        let me = self.id(except);
        type Rank = (crate::types::Epoch, bool, crate::types::Offset);
        let mut best: Option<(Rank, Vec<ReplicaId>)> = None;
        for j in (0..self.len()).filter(|j| *j != except) {
            if let Some((node, _)) = self.live(j) {
                if let Some(status) = node.status().await {
                    let leads = status.role == crate::types::Role::Leader;
                    let rank = (status.epoch, leads, status.high_watermark);
                    if best.as_ref().is_none_or(|(r, _)| rank > *r) {
                        best = Some((rank, status.voter_set.ids().collect()));
                    }
                }
            }
        }
        match best {
            Some((_, ids)) if ids.iter().any(|v| *v != me) => ids,
            _ => self.all_ids().collect(),
        }
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
        let (id, directory) = (h.id, h.directory);
        drop(hosts);
        self.note(format_args!(
            "{id} lost its disk; new directory {directory}"
        ));
    }

    /// Starts host `i` on its durable parts with a fresh state machine, with the configuration
    /// its file holds. A founder's storage is formatted with the founding set before its
    /// first start (only then: a lost disk is not formatted again). A start refused for empty
    /// storage under a standalone configuration is answered as the refusal says: the operator
    /// starts it again with the voters it learns from the cluster.
    pub(super) async fn start(&self, i: usize) {
        let replacement = {
            let mut hosts = lock(&self.hosts);
            if hosts[i].live.is_some() {
                return;
            }
            hosts[i].replacement.take()
        };
        if let Some(join) = replacement {
            // A file whose other voters are all gone from the set in force (a grown cluster
            // whose founder was removed) leads nowhere: the operator follows the replacement
            // steps and starts it with learned voters. A file naming no other replica (a
            // standalone founder's) is kept: its start is refused, and answered below.
            let id = self.id(i);
            let learned = self.learned_voters(i).await;
            let others: Vec<ReplicaId> = self
                .voters_file(i)
                .into_iter()
                .filter(|v| *v != id)
                .collect();
            let leads_nowhere = !others.is_empty() && !others.iter().any(|v| learned.contains(v));
            if join || leads_nowhere {
                self.set_voters_file(i, learned);
            }
        }
        for attempt in 0..2 {
            match self.start_once(i).await {
                Err(crate::driver::StartError::NotFormatted(e)) if attempt == 0 => {
                    self.refused_starts.fetch_add(1, Ordering::Relaxed);
                    self.note(format_args!("start refused: {e}"));
                    let learned = self.learned_voters(i).await;
                    self.set_voters_file(i, learned);
                }
                Err(e) => {
                    let id = self.id(i);
                    lock(&self.start_failures).push(format!("restart of {id}: {e}"));
                    return;
                }
                Ok(()) => return,
            }
        }
    }

    async fn start_once(&self, i: usize) -> Result<(), crate::driver::StartError> {
        let (id, parts, kv, seed, directory, voters_file, first) = {
            let mut hosts = lock(&self.hosts);
            let h = &mut hosts[i];
            if h.live.is_some() {
                return Ok(());
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
                h.voters_file.clone(),
                h.incarnation == 1,
            )
        };
        let cfg = match self
            .config(id, directory, voters_file.as_deref())
            .validate()
        {
            Ok(c) => c,
            Err(e) => {
                lock(&self.start_failures).push(format!("config of {id}: {e}"));
                return Ok(());
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
        if first && self.voters.contains(&id) {
            // The operator formats each founding voter once, before its first start.
            if let Err(e) = crate::driver::format(&*parts.snapshots, &self.founding).await {
                lock(&self.start_failures).push(format!("format of {id}: {e}"));
                return Ok(());
            }
        }
        self.note(format_args!("{id} starts"));
        let node = Node::start(cfg, parts, options).await?;
        lock(&self.hosts)[i].live = Some((node, kv));
        Ok(())
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

/// The directory id host `id` is first started with.
fn first_directory(id: ReplicaId) -> DirectoryId {
    DirectoryId((u128::from(id.0) << 64) | 1)
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
