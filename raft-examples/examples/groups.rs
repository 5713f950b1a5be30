//! Many groups per process, as a library user embeds them: three processes, each a
//! `raft_core::driver::Host` running 100 groups (by default) over one QUIC transport with mutual
//! TLS (`raft-transport-quic`) and one fjall engine (`raft-storage-fjall`'s `FjallGroups`, whose
//! group commit makes the writes of every group durable with one journal sync). Every group is a
//! replicated counter with its own leader, log and snapshots; the three hosts are the voters of
//! every group.
//!
//! ```text
//! cargo run --release -p raft-examples --example groups -- local [--groups 100] [--dir DIR]
//! ```
//!
//! `local` makes a CA and a certificate per host (once, in `DIR/tls`) and starts three `host`
//! processes of this program on 127.0.0.1. Each host formats the groups its engine does not hold
//! yet (first run), opens every group, adds 1 to every group's counter through its own replica
//! (forwarded to the group's leader wherever it is), and waits until a linearizable read on its
//! replica shows every counter at three times the number of runs: every host's write of every
//! run, in every group, nothing lost. Run it again on the same `DIR`: the groups come back from
//! the engine and the counters go on from where they were.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use async_trait::async_trait;
use bytes::Bytes;
use clap::{Parser, Subcommand};
use raft_core::driver::{DriverOptions, Host, Node, ReadMode};
use raft_core::io::{StateMachine, StateMachineError};
use raft_core::snapshot_stream::{read_to_end, BytesReader, SnapshotReader};
use raft_core::{
    Config, DirectoryId, GroupId, Offset, Record, RecordKind, ReplicaId, Voter, VoterSet,
};
use raft_storage_fjall::{FjallGroups, Options};
use raft_transport_quic::{certs, QuicConfig, QuicTransport, TlsMaterial};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};

const HOSTS: [u32; 3] = [1, 2, 3];
const CLUSTER_ID: &str = "groups-example";

#[derive(Parser)]
#[command(about = "Three processes, each a host of many groups over QUIC and fjall")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Starts three hosts on this machine and waits until every counter shows every write.
    Local {
        /// Groups per host.
        #[arg(long, default_value_t = 100)]
        groups: u64,
        /// Where the hosts keep their data and the certificates (kept across runs).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// The first of three consecutive UDP ports on 127.0.0.1.
        #[arg(long, default_value_t = 7301)]
        base_port: u16,
    },
    /// One host (started by `local`).
    Host {
        #[arg(long)]
        id: u32,
        #[arg(long)]
        dir: PathBuf,
        #[arg(long)]
        groups: u64,
        #[arg(long)]
        base_port: u16,
    },
}

fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            // Errors only unless RUST_LOG says otherwise: when the three hosts stop, every
            // group warns that its peers went away, which is true and not news here.
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "error".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = tokio::runtime::Runtime::new()?;
    match Cli::parse().command {
        Command::Local {
            groups,
            dir,
            base_port,
        } => {
            let dir = dir.unwrap_or_else(|| std::env::temp_dir().join("raft-groups-example"));
            runtime.block_on(local(groups, &dir, base_port))
        }
        Command::Host {
            id,
            dir,
            groups,
            base_port,
        } => runtime.block_on(host(ReplicaId(id), &dir, groups, base_port)),
    }
}

/// A counter: the sum of the 8-byte little-endian amounts of its records.
#[derive(Default)]
struct Counter {
    sum: AtomicU64,
    applied: AtomicU64,
}

#[async_trait]
impl StateMachine for Counter {
    async fn applied(&self) -> Offset {
        Offset(self.applied.load(Ordering::SeqCst))
    }

    async fn apply(
        &self,
        records: &[Record],
        responses: &mut Vec<Bytes>,
    ) -> Result<(), StateMachineError> {
        for r in records {
            if r.kind == RecordKind::Data {
                let add = r.payload.as_ref().try_into().map(u64::from_le_bytes);
                self.sum.fetch_add(add.unwrap_or(0), Ordering::SeqCst);
            }
            let sum = self.sum.load(Ordering::SeqCst);
            responses.push(Bytes::copy_from_slice(&sum.to_le_bytes()));
            self.applied.store(r.offset.0 + 1, Ordering::SeqCst);
        }
        Ok(())
    }

