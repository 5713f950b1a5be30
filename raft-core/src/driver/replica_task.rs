//! The task that owns the [`Replica`]: steps it with commands, inbound RPCs, completions and
//! timer ticks, and carries out its outputs (log and election writes, messages, applies).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, DefaultHasher};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::applier::ApplyJob;
use super::log_writer::{read_for_fetch, GatedLogOp};
use super::outcome::{Committed, Uncertain, WriteError};
use super::session::{Admission, SessionTable};
use super::snapshot_writer::fill_snapshot_chunk;
use super::supervise::spawn_reporting;
use super::tail_cache::LogCache;
use super::task_messages::{Command, Done, Inbound};
use super::waiters::{Reply, Waiters};
use super::wake::{timer_wake, Sources, Wake};
use super::{DriverOptions, Metrics, Parts, ReadError, ReadMode, ReadPermit, StopCause};
use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

use crate::config::ValidatedConfig;
use crate::message::{RequestId, Response, WriteOrder};
use crate::protocol::{
    Event, Fill, Input, LogOp, Outgoing, Outputs, PersistSeq, ReadId, RecordRange, Replica,
    SnapshotOp, TransferError,
};
use crate::types::{ElectionState, Instant, Offset, OffsetAndEpoch, ReplicaId};

pub(super) struct ReplicaTask {
    pub(super) cfg: ValidatedConfig,
    pub(super) options: DriverOptions,
    pub(super) replica: Replica,
    /// When the next pin of static voters may be tried (`pin.rs`).
    pub(super) pin_next_at: Option<tokio::time::Instant>,
    pub(super) clock: tokio::time::Instant,
    pub(super) parts: Parts,
    pub(super) out: Outputs,
    pub(super) cache: LogCache,
    pub(super) responders: FixedMap<oneshot::Sender<Response>>,
    pub(super) next_inbound: u64,
    pub(super) waiters: Waiters,
    /// Records below this were handed to the applier.
    pub(super) apply_sent: Offset,
    /// Records below this are applied.
    pub(super) applied: Offset,
    /// The applied offset last reported to the core.
    pub(super) applied_reported: Offset,
    pub(super) high_watermark: Offset,
    pub(super) log_writer: mpsc::UnboundedSender<GatedLogOp>,
    pub(super) election_writer: mpsc::UnboundedSender<(PersistSeq, ElectionState)>,
    pub(super) applier: mpsc::UnboundedSender<ApplyJob>,
    pub(super) snapshot_writer: mpsc::UnboundedSender<SnapshotOp>,
    pub(super) done_tx: mpsc::Sender<Done>,
    pub(super) metrics: Arc<Metrics>,
    pub(super) failed: Option<String>,
    pub(super) shutdown: Option<(tokio::time::Instant, oneshot::Sender<()>)>,
    pub(super) reads: FixedMap<oneshot::Sender<Result<ReadPermit, ReadError>>>,
    pub(super) next_read: u64,
    /// Truncations of the log, with when the writes they orphaned stop waiting.
    pub(super) truncations: std::collections::VecDeque<(tokio::time::Instant, Offset)>,
    /// Which peers the calls reach, for one log line per change (see `reachability`).
    pub(super) reachability: super::reachability::Reachability,
    /// The latest batch proposed per write session.
    pub(super) sessions: SessionTable,
    /// The caller of a leadership transfer in progress.
    pub(super) transfer: Option<oneshot::Sender<Result<(), TransferError>>>,
    /// Where [`super::Node::watch`] receivers see the replica's changes.
    pub(super) state: super::events::StateSender,
}

/// A map by request number with a fixed hasher: it keeps its capacity (no allocation per
/// request, unlike a `BTreeMap` that empties and fills), and its order depends only on what
/// was inserted (unlike `RandomState`'s), so a seeded run replays exactly.
pub(super) type FixedMap<V> = HashMap<u64, V, BuildHasherDefault<DefaultHasher>>;

impl ReplicaTask {
    pub(super) fn now(&self) -> Instant {
        Instant(self.clock.elapsed().as_nanos() as u64)
    }

