//! The node's configuration: a TOML file, then command-line flags and environment variables on
//! top of it, checked into a [`NodeConfig`] before anything starts.
//!
//! Every refusal is a [`ConfigError`] naming the field and the problem. Relative paths in a file
//! are relative to the file's directory; on the command line, to the working directory.
//!
//! Layers, one file each: `file` (the TOML format, [`FileConfig`]), `overrides` (flags and
//! environment, [`Overrides`]), `check` (validation into a [`NodeConfig`]); this file holds the
//! checked types and [`NodeConfig::raft_config`], the mapping onto raft-core's `Config`.
//!
//! ```toml
//! cluster_id = "prod-kv"
//! replica_id = 1
//! data_dir = "data/node1"
//! storage = "fjall"           # or "redb"
//! log = "info"                # tracing filter; RUST_LOG wins when set
//! maxmemory = 0               # the map's estimated bytes where writes that add data stop
//!                             # (0: no limit)
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
//! [expiry]                    # optional
//! clock_jump_max_ms = 5000    # how far a leader's stamp may run ahead (0: no bound)
//!
//! [client]                    # all optional
//! requirepass = "secret"
//! read_mode = "linearizable"  # or "lease" (needs lease.enabled), "sequential"
//! bulk_bytes_max = 524288
//! array_len_max = 65536
//! inline_bytes_max = 65536
//! request_bytes_max = 1048576
//! connections_max = 10000
//! unauthenticated_request_bytes_max = 4096 # one request's bytes before AUTH (with a password)
//! output_buffer_bytes_max = 67108864 # replies waiting for one client (0: no limit)
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
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::resp::Limits;
use raft_core::ReplicaId;

mod check;
mod file;
mod joined;
mod overrides;
#[cfg(test)]
mod tests;

pub use file::FileConfig;
pub use overrides::Overrides;

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
    /// A voter's directory id, when the file names it: what `raft-node format` writes into
    /// the founding voter set.
    pub directory: Option<raft_core::DirectoryId>,
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

/// The leader's clock (see `leader_clock`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExpiryOptions {
    /// How far ahead of the replicated clock, beyond the time elapsed since it was seen, the
    /// leader may stamp a record (zero: no bound).
    pub clock_jump_max: Duration,
}

impl ExpiryOptions {
    /// The default of `expiry.clock_jump_max_ms`.
    pub const CLOCK_JUMP_MAX_DEFAULT: Duration = Duration::from_secs(5);
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
    /// With a password: most bytes of one request (its arguments together, or its inline
    /// line) before `AUTH` succeeds; at most [`Limits::UNAUTHENTICATED_ARGS_MAX`] arguments.
    pub unauthenticated_request_bytes_max: usize,
    /// Most bytes of replies waiting for one client before its connection is closed (0: no
    /// limit); see `replies`.
    pub output_buffer_bytes_max: usize,
}

impl ClientOptions {
    /// The default of `client.unauthenticated_request_bytes_max`.
    pub const UNAUTHENTICATED_REQUEST_BYTES_DEFAULT: usize = 4096;

    /// The default of `client.output_buffer_bytes_max`: 64 MiB.
    pub const OUTPUT_BUFFER_BYTES_DEFAULT: usize = 64 << 20;

    /// The smallest nonzero `client.output_buffer_bytes_max`: below it ordinary replies
    /// would close connections.
    pub const OUTPUT_BUFFER_BYTES_MIN: usize = 1024;

    /// The request limits of a connection: its own once authenticated (or without a
    /// password), narrower before.
    pub fn limits_for(&self, authed: bool) -> Limits {
        if authed {
            self.limits
        } else {
            self.limits
                .unauthenticated(self.unauthenticated_request_bytes_max)
        }
    }
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
    /// The leader's clock.
    pub expiry: ExpiryOptions,
    /// Client options.
    pub client: ClientOptions,
    /// The map's estimated bytes at or above which commands that add data are refused with
    /// `-OOM` (0: no limit), as Redis's `maxmemory` with `noeviction`.
    pub maxmemory: u64,
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
