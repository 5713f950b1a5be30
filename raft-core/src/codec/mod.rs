//! Pure encoding and decoding of log records (shared by the wire and every storage backend),
//! and in [`wire`] of the RPC frames (decisions D9). The batches and bookkeeping every storage
//! backend keeps are in [`crate::stored`].
//!
//! The formats here are stability boundaries: a byte layout change needs a new version number,
//! and decoders refuse versions they do not know with a typed error instead of guessing.
//!
//! Record layout (little-endian), [`RECORD_HEADER_LEN`] bytes of header then the payload:
//!
//! ```text
//! crc32  u32   CRC-32 (IEEE) of every byte after this field, payload included
//! format u8    RECORD_FORMAT_VERSION
//! kind   u8    0 = data, 1 = leader change, 2 = voters (payload: [`encode_voters`])
//! offset u64
//! epoch  u32
//! len    u32   payload length
//! payload
//! ```

use bytes::{BufMut, Bytes};

use crate::types::{Epoch, Offset, Record, RecordKind};
pub use crate::types::{RECORD_FORMAT_VERSION, RECORD_HEADER_LEN};

pub(crate) mod reader;
mod voters;
pub mod wire;

pub use voters::{
    decode_snapshot_header, decode_voters, encode_snapshot_header, encode_voters,
    SNAPSHOT_HEADER_MAX, SNAPSHOT_MAGIC, VOTERS_FORMAT_VERSION,
};

/// Why bytes could not be decoded. Never a panic: every decoder in this module returns this for
/// any input it cannot accept.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The input ended before the structure did.
    #[error("truncated input: needed {needed} more bytes")]
    Truncated {
        /// How many more bytes the decoder needed.
        needed: usize,
    },
    /// A checksum did not match: the bytes were corrupted or torn.
    #[error("checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    Checksum {
        /// The checksum found in the input.
        stored: u32,
        /// The checksum of the bytes actually present.
        computed: u32,
    },
    /// A version this build does not understand.
    #[error("unsupported {what} version {found} (this build speaks {supported})")]
    UnsupportedVersion {
        /// Which format.
        what: &'static str,
        /// The version found.
        found: u8,
        /// The version this build speaks.
        supported: u8,
    },
    /// A tag or enum value that is not defined.
    #[error("invalid {what}: {value}")]
    InvalidValue {
        /// Which field.
        what: &'static str,
        /// The value found.
        value: u64,
    },
    /// A length field exceeds the configured limit; nothing was allocated for it.
    #[error("{what} of {len} bytes exceeds the limit of {limit}")]
    TooLarge {
        /// Which field.
        what: &'static str,
        /// The declared length.
        len: u64,
        /// The limit.
        limit: u64,
    },
    /// Bytes were left over after a complete structure.
    #[error("{0} trailing bytes after the frame")]
    Trailing(usize),
}

/// Appends the encoding of `record` to `out`.
pub fn encode_record(record: &Record, out: &mut impl BufMut) {
    let body_len = RECORD_HEADER_LEN - 4 + record.payload.len();
    let mut header = [0u8; RECORD_HEADER_LEN - 4];
    header[0] = RECORD_FORMAT_VERSION;
    header[1] = match record.kind {
        RecordKind::Data => 0,
        RecordKind::LeaderChange => 1,
        RecordKind::Voters => 2,
    };
    header[2..10].copy_from_slice(&record.offset.0.to_le_bytes());
    header[10..14].copy_from_slice(&record.epoch.0.to_le_bytes());
    header[14..18].copy_from_slice(&(record.payload.len() as u32).to_le_bytes());
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&header);
    hasher.update(&record.payload);
    let crc = hasher.finalize();
    debug_assert_eq!(body_len, header.len() + record.payload.len());
    out.put_u32_le(crc);
    out.put_slice(&header);
    out.put_slice(&record.payload);
}