    pub(super) async fn run(
        mut self,
        mut commands: mpsc::Receiver<Command>,
        mut inbound: mpsc::Receiver<Inbound>,
        mut done: mpsc::Receiver<Done>,
    ) -> StopCause {
        self.step(Input::Tick);
        // One timer for the task's life, moved only when the deadline changes: a new `Sleep`
        // per loop turn registered and cancelled a timer entry for every message handled.
        let timer = tokio::time::sleep_until(self.clock);
        tokio::pin!(timer);
        let mut sources = Sources::default();
        // When the timer last woke the replica, if nothing else has stepped it since. A step
        // polls every timer, so a deadline not after that tick is work the replica will not
        // do at once (the simulator's L0 check holds the protocol to that); waking it again
        // at once would spin. The floor turns such a bug into a slow poll, and keeps tokio's
        // paused clock moving in tests, so their time bounds still fire.
        let mut ticked_at: Option<tokio::time::Instant> = None;
        let mut spin_reported = false;
        loop {
            let deadline = self.replica.next_deadline();
            let due = self.clock + Duration::from_nanos(deadline.0.min(u64::MAX / 4));
            let (sleep_until, spinning) = timer_wake(due, ticked_at);
            if spinning && !spin_reported {
                spin_reported = true;
                tracing::warn!(replica = %self.replica.id(), deadline = deadline.0,
                    "a tick left work due at once; waking the replica every millisecond");
            }
            let sleep_until = match &self.shutdown {
                Some((until, _)) => sleep_until.min(*until),
                None => sleep_until,
            };
            if timer.deadline() != sleep_until || timer.is_elapsed() {
                timer.as_mut().reset(sleep_until);
            }
            let wake = sources
                .next(timer.as_mut(), &mut commands, &mut inbound, &mut done)
                .await;
            ticked_at = None;
            match wake {
                Wake::Timer => {
                    self.pin_static_voters();
                    self.step(Input::Tick);
                    ticked_at = Some(tokio::time::Instant::now());
                }
                Wake::Command(cmd) => {
                    self.command(cmd);
                    // Batch: take what else is queued before stepping again.
                    for _ in 0..1024 {
                        match commands.try_recv() {
                            Ok(cmd) => self.command(cmd),
                            Err(_) => break,
                        }
                    }
                    self.step(Input::Tick);
                }
                Wake::Inbound(req) => self.inbound(req),
                Wake::Done(d) => self.done(d),
            }
            if self.should_stop() {
                break;
            }
        }
        self.stop().await
    }

    pub(super) fn should_stop(&self) -> bool {
        if self.failed.is_some() {
            return true;
        }
        let Some((until, _)) = &self.shutdown else {
            return false;
        };
        // A graceful stop waits for the handover (the resigned leader's EndQuorumEpoch) to be
        // acknowledged or the timeout, whichever first.
        tokio::time::Instant::now() >= *until || self.replica.role() != crate::Role::Resigned
    }

    pub(super) async fn stop(mut self) -> StopCause {
        // A pending write may already be replicated and may still commit under another leader.
        let (err, cause) = match &self.failed {
            Some(e) => (Uncertain::Failed(e.clone()), StopCause::Failed(e.clone())),
            None => (Uncertain::Stopped, StopCause::Requested),
        };
        let err = WriteError::Unknown(err);
        for (_, _, w) in std::mem::take(&mut self.waiters).0 {
            let _ = w.send(Err(err.clone()));
        }
        for (_, r) in std::mem::take(&mut self.reads) {
            let _ = r.send(Err(ReadError::ShuttingDown));
        }
        if let Some(t) = self.transfer.take() {
            let _ = t.send(Err(TransferError::ShuttingDown));
        }
        self.parts.transport.close().await;
        if let Some((_, reply)) = self.shutdown.take() {
            let _ = reply.send(());
        }
        cause
    }

