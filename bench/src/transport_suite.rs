//! Peer RPCs side by side on loopback, in one run: the QUIC transport (`QuicTransport`, through
//! the `Transport` trait), TCP with the same rustls mutual TLS (ring provider, TLS 1.3, the same
//! certificates) and plain TCP.
//!
//! Every transport carries the same RPC: a Fetch request answered by a Fetch response whose one
//! record holds the payload (none for the small round trip), encoded with raft-core's wire codec
//! and framed by a little-endian `u32` length, as the QUIC transport frames it. The TCP servers
//! decode each request, build the response with the same function and encode it; the TCP
//! clients encode requests and decode responses, so the three paths do the same codec work and
//! differ in the transport alone. QUIC runs one stream per RPC; TCP pipelines the RPCs of a
//! measurement on one connection (answered in order).
//!
//! Measured: the round trip of a small RPC, one at a time (p50, p99, RPCs/s), and the payload
//! throughput of 4 KiB and 64 KiB responses with several RPCs in flight (MiB/s of payload, one
//! direction), with the CPU time the whole process (client and server) spent per RPC and per GiB,
//! which a busy shared machine disturbs less than the rates. Client and server share one
//! 2-worker runtime for every transport. The transports
//! take turns: each measurement runs in rounds, every transport once per round.

use std::collections::BTreeMap;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use hdrhistogram::Histogram;
use raft_core::codec::wire::{self, FrameLimits};
use raft_core::io::{RequestHandler, Transport};
use raft_core::message::{FetchRequest, FetchResponse, ReadBarrier, Request, Response};
use raft_core::{Epoch, Offset, Record, RecordKind, ReplicaId};
use raft_transport_quic::{certs, QuicConfig, QuicTransport, TlsMaterial};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::json;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use crate::reads_suite::{histogram, process_cpu_ns, record};
use crate::{Figure, Size};

const CLIENT: ReplicaId = ReplicaId(1);
const SERVER: ReplicaId = ReplicaId(2);
/// RPCs in flight during the throughput measurements.
const IN_FLIGHT: usize = 8;
/// The deadline of each QUIC call.
const RPC_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the suite could not measure: setup or a transport failing on loopback.
type Failed = String;

/// Maps any error to a [`Failed`] that says what was being done.
fn failed<E: std::fmt::Display>(what: &'static str) -> impl FnOnce(E) -> Failed {
    move |e| format!("{what}: {e}")
}

/// A Fetch asking for `payload` bytes (0: the small RPC).
fn request(payload: usize) -> Request {
    Request::Fetch(FetchRequest {
        epoch: Epoch(1),
        replica: CLIENT,
        replica_directory: None,
        fetch_offset: Offset(1),
        last_fetched_epoch: Epoch(1),
        high_watermark: Some(Offset(1)),
        read_barrier: ReadBarrier(0),
        max_wait: Duration::ZERO,
        max_bytes: payload as u32,
    })
}

/// The answer to a request of [`request`]: one record of `max_bytes` bytes taken from `data`.
fn respond(request: Request, data: &Bytes) -> Response {
    let (epoch, offset, bytes) = match &request {
        Request::Fetch(f) => (f.epoch, f.fetch_offset, f.max_bytes as usize),
        _ => (Epoch(1), Offset(0), 0),
    };
    let records = if bytes == 0 {
        Vec::new()
    } else {
        vec![Record {
            offset,
            epoch,
            kind: RecordKind::Data,
            payload: data.slice(..bytes.min(data.len())),
        }]
    };
    Response::Fetch(FetchResponse {
        error: None,
        epoch,
        leader: Some(SERVER),
        high_watermark: Some(offset.next()),
        diverging: None,
        records,
        read_barrier: ReadBarrier(0),
        snapshot: None,
    })
}

/// The payload bytes a response carries.
fn payload_len(response: &Response) -> usize {
    match response {
        Response::Fetch(f) => f.records.iter().map(|r| r.payload.len()).sum(),
        _ => 0,
    }
}

/// The largest payload of the suite, shared by every response.
fn data() -> Bytes {
    Bytes::from((0..(64u32 << 10)).map(|i| i as u8).collect::<Vec<u8>>())
}

