//! Sorted sets: the structure ([`ZSet`], std's `BTreeSet` ordered by score then member, beside
//! a member index), the commands that change one ([`ZSetCmd`]), the reads ([`ZSetRead`]),
//! their record encoding and their apply.
//!
//! Scores are never NaN (planning refuses one, and an increment that would make one is an
//! error) and `-0` is stored as `0`, so the order is total and the same as Redis's. Ranks are
//! found by walking the tree: `ZRANK` and rank ranges cost the rank, not its logarithm.

use std::collections::{BTreeSet, HashMap};

use bytes::{BufMut, Bytes, BytesMut};

use super::command::{
    put_bytes, put_f64, put_i64, put_keys, put_opt_u64, put_varint, DecodeError, Float, Reader,
};
use super::hash::{put_scan, read_scan, scan_reply};
use super::list::clamp_range;
use super::store::Store;
use crate::resp::{format_double, Reply};

/// A score: an `f64` that is never NaN and never `-0`, ordered numerically.
#[derive(Clone, Copy, Debug)]
pub(super) struct Score(f64);

impl Score {
    /// The score of `v`; a NaN is a broken invariant (planning and apply refuse them first).
    pub(super) fn new(v: f64) -> Score {
        assert!(!v.is_nan(), "a sorted-set score is never NaN");
        // -0 + 0 is +0: Redis orders the two as equal.
        Score(v + 0.0)
    }

    pub(super) fn get(self) -> f64 {
        self.0
    }
}

impl PartialEq for Score {
    fn eq(&self, other: &Score) -> bool {
        self.cmp(other) == std::cmp::Ordering::Equal
    }
}
impl Eq for Score {}
impl PartialOrd for Score {
    fn partial_cmp(&self, other: &Score) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Score {
    fn cmp(&self, other: &Score) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// A sorted set.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct ZSet {
    scores: HashMap<Bytes, Score>,
    order: BTreeSet<(Score, Bytes)>,
}

impl ZSet {
    pub(super) fn len(&self) -> usize {
        self.scores.len()
    }

    pub(super) fn score(&self, member: &[u8]) -> Option<Score> {
        self.scores.get(member).copied()
    }

    /// Sets `member`'s score; its old one, if it had one.
    pub(super) fn insert(&mut self, member: Bytes, score: Score) -> Option<Score> {
        let old = self.scores.insert(member.clone(), score);
        if let Some(o) = old {
            self.order.remove(&(o, member.clone()));
        }
        self.order.insert((score, member));
        old
    }

    pub(super) fn remove(&mut self, member: &[u8]) -> Option<Score> {
        let (member, score) = self.scores.remove_entry(member)?;
        self.order.remove(&(score, member));
        Some(score)
    }

    /// Members with their scores, lowest first.
    pub(super) fn iter(&self) -> impl DoubleEndedIterator<Item = (&Bytes, Score)> {
        self.order.iter().map(|(s, m)| (m, *s))
    }

    fn pop(&mut self, max: bool) -> Option<(Bytes, Score)> {
        let (score, member) = if max {
            self.order.pop_last()?
        } else {
            self.order.pop_first()?
        };
        self.scores.remove(&member);
        Some((member, score))
    }
}

/// `ZADD`'s options, checked for compatibility when planned.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ZAddFlags {
    /// Only add new members.
    pub nx: bool,
    /// Only update existing members.
    pub xx: bool,
    /// Only update to a greater score.
    pub gt: bool,
    /// Only update to a lower score.
    pub lt: bool,
    /// Count changed members too.
    pub ch: bool,
    /// Add to the score and answer the new score (one pair only).
    pub incr: bool,
}

/// A write to a sorted set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ZSetCmd {
    /// `ZADD key [NX|XX] [GT|LT] [CH] [INCR] score member...`, and `ZINCRBY` (`INCR`).
    Add {
        /// The key.
        key: Bytes,
        /// The options.
        flags: ZAddFlags,
        /// `(score, member)` in order; scores are not NaN.
        pairs: Vec<(Float, Bytes)>,
    },
    /// `ZREM key member...`.
    Rem {
        /// The key.
        key: Bytes,
        /// The members.
        members: Vec<Bytes>,
    },
    /// `ZPOPMIN`/`ZPOPMAX key [count]`.
    Pop {
        /// The key.
        key: Bytes,
        /// Highest scores first (`ZPOPMAX`).
        max: bool,
        /// With a count, the reply is a list of pairs.
        count: Option<u64>,
    },
}

