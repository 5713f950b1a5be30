//! A connection's replies on their way out ([`Replies`]): written to the socket as they are
//! produced, in chunks of [`WRITE_CHUNK`] bytes, and never held beyond a bound.
//!
//! A batch of pipelined requests no longer gathers its replies before writing them: once
//! [`WRITE_CHUNK`] bytes wait, they are written, and while the client does not read them the
//! connection waits (its next requests are not read either), so a slow reader holds at most a
//! chunk plus one reply. The bytes waiting to be written are bounded by
//! `client.output_buffer_bytes_max` (Redis's `client-output-buffer-limit` hard limit): a reply
//! that would pass it closes the connection instead of being encoded. A connection that is
//! killed (`CLIENT KILL`) or whose server stops while its client does not read is closed at
//! once, not after the client reads.

use bytes::BytesMut;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;

use crate::clients::ClientEntry;
use crate::resp::{Proto, Reply};

/// Waiting replies are written once they reach this many bytes (and at the end of a batch).
pub const WRITE_CHUNK: usize = 64 << 10;

/// Why a connection's replies stopped: the connection is to be closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Closed {
    /// The client went away (a write failed).
    Gone,
    /// The connection was killed, or the server stops, while the client did not read.
    Stopped,
    /// A reply would have taken the bytes waiting for the client to this many, past the limit.
    OverLimit(usize),
}

/// The replies of one batch of one connection, written as they come (see the module
/// documentation).
pub struct Replies<'a> {
    stream: &'a mut (dyn AsyncWrite + Unpin + Send),
    buf: &'a mut BytesMut,
    /// Most bytes waiting for the client (0: no limit).
    limit: usize,
    entry: &'a ClientEntry,
    stop: &'a mut watch::Receiver<bool>,
    closed: Option<Closed>,
}

impl<'a> Replies<'a> {
    /// Replies written to `stream` through `buf` (empty between batches), holding at most
    /// `limit` bytes (0: no limit); a blocked write ends when `entry` is killed or `stop`
    /// changes.
    pub fn new(
        stream: &'a mut (dyn AsyncWrite + Unpin + Send),
        buf: &'a mut BytesMut,
        limit: usize,
        entry: &'a ClientEntry,
        stop: &'a mut watch::Receiver<bool>,
    ) -> Replies<'a> {
        Replies {
            stream,
            buf,
            limit,
            entry,
            stop,
            closed: None,
        }
    }

    /// Why the replies stopped, if they did: nothing more is sent then.
    pub fn closed(&self) -> Option<Closed> {
        self.closed
    }

    /// Adds `reply` in `proto`, writing the waiting replies once they reach [`WRITE_CHUNK`].
    /// A reply that would pass the limit is dropped, and so is everything after it.
    pub async fn push(&mut self, reply: &Reply, proto: Proto) {
        if self.closed.is_some() {
            return;
        }
        if self.limit > 0 {
            let pending = self.buf.len().saturating_add(encoded_len(reply, proto));
            if pending > self.limit {
                self.buf.clear();
                self.closed = Some(Closed::OverLimit(pending));
                return;
            }
        }
        reply.encode_as(self.buf, proto);
        if self.buf.len() >= WRITE_CHUNK {
            self.flush().await;
        }
    }

    /// Writes every waiting reply; returns once the socket took them (or the connection is to
    /// be closed).
    pub async fn flush(&mut self) {
        if self.closed.is_some() || self.buf.is_empty() {
            self.buf.clear();
            return;
        }
        let stream = &mut *self.stream;
        let buf = &self.buf[..];
        // The write first: a client that reads gets its replies, also a killed one (`CLIENT
        // KILL` of itself answers `+OK` first, as in Redis).
        self.closed = tokio::select! {
            biased;
            written = stream.write_all(buf) => written.err().map(|_| Closed::Gone),
            _ = self.entry.killed() => Some(Closed::Stopped),
            _ = self.stop.changed() => Some(Closed::Stopped),
        };
        self.buf.clear();
    }
}

/// The decimal digits of `n`.
fn digits(mut n: u128) -> usize {
    let mut d = 1;
    while n >= 10 {
        n /= 10;
        d += 1;
    }
    d
}

/// The bytes of a `<prefix><n>\r\n` line.
fn header(n: i128) -> usize {
    3 + digits(n.unsigned_abs()) + usize::from(n < 0)
}

