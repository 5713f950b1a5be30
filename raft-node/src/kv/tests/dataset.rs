//! The key table's running estimate of the whole map (what `maxmemory` is compared with).

use super::*;

/// The estimate summed afresh over every key, as the running total must hold it.
fn summed(kv: &Kv) -> u64 {
    let s = kv.lock();
    s.map
        .iter()
        .map(|(k, e)| memory::usage(k.len(), e, memory::SAMPLES))
        .sum()
}

/// Goal: the running total is always the sum of every key's estimate, whatever changed the
/// keys, and a restored map carries its own. Method: a script of writes of every kind
/// (creating, growing, shrinking, emptying, expiring, renaming, flushing); after each, compare
/// the published total with a fresh sum; then snapshot and restore into a new state machine.
#[test]
fn the_running_total_is_the_sum_of_every_keys_estimate() {
    let mut r = Replica::new();
    assert_eq!(r.kv.dataset_bytes(), 0);
    for line in [
        "SET a hello",
        "SET a a-longer-value",
        "APPEND a more",
        "INCR n",
        "RPUSH l x y z",
        "LPOP l",
        "LSET l 0 a-longer-element",
        "HSET h f v g w",
        "HDEL h f",
        "SADD s m n o p q r t",
        "SPOP s 2",
        "ZADD z 1 m 2 n",
        "ZINCRBY z 5 m",
        "ZREM z m",
        "EXPIRE a 100",
        "PERSIST a",
        "SET gone v PX 1",
        "RENAME h h2",
        "DEL l",
        "MSET b 1 c 2",
        "GETDEL b",
    ] {
        r.run(line);
        assert_eq!(r.kv.dataset_bytes(), summed(&r.kv), "after {line}");
    }
    assert!(r.kv.dataset_bytes() > 0);
    r.now_ms += 10;
    r.run("SET other v");
    assert_eq!(r.kv.dataset_bytes(), summed(&r.kv), "after an expiry");
    let copy = Kv::new();
    restore_bytes(&copy, Offset(r.next), snapshot_bytes(&r.kv)).unwrap();
    assert_eq!(copy.dataset_bytes(), r.kv.dataset_bytes(), "a restored map");
    r.run("FLUSHALL");
    assert_eq!(r.kv.dataset_bytes(), 0);
}
