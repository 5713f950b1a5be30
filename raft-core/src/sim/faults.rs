//! Per-seed fault settings ("swarm" testing): each seed draws its own mix, so that some runs
//! hammer one kind of fault while others combine all of them.

use std::time::Duration;

use super::SimRng;

/// The fault settings of one run.
#[derive(Clone, Debug, PartialEq)]
pub struct Faults {
    /// Probability that a message is lost.
    pub drop: f64,
    /// Probability that a message is delivered twice.
    pub duplicate: f64,
    /// Network delay bounds; delays are uniform in between, which also reorders messages.
    pub delay_min: Duration,
    /// Upper delay bound.
    pub delay_max: Duration,
    /// Mean time between partition changes (none when zero).
    pub partition_every: Duration,
    /// Mean time between crashes (none when zero).
    pub crash_every: Duration,
    /// Longest time a crashed replica stays down.
    pub downtime_max: Duration,
    /// Probability that a crash tears the unsynced tail (keeps a random part of it).
    pub torn_tail: f64,
    /// Storage sync latency bounds.
    pub sync_min: Duration,
    /// Upper sync latency bound.
    pub sync_max: Duration,
    /// Largest clock rate difference between replicas, in parts per million.
    pub drift_ppm: u32,
    /// Each replica snapshots its state machine after about this many applied records (none
    /// when zero); the log prefix is then purged, so replicas that fall behind must install a
    /// snapshot.
    pub snapshot_every: u64,
    /// Records kept in the log below a snapshot.
    pub snapshot_retention: u64,
    /// Probability that a served snapshot chunk is corrupted (as by a bad disk read).
    pub corrupt_chunk: f64,
    /// Mean time between leadership transfers the operator asks of the leader, to a random
    /// voter (none when zero).
    pub transfer_every: Duration,
    /// Mean time between quiet periods, in which clients write nothing (none when zero): every
    /// log then stays as long as the leader's, so that only the leader's liveness (D3) stops a
    /// replica cut from the leader from being elected.
    pub quiet_every: Duration,
    /// Clocks run at the extremes of the drift bound (one replica at `-drift_ppm`, the others
    /// at `+drift_ppm`), where a timing rule that leans on the bound is tightest.
    pub clock_extremes: bool,
    /// The clients' keys are drawn from `1..=keys`: few keys make every stale read visible to
    /// the linearizability checker, many keep histories short.
    pub keys: u64,
    /// Partitions (every ~700 ms) cut the leader off from every other replica instead of
    /// drawing a random shape, when the leader's clock is the slowest (otherwise they look
    /// again 50 ms later): the faults around which elections, leases and read rounds race.
    pub isolate_leader: bool,
    /// When the adversary isolates a leader, the others' messages to it are held in the
    /// network instead of lost, and arrive together later (after the others had time to elect
    /// a leader of their own, before the old one's check-quorum runs out on its slow clock):
    /// requests that left long before they arrive, around read rounds and elections.
    pub hold_at_isolation: bool,
    /// Snapshots each replica's store keeps (the newest ones): with more, a download that
    /// spans leader changes and catch-ups finishes more often instead of being refused.
    pub snapshots_kept: usize,
    /// Probability that a message straggles: it arrives 50 to 250 ms late (within the request
    /// timeout, so that an answer still counts), long after the messages sent with it.
    pub straggle: f64,
    /// Every replica snapshots at the same offsets (multiples of `snapshot_every`), so that
    /// replicas hold snapshots with the same ids and bytes: a download resumes at a new leader
    /// instead of starting over.
    pub aligned_snapshots: bool,
    /// Each replica keeps its own number of records below its snapshots (drawn per replica
    /// from 0 to 1,000 instead of the one `snapshot_retention`): one leader points a replica at
    /// a snapshot while the next still serves it records from far below.
    pub mixed_retention: bool,
}

impl Faults {
    /// No faults at all: a perfect, fast network and disk.
    pub fn none() -> Faults {
        Faults {
            drop: 0.0,
            duplicate: 0.0,
            delay_min: Duration::from_micros(500),
            delay_max: Duration::from_micros(500),
            partition_every: Duration::ZERO,
            crash_every: Duration::ZERO,
            downtime_max: Duration::ZERO,
            torn_tail: 0.0,
            sync_min: Duration::from_micros(200),
            sync_max: Duration::from_micros(200),
            drift_ppm: 0,
            snapshot_every: 0,
            snapshot_retention: 0,
            corrupt_chunk: 0.0,
            transfer_every: Duration::ZERO,
            quiet_every: Duration::ZERO,
            clock_extremes: false,
            keys: 8,
            isolate_leader: false,
            hold_at_isolation: false,
            snapshots_kept: 2,
            straggle: 0.0,
            aligned_snapshots: false,
            mixed_retention: false,
        }
    }

    /// The settings seed `seed` draws.
    pub fn draw(seed: u64) -> Faults {
        let mut rng = SimRng::new(seed.wrapping_mul(0xA24B_AED4_963E_E407));
        let ms = Duration::from_millis;
        let us = Duration::from_micros;
        let mut faults = Faults {
            drop: rng.pick(&[0.0, 0.0, 0.01, 0.05, 0.15]),
            duplicate: rng.pick(&[0.0, 0.01, 0.05]),
            delay_min: us(rng.pick(&[100, 500, 1000])),
            delay_max: ms(rng.pick(&[1, 5, 20, 60])),
            partition_every: ms(rng.pick(&[0, 300, 800, 2000])),
            crash_every: ms(rng.pick(&[0, 400, 1000, 3000])),
            downtime_max: ms(rng.pick(&[50, 300, 1500])),
            torn_tail: rng.pick(&[0.0, 0.5, 1.0]),
            sync_min: us(rng.pick(&[50, 200])),
            sync_max: us(rng.pick(&[300, 2000, 10_000])),
            drift_ppm: rng.pick(&[0, 1_000, 20_000, 100_000, 200_000]) as u32,
            // Drawn last, so that the draws above are the same as before snapshots existed.
            snapshot_every: rng.pick(&[0, 10, 40, 150]),
            snapshot_retention: rng.pick(&[0, 3, 30]),
            corrupt_chunk: rng.pick(&[0.0, 0.0, 0.1]),
            // Drawn after the snapshot settings for the same reason.
            transfer_every: ms(rng.pick(&[0, 0, 400, 1500])),
            // Drawn last for the same reason.
            quiet_every: ms(rng.pick(&[0, 1500])),
            // Drawn last for the same reason.
            clock_extremes: rng.chance(0.5),
            keys: rng.pick(&[8, 8, 2]),
            isolate_leader: rng.chance(0.5),
            // Drawn last for the same reason.
            hold_at_isolation: rng.chance(0.5),
            // Drawn last for the same reason.
            snapshots_kept: rng.pick(&[2, 2, 16]) as usize,
            // Drawn last for the same reason.
            straggle: rng.pick(&[0.0, 0.0, 0.01, 0.05]),
            // Drawn last for the same reason.
            aligned_snapshots: rng.chance(0.3),
            mixed_retention: rng.chance(0.3),
        };
        if faults.isolate_leader {
            // Each isolation lasts long enough for the others to elect a leader of their own.
            faults.partition_every = ms(700);
        }
        faults
    }
}
