//! The flag and environment layer: values given on the command line or in `RAFT_NODE_*`
//! variables, applied over the file's.

use std::path::PathBuf;

use super::file::{FileConfig, PeerEntry};
use super::{bad, ConfigError};

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
    /// With a password: most bytes of one request before AUTH succeeds.
    #[arg(long, env = "RAFT_NODE_UNAUTHENTICATED_REQUEST_BYTES_MAX")]
    pub unauthenticated_request_bytes_max: Option<usize>,
    /// Most bytes of replies waiting for one client before it is disconnected (0: no limit).
    #[arg(long, env = "RAFT_NODE_OUTPUT_BUFFER_BYTES_MAX")]
    pub output_buffer_bytes_max: Option<usize>,
    /// The map's estimated bytes at which writes that add data are refused with -OOM (0: no
    /// limit).
    #[arg(long, env = "RAFT_NODE_MAXMEMORY")]
    pub maxmemory: Option<u64>,
    /// The tracing filter (RUST_LOG wins when set).
    #[arg(long, env = "RAFT_NODE_LOG")]
    pub log: Option<String>,
}

impl FileConfig {
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
        set(&mut self.maxmemory, &o.maxmemory);
        set(&mut self.listen.peer, &o.listen_peer);
        set(&mut self.listen.client, &o.listen_client);
        set(&mut self.listen.metrics, &o.listen_metrics);
        set(&mut self.client.requirepass, &o.requirepass);
        set(
            &mut self.client.unauthenticated_request_bytes_max,
            &o.unauthenticated_request_bytes_max,
        );
        set(
            &mut self.client.output_buffer_bytes_max,
            &o.output_buffer_bytes_max,
        );
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
                directory: None,
            })
        })
        .collect()
}
