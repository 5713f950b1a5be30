//! Option sweep on the bench's append workloads: durable appends per second through
//! `LogStore::append` for every combination of the options given, next to the raw write +
//! fdatasync rate of a plain file in the same directory for the same bytes per sync. Each append
//! follows one raw write + fdatasync, so both see the same disk conditions (the shared host's
//! disk swings by several times within seconds); configurations rotate over the rounds and each
//! figure is the median of its rounds. After the appends the log is read back in 1 MiB fetches
//! (read MiB/s of payload).
//!
//! ```text
//! cargo run --release -p raft-storage-fjall --example fjall_sweep -- \
//!     record=256,4096 batch=256 memtable_mib=4,16,64 journal_mib=64 workers=1 value_kib=256 \
//!     cache_mib=64 rounds=3
//! ```
//!
//! Every argument is `name=v1,v2,...`; `batches=N` sets the appends per measurement (default:
//! 300 at batch 1 and 16, 200 at batch 256 with 256 B records, else 50); `dir=PATH` the
//! directory (default a temporary one).

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use raft_core::io::LogStore;
use raft_core::{Epoch, Offset, Record, RecordKind};
use raft_storage_fjall::{FjallStore, Options};

type Args = BTreeMap<String, String>;

fn list(args: &Args, name: &str, default: &str) -> Vec<String> {
    args.get(name)
        .map_or(default, String::as_str)
        .split(',')
        .map(str::to_string)
        .collect()
}

fn num(s: &str) -> usize {
    s.parse().unwrap_or_else(|_| panic!("not a number: {s}"))
}

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

/// Appends `batches` batches of `batch` records, each right after writing the same number of
/// encoded bytes to a plain file and calling fdatasync (so both see the same disk conditions),
/// then reads everything back in 1 MiB fetches. Returns appended records per second, raw records
/// per second and read MiB of payload per second.
fn appends(dir: &Path, options: Options, batch: usize, batches: usize, payload: usize) -> [f64; 3] {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let raw_path = dir.join("raw.bin");
    let store_dir = dir.join("store");
    let mut raw = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&raw_path)
        .expect("raw file");
    let chunk = vec![7u8; batch * (payload + raft_core::codec::RECORD_HEADER_LEN)];
    let store = FjallStore::open(&store_dir, "sweep", options).expect("open");
    let rates = rt.block_on(async {
        let all: Vec<Vec<Record>> = (0..batches)
            .map(|b| records((b * batch) as u64, batch, payload))
            .collect();
        let (mut raw_time, mut store_time) = (Duration::ZERO, Duration::ZERO);
        for recs in &all {
            let started = Instant::now();
            raw.write_all(&chunk).expect("write");
            raw.sync_data().expect("fdatasync");
            let between = Instant::now();
            store.append(recs).await.expect("append");
            raw_time += between - started;
            store_time += between.elapsed();
        }
        let n = (batch * batches) as f64;
        let end = (batch * batches) as u64;
        let started = Instant::now();
        let (mut from, mut bytes) = (0, 0);
        while from < end {
            let got = store
                .read(Offset(from), Offset(end), 1 << 20)
                .await
                .expect("read");
            from += got.len() as u64;
            bytes += got.iter().map(|r| r.payload.len()).sum::<usize>();
        }
        let read = bytes as f64 / f64::from(1 << 20) / started.elapsed().as_secs_f64();
        [
            n / store_time.as_secs_f64(),
            n / raw_time.as_secs_f64(),
            read,
        ]
    });
    drop(store);
    std::fs::remove_dir_all(store_dir).expect("remove store");
    std::fs::remove_file(raw_path).expect("remove raw file");
    rates
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn main() {
    let args: Args = std::env::args()
        .skip(1)
        .filter_map(|a| {
            a.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
        })
        .collect();
    let temp = tempfile::tempdir().expect("temporary directory");
    let dir = args
        .get("dir")
        .map_or(temp.path().to_path_buf(), Into::into);
    let rounds = num(&list(&args, "rounds", "3")[0]);
    // Every combination: (record, batch, [cache, memtable, journal, workers, value]).
    let mut configs: Vec<(usize, usize, [usize; 5])> = vec![(0, 0, [0; 5])];
    let axes: [(&str, &str); 7] = [
        ("record", "256,4096"),
        ("batch", "1,16,256"),
        ("cache_mib", "64"),
        ("memtable_mib", "16"),
        ("journal_mib", "128"),
        ("workers", "1"),
        ("value_kib", "256"),
    ];
    for (axis, (name, default)) in axes.iter().enumerate() {
        let values = list(&args, name, default);
        configs = configs
            .into_iter()
            .flat_map(|c| {
                values.iter().map(move |v| {
                    let mut c = c;
                    match axis {
                        0 => c.0 = num(v),
                        1 => c.1 = num(v),
                        a => c.2[a - 2] = num(v),
                    }
                    c
                })
            })
            .collect();
    }
    // Per configuration and round: appends/s, raw appends/s, their ratio, read MiB/s.
    let mut samples: Vec<[Vec<f64>; 4]> = vec![Default::default(); configs.len()];
    for _ in 0..rounds {
        for (i, (record, batch, o)) in configs.iter().enumerate() {
            let batches = args.get("batches").map_or(
                match (batch, record) {
                    (1 | 16, _) => 300,
                    (_, 256) => 200,
                    _ => 50,
                },
                |b| num(b),
            );
            let options = Options {
                cache_size_bytes: (o[0] as u64) << 20,
                max_memtable_bytes: (o[1] as u64) << 20,
                max_journal_bytes: (o[2] as u64) << 20,
                worker_threads: o[3],
                batch_value_bytes_max: o[4] << 10,
                ..Options::default()
            };
            let [rate, raw_rate, read] = appends(&dir, options, *batch, batches, *record);
            for (v, x) in samples[i]
                .iter_mut()
                .zip([rate, raw_rate, rate / raw_rate, read])
            {
                v.push(x);
            }
        }
    }
    println!(
        "| record | batch | cache MiB | memtable MiB | journal MiB | workers | value KiB | \
         records/s | raw | ratio | read MiB/s |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for ((record, batch, o), sample) in configs.iter().zip(samples) {
        let [rate, raw, ratio, read] = sample.map(median);
        println!(
            "| {record} | {batch} | {} | {} | {} | {} | {} | {rate:.0} | {raw:.0} | {ratio:.2} \
             | {read:.0} |",
            o[0], o[1], o[2], o[3], o[4]
        );
    }
}