fn frame_len_of_request(payload: usize) -> usize {
    let mut buf = BytesMut::new();
    wire::encode_request(&request(payload), &mut buf);
    buf.len()
}

fn frame_len_of_response(payload: usize) -> usize {
    let mut buf = BytesMut::new();
    wire::encode_response(&respond(request(payload), &data()), &mut buf);
    buf.len()
}

/// One side of an RPC path: issue a request, get the decoded response.
#[async_trait]
trait Client: Send + Sync {
    /// Round trips with one RPC at a time until `stop`.
    async fn round_trips(&self, stop: Instant) -> Result<Histogram<u64>, Failed>;
    /// RPCs asking for `payload` bytes, `IN_FLIGHT` at once, until `stop`; returns the RPCs
    /// completed and the payload bytes received.
    async fn stream(&self, payload: usize, stop: Instant) -> Result<(u64, u64), Failed>;
}

// ---------------------------------------------------------------------------------------------
// QUIC through the Transport trait.

struct QuicHandler {
    data: Bytes,
}

#[async_trait]
impl RequestHandler for QuicHandler {
    async fn handle(&self, _from: ReplicaId, request: Request) -> Response {
        respond(request, &self.data)
    }
}

struct Quic {
    client: Arc<QuicTransport>,
    server: Arc<QuicTransport>,
}

fn tls(ca: &certs::CaMaterial, id: ReplicaId) -> Result<TlsMaterial, Failed> {
    let node = certs::generate_node(ca, id).map_err(failed("node certificate"))?;
    Ok(TlsMaterial {
        ca_cert_pem: ca.cert_pem.clone(),
        cert_pem: node.cert_pem,
        key_pem: node.key_pem,
    })
}

fn quic_endpoint(
    ca: &certs::CaMaterial,
    (id, socket): (ReplicaId, UdpSocket),
    (peer, peer_addr): (ReplicaId, SocketAddr),
) -> Result<Arc<QuicTransport>, Failed> {
    let addr = socket.local_addr().map_err(failed("udp address"))?;
    let config = QuicConfig::new(id, addr, BTreeMap::from([(peer, peer_addr)]), tls(ca, id)?);
    let transport = QuicTransport::with_socket(config, socket).map_err(failed("quic endpoint"))?;
    Ok(Arc::new(transport))
}

async fn quic(ca: &certs::CaMaterial) -> Result<Quic, Failed> {
    let bind = || UdpSocket::bind("127.0.0.1:0").map_err(failed("udp socket"));
    let (c, s) = (bind()?, bind()?);
    let c_addr = c.local_addr().map_err(failed("udp address"))?;
    let s_addr = s.local_addr().map_err(failed("udp address"))?;
    let client = quic_endpoint(ca, (CLIENT, c), (SERVER, s_addr))?;
    let server = quic_endpoint(ca, (SERVER, s), (CLIENT, c_addr))?;
    server
        .serve(Arc::new(QuicHandler { data: data() }))
        .await
        .map_err(failed("quic serve"))?;
    Ok(Quic { client, server })
}

impl Quic {
    async fn call(&self, payload: usize) -> Result<usize, Failed> {
        let response = self
            .client
            .call(SERVER, request(payload), RPC_TIMEOUT)
            .await
            .map_err(failed("quic call"))?;
        Ok(payload_len(&response))
    }
}

#[async_trait]
impl Client for Quic {
    async fn round_trips(&self, stop: Instant) -> Result<Histogram<u64>, Failed> {
        let mut hist = histogram();
        while Instant::now() < stop {
            let t = Instant::now();
            self.call(0).await?;
            record(&mut hist, t.elapsed().as_micros() as u64);
        }
        Ok(hist)
    }

    async fn stream(&self, payload: usize, stop: Instant) -> Result<(u64, u64), Failed> {
        let worker = || async move {
            let (mut rpcs, mut bytes) = (0u64, 0u64);
            while Instant::now() < stop {
                bytes += self.call(payload).await? as u64;
                rpcs += 1;
            }
            Ok::<_, Failed>((rpcs, bytes))
        };
        let workers: Vec<_> = (0..IN_FLIGHT).map(|_| worker()).collect();
        // The workers share one task: QUIC streams are independent, so this keeps IN_FLIGHT
        // RPCs outstanding without a task per worker.
        let mut total = (0, 0);
        for done in join_all(workers).await {
            let (rpcs, bytes) = done?;
            total = (total.0 + rpcs, total.1 + bytes);
        }
        Ok(total)
    }
}

