//! RESP, the Redis wire protocol: an incremental request parser with a bound on every length a
//! client controls, and the reply encoding in RESP2 or RESP3.
//!
//! The state machine answers a write before the server knows which protocol the client
//! speaks (a follower relays the leader's answer): it encodes a [`Reply::to_response`] that
//! [`transcode`] turns into either protocol exactly.
//!
//! The parser works on a growing buffer: it either takes one complete command off the front,
//! says how many bytes it needs before trying again (so a large bulk string arriving in small
//! pieces is not re-scanned for every piece), or returns a [`ProtocolError`]. It never panics
//! and never allocates more than the limits allow, whatever the input.

use bytes::{BufMut, Bytes, BytesMut};

/// Bounds on what one client request may contain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Longest bulk string (one argument), in bytes.
    pub bulk_bytes_max: usize,
    /// Most arguments in one multibulk request.
    pub array_len_max: usize,
    /// Longest inline request line, in bytes.
    pub inline_bytes_max: usize,
    /// Most argument bytes in one request, all arguments together.
    pub request_bytes_max: usize,
}

impl Limits {
    /// Most arguments in a request of a connection that has not authenticated, as in Redis
    /// (`AUTH user pass`, `HELLO 3 AUTH user pass SETNAME name` fit).
    pub const UNAUTHENTICATED_ARGS_MAX: usize = 10;

    /// These limits narrowed for a connection that has not authenticated yet: at most
    /// [`Limits::UNAUTHENTICATED_ARGS_MAX`] arguments and `bytes` of them together (also the
    /// longest argument and inline line).
    pub fn unauthenticated(self, bytes: usize) -> Limits {
        Limits {
            bulk_bytes_max: self.bulk_bytes_max.min(bytes),
            array_len_max: self.array_len_max.min(Self::UNAUTHENTICATED_ARGS_MAX),
            inline_bytes_max: self.inline_bytes_max.min(bytes),
            request_bytes_max: self.request_bytes_max.min(bytes),
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            bulk_bytes_max: 512 << 10,
            array_len_max: 64 * 1024,
            inline_bytes_max: 64 << 10,
            request_bytes_max: 1 << 20,
        }
    }
}

/// Malformed or oversized input. The connection is answered with `-ERR protocol error: ...`
/// and closed, as Redis does: after a framing error the stream cannot be resynchronised.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProtocolError(pub String);

impl std::fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "protocol error: {}", self.0)
    }
}

/// Longest line holding a `*<count>` or `$<length>` header, CRLF included.
const HEADER_LINE_MAX: usize = 32;

/// An incremental RESP2 request parser.
#[derive(Debug)]
pub struct Parser {
    limits: Limits,
    /// Do not try again before the buffer holds this many bytes.
    need: usize,
    /// The request at the front of the buffer as far as it was parsed: the next try resumes
    /// there, so that a request arriving in many small pieces is walked once, not once per
    /// piece (which would be quadratic in its argument count).
    partial: Option<Partial>,
    /// Bytes of an inline request already searched for its newline.
    inline_searched: usize,
    /// Work done, for tests that bound it: argument headers parsed and inline bytes searched.
    #[cfg(test)]
    work: usize,
}

/// A multibulk request parsed up to `pos`: its declared argument count, the ranges of the
/// arguments complete so far and their total length.
#[derive(Debug)]
struct Partial {
    count: usize,
    pos: usize,
    ranges: Vec<(usize, usize)>,
    total: usize,
}

enum Step {
    /// A complete request of `consumed` bytes with its arguments' byte ranges.
    Done(usize, Vec<(usize, usize)>),
    /// The buffer must grow to this many bytes first.
    Need(usize),
}

impl Parser {
    /// A parser enforcing `limits`.
    pub fn new(limits: Limits) -> Parser {
        Parser {
            limits,
            need: 1,
            partial: None,
            inline_searched: 0,
            #[cfg(test)]
            work: 0,
        }
    }

    /// The limits in force.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Enforces `limits` from the next request on (e.g. a connection's own once it has
    /// authenticated). Called between requests: a request already begun keeps the checks it
    /// passed and meets the new limits for the rest.
    pub fn set_limits(&mut self, limits: Limits) {
        self.limits = limits;
    }

