//! Project chores, run as `cargo xtask <command>`:
//!
//! * `ci`: the canonical check list CI runs (format, tidy rules, clippy, docs, packaging,
//!   tests, the examples run to completion, a fuzz smoke run, a shard of the protocol's mutants, bounded
//!   simulator sweeps, the bounded explorer, the bench's smoke run). `.ci/run` calls exactly
//!   this.
//! * `sim [--seeds N] [--seed S] [--voters 3|5] [--observers K] [--first S] [--membership]`: a
//!   simulator sweep (release build); `--membership` adds voter changes and disk losses;
//!   `--planted NAME --expect-catch` plants one bug and succeeds at its first catching seed. A failing seed prints the one command that replays it. With `--driver`,
//!   the driver simulator (`raft-dsim`: the real driver on virtual time) instead, which also
//!   takes `--sessions C`, `--secs T` and `--lease`.
//! * `explore [--depth N] [--start cold|leader] [--planted NAME] [--expect-catch]`: the
//!   exhaustive, bounded model check of the protocol core (`raft-explore`, debug build): every
//!   interleaving of three replicas' messages, timers, syncs, crashes and proposals to depth N.
//! * `bench [storage] [core] [snapshot] [reads] [transport] [cluster] [failover] [membership]
//!   [memory] [groups] [--quick] [--json FILE]`: the performance harness (`raft-bench`, release build); figures go
//!   to stdout and, by default, to `target/bench/results.json`. The release `raft-node` binary is
//!   built first: the cluster, failover and membership suites run it as separate processes.
//! * `fuzz [TARGET...] [--secs N] [--cmin]`: the libFuzzer targets in `fuzz/` (nightly and
//!   cargo-fuzz; says which is missing), each for N seconds (default 60), growing the corpus
//!   in `fuzz/corpus/`; `--cmin` minimises the corpus instead, `--smoke` runs the smoke step of
//!   `ci` alone.
//! * `mutants [--file GLOB]... [--shard K/N] [--in-place] [--list]`: mutation testing of
//!   raft-core (default: `raft-core/src/protocol/*.rs`) with `cargo mutants` (installed when
//!   missing; settings in `.cargo/mutants.toml`), then the kill rate per file; fails when a
//!   mutant survives.
//!
//! Cargo is invoked through `$CARGO`, so the toolchain that runs xtask runs everything else.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

mod fuzz;
mod mutants;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("ci") => ci(),
        Some("sim") => sim(&args[1..]),
        Some("explore") => explore(&args[1..]),
        Some("bench") => bench(&args[1..]),
        Some("fuzz") => fuzz::fuzz(&args[1..]),
        Some("mutants") => mutants::mutants(&args[1..]),
        _ => {
            eprintln!(
                "usage: cargo xtask ci | sim [--driver] [--seeds N] [--seed S] [--voters V] \
                 [--observers K] | explore [--depth N] [--start cold|leader] [--planted NAME] \
                 [--expect-catch] | bench [SUITE...] [--quick] [--check] [--json FILE] | \
                 fuzz [TARGET...] [--secs N] [--cmin] [--smoke] | \
                 mutants [--file GLOB]... [--shard K/N] [--in-place] [--list]"
            );
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.current_dir(root());
    cmd
}

/// The workspace root: where `cargo xtask` runs it from (cargo sets `CARGO_MANIFEST_DIR` for
/// the process it runs), else where it was built. A binary reused from a shared target dir
/// by another checkout of the workspace would otherwise act on the checkout that built it.
fn root() -> PathBuf {
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    Path::new(&manifest_dir)
        .parent()
        .expect("xtask lives in the workspace")
        .into()
}

fn run(name: &str, cmd: &mut Command) -> Result<(), String> {
    println!("==> {name}");
    let started = Instant::now();
    let status = cmd
        .status()
        .map_err(|e| format!("{name}: cannot start: {e}"))?;
    println!("<== {name}: {:.1}s", started.elapsed().as_secs_f64());
    if status.success() {
        Ok(())
    } else {
        Err(format!("{name} failed ({status})"))
    }
}