    async fn snapshot(&self) -> Result<Box<dyn SnapshotReader>, StateMachineError> {
        let sum = self.sum.load(Ordering::SeqCst);
        Ok(Box::new(BytesReader::new(Bytes::copy_from_slice(
            &sum.to_le_bytes(),
        ))))
    }

    async fn restore(
        &self,
        applied: Offset,
        data: &mut dyn SnapshotReader,
    ) -> Result<(), StateMachineError> {
        let bad = |reason: String| StateMachineError {
            offset: applied,
            reason,
        };
        let bytes = read_to_end(data, 8).await.map_err(|e| bad(e.to_string()))?;
        let sum = bytes.as_ref().try_into().map(u64::from_le_bytes);
        self.sum.store(
            sum.map_err(|_| bad("not 8 bytes".into()))?,
            Ordering::SeqCst,
        );
        self.applied.store(applied.0, Ordering::SeqCst);
        Ok(())
    }
}

fn host_dir(dir: &Path, id: ReplicaId) -> PathBuf {
    dir.join(format!("host-{}", id.0))
}

fn addr(base_port: u16, id: ReplicaId) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], base_port + id.0 as u16 - 1))
}

/// Every host's directory id, made once by `local` (a host's storage identity: a host that lost
/// its disk would need a new one and to be added back to every group).
fn directories(dir: &Path) -> Result<BTreeMap<ReplicaId, DirectoryId>> {
    let path = dir.join("directories");
    if !path.exists() {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_nanos()
            ^ u128::from(std::process::id());
        let text: String = HOSTS
            .iter()
            .map(|h| format!("{} {:032x}\n", h, seed.rotate_left(*h * 17) | 1))
            .collect();
        std::fs::write(&path, text)?;
    }
    let mut out = BTreeMap::new();
    for line in std::fs::read_to_string(&path)?.lines() {
        let (id, d) = line.split_once(' ').context("a line of `directories`")?;
        out.insert(
            ReplicaId(id.parse()?),
            d.parse().map_err(anyhow::Error::msg)?,
        );
    }
    Ok(out)
}

/// The CA and each host's certificate, made once.
fn certificates(dir: &Path) -> Result<()> {
    let tls = dir.join("tls");
    if tls.join("ca.pem").exists() {
        return Ok(());
    }
    std::fs::create_dir_all(&tls)?;
    let ca = certs::generate_ca()?;
    for h in HOSTS {
        let node = certs::generate_node(&ca, ReplicaId(h))?;
        std::fs::write(tls.join(format!("host-{h}.pem")), node.cert_pem)?;
        std::fs::write(tls.join(format!("host-{h}.key")), node.key_pem)?;
    }
    std::fs::write(tls.join("ca.pem"), ca.cert_pem)?;
    Ok(())
}

async fn local(groups: u64, dir: &Path, base_port: u16) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    certificates(dir)?;
    directories(dir)?;
    let exe = std::env::current_exe()?;
    let mut children = Vec::new();
    for h in HOSTS {
        let child = tokio::process::Command::new(&exe)
            .args([
                "host",
                "--id",
                &h.to_string(),
                "--groups",
                &groups.to_string(),
            ])
            .args(["--base-port", &base_port.to_string()])
            .arg("--dir")
            .arg(dir)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("starting a host")?;
        children.push(child);
    }
    // Each host prints one line when every counter of its groups shows every write.
    let mut reports = Vec::new();
    for child in &mut children {
        let stdout = child.stdout.take().context("a host's stdout")?;
        reports.push(tokio::spawn(async move {
            BufReader::new(stdout).lines().next_line().await
        }));
    }
    let deadline = Duration::from_secs(300);
    for (h, report) in HOSTS.iter().zip(reports) {
        match tokio::time::timeout(deadline, report).await {
            Ok(Ok(Ok(Some(line)))) => println!("{line}"),
            Ok(_) => bail!("host {h} stopped before it reported"),
            Err(_) => bail!("host {h} did not report within {deadline:?}"),
        }
    }
    // Closing their standard input stops the hosts gracefully.
    for child in &mut children {
        drop(child.stdin.take());
    }
    for (h, child) in HOSTS.iter().zip(&mut children) {
        let status = tokio::time::timeout(Duration::from_secs(60), child.wait())
            .await
            .with_context(|| format!("host {h} did not stop"))??;
        if !status.success() {
            bail!("host {h} exited with {status}");
        }
    }
    println!("data and certificates in {}", dir.display());
    Ok(())
}

