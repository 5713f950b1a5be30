//! Lists: the commands that change one ([`ListCmd`]), the reads ([`ListRead`]), their record
//! encoding and their apply. Indexes follow Redis: negative ones count from the tail, ranges
//! are clamped.

use bytes::{BufMut, Bytes, BytesMut};

use super::command::{put_bytes, put_i64, put_keys, put_opt_u64, DecodeError, Reader};
use super::store::{wrong_type, List, Store, Value};
use crate::resp::Reply;

/// A write to a list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListCmd {
    /// `LPUSH`/`RPUSH key value...`, and `LPUSHX`/`RPUSHX` (`if_exists`).
    Push {
        /// The key.
        key: Bytes,
        /// At the head.
        left: bool,
        /// Only onto an existing list.
        if_exists: bool,
        /// Pushed one by one, in order.
        values: Vec<Bytes>,
    },
    /// `LPOP`/`RPOP key [count]`.
    Pop {
        /// The key.
        key: Bytes,
        /// From the head.
        left: bool,
        /// With a count, the reply is an array.
        count: Option<u64>,
    },
    /// `LSET key index value`.
    Set {
        /// The key.
        key: Bytes,
        /// The index (negative from the tail).
        index: i64,
        /// The new value.
        value: Bytes,
    },
    /// `LREM key count value`: removes `count` occurrences from the head (negative: from the
    /// tail; 0: all).
    Rem {
        /// The key.
        key: Bytes,
        /// How many, and from which end.
        count: i64,
        /// The value removed.
        value: Bytes,
    },
    /// `LTRIM key start stop`.
    Trim {
        /// The key.
        key: Bytes,
        /// First index kept.
        start: i64,
        /// Last index kept.
        stop: i64,
    },
    /// `LMOVE src dst LEFT|RIGHT LEFT|RIGHT` (and `RPOPLPUSH`).
    Move {
        /// Popped from.
        src: Bytes,
        /// Pushed onto.
        dst: Bytes,
        /// Pop the head of `src`.
        from_left: bool,
        /// Push at the head of `dst`.
        to_left: bool,
    },
}

/// A read of a list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListRead {
    /// `LRANGE key start stop`.
    Range(Bytes, i64, i64),
    /// `LLEN key`.
    Len(Bytes),
    /// `LINDEX key index`.
    Index(Bytes, i64),
}

const PUSH: u8 = 0;
const POP: u8 = 1;
const SET: u8 = 2;
const REM: u8 = 3;
const TRIM: u8 = 4;
const MOVE: u8 = 5;

pub(super) fn put_cmd(out: &mut BytesMut, cmd: &ListCmd) {
    match cmd {
        ListCmd::Push {
            key,
            left,
            if_exists,
            values,
        } => {
            out.put_u8(PUSH);
            out.put_u8(u8::from(*left) | u8::from(*if_exists) << 1);
            put_bytes(out, key);
            put_keys(out, values);
        }
        ListCmd::Pop { key, left, count } => {
            out.put_u8(POP);
            out.put_u8(u8::from(*left));
            put_bytes(out, key);
            put_opt_u64(out, *count);
        }
        ListCmd::Set { key, index, value } => {
            out.put_u8(SET);
            put_bytes(out, key);
            put_i64(out, *index);
            put_bytes(out, value);
        }
        ListCmd::Rem { key, count, value } => {
            out.put_u8(REM);
            put_bytes(out, key);
            put_i64(out, *count);
            put_bytes(out, value);
        }
        ListCmd::Trim { key, start, stop } => {
            out.put_u8(TRIM);
            put_bytes(out, key);
            put_i64(out, *start);
            put_i64(out, *stop);
        }
        ListCmd::Move {
            src,
            dst,
            from_left,
            to_left,
        } => {
            out.put_u8(MOVE);
            out.put_u8(u8::from(*from_left) | u8::from(*to_left) << 1);
            put_bytes(out, src);
            put_bytes(out, dst);
        }
    }
}

fn sides(r: &mut Reader, max: u8) -> Result<(bool, bool), DecodeError> {
    let b = r.u8()?;
    if b > max {
        return Err(DecodeError(format!("list flags {b:#x}")));
    }
    Ok((b & 1 != 0, b & 2 != 0))
}

