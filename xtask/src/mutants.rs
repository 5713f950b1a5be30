//! `cargo xtask mutants`: mutation testing of raft-core with `cargo mutants` (installed when
//! missing), then the kill rate per file.
//!
//! The tests a mutant must fail and the time a hang may cost are set in `.cargo/mutants.toml`.
//! A mutant counts as killed when a test fails or times out (a hang is a failure, only a slow
//! one); it survives when every test passes. Unviable mutants (they do not build) count for
//! nothing. The run fails when any mutant survives, so that a shard in CI keeps the tests
//! honest: a survivor is either killed by a new test or excluded in `.cargo/mutants.toml`
//! with the reason it cannot be told apart from the original.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use crate::{cargo, root, run};

/// The files mutated when no `--file` is given: the protocol layer.
const DEFAULT_FILES: &str = "raft-core/src/protocol/*.rs";

/// The cargo-mutants release the workflow was written against (its output files).
const CARGO_MUTANTS_VERSION: &str = "27.1.0";

/// `cargo xtask mutants [--file GLOB]... [--shard K/N] [--in-place] [--list]`.
pub fn mutants(args: &[String]) -> Result<(), String> {
    let mut files = Vec::new();
    let mut passthrough = Vec::new();
    let mut list = false;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--file" | "--shard" => {
                let value = it
                    .next()
                    .ok_or_else(|| format!("{arg} needs a value"))?
                    .clone();
                if arg == "--file" {
                    files.push(value);
                } else {
                    passthrough.extend([arg.clone(), value]);
                }
            }
            "--in-place" => passthrough.push(arg.clone()),
            "--list" => list = true,
            other => return Err(format!("mutants: unknown argument {other}")),
        }
    }
    if files.is_empty() {
        files.push(DEFAULT_FILES.to_string());
    }
    ensure_installed()?;
    check_exclusions()?;
    let out = crate::target_dir().join("mutants");
    std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    let mut cmd = cargo();
    cmd.arg("mutants");
    for f in &files {
        cmd.args(["--file", f]);
    }
    if list {
        cmd.arg("--list");
        return run("mutants --list", &mut cmd);
    }
    cmd.args(passthrough)
        .arg("--output")
        .arg(&out)
        .args(["--no-shuffle", "--colors", "never"]);
    // Without debug info a mutant's rebuild of raft-core's test targets takes about half as
    // long (6 s instead of 12 here); the first mutant pays one rebuild of the dependencies.
    cmd.env("CARGO_PROFILE_DEV_DEBUG", "0")
        .env("CARGO_PROFILE_TEST_DEBUG", "0");
    // Lists left by an earlier run must not stand in for this one's if it fails to start.
    let lists = out.join("mutants.out");
    if lists.exists() {
        std::fs::remove_dir_all(&lists).map_err(|e| format!("{}: {e}", lists.display()))?;
    }
    // cargo-mutants exits non-zero when a mutant survives or times out; the verdict is
    // ours, from its lists.
    let _ = run("mutants", &mut cmd);
    let mut report = Report::read(&lists)?;
    // cargo-mutants does not apply `exclude_re` to every kind of mutant (27.1 still tests
    // "delete field" mutants); one that survives and matches an exclusion is set aside here.
    let excluded = report.set_aside(&exclusions()?);
    for line in &excluded {
        println!("excluded (equivalent, see .cargo/mutants.toml): {line}");
    }
    print!("{}", report.table());
    if report.missed() > 0 {
        return Err(format!(
            "{} mutant(s) survived ({}): kill each with a test, or exclude it in \
             .cargo/mutants.toml with the reason it is equivalent",
            report.missed(),
            lists.join("missed.txt").display()
        ));
    }
    if report.total() == 0 {
        return Err("no mutant was tested".into());
    }
    Ok(())
}

