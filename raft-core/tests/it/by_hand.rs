//! One replica's core driven by hand, one input at a time, for rules whose inputs a working
//! cluster rarely or never produces: answers that do not fit the request they claim to answer,
//! answers that name a leader contradicting what the replica knows, an answer from a later
//! epoch naming the replica itself, votes and pre-votes at the edges of their rules, and the
//! lease's hold on votes after a restart.

use raft_core::io::LogState;
use std::time::Duration;

use bytes::Bytes;
use raft_core::message::{
    BeginQuorumEpochRequest, EpochResponse, FetchRequest, FetchResponse, ReadBarrier, Request,
    RequestId, Response, VoteRequest, VoteResponse,
};
use raft_core::protocol::{Event, Input, LogOp, Outgoing, Outputs, Replica, VoterHistory};
use raft_core::{
    Config, Epoch, Instant, Offset, OffsetAndEpoch, Record, RecordKind, ReplicaId, Role,
};

/// The core of replica `id` among voters 1 to `n`, with `tune` applied to its configuration,
/// started at time 0.
pub(crate) fn core(id: u32, n: u32, tune: impl FnOnce(&mut Config)) -> Replica {
    let mut cfg = Config::new(ReplicaId(id), (1..=n).map(ReplicaId));
    tune(&mut cfg);
    let cfg = cfg.validate().unwrap();
    let voters = VoterHistory::new(cfg.bootstrap_voters());
    Replica::new(cfg, None, &LogState::default(), None, voters, 7, Instant(0))
}

/// `from`'s BeginQuorumEpoch naming `leader` the leader of `epoch`, sent to `voter`.
pub(crate) fn begin_quorum_epoch(from: u32, epoch: u32, leader: u32, voter: u32) -> Input {
    Input::Request {
        from: ReplicaId(from),
        id: RequestId(500 + u64::from(from)),
        request: Request::BeginQuorumEpoch(BeginQuorumEpochRequest {
            epoch: Epoch(epoch),
            leader: ReplicaId(leader),
            voter: ReplicaId(voter),
            voter_directory: None,
        }),
    }
}

/// Makes the last log append in `out` durable (its `LogPersisted` stepped at `now`) and returns
/// what that step output; `what` names the append that must be there.
#[track_caller]
pub(crate) fn sync_last_append(r: &mut Replica, now: u64, out: &Outputs, what: &str) -> Outputs {
    let seq = out
        .log
        .iter()
        .rev()
        .find_map(|op| match op {
            LogOp::Append { seq, .. } => Some(*seq),
            _ => None,
        })
        .unwrap_or_else(|| panic!("{what} is appended"));
    step(r, now, Input::LogPersisted(seq))
}

/// Records of epoch 1 at offsets `from..to`: the leader-change record (empty) at 0, data
/// after it.
pub(crate) fn epoch_1_records(from: u64, to: u64) -> Vec<Record> {
    (from..to)
        .map(|o| Record {
            offset: Offset(o),
            epoch: Epoch(1),
            kind: if o == 0 {
                RecordKind::LeaderChange
            } else {
                RecordKind::Data
            },
            payload: if o == 0 {
                Bytes::new()
            } else {
                Bytes::from(vec![o as u8])
            },
        })
        .collect()
}

/// Steps `input` at `now` and makes any election state it persists durable at once.
pub(crate) fn step(r: &mut Replica, now: u64, input: Input) -> Outputs {
    let mut out = Outputs::default();
    r.step(Instant(now), input, &mut out);
    if let Some((seq, _)) = out.persist {
        r.step(Instant(now), Input::ElectionPersisted(seq), &mut out);
    }
    out
}

/// The id of the first request to `peer` in `out` that `pick` accepts.
pub(crate) fn request_to(
    out: &Outputs,
    peer: u32,
    pick: impl Fn(&Request) -> bool,
) -> Option<RequestId> {
    out.messages.iter().find_map(|m| match m {
        Outgoing::Request { to, id, request } if *to == ReplicaId(peer) && pick(request) => {
            Some(*id)
        }
        _ => None,
    })
}

