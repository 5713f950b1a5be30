//! The one integration test binary of raft-storage-redb: the raft-core storage conformance suite,
//! the format and cluster-id checks, crash tests with real processes ([`crash`]), and the groups
//! of [`RedbGroups`](raft_storage_redb::RedbGroups) ([`groups`]).

mod crash;
mod groups;

use std::sync::Arc;

use async_trait::async_trait;
use raft_core::io::StorageError;
use raft_core::testing::storage::{records, run_all, StorageFixture};
use raft_core::Offset;
use raft_storage_redb::{corrupt_record, Options, RedbStore};

/// A fresh store in a temporary directory.
struct RedbFixture {
    dir: tempfile::TempDir,
}

#[async_trait]
impl StorageFixture for RedbFixture {
    type Log = RedbStore;
    type Election = RedbStore;

    async fn open(&mut self) -> Result<(Arc<RedbStore>, Arc<RedbStore>), StorageError> {
        let store = Arc::new(RedbStore::open(
            self.dir.path(),
            "suite",
            Options::default(),
        )?);
        Ok((store.clone(), store))
    }

    async fn corrupt(&mut self, offset: Offset) -> Result<(), StorageError> {
        corrupt_record(self.dir.path(), offset)
    }

    fn fail_next_write(&self, log: &RedbStore) -> bool {
        log.inject_write_failure();
        true
    }
}

fn fixture() -> RedbFixture {
    RedbFixture {
        dir: tempfile::tempdir().expect("temporary directory"),
    }
}

/// Goal: redb keeps every promise of the storage traits. Method: the raft-core suite, each check
/// on a fresh directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redb_passes_the_storage_conformance_suite() {
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
    drop(RedbStore::open(dir.path(), "a", Options::default()).unwrap());
    match RedbStore::open(dir.path(), "b", Options::default()) {
        Err(StorageError::Incompatible(_)) => {}
        other => panic!("expected Incompatible, got {other:?}"),
    }
    RedbStore::open(dir.path(), "a", Options::default()).expect("the right cluster opens");
}

/// Goal: a directory written by a newer format is refused. Method: bump the stored version with
/// redb directly, then open.
#[tokio::test]
async fn opening_a_newer_format_is_incompatible() {
    let dir = tempfile::tempdir().unwrap();
    drop(RedbStore::open(dir.path(), "a", Options::default()).unwrap());
    {
        let db = redb::Database::create(dir.path().join(raft_storage_redb::FILE_NAME)).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let def: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("meta");
            let mut meta = txn.open_table(def).unwrap();
            let newer = (raft_storage_redb::GROUPS_FORMAT_VERSION + 1).to_le_bytes();
            meta.insert("format", newer.as_slice()).unwrap();
        }
        txn.commit().unwrap();
    }
    match RedbStore::open(dir.path(), "a", Options::default()) {
        Err(StorageError::Incompatible(msg)) => assert!(msg.contains("newer"), "{msg}"),
        other => panic!("expected Incompatible, got {other:?}"),
    }
}

/// Goal: every commit mode works end to end. Method: append, reopen, read back.
#[tokio::test]
async fn every_commit_mode_round_trips() {
    use raft_core::io::LogStore;
    use raft_storage_redb::CommitMode;
    for mode in [
        CommitMode::Immediate,
        CommitMode::TwoPhase,
        CommitMode::QuickRepair,
    ] {
        let dir = tempfile::tempdir().unwrap();
        let options = Options {
            commit_mode: mode,
            ..Options::default()
        };
        let recs = records(0, 50, 1, 100);
        {
            let store = RedbStore::open(dir.path(), "a", options.clone()).unwrap();
            store.append(&recs).await.unwrap();
        }
        let store = RedbStore::open(dir.path(), "a", options).unwrap();
        assert_eq!(
            store.read(Offset(0), Offset(50), u64::MAX).await.unwrap(),
            recs,
            "{mode:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redb_snapshots_pass_the_snapshot_conformance_suite() {
    let root = tempfile::tempdir().expect("temp dir");
    let base = root.path().to_path_buf();
    raft_core::testing::snapshots::run_all(move |loc| {
        let dir = base.join(loc.to_string());
        async move { raft_storage_redb::open_snapshots(dir).expect("open snapshots") }
    })
    .await;
}
