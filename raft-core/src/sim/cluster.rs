//! A simulated cluster: replicas of the real [`Replica`] on virtual time, a network that delays,
//! drops, duplicates and partitions, storage that syncs late and loses its unsynced tail on a
//! crash, and the [`Checker`] watching all of it.
//!
//! The cluster plays the driver's part for every replica, following the contract documented on
//! [`crate::protocol`], so the simulator also tests that contract.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use bytes::Bytes;

use super::checks::Checker;
use super::linearizability::{self, Op as LinOp, OpKind, Verdict};
use super::{Faults, RunOptions, RunReport, SimRng};
use crate::config::{Config, ValidatedConfig};
use crate::io::{EpochStart, LogState, SnapshotMeta};
use crate::message::{Request, RequestId, Response};
use crate::protocol::{
    Event, Fill, Input, LogOp, Outgoing, Outputs, PersistSeq, ProposeError, ReadFailure, ReadId,
    ReadMode, Replica, SnapshotOp, TransferError,
};
use crate::types::{
    ElectionState, Epoch, Instant, Offset, OffsetAndEpoch, Record, ReplicaId, Role,
};

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
    /// Snapshots installed by any replica.
    installs: u64,
    acknowledged: u64,
    next_partition: Duration,
    next_crash: Duration,
    next_transfer: Duration,
    /// Draws of the transfer injector, apart so that the other faults a seed draws stay as
    /// they were before transfers existed.
    transfer_rng: SimRng,
    trace: Vec<String>,
    events: u64,
    majority: usize,
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
            let mut cfg = Config::new(*id, voters.iter().copied());
            cfg.observers = observers.iter().copied().collect();
            cfg.election_timeout = opts.election_timeout;
            cfg.fetch_timeout = opts.fetch_timeout;
            cfg.fetch_max_wait = Duration::from_millis(50);
            cfg.request_timeout = Duration::from_millis(300);
            cfg.retry_backoff = Duration::from_millis(10);
            cfg.election_backoff_max = opts.election_timeout;
            cfg.append_linger = Duration::from_millis(1);
            cfg.fetch_bytes_max = 64 * 1024;
            cfg.payload_bytes_max = 1024;
            cfg.pending_proposals_max = 4096;
            cfg.pre_vote = opts.pre_vote;
            cfg.check_quorum = opts.check_quorum;
            cfg.sticky_votes = opts.sticky_votes;
            cfg.read_timeout = Duration::from_millis(300);
            cfg.lease_reads = opts.lease_reads;
            cfg.lease_drift_margin = opts.lease_drift_margin;
            cfg.test_unsafe_reads = opts.unsafe_reads;
            cfg.test_count_arrivals = opts.count_arrivals;
            cfg.snapshot_log_retention = opts.faults.snapshot_retention;
            // Small chunks, so that downloads span leader changes and crashes.
            cfg.snapshot_chunk_bytes = 24;
            let cfg = cfg
                .validate()
                .expect("the simulator's configuration is valid");
            let drift = opts.faults.drift_ppm as f64 * 1e-6;
            let rate = 1.0 + drift * ((rng.below(2001) as f64 - 1000.0) / 1000.0);
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
            });
        }
        let majority = voters.len() / 2 + 1;
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
            installs: 0,
            acknowledged: 0,
            next_partition: Duration::ZERO,
            next_crash: Duration::ZERO,
            next_transfer: Duration::ZERO,
            transfer_rng,
            trace: Vec::new(),
            events: 0,
            majority,
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

    /// Cuts the link from `from` to `to` (one way).
    pub fn block(&mut self, from: u32, to: u32) {
        self.blocked.insert((ReplicaId(from), ReplicaId(to)));
    }

    /// Cuts both directions between `a` and `b`.
    pub fn cut(&mut self, a: u32, b: u32) {
        self.block(a, b);
        self.block(b, a);
    }

    /// Cuts `id` off from every other replica.
    pub fn isolate(&mut self, id: u32) {
        for h in 0..self.hosts.len() as u32 {
            if h + 1 != id {
                self.cut(id, h + 1);
            }
        }
    }

    /// Holds every message from `from` to `to` in the network, undelivered, until
    /// [`Cluster::release`]: a message that left long before it arrives.
    pub fn hold(&mut self, from: u32, to: u32) {
        self.held_links.insert((ReplicaId(from), ReplicaId(to)));
    }

    /// Delivers every message held on the link from `from` to `to` (after the usual delay) and
    /// stops holding it. Returns how many were held.
    pub fn release(&mut self, from: u32, to: u32) -> usize {
        let link = (ReplicaId(from), ReplicaId(to));
        self.held_links.remove(&link);
        let (due, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut self.held_messages)
            .into_iter()
            .partition(|(f, t, _, _)| (*f, *t) == link);
        self.held_messages = keep;
        let count = due.len();
        for (from, to, incarnation, wire) in due {
            self.net_send(from, to, incarnation, wire);
        }
        count
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

    /// Runs with the seed's faults (partitions, crashes, drops) until `until`.
    pub fn run_with_faults_until(&mut self, until: Duration) {
        self.faults_on = true;
        self.next_partition = self.now + self.fault_interval(self.opts.faults.partition_every);
        self.next_crash = self.now + self.fault_interval(self.opts.faults.crash_every);
        self.next_transfer = self.now + self.transfer_interval();
        while self.now < until {
            let step_end = (self.now + Duration::from_millis(1)).min(until);
            self.run_until(step_end);
            self.inject_faults();
        }
        self.faults_on = false;
    }

    /// Ends every fault: links heal and crashed replicas restart.
    pub fn heal_all(&mut self) {
        self.faults_on = false;
        self.heal();
        for i in 0..self.hosts.len() {
            if self.hosts[i].replica.is_none() {
                self.start_host(i);
            }
        }
    }

    /// The liveness bound of the protocol reference (L1): fetch timeout plus a few election
    /// rounds, plus network slack.
    pub fn liveness_bound(&self) -> Duration {
        self.opts.fetch_timeout + self.opts.election_timeout * 12 + Duration::from_millis(500)
    }

    /// Liveness: from `since` (faults off), a leader is elected and a new proposal commits
    /// within the bound. Records a violation otherwise.
    pub fn check_liveness(&mut self, since: Duration) {
        let deadline = since + self.liveness_bound();
        self.workload = false;
        let mut marker: Option<OffsetAndEpoch> = None;
        while self.now < deadline {
            // A marker proposed on a leader that is then deposed may be lost: propose again on
            // the newer leader.
            if let Some(l) = self.leader() {
                let epoch = self.replica(l).epoch();
                if marker.is_none_or(|m| m.epoch < epoch) {
                    let i = self.index(ReplicaId(l));
                    marker = self
                        .propose_on(i, Bytes::from_static(b"liveness-marker"))
                        .ok();
                }
            }
            if let Some(m) = marker {
                let committed = self.checker.committed();
                if committed
                    .get(m.offset.0 as usize)
                    .is_some_and(|r| r.epoch == m.epoch)
                {
                    return;
                }
            }
            self.run_for(Duration::from_millis(5));
        }
        let msg = match marker {
            None => format!(
                "L1 no leader within {:?} after faults stopped",
                self.liveness_bound()
            ),
            Some(m) => format!("L1 proposal {m} did not commit within the bound"),
        };
        self.checker.report(self.now, msg);
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

    fn local_time(&self, i: usize) -> Instant {
        let h = &self.hosts[i];
        Instant((self.now.as_nanos() as f64 * h.rate) as u64)
    }

    fn global_time(&self, i: usize, local: Instant) -> Option<Duration> {
        if local == Instant::NEVER {
            return None;
        }
        let rate = self.hosts[i].rate;
        let mut ns = (local.0 as f64 / rate).ceil() as u64;
        // Rounding must never schedule a tick at a true time whose local time is still before
        // the deadline: that tick would find nothing due and reschedule itself forever.
        while ((ns as f64) * rate) < local.0 as f64 {
            ns += 1;
        }
        Some(Duration::from_nanos(ns).max(self.now))
    }

    fn schedule(&mut self, at: Duration, ev: Ev) {
        self.next_seq += 1;
        self.queue.insert((at, self.next_seq), ev);
    }

    fn start_host(&mut self, i: usize) {
        let now = self.local_time(i);
        let seed = self.rng.next_u64();
        let latest = self.hosts[i]
            .snapshots
            .last()
            .map(|(m, d)| (m.id, d.clone()));
        if let Some((id, _)) = latest {
            // As the driver does: a log that does not carry on from the snapshot (a crash
            // between completing a download and resetting the log) is replaced.
            let h = &self.hosts[i];
            let continues = id.offset >= h.log_start
                && (id.offset.0 as usize) <= h.log.len()
                && (id.offset == Offset::ZERO || h.log[id.offset.0 as usize - 1].epoch == id.epoch);
            if !continues {
                let ghost = self.committed_prefix(id.offset);
                let h = &mut self.hosts[i];
                h.log = ghost.clone();
                h.durable_log = ghost;
                h.log_start = id.offset;
                h.durable_start = id.offset;
            }
        }
        let h = &mut self.hosts[i];
        if let Some((id, data)) = &latest {
            h.kv = decode_kv(data);
            h.kv_applied = id.offset;
        }
        let state = log_state(&h.log, h.log_start);
        let snapshot = latest.map(|(id, _)| id);
        h.replica = Some(Replica::new(
            h.cfg.clone(),
            h.election,
            &state,
            snapshot,
            seed,
            now,
        ));
        h.last_hwm = Offset::ZERO;
        h.tick_at = None;
        self.step_host(i, Input::Tick);
    }

    fn crash_host(&mut self, i: usize) {
        let torn = self.rng.chance(self.opts.faults.torn_tail);
        let keep_vote = self.rng.chance(0.5);
        let cut = self.rng.next_u64();
        let committed = if self.hosts[i]
            .pending_ops
            .iter()
            .any(|op| matches!(op, LogOp::Reset { .. }))
        {
            self.checker.committed().to_vec()
        } else {
            Vec::new()
        };
        let h = &mut self.hosts[i];
        if h.replica.take().is_none() {
            return;
        }
        h.incarnation += 1;
        // What reached the disk: everything synced, plus (torn) part of what was not.
        let mut disk = std::mem::take(&mut h.durable_log);
        let mut disk_start = h.durable_start;
        if torn && !h.pending_ops.is_empty() {
            let ops = h.pending_ops.len() as u64;
            let keep = (cut % (ops + 1)) as usize;
            for (k, op) in h.pending_ops.iter().enumerate().take(keep) {
                match op {
                    LogOp::Append { records, .. } => {
                        let n = if k + 1 == keep {
                            (cut >> 8) as usize % (records.len() + 1)
                        } else {
                            records.len()
                        };
                        disk.extend(records.iter().take(n).cloned());
                    }
                    LogOp::Truncate { end, .. } => disk.truncate(end.0 as usize),
                    LogOp::Purge { start, .. } => disk_start = *start,
                    LogOp::Reset { start, .. } => {
                        disk = committed[..start.offset.0 as usize].to_vec();
                        disk_start = start.offset;
                    }
                }
            }
        }
        h.pending_ops.clear();
        h.log = disk.clone();
        h.durable_log = disk;
        h.log_start = disk_start;
        h.partial = None;
        h.since_snapshot = 0;
        let mut vote_landed = None;
        if let Some((_, state)) = h.election_pending.take() {
            if keep_vote {
                h.election = Some(state);
                vote_landed = Some(state);
            }
        }
        h.log_sync_scheduled = false;
        h.election_sync_scheduled = false;
        h.inbound.clear();
        h.outstanding.clear();
        h.tick_at = None;
        h.kv.clear();
        h.kv_applied = Offset::ZERO;
        let id = h.id;
        // Reads in progress on a crashed replica never complete: they had no effect.
        self.reads.retain(|_, r| r.0 != i);
        self.trace
            .push(format!("{}ms {id} crashed", self.now.as_millis()));
        if let Some(state) = vote_landed {
            self.checker.on_durable_election(self.now, id, state);
        }
    }

    fn propose_on(&mut self, i: usize, payload: Bytes) -> Result<OffsetAndEpoch, ProposeError> {
        let now = self.local_time(i);
        let h = &mut self.hosts[i];
        let Some(replica) = h.replica.as_mut() else {
            return Err(ProposeError::ShuttingDown);
        };
        let mut out = std::mem::take(&mut h.out);
        let result = replica.propose(now, payload.clone(), &mut out);
        if let Ok(id) = result {
            self.proposals
                .insert((id.offset, id.epoch), (payload, self.now));
        }
        self.handle_outputs(i, &mut out);
        self.hosts[i].out = out;
        self.schedule_tick(i);
        result
    }

    fn step_host(&mut self, i: usize, input: Input) {
        let now = self.local_time(i);
        let h = &mut self.hosts[i];
        let Some(replica) = h.replica.as_mut() else {
            return;
        };
        let mut out = std::mem::take(&mut h.out);
        replica.step(now, input, &mut out);
        self.handle_outputs(i, &mut out);
        self.hosts[i].out = out;
        self.schedule_tick(i);
    }

    fn schedule_tick(&mut self, i: usize) {
        let Some(replica) = self.hosts[i].replica.as_ref() else {
            return;
        };
        let Some(at) = self.global_time(i, replica.next_deadline()) else {
            return;
        };
        let h = &self.hosts[i];
        if h.tick_at.is_some_and(|t| t <= at && t >= self.now) {
            return;
        }
        let (host, incarnation) = (h.id, h.incarnation);
        self.hosts[i].tick_at = Some(at);
        self.schedule(at, Ev::Tick { host, incarnation });
    }

    fn schedule_syncs(&mut self, i: usize) {
        let lat = self.rng.range(
            self.opts.faults.sync_min.as_nanos() as u64,
            self.opts.faults.sync_max.as_nanos() as u64,
        );
        let at = self.now + Duration::from_nanos(lat);
        let h = &mut self.hosts[i];
        if h.hold_syncs {
            return;
        }
        let (host, incarnation) = (h.id, h.incarnation);
        if !h.pending_ops.is_empty() && !h.log_sync_scheduled {
            h.log_sync_scheduled = true;
            self.schedule(at, Ev::LogSync { host, incarnation });
        }
        let h = &mut self.hosts[i];
        if h.election_pending.is_some() && !h.election_sync_scheduled {
            h.election_sync_scheduled = true;
            self.schedule(at, Ev::ElectionSync { host, incarnation });
        }
    }

    fn handle_outputs(&mut self, i: usize, out: &mut Outputs) {
        let mut follow_up = Vec::new();
        if let Some(p) = out.persist.take() {
            self.hosts[i].election_pending = Some(p);
        }
        for op in out.log.drain(..) {
            let id = self.hosts[i].id;
            match &op {
                LogOp::Append { records, .. } => {
                    let h = &mut self.hosts[i];
                    assert_eq!(
                        records.first().map(|r| r.offset.0 as usize),
                        Some(h.log.len()),
                        "driver contract: appends continue the log"
                    );
                    h.log.extend(records.iter().cloned());
                    self.checker.on_append(self.now, id, records);
                }
                LogOp::Truncate { end, .. } => {
                    let h = &mut self.hosts[i];
                    assert!(
                        *end >= h.log_start,
                        "driver contract: truncation above the start"
                    );
                    h.log.truncate(end.0 as usize);
                }
                LogOp::Purge { start, .. } => {
                    let h = &mut self.hosts[i];
                    let covered = h
                        .snapshots
                        .last()
                        .is_some_and(|(m, _)| *start <= m.id.offset);
                    if !covered {
                        let msg = format!("{id} purged its log to {start} beyond its snapshot");
                        self.checker.report(self.now, msg);
                    }
                    self.hosts[i].log_start = *start;
                }
                LogOp::Reset { start, .. } => {
                    let ghost = self.committed_prefix(start.offset);
                    let h = &mut self.hosts[i];
                    h.log = ghost;
                    h.log_start = start.offset;
                }
            }
            self.hosts[i].pending_ops.push_back(op);
        }
        if let Some(id) = out.restore.take() {
            self.restore_snapshot(i, id);
        }
        let snapshot_ops: Vec<SnapshotOp> = out.snapshot.drain(..).collect();
        for op in snapshot_ops {
            if let Some(input) = self.snapshot_op(i, op) {
                follow_up.push(input);
            }
        }
        self.schedule_syncs(i);
        let messages: Vec<Outgoing> = out.messages.drain(..).collect();
        for msg in messages {
            self.send(i, msg);
        }
        if let Some(hwm) = out.committed.take() {
            let h = &self.hosts[i];
            let epoch = h
                .replica
                .as_ref()
                .map_or(Epoch::ZERO, |r| r.election_state().epoch);
            let prev = h.last_hwm;
            self.checker
                .on_commit(self.now, h.id, epoch, prev, hwm, &h.log);
            self.hosts[i].last_hwm = hwm;
            self.apply_kv(i, hwm);
            self.resolve_proposals();
            // The simulated state machine applies at once.
            follow_up.push(Input::Applied(hwm));
            if let Some(id) = self.maybe_take_snapshot(i) {
                follow_up.push(Input::SnapshotTaken(id));
            }
        }
        for ev in out.events.drain(..) {
            self.note_event(i, ev);
        }
        for input in follow_up {
            let now = self.local_time(i);
            if let Some(replica) = self.hosts[i].replica.as_mut() {
                replica.step(now, input, out);
            }
        }
        if !out.is_empty() {
            self.handle_outputs(i, out);
        }
    }

    fn note_event(&mut self, i: usize, ev: Event) {
        let id = self.hosts[i].id;
        let t = self.now.as_millis();
        match ev {
            Event::RoleChanged {
                role,
                epoch,
                leader,
            } => {
                let leader = leader.map_or("-".to_string(), |l| l.to_string());
                self.trace
                    .push(format!("{t}ms {id} {role} {epoch} leader={leader}"));
                if role == Role::Leader {
                    let log = std::mem::take(&mut self.hosts[i].log);
                    self.checker.on_leader(self.now, id, epoch, &log);
                    self.hosts[i].log = log;
                }
            }
            Event::ProposalsDropped { epoch, from } => {
                self.trace.push(format!(
                    "{t}ms {id} dropped proposals of {epoch} from {from}"
                ));
            }
            Event::InconsistentLeader {
                from,
                epoch,
                claimed,
            } => {
                let msg = format!("{id} heard from {from} that {claimed:?} leads {epoch}");
                self.checker.report(self.now, msg);
            }
            Event::ReadReady { id: read, offset } => self.read_ready(i, read, offset),
            Event::ReadFailed { id: read, error } => self.read_failed(i, read, error),
            Event::TransferEnded { to, result } => {
                self.trace
                    .push(format!("{t}ms {id} transfer to {to} ended: {result:?}"));
            }
        }
    }

    /// Applies newly committed records to the reference map and turns the proposals they
    /// resolve into completed operations; proposals overtaken by other records were lost.
    fn resolve_proposals(&mut self) {
        let committed = self.checker.committed();
        while self.reference_applied < committed.len() {
            let rec = &committed[self.reference_applied];
            self.reference_applied += 1;
            let Some(cmd) = KvCommand::decode(&rec.payload) else {
                continue;
            };
            let kind = cmd.apply(&mut self.reference);
            if let Some((payload, call)) = self.proposals.remove(&(rec.offset, rec.epoch)) {
                if payload == rec.payload {
                    self.acknowledged += 1;
                    let (call, ret) = (call.as_nanos() as u64, self.now.as_nanos() as u64);
                    self.history.push(LinOp {
                        key: cmd.key(),
                        call,
                        ret,
                        kind,
                    });
                }
            }
        }
        let end = Offset(committed.len() as u64);
        self.proposals.retain(|(offset, _), _| *offset >= end);
    }

    fn send(&mut self, i: usize, msg: Outgoing) {
        let h = &self.hosts[i];
        let (from, incarnation) = (h.id, h.incarnation);
        let durable = h.election.unwrap_or_default();
        self.checker.on_send(self.now, from, durable, &msg);
        match msg {
            Outgoing::Request { to, id, request } => {
                if matches!(request, Request::ReadIndex(_)) {
                    self.hosts[i].read_index_sent += 1;
                }
                self.hosts[i].outstanding.insert(id, to);
                let timeout = self.hosts[i].cfg.request_timeout;
                self.schedule(
                    self.now + timeout,
                    Ev::Timeout {
                        host: from,
                        incarnation,
                        id,
                    },
                );
                self.net_send(from, to, incarnation, Wire::Request { id, request });
            }
            Outgoing::Response {
                id,
                mut response,
                fill,
                ..
            } => {
                let Some(inbound) = self.hosts[i].inbound.remove(&id.0) else {
                    return;
                };
                if let (Some(candidate), Response::Vote(v)) = (inbound.standard_vote, &response) {
                    if v.granted {
                        self.checker
                            .on_standard_grant(self.now, from, candidate, v.epoch, durable);
                    }
                }
                match (fill, &mut response) {
                    (Some(Fill::Records(range)), Response::Fetch(f)) => {
                        let h = &self.hosts[i];
                        if range.from < h.log_start {
                            let msg = format!("{from} asked to serve purged records {range:?}");
                            self.checker.report(self.now, msg);
                        }
                        f.records = read_range(&h.log, range);
                    }
                    (
                        Some(Fill::SnapshotChunk {
                            id,
                            position,
                            max_bytes,
                        }),
                        Response::FetchSnapshot(r),
                    ) => {
                        self.fill_chunk(i, id, position, max_bytes, r);
                    }
                    _ => {}
                }
                let wire = Wire::Response {
                    id: inbound.id,
                    response,
                };
                self.net_send(from, inbound.from, inbound.incarnation, wire);
            }
        }
    }

    fn net_send(&mut self, from: ReplicaId, to: ReplicaId, incarnation: u32, wire: Wire) {
        if self.blocked.contains(&(from, to)) {
            return;
        }
        if self.held_links.contains(&(from, to)) {
            self.held_messages.push((from, to, incarnation, wire));
            return;
        }
        let f = &self.opts.faults;
        if self.faults_on && self.rng.chance(f.drop) {
            return;
        }
        let (lo, hi) = (f.delay_min.as_nanos() as u64, f.delay_max.as_nanos() as u64);
        let dup = self.faults_on && self.rng.chance(f.duplicate);
        let delay = Duration::from_nanos(self.rng.range(lo, hi));
        if dup {
            let again = Duration::from_nanos(self.rng.range(lo, hi));
            let copy = match &wire {
                Wire::Request { id, request } => Wire::Request {
                    id: *id,
                    request: request.clone(),
                },
                Wire::Response { id, response } => Wire::Response {
                    id: *id,
                    response: response.clone(),
                },
            };
            self.schedule(
                self.now + again,
                Ev::Deliver {
                    to,
                    from,
                    incarnation,
                    wire: copy,
                },
            );
        }
        self.schedule(
            self.now + delay,
            Ev::Deliver {
                to,
                from,
                incarnation,
                wire,
            },
        );
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
        let voters = self.opts.voters as usize;
        let logs: Vec<&[Record]> = self.hosts[..voters]
            .iter()
            .map(|h| h.durable_log.as_slice())
            .collect();
        let mut checker = std::mem::take(&mut self.checker);
        checker.check_majority_durable(self.now, &logs, self.majority);
        self.checker = checker;
    }

    /// One random client operation: a write or compare-and-set through the leader, or a read
    /// in a random mode on a random replica.
    fn client_op(&mut self) {
        let key = self.rng.range(1, 8);
        let roll = self.rng.below(100);
        if roll < 45 {
            let Some(l) = self.leader() else { return };
            let value = self.next_payload;
            self.next_payload += 1;
            let cmd = if roll < 30 {
                KvCommand::Write { key, value }
            } else {
                let expected = self.reference.get(&key).copied().unwrap_or(0);
                let expected = if self.rng.chance(0.7) {
                    expected
                } else {
                    value + 1
                };
                KvCommand::Cas {
                    key,
                    expected,
                    new: value,
                }
            };
            let i = self.index(ReplicaId(l));
            let _ = self.propose_on(i, cmd.encode());
            return;
        }
        let i = self.rng.below(self.hosts.len() as u64) as usize;
        if self.hosts[i].replica.is_none() {
            return;
        }
        if roll < 55 {
            self.sequential_read(i);
            return;
        }
        let mode = if self.opts.lease_reads && self.rng.chance(0.5) {
            ReadMode::Lease
        } else {
            ReadMode::Linearizable
        };
        let id = self.next_read;
        self.next_read += 1;
        self.reads
            .insert(id, (i, self.hosts[i].incarnation, key, self.now));
        let deadline = self.local_time(i).plus(self.hosts[i].cfg.read_timeout);
        self.step_host(
            i,
            Input::Read {
                id: ReadId(id),
                mode,
                deadline,
            },
        );
    }

    /// A sequential read promises a committed prefix, monotonic per replica.
    fn sequential_read(&mut self, i: usize) {
        let h = &self.hosts[i];
        let at = h.kv_applied;
        if at.0 as usize > self.checker.committed().len() {
            let msg = format!(
                "S14 sequential read on {} at {at} beyond the committed log",
                h.id
            );
            self.checker.report(self.now, msg);
        }
        let prev = self
            .sequential
            .insert((i, h.incarnation), at)
            .unwrap_or_default();
        if at < prev {
            let msg = format!("sequential reads on {} went back from {prev} to {at}", h.id);
            self.checker.report(self.now, msg);
        }
    }

    fn read_ready(&mut self, i: usize, read: ReadId, offset: Offset) {
        let Some((host, incarnation, key, call)) = self.reads.remove(&read.0) else {
            return;
        };
        let h = &self.hosts[i];
        if host != i || incarnation != h.incarnation {
            return;
        }
        if h.kv_applied < offset {
            let msg = format!("{} served a read at {offset} before applying it", h.id);
            self.checker.report(self.now, msg);
        }
        let value = h.kv.get(&key).copied().unwrap_or(0);
        if let Some(slot) = self.scripted.get_mut(&read.0) {
            *slot = Some(Ok((offset, value)));
        }
        let (call, ret) = (call.as_nanos() as u64, self.now.as_nanos() as u64);
        self.history.push(LinOp {
            key,
            call,
            ret,
            kind: OpKind::Read(value),
        });
    }

    fn read_failed(&mut self, _i: usize, read: ReadId, error: ReadFailure) {
        self.reads.remove(&read.0);
        if let Some(slot) = self.scripted.get_mut(&read.0) {
            *slot = Some(Err(error));
        }
    }

    /// Writes `value` (non-zero) to `key` through replica `id` (which must lead).
    pub fn write_kv(
        &mut self,
        id: u32,
        key: u64,
        value: u64,
    ) -> Result<OffsetAndEpoch, ProposeError> {
        let i = self.index(ReplicaId(id));
        self.propose_on(i, KvCommand::Write { key, value }.encode())
    }

    /// Starts a read of `key` on replica `id` in `mode`; its outcome appears in
    /// [`Cluster::read_outcome`]. Returns the read's handle.
    pub fn start_read(&mut self, id: u32, key: u64, mode: ReadMode) -> u64 {
        let i = self.index(ReplicaId(id));
        let handle = self.next_read;
        self.next_read += 1;
        self.reads
            .insert(handle, (i, self.hosts[i].incarnation, key, self.now));
        self.scripted.insert(handle, None);
        let deadline = self.local_time(i).plus(self.hosts[i].cfg.read_timeout);
        self.step_host(
            i,
            Input::Read {
                id: ReadId(handle),
                mode,
                deadline,
            },
        );
        handle
    }

    /// The outcome of a read started with [`Cluster::start_read`]: none while pending, else the
    /// read offset and the value read (0 for absent), or why it failed.
    pub fn read_outcome(&self, handle: u64) -> Option<ReadOutcome> {
        self.scripted.get(&handle).copied().flatten()
    }

    /// ReadIndex requests this replica has sent.
    pub fn read_index_requests(&self, id: u32) -> u64 {
        self.hosts[self.index(ReplicaId(id))].read_index_sent
    }

    fn apply_kv(&mut self, i: usize, hwm: Offset) {
        let h = &mut self.hosts[i];
        assert!(
            h.kv_applied >= h.log_start || h.kv_applied >= hwm,
            "the state machine never needs purged records"
        );
        while h.kv_applied < hwm {
            let rec = &h.log[h.kv_applied.0 as usize];
            h.since_snapshot += 1;
            if let Some(cmd) = KvCommand::decode(&rec.payload) {
                cmd.apply(&mut h.kv);
            }
            h.kv_applied = h.kv_applied.next();
        }
    }

    /// The committed log up to `end`, as the checker knows it (a snapshot's content).
    fn committed_prefix(&self, end: Offset) -> Vec<Record> {
        let committed = self.checker.committed();
        assert!(
            end.0 as usize <= committed.len(),
            "a snapshot covers only committed records"
        );
        committed[..end.0 as usize].to_vec()
    }

    /// The key-value state after applying the committed log up to `end`.
    fn reference_at(&self, end: Offset) -> BTreeMap<u64, u64> {
        let mut kv = BTreeMap::new();
        for rec in &self.checker.committed()[..end.0 as usize] {
            if let Some(cmd) = KvCommand::decode(&rec.payload) {
                cmd.apply(&mut kv);
            }
        }
        kv
    }

    /// Takes a local snapshot when the seed's interval has passed.
    fn maybe_take_snapshot(&mut self, i: usize) -> Option<OffsetAndEpoch> {
        let every = self.opts.faults.snapshot_every;
        let h = &self.hosts[i];
        if every == 0 || h.since_snapshot < every || h.kv_applied == Offset::ZERO {
            return None;
        }
        let epoch = h.log[h.kv_applied.0 as usize - 1].epoch;
        let id = OffsetAndEpoch::new(h.kv_applied, epoch);
        if h.snapshots.last().is_some_and(|(m, _)| m.id >= id) {
            return None;
        }
        let data = encode_kv(&h.kv);
        let h = &mut self.hosts[i];
        h.since_snapshot = 0;
        h.snapshots.push((SnapshotMeta::of(id, &data), data));
        let excess = h.snapshots.len().saturating_sub(2);
        h.snapshots.drain(..excess);
        Some(id)
    }

    /// Restores the state machine from an installed snapshot and checks it against the
    /// committed log.
    fn restore_snapshot(&mut self, i: usize, id: OffsetAndEpoch) {
        let h = &self.hosts[i];
        let who = h.id;
        if h.replica.as_ref().is_some_and(|r| r.role() == Role::Leader) {
            self.checker.report(
                self.now,
                format!("{who} installed a snapshot while leading"),
            );
        }
        let Some((_, data)) = h.snapshots.iter().find(|(m, _)| m.id == id) else {
            self.checker
                .report(self.now, format!("{who} restores {id} it does not hold"));
            return;
        };
        let kv = decode_kv(data);
        if kv != self.reference_at(id.offset) {
            let msg = format!("{who} installed snapshot {id} whose state differs from the log's");
            self.checker.report(self.now, msg);
        }
        let t = self.now.as_millis();
        self.trace
            .push(format!("{t}ms {who} installed snapshot {id}"));
        self.installs += 1;
        let h = &mut self.hosts[i];
        h.kv = kv;
        h.kv_applied = id.offset;
        h.since_snapshot = 0;
    }

    /// The simulated snapshot store's part of a download.
    fn snapshot_op(&mut self, i: usize, op: SnapshotOp) -> Option<Input> {
        let h = &mut self.hosts[i];
        match op {
            SnapshotOp::Write { id, position, data } => {
                if position == 0 {
                    h.partial = Some((id, Vec::new()));
                }
                match h.partial.as_mut() {
                    Some((pid, bytes)) if *pid == id && bytes.len() as u64 == position => {
                        bytes.extend_from_slice(&data);
                    }
                    _ => {
                        let msg = format!("{} wrote a chunk of {id} out of order", h.id);
                        self.checker.report(self.now, msg);
                    }
                }
                None
            }
            SnapshotOp::Finish { id, size, checksum } => {
                let verified = match h.partial.take() {
                    Some((pid, bytes)) if pid == id => {
                        let meta = SnapshotMeta::of(id, &bytes);
                        let ok = meta.size == size && meta.checksum == checksum;
                        if ok {
                            h.snapshots.retain(|(m, _)| m.id != id);
                            h.snapshots.push((meta, Bytes::from(bytes)));
                            h.snapshots.sort_by_key(|(m, _)| m.id);
                            let excess = h.snapshots.len().saturating_sub(2);
                            h.snapshots.drain(..excess);
                        }
                        ok
                    }
                    _ => false,
                };
                Some(Input::SnapshotDownloaded { id, verified })
            }
        }
    }

    /// Serves a snapshot chunk (sometimes corrupted, when the seed says so).
    fn fill_chunk(
        &mut self,
        i: usize,
        id: OffsetAndEpoch,
        position: u64,
        max_bytes: u32,
        r: &mut crate::message::FetchSnapshotResponse,
    ) {
        let found = self.hosts[i]
            .snapshots
            .iter()
            .find(|(m, _)| m.id == id)
            .cloned();
        let Some((meta, data)) = found else {
            r.error = Some(crate::message::ErrorCode::SnapshotNotFound);
            return;
        };
        if position > meta.size {
            r.error = Some(crate::message::ErrorCode::PositionOutOfRange);
            return;
        }
        r.size = meta.size;
        r.checksum = meta.checksum;
        let mut chunk = crate::mem::storage::snapshot_chunk(&data, position, max_bytes).to_vec();
        if !chunk.is_empty() && self.faults_on && self.rng.chance(self.opts.faults.corrupt_chunk) {
            chunk[0] ^= 0x40;
        }
        r.data = Bytes::from(chunk);
    }

    /// Checks every recorded client operation for linearizability (S13).
    pub fn check_linearizability(&mut self) {
        match linearizability::check(&self.history, 100_000) {
            Verdict::Linearizable => {}
            Verdict::Violation(msg) => self.checker.report(self.now, msg),
            Verdict::Inconclusive(_) => self.inconclusive += 1,
        }
    }

    /// Completed client operations so far.
    pub fn history(&self) -> &[LinOp] {
        &self.history
    }

    fn fault_interval(&mut self, mean: Duration) -> Duration {
        if mean.is_zero() {
            return Duration::MAX / 4;
        }
        Duration::from_nanos(
            self.rng
                .range(mean.as_nanos() as u64 / 2, mean.as_nanos() as u64 * 3 / 2),
        )
    }

    fn transfer_interval(&mut self) -> Duration {
        let mean = self.opts.faults.transfer_every.as_nanos() as u64;
        if mean == 0 {
            return Duration::MAX / 4;
        }
        Duration::from_nanos(self.transfer_rng.range(mean / 2, mean * 3 / 2))
    }

    fn inject_faults(&mut self) {
        if self.now >= self.next_transfer {
            self.next_transfer = self.now + self.transfer_interval();
            if let Some(l) = self.leader() {
                let to = self.transfer_rng.range(1, u64::from(self.opts.voters)) as u32;
                // Refusals (not a voter, already transferring) are part of what is exercised.
                let result = self.transfer_leadership(l, to);
                let t = self.now.as_millis();
                self.trace
                    .push(format!("{t}ms r{l} asked to transfer to r{to}: {result:?}"));
            }
        }
        let n = self.hosts.len() as u32;
        if self.now >= self.next_partition {
            self.next_partition = self.now + self.fault_interval(self.opts.faults.partition_every);
            self.heal();
            match self.rng.below(5) {
                0 => {}
                1 => {
                    let r = self.rng.range(1, n as u64) as u32;
                    self.isolate(r);
                }
                2 => {
                    let group: Vec<u32> = (1..=n).filter(|_| self.rng.chance(0.5)).collect();
                    for a in 1..=n {
                        for b in 1..=n {
                            if group.contains(&a) != group.contains(&b) {
                                self.block(a, b);
                            }
                        }
                    }
                }
                3 => {
                    let a = self.rng.range(1, n as u64) as u32;
                    let b = self.rng.range(1, n as u64) as u32;
                    if a != b {
                        self.block(a, b);
                    }
                }
                _ => {
                    // A voter that reaches the others but not the leader.
                    if let Some(l) = self.leader() {
                        let f = self.rng.range(1, self.opts.voters as u64) as u32;
                        if f != l {
                            self.cut(l, f);
                        }
                    }
                }
            }
        }
        if self.now >= self.next_crash {
            self.next_crash = self.now + self.fault_interval(self.opts.faults.crash_every);
            let victim = self.rng.below(n as u64) as usize;
            if self.hosts[victim].replica.is_some() {
                self.crash_host(victim);
                let down = self
                    .rng
                    .range(1, self.opts.faults.downtime_max.as_nanos() as u64);
                let host = self.hosts[victim].id;
                self.schedule(self.now + Duration::from_nanos(down), Ev::Restart { host });
            }
        }
    }
}

/// The simulated key-value commands carried in record payloads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum KvCommand {
    Write { key: u64, value: u64 },
    Cas { key: u64, expected: u64, new: u64 },
}

