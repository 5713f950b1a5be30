//! What happens to hosts and groups: a host starts (a [`crate::driver::Host`] on a new
//! incarnation of its disk and a new network endpoint, reopening the groups its storage lists),
//! crashes (every group's replica aborts, its endpoint closes, its queued writes are lost),
//! loses its disk (every group's data); a group is founded (its founders formatted, then opened
//! on every running host) and dropped (on every running host; a host that was down drops it at
//! its next start). Each host's operations run one at a time (its `ops` lock).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::driver::{DriverOptions, HostError, StartError};
use crate::types::{DirectoryId, GroupId};

use super::faults::forget_tail;
use super::groups::SimGroupStorage;
use super::kv::{lock, Kv};
use super::world::{Live, Phase, World};

/// How long dropping a group on one host may take before it is reported as hung.
const DROP_BOUND: Duration = Duration::from_secs(30);

impl World {
    fn ops(&self, i: usize) -> Arc<tokio::sync::Mutex<()>> {
        lock(&self.hosts)[i].ops.clone()
    }

    fn fail(&self, what: String) {
        lock(&self.start_failures).push(what);
    }

    /// Loses host `i`'s disk: it crashes, and every group's stores are gone, under a new
    /// directory id. Its ledgers stay: what it applied before still counts.
    pub(super) async fn wipe(&self, i: usize) {
        let ops = self.ops(i);
        let _one_at_a_time = ops.lock().await;
        self.crash_locked(i).await;
        let (id, directory) = {
            let mut hosts = lock(&self.hosts);
            let h = &mut hosts[i];
            h.disk.lose();
            h.directory = DirectoryId(h.directory.0 + 1);
            (h.id, h.directory)
        };
        self.note(format_args!(
            "{id} lost its disk; new directory {directory}"
        ));
    }

    /// Crashes host `i`: every group's replica stops at once, its state machines are gone,
    /// its endpoint closes (calls waiting on it fail), and its stores keep what reached them
    /// and nothing after (with `lying_fsync`, each log also loses the last few records it had
    /// acknowledged as durable).
    pub(super) async fn crash(&self, i: usize) {
        let ops = self.ops(i);
        let _one_at_a_time = ops.lock().await;
        self.crash_locked(i).await;
    }

    async fn crash_locked(&self, i: usize) {
        let (live, disk, id) = {
            let mut hosts = lock(&self.hosts);
            hosts[i].alive.store(false, Ordering::SeqCst);
            (hosts[i].live.take(), hosts[i].disk.clone(), hosts[i].id)
        };
        let Some(live) = live else { return };
        self.note(format_args!("{id} crashes"));
        crate::io::HostTransport::close(&*live.transport).await;
        for (node, _) in live.groups.values() {
            let installed = node.metrics().snapshots_installed.load(Ordering::Relaxed);
            self.snapshots_installed
                .fetch_add(installed, Ordering::Relaxed);
            node.abort().await;
        }
        if self.opts.lying_fsync {
            for log in disk.logs() {
                forget_tail(&log, &self.links).await;
            }
        }
    }

    /// Starts host `i` on its disk and reopens the groups its storage lists (and the live
    /// groups created while it was down), each with a fresh state machine and the
    /// configuration its file holds; a group dropped while it was down is dropped now. A host
    /// whose disk was lost comes back as the replacement the operator set up (see
    /// `World::open_on`).
    pub(super) async fn start(&self, i: usize) {
        let ops = self.ops(i);
        let _one_at_a_time = ops.lock().await;
        let replacement = {
            let mut hosts = lock(&self.hosts);
            if hosts[i].live.is_some() {
                return;
            }
            hosts[i].replacement.take()
        };
        let Some(live) = self.start_host(i).await else {
            return;
        };
        let id = self.id(i);
        let stored = match live.host.stored_groups().await {
            Ok(stored) => stored,
            Err(e) => return self.fail(format!("restart of {id}: {e}")),
        };
        let mut open = BTreeSet::new();
        for group in stored {
            match self.phase(group) {
                Some(Phase::Dropped) => {
                    self.note(format_args!(
                        "{id} drops {group}, dropped while it was down"
                    ));
                    if let Err(e) = live.host.drop_group(group).await {
                        self.fail(format!("drop of {group} on {id} at its start: {e}"));
                    }
                }
                Some(Phase::Live | Phase::Stopping) => {
                    open.insert(group);
                }
                // Being founded: `World::found_group` opens it once it is formatted.
                Some(Phase::Creating) | None => {}
            }
        }
        open.extend(self.groups_in(&[Phase::Live, Phase::Stopping]));
        for group in open {
            self.open_on(i, group, replacement).await;
        }
    }

