//! What the node tells about itself: `INFO` and its sections, `ROLE`, `RAFT STATUS`,
//! `RAFT DESCRIBE` and `CONFIG GET`, built from the driver's status, the server's counters and
//! the node's configuration.

use std::sync::atomic::Ordering;

use raft_core::protocol::Status;
use raft_core::{ReplicaId, Role};

use bytes::Bytes;

use crate::commands::Conn;
use crate::config::NodeConfig;
use crate::kv::glob_match;
use crate::resp::Reply;
use crate::server::Server;

impl Server {
    pub(crate) fn info(&self, conn: &Conn, st: &Status, sections: &[String]) -> String {
        let all = sections.is_empty()
            || sections
                .iter()
                .any(|s| matches!(s.as_str(), "all" | "everything" | "default"));
        let want = |name: &str| all || sections.iter().any(|s| s == name);
        let mut s = String::new();
        if want("server") {
            s += &format!(
                "# Server\r\nredis_version:7.0.0\r\nraft_node_version:{}\r\nredis_mode:standalone\r\n\
                 process_id:{}\r\ntcp_port:{}\r\nuptime_in_seconds:{}\r\ncluster_id:{}\r\n\
                 replica_id:{}\r\nstorage:{}\r\n\r\n",
                env!("CARGO_PKG_VERSION"),
                std::process::id(),
                self.client_addr.port(),
                self.started.elapsed().as_secs(),
                self.cfg.cluster_id,
                self.cfg.id.0,
                self.cfg.storage.name(),
            );
        }
        if want("clients") {
            s += &format!(
                "# Clients\r\nconnected_clients:{}\r\nblocked_clients:0\r\nclient_id:{}\r\n\
                 read_mode:{}\r\n\r\n",
                self.cfg.client.connections_max - self.connections.available_permits(),
                conn.id,
                conn.read_mode.name()
            );
        }
        if want("memory") {
            // The process's resident memory: the map lives in it, and an allocator's own
            // figure is not at hand. `maxmemory` is compared with the map's estimate.
            let rss = resident_bytes();
            let max = self.cfg.maxmemory;
            let mib = |n: u64| n as f64 / (1 << 20) as f64;
            s += &format!(
                "# Memory\r\nused_memory:{rss}\r\nused_memory_human:{:.2}M\r\n\
                 used_memory_rss:{rss}\r\nused_memory_dataset:{}\r\nmaxmemory:{max}\r\n\
                 maxmemory_human:{:.2}M\r\nmaxmemory_policy:noeviction\r\n\r\n",
                mib(rss),
                self.kv.dataset_bytes(),
                mib(max),
            );
        }
        if want("persistence") {
            s += "# Persistence\r\nloading:0\r\naof_enabled:0\r\nrdb_bgsave_in_progress:0\r\n\r\n";
        }
        if want("stats") {
            s += &format!(
                "# Stats\r\ntotal_connections_received:{}\r\ntotal_commands_processed:{}\r\n\r\n",
                self.next_conn.load(Ordering::Relaxed) - 1,
                self.commands_processed.load(Ordering::Relaxed),
            );
        }
        if want("replication") {
            s += &self.replication_section(conn, st);
        }
        // As in Redis, only asked for by name or with `all`/`everything`, not by default.
        let everything = sections
            .iter()
            .any(|s| matches!(s.as_str(), "all" | "everything" | "commandstats"));
        if everything {
            s += &self.stats.section();
        }
        if want("clock") {
            // The clock expiry is judged by, and how far this node's wall clock is from it
            // (positive: ahead; on the leader, a large one shows a clamped clock jump).
            let (clock, _) = self.kv.clock();
            let offset = crate::server::now_ms() as i64 - clock as i64;
            s += &format!(
                "# Clock\r\nreplicated_clock_ms:{clock}\r\nwall_clock_offset_ms:{offset}\r\n\r\n"
            );
        }
        if want("keyspace") {
            s += &format!("# Keyspace\r\ndb0:keys={}\r\n", self.kv.dbsize());
        }
        s
    }

    /// A replica's client address as Redis tools want it: host and port apart.
    fn host_port(&self, id: ReplicaId) -> (String, u16) {
        let addr = self.cfg.client_addr_of(id).unwrap_or_default();
        match addr.rsplit_once(':') {
            Some((host, port)) => (host.to_string(), port.parse().unwrap_or(0)),
            None => (addr, 0),
        }
    }

