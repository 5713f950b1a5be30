//! The primitives of the record encoding: varints, zig-zag integers, byte strings, `f64` bits,
//! and the [`Reader`] that reads them back, refusing what is short or malformed. Shared by the
//! command records (`command`), the typed families and the snapshot encoding.

use bytes::{BufMut, Bytes, BytesMut};

use super::command::CMD_VERSION;

/// Why a payload is not a command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodeError(pub String);

pub(super) fn put_varint(out: &mut BytesMut, mut v: u64) {
    while v >= 0x80 {
        out.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    out.put_u8(v as u8);
}

pub(super) fn put_bytes(out: &mut BytesMut, b: &[u8]) {
    put_varint(out, b.len() as u64);
    out.put_slice(b);
}

/// Appends a list of byte strings.
pub(super) fn put_keys(out: &mut BytesMut, keys: &[Bytes]) {
    put_varint(out, keys.len() as u64);
    for k in keys {
        put_bytes(out, k);
    }
}

/// Appends a list of pairs of byte strings.
pub(super) fn put_pairs(out: &mut BytesMut, pairs: &[(Bytes, Bytes)]) {
    put_varint(out, pairs.len() as u64);
    for (a, b) in pairs {
        put_bytes(out, a);
        put_bytes(out, b);
    }
}

/// Appends a signed integer (zig-zag varint).
pub(super) fn put_i64(out: &mut BytesMut, v: i64) {
    put_varint(out, zigzag(v));
}

/// Appends an `f64` as its 8 bits, little-endian: exact on every replica.
pub(super) fn put_f64(out: &mut BytesMut, v: f64) {
    out.put_u64_le(v.to_bits());
}

/// Appends an optional integer: a tag byte, then the varint.
pub(super) fn put_opt_u64(out: &mut BytesMut, v: Option<u64>) {
    match v {
        Some(v) => {
            out.put_u8(1);
            put_varint(out, v);
        }
        None => out.put_u8(0),
    }
}

pub(super) fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

pub(super) fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

pub(super) struct Reader<'a> {
    pub(super) buf: &'a Bytes,
    pub(super) pos: usize,
    /// Whether a read failed for want of bytes (the rest may be in a later chunk).
    pub(super) short: bool,
    /// The version of the record being read: how its expiries are written.
    pub(super) version: u8,
}

impl<'a> Reader<'a> {
    pub(super) fn new(buf: &'a Bytes) -> Reader<'a> {
        Reader {
            buf,
            pos: 0,
            short: false,
            version: CMD_VERSION,
        }
    }

    /// The error for a read past the end.
    fn ran_out(&mut self, what: &str) -> DecodeError {
        self.short = true;
        DecodeError(what.into())
    }

    pub(super) fn u8(&mut self) -> Result<u8, DecodeError> {
        let Some(b) = self.buf.get(self.pos).copied() else {
            return Err(self.ran_out("truncated command"));
        };
        self.pos += 1;
        Ok(b)
    }

    pub(super) fn varint(&mut self) -> Result<u64, DecodeError> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.u8()?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(DecodeError("varint longer than 10 bytes".into()))
    }

    /// A count of items that each take at least one byte: bounded by what is left.
    pub(super) fn count(&mut self) -> Result<usize, DecodeError> {
        let n = self.varint()?;
        if n > (self.buf.len() - self.pos) as u64 {
            return Err(self.ran_out("item count larger than the payload"));
        }
        Ok(n as usize)
    }

    /// A signed integer written by [`put_i64`].
    pub(super) fn i64(&mut self) -> Result<i64, DecodeError> {
        Ok(unzigzag(self.varint()?))
    }

    /// A byte that must be 0 or 1.
    pub(super) fn flag(&mut self) -> Result<bool, DecodeError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(DecodeError(format!("flag byte {b}"))),
        }
    }

    /// An `f64` written by [`put_f64`]; a NaN is refused (no command carries one).
    pub(super) fn f64(&mut self) -> Result<f64, DecodeError> {
        let mut bits = [0u8; 8];
        for b in &mut bits {
            *b = self.u8()?;
        }
        let v = f64::from_bits(u64::from_le_bytes(bits));
        if v.is_nan() {
            return Err(DecodeError("NaN in a command".into()));
        }
        Ok(v)
    }

    /// An optional integer written by [`put_opt_u64`].
    pub(super) fn opt_u64(&mut self) -> Result<Option<u64>, DecodeError> {
        Ok(if self.flag()? {
            Some(self.varint()?)
        } else {
            None
        })
    }

    /// A list written by [`put_keys`].
    pub(super) fn keys(&mut self) -> Result<Vec<Bytes>, DecodeError> {
        let n = self.count()?;
        (0..n).map(|_| self.bytes()).collect()
    }

    /// A list written by [`put_pairs`].
    pub(super) fn pairs(&mut self) -> Result<Vec<(Bytes, Bytes)>, DecodeError> {
        let n = self.count()?;
        (0..n).map(|_| Ok((self.bytes()?, self.bytes()?))).collect()
    }

    pub(super) fn bytes(&mut self) -> Result<Bytes, DecodeError> {
        let len = self.varint()?;
        let left = (self.buf.len() - self.pos) as u64;
        if len > left {
            return Err(self.ran_out("byte string longer than the payload"));
        }
        let start = self.pos;
        self.pos += len as usize;
        Ok(self.buf.slice(start..self.pos))
    }
}
