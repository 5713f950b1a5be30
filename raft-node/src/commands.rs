//! Turning a client request into a plan: a reply right away, a replicated write, a local read,
//! or an admin call that needs the node's status. Everything here is pure and checks all
//! arguments before anything is proposed, so a bad request is refused whole and nothing is
//! applied partially.

use bytes::Bytes;

use crate::config::ReadMode;
use crate::kv::{parse_i64, Command, ExpireCond, SetCond, TxOp, TxRead};
use crate::resp::{Proto, Reply};

/// Per-connection state the commands read and change.
#[derive(Debug)]
pub struct Conn {
    /// The connection's id (`CLIENT ID`).
    pub id: u64,
    /// Whether `AUTH` succeeded (always true without a password).
    pub authed: bool,
    /// How this connection's reads are served.
    pub read_mode: ReadMode,
    /// `CLIENT SETNAME`.
    pub name: Option<Bytes>,
    /// The protocol chosen with `HELLO` (RESP2 until then).
    pub proto: Proto,
    /// The commands queued since `MULTI`, if a transaction is open (see `multi`).
    pub multi: Option<Vec<TxOp>>,
    /// Whether a command was refused while queueing: `EXEC` then applies nothing.
    pub multi_failed: bool,
}

/// A read of the local map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadOp {
    /// `GET`.
    Get(Bytes),
    /// `MGET`.
    MGet(Vec<Bytes>),
    /// `EXISTS`.
    Exists(Vec<Bytes>),
    /// `STRLEN`.
    StrLen(Bytes),
    /// `DBSIZE`.
    DbSize,
    /// `TTL` (seconds) or `PTTL` (milliseconds).
    Ttl(Bytes, bool),
    /// `TYPE`.
    Type(Bytes),
    /// `KEYS pattern`.
    Keys(Bytes),
    /// `SCAN cursor [MATCH pattern] [COUNT n] [TYPE t]`; `None` as the type filter means any,
    /// and a filter other than `string` finds nothing (every value is a string).
    Scan {
        /// Where to resume.
        cursor: u64,
        /// The glob keys must match.
        pattern: Option<Bytes>,
        /// How many keys to look at, about.
        count: usize,
        /// Only keys of this type.
        string_only: Option<bool>,
    },
}

impl ReadOp {
    /// The read as the state machine answers it (inside a transaction too); `None` for the
    /// key-space walks, which the server answers itself.
    pub fn as_tx(&self) -> Option<TxRead> {
        Some(match self {
            ReadOp::Get(k) => TxRead::Get(k.clone()),
            ReadOp::MGet(keys) => TxRead::MGet(keys.clone()),
            ReadOp::Exists(keys) => TxRead::Exists(keys.clone()),
            ReadOp::StrLen(k) => TxRead::StrLen(k.clone()),
            ReadOp::DbSize => TxRead::DbSize,
            ReadOp::Ttl(k, ms) => TxRead::Ttl(k.clone(), *ms),
            ReadOp::Type(k) => TxRead::Type(k.clone()),
            ReadOp::Keys(_) | ReadOp::Scan { .. } => return None,
        })
    }
}

/// A call that needs the node's live status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdminOp {
    /// `INFO [section...]`, lower-cased.
    Info(Vec<String>),
    /// `RAFT STATUS`.
    RaftStatus,
    /// `RAFT DESCRIBE`.
    RaftDescribe,
    /// `RAFT TRANSFER <replica id>`: hand leadership to that voter (on the leader).
    RaftTransfer(u32),
    /// `ROLE`, as Redis answers it: the leader is the master, every other replica a slave.
    Role,
    /// `HELLO`'s reply, all but the role, which needs the node's status.
    Hello(Vec<(Reply, Reply)>),
}

/// What to do with one request.
#[derive(Debug)]
pub enum Plan {
    /// Answer now.
    Reply(Reply),
    /// Answer, then close the connection.
    Close(Reply),
    /// Propose this write.
    Write(Command),
    /// Serve this read after the connection's read barrier.
    Read(ReadOp),
    /// Needs the node's status.
    Admin(AdminOp),
}

/// Static facts `plan` needs.
pub struct Context<'a> {
    /// The `AUTH` password, if any.
    pub requirepass: Option<&'a str>,
    /// The wall clock, milliseconds since the Unix epoch.
    pub now_ms: u64,
    /// Whether this node serves lease reads (`lease.enabled`).
    pub lease_reads: bool,
}

