//! The RESP and config fuzz targets' properties under the stable toolchain: every file of the
//! checked-in corpus (`fuzz/corpus/<target>/`) and deterministic mutations of each are fed to
//! the same `raft_node::fuzzing` checks the libFuzzer targets call.

use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use raft_core::fuzzing::{self as core_fuzzing, CountingAlloc};
use raft_node::fuzzing;

// The allocation bound of every check is measured through this allocator.
#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// Mutations per target, spread over its corpus files; `FUZZ_REPLAY_MUTANTS` overrides it.
const MUTANTS_PER_TARGET: usize = 5_000;

fn replay(target: &str, check: fn(&[u8])) {
    let _ = Box::new(0u8); // make sure the counting allocator has served once
    assert!(
        core_fuzzing::alloc_probe_active(),
        "the counting allocator is not installed"
    );
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("corpus entry").path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{} holds no corpus", dir.display());
    let mutants = std::env::var("FUZZ_REPLAY_MUTANTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(MUTANTS_PER_TARGET);
    let per_file = mutants.div_ceil(files.len()) as u64;
    for file in &files {
        let input = std::fs::read(file).expect("corpus file");
        run_one(check, &input, || file.display().to_string());
        for seed in 0..per_file {
            let mutant = core_fuzzing::mutate(&input, seed);
            run_one(check, &mutant, || {
                format!("{} mutated with seed {seed}", file.display())
            });
        }
    }
}

fn run_one(check: fn(&[u8]), input: &[u8], name: impl Fn() -> String) {
    if let Err(panic) = catch_unwind(AssertUnwindSafe(|| check(input))) {
        eprintln!(
            "property failed on {}: input {:?}",
            name(),
            String::from_utf8_lossy(input)
        );
        resume_unwind(panic);
    }
}

#[test]
fn resp_corpus() {
    replay("resp", fuzzing::check_resp);
}

#[test]
fn config_corpus() {
    replay("config", fuzzing::check_config);
}
