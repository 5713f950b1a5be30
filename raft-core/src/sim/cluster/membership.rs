//! Membership in the simulator: voter changes asked of the leader, disk loss (a host comes back
//! with an empty directory and a new directory id), the random membership faults of a sweep,
//! and the durability check against the voter sets in force.

use super::*;
use crate::protocol::{MembershipError, VoterChange};
use crate::types::DirectoryId;
use crate::voters::VoterSet;

impl Cluster {
    /// The directory id replica `id` runs with now (a wipe gives it a new one).
    pub fn directory(&self, id: u32) -> DirectoryId {
        let i = self.index(ReplicaId(id));
        self.hosts[i]
            .cfg
            .directory
            .expect("every host has a directory")
    }

    /// Asks replica `id` (the leader) for one voter change; the outcome is traced.
    pub fn change_voters(
        &mut self,
        id: u32,
        change: VoterChange,
    ) -> Result<OffsetAndEpoch, MembershipError> {
        let i = self.index(ReplicaId(id));
        let now = self.local_time(i);
        let h = &mut self.hosts[i];
        let Some(replica) = h.replica.as_mut() else {
            return Err(MembershipError::ShuttingDown);
        };
        let mut out = std::mem::take(&mut h.out);
        let result = replica.change_voters(now, change.clone(), &mut out);
        self.handle_outputs(i, &mut out);
        self.hosts[i].out = out;
        self.schedule_tick(i);
        let t = self.now.as_millis();
        self.trace
            .push(format!("{t}ms r{id} asked {change:?}: {result:?}"));
        result
    }

    /// Disk loss: crashes replica `id` (if it runs) and replaces its storage with an empty
    /// directory under a new directory id. Its configuration stays what the operator left
    /// (its original one, unless [`Cluster::set_config_voters`] edited it): it is not formatted
    /// again, so its start makes it an observer of its configured voters, or is refused for a
    /// standalone founder ([`Cluster::restart`]). It stays down until then.
    pub fn wipe(&mut self, id: u32) {
        let i = self.index(ReplicaId(id));
        let epoch = self.hosts[i].replica.as_ref().map(|r| r.epoch());
        self.crash_host(i);
        let h = &mut self.hosts[i];
        // Anything it led is at most the newest epoch any replica reached.
        let newest = self
            .checker
            .committed()
            .last()
            .map_or(Epoch::ZERO, |r| r.epoch);
        h.forgotten_epoch = h.forgotten_epoch.max(epoch.unwrap_or_default()).max(newest);
        h.incarnation += 1;
        h.log.clear();
        h.durable_log.clear();
        h.log_start = Offset::ZERO;
        h.durable_start = Offset::ZERO;
        h.snapshots.clear();
        h.partial = None;
        h.since_snapshot = 0;
        h.pending_ops.clear();
        h.election = None;
        h.election_pending = None;
        h.kv.clear();
        h.kv_applied = Offset::ZERO;
        h.formatted = None;
        let old = h.cfg.directory.expect("every host has a directory");
        let mut cfg = h.cfg.clone().into_inner();
        cfg.directory = Some(DirectoryId(old.0 + 1));
        h.cfg = cfg.validate().expect("only the directory changed");
        let me = h.id;
        self.checker.forget_replica(me);
        let t = self.now.as_millis();
        self.trace.push(format!("{t}ms r{id} lost its disk"));
    }

    /// The operator edits replica `id`'s configured voters (its other configured ids become
    /// observers); it takes effect at its next start. Storage that holds a voter set ignores
    /// it (the stored set wins); empty storage takes the voters other than itself as contacts.
    pub fn set_config_voters(&mut self, id: u32, voters: &[u32]) {
        let i = self.index(ReplicaId(id));
        let n = self.hosts.len() as u32;
        let mut cfg = self.hosts[i].cfg.clone().into_inner();
        cfg.voters = voters.iter().copied().map(ReplicaId).collect();
        cfg.observers = (1..=n)
            .map(ReplicaId)
            .filter(|r| !cfg.voters.contains(r))
            .collect();
        self.hosts[i].cfg = cfg.validate().expect("an edited voter list is valid");
        let t = self.now.as_millis();
        self.trace
            .push(format!("{t}ms r{id} configured with voters {voters:?}"));
    }

