//! The snapshot encoding of the map, written from a capture and read as a stream.
//!
//! Version 2 (written): `2 | applied | clock_ms | exact_from (0: none, else offset + 1) |
//! removal buckets (count, then index and offset of each non-zero one) | key count | per key,
//! sorted: key | type (0 string, 1 hash, 2 list, 3 set, 4 zset) | value | expiry (0, or 1 and
//! the time) | version`. A string is its bytes; a hash, list or set is a count and its
//! elements (fields and values in turn) in their order; a sorted set is a count and
//! `score (f64 bits, LE) | member`, lowest first.
//!
//! Version 1 (still read): `1 | applied | clock_ms | key count | per key: key | value (a
//! string) | expiry`. Its keys get version 0 and no exact versions (see `Store::exact_from`).
//!
//! Keys are sorted and collections keep their order, so replicas with the same state write
//! the same bytes.
//!
//! Taking a snapshot: [`capture`] takes what the snapshot needs under the state machine's lock
//! (the key table's shards by pointer, see `key_table`), and [`EncodingReader`] encodes it on a
//! blocking thread, handing out chunks of about [`CHUNK_BYTES`] as the driver reads them.
//! Restoring: [`decode_stream`] decodes the chunks as they arrive; no step holds the whole
//! encoded state.

use async_trait::async_trait;
use bytes::{BufMut, Bytes, BytesMut};
use raft_core::io::SnapshotReader;
use raft_core::Offset;
use tokio::sync::mpsc;

use super::command::{put_bytes, put_f64, put_varint, DecodeError, Reader};
use super::key_table::Captured;
use super::store::{Entry, Hash, List, Set, Store, Value, REMOVED_BUCKETS};
use super::zset::{Score, ZSet};
use std::sync::Arc;

/// The version of the snapshot encoding this build writes.
pub(super) const SNAPSHOT_VERSION: u8 = 2;

/// The version written before typed values, still read.
pub(super) const SNAPSHOT_VERSION_V1: u8 = 1;

/// About the size of each chunk the encoder hands out.
pub(super) const CHUNK_BYTES: usize = 1 << 20;

/// Encoded chunks waiting for the reader: the encoder runs at most this far ahead.
const CHUNKS_AHEAD: usize = 4;

const T_STR: u8 = 0;
const T_HASH: u8 = 1;
const T_LIST: u8 = 2;
const T_SET: u8 = 3;
const T_ZSET: u8 = 4;

/// Everything a snapshot holds, as of one moment: the table by shard pointer, the rest copied.
pub(super) struct Capture {
    applied: Offset,
    clock_ms: u64,
    exact_from: Option<u64>,
    /// The non-zero removal buckets, by index.
    removed: Vec<(usize, u64)>,
    table: Captured,
}

/// Captures `s` (call under the lock; it takes microseconds).
pub(super) fn capture(s: &Store) -> Capture {
    Capture {
        applied: s.applied,
        clock_ms: s.clock_ms,
        exact_from: s.exact_from,
        removed: s
            .removed
            .iter()
            .enumerate()
            .filter(|(_, o)| **o != 0)
            .map(|(i, o)| (i, *o))
            .collect(),
        table: s.map.capture(),
    }
}

/// Encodes `c` in the current version, handing `emit` chunks of about `chunk` bytes in
/// order; stops early (returning `false`) once `emit` returns `false`.
pub(super) fn encode(c: &Capture, chunk: usize, mut emit: impl FnMut(Bytes) -> bool) -> bool {
    let mut out = BytesMut::with_capacity(chunk + 1024);
    out.put_u8(SNAPSHOT_VERSION);
    put_varint(&mut out, c.applied.0);
    put_varint(&mut out, c.clock_ms);
    put_varint(&mut out, c.exact_from.map_or(0, |o| o + 1));
    put_varint(&mut out, c.removed.len() as u64);
    for (i, o) in &c.removed {
        put_varint(&mut out, *i as u64);
        put_varint(&mut out, *o);
    }
    let mut entries: Vec<(&Bytes, &Entry)> = c.table.iter().flat_map(|s| s.iter()).collect();
    entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
    put_varint(&mut out, entries.len() as u64);
    for (k, e) in entries {
        put_bytes(&mut out, k);
        put_value(&mut out, &e.value);
        match e.expire_at_ms {
            Some(t) => {
                out.put_u8(1);
                put_varint(&mut out, t);
            }
            None => out.put_u8(0),
        }
        put_varint(&mut out, e.version);
        if out.len() >= chunk && !emit(out.split().freeze()) {
            return false;
        }
    }
    out.is_empty() || emit(out.freeze())
}

