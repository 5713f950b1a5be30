//! The replicated map itself: typed values with their expiry and version, the key-level rules
//! every write follows (replace, remove, expire, the version a `WATCH` compares), and the
//! dispatch of a command to its family (`strings`, `hash`, `list`, `set`, `zset`).

use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use indexmap::{IndexMap, IndexSet};
use raft_core::Offset;

use super::command::Command;
use super::key_table::KeyTable;
use super::keyspace::scan_hash;
use super::transaction::{TxOp, TxRead};
use super::zset::ZSet;
use crate::resp::Reply;

/// A hash: fields in the order every replica built them (insertion, with `swap_remove`).
pub(super) type Hash = IndexMap<Bytes, Bytes>;
/// A list.
pub(super) type List = VecDeque<Bytes>;
/// A set: members in the order every replica built them, which `SPOP` indexes into.
pub(super) type Set = IndexSet<Bytes>;

/// A key's value. Collections are never empty: the write that empties one removes the key,
/// as in Redis.
///
/// Collections live behind an `Arc`: most keys hold strings, and every slot of the key table
/// is as wide as the widest variant (a `Bytes`, 32 bytes, instead of a collection's 72); and a
/// snapshot's capture shares them with the live table, which copies a collection only when it
/// writes to one the capture still holds (see `key_table`).
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Value {
    Str(Bytes),
    Hash(Arc<Hash>),
    List(Arc<List>),
    Set(Arc<Set>),
    ZSet(Arc<ZSet>),
}

impl Value {
    /// The name `TYPE` answers.
    pub(super) fn type_name(&self) -> &'static str {
        match self {
            Value::Str(_) => "string",
            Value::Hash(_) => "hash",
            Value::List(_) => "list",
            Value::Set(_) => "set",
            Value::ZSet(_) => "zset",
        }
    }
}

/// One key's value and metadata.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Entry {
    pub(super) value: Value,
    pub(super) expire_at_ms: Option<u64>,
    /// The offset of the last record that changed the key (0: unknown, restored from a
    /// version-1 snapshot).
    pub(super) version: u64,
}

/// How many buckets of key hashes remember their last removal (see [`Store::removed`]).
pub(super) const REMOVED_BUCKETS: usize = 1024;

/// The reply to a command on a key holding another type, Redis's text.
pub(super) fn wrong_type() -> Reply {
    Reply::Error("WRONGTYPE Operation against a key holding the wrong kind of value".into())
}

/// The map and everything the replicas must agree on besides it.
#[derive(Debug)]
pub(super) struct Store {
    pub(super) map: KeyTable,
    /// `(expiry, key)` of every key with an expiry.
    pub(super) expiries: BTreeSet<(u64, Bytes)>,
    /// The largest timestamp applied: the replicated clock expiry is judged by.
    pub(super) clock_ms: u64,
    pub(super) applied: Offset,
    /// The offset of the record being applied: the version of what it changes.
    pub(super) offset: u64,
    /// Per bucket of key hashes, the offset of the last record that removed a key of the
    /// bucket (deleted, expired, renamed away, emptied, flushed). An absent key has no version
    /// of its own; this bounds when it last existed, in fixed memory.
    pub(super) removed: Vec<u64>,
    /// The offset of the first version-2 record applied: from there on, every replica's
    /// versions are exact and alike (a map restored from a version-1 snapshot knows no
    /// versions, one rebuilt from the log knows them all). `None` until then.
    pub(super) exact_from: Option<u64>,
}

impl Default for Store {
    fn default() -> Store {
        Store {
            map: KeyTable::default(),
            expiries: BTreeSet::new(),
            clock_ms: 0,
            applied: Offset(0),
            offset: 0,
            removed: vec![0; REMOVED_BUCKETS],
            exact_from: None,
        }
    }
}

/// A collection type, for the generic read and update helpers.
pub(super) trait Collection: Default {
    fn of(v: &Value) -> Option<&Self>;
    fn of_mut(v: &mut Value) -> Option<&mut Self>;
    fn wrap(self) -> Value;
    fn is_empty(&self) -> bool;
}

macro_rules! collection {
    ($ty:ty, $variant:ident) => {
        impl Collection for $ty {
            fn of(v: &Value) -> Option<&Self> {
                match v {
                    Value::$variant(c) => Some(c),
                    _ => None,
                }
            }
            fn of_mut(v: &mut Value) -> Option<&mut Self> {
                match v {
                    // Copied here only if a snapshot's capture still holds it.
                    Value::$variant(c) => Some(Arc::make_mut(c)),
                    _ => None,
                }
            }
            fn wrap(self) -> Value {
                Value::$variant(Arc::new(self))
            }
            fn is_empty(&self) -> bool {
                self.len() == 0
            }
        }
    };
}

