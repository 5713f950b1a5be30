//! A replicated key-value store of your own, in four processes: the program to copy when you
//! start. Each process is one replica (`node`): a `raft_core::driver::Node` over QUIC with
//! mutual TLS (`raft-transport-quic`) and fjall (or redb with `--storage redb`), with a state
//! machine that is a `BTreeMap` and snapshots itself every 200 records.
//!
//! ```text
//! cargo run --release -p raft-examples --example kv -- local [--storage redb] [--dir DIR]
//! ```
//!
//! `local` plays the operator and the client. It makes a CA, a certificate and a directory id
//! per machine, starts machines 1 to 3 (the founding voters: their storage is formatted with the
//! founding voter set once), writes 1,000 keys through a follower, hands leadership to another
//! voter, then replaces voter 3 by a new machine 4: machine 4 starts unformatted (an observer
//! that catches up, through a snapshot), voter 3 is removed and stopped, machine 4 is added,
//! and every key is read back on machine 4 with a linearizable read.
//!
//! A node is driven through its standard input, one command per line, answering one line each
//! (`ok ...` or `err ...`): `put K V`, `get K`, `leader`, `voters`, `transfer N`,
//! `add-voter N`, `remove-voter N`, `snapshots`. End of input stops it gracefully.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use async_trait::async_trait;
use bytes::Bytes;
use clap::{Parser, Subcommand, ValueEnum};
use raft_core::driver::{format, DriverOptions, Node, Parts, ReadMode};
use raft_core::io::{ElectionStore, LogStore, StateMachine, StateMachineError};
use raft_core::snapshot_stream::{read_to_end, BytesReader, SnapshotReader};
use raft_core::{Config, DirectoryId, Offset, Record, RecordKind, ReplicaId, Voter, VoterSet};
use raft_transport_quic::{certs, QuicConfig, QuicTransport, TlsMaterial};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

const CLUSTER_ID: &str = "kv-example";
const FOUNDERS: [u32; 3] = [1, 2, 3];
const MACHINES: [u32; 4] = [1, 2, 3, 4];
const WAIT: Duration = Duration::from_secs(60);

#[derive(Parser)]
#[command(about = "A replicated key-value store in four processes")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum Storage {
    Fjall,
    Redb,
}

#[derive(Subcommand)]
enum Command {
    /// Runs the whole story on this machine (see the module docs).
    Local {
        #[arg(long, value_enum, default_value = "fjall")]
        storage: Storage,
        /// Where the machines keep their data (emptied first).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// The first of four consecutive UDP ports on 127.0.0.1.
        #[arg(long, default_value_t = 7401)]
        base_port: u16,
    },
    /// One replica, driven through its standard input.
    Node {
        #[arg(long)]
        id: u32,
        #[arg(long)]
        dir: PathBuf,
        #[arg(long, value_enum)]
        storage: Storage,
        #[arg(long)]
        base_port: u16,
        /// Formats this machine's storage as a founder first: given once, by the operator, at a
        /// founder's first start; refused if the storage was formatted or holds data.
        #[arg(long)]
        format: bool,
    },
}

fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "error".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = tokio::runtime::Runtime::new()?;
    match Cli::parse().command {
        Command::Local {
            storage,
            dir,
            base_port,
        } => {
            let dir = dir.unwrap_or_else(|| std::env::temp_dir().join("raft-kv-example"));
            runtime.block_on(local(storage, &dir, base_port))
        }
        Command::Node {
            id,
            dir,
            storage,
            base_port,
            format,
        } => runtime.block_on(node(ReplicaId(id), &dir, storage, base_port, format)),
    }
}

// ---------------------------------------------------------------------------------------------
// The state machine: the part you replace with your own.

/// A map from keys to values. A record's payload is `key=value`. `apply` must be deterministic:
/// the same records give the same map on every replica (no clock, no randomness, no I/O).
#[derive(Default)]
struct Kv {
    map: Mutex<BTreeMap<String, String>>,
    /// Beside the map rather than under its lock: the driver calls `apply`, `snapshot` and
    /// `restore` one at a time, never together, so the two agree whenever `snapshot` runs.
    applied: AtomicU64,
}

#[async_trait]
impl StateMachine for Kv {
    async fn applied(&self) -> Offset {
        Offset(self.applied.load(Ordering::SeqCst))
    }

    async fn apply(
        &self,
        records: &[Record],
        responses: &mut Vec<Bytes>,
    ) -> Result<(), StateMachineError> {
        let mut map = self.map.lock().expect("kv lock");
        for r in records {
            if r.kind == RecordKind::Data {
                // A payload that is not `key=value` is skipped on every replica alike.
                let text = String::from_utf8_lossy(&r.payload);
                if let Some((k, v)) = text.split_once('=') {
                    map.insert(k.to_string(), v.to_string());
                }
            }
            responses.push(Bytes::new());
            self.applied.store(r.offset.0 + 1, Ordering::SeqCst);
        }
        Ok(())
    }

