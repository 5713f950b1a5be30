//! The data commands whose arguments take more than a line to check: `SET` and its options,
//! `GETEX`, `SCAN`, and the `EXPIRE` family.

use bytes::Bytes;

use super::{lower, not_integer, read, scan_args, syntax, wrong_args, Context, Plan, ReadOp};
use crate::kv::{parse_i64, Command, ExpireCond, SetCond, TxRead};
use crate::resp::Reply;

pub(super) fn set(ctx: &Context<'_>, a: &[Bytes]) -> Plan {
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

/// `SCAN cursor [MATCH pattern] [COUNT n] [TYPE t]`.
pub(super) fn scan(a: &[Bytes]) -> Plan {
    match scan_args(a, true) {
        Ok(s) => Plan::Read(ReadOp::Scan {
            cursor: s.cursor,
            pattern: s.pattern,
            count: s.count as usize,
            type_name: s.type_name,
        }),
        Err(e) => Plan::Reply(e),
    }
}

/// `GETEX key [EX s|PX ms|EXAT s|PXAT ms|PERSIST]`: a plain read without an option, else a
/// write with the absolute expiry stamped here.
pub(super) fn getex(ctx: &Context<'_>, a: &[Bytes]) -> Plan {
    let key = a[0].clone();
    let at_ms = match &a[1..] {
        [] => return read(TxRead::Get(key)),
        [opt] if lower(opt) == "persist" => None,
        [opt, n] => {
            let opt = lower(&opt[..opt.len().min(8)]);
            if !matches!(opt.as_str(), "ex" | "px" | "exat" | "pxat") {
                return Plan::Reply(syntax());
            }
            let Some(n) = parse_i64(n) else {
                return Plan::Reply(not_integer());
            };
            match expiry(&opt, n, ctx.now_ms) {
                Some(at) => Some(at),
                None => return Plan::Reply(Reply::err("invalid expire time in 'getex' command")),
            }
        }
        _ => return Plan::Reply(syntax()),
    };
    Plan::Write(Command::GetEx { key, at_ms })
}

/// `EXPIRE key seconds [NX|XX|GT|LT]` and its millisecond and absolute-time forms. A time in
/// the past deletes the key when applied; one beyond what a `u64` of milliseconds holds is
/// refused, as Redis refuses it.
pub(super) fn expire(ctx: &Context<'_>, name: &str, a: &[Bytes]) -> Plan {
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

/// The absolute expiry of an `EX`/`PX`/`EXAT`/`PXAT` option, stamped here on the proposing
/// node so that every replica applies the same time.
pub(super) fn expiry(opt: &str, n: i64, now_ms: u64) -> Option<u64> {
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
