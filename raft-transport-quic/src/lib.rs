//! Peer RPCs over QUIC with mutual TLS, implementing `raft_core::io::Transport` for a node that
//! runs one group and `raft_core::io::HostTransport` for a host that runs many.
//!
//! * One QUIC connection per peer, dialled on first use, kept open by keep-alives and redialled
//!   with exponential backoff after it is lost. An inbound connection from a peer is reused for
//!   calls to it, so two replicas that talk both ways normally share one connection.
//! * Each RPC is one bidirectional stream: the request frame, the response frame, done. A large
//!   Fetch response therefore never delays a Vote on another stream.
//! * A frame on a stream is a little-endian `u32` length and then that many bytes of
//!   `raft_core::codec::wire` frame. Frames above [`QuicConfig::frame_bytes_max`] are refused
//!   on the stream (typed error, counted) and the connection stays usable.
//! * Many groups, one transport: a [`HostTransport`] call names its group in a routed frame
//!   (`raft_core::codec::wire::encode_group_request`) and travels on the connection every other
//!   group's calls to that host use. A [`Transport`] call is a call in [`GroupId::DEFAULT`],
//!   whose frame is the plain one, so a single-group node and a host interoperate on the default
//!   group. An endpoint is served once, through either trait; a request of a group its handler
//!   does not run is turned away unhandled, and the caller gets `TransportError::NotSent`.
//! * Mutual TLS 1.3, always, with the ring provider. Each node's certificate names its replica
//!   in a DNS SAN `replica-<id>.raft` ([`certs`]); see [`certs`] for the scheme.
//! * The peers it reaches: the configured ones; any replica whose certificate the CA signed,
//!   learned at the address it connects from (unless [`QuicConfig::accept_unlisted`] is off);
//!   and the voters whose endpoints the voter set advertises ([`Transport::voters_changed`],
//!   [`HostTransport::voters_changed`]), so that a voter added online is reached though no
//!   configuration here names it. Voter endpoints are host endpoints: a replica is reached at
//!   the newest endpoint any group still names for it.
//!
//! Building a transport from a config and certificates:
//!
//! ```no_run
//! # async fn example() -> Result<(), raft_transport_quic::SetupError> {
//! use std::collections::BTreeMap;
//! use raft_core::ReplicaId;
//! use raft_transport_quic::{certs, QuicConfig, QuicTransport, TlsMaterial};
//!
//! let ca = certs::generate_ca().expect("ca");
//! let node = certs::generate_node(&ca, ReplicaId(1)).expect("node cert");
//! let tls = TlsMaterial { ca_cert_pem: ca.cert_pem, cert_pem: node.cert_pem, key_pem: node.key_pem };
//! let peers = BTreeMap::from([(ReplicaId(2), "10.0.0.2:7000".parse().unwrap())]);
//! let config = QuicConfig::new(ReplicaId(1), "0.0.0.0:7000".parse().unwrap(), peers, tls);
//! let transport = QuicTransport::bind(config)?;
//! // Transport::serve(&transport, handler).await, then Transport::call(&transport, ...);
//! // or, on a host, HostTransport::serve and HostTransport::call.
//! # Ok(()) }
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

pub mod certs;
mod config;
mod metrics;
mod peers;
mod refusals;
mod stream;
mod tls;
mod tuning;

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::Duration;

use async_trait::async_trait;
use bytes::{BufMut, Bytes, BytesMut};
use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use quinn::{Connection, RecvStream, SendStream};

use tokio::task::JoinHandle;

use raft_core::codec::wire::{self, FrameLimits};
use raft_core::codec::DecodeError;
use raft_core::io::{
    DefaultGroupHandler, GroupRequestHandler, HostTransport, RequestHandler, Transport,
    TransportError,
};
use raft_core::message::{Request, Response};
use raft_core::{GroupId, ReplicaId, VoterSet};

pub use config::{QuicConfig, TlsMaterial};
pub use metrics::{
    ErrorCounts, ErrorKind, LatencySnapshot, MetricsSnapshot, RpcCounts, LATENCY_BOUNDS_MICROS,
};

