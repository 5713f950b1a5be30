//! The model the explorer searches: the real [`Replica`] of each voter with simple durable
//! storage, the multiset of messages in flight and one model clock, and the actions that move
//! it. The model plays the driver's part of the contract on [`crate::protocol`], as the random
//! simulator's hosts do (`sim/cluster/host.rs`), without random choices: every choice the
//! simulator draws is an action here.
//!
//! Storage: log operations and election-state persists take effect on the replica's visible log
//! at once and become durable only with an explicit [`Action::Sync`] (one action completes both
//! the outstanding persist and every outstanding log operation). A crash loses everything not
//! synced; torn writes are not modelled.
//!
//! Network: a request is answered by the driver of its receiver with an id of the driver's
//! choosing; here that id encodes the requester, its incarnation and the request's own id, so
//! that a response finds its way back without driver state. A response reaching a later
//! incarnation of its requester is discarded, as the simulator does. A request consumed without
//! an answer (its receiver crashed, or it was dropped) times out with [`Action::Timeout`].

use std::collections::hash_map::DefaultHasher;
use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::time::Duration;

use bytes::Bytes;

use crate::config::{Config, ValidatedConfig};
use crate::message::{Request, RequestId, Response};
use crate::protocol::{
    Event, Fill, Input, LogOp, LogSeq, Outgoing, Outputs, PersistSeq, ReadId, ReadMode, Replica,
    VoterHistory,
};
use crate::sim::checks::Checker;
use crate::sim::cluster::{log_state, read_range};
use crate::types::{ElectionState, Instant, Offset, Record, ReplicaId, Role};

/// Bounds on the actions that add to a state rather than move it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Budget {
    /// Crash-and-restart of a replica.
    pub crashes: u32,
    /// Client proposals on a leader.
    pub proposals: u32,
    /// Duplicated messages.
    pub duplicates: u32,
    /// Client linearizable reads on any replica.
    pub reads: u32,
}

/// One move of the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Deliver the message at this index of the network.
    Deliver(usize),
    /// Lose the message at this index.
    Drop(usize),
    /// Copy the message at this index (bounded by the budget).
    Duplicate(usize),
    /// Advance the clock to this replica's next deadline (if later) and tick it.
    Timer(usize),
    /// Make this replica's outstanding persist and log operations durable.
    Sync(usize),
    /// Crash this replica and restart it from its durable state (bounded).
    Crash(usize),
    /// A client proposal on this replica, a leader (bounded).
    Propose(usize),
    /// A request of this replica consumed without an answer fails.
    Timeout(usize, RequestId),
    /// A client starts a linearizable read on this replica (bounded).
    Read(usize),
}

#[derive(Clone, Debug)]
enum Body {
    Request { id: RequestId, request: Request },
    Response { id: RequestId, response: Response },
}

/// A message in flight. `incarnation` is the requester's, for requests and responses alike.
#[derive(Clone, Debug)]
pub(super) struct Msg {
    from: ReplicaId,
    to: ReplicaId,
    incarnation: u32,
    body: Body,
}

impl Msg {
    /// The requester's index and its id of the request.
    fn request_of(&self) -> (usize, RequestId) {
        match &self.body {
            Body::Request { id, .. } => (idx(self.from), *id),
            Body::Response { id, .. } => (idx(self.to), *id),
        }
    }
}

/// One replica and what its driver keeps.
#[derive(Clone, Debug)]
pub(super) struct Node {
    pub(super) replica: Replica,
    incarnation: u32,
    election: Option<ElectionState>,
    election_pending: Option<(PersistSeq, ElectionState)>,
    log: Vec<Record>,
    durable_log: Vec<Record>,
    log_pending: Option<LogSeq>,
    last_hwm: Offset,
    /// Requests sent and not yet answered or failed, by id, with their peer.
    outstanding: BTreeMap<RequestId, ReplicaId>,
}

/// One state of the model.
#[derive(Clone, Debug)]
pub struct State {
    now: Instant,
    pub(super) nodes: Vec<Node>,
    net: Vec<Msg>,
    used: Budget,
    pub(super) checker: Checker,
    /// Reads in progress: id, replica, and the committed prefix when the read started, which
    /// its read offset must cover (the read rule).
    reads: Vec<(ReadId, usize, Offset)>,
}

fn idx(id: ReplicaId) -> usize {
    id.0 as usize - 1
}

