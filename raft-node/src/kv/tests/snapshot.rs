//! Snapshots: round trips of every value type with expiries and versions, the version-1
//! format still loading, and damaged snapshots refused without a panic.

use super::*;

/// A version-1 snapshot as the build before typed values wrote it, pinned byte for byte: it
/// covers offsets before 5 at clock 1000 and holds `a = "1"` and `b = "xy"` expiring at 5000.
pub(super) fn v1_snapshot() -> Bytes {
    Bytes::from_static(&[
        1, // version
        5, // applied
        0xe8, 0x07, // clock_ms 1000
        2,    // keys
        1, b'a', 1, b'1', 0, // a = "1", no expiry
        1, b'b', 2, b'x', b'y', 1, 0x88, 0x27, // b = "xy", expires at 5000
    ])
}

/// A replica holding every type, an expiry on each, removals and a watch-relevant history.
fn every_type() -> Replica {
    let mut r = Replica::new();
    for line in [
        "SET s \u{1}bin",
        "HSET h f1 v1 f2 v2 f3 v3",
        "HDEL h f1",
        "RPUSH l a b c",
        "SADD st x y z",
        "SREM st x",
        "ZADD z 1.5 a -inf b 3 c",
        "EXPIRE h 100",
        "EXPIRE l 200",
        "PEXPIRE st 300000",
        "EXPIRE z 400",
        "SET gone 1",
        "DEL gone",
    ] {
        assert!(!r.run(line).starts_with('-'), "{line}");
    }
    r
}

/// Goal: a snapshot restores every type, expiry and version exactly. Method: snapshot a map
/// of every type, restore it into a new state machine; the same reads answer the same, the
/// restored map writes the same snapshot bytes, and a watched EXEC is decided alike.
#[test]
fn snapshots_round_trip_every_type() {
    let mut r = every_type();
    let snap = snapshot_bytes(&r.kv);
    assert_eq!(snap[0], 2, "the current version");
    let mut copy = Replica::new();
    restore_bytes(&copy.kv, Offset(r.next), snap.clone()).unwrap();
    copy.next = r.next;
    assert_eq!(snapshot_bytes(&copy.kv), snap, "the same bytes again");
    for read in [
        "GET s",
        "HGETALL h",
        "LRANGE l 0 -1",
        "SMEMBERS st",
        "ZRANGE z 0 -1 WITHSCORES",
        "PTTL h",
        "PTTL l",
        "PTTL st",
        "PTTL z",
        "TYPE z",
        "DBSIZE",
    ] {
        assert_eq!(r.run(read), copy.run(read), "{read}");
    }
    assert_eq!(
        copy.run("HGETALL h"),
        "[f3 v3 f2 v2]",
        "the field order survives"
    );
    assert_eq!(copy.run("ZRANGE z 0 -1 WITHSCORES"), "[b -inf a 1.5 c 3]");
    // Versions and removals survive: a watch from before the last writes aborts alike.
    let exec = Command::Multi {
        ops: vec![],
        watches: vec![(b("gone"), r.next - 1), (b("z"), 7)],
    };
    assert_eq!(r.apply(&exec), copy.apply(&exec));
    assert_eq!(&copy.apply(&exec)[..], b"*-1\r\n");
}

/// Goal: a version-1 snapshot still loads. Method: restore the pinned bytes; the strings and
/// the expiry are there, and the next snapshot is written in version 2.
#[test]
fn version_one_snapshots_still_load() {
    let mut r = Replica::new();
    restore_bytes(&r.kv, Offset(5), v1_snapshot()).unwrap();
    r.next = 5;
    r.script(&[
        ("GET a", "1"),
        ("GET b", "xy"),
        ("PTTL b", ":4000"),
        ("TYPE a", "+string"),
        ("HSET h f v", ":1"),
    ]);
    let again = snapshot_bytes(&r.kv);
    assert_eq!(again[0], 2);
    let copy = Kv::new();
    restore_bytes(&copy, Offset(6), again).unwrap();
    assert_eq!(copy.get(b"a"), Some(b("1")));
    assert!(
        restore_bytes(&Kv::new(), Offset(4), v1_snapshot()).is_err(),
        "a snapshot of another offset is refused"
    );
}

/// Goal: damaged snapshots are refused, never loaded and never a panic. Method: every
/// truncation of a snapshot of every type, a trailing byte, and an unknown version.
#[test]
fn damaged_snapshots_are_refused() {
    let r = every_type();
    let snap = snapshot_bytes(&r.kv);
    let at = Offset(r.next);
    for cut in 0..snap.len() {
        let kv = Kv::new();
        assert!(
            restore_bytes(&kv, at, snap.slice(..cut)).is_err(),
            "cut at {cut}"
        );
    }
    let mut longer = snap.to_vec();
    longer.push(0);
    assert!(restore_bytes(&Kv::new(), at, Bytes::from(longer)).is_err());
    let mut future = snap.to_vec();
    future[0] = 3;
    assert!(restore_bytes(&Kv::new(), at, Bytes::from(future)).is_err());
}

/// Goal: a snapshot is the state at its capture, however the map changes while it is encoded,
/// and its bytes do not depend on how they are cut into chunks. Method: capture a map of every
/// type plus a 5,000-element list, then overwrite, delete, flush and refill before reading the
/// stream; restoring it (in 7-byte chunks, so the list spans hundreds) answers as the map did
/// at the capture, and its bytes equal the encoding cut into 64-byte chunks then.
#[test]
fn a_snapshot_is_the_state_at_its_capture() {
    let mut r = every_type();
    let elements: Vec<String> = (0..5000).map(|i| format!("element-{i}")).collect();
    assert!(!r
        .run(&format!("RPUSH big {}", elements.join(" ")))
        .starts_with('-'));
    let before = crate::kv::snapshot::encode_all(&r.kv.lock());
    let reads = [
        "GET s",
        "HGETALL h",
        "LRANGE l 0 -1",
        "LLEN big",
        "LINDEX big 4321",
        "SMEMBERS st",
        "ZRANGE z 0 -1 WITHSCORES",
        "DBSIZE",
    ];
    let expected: Vec<String> = reads.iter().map(|q| r.run(q)).collect();
    let at = Offset(r.next);
    let mut stream = block_on(r.kv.snapshot()).unwrap();
    for line in [
        "SET s changed",
        "HSET h f2 other",
        "RPUSH big tail",
        "DEL l",
        "ZADD z 9 d",
        "FLUSHALL",
        "SET s again",
    ] {
        assert!(!r.run(line).starts_with('-'), "{line}");
    }
    let streamed =
        block_on(raft_core::io::read_to_end(&mut *stream, u64::MAX)).expect("the stream");
    assert_eq!(
        streamed, before,
        "the capture's bytes, whatever the chunking"
    );
    let mut copy = Replica::new();
    restore_bytes(&copy.kv, at, streamed).unwrap();
    copy.next = at.0;
    let got: Vec<String> = reads.iter().map(|q| copy.run(q)).collect();
    assert_eq!(got, expected);
}
