//! A linearizability checker for single-key register histories with compare-and-set, in the
//! style of Wing and Gong with Lowe's memoization (as Porcupine does): the history is split by
//! key (linearizability is compositional), then a depth-first search looks for an order of the
//! operations that respects real time and the register's semantics, caching every
//! (linearized set, register value) it has already explored.

use std::collections::{BTreeMap, HashSet};

/// What an operation did. Values are non-zero; `0` means "absent".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpKind {
    /// Set the register.
    Write(u64),
    /// Set to `new` if it held `expected`; `ok` is the outcome the client saw.
    Cas {
        /// The value required.
        expected: u64,
        /// The value written on success.
        new: u64,
        /// Whether it succeeded.
        ok: bool,
    },
    /// Read the register and saw this value.
    Read(u64),
}

/// One completed operation on one key, with its invocation and completion times.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Op {
    /// The key.
    pub key: u64,
    /// Invocation time (nanoseconds of virtual time).
    pub call: u64,
    /// Completion time.
    pub ret: u64,
    /// What it did.
    pub kind: OpKind,
}

/// The checker's verdict on a history.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Some order explains every result.
    Linearizable,
    /// No order does; names the key.
    Violation(String),
    /// The search hit its step bound on some key (neither proven nor refuted).
    Inconclusive(u64),
}

/// Checks a history, key by key, with at most `steps_max` search steps per key.
pub fn check(ops: &[Op], steps_max: u64) -> Verdict {
    let mut by_key: BTreeMap<u64, Vec<Op>> = BTreeMap::new();
    for op in ops {
        by_key.entry(op.key).or_default().push(*op);
    }
    let mut inconclusive = None;
    for (key, mut ops) in by_key {
        ops.sort_by_key(|o| (o.call, o.ret));
        match check_key(&ops, steps_max) {
            Some(true) => {}
            Some(false) => {
                return Verdict::Violation(format!(
                    "S13 history of key {key} ({} operations) is not linearizable",
                    ops.len()
                ))
            }
            None => inconclusive = Some(key),
        }
    }
    match inconclusive {
        Some(k) => Verdict::Inconclusive(k),
        None => Verdict::Linearizable,
    }
}

fn apply(state: u64, kind: OpKind) -> Option<u64> {
    match kind {
        OpKind::Write(v) => Some(v),
        OpKind::Read(v) => (v == state).then_some(state),
        OpKind::Cas { expected, new, ok } => match (expected == state, ok) {
            (true, true) => Some(new),
            (false, false) => Some(state),
            _ => None,
        },
    }
}

/// Whether an operation leaves the register as it found it (a read, a failed CAS).
fn is_pure(kind: OpKind) -> bool {
    matches!(kind, OpKind::Read(_) | OpKind::Cas { ok: false, .. })
}

/// `Some(verdict)` or `None` when the step bound was hit.
///
/// A pure operation that may come next and agrees with the current value is linearized at
/// once, without a choice point: placing it earlier than in any valid order keeps that order
/// valid (it changes no value and only lifts a real-time constraint on the others). Only
/// writes and successful CAS operations are branched on.
fn check_key(ops: &[Op], steps_max: u64) -> Option<bool> {
    let n = ops.len();
    let words = n.div_ceil(64);
    let mut done = vec![0u64; words];
    let mut seen: HashSet<(Vec<u64>, u64)> = HashSet::new();
    let mut steps = 0u64;
    // Explicit stack of (chosen op, state before it, forced) to undo; iterative to bound depth.
    let mut stack: Vec<(usize, u64, bool)> = Vec::new();
    let mut state = 0u64;
    let mut next_candidate = 0usize;
    let mut first_undone = 0usize;
    loop {
        steps += 1;
        if steps > steps_max {
            return None;
        }
        if stack.len() == n {
            return Some(true);
        }
        // An op may come next only if no pending op returned before it was called. Ops are
        // sorted by call, and an op called after the running minimum cannot lower it, so the
        // scan stops at the edge of the concurrency window.
        while is_set(&done, first_undone) {
            first_undone += 1;
        }
        let mut min_ret = u64::MAX;
        for (k, op) in ops.iter().enumerate().skip(first_undone) {
            if op.call > min_ret {
                break;
            }
            if !is_set(&done, k) {
                min_ret = min_ret.min(op.ret);
            }
        }
        let forced = (first_undone..n)
            .take_while(|&k| ops[k].call <= min_ret)
            .find(|&k| {
                !is_set(&done, k) && is_pure(ops[k].kind) && apply(state, ops[k].kind).is_some()
            });
        if let Some(k) = forced {
            set(&mut done, k, true);
            stack.push((k, state, true));
            continue;
        }
        let mut advanced = false;
        let mut i = next_candidate.max(first_undone);
        while i < n {
            if ops[i].call > min_ret {
                break;
            }
            if !is_set(&done, i) && !is_pure(ops[i].kind) {
                if let Some(next) = apply(state, ops[i].kind) {
                    set(&mut done, i, true);
                    if seen.insert((done.clone(), next)) {
                        stack.push((i, state, false));
                        state = next;
                        next_candidate = 0;
                        advanced = true;
                        break;
                    }
                    set(&mut done, i, false);
                }
            }
            i += 1;
        }
        if advanced {
            continue;
        }
        // Backtrack through the forced ops to the last choice.
        loop {
            let Some((last, before, was_forced)) = stack.pop() else {
                return Some(false);
            };
            set(&mut done, last, false);
            first_undone = first_undone.min(last);
            state = before;
            if !was_forced {
                next_candidate = last + 1;
                break;
            }
        }
    }
}

