//! Reads over the whole key space: `KEYS`, `SCAN` and the glob patterns both take.
//!
//! `SCAN` keeps Redis's guarantee that a key present for the whole iteration is returned, with
//! a cursor that is a position in hash order: each call returns the live keys whose 64-bit
//! FNV-1a hash is at or above the cursor, lowest hashes first (all keys of one hash together),
//! and the next cursor is one past the last hash returned (0 once nothing is left). Keys added
//! or removed meanwhile do not move the others. A call costs a pass over the map.

use bytes::Bytes;

/// Redis's glob: `*`, `?`, `[abc]`, `[^abc]`, `[a-z]` and `\x` escapes, over bytes.
pub fn glob_match(pattern: &[u8], s: &[u8]) -> bool {
    let (mut p, mut i) = (0, 0);
    // Where to resume after the last `*`: (pattern index after it, string index it covers to).
    let mut star: Option<(usize, usize)> = None;
    while i < s.len() {
        let step = match pattern.get(p) {
            Some(b'*') => {
                star = Some((p + 1, i));
                p += 1;
                continue;
            }
            Some(b'?') => Some(p + 1),
            Some(b'[') => class(pattern, p, s[i]),
            Some(b'\\') if p + 1 < pattern.len() => (pattern[p + 1] == s[i]).then_some(p + 2),
            Some(c) => (*c == s[i]).then_some(p + 1),
            None => None,
        };
        match (step, star) {
            (Some(next), _) => {
                p = next;
                i += 1;
            }
            (None, Some((after, covered))) => {
                // Let the last `*` swallow one more byte and try again from there.
                p = after;
                i = covered + 1;
                star = Some((after, covered + 1));
            }
            (None, None) => return false,
        }
    }
    pattern[p.min(pattern.len())..].iter().all(|c| *c == b'*')
}

/// Matches `c` against the class starting at `pattern[at] == b'['`; the index after the class
/// if it matches. An unclosed class matches literally up to the pattern's end, as in Redis.
fn class(pattern: &[u8], at: usize, c: u8) -> Option<usize> {
    let mut p = at + 1;
    let negate = pattern.get(p) == Some(&b'^');
    if negate {
        p += 1;
    }
    let mut hit = false;
    while p < pattern.len() && pattern[p] != b']' {
        if pattern[p] == b'\\' && p + 1 < pattern.len() {
            hit |= pattern[p + 1] == c;
            p += 2;
        } else if p + 2 < pattern.len() && pattern[p + 1] == b'-' && pattern[p + 2] != b']' {
            let (lo, hi) = (
                pattern[p].min(pattern[p + 2]),
                pattern[p].max(pattern[p + 2]),
            );
            hit |= (lo..=hi).contains(&c);
            p += 3;
        } else {
            hit |= pattern[p] == c;
            p += 1;
        }
    }
    (hit != negate).then_some((p + 1).min(pattern.len()))
}

/// The 64-bit FNV-1a hash that orders `SCAN`.
pub fn scan_hash(key: &[u8]) -> u64 {
    key.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// One `SCAN` step over `keys` (the live keys): at least `count` keys from `cursor` on (more
/// when keys share the last hash), those matching `pattern`, and the next cursor.
pub fn scan_step<'a>(
    keys: impl Iterator<Item = &'a Bytes>,
    cursor: u64,
    pattern: Option<&[u8]>,
    count: usize,
) -> (u64, Vec<Bytes>) {
    let mut ahead: Vec<(u64, &Bytes)> = keys
        .map(|k| (scan_hash(k), k))
        .filter(|(h, _)| *h >= cursor)
        .collect();
    ahead.sort_unstable();
    let mut end = count.max(1).min(ahead.len());
    while end < ahead.len() && end > 0 && ahead[end].0 == ahead[end - 1].0 {
        end += 1;
    }
    let next = match ahead.get(end) {
        Some(_) => ahead[end - 1].0.wrapping_add(1).max(1),
        None => 0,
    };
    let found = ahead[..end]
        .iter()
        .filter(|(_, k)| pattern.is_none_or(|p| glob_match(p, k)))
        .map(|(_, k)| (*k).clone())
        .collect();
    (next, found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn globs_follow_redis() {
        let m = |p: &str, s: &str| glob_match(p.as_bytes(), s.as_bytes());
        assert!(m("*", ""));
        assert!(m("user:*", "user:42"));
        assert!(!m("user:*", "users:42"));
        assert!(m("h?llo", "hello") && m("h?llo", "hallo") && !m("h?llo", "hllo"));
        assert!(m("h[ae]llo", "hello") && !m("h[ae]llo", "hillo"));
        assert!(m("h[^e]llo", "hallo") && !m("h[^e]llo", "hello"));
        assert!(m("h[a-b]llo", "hbllo") && !m("h[a-b]llo", "hcllo"));
        assert!(m("a\\*b", "a*b") && !m("a\\*b", "axb"));
        assert!(m("*a*b*c*", "xxaxxbxxcxx") && !m("*a*b*c*", "xxaxxcxxbxx"));
        assert!(m("a*", "a") && !m("a*b", "a"));
    }

    /// A key present for the whole scan is returned, whatever is added or removed meanwhile.
    #[test]
    fn a_scan_returns_every_key_present_throughout() {
        let mut keys: BTreeSet<Bytes> = (0..500).map(|i| Bytes::from(format!("k{i}"))).collect();
        let stable: Vec<Bytes> = keys.iter().step_by(2).cloned().collect();
        let (mut cursor, mut seen, mut round) = (0u64, BTreeSet::new(), 0);
        loop {
            let (next, found) = scan_step(keys.iter(), cursor, None, 10);
            seen.extend(found);
            // Churn between calls: drop an odd key, add a new one.
            keys.remove(&Bytes::from(format!("k{}", 2 * round + 1)));
            keys.insert(Bytes::from(format!("new{round}")));
            round += 1;
            if next == 0 {
                break;
            }
            assert!(next > cursor, "the cursor moves forward");
            cursor = next;
            assert!(round < 1_000, "the scan ends");
        }
        for k in &stable {
            assert!(
                seen.contains(k),
                "{k:?} was present throughout and returned"
            );
        }
        let (_, matched) = scan_step(keys.iter(), 0, Some(b"k1?"), 10_000);
        assert!(matched.iter().all(|k| k.len() == 3 && k.starts_with(b"k1")));
        assert!(!matched.is_empty());
    }
}
