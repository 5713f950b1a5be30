//! Validation: every field of the layered file checked, defaults filled in, into a
//! [`NodeConfig`] (whose `raft_config` maps it onto raft-core's `Config`).

use std::collections::BTreeMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::Duration;

use raft_core::{DirectoryId, ReplicaId};

use super::file::{
    ClientSection, FileConfig, LeaseSection, PeerEntry, SnapshotSection, TimersSection,
};
use super::{
    bad, ClientOptions, ClientTls, ConfigError, ExpiryOptions, LeaseOptions, NodeConfig, PeerAddrs,
    ReadMode, SnapshotOptions, StorageKind, Timers, TlsPaths,
};
use crate::resp::Limits;

impl FileConfig {
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
        if id.0 == 0 {
            return Err(bad(
                "replica_id",
                "replica ids start at 1 (0 stands for \"none\" in status and metrics)",
            ));
        }
        if let Some(filter) = &self.log {
            if let Err(e) = tracing_subscriber::EnvFilter::try_new(filter) {
                return Err(bad(
                    "log",
                    format!("{filter:?} is not a tracing filter: {e}"),
                ));
            }
        }
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
            expiry: ExpiryOptions {
                clock_jump_max: self
                    .expiry
                    .clock_jump_max_ms
                    .map_or(ExpiryOptions::CLOCK_JUMP_MAX_DEFAULT, Duration::from_millis),
            },
            client: self.client.check(|p| self.path(p))?,
            maxmemory: self.maxmemory.unwrap_or(0),
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
        // A value longer than a log record can hold could be read but never written.
        let record_max = raft_core::Config::new(ReplicaId(1), [ReplicaId(1)]).payload_bytes_max;
        if let Some(n) = self.bulk_bytes_max.filter(|n| *n > record_max as usize) {
            return Err(bad(
                "client.bulk_bytes_max",
                format!("{n} exceeds the {record_max} bytes a replicated record can carry"),
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
            output_buffer_bytes_max: match self.output_buffer_bytes_max {
                None => ClientOptions::OUTPUT_BUFFER_BYTES_DEFAULT,
                Some(n) if n > 0 && n < ClientOptions::OUTPUT_BUFFER_BYTES_MIN => {
                    return Err(bad(
                        "client.output_buffer_bytes_max",
                        format!(
                            "{n} is below {} bytes (0: no limit); ordinary replies would close \
                             connections",
                            ClientOptions::OUTPUT_BUFFER_BYTES_MIN
                        ),
                    ))
                }
                Some(n) => n,
            },
            unauthenticated_request_bytes_max: positive(
                "unauthenticated_request_bytes_max",
                self.unauthenticated_request_bytes_max,
                ClientOptions::UNAUTHENTICATED_REQUEST_BYTES_DEFAULT,
            )?,
        })
    }
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
        if e.id == 0 {
            return Err(bad(
                format!("{field}[{i}].id"),
                "replica ids start at 1 (0 stands for \"none\" in status and metrics)",
            ));
        }
        let peer = resolve(&format!("{field}[{i}].peer"), &e.peer)?;
        if let Some(c) = &e.client {
            resolve(&format!("{field}[{i}].client"), c)?;
        }
        let directory = match &e.directory {
            Some(text) => Some(text.parse::<DirectoryId>().map_err(|err| {
                bad(
                    format!("{field}[{i}].directory"),
                    format!("{text:?} is not a directory id (a UUID): {err}"),
                )
            })?),
            None => None,
        };
        let addrs = PeerAddrs {
            peer,
            client: e.client.clone(),
            directory,
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
