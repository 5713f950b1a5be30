//! Snapshots as streams of chunks: what a state machine produces and consumes
//! ([`crate::io::StateMachine::snapshot`] and [`crate::io::StateMachine::restore`]) and what a
//! snapshot store reads and writes ([`crate::io::SnapshotStore::open`] and
//! [`crate::io::SnapshotStore::create`]).
//!
//! A snapshot is never required to fit in one buffer: the driver moves it chunk by chunk from
//! the state machine to the store, from the store to a follower, and from the store back into
//! a state machine. A state machine whose state is small may still produce one buffer and hand
//! it over as a [`BytesReader`], and read a snapshot whole with [`read_to_end`].

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};

use crate::io::{SnapshotMeta, SnapshotStore, StorageError};
use crate::types::OffsetAndEpoch;

/// The chunk size [`BytesReader::new`] cuts a buffer into.
pub const DEFAULT_CHUNK_BYTES: usize = 1 << 20;

/// A snapshot read front to back, one chunk at a time.
#[async_trait]
pub trait SnapshotReader: Send {
    /// The next chunk, or `None` after the last one. Chunks are never empty. An error ends the
    /// stream: the snapshot must not be used (a store's reader reports a checksum mismatch
    /// this way, in place of the `None` that would end an intact snapshot).
    async fn next_chunk(&mut self) -> std::io::Result<Option<Bytes>>;
}

/// A snapshot being written: chunks in order, then [`SnapshotWriter::finish`]. Dropped without
/// `finish`, it leaves no snapshot behind.
#[async_trait]
pub trait SnapshotWriter: Send {
    /// Appends `chunk` to the snapshot.
    async fn write(&mut self, chunk: Bytes) -> Result<(), StorageError>;

    /// Makes the snapshot complete and durable, atomically: after a crash it is there whole or
    /// not at all. Returns its size and checksum.
    async fn finish(self: Box<Self>) -> Result<SnapshotMeta, StorageError>;
}

/// A buffer read as a snapshot, in chunks of a fixed size (the slices share the buffer).
#[derive(Debug, Clone)]
pub struct BytesReader {
    rest: Bytes,
    chunk: usize,
}

impl BytesReader {
    /// Reads `data` in chunks of [`DEFAULT_CHUNK_BYTES`].
    pub fn new(data: Bytes) -> BytesReader {
        BytesReader::with_chunk_size(data, DEFAULT_CHUNK_BYTES)
    }

    /// Reads `data` in chunks of `chunk` bytes (at least 1).
    pub fn with_chunk_size(data: Bytes, chunk: usize) -> BytesReader {
        BytesReader {
            rest: data,
            chunk: chunk.max(1),
        }
    }
}

#[async_trait]
impl SnapshotReader for BytesReader {
    async fn next_chunk(&mut self) -> std::io::Result<Option<Bytes>> {
        if self.rest.is_empty() {
            return Ok(None);
        }
        let n = self.chunk.min(self.rest.len());
        Ok(Some(self.rest.split_to(n)))
    }
}

/// Reads `reader` to its end into one buffer; fails once more than `limit` bytes arrive
/// (a snapshot of another state machine, or a damaged one, must not exhaust memory).
pub async fn read_to_end(reader: &mut dyn SnapshotReader, limit: u64) -> std::io::Result<Bytes> {
    let Some(first) = reader.next_chunk().await? else {
        return Ok(Bytes::new());
    };
    let mut total = first.len() as u64;
    let Some(second) = reader.next_chunk().await? else {
        // One chunk: no copy.
        return within(first, total, limit);
    };
    total += second.len() as u64;
    let mut out = BytesMut::with_capacity((total as usize).min(limit as usize));
    out.extend_from_slice(&first);
    out.extend_from_slice(&second);
    check(total, limit)?;
    while let Some(chunk) = reader.next_chunk().await? {
        total += chunk.len() as u64;
        check(total, limit)?;
        out.extend_from_slice(&chunk);
    }
    Ok(out.freeze())
}

