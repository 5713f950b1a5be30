//! `raft-node`: a replicated key-value service speaking the Redis protocol (RESP2), built on
//! raft-core's driver, the QUIC transport and a storage engine chosen by cargo feature.
//!
//! Commands: `format` (a founding voter's data directory, once, before its first start), `run`
//! (one node from a config file, flags and environment), `dev` (a local three-voter cluster in
//! one process), `certs` (a development CA and node certificates) and `directory-id` (a new
//! directory id for a founding `[[voters]]` entry).

#[cfg(not(any(feature = "storage-redb", feature = "storage-fjall")))]
compile_error!(
    "raft-node needs a storage engine: enable feature `storage-redb` or `storage-fjall`"
);
#[cfg(not(feature = "transport-quic"))]
compile_error!("raft-node needs a transport: enable feature `transport-quic`");

mod allocator;
mod certs;
mod clients;
mod cmdstats;
mod commands;
mod dev;
#[cfg(test)]
mod fixtures;
mod format;
mod http;
mod identity;
mod introspection;
mod kv;
mod leader_clock;
mod membership;
mod metrics;
mod multi;
mod node;
mod replies;
mod server;
mod wait;
mod write_failure;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use raft_core::ReplicaId;

// The parsers live in the library (fuzzed there); the rest of the binary names them as
// `crate::config` and `crate::resp` through these imports.
use raft_node::{config, resp};

use crate::config::{FileConfig, Overrides};

#[derive(Parser)]
#[command(
    name = "raft-node",
    version,
    about = "A replicated key-value service speaking RESP2"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Runs one node.
    Run {
        /// The TOML config file; flags and RAFT_NODE_* variables override its values.
        #[arg(long, short, env = "RAFT_NODE_CONFIG")]
        config: Option<PathBuf>,
        #[command(flatten)]
        overrides: Box<Overrides>,
        /// Client (RESP) addresses of running nodes: learn the voters from the first that
        /// answers `RAFT VOTERS` instead of from `[[voters]]`, and start as an observer
        /// (see "Joining a running cluster" in the README).
        #[arg(long, env = "RAFT_NODE_JOIN", value_delimiter = ',')]
        join: Vec<String>,
    },
    /// Formats a founding voter's data directory, once, before its first start: writes the
    /// founding voter set (every `[[voters]]` entry with its `directory`) into its storage.
    Format {
        /// The TOML config file; flags and RAFT_NODE_* variables override its values.
        #[arg(long, short, env = "RAFT_NODE_CONFIG")]
        config: Option<PathBuf>,
        #[command(flatten)]
        overrides: Box<Overrides>,
        /// A cluster of this voter alone (the configuration lists it as the only voter); it
        /// gets a new directory id. Other nodes join it and are added with RAFT ADD-VOTER.
        #[arg(long)]
        standalone: bool,
    },
    /// Prints a new random directory id, for the `directory` of a founding `[[voters]]` entry.
    DirectoryId,
    /// Runs a local cluster on loopback until Ctrl-C (three voters by default).
    Dev {
        /// Where certificates, configs and data live (kept between runs).
        #[arg(long, default_value = "./raft-dev")]
        dir: PathBuf,
        /// Client ports are BASE+1..BASE+3, peer ports BASE+101..BASE+103, metrics ports
        /// BASE+201..BASE+203.
        #[arg(long, default_value_t = 7000)]
        base_port: u16,
        /// Storage engine for new data directories: redb or fjall.
        #[arg(long)]
        storage: Option<String>,
        /// Nodes in all (1 to 9).
        #[arg(long, default_value_t = 3)]
        nodes: u32,
        /// How many of them start as voters (default: all); the others are observers that
        /// `RAFT ADD-VOTER <id>` on the leader makes voters.
        #[arg(long)]
        voters: Option<u32>,
    },
    /// Generates a development CA and node certificates.
    Certs {
        /// Output directory (an existing CA there is reused).
        #[arg(long)]
        out: PathBuf,
        /// Replica ids, comma separated.
        #[arg(long, value_delimiter = ',', required = true)]
        replicas: Vec<u32>,
    },
}

fn init_logging(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(default))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colour only for a person at a terminal: log files and collectors get plain text.
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
}