/// `(name, arity, flags, first key, last key, step)` as `COMMAND` reports them. A negative
/// arity means "at least".
type CommandSpec = (&'static str, i64, &'static [&'static str], i64, i64, i64);

/// Every command this server knows.
pub const COMMANDS: &[CommandSpec] = &[
    ("append", 3, &["write", "denyoom", "fast"], 1, 1, 1),
    (
        "auth",
        -2,
        &["noscript", "loading", "stale", "fast", "no_auth"],
        0,
        0,
        0,
    ),
    ("cas", 4, &["write", "denyoom", "fast"], 1, 1, 1),
    (
        "client",
        -2,
        &["admin", "noscript", "loading", "stale"],
        0,
        0,
        0,
    ),
    ("command", -1, &["loading", "stale"], 0, 0, 0),
    (
        "config",
        -2,
        &["admin", "noscript", "loading", "stale"],
        0,
        0,
        0,
    ),
    ("dbsize", 1, &["readonly", "fast"], 0, 0, 0),
    ("decr", 2, &["write", "denyoom", "fast"], 1, 1, 1),
    (
        "discard",
        1,
        &["noscript", "loading", "stale", "fast"],
        0,
        0,
        0,
    ),
    ("decrby", 3, &["write", "denyoom", "fast"], 1, 1, 1),
    ("del", -2, &["write"], 1, -1, 1),
    ("echo", 2, &["fast"], 0, 0, 0),
    ("exec", 1, &["noscript", "loading", "stale"], 0, 0, 0),
    ("exists", -2, &["readonly", "fast"], 1, -1, 1),
    ("expire", -3, &["write", "fast"], 1, 1, 1),
    ("expireat", -3, &["write", "fast"], 1, 1, 1),
    ("get", 2, &["readonly", "fast"], 1, 1, 1),
    ("getdel", 2, &["write", "fast"], 1, 1, 1),
    ("getset", 3, &["write", "denyoom", "fast"], 1, 1, 1),
    (
        "hello",
        -1,
        &["noscript", "loading", "stale", "fast", "no_auth"],
        0,
        0,
        0,
    ),
    ("incr", 2, &["write", "denyoom", "fast"], 1, 1, 1),
    ("incrby", 3, &["write", "denyoom", "fast"], 1, 1, 1),
    ("info", -1, &["loading", "stale"], 0, 0, 0),
    ("keys", 2, &["readonly"], 0, 0, 0),
    ("mget", -2, &["readonly", "fast"], 1, -1, 1),
    ("mset", -3, &["write", "denyoom"], 1, -1, 2),
    ("msetnx", -3, &["write", "denyoom"], 1, -1, 2),
    (
        "multi",
        1,
        &["noscript", "loading", "stale", "fast"],
        0,
        0,
        0,
    ),
    ("persist", 2, &["write", "fast"], 1, 1, 1),
    ("pexpire", -3, &["write", "fast"], 1, 1, 1),
    ("pexpireat", -3, &["write", "fast"], 1, 1, 1),
    ("ping", -1, &["fast", "stale"], 0, 0, 0),
    ("psetex", 4, &["write", "denyoom"], 1, 1, 1),
    ("pttl", 2, &["readonly", "fast"], 1, 1, 1),
    ("quit", -1, &["fast", "no_auth"], 0, 0, 0),
    ("raft", -2, &["admin", "stale"], 0, 0, 0),
    ("readmode", -1, &["fast", "stale"], 0, 0, 0),
    (
        "role",
        1,
        &["noscript", "loading", "stale", "fast"],
        0,
        0,
        0,
    ),
    ("scan", -2, &["readonly"], 0, 0, 0),
    ("select", 2, &["loading", "stale", "fast"], 0, 0, 0),
    ("set", -3, &["write", "denyoom"], 1, 1, 1),
    ("setex", 4, &["write", "denyoom"], 1, 1, 1),
    ("setnx", 3, &["write", "denyoom", "fast"], 1, 1, 1),
    ("strlen", 2, &["readonly", "fast"], 1, 1, 1),
    ("time", 1, &["loading", "stale", "fast"], 0, 0, 0),
    ("ttl", 2, &["readonly", "fast"], 1, 1, 1),
    ("type", 2, &["readonly", "fast"], 1, 1, 1),
    ("unlink", -2, &["write", "fast"], 1, -1, 1),
    (
        "unwatch",
        1,
        &["noscript", "loading", "stale", "fast"],
        0,
        0,
        0,
    ),
    (
        "watch",
        -2,
        &["noscript", "loading", "stale", "fast"],
        1,
        -1,
        1,
    ),
];

fn lookup(name: &str) -> Option<(i64, &'static [&'static str])> {
    COMMANDS.iter().find(|c| c.0 == name).map(|c| (c.1, c.2))
}

fn command_entry(c: &CommandSpec) -> Reply {
    Reply::Array(vec![
        Reply::bulk(c.0.to_string()),
        Reply::Int(c.1),
        Reply::Array(c.2.iter().map(|f| Reply::Simple((*f).into())).collect()),
        Reply::Int(c.3),
        Reply::Int(c.4),
        Reply::Int(c.5),
    ])
}

fn lower(b: &[u8]) -> String {
    String::from_utf8_lossy(b).to_ascii_lowercase()
}

/// Redis's unknown-command message, with the arguments shortened and made printable.
fn unknown(args: &[Bytes]) -> Reply {
    let show = |b: &Bytes| {
        let s: String = String::from_utf8_lossy(&b[..b.len().min(64)])
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        s
    };
    let rest: String = args[1..]
        .iter()
        .take(8)
        .map(|a| format!("'{}' ", show(a)))
        .collect();
    Reply::err(format!(
        "unknown command '{}', with args beginning with: {rest}",
        show(&args[0])
    ))
}

fn wrong_args(name: &str) -> Reply {
    Reply::err(format!("wrong number of arguments for '{name}' command"))
}

fn syntax() -> Reply {
    Reply::err("syntax error")
}

fn not_integer() -> Reply {
    Reply::err("value is not an integer or out of range")
}

/// Compares passwords without stopping at the first difference.
fn same_password(given: &[u8], expected: &str) -> bool {
    let e = expected.as_bytes();
    let diff = given
        .iter()
        .zip(e)
        .fold(given.len() ^ e.len(), |acc, (a, b)| {
            acc | usize::from(a ^ b)
        });
    diff == 0
}

/// Plans one request (`args` is never empty: the parser skips empty requests).
pub fn plan(conn: &mut Conn, ctx: &Context<'_>, args: &[Bytes]) -> Plan {
    let Some(first) = args.first() else {
        return Plan::Reply(Reply::err("empty request"));
    };
    let name = lower(&first[..first.len().min(32)]);
    let Some((arity, flags)) = lookup(&name) else {
        if !conn.authed {
            return Plan::Reply(noauth());
        }
        return Plan::Reply(unknown(args));
    };
    if !conn.authed && !flags.contains(&"no_auth") && name != "ping" {
        return Plan::Reply(noauth());
    }
    let n = args.len() as i64;
    if (arity >= 0 && n != arity) || (arity < 0 && n < -arity) {
        return Plan::Reply(wrong_args(&name));
    }
    // The arity check above guarantees every argument indexed below exists.
    let a = &args[1..];
    match name.as_str() {
        "ping" => Plan::Reply(match a {
            [] => Reply::Simple("PONG".into()),
            [msg] => Reply::Bulk(msg.clone()),
            _ => wrong_args("ping"),
        }),
        "echo" => Plan::Reply(Reply::Bulk(a[0].clone())),
        "quit" => Plan::Close(Reply::ok()),
        "auth" => Plan::Reply(auth(conn, ctx, a)),
        "hello" => match hello(conn, ctx, a) {
            Reply::Map(fields) => Plan::Admin(AdminOp::Hello(fields)),
            other => Plan::Reply(other),
        },
        "select" => Plan::Reply(match &a[0][..] {
            b"0" => Reply::ok(),
            _ => Reply::err("DB index is out of range"),
        }),
        "readmode" => Plan::Reply(readmode(conn, ctx, a)),
        "client" => Plan::Reply(client(conn, a)),
        "config" => Plan::Reply(config(a)),
        "command" => Plan::Reply(command(a)),
        "info" => Plan::Admin(AdminOp::Info(a.iter().map(|s| lower(s)).collect())),
        "role" => Plan::Admin(AdminOp::Role),
        "raft" => match lower(&a[0]).as_str() {
            "status" if a.len() == 1 => Plan::Admin(AdminOp::RaftStatus),
            "describe" if a.len() == 1 => Plan::Admin(AdminOp::RaftDescribe),
            "transfer" if a.len() == 2 => match std::str::from_utf8(&a[1])
                .ok()
                .and_then(|s| s.parse::<u32>().ok())
            {
                Some(id) => Plan::Admin(AdminOp::RaftTransfer(id)),
                None => Plan::Reply(Reply::err("RAFT TRANSFER needs a replica id")),
            },
            _ => Plan::Reply(Reply::err(
                "unknown RAFT subcommand; try RAFT STATUS, RAFT DESCRIBE or RAFT TRANSFER <id>",
            )),
        },
        "get" => Plan::Read(ReadOp::Get(a[0].clone())),
        "strlen" => Plan::Read(ReadOp::StrLen(a[0].clone())),
        "ttl" => Plan::Read(ReadOp::Ttl(a[0].clone(), false)),
        "type" => Plan::Read(ReadOp::Type(a[0].clone())),
        "keys" => Plan::Read(ReadOp::Keys(a[0].clone())),
        "scan" => scan(a),
        "unlink" => Plan::Write(Command::Del { keys: a.to_vec() }),
        "setnx" => Plan::Write(Command::SetNx {
            key: a[0].clone(),
            value: a[1].clone(),
        }),
        "getdel" => Plan::Write(Command::GetDel { key: a[0].clone() }),
        "msetnx" => {
            if !a.len().is_multiple_of(2) {
                return Plan::Reply(wrong_args("msetnx"));
            }
            Plan::Write(Command::MSetNx {
                pairs: a.chunks(2).map(|p| (p[0].clone(), p[1].clone())).collect(),
            })
        }
        "getset" => Plan::Write(Command::Set {
            key: a[0].clone(),
            value: a[1].clone(),
            cond: SetCond::Always,
            get: true,
            expire_at_ms: None,
            keep_ttl: false,
        }),
        "setex" | "psetex" => {
            let Some(n) = parse_i64(&a[1]) else {
                return Plan::Reply(not_integer());
            };
            let unit = if name == "setex" { "ex" } else { "px" };
            match expiry(unit, n, ctx.now_ms) {
                Some(at) => Plan::Write(Command::Set {
                    key: a[0].clone(),
                    value: a[2].clone(),
                    cond: SetCond::Always,
                    get: false,
                    expire_at_ms: Some(at),
                    keep_ttl: false,
                }),
                None => Plan::Reply(Reply::err(format!(
                    "invalid expire time in '{name}' command"
                ))),
            }
        }
        "time" => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            Plan::Reply(Reply::Array(vec![
                Reply::bulk(now.as_secs().to_string()),
                Reply::bulk(now.subsec_micros().to_string()),
            ]))
        }
        "pttl" => Plan::Read(ReadOp::Ttl(a[0].clone(), true)),
        "mget" => Plan::Read(ReadOp::MGet(a.to_vec())),
        "exists" => Plan::Read(ReadOp::Exists(a.to_vec())),
        "dbsize" => Plan::Read(ReadOp::DbSize),
        "set" => set(ctx, a),
        "expire" | "pexpire" | "expireat" | "pexpireat" => expire(ctx, &name, a),
        "persist" => Plan::Write(Command::Expire {
            key: a[0].clone(),
            at_ms: None,
            cond: ExpireCond::Always,
        }),
        "del" => Plan::Write(Command::Del { keys: a.to_vec() }),
        "incr" => incr(&a[0], 1),
        "decr" => incr(&a[0], -1),
        "incrby" => match parse_i64(&a[1]) {
            Some(d) => incr(&a[0], d),
            None => Plan::Reply(not_integer()),
        },
        "decrby" => match parse_i64(&a[1]).and_then(i64::checked_neg) {
            Some(d) => incr(&a[0], d),
            None => Plan::Reply(not_integer()),
        },
        "mset" => {
            if !a.len().is_multiple_of(2) {
                return Plan::Reply(wrong_args("mset"));
            }
            let pairs = a
                .chunks_exact(2)
                .map(|p| (p[0].clone(), p[1].clone()))
                .collect();
            Plan::Write(Command::MSet { pairs })
        }
        "append" => Plan::Write(Command::Append {
            key: a[0].clone(),
            value: a[1].clone(),
        }),
        "cas" => Plan::Write(Command::Cas {
            key: a[0].clone(),
            expected: a[1].clone(),
            new: a[2].clone(),
        }),
        // Every name in COMMANDS has an arm above; this answers like an unknown command should
        // the table and the match ever disagree.
        _ => Plan::Reply(unknown(args)),
    }
}

