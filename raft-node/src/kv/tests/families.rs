//! The apply of every typed command, through the planner: replies, WRONGTYPE, overflow, bad
//! numbers, and the RESP3 shapes.

use super::*;

/// Goal: every hash command answers as Redis does. Method: a script of requests and replies.
#[test]
fn hash_commands_apply_as_in_redis() {
    let mut r = Replica::new();
    r.script(&[
        ("HSET h a 1 b 2", ":2"),
        ("HSET h a 3 c 4", ":1"),
        ("HGET h a", "3"),
        ("HGET h zz", "nil"),
        ("HGET nokey a", "nil"),
        ("HMGET h a zz b", "[3 nil 2]"),
        ("HGETALL h", "[a 3 b 2 c 4]"),
        ("HLEN h", ":3"),
        ("HEXISTS h a", ":1"),
        ("HEXISTS h q", ":0"),
        ("HKEYS h", "[a b c]"),
        ("HVALS h", "[3 2 4]"),
        ("HSTRLEN h c", ":1"),
        ("HSETNX h a 9", ":0"),
        ("HSETNX h d 9", ":1"),
        ("HINCRBY h a 10", ":13"),
        ("HINCRBY h n 9223372036854775807", ":9223372036854775807"),
        (
            "HINCRBY h n 1",
            "-ERR increment or decrement would overflow",
        ),
        ("HGET h n", "9223372036854775807"),
        (
            "HINCRBY h a x",
            "-ERR value is not an integer or out of range",
        ),
        ("HSET h s x", ":1"),
        ("HINCRBY h s 1", "-ERR hash value is not an integer"),
        ("HINCRBYFLOAT h f 1.5", "1.5"),
        ("HINCRBYFLOAT h f 0.25", "1.75"),
        ("HINCRBYFLOAT h s 1", "-ERR hash value is not a float"),
        (
            "HINCRBYFLOAT h f inf",
            "-ERR increment would produce NaN or Infinity",
        ),
        ("HINCRBYFLOAT h f nan", "-ERR value is not a valid float"),
        (
            "HSET h a",
            "-ERR wrong number of arguments for 'hset' command",
        ),
        (
            "HSET h a 1 b",
            "-ERR wrong number of arguments for 'hset' command",
        ),
        ("HMSET h z 1", "+OK"),
        ("HDEL h a b nope", ":2"),
        ("TYPE h", "+hash"),
        ("HSET e x 1", ":1"),
        ("HDEL e x", ":1"),
        ("EXISTS e", ":0"),
        ("HDEL e x", ":0"),
    ]);
    let scan = r.run("HSCAN h 0 COUNT 100 MATCH [cd]");
    assert!(scan == "[0 [c 4 d 9]]" || scan == "[0 [d 9 c 4]]", "{scan}");
    assert!(r.run_as("HGETALL h", Proto::Resp3).starts_with("%6\r\n"));
}

/// Goal: a command on a key of another type answers Redis's WRONGTYPE and changes nothing;
/// the commands that replace any type do.
#[test]
fn every_family_refuses_the_wrong_type() {
    let mut r = Replica::new();
    let wrong = "-WRONGTYPE Operation against a key holding the wrong kind of value";
    r.script(&[
        ("SET str v", "+OK"),
        ("HSET h a 1", ":1"),
        ("RPUSH l a", ":1"),
        ("SADD s a", ":1"),
        ("ZADD z 1 a", ":1"),
    ]);
    for line in [
        "HGET str a",
        "HSET str a 1",
        "HINCRBY l a 1",
        "LPUSH h a",
        "LRANGE str 0 -1",
        "LPOP s",
        "SADD z a",
        "SMEMBERS h",
        "SINTER s str",
        "SPOP l",
        "ZADD s 1 a",
        "ZSCORE str a",
        "ZRANGE h 0 -1",
        "ZPOPMIN l",
        "GET h",
        "INCR l",
        "APPEND s x",
        "STRLEN z",
        "GETDEL h",
        "GETEX l PERSIST",
        "INCRBYFLOAT z 1",
        "SET h x GET",
        "LMOVE str l LEFT LEFT",
        "LMOVE l str LEFT LEFT",
    ] {
        assert_eq!(r.run(line), wrong, "{line}");
    }
    r.script(&[
        ("LLEN l", ":1"),
        ("HGET h a", "1"),
        ("MGET str h", "[v nil]"),
        ("TYPE str", "+string"),
        ("TYPE l", "+list"),
        ("TYPE s", "+set"),
        ("TYPE z", "+zset"),
        ("TYPE nokey", "+none"),
        ("SET h x", "+OK"),
        ("TYPE h", "+string"),
        ("MSET l 1", "+OK"),
        ("TYPE l", "+string"),
    ]);
}

