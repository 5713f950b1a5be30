//! Transport counters: plain atomics updated on the RPC path, read as a [`MetricsSnapshot`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use raft_core::message::RpcKind;

const KINDS: usize = 8;

fn kind_index(kind: RpcKind) -> usize {
    match kind {
        RpcKind::Vote => 0,
        RpcKind::BeginQuorumEpoch => 1,
        RpcKind::EndQuorumEpoch => 2,
        RpcKind::Fetch => 3,
        RpcKind::DescribeQuorum => 4,
        RpcKind::ReadIndex => 5,
        RpcKind::Forward => 6,
        RpcKind::FetchSnapshot => 7,
    }
}

/// Upper bounds (inclusive, microseconds) of the latency histogram buckets; a last bucket
/// counts everything slower.
pub const LATENCY_BOUNDS_MICROS: [u64; 12] = [
    100, 200, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000, 500_000, 1_000_000,
];

/// What went wrong, for the error counters.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A call's deadline passed.
    Timeout,
    /// A peer could not be reached or the connection was lost.
    Unreachable,
    /// A call named an unconfigured peer.
    UnknownPeer,
    /// A frame exceeded the size limit (ours or the peer's).
    FrameTooLarge,
    /// A frame could not be decoded.
    Malformed,
    /// A frame of another wire version.
    VersionMismatch,
    /// A TLS handshake was refused (bad CA, unknown or mismatched replica, expired).
    TlsRefused,
}

const ERROR_KINDS: usize = 7;

fn error_index(kind: ErrorKind) -> usize {
    match kind {
        ErrorKind::Timeout => 0,
        ErrorKind::Unreachable => 1,
        ErrorKind::UnknownPeer => 2,
        ErrorKind::FrameTooLarge => 3,
        ErrorKind::Malformed => 4,
        ErrorKind::VersionMismatch => 5,
        ErrorKind::TlsRefused => 6,
    }
}

/// The live counters of one transport.
#[derive(Default, Debug)]
pub(crate) struct Metrics {
    sent: [AtomicU64; KINDS],
    received: [AtomicU64; KINDS],
    bytes_sent: AtomicU64,
    bytes_received: AtomicU64,
    errors: [AtomicU64; ERROR_KINDS],
    connections_dialled: AtomicU64,
    connections_accepted: AtomicU64,
    reconnects: AtomicU64,
    latency: [AtomicU64; LATENCY_BOUNDS_MICROS.len() + 1],
    latency_count: AtomicU64,
    latency_sum_micros: AtomicU64,
}