impl KvCommand {
    fn key(&self) -> u64 {
        match self {
            KvCommand::Write { key, .. } | KvCommand::Cas { key, .. } => *key,
        }
    }

    fn encode(&self) -> Bytes {
        let mut v = Vec::with_capacity(25);
        match self {
            KvCommand::Write { key, value } => {
                v.push(b'w');
                v.extend_from_slice(&key.to_le_bytes());
                v.extend_from_slice(&value.to_le_bytes());
            }
            KvCommand::Cas { key, expected, new } => {
                v.push(b'c');
                v.extend_from_slice(&key.to_le_bytes());
                v.extend_from_slice(&expected.to_le_bytes());
                v.extend_from_slice(&new.to_le_bytes());
            }
        }
        Bytes::from(v)
    }

    fn decode(b: &[u8]) -> Option<KvCommand> {
        let word = |i: usize| {
            b.get(i..i + 8)
                .map(|s| u64::from_le_bytes(s.try_into().expect("8")))
        };
        match b.first()? {
            b'w' if b.len() == 17 => Some(KvCommand::Write {
                key: word(1)?,
                value: word(9)?,
            }),
            b'c' if b.len() == 25 => Some(KvCommand::Cas {
                key: word(1)?,
                expected: word(9)?,
                new: word(17)?,
            }),
            _ => None,
        }
    }