use metrics::Metrics;
use peers::{Advertised, Peer, Peers};
use refusals::Refusals;
use stream::{
    code, is_tls_refusal, read_failure, read_frame, write_failure, ReadFailure, StreamFailure,
    LEN_PREFIX,
};
use tuning::{size_buffers, transport_config};

/// A transport that could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SetupError {
    /// The TLS material is unusable.
    #[error("tls setup failed: {0}")]
    Tls(String),
    /// The socket could not be bound or used.
    #[error("socket setup failed: {0}")]
    Io(#[from] std::io::Error),
    /// The configuration is inconsistent.
    #[error("invalid transport config: {0}")]
    Config(String),
}

/// A QUIC transport endpoint: serves inbound RPCs and calls peers. Cheap to share behind an
/// `Arc`; [`Transport::close`] (or [`HostTransport::close`]) shuts it down.
///
/// It is either a single-group node's [`Transport`] or a [`HostTransport`] carrying every group
/// of a host, depending on which `serve` the owner calls (once). Calls through either trait
/// share one connection per peer; a [`Transport`] call is a call in [`GroupId::DEFAULT`], whose
/// frames are plain, so single-group nodes and hosts interoperate on the default group.
pub struct QuicTransport {
    inner: Arc<Inner>,
}

struct Inner {
    me: Weak<Inner>,
    id: ReplicaId,
    config: QuicConfig,
    limits: FrameLimits,
    local_addr: SocketAddr,
    endpoint: Mutex<Option<quinn::Endpoint>>,
    client_config: quinn::ClientConfig,
    peers: Arc<Peers>,
    /// What answers inbound requests: a host's handler, or a single-group node's seen as one
    /// that runs only the default group. Set once, by whichever `serve` comes first.
    handler: OnceLock<Arc<dyn GroupRequestHandler>>,
    closed: AtomicBool,
    metrics: Arc<Metrics>,
    /// Throttled warnings about refused peers, and the verifier's reasons.
    refusals: Arc<Refusals>,
    accept_task: Mutex<Option<JoinHandle<()>>>,
}

/// Locks a std mutex, ignoring poisoning: the guarded values are replaced whole, never left
/// half-updated.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(endpoint) = lock(&self.endpoint).take() {
            endpoint.close(code::CLOSING, b"dropped");
        }
    }
}

impl QuicTransport {
    /// Binds `config.listen` and starts accepting connections.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime (the endpoint's tasks are spawned on the current one).
    pub fn bind(config: QuicConfig) -> Result<QuicTransport, SetupError> {
        let socket = UdpSocket::bind(config.listen)?;
        Self::with_socket(config, socket)
    }

