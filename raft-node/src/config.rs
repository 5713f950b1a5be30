//! The node's configuration: a TOML file, then command-line flags and environment variables on
//! top of it, checked into a [`NodeConfig`] before anything starts.
//!
//! Every refusal is a [`ConfigError`] naming the field and the problem. Relative paths in a file
//! are relative to the file's directory; on the command line, to the working directory.
//!
//! ```toml
//! cluster_id = "prod-kv"
//! replica_id = 1
//! data_dir = "data/node1"
//! storage = "fjall"           # or "redb"
//! log = "info"                # tracing filter; RUST_LOG wins when set
//!
//! [listen]
//! peer = "127.0.0.1:7101"     # QUIC (UDP); defaults to this replica's voter entry
//! client = "127.0.0.1:7001"   # RESP (TCP); defaults to this replica's voter entry
//! metrics = "127.0.0.1:9101"  # Prometheus text endpoint (HTTP GET /metrics); off when unset
//!
//! [tls]
//! ca_cert = "certs/ca.pem"
//! cert = "certs/node-1.pem"
//! key = "certs/node-1.key"
//!
//! [[voters]]
//! id = 1
//! peer = "127.0.0.1:7101"
//! client = "127.0.0.1:7001"   # optional: named in "not leader" errors
//!
//! [timers]                    # all optional, milliseconds
//! election_timeout_ms = 1000
//! fetch_timeout_ms = 2000
//! fetch_max_wait_ms = 500
//! request_timeout_ms = 2000
//! write_timeout_ms = 5000
//! shutdown_timeout_ms = 2000
//!
//! [snapshot]                  # all optional
//! after_records = 100000      # snapshot once this many records were applied (0: never)
//! after_bytes = 268435456     # or this many payload bytes (0: no byte trigger)
//! after_secs = 3600           # or this long since the last one (0: no time trigger)
//! log_retention = 10000       # records kept in the log below a snapshot
//! chunk_bytes = 1048576       # bytes per FetchSnapshot chunk
//!
//! [lease]                     # optional: lease reads (`READMODE lease`); off by default
//! enabled = false
//! drift_margin_ms = 200       # below timers.fetch_timeout_ms; see "Leases and clocks"
//!
//! [client]                    # all optional
//! requirepass = "secret"
//! read_mode = "linearizable"  # or "lease" (needs lease.enabled), "sequential"
//! bulk_bytes_max = 524288
//! array_len_max = 65536
//! inline_bytes_max = 65536
//! request_bytes_max = 1048576
//! connections_max = 10000
//! tls_cert = "certs/client.pem" # TLS on the client port (with tls_key); off when unset
//! tls_key = "certs/client.key"
//! tls_ca = "certs/clients-ca.pem" # optional: require client certificates signed by this CA
//! ```

//!
//! # Leases and clocks
//!
//! A lease read skips the leader's confirmation round while followers cannot yet have elected
//! another leader: for one fetch timeout, minus `lease.drift_margin_ms`, after a majority last
//! fetched. Time is tokio's `Instant` (on Linux `CLOCK_MONOTONIC`): immune to wall-clock steps,
//! but it stands still while the host is suspended, and a paused VM may not see the pause. A
//! leader that resumes from either believes its lease still runs while the others have moved
//! on, so its lease reads can be stale. Enable leases only where clocks run at rates within the
//! margin of each other over a fetch timeout and hosts are never suspended or paused for
//! longer than that; otherwise keep linearizable reads (the default).

use std::collections::BTreeMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::Duration;

use raft_core::ReplicaId;
use serde::Deserialize;

use crate::resp::Limits;

/// A refused configuration: which field, and what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid configuration: `{field}`: {problem}")]
pub struct ConfigError {
    /// The field, as written in the TOML file (`timers.fetch_timeout_ms`, `voters[2].peer`).
    pub field: String,
    /// What is wrong.
    pub problem: String,
}

fn bad(field: impl Into<String>, problem: impl Into<String>) -> ConfigError {
    ConfigError {
        field: field.into(),
        problem: problem.into(),
    }
}

/// The storage engine holding the log and election state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StorageKind {
    /// `raft-storage-redb`.
    Redb,
    /// `raft-storage-fjall`.
    Fjall,
}

