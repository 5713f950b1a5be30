//! Planning the set commands: arguments checked here, applied by `kv::set`.

use bytes::Bytes;

use super::table::CommandSpec;
use super::{count_arg, read, scan_args, write, Plan};
use crate::kv::{Command, SetCmd, SetRead, TxRead};

/// The set commands, as `COMMAND` reports them.
pub(super) const COMMANDS: &[CommandSpec] = &[
    ("sadd", -3, &["write", "denyoom", "fast"], 1, 1, 1),
    ("scard", 2, &["readonly", "fast"], 1, 1, 1),
    ("sdiff", -2, &["readonly"], 1, -1, 1),
    ("sinter", -2, &["readonly"], 1, -1, 1),
    ("sismember", 3, &["readonly", "fast"], 1, 1, 1),
    ("smembers", 2, &["readonly"], 1, 1, 1),
    ("smismember", -3, &["readonly", "fast"], 1, 1, 1),
    ("spop", -2, &["write", "fast"], 1, 1, 1),
    ("srem", -3, &["write", "fast"], 1, 1, 1),
    ("sscan", -3, &["readonly"], 1, 1, 1),
    ("sunion", -2, &["readonly"], 1, -1, 1),
];

fn sread(r: SetRead) -> Plan {
    read(TxRead::Set(r))
}

/// Plans `name` if it is a set command (its arity already checked).
pub(super) fn plan(name: &str, a: &[Bytes]) -> Option<Plan> {
    let key = || a[0].clone();
    Some(match name {
        "sadd" => write(Command::SetOp(SetCmd::Add {
            key: key(),
            members: a[1..].to_vec(),
        })),
        "srem" => write(Command::SetOp(SetCmd::Rem {
            key: key(),
            members: a[1..].to_vec(),
        })),
        "spop" => {
            let count = match a {
                [_] => None,
                [_, n] => match count_arg(n) {
                    Ok(n) => Some(n),
                    Err(e) => return Some(Plan::Reply(e)),
                },
                _ => return Some(Plan::Reply(super::syntax())),
            };
            write(Command::SetOp(SetCmd::Pop { key: key(), count }))
        }
        "smembers" => sread(SetRead::Members(key())),
        "sismember" => sread(SetRead::IsMember(key(), a[1].clone())),
        "smismember" => sread(SetRead::MIsMember(key(), a[1..].to_vec())),
        "scard" => sread(SetRead::Card(key())),
        "sinter" => sread(SetRead::Inter(a.to_vec())),
        "sunion" => sread(SetRead::Union(a.to_vec())),
        "sdiff" => sread(SetRead::Diff(a.to_vec())),
        "sscan" => match scan_args(&a[1..], false) {
            Ok(s) => sread(SetRead::Scan {
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
