//! The driver simulator ([`raft_core::dsim`]) on fixed seeds: clean runs pass, a seed replays
//! identically, and the negative controls (test-only switches that put known bugs back) are
//! caught. `cargo xtask sim --driver` runs the large sweeps.

use raft_core::dsim::{run, DriverSimOptions, DriverSimReport};

fn summary(r: &DriverSimReport) -> String {
    format!("{r}, violations {:?}", r.violations)
}

/// Goal: the real driver keeps every property the simulator checks under its faults.
#[test]
fn fixed_seeds_pass() {
    for seed in [1, 2, 3, 55, 193, 1534] {
        let r = run(&DriverSimOptions::new(seed));
        assert!(r.violations.is_empty(), "seed {seed}: {}", summary(&r));
        assert!(r.committed > 50, "seed {seed} did work: {}", summary(&r));
    }
    let mut five = DriverSimOptions::new(7);
    (five.voters, five.observers, five.sessions) = (5, 2, 6);
    let r = run(&five);
    assert!(
        r.violations.is_empty(),
        "5 voters, 2 observers: {}",
        summary(&r)
    );
}

/// Goal: one seed decides a run, so a failure replays with one command. Seed 16 crashes a
/// replica with calls waiting on it (they once ended in a random order).
#[test]
fn a_seed_replays_identically() {
    for seed in [16, 42] {
        let opts = DriverSimOptions::new(seed);
        let runs: Vec<String> = (0..3).map(|_| summary(&run(&opts))).collect();
        assert!(runs.iter().all(|r| *r == runs[0]), "seed {seed}: {runs:#?}");
    }
    assert_ne!(
        summary(&run(&DriverSimOptions::new(42))),
        summary(&run(&DriverSimOptions::new(43))),
        "another seed runs otherwise"
    );
}

/// Goal: the checks can fail. Reporting a forward that failed in flight as refused (the old
/// behaviour) is caught as lies and double applies; followers serving reads without a
/// confirmed offset is caught by the linearizability check; a log that loses records it
/// acknowledged as durable is caught as disagreement; ignoring write sessions is caught as
/// session order. Each within the first seeds.
#[test]
fn negative_controls_are_caught() {
    let caught = |opts: &dyn Fn(u64) -> DriverSimOptions, what: &str| {
        (1..=10).any(|seed| run(&opts(seed)).violations.iter().any(|v| v.contains(what)))
    };
    assert!(
        caught(
            &|seed| DriverSimOptions {
                forward_failure_refuses: true,
                ..DriverSimOptions::new(seed)
            },
            "told not applied"
        ),
        "a refusal that was applied is reported"
    );
    assert!(
        caught(
            &|seed| DriverSimOptions {
                unsafe_reads: true,
                ..DriverSimOptions::new(seed)
            },
            "not linearizable"
        ),
        "stale follower reads are reported"
    );
    assert!(
        caught(
            &|seed| DriverSimOptions {
                lying_fsync: true,
                ..DriverSimOptions::new(seed)
            },
            "agreement"
        ),
        "lost acknowledged records are reported"
    );
    // Rarer: a forward must arrive after its caller gave up and after the next batch.
    let reordered = (1..=50).any(|seed| {
        run(&DriverSimOptions {
            ignore_write_sessions: true,
            ..DriverSimOptions::new(seed)
        })
        .violations
        .iter()
        .any(|v| v.contains("session order"))
    });
    assert!(
        reordered,
        "a late batch applied after a later one is reported"
    );
}

/// Hosts of eight groups (three voters each, in rotation over five hosts), created and
/// dropped during the run.
fn eight_groups(seed: u64) -> DriverSimOptions {
    DriverSimOptions {
        voters: 3,
        observers: 2,
        groups: 8,
        ..DriverSimOptions::new(seed)
    }
}

/// Goal: several groups per host keep every property per group, groups are created and
/// dropped during runs (a dropped one gone from every host), and a seed still decides the run.
/// Method: a few seeds of eight groups, with and without voter changes and disk losses; then
/// one seed run three times, its timeline compared too.
#[test]
fn hosts_of_many_groups_keep_every_property_and_replay_identically() {
    let (mut created, mut dropped) = (0, 0);
    for (seed, membership) in [(1, false), (2, false), (5, true), (6, true)] {
        let r = run(&DriverSimOptions {
            membership,
            ..eight_groups(seed)
        });
        assert!(r.violations.is_empty(), "seed {seed}: {}", summary(&r));
        assert!(r.committed > 400, "seed {seed} did work: {}", summary(&r));
        created += r.groups_created;
        dropped += r.groups_dropped;
    }
    assert!(
        created > 0 && dropped > 0,
        "created {created}, dropped {dropped}"
    );
    for membership in [false, true] {
        let opts = DriverSimOptions {
            membership,
            ..eight_groups(16)
        };
        let runs: Vec<String> = (0..3)
            .map(|_| {
                let r = run(&opts);
                format!("{}\n{}", summary(&r), r.timeline.join("\n"))
            })
            .collect();
        assert!(
            runs.iter().all(|r| *r == runs[0]),
            "{membership}: {runs:#?}"
        );
    }
}

/// Goal: the isolation checks can fail. Clients that send their group's requests to another
/// group's replica on the same host are caught: the other group's state machine notes the
/// foreign record, and a read sees another group's value.
#[test]
fn a_request_of_one_group_reaching_another_is_caught() {
    let r = run(&DriverSimOptions {
        misroute_groups: true,
        groups: 2,
        ..DriverSimOptions::new(1)
    });
    let isolation = |what: &str| {
        r.violations
            .iter()
            .any(|v| v.contains("isolation") && v.contains(what))
    };
    assert!(isolation("holds write"), "{}", summary(&r));
    assert!(isolation("read of key"), "{}", summary(&r));
}
