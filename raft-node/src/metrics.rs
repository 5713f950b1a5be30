//! Prometheus metrics: the registry ([`NodeMetrics`]), the decorators that time the transport's
//! Fetch RPCs ([`TimedTransport`]) and the log's durable appends ([`TimedLog`]), and the
//! rendering of one scrape ([`Scrape`]) in the text exposition format 0.0.4.
//!
//! Metrics maintained as things happen (latency histograms, in-flight gauges, replicated
//! bytes, campaigns) live in `prometheus-client` metrics. Values that already exist elsewhere
//! (the replica's status, the driver's and the transport's counters) are read at scrape time,
//! so they cannot drift from their source.
//!
//! `prometheus-client` encodes OpenMetrics text; [`to_text_004`] turns it into the Prometheus
//! text format 0.0.4 (counters named with their `_total` suffix in `# HELP`/`# TYPE`, no
//! `# UNIT` or `# EOF` lines), which every Prometheus version and most tools read.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};
use raft_core::driver::Node;
use raft_core::io::{LogState, LogStore, RequestHandler, StorageError, Transport, TransportError};
use raft_core::message::{Request, Response};
use raft_core::{Offset, OffsetAndEpoch, Record, ReplicaId, Role};

use crate::config::ReadMode;
use crate::kv::Kv;

/// One label, as a `Family` key.
type Label = [(&'static str, &'static str); 1];
/// A family of histograms keyed by one label.
type HistogramFamily = Family<Label, Histogram, fn() -> Histogram>;

/// Latency buckets: 100 µs to about 6.5 s, doubling.
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0001, 2.0, 17))
}

/// Every role, for the role gauge (one series per role, 1 for the current one).
const ROLES: [Role; 6] = [
    Role::Unattached,
    Role::Prospective,
    Role::Candidate,
    Role::Leader,
    Role::Follower,
    Role::Resigned,
];

fn role_name(role: Role) -> &'static str {
    match role {
        Role::Unattached => "unattached",
        Role::Prospective => "prospective",
        Role::Candidate => "candidate",
        Role::Leader => "leader",
        Role::Follower => "follower",
        Role::Resigned => "resigned",
    }
}

/// The metrics of one replica. Cheap handles: every field shares its value with the registry.
pub struct NodeMetrics {
    registry: Registry,
    role: Family<Label, Gauge>,
    epoch: Gauge,
    leader: Gauge,
    high_watermark: Gauge,
    applied_offset: Gauge,
    log_end_offset: Gauge,
    log_start_offset: Gauge,
    voters: Gauge,
    is_voter: Gauge,
    /// Client writes proposed and not answered yet.
    pub proposals_in_flight: Gauge,
    /// Client reads waiting for their barrier or being served.
    pub reads_in_flight: Gauge,
    commit_latency: Histogram,
    read_latency: HistogramFamily,
    fetch_latency: HistogramFamily,
    append_latency: Histogram,
    campaigns: Counter,
    last_campaign_epoch: AtomicU32,
    replicated_in: Counter,
    replicated_out: Counter,
    /// Stamps this replica issued as leader at the bound instead of its wall clock, which was
    /// further ahead of the replicated clock than the bound allows (see `leader_clock`).
    pub clock_jumps_clamped: Counter,
    /// Client connections closed because the replies waiting for them would have passed
    /// `client.output_buffer_bytes_max`.
    pub output_limit_disconnects: Counter,
    node: Arc<OnceLock<Node>>,
}

impl std::fmt::Debug for NodeMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeMetrics").finish_non_exhaustive()
    }
}

