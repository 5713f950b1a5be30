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
    let installs = Arc::new(AtomicU64::new(0));
    let started = std::time::Instant::now();
    let workers: Vec<_> = (0..args.threads)
        .map(|_| {
            let seeds = Arc::clone(&seeds);
            let violations = Arc::clone(&violations);
            let committed = Arc::clone(&committed);
            let checked = Arc::clone(&checked);
            let inconclusive = Arc::clone(&inconclusive);
            let installs = Arc::clone(&installs);
            let (voters, observers, verbose, single) = (
                args.voters,
                args.observers,
                args.verbose,
                args.single.is_some(),
            );
            let membership = args.membership;
            let (unsafe_reads, count_arrivals, lease, lease_margin, drift_ppm) = (
                args.unsafe_reads,
                args.count_arrivals,
                args.lease,
                args.lease_margin_ms,
                args.drift_ppm,
            );
            let next_seed = move || seeds.lock().map(|mut s| s.next()).unwrap_or(None);
            std::thread::spawn(move || {
                while let Some(seed) = next_seed() {
                    let mut opts = RunOptions::new(seed, voters, observers);
                    opts.keep_trace = verbose && single;
                    opts.unsafe_reads = unsafe_reads;
                    opts.count_arrivals = count_arrivals;
                    opts.membership = membership;
                    opts.lease_reads = lease;
                    opts.lease_drift_margin = lease_margin.map(Duration::from_millis);
                    opts.drift_ppm = drift_ppm;
                    let report = run(opts);
                    committed.fetch_add(report.committed, Ordering::Relaxed);
                    checked.fetch_add(report.operations, Ordering::Relaxed);
                    inconclusive.fetch_add(report.inconclusive, Ordering::Relaxed);
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
                    if !report.violations.is_empty() {
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
    let v = violations.load(Ordering::Relaxed);
    println!(
        "sim: {total} seeds, {v} violations ({} records committed, {} client operations \
         checked, {} key histories beyond the checker's bound, {} snapshots installed, {:.1}s)",
        committed.load(Ordering::Relaxed),
        checked.load(Ordering::Relaxed),
        inconclusive.load(Ordering::Relaxed),
        installs.load(Ordering::Relaxed),
        started.elapsed().as_secs_f64()
    );
    std::process::exit(if v == 0 { 0 } else { 1 });
}