#[test]
fn list_commands_apply_as_in_redis() {
    let mut r = Replica::new();
    r.script(&[
        ("RPUSH l a b c", ":3"),
        ("LPUSH l z", ":4"),
        ("LRANGE l 0 -1", "[z a b c]"),
        ("LRANGE l -2 100", "[b c]"),
        ("LRANGE l 3 1", "[]"),
        ("LLEN l", ":4"),
        ("LINDEX l -1", "c"),
        ("LINDEX l 9", "nil"),
        ("LSET l 0 y", "+OK"),
        ("LSET l 9 y", "-ERR index out of range"),
        ("LSET nol 0 y", "-ERR no such key"),
        ("RPUSH l a a", ":6"),
        ("LREM l -2 a", ":2"),
        ("LRANGE l 0 -1", "[y a b c]"),
        ("LREM l 0 q", ":0"),
        ("LTRIM l 1 2", "+OK"),
        ("LRANGE l 0 -1", "[a b]"),
        ("LPOP l", "a"),
        ("RPOP l 5", "[b]"),
        ("EXISTS l", ":0"),
        ("LPOP l", "nil"),
        ("LPOP l 2", "nil*"),
        ("LPOP l -1", "-ERR value is out of range, must be positive"),
        ("LPUSHX nol a", ":0"),
        (
            "LRANGE l x 1",
            "-ERR value is not an integer or out of range",
        ),
        ("RPUSH src 1 2 3", ":3"),
        ("LMOVE src dst RIGHT LEFT", "3"),
        ("LMOVE src dst LEFT LEFT", "1"),
        ("LRANGE dst 0 -1", "[1 3]"),
        ("LMOVE src dst UP LEFT", "-ERR syntax error"),
        ("RPOPLPUSH src src", "2"),
        ("LMOVE nol dst LEFT LEFT", "nil"),
        ("RPUSH t 1 2 3 4", ":4"),
        ("LTRIM t 5 9", "+OK"),
        ("EXISTS t", ":0"),
        ("TYPE dst", "+list"),
    ]);
}

#[test]
fn set_commands_apply_as_in_redis() {
    let mut r = Replica::new();
    r.script(&[
        ("SADD s a b c", ":3"),
        ("SADD s a d", ":1"),
        ("SCARD s", ":4"),
        ("SISMEMBER s a", ":1"),
        ("SMISMEMBER s a q", "[:1 :0]"),
        ("SMEMBERS s", "[a b c d]"),
        ("SREM s b q", ":1"),
        // The member order is the one every replica builds: the last moves into the hole.
        ("SMEMBERS s", "[a d c]"),
        ("SADD t c d e", ":3"),
        ("SINTER s t", "[d c]"),
        ("SUNION s t", "[a d c e]"),
        ("SDIFF s t", "[a]"),
        ("SINTER s nokey", "[]"),
        ("SDIFF nokey s", "[]"),
        ("SPOP s 0", "[]"),
        ("SPOP s -1", "-ERR value is out of range, must be positive"),
    ]);
    let popped = r.run("SPOP s 10");
    for m in ["a", "c", "d"] {
        assert!(popped.contains(m), "{popped}");
    }
    r.script(&[("EXISTS s", ":0"), ("SPOP s", "nil"), ("SPOP s 1", "[]")]);
    assert!(r.run_as("SMEMBERS t", Proto::Resp3).starts_with("~3\r\n"));
    let scan = r.run("SSCAN t 0 MATCH e");
    assert_eq!(scan, "[0 [e]]");
}

/// Goal: SPOP takes the same members on every replica. Method: two replicas apply the same
/// records and must answer every SPOP alike; the picks differ between offsets (they are not
/// always the first member).
#[test]
fn spop_is_the_same_on_every_replica() {
    let (mut a, mut b) = (Replica::new(), Replica::new());
    let members: Vec<String> = (0..50).map(|i| format!("m{i}")).collect();
    let add = format!("SADD s {}", members.join(" "));
    let mut picks = std::collections::BTreeSet::new();
    for r in [&mut a, &mut b] {
        assert_eq!(r.run(&add), ":50");
    }
    for _ in 0..20 {
        let (x, y) = (a.run("SPOP s"), b.run("SPOP s"));
        assert_eq!(x, y);
        picks.insert(x);
    }
    assert_eq!(a.run("SPOP s 5"), b.run("SPOP s 5"));
    assert_eq!(a.run("SMEMBERS s"), b.run("SMEMBERS s"));
    let run_of = |r: std::ops::Range<usize>| r.map(|i| format!("m{i}")).collect();
    let (firsts, lasts): (std::collections::BTreeSet<String>, _) = (run_of(0..20), run_of(30..50));
    assert!(
        picks != firsts && picks != lasts,
        "not simply an end of the set: {picks:?}"
    );
}

