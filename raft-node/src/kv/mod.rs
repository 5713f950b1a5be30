//! The replicated key-value state machine: the write commands as log records, and the map they
//! build: strings, hashes, lists, sets and sorted sets, each key with an optional expiry.
//!
//! # Record format
//!
//! A data record's payload is `version (u8) | stamp | opcode (u8) | fields`, where byte
//! strings are a varint length and the bytes, integers are zig-zag varints and floats their 8
//! bits. This build writes [`command::CMD_VERSION`] 3, whose stamp is 8 bytes little-endian
//! (so the leader overwrites it in place), and still reads versions 1 and 2 (a varint stamp);
//! an unknown version or opcode stops the replica (the state machine error stops the driver)
//! instead of letting it diverge from replicas that understand it.
//!
//! # Expiry is deterministic
//!
//! The leader stamps every record with its clock when it proposes it (`leader_clock`; bounded
//! and never going back). Every replica keeps a logical clock: the largest stamp applied so
//! far. Relative expiries travel as a duration and become `clock + duration` when applied
//! (version 3; older records carry absolute times computed by their proposer, applied as they
//! were). Applying a record first drops every key whose expiry is at or before the logical
//! clock, so the map after each record is the same on every replica. Expiry is per key,
//! whatever the type of its value.
//!
//! Reads judge expiry by the same logical clock, never by the local wall clock, so replicas
//! that applied the same records answer alike; the leader's stamp-only ticks move the clock
//! while keys have an expiry and nothing is written.
//!
//! # Versions and WATCH
//!
//! Every key carries the offset of the last record that changed it, and every bucket of key
//! hashes the offset of the last record that removed a key of it (a deleted key has no entry
//! left to carry a version). `WATCH` remembers, per key, the applied offset `W` of the map it
//! was served from (after the connection's read barrier); `EXEC` carries these `(key, W)` pairs
//! in its one record, and every replica aborts the transaction (a null reply, nothing applied)
//! if a watched key was changed by a record at or after `W`: its version is `>= W`, or it is
//! absent and its bucket saw a removal at or after `W`. The decision reads only replicated
//! state at the record's offset, so the leader and every follower agree. A key that expires
//! (by the record's own clock too) counts as removed, as in Redis 6.0.9 and later. A removal
//! of another key of the same bucket may abort a transaction that watched an absent key: a
//! spurious abort is allowed by `WATCH`'s contract, a missed change is not.
//!
//! # Responses
//!
//! The response of each record is its reply, already encoded by [`Reply::to_response`], which
//! the server re-encodes for the connection's protocol.

mod command;
mod hash;
mod key_table;
mod keyspace;
mod list;
mod memory;
mod set;
mod snapshot;
mod store;
mod strings;
mod transaction;
mod wire;
mod zset;

#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;
use bytes::Bytes;
use raft_core::io::{SnapshotReader, StateMachine, StateMachineError};
use raft_core::{Offset, Record, RecordKind};

pub use self::command::{
    decode, encode, restamp_owned, stamp_of, Command, ExpireCond, Expiry, Float, SetCond,
    EXPIRY_MAX_MS,
};
pub use self::hash::{HashCmd, HashRead};
pub use self::keyspace::glob_match;
pub use self::list::{ListCmd, ListRead};
pub use self::set::{SetCmd, SetRead};
use self::store::Store;
pub use self::transaction::{TxOp, TxRead};
pub use self::zset::{LexBound, ScoreBound, ZAddFlags, ZBy, ZRange, ZSetCmd, ZSetRead};
use crate::resp::Reply;

/// The in-memory key-value map, rebuilt at every start from the latest snapshot and the log
/// after it (the driver restores the snapshot, then replays from [`StateMachine::applied`]).
#[derive(Default)]
pub struct Kv {
    store: Mutex<Store>,
    /// The replicated clock and when this replica applied the record that last moved it
    /// (local, not replicated: the leader clock's bound counts from it). Kept apart from the
    /// map's lock, which a long read may hold, because the driver's task reads it for every
    /// record the leader proposes.
    clock: Mutex<(u64, Option<std::time::Instant>)>,
    /// The key table's estimated size after the last apply or restore (see `memory`), read
    /// without the map's lock by every write a client sends while `maxmemory` is set.
    dataset_bytes: AtomicU64,
}

impl Kv {
    /// An empty map.
    pub fn new() -> Kv {
        Kv::default()
    }

    fn lock(&self) -> MutexGuard<'_, Store> {
        // Every update under this lock completes before anything that could panic, so a
        // poisoned lock still guards a consistent map.
        self.store.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The string value of `key`, if it is live by the replicated clock.
    #[cfg(test)]
    pub fn get(&self, key: &[u8]) -> Option<Bytes> {
        let s = self.lock();
        s.read_str(key).ok().flatten().cloned()
    }

    /// The remaining time to live of `key` in milliseconds: -2 if absent, -1 if no expiry.
    #[cfg(test)]
    pub fn pttl(&self, key: &[u8]) -> i64 {
        match self.read(&TxRead::Ttl(Bytes::copy_from_slice(key), true)) {
            Reply::Int(n) => n,
            other => panic!("PTTL answered {other:?}"),
        }
    }

    /// Answers a read of the map, judging expiry by the replicated clock.
    pub fn read(&self, r: &TxRead) -> Reply {
        self.lock().read(r)
    }

    /// The live keys matching the glob `pattern`, sorted (`KEYS`).
    pub fn keys(&self, pattern: &[u8]) -> Vec<Bytes> {
        let s = self.lock();
        let mut keys: Vec<Bytes> = s
            .live_keys()
            .map(|(k, _)| k)
            .filter(|k| keyspace::glob_match(pattern, k))
            .cloned()
            .collect();
        keys.sort();
        keys
    }

