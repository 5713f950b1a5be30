//! Invariant checkers. They sit outside the replicas and see only what an omniscient observer
//! sees: durable election states, logs, released roles, high watermarks and sent messages.
//! Each check is named after the safety property it enforces (protocol reference, section 5).

use std::collections::{BTreeMap, HashMap};

use crate::message::Request;
use crate::protocol::Outgoing;
use crate::types::{ElectionState, Epoch, Offset, Record, ReplicaId};

/// Collects violations; the cluster calls its hooks at the moments each property can break.
#[derive(Clone, Debug, Default)]
pub struct Checker {
    violations: Vec<String>,
    /// S1: the leader of each epoch, from released roles and durable state.
    leaders: BTreeMap<Epoch, ReplicaId>,
    /// S3: each replica's standard vote in each epoch, from durable state.
    votes: BTreeMap<(ReplicaId, Epoch), ReplicaId>,
    /// S2: each replica's highest durable epoch.
    durable_epochs: BTreeMap<ReplicaId, Epoch>,
    /// S4: the payload of every `(offset, epoch)` ever appended anywhere.
    identities: HashMap<(u64, u32), bytes::Bytes>,
    /// S6/S7: the committed log as first observed, and the lowest epoch that observed each.
    committed: Vec<Record>,
    commit_epoch: Vec<Epoch>,
}

impl Checker {
    /// Every violation so far.
    pub fn violations(&self) -> &[String] {
        &self.violations
    }

    /// Hashes what the checker remembers, in a canonical order (the explorer keeps one checker
    /// per model state, and two states merge only when their histories agree too).
    pub fn hash_history(&self, h: &mut impl std::hash::Hasher) {
        use std::hash::Hash;
        self.leaders.hash(h);
        self.votes.hash(h);
        self.durable_epochs.hash(h);
        let mut identities: Vec<_> = self.identities.iter().collect();
        identities.sort_unstable_by_key(|(k, _)| **k);
        identities.hash(h);
        format!("{:?}", self.committed).hash(h);
        self.commit_epoch.hash(h);
        self.violations.hash(h);
    }

    /// The committed prefix as the checker knows it.
    pub fn committed(&self) -> &[Record] {
        &self.committed
    }

    fn fail(&mut self, at: std::time::Duration, msg: String) {
        if self.violations.len() < 50 {
            self.violations
                .push(format!("t={}ms: {msg}", at.as_millis()));
        }
    }

    /// S1, S2, S3 on every durable election-state write.
    pub fn on_durable_election(
        &mut self,
        at: std::time::Duration,
        replica: ReplicaId,
        state: ElectionState,
    ) {
        let prev = self
            .durable_epochs
            .insert(replica, state.epoch)
            .unwrap_or_default();
        if state.epoch < prev {
            self.fail(
                at,
                format!("S2 epoch went back on {replica}: {prev} -> {}", state.epoch),
            );
        }
        if let Some(v) = state.voted_for {
            if let Some(old) = self.votes.insert((replica, state.epoch), v) {
                if old != v {
                    self.fail(
                        at,
                        format!("S3 {replica} voted twice in {}: {old} and {v}", state.epoch),
                    );
                }
            }
        }
        if state.leader == Some(replica) {
            self.note_leader(at, state.epoch, replica);
        }
    }

    fn note_leader(&mut self, at: std::time::Duration, epoch: Epoch, replica: ReplicaId) {
        if let Some(old) = self.leaders.insert(epoch, replica) {
            if old != replica {
                self.fail(
                    at,
                    format!("S1 two leaders in {epoch}: {old} and {replica}"),
                );
            }
        }
    }

    /// S1 and S5 when a replica's released role becomes leader.
    pub fn on_leader(
        &mut self,
        at: std::time::Duration,
        replica: ReplicaId,
        epoch: Epoch,
        log: &[Record],
    ) {
        self.note_leader(at, epoch, replica);
        // S5: a leader of epoch E holds every record committed in an epoch below E.
        for (i, rec) in self.committed.iter().enumerate() {
            if self.commit_epoch[i] >= epoch {
                continue;
            }
            if log.get(i) != Some(rec) {
                let msg = format!(
                    "S5 leader {replica} of {epoch} lacks committed record at offset {i} (committed in {})",
                    self.commit_epoch[i]
                );
                self.fail(at, msg);
                return;
            }
        }
    }