    /// A new incarnation of host `i`: a storage engine over its disk and a new endpoint
    /// (which replaces, and closes, the previous one), serving no group yet.
    async fn start_host(&self, i: usize) -> Option<Live> {
        let (id, disk, alive) = {
            let mut hosts = lock(&self.hosts);
            let h = &mut hosts[i];
            h.incarnation += 1;
            h.alive = Arc::new(AtomicBool::new(true));
            (h.id, h.disk.clone(), h.alive.clone())
        };
        let storage = Arc::new(SimGroupStorage::new(disk, alive));
        let transport = Arc::new(self.net.endpoint(id));
        self.note(format_args!("{id} starts"));
        let host = match crate::driver::Host::start(id, transport.clone(), storage).await {
            Ok(host) => host,
            Err(e) => {
                self.fail(format!("restart of {id}: {e}"));
                return None;
            }
        };
        let live = Live {
            host,
            transport,
            groups: Default::default(),
        };
        lock(&self.hosts)[i].live = Some(live.clone());
        Some(live)
    }

    /// Opens `group` on running host `i`. On a replacement machine (its disk lost:
    /// `Some(join)`), the operator first rewrites the group's file: with the voters it learns
    /// from the cluster when set up with `--join`, or when the file's other voters are all
    /// gone from the set in force (a grown cluster whose founders were removed leads
    /// nowhere); a file naming no other replica (a standalone founder's) is kept: its open is
    /// refused as unformatted, which the operator answers with learned voters.
    async fn open_on(&self, i: usize, group: GroupId, replacement: Option<bool>) {
        let id = self.id(i);
        if let Some(join) = replacement {
            let learned = self.learned_voters(i, group).await;
            let others: Vec<_> = self
                .voters_file(i, group)
                .into_iter()
                .filter(|v| *v != id)
                .collect();
            let leads_nowhere = !others.is_empty() && !others.iter().any(|v| learned.contains(v));
            if join || leads_nowhere {
                self.set_voters_file(i, group, learned);
            }
        }
        for attempt in 0..2 {
            match self.open_once(i, group).await {
                Err(HostError::Start {
                    source: StartError::NotFormatted(e),
                    ..
                }) if attempt == 0 => {
                    self.refused_starts.fetch_add(1, Ordering::Relaxed);
                    self.note(format_args!("start of {group} refused: {e}"));
                    let learned = self.learned_voters(i, group).await;
                    self.set_voters_file(i, group, learned);
                }
                Err(e) => return self.fail(format!("restart of {id}: {e}")),
                Ok(()) => return,
            }
        }
    }

    async fn open_once(&self, i: usize, group: GroupId) -> Result<(), HostError> {
        let (id, host, directory, incarnation) = {
            let hosts = lock(&self.hosts);
            let h = &hosts[i];
            let Some(live) = &h.live else { return Ok(()) };
            if live.groups.contains_key(&group) {
                return Ok(());
            }
            (h.id, live.host.clone(), h.directory, h.incarnation)
        };
        let voters_file = lock(&self.hosts)[i].voters_file.get(&group).cloned();
        let cfg = self.config(id, group, directory, voters_file.as_deref());
        let cfg = match cfg.validate() {
            Ok(c) => c,
            Err(e) => {
                self.fail(format!("config of {id} in {group}: {e}"));
                return Ok(());
            }
        };
        let kv = Arc::new(Kv::new(group, self.ledger(i, group)));
        let seed = self.opts.seed
            ^ (u64::from(id.0) << 40)
            ^ (incarnation << 20)
            ^ group.0.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let options = DriverOptions {
            seed,
            shutdown_timeout: Duration::from_millis(500),
            forward_timeout: Duration::from_millis(self.opts.forward_timeout_ms),
            test_forward_failure_refuses: self.opts.forward_failure_refuses,
            test_ignore_write_sessions: self.opts.ignore_write_sessions,
            ..DriverOptions::default()
        };
        self.note(format_args!("{id} opens {group}"));
        let node = host.open_group(group, cfg, kv.clone(), options).await?;
        if let Some(live) = lock(&self.hosts)[i].live.as_mut() {
            live.groups.insert(group, (node, kv));
        }
        Ok(())
    }