    /// Like [`QuicTransport::bind`] over an already bound socket (`config.listen` is ignored).
    pub fn with_socket(config: QuicConfig, socket: UdpSocket) -> Result<QuicTransport, SetupError> {
        if config.peers.contains_key(&config.id) {
            return Err(SetupError::Config(format!(
                "{} is listed as its own peer",
                config.id
            )));
        }
        if config.frame_bytes_max > u32::MAX as usize || config.frame_bytes_max < 64 {
            return Err(SetupError::Config(
                "frame_bytes_max must be in 64..=u32::MAX".into(),
            ));
        }
        size_buffers(&socket, config.socket_buffer_bytes);
        let metrics = Arc::new(Metrics::default());
        let identity = tls::Identity::parse(&config.tls)?;
        let peers = Arc::new(Peers::new(config.peers.clone()));
        let accept = tls::Accept {
            peers: peers.clone(),
            unlisted: config.accept_unlisted,
        };
        let refusals = Arc::new(Refusals::default());
        let server_tls = tls::server_config(
            &identity,
            config.id,
            accept,
            metrics.clone(),
            refusals.clone(),
        )?;
        let client_tls = tls::client_config(&identity)?;
        let transport = Arc::new(transport_config(&config)?);

        let server_crypto =
            QuicServerConfig::try_from(server_tls).map_err(|e| SetupError::Tls(e.to_string()))?;
        let mut server_config = quinn::ServerConfig::with_crypto(Arc::new(server_crypto));
        server_config.transport_config(transport.clone());
        let client_crypto =
            QuicClientConfig::try_from(client_tls).map_err(|e| SetupError::Tls(e.to_string()))?;
        let mut client_config = quinn::ClientConfig::new(Arc::new(client_crypto));
        client_config.transport_config(transport);

        // The stateless-reset key derives from the node key, so a restarted node resets the
        // connections its previous life left open and peers redial at once.
        let seed = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, identity.key.secret_der());
        let reset_secret = ring::hmac::sign(&seed, b"raft-transport-quic stateless reset");
        let reset_key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, reset_secret.as_ref());
        let mut endpoint_config = quinn::EndpointConfig::new(Arc::new(reset_key));
        // The largest UDP payload this endpoint accepts, which it advertises: a peer's path MTU
        // discovery never probes above it, so without this an `mtu_upper_bound` above quinn's
        // default of 1472 bytes would not take effect.
        endpoint_config
            .max_udp_payload_size(config.mtu_upper_bound.max(1472))
            .map_err(|e| SetupError::Config(format!("mtu_upper_bound: {e}")))?;
        // The connection ids embed a keyed hash that the endpoint checks before answering a
        // packet for a connection it does not know with a stateless reset. With a random key
        // (quinn's default) a restarted node would drop its previous life's ids as invalid and
        // never send the reset, leaving peers on a dead connection until the idle timeout; so
        // this key derives from the node key too.
        let cid_tag = ring::hmac::sign(&seed, b"raft-transport-quic connection ids");
        let mut cid_key = [0u8; 8];
        cid_key.copy_from_slice(&cid_tag.as_ref()[..8]);
        let cid_key = u64::from_le_bytes(cid_key);
        endpoint_config.cid_generator(move || {
            Box::new(quinn_proto::HashedConnectionIdGenerator::from_key(cid_key))
        });
        let runtime = Arc::new(quinn::TokioRuntime);
        let endpoint = quinn::Endpoint::new(endpoint_config, Some(server_config), socket, runtime)?;
        let local_addr = endpoint.local_addr()?;

        let inner = Arc::new_cyclic(|me| Inner {
            me: me.clone(),
            id: config.id,
            limits: config.frame_limits(),
            config,
            local_addr,
            endpoint: Mutex::new(Some(endpoint.clone())),
            client_config,
            peers,
            handler: OnceLock::new(),
            closed: AtomicBool::new(false),
            metrics,
            refusals,
            accept_task: Mutex::new(None),
        });
        let task = tokio::spawn(accept_loop(endpoint, Arc::downgrade(&inner)));
        *lock(&inner.accept_task) = Some(task);
        Ok(QuicTransport { inner })
    }

    /// The address this endpoint listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.inner.local_addr
    }

    /// This endpoint's replica id.
    pub fn id(&self) -> ReplicaId {
        self.inner.id
    }

    /// Where this endpoint reaches replica `id` now: configured, advertised by the voter set,
    /// or learned from its inbound connection.
    pub fn peer_addr(&self, id: ReplicaId) -> Option<SocketAddr> {
        self.inner.peers.get(id).map(|p| p.addr)
    }

    /// The path MTU (largest UDP payload) of the live connection to replica `id`, as path MTU
    /// discovery found it so far; `None` without a connection.
    pub async fn path_mtu(&self, id: ReplicaId) -> Option<u16> {
        let peer = self.inner.peers.get(id)?;
        let slot = peer.slot.lock().await;
        let conn = slot.conn.as_ref().filter(|c| c.close_reason().is_none())?;
        Some(conn.stats().path.current_mtu)
    }

    /// A copy of the counters.
    pub fn metrics(&self) -> MetricsSnapshot {
        self.inner.metrics.snapshot()
    }

    /// Sends an already encoded request frame and returns the raw response frame, unchecked.
    /// For tools and tests that need to put arbitrary bytes on the wire; [`Transport::call`] is
    /// this plus the codec.
    pub async fn call_frame(
        &self,
        to: ReplicaId,
        frame: Bytes,
        timeout: Duration,
    ) -> Result<Bytes, TransportError> {
        self.inner.call_frame(to, frame, timeout).await
    }
}