    async fn snapshot(&self) -> Result<Box<dyn SnapshotReader>, StateMachineError> {
        // Small state: serialized at once. A large one streams from a cheap capture, as the
        // list in `list.rs` does.
        let map = self.map.lock().expect("kv lock");
        let text: String = map.iter().map(|(k, v)| format!("{k}\t{v}\n")).collect();
        Ok(Box::new(BytesReader::new(Bytes::from(text))))
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
        let bytes = read_to_end(data, 1 << 30)
            .await
            .map_err(|e| bad(e.to_string()))?;
        let text = String::from_utf8(bytes.to_vec()).map_err(|e| bad(e.to_string()))?;
        let mut map = BTreeMap::new();
        for line in text.lines() {
            let (k, v) = line
                .split_once('\t')
                .ok_or_else(|| bad("a line without a tab".into()))?;
            map.insert(k.to_string(), v.to_string());
        }
        *self.map.lock().expect("kv lock") = map;
        self.applied.store(applied.0, Ordering::SeqCst);
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// One replica.

fn addr(base_port: u16, id: ReplicaId) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], base_port + id.0 as u16 - 1))
}

/// Every machine's directory id, made once by `local` (a machine's storage identity): the
/// founders' ids go into the founding voter set, so the operator makes them before starting
/// any machine. Here one file holds them all, since one operator runs every machine on one host
/// and empties the whole directory first; a deployment keeps each id in a file inside its
/// machine's data directory, made (at random, never zero) with it, so that a wiped directory
/// comes back with a new id.
fn directories(dir: &Path) -> Result<BTreeMap<ReplicaId, DirectoryId>> {
    let path = dir.join("directories");
    if !path.exists() {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_nanos();
        let text: String = MACHINES
            .iter()
            .map(|m| format!("{m} {:032x}\n", seed.rotate_left(*m * 23) | 1))
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

async fn node(
    id: ReplicaId,
    dir: &Path,
    storage: Storage,
    base_port: u16,
    founder: bool,
) -> Result<()> {
    let directories = directories(dir)?;
    let tls_dir = dir.join("tls");
    let read = |name: String| std::fs::read_to_string(tls_dir.join(name));
    let tls = TlsMaterial {
        ca_cert_pem: read("ca.pem".into())?,
        cert_pem: read(format!("node-{}.pem", id.0))?,
        key_pem: read(format!("node-{}.key", id.0))?,
    };
    let peers = MACHINES
        .iter()
        .map(|m| ReplicaId(*m))
        .filter(|m| *m != id)
        .map(|m| (m, addr(base_port, m)))
        .collect();
    let transport = QuicTransport::bind(QuicConfig::new(id, addr(base_port, id), peers, tls))?;
    let data = dir.join(format!("node-{}", id.0));
    let (log, election, snapshots): (Arc<dyn LogStore>, Arc<dyn ElectionStore>, _) = match storage {
        Storage::Fjall => {
            let store = Arc::new(raft_storage_fjall::FjallStore::open(
                &data,
                CLUSTER_ID,
                raft_storage_fjall::Options::default(),
            )?);
            let snapshots = raft_storage_fjall::open_snapshots(&data)?;
            (store.clone(), store, Arc::new(snapshots))
        }
        Storage::Redb => {
            let store = Arc::new(raft_storage_redb::RedbStore::open(
                &data,
                CLUSTER_ID,
                raft_storage_redb::Options::default(),
            )?);
            let snapshots = raft_storage_redb::open_snapshots(&data)?;
            (store.clone(), store, Arc::new(snapshots))
        }
    };
    // The founders' storage is formatted once with the founding voter set, each voter keyed by
    // its directory id, when the operator says so (`--format`, at a founder's first start).
    // Never because the storage looks empty at a start: a founder whose disk was wiped would
    // format itself again and count as the voter whose records it lost. Any other machine, and
    // a founder restarted on an emptied disk, starts unformatted: an observer until it is added.
    let mut cfg = Config::new(id, FOUNDERS.map(ReplicaId));
    cfg.directory = Some(directories[&id]);
    cfg.snapshot_after_records = 200;
    cfg.snapshot_log_retention = 50;
    if founder {
        let founding = VoterSet::from_entries(FOUNDERS.map(|f| {
            let voter = Voter {
                directory: Some(directories[&ReplicaId(f)]),
                endpoint: addr(base_port, ReplicaId(f)).to_string(),
            };
            (ReplicaId(f), voter)
        }))?;
        format(&*snapshots, &founding).await?;
    }
    let kv = Arc::new(Kv::default());
    let parts = Parts {
        log,
        election,
        transport: Arc::new(transport),
        state_machine: kv.clone(),
        snapshots,
    };
    let options = DriverOptions {
        seed: u64::from(id.0),
        ..DriverOptions::default()
    };
    let node = Node::start(cfg.validate()?, parts, options).await?;

    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let mut out = tokio::io::stdout();
    while let Some(line) = lines.next_line().await? {
        let answer = match command(&node, &kv, &directories, base_port, &line).await {
            Ok(text) => format!("ok {text}\n"),
            Err(e) => format!("err {e:#}\n"),
        };
        out.write_all(answer.as_bytes()).await?;
        out.flush().await?;
    }
    node.shutdown().await;
    Ok(())
}

/// Carries out one command line.
async fn command(
    node: &Node,
    kv: &Kv,
    directories: &BTreeMap<ReplicaId, DirectoryId>,
    base_port: u16,
    line: &str,
) -> Result<String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let machine = |w: Option<&&str>| -> Result<ReplicaId> {
        Ok(ReplicaId(w.context("a machine id")?.parse()?))
    };
    match words.first().copied() {
        Some("put") => {
            let (k, v) = (
                words.get(1).context("a key")?,
                words.get(2).context("a value")?,
            );
            let payload = Bytes::from(format!("{k}={v}"));
            // A refusal provably never took effect, so retrying cannot apply it twice; any
            // other error (unknown outcome) is reported: the write may still be applied.
            let deadline = tokio::time::Instant::now() + WAIT;
            loop {
                match node.write(payload.clone()).await {
                    Ok(c) => return Ok(c.id.offset.0.to_string()),
                    Err(e) if e.is_definite_failure() && tokio::time::Instant::now() < deadline => {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    Err(e) => bail!("{e}"),
                }
            }
        }
        Some("get") => {
            let k = words.get(1).context("a key")?;
            // Linearizable on any replica: the state machine has applied every write that was
            // acknowledged before this read began.
            read(node).await?;
            let map = kv.map.lock().expect("kv lock");
            Ok(map.get(*k).cloned().unwrap_or_else(|| "(nil)".into()))
        }
        Some("leader") => Ok(match node.watch().borrow().leader {
            Some(l) => l.0.to_string(),
            None => "none".into(),
        }),
        Some("voters") => Ok(node.watch().borrow().voters.to_string()),
        Some("snapshots") => {
            let m = node.metrics();
            Ok(format!(
                "taken={} installed={}",
                m.snapshots_taken.load(Ordering::Relaxed),
                m.snapshots_installed.load(Ordering::Relaxed)
            ))
        }
        Some("transfer") => {
            node.transfer_leadership(machine(words.get(1))?).await?;
            Ok(String::new())
        }
        Some("add-voter") => {
            let id = machine(words.get(1))?;
            let endpoint = addr(base_port, id).to_string();
            // Refused until the new machine fetches and has caught up: retry within a bound.
            let deadline = tokio::time::Instant::now() + WAIT;
            loop {
                match node
                    .add_voter(id, directories[&id], endpoint.clone(), WAIT)
                    .await
                {
                    Ok(c) => return Ok(c.id.offset.0.to_string()),
                    Err(e) if tokio::time::Instant::now() < deadline => {
                        tracing::info!(error = %e, "not added yet");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    Err(e) => bail!("{e}"),
                }
            }
        }
        Some("remove-voter") => {
            let id = machine(words.get(1))?;
            let c = node.remove_voter(id, Some(directories[&id]), WAIT).await?;
            Ok(c.id.offset.0.to_string())
        }
        _ => bail!("unknown command {line:?}"),
    }
}

/// A linearizable read barrier, retried within a bound: every `ReadError` is retriable (no leader
/// known yet, mid-election, a time-out).
async fn read(node: &Node) -> Result<()> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match node.read(ReadMode::Linearizable).await {
            Ok(_) => return Ok(()),
            Err(e) if tokio::time::Instant::now() < deadline => {
                tracing::info!(error = %e, "read not served yet");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => bail!("{e}"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The operator and the client.

/// A running machine and its command line.
struct Machine {
    child: Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
}

impl Machine {
    /// Starts machine `id`; `format`: as a founder, formatting its storage first.
    fn start(
        exe: &Path,
        id: u32,
        dir: &Path,
        storage: Storage,
        base_port: u16,
        format: bool,
    ) -> Result<Machine> {
        let storage = match storage {
            Storage::Fjall => "fjall",
            Storage::Redb => "redb",
        };
        let mut child = tokio::process::Command::new(exe)
            .args(["node", "--id", &id.to_string(), "--storage", storage])
            .args(["--base-port", &base_port.to_string()])
            .arg("--dir")
            .arg(dir)
            .args(format.then_some("--format"))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting machine {id}"))?;
        let stdin = child.stdin.take().context("stdin")?;
        let stdout = BufReader::new(child.stdout.take().context("stdout")?).lines();
        Ok(Machine {
            child,
            stdin,
            stdout,
        })
    }

    /// Sends one command and returns the text of its `ok` answer.
    async fn ask(&mut self, line: &str) -> Result<String> {
        self.stdin.write_all(format!("{line}\n").as_bytes()).await?;
        let answer = tokio::time::timeout(WAIT * 2, self.stdout.next_line())
            .await
            .with_context(|| format!("no answer to {line:?}"))??
            .with_context(|| format!("the machine stopped on {line:?}"))?;
        match answer.strip_prefix("ok") {
            Some(text) => Ok(text.trim().to_string()),
            None => bail!("{line:?}: {answer}"),
        }
    }

    async fn stop(mut self) -> Result<()> {
        drop(self.stdin);
        let status = tokio::time::timeout(WAIT, self.child.wait()).await??;
        if !status.success() {
            bail!("a machine exited with {status}");
        }
        Ok(())
    }
}

/// Asks `machine` for the leader until it names one (`want`, if given).
async fn leader_is(machine: &mut Machine, want: Option<u32>) -> Result<u32> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let l = machine.ask("leader").await?;
        if let Ok(id) = l.parse() {
            if want.is_none_or(|w| w == id) {
                return Ok(id);
            }
        }
        if tokio::time::Instant::now() >= deadline {
            bail!("no leader ({want:?} asked for) within {WAIT:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn local(storage: Storage, dir: &Path, base_port: u16) -> Result<()> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir.join("tls"))?;
    let ca = certs::generate_ca()?;
    for m in MACHINES {
        let node = certs::generate_node(&ca, ReplicaId(m))?;
        std::fs::write(dir.join(format!("tls/node-{m}.pem")), node.cert_pem)?;
        std::fs::write(dir.join(format!("tls/node-{m}.key")), node.key_pem)?;
    }
    std::fs::write(dir.join("tls/ca.pem"), ca.cert_pem)?;
    directories(dir)?;
    let exe = std::env::current_exe()?;
    let mut machines: BTreeMap<u32, Machine> = BTreeMap::new();
    for m in FOUNDERS {
        machines.insert(m, Machine::start(&exe, m, dir, storage, base_port, true)?);
    }
    let first = leader_is(machines.get_mut(&1).expect("machine 1"), None).await?;
    println!("machines 1-3 started; machine {first} leads");

    // Writes through a follower are forwarded to the leader.
    let follower = FOUNDERS
        .into_iter()
        .find(|m| *m != first)
        .expect("a follower");
    let m = machines.get_mut(&follower).expect("the follower");
    for i in 0..1000 {
        m.ask(&format!("put key{i} value{i}")).await?;
    }
    let snaps = m.ask("snapshots").await?;
    println!("1,000 keys written through machine {follower}; its snapshots: {snaps}");

    // To a voter that stays (not 3, which is replaced below).
    let to = FOUNDERS
        .into_iter()
        .find(|m| *m != first && *m != 3)
        .expect("a voter to hand over to");
    machines
        .get_mut(&first)
        .expect("leader")
        .ask(&format!("transfer {to}"))
        .await?;
    let l = leader_is(machines.get_mut(&to).expect("target"), Some(to)).await?;
    println!("leadership handed from machine {first} to machine {l}");

    // Replace voter 3 by machine 4: start it (an observer that catches up, through a
    // snapshot since the log was purged), remove 3, stop it, add 4.
    machines.insert(4, Machine::start(&exe, 4, dir, storage, base_port, false)?);
    let ask_leader = |machines: &mut BTreeMap<u32, Machine>| machines.remove(&l).expect("leader");
    let mut lm = ask_leader(&mut machines);
    lm.ask("remove-voter 3").await?;
    machines.remove(&3).expect("machine 3").stop().await?;
    lm.ask("add-voter 4").await?;
    let voters = lm.ask("voters").await?;
    machines.insert(l, lm);
    println!("voter 3 replaced by machine 4; voters {voters}");

    let m4 = machines.get_mut(&4).expect("machine 4");
    for i in (0..1000).step_by(37) {
        let got = m4.ask(&format!("get key{i}")).await?;
        if got != format!("value{i}") {
            bail!("machine 4 reads key{i} as {got:?}");
        }
    }
    let snaps = m4.ask("snapshots").await?;
    if snaps.ends_with("installed=0") {
        bail!("machine 4 caught up without a snapshot ({snaps}): the log was not purged");
    }
    println!("machine 4 reads every key it was asked for, linearizably; its snapshots: {snaps}");
    for (_, m) in machines {
        m.stop().await?;
    }
    Ok(())
}
