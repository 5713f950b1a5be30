//! Timers: when each role next needs a tick ([`Replica::next_deadline`]), what happens when
//! its timers expire, and the randomized election timeout.

use super::{Outputs, Replica, RoleState};
use crate::types::Instant;

impl Replica {
    /// The earliest time at which [`Replica::step`] with
    /// [`Input::Tick`](super::Input::Tick) has work to do.
    pub fn next_deadline(&self) -> Instant {
        self.role_deadline().min(self.reads_deadline())
    }

    fn role_deadline(&self) -> Instant {
        match &self.role {
            RoleState::Unattached {
                deadline,
                probe_at,
                probing,
            } => {
                if self.may_campaign() {
                    *deadline
                } else if *probing {
                    Instant::NEVER
                } else {
                    *probe_at
                }
            }
            RoleState::Prospective {
                deadline, tally, ..
            }
            | RoleState::Candidate { deadline, tally } => tally
                .retry_at
                .values()
                .copied()
                .fold(*deadline, Instant::min),
            RoleState::Follower(f) => {
                let mut d = f.fetch_deadline;
                // A finished download being verified asks for nothing until the verification
                // comes back (`follower_fetch_snapshot`): its next fetch time is not a deadline,
                // or the driver would wake the replica again and again meanwhile.
                let verifying = self.download.as_ref().is_some_and(|d| d.finishing);
                if !f.fetch_in_flight && self.log.all_durable() && !verifying {
                    d = d.min(f.next_fetch_at);
                }
                d
            }
            RoleState::Leader(l) => {
                let mut d = l.begin_quorum_next;
                if self.leader_checks_quorum() {
                    d = d.min(l.check_quorum_deadline);
                }
                if let Some(linger) = l.linger_deadline {
                    d = d.min(linger);
                }
                if let Some(t) = &l.transfer {
                    d = d.min(t.deadline);
                }
                l.parked.iter().map(|p| p.deadline).fold(d, Instant::min)
            }
            RoleState::Resigned(r) => r.deadline.min(r.retry_at),
        }
    }

    pub(super) fn election_timeout(&mut self) -> std::time::Duration {
        let t = self.cfg.election_timeout;
        let extra = self.rng.below(t.as_nanos().min(u64::MAX as u128) as u64);
        t + std::time::Duration::from_nanos(extra)
    }

    pub(super) fn poll_timers(&mut self, now: Instant, out: &mut Outputs) {
        // Bounded: each pass either changes role or leaves nothing due; a role change can make
        // at most a few further transitions due at once (e.g. a single voter winning at start).
        for _ in 0..8 {
            if !self.poll_timers_once(now, out) {
                return;
            }
        }
    }

    /// Handles due timers of the current role; returns whether the role changed.
    fn poll_timers_once(&mut self, now: Instant, out: &mut Outputs) -> bool {
        let before = self.role.role();
        let epoch_before = self.election.epoch;
        match &self.role {
            RoleState::Unattached { deadline, .. } => {
                if self.may_campaign() {
                    if now >= *deadline {
                        self.start_election(now, false, out);
                    }
                } else {
                    self.observer_probe(now, out);
                }
            }
            RoleState::Prospective { deadline, .. } => {
                if now >= *deadline {
                    self.prospective_lost(now, out);
                } else {
                    self.send_vote_requests(now, out);
                }
            }
            RoleState::Candidate { deadline, .. } => {
                if now >= *deadline {
                    self.start_election(now, false, out);
                } else {
                    self.send_vote_requests(now, out);
                }
            }
            RoleState::Follower(f) => {
                if now >= f.fetch_deadline {
                    let invited = f.invited;
                    if self.may_campaign() {
                        self.start_election(now, invited, out);
                    } else {
                        // An observer forgets the leader and looks for it again.
                        let epoch = self.election.epoch;
                        self.become_unattached(now, epoch, out);
                    }
                } else {
                    self.follower_maybe_fetch(now, out);
                }
            }
            RoleState::Leader(_) => self.leader_poll(now, out),
            RoleState::Resigned(r) => {
                if now >= r.deadline {
                    // KAFKA-18379: leaving Resigned moves to the next epoch, never back into
                    // the one this replica led.
                    let next = self.election.epoch.next();
                    self.become_unattached(now, next, out);
                } else {
                    self.resigned_send_end_quorum(now, out);
                }
            }
        }
        self.role.role() != before || self.election.epoch != epoch_before
    }
}
