//! Planning the hash commands: arguments checked here, applied by `kv::hash`.

use bytes::Bytes;

use super::table::CommandSpec;
use super::{float_arg, int_arg, read, scan_args, write, wrong_args, Plan};
use crate::kv::{Command, Float, HashCmd, HashRead, TxRead};

/// The hash commands, as `COMMAND` reports them.
pub(super) const COMMANDS: &[CommandSpec] = &[
    ("hdel", -3, &["write", "fast"], 1, 1, 1),
    ("hexists", 3, &["readonly", "fast"], 1, 1, 1),
    ("hget", 3, &["readonly", "fast"], 1, 1, 1),
    ("hgetall", 2, &["readonly"], 1, 1, 1),
    ("hincrby", 4, &["write", "denyoom", "fast"], 1, 1, 1),
    ("hincrbyfloat", 4, &["write", "denyoom", "fast"], 1, 1, 1),
    ("hkeys", 2, &["readonly"], 1, 1, 1),
    ("hlen", 2, &["readonly", "fast"], 1, 1, 1),
    ("hmget", -3, &["readonly", "fast"], 1, 1, 1),
    ("hmset", -4, &["write", "denyoom", "fast"], 1, 1, 1),
    ("hscan", -3, &["readonly"], 1, 1, 1),
    ("hset", -4, &["write", "denyoom", "fast"], 1, 1, 1),
    ("hsetnx", 4, &["write", "denyoom", "fast"], 1, 1, 1),
    ("hstrlen", 3, &["readonly", "fast"], 1, 1, 1),
    ("hvals", 2, &["readonly"], 1, 1, 1),
];

fn hash(cmd: HashCmd) -> Plan {
    write(Command::HashOp(cmd))
}

fn hread(r: HashRead) -> Plan {
    read(TxRead::Hash(r))
}

/// Plans `name` if it is a hash command (its arity already checked).
pub(super) fn plan(name: &str, a: &[Bytes]) -> Option<Plan> {
    let key = || a[0].clone();
    Some(match name {
        "hset" | "hmset" => {
            if !(a.len() - 1).is_multiple_of(2) {
                return Some(Plan::Reply(wrong_args(name)));
            }
            hash(HashCmd::Set {
                key: key(),
                pairs: a[1..]
                    .chunks_exact(2)
                    .map(|p| (p[0].clone(), p[1].clone()))
                    .collect(),
                if_absent: false,
                reply_ok: name == "hmset",
            })
        }
        "hsetnx" => hash(HashCmd::Set {
            key: key(),
            pairs: vec![(a[1].clone(), a[2].clone())],
            if_absent: true,
            reply_ok: false,
        }),
        "hdel" => hash(HashCmd::Del {
            key: key(),
            fields: a[1..].to_vec(),
        }),
        "hincrby" => match int_arg(&a[2]) {
            Ok(delta) => hash(HashCmd::IncrBy {
                key: key(),
                field: a[1].clone(),
                delta,
            }),
            Err(e) => Plan::Reply(e),
        },
        "hincrbyfloat" => match float_arg(&a[2]) {
            Ok(d) => hash(HashCmd::IncrByFloat {
                key: key(),
                field: a[1].clone(),
                delta: Float(d),
            }),
            Err(e) => Plan::Reply(e),
        },
        "hget" => hread(HashRead::Get(key(), a[1].clone())),
        "hmget" => hread(HashRead::MGet(key(), a[1..].to_vec())),
        "hgetall" => hread(HashRead::GetAll(key())),
        "hexists" => hread(HashRead::Exists(key(), a[1].clone())),
        "hlen" => hread(HashRead::Len(key())),
        "hstrlen" => hread(HashRead::StrLen(key(), a[1].clone())),
        "hkeys" => hread(HashRead::Keys(key())),
        "hvals" => hread(HashRead::Vals(key())),
        "hscan" => match scan_args(&a[1..], false) {
            Ok(s) => hread(HashRead::Scan {
                key: key(),
                cursor: s.cursor,
                pattern: s.pattern,
                count: s.count,
            }),
            Err(e) => Plan::Reply(e),
        },
        _ => return None,
    })
}
