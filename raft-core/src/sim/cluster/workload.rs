//! The key-value client workload: writes, compare-and-sets and reads in every mode on every
//! replica, the reference map, and the history the linearizability checker reads.

use super::*;

impl Cluster {
    /// Applies newly committed records to the reference map and turns the proposals they
    /// resolve into completed operations; proposals overtaken by other records were lost.
    pub(super) fn resolve_proposals(&mut self) {
        let committed = self.checker.committed();
        while self.reference_applied < committed.len() {
            let rec = &committed[self.reference_applied];
            self.reference_applied += 1;
            let Some(cmd) = KvCommand::decode(&rec.payload) else {
                continue;
            };
            let kind = cmd.apply(&mut self.reference);
            if let Some((payload, call)) = self.proposals.remove(&(rec.offset, rec.epoch)) {
                if payload == rec.payload {
                    self.acknowledged += 1;
                    let (call, ret) = (call.as_nanos() as u64, self.now.as_nanos() as u64);
                    self.history.push(LinOp {
                        key: cmd.key(),
                        call,
                        ret,
                        kind,
                    });
                }
            }
        }
        let end = Offset(committed.len() as u64);
        self.proposals.retain(|(offset, _), _| *offset >= end);
    }

    /// One random client operation: a write or compare-and-set through the leader, or a read
    /// in a random mode on a random replica.
    pub(super) fn client_op(&mut self) {
        let key = self.rng.range(1, self.opts.faults.keys.max(1));
        let roll = self.rng.below(100);
        if roll < 45 {
            if self.now < self.quiet_until {
                return;
            }
            let Some(l) = self.leader() else { return };
            let value = self.next_payload;
            self.next_payload += 1;
            let cmd = if roll < 30 {
                KvCommand::Write { key, value }
            } else {
                let expected = self.reference.get(&key).copied().unwrap_or(0);
                let expected = if self.rng.chance(0.7) {
                    expected
                } else {
                    value + 1
                };
                KvCommand::Cas {
                    key,
                    expected,
                    new: value,
                }
            };
            let i = self.index(ReplicaId(l));
            let _ = self.propose_on(i, cmd.encode());
            return;
        }
        let i = self.rng.below(self.hosts.len() as u64) as usize;
        if self.hosts[i].replica.is_none() {
            return;
        }
        if roll < 55 {
            self.sequential_read(i);
            return;
        }
        let mode = if self.opts.lease_reads && self.rng.chance(0.5) {
            ReadMode::Lease
        } else {
            ReadMode::Linearizable
        };
        let id = self.next_read;
        self.next_read += 1;
        self.reads
            .insert(id, (i, self.hosts[i].incarnation, key, self.now));
        let deadline = self.local_time(i).plus(self.hosts[i].cfg.read_timeout);
        self.step_host(
            i,
            Input::Read {
                id: ReadId(id),
                mode,
                deadline,
            },
        );
    }

    /// A sequential read promises a committed prefix, monotonic per replica.
    pub(super) fn sequential_read(&mut self, i: usize) {
        let h = &self.hosts[i];
        let at = h.kv_applied;
        if at.0 as usize > self.checker.committed().len() {
            let msg = format!(
                "S14 sequential read on {} at {at} beyond the committed log",
                h.id
            );
            self.checker.report(self.now, msg);
        }
        let prev = self
            .sequential
            .insert((i, h.incarnation), at)
            .unwrap_or_default();
        if at < prev {
            let msg = format!("sequential reads on {} went back from {prev} to {at}", h.id);
            self.checker.report(self.now, msg);
        }
    }

