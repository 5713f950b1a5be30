//! A replicated append-only list of your own, in four processes: `kv.rs` with another state
//! machine, and with a snapshot that streams. Each process is one replica (`node`): a
//! `raft_core::driver::Node` over QUIC with mutual TLS (`raft-transport-quic`) and fjall (or
//! redb with `--storage redb`), with a state machine that is a list of entries and snapshots
//! itself every 200 records.
//!
//! ```text
//! cargo run --release -p raft-examples --example list -- local [--storage redb] [--dir DIR] [--within SECS]
//! ```
//!
//! `local` plays the operator and the client. It makes a CA, a certificate and a directory id
//! per machine, starts machines 1 to 3 (the founding voters: their storage is formatted with the
//! founding voter set once), appends 1,000 entries through a follower, hands leadership to
//! another voter, then replaces voter 3 by a new machine 4: machine 4 starts unformatted (an
//! observer that catches up, through a snapshot), voter 3 is removed and stopped, machine 4 is
//! added, and machine 4 reads the whole list back with linearizable reads. The whole story must
//! end within `--within` seconds (CI bounds it so).
//!
//! The snapshot streams: `snapshot` captures the list in O(1) (the list only grows, so a
//! snapshot is its length at capture and a handle on the entries below it), and the reader
//! serializes it in chunks of [`SNAPSHOT_CHUNK`] bytes while later entries are appended;
//! `restore` decodes chunk by chunk and keeps the old list when the stream fails. Neither the
//! list nor its serialization is ever held in one buffer.
//!
//! A node is driven through its standard input, one command per line, answering one line each
//! (`ok ...` or `err ...`): `append V` (answers the new length), `range FROM TO` (the entries
//! at positions FROM to TO, TO excluded, space-separated; linearizable on any replica), `len`
//! (linearizable), `leader`, `voters`, `transfer N`, `add-voter N`, `remove-voter N`,
//! `snapshots`. End of input stops it gracefully.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use async_trait::async_trait;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use clap::{Parser, Subcommand, ValueEnum};
use raft_core::driver::{format, DriverOptions, Node, Parts, ReadMode};
use raft_core::io::{ElectionStore, LogStore, StateMachine, StateMachineError};
use raft_core::snapshot_stream::SnapshotReader;
use raft_core::{Config, DirectoryId, Offset, Record, RecordKind, ReplicaId, Voter, VoterSet};
use raft_transport_quic::{certs, QuicConfig, QuicTransport, TlsMaterial};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

const CLUSTER_ID: &str = "list-example";
const FOUNDERS: [u32; 3] = [1, 2, 3];
const MACHINES: [u32; 4] = [1, 2, 3, 4];
const WAIT: Duration = Duration::from_secs(60);
/// How many entries `local` appends.
const ENTRIES: usize = 1000;

