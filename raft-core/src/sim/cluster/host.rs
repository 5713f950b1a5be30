//! The driver the cluster plays for each replica: starting and crashing hosts, stepping the
//! core and carrying out its outputs (storage with late syncs, messages, events), snapshots.

use super::*;

impl Cluster {
    pub(super) fn local_time(&self, i: usize) -> Instant {
        let h = &self.hosts[i];
        Instant((self.now.as_nanos() as f64 * h.rate) as u64)
    }

    pub(super) fn global_time(&self, i: usize, local: Instant) -> Option<Duration> {
        if local == Instant::NEVER {
            return None;
        }
        let rate = self.hosts[i].rate;
        let mut ns = (local.0 as f64 / rate).ceil() as u64;
        // Rounding must never schedule a tick at a true time whose local time is still before
        // the deadline: that tick would find nothing due and reschedule itself forever.
        while ((ns as f64) * rate) < local.0 as f64 {
            ns += 1;
        }
        Some(Duration::from_nanos(ns).max(self.now))
    }

    pub(super) fn start_host(&mut self, i: usize) {
        let Some(base) = self.start_set(i) else {
            return;
        };
        let now = self.local_time(i);
        let seed = self.rng.next_u64();
        let latest = self.hosts[i]
            .snapshots
            .last()
            .map(|(m, d)| (m.id, d.clone()));
        if let Some((id, _)) = latest {
            // As the driver does: a log that does not carry on from the snapshot (a crash
            // between completing a download and resetting the log) is replaced.
            let h = &self.hosts[i];
            let continues = id.offset >= h.log_start
                && (id.offset.0 as usize) <= h.log.len()
                && (id.offset == Offset::ZERO || h.log[id.offset.0 as usize - 1].epoch == id.epoch);
            if !continues {
                if self.beyond_committed(i, id.offset) {
                    return;
                }
                let ghost = self.committed_prefix(id.offset);
                let h = &mut self.hosts[i];
                h.log = ghost.clone();
                h.durable_log = ghost;
                h.log_start = id.offset;
                h.durable_start = id.offset;
            }
        }
        let h = &mut self.hosts[i];
        if let Some((id, data)) = &latest {
            h.kv = decode_kv(data);
            h.kv_applied = id.offset;
        }
        let state = log_state(&h.log, h.log_start);
        let snapshot = latest.map(|(id, _)| id);
        // The host's log holds every record from offset 0 (a purged prefix stays readable
        // here), so the voter sets are found by scanning it, as the driver scans its log
        // above the set its snapshot carries.
        let voters = voter_history(base, &h.log);
        h.replica = Some(Replica::new(
            h.cfg.clone(),
            h.election,
            &state,
            snapshot,
            voters,
            seed,
            now,
        ));
        h.last_hwm = Offset::ZERO;
        h.tick_at = None;
        self.step_host(i, Input::Tick);
    }

    /// The voter set host `i` starts from, as the driver finds it: the set its storage holds
    /// (formatted, or written at its first start), else [`ValidatedConfig::start_voters`]
    /// (kept in storage when the storage was empty, so that later starts agree). A start the
    /// rule refuses (empty storage, a standalone configuration) is answered the documented
    /// way: the operator starts it with the voters it learns from the cluster, as `--join`
    /// does, and it comes back as an observer. `None` only if even that is refused.
    fn start_set(&mut self, i: usize) -> Option<VoterSet> {
        for attempt in 0..2 {
            let h = &self.hosts[i];
            if let Some(set) = &h.formatted {
                return Some(set.clone());
            }
            let empty = h.log.is_empty() && h.election.is_none() && h.snapshots.is_empty();
            match h.cfg.start_voters(empty) {
                Ok(set) => {
                    if empty {
                        self.hosts[i].formatted = Some(set.clone());
                    }
                    return Some(set);
                }
                Err(refused) => {
                    let t = self.now.as_millis();
                    self.trace.push(format!("{t}ms {refused}"));
                    self.refusals += 1;
                    if attempt == 1 {
                        return None;
                    }
                    let me = self.hosts[i].id;
                    let mut learned: Vec<u32> = match self.leading_voters() {
                        Some((_, set)) => set.ids().map(|r| r.0).collect(),
                        None => Vec::new(),
                    };
                    if learned.iter().all(|v| *v == me.0) {
                        learned = (1..=self.hosts.len() as u32).collect();
                    }
                    self.set_config_voters(me.0, &learned);
                }
            }
        }
        None
    }

