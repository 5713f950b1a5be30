//! The driver simulator's command line, run by `cargo xtask sim --driver`.
//!
//! `raft-dsim --seeds N [--first S] [--seed S] [--voters V] [--observers K] [--sessions C]
//! [--groups G] [--secs T] [--lease] [--threads T] [--verbose]` runs seeds of
//! [`raft_core::dsim`], prints one line per failing seed with the command that replays it, and
//! ends with a summary line. `--groups G` runs G groups on every host (each with `--voters`
//! founders in rotation over the `voters + observers` hosts and `--sessions` clients), and
//! with more than one creates and drops groups during the run.
//! Exit status 1 on any violation. Negative controls (test-only fault switches):
//! `--unsafe-reads`, `--forward-failure-refuses`, `--ignore-write-sessions`,
//! `--lying-fsync` and, with groups, `--misroute-groups`. `--membership` adds voter changes and disk losses. `--planted NAME
//! --expect-catch` plants one bug (`raft_core::planted`) and succeeds at its first catching
//! seed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use raft_core::dsim::{run, DriverSimOptions};
use raft_core::planted::Planted;

#[derive(Clone)]
struct Args {
    seeds: u64,
    first: u64,
    single: Option<u64>,
    threads: usize,
    verbose: bool,
    expect_catch: bool,
    base: DriverSimOptions,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        seeds: 100,
        first: 1,
        single: None,
        threads: 2,
        verbose: false,
        expect_catch: false,
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
            "--groups" => a.base.groups = value("--groups")? as u32,
            "--secs" => a.base.duration = Duration::from_secs(value("--secs")?),
            "--lease" => a.base.lease_reads = true,
            "--verbose" => a.verbose = true,
            "--unsafe-reads" => a.base.unsafe_reads = true,
            "--forward-failure-refuses" => a.base.forward_failure_refuses = true,
            "--lying-fsync" => a.base.lying_fsync = true,
            "--ignore-write-sessions" => a.base.ignore_write_sessions = true,
            "--misroute-groups" => a.base.misroute_groups = true,
            "--membership" => a.base.membership = true,
            "--expect-catch" => a.expect_catch = true,
            "--planted" => {
                let name = it.next().ok_or("--planted needs a name")?;
                let bug = Planted::from_name(&name).ok_or_else(|| {
                    let names: Vec<&str> = Planted::ALL.iter().map(|p| p.name()).collect();
                    format!("unknown planted bug {name}; one of {}", names.join(", "))
                })?;
                a.base.planted = Some(bug);
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if a.expect_catch && a.base.planted.is_none() {
        return Err("--expect-catch needs --planted NAME".into());
    }
    if a.base.voters == 0 || a.base.voters > 9 {
        return Err("--voters must be between 1 and 9".into());
    }
    if a.base.groups == 0 || a.base.groups > 64 {
        return Err("--groups must be between 1 and 64".into());
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
    if b.groups != 1 {
        cmd += &format!(" --groups {}", b.groups);
    }
    for (on, flag) in [
        (b.lease_reads, " --lease"),
        (b.unsafe_reads, " --unsafe-reads"),
        (b.forward_failure_refuses, " --forward-failure-refuses"),
        (b.lying_fsync, " --lying-fsync"),
        (b.ignore_write_sessions, " --ignore-write-sessions"),
        (b.misroute_groups, " --misroute-groups"),
        (b.membership, " --membership"),
    ] {
        if on {
            cmd += flag;
        }
    }
    if let Some(p) = b.planted {
        cmd += &format!(" --planted {}", p.name());
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
    changes: [AtomicU64; 3],
    wipes: AtomicU64,
    edits: AtomicU64,
    refused: AtomicU64,
    groups_created: AtomicU64,
    groups_dropped: AtomicU64,
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
    // With --expect-catch, no new seed starts once one failed: every lower seed has started
    // by then, so the lowest failing seed is the first catch.
    let caught: Arc<Mutex<Vec<(u64, String)>>> = Arc::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let workers: Vec<_> = (0..args.threads)
        .map(|_| {
            let (queue, totals, args) = (queue.clone(), totals.clone(), args.clone());
            let (caught, stop, halt) = (caught.clone(), stop.clone(), stop.clone());
            let next = move || {
                if halt.load(Ordering::Relaxed) {
                    return None;
                }
                queue.lock().ok().and_then(|mut q| q.next())
            };
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
                    for (total, n) in totals.changes.iter().zip(r.voter_changes) {
                        add(total, n);
                    }
                    add(&totals.wipes, r.wipes);
                    add(&totals.edits, r.config_edits);
                    add(&totals.refused, r.refused_starts);
                    add(&totals.groups_created, r.groups_created);
                    add(&totals.groups_dropped, r.groups_dropped);
                    if args.verbose || args.single.is_some() {
                        println!("seed {seed}: {r}");
                    }
                    if !r.violations.is_empty() && args.expect_catch {
                        if let Ok(mut c) = caught.lock() {
                            c.push((seed, r.violations[0].clone()));
                        }
                        stop.store(true, Ordering::Relaxed);
                    } else if !r.violations.is_empty() {
                        add(&totals.failed_seeds, 1);
                        add(&totals.violations, r.violations.len() as u64);
                        println!("FAIL seed {seed}: replay with `{}`", replay(&args, seed));
                        let shown = if args.single.is_some() {
                            usize::MAX
                        } else {
                            12
                        };
                        for v in r.violations.iter().take(shown) {
                            println!("  {v}");
                        }
                        if args.single.is_some() {
                            println!("timeline:");
                            for t in &r.timeline {
                                println!("  {t}");
                            }
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
    if args.expect_catch {
        let name = args.base.planted.map_or("the switch", |p| p.name());
        let first = caught.lock().ok().and_then(|c| c.iter().min().cloned());
        match first {
            Some((seed, violation)) => {
                println!(
                    "dsim: {name} caught at seed {seed} ({:.1}s): {violation}",
                    started.elapsed().as_secs_f64()
                );
                std::process::exit(0);
            }
            None => {
                println!("dsim: {name} NOT caught in {total} seeds");
                std::process::exit(1);
            }
        }
    }
    let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
    let v = get(&totals.violations);
    println!(
        "dsim: {total} seeds, {v} violations in {} seeds ({} writes committed, {} not applied, \
         {} unknown of which {} applied; {} reads, {} failed reads; {} inconclusive linearizability \
         verdicts (register histories beyond the checker's bound); {} snapshots installed; voter \
         changes {} committed, {} refused, {} unknown; {} disks lost; {} restarts with an edited \
         voter list; {} starts refused as unformatted; {} groups per seed, {} created and {} \
         dropped during runs; {:.1}s)",
        get(&totals.failed_seeds),
        get(&totals.committed),
        get(&totals.not_applied),
        get(&totals.unknown),
        get(&totals.unknown_applied),
        get(&totals.reads),
        get(&totals.reads_failed),
        get(&totals.inconclusive),
        get(&totals.snapshots),
        get(&totals.changes[0]),
        get(&totals.changes[1]),
        get(&totals.changes[2]),
        get(&totals.wipes),
        get(&totals.edits),
        get(&totals.refused),
        args.base.groups,
        get(&totals.groups_created),
        get(&totals.groups_dropped),
        started.elapsed().as_secs_f64()
    );
    std::process::exit(if v == 0 { 0 } else { 1 });
}
