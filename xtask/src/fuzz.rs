//! The fuzz targets in `fuzz/` (cargo-fuzz, libFuzzer): `cargo xtask fuzz [TARGET...]
//! [--secs N] [--cmin]` and the smoke step of `cargo xtask ci` (alone: `--smoke`).
//!
//! libFuzzer needs a nightly toolchain and `cargo-fuzz`; neither is installed from here (CI
//! must not download tools), so without them a run says what is missing and the smoke step
//! keeps only the stable corpus replay.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::{cargo, root, run, target_dir};

/// Every target in `fuzz/Cargo.toml`, in the order they are run.
pub const TARGETS: [&str; 9] = [
    "wire_request",
    "wire_response",
    "record",
    "voters",
    "log_meta",
    "election_state",
    "stored_batch",
    "resp",
    "config",
];

/// The whole libFuzzer part of the CI smoke step, shared among the targets.
const SMOKE_SECS_TOTAL: u64 = 80;

/// Inputs longer than this are not generated: every decoder's interesting structure fits, and
/// short inputs keep the executions fast.
const MAX_LEN: u32 = 4096;

/// `cargo xtask fuzz [TARGET...] [--secs N] [--cmin] | --smoke`.
pub fn fuzz(args: &[String]) -> Result<(), String> {
    if args.iter().any(|a| a == "--smoke") {
        return smoke();
    }
    let mut secs = 60u64;
    let mut cmin = false;
    let mut targets = Vec::new();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--secs" => {
                secs = it
                    .next()
                    .and_then(|v| v.parse().ok())
                    .ok_or("--secs needs a number of seconds")?;
            }
            "--cmin" => cmin = true,
            t if TARGETS.contains(&t) => targets.push(t),
            other => {
                return Err(format!(
                    "unknown fuzz target or flag {other:?}; targets: {}",
                    TARGETS.join(", ")
                ))
            }
        }
    }
    if targets.is_empty() {
        targets = TARGETS.to_vec();
    }
    if let Some(missing) = missing_tools() {
        return Err(format!("cannot fuzz: {missing}"));
    }
    build()?;
    for target in targets {
        if cmin {
            minimise(target)?;
        } else {
            // New inputs go into the checked-in corpus: a long run is how it grows.
            run_target(target, secs, &[corpus(target)])?;
        }
    }
    Ok(())
}

