//! The group-storage conformance suite on the in-memory engine, [`MemGroupStorage`].

use std::sync::Arc;

use async_trait::async_trait;
use raft_core::io::StorageError;
use raft_core::mem::MemGroupStorage;
use raft_core::testing::groups::{run_all, GroupsFixture};

/// One in-memory engine; each open is a restart over the same groups.
struct MemGroups {
    engine: MemGroupStorage,
}

#[async_trait]
impl GroupsFixture for MemGroups {
    type Storage = MemGroupStorage;

    async fn open(&mut self) -> Result<Arc<MemGroupStorage>, StorageError> {
        // The fixture keeps a handle over what the suite writes, for the next restart.
        self.engine = self.engine.reopen();
        Ok(Arc::new(self.engine.clone()))
    }
}

/// Goal: `MemGroupStorage` keeps every promise of `GroupStorage`. Method: the raft-core suite;
/// the checks that need fault hooks or a sync counter the in-memory engine lacks are skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mem_group_storage_passes_the_groups_suite() {
    let report = run_all(|| async {
        MemGroups {
            engine: MemGroupStorage::new(),
        }
    })
    .await;
    assert_eq!(
        report.skipped,
        [
            "queued_writes_of_many_groups_share_one_sync",
            "a_failed_sync_poisons_every_group",
            "single_log_promises_per_group",
        ],
        "checks run: {:?}",
        report.passed
    );
    assert_eq!(report.passed.len(), 6, "checks run: {:?}", report.passed);
}
