//! Planning the sorted-set commands: arguments checked here (Redis's errors, no NaN ever
//! reaches a record), applied by `kv::zset`.

use bytes::Bytes;

use super::table::CommandSpec;
use super::{count_arg, int_arg, lower, read, scan_args, syntax, write, Plan};
use crate::kv::{
    parse_f64, Command, Float, LexBound, ScoreBound, TxRead, ZAddFlags, ZBy, ZRange, ZSetCmd,
    ZSetRead,
};
use crate::resp::Reply;

/// The sorted-set commands, as `COMMAND` reports them.
pub(super) const COMMANDS: &[CommandSpec] = &[
    ("zadd", -4, &["write", "denyoom", "fast"], 1, 1, 1),
    ("zcard", 2, &["readonly", "fast"], 1, 1, 1),
    ("zcount", 4, &["readonly", "fast"], 1, 1, 1),
    ("zincrby", 4, &["write", "denyoom", "fast"], 1, 1, 1),
    ("zmscore", -3, &["readonly", "fast"], 1, 1, 1),
    ("zpopmax", -2, &["write", "fast"], 1, 1, 1),
    ("zpopmin", -2, &["write", "fast"], 1, 1, 1),
    ("zrange", -4, &["readonly"], 1, 1, 1),
    ("zrangebylex", -4, &["readonly"], 1, 1, 1),
    ("zrangebyscore", -4, &["readonly"], 1, 1, 1),
    ("zrank", -3, &["readonly", "fast"], 1, 1, 1),
    ("zrem", -3, &["write", "fast"], 1, 1, 1),
    ("zrevrange", -4, &["readonly"], 1, 1, 1),
    ("zrevrangebyscore", -4, &["readonly"], 1, 1, 1),
    ("zrevrank", -3, &["readonly", "fast"], 1, 1, 1),
    ("zscan", -3, &["readonly"], 1, 1, 1),
    ("zscore", 3, &["readonly", "fast"], 1, 1, 1),
];

fn zset(cmd: ZSetCmd) -> Plan {
    write(Command::ZSetOp(cmd))
}

fn zread(r: ZSetRead) -> Plan {
    read(TxRead::ZSet(r))
}

fn not_float() -> Reply {
    Reply::err("value is not a valid float")
}

/// A score bound: `score`, `(score`, `-inf`, `+inf`.
fn score_bound(b: &[u8]) -> Result<ScoreBound, Reply> {
    let (exclusive, rest) = match b.strip_prefix(b"(") {
        Some(rest) => (true, rest),
        None => (false, b),
    };
    match parse_f64(rest) {
        Some(v) => Ok(ScoreBound {
            value: Float(v),
            exclusive,
        }),
        None => Err(Reply::err("min or max is not a float")),
    }
}

/// A lexicographic bound: `-`, `+`, `[member`, `(member`.
fn lex_bound(b: &Bytes) -> Result<LexBound, Reply> {
    match b.first() {
        Some(b'-') if b.len() == 1 => Ok(LexBound::Min),
        Some(b'+') if b.len() == 1 => Ok(LexBound::Max),
        Some(b'[') => Ok(LexBound::Incl(b.slice(1..))),
        Some(b'(') => Ok(LexBound::Excl(b.slice(1..))),
        _ => Err(Reply::err("min or max not valid string range item")),
    }
}

/// Plans `name` if it is a sorted-set command (its arity already checked).
pub(super) fn plan(name: &str, a: &[Bytes]) -> Option<Plan> {
    let key = || a[0].clone();
    let planned = match name {
        "zadd" => zadd(a),
        "zincrby" => match parse_f64(&a[1]) {
            Some(d) => Ok(zset(ZSetCmd::Add {
                key: key(),
                flags: ZAddFlags {
                    incr: true,
                    ..ZAddFlags::default()
                },
                pairs: vec![(Float(d), a[2].clone())],
            })),
            None => Err(not_float()),
        },
        "zrem" => Ok(zset(ZSetCmd::Rem {
            key: key(),
            members: a[1..].to_vec(),
        })),
        "zpopmin" | "zpopmax" => match a {
            [_] => Ok(None),
            [_, n] => count_arg(n).map(Some),
            _ => Err(syntax()),
        }
        .map(|count| {
            zset(ZSetCmd::Pop {
                key: key(),
                max: name == "zpopmax",
                count,
            })
        }),
        "zscore" => Ok(zread(ZSetRead::Score(key(), a[1].clone()))),
        "zmscore" => Ok(zread(ZSetRead::MScore(key(), a[1..].to_vec()))),
        "zcard" => Ok(zread(ZSetRead::Card(key()))),
        "zcount" => score_bound(&a[1])
            .and_then(|min| Ok((min, score_bound(&a[2])?)))
            .map(|(min, max)| zread(ZSetRead::Count(key(), min, max))),
        "zrank" | "zrevrank" => match &a[2..] {
            [] => Ok(false),
            [w] if lower(w) == "withscore" => Ok(true),
            _ => Err(syntax()),
        }
        .map(|with_score| {
            zread(ZSetRead::Rank {
                key: key(),
                member: a[1].clone(),
                rev: name == "zrevrank",
                with_score,
            })
        }),
        "zrange" | "zrangebyscore" | "zrevrangebyscore" | "zrevrange" | "zrangebylex" => {
            zrange(name, a).map(|r| zread(ZSetRead::Range(r)))
        }
        "zscan" => scan_args(&a[1..], false).map(|s| {
            zread(ZSetRead::Scan {
                key: key(),
                cursor: s.cursor,
                pattern: s.pattern,
                count: s.count,
            })
        }),
        _ => return None,
    };
    Some(planned.unwrap_or_else(Plan::Reply))
}

