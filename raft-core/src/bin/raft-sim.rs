//! The simulator's command line, run by `cargo xtask sim`.
//!
//! `raft-sim --seeds N [--first S] [--seed S] [--voters 3|5] [--observers K] [--threads T]`
//! runs seeds (each draws its own faults), prints one line per failure with the command that
//! replays it, and ends with `sim: N seeds, V violations`. Exit status 1 on any violation.
//! Negative controls (test-only fault switches): `--unsafe-reads`, `--count-arrivals`, and
//! `--lease 1 --lease-margin-ms 0 --drift-ppm N`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use raft_core::sim::{run, RunOptions};

struct Args {
    seeds: u64,
    first: u64,
    single: Option<u64>,
    voters: u32,
    observers: u32,
    threads: usize,
    verbose: bool,
    unsafe_reads: bool,
    count_arrivals: bool,
    membership: bool,
    planted: Option<raft_core::planted::Planted>,
    expect_catch: bool,
    lease: Option<bool>,
    lease_margin_ms: Option<u64>,
    drift_ppm: Option<u32>,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        seeds: 100,
        first: 1,
        single: None,
        voters: 3,
        observers: 0,
        threads: 2,
        verbose: false,
        unsafe_reads: false,
        count_arrivals: false,
        membership: false,
        planted: None,
        expect_catch: false,
        lease: None,
        lease_margin_ms: None,
        drift_ppm: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = |name: &str| -> Result<u64, String> {
            it.next()
                .ok_or_else(|| format!("{name} needs a value"))?
                .parse::<u64>()
                .map_err(|e| format!("{name}: {e}"))
        };
        match flag.as_str() {
            "--seeds" => a.seeds = value("--seeds")?,
            "--first" => a.first = value("--first")?,
            "--seed" => a.single = Some(value("--seed")?),
            "--voters" => a.voters = value("--voters")? as u32,
            "--observers" => a.observers = value("--observers")? as u32,
            "--threads" => a.threads = value("--threads")?.max(1) as usize,
            "--verbose" => a.verbose = true,
            "--unsafe-reads" => a.unsafe_reads = true,
            "--count-arrivals" => a.count_arrivals = true,
            "--membership" => a.membership = true,
            "--expect-catch" => a.expect_catch = true,
            "--planted" => {
                let name = it.next().ok_or("--planted needs a name")?;
                let bug = raft_core::planted::Planted::from_name(&name).ok_or_else(|| {
                    let names: Vec<&str> = raft_core::planted::Planted::ALL
                        .iter()
                        .map(|p| p.name())
                        .collect();
                    format!("unknown planted bug {name}; one of {}", names.join(", "))
                })?;
                a.planted = Some(bug);
            }
            "--lease" => a.lease = Some(value("--lease")? != 0),
            "--drift-ppm" => a.drift_ppm = Some(value("--drift-ppm")? as u32),
            "--lease-margin-ms" => a.lease_margin_ms = Some(value("--lease-margin-ms")?),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if a.voters == 0 || a.voters > 9 {
        return Err("--voters must be between 1 and 9".into());
    }
    Ok(a)
}

fn main() {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("raft-sim: {e}");
            std::process::exit(2);
        }
    };
    let seeds: Vec<u64> = match args.single {
        Some(s) => vec![s],
        None => (args.first..args.first + args.seeds).collect(),
    };
    let total = seeds.len() as u64;
    let seeds = Arc::new(Mutex::new(seeds.into_iter()));
    let violations = Arc::new(AtomicU64::new(0));
    let committed = Arc::new(AtomicU64::new(0));
    // Client operations checked, and key histories too large for the checker's step bound.
    let checked = Arc::new(AtomicU64::new(0));
    let inconclusive = Arc::new(AtomicU64::new(0));
    let reads_failed = Arc::new(AtomicU64::new(0));
    let installs = Arc::new(AtomicU64::new(0));
    let started = std::time::Instant::now();
    let caught: Arc<Mutex<Vec<(u64, String)>>> = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let workers: Vec<_> = (0..args.threads)
        .map(|_| {
            let seeds = Arc::clone(&seeds);
            let violations = Arc::clone(&violations);
            let committed = Arc::clone(&committed);
            let checked = Arc::clone(&checked);
            let inconclusive = Arc::clone(&inconclusive);
            let reads_failed = Arc::clone(&reads_failed);
            let installs = Arc::clone(&installs);
            let (voters, observers, verbose, single) = (
                args.voters,
                args.observers,
                args.verbose,
                args.single.is_some(),
            );
            let membership = args.membership;
            let planted = args.planted;
            let (unsafe_reads, count_arrivals, lease, lease_margin, drift_ppm) = (
                args.unsafe_reads,
                args.count_arrivals,
                args.lease,
                args.lease_margin_ms,
                args.drift_ppm,
            );
            let (caught, stop) = (Arc::clone(&caught), Arc::clone(&stop));
            let expect_catch = args.expect_catch;
            // With --expect-catch, no new seed starts once one failed: every lower seed has
            // started by then, so the lowest failing seed is the first catch.
            let next_seed = {
                let stop = Arc::clone(&stop);
                move || {
                    if stop.load(Ordering::Relaxed) {
                        return None;
                    }
                    seeds.lock().map(|mut s| s.next()).unwrap_or(None)
                }
            };
            std::thread::spawn(move || {
                while let Some(seed) = next_seed() {
                    let mut opts = RunOptions::new(seed, voters, observers);
                    opts.keep_trace = verbose && single;
                    opts.unsafe_reads = unsafe_reads;
                    opts.count_arrivals = count_arrivals;
                    opts.membership = membership;
                    opts.planted = planted;
                    opts.lease_reads = lease;
                    opts.lease_drift_margin = lease_margin.map(Duration::from_millis);
                    opts.drift_ppm = drift_ppm;
                    let report = run(opts);
                    committed.fetch_add(report.committed, Ordering::Relaxed);
                    checked.fetch_add(report.operations, Ordering::Relaxed);
                    inconclusive.fetch_add(report.inconclusive, Ordering::Relaxed);
                    reads_failed.fetch_add(report.reads_failed, Ordering::Relaxed);
                    installs.fetch_add(report.snapshots_installed, Ordering::Relaxed);
                    if verbose || single {
                        println!(
                            "seed {seed}: committed {} acked {} ops {} inconclusive {} max epoch {} events {} faults {:?}",
                            report.committed,
                            report.acknowledged,
                            report.operations,
                            report.inconclusive,
                            report.max_epoch,
                            report.events,
                            report.faults
                        );
                    }
                    if !report.trace.is_empty() {
                        println!("{}", report.trace);
                    }
                    if !report.violations.is_empty() && expect_catch {
                        caught.lock().expect("not poisoned").push((seed, report.violations[0].clone()));
                        stop.store(true, Ordering::Relaxed);
                    } else if !report.violations.is_empty() {
                        violations.fetch_add(report.violations.len() as u64, Ordering::Relaxed);
                        println!(
                            "FAIL seed {seed}: replay with `{}`",
                            report.options.replay_command()
                        );
                        for v in report.violations.iter().take(5) {
                            println!("  {v}");
                        }
                    }
                }
            })
        })
        .collect();
    for w in workers {
        if w.join().is_err() {
            violations.fetch_add(1, Ordering::Relaxed);
        }
    }
    if args.expect_catch {
        let name = args.planted.map_or("the switch", |p| p.name());
        let first = caught.lock().expect("not poisoned").iter().min().cloned();
        match first {
            Some((seed, violation)) => {
                println!(
                    "sim: {name} caught at seed {seed} ({:.1}s): {violation}",
                    started.elapsed().as_secs_f64()
                );
                std::process::exit(0);
            }
            None => {
                println!("sim: {name} NOT caught in {total} seeds");
                std::process::exit(1);
            }
        }
    }
    let v = violations.load(Ordering::Relaxed);
    println!(
        "sim: {total} seeds, {v} violations ({} records committed, {} client operations \
         checked, {} reads failed, {} key histories beyond the checker's bound, {} \
         snapshots installed, {:.1}s)",
        committed.load(Ordering::Relaxed),
        checked.load(Ordering::Relaxed),
        reads_failed.load(Ordering::Relaxed),
        inconclusive.load(Ordering::Relaxed),
        installs.load(Ordering::Relaxed),
        started.elapsed().as_secs_f64()
    );
    // A history the checker could not decide within its bound is not a pass: it may hide a
    // violation. None has arisen; should one, shorten the histories or raise the bound.
    let undecided = inconclusive.load(Ordering::Relaxed);
    if undecided > 0 {
        println!("sim: {undecided} key histories were not decided: not a pass");
    }
    std::process::exit(if v == 0 && undecided == 0 { 0 } else { 1 });
}
