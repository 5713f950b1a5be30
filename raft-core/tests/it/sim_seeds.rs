//! The randomized simulator on a fixed list of seeds, plus every seed that ever failed. A
//! failure prints the one command that replays it (`cargo xtask sim --seed ...`).

use raft_core::sim::{run, RunOptions};

/// Every seed that ever failed, as `(seed, voters, observers)`, kept forever as a regression
/// test. When a sweep finds a failing seed, add it here with a comment naming the bug it found
/// before fixing it, so the fix is proven on the very run that exposed it.
const REGRESSION_SEEDS: &[(u64, u32, u32)] = &[];

/// Runs every seed and fails with the replay commands of those that reported violations.
fn run_seeds(seeds: impl IntoIterator<Item = (u64, u32, u32)>) {
    let mut failures = Vec::new();
    for (seed, voters, observers) in seeds {
        let options = RunOptions::new(seed, voters, observers);
        let report = run(options.clone());
        if !report.violations.is_empty() {
            failures.push(format!(
                "{}\n  faults: {:?}\n  {}",
                options.replay_command(),
                report.faults,
                report.violations.join("\n  ")
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} seed(s) failed; replay with:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn sim_three_voters_fixed_seeds() {
    // Goal: the safety and liveness checks hold on a fixed sweep of three-voter runs.
    // Method: seeds 1..=40, no observers; every run has its own fault mix.
    run_seeds((1..=40).map(|s| (s, 3, 0)));
}

#[test]
fn sim_five_voters_and_an_observer_fixed_seeds() {
    // Goal: the same with five voters and one observer.
    // Method: seeds 1..=20.
    run_seeds((1..=20).map(|s| (s, 5, 1)));
}

#[test]
fn sim_regression_seeds() {
    // Goal: every seed that ever failed stays fixed (see REGRESSION_SEEDS).
    // Method: replay each one.
    run_seeds(REGRESSION_SEEDS.iter().copied());
}
