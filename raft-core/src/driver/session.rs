//! Write sessions: one caller's ordered stream of writes, such as a client connection's.
//!
//! Within one batch, order is kept by proposing the batch in one go. Across batches, a batch
//! forwarded to the leader may arrive late: its forwarder gave up waiting (its outcome was
//! reported unknown) and the caller went on, so a later batch can reach the leader first. Each
//! batch of a session therefore carries `(session, seq)`, and a replica drops, unproposed, a
//! batch older than one of the same session it already proposed ([`WriteError::Superseded`]).
//!
//! The table lives in the memory of each replica process. A late batch can only be appended by
//! the replica it was sent to, and only while that replica leads the epoch in which it was sent
//! (the `Forward` carries that epoch): a replica that no longer leads refuses it, and so does
//! one that leads again in a later epoch, when another leader may have taken a later batch of
//! the session in between. So no table needs to outlive a leadership.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use bytes::Bytes;

use super::outcome::{Committed, WriteError};
use super::Node;
use crate::message::WriteOrder;

/// One caller's stream of writes: writes of a later [`WriteSession::write_batch`] call never
/// take effect before writes of an earlier one, whichever replica they enter, as long as they
/// go through this session. Not `Clone`: two callers sharing one session would race.
#[derive(Debug)]
pub struct WriteSession {
    id: u64,
    seq: u64,
}

impl Default for WriteSession {
    fn default() -> Self {
        WriteSession::new()
    }
}

impl WriteSession {
    /// A new session with an id unique in this process and, in practice, among all processes
    /// and restarts: ids count up from a random 64-bit start drawn once per process, so two
    /// processes collide only if their ranges overlap (about `sessions / 2^64`).
    pub fn new() -> WriteSession {
        static NEXT: OnceLock<AtomicU64> = OnceLock::new();
        let next = NEXT.get_or_init(|| {
            use std::hash::{BuildHasher, Hasher};
            // The standard library's per-process random keys; the hasher's output is random.
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u128(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos()),
            );
            AtomicU64::new(h.finish())
        });
        WriteSession {
            id: next.fetch_add(1, Ordering::Relaxed),
            seq: 0,
        }
    }

    /// Writes `payloads` through `node` (proposed there or forwarded to its leader), in order
    /// and after every earlier batch of this session; one result per payload, as
    /// [`Node::write_batch`].
    pub async fn write_batch(
        &mut self,
        node: &Node,
        payloads: Vec<Bytes>,
    ) -> Vec<Result<Committed, WriteError>> {
        let (id, seq) = (self.id, &mut self.seq);
        node.write_in_parts(payloads, || {
            *seq += 1;
            Some(WriteOrder {
                session: id,
                seq: *seq,
            })
        })
        .await
    }
}

/// Most sessions a replica remembers; past it, those idle longest are forgotten first.
const SESSIONS_MAX: usize = 1 << 16;
/// How long a session is remembered after its last batch: far beyond any forward timeout.
const SESSION_RETENTION: Duration = Duration::from_secs(600);

/// Per session, the latest batch this replica proposed, and when.
#[derive(Default)]
pub(super) struct SessionTable {
    /// Per session: the latest batch's seq and the stamp of its entry in `by_age`.
    last: BTreeMap<u64, (u64, u64)>,
    /// `(stamp, proposed at, session)` in proposal order, for forgetting the oldest first.
    by_age: VecDeque<(u64, tokio::time::Instant, u64)>,
    next_stamp: u64,
}

/// Whether a batch may be proposed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Admission {
    Admitted,
    /// This replica proposed this very batch before.
    Duplicate,
    /// This replica proposed a later batch of the session.
    Superseded,
}

impl SessionTable {
    /// Whether batch `order` may be proposed: not when this replica already proposed it (a
    /// duplicate delivery) or a later batch of its session (a late one).
    pub(super) fn admits(&self, order: WriteOrder) -> Admission {
        match self.last.get(&order.session) {
            Some((seq, _)) if order.seq == *seq => Admission::Duplicate,
            Some((seq, _)) if order.seq < *seq => Admission::Superseded,
            _ => Admission::Admitted,
        }
    }

    /// Notes that batch `order` was proposed (at least its first write). Forgets sessions
    /// idle past the retention, and the oldest ones beyond the bound, in insertion order.
    pub(super) fn proposed(&mut self, order: WriteOrder) {
        let now = tokio::time::Instant::now();
        let stamp = self.next_stamp;
        self.next_stamp += 1;
        self.last.insert(order.session, (order.seq, stamp));
        self.by_age.push_back((stamp, now, order.session));
        while let Some(&(stamp, at, session)) = self.by_age.front() {
            let expired = now.duration_since(at) >= SESSION_RETENTION;
            // Bounding the queue bounds the map: every remembered session has an entry in it.
            if !expired && self.by_age.len() <= SESSIONS_MAX {
                break;
            }
            self.by_age.pop_front();
            // A later batch of the session moved its entry further back in the queue.
            if self.last.get(&session).is_some_and(|(_, s)| *s == stamp) {
                self.last.remove(&session);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_batch_older_than_one_proposed_is_not_admitted() {
        let mut t = SessionTable::default();
        let o = |session, seq| WriteOrder { session, seq };
        assert_eq!(t.admits(o(1, 1)), Admission::Admitted);
        t.proposed(o(1, 2));
        assert_eq!(
            t.admits(o(1, 1)),
            Admission::Superseded,
            "late batch 1 after 2"
        );
        assert_eq!(t.admits(o(1, 2)), Admission::Duplicate, "batch 2 again");
        assert_eq!(t.admits(o(1, 3)), Admission::Admitted);
        assert_eq!(
            t.admits(o(2, 1)),
            Admission::Admitted,
            "sessions are independent"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn idle_sessions_are_forgotten_and_the_table_stays_bounded() {
        let mut t = SessionTable::default();
        let o = |session, seq| WriteOrder { session, seq };
        t.proposed(o(1, 1));
        tokio::time::advance(SESSION_RETENTION).await;
        t.proposed(o(2, 1));
        assert_eq!(
            t.admits(o(1, 1)),
            Admission::Admitted,
            "session 1 was forgotten"
        );
        assert_eq!(t.admits(o(2, 1)), Admission::Duplicate);
        for s in 10..10 + SESSIONS_MAX as u64 + 5 {
            t.proposed(o(s, 1));
        }
        assert!(t.last.len() <= SESSIONS_MAX);
        assert!(t.by_age.len() <= SESSIONS_MAX);
        for seq in 2..SESSIONS_MAX as u64 * 2 {
            t.proposed(o(3, seq));
        }
        assert!(
            t.by_age.len() <= SESSIONS_MAX,
            "one busy session cannot grow it"
        );
        assert_eq!(t.admits(o(3, 5)), Admission::Superseded);
    }

    #[test]
    fn sessions_get_distinct_ids() {
        let (a, b) = (WriteSession::new(), WriteSession::new());
        assert_ne!(a.id, b.id);
    }
}
