//! The write commands as log records: [`Command`], its encoding ([`encode`]) and decoding
//! ([`decode`]); the format is described in the parent module. The typed families' commands
//! are encoded by their own modules (`hash`, `list`, `set`, `zset`) behind one opcode each.

use bytes::{BufMut, Bytes, BytesMut};

use super::hash::HashCmd;
use super::list::ListCmd;
use super::set::SetCmd;
use super::transaction::{put_ops, read_ops, TxOp};
pub use super::wire::DecodeError;
pub(super) use super::wire::{
    put_bytes, put_f64, put_i64, put_keys, put_opt_u64, put_pairs, put_varint, unzigzag, zigzag,
    Reader,
};
use super::zset::ZSetCmd;

/// The version byte of every command record written by this build.
///
/// Version 3 puts the stamp in a fixed-width field (8 bytes, little-endian, right after the
/// version byte), so the leader can overwrite it in place ([`restamp`]); carries relative
/// expiries (`EX`, `PX`, `EXPIRE`, `PEXPIRE`, `GETEX EX|PX`) as a duration that every replica
/// adds to the record's clock when it applies it (see [`Expiry`]); and adds [`Command::Tick`]
/// and `TIME` inside a transaction. Records of versions 1 and 2 still decode, with every
/// expiry absolute, and apply exactly as they did.
///
/// # The rule
///
/// Everything computed at apply time that shapes the state or a reply (expiry, the text of
/// floats written by `INCRBYFLOAT`/`HINCRBYFLOAT`/`ZINCRBY`, `SPOP`'s choice, the order of
/// fields after deletions, glob matching inside `EXEC`) must come out the same on every build
/// that reads the same records: replicas of different builds apply the same log during a
/// rolling upgrade. A change to any of them needs a new version, applied only to records of
/// that version, with the old behaviour kept for older records. The golden tests in
/// `kv::tests::golden` and the replay of `tests/data/v2-log.bin` fail when one changes.
///
/// Version 2 adds the typed families, `RENAME`, `FLUSHALL`, `GETEX`, `INCRBYFLOAT` and watched
/// transactions; a version-1 record (opcodes up to [`OP_MSETNX`]) still decodes to the same
/// command. The first version-2 record a replica applies also marks where its key versions are
/// exact on every replica (see `Store::exact_from`).
pub const CMD_VERSION: u8 = 3;

/// The previous version, still read: a varint stamp and absolute expiries.
pub const CMD_VERSION_V2: u8 = 2;

/// The first version, still read: records written before the typed families.
pub const CMD_VERSION_V1: u8 = 1;

/// An `f64` inside a command, compared by its bits so that commands stay `Eq` (a NaN never
/// reaches a command: planning refuses it).
#[derive(Clone, Copy, Debug)]
pub struct Float(pub f64);

impl PartialEq for Float {
    fn eq(&self, other: &Float) -> bool {
        self.0.to_bits() == other.0.to_bits()
    }
}

impl Eq for Float {}

/// Which existing-key condition a SET carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetCond {
    /// Always set.
    Always,
    /// Only if the key does not exist (`NX`).
    IfAbsent,
    /// Only if the key exists (`XX`).
    IfPresent,
}

/// Which condition an `EXPIRE` carries (Redis 7's `NX`, `XX`, `GT`, `LT`). A key without an
/// expiry counts as expiring never: `GT` never sets one on it, `LT` always does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExpireCond {
    /// Always set.
    Always,
    /// Only if the key has no expiry (`NX`).
    IfNone,
    /// Only if the key has an expiry (`XX`).
    IfSome,
    /// Only if the new expiry is later than the current one (`GT`).
    IfLater,
    /// Only if the new expiry is earlier than the current one (`LT`).
    IfEarlier,
}

/// When a key expires, as a record carries it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expiry {
    /// At this time, milliseconds since the Unix epoch (`EXAT`, `PXAT`, `EXPIREAT`,
    /// `PEXPIREAT`; and every expiry of a version-1 or version-2 record, which the proposer
    /// computed from its own clock).
    At(u64),
    /// This many milliseconds after the record's clock (the replicated clock once the record's
    /// stamp is applied), computed on every replica when the record is applied: `EX`, `PX`,
    /// `EXPIRE`, `PEXPIRE`. A relative expiry can never be past when it is applied.
    In(u64),
}