async fn host(id: ReplicaId, dir: &Path, groups: u64, base_port: u16) -> Result<()> {
    let directories = directories(dir)?;
    let tls_dir = dir.join("tls");
    let tls = TlsMaterial {
        ca_cert_pem: std::fs::read_to_string(tls_dir.join("ca.pem"))?,
        cert_pem: std::fs::read_to_string(tls_dir.join(format!("host-{}.pem", id.0)))?,
        key_pem: std::fs::read_to_string(tls_dir.join(format!("host-{}.key", id.0)))?,
    };
    let peers = HOSTS
        .iter()
        .map(|h| ReplicaId(*h))
        .filter(|h| *h != id)
        .map(|h| (h, addr(base_port, h)))
        .collect();
    let transport = QuicTransport::bind(QuicConfig::new(id, addr(base_port, id), peers, tls))?;
    let data = host_dir(dir, id);
    let storage = FjallGroups::open(data.join("groups"), CLUSTER_ID, Options::default())?;
    let storage = Arc::new(storage);
    let host = Host::start(id, Arc::new(transport), storage.clone()).await?;

    let founding = VoterSet::from_entries(directories.iter().map(|(h, d)| {
        let voter = Voter {
            directory: Some(*d),
            endpoint: String::new(),
        };
        (*h, voter)
    }))?;
    let stored = host.stored_groups().await?;
    let mut counters = BTreeMap::new();
    for g in (1..=groups).map(GroupId) {
        if !stored.contains(&g) {
            host.format_group(g, &founding).await?;
        }
        let mut cfg = Config::new(id, HOSTS.map(ReplicaId));
        cfg.directory = Some(directories[&id]);
        // A snapshot every 1,000 records keeps each group's log short.
        cfg.snapshot_after_records = 1_000;
        let options = DriverOptions {
            seed: u64::from(id.0) << 32 | g.0,
            ..DriverOptions::default()
        };
        let counter = Arc::new(Counter::default());
        host.open_group(g, cfg.validate()?, counter.clone(), options)
            .await?;
        counters.insert(g, counter);
    }

    // This run's number, counted in the host's own directory: every run adds one per host.
    let round_file = data.join("runs");
    let round = std::fs::read_to_string(&round_file)
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(0)
        + 1;
    std::fs::write(&round_file, round.to_string())?;

    let nodes: Vec<(GroupId, Node)> = counters
        .keys()
        .map(|g| (*g, host.group(*g).expect("opened above")))
        .collect();
    let writes = nodes.iter().map(|(g, node)| add_one(*g, node.clone()));
    futures_util::future::try_join_all(writes).await?;
    let want = 3 * round;
    for (g, node) in &nodes {
        await_count(*g, node, &counters[g], want).await?;
    }
    let leading = nodes
        .iter()
        .filter(|(_, n)| n.watch().borrow().is_leader())
        .count();
    println!(
        "host {}, run {round}: {} groups (leading {leading}), every counter at {want}; \
         {} journal syncs for all groups",
        id.0,
        nodes.len(),
        storage.syncs()
    );

    // Serve until the parent closes standard input.
    let mut sink = Vec::new();
    let _ = tokio::io::stdin().read_to_end(&mut sink).await;
    host.shutdown().await;
    Ok(())
}

/// Adds 1 to the group's counter, retrying while the group has no leader yet (a refusal: the
/// write provably never took effect, so retrying cannot count it twice).
async fn add_one(group: GroupId, node: Node) -> Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        match node
            .write(Bytes::copy_from_slice(&1u64.to_le_bytes()))
            .await
        {
            Ok(_) => return Ok(()),
            Err(e) if e.is_definite_failure() && tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => bail!("{group}: the write failed: {e}"),
        }
    }
}

/// Waits until a linearizable read on this replica shows the counter at `want`.
async fn await_count(group: GroupId, node: &Node, counter: &Counter, want: u64) -> Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let read = node.read(ReadMode::Linearizable).await;
        let sum = counter.sum.load(Ordering::SeqCst);
        if read.is_ok() && sum == want {
            return Ok(());
        }
        if sum > want {
            bail!("{group}: the counter is at {sum}, above the {want} writes made");
        }
        if tokio::time::Instant::now() >= deadline {
            bail!("{group}: the counter is at {sum}, not {want}, after 120 s ({read:?})");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