    /// Whether a snapshot host `i` installs ends beyond the committed prefix: records no
    /// majority committed reached a snapshot (a forked leader's, say). Reported, and the run
    /// stops there: the host model keeps below a snapshot the committed records only.
    pub(super) fn beyond_committed(&mut self, i: usize, end: Offset) -> bool {
        let committed = self.checker.committed().len();
        if end.0 as usize <= committed {
            return false;
        }
        let id = self.hosts[i].id;
        let msg = format!(
            "S6 {id} installs a snapshot up to {end}, beyond the committed prefix ({committed} \
             records): it holds records the cluster never committed"
        );
        self.checker.report(self.now, msg);
        self.queue.clear();
        true
    }

    pub(super) fn crash_host(&mut self, i: usize) {
        let torn = self.rng.chance(self.opts.faults.torn_tail);
        let keep_vote = self.rng.chance(0.5);
        let cut = self.rng.next_u64();
        let committed = if self.hosts[i]
            .pending_ops
            .iter()
            .any(|op| matches!(op, LogOp::Reset { .. }))
        {
            self.checker.committed().to_vec()
        } else {
            Vec::new()
        };
        let h = &mut self.hosts[i];
        if h.replica.take().is_none() {
            return;
        }
        h.incarnation += 1;
        // What reached the disk: everything synced, plus (torn) part of what was not.
        let mut disk = std::mem::take(&mut h.durable_log);
        let mut disk_start = h.durable_start;
        if torn && !h.pending_ops.is_empty() {
            let ops = h.pending_ops.len() as u64;
            let keep = (cut % (ops + 1)) as usize;
            for (k, op) in h.pending_ops.iter().enumerate().take(keep) {
                match op {
                    LogOp::Append { records, .. } => {
                        let n = if k + 1 == keep {
                            (cut >> 8) as usize % (records.len() + 1)
                        } else {
                            records.len()
                        };
                        disk.extend(records.iter().take(n).cloned());
                    }
                    LogOp::Truncate { end, .. } => disk.truncate(end.0 as usize),
                    LogOp::Purge { start, .. } => disk_start = *start,
                    LogOp::Reset { start, .. } => {
                        disk = committed[..start.offset.0 as usize].to_vec();
                        disk_start = start.offset;
                    }
                }
            }
        }
        h.pending_ops.clear();
        h.log = disk.clone();
        h.durable_log = disk;
        h.log_start = disk_start;
        h.partial = None;
        h.since_snapshot = 0;
        let mut vote_landed = None;
        if let Some((_, state)) = h.election_pending.take() {
            if keep_vote {
                h.election = Some(state);
                vote_landed = Some(state);
            }
        }
        h.log_sync_scheduled = false;
        h.election_sync_scheduled = false;
        h.inbound.clear();
        h.outstanding.clear();
        h.tick_at = None;
        h.kv.clear();
        h.kv_applied = Offset::ZERO;
        let id = h.id;
        // Reads in progress on a crashed replica never complete: they had no effect.
        self.reads.retain(|_, r| r.0 != i);
        self.trace
            .push(format!("{}ms {id} crashed", self.now.as_millis()));
        if let Some(state) = vote_landed {
            self.checker.on_durable_election(self.now, id, state);
        }
    }