/// The largest expiry time kept, in milliseconds: Redis's range (a signed 64-bit count).
pub const EXPIRY_MAX_MS: u64 = i64::MAX as u64;

impl Expiry {
    /// The absolute time of this expiry for a record applied at `clock_ms`.
    pub fn at(self, clock_ms: u64) -> u64 {
        match self {
            Expiry::At(t) => t,
            Expiry::In(d) => clock_ms.saturating_add(d).min(EXPIRY_MAX_MS),
        }
    }
}

/// A write, as proposed and replicated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// `SET key value [NX|XX] [GET] [EX|PX|EXAT|PXAT|KEEPTTL]`.
    Set {
        /// The key.
        key: Bytes,
        /// The new value.
        value: Bytes,
        /// NX / XX.
        cond: SetCond,
        /// Reply with the old value.
        get: bool,
        /// The new expiry (`None`: none, or the current one with `keep_ttl`).
        expiry: Option<Expiry>,
        /// Keep the key's current expiry.
        keep_ttl: bool,
    },
    /// `DEL key...`.
    Del {
        /// The keys.
        keys: Vec<Bytes>,
    },
    /// `INCR`, `INCRBY`, `DECR`, `DECRBY`.
    IncrBy {
        /// The key.
        key: Bytes,
        /// The amount added.
        delta: i64,
    },
    /// `MSET key value...`.
    MSet {
        /// The pairs, in order.
        pairs: Vec<(Bytes, Bytes)>,
    },
    /// `APPEND key value`.
    Append {
        /// The key.
        key: Bytes,
        /// The suffix.
        value: Bytes,
    },
    /// `CAS key expected new`: set `new` if the current value equals `expected`.
    Cas {
        /// The key.
        key: Bytes,
        /// The value the key must hold.
        expected: Bytes,
        /// The value it gets.
        new: Bytes,
    },
    /// `EXPIRE`, `PEXPIRE`, `EXPIREAT`, `PEXPIREAT` (an absolute time) and `PERSIST` (none).
    Expire {
        /// The key.
        key: Bytes,
        /// The new expiry; `None` removes it.
        expiry: Option<Expiry>,
        /// NX / XX / GT / LT.
        cond: ExpireCond,
    },
    /// `SETNX key value`: set if absent; answers 1 or 0.
    SetNx {
        /// The key.
        key: Bytes,
        /// The value.
        value: Bytes,
    },
    /// `GETDEL key`: the value, and the key is gone.
    GetDel {
        /// The key.
        key: Bytes,
    },
    /// `MSETNX key value...`: all of them if none exists; answers 1 or 0.
    MSetNx {
        /// The pairs, in order.
        pairs: Vec<(Bytes, Bytes)>,
    },
    /// `EXEC`: the operations queued since `MULTI`, applied at once unless a watched key
    /// changed (then nothing is applied and the reply is a null array).
    Multi {
        /// In the order queued.
        ops: Vec<TxOp>,
        /// `(key, offset)` for every watched key: the transaction aborts if a record at or
        /// after `offset` changed the key (see `Store::watch_broken`).
        watches: Vec<(Bytes, u64)>,
    },
    /// A hash command.
    HashOp(HashCmd),
    /// A list command.
    ListOp(ListCmd),
    /// A set command.
    SetOp(SetCmd),
    /// A sorted-set command.
    ZSetOp(ZSetCmd),
    /// `RENAME src dst` (or `RENAMENX` with `if_absent`): the value and its expiry move.
    Rename {
        /// The key renamed.
        src: Bytes,
        /// Its new name.
        dst: Bytes,
        /// Only if `dst` does not exist (`RENAMENX`, answering 1 or 0).
        if_absent: bool,
    },
    /// `FLUSHALL` / `FLUSHDB`: every key is removed.
    Flush,
    /// `GETEX key EX|PX|EXAT|PXAT|PERSIST`: the value, and a new expiry (`None`: none).
    GetEx {
        /// The key.
        key: Bytes,
        /// The new expiry; `None` is `PERSIST`.
        expiry: Option<Expiry>,
    },
    /// `INCRBYFLOAT key delta`.
    IncrByFloat {
        /// The key.
        key: Bytes,
        /// The amount added (finite).
        delta: Float,
    },
    /// No change but the clock: the leader proposes one now and then while keys have an
    /// expiry, so that expiry advances on every replica without writes (version 3 only).
    Tick,
}

