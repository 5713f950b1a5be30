//! The group-storage conformance suite: every promise of [`GroupStorage`] as a named check, run
//! by [`run_all`] against fresh engines from a backend's [`GroupsFixture`].
//!
//! Besides the promises of the engine itself (the durable group list, isolation, one open per
//! group, dropping), it runs the single-log suites per group: [`crate::testing::storage`]
//! through [`OneGroup`], a fixture that opens one group of an engine whose neighbouring groups
//! hold records that every reopen checks, and [`crate::testing::snapshots`] on groups of one
//! engine. A check panics with the name of the broken promise, as the other suites do.

use std::any::Any;
use std::future::Future;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use async_trait::async_trait;

use super::storage::{records, StorageFixture};
use bytes::Bytes;

use crate::io::{
    load_bytes, save_bytes, ElectionStore, GroupStorage, GroupStores, LogState, LogStore,
    SnapshotMeta, SnapshotReader, SnapshotStore, SnapshotWriter, StorageError,
};
use crate::types::{ElectionState, Epoch, GroupId, Offset, OffsetAndEpoch, Record, ReplicaId};

/// One engine location, as a backend's test provides it: a way to open it (again), and the
/// hooks some checks need. Every hook has a default that makes the checks needing it skip.
///
/// The suite drops the engine and every store it opened before it calls
/// [`GroupsFixture::open`] again or [`GroupsFixture::corrupt`], as a restarted host would.
#[async_trait]
pub trait GroupsFixture: Send + 'static {
    /// The engine type.
    type Storage: GroupStorage;

    /// Opens the engine at this location: creates it the first time, reopens what earlier
    /// handles wrote afterwards.
    async fn open(&mut self) -> Result<Arc<Self::Storage>, StorageError>;

    /// Damages the stored bytes of record `offset` of `group` (which exists) so that its
    /// checksum no longer matches; called while nothing is open. `Ok(false)` when the backend
    /// has no such hook: the per-group run of the storage suite, which needs it, is skipped.
    async fn corrupt(&mut self, _group: GroupId, _offset: Offset) -> Result<bool, StorageError> {
        Ok(false)
    }

    /// Arranges for the engine's next group commit to fail as a failed sync would. `false`
    /// when the backend has no such hook.
    fn fail_next_write(&self, _storage: &Self::Storage) -> bool {
        false
    }

    /// The syncs the engine has made since it was opened, when it counts them.
    fn syncs(&self, _storage: &Self::Storage) -> Option<u64> {
        None
    }

    /// Holds the engine's group commits until the returned guard is dropped: writes queue up
    /// meanwhile, and the first commit after it takes all of them (as long as they fit one
    /// group commit). `None` when the backend has no such hook.
    fn hold_commits(&self, _storage: &Self::Storage) -> Option<Box<dyn Any + Send>> {
        None
    }
}

/// What [`run_all`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupsReport {
    /// The checks that ran and passed, in order.
    pub passed: Vec<&'static str>,
    /// The checks the fixture's hooks could not support.
    pub skipped: Vec<&'static str>,
}

/// Runs every check, each on a fresh fixture from `new_fixture`, printing one line per check.
/// Panics on the first broken promise; returns which checks ran.
pub async fn run_all<F, Fut, X>(mut new_fixture: F) -> GroupsReport
where
    F: FnMut() -> Fut,
    Fut: Future<Output = X>,
    X: GroupsFixture,
{
    let mut report = GroupsReport::default();
    macro_rules! checks {
        ($($name:ident($($more:expr)?)),* $(,)?) => {$(
            let (name, started) = (stringify!($name), std::time::Instant::now());
            if $name(new_fixture().await $(, $more)?).await {
                println!("groups check {name} ... ok ({:?})", started.elapsed());
                report.passed.push(name);
            } else {
                println!("groups check {name} ... skipped");
                report.skipped.push(name);
            }
        )*};
    }
    checks!(
        the_group_list_is_durable(),
        groups_are_isolated(),
        a_group_opens_once_at_a_time(),
        dropping_a_group_removes_it_durably(),
        concurrent_appends_of_many_groups(),
        queued_writes_of_many_groups_share_one_sync(),
        a_failed_sync_poisons_every_group(),
        snapshots_per_group(),
        single_log_promises_per_group(&mut new_fixture),
    );
    report
}