    pub(super) fn propose_on(
        &mut self,
        i: usize,
        payload: Bytes,
    ) -> Result<OffsetAndEpoch, ProposeError> {
        let now = self.local_time(i);
        let h = &mut self.hosts[i];
        let Some(replica) = h.replica.as_mut() else {
            return Err(ProposeError::ShuttingDown);
        };
        let mut out = std::mem::take(&mut h.out);
        let result = replica.propose(now, payload.clone(), &mut out);
        if let Ok(id) = result {
            self.proposals
                .insert((id.offset, id.epoch), (payload, self.now));
        }
        self.handle_outputs(i, &mut out);
        self.hosts[i].out = out;
        self.schedule_tick(i);
        result
    }

    pub(super) fn step_host(&mut self, i: usize, input: Input) {
        let now = self.local_time(i);
        let h = &mut self.hosts[i];
        let Some(replica) = h.replica.as_mut() else {
            return;
        };
        let mut out = std::mem::take(&mut h.out);
        replica.step(now, input, &mut out);
        let due = replica.next_deadline();
        let role = replica.role();
        self.handle_outputs(i, &mut out);
        self.hosts[i].out = out;
        if due <= now {
            // Every step polls the timers, so whatever is due at `now` has been done; a
            // deadline not after it would wake the replica again at once, and again: a driver
            // spinning a core (and here, virtual time standing still).
            let id = self.hosts[i].id;
            self.checker.report(
                self.now,
                format!("L0 {id} ({role}) spins: stepped at {now}, still has work due at {due}"),
            );
            self.queue.clear();
            return;
        }
        self.schedule_tick(i);
    }

    pub(super) fn schedule_tick(&mut self, i: usize) {
        let Some(replica) = self.hosts[i].replica.as_ref() else {
            return;
        };
        let Some(at) = self.global_time(i, replica.next_deadline()) else {
            return;
        };
        let h = &self.hosts[i];
        if h.tick_at.is_some_and(|t| t <= at && t >= self.now) {
            return;
        }
        let (host, incarnation) = (h.id, h.incarnation);
        self.hosts[i].tick_at = Some(at);
        self.schedule(at, Ev::Tick { host, incarnation });
    }

    pub(super) fn schedule_syncs(&mut self, i: usize) {
        let lat = self.rng.range(
            self.opts.faults.sync_min.as_nanos() as u64,
            self.opts.faults.sync_max.as_nanos() as u64,
        );
        let at = self.now + Duration::from_nanos(lat);
        let h = &mut self.hosts[i];
        if h.hold_syncs {
            return;
        }
        let (host, incarnation) = (h.id, h.incarnation);
        if !h.pending_ops.is_empty() && !h.log_sync_scheduled {
            h.log_sync_scheduled = true;
            self.schedule(at, Ev::LogSync { host, incarnation });
        }
        let h = &mut self.hosts[i];
        if h.election_pending.is_some() && !h.election_sync_scheduled {
            h.election_sync_scheduled = true;
            self.schedule(at, Ev::ElectionSync { host, incarnation });
        }
    }