impl StorageKind {
    /// The name used in the config and the identity file.
    pub fn name(self) -> &'static str {
        match self {
            StorageKind::Redb => "redb",
            StorageKind::Fjall => "fjall",
        }
    }

    /// The engine used when the config names none: fjall when compiled in (`cargo xtask bench
    /// storage`: 1.5-3x redb's durable appends per second on every batch size measured).
    pub fn default_compiled() -> StorageKind {
        if cfg!(feature = "storage-fjall") {
            StorageKind::Fjall
        } else {
            StorageKind::Redb
        }
    }

    fn parse(s: &str) -> Result<StorageKind, String> {
        let kind = match s {
            "redb" => StorageKind::Redb,
            "fjall" => StorageKind::Fjall,
            other => {
                return Err(format!(
                    "unknown storage {other:?}; expected \"redb\" or \"fjall\""
                ))
            }
        };
        let compiled = match kind {
            StorageKind::Redb => cfg!(feature = "storage-redb"),
            StorageKind::Fjall => cfg!(feature = "storage-fjall"),
        };
        if !compiled {
            return Err(format!(
                "storage {s:?} is not compiled into this build (cargo feature storage-{s})"
            ));
        }
        Ok(kind)
    }
}

/// How reads on a connection are ordered with writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadMode {
    /// A read sees every write acknowledged before it started.
    Linearizable,
    /// Like linearizable, trusting the leader's lease instead of a round of fetches.
    Lease,
    /// This node's applied state: may be behind, never goes back on one connection.
    Sequential,
}

impl ReadMode {
    /// The name used in config, `READMODE` and `INFO`.
    pub fn name(self) -> &'static str {
        match self {
            ReadMode::Linearizable => "linearizable",
            ReadMode::Lease => "lease",
            ReadMode::Sequential => "sequential",
        }
    }

    /// Parses a mode name, case-insensitively.
    pub fn parse(s: &str) -> Option<ReadMode> {
        match s.to_ascii_lowercase().as_str() {
            "linearizable" => Some(ReadMode::Linearizable),
            "lease" => Some(ReadMode::Lease),
            "sequential" => Some(ReadMode::Sequential),
            _ => None,
        }
    }
}

/// Where a replica is reached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerAddrs {
    /// Its QUIC peer address.
    pub peer: SocketAddr,
    /// Its client address, if known (named in "not leader" errors).
    pub client: Option<String>,
}

/// Paths of the TLS material.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsPaths {
    /// The cluster CA certificate, PEM.
    pub ca_cert: PathBuf,
    /// This node's certificate, PEM.
    pub cert: PathBuf,
    /// This node's private key, PEM.
    pub key: PathBuf,
}

/// Timers of the protocol and of the client layer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Timers {
    /// Base election timeout.
    pub election_timeout: Duration,
    /// A follower without a successful fetch for this long campaigns.
    pub fetch_timeout: Duration,
    /// The leader's long-poll wait.
    pub fetch_max_wait: Duration,
    /// Deadline of every peer RPC.
    pub request_timeout: Duration,
    /// How long a client write may wait for a leader and its commit.
    pub write_timeout: Duration,
    /// How long a graceful stop waits for the leadership handover.
    pub shutdown_timeout: Duration,
}

/// When snapshots are taken and how they move (raft-core's `Config::snapshot_*`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotOptions {
    /// Records applied since the last snapshot that trigger a new one (0: never).
    pub after_records: u64,
    /// Payload bytes applied since the last snapshot that trigger a new one (0: never).
    pub after_bytes: u64,
    /// Time since the last snapshot that triggers a new one (zero: never).
    pub after_time: Duration,
    /// Records kept in the log below a snapshot.
    pub log_retention: u64,
    /// Bytes per FetchSnapshot chunk.
    pub chunk_bytes: u32,
}

/// Lease reads (raft-core's `Config::lease_reads` and `lease_drift_margin`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseOptions {
    /// Whether `READMODE lease` is served; off by default.
    pub enabled: bool,
    /// Subtracted from the fetch timeout to bound the lease (clock rate differences).
    pub drift_margin: Duration,
}

/// TLS on the client port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientTls {
    /// The server certificate chain, PEM.
    pub cert: PathBuf,
    /// Its private key, PEM.
    pub key: PathBuf,
    /// If set, clients must present a certificate signed by this CA (PEM).
    pub ca: Option<PathBuf>,
}

/// Client-facing options.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientOptions {
    /// TLS on the client port, if enabled.
    pub tls: Option<ClientTls>,
    /// The password of `AUTH`, if any.
    pub requirepass: Option<String>,
    /// The read mode of a new connection.
    pub read_mode: ReadMode,
    /// Request bounds.
    pub limits: Limits,
    /// Most client connections at once.
    pub connections_max: usize,
}

