//! A simulated cluster: replicas of the real [`Replica`] on virtual time, a network that delays,
//! drops, duplicates and partitions, storage that syncs late and loses its unsynced tail on a
//! crash, and the [`Checker`] watching all of it.
//!
//! The cluster plays the driver's part for every replica, following the contract documented on
//! [`crate::protocol`], so the simulator also tests that contract.
//!
//! One file per part: this one the cluster itself (its options, hosts, the event queue and the
//! scripted API), `network` the simulated network, `host` the driver the cluster plays for each
//! replica (storage, syncs, snapshots), `workload` the key-value client workload and its history,
//! `fault_schedule` the random faults of a sweep, `liveness` what must happen once they stop.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use bytes::Bytes;

use super::checks::Checker;
use super::linearizability::{self, Op as LinOp, OpKind, Verdict};
use super::{Faults, RunOptions, RunReport, SimRng};
use crate::config::ValidatedConfig;
use crate::io::{EpochStart, LogState, SnapshotMeta};
use crate::message::{Request, RequestId, Response};
use crate::protocol::{
    Event, Fill, Input, LogOp, Outgoing, Outputs, PersistSeq, ProposeError, ReadFailure, ReadId,
    ReadMode, Replica, SnapshotOp, TransferError, VoterHistory,
};
use crate::types::{
    DirectoryId, ElectionState, Epoch, Instant, Offset, OffsetAndEpoch, Record, ReplicaId, Role,
};
use crate::voters::{Voter, VoterSet};

mod config;
mod fault_schedule;
mod host;
mod liveness;
mod membership;
mod network;
mod workload;

use self::config::replica_config;
pub(crate) use self::host::{log_state, read_range};
use self::workload::{decode_kv, encode_kv};

/// The outcome of a scripted read: its read offset and the value read (0 for absent), or why
/// it failed.
pub type ReadOutcome = Result<(Offset, u64), ReadFailure>;

/// A run that processes more events than this is reported as livelocked.
const EVENTS_MAX: u64 = 20_000_000;

/// How to build a cluster.
#[derive(Clone, Debug)]
pub struct ClusterOptions {
    /// Seed of every random choice.
    pub seed: u64,
    /// Voters, with ids `1..=voters`.
    pub voters: u32,
    /// Observers, with ids after the voters.
    pub observers: u32,
    /// Fault settings (used by [`Cluster::run_with_faults_until`]; delays always apply).
    pub faults: Faults,
    /// The protocol's pre-vote switch.
    pub pre_vote: bool,
    /// The protocol's check-quorum switch.
    pub check_quorum: bool,
    /// The protocol's vote-stickiness switch.
    pub sticky_votes: bool,
    /// Base election timeout.
    pub election_timeout: Duration,
    /// Follower fetch timeout.
    pub fetch_timeout: Duration,
    /// The protocol's lease-read switch (the workload then issues lease reads too).
    pub lease_reads: bool,
    /// The lease's clock-drift margin.
    pub lease_drift_margin: Duration,
    /// Negative control: followers serve linearizable reads without a round.
    pub unsafe_reads: bool,
    /// Negative control: the leader counts any arriving fetch as a barrier echo.
    pub count_arrivals: bool,
    /// The sweep draws voter changes and disk losses ([`Cluster::run_with_faults_until`]).
    pub membership: bool,
    /// A planted mistake in a protocol rule, on every replica.
    pub planted: Option<crate::planted::Planted>,
    /// The founders' storage is formatted with every founding voter's directory id (a keyed
    /// founding set, as `raft-node format` writes it); otherwise with the configured ids alone
    /// (static voters, as storage from before formatting knew them). A single founder is
    /// keyed either way (a standalone bootstrap binds its directory).
    pub keyed_founders: bool,
    /// Each replica's clock rate relative to true time, by id order, in place of the rates the
    /// drift setting draws (a scenario that needs one slow clock names it).
    pub clock_rates: Option<Vec<f64>>,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        ClusterOptions {
            seed: 1,
            voters: 3,
            observers: 0,
            faults: Faults::none(),
            pre_vote: true,
            check_quorum: true,
            sticky_votes: true,
            election_timeout: Duration::from_millis(100),
            fetch_timeout: Duration::from_millis(300),
            lease_reads: false,
            lease_drift_margin: Duration::from_millis(30),
            unsafe_reads: false,
            count_arrivals: false,
            membership: false,
            planted: None,
            keyed_founders: false,
            clock_rates: None,
        }
    }
}

