//! The metrics endpoint: a deliberately small HTTP/1.x server that answers `GET /metrics` (and
//! `HEAD`) with the text exposition and closes every connection after one response.
//!
//! Bounded on every axis: a request head is at most [`HEAD_BYTES_MAX`] and must arrive within
//! [`HEAD_TIMEOUT`], at most [`CONNECTIONS_MAX`] connections are served at once (others get a
//! 503), and no request body is read. Other paths get 404, other methods 405.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};

use crate::metrics::Scrape;

/// Longest request head (request line and headers) read.
pub const HEAD_BYTES_MAX: usize = 8 * 1024;
/// How long a client may take to send its request head.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// Connections served at once.
pub const CONNECTIONS_MAX: usize = 32;

/// Input read and discarded after a response, at most.
const DRAIN_BYTES_MAX: usize = 64 * 1024;
/// How long input is discarded after a response, at most.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(1);

/// The content type of the Prometheus text format 0.0.4.
const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A running metrics endpoint.
pub struct HttpHandle {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl HttpHandle {
    /// Stops accepting and waits for the connections being served.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

/// Serves `scrape` on `listener` until stopped.
pub fn spawn(listener: TcpListener, scrape: Scrape) -> HttpHandle {
    let (stop, mut stop_rx) = watch::channel(false);
    let task = tokio::spawn(async move {
        let permits = Arc::new(Semaphore::new(CONNECTIONS_MAX));
        let mut conns = tokio::task::JoinSet::new();
        loop {
            tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => {
                        let permit = permits.clone().try_acquire_owned();
                        let scrape = scrape.clone();
                        conns.spawn(async move {
                            match permit {
                                Ok(_permit) => serve(stream, &scrape).await,
                                Err(_) => busy(stream).await,
                            }
                        });
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "metrics accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                },
                Some(_) = conns.join_next(), if !conns.is_empty() => {}
                _ = stop_rx.changed() => break,
            }
        }
        drop(listener);
        // A connection is bounded by the head timeout and one response: let them finish.
        while conns.join_next().await.is_some() {}
    });
    HttpHandle { stop, task }
}

/// What a request head asks for.
#[derive(Debug, PartialEq, Eq)]
enum Route {
    /// `GET /metrics` (`head`: a HEAD request, headers only).
    Metrics { head: bool },
    /// A response without a body worth computing.
    Status(u16, &'static str),
}

/// Routes a complete request head.
fn route(head: &[u8]) -> Route {
    let line_end = head.iter().position(|b| *b == b'\n').unwrap_or(head.len());
    let Ok(line) = std::str::from_utf8(&head[..line_end]) else {
        return Route::Status(400, "Bad Request");
    };
    let mut parts = line.trim_end_matches('\r').split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Route::Status(400, "Bad Request");
    };
    if !version.starts_with("HTTP/1.") {
        return Route::Status(505, "HTTP Version Not Supported");
    }
    let path = target.split('?').next().unwrap_or(target);
    if path != "/metrics" {
        return Route::Status(404, "Not Found");
    }
    match method {
        "GET" => Route::Metrics { head: false },
        "HEAD" => Route::Metrics { head: true },
        _ => Route::Status(405, "Method Not Allowed"),
    }
}

/// Where the head ends (just after its blank line), if it is complete.
fn head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| i + 4)
        .or_else(|| buf.windows(2).position(|w| w == b"\n\n").map(|i| i + 2))
}

