//! Appends per second through `LogStore` for each backend, against the raw write + fdatasync
//! rate of a plain file on the same disk, measured in lockstep: each append follows one raw write
//! of the same bytes and its fdatasync.

use std::fs::OpenOptions;
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use raft_core::io::LogStore;
use raft_core::{Epoch, Offset, Record, RecordKind};
use serde_json::json;

use crate::{Figure, Size};

fn records(from: u64, n: usize, payload: usize) -> Vec<Record> {
    (0..n as u64)
        .map(|i| Record {
            offset: Offset(from + i),
            epoch: Epoch(1),
            kind: RecordKind::Data,
            payload: Bytes::from(vec![(i % 251) as u8; payload]),
        })
        .collect()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// Appends `batches` batches of `batch` records, each right after writing the same number of
/// encoded bytes to a plain file in `dir` and calling fdatasync, so that the store and the raw
/// file see the same disk conditions (a shared host's fsync rate swings by several times within
/// seconds). Returns the store's and the raw file's records per second.
pub fn appends(
    log: Arc<dyn LogStore>,
    dir: &std::path::Path,
    batch: usize,
    batches: usize,
    payload: usize,
) -> (f64, f64) {
    let mut file = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(dir.join("raw.bin"))
        .expect("raw file");
    let chunk = vec![7u8; batch * (payload + raft_core::codec::RECORD_HEADER_LEN)];
    let rt = runtime();
    rt.block_on(async move {
        let (mut raw_time, mut store_time) = (Duration::ZERO, Duration::ZERO);
        let mut next = 0u64;
        for _ in 0..batches {
            let recs = records(next, batch, payload);
            next += batch as u64;
            let started = Instant::now();
            file.write_all(&chunk).expect("write");
            file.sync_data().expect("fdatasync");
            let between = Instant::now();
            log.append(&recs).await.expect("append");
            raw_time += between - started;
            store_time += between.elapsed();
        }
        let n = (batch * batches) as f64;
        (n / store_time.as_secs_f64(), n / raw_time.as_secs_f64())
    })
}

/// Reads the first `end` records back in 1 MiB fetches, as a follower's fetches would; MiB of
/// payload per second.
pub fn read_back_mib_per_s(log: Arc<dyn LogStore>, end: u64) -> f64 {
    runtime().block_on(async move {
        let started = Instant::now();
        let (mut from, mut bytes) = (0u64, 0usize);
        while from < end {
            let got = log
                .read(Offset(from), Offset(end), 1 << 20)
                .await
                .expect("read back");
            assert!(!got.is_empty(), "the log holds every appended record");
            from += got.len() as u64;
            bytes += got.iter().map(|r| r.payload.len()).sum::<usize>();
        }
        bytes as f64 / f64::from(1 << 20) / started.elapsed().as_secs_f64()
    })
}

/// Runs the suite.
pub fn run(size: Size) -> Vec<Figure> {
    let mut out = Vec::new();
    for payload in [256usize, 4096] {
        for batch in [1usize, 16, 256] {
            let batches = size.pick(
                match batch {
                    1 => 2000,
                    16 => 400,
                    _ => 40,
                },
                match batch {
                    1 => 20,
                    16 => 8,
                    _ => 2,
                },
            );
            let dir = tempfile::tempdir().expect("temp dir");
            for engine in ["redb", "fjall"] {
                let edir = dir.path().join(engine);
                let log: Arc<dyn LogStore> = match engine {
                    "redb" => Arc::new(
                        raft_storage_redb::RedbStore::open(
                            &edir,
                            "bench",
                            raft_storage_redb::Options::default(),
                        )
                        .expect("open redb"),
                    ),
                    _ => Arc::new(
                        raft_storage_fjall::FjallStore::open(
                            &edir,
                            "bench",
                            raft_storage_fjall::Options::default(),
                        )
                        .expect("open fjall"),
                    ),
                };
                let (rate, raw_rate) = appends(log, dir.path(), batch, batches, payload);
                out.push(Figure {
                    suite: "storage",
                    name: format!("appends {engine}"),
                    params: json!({
                        "engine": engine, "batch": batch, "record_bytes": payload,
                        "batches": batches, "fsync": true,
                    }),
                    values: json!({
                        "records_per_s": rate.round(),
                        "raw_fdatasync_records_per_s": raw_rate.round(),
                        "ratio_to_raw": (rate / raw_rate * 100.0).round() / 100.0,
                    }),
                });
            }
        }
    }
    out
}
