//! The configuration each simulated replica runs with: the cluster options' timings and
//! switches, short protocol timers that keep a run's virtual time small, and the seed's
//! snapshot faults.

use std::time::Duration;

use super::ClusterOptions;
use crate::config::{Config, ValidatedConfig};
use crate::sim::SimRng;
use crate::types::{DirectoryId, ReplicaId};

/// The configuration of replica `id` among `voters` and `observers`.
pub(super) fn replica_config(
    opts: &ClusterOptions,
    id: ReplicaId,
    voters: &[ReplicaId],
    observers: &[ReplicaId],
) -> ValidatedConfig {
    let mut cfg = Config::new(id, voters.iter().copied());
    cfg.directory = Some(DirectoryId((u128::from(id.0) << 64) | 1));
    cfg.observers = observers.iter().copied().collect();
    cfg.election_timeout = opts.election_timeout;
    cfg.fetch_timeout = opts.fetch_timeout;
    cfg.fetch_max_wait = Duration::from_millis(50);
    cfg.request_timeout = Duration::from_millis(300);
    cfg.retry_backoff = Duration::from_millis(10);
    cfg.election_backoff_max = opts.election_timeout;
    cfg.append_linger = Duration::from_millis(1);
    cfg.fetch_bytes_max = 64 * 1024;
    cfg.payload_bytes_max = 1024;
    cfg.pending_proposals_max = 4096;
    cfg.pre_vote = opts.pre_vote;
    cfg.check_quorum = opts.check_quorum;
    cfg.sticky_votes = opts.sticky_votes;
    cfg.read_timeout = Duration::from_millis(300);
    cfg.lease_reads = opts.lease_reads;
    cfg.lease_drift_margin = opts.lease_drift_margin;
    cfg.test_unsafe_reads = opts.unsafe_reads;
    cfg.test_count_arrivals = opts.count_arrivals;
    cfg.test_planted = opts.planted;
    cfg.snapshot_log_retention = if opts.faults.mixed_retention {
        // A stream of its own, so that the cluster's other draws stay as they were.
        let mut own = SimRng::new(opts.seed ^ (u64::from(id.0) << 32) ^ 0x5EED);
        own.pick(&[0, 3, 30, 1_000])
    } else {
        opts.faults.snapshot_retention
    };
    // Small chunks, so that downloads span leader changes and crashes.
    cfg.snapshot_chunk_bytes = 24;
    cfg.validate()
        .expect("the simulator's configuration is valid")
}