    pub(super) fn handle_outputs(&mut self, i: usize, out: &mut Outputs) {
        let mut follow_up = Vec::new();
        if let Some(p) = out.persist.take() {
            self.hosts[i].election_pending = Some(p);
        }
        for op in out.log.drain(..) {
            let id = self.hosts[i].id;
            match &op {
                LogOp::Append { records, .. } => {
                    let h = &mut self.hosts[i];
                    assert_eq!(
                        records.first().map(|r| r.offset.0 as usize),
                        Some(h.log.len()),
                        "driver contract: appends continue the log"
                    );
                    h.log.extend(records.iter().cloned());
                    self.checker.on_append(self.now, id, records);
                }
                LogOp::Truncate { end, .. } => {
                    let h = &mut self.hosts[i];
                    assert!(
                        *end >= h.log_start,
                        "driver contract: truncation above the start"
                    );
                    h.log.truncate(end.0 as usize);
                }
                LogOp::Purge { start, .. } => {
                    let h = &mut self.hosts[i];
                    let covered = h
                        .snapshots
                        .last()
                        .is_some_and(|(m, _)| *start <= m.id.offset);
                    if !covered {
                        let msg = format!("{id} purged its log to {start} beyond its snapshot");
                        self.checker.report(self.now, msg);
                    }
                    self.hosts[i].log_start = *start;
                }
                LogOp::Reset { start, .. } => {
                    if self.beyond_committed(i, start.offset) {
                        return;
                    }
                    let ghost = self.committed_prefix(start.offset);
                    let h = &mut self.hosts[i];
                    h.log = ghost;
                    h.log_start = start.offset;
                }
            }
            self.hosts[i].pending_ops.push_back(op);
        }
        if let Some(id) = out.restore.take() {
            self.restore_snapshot(i, id);
        }
        let snapshot_ops: Vec<SnapshotOp> = out.snapshot.drain(..).collect();
        for op in snapshot_ops {
            if let Some(input) = self.snapshot_op(i, op) {
                follow_up.push(input);
            }
        }
        self.schedule_syncs(i);
        let messages: Vec<Outgoing> = out.messages.drain(..).collect();
        for msg in messages {
            self.send(i, msg);
        }
        if let Some(hwm) = out.committed.take() {
            let h = &self.hosts[i];
            let epoch = h
                .replica
                .as_ref()
                .map_or(Epoch::ZERO, |r| r.election_state().epoch);
            let prev = h.last_hwm;
            self.checker
                .on_commit(self.now, h.id, epoch, prev, hwm, &h.log);
            if self.opts.membership {
                self.check_commit_majority(i, hwm);
            }
            self.hosts[i].last_hwm = hwm;
            let aligned = self.apply_kv(i, hwm);
            self.resolve_proposals();
            // The simulated state machine applies at once.
            follow_up.push(Input::Applied(hwm));
            if let Some(id) = aligned.or_else(|| self.maybe_take_snapshot(i)) {
                follow_up.push(Input::SnapshotTaken(id));
            }
        }
        for ev in out.events.drain(..) {
            self.note_event(i, ev);
        }
        for input in follow_up {
            let now = self.local_time(i);
            if let Some(replica) = self.hosts[i].replica.as_mut() {
                replica.step(now, input, out);
            }
        }
        if !out.is_empty() {
            self.handle_outputs(i, out);
        }
    }

    pub(super) fn note_event(&mut self, i: usize, ev: Event) {
        let id = self.hosts[i].id;
        let t = self.now.as_millis();
        match ev {
            Event::RoleChanged {
                role,
                epoch,
                leader,
            } => {
                let leader = leader.map_or("-".to_string(), |l| l.to_string());
                self.trace
                    .push(format!("{t}ms {id} {role} {epoch} leader={leader}"));
                if role == Role::Leader {
                    let log = std::mem::take(&mut self.hosts[i].log);
                    self.checker.on_leader(self.now, id, epoch, &log);
                    self.hosts[i].log = log;
                }
            }
            Event::ProposalsDropped { epoch, from } => {
                self.trace.push(format!(
                    "{t}ms {id} dropped proposals of {epoch} from {from}"
                ));
            }
            Event::InconsistentLeader {
                from,
                epoch,
                claimed,
            } => {
                let msg = format!("{id} heard from {from} that {claimed:?} leads {epoch}");
                if claimed == Some(id) && epoch <= self.hosts[i].forgotten_epoch {
                    // What its lost disk led: the others remember it, the new replica cannot.
                    let t = self.now.as_millis();
                    self.trace
                        .push(format!("{t}ms {msg} (led before its disk was lost)"));
                } else {
                    self.checker.report(self.now, msg);
                }
            }
            Event::ReadReady { id: read, offset } => self.read_ready(i, read, offset),
            Event::ReadFailed { id: read, error } => self.read_failed(i, read, error),
            Event::TransferEnded { to, result } => {
                self.trace
                    .push(format!("{t}ms {id} transfer to {to} ended: {result:?}"));
            }
            Event::VotersChanged { voters } => {
                self.trace.push(format!("{t}ms {id} voters {voters}"));
            }
        }
    }