/// One end of a score range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScoreBound {
    /// The score (may be infinite, never NaN).
    pub value: Float,
    /// `(score`: the score itself is outside.
    pub exclusive: bool,
}

/// One end of a lexicographic range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LexBound {
    /// `-`.
    Min,
    /// `+`.
    Max,
    /// `[member`.
    Incl(Bytes),
    /// `(member`.
    Excl(Bytes),
}

/// What a `ZRANGE` selects by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ZBy {
    /// Ranks, `start` and `stop` (negative from the end, counted in the chosen direction).
    Rank(i64, i64),
    /// Scores from the lower to the upper bound.
    Score(ScoreBound, ScoreBound),
    /// Members from the lower to the upper bound (all scores equal, as Redis assumes).
    Lex(LexBound, LexBound),
}

/// `ZRANGE` and its older forms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZRange {
    /// The key.
    pub key: Bytes,
    /// The selection.
    pub by: ZBy,
    /// Highest first.
    pub rev: bool,
    /// `LIMIT offset count` (a negative count: all).
    pub limit: Option<(i64, i64)>,
    /// Answer the scores too.
    pub withscores: bool,
}

/// A read of a sorted set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ZSetRead {
    /// `ZSCORE key member`.
    Score(Bytes, Bytes),
    /// `ZMSCORE key member...`.
    MScore(Bytes, Vec<Bytes>),
    /// `ZCARD key`.
    Card(Bytes),
    /// `ZRANGE` and friends.
    Range(ZRange),
    /// `ZRANK`/`ZREVRANK key member [WITHSCORE]`.
    Rank {
        /// The key.
        key: Bytes,
        /// The member.
        member: Bytes,
        /// Counted from the highest score.
        rev: bool,
        /// Answer `[rank, score]`.
        with_score: bool,
    },
    /// `ZCOUNT key min max`.
    Count(Bytes, ScoreBound, ScoreBound),
    /// `ZSCAN key cursor [MATCH pattern] [COUNT n]`.
    Scan {
        /// The key.
        key: Bytes,
        /// Where to resume.
        cursor: u64,
        /// The glob members must match.
        pattern: Option<Bytes>,
        /// How many members to look at, about.
        count: u64,
    },
}

fn flag_bits(f: &ZAddFlags) -> u8 {
    [f.nx, f.xx, f.gt, f.lt, f.ch, f.incr]
        .iter()
        .enumerate()
        .map(|(i, b)| u8::from(*b) << i)
        .sum()
}

pub(super) fn put_cmd(out: &mut BytesMut, cmd: &ZSetCmd) {
    match cmd {
        ZSetCmd::Add { key, flags, pairs } => {
            out.put_u8(0);
            out.put_u8(flag_bits(flags));
            put_bytes(out, key);
            put_varint(out, pairs.len() as u64);
            for (s, m) in pairs {
                put_f64(out, s.0);
                put_bytes(out, m);
            }
        }
        ZSetCmd::Rem { key, members } => {
            out.put_u8(1);
            put_bytes(out, key);
            put_keys(out, members);
        }
        ZSetCmd::Pop { key, max, count } => {
            out.put_u8(2);
            out.put_u8(u8::from(*max));
            put_bytes(out, key);
            put_opt_u64(out, *count);
        }
    }
}

pub(super) fn read_cmd(r: &mut Reader) -> Result<ZSetCmd, DecodeError> {
    Ok(match r.u8()? {
        0 => {
            let b = r.u8()?;
            if b >= 64 {
                return Err(DecodeError(format!("ZADD flags {b:#x}")));
            }
            let bit = |i: u8| b & (1 << i) != 0;
            let flags = ZAddFlags {
                nx: bit(0),
                xx: bit(1),
                gt: bit(2),
                lt: bit(3),
                ch: bit(4),
                incr: bit(5),
            };
            let key = r.bytes()?;
            let n = r.count()?;
            let pairs = (0..n)
                .map(|_| Ok((Float(r.f64()?), r.bytes()?)))
                .collect::<Result<_, DecodeError>>()?;
            ZSetCmd::Add { key, flags, pairs }
        }
        1 => ZSetCmd::Rem {
            key: r.bytes()?,
            members: r.keys()?,
        },
        2 => {
            let max = r.flag()?;
            ZSetCmd::Pop {
                key: r.bytes()?,
                max,
                count: r.opt_u64()?,
            }
        }
        op => return Err(DecodeError(format!("unknown sorted-set command {op}"))),
    })
}

fn put_score_bound(out: &mut BytesMut, b: &ScoreBound) {
    out.put_u8(u8::from(b.exclusive));
    put_f64(out, b.value.0);
}

