//! Start-up on empty storage and a voter set that changes mid-campaign, one replica driven by
//! hand (W1, W9, W10 of the wave-2 review). Each test runs its scenario twice: with the rule,
//! and with its planted switch, which must bring the bad outcome back.
//!
//! - W1: a keyed voter whose disk was lost, restarted with a configuration that lists it (what
//!   `--join` wrote from the voters it learned), must not count its own vote.
//! - W9: a static voter whose disk was lost, restarted with its unchanged configuration, is an
//!   observer: it follows a leader, and when that leader falls silent it does not campaign as
//!   the voter whose data it lost.
//! - W10: a candidate whose voter set shrinks mid-campaign (a snapshot installed) must not win
//!   with grants from replicas that left the set.

use bytes::Bytes;
use raft_core::driver::bootstrap::FORMAT_SNAPSHOT;
use raft_core::io::{EpochStart, LogState};
use raft_core::message::{FetchResponse, FetchSnapshotResponse, ReadBarrier, Request, Response};
use raft_core::planted::Planted;
use raft_core::protocol::{Input, Outputs, Replica, SnapshotOp, VoterHistory};
use raft_core::voters::VoterSet;
use raft_core::{Config, DirectoryId, Epoch, Instant, Offset, OffsetAndEpoch, ReplicaId, Role};

use crate::by_hand::{begin_quorum_epoch, request_to, step, tick_until, vote_answer};

/// Replica `id` of the configured voters `voters`, started as the driver starts it on empty
/// storage: its voter set is [`raft_core::ValidatedConfig::start_voters`] (written as the
/// format snapshot), with pre-vote off.
fn on_empty_storage(id: u32, voters: &[u32], directory: u128, planted: Option<Planted>) -> Replica {
    let mut cfg = Config::new(ReplicaId(id), voters.iter().copied().map(ReplicaId));
    cfg.directory = Some(DirectoryId(directory));
    cfg.pre_vote = false;
    cfg.test_planted = planted;
    let cfg = cfg.validate().unwrap();
    let set = cfg.start_voters(true).expect("another voter to learn from");
    Replica::new(
        cfg,
        None,
        &LogState::default(),
        Some(FORMAT_SNAPSHOT),
        VoterHistory::new(set),
        7,
        Instant(0),
    )
}

/// Whether any output asks for a vote.
fn asks_for_votes(outs: &[Outputs]) -> bool {
    outs.iter().any(|o| {
        (1..=5).any(|peer| request_to(o, peer, |q| matches!(q, Request::Vote(_))).is_some())
    })
}

/// W1: r3's key was `3@D3` in a keyed set {1, 2, 3}; its disk is lost and the replacement
/// (directory 0x3B) starts with voters [1, 2, 3], as a learned voter list made by `--join`.
/// Returns it after ten seconds of ticks, whether it asked for votes, and what r2's grant (if
/// it asked) made of it.
fn w1(planted: Option<Planted>) -> (Role, bool) {
    let mut r = on_empty_storage(3, &[1, 2, 3], 0x3B, planted);
    let mut now = 0;
    let outs = tick_until(&mut r, &mut now, |r| r.role() == Role::Candidate);
    let asked = asks_for_votes(&outs);
    if let Some(ask) = outs
        .iter()
        .find_map(|o| request_to(o, 2, |q| matches!(q, Request::Vote(_))))
    {
        let grant = Input::Response {
            from: ReplicaId(2),
            id: ask,
            response: vote_answer(r.epoch().0, true),
        };
        step(&mut r, now, grant);
    }
    (r.role(), asked)
}

#[test]
fn a_wiped_keyed_voter_restarted_with_a_config_listing_it_never_counts_its_own_vote() {
    // Goal (W1): empty storage is never trusted as a voter, whatever the configuration lists,
    // so the emptied machine cannot make a majority of {1, 2, 3} from its own vote and one
    // lagging voter's. Method: start r3 as the driver does on empty storage with voters
    // [1, 2, 3]; tick for a minute; answer a vote request to r2 with a grant if one was sent.
    let (role, asked) = w1(None);
    assert!(!asked, "an observer on empty storage asked for votes");
    assert_ne!(role, Role::Leader);
    // With the old rule the configured set is trusted: r3 campaigns, counts itself, and one
    // grant makes it leader of an empty log.
    let (role, asked) = w1(Some(Planted::BootstrapOnEmptyDisk));
    assert!(asked, "with the rule off the emptied replica campaigns");
    assert_eq!(role, Role::Leader, "its own vote and r2's made a majority");
}