#[derive(Debug)]
enum Wire {
    Request { id: RequestId, request: Request },
    Response { id: RequestId, response: Response },
}

#[derive(Debug)]
enum Ev {
    Deliver {
        to: ReplicaId,
        from: ReplicaId,
        incarnation: u32,
        wire: Wire,
    },
    Timeout {
        host: ReplicaId,
        incarnation: u32,
        id: RequestId,
    },
    Tick {
        host: ReplicaId,
        incarnation: u32,
    },
    LogSync {
        host: ReplicaId,
        incarnation: u32,
    },
    ElectionSync {
        host: ReplicaId,
        incarnation: u32,
    },
    Restart {
        host: ReplicaId,
    },
    Client,
}

struct Inbound {
    from: ReplicaId,
    id: RequestId,
    incarnation: u32,
    /// The candidate of a standard vote request, to check its grant was durable.
    standard_vote: Option<ReplicaId>,
}

struct Host {
    id: ReplicaId,
    cfg: ValidatedConfig,
    replica: Option<Replica>,
    incarnation: u32,
    /// Clock rate relative to true time (drift).
    rate: f64,
    /// The log by offset. Below `log_start` the records are gone from the replica's point of
    /// view (purged, or replaced by an installed snapshot); they stay here, equal to the
    /// committed log, only so that the checkers can index every log by offset. Nothing the
    /// replica asks for is ever served from there.
    log: Vec<Record>,
    log_start: Offset,
    durable_log: Vec<Record>,
    durable_start: Offset,
    /// Complete snapshots (durable) and the download in progress (lost on a crash).
    snapshots: Vec<(SnapshotMeta, Bytes)>,
    partial: Option<(OffsetAndEpoch, Vec<u8>)>,
    /// Applied records since the last local snapshot.
    since_snapshot: u64,
    pending_ops: VecDeque<LogOp>,
    log_sync_scheduled: bool,
    election: Option<ElectionState>,
    election_pending: Option<(PersistSeq, ElectionState)>,
    election_sync_scheduled: bool,
    hold_syncs: bool,
    last_hwm: Offset,
    inbound: BTreeMap<u64, Inbound>,
    next_inbound: u64,
    outstanding: BTreeMap<RequestId, ReplicaId>,
    tick_at: Option<Duration>,
    out: Outputs,
    /// The simulated key-value state machine and how far it has applied.
    kv: BTreeMap<u64, u64>,
    kv_applied: Offset,
    read_index_sent: u64,
    /// The newest epoch this host may have led before it lost its disk ([`Cluster::wipe`]).
    forgotten_epoch: Epoch,
    /// The voter set its storage holds from formatting (a founder's founding set) or from its
    /// first start on empty storage (its contacts, [`ValidatedConfig::start_voters`]); `None`
    /// for a disk that was never started on, or was lost since.
    formatted: Option<VoterSet>,
}