fn read_score_bound(r: &mut Reader) -> Result<ScoreBound, DecodeError> {
    Ok(ScoreBound {
        exclusive: r.flag()?,
        value: Float(r.f64()?),
    })
}

fn put_lex_bound(out: &mut BytesMut, b: &LexBound) {
    match b {
        LexBound::Min => out.put_u8(0),
        LexBound::Max => out.put_u8(1),
        LexBound::Incl(m) | LexBound::Excl(m) => {
            out.put_u8(if matches!(b, LexBound::Incl(_)) { 2 } else { 3 });
            put_bytes(out, m);
        }
    }
}

fn read_lex_bound(r: &mut Reader) -> Result<LexBound, DecodeError> {
    Ok(match r.u8()? {
        0 => LexBound::Min,
        1 => LexBound::Max,
        2 => LexBound::Incl(r.bytes()?),
        3 => LexBound::Excl(r.bytes()?),
        t => return Err(DecodeError(format!("lex bound {t}"))),
    })
}

pub(super) fn put_read(out: &mut BytesMut, read: &ZSetRead) {
    match read {
        ZSetRead::Score(k, m) => {
            out.put_u8(0);
            put_bytes(out, k);
            put_bytes(out, m);
        }
        ZSetRead::MScore(k, ms) => {
            out.put_u8(1);
            put_bytes(out, k);
            put_keys(out, ms);
        }
        ZSetRead::Card(k) => {
            out.put_u8(2);
            put_bytes(out, k);
        }
        ZSetRead::Range(z) => {
            out.put_u8(3);
            put_bytes(out, &z.key);
            match &z.by {
                ZBy::Rank(a, b) => {
                    out.put_u8(0);
                    put_i64(out, *a);
                    put_i64(out, *b);
                }
                ZBy::Score(a, b) => {
                    out.put_u8(1);
                    put_score_bound(out, a);
                    put_score_bound(out, b);
                }
                ZBy::Lex(a, b) => {
                    out.put_u8(2);
                    put_lex_bound(out, a);
                    put_lex_bound(out, b);
                }
            }
            out.put_u8(u8::from(z.rev) | u8::from(z.withscores) << 1);
            match z.limit {
                Some((o, c)) => {
                    out.put_u8(1);
                    put_i64(out, o);
                    put_i64(out, c);
                }
                None => out.put_u8(0),
            }
        }
        ZSetRead::Rank {
            key,
            member,
            rev,
            with_score,
        } => {
            out.put_u8(4);
            out.put_u8(u8::from(*rev) | u8::from(*with_score) << 1);
            put_bytes(out, key);
            put_bytes(out, member);
        }
        ZSetRead::Count(k, a, b) => {
            out.put_u8(5);
            put_bytes(out, k);
            put_score_bound(out, a);
            put_score_bound(out, b);
        }
        ZSetRead::Scan {
            key,
            cursor,
            pattern,
            count,
        } => {
            out.put_u8(6);
            put_bytes(out, key);
            put_scan(out, *cursor, pattern.as_ref(), *count);
        }
    }
}

pub(super) fn read_read(r: &mut Reader) -> Result<ZSetRead, DecodeError> {
    Ok(match r.u8()? {
        0 => ZSetRead::Score(r.bytes()?, r.bytes()?),
        1 => ZSetRead::MScore(r.bytes()?, r.keys()?),
        2 => ZSetRead::Card(r.bytes()?),
        3 => {
            let key = r.bytes()?;
            let by = match r.u8()? {
                0 => ZBy::Rank(r.i64()?, r.i64()?),
                1 => ZBy::Score(read_score_bound(r)?, read_score_bound(r)?),
                2 => ZBy::Lex(read_lex_bound(r)?, read_lex_bound(r)?),
                t => return Err(DecodeError(format!("ZRANGE kind {t}"))),
            };
            let flags = r.u8()?;
            if flags > 3 {
                return Err(DecodeError(format!("ZRANGE flags {flags:#x}")));
            }
            let limit = if r.flag()? {
                Some((r.i64()?, r.i64()?))
            } else {
                None
            };
            ZSetRead::Range(ZRange {
                key,
                by,
                rev: flags & 1 != 0,
                limit,
                withscores: flags & 2 != 0,
            })
        }
        4 => {
            let flags = r.u8()?;
            ZSetRead::Rank {
                key: r.bytes()?,
                member: r.bytes()?,
                rev: flags & 1 != 0,
                with_score: flags & 2 != 0,
            }
        }
        5 => ZSetRead::Count(r.bytes()?, read_score_bound(r)?, read_score_bound(r)?),
        6 => {
            let key = r.bytes()?;
            let (cursor, pattern, count) = read_scan(r)?;
            ZSetRead::Scan {
                key,
                cursor,
                pattern,
                count,
            }
        }
        t => return Err(DecodeError(format!("unknown sorted-set read {t}"))),
    })
}

