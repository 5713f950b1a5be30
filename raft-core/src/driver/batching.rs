//! Large batches in parts: a caller's batch is handed to the replica task in parts of at most
//! [`PART_BYTES_MAX`] payload bytes, each only once the previous part committed.
//!
//! A batch travels to the leader in one `Forward` frame, and transports refuse a frame above
//! their limit (16 MiB by default) before sending it. A pipeline of large writes through a
//! follower would then fail every time while the same pipeline on the leader succeeded (W4).
//! In parts, each frame fits; order holds because a part is sent only after every write of
//! the previous one committed, and a part that did not wholly commit ends the batch: the writes
//! after it are never sent and get the first failure's error (a refusal stays a refusal, since
//! none of them was proposed; an unknown outcome makes them unknown too, never refused).

use bytes::Bytes;

use super::outcome::{Committed, WriteError};
use super::Node;
use crate::message::WriteOrder;

/// Payload bytes in one part, at most (a single larger payload is a part of its own).
pub const PART_BYTES_MAX: usize = 4 << 20;

/// Where each part of `payloads` ends (exclusive indices), by [`PART_BYTES_MAX`].
pub(super) fn part_ends(payloads: &[Bytes]) -> Vec<usize> {
    let mut ends = Vec::new();
    let mut bytes = 0usize;
    for (i, p) in payloads.iter().enumerate() {
        if bytes > 0 && bytes + p.len() > PART_BYTES_MAX {
            ends.push(i);
            bytes = 0;
        }
        bytes += p.len();
    }
    if !payloads.is_empty() {
        ends.push(payloads.len());
    }
    ends
}

impl Node {
    /// Writes `payloads` in parts, each with the order `next_order` gives it (a new sequence
    /// number of the caller's session, or none), one part at a time.
    pub(super) async fn write_in_parts(
        &self,
        mut payloads: Vec<Bytes>,
        mut next_order: impl FnMut() -> Option<WriteOrder>,
    ) -> Vec<Result<Committed, WriteError>> {
        let ends = part_ends(&payloads);
        if ends.len() <= 1 {
            return self.write_ordered(payloads, next_order()).await;
        }
        let total = payloads.len();
        let mut results = Vec::with_capacity(total);
        let mut start = 0;
        for end in ends {
            let rest = payloads.split_off(end - start);
            let part = std::mem::replace(&mut payloads, rest);
            start = end;
            let got = self.write_ordered(part, next_order()).await;
            let failed = got.iter().find_map(|r| r.as_ref().err().cloned());
            results.extend(got);
            if let Some(e) = failed {
                results.resize(total, Err(e));
                break;
            }
        }
        results
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sizes(ns: &[usize]) -> Vec<Bytes> {
        ns.iter().map(|n| Bytes::from(vec![0u8; *n])).collect()
    }

    #[test]
    fn parts_stay_under_the_bound_and_keep_every_payload() {
        assert!(part_ends(&[]).is_empty());
        assert_eq!(part_ends(&sizes(&[10, 20])), vec![2]);
        let mb = 1 << 20;
        assert_eq!(part_ends(&sizes(&[mb; 9])), vec![4, 8, 9]);
        // A payload larger than the bound is a part of its own.
        assert_eq!(
            part_ends(&sizes(&[10, PART_BYTES_MAX + 1, 10])),
            vec![1, 2, 3]
        );
    }
}
