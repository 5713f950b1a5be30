//! An exhaustive, bounded model check of the sans-IO core: every interleaving of deliveries,
//! drops, duplicates, timer firings, syncs, crashes, proposals and reads of three replicas, to a
//! stated depth, breadth first, with equal states merged.
//!
//! Where the random simulator ([`crate::sim::run`]) samples long runs, this explorer covers every
//! short one. A state is each replica's [`crate::protocol::Replica`] value (cloned) with its
//! driver's storage, the messages in flight and the model clock ([`model`] says what is
//! modelled and how). States are merged by a canonical 64-bit hash ([`State::fingerprint`]):
//! times relative to the model clock, the network as a multiset. A hash collision could hide a
//! state; at the sizes explored here (below 10^7 states) its odds are below 10^-5.
//!
//! After every action the checks run: the simulator's [`crate::sim::checks::Checker`] (S1 one
//! leader per epoch, S2 durable epochs never go back, S3 one vote per epoch, S4 log matching by
//! record identity, S5 leader completeness, S6/S7 the committed prefix never changes and the
//! high watermark never goes back, D4 votes durable before they are sent), plus two checks of
//! the model's own: D4 every committed record is durable on a majority of voters when a high
//! watermark passes it, D2 a pre-vote request never changes its receiver's election state, and
//! R1 the read rule: a linearizable read's `ReadReady` offset covers every offset committed
//! (anywhere) before the read started. A core panic counts as a violation too. A violation
//! comes back with the path of actions that reproduces it; breadth first, it is a shortest one.
//!
//! Memory: each distinct state costs its 64-bit hash and its parent's index with the action
//! from there (about 50 bytes). Frontier states are kept whole only while a level has few;
//! the others are rebuilt from the start state along their path when expanded.
//!
//! Two starts: [`Start::Cold`] (empty storage) and [`Start::Leader`], the state a scripted
//! prefix reaches: replica 1 leads epoch 1, its epoch-start record committed, one proposal
//! appended (not yet synced), the followers' fetches in flight. Shallow depths from there reach
//! commits, failovers of a fresh leader and lost unsynced tails. A third, [`Start::Failover`],
//! continues that prefix into a second election: the proposal committed through replica 2
//! only, replica 1 crashed and restarted, replica 2 just elected in a later epoch, where the rules
//! of a new leader's first moments (its epoch-start check, votes while a leader lives) are a
//! few actions away.

pub mod model;

use std::collections::HashSet;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant as WallClock};

pub use self::model::{Action, Budget, Model, State};
use crate::planted::Planted;
use crate::types::{Offset, Role};

/// Where the exploration starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// Three replicas on empty storage, just started.
    Cold,
    /// Replica 1 leads epoch 1 with its epoch-start record committed and one proposal appended.
    Leader,
    /// After [`Start::Leader`]: the proposal committed through replica 2, replica 1 crashed
    /// and restarted, and replica 2 just elected in a later epoch (not yet committed).
    Failover,
}

impl Start {
    /// The name `--start` takes.
    pub fn name(self) -> &'static str {
        match self {
            Start::Cold => "cold",
            Start::Leader => "leader",
            Start::Failover => "failover",
        }
    }
}

/// What to explore.
#[derive(Clone, Debug)]
pub struct Options {
    /// Actions from the start state.
    pub depth: u32,
    /// The start state.
    pub start: Start,
    /// A planted bug on every replica.
    pub planted: Option<Planted>,
    /// Bounds on crashes, proposals and duplicates along one path.
    pub budget: Budget,
    /// Negative control of the read rule: followers serve linearizable reads without asking
    /// the leader.
    pub unsafe_reads: bool,
    /// Stop (reporting it) once this many distinct states are stored (about 50 bytes each).
    pub max_states: usize,
}

impl Options {
    /// Defaults: depth `depth` from `start`, one crash, one proposal, one duplicate, one read.
    pub fn new(depth: u32, start: Start) -> Options {
        Options {
            depth,
            start,
            planted: None,
            budget: Budget {
                crashes: 1,
                proposals: 1,
                duplicates: 1,
                reads: 1,
            },
            unsafe_reads: false,
            max_states: 20_000_000,
        }
    }
}

/// A violation and how to reach it.
#[derive(Clone, Debug)]
pub struct Violation {
    /// Actions from the start state to the violation (0: the scripted prefix broke).
    pub depth: u32,
    /// What was violated.
    pub messages: Vec<String>,
    /// Every action from the start state, described.
    pub trace: Vec<String>,
}

