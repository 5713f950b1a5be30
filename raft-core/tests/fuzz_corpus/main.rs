//! The fuzz targets' properties under the stable toolchain: every file of the checked-in corpus
//! (`fuzz/corpus/<target>/`, crashes found earlier included) and deterministic mutations of
//! each are fed to the same `raft_core::fuzzing` checks the libFuzzer targets call, so a CI
//! without nightly still holds the decoders to them.

use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use raft_core::fuzzing::{self, CountingAlloc};

// The allocation bound of every check is measured through this allocator.
#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// Mutations per target, spread over its corpus files; `FUZZ_REPLAY_MUTANTS` overrides it for
/// a longer run.
const MUTANTS_PER_TARGET: usize = 20_000;

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target)
}

/// Feeds every corpus file of `target`, then mutations of them, to `check`; a failure names
/// the file and the mutation seed that reproduce it.
fn replay(target: &str, check: fn(&[u8])) {
    let _ = Box::new(0u8); // make sure the counting allocator has served once
    assert!(
        fuzzing::alloc_probe_active(),
        "the counting allocator is not installed"
    );
    let dir = corpus_dir(target);
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
        run_one(check, &input, || format!("{}", file.display()));
        for seed in 0..per_file {
            let mutant = fuzzing::mutate(&input, seed);
            run_one(check, &mutant, || {
                format!("{} mutated with seed {seed}", file.display())
            });
        }
    }
}

fn run_one(check: fn(&[u8]), input: &[u8], name: impl Fn() -> String) {
    if let Err(panic) = catch_unwind(AssertUnwindSafe(|| check(input))) {
        eprintln!("property failed on {}: input {:02x?}", name(), input);
        resume_unwind(panic);
    }
}

#[test]
fn wire_request_corpus() {
    replay("wire_request", fuzzing::check_request_frame);
}

#[test]
fn wire_response_corpus() {
    replay("wire_response", fuzzing::check_response_frame);
}

#[test]
fn record_corpus() {
    replay("record", fuzzing::check_record);
}

#[test]
fn log_meta_corpus() {
    replay("log_meta", fuzzing::check_log_meta);
}

#[test]
fn election_state_corpus() {
    replay("election_state", fuzzing::check_election_state);
}

#[test]
fn stored_batch_corpus() {
    replay("stored_batch", fuzzing::check_stored_batch);
}

mod seeds;

/// The `seed-*` files of the corpus are the golden frames and sample stored values of this
/// build: a format change that leaves them stale fails here. `FUZZ_WRITE_SEEDS=1 cargo test
/// -p raft-core --test fuzz_corpus seed_corpus` rewrites them.
#[test]
fn seed_corpus_matches_the_formats() {
    let write = std::env::var_os("FUZZ_WRITE_SEEDS").is_some();
    let mut stale = Vec::new();
    for (target, name, bytes) in seeds::all() {
        let dir = corpus_dir(target);
        let path = dir.join(format!("seed-{name}"));
        if write {
            std::fs::create_dir_all(&dir).expect("corpus directory");
            std::fs::write(&path, &bytes).expect("seed file");
        } else if std::fs::read(&path).ok().as_deref() != Some(&bytes[..]) {
            stale.push(path.display().to_string());
        }
    }
    assert!(
        stale.is_empty(),
        "stale seeds (rewrite with FUZZ_WRITE_SEEDS=1): {stale:?}"
    );
}

#[test]
fn voters_corpus() {
    replay("voters", fuzzing::check_voters);
}