/// A successful fetch answer from `leader`, leading `epoch`, exposing `high_watermark`.
pub(crate) fn fetch_ok(epoch: u32, leader: u32, high_watermark: Option<Offset>) -> FetchResponse {
    FetchResponse {
        error: None,
        epoch: Epoch(epoch),
        leader: Some(ReplicaId(leader)),
        high_watermark,
        diverging: None,
        records: Vec::new(),
        read_barrier: ReadBarrier::default(),
        snapshot: None,
    }
}

fn fetch_answer(epoch: u32, leader: u32) -> Response {
    Response::Fetch(fetch_ok(epoch, leader, None))
}

/// `response` from `from` to request `id`.
pub(crate) fn answer_from((from, id): (ReplicaId, RequestId), response: Response) -> Input {
    Input::Response { from, id, response }
}

/// The first request in `out` that `pick` accepts: its receiver and id.
fn request_in(out: &Outputs, pick: fn(&Request) -> bool) -> Option<(ReplicaId, RequestId)> {
    out.messages.iter().find_map(|m| match m {
        Outgoing::Request { to, id, request } if pick(request) => Some((*to, *id)),
        _ => None,
    })
}

/// The request `pick` accepts from `out` (the outputs of the last step), else from ticks every
/// 10 ms after it, for at most a minute of virtual time.
pub(crate) fn next_request(
    r: &mut Replica,
    now: &mut u64,
    mut out: Outputs,
    what: &str,
    pick: fn(&Request) -> bool,
) -> (ReplicaId, RequestId) {
    let deadline = *now + 60_000_000_000;
    loop {
        if let Some(found) = request_in(&out, pick) {
            return found;
        }
        assert!(*now < deadline, "no {what} within a minute");
        *now += 10_000_000;
        out = step(r, *now, Input::Tick);
    }
}

#[test]
fn a_fetch_answer_naming_another_leader_of_the_epoch_is_reported_and_dropped() {
    // Goal: a follower of r1 in epoch 1 that is answered "r2 leads epoch 1" keeps following
    // r1, and reports the contradiction (an event and a counter) rather than trusting it; an
    // answer naming the follower itself as the leader is reported too.
    // Method: r1's BeginQuorumEpoch makes r3 its follower; r3 fetches from r1; the answer to
    // that fetch names r2; the answer to the next fetch names r3.
    let mut r = core(3, 3, |_| {});
    let request = begin_quorum_epoch(1, 1, 1, 3);
    let mut now = 1_000;
    let mut out = step(&mut r, now, request);
    assert_eq!((r.role(), r.leader()), (Role::Follower, Some(ReplicaId(1))));
    let is_fetch = |q: &Request| matches!(q, Request::Fetch(_));
    for (n, claimed) in [2, 3].into_iter().enumerate() {
        let mut fetch = request_to(&out, 1, is_fetch);
        while fetch.is_none() && now < 1_000_000_000 {
            now += 1_000_000;
            out = step(&mut r, now, Input::Tick);
            fetch = request_to(&out, 1, is_fetch);
        }
        let answer = Input::Response {
            from: ReplicaId(1),
            id: fetch.expect("a fetch to r1"),
            response: fetch_answer(1, claimed),
        };
        out = step(&mut r, now, answer);
        assert_eq!(
            r.stats().inconsistent_leaders,
            n as u64 + 1,
            "claim of r{claimed}"
        );
        let reported = out.events.iter().any(|e| {
            matches!(e, Event::InconsistentLeader { from, epoch, claimed: c }
                if *from == ReplicaId(1) && *epoch == Epoch(1) && *c == Some(ReplicaId(claimed)))
        });
        assert!(reported, "claim of r{claimed} reported: {:?}", out.events);
        assert_eq!((r.role(), r.leader()), (Role::Follower, Some(ReplicaId(1))));
        // The follower answered the claim of r2 as unusable: it fetches again after the
        // backoff, from r1.
        now += 50_000_000;
        out = step(&mut r, now, Input::Tick);
    }
}