    pub(super) fn command(&mut self, cmd: Command) {
        match cmd {
            Command::Propose {
                writes,
                order,
                epoch,
            } => self.propose(writes, order, epoch),
            Command::ProposeOne { payload, reply } => {
                self.propose(std::iter::once((payload, reply)), None, None)
            }
            Command::Write { writes, order } => self.write(writes, order),
            Command::Read { mode, reply } => self.read(mode, reply),
            Command::Status { reply } => {
                let _ = reply.send(self.replica.status(self.now()));
            }
            Command::ChangeVoters {
                change,
                accepted,
                reply,
            } => {
                let now = self.now();
                match self.replica.change_voters(now, change, &mut self.out) {
                    Ok(id) => {
                        self.waiters.insert(id.offset, id.epoch, reply);
                        let _ = accepted.send(Ok(()));
                    }
                    Err(e) => {
                        let _ = accepted.send(Err(e));
                    }
                }
            }
            Command::Transfer { to, reply } => {
                let now = self.now();
                match self.replica.transfer_leadership(now, to, &mut self.out) {
                    // The core allows one transfer at a time, so one caller waits at most.
                    Ok(()) => self.transfer = Some(reply),
                    Err(e) => {
                        let _ = reply.send(Err(e));
                    }
                }
            }
            Command::Abort { reply } => {
                self.shutdown = Some((tokio::time::Instant::now(), reply));
            }
            Command::Shutdown { reply } => {
                let until = tokio::time::Instant::now() + self.options.shutdown_timeout;
                self.shutdown = Some((until, reply));
                self.step(Input::Resign);
                // A leader stays Resigned until its handover is acknowledged; others stop now.
                if self.replica.role() != crate::Role::Resigned {
                    self.shutdown = Some((
                        tokio::time::Instant::now(),
                        self.shutdown.take().expect("set above").1,
                    ));
                }
            }
        }
    }

    /// Proposes one caller's writes in order. Once one is refused, the rest are refused with
    /// it, unproposed: a caller retrying the refused suffix can never see it applied after a
    /// later write of the same caller.
    ///
    /// A batch of a write session older than one this replica already proposed arrived late
    /// (its forwarder gave up on it): it is dropped unproposed, so it cannot land after the
    /// later one.
    pub(super) fn propose(
        &mut self,
        writes: impl IntoIterator<Item = (Bytes, Reply)>,
        order: Option<WriteOrder>,
        epoch: Option<crate::types::Epoch>,
    ) {
        // A forward addressed to this replica as leader of an earlier epoch (delayed across a
        // leader change, W11) is never proposed in a later one: writes of its session may have
        // been taken by another leader since. Nothing is proposed, so it is a refusal; while
        // this replica leads, the forwarder may retry at once with the epoch it now knows.
        if let Some(e) = epoch.filter(|e| *e != self.replica.epoch()) {
            let refusal = if self.replica.role() == crate::Role::Leader {
                crate::protocol::ProposeError::NotReady
            } else {
                crate::protocol::ProposeError::NotLeader {
                    epoch: self.replica.epoch(),
                    leader: self.replica.leader(),
                }
            };
            tracing::debug!(forwarded_in = %e, epoch = %self.replica.epoch(),
                "refused a forward addressed to another epoch");
            for (_, reply) in writes {
                let _ = reply.send(Err(WriteError::Refused(refusal.clone())));
            }
            return;
        }
        let admission = match order {
            Some(o) if !self.options.test_ignore_write_sessions => self.sessions.admits(o),
            _ => Admission::Admitted,
        };
        if admission != Admission::Admitted {
            let e = match admission {
                Admission::Duplicate => WriteError::Unknown(Uncertain::Duplicate),
                _ => WriteError::Superseded,
            };
            for (_, reply) in writes {
                let _ = reply.send(Err(e.clone()));
            }
            return;
        }
        let now = self.now();
        let mut refused = None;
        let mut proposed_any = false;
        for (payload, reply) in writes {
            if let Some(e) = &refused {
                let _ = reply.send(Err(WriteError::Refused(Clone::clone(e))));
                continue;
            }
            // The one place a leader's payloads enter the log, local and forwarded alike.
            // A follower refuses it below and forwards the original: the leader stamps it.
            let payload = match &self.options.stamp {
                Some(s) if self.replica.role() == crate::Role::Leader => s.stamp(payload),
                _ => payload,
            };
            match self.replica.propose(now, payload, &mut self.out) {
                Ok(id) => {
                    proposed_any = true;
                    self.metrics.proposals.fetch_add(1, Ordering::Relaxed);
                    self.waiters.insert(id.offset, id.epoch, reply);
                }
                Err(e) => {
                    self.metrics
                        .proposals_refused
                        .fetch_add(1, Ordering::Relaxed);
                    let _ = reply.send(Err(WriteError::Refused(e.clone())));
                    refused = Some(e);
                }
            }
        }
        if let (Some(o), true) = (order, proposed_any) {
            self.sessions.proposed(o);
        }
    }