    pub(super) fn read_ready(&mut self, i: usize, read: ReadId, offset: Offset) {
        let Some((host, incarnation, key, call)) = self.reads.remove(&read.0) else {
            return;
        };
        let h = &self.hosts[i];
        if host != i || incarnation != h.incarnation {
            return;
        }
        if h.kv_applied < offset {
            let msg = format!("{} served a read at {offset} before applying it", h.id);
            self.checker.report(self.now, msg);
        }
        let value = h.kv.get(&key).copied().unwrap_or(0);
        if let Some(slot) = self.scripted.get_mut(&read.0) {
            *slot = Some(Ok((offset, value)));
        }
        let (call, ret) = (call.as_nanos() as u64, self.now.as_nanos() as u64);
        self.history.push(LinOp {
            key,
            call,
            ret,
            kind: OpKind::Read(value),
        });
    }

    pub(super) fn read_failed(&mut self, _i: usize, read: ReadId, error: ReadFailure) {
        if self.reads.remove(&read.0).is_some() {
            self.reads_failed += 1;
        }
        if let Some(slot) = self.scripted.get_mut(&read.0) {
            *slot = Some(Err(error));
        }
    }

    /// Writes `value` (non-zero) to `key` through replica `id` (which must lead).
    pub fn write_kv(
        &mut self,
        id: u32,
        key: u64,
        value: u64,
    ) -> Result<OffsetAndEpoch, ProposeError> {
        let i = self.index(ReplicaId(id));
        self.propose_on(i, KvCommand::Write { key, value }.encode())
    }

    /// Starts a read of `key` on replica `id` in `mode`; its outcome appears in
    /// [`Cluster::read_outcome`]. Returns the read's handle.
    pub fn start_read(&mut self, id: u32, key: u64, mode: ReadMode) -> u64 {
        let i = self.index(ReplicaId(id));
        let handle = self.next_read;
        self.next_read += 1;
        self.reads
            .insert(handle, (i, self.hosts[i].incarnation, key, self.now));
        self.scripted.insert(handle, None);
        let deadline = self.local_time(i).plus(self.hosts[i].cfg.read_timeout);
        self.step_host(
            i,
            Input::Read {
                id: ReadId(handle),
                mode,
                deadline,
            },
        );
        handle
    }

    /// The outcome of a read started with [`Cluster::start_read`]: none while pending, else the
    /// read offset and the value read (0 for absent), or why it failed.
    pub fn read_outcome(&self, handle: u64) -> Option<ReadOutcome> {
        self.scripted.get(&handle).copied().flatten()
    }

    /// ReadIndex requests this replica has sent.
    pub fn read_index_requests(&self, id: u32) -> u64 {
        self.hosts[self.index(ReplicaId(id))].read_index_sent
    }

    /// Applies the committed records below `hwm`; with aligned snapshots, takes one at every
    /// multiple of the interval on the way and returns the newest.
    pub(super) fn apply_kv(&mut self, i: usize, hwm: Offset) -> Option<OffsetAndEpoch> {
        let h = &mut self.hosts[i];
        assert!(
            h.kv_applied >= h.log_start || h.kv_applied >= hwm,
            "the state machine never needs purged records"
        );
        let every = self.opts.faults.snapshot_every;
        let aligned = self.opts.faults.aligned_snapshots && every > 0;
        let kept = self.opts.faults.snapshots_kept;
        let mut taken = None;
        while h.kv_applied < hwm {
            let rec = &h.log[h.kv_applied.0 as usize];
            let epoch = rec.epoch;
            h.since_snapshot += 1;
            if let Some(cmd) = KvCommand::decode(&rec.payload) {
                cmd.apply(&mut h.kv);
            }
            h.kv_applied = h.kv_applied.next();
            if aligned && h.kv_applied.0.is_multiple_of(every) {
                let id = OffsetAndEpoch::new(h.kv_applied, epoch);
                if h.take_snapshot(id, kept) {
                    taken = Some(id);
                }
            }
        }
        taken
    }

    /// The committed log up to `end`, as the checker knows it (a snapshot's content).
    pub(super) fn committed_prefix(&self, end: Offset) -> Vec<Record> {
        let committed = self.checker.committed();
        assert!(
            end.0 as usize <= committed.len(),
            "a snapshot covers only committed records"
        );
        committed[..end.0 as usize].to_vec()
    }