/// W9: static voter r3 of [1, 2, 3] lost its disk and restarts with its unchanged file. r1
/// tells it it leads epoch 5 and answers one fetch; then r1 falls silent for a minute.
/// Returns whether r3 followed r1, and whether it then campaigned.
fn w9(planted: Option<Planted>) -> (bool, bool) {
    let mut r = on_empty_storage(3, &[1, 2, 3], 0x3C, planted);
    let now = 1_000;
    let out = step(&mut r, now, begin_quorum_epoch(1, 5, 1, 3));
    let followed = r.role() == Role::Follower && r.leader() == Some(ReplicaId(1));
    // An observer finds the leader by fetching from its contacts: answer its fetch to r1.
    let fetch = request_to(&out, 1, |q| matches!(q, Request::Fetch(_))).or_else(|| {
        let out = step(&mut r, now + 1, Input::Tick);
        request_to(&out, 1, |q| matches!(q, Request::Fetch(_)))
    });
    if let Some(id) = fetch {
        let answer = Response::Fetch(FetchResponse {
            error: None,
            epoch: Epoch(5),
            leader: Some(ReplicaId(1)),
            high_watermark: Some(Offset(0)),
            diverging: None,
            records: Vec::new(),
            read_barrier: ReadBarrier::default(),
            snapshot: None,
        });
        step(
            &mut r,
            now,
            Input::Response {
                from: ReplicaId(1),
                id,
                response: answer,
            },
        );
    }
    let followed = followed || (r.role() == Role::Follower && r.leader() == Some(ReplicaId(1)));
    let mut t = now;
    let outs = tick_until(&mut r, &mut t, |r| {
        matches!(r.role(), Role::Prospective | Role::Candidate)
    });
    (followed, asks_for_votes(&outs))
}

#[test]
fn a_wiped_static_voter_restarted_with_its_unchanged_config_follows_but_never_campaigns() {
    // Goal (W9): a static voter whose disk was emptied is an observer of the other configured
    // voters: it follows the leader it hears of, and when that leader falls silent it never
    // campaigns as the voter whose votes and data it lost. Method: r3 of [1, 2, 3] on empty
    // storage; r1 announces epoch 5 and answers one fetch; a minute of silence follows.
    let (followed, campaigned) = w9(None);
    assert!(followed, "the observer did not follow the announced leader");
    assert!(!campaigned, "the emptied static voter campaigned");
    // With the old rule it is the static voter 3 again: after the leader's silence it stands
    // for election with an empty log, its own vote counted as its old self's.
    let (_, campaigned) = w9(Some(Planted::BootstrapOnEmptyDisk));
    assert!(campaigned, "with the rule off the emptied voter campaigns");
}

/// The snapshot r1 names to r5: the offsets below 10, the last of them of epoch 1.
const SNAP: OffsetAndEpoch = OffsetAndEpoch {
    offset: Offset(10),
    epoch: Epoch(1),
};

