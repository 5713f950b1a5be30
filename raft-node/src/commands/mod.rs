//! Turning a client request into a plan: a reply right away, a replicated write, a local read,
//! or an admin call that needs the node's status. Everything here is pure and checks all
//! arguments before anything is proposed, so a bad request is refused whole and nothing is
//! applied partially.
//!
//! This file holds the plan types, the dispatch, the argument helpers and the connection
//! commands; `table` the command table with `COMMAND` and `CONFIG GET`; `args` the data
//! commands with long argument lists (`SET`, `GETEX`, `SCAN`, the `EXPIRE` family); `hash`,
//! `list`, `set` and `zset` the typed families.

use bytes::Bytes;

use crate::clients::KillFilter;
use crate::config::ReadMode;
use crate::kv::{parse_f64, parse_i64, Command, ExpireCond, SetCond, TxOp, TxRead};
use crate::resp::{Proto, Reply};

mod args;
mod hash;
mod list;
mod set;
mod table;
#[cfg(test)]
mod tests;
mod zset;

use self::args::{expire, getex, option_expiry, scan, set};
pub use self::table::command_names;
pub use self::table::{adds_data, oom_error, OOM_MESSAGE};
use self::table::{command, config, lookup};

/// Most keys one connection may watch: the watches travel in the `EXEC` record.
pub const WATCHED_KEYS_MAX: usize = 10_000;

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
    /// Argument bytes of the commands queued since `MULTI` (bounded, see `multi`).
    pub multi_bytes: usize,
    /// Whether a command queued since `MULTI` adds data: `EXEC` is refused at `maxmemory`.
    pub multi_denyoom: bool,
    /// `(key, applied offset when watched)` of every key watched since the last `EXEC`,
    /// `DISCARD` or `UNWATCH` (see `kv`'s "Versions and WATCH").
    pub watched: Vec<(Bytes, u64)>,
}

impl Conn {
    /// Watches `keys` as of the map's applied offset `at`; a key already watched keeps its
    /// first offset, as Redis keeps its first watch. Refused past [`WATCHED_KEYS_MAX`].
    pub fn watch(&mut self, keys: Vec<Bytes>, at: u64) -> Reply {
        for k in keys {
            if self.watched.iter().any(|(w, _)| *w == k) {
                continue;
            }
            if self.watched.len() >= WATCHED_KEYS_MAX {
                return Reply::err(format!(
                    "too many watched keys (at most {WATCHED_KEYS_MAX} per connection)"
                ));
            }
            self.watched.push((k, at));
        }
        Reply::ok()
    }
}

/// A read of the local map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadOp {
    /// A read the state machine answers, inside a transaction too.
    Data(TxRead),
    /// `KEYS pattern`.
    Keys(Bytes),
    /// `SCAN cursor [MATCH pattern] [COUNT n] [TYPE t]`.
    Scan {
        /// Where to resume.
        cursor: u64,
        /// The glob keys must match.
        pattern: Option<Bytes>,
        /// How many keys to look at, about.
        count: usize,
        /// Only keys holding this type (`string`, `hash`, ...), lower-cased.
        type_name: Option<String>,
    },
    /// `WATCH key...`: served after the read barrier, so that the offset it records covers
    /// every write acknowledged before it.
    Watch(Vec<Bytes>),
    /// `MEMORY USAGE key [SAMPLES n]`: the key's estimated bytes, measuring at most `n`
    /// elements of a collection (0: all).
    MemoryUsage(Bytes, usize),
    /// `RAFT DIGEST`: the applied offset and a digest of the state there, after the read
    /// barrier, to compare replicas.
    Digest,
}

