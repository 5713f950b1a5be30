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

mod quic;
mod rpc;
mod tcp;

use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use raft_core::io::Transport;
use raft_transport_quic::certs;
use serde_json::json;

use crate::measure::{histogram, process_cpu_ns};
use crate::{Figure, Size};

use self::quic::quic;
use self::rpc::{failed, frame_len_of_request, frame_len_of_response, Client, Failed, IN_FLIGHT};
use self::tcp::{tcp_server, tcp_tls, Tcp};

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
