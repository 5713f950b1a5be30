//! The driver simulator's command line, run by `cargo xtask sim --driver`.
//!
//! `raft-dsim --seeds N [--first S] [--seed S] [--voters V] [--observers K] [--sessions C]
//! [--secs T] [--lease] [--threads T] [--verbose]` runs seeds of [`raft_core::dsim`], prints one
//! line per failing seed with the command that replays it, and ends with a summary line.
//! Exit status 1 on any violation. Negative controls (test-only fault switches):
//! `--unsafe-reads`, `--forward-failure-refuses`, `--ignore-write-sessions` and
//! `--lying-fsync`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use raft_core::dsim::{run, DriverSimOptions};

#[derive(Clone)]
struct Args {
    seeds: u64,
    first: u64,
    single: Option<u64>,
    threads: usize,
    verbose: bool,
    base: DriverSimOptions,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        seeds: 100,
        first: 1,
        single: None,
        threads: 2,
        verbose: false,
        base: DriverSimOptions::new(0),
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
            "--threads" => a.threads = value("--threads")?.max(1) as usize,
            "--voters" => a.base.voters = value("--voters")? as u32,
            "--observers" => a.base.observers = value("--observers")? as u32,
            "--sessions" => a.base.sessions = value("--sessions")? as u32,
            "--secs" => a.base.duration = Duration::from_secs(value("--secs")?),
            "--lease" => a.base.lease_reads = true,
            "--verbose" => a.verbose = true,
            "--unsafe-reads" => a.base.unsafe_reads = true,
            "--forward-failure-refuses" => a.base.forward_failure_refuses = true,
            "--lying-fsync" => a.base.lying_fsync = true,
            "--ignore-write-sessions" => a.base.ignore_write_sessions = true,
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if a.base.voters == 0 || a.base.voters > 9 {
        return Err("--voters must be between 1 and 9".into());
    }
    Ok(a)
}

/// The command that replays `seed` with these settings.
fn replay(args: &Args, seed: u64) -> String {
    let b = &args.base;
    let mut cmd = format!(
        "cargo xtask sim --driver --seed {seed} --voters {} --observers {} --sessions {} --secs {}",
        b.voters,
        b.observers,
        b.sessions,
        b.duration.as_secs()
    );
    for (on, flag) in [
        (b.lease_reads, " --lease"),
        (b.unsafe_reads, " --unsafe-reads"),
        (b.forward_failure_refuses, " --forward-failure-refuses"),
        (b.lying_fsync, " --lying-fsync"),
        (b.ignore_write_sessions, " --ignore-write-sessions"),
    ] {
        if on {
            cmd += flag;
        }
    }
    cmd
}

#[derive(Default)]
struct Totals {
    failed_seeds: AtomicU64,
    violations: AtomicU64,
    committed: AtomicU64,
    not_applied: AtomicU64,
    unknown: AtomicU64,
    unknown_applied: AtomicU64,
    reads: AtomicU64,
    reads_failed: AtomicU64,
    inconclusive: AtomicU64,
    snapshots: AtomicU64,
}

fn main() {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("raft-dsim: {e}");
            std::process::exit(2);
        }
    };
    let seeds: Vec<u64> = match args.single {
        Some(s) => vec![s],
        None => (args.first..args.first + args.seeds).collect(),
    };
    let total = seeds.len();
    let queue = Arc::new(Mutex::new(seeds.into_iter()));
    let totals = Arc::new(Totals::default());
    let started = std::time::Instant::now();
    let workers: Vec<_> = (0..args.threads)
        .map(|_| {
            let (queue, totals, args) = (queue.clone(), totals.clone(), args.clone());
            let next = move || queue.lock().ok().and_then(|mut q| q.next());
            std::thread::spawn(move || {
                while let Some(seed) = next() {
                    let mut opts = args.base.clone();
                    opts.seed = seed;
                    let r = run(&opts);
                    let add = |c: &AtomicU64, v: u64| c.fetch_add(v, Ordering::Relaxed);
                    add(&totals.committed, r.committed);
                    add(&totals.not_applied, r.not_applied);
                    add(&totals.unknown, r.unknown);
                    add(&totals.unknown_applied, r.unknown_applied);
                    add(&totals.reads, r.reads);
                    add(&totals.reads_failed, r.reads_failed);
                    add(&totals.inconclusive, r.inconclusive);
                    add(&totals.snapshots, r.snapshots_installed);
                    if args.verbose || args.single.is_some() {
                        println!("seed {seed}: {r}");
                    }
                    if !r.violations.is_empty() {
                        add(&totals.failed_seeds, 1);
                        add(&totals.violations, r.violations.len() as u64);
                        println!("FAIL seed {seed}: replay with `{}`", replay(&args, seed));
                        for v in r.violations.iter().take(12) {
                            println!("  {v}");
                        }
                    }
                }
            })
        })
        .collect();
    for w in workers {
        if w.join().is_err() {
            totals.violations.fetch_add(1, Ordering::Relaxed);
        }
    }
    let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
    let v = get(&totals.violations);
    println!(
        "dsim: {total} seeds, {v} violations in {} seeds ({} writes committed, {} not applied, \
         {} unknown of which {} applied; {} reads, {} failed reads; {} register histories \
         beyond the checker's bound; {} snapshots installed; {:.1}s)",
        get(&totals.failed_seeds),
        get(&totals.committed),
        get(&totals.not_applied),
        get(&totals.unknown),
        get(&totals.unknown_applied),
        get(&totals.reads),
        get(&totals.reads_failed),
        get(&totals.inconclusive),
        get(&totals.snapshots),
        started.elapsed().as_secs_f64()
    );
    std::process::exit(if v == 0 { 0 } else { 1 });
}