    pub(super) fn read(
        &mut self,
        mode: ReadMode,
        reply: oneshot::Sender<Result<ReadPermit, ReadError>>,
    ) {
        let protocol_mode = match mode {
            ReadMode::Sequential => {
                let status = self.replica.status(self.now());
                let permit = ReadPermit {
                    offset: self.applied,
                    since_leader_contact: status.since_leader_contact,
                };
                let _ = reply.send(Ok(permit));
                return;
            }
            ReadMode::Lease if !self.cfg.lease_reads => {
                let _ = reply.send(Err(ReadError::LeaseDisabled));
                return;
            }
            ReadMode::Lease => crate::protocol::ReadMode::Lease,
            ReadMode::Linearizable => crate::protocol::ReadMode::Linearizable,
        };
        let id = self.next_read;
        self.next_read += 1;
        self.reads.insert(id, reply);
        let deadline = self.now().plus(self.cfg.read_timeout);
        self.step(Input::Read {
            id: ReadId(id),
            mode: protocol_mode,
            deadline,
        });
    }

    pub(super) fn inbound(&mut self, req: Inbound) {
        self.metrics.rpcs_received.fetch_add(1, Ordering::Relaxed);
        let id = self.next_inbound;
        self.next_inbound += 1;
        self.responders.insert(id, req.reply);
        self.step(Input::Request {
            from: req.from,
            id: RequestId(id),
            request: req.request,
        });
    }

    pub(super) fn done(&mut self, d: Done) {
        match d {
            Done::Rpc { to, id, result } => {
                let outcome = result.as_ref().map(drop).map_err(ToString::to_string);
                self.note_reach(to, outcome);
                match result {
                    Ok(response) => self.step(Input::Response {
                        from: to,
                        id,
                        response,
                    }),
                    Err(e) => {
                        tracing::debug!(peer = %to, error = %e, "rpc failed");
                        self.metrics.rpcs_failed.fetch_add(1, Ordering::Relaxed);
                        self.step(Input::RequestFailed { to, id });
                    }
                }
            }
            Done::Log(Ok(seq)) => self.step(Input::LogPersisted(seq)),
            Done::Election(Ok(seq)) => self.step(Input::ElectionPersisted(seq)),
            Done::Log(Err(e)) | Done::Election(Err(e)) => {
                tracing::error!(error = %e, "storage failed; stopping");
                self.failed = Some(e.to_string());
            }
            Done::Applied(Ok(applied)) => self.applied_done(applied),
            Done::Applied(Err(e)) => {
                tracing::error!(error = %e, "state machine failed; stopping");
                self.failed = Some(e);
            }
            Done::OldRecords {
                to,
                id,
                mut response,
                records,
            } => match records {
                Ok(records) => {
                    if let Response::Fetch(f) = &mut response {
                        f.records = records;
                    }
                    self.reply(id, response);
                    let _ = to;
                }
                Err(e) => {
                    tracing::error!(error = %e, "reading the log failed; stopping");
                    self.failed = Some(e.to_string());
                }
            },
            Done::Filled { id, response } => match response {
                Ok(response) => self.reply(id, response),
                Err(e) => {
                    tracing::error!(error = %e, "reading a snapshot failed; stopping");
                    self.failed = Some(e.to_string());
                }
            },
            Done::SnapshotTaken(Ok(id)) => {
                self.metrics.snapshots_taken.fetch_add(1, Ordering::Relaxed);
                tracing::info!(replica = %self.cfg.id, snapshot = ?id, "snapshot taken");
                self.step(Input::SnapshotTaken(id));
            }
            Done::Restored(Ok(id)) => {
                self.metrics
                    .snapshots_installed
                    .fetch_add(1, Ordering::Relaxed);
                self.applied = self.applied.max(id.offset);
                self.report_applied();
            }
            Done::SnapshotTaken(Err(e)) | Done::Restored(Err(e)) => {
                tracing::error!(error = %e, "snapshot failed; stopping");
                self.failed = Some(e);
            }
            Done::SnapshotDownloaded(Ok((id, verified, voters))) => {
                self.step(Input::SnapshotDownloaded {
                    id,
                    verified,
                    voters,
                })
            }
            Done::SnapshotDownloaded(Err(e)) => {
                tracing::error!(error = %e, "storing a snapshot download failed; stopping");
                self.failed = Some(e.to_string());
            }
            Done::Panicked(reason) => self.failed = Some(reason),
        }
    }