/// A checked configuration: everything a node needs to start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeConfig {
    /// The cluster's id; the data directory and the storage are stamped with it.
    pub cluster_id: String,
    /// This replica.
    pub id: ReplicaId,
    /// Where the identity file and the storage live.
    pub data_dir: PathBuf,
    /// The storage engine.
    pub storage: StorageKind,
    /// A tracing filter, if set.
    pub log: Option<String>,
    /// The QUIC listen address.
    pub listen_peer: SocketAddr,
    /// The RESP listen address.
    pub listen_client: SocketAddr,
    /// The metrics (HTTP) listen address; no endpoint when unset.
    pub listen_metrics: Option<SocketAddr>,
    /// TLS material.
    pub tls: TlsPaths,
    /// Voters by id.
    pub voters: BTreeMap<ReplicaId, PeerAddrs>,
    /// Observers by id.
    pub observers: BTreeMap<ReplicaId, PeerAddrs>,
    /// Timers.
    pub timers: Timers,
    /// Snapshot triggers.
    pub snapshot: SnapshotOptions,
    /// Lease reads.
    pub lease: LeaseOptions,
    /// Client options.
    pub client: ClientOptions,
}

impl NodeConfig {
    /// Every other replica's peer address (what the transport dials).
    pub fn peers(&self) -> BTreeMap<ReplicaId, SocketAddr> {
        self.voters
            .iter()
            .chain(&self.observers)
            .filter(|(id, _)| **id != self.id)
            .map(|(id, a)| (*id, a.peer))
            .collect()
    }

    /// The client address of `id`, if configured.
    pub fn client_addr_of(&self, id: ReplicaId) -> Option<String> {
        if id == self.id {
            return Some(self.listen_client.to_string());
        }
        self.voters
            .get(&id)
            .or_else(|| self.observers.get(&id))
            .and_then(|a| a.client.clone())
    }

    /// The protocol configuration.
    pub fn raft_config(&self) -> Result<raft_core::ValidatedConfig, ConfigError> {
        let mut c = raft_core::Config::new(self.id, self.voters.keys().copied());
        c.observers = self.observers.keys().copied().collect();
        c.election_timeout = self.timers.election_timeout;
        c.fetch_timeout = self.timers.fetch_timeout;
        c.fetch_max_wait = self.timers.fetch_max_wait;
        c.request_timeout = self.timers.request_timeout;
        c.snapshot_after_records = self.snapshot.after_records;
        c.snapshot_after_bytes = self.snapshot.after_bytes;
        c.snapshot_after_time = self.snapshot.after_time;
        c.snapshot_log_retention = self.snapshot.log_retention;
        c.snapshot_chunk_bytes = self.snapshot.chunk_bytes;
        c.lease_reads = self.lease.enabled;
        c.lease_drift_margin = self.lease.drift_margin;
        c.validate().map_err(|e| match e {
            raft_core::ConfigError::LeaseMarginTooLarge => bad(
                "lease.drift_margin_ms",
                format!(
                    "{} ms must be below timers.fetch_timeout_ms ({} ms)",
                    self.lease.drift_margin.as_millis(),
                    self.timers.fetch_timeout.as_millis()
                ),
            ),
            e => bad("timers", e.to_string()),
        })
    }
}