#[test]
fn a_probe_answered_by_a_voter_that_names_another_leader_is_not_taken_as_the_leaders() {
    // Goal: an observer probing a voter that is not the leader follows the leader the answer
    // names, counts that answer as stale (it is not the leader's), and fetches from the leader
    // at once, rather than backing off as if its leader had refused it.
    // Method: observer r4's first probe learns epoch 1 without a leader; the next probe's
    // answer, from the voter probed, refuses with NotLeader and names another voter as the
    // leader of epoch 1.
    let mut r = core(4, 3, |_| {});
    let mut now = 1_000;
    let is_fetch = |q: &Request| matches!(q, Request::Fetch(_));
    let refusal = |leader: Option<u32>| {
        let mut f = fetch_ok(1, 0, None);
        f.error = Some(raft_core::message::ErrorCode::NotLeader);
        f.leader = leader.map(ReplicaId);
        Response::Fetch(f)
    };
    let probe = next_request(&mut r, &mut now, Outputs::default(), "a probe", is_fetch);
    let out = step(&mut r, now, answer_from(probe, refusal(None)));
    assert_eq!(
        (r.role(), r.epoch(), r.leader()),
        (Role::Unattached, Epoch(1), None)
    );
    let probe = next_request(&mut r, &mut now, out, "a second probe", is_fetch);
    let leader = if probe.0 == ReplicaId(1) { 2 } else { 1 };
    let out = step(&mut r, now, answer_from(probe, refusal(Some(leader))));
    assert_eq!(
        (r.role(), r.leader()),
        (Role::Follower, Some(ReplicaId(leader)))
    );
    assert_eq!(r.stats().stale_responses, 1);
    assert!(
        request_to(&out, leader, |q| matches!(q, Request::Fetch(_))).is_some(),
        "fetches from r{leader} at once: {out:?}"
    );
}

#[test]
fn an_answer_from_a_later_epoch_naming_this_replica_as_leader_leaves_it_unattached() {
    // Goal: a replica never follows itself. An answer from a later epoch that names this
    // replica as that epoch's leader (this replica has no memory of leading it) moves it to
    // the epoch without a leader.
    // Method: r3 times out and asks r1 for a pre-vote; r1's answer is from epoch 5 and names
    // r3.
    let mut r = core(3, 3, |_| {});
    let mut now = 0;
    let mut out = Outputs::default();
    while r.role() != Role::Prospective && now < 60_000_000_000 {
        now += 10_000_000;
        out = step(&mut r, now, Input::Tick);
    }
    let id = request_to(&out, 1, |q| matches!(q, Request::Vote(v) if v.pre_vote))
        .expect("a pre-vote request to r1");
    let answer = Response::Vote(VoteResponse {
        error: None,
        epoch: Epoch(5),
        leader: Some(ReplicaId(3)),
        granted: false,
    });
    let input = Input::Response {
        from: ReplicaId(1),
        id,
        response: answer,
    };
    step(&mut r, now, input);
    assert_eq!(
        (r.role(), r.epoch(), r.leader()),
        (Role::Unattached, Epoch(5), None)
    );
}

#[test]
fn with_leases_a_restarted_voter_grants_nothing_for_one_fetch_timeout() {
    // Goal: decisions D6/D3: a voter that (re)started forgot when it last heard from a leader,
    // so with lease reads on it refuses every (pre-)vote until one fetch timeout has passed
    // since its start, and from then on judges requests as usual.
    // Method: the same pre-vote request to a fresh core just before and exactly at one fetch
    // timeout (2 s) after its start.
    let ask = Request::Vote(VoteRequest {
        epoch: Epoch(1),
        candidate: ReplicaId(2),
        voter: ReplicaId(3),
        voter_directory: None,
        candidate_directory: None,
        last: OffsetAndEpoch::default(),
        pre_vote: true,
        leader_invited: false,
    });
    let granted_at = |now: u64| {
        let mut r = core(3, 3, |c| c.lease_reads = true);
        let input = Input::Request {
            from: ReplicaId(2),
            id: RequestId(1),
            request: ask.clone(),
        };
        let out = step(&mut r, now, input);
        out.messages.iter().find_map(|m| match m {
            Outgoing::Response {
                response: Response::Vote(v),
                ..
            } => Some(v.granted),
            _ => None,
        })
    };
    let fetch_timeout = 2_000_000_000;
    assert_eq!(granted_at(1_000_000), Some(false), "just after the start");
    assert_eq!(granted_at(fetch_timeout - 1), Some(false), "just before");
    assert_eq!(
        granted_at(fetch_timeout),
        Some(true),
        "one fetch timeout after"
    );
}