/// Waits for Ctrl-C or SIGTERM.
async fn stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

async fn format_cmd(
    config: Option<PathBuf>,
    overrides: Overrides,
    standalone: bool,
) -> anyhow::Result<()> {
    let mut file = match &config {
        Some(path) => FileConfig::load(path)?,
        None => FileConfig::default(),
    };
    file.apply(&overrides)?;
    let cfg = file.check()?;
    let (directory, voters) = format::format(&cfg, standalone)
        .await
        .map_err(anyhow::Error::msg)?;
    println!(
        "raft-node: formatted {} as replica {} of cluster {:?}, directory {directory}",
        cfg.data_dir.display(),
        cfg.id.0,
        cfg.cluster_id
    );
    for (id, v) in voters.iter() {
        let dir = v.directory.map_or("static".into(), |d| d.to_string());
        println!(
            "  founding voter {}: directory {dir} peer {}",
            id.0, v.endpoint
        );
    }
    Ok(())
}

async fn run(
    config: Option<PathBuf>,
    overrides: Overrides,
    join: Vec<String>,
) -> anyhow::Result<()> {
    let mut file = match &config {
        Some(path) => FileConfig::load(path)?,
        None => FileConfig::default(),
    };
    file.apply(&overrides)?;
    let joined = if join.is_empty() {
        None
    } else {
        let (source, voters) = learn_voters(&file, &join).await?;
        file.use_learned_voters(&voters)?;
        Some((source, voters))
    };
    let cfg = file.check()?;
    init_logging(cfg.log.as_deref().unwrap_or("info"));
    let data_dir = cfg.data_dir.clone();
    let running = node::start(cfg).await?;
    if let Some((source, voters)) = joined {
        let ids: Vec<u32> = voters.iter().map(|v| v.id).collect();
        tracing::info!(from = %source, voters = ?ids, "joined with the voters a running node named");
        // Kept for a later start that finds no node to ask; the node runs without it.
        if let Err(e) = raft_node::join::save(&data_dir, &voters) {
            tracing::warn!(error = %e, "could not keep the learned voters");
        }
    }
    println!(
        "raft-node: replica {} serving clients on {} (peers on {})",
        running.id.0, running.client_addr, running.peer_addr
    );
    if let Some(addr) = running.metrics_addr {
        println!("raft-node: metrics on http://{addr}/metrics");
    }
    let node = running.node.clone();
    tokio::select! {
        () = stop_signal() => {}
        cause = node.stopped() => {
            // The replica stopped on its own (a storage failure): exit with an error, so that
            // the process's supervisor restarts it, rather than serve clients without it.
            running.shutdown().await;
            let why = match cause {
                raft_core::driver::StopCause::Failed(reason) => reason,
                other => format!("{other:?}"),
            };
            return Err(anyhow::anyhow!("the replica stopped: {why}"));
        }
    }
    tracing::info!("stopping");
    running.shutdown().await;
    Ok(())
}

/// The voters to join: from the first of `join` that answers within 10 s, else those saved
/// by an earlier join in the data directory.
async fn learn_voters(
    file: &FileConfig,
    join: &[String],
) -> anyhow::Result<(String, Vec<raft_node::join::LearnedVoter>)> {
    use raft_node::join;
    let cluster_id = file
        .cluster_id()
        .ok_or_else(|| anyhow::anyhow!("cluster_id is required with --join"))?;
    let tls = match file.join_tls_paths() {
        Some(paths) => {
            let read = |p: &std::path::Path| {
                std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))
            };
            let tls = join::JoinTls::from_pem(
                &read(&paths.ca_cert)?,
                &read(&paths.cert)?,
                &read(&paths.key)?,
            )
            .map_err(anyhow::Error::msg)?;
            Some(tls)
        }
        None => None,
    };
    let asked = join::discover(
        join,
        cluster_id,
        tls.as_ref(),
        file.requirepass(),
        Duration::from_secs(2),
        Duration::from_secs(10),
    )
    .await;
    match asked {
        Ok(found) => Ok(found),
        Err(join::JoinError::NoAnswer(why)) => {
            let saved = match file.data_dir_path() {
                Some(dir) => join::load(&dir)?,
                None => None,
            };
            match saved {
                Some(voters) => {
                    eprintln!("raft-node: no node to join answered ({why}); using the voters saved at the last join");
                    Ok((join::SAVED_FILE.to_string(), voters))
                }
                None => Err(join::JoinError::NoAnswer(why).into()),
            }
        }
        Err(e) => Err(e.into()),
    }
}

