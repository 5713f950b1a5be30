//! [`SnapshotDir`]: a [`SnapshotStore`] in a directory of files, shared by the disk backends.
//!
//! Snapshots are large, written once and read sequentially, so they live in plain files next
//! to the log's database rather than inside it (as KRaft's `.checkpoint` files and etcd's
//! `.snap` files do). Each complete snapshot is one file named after its id,
//! `<offset>-<epoch>.snap`, holding the snapshot's bytes followed by a footer:
//!
//! ```text
//! data     size bytes
//! magic    4 bytes "RSNP"
//! version  u8      SNAPSHOT_FORMAT_VERSION
//! offset   u64     the snapshot's end offset
//! epoch    u32     the epoch of the record before it
//! size     u64     bytes of data
//! crc      u32     CRC-32 of the data
//! ```
//!
//! Durability: a snapshot is written to a temporary file, synced, renamed into place, and the
//! directory synced; only then is it visible, so a crash leaves either the whole snapshot or
//! none. A download goes to `download.partial`, which opening the directory deletes: a partial
//! download never survives a restart. Opening also verifies every complete snapshot's checksum
//! and refuses the directory when one is damaged or of a newer format. The newest
//! [`SnapshotDir::KEPT`] snapshots are kept; older ones are deleted once a newer one is durable.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use bytes::Bytes;

use crate::codec::DecodeError;
use crate::io::{SnapshotMeta, SnapshotReader, SnapshotStore, SnapshotWriter, StorageError};
use crate::types::{Epoch, Offset, OffsetAndEpoch};

/// The version of the snapshot file format.
pub const SNAPSHOT_FORMAT_VERSION: u8 = 1;

const MAGIC: &[u8; 4] = b"RSNP";
const FOOTER_LEN: u64 = 4 + 1 + 8 + 4 + 8 + 4;
const PARTIAL: &str = "download.partial";
/// Snapshots being taken are written to `<id>.tmp` files, which opening the directory deletes.
const TEMP_SUFFIX: &str = ".tmp";

/// The bytes a [`SnapshotReader`] of a snapshot file hands out at a time.
const READ_CHUNK: u64 = 1 << 20;

/// A directory of snapshot files. See the module documentation.
#[derive(Clone, Debug)]
pub struct SnapshotDir {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    dir: PathBuf,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Complete snapshots, ascending by id.
    complete: Vec<SnapshotMeta>,
    /// The download in progress: its id, the bytes written and their running checksum.
    partial: Option<(OffsetAndEpoch, u64, crc32fast::Hasher)>,
}

fn io(e: std::io::Error) -> StorageError {
    StorageError::Io(Box::new(e))
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn file_name(id: OffsetAndEpoch) -> String {
    format!("{:020}-{:010}.snap", id.offset.0, id.epoch.0)
}

fn temp_name(id: OffsetAndEpoch) -> String {
    format!("{:020}-{:010}{TEMP_SUFFIX}", id.offset.0, id.epoch.0)
}

/// Runs blocking file work off the async threads.
async fn unblock<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, StorageError> + Send + 'static,
) -> Result<T, StorageError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| StorageError::Io(Box::new(e)))?
}

impl SnapshotDir {
    /// Complete snapshots kept: the newest, and the one before it (a follower may still be
    /// downloading that one when a newer one is taken).
    pub const KEPT: usize = 2;

    /// Opens (creating it if needed) the snapshot directory `dir`, discarding any partial
    /// download and verifying every complete snapshot.
    pub fn open(dir: impl AsRef<Path>) -> Result<SnapshotDir, StorageError> {
        let dir = dir.as_ref().to_path_buf();
        fs::create_dir_all(&dir).map_err(io)?;
        let mut complete = Vec::new();
        for entry in fs::read_dir(&dir).map_err(io)? {
            let entry = entry.map_err(io)?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name == PARTIAL || name.ends_with(TEMP_SUFFIX) {
                fs::remove_file(entry.path()).map_err(io)?;
            } else if name.ends_with(".snap") {
                complete.push(verify_file(&entry.path())?);
            }
        }
        complete.sort_by_key(|m| m.id);
        sync_dir(&dir)?;
        Ok(SnapshotDir {
            inner: Arc::new(Inner {
                dir,
                state: Mutex::new(State {
                    complete,
                    partial: None,
                }),
            }),
        })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.inner.dir
    }

    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Inner) -> Result<T, StorageError> + Send + 'static,
    ) -> Result<T, StorageError> {
        let inner = self.inner.clone();
        unblock(move || f(&inner)).await
    }
}

impl Inner {
    fn path(&self, id: OffsetAndEpoch) -> PathBuf {
        self.dir.join(file_name(id))
    }

