//! The random faults of a sweep: when the next crash, partition, slow disk or transfer comes,
//! and healing before the liveness phase.

use super::*;

/// The leader-isolating adversary's held messages ([`Faults::hold_at_isolation`]): which links
/// hold them and when they arrive. Its draws are apart, so that the other faults a seed draws
/// stay as they were before it existed.
pub(super) struct IsolationHold {
    rng: SimRng,
    /// When the held messages arrive, and the links (to the isolated leader) they wait on.
    pending: Option<(Duration, Vec<(u32, u32)>)>,
}

impl IsolationHold {
    pub(super) fn new(seed: u64) -> IsolationHold {
        IsolationHold {
            rng: SimRng::new(seed.rotate_left(53) ^ 0x1F83_D9AB),
            pending: None,
        }
    }
}

impl Cluster {
    /// Runs with the seed's faults (partitions, crashes, drops) until `until`.
    pub fn run_with_faults_until(&mut self, until: Duration) {
        self.faults_on = true;
        self.next_partition = self.now + self.fault_interval(self.opts.faults.partition_every);
        self.next_crash = self.now + self.fault_interval(self.opts.faults.crash_every);
        self.next_transfer = self.now + self.transfer_interval();
        self.next_membership = self.now + self.membership_interval();
        self.next_quiet = self.now + self.quiet_interval();
        while self.now < until {
            let step_end = (self.now + Duration::from_millis(1)).min(until);
            self.run_until(step_end);
            self.inject_faults();
        }
        self.faults_on = false;
    }

    /// Ends every fault: links heal, crashed replicas restart, and the network meets Raft's
    /// timing requirement again (a message takes at most a tenth of the election timeout).
    /// Without that requirement no election is sure to end: with delays near the election
    /// timeout, candidates whose randomized timeouts differ by less than a round trip keep
    /// splitting the vote, and a voter set that needs every live voter (four voters, one of
    /// them lost) can stay leaderless for seconds.
    pub fn heal_all(&mut self) {
        self.faults_on = false;
        self.release_isolation_hold(true);
        self.heal();
        let f = &mut self.opts.faults;
        f.delay_max = f.delay_max.min(self.opts.election_timeout / 10);
        f.delay_min = f.delay_min.min(f.delay_max);
        for i in 0..self.hosts.len() {
            if self.hosts[i].replica.is_none() {
                self.start_host(i);
            }
        }
    }

    pub(super) fn fault_interval(&mut self, mean: Duration) -> Duration {
        if mean.is_zero() {
            return Duration::MAX / 4;
        }
        Duration::from_nanos(
            self.rng
                .range(mean.as_nanos() as u64 / 2, mean.as_nanos() as u64 * 3 / 2),
        )
    }

    pub(super) fn transfer_interval(&mut self) -> Duration {
        let mean = self.opts.faults.transfer_every.as_nanos() as u64;
        if mean == 0 {
            return Duration::MAX / 4;
        }
        Duration::from_nanos(self.transfer_rng.range(mean / 2, mean * 3 / 2))
    }

    fn membership_interval(&mut self) -> Duration {
        if !self.opts.membership {
            return Duration::MAX / 4;
        }
        Duration::from_millis(self.membership_rng.range(100, 900))
    }

    /// Time between quiet periods (the seed's `quiet_every`, drawn apart like transfers).
    fn quiet_interval(&mut self) -> Duration {
        let mean = self.opts.faults.quiet_every.as_nanos() as u64;
        if mean == 0 {
            return Duration::MAX / 4;
        }
        Duration::from_nanos(self.quiet_rng.range(mean / 3, mean * 5 / 3))
    }

    /// Holds every other replica's messages to the isolated leader `l` (instead of losing
    /// them) until a drawn moment: after the others' fetch timeout, so that they may have
    /// elected a leader and committed meanwhile, and before the isolation ends.
    fn hold_toward(&mut self, l: u32) {
        let n = self.hosts.len() as u32;
        let links: Vec<(u32, u32)> = (1..=n).filter(|f| *f != l).map(|f| (f, l)).collect();
        for &(f, to) in &links {
            self.blocked.remove(&(ReplicaId(f), ReplicaId(to)));
            self.hold(f, to);
        }
        let after = self.opts.fetch_timeout.as_millis() as u64;
        let at = self.now + Duration::from_millis(self.isolation_hold.rng.range(after, 2 * after));
        let t = self.now.as_millis();
        self.trace.push(format!(
            "{t}ms messages to r{l} held until {}ms",
            at.as_millis()
        ));
        self.isolation_hold.pending = Some((at, links));
    }

