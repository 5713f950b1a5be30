//! Properties of the stored formats: the record codec, the log bookkeeping, the election
//! state and the batches every storage backend keeps.
//!
//! Each format is sealed with a CRC-32, which random bytes almost never match; so every check
//! runs twice, on the bytes as given and on a copy whose checksums (and, for batches, record
//! offsets) were fixed up, so that a fuzzer also explores what lies behind the checksum.

use bytes::{Bytes, BytesMut};

use super::{assert_alloc_bounded, measure};
use crate::codec::{decode_record, encode_record, RECORD_FORMAT_VERSION, RECORD_HEADER_LEN};
use crate::stored::{
    batch_prefix_len, corrupt_in_batch, decode_election_state, decode_part, encode_election_state,
    locate_in_batch, LogMeta, ReadBudget, STORED_PAYLOAD_MAX,
};
use crate::types::{Epoch, Offset, Record, RecordKind};

/// A payload bound small enough that short inputs reach the limit check.
const TIGHT_PAYLOAD_MAX: usize = 32;

/// Checks the properties of `data` read as one record (the front of a stored batch or of a
/// Fetch response's record list).
pub fn check_record(data: &[u8]) {
    check_record_once(data);
    let mut fixed = data.to_vec();
    fix_record_crc(&mut fixed);
    check_record_once(&fixed);
}

fn check_record_once(data: &[u8]) {
    let input = Bytes::copy_from_slice(data);
    let (decoded, stats) = measure(|| decode_record(&input, STORED_PAYLOAD_MAX));
    assert_alloc_bounded("record", data.len(), stats);
    if let Ok(small) = decode_record(&input, TIGHT_PAYLOAD_MAX) {
        assert!(small.0.payload.len() <= TIGHT_PAYLOAD_MAX);
        assert_eq!(
            decoded.as_ref(),
            Ok(&small),
            "a tighter limit changed a record"
        );
    }
    let Ok((record, used)) = decoded else { return };
    assert_eq!(used, record.encoded_len(), "consumed length of {record:?}");
    let mut out = BytesMut::new();
    encode_record(&record, &mut out);
    assert_eq!(
        &out[..],
        &data[..used],
        "a record does not re-encode to its bytes"
    );
}

/// Writes the right CRC into the record at the front of `data`, if its declared length fits.
fn fix_record_crc(data: &mut [u8]) -> Option<usize> {
    let len = u32::from_le_bytes(data.get(18..22)?.try_into().ok()?) as usize;
    let total = RECORD_HEADER_LEN.checked_add(len)?;
    let body = data.get(4..total)?;
    let crc = crc32fast::hash(body);
    data[..4].copy_from_slice(&crc.to_le_bytes());
    Some(total)
}

/// Writes the right CRC over everything after the first four bytes (the seal of the log
/// bookkeeping and the election state).
fn fix_seal(data: &mut [u8]) {
    if data.len() >= 4 {
        let crc = crc32fast::hash(&data[4..]);
        data[..4].copy_from_slice(&crc.to_le_bytes());
    }
}

/// Checks the properties of `data` read as the log bookkeeping: it re-encodes to the same
/// bytes, and every state the checked operations reach from it still encodes to bytes that
/// decode (the decoder admits only states the rest of the code can keep working on).
pub fn check_log_meta(data: &[u8]) {
    check_log_meta_once(data);
    let mut fixed = data.to_vec();
    fix_seal(&mut fixed);
    check_log_meta_once(&fixed);
}