/// A bound on every wait of the suite, so that a backend that loses a wake-up fails instead of
/// hanging.
const WAIT: Duration = Duration::from_secs(120);

/// The value of a storage call that must succeed within [`WAIT`].
async fn ok<T>(what: &str, f: impl Future<Output = Result<T, StorageError>>) -> T {
    match tokio::time::timeout(WAIT, f).await {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => panic!("{what}: failed: {e}"),
        Err(_) => panic!("{what}: no answer within {WAIT:?}"),
    }
}

/// Checks that a storage call fails within [`WAIT`] with an error `expected` accepts.
async fn fails<T>(
    what: &str,
    f: impl Future<Output = Result<T, StorageError>>,
    expected: fn(&StorageError) -> bool,
) {
    match tokio::time::timeout(WAIT, f).await {
        Ok(Err(e)) if expected(&e) => {}
        Ok(Err(e)) => panic!("{what}: failed with the wrong error: {e:?}"),
        Ok(Ok(_)) => panic!("{what}: succeeded, but must fail"),
        Err(_) => panic!("{what}: no answer within {WAIT:?}"),
    }
}

fn invalid(e: &StorageError) -> bool {
    matches!(e, StorageError::Invalid(_))
}

fn poisoned(e: &StorageError) -> bool {
    matches!(e, StorageError::Poisoned(_))
}

/// What the suite writes into `group` at `[from, to)`: records whose epoch and payload length
/// depend on the group, so that equal offsets of two groups hold different records.
fn group_records(group: GroupId, from: u64, to: u64) -> Vec<Record> {
    let epoch = 1 + (group.0 % 7) as u32;
    let len = |o: u64| 8 + (group.0 % 13) as usize + (o % 5) as usize;
    (from..to)
        .flat_map(|o| records(o, o + 1, epoch, len(o)))
        .collect()
}

fn vote(group: GroupId) -> ElectionState {
    ElectionState {
        epoch: Epoch(3 + (group.0 % 100) as u32),
        voted_for: Some(ReplicaId(1 + (group.0 % 5) as u32)),
        voted_directory: None,
        leader: None,
    }
}

fn id(offset: u64, epoch: u32) -> OffsetAndEpoch {
    OffsetAndEpoch::new(Offset(offset), Epoch(epoch))
}

/// Checks that `stores` hold exactly `want` (records from the log's start) and `election`.
async fn expect_group(
    stores: &GroupStores,
    start: u64,
    want: &[Record],
    election: Option<ElectionState>,
    what: &str,
) {
    let s = ok(what, stores.log.state()).await;
    let end = start + want.len() as u64;
    assert_eq!(s.start, Offset(start), "{what}: log start");
    assert_eq!(s.end.offset, Offset(end), "{what}: log end");
    let got = ok(what, stores.log.read(Offset(start), Offset(end), u64::MAX)).await;
    assert_eq!(got.len(), want.len(), "{what}: record count");
    for (g, w) in got.iter().zip(want) {
        assert_eq!(g, w, "{what}: record {} differs", w.offset);
    }
    assert_eq!(
        ok(what, stores.election.load()).await,
        election,
        "{what}: election"
    );
}

/// An engine lists no group, then the groups opened, ascending (the lowest and highest ids
/// among them), and still lists them after a restart.
async fn the_group_list_is_durable<X: GroupsFixture>(mut fx: X) -> bool {
    let s = ok("open the engine", fx.open()).await;
    assert!(
        ok("list", s.groups()).await.is_empty(),
        "a new engine lists no group"
    );
    let ids = [5, u64::MAX, 0, 256, 1].map(GroupId);
    let mut open = Vec::new();
    for g in ids {
        open.push(ok("open a group", s.open_group(g)).await);
    }
    let mut want = ids.to_vec();
    want.sort();
    assert_eq!(
        ok("list", s.groups()).await,
        want,
        "the open groups, ascending"
    );
    drop(open);
    assert_eq!(
        ok("list", s.groups()).await,
        want,
        "closing keeps a group listed"
    );
    drop(s);
    let s = ok("reopen the engine", fx.open()).await;
    assert_eq!(
        ok("list", s.groups()).await,
        want,
        "the groups after a restart"
    );
    let g = ok("open a group", s.open_group(GroupId(256))).await;
    expect_group(&g, 0, &[], None, "a reopened empty group").await;
    true
}

const SNAPSHOT: &[u8] = b"the snapshot of group 2";

