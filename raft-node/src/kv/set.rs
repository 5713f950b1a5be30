//! Sets: the commands that change one ([`SetCmd`]), the reads ([`SetRead`]), their record
//! encoding and their apply.
//!
//! `SPOP` must take the same members on every replica, so it draws no ambient randomness: the
//! members it takes are picked by a splitmix64 sequence seeded with the record's offset and the
//! key, indexing into the member order every replica built alike.

use bytes::{BufMut, Bytes, BytesMut};

use super::command::{put_bytes, put_keys, put_opt_u64, DecodeError, Reader};
use super::hash::{put_scan, read_scan, scan_reply};
use super::keyspace::scan_hash;
use super::store::{Set, Store};
use crate::resp::Reply;

/// A write to a set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SetCmd {
    /// `SADD key member...`.
    Add {
        /// The key.
        key: Bytes,
        /// The members.
        members: Vec<Bytes>,
    },
    /// `SREM key member...`.
    Rem {
        /// The key.
        key: Bytes,
        /// The members.
        members: Vec<Bytes>,
    },
    /// `SPOP key [count]`.
    Pop {
        /// The key.
        key: Bytes,
        /// With a count, the reply is an array.
        count: Option<u64>,
    },
}

/// A read of sets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SetRead {
    /// `SMEMBERS key`.
    Members(Bytes),
    /// `SISMEMBER key member`.
    IsMember(Bytes, Bytes),
    /// `SMISMEMBER key member...`.
    MIsMember(Bytes, Vec<Bytes>),
    /// `SCARD key`.
    Card(Bytes),
    /// `SINTER key...`.
    Inter(Vec<Bytes>),
    /// `SUNION key...`.
    Union(Vec<Bytes>),
    /// `SDIFF key...`.
    Diff(Vec<Bytes>),
    /// `SSCAN key cursor [MATCH pattern] [COUNT n]`.
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

pub(super) fn put_cmd(out: &mut BytesMut, cmd: &SetCmd) {
    match cmd {
        SetCmd::Add { key, members } | SetCmd::Rem { key, members } => {
            out.put_u8(if matches!(cmd, SetCmd::Add { .. }) {
                0
            } else {
                1
            });
            put_bytes(out, key);
            put_keys(out, members);
        }
        SetCmd::Pop { key, count } => {
            out.put_u8(2);
            put_bytes(out, key);
            put_opt_u64(out, *count);
        }
    }
}

pub(super) fn read_cmd(r: &mut Reader) -> Result<SetCmd, DecodeError> {
    Ok(match r.u8()? {
        0 => SetCmd::Add {
            key: r.bytes()?,
            members: r.keys()?,
        },
        1 => SetCmd::Rem {
            key: r.bytes()?,
            members: r.keys()?,
        },
        2 => SetCmd::Pop {
            key: r.bytes()?,
            count: r.opt_u64()?,
        },
        op => return Err(DecodeError(format!("unknown set command {op}"))),
    })
}

pub(super) fn put_read(out: &mut BytesMut, read: &SetRead) {
    match read {
        SetRead::Members(k) | SetRead::Card(k) => {
            out.put_u8(if matches!(read, SetRead::Members(_)) {
                0
            } else {
                1
            });
            put_bytes(out, k);
        }
        SetRead::IsMember(k, m) => {
            out.put_u8(2);
            put_bytes(out, k);
            put_bytes(out, m);
        }
        SetRead::MIsMember(k, ms) => {
            out.put_u8(3);
            put_bytes(out, k);
            put_keys(out, ms);
        }
        SetRead::Inter(keys) | SetRead::Union(keys) | SetRead::Diff(keys) => {
            out.put_u8(match read {
                SetRead::Inter(_) => 4,
                SetRead::Union(_) => 5,
                _ => 6,
            });
            put_keys(out, keys);
        }
        SetRead::Scan {
            key,
            cursor,
            pattern,
            count,
        } => {
            out.put_u8(7);
            put_bytes(out, key);
            put_scan(out, *cursor, pattern.as_ref(), *count);
        }
    }
}

pub(super) fn read_read(r: &mut Reader) -> Result<SetRead, DecodeError> {
    Ok(match r.u8()? {
        0 => SetRead::Members(r.bytes()?),
        1 => SetRead::Card(r.bytes()?),
        2 => SetRead::IsMember(r.bytes()?, r.bytes()?),
        3 => SetRead::MIsMember(r.bytes()?, r.keys()?),
        4 => SetRead::Inter(r.keys()?),
        5 => SetRead::Union(r.keys()?),
        6 => SetRead::Diff(r.keys()?),
        7 => {
            let key = r.bytes()?;
            let (cursor, pattern, count) = read_scan(r)?;
            SetRead::Scan {
                key,
                cursor,
                pattern,
                count,
            }
        }
        t => return Err(DecodeError(format!("unknown set read {t}"))),
    })
}