fn noauth() -> Reply {
    Reply::Error("NOAUTH Authentication required.".into())
}

fn incr(key: &Bytes, delta: i64) -> Plan {
    Plan::Write(Command::IncrBy {
        key: key.clone(),
        delta,
    })
}

fn auth(conn: &mut Conn, ctx: &Context<'_>, a: &[Bytes]) -> Reply {
    let Some(expected) = ctx.requirepass else {
        return Reply::err(
            "AUTH <password> called without any password configured for the default user",
        );
    };
    let (user, pass) = match a {
        [pass] => (&b"default"[..], pass),
        [user, pass] => (&user[..], pass),
        _ => return syntax(),
    };
    if user == b"default" && same_password(pass, expected) {
        conn.authed = true;
        Reply::ok()
    } else {
        Reply::Error("WRONGPASS invalid username-password pair or user is disabled.".into())
    }
}

fn hello(conn: &mut Conn, ctx: &Context<'_>, a: &[Bytes]) -> Reply {
    let mut rest = a;
    let mut proto = conn.proto;
    if let [ver, tail @ ..] = rest {
        proto = match parse_i64(ver) {
            Some(2) => Proto::Resp2,
            Some(3) => Proto::Resp3,
            Some(_) => {
                return Reply::Error("NOPROTO sorry, this protocol version is not supported".into())
            }
            None => return Reply::err("Protocol version is not an integer or out of range"),
        };
        rest = tail;
    }
    while let [opt, tail @ ..] = rest {
        match (lower(opt).as_str(), tail) {
            ("auth", [user, pass, more @ ..]) => {
                if let Reply::Error(e) = auth(conn, ctx, &[user.clone(), pass.clone()]) {
                    return Reply::Error(e);
                }
                rest = more;
            }
            ("setname", [name, more @ ..]) => {
                conn.name = Some(name.clone());
                rest = more;
            }
            _ => return syntax(),
        }
    }
    if !conn.authed {
        return Reply::Error(
            "NOAUTH HELLO must be called with the client already authenticated, otherwise the \
             HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and \
             select the RESP protocol version at the same time"
                .into(),
        );
    }
    // Only a HELLO that succeeds switches the protocol, as in Redis.
    conn.proto = proto;
    let kv = |k: &str, v: Reply| (Reply::bulk(k.to_string()), v);
    let version = match proto {
        Proto::Resp2 => 2,
        Proto::Resp3 => 3,
    };
    Reply::Map(vec![
        kv("server", Reply::bulk("redis")),
        kv("version", Reply::bulk("7.0.0")),
        kv("proto", Reply::Int(version)),
        kv("id", Reply::Int(conn.id as i64)),
        kv("mode", Reply::bulk("standalone")),
        kv("modules", Reply::Array(Vec::new())),
    ])
}