/// A (pre-)vote request from `candidate` to r3 for `epoch`.
fn vote_request(candidate: u32, epoch: u32, pre_vote: bool) -> Input {
    Input::Request {
        from: ReplicaId(candidate),
        id: RequestId(u64::from(candidate) * 100 + u64::from(epoch)),
        request: Request::Vote(VoteRequest {
            epoch: Epoch(epoch),
            candidate: ReplicaId(candidate),
            voter: ReplicaId(3),
            voter_directory: None,
            candidate_directory: None,
            last: OffsetAndEpoch::default(),
            pre_vote,
            leader_invited: false,
        }),
    }
}

/// Whether `out` answers a vote request with a grant (`None` without an answer).
fn granted(out: &Outputs) -> Option<bool> {
    out.messages.iter().find_map(|m| match m {
        Outgoing::Response {
            response: Response::Vote(v),
            ..
        } => Some(v.granted),
        _ => None,
    })
}

#[test]
fn a_voter_grants_one_candidate_per_epoch_and_grants_it_again() {
    // Goal: a vote is granted to at most one candidate per epoch; the same candidate asking
    // again (its request or the answer was lost) is granted again, the other is refused.
    // Method: r2, then r1, then r2 again ask r3 for its vote in epoch 1.
    let mut r = core(3, 3, |_| {});
    assert_eq!(
        granted(&step(&mut r, 1_000, vote_request(2, 1, false))),
        Some(true)
    );
    assert_eq!(
        granted(&step(&mut r, 2_000, vote_request(1, 1, false))),
        Some(false)
    );
    assert_eq!(
        granted(&step(&mut r, 3_000, vote_request(2, 1, false))),
        Some(true)
    );
}

#[test]
fn a_pre_vote_is_granted_only_for_a_later_epoch() {
    // Goal: a pre-vote asks whether the voter would vote in a later epoch than its own; one
    // for the voter's own epoch is refused (that epoch's election is under way here).
    // Method: r3 votes for r2 in epoch 1; r1 then asks for pre-votes in epochs 1 and 2.
    let mut r = core(3, 3, |_| {});
    assert_eq!(
        granted(&step(&mut r, 1_000, vote_request(2, 1, false))),
        Some(true)
    );
    assert_eq!(
        granted(&step(&mut r, 2_000, vote_request(1, 1, true))),
        Some(false)
    );
    assert_eq!(
        granted(&step(&mut r, 3_000, vote_request(1, 2, true))),
        Some(true)
    );
}

#[test]
fn a_follower_helps_depose_its_leader_only_after_a_fetch_timeout_of_silence() {
    // Goal: decisions D3: a follower refuses pre-votes while it heard from its leader within
    // the fetch timeout, and grants them from the moment that timeout has passed.
    // Method: r3 follows r1 and gets an answer to a fetch at time t; r2 asks for a pre-vote
    // just before t + fetch timeout (refused) and exactly at it (granted), each on its own copy
    // of the follower (a refused pre-vote changes nothing).
    let mut r = core(3, 3, |_| {});
    let begin = begin_quorum_epoch(1, 1, 1, 3);
    let t = 1_000;
    let out = step(&mut r, t, begin);
    let fetch = request_to(&out, 1, |q| matches!(q, Request::Fetch(_))).expect("a fetch to r1");
    let answer = Input::Response {
        from: ReplicaId(1),
        id: fetch,
        response: fetch_answer(1, 1),
    };
    step(&mut r, t, answer);
    assert_eq!(r.role(), Role::Follower);
    let fetch_timeout = 2_000_000_000;
    let mut before = r.clone();
    let out = step(&mut before, t + fetch_timeout - 1, vote_request(2, 2, true));
    assert_eq!(
        granted(&out),
        Some(false),
        "the leader was heard from within the timeout"
    );
    let out = step(&mut r, t + fetch_timeout, vote_request(2, 2, true));
    assert_eq!(
        granted(&out),
        Some(true),
        "a whole fetch timeout of silence"
    );
}