    pub(super) fn applied_done(&mut self, applied: Vec<(OffsetAndEpoch, Bytes)>) {
        for (id, response) in applied {
            self.applied = id.offset.next();
            // The applied record is committed: a waiter of another epoch at its offset waited
            // for a record that can now never commit.
            while let Some((epoch, w)) = self.waiters.pop_at(id.offset) {
                let result = if epoch == id.epoch {
                    Ok(Committed {
                        id,
                        response: response.clone(),
                    })
                } else {
                    Err(WriteError::Lost(OffsetAndEpoch::new(id.offset, epoch)))
                };
                let _ = w.send(result);
            }
        }
        self.report_applied();
        self.publish_state();
    }

    /// Tells the core how far the state machine has applied, as far as the core knows to be
    /// committed. Also after a restart, where the state machine starts ahead of the core (which
    /// starts at 0) and no record may be applied for a long time in an idle cluster: the core
    /// completes reads only once it knows their offset is applied.
    pub(super) fn report_applied(&mut self) {
        let applied = self.applied.min(self.replica.high_watermark());
        if applied > self.applied_reported {
            self.applied_reported = applied;
            self.step(Input::Applied(applied));
        }
    }

    pub(super) fn reply(&mut self, id: RequestId, response: Response) {
        if let Some(r) = self.responders.remove(&id.0) {
            let _ = r.send(response);
        }
    }

    pub(super) fn step(&mut self, input: Input) {
        let now = self.now();
        let mut out = std::mem::take(&mut self.out);
        self.replica.step(now, input, &mut out);
        self.act(&mut out);
        out.clear();
        self.out = out;
        self.report_applied();
        self.expire_truncated();
        self.publish_state();
    }

    /// Writes whose records a truncation replaced here and that no applied record settled
    /// within the wait end as unknown: waiting longer would leave their callers hanging in a
    /// cluster that went idle.
    fn expire_truncated(&mut self) {
        let now = tokio::time::Instant::now();
        while let Some((at, end)) = self.truncations.front().copied() {
            if at > now {
                break;
            }
            self.truncations.pop_front();
            let epoch = self.replica.epoch();
            for w in self.waiters.take_older(end, epoch) {
                let _ = w.send(Err(WriteError::Unknown(Uncertain::Truncated)));
            }
        }
    }