/// The outcome of an exploration.
#[derive(Clone, Debug)]
pub struct Report {
    /// Actions applied (transitions explored).
    pub explored: u64,
    /// Distinct states reached (after merging), the start included.
    pub distinct: u64,
    /// The deepest level completed.
    pub depth: u32,
    /// The first violation found, breadth first (so with a shortest trace).
    pub violation: Option<Violation>,
    /// The state cap was hit: the exploration stopped before the depth asked for.
    pub capped: bool,
    /// Wall time.
    pub elapsed: Duration,
}

/// Runs `model` from `st` on a fair, fault-free schedule (syncs first, then messages in order,
/// then the earliest timer) until `done`, delivering only the messages `deliver` accepts (by
/// sender and receiver index) and firing only the timers `timer` accepts (by replica index and
/// state). Returns whether `done` was reached; a violation on the way is an error.
fn fair_run(
    model: &Model,
    st: &mut State,
    deliver: impl Fn(usize, usize) -> bool,
    timer: impl Fn(&State, usize) -> bool,
    done: impl Fn(&State) -> bool,
) -> Result<bool, String> {
    for _ in 0..10_000 {
        if done(st) {
            return Ok(true);
        }
        let acts = model.actions(st);
        let pick = acts
            .iter()
            .find(|a| matches!(a, Action::Sync(_)))
            .or_else(|| {
                acts.iter().find(|a| match a {
                    Action::Deliver(k) => {
                        let (from, to) = st.link(*k);
                        deliver(from, to)
                    }
                    _ => false,
                })
            })
            .or_else(|| {
                acts.iter()
                    .filter(|a| matches!(a, Action::Timer(i) if timer(st, *i)))
                    .min_by_key(|a| match a {
                        Action::Timer(i) => st.nodes[*i].replica.next_deadline(),
                        _ => unreachable!(),
                    })
            })
            .copied();
        let Some(a) = pick else { break };
        model.apply(st, a);
        if !st.violations().is_empty() {
            return Err(format!(
                "the scripted prefix: {}",
                st.violations().join("; ")
            ));
        }
    }
    Ok(done(st))
}

/// The start state of `start` in `model`, or what went wrong on the way (a planted bug may
/// break the scripted prefix itself).
pub fn start_state(model: &Model, start: Start) -> Result<State, String> {
    let mut st = model.cold();
    if start == Start::Cold {
        return Ok(st);
    }
    // Only replica 1's timers fire until it leads, so that it is the one elected.
    let leader_ready = |st: &State| {
        let r = &st.nodes[0].replica;
        r.role() == Role::Leader && r.high_watermark() >= Offset(1)
    };
    let leading = |st: &State, i: usize| i == 0 || st.nodes[0].replica.role() == Role::Leader;
    if !fair_run(model, &mut st, |_, _| true, leading, leader_ready)? {
        return Err("the scripted prefix did not elect replica 1".into());
    }
    let end = st.nodes[0].replica.log_end().offset;
    model.apply(&mut st, Action::Propose(0));
    for _ in 0..100 {
        if st.nodes[0].replica.log_end().offset > end {
            break;
        }
        model.apply(&mut st, Action::Timer(0));
    }
    if st.nodes[0].replica.log_end().offset == end {
        return Err("the scripted proposal was not appended".into());
    }
    if !st.violations().is_empty() {
        return Err(format!(
            "the scripted prefix: {}",
            st.violations().join("; ")
        ));
    }
    if start == Start::Failover {
        failover(model, &mut st)?;
    }
    st.reset_budget();
    Ok(st)
}

/// From [`Start::Leader`]: the proposal commits through replica 2 alone (replica 3's messages
/// wait in the network) and replica 2 learns that; replica 1 crashes and restarts; replica 2
/// is elected in a later epoch and stops there, its epoch-start record not yet committed and its
/// high watermark (learned as a follower) above what replica 3 holds.
fn failover(model: &Model, st: &mut State) -> Result<(), String> {
    let proposal_end = st.nodes[0].replica.log_end().offset;
    let knows_commit = |st: &State| st.nodes[1].replica.high_watermark() >= proposal_end;
    let without_3 = |from: usize, to: usize| from != 2 && to != 2;
    if !fair_run(model, st, without_3, |_, i| i != 2, knows_commit)? {
        return Err("the failover prefix: replica 2 did not learn of the commit".into());
    }
    model.apply(st, Action::Crash(0));
    let elected = |st: &State| st.nodes[1].replica.role() == Role::Leader;
    if !fair_run(model, st, |_, _| true, |_, i| i == 1, elected)? {
        return Err("the failover prefix did not elect replica 2".into());
    }
    Ok(())
}

