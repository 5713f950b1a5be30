//! Assembly of one replica: identity check, storage, QUIC transport, the raft-core driver with
//! the key-value state machine, and the RESP server on the client port.

use std::net::SocketAddr;
use std::sync::Arc;

use raft_core::driver::{DriverOptions, Node, Parts};
use raft_core::io::{ElectionStore, LogStore};
use raft_core::ReplicaId;
use raft_transport_quic::{QuicConfig, QuicTransport, TlsMaterial};
use tokio::net::TcpListener;

use crate::config::{ConfigError, NodeConfig, StorageKind};
use crate::http::{self, HttpHandle};
use crate::identity::{self, IdentityError};
use crate::kv::Kv;
use crate::leader_clock::{Stamper, Ticker};
use crate::metrics::{NodeMetrics, Scrape, TimedLog, TimedTransport};
use crate::server::{Server, ServerHandle};

/// Why a node did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The data directory belongs to another node or cluster, or is unusable.
    #[error(transparent)]
    Identity(#[from] IdentityError),
    /// A TLS file is missing or unreadable.
    #[error("invalid configuration: `{field}`: cannot read {path}: {reason}")]
    Tls {
        /// The config field naming the file.
        field: &'static str,
        /// The path.
        path: String,
        /// Why.
        reason: String,
    },
    /// The storage could not be opened.
    #[error("opening {engine} storage in {dir} failed: {reason}")]
    Storage {
        /// The engine.
        engine: &'static str,
        /// Its directory.
        dir: String,
        /// Why.
        reason: String,
    },
    /// A listen address could not be bound.
    #[error("invalid configuration: `{field}`: cannot listen on {addr}: {reason}")]
    Listen {
        /// The config field.
        field: &'static str,
        /// The address.
        addr: SocketAddr,
        /// Why.
        reason: String,
    },
    /// The client TLS material is unusable.
    #[error("invalid configuration: `{field}`: {reason}")]
    ClientTls {
        /// The config field naming the file.
        field: &'static str,
        /// Why.
        reason: String,
    },
    /// The transport refused its setup (often the TLS material).
    #[error("starting the QUIC transport failed: {0}")]
    Transport(String),
    /// The driver did not start.
    #[error("starting the replica failed: {0}")]
    Driver(String),
}

/// A started replica.
pub struct Running {
    /// Its id.
    pub id: ReplicaId,
    /// The driver handle.
    pub node: Node,
    /// Where clients connect.
    pub client_addr: SocketAddr,
    /// Where peers connect.
    pub peer_addr: SocketAddr,
    /// Where the metrics endpoint listens, if enabled.
    pub metrics_addr: Option<SocketAddr>,
    server: ServerHandle,
    http: Option<HttpHandle>,
}

impl Running {
    /// Graceful stop: stop taking requests (in-flight ones finish or fail), then resign (a leader
    /// hands over with EndQuorumEpoch) and stop the driver, which closes the transport; the
    /// storage is closed when the driver's tasks release it.
    pub async fn shutdown(self) {
        self.server.stop().await;
        self.node.shutdown().await;
        if let Some(http) = self.http {
            http.stop().await;
        }
    }
}

fn read_pem(field: &'static str, path: &std::path::Path) -> Result<String, StartError> {
    std::fs::read_to_string(path).map_err(|e| StartError::Tls {
        field,
        path: path.display().to_string(),
        reason: e.to_string(),
    })
}