    /// Takes the next complete command off the front of `buf`: `Ok(None)` when more input is
    /// needed. Empty requests (`*0`, blank inline lines) are skipped. Between calls the caller
    /// only appends to `buf` (the parser remembers how far it got).
    pub fn next(&mut self, buf: &mut BytesMut) -> Result<Option<Vec<Bytes>>, ProtocolError> {
        loop {
            if buf.len() < self.need {
                return Ok(None);
            }
            let step = if buf[0] == b'*' {
                self.multibulk(buf)?
            } else {
                self.inline(buf)?
            };
            match step {
                Step::Need(n) => {
                    self.need = n;
                    return Ok(None);
                }
                Step::Done(consumed, ranges) => {
                    self.need = 1;
                    self.partial = None;
                    self.inline_searched = 0;
                    let frame = buf.split_to(consumed).freeze();
                    if ranges.is_empty() {
                        continue;
                    }
                    return Ok(Some(
                        ranges.into_iter().map(|(s, e)| frame.slice(s..e)).collect(),
                    ));
                }
            }
        }
    }

    fn multibulk(&mut self, buf: &[u8]) -> Result<Step, ProtocolError> {
        let mut p = match self.partial.take() {
            Some(p) => p,
            None => {
                let Some((line_end, pos)) = line(buf, 0, HEADER_LINE_MAX, "multibulk length")?
                else {
                    return Ok(Step::Need(buf.len() + 1));
                };
                let count =
                    int(&buf[1..line_end]).ok_or_else(|| err("invalid multibulk length"))?;
                if count <= 0 {
                    return Ok(Step::Done(pos, Vec::new()));
                }
                if count as u64 > self.limits.array_len_max as u64 {
                    return Err(err(format!(
                        "multibulk length {count} exceeds the limit of {}",
                        self.limits.array_len_max
                    )));
                }
                let count = count as usize;
                Partial {
                    count,
                    pos,
                    ranges: Vec::with_capacity(count.min(1024)),
                    total: 0,
                }
            }
        };
        while p.ranges.len() < p.count {
            let pos = p.pos;
            if pos >= buf.len() {
                let need = pos + 1;
                self.partial = Some(p);
                return Ok(Step::Need(need));
            }
            if buf[pos] != b'$' {
                return Err(err(format!("expected '$', got '{}'", printable(buf[pos]))));
            }
            #[cfg(test)]
            {
                self.work += 1;
            }
            let Some((line_end, next)) = line(buf, pos, HEADER_LINE_MAX, "bulk length")? else {
                self.partial = Some(p);
                return Ok(Step::Need(buf.len() + 1));
            };
            let len = int(&buf[pos + 1..line_end]).ok_or_else(|| err("invalid bulk length"))?;
            if len < 0 || len as u64 > self.limits.bulk_bytes_max as u64 {
                return Err(err(format!(
                    "bulk length {len} outside 0..={}",
                    self.limits.bulk_bytes_max
                )));
            }
            let len = len as usize;
            if p.total + len > self.limits.request_bytes_max {
                return Err(err(format!(
                    "request larger than the limit of {} bytes",
                    self.limits.request_bytes_max
                )));
            }
            let (start, end) = (next, next + len);
            if buf.len() < end + 2 {
                // The header is parsed again once the data is in: one header, not all.
                self.partial = Some(p);
                return Ok(Step::Need(end + 2));
            }
            if &buf[end..end + 2] != b"\r\n" {
                return Err(err("bulk string not followed by CRLF"));
            }
            p.total += len;
            p.ranges.push((start, end));
            p.pos = end + 2;
        }
        Ok(Step::Done(p.pos, p.ranges))
    }

    fn inline(&mut self, buf: &[u8]) -> Result<Step, ProtocolError> {
        let max = self.limits.inline_bytes_max;
        let from = self.inline_searched.min(buf.len());
        let window = &buf[from..buf.len().min(max + 1)];
        #[cfg(test)]
        {
            self.work += window.len();
        }
        let Some(nl) = window.iter().position(|&b| b == b'\n').map(|i| from + i) else {
            if buf.len() > max {
                return Err(err(format!("inline request longer than {max} bytes")));
            }
            self.inline_searched = buf.len();
            return Ok(Step::Need(buf.len() + 1));
        };
        let end = if nl > 0 && buf[nl - 1] == b'\r' {
            nl - 1
        } else {
            nl
        };
        let mut ranges = Vec::new();
        let mut i = 0;
        while i < end {
            while i < end && buf[i].is_ascii_whitespace() {
                i += 1;
            }
            let start = i;
            while i < end && !buf[i].is_ascii_whitespace() {
                i += 1;
            }
            if i > start {
                ranges.push((start, i));
            }
        }
        if ranges.len() > self.limits.array_len_max {
            return Err(err("too many arguments in inline request"));
        }
        Ok(Step::Done(nl + 1, ranges))
    }
}

