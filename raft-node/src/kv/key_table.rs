//! The key table: a hash map cut into [`SHARDS`] shards, each behind an `Arc`.
//!
//! A snapshot captures the whole table by cloning the shard pointers ([`KeyTable::capture`]),
//! under the state machine's lock but in microseconds; it is then encoded from the capture on
//! a thread of its own while writes go on. The first write to a shard after a capture copies
//! that shard (`Arc::make_mut`): its slots and key handles, not the bytes they point to, since
//! keys and values are reference-counted and collections are shared the same way. So a
//! snapshot costs at most one copy of the table's slots, spread over the writes that follow
//! it, instead of the whole encoded state in one buffer while writes wait.
//!
//! The table also keeps the sum of its keys' `MEMORY USAGE` estimates ([`KeyTable::bytes`]):
//! every insert and removal adds or subtracts the key's estimate, and a change through
//! [`KeyTable::get_mut`] replaces the key's estimate before it with the one after when its
//! [`EntryMut`] is dropped. Each estimate measures at most a few elements of a collection
//! (`memory::SAMPLES`), so keeping the sum costs little per write.

use std::collections::HashMap;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use bytes::Bytes;

use super::keyspace::scan_hash;
use super::memory::{usage, SAMPLES};
use super::store::Entry;

/// Shards of the table: enough that copying one after a capture is quick (about 4,000 keys
/// each at a million keys), few enough that a capture is a few kilobytes of pointers.
pub(super) const SHARDS: usize = 256;

/// One shard.
pub(super) type Shard = HashMap<Bytes, Entry>;

/// The table as a snapshot captured it: the shards as they were, shared with the live table
/// until a write copies one.
pub(super) type Captured = Vec<Arc<Shard>>;

/// The key table. See the module documentation.
#[derive(Debug, Clone)]
pub(super) struct KeyTable {
    shards: Vec<Arc<Shard>>,
    len: usize,
    /// The sum of every key's estimate (see the module documentation).
    bytes: u64,
}

impl Default for KeyTable {
    fn default() -> KeyTable {
        KeyTable {
            shards: (0..SHARDS).map(|_| Arc::default()).collect(),
            len: 0,
            bytes: 0,
        }
    }
}

/// A key's entry being changed: when dropped, the table's total takes the entry's new
/// estimate in place of its old one.
pub(super) struct EntryMut<'a> {
    key_len: usize,
    entry: &'a mut Entry,
    bytes: &'a mut u64,
    before: u64,
}

impl Deref for EntryMut<'_> {
    type Target = Entry;
    fn deref(&self) -> &Entry {
        self.entry
    }
}

impl DerefMut for EntryMut<'_> {
    fn deref_mut(&mut self) -> &mut Entry {
        self.entry
    }
}

impl Drop for EntryMut<'_> {
    fn drop(&mut self) {
        let after = estimate(self.key_len, self.entry);
        *self.bytes = self.bytes.saturating_sub(self.before).saturating_add(after);
    }
}

/// The estimate of a key of `key_len` bytes holding `entry`, as the total counts it.
fn estimate(key_len: usize, entry: &Entry) -> u64 {
    usage(key_len, entry, SAMPLES)
}

/// The shard `key` lives in.
fn shard_of(key: &[u8]) -> usize {
    // The low bits of the FNV hash; `Store::removed` buckets use the high ones.
    (scan_hash(key) % SHARDS as u64) as usize
}

impl KeyTable {
    /// The entry of `key`.
    pub(super) fn get(&self, key: &[u8]) -> Option<&Entry> {
        self.shards[shard_of(key)].get(key)
    }

    /// The stored key and entry of `key`.
    pub(super) fn get_key_value(&self, key: &[u8]) -> Option<(&Bytes, &Entry)> {
        self.shards[shard_of(key)].get_key_value(key)
    }

    /// Whether `key` is present.
    pub(super) fn contains_key(&self, key: &[u8]) -> bool {
        self.shards[shard_of(key)].contains_key(key)
    }

