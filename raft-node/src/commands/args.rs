//! The data commands whose arguments take more than a line to check: `SET` and its options,
//! `GETEX`, `SCAN`, and the `EXPIRE` family.

use bytes::Bytes;

use super::{lower, not_integer, read, scan_args, syntax, wrong_args, Context, Plan, ReadOp};
use crate::kv::{parse_i64, Command, ExpireCond, Expiry, SetCond, TxRead, EXPIRY_MAX_MS};
use crate::resp::Reply;

pub(super) fn set(ctx: &Context<'_>, a: &[Bytes]) -> Plan {
    let [key, value, ..] = a else {
        return Plan::Reply(wrong_args("set"));
    };
    let (key, value) = (key.clone(), value.clone());
    let mut cond = SetCond::Always;
    let mut get = false;
    let mut expiry = None;
    let mut keep_ttl = false;
    let mut i = 2;
    while i < a.len() {
        let opt = lower(&a[i][..a[i].len().min(16)]);
        match opt.as_str() {
            "nx" if cond == SetCond::Always => cond = SetCond::IfAbsent,
            "xx" if cond == SetCond::Always => cond = SetCond::IfPresent,
            "get" if !get => get = true,
            "keepttl" if expiry.is_none() && !keep_ttl => keep_ttl = true,
            "ex" | "px" | "exat" | "pxat" if expiry.is_none() && !keep_ttl => {
                let Some(arg) = a.get(i + 1) else {
                    return Plan::Reply(syntax());
                };
                let Some(n) = parse_i64(arg) else {
                    return Plan::Reply(not_integer());
                };
                match option_expiry(&opt, n, ctx.now_ms) {
                    Some(e) => expiry = Some(e),
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
        expiry,
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
/// write carrying the expiry (relative for `EX`/`PX`, see [`option_expiry`]).
pub(super) fn getex(ctx: &Context<'_>, a: &[Bytes]) -> Plan {
    let key = a[0].clone();
    let expiry = match &a[1..] {
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
            match option_expiry(&opt, n, ctx.now_ms) {
                Some(e) => Some(e),
                None => return Plan::Reply(Reply::err("invalid expire time in 'getex' command")),
            }
        }
        _ => return Plan::Reply(syntax()),
    };
    Plan::Write(Command::GetEx { key, expiry })
}

/// `EXPIRE key seconds [NX|XX|GT|LT]` and its millisecond and absolute-time forms. A time in
/// the past (a relative one not positive, an absolute one before the epoch) deletes the key
/// when applied; one beyond Redis's range (a signed 64-bit count of milliseconds, for a
/// relative time counted from this node's clock) is refused with Redis's error.
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
    let invalid = || {
        Plan::Reply(Reply::err(format!(
            "invalid expire time in '{name}' command"
        )))
    };
    let ms = if matches!(name, "expire" | "expireat") {
        match n.checked_mul(1000) {
            Some(ms) => ms,
            None => return invalid(),
        }
    } else {
        n
    };
    let relative = matches!(name, "expire" | "pexpire");
    // Redis adds its clock to a relative time and refuses a sum past the signed range.
    let base = if relative {
        ctx.now_ms.min(EXPIRY_MAX_MS)
    } else {
        0
    };
    if ms > 0 && ms as u64 > EXPIRY_MAX_MS - base {
        return invalid();
    }
    let expiry = match (relative, u64::try_from(ms)) {
        (true, Ok(ms)) if ms > 0 => Expiry::In(ms),
        (false, Ok(ms)) => Expiry::At(ms),
        // Already past: applied as the epoch, which deletes the key (and compares as Redis's
        // past time does for GT and LT against a live key's expiry).
        _ => Expiry::At(0),
    };
    Plan::Write(Command::Expire {
        key: a[0].clone(),
        expiry: Some(expiry),
        cond,
    })
}

/// The expiry of an `EX`/`PX`/`EXAT`/`PXAT` option: `EX` and `PX` relative (every replica
/// counts them from the record's clock, so the proposer's clock does not matter), the others
/// absolute. `None` where Redis answers "invalid expire time": not positive, or past Redis's
/// range of a signed 64-bit count of milliseconds (a relative one counted from this node's
/// clock `now_ms`, as Redis counts it from its own).
pub(super) fn option_expiry(opt: &str, n: i64, now_ms: u64) -> Option<Expiry> {
    if n <= 0 {
        return None;
    }
    let n = n as u64;
    let ms = match opt {
        "ex" | "exat" => n.checked_mul(1000)?,
        _ => n,
    };
    let relative = matches!(opt, "ex" | "px");
    let base = if relative {
        now_ms.min(EXPIRY_MAX_MS)
    } else {
        0
    };
    if ms > EXPIRY_MAX_MS - base {
        return None;
    }
    Some(if relative {
        Expiry::In(ms)
    } else {
        Expiry::At(ms)
    })
}
