//! Hosts of many groups. Durable writes over 1 to 64 groups and the failover of one host of
//! three are in `groups_hosts` (QUIC and fjall). Idle: three `raft_core::driver::Host`s in this process on the
//! in-memory transport and storage, N groups of three replicas each (one per host), every group
//! elected and then left without writes. Measured over a quiet window: the process's CPU (all
//! three hosts) as a share of one core, per host; the requests per second the groups send (the
//! followers' long polls); and the resident memory each group replica adds.
//!
//! This is the baseline that quiescence and shared fetches are measured against
//! (`docs/many-groups.md`): today every group is a `Node` of its own, and every follower
//! long-polls its leader every `fetch_max_wait` whether or not anything happens.

use std::sync::Arc;
use std::time::{Duration, Instant};

use raft_core::driver::{DriverOptions, Host};
use raft_core::mem::transport::MemNetwork;
use raft_core::mem::MemGroupStorage;
use raft_core::{Config, DirectoryId, GroupId, ReplicaId, Voter, VoterSet};
use serde_json::json;

use crate::core_suite::Blob;
use crate::groups_hosts;
use crate::measure::process_cpu_ns;
use crate::memory_suite::rss_bytes;
use crate::{Figure, Size};

const HOSTS: [u32; 3] = [1, 2, 3];

/// Runs the suite.
pub fn run(size: Size) -> Vec<Figure> {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return vec![failed("runtime", e.to_string())],
    };
    let window = size.pick(Duration::from_secs(5), Duration::from_secs(1));
    let mut out = Vec::new();
    for groups in size.pick(vec![100, 1_000, 10_000], vec![20]) {
        match rt.block_on(idle(groups, window)) {
            Ok(f) => out.push(f),
            Err(e) => out.push(failed("idle", e)),
        }
    }
    let writers = size.pick(256, 16);
    for groups in size.pick(vec![1, 4, 16, 64], vec![1, 4]) {
        match rt.block_on(groups_hosts::durable(groups, writers, window)) {
            Ok(f) => out.push(f),
            Err(e) => out.push(failed("durable writes", e)),
        }
    }
    match rt.block_on(groups_hosts::failover(size.pick(1_000, 12))) {
        Ok(f) => out.push(f),
        Err(e) => out.push(failed("failover", e)),
    }
    out
}

fn failed(name: &str, error: String) -> Figure {
    Figure {
        suite: "groups",
        name: name.to_string(),
        params: json!({}),
        values: json!({ "error": error }),
    }
}

fn directory(host: u32) -> DirectoryId {
    DirectoryId(0xbe0c_0000 + u128::from(host))
}

async fn idle(groups: u64, window: Duration) -> Result<Figure, String> {
    let pid = std::process::id();
    let rss_before = rss_bytes(pid)?;
    let net = MemNetwork::new();
    let mut hosts = Vec::new();
    for h in HOSTS {
        let transport = Arc::new(net.endpoint(ReplicaId(h)));
        let host = Host::start(ReplicaId(h), transport, Arc::new(MemGroupStorage::new()))
            .await
            .map_err(|e| e.to_string())?;
        hosts.push(host);
    }
    let founding = VoterSet::from_entries(HOSTS.map(|h| {
        let voter = Voter {
            directory: Some(directory(h)),
            endpoint: String::new(),
        };
        (ReplicaId(h), voter)
    }))
    .map_err(|e| e.to_string())?;
    let started = Instant::now();
    for g in 1..=groups {
        let group = GroupId(g);
        for host in &hosts {
            let id = host.id();
            let mut cfg = Config::new(id, HOSTS.map(ReplicaId));
            cfg.directory = Some(directory(id.0));
            let cfg = cfg.validate().map_err(|e| e.to_string())?;
            host.format_group(group, &founding)
                .await
                .map_err(|e| e.to_string())?;
            let options = DriverOptions {
                seed: u64::from(id.0) * 7919 + g * 104_729,
                ..DriverOptions::default()
            };
            host.open_group(group, cfg, Arc::new(Blob::default()), options)
                .await
                .map_err(|e| e.to_string())?;
        }
    }
    // Every group elected: one leader each, seen on every replica.
    let deadline = Instant::now() + Duration::from_secs(120);
    for host in &hosts {
        for group in host.groups() {
            let node = host.group(group).ok_or("a group stopped")?;
            let mut watch = node.watch();
            let remaining = deadline.saturating_duration_since(Instant::now());
            tokio::time::timeout(remaining, watch.wait_for(|s| s.leader.is_some()))
                .await
                .map_err(|_| format!("{group} elected no leader within 120 s"))?
                .map_err(|_| format!("{group} stopped"))?;
        }
    }
    let elected_after = started.elapsed();
    // Let the elections' aftermath settle, then measure a quiet window.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rpcs = |hosts: &[Host]| -> u64 {
        hosts
            .iter()
            .flat_map(|h| h.groups().into_iter().filter_map(|g| h.group(g)))
            .map(|n| {
                n.metrics()
                    .rpcs_sent
                    .load(std::sync::atomic::Ordering::Relaxed)
            })
            .sum()
    };
    let (cpu0, rpcs0, t0) = (
        process_cpu_ns().ok_or("no process CPU time")?,
        rpcs(&hosts),
        Instant::now(),
    );
    tokio::time::sleep(window).await;
    let (cpu1, rpcs1, wall) = (
        process_cpu_ns().ok_or("no process CPU time")?,
        rpcs(&hosts),
        t0.elapsed(),
    );
    let rss_after = rss_bytes(pid)?;
    for host in &hosts {
        host.shutdown().await;
    }
    let replicas = groups * HOSTS.len() as u64;
    let cpu_share = (cpu1 - cpu0) as f64 / wall.as_nanos() as f64;
    Ok(Figure {
        suite: "groups",
        name: "idle".to_string(),
        params: json!({
            "groups": groups,
            "hosts": HOSTS.len(),
            "transport": "memory",
            "storage": "memory",
            "window_s": wall.as_secs_f64(),
        }),
        values: json!({
            "cpu_pct_of_core_per_host": 100.0 * cpu_share / HOSTS.len() as f64,
            "requests_per_s": (rpcs1 - rpcs0) as f64 / wall.as_secs_f64(),
            "rss_bytes_per_replica": rss_after.saturating_sub(rss_before) / replicas,
            "elected_after_s": elected_after.as_secs_f64(),
        }),
    })
}
