//! A hash of a replica's protocol state (feature `testing`), for the explicit-state explorer
//! (`sim::explore`), which merges states with equal fingerprints.

use std::fmt::Write as _;
use std::hash::{Hash, Hasher};

use super::Replica;
use crate::types::Instant;

impl Replica {
    /// A hash of everything that decides this replica's future behaviour, with every instant
    /// taken relative to `now`.
    ///
    /// Why relative: the core never reads a clock, and every decision it takes compares an
    /// instant it stored with the `now` of an input (a deadline passed, a lease still holds).
    /// Two replicas whose stored instants differ only by a common shift of the clock therefore
    /// behave alike from then on, provided the driver also shifts its clock; the explorer
    /// shifts its model clock with them, so such states are merged. `Instant::NEVER` stays as it
    /// is.
    ///
    /// Left out: the configuration (the same in one exploration) and the statistics counters
    /// (reported, never read by a protocol decision). The state is written with its `Debug`
    /// form and every `Instant(n)` in it rewritten to `n - now`: slower than a derived `Hash`
    /// but it cannot miss a field added later. The hasher is std's SipHash with fixed keys, so
    /// fingerprints are the same from run to run.
    pub fn fingerprint(&self, now: Instant) -> u64 {
        let mut text = String::with_capacity(2048);
        let _ = write!(
            text,
            "{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}",
            self.rng,
            self.election,
            self.persist_seq,
            self.persisted_seq,
            self.held,
            self.released,
            self.role,
            self.log,
            self.voter_history,
            self.high_watermark,
            self.applied,
            self.next_request,
            self.in_flight,
            self.resigning,
            self.reads,
            self.started_at,
            self.snapshot,
            self.download,
        );
        let mut h = std::collections::hash_map::DefaultHasher::new();
        hash_relative(&text, now, &mut h);
        h.finish()
    }
}

/// Hashes `text` with the number of every `Instant(n)` replaced by `n - now` (signed).
pub(crate) fn hash_relative(text: &str, now: Instant, h: &mut impl Hasher) {
    const TAG: &str = "Instant(";
    let mut rest = text;
    while let Some(i) = rest.find(TAG) {
        let (head, tail) = rest.split_at(i + TAG.len());
        head.hash(h);
        let digits = tail.bytes().take_while(u8::is_ascii_digit).count();
        match tail[..digits].parse::<u64>() {
            Ok(u64::MAX) => "NEVER".hash(h),
            Ok(n) => (i128::from(n) - i128::from(now.0)).hash(h),
            Err(_) => {}
        }
        rest = &tail[digits..];
    }
    rest.hash(h);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::LogState;
    use crate::protocol::{Input, Outputs, VoterHistory};
    use crate::{Config, ReplicaId};

    /// Replica 1 of three, started at `start` with the same seed.
    fn replica(start: u64) -> Replica {
        let cfg = Config::new(ReplicaId(1), (1..=3).map(ReplicaId))
            .validate()
            .unwrap();
        let voters = VoterHistory::new(cfg.bootstrap_voters());
        Replica::new(
            cfg,
            None,
            &LogState::default(),
            None,
            voters,
            7,
            Instant(start),
        )
    }

    #[test]
    fn replicas_alike_but_for_a_shift_of_the_clock_share_a_fingerprint() {
        let (a, b) = (replica(0), replica(5_000));
        assert_eq!(a.fingerprint(Instant(10)), b.fingerprint(Instant(5_010)));
        assert_ne!(
            a.fingerprint(Instant(10)),
            b.fingerprint(Instant(10)),
            "timers 5 µs apart"
        );
        // A step that changes the role changes the fingerprint.
        let mut c = replica(0);
        let mut out = Outputs::default();
        let late = Instant(60_000_000_000);
        c.step(late, Input::Tick, &mut out);
        assert_ne!(
            c.role(),
            a.role(),
            "a minute without a leader starts an election"
        );
        assert_ne!(c.fingerprint(late), a.fingerprint(late));
    }

    fn fp(text: &str, now: u64) -> u64 {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        hash_relative(text, Instant(now), &mut h);
        h.finish()
    }

    #[test]
    fn instants_are_hashed_relative_to_now() {
        let a = fp("x Instant(100) y Instant(18446744073709551615)", 40);
        let b = fp("x Instant(160) y Instant(18446744073709551615)", 100);
        let c = fp("x Instant(161) y Instant(18446744073709551615)", 100);
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_ne!(fp("Offset(1)", 0), fp("Offset(2)", 0));
    }
}