const OP_SET: u8 = 1;
const OP_DEL: u8 = 2;
const OP_INCRBY: u8 = 3;
const OP_MSET: u8 = 4;
const OP_APPEND: u8 = 5;
const OP_CAS: u8 = 6;
const OP_EXPIRE: u8 = 7;
const OP_MULTI: u8 = 8;
const OP_SETNX: u8 = 9;
const OP_GETDEL: u8 = 10;
/// The last opcode of version 1.
pub const OP_MSETNX: u8 = 11;
const OP_HASH: u8 = 12;
const OP_LIST: u8 = 13;
const OP_SETS: u8 = 14;
const OP_ZSET: u8 = 15;
const OP_RENAME: u8 = 16;
const OP_FLUSH: u8 = 17;
const OP_GETEX: u8 = 18;
const OP_INCRBYFLOAT: u8 = 19;
const OP_EXEC_WATCH: u8 = 20;
/// The last opcode of version 2.
const OP_LAST_V2: u8 = OP_EXEC_WATCH;
const OP_TICK: u8 = 21;

const SET_NX: u8 = 1;
const SET_XX: u8 = 2;
const SET_GET: u8 = 4;
const SET_EXPIRE: u8 = 8;
const SET_KEEPTTL: u8 = 16;

/// The bytes of a version-3 header: the version and the fixed-width stamp.
const HEADER_V3: usize = 9;

/// Encodes `cmd` stamped `stamp_ms` (the leader overwrites it, see [`restamp`]).
pub fn encode(stamp_ms: u64, cmd: &Command) -> Bytes {
    let mut out = BytesMut::with_capacity(32);
    out.put_u8(CMD_VERSION);
    out.put_u64_le(stamp_ms);
    put_command(&mut out, cmd, CMD_VERSION);
    out.freeze()
}

/// Encodes `cmd` in version 1 or 2 (a varint stamp, expiries absolute: an [`Expiry::In`]
/// has no such form and must not be passed), as older builds wrote it: for tests of reading
/// old records.
#[cfg(test)]
pub(super) fn encode_old(version: u8, stamp_ms: u64, cmd: &Command) -> Bytes {
    let mut out = BytesMut::with_capacity(32);
    out.put_u8(version);
    put_varint(&mut out, stamp_ms);
    put_command(&mut out, cmd, version);
    out.freeze()
}

/// The stamp of a version-3 payload, if it is one.
pub fn stamp_of(payload: &[u8]) -> Option<u64> {
    if payload.len() < HEADER_V3 || payload[0] != CMD_VERSION {
        return None;
    }
    let mut b = [0u8; 8];
    b.copy_from_slice(&payload[1..HEADER_V3]);
    Some(u64::from_le_bytes(b))
}

/// `payload` with its stamp replaced by `stamp_ms`, if it is a version-3 payload (the rest is
/// copied unchanged, not decoded); `None` for anything else, which the caller leaves alone.
pub fn restamp(payload: &[u8], stamp_ms: u64) -> Option<Bytes> {
    stamp_of(payload)?;
    let mut out = BytesMut::from(payload);
    out[1..HEADER_V3].copy_from_slice(&stamp_ms.to_le_bytes());
    Some(out.freeze())
}