/// A simulated cluster. See the module documentation.
pub struct Cluster {
    opts: ClusterOptions,
    now: Duration,
    rng: SimRng,
    hosts: Vec<Host>,
    queue: BTreeMap<(Duration, u64), Ev>,
    next_seq: u64,
    checker: Checker,
    blocked: BTreeSet<(ReplicaId, ReplicaId)>,
    /// Links whose messages wait (in order) until [`Cluster::release`].
    held_links: BTreeSet<(ReplicaId, ReplicaId)>,
    held_messages: Vec<(ReplicaId, ReplicaId, u32, Wire)>,
    faults_on: bool,
    workload: bool,
    next_payload: u64,
    /// Proposals not yet resolved: payload and invocation time.
    proposals: BTreeMap<(Offset, Epoch), (Bytes, Duration)>,
    /// The committed log applied to a reference key-value map, to know CAS outcomes.
    reference: BTreeMap<u64, u64>,
    reference_applied: usize,
    /// Reads in progress: host, incarnation, key, invocation time.
    reads: BTreeMap<u64, (usize, u32, u64, Duration)>,
    /// Outcomes of reads a scenario started by hand: read offset and value, or the failure.
    scripted: BTreeMap<u64, Option<ReadOutcome>>,
    next_read: u64,
    /// Completed client operations, for the linearizability checker.
    history: Vec<LinOp>,
    /// Highest sequential read offset per (host, incarnation): monotonic per replica.
    sequential: BTreeMap<(usize, u32), Offset>,
    /// Histories the checker could not decide within its step bound.
    inconclusive: u64,
    /// Client reads that failed.
    reads_failed: u64,
    /// Snapshots installed by any replica.
    installs: u64,
    acknowledged: u64,
    next_partition: Duration,
    next_crash: Duration,
    next_transfer: Duration,
    /// Draws of the transfer injector, apart so that the other faults a seed draws stay as
    /// they were before transfers existed.
    transfer_rng: SimRng,
    /// Draws of the membership injector, apart like the transfer injector's.
    membership_rng: SimRng,
    next_membership: Duration,
    /// The leader (and its epoch) the membership injector last saw: a new one is asked for a
    /// change at once on some seeds, where a change before the epoch's first commit would be
    /// unsafe.
    membership_leader: Option<(u32, crate::Epoch)>,
    /// An observer whose disk was lost, which the operator adds back as a voter once it runs
    /// again: `(id, give up at, next try)`.
    rejoining: Option<(u32, Duration, Duration)>,
    /// Quiet periods ([`Faults::quiet_every`]): client writes pause, reads go on. Drawn apart
    /// like the transfer injector.
    quiet_rng: SimRng,
    next_quiet: Duration,
    quiet_until: Duration,
    /// Messages held by the leader-isolating adversary ([`Faults::hold_at_isolation`]).
    isolation_hold: fault_schedule::IsolationHold,
    /// How much of the committed log was scanned for voter sets, and the newest found.
    committed_voters: (usize, VoterSet),
    /// The founding voter set the founders' storage was formatted with: the set in force
    /// before the log names one.
    founding: VoterSet,
    /// Starts refused because the storage was empty and the configuration named no other
    /// replica (a standalone founder that lost its disk): the operator then starts it with the
    /// voters it learns from the cluster, as an observer.
    refusals: u64,
    trace: Vec<String>,
    events: u64,
}

