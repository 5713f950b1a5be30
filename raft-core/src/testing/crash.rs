//! The crash test with real processes, shared by the disk backends: a child (the backend's test
//! binary, re-run on one test with an environment variable set) appends to a store and prints
//! every acknowledged end offset; the parent SIGKILLs it at a random moment, reopens the store and
//! checks it against what was acknowledged and what the child could have written.
//!
//! A backend's crash test calls [`child_main`] first (it returns at once in a normal run, and in
//! the child appends until killed) and then [`run_kills`] with its own name, so that the
//! children are the same test re-run:
//!
//! ```text
//! #[test]
//! fn crash_kills_lose_nothing_acknowledged() {
//!     let open = |dir: &Path| MyStore::open(dir);
//!     raft_core::testing::crash::child_main(open);
//!     let dir = tempfile::tempdir().unwrap();
//!     raft_core::testing::crash::run_kills("crash_kills_lose_nothing_acknowledged", dir.path(), open);
//! }
//! ```
//!
//! `RAFT_CRASH_KILLS` sets the number of kills (default 20, what CI runs; a few hundred for the
//! full run); `RAFT_CRASH_SEED` replays a run.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::io::{ElectionStore, EpochStart, LogStore, StorageError};
use crate::testing::storage::record;
use crate::types::{ElectionState, Epoch, Offset, ReplicaId};

const DIR_ENV: &str = "RAFT_CRASH_CHILD_DIR";
const EPOCH_ENV: &str = "RAFT_CRASH_CHILD_EPOCH";
/// The most records one append of the child carries: the bound on what may appear beyond the
/// last acknowledgement (the child has one append in flight at a time).
const BATCH_MAX: u64 = 32;
/// The child saves its election state after every this many appends.
const SAVE_EVERY: u64 = 4;

/// The payload length the child writes at `offset`: mostly small, sometimes large.
fn len_for(offset: u64) -> usize {
    if offset.is_multiple_of(97) {
        40_000
    } else {
        1 + (offset.wrapping_mul(7919) % 600) as usize
    }
}

/// A small deterministic generator, so a seed replays a run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// The child: appends batches forever (until killed), printing `ack <end>` after each append
/// returns and `saved <n>` after each election-state save returns. Returns at once when the
/// parent's environment is not set (a normal `cargo test` run).
pub fn child_main<S, F>(open: F)
where
    S: LogStore + ElectionStore,
    F: Fn(&Path) -> Result<S, StorageError>,
{
    let Ok(dir) = std::env::var(DIR_ENV) else {
        return;
    };
    let epoch: u32 = std::env::var(EPOCH_ENV)
        .expect("epoch")
        .parse()
        .expect("epoch number");
    runtime().block_on(async {
        let store = open(Path::new(&dir)).expect("child opens the store");
        let state = store.state().await.expect("child reads the state");
        println!("ready {}", state.end.offset.0);
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ u64::from(epoch));
        let mut next = state.end.offset.0;
        for appends in 1.. {
            let n = 1 + rng.below(BATCH_MAX);
            let batch: Vec<_> = (next..next + n)
                .map(|o| record(o, epoch, len_for(o)))
                .collect();
            store.append(&batch).await.expect("child append");
            next += n;
            println!("ack {next}");
            if appends % SAVE_EVERY == 0 {
                let voted_for = Some(ReplicaId(appends as u32));
                let saved = ElectionState {
                    epoch: Epoch(epoch),
                    voted_for,
                    voted_directory: None,
                    leader: None,
                };
                store.save(&saved).await.expect("child save");
                println!("saved {appends}");
            }
        }
    });
}

/// What the child said before it died.
#[derive(Default)]
struct Heard {
    ready_end: Option<u64>,
    acked_end: Option<u64>,
    saved: Option<u64>,
}

impl Heard {
    /// Takes the `word number` pairs of a line (libtest may print its own words before them).
    fn take(&mut self, line: &str) {
        let words: Vec<&str> = line.split_whitespace().collect();
        for pair in words.windows(2) {
            let Ok(n) = pair[1].parse() else { continue };
            match pair[0] {
                "ready" => self.ready_end = Some(n),
                "ack" => self.acked_end = Some(n),
                "saved" => self.saved = Some(n),
                _ => {}
            }
        }
    }
}

