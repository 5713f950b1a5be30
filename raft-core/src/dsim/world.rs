//! The simulated cluster: hosts, each a real [`crate::driver::Host`] running every group on one
//! in-memory disk ([`HostDisk`]) and one endpoint of a network whose every message the run's
//! PRNG delays or loses; the groups they run (each founded on a rotating subset of the hosts);
//! and what the operator keeps per host (configuration files, directory ids).
//!
//! Starting, crashing and losing hosts, and creating and dropping groups on them, are in
//! `hosts`; the fault schedule in `faults`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::config::Config;
use crate::driver::Node;
use crate::mem::transport::{Delivery, MemNetwork, MemTransport};
use crate::sim::SimRng;
use crate::types::{DirectoryId, GroupId, ReplicaId};
use crate::voters::VoterSet;

use super::groups::HostDisk;
use super::kv::{lock, Kv, Ledger};
use super::DriverSimOptions;

/// The network's state: what the link model consults for every message.
pub(super) struct Links {
    pub(super) rng: SimRng,
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

/// A running incarnation of a host: its [`crate::driver::Host`], its network endpoint, and the
/// replica and state machine of every group it runs.
#[derive(Clone)]
pub(super) struct Live {
    pub(super) host: crate::driver::Host,
    pub(super) transport: Arc<MemTransport>,
    pub(super) groups: BTreeMap<GroupId, (Node, Arc<Kv>)>,
}

/// One machine: its disk, its ledgers, the operator's files, and its current incarnation.
pub(super) struct Host {
    pub(super) id: ReplicaId,
    pub(super) disk: HostDisk,
    /// Per group, what its replicas on this host applied, over every incarnation.
    pub(super) ledgers: BTreeMap<GroupId, Arc<Mutex<Ledger>>>,
    pub(super) incarnation: u64,
    /// The id of its current storage directory (one engine: one id in every group); a disk
    /// loss makes a new one.
    pub(super) directory: DirectoryId,
    /// Per group, the voters its configuration file lists when the operator changed them (an
    /// edited list, or voters learned from the cluster as `--join` writes them); absent: the
    /// group's founders. A lost disk does not change the files.
    pub(super) voters_file: BTreeMap<GroupId, Vec<ReplicaId>>,
    /// Its disk was lost and it has not run since: `Some(join)`, where `join` says the
    /// replacement is started with the voters it learns from the cluster.
    pub(super) replacement: Option<bool>,
    /// The running incarnation; `None` while crashed.
    pub(super) live: Option<Live>,
    /// The current incarnation's switch on its stores (see `disk`).
    pub(super) alive: Arc<AtomicBool>,
    /// Serialises starts, crashes, disk losses and group creations and drops on this host.
    pub(super) ops: Arc<tokio::sync::Mutex<()>>,
}

/// Where a group is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Phase {
    /// Registered; its founders' storage is being formatted, and no host opens it yet.
    Creating,
    /// Running on its hosts; clients use it.
    Live,
    /// Its clients are stopping, before it is dropped.
    Stopping,
    /// Dropped on every running host; a host that was down drops it at its next start.
    Dropped,
}

/// A group: its founders and founding voter set, and where it is in its life.
pub(super) struct Group {
    pub(super) founders: Vec<ReplicaId>,
    pub(super) founding: VoterSet,
    pub(super) phase: Phase,
}

/// Every host and group, behind locks that are never held across an await.
pub(super) struct World {
    pub(super) hosts: Mutex<Vec<Host>>,
    pub(super) net: MemNetwork,
    pub(super) links: Arc<Mutex<Links>>,
    /// Every host's id, in order.
    ids: Vec<ReplicaId>,
    pub(super) groups: Mutex<BTreeMap<GroupId, Group>>,
    /// The id the next group created gets: ids are never reused.
    next_group: AtomicU64,
    /// Founding sets name each founder with its directory id (three `--membership` seeds in
    /// four), else by id alone (as storage from before formatting has them).
    keyed: bool,
    pub(super) opts: DriverSimOptions,
    /// Starts refused because the storage was empty and the configuration named no other
    /// replica (a standalone founder that lost its disk: expected, not a violation), each
    /// answered by the operator's documented step: a start with the voters it learns from the
    /// cluster, as an observer.
    pub(super) refused_starts: AtomicU64,
    /// Restarts and group operations that failed (a violation: a replica must always come
    /// back, and a group must be created and dropped where it is asked to).
    pub(super) start_failures: Mutex<Vec<String>>,
    /// Snapshots installed by incarnations that ended.
    pub(super) snapshots_installed: AtomicU64,
    /// What happened to the hosts and groups when, for the report of a failing seed.
    pub(super) timeline: Mutex<Vec<String>>,
    origin: tokio::time::Instant,
}

