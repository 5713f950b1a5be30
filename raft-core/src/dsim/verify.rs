//! What a run's history must satisfy, checked against the ledgers (what every replica really
//! applied, where):
//!
//! - **agreement**: replicas never applied different writes at one offset, and no write was
//!   applied at two offsets (a double apply);
//! - **replies never lie**: a write told committed sits at its offset with the answer the
//!   client got; a write told "not applied" appears nowhere;
//! - **session order**: one session's writes that took effect sit in the order it sent them;
//! - **linearizability** of registers (writes, compare-and-sets, linearizable and lease reads),
//!   with writes of unknown outcome that took effect as open-ended and the others left out;
//! - **sequential reads** see only values some applied write produced;
//! - **isolation**: no replica of the group applied a record or installed a snapshot of
//!   another group, and no read saw a value another group's session wrote.
//!
//! It runs per group, on that group's history and ledgers.

use std::collections::{BTreeMap, HashMap};

use crate::driver::ReadMode;
use crate::sim::linearizability::{self, Op, OpKind, Verdict};
use crate::types::GroupId;

use super::clients::{value_group, History, Told, COUNTERS};
use super::kv::{Answer, KvOp, Ledger};

/// The verdicts of one run.
#[derive(Default, Debug)]
pub(super) struct Findings {
    pub(super) violations: Vec<String>,
    /// Register histories too large for the checker's step bound (neither proven nor refuted).
    pub(super) inconclusive: u64,
    /// Writes by final outcome.
    pub(super) committed: u64,
    pub(super) not_applied: u64,
    pub(super) unknown: u64,
    /// Unknown writes that did take effect.
    pub(super) unknown_applied: u64,
}

/// Merges the ledgers into the one committed sequence: offset → write id (or a control record).
fn agreed_log(ledgers: &[&Ledger], f: &mut Findings) -> BTreeMap<u64, Option<u64>> {
    let mut log: BTreeMap<u64, Option<u64>> = BTreeMap::new();
    for (r, ledger) in ledgers.iter().enumerate() {
        for c in &ledger.contradictions {
            f.violations.push(format!("replica #{r}: {c}"));
        }
        for c in &ledger.foreign {
            f.violations.push(format!("isolation: replica #{r}: {c}"));
        }
        for (offset, id) in &ledger.applied {
            match log.get(offset) {
                Some(other) if other != id => f.violations.push(format!(
                    "agreement: offset {offset} holds {other:?} on one replica and {id:?} on replica #{r}"
                )),
                _ => {
                    log.insert(*offset, *id);
                }
            }
        }
    }
    log
}

/// Checks `group`'s history against the ledgers of its replicas.
pub(super) fn check(group: GroupId, history: &History, ledgers: &[&Ledger]) -> Findings {
    let mut f = Findings::default();
    let log = agreed_log(ledgers, &mut f);
    let mut placed: HashMap<u64, u64> = HashMap::new();
    for (offset, id) in &log {
        if let Some(id) = id {
            if let Some(first) = placed.insert(*id, *offset) {
                f.violations.push(format!(
                    "double apply: write {id} applied at offsets {first} and {offset}"
                ));
            }
        }
    }
    // Replay the agreed log for every write's true effect.
    let by_id: HashMap<u64, &super::clients::WriteRecord> =
        history.writes.iter().map(|w| (w.tagged.id, w)).collect();
    let mut map = BTreeMap::new();
    let mut effect: HashMap<u64, Answer> = HashMap::new();
    for id in log.values().flatten() {
        if let Some(w) = by_id.get(id) {
            effect.insert(*id, w.tagged.op.apply(&mut map));
        }
    }
    let mut lin = Vec::new();
    let mut session_offsets: BTreeMap<u32, Vec<(u64, u64, &Told)>> = BTreeMap::new();
    for w in &history.writes {
        let id = w.tagged.id;
        let at = placed.get(&id).copied();
        match (&w.told, at) {
            (Told::Committed { offset, answer }, Some(at)) => {
                f.committed += 1;
                if *offset != at {
                    f.violations.push(format!(
                        "lie: write {id} told committed at {offset} sits at {at}"
                    ));
                }
                if *answer != effect.get(&id).copied() {
                    f.violations.push(format!(
                        "lie: write {id} got answer {answer:?}, its record produced {:?}",
                        effect.get(&id)
                    ));
                }
            }
            (Told::Committed { offset, .. }, None) => {
                f.committed += 1;
                f.violations.push(format!(
                    "lie: write {id} told committed at {offset} was never applied"
                ));
            }
            (Told::NotApplied(why), Some(at)) => {
                f.not_applied += 1;
                f.violations.push(format!(
                    "lie: write {id} told not applied ({why}) was applied at {at}"
                ));
            }
            (Told::NotApplied(_), None) => f.not_applied += 1,
            (Told::Unknown(_), at) => {
                f.unknown += 1;
                f.unknown_applied += u64::from(at.is_some());
            }
        }
        let Some(at) = at else { continue };
        session_offsets
            .entry(w.session)
            .or_default()
            .push((id, at, &w.told));
        let ret = match w.told {
            Told::Committed { .. } => w.ret,
            _ => u64::MAX,
        };
        let kind = match (w.tagged.op, effect.get(&id)) {
            (KvOp::Write { value, .. }, _) => OpKind::Write(value),
            (KvOp::Cas { expected, new, .. }, Some(Answer::Swapped(ok))) => OpKind::Cas {
                expected,
                new,
                ok: *ok,
            },
            _ => continue,
        };
        lin.push(Op {
            key: w.tagged.op.key(),
            call: w.call,
            ret,
            kind,
        });
    }
    // Ids grow in the order a session sends, so sorting by id is the session's order.
    for (session, mut ops) in session_offsets {
        ops.sort_by_key(|o| o.0);
        if let Some(pair) = ops.windows(2).find(|p| p[0].1 >= p[1].1) {
            f.violations.push(format!(
                "session order: session {session} sent write {} ({:?}) before {} ({:?}), \
                 applied at {} and {}",
                pair[0].0, pair[0].2, pair[1].0, pair[1].2, pair[0].1, pair[1].1
            ));
        }
    }
    let produced: std::collections::HashSet<u64> = lin
        .iter()
        .filter_map(|o| match o.kind {
            OpKind::Write(v)
            | OpKind::Cas {
                new: v, ok: true, ..
            } => Some(v),
            _ => None,
        })
        .collect();
    for r in &history.reads {
        if COUNTERS.contains(&r.key) {
            continue;
        }
        if r.value != 0 && value_group(r.value) != group {
            f.violations.push(format!(
                "isolation: a {:?} read of key {} in {group} saw {}, a value {} wrote",
                r.mode,
                r.key,
                r.value,
                value_group(r.value)
            ));
        }
        match r.mode {
            ReadMode::Sequential => {
                if r.value != 0 && !produced.contains(&r.value) {
                    f.violations.push(format!(
                        "sequential read of key {} saw {}, which no applied write produced",
                        r.key, r.value
                    ));
                }
            }
            ReadMode::Linearizable | ReadMode::Lease => lin.push(Op {
                key: r.key,
                call: r.call,
                ret: r.ret,
                kind: OpKind::Read(r.value),
            }),
        }
    }
    match linearizability::check(&lin, 200_000) {
        Verdict::Linearizable => {}
        Verdict::Violation(v) => f.violations.push(v),
        Verdict::Inconclusive(_) => f.inconclusive += 1,
    }
    f
}
