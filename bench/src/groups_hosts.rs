//! Three hosts of many groups over QUIC (loopback, mutual TLS) and fjall (`FjallGroups`, fsync
//! on), all in the bench process: the groups suite's durable writes and failover.
//!
//! * **durable writes**: 1, 4, 16 and 64 groups with their leaders balanced over the hosts
//!   (group `g` led by host `g mod 3`, by leadership transfers), a fixed number of writers
//!   spread round-robin over the groups, each writing 64-byte records one at a time to its
//!   group's leader for a window. Measured: committed writes per second in total, and journal
//!   syncs per second summed over the three engines (with one engine per host, they should not
//!   grow with the number of groups).
//! * **failover**: one host of three stops at once (every group's replica aborted, as a crash
//!   leaves them, and its transport closed); for every group it led, the time until another
//!   host's replica leads it, against the election timeout.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use raft_core::driver::{DriverOptions, Host, Node};
use raft_core::io::HostTransport;
use raft_core::{Config, DirectoryId, GroupId, ReplicaId, Voter, VoterSet};
use raft_storage_fjall::{FjallGroups, Options};
use raft_transport_quic::{certs, QuicConfig, QuicTransport, TlsMaterial};
use serde_json::json;

use crate::core_suite::Blob;
use crate::measure::{histogram, record};
use crate::Figure;

const HOSTS: [u32; 3] = [1, 2, 3];

/// Three running hosts and what the measurements read from them.
pub(crate) struct Hosts {
    pub(crate) hosts: Vec<Host>,
    transports: Vec<Arc<QuicTransport>>,
    storages: Vec<Arc<FjallGroups>>,
    /// Kept for the hosts' lifetime: their data directories.
    _dir: tempfile::TempDir,
}

fn directory(host: ReplicaId) -> DirectoryId {
    DirectoryId(0x6e0c_0000 + u128::from(host.0))
}

impl Hosts {
    /// Binds three transports, opens three engines and creates `groups` groups, each with the
    /// three hosts as founding voters; returns once every group has a leader.
    pub(crate) async fn start(groups: u64) -> Result<Hosts, String> {
        let fail = |what: &str, e: String| format!("{what}: {e}");
        let dir = tempfile::tempdir().map_err(|e| fail("temp dir", e.to_string()))?;
        let ca = certs::generate_ca().map_err(|e| fail("ca", e.to_string()))?;
        let mut transports = Vec::new();
        for h in HOSTS {
            let id = ReplicaId(h);
            let node = certs::generate_node(&ca, id).map_err(|e| fail("cert", e.to_string()))?;
            let tls = TlsMaterial {
                ca_cert_pem: ca.cert_pem.clone(),
                cert_pem: node.cert_pem,
                key_pem: node.key_pem,
            };
            let listen = "127.0.0.1:0".parse().expect("an address");
            let config = QuicConfig::new(id, listen, BTreeMap::new(), tls);
            let t = QuicTransport::bind(config).map_err(|e| fail("bind", e.to_string()))?;
            transports.push(Arc::new(t));
        }
        // The voters advertise their hosts' addresses, so the transports find one another.
        let founding = VoterSet::from_entries(HOSTS.iter().zip(&transports).map(|(h, t)| {
            let voter = Voter {
                directory: Some(directory(ReplicaId(*h))),
                endpoint: t.local_addr().to_string(),
            };
            (ReplicaId(*h), voter)
        }))
        .map_err(|e| fail("voters", e.to_string()))?;
        let (mut hosts, mut storages) = (Vec::new(), Vec::new());
        for (h, t) in HOSTS.iter().zip(&transports) {
            let path = dir.path().join(format!("host-{h}"));
            let storage = FjallGroups::open(&path, "bench", Options::default())
                .map_err(|e| fail("storage", e.to_string()))?;
            let storage = Arc::new(storage);
            let host = Host::start(ReplicaId(*h), t.clone(), storage.clone())
                .await
                .map_err(|e| fail("host", e.to_string()))?;
            hosts.push(host);
            storages.push(storage);
        }
        for g in (1..=groups).map(GroupId) {
            for host in &hosts {
                let id = host.id();
                let mut cfg = Config::new(id, HOSTS.map(ReplicaId));
                cfg.directory = Some(directory(id));
                let cfg = cfg.validate().map_err(|e| fail("config", e.to_string()))?;
                host.format_group(g, &founding)
                    .await
                    .map_err(|e| fail("format", e.to_string()))?;
                let options = DriverOptions {
                    seed: u64::from(id.0) * 7919 + g.0 * 104_729,
                    ..DriverOptions::default()
                };
                host.open_group(g, cfg, Arc::new(Blob::default()), options)
                    .await
                    .map_err(|e| fail("open", e.to_string()))?;
            }
        }
        let hosts = Hosts {
            hosts,
            transports,
            storages,
            _dir: dir,
        };
        for g in (1..=groups).map(GroupId) {
            hosts
                .leader_of(g, Duration::from_secs(120))
                .await
                .ok_or_else(|| format!("{g} elected no leader within 120 s"))?;
        }
        Ok(hosts)
    }