impl World {
    /// The hosts (`voters + observers` of them) and the run's first groups, registered but
    /// not yet founded (see `World::found_group`).
    pub(super) fn new(opts: &DriverSimOptions) -> World {
        let ids: Vec<ReplicaId> = (1..=opts.voters + opts.observers).map(ReplicaId).collect();
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
        let hosts = ids
            .iter()
            .map(|id| Host {
                id: *id,
                disk: HostDisk::default(),
                ledgers: BTreeMap::new(),
                incarnation: 0,
                directory: first_directory(*id),
                voters_file: BTreeMap::new(),
                replacement: None,
                live: None,
                alive: Arc::new(AtomicBool::new(false)),
                ops: Arc::default(),
            })
            .collect();
        let world = World {
            hosts: Mutex::new(hosts),
            net,
            links,
            ids,
            groups: Mutex::default(),
            next_group: AtomicU64::new(0),
            // With voter changes, three seeds in four format the founders with their
            // directory ids, so that a founder's lost disk is drawn too; the fourth keeps
            // static founders (as storage from before formatting has them), whose disks are
            // never lost.
            keyed: opts.membership && !opts.seed.is_multiple_of(4),
            refused_starts: AtomicU64::new(0),
            opts: opts.clone(),
            start_failures: Mutex::default(),
            snapshots_installed: AtomicU64::new(0),
            timeline: Mutex::default(),
            origin: tokio::time::Instant::now(),
        };
        for _ in 0..opts.groups.max(1) {
            world.register_group();
        }
        world
    }

    /// Notes an event on the timeline, at the current virtual time.
    pub(super) fn note(&self, what: impl std::fmt::Display) {
        let at = self.origin.elapsed().as_millis();
        lock(&self.timeline).push(format!("{at}ms {what}"));
    }

    /// How many hosts there are.
    pub(super) fn len(&self) -> usize {
        self.ids.len()
    }

    /// The id of host `i`.
    pub(super) fn id(&self, i: usize) -> ReplicaId {
        self.ids[i]
    }

    /// The running replica of `group` on host `i` and its state machine, if it runs.
    pub(super) fn live(&self, i: usize, group: GroupId) -> Option<(Node, Arc<Kv>)> {
        lock(&self.hosts)[i]
            .live
            .as_ref()
            .and_then(|l| l.groups.get(&group).cloned())
    }

    /// Host `i`'s running incarnation, if it runs.
    pub(super) fn live_host(&self, i: usize) -> Option<Live> {
        lock(&self.hosts)[i].live.clone()
    }

    /// The groups in `phases`, ascending.
    pub(super) fn groups_in(&self, phases: &[Phase]) -> Vec<GroupId> {
        lock(&self.groups)
            .iter()
            .filter(|(_, g)| phases.contains(&g.phase))
            .map(|(id, _)| *id)
            .collect()
    }

    /// The groups clients use now.
    pub(super) fn live_groups(&self) -> Vec<GroupId> {
        self.groups_in(&[Phase::Live])
    }

    /// Where `group` is in its life (`None`: never registered).
    pub(super) fn phase(&self, group: GroupId) -> Option<Phase> {
        lock(&self.groups).get(&group).map(|g| g.phase)
    }

    pub(super) fn set_phase(&self, group: GroupId, phase: Phase) {
        if let Some(g) = lock(&self.groups).get_mut(&group) {
            g.phase = phase;
        }
    }

    /// The ledger of `group` on host `i` (made on first use).
    pub(super) fn ledger(&self, i: usize, group: GroupId) -> Arc<Mutex<Ledger>> {
        lock(&self.hosts)[i]
            .ledgers
            .entry(group)
            .or_default()
            .clone()
    }

    /// The directory id host `id` runs with now.
    pub(super) fn directory_of(&self, id: ReplicaId) -> DirectoryId {
        let hosts = lock(&self.hosts);
        hosts
            .iter()
            .find(|h| h.id == id)
            .map_or(DirectoryId(0), |h| h.directory)
    }

    /// Whether `id` is a founder of `group` named without a directory id (a static founding
    /// set): a replica that has not fetched its removal takes any machine with that id for it.
    pub(super) fn is_static_founder(&self, group: GroupId, id: ReplicaId) -> bool {
        lock(&self.groups)
            .get(&group)
            .and_then(|g| g.founding.get(id))
            .is_some_and(|v| v.directory.is_none())
    }