/// Polls every future to completion on the current task; returns their outputs.
async fn join_all<F: std::future::Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut set: Vec<std::pin::Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    let mut outputs = Vec::with_capacity(set.len());
    std::future::poll_fn(|cx| {
        set.retain_mut(|f| match f.as_mut().poll(cx) {
            std::task::Poll::Ready(out) => {
                outputs.push(out);
                false
            }
            std::task::Poll::Pending => true,
        });
        if set.is_empty() {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
    outputs
}

// ---------------------------------------------------------------------------------------------
// TCP, with or without TLS: length-prefixed wire frames, pipelined on one connection.

async fn read_frame<R: AsyncRead + Unpin>(r: &mut R, buf: &mut BytesMut) -> std::io::Result<Bytes> {
    let len = r.read_u32_le().await? as usize;
    if len > FrameLimits::FRAME_BYTES_MAX_DEFAULT {
        return Err(std::io::Error::other("frame too large"));
    }
    buf.clear();
    buf.resize(len, 0);
    r.read_exact(&mut buf[..]).await?;
    Ok(buf.split().freeze())
}

async fn write_frame<W: AsyncWrite + Unpin>(w: &mut W, frame: &[u8]) -> std::io::Result<()> {
    w.write_u32_le(frame.len() as u32).await?;
    w.write_all(frame).await
}

/// Serves one connection: decode, answer, encode, in order.
async fn serve_conn<S: AsyncRead + AsyncWrite + Unpin>(stream: S, data: Bytes) {
    let (r, w) = tokio::io::split(stream);
    let mut r = BufReader::with_capacity(128 << 10, r);
    let mut w = BufWriter::with_capacity(128 << 10, w);
    let limits = FrameLimits::default();
    let mut buf = BytesMut::new();
    let mut out = BytesMut::new();
    loop {
        let Ok(frame) = read_frame(&mut r, &mut buf).await else {
            return;
        };
        let Ok(req) = wire::decode_request(frame, &limits) else {
            return;
        };
        out.clear();
        wire::encode_response(&respond(req, &data), &mut out);
        if write_frame(&mut w, &out).await.is_err() {
            return;
        }
        // Flush once no further request is already buffered: pipelined requests share writes.
        if r.buffer().is_empty() && w.flush().await.is_err() {
            return;
        }
    }
}

struct TcpServer {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TcpServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn tcp_server(acceptor: Option<tokio_rustls::TlsAcceptor>) -> Result<TcpServer, Failed> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(failed("tcp listen"))?;
    let addr = listener.local_addr().map_err(failed("tcp address"))?;
    let data = data();
    let task = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let _ = stream.set_nodelay(true);
            let data = data.clone();
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                match acceptor {
                    Some(a) => {
                        if let Ok(tls) = a.accept(stream).await {
                            serve_conn(tls, data).await;
                        }
                    }
                    None => serve_conn(stream, data).await,
                }
            });
        }
    });
    Ok(TcpServer { addr, task })
}

/// A TCP or TCP + TLS client: dials a new connection per measurement.
struct Tcp {
    server: TcpServer,
    connector: Option<tokio_rustls::TlsConnector>,
}

type Stream = Box<dyn AsyncStream>;
trait AsyncStream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> AsyncStream for T {}

impl Tcp {
    async fn connect(&self) -> Result<Stream, Failed> {
        let tcp = TcpStream::connect(self.server.addr)
            .await
            .map_err(failed("tcp connect"))?;
        tcp.set_nodelay(true).map_err(failed("tcp nodelay"))?;
        Ok(match &self.connector {
            Some(c) => {
                let name = ServerName::try_from(certs::replica_dns_name(SERVER))
                    .map_err(failed("server name"))?;
                Box::new(
                    c.connect(name, tcp)
                        .await
                        .map_err(failed("tls handshake"))?,
                )
            }
            None => Box::new(tcp),
        })
    }
}