    /// Makes `temp` (data and footer, synced) the complete snapshot `meta`, then deletes the
    /// snapshots beyond the kept ones.
    fn publish(&self, temp: &Path, meta: SnapshotMeta) -> Result<(), StorageError> {
        fs::rename(temp, self.path(meta.id)).map_err(io)?;
        sync_dir(&self.dir)?;
        let doomed = {
            let mut state = lock(&self.state);
            state.complete.retain(|m| m.id != meta.id);
            state.complete.push(meta);
            state.complete.sort_by_key(|m| m.id);
            let excess = state.complete.len().saturating_sub(SnapshotDir::KEPT);
            state.complete.drain(..excess).collect::<Vec<_>>()
        };
        for old in doomed {
            fs::remove_file(self.path(old.id)).map_err(io)?;
        }
        Ok(())
    }

    fn find(&self, id: OffsetAndEpoch) -> Option<SnapshotMeta> {
        lock(&self.state)
            .complete
            .iter()
            .find(|m| m.id == id)
            .copied()
    }
}

fn sync_dir(dir: &Path) -> Result<(), StorageError> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(io)
}

fn footer(meta: SnapshotMeta) -> Vec<u8> {
    let mut f = Vec::with_capacity(FOOTER_LEN as usize);
    f.extend_from_slice(MAGIC);
    f.push(SNAPSHOT_FORMAT_VERSION);
    f.extend_from_slice(&meta.id.offset.0.to_le_bytes());
    f.extend_from_slice(&meta.id.epoch.0.to_le_bytes());
    f.extend_from_slice(&meta.size.to_le_bytes());
    f.extend_from_slice(&meta.checksum.to_le_bytes());
    f
}

/// Reads a snapshot file's footer and checks its data against it.
fn verify_file(path: &Path) -> Result<SnapshotMeta, StorageError> {
    let bad = |what: &str| StorageError::Incompatible(format!("{}: {what}", path.display()));
    let mut file = File::open(path).map_err(io)?;
    let len = file.metadata().map_err(io)?.len();
    if len < FOOTER_LEN {
        return Err(bad("too short for a snapshot footer"));
    }
    file.seek(SeekFrom::Start(len - FOOTER_LEN)).map_err(io)?;
    let mut f = [0u8; FOOTER_LEN as usize];
    file.read_exact(&mut f).map_err(io)?;
    if &f[..4] != MAGIC {
        return Err(bad("not a snapshot file"));
    }
    if f[4] != SNAPSHOT_FORMAT_VERSION {
        return Err(StorageError::Incompatible(format!(
            "{}: snapshot format version {} (this build reads {SNAPSHOT_FORMAT_VERSION})",
            path.display(),
            f[4]
        )));
    }
    let u64_at = |i: usize| u64::from_le_bytes(f[i..i + 8].try_into().expect("8 bytes"));
    let u32_at = |i: usize| u32::from_le_bytes(f[i..i + 4].try_into().expect("4 bytes"));
    let id = OffsetAndEpoch::new(Offset(u64_at(5)), Epoch(u32_at(13)));
    let size = u64_at(17);
    let stored = u32_at(25);
    if size != len - FOOTER_LEN {
        return Err(bad("footer size does not match the file"));
    }
    file.seek(SeekFrom::Start(0)).map_err(io)?;
    let mut hasher = crc32fast::Hasher::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut left = size;
    while left > 0 {
        let n = (left as usize).min(buf.len());
        file.read_exact(&mut buf[..n]).map_err(io)?;
        hasher.update(&buf[..n]);
        left -= n as u64;
    }
    let computed = hasher.finalize();
    if computed != stored {
        return Err(StorageError::Corrupt {
            offset: id.offset,
            source: DecodeError::Checksum { stored, computed },
        });
    }
    Ok(SnapshotMeta {
        id,
        size,
        checksum: stored,
    })
}

#[async_trait]
impl SnapshotStore for SnapshotDir {
    async fn latest(&self) -> Result<Option<SnapshotMeta>, StorageError> {
        Ok(lock(&self.inner.state).complete.last().copied())
    }

    async fn create(&self, id: OffsetAndEpoch) -> Result<Box<dyn SnapshotWriter>, StorageError> {
        let temp = self.inner.dir.join(temp_name(id));
        let file = {
            let temp = temp.clone();
            self.blocking(move |_| File::create(&temp).map_err(io))
                .await?
        };
        Ok(Box::new(DirWriter {
            inner: self.inner.clone(),
            id,
            temp,
            file: Some(file),
            size: 0,
            hasher: crc32fast::Hasher::new(),
        }))
    }