/// A digest of the state `c` holds: FNV-1a (64 bits) over its snapshot encoding, which is
/// the same bytes on every replica with the same state (keys sorted, collections in their
/// replicated order), and covers the applied offset, the clock and every key's value, expiry
/// and version. Linear in the state's size; computed outside the state machine's lock.
pub(super) fn digest(c: &Capture) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    encode(c, CHUNK_BYTES, |chunk| {
        for b in chunk.iter() {
            h = (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
        true
    });
    h
}

/// What the encoding thread sends: chunks, then the end. A channel closed without the end
/// means the encoder died, and the snapshot must not be taken as complete.
enum Piece {
    Chunk(Bytes),
    End,
}

/// A snapshot being encoded from a [`Capture`] on a blocking thread.
pub(super) struct EncodingReader {
    rx: mpsc::Receiver<Piece>,
    ended: bool,
}

impl EncodingReader {
    /// Starts encoding `c` (on tokio's blocking pool); dropping the reader stops it.
    pub(super) fn spawn(c: Capture) -> EncodingReader {
        let (tx, rx) = mpsc::channel(CHUNKS_AHEAD);
        tokio::task::spawn_blocking(move || {
            if encode(&c, CHUNK_BYTES, |b| {
                tx.blocking_send(Piece::Chunk(b)).is_ok()
            }) {
                let _ = tx.blocking_send(Piece::End);
            }
            // The capture held the shards that writes copied meanwhile; freeing them is the
            // largest release a node makes, so hand that memory back.
            drop(c);
            crate::allocator::release_free_memory();
        });
        EncodingReader { rx, ended: false }
    }
}

#[async_trait]
impl SnapshotReader for EncodingReader {
    async fn next_chunk(&mut self) -> std::io::Result<Option<Bytes>> {
        if self.ended {
            return Ok(None);
        }
        match self.rx.recv().await {
            Some(Piece::Chunk(b)) => Ok(Some(b)),
            Some(Piece::End) => {
                self.ended = true;
                Ok(None)
            }
            None => Err(std::io::Error::other(
                "the snapshot encoder stopped before the end",
            )),
        }
    }
}

fn put_value(out: &mut BytesMut, v: &Value) {
    match v {
        Value::Str(b) => {
            out.put_u8(T_STR);
            put_bytes(out, b);
        }
        Value::Hash(h) => {
            out.put_u8(T_HASH);
            put_varint(out, h.len() as u64);
            for (f, v) in h.iter() {
                put_bytes(out, f);
                put_bytes(out, v);
            }
        }
        Value::List(l) => {
            out.put_u8(T_LIST);
            put_varint(out, l.len() as u64);
            l.iter().for_each(|i| put_bytes(out, i));
        }
        Value::Set(s) => {
            out.put_u8(T_SET);
            put_varint(out, s.len() as u64);
            s.iter().for_each(|m| put_bytes(out, m));
        }
        Value::ZSet(z) => {
            out.put_u8(T_ZSET);
            put_varint(out, z.len() as u64);
            for (m, s) in z.iter() {
                put_f64(out, s.get());
                put_bytes(out, m);
            }
        }
    }
}

fn read_value(r: &mut Reader) -> Result<Value, DecodeError> {
    let tag = r.u8()?;
    if tag == T_STR {
        return Ok(Value::Str(r.bytes()?));
    }
    let n = r.count()?;
    let value = match tag {
        T_HASH => {
            let mut h = Hash::with_capacity(n);
            for _ in 0..n {
                h.insert(r.bytes()?, r.bytes()?);
            }
            (h.len() == n).then_some(Value::Hash(Arc::new(h)))
        }
        T_LIST => Some(Value::List(Arc::new(
            (0..n).map(|_| r.bytes()).collect::<Result<List, _>>()?,
        ))),
        T_SET => {
            let s = (0..n).map(|_| r.bytes()).collect::<Result<Set, _>>()?;
            (s.len() == n).then_some(Value::Set(Arc::new(s)))
        }
        T_ZSET => {
            let mut z = ZSet::default();
            for _ in 0..n {
                let score = Score::new(r.f64()?);
                z.insert(r.bytes()?, score);
            }
            (z.len() == n).then_some(Value::ZSet(Arc::new(z)))
        }
        t => return Err(DecodeError(format!("value type {t}"))),
    };
    match value {
        Some(v) if n > 0 => Ok(v),
        Some(_) => Err(DecodeError("an empty collection".into())),
        None => Err(DecodeError("a repeated field or member".into())),
    }
}

/// The bytes of a snapshot stream not decoded yet, refilled from its reader.
struct Pending<'a> {
    buf: Bytes,
    reader: &'a mut dyn SnapshotReader,
    eof: bool,
}

