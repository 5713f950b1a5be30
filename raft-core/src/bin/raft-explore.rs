//! The explorer's command line, run by `cargo xtask explore`: an exhaustive, bounded model check
//! of the protocol core (`raft_core::sim::explore`).
//!
//! `raft-explore [--depth N] [--start cold|leader] [--planted NAME] [--expect-catch]
//! [--crashes C] [--proposals P] [--duplicates D] [--reads R] [--unsafe-reads] [--max-states M]`
//! explores every sequence of at most N actions from the start state and prints the states
//! explored, the distinct states, the depth reached and the time; on a violation it prints the
//! trace that reproduces it. `--unsafe-reads` is the read rule's negative control.
//! Exit status 1 on a violation, or with `--expect-catch` when the planted bug is not caught;
//! 2 when the state cap stopped the exploration early, 3 on bad arguments.

use std::process::ExitCode;

use raft_core::planted::Planted;
use raft_core::sim::explore::{explore, Options, Start};

fn parse() -> Result<(Options, bool), String> {
    let mut opts = Options::new(5, Start::Leader);
    let mut expect_catch = false;
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = |name: &str| -> Result<u64, String> {
            it.next()
                .ok_or_else(|| format!("{name} needs a value"))?
                .parse::<u64>()
                .map_err(|e| format!("{name}: {e}"))
        };
        match flag.as_str() {
            "--depth" => opts.depth = value("--depth")? as u32,
            "--crashes" => opts.budget.crashes = value("--crashes")? as u32,
            "--proposals" => opts.budget.proposals = value("--proposals")? as u32,
            "--duplicates" => opts.budget.duplicates = value("--duplicates")? as u32,
            "--reads" => opts.budget.reads = value("--reads")? as u32,
            "--unsafe-reads" => opts.unsafe_reads = true,
            "--max-states" => opts.max_states = value("--max-states")? as usize,
            "--expect-catch" => expect_catch = true,
            "--start" => {
                opts.start = match it.next().as_deref() {
                    Some("cold") => Start::Cold,
                    Some("leader") => Start::Leader,
                    Some("failover") => Start::Failover,
                    other => return Err(format!("--start cold|leader|failover, not {other:?}")),
                }
            }
            "--planted" => {
                let name = it.next().ok_or("--planted needs a name")?;
                let bug = Planted::from_name(&name).ok_or_else(|| {
                    let names: Vec<&str> = Planted::ALL.iter().map(|p| p.name()).collect();
                    format!("unknown planted bug {name}; one of {}", names.join(", "))
                })?;
                opts.planted = Some(bug);
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if expect_catch && opts.planted.is_none() && !opts.unsafe_reads {
        return Err("--expect-catch needs --planted or --unsafe-reads".into());
    }
    Ok((opts, expect_catch))
}

fn main() -> ExitCode {
    let (opts, expect_catch) = match parse() {
        Ok(p) => p,
        Err(e) => {
            eprintln!(
                "raft-explore: {e}\nusage: raft-explore [--depth N] [--start cold|leader] \
                 [--planted NAME] [--expect-catch] [--crashes C] [--proposals P] \
                 [--duplicates D] [--reads R] [--unsafe-reads] [--max-states M]"
            );
            return ExitCode::from(3);
        }
    };
    let planted = opts.planted.map_or(
        if opts.unsafe_reads {
            "unsafe-reads"
        } else {
            "none"
        },
        |p| p.name(),
    );
    println!(
        "explore: start {}, depth {}, planted {planted}, budget {} crash(es), {} proposal(s), {} duplicate(s), {} read(s)",
        opts.start.name(),
        opts.depth,
        opts.budget.crashes,
        opts.budget.proposals,
        opts.budget.duplicates,
        opts.budget.reads
    );
    // A planted bug may trip an assertion of the core: that is a catch, reported with its
    // trace, so the default hook's message is only noise.
    std::panic::set_hook(Box::new(|_| {}));
    let report = explore(&opts);
    println!(
        "explore: {} transitions, {} distinct states, depth {} reached, {:.1}s",
        report.explored,
        report.distinct,
        report.depth,
        report.elapsed.as_secs_f64()
    );
    if let Some(v) = &report.violation {
        println!("violation at depth {}:", v.depth);
        for m in &v.messages {
            println!("  {m}");
        }
        println!("trace:");
        for line in &v.trace {
            println!("{line}");
        }
    }
    if report.capped {
        println!(
            "explore: stopped at {} distinct states (--max-states); depth {} not completed",
            opts.max_states, report.depth
        );
    }
    match (report.violation.is_some(), expect_catch) {
        (true, true) => {
            println!("explore: planted bug {planted} caught");
            ExitCode::SUCCESS
        }
        (false, true) => {
            println!("explore: planted bug {planted} NOT caught");
            ExitCode::FAILURE
        }
        (true, false) => ExitCode::FAILURE,
        (false, false) if report.capped => ExitCode::from(2),
        (false, false) => ExitCode::SUCCESS,
    }
}