    /// A replica lost its disk and comes back as a new replica (a new directory id): what it
    /// voted and which epochs it reached bind the old one only. Its votes no longer count for
    /// anyone (no voter set holds its new key) until it is added again.
    pub fn forget_replica(&mut self, replica: ReplicaId) {
        self.durable_epochs.remove(&replica);
        self.votes.retain(|(r, _), _| *r != replica);
    }

    /// S4 for every record a replica appends.
    pub fn on_append(&mut self, at: std::time::Duration, replica: ReplicaId, records: &[Record]) {
        for r in records {
            let key = (r.offset.0, r.epoch.0);
            match self.identities.get(&key) {
                Some(p) if *p != r.payload => {
                    let msg = format!("S4 {replica} appended a different record at {}", r.id());
                    self.fail(at, msg);
                }
                Some(_) => {}
                None => {
                    self.identities.insert(key, r.payload.clone());
                }
            }
        }
    }

    /// S6 and S7 whenever a replica's high watermark moves: its log below the new high
    /// watermark must equal the committed log, which it may extend.
    pub fn on_commit(
        &mut self,
        at: std::time::Duration,
        replica: ReplicaId,
        epoch: Epoch,
        previous: Offset,
        hwm: Offset,
        log: &[Record],
    ) {
        if hwm < previous {
            self.fail(
                at,
                format!("S7 high watermark of {replica} went back: {previous} -> {hwm}"),
            );
        }
        if hwm.0 as usize > log.len() {
            self.fail(
                at,
                format!(
                    "S14 {replica} committed {hwm} beyond its log end {}",
                    log.len()
                ),
            );
            return;
        }
        for (i, rec) in log.iter().enumerate().take(hwm.0 as usize) {
            match self.committed.get(i) {
                Some(c) if c == rec => {
                    if epoch < self.commit_epoch[i] {
                        self.commit_epoch[i] = epoch;
                    }
                }
                Some(c) => {
                    let msg = format!(
                        "S6 committed record at {i} changed: {} seen by {replica}, {} before",
                        rec.id(),
                        c.id()
                    );
                    self.fail(at, msg);
                    return;
                }
                None => {
                    self.committed.push(rec.clone());
                    self.commit_epoch.push(epoch);
                }
            }
        }
    }

    /// D4: a vote is durable before the response granting it leaves, and a candidate's own vote
    /// before its requests do.
    pub fn on_send(
        &mut self,
        at: std::time::Duration,
        replica: ReplicaId,
        durable: ElectionState,
        msg: &Outgoing,
    ) {
        match msg {
            Outgoing::Request {
                request: Request::Vote(v),
                ..
            } if !v.pre_vote
                && (durable.epoch != v.epoch || durable.voted_for != Some(replica)) =>
            {
                let msg = format!(
                    "D4 {replica} asked for votes in {} before its self-vote was durable",
                    v.epoch
                );
                self.fail(at, msg);
            }
            _ => {}
        }
    }

    /// A granted standard vote that left must be durable (checked by the cluster, which knows
    /// whether a response answered a pre-vote).
    pub fn on_standard_grant(
        &mut self,
        at: std::time::Duration,
        replica: ReplicaId,
        candidate: ReplicaId,
        epoch: Epoch,
        durable: ElectionState,
    ) {
        // A durable higher epoch also makes the grant safe: no second vote in `epoch` can follow.
        let durable_ok = durable.epoch > epoch
            || (durable.epoch == epoch && durable.voted_for == Some(candidate));
        if !durable_ok {
            let msg = format!(
                "D4 {replica} granted {candidate} a vote in {epoch} before it was durable ({durable})"
            );
            self.fail(at, msg);
        }
    }

    /// S4 at the end: any two logs that agree on an `(offset, epoch)` agree on everything before.
    pub fn check_log_matching(&mut self, at: std::time::Duration, logs: &[(ReplicaId, &[Record])]) {
        for (i, (a, la)) in logs.iter().enumerate() {
            for (b, lb) in logs.iter().skip(i + 1) {
                let common = la.len().min(lb.len());
                let Some(last_same) = (0..common).rev().find(|&k| la[k].epoch == lb[k].epoch)
                else {
                    continue;
                };
                if la[..=last_same] != lb[..=last_same] {
                    let msg =
                        format!("S4 logs of {a} and {b} agree at {last_same} but differ before");
                    self.fail(at, msg);
                }
            }
        }
    }

    /// Records a violation found by the cluster itself (liveness, panics).
    pub fn report(&mut self, at: std::time::Duration, msg: String) {
        self.fail(at, msg);
    }
}