    /// Delivers what the adversary held, when due (or `now`, when `force`).
    fn release_isolation_hold(&mut self, force: bool) {
        let due = matches!(&self.isolation_hold.pending, Some((at, _)) if force || self.now >= *at);
        if !due {
            return;
        }
        let Some((_, links)) = self.isolation_hold.pending.take() else {
            return;
        };
        let mut count = 0;
        for (f, to) in links {
            count += self.release(f, to);
        }
        let t = self.now.as_millis();
        self.trace
            .push(format!("{t}ms {count} held message(s) released"));
    }

    pub(super) fn inject_faults(&mut self) {
        self.release_isolation_hold(false);
        if self.now >= self.next_quiet {
            // Long enough for a follower cut from the leader to reach its fetch timeout with a
            // log as long as everyone's.
            let length = Duration::from_millis(self.quiet_rng.range(200, 900));
            self.quiet_until = self.now + length;
            let t = self.now.as_millis();
            self.trace
                .push(format!("{t}ms clients quiet for {}ms", length.as_millis()));
            self.next_quiet = self.quiet_until + self.quiet_interval();
        }
        let mut new_leader = false;
        if self.opts.membership {
            let leader = self.leader().map(|l| (l, self.replica(l).epoch()));
            new_leader = leader.is_some() && leader != self.membership_leader;
            self.membership_leader = leader.or(self.membership_leader);
            self.retry_rejoin();
        }
        if self.now >= self.next_membership || (new_leader && self.membership_rng.chance(0.5)) {
            self.next_membership = self.now + self.membership_interval();
            self.inject_membership_fault();
        }
        if self.now >= self.next_transfer {
            self.next_transfer = self.now + self.transfer_interval();
            if let Some(l) = self.leader() {
                let to = self.transfer_rng.range(1, u64::from(self.opts.voters)) as u32;
                // Refusals (not a voter, already transferring) are part of what is exercised.
                let result = self.transfer_leadership(l, to);
                let t = self.now.as_millis();
                self.trace
                    .push(format!("{t}ms r{l} asked to transfer to r{to}: {result:?}"));
            }
        }
        let n = self.hosts.len() as u32;
        if self.now >= self.next_partition {
            self.next_partition = self.now + self.fault_interval(self.opts.faults.partition_every);
            self.release_isolation_hold(true);
            self.heal();
            let shape = if self.opts.faults.isolate_leader {
                5
            } else {
                self.rng.below(5)
            };
            match shape {
                0 => {}
                1 => {
                    let r = self.rng.range(1, n as u64) as u32;
                    self.isolate(r);
                }
                2 => {
                    let group: Vec<u32> = (1..=n).filter(|_| self.rng.chance(0.5)).collect();
                    for a in 1..=n {
                        for b in 1..=n {
                            if group.contains(&a) != group.contains(&b) {
                                self.block(a, b);
                            }
                        }
                    }
                }
                3 => {
                    let a = self.rng.range(1, n as u64) as u32;
                    let b = self.rng.range(1, n as u64) as u32;
                    if a != b {
                        self.block(a, b);
                    }
                }
                4 => {
                    // A voter that reaches the others but not the leader.
                    if let Some(l) = self.leader() {
                        let f = self.rng.range(1, self.opts.voters as u64) as u32;
                        if f != l {
                            self.cut(l, f);
                        }
                    }
                }
                _ => {
                    // The leader reaches nobody, but its clients still reach it. An adversary
                    // picks its moment: only a leader whose clock runs slowest is cut off, so
                    // that its timers (check-quorum, the lease) run out last.
                    let slowest = self.hosts.iter().map(|h| h.rate).fold(f64::MAX, f64::min);
                    let leader = self
                        .leader()
                        .filter(|l| self.hosts[self.index(ReplicaId(*l))].rate <= slowest);
                    if let Some(l) = leader {
                        self.isolate(l);
                        let t = self.now.as_millis();
                        self.trace.push(format!("{t}ms r{l} (leader) isolated"));
                        if self.opts.faults.hold_at_isolation {
                            self.hold_toward(l);
                        }
                    } else {
                        // Not its moment: look again soon, so that every term of a slow leader
                        // is cut short.
                        self.next_partition = self.now + Duration::from_millis(50);
                    }
                }
            }
        }
        if self.now >= self.next_crash {
            self.next_crash = self.now + self.fault_interval(self.opts.faults.crash_every);
            let victim = self.rng.below(n as u64) as usize;
            if self.hosts[victim].replica.is_some() {
                self.crash_host(victim);
                let down = self
                    .rng
                    .range(1, self.opts.faults.downtime_max.as_nanos() as u64);
                let host = self.hosts[victim].id;
                self.schedule(self.now + Duration::from_nanos(down), Ev::Restart { host });
            }
        }
    }
}
