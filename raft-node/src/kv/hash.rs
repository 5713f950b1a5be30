//! Hashes: the commands that change one ([`HashCmd`]), the reads ([`HashRead`]), their record
//! encoding and their apply. Fields keep the order every replica built them in, so `HGETALL`
//! answers the same on every replica.

use bytes::{BufMut, Bytes, BytesMut};

use super::command::{
    put_bytes, put_f64, put_i64, put_keys, put_pairs, put_varint, DecodeError, Float, Reader,
};
use super::keyspace::scan_step;
use super::store::{Hash, Store};
use super::{parse_f64, parse_i64};
use crate::resp::{format_double, Reply};

/// A write to a hash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HashCmd {
    /// `HSET key field value...` (answers how many fields are new), `HMSET` (answers OK with
    /// `reply_ok`), `HSETNX key field value` (`if_absent`: only new fields, answers 1 or 0).
    Set {
        /// The key.
        key: Bytes,
        /// `(field, value)` in order.
        pairs: Vec<(Bytes, Bytes)>,
        /// Only fields not present yet (`HSETNX`).
        if_absent: bool,
        /// Answer `OK` (`HMSET`).
        reply_ok: bool,
    },
    /// `HDEL key field...`.
    Del {
        /// The key.
        key: Bytes,
        /// The fields.
        fields: Vec<Bytes>,
    },
    /// `HINCRBY key field delta`.
    IncrBy {
        /// The key.
        key: Bytes,
        /// The field.
        field: Bytes,
        /// The amount added.
        delta: i64,
    },
    /// `HINCRBYFLOAT key field delta`.
    IncrByFloat {
        /// The key.
        key: Bytes,
        /// The field.
        field: Bytes,
        /// The amount added (finite).
        delta: Float,
    },
}

/// A read of a hash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HashRead {
    /// `HGET key field`.
    Get(Bytes, Bytes),
    /// `HMGET key field...`.
    MGet(Bytes, Vec<Bytes>),
    /// `HGETALL key`.
    GetAll(Bytes),
    /// `HEXISTS key field`.
    Exists(Bytes, Bytes),
    /// `HLEN key`.
    Len(Bytes),
    /// `HSTRLEN key field`.
    StrLen(Bytes, Bytes),
    /// `HKEYS key`.
    Keys(Bytes),
    /// `HVALS key`.
    Vals(Bytes),
    /// `HSCAN key cursor [MATCH pattern] [COUNT n]`.
    Scan {
        /// The key.
        key: Bytes,
        /// Where to resume (a position in field-hash order, as `SCAN`'s).
        cursor: u64,
        /// The glob fields must match.
        pattern: Option<Bytes>,
        /// How many fields to look at, about.
        count: u64,
    },
}

const SET: u8 = 0;
const DEL: u8 = 1;
const INCRBY: u8 = 2;
const INCRBYFLOAT: u8 = 3;

pub(super) fn put_cmd(out: &mut BytesMut, cmd: &HashCmd) {
    match cmd {
        HashCmd::Set {
            key,
            pairs,
            if_absent,
            reply_ok,
        } => {
            out.put_u8(SET);
            out.put_u8(u8::from(*if_absent) | u8::from(*reply_ok) << 1);
            put_bytes(out, key);
            put_pairs(out, pairs);
        }
        HashCmd::Del { key, fields } => {
            out.put_u8(DEL);
            put_bytes(out, key);
            put_keys(out, fields);
        }
        HashCmd::IncrBy { key, field, delta } => {
            out.put_u8(INCRBY);
            put_bytes(out, key);
            put_bytes(out, field);
            put_i64(out, *delta);
        }
        HashCmd::IncrByFloat { key, field, delta } => {
            out.put_u8(INCRBYFLOAT);
            put_bytes(out, key);
            put_bytes(out, field);
            put_f64(out, delta.0);
        }
    }
}

