//! The replicated key-value state machine: the write commands as log records, and the map they
//! build.
//!
//! # Record format
//!
//! A data record's payload is `version (u8) | timestamp_ms (varint) | opcode (u8) | fields`,
//! where byte strings are a varint length and the bytes, and integers are zig-zag varints.
//! [`command::CMD_VERSION`] is the only version; an unknown version stops the replica (the state machine
//! error stops the driver) instead of letting it diverge from replicas that understand it.
//!
//! # Expiry is deterministic
//!
//! The node that proposes a write stamps its wall-clock time into the record, and `EX`/`PX`
//! become an absolute expiry time computed from that stamp before proposing. Every replica keeps
//! a logical clock: the largest stamp applied so far (it never goes back, even if a new leader's
//! clock is behind). Applying a record first drops every key whose expiry is at or before the
//! logical clock, so the map after each record is the same on every replica.
//!
//! Reads may additionally treat a key as gone once the local wall clock passes its expiry (as a
//! Redis replica does); that changes what a read reports, never the replicated state.
//!
//! # Responses
//!
//! The response of each record is its RESP2 reply, already encoded, which the server sends as
//! is.

mod command;
mod keyspace;
mod transaction;

use std::collections::{BTreeSet, HashMap};
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;
use bytes::{BufMut, Bytes, BytesMut};
use raft_core::io::{StateMachine, StateMachineError};
use raft_core::{Offset, Record, RecordKind};

pub use self::command::{decode, encode, Command, ExpireCond, SetCond};
use self::command::{put_bytes, put_varint, Reader};
pub use self::transaction::{TxOp, TxRead};
use crate::resp::Reply;

#[derive(Clone, Debug)]
struct Entry {
    value: Bytes,
    expire_at_ms: Option<u64>,
}

#[derive(Default)]
struct Store {
    map: HashMap<Bytes, Entry>,
    /// `(expiry, key)` of every key with an expiry.
    expiries: BTreeSet<(u64, Bytes)>,
    /// The largest timestamp applied: the replicated clock expiry is judged by.
    clock_ms: u64,
    applied: Offset,
}

/// The in-memory key-value map, rebuilt at every start from the latest snapshot and the log
/// after it (the driver restores the snapshot, then replays from [`StateMachine::applied`]).
#[derive(Default)]
pub struct Kv {
    store: Mutex<Store>,
}

/// The reply to `INCR` on a value that is not an integer.
const NOT_INTEGER: &str = "value is not an integer or out of range";

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

    /// The value of `key`, if it is live at `now_ms` (wall clock) and the replicated clock.
    #[cfg(test)]
    pub fn get(&self, key: &[u8], now_ms: u64) -> Option<Bytes> {
        let s = self.lock();
        s.live(key, now_ms).map(|e| e.value.clone())
    }

    /// The remaining time to live of `key` in milliseconds: -2 if absent, -1 if no expiry.
    #[cfg(test)]
    pub fn pttl(&self, key: &[u8], now_ms: u64) -> i64 {
        let s = self.lock();
        match s.live(key, now_ms) {
            None => -2,
            Some(Entry {
                expire_at_ms: None, ..
            }) => -1,
            Some(Entry {
                expire_at_ms: Some(at),
                ..
            }) => at.saturating_sub(now_ms.max(s.clock_ms)) as i64,
        }
    }

    /// Answers a read of the map at `now_ms` (wall clock; the replicated clock too).
    pub fn read(&self, r: &TxRead, now_ms: u64) -> Reply {
        self.lock().read(r, now_ms)
    }

    /// The live keys matching the glob `pattern`, sorted (`KEYS`).
    pub fn keys(&self, pattern: &[u8], now_ms: u64) -> Vec<Bytes> {
        let s = self.lock();
        let mut keys: Vec<Bytes> = s
            .live_keys(now_ms)
            .filter(|k| keyspace::glob_match(pattern, k))
            .cloned()
            .collect();
        keys.sort();
        keys
    }

    /// One `SCAN` step: the next cursor (0 at the end) and the keys found (see `keyspace`).
    pub fn scan(
        &self,
        cursor: u64,
        pattern: Option<&[u8]>,
        count: usize,
        now_ms: u64,
    ) -> (u64, Vec<Bytes>) {
        let s = self.lock();
        keyspace::scan_step(s.live_keys(now_ms), cursor, pattern, count)
    }

    /// Live keys.
    pub fn dbsize(&self, now_ms: u64) -> i64 {
        let s = self.lock();
        let now = now_ms.max(s.clock_ms);
        let expired = s.expiries.range(..(now + 1, Bytes::new())).count();
        (s.map.len() - expired.min(s.map.len())) as i64
    }

    /// The offset after the last applied record.
    pub fn applied(&self) -> Offset {
        self.lock().applied
    }
}