impl Cluster {
    /// Builds and starts the cluster.
    pub fn new(opts: ClusterOptions) -> Cluster {
        let mut rng = SimRng::new(opts.seed);
        let transfer_rng = SimRng::new(opts.seed.rotate_left(17) ^ 0x7A5F_E1E2);
        let voters: Vec<ReplicaId> = (1..=opts.voters).map(ReplicaId).collect();
        let observers: Vec<ReplicaId> = (opts.voters + 1..=opts.voters + opts.observers)
            .map(ReplicaId)
            .collect();
        let mut hosts = Vec::new();
        for id in voters.iter().chain(observers.iter()) {
            let cfg = replica_config(&opts, *id, &voters, &observers);
            let drift = opts.faults.drift_ppm as f64 * 1e-6;
            let spread = (rng.below(2001) as f64 - 1000.0) / 1000.0;
            let spread = if opts.faults.clock_extremes {
                // One replica (which one follows from the seed) runs slowest, every other one
                // fastest: whenever that one leads, all its followers' timers run out first.
                let slow = opts.seed % u64::from(opts.voters + opts.observers);
                if hosts.len() as u64 == slow {
                    -1.0
                } else {
                    1.0
                }
            } else {
                spread
            };
            let drawn = 1.0 + drift * spread;
            let given = opts.clock_rates.as_ref().and_then(|r| r.get(hosts.len()));
            let rate = given.copied().unwrap_or(drawn);
            hosts.push(Host {
                id: *id,
                cfg,
                replica: None,
                incarnation: 0,
                rate,
                log: Vec::new(),
                log_start: Offset::ZERO,
                durable_log: Vec::new(),
                durable_start: Offset::ZERO,
                snapshots: Vec::new(),
                partial: None,
                since_snapshot: 0,
                pending_ops: VecDeque::new(),
                log_sync_scheduled: false,
                election: None,
                election_pending: None,
                election_sync_scheduled: false,
                hold_syncs: false,
                last_hwm: Offset::ZERO,
                inbound: BTreeMap::new(),
                next_inbound: 1,
                outstanding: BTreeMap::new(),
                tick_at: None,
                out: Outputs::default(),
                kv: BTreeMap::new(),
                kv_applied: Offset::ZERO,
                read_index_sent: 0,
                forgotten_epoch: Epoch::ZERO,
                formatted: None,
            });
        }
        // The operator formats each founder's storage with the founding set before its first
        // start; every other replica starts on empty storage.
        let founding = if opts.keyed_founders {
            VoterSet::from_entries(voters.iter().map(|id| {
                let voter = Voter {
                    directory: Some(DirectoryId((u128::from(id.0) << 64) | 1)),
                    endpoint: format!("host-{id}:9000"),
                };
                (*id, voter)
            }))
            .expect("a valid founding set")
        } else {
            hosts[0].cfg.bootstrap_voters()
        };
        for h in hosts.iter_mut().take(voters.len()) {
            h.formatted = Some(founding.clone());
        }
        let membership_rng = SimRng::new(opts.seed.rotate_left(29) ^ 0x3C6E_F372);
        let committed_voters = (0, founding.clone());
        let quiet_rng = SimRng::new(opts.seed.rotate_left(41) ^ 0x5851_F42D);
        let opts_seed = opts.seed;
        let mut cluster = Cluster {
            opts,
            now: Duration::ZERO,
            rng,
            hosts,
            queue: BTreeMap::new(),
            next_seq: 0,
            checker: Checker::default(),
            blocked: BTreeSet::new(),
            held_links: BTreeSet::new(),
            held_messages: Vec::new(),
            faults_on: false,
            workload: false,
            next_payload: 1,
            proposals: BTreeMap::new(),
            reference: BTreeMap::new(),
            reference_applied: 0,
            reads: BTreeMap::new(),
            scripted: BTreeMap::new(),
            next_read: 1,
            history: Vec::new(),
            sequential: BTreeMap::new(),
            inconclusive: 0,
            reads_failed: 0,
            installs: 0,
            acknowledged: 0,
            next_partition: Duration::ZERO,
            next_crash: Duration::ZERO,
            next_transfer: Duration::ZERO,
            transfer_rng,
            membership_rng,
            next_membership: Duration::ZERO,
            membership_leader: None,
            rejoining: None,
            quiet_rng,
            next_quiet: Duration::ZERO,
            quiet_until: Duration::ZERO,
            isolation_hold: fault_schedule::IsolationHold::new(opts_seed),
            committed_voters,
            founding,
            refusals: 0,
            trace: Vec::new(),
            events: 0,
        };
        for i in 0..cluster.hosts.len() {
            cluster.start_host(i);
        }
        cluster
    }

    // ----- public controls for scenarios -----

    /// Virtual time since the start.
    pub fn now(&self) -> Duration {
        self.now
    }