/// Fails when an exclusion of `.cargo/mutants.toml` names no mutant of the protocol layer as
/// it is now: exclusions name mutants by line and column, so an edit above one moves the
/// mutant out from under it, and the equivalent mutant would then be reported as a survivor
/// (or, worse, the pattern would come to match another mutant).
fn check_exclusions() -> Result<(), String> {
    let listed = cargo()
        .args(["mutants", "--no-config", "--list", "--file", DEFAULT_FILES])
        .current_dir(root())
        .output()
        .map_err(|e| format!("cargo mutants --list: {e}"))?;
    if !listed.status.success() {
        return Err(format!(
            "cargo mutants --list failed: {}",
            String::from_utf8_lossy(&listed.stderr)
        ));
    }
    let names = String::from_utf8_lossy(&listed.stdout);
    let stale: Vec<String> = exclusions()?
        .iter()
        .filter(|re| !names.lines().any(|n| re.is_match(n)))
        .map(|re| re.as_str().to_string())
        .collect();
    if stale.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "exclusions in .cargo/mutants.toml that match no mutant (the code moved?): {}",
            stale.join(", ")
        ))
    }
}

/// The `exclude_re` patterns of `.cargo/mutants.toml`.
fn exclusions() -> Result<Vec<regex::Regex>, String> {
    let path = root().join(".cargo").join("mutants.toml");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let table: toml::Table = text
        .parse()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let patterns = match table.get("exclude_re") {
        None => return Ok(Vec::new()),
        Some(toml::Value::Array(items)) => items,
        Some(_) => return Err(format!("{}: exclude_re is not a list", path.display())),
    };
    patterns
        .iter()
        .map(|p| {
            let p = p
                .as_str()
                .ok_or_else(|| format!("{}: exclude_re holds a non-string", path.display()))?;
            regex::Regex::new(p).map_err(|e| format!("{}: {p}: {e}", path.display()))
        })
        .collect()
}

fn ensure_installed() -> Result<(), String> {
    let installed = cargo()
        .args(["mutants", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if installed {
        return Ok(());
    }
    run(
        "install cargo-mutants",
        Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into())).args([
            "install",
            "cargo-mutants",
            "--locked",
            "--version",
            CARGO_MUTANTS_VERSION,
        ]),
    )
}

/// Outcomes per source file.
#[derive(Default, Debug, PartialEq, Eq)]
struct Counts {
    caught: u32,
    timeout: u32,
    missed: u32,
    unviable: u32,
}

#[derive(Debug)]
struct Report {
    files: BTreeMap<String, Counts>,
    /// The survivors, one line each as cargo-mutants names them.
    missed_lines: Vec<String>,
}

impl Report {
    /// Reads cargo-mutants' lists (`caught.txt` and so on: one mutant per line, starting with
    /// `path:line:column:`).
    fn read(dir: &Path) -> Result<Report, String> {
        let mut report = Report {
            files: BTreeMap::new(),
            missed_lines: Vec::new(),
        };
        for (name, field) in [
            ("caught.txt", 0),
            ("timeout.txt", 1),
            ("missed.txt", 2),
            ("unviable.txt", 3),
        ] {
            let path = dir.join(name);
            let text = std::fs::read_to_string(&path)
                .map_err(|e| format!("{}: {e} (did cargo mutants run?)", path.display()))?;
            report.add(&text, field);
        }
        Ok(report)
    }