impl Store {
    fn read(&self, r: &TxRead, now_ms: u64) -> Reply {
        let value = |k: &[u8]| self.live(k, now_ms).map(|e| e.value.clone());
        match r {
            TxRead::Get(k) => value(k).map_or(Reply::Nil, Reply::Bulk),
            TxRead::MGet(keys) => Reply::Array(
                keys.iter()
                    .map(|k| value(k).map_or(Reply::Nil, Reply::Bulk))
                    .collect(),
            ),
            TxRead::Exists(keys) => Reply::Int(
                keys.iter()
                    .filter(|k| self.live(k, now_ms).is_some())
                    .count() as i64,
            ),
            TxRead::StrLen(k) => Reply::Int(value(k).map_or(0, |v| v.len() as i64)),
            TxRead::Ttl(k, ms) => {
                let t = match self.live(k, now_ms) {
                    None => -2,
                    Some(Entry {
                        expire_at_ms: None, ..
                    }) => -1,
                    Some(Entry {
                        expire_at_ms: Some(at),
                        ..
                    }) => at.saturating_sub(now_ms.max(self.clock_ms)) as i64,
                };
                Reply::Int(if *ms || t < 0 { t } else { (t + 999) / 1000 })
            }
            TxRead::Type(k) => Reply::Simple(
                if self.live(k, now_ms).is_some() {
                    "string"
                } else {
                    "none"
                }
                .into(),
            ),
            TxRead::DbSize => {
                let now = now_ms.max(self.clock_ms);
                let expired = self.expiries.range(..(now + 1, Bytes::new())).count();
                Reply::Int((self.map.len() - expired.min(self.map.len())) as i64)
            }
        }
    }

    fn live_keys(&self, now_ms: u64) -> impl Iterator<Item = &Bytes> {
        let now = now_ms.max(self.clock_ms);
        self.map
            .iter()
            .filter(move |(_, e)| e.expire_at_ms.is_none_or(|at| at > now))
            .map(|(k, _)| k)
    }

    fn live(&self, key: &[u8], now_ms: u64) -> Option<&Entry> {
        let now = now_ms.max(self.clock_ms);
        self.map
            .get(key)
            .filter(|e| e.expire_at_ms.is_none_or(|at| at > now))
    }

    fn expire_due(&mut self) {
        while let Some((at, _)) = self.expiries.first() {
            if *at > self.clock_ms {
                break;
            }
            if let Some((_, key)) = self.expiries.pop_first() {
                self.map.remove(&key);
            }
        }
    }

    fn remove(&mut self, key: &[u8]) -> Option<Entry> {
        let old = self.map.remove(key)?;
        if let Some(at) = old.expire_at_ms {
            self.expiries.remove(&(at, Bytes::copy_from_slice(key)));
        }
        Some(old)
    }

    fn put(&mut self, key: Bytes, value: Bytes, expire_at_ms: Option<u64>) {
        self.remove(&key);
        if let Some(at) = expire_at_ms {
            if at <= self.clock_ms {
                // Already expired by the replicated clock: the write leaves no key.
                return;
            }
            self.expiries.insert((at, key.clone()));
        }
        self.map.insert(
            key,
            Entry {
                value,
                expire_at_ms,
            },
        );
    }