fn readmode(conn: &mut Conn, ctx: &Context<'_>, a: &[Bytes]) -> Reply {
    match a {
        [] => Reply::bulk(conn.read_mode.name()),
        [m] => match ReadMode::parse(&String::from_utf8_lossy(m)) {
            Some(ReadMode::Lease) if !ctx.lease_reads => Reply::err(
                "lease reads are not enabled on this node (lease.enabled); use linearizable",
            ),
            Some(mode) => {
                conn.read_mode = mode;
                Reply::ok()
            }
            None => Reply::err("unknown read mode; expected linearizable, lease or sequential"),
        },
        _ => wrong_args("readmode"),
    }
}

fn client(conn: &mut Conn, a: &[Bytes]) -> Reply {
    match (lower(&a[0]).as_str(), &a[1..]) {
        ("id", []) => Reply::Int(conn.id as i64),
        ("setname", [name]) => {
            conn.name = Some(name.clone());
            Reply::ok()
        }
        ("getname", []) => conn.name.clone().map_or(Reply::Nil, Reply::Bulk),
        ("setinfo", [_, _]) => Reply::ok(),
        ("info" | "list", []) => Reply::bulk(format!(
            "id={} name={} db=0 readmode={}\n",
            conn.id,
            conn.name
                .as_deref()
                .map(String::from_utf8_lossy)
                .unwrap_or_default(),
            conn.read_mode.name()
        )),
        _ => Reply::err("unknown CLIENT subcommand or wrong number of arguments"),
    }
}