/// Stores `data` as the complete snapshot `id` of `store`, in chunks of
/// [`DEFAULT_CHUNK_BYTES`] (for small states and tests; the driver streams).
pub async fn save_bytes(
    store: &dyn SnapshotStore,
    id: OffsetAndEpoch,
    data: Bytes,
) -> Result<SnapshotMeta, StorageError> {
    let mut writer = store.create(id).await?;
    let mut reader = BytesReader::new(data);
    while let Some(chunk) = reader
        .next_chunk()
        .await
        .map_err(|e| StorageError::Io(e.into()))?
    {
        writer.write(chunk).await?;
    }
    writer.finish().await
}

/// The whole of the complete snapshot `id` of `store` (checksum verified), or `None` when it
/// is not held; fails beyond `limit` bytes (for small states and tests; the driver streams).
pub async fn load_bytes(
    store: &dyn SnapshotStore,
    id: OffsetAndEpoch,
    limit: u64,
) -> Result<Option<Bytes>, StorageError> {
    let Some(mut reader) = store.open(id).await? else {
        return Ok(None);
    };
    read_to_end(&mut *reader, limit)
        .await
        .map(Some)
        .map_err(|e| StorageError::Io(e.into()))
}

fn within(data: Bytes, total: u64, limit: u64) -> std::io::Result<Bytes> {
    check(total, limit).map(|()| data)
}

fn check(total: u64, limit: u64) -> std::io::Result<()> {
    if total > limit {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("snapshot larger than {limit} bytes"),
        ));
    }
    Ok(())
}

/// A reader that hands out `head` first, then the rest of `inner`: what is left of a stream
/// after its first bytes were looked at.
pub(crate) struct Prepended {
    pub(crate) head: Option<Bytes>,
    pub(crate) inner: Box<dyn SnapshotReader>,
}

#[async_trait]
impl SnapshotReader for Prepended {
    async fn next_chunk(&mut self) -> std::io::Result<Option<Bytes>> {
        match self.head.take() {
            Some(head) if !head.is_empty() => Ok(Some(head)),
            _ => self.inner.next_chunk().await,
        }
    }
}

/// A reader that counts the bytes it has handed out (for progress lines).
pub(crate) struct Counted<'a> {
    pub(crate) inner: &'a mut dyn SnapshotReader,
    pub(crate) on_chunk: &'a mut (dyn FnMut(u64) + Send),
}

#[async_trait]
impl SnapshotReader for Counted<'_> {
    async fn next_chunk(&mut self) -> std::io::Result<Option<Bytes>> {
        let chunk = self.inner.next_chunk().await?;
        if let Some(c) = &chunk {
            (self.on_chunk)(c.len() as u64);
        }
        Ok(chunk)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
            .block_on(f)
    }

    #[test]
    fn a_buffer_reads_back_in_chunks_of_the_given_size_and_whole() {
        block_on(async {
            let data = Bytes::from((0..10u8).collect::<Vec<_>>());
            let mut r = BytesReader::with_chunk_size(data.clone(), 4);
            let mut sizes = Vec::new();
            while let Some(c) = r.next_chunk().await.expect("read") {
                sizes.push(c.len());
            }
            assert_eq!(sizes, [4, 4, 2]);
            let mut r = BytesReader::with_chunk_size(data.clone(), 3);
            assert_eq!(read_to_end(&mut r, 10).await.expect("whole"), data);
            let mut empty = BytesReader::new(Bytes::new());
            assert_eq!(empty.next_chunk().await.expect("read"), None);
        });
    }

    #[test]
    fn reading_past_the_limit_fails_instead_of_growing() {
        block_on(async {
            let data = Bytes::from(vec![7u8; 100]);
            for chunk in [1, 30, 100] {
                let mut r = BytesReader::with_chunk_size(data.clone(), chunk);
                let err = read_to_end(&mut r, 99).await.expect_err("over the limit");
                assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
            }
        });
    }
}