    /// The founding voter set (what the founders' storage was formatted with).
    pub fn founding_voters(&self) -> &VoterSet {
        &self.founding
    }

    /// Starts refused so far because the storage was empty and the configuration named no
    /// other replica (each then answered by a start with learned voters).
    pub fn refused_starts(&self) -> u64 {
        self.refusals
    }

    /// The voter set in force on the newest leader (or on replica 1 when none leads).
    pub(super) fn leading_voters(&self) -> Option<(u32, VoterSet)> {
        let l = self.leader()?;
        Some((l, self.replica(l).voters().clone()))
    }

    /// An operator adding back an observer that lost its disk, as soon as it runs again and
    /// until the leader accepts it: the leader must judge the new disk's progress, not what the
    /// lost one had caught up with.
    pub(super) fn retry_rejoin(&mut self) {
        let Some((id, until, next)) = self.rejoining else {
            return;
        };
        if self.now >= until {
            self.rejoining = None;
            return;
        }
        if self.now < next {
            return;
        }
        self.rejoining = Some((id, until, self.now + Duration::from_millis(50)));
        let running = self.hosts[self.index(ReplicaId(id))].replica.is_some();
        let Some((leader, set)) = self.leading_voters() else {
            return;
        };
        if !running || set.contains_id(ReplicaId(id)) {
            return;
        }
        if self.add_voter(leader, id).is_ok() {
            self.rejoining = None;
        }
    }

    /// Asks `leader` to add replica `id` with its current directory.
    fn add_voter(&mut self, leader: u32, id: u32) -> Result<OffsetAndEpoch, MembershipError> {
        let directory = self.directory(id);
        let endpoint = format!("host-{id}:9000");
        let id = ReplicaId(id);
        self.change_voters(
            leader,
            VoterChange::Add {
                id,
                directory,
                endpoint,
            },
        )
    }

    /// Sometimes cuts the leader off right after it accepted a change, before any voter
    /// fetched it: the change stays uncommitted in its log while the others elect a leader
    /// of their own, the setting of Raft's single-server change bug.
    fn maybe_strand_change(&mut self, leader: u32, accepted: bool) {
        if accepted && self.membership_rng.chance(0.3) {
            self.isolate(leader);
            let t = self.now.as_millis();
            self.trace.push(format!(
                "{t}ms r{leader} isolated with its change uncommitted"
            ));
        }
    }

    /// Voters whose key no host has any more (their directory was wiped).
    fn stale_voters(&self, set: &VoterSet) -> Vec<(ReplicaId, Option<DirectoryId>)> {
        set.iter()
            .filter(|(id, v)| {
                let host = self.hosts.iter().find(|h| h.id == *id);
                v.directory.is_some() && host.is_none_or(|h| h.cfg.directory != v.directory)
            })
            .map(|(id, v)| (id, v.directory))
            .collect()
    }