#[derive(Parser)]
#[command(about = "A replicated append-only list in four processes")]
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
        #[arg(long, default_value_t = 7411)]
        base_port: u16,
        /// Fails (stopping every machine) unless the whole story ends within this many seconds.
        #[arg(long, default_value_t = 300)]
        within: u64,
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
            within,
        } => {
            let dir = dir.unwrap_or_else(|| std::env::temp_dir().join("raft-list-example"));
            let within = Duration::from_secs(within);
            runtime.block_on(async {
                // Dropping the story on time-out drops its machines, which kills them.
                tokio::time::timeout(within, local(storage, &dir, base_port))
                    .await
                    .with_context(|| format!("the story did not end within {within:?}"))?
            })
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

/// The bytes a snapshot reader hands out at a time: small, so that even this example's list
/// takes several chunks, as a large state would.
const SNAPSHOT_CHUNK: usize = 4 << 10;
/// What a snapshot starts with: its format and version (a damaged or foreign stream is refused).
const SNAPSHOT_MAGIC: &[u8; 8] = b"LIST\0\0\0\x01";
/// The largest entry a snapshot may hold (a damaged length must not exhaust memory).
const ENTRY_MAX: usize = 1 << 20;
/// A record's first byte: the version of the record format, so that a later version of `apply`
/// can still apply the records written by this one the same way on every replica.
const RECORD_V1: u8 = 1;

/// The entries, shared with the snapshot readers still serializing them. The list only grows
/// (`restore` swaps in another `Vec` rather than changing this one), so a reader that captured a
/// length reads the same entries below it whenever it reads them.
type Entries = Arc<RwLock<Vec<Bytes>>>;

/// An append-only list. A record's payload is [`RECORD_V1`] then the entry; its response is
/// the list's new length. `apply` must be deterministic: the same records give the same list on
/// every replica (no clock, no randomness, no I/O).
#[derive(Default)]
struct List {
    /// The entries and the applied offset under one lock, so that `snapshot` and `restore` see
    /// and change both at once.
    state: Mutex<(Entries, Offset)>,
}

impl List {
    /// The entries `from..to` (`to` clamped to the length), and the length.
    fn range(&self, from: usize, to: usize) -> (Vec<Bytes>, usize) {
        let entries = self.state.lock().expect("list lock").0.clone();
        let entries = entries.read().expect("entries lock");
        let to = to.min(entries.len());
        (
            entries.get(from..to).unwrap_or_default().to_vec(),
            entries.len(),
        )
    }
}

#[async_trait]
impl StateMachine for List {
    async fn applied(&self) -> Offset {
        self.state.lock().expect("list lock").1
    }

    async fn apply(
        &self,
        records: &[Record],
        responses: &mut Vec<Bytes>,
    ) -> Result<(), StateMachineError> {
        let mut state = self.state.lock().expect("list lock");
        let (entries, applied) = &mut *state;
        let mut entries = entries.write().expect("entries lock");
        for r in records {
            let response = match (r.kind, r.payload.first()) {
                (RecordKind::Data, Some(&RECORD_V1)) => {
                    entries.push(r.payload.slice(1..));
                    Bytes::from(entries.len().to_string())
                }
                // Bad input is an answer, the same on every replica: never a panic or an `Err`.
                (RecordKind::Data, _) => Bytes::from_static(b"err: unknown record format"),
                // Control records (epoch starts, voter changes) get an empty response.
                _ => Bytes::new(),
            };
            responses.push(response);
            *applied = r.offset.next();
        }
        Ok(())
    }

    async fn snapshot(&self) -> Result<Box<dyn SnapshotReader>, StateMachineError> {
        // A cheap capture between two `apply` calls: a handle and a length, no copy.
        let entries = self.state.lock().expect("list lock").0.clone();
        let len = entries.read().expect("entries lock").len();
        Ok(Box::new(ListReader {
            entries,
            len,
            next: 0,
            header: true,
        }))
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
        // Decoded chunk by chunk into a new list; the old one stays until the stream ended
        // intact (a damaged snapshot reports its checksum mismatch only at its end).
        let mut decoder = Decoder::default();
        while let Some(chunk) = data.next_chunk().await.map_err(|e| bad(e.to_string()))? {
            decoder.feed(&chunk).map_err(bad)?;
        }
        let entries = decoder.finish().map_err(bad)?;
        *self.state.lock().expect("list lock") = (Arc::new(RwLock::new(entries)), applied);
        Ok(())
    }
}

/// Serializes a captured list as it is read: [`SNAPSHOT_MAGIC`], the count (u64), then each
/// entry as its length (u32) and its bytes, all big-endian, in chunks of about
/// [`SNAPSHOT_CHUNK`] bytes.
struct ListReader {
    entries: Entries,
    /// The length at capture: entries appended since are not part of this snapshot.
    len: usize,
    next: usize,
    header: bool,
}

#[async_trait]
impl SnapshotReader for ListReader {
    async fn next_chunk(&mut self) -> std::io::Result<Option<Bytes>> {
        let mut chunk = BytesMut::with_capacity(SNAPSHOT_CHUNK + 64);
        if std::mem::take(&mut self.header) {
            chunk.put_slice(SNAPSHOT_MAGIC);
            chunk.put_u64(self.len as u64);
        }
        {
            // Held for one chunk's worth of entries only: appends wait at most that long.
            let entries = self.entries.read().expect("entries lock");
            while self.next < self.len && chunk.len() < SNAPSHOT_CHUNK {
                let entry = &entries[self.next];
                chunk.put_u32(entry.len() as u32);
                chunk.put_slice(entry);
                self.next += 1;
            }
        }
        // Chunks are never empty: the end is `None`.
        Ok((!chunk.is_empty()).then(|| chunk.freeze()))
    }
}

/// Decodes what [`ListReader`] wrote, whatever the chunks' boundaries.
#[derive(Default)]
struct Decoder {
    /// Bytes received and not decoded yet (at most one entry and a header).
    pending: BytesMut,
    /// The count the header announced, once it arrived.
    count: Option<u64>,
    entries: Vec<Bytes>,
}

impl Decoder {
    fn feed(&mut self, chunk: &[u8]) -> Result<(), String> {
        self.pending.extend_from_slice(chunk);
        if self.count.is_none() {
            if self.pending.len() < SNAPSHOT_MAGIC.len() + 8 {
                return Ok(());
            }
            if &self.pending[..SNAPSHOT_MAGIC.len()] != SNAPSHOT_MAGIC {
                return Err("not a list snapshot of this version".into());
            }
            self.pending.advance(SNAPSHOT_MAGIC.len());
            self.count = Some(self.pending.get_u64());
        }
        while self.pending.len() >= 4 {
            let len = u32::from_be_bytes(self.pending[..4].try_into().expect("4 bytes")) as usize;
            if len > ENTRY_MAX {
                return Err(format!("an entry of {len} bytes"));
            }
            if self.pending.len() < 4 + len {
                break;
            }
            if Some(self.entries.len() as u64) == self.count {
                return Err("more entries than the header counts".into());
            }
            self.pending.advance(4);
            self.entries.push(self.pending.split_to(len).freeze());
        }
        Ok(())
    }

    fn finish(self) -> Result<Vec<Bytes>, String> {
        match self.count {
            Some(n) if n == self.entries.len() as u64 && self.pending.is_empty() => {
                Ok(self.entries)
            }
            Some(n) => Err(format!(
                "{} entries of {n} and {} bytes left over",
                self.entries.len(),
                self.pending.len()
            )),
            None => Err("a snapshot without its header".into()),
        }
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
    let list = Arc::new(List::default());
    let parts = Parts {
        log,
        election,
        transport: Arc::new(transport),
        state_machine: list.clone(),
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
        let answer = match command(&node, &list, &directories, base_port, &line).await {
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
    list: &List,
    directories: &BTreeMap<ReplicaId, DirectoryId>,
    base_port: u16,
    line: &str,
) -> Result<String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let machine = |w: Option<&&str>| -> Result<ReplicaId> {
        Ok(ReplicaId(w.context("a machine id")?.parse()?))
    };
    match words.first().copied() {
        Some("append") => {
            let v = words.get(1).context("a value")?;
            let mut payload = BytesMut::from(&[RECORD_V1][..]);
            payload.put_slice(v.as_bytes());
            let payload = payload.freeze();
            // A refusal provably never took effect, so retrying cannot append twice; any other
            // error (unknown outcome) is reported: the entry may still be appended.
            let deadline = tokio::time::Instant::now() + WAIT;
            loop {
                match node.write(payload.clone()).await {
                    // What `apply` pushed for this record: the new length.
                    Ok(c) => return Ok(String::from_utf8_lossy(&c.response).into_owned()),
                    Err(e) if e.is_definite_failure() && tokio::time::Instant::now() < deadline => {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    Err(e) => bail!("{e}"),
                }
            }
        }
        Some("range") => {
            let from: usize = words.get(1).context("FROM")?.parse()?;
            let to: usize = words.get(2).context("TO")?.parse()?;
            // Linearizable on any replica: the state machine has applied every append that was
            // acknowledged before this read began.
            read(node).await?;
            let (entries, _) = list.range(from, to);
            let words: Vec<_> = entries.iter().map(|e| String::from_utf8_lossy(e)).collect();
            Ok(words.join(" "))
        }
        Some("len") => {
            read(node).await?;
            Ok(list.range(0, 0).1.to_string())
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

    // Appends through a follower are forwarded to the leader; each answers the new length.
    let follower = FOUNDERS
        .into_iter()
        .find(|m| *m != first)
        .expect("a follower");
    let m = machines.get_mut(&follower).expect("the follower");
    for i in 0..ENTRIES {
        let len = m.ask(&format!("append value{i}")).await?;
        if len != (i + 1).to_string() {
            bail!("append {i} answered the length {len:?}");
        }
    }
    let snaps = m.ask("snapshots").await?;
    println!("{ENTRIES} entries appended through machine {follower}; its snapshots: {snaps}");
    let other = FOUNDERS
        .into_iter()
        .find(|m| *m != first && *m != follower)
        .expect("a third founder");
    let got = machines
        .get_mut(&other)
        .expect("the third founder")
        .ask("range 10 13")
        .await?;
    if got != "value10 value11 value12" {
        bail!("machine {other} reads range 10 13 as {got:?}");
    }
    println!("machine {other} reads range 10 13 as {got:?}, linearizably");

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

    // Machine 4 reads the whole list back, a page at a time.
    let m4 = machines.get_mut(&4).expect("machine 4");
    let len: usize = m4.ask("len").await?.parse()?;
    if len != ENTRIES {
        bail!("machine 4 reads the length {len}, not {ENTRIES}");
    }
    for from in (0..ENTRIES).step_by(100) {
        let got = m4.ask(&format!("range {from} {}", from + 100)).await?;
        let want: Vec<String> = (from..(from + 100).min(ENTRIES))
            .map(|i| format!("value{i}"))
            .collect();
        if got != want.join(" ") {
            bail!("machine 4 reads range {from} {} as {got:?}", from + 100);
        }
    }
    let snaps = m4.ask("snapshots").await?;
    if snaps.ends_with("installed=0") {
        bail!("machine 4 caught up without a snapshot ({snaps}): the log was not purged");
    }
    println!("machine 4 reads all {len} entries back, linearizably; its snapshots: {snaps}");
    for (_, m) in machines {
        m.stop().await?;
    }
    Ok(())
}

/// `cargo test -p raft-examples --example list`: the snapshot round-trips whatever the chunks'
/// boundaries, and a damaged one leaves the list as it was.
#[cfg(test)]
mod tests {
    use super::*;

    /// A reader of `data` cut into pieces of `size` bytes, as a store or a network may cut it.
    fn recut(data: &[u8], size: usize) -> raft_core::snapshot_stream::BytesReader {
        raft_core::snapshot_stream::BytesReader::with_chunk_size(Bytes::copy_from_slice(data), size)
    }

    async fn list_of(n: usize) -> List {
        let list = List::default();
        let records: Vec<Record> = (0..n)
            .map(|i| {
                let mut payload = vec![RECORD_V1];
                payload.extend_from_slice(format!("entry-{i}").as_bytes());
                Record {
                    offset: Offset(i as u64),
                    epoch: raft_core::Epoch(1),
                    kind: RecordKind::Data,
                    payload: Bytes::from(payload),
                }
            })
            .collect();
        list.apply(&records, &mut Vec::new()).await.unwrap();
        list
    }

    async fn serialized(list: &List) -> (Vec<u8>, usize) {
        let mut reader = list.snapshot().await.unwrap();
        let (mut bytes, mut chunks) = (Vec::new(), 0);
        while let Some(chunk) = reader.next_chunk().await.unwrap() {
            bytes.extend_from_slice(&chunk);
            chunks += 1;
        }
        (bytes, chunks)
    }

    #[tokio::test]
    async fn round_trips_in_any_chunks_and_keeps_the_old_list_on_damage() {
        let list = list_of(2000).await;
        let (bytes, chunks) = serialized(&list).await;
        assert!(chunks > 3, "{chunks} chunks: the snapshot streams");
        for size in [1, 7, 4096, bytes.len()] {
            let copy = List::default();
            copy.restore(Offset(2000), &mut recut(&bytes, size))
                .await
                .unwrap();
            assert_eq!(copy.range(0, usize::MAX), list.range(0, usize::MAX));
            assert_eq!(copy.applied().await, Offset(2000));
        }
        let copy = list_of(3).await;
        for damaged in [&bytes[..bytes.len() - 1], &bytes[1..]] {
            assert!(copy
                .restore(Offset(2000), &mut recut(damaged, 100))
                .await
                .is_err());
            assert_eq!(copy.range(0, 10).1, 3);
            assert_eq!(copy.applied().await, Offset(3));
        }
    }
}