/// The CI smoke step: the corpus replay under stable with more mutations than the test step
/// uses, then, when nightly and cargo-fuzz are already installed, a short libFuzzer run of
/// every target that starts from the corpus and writes nothing into it.
pub fn smoke() -> Result<(), String> {
    run(
        "fuzz corpus replay",
        cargo()
            .args([
                "test",
                "--quiet",
                "--locked",
                "--workspace",
                "--all-features",
                "--test",
                "fuzz_corpus",
            ])
            .env("FUZZ_REPLAY_MUTANTS", "100000"),
    )?;
    if let Some(missing) = missing_tools() {
        println!("fuzz smoke: libFuzzer runs skipped: {missing}");
        return Ok(());
    }
    build()?;
    let secs = std::env::var("FUZZ_SMOKE_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(SMOKE_SECS_TOTAL / TARGETS.len() as u64);
    for target in TARGETS {
        let scratch = target_dir().join("fuzz").join("smoke-corpus").join(target);
        std::fs::create_dir_all(&scratch).map_err(|e| format!("{}: {e}", scratch.display()))?;
        // libFuzzer writes new inputs into the first directory only.
        run_target(target, secs, &[scratch, corpus(target)])?;
    }
    Ok(())
}

/// What is missing for libFuzzer runs, or `None` when nightly and cargo-fuzz are there.
fn missing_tools() -> Option<String> {
    let works = |args: &[&str]| {
        nightly()
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !works(&["--version"]) {
        return Some(
            "no nightly toolchain through rustup (rustup toolchain install nightly)".into(),
        );
    }
    if !works(&["fuzz", "--version"]) {
        return Some("cargo-fuzz is not installed (cargo install cargo-fuzz)".into());
    }
    None
}

/// `cargo +nightly` through the rustup proxy on `PATH`, in the repository root, without the
/// variables the stable cargo running xtask set (they would pin the stable toolchain).
fn nightly() -> Command {
    let mut cmd = Command::new("cargo");
    cmd.arg("+nightly").current_dir(root());
    for var in [
        "CARGO",
        "RUSTC",
        "RUSTDOC",
        "RUSTUP_TOOLCHAIN",
        "RUSTC_WRAPPER",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

fn fuzz_target_dir() -> PathBuf {
    target_dir().join("fuzz")
}

fn corpus(target: &str) -> PathBuf {
    root().join("fuzz").join("corpus").join(target)
}

fn build() -> Result<(), String> {
    let dir = fuzz_target_dir();
    run(
        "fuzz build",
        nightly().args(["fuzz", "build", "--target-dir"]).arg(&dir),
    )
}

/// Runs one target for `secs` seconds on `corpora`; libFuzzer's output goes to a log file,
/// of which the summary (or, on a failure, the end) is printed.
fn run_target(target: &str, secs: u64, corpora: &[PathBuf]) -> Result<(), String> {
    let logs = fuzz_target_dir().join("logs");
    std::fs::create_dir_all(&logs).map_err(|e| format!("{}: {e}", logs.display()))?;
    let log_path = logs.join(format!("{target}.log"));
    let log =
        std::fs::File::create(&log_path).map_err(|e| format!("{}: {e}", log_path.display()))?;
    println!(
        "==> fuzz {target} for {secs}s (log: {})",
        log_path.display()
    );
    let started = Instant::now();
    let status = nightly()
        .args(["fuzz", "run", target, "--target-dir"])
        .arg(fuzz_target_dir())
        .args(corpora)
        .arg("--")
        .arg(format!("-max_total_time={secs}"))
        .arg(format!("-max_len={MAX_LEN}"))
        .stdout(log.try_clone().map_err(|e| e.to_string())?)
        .stderr(log)
        .status()
        .map_err(|e| format!("cargo fuzz run: {e}"))?;
    let text = std::fs::read_to_string(&log_path).unwrap_or_default();
    println!(
        "<== fuzz {target}: {:.0}s, {}",
        started.elapsed().as_secs_f64(),
        summary(&text)
    );
    if status.success() {
        return Ok(());
    }
    let tail: Vec<&str> = text.lines().rev().take(40).collect();
    for line in tail.into_iter().rev() {
        eprintln!("    {line}");
    }
    Err(format!(
        "fuzz target {target} failed ({status}); the input is under {}",
        Path::new("fuzz/artifacts").join(target).display()
    ))
}

/// Shrinks a target's corpus to the inputs that keep its coverage. The named inputs (`seed-*`
/// from the samples, `regress-*` that once failed) stay even where others cover them.
fn minimise(target: &str) -> Result<(), String> {
    let dir = corpus(target);
    let mut kept = Vec::new();
    for entry in std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))? {
        let path = entry.map_err(|e| e.to_string())?.path();
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        if name.starts_with("seed-") || name.starts_with("regress-") {
            let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            kept.push((path, bytes));
        }
    }
    run(
        &format!("fuzz cmin {target}"),
        nightly()
            .args(["fuzz", "cmin", target, "--target-dir"])
            .arg(fuzz_target_dir())
            .arg(&dir)
            .arg("--")
            .arg(format!("-max_len={MAX_LEN}")),
    )?;
    for (path, bytes) in kept {
        std::fs::write(&path, bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

/// The executions, coverage and corpus size from libFuzzer's last status line.
fn summary(log: &str) -> String {
    let done = log.lines().rev().find(|l| l.starts_with("Done "));
    let status = log
        .lines()
        .rev()
        .find(|l| l.starts_with('#') && l.contains("cov:"));
    match (done, status) {
        (Some(done), Some(status)) => {
            let fields: Vec<&str> = status.split_whitespace().collect();
            let field = |name: &str| {
                fields
                    .iter()
                    .position(|f| *f == name)
                    .and_then(|i| fields.get(i + 1))
                    .copied()
                    .unwrap_or("?")
            };
            format!(
                "{} (cov {}, ft {}, corpus {})",
                done.trim(),
                field("cov:"),
                field("ft:"),
                field("corp:")
            )
        }
        _ => "no libFuzzer summary in the log".into(),
    }
}