fn ci() -> Result<(), String> {
    let started = Instant::now();
    run("fmt", cargo().args(["fmt", "--all", "--", "--check"]))?;
    tidy()?;
    run(
        "clippy",
        cargo().args([
            "clippy",
            "--workspace",
            "--all-targets",
            "--all-features",
            "--locked",
            "--",
            "-D",
            "warnings",
        ]),
    )?;
    run(
        "doc",
        cargo()
            .args([
                "doc",
                "--workspace",
                "--no-deps",
                "--all-features",
                "--locked",
            ])
            .env("RUSTDOCFLAGS", "-D warnings"),
    )?;
    // Every library crate and the node package as crates.io would take them, in dependency
    // order (workspace dependencies resolved from the packages just made). Not rebuilt from
    // the packages (`--no-verify`): the test step builds the same sources.
    run(
        "package",
        cargo().args([
            "package",
            "--workspace",
            "--exclude",
            "raft-bench",
            "--exclude",
            "xtask",
            "--exclude",
            "raft-examples",
            "--no-verify",
            "--locked",
        ]),
    )?;
    run(
        "test",
        cargo().args(["test", "--workspace", "--all-features", "--locked"]),
    )?;
    // The examples a library user starts from, run to completion (each bounds its own waits),
    // with the test step's features so that the build is reused.
    for example in ["counter", "lock_service"] {
        run(
            &format!("example {example}"),
            cargo().args([
                "run",
                "-p",
                "raft-core",
                "--example",
                example,
                "--all-features",
                "--locked",
            ]),
        )?;
    }
    // Many groups per process as a library user embeds them: three host processes of 100
    // groups each over QUIC and fjall, run twice on one directory (the second run reopens every
    // group from the engine and finds every counter where the first left it).
    let groups_dir = target_dir().join("tmp").join("groups-example");
    let _ = std::fs::remove_dir_all(&groups_dir);
    for pass in ["first", "second"] {
        run(
            &format!("example groups ({pass} run)"),
            cargo()
                .args([
                    "run",
                    "-p",
                    "raft-examples",
                    "--example",
                    "groups",
                    "--all-features",
                    "--locked",
                    "--",
                    "local",
                    "--dir",
                ])
                .arg(&groups_dir),
        )?;
    }
    // A replicated key-value store of a user's own in four processes (three founders, then a
    // replacement machine), over QUIC, on each engine.
    for storage in ["fjall", "redb"] {
        run(
            &format!("example kv ({storage})"),
            cargo()
                .args([
                    "run",
                    "-p",
                    "raft-examples",
                    "--example",
                    "kv",
                    "--all-features",
                    "--locked",
                    "--",
                    "local",
                    "--storage",
                    storage,
                    "--dir",
                ])
                .arg(
                    target_dir()
                        .join("tmp")
                        .join(format!("kv-example-{storage}")),
                ),
        )?;
    }
    // The same story with an append-only list whose snapshot streams, on each engine; the
    // example fails (and stops its machines) unless the story ends within a minute.
    for storage in ["fjall", "redb"] {
        run(
            &format!("example list ({storage})"),
            cargo()
                .args([
                    "run",
                    "-p",
                    "raft-examples",
                    "--example",
                    "list",
                    "--all-features",
                    "--locked",
                    "--",
                    "local",
                    "--storage",
                    storage,
                    "--within",
                    "60",
                    "--dir",
                ])
                .arg(
                    target_dir()
                        .join("tmp")
                        .join(format!("list-example-{storage}")),
                ),
        )?;
    }
    // Every decoder a peer, a client or a disk reaches: corpus replay, short libFuzzer runs.
    fuzz::smoke()?;
    // A fixed shard of the protocol layer's mutants (one in a hundred, about ten), each of which
    // a test must kill. With `CI` set (`.ci/run` sets it) the mutants are made in place, reusing
    // the build the tests just made; elsewhere in a copy of the tree, so that an interrupted
    // run cannot leave a mutant behind in a developer's sources.
    let mut shard = vec!["--shard".to_string(), "0/100".to_string()];
    if std::env::var_os("CI").is_some() {
        shard.push("--in-place".into());
    }
    mutants::mutants(&shard)?;
    sim(&["--seeds".into(), "2000".into()])?;
    sim(&[
        "--seeds".into(),
        "1000".into(),
        "--voters".into(),
        "5".into(),
        "--observers".into(),
        "1".into(),
    ])?;
    // Membership (KIP-853): voter changes and disk losses, growing from one voter and
    // changing a three-voter cluster. The operator's actions are drawn too: a lost disk comes
    // back with the host's own configuration (keyed founders on three seeds in four), a
    // standalone founder's refused start is answered with learned voters.
    for (voters, observers, seeds) in [("1", "4", "1000"), ("3", "2", "1000")] {
        sim(&[
            "--seeds".into(),
            seeds.into(),
            "--voters".into(),
            voters.into(),
            "--observers".into(),
            observers.into(),
            "--membership".into(),
        ])?;
    }
    // Planted bugs (one-line mistakes in one rule each) the random sweep must find on its own,
    // each run up to its first catch within the given number of seeds. A vote granted despite
    // a live leader shows only in a lease read served after the voters moved on, which needs a
    // quiet period of the workload; five voters build one soonest. Progress kept across
    // directories shows when an observer that lost its disk is added back at once (the sweep's
    // operator does so) and the leader judges it caught up by its lost disk. A voter change
    // before the epoch's first commit needs a change stranded on a cut-off leader and a new
    // leader changing voters at once (Raft's single-server change bug); four voters build it
    // soonest. A lease without its drift margin needs a slow-clocked leader cut off while
    // fast-clocked followers elect another: the seeds with clocks at the drift bound and a
    // leader-isolating adversary build it. Installing a snapshot the high watermark passed
    // needs an observer that, while downloading, learns a new epoch and probes its new leader,
    // which still holds the log far below that snapshot: the seeds where each replica keeps its
    // own log retention build it. Trusting the configured set on an emptied disk shows when
    // the standalone founder of a grown cluster loses its disk and is restarted with its file:
    // it leads a cluster of its own. First catching seeds are in the README.
    for (planted, voters, observers, membership, seeds) in [
        ("hw-counts-unsynced-leader", "3", "0", false, "1000"),
        ("skip-epoch-start-check", "3", "0", false, "1000"),
        ("ack-unsynced", "3", "0", false, "1000"),
        ("prevote-changes-state", "3", "0", false, "1000"),
        ("vote-while-leader-live", "5", "0", false, "1000"),
        ("stop-reprobing-after-stale-answer", "3", "2", false, "1000"),
        ("concurrent-changes", "3", "2", true, "1000"),
        ("no-campaign-when-removed", "1", "4", true, "1000"),
        ("stale-progress-across-directories", "3", "2", true, "1000"),
        ("change-before-commit", "4", "2", true, "1000"),
        ("lease-without-drift-margin", "3", "0", false, "1000"),
        ("install-old-snapshot", "3", "2", false, "1000"),
        ("bootstrap-on-empty-disk", "1", "4", true, "1000"),
    ] {
        let mut args: Vec<String> = [
            "--seeds",
            seeds,
            "--voters",
            voters,
            "--observers",
            observers,
            "--planted",
            planted,
            "--expect-catch",
        ]
        .map(String::from)
        .to_vec();
        if membership {
            args.push("--membership".into());
        }
        sim(&args)?;
    }
    // The read rule's negative control: a leader that counts any arriving fetch as a read
    // confirmation. It shows when a fetch that left before its sender helped elect a newer
    // leader arrives late at the old one, cut off but still leading, during a read round: the
    // leader-isolating adversary that holds (instead of losing) the messages to the leader
    // builds that.
    sim(&[
        "--seeds".into(),
        "1000".into(),
        "--count-arrivals".into(),
        "--expect-catch".into(),
    ])?;
    // The exhaustive, bounded model check of the core (debug build): every interleaving to a
    // small depth from a cold start, from an elected leader and from a second election, then
    // the planted bugs it catches, each at the depth of its shortest trace.
    explore(&["--start", "cold", "--depth", "5"].map(String::from))?;
    explore(&["--start", "leader", "--depth", "5"].map(String::from))?;
    explore(&["--start", "failover", "--depth", "4"].map(String::from))?;
    for (planted, start, depth) in [
        ("hw-counts-unsynced-leader", "leader", "4"),
        ("ack-unsynced", "leader", "4"),
        ("prevote-changes-state", "cold", "2"),
        ("skip-epoch-start-check", "failover", "3"),
    ] {
        explore(
            &[
                "--start",
                start,
                "--depth",
                depth,
                "--planted",
                planted,
                "--expect-catch",
            ]
            .map(String::from),
        )?;
    }
    // The read rule's negative control: followers serving reads without the leader.
    explore(
        &[
            "--start",
            "leader",
            "--depth",
            "2",
            "--unsafe-reads",
            "--expect-catch",
        ]
        .map(String::from),
    )?;
    // The real driver under simulation: three voters, then five voters with two observers.
    sim(&["--driver".into(), "--seeds".into(), "2000".into()])?;
    sim(&[
        "--driver".into(),
        "--seeds".into(),
        "300".into(),
        "--voters".into(),
        "5".into(),
        "--observers".into(),
        "2".into(),
        "--sessions".into(),
        "6".into(),
    ])?;
    // Hosts of eight groups (three voters each, in rotation over five hosts; groups created
    // and dropped during the run; a host fault hits all its groups), without and with voter
    // changes and disk losses.
    for membership in [false, true] {
        let mut args: Vec<String> = [
            "--driver",
            "--seeds",
            if membership { "200" } else { "300" },
            "--voters",
            "3",
            "--observers",
            "2",
            "--groups",
            "8",
        ]
        .map(String::from)
        .to_vec();
        if membership {
            args.push("--membership".into());
        }
        sim(&args)?;
    }
    // The real driver with voter changes, disk losses and the operator's restarts (a lost disk
    // with the host's own file or learned voters, an edited voter list): growing from one
    // voter, and from three; then the planted bug only the driver simulator's liveness check
    // finds, and the start that trusts the configured set on an emptied disk.
    for (voters, observers) in [("3", "2"), ("1", "4")] {
        sim(&[
            "--driver",
            "--seeds",
            "2000",
            "--voters",
            voters,
            "--observers",
            observers,
            "--membership",
        ]
        .map(String::from))?;
    }
    sim(&[
        "--driver",
        "--seeds",
        "1000",
        "--voters",
        "1",
        "--observers",
        "4",
        "--membership",
        "--planted",
        "ignore-later-candidates",
        "--expect-catch",
    ]
    .map(String::from))?;
    sim(&[
        "--driver",
        "--seeds",
        "1000",
        "--voters",
        "1",
        "--observers",
        "4",
        "--membership",
        "--planted",
        "bootstrap-on-empty-disk",
        "--expect-catch",
    ]
    .map(String::from))?;
    // The bench harness as a smoke test, in the test profile (no release build of everything):
    // it must produce every suite's figures; no timing is asserted. The cluster and failover
    // suites start the debug `raft-node` binary found next to `raft-bench`. Both binaries are
    // built with the test step's features, so that the build reuses what the tests compiled.
    run(
        "build binaries",
        cargo().args([
            "build",
            "--quiet",
            "--locked",
            "--workspace",
            "--all-features",
            "--bins",
        ]),
    )?;
    run(
        "bench smoke",
        Command::new(target_dir().join("debug").join("raft-bench"))
            .current_dir(root())
            .args(["--quick", "--check", "--json", "target/bench/quick.json"]),
    )?;
    println!(
        "ci: all checks passed in {:.0}s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Architecture rules that a compiler does not check (style.md, section 1).
fn tidy() -> Result<(), String> {
    println!("==> tidy");
    let out = cargo()
        .args([
            "tree",
            "-p",
            "raft-core",
            "-e",
            "normal",
            "--prefix",
            "none",
            "--locked",
        ])
        .output()
        .map_err(|e| format!("cargo tree: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "cargo tree failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let tree = String::from_utf8_lossy(&out.stdout);
    let forbidden = ["quinn", "rustls", "redb", "fjall", "rand"];
    for line in tree.lines() {
        let name = line.split_whitespace().next().unwrap_or_default();
        if forbidden.contains(&name) {
            return Err(format!("tidy: raft-core must not depend on {name}: {line}"));
        }
    }
    let protocol = root().join("raft-core/src/protocol");
    for entry in std::fs::read_dir(&protocol).map_err(|e| format!("{}: {e}", protocol.display()))? {
        let path = entry.map_err(|e| e.to_string())?.path();
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        for banned in [
            "tokio",
            "Instant::now",
            "SystemTime",
            "std::fs",
            "std::net",
            "thread_rng",
        ] {
            if text.contains(banned) {
                return Err(format!(
                    "tidy: {} names {banned}; the protocol is sans-IO",
                    path.display()
                ));
            }
        }
    }
    println!("<== tidy: ok");
    Ok(())
}

/// Cargo's target directory: `$CARGO_TARGET_DIR` (relative to the workspace) or `target`.
fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => root().join(dir),
        None => root().join("target"),
    }
}

fn bench(args: &[String]) -> Result<(), String> {
    // The cluster and failover suites run real `raft-node` processes: build the release binary
    // and name it, so that a stale one is never measured.
    run(
        "build raft-node",
        cargo().args([
            "build",
            "--quiet",
            "--release",
            "--locked",
            "-p",
            "raft-node",
        ]),
    )?;
    let target = target_dir();
    let mut cmd = cargo();
    cmd.env(
        "RAFT_BENCH_NODE_BIN",
        target.join("release").join("raft-node"),
    );
    cmd.args([
        "run",
        "--quiet",
        "--release",
        "--locked",
        "-p",
        "raft-bench",
        "--",
    ]);
    cmd.args(args);
    if !args.iter().any(|a| a == "--json") {
        cmd.args(["--json", "target/bench/results.json"]);
    }
    run("bench", &mut cmd)
}

fn explore(args: &[String]) -> Result<(), String> {
    let mut cmd = cargo();
    cmd.args([
        "run",
        "--quiet",
        "--locked",
        "-p",
        "raft-core",
        "--features",
        "testing",
        "--bin",
        "raft-explore",
        "--",
    ]);
    cmd.args(args);
    run("raft-explore", &mut cmd)
}

fn sim(args: &[String]) -> Result<(), String> {
    let driver = args.iter().any(|a| a == "--driver");
    let args: Vec<&String> = args.iter().filter(|a| *a != "--driver").collect();
    let bin = if driver { "raft-dsim" } else { "raft-sim" };
    let mut cmd = cargo();
    cmd.args([
        "run",
        "--quiet",
        "--release",
        "--locked",
        "-p",
        "raft-core",
        "--features",
        if driver { "dsim" } else { "testing" },
        "--bin",
        bin,
        "--",
    ]);
    cmd.args(args);
    run(bin, &mut cmd)
}