impl Inner {
    fn endpoint(&self) -> Result<quinn::Endpoint, TransportError> {
        lock(&self.endpoint).clone().ok_or(TransportError::Closed)
    }

    fn fail(&self, e: TransportError) -> TransportError {
        let kind = match &e {
            TransportError::UnknownPeer(_) => ErrorKind::UnknownPeer,
            TransportError::Timeout(_) => ErrorKind::Timeout,
            TransportError::Codec {
                source: DecodeError::TooLarge { .. },
                ..
            } => ErrorKind::FrameTooLarge,
            TransportError::Codec {
                source: DecodeError::UnsupportedVersion { .. },
                ..
            } => ErrorKind::VersionMismatch,
            TransportError::Codec { .. } => ErrorKind::Malformed,
            TransportError::Closed => return e,
            _ => ErrorKind::Unreachable,
        };
        self.metrics.error(kind);
        e
    }

    async fn call_frame(
        &self,
        to: ReplicaId,
        frame: Bytes,
        timeout: Duration,
    ) -> Result<Bytes, TransportError> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(TransportError::Closed);
        }
        let Some(peer) = self.peers.get(to) else {
            return Err(self.fail(TransportError::UnknownPeer(to)));
        };
        if frame.len() > self.limits.frame_bytes_max {
            let source = DecodeError::TooLarge {
                what: "request frame",
                len: frame.len() as u64,
                limit: self.limits.frame_bytes_max as u64,
            };
            return Err(self.fail(TransportError::Codec { peer: to, source }));
        }
        let started = tokio::time::Instant::now();
        match tokio::time::timeout(timeout, self.exchange(to, &peer, frame)).await {
            Ok(Ok(response)) => {
                self.metrics.latency(started.elapsed());
                Ok(response)
            }
            Ok(Err(e)) => Err(self.fail(e)),
            Err(_) => Err(self.fail(TransportError::Timeout(to))),
        }
    }

    /// One request on a stream, retried once on a fresh connection if the cached connection
    /// turns out to be dead before anything was written on it. Once the request was written it
    /// is never sent again: the peer may have acted on it (a forwarded write), so the failure
    /// goes to the caller as `Unreachable`, and the protocol re-sends its own RPCs. Fails with
    /// `NotSent` when nothing was written, so that callers can tell a request the peer never
    /// saw.
    async fn exchange(
        &self,
        to: ReplicaId,
        peer: &Peer,
        frame: Bytes,
    ) -> Result<Bytes, TransportError> {
        let mut last = None;
        for _attempt in 0..2 {
            let conn = self.connection(to, peer).await?;
            match self.rpc_on(to, &conn, frame.clone()).await {
                Ok(bytes) => return Ok(bytes),
                Err(StreamFailure::Final(e)) => return Err(e),
                Err(StreamFailure::NotOpened(e)) => {
                    tracing::debug!(peer = %to, error = %e, "connection lost before a call");
                    self.forget(peer, &conn).await;
                    last = Some(e);
                }
                Err(StreamFailure::Connection(e)) => {
                    tracing::debug!(peer = %to, error = %e, "connection lost during a call");
                    self.forget(peer, &conn).await;
                    // A handshake the peer refused (a TLS alert) never let a stream through,
                    // even if the request was already written.
                    if is_tls_refusal(&e) {
                        self.metrics.error(ErrorKind::TlsRefused);
                        return Err(TransportError::NotSent {
                            peer: to,
                            reason: e.to_string(),
                        });
                    }
                    return Err(TransportError::Unreachable {
                        peer: to,
                        reason: e.to_string(),
                    });
                }
            }
        }
        let reason = last.map_or_else(|| "connection lost".to_owned(), |e| e.to_string());
        Err(TransportError::NotSent { peer: to, reason })
    }

    async fn forget(&self, peer: &Peer, conn: &Connection) {
        let mut slot = peer.slot.lock().await;
        if slot
            .conn
            .as_ref()
            .is_some_and(|c| c.stable_id() == conn.stable_id())
        {
            slot.conn = None;
        }
    }

    /// A live connection to `to`: the cached one, or a new one dialled after any backoff.
    async fn connection(&self, to: ReplicaId, peer: &Peer) -> Result<Connection, TransportError> {
        let mut slot = peer.slot.lock().await;
        if let Some(conn) = &slot.conn {
            if conn.close_reason().is_none() {
                return Ok(conn.clone());
            }
        }
        slot.conn = None;
        if let Some(at) = slot.retry_at {
            tokio::time::sleep_until(at).await;
        }
        let endpoint = self.endpoint()?;
        let unreachable = |reason: String| TransportError::NotSent { peer: to, reason };
        let connecting = endpoint
            .connect_with(self.client_config.clone(), peer.addr, &peer.server_name)
            .map_err(|e| unreachable(e.to_string()))?;
        let result = tokio::time::timeout(self.config.connect_timeout, connecting).await;
        let error = match result {
            Ok(Ok(conn)) => {
                self.metrics.dialled(slot.ever_connected);
                slot.ever_connected = true;
                slot.backoff = Duration::ZERO;
                slot.retry_at = None;
                slot.conn = Some(conn.clone());
                tracing::debug!(replica = %self.id, peer = %to, "connected");
                spawn_connection(conn.clone(), to, self.weak());
                return Ok(conn);
            }
            Ok(Err(e)) => {
                if is_tls_refusal(&e) {
                    self.metrics.error(ErrorKind::TlsRefused);
                    let now = std::time::Instant::now();
                    if let Some(left_out) = self.refusals.admit(&format!("dial {to}"), now) {
                        tracing::warn!(replica = %self.id, peer = %to, addr = %peer.addr,
                            error = %e, left_out, "TLS handshake with peer refused");
                    }
                }
                e.to_string()
            }
            Err(_) => "connect timed out".to_owned(),
        };
        let min = self.config.reconnect_backoff_min;
        slot.backoff = (slot.backoff * 2).clamp(min, self.config.reconnect_backoff_max);
        slot.retry_at = Some(tokio::time::Instant::now() + slot.backoff);
        tracing::debug!(peer = %to, %error, backoff = ?slot.backoff, "connect failed");
        Err(unreachable(error))
    }

    /// A weak handle on this value: background tasks hold only these, so that dropping the
    /// transport closes the endpoint and ends them.
    fn weak(&self) -> Weak<Inner> {
        self.me.clone()
    }

    async fn rpc_on(
        &self,
        to: ReplicaId,
        conn: &Connection,
        frame: Bytes,
    ) -> Result<Bytes, StreamFailure> {
        let (mut send, mut recv) = conn.open_bi().await.map_err(StreamFailure::NotOpened)?;
        let kind_len = frame.len();
        let mut prefix = BytesMut::with_capacity(LEN_PREFIX);
        prefix.put_u32_le(kind_len as u32);
        let mut chunks = [prefix.freeze(), frame];
        if let Err(e) = send.write_all_chunks(&mut chunks).await {
            return Err(write_failure(to, e, kind_len));
        }
        self.metrics.bytes_sent(LEN_PREFIX + kind_len);
        // The stream is ours and was just written; finishing cannot find it closed.
        let _ = send.finish();
        let response = read_frame(&mut recv, self.limits.frame_bytes_max).await;
        match response {
            Ok(bytes) => {
                self.metrics.bytes_received(LEN_PREFIX + bytes.len());
                Ok(bytes)
            }
            Err(ReadFailure::TooLarge(len)) => {
                let _ = recv.stop(code::RESPONSE_TOO_LARGE);
                let source = DecodeError::TooLarge {
                    what: "response frame",
                    len: len as u64,
                    limit: self.limits.frame_bytes_max as u64,
                };
                Err(StreamFailure::Final(TransportError::Codec {
                    peer: to,
                    source,
                }))
            }
            Err(ReadFailure::Read(e)) => Err(read_failure(to, e, kind_len)),
        }
    }
}