pub(super) fn read_cmd(r: &mut Reader) -> Result<ListCmd, DecodeError> {
    Ok(match r.u8()? {
        PUSH => {
            let (left, if_exists) = sides(r, 3)?;
            ListCmd::Push {
                key: r.bytes()?,
                left,
                if_exists,
                values: r.keys()?,
            }
        }
        POP => {
            let (left, _) = sides(r, 1)?;
            ListCmd::Pop {
                key: r.bytes()?,
                left,
                count: r.opt_u64()?,
            }
        }
        SET => ListCmd::Set {
            key: r.bytes()?,
            index: r.i64()?,
            value: r.bytes()?,
        },
        REM => ListCmd::Rem {
            key: r.bytes()?,
            count: r.i64()?,
            value: r.bytes()?,
        },
        TRIM => ListCmd::Trim {
            key: r.bytes()?,
            start: r.i64()?,
            stop: r.i64()?,
        },
        MOVE => {
            let (from_left, to_left) = sides(r, 3)?;
            ListCmd::Move {
                src: r.bytes()?,
                dst: r.bytes()?,
                from_left,
                to_left,
            }
        }
        op => return Err(DecodeError(format!("unknown list command {op}"))),
    })
}

pub(super) fn put_read(out: &mut BytesMut, read: &ListRead) {
    match read {
        ListRead::Range(k, start, stop) => {
            out.put_u8(0);
            put_bytes(out, k);
            put_i64(out, *start);
            put_i64(out, *stop);
        }
        ListRead::Len(k) => {
            out.put_u8(1);
            put_bytes(out, k);
        }
        ListRead::Index(k, i) => {
            out.put_u8(2);
            put_bytes(out, k);
            put_i64(out, *i);
        }
    }
}

pub(super) fn read_read(r: &mut Reader) -> Result<ListRead, DecodeError> {
    Ok(match r.u8()? {
        0 => ListRead::Range(r.bytes()?, r.i64()?, r.i64()?),
        1 => ListRead::Len(r.bytes()?),
        2 => ListRead::Index(r.bytes()?, r.i64()?),
        t => return Err(DecodeError(format!("unknown list read {t}"))),
    })
}

/// Redis's range rule: negative indexes count from the end, both ends clamp; `None` if the
/// range is empty, else the first and last index.
pub(super) fn clamp_range(start: i64, stop: i64, len: usize) -> Option<(usize, usize)> {
    let len = len as i64;
    let start = if start < 0 {
        (len + start).max(0)
    } else {
        start
    };
    let stop = if stop < 0 {
        len + stop
    } else {
        stop.min(len - 1)
    };
    (start <= stop && start < len).then_some((start as usize, stop as usize))
}

/// The position of `index` (negative from the tail) in a list of `len`, if inside it.
fn position(index: i64, len: usize) -> Option<usize> {
    let i = if index < 0 { len as i64 + index } else { index };
    (0..len as i64).contains(&i).then_some(i as usize)
}

/// `LREM` on one list: removes up to `count` copies of `value` from the head (negative: from
/// the tail; 0: all).
fn list_rem(l: &mut List, count: i64, value: &Bytes) -> (Reply, bool) {
    let limit = if count == 0 {
        usize::MAX
    } else {
        count.unsigned_abs().min(usize::MAX as u64) as usize
    };
    let mut removed = 0;
    let mut keep = |v: &Bytes| {
        if removed < limit && v == value {
            removed += 1;
            false
        } else {
            true
        }
    };
    let kept: List = if count < 0 {
        let mut rev: Vec<Bytes> = l.iter().rev().filter(|v| keep(v)).cloned().collect();
        rev.reverse();
        rev.into()
    } else {
        l.iter().filter(|v| keep(v)).cloned().collect()
    };
    *l = kept;
    (Reply::Int(removed as i64), removed > 0)
}

fn pop(l: &mut List, left: bool) -> Option<Bytes> {
    if left {
        l.pop_front()
    } else {
        l.pop_back()
    }
}

impl Store {
    pub(super) fn apply_list(&mut self, cmd: ListCmd) -> Reply {
        self.try_apply_list(cmd).unwrap_or_else(|e| e)
    }

