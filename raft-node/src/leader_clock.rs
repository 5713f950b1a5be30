//! The cluster's one clock: the leader stamps every record it proposes with its time
//! ([`Stamper`], the driver's `Stamp` hook), and every replica judges expiry by the largest
//! stamp it has applied (see `kv`). [`LeaderClock`] decides each stamp:
//!
//! - it never goes back: at least the last stamp this replica issued and the replicated clock
//!   it has applied (a new leader starts from the old leader's time);
//! - a wall clock behind that holds the stamp still until it catches up;
//! - a wall clock ahead of the replicated clock by more than the time since that clock was
//!   seen (measured on the monotonic clock) plus the bound (`expiry.clock_jump_max_ms`) is
//!   clamped to that limit: the stamp moves at the monotonic clock's pace, the jump is logged
//!   (at most every ten seconds) and counted (`raft_clock_jumps_clamped_total`).
//!
//! The clamp judges the wall clock against what this replica saw of the replicated clock, so
//! that clock must stay fresh: [`Ticker`] proposes a record that only carries a stamp
//! (`Command::Tick`) when nothing else was stamped for [`TICK_EVERY`] while keys have an
//! expiry (so expiry advances without writes), and for [`IDLE_TICK_EVERY`] otherwise (so a
//! replica that restarts, or takes over after an election, soon applies a recent stamp). After
//! every replica was down, though, the last stamp is as old as the outage: the clock resumes
//! from it at the monotonic pace and stays behind wall time by the outage (every stamp counts as
//! a clamp, and INFO shows the offset) until the operator raises the bound or sets it to 0.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use prometheus_client::metrics::counter::Counter;
use raft_core::driver::{Node, Stamp};
use raft_core::Role;

use crate::kv::{self, Kv};
use crate::server::now_ms;

/// How often the ticker checks whether a tick is due, and the longest a key stays visible past
/// its expiry on an idle cluster (plus a commit).
pub const TICK_EVERY: Duration = Duration::from_millis(200);

/// The longest the leader goes without stamping a record while no key has an expiry: well
/// below the default bound, so that a new leader's anchor is never older than it.
pub const IDLE_TICK_EVERY: Duration = Duration::from_secs(1);

/// One look at the clocks, in milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reading {
    /// The wall clock, since the Unix epoch.
    pub wall: u64,
    /// The monotonic clock, from any fixed origin.
    pub mono: u64,
    /// The replicated clock this replica has applied.
    pub applied: u64,
    /// The monotonic clock when this replica applied the record that set `applied`.
    pub applied_at: u64,
}

/// The leader's next stamp, and whether the bound clamped it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamped {
    /// The stamp.
    pub stamp: u64,
    /// The wall clock was past the bound.
    pub clamped: bool,
}

/// Decides the stamps of one replica (pure: the clocks are read by the caller).
#[derive(Debug)]
pub struct LeaderClock {
    bound: u64,
    /// `(stamp, monotonic reading)` the bound counts from.
    anchor: Option<(u64, u64)>,
    last: u64,
}

impl LeaderClock {
    /// A clock that lets a stamp run at most `bound` ahead of the elapsed monotonic time (0:
    /// no bound).
    pub fn new(bound: Duration) -> LeaderClock {
        LeaderClock {
            bound: u64::try_from(bound.as_millis()).unwrap_or(u64::MAX),
            anchor: None,
            last: 0,
        }
    }

    /// The next stamp at `r`.
    pub fn next(&mut self, r: Reading) -> Stamped {
        let base = self.last.max(r.applied);
        // Another leader stamped since this one last did (or this is the first stamp): count
        // from the replicated clock, as of when this replica applied it.
        if self.anchor.is_none() || r.applied > self.last {
            self.anchor = Some((r.applied, r.applied_at.min(r.mono)));
        }
        let (at, since) = self.anchor.unwrap_or((base, r.mono));
        let upper = at
            .saturating_add(r.mono.saturating_sub(since))
            .saturating_add(self.bound);
        // Nothing stamped yet (a new cluster): nothing to judge the wall clock against.
        let clamped = self.bound > 0 && at > 0 && r.wall > upper;
        let stamp = if clamped { upper } else { r.wall }.max(base);
        self.last = stamp;
        Stamped { stamp, clamped }
    }
}