    /// Takes a local snapshot when the seed's interval has passed.
    pub(super) fn maybe_take_snapshot(&mut self, i: usize) -> Option<OffsetAndEpoch> {
        let every = self.opts.faults.snapshot_every;
        let h = &self.hosts[i];
        let aligned = self.opts.faults.aligned_snapshots;
        if every == 0 || aligned || h.since_snapshot < every || h.kv_applied == Offset::ZERO {
            return None;
        }
        let epoch = h.log[h.kv_applied.0 as usize - 1].epoch;
        let id = OffsetAndEpoch::new(h.kv_applied, epoch);
        let kept = self.opts.faults.snapshots_kept;
        self.hosts[i].take_snapshot(id, kept).then_some(id)
    }

    /// Restores the state machine from an installed snapshot and checks it against the
    /// committed log.
    pub(super) fn restore_snapshot(&mut self, i: usize, id: OffsetAndEpoch) {
        if self.beyond_committed(i, id.offset) {
            return;
        }
        let h = &self.hosts[i];
        let who = h.id;
        if h.replica.as_ref().is_some_and(|r| r.role() == Role::Leader) {
            self.checker.report(
                self.now,
                format!("{who} installed a snapshot while leading"),
            );
        }
        let Some((_, data)) = h.snapshots.iter().find(|(m, _)| m.id == id) else {
            self.checker
                .report(self.now, format!("{who} restores {id} it does not hold"));
            return;
        };
        let kv = decode_kv(data);
        if kv != self.reference_at(id.offset) {
            let msg = format!("{who} installed snapshot {id} whose state differs from the log's");
            self.checker.report(self.now, msg);
        }
        let t = self.now.as_millis();
        self.trace
            .push(format!("{t}ms {who} installed snapshot {id}"));
        self.installs += 1;
        let h = &mut self.hosts[i];
        h.kv = kv;
        h.kv_applied = id.offset;
        h.since_snapshot = 0;
    }

    /// The simulated snapshot store's part of a download.
    pub(super) fn snapshot_op(&mut self, i: usize, op: SnapshotOp) -> Option<Input> {
        let h = &mut self.hosts[i];
        match op {
            SnapshotOp::Write { id, position, data } => {
                if position == 0 {
                    h.partial = Some((id, Vec::new()));
                }
                match h.partial.as_mut() {
                    Some((pid, bytes)) if *pid == id && bytes.len() as u64 == position => {
                        bytes.extend_from_slice(&data);
                    }
                    _ => {
                        let msg = format!("{} wrote a chunk of {id} out of order", h.id);
                        self.checker.report(self.now, msg);
                    }
                }
                None
            }
            SnapshotOp::Finish { id, size, checksum } => {
                let verified = match h.partial.take() {
                    Some((pid, bytes)) if pid == id => {
                        let meta = SnapshotMeta::of(id, &bytes);
                        let ok = meta.size == size && meta.checksum == checksum;
                        if ok {
                            h.snapshots.retain(|(m, _)| m.id != id);
                            h.snapshots.push((meta, Bytes::from(bytes)));
                            h.snapshots.sort_by_key(|(m, _)| m.id);
                            let kept = self.opts.faults.snapshots_kept;
                            let excess = h.snapshots.len().saturating_sub(kept);
                            h.snapshots.drain(..excess);
                        }
                        ok
                    }
                    _ => false,
                };
                let committed = self.checker.committed();
                let below = &committed[..(id.offset.0 as usize).min(committed.len())];
                let voters = voter_history(self.founding.clone(), below).latest().clone();
                Some(Input::SnapshotDownloaded {
                    id,
                    verified,
                    voters,
                })
            }
        }
    }

