//! The driver simulator's state machine: registers and counters keyed by `u64`. Every write
//! carries its operation id, and every replica writes what it applied at each offset into a
//! [`Ledger`] that outlives its crashes, so a run knows exactly which writes took effect, where,
//! and how often, whatever the clients were told.
//!
//! Every write also carries its group, and every state machine belongs to one group: a record
//! or a snapshot of another group reaching it is noted in its ledger as an isolation failure.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use bytes::Bytes;

use crate::io::{read_to_end, BytesReader, SnapshotReader, StateMachine, StateMachineError};

/// The largest snapshot this state machine reads back.
const SNAPSHOT_LIMIT: u64 = 1 << 30;
use crate::types::{GroupId, Offset, Record, RecordKind};

/// What a write does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum KvOp {
    /// Adds one to a counter; answers the new value.
    Incr { key: u64 },
    /// Sets a register.
    Write { key: u64, value: u64 },
    /// Sets a register to `new` if it holds `expected`; answers whether it did.
    Cas { key: u64, expected: u64, new: u64 },
}

impl KvOp {
    pub(super) fn key(&self) -> u64 {
        match *self {
            KvOp::Incr { key } | KvOp::Write { key, .. } | KvOp::Cas { key, .. } => key,
        }
    }

    /// Applies the operation and returns its answer.
    pub(super) fn apply(&self, map: &mut BTreeMap<u64, u64>) -> Answer {
        match *self {
            KvOp::Incr { key } => {
                let v = map.entry(key).or_insert(0);
                *v += 1;
                Answer::Count(*v)
            }
            KvOp::Write { key, value } => {
                map.insert(key, value);
                Answer::Done
            }
            KvOp::Cas { key, expected, new } => {
                let ok = map.get(&key).copied().unwrap_or(0) == expected;
                if ok {
                    map.insert(key, new);
                }
                Answer::Swapped(ok)
            }
        }
    }
}

/// What the state machine answered for a write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Answer {
    Count(u64),
    Done,
    Swapped(bool),
}

impl Answer {
    fn encode(self) -> Bytes {
        match self {
            Answer::Count(v) => Bytes::copy_from_slice(&v.to_le_bytes()),
            Answer::Done => Bytes::new(),
            Answer::Swapped(ok) => Bytes::copy_from_slice(&[u8::from(ok)]),
        }
    }

    /// Decodes the answer of `op`.
    pub(super) fn decode(op: &KvOp, b: &[u8]) -> Option<Answer> {
        match op {
            KvOp::Incr { .. } => Some(Answer::Count(u64::from_le_bytes(b.try_into().ok()?))),
            KvOp::Write { .. } => b.is_empty().then_some(Answer::Done),
            KvOp::Cas { .. } => match b {
                [0] => Some(Answer::Swapped(false)),
                [1] => Some(Answer::Swapped(true)),
                _ => None,
            },
        }
    }
}

/// One client write as it travels in a record: its group, a unique id and the operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Tagged {
    pub(super) group: GroupId,
    pub(super) id: u64,
    pub(super) op: KvOp,
}

const TAGGED_LEN: usize = 1 + 8 + 8 + 8 + 8 + 8;

impl Tagged {
    pub(super) fn encode(&self) -> Bytes {
        let (tag, key, a, b) = match self.op {
            KvOp::Incr { key } => (1u8, key, 0, 0),
            KvOp::Write { key, value } => (2, key, value, 0),
            KvOp::Cas { key, expected, new } => (3, key, expected, new),
        };
        let mut out = Vec::with_capacity(TAGGED_LEN);
        out.push(tag);
        for w in [self.group.0, self.id, key, a, b] {
            out.extend_from_slice(&w.to_le_bytes());
        }
        Bytes::from(out)
    }

    pub(super) fn decode(b: &[u8]) -> Option<Tagged> {
        if b.len() != TAGGED_LEN {
            return None;
        }
        let word = |i: usize| u64::from_le_bytes(b[1 + 8 * i..9 + 8 * i].try_into().unwrap());
        let (group, id) = (GroupId(word(0)), word(1));
        let (key, a, c) = (word(2), word(3), word(4));
        let op = match b[0] {
            1 => KvOp::Incr { key },
            2 => KvOp::Write { key, value: a },
            3 => KvOp::Cas {
                key,
                expected: a,
                new: c,
            },
            _ => return None,
        };
        Some(Tagged { group, id, op })
    }
}

/// Per offset, the write a replica applied there (`None` for control records), over all its
/// incarnations; plus any contradiction it noticed (another record at an offset it had applied)
/// and anything of another group that reached it.
#[derive(Default)]
pub(super) struct Ledger {
    pub(super) applied: BTreeMap<u64, Option<u64>>,
    pub(super) contradictions: Vec<String>,
    pub(super) foreign: Vec<String>,
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[derive(Default)]
struct State {
    next: Offset,
    map: BTreeMap<u64, u64>,
}

/// One incarnation's state machine of one group: in memory, so a crash loses it and the driver
/// rebuilds it from the snapshot store and the log.
pub(super) struct Kv {
    group: GroupId,
    state: Mutex<State>,
    ledger: Arc<Mutex<Ledger>>,
}

impl Kv {
    pub(super) fn new(group: GroupId, ledger: Arc<Mutex<Ledger>>) -> Kv {
        Kv {
            group,
            state: Mutex::default(),
            ledger,
        }
    }

