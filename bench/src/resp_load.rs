//! A small asynchronous RESP2 load generator, the bench's own, so that `raft-node` and a
//! `redis-server` baseline are driven by exactly the same client code.
//!
//! The shape follows etcd's benchmark tool: `C` TCP connections carry `N` clients in total, each
//! connection keeping `N / C` requests outstanding (pipelined; with one client per connection it
//! issues sequential requests). A connection reads whatever replies have arrived, records each
//! one's latency (from the moment its request was written) in an HDR histogram, and writes one
//! new request per reply in a single `write`. Replies that complete inside the measurement
//! window count; the warm-up before it does not.
//!
//! Keys are 8 bytes (`k` and seven digits) drawn uniformly from a key space; values are a fixed
//! byte repeated. [`Op::Mixed`] draws each request from [`crate::mixed_workload`]'s mix instead,
//! and every reply is also counted under its request's kind. The generator runs on one thread (a current-thread runtime), like
//! `redis-benchmark`, so that it takes as little of the machine's two cores as it can.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The request every client issues.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// `SET key value`.
    Set,
    /// `GET key`.
    Get,
    /// Sessions in hashes and a sorted-set leaderboard ([`crate::mixed_workload`]); the key
    /// space is the number of sessions, the value size the session's `cart` field.
    Mixed,
}

impl Op {
    /// The kinds of request this op issues, as [`Outcome::by_kind`] names them.
    pub fn kinds(self) -> &'static [&'static str] {
        match self {
            Op::Set => &["SET"],
            Op::Get => &["GET"],
            Op::Mixed => &crate::mixed_workload::KINDS,
        }
    }
}

/// One load run.
#[derive(Clone, Debug)]
pub struct Load {
    /// Client ports on 127.0.0.1; connection `i` goes to `ports[i % len]`.
    pub ports: Vec<u16>,
    /// TCP connections.
    pub connections: usize,
    /// Outstanding requests in total, spread evenly over the connections (at least one each).
    pub clients: usize,
    /// What each request does.
    pub op: Op,
    /// Value size of `SET`.
    pub value_bytes: usize,
    /// Keys are drawn from `0..keyspace`.
    pub keyspace: u64,
    /// Commands sent once on every connection before the load (e.g. `READMODE sequential`);
    /// each must not be answered with an error.
    pub setup: Vec<Vec<String>>,
    /// Load before the measurement window.
    pub warmup: Duration,
    /// The measurement window.
    pub window: Duration,
}

/// What a run measured.
pub struct Outcome {
    /// Successful replies inside the window.
    pub ok: u64,
    /// Error replies inside the window.
    pub errors: u64,
    /// The first error reply seen, if any.
    pub first_error: Option<String>,
    /// The window's length in seconds.
    pub seconds: f64,
    /// Latencies of the successful replies, in microseconds.
    pub hist: Histogram<u64>,
    /// The same per request kind, in the order of [`Op::kinds`].
    pub by_kind: Vec<KindOutcome>,
}

/// What a run measured for one kind of request.
pub struct KindOutcome {
    /// The command, e.g. `HGETALL`.
    pub kind: &'static str,
    /// Successful replies inside the window.
    pub ok: u64,
    /// Error replies inside the window.
    pub errors: u64,
    /// Latencies of the successful replies, in microseconds.
    pub hist: Histogram<u64>,
}

impl Outcome {
    /// Successful requests per second.
    pub fn rate(&self) -> f64 {
        self.ok as f64 / self.seconds
    }
}

/// The longest reply the parser accepts; anything longer is a protocol error here.
const REPLY_BYTES_MAX: usize = 64 << 20;