    /// Whether this replica heard from its leader within a fetch timeout.
    fn leader_link_up(&self, st: &Status) -> bool {
        st.leader.is_some()
            && st
                .since_leader_contact
                .is_some_and(|d| d < self.cfg.timers.fetch_timeout)
    }

    /// `ROLE`: `master`, its offset and its replicas, or `slave` with its master and offset.
    pub(crate) fn role(&self, st: &Status) -> Reply {
        let offset = |o: raft_core::Offset| Reply::Int(o.0 as i64);
        if st.role == Role::Leader {
            let replicas = st
                .voters
                .iter()
                .filter(|p| p.replica != st.id)
                .map(|p| {
                    let (host, port) = self.host_port(p.replica);
                    Reply::Array(vec![
                        Reply::bulk(host),
                        Reply::bulk(port.to_string()),
                        Reply::bulk(p.end_offset.map_or(0, |o| o.0).to_string()),
                    ])
                })
                .collect();
            return Reply::Array(vec![
                Reply::bulk("master"),
                offset(st.high_watermark),
                Reply::Array(replicas),
            ]);
        }
        let (host, port) = st.leader.map_or((String::new(), 0), |l| self.host_port(l));
        let link = if self.leader_link_up(st) {
            "connected"
        } else {
            "connect"
        };
        Reply::Array(vec![
            Reply::bulk("slave"),
            Reply::bulk(host),
            Reply::Int(i64::from(port)),
            Reply::bulk(link),
            offset(self.kv.applied()),
        ])
    }

    fn replication_section(&self, conn: &Conn, st: &Status) -> String {
        let applied = self.kv.applied();
        let leader = st.leader.map_or(String::new(), |l| l.0.to_string());
        let leader_addr = st
            .leader
            .and_then(|l| self.cfg.client_addr_of(l))
            .unwrap_or_default();
        // Redis's names first, for tools that key on them; the Raft role beside them.
        let redis_role = if st.role == Role::Leader {
            "role:master\r\n".to_string()
        } else {
            let (host, port) = st.leader.map_or((String::new(), 0), |l| self.host_port(l));
            let link = if self.leader_link_up(st) {
                "up"
            } else {
                "down"
            };
            format!(
                "role:slave\r\nmaster_host:{host}\r\nmaster_port:{port}\r\nmaster_link_status:{link}\r\n"
            )
        };
        format!(
            "# Replication\r\n{redis_role}raft_role:{}\r\nreplica_id:{}\r\nepoch:{}\r\nleader:{leader}\r\n\
             leader_addr:{leader_addr}\r\nhigh_watermark:{}\r\napplied_offset:{}\r\n\
             log_end_offset:{}\r\ndurable_end_offset:{}\r\nlag:{}\r\nvoters:{}\r\n\
             observers:{}\r\nread_mode:{}\r\n\r\n",
            st.role,
            st.id.0,
            st.epoch.0,
            st.high_watermark.0,
            applied.0,
            st.log_end.offset.0,
            st.durable_end.0,
            st.high_watermark.0.saturating_sub(applied.0),
            ids_of(st.voter_set.ids()),
            ids_of(self.observers_known(st).into_iter()),
            conn.read_mode.name(),
        )
    }

    pub(crate) fn raft_status(&self, st: &Status) -> String {
        let applied = self.kv.applied();
        format!(
            "replica_id:{}\r\ncluster_id:{}\r\nrole:{}\r\nepoch:{}\r\nleader:{}\r\n\
             high_watermark:{}\r\napplied_offset:{}\r\nlog_end_offset:{}\r\nlog_end_epoch:{}\r\n\
             durable_end_offset:{}\r\nlog_start_offset:{}\r\nsnapshot_offset:{}\r\n\
             directory_id:{}\r\nvoter:{}\r\n",
            st.id.0,
            self.cfg.cluster_id,
            st.role,
            st.epoch.0,
            st.leader.map_or("none".into(), |l| self.leader_text(l)),
            st.high_watermark.0,
            applied.0,
            st.log_end.offset.0,
            st.log_end.epoch.0,
            st.durable_end.0,
            st.log_start.0,
            st.snapshot
                .map_or("none".into(), |id| id.offset.0.to_string()),
            st.directory.map_or("none".into(), |d| d.to_string()),
            u8::from(st.voter_set.is_voter(st.id, st.directory)),
        )
    }

