//! The replicated key-value state machine: the write commands as log records, and the map they
//! build.
//!
//! # Record format
//!
//! A data record's payload is `version (u8) | timestamp_ms (varint) | opcode (u8) | fields`,
//! where byte strings are a varint length and the bytes, and integers are zig-zag varints.
//! [`CMD_VERSION`] is the only version; an unknown version stops the replica (the state machine
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

use std::collections::{BTreeSet, HashMap};
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;
use bytes::{BufMut, Bytes, BytesMut};
use raft_core::io::{StateMachine, StateMachineError};
use raft_core::{Offset, Record, RecordKind};

use crate::resp::Reply;

/// The version byte of every command record.
pub const CMD_VERSION: u8 = 1;

/// Which existing-key condition a SET carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetCond {
    /// Always set.
    Always,
    /// Only if the key does not exist (`NX`).
    IfAbsent,
    /// Only if the key exists (`XX`).
    IfPresent,
}

/// A write, as proposed and replicated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// `SET key value [NX|XX] [GET] [EX|PX|EXAT|PXAT|KEEPTTL]`.
    Set {
        /// The key.
        key: Bytes,
        /// The new value.
        value: Bytes,
        /// NX / XX.
        cond: SetCond,
        /// Reply with the old value.
        get: bool,
        /// Absolute expiry in milliseconds since the Unix epoch.
        expire_at_ms: Option<u64>,
        /// Keep the key's current expiry.
        keep_ttl: bool,
    },
    /// `DEL key...`.
    Del {
        /// The keys.
        keys: Vec<Bytes>,
    },
    /// `INCR`, `INCRBY`, `DECR`, `DECRBY`.
    IncrBy {
        /// The key.
        key: Bytes,
        /// The amount added.
        delta: i64,
    },
    /// `MSET key value...`.
    MSet {
        /// The pairs, in order.
        pairs: Vec<(Bytes, Bytes)>,
    },
    /// `APPEND key value`.
    Append {
        /// The key.
        key: Bytes,
        /// The suffix.
        value: Bytes,
    },
    /// `CAS key expected new`: set `new` if the current value equals `expected`.
    Cas {
        /// The key.
        key: Bytes,
        /// The value the key must hold.
        expected: Bytes,
        /// The value it gets.
        new: Bytes,
    },
}

const OP_SET: u8 = 1;
const OP_DEL: u8 = 2;
const OP_INCRBY: u8 = 3;
const OP_MSET: u8 = 4;
const OP_APPEND: u8 = 5;
const OP_CAS: u8 = 6;

const SET_NX: u8 = 1;
const SET_XX: u8 = 2;
const SET_GET: u8 = 4;
const SET_EXPIRE: u8 = 8;
const SET_KEEPTTL: u8 = 16;

/// Encodes `cmd` stamped with the proposer's time `now_ms`.
pub fn encode(now_ms: u64, cmd: &Command) -> Bytes {
    let mut out = BytesMut::with_capacity(32);
    out.put_u8(CMD_VERSION);
    put_varint(&mut out, now_ms);
    match cmd {
        Command::Set {
            key,
            value,
            cond,
            get,
            expire_at_ms,
            keep_ttl,
        } => {
            out.put_u8(OP_SET);
            let mut flags = match cond {
                SetCond::Always => 0,
                SetCond::IfAbsent => SET_NX,
                SetCond::IfPresent => SET_XX,
            };
            if *get {
                flags |= SET_GET;
            }
            if expire_at_ms.is_some() {
                flags |= SET_EXPIRE;
            }
            if *keep_ttl {
                flags |= SET_KEEPTTL;
            }
            out.put_u8(flags);
            put_bytes(&mut out, key);
            put_bytes(&mut out, value);
            if let Some(at) = expire_at_ms {
                put_varint(&mut out, *at);
            }
        }
        Command::Del { keys } => {
            out.put_u8(OP_DEL);
            put_varint(&mut out, keys.len() as u64);
            for k in keys {
                put_bytes(&mut out, k);
            }
        }
        Command::IncrBy { key, delta } => {
            out.put_u8(OP_INCRBY);
            put_bytes(&mut out, key);
            put_varint(&mut out, zigzag(*delta));
        }
        Command::MSet { pairs } => {
            out.put_u8(OP_MSET);
            put_varint(&mut out, pairs.len() as u64);
            for (k, v) in pairs {
                put_bytes(&mut out, k);
                put_bytes(&mut out, v);
            }
        }
        Command::Append { key, value } => {
            out.put_u8(OP_APPEND);
            put_bytes(&mut out, key);
            put_bytes(&mut out, value);
        }
        Command::Cas { key, expected, new } => {
            out.put_u8(OP_CAS);
            put_bytes(&mut out, key);
            put_bytes(&mut out, expected);
            put_bytes(&mut out, new);
        }
    }
    out.freeze()
}