impl NodeMetrics {
    /// A registry with every metric of the node, prefixed `raft_`, including the counters of
    /// `transport` when given; the driver's counters appear once [`NodeMetrics::attach`]ed.
    pub fn new(transport: Option<Arc<raft_transport_quic::QuicTransport>>) -> NodeMetrics {
        let mut registry = Registry::with_prefix("raft");
        let node = Arc::new(OnceLock::new());
        let m = NodeMetrics {
            role: Family::default(),
            epoch: Gauge::default(),
            leader: Gauge::default(),
            high_watermark: Gauge::default(),
            applied_offset: Gauge::default(),
            log_end_offset: Gauge::default(),
            log_start_offset: Gauge::default(),
            voters: Gauge::default(),
            is_voter: Gauge::default(),
            proposals_in_flight: Gauge::default(),
            reads_in_flight: Gauge::default(),
            commit_latency: latency_histogram(),
            read_latency: Family::new_with_constructor(latency_histogram),
            fetch_latency: Family::new_with_constructor(latency_histogram),
            append_latency: latency_histogram(),
            campaigns: Counter::default(),
            last_campaign_epoch: AtomicU32::new(0),
            replicated_in: Counter::default(),
            replicated_out: Counter::default(),
            clock_jumps_clamped: Counter::default(),
            output_limit_disconnects: Counter::default(),
            registry: Registry::default(),
            node: node.clone(),
        };
        let r = &mut registry;
        r.register(
            "role",
            "This replica's role: 1 for the current one",
            m.role.clone(),
        );
        r.register(
            "epoch",
            "The current epoch (one per election in the cluster)",
            m.epoch.clone(),
        );
        r.register(
            "leader_id",
            "The leader's replica id (0: none known)",
            m.leader.clone(),
        );
        r.register(
            "high_watermark",
            "The high watermark known here: records below it are committed",
            m.high_watermark.clone(),
        );
        r.register(
            "applied_offset",
            "The state machine has applied every record below this offset",
            m.applied_offset.clone(),
        );
        r.register(
            "log_end_offset",
            "The log's end offset",
            m.log_end_offset.clone(),
        );
        r.register(
            "log_start_offset",
            "The log's start offset (records below are in a snapshot)",
            m.log_start_offset.clone(),
        );
        r.register(
            "voters",
            "Voters in the voter set this replica acts on (KIP-853)",
            m.voters.clone(),
        );
        r.register(
            "is_voter",
            "1 when this replica, with its directory id, is a voter of that set",
            m.is_voter.clone(),
        );
        r.register(
            "proposals_in_flight",
            "Client writes submitted and not answered yet",
            m.proposals_in_flight.clone(),
        );
        r.register(
            "reads_in_flight",
            "Client reads waiting for their read barrier or being served",
            m.reads_in_flight.clone(),
        );
        r.register_with_unit(
            "commit_latency",
            "Client write submitted to the driver until committed and applied",
            Unit::Seconds,
            m.commit_latency.clone(),
        );
        r.register_with_unit(
            "read_latency",
            "Client read: read barrier (none for sequential) and the local query, by mode",
            Unit::Seconds,
            m.read_latency.clone(),
        );
        r.register_with_unit(
            "fetch_latency",
            "Fetch RPCs sent by this replica, by outcome; an empty one includes the leader's long-poll wait",
            Unit::Seconds,
            m.fetch_latency.clone(),
        );
        r.register_with_unit(
            "storage_append_latency",
            "Durable log appends (write and fsync, possibly many records)",
            Unit::Seconds,
            m.append_latency.clone(),
        );
        r.register(
            "campaigns",
            "Elections this replica started as a candidate (pre-votes not counted)",
            m.campaigns.clone(),
        );
        r.register_with_unit(
            "replicated_received",
            "Record payload bytes this replica fetched from a leader",
            Unit::Bytes,
            m.replicated_in.clone(),
        );
        r.register_with_unit(
            "replicated_sent",
            "Record payload bytes this replica served in fetch responses",
            Unit::Bytes,
            m.replicated_out.clone(),
        );
        r.register(
            "clock_jumps_clamped",
            "Records this replica stamped as leader at the clock bound because its wall clock ran ahead of it",
            m.clock_jumps_clamped.clone(),
        );
        r.register(
            "client_output_limit_disconnects",
            "Client connections closed because the replies waiting for them would have passed client.output_buffer_bytes_max",
            m.output_limit_disconnects.clone(),
        );
        r.register_collector(Box::new(Sources { node, transport }));
        NodeMetrics { registry, ..m }
    }

