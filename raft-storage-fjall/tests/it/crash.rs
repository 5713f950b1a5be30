//! The SIGKILL crash test with real processes, from raft-core's shared harness
//! ([`raft_core::testing::crash`]): `RAFT_CRASH_KILLS` sets the number of kills (default 20),
//! `RAFT_CRASH_SEED` replays a run.

use std::path::Path;

use raft_core::io::StorageError;
use raft_core::testing::crash;
use raft_storage_fjall::{FjallStore, Options};

fn open(dir: &Path) -> Result<FjallStore, StorageError> {
    FjallStore::open(dir, "crash", Options::default())
}

/// Goal: a SIGKILL at any moment loses nothing acknowledged and invents nothing. Method: see
/// [`crash::run_kills`]. The children are this test binary re-run with this test selected: in
/// them `child_main` appends until killed and never returns.
#[test]
fn crash_kills_lose_nothing_acknowledged() {
    crash::child_main(open);
    let dir = tempfile::tempdir().expect("temporary directory");
    crash::run_kills(
        "crash::crash_kills_lose_nothing_acknowledged",
        dir.path(),
        open,
    );
}