/// `CONFIG GET` answers the few settings tools ask for at start (redis-benchmark asks for
/// `save` and `appendonly`); everything else is managed through the node's own config file.
fn config(a: &[Bytes]) -> Reply {
    const SETTINGS: &[(&str, &str)] = &[
        ("save", ""),
        ("appendonly", "no"),
        ("databases", "1"),
        ("maxmemory", "0"),
    ];
    match (lower(&a[0]).as_str(), &a[1..]) {
        ("get", patterns) if !patterns.is_empty() => {
            let mut out = Vec::new();
            for (k, v) in SETTINGS {
                if patterns.iter().any(|p| &p[..] == b"*" || lower(p) == *k) {
                    out.push((Reply::bulk(*k), Reply::bulk(*v)));
                }
            }
            Reply::Map(out)
        }
        ("resetstat", []) => Reply::ok(),
        _ => Reply::err("only CONFIG GET is supported; the node is configured by its file"),
    }
}

fn command(a: &[Bytes]) -> Reply {
    let Some(sub) = a.first() else {
        return Reply::Array(COMMANDS.iter().map(command_entry).collect());
    };
    match (lower(sub).as_str(), &a[1..]) {
        ("count", []) => Reply::Int(COMMANDS.len() as i64),
        ("list", _) => Reply::Array(
            COMMANDS
                .iter()
                .map(|c| Reply::bulk(c.0.to_string()))
                .collect(),
        ),
        ("info", names) => Reply::Array(
            names
                .iter()
                .map(|n| {
                    let n = lower(n);
                    COMMANDS
                        .iter()
                        .find(|c| c.0 == n)
                        .map_or(Reply::Nil, command_entry)
                })
                .collect(),
        ),
        // redis-cli asks for documentation to show hints; having none is a valid answer.
        ("docs", _) => Reply::Array(Vec::new()),
        _ => Reply::err("unknown COMMAND subcommand; try COMMAND COUNT, LIST, INFO or DOCS"),
    }
}