fn is_set(bits: &[u64], i: usize) -> bool {
    bits[i / 64] & (1 << (i % 64)) != 0
}

fn set(bits: &mut [u64], i: usize, on: bool) {
    if on {
        bits[i / 64] |= 1 << (i % 64);
    } else {
        bits[i / 64] &= !(1 << (i % 64));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(call: u64, ret: u64, kind: OpKind) -> Op {
        Op {
            key: 1,
            call,
            ret,
            kind,
        }
    }

    #[test]
    fn sequential_history_is_linearizable() {
        let h = [
            op(0, 1, OpKind::Write(5)),
            op(2, 3, OpKind::Read(5)),
            op(
                4,
                5,
                OpKind::Cas {
                    expected: 5,
                    new: 6,
                    ok: true,
                },
            ),
            op(6, 7, OpKind::Read(6)),
            op(
                8,
                9,
                OpKind::Cas {
                    expected: 5,
                    new: 7,
                    ok: false,
                },
            ),
        ];
        assert_eq!(check(&h, 10_000), Verdict::Linearizable);
    }

    #[test]
    fn concurrent_write_may_be_seen_or_not() {
        let h = [
            op(0, 10, OpKind::Write(1)),
            op(1, 2, OpKind::Read(0)),
            op(3, 4, OpKind::Read(1)),
        ];
        assert_eq!(check(&h, 10_000), Verdict::Linearizable);
    }

    #[test]
    fn stale_read_after_acknowledged_write_is_rejected() {
        // The write completed before the read began, yet the read saw the old value.
        let h = [
            op(0, 1, OpKind::Write(1)),
            op(2, 3, OpKind::Write(2)),
            op(4, 5, OpKind::Read(1)),
        ];
        assert!(matches!(check(&h, 10_000), Verdict::Violation(_)));
    }

    #[test]
    fn reads_going_back_in_time_are_rejected() {
        // Two concurrent writes, then two sequential reads that disagree on their order.
        let h = [
            op(0, 10, OpKind::Write(1)),
            op(0, 10, OpKind::Write(2)),
            op(11, 12, OpKind::Read(1)),
            op(13, 14, OpKind::Read(2)),
            op(15, 16, OpKind::Read(1)),
        ];
        assert!(matches!(check(&h, 10_000), Verdict::Violation(_)));
    }

    #[test]
    fn cas_outcome_must_match_the_order() {
        let h = [
            op(0, 1, OpKind::Write(1)),
            op(
                2,
                3,
                OpKind::Cas {
                    expected: 1,
                    new: 2,
                    ok: true,
                },
            ),
            op(
                4,
                5,
                OpKind::Cas {
                    expected: 1,
                    new: 3,
                    ok: true,
                },
            ),
        ];
        assert!(matches!(check(&h, 10_000), Verdict::Violation(_)));
    }

    #[test]
    fn read_of_a_value_never_written_is_rejected() {
        let h = [op(0, 1, OpKind::Read(9))];
        assert!(matches!(check(&h, 10_000), Verdict::Violation(_)));
    }

    /// Every order of the operations that respects real time, tried one by one.
    fn brute_force(ops: &[Op]) -> bool {
        fn go(ops: &[Op], used: &mut Vec<bool>, state: u64) -> bool {
            if used.iter().all(|u| *u) {
                return true;
            }
            let min_ret = (0..ops.len())
                .filter(|&k| !used[k])
                .map(|k| ops[k].ret)
                .min()
                .unwrap_or(u64::MAX);
            for k in 0..ops.len() {
                if used[k] || ops[k].call > min_ret {
                    continue;
                }
                if let Some(next) = apply(state, ops[k].kind) {
                    used[k] = true;
                    if go(ops, used, next) {
                        return true;
                    }
                    used[k] = false;
                }
            }
            false
        }
        go(ops, &mut vec![false; ops.len()], 0)
    }

    fn arb_op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        let kind = prop_oneof![
            (1u64..4).prop_map(OpKind::Write),
            (0u64..4).prop_map(OpKind::Read),
            (0u64..4, 1u64..4, any::<bool>()).prop_map(|(expected, new, ok)| OpKind::Cas {
                expected,
                new,
                ok
            }),
        ];
        (0u64..20, 1u64..8, kind).prop_map(|(call, len, kind)| op(call, call + len, kind))
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(3000))]
        /// The optimized search (memoization, pure operations linearized greedily) agrees with
        /// trying every order, on small histories with repeated values.
        #[test]
        fn search_agrees_with_brute_force(ops in proptest::collection::vec(arb_op(), 0..8)) {
            let expected = brute_force(&{
                let mut sorted = ops.clone();
                sorted.sort_by_key(|o| (o.call, o.ret));
                sorted
            });
            let verdict = check(&ops, 1_000_000);
            proptest::prop_assert_eq!(verdict == Verdict::Linearizable, expected, "{:?}", verdict);
            proptest::prop_assert!(!matches!(verdict, Verdict::Inconclusive(_)));
        }
    }
}