    fn apply(&mut self, ts_ms: u64, cmd: Command) -> Reply {
        self.clock_ms = self.clock_ms.max(ts_ms);
        self.expire_due();
        match cmd {
            Command::Set {
                key,
                value,
                cond,
                get,
                expire_at_ms,
                keep_ttl,
            } => {
                let old = self.map.get(&key).cloned();
                let allowed = match cond {
                    SetCond::Always => true,
                    SetCond::IfAbsent => old.is_none(),
                    SetCond::IfPresent => old.is_some(),
                };
                if allowed {
                    let expiry = if keep_ttl {
                        old.as_ref().and_then(|e| e.expire_at_ms)
                    } else {
                        expire_at_ms
                    };
                    self.put(key, value, expiry);
                }
                match (get, allowed) {
                    (true, _) => old.map_or(Reply::Nil, |e| Reply::Bulk(e.value)),
                    (false, true) => Reply::ok(),
                    (false, false) => Reply::Nil,
                }
            }
            Command::Del { keys } => {
                Reply::Int(keys.iter().filter(|k| self.remove(k).is_some()).count() as i64)
            }
            Command::IncrBy { key, delta } => {
                let (current, expiry) = match self.map.get(&key) {
                    None => (0, None),
                    Some(e) => match parse_i64(&e.value) {
                        Some(n) => (n, e.expire_at_ms),
                        None => return Reply::err(NOT_INTEGER),
                    },
                };
                let Some(next) = current.checked_add(delta) else {
                    return Reply::err("increment or decrement would overflow");
                };
                self.put(key, Bytes::from(next.to_string()), expiry);
                Reply::Int(next)
            }
            Command::MSet { pairs } => {
                for (k, v) in pairs {
                    self.put(k, v, None);
                }
                Reply::ok()
            }
            Command::Append { key, value } => {
                let (mut joined, expiry) = match self.map.get(&key) {
                    None => (BytesMut::new(), None),
                    Some(e) => (BytesMut::from(&e.value[..]), e.expire_at_ms),
                };
                joined.extend_from_slice(&value);
                let len = joined.len() as i64;
                self.put(key, joined.freeze(), expiry);
                Reply::Int(len)
            }
            Command::SetNx { key, value } => {
                if self.map.contains_key(&key) {
                    return Reply::Int(0);
                }
                self.put(key, value, None);
                Reply::Int(1)
            }
            Command::GetDel { key } => self
                .remove(&key)
                .map_or(Reply::Nil, |e| Reply::Bulk(e.value)),
            Command::MSetNx { pairs } => {
                if pairs.iter().any(|(k, _)| self.map.contains_key(k)) {
                    return Reply::Int(0);
                }
                for (k, v) in pairs {
                    self.put(k, v, None);
                }
                Reply::Int(1)
            }
            Command::Multi { ops } => {
                // One record: every operation sees the map as the previous one left it.
                let replies = ops
                    .into_iter()
                    .map(|op| match op {
                        TxOp::Write(cmd) => self.apply(ts_ms, cmd),
                        TxOp::Read(r) => self.read(&r, ts_ms),
                        TxOp::Reply(b) => Reply::Raw(b),
                    })
                    .collect();
                Reply::Array(replies)
            }
            Command::Expire { key, at_ms, cond } => {
                let Some(current) = self.map.get(&key).map(|e| e.expire_at_ms) else {
                    return Reply::Int(0);
                };
                let Some(at) = at_ms else {
                    // PERSIST: 1 if there was an expiry to remove.
                    let Some(_) = current else {
                        return Reply::Int(0);
                    };
                    let entry = self.remove(&key).expect("the key is present");
                    self.put(key, entry.value, None);
                    return Reply::Int(1);
                };
                let allowed = match (cond, current) {
                    (ExpireCond::Always, _) => true,
                    (ExpireCond::IfNone, c) => c.is_none(),
                    (ExpireCond::IfSome, c) => c.is_some(),
                    (ExpireCond::IfLater, c) => c.is_some_and(|c| at > c),
                    (ExpireCond::IfEarlier, c) => c.is_none_or(|c| at < c),
                };
                if !allowed {
                    return Reply::Int(0);
                }
                // A time already past by the replicated clock deletes the key (as Redis does).
                let entry = self.remove(&key).expect("the key is present");
                self.put(key, entry.value, Some(at));
                Reply::Int(1)
            }
            Command::Cas { key, expected, new } => match self.map.get(&key) {
                Some(e) if e.value == expected => {
                    let expiry = e.expire_at_ms;
                    self.put(key, new, expiry);
                    Reply::Int(1)
                }
                _ => Reply::Int(0),
            },
        }
    }
}

