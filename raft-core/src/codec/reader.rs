//! The little-endian cursor every decoder in the codec reads with: the stored formats read a
//! plain slice with it, the wire codec wraps it with its frame limits and zero-copy slicing.
//! Every read checks the bytes left first and reports a shortfall as
//! [`DecodeError::Truncated`], so no decoder indexes past its input.

use super::DecodeError;

/// A little-endian cursor over a byte slice.
pub(crate) struct LeReader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> LeReader<'a> {
    /// A cursor at the start of `bytes`.
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        LeReader { bytes, pos: 0 }
    }

    /// How many bytes have been read.
    pub(crate) fn position(&self) -> usize {
        self.pos
    }

    /// How many bytes are left.
    pub(crate) fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    /// Moves past `n` bytes that the caller has already checked are there.
    pub(crate) fn advance(&mut self, n: usize) {
        assert!(
            n <= self.remaining(),
            "a reader only advances over bytes it holds"
        );
        self.pos += n;
    }

    /// The next `N` bytes.
    pub(crate) fn take<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let rest = &self.bytes[self.pos..];
        let Some(bytes) = rest.get(..N) else {
            return Err(DecodeError::Truncated {
                needed: N - rest.len(),
            });
        };
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        self.pos += N;
        Ok(out)
    }

    /// The next byte.
    pub(crate) fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take::<1>()?[0])
    }

    /// The next little-endian `u32`.
    pub(crate) fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.take()?))
    }

    /// The next little-endian `u64`.
    pub(crate) fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.take()?))
    }

    /// The next `n` bytes, borrowed.
    pub(crate) fn slice(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let rest: &'a [u8] = &self.bytes[self.pos..];
        let Some(bytes) = rest.get(..n) else {
            return Err(DecodeError::Truncated {
                needed: n - rest.len(),
            });
        };
        self.pos += n;
        Ok(bytes)
    }

    /// Ends the read: bytes left after a complete structure are [`DecodeError::Trailing`].
    pub(crate) fn finish(self) -> Result<(), DecodeError> {
        match self.remaining() {
            0 => Ok(()),
            n => Err(DecodeError::Trailing(n)),
        }
    }
}