/// The id a receiving driver gives an inbound request: requester, its incarnation, whether it
/// is a standard vote (to check the grant was durable), and the requester's id.
fn inbound_id(from: ReplicaId, incarnation: u32, standard_vote: bool, id: RequestId) -> RequestId {
    assert!(id.0 < 1 << 32 && incarnation < 1 << 15);
    RequestId(
        (u64::from(from.0) << 48)
            | (u64::from(incarnation) << 33)
            | (u64::from(standard_vote) << 32)
            | id.0,
    )
}

fn split_inbound(id: RequestId) -> (ReplicaId, u32, bool, RequestId) {
    (
        ReplicaId((id.0 >> 48) as u32),
        ((id.0 >> 33) & 0x7FFF) as u32,
        (id.0 >> 32) & 1 == 1,
        RequestId(id.0 & 0xFFFF_FFFF),
    )
}

/// The fixed part of an exploration: the replicas' configurations and the budget.
pub struct Model {
    cfgs: Vec<ValidatedConfig>,
    budget: Budget,
}

/// Where the clock starts: far from zero, so that no instant the core computes saturates.
const EPOCH_OF_TIME: Instant = Instant(10_000_000_000);

impl Model {
    /// A model of `voters` voters (ids `1..=voters`), with `planted` on every replica.
    pub fn new(voters: u32, planted: Option<crate::planted::Planted>, budget: Budget) -> Model {
        Model::with_unsafe_reads(voters, planted, budget, false)
    }

    /// As [`Model::new`]; `unsafe_reads` is the negative control of the read rule: followers
    /// serve linearizable reads without asking the leader.
    pub fn with_unsafe_reads(
        voters: u32,
        planted: Option<crate::planted::Planted>,
        budget: Budget,
        unsafe_reads: bool,
    ) -> Model {
        let ids: Vec<ReplicaId> = (1..=voters).map(ReplicaId).collect();
        let cfgs = ids
            .iter()
            .map(|id| {
                // The simulator's settings (sim/cluster/mod.rs).
                let mut cfg = Config::new(*id, ids.iter().copied());
                cfg.directory = Some(crate::types::DirectoryId((u128::from(id.0) << 64) | 1));
                cfg.election_timeout = Duration::from_millis(100);
                cfg.fetch_timeout = Duration::from_millis(300);
                cfg.fetch_max_wait = Duration::from_millis(50);
                cfg.request_timeout = Duration::from_millis(300);
                cfg.retry_backoff = Duration::from_millis(10);
                cfg.election_backoff_max = Duration::from_millis(100);
                cfg.append_linger = Duration::from_millis(1);
                cfg.read_timeout = Duration::from_millis(300);
                cfg.test_planted = planted;
                cfg.test_unsafe_reads = unsafe_reads;
                cfg.validate()
                    .expect("the explorer's configuration is valid")
            })
            .collect();
        Model { cfgs, budget }
    }

    /// Every replica started on empty storage.
    pub fn cold(&self) -> State {
        let n = self.cfgs.len();
        let mut st = State {
            now: EPOCH_OF_TIME,
            nodes: Vec::with_capacity(n),
            net: Vec::new(),
            used: Budget::default(),
            checker: Checker::default(),
            reads: Vec::new(),
        };
        for i in 0..n {
            let replica = self.boot(i, 0, None, &[], st.now);
            st.nodes.push(Node {
                replica,
                incarnation: 0,
                election: None,
                election_pending: None,
                log: Vec::new(),
                durable_log: Vec::new(),
                log_pending: None,
                last_hwm: Offset::ZERO,
                outstanding: BTreeMap::new(),
            });
        }
        for i in 0..n {
            self.step(&mut st, i, Input::Tick);
        }
        st
    }

    fn boot(
        &self,
        i: usize,
        incarnation: u32,
        election: Option<ElectionState>,
        log: &[Record],
        now: Instant,
    ) -> Replica {
        let cfg = self.cfgs[i].clone();
        let mut voters = VoterHistory::new(cfg.bootstrap_voters());
        for r in log.iter().filter(|r| r.kind == crate::RecordKind::Voters) {
            let (set, _) = crate::codec::decode_voters(&r.payload).expect("the core wrote it");
            voters.push(r.offset, set);
        }
        let seed = 0x5EED_0000 + u64::from(incarnation);
        Replica::new(
            cfg,
            election,
            &log_state(log, Offset::ZERO),
            None,
            voters,
            seed,
            now,
        )
    }