/// Redis's integer rule: an optional `-` and decimal digits, no spaces, no `+`, fits an `i64`.
pub fn parse_i64(b: &[u8]) -> Option<i64> {
    if b.is_empty() || b.len() > 20 || !matches!(b[0], b'-' | b'0'..=b'9') {
        return None;
    }
    std::str::from_utf8(b).ok()?.parse().ok()
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
            let reply = s.apply(ts, cmd);
            s.applied = r.offset.next();
            responses.push(reply.to_bytes());
        }
        Ok(())
    }

    async fn snapshot(&self) -> Result<Bytes, StateMachineError> {
        let s = self.lock();
        let mut out = BytesMut::new();
        out.put_u8(SNAPSHOT_VERSION);
        put_varint(&mut out, s.applied.0);
        put_varint(&mut out, s.clock_ms);
        // Sorted, so that every replica writes the same bytes for the same state.
        let mut keys: Vec<&Bytes> = s.map.keys().collect();
        keys.sort();
        put_varint(&mut out, keys.len() as u64);
        for k in keys {
            let e = &s.map[k];
            put_bytes(&mut out, k);
            put_bytes(&mut out, &e.value);
            match e.expire_at_ms {
                Some(t) => {
                    out.put_u8(1);
                    put_varint(&mut out, t);
                }
                None => out.put_u8(0),
            }
        }
        Ok(out.freeze())
    }

    async fn restore(&self, applied: Offset, data: Bytes) -> Result<(), StateMachineError> {
        let bad = |reason: String| StateMachineError {
            offset: applied,
            reason: format!("bad snapshot: {reason}"),
        };
        let mut r = Reader { buf: &data, pos: 0 };
        let version = r.u8().map_err(|e| bad(e.0))?;
        if version != SNAPSHOT_VERSION {
            return Err(bad(format!(
                "version {version}, this build reads {SNAPSHOT_VERSION}"
            )));
        }
        let at = Offset(r.varint().map_err(|e| bad(e.0))?);
        if at != applied {
            return Err(bad(format!("it covers {at}, not {applied}")));
        }
        let mut store = Store {
            clock_ms: r.varint().map_err(|e| bad(e.0))?,
            applied,
            ..Store::default()
        };
        let count = r.count().map_err(|e| bad(e.0))?;
        for _ in 0..count {
            let key = r.bytes().map_err(|e| bad(e.0))?;
            let value = r.bytes().map_err(|e| bad(e.0))?;
            let expire_at_ms = match r.u8().map_err(|e| bad(e.0))? {
                0 => None,
                1 => Some(r.varint().map_err(|e| bad(e.0))?),
                t => return Err(bad(format!("expiry tag {t}"))),
            };
            if let Some(t) = expire_at_ms {
                store.expiries.insert((t, key.clone()));
            }
            store.map.insert(
                key,
                Entry {
                    value,
                    expire_at_ms,
                },
            );
        }
        if r.pos != data.len() {
            return Err(bad(format!("{} trailing bytes", data.len() - r.pos)));
        }
        *self.lock() = store;
        Ok(())
    }
}

/// The version of the key-value snapshot encoding.
const SNAPSHOT_VERSION: u8 = 1;

#[cfg(test)]
mod tests {
    use super::command::CMD_VERSION;
    use super::*;
    use raft_core::Epoch;

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    fn all_commands() -> Vec<Command> {
        vec![
            Command::Set {
                key: b("k"),
                value: b("v"),
                cond: SetCond::IfAbsent,
                get: true,
                expire_at_ms: Some(12345),
                keep_ttl: false,
            },
            Command::Del {
                keys: vec![b("a"), b("b")],
            },
            Command::IncrBy {
                key: b("n"),
                delta: -7,
            },
            Command::MSet {
                pairs: vec![(b("a"), b("1")), (b("b"), b(""))],
            },
            Command::Append {
                key: b("a"),
                value: b("xyz"),
            },
            Command::Cas {
                key: b("a"),
                expected: b("1xyz"),
                new: b("2"),
            },
            Command::Expire {
                key: b("a"),
                at_ms: Some(99_000),
                cond: ExpireCond::IfLater,
            },
            Command::Expire {
                key: b("a"),
                at_ms: None,
                cond: ExpireCond::Always,
            },
            Command::SetNx {
                key: b("s"),
                value: b("1"),
            },
            Command::GetDel { key: b("s") },
            Command::MSetNx {
                pairs: vec![(b("x"), b("1")), (b("y"), b("2"))],
            },
        ]
    }