    async fn read(
        &self,
        id: OffsetAndEpoch,
        position: u64,
        max_bytes: u32,
    ) -> Result<Option<(SnapshotMeta, Bytes)>, StorageError> {
        self.blocking(move |inner| {
            let Some(meta) = inner.find(id) else {
                return Ok(None);
            };
            let from = position.min(meta.size);
            let len = (meta.size - from).min(u64::from(max_bytes)) as usize;
            let mut buf = vec![0u8; len];
            match File::open(inner.path(id)) {
                Ok(mut file) => {
                    file.seek(SeekFrom::Start(from)).map_err(io)?;
                    file.read_exact(&mut buf).map_err(io)?;
                }
                // Deleted by a newer snapshot between the lookup and the open.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(io(e)),
            }
            Ok(Some((meta, Bytes::from(buf))))
        })
        .await
    }

    async fn open(
        &self,
        id: OffsetAndEpoch,
    ) -> Result<Option<Box<dyn SnapshotReader>>, StorageError> {
        self.blocking(move |inner| {
            let Some(meta) = inner.find(id) else {
                return Ok(None);
            };
            let file = match File::open(inner.path(id)) {
                Ok(file) => file,
                // Deleted by a newer snapshot between the lookup and the open.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(io(e)),
            };
            let reader: Box<dyn SnapshotReader> = Box::new(DirReader {
                meta,
                file: Some(file),
                left: meta.size,
                hasher: crc32fast::Hasher::new(),
            });
            Ok(Some(reader))
        })
        .await
    }

    async fn write_partial(
        &self,
        id: OffsetAndEpoch,
        position: u64,
        data: Bytes,
    ) -> Result<(), StorageError> {
        self.blocking(move |inner| {
            let path = inner.dir.join(PARTIAL);
            let mut state = lock(&inner.state);
            if position == 0 {
                File::create(&path).map_err(io)?;
                state.partial = Some((id, 0, crc32fast::Hasher::new()));
            }
            let Some((pid, written, hasher)) = state.partial.as_mut() else {
                return Err(StorageError::Invalid(format!(
                    "snapshot chunk for {id:?} at {position} without a download"
                )));
            };
            if *pid != id || *written != position {
                return Err(StorageError::Invalid(format!(
                    "snapshot chunk for {id:?} at {position} does not continue the download"
                )));
            }
            let mut file = OpenOptions::new().append(true).open(&path).map_err(io)?;
            file.write_all(&data).map_err(io)?;
            hasher.update(&data);
            *written += data.len() as u64;
            Ok(())
        })
        .await
    }

    async fn finish_partial(
        &self,
        id: OffsetAndEpoch,
        size: u64,
        checksum: u32,
    ) -> Result<Option<SnapshotMeta>, StorageError> {
        self.blocking(move |inner| {
            let path = inner.dir.join(PARTIAL);
            let partial = lock(&inner.state).partial.take();
            let Some((pid, written, hasher)) = partial else {
                return Ok(None);
            };
            let meta = SnapshotMeta { id, size, checksum };
            if pid != id || written != size || hasher.finalize() != checksum {
                fs::remove_file(&path).map_err(io)?;
                return Ok(None);
            }
            let mut file = OpenOptions::new().append(true).open(&path).map_err(io)?;
            file.write_all(&footer(meta)).map_err(io)?;
            file.sync_all().map_err(io)?;
            drop(file);
            inner.publish(&path, meta)?;
            Ok(Some(meta))
        })
        .await
    }
}

/// A snapshot being taken: its data goes to a temporary file, which `finish` completes with the
/// footer, syncs and renames into place.
struct DirWriter {
    inner: Arc<Inner>,
    id: OffsetAndEpoch,
    temp: PathBuf,
    /// `None` only while a write is under way on a blocking thread.
    file: Option<File>,
    size: u64,
    hasher: crc32fast::Hasher,
}

impl DirWriter {
    fn take_file(&mut self) -> Result<File, StorageError> {
        self.file.take().ok_or_else(|| {
            StorageError::Poisoned(format!(
                "an earlier write to {} failed",
                self.temp.display()
            ))
        })
    }
}

#[async_trait]
impl SnapshotWriter for DirWriter {
    async fn write(&mut self, chunk: Bytes) -> Result<(), StorageError> {
        let mut file = self.take_file()?;
        self.hasher.update(&chunk);
        self.size += chunk.len() as u64;
        let file = unblock(move || {
            file.write_all(&chunk).map_err(io)?;
            Ok(file)
        })
        .await?;
        self.file = Some(file);
        Ok(())
    }

