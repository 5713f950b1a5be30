//! The QUIC path: raft-transport-quic through the `Transport` trait, one stream per RPC.

use std::collections::BTreeMap;
use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use bytes::Bytes;
use hdrhistogram::Histogram;
use raft_core::io::{RequestHandler, Transport};
use raft_core::message::{Request, Response};
use raft_core::ReplicaId;
use raft_transport_quic::{certs, QuicConfig, QuicTransport};

use super::rpc::{
    data, failed, payload_len, request, respond, tls, Client, Failed, CLIENT, IN_FLIGHT,
    RPC_TIMEOUT, SERVER,
};
use crate::measure::{histogram, record};
struct QuicHandler {
    data: Bytes,
}

#[async_trait]
impl RequestHandler for QuicHandler {
    async fn handle(&self, _from: ReplicaId, request: Request) -> Response {
        respond(request, &self.data)
    }
}

pub(super) struct Quic {
    pub(super) client: Arc<QuicTransport>,
    pub(super) server: Arc<QuicTransport>,
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

pub(super) async fn quic(ca: &certs::CaMaterial) -> Result<Quic, Failed> {
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
pub(super) async fn join_all<F: std::future::Future>(futures: Vec<F>) -> Vec<F::Output> {
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

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