#[test]
fn sorted_set_commands_apply_as_in_redis() {
    let mut r = Replica::new();
    r.script(&[
        ("ZADD z 1 a 2 b 3 c", ":3"),
        ("ZADD z 1.5 a", ":0"),
        ("ZSCORE z a", "1.5"),
        ("ZADD z CH 2 a", ":1"),
        ("ZADD z NX 5 a", ":0"),
        ("ZSCORE z a", "2"),
        ("ZADD z XX 9 new", ":0"),
        ("ZSCORE z new", "nil"),
        ("ZADD z GT 1 a", ":0"),
        ("ZADD z GT CH 7 a", ":1"),
        ("ZADD z LT CH 0 a", ":1"),
        ("ZADD z INCR 5 a", "5"),
        ("ZADD z NX INCR 1 a", "nil"),
        (
            "ZADD z NX XX 1 a",
            "-ERR XX and NX options at the same time are not compatible",
        ),
        (
            "ZADD z GT LT 1 a",
            "-ERR GT, LT, and/or NX options at the same time are not compatible",
        ),
        (
            "ZADD z INCR 1 a 2 b",
            "-ERR INCR option supports a single increment-element pair",
        ),
        ("ZADD z nan a", "-ERR value is not a valid float"),
        ("ZADD z 1 a 2", "-ERR syntax error"),
        ("ZINCRBY z 2 b", "4"),
        ("ZINCRBY z x b", "-ERR value is not a valid float"),
        ("ZADD z inf i -inf j", ":2"),
        ("ZINCRBY z -inf i", "-ERR resulting score is not a number (NaN)"),
        ("ZCARD z", ":5"),
        ("ZRANGE z 0 -1", "[j c b a i]"),
        ("ZRANGE z 0 1 WITHSCORES", "[j -inf c 3]"),
        ("ZRANGE z 0 0 REV", "[i]"),
        ("ZREVRANGE z 0 1", "[i a]"),
        ("ZRANGE z (3 5 BYSCORE", "[b a]"),
        ("ZRANGE z 5 (3 BYSCORE REV", "[a b]"),
        ("ZRANGE z -inf +inf BYSCORE LIMIT 1 2", "[c b]"),
        ("ZRANGEBYSCORE z 3 4 WITHSCORES", "[c 3 b 4]"),
        ("ZREVRANGEBYSCORE z +inf 4", "[i a b]"),
        ("ZREVRANGEBYSCORE z (inf -inf LIMIT 0 2", "[a b]"),
        (
            "ZRANGE z 0 1 LIMIT 0 1",
            "-ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
        ),
        ("ZRANGE z x 1 BYSCORE", "-ERR min or max is not a float"),
        ("ZRANGE z x 1", "-ERR value is not an integer or out of range"),
        ("ZRANK z b", ":2"),
        ("ZREVRANK z b", ":2"),
        ("ZRANK z j", ":0"),
        ("ZRANK z nope", "nil"),
        ("ZRANK z b WITHSCORE", "[:2 4]"),
        ("ZCOUNT z 3 (5", ":2"),
        ("ZCOUNT z -inf +inf", ":5"),
        ("ZMSCORE z a nope", "[5 nil]"),
        ("ZREM z j i nope", ":2"),
        ("ZPOPMIN z", "[c 3]"),
        ("ZPOPMAX z 5", "[a 5 b 4]"),
        ("EXISTS z", ":0"),
        ("ZPOPMIN z", "[]"),
        ("ZPOPMIN z 1", "[]"),
        ("ZADD lx 0 a 0 b 0 c 0 d", ":4"),
        ("ZRANGEBYLEX lx [b (d", "[b c]"),
        ("ZRANGE lx + - BYLEX REV LIMIT 0 2", "[d c]"),
        ("ZRANGEBYLEX lx b c", "-ERR min or max not valid string range item"),
        (
            "ZRANGE lx - + BYLEX WITHSCORES",
            "-ERR syntax error, WITHSCORES not supported in combination with BYLEX",
        ),
        ("ZADD zz -0 m", ":1"),
        ("ZSCORE zz m", "0"),
        ("ZADD zz 1e20 n", ":1"),
        ("ZSCORE zz n", "1e+20"),
    ]);
    assert_eq!(r.run_as("ZSCORE zz m", Proto::Resp3), ",0\r\n");
    assert_eq!(
        r.run_as("ZRANGE lx 0 1 WITHSCORES", Proto::Resp3),
        "*2\r\n*2\r\n$1\r\na\r\n,0\r\n*2\r\n$1\r\nb\r\n,0\r\n"
    );
    // A pop with a count is pairs in RESP3, written by the state machine and re-encoded.
    let response = r.apply(&Command::ZSetOp(ZSetCmd::Pop {
        key: b("lx"),
        max: false,
        count: Some(1),
    }));
    assert_eq!(
        as_proto(&response, Proto::Resp3),
        "*1\r\n*2\r\n$1\r\na\r\n,0\r\n"
    );
    assert_eq!(
        as_proto(&response, Proto::Resp2),
        "*2\r\n$1\r\na\r\n$1\r\n0\r\n"
    );
    assert_eq!(
        show(&r.run_as("ZSCAN lx 0 MATCH b", Proto::Resp2)),
        "[0 [b 0]]"
    );
}