/// [`restamp`] for the leader's hot path: rewrites the stamp in place when `payload` is the
/// only owner of its buffer (a command encoded on this node), and copies only a payload that
/// shares its buffer (one sliced from a forwarded frame). Anything but a version-3 payload
/// comes back unchanged.
pub fn restamp_owned(payload: Bytes, stamp_ms: u64) -> Bytes {
    if stamp_of(&payload).is_none() {
        return payload;
    }
    match payload.try_into_mut() {
        Ok(mut own) => {
            own[1..HEADER_V3].copy_from_slice(&stamp_ms.to_le_bytes());
            own.freeze()
        }
        Err(shared) => restamp(&shared, stamp_ms).unwrap_or(shared),
    }
}

/// Appends an expiry (version 3): a varint of the value shifted left by one, the low bit set
/// for a relative one. Values fit: planning keeps them within [`EXPIRY_MAX_MS`].
fn put_expiry(out: &mut BytesMut, e: Expiry, version: u8) {
    if version < CMD_VERSION {
        put_varint(out, e.at(0));
        return;
    }
    let v = match e {
        Expiry::At(t) => t.min(EXPIRY_MAX_MS) << 1,
        Expiry::In(d) => (d.min(EXPIRY_MAX_MS) << 1) | 1,
    };
    put_varint(out, v);
}

/// Appends an optional expiry: a tag byte, then the expiry.
fn put_opt_expiry(out: &mut BytesMut, e: Option<Expiry>, version: u8) {
    match e {
        Some(e) => {
            out.put_u8(1);
            put_expiry(out, e, version);
        }
        None => out.put_u8(0),
    }
}

/// Appends `cmd` without the record header (also inside a transaction), in the form of record
/// format `version`.
pub(super) fn put_command(out: &mut BytesMut, cmd: &Command, version: u8) {
    match cmd {
        Command::Set {
            key,
            value,
            cond,
            get,
            expiry,
            keep_ttl,
        } => {
            out.put_u8(OP_SET);
            let mut flags = match cond {
                SetCond::Always => 0,
                SetCond::IfAbsent => SET_NX,
                SetCond::IfPresent => SET_XX,
            };
            if *get {
                flags |= SET_GET;
            }
            if expiry.is_some() {
                flags |= SET_EXPIRE;
            }
            if *keep_ttl {
                flags |= SET_KEEPTTL;
            }
            out.put_u8(flags);
            put_bytes(out, key);
            put_bytes(out, value);
            if let Some(e) = expiry {
                put_expiry(out, *e, version);
            }
        }
        Command::Del { keys } => {
            out.put_u8(OP_DEL);
            put_varint(out, keys.len() as u64);
            for k in keys {
                put_bytes(out, k);
            }
        }
        Command::IncrBy { key, delta } => {
            out.put_u8(OP_INCRBY);
            put_bytes(out, key);
            put_varint(out, zigzag(*delta));
        }
        Command::MSet { pairs } => {
            out.put_u8(OP_MSET);
            put_varint(out, pairs.len() as u64);
            for (k, v) in pairs {
                put_bytes(out, k);
                put_bytes(out, v);
            }
        }
        Command::Append { key, value } => {
            out.put_u8(OP_APPEND);
            put_bytes(out, key);
            put_bytes(out, value);
        }
        Command::Cas { key, expected, new } => {
            out.put_u8(OP_CAS);
            put_bytes(out, key);
            put_bytes(out, expected);
            put_bytes(out, new);
        }
        Command::Expire { key, expiry, cond } => {
            out.put_u8(OP_EXPIRE);
            let cond = match cond {
                ExpireCond::Always => 0,
                ExpireCond::IfNone => 1,
                ExpireCond::IfSome => 2,
                ExpireCond::IfLater => 3,
                ExpireCond::IfEarlier => 4,
            };
            out.put_u8(cond | if expiry.is_some() { 8 } else { 0 });
            put_bytes(out, key);
            if let Some(e) = expiry {
                put_expiry(out, *e, version);
            }
        }
        Command::Multi { ops, watches } if watches.is_empty() => {
            out.put_u8(OP_MULTI);
            put_ops(out, ops, version);
        }
        Command::Multi { ops, watches } => {
            out.put_u8(OP_EXEC_WATCH);
            put_varint(out, watches.len() as u64);
            for (k, at) in watches {
                put_bytes(out, k);
                put_varint(out, *at);
            }
            put_ops(out, ops, version);
        }
        Command::HashOp(c) => {
            out.put_u8(OP_HASH);
            super::hash::put_cmd(out, c);
        }
        Command::ListOp(c) => {
            out.put_u8(OP_LIST);
            super::list::put_cmd(out, c);
        }
        Command::SetOp(c) => {
            out.put_u8(OP_SETS);
            super::set::put_cmd(out, c);
        }
        Command::ZSetOp(c) => {
            out.put_u8(OP_ZSET);
            super::zset::put_cmd(out, c);
        }
        Command::Rename {
            src,
            dst,
            if_absent,
        } => {
            out.put_u8(OP_RENAME);
            out.put_u8(u8::from(*if_absent));
            put_bytes(out, src);
            put_bytes(out, dst);
        }
        Command::Flush => out.put_u8(OP_FLUSH),
        Command::Tick => out.put_u8(OP_TICK),
        Command::GetEx { key, expiry } => {
            out.put_u8(OP_GETEX);
            put_bytes(out, key);
            put_opt_expiry(out, *expiry, version);
        }
        Command::IncrByFloat { key, delta } => {
            out.put_u8(OP_INCRBYFLOAT);
            put_bytes(out, key);
            put_f64(out, delta.0);
        }
        Command::SetNx { key, value } => {
            out.put_u8(OP_SETNX);
            put_bytes(out, key);
            put_bytes(out, value);
        }
        Command::GetDel { key } => {
            out.put_u8(OP_GETDEL);
            put_bytes(out, key);
        }
        Command::MSetNx { pairs } => {
            out.put_u8(OP_MSETNX);
            put_varint(out, pairs.len() as u64);
            for (k, v) in pairs {
                put_bytes(out, k);
                put_bytes(out, v);
            }
        }
    }
}