/// The TLS acceptor of the client port, from PEM files: the ring provider, TLS 1.2 and 1.3,
/// and client certificates required when a client CA is configured.
fn client_tls(tls: &crate::config::ClientTls) -> Result<tokio_rustls::TlsAcceptor, StartError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let bad = |field: &'static str, reason: String| StartError::ClientTls { field, reason };
    let cert_pem = read_pem("client.tls_cert", &tls.cert)?;
    let key_pem = read_pem("client.tls_key", &tls.key)?;
    let chain = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad("client.tls_cert", format!("{}: {e}", tls.cert.display())))?;
    if chain.is_empty() {
        let reason = format!("no certificate in {}", tls.cert.display());
        return Err(bad("client.tls_cert", reason));
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
        .map_err(|e| bad("client.tls_key", format!("{}: {e}", tls.key.display())))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| bad("client.tls_cert", e.to_string()))?;
    let builder = match &tls.ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let ca_pem = read_pem("client.tls_ca", ca)?;
            let mut roots = rustls::RootCertStore::empty();
            for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
                let c = c.map_err(|e| bad("client.tls_ca", format!("{}: {e}", ca.display())))?;
                roots
                    .add(c)
                    .map_err(|e| bad("client.tls_ca", format!("{}: {e}", ca.display())))?;
            }
            if roots.is_empty() {
                return Err(bad(
                    "client.tls_ca",
                    format!("no certificate in {}", ca.display()),
                ));
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .map_err(|e| bad("client.tls_ca", e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let config = builder.with_single_cert(chain, key).map_err(|e| {
        bad(
            "client.tls_key",
            format!("does not fit the certificate: {e}"),
        )
    })?;
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

type Stores = (
    Arc<dyn LogStore>,
    Arc<dyn ElectionStore>,
    Arc<dyn raft_core::io::SnapshotStore>,
);

pub(crate) fn open_storage(cfg: &NodeConfig) -> Result<Stores, StartError> {
    let dir = cfg.data_dir.join(cfg.storage.name());
    let fail = |reason: String| StartError::Storage {
        engine: cfg.storage.name(),
        dir: dir.display().to_string(),
        reason,
    };
    let snapshots = raft_core::snapshot_dir::SnapshotDir::open(dir.join("snapshots"))
        .map_err(|e| fail(e.to_string()))?;
    let snapshots = Arc::new(snapshots);
    match cfg.storage {
        #[cfg(feature = "storage-redb")]
        StorageKind::Redb => {
            let opts = raft_storage_redb::Options::default();
            let store = raft_storage_redb::RedbStore::open(&dir, &cfg.cluster_id, opts)
                .map_err(|e| fail(e.to_string()))?;
            let store = Arc::new(store);
            Ok((store.clone(), store, snapshots))
        }
        #[cfg(feature = "storage-fjall")]
        StorageKind::Fjall => {
            let opts = raft_storage_fjall::Options::default();
            let store = raft_storage_fjall::FjallStore::open(&dir, &cfg.cluster_id, opts)
                .map_err(|e| fail(e.to_string()))?;
            let store = Arc::new(store);
            Ok((store.clone(), store, snapshots))
        }
        #[allow(unreachable_patterns)]
        _ => Err(fail("this engine is not compiled into this build".into())),
    }
}

/// Starts a replica from a checked configuration.
pub async fn start(cfg: NodeConfig) -> Result<Running, StartError> {
    let raft_cfg = cfg.raft_config()?;
    let tls = TlsMaterial {
        ca_cert_pem: read_pem("tls.ca_cert", &cfg.tls.ca_cert)?,
        cert_pem: read_pem("tls.cert", &cfg.tls.cert)?,
        key_pem: read_pem("tls.key", &cfg.tls.key)?,
    };
    let acceptor = cfg.client.tls.as_ref().map(client_tls).transpose()?;
    // The client port first: a port in use fails before anything is touched on disk.
    let listener = TcpListener::bind(cfg.listen_client)
        .await
        .map_err(|e| StartError::Listen {
            field: "listen.client",
            addr: cfg.listen_client,
            reason: e.to_string(),
        })?;
    let client_addr = listener.local_addr().unwrap_or(cfg.listen_client);
    let metrics_listener = match cfg.listen_metrics {
        Some(addr) => Some(
            TcpListener::bind(addr)
                .await
                .map_err(|e| StartError::Listen {
                    field: "listen.metrics",
                    addr,
                    reason: e.to_string(),
                })?,
        ),
        None => None,
    };
    let directory = identity::check_or_create(&cfg)?;
    let mut raft_cfg = raft_cfg.into_inner();
    raft_cfg.directory = Some(directory);
    let raft_cfg = raft_cfg
        .validate()
        .map_err(|e| StartError::Driver(format!("configuration: {e}")))?;
    tracing::info!(replica = %cfg.id, %directory, "data directory");
    let for_open = cfg.clone();
    let (log, election, snapshots) = tokio::task::spawn_blocking(move || open_storage(&for_open))
        .await
        .map_err(|e| StartError::Driver(format!("storage open task failed: {e}")))??;
    let socket = std::net::UdpSocket::bind(cfg.listen_peer).map_err(|e| StartError::Listen {
        field: "listen.peer",
        addr: cfg.listen_peer,
        reason: e.to_string(),
    })?;
    let quic = QuicConfig::new(cfg.id, cfg.listen_peer, cfg.peers(), tls);
    let transport = QuicTransport::with_socket(quic, socket)
        .map_err(|e| StartError::Transport(e.to_string()))?;
    let peer_addr = transport.local_addr();
    let transport = Arc::new(transport);
    let transport_handle = transport.clone();
    let metrics = Arc::new(NodeMetrics::new(Some(transport.clone())));
    let kv = Arc::new(Kv::new());
    let stamper = Arc::new(Stamper::new(
        kv.clone(),
        cfg.expiry.clock_jump_max,
        metrics.clock_jumps_clamped.clone(),
    ));
    let options = DriverOptions {
        stamp: Some(stamper.clone()),
        seed: seed(cfg.id),
        shutdown_timeout: cfg.timers.shutdown_timeout,
        // A forwarded write waits for the leader as long as a client waits for a write.
        forward_timeout: cfg.timers.write_timeout,
        ..DriverOptions::default()
    };
    let parts = Parts {
        log: Arc::new(TimedLog::new(log, metrics.clone())),
        election,
        transport: Arc::new(TimedTransport::new(transport, metrics.clone())),
        state_machine: kv.clone(),
        snapshots,
    };
    let node = Node::start(raft_cfg, parts, options)
        .await
        .map_err(|e| StartError::Driver(e.to_string()))?;
    metrics.attach(node.clone());
    warn_if_voters_differ(&cfg, &node).await;
    Ticker::spawn(node.clone(), kv.clone(), stamper.clone());
    let id = cfg.id;
    let metrics_addr = metrics_listener.as_ref().map(|l| {
        l.local_addr()
            .unwrap_or_else(|_| cfg.listen_metrics.unwrap_or(client_addr))
    });
    tracing::info!(replica = %id, %client_addr, %peer_addr, ?metrics_addr, storage = cfg.storage.name(), "node started");
    let http = metrics_listener.map(|l| {
        let scrape = Scrape {
            metrics: metrics.clone(),
            node: node.clone(),
            kv: kv.clone(),
        };
        http::spawn(l, scrape)
    });
    let server = Arc::new(
        Server::new(node.clone(), kv, Arc::new(cfg), client_addr, metrics)
            .with_transport(transport_handle),
    );
    let server = server.spawn(listener, acceptor);
    Ok(Running {
        id,
        node,
        client_addr,
        peer_addr,
        metrics_addr,
        server,
        http,
    })
}

/// The configuration's `[[voters]]` are read when a directory is formatted (and are a new
/// node's contacts); afterwards the voter set in force comes from the storage and the log. A
/// file that says otherwise is stale or edited: one warning, so that nobody mistakes an edit
/// of `[[voters]]` for a membership change.
async fn warn_if_voters_differ(cfg: &NodeConfig, node: &Node) {
    let Some(st) = node.status().await else {
        return;
    };
    let static_voters: Vec<u32> = st
        .voter_set
        .iter()
        .filter(|(_, v)| v.directory.is_none())
        .map(|(id, _)| id.0)
        .collect();
    if !static_voters.is_empty() {
        tracing::warn!(
            ?static_voters,
            "voters without a directory id (a data directory from before formatting): until \
             the leader binds each to its directory (it does so once that voter fetches and \
             has caught up; RAFT VOTERS shows it), a static voter whose disk is emptied still \
             counts as that voter for the others: keep every disk intact until then"
        );
    }
    let in_force: Vec<u32> = st.voter_set.ids().map(|r| r.0).collect();
    let file: Vec<u32> = cfg.voters.keys().map(|r| r.0).collect();
    let observer = !st.voter_set.contains_id(cfg.id) && cfg.voters.contains_key(&cfg.id);
    if in_force != file && !observer {
        tracing::warn!(
            ?file,
            ?in_force,
            "the configuration's [[voters]] differ from the voter set in force, which comes from \
             this node's storage and log and wins: [[voters]] is read at format only (change \
             voters with RAFT ADD-VOTER / REMOVE-VOTER)"
        );
    } else if observer {
        tracing::warn!(
            replica = cfg.id.0,
            "the configuration names this node a voter, but its storage does not: it runs as an \
             observer (a lost disk, or a directory that was never formatted) until RAFT \
             ADD-VOTER adds it with its directory"
        );
    }
}

/// A per-process, per-replica seed for the protocol's election timeouts.
fn seed(id: ReplicaId) -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    t ^ (u64::from(id.0) << 32) ^ u64::from(std::process::id())
}