    /// The actions possible from `st`, in a fixed order.
    pub fn actions(&self, st: &State) -> Vec<Action> {
        let mut acts = Vec::new();
        for k in 0..st.net.len() {
            acts.push(Action::Deliver(k));
        }
        for k in 0..st.net.len() {
            acts.push(Action::Drop(k));
            if st.used.duplicates < self.budget.duplicates {
                acts.push(Action::Duplicate(k));
            }
        }
        for (i, n) in st.nodes.iter().enumerate() {
            if n.replica.next_deadline() != Instant::NEVER {
                acts.push(Action::Timer(i));
            }
            if n.election_pending.is_some() || n.log_pending.is_some() {
                acts.push(Action::Sync(i));
            }
            if st.used.crashes < self.budget.crashes {
                acts.push(Action::Crash(i));
            }
            if st.used.proposals < self.budget.proposals && n.replica.role() == Role::Leader {
                acts.push(Action::Propose(i));
            }
            if st.used.reads < self.budget.reads {
                acts.push(Action::Read(i));
            }
            for id in n.outstanding.keys() {
                let pending = st
                    .net
                    .iter()
                    .any(|m| m.request_of() == (i, *id) && m.incarnation == n.incarnation);
                if !pending {
                    acts.push(Action::Timeout(i, *id));
                }
            }
        }
        acts
    }

    /// What `a` does from `st`, for traces.
    pub fn describe(&self, st: &State, a: Action) -> String {
        let msg = |k: usize| {
            let m = &st.net[k];
            let body = match &m.body {
                Body::Request { id, request } => format!("request {} {request:?}", id.0),
                Body::Response { id, response } => format!("response {} {response:?}", id.0),
            };
            format!("{}->{} {body}", m.from, m.to)
        };
        let t = st.now.0.saturating_sub(EPOCH_OF_TIME.0) / 1_000_000;
        let what = match a {
            Action::Deliver(k) => format!("deliver {}", msg(k)),
            Action::Drop(k) => format!("drop {}", msg(k)),
            Action::Duplicate(k) => format!("duplicate {}", msg(k)),
            Action::Timer(i) => {
                let d = st.nodes[i].replica.next_deadline();
                let at = d.0.max(st.now.0).saturating_sub(EPOCH_OF_TIME.0) / 1_000_000;
                format!("timer of {} (at {at}ms)", i + 1)
            }
            Action::Sync(i) => format!("sync {}", i + 1),
            Action::Crash(i) => format!("crash and restart {}", i + 1),
            Action::Propose(i) => format!("propose on {}", i + 1),
            Action::Timeout(i, id) => format!("request {} of {} times out", id.0, i + 1),
            Action::Read(i) => format!("read on {}", i + 1),
        };
        format!("{t}ms: {what}")
    }

    /// Applies `a` to `st`; violations land in `st.checker`.
    pub fn apply(&self, st: &mut State, a: Action) {
        match a {
            Action::Deliver(k) => {
                let m = st.net.remove(k);
                let to = idx(m.to);
                match m.body {
                    Body::Request { id, request } => {
                        // D2 is checked only when no timer of the receiver is due: the step
                        // that handles the request also fires due timers, which may change it.
                        let pre_vote = matches!(&request, Request::Vote(v) if v.pre_vote)
                            && st.nodes[to].replica.next_deadline() > st.now;
                        let standard = matches!(&request, Request::Vote(v) if !v.pre_vote);
                        let before = st.nodes[to].replica.election_state();
                        let id = inbound_id(m.from, m.incarnation, standard, id);
                        let from = m.from;
                        self.step(st, to, Input::Request { from, id, request });
                        let after = st.nodes[to].replica.election_state();
                        if pre_vote && after != before {
                            let msg =
                                format!("D2 a pre-vote changed {}: {before} -> {after}", m.to);
                            st.checker.report(at(st.now), msg);
                        }
                    }
                    Body::Response { id, response } => {
                        let n = &mut st.nodes[to];
                        if n.incarnation == m.incarnation && n.outstanding.remove(&id).is_some() {
                            let from = m.from;
                            self.step(st, to, Input::Response { from, id, response });
                        }
                    }
                }
            }
            Action::Drop(k) => {
                st.net.remove(k);
            }
            Action::Duplicate(k) => {
                st.used.duplicates += 1;
                let m = st.net[k].clone();
                st.net.push(m);
            }
            Action::Timer(i) => {
                st.now = st.now.max(st.nodes[i].replica.next_deadline());
                self.step(st, i, Input::Tick);
            }
            Action::Sync(i) => {
                let n = &mut st.nodes[i];
                let log_seq = n.log_pending.take();
                n.durable_log.clone_from(&n.log);
                if let Some((seq, state)) = n.election_pending.take() {
                    n.election = Some(state);
                    let id = n.replica.id();
                    st.checker.on_durable_election(at(st.now), id, state);
                    self.step(st, i, Input::ElectionPersisted(seq));
                }
                if let Some(seq) = log_seq {
                    self.step(st, i, Input::LogPersisted(seq));
                }
            }
            Action::Crash(i) => {
                st.used.crashes += 1;
                let n = &mut st.nodes[i];
                n.incarnation += 1;
                n.replica = self.boot(i, n.incarnation, n.election, &n.durable_log, st.now);
                n.log.clone_from(&n.durable_log);
                n.election_pending = None;
                n.log_pending = None;
                n.last_hwm = Offset::ZERO;
                n.outstanding.clear();
                // Reads in progress on a crashed replica never complete.
                st.reads.retain(|r| r.1 != i);
                let id = n.replica.id();
                st.net
                    .retain(|m| !(m.to == id && matches!(m.body, Body::Response { .. })));
                self.step(st, i, Input::Tick);
            }
            Action::Propose(i) => {
                st.used.proposals += 1;
                let payload = Bytes::from(format!("p{}", st.used.proposals));
                let mut out = Outputs::default();
                let _ = st.nodes[i].replica.propose(st.now, payload, &mut out);
                self.handle(st, i, &mut out);
            }
            Action::Timeout(i, id) => {
                if let Some(to) = st.nodes[i].outstanding.remove(&id) {
                    self.step(st, i, Input::RequestFailed { to, id });
                }
            }
            Action::Read(i) => {
                st.used.reads += 1;
                let id = ReadId(u64::from(st.used.reads));
                let committed = Offset(st.checker.committed().len() as u64);
                st.reads.push((id, i, committed));
                let deadline = st.now.plus(self.cfgs[i].read_timeout);
                let mode = ReadMode::Linearizable;
                self.step(st, i, Input::Read { id, mode, deadline });
            }
        }
    }