    /// One `SCAN` step: the next cursor (0 at the end) and the keys found (see `keyspace`),
    /// only those holding a `type_name` value if given.
    pub fn scan(
        &self,
        cursor: u64,
        pattern: Option<&[u8]>,
        count: usize,
        type_name: Option<&str>,
    ) -> (u64, Vec<Bytes>) {
        let s = self.lock();
        let (next, mut keys) =
            keyspace::scan_step(s.live_keys().map(|(k, _)| k), cursor, pattern, count);
        if let Some(t) = type_name {
            keys.retain(|k| s.map.get(k).is_some_and(|e| e.value.type_name() == t));
        }
        (next, keys)
    }

    /// `MEMORY USAGE`: the estimated bytes of `key` if it is live (see `memory`), measuring at
    /// most `samples` elements of a collection (0: all).
    pub fn memory_usage(&self, key: &[u8], samples: usize) -> Option<u64> {
        let s = self.lock();
        let (k, _) = s.map.get_key_value(key)?;
        let entry = s.live(key)?;
        Some(memory::usage(k.len(), entry, samples))
    }

    /// The estimated bytes of the whole map: the sum of every key's `MEMORY USAGE` estimate
    /// (at its default samples) as of the last record applied, kept up to date as keys change.
    pub fn dataset_bytes(&self) -> u64 {
        self.dataset_bytes.load(Ordering::Relaxed)
    }

    /// Live keys.
    pub fn dbsize(&self) -> i64 {
        self.lock().dbsize()
    }

    /// The replicated clock (ms since the epoch, 0 before any stamp) and when this replica
    /// applied the record that set it.
    pub fn clock(&self) -> (u64, Option<std::time::Instant>) {
        *self.clock.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records that the replicated clock moved to `clock_ms` now.
    fn publish_clock(&self, clock_ms: u64) {
        *self.clock.lock().unwrap_or_else(|e| e.into_inner()) =
            (clock_ms, Some(std::time::Instant::now()));
    }

    /// Whether some key has an expiry (due or not).
    pub fn has_expiries(&self) -> bool {
        !self.lock().expiries.is_empty()
    }

    /// `RAFT DIGEST`: the offset after the last applied record and a digest of the state
    /// there (see `snapshot::digest`). Replicas at the same offset must have the same digest.
    pub fn digest(&self) -> (Offset, u64) {
        let (applied, capture) = {
            let s = self.lock();
            (s.applied, snapshot::capture(&s))
        };
        (applied, snapshot::digest(&capture))
    }

    /// The offset after the last applied record.
    pub fn applied(&self) -> Offset {
        self.lock().applied
    }
}

/// Redis's integer rule: an optional `-` and decimal digits, no spaces, no `+`, fits an `i64`.
pub fn parse_i64(b: &[u8]) -> Option<i64> {
    if b.is_empty() || b.len() > 20 || !matches!(b[0], b'-' | b'0'..=b'9') {
        return None;
    }
    std::str::from_utf8(b).ok()?.parse().ok()
}

/// Redis's float rule (`strtod` over the whole argument): decimal or exponent notation and
/// `inf`/`-inf`; no spaces, and never NaN.
pub fn parse_f64(b: &[u8]) -> Option<f64> {
    if b.is_empty() || b.len() > 128 {
        return None;
    }
    let v: f64 = std::str::from_utf8(b).ok()?.parse().ok()?;
    (!v.is_nan()).then_some(v)
}

#[async_trait]
impl StateMachine for Kv {
    async fn applied(&self) -> Offset {
        Kv::applied(self)
    }

    async fn apply(
        &self,
        records: &[Record],
        responses: &mut Vec<Bytes>,
    ) -> Result<(), StateMachineError> {
        let mut s = self.lock();
        let clock_before = s.clock_ms;
        for r in records {
            if r.offset < s.applied {
                // Already applied in this process: the driver never does this, but replaying a
                // record twice would double an INCR.
                responses.push(Bytes::new());
                continue;
            }
            if r.kind != RecordKind::Data {
                responses.push(Bytes::new());
                s.applied = r.offset.next();
                continue;
            }
            let (ts, cmd) = decode(&r.payload).map_err(|e| StateMachineError {
                offset: r.offset,
                reason: e.0,
            })?;
            s.offset = r.offset.0;
            if r.payload[0] >= command::CMD_VERSION_V2 && s.exact_from.is_none() {
                s.exact_from = Some(r.offset.0);
            }
            let reply = s.apply(ts, cmd);
            s.applied = r.offset.next();
            responses.push(reply.to_response());
        }
        if s.clock_ms != clock_before {
            self.publish_clock(s.clock_ms);
        }
        self.dataset_bytes.store(s.map.bytes(), Ordering::Relaxed);
        Ok(())
    }

    async fn snapshot(&self) -> Result<Box<dyn SnapshotReader>, StateMachineError> {
        // Under the lock only for the capture; encoded on a thread of its own.
        let capture = snapshot::capture(&self.lock());
        Ok(Box::new(snapshot::EncodingReader::spawn(capture)))
    }

    async fn restore(
        &self,
        applied: Offset,
        data: &mut dyn SnapshotReader,
    ) -> Result<(), StateMachineError> {
        // Decoded beside the live map, which is replaced only once the whole stream decoded.
        let store =
            snapshot::decode_stream(applied, data)
                .await
                .map_err(|e| StateMachineError {
                    offset: applied,
                    reason: format!("bad snapshot: {}", e.0),
                })?;
        let clock = store.clock_ms;
        self.dataset_bytes
            .store(store.map.bytes(), Ordering::Relaxed);
        *self.lock() = store;
        self.publish_clock(clock);
        Ok(())
    }
}
