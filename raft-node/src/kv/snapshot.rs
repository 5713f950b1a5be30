//! The snapshot encoding of the map.
//!
//! Version 2 (written): `2 | applied | clock_ms | exact_from (0: none, else offset + 1) |
//! removal buckets (count, then index and offset of each non-zero one) | key count | per key,
//! sorted: key | type (0 string, 1 hash, 2 list, 3 set, 4 zset) | value | expiry (0, or 1 and
//! the time) | version`. A string is its bytes; a hash, list or set is a count and its
//! elements (fields and values in turn) in their order; a sorted set is a count and
//! `score (f64 bits, LE) | member`, lowest first.
//!
//! Version 1 (still read): `1 | applied | clock_ms | key count | per key: key | value (a
//! string) | expiry`. Its keys get version 0 and no exact versions (see `Store::exact_from`).
//!
//! Keys are sorted and collections keep their order, so replicas with the same state write
//! the same bytes.
//!
//! Decoding a large snapshot writes progress lines (the driver announces the restore and times
//! it; see `raft_core::driver::progress`).

use bytes::{BufMut, Bytes, BytesMut};
use raft_core::driver::{Progress, ProgressPacing};
use raft_core::Offset;

use super::command::{put_bytes, put_f64, put_varint, DecodeError, Reader};
use super::store::{Entry, Hash, List, Set, Store, Value, REMOVED_BUCKETS};
use super::zset::{Score, ZSet};

/// The version of the snapshot encoding this build writes.
pub(super) const SNAPSHOT_VERSION: u8 = 2;

/// The version written before typed values, still read.
pub(super) const SNAPSHOT_VERSION_V1: u8 = 1;

const T_STR: u8 = 0;
const T_HASH: u8 = 1;
const T_LIST: u8 = 2;
const T_SET: u8 = 3;
const T_ZSET: u8 = 4;

/// Keys decoded between two looks at the clock for progress lines.
const PROGRESS_KEYS: usize = 4096;

/// Encodes `s` in the current version.
pub(super) fn encode(s: &Store) -> Bytes {
    let mut out = BytesMut::new();
    out.put_u8(SNAPSHOT_VERSION);
    put_varint(&mut out, s.applied.0);
    put_varint(&mut out, s.clock_ms);
    put_varint(&mut out, s.exact_from.map_or(0, |o| o + 1));
    let removed: Vec<(usize, u64)> = s
        .removed
        .iter()
        .enumerate()
        .filter(|(_, o)| **o != 0)
        .map(|(i, o)| (i, *o))
        .collect();
    put_varint(&mut out, removed.len() as u64);
    for (i, o) in removed {
        put_varint(&mut out, i as u64);
        put_varint(&mut out, o);
    }
    let mut keys: Vec<&Bytes> = s.map.keys().collect();
    keys.sort();
    put_varint(&mut out, keys.len() as u64);
    for k in keys {
        let e = &s.map[k];
        put_bytes(&mut out, k);
        put_value(&mut out, &e.value);
        match e.expire_at_ms {
            Some(t) => {
                out.put_u8(1);
                put_varint(&mut out, t);
            }
            None => out.put_u8(0),
        }
        put_varint(&mut out, e.version);
    }
    out.freeze()
}

fn put_value(out: &mut BytesMut, v: &Value) {
    match v {
        Value::Str(b) => {
            out.put_u8(T_STR);
            put_bytes(out, b);
        }
        Value::Hash(h) => {
            out.put_u8(T_HASH);
            put_varint(out, h.len() as u64);
            for (f, v) in h.iter() {
                put_bytes(out, f);
                put_bytes(out, v);
            }
        }
        Value::List(l) => {
            out.put_u8(T_LIST);
            put_varint(out, l.len() as u64);
            l.iter().for_each(|i| put_bytes(out, i));
        }
        Value::Set(s) => {
            out.put_u8(T_SET);
            put_varint(out, s.len() as u64);
            s.iter().for_each(|m| put_bytes(out, m));
        }
        Value::ZSet(z) => {
            out.put_u8(T_ZSET);
            put_varint(out, z.len() as u64);
            for (m, s) in z.iter() {
                put_f64(out, s.get());
                put_bytes(out, m);
            }
        }
    }
}