    /// Steps replica `i` at the model's time and carries out its outputs.
    pub(super) fn step(&self, st: &mut State, i: usize, input: Input) {
        let mut out = Outputs::default();
        st.nodes[i].replica.step(st.now, input, &mut out);
        self.handle(st, i, &mut out);
    }

    fn handle(&self, st: &mut State, i: usize, out: &mut Outputs) {
        let now = at(st.now);
        let me = st.nodes[i].replica.id();
        if let Some(p) = out.persist.take() {
            st.nodes[i].election_pending = Some(p);
        }
        for op in out.log.drain(..) {
            let n = &mut st.nodes[i];
            match op {
                LogOp::Append { seq, records } => {
                    assert_eq!(
                        records.first().map(|r| r.offset.0 as usize),
                        Some(n.log.len()),
                        "driver contract: appends continue the log"
                    );
                    st.checker.on_append(now, me, &records);
                    n.log.extend(records);
                    n.log_pending = Some(seq);
                }
                LogOp::Truncate { seq, end } => {
                    n.log.truncate(end.0 as usize);
                    n.log_pending = Some(seq);
                }
                LogOp::Purge { .. } | LogOp::Reset { .. } => {
                    st.checker
                        .report(now, format!("{me} asked for {op:?} with no snapshot"));
                }
            }
        }
        if !out.snapshot.is_empty() || out.restore.is_some() {
            st.checker
                .report(now, format!("{me} downloads a snapshot none took"));
            out.snapshot.clear();
            out.restore = None;
        }
        for msg in out.messages.drain(..) {
            self.send(st, i, msg);
        }
        let mut follow_up = None;
        if let Some(hwm) = out.committed.take() {
            let n = &st.nodes[i];
            let epoch = n.replica.election_state().epoch;
            let prev = n.last_hwm;
            st.checker.on_commit(now, me, epoch, prev, hwm, &n.log);
            // D4: a committed record is durable on a majority of the voters.
            let majority = st.nodes.len() / 2 + 1;
            for o in prev.0.min(hwm.0)..hwm.0.min(n.log.len() as u64) {
                let rec = &n.log[o as usize];
                let copies = st
                    .nodes
                    .iter()
                    .filter(|m| m.durable_log.get(o as usize) == Some(rec))
                    .count();
                if copies < majority {
                    let msg = format!(
                        "D4 {me} committed {} held durably by {copies} voter(s) only",
                        rec.id()
                    );
                    st.checker.report(now, msg);
                    break;
                }
            }
            st.nodes[i].last_hwm = hwm;
            follow_up = Some(Input::Applied(hwm));
        }
        for ev in out.events.drain(..) {
            match ev {
                Event::RoleChanged {
                    role: Role::Leader,
                    epoch,
                    ..
                } => st.checker.on_leader(now, me, epoch, &st.nodes[i].log),
                Event::InconsistentLeader {
                    from,
                    epoch,
                    claimed,
                } => {
                    let msg = format!("{me} heard from {from} that {claimed:?} leads {epoch}");
                    st.checker.report(now, msg);
                }
                Event::ReadReady { id, offset } => {
                    let Some(k) = st.reads.iter().position(|r| r.0 == id) else {
                        st.checker
                            .report(now, format!("{me} readied unknown read {id:?}"));
                        continue;
                    };
                    let (_, _, committed) = st.reads.remove(k);
                    if offset < committed {
                        let msg = format!(
                            "R1 read {} on {me} was served at {offset}, below {committed} committed before it started",
                            id.0
                        );
                        st.checker.report(now, msg);
                    }
                }
                Event::ReadFailed { id, .. } => st.reads.retain(|r| r.0 != id),
                _ => {}
            }
        }
        if let Some(input) = follow_up {
            self.step(st, i, input);
        }
    }

