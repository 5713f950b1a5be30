//! What the node tells clients about its commands and settings: the command table (arity,
//! flags, key positions), `COMMAND` and `CONFIG GET`.

use bytes::Bytes;

use super::{lower, LocalOp, Plan};
use crate::resp::Reply;

/// `(name, arity, flags, first key, last key, step)` as `COMMAND` reports them. A negative
/// arity means "at least".
pub(super) type CommandSpec = (&'static str, i64, &'static [&'static str], i64, i64, i64);

/// Every command this server knows but the typed families' (in their own modules).
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
    ("expiretime", 2, &["readonly", "fast"], 1, 1, 1),
    ("flushall", -1, &["write"], 0, 0, 0),
    ("flushdb", -1, &["write"], 0, 0, 0),
    ("get", 2, &["readonly", "fast"], 1, 1, 1),
    ("getex", -2, &["write", "fast"], 1, 1, 1),
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
    ("incrbyfloat", 3, &["write", "denyoom", "fast"], 1, 1, 1),
    ("info", -1, &["loading", "stale"], 0, 0, 0),
    ("keys", 2, &["readonly"], 0, 0, 0),
    ("memory", -2, &["readonly"], 0, 0, 0),
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
    ("pexpiretime", 2, &["readonly", "fast"], 1, 1, 1),
    ("ping", -1, &["fast", "stale"], 0, 0, 0),
    ("psetex", 4, &["write", "denyoom"], 1, 1, 1),
    ("pttl", 2, &["readonly", "fast"], 1, 1, 1),
    ("quit", -1, &["fast", "no_auth"], 0, 0, 0),
    ("raft", -2, &["admin", "stale"], 0, 0, 0),
    ("readmode", -1, &["fast", "stale"], 0, 0, 0),
    ("rename", 3, &["write"], 1, 2, 1),
    ("renamenx", 3, &["write", "fast"], 1, 2, 1),
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
    ("wait", 3, &["noscript"], 0, 0, 0),
    (
        "watch",
        -2,
        &["noscript", "loading", "stale", "fast"],
        1,
        -1,
        1,
    ),
];

/// Every command: the key-level ones, then each family's.
fn all() -> impl Iterator<Item = &'static CommandSpec> {
    COMMANDS
        .iter()
        .chain(super::hash::COMMANDS)
        .chain(super::list::COMMANDS)
        .chain(super::set::COMMANDS)
        .chain(super::zset::COMMANDS)
}

pub(super) fn lookup(name: &str) -> Option<(i64, &'static [&'static str])> {
    all().find(|c| c.0 == name).map(|c| (c.1, c.2))
}

/// The error of a command that adds data while the map is at `maxmemory`, Redis's text.
pub const OOM_MESSAGE: &str = "OOM command not allowed when used memory > 'maxmemory'.";

/// The reply to a command that adds data while the map is at `maxmemory`.
pub fn oom_error() -> Reply {
    Reply::Error(OOM_MESSAGE.into())
}

/// Whether the command `name` (lower case) may add data (Redis's `denyoom` flag): refused
/// while the map is at `maxmemory`.
pub fn adds_data(name: &str) -> bool {
    lookup(name).is_some_and(|(_, flags)| flags.contains(&"denyoom"))
}

pub(super) fn command_entry(c: &CommandSpec) -> Reply {
    Reply::Array(vec![
        Reply::bulk(c.0.to_string()),
        Reply::Int(c.1),
        Reply::Array(c.2.iter().map(|f| Reply::Simple((*f).into())).collect()),
        Reply::Int(c.3),
        Reply::Int(c.4),
        Reply::Int(c.5),
    ])
}

/// `CONFIG GET pattern...` is answered by the server from the node's configuration (see
/// `introspection`); nothing can be set: the node is configured by its file.
pub(super) fn config(a: &[Bytes]) -> Plan {
    match (lower(&a[0]).as_str(), &a[1..]) {
        ("get", patterns) if !patterns.is_empty() => {
            Plan::Local(LocalOp::ConfigGet(patterns.to_vec()))
        }
        ("resetstat", []) => Plan::Local(LocalOp::ResetStat),
        _ => Plan::Reply(Reply::err(
            "only CONFIG GET is supported; the node is configured by its file",
        )),
    }
}

/// The name of every command, in the table's order: a name's position is its index in the
/// per-command counters (`cmdstats`).
pub fn command_names() -> Vec<&'static str> {
    all().map(|c| c.0).collect()
}

pub(super) fn command(a: &[Bytes]) -> Reply {
    let Some(sub) = a.first() else {
        return Reply::Array(all().map(command_entry).collect());
    };
    match (lower(sub).as_str(), &a[1..]) {
        ("count", []) => Reply::Int(all().count() as i64),
        ("list", _) => Reply::Array(all().map(|c| Reply::bulk(c.0.to_string())).collect()),
        ("info", names) => Reply::Array(
            names
                .iter()
                .map(|n| {
                    let n = lower(n);
                    all().find(|c| c.0 == n).map_or(Reply::Nil, command_entry)
                })
                .collect(),
        ),
        // redis-cli asks for documentation to show hints; having none is a valid answer.
        ("docs", _) => Reply::Array(Vec::new()),
        _ => Reply::err("unknown COMMAND subcommand; try COMMAND COUNT, LIST, INFO or DOCS"),
    }
}