    /// One random membership fault: replace a stale voter, add an observer, remove a voter, or
    /// wipe a disk (only where the set in force keeps a live majority without it).
    pub(super) fn inject_membership_fault(&mut self) {
        let Some((leader, set)) = self.leading_voters() else {
            return;
        };
        let stale = self.stale_voters(&set);
        if let Some(&(id, directory)) = stale.first() {
            let _ = self.change_voters(leader, VoterChange::Remove { id, directory });
            return;
        }
        let n = self.hosts.len() as u32;
        match self.membership_rng.below(20) {
            0..=9 => {
                let candidates: Vec<u32> = (1..=n)
                    .filter(|id| !set.contains_id(ReplicaId(*id)))
                    .collect();
                if candidates.is_empty() {
                    return;
                }
                let id = candidates[self.membership_rng.below(candidates.len() as u64) as usize];
                let added = self.add_voter(leader, id);
                self.maybe_strand_change(leader, added.is_ok());
            }
            10..=16 => {
                let ids: Vec<ReplicaId> = set.ids().collect();
                let id = ids[self.membership_rng.below(ids.len() as u64) as usize];
                let directory = set.get(id).and_then(|v| v.directory);
                let removed = self.change_voters(leader, VoterChange::Remove { id, directory });
                self.maybe_strand_change(leader, removed.is_ok());
            }
            _ => {
                // Half the time an observer's disk, when there is one: the operator adds it
                // back at once (`retry_rejoin`), the case where the leader must judge the new
                // disk's progress and not the lost one's.
                let observers: Vec<u32> = (1..=n)
                    .filter(|id| !set.contains_id(ReplicaId(*id)))
                    .collect();
                let id = if !observers.is_empty() && self.membership_rng.chance(0.5) {
                    observers[self.membership_rng.below(observers.len() as u64) as usize]
                } else {
                    self.membership_rng.range(1, u64::from(n)) as u32
                };
                if self.may_wipe(ReplicaId(id)) {
                    self.wipe(id);
                    if self.membership_rng.chance(0.3) {
                        // A replacement machine started with the voters it learns from the
                        // cluster, itself among them while its old key votes (as `--join`
                        // made such configurations): the learned list names it, and its empty
                        // storage must still make it an observer.
                        let learned: Vec<u32> = set.ids().map(|r| r.0).collect();
                        self.set_config_voters(id, &learned);
                    }
                    let down = self
                        .rng
                        .range(1, self.opts.faults.downtime_max.as_nanos().max(2) as u64);
                    let host = ReplicaId(id);
                    let back = self.now + Duration::from_nanos(down);
                    self.schedule(back, Ev::Restart { host });
                    if !set.contains_id(host) && self.rejoining.is_none() {
                        self.rejoining = Some((id, back + Duration::from_secs(2), back));
                    }
                }
            }
        }
    }

    /// Every voter set that may still decide a commit: the newest committed one and every
    /// newer one in some replica's log.
    fn deciding_sets(&mut self) -> Vec<VoterSet> {
        let n = self.checker.committed().len();
        self.advance_committed_voters();
        let mut sets = vec![self.committed_voters.1.clone()];
        for h in &self.hosts {
            let above = h.log.get(n..).unwrap_or(&[]);
            for r in above.iter().filter(|r| r.kind == crate::RecordKind::Voters) {
                if let Ok((set, _)) = crate::codec::decode_voters(&r.payload) {
                    sets.push(set);
                }
            }
        }
        sets
    }

    /// Whether losing this host's disk is a fault the protocol must survive: in every set that
    /// may still decide, it is absent, or present with a directory (so its lost vote cannot be
    /// given again) in a set of three or more where no other key was lost. A static voter has
    /// no directory to tell its lost disk apart: wiping one is the amnesia only directory ids
    /// prevent; two lost keys in one set may leave no majority at all. Nor while a voter set
    /// record above the committed prefix may still decide: a replica acting on that
    /// uncommitted set may need a vote that only the lost disk's log could win (a voter of the
    /// new set whose log ends in a newer epoch the lost leader gave it refuses everyone else),
    /// which no rule of Raft's can recover from (seeds 19139 and 19306).
    fn may_wipe(&mut self, id: ReplicaId) -> bool {
        let mut sets = self.deciding_sets();
        if sets.len() > 1 {
            return false;
        }
        // What each replica acts on, too: one that has not yet fetched a change still counts
        // the static entries of its older set, which match a wiped replica's new directory.
        for h in &self.hosts {
            let set = match &h.replica {
                Some(r) => r.voters().clone(),
                None => {
                    let base = h.formatted.clone().unwrap_or_else(|| self.founding.clone());
                    super::host::voter_history(base, &h.log).latest().clone()
                }
            };
            sets.push(set);
        }
        sets.iter().all(|set| match set.get(id) {
            None => true,
            Some(v) => v.directory.is_some() && set.len() >= 3 && self.stale_voters(set).is_empty(),
        })
    }