/// The parent: starts the child `kills` times, kills it after a random number of
/// acknowledgements plus a random delay, and checks the reopened store each time:
///
/// * it opens cleanly;
/// * every acknowledged record is there, byte for byte, with the epoch of the run that wrote it;
/// * nothing beyond what the child could have written appears (at most the one append in
///   flight, whose records must also be exactly what the child wrote);
/// * the epoch history matches the runs, and the election state is the last one acknowledged or
///   the one in flight after it.
///
/// `child_test` is the exact libtest name of the test that calls [`child_main`] (with its module
/// path, if any); `dir` an empty directory the store lives in.
pub fn run_kills<S, F>(child_test: &str, dir: &Path, open: F)
where
    S: LogStore + ElectionStore,
    F: Fn(&Path) -> Result<S, StorageError>,
{
    let kills: u32 = std::env::var("RAFT_CRASH_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let seed = std::env::var("RAFT_CRASH_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
                | 1
        });
    println!("crash test: {kills} kills, RAFT_CRASH_SEED={seed}");
    let mut rng = Rng(seed);
    let rt = runtime();
    // The epoch of every record the log holds, by offset: the model the store is checked against.
    let mut model: Vec<u32> = Vec::new();
    let mut election: Option<ElectionState> = None;
    let started = std::time::Instant::now();
    for run in 0..kills {
        let epoch = run + 1;
        let heard = run_child(child_test, dir, epoch, &mut rng);
        let ready = heard
            .ready_end
            .expect("the child opened the store and said ready");
        assert_eq!(
            ready,
            model.len() as u64,
            "run {run}: the child resumed at the end"
        );
        let store = open(dir).unwrap_or_else(|e| panic!("run {run}: reopen failed: {e}"));
        rt.block_on(async {
            let end = check_log(&store, run, ready, heard.acked_end, epoch, &model).await;
            model.resize(end as usize, epoch);
            election = check_election(&store, run, epoch, heard.saved, election).await;
        });
    }
    println!(
        "crash test: {kills} kills in {:?}, log of {} records",
        started.elapsed(),
        model.len()
    );
}

/// Runs one child until the kill and collects what it printed.
fn run_child(child_test: &str, dir: &Path, epoch: u32, rng: &mut Rng) -> Heard {
    let exe: PathBuf = std::env::current_exe().expect("test binary path");
    let mut child = Command::new(exe)
        .args(["--exact", child_test, "--nocapture", "--test-threads=1"])
        .env(DIR_ENV, dir)
        .env(EPOCH_ENV, epoch.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawning the child");
    let mut lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
    let mut heard = Heard::default();
    // Kill right after it is ready now and then, otherwise after some acknowledgements.
    let acks_wanted = if rng.below(5) == 0 {
        0
    } else {
        1 + rng.below(60)
    };
    let mut acks = 0;
    while heard.ready_end.is_none() || acks < acks_wanted {
        let Some(Ok(line)) = lines.next() else { break };
        let before = heard.acked_end;
        heard.take(&line);
        acks += u64::from(heard.acked_end != before);
    }
    std::thread::sleep(Duration::from_micros(rng.below(3000)));
    // Kill sends SIGKILL on Unix; an error means it already exited, which the checks catch.
    let _ = child.kill();
    for line in lines.map_while(Result::ok) {
        heard.take(&line);
    }
    let _ = child.wait().expect("reaping the child");
    heard
}

/// Checks the reopened log; returns its end.
async fn check_log<S: LogStore>(
    store: &S,
    run: u32,
    ready: u64,
    acked: Option<u64>,
    epoch: u32,
    model: &[u32],
) -> u64 {
    let state = store
        .state()
        .await
        .unwrap_or_else(|e| panic!("run {run}: state: {e}"));
    let end = state.end.offset.0;
    let acked = acked.unwrap_or(ready);
    assert!(
        end >= acked,
        "run {run}: log ends at {end} but {acked} was acknowledged"
    );
    assert!(
        end <= acked + BATCH_MAX,
        "run {run}: log ends at {end}, beyond what was written"
    );
    assert_eq!(state.start, Offset(0), "run {run}: nothing was purged");
    let mut from = 0;
    while from < end {
        let got = store
            .read(Offset(from), Offset(end), 4 << 20)
            .await
            .unwrap_or_else(|e| panic!("run {run}: read from {from}: {e}"));
        assert!(
            !got.is_empty(),
            "run {run}: read from {from} returned nothing"
        );
        for r in &got {
            let o = r.offset.0;
            let e = if o < ready { model[o as usize] } else { epoch };
            assert_eq!(
                r,
                &record(o, e, len_for(o)),
                "run {run}: record {o} differs"
            );
        }
        from += got.len() as u64;
    }
    let mut want: Vec<EpochStart> = Vec::new();
    for (o, &e) in model.iter().take(ready as usize).enumerate() {
        if want.last().is_none_or(|w| w.epoch.0 != e) {
            want.push(EpochStart {
                epoch: Epoch(e),
                start: Offset(o as u64),
            });
        }
    }
    if end > ready {
        want.push(EpochStart {
            epoch: Epoch(epoch),
            start: Offset(ready),
        });
    }
    assert_eq!(state.epochs, want, "run {run}: epoch history");
    end
}

/// Checks the reopened election state: the last acknowledged save, or the one in flight after it.
async fn check_election<S: ElectionStore>(
    store: &S,
    run: u32,
    epoch: u32,
    saved: Option<u64>,
    before: Option<ElectionState>,
) -> Option<ElectionState> {
    let loaded = store
        .load()
        .await
        .unwrap_or_else(|e| panic!("run {run}: load: {e}"));
    let of = |n: u64| ElectionState {
        epoch: Epoch(epoch),
        voted_for: Some(ReplicaId(n as u32)),
        voted_directory: None,
        leader: None,
    };
    let acked = saved.map(of).or(before);
    let in_flight = of(saved.unwrap_or(0) + SAVE_EVERY);
    assert!(
        loaded == acked || loaded == Some(in_flight),
        "run {run}: election state {loaded:?}, acknowledged {acked:?}"
    );
    loaded
}