#[test]
fn a_replica_shutting_down_never_campaigns() {
    // Goal: once told to resign (it is shutting down), a replica that is not the leader never
    // starts an election, however long it waits: it would only disturb the others and then
    // vanish. The same fresh replica without the resign does campaign.
    // Method: two fresh cores of r3, one told to resign at once; both tick for a minute.
    for resigning in [false, true] {
        let mut r = core(3, 3, |_| {});
        if resigning {
            step(&mut r, 0, Input::Resign);
        }
        let mut now = 0;
        let mut campaigned = false;
        while now < 60_000_000_000 && !campaigned {
            now += 10_000_000;
            step(&mut r, now, Input::Tick);
            campaigned = r.role() == Role::Prospective || r.stats().elections > 0;
        }
        assert_eq!(campaigned, !resigning, "resigning: {resigning}");
    }
}

/// Ticks `r` every 10 ms from `*now` until `done`, or a minute; returns every output.
pub(crate) fn tick_until(
    r: &mut Replica,
    now: &mut u64,
    done: impl Fn(&Replica) -> bool,
) -> Vec<Outputs> {
    let mut outs = Vec::new();
    let until = *now + 60_000_000_000;
    while !done(r) && *now < until {
        *now += 10_000_000;
        outs.push(step(r, *now, Input::Tick));
    }
    outs
}

pub(crate) fn vote_answer(epoch: u32, granted: bool) -> Response {
    Response::Vote(VoteResponse {
        error: None,
        epoch: Epoch(epoch),
        leader: None,
        granted,
    })
}

#[test]
fn a_grant_from_an_earlier_candidacy_does_not_count_in_the_next() {
    // Goal: a vote counts only in the epoch it was granted for. A candidate whose first
    // candidacy timed out and who campaigns again in the next epoch must not count a late
    // grant from the first, nor a grant stamped with the earlier epoch under the current
    // request's id (no correct voter sends one); a grant for the current epoch does count.
    // Method: pre-vote off; r3 campaigns in epoch 1 and asks r1; it times out and campaigns in
    // epoch 2; r1's grant for epoch 1 arrives under the first request's id, then under the
    // second's; last r2's grant for epoch 2.
    let mut r = core(3, 3, |c| c.pre_vote = false);
    let mut now = 0;
    let outs = tick_until(&mut r, &mut now, |r| r.epoch() == Epoch(1));
    let is_vote = |q: &Request| matches!(q, Request::Vote(_));
    let first = outs
        .iter()
        .find_map(|o| request_to(o, 1, is_vote))
        .expect("a vote request to r1 in epoch 1");
    let outs = tick_until(&mut r, &mut now, |r| r.epoch() == Epoch(2));
    let second = outs
        .iter()
        .find_map(|o| request_to(o, 1, is_vote))
        .expect("a vote request to r1 in epoch 2");
    let late = Input::Response {
        from: ReplicaId(1),
        id: first,
        response: vote_answer(1, true),
    };
    step(&mut r, now, late);
    assert_eq!(
        (r.role(), r.epoch()),
        (Role::Candidate, Epoch(2)),
        "the late grant counted"
    );
    let stamped_earlier = Input::Response {
        from: ReplicaId(1),
        id: second,
        response: vote_answer(1, true),
    };
    step(&mut r, now, stamped_earlier);
    assert_eq!(
        (r.role(), r.epoch()),
        (Role::Candidate, Epoch(2)),
        "an epoch-1 grant counted"
    );
    let to_r2 = outs
        .iter()
        .find_map(|o| request_to(o, 2, is_vote))
        .expect("a vote request to r2 in epoch 2");
    let current = Input::Response {
        from: ReplicaId(2),
        id: to_r2,
        response: vote_answer(2, true),
    };
    step(&mut r, now, current);
    assert_eq!((r.role(), r.epoch()), (Role::Leader, Epoch(2)));
}