impl ReadOp {
    /// The read as the state machine answers it (inside a transaction too); `None` for the
    /// key-space walks and `WATCH`, which the server answers itself.
    pub fn as_tx(&self) -> Option<TxRead> {
        match self {
            ReadOp::Data(r) => Some(r.clone()),
            _ => None,
        }
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
    /// `RAFT VOTERS`: the voter set in force, and on the leader the observers.
    RaftVoters,
    /// `RAFT ADD-VOTER <replica id> [<directory id>]` (on the leader).
    RaftAddVoter(u32, Option<raft_core::DirectoryId>),
    /// `RAFT REMOVE-VOTER <replica id>` (on the leader).
    RaftRemoveVoter(u32),
    /// `RAFT UPDATE-VOTER <replica id> <ip:port>`: the address peers reach that voter at (on
    /// the leader).
    RaftUpdateVoter(u32, std::net::SocketAddr),
    /// `ROLE`, as Redis answers it: the leader is the master, every other replica a slave.
    Role,
    /// `HELLO`'s reply, all but the role, which needs the node's status.
    Hello(Vec<(Reply, Reply)>),
}

/// A call the server answers from its own state (the connection registry, the node's
/// configuration, the connection's writes), without the node's status or the map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LocalOp {
    /// `CONFIG RESETSTAT`: the per-command counters back to zero.
    ResetStat,
    /// `CLIENT LIST [TYPE t] [ID id...]`: these connections (`None`: all).
    ClientList(Option<Vec<u64>>),
    /// `CLIENT INFO`: this connection's line.
    ClientInfo,
    /// `CLIENT KILL`: close the connections the filter matches; `old_form` for
    /// `CLIENT KILL ip:port`, answered `+OK` or an error rather than a count.
    ClientKill {
        /// Which connections.
        filter: KillFilter,
        /// Whether the request had the old one-argument form.
        old_form: bool,
    },
    /// `CONFIG GET pattern...`.
    ConfigGet(Vec<Bytes>),
    /// `WAIT numreplicas timeout`: wait until that many other replicas hold the connection's
    /// last write, at most `timeout_ms` (0: no bound, as in Redis).
    Wait {
        /// How many other replicas to wait for.
        replicas: u64,
        /// The longest wait in milliseconds; 0 waits until the connection ends.
        timeout_ms: u64,
    },
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
    /// Answered by the server from its own state.
    Local(LocalOp),
}

/// Static facts `plan` needs.
pub struct Context<'a> {
    /// The `AUTH` password, if any.
    pub requirepass: Option<&'a str>,
    /// This node's wall clock, milliseconds since the Unix epoch: only to refuse a relative
    /// expiry beyond Redis's range, as Redis checks it against its own clock (the record
    /// carries the duration; its time comes from the leader).
    pub now_ms: u64,
    /// Whether this node serves lease reads (`lease.enabled`).
    pub lease_reads: bool,
    /// Whether the map's estimated size is at or above `maxmemory` (never without it):
    /// commands that add data are refused with `-OOM` before they are proposed.
    pub oom: bool,
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

/// A read the state machine answers.
fn read(r: TxRead) -> Plan {
    Plan::Read(ReadOp::Data(r))
}

/// A replicated write.
fn write(cmd: Command) -> Plan {
    Plan::Write(cmd)
}

/// An integer argument, or Redis's error.
fn int_arg(b: &[u8]) -> Result<i64, Reply> {
    parse_i64(b).ok_or_else(not_integer)
}

/// A float argument (never NaN), or Redis's error.
fn float_arg(b: &[u8]) -> Result<f64, Reply> {
    parse_f64(b).ok_or_else(|| Reply::err("value is not a valid float"))
}

/// The count of a pop (`LPOP`, `SPOP`, `ZPOPMIN`): not negative.
fn count_arg(b: &[u8]) -> Result<u64, Reply> {
    match parse_i64(b) {
        Some(n) if n >= 0 => Ok(n as u64),
        Some(_) => Err(Reply::err("value is out of range, must be positive")),
        None => Err(not_integer()),
    }
}

/// The arguments of `SCAN` and the element scans.
struct ScanArgs {
    cursor: u64,
    pattern: Option<Bytes>,
    count: u64,
    type_name: Option<String>,
}

