//! Scenario tests of raft-core: short scripts that drive the simulated [`Cluster`] by hand
//! (partition, crash, resign, propose, run for virtual time) and compare what happened with
//! expected text. One module per topic; `sim_seeds` runs the randomized simulator on a fixed
//! seed list plus every seed that ever failed.

mod driver;
mod election;

use std::time::Duration;

use raft_core::sim::{Cluster, ClusterOptions};

/// `n` milliseconds of virtual time.
pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A cluster of `voters` voters and `observers` observers with the harness defaults.
pub fn cluster(seed: u64, voters: u32, observers: u32) -> Cluster {
    Cluster::new(ClusterOptions {
        seed,
        voters,
        observers,
        ..ClusterOptions::default()
    })
}