/// Decodes one record from the front of `input`, which is shared so that the payload is a
/// zero-copy slice of it. Returns the record and the number of bytes consumed.
///
/// `payload_max` bounds the declared payload length before anything is allocated or sliced.
pub fn decode_record(input: &Bytes, payload_max: usize) -> Result<(Record, usize), DecodeError> {
    if input.len() < RECORD_HEADER_LEN {
        return Err(DecodeError::Truncated {
            needed: RECORD_HEADER_LEN - input.len(),
        });
    }
    let stored = u32::from_le_bytes(input[0..4].try_into().expect("slice of 4"));
    let h = &input[4..RECORD_HEADER_LEN];
    if h[0] != RECORD_FORMAT_VERSION {
        return Err(DecodeError::UnsupportedVersion {
            what: "record format",
            found: h[0],
            supported: RECORD_FORMAT_VERSION,
        });
    }
    let len = u32::from_le_bytes(h[14..18].try_into().expect("slice of 4")) as usize;
    if len > payload_max {
        return Err(DecodeError::TooLarge {
            what: "record payload",
            len: len as u64,
            limit: payload_max as u64,
        });
    }
    let total = RECORD_HEADER_LEN + len;
    if input.len() < total {
        return Err(DecodeError::Truncated {
            needed: total - input.len(),
        });
    }
    let computed = crc32fast::hash(&input[4..total]);
    if computed != stored {
        return Err(DecodeError::Checksum { stored, computed });
    }
    let kind = match h[1] {
        0 => RecordKind::Data,
        1 => RecordKind::LeaderChange,
        2 => RecordKind::Voters,
        other => {
            return Err(DecodeError::InvalidValue {
                what: "record kind",
                value: other as u64,
            })
        }
    };
    let offset = Offset(u64::from_le_bytes(h[2..10].try_into().expect("slice of 8")));
    let epoch = Epoch(u32::from_le_bytes(
        h[10..14].try_into().expect("slice of 4"),
    ));
    let payload = input.slice(RECORD_HEADER_LEN..total);
    Ok((
        Record {
            offset,
            epoch,
            kind,
            payload,
        },
        total,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use proptest::prelude::*;

    fn record(offset: u64, epoch: u32, payload: Vec<u8>) -> Record {
        Record {
            offset: Offset(offset),
            epoch: Epoch(epoch),
            kind: RecordKind::Data,
            payload: Bytes::from(payload),
        }
    }

    proptest! {
        #[test]
        fn record_round_trips(offset: u64, epoch: u32, payload in proptest::collection::vec(any::<u8>(), 0..512), leader_change: bool) {
            let mut r = record(offset, epoch, payload);
            if leader_change { r.kind = RecordKind::LeaderChange; }
            let mut buf = BytesMut::new();
            encode_record(&r, &mut buf);
            prop_assert_eq!(buf.len(), r.encoded_len());
            let (back, used) = decode_record(&buf.freeze(), 1 << 20).unwrap();
            prop_assert_eq!(used, r.encoded_len());
            prop_assert_eq!(back, r);
        }

        #[test]
        fn record_decoder_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = decode_record(&Bytes::from(bytes), 1024);
        }

        #[test]
        fn any_flipped_bit_is_detected(payload in proptest::collection::vec(any::<u8>(), 1..64), bit in 0usize..8, pos_seed: usize) {
            let r = record(7, 3, payload);
            let mut buf = BytesMut::new();
            encode_record(&r, &mut buf);
            let pos = pos_seed % buf.len();
            buf[pos] ^= 1 << bit;
            prop_assert!(decode_record(&buf.freeze(), 1 << 20).is_err());
        }
    }

    #[test]
    fn oversized_payload_is_refused_before_slicing() {
        let r = record(1, 1, vec![0; 100]);
        let mut buf = BytesMut::new();
        encode_record(&r, &mut buf);
        let err = decode_record(&buf.freeze(), 10).unwrap_err();
        assert_eq!(
            err,
            DecodeError::TooLarge {
                what: "record payload",
                len: 100,
                limit: 10
            }
        );
    }
}