    /// Makes the driver's counters part of every scrape from now on (the driver is started
    /// after its decorators, which already hold these metrics).
    pub fn attach(&self, node: Node) {
        let _ = self.node.set(node);
    }

    /// Records a client write's time to commit.
    pub fn observe_commit(&self, took: Duration) {
        self.commit_latency.observe(took.as_secs_f64());
    }

    /// Records a client read's latency in `mode`.
    pub fn observe_read(&self, mode: ReadMode, took: Duration) {
        self.read_latency
            .get_or_create(&[("mode", mode.name())])
            .observe(took.as_secs_f64());
    }

    fn observe_status(&self, st: &raft_core::protocol::Status, applied: Offset) {
        for role in ROLES {
            let v = i64::from(role == st.role);
            self.role.get_or_create(&[("role", role_name(role))]).set(v);
        }
        let int = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        self.epoch.set(i64::from(st.epoch.0));
        self.leader.set(st.leader.map_or(0, |l| i64::from(l.0)));
        self.high_watermark.set(int(st.high_watermark.0));
        self.voters.set(st.voter_set.len() as i64);
        self.is_voter
            .set(i64::from(st.voter_set.is_voter(st.id, st.directory)));
        self.applied_offset.set(int(applied.0));
        self.log_end_offset.set(int(st.log_end.offset.0));
        self.log_start_offset.set(int(st.log_start.0));
    }
}

/// Scrape-time counters read from the driver and the transport.
struct Sources {
    node: Arc<OnceLock<Node>>,
    transport: Option<Arc<raft_transport_quic::QuicTransport>>,
}

impl std::fmt::Debug for Sources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sources").finish_non_exhaustive()
    }
}

fn counter(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    value: u64,
) -> Result<(), std::fmt::Error> {
    let c = ConstCounter::new(value);
    let m = enc.encode_descriptor(name, help, unit, c.metric_type())?;
    c.encode(m)
}

impl Collector for Sources {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        if let Some(t) = &self.transport {
            let s = t.metrics();
            let bytes = Some(&Unit::Bytes);
            let help = "Bytes of peer RPC frames sent (requests and responses)";
            counter(&mut enc, "transport_sent", help, bytes, s.bytes_sent)?;
            let help = "Bytes of peer RPC frames received (requests and responses)";
            counter(
                &mut enc,
                "transport_received",
                help,
                bytes,
                s.bytes_received,
            )?;
            let help = "QUIC connections dialled, including reconnects";
            counter(
                &mut enc,
                "transport_connections_dialled",
                help,
                None,
                s.connections_dialled,
            )?;
        }
        let Some(node) = self.node.get() else {
            return Ok(());
        };
        let m = node.metrics();
        let driver: [(&str, &str, &AtomicU64); 13] = [
            (
                "proposals",
                "Proposals accepted by this replica as leader",
                &m.proposals,
            ),
            (
                "proposals_refused",
                "Proposals refused",
                &m.proposals_refused,
            ),
            (
                "applied_records",
                "Records applied to the state machine",
                &m.applied,
            ),
            (
                "log_syncs",
                "Durable log append calls (each one sync)",
                &m.log_syncs,
            ),
            ("log_records", "Records appended to the log", &m.log_records),
            ("election_saves", "Election state saves", &m.election_saves),
            ("rpcs_sent", "Peer RPCs sent", &m.rpcs_sent),
            (
                "rpcs_failed",
                "Peer RPCs that failed (timeout, unreachable)",
                &m.rpcs_failed,
            ),
            ("rpcs_received", "Peer RPCs handled", &m.rpcs_received),
            (
                "role_changes",
                "Role changes of this replica",
                &m.role_changes,
            ),
            (
                "snapshots_taken",
                "State machine snapshots taken",
                &m.snapshots_taken,
            ),
            (
                "snapshots_installed",
                "Snapshots downloaded and installed",
                &m.snapshots_installed,
            ),
            (
                "snapshot_chunks_served",
                "Snapshot chunks served to other replicas",
                &m.snapshot_chunks_served,
            ),
        ];
        for (name, help, value) in driver {
            counter(&mut enc, name, help, None, load(value))?;
        }
        Ok(())
    }
}