fn set(ctx: &Context<'_>, a: &[Bytes]) -> Plan {
    let [key, value, ..] = a else {
        return Plan::Reply(wrong_args("set"));
    };
    let (key, value) = (key.clone(), value.clone());
    let mut cond = SetCond::Always;
    let mut get = false;
    let mut expire_at_ms = None;
    let mut keep_ttl = false;
    let mut i = 2;
    while i < a.len() {
        let opt = lower(&a[i][..a[i].len().min(16)]);
        match opt.as_str() {
            "nx" if cond == SetCond::Always => cond = SetCond::IfAbsent,
            "xx" if cond == SetCond::Always => cond = SetCond::IfPresent,
            "get" if !get => get = true,
            "keepttl" if expire_at_ms.is_none() && !keep_ttl => keep_ttl = true,
            "ex" | "px" | "exat" | "pxat" if expire_at_ms.is_none() && !keep_ttl => {
                let Some(arg) = a.get(i + 1) else {
                    return Plan::Reply(syntax());
                };
                let Some(n) = parse_i64(arg) else {
                    return Plan::Reply(not_integer());
                };
                match expiry(&opt, n, ctx.now_ms) {
                    Some(at) => expire_at_ms = Some(at),
                    None => return Plan::Reply(Reply::err("invalid expire time in 'set' command")),
                }
                i += 1;
            }
            _ => return Plan::Reply(syntax()),
        }
        i += 1;
    }
    Plan::Write(Command::Set {
        key,
        value,
        cond,
        get,
        expire_at_ms,
        keep_ttl,
    })
}

/// The absolute expiry of an `EX`/`PX`/`EXAT`/`PXAT` option, stamped here on the proposing
/// node so that every replica applies the same time.
/// `SCAN cursor [MATCH pattern] [COUNT n] [TYPE t]`.
fn scan(a: &[Bytes]) -> Plan {
    let Some(cursor) = std::str::from_utf8(&a[0])
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
    else {
        return Plan::Reply(Reply::err("invalid cursor"));
    };
    let (mut pattern, mut count, mut string_only) = (None, 10usize, None);
    let mut i = 1;
    while i < a.len() {
        let Some(arg) = a.get(i + 1) else {
            return Plan::Reply(syntax());
        };
        match lower(&a[i][..a[i].len().min(8)]).as_str() {
            "match" => pattern = Some(arg.clone()),
            "count" => match parse_i64(arg) {
                Some(n) if n > 0 => count = (n as usize).min(100_000),
                Some(_) => return Plan::Reply(syntax()),
                None => return Plan::Reply(not_integer()),
            },
            "type" => string_only = Some(lower(arg) == "string"),
            _ => return Plan::Reply(syntax()),
        }
        i += 2;
    }
    Plan::Read(ReadOp::Scan {
        cursor,
        pattern,
        count,
        string_only,
    })
}