    /// Applies the command and describes what it did, as a history operation.
    fn apply(&self, kv: &mut BTreeMap<u64, u64>) -> OpKind {
        match *self {
            KvCommand::Write { key, value } => {
                kv.insert(key, value);
                OpKind::Write(value)
            }
            KvCommand::Cas { key, expected, new } => {
                let ok = kv.get(&key).copied().unwrap_or(0) == expected;
                if ok {
                    kv.insert(key, new);
                }
                OpKind::Cas { expected, new, ok }
            }
        }
    }
}

/// What a log store would report on opening this log, whose records below `start` are gone.
fn log_state(log: &[Record], start: Offset) -> LogState {
    let mut epochs: Vec<EpochStart> = Vec::new();
    for r in &log[start.0 as usize..] {
        if epochs.last().is_none_or(|e| e.epoch != r.epoch) {
            epochs.push(EpochStart {
                epoch: r.epoch,
                start: r.offset,
            });
        }
    }
    let end = OffsetAndEpoch::new(
        Offset(log.len() as u64),
        log.last().map_or(Epoch::ZERO, |r| r.epoch),
    );
    let start_epoch = match start.0 {
        0 => Epoch::ZERO,
        s => log[s as usize - 1].epoch,
    };
    LogState {
        start,
        end,
        epochs,
        start_epoch,
    }
}