fn check_log_meta_once(data: &[u8]) {
    let (decoded, stats) = measure(|| LogMeta::decode(data));
    assert_alloc_bounded("log bookkeeping", data.len(), stats);
    let Ok(meta) = decoded else { return };
    assert_eq!(meta.encode(), data, "log bookkeeping is not canonical");

    // Probe the offsets around the bounds and every epoch boundary.
    let mut probes = vec![meta.start, meta.end];
    probes.extend(meta.start.0.checked_sub(1).map(Offset));
    probes.extend(meta.end.0.checked_sub(1).map(Offset));
    probes.extend(meta.epochs.iter().map(|e| e.start));
    for &at in &probes {
        let inside = at >= meta.start && at < meta.end;
        assert_eq!(meta.epoch_at(at).is_some(), inside, "epoch_at({at})");
    }
    let _ = meta.state();

    let reopen = |m: &LogMeta, step: &str| {
        let back = LogMeta::decode(&m.encode());
        assert_eq!(
            back.as_ref(),
            Ok(m),
            "{step} of decoded {meta:?} gives bookkeeping that does not decode"
        );
    };
    for &at in &probes {
        let mut m = meta.clone();
        if m.check_truncate(at).is_ok() {
            m.apply_truncate(at);
            reopen(&m, "a truncation");
        }
        let mut m = meta.clone();
        if m.check_purge(at).is_ok() {
            m.apply_purge(at);
            reopen(&m, "a purge");
        }
    }
    // The smallest append the checks accept: one record in the current end epoch (or epoch 1
    // after an empty history).
    let mut m = meta.clone();
    if m.end.0 < u64::MAX {
        let record = Record {
            offset: m.end,
            epoch: m.end_epoch.max(Epoch(1)),
            kind: RecordKind::Data,
            payload: Bytes::new(),
        };
        if m.check_append(std::slice::from_ref(&record)).is_ok() {
            m.apply_append(std::slice::from_ref(&record));
            reopen(&m, "an append");
        }
    }
}

/// Checks the properties of `data` read as an election state: decoding is a left inverse of
/// encoding (the encoding writes 0 for an absent id, which the decoder does not insist on).
pub fn check_election_state(data: &[u8]) {
    check_election_state_once(data);
    let mut fixed = data.to_vec();
    fix_seal(&mut fixed);
    check_election_state_once(&fixed);
}

fn check_election_state_once(data: &[u8]) {
    let (decoded, stats) = measure(|| decode_election_state(data));
    assert_alloc_bounded("election state", data.len(), stats);
    let Ok(state) = decoded else { return };
    let again = encode_election_state(&state);
    assert_eq!(again.len(), data.len(), "election state length");
    assert_eq!(decode_election_state(&again), Ok(state));
}

/// Checks the properties of `data` read as a read of one stored batch. The first 12 bytes
/// choose the read (batch base offset, start and length of the range, byte budget), the rest
/// is the batch value.
pub fn check_stored_batch(data: &[u8]) {
    let Some((head, value)) = data.split_first_chunk::<12>() else {
        return;
    };
    let base = Offset(u64::from_le_bytes(head[..8].try_into().expect("8 bytes")));
    let from = Offset(base.0.saturating_add(u64::from(head[8])));
    let to = Offset(from.0.saturating_add(u64::from(head[9])));
    let budget = u64::from(u16::from_le_bytes([head[10], head[11]]));
    let read = BatchRead {
        base,
        from,
        to,
        budget,
    };
    read.check(value, false);
    let mut fixed = value.to_vec();
    if fix_batch(&mut fixed, base) {
        read.check(&fixed, true);
    }
}

struct BatchRead {
    base: Offset,
    from: Offset,
    to: Offset,
    budget: u64,
}

impl BatchRead {
    /// `well_formed`: `value` is a sequence of valid records at consecutive offsets from
    /// `base`, so every read of it must succeed.
    fn check(&self, value: &[u8], well_formed: bool) {
        let shared = Bytes::copy_from_slice(value);
        let mut budget = ReadBudget::new(self.budget);
        let (located, stats) =
            measure(|| locate_in_batch(value, self.base, self.from, self.to, &mut budget));
        assert_alloc_bounded("batch walk", value.len(), stats);
        if well_formed {
            assert!(
                located.is_ok(),
                "a well-formed batch was refused: {located:?}"
            );
        }
        if let Ok(part) = &located {
            assert!(part.bytes.start <= part.bytes.end && part.bytes.end <= value.len());
            assert!(part.first >= self.from || part.count == 0);
            assert!(part.count <= self.to.0.saturating_sub(self.from.0));
            if part.count > 1 {
                assert!(budget.used <= self.budget, "the budget was exceeded");
            }
            let mut records = Vec::new();
            let bytes = shared.slice(part.bytes.clone());
            let (decoded, stats) =
                measure(|| decode_part(bytes, part.first, part.count, &mut records));
            // `records` grows in steps, so allow the vector's doubling on top of the bound.
            assert_alloc_bounded("batch records", 2 * part.bytes.len(), stats);
            if well_formed {
                assert!(
                    decoded.is_ok(),
                    "a well-formed part was refused: {decoded:?}"
                );
            }
            if decoded.is_ok() {
                assert_eq!(records.len() as u64, part.count);
                let mut out = BytesMut::new();
                for (i, r) in records.iter().enumerate() {
                    assert_eq!(r.offset, Offset(part.first.0 + i as u64));
                    encode_record(r, &mut out);
                }
                assert_eq!(&out[..], &value[part.bytes.clone()]);
            }
        }
        if let Ok(prefix) = batch_prefix_len(value, self.base, self.to) {
            assert!(prefix <= value.len());
        } else {
            assert!(!well_formed, "a well-formed batch has no prefix length");
        }
        if let Ok(flipped) = corrupt_in_batch(value, self.base, self.from) {
            assert_eq!(flipped.len(), value.len());
            let differing: u32 = flipped
                .iter()
                .zip(value)
                .map(|(a, b)| (a ^ b).count_ones())
                .sum();
            assert_eq!(differing, 1, "fault injection flips exactly one bit");
            if well_formed {
                let count = record_count(value);
                let mut records = Vec::new();
                let whole = Bytes::from(flipped);
                assert!(
                    decode_part(whole, self.base, count, &mut records).is_err(),
                    "a flipped bit went unnoticed"
                );
            }
        }
    }
}