/// Appends, truncation, purge, reset, election saves and snapshots of one group never show in
/// another, before and after a restart; equal offsets of two groups hold different records.
async fn groups_are_isolated<X: GroupsFixture>(mut fx: X) -> bool {
    // Adjacent ids, and the ends of the id space, so that a key range that spills over a group's
    // edge reaches another group.
    let ids = [0, 1, 2, 3, u64::MAX].map(GroupId);
    let s = ok("open the engine", fx.open()).await;
    let mut stores = Vec::new();
    for g in ids {
        let st = ok("open a group", s.open_group(g)).await;
        for chunk in group_records(g, 0, 20).chunks(3) {
            ok("isolation: fill", st.log.append(chunk)).await;
        }
        stores.push(st);
    }
    // Group 1 truncated, 2 purged, 3 reset, MAX truncated to nothing; 0 untouched.
    ok("truncate", stores[1].log.truncate(Offset(9))).await;
    ok("purge", stores[2].log.purge(Offset(13))).await;
    ok("reset", stores[3].log.reset(id(100, 2))).await;
    ok("truncate to nothing", stores[4].log.truncate(Offset(0))).await;
    let after_reset = group_records(ids[3], 100, 104);
    ok("append after a reset", stores[3].log.append(&after_reset)).await;
    ok("election save", stores[1].election.save(&vote(ids[1]))).await;
    let snap = Bytes::from_static(SNAPSHOT);
    ok(
        "snapshot",
        save_bytes(&*stores[2].snapshots, id(13, 1), snap),
    )
    .await;
    check_isolated(&ids, &stores, &after_reset, "isolation").await;
    drop((stores, s));
    let s = ok("reopen the engine", fx.open()).await;
    let mut stores = Vec::new();
    for g in ids {
        stores.push(ok("open a group", s.open_group(g)).await);
    }
    check_isolated(&ids, &stores, &after_reset, "isolation after a restart").await;
    true
}

/// What [`groups_are_isolated`] left in its five groups.
async fn check_isolated(ids: &[GroupId], stores: &[GroupStores], reset: &[Record], when: &str) {
    let full = |i: usize| group_records(ids[i], 0, 20);
    expect_group(&stores[0], 0, &full(0), None, when).await;
    expect_group(&stores[1], 0, &full(1)[..9], Some(vote(ids[1])), when).await;
    expect_group(&stores[2], 13, &full(2)[13..], None, when).await;
    expect_group(&stores[3], 100, reset, None, when).await;
    expect_group(&stores[4], 0, &[], None, when).await;
    let s3 = ok(when, stores[3].log.state()).await;
    assert_eq!(
        s3.start_epoch,
        Epoch(2),
        "{when}: the reset group's start epoch"
    );
    for (i, st) in stores.iter().enumerate() {
        let latest = ok(when, st.snapshots.latest()).await.map(|m| m.id);
        let want = (i == 2).then_some(id(13, 1));
        assert_eq!(latest, want, "{when}: snapshots of group {i}");
    }
    let got = ok(when, load_bytes(&*stores[2].snapshots, id(13, 1), u64::MAX)).await;
    assert_eq!(got.as_deref(), Some(SNAPSHOT), "{when}: group 2's snapshot");
}

/// Opening a group whose stores are open is refused with `Invalid`; once they are dropped it
/// opens again, with what was written.
async fn a_group_opens_once_at_a_time<X: GroupsFixture>(mut fx: X) -> bool {
    let s = ok("open the engine", fx.open()).await;
    let g = GroupId(42);
    let first = ok("open a group", s.open_group(g)).await;
    let recs = group_records(g, 0, 3);
    ok("append", first.log.append(&recs)).await;
    fails("a second open of a group", s.open_group(g), invalid).await;
    let other = ok("open another group", s.open_group(GroupId(43))).await;
    drop(first);
    let again = ok("open a group again", s.open_group(g)).await;
    expect_group(
        &again,
        0,
        &recs,
        None,
        "reopened after its stores were dropped",
    )
    .await;
    drop((again, other));
    true
}