/// Writes requests for `payload` bytes while a permit of `window` is free, until `stop`;
/// counts them in `sent`. Returns the writer (dropping it would close the connection).
async fn write_requests<W: AsyncWrite + Unpin>(
    w: W,
    payload: usize,
    stop: Instant,
    window: Arc<Semaphore>,
    sent: Arc<AtomicU64>,
) -> Result<BufWriter<W>, Failed> {
    let mut w = BufWriter::new(w);
    let mut out = BytesMut::new();
    while Instant::now() < stop {
        let Ok(permit) = window.acquire().await else {
            break;
        };
        permit.forget();
        out.clear();
        wire::encode_request(&request(payload), &mut out);
        write_frame(&mut w, &out)
            .await
            .map_err(failed("tcp write"))?;
        w.flush().await.map_err(failed("tcp flush"))?;
        sent.fetch_add(1, Ordering::SeqCst);
    }
    Ok(w)
}

#[async_trait]
impl Client for Tcp {
    async fn round_trips(&self, stop: Instant) -> Result<Histogram<u64>, Failed> {
        let mut stream = self.connect().await?;
        let limits = FrameLimits::default();
        let mut hist = histogram();
        let mut buf = BytesMut::new();
        let mut out = BytesMut::new();
        while Instant::now() < stop {
            let t = Instant::now();
            out.clear();
            wire::encode_request(&request(0), &mut out);
            // One write per frame: the length and the body go out in one segment (and one TLS
            // record), as a real client would send them.
            let mut frame = Vec::with_capacity(4 + out.len());
            frame.extend_from_slice(&(out.len() as u32).to_le_bytes());
            frame.extend_from_slice(&out);
            stream
                .write_all(&frame)
                .await
                .map_err(failed("tcp write"))?;
            stream.flush().await.map_err(failed("tcp flush"))?;
            let resp = read_frame(&mut stream, &mut buf)
                .await
                .map_err(failed("tcp read"))?;
            wire::decode_response(resp, &limits).map_err(failed("response frame"))?;
            record(&mut hist, t.elapsed().as_micros() as u64);
        }
        Ok(hist)
    }

    async fn stream(&self, payload: usize, stop: Instant) -> Result<(u64, u64), Failed> {
        let (r, w) = tokio::io::split(self.connect().await?);
        let window = Arc::new(Semaphore::new(IN_FLIGHT));
        let sent = Arc::new(AtomicU64::new(0));
        let writer = tokio::spawn(write_requests(
            w,
            payload,
            stop,
            window.clone(),
            sent.clone(),
        ));
        let mut r = BufReader::with_capacity(128 << 10, r);
        let limits = FrameLimits::default();
        let mut buf = BytesMut::new();
        let (mut rpcs, mut bytes) = (0u64, 0u64);
        // Past the deadline the writer sends at most one more request (all permits are back
        // once every counted request is answered), whose answer is left unread.
        while Instant::now() < stop || rpcs < sent.load(Ordering::SeqCst) {
            if writer.is_finished() && rpcs >= sent.load(Ordering::SeqCst) {
                // The writer stopped early (it failed): nothing more will arrive.
                break;
            }
            let frame = read_frame(&mut r, &mut buf)
                .await
                .map_err(failed("tcp read"))?;
            let resp = wire::decode_response(frame, &limits).map_err(failed("response frame"))?;
            rpcs += 1;
            bytes += payload_len(&resp) as u64;
            window.add_permits(1);
        }
        writer.await.map_err(failed("tcp writer task"))??;
        Ok((rpcs, bytes))
    }
}