    #[test]
    fn every_command_round_trips() {
        for cmd in all_commands() {
            let bytes = encode(99, &cmd);
            assert_eq!(bytes[0], CMD_VERSION);
            assert_eq!(decode(&bytes), Ok((99, cmd)));
        }
    }

    #[test]
    fn truncated_or_unknown_payloads_are_refused() {
        for cmd in all_commands() {
            let bytes = encode(1, &cmd);
            for cut in 0..bytes.len() {
                assert!(decode(&bytes.slice(..cut)).is_err());
            }
        }
        assert!(decode(&Bytes::from_static(&[2, 0, 1])).is_err());
        assert!(decode(&Bytes::from_static(&[1, 0, 99])).is_err());
    }

    fn apply(kv: &Kv, at: u64, ts: u64, cmd: Command) -> Bytes {
        let rec = Record {
            offset: Offset(at),
            epoch: Epoch(1),
            kind: RecordKind::Data,
            payload: encode(ts, &cmd),
        };
        let mut out = Vec::new();
        block_on(kv.apply(&[rec], &mut out)).unwrap();
        out.pop().unwrap()
    }

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn expiry_follows_the_replicated_clock() {
        let kv = Kv::new();
        let set = Command::Set {
            key: b("k"),
            value: b("v"),
            cond: SetCond::Always,
            get: false,
            expire_at_ms: Some(1_000),
            keep_ttl: false,
        };
        assert_eq!(&apply(&kv, 0, 500, set)[..], b"+OK\r\n");
        assert_eq!(kv.get(b"k", 0), Some(b("v")));
        assert_eq!(
            kv.get(b"k", 1_000),
            None,
            "a read past the expiry sees nothing"
        );
        assert_eq!(kv.dbsize(0), 1);
        // A later record stamped past the expiry removes the key on every replica.
        let incr = Command::IncrBy {
            key: b("n"),
            delta: 1,
        };
        assert_eq!(&apply(&kv, 1, 1_000, incr)[..], b":1\r\n");
        assert_eq!(kv.get(b"k", 0), None);
        assert_eq!(kv.dbsize(0), 1);
    }

    /// EXPIRE and PERSIST change only the expiry, follow their conditions (a key without an
    /// expiry counts as never expiring), and a time already past deletes the key.
    #[test]
    fn expire_persist_and_their_conditions() {
        let kv = Kv::new();
        let mut at = 0;
        let mut run = |ts: u64, cmd: Command| {
            at += 1;
            String::from_utf8(apply(&kv, at, ts, cmd).to_vec()).unwrap()
        };
        let set = |k: &str| Command::MSet {
            pairs: vec![(b(k), b("v"))],
        };
        let expire = |k: &str, at_ms: Option<u64>, cond| Command::Expire {
            key: b(k),
            at_ms,
            cond,
        };
        assert_eq!(
            run(100, expire("k", Some(5_000), ExpireCond::Always)),
            ":0\r\n",
            "no key"
        );
        run(100, set("k"));
        assert_eq!(
            run(100, expire("k", Some(9_000), ExpireCond::IfLater)),
            ":0\r\n",
            "GT on no expiry"
        );
        assert_eq!(
            run(100, expire("k", Some(9_000), ExpireCond::IfSome)),
            ":0\r\n"
        );
        assert_eq!(
            run(100, expire("k", Some(9_000), ExpireCond::IfEarlier)),
            ":1\r\n",
            "LT on no expiry"
        );
        assert_eq!(kv.pttl(b"k", 1_000), 8_000);
        assert_eq!(
            run(100, expire("k", Some(5_000), ExpireCond::IfNone)),
            ":0\r\n"
        );
        assert_eq!(
            run(100, expire("k", Some(5_000), ExpireCond::IfLater)),
            ":0\r\n"
        );
        assert_eq!(
            run(100, expire("k", Some(20_000), ExpireCond::IfLater)),
            ":1\r\n"
        );
        assert_eq!(kv.get(b"k", 1_000), Some(b("v")), "the value is untouched");
        assert_eq!(
            run(100, expire("k", None, ExpireCond::Always)),
            ":1\r\n",
            "PERSIST"
        );
        assert_eq!(kv.pttl(b"k", 1_000), -1);
        assert_eq!(
            run(100, expire("k", None, ExpireCond::Always)),
            ":0\r\n",
            "nothing to remove"
        );
        // Past by the replicated clock: deleted at once, on every replica alike.
        assert_eq!(
            run(30_000, expire("k", Some(29_000), ExpireCond::Always)),
            ":1\r\n"
        );
        assert_eq!(kv.get(b"k", 0), None);
        assert_eq!(kv.dbsize(0), 0);
    }