impl Pending<'_> {
    /// Decodes one item with `f` from the pending bytes. When `f` runs out of bytes, reads
    /// more (at least doubling what is pending, so that an item much larger than a chunk is
    /// decoded in linear time) and tries again; at the end of the stream its error stands.
    async fn decode<T>(
        &mut self,
        mut f: impl FnMut(&mut Reader) -> Result<T, DecodeError>,
    ) -> Result<T, DecodeError> {
        loop {
            let mut r = Reader::new(&self.buf);
            match f(&mut r) {
                Ok(v) => {
                    self.buf = self.buf.slice(r.pos..);
                    return Ok(v);
                }
                Err(_) if r.short && !self.eof => self.fill().await?,
                Err(e) => return Err(e),
            }
        }
    }

    /// Reads at least one more chunk, and as many as it takes to double the pending bytes.
    async fn fill(&mut self) -> Result<(), DecodeError> {
        let want = (self.buf.len() * 2).max(1);
        // The pending bytes and the new chunks, when they must be joined (a copy).
        let mut joined = BytesMut::new();
        loop {
            let chunk = self
                .reader
                .next_chunk()
                .await
                .map_err(|e| DecodeError(format!("reading the snapshot: {e}")))?;
            let Some(chunk) = chunk else {
                self.eof = true;
                break;
            };
            if self.buf.is_empty() && joined.is_empty() {
                // Nothing pending: the chunk is used as it is.
                self.buf = chunk;
            } else {
                if joined.is_empty() {
                    joined.reserve(self.buf.len() + chunk.len());
                    joined.extend_from_slice(&std::mem::take(&mut self.buf));
                }
                joined.extend_from_slice(&chunk);
            }
            if self.buf.len() + joined.len() >= want {
                break;
            }
        }
        if !joined.is_empty() {
            self.buf = joined.freeze();
        }
        Ok(())
    }
}

/// The header of a snapshot: version, clock, versions and removals, and the key count.
struct Header {
    v2: bool,
    clock_ms: u64,
    exact_from: Option<u64>,
    removed: Vec<(usize, u64)>,
    keys: u64,
}

fn read_header(r: &mut Reader, applied: Offset) -> Result<Header, DecodeError> {
    let version = r.u8()?;
    if version != SNAPSHOT_VERSION && version != SNAPSHOT_VERSION_V1 {
        return Err(DecodeError(format!(
            "version {version}, this build reads {SNAPSHOT_VERSION_V1} and {SNAPSHOT_VERSION}"
        )));
    }
    let at = Offset(r.varint()?);
    if at != applied {
        return Err(DecodeError(format!("it covers {at}, not {applied}")));
    }
    let clock_ms = r.varint()?;
    let v2 = version == SNAPSHOT_VERSION;
    let (mut exact_from, mut removed) = (None, Vec::new());
    if v2 {
        exact_from = r.varint()?.checked_sub(1);
        let n = r.count()?;
        for _ in 0..n {
            let i = r.varint()?;
            let o = r.varint()?;
            let slot = usize::try_from(i)
                .ok()
                .filter(|i| *i < REMOVED_BUCKETS)
                .ok_or_else(|| DecodeError(format!("removal bucket {i}")))?;
            removed.push((slot, o));
        }
    }
    // Not bounded by the bytes at hand: the keys follow in later chunks.
    let keys = r.varint()?;
    Ok(Header {
        v2,
        clock_ms,
        exact_from,
        removed,
        keys,
    })
}

fn read_key(r: &mut Reader, v2: bool) -> Result<(Bytes, Entry), DecodeError> {
    let key = r.bytes()?;
    let value = if v2 {
        read_value(r)?
    } else {
        Value::Str(r.bytes()?)
    };
    let expire_at_ms = match r.u8()? {
        0 => None,
        1 => Some(r.varint()?),
        t => return Err(DecodeError(format!("expiry tag {t}"))),
    };
    let version = if v2 { r.varint()? } else { 0 };
    let entry = Entry {
        value,
        expire_at_ms,
        version,
    };
    Ok((key, entry))
}

/// Decodes a snapshot of either version that covers the records before `applied`, read from
/// `reader` to its end.
pub(super) async fn decode_stream(
    applied: Offset,
    reader: &mut dyn SnapshotReader,
) -> Result<Store, DecodeError> {
    let mut pending = Pending {
        buf: Bytes::new(),
        reader,
        eof: false,
    };
    let h = pending.decode(|r| read_header(r, applied)).await?;
    let mut store = Store {
        clock_ms: h.clock_ms,
        applied,
        exact_from: h.exact_from,
        ..Store::default()
    };
    for (slot, o) in h.removed {
        store.removed[slot] = o;
    }
    for _ in 0..h.keys {
        let (key, entry) = pending.decode(|r| read_key(r, h.v2)).await?;
        if let Some(t) = entry.expire_at_ms {
            store.expiries.insert((t, key.clone()));
        }
        if store.map.insert(key, entry).is_some() {
            return Err(DecodeError("a repeated key".into()));
        }
    }
    // Nothing may follow the last key (reading on also surfaces a damaged stream's error).
    while !pending.eof {
        pending.fill().await?;
    }
    if !pending.buf.is_empty() {
        return Err(DecodeError(format!("{} trailing bytes", pending.buf.len())));
    }
    Ok(store)
}

/// The whole encoding of `s`, for tests.
#[cfg(test)]
pub(super) fn encode_all(s: &Store) -> Bytes {
    let mut out = BytesMut::new();
    encode(&capture(s), 64, |b| {
        out.extend_from_slice(&b);
        true
    });
    out.freeze()
}