collection!(Hash, Hash);
collection!(List, List);
collection!(Set, Set);
collection!(ZSet, ZSet);

/// The bucket of [`Store::removed`] a key falls in.
pub(super) fn bucket(key: &[u8]) -> usize {
    (scan_hash(key) >> 54) as usize % REMOVED_BUCKETS
}

impl Store {
    /// The entry of `key` if it is live by the replicated clock. Never by the local wall
    /// clock: every replica that applied the same records answers the same, whatever its
    /// clock says (the leader's ticks move the replicated clock between writes).
    pub(super) fn live(&self, key: &[u8]) -> Option<&Entry> {
        let now = self.clock_ms;
        self.map
            .get(key)
            .filter(|e| e.expire_at_ms.is_none_or(|at| at > now))
    }

    pub(super) fn live_keys(&self) -> impl Iterator<Item = (&Bytes, &Entry)> {
        let now = self.clock_ms;
        self.map
            .iter()
            .filter(move |(_, e)| e.expire_at_ms.is_none_or(|at| at > now))
    }

    /// The collection at `key` for a read: `None` if absent, WRONGTYPE if another type.
    pub(super) fn read_as<C: Collection>(&self, key: &[u8]) -> Result<Option<&C>, Reply> {
        match self.live(key) {
            None => Ok(None),
            Some(e) => C::of(&e.value).map(Some).ok_or_else(wrong_type),
        }
    }

    /// The string at `key` for a read: `None` if absent, WRONGTYPE if another type.
    pub(super) fn read_str(&self, key: &[u8]) -> Result<Option<&Bytes>, Reply> {
        match self.live(key).map(|e| &e.value) {
            None => Ok(None),
            Some(Value::Str(v)) => Ok(Some(v)),
            Some(_) => Err(wrong_type()),
        }
    }

    /// Changes the collection at `key` with `f`, which answers its result and whether it
    /// changed anything. An absent key is created empty first when `create`, else `Ok(None)`;
    /// another type is WRONGTYPE and nothing changes. A change bumps the key's version; a
    /// collection left empty removes the key.
    pub(super) fn update<C: Collection, T>(
        &mut self,
        key: &Bytes,
        create: bool,
        f: impl FnOnce(&mut C) -> (T, bool),
    ) -> Result<Option<T>, Reply> {
        let created = !self.map.contains_key(key);
        if created {
            if !create {
                return Ok(None);
            }
            let entry = Entry {
                value: C::default().wrap(),
                expire_at_ms: None,
                version: self.offset,
            };
            self.map.insert(key.clone(), entry);
        }
        let offset = self.offset;
        let Some(mut entry) = self.map.get_mut(key) else {
            return Ok(None);
        };
        let Some(c) = C::of_mut(&mut entry.value) else {
            return Err(wrong_type());
        };
        let (result, changed) = f(c);
        let empty = c.is_empty();
        if changed {
            entry.version = offset;
        }
        // The key table's total takes the changed estimate here.
        drop(entry);
        if empty && created {
            // Created for nothing: it never existed, so no removal to remember.
            self.map.remove(key);
        } else if empty {
            self.remove(key);
        }
        Ok(Some(result))
    }

    /// Removes `key`, remembering the removal in its bucket.
    pub(super) fn remove(&mut self, key: &[u8]) -> Option<Entry> {
        let old = self.map.remove(key)?;
        if let Some(at) = old.expire_at_ms {
            self.expiries.remove(&(at, Bytes::copy_from_slice(key)));
        }
        self.removed[bucket(key)] = self.offset;
        Some(old)
    }

    /// Sets `key` to `value` with `expire_at_ms`, replacing whatever it held.
    pub(super) fn put(&mut self, key: Bytes, value: Value, expire_at_ms: Option<u64>) {
        if let Some(at) = expire_at_ms {
            if at <= self.clock_ms {
                // Already expired by the replicated clock: the write leaves no key.
                self.remove(&key);
                return;
            }
        }
        if let Some(old) = self.map.get(&key) {
            if let Some(at) = old.expire_at_ms {
                self.expiries.remove(&(at, key.clone()));
            }
        }
        if let Some(at) = expire_at_ms {
            self.expiries.insert((at, key.clone()));
        }
        let entry = Entry {
            value,
            expire_at_ms,
            version: self.offset,
        };
        self.map.insert(key, entry);
    }