/// Goal: RENAME, FLUSHALL, GETEX and INCRBYFLOAT as Redis has them, and expiry on every type.
#[test]
fn key_commands_and_expiry_of_every_type() {
    let mut r = Replica::new();
    r.script(&[
        ("SET f 10.5", "+OK"),
        ("INCRBYFLOAT f 0.1", "10.6"),
        ("INCRBYFLOAT f x", "-ERR value is not a valid float"),
        ("SET s abc", "+OK"),
        ("INCRBYFLOAT s 1", "-ERR value is not a valid float"),
        ("SET big 1e308", "+OK"),
        (
            "INCRBYFLOAT big 1e308",
            "-ERR increment would produce NaN or Infinity",
        ),
        ("RENAME f g", "+OK"),
        ("GET g", "10.6"),
        ("GET f", "nil"),
        ("RENAME nokey x", "-ERR no such key"),
        ("RENAMENX g s", ":0"),
        ("RENAMENX g g2", ":1"),
        ("SET t v EX 100", "+OK"),
        ("RENAME t t2", "+OK"),
        ("PTTL t2", ":100000"),
        ("GETEX t2 PERSIST", "v"),
        ("PTTL t2", ":-1"),
        ("GETEX t2 PX 500", "v"),
        ("PTTL t2", ":500"),
        ("PEXPIRETIME t2", ":1500"),
        ("EXPIRETIME t2", ":2"),
        ("EXPIRETIME g2", ":-1"),
        ("EXPIRETIME nokey", ":-2"),
        ("GETEX t2", "v"),
        (
            "GETEX t2 EX 0",
            "-ERR invalid expire time in 'getex' command",
        ),
        ("GETEX nokey EX 5", "nil"),
    ]);
    // Every type expires, on the replicated clock.
    r.script(&[
        ("HSET h a 1", ":1"),
        ("RPUSH l a", ":1"),
        ("SADD st a", ":1"),
        ("ZADD z 1 a", ":1"),
        ("EXPIRE h 1", ":1"),
        ("EXPIRE l 1", ":1"),
        ("PEXPIRE st 1000", ":1"),
        ("EXPIRE z 1", ":1"),
        ("TTL z", ":1"),
    ]);
    r.now_ms = 2_000;
    r.script(&[
        ("SET tick 1", "+OK"),
        ("EXISTS h l st z", ":0"),
        ("LPUSH l b", ":1"),
        ("TTL l", ":-1"),
        ("FLUSHALL", "+OK"),
        ("DBSIZE", ":0"),
        ("FLUSHDB ASYNC", "+OK"),
        ("FLUSHALL NOW", "-ERR syntax error"),
    ]);
}

/// Goal: keys, fields and members are binary-safe. Method: bytes 0, CR, LF and 0xff inside.
#[test]
fn binary_keys_fields_and_members() {
    let kv = Kv::new();
    let key = Bytes::from_static(b"k\0\r\n\xff");
    let member = Bytes::from_static(b"\0m\r\n");
    let cmds = [
        Command::HashOp(HashCmd::Set {
            key: key.clone(),
            pairs: vec![(member.clone(), member.clone())],
            if_absent: false,
            reply_ok: false,
        }),
        Command::Rename {
            src: key.clone(),
            dst: member.clone(),
            if_absent: false,
        },
    ];
    for (i, c) in cmds.into_iter().enumerate() {
        apply(&kv, i as u64, 1, c);
    }
    let got = kv.read(&TxRead::Hash(HashRead::Get(member.clone(), member.clone())));
    assert_eq!(got, Reply::Bulk(member));
}
