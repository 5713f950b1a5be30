//! Warnings about refused peers that stay readable under a retry storm: a peer with a wrong
//! certificate redials with backoff, and every attempt fails the same way; one WARN line per
//! source per window, carrying how many were left out since the last, says all there is.
//!
//! The server's certificate verifier knows why it refused but not who connected; the accept
//! loop knows the remote address but only gets a TLS alert back. The verifier notes its reason
//! here and the accept loop takes it, so that the warning has both.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// At most one warning per source per this long.
pub(crate) const WINDOW: Duration = Duration::from_secs(10);

/// Sources remembered at most (a scan from many addresses must not grow the map for good).
const SOURCES_MAX: usize = 1024;

/// The refusal log of one endpoint.
#[derive(Debug, Default)]
pub(crate) struct Refusals {
    last_reason: Mutex<Option<String>>,
    seen: Mutex<HashMap<String, Seen>>,
}

#[derive(Debug)]
struct Seen {
    logged_at: Instant,
    suppressed: u64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Refusals {
    /// The verifier refused a certificate for this reason.
    pub(crate) fn note_reason(&self, reason: String) {
        *lock(&self.last_reason) = Some(reason);
    }

    /// The reason the verifier noted last, once.
    pub(crate) fn take_reason(&self) -> Option<String> {
        lock(&self.last_reason).take()
    }

    /// Whether a warning about `source` may be logged at `now`: `Some(n)` with the number of
    /// warnings about it left out since the last one logged, `None` to leave this one out.
    pub(crate) fn admit(&self, source: &str, now: Instant) -> Option<u64> {
        let mut seen = lock(&self.seen);
        if let Some(s) = seen.get_mut(source) {
            if now.saturating_duration_since(s.logged_at) < WINDOW {
                s.suppressed += 1;
                return None;
            }
            let left_out = s.suppressed;
            *s = Seen {
                logged_at: now,
                suppressed: 0,
            };
            return Some(left_out);
        }
        if seen.len() >= SOURCES_MAX {
            seen.retain(|_, s| now.saturating_duration_since(s.logged_at) < WINDOW);
            if seen.len() >= SOURCES_MAX {
                return None;
            }
        }
        seen.insert(
            source.to_owned(),
            Seen {
                logged_at: now,
                suppressed: 0,
            },
        );
        Some(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_warning_per_source_per_window_counts_the_rest() {
        let r = Refusals::default();
        let t0 = Instant::now();
        assert_eq!(r.admit("10.0.0.9", t0), Some(0));
        for i in 1..=83 {
            assert_eq!(
                r.admit("10.0.0.9", t0 + Duration::from_millis(i * 12)),
                None
            );
        }
        assert_eq!(r.admit("10.0.0.7", t0), Some(0), "another source is apart");
        assert_eq!(r.admit("10.0.0.9", t0 + WINDOW), Some(83));
        assert_eq!(r.admit("10.0.0.9", t0 + WINDOW + WINDOW / 2), None);
    }

    #[test]
    fn a_reason_is_taken_once() {
        let r = Refusals::default();
        assert_eq!(r.take_reason(), None);
        r.note_reason("certificate names replica 9, not a peer".into());
        assert_eq!(
            r.take_reason().as_deref(),
            Some("certificate names replica 9, not a peer")
        );
        assert_eq!(r.take_reason(), None);
    }

    #[test]
    fn the_map_of_sources_stays_bounded() {
        let r = Refusals::default();
        let t0 = Instant::now();
        for i in 0..SOURCES_MAX {
            assert_eq!(r.admit(&format!("s{i}"), t0), Some(0));
        }
        assert_eq!(r.admit("one more", t0), None, "full within the window");
        assert_eq!(r.admit("one more", t0 + WINDOW), Some(0), "old ones expire");
        assert!(lock(&r.seen).len() <= SOURCES_MAX);
    }
}