/// The length of the first complete RESP2 reply in `buf` and whether it is an error reply;
/// `Ok(None)` when more bytes are needed.
pub fn reply_len(buf: &[u8]) -> Result<Option<(usize, bool)>, String> {
    let Some(&kind) = buf.first() else {
        return Ok(None);
    };
    let Some(eol) = buf.windows(2).position(|w| w == b"\r\n") else {
        return Ok(None);
    };
    let head = eol + 2;
    let number = || -> Result<i64, String> {
        std::str::from_utf8(&buf[1..eol])
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("bad length in {:?}", String::from_utf8_lossy(&buf[..eol])))
    };
    match kind {
        b'+' | b':' => Ok(Some((head, false))),
        b'-' => Ok(Some((head, true))),
        b'$' => {
            let n = number()?;
            if n < 0 {
                return Ok(Some((head, false)));
            }
            let n = usize::try_from(n).map_err(|e| e.to_string())?;
            if n > REPLY_BYTES_MAX {
                return Err(format!("bulk reply of {n} bytes"));
            }
            let total = head + n + 2;
            Ok((buf.len() >= total).then_some((total, false)))
        }
        b'*' => {
            let n = number()?;
            let mut at = head;
            for _ in 0..n.max(0) {
                match reply_len(&buf[at..])? {
                    Some((len, _)) => at += len,
                    None => return Ok(None),
                }
            }
            Ok(Some((at, false)))
        }
        other => Err(format!("unexpected reply type byte {other:#04x}")),
    }
}

/// The text of a simple, error or bulk reply (the whole reply otherwise).
pub fn reply_text(reply: &[u8]) -> String {
    let text = String::from_utf8_lossy(reply);
    let body = text.trim_end_matches("\r\n");
    match reply.first() {
        Some(b'$') => body.split_once("\r\n").map_or("", |(_, b)| b).to_string(),
        Some(b'+' | b'-' | b':') => body[1..].to_string(),
        _ => text.into_owned(),
    }
}

/// Appends one RESP2 command.
pub fn encode(out: &mut Vec<u8>, args: &[&[u8]]) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

/// An 8-byte key: `k` and seven digits.
pub fn key(n: u64) -> [u8; 8] {
    let mut k = *b"k0000000";
    let mut n = n % 10_000_000;
    for slot in k[1..].iter_mut().rev() {
        *slot = b'0' + (n % 10) as u8;
        n /= 10;
    }
    k
}

/// A tiny deterministic generator for key choice (xorshift64*); the seed must not be 0.
pub struct Rng(pub u64);

impl Rng {
    /// The next draw.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// A RESP connection for control commands (setup, status, preloading).
pub struct Conn {
    stream: TcpStream,
    inbuf: Vec<u8>,
}

impl Conn {
    /// Connects to `127.0.0.1:port` within `timeout`.
    pub async fn connect(port: u16, timeout: Duration) -> Result<Conn, String> {
        let stream = tokio::time::timeout(timeout, TcpStream::connect(("127.0.0.1", port)))
            .await
            .map_err(|_| format!("connect to port {port} timed out"))?
            .map_err(|e| format!("connect to port {port}: {e}"))?;
        stream
            .set_nodelay(true)
            .map_err(|e| format!("set_nodelay: {e}"))?;
        Ok(Conn {
            stream,
            inbuf: Vec::with_capacity(16 << 10),
        })
    }

    /// Sends `cmds` in one write and returns their replies (raw, with whether each is an error),
    /// failing if they do not all arrive within `timeout`.
    pub async fn pipeline(
        &mut self,
        cmds: &[Vec<&[u8]>],
        timeout: Duration,
    ) -> Result<Vec<(bool, Vec<u8>)>, String> {
        let mut out = Vec::new();
        for c in cmds {
            encode(&mut out, c);
        }
        let deadline = tokio::time::Instant::now() + timeout;
        tokio::time::timeout_at(deadline, self.stream.write_all(&out))
            .await
            .map_err(|_| "write timed out".to_string())?
            .map_err(|e| format!("write: {e}"))?;
        let mut replies = Vec::with_capacity(cmds.len());
        while replies.len() < cmds.len() {
            if let Some((len, is_error)) = reply_len(&self.inbuf)? {
                replies.push((is_error, self.inbuf.drain(..len).collect()));
                continue;
            }
            let n = tokio::time::timeout_at(deadline, self.stream.read_buf(&mut self.inbuf))
                .await
                .map_err(|_| "reply timed out".to_string())?
                .map_err(|e| format!("read: {e}"))?;
            if n == 0 {
                return Err("connection closed".into());
            }
        }
        Ok(replies)
    }

