//! `raft-bench sweep redb|fjall [name=v1,v2,...]...`: the option sweeps behind each storage
//! backend's defaults (`docs/storage-tuning.md`). For every combination of the values given,
//! durable appends per second through `LogStore::append`, measured in lockstep with the raw
//! write + fdatasync of the same bytes (the storage suite's measurement), then the log read back
//! in 1 MiB fetches. Configurations rotate over the rounds; each figure is the median of its
//! rounds. A Markdown table goes to stdout.
//!
//! Workload arguments: `record` (bytes, default `256,4096`), `batch` (`1,16,256`), `batches`
//! (appends per measurement; default 300 at batch 1 and 16, 200 at batch 256 with 256 B
//! records, else 50), `rounds` (3), `dir` (default a temporary directory). Engine options
//! (defaults: the engine's own): redb `cache_mib`, `value_kib`, `mode`
//! (`immediate|twophase|quickrepair`); fjall `cache_mib`, `memtable_mib`, `journal_mib`,
//! `workers`, `value_kib`.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use raft_core::io::LogStore;

use crate::storage_suite::{appends, read_back_mib_per_s};

type Args = BTreeMap<String, String>;

/// One combination of option values, by option name.
type Combination = BTreeMap<&'static str, String>;

/// Opens a store in a directory with one combination of options.
type Opener = fn(&Path, &Combination) -> Result<Arc<dyn LogStore>, String>;

/// One engine option: its name on the command line and its default, as text.
struct Axis {
    name: &'static str,
    default: String,
}

/// The options a backend exposes to the sweep, and how a combination opens a store.
struct Engine {
    axes: Vec<Axis>,
    open: Opener,
}

fn redb() -> Engine {
    let d = raft_storage_redb::Options::default();
    Engine {
        axes: vec![
            axis("cache_mib", d.cache_size_bytes >> 20),
            axis("value_kib", d.batch_value_bytes_max >> 10),
            axis("mode", "immediate"),
        ],
        open: |dir, o| {
            use raft_storage_redb::CommitMode;
            let options = raft_storage_redb::Options {
                cache_size_bytes: (number(&o["cache_mib"])? << 20) as usize,
                batch_value_bytes_max: (number(&o["value_kib"])? << 10) as usize,
                commit_mode: match o["mode"].as_str() {
                    "immediate" => CommitMode::Immediate,
                    "twophase" => CommitMode::TwoPhase,
                    "quickrepair" => CommitMode::QuickRepair,
                    other => return Err(format!("mode: unknown commit mode {other:?}")),
                },
                ..raft_storage_redb::Options::default()
            };
            let store = raft_storage_redb::RedbStore::open(dir, "sweep", options)
                .map_err(|e| format!("open redb: {e}"))?;
            Ok(Arc::new(store))
        },
    }
}

fn fjall() -> Engine {
    let d = raft_storage_fjall::Options::default();
    Engine {
        axes: vec![
            axis("cache_mib", d.cache_size_bytes >> 20),
            axis("memtable_mib", d.max_memtable_bytes >> 20),
            axis("journal_mib", d.max_journal_bytes >> 20),
            axis("workers", d.worker_threads),
            axis("value_kib", d.batch_value_bytes_max >> 10),
        ],
        open: |dir, o| {
            let options = raft_storage_fjall::Options {
                cache_size_bytes: number(&o["cache_mib"])? << 20,
                max_memtable_bytes: number(&o["memtable_mib"])? << 20,
                max_journal_bytes: number(&o["journal_mib"])? << 20,
                worker_threads: number(&o["workers"])? as usize,
                batch_value_bytes_max: (number(&o["value_kib"])? << 10) as usize,
                ..raft_storage_fjall::Options::default()
            };
            let store = raft_storage_fjall::FjallStore::open(dir, "sweep", options)
                .map_err(|e| format!("open fjall: {e}"))?;
            Ok(Arc::new(store))
        },
    }
}

fn axis(name: &'static str, default: impl ToString) -> Axis {
    Axis {
        name,
        default: default.to_string(),
    }
}

fn number(s: &str) -> Result<u64, String> {
    s.parse().map_err(|_| format!("not a number: {s:?}"))
}