/// This node's certificate chain and key, parsed.
fn identity(
    ca: &certs::CaMaterial,
    id: ReplicaId,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), Failed> {
    let m = tls(ca, id)?;
    let chain = CertificateDer::pem_slice_iter(m.cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(failed("node certificate"))?;
    let key = PrivateKeyDer::from_pem_slice(m.key_pem.as_bytes()).map_err(failed("node key"))?;
    Ok((chain, key))
}

/// The TLS configurations for both sides, from the same certificates as QUIC uses.
fn tcp_tls(
    ca: &certs::CaMaterial,
) -> Result<(tokio_rustls::TlsAcceptor, tokio_rustls::TlsConnector), Failed> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(ca.cert_pem.as_bytes()) {
        let ca = ca.map_err(failed("ca certificate"))?;
        roots.add(ca).map_err(failed("ca certificate"))?;
    }
    let roots = Arc::new(roots);
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        roots.clone(),
        provider.clone(),
    )
    .build()
    .map_err(failed("client verifier"))?;
    let (chain, key) = identity(ca, SERVER)?;
    let server = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(failed("tls 1.3"))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .map_err(failed("server config"))?;
    let (chain, key) = identity(ca, CLIENT)?;
    let client = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(failed("tls 1.3"))?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .map_err(failed("client config"))?;
    Ok((
        tokio_rustls::TlsAcceptor::from(Arc::new(server)),
        tokio_rustls::TlsConnector::from(Arc::new(client)),
    ))
}

// ---------------------------------------------------------------------------------------------

/// Measured figures of one transport, summed over the rounds.
struct Results {
    rtt: Histogram<u64>,
    rtt_secs: f64,
    /// CPU time of the whole process (client and server) during the round trips.
    rtt_cpu_ns: Option<u64>,
    /// Per payload size.
    bulk: Vec<Bulk>,
}

/// The throughput of one payload size, summed over the rounds.
struct Bulk {
    payload: usize,
    rpcs: u64,
    bytes: u64,
    secs: f64,
    /// MiB/s of each round.
    rounds: Vec<f64>,
    /// CPU time of the whole process.
    cpu_ns: Option<u64>,
}

impl Results {
    fn new(payloads: &[usize]) -> Results {
        Results {
            rtt: histogram(),
            rtt_secs: 0.0,
            rtt_cpu_ns: Some(0),
            bulk: payloads
                .iter()
                .map(|&payload| Bulk {
                    payload,
                    rpcs: 0,
                    bytes: 0,
                    secs: 0.0,
                    rounds: Vec::new(),
                    cpu_ns: Some(0),
                })
                .collect(),
        }
    }

    fn mib_per_s(&self, i: usize) -> f64 {
        let b = &self.bulk[i];
        b.bytes as f64 / (1 << 20) as f64 / b.secs.max(1e-9)
    }
}

/// Measures every client in turn, `rounds` times per measurement, so that a slow spell of a
/// shared machine is spread over all transports rather than landing on one.
async fn measure(
    clients: &[&dyn Client],
    rounds: u32,
    window: Duration,
    payloads: &[usize],
) -> Result<Vec<Results>, Failed> {
    let slot = window / rounds;
    let mut results: Vec<Results> = clients.iter().map(|_| Results::new(payloads)).collect();
    for client in clients {
        // Warm up: connections, handshakes, buffers.
        client
            .round_trips(Instant::now() + Duration::from_millis(50))
            .await?;
    }
    for _ in 0..rounds {
        for (client, r) in clients.iter().zip(&mut results) {
            let cpu = process_cpu_ns();
            let started = Instant::now();
            let hist = client.round_trips(started + slot).await?;
            r.rtt_secs += started.elapsed().as_secs_f64();
            r.rtt_cpu_ns = add_cpu(r.rtt_cpu_ns, cpu);
            // Both histograms resize themselves: merging cannot run out of range.
            r.rtt.add(hist).expect("auto-resizing histograms merge");
        }
    }
    for (i, &payload) in payloads.iter().enumerate() {
        for _ in 0..rounds {
            for (client, r) in clients.iter().zip(&mut results) {
                let cpu = process_cpu_ns();
                let started = Instant::now();
                let (rpcs, bytes) = client.stream(payload, started + slot).await?;
                let secs = started.elapsed().as_secs_f64();
                let b = &mut r.bulk[i];
                b.cpu_ns = add_cpu(b.cpu_ns, cpu);
                b.rpcs += rpcs;
                b.bytes += bytes;
                b.secs += secs;
                b.rounds
                    .push((bytes as f64 / (1 << 20) as f64 / secs).round());
            }
        }
    }
    Ok(results)
}

/// Adds the CPU time spent since `before` to `total` (none once either is unknown).
fn add_cpu(total: Option<u64>, before: Option<u64>) -> Option<u64> {
    Some(total? + process_cpu_ns()?.saturating_sub(before?))
}

