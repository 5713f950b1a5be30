//! The client workload: each group's sessions, on every replica of their group, issuing
//! pipelined batches of counter increments, register writes and compare-and-sets through
//! `Node::write_batch`, retrying only what the outcome contract calls safe (a refused tail),
//! and reads in every mode. Each session records what it was told, per group; the run later
//! compares that with what really happened. Every write carries its group, and every register
//! value a session writes carries it too ([`value_group`]), so a read that sees another
//! group's data is caught.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;

use crate::driver::{Committed, ReadMode, WriteError, WriteSession};
use crate::sim::SimRng;
use crate::types::GroupId;

use super::kv::{lock, Answer, KvOp, Tagged};
use super::world::{Phase, World};

/// Counter keys and register keys: few, so that operations contend.
pub(super) const COUNTERS: [u64; 3] = [1, 2, 3];
pub(super) const REGISTERS: [u64; 5] = [10, 11, 12, 13, 14];

/// The bits of a register value that name the group of the session that wrote it.
const GROUP_SHIFT: u32 = 48;

/// The first register value a session of `group` writes; later ones count up from it.
fn first_value(group: GroupId, session: u32) -> u64 {
    ((group.0 + 1) << GROUP_SHIFT) | (u64::from(session) << 32)
}

/// The group whose session wrote register value `value` (not 0, which no session writes).
pub(super) fn value_group(value: u64) -> GroupId {
    GroupId((value >> GROUP_SHIFT).wrapping_sub(1))
}

/// What a client was finally told about one write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Told {
    /// Committed at this offset, with this answer.
    Committed { offset: u64, answer: Option<Answer> },
    /// Definitely not applied (refused or lost).
    NotApplied(String),
    /// May or may not be applied (unknown, or no answer before the client's deadline).
    Unknown(String),
}

/// One write as its session saw it.
#[derive(Clone, Debug)]
pub(super) struct WriteRecord {
    pub(super) session: u32,
    pub(super) tagged: Tagged,
    /// Virtual nanoseconds since the run began.
    pub(super) call: u64,
    pub(super) ret: u64,
    pub(super) told: Told,
}

/// One read that got a permit.
#[derive(Clone, Debug)]
pub(super) struct ReadRecord {
    pub(super) key: u64,
    pub(super) mode: ReadMode,
    pub(super) call: u64,
    pub(super) ret: u64,
    pub(super) value: u64,
}

/// Everything the sessions saw.
#[derive(Default)]
pub(super) struct History {
    pub(super) writes: Vec<WriteRecord>,
    pub(super) reads: Vec<ReadRecord>,
    pub(super) reads_failed: u64,
}

/// Shared by the sessions of one run.
pub(super) struct Clients {
    pub(super) world: Arc<World>,
    /// What the sessions saw, per group.
    pub(super) history: Mutex<BTreeMap<GroupId, History>>,
    pub(super) next_id: Mutex<u64>,
    pub(super) origin: tokio::time::Instant,
    pub(super) lease_reads: bool,
    /// How long a client waits for one batch of writes (as raft-node's write timeout).
    pub(super) write_deadline: Duration,
}

impl Clients {
    pub(super) fn now(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64
    }

    /// The group whose replica a request of `group` goes to: its own, except under the
    /// negative control `misroute_groups` (the next live group).
    fn target(&self, group: GroupId) -> GroupId {
        if !self.world.opts.misroute_groups {
            return group;
        }
        let live = self.world.live_groups();
        let next = live.iter().copied().find(|g| *g > group);
        next.or(live.first().copied()).unwrap_or(group)
    }

    fn next_id(&self) -> u64 {
        let mut n = lock(&self.next_id);
        *n += 1;
        *n
    }