fn values(args: &Args, name: &str, default: &str) -> Vec<String> {
    args.get(name)
        .map_or(default, String::as_str)
        .split(',')
        .map(str::to_string)
        .collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Every combination of the axes' values, in command-line order.
fn combinations(args: &Args, axes: &[Axis]) -> Vec<Combination> {
    let mut out = vec![BTreeMap::new()];
    for a in axes {
        out = out
            .into_iter()
            .flat_map(|c| {
                values(args, a.name, &a.default).into_iter().map(move |v| {
                    let mut c = c.clone();
                    c.insert(a.name, v);
                    c
                })
            })
            .collect();
    }
    out
}

/// Runs the sweep `args` describe (the arguments after `sweep`).
pub fn run(args: &[String]) -> Result<(), String> {
    let (engine_name, rest) = args
        .split_first()
        .ok_or("usage: raft-bench sweep redb|fjall [name=v1,v2,...]...")?;
    let engine = match engine_name.as_str() {
        "redb" => redb(),
        "fjall" => fjall(),
        other => return Err(format!("sweep: unknown engine {other:?} (redb or fjall)")),
    };
    let mut args = Args::new();
    for a in rest {
        let (k, v) = a
            .split_once('=')
            .ok_or_else(|| format!("sweep: expected name=values, got {a:?}"))?;
        args.insert(k.to_string(), v.to_string());
    }
    let known = ["record", "batch", "batches", "rounds", "dir"];
    if let Some(k) = args
        .keys()
        .find(|k| !known.contains(&k.as_str()) && !engine.axes.iter().any(|a| a.name == *k))
    {
        return Err(format!("sweep: {engine_name} has no option {k:?}"));
    }
    let temp = tempfile::tempdir().map_err(|e| format!("temporary directory: {e}"))?;
    let dir = args
        .get("dir")
        .map_or(temp.path().to_path_buf(), Into::into);
    let rounds = number(&values(&args, "rounds", "3")[0])?;
    let mut configs = Vec::new();
    for record in values(&args, "record", "256,4096") {
        for batch in values(&args, "batch", "1,16,256") {
            for options in combinations(&args, &engine.axes) {
                configs.push((number(&record)? as usize, number(&batch)? as usize, options));
            }
        }
    }
    // Per configuration and round: appends/s, raw appends/s, their ratio, read MiB/s.
    let mut samples: Vec<[Vec<f64>; 4]> = vec![Default::default(); configs.len()];
    for _ in 0..rounds {
        for (i, (record, batch, options)) in configs.iter().enumerate() {
            let batches = match args.get("batches") {
                Some(b) => number(b)? as usize,
                None => match (batch, record) {
                    (1 | 16, _) => 300,
                    (_, 256) => 200,
                    _ => 50,
                },
            };
            let store_dir = dir.join("store");
            let log = (engine.open)(&store_dir, options)?;
            let (rate, raw) = appends(log.clone(), &dir, *batch, batches, *record);
            let read = read_back_mib_per_s(log, (batch * batches) as u64);
            std::fs::remove_dir_all(&store_dir).map_err(|e| format!("remove store: {e}"))?;
            for (v, x) in samples[i].iter_mut().zip([rate, raw, rate / raw, read]) {
                v.push(x);
            }
        }
    }
    let names: Vec<&str> = engine.axes.iter().map(|a| a.name).collect();
    println!(
        "| record | batch | {} | records/s | raw | ratio | read MiB/s |",
        names.join(" | ")
    );
    println!("|---|---|{}---|---|---|---|", "---|".repeat(names.len()));
    for ((record, batch, options), sample) in configs.iter().zip(samples) {
        let [rate, raw, ratio, read] = sample.map(median);
        let opts: Vec<&str> = names.iter().map(|n| options[n].as_str()).collect();
        println!(
            "| {record} | {batch} | {} | {rate:.0} | {raw:.0} | {ratio:.2} | {read:.0} |",
            opts.join(" | ")
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn combinations_cover_every_value_of_every_axis() {
        let args: Args = [("cache_mib".to_string(), "1,2".to_string())].into();
        let axes = [axis("cache_mib", 64), axis("mode", "immediate")];
        let got = combinations(&args, &axes);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0]["cache_mib"], "1");
        assert_eq!(got[1]["cache_mib"], "2");
        assert!(got.iter().all(|c| c["mode"] == "immediate"));
    }

    #[test]
    fn a_tiny_sweep_measures_both_engines_and_refuses_unknown_options() {
        for engine in ["redb", "fjall"] {
            let args: Vec<String> = [engine, "record=256", "batch=4", "batches=3", "rounds=1"]
                .map(String::from)
                .into();
            run(&args).expect("sweep");
        }
        let bad: Vec<String> = ["redb", "memtable_mib=4"].map(String::from).into();
        assert!(run(&bad).unwrap_err().contains("no option"));
    }
}
