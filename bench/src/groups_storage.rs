//! `raft-bench groups-storage [groups=N] [seconds=S] [payload=B]`: the engines that hold every
//! group of a host (`FjallGroups`, `RedbGroups`) at many groups, fsync on. Apart from the
//! suites, like `sweep`. Per backend, in a fresh directory on the disk of the temporary
//! directory:
//!
//! * creating N groups (opened concurrently, each durably listed; the creates share syncs);
//! * a restart: opening the engine, then opening all N groups again, and the resident memory
//!   each open idle group adds (`VmRSS` after opening them less before, over N);
//! * appends of one record of `payload` bytes, each group appending from a task of its own in
//!   a loop for S seconds, with 1, 64 and N groups at once: appends/s, syncs/s (the engine's
//!   own count of journal persists or commits), appends per sync, and the latency of an append.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use raft_core::io::{GroupStorage, GroupStores};
use raft_core::{Epoch, GroupId, Offset, Record, RecordKind};
use raft_storage_fjall::FjallGroups;
use raft_storage_redb::RedbGroups;
use serde_json::json;

use crate::memory_suite::rss_bytes;
use crate::Figure;

struct Settings {
    groups: u64,
    window: Duration,
    payload: usize,
}

fn parse(args: &[String]) -> Result<Settings, String> {
    let mut s = Settings {
        groups: 10_000,
        window: Duration::from_secs(3),
        payload: 64,
    };
    for arg in args {
        let (name, value) = arg
            .split_once('=')
            .ok_or_else(|| format!("expected name=value, got {arg:?}"))?;
        let n: u64 = value
            .parse()
            .map_err(|_| format!("{name}: not a number: {value:?}"))?;
        match name {
            "groups" if n > 0 => s.groups = n,
            "seconds" if n > 0 => s.window = Duration::from_secs(n),
            "payload" => s.payload = n as usize,
            _ => {
                return Err(format!(
                    "unknown or zero setting {arg:?}: groups, seconds, payload"
                ))
            }
        }
    }
    Ok(s)
}

/// Runs the measurement and prints its figures.
pub fn run(args: &[String]) -> Result<(), String> {
    let s = parse(args)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("runtime: {e}"))?;
    let mut figures = Vec::new();
    let fjall = |dir: &Path| {
        FjallGroups::open(dir, "bench", raft_storage_fjall::Options::default())
            .map_err(|e| e.to_string())
    };
    figures.extend(rt.block_on(measure("fjall", &s, fjall, FjallGroups::syncs))?);
    let redb = |dir: &Path| {
        RedbGroups::open(dir, "bench", raft_storage_redb::Options::default())
            .map_err(|e| e.to_string())
    };
    figures.extend(rt.block_on(measure("redb", &s, redb, RedbGroups::syncs))?);
    for f in &figures {
        println!(
            "{:<14} {:<34} {} -> {}",
            f.suite, f.name, f.params, f.values
        );
    }
    Ok(())
}

/// The restart of `raft-bench groups-storage`, in a process of its own: opens the engine of
/// `backend` in `dir`, then every group, and prints the times and resident memory as one
/// `restart {json}` line.
pub fn restart(args: &[String]) -> Result<(), String> {
    let [backend, dir] = args else {
        return Err("usage: groups-storage-restart fjall|redb DIR".into());
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("runtime: {e}"))?;
    let dir = Path::new(dir);
    let values = match backend.as_str() {
        "fjall" => rt.block_on(reopen(|| {
            FjallGroups::open(dir, "bench", raft_storage_fjall::Options::default())
        }))?,
        "redb" => rt.block_on(reopen(|| {
            RedbGroups::open(dir, "bench", raft_storage_redb::Options::default())
        }))?,
        other => return Err(format!("unknown backend {other:?}")),
    };
    println!("restart {values}");
    Ok(())
}

async fn reopen<S: GroupStorage>(
    open: impl FnOnce() -> Result<S, raft_core::io::StorageError>,
) -> Result<serde_json::Value, String> {
    let before = rss()?;
    let started = Instant::now();
    let engine = Arc::new(open().map_err(|e| e.to_string())?);
    let engine_open = started.elapsed();
    let listed = engine.groups().await.map_err(|e| e.to_string())?;
    let n = listed.len().max(1) as f64;
    let engine_rss = rss()?;
    let started = Instant::now();
    let stores = open_all(&engine, listed.into_iter()).await?;
    let groups_open = started.elapsed();
    let after = rss()?;
    drop(stores);
    Ok(json!({
        "engine_open_ms": engine_open.as_secs_f64() * 1e3,
        "open_all_groups_ms": groups_open.as_secs_f64() * 1e3,
        "engine_rss_bytes": engine_rss.saturating_sub(before),
        "rss_bytes_per_open_group": after.saturating_sub(engine_rss) as f64 / n,
    }))
}

fn rss() -> Result<u64, String> {
    rss_bytes(std::process::id())
}

