//! The TCP paths, with or without TLS (rustls, the same certificates as QUIC): length-prefixed
//! wire frames, pipelined on one connection and answered in order.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use hdrhistogram::Histogram;
use raft_core::codec::wire::{self, FrameLimits};
use raft_core::ReplicaId;
use raft_transport_quic::certs;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use super::rpc::{
    data, failed, payload_len, request, respond, tls, Client, Failed, CLIENT, IN_FLIGHT, SERVER,
};
use crate::measure::{histogram, record};
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

pub(super) struct TcpServer {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TcpServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub(super) async fn tcp_server(
    acceptor: Option<tokio_rustls::TlsAcceptor>,
) -> Result<TcpServer, Failed> {
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
pub(super) struct Tcp {
    pub(super) server: TcpServer,
    pub(super) connector: Option<tokio_rustls::TlsConnector>,
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
pub(super) fn tcp_tls(
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

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
}
