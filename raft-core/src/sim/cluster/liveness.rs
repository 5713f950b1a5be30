//! What must happen once the faults stop: a leader is elected and commits (L1), every replica,
//! voter or observer, learns of that commit (L2) and knows that leader (L3), every read a
//! client started is answered and a read started on any replica once it settled succeeds (L4),
//! and the leadership then stays put (L5).

use super::*;

/// How long every replica may take to learn of the liveness marker's commit once it committed:
/// time for a replica that fell far behind to download a snapshot in the harness's small
/// chunks over the slowest network a seed draws.
const CATCH_UP_BOUND: Duration = Duration::from_secs(10);

/// How long a healed cluster is watched for a leader change it has no reason for (L5): three
/// fetch timeouts, in which a follower that wrongly stopped hearing from the leader, or a
/// leader that wrongly lost its quorum, would act.
const STABLE_FOR: u32 = 3;

impl Cluster {
    /// The liveness bound of the protocol reference (L1): fetch timeout plus a few election
    /// rounds, plus network slack.
    pub fn liveness_bound(&self) -> Duration {
        self.opts.fetch_timeout + self.opts.election_timeout * 12 + Duration::from_millis(500)
    }

    /// Liveness: from `since` (faults off), a leader is elected and a new proposal commits
    /// within the bound (L1); then every replica's high watermark passes that proposal within
    /// ten seconds (L2). Records a violation otherwise.
    pub fn check_liveness(&mut self, since: Duration) {
        self.check_liveness_from(since, 0);
    }

    /// [`Cluster::check_liveness`], the `handovers`-th time: a voter change asked for before
    /// healing may commit after it and remove the leader, which then hands over; the checks
    /// start again with the next leader, a few times at most.
    fn check_liveness_from(&mut self, since: Duration, handovers: u32) {
        let deadline = since + self.liveness_bound();
        self.workload = false;
        let mut marker: Option<OffsetAndEpoch> = None;
        while self.now < deadline {
            // A marker proposed on a leader that is then deposed may be lost: propose again on
            // the newer leader.
            if let Some(l) = self.leader() {
                let epoch = self.replica(l).epoch();
                if marker.is_none_or(|m| m.epoch < epoch) {
                    let i = self.index(ReplicaId(l));
                    marker = self
                        .propose_on(i, Bytes::from_static(b"liveness-marker"))
                        .ok();
                }
            }
            if let Some(m) = marker {
                let committed = self.checker.committed();
                if committed
                    .get(m.offset.0 as usize)
                    .is_some_and(|r| r.epoch == m.epoch)
                {
                    if self.check_everyone_learns(m) {
                        self.check_settled(handovers);
                    }
                    return;
                }
            }
            self.run_for(Duration::from_millis(5));
        }
        let msg = match marker {
            None => format!(
                "L1 no leader within {:?} after faults stopped",
                self.liveness_bound()
            ),
            Some(m) => format!("L1 proposal {m} did not commit within the bound"),
        };
        self.checker.report(self.now, msg);
    }

    /// L2: a replica that stays behind a healed, working leader for good (an observer that
    /// stopped looking for the leader, a follower whose fetch loop stalled) serves ever older
    /// reads; the leader's own commit says nothing about it.
    fn check_everyone_learns(&mut self, marker: OffsetAndEpoch) -> bool {
        let behind = |c: &Cluster| -> Vec<ReplicaId> {
            c.hosts
                .iter()
                .filter(|h| h.replica.is_some() && h.last_hwm <= marker.offset)
                .map(|h| h.id)
                .collect()
        };
        if self.run_until_cond(CATCH_UP_BOUND, |c| behind(c).is_empty()) {
            return true;
        }
        let states: Vec<String> = behind(self)
            .into_iter()
            .map(|id| {
                let r = self.replica(id.0);
                format!("{id} {} {} leader={:?}", r.role(), r.epoch(), r.leader())
            })
            .collect();
        let msg = format!(
            "L2 replicas still behind the committed {marker} {CATCH_UP_BOUND:?} after it \
             committed: {states:?}"
        );
        self.checker.report(self.now, msg);
        false
    }

    /// L3 to L5 on their own (as [`Cluster::check_liveness`] runs them once every replica
    /// learned of its marker's commit), for scenarios that show what they catch.
    pub fn check_settled_now(&mut self) {
        self.check_settled(0);
    }