/// `cursor [MATCH pattern] [COUNT n]`, and `[TYPE t]` when `with_type` (`SCAN` only).
fn scan_args(a: &[Bytes], with_type: bool) -> Result<ScanArgs, Reply> {
    let Some(cursor) = std::str::from_utf8(&a[0])
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
    else {
        return Err(Reply::err("invalid cursor"));
    };
    let mut s = ScanArgs {
        cursor,
        pattern: None,
        count: 10,
        type_name: None,
    };
    let mut i = 1;
    while i < a.len() {
        let Some(arg) = a.get(i + 1) else {
            return Err(syntax());
        };
        match lower(&a[i][..a[i].len().min(8)]).as_str() {
            "match" => s.pattern = Some(arg.clone()),
            "count" => match parse_i64(arg) {
                Some(n) if n > 0 => s.count = (n as u64).min(100_000),
                Some(_) => return Err(syntax()),
                None => return Err(not_integer()),
            },
            "type" if with_type => s.type_name = Some(lower(arg)),
            _ => return Err(syntax()),
        }
        i += 2;
    }
    Ok(s)
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
    // Before anything is proposed: a record in the log applies on every replica alike.
    if ctx.oom && flags.contains(&"denyoom") {
        return Plan::Reply(oom_error());
    }
    // The arity check above guarantees every argument indexed below exists.
    let a = &args[1..];
    let family = hash::plan(&name, a)
        .or_else(|| list::plan(&name, a))
        .or_else(|| set::plan(&name, a))
        .or_else(|| zset::plan(&name, a));
    if let Some(plan) = family {
        return plan;
    }
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
        "client" => client(conn, a),
        "config" => config(a),
        "wait" => wait(a),
        "memory" => memory(a),
        "command" => Plan::Reply(command(a)),
        "info" => Plan::Admin(AdminOp::Info(a.iter().map(|s| lower(s)).collect())),
        "role" => Plan::Admin(AdminOp::Role),
        "raft" => match lower(&a[0]).as_str() {
            "status" if a.len() == 1 => Plan::Admin(AdminOp::RaftStatus),
            "describe" if a.len() == 1 => Plan::Admin(AdminOp::RaftDescribe),
            "digest" if a.len() == 1 => Plan::Read(ReadOp::Digest),
            "transfer" if a.len() == 2 => match std::str::from_utf8(&a[1])
                .ok()
                .and_then(|s| s.parse::<u32>().ok())
            {
                Some(id) => Plan::Admin(AdminOp::RaftTransfer(id)),
                None => Plan::Reply(Reply::err("RAFT TRANSFER needs a replica id")),
            },
            "voters" if a.len() == 1 => Plan::Admin(AdminOp::RaftVoters),
            "add-voter" if a.len() == 2 || a.len() == 3 => {
                let directory = match a.get(2) {
                    None => Ok(None),
                    Some(d) => std::str::from_utf8(d)
                        .map_err(|_| "a directory id is text".to_string())
                        .and_then(|d| d.parse::<raft_core::DirectoryId>())
                        .map(Some),
                };
                match (replica_id(&a[1]), directory) {
                    (Some(id), Ok(d)) => Plan::Admin(AdminOp::RaftAddVoter(id, d)),
                    (None, _) => Plan::Reply(Reply::err("RAFT ADD-VOTER needs a replica id")),
                    (_, Err(e)) => Plan::Reply(Reply::Error(format!("ERR {e}"))),
                }
            }
            "remove-voter" if a.len() == 2 => match replica_id(&a[1]) {
                Some(id) => Plan::Admin(AdminOp::RaftRemoveVoter(id)),
                None => Plan::Reply(Reply::err("RAFT REMOVE-VOTER needs a replica id")),
            },
            "update-voter" if a.len() == 3 => {
                // Peers reach a voter at its endpoint, so it must be an address they can dial.
                let endpoint = std::str::from_utf8(&a[2])
                    .ok()
                    .and_then(|e| e.parse::<std::net::SocketAddr>().ok());
                match (replica_id(&a[1]), endpoint) {
                    (Some(id), Some(e)) => Plan::Admin(AdminOp::RaftUpdateVoter(id, e)),
                    (None, _) => Plan::Reply(Reply::err("RAFT UPDATE-VOTER needs a replica id")),
                    (_, None) => Plan::Reply(Reply::err(
                        "RAFT UPDATE-VOTER needs the endpoint as <ip>:<port>",
                    )),
                }
            }
            _ => Plan::Reply(Reply::err(
                "unknown RAFT subcommand; try RAFT STATUS, DESCRIBE, VOTERS, TRANSFER <id>, \
                 ADD-VOTER <id> [<directory>], REMOVE-VOTER <id> or UPDATE-VOTER <id> <ip:port>",
            )),
        },
        "get" => read(TxRead::Get(a[0].clone())),
        "strlen" => read(TxRead::StrLen(a[0].clone())),
        "ttl" => read(TxRead::Ttl(a[0].clone(), false)),
        "type" => read(TxRead::Type(a[0].clone())),
        "keys" => Plan::Read(ReadOp::Keys(a[0].clone())),
        "scan" => scan(a),
        "unlink" => Plan::Write(Command::Del { keys: a.to_vec() }),
        "setnx" => Plan::Write(Command::SetNx {
            key: a[0].clone(),
            value: a[1].clone(),
        }),
        "getdel" => Plan::Write(Command::GetDel { key: a[0].clone() }),
        "getex" => getex(ctx, a),
        "incrbyfloat" => match float_arg(&a[1]) {
            Ok(d) => write(Command::IncrByFloat {
                key: a[0].clone(),
                delta: crate::kv::Float(d),
            }),
            Err(e) => Plan::Reply(e),
        },
        "rename" | "renamenx" => write(Command::Rename {
            src: a[0].clone(),
            dst: a[1].clone(),
            if_absent: name == "renamenx",
        }),
        "flushall" | "flushdb" => match a {
            [] => write(Command::Flush),
            [mode] if matches!(lower(mode).as_str(), "sync" | "async") => write(Command::Flush),
            _ => Plan::Reply(syntax()),
        },
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
            expiry: None,
            keep_ttl: false,
        }),
        "setex" | "psetex" => {
            let Some(n) = parse_i64(&a[1]) else {
                return Plan::Reply(not_integer());
            };
            let unit = if name == "setex" { "ex" } else { "px" };
            match option_expiry(unit, n, ctx.now_ms) {
                Some(e) => Plan::Write(Command::Set {
                    key: a[0].clone(),
                    value: a[2].clone(),
                    cond: SetCond::Always,
                    get: false,
                    expiry: Some(e),
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
        "pttl" => read(TxRead::Ttl(a[0].clone(), true)),
        "expiretime" => read(TxRead::ExpireTime(a[0].clone(), false)),
        "pexpiretime" => read(TxRead::ExpireTime(a[0].clone(), true)),
        "mget" => read(TxRead::MGet(a.to_vec())),
        "exists" => read(TxRead::Exists(a.to_vec())),
        "dbsize" => read(TxRead::DbSize),
        "set" => set(ctx, a),
        "expire" | "pexpire" | "expireat" | "pexpireat" => expire(ctx, &name, a),
        "persist" => Plan::Write(Command::Expire {
            key: a[0].clone(),
            expiry: None,
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

fn client(conn: &mut Conn, a: &[Bytes]) -> Plan {
    let reply = match (lower(&a[0]).as_str(), &a[1..]) {
        ("id", []) => Reply::Int(conn.id as i64),
        ("setname", [name]) => {
            // Redis's rule: one word of printable characters, so that CLIENT LIST stays
            // parseable.
            if name.iter().any(|b| !(b'!'..=b'~').contains(b)) {
                return Plan::Reply(Reply::err(
                    "Client names cannot contain spaces, newlines or special characters.",
                ));
            }
            conn.name = (!name.is_empty()).then(|| name.clone());
            Reply::ok()
        }
        ("getname", []) => conn.name.clone().map_or(Reply::Nil, Reply::Bulk),
        ("setinfo", [_, _]) => Reply::ok(),
        ("info", []) => return Plan::Local(LocalOp::ClientInfo),
        ("list", rest) => return client_list(rest),
        ("kill", [addr]) => {
            return Plan::Local(LocalOp::ClientKill {
                filter: KillFilter {
                    addr: Some(String::from_utf8_lossy(addr).into_owned()),
                    ..KillFilter::default()
                },
                old_form: true,
            })
        }
        ("kill", rest) if !rest.is_empty() => return client_kill(rest),
        _ => Reply::err("unknown CLIENT subcommand or wrong number of arguments"),
    };
    Plan::Reply(reply)
}

/// A client id argument: a positive integer.
fn client_id(b: &[u8]) -> Option<u64> {
    std::str::from_utf8(b)
        .ok()?
        .parse::<u64>()
        .ok()
        .filter(|i| *i > 0)
}

/// `CLIENT LIST [TYPE normal|master|replica|pubsub] [ID id...]`: every connection here is
/// a normal client.
fn client_list(mut a: &[Bytes]) -> Plan {
    let mut ids: Option<Vec<u64>> = None;
    while let [opt, rest @ ..] = a {
        match (lower(opt).as_str(), rest) {
            ("type", [t, more @ ..]) => {
                match lower(t).as_str() {
                    "normal" => {}
                    "master" | "replica" | "slave" | "pubsub" => ids = Some(Vec::new()),
                    other => {
                        return Plan::Reply(Reply::err(format!("Unknown client type '{other}'")))
                    }
                }
                a = more;
            }
            ("id", list) if !list.is_empty() => {
                let mut found = Vec::new();
                for id in list {
                    match client_id(id) {
                        Some(i) => found.push(i),
                        None => return Plan::Reply(Reply::err("Invalid client ID")),
                    }
                }
                // TYPE other than normal already chose nothing.
                if ids.is_none() {
                    ids = Some(found);
                }
                a = &[];
            }
            _ => return Plan::Reply(syntax()),
        }
    }
    Plan::Local(LocalOp::ClientList(ids))
}

/// The filter form `CLIENT KILL <filter> <value> ...` (`ID`, `ADDR`, `LADDR`, `SKIPME`).
fn client_kill(a: &[Bytes]) -> Plan {
    let mut filter = KillFilter {
        skip_me: true,
        ..KillFilter::default()
    };
    if !a.len().is_multiple_of(2) {
        return Plan::Reply(syntax());
    }
    for pair in a.chunks_exact(2) {
        let value = &pair[1];
        match lower(&pair[0]).as_str() {
            "id" => match client_id(value) {
                Some(i) => filter.id = Some(i),
                None => return Plan::Reply(Reply::err("client-id should be greater than 0")),
            },
            "addr" => filter.addr = Some(String::from_utf8_lossy(value).into_owned()),
            "laddr" => filter.laddr = Some(String::from_utf8_lossy(value).into_owned()),
            "skipme" => match lower(value).as_str() {
                "yes" => filter.skip_me = true,
                "no" => filter.skip_me = false,
                _ => return Plan::Reply(syntax()),
            },
            _ => return Plan::Reply(syntax()),
        }
    }
    Plan::Local(LocalOp::ClientKill {
        filter,
        old_form: false,
    })
}

/// `WAIT numreplicas timeout`.
fn wait(a: &[Bytes]) -> Plan {
    let (Some(n), Some(t)) = (parse_i64(&a[0]), parse_i64(&a[1])) else {
        return Plan::Reply(not_integer());
    };
    if t < 0 {
        return Plan::Reply(Reply::err("timeout is negative"));
    }
    Plan::Local(LocalOp::Wait {
        replicas: n.max(0) as u64,
        timeout_ms: t as u64,
    })
}

/// `MEMORY USAGE key [SAMPLES n]` (Redis samples 5 elements unless told).
fn memory(a: &[Bytes]) -> Plan {
    match (lower(&a[0]).as_str(), &a[1..]) {
        ("usage", [key]) => Plan::Read(ReadOp::MemoryUsage(key.clone(), 5)),
        ("usage", [key, opt, n]) if lower(opt) == "samples" => match parse_i64(n) {
            Some(n) if n >= 0 => Plan::Read(ReadOp::MemoryUsage(key.clone(), n as usize)),
            Some(_) => Plan::Reply(syntax()),
            None => Plan::Reply(not_integer()),
        },
        ("usage", _) => Plan::Reply(syntax()),
        _ => Plan::Reply(Reply::err(
            "unknown MEMORY subcommand; only MEMORY USAGE key [SAMPLES n] is supported",
        )),
    }
}

/// A replica id argument.
fn replica_id(arg: &[u8]) -> Option<u32> {
    std::str::from_utf8(arg).ok()?.parse::<u32>().ok()
}