/// `EXPIRE key seconds [NX|XX|GT|LT]` and its millisecond and absolute-time forms. A time in
/// the past deletes the key when applied; one beyond what a `u64` of milliseconds holds is
/// refused, as Redis refuses it.
fn expire(ctx: &Context<'_>, name: &str, a: &[Bytes]) -> Plan {
    let Some(n) = parse_i64(&a[1]) else {
        return Plan::Reply(not_integer());
    };
    let mut cond = ExpireCond::Always;
    for opt in &a[2..] {
        let next = match lower(&opt[..opt.len().min(8)]).as_str() {
            "nx" => ExpireCond::IfNone,
            "xx" => ExpireCond::IfSome,
            "gt" => ExpireCond::IfLater,
            "lt" => ExpireCond::IfEarlier,
            _ => {
                return Plan::Reply(Reply::err(format!(
                    "Unsupported option {}",
                    String::from_utf8_lossy(opt)
                )))
            }
        };
        if cond != ExpireCond::Always && cond != next {
            return Plan::Reply(Reply::err(
                "NX and XX, GT or LT options at the same time are not compatible",
            ));
        }
        cond = next;
    }
    let n = i128::from(n);
    let at = match name {
        "expire" => i128::from(ctx.now_ms) + n * 1000,
        "pexpire" => i128::from(ctx.now_ms) + n,
        "expireat" => n * 1000,
        _ => n,
    };
    let Ok(at_ms) = u64::try_from(at.max(0)) else {
        return Plan::Reply(Reply::err(format!(
            "invalid expire time in '{name}' command"
        )));
    };
    Plan::Write(Command::Expire {
        key: a[0].clone(),
        at_ms: Some(at_ms),
        cond,
    })
}