    /// Gives the present `key` a new expiry (`None`: none); one already past by the
    /// replicated clock removes the key, as Redis does.
    pub(super) fn set_expiry(&mut self, key: &Bytes, at_ms: Option<u64>) {
        if at_ms.is_some_and(|at| at <= self.clock_ms) {
            self.remove(key);
            return;
        }
        let offset = self.offset;
        let Some(mut entry) = self.map.get_mut(key) else {
            return;
        };
        if let Some(old) = entry.expire_at_ms {
            self.expiries.remove(&(old, key.clone()));
        }
        if let Some(at) = at_ms {
            self.expiries.insert((at, key.clone()));
        }
        entry.expire_at_ms = at_ms;
        entry.version = offset;
    }

    fn expire_due(&mut self) {
        while let Some((at, key)) = self.expiries.first().cloned() {
            if at > self.clock_ms {
                break;
            }
            self.remove(&key);
        }
    }

    /// `FLUSHALL`: every key goes, and so every bucket has seen a removal.
    fn flush(&mut self) {
        self.map.clear();
        self.expiries.clear();
        self.removed.iter_mut().for_each(|r| *r = self.offset);
    }

    /// Whether a watched key changed at or after the offset it was watched at: its version if
    /// present, its bucket's last removal if absent (which may abort for a removal of another
    /// key of the bucket: spurious aborts are allowed, missed changes are not). Before
    /// [`Store::exact_from`] a replica may not know a version another knows, so every watch
    /// taken before it aborts, alike everywhere.
    pub(super) fn watch_broken(&self, watches: &[(Bytes, u64)]) -> bool {
        watches.iter().any(|(key, at)| {
            self.exact_from.is_none_or(|from| *at < from)
                || match self.map.get(key) {
                    Some(e) => e.version >= *at,
                    None => self.removed[bucket(key)] >= *at,
                }
        })
    }

    /// Applies one command of the record at [`Store::offset`] stamped `ts_ms`.
    pub(super) fn apply(&mut self, ts_ms: u64, cmd: Command) -> Reply {
        self.clock_ms = self.clock_ms.max(ts_ms);
        self.expire_due();
        match cmd {
            Command::HashOp(c) => self.apply_hash(c),
            Command::ListOp(c) => self.apply_list(c),
            Command::SetOp(c) => self.apply_set(c),
            Command::ZSetOp(c) => self.apply_zset(c),
            Command::Flush => {
                self.flush();
                Reply::ok()
            }
            // The clock moved and the keys due expired above: nothing else to do.
            Command::Tick => Reply::ok(),
            Command::Multi { ops, watches } => {
                if self.watch_broken(&watches) {
                    return Reply::NilArray;
                }
                // One record: every operation sees the map as the previous one left it.
                let replies = ops
                    .into_iter()
                    .map(|op| match op {
                        TxOp::Write(cmd) => self.apply(ts_ms, cmd),
                        TxOp::Read(r) => self.read(&r),
                        TxOp::Reply(b) => Reply::Raw(b),
                    })
                    .collect();
                Reply::Array(replies)
            }
            other => self.apply_string(other),
        }
    }

    /// Answers a read by the replicated clock: inside a transaction, the clock of its record.
    pub(super) fn read(&self, r: &TxRead) -> Reply {
        let result = match r {
            TxRead::Hash(h) => self.read_hash(h),
            TxRead::List(l) => self.read_list(l),
            TxRead::Set(s) => self.read_set(s),
            TxRead::ZSet(z) => self.read_zset(z),
            TxRead::Time => Ok(time_reply(self.clock_ms)),
            other => self.read_string(other),
        };
        result.unwrap_or_else(|e| e)
    }

    /// Live keys.
    pub(super) fn dbsize(&self) -> i64 {
        let now = self.clock_ms;
        let expired = self.expiries.range(..(now + 1, Bytes::new())).count();
        (self.map.len() - expired.min(self.map.len())) as i64
    }
}

/// `TIME` at `clock_ms`: seconds and microseconds, as Redis answers it.
fn time_reply(clock_ms: u64) -> Reply {
    Reply::Array(vec![
        Reply::bulk((clock_ms / 1000).to_string()),
        Reply::bulk(((clock_ms % 1000) * 1000).to_string()),
    ])
}