/// How many bytes `reply` takes encoded in `proto`: exact, but for the state machine's
/// responses (their length as they are; RESP3 may add a few bytes per element) and RESP3
/// doubles (counted as bulk strings, a few bytes more), without encoding it.
pub fn encoded_len(reply: &Reply, proto: Proto) -> usize {
    let resp3 = proto == Proto::Resp3;
    let sum = |items: &[Reply]| -> usize {
        items
            .iter()
            .fold(0usize, |n, i| n.saturating_add(encoded_len(i, proto)))
    };
    let pairs = |pairs: &[(Reply, Reply)], per_pair: usize| -> usize {
        pairs.iter().fold(0usize, |n, (k, v)| {
            n.saturating_add(encoded_len(k, proto))
                .saturating_add(encoded_len(v, proto))
                .saturating_add(per_pair)
        })
    };
    match reply {
        Reply::Simple(s) | Reply::Error(s) => 3 + s.len(),
        Reply::Int(n) => header(i128::from(*n)),
        Reply::Bulk(b) => header(b.len() as i128) + b.len() + 2,
        Reply::Nil | Reply::NilArray => {
            if resp3 {
                3
            } else {
                5
            }
        }
        Reply::Array(items) | Reply::Set(items) => {
            header(items.len() as i128).saturating_add(sum(items))
        }
        Reply::Map(p) if resp3 => header(p.len() as i128).saturating_add(pairs(p, 0)),
        Reply::Pairs(p) if resp3 => header(p.len() as i128).saturating_add(pairs(p, 4)),
        Reply::Map(p) | Reply::Pairs(p) => header(2 * p.len() as i128).saturating_add(pairs(p, 0)),
        Reply::Double(d) => header(d.len() as i128) + d.len() + 2,
        Reply::Raw(b) => b.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use std::net::SocketAddr;
    use tokio::io::AsyncReadExt;

    fn entry() -> std::sync::Arc<ClientEntry> {
        let clients = std::sync::Arc::new(crate::clients::Clients::default());
        let addr: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let registration = clients.register(1, addr, addr);
        registration.entry.clone()
    }

    #[test]
    fn encoded_lengths_match_the_encoding() {
        let replies = [
            Reply::ok(),
            Reply::err("bad"),
            Reply::Int(-1234),
            Reply::Int(0),
            Reply::bulk("hello"),
            Reply::bulk(Bytes::from(vec![b'x'; 12345])),
            Reply::Nil,
            Reply::NilArray,
            Reply::Array(vec![Reply::Nil, Reply::bulk("x"), Reply::Int(7)]),
            Reply::Set(vec![Reply::bulk("a")]),
            Reply::Map(vec![(Reply::bulk("f"), Reply::Int(1))]),
            Reply::Pairs(vec![(Reply::bulk("m"), Reply::bulk("1.5"))]),
            Reply::Array(vec![]),
        ];
        for r in &replies {
            for p in [Proto::Resp2, Proto::Resp3] {
                let mut out = BytesMut::new();
                r.encode_as(&mut out, p);
                assert_eq!(encoded_len(r, p), out.len(), "{r:?} in {p:?}");
            }
        }
        let d = Reply::double(1.5);
        let mut out = BytesMut::new();
        d.encode_as(&mut out, Proto::Resp2);
        assert_eq!(encoded_len(&d, Proto::Resp2), out.len());
    }

    /// Goal: replies go out as they are produced, a slow reader holds at most a chunk plus one
    /// reply, and a reply past the limit closes instead of being held. Method: a pipe of 1 KiB
    /// whose reader reads nothing at first; push 100 replies of 10 kB each, then read them.
    #[tokio::test]
    async fn replies_are_written_as_they_come_and_bounded() {
        let (mut client, mut server) = tokio::io::duplex(1024);
        let entry = entry();
        let (_stop_tx, mut stop) = watch::channel(false);
        let reader = tokio::spawn(async move {
            let mut all = Vec::new();
            client.read_to_end(&mut all).await.unwrap();
            all.len()
        });
        let mut buf = BytesMut::new();
        let value = Reply::bulk(Bytes::from(vec![b'v'; 10_000]));
        let each = encoded_len(&value, Proto::Resp2);
        {
            let mut r = Replies::new(&mut server, &mut buf, 200_000, &entry, &mut stop);
            for _ in 0..100 {
                r.push(&value, Proto::Resp2).await;
                assert!(r.buf.len() < WRITE_CHUNK, "written once a chunk waits");
            }
            r.flush().await;
            assert_eq!(r.closed(), None);
        }
        drop(server);
        assert_eq!(reader.await.unwrap(), 100 * each, "every reply, in full");

        let (_client, mut server) = tokio::io::duplex(1024);
        let mut buf = BytesMut::new();
        let mut r = Replies::new(&mut server, &mut buf, 50_000, &entry, &mut stop);
        let large = Reply::bulk(Bytes::from(vec![b'v'; 60_000]));
        r.push(&Reply::ok(), Proto::Resp2).await;
        r.push(&large, Proto::Resp2).await;
        assert_eq!(
            r.closed(),
            Some(Closed::OverLimit(5 + encoded_len(&large, Proto::Resp2)))
        );
        assert!(r.buf.is_empty(), "nothing is held for a closed connection");
        r.push(&Reply::ok(), Proto::Resp2).await;
        assert!(r.buf.is_empty());
    }

    /// Goal: a killed connection whose client does not read is closed at once. Method: a pipe
    /// nobody reads; a write of more than it holds waits until the entry is killed.
    #[tokio::test]
    async fn a_blocked_write_ends_when_the_connection_is_killed() {
        let (_client, mut server) = tokio::io::duplex(1024);
        let clients = std::sync::Arc::new(crate::clients::Clients::default());
        let addr: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let registration = clients.register(7, addr, addr);
        let entry = registration.entry.clone();
        let (_stop_tx, mut stop) = watch::channel(false);
        let mut buf = BytesMut::new();
        let mut r = Replies::new(&mut server, &mut buf, 0, &entry, &mut stop);
        let killer = async {
            tokio::task::yield_now().await;
            let filter = crate::clients::KillFilter {
                id: Some(7),
                ..Default::default()
            };
            clients.kill(&filter, 0);
        };
        let large = Reply::bulk(Bytes::from(vec![b'v'; 100_000]));
        let push = r.push(&large, Proto::Resp2);
        tokio::join!(push, killer);
        assert_eq!(r.closed(), Some(Closed::Stopped));
    }
}