/// splitmix64: a small, well-mixed sequence every replica computes alike.
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn members(items: impl Iterator<Item = Bytes>) -> Reply {
    Reply::Set(items.map(Reply::Bulk).collect())
}

impl Store {
    pub(super) fn apply_set(&mut self, cmd: SetCmd) -> Reply {
        let offset = self.offset;
        let result = match cmd {
            SetCmd::Add { key, members } => self
                .update(&key, true, |s: &mut Set| {
                    let n = members.into_iter().filter(|m| s.insert(m.clone())).count();
                    (Reply::Int(n as i64), n > 0)
                })
                .map(|r| r.unwrap_or(Reply::Int(0))),
            SetCmd::Rem { key, members } => self
                .update(&key, false, |s: &mut Set| {
                    let n = members.iter().filter(|m| s.swap_remove(&m[..])).count();
                    (Reply::Int(n as i64), n > 0)
                })
                .map(|r| r.unwrap_or(Reply::Int(0))),
            SetCmd::Pop { key, count } => {
                let mut seed = offset ^ scan_hash(&key);
                self.update(&key, false, |s: &mut Set| {
                    let n = count.unwrap_or(1).min(s.len() as u64) as usize;
                    let mut taken = Vec::with_capacity(n);
                    for _ in 0..n {
                        let i = (splitmix64(&mut seed) % s.len() as u64) as usize;
                        taken.extend(s.swap_remove_index(i));
                    }
                    let changed = !taken.is_empty();
                    (taken, changed)
                })
                .map(|popped| match (popped, count) {
                    (None, None) => Reply::Nil,
                    (None, Some(_)) => Reply::Set(Vec::new()),
                    (Some(mut t), None) => t.pop().map_or(Reply::Nil, Reply::Bulk),
                    (Some(t), Some(_)) => members(t.into_iter()),
                })
            }
        };
        result.unwrap_or_else(|e| e)
    }

    /// The sets at `keys` (an absent key is empty): WRONGTYPE if any holds another type.
    fn sets_of(&self, keys: &[Bytes]) -> Result<Vec<Option<&Set>>, Reply> {
        keys.iter().map(|k| self.read_as::<Set>(k)).collect()
    }

    pub(super) fn read_set(&self, read: &SetRead) -> Result<Reply, Reply> {
        let empty = Set::default();
        let one =
            |k: &Bytes| -> Result<&Set, Reply> { Ok(self.read_as::<Set>(k)?.unwrap_or(&empty)) };
        Ok(match read {
            SetRead::Members(k) => members(one(k)?.iter().cloned()),
            SetRead::IsMember(k, m) => Reply::Int(i64::from(one(k)?.contains(m))),
            SetRead::MIsMember(k, ms) => {
                let s = one(k)?;
                Reply::Array(
                    ms.iter()
                        .map(|m| Reply::Int(i64::from(s.contains(m))))
                        .collect(),
                )
            }
            SetRead::Card(k) => Reply::Int(one(k)?.len() as i64),
            SetRead::Inter(keys) => {
                let sets = self.sets_of(keys)?;
                let Some(Some(first)) = sets.first() else {
                    return Ok(Reply::Set(Vec::new()));
                };
                members(
                    first
                        .iter()
                        .filter(|m| sets[1..].iter().all(|s| s.is_some_and(|s| s.contains(*m))))
                        .cloned(),
                )
            }
            SetRead::Union(keys) => {
                let mut all = Set::default();
                for s in self.sets_of(keys)?.into_iter().flatten() {
                    all.extend(s.iter().cloned());
                }
                members(all.into_iter())
            }
            SetRead::Diff(keys) => {
                let sets = self.sets_of(keys)?;
                let Some(Some(first)) = sets.first() else {
                    return Ok(Reply::Set(Vec::new()));
                };
                members(
                    first
                        .iter()
                        .filter(|m| !sets[1..].iter().any(|s| s.is_some_and(|s| s.contains(*m))))
                        .cloned(),
                )
            }
            SetRead::Scan {
                key,
                cursor,
                pattern,
                count,
            } => scan_reply(one(key)?.iter(), *cursor, pattern.as_ref(), *count, |_| {
                None
            }),
        })
    }
}