/// The driver's `Stamp` hook: rewrites the stamp of every command record this replica
/// proposes as leader with [`LeaderClock`]'s.
pub struct Stamper {
    clock: Mutex<LeaderClock>,
    kv: Arc<Kv>,
    origin: Instant,
    clamped: Counter,
    /// When a clamp was last logged.
    warned: Mutex<Option<Instant>>,
    /// The monotonic reading of the last stamp (ms from `origin`), for the ticker.
    stamped_at: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for Stamper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stamper").finish_non_exhaustive()
    }
}

impl Stamper {
    /// Stamps with `bound` (see [`LeaderClock::new`]), counting clamps in `clamped`.
    pub fn new(kv: Arc<Kv>, bound: Duration, clamped: Counter) -> Stamper {
        Stamper {
            clock: Mutex::new(LeaderClock::new(bound)),
            kv,
            origin: Instant::now(),
            clamped,
            warned: Mutex::new(None),
            stamped_at: std::sync::atomic::AtomicU64::new(0),
        }
    }

    fn mono(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.origin).as_millis() as u64
    }

    /// How long ago this replica last stamped a record.
    fn since_last_stamp(&self) -> Duration {
        let at = self.stamped_at.load(std::sync::atomic::Ordering::Relaxed);
        Duration::from_millis(self.mono(Instant::now()).saturating_sub(at))
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Nothing under these locks can panic halfway through an update.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Stamp for Stamper {
    fn stamp(&self, payload: Bytes) -> Bytes {
        if kv::stamp_of(&payload).is_none() {
            return payload;
        }
        let (applied, seen) = self.kv.clock();
        let now = Instant::now();
        let r = Reading {
            wall: now_ms(),
            mono: self.mono(now),
            applied,
            applied_at: seen.map_or(self.mono(now), |s| self.mono(s)),
        };
        let s = lock(&self.clock).next(r);
        self.stamped_at
            .store(r.mono, std::sync::atomic::Ordering::Relaxed);
        if s.clamped {
            self.clamped.inc();
            let mut warned = lock(&self.warned);
            if warned.is_none_or(|w| now.duration_since(w) >= Duration::from_secs(10)) {
                *warned = Some(now);
                tracing::warn!(
                    wall_ms = r.wall,
                    stamp_ms = s.stamp,
                    ahead_ms = r.wall.saturating_sub(s.stamp),
                    "the wall clock is ahead of the replicated clock by more than \
                     expiry.clock_jump_max_ms: stamping at the bound (counted in \
                     raft_clock_jumps_clamped_total)"
                );
            }
        }
        kv::restamp_owned(payload, s.stamp)
    }
}

/// Proposes clock ticks while this replica leads: see the module documentation.
pub struct Ticker;

impl Ticker {
    /// Runs until `node` stops: every [`TICK_EVERY`], a tick if this replica leads and stamped
    /// nothing for [`TICK_EVERY`] while keys have an expiry, or for [`IDLE_TICK_EVERY`].
    pub fn spawn(node: Node, kv: Arc<Kv>, stamper: Arc<Stamper>) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            // The role from the node's state channel: no round trip to its task per tick.
            let state = node.watch();
            let mut every = tokio::time::interval(TICK_EVERY);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                if state.has_changed().is_err() {
                    // The node stopped: its task, and with it the channel's sender, is gone.
                    return;
                }
                let due = if kv.has_expiries() {
                    TICK_EVERY
                } else {
                    IDLE_TICK_EVERY
                };
                if state.borrow().role != Role::Leader || stamper.since_last_stamp() < due {
                    continue;
                }
                // The outcome does not matter: a lost tick is followed by the next one.
                let _ = node.propose(kv::encode(0, &kv::Command::Tick)).await;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(wall: u64, mono: u64, applied: u64, applied_at: u64) -> Reading {
        Reading {
            wall,
            mono,
            applied,
            applied_at,
        }
    }

    /// Goal: an honest clock passes through unchanged, and stamps never go back.
    #[test]
    fn an_honest_clock_passes_and_stamps_never_go_back() {
        let mut c = LeaderClock::new(Duration::from_secs(5));
        let s = c.next(at(1_000_000, 0, 999_000, 0));
        assert_eq!(
            s,
            Stamped {
                stamp: 1_000_000,
                clamped: false
            }
        );
        let s = c.next(at(1_000_100, 100, 1_000_000, 50));
        assert_eq!(s.stamp, 1_000_100);
        // The wall clock steps back 10 s: the stamp holds still until it catches up.
        let s = c.next(at(990_200, 200, 1_000_100, 150));
        assert_eq!(
            s,
            Stamped {
                stamp: 1_000_100,
                clamped: false
            }
        );
        let s = c.next(at(1_000_300, 10_300, 1_000_100, 150));
        assert_eq!(s.stamp, 1_000_300);
    }

    /// Goal: a wall clock an hour ahead moves the stamp by the bound at most, then at the
    /// monotonic clock's pace, each stamp counted as clamped; once fixed, stamps follow it.
    #[test]
    fn a_jump_ahead_is_clamped_to_the_bound() {
        let hour = 3_600_000;
        let mut c = LeaderClock::new(Duration::from_secs(5));
        assert!(!c.next(at(1_000_000, 0, 1_000_000, 0)).clamped);
        let s = c.next(at(1_000_100 + hour, 100, 1_000_000, 0));
        assert_eq!(
            s,
            Stamped {
                stamp: 1_005_100,
                clamped: true
            }
        );
        let s = c.next(at(1_060_000 + hour, 60_000, 1_005_100, 200));
        assert_eq!(
            s,
            Stamped {
                stamp: 1_065_000,
                clamped: true
            }
        );
        // The clock is fixed: it is behind the clamped stamps by less than the bound, so the
        // stamp holds still, then follows it.
        let s = c.next(at(1_061_000, 61_000, 1_065_000, 60_100));
        assert_eq!(
            s,
            Stamped {
                stamp: 1_065_000,
                clamped: false
            }
        );
        let s = c.next(at(1_070_000, 70_000, 1_065_000, 60_100));
        assert_eq!(
            s,
            Stamped {
                stamp: 1_070_000,
                clamped: false
            }
        );
    }

    /// Goal: a new leader whose clock is an hour ahead starts from the old leader's stamp plus
    /// the time since it applied it, not from its own clock.
    #[test]
    fn a_new_leader_ahead_is_clamped_from_the_old_leaders_stamp() {
        let mut c = LeaderClock::new(Duration::from_secs(5));
        // This replica applied stamp 1_000_000 at monotonic 50_000, and leads 2 s later.
        let s = c.next(at(1_002_000 + 3_600_000, 52_000, 1_000_000, 50_000));
        assert_eq!(
            s,
            Stamped {
                stamp: 1_007_000,
                clamped: true
            }
        );
        // Within the bound, a new leader's clock is taken as it is.
        let mut c = LeaderClock::new(Duration::from_secs(5));
        let s = c.next(at(1_006_000, 52_000, 1_000_000, 50_000));
        assert_eq!(
            s,
            Stamped {
                stamp: 1_006_000,
                clamped: false
            }
        );
        // Behind the old leader's stamp: holds at it.
        let mut c = LeaderClock::new(Duration::from_secs(5));
        let s = c.next(at(990_000, 52_000, 1_000_000, 50_000));
        assert_eq!(
            s,
            Stamped {
                stamp: 1_000_000,
                clamped: false
            }
        );
    }

    /// Goal: another leader's stamps in between re-anchor the bound; a bound of 0 disables it;
    /// a cluster with no stamp yet takes the first wall clock.
    #[test]
    fn anchors_bound_off_and_first_stamp() {
        let mut c = LeaderClock::new(Duration::from_secs(5));
        assert!(!c.next(at(1_000_000, 0, 1_000_000, 0)).clamped);
        // Another leader moved the clock to 2_000_000, seen at monotonic 900_000.
        let s = c.next(at(2_004_000, 901_000, 2_000_000, 900_000));
        assert_eq!(
            s,
            Stamped {
                stamp: 2_004_000,
                clamped: false
            }
        );
        let s = c.next(at(2_010_000, 902_000, 2_004_000, 901_500));
        assert_eq!(
            s,
            Stamped {
                stamp: 2_007_000,
                clamped: true
            }
        );
        let mut off = LeaderClock::new(Duration::ZERO);
        assert_eq!(off.next(at(9_000_000, 0, 1_000, 0)).stamp, 9_000_000);
        let mut fresh = LeaderClock::new(Duration::from_secs(5));
        assert_eq!(fresh.next(at(9_000_000, 0, 0, 0)).stamp, 9_000_000);
    }

    /// Goal: the hook leaves payloads it does not know alone, restamps command records with
    /// the leader's clock, and counts a clamp when the wall clock runs an hour ahead of the
    /// replicated clock.
    #[test]
    fn the_stamper_restamps_commands_and_counts_clamps() {
        use raft_core::io::StateMachine;
        use raft_core::{Epoch, Offset, Record, RecordKind};

        let kv = Arc::new(Kv::new());
        let clamped = Counter::default();
        let stamper = Stamper::new(kv.clone(), Duration::from_secs(5), clamped.clone());
        let other = Bytes::from_static(b"not a command");
        assert_eq!(stamper.stamp(other.clone()), other);
        let tick = kv::encode(0, &kv::Command::Tick);
        let before = now_ms();
        let stamped = stamper.stamp(tick.clone());
        let s = kv::stamp_of(&stamped).unwrap();
        assert!(
            s >= before && s <= now_ms(),
            "the wall clock, on a new cluster"
        );
        assert_eq!(clamped.get(), 0);
        // The replicated clock is an hour behind this wall clock (another leader's).
        let behind = now_ms() - 3_600_000;
        let rec = Record {
            offset: Offset(0),
            epoch: Epoch(1),
            kind: RecordKind::Data,
            payload: kv::restamp_owned(tick.clone(), behind),
        };
        let mut out = Vec::new();
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(kv.apply(&[rec], &mut out))
            .unwrap();
        let stamper = Stamper::new(kv.clone(), Duration::from_secs(5), clamped.clone());
        let s = kv::stamp_of(&stamper.stamp(tick)).unwrap();
        assert!(s >= behind + 5_000 && s < behind + 10_000, "{}", s - behind);
        assert_eq!(clamped.get(), 1);
    }

    /// Goal: `expiry.clock_jump_max_ms` reaches the node's options, 5 s when absent.
    #[test]
    fn the_bound_is_configured() {
        let file = r#"
            cluster_id = "c1"
            replica_id = 1
            data_dir = "d"
            [tls]
            ca_cert = "ca.pem"
            cert = "n.pem"
            key = "n.key"
            [[voters]]
            id = 1
            peer = "127.0.0.1:7101"
            client = "127.0.0.1:7001"
        "#;
        let cfg = |extra: &str| {
            crate::config::FileConfig::parse(&format!("{file}{extra}"))
                .and_then(|f| f.check())
                .map(|c| c.expiry.clock_jump_max)
        };
        assert_eq!(cfg(""), Ok(Duration::from_secs(5)));
        assert_eq!(
            cfg("[expiry]\nclock_jump_max_ms = 250\n"),
            Ok(Duration::from_millis(250))
        );
        assert_eq!(cfg("[expiry]\nclock_jump_max_ms = 0\n"), Ok(Duration::ZERO));
        assert!(cfg("[expiry]\nclock_jump = 1\n").is_err());
    }
}
