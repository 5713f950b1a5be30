//! The payload of a [`crate::RecordKind::Voters`] record: the whole voter set. The same bytes,
//! behind [`SNAPSHOT_MAGIC`], head every snapshot the driver stores, so that a snapshot carries
//! the set in force at its offset (KIP-853: snapshots carry membership).
//!
//! ```text
//! version  u8    VOTERS_FORMAT_VERSION
//! count    u8    voters (1..=VOTERS_MAX)
//! per voter, by ascending id:
//!   id       u32
//!   has_dir  u8    0 or 1
//!   dir      u128  only when has_dir = 1; never 0
//!   len      u8    endpoint length (<= ENDPOINT_MAX)
//!   endpoint       UTF-8
//! ```

use bytes::BufMut;

use super::reader::LeReader;
use super::DecodeError;
use crate::types::{DirectoryId, ReplicaId};
use crate::voters::{Voter, VoterSet, ENDPOINT_MAX, VOTERS_MAX};

/// The voter set format this build writes and reads.
pub const VOTERS_FORMAT_VERSION: u8 = 1;

/// The first bytes of a stored snapshot that carries its voter set; the state machine's bytes
/// follow the set. A snapshot without them predates voter sets in snapshots: all of it is the
/// state machine's, and the bootstrap set applies. The bytes are chosen so that no text and no
/// little-endian length prefix begins with them (a non-ASCII byte, then a CR LF, SUB, LF
/// sequence that line-ending conversion would break, as PNG's signature does).
pub const SNAPSHOT_MAGIC: [u8; 8] = [0xF5, b'R', b'V', b'S', 0x0D, 0x0A, 0x1A, 0x0A];

/// The header the driver puts before a state machine snapshot: [`SNAPSHOT_MAGIC`] and `set`.
pub fn encode_snapshot_header(set: &VoterSet, out: &mut impl BufMut) {
    out.put_slice(&SNAPSHOT_MAGIC);
    encode_voters(set, out);
}

/// Splits a stored snapshot into the voter set it carries (`None` for a snapshot without a
/// header) and the number of header bytes before the state machine's.
pub fn decode_snapshot_header(data: &[u8]) -> Result<(Option<VoterSet>, usize), DecodeError> {
    match data.strip_prefix(&SNAPSHOT_MAGIC[..]) {
        None => Ok((None, 0)),
        Some(rest) => {
            let (set, used) = decode_voters(rest)?;
            Ok((Some(set), SNAPSHOT_MAGIC.len() + used))
        }
    }
}

/// The longest snapshot header: enough bytes to read from a stored snapshot to decode it.
pub const SNAPSHOT_HEADER_MAX: usize =
    SNAPSHOT_MAGIC.len() + 2 + VOTERS_MAX * (4 + 1 + 16 + 1 + ENDPOINT_MAX);

/// Appends the encoding of `set` to `out`.
pub fn encode_voters(set: &VoterSet, out: &mut impl BufMut) {
    assert!(
        !set.is_empty() && set.len() <= VOTERS_MAX,
        "an encoded voter set holds 1..=VOTERS_MAX voters"
    );
    out.put_u8(VOTERS_FORMAT_VERSION);
    out.put_u8(set.len() as u8);
    for (id, v) in set.iter() {
        out.put_u32_le(id.0);
        match v.directory {
            Some(d) => {
                out.put_u8(1);
                out.put_u128_le(d.0);
            }
            None => out.put_u8(0),
        }
        out.put_u8(v.endpoint.len() as u8);
        out.put_slice(v.endpoint.as_bytes());
    }
}