/// Decodes a payload written by [`encode`] (or by a build that wrote version 1 or 2):
/// `(timestamp_ms, command)`.
pub fn decode(payload: &Bytes) -> Result<(u64, Command), DecodeError> {
    let mut r = Reader::new(payload);
    let version = r.u8()?;
    r.version = version;
    let ts = match version {
        CMD_VERSION => {
            let mut b = [0u8; 8];
            for x in &mut b {
                *x = r.u8()?;
            }
            u64::from_le_bytes(b)
        }
        CMD_VERSION_V2 | CMD_VERSION_V1 => r.varint()?,
        _ => {
            return Err(DecodeError(format!(
                "command version {version} is not supported (this build reads \
                 {CMD_VERSION_V1} to {CMD_VERSION})"
            )))
        }
    };
    let op = r.buf.get(r.pos).copied().unwrap_or(0);
    if version == CMD_VERSION_V1 && op > OP_MSETNX {
        return Err(DecodeError(format!("opcode {op} in a version-1 record")));
    }
    if version == CMD_VERSION_V2 && op > OP_LAST_V2 {
        return Err(DecodeError(format!("opcode {op} in a version-2 record")));
    }
    let cmd = read_command(&mut r, true)?;
    if r.pos != payload.len() {
        return Err(DecodeError("trailing bytes after the command".into()));
    }
    Ok((ts, cmd))
}

