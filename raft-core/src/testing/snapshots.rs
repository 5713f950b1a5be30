//! The snapshot-store conformance suite: every promise of [`SnapshotStore`] as a named check,
//! run by [`run_all`] against fresh stores from a backend's opener.
//!
//! The opener is called with the same location again to play a restart: complete snapshots
//! must survive it, a partial download must not.

use std::future::Future;

use bytes::Bytes;

use crate::io::{load_bytes, save_bytes, SnapshotMeta, SnapshotStore};
use crate::types::{Epoch, Offset, OffsetAndEpoch};

fn id(offset: u64, epoch: u32) -> OffsetAndEpoch {
    OffsetAndEpoch::new(Offset(offset), Epoch(epoch))
}

fn data(len: usize, seed: u8) -> Bytes {
    Bytes::from(
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect::<Vec<u8>>(),
    )
}

/// Saves `data` as snapshot `id` through a writer, in one chunk per kibibyte or less.
async fn save<S: SnapshotStore>(s: &S, id: OffsetAndEpoch, data: Bytes) -> SnapshotMeta {
    save_bytes(s, id, data).await.expect("save")
}

/// The whole of snapshot `id` through `open`, or `None`.
async fn load<S: SnapshotStore>(s: &S, id: OffsetAndEpoch) -> Option<Bytes> {
    load_bytes(s, id, u64::MAX).await.expect("load")
}

/// Reads a whole snapshot through `read` in chunks of `chunk` bytes.
async fn read_all<S: SnapshotStore>(s: &S, id: OffsetAndEpoch, chunk: u32) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let (meta, bytes) = s
            .read(id, out.len() as u64, chunk)
            .await
            .expect("read")
            .expect("snapshot present");
        if bytes.is_empty() {
            assert_eq!(out.len() as u64, meta.size, "reads stop at the end");
            return out;
        }
        assert!(bytes.len() <= chunk as usize, "a read honours max_bytes");
        out.extend_from_slice(&bytes);
    }
}