/// Runs the exploration `opts` asks for.
pub fn explore(opts: &Options) -> Report {
    let started = WallClock::now();
    let model = Model::with_unsafe_reads(3, opts.planted, opts.budget, opts.unsafe_reads);
    let mut report = Report {
        explored: 0,
        distinct: 1,
        depth: 0,
        violation: None,
        capped: false,
        elapsed: Duration::ZERO,
    };
    let root = match catch_unwind(AssertUnwindSafe(|| start_state(&model, opts.start))) {
        Ok(Ok(root)) => root,
        Ok(Err(message)) => {
            report.violation = Some(Violation {
                depth: 0,
                messages: vec![message],
                trace: Vec::new(),
            });
            return report;
        }
        Err(panic) => {
            report.violation = Some(Violation {
                depth: 0,
                messages: vec![format!(
                    "the scripted prefix panicked: {}",
                    panic_text(&panic)
                )],
                trace: Vec::new(),
            });
            return report;
        }
    };
    let mut seen: HashSet<u64> = HashSet::new();
    seen.insert(root.fingerprint());
    // The path to every stored state: its parent's index and the action from there.
    let mut parents: Vec<(u32, Action)> = vec![(0, Action::Sync(0))];
    // The states of the next level are kept while there are few; beyond that only their
    // index is, and each is rebuilt from the start state along its path when it is expanded:
    // memory stays a few dozen bytes per distinct state, for some repeated work.
    let mut frontier: Vec<(Option<State>, u32)> = vec![(Some(root.clone()), 0)];
    'levels: for level in 0..opts.depth {
        let mut next = Vec::new();
        for (kept, index) in &frontier {
            let rebuilt;
            let st = match kept {
                Some(st) => st,
                None => {
                    rebuilt = rebuild(&model, &root, &parents, *index);
                    &rebuilt
                }
            };
            for a in model.actions(st) {
                let mut child = st.clone();
                report.explored += 1;
                let outcome = catch_unwind(AssertUnwindSafe(|| model.apply(&mut child, a)));
                let messages = match outcome {
                    Err(panic) => vec![format!("panic: {}", panic_text(&panic))],
                    Ok(()) => child.violations().to_vec(),
                };
                if !messages.is_empty() {
                    let path = path_to(&parents, *index, a);
                    let trace = replay(&model, &root, &path);
                    report.violation = Some(Violation {
                        depth: level + 1,
                        messages,
                        trace,
                    });
                    report.depth = level + 1;
                    break 'levels;
                }
                if seen.insert(child.fingerprint()) {
                    if seen.len() > opts.max_states {
                        report.capped = true;
                        break 'levels;
                    }
                    parents.push((*index, a));
                    let keep = (next.len() < KEPT_STATES).then_some(child);
                    next.push((keep, parents.len() as u32 - 1));
                }
            }
        }
        report.depth = level + 1;
        frontier = next;
        if frontier.is_empty() {
            break;
        }
    }
    report.distinct = seen.len() as u64;
    report.elapsed = started.elapsed();
    report
}

/// Frontier states kept in memory at one level; the rest are rebuilt when expanded.
const KEPT_STATES: usize = 10_000;

/// The state stored at `index`, rebuilt by applying its path from `root`.
fn rebuild(model: &Model, root: &State, parents: &[(u32, Action)], index: u32) -> State {
    let (parent, last) = parents[index as usize];
    let mut st = root.clone();
    for a in path_to(parents, parent, last) {
        model.apply(&mut st, a);
    }
    st
}

fn path_to(parents: &[(u32, Action)], mut index: u32, last: Action) -> Vec<Action> {
    let mut path = vec![last];
    while index != 0 {
        let (parent, a) = parents[index as usize];
        path.push(a);
        index = parent;
    }
    path.reverse();
    path
}

/// Replays `path` from `root`, describing each action and what the checks found.
fn replay(model: &Model, root: &State, path: &[Action]) -> Vec<String> {
    let mut st = root.clone();
    let mut lines = Vec::new();
    for (k, a) in path.iter().enumerate() {
        let mut line = format!("{:>3}. {}", k + 1, model.describe(&st, *a));
        line.truncate(400);
        lines.push(line);
        if catch_unwind(AssertUnwindSafe(|| model.apply(&mut st, *a))).is_err() {
            lines.push("     (the core panicked)".into());
            break;
        }
        let roles: Vec<String> = st
            .nodes
            .iter()
            .map(|n| {
                let r = &n.replica;
                format!(
                    "{}:{}/{} end {} hw {}",
                    r.id(),
                    r.role(),
                    r.epoch(),
                    r.log_end().offset,
                    r.high_watermark()
                )
            })
            .collect();
        lines.push(format!("     -> {}", roles.join(", ")));
    }
    lines
}

fn panic_text(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "unknown panic".into())
}

#[cfg(test)]
mod tests;
