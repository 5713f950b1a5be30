//! [`RedbGroups`]: the raft-core group-storage suite, the layout checks between the two kinds
//! of directory, and the SIGKILL crash test on a group whose writes share the journal with
//! another group's.

use std::any::Any;
use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use raft_core::io::{ElectionStore, GroupStorage, GroupStores, LogState, LogStore, StorageError};
use raft_core::testing::crash;
use raft_core::testing::groups::{run_all, GroupsFixture};
use raft_core::{ElectionState, GroupId, Offset, OffsetAndEpoch, Record};
use raft_storage_redb::{corrupt_group_record, Options, RedbGroups, RedbStore};
use tokio::sync::OnceCell;

/// An engine in a temporary directory.
struct Fixture {
    dir: tempfile::TempDir,
}

#[async_trait]
impl GroupsFixture for Fixture {
    type Storage = RedbGroups;

    async fn open(&mut self) -> Result<Arc<RedbGroups>, StorageError> {
        Ok(Arc::new(RedbGroups::open(
            self.dir.path(),
            "suite",
            Options::default(),
        )?))
    }

    async fn corrupt(&mut self, group: GroupId, offset: Offset) -> Result<bool, StorageError> {
        corrupt_group_record(self.dir.path(), group, offset).map(|()| true)
    }

    fn fail_next_write(&self, storage: &RedbGroups) -> bool {
        storage.inject_write_failure();
        true
    }

    fn syncs(&self, storage: &RedbGroups) -> Option<u64> {
        Some(storage.syncs())
    }

    fn hold_commits(&self, storage: &RedbGroups) -> Option<Box<dyn Any + Send>> {
        Some(Box::new(storage.hold_commits()))
    }
}

/// Goal: `RedbGroups` keeps every promise of `GroupStorage`, and each group every promise of
/// the log, election and snapshot stores. Method: the raft-core suite, each check on a fresh
/// directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redb_groups_pass_the_groups_suite() {
    let report = run_all(|| async {
        Fixture {
            dir: tempfile::tempdir().expect("temporary directory"),
        }
    })
    .await;
    assert!(report.skipped.is_empty(), "skipped: {:?}", report.skipped);
    assert_eq!(report.passed.len(), 9, "checks run: {:?}", report.passed);
}

/// Goal: each type opens only its own kind of directory, and an existing single-log directory
/// keeps opening with `RedbStore`. Method: create one of each, open each with the other type.
#[tokio::test]
async fn each_type_refuses_the_other_layout() {
    let single = tempfile::tempdir().unwrap();
    let groups = tempfile::tempdir().unwrap();
    drop(RedbStore::open(single.path(), "a", Options::default()).unwrap());
    drop(RedbGroups::open(groups.path(), "a", Options::default()).unwrap());
    match RedbGroups::open(single.path(), "a", Options::default()) {
        Err(StorageError::Incompatible(msg)) => assert!(msg.contains("RedbStore"), "{msg}"),
        other => panic!("groups over a single log: expected Incompatible, got {other:?}"),
    }
    match RedbStore::open(groups.path(), "a", Options::default()) {
        Err(StorageError::Incompatible(msg)) => assert!(msg.contains("RedbGroups"), "{msg}"),
        other => panic!("a single log over groups: expected Incompatible, got {other:?}"),
    }
    match RedbGroups::open(groups.path(), "b", Options::default()) {
        Err(StorageError::Incompatible(_)) => {}
        other => panic!("another cluster's groups: expected Incompatible, got {other:?}"),
    }
    RedbStore::open(single.path(), "a", Options::default()).expect("the single log reopens");
    RedbGroups::open(groups.path(), "a", Options::default()).expect("the groups reopen");
}

const CRASH_GROUP: GroupId = GroupId(7);
const MIRROR_GROUP: GroupId = GroupId(8);

/// A group of an engine as the crash harness's store: every append also goes, concurrently,
/// to a second group, so that the two share group commits; the harness checks the first.
struct CrashGroup {
    engine: Arc<RedbGroups>,
    stores: OnceCell<(GroupStores, GroupStores)>,
}

impl CrashGroup {
    async fn stores(&self) -> Result<&(GroupStores, GroupStores), StorageError> {
        self.stores
            .get_or_try_init(|| async {
                let a = self.engine.open_group(CRASH_GROUP).await?;
                let b = self.engine.open_group(MIRROR_GROUP).await?;
                Ok((a, b))
            })
            .await
    }
}

fn open_crash(dir: &Path) -> Result<CrashGroup, StorageError> {
    Ok(CrashGroup {
        engine: Arc::new(RedbGroups::open(dir, "crash", Options::default())?),
        stores: OnceCell::new(),
    })
}

#[async_trait]
impl LogStore for CrashGroup {
    async fn state(&self) -> Result<LogState, StorageError> {
        self.stores().await?.0.log.state().await
    }
    async fn append(&self, records: &[Record]) -> Result<(), StorageError> {
        let (a, b) = self.stores().await?;
        let mirror = async {
            // The mirror may hold fewer records than the checked group after a crash; it
            // catches up from where it is.
            let end = b.log.state().await?.end.offset;
            let from = records.iter().position(|r| r.offset >= end);
            match from {
                Some(i) if records[i].offset == end => b.log.append(&records[i..]).await,
                _ => Ok(()),
            }
        };
        let (x, y) = tokio::join!(a.log.append(records), mirror);
        x.and(y)
    }
    async fn read(&self, from: Offset, to: Offset, max: u64) -> Result<Vec<Record>, StorageError> {
        self.stores().await?.0.log.read(from, to, max).await
    }
    async fn truncate(&self, end: Offset) -> Result<(), StorageError> {
        self.stores().await?.0.log.truncate(end).await
    }
    async fn purge(&self, start: Offset) -> Result<(), StorageError> {
        self.stores().await?.0.log.purge(start).await
    }
    async fn reset(&self, start: OffsetAndEpoch) -> Result<(), StorageError> {
        self.stores().await?.0.log.reset(start).await
    }
}

#[async_trait]
impl ElectionStore for CrashGroup {
    async fn load(&self) -> Result<Option<ElectionState>, StorageError> {
        self.stores().await?.0.election.load().await
    }
    async fn save(&self, state: &ElectionState) -> Result<(), StorageError> {
        self.stores().await?.0.election.save(state).await
    }
}

/// Goal: a SIGKILL at any moment loses nothing acknowledged of a group whose appends share
/// group commits with another group's. Method: [`crash::run_kills`] on group 7 of an engine
/// whose every append also goes to group 8; afterwards group 8 reads back whole, each record
/// equal to group 7's at its offset.
#[test]
fn crash_kills_lose_nothing_acknowledged_in_a_group() {
    crash::child_main(open_crash);
    let dir = tempfile::tempdir().expect("temporary directory");
    crash::run_kills(
        "groups::crash_kills_lose_nothing_acknowledged_in_a_group",
        dir.path(),
        open_crash,
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let store = open_crash(dir.path()).expect("reopen");
        let (a, b) = store.stores().await.expect("open the groups");
        let end = b.log.state().await.expect("state").end.offset;
        let mirror = b.log.read(Offset(0), end, u64::MAX).await.expect("read");
        let checked = a.log.read(Offset(0), end, u64::MAX).await.expect("read");
        assert_eq!(
            mirror.len() as u64,
            end.0,
            "the mirror group reads back whole"
        );
        assert_eq!(
            mirror, checked,
            "the mirror group holds the checked group's records"
        );
    });
}
