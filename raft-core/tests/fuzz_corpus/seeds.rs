//! The seed corpus of the raft-core targets: the golden wire frames (read from the pinned hex
//! in `src/codec/wire/golden.rs`, so the seeds follow the layout) and sample stored values.

use bytes::{Bytes, BytesMut};
use raft_core::codec::encode_record;
use raft_core::io::EpochStart;
use raft_core::stored::{encode_batches, encode_election_state, LogMeta};
use raft_core::{ElectionState, Epoch, Offset, Record, RecordKind, ReplicaId};

/// Every seed as (target, name, bytes).
pub fn all() -> Vec<(&'static str, String, Vec<u8>)> {
    let mut out = Vec::new();
    for (name, frame) in golden_frames() {
        let target = if name.ends_with("request") || name == "version refusal" {
            "wire_request"
        } else {
            "wire_response"
        };
        out.push((target, name.replace(' ', "-"), frame.clone()));
        // A refusal is answered to a request but read as a response.
        if name == "version refusal" {
            out.push(("wire_response", name.replace(' ', "-"), frame));
        }
    }
    for (name, record) in sample_records() {
        let mut buf = BytesMut::new();
        encode_record(&record, &mut buf);
        out.push(("record", name.to_string(), buf.to_vec()));
    }
    for (name, meta) in sample_metas() {
        out.push(("log_meta", name.to_string(), meta.encode()));
    }
    for (name, state) in sample_election_states() {
        out.push((
            "election_state",
            name.to_string(),
            encode_election_state(&state),
        ));
    }
    for (name, set) in sample_voter_sets() {
        let mut voters = Vec::new();
        raft_core::codec::encode_voters(&set, &mut voters);
        out.push(("voters", format!("{name}-record"), voters));
        let mut header = Vec::new();
        raft_core::codec::encode_snapshot_header(&set, &mut header);
        header.extend_from_slice(b"state machine bytes");
        out.push(("voters", format!("{name}-snapshot"), header));
    }
    let records: Vec<Record> = sample_records().into_iter().map(|(_, r)| r).collect();
    // A batch read header: base offset, start of the range past the base, its length, budget.
    let read = |base: u64, skip: u8, span: u8, budget: u16| {
        let mut head = base.to_le_bytes().to_vec();
        head.extend([skip, span]);
        head.extend(budget.to_le_bytes());
        head
    };
    let batches = encode_batches(&records, 4096);
    let whole = batches[0].1.to_vec();
    for (name, head) in [
        ("all", read(10, 0, 16, 4096)),
        ("middle", read(10, 1, 1, 4096)),
        ("budget", read(10, 0, 16, 1)),
        ("past-end", read(10, 9, 3, 4096)),
    ] {
        let mut seed = head;
        seed.extend_from_slice(&whole);
        out.push(("stored_batch", format!("batch-{name}"), seed));
    }
    out
}

fn sample_records() -> Vec<(&'static str, Record)> {
    let record = |offset, epoch, kind, payload: &'static [u8]| Record {
        offset: Offset(offset),
        epoch: Epoch(epoch),
        kind,
        payload: Bytes::from_static(payload),
    };
    vec![
        (
            "leader-change",
            record(10, 3, RecordKind::LeaderChange, b""),
        ),
        ("data", record(11, 3, RecordKind::Data, b"set k v")),
        (
            "data-over-tight-limit",
            record(12, 4, RecordKind::Data, &[0x5a; 40]),
        ),
    ]
}

fn sample_metas() -> Vec<(&'static str, LogMeta)> {
    let start = |epoch, offset| EpochStart {
        epoch: Epoch(epoch),
        start: Offset(offset),
    };
    vec![
        ("empty", LogMeta::default()),
        (
            "two-epochs",
            LogMeta {
                start: Offset(0),
                end: Offset(10),
                end_epoch: Epoch(3),
                base_epoch: Epoch(0),
                epochs: vec![start(1, 0), start(3, 5)],
            },
        ),
        (
            "purged",
            LogMeta {
                start: Offset(100),
                end: Offset(120),
                end_epoch: Epoch(7),
                base_epoch: Epoch(6),
                epochs: vec![start(6, 100), start(7, 110)],
            },
        ),
        (
            "after-snapshot",
            LogMeta {
                start: Offset(500),
                end: Offset(500),
                end_epoch: Epoch(9),
                base_epoch: Epoch(9),
                epochs: vec![],
            },
        ),
    ]
}

fn sample_election_states() -> Vec<(&'static str, ElectionState)> {
    vec![
        (
            "fresh",
            ElectionState {
                epoch: Epoch(0),
                voted_for: None,
                voted_directory: None,
                leader: None,
            },
        ),
        (
            "voted",
            ElectionState {
                epoch: Epoch(7),
                voted_for: Some(ReplicaId(2)),
                voted_directory: Some(raft_core::DirectoryId(0x5EED)),
                leader: None,
            },
        ),
        (
            "led",
            ElectionState {
                epoch: Epoch(8),
                voted_for: Some(ReplicaId(1)),
                voted_directory: None,
                leader: Some(ReplicaId(1)),
            },
        ),
    ]
}

/// The frames pinned in the golden test, parsed from its expected text: a line `name:` and
/// then lines of hex bytes.
fn golden_frames() -> Vec<(String, Vec<u8>)> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/src/codec/wire/golden.rs");
    let text = std::fs::read_to_string(path).expect("golden.rs");
    let block = text
        .split_once("expect_test::expect![[r#\"")
        .and_then(|(_, rest)| rest.split_once("\"#]]"))
        .expect("the pinned text of golden.rs")
        .0;
    let mut frames: Vec<(String, Vec<u8>)> = Vec::new();
    for line in block.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if let Some(name) = line.strip_suffix(':') {
            frames.push((name.to_string(), Vec::new()));
        } else {
            let frame = &mut frames.last_mut().expect("a name before the bytes").1;
            frame.extend(
                line.split_whitespace()
                    .map(|h| u8::from_str_radix(h, 16).expect("hex byte")),
            );
        }
    }
    assert!(frames.len() >= 17, "golden frames: {}", frames.len());
    frames
}

fn sample_voter_sets() -> Vec<(&'static str, raft_core::VoterSet)> {
    use raft_core::{DirectoryId, ReplicaId, Voter, VoterSet};
    let static_three = VoterSet::from_ids([ReplicaId(1), ReplicaId(2), ReplicaId(3)]);
    let mixed = static_three
        .with_added(
            ReplicaId(4),
            Voter {
                directory: Some(DirectoryId(0x0123_4567_89ab_cdef_0011_2233_4455_6677)),
                endpoint: "10.0.0.4:7104".into(),
            },
        )
        .expect("a new id");
    vec![("static-three", static_three), ("mixed", mixed)]
}