fn err(msg: impl Into<String>) -> ProtocolError {
    ProtocolError(msg.into())
}

fn printable(b: u8) -> char {
    if b.is_ascii_graphic() {
        b as char
    } else {
        '?'
    }
}

/// Finds the CRLF-terminated line starting at `from`: `(index of CR, index after LF)`.
/// `None` if incomplete; an error if no CRLF appears within `max` bytes.
fn line(
    buf: &[u8],
    from: usize,
    max: usize,
    what: &str,
) -> Result<Option<(usize, usize)>, ProtocolError> {
    let window = &buf[from..buf.len().min(from + max)];
    match window.iter().position(|&b| b == b'\r') {
        Some(cr) => {
            let cr = from + cr;
            match buf.get(cr + 1) {
                None => Ok(None),
                Some(b'\n') => Ok(Some((cr, cr + 2))),
                Some(_) => Err(err(format!("invalid {what}: CR not followed by LF"))),
            }
        }
        None if window.len() >= max => Err(err(format!("invalid {what}: line too long"))),
        None => Ok(None),
    }
}

/// A strict decimal integer: optional `-`, digits only, fits an `i64`.
fn int(s: &[u8]) -> Option<i64> {
    if !matches!(s.first(), Some(b'-' | b'0'..=b'9')) {
        return None;
    }
    std::str::from_utf8(s).ok()?.parse::<i64>().ok()
}

/// One reply to a client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// `+OK`-style status line.
    Simple(String),
    /// `-ERR ...`-style error line (the text includes the error prefix word).
    Error(String),
    /// `:<n>`.
    Int(i64),
    /// `$<len>` bulk string.
    Bulk(Bytes),
    /// `$-1` (RESP3: `_`).
    Nil,
    /// A null array: `*-1` (RESP3: `_`), e.g. an `EXEC` aborted by `WATCH`.
    NilArray,
    /// `*<n>` and the elements.
    Array(Vec<Reply>),
    /// Pairs: a RESP3 map (`%<n>`); in RESP2, an array of keys and values in turn.
    Map(Vec<(Reply, Reply)>),
    /// A RESP3 set (`~<n>`); in RESP2, an array.
    Set(Vec<Reply>),
    /// Pairs that RESP3 sends as an array of two-element arrays and RESP2 as one flat array
    /// (`ZRANGE ... WITHSCORES`).
    Pairs(Vec<(Reply, Reply)>),
    /// A double, already formatted by [`format_double`]: RESP3 `,<d>`; in RESP2, a bulk string.
    Double(String),
    /// An encoded reply (the state machine's answers, see [`Reply::to_response`]), re-encoded
    /// for the connection's protocol.
    Raw(Bytes),
}

/// The protocol a connection speaks, chosen with `HELLO`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Proto {
    /// RESP2 (the default).
    #[default]
    Resp2,
    /// RESP3: nulls are `_`, pairs are maps.
    Resp3,
}

/// What an encoding is for: a client of either protocol, or a state machine response, which
/// must carry enough to be re-encoded for both (see [`Reply::to_response`]).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Target {
    Client(Proto),
    Response,
}

/// The private type byte of [`Reply::Pairs`] in a state machine response; never sent to a
/// client.
const PAIRS: u8 = b'P';

/// How deep a response may nest before [`transcode`] gives up and passes it on unchanged.
const NESTING_MAX: usize = 16;

impl Reply {
    /// `+OK`.
    pub fn ok() -> Reply {
        Reply::Simple("OK".into())
    }

    /// `-ERR <msg>`.
    pub fn err(msg: impl std::fmt::Display) -> Reply {
        Reply::Error(format!("ERR {msg}"))
    }

    /// A bulk string from anything byte-like.
    pub fn bulk(b: impl Into<Bytes>) -> Reply {
        Reply::Bulk(b.into())
    }