#[test]
fn a_pre_vote_round_is_lost_only_when_a_majority_can_no_longer_be_reached() {
    // Goal: with five voters, a prospective replica refused by two others can still win with
    // the other two (itself plus two of five); it gives up only when a majority is out of
    // reach.
    // Method: r5 asks r1..r4 for pre-votes; r1 and r2 refuse, r3 and r4 grant.
    let mut r = core(5, 5, |_| {});
    let mut now = 0;
    let outs = tick_until(&mut r, &mut now, |r| r.role() == Role::Prospective);
    let ask = |peer: u32| {
        outs.iter()
            .find_map(|o| request_to(o, peer, |q| matches!(q, Request::Vote(v) if v.pre_vote)))
            .expect("a pre-vote request")
    };
    for (peer, grant) in [(1, false), (2, false), (3, true)] {
        let answer = Input::Response {
            from: ReplicaId(peer),
            id: ask(peer),
            response: vote_answer(0, grant),
        };
        let out = step(&mut r, now, answer);
        assert!(out.persist.is_none(), "decided after r{peer}'s answer");
        assert_eq!(r.role(), Role::Prospective, "after r{peer}'s answer");
    }
    let answer = Input::Response {
        from: ReplicaId(4),
        id: ask(4),
        response: vote_answer(0, true),
    };
    step(&mut r, now, answer);
    assert_eq!((r.role(), r.epoch()), (Role::Candidate, Epoch(1)));
}

#[test]
fn a_response_counts_only_as_the_answer_of_the_replica_asked() {
    // Goal: a response is matched to the request it answers by id, sender and kind; anything
    // else is dropped and counted as stale. Else a grant misrouted from another replica, or an
    // answer to another request reusing its id, would count as the vote that was asked for.
    // Method: drive one voter's core by hand until it asks r1 and r2 for pre-votes, then
    // deliver, one at a time: a grant under an id never sent, a grant from r2 under the id of
    // the request to r1, an answer of another kind under that id, failures reported under an
    // unsent id and for the wrong peer; none may move it on or use up the request to r1. Then
    // r1's own grant, which wins the pre-vote (with its own, two of three). Last, a vote request
    // of the candidacy that fails is sent again after the retry backoff.
    let mut r = core(3, 3, |_| {});
    let mut now = 0;
    let outs = tick_until(&mut r, &mut now, |r| r.role() == Role::Prospective);
    assert_eq!(
        r.role(),
        Role::Prospective,
        "the voter's election timer fired"
    );
    let to_r1 = outs
        .iter()
        .find_map(|o| request_to(o, 1, |q| matches!(q, Request::Vote(v) if v.pre_vote)))
        .expect("a pre-vote request to r1");
    let other_kind = Response::BeginQuorumEpoch(EpochResponse {
        error: None,
        epoch: Epoch(0),
        leader: None,
    });
    let unsent = RequestId(to_r1.0.wrapping_add(1_000_000));
    for (n, (from, id, response)) in [
        (ReplicaId(1), unsent, vote_answer(0, true)),
        (ReplicaId(2), to_r1, vote_answer(0, true)),
        (ReplicaId(1), to_r1, other_kind),
    ]
    .into_iter()
    .enumerate()
    {
        let out = step(&mut r, now, Input::Response { from, id, response });
        assert!(out.persist.is_none(), "answer {n} started a candidacy");
        assert_eq!(
            r.stats().stale_responses,
            n as u64 + 1,
            "answer {n} is stale"
        );
    }
    // Failures reported under an id never sent, or for another peer, are stale as well.
    for (n, (to, id)) in [(ReplicaId(1), unsent), (ReplicaId(2), to_r1)]
        .into_iter()
        .enumerate()
    {
        let out = step(&mut r, now, Input::RequestFailed { to, id });
        assert!(
            out.messages.is_empty(),
            "failure {n} made the voter re-send"
        );
        assert_eq!(
            r.stats().stale_responses,
            n as u64 + 4,
            "failure {n} is stale"
        );
    }
    let answer = Input::Response {
        from: ReplicaId(1),
        id: to_r1,
        response: vote_answer(0, true),
    };
    let out = step(&mut r, now, answer);
    let (_, state) = out.persist.expect("r1's own grant wins the pre-vote");
    assert_eq!(
        (state.epoch, state.voted_for),
        (Epoch(1), Some(ReplicaId(3)))
    );
    assert_eq!(r.role(), Role::Candidate);
    assert_eq!(r.stats().stale_responses, 5);

    // A vote request that fails is asked again after the retry backoff, well within the
    // candidate's election timeout.
    let vote = |q: &Request| matches!(q, Request::Vote(v) if !v.pre_vote);
    let to_r2 = request_to(&out, 2, vote).expect("the candidate asks r2 for its vote");
    let failed = Input::RequestFailed {
        to: ReplicaId(2),
        id: to_r2,
    };
    step(&mut r, now, failed);
    let out = step(&mut r, now + 50_000_000, Input::Tick);
    assert_eq!(r.role(), Role::Candidate, "still in its first candidacy");
    assert!(
        request_to(&out, 2, vote).is_some(),
        "r2 is asked again: {out:?}"
    );
}