pub(super) fn read_cmd(r: &mut Reader) -> Result<HashCmd, DecodeError> {
    Ok(match r.u8()? {
        SET => {
            let flags = r.u8()?;
            if flags > 3 {
                return Err(DecodeError(format!("HSET flags {flags:#x}")));
            }
            HashCmd::Set {
                key: r.bytes()?,
                pairs: r.pairs()?,
                if_absent: flags & 1 != 0,
                reply_ok: flags & 2 != 0,
            }
        }
        DEL => HashCmd::Del {
            key: r.bytes()?,
            fields: r.keys()?,
        },
        INCRBY => HashCmd::IncrBy {
            key: r.bytes()?,
            field: r.bytes()?,
            delta: r.i64()?,
        },
        INCRBYFLOAT => HashCmd::IncrByFloat {
            key: r.bytes()?,
            field: r.bytes()?,
            delta: Float(r.f64()?),
        },
        op => return Err(DecodeError(format!("unknown hash command {op}"))),
    })
}

pub(super) fn put_read(out: &mut BytesMut, read: &HashRead) {
    let (tag, key) = match read {
        HashRead::Get(k, _) => (0, k),
        HashRead::MGet(k, _) => (1, k),
        HashRead::GetAll(k) => (2, k),
        HashRead::Exists(k, _) => (3, k),
        HashRead::Len(k) => (4, k),
        HashRead::StrLen(k, _) => (5, k),
        HashRead::Keys(k) => (6, k),
        HashRead::Vals(k) => (7, k),
        HashRead::Scan { key, .. } => (8, key),
    };
    out.put_u8(tag);
    put_bytes(out, key);
    match read {
        HashRead::Get(_, f) | HashRead::Exists(_, f) | HashRead::StrLen(_, f) => put_bytes(out, f),
        HashRead::MGet(_, fields) => put_keys(out, fields),
        HashRead::Scan {
            cursor,
            pattern,
            count,
            ..
        } => put_scan(out, *cursor, pattern.as_ref(), *count),
        _ => {}
    }
}

pub(super) fn read_read(r: &mut Reader) -> Result<HashRead, DecodeError> {
    let tag = r.u8()?;
    let key = r.bytes()?;
    Ok(match tag {
        0 => HashRead::Get(key, r.bytes()?),
        1 => HashRead::MGet(key, r.keys()?),
        2 => HashRead::GetAll(key),
        3 => HashRead::Exists(key, r.bytes()?),
        4 => HashRead::Len(key),
        5 => HashRead::StrLen(key, r.bytes()?),
        6 => HashRead::Keys(key),
        7 => HashRead::Vals(key),
        8 => {
            let (cursor, pattern, count) = read_scan(r)?;
            HashRead::Scan {
                key,
                cursor,
                pattern,
                count,
            }
        }
        t => return Err(DecodeError(format!("unknown hash read {t}"))),
    })
}

/// Appends the arguments of an element scan (`HSCAN`, `SSCAN`, `ZSCAN`).
pub(super) fn put_scan(out: &mut BytesMut, cursor: u64, pattern: Option<&Bytes>, count: u64) {
    put_varint(out, cursor);
    put_varint(out, count);
    match pattern {
        Some(p) => {
            out.put_u8(1);
            put_bytes(out, p);
        }
        None => out.put_u8(0),
    }
}

/// Reads what [`put_scan`] wrote: `(cursor, pattern, count)`.
pub(super) fn read_scan(r: &mut Reader) -> Result<(u64, Option<Bytes>, u64), DecodeError> {
    let cursor = r.varint()?;
    let count = r.varint()?;
    let pattern = if r.flag()? { Some(r.bytes()?) } else { None };
    Ok((cursor, pattern, count))
}

/// One step of an element scan over `elements`: `[next cursor, found...]` with each found
/// element followed by `extra(element)` if given (a field's value, a member's score).
pub(super) fn scan_reply<'a>(
    elements: impl Iterator<Item = &'a Bytes>,
    cursor: u64,
    pattern: Option<&Bytes>,
    count: u64,
    extra: impl Fn(&Bytes) -> Option<Reply>,
) -> Reply {
    let count = usize::try_from(count).unwrap_or(usize::MAX);
    let (next, found) = scan_step(elements, cursor, pattern.map(|p| &p[..]), count);
    let mut items = Vec::with_capacity(found.len() * 2);
    for e in found {
        let more = extra(&e);
        items.push(Reply::Bulk(e));
        items.extend(more);
    }
    Reply::Array(vec![Reply::bulk(next.to_string()), Reply::Array(items)])
}