/// `cpu_ns / n` in microseconds, or null.
fn per(cpu_ns: Option<u64>, n: f64, unit_ns: f64) -> serde_json::Value {
    match cpu_ns {
        Some(c) if n > 0.0 => json!(r2(c as f64 / unit_ns / n)),
        _ => serde_json::Value::Null,
    }
}

fn r2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// The names of the transports, in the order [`measure_all`] measures them.
const TRANSPORTS: [&str; 3] = ["quic", "tcp+tls", "tcp"];

/// Sets up the three transports on loopback and measures them.
async fn measure_all(
    rounds: u32,
    window: Duration,
    payloads: &[usize],
) -> Result<Vec<Results>, Failed> {
    let ca = certs::generate_ca().map_err(failed("cluster CA"))?;
    let q = quic(&ca).await?;
    let (acceptor, connector) = tcp_tls(&ca)?;
    let tls = Tcp {
        server: tcp_server(Some(acceptor)).await?,
        connector: Some(connector),
    };
    let tcp = Tcp {
        server: tcp_server(None).await?,
        connector: None,
    };
    let results = measure(&[&q, &tls, &tcp], rounds, window, payloads).await;
    q.client.close().await;
    q.server.close().await;
    results
}

/// The figures of one transport.
fn figures(name: &str, r: &Results, window: Duration, rounds: u32) -> Vec<Figure> {
    let mut out = vec![Figure {
        suite: "transport",
        name: format!("rtt {name}"),
        params: json!({
            "transport": name,
            "request_frame_bytes": frame_len_of_request(0) + 4,
            "response_frame_bytes": frame_len_of_response(0) + 4,
            "in_flight": 1, "window_s": window.as_secs_f64(), "rounds": rounds,
            "link": "loopback",
        }),
        values: json!({
            "rpcs_per_s": (r.rtt.len() as f64 / r.rtt_secs.max(1e-9)).round(),
            "p50_us": r.rtt.value_at_quantile(0.5),
            "p99_us": r.rtt.value_at_quantile(0.99),
            "p999_us": r.rtt.value_at_quantile(0.999),
            "cpu_us_per_rpc": per(r.rtt_cpu_ns, r.rtt.len() as f64, 1e3),
        }),
    }];
    for (i, b) in r.bulk.iter().enumerate() {
        out.push(Figure {
            suite: "transport",
            name: format!("bulk {name}"),
            params: json!({
                "transport": name, "payload_bytes": b.payload,
                "response_frame_bytes": frame_len_of_response(b.payload) + 4,
                "in_flight": IN_FLIGHT, "direction": "responses (server to client)",
                "window_s": window.as_secs_f64(), "rounds": rounds, "link": "loopback",
            }),
            values: json!({
                "rpcs_per_s": (b.rpcs as f64 / b.secs.max(1e-9)).round(),
                "mib_per_s": r.mib_per_s(i).round(),
                "mib_per_s_rounds": b.rounds,
                "cpu_us_per_rpc": per(b.cpu_ns, b.rpcs as f64, 1e3),
                "cpu_s_per_gib": per(b.cpu_ns, b.bytes as f64 / (1u64 << 30) as f64, 1e9),
            }),
        });
    }
    out
}

/// QUIC (`q`) against TCP + TLS (`t`), with the targets of the transport issue.
fn comparison(q: &Results, t: &Results) -> Figure {
    let mut values = json!({
        "rtt_p50_ratio": r2(q.rtt.value_at_quantile(0.5) as f64
            / t.rtt.value_at_quantile(0.5).max(1) as f64),
        "rtt_p50_ratio_target_max": 1.5,
        "bulk_ratio_target_min": 0.8,
    });
    // CPU per RPC or per byte: the cost side of the same comparison, steadier on a busy machine.
    let per_rpc = |r: &Results| Some(r.rtt_cpu_ns? as f64 / r.rtt.len().max(1) as f64);
    if let (Some(qc), Some(tc)) = (per_rpc(q), per_rpc(t)) {
        values["rtt_cpu_ratio"] = json!(r2(qc / tc.max(1e-9)));
    }
    let per_byte = |b: &Bulk| Some(b.cpu_ns? as f64 / b.bytes.max(1) as f64);
    for (i, (qb, tb)) in q.bulk.iter().zip(&t.bulk).enumerate() {
        let k = qb.payload >> 10;
        values[format!("bulk_{k}k_ratio")] = json!(r2(q.mib_per_s(i) / t.mib_per_s(i).max(1e-9)));
        if let (Some(qc), Some(tc)) = (per_byte(qb), per_byte(tb)) {
            values[format!("bulk_{k}k_cpu_ratio")] = json!(r2(qc / tc.max(1e-12)));
        }
    }
    Figure {
        suite: "transport",
        name: "quic against tcp+tls".into(),
        params: json!({ "in_flight": IN_FLIGHT }),
        values,
    }
}

