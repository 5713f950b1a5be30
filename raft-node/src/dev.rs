//! `raft-node dev`: a cluster on loopback in one process, for trying the node: three voters by
//! default; with `--nodes N --voters V`, the nodes after the first V start as observers that
//! `RAFT ADD-VOTER` can make voters while the cluster runs.
//!
//! Everything lives under one directory (default `./raft-dev`): `certs/` (a dev CA and node
//! certificates, made once), `cluster-id` (made once), `nodeN.toml` (each node's config,
//! rewritten at every start with the chosen ports), `founding-voters` (each founding voter's
//! directory id, made when the cluster is new) and `nodeN/` (each node's data, kept). A new
//! cluster's voters are formatted (`raft-node format`) before their first start, so every
//! voter has a directory id; nodes after the first `--voters` start unformatted, as observers.
//! Starting again with the same directory keeps the data.

use std::path::{Path, PathBuf};
use std::time::Duration;

use raft_core::{DirectoryId, ReplicaId};

use crate::certs;
use crate::config::{FileConfig, StorageKind};
use crate::identity;
use crate::node::{self, Running};

/// The most nodes a dev cluster may have (ports are `base + id`, `base + 100 + id`, ...).
pub const NODES_MAX: u32 = 9;

/// Options of `raft-node dev`.
#[derive(Clone, Debug)]
pub struct DevOptions {
    /// The directory holding everything.
    pub dir: PathBuf,
    /// Client ports are `base_port + id`, peer ports `base_port + 100 + id`, metrics ports
    /// `base_port + 200 + id`.
    pub base_port: u16,
    /// The storage engine for new data directories.
    pub storage: Option<String>,
    /// Nodes in all, ids `1..=nodes`.
    pub nodes: u32,
    /// The first `voters` are the configured voters, the rest observers.
    pub voters: u32,
}

/// A running dev cluster.
pub struct Dev {
    /// The nodes, by id.
    pub nodes: Vec<Running>,
}