    /// Turns the random client workload on or off.
    pub fn set_workload(&mut self, on: bool) {
        self.workload = on;
        if on {
            self.schedule(self.now, Ev::Client);
        }
    }

    /// The replica with this id (panics in a test that names a crashed one).
    pub fn replica(&self, id: u32) -> &Replica {
        self.hosts[self.index(ReplicaId(id))]
            .replica
            .as_ref()
            .expect("replica is running")
    }

    /// Whether the replica is running.
    pub fn is_up(&self, id: u32) -> bool {
        self.hosts[self.index(ReplicaId(id))].replica.is_some()
    }

    /// The running replica whose released role is leader with the highest epoch.
    pub fn leader(&self) -> Option<u32> {
        self.hosts
            .iter()
            .filter_map(|h| h.replica.as_ref())
            .filter(|r| r.role() == Role::Leader)
            .max_by_key(|r| r.epoch())
            .map(|r| r.id().0)
    }

    /// Asks replica `id` (the leader) to hand leadership to `to`; the outcome is traced.
    pub fn transfer_leadership(&mut self, id: u32, to: u32) -> Result<(), TransferError> {
        let i = self.index(ReplicaId(id));
        let now = self.local_time(i);
        let h = &mut self.hosts[i];
        let Some(replica) = h.replica.as_mut() else {
            return Err(TransferError::ShuttingDown);
        };
        let mut out = std::mem::take(&mut h.out);
        let result = replica.transfer_leadership(now, ReplicaId(to), &mut out);
        self.handle_outputs(i, &mut out);
        self.hosts[i].out = out;
        self.schedule_tick(i);
        result
    }

    /// Restores every link.
    pub fn heal(&mut self) {
        self.blocked.clear();
    }

    /// Crashes a replica: it loses everything not yet durable (and its unsynced tail may tear
    /// when the fault settings say so).
    pub fn crash(&mut self, id: u32) {
        let i = self.index(ReplicaId(id));
        self.crash_host(i);
    }

    /// Restarts a crashed replica from its durable state.
    pub fn restart(&mut self, id: u32) {
        let i = self.index(ReplicaId(id));
        if self.hosts[i].replica.is_none() {
            self.start_host(i);
        }
    }

    /// Holds (or releases) a replica's storage syncs, to observe what waits for durability.
    pub fn hold_syncs(&mut self, id: u32, hold: bool) {
        let i = self.index(ReplicaId(id));
        self.hosts[i].hold_syncs = hold;
        if !hold {
            self.schedule_syncs(i);
        }
    }

    /// Proposes a payload on a replica.
    pub fn propose(&mut self, id: u32, payload: &[u8]) -> Result<OffsetAndEpoch, ProposeError> {
        let i = self.index(ReplicaId(id));
        self.propose_on(i, Bytes::copy_from_slice(payload))
    }

    /// Asks a replica to resign gracefully.
    pub fn resign(&mut self, id: u32) {
        let i = self.index(ReplicaId(id));
        self.step_host(i, Input::Resign);
    }

    /// Runs events until virtual time `until`.
    pub fn run_until(&mut self, until: Duration) {
        while let Some((&(at, seq), _)) = self.queue.first_key_value() {
            if at > until {
                break;
            }
            if self.events >= EVENTS_MAX {
                // Bounded like every loop: a run that generates this much work is livelocked.
                let next: Vec<String> = self
                    .queue
                    .values()
                    .take(3)
                    .map(|e| format!("{e:?}"))
                    .collect();
                self.queue.clear();
                let states: Vec<String> = (0..self.hosts.len())
                    .filter_map(|i| {
                        let r = self.hosts[i].replica.as_ref()?;
                        Some(format!(
                            "{} {} {} now={} deadline={}",
                            r.id(),
                            r.role(),
                            r.epoch(),
                            self.local_time(i).0,
                            r.next_deadline().0
                        ))
                    })
                    .collect();
                let msg = format!(
                    "runaway: more than {EVENTS_MAX} events; next: {next:?}; replicas: {states:?}"
                );
                self.checker.report(self.now, msg);
                break;
            }
            let ev = self.queue.remove(&(at, seq)).expect("first key exists");
            self.now = at;
            self.handle(ev);
            self.after_event();
        }
        self.now = self.now.max(until);
    }