/// Decodes a voter set from the front of `input`; returns it and the bytes it used.
pub fn decode_voters(input: &[u8]) -> Result<(VoterSet, usize), DecodeError> {
    let mut r = LeReader::new(input);
    let version = r.u8()?;
    if version != VOTERS_FORMAT_VERSION {
        return Err(DecodeError::UnsupportedVersion {
            what: "voter set",
            found: version,
            supported: VOTERS_FORMAT_VERSION,
        });
    }
    let count = r.u8()? as usize;
    if count == 0 {
        return Err(DecodeError::InvalidValue {
            what: "voter count",
            value: 0,
        });
    }
    // Each entry takes at least id, flag and length bytes: a declared count the input cannot
    // hold allocates no more than the input could.
    const ENTRY_LEN_MIN: usize = 4 + 1 + 1;
    let mut entries = Vec::with_capacity(count.min(r.remaining() / ENTRY_LEN_MIN));
    let mut last: Option<ReplicaId> = None;
    for _ in 0..count {
        let id = ReplicaId(r.u32()?);
        if last.is_some_and(|l| l >= id) {
            return Err(DecodeError::InvalidValue {
                what: "voter order",
                value: u64::from(id.0),
            });
        }
        last = Some(id);
        let directory = match r.u8()? {
            0 => None,
            1 => {
                let d = u128::from_le_bytes(r.take()?);
                if d == 0 {
                    return Err(DecodeError::InvalidValue {
                        what: "directory id",
                        value: 0,
                    });
                }
                Some(DirectoryId(d))
            }
            other => {
                return Err(DecodeError::InvalidValue {
                    what: "directory flag",
                    value: u64::from(other),
                })
            }
        };
        let len = r.u8()? as usize;
        debug_assert!(len <= ENDPOINT_MAX);
        let endpoint = std::str::from_utf8(r.slice(len)?)
            .map_err(|_| DecodeError::InvalidValue {
                what: "endpoint (not UTF-8)",
                value: len as u64,
            })?
            .to_owned();
        entries.push((
            id,
            Voter {
                directory,
                endpoint,
            },
        ));
    }
    let set = VoterSet::from_entries(entries).map_err(|_| DecodeError::InvalidValue {
        what: "voter set",
        value: count as u64,
    })?;
    Ok((set, r.position()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn voter_sets_round_trip(
            voters in proptest::collection::btree_map(
                any::<u32>(),
                (proptest::option::of(1u128..), "[a-z0-9.:]{0,40}"),
                1..20,
            )
        ) {
            let set = VoterSet::from_entries(voters.into_iter().map(|(id, (d, e))| {
                (ReplicaId(id), Voter { directory: d.map(DirectoryId), endpoint: e })
            }))
            .unwrap();
            let mut buf = Vec::new();
            encode_voters(&set, &mut buf);
            buf.extend_from_slice(b"rest");
            let (back, used) = decode_voters(&buf).unwrap();
            prop_assert_eq!(used, buf.len() - 4);
            prop_assert_eq!(back, set);
        }

        #[test]
        fn the_voter_decoder_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..128)) {
            let _ = decode_voters(&bytes);
        }
    }

    #[test]
    fn a_snapshot_header_is_found_and_its_absence_is_not_an_error() {
        let set = VoterSet::from_ids([ReplicaId(1), ReplicaId(2)]);
        let mut data = Vec::new();
        encode_snapshot_header(&set, &mut data);
        let header = data.len();
        data.extend_from_slice(b"state");
        assert_eq!(decode_snapshot_header(&data), Ok((Some(set), header)));
        assert_eq!(decode_snapshot_header(b"legacy state"), Ok((None, 0)));
        assert_eq!(decode_snapshot_header(b""), Ok((None, 0)));
        let mut bad = SNAPSHOT_MAGIC.to_vec();
        bad.push(9);
        assert!(decode_snapshot_header(&bad).is_err());
    }

    #[test]
    fn malformed_sets_are_typed_errors() {
        assert!(matches!(
            decode_voters(&[2, 1]),
            Err(DecodeError::UnsupportedVersion { .. })
        ));
        assert!(matches!(
            decode_voters(&[1, 0]),
            Err(DecodeError::InvalidValue { .. })
        ));
        // Two voters out of order.
        let bytes = [1, 2, 5, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 0];
        assert!(matches!(
            decode_voters(&bytes),
            Err(DecodeError::InvalidValue {
                what: "voter order",
                ..
            })
        ));
        assert!(matches!(
            decode_voters(&[1, 1, 5, 0, 0, 0, 0, 3]),
            Err(DecodeError::Truncated { .. })
        ));
    }
}