    /// Sends one command and returns its reply's text; an error reply is an `Err`.
    pub async fn cmd(&mut self, args: &[&str], timeout: Duration) -> Result<String, String> {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        let mut replies = self.pipeline(&[args], timeout).await?;
        match replies.pop() {
            Some((false, raw)) => Ok(reply_text(&raw)),
            Some((true, raw)) => Err(reply_text(&raw)),
            None => Err("no reply".into()),
        }
    }
}

/// Sets every key of `0..keyspace` to a value of `value_bytes` through `port`, in pipelines.
pub async fn preload(port: u16, keyspace: u64, value_bytes: usize) -> Result<(), String> {
    let mut conn = Conn::connect(port, Duration::from_secs(5)).await?;
    let value = vec![b'v'; value_bytes];
    let mut n = 0;
    while n < keyspace {
        let to = keyspace.min(n + PRELOAD_BATCH);
        set_keys(&mut conn, n..to, &value)
            .await
            .map_err(|e| format!("preload: {e}"))?;
        n = to;
    }
    Ok(())
}

/// Keys SET per pipeline by [`preload`].
pub const PRELOAD_BATCH: u64 = 256;

/// SETs every key of `keys` to `value` in one pipeline: the text of the first error reply, or
/// of the failure, if any.
pub async fn set_keys(
    conn: &mut Conn,
    keys: std::ops::Range<u64>,
    value: &[u8],
) -> Result<(), String> {
    let keys: Vec<[u8; 8]> = keys.map(key).collect();
    let cmds: Vec<Vec<&[u8]>> = keys
        .iter()
        .map(|k| vec![&b"SET"[..], &k[..], value])
        .collect();
    let replies = conn.pipeline(&cmds, Duration::from_secs(30)).await?;
    match replies.iter().find(|(is_error, _)| *is_error) {
        Some((_, raw)) => Err(reply_text(raw)),
        None => Ok(()),
    }
}

/// What one connection saw, in total and per request kind (`ok`, `errors`, latencies).
struct ConnTally {
    ok: u64,
    errors: u64,
    first_error: Option<String>,
    hist: Histogram<u64>,
    by_kind: Vec<(u64, u64, Histogram<u64>)>,
}

/// Runs `load` on the current runtime.
pub async fn run(load: &Load) -> Result<Outcome, String> {
    if load.ports.is_empty() || load.connections == 0 || load.keyspace == 0 {
        return Err("a load needs ports, connections and keys".into());
    }
    let mut conns = Vec::with_capacity(load.connections);
    for i in 0..load.connections {
        let mut c = Conn::connect(load.ports[i % load.ports.len()], Duration::from_secs(5)).await?;
        for cmd in &load.setup {
            let args: Vec<&str> = cmd.iter().map(String::as_str).collect();
            c.cmd(&args, Duration::from_secs(5))
                .await
                .map_err(|e| format!("setup {cmd:?}: {e}"))?;
        }
        conns.push(c);
    }
    let measure_from = Instant::now() + load.warmup;
    let stop = measure_from + load.window;
    let base = load.clients / load.connections;
    let extra = load.clients % load.connections;
    let value = bytes::Bytes::from(vec![b'v'; load.value_bytes]);
    let tasks: Vec<_> = conns
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            let depth = (base + usize::from(i < extra)).max(1);
            let job = Job {
                op: load.op,
                value: value.clone(),
                keyspace: load.keyspace,
                measure_from,
                stop,
                seed: 0x9e37_79b9_7f4a_7c15 ^ (i as u64 + 1).wrapping_mul(0x1000_0000_01b3),
            };
            tokio::spawn(drive(c, depth, job))
        })
        .collect();
    let mut out = Outcome {
        ok: 0,
        errors: 0,
        first_error: None,
        seconds: load.window.as_secs_f64(),
        hist: new_histogram()?,
        by_kind: Vec::new(),
    };
    for &kind in load.op.kinds() {
        out.by_kind.push(KindOutcome {
            kind,
            ok: 0,
            errors: 0,
            hist: new_histogram()?,
        });
    }
    for t in tasks {
        let tally = t.await.map_err(|e| format!("load task: {e}"))??;
        out.ok += tally.ok;
        out.errors += tally.errors;
        out.first_error = out.first_error.or(tally.first_error);
        out.hist.add(tally.hist).map_err(|e| e.to_string())?;
        for (sum, (ok, errors, hist)) in out.by_kind.iter_mut().zip(tally.by_kind) {
            sum.ok += ok;
            sum.errors += errors;
            sum.hist.add(hist).map_err(|e| e.to_string())?;
        }
    }
    Ok(out)
}