/// Replica 1 of three, elected leader of epoch 1 by hand (pre-vote off, r2's vote), its
/// epoch-start record durable and fetched by r2, so that it has committed in its epoch and
/// applied it. Returns the leader and the time reached.
pub(crate) fn established_leader(tune: impl FnOnce(&mut Config)) -> (Replica, u64) {
    let (mut r, now, granted) = candidate_and_grant(tune);
    let out = step(&mut r, now, granted);
    assert_eq!(r.role(), Role::Leader);
    sync_last_append(&mut r, now, &out, "the epoch-start record");
    let end = r.log_end();
    step(
        &mut r,
        now,
        fetch_from(2, end.offset, ReadBarrier::default()),
    );
    assert_eq!(r.high_watermark(), end.offset, "committed in its epoch");
    step(&mut r, now, Input::Applied(end.offset));
    (r, now)
}

/// Replica 1 of three (pre-vote off, then `tune`), a candidate of epoch 1, with the input that
/// makes it leader (r2 granting its vote) and the time reached.
pub(crate) fn candidate_and_grant(tune: impl FnOnce(&mut Config)) -> (Replica, u64, Input) {
    let mut r = core(1, 3, |c| {
        c.pre_vote = false;
        tune(c);
    });
    let mut now = 0;
    let outs = tick_until(&mut r, &mut now, |r| r.role() == Role::Candidate);
    let granted = r2_grants(&outs, 1);
    (r, now, granted)
}

/// r2's vote granted for `epoch`, in answer to the vote request to r2 among `outs`.
#[track_caller]
pub(crate) fn r2_grants(outs: &[Outputs], epoch: u32) -> Input {
    let ask = outs
        .iter()
        .find_map(|o| request_to(o, 2, |q| matches!(q, Request::Vote(_))))
        .expect("a vote request to r2");
    Input::Response {
        from: ReplicaId(2),
        id: ask,
        response: vote_answer(epoch, true),
    }
}

/// A fetch from `replica` at `offset` echoing `barrier`, in epoch 1.
pub(crate) fn fetch_from(replica: u32, offset: Offset, barrier: ReadBarrier) -> Input {
    Input::Request {
        from: ReplicaId(replica),
        id: RequestId(u64::from(replica) * 1_000 + offset.0),
        request: Request::Fetch(FetchRequest {
            epoch: Epoch(1),
            replica: ReplicaId(replica),
            replica_directory: None,
            fetch_offset: offset,
            last_fetched_epoch: Epoch(1),
            high_watermark: None,
            read_barrier: barrier,
            max_wait: Duration::ZERO,
            max_bytes: 1 << 20,
        }),
    }
}