    /// The value of `key` now (0 when absent).
    pub(super) fn get(&self, key: u64) -> u64 {
        lock(&self.state).map.get(&key).copied().unwrap_or(0)
    }
}

#[async_trait]
impl StateMachine for Kv {
    async fn applied(&self) -> Offset {
        lock(&self.state).next
    }

    async fn apply(
        &self,
        records: &[Record],
        responses: &mut Vec<Bytes>,
    ) -> Result<(), StateMachineError> {
        let mut state = lock(&self.state);
        let mut ledger = lock(&self.ledger);
        for r in records {
            if r.offset != state.next {
                return Err(StateMachineError {
                    offset: r.offset,
                    reason: format!("expected offset {}", state.next),
                });
            }
            state.next = r.offset.next();
            let tagged = (r.kind == RecordKind::Data)
                .then(|| Tagged::decode(&r.payload))
                .flatten();
            let id = tagged.map(|t| t.id);
            match ledger.applied.get(&r.offset.0) {
                Some(before) if *before != id => {
                    let note = format!(
                        "offset {} applied as {before:?} and later as {id:?}",
                        r.offset
                    );
                    ledger.contradictions.push(note);
                }
                _ => {
                    ledger.applied.insert(r.offset.0, id);
                }
            }
            let foreign = tagged.filter(|t| t.group != self.group);
            if let Some(t) = foreign {
                ledger.foreign.push(format!(
                    "offset {} of {} holds write {} of {}",
                    r.offset, self.group, t.id, t.group
                ));
            }
            let answer = tagged
                .filter(|_| foreign.is_none())
                .map(|t| t.op.apply(&mut state.map));
            responses.push(answer.map(Answer::encode).unwrap_or_default());
        }
        Ok(())
    }

    async fn snapshot(&self) -> Result<Box<dyn SnapshotReader>, StateMachineError> {
        let state = lock(&self.state);
        let mut out = Vec::with_capacity(16 + 16 * state.map.len());
        out.extend_from_slice(&self.group.0.to_le_bytes());
        out.extend_from_slice(&state.next.0.to_le_bytes());
        for (k, v) in &state.map {
            out.extend_from_slice(&k.to_le_bytes());
            out.extend_from_slice(&v.to_le_bytes());
        }
        // Small chunks, so that simulated snapshots cross chunk boundaries everywhere.
        Ok(Box::new(BytesReader::with_chunk_size(Bytes::from(out), 40)))
    }

    async fn restore(
        &self,
        applied: Offset,
        data: &mut dyn SnapshotReader,
    ) -> Result<(), StateMachineError> {
        let bad = |reason: &str| StateMachineError {
            offset: applied,
            reason: reason.into(),
        };
        let data = read_to_end(data, SNAPSHOT_LIMIT)
            .await
            .map_err(|e| bad(&e.to_string()))?;
        if data.len() < 16 || !(data.len() - 16).is_multiple_of(16) {
            return Err(bad("malformed snapshot"));
        }
        let word = |i: usize| u64::from_le_bytes(data[i..i + 8].try_into().unwrap());
        if word(0) != self.group.0 {
            let note = format!(
                "{} was given a snapshot of {} at offset {applied}",
                self.group,
                GroupId(word(0))
            );
            lock(&self.ledger).foreign.push(note);
            return Err(bad("the snapshot is another group's"));
        }
        if word(8) != applied.0 {
            return Err(bad("the snapshot covers another offset"));
        }
        let map = (16..data.len())
            .step_by(16)
            .map(|i| (word(i), word(i + 8)))
            .collect();
        *lock(&self.state) = State { next: applied, map };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tagged_writes_round_trip() {
        for op in [
            KvOp::Incr { key: 3 },
            KvOp::Write { key: 10, value: 77 },
            KvOp::Cas {
                key: 11,
                expected: 5,
                new: 9,
            },
        ] {
            let t = Tagged {
                group: GroupId(7),
                id: 42,
                op,
            };
            assert_eq!(Tagged::decode(&t.encode()), Some(t));
        }
        assert_eq!(Tagged::decode(b"short"), None);
    }

    /// Goal: a state machine notes a record and a snapshot of another group instead of taking
    /// them in.
    #[tokio::test]
    async fn another_groups_record_or_snapshot_is_noted() {
        let ledger = Arc::new(Mutex::new(Ledger::default()));
        let kv = Kv::new(GroupId(1), ledger.clone());
        let mine = Tagged {
            group: GroupId(1),
            id: 1,
            op: KvOp::Write { key: 10, value: 5 },
        };
        let theirs = Tagged {
            group: GroupId(2),
            id: 2,
            op: KvOp::Write { key: 10, value: 9 },
        };
        let records: Vec<Record> = [mine, theirs]
            .iter()
            .enumerate()
            .map(|(i, t)| Record {
                offset: Offset(i as u64),
                epoch: crate::types::Epoch(1),
                kind: RecordKind::Data,
                payload: t.encode(),
            })
            .collect();
        kv.apply(&records, &mut Vec::new()).await.unwrap();
        assert_eq!(kv.get(10), 5, "the foreign write was not applied");
        assert_eq!(lock(&ledger).foreign.len(), 1);

        let other = Kv::new(GroupId(2), Arc::default());
        let mut snapshot = kv.snapshot().await.unwrap();
        assert!(other.restore(Offset(2), &mut *snapshot).await.is_err());
        let mut snapshot = kv.snapshot().await.unwrap();
        let same = Kv::new(GroupId(1), Arc::default());
        same.restore(Offset(2), &mut *snapshot).await.unwrap();
        assert_eq!(same.get(10), 5);
    }
}