fn read_value(r: &mut Reader) -> Result<Value, DecodeError> {
    let tag = r.u8()?;
    if tag == T_STR {
        return Ok(Value::Str(r.bytes()?));
    }
    let n = r.count()?;
    let value = match tag {
        T_HASH => {
            let mut h = Hash::with_capacity(n);
            for _ in 0..n {
                h.insert(r.bytes()?, r.bytes()?);
            }
            (h.len() == n).then_some(Value::Hash(Box::new(h)))
        }
        T_LIST => Some(Value::List(Box::new(
            (0..n).map(|_| r.bytes()).collect::<Result<List, _>>()?,
        ))),
        T_SET => {
            let s = (0..n).map(|_| r.bytes()).collect::<Result<Set, _>>()?;
            (s.len() == n).then_some(Value::Set(Box::new(s)))
        }
        T_ZSET => {
            let mut z = ZSet::default();
            for _ in 0..n {
                let score = Score::new(r.f64()?);
                z.insert(r.bytes()?, score);
            }
            (z.len() == n).then_some(Value::ZSet(Box::new(z)))
        }
        t => return Err(DecodeError(format!("value type {t}"))),
    };
    match value {
        Some(v) if n > 0 => Ok(v),
        Some(_) => Err(DecodeError("an empty collection".into())),
        None => Err(DecodeError("a repeated field or member".into())),
    }
}

/// Decodes a snapshot of either version that covers the records before `applied`.
pub(super) fn decode(applied: Offset, data: &Bytes) -> Result<Store, DecodeError> {
    let mut r = Reader { buf: data, pos: 0 };
    let version = r.u8()?;
    if version != SNAPSHOT_VERSION && version != SNAPSHOT_VERSION_V1 {
        return Err(DecodeError(format!(
            "version {version}, this build reads {SNAPSHOT_VERSION_V1} and {SNAPSHOT_VERSION}"
        )));
    }
    let at = Offset(r.varint()?);
    if at != applied {
        return Err(DecodeError(format!("it covers {at}, not {applied}")));
    }
    let mut store = Store {
        clock_ms: r.varint()?,
        applied,
        ..Store::default()
    };
    let v2 = version == SNAPSHOT_VERSION;
    if v2 {
        store.exact_from = r.varint()?.checked_sub(1);
        let n = r.count()?;
        for _ in 0..n {
            let i = r.varint()?;
            let o = r.varint()?;
            let slot = usize::try_from(i)
                .ok()
                .filter(|i| *i < REMOVED_BUCKETS)
                .ok_or_else(|| DecodeError(format!("removal bucket {i}")))?;
            store.removed[slot] = o;
        }
    }
    let count = r.count()?;
    let mut progress = Progress::start(
        "decoding",
        "decoded",
        format!("{count} keys of the snapshot at offset {applied}"),
        data.len() as u64,
        "bytes",
        false,
        ProgressPacing::default().every,
    );
    let mut reported = 0;
    for i in 0..count {
        if i % PROGRESS_KEYS == 0 {
            progress.advance((r.pos - reported) as u64);
            reported = r.pos;
        }
        let key = r.bytes()?;
        let value = if v2 {
            read_value(&mut r)?
        } else {
            Value::Str(r.bytes()?)
        };
        let expire_at_ms = match r.u8()? {
            0 => None,
            1 => Some(r.varint()?),
            t => return Err(DecodeError(format!("expiry tag {t}"))),
        };
        let version = if v2 { r.varint()? } else { 0 };
        if let Some(t) = expire_at_ms {
            store.expiries.insert((t, key.clone()));
        }
        let entry = Entry {
            value,
            expire_at_ms,
            version,
        };
        if store.map.insert(key, entry).is_some() {
            return Err(DecodeError("a repeated key".into()));
        }
    }
    if r.pos != data.len() {
        return Err(DecodeError(format!(
            "{} trailing bytes",
            data.len() - r.pos
        )));
    }
    progress.finish();
    Ok(store)
}