    pub(super) fn act(&mut self, out: &mut Outputs) {
        if let Some(p) = out.persist.take() {
            let _ = self.election_writer.send(p);
        }
        let restore = out.restore.take();
        for op in out.log.drain(..) {
            let mut gate = None;
            match &op {
                LogOp::Purge { .. } => {}
                LogOp::Reset { start, .. } => {
                    self.cache = LogCache::new(start.offset);
                    // The log may be reset only once the applier is done with the records
                    // before the snapshot (it may still be reading them from the log).
                    let (reached, wait) = oneshot::channel();
                    gate = Some(wait);
                    debug_assert_eq!(restore, Some(*start), "a reset comes with its restore");
                    self.apply_sent = start.offset;
                    // Records below the snapshot are never applied here one by one, so which
                    // of them committed cannot be told from this replica.
                    for (_, _, w) in self.waiters.take_below(start.offset) {
                        let _ = w.send(Err(WriteError::Unknown(Uncertain::Snapshotted)));
                    }
                    let _ = self.applier.send(ApplyJob::Restore {
                        id: *start,
                        reached,
                    });
                }
                LogOp::Append { records, .. } => self.cache.append(records),
                LogOp::Truncate { end, .. } => {
                    // Writes waiting at truncated offsets keep waiting: another replica may still
                    // hold their records and a later leader may commit them. The record applied
                    // at each offset settles them (see `applied_done`); in a cluster that goes
                    // idle none may come, so after a while they end as unknown.
                    self.cache.truncate(*end);
                    let at = tokio::time::Instant::now() + self.cfg.fetch_timeout * 3;
                    self.truncations.push_back((at, *end));
                }
            }
            let _ = self.log_writer.send(GatedLogOp { op, gate });
        }
        for op in out.snapshot.drain(..) {
            let _ = self.snapshot_writer.send(op);
        }
        for msg in out.messages.drain(..) {
            self.send(msg);
        }
        if let Some(hwm) = out.committed.take() {
            self.high_watermark = hwm;
            self.feed_applier();
        }
        for ev in out.events.drain(..) {
            match ev {
                Event::RoleChanged {
                    role,
                    epoch,
                    leader,
                } => {
                    self.metrics.role_changes.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(replica = %self.cfg.id, %role, %epoch, ?leader, "role changed");
                }
                Event::ProposalsDropped { epoch, from } => {
                    // The tail is in offset order and above what stays: kept entries go back
                    // at the end in order.
                    for (o, e, w) in self.waiters.split_off(from) {
                        if e == epoch {
                            let _ = w.send(Err(WriteError::Lost(OffsetAndEpoch::new(o, e))));
                        } else {
                            self.waiters.0.push_back((o, e, w));
                        }
                    }
                }
                Event::InconsistentLeader {
                    from,
                    epoch,
                    claimed,
                } => {
                    tracing::error!(%from, %epoch, ?claimed, "inconsistent leader reported");
                }
                Event::ReadReady { id, offset } => {
                    if let Some(r) = self.reads.remove(&id.0) {
                        let permit = ReadPermit {
                            offset,
                            since_leader_contact: None,
                        };
                        let _ = r.send(Ok(permit));
                    }
                }
                Event::ReadFailed { id, error } => {
                    if let Some(r) = self.reads.remove(&id.0) {
                        let _ = r.send(Err(error.into()));
                    }
                }
                Event::VotersChanged { voters } => {
                    tracing::info!(replica = %self.cfg.id, %voters, "voter set in force");
                    self.parts.transport.voters_changed(&voters);
                }
                Event::TransferEnded { to, result } => {
                    tracing::info!(replica = %self.cfg.id, target = %to, ?result, "transfer ended");
                    if let Some(t) = self.transfer.take() {
                        let _ = t.send(result);
                    }
                }
            }
        }
        let keep_from = self.apply_sent.min(self.replica.durable_end());
        self.cache.evict(self.options.cache_bytes_max, keep_from);
    }