    /// A double.
    pub fn double(v: f64) -> Reply {
        Reply::Double(format_double(v))
    }

    /// Appends the encoding of this reply to `out`, in RESP2.
    pub fn encode(&self, out: &mut BytesMut) {
        self.encode_as(out, Proto::Resp2);
    }

    /// Appends the reply in `proto`.
    pub fn encode_as(&self, out: &mut BytesMut, proto: Proto) {
        self.put(out, Target::Client(proto));
    }

    /// The encoding of a state machine response: RESP3, except that nulls keep their RESP2
    /// spellings (`$-1`, `*-1`) and [`Reply::Pairs`] has a private type byte, so that the
    /// server can re-encode it exactly for a RESP2 or a RESP3 client ([`transcode`]). A
    /// RESP2-only reply encodes as plain RESP2.
    pub fn to_response(&self) -> Bytes {
        let mut out = BytesMut::new();
        self.put(&mut out, Target::Response);
        out.freeze()
    }

    fn put(&self, out: &mut BytesMut, t: Target) {
        let resp3 = t != Target::Client(Proto::Resp2);
        match self {
            Reply::Simple(s) => line_reply(out, b'+', s),
            Reply::Error(s) => line_reply(out, b'-', s),
            Reply::Int(n) => header(out, b':', *n as i128),
            Reply::Bulk(b) => encode_bulk(out, b),
            Reply::Nil if t == Target::Client(Proto::Resp3) => out.put_slice(b"_\r\n"),
            Reply::Nil => out.put_slice(b"$-1\r\n"),
            Reply::NilArray if t == Target::Client(Proto::Resp3) => out.put_slice(b"_\r\n"),
            Reply::NilArray => out.put_slice(b"*-1\r\n"),
            Reply::Array(items) => {
                header(out, b'*', items.len() as i128);
                items.iter().for_each(|i| i.put(out, t));
            }
            Reply::Set(items) => {
                header(out, if resp3 { b'~' } else { b'*' }, items.len() as i128);
                items.iter().for_each(|i| i.put(out, t));
            }
            Reply::Map(pairs) | Reply::Pairs(pairs) => {
                let n = pairs.len() as i128;
                match (self, t) {
                    (Reply::Map(_), Target::Client(Proto::Resp3) | Target::Response) => {
                        header(out, b'%', n)
                    }
                    (Reply::Pairs(_), Target::Response) => header(out, PAIRS, n),
                    (Reply::Pairs(_), Target::Client(Proto::Resp3)) => header(out, b'*', n),
                    _ => header(out, b'*', 2 * n),
                }
                for (k, v) in pairs {
                    if let (Reply::Pairs(_), Target::Client(Proto::Resp3)) = (self, t) {
                        out.put_slice(b"*2\r\n");
                    }
                    k.put(out, t);
                    v.put(out, t);
                }
            }
            Reply::Double(d) if resp3 => line_reply(out, b',', d),
            Reply::Double(d) => encode_bulk(out, d.as_bytes()),
            Reply::Raw(b) => match t {
                Target::Client(proto) => transcode(b, proto, out),
                Target::Response => out.put_slice(b),
            },
        }
    }

    /// The RESP2 encoding as one buffer.
    pub fn to_bytes(&self) -> Bytes {
        let mut out = BytesMut::new();
        self.encode(&mut out);
        out.freeze()
    }
}

/// A double as Redis prints it: the shortest text that reads back exactly, `inf`/`-inf`, and
/// an exponent for very large or very small magnitudes.
pub fn format_double(v: f64) -> String {
    if v.is_infinite() {
        return if v > 0.0 { "inf" } else { "-inf" }.into();
    }
    let a = v.abs();
    if a != 0.0 && !(1e-5..1e17).contains(&a) {
        let s = format!("{v:e}");
        return match s.split_once('e') {
            Some((m, e)) if !e.starts_with('-') => format!("{m}e+{e}"),
            _ => s,
        };
    }
    format!("{v}")
}

fn header(out: &mut BytesMut, prefix: u8, n: i128) {
    out.put_u8(prefix);
    out.put_slice(n.to_string().as_bytes());
    out.put_slice(b"\r\n");
}

