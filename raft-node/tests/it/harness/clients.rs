//! Talking to a node as its users do: a tiny RESP2 client for exact replies, `redis` crate
//! connections, and the metrics endpoint over plain HTTP.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// A RESP2 reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Vec<u8>),
    Nil,
    /// `*-1`, e.g. an `EXEC` that a `WATCH` aborted.
    NilArray,
    Array(Vec<Value>),
}

impl Value {
    pub fn ok() -> Value {
        Value::Simple("OK".into())
    }

    pub fn bulk(s: &str) -> Value {
        Value::Bulk(s.as_bytes().to_vec())
    }

    pub fn is_error(&self, prefix: &str) -> bool {
        matches!(self, Value::Error(e) if e.starts_with(prefix))
    }

    /// The text of a bulk or status reply ("" otherwise).
    pub fn text(&self) -> String {
        match self {
            Value::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
            Value::Simple(s) | Value::Error(s) => s.clone(),
            _ => String::new(),
        }
    }
}

/// A blocking RESP2 client.
pub struct Client {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Client {
    pub fn connect(port: u16) -> std::io::Result<Client> {
        let stream = TcpStream::connect_timeout(
            &format!("127.0.0.1:{port}").parse().unwrap(),
            Duration::from_secs(2),
        )?;
        stream.set_read_timeout(Some(Duration::from_secs(15)))?;
        stream.set_nodelay(true)?;
        Ok(Client {
            reader: BufReader::new(stream.try_clone()?),
            writer: stream,
        })
    }

    fn encode(out: &mut Vec<u8>, args: &[&str]) {
        out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
        for a in args {
            out.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
        }
    }

    pub fn try_cmd(&mut self, args: &[&str]) -> std::io::Result<Value> {
        let mut out = Vec::new();
        Self::encode(&mut out, args);
        self.writer.write_all(&out)?;
        self.read_value()
    }

    pub fn cmd(&mut self, args: &[&str]) -> Value {
        self.try_cmd(args).expect("the node answers")
    }

    /// Sends every command in one write, then reads every reply.
    pub fn pipeline(&mut self, cmds: &[Vec<String>]) -> Vec<Value> {
        let mut out = Vec::new();
        for c in cmds {
            let args: Vec<&str> = c.iter().map(String::as_str).collect();
            Self::encode(&mut out, &args);
        }
        self.writer.write_all(&out).unwrap();
        cmds.iter().map(|_| self.read_value().unwrap()).collect()
    }

    /// Sends every command in one write and reads nothing.
    pub fn send_pipeline(&mut self, cmds: &[Vec<String>]) {
        let mut out = Vec::new();
        for c in cmds {
            let args: Vec<&str> = c.iter().map(String::as_str).collect();
            Self::encode(&mut out, &args);
        }
        self.writer.write_all(&out).unwrap();
    }

    /// Reads the next reply.
    pub fn read_reply(&mut self) -> std::io::Result<Value> {
        self.read_value()
    }

    fn read_value(&mut self) -> std::io::Result<Value> {
        read_value(&mut self.reader)
    }
}

fn read_line(r: &mut impl BufRead) -> std::io::Result<String> {
    let mut line = String::new();
    r.read_line(&mut line)?;
    if !line.ends_with("\r\n") {
        return Err(std::io::Error::other(format!("bad line {line:?}")));
    }
    line.truncate(line.len() - 2);
    Ok(line)
}

/// Reads one RESP2 reply.
pub fn read_value(r: &mut impl BufRead) -> std::io::Result<Value> {
    let line = read_line(r)?;
    let (kind, rest) = line.split_at(1);
    let num = || rest.parse::<i64>().map_err(std::io::Error::other);
    Ok(match kind {
        "+" => Value::Simple(rest.into()),
        "-" => Value::Error(rest.into()),
        ":" => Value::Int(num()?),
        "$" if num()? < 0 => Value::Nil,
        "$" => {
            let mut b = vec![0; num()? as usize + 2];
            r.read_exact(&mut b)?;
            b.truncate(b.len() - 2);
            Value::Bulk(b)
        }
        "*" if num()? < 0 => Value::NilArray,
        "*" => {
            let n = num()?;
            let mut items = Vec::new();
            for _ in 0..n.max(0) {
                items.push(read_value(r)?);
            }
            Value::Array(items)
        }
        _ => return Err(std::io::Error::other(format!("bad reply {line:?}"))),
    })
}

/// Encodes a request as a RESP2 array of bulk strings.
pub fn encode_request(args: &[&str]) -> Vec<u8> {
    let mut out = Vec::new();
    Client::encode(&mut out, args);
    out
}

/// A connection of the `redis` client crate (sync API) to `127.0.0.1:port`.
///
/// No socket read or write timeouts: with `SO_RCVTIMEO` set, Linux never restarts a socket read
/// that a signal handler interrupted (signal(7)), and the crate's parser passes that `EINTR` up
/// as a failed command (seen once in the metrics test). A dead node still fails a call (its
/// socket is reset or closed), and the node answers every command within its own deadlines.
pub fn redis_connect(port: u16) -> redis::Connection {
    redis_connect_url(&format!("redis://127.0.0.1:{port}/"), port)
}

/// A `redis` crate connection that speaks RESP3 (it opens with `HELLO 3`).
pub fn redis_connect_resp3(port: u16) -> redis::Connection {
    redis_connect_url(&format!("redis://127.0.0.1:{port}/?protocol=resp3"), port)
}

fn redis_connect_url(url: &str, port: u16) -> redis::Connection {
    let client = redis::Client::open(url).unwrap();
    client
        .get_connection_with_timeout(Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("redis client cannot connect to port {port}: {e}"))
}

/// An HTTP response: status code, head (status line and headers) and body.
pub struct HttpResponse {
    pub status: u16,
    pub head: String,
    pub body: String,
}

/// Sends `request` (a whole HTTP request) to `127.0.0.1:port` and reads the response until the
/// server closes the connection.
pub fn http_exchange(port: u16, request: &[u8]) -> HttpResponse {
    let raw = raw_exchange(port, request);
    let (head, body) = raw
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no HTTP head in {raw:?}"));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status in {head:?}"));
    HttpResponse {
        status,
        head: head.to_string(),
        body: body.to_string(),
    }
}

/// `GET /metrics` on `port`: the exposition text (panics unless the answer is 200).
pub fn scrape(port: u16) -> String {
    let r = http_exchange(port, b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n");
    assert_eq!(r.status, 200, "{}", r.head);
    r.body
}

/// The value of the sample `series` (a name with its labels, exactly as exposed) in `text`.
pub fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

/// Sends raw bytes on a fresh connection and returns everything the server sends until it
/// closes the connection.
pub fn raw_exchange(port: u16, bytes: &[u8]) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(bytes).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}