/// `drop_group` is refused while the group is open, then removes its log, election state and
/// snapshots durably (a later open finds it empty, with or without a restart); other groups
/// stay; dropping an absent group does nothing.
async fn dropping_a_group_removes_it_durably<X: GroupsFixture>(mut fx: X) -> bool {
    let s = ok("open the engine", fx.open()).await;
    let (a, b, c) = (GroupId(7), GroupId(8), GroupId(9));
    ok("dropping a group the engine does not hold", s.drop_group(a)).await;
    let mut open = Vec::new();
    for g in [a, b, c] {
        let st = ok("open a group", s.open_group(g)).await;
        ok("fill", st.log.append(&group_records(g, 0, 12))).await;
        ok("save", st.election.save(&vote(g))).await;
        let snap = Bytes::from_static(b"s");
        ok("snapshot", save_bytes(&*st.snapshots, id(4, 1), snap)).await;
        open.push(st);
    }
    fails("dropping an open group", s.drop_group(b), invalid).await;
    drop(open.remove(1));
    ok("dropping a closed group", s.drop_group(b)).await;
    assert_eq!(
        ok("list", s.groups()).await,
        [a, c],
        "a dropped group is not listed"
    );
    ok("dropping a dropped group", s.drop_group(b)).await;
    let fresh = ok("open a dropped group", s.open_group(b)).await;
    expect_group(&fresh, 0, &[], None, "a dropped group reopened").await;
    let latest = ok("latest", fresh.snapshots.latest()).await;
    assert_eq!(latest, None, "a dropped group's snapshots are gone");
    drop(fresh);
    ok("dropping it again", s.drop_group(b)).await;
    drop((open, s));
    let s = ok("reopen the engine", fx.open()).await;
    assert_eq!(
        ok("list", s.groups()).await,
        [a, c],
        "a dropped group stays dropped"
    );
    let fresh = ok("open a dropped group", s.open_group(b)).await;
    expect_group(&fresh, 0, &[], None, "a dropped group after a restart").await;
    let latest = ok("latest", fresh.snapshots.latest()).await;
    assert_eq!(latest, None, "a dropped group's snapshots after a restart");
    for g in [a, c] {
        let st = ok("open a neighbour", s.open_group(g)).await;
        expect_group(
            &st,
            0,
            &group_records(g, 0, 12),
            Some(vote(g)),
            "neighbours",
        )
        .await;
        let latest = ok("latest", st.snapshots.latest()).await;
        assert!(latest.is_some(), "a neighbour's snapshot survives the drop");
    }
    true
}

/// 64 groups appending at once, each from a task of its own, all read back intact after a
/// restart.
async fn concurrent_appends_of_many_groups<X: GroupsFixture>(mut fx: X) -> bool {
    const GROUPS: u64 = 64;
    const END: u64 = 60;
    let s = ok("open the engine", fx.open()).await;
    let mut tasks = Vec::new();
    for g in (0..GROUPS).map(|g| GroupId(1000 + g * 3)) {
        let st = ok("open a group", s.open_group(g)).await;
        tasks.push(tokio::spawn(async move {
            let recs = group_records(g, 0, END);
            let mut at = 0;
            while at < recs.len() {
                let end = (at + 1 + (at + g.0 as usize) % 4).min(recs.len());
                st.log.append(&recs[at..end]).await?;
                at = end;
            }
            st.election.save(&vote(g)).await
        }));
    }
    for t in tasks {
        let joined = async { t.await.map_err(|e| StorageError::Io(Box::new(e)))? };
        ok("a task of concurrent appends", joined).await;
    }
    if let Some(n) = fx.syncs(&s) {
        println!("groups check: {GROUPS} groups appending {END} records each made {n} syncs");
    }
    drop(s);
    let s = ok("reopen the engine", fx.open()).await;
    assert_eq!(
        ok("list", s.groups()).await.len(),
        GROUPS as usize,
        "every group listed"
    );
    for g in (0..GROUPS).map(|g| GroupId(1000 + g * 3)) {
        let st = ok("open a group", s.open_group(g)).await;
        let what = "concurrent appends after a restart";
        expect_group(&st, 0, &group_records(g, 0, END), Some(vote(g)), what).await;
    }
    true
}

