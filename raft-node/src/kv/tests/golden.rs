//! Golden tests of what is computed at apply time (W13): each pins the exact replies and
//! state a version-3 record produces. One that fails means replicas of this build and of the
//! previous one would diverge on the same log: keep the old behaviour for old records and
//! put the new one behind a new record version (the rule in `kv::command`), then update the
//! expected text here.

use super::*;

/// Float text of `INCRBYFLOAT`, `HINCRBYFLOAT` and `ZINCRBY`: Redis's shortest round-trip
/// form, with exponents for large and small magnitudes.
#[test]
fn float_text_is_pinned() {
    let mut r = Replica::new();
    r.script(&[
        ("INCRBYFLOAT f 0.1", "0.1"),
        ("INCRBYFLOAT f 0.2", "0.30000000000000004"),
        ("INCRBYFLOAT f 1e17", "1e+17"),
        ("INCRBYFLOAT g -1.5e-7", "-1.5e-7"),
        ("INCRBYFLOAT h 3", "3"),
        ("INCRBYFLOAT h 0.5", "3.5"),
        ("HINCRBYFLOAT hf x 0.1", "0.1"),
        ("HINCRBYFLOAT hf x 0.2", "0.30000000000000004"),
        ("HINCRBYFLOAT hf y 1e300", "1e+300"),
        ("ZINCRBY z 0.1 m", "0.1"),
        ("ZINCRBY z 0.2 m", "0.30000000000000004"),
        ("ZINCRBY z 2.5e-10 n", "2.5e-10"),
        (
            "ZRANGE z 0 -1 WITHSCORES",
            "[n 2.5e-10 m 0.30000000000000004]",
        ),
    ]);
}

/// `SPOP`'s choice for a fixed offset, key and set, and the hash field order after
/// deletions (`swap_remove`: the last field takes the removed one's place).
#[test]
fn spop_and_field_order_are_pinned() {
    let mut r = Replica::new();
    r.script(&[
        ("SADD s a b c d e f g h", ":8"),
        ("SPOP s", "c"),
        ("SPOP s 3", "[a e h]"),
        ("SMEMBERS s", "[g b f d]"),
        ("HSET h f1 1 f2 2 f3 3 f4 4 f5 5", ":5"),
        ("HDEL h f2", ":1"),
        ("HSET h f6 6", ":1"),
        ("HDEL h f1 f4", ":2"),
        ("HKEYS h", "[f6 f5 f3]"),
    ]);
}

/// Glob matching inside `EXEC` (`HSCAN`/`SSCAN` with `MATCH`), evaluated where the record is
/// applied; and `TIME` inside `MULTI`, the clock of the `EXEC` record.
#[test]
fn glob_and_time_inside_exec_are_pinned() {
    let mut r = Replica::new();
    r.now_ms = 1_234_567;
    r.script(&[
        ("HSET h a1 1 b2 2 a3 3 [x] 4 a\\ 5", ":5"),
        ("SADD s ab ac b ad", ":4"),
        ("MULTI", "+OK"),
        ("HSCAN h 0 MATCH a[0-9]", "+QUEUED"),
        ("SSCAN s 0 MATCH a?", "+QUEUED"),
        ("HSCAN h 0 MATCH \\[*", "+QUEUED"),
        ("TIME", "+QUEUED"),
        (
            "EXEC",
            "[[0 [a1 1 a3 3]] [0 [ad ab ac]] [0 [[x] 4]] [1234 567000]]",
        ),
    ]);
}

/// Expiry: relative TTLs count from the record's clock, absolute ones are kept, one already
/// past deletes, reads answer by the replicated clock.
#[test]
fn expiry_is_pinned() {
    let mut r = Replica::new();
    r.now_ms = 10_000;
    r.script(&[
        ("SET a v PX 1500", "+OK"),
        ("SET b v PXAT 12000", "+OK"),
        ("SET c v PXAT 9000", "+OK"),
        ("EXISTS c", ":0"),
        ("SET d v EX 1", "+OK"),
        ("EXPIRE d 3 GT", ":1"),
        ("PTTL a", ":1500"),
        ("PEXPIRETIME d", ":13000"),
    ]);
    // A record stamped behind the clock does not move it back, and its TTLs count from the
    // replicated clock.
    r.now_ms = 5_000;
    r.script(&[("SET e v PX 100", "+OK"), ("PEXPIRETIME e", ":10100")]);
    r.now_ms = 11_500;
    r.script(&[
        ("GETEX b PX 10", "v"),
        ("EXISTS a b", ":1"),
        ("PTTL b", ":10"),
    ]);
    r.now_ms = 11_510;
    r.script(&[("PERSIST d", ":1"), ("EXISTS a b d e", ":1")]);
}
