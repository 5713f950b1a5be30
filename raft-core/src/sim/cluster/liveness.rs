//! What must happen once the faults stop: a leader is elected and commits (L1), and then every
//! replica, voter or observer, learns of that commit (L2).

use super::*;

/// How long every replica may take to learn of the liveness marker's commit once it committed:
/// time for a replica that fell far behind to download a snapshot in the harness's small
/// chunks over the slowest network a seed draws.
const CATCH_UP_BOUND: Duration = Duration::from_secs(10);

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
                    self.check_everyone_learns(m);
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
    fn check_everyone_learns(&mut self, marker: OffsetAndEpoch) {
        let behind = |c: &Cluster| -> Vec<ReplicaId> {
            c.hosts
                .iter()
                .filter(|h| h.replica.is_some() && h.last_hwm <= marker.offset)
                .map(|h| h.id)
                .collect()
        };
        if self.run_until_cond(CATCH_UP_BOUND, |c| behind(c).is_empty()) {
            return;
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
    }
}
