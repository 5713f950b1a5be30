//! What the run watches as it goes and demands after healing, per group: election safety
//! (one leader per epoch, by id and directory) and liveness (every replica of every live group
//! commits a write, serves a linearizable read and knows the same leader, within a bound).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::driver::ReadMode;
use crate::types::{DirectoryId, Epoch, GroupId, ReplicaId};

use super::kv::{lock, Kv, KvOp, Tagged};
use super::membership;
use super::world::World;

/// How long the healed cluster has to show it is live.
pub(super) const LIVENESS_BOUND: Duration = Duration::from_secs(15);

/// A leader as the watch knows it: its id and the directory it runs with.
type Leader = (ReplicaId, Option<DirectoryId>);

/// Who led each epoch of each group, as the watch saw it, and the contradictions found.
#[derive(Default)]
pub(super) struct LeaderWatch {
    pub(super) stop: AtomicBool,
    led: Mutex<BTreeMap<(GroupId, Epoch), Leader>>,
    pub(super) violations: Mutex<Vec<String>>,
}

/// How often the watch looks at every running replica's role-change counter.
const WATCH_EVERY: Duration = Duration::from_millis(5);

/// Election safety across every configuration and restart: every [`WATCH_EVERY`] until the
/// run stops, each running replica whose role changed since the last look is asked for its
/// status, and one that says it leads is recorded as the leader of its group's epoch, by id
/// and directory (a replica that lost its disk is another replica). Two leaders of one epoch
/// are a violation. Sampled, so a leadership shorter than the period may go unseen; it never
/// reports one that did not happen.
pub(super) async fn watch_leaders(world: Arc<World>, watch: Arc<LeaderWatch>) {
    // Per host and group: the incarnation's state machine (a new one per start) and its role
    // changes.
    let mut seen: BTreeMap<(usize, GroupId), (Arc<Kv>, u64)> = BTreeMap::new();
    while !watch.stop.load(Ordering::Relaxed) {
        for i in 0..world.len() {
            let Some(live) = world.live_host(i) else {
                continue;
            };
            for (group, (node, kv)) in live.groups {
                let changes = node.metrics().role_changes.load(Ordering::Relaxed);
                let last = seen.get(&(i, group));
                let same = last.is_some_and(|(k, c)| Arc::ptr_eq(k, &kv) && *c == changes);
                if same {
                    continue;
                }
                seen.insert((i, group), (kv, changes));
                let Some(s) = node.status().await else {
                    continue;
                };
                if s.role != crate::types::Role::Leader {
                    continue;
                }
                let me = (s.id, s.directory);
                let mut led = lock(&watch.led);
                match led.get(&(group, s.epoch)) {
                    Some(first) if *first != me => {
                        let msg = format!(
                            "election safety: {group}: epoch {} led by {} (directory {:?}) and \
                             by {} (directory {:?})",
                            s.epoch, first.0, first.1, me.0, me.1
                        );
                        let mut v = lock(&watch.violations);
                        if !v.contains(&msg) {
                            v.push(msg);
                        }
                    }
                    Some(_) => {}
                    None => {
                        led.insert((group, s.epoch), me);
                    }
                }
            }
        }
        tokio::time::sleep(WATCH_EVERY).await;
    }
}

/// After healing, within [`LIVENESS_BOUND`], in every live group at once: every replica
/// commits a write (retrying while it is refused) and serves a linearizable read, and all of
/// them know the same leader. The writes also make sure every replica has applied what was
/// committed before.
pub(super) async fn liveness(world: &World) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + LIVENESS_BOUND;
    let groups = world.live_groups();
    let checks = groups.iter().map(|g| group_liveness(world, *g, deadline));
    futures_util::future::join_all(checks)
        .await
        .into_iter()
        .flatten()
        .collect()
}