    pub(crate) fn raft_describe(&self, st: &Status) -> String {
        let mut s = format!(
            "epoch:{}\r\nleader:{}\r\nhigh_watermark:{}\r\n",
            st.epoch.0,
            st.leader.map_or("none".into(), |l| l.0.to_string()),
            st.high_watermark.0
        );
        if st.role != Role::Leader {
            s += "voters: (progress is known to the leader only)\r\n";
            for id in st.voter_set.ids() {
                s += &format!("voter:{}\r\n", id.0);
            }
            return s;
        }
        for p in &st.voters {
            let end = p.end_offset.map_or("-".into(), |o| o.0.to_string());
            let lag = p.end_offset.map_or("-".into(), |o| {
                st.log_end.offset.0.saturating_sub(o.0).to_string()
            });
            let since = p
                .since_last_fetch
                .map_or("-".into(), |d| d.as_millis().to_string());
            s += &format!(
                "voter:{} end_offset={end} lag={lag} last_fetch_ms_ago={since}\r\n",
                p.replica.0
            );
        }
        for p in &st.observers {
            s += &format!("observer:{}\r\n", p.replica.0);
        }
        s
    }
}

/// `CONFIG GET pattern...`: every setting whose name matches one of the globs (without regard
/// to case, as Redis), once each, in [`settings`] order; none for a pattern that matches
/// nothing.
pub(crate) fn config_get(cfg: &NodeConfig, patterns: &[Bytes]) -> Reply {
    let patterns: Vec<Vec<u8>> = patterns.iter().map(|p| p.to_ascii_lowercase()).collect();
    let pairs = settings(cfg)
        .into_iter()
        .filter(|(name, _)| patterns.iter().any(|p| glob_match(p, name.as_bytes())))
        .map(|(name, value)| (Reply::bulk(name), Reply::bulk(value)))
        .collect();
    Reply::Map(pairs)
}

/// The settings `CONFIG GET` answers: Redis's names for what tools ask (with the values that
/// are true of this node: no persistence of Redis's kinds, one database, no memory limit, no
/// idle timeout), then the node's own settings under their configuration-file names. The
/// password is not shown.
pub(crate) fn settings(cfg: &NodeConfig) -> Vec<(&'static str, String)> {
    let ms = |d: std::time::Duration| d.as_millis().to_string();
    let client = cfg.listen_client;
    // With TLS on the client port, Redis reports it as `tls-port` and `port` as 0.
    let (port, tls_port) = match cfg.client.tls {
        Some(_) => (0, client.port()),
        None => (client.port(), 0),
    };
    let limits = &cfg.client.limits;
    vec![
        ("bind", client.ip().to_string()),
        ("port", port.to_string()),
        ("tls-port", tls_port.to_string()),
        ("maxclients", cfg.client.connections_max.to_string()),
        ("proto-max-bulk-len", limits.bulk_bytes_max.to_string()),
        ("timeout", "0".into()),
        ("save", String::new()),
        ("appendonly", "no".into()),
        ("databases", "1".into()),
        ("maxmemory", cfg.maxmemory.to_string()),
        ("maxmemory-policy", "noeviction".into()),
        (
            "client-output-buffer-limit",
            format!("normal {} 0 0", cfg.client.output_buffer_bytes_max),
        ),
        ("dir", cfg.data_dir.display().to_string()),
        ("cluster_id", cfg.cluster_id.clone()),
        ("replica_id", cfg.id.0.to_string()),
        ("data_dir", cfg.data_dir.display().to_string()),
        ("storage", cfg.storage.name().into()),
        ("listen.peer", cfg.listen_peer.to_string()),
        ("listen.client", client.to_string()),
        (
            "listen.metrics",
            cfg.listen_metrics.map_or(String::new(), |a| a.to_string()),
        ),
        (
            "timers.election_timeout_ms",
            ms(cfg.timers.election_timeout),
        ),
        ("timers.fetch_timeout_ms", ms(cfg.timers.fetch_timeout)),
        ("timers.fetch_max_wait_ms", ms(cfg.timers.fetch_max_wait)),
        ("timers.request_timeout_ms", ms(cfg.timers.request_timeout)),
        ("timers.write_timeout_ms", ms(cfg.timers.write_timeout)),
        (
            "timers.shutdown_timeout_ms",
            ms(cfg.timers.shutdown_timeout),
        ),
        (
            "snapshot.after_records",
            cfg.snapshot.after_records.to_string(),
        ),
        ("snapshot.after_bytes", cfg.snapshot.after_bytes.to_string()),
        (
            "snapshot.after_secs",
            cfg.snapshot.after_time.as_secs().to_string(),
        ),
        (
            "snapshot.log_retention",
            cfg.snapshot.log_retention.to_string(),
        ),
        ("snapshot.chunk_bytes", cfg.snapshot.chunk_bytes.to_string()),
        (
            "lease.enabled",
            if cfg.lease.enabled { "yes" } else { "no" }.into(),
        ),
        ("lease.drift_margin_ms", ms(cfg.lease.drift_margin)),
        ("client.read_mode", cfg.client.read_mode.name().into()),
        ("client.bulk_bytes_max", limits.bulk_bytes_max.to_string()),
        ("client.array_len_max", limits.array_len_max.to_string()),
        (
            "client.inline_bytes_max",
            limits.inline_bytes_max.to_string(),
        ),
        (
            "client.request_bytes_max",
            limits.request_bytes_max.to_string(),
        ),
        (
            "client.connections_max",
            cfg.client.connections_max.to_string(),
        ),
        (
            "client.unauthenticated_request_bytes_max",
            cfg.client.unauthenticated_request_bytes_max.to_string(),
        ),
        (
            "client.output_buffer_bytes_max",
            cfg.client.output_buffer_bytes_max.to_string(),
        ),
        (
            "client.tls",
            if cfg.client.tls.is_some() {
                "yes"
            } else {
                "no"
            }
            .into(),
        ),
    ]
}