/// The simulated state machine's snapshot encoding: the key-value pairs, in key order.
fn encode_kv(kv: &BTreeMap<u64, u64>) -> Bytes {
    let mut v = Vec::with_capacity(kv.len() * 16);
    for (k, val) in kv {
        v.extend_from_slice(&k.to_le_bytes());
        v.extend_from_slice(&val.to_le_bytes());
    }
    Bytes::from(v)
}

fn decode_kv(data: &[u8]) -> BTreeMap<u64, u64> {
    data.chunks_exact(16)
        .map(|c| {
            let k = u64::from_le_bytes(c[..8].try_into().expect("8 bytes"));
            let v = u64::from_le_bytes(c[8..].try_into().expect("8 bytes"));
            (k, v)
        })
        .collect()
}

/// The driver's part of a fetch response: records of the range, within the byte limit.
fn read_range(log: &[Record], range: crate::protocol::RecordRange) -> Vec<Record> {
    let end = (range.to.0 as usize).min(log.len());
    let mut bytes = 0usize;
    let mut out = Vec::new();
    for r in log.iter().take(end).skip(range.from.0 as usize) {
        bytes += r.encoded_len();
        if !out.is_empty() && bytes > range.max_bytes as usize {
            break;
        }
        out.push(r.clone());
    }
    out
}