/// Accepts inbound connections until the endpoint closes or the transport is dropped.
async fn accept_loop(endpoint: quinn::Endpoint, inner: Weak<Inner>) {
    while let Some(incoming) = endpoint.accept().await {
        let inner = inner.clone();
        tokio::spawn(async move {
            let remote = incoming.remote_address();
            let conn = match incoming.await {
                Ok(conn) => conn,
                Err(e) => {
                    let Some(inner) = inner.upgrade() else { return };
                    if !is_tls_refusal(&e) {
                        tracing::debug!(%remote, error = %e, "inbound handshake failed");
                        return;
                    }
                    // Our verifier counted and noted why when it refused the peer's certificate;
                    // otherwise the peer refused ours (its alert says why).
                    let now = std::time::Instant::now();
                    let (reason, what) = match inner.refusals.take_reason() {
                        Some(r) => (r, "refused a connecting peer's certificate"),
                        None => (
                            e.to_string(),
                            "a connecting peer refused this node's certificate",
                        ),
                    };
                    if let Some(left_out) = inner.refusals.admit(&remote.ip().to_string(), now) {
                        tracing::warn!(replica = %inner.id, %remote, %reason, left_out, "{what}");
                    }
                    return;
                }
            };
            let Some(inner) = inner.upgrade() else { return };
            inner.adopt(conn).await;
        });
    }
}

