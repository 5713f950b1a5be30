//! WATCH decided at apply time: a watched key changed by any record at or after the watch
//! aborts the transaction, on every replica alike.

use super::*;

/// Goal: Redis's WATCH semantics on one replica. Method: scripts where the watched key is
/// untouched, written by the watcher itself, created and deleted meanwhile, or expired by the
/// clock of the EXEC record.
#[test]
fn exec_aborts_when_a_watched_key_changed() {
    let mut r = Replica::new();
    r.script(&[
        ("SET k 1", "+OK"),
        ("WATCH k", "+OK"),
        ("MULTI", "+OK"),
        ("SET k 2", "+QUEUED"),
        ("EXEC", "[+OK]"),
        // The watcher's own write counts too.
        ("WATCH k", "+OK"),
        ("SET k 3", "+OK"),
        ("MULTI", "+OK"),
        ("SET k 4", "+QUEUED"),
        ("EXEC", "nil*"),
        ("GET k", "3"),
        // An absent key that stays absent.
        ("WATCH nokey", "+OK"),
        ("MULTI", "+OK"),
        ("EXEC", "[]"),
        // An absent key created and deleted meanwhile.
        ("WATCH gone", "+OK"),
        ("SET gone 1", "+OK"),
        ("DEL gone", ":1"),
        ("MULTI", "+OK"),
        ("SET gone 2", "+QUEUED"),
        ("EXEC", "nil*"),
        ("EXISTS gone", ":0"),
        // A write to another key leaves the watch alone; UNWATCH forgets it.
        ("WATCH k", "+OK"),
        ("SET other 1", "+OK"),
        ("HSET h a 1", ":1"),
        ("MULTI", "+OK"),
        ("INCR k", "+QUEUED"),
        ("EXEC", "[:4]"),
        ("WATCH k", "+OK"),
        ("SET k 9", "+OK"),
        ("UNWATCH", "+OK"),
        ("MULTI", "+OK"),
        ("GET k", "+QUEUED"),
        ("EXEC", "[9]"),
        // A failed conditional write changes nothing, so it aborts nothing.
        ("WATCH k", "+OK"),
        ("SET k x NX", "nil"),
        ("HDEL k2 a", ":0"),
        ("MULTI", "+OK"),
        ("GET k", "+QUEUED"),
        ("EXEC", "[9]"),
    ]);
    // Expired by the EXEC record's own clock: the key changed (Redis 6.0.9 and later).
    r.script(&[
        ("SET e v PX 100", "+OK"),
        ("WATCH e", "+OK"),
        ("MULTI", "+OK"),
        ("SET e w", "+QUEUED"),
    ]);
    r.now_ms += 1_000;
    r.script(&[("EXEC", "nil*"), ("EXISTS e", ":0")]);
    assert_eq!(r.run_as("WATCH k", Proto::Resp3), "+OK\r\n");
    r.run("SET k 0");
    r.run("MULTI");
    assert_eq!(r.run_as("EXEC", Proto::Resp3), "_\r\n", "RESP3 null");
}

/// Goal: the leader and a follower decide a watched EXEC alike, also a follower that restored
/// a snapshot in between. Method: the same records applied to three state machines, one of
/// them restored from another's snapshot halfway; every response must be equal.
#[test]
fn every_replica_decides_a_watch_alike() {
    let (leader, follower, restored) = (Kv::new(), Kv::new(), Kv::new());
    let s = |k: &str, v: &str| Command::MSet {
        pairs: vec![(b(k), b(v))],
    };
    let exec = |at: u64| Command::Multi {
        ops: vec![TxOp::Write(s("a", "tx"))],
        watches: vec![(b("a"), at), (b("absent"), at)],
    };
    let records = [
        s("a", "1"),
        s("b", "1"),
        Command::Del { keys: vec![b("b")] },
        exec(3),
        exec(2),
        s("a", "2"),
        exec(5),
        exec(6),
    ];
    let mut replies = Vec::new();
    for (i, cmd) in records.iter().enumerate() {
        let at = i as u64;
        if i == 4 {
            let snap = snapshot_bytes(&leader);
            restore_bytes(&restored, Offset(4), snap).unwrap();
        }
        let x = apply(&leader, at, 10, cmd.clone());
        let y = apply(&follower, at, 10, cmd.clone());
        assert_eq!(x, y, "record {i}");
        if i >= 4 {
            assert_eq!(x, apply(&restored, at, 10, cmd.clone()), "record {i}");
        }
        replies.push(show(&String::from_utf8_lossy(&x)));
    }
    // exec(3): nothing changed at or after 3 (b's removal was at 2); exec(2) at 4: `a` was
    // written at 3; exec(5) at 6: `a` was written at 5; exec(6) at 7: nothing since 6.
    assert_eq!(replies[3], "[+OK]");
    assert_eq!(replies[4], "nil*");
    assert_eq!(replies[6], "nil*");
    assert_eq!(replies[7], "[+OK]");
}

/// Goal: a map restored from a version-1 snapshot knows no versions, so a watch taken before
/// the first version-2 record aborts everywhere, and one taken after is decided by exact
/// versions. Method: restore the pinned version-1 snapshot, apply a version-2 record at 5,
/// then transactions watching from 4 and from 6.
#[test]
fn watches_before_the_first_exact_version_abort() {
    let kv = Kv::new();
    restore_bytes(&kv, Offset(5), super::snapshot::v1_snapshot()).unwrap();
    let exec = |at: u64| Command::Multi {
        ops: vec![],
        watches: vec![(b("a"), at)],
    };
    assert_eq!(
        &apply(&kv, 5, 1_000, exec(4))[..],
        b"*-1\r\n",
        "watched before 5"
    );
    assert_eq!(
        &apply(&kv, 6, 1_000, exec(6))[..],
        b"*0\r\n",
        "watched after 5"
    );
}