/// Reads one command without the record header; a transaction only at the top level.
pub(super) fn read_command(r: &mut Reader, top: bool) -> Result<Command, DecodeError> {
    Ok(match r.u8()? {
        OP_SET => {
            let flags = r.u8()?;
            let key = r.bytes()?;
            let value = r.bytes()?;
            let expiry = if flags & SET_EXPIRE != 0 {
                Some(r.expiry()?)
            } else {
                None
            };
            let cond = match flags & (SET_NX | SET_XX) {
                0 => SetCond::Always,
                SET_NX => SetCond::IfAbsent,
                SET_XX => SetCond::IfPresent,
                _ => return Err(DecodeError("SET with both NX and XX".into())),
            };
            Command::Set {
                key,
                value,
                cond,
                get: flags & SET_GET != 0,
                expiry,
                keep_ttl: flags & SET_KEEPTTL != 0,
            }
        }
        OP_DEL => {
            let n = r.count()?;
            let keys = (0..n).map(|_| r.bytes()).collect::<Result<_, _>>()?;
            Command::Del { keys }
        }
        OP_INCRBY => Command::IncrBy {
            key: r.bytes()?,
            delta: unzigzag(r.varint()?),
        },
        OP_MSET => {
            let n = r.count()?;
            let pairs = (0..n)
                .map(|_| Ok((r.bytes()?, r.bytes()?)))
                .collect::<Result<_, DecodeError>>()?;
            Command::MSet { pairs }
        }
        OP_APPEND => Command::Append {
            key: r.bytes()?,
            value: r.bytes()?,
        },
        OP_CAS => Command::Cas {
            key: r.bytes()?,
            expected: r.bytes()?,
            new: r.bytes()?,
        },
        OP_EXPIRE => {
            let flags = r.u8()?;
            let cond = match flags & 7 {
                0 => ExpireCond::Always,
                1 => ExpireCond::IfNone,
                2 => ExpireCond::IfSome,
                3 => ExpireCond::IfLater,
                4 => ExpireCond::IfEarlier,
                c => return Err(DecodeError(format!("unknown EXPIRE condition {c}"))),
            };
            if flags & !15 != 0 {
                return Err(DecodeError(format!("unknown EXPIRE flags {flags:#x}")));
            }
            let key = r.bytes()?;
            let expiry = if flags & 8 != 0 {
                Some(r.expiry()?)
            } else {
                None
            };
            Command::Expire { key, expiry, cond }
        }
        OP_MULTI if top => Command::Multi {
            ops: read_ops(r)?,
            watches: Vec::new(),
        },
        OP_EXEC_WATCH if top => {
            let n = r.count()?;
            let watches = (0..n)
                .map(|_| Ok((r.bytes()?, r.varint()?)))
                .collect::<Result<_, DecodeError>>()?;
            Command::Multi {
                watches,
                ops: read_ops(r)?,
            }
        }
        OP_HASH => Command::HashOp(super::hash::read_cmd(r)?),
        OP_LIST => Command::ListOp(super::list::read_cmd(r)?),
        OP_SETS => Command::SetOp(super::set::read_cmd(r)?),
        OP_ZSET => Command::ZSetOp(super::zset::read_cmd(r)?),
        OP_RENAME => {
            let if_absent = r.flag()?;
            Command::Rename {
                src: r.bytes()?,
                dst: r.bytes()?,
                if_absent,
            }
        }
        OP_FLUSH => Command::Flush,
        // A tick inside a transaction is never written.
        OP_TICK if top && r.version >= CMD_VERSION => Command::Tick,
        OP_GETEX => Command::GetEx {
            key: r.bytes()?,
            expiry: if r.flag()? { Some(r.expiry()?) } else { None },
        },
        OP_INCRBYFLOAT => Command::IncrByFloat {
            key: r.bytes()?,
            delta: Float(r.f64()?),
        },
        OP_SETNX => Command::SetNx {
            key: r.bytes()?,
            value: r.bytes()?,
        },
        OP_GETDEL => Command::GetDel { key: r.bytes()? },
        OP_MSETNX => {
            let n = r.count()?;
            let pairs = (0..n)
                .map(|_| Ok((r.bytes()?, r.bytes()?)))
                .collect::<Result<_, DecodeError>>()?;
            Command::MSetNx { pairs }
        }
        op => return Err(DecodeError(format!("unknown opcode {op}"))),
    })
}

impl Reader<'_> {
    /// An expiry: absolute in versions 1 and 2, written by [`put_expiry`] from version 3.
    pub(super) fn expiry(&mut self) -> Result<Expiry, DecodeError> {
        let v = self.varint()?;
        Ok(if self.version < CMD_VERSION {
            Expiry::At(v)
        } else if v & 1 == 1 {
            Expiry::In(v >> 1)
        } else {
            Expiry::At(v >> 1)
        })
    }
}
