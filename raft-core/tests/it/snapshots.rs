//! Snapshots and log compaction (KIP-630) in the simulator. Every replica snapshots its key-value
//! state every 10 applied records and purges its log below the snapshot (no retention), and
//! snapshots move in 24-byte chunks, so a replica that was down for a few dozen writes must
//! download one over several round trips. The simulator checks, on every install, that the
//! installed state equals the committed log's state at that offset and that no leader installs.

use raft_core::sim::{Cluster, ClusterOptions, Faults};
use raft_core::Offset;

use super::{assert_no_violations, ms, settle};

fn compacting(seed: u64, voters: u32, observers: u32, corrupt_chunk: f64) -> Cluster {
    Cluster::new(ClusterOptions {
        seed,
        voters,
        observers,
        faults: Faults {
            snapshot_every: 10,
            snapshot_retention: 0,
            corrupt_chunk,
            ..Faults::none()
        },
        ..ClusterOptions::default()
    })
}

/// Writes `n` distinct key-value records through the leader and waits for them to commit.
fn write_many(c: &mut Cluster, leader: u32, n: u64) {
    for k in 0..n {
        let id = c
            .write_kv(leader, 1 + k % 8, 100 + k)
            .expect("the leader accepts writes");
        let ok = c.run_until_cond(ms(1000), |c| c.committed().len() as u64 > id.offset.0);
        assert!(ok, "write {k} did not commit:\n{}", c.trace());
    }
}

fn installs(c: &Cluster, id: u32) -> u64 {
    c.replica(id).stats().snapshots_installed
}

#[test]
fn a_replica_back_from_a_long_absence_installs_a_snapshot() {
    // Goal: a voter whose missing records were purged catches up through a snapshot and then
    // fetches the rest. Method: crash voter 3, commit 60 writes (the others' logs now start
    // past where 3 stopped), restart it; it must install a snapshot and reach the leader's log
    // end, with the other voters' log starts above 0.
    let mut c = compacting(1, 3, 0, 0.0);
    let leader = settle(&mut c);
    let away = if leader == 3 { 2 } else { 3 };
    c.crash(away);
    write_many(&mut c, leader, 60);
    let start = c.replica(leader).status(raft_core::Instant(0)).log_start;
    assert!(
        start > Offset(40),
        "the leader purged its log: start {start}"
    );
    c.restart(away);
    let end = c.replica(leader).log_end().offset;
    let ok = c.run_until_cond(ms(3000), |c| c.replica(away).high_watermark() >= end);
    assert!(ok, "{away} did not catch up:\n{}", c.trace());
    assert!(
        installs(&c, away) >= 1,
        "{away} caught up through a snapshot"
    );
    assert_eq!(installs(&c, leader), 0, "the leader never installs");
    assert_no_violations(&c);
}

#[test]
fn a_new_observer_joins_a_compacted_cluster_through_a_snapshot() {
    // Goal: an observer that starts with an empty log after the voters purged theirs catches
    // up (the KIP-630 bootstrap path). Method: crash the observer at once, write 50 records,
    // restart it with nothing on disk beyond what it had (an empty log).
    let mut c = compacting(2, 3, 1, 0.0);
    let leader = settle(&mut c);
    c.crash(4);
    write_many(&mut c, leader, 50);
    c.restart(4);
    let end = c.replica(leader).log_end().offset;
    let ok = c.run_until_cond(ms(3000), |c| c.replica(4).high_watermark() >= end);
    assert!(ok, "the observer did not catch up:\n{}", c.trace());
    assert!(installs(&c, 4) >= 1, "the observer installed a snapshot");
    assert_no_violations(&c);
}

#[test]
fn a_download_interrupted_by_a_leader_change_completes() {
    // Goal: a download survives a leader change: it resumes from the new leader (or restarts
    // there if that leader's snapshot differs) and completes. Method: crash voter 3, write 60
    // records, restart it, and as soon as its download has received its first chunk make the
    // leader resign; then 3 must still install a snapshot and catch up with the new leader.
    let mut c = compacting(3, 3, 0, 0.0);
    let leader = settle(&mut c);
    let away = if leader == 3 { 2 } else { 3 };
    c.crash(away);
    write_many(&mut c, leader, 60);
    c.restart(away);
    let started = c.run_until_cond(ms(2000), |c| {
        c.replica(away)
            .snapshot_download()
            .is_some_and(|(_, position)| position > 0)
    });
    assert!(started, "{away} never started a download:\n{}", c.trace());
    c.resign(leader);
    let ok = c.run_until_cond(ms(3000), |c| {
        c.leader().is_some_and(|l| {
            l != leader && c.replica(away).high_watermark() >= c.replica(l).log_end().offset
        })
    });
    assert!(
        ok,
        "{away} did not catch up after the leader change:\n{}",
        c.trace()
    );
    assert!(installs(&c, away) >= 1, "{away} installed a snapshot");
    assert_no_violations(&c);
}

#[test]
fn a_corrupt_chunk_is_detected_and_the_download_restarts() {
    // Goal: a damaged chunk never reaches the state machine: the whole-snapshot checksum fails,
    // the download restarts, and a clean copy is installed. Method: a third of the chunks the
    // leader serves are corrupted while voter 3 downloads; 3 must report restarts, then install
    // once a clean copy arrives (the simulator checks the installed state against the log).
    let mut c = compacting(4, 3, 0, 0.35);
    let leader = settle(&mut c);
    let away = if leader == 3 { 2 } else { 3 };
    c.crash(away);
    write_many(&mut c, leader, 60);
    c.restart(away);
    // Corruption happens only while faults are on (the fault settings have nothing else on).
    c.run_with_faults_until(c.now() + ms(1500));
    let restarts = c.replica(away).stats().snapshot_restarts;
    assert!(restarts >= 1, "no corrupt chunk was detected");
    let end = c.replica(leader).log_end().offset;
    let ok = c.run_until_cond(ms(3000), |c| c.replica(away).high_watermark() >= end);
    assert!(ok, "{away} did not catch up:\n{}", c.trace());
    assert!(installs(&c, away) >= 1, "{away} installed a clean snapshot");
    assert_no_violations(&c);
}