/// Appends of 64 groups queued while commits are held become durable with one sync.
async fn queued_writes_of_many_groups_share_one_sync<X: GroupsFixture>(mut fx: X) -> bool {
    let s = ok("open the engine", fx.open()).await;
    let mut stores = Vec::new();
    for g in (0..64).map(GroupId) {
        stores.push((g, ok("open a group", s.open_group(g)).await));
    }
    let (Some(before), Some(hold)) = (fx.syncs(&s), fx.hold_commits(&s)) else {
        return false;
    };
    let recs: Vec<_> = stores
        .iter()
        .map(|(g, _)| group_records(*g, 0, 2))
        .collect();
    let mut appends: Vec<_> = (stores.iter().zip(&recs))
        .map(|((_, st), r)| Box::pin(futures_util::future::maybe_done(st.log.append(r))))
        .collect();
    // One poll of each append queues its write (each queues before it first waits).
    std::future::poll_fn(|cx| {
        for a in &mut appends {
            let _ = a.as_mut().poll(cx);
        }
        Poll::Ready(())
    })
    .await;
    drop(hold);
    for a in &mut appends {
        let done = async {
            a.as_mut().await;
            let missing = || StorageError::Invalid("an append ended without an outcome".into());
            a.as_mut().take_output().unwrap_or_else(|| Err(missing()))
        };
        ok("an append queued behind the hold", done).await;
    }
    drop(appends);
    let syncs = fx.syncs(&s).expect("syncs counted") - before;
    assert_eq!(
        syncs, 1,
        "64 groups' queued appends: one group commit, one sync"
    );
    for ((g, st), r) in stores.iter().zip(&recs) {
        expect_group(st, 0, r, None, &format!("group {g} after the shared sync")).await;
    }
    true
}

/// A failed sync poisons every group of the engine; a restart recovers what was acknowledged.
async fn a_failed_sync_poisons_every_group<X: GroupsFixture>(mut fx: X) -> bool {
    let s = ok("open the engine", fx.open()).await;
    let (a, b) = (GroupId(1), GroupId(2));
    let sa = ok("open a group", s.open_group(a)).await;
    let sb = ok("open a group", s.open_group(b)).await;
    ok("fill", sa.log.append(&group_records(a, 0, 4))).await;
    ok("fill", sb.log.append(&group_records(b, 0, 4))).await;
    if !fx.fail_next_write(&s) {
        return false;
    }
    let io_or_poisoned = |e: &StorageError| matches!(e, StorageError::Io(_)) || poisoned(e);
    fails(
        "a failed sync",
        sa.log.append(&group_records(a, 4, 5)),
        io_or_poisoned,
    )
    .await;
    let after = "another group after a failed sync";
    fails(after, sb.log.append(&group_records(b, 4, 5)), poisoned).await;
    fails(after, sb.election.save(&vote(b)), poisoned).await;
    fails(after, sb.log.state(), poisoned).await;
    drop((sa, sb, s));
    let s = ok("reopen the engine", fx.open()).await;
    for g in [a, b] {
        let st = ok("open a group", s.open_group(g)).await;
        let end = ok("state", st.log.state()).await.end.offset;
        assert!(end >= Offset(4), "group {g}: acknowledged records survive");
        let got = ok("read", st.log.read(Offset(0), Offset(4), u64::MAX)).await;
        assert_eq!(
            got,
            group_records(g, 0, 4),
            "group {g}'s acknowledged records"
        );
    }
    true
}

/// The snapshot-store suite, each of its locations a group of one engine, each reopen a
/// restart of the engine.
async fn snapshots_per_group<X: GroupsFixture>(fx: X) -> bool {
    let fx = Arc::new(tokio::sync::Mutex::new(fx));
    super::snapshots::run_all(move |loc| {
        let fx = fx.clone();
        async move {
            let engine = ok("open the engine", fx.lock().await.open()).await;
            let group = GroupId(100 + u64::from(loc));
            let inner = ok("open a group", engine.open_group(group)).await.snapshots;
            Held { inner, engine }
        }
    })
    .await;
    true
}

/// The storage suite on one group whose neighbours hold records (each check on a fixture from
/// `more`); skipped when the fixture `probe` cannot corrupt a record.
async fn single_log_promises_per_group<X, F, Fut>(mut probe: X, more: &mut F) -> bool
where
    X: GroupsFixture,
    F: FnMut() -> Fut,
    Fut: Future<Output = X>,
{
    let s = ok("open the engine", probe.open()).await;
    let st = ok("open a group", s.open_group(GroupId(1))).await;
    ok("append", st.log.append(&group_records(GroupId(1), 0, 1))).await;
    drop((st, s));
    if !ok("corrupt a record", probe.corrupt(GroupId(1), Offset(0))).await {
        return false;
    }
    let mut fixtures = Vec::new();
    for _ in 0..20 {
        fixtures.push(more().await);
    }
    let mut fixtures = fixtures.into_iter();
    let report = super::storage::run_all(|| {
        let fx = fixtures
            .next()
            .expect("the storage suite has at most 20 checks");
        async move { OneGroup::new(fx) }
    })
    .await;
    assert!(
        report.skipped.is_empty(),
        "per-group checks skipped: {:?}",
        report.skipped
    );
    true
}