fn cluster_id(dir: &Path) -> Result<String, String> {
    let path = dir.join("cluster-id");
    if let Ok(id) = std::fs::read_to_string(&path) {
        return Ok(id.trim().to_string());
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let id = format!(
        "dev-{:012x}",
        (nanos ^ u64::from(std::process::id()) << 40) & 0xffff_ffff_ffff
    );
    std::fs::write(&path, format!("{id}\n"))
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(id)
}

/// The founding voters' directory ids: made (and written to `founding-voters`) when no voter
/// has a data directory yet, else read back; empty for a dev directory from before them.
fn founding_directories(dir: &Path, voters: u32) -> Result<Vec<(u32, DirectoryId)>, String> {
    let path = dir.join("founding-voters");
    if let Ok(text) = std::fs::read_to_string(&path) {
        let mut out = Vec::new();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let parsed = line.split_once(' ').and_then(|(id, d)| {
                Some((
                    id.parse::<u32>().ok()?,
                    d.trim().parse::<DirectoryId>().ok()?,
                ))
            });
            out.push(parsed.ok_or_else(|| format!("{}: bad line {line:?}", path.display()))?);
        }
        return Ok(out);
    }
    let fresh = (1..=voters).all(|id| !dir.join(format!("node{id}")).exists());
    if !fresh {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    let mut text = String::new();
    for id in 1..=voters {
        let d = identity::new_directory_id()?;
        text += &format!("{id} {d}\n");
        out.push((id, d));
    }
    std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(out)
}

fn node_toml(
    cluster: &str,
    id: u32,
    opts: &DevOptions,
    storage: &str,
    founding: &[(u32, DirectoryId)],
) -> String {
    let base = opts.base_port;
    let mut s = format!(
        "# Written by `raft-node dev` at every start. Relative paths are relative to this\n\
         # file's directory; `raft-node run --config FILE` runs this node on its own.\n\
         cluster_id = \"{cluster}\"\nreplica_id = {id}\ndata_dir = \"node{id}\"\nstorage = \"{storage}\"\n\n\
         [listen]\nmetrics = \"127.0.0.1:{metrics}\"\n\n\
         [tls]\nca_cert = \"certs/ca.pem\"\ncert = \"certs/node-{id}.pem\"\nkey = \"certs/node-{id}.key\"\n\n\
         [timers]\nelection_timeout_ms = 500\nfetch_timeout_ms = 1000\nfetch_max_wait_ms = 250\n",
        metrics = u32::from(base) + 200 + id
    );
    for v in 1..=opts.nodes {
        let table = if v <= opts.voters {
            "voters"
        } else {
            "observers"
        };
        s += &format!(
            "\n[[{table}]]\nid = {v}\npeer = \"127.0.0.1:{}\"\nclient = \"127.0.0.1:{}\"\n",
            u32::from(base) + 100 + v,
            u32::from(base) + v
        );
        if let Some((_, d)) = founding.iter().find(|(f, _)| *f == v && v <= opts.voters) {
            s += &format!("directory = \"{d}\"\n");
        }
    }
    s
}

/// Prepares the directory and starts the nodes.
pub async fn start(opts: &DevOptions) -> Result<Dev, String> {
    if opts.nodes == 0 || opts.nodes > NODES_MAX {
        return Err(format!("--nodes must be between 1 and {NODES_MAX}"));
    }
    if opts.voters == 0 || opts.voters > opts.nodes {
        return Err(format!(
            "--voters must be between 1 and --nodes ({})",
            opts.nodes
        ));
    }
    if u32::from(opts.base_port) + 200 + opts.nodes > u32::from(u16::MAX) {
        return Err(format!(
            "--base-port {} leaves no room for the peer and metrics ports",
            opts.base_port
        ));
    }
    let dir = &opts.dir;
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let cluster = cluster_id(dir)?;
    let ids: Vec<ReplicaId> = (1..=opts.nodes).map(ReplicaId).collect();
    certs::ensure(&dir.join("certs"), &ids)?;
    let founding = founding_directories(dir, opts.voters)?;
    let mut nodes = Vec::new();
    for id in 1..=opts.nodes {
        let storage = opts
            .storage
            .clone()
            .or_else(|| identity::recorded_storage(&dir.join(format!("node{id}"))))
            .unwrap_or_else(|| StorageKind::default_compiled().name().to_string());
        let path = dir.join(format!("node{id}.toml"));
        std::fs::write(&path, node_toml(&cluster, id, opts, &storage, &founding))
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        let cfg = FileConfig::load(&path)
            .and_then(FileConfig::check)
            .map_err(|e| e.to_string())?;
        let founder = founding.iter().any(|(f, _)| *f == id);
        if founder && !identity::exists(&cfg.data_dir) && !cfg.data_dir.exists() {
            crate::format::format(&cfg, false)
                .await
                .map_err(|e| format!("formatting node {id}: {e}"))?;
        }
        match node::start(cfg).await {
            Ok(n) => nodes.push(n),
            Err(e) => {
                for n in nodes {
                    n.shutdown().await;
                }
                return Err(format!("node {id}: {e}"));
            }
        }
    }
    Ok(Dev { nodes })
}

impl Dev {
    /// Waits up to `timeout` for a leader (as the first node learns it, from its state
    /// channel rather than by polling); returns its id.
    pub async fn wait_for_leader(&self, timeout: Duration) -> Option<ReplicaId> {
        let mut state = self.nodes.first()?.node.watch();
        let known = tokio::time::timeout(timeout, state.wait_for(|s| s.leader.is_some()))
            .await
            .ok()?
            .ok()?
            .leader;
        known
    }

    /// Stops every node.
    pub async fn shutdown(self) {
        let stops = self.nodes.into_iter().map(|n| tokio::spawn(n.shutdown()));
        for s in stops.collect::<Vec<_>>() {
            let _ = s.await;
        }
    }
}