    async fn finish(mut self: Box<Self>) -> Result<SnapshotMeta, StorageError> {
        let mut file = self.take_file()?;
        let meta = SnapshotMeta {
            id: self.id,
            size: self.size,
            checksum: self.hasher.clone().finalize(),
        };
        let inner = self.inner.clone();
        let temp = self.temp.clone();
        unblock(move || {
            file.write_all(&footer(meta)).map_err(io)?;
            file.sync_all().map_err(io)?;
            drop(file);
            inner.publish(&temp, meta)
        })
        .await?;
        // Published: nothing for `drop` to discard.
        self.temp = PathBuf::new();
        Ok(meta)
    }
}

impl Drop for DirWriter {
    fn drop(&mut self) {
        // An unfinished snapshot leaves nothing behind (opening the directory would delete it
        // too; this spares the disk until then).
        if !self.temp.as_os_str().is_empty() {
            let _ = fs::remove_file(&self.temp);
        }
    }
}

/// A complete snapshot file read in chunks, its checksum verified at the end. The open file
/// stays readable after a newer snapshot deletes it.
struct DirReader {
    meta: SnapshotMeta,
    /// `None` only while a read is under way on a blocking thread, or after a failure.
    file: Option<File>,
    left: u64,
    hasher: crc32fast::Hasher,
}

#[async_trait]
impl SnapshotReader for DirReader {
    async fn next_chunk(&mut self) -> std::io::Result<Option<Bytes>> {
        if self.left == 0 {
            if self.file.take().is_none() {
                return Ok(None);
            }
            let computed = self.hasher.clone().finalize();
            if computed != self.meta.checksum {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!(
                        "snapshot {:?}: checksum {computed:#010x}, stored {:#010x}",
                        self.meta.id, self.meta.checksum
                    ),
                ));
            }
            return Ok(None);
        }
        let mut file = self
            .file
            .take()
            .ok_or_else(|| std::io::Error::other("an earlier read of this snapshot failed"))?;
        let n = self.left.min(READ_CHUNK) as usize;
        let (file, buf) = tokio::task::spawn_blocking(move || {
            let mut buf = vec![0u8; n];
            file.read_exact(&mut buf).map(|()| (file, buf))
        })
        .await
        .map_err(std::io::Error::other)??;
        self.hasher.update(&buf);
        self.left -= n as u64;
        self.file = Some(file);
        Ok(Some(Bytes::from(buf)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_damaged_snapshot_file_is_refused_on_open() {
        let dir = std::env::temp_dir().join(format!("raft-snapdir-bad-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let store = SnapshotDir::open(&dir).expect("open");
        let id = OffsetAndEpoch::new(Offset(9), Epoch(2));
        crate::io::save_bytes(&store, id, Bytes::from_static(b"state of the machine"))
            .await
            .expect("save");
        drop(store);
        let path = dir.join(file_name(id));
        let mut bytes = fs::read(&path).expect("read");
        bytes[3] ^= 0x01;
        fs::write(&path, bytes).expect("write");
        match SnapshotDir::open(&dir) {
            Err(StorageError::Corrupt { offset, .. }) => assert_eq!(offset, Offset(9)),
            other => panic!("expected a corrupt-snapshot error, got {other:?}"),
        }
        fs::remove_dir_all(&dir).expect("clean up");
    }

    /// Goal: a snapshot file damaged after the directory was opened is never handed out as
    /// intact. Method: flip a byte of a saved snapshot's data in place; its reader ends with
    /// an error where an intact one ends with `None`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_reader_reports_damage_at_the_end() {
        let dir = std::env::temp_dir().join(format!("raft-snapdir-rot-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let store = SnapshotDir::open(&dir).expect("open");
        let id = OffsetAndEpoch::new(Offset(4), Epoch(1));
        let data = Bytes::from(vec![5u8; 3 << 20]);
        crate::io::save_bytes(&store, id, data.clone())
            .await
            .expect("save");
        let loaded = crate::io::load_bytes(&store, id, u64::MAX).await;
        assert_eq!(loaded.expect("intact").as_deref(), Some(&data[..]));
        let path = dir.join(file_name(id));
        let mut bytes = fs::read(&path).expect("read");
        bytes[(2 << 20) + 7] ^= 0x40;
        fs::write(&path, bytes).expect("write");
        let mut reader = store.open(id).await.expect("open").expect("present");
        let mut chunks = 0;
        let end = loop {
            match reader.next_chunk().await {
                Ok(Some(_)) => chunks += 1,
                other => break other,
            }
        };
        assert_eq!(chunks, 3, "every chunk is handed out");
        let err = end.expect_err("the damage is reported");
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
        fs::remove_dir_all(&dir).expect("clean up");
    }
}