/// Runs every check. `open(location)` opens the store at a location; each check uses its own
/// location (`0, 1, ...`) and reopens it by calling `open` again with the same number. Panics
/// on the first broken promise.
pub async fn run_all<S, F, Fut>(mut open: F)
where
    S: SnapshotStore,
    F: FnMut(u32) -> Fut,
    Fut: Future<Output = S>,
{
    // An empty store has nothing.
    let s = open(0).await;
    assert_eq!(s.latest().await.expect("latest"), None, "empty store");
    assert!(
        s.open(id(5, 1)).await.expect("open").is_none(),
        "open of nothing"
    );
    assert!(s.read(id(5, 1), 0, 10).await.expect("read").is_none());
    drop(s);

    // Saved snapshots are visible, readable in chunks, and survive a reopen; two are kept.
    let s = open(1).await;
    let first = data(3000, 1);
    let meta = save(&s, id(10, 1), first.clone()).await;
    assert_eq!(
        meta,
        SnapshotMeta::of(id(10, 1), &first),
        "save reports its meta"
    );
    assert_eq!(s.latest().await.expect("latest"), Some(meta));
    assert_eq!(
        read_all(&s, id(10, 1), 700).await,
        first.to_vec(),
        "chunked read"
    );
    let second = data(10, 2);
    save(&s, id(20, 2), second.clone()).await;
    let third = Bytes::new();
    save(&s, id(30, 2), third.clone()).await;
    assert_eq!(
        s.latest().await.expect("latest").map(|m| m.id),
        Some(id(30, 2)),
        "latest is the newest"
    );
    assert_eq!(
        load(&s, id(20, 2)).await,
        Some(second.clone()),
        "the one before the newest is kept"
    );
    drop(s);
    let s = open(1).await;
    assert_eq!(
        s.latest().await.expect("latest").map(|m| m.id),
        Some(id(30, 2)),
        "complete snapshots survive a reopen"
    );
    assert_eq!(load(&s, id(30, 2)).await, Some(third));
    assert_eq!(load(&s, id(20, 2)).await, Some(second));
    let past = s
        .read(id(30, 2), 5, 10)
        .await
        .expect("read")
        .expect("present");
    assert!(past.1.is_empty(), "a read past the end is empty");
    drop(s);

    // A download in chunks becomes a complete snapshot when size and checksum match.
    let s = open(2).await;
    let body = data(5000, 3);
    let meta = SnapshotMeta::of(id(40, 3), &body);
    for (k, chunk) in body.chunks(1024).enumerate() {
        s.write_partial(id(40, 3), (k * 1024) as u64, Bytes::copy_from_slice(chunk))
            .await
            .expect("write chunk");
    }
    assert_eq!(
        s.latest().await.expect("latest"),
        None,
        "a partial download is invisible"
    );
    let done = s
        .finish_partial(id(40, 3), meta.size, meta.checksum)
        .await
        .expect("finish");
    assert_eq!(done, Some(meta), "a verified download completes");
    assert_eq!(load(&s, id(40, 3)).await, Some(body.clone()));

    // A download whose checksum does not match is discarded; a restart at 0 starts over.
    s.write_partial(id(50, 3), 0, data(100, 4))
        .await
        .expect("write");
    let bad = s
        .finish_partial(id(50, 3), 100, meta.checksum ^ 1)
        .await
        .expect("finish");
    assert_eq!(bad, None, "a corrupt download is refused");
    assert_eq!(
        s.latest().await.expect("latest").map(|m| m.id),
        Some(id(40, 3)),
        "a refused download changes nothing"
    );
    s.write_partial(id(50, 3), 0, data(100, 4))
        .await
        .expect("write");
    s.write_partial(id(50, 3), 0, data(60, 5))
        .await
        .expect("restart at 0");
    let again = SnapshotMeta::of(id(50, 3), &data(60, 5));
    assert_eq!(
        s.finish_partial(id(50, 3), 60, again.checksum)
            .await
            .expect("finish"),
        Some(again),
        "position 0 starts the download over"
    );
    assert!(
        s.write_partial(id(60, 3), 7, data(5, 6)).await.is_err(),
        "a chunk that does not continue a download is refused"
    );
    drop(s);

    // A partial download does not survive a restart.
    let s = open(3).await;
    s.write_partial(id(70, 4), 0, data(100, 7))
        .await
        .expect("write");
    drop(s);
    let s = open(3).await;
    let m = SnapshotMeta::of(id(70, 4), &data(100, 7));
    assert_eq!(
        s.finish_partial(id(70, 4), m.size, m.checksum)
            .await
            .expect("finish"),
        None,
        "a restart discards the partial download"
    );
    assert_eq!(s.latest().await.expect("latest"), None);
    drop(s);

    // A snapshot being written is invisible until finished; one dropped unfinished leaves
    // nothing; two may be written at once.
    let s = open(4).await;
    let mut a = s.create(id(80, 5)).await.expect("create");
    let mut b = s.create(id(90, 5)).await.expect("create");
    a.write(data(700, 8)).await.expect("write");
    b.write(data(300, 9)).await.expect("write");
    a.write(data(700, 10)).await.expect("write");
    assert_eq!(
        s.latest().await.expect("latest"),
        None,
        "unfinished is invisible"
    );
    assert!(s.open(id(80, 5)).await.expect("open").is_none());
    drop(b);
    let meta = a.finish().await.expect("finish");
    let whole = [data(700, 8), data(700, 10)].concat();
    assert_eq!(
        meta,
        SnapshotMeta::of(id(80, 5), &whole),
        "finish reports its meta"
    );
    assert_eq!(load(&s, id(80, 5)).await.as_deref(), Some(&whole[..]));
    assert!(
        s.open(id(90, 5)).await.expect("open").is_none(),
        "dropped leaves nothing"
    );
    drop(s);
    let s = open(4).await;
    assert_eq!(
        s.latest().await.expect("latest").map(|m| m.id),
        Some(id(80, 5)),
        "a finished snapshot survives a reopen, a dropped one does not appear"
    );

    // A reader opened before newer snapshots replace its snapshot reads it to the end.
    let mut reader = s.open(id(80, 5)).await.expect("open").expect("present");
    let first_chunk = reader.next_chunk().await.expect("read").expect("a chunk");
    save(&s, id(100, 5), data(10, 11)).await;
    save(&s, id(110, 5), data(10, 12)).await;
    save(&s, id(120, 5), data(10, 13)).await;
    let mut read = first_chunk.to_vec();
    while let Some(chunk) = reader.next_chunk().await.expect("read on") {
        assert!(!chunk.is_empty(), "chunks are never empty");
        read.extend_from_slice(&chunk);
    }
    assert_eq!(
        read, whole,
        "an open snapshot stays readable after it is deleted"
    );
    assert!(
        s.open(id(80, 5)).await.expect("open").is_none(),
        "older snapshots are deleted once newer ones are durable"
    );
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Mutex;

    use crate::mem::MemSnapshots;

    #[tokio::test]
    async fn mem_snapshots_pass_the_suite() {
        let stores: Mutex<HashMap<u32, MemSnapshots>> = Mutex::new(HashMap::new());
        super::run_all(|loc| {
            let mut stores = stores.lock().unwrap();
            let s = match stores.get(&loc) {
                Some(s) => s.reopen(),
                None => MemSnapshots::new(),
            };
            stores.insert(loc, s.reopen());
            async move { s }
        })
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn snapshot_dir_passes_the_suite() {
        let root = std::env::temp_dir().join(format!("raft-snapdir-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let r = root.clone();
        super::run_all(move |loc| {
            let dir = r.join(loc.to_string());
            async move { crate::snapshot_dir::SnapshotDir::open(dir).expect("open") }
        })
        .await;
        std::fs::remove_dir_all(&root).expect("clean up");
    }
}