    /// The host index whose replica of `group` leads it, as every running replica sees it
    /// (waits up to `within`).
    pub(crate) async fn leader_of(&self, group: GroupId, within: Duration) -> Option<usize> {
        let deadline = Instant::now() + within;
        loop {
            for (i, host) in self.hosts.iter().enumerate() {
                if host
                    .group(group)
                    .is_some_and(|n| n.watch().borrow().is_leader())
                {
                    return Some(i);
                }
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    fn node(&self, host: usize, group: GroupId) -> Option<Node> {
        self.hosts[host].group(group)
    }

    /// Moves each group's leadership to host `g mod 3`.
    pub(crate) async fn balance(&self, groups: u64) -> Result<(), String> {
        for g in (1..=groups).map(GroupId) {
            let want = (g.0 % 3) as usize;
            for _ in 0..20 {
                let Some(at) = self.leader_of(g, Duration::from_secs(10)).await else {
                    return Err(format!("{g} lost its leader"));
                };
                if at == want {
                    break;
                }
                let node = self.node(at, g).ok_or("a group stopped")?;
                let _ = node.transfer_leadership(ReplicaId(HOSTS[want])).await;
            }
        }
        Ok(())
    }

    fn syncs(&self) -> u64 {
        self.storages.iter().map(|s| s.syncs()).sum()
    }

    pub(crate) async fn shutdown(self) {
        for host in &self.hosts {
            host.shutdown().await;
        }
    }
}

/// Committed writes per second over `groups` groups with `writers` writers in all.
pub(crate) async fn durable(groups: u64, writers: u64, window: Duration) -> Result<Figure, String> {
    let hosts = Hosts::start(groups).await?;
    hosts.balance(groups).await?;
    let mut leaders = Vec::new();
    for g in (1..=groups).map(GroupId) {
        let at = hosts
            .leader_of(g, Duration::from_secs(10))
            .await
            .ok_or("a leader vanished")?;
        leaders.push(hosts.node(at, g).ok_or("a group stopped")?);
    }
    let per_host: Vec<usize> = (0..HOSTS.len())
        .map(|i| {
            (1..=groups)
                .filter(|g| {
                    hosts.hosts[i]
                        .group(GroupId(*g))
                        .is_some_and(|n| n.watch().borrow().is_leader())
                })
                .count()
        })
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let (writes, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let syncs0 = hosts.syncs();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..writers {
        let node = leaders[(w % groups) as usize].clone();
        let (stop, writes, failed) = (stop.clone(), writes.clone(), failed.clone());
        tasks.push(tokio::spawn(async move {
            let mut hist = histogram();
            let payload = Bytes::from(vec![7u8; 64]);
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                match node.write(payload.clone()).await {
                    Ok(_) => {
                        writes.fetch_add(1, Ordering::Relaxed);
                        record(&mut hist, t.elapsed().as_micros() as u64);
                    }
                    Err(_) => {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            hist
        }));
    }
    tokio::time::sleep(window).await;
    stop.store(true, Ordering::Relaxed);
    let mut hist = histogram();
    for t in tasks {
        if let Ok(h) = t.await {
            let _ = hist.add(h);
        }
    }
    let wall = started.elapsed().as_secs_f64();
    let syncs = hosts.syncs() - syncs0;
    let connections: u64 = hosts
        .transports
        .iter()
        .map(|t| t.metrics().connections_dialled)
        .sum();
    hosts.shutdown().await;
    Ok(Figure {
        suite: "groups",
        name: "durable writes".into(),
        params: json!({
            "groups": groups, "writers": writers, "payload_bytes": 64,
            "transport": "quic", "storage": "fjall", "fsync": true,
        }),
        values: json!({
            "writes_per_s": writes.load(Ordering::Relaxed) as f64 / wall,
            "syncs_per_s": syncs as f64 / wall,
            "writes_failed": failed.load(Ordering::Relaxed),
            "p50_us": hist.value_at_quantile(0.5),
            "p99_us": hist.value_at_quantile(0.99),
            "leaders_per_host": per_host,
            "connections_dialed": connections,
        }),
    })
}

/// One host of three stops at once; the time until each group it led has another leader.
pub(crate) async fn failover(groups: u64) -> Result<Figure, String> {
    let hosts = Hosts::start(groups).await?;
    hosts.balance(groups).await?;
    let victim = 0;
    let led: Vec<GroupId> = (1..=groups)
        .map(GroupId)
        .filter(|g| {
            hosts
                .node(victim, *g)
                .is_some_and(|n| n.watch().borrow().is_leader())
        })
        .collect();
    let started = Instant::now();
    // As a crash: no handover; the transport goes with the process.
    for g in hosts.hosts[victim].groups() {
        if let Some(node) = hosts.node(victim, g) {
            node.abort().await;
        }
    }
    HostTransport::close(&*hosts.transports[victim]).await;
    let mut hist = histogram();
    let mut missing = 0u64;
    for g in &led {
        let deadline = started + Duration::from_secs(30);
        loop {
            let leads = (0..HOSTS.len()).filter(|i| *i != victim).any(|i| {
                hosts
                    .node(i, *g)
                    .is_some_and(|n| n.watch().borrow().is_leader())
            });
            if leads {
                record(&mut hist, started.elapsed().as_millis() as u64);
                break;
            }
            if Instant::now() >= deadline {
                missing += 1;
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    for (i, host) in hosts.hosts.iter().enumerate() {
        if i != victim {
            host.shutdown().await;
        }
    }
    let election_timeout_ms = Config::new(ReplicaId(1), [ReplicaId(1)])
        .election_timeout
        .as_millis() as u64;
    Ok(Figure {
        suite: "groups",
        name: "failover".into(),
        params: json!({
            "groups": groups, "groups_led_by_the_stopped_host": led.len(),
            "transport": "quic", "storage": "fjall",
            "election_timeout_ms": election_timeout_ms,
        }),
        values: json!({
            "new_leader_p50_ms": hist.value_at_quantile(0.5),
            "new_leader_p99_ms": hist.value_at_quantile(0.99),
            "new_leader_max_ms": hist.max(),
            "groups_without_a_new_leader_in_30_s": missing,
            "within_2x_election_timeout": hist.max() <= 2 * election_timeout_ms && missing == 0,
        }),
    })
}