    /// L3 to L5, once everyone learned of the marker's commit: every running replica names the
    /// leader and its epoch (it fetched from it); every read still pending is answered within
    /// its deadline and a round trip (a read that never returns hangs its client); and in
    /// [`STABLE_FOR`] fetch timeouts of a healed network neither the leader nor the epoch
    /// changes (a leader deposed without a fault, or a replica that keeps campaigning, would).
    fn check_settled(&mut self, handovers: u32) {
        let Some(leader) = self.leader() else {
            if !self.handed_over_on_removal(None, handovers) {
                self.checker
                    .report(self.now, "L3 the leader was lost after the commit".into());
            }
            return;
        };
        let epoch = self.replica(leader).epoch();
        let strays = |c: &Cluster| -> Vec<String> {
            c.hosts
                .iter()
                .filter_map(|h| h.replica.as_ref())
                .filter(|r| r.leader() != Some(ReplicaId(leader)) || r.epoch() != epoch)
                .map(|r| {
                    format!(
                        "{} {} {} leader={:?}",
                        r.id(),
                        r.role(),
                        r.epoch(),
                        r.leader()
                    )
                })
                .collect()
        };
        let bound = self.liveness_bound();
        if !self.run_until_cond(bound, |c| strays(c).is_empty()) {
            let msg = format!(
                "L3 replicas that do not know the leader r{leader} of {epoch} {bound:?} after \
                 it committed: {:?}",
                strays(self)
            );
            self.checker.report(self.now, msg);
        }
        let read_bound = self.hosts[0].cfg.read_timeout + Duration::from_millis(100);
        if !self.run_until_cond(read_bound, |c| c.reads.is_empty()) {
            let pending: Vec<u64> = self.reads.keys().copied().collect();
            let msg = format!("L4 reads {pending:?} still unanswered {read_bound:?} after healing");
            self.checker.report(self.now, msg);
        }
        self.check_reads_succeed(leader, epoch);
        let watch = self.opts.fetch_timeout * STABLE_FOR;
        let changed =
            |c: &Cluster| c.leader() != Some(leader) || c.replica(leader).epoch() != epoch;
        if self.run_until_cond(watch, changed) {
            if self.handed_over_on_removal(Some(leader), handovers) {
                return;
            }
            let now = self
                .leader()
                .map(|l| format!("r{l} in {}", self.replica(l).epoch()));
            let msg = format!(
                "L5 leadership moved without a fault, from r{leader} in {epoch} to {now:?}"
            );
            self.checker.report(self.now, msg);
        }
    }

    /// L4, the other half: in the settled cluster a read started now on any replica, in every
    /// mode the run uses, succeeds within its deadline. Failed reads under faults are counted,
    /// not judged; here no fault explains one. (A leader handing over after a committed voter
    /// change excuses the reads that were in its way; L5 then looks at the handover.)
    fn check_reads_succeed(&mut self, leader: u32, epoch: Epoch) {
        let modes: &[ReadMode] = if self.opts.lease_reads {
            &[ReadMode::Linearizable, ReadMode::Lease]
        } else {
            &[ReadMode::Linearizable]
        };
        let running: Vec<u32> = self
            .hosts
            .iter()
            .filter(|h| h.replica.is_some())
            .map(|h| h.id.0)
            .collect();
        let mut reads = Vec::new();
        for id in running {
            for &mode in modes {
                reads.push((id, mode, self.start_read(id, 1, mode)));
            }
        }
        let bound = self.hosts[0].cfg.read_timeout + Duration::from_millis(100);
        let done = |c: &Cluster| reads.iter().all(|r| c.read_outcome(r.2).is_some());
        self.run_until_cond(bound, done);
        if self.leader() != Some(leader) || self.replica(leader).epoch() != epoch {
            return;
        }
        let failed: Vec<String> = reads
            .iter()
            .filter_map(|&(id, mode, handle)| match self.read_outcome(handle) {
                Some(Ok(_)) => None,
                outcome => Some(format!("r{id} {mode:?}: {outcome:?}")),
            })
            .collect();
        if !failed.is_empty() {
            let msg = format!("L4 reads in the settled cluster did not succeed: {failed:?}");
            self.checker.report(self.now, msg);
        }
    }

    /// Whether the leader (`leader`, or whichever led before it was lost) left because a
    /// committed voter change removed it; then the liveness checks are run again with the next
    /// leader (at most three handovers), and true is returned.
    fn handed_over_on_removal(&mut self, leader: Option<u32>, handovers: u32) -> bool {
        if !self.opts.membership || handovers >= 3 {
            return false;
        }
        self.advance_committed_voters();
        let voters = &self.committed_voters.1;
        let removed = match leader {
            Some(l) => !voters.contains_id(ReplicaId(l)),
            // Lost: some running replica resigned because it is no longer a voter.
            None => self
                .hosts
                .iter()
                .filter_map(|h| h.replica.as_ref())
                .any(|r| r.role() == Role::Resigned && !voters.contains_id(r.id())),
        };
        if removed {
            let t = self.now.as_millis();
            self.trace.push(format!(
                "{t}ms the leader left on its committed removal; checking again"
            ));
            self.check_liveness_from(self.now, handovers + 1);
        }
        removed
    }
}