impl Inner {
    /// Which certificates name a replica this endpoint accepts.
    fn accept(&self) -> tls::Accept {
        tls::Accept {
            peers: self.peers.clone(),
            unlisted: self.config.accept_unlisted,
        }
    }

    /// Identifies an inbound connection's replica, serves it, and reuses it for calls to that
    /// replica when no live connection to it exists yet.
    async fn adopt(&self, conn: Connection) {
        let from = conn
            .peer_identity()
            .and_then(|any| {
                any.downcast::<Vec<rustls::pki_types::CertificateDer<'static>>>()
                    .ok()
            })
            .ok_or_else(|| "no peer certificate".to_owned())
            .and_then(|certs| match certs.first() {
                Some(cert) => tls::replica_of(cert, &self.accept()),
                None => Err("empty peer certificate chain".to_owned()),
            });
        let from = match from {
            Ok(from) => from,
            Err(reason) => {
                // The verifier already refused such certificates; this guards the invariant.
                tracing::warn!(replica = %self.id, %reason, "refused inbound connection");
                self.metrics.error(ErrorKind::TlsRefused);
                conn.close(code::CLOSING, b"unknown replica");
                return;
            }
        };
        self.metrics.accepted();
        tracing::debug!(replica = %self.id, peer = %from, "accepted connection");
        let peer = self.peers.learn(from, conn.remote_address());
        {
            if let Ok(mut slot) = peer.slot.try_lock() {
                if slot
                    .conn
                    .as_ref()
                    .is_none_or(|c| c.close_reason().is_some())
                {
                    slot.conn = Some(conn.clone());
                    slot.backoff = Duration::ZERO;
                    slot.retry_at = None;
                }
            }
        }
        spawn_connection(conn, from, self.weak());
    }
}

/// Serves the streams a peer opens on `conn` until the connection ends.
fn spawn_connection(conn: Connection, from: ReplicaId, inner: Weak<Inner>) {
    tokio::spawn(async move {
        loop {
            let (send, recv) = match conn.accept_bi().await {
                Ok(streams) => streams,
                Err(e) => {
                    tracing::debug!(peer = %from, error = %e, "connection ended");
                    return;
                }
            };
            let Some(inner) = inner.upgrade() else { return };
            tokio::spawn(async move { inner.serve_stream(from, send, recv).await });
        }
    });
}