fn expiry(opt: &str, n: i64, now_ms: u64) -> Option<u64> {
    if n <= 0 {
        return None;
    }
    let n = n as u64;
    match opt {
        "ex" => n.checked_mul(1000)?.checked_add(now_ms),
        "px" => n.checked_add(now_ms),
        "exat" => n.checked_mul(1000),
        _ => Some(n),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(conn: &mut Conn, pass: Option<&str>, line: &str) -> Plan {
        let args: Vec<Bytes> = line
            .split_whitespace()
            .map(|s| Bytes::copy_from_slice(s.as_bytes()))
            .collect();
        let ctx = Context {
            requirepass: pass,
            now_ms: 1_000,
            lease_reads: false,
        };
        plan(conn, &ctx, &args)
    }

    fn conn(authed: bool) -> Conn {
        Conn {
            id: 1,
            authed,
            read_mode: ReadMode::Linearizable,
            name: None,
            proto: Proto::Resp2,
            multi: None,
            multi_failed: false,
        }
    }

    fn reply(p: Plan) -> Reply {
        match p {
            Plan::Reply(r) | Plan::Close(r) => r,
            other => panic!("not a reply: {other:?}"),
        }
    }

    #[test]
    fn set_options_become_an_absolute_expiry() {
        let mut c = conn(true);
        match run(&mut c, None, "SET k v NX GET EX 10") {
            Plan::Write(Command::Set {
                cond,
                get,
                expire_at_ms,
                ..
            }) => {
                assert_eq!(cond, SetCond::IfAbsent);
                assert!(get);
                assert_eq!(expire_at_ms, Some(11_000));
            }
            other => panic!("{other:?}"),
        }
        for bad in [
            "SET k v NX XX",
            "SET k v EX",
            "SET k v EX 1 PX 1",
            "SET k v FOO",
        ] {
            assert_eq!(reply(run(&mut c, None, bad)), syntax(), "{bad}");
        }
        assert_eq!(
            reply(run(&mut c, None, "SET k v EX 0")),
            Reply::err("invalid expire time in 'set' command")
        );
        assert_eq!(reply(run(&mut c, None, "SET k v EX x")), not_integer());
    }

    #[test]
    fn expire_family_becomes_an_absolute_expiry() {
        let mut c = conn(true);
        let mut at = |line: &str| match run(&mut c, None, line) {
            Plan::Write(Command::Expire { at_ms, cond, .. }) => (at_ms, cond),
            other => panic!("{line}: {other:?}"),
        };
        // `run` plans at now_ms = 1_000.
        assert_eq!(at("EXPIRE k 10"), (Some(11_000), ExpireCond::Always));
        assert_eq!(at("PEXPIRE k 10 gt"), (Some(1_010), ExpireCond::IfLater));
        assert_eq!(at("EXPIREAT k 7 NX"), (Some(7_000), ExpireCond::IfNone));
        assert_eq!(at("PEXPIREAT k 7 xx xx"), (Some(7), ExpireCond::IfSome));
        assert_eq!(
            at("EXPIRE k -5"),
            (Some(0), ExpireCond::Always),
            "in the past"
        );
        assert_eq!(at("PERSIST k"), (None, ExpireCond::Always));
        assert_eq!(reply(run(&mut c, None, "EXPIRE k ten")), not_integer());
        assert!(matches!(
            reply(run(&mut c, None, "EXPIRE k 1 NX GT")),
            Reply::Error(e) if e.contains("not compatible")
        ));
        assert!(matches!(
            reply(run(&mut c, None, "EXPIRE k 1 SOON")),
            Reply::Error(e) if e.contains("Unsupported option SOON")
        ));
        assert_eq!(reply(run(&mut c, None, "EXPIRE k")), wrong_args("expire"));
    }

    #[test]
    fn arity_and_unknown_commands_are_errors() {
        let mut c = conn(true);
        assert_eq!(reply(run(&mut c, None, "GET")), wrong_args("get"));
        assert_eq!(reply(run(&mut c, None, "MSET a 1 b")), wrong_args("mset"));
        assert!(
            matches!(reply(run(&mut c, None, "FLY me")), Reply::Error(e) if e.contains("unknown command 'FLY'"))
        );
        assert_eq!(
            reply(run(&mut c, None, "DECRBY k -9223372036854775808")),
            not_integer()
        );
    }

    #[test]
    fn only_auth_ping_and_hello_before_auth() {
        let mut c = conn(false);
        assert_eq!(reply(run(&mut c, Some("pw"), "GET k")), noauth());
        assert_eq!(reply(run(&mut c, Some("pw"), "RAFT STATUS")), noauth());
        assert_eq!(reply(run(&mut c, Some("pw"), "NOSUCH")), noauth());
        assert_eq!(
            reply(run(&mut c, Some("pw"), "PING")),
            Reply::Simple("PONG".into())
        );
        assert!(
            matches!(reply(run(&mut c, Some("pw"), "HELLO 2")), Reply::Error(e) if e.starts_with("NOAUTH"))
        );
        assert!(
            matches!(reply(run(&mut c, Some("pw"), "AUTH nope")), Reply::Error(e) if e.starts_with("WRONGPASS"))
        );
        assert!(!c.authed);
        assert_eq!(reply(run(&mut c, Some("pw"), "AUTH pw")), Reply::ok());
        assert!(matches!(run(&mut c, Some("pw"), "GET k"), Plan::Read(_)));
    }

    #[test]
    fn hello_chooses_the_protocol_only_when_it_succeeds() {
        let mut c = conn(true);
        assert!(matches!(
            run(&mut c, None, "HELLO 4"),
            Plan::Reply(Reply::Error(e)) if e.starts_with("NOPROTO")
        ));
        assert_eq!(c.proto, Proto::Resp2);
        match run(&mut c, None, "HELLO 3") {
            Plan::Admin(AdminOp::Hello(fields)) => assert!(fields
                .iter()
                .any(|(k, v)| *k == Reply::bulk("proto") && *v == Reply::Int(3))),
            other => panic!("{other:?}"),
        }
        assert_eq!(c.proto, Proto::Resp3);
        let mut locked = conn(false);
        assert!(matches!(
            run(&mut locked, Some("pw"), "HELLO 3"),
            Plan::Reply(Reply::Error(_))
        ));
        assert_eq!(
            locked.proto,
            Proto::Resp2,
            "a refused HELLO changes nothing"
        );
    }

    #[test]
    fn readmode_changes_the_connection() {
        let mut c = conn(true);
        assert_eq!(reply(run(&mut c, None, "READMODE sequential")), Reply::ok());
        assert_eq!(c.read_mode, ReadMode::Sequential);
        assert_eq!(
            reply(run(&mut c, None, "READMODE")),
            Reply::bulk("sequential")
        );
        assert!(matches!(
            reply(run(&mut c, None, "READMODE fast")),
            Reply::Error(_)
        ));
        assert!(
            matches!(reply(run(&mut c, None, "READMODE lease")), Reply::Error(e) if e.contains("lease.enabled")),
            "lease mode is refused while leases are off"
        );
        assert_eq!(
            c.read_mode,
            ReadMode::Sequential,
            "a refused mode changes nothing"
        );
    }
}