    /// The voter set `group`'s founders' storage is formatted with.
    pub(super) fn founding(&self, group: GroupId) -> VoterSet {
        lock(&self.groups)
            .get(&group)
            .map(|g| g.founding.clone())
            .unwrap_or_default()
    }

    fn founders(&self, group: GroupId) -> Vec<ReplicaId> {
        lock(&self.groups)
            .get(&group)
            .map(|g| g.founders.clone())
            .unwrap_or_default()
    }

    /// Registers a new group (phase [`Phase::Creating`]): its founders are the `voters` hosts
    /// that follow the group's number in rotation, so that groups vote on different subsets
    /// of the hosts, and its founding set names them with their directories now (keyed runs)
    /// or by id alone.
    pub(super) fn register_group(&self) -> GroupId {
        let group = GroupId(
            self.next_group
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        );
        let n = self.len();
        let voters = (self.opts.voters as usize).min(n);
        let founders: Vec<ReplicaId> = (0..voters)
            .map(|k| self.ids[(group.0 as usize + k) % n])
            .collect();
        let founding = if self.keyed {
            VoterSet::from_entries(founders.iter().map(|id| {
                let voter = crate::voters::Voter {
                    directory: Some(self.directory_of(*id)),
                    endpoint: format!("sim-{id}"),
                };
                (*id, voter)
            }))
            .expect("a valid founding set")
        } else {
            let mut c = Config::new(founders[0], founders.iter().copied());
            c.directory = self.opts.membership.then(|| self.directory_of(founders[0]));
            c.validate()
                .map(|c| c.bootstrap_voters())
                .unwrap_or_default()
        };
        lock(&self.groups).insert(
            group,
            Group {
                founders,
                founding,
                phase: Phase::Creating,
            },
        );
        group
    }

    /// The configuration of host `id` in `group`: its file's voters (the group's founders, or
    /// what the operator put there since), every other host as an observer.
    pub(super) fn config(
        &self,
        id: ReplicaId,
        group: GroupId,
        directory: DirectoryId,
        voters: Option<&[ReplicaId]>,
    ) -> Config {
        let listed = voters.map_or_else(|| self.founders(group), <[ReplicaId]>::to_vec);
        let mut c = Config::new(id, listed.iter().copied());
        c.observers = self
            .ids
            .iter()
            .copied()
            .filter(|o| !listed.contains(o))
            .collect();
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

    /// The voters host `i`'s configuration file of `group` lists now.
    pub(super) fn voters_file(&self, i: usize, group: GroupId) -> Vec<ReplicaId> {
        let listed = lock(&self.hosts)[i].voters_file.get(&group).cloned();
        listed.unwrap_or_else(|| self.founders(group))
    }

    /// Marks host `i`, whose disk was just lost, as a replacement machine for its next start
    /// (`join`: started with the voters it learns from the cluster).
    pub(super) fn replace_later(&self, i: usize, join: bool) {
        lock(&self.hosts)[i].replacement = Some(join);
    }

    /// The operator edits host `i`'s configuration file of `group`: its voters become `voters`
    /// (taking effect at its next start).
    pub(super) fn set_voters_file(&self, i: usize, group: GroupId, voters: Vec<ReplicaId>) {
        let id = {
            let mut hosts = lock(&self.hosts);
            hosts[i].voters_file.insert(group, voters.clone());
            hosts[i].id
        };
        self.note(format_args!(
            "{id}'s file of {group} now lists voters {voters:?}"
        ));
    }

    /// The voters of `group` a replica learns from the cluster, as `--join` does (it retries
    /// until a node in the newest epoch answers): the set of the running replica in the newest
    /// epoch (a leader first, then the furthest high watermark), else every host.
    pub(super) async fn learned_voters(&self, except: usize, group: GroupId) -> Vec<ReplicaId> {
        let me = self.id(except);
        type Rank = (crate::types::Epoch, bool, crate::types::Offset);
        let mut best: Option<(Rank, Vec<ReplicaId>)> = None;
        for j in (0..self.len()).filter(|j| *j != except) {
            if let Some((node, _)) = self.live(j, group) {
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
            _ => self.ids.clone(),
        }
    }
}

/// The directory id host `id` is first started with.
fn first_directory(id: ReplicaId) -> DirectoryId {
    DirectoryId((u128::from(id.0) << 64) | 1)
}
