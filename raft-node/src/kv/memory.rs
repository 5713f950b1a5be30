//! `MEMORY USAGE`: an estimate of the bytes one key takes in the map.
//!
//! The estimate counts what the map holds for the key: its entry in the hash table (the key
//! handle, the entry, a control byte), the key's bytes, its place in the expiry index if it has
//! one, and the value: the bytes of every string, element, field or member plus the handle and
//! index slots each takes in its collection. Allocator rounding and spare capacity are not
//! counted, and bytes shared with a buffer the request arrived in count only for the part the
//! key refers to. For collections longer than `samples` (not 0), the first `samples` elements
//! are measured and the rest assumed alike, as Redis samples.
//!
//! The key table keeps the sum of every key's estimate at [`SAMPLES`] samples up to date as
//! keys change (see `key_table`): the dataset's estimated size, which `maxmemory` is compared
//! with.

use std::mem::size_of;

use bytes::Bytes;

use super::store::{Entry, Value};
use super::zset::Score;

/// What a collection's index adds per element beyond its handles: a hash table's control byte
/// and stored hash, or an ordered index's share of a node.
const INDEX_SLOT: usize = 16;

/// The samples of the running total of the key table: `MEMORY USAGE`'s default, so that
/// changing a key costs a few elements' measure however large its collection.
pub(super) const SAMPLES: usize = 5;

/// The estimated bytes of `key` holding `entry`, measuring at most `samples` elements of a
/// collection (0: all of them).
pub(super) fn usage(key_len: usize, entry: &Entry, samples: usize) -> u64 {
    let mut n = size_of::<(Bytes, Entry)>() + 1 + key_len;
    if entry.expire_at_ms.is_some() {
        n += size_of::<(u64, Bytes)>() + INDEX_SLOT;
    }
    let per = |len: usize, sizes: &mut dyn Iterator<Item = usize>| -> usize {
        let take = if samples == 0 { len } else { samples.min(len) };
        let measured: usize = sizes.take(take).sum();
        if take == 0 {
            0
        } else {
            // Scaled up from the sample; exact when every element was measured.
            (measured as u128 * len as u128 / take as u128) as usize
        }
    };
    // A collection's own header lives in an allocation of its own, behind the `Arc`'s two
    // reference counts.
    let counts = 2 * size_of::<usize>();
    n += match &entry.value {
        Value::Str(_) => 0,
        Value::Hash(_) => counts + size_of::<super::store::Hash>(),
        Value::List(_) => counts + size_of::<super::store::List>(),
        Value::Set(_) => counts + size_of::<super::store::Set>(),
        Value::ZSet(_) => counts + size_of::<super::zset::ZSet>(),
    };
    n += match &entry.value {
        Value::Str(s) => s.len(),
        Value::Hash(h) => per(
            h.len(),
            &mut h
                .iter()
                .map(|(f, v)| f.len() + v.len() + size_of::<(Bytes, Bytes)>() + INDEX_SLOT),
        ),
        Value::List(l) => per(l.len(), &mut l.iter().map(|e| e.len() + size_of::<Bytes>())),
        Value::Set(s) => per(
            s.len(),
            &mut s.iter().map(|m| m.len() + size_of::<Bytes>() + INDEX_SLOT),
        ),
        // A member is held twice (by score and in order), sharing its bytes.
        Value::ZSet(z) => per(
            z.len(),
            &mut z
                .iter()
                .map(|(m, _)| m.len() + 2 * (size_of::<(Bytes, Score)>() + INDEX_SLOT)),
        ),
    };
    n as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::store::List;
    use std::sync::Arc;

    fn entry(value: Value, expire_at_ms: Option<u64>) -> Entry {
        Entry {
            value,
            expire_at_ms,
            version: 1,
        }
    }

    #[test]
    fn a_string_counts_its_key_and_value_bytes() {
        let key = Bytes::from_static(b"key");
        let small = usage(
            key.len(),
            &entry(Value::Str(Bytes::from(vec![0; 10])), None),
            5,
        );
        let large = usage(
            key.len(),
            &entry(Value::Str(Bytes::from(vec![0; 1010])), None),
            5,
        );
        assert_eq!(large - small, 1000);
        assert!(small > 13, "the entry itself counts too");
        let expiring = usage(
            key.len(),
            &entry(Value::Str(Bytes::from(vec![0; 10])), Some(9)),
            5,
        );
        assert!(expiring > small, "an expiry takes a place in the index");
    }

    #[test]
    fn collections_grow_with_their_elements_and_samples_scale_up() {
        let key = Bytes::from_static(b"l");
        let list = |n: usize| {
            let l: List = (0..n).map(|_| Bytes::from(vec![0; 100])).collect();
            entry(Value::List(Arc::new(l)), None)
        };
        let one = usage(key.len(), &list(1), 0);
        let ten = usage(key.len(), &list(10), 0);
        let per = (100 + size_of::<Bytes>()) as u64;
        assert_eq!(ten - one, 9 * per);
        assert_eq!(
            usage(key.len(), &list(10), 3),
            ten,
            "alike elements: the sample is exact"
        );
        let mut mixed: List = (0..10).map(|_| Bytes::from(vec![0; 10])).collect();
        mixed.push_front(Bytes::from(vec![0; 1000]));
        let mixed = entry(Value::List(Arc::new(mixed)), None);
        assert!(
            usage(key.len(), &mixed, 1) > usage(key.len(), &mixed, 0),
            "a sample extrapolates from the elements it saw"
        );
    }
}