    /// Serves a snapshot chunk (sometimes corrupted, when the seed says so).
    pub(super) fn fill_chunk(
        &mut self,
        i: usize,
        id: OffsetAndEpoch,
        position: u64,
        max_bytes: u32,
        r: &mut crate::message::FetchSnapshotResponse,
    ) {
        let found = self.hosts[i]
            .snapshots
            .iter()
            .find(|(m, _)| m.id == id)
            .cloned();
        let Some((meta, data)) = found else {
            r.error = Some(crate::message::ErrorCode::SnapshotNotFound);
            return;
        };
        if position > meta.size {
            r.error = Some(crate::message::ErrorCode::PositionOutOfRange);
            return;
        }
        r.size = meta.size;
        r.checksum = meta.checksum;
        let mut chunk = crate::mem::storage::snapshot_chunk(&data, position, max_bytes).to_vec();
        if !chunk.is_empty() && self.faults_on && self.rng.chance(self.opts.faults.corrupt_chunk) {
            chunk[0] ^= 0x40;
        }
        r.data = Bytes::from(chunk);
    }
}

/// What a log store would report on opening this log, whose records below `start` are gone.
pub(crate) fn log_state(log: &[Record], start: Offset) -> LogState {
    let mut epochs: Vec<EpochStart> = Vec::new();
    for r in &log[start.0 as usize..] {
        if epochs.last().is_none_or(|e| e.epoch != r.epoch) {
            epochs.push(EpochStart {
                epoch: r.epoch,
                start: r.offset,
            });
        }
    }
    let end = OffsetAndEpoch::new(
        Offset(log.len() as u64),
        log.last().map_or(Epoch::ZERO, |r| r.epoch),
    );
    let start_epoch = match start.0 {
        0 => Epoch::ZERO,
        s => log[s as usize - 1].epoch,
    };
    LogState {
        start,
        end,
        epochs,
        start_epoch,
    }
}

/// The driver's part of a fetch response: records of the range, within the byte limit.
pub(crate) fn read_range(log: &[Record], range: crate::protocol::RecordRange) -> Vec<Record> {
    let end = (range.to.0 as usize).min(log.len());
    let mut bytes = 0usize;
    let mut out = Vec::new();
    for r in log.iter().take(end).skip(range.from.0 as usize) {
        bytes += r.encoded_len();
        if !out.is_empty() && bytes > range.max_bytes as usize {
            break;
        }
        out.push(r.clone());
    }
    out
}

/// The voter sets along `log` (every record from offset 0): `base` (the set the storage was
/// formatted with), then each voter set record.
pub(super) fn voter_history(base: VoterSet, log: &[Record]) -> VoterHistory {
    let mut history = VoterHistory::new(base);
    for r in log.iter().filter(|r| r.kind == crate::RecordKind::Voters) {
        let (set, _) = crate::codec::decode_voters(&r.payload).expect("the core wrote this set");
        history.push(r.offset, set);
    }
    history
}

impl Host {
    /// Saves the state machine as it is now as snapshot `id` (it has applied everything below
    /// `id.offset`) and keeps the newest `kept` snapshots; nothing when a snapshot at or past
    /// `id` is already held. Whether it was taken.
    pub(super) fn take_snapshot(&mut self, id: OffsetAndEpoch, kept: usize) -> bool {
        if self.snapshots.last().is_some_and(|(m, _)| m.id >= id) {
            return false;
        }
        let data = encode_kv(&self.kv);
        self.since_snapshot = 0;
        self.snapshots.push((SnapshotMeta::of(id, &data), data));
        let excess = self.snapshots.len().saturating_sub(kept);
        self.snapshots.drain(..excess);
        true
    }
}
