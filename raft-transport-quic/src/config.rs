//! The transport's configuration: addresses, timeouts, bounds and TLS material.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use raft_core::codec::wire::FrameLimits;
use raft_core::ReplicaId;

/// TLS material of one node, all PEM. There is no plaintext mode: every field is required.
#[derive(Clone, Debug)]
pub struct TlsMaterial {
    /// The cluster CA certificate(s) peers must be signed by.
    pub ca_cert_pem: String,
    /// This node's certificate chain, naming its replica id (see [`crate::certs`]).
    pub cert_pem: String,
    /// This node's private key.
    pub key_pem: String,
}

/// Configuration of a [`crate::QuicTransport`].
#[derive(Clone, Debug)]
pub struct QuicConfig {
    /// This node's replica id; its certificate must name it.
    pub id: ReplicaId,
    /// The UDP address to listen on (port 0 picks one; read it back with `local_addr`).
    pub listen: SocketAddr,
    /// The peers this node knows at start, by replica id. Voters added online join through
    /// their advertised endpoints, and replicas that dial in are reached back at their address.
    pub peers: BTreeMap<ReplicaId, SocketAddr>,
    /// Accept connections from any replica the cluster CA certified, not only `peers` (a new
    /// machine joins as an observer with no change to the others' configuration). Off, only
    /// replicas in the peer table may connect.
    pub accept_unlisted: bool,
    /// How often an idle connection is pinged so that it stays open.
    pub keep_alive: Duration,
    /// A connection silent for this long is considered lost.
    pub idle_timeout: Duration,
    /// How long one connection attempt may take, handshake included.
    pub connect_timeout: Duration,
    /// The round-trip time assumed before one is measured; it paces handshake retransmissions
    /// and the drain after a close. Cluster links are short, so this is well below QUIC's
    /// internet default of 333 ms.
    pub initial_rtt: Duration,
    /// The first wait before redialling a peer after a failed attempt; doubles per failure.
    pub reconnect_backoff_min: Duration,
    /// The longest wait between attempts.
    pub reconnect_backoff_max: Duration,
    /// The largest frame sent or accepted, in bytes (the length prefix excluded).
    pub frame_bytes_max: usize,
    /// The most RPCs a peer may have in flight on one connection (bidirectional streams).
    pub streams_max: u32,
    /// The largest UDP payload path MTU discovery probes for, and the largest this endpoint
    /// accepts (it advertises it to peers). Probing above the path's MTU is harmless (the probe
    /// is lost and discovery settles lower). The default is quinn's, for 1500-byte Ethernet.
    /// Raising it pays off for transfers of a few KiB on links with larger MTUs (jumbo frames,
    /// loopback): a 4 KiB fetch then fits one packet. It costs memory: quinn sizes its receive
    /// buffer at this value times 2,048 (64 coalesced segments times 32 datagrams per call),
    /// 18 MiB at 8952 bytes against 3 MiB by default. See `docs/performance-notes.md` for the
    /// measured sweep.
    pub mtu_upper_bound: u16,
    /// The UDP socket's receive and send buffer sizes (`SO_RCVBUF`, `SO_SNDBUF`); the kernel
    /// caps them at `net.core.rmem_max` / `wmem_max`. A burst of large packets that overflows
    /// the receive buffer is dropped there and then resent, and QUIC's congestion control
    /// takes the loss as congestion: Linux's default of about 208 KiB holds only about 23 packets
    /// of 8952 bytes.
    pub socket_buffer_bytes: usize,
    /// Certificates and key.
    pub tls: TlsMaterial,
}

impl QuicConfig {
    /// A configuration with default timeouts and bounds.
    pub fn new(
        id: ReplicaId,
        listen: SocketAddr,
        peers: BTreeMap<ReplicaId, SocketAddr>,
        tls: TlsMaterial,
    ) -> Self {
        QuicConfig {
            id,
            listen,
            peers,
            accept_unlisted: true,
            keep_alive: Duration::from_secs(1),
            idle_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(3),
            initial_rtt: Duration::from_millis(50),
            reconnect_backoff_min: Duration::from_millis(20),
            reconnect_backoff_max: Duration::from_secs(2),
            frame_bytes_max: FrameLimits::FRAME_BYTES_MAX_DEFAULT,
            streams_max: 1024,
            mtu_upper_bound: 1452,
            socket_buffer_bytes: 4 << 20,
            tls,
        }
    }

    /// The decoder limits that follow from `frame_bytes_max`.
    pub fn frame_limits(&self) -> FrameLimits {
        FrameLimits::new(self.frame_bytes_max)
    }
}