    /// The key-value state after applying the committed log up to `end`.
    pub(super) fn reference_at(&self, end: Offset) -> BTreeMap<u64, u64> {
        let mut kv = BTreeMap::new();
        for rec in &self.checker.committed()[..end.0 as usize] {
            if let Some(cmd) = KvCommand::decode(&rec.payload) {
                cmd.apply(&mut kv);
            }
        }
        kv
    }

    /// Checks every recorded client operation for linearizability (S13).
    pub fn check_linearizability(&mut self) {
        match linearizability::check(&self.history, 100_000) {
            Verdict::Linearizable => {}
            Verdict::Violation(msg) => self.checker.report(self.now, msg),
            Verdict::Inconclusive(_) => self.inconclusive += 1,
        }
    }

    /// Completed client operations so far.
    pub fn history(&self) -> &[LinOp] {
        &self.history
    }
}

/// The simulated key-value commands carried in record payloads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum KvCommand {
    Write { key: u64, value: u64 },
    Cas { key: u64, expected: u64, new: u64 },
}

impl KvCommand {
    pub(super) fn key(&self) -> u64 {
        match self {
            KvCommand::Write { key, .. } | KvCommand::Cas { key, .. } => *key,
        }
    }

    pub(super) fn encode(&self) -> Bytes {
        let mut v = Vec::with_capacity(25);
        match self {
            KvCommand::Write { key, value } => {
                v.push(b'w');
                v.extend_from_slice(&key.to_le_bytes());
                v.extend_from_slice(&value.to_le_bytes());
            }
            KvCommand::Cas { key, expected, new } => {
                v.push(b'c');
                v.extend_from_slice(&key.to_le_bytes());
                v.extend_from_slice(&expected.to_le_bytes());
                v.extend_from_slice(&new.to_le_bytes());
            }
        }
        Bytes::from(v)
    }

    pub(super) fn decode(b: &[u8]) -> Option<KvCommand> {
        let word = |i: usize| {
            b.get(i..i + 8)
                .map(|s| u64::from_le_bytes(s.try_into().expect("8")))
        };
        match b.first()? {
            b'w' if b.len() == 17 => Some(KvCommand::Write {
                key: word(1)?,
                value: word(9)?,
            }),
            b'c' if b.len() == 25 => Some(KvCommand::Cas {
                key: word(1)?,
                expected: word(9)?,
                new: word(17)?,
            }),
            _ => None,
        }
    }

    /// Applies the command and describes what it did, as a history operation.
    pub(super) fn apply(&self, kv: &mut BTreeMap<u64, u64>) -> OpKind {
        match *self {
            KvCommand::Write { key, value } => {
                kv.insert(key, value);
                OpKind::Write(value)
            }
            KvCommand::Cas { key, expected, new } => {
                let ok = kv.get(&key).copied().unwrap_or(0) == expected;
                if ok {
                    kv.insert(key, new);
                }
                OpKind::Cas { expected, new, ok }
            }
        }
    }
}

/// The simulated state machine's snapshot encoding: the key-value pairs, in key order.
pub(super) fn encode_kv(kv: &BTreeMap<u64, u64>) -> Bytes {
    let mut v = Vec::with_capacity(kv.len() * 16);
    for (k, val) in kv {
        v.extend_from_slice(&k.to_le_bytes());
        v.extend_from_slice(&val.to_le_bytes());
    }
    Bytes::from(v)
}

pub(super) fn decode_kv(data: &[u8]) -> BTreeMap<u64, u64> {
    data.chunks_exact(16)
        .map(|c| {
            let k = u64::from_le_bytes(c[..8].try_into().expect("8 bytes"));
            let v = u64::from_le_bytes(c[8..].try_into().expect("8 bytes"));
            (k, v)
        })
        .collect()
}