fn zadd(a: &[Bytes]) -> Result<Plan, Reply> {
    let mut f = ZAddFlags::default();
    let mut i = 1;
    while let Some(opt) = a.get(i) {
        let flag = match lower(&opt[..opt.len().min(8)]).as_str() {
            "nx" => &mut f.nx,
            "xx" => &mut f.xx,
            "gt" => &mut f.gt,
            "lt" => &mut f.lt,
            "ch" => &mut f.ch,
            "incr" => &mut f.incr,
            _ => break,
        };
        *flag = true;
        i += 1;
    }
    let rest = &a[i..];
    if rest.is_empty() || !rest.len().is_multiple_of(2) {
        return Err(syntax());
    }
    if f.nx && f.xx {
        return Err(Reply::err(
            "XX and NX options at the same time are not compatible",
        ));
    }
    if (f.nx && (f.gt || f.lt)) || (f.gt && f.lt) {
        return Err(Reply::err(
            "GT, LT, and/or NX options at the same time are not compatible",
        ));
    }
    if f.incr && rest.len() > 2 {
        return Err(Reply::err(
            "INCR option supports a single increment-element pair",
        ));
    }
    let pairs = rest
        .chunks_exact(2)
        .map(|p| parse_f64(&p[0]).map(|s| (Float(s), p[1].clone())))
        .collect::<Option<Vec<_>>>()
        .ok_or_else(not_float)?;
    Ok(zset(ZSetCmd::Add {
        key: a[0].clone(),
        flags: f,
        pairs,
    }))
}

/// `ZRANGE key start stop [BYSCORE|BYLEX] [REV] [LIMIT offset count] [WITHSCORES]` and the
/// older forms, which fix the selection and direction and allow fewer options.
fn zrange(name: &str, a: &[Bytes]) -> Result<ZRange, Reply> {
    let (mut by_score, mut by_lex, mut rev) = match name {
        "zrangebyscore" => (true, false, false),
        "zrevrangebyscore" => (true, false, true),
        "zrangebylex" => (false, true, false),
        "zrevrange" => (false, false, true),
        _ => (false, false, false),
    };
    let (mut limit, mut withscores) = (None, false);
    let mut i = 3;
    while let Some(opt) = a.get(i) {
        match (lower(&opt[..opt.len().min(16)]).as_str(), name) {
            ("withscores", "zrangebylex") => return Err(syntax()),
            ("withscores", _) => withscores = true,
            ("limit", "zrevrange") => return Err(syntax()),
            ("limit", _) => {
                let (Some(o), Some(c)) = (a.get(i + 1), a.get(i + 2)) else {
                    return Err(syntax());
                };
                limit = Some((int_arg(o)?, int_arg(c)?));
                i += 2;
            }
            ("byscore", "zrange") if !by_lex => by_score = true,
            ("bylex", "zrange") if !by_score => by_lex = true,
            ("rev", "zrange") => rev = true,
            _ => return Err(syntax()),
        }
        i += 1;
    }
    if limit.is_some() && !by_score && !by_lex {
        return Err(Reply::err(
            "syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
        ));
    }
    if withscores && by_lex {
        return Err(Reply::err(
            "syntax error, WITHSCORES not supported in combination with BYLEX",
        ));
    }
    // With REV (and the ZREV forms), score and lex ranges are given highest first.
    let (lo, hi) = if rev && (by_score || by_lex) {
        (&a[2], &a[1])
    } else {
        (&a[1], &a[2])
    };
    let by = if by_score {
        ZBy::Score(score_bound(lo)?, score_bound(hi)?)
    } else if by_lex {
        ZBy::Lex(lex_bound(lo)?, lex_bound(hi)?)
    } else {
        ZBy::Rank(int_arg(lo)?, int_arg(hi)?)
    };
    Ok(ZRange {
        key: a[0].clone(),
        by,
        rev,
        limit,
        withscores,
    })
}