/// The process's resident set size in bytes (Linux `/proc/self/statm`; 0 elsewhere).
fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    // The page size of every Linux platform this runs on; a wrong guess only scales a gauge.
    pages * 4096
}

impl Server {
    /// The observers this node knows of: on the leader, those that fetch from it; elsewhere,
    /// this node when it is not a voter of the set in force.
    fn observers_known(&self, st: &Status) -> Vec<ReplicaId> {
        if st.role == raft_core::Role::Leader {
            st.observers.iter().map(|p| p.replica).collect()
        } else if st.voter_set.contains_id(st.id) {
            Vec::new()
        } else {
            vec![st.id]
        }
    }
}

fn ids_of(it: impl Iterator<Item = ReplicaId>) -> String {
    it.map(|i| i.0.to_string()).collect::<Vec<_>>().join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> NodeConfig {
        crate::fixtures::one_voter(std::path::Path::new("d"))
    }

    fn names(r: Reply) -> Vec<String> {
        let Reply::Map(pairs) = r else {
            panic!("{r:?}")
        };
        pairs
            .into_iter()
            .map(|(k, _)| match k {
                Reply::Bulk(b) => String::from_utf8_lossy(&b).into_owned(),
                other => panic!("{other:?}"),
            })
            .collect()
    }

    fn get(cfg: &NodeConfig, patterns: &[&str]) -> Vec<String> {
        let p: Vec<Bytes> = patterns
            .iter()
            .map(|p| Bytes::copy_from_slice(p.as_bytes()))
            .collect();
        names(config_get(cfg, &p))
    }

    #[test]
    fn config_get_matches_globs_over_every_setting_once() {
        let cfg = cfg();
        assert_eq!(get(&cfg, &["*"]).len(), settings(&cfg).len());
        assert_eq!(get(&cfg, &["PORT"]), ["port"], "names match in any case");
        assert_eq!(get(&cfg, &["?ort", "port", "p*t"]), ["port"], "each once");
        assert_eq!(
            get(&cfg, &["[bd]*"]),
            ["bind", "databases", "dir", "data_dir"]
        );
        assert_eq!(get(&cfg, &["[^a-z]*"]), Vec::<String>::new());
        assert_eq!(
            get(&cfg, &["lease.*"]),
            ["lease.enabled", "lease.drift_margin_ms"]
        );
        assert!(get(&cfg, &["nosuch", "x?"]).is_empty());
        assert!(get(&cfg, &["requirepass"]).is_empty());
        let Reply::Map(pairs) = config_get(&cfg, &[Bytes::from_static(b"port")]) else {
            unreachable!()
        };
        assert_eq!(pairs[0].1, Reply::bulk("7001"));
    }
}