fn new_histogram() -> Result<Histogram<u64>, String> {
    Histogram::new(3).map_err(|e| e.to_string())
}

/// The parameters of one connection's loop.
struct Job {
    op: Op,
    value: bytes::Bytes,
    keyspace: u64,
    measure_from: Instant,
    stop: Instant,
    seed: u64,
}

impl Job {
    /// Appends one request to `out` and returns its kind (an index into [`Op::kinds`]).
    fn request(&self, rng: &mut Rng, out: &mut Vec<u8>) -> usize {
        match self.op {
            Op::Set => encode(
                out,
                &[b"SET", &key(rng.next() % self.keyspace), &self.value],
            ),
            Op::Get => encode(out, &[b"GET", &key(rng.next() % self.keyspace)]),
            Op::Mixed => {
                return crate::mixed_workload::request(rng, self.keyspace, &self.value, out);
            }
        }
        0
    }
}

/// One connection: keeps `depth` requests outstanding until the window closes.
async fn drive(mut c: Conn, depth: usize, job: Job) -> Result<ConnTally, String> {
    let mut rng = Rng(job.seed);
    let mut tally = ConnTally {
        ok: 0,
        errors: 0,
        first_error: None,
        hist: new_histogram()?,
        by_kind: Vec::new(),
    };
    for _ in job.op.kinds() {
        tally.by_kind.push((0, 0, new_histogram()?));
    }
    let mut out = Vec::with_capacity(depth * (job.value.len() + 64));
    // When each outstanding request was written, and its kind.
    let mut sent: VecDeque<(Instant, usize)> = VecDeque::with_capacity(depth);
    let mut kinds: Vec<usize> = Vec::with_capacity(depth);
    for _ in 0..depth {
        kinds.push(job.request(&mut rng, &mut out));
    }
    let deadline = tokio::time::Instant::from_std(job.stop);
    let mut write_at = Instant::now();
    c.stream
        .write_all(&out)
        .await
        .map_err(|e| format!("write: {e}"))?;
    sent.extend(kinds.drain(..).map(|k| (write_at, k)));
    out.clear();
    loop {
        match tokio::time::timeout_at(deadline, c.stream.read_buf(&mut c.inbuf)).await {
            Err(_) => break,
            Ok(Err(e)) => return Err(format!("read: {e}")),
            Ok(Ok(0)) => return Err("the server closed the connection".into()),
            Ok(Ok(_)) => {}
        }
        let now = Instant::now();
        let mut at = 0;
        while let Some((len, is_error)) = reply_len(&c.inbuf[at..])? {
            let Some((started, kind)) = sent.pop_front() else {
                return Err("a reply without a request".into());
            };
            if now >= job.measure_from && now < job.stop {
                let per_kind = &mut tally.by_kind[kind];
                if is_error {
                    tally.errors += 1;
                    per_kind.1 += 1;
                    if tally.first_error.is_none() {
                        tally.first_error = Some(reply_text(&c.inbuf[at..at + len]));
                    }
                } else {
                    tally.ok += 1;
                    per_kind.0 += 1;
                    let us = now.duration_since(started).as_micros();
                    let us = u64::try_from(us).unwrap_or(u64::MAX).max(1);
                    tally.hist.record(us).map_err(|e| e.to_string())?;
                    per_kind.2.record(us).map_err(|e| e.to_string())?;
                }
            }
            at += len;
            if now < job.stop {
                kinds.push(job.request(&mut rng, &mut out));
            }
        }
        c.inbuf.drain(..at);
        if now >= job.stop {
            break;
        }
        if !kinds.is_empty() {
            write_at = Instant::now();
            c.stream
                .write_all(&out)
                .await
                .map_err(|e| format!("write: {e}"))?;
            sent.extend(kinds.drain(..).map(|k| (write_at, k)));
            out.clear();
        }
    }
    Ok(tally)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reply_len_waits_for_complete_replies_and_flags_errors() {
        assert_eq!(reply_len(b"+OK\r\n").unwrap(), Some((5, false)));
        assert_eq!(reply_len(b"-TRYAGAIN x\r\n+OK").unwrap(), Some((13, true)));
        assert_eq!(reply_len(b"$3\r\nab").unwrap(), None);
        assert_eq!(reply_len(b"$3\r\nabc\r\n:1\r\n").unwrap(), Some((9, false)));
        assert_eq!(reply_len(b"$-1\r\n").unwrap(), Some((5, false)));
        assert_eq!(reply_len(b"*2\r\n:1\r\n$1\r\n").unwrap(), None);
        assert_eq!(
            reply_len(b"*2\r\n:1\r\n$1\r\nx\r\n").unwrap(),
            Some((15, false))
        );
        assert_eq!(reply_len(b"+OK").unwrap(), None);
        assert!(reply_len(b"?x\r\n").is_err());
        assert!(reply_len(b"$x\r\n").is_err());
    }

    #[test]
    fn reply_text_strips_framing() {
        assert_eq!(reply_text(b"$5\r\nhello\r\n"), "hello");
        assert_eq!(reply_text(b"-ERR no\r\n"), "ERR no");
        assert_eq!(reply_text(b"+OK\r\n"), "OK");
    }

    #[test]
    fn keys_are_eight_bytes() {
        assert_eq!(&key(0), b"k0000000");
        assert_eq!(&key(1234567), b"k1234567");
        assert_eq!(key(u64::MAX).len(), 8);
    }

    #[test]
    fn encode_writes_resp_arrays() {
        let mut out = Vec::new();
        encode(&mut out, &[b"SET", b"k", b"vv"]);
        assert_eq!(out, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2\r\nvv\r\n");
    }

    /// The generator against a loopback server that answers `+OK` to every request: every
    /// reply is counted and nothing is an error.
    #[tokio::test]
    async fn run_counts_replies_from_a_pipelining_server() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            loop {
                let Ok((mut s, _)) = listener.accept().await else {
                    return;
                };
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    loop {
                        match s.read_buf(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(_) => {}
                        }
                        let mut at = 0;
                        let mut out = Vec::new();
                        while let Ok(Some((len, _))) = reply_len(&buf[at..]) {
                            at += len;
                            out.extend_from_slice(b"+OK\r\n");
                        }
                        buf.drain(..at);
                        if s.write_all(&out).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        let load = Load {
            ports: vec![port],
            connections: 2,
            clients: 5,
            op: Op::Set,
            value_bytes: 16,
            keyspace: 100,
            setup: vec![vec!["PING".into()]],
            warmup: Duration::from_millis(10),
            window: Duration::from_millis(100),
        };
        let got = run(&load).await.unwrap();
        assert!(got.ok > 0, "no replies counted");
        assert_eq!(got.errors, 0);
        assert_eq!(got.hist.len(), got.ok);
        assert_eq!(got.by_kind.len(), 1);
        assert_eq!((got.by_kind[0].kind, got.by_kind[0].ok), ("SET", got.ok));
        // The mixed workload: every reply counted under its request's kind, each kind drawn.
        let got = run(&Load {
            op: Op::Mixed,
            ..load
        })
        .await
        .unwrap();
        let kinds: Vec<&str> = got.by_kind.iter().map(|k| k.kind).collect();
        assert_eq!(kinds, ["HGETALL", "HSET", "ZINCRBY", "ZREVRANGE"]);
        assert_eq!(got.by_kind.iter().map(|k| k.ok).sum::<u64>(), got.ok);
        assert!(got.by_kind.iter().all(|k| k.ok > 0 && k.hist.len() == k.ok));
    }
}
