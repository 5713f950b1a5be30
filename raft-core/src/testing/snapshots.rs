//! The snapshot-store conformance suite: every promise of [`SnapshotStore`] as a named check,
//! run by [`run_all`] against fresh stores from a backend's opener.
//!
//! The opener is called with the same location again to play a restart: complete snapshots
//! must survive it, a partial download must not.

use std::future::Future;

use bytes::Bytes;

use crate::io::{SnapshotMeta, SnapshotStore};
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
    assert_eq!(
        s.load(id(5, 1)).await.expect("load"),
        None,
        "load of nothing"
    );
    assert!(s.read(id(5, 1), 0, 10).await.expect("read").is_none());
    drop(s);

    // Saved snapshots are visible, readable in chunks, and survive a reopen; two are kept.
    let s = open(1).await;
    let first = data(3000, 1);
    let meta = s.save(id(10, 1), first.clone()).await.expect("save");
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
    s.save(id(20, 2), second.clone()).await.expect("save");
    let third = Bytes::new();
    s.save(id(30, 2), third.clone())
        .await
        .expect("empty snapshot");
    assert_eq!(
        s.latest().await.expect("latest").map(|m| m.id),
        Some(id(30, 2)),
        "latest is the newest"
    );
    assert_eq!(
        s.load(id(20, 2)).await.expect("load"),
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
    assert_eq!(s.load(id(30, 2)).await.expect("load"), Some(third));
    assert_eq!(s.load(id(20, 2)).await.expect("load"), Some(second));
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
    assert_eq!(s.load(id(40, 3)).await.expect("load"), Some(body.clone()));

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