fn above_min(s: f64, min: &ScoreBound) -> bool {
    if min.exclusive {
        s > min.value.0
    } else {
        s >= min.value.0
    }
}

fn below_max(s: f64, max: &ScoreBound) -> bool {
    if max.exclusive {
        s < max.value.0
    } else {
        s <= max.value.0
    }
}

fn lex_above(m: &[u8], min: &LexBound) -> bool {
    match min {
        LexBound::Min => true,
        LexBound::Max => false,
        LexBound::Incl(b) => m >= &b[..],
        LexBound::Excl(b) => m > &b[..],
    }
}

fn lex_below(m: &[u8], max: &LexBound) -> bool {
    match max {
        LexBound::Min => false,
        LexBound::Max => true,
        LexBound::Incl(b) => m <= &b[..],
        LexBound::Excl(b) => m < &b[..],
    }
}

/// The members of a score range, in the chosen direction, walking only the range.
fn by_score<'a>(
    z: &'a ZSet,
    min: &'a ScoreBound,
    max: &'a ScoreBound,
    rev: bool,
) -> Box<dyn Iterator<Item = (&'a Bytes, Score)> + 'a> {
    let in_range =
        move |(_, s): &(&Bytes, Score)| above_min(s.get(), min) && below_max(s.get(), max);
    if !rev {
        let from = (Score::new(min.value.0), Bytes::new());
        let it = z.order.range(from..).map(|(s, m)| (m, *s));
        return Box::new(
            it.take_while(move |(_, s)| below_max(s.get(), max))
                .filter(in_range),
        );
    }
    let it: Box<dyn DoubleEndedIterator<Item = &(Score, Bytes)>> = if max.value.0 == f64::INFINITY {
        Box::new(z.order.iter())
    } else {
        Box::new(
            z.order
                .range(..(Score::new(max.value.0.next_up()), Bytes::new())),
        )
    };
    Box::new(
        it.rev()
            .map(|(s, m)| (m, *s))
            .take_while(move |(_, s)| above_min(s.get(), min))
            .filter(in_range),
    )
}

impl Store {
    pub(super) fn apply_zset(&mut self, cmd: ZSetCmd) -> Reply {
        let result = match cmd {
            ZSetCmd::Add { key, flags, pairs } => {
                let create = !flags.xx;
                self.update(&key, create, |z: &mut ZSet| zadd(z, flags, pairs))
                    .map(|r| {
                        r.unwrap_or(if flags.incr {
                            Reply::Nil
                        } else {
                            Reply::Int(0)
                        })
                    })
            }
            ZSetCmd::Rem { key, members } => self
                .update(&key, false, |z: &mut ZSet| {
                    let n = members.iter().filter(|m| z.remove(m).is_some()).count();
                    (Reply::Int(n as i64), n > 0)
                })
                .map(|r| r.unwrap_or(Reply::Int(0))),
            ZSetCmd::Pop { key, max, count } => self
                .update(&key, false, |z: &mut ZSet| {
                    let n = count.unwrap_or(1).min(z.len() as u64);
                    let popped: Vec<_> = (0..n).filter_map(|_| z.pop(max)).collect();
                    let changed = !popped.is_empty();
                    (popped, changed)
                })
                .map(|popped| {
                    let popped = popped.unwrap_or_default();
                    let pair = |(m, s): (Bytes, Score)| (Reply::Bulk(m), Reply::double(s.get()));
                    match count {
                        Some(_) => Reply::Pairs(popped.into_iter().map(pair).collect()),
                        None => Reply::Array(
                            popped
                                .into_iter()
                                .flat_map(|p| {
                                    let (m, s) = pair(p);
                                    [m, s]
                                })
                                .collect(),
                        ),
                    }
                }),
        };
        result.unwrap_or_else(|e| e)
    }

    pub(super) fn read_zset(&self, read: &ZSetRead) -> Result<Reply, Reply> {
        let key = match read {
            ZSetRead::Score(k, _)
            | ZSetRead::MScore(k, _)
            | ZSetRead::Card(k)
            | ZSetRead::Count(k, ..)
            | ZSetRead::Rank { key: k, .. }
            | ZSetRead::Scan { key: k, .. } => k,
            ZSetRead::Range(r) => &r.key,
        };
        let empty = ZSet::default();
        let z = self.read_as::<ZSet>(key)?.unwrap_or(&empty);
        let score = |m: &Bytes| z.score(m).map_or(Reply::Nil, |s| Reply::double(s.get()));
        Ok(match read {
            ZSetRead::Score(_, m) => score(m),
            ZSetRead::MScore(_, ms) => Reply::Array(ms.iter().map(score).collect()),
            ZSetRead::Card(_) => Reply::Int(z.len() as i64),
            ZSetRead::Range(r) => zrange(z, r),
            ZSetRead::Rank {
                member,
                rev,
                with_score,
                ..
            } => match z.score(member) {
                None => Reply::Nil,
                Some(s) => {
                    let below = z.order.range(..(s, member.clone())).count();
                    let rank = if *rev { z.len() - 1 - below } else { below };
                    if *with_score {
                        Reply::Array(vec![Reply::Int(rank as i64), Reply::double(s.get())])
                    } else {
                        Reply::Int(rank as i64)
                    }
                }
            },
            ZSetRead::Count(_, min, max) => Reply::Int(by_score(z, min, max, false).count() as i64),
            ZSetRead::Scan {
                cursor,
                pattern,
                count,
                ..
            } => scan_reply(
                z.iter().map(|(m, _)| m),
                *cursor,
                pattern.as_ref(),
                *count,
                |m| z.score(m).map(|s| Reply::bulk(format_double(s.get()))),
            ),
        })
    }
}

/// `ZADD` on one sorted set, as Redis's `zsetAdd`: the reply and whether anything changed.
fn zadd(z: &mut ZSet, f: ZAddFlags, pairs: Vec<(Float, Bytes)>) -> (Reply, bool) {
    let (mut added, mut updated) = (0, 0);
    let mut last = None;
    for (score, member) in pairs {
        let current = z.score(&member).map(Score::get);
        let new = match (current, f.incr) {
            (Some(c), true) => c + score.0,
            _ => score.0,
        };
        if new.is_nan() {
            return (
                Reply::err("resulting score is not a number (NaN)"),
                added + updated > 0,
            );
        }
        let skip = match current {
            Some(c) => f.nx || (f.gt && new <= c) || (f.lt && new >= c),
            None => f.xx,
        };
        if skip {
            last = None;
            continue;
        }
        last = Some(new);
        match current {
            Some(c) if c == new => {}
            Some(_) => {
                z.insert(member, Score::new(new));
                updated += 1;
            }
            None => {
                z.insert(member, Score::new(new));
                added += 1;
            }
        }
    }
    let changed = added + updated > 0;
    let reply = match (f.incr, last) {
        (true, Some(s)) => Reply::double(s),
        (true, None) => Reply::Nil,
        (false, _) => Reply::Int(added + if f.ch { updated } else { 0 }),
    };
    (reply, changed)
}

fn zrange(z: &ZSet, r: &ZRange) -> Reply {
    let items: Box<dyn Iterator<Item = (&Bytes, Score)>> = match &r.by {
        ZBy::Rank(start, stop) => match clamp_range(*start, *stop, z.len()) {
            None => Box::new(std::iter::empty()),
            Some((a, b)) if r.rev => Box::new(z.iter().rev().skip(a).take(b - a + 1)),
            Some((a, b)) => Box::new(z.iter().skip(a).take(b - a + 1)),
        },
        ZBy::Score(min, max) => by_score(z, min, max, r.rev),
        ZBy::Lex(min, max) => {
            let inside = move |(m, _): &(&Bytes, Score)| lex_above(m, min) && lex_below(m, max);
            if r.rev {
                Box::new(z.iter().rev().filter(inside))
            } else {
                Box::new(z.iter().filter(inside))
            }
        }
    };
    let items: Box<dyn Iterator<Item = (&Bytes, Score)>> = match r.limit {
        Some((offset, _)) if offset < 0 => Box::new(std::iter::empty()),
        Some((offset, count)) if count >= 0 => {
            Box::new(items.skip(offset as usize).take(count as usize))
        }
        Some((offset, _)) => Box::new(items.skip(offset as usize)),
        None => items,
    };
    if r.withscores {
        Reply::Pairs(
            items
                .map(|(m, s)| (Reply::Bulk(m.clone()), Reply::double(s.get())))
                .collect(),
        )
    } else {
        Reply::Array(items.map(|(m, _)| Reply::Bulk(m.clone())).collect())
    }
}
