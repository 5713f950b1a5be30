//! Scenario tests of raft-core: short scripts that drive the simulated [`Cluster`] by hand
//! (partition, crash, resign, propose, run for virtual time) and compare what happened with
//! expected text. One module per topic; `sim_seeds` runs the randomized simulator on a fixed
//! seed list plus every seed that ever failed.
//!
//! Timings are the harness defaults (`ClusterOptions::default()`): election timeout 100 ms
//! (randomized in [100, 200) ms), fetch timeout 300 ms, check-quorum 450 ms, long-poll 50 ms,
//! network delay 0.5 ms, storage sync 0.2 ms. Trace lines read `<time> <replica> <role>
//! <epoch> leader=<leader>`.

mod by_hand;
mod by_hand_bootstrap;
mod by_hand_epochs;
mod by_hand_membership;
mod by_hand_reads;
mod by_hand_replication;
mod by_hand_snapshot;
mod by_hand_stale_answer;
mod by_hand_status;
mod check_quorum;
mod driver;
mod driver_bootstrap;
mod driver_large;
mod driver_membership;
mod driver_outcomes;
mod driver_panics;
mod driver_sim;
mod driver_sim_operator;
mod driver_snapshots;
mod driver_stamp;
mod election;
mod groups_storage;
mod host;
mod liveness_checks;
mod membership;
mod observers;
mod prevote;
mod reads;
mod replication;
mod resign;
mod sim_bootstrap;
mod sim_seeds;
mod snapshots;
mod transfer;

use std::time::Duration;

use raft_core::sim::{Cluster, ClusterOptions};
use raft_core::{Epoch, Instant, Offset, OffsetAndEpoch, ReplicaId, Role};

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

/// The ids of every replica (voters first, then observers), read from a running replica's
/// configuration.
pub fn all_ids(c: &Cluster, running: u32) -> Vec<u32> {
    let cfg = c.replica(running).config();
    let n = (cfg.voters.len() + cfg.observers.len()) as u32;
    (1..=n).collect()
}

/// Whether the cluster has settled: one leader, every other running replica follows it in the
/// same epoch, and every running replica knows a high watermark equal to the leader's log end.
pub fn settled(c: &Cluster) -> bool {
    let Some(l) = c.leader() else {
        return false;
    };
    let leader = c.replica(l);
    let (epoch, end) = (leader.epoch(), leader.log_end().offset);
    all_ids(c, l)
        .into_iter()
        .filter(|&id| c.is_up(id))
        .all(|id| {
            let r = c.replica(id);
            let role_ok =
                id == l || (r.role() == Role::Follower && r.leader() == Some(ReplicaId(l)));
            role_ok && r.epoch() == epoch && r.high_watermark() == end
        })
}

/// Runs until the cluster has settled (see [`settled`]) and returns the leader.
pub fn settle(c: &mut Cluster) -> u32 {
    let bound = c.liveness_bound();
    assert!(
        c.run_until_cond(bound, settled),
        "the cluster did not settle within {bound:?}:\n{}",
        c.trace()
    );
    c.leader().expect("a settled cluster has a leader")
}

/// Proposes `payload` on `leader` and runs until it is committed; returns its identity.
pub fn commit(c: &mut Cluster, leader: u32, payload: &[u8]) -> OffsetAndEpoch {
    let id = c
        .propose(leader, payload)
        .expect("the leader accepts proposals");
    let ok = c.run_until_cond(ms(1000), |c| is_committed(c, id, payload));
    assert!(ok, "{id} did not commit:\n{}", c.trace());
    id
}

/// Whether the record `id` with `payload` is in the committed prefix.
pub fn is_committed(c: &Cluster, id: OffsetAndEpoch, payload: &[u8]) -> bool {
    c.committed()
        .get(id.offset.0 as usize)
        .is_some_and(|r| r.epoch == id.epoch && r.payload.as_ref() == payload)
}

