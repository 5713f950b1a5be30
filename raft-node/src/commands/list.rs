//! Planning the list commands: arguments checked here, applied by `kv::list`.

use bytes::Bytes;

use super::table::CommandSpec;
use super::{count_arg, int_arg, lower, read, syntax, write, Plan};
use crate::kv::{Command, ListCmd, ListRead, TxRead};
use crate::resp::Reply;

/// The list commands, as `COMMAND` reports them.
pub(super) const COMMANDS: &[CommandSpec] = &[
    ("lindex", 3, &["readonly"], 1, 1, 1),
    ("llen", 2, &["readonly", "fast"], 1, 1, 1),
    ("lmove", 5, &["write", "denyoom"], 1, 2, 1),
    ("lpop", -2, &["write", "fast"], 1, 1, 1),
    ("lpush", -3, &["write", "denyoom", "fast"], 1, 1, 1),
    ("lpushx", -3, &["write", "denyoom", "fast"], 1, 1, 1),
    ("lrange", 4, &["readonly"], 1, 1, 1),
    ("lrem", 4, &["write"], 1, 1, 1),
    ("lset", 4, &["write", "denyoom"], 1, 1, 1),
    ("ltrim", 4, &["write"], 1, 1, 1),
    ("rpop", -2, &["write", "fast"], 1, 1, 1),
    ("rpoplpush", 3, &["write", "denyoom"], 1, 2, 1),
    ("rpush", -3, &["write", "denyoom", "fast"], 1, 1, 1),
    ("rpushx", -3, &["write", "denyoom", "fast"], 1, 1, 1),
];

fn list(cmd: ListCmd) -> Plan {
    write(Command::ListOp(cmd))
}

fn side(b: &[u8]) -> Option<bool> {
    match lower(&b[..b.len().min(8)]).as_str() {
        "left" => Some(true),
        "right" => Some(false),
        _ => None,
    }
}

/// Plans `name` if it is a list command (its arity already checked).
pub(super) fn plan(name: &str, a: &[Bytes]) -> Option<Plan> {
    let key = || a[0].clone();
    let ints =
        |x: &Bytes, y: &Bytes| -> Result<(i64, i64), Reply> { Ok((int_arg(x)?, int_arg(y)?)) };
    Some(match name {
        "lpush" | "rpush" | "lpushx" | "rpushx" => list(ListCmd::Push {
            key: key(),
            left: name.starts_with('l'),
            if_exists: name.ends_with('x'),
            values: a[1..].to_vec(),
        }),
        "lpop" | "rpop" => {
            let count = match a {
                [_] => None,
                [_, n] => match count_arg(n) {
                    Ok(n) => Some(n),
                    Err(e) => return Some(Plan::Reply(e)),
                },
                _ => return Some(Plan::Reply(syntax())),
            };
            list(ListCmd::Pop {
                key: key(),
                left: name == "lpop",
                count,
            })
        }
        "lset" => match int_arg(&a[1]) {
            Ok(index) => list(ListCmd::Set {
                key: key(),
                index,
                value: a[2].clone(),
            }),
            Err(e) => Plan::Reply(e),
        },
        "lrem" => match int_arg(&a[1]) {
            Ok(count) => list(ListCmd::Rem {
                key: key(),
                count,
                value: a[2].clone(),
            }),
            Err(e) => Plan::Reply(e),
        },
        "ltrim" => match ints(&a[1], &a[2]) {
            Ok((start, stop)) => list(ListCmd::Trim {
                key: key(),
                start,
                stop,
            }),
            Err(e) => Plan::Reply(e),
        },
        "lmove" | "rpoplpush" => {
            let (from_left, to_left) = match a {
                [_, _] => (false, true),
                [_, _, from, to] => match (side(from), side(to)) {
                    (Some(f), Some(t)) => (f, t),
                    _ => return Some(Plan::Reply(syntax())),
                },
                _ => return Some(Plan::Reply(syntax())),
            };
            list(ListCmd::Move {
                src: key(),
                dst: a[1].clone(),
                from_left,
                to_left,
            })
        }
        "lrange" => match ints(&a[1], &a[2]) {
            Ok((start, stop)) => read(TxRead::List(ListRead::Range(key(), start, stop))),
            Err(e) => Plan::Reply(e),
        },
        "llen" => read(TxRead::List(ListRead::Len(key()))),
        "lindex" => match int_arg(&a[1]) {
            Ok(i) => read(TxRead::List(ListRead::Index(key(), i))),
            Err(e) => Plan::Reply(e),
        },
        _ => return None,
    })
}
