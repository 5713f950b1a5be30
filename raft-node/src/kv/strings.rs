//! The string commands and the commands on whole keys (`DEL`, `EXPIRE`, `RENAME`, ...): their
//! apply and their reads. A string command on a key of another type answers WRONGTYPE and
//! changes nothing; `SET` (without `GET`), `MSET` and `RENAME` replace any type, as in Redis.

use bytes::{Bytes, BytesMut};

use super::command::{Command, ExpireCond, Expiry, SetCond, EXPIRY_MAX_MS};
use super::store::{wrong_type, Entry, Store, Value};
use super::transaction::TxRead;
use super::{parse_f64, parse_i64};
use crate::resp::{format_double, Reply};

/// The reply to `INCR` on a value that is not an integer.
const NOT_INTEGER: &str = "value is not an integer or out of range";

impl Store {
    /// The string at `key` for a write, which must be present: WRONGTYPE if another type.
    fn str_of(&self, key: &[u8]) -> Result<Option<(&Bytes, Option<u64>)>, Reply> {
        match self.map.get(key) {
            None => Ok(None),
            Some(Entry {
                value: Value::Str(v),
                expire_at_ms,
                ..
            }) => Ok(Some((v, *expire_at_ms))),
            Some(_) => Err(wrong_type()),
        }
    }

    pub(super) fn apply_string(&mut self, cmd: Command) -> Reply {
        self.try_apply_string(cmd).unwrap_or_else(|e| e)
    }

    fn try_apply_string(&mut self, cmd: Command) -> Result<Reply, Reply> {
        Ok(match cmd {
            Command::Set {
                key,
                value,
                cond,
                get,
                expiry,
                keep_ttl,
            } => {
                let at = expiry.map(|e| e.at(self.clock_ms));
                self.set(key, value, cond, get, at, keep_ttl)?
            }
            Command::Del { keys } => {
                Reply::Int(keys.iter().filter(|k| self.remove(k).is_some()).count() as i64)
            }
            Command::IncrBy { key, delta } => self.incr_by(key, delta)?,
            Command::IncrByFloat { key, delta } => self.incr_by_float(key, delta.0)?,
            Command::MSet { pairs } => {
                for (k, v) in pairs {
                    self.put(k, Value::Str(v), None);
                }
                Reply::ok()
            }
            Command::Append { key, value } => {
                let (mut joined, expiry) = match self.str_of(&key)? {
                    None => (BytesMut::new(), None),
                    Some((v, expiry)) => (BytesMut::from(&v[..]), expiry),
                };
                joined.extend_from_slice(&value);
                let len = joined.len() as i64;
                self.put(key, Value::Str(joined.freeze()), expiry);
                Reply::Int(len)
            }
            Command::SetNx { key, value } => {
                if self.map.contains_key(&key) {
                    return Ok(Reply::Int(0));
                }
                self.put(key, Value::Str(value), None);
                Reply::Int(1)
            }
            Command::GetDel { key } => match self.str_of(&key)? {
                None => Reply::Nil,
                Some((v, _)) => {
                    let v = v.clone();
                    self.remove(&key);
                    Reply::Bulk(v)
                }
            },
            Command::GetEx { key, expiry } => match self.str_of(&key)? {
                None => Reply::Nil,
                Some((v, _)) => {
                    let v = v.clone();
                    self.set_expiry(&key, expiry.map(|e| e.at(self.clock_ms)));
                    Reply::Bulk(v)
                }
            },
            Command::MSetNx { pairs } => {
                if pairs.iter().any(|(k, _)| self.map.contains_key(k)) {
                    return Ok(Reply::Int(0));
                }
                for (k, v) in pairs {
                    self.put(k, Value::Str(v), None);
                }
                Reply::Int(1)
            }
            Command::Expire { key, expiry, cond } => self.expire(key, expiry, cond),
            Command::Cas { key, expected, new } => match self.str_of(&key)? {
                Some((v, expiry)) if *v == expected => {
                    self.put(key, Value::Str(new), expiry);
                    Reply::Int(1)
                }
                _ => Reply::Int(0),
            },
            Command::Rename {
                src,
                dst,
                if_absent,
            } => self.rename(src, dst, if_absent)?,
            // The other commands are dispatched by `Store::apply` before this.
            _ => Reply::err("internal: a command reached the wrong family"),
        })
    }

    fn set(
        &mut self,
        key: Bytes,
        value: Bytes,
        cond: SetCond,
        get: bool,
        expire_at_ms: Option<u64>,
        keep_ttl: bool,
    ) -> Result<Reply, Reply> {
        let exists = self.map.contains_key(&key);
        let old = if get {
            self.str_of(&key)?.map(|(v, _)| v.clone())
        } else {
            None
        };
        let allowed = match cond {
            SetCond::Always => true,
            SetCond::IfAbsent => !exists,
            SetCond::IfPresent => exists,
        };
        if allowed {
            let expiry = if keep_ttl {
                self.map.get(&key).and_then(|e| e.expire_at_ms)
            } else {
                expire_at_ms
            };
            self.put(key, Value::Str(value), expiry);
        }
        Ok(match (get, allowed) {
            (true, _) => old.map_or(Reply::Nil, Reply::Bulk),
            (false, true) => Reply::ok(),
            (false, false) => Reply::Nil,
        })
    }