impl Metrics {
    pub(crate) fn sent(&self, kind: RpcKind) {
        self.sent[kind_index(kind)].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn received(&self, kind: RpcKind) {
        self.received[kind_index(kind)].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn bytes_sent(&self, bytes: usize) {
        self.bytes_sent.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    pub(crate) fn bytes_received(&self, bytes: usize) {
        self.bytes_received
            .fetch_add(bytes as u64, Ordering::Relaxed);
    }

    pub(crate) fn error(&self, kind: ErrorKind) {
        self.errors[error_index(kind)].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn dialled(&self, reconnect: bool) {
        self.connections_dialled.fetch_add(1, Ordering::Relaxed);
        if reconnect {
            self.reconnects.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn accepted(&self) {
        self.connections_accepted.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn latency(&self, d: Duration) {
        let micros = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        let bucket = LATENCY_BOUNDS_MICROS
            .iter()
            .position(|bound| micros <= *bound)
            .unwrap_or(LATENCY_BOUNDS_MICROS.len());
        self.latency[bucket].fetch_add(1, Ordering::Relaxed);
        self.latency_count.fetch_add(1, Ordering::Relaxed);
        self.latency_sum_micros.fetch_add(micros, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> MetricsSnapshot {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let counts = |a: &[AtomicU64; KINDS]| RpcCounts {
            vote: load(&a[0]),
            begin_quorum_epoch: load(&a[1]),
            end_quorum_epoch: load(&a[2]),
            fetch: load(&a[3]),
            describe_quorum: load(&a[4]),
            read_index: load(&a[5]),
            forward: load(&a[6]),
            fetch_snapshot: load(&a[7]),
        };
        let e = &self.errors;
        MetricsSnapshot {
            rpcs_sent: counts(&self.sent),
            rpcs_received: counts(&self.received),
            bytes_sent: load(&self.bytes_sent),
            bytes_received: load(&self.bytes_received),
            errors: ErrorCounts {
                timeout: load(&e[0]),
                unreachable: load(&e[1]),
                unknown_peer: load(&e[2]),
                frame_too_large: load(&e[3]),
                malformed: load(&e[4]),
                version_mismatch: load(&e[5]),
                tls_refused: load(&e[6]),
            },
            connections_dialled: load(&self.connections_dialled),
            connections_accepted: load(&self.connections_accepted),
            reconnects: load(&self.reconnects),
            latency: LatencySnapshot {
                buckets: self.latency.iter().map(load).collect(),
                count: load(&self.latency_count),
                sum_micros: load(&self.latency_sum_micros),
            },
        }
    }
}

/// A count per RPC type.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct RpcCounts {
    /// Vote and pre-vote.
    pub vote: u64,
    /// BeginQuorumEpoch.
    pub begin_quorum_epoch: u64,
    /// EndQuorumEpoch.
    pub end_quorum_epoch: u64,
    /// Fetch.
    pub fetch: u64,
    /// DescribeQuorum.
    pub describe_quorum: u64,
    /// ReadIndex.
    pub read_index: u64,
    /// Forwarded writes.
    pub forward: u64,
    /// FetchSnapshot.
    pub fetch_snapshot: u64,
}

impl RpcCounts {
    /// The count of `kind`.
    pub fn get(&self, kind: RpcKind) -> u64 {
        match kind {
            RpcKind::Vote => self.vote,
            RpcKind::BeginQuorumEpoch => self.begin_quorum_epoch,
            RpcKind::EndQuorumEpoch => self.end_quorum_epoch,
            RpcKind::Fetch => self.fetch,
            RpcKind::DescribeQuorum => self.describe_quorum,
            RpcKind::ReadIndex => self.read_index,
            RpcKind::Forward => self.forward,
            RpcKind::FetchSnapshot => self.fetch_snapshot,
        }
    }

    /// The sum over all types.
    pub fn total(&self) -> u64 {
        self.vote
            + self.begin_quorum_epoch
            + self.end_quorum_epoch
            + self.fetch
            + self.describe_quorum
            + self.read_index
            + self.forward
            + self.fetch_snapshot
    }
}

/// A count per [`ErrorKind`].
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct ErrorCounts {
    /// Deadlines that passed.
    pub timeout: u64,
    /// Unreachable peers and lost connections.
    pub unreachable: u64,
    /// Calls to unconfigured peers.
    pub unknown_peer: u64,
    /// Frames over the size limit, sent or received.
    pub frame_too_large: u64,
    /// Frames that could not be decoded.
    pub malformed: u64,
    /// Frames of another wire version.
    pub version_mismatch: u64,
    /// Refused TLS handshakes, inbound or outbound.
    pub tls_refused: u64,
}

/// RPC latency as seen by callers, successful calls only.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct LatencySnapshot {
    /// Calls per bucket; bucket `i` holds latencies up to `LATENCY_BOUNDS_MICROS[i]`, the last
    /// one everything slower.
    pub buckets: Vec<u64>,
    /// Calls measured.
    pub count: u64,
    /// Sum of their latencies in microseconds.
    pub sum_micros: u64,
}

/// A point-in-time copy of a transport's counters.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct MetricsSnapshot {
    /// RPCs this node sent, by type.
    pub rpcs_sent: RpcCounts,
    /// RPCs this node received and handled, by type.
    pub rpcs_received: RpcCounts,
    /// Frame bytes written (requests and responses, length prefixes included).
    pub bytes_sent: u64,
    /// Frame bytes read.
    pub bytes_received: u64,
    /// Failures by kind.
    pub errors: ErrorCounts,
    /// Outbound connections established.
    pub connections_dialled: u64,
    /// Inbound connections accepted (after TLS verification).
    pub connections_accepted: u64,
    /// Outbound connections that replaced an earlier one to the same peer.
    pub reconnects: u64,
    /// Call latency.
    pub latency: LatencySnapshot,
}