    /// Runs for `d` of virtual time.
    pub fn run_for(&mut self, d: Duration) {
        self.run_until(self.now + d);
    }

    /// Runs until `cond` holds (checked after every event), at most for `max`. Returns whether
    /// it held.
    pub fn run_until_cond(
        &mut self,
        max: Duration,
        mut cond: impl FnMut(&Cluster) -> bool,
    ) -> bool {
        let until = self.now + max;
        loop {
            if cond(self) {
                return true;
            }
            let Some((&(at, seq), _)) = self.queue.first_key_value() else {
                return false;
            };
            if at > until {
                self.now = until;
                return cond(self);
            }
            let ev = self.queue.remove(&(at, seq)).expect("first key exists");
            self.now = at;
            self.handle(ev);
            self.after_event();
        }
    }

    /// End-of-run checks that are too costly after every event.
    pub fn check_final(&mut self) {
        let logs: Vec<(ReplicaId, &[Record])> = self
            .hosts
            .iter()
            .map(|h| (h.id, h.log.as_slice()))
            .collect();
        let mut checker = std::mem::take(&mut self.checker);
        checker.check_log_matching(self.now, &logs);
        self.checker = checker;
    }

    /// Every violation found so far.
    pub fn violations(&self) -> &[String] {
        self.checker.violations()
    }

    /// Role changes and notable events so far, one line each, for scenario expectations.
    pub fn trace(&self) -> String {
        self.trace.join("\n")
    }

    /// Clears the trace.
    pub fn clear_trace(&mut self) {
        self.trace.clear();
    }

    /// The committed prefix as the checker knows it.
    pub fn committed(&self) -> &[Record] {
        self.checker.committed()
    }

    /// The durable election state of a replica.
    pub fn durable_election(&self, id: u32) -> Option<ElectionState> {
        self.hosts[self.index(ReplicaId(id))].election
    }

    /// The log of a replica (including its unsynced tail).
    pub fn log(&self, id: u32) -> &[Record] {
        &self.hosts[self.index(ReplicaId(id))].log
    }

    /// Builds the report of a run.
    pub fn report(&self, options: RunOptions, faults: Faults) -> RunReport {
        let max_epoch = self
            .hosts
            .iter()
            .filter_map(|h| h.election.map(|e| e.epoch.0))
            .max()
            .unwrap_or(0);
        RunReport {
            options: options.clone(),
            faults,
            violations: self.checker.violations().to_vec(),
            committed: self.checker.committed().len() as u64,
            acknowledged: self.acknowledged,
            operations: self.history.len() as u64,
            inconclusive: self.inconclusive,
            reads_failed: self.reads_failed,
            snapshots_installed: self.installs,
            max_epoch,
            events: self.events,
            trace: if options.keep_trace {
                self.trace()
            } else {
                String::new()
            },
        }
    }

    // ----- internals -----

    fn index(&self, id: ReplicaId) -> usize {
        let i = id.0 as usize - 1;
        assert!(i < self.hosts.len(), "no replica {id}");
        i
    }

    fn schedule(&mut self, at: Duration, ev: Ev) {
        self.next_seq += 1;
        self.queue.insert((at, self.next_seq), ev);
    }

