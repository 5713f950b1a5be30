//! The one integration test binary of raft-storage-fjall: the raft-core storage conformance suite,
//! the format and cluster-id checks, crash tests with real processes ([`crash`]), the sync of
//! a recovered journal ([`recovery_sync`]), and the groups of [`FjallGroups`](raft_storage_fjall::FjallGroups) ([`groups`]).

mod crash;
mod groups;
mod recovery_sync;

use std::sync::Arc;

use async_trait::async_trait;
use raft_core::io::StorageError;
use raft_core::testing::storage::{records, run_all, StorageFixture};
use raft_core::Offset;
use raft_storage_fjall::{corrupt_record, FjallStore, Options};

/// A fresh store in a temporary directory.
struct FjallFixture {
    dir: tempfile::TempDir,
}

#[async_trait]
impl StorageFixture for FjallFixture {
    type Log = FjallStore;
    type Election = FjallStore;

    async fn open(&mut self) -> Result<(Arc<FjallStore>, Arc<FjallStore>), StorageError> {
        let store = Arc::new(FjallStore::open(
            self.dir.path(),
            "suite",
            Options::default(),
        )?);
        Ok((store.clone(), store))
    }

    async fn corrupt(&mut self, offset: Offset) -> Result<(), StorageError> {
        corrupt_record(self.dir.path(), offset)
    }

    fn fail_next_write(&self, log: &FjallStore) -> bool {
        log.inject_write_failure();
        true
    }
}

fn fixture() -> FjallFixture {
    FjallFixture {
        dir: tempfile::tempdir().expect("temporary directory"),
    }
}

/// Goal: fjall keeps every promise of the storage traits. Method: the raft-core suite, each check
/// on a fresh directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fjall_passes_the_storage_conformance_suite() {
    let report = run_all(|| async { fixture() }).await;
    assert!(
        report.skipped.is_empty(),
        "skipped checks: {:?}",
        report.skipped
    );
    assert_eq!(report.passed.len(), 15, "checks run: {:?}", report.passed);
}

/// Goal: a directory of another cluster is refused. Method: create it as "a", open it as "b".
#[tokio::test]
async fn opening_another_clusters_directory_is_incompatible() {
    let dir = tempfile::tempdir().unwrap();
    drop(FjallStore::open(dir.path(), "a", Options::default()).unwrap());
    match FjallStore::open(dir.path(), "b", Options::default()) {
        Err(StorageError::Incompatible(_)) => {}
        other => panic!("expected Incompatible, got {other:?}"),
    }
    FjallStore::open(dir.path(), "a", Options::default()).expect("the right cluster opens");
}

/// Goal: a directory written by a newer format is refused. Method: set the stored version past
/// both layouts this build knows with fjall directly, then open.
#[tokio::test]
async fn opening_a_newer_format_is_incompatible() {
    let dir = tempfile::tempdir().unwrap();
    drop(FjallStore::open(dir.path(), "a", Options::default()).unwrap());
    {
        let db = fjall::Database::builder(dir.path()).open().unwrap();
        let meta = db
            .keyspace("meta", fjall::KeyspaceCreateOptions::default)
            .unwrap();
        let newer = (raft_storage_fjall::GROUPS_FORMAT_VERSION + 1).to_le_bytes();
        meta.insert("format", newer.to_vec()).unwrap();
        db.persist(fjall::PersistMode::SyncAll).unwrap();
    }
    match FjallStore::open(dir.path(), "a", Options::default()) {
        Err(StorageError::Incompatible(msg)) => assert!(msg.contains("newer"), "{msg}"),
        other => panic!("expected Incompatible, got {other:?}"),
    }
}

/// Goal: both sync modes work end to end. Method: append, reopen, read back.
#[tokio::test]
async fn every_sync_mode_round_trips() {
    use raft_core::io::LogStore;
    use raft_storage_fjall::SyncMode;
    for mode in [SyncMode::Data, SyncMode::All] {
        let dir = tempfile::tempdir().unwrap();
        let options = Options {
            sync_mode: mode,
            ..Options::default()
        };
        let recs = records(0, 50, 1, 100);
        {
            let store = FjallStore::open(dir.path(), "a", options.clone()).unwrap();
            store.append(&recs).await.unwrap();
        }
        let store = FjallStore::open(dir.path(), "a", options).unwrap();
        assert_eq!(
            store.read(Offset(0), Offset(50), u64::MAX).await.unwrap(),
            recs,
            "{mode:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fjall_snapshots_pass_the_snapshot_conformance_suite() {
    let root = tempfile::tempdir().expect("temp dir");
    let base = root.path().to_path_buf();
    raft_core::testing::snapshots::run_all(move |loc| {
        let dir = base.join(loc.to_string());
        async move { raft_storage_fjall::open_snapshots(dir).expect("open snapshots") }
    })
    .await;
}