/// Re-encodes a state machine response (or any RESP2 reply, as older builds answered) for a
/// client speaking `proto`. Bytes it cannot parse are passed on unchanged.
pub fn transcode(src: &[u8], proto: Proto, out: &mut BytesMut) {
    // Most answers are one line or one bulk string, the same in both protocols.
    if matches!(src.first(), Some(b'+' | b'-' | b':'))
        || (src.first() == Some(&b'$') && src != b"$-1\r\n")
    {
        return out.put_slice(src);
    }
    let start = out.len();
    match transcode_one(src, 0, proto, out, 0) {
        Some(end) if end == src.len() => {}
        _ => {
            out.truncate(start);
            out.put_slice(src);
        }
    }
}

/// Transcodes the value at `src[pos..]`; the position after it, or `None` if malformed.
fn transcode_one(
    src: &[u8],
    pos: usize,
    proto: Proto,
    out: &mut BytesMut,
    depth: usize,
) -> Option<usize> {
    if depth > NESTING_MAX {
        return None;
    }
    let kind = *src.get(pos)?;
    let cr = pos + src[pos..].iter().position(|b| *b == b'\r')?;
    if src.get(cr + 1) != Some(&b'\n') {
        return None;
    }
    let line = &src[pos + 1..cr];
    let next = cr + 2;
    let resp3 = proto == Proto::Resp3;
    let n = || std::str::from_utf8(line).ok()?.parse::<i64>().ok();
    let items = |count: usize, out: &mut BytesMut, pair_arrays: bool| {
        let mut p = next;
        for _ in 0..count {
            if pair_arrays {
                out.put_slice(b"*2\r\n");
            }
            p = transcode_one(src, p, proto, out, depth + 1)?;
            if pair_arrays {
                p = transcode_one(src, p, proto, out, depth + 1)?;
            }
        }
        Some(p)
    };
    match kind {
        b'+' | b'-' | b':' => {
            out.put_slice(&src[pos..next]);
            Some(next)
        }
        b'_' => {
            out.put_slice(if resp3 { b"_\r\n" } else { b"$-1\r\n" });
            Some(next)
        }
        b',' if resp3 => {
            out.put_slice(&src[pos..next]);
            Some(next)
        }
        b',' => {
            encode_bulk(out, line);
            Some(next)
        }
        b'$' => match n()? {
            -1 => {
                out.put_slice(if resp3 { b"_\r\n" } else { b"$-1\r\n" });
                Some(next)
            }
            len if len >= 0 => {
                let end = next.checked_add(len as usize)?.checked_add(2)?;
                out.put_slice(src.get(pos..end)?);
                Some(end)
            }
            _ => None,
        },
        b'*' | b'~' | b'%' | PAIRS => {
            let count = n()?;
            if count == -1 && kind == b'*' {
                out.put_slice(if resp3 { b"_\r\n" } else { b"*-1\r\n" });
                return Some(next);
            }
            let count = usize::try_from(count).ok()?;
            // Each element takes at least three bytes: a count larger than that is malformed.
            if count > src.len() {
                return None;
            }
            match (kind, resp3) {
                (b'*', _) | (b'~', false) => header(out, b'*', count as i128),
                (b'%', false) | (PAIRS, false) => header(out, b'*', 2 * count as i128),
                (PAIRS, true) => header(out, b'*', count as i128),
                _ => out.put_slice(&src[pos..next]),
            }
            let elements = if kind == b'%' || kind == PAIRS {
                2 * count
            } else {
                count
            };
            if kind == PAIRS && resp3 {
                items(count, out, true)
            } else {
                items(elements, out, false)
            }
        }
        _ => None,
    }
}

/// Appends a bulk string.
pub fn encode_bulk(out: &mut BytesMut, b: &[u8]) {
    out.put_u8(b'$');
    out.put_slice(b.len().to_string().as_bytes());
    out.put_slice(b"\r\n");
    out.put_slice(b);
    out.put_slice(b"\r\n");
}

/// Status and error lines cannot carry CR or LF: they are replaced by spaces.
fn line_reply(out: &mut BytesMut, prefix: u8, s: &str) {
    out.put_u8(prefix);
    for b in s.bytes() {
        out.put_u8(if b == b'\r' || b == b'\n' { b' ' } else { b });
    }
    out.put_slice(b"\r\n");
}

#[cfg(test)]
mod tests;