impl Store {
    pub(super) fn apply_hash(&mut self, cmd: HashCmd) -> Reply {
        let result = match cmd {
            HashCmd::Set {
                key,
                pairs,
                if_absent,
                reply_ok,
            } => self
                .update(&key, true, |h: &mut Hash| {
                    let mut added = 0;
                    for (f, v) in pairs {
                        match h.get_mut(&f) {
                            Some(_) if if_absent => {}
                            Some(old) => *old = v,
                            None => {
                                h.insert(f, v);
                                added += 1;
                            }
                        }
                    }
                    let changed = added > 0 || !if_absent;
                    let reply = if reply_ok {
                        Reply::ok()
                    } else {
                        Reply::Int(added)
                    };
                    (reply, changed)
                })
                .map(|r| r.unwrap_or(Reply::Int(0))),
            HashCmd::Del { key, fields } => self
                .update(&key, false, |h: &mut Hash| {
                    let n = fields
                        .iter()
                        .filter(|f| h.swap_remove(&f[..]).is_some())
                        .count();
                    (Reply::Int(n as i64), n > 0)
                })
                .map(|r| r.unwrap_or(Reply::Int(0))),
            HashCmd::IncrBy { key, field, delta } => self
                .update(&key, true, |h: &mut Hash| {
                    let current = match h.get(&field) {
                        None => 0,
                        Some(v) => match parse_i64(v) {
                            Some(n) => n,
                            None => return (Reply::err("hash value is not an integer"), false),
                        },
                    };
                    let Some(next) = current.checked_add(delta) else {
                        return (Reply::err("increment or decrement would overflow"), false);
                    };
                    h.insert(field, Bytes::from(next.to_string()));
                    (Reply::Int(next), true)
                })
                .map(|r| r.unwrap_or(Reply::Nil)),
            HashCmd::IncrByFloat { key, field, delta } => self
                .update(&key, true, |h: &mut Hash| {
                    let current = match h.get(&field) {
                        None => 0.0,
                        Some(v) => match parse_f64(v) {
                            Some(n) => n,
                            None => return (Reply::err("hash value is not a float"), false),
                        },
                    };
                    let next = current + delta.0;
                    if !next.is_finite() {
                        return (Reply::err("increment would produce NaN or Infinity"), false);
                    }
                    let text = Bytes::from(format_double(next));
                    h.insert(field, text.clone());
                    (Reply::Bulk(text), true)
                })
                .map(|r| r.unwrap_or(Reply::Nil)),
        };
        result.unwrap_or_else(|e| e)
    }

    pub(super) fn read_hash(&self, read: &HashRead) -> Result<Reply, Reply> {
        let key = match read {
            HashRead::Get(k, _)
            | HashRead::MGet(k, _)
            | HashRead::GetAll(k)
            | HashRead::Exists(k, _)
            | HashRead::Len(k)
            | HashRead::StrLen(k, _)
            | HashRead::Keys(k)
            | HashRead::Vals(k)
            | HashRead::Scan { key: k, .. } => k,
        };
        let empty = Hash::default();
        let h = self.read_as::<Hash>(key)?.unwrap_or(&empty);
        let value = |f: &Bytes| h.get(f).cloned().map_or(Reply::Nil, Reply::Bulk);
        Ok(match read {
            HashRead::Get(_, f) => value(f),
            HashRead::MGet(_, fields) => Reply::Array(fields.iter().map(value).collect()),
            HashRead::GetAll(_) => Reply::Map(
                h.iter()
                    .map(|(f, v)| (Reply::Bulk(f.clone()), Reply::Bulk(v.clone())))
                    .collect(),
            ),
            HashRead::Exists(_, f) => Reply::Int(i64::from(h.contains_key(f))),
            HashRead::Len(_) => Reply::Int(h.len() as i64),
            HashRead::StrLen(_, f) => Reply::Int(h.get(f).map_or(0, |v| v.len() as i64)),
            HashRead::Keys(_) => Reply::Array(h.keys().cloned().map(Reply::Bulk).collect()),
            HashRead::Vals(_) => Reply::Array(h.values().cloned().map(Reply::Bulk).collect()),
            HashRead::Scan {
                cursor,
                pattern,
                count,
                ..
            } => scan_reply(h.keys(), *cursor, pattern.as_ref(), *count, |f| {
                h.get(f).cloned().map(Reply::Bulk)
            }),
        })
    }
}