    /// Writes `ops` in order through `group`'s replica on host `i` as one pipelined batch,
    /// retrying only a refused tail until the deadline, and records what the session was told
    /// about each.
    pub(super) async fn write(
        &self,
        (group, session): (GroupId, u32),
        ws: &mut WriteSession,
        i: usize,
        ops: Vec<KvOp>,
    ) {
        let tagged: Vec<Tagged> = ops
            .into_iter()
            .map(|op| Tagged {
                group,
                id: self.next_id(),
                op,
            })
            .collect();
        let call = self.now();
        let deadline = tokio::time::Instant::now() + self.write_deadline;
        let mut told: Vec<Told> = Vec::with_capacity(tagged.len());
        let mut backoff = Duration::from_millis(10);
        while told.len() < tagged.len() {
            let Some((node, _)) = self.world.live(i, self.target(group)) else {
                // The replica is down: nothing was sent, so nothing was applied.
                while told.len() < tagged.len() {
                    told.push(Told::NotApplied("replica down".into()));
                }
                break;
            };
            let rest = &tagged[told.len()..];
            let payloads: Vec<Bytes> = rest.iter().map(Tagged::encode).collect();
            let attempt = ws.write_batch(&node, payloads);
            let results = match tokio::time::timeout_at(deadline, attempt).await {
                Ok(results) => results,
                Err(_) => {
                    while told.len() < tagged.len() {
                        told.push(Told::Unknown("client deadline".into()));
                    }
                    break;
                }
            };
            let retry_from = results
                .iter()
                .rposition(|r| {
                    !matches!(r, Err(WriteError::Refused(_) | WriteError::NotSent { .. }))
                })
                .map_or(0, |k| k + 1);
            let retry =
                retry_from < results.len() && tokio::time::Instant::now() + backoff < deadline;
            let settled = if retry { retry_from } else { results.len() };
            for (r, t) in results.into_iter().zip(rest).take(settled) {
                told.push(outcome(&t.op, r));
            }
            if retry {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_millis(200));
            }
        }
        let ret = self.now();
        let mut history = lock(&self.history);
        let h = history.entry(group).or_default();
        for (tagged, told) in tagged.into_iter().zip(told) {
            h.writes.push(WriteRecord {
                session,
                tagged,
                call,
                ret,
                told,
            });
        }
    }

    /// Reads register `key` of `group` on host `i` in `mode` and records the value it saw.
    pub(super) async fn read(&self, group: GroupId, i: usize, key: u64, mode: ReadMode) {
        let Some((node, kv)) = self.world.live(i, self.target(group)) else {
            return;
        };
        let call = self.now();
        let permit = tokio::time::timeout(Duration::from_millis(2_000), node.read(mode)).await;
        match permit {
            Ok(Ok(_)) => {
                // No await between the permit and the query: the state machine cannot move.
                let value = kv.get(key);
                let ret = self.now();
                let mut history = lock(&self.history);
                history.entry(group).or_default().reads.push(ReadRecord {
                    key,
                    mode,
                    call,
                    ret,
                    value,
                });
            }
            _ => lock(&self.history).entry(group).or_default().reads_failed += 1,
        }
    }
}

fn outcome(op: &KvOp, r: Result<Committed, WriteError>) -> Told {
    match r {
        Ok(c) => Told::Committed {
            offset: c.id.offset.0,
            answer: Answer::decode(op, &c.response),
        },
        Err(e) if e.is_definite_failure() => Told::NotApplied(e.to_string()),
        Err(e) => Told::Unknown(e.to_string()),
    }
}

/// One session of `group`: until `until` or until the group is to be dropped, batches of
/// writes and reads on a replica it changes now and then, with a little think time between
/// requests.
pub(super) async fn run_session(
    clients: Arc<Clients>,
    (group, session): (GroupId, u32),
    seed: u64,
    until: tokio::time::Instant,
) {
    let mix = group.0.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let mut rng = SimRng::new(seed ^ (u64::from(session) << 32) ^ 0x636c_6965 ^ mix);
    let n = clients.world.len();
    let mut home = rng.below(n as u64) as usize;
    let mut last_seen = [0u64; REGISTERS.len()];
    let mut next_value = first_value(group, session);
    // One session for the client's whole life, whichever replica it talks to.
    let mut ws = WriteSession::new();
    let live = || clients.world.phase(group) == Some(Phase::Live);
    while tokio::time::Instant::now() < until && live() {
        if rng.chance(0.1) {
            home = rng.below(n as u64) as usize;
        }
        if rng.chance(0.6) {
            let count = rng.range(1, 4) as usize;
            let ops = (0..count)
                .map(|_| {
                    let r = rng.below(REGISTERS.len() as u64) as usize;
                    next_value += 1;
                    match rng.below(10) {
                        0..=2 => KvOp::Incr {
                            key: rng.pick(&COUNTERS),
                        },
                        3..=6 => KvOp::Write {
                            key: REGISTERS[r],
                            value: next_value,
                        },
                        _ => KvOp::Cas {
                            key: REGISTERS[r],
                            expected: last_seen[r],
                            new: next_value,
                        },
                    }
                })
                .collect();
            clients.write((group, session), &mut ws, home, ops).await;
        } else {
            let r = rng.below(REGISTERS.len() as u64) as usize;
            let mode = match rng.below(10) {
                0..=5 => ReadMode::Linearizable,
                6 | 7 if clients.lease_reads => ReadMode::Lease,
                _ => ReadMode::Sequential,
            };
            clients.read(group, home, REGISTERS[r], mode).await;
            let history = lock(&clients.history);
            let last = history.get(&group).and_then(|h| h.reads.last());
            if let Some(v) = last.filter(|x| x.key == REGISTERS[r]) {
                last_seen[r] = v.value;
            }
        }
        tokio::time::sleep(Duration::from_micros(rng.range(0, 20_000))).await;
    }
}