/// The file format; every field optional so that flags can supply it.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    cluster_id: Option<String>,
    replica_id: Option<u32>,
    data_dir: Option<PathBuf>,
    storage: Option<String>,
    log: Option<String>,
    #[serde(default)]
    listen: ListenSection,
    #[serde(default)]
    tls: TlsSection,
    #[serde(default)]
    voters: Vec<PeerEntry>,
    #[serde(default)]
    observers: Vec<PeerEntry>,
    #[serde(default)]
    timers: TimersSection,
    #[serde(default)]
    snapshot: SnapshotSection,
    #[serde(default)]
    lease: LeaseSection,
    #[serde(default)]
    client: ClientSection,
    /// The directory relative paths in the file are resolved against.
    #[serde(skip)]
    base: PathBuf,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ListenSection {
    peer: Option<String>,
    client: Option<String>,
    metrics: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TlsSection {
    ca_cert: Option<PathBuf>,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PeerEntry {
    id: u32,
    peer: String,
    client: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TimersSection {
    election_timeout_ms: Option<u64>,
    fetch_timeout_ms: Option<u64>,
    fetch_max_wait_ms: Option<u64>,
    request_timeout_ms: Option<u64>,
    write_timeout_ms: Option<u64>,
    shutdown_timeout_ms: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct SnapshotSection {
    after_records: Option<u64>,
    after_bytes: Option<u64>,
    after_secs: Option<u64>,
    log_retention: Option<u64>,
    chunk_bytes: Option<u32>,
}

impl SnapshotSection {
    fn check(&self) -> Result<SnapshotOptions, ConfigError> {
        let d = raft_core::Config::new(raft_core::ReplicaId(1), [raft_core::ReplicaId(1)]);
        let chunk_bytes = self.chunk_bytes.unwrap_or(d.snapshot_chunk_bytes);
        if chunk_bytes == 0 || chunk_bytes > 16 << 20 {
            return Err(bad(
                "snapshot.chunk_bytes",
                format!("{chunk_bytes} is outside 1..=16777216"),
            ));
        }
        Ok(SnapshotOptions {
            after_records: self.after_records.unwrap_or(d.snapshot_after_records),
            after_bytes: self.after_bytes.unwrap_or(d.snapshot_after_bytes),
            after_time: self
                .after_secs
                .map_or(d.snapshot_after_time, Duration::from_secs),
            log_retention: self.log_retention.unwrap_or(d.snapshot_log_retention),
            chunk_bytes,
        })
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct LeaseSection {
    enabled: Option<bool>,
    drift_margin_ms: Option<u64>,
}

impl LeaseSection {
    fn check(&self) -> Result<LeaseOptions, ConfigError> {
        let d = raft_core::Config::new(raft_core::ReplicaId(1), [raft_core::ReplicaId(1)]);
        let drift_margin = match self.drift_margin_ms {
            None => d.lease_drift_margin,
            Some(0) => {
                return Err(bad(
                    "lease.drift_margin_ms",
                    "must be greater than zero: clocks never run at exactly the same rate",
                ))
            }
            Some(v) => Duration::from_millis(v),
        };
        Ok(LeaseOptions {
            enabled: self.enabled.unwrap_or(false),
            drift_margin,
        })
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ClientSection {
    requirepass: Option<String>,
    read_mode: Option<String>,
    bulk_bytes_max: Option<usize>,
    array_len_max: Option<usize>,
    inline_bytes_max: Option<usize>,
    request_bytes_max: Option<usize>,
    connections_max: Option<usize>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    tls_ca: Option<PathBuf>,
}

/// Values from flags and environment variables, applied over the file.
#[derive(Debug, Default, Clone, clap::Args)]
pub struct Overrides {
    /// The cluster id.
    #[arg(long, env = "RAFT_NODE_CLUSTER_ID")]
    pub cluster_id: Option<String>,
    /// This replica's id.
    #[arg(long, env = "RAFT_NODE_REPLICA_ID")]
    pub replica_id: Option<u32>,
    /// The data directory.
    #[arg(long, env = "RAFT_NODE_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// The storage engine: redb or fjall.
    #[arg(long, env = "RAFT_NODE_STORAGE")]
    pub storage: Option<String>,
    /// The QUIC peer listen address.
    #[arg(long, env = "RAFT_NODE_LISTEN_PEER")]
    pub listen_peer: Option<String>,
    /// The RESP client listen address.
    #[arg(long, env = "RAFT_NODE_LISTEN_CLIENT")]
    pub listen_client: Option<String>,
    /// The Prometheus metrics listen address (HTTP, GET /metrics); off when unset.
    #[arg(long, env = "RAFT_NODE_LISTEN_METRICS")]
    pub listen_metrics: Option<String>,
    /// Voters as `ID=PEER_ADDR[/CLIENT_ADDR],...` (replaces the file's list).
    #[arg(long, env = "RAFT_NODE_VOTERS")]
    pub voters: Option<String>,
    /// Observers as `ID=PEER_ADDR[/CLIENT_ADDR],...` (replaces the file's list).
    #[arg(long, env = "RAFT_NODE_OBSERVERS")]
    pub observers: Option<String>,
    /// The cluster CA certificate (PEM).
    #[arg(long, env = "RAFT_NODE_TLS_CA_CERT")]
    pub tls_ca_cert: Option<PathBuf>,
    /// This node's certificate (PEM).
    #[arg(long, env = "RAFT_NODE_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,
    /// This node's private key (PEM).
    #[arg(long, env = "RAFT_NODE_TLS_KEY")]
    pub tls_key: Option<PathBuf>,
    /// TLS on the client port: the server certificate (PEM); needs --client-tls-key.
    #[arg(long, env = "RAFT_NODE_CLIENT_TLS_CERT")]
    pub client_tls_cert: Option<PathBuf>,
    /// TLS on the client port: the private key (PEM).
    #[arg(long, env = "RAFT_NODE_CLIENT_TLS_KEY")]
    pub client_tls_key: Option<PathBuf>,
    /// TLS on the client port: require client certificates signed by this CA (PEM).
    #[arg(long, env = "RAFT_NODE_CLIENT_TLS_CA")]
    pub client_tls_ca: Option<PathBuf>,
    /// The client password (as Redis's requirepass).
    #[arg(long, env = "RAFT_NODE_REQUIREPASS", hide_env_values = true)]
    pub requirepass: Option<String>,
    /// The tracing filter (RUST_LOG wins when set).
    #[arg(long, env = "RAFT_NODE_LOG")]
    pub log: Option<String>,
}

impl FileConfig {
    /// Reads and parses a TOML file.
    pub fn load(path: &Path) -> Result<FileConfig, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| bad("--config", format!("cannot read {}: {e}", path.display())))?;
        let mut file = FileConfig::parse(&text)
            .map_err(|e| bad(e.field, format!("{} (in {})", e.problem, path.display())))?;
        file.base = path.parent().map(Path::to_path_buf).unwrap_or_default();
        Ok(file)
    }

    /// Parses TOML text; relative paths stay relative to the working directory.
    pub fn parse(text: &str) -> Result<FileConfig, ConfigError> {
        toml::from_str(text).map_err(|e| {
            // toml names unknown and missing keys in backticks; for a bad value the key is the
            // one on the line the error points at.
            let msg = e.message();
            let names_key = ["unknown field", "missing field", "duplicate"]
                .iter()
                .any(|p| msg.starts_with(p));
            let named = msg
                .split('`')
                .nth(1)
                .filter(|_| names_key)
                .map(str::to_string);
            let at = e.span().and_then(|span| key_at(text, span.start));
            let field = named.or(at).unwrap_or_else(|| "(file)".into());
            bad(field, e.message().trim().replace('\n', " "))
        })
    }

    /// Applies flags and environment variables over the file's values.
    pub fn apply(&mut self, o: &Overrides) -> Result<(), ConfigError> {
        fn set<T: Clone>(dst: &mut Option<T>, src: &Option<T>) {
            if let Some(v) = src {
                *dst = Some(v.clone());
            }
        }
        set(&mut self.cluster_id, &o.cluster_id);
        set(&mut self.replica_id, &o.replica_id);
        set(&mut self.storage, &o.storage);
        set(&mut self.log, &o.log);
        set(&mut self.listen.peer, &o.listen_peer);
        set(&mut self.listen.client, &o.listen_client);
        set(&mut self.listen.metrics, &o.listen_metrics);
        set(&mut self.client.requirepass, &o.requirepass);
        // Paths given as flags are relative to the working directory: made absolute here so
        // that resolving against the file's directory leaves them alone.
        let cwd = std::env::current_dir().unwrap_or_default();
        let abs = |p: &Option<PathBuf>| p.as_ref().map(|p| cwd.join(p));
        set(&mut self.data_dir, &abs(&o.data_dir));
        set(&mut self.tls.ca_cert, &abs(&o.tls_ca_cert));
        set(&mut self.tls.cert, &abs(&o.tls_cert));
        set(&mut self.tls.key, &abs(&o.tls_key));
        set(&mut self.client.tls_cert, &abs(&o.client_tls_cert));
        set(&mut self.client.tls_key, &abs(&o.client_tls_key));
        set(&mut self.client.tls_ca, &abs(&o.client_tls_ca));
        if let Some(v) = &o.voters {
            self.voters = parse_peer_list("--voters", v)?;
        }
        if let Some(v) = &o.observers {
            self.observers = parse_peer_list("--observers", v)?;
        }
        Ok(())
    }

    fn path(&self, p: &Path) -> PathBuf {
        self.base.join(p)
    }

    /// Checks everything and produces the node's configuration.
    pub fn check(self) -> Result<NodeConfig, ConfigError> {
        let cluster_id = self
            .cluster_id
            .clone()
            .ok_or_else(|| bad("cluster_id", "required"))?;
        check_cluster_id(&cluster_id)?;
        let id = ReplicaId(
            self.replica_id
                .ok_or_else(|| bad("replica_id", "required"))?,
        );
        let voters = peer_map("voters", &self.voters)?;
        let observers = peer_map("observers", &self.observers)?;
        if voters.is_empty() {
            return Err(bad("voters", "at least one voter is required"));
        }
        if let Some(both) = voters.keys().find(|v| observers.contains_key(v)) {
            return Err(bad(
                "observers",
                format!("replica {} is also a voter", both.0),
            ));
        }
        let me = voters
            .get(&id)
            .or_else(|| observers.get(&id))
            .ok_or_else(|| {
                bad(
                    "replica_id",
                    format!(
                        "replica {} is neither among the voters nor the observers",
                        id.0
                    ),
                )
            })?;
        let listen_peer = match &self.listen.peer {
            Some(a) => resolve("listen.peer", a)?,
            None => me.peer,
        };
        let listen_client = match (&self.listen.client, &me.client) {
            (Some(a), _) | (None, Some(a)) => resolve("listen.client", a)?,
            (None, None) => {
                return Err(bad(
                    "listen.client",
                    "required (or a `client` address in this replica's entry)",
                ))
            }
        };
        let listen_metrics = match &self.listen.metrics {
            Some(a) => Some(resolve("listen.metrics", a)?),
            None => None,
        };
        let data_dir = self.path(
            self.data_dir
                .as_deref()
                .ok_or_else(|| bad("data_dir", "required"))?,
        );
        let storage = match &self.storage {
            Some(s) => StorageKind::parse(s).map_err(|p| bad("storage", p))?,
            None => StorageKind::default_compiled(),
        };
        let tls_path = |field: &str, p: &Option<PathBuf>| {
            p.as_deref()
                .map(|p| self.path(p))
                .ok_or_else(|| bad(format!("tls.{field}"), "required"))
        };
        let tls = TlsPaths {
            ca_cert: tls_path("ca_cert", &self.tls.ca_cert)?,
            cert: tls_path("cert", &self.tls.cert)?,
            key: tls_path("key", &self.tls.key)?,
        };
        let cfg = NodeConfig {
            cluster_id,
            id,
            data_dir,
            storage,
            log: self.log.clone(),
            listen_peer,
            listen_client,
            listen_metrics,
            tls,
            voters,
            observers,
            timers: self.timers.check()?,
            snapshot: self.snapshot.check()?,
            lease: self.lease.check()?,
            client: self.client.check(|p| self.path(p))?,
        };
        if cfg.client.read_mode == ReadMode::Lease && !cfg.lease.enabled {
            return Err(bad(
                "client.read_mode",
                "\"lease\" needs lease.enabled = true (read the clock assumptions first)",
            ));
        }
        cfg.raft_config()?;
        Ok(cfg)
    }
}

impl TimersSection {
    fn check(&self) -> Result<Timers, ConfigError> {
        let ms = |field: &str, v: Option<u64>, default: u64| -> Result<Duration, ConfigError> {
            let v = v.unwrap_or(default);
            if v == 0 || v > 3_600_000 {
                return Err(bad(
                    format!("timers.{field}"),
                    format!("{v} is outside 1..=3600000 milliseconds"),
                ));
            }
            Ok(Duration::from_millis(v))
        };
        let t = Timers {
            election_timeout: ms("election_timeout_ms", self.election_timeout_ms, 1000)?,
            fetch_timeout: ms("fetch_timeout_ms", self.fetch_timeout_ms, 2000)?,
            fetch_max_wait: ms("fetch_max_wait_ms", self.fetch_max_wait_ms, 500)?,
            request_timeout: ms("request_timeout_ms", self.request_timeout_ms, 2000)?,
            write_timeout: ms("write_timeout_ms", self.write_timeout_ms, 5000)?,
            shutdown_timeout: ms("shutdown_timeout_ms", self.shutdown_timeout_ms, 2000)?,
        };
        if t.fetch_timeout < t.fetch_max_wait * 2 {
            return Err(bad(
                "timers.fetch_timeout_ms",
                format!(
                    "{} ms must be at least twice timers.fetch_max_wait_ms ({} ms)",
                    t.fetch_timeout.as_millis(),
                    t.fetch_max_wait.as_millis()
                ),
            ));
        }
        Ok(t)
    }
}

impl ClientSection {
    fn check(&self, path: impl Fn(&Path) -> PathBuf) -> Result<ClientOptions, ConfigError> {
        let tls = match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Some(ClientTls {
                cert: path(cert),
                key: path(key),
                ca: self.tls_ca.as_deref().map(&path),
            }),
            (Some(_), None) => return Err(bad("client.tls_key", "required with client.tls_cert")),
            (None, Some(_)) => return Err(bad("client.tls_cert", "required with client.tls_key")),
            (None, None) if self.tls_ca.is_some() => {
                return Err(bad(
                    "client.tls_ca",
                    "needs client.tls_cert and client.tls_key (client certificates need TLS)",
                ))
            }
            (None, None) => None,
        };
        let d = Limits::default();
        let positive = |field: &str, v: Option<usize>, default: usize| match v {
            Some(0) => Err(bad(format!("client.{field}"), "must be greater than zero")),
            Some(v) => Ok(v),
            None => Ok(default),
        };
        let read_mode = match &self.read_mode {
            None => ReadMode::Linearizable,
            Some(m) => ReadMode::parse(m).ok_or_else(|| {
                bad(
                    "client.read_mode",
                    format!("unknown mode {m:?}; expected linearizable, lease or sequential"),
                )
            })?,
        };
        if self.requirepass.as_deref() == Some("") {
            return Err(bad(
                "client.requirepass",
                "must not be empty (omit it instead)",
            ));
        }
        Ok(ClientOptions {
            tls,
            requirepass: self.requirepass.clone(),
            read_mode,
            limits: Limits {
                bulk_bytes_max: positive("bulk_bytes_max", self.bulk_bytes_max, d.bulk_bytes_max)?,
                array_len_max: positive("array_len_max", self.array_len_max, d.array_len_max)?,
                inline_bytes_max: positive(
                    "inline_bytes_max",
                    self.inline_bytes_max,
                    d.inline_bytes_max,
                )?,
                request_bytes_max: positive(
                    "request_bytes_max",
                    self.request_bytes_max,
                    d.request_bytes_max,
                )?,
            },
            connections_max: positive("connections_max", self.connections_max, 10_000)?,
        })
    }
}

/// The dotted key written on the line holding byte `offset`, with its table header.
fn key_at(text: &str, offset: usize) -> Option<String> {
    let before = text.get(..offset)?;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let line = text[line_start..].lines().next()?;
    let key = line.split_once('=')?.0.trim().to_string();
    let table = before[..line_start]
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| l.starts_with('['))
        .map(|l| l.trim_matches(|c| c == '[' || c == ']').trim().to_string());
    Some(match table {
        Some(t) => format!("{t}.{key}"),
        None => key,
    })
}

fn check_cluster_id(id: &str) -> Result<(), ConfigError> {
    let ok = !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(bad(
            "cluster_id",
            format!("{id:?} must be 1 to 64 characters of letters, digits, '-', '_' or '.'"),
        ))
    }
}

fn resolve(field: &str, addr: &str) -> Result<SocketAddr, ConfigError> {
    if let Ok(a) = addr.parse() {
        return Ok(a);
    }
    addr.to_socket_addrs()
        .ok()
        .and_then(|mut it| it.next())
        .ok_or_else(|| bad(field, format!("{addr:?} is not a host:port address")))
}

fn peer_map(
    field: &str,
    entries: &[PeerEntry],
) -> Result<BTreeMap<ReplicaId, PeerAddrs>, ConfigError> {
    let mut map = BTreeMap::new();
    for (i, e) in entries.iter().enumerate() {
        let peer = resolve(&format!("{field}[{i}].peer"), &e.peer)?;
        if let Some(c) = &e.client {
            resolve(&format!("{field}[{i}].client"), c)?;
        }
        let addrs = PeerAddrs {
            peer,
            client: e.client.clone(),
        };
        if map.insert(ReplicaId(e.id), addrs).is_some() {
            return Err(bad(
                format!("{field}[{i}].id"),
                format!("replica {} is listed twice", e.id),
            ));
        }
    }
    Ok(map)
}

fn parse_peer_list(flag: &str, list: &str) -> Result<Vec<PeerEntry>, ConfigError> {
    list.split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|item| {
            let (id, addrs) = item
                .trim()
                .split_once('=')
                .ok_or_else(|| bad(flag, format!("{item:?} is not ID=PEER_ADDR[/CLIENT_ADDR]")))?;
            let id = id
                .parse()
                .map_err(|_| bad(flag, format!("{id:?} is not a replica id")))?;
            let (peer, client) = match addrs.split_once('/') {
                Some((p, c)) => (p, Some(c.to_string())),
                None => (addrs, None),
            };
            Ok(PeerEntry {
                id,
                peer: peer.to_string(),
                client,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
        cluster_id = "c1"
        replica_id = 2
        data_dir = "d"
        [tls]
        ca_cert = "ca.pem"
        cert = "n.pem"
        key = "n.key"
        [[voters]]
        id = 1
        peer = "127.0.0.1:7101"
        client = "127.0.0.1:7001"
        [[voters]]
        id = 2
        peer = "127.0.0.1:7102"
        client = "127.0.0.1:7002"
    "#;

    #[test]
    fn a_complete_file_gives_defaults_for_the_rest() {
        let cfg = FileConfig::parse(GOOD).unwrap().check().unwrap();
        assert_eq!(cfg.id, ReplicaId(2));
        assert_eq!(cfg.listen_client, "127.0.0.1:7002".parse().unwrap());
        assert_eq!(cfg.listen_peer, "127.0.0.1:7102".parse().unwrap());
        assert_eq!(cfg.peers().len(), 1);
        assert_eq!(cfg.client.read_mode, ReadMode::Linearizable);
        assert_eq!(
            cfg.client_addr_of(ReplicaId(1)).as_deref(),
            Some("127.0.0.1:7001")
        );
    }

    fn field_of(text: &str) -> String {
        match FileConfig::parse(text).and_then(FileConfig::check) {
            Ok(_) => panic!("accepted: {text}"),
            Err(e) => e.field,
        }
    }

    #[test]
    fn each_bad_field_is_named() {
        assert_eq!(
            field_of(&GOOD.replace("replica_id = 2", "replica_id = 9")),
            "replica_id"
        );
        assert_eq!(
            field_of(&GOOD.replace("replica_id = 2", "replica_idd = 2")),
            "replica_idd"
        );
        assert_eq!(field_of(&GOOD.replace("\"c1\"", "\"a b\"")), "cluster_id");
        assert_eq!(
            field_of(&GOOD.replace("127.0.0.1:7101", "nowhere")),
            "voters[0].peer"
        );
        assert_eq!(field_of(&GOOD.replace("id = 1", "id = 2")), "voters[1].id");
        assert_eq!(field_of(&GOOD.replace("key = \"n.key\"", "")), "tls.key");
        assert_eq!(
            field_of(&format!("{GOOD}\n[timers]\nfetch_timeout_ms = 100\n")),
            "timers.fetch_timeout_ms"
        );
        assert_eq!(
            field_of(&format!("{GOOD}\n[client]\nread_mode = \"fast\"\n")),
            "client.read_mode"
        );
        assert_eq!(field_of(&format!("storage = \"tape\"\n{GOOD}")), "storage");
        assert_eq!(
            field_of(&GOOD.replace("replica_id = 2", "replica_id = \"two\"")),
            "replica_id"
        );
        assert_eq!(
            field_of(&format!("{GOOD}\n[timers]\nwrite_timeout_ms = -1\n")),
            "timers.write_timeout_ms"
        );
    }

    #[test]
    fn leases_are_off_unless_enabled_and_their_margin_is_checked() {
        let off = FileConfig::parse(GOOD).unwrap().check().unwrap();
        assert!(!off.lease.enabled);
        assert!(!off.raft_config().unwrap().lease_reads);
        let on = FileConfig::parse(&format!(
            "{GOOD}\n[lease]\nenabled = true\ndrift_margin_ms = 300\n[client]\nread_mode = \"lease\"\n"
        ))
        .unwrap()
        .check()
        .unwrap();
        let raft = on.raft_config().unwrap();
        assert!(raft.lease_reads);
        assert_eq!(raft.lease_drift_margin, Duration::from_millis(300));
        assert_eq!(on.client.read_mode, ReadMode::Lease);
        assert_eq!(
            field_of(&format!("{GOOD}\n[client]\nread_mode = \"lease\"\n")),
            "client.read_mode",
            "lease mode without leases is refused at start"
        );
        assert_eq!(
            field_of(&format!(
                "{GOOD}\n[lease]\nenabled = true\ndrift_margin_ms = 2000\n"
            )),
            "lease.drift_margin_ms",
            "a margin as long as the fetch timeout leaves no lease"
        );
        assert_eq!(
            field_of(&format!("{GOOD}\n[lease]\ndrift_margin_ms = 0\n")),
            "lease.drift_margin_ms"
        );
        assert_eq!(
            field_of(&format!("{GOOD}\n[lease]\nenable = true\n")),
            "enable"
        );
    }

    #[test]
    fn flags_override_the_file() {
        let mut f = FileConfig::parse(GOOD).unwrap();
        f.apply(&Overrides {
            replica_id: Some(3),
            voters: Some("1=127.0.0.1:1/127.0.0.1:2,3=127.0.0.1:3".into()),
            listen_client: Some("127.0.0.1:9".into()),
            ..Overrides::default()
        })
        .unwrap();
        let cfg = f.check().unwrap();
        assert_eq!(cfg.id, ReplicaId(3));
        assert_eq!(cfg.voters.len(), 2);
        assert_eq!(cfg.listen_client.port(), 9);
        assert_eq!(cfg.listen_metrics, None);
        let mut f = FileConfig::parse(GOOD).unwrap();
        f.apply(&Overrides {
            listen_metrics: Some("127.0.0.1:9101".into()),
            ..Overrides::default()
        })
        .unwrap();
        assert_eq!(
            f.check().unwrap().listen_metrics,
            Some("127.0.0.1:9101".parse().unwrap())
        );
        let file = format!("{GOOD}\n[listen]\nmetrics = \"nowhere\"\n");
        assert_eq!(field_of(&file), "listen.metrics");
    }

    #[test]
    fn client_tls_needs_a_certificate_and_a_key() {
        let tls = |lines: &str| format!("{GOOD}\n[client]\n{lines}\n");
        assert_eq!(field_of(&tls("tls_cert = \"c.pem\"")), "client.tls_key");
        assert_eq!(field_of(&tls("tls_key = \"c.key\"")), "client.tls_cert");
        assert_eq!(field_of(&tls("tls_ca = \"ca.pem\"")), "client.tls_ca");
        let mut f = FileConfig::parse(&tls("tls_cert = \"c.pem\"\ntls_key = \"c.key\"")).unwrap();
        f.base = PathBuf::from("/etc/kv");
        let cfg = f.check().unwrap();
        let t = cfg.client.tls.unwrap();
        assert_eq!(t.cert, PathBuf::from("/etc/kv/c.pem"));
        assert_eq!(t.ca, None);
        assert_eq!(
            FileConfig::parse(GOOD).unwrap().check().unwrap().client.tls,
            None
        );
    }
}