    /// The entry of `key`, to change it (copying its shard if a capture still shares it); the
    /// total follows the change when the guard is dropped.
    pub(super) fn get_mut(&mut self, key: &[u8]) -> Option<EntryMut<'_>> {
        let shard = &mut self.shards[shard_of(key)];
        if !shard.contains_key(key) {
            return None;
        }
        let entry = Arc::make_mut(shard).get_mut(key)?;
        let before = estimate(key.len(), entry);
        Some(EntryMut {
            key_len: key.len(),
            entry,
            bytes: &mut self.bytes,
            before,
        })
    }

    /// Sets `key` to `entry`; returns the entry it replaced.
    pub(super) fn insert(&mut self, key: Bytes, entry: Entry) -> Option<Entry> {
        let key_len = key.len();
        let added = estimate(key_len, &entry);
        let old = Arc::make_mut(&mut self.shards[shard_of(&key)]).insert(key, entry);
        match &old {
            None => self.len += 1,
            Some(o) => self.bytes = self.bytes.saturating_sub(estimate(key_len, o)),
        }
        self.bytes = self.bytes.saturating_add(added);
        old
    }

    /// Removes `key`; returns its entry.
    pub(super) fn remove(&mut self, key: &[u8]) -> Option<Entry> {
        let shard = &mut self.shards[shard_of(key)];
        if !shard.contains_key(key) {
            return None;
        }
        let old = Arc::make_mut(shard).remove(key);
        if let Some(o) = &old {
            self.len -= 1;
            self.bytes = self.bytes.saturating_sub(estimate(key.len(), o));
        }
        old
    }

    /// The sum of every key's estimate (`MEMORY USAGE` at its default samples): the dataset's
    /// estimated size.
    pub(super) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Removes every key (a capture keeps what it holds).
    pub(super) fn clear(&mut self) {
        *self = KeyTable::default();
    }

    /// How many keys are present.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Every key and entry, in no particular order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&Bytes, &Entry)> {
        self.shards.iter().flat_map(|s| s.iter())
    }

    /// The table as it is now, sharing every shard (see the module documentation).
    pub(super) fn capture(&self) -> Captured {
        self.shards.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::store::Value;

    fn entry(v: &'static str) -> Entry {
        Entry {
            value: Value::Str(Bytes::from_static(v.as_bytes())),
            expire_at_ms: None,
            version: 0,
        }
    }

    fn value(e: Option<&Entry>) -> Option<&[u8]> {
        match e.map(|e| &e.value) {
            Some(Value::Str(b)) => Some(b),
            _ => None,
        }
    }

    /// Goal: a capture keeps the table as it was while the live table changes, and copies
    /// only the shards written after it. Method: 2,000 keys, capture, then overwrite one key,
    /// remove another, add a third and clear: the capture still holds the 2,000 original
    /// entries; one write shares all other shards with the capture.
    #[test]
    fn a_capture_is_unchanged_by_later_writes() {
        let mut t = KeyTable::default();
        let keys: Vec<Bytes> = (0..2000).map(|i| Bytes::from(format!("k{i}"))).collect();
        for k in &keys {
            t.insert(k.clone(), entry("old"));
        }
        assert_eq!(t.len(), 2000);
        let captured = t.capture();
        t.get_mut(&keys[0]).expect("present").value = Value::Str(Bytes::from_static(b"new"));
        let shared = captured
            .iter()
            .zip(&t.shards)
            .filter(|(c, l)| Arc::ptr_eq(c, l))
            .count();
        assert_eq!(shared, SHARDS - 1, "one write copies one shard");
        assert!(t.remove(&keys[1]).is_some());
        assert!(t.remove(b"absent").is_none());
        assert!(t.insert(Bytes::from_static(b"added"), entry("x")).is_none());
        assert_eq!(t.len(), 2000);
        assert_eq!(value(t.get(&keys[0])), Some(&b"new"[..]));
        assert!(!t.contains_key(&keys[1]));
        t.clear();
        assert_eq!((t.len(), t.iter().count()), (0, 0));
        let held: usize = captured.iter().map(|s| s.len()).sum();
        assert_eq!(held, 2000);
        for k in &keys {
            let e = captured[shard_of(k)].get(k);
            assert_eq!(value(e), Some(&b"old"[..]), "{k:?}");
        }
    }
}