/// Runs the suite. A failure is printed and leaves the suite without figures (which `--check`
/// reports).
pub fn run(size: Size) -> Vec<Figure> {
    let window = size.window();
    let rounds = size.pick(3, 1);
    let payloads = [4usize << 10, 64 << 10];
    let results = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(failed("runtime"))
        .and_then(|rt| rt.block_on(measure_all(rounds, window, &payloads)));
    let results = match results {
        Ok(r) => r,
        Err(e) => {
            eprintln!("raft-bench: transport suite failed: {e}");
            return Vec::new();
        }
    };
    let mut out = Vec::new();
    for (name, r) in TRANSPORTS.iter().zip(&results) {
        out.extend(figures(name, r, window, rounds));
    }
    if let [q, t, _] = &results[..] {
        out.push(comparison(q, t));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_response_carries_the_requested_payload_through_the_codec() {
        let limits = FrameLimits::default();
        for payload in [0usize, 4 << 10, 64 << 10] {
            let mut buf = BytesMut::new();
            wire::encode_request(&request(payload), &mut buf);
            let req = wire::decode_request(buf.freeze(), &limits).expect("request decodes");
            let mut buf = BytesMut::new();
            wire::encode_response(&respond(req, &data()), &mut buf);
            let resp = wire::decode_response(buf.freeze(), &limits).expect("response decodes");
            assert_eq!(payload_len(&resp), payload);
        }
    }

    /// Every TCP path answers each RPC with exactly the requested payload, pipelined or not.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn tcp_paths_answer_every_rpc_in_full() {
        let ca = certs::generate_ca().expect("ca");
        let (acceptor, connector) = tcp_tls(&ca).expect("tls configurations");
        let paths = [
            Tcp {
                server: tcp_server(Some(acceptor)).await.expect("tls server"),
                connector: Some(connector),
            },
            Tcp {
                server: tcp_server(None).await.expect("tcp server"),
                connector: None,
            },
        ];
        for tcp in &paths {
            let rtt = tcp
                .round_trips(Instant::now() + Duration::from_millis(20))
                .await
                .expect("round trips");
            assert!(!rtt.is_empty(), "round trips completed");
            let (rpcs, bytes) = tcp
                .stream(4 << 10, Instant::now() + Duration::from_millis(20))
                .await
                .expect("stream");
            assert!(rpcs > 0, "streamed RPCs completed");
            assert_eq!(bytes, rpcs * (4 << 10), "each response carried its payload");
        }
    }

    /// A path that breaks is reported as an error of the suite, not a panic.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_refused_connection_is_an_error() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("listen");
        let addr = listener.local_addr().expect("address");
        // Nobody listens there any more: connecting is refused.
        drop(listener);
        let tcp = Tcp {
            server: TcpServer {
                addr,
                task: tokio::spawn(async {}),
            },
            connector: None,
        };
        let err = tcp
            .round_trips(Instant::now() + Duration::from_millis(20))
            .await
            .expect_err("no server");
        assert!(err.starts_with("tcp connect"), "{err}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn quic_path_answers_every_rpc_in_full() {
        let ca = certs::generate_ca().expect("ca");
        let q = quic(&ca).await.expect("quic endpoints");
        let (rpcs, bytes) = q
            .stream(64 << 10, Instant::now() + Duration::from_millis(20))
            .await
            .expect("stream");
        assert!(rpcs > 0, "streamed RPCs completed");
        assert_eq!(
            bytes,
            rpcs * (64 << 10),
            "each response carried its payload"
        );
        q.client.close().await;
        q.server.close().await;
    }
}