impl Inner {
    /// Answers one request stream. Nothing the peer sends can panic here: every failure resets
    /// the stream with a code the caller maps to a typed error, and is counted.
    async fn serve_stream(&self, from: ReplicaId, mut send: SendStream, mut recv: RecvStream) {
        let frame = match read_frame(&mut recv, self.limits.frame_bytes_max).await {
            Ok(frame) => frame,
            Err(ReadFailure::TooLarge(len)) => {
                tracing::debug!(peer = %from, len, "refused an oversized request frame");
                self.metrics.error(ErrorKind::FrameTooLarge);
                let _ = recv.stop(code::REQUEST_TOO_LARGE);
                let _ = send.reset(code::REQUEST_TOO_LARGE);
                return;
            }
            Err(ReadFailure::Read(e)) => {
                tracing::debug!(peer = %from, error = %e, "request stream failed");
                let _ = send.reset(code::MALFORMED);
                return;
            }
        };
        self.metrics.bytes_received(LEN_PREFIX + frame.len());
        let (group, request) = match wire::decode_group_request(frame, &self.limits) {
            Ok(routed) => routed,
            Err(DecodeError::UnsupportedVersion { found, .. }) => {
                tracing::warn!(peer = %from, found, "peer speaks another wire version");
                self.metrics.error(ErrorKind::VersionMismatch);
                let mut refusal = BytesMut::new();
                wire::encode_version_refusal(found, &mut refusal);
                self.reply(from, send, refusal).await;
                return;
            }
            Err(e) => {
                tracing::debug!(peer = %from, error = %e, "refused a malformed request");
                self.metrics.error(ErrorKind::Malformed);
                let _ = send.reset(code::MALFORMED);
                return;
            }
        };
        let Some(handler) = self.handler.get().cloned() else {
            let _ = send.reset(code::NOT_SERVING);
            return;
        };
        let kind = request.kind();
        let Some(response) = handler.handle(from, group, request).await else {
            // Turned away unhandled, as before serving: the caller learns it was not acted on.
            tracing::debug!(replica = %self.id, peer = %from, %group,
                "turned away a request of a group this endpoint does not run");
            let _ = send.reset(code::NOT_SERVING);
            return;
        };
        self.metrics.received(kind);
        let mut out = BytesMut::new();
        wire::encode_response(&response, &mut out);
        if out.len() > self.limits.frame_bytes_max {
            tracing::warn!(peer = %from, len = out.len(), "response exceeds the frame limit");
            self.metrics.error(ErrorKind::FrameTooLarge);
            let _ = send.reset(code::RESPONSE_TOO_LARGE);
            return;
        }
        self.reply(from, send, out).await;
    }

    async fn reply(&self, from: ReplicaId, mut send: SendStream, frame: BytesMut) {
        let len = frame.len();
        let mut prefix = BytesMut::with_capacity(LEN_PREFIX);
        prefix.put_u32_le(len as u32);
        let mut chunks = [prefix.freeze(), frame.freeze()];
        match send.write_all_chunks(&mut chunks).await {
            Ok(()) => {
                self.metrics.bytes_sent(LEN_PREFIX + len);
                let _ = send.finish();
            }
            Err(e) => tracing::debug!(peer = %from, error = %e, "response not delivered"),
        }
    }

    async fn shut_down(&self) {
        self.closed.store(true, Ordering::SeqCst);
        let endpoint = lock(&self.endpoint).take();
        if let Some(endpoint) = endpoint {
            endpoint.close(code::CLOSING, b"closing");
            endpoint.wait_idle().await;
        }
        let task = lock(&self.accept_task).take();
        if let Some(task) = task {
            // The accept loop ends once the endpoint is closed; its result carries nothing.
            let _ = task.await;
        }
        for peer in self.peers.all() {
            peer.slot.lock().await.conn = None;
        }
    }
}