    /// S8 with membership: the committed prefix is durable on a majority of a voter set that
    /// may have committed it: the newest committed set, or any newer set in some replica's log
    /// (a leader counts the set in force, which may be uncommitted). A voter whose directory was
    /// wiped holds nothing; each such loss lowers the count asked for by one (the protocol
    /// cannot be asked to survive data loss, only to never act on the lost voter's behalf).
    pub(super) fn check_majority_durable(&mut self) {
        let n = self.checker.committed().len();
        if n == 0 {
            return;
        }
        let sets = self.deciding_sets();
        let last = self.checker.committed()[n - 1].clone();
        let mut best = None;
        for set in &sets {
            let (holding, needed) = self.durable_majority(set, n, &last);
            if holding >= needed {
                return;
            }
            best.get_or_insert((holding, needed, set.clone()));
        }
        if let Some((holding, needed, set)) = best {
            let ends: Vec<String> = self
                .hosts
                .iter()
                .map(|h| format!("{}:{}/{}", h.id, h.durable_log.len(), h.log.len()))
                .collect();
            let msg = format!(
                "S8 committed prefix up to {n} is durable on {holding} voters of {set}, fewer than {needed} (durable/log ends {})",
                ends.join(" ")
            );
            self.checker.report(self.now, msg);
        }
    }

    /// S4 of the membership checks (KAFKA-16580's form): when a leader advances its high
    /// watermark to `hwm`, a majority of its set in force, or of the set in force for the
    /// record below `hwm`, holds that record durably (a voter whose disk was lost lowers the
    /// count asked for by one, as in [`Cluster::check_majority_durable`]).
    pub(super) fn check_commit_majority(&mut self, i: usize, hwm: Offset) {
        let h = &self.hosts[i];
        let Some(replica) = h.replica.as_ref() else {
            return;
        };
        if replica.role() != Role::Leader || hwm == Offset::ZERO {
            return;
        }
        let n = hwm.0 as usize;
        let Some(last) = h.log.get(n - 1).cloned() else {
            return;
        };
        let latest = replica.voters().clone();
        let base = h.formatted.clone().unwrap_or_else(|| self.founding.clone());
        let below = super::host::voter_history(base, &h.log[..n - 1])
            .latest()
            .clone();
        for set in [&latest, &below] {
            let (holding, needed) = self.durable_majority(set, n, &last);
            if holding >= needed {
                return;
            }
        }
        let leader = self.hosts[i].id;
        let msg = format!(
            "S4 {leader} committed {hwm} durable on fewer than a majority of {latest} and of {below}"
        );
        self.checker.report(self.now, msg);
    }

    /// How many voters of `set` (by key) hold record `n - 1`, equal to `last`, durably, and how
    /// many must: a majority, less one for each voter whose disk was lost.
    fn durable_majority(&self, set: &VoterSet, n: usize, last: &Record) -> (usize, usize) {
        let holds = |h: &Host| h.durable_log.len() >= n && h.durable_log[n - 1] == *last;
        let holding = set
            .iter()
            .filter(|(id, v)| {
                self.hosts.iter().any(|h| {
                    h.id == *id
                        && (v.directory.is_none() || v.directory == h.cfg.directory)
                        && holds(h)
                })
            })
            .count();
        let needed = set
            .majority()
            .saturating_sub(self.stale_voters(set).len())
            .max(1);
        (holding, needed)
    }

    /// Keeps the newest voter set of the committed log up to date, scanning only what was
    /// committed since the last call.
    pub(super) fn advance_committed_voters(&mut self) {
        let committed = self.checker.committed();
        let (scanned, _) = &self.committed_voters;
        let mut newest = None;
        for r in &committed[*scanned..] {
            if r.kind == crate::RecordKind::Voters {
                if let Ok((set, _)) = crate::codec::decode_voters(&r.payload) {
                    newest = Some(set);
                }
            }
        }
        let len = committed.len();
        self.committed_voters.0 = len;
        if let Some(set) = newest {
            self.committed_voters.1 = set;
        }
    }
}