/// The payloads of a replica's log, control records shown as `LC@epoch` and `V@epoch`.
pub fn log_text(c: &Cluster, id: u32) -> String {
    c.log(id)
        .iter()
        .map(|r| match r.kind {
            raft_core::RecordKind::LeaderChange => format!("LC@{}", r.epoch),
            raft_core::RecordKind::Voters => format!("V@{}", r.epoch),
            raft_core::RecordKind::Data => {
                format!("{}@{}", String::from_utf8_lossy(&r.payload), r.epoch)
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The trace lines about the given replicas only.
pub fn trace_of(c: &Cluster, ids: &[u32]) -> String {
    let names: Vec<String> = ids.iter().map(|id| ReplicaId(*id).to_string()).collect();
    c.trace()
        .lines()
        .filter(|line| {
            line.split_whitespace()
                .nth(1)
                .is_some_and(|who| names.iter().any(|n| n == who))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The leader's view of a voter's acknowledged fetch offset.
pub fn fetch_offset_seen_by(c: &Cluster, leader: u32, voter: u32) -> Option<Offset> {
    c.replica(leader)
        .status(Instant(0))
        .voters
        .iter()
        .find(|p| p.replica == ReplicaId(voter))
        .and_then(|p| p.end_offset)
}

/// The highest released epoch among the running replicas of `ids`.
pub fn max_epoch(c: &Cluster, ids: &[u32]) -> Epoch {
    ids.iter()
        .copied()
        .filter(|&id| c.is_up(id))
        .map(|id| c.replica(id).epoch())
        .max()
        .unwrap_or_default()
}

/// Every scenario ends with this: the checkers outside the replicas saw nothing wrong.
#[track_caller]
pub fn assert_no_violations(c: &Cluster) {
    assert!(
        c.violations().is_empty(),
        "violations: {:#?}\ntrace:\n{}",
        c.violations(),
        c.trace()
    );
}

/// A voter left one epoch ahead of a healthy leader, as [`strand_voter_one_epoch_ahead`]
/// leaves it.
#[derive(Clone, Copy, Debug)]
pub struct Stranded {
    /// The leader, still leading `epoch`.
    pub leader: u32,
    /// The other voter, still following the leader in `epoch`.
    pub follower: u32,
    /// The voter at `epoch + 1`, cut off from both.
    pub stranded: u32,
    /// The leader's epoch.
    pub epoch: Epoch,
}

/// Settles a three-voter cluster, then strands one follower as a Candidate one epoch ahead of
/// the healthy leader (protocol reference 6.1 #12): the follower is cut off from the leader
/// until its fetch timer expires; the other follower has just restarted and has not fetched
/// in its new life, so it is not sticky (D3) and grants the pre-vote; the moment the stranded
/// voter raises its epoch it is cut off from that follower too, so its standard vote never
/// arrives; the other follower's held fetches then reach the leader, and the leader keeps its
/// majority. Only the stranded voter's links to the other voters are cut: observers still
/// reach it.
pub fn strand_voter_one_epoch_ahead(c: &mut Cluster) -> Stranded {
    let leader = settle(c);
    let epoch = c.replica(leader).epoch();
    let voters = c.replica(leader).config().voters.len() as u32;
    assert_eq!(voters, 3, "the script is written for three voters");
    let others: Vec<u32> = (1..=voters).filter(|&id| id != leader).collect();
    let (follower, stranded) = (others[0], others[1]);
    c.cut(leader, stranded);
    c.run_for(ms(100));
    // The follower restarts, and its fetches wait in the network meanwhile.
    c.hold(follower, leader);
    c.crash(follower);
    c.restart(follower);
    let ahead = c.run_until_cond(ms(1000), |c| {
        c.replica(stranded).election_state().epoch > epoch
    });
    assert!(ahead, "the cut-off voter won its pre-vote:\n{}", c.trace());
    c.cut(stranded, follower);
    c.release(follower, leader);
    c.run_for(ms(100));
    assert_eq!(c.leader(), Some(leader), "{}", c.trace());
    assert_eq!(c.replica(leader).epoch(), epoch);
    assert_eq!(c.replica(follower).role(), Role::Follower);
    assert_eq!(c.replica(follower).epoch(), epoch);
    assert_eq!(c.replica(stranded).epoch(), epoch.next());
    Stranded {
        leader,
        follower,
        stranded,
        epoch,
    }
}