    fn handle(&mut self, ev: Ev) {
        self.events += 1;
        match ev {
            Ev::Deliver {
                to,
                from,
                incarnation,
                wire,
            } => {
                let i = self.index(to);
                if self.hosts[i].replica.is_none() {
                    return;
                }
                match wire {
                    Wire::Request { id, request } => {
                        let h = &mut self.hosts[i];
                        let inbound_id = h.next_inbound;
                        h.next_inbound += 1;
                        let standard_vote = match &request {
                            Request::Vote(v) if !v.pre_vote => Some(v.candidate),
                            _ => None,
                        };
                        h.inbound.insert(
                            inbound_id,
                            Inbound {
                                from,
                                id,
                                incarnation,
                                standard_vote,
                            },
                        );
                        let input = Input::Request {
                            from,
                            id: RequestId(inbound_id),
                            request,
                        };
                        self.step_host(i, input);
                    }
                    Wire::Response { id, response } => {
                        if self.hosts[i].incarnation != incarnation {
                            return;
                        }
                        self.hosts[i].outstanding.remove(&id);
                        self.step_host(i, Input::Response { from, id, response });
                    }
                }
            }
            Ev::Timeout {
                host,
                incarnation,
                id,
            } => {
                let i = self.index(host);
                let h = &mut self.hosts[i];
                if h.incarnation != incarnation {
                    return;
                }
                if let Some(to) = h.outstanding.remove(&id) {
                    self.step_host(i, Input::RequestFailed { to, id });
                }
            }
            Ev::Tick { host, incarnation } => {
                let i = self.index(host);
                let h = &mut self.hosts[i];
                if h.incarnation == incarnation && h.tick_at == Some(self.now) {
                    h.tick_at = None;
                    self.step_host(i, Input::Tick);
                } else if h.incarnation == incarnation && h.tick_at.is_none() {
                    self.schedule_tick(i);
                }
            }
            Ev::LogSync { host, incarnation } => {
                let i = self.index(host);
                let h = &mut self.hosts[i];
                if h.incarnation != incarnation || h.replica.is_none() {
                    return;
                }
                h.log_sync_scheduled = false;
                let mut last = None;
                while let Some(op) = h.pending_ops.pop_front() {
                    match op {
                        LogOp::Append { seq, records } => {
                            h.durable_log.extend(records);
                            last = Some(seq);
                        }
                        LogOp::Truncate { seq, end } => {
                            h.durable_log.truncate(end.0 as usize);
                            last = Some(seq);
                        }
                        LogOp::Purge { seq, start } => {
                            h.durable_start = start;
                            last = Some(seq);
                        }
                        LogOp::Reset { seq, start } => {
                            h.durable_log = h.log[..start.offset.0 as usize].to_vec();
                            h.durable_start = start.offset;
                            last = Some(seq);
                        }
                    }
                }
                if let Some(seq) = last {
                    self.step_host(i, Input::LogPersisted(seq));
                }
            }
            Ev::ElectionSync { host, incarnation } => {
                let i = self.index(host);
                let h = &mut self.hosts[i];
                if h.incarnation != incarnation || h.replica.is_none() {
                    return;
                }
                h.election_sync_scheduled = false;
                if let Some((seq, state)) = h.election_pending.take() {
                    h.election = Some(state);
                    let id = h.id;
                    self.checker.on_durable_election(self.now, id, state);
                    self.step_host(i, Input::ElectionPersisted(seq));
                }
            }
            Ev::Client => {
                if self.workload {
                    self.client_op();
                    let next = self.now + Duration::from_micros(self.rng.range(200, 3000));
                    self.schedule(next, Ev::Client);
                }
            }
            Ev::Restart { host } => {
                let i = self.index(host);
                if self.hosts[i].replica.is_none() {
                    self.trace
                        .push(format!("{}ms {host} restarted", self.now.as_millis()));
                    self.start_host(i);
                }
            }
        }
    }

    fn after_event(&mut self) {
        // With voter changes the deciding set of an old commit may have been truncated away;
        // then the leader's commit is checked when it happens instead.
        if !self.opts.membership {
            self.check_majority_durable();
        }
    }
}
