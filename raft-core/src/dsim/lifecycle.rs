//! Groups created and dropped during a run (with more than one group): a new group is
//! registered, its founders formatted, it is opened on every host and gets clients of its
//! own; a group to drop first stops its clients, then is dropped on every host
//! (`Host::drop_group`). After healing, a dropped group must be gone for good: run by no host,
//! listed by no host's storage, and its requests turned away.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::message::{DescribeQuorumRequest, Request};
use crate::sim::SimRng;
use crate::types::GroupId;

use super::clients::{run_session, Clients};
use super::kv::lock;
use super::membership::{pick_group, Membership};
use super::world::{Phase, World};

/// Most groups alive at once: the run's starting count and two more.
const EXTRA_GROUPS: usize = 2;

/// Every group's client sessions, so that a group's drop waits for its own and the run's end
/// for all.
#[derive(Default)]
pub(super) struct Sessions {
    running: Mutex<BTreeMap<GroupId, Vec<JoinHandle<()>>>>,
    /// Groups created and dropped during the run.
    pub(super) created: AtomicU64,
    pub(super) dropped: AtomicU64,
}

impl Sessions {
    /// Starts `count` sessions of `group`, until `until` or the group's drop.
    pub(super) fn spawn(
        &self,
        clients: &Arc<Clients>,
        group: GroupId,
        count: u32,
        seed: u64,
        until: tokio::time::Instant,
    ) {
        let handles = (0..count).map(|s| {
            let session = run_session(clients.clone(), (group, s), seed, until);
            tokio::spawn(session)
        });
        let mut running = lock(&self.running);
        running.entry(group).or_default().extend(handles);
    }

    /// Waits for the sessions of `group`, or of every group when `None`, to end.
    pub(super) async fn join(&self, group: Option<GroupId>) {
        let handles: Vec<JoinHandle<()>> = {
            let mut running = lock(&self.running);
            match group {
                Some(g) => running.remove(&g).unwrap_or_default(),
                None => std::mem::take(&mut *running)
                    .into_values()
                    .flatten()
                    .collect(),
            }
        };
        for h in handles {
            let _ = h.await;
        }
    }
}

/// What the group schedule works with.
pub(super) struct GroupSchedule {
    pub(super) world: Arc<World>,
    pub(super) clients: Arc<Clients>,
    pub(super) membership: Arc<Membership>,
    pub(super) sessions: Arc<Sessions>,
}

/// The group schedule: until `until`, every 0.5 to 2.5 s, a group created (while fewer than
/// the starting count and [`EXTRA_GROUPS`] are alive) or one dropped (while more than one is).
pub(super) async fn run_groups(s: GroupSchedule, until: tokio::time::Instant) {
    let opts = s.world.opts.clone();
    let mut rng = SimRng::new(opts.seed ^ 0x6772_6f75);
    let most = opts.groups as usize + EXTRA_GROUPS;
    while tokio::time::Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(rng.range(500, 2_500))).await;
        if tokio::time::Instant::now() >= until {
            break;
        }
        let live = s.world.live_groups();
        if rng.chance(0.5) {
            if live.len() < most {
                let group = s.world.register_group();
                s.membership.add_group(group, s.world.founding(group));
                s.world.found_group(group).await;
                s.sessions.created.fetch_add(1, Ordering::Relaxed);
                s.sessions
                    .spawn(&s.clients, group, opts.sessions, opts.seed, until);
            }
        } else if live.len() > 1 {
            let Some(group) = pick_group(&live, &mut rng) else {
                continue;
            };
            s.world.set_phase(group, Phase::Stopping);
            s.world
                .note(format_args!("{group} stops its clients to be dropped"));
            s.sessions.join(Some(group)).await;
            s.world.drop_group(group).await;
            s.sessions.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// How long the probe of a dropped group waits for its answer (the network is healed).
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// After healing, every dropped group is gone for good: no host runs it, no host's storage
/// lists it, and a request of it from each host to the next is turned away unhandled.
pub(super) async fn check_dropped(world: &World) -> Vec<String> {
    let mut problems = Vec::new();
    let n = world.len();
    for group in world.groups_in(&[Phase::Dropped]) {
        for i in 0..n {
            let id = world.id(i);
            let Some(live) = world.live_host(i) else {
                continue;
            };
            if live.host.groups().contains(&group) || live.groups.contains_key(&group) {
                problems.push(format!("drop: {group} still runs on {id}"));
            }
            match live.host.stored_groups().await {
                Ok(stored) if stored.contains(&group) => {
                    problems.push(format!("drop: {id}'s storage still lists {group}"));
                }
                Ok(_) => {}
                Err(e) => problems.push(format!("drop: {id}'s storage: {e}")),
            }
            let to = world.id((i + 1) % n);
            let probe = Request::DescribeQuorum(DescribeQuorumRequest {});
            let answer =
                crate::io::HostTransport::call(&*live.transport, to, group, probe, PROBE_TIMEOUT)
                    .await;
            match answer {
                Err(crate::io::TransportError::NotSent { .. }) => {}
                Ok(response) => problems.push(format!(
                    "drop: {to} answered {id}'s request of {group}: {response:?}"
                )),
                Err(e) => problems.push(format!(
                    "drop: {id}'s request of {group} to {to} was not turned away: {e}"
                )),
            }
        }
    }
    problems
}