    fn add(&mut self, text: &str, field: u8) {
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            if field == 2 {
                self.missed_lines.push(line.to_string());
            }
            let file = line.split(':').next().unwrap_or(line).to_string();
            let c = self.files.entry(file).or_default();
            match field {
                0 => c.caught += 1,
                1 => c.timeout += 1,
                2 => c.missed += 1,
                _ => c.unviable += 1,
            }
        }
    }

    /// Takes the survivors that match an exclusion out of the counts (they are not viable
    /// mutants: no test can tell them apart) and returns them.
    fn set_aside(&mut self, exclusions: &[regex::Regex]) -> Vec<String> {
        let (excluded, kept): (Vec<String>, Vec<String>) = std::mem::take(&mut self.missed_lines)
            .into_iter()
            .partition(|line| exclusions.iter().any(|re| re.is_match(line)));
        self.missed_lines = kept;
        for line in &excluded {
            let file = line.split(':').next().unwrap_or(line);
            if let Some(c) = self.files.get_mut(file) {
                c.missed -= 1;
            }
        }
        excluded
    }

    fn missed(&self) -> u32 {
        self.files.values().map(|c| c.missed).sum()
    }

    fn total(&self) -> u32 {
        self.files
            .values()
            .map(|c| c.caught + c.timeout + c.missed + c.unviable)
            .sum()
    }

    /// One line per file: killed (caught + timed out) of the viable mutants, and the rate.
    fn table(&self) -> String {
        let mut s = format!(
            "{:<44} {:>7} {:>7} {:>7} {:>8} {:>7}\n",
            "file", "caught", "timeout", "missed", "unviable", "killed"
        );
        for (file, c) in &self.files {
            let viable = c.caught + c.timeout + c.missed;
            let rate = if viable == 0 {
                "-".to_string()
            } else {
                format!(
                    "{:.1}%",
                    100.0 * f64::from(c.caught + c.timeout) / f64::from(viable)
                )
            };
            s += &format!(
                "{file:<44} {:>7} {:>7} {:>7} {:>8} {rate:>7}\n",
                c.caught, c.timeout, c.missed, c.unviable
            );
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_are_counted_per_file_and_hangs_count_as_killed() {
        let mut r = Report {
            files: BTreeMap::new(),
            missed_lines: Vec::new(),
        };
        r.add(
            "raft-core/src/protocol/log.rs:10:5: replace a with b\n\
             raft-core/src/protocol/log.rs:12:5: replace c with d\n",
            0,
        );
        r.add("raft-core/src/protocol/log.rs:20:9: replace e with f\n", 1);
        r.add(
            "raft-core/src/protocol/read.rs:7:1: replace g with h\n\n",
            2,
        );
        r.add("raft-core/src/protocol/read.rs:9:1: replace i with j\n", 3);
        assert_eq!(
            r.files["raft-core/src/protocol/log.rs"],
            Counts {
                caught: 2,
                timeout: 1,
                missed: 0,
                unviable: 0
            }
        );
        assert_eq!((r.missed(), r.total()), (1, 5));
        let table = r.table();
        assert!(table.contains("100.0%"), "{table}");
        assert!(table.contains("0.0%"), "{table}");
    }

    #[test]
    fn survivors_matching_an_exclusion_are_set_aside() {
        let mut r = Report {
            files: BTreeMap::new(),
            missed_lines: Vec::new(),
        };
        r.add(
            "raft-core/src/protocol/a.rs:1:1: delete field x from struct S expression in f\n\
             raft-core/src/protocol/a.rs:2:1: replace < with <= in g\n",
            2,
        );
        let exclusions = [regex::Regex::new("a\\.rs:1:1: delete field x").unwrap()];
        let excluded = r.set_aside(&exclusions);
        assert_eq!(excluded.len(), 1);
        assert!(excluded[0].contains("delete field x"));
        assert_eq!((r.missed(), r.total()), (1, 1));
    }

    #[test]
    fn the_checked_in_exclusions_parse_and_name_their_mutants() {
        let exclusions = exclusions().expect(".cargo/mutants.toml parses");
        let names = [
            "raft-core/src/protocol/election.rs:370:21: delete field directory from struct \
             super::roles::Progress expression in Replica::become_leader",
            "raft-core/src/protocol/read.rs:373:38: replace > with >= in Replica::leader_poll_reads",
        ];
        for name in names {
            assert!(exclusions.iter().any(|re| re.is_match(name)), "{name}");
        }
        let kept = "raft-core/src/protocol/read.rs:373:38: replace > with < in \
                    Replica::leader_poll_reads";
        assert!(!exclusions.iter().any(|re| re.is_match(kept)));
    }
}