    /// Founds `group` (registered, [`Phase::Creating`]): formats every founder's storage with
    /// the founding set, once (a running host through `Host::format_group`, a host that is
    /// down on its disk as the operator would), then makes the group live and opens it on
    /// every running host; a host that is down opens it at its next start.
    pub(super) async fn found_group(&self, group: GroupId) {
        let founding = self.founding(group);
        for i in 0..self.len() {
            let id = self.id(i);
            if founding.get(id).is_none() {
                continue;
            }
            let ops = self.ops(i);
            let _one_at_a_time = ops.lock().await;
            let (live, disk) = {
                let hosts = lock(&self.hosts);
                (hosts[i].live.clone(), hosts[i].disk.clone())
            };
            let formatted = match live {
                Some(live) => live
                    .host
                    .format_group(group, &founding)
                    .await
                    .map_err(|e| e.to_string()),
                None => {
                    let engine = SimGroupStorage::new(disk, Arc::new(AtomicBool::new(true)));
                    match crate::io::GroupStorage::open_group(&engine, group).await {
                        Ok(stores) => crate::driver::format(&*stores.snapshots, &founding)
                            .await
                            .map_err(|e| e.to_string()),
                        Err(e) => Err(e.to_string()),
                    }
                }
            };
            if let Err(e) = formatted {
                self.fail(format!("format of {id} in {group}: {e}"));
            }
        }
        self.set_phase(group, Phase::Live);
        self.note(format_args!(
            "{group} founded on {}",
            super::membership::describe(&founding)
        ));
        for i in 0..self.len() {
            let ops = self.ops(i);
            let _one_at_a_time = ops.lock().await;
            if lock(&self.hosts)[i].live.is_some() {
                self.open_on(i, group, None).await;
            }
        }
    }

    /// Drops `group` on every running host (`Host::drop_group`: its replica stops, its stores
    /// are deleted); a host that is down drops it at its next start. Its clients must have
    /// stopped.
    pub(super) async fn drop_group(&self, group: GroupId) {
        self.set_phase(group, Phase::Dropped);
        self.note(format_args!("{group} is dropped"));
        for i in 0..self.len() {
            let ops = self.ops(i);
            let _one_at_a_time = ops.lock().await;
            let host = {
                let mut hosts = lock(&self.hosts);
                hosts[i].live.as_mut().map(|live| {
                    if let Some((node, _)) = live.groups.remove(&group) {
                        let metrics = node.metrics();
                        let installed = metrics.snapshots_installed.load(Ordering::Relaxed);
                        self.snapshots_installed
                            .fetch_add(installed, Ordering::Relaxed);
                    }
                    live.host.clone()
                })
            };
            let Some(host) = host else { continue };
            let id = self.id(i);
            match tokio::time::timeout(DROP_BOUND, host.drop_group(group)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => self.fail(format!("drop of {group} on {id}: {e}")),
                Err(_) => self.fail(format!("drop of {group} on {id} hung")),
            }
        }
    }

    /// Ends every fault: links whole, no stalls, no slow or lost messages, every host running.
    pub(super) async fn heal(&self) {
        {
            let mut links = lock(&self.links);
            links.cut.clear();
            links.stalled.clear();
            links.slow_chance = 0.0;
            links.loss = 0.0;
            links.healed = true;
        }
        for i in 0..self.len() {
            self.start(i).await;
        }
    }

    /// Stops every host (the end of a run).
    pub(super) async fn stop_all(&self) {
        for i in 0..self.len() {
            self.crash(i).await;
        }
    }
}