async fn dev(opts: dev::DevOptions) -> anyhow::Result<()> {
    init_logging("warn");
    let shown = opts.dir.display().to_string();
    let observers = opts.nodes - opts.voters.min(opts.nodes);
    let shape = match observers {
        0 => format!("{} voters", opts.voters),
        1 => format!("{} voters and 1 observer", opts.voters),
        n => format!("{} voters and {n} observers", opts.voters),
    };
    println!("raft-node dev: {shape} on loopback; certificates, configs and data in {shown}");
    println!("  (the data is kept between runs; delete {shown} to start afresh)");
    let cluster = dev::start(&opts).await.map_err(anyhow::Error::msg)?;
    let (opts_voters, opts_nodes) = (opts.voters, opts.nodes);
    for n in &cluster.nodes {
        let metrics = n
            .metrics_addr
            .map_or(String::new(), |a| format!("  metrics http://{a}/metrics"));
        println!(
            "  node {}: client 127.0.0.1:{}  peer {}{metrics}",
            n.id.0,
            n.client_addr.port(),
            n.peer_addr
        );
    }
    match cluster.wait_for_leader(Duration::from_secs(20)).await {
        Some(leader) => {
            let port = port_of(&cluster, leader);
            println!("leader: node {} at 127.0.0.1:{port}", leader.0);
            println!("try:    redis-cli -p {port} set greeting hello");
            println!("        redis-cli -p {port} get greeting");
            for id in opts_voters + 1..=opts_nodes {
                println!(
                    "        redis-cli -p {port} RAFT ADD-VOTER {id}   # node {id} is an observer"
                );
            }
        }
        None => println!("no leader elected yet; see RAFT STATUS on any node"),
    }
    println!("Ctrl-C stops the cluster.");
    stop_signal().await;
    println!("stopping...");
    cluster.shutdown().await;
    println!("stopped");
    Ok(())
}

fn port_of(cluster: &dev::Dev, id: ReplicaId) -> u16 {
    cluster
        .nodes
        .iter()
        .find(|n| n.id == id)
        .map_or(0, |n| n.client_addr.port())
}

fn certs_cmd(out: PathBuf, replicas: Vec<u32>) -> anyhow::Result<()> {
    let ids: Vec<ReplicaId> = replicas.into_iter().map(ReplicaId).collect();
    let written = certs::ensure(&out, &ids)
        .map_err(anyhow::Error::msg)
        .with_context(|| format!("generating certificates in {}", out.display()))?;
    for f in &written {
        println!("wrote {}", f.display());
    }
    if written.is_empty() {
        println!("every certificate already exists in {}", out.display());
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    allocator::limit_arenas();
    let result = match cli.cmd {
        Cmd::Certs { out, replicas } => certs_cmd(out, replicas),
        Cmd::DirectoryId => identity::new_directory_id()
            .map(|id| println!("{id}"))
            .map_err(anyhow::Error::msg),
        cmd => tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .context("starting the tokio runtime")
            .and_then(|rt| {
                rt.block_on(async move {
                    match cmd {
                        Cmd::Run {
                            config,
                            overrides,
                            join,
                        } => run(config, *overrides, join).await,
                        Cmd::Format {
                            config,
                            overrides,
                            standalone,
                        } => format_cmd(config, *overrides, standalone).await,
                        Cmd::Dev {
                            dir,
                            base_port,
                            storage,
                            nodes,
                            voters,
                        } => {
                            dev(dev::DevOptions {
                                dir,
                                base_port,
                                storage,
                                nodes,
                                voters: voters.unwrap_or(nodes),
                            })
                            .await
                        }
                        Cmd::Certs { .. } | Cmd::DirectoryId => Ok(()),
                    }
                })
            }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("raft-node: {e:#}");
            ExitCode::FAILURE
        }
    }
}