/// W10: r5's log holds (at offset 1, uncommitted as far as it knows) the record removing it
/// from {1, 2, 3, 4, 5}, so it campaigns under the thesis rule without counting itself
/// (majority of {1, 2, 3, 4}: three). It downloaded a snapshot as r1's follower; the download
/// is verified only after it became a candidate, and names {1, 2, 3}. Grants from r3 and r4
/// came before the install; r1's refusal after it. Returns r5's role.
fn w10(planted: Option<Planted>) -> Role {
    let mut cfg = Config::new(ReplicaId(5), (1..=5).map(ReplicaId));
    cfg.pre_vote = false;
    cfg.test_planted = planted;
    let cfg = cfg.validate().unwrap();
    let mut history = VoterHistory::new(VoterSet::from_ids((1..=5).map(ReplicaId)));
    history.push(Offset(1), VoterSet::from_ids((1..=4).map(ReplicaId)));
    let log = LogState {
        start: Offset(0),
        end: OffsetAndEpoch::new(Offset(2), Epoch(1)),
        epochs: vec![EpochStart {
            epoch: Epoch(1),
            start: Offset(0),
        }],
        start_epoch: Epoch(0),
    };
    let mut r = Replica::new(cfg, None, &log, None, history, 7, Instant(0));
    let mut now = 1_000;
    // r1 leads epoch 1; r5 follows and is told to download SNAP.
    let out = step(&mut r, now, begin_quorum_epoch(1, 1, 1, 5));
    assert_eq!(r.role(), Role::Follower);
    let fetch = request_to(&out, 1, |q| matches!(q, Request::Fetch(_))).expect("a fetch to r1");
    let told = Response::Fetch(FetchResponse {
        error: None,
        epoch: Epoch(1),
        leader: Some(ReplicaId(1)),
        high_watermark: Some(Offset(1)),
        diverging: None,
        records: Vec::new(),
        read_barrier: ReadBarrier::default(),
        snapshot: Some(SNAP),
    });
    let from = ReplicaId(1);
    let out = step(
        &mut r,
        now,
        Input::Response {
            from,
            id: fetch,
            response: told,
        },
    );
    let chunk = request_to(&out, 1, |q| matches!(q, Request::FetchSnapshot(_)))
        .expect("a FetchSnapshot request to r1");
    let whole = Response::FetchSnapshot(FetchSnapshotResponse {
        error: None,
        epoch: Epoch(1),
        leader: Some(ReplicaId(1)),
        snapshot: SNAP,
        size: 2,
        checksum: 9,
        position: 0,
        data: Bytes::from_static(&[1, 2]),
    });
    let out = step(
        &mut r,
        now,
        Input::Response {
            from,
            id: chunk,
            response: whole,
        },
    );
    assert!(
        out.snapshot
            .iter()
            .any(|op| matches!(op, SnapshotOp::Finish { id, .. } if *id == SNAP)),
        "the download is complete, its verification pending: {:?}",
        out.snapshot
    );
    // r1 falls silent: r5 campaigns, asking {1, 2, 3, 4}.
    let outs = tick_until(&mut r, &mut now, |r| r.role() == Role::Candidate);
    assert_eq!(
        r.role(),
        Role::Candidate,
        "r5 campaigns under the thesis rule"
    );
    let epoch = r.epoch().0;
    let ask = |peer: u32| {
        outs.iter()
            .find_map(|o| request_to(o, peer, |q| matches!(q, Request::Vote(_))))
            .unwrap_or_else(|| panic!("a vote request to r{peer}"))
    };
    let (to_1, to_3, to_4) = (ask(1), ask(3), ask(4));
    for (peer, id) in [(3, to_3), (4, to_4)] {
        let grant = Input::Response {
            from: ReplicaId(peer),
            id,
            response: vote_answer(epoch, true),
        };
        step(&mut r, now, grant);
    }
    assert_eq!(r.role(), Role::Candidate, "two grants of four voters");
    // The verification completes: the snapshot is installed, and with it the set {1, 2, 3}.
    let shrunk = VoterSet::from_ids((1..=3).map(ReplicaId));
    let installed = Input::SnapshotDownloaded {
        id: SNAP,
        verified: true,
        voters: shrunk.clone(),
    };
    step(&mut r, now, installed);
    assert_eq!(r.voters(), &shrunk, "the snapshot's set is in force");
    let refused = Input::Response {
        from: ReplicaId(1),
        id: to_1,
        response: vote_answer(epoch, false),
    };
    step(&mut r, now, refused);
    r.role()
}

#[test]
fn a_candidate_whose_set_shrinks_mid_campaign_does_not_win_with_grants_from_outside_it() {
    // Goal (W10): after a snapshot install changes the set in force mid-campaign, only grants
    // from that set count: r3's grant alone is not a majority of {1, 2, 3}, so r5 does not
    // lead (r1 and r2 may elect another leader of the epoch).
    assert_ne!(
        w10(None),
        Role::Leader,
        "won with grants from outside the set"
    );
    // With the rule off, the grants of r3 and r4 (which left the set) make "two of three".
    assert_eq!(
        w10(Some(Planted::CountGrantsOutsideSet)),
        Role::Leader,
        "with the rule off the stale grants elect it"
    );
}