/// Turns `value` into a well-formed batch where it can: walks the records by their declared
/// lengths and gives each the current version, a defined kind, its offset and a right CRC.
/// Returns false when the lengths do not tile the value or the offsets would reach
/// `u64::MAX` (a log never gets there: `Offset::next` refuses to wrap).
fn fix_batch(value: &mut [u8], base: Offset) -> bool {
    let mut pos = 0;
    let mut offset = base.0;
    while pos < value.len() {
        let rest = &mut value[pos..];
        if rest.len() < RECORD_HEADER_LEN {
            return false;
        }
        rest[4] = RECORD_FORMAT_VERSION;
        rest[5] &= 1;
        rest[6..14].copy_from_slice(&offset.to_le_bytes());
        let Some(total) = fix_record_crc(rest) else {
            return false;
        };
        pos += total;
        let Some(next) = offset.checked_add(1).filter(|&n| n < u64::MAX) else {
            return false;
        };
        offset = next;
    }
    true
}

/// Records in a batch whose lengths tile it.
fn record_count(value: &[u8]) -> u64 {
    let mut pos = 0;
    let mut count = 0;
    while let Some(len) = value.get(pos + 18..pos + 22) {
        pos += RECORD_HEADER_LEN + u32::from_le_bytes(len.try_into().expect("4 bytes")) as usize;
        count += 1;
    }
    count
}

/// What decoding the largest voter set may allocate, endpoints aside: its entries (id, directory,
/// an empty `String`) in a vector and then in a map, with the map's node overhead.
const VOTERS_ALLOC_MAX: usize = crate::voters::VOTERS_MAX * 256;

/// A voter set record's payload and a stored snapshot's header (`codec::decode_voters`,
/// `codec::decode_snapshot_header`): bounded allocation, and what decodes re-encodes to the
/// same bytes (the format is canonical: ascending ids, flags 0 or 1, no zero directory).
pub fn check_voters(data: &[u8]) {
    // A decoded set is a map of at most VOTERS_MAX entries, each several times the six bytes
    // it can be encoded in: bounded by the set's limits, plus the endpoint text it copies.
    let bound = VOTERS_ALLOC_MAX + data.len();
    let (decoded, stats) = measure(|| crate::codec::decode_voters(data));
    super::assert_alloc_at_most("voters", data.len(), bound, stats);
    if let Ok((set, used)) = decoded {
        let mut out = Vec::new();
        crate::codec::encode_voters(&set, &mut out);
        assert_eq!(
            &out[..],
            &data[..used],
            "a voter set does not re-encode to its bytes"
        );
    }
    let (header, stats) = measure(|| crate::codec::decode_snapshot_header(data));
    super::assert_alloc_at_most("snapshot header", data.len(), bound, stats);
    match header {
        Ok((Some(set), used)) => {
            let mut out = Vec::new();
            crate::codec::encode_snapshot_header(&set, &mut out);
            assert_eq!(
                &out[..],
                &data[..used],
                "a snapshot header does not re-encode"
            );
        }
        Ok((None, used)) => assert_eq!(used, 0, "no header consumes nothing"),
        Err(_) => assert!(
            data.starts_with(&crate::codec::SNAPSHOT_MAGIC),
            "only a header that starts with the magic can be refused"
        ),
    }
}
