//! The fault schedule: partitions, one-way cuts, host crashes with restarts, latency storms,
//! stalls and lossy periods, each hitting a host (every group it runs) and undone after its
//! own duration, so faults overlap.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::mem::MemLog;
use crate::sim::SimRng;

use super::kv::lock;
use super::world::{Links, World};

/// Negative control for the storage contract: drops up to five records from the end of a log
/// that acknowledged them as durable, as a disk whose fsync lied would after a power loss.
pub(super) async fn forget_tail(log: &MemLog, links: &Mutex<Links>) {
    use crate::io::LogStore;
    let Ok(state) = log.state().await else { return };
    let lost = lock(links).rng.range(1, 5);
    let end = state.end.offset.0.saturating_sub(lost).max(state.start.0);
    let _ = log.truncate(crate::types::Offset(end)).await;
}

/// The fault schedule: until `until`, a fault every 0.2 to 1.5 s, each undone after its own
/// duration, so faults overlap.
pub(super) async fn run_faults(world: Arc<World>, seed: u64, until: tokio::time::Instant) {
    let mut rng = SimRng::new(seed ^ 0x6661_756c);
    let n = world.len();
    while tokio::time::Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(rng.range(200, 1_500))).await;
        let i = rng.below(n as u64) as usize;
        let id = world.id(i);
        let lasts = Duration::from_millis(rng.range(200, 3_000));
        let roll = rng.below(100);
        let w = world.clone();
        if roll < 25 {
            // Isolate one replica, both ways.
            let pairs: Vec<_> = (0..n)
                .map(|j| world.id(j))
                .filter(|o| *o != id)
                .flat_map(|o| [(id, o), (o, id)])
                .collect();
            lock(&world.links).cut.extend(pairs.iter().copied());
            tokio::spawn(async move {
                tokio::time::sleep(lasts).await;
                let mut links = lock(&w.links);
                for p in &pairs {
                    links.cut.remove(p);
                }
            });
        } else if roll < 40 {
            // One direction of one link.
            let other = world.id((i + 1 + rng.below(n as u64 - 1) as usize) % n);
            lock(&world.links).cut.insert((id, other));
            tokio::spawn(async move {
                tokio::time::sleep(lasts).await;
                lock(&w.links).cut.remove(&(id, other));
            });
        } else if roll < 60 {
            // A crash, and a restart later.
            world.crash(i).await;
            tokio::spawn(async move {
                tokio::time::sleep(lasts.min(Duration::from_millis(2_000))).await;
                w.start(i).await;
            });
        } else if roll < 72 {
            // A latency storm: many messages take 60 to 400 ms.
            lock(&world.links).slow_chance = 0.3;
            tokio::spawn(async move {
                tokio::time::sleep(lasts).await;
                let mut links = lock(&w.links);
                if !links.healed {
                    links.slow_chance = 0.01;
                }
            });
        } else if roll < 84 {
            // A stall: nothing reaches or leaves the replica for a while, then all of it does.
            let until = tokio::time::Instant::now() + lasts.min(Duration::from_millis(1_500));
            lock(&world.links).stalled.push((id, until));
        } else if roll < 92 {
            // A lossy period.
            lock(&world.links).loss = 0.2;
            tokio::spawn(async move {
                tokio::time::sleep(lasts).await;
                let mut links = lock(&w.links);
                if !links.healed {
                    links.loss = 0.01;
                }
            });
        }
    }
}