/// Reads a request head: `Ok(None)` when the client closed first, `Err(())` when it is too
/// large.
async fn read_head(stream: &mut TcpStream) -> std::io::Result<Result<Option<Vec<u8>>, ()>> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        if let Some(end) = head_end(&buf) {
            buf.truncate(end);
            return Ok(Ok(Some(buf)));
        }
        if buf.len() >= HEAD_BYTES_MAX {
            return Ok(Err(()));
        }
        let room = (HEAD_BYTES_MAX - buf.len()).min(chunk.len());
        let n = stream.read(&mut chunk[..room]).await?;
        if n == 0 {
            return Ok(Ok(None));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

async fn respond(
    stream: &mut TcpStream,
    code: u16,
    reason: &str,
    extra: &str,
    body: &[u8],
    head: bool,
) {
    let mut out = format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Length: {}\r\nConnection: close\r\n{extra}\r\n",
        body.len()
    )
    .into_bytes();
    if !head {
        out.extend_from_slice(body);
    }
    let _ = stream.write_all(&out).await;
    let _ = stream.shutdown().await;
    // Closing with unread input (an oversized head, a body) makes the kernel reset the
    // connection, and the client may lose the response: read what follows, bounded in bytes
    // and time, so that the close is orderly.
    let drain = async {
        let mut sink = [0u8; 4096];
        let mut left = DRAIN_BYTES_MAX;
        while left > 0 {
            match stream.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    };
    let _ = tokio::time::timeout(DRAIN_TIMEOUT, drain).await;
}

async fn busy(mut stream: TcpStream) {
    let body = b"too many connections\n";
    respond(
        &mut stream,
        503,
        "Service Unavailable",
        "Content-Type: text/plain\r\n",
        body,
        false,
    )
    .await;
}

async fn serve(mut stream: TcpStream, scrape: &Scrape) {
    let head = match tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut stream)).await {
        Ok(Ok(Ok(Some(head)))) => head,
        Ok(Ok(Err(()))) => {
            let body = b"request head too large\n";
            let ct = "Content-Type: text/plain\r\n";
            respond(
                &mut stream,
                431,
                "Request Header Fields Too Large",
                ct,
                body,
                false,
            )
            .await;
            return;
        }
        // Closed, failed or too slow: nothing to answer.
        _ => return,
    };
    let text_plain = "Content-Type: text/plain\r\n";
    match route(&head) {
        Route::Metrics { head } => {
            let body = scrape.render().await;
            let ct = format!("Content-Type: {CONTENT_TYPE}\r\n");
            respond(&mut stream, 200, "OK", &ct, body.as_bytes(), head).await;
        }
        Route::Status(405, reason) => {
            let extra = "Allow: GET, HEAD\r\nContent-Type: text/plain\r\n";
            respond(
                &mut stream,
                405,
                reason,
                extra,
                b"only GET and HEAD\n",
                false,
            )
            .await;
        }
        Route::Status(code, reason) => {
            let body = format!("{reason}\n");
            respond(
                &mut stream,
                code,
                reason,
                text_plain,
                body.as_bytes(),
                false,
            )
            .await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        assert_eq!(
            route(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
            Route::Metrics { head: false }
        );
        assert_eq!(
            route(b"HEAD /metrics?x=1 HTTP/1.0\r\n\r\n"),
            Route::Metrics { head: true }
        );
        assert_eq!(
            route(b"GET / HTTP/1.1\r\n\r\n"),
            Route::Status(404, "Not Found")
        );
        assert_eq!(
            route(b"POST /metrics HTTP/1.1\r\n\r\n"),
            Route::Status(405, "Method Not Allowed")
        );
        assert!(matches!(
            route(b"GET /metrics\r\n\r\n"),
            Route::Status(400, _)
        ));
        assert!(matches!(
            route(b"GET /metrics SPDY/3\r\n\r\n"),
            Route::Status(505, _)
        ));
        assert!(matches!(
            route(b"\xff\xfe /metrics HTTP/1.1\r\n\r\n"),
            Route::Status(400, _)
        ));
    }

    #[test]
    fn a_head_ends_at_its_blank_line() {
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nA: b\r\n\r\nrest"), Some(24));
        assert_eq!(head_end(b"GET / HTTP/1.1\n\n"), Some(16));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nA: b\r\n"), None);
    }
}