    pub(super) fn feed_applier(&mut self) {
        if self.apply_sent >= self.high_watermark {
            return;
        }
        let (from, to) = (self.apply_sent, self.high_watermark);
        // Below the cache everything is durable in the store and no queued operation touches
        // it; from the cache's start on, the store may lag behind the log writer's queue (an
        // append not yet written, a truncation not yet done), so those records come from the
        // cache, which holds every record from its start to the log end.
        let split = to.min(self.cache.start).max(from);
        if from < split {
            let _ = self.applier.send(ApplyJob::FromLog {
                log: self.parts.log.clone(),
                from,
                to: split,
            });
        }
        if split < to {
            let records = self
                .cache
                .read(split, to, u64::MAX)
                .expect("the cache holds every record from its start to the log end");
            assert_eq!(
                records.last().map(|r| r.offset.next()),
                Some(to),
                "the high watermark never passes the log end"
            );
            let _ = self.applier.send(ApplyJob::Records(records));
        }
        self.apply_sent = to;
    }

    /// Logs what a call's outcome changed in which peers, and whether a majority of the voters,
    /// this replica reaches.
    fn note_reach(&mut self, to: ReplicaId, outcome: Result<(), String>) {
        use super::reachability::Change;
        let me = self.cfg.id;
        for change in self
            .reachability
            .call_ended(to, outcome, self.replica.voters())
        {
            match change {
                Change::PeerUnreachable(peer, error) => {
                    tracing::warn!(replica = %me, %peer, %error, "peer unreachable");
                }
                Change::PeerReachable(peer) => {
                    tracing::info!(replica = %me, %peer, "peer reachable again");
                }
                Change::QuorumLost(down) => {
                    let down: Vec<String> = down.iter().map(ToString::to_string).collect();
                    tracing::warn!(replica = %me, unreachable = %down.join(", "),
                        "no quorum of voters reachable: no leader can be elected or followed");
                }
                Change::QuorumBack => {
                    tracing::info!(replica = %me, "a quorum of voters is reachable again");
                }
            }
        }
    }

    pub(super) fn send(&mut self, msg: Outgoing) {
        match msg {
            Outgoing::Request { to, id, request } => {
                self.metrics.rpcs_sent.fetch_add(1, Ordering::Relaxed);
                let transport = self.parts.transport.clone();
                let done = self.done_tx.clone();
                let timeout = self.cfg.request_timeout;
                spawn_reporting("peer call", done.clone(), async move {
                    let result = transport.call(to, request, timeout).await;
                    let _ = done.send(Done::Rpc { to, id, result }).await;
                });
            }
            Outgoing::Response {
                to,
                id,
                mut response,
                fill,
            } => {
                let (from, end, max_bytes) = match fill {
                    None => {
                        self.reply(id, response);
                        return;
                    }
                    Some(Fill::SnapshotChunk {
                        id: snapshot,
                        position,
                        max_bytes,
                    }) => {
                        self.metrics
                            .snapshot_chunks_served
                            .fetch_add(1, Ordering::Relaxed);
                        let store = self.parts.snapshots.clone();
                        let done = self.done_tx.clone();
                        spawn_reporting("snapshot read", done.clone(), async move {
                            let chunk = store.read(snapshot, position, max_bytes).await;
                            let response = chunk.map(|c| fill_snapshot_chunk(response, c));
                            let _ = done.send(Done::Filled { id, response }).await;
                        });
                        return;
                    }
                    Some(Fill::Records(RecordRange {
                        from,
                        to: end,
                        max_bytes,
                    })) => (from, end, max_bytes),
                };
                if let Some(recs) = self.cache.read(from, end, u64::from(max_bytes)) {
                    if let Response::Fetch(f) = &mut response {
                        f.records = recs;
                    }
                    self.reply(id, response);
                    return;
                }
                // Older than the cache: read from the log store without blocking the task,
                // only below the cache, where the store holds exactly the log (above it a
                // queued truncation may not have reached the store yet). The follower fetches
                // the rest next time.
                let end = end.min(self.cache.start);
                let log = self.parts.log.clone();
                let done = self.done_tx.clone();
                spawn_reporting("log read", done.clone(), async move {
                    let records = read_for_fetch(&*log, from, end, max_bytes).await;
                    let _ = done
                        .send(Done::OldRecords {
                            to,
                            id,
                            response,
                            records,
                        })
                        .await;
                });
            }
        }
    }
}