    /// A transaction applies as one record: its reads see its own earlier writes, and its
    /// reply is the array of every operation's reply.
    #[test]
    fn a_transaction_applies_at_once_with_its_reads() {
        let kv = Kv::new();
        let ops = vec![
            TxOp::Write(Command::IncrBy {
                key: b("n"),
                delta: 5,
            }),
            TxOp::Read(TxRead::Get(b("n"))),
            TxOp::Write(Command::Append {
                key: b("n"),
                value: b("x"),
            }),
            TxOp::Write(Command::IncrBy {
                key: b("n"),
                delta: 1,
            }),
            TxOp::Read(TxRead::MGet(vec![b("n"), b("absent")])),
            TxOp::Reply(Bytes::from_static(b"+PONG\r\n")),
        ];
        let cmd = Command::Multi { ops };
        let (ts, decoded) = decode(&encode(7, &cmd)).unwrap();
        assert_eq!((ts, &decoded), (7, &cmd), "a transaction round-trips");
        let reply = apply(&kv, 0, 100, cmd);
        assert_eq!(
            String::from_utf8(reply.to_vec()).unwrap(),
            "*6\r\n:5\r\n$1\r\n5\r\n:2\r\n-ERR value is not an integer or out of range\r\n\
             *2\r\n$2\r\n5x\r\n$-1\r\n+PONG\r\n",
            "an error inside a transaction fails that command only, as in Redis"
        );
        assert_eq!(kv.get(b"n", 0), Some(b("5x")));
    }

    #[test]
    fn incr_append_cas_and_conditions() {
        let kv = Kv::new();
        let set = |cond, get| Command::Set {
            key: b("k"),
            value: b("10"),
            cond,
            get,
            expire_at_ms: None,
            keep_ttl: false,
        };
        assert_eq!(
            &apply(&kv, 0, 1, set(SetCond::IfPresent, false))[..],
            b"$-1\r\n"
        );
        assert_eq!(
            &apply(&kv, 1, 1, set(SetCond::IfAbsent, false))[..],
            b"+OK\r\n"
        );
        assert_eq!(
            &apply(&kv, 2, 1, set(SetCond::IfAbsent, true))[..],
            b"$2\r\n10\r\n"
        );
        let incr = |d| Command::IncrBy {
            key: b("k"),
            delta: d,
        };
        assert_eq!(&apply(&kv, 3, 1, incr(5))[..], b":15\r\n");
        assert_eq!(
            &apply(&kv, 4, 1, incr(i64::MAX))[..],
            b"-ERR increment or decrement would overflow\r\n"
        );
        let append = Command::Append {
            key: b("k"),
            value: b("x"),
        };
        assert_eq!(&apply(&kv, 5, 1, append)[..], b":3\r\n");
        assert!(apply(&kv, 6, 1, incr(1)).starts_with(b"-ERR value is not an integer"));
        let cas = |e: &str, n: &str| Command::Cas {
            key: b("k"),
            expected: b(e),
            new: b(n),
        };
        assert_eq!(&apply(&kv, 7, 1, cas("nope", "y"))[..], b":0\r\n");
        assert_eq!(&apply(&kv, 8, 1, cas("15x", "y"))[..], b":1\r\n");
        assert_eq!(kv.get(b"k", 0), Some(b("y")));
        assert_eq!(kv.applied(), Offset(9));
    }
}
