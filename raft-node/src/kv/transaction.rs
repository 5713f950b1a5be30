//! `MULTI`/`EXEC` transactions: the queued operations of one `EXEC`, replicated as one record
//! and applied at once on every replica, so nothing runs between them. Reads inside a
//! transaction are evaluated there too, against the map as the transaction left it and the
//! replicated clock, so every replica computes the same replies.

use bytes::{BufMut, Bytes, BytesMut};

use super::command::{
    put_bytes, put_command, put_keys, put_varint, read_command, DecodeError, Reader,
};
use super::hash::HashRead;
use super::list::ListRead;
use super::set::SetRead;
use super::zset::ZSetRead;
use super::Command;

/// A read inside a transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TxRead {
    /// `GET`.
    Get(Bytes),
    /// `MGET`.
    MGet(Vec<Bytes>),
    /// `EXISTS`.
    Exists(Vec<Bytes>),
    /// `STRLEN`.
    StrLen(Bytes),
    /// `TTL` (seconds) or `PTTL` (milliseconds, when `true`).
    Ttl(Bytes, bool),
    /// `TYPE`.
    Type(Bytes),
    /// `DBSIZE`.
    DbSize,
    /// `EXPIRETIME` (seconds) or `PEXPIRETIME` (milliseconds, when `true`): the absolute
    /// expiry, the same on every replica.
    ExpireTime(Bytes, bool),
    /// A read of a hash.
    Hash(HashRead),
    /// A read of a list.
    List(ListRead),
    /// A read of sets.
    Set(SetRead),
    /// A read of a sorted set.
    ZSet(ZSetRead),
    /// `TIME` inside a transaction: the clock of the `EXEC` record (version 3).
    Time,
}

/// One queued operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TxOp {
    /// A write.
    Write(Command),
    /// A read, evaluated where the transaction is applied.
    Read(TxRead),
    /// A reply known when the command was queued (`PING`, `ECHO`), in RESP2.
    Reply(Bytes),
}

const TX_WRITE: u8 = 0;
const TX_READ: u8 = 1;
const TX_REPLY: u8 = 2;

const READ_GET: u8 = 0;
const READ_MGET: u8 = 1;
const READ_EXISTS: u8 = 2;
const READ_STRLEN: u8 = 3;
const READ_TTL: u8 = 4;
const READ_PTTL: u8 = 5;
const READ_TYPE: u8 = 6;
const READ_DBSIZE: u8 = 7;
const READ_HASH: u8 = 8;
const READ_LIST: u8 = 9;
const READ_SET: u8 = 10;
const READ_ZSET: u8 = 11;
const READ_EXPIRETIME: u8 = 12;
const READ_PEXPIRETIME: u8 = 13;
const READ_TIME: u8 = 14;

/// Appends the operations of a transaction.
pub(super) fn put_ops(out: &mut BytesMut, ops: &[TxOp], version: u8) {
    put_varint(out, ops.len() as u64);
    for op in ops {
        match op {
            TxOp::Write(cmd) => {
                out.put_u8(TX_WRITE);
                put_command(out, cmd, version);
            }
            TxOp::Reply(b) => {
                out.put_u8(TX_REPLY);
                put_bytes(out, b);
            }
            TxOp::Read(r) => {
                out.put_u8(TX_READ);
                match r {
                    TxRead::Get(k) => {
                        out.put_u8(READ_GET);
                        put_bytes(out, k);
                    }
                    TxRead::MGet(keys) => {
                        out.put_u8(READ_MGET);
                        put_keys(out, keys);
                    }
                    TxRead::Exists(keys) => {
                        out.put_u8(READ_EXISTS);
                        put_keys(out, keys);
                    }
                    TxRead::StrLen(k) => {
                        out.put_u8(READ_STRLEN);
                        put_bytes(out, k);
                    }
                    TxRead::Ttl(k, ms) => {
                        out.put_u8(if *ms { READ_PTTL } else { READ_TTL });
                        put_bytes(out, k);
                    }
                    TxRead::Type(k) => {
                        out.put_u8(READ_TYPE);
                        put_bytes(out, k);
                    }
                    TxRead::DbSize => out.put_u8(READ_DBSIZE),
                    TxRead::Time => out.put_u8(READ_TIME),
                    TxRead::ExpireTime(k, ms) => {
                        out.put_u8(if *ms {
                            READ_PEXPIRETIME
                        } else {
                            READ_EXPIRETIME
                        });
                        put_bytes(out, k);
                    }
                    TxRead::Hash(h) => {
                        out.put_u8(READ_HASH);
                        super::hash::put_read(out, h);
                    }
                    TxRead::List(l) => {
                        out.put_u8(READ_LIST);
                        super::list::put_read(out, l);
                    }
                    TxRead::Set(s) => {
                        out.put_u8(READ_SET);
                        super::set::put_read(out, s);
                    }
                    TxRead::ZSet(z) => {
                        out.put_u8(READ_ZSET);
                        super::zset::put_read(out, z);
                    }
                }
            }
        }
    }
}

/// Reads the operations of a transaction (no transaction nests in another).
pub(super) fn read_ops(r: &mut Reader) -> Result<Vec<TxOp>, DecodeError> {
    let n = r.count()?;
    let keys = |r: &mut Reader| r.keys();
    (0..n)
        .map(|_| {
            Ok(match r.u8()? {
                TX_WRITE => TxOp::Write(read_command(r, false)?),
                TX_REPLY => TxOp::Reply(r.bytes()?),
                TX_READ => TxOp::Read(match r.u8()? {
                    READ_GET => TxRead::Get(r.bytes()?),
                    READ_MGET => TxRead::MGet(keys(r)?),
                    READ_EXISTS => TxRead::Exists(keys(r)?),
                    READ_STRLEN => TxRead::StrLen(r.bytes()?),
                    READ_TTL => TxRead::Ttl(r.bytes()?, false),
                    READ_PTTL => TxRead::Ttl(r.bytes()?, true),
                    READ_TYPE => TxRead::Type(r.bytes()?),
                    READ_DBSIZE => TxRead::DbSize,
                    READ_TIME if r.version >= 3 => TxRead::Time,
                    READ_EXPIRETIME => TxRead::ExpireTime(r.bytes()?, false),
                    READ_PEXPIRETIME => TxRead::ExpireTime(r.bytes()?, true),
                    READ_HASH => TxRead::Hash(super::hash::read_read(r)?),
                    READ_LIST => TxRead::List(super::list::read_read(r)?),
                    READ_SET => TxRead::Set(super::set::read_read(r)?),
                    READ_ZSET => TxRead::ZSet(super::zset::read_read(r)?),
                    t => return Err(DecodeError(format!("unknown read {t} in a transaction"))),
                }),
                t => {
                    return Err(DecodeError(format!(
                        "unknown operation {t} in a transaction"
                    )))
                }
            })
        })
        .collect()
}