    fn send(&self, st: &mut State, i: usize, msg: Outgoing) {
        let now = at(st.now);
        let n = &mut st.nodes[i];
        let me = n.replica.id();
        let durable = n.election.unwrap_or_default();
        st.checker.on_send(now, me, durable, &msg);
        match msg {
            Outgoing::Request { to, id, request } => {
                n.outstanding.insert(id, to);
                let body = Body::Request { id, request };
                let incarnation = n.incarnation;
                st.net.push(Msg {
                    from: me,
                    to,
                    incarnation,
                    body,
                });
            }
            Outgoing::Response {
                id,
                mut response,
                fill,
                ..
            } => {
                let (requester, incarnation, standard, id) = split_inbound(id);
                if let (true, Response::Vote(v)) = (standard, &response) {
                    if v.granted {
                        st.checker
                            .on_standard_grant(now, me, requester, v.epoch, durable);
                    }
                }
                match (fill, &mut response) {
                    (Some(Fill::Records(range)), Response::Fetch(f)) => {
                        f.records = read_range(&n.log, range);
                    }
                    (Some(fill), _) => {
                        st.checker
                            .report(now, format!("{me} asked to fill {fill:?}"));
                    }
                    (None, _) => {}
                }
                st.net.push(Msg {
                    from: me,
                    to: requester,
                    incarnation,
                    body: Body::Response { id, response },
                });
            }
        }
    }
}

impl State {
    /// Forgets what the budget was spent on (after a scripted prefix).
    pub fn reset_budget(&mut self) {
        self.used = Budget::default();
    }

    /// The sender's and receiver's index of the message at `k` in the network.
    pub(super) fn link(&self, k: usize) -> (usize, usize) {
        let m = &self.net[k];
        (idx(m.from), idx(m.to))
    }

    /// The model clock.
    pub fn now(&self) -> Instant {
        self.now
    }

    /// Every violation the checks found on the way to this state.
    pub fn violations(&self) -> &[String] {
        self.checker.violations()
    }

    /// The canonical hash of this state: equal for states that behave alike. Each replica is
    /// hashed with [`Replica::fingerprint`] relative to the model clock (so the clock itself is
    /// left out), the network as a multiset (the order of messages does not matter), and the
    /// checker's history with it (two states merge only if their pasts are equally constrained).
    pub fn fingerprint(&self) -> u64 {
        let mut h = DefaultHasher::new();
        for n in &self.nodes {
            n.replica.fingerprint(self.now).hash(&mut h);
            n.incarnation.hash(&mut h);
            n.election.hash(&mut h);
            n.election_pending.hash(&mut h);
            hash_log(&n.log, &mut h);
            hash_log(&n.durable_log, &mut h);
            n.log_pending.hash(&mut h);
            n.last_hwm.hash(&mut h);
            n.outstanding.hash(&mut h);
        }
        let mut msgs: Vec<u64> = self
            .net
            .iter()
            .map(|m| {
                let mut mh = DefaultHasher::new();
                crate::protocol::fingerprint::hash_relative(&format!("{m:?}"), self.now, &mut mh);
                mh.finish()
            })
            .collect();
        msgs.sort_unstable();
        msgs.hash(&mut h);
        self.used.hash(&mut h);
        self.reads.hash(&mut h);
        self.checker.hash_history(&mut h);
        h.finish()
    }
}

fn hash_log(log: &[Record], h: &mut impl Hasher) {
    log.len().hash(h);
    for r in log {
        (r.offset, r.epoch, r.kind, &r.payload).hash(h);
    }
}

fn at(now: Instant) -> Duration {
    Duration::from_nanos(now.0.saturating_sub(EPOCH_OF_TIME.0))
}