/// Why a payload is not a command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodeError(pub String);

/// Decodes a payload written by [`encode`]: `(timestamp_ms, command)`.
pub fn decode(payload: &Bytes) -> Result<(u64, Command), DecodeError> {
    let mut r = Reader {
        buf: payload,
        pos: 0,
    };
    let version = r.u8()?;
    if version != CMD_VERSION {
        return Err(DecodeError(format!(
            "command version {version} is not supported (this build reads {CMD_VERSION})"
        )));
    }
    let ts = r.varint()?;
    let cmd = match r.u8()? {
        OP_SET => {
            let flags = r.u8()?;
            let key = r.bytes()?;
            let value = r.bytes()?;
            let expire_at_ms = if flags & SET_EXPIRE != 0 {
                Some(r.varint()?)
            } else {
                None
            };
            let cond = match flags & (SET_NX | SET_XX) {
                0 => SetCond::Always,
                SET_NX => SetCond::IfAbsent,
                SET_XX => SetCond::IfPresent,
                _ => return Err(DecodeError("SET with both NX and XX".into())),
            };
            Command::Set {
                key,
                value,
                cond,
                get: flags & SET_GET != 0,
                expire_at_ms,
                keep_ttl: flags & SET_KEEPTTL != 0,
            }
        }
        OP_DEL => {
            let n = r.count()?;
            let keys = (0..n).map(|_| r.bytes()).collect::<Result<_, _>>()?;
            Command::Del { keys }
        }
        OP_INCRBY => Command::IncrBy {
            key: r.bytes()?,
            delta: unzigzag(r.varint()?),
        },
        OP_MSET => {
            let n = r.count()?;
            let pairs = (0..n)
                .map(|_| Ok((r.bytes()?, r.bytes()?)))
                .collect::<Result<_, DecodeError>>()?;
            Command::MSet { pairs }
        }
        OP_APPEND => Command::Append {
            key: r.bytes()?,
            value: r.bytes()?,
        },
        OP_CAS => Command::Cas {
            key: r.bytes()?,
            expected: r.bytes()?,
            new: r.bytes()?,
        },
        op => return Err(DecodeError(format!("unknown opcode {op}"))),
    };
    if r.pos != payload.len() {
        return Err(DecodeError("trailing bytes after the command".into()));
    }
    Ok((ts, cmd))
}

fn put_varint(out: &mut BytesMut, mut v: u64) {
    while v >= 0x80 {
        out.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    out.put_u8(v as u8);
}

fn put_bytes(out: &mut BytesMut, b: &[u8]) {
    put_varint(out, b.len() as u64);
    out.put_slice(b);
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

struct Reader<'a> {
    buf: &'a Bytes,
    pos: usize,
}

impl Reader<'_> {
    fn u8(&mut self) -> Result<u8, DecodeError> {
        let b = *self
            .buf
            .get(self.pos)
            .ok_or_else(|| DecodeError("truncated command".into()))?;
        self.pos += 1;
        Ok(b)
    }

    fn varint(&mut self) -> Result<u64, DecodeError> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.u8()?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(DecodeError("varint longer than 10 bytes".into()))
    }

    /// A count of items that each take at least one byte: bounded by what is left.
    fn count(&mut self) -> Result<usize, DecodeError> {
        let n = self.varint()?;
        if n > (self.buf.len() - self.pos) as u64 {
            return Err(DecodeError("item count larger than the payload".into()));
        }
        Ok(n as usize)
    }

    fn bytes(&mut self) -> Result<Bytes, DecodeError> {
        let len = self.varint()?;
        let left = (self.buf.len() - self.pos) as u64;
        if len > left {
            return Err(DecodeError("byte string longer than the payload".into()));
        }
        let start = self.pos;
        self.pos += len as usize;
        Ok(self.buf.slice(start..self.pos))
    }
}

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
    pub fn get(&self, key: &[u8], now_ms: u64) -> Option<Bytes> {
        let s = self.lock();
        s.live(key, now_ms).map(|e| e.value.clone())
    }

    /// The values of `keys`.
    pub fn mget(&self, keys: &[Bytes], now_ms: u64) -> Vec<Option<Bytes>> {
        let s = self.lock();
        keys.iter()
            .map(|k| s.live(k, now_ms).map(|e| e.value.clone()))
            .collect()
    }

    /// How many of `keys` exist (a key named twice counts twice, as in Redis).
    pub fn exists(&self, keys: &[Bytes], now_ms: u64) -> i64 {
        let s = self.lock();
        keys.iter().filter(|k| s.live(k, now_ms).is_some()).count() as i64
    }

    /// The remaining time to live of `key` in milliseconds: -2 if absent, -1 if no expiry.
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