async fn group_liveness(
    world: &World,
    group: GroupId,
    deadline: tokio::time::Instant,
) -> Vec<String> {
    let mut problems = Vec::new();
    for i in 0..world.len() {
        let id = world.id(i);
        let Some((node, _)) = world.live(i, group) else {
            problems.push(format!(
                "liveness: {group}: {id} is not running after healing"
            ));
            continue;
        };
        // A write may end unknown (a leader change right after healing); a new write then
        // tries again. Ids from the top of the range, apart from the clients'.
        let mut attempt = 0u64;
        let committed = loop {
            attempt += 1;
            let tagged = Tagged {
                group,
                id: u64::MAX - ((i as u64) << 32) - attempt,
                op: KvOp::Incr { key: 0 },
            };
            // The deadline is checked here, not only by `timeout_at`: that polls the write
            // first, so a write refused at once (a stopped node) never times out, and the
            // retries would go on forever.
            let in_time = || tokio::time::Instant::now() < deadline;
            let result = if in_time() {
                let write = node.write(tagged.encode());
                tokio::time::timeout_at(deadline, write).await.ok()
            } else {
                None
            };
            match result {
                Some(Ok(c)) => break Some(c),
                Some(Err(_)) if in_time() => tokio::time::sleep(Duration::from_millis(20)).await,
                _ => {
                    problems.push(format!(
                        "liveness: {group}: no write committed on {id} in time"
                    ));
                    break None;
                }
            }
        };
        let Some(_) = committed else { continue };
        match tokio::time::timeout_at(deadline, node.read(ReadMode::Linearizable)).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                problems.push(format!("liveness: {group}: linearizable read on {id}: {e}"))
            }
            Err(_) => problems.push(format!("liveness: {group}: linearizable read on {id} hung")),
        }
    }
    // A change committed just before healing can still move leadership (a removed leader
    // resigns), so agreement on the leader is awaited, within the same bound.
    loop {
        let (leaders, unaware) = leaders_known(world, group).await;
        if unaware.is_empty() && leaders.len() <= 1 {
            break;
        }
        if tokio::time::Instant::now() >= deadline {
            problems.extend(unaware.iter().map(|id| {
                format!("liveness: {group}: {id} knows no leader {LIVENESS_BOUND:?} after healing")
            }));
            if leaders.len() > 1 {
                problems.push(format!(
                    "liveness: {group}: replicas name different leaders {leaders:?}"
                ));
            }
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if !problems.is_empty() {
        for i in 0..world.len() {
            let status = match world.live(i, group) {
                Some((node, _)) => node.status().await.map(|s| {
                    format!(
                        "{:?} epoch {} leader {:?} hwm {} log end {:?} durable {} applied {} contact {:?} voters {} directory {:?}",
                        s.role, s.epoch, s.leader, s.high_watermark, s.log_end, s.durable_end, s.applied, s.since_leader_contact,
                        membership::describe(&s.voter_set), s.directory
                    )
                }),
                None => None,
            };
            problems.push(format!("  state of {} in {group}: {status:?}", world.id(i)));
        }
    }
    problems
}

/// The leaders the running replicas of `group` name, and the replicas that name none.
async fn leaders_known(world: &World, group: GroupId) -> (BTreeSet<ReplicaId>, Vec<ReplicaId>) {
    let mut leaders = BTreeSet::new();
    let mut unaware = Vec::new();
    for i in 0..world.len() {
        if let Some((node, _)) = world.live(i, group) {
            match node.status().await.and_then(|s| s.leader) {
                Some(l) => {
                    leaders.insert(l);
                }
                None => unaware.push(world.id(i)),
            }
        }
    }
    (leaders, unaware)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dsim::DriverSimOptions;

    /// Goal: the liveness check ends within its bound when a replica has stopped on its own
    /// (a failure the world did not order), and reports it. Regression: writes to a stopped
    /// replica are refused at once, and `timeout_at` polls its future before its deadline, so
    /// the check retried forever in virtual time.
    #[test]
    fn liveness_reports_a_replica_that_stopped_on_its_own_instead_of_waiting_forever() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("a current-thread runtime");
        runtime.block_on(async {
            let world = World::new(&DriverSimOptions::new(1));
            let group = GroupId::DEFAULT;
            world.found_group(group).await;
            for i in 0..world.len() {
                world.start(i).await;
            }
            let (node, _) = world.live(0, group).expect("replica 0 runs");
            node.abort().await;
            let problems = tokio::time::timeout(LIVENESS_BOUND * 2, liveness(&world))
                .await
                .expect("the liveness check ends within its bound");
            let stopped = format!(
                "liveness: {group}: no write committed on {} in time",
                world.id(0)
            );
            assert!(problems.contains(&stopped), "{problems:?}");
            world.stop_all().await;
        });
    }
}