    fn try_apply_list(&mut self, cmd: ListCmd) -> Result<Reply, Reply> {
        Ok(match cmd {
            ListCmd::Push {
                key,
                left,
                if_exists,
                values,
            } => self
                .update(&key, !if_exists, |l: &mut List| {
                    for v in values {
                        if left {
                            l.push_front(v);
                        } else {
                            l.push_back(v);
                        }
                    }
                    (Reply::Int(l.len() as i64), true)
                })?
                .unwrap_or(Reply::Int(0)),
            ListCmd::Pop { key, left, count } => {
                let popped = self.update(&key, false, |l: &mut List| {
                    let n = count.unwrap_or(1).min(l.len() as u64) as usize;
                    let items: Vec<Bytes> = (0..n).filter_map(|_| pop(l, left)).collect();
                    let changed = !items.is_empty();
                    (items, changed)
                })?;
                match (popped, count) {
                    (None, None) => Reply::Nil,
                    (None, Some(_)) => Reply::NilArray,
                    (Some(mut items), None) => items.pop().map_or(Reply::Nil, Reply::Bulk),
                    (Some(items), Some(_)) => {
                        Reply::Array(items.into_iter().map(Reply::Bulk).collect())
                    }
                }
            }
            ListCmd::Set { key, index, value } => self
                .update(&key, false, |l: &mut List| match position(index, l.len()) {
                    Some(i) => {
                        l[i] = value;
                        (Reply::ok(), true)
                    }
                    None => (Reply::err("index out of range"), false),
                })?
                .unwrap_or_else(|| Reply::err("no such key")),
            ListCmd::Rem { key, count, value } => self
                .update(&key, false, |l: &mut List| list_rem(l, count, &value))?
                .unwrap_or(Reply::Int(0)),
            ListCmd::Trim { key, start, stop } => {
                self.update(&key, false, |l: &mut List| {
                    let before = l.len();
                    match clamp_range(start, stop, l.len()) {
                        None => l.clear(),
                        Some((a, b)) => {
                            l.truncate(b + 1);
                            l.drain(..a);
                        }
                    }
                    ((), l.len() != before)
                })?;
                Reply::ok()
            }
            ListCmd::Move {
                src,
                dst,
                from_left,
                to_left,
            } => self.list_move(src, dst, from_left, to_left)?,
        })
    }

    /// `LMOVE`: both keys' types are checked before anything moves, as in Redis.
    fn list_move(
        &mut self,
        src: Bytes,
        dst: Bytes,
        from_left: bool,
        to_left: bool,
    ) -> Result<Reply, Reply> {
        let is_list = |v: Option<&Value>| v.is_none_or(|v| matches!(v, Value::List(_)));
        if !is_list(self.map.get(&src).map(|e| &e.value)) {
            return Err(wrong_type());
        }
        if !self.map.contains_key(&src) {
            return Ok(Reply::Nil);
        }
        if !is_list(self.map.get(&dst).map(|e| &e.value)) {
            return Err(wrong_type());
        }
        let item = self
            .update(&src, false, |l: &mut List| {
                let item = pop(l, from_left);
                let changed = item.is_some();
                (item, changed)
            })?
            .flatten();
        let Some(item) = item else {
            return Ok(Reply::Nil);
        };
        self.update(&dst, true, |l: &mut List| {
            if to_left {
                l.push_front(item.clone());
            } else {
                l.push_back(item.clone());
            }
            ((), true)
        })?;
        Ok(Reply::Bulk(item))
    }

    pub(super) fn read_list(&self, read: &ListRead) -> Result<Reply, Reply> {
        let key = match read {
            ListRead::Range(k, ..) | ListRead::Len(k) | ListRead::Index(k, _) => k,
        };
        let empty = List::new();
        let l = self.read_as::<List>(key)?.unwrap_or(&empty);
        Ok(match read {
            ListRead::Range(_, start, stop) => match clamp_range(*start, *stop, l.len()) {
                None => Reply::Array(Vec::new()),
                Some((a, b)) => Reply::Array(l.range(a..=b).cloned().map(Reply::Bulk).collect()),
            },
            ListRead::Len(_) => Reply::Int(l.len() as i64),
            ListRead::Index(_, i) => {
                position(*i, l.len()).map_or(Reply::Nil, |i| Reply::Bulk(l[i].clone()))
            }
        })
    }
}