    fn incr_by(&mut self, key: Bytes, delta: i64) -> Result<Reply, Reply> {
        let (current, expiry) = match self.str_of(&key)? {
            None => (0, None),
            Some((v, expiry)) => match parse_i64(v) {
                Some(n) => (n, expiry),
                None => return Err(Reply::err(NOT_INTEGER)),
            },
        };
        let Some(next) = current.checked_add(delta) else {
            return Err(Reply::err("increment or decrement would overflow"));
        };
        self.put(key, Value::Str(Bytes::from(next.to_string())), expiry);
        Ok(Reply::Int(next))
    }

    fn incr_by_float(&mut self, key: Bytes, delta: f64) -> Result<Reply, Reply> {
        let (current, expiry) = match self.str_of(&key)? {
            None => (0.0, None),
            Some((v, expiry)) => match parse_f64(v) {
                Some(n) => (n, expiry),
                None => return Err(Reply::err("value is not a valid float")),
            },
        };
        let next = current + delta;
        if !next.is_finite() {
            return Err(Reply::err("increment would produce NaN or Infinity"));
        }
        let text = Bytes::from(format_double(next));
        self.put(key, Value::Str(text.clone()), expiry);
        Ok(Reply::Bulk(text))
    }

    /// `RENAME`/`RENAMENX`: the value and its expiry move; the source counts as removed.
    fn rename(&mut self, src: Bytes, dst: Bytes, if_absent: bool) -> Result<Reply, Reply> {
        if !self.map.contains_key(&src) {
            return Err(Reply::err("no such key"));
        }
        if if_absent && self.map.contains_key(&dst) {
            return Ok(Reply::Int(0));
        }
        if src != dst {
            if let Some(entry) = self.remove(&src) {
                self.put(dst, entry.value, entry.expire_at_ms);
            }
        }
        Ok(if if_absent {
            Reply::Int(1)
        } else {
            Reply::ok()
        })
    }

    /// `EXPIRE` and its forms; a relative expiry counts from the record's clock.
    fn expire(&mut self, key: Bytes, expiry: Option<Expiry>, cond: ExpireCond) -> Reply {
        let at_ms = expiry.map(|e| e.at(self.clock_ms));
        let Some(current) = self.map.get(&key).map(|e| e.expire_at_ms) else {
            return Reply::Int(0);
        };
        let Some(at) = at_ms else {
            // PERSIST: 1 if there was an expiry to remove.
            if current.is_none() {
                return Reply::Int(0);
            }
            self.set_expiry(&key, None);
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
        self.set_expiry(&key, Some(at));
        Reply::Int(1)
    }

    pub(super) fn read_string(&self, r: &TxRead) -> Result<Reply, Reply> {
        Ok(match r {
            TxRead::Get(k) => self.read_str(k)?.cloned().map_or(Reply::Nil, Reply::Bulk),
            TxRead::MGet(keys) => Reply::Array(
                keys.iter()
                    .map(|k| match self.read_str(k) {
                        Ok(Some(v)) => Reply::Bulk(v.clone()),
                        // MGET answers nil for a key of another type.
                        _ => Reply::Nil,
                    })
                    .collect(),
            ),
            TxRead::Exists(keys) => {
                Reply::Int(keys.iter().filter(|k| self.live(k).is_some()).count() as i64)
            }
            TxRead::StrLen(k) => Reply::Int(self.read_str(k)?.map_or(0, |v| v.len() as i64)),
            TxRead::Ttl(k, ms) => {
                let t = match self.live(k) {
                    None => -2,
                    Some(Entry {
                        expire_at_ms: None, ..
                    }) => -1,
                    Some(Entry {
                        expire_at_ms: Some(at),
                        ..
                    }) => at.saturating_sub(self.clock_ms).min(EXPIRY_MAX_MS) as i64,
                };
                Reply::Int(if *ms || t < 0 { t } else { (t + 999) / 1000 })
            }
            TxRead::ExpireTime(k, ms) => Reply::Int(match self.live(k) {
                None => -2,
                Some(Entry {
                    expire_at_ms: None, ..
                }) => -1,
                Some(Entry {
                    expire_at_ms: Some(at),
                    ..
                }) if *ms => (*at).min(EXPIRY_MAX_MS) as i64,
                Some(Entry {
                    expire_at_ms: Some(at),
                    ..
                }) => (*at).min(EXPIRY_MAX_MS).div_ceil(1000) as i64,
            }),
            TxRead::Type(k) => {
                Reply::Simple(self.live(k).map_or("none", |e| e.value.type_name()).into())
            }
            TxRead::DbSize => Reply::Int(self.dbsize()),
            // The family reads are dispatched by `Store::read` before this.
            _ => Reply::err("internal: a read reached the wrong family"),
        })
    }
}