/// Renders scrapes: refreshes the status gauges, then encodes the registry.
#[derive(Clone)]
pub struct Scrape {
    /// The registry and handles.
    pub metrics: Arc<NodeMetrics>,
    /// The replica, for its status.
    pub node: Node,
    /// The state machine, for its applied offset.
    pub kv: Arc<Kv>,
}

impl Scrape {
    /// The text exposition (format 0.0.4) of every metric, as of now.
    pub async fn render(&self) -> String {
        if let Some(st) = self.node.status().await {
            self.metrics.observe_status(&st, self.kv.applied());
        }
        let mut open = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut open, &self.metrics.registry)
        {
            // Writing to a String does not fail; an encoder error would be a bug in a metric.
            tracing::warn!(error = %e, "encoding metrics failed");
        }
        to_text_004(&open)
    }
}

/// Converts `prometheus-client`'s OpenMetrics text to the Prometheus text format 0.0.4: a
/// counter family `x` with samples `x_total` is described as `x_total`, and `# UNIT` and
/// `# EOF` lines (not part of 0.0.4) are dropped. Everything else is the same in both.
pub fn to_text_004(open: &str) -> String {
    let counters: std::collections::HashSet<&str> = open
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(open.len());
    for line in open.lines() {
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        let described = ["# HELP ", "# TYPE "]
            .iter()
            .find_map(|p| line.strip_prefix(p).map(|rest| (*p, rest)));
        if let Some((prefix, rest)) = described {
            let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
            if counters.contains(name) {
                let _ = writeln!(out, "{prefix}{name}_total {tail}");
                continue;
            }
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// A [`Transport`] that times the Fetch RPCs it carries, counts the record bytes they bring
/// and the ones served through it, and counts this replica's campaigns.
pub struct TimedTransport {
    inner: Arc<dyn Transport>,
    metrics: Arc<NodeMetrics>,
}

impl TimedTransport {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn Transport>, metrics: Arc<NodeMetrics>) -> TimedTransport {
        TimedTransport { inner, metrics }
    }
}

fn payload_bytes(records: &[Record]) -> u64 {
    records.iter().map(|r| r.payload.len() as u64).sum()
}

#[async_trait]
impl Transport for TimedTransport {
    async fn serve(&self, handler: Arc<dyn RequestHandler>) -> Result<(), TransportError> {
        let counted = CountingHandler {
            inner: handler,
            metrics: self.metrics.clone(),
        };
        self.inner.serve(Arc::new(counted)).await
    }

    async fn call(
        &self,
        to: ReplicaId,
        request: Request,
        timeout: Duration,
    ) -> Result<Response, TransportError> {
        match &request {
            Request::Fetch(_) => {}
            Request::Vote(v) => {
                // A candidate asks every voter in its epoch: count the epoch once.
                if !v.pre_vote
                    && self
                        .metrics
                        .last_campaign_epoch
                        .fetch_max(v.epoch.0, Ordering::Relaxed)
                        < v.epoch.0
                {
                    self.metrics.campaigns.inc();
                }
                return self.inner.call(to, request, timeout).await;
            }
            _ => return self.inner.call(to, request, timeout).await,
        }
        let started = Instant::now();
        let result = self.inner.call(to, request, timeout).await;
        let outcome = match &result {
            Ok(Response::Fetch(f)) if !f.records.is_empty() => {
                self.metrics.replicated_in.inc_by(payload_bytes(&f.records));
                "records"
            }
            Ok(Response::Fetch(f)) if f.error.is_none() => "empty",
            _ => "error",
        };
        self.metrics
            .fetch_latency
            .get_or_create(&[("outcome", outcome)])
            .observe(started.elapsed().as_secs_f64());
        result
    }

    async fn close(&self) {
        self.inner.close().await;
    }

    fn voters_changed(&self, voters: &raft_core::VoterSet) {
        self.inner.voters_changed(voters);
    }
}

/// Counts the record bytes this replica serves in fetch responses.
struct CountingHandler {
    inner: Arc<dyn RequestHandler>,
    metrics: Arc<NodeMetrics>,
}

#[async_trait]
impl RequestHandler for CountingHandler {
    async fn handle(&self, from: ReplicaId, request: Request) -> Response {
        let response = self.inner.handle(from, request).await;
        if let Response::Fetch(f) = &response {
            self.metrics
                .replicated_out
                .inc_by(payload_bytes(&f.records));
        }
        response
    }
}

/// A [`LogStore`] that times durable appends.
pub struct TimedLog {
    inner: Arc<dyn LogStore>,
    metrics: Arc<NodeMetrics>,
}

impl TimedLog {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn LogStore>, metrics: Arc<NodeMetrics>) -> TimedLog {
        TimedLog { inner, metrics }
    }
}

#[async_trait]
impl LogStore for TimedLog {
    async fn state(&self) -> Result<LogState, StorageError> {
        self.inner.state().await
    }

    async fn append(&self, records: &[Record]) -> Result<(), StorageError> {
        let started = Instant::now();
        let result = self.inner.append(records).await;
        if result.is_ok() {
            self.metrics
                .append_latency
                .observe(started.elapsed().as_secs_f64());
        }
        result
    }

    async fn read(
        &self,
        from: Offset,
        to: Offset,
        max_bytes: u64,
    ) -> Result<Vec<Record>, StorageError> {
        self.inner.read(from, to, max_bytes).await
    }

    async fn truncate(&self, end: Offset) -> Result<(), StorageError> {
        self.inner.truncate(end).await
    }

    async fn purge(&self, start: Offset) -> Result<(), StorageError> {
        self.inner.purge(start).await
    }

    async fn reset(&self, start: OffsetAndEpoch) -> Result<(), StorageError> {
        self.inner.reset(start).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openmetrics_counters_become_0_0_4_counters() {
        let open = "# HELP raft_campaigns Elections started.\n# TYPE raft_campaigns counter\n\
                    raft_campaigns_total 3\n# HELP raft_epoch The epoch.\n# TYPE raft_epoch gauge\n\
                    raft_epoch 7\n# HELP raft_sent_bytes Bytes.\n# TYPE raft_sent_bytes counter\n\
                    # UNIT raft_sent_bytes bytes\nraft_sent_bytes_total 10\n# EOF\n";
        let text = to_text_004(open);
        assert_eq!(
            text,
            "# HELP raft_campaigns_total Elections started.\n# TYPE raft_campaigns_total counter\n\
             raft_campaigns_total 3\n# HELP raft_epoch The epoch.\n# TYPE raft_epoch gauge\n\
             raft_epoch 7\n# HELP raft_sent_bytes_total Bytes.\n# TYPE raft_sent_bytes_total counter\n\
             raft_sent_bytes_total 10\n"
        );
    }

    #[test]
    fn every_family_is_described_once_and_counters_end_in_total() {
        let m = NodeMetrics::new(None);
        m.observe_commit(Duration::from_millis(3));
        m.observe_read(ReadMode::Lease, Duration::from_millis(1));
        m.campaigns.inc();
        let mut open = String::new();
        prometheus_client::encoding::text::encode(&mut open, &m.registry).unwrap();
        let text = to_text_004(&open);
        let mut seen = std::collections::HashSet::new();
        for line in text.lines().filter_map(|l| l.strip_prefix("# TYPE ")) {
            let (name, kind) = line.split_once(' ').unwrap();
            assert!(seen.insert(name.to_string()), "{name} described twice");
            assert_eq!(kind == "counter", name.ends_with("_total"), "{line}");
        }
        assert!(text.contains("raft_campaigns_total 1\n"), "{text}");
        assert!(
            text.contains("raft_read_latency_seconds_count{mode=\"lease\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("raft_commit_latency_seconds_count 1\n"),
            "{text}"
        );
        assert!(
            !text.contains("# EOF") && !text.contains("# UNIT"),
            "{text}"
        );
    }
}