/// A store of one group together with the engine it belongs to, which it keeps open.
pub struct Held<T: ?Sized, S> {
    inner: Arc<T>,
    engine: Arc<S>,
}

/// Implements a store trait for [`Held`] by forwarding every method to the held store.
macro_rules! forward {
    ($trait:ident: $(fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty;)*) => {
        #[async_trait]
        impl<S: GroupStorage> $trait for Held<dyn $trait, S> {
            $(async fn $name(&self, $($arg: $ty),*) -> Result<$ret, StorageError> {
                self.inner.$name($($arg),*).await
            })*
        }
    };
}

forward!(LogStore:
    fn state() -> LogState;
    fn append(records: &[Record]) -> ();
    fn read(from: Offset, to: Offset, max_bytes: u64) -> Vec<Record>;
    fn truncate(end: Offset) -> ();
    fn purge(start: Offset) -> ();
    fn reset(start: OffsetAndEpoch) -> ();
);
forward!(ElectionStore:
    fn load() -> Option<ElectionState>;
    fn save(state: &ElectionState) -> ();
);
forward!(SnapshotStore:
    fn latest() -> Option<SnapshotMeta>;
    fn create(id: OffsetAndEpoch) -> Box<dyn SnapshotWriter>;
    fn read(id: OffsetAndEpoch, position: u64, max_bytes: u32) -> Option<(SnapshotMeta, Bytes)>;
    fn open(id: OffsetAndEpoch) -> Option<Box<dyn SnapshotReader>>;
    fn write_partial(id: OffsetAndEpoch, position: u64, data: Bytes) -> ();
    fn finish_partial(id: OffsetAndEpoch, size: u64, checksum: u32) -> Option<SnapshotMeta>;
);

/// A [`StorageFixture`] over one group of an engine, [`OneGroup::GROUP`], between two
/// neighbouring groups whose records and election states every reopen checks.
pub struct OneGroup<X: GroupsFixture> {
    fx: X,
    seeded: bool,
}

impl<X: GroupsFixture> OneGroup<X> {
    /// The group under test; its neighbours are the ids just below and above it.
    pub const GROUP: GroupId = GroupId(1 << 32);

    /// The group [`OneGroup::GROUP`] of the engine `fx` opens.
    pub fn new(fx: X) -> Self {
        OneGroup { fx, seeded: false }
    }
}

#[async_trait]
impl<X: GroupsFixture> StorageFixture for OneGroup<X> {
    type Log = Held<dyn LogStore, X::Storage>;
    type Election = Held<dyn ElectionStore, X::Storage>;

    async fn open(&mut self) -> Result<(Arc<Self::Log>, Arc<Self::Election>), StorageError> {
        let engine = self.fx.open().await?;
        for g in [GroupId(Self::GROUP.0 - 1), GroupId(Self::GROUP.0 + 1)] {
            let st = engine.open_group(g).await?;
            let recs = group_records(g, 0, 9);
            if self.seeded {
                expect_group(&st, 0, &recs, Some(vote(g)), "a neighbour").await;
            } else {
                st.log.append(&recs).await?;
                st.election.save(&vote(g)).await?;
            }
        }
        self.seeded = true;
        let stores = engine.open_group(Self::GROUP).await?;
        let log = Held {
            inner: stores.log,
            engine: engine.clone(),
        };
        let election = Held {
            inner: stores.election,
            engine,
        };
        Ok((Arc::new(log), Arc::new(election)))
    }

    async fn corrupt(&mut self, offset: Offset) -> Result<(), StorageError> {
        match self.fx.corrupt(Self::GROUP, offset).await? {
            true => Ok(()),
            false => Err(StorageError::Invalid(
                "the fixture cannot corrupt records".into(),
            )),
        }
    }

    fn fail_next_write(&self, log: &Self::Log) -> bool {
        self.fx.fail_next_write(&log.engine)
    }
}