impl Inner {
    fn serve(&self, handler: Arc<dyn GroupRequestHandler>) -> Result<(), TransportError> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(TransportError::Closed);
        }
        // A transport is served once, through either trait; a second call keeps the first
        // handler.
        if self.handler.set(handler).is_err() {
            tracing::warn!(replica = %self.id, "served twice; the first handler stays");
        }
        Ok(())
    }

    /// The one call path of both traits: a [`Transport`] call is a call in the default group,
    /// whose frame is the plain one.
    async fn call(
        &self,
        to: ReplicaId,
        group: GroupId,
        request: Request,
        timeout: Duration,
    ) -> Result<Response, TransportError> {
        let kind = request.kind();
        let mut frame = BytesMut::new();
        wire::encode_group_request(group, &request, &mut frame);
        self.metrics.sent(kind);
        let response = self.call_frame(to, frame.freeze(), timeout).await?;
        wire::decode_response(response, &self.limits)
            .map_err(|source| self.fail(TransportError::Codec { peer: to, source }))
    }

    /// Voters advertise `host:port` endpoints, their host's in every group; those resolve to
    /// this endpoint's way to them (a static voter's empty endpoint leaves its configured
    /// address alone). See [`Peers::advertise`] for how the groups' endpoints combine.
    fn voters_changed(&self, group: GroupId, voters: &VoterSet) {
        let mut endpoints = std::collections::BTreeMap::new();
        for (id, v) in voters.iter() {
            if id == self.id || v.endpoint.is_empty() {
                continue;
            }
            match v.endpoint.parse::<SocketAddr>() {
                Ok(addr) => {
                    endpoints.insert(id, addr);
                }
                Err(e) => tracing::warn!(
                    replica = %self.id, %group, peer = %id, endpoint = %v.endpoint, error = %e,
                    "voter endpoint is not an address; keeping the configured one"
                ),
            }
        }
        for change in self.peers.advertise(group, endpoints) {
            match change {
                Advertised::Moved(peer, addr) => tracing::info!(
                    replica = %self.id, %group, %peer, %addr, "peer address from the voter set"
                ),
                Advertised::Conflict(peer, addrs) => tracing::warn!(
                    replica = %self.id, %group, %peer, ?addrs,
                    "groups advertise different endpoints for one host; the newest is used"
                ),
            }
        }
    }
}

/// A single-group node: the default group of [`HostTransport`], over plain frames.
#[async_trait]
impl Transport for QuicTransport {
    async fn serve(&self, handler: Arc<dyn RequestHandler>) -> Result<(), TransportError> {
        self.inner.serve(Arc::new(DefaultGroupHandler(handler)))
    }

    async fn call(
        &self,
        to: ReplicaId,
        request: Request,
        timeout: Duration,
    ) -> Result<Response, TransportError> {
        self.inner
            .call(to, GroupId::DEFAULT, request, timeout)
            .await
    }

    async fn close(&self) {
        self.inner.shut_down().await;
    }

    /// Voters added online advertise `host:port` endpoints; those resolve to this replica's
    /// way to them (a static voter's empty endpoint leaves its configured address alone).
    fn voters_changed(&self, voters: &VoterSet) {
        self.inner.voters_changed(GroupId::DEFAULT, voters);
    }
}

/// A host running many groups: one connection per peer host carries every group's requests,
/// each in a routed frame naming its group (plain for the default group).
#[async_trait]
impl HostTransport for QuicTransport {
    async fn serve(&self, handler: Arc<dyn GroupRequestHandler>) -> Result<(), TransportError> {
        self.inner.serve(handler)
    }

    async fn call(
        &self,
        to: ReplicaId,
        group: GroupId,
        request: Request,
        timeout: Duration,
    ) -> Result<Response, TransportError> {
        self.inner.call(to, group, request, timeout).await
    }

    async fn close(&self) {
        self.inner.shut_down().await;
    }

    /// Voter endpoints are host endpoints: every group's feed one peer table. A replica's
    /// address follows the newest endpoint any group still names for it; one that no group
    /// names any more keeps the address it had (it may still be an observer somewhere).
    fn voters_changed(&self, group: GroupId, voters: &VoterSet) {
        self.inner.voters_changed(group, voters);
    }
}