/// Opens `ids` concurrently, each from a task of its own.
async fn open_all<S: GroupStorage>(
    engine: &Arc<S>,
    ids: impl Iterator<Item = GroupId>,
) -> Result<Vec<GroupStores>, String> {
    let mut tasks = Vec::new();
    for g in ids {
        let engine = engine.clone();
        tasks.push(tokio::spawn(async move { engine.open_group(g).await }));
    }
    let mut out = Vec::with_capacity(tasks.len());
    for t in tasks {
        let stores = t.await.map_err(|e| e.to_string())?;
        out.push(stores.map_err(|e| format!("open_group: {e}"))?);
    }
    Ok(out)
}

async fn measure<S: GroupStorage>(
    backend: &'static str,
    s: &Settings,
    open: impl Fn(&Path) -> Result<S, String>,
    syncs: fn(&S) -> u64,
) -> Result<Vec<Figure>, String> {
    let temp = tempfile::tempdir().map_err(|e| format!("temporary directory: {e}"))?;
    let dir = temp.path();
    let n = s.groups;
    let params = json!({ "backend": backend, "groups": n });
    let mut figures = Vec::new();

    let engine = Arc::new(open(dir)?);
    let started = Instant::now();
    let stores = open_all(&engine, (0..n).map(GroupId)).await?;
    let created = started.elapsed();
    figures.push(Figure {
        suite: "groups-storage",
        name: "create groups".into(),
        params: params.clone(),
        values: json!({
            "seconds": created.as_secs_f64(),
            "groups_per_s": n as f64 / created.as_secs_f64(),
            "syncs": syncs(&engine),
        }),
    });
    drop((stores, engine));

    // The restart runs in a fresh process, so that memory the creation freed cannot hide what
    // the open groups take.
    let exe = std::env::current_exe().map_err(|e| format!("this executable: {e}"))?;
    let out = std::process::Command::new(exe)
        .args(["groups-storage-restart", backend])
        .arg(dir)
        .output()
        .map_err(|e| format!("the restart process: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let values: serde_json::Value = text
        .lines()
        .find_map(|l| l.strip_prefix("restart "))
        .and_then(|l| serde_json::from_str(l).ok())
        .ok_or_else(|| {
            let err = String::from_utf8_lossy(&out.stderr);
            format!("the restart process said nothing usable: {text} {err}")
        })?;
    figures.push(Figure {
        suite: "groups-storage",
        name: "restart".into(),
        params: params.clone(),
        values,
    });
    let engine = Arc::new(open(dir)?);
    let listed = engine.groups().await.map_err(|e| e.to_string())?;
    let stores = open_all(&engine, listed.into_iter()).await?;
    let stores = Arc::new(stores);
    for k in [1, 64, n] {
        let k = k.min(n) as usize;
        let syncs_before = syncs(&engine);
        let (appends, latency, took) = append_loop(&stores[..k], s.window, s.payload).await?;
        let window = took.as_secs_f64();
        let synced = syncs(&engine) - syncs_before;
        figures.push(Figure {
            suite: "groups-storage",
            name: format!("appends, {k} groups"),
            params: json!({ "backend": backend, "groups": n, "appending": k,
                "payload": s.payload }),
            values: json!({
                "appends_per_s": appends as f64 / window,
                "syncs_per_s": synced as f64 / window,
                "appends_per_sync": appends as f64 / synced.max(1) as f64,
                "mean_latency_ms": latency.as_secs_f64() * 1e3 / appends.max(1) as f64,
            }),
        });
    }
    Ok(figures)
}

/// Every group of `stores` appends one record at a time for `window`, each from a task of its
/// own. Returns the appends, their summed latency and the time from the start until the last
/// append in flight when the window closed returned.
async fn append_loop(
    stores: &[GroupStores],
    window: Duration,
    payload: usize,
) -> Result<(u64, Duration, Duration), String> {
    let started = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let appends = Arc::new(AtomicU64::new(0));
    let nanos = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for st in stores {
        let log = st.log.clone();
        let (stop, appends, nanos) = (stop.clone(), appends.clone(), nanos.clone());
        let bytes = Bytes::from(vec![0x5a; payload]);
        tasks.push(tokio::spawn(async move {
            let mut next = log.state().await?.end.offset.0;
            while !stop.load(Ordering::Relaxed) {
                let record = Record {
                    offset: Offset(next),
                    epoch: Epoch(1),
                    kind: RecordKind::Data,
                    payload: bytes.clone(),
                };
                let started = Instant::now();
                log.append(std::slice::from_ref(&record)).await?;
                nanos.fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
                appends.fetch_add(1, Ordering::Relaxed);
                next += 1;
            }
            Ok::<(), raft_core::io::StorageError>(())
        }));
    }
    tokio::time::sleep(window).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("append: {e}"))?;
    }
    let latency = Duration::from_nanos(nanos.load(Ordering::Relaxed));
    Ok((appends.load(Ordering::Relaxed), latency, started.elapsed()))
}
