//! End-to-end tests of the typed values and of WATCH: every family through the `redis` crate
//! in RESP2 and RESP3 on the leader and on a follower, replicas agreeing value for value,
//! WATCH conflicts raised on another node, and expiry across a leader change.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use redis::Connection;

use crate::harness::{self, Cluster, Value};

fn q<T: redis::FromRedisValue>(con: &mut Connection, args: &[&str]) -> T {
    let mut c = redis::cmd(args[0]);
    for a in &args[1..] {
        c.arg(*a);
    }
    c.query(con).unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

fn q_err(con: &mut Connection, args: &[&str]) -> String {
    let mut c = redis::cmd(args[0]);
    for a in &args[1..] {
        c.arg(*a);
    }
    match c.query::<redis::Value>(con) {
        Err(e) => e.to_string(),
        Ok(v) => panic!("{args:?} answered {v:?}, not an error"),
    }
}

/// Runs every family's commands on keys under `p` and checks the typed replies.
fn exercise_every_family(con: &mut Connection, p: &str) {
    let k = |s: &str| format!("{p}:{s}");
    let (h, l, l2, s, t, z, f) = (k("h"), k("l"), k("l2"), k("s"), k("t"), k("z"), k("f"));
    // Hashes.
    assert_eq!(q::<i64>(con, &["HSET", &h, "a", "1", "b", "2"]), 2);
    let all: HashMap<String, String> = q(con, &["HGETALL", &h]);
    assert_eq!(
        all,
        HashMap::from([("a".into(), "1".into()), ("b".into(), "2".into())])
    );
    assert_eq!(q::<i64>(con, &["HINCRBY", &h, "a", "5"]), 6);
    assert_eq!(q::<f64>(con, &["HINCRBYFLOAT", &h, "x", "1.5"]), 1.5);
    let got: Vec<Option<String>> = q(con, &["HMGET", &h, "a", "zz"]);
    assert_eq!(got, vec![Some("6".into()), None]);
    assert!(q::<bool>(con, &["HEXISTS", &h, "a"]));
    assert_eq!(q::<i64>(con, &["HSETNX", &h, "a", "9"]), 0);
    assert_eq!(q::<i64>(con, &["HDEL", &h, "b"]), 1);
    assert_eq!(q::<i64>(con, &["HLEN", &h]), 2);
    let keys: BTreeSet<String> = q(con, &["HKEYS", &h]);
    assert_eq!(keys, BTreeSet::from(["a".into(), "x".into()]));
    let vals: BTreeSet<String> = q(con, &["HVALS", &h]);
    assert_eq!(vals, BTreeSet::from(["6".into(), "1.5".into()]));
    let (cursor, found): (u64, Vec<String>) = q(con, &["HSCAN", &h, "0", "MATCH", "a"]);
    assert_eq!((cursor, found), (0, vec!["a".into(), "6".into()]));
    // Lists.
    assert_eq!(q::<i64>(con, &["RPUSH", &l, "a", "b", "c"]), 3);
    assert_eq!(q::<i64>(con, &["LPUSH", &l, "z"]), 4);
    assert_eq!(
        q::<Vec<String>>(con, &["LRANGE", &l, "0", "-1"]),
        ["z", "a", "b", "c"]
    );
    assert_eq!(q::<Vec<String>>(con, &["LPOP", &l, "2"]), ["z", "a"]);
    assert_eq!(q::<Option<String>>(con, &["RPOP", &l]), Some("c".into()));
    assert_eq!(
        q::<Option<Vec<String>>>(con, &["LPOP", &k("none"), "2"]),
        None
    );
    assert_eq!(q::<i64>(con, &["LLEN", &l]), 1);
    assert_eq!(q::<String>(con, &["LINDEX", &l, "0"]), "b");
    assert_eq!(q::<String>(con, &["LSET", &l, "0", "x"]), "OK");
    assert_eq!(q::<String>(con, &["LMOVE", &l, &l2, "LEFT", "RIGHT"]), "x");
    assert_eq!(q::<i64>(con, &["EXISTS", &l]), 0);
    assert_eq!(q::<i64>(con, &["RPUSH", &l2, "y", "x", "y"]), 4);
    assert_eq!(q::<i64>(con, &["LREM", &l2, "0", "y"]), 2);
    assert_eq!(q::<String>(con, &["LTRIM", &l2, "0", "0"]), "OK");
    assert_eq!(q::<Vec<String>>(con, &["LRANGE", &l2, "0", "-1"]), ["x"]);
    // Sets.
    assert_eq!(q::<i64>(con, &["SADD", &s, "a", "b", "c"]), 3);
    let members: HashSet<String> = q(con, &["SMEMBERS", &s]);
    assert_eq!(members, HashSet::from(["a".into(), "b".into(), "c".into()]));
    assert!(q::<bool>(con, &["SISMEMBER", &s, "a"]));
    assert_eq!(q::<Vec<i64>>(con, &["SMISMEMBER", &s, "a", "q"]), [1, 0]);
    assert_eq!(q::<i64>(con, &["SADD", &t, "b", "c", "d"]), 3);
    let inter: BTreeSet<String> = q(con, &["SINTER", &s, &t]);
    assert_eq!(inter, BTreeSet::from(["b".into(), "c".into()]));
    assert_eq!(q::<HashSet<String>>(con, &["SUNION", &s, &t]).len(), 4);
    assert_eq!(q::<Vec<String>>(con, &["SDIFF", &s, &t]), ["a"]);
    let popped: String = q(con, &["SPOP", &s]);
    assert!(members.contains(&popped), "{popped}");
    assert_eq!(q::<i64>(con, &["SCARD", &s]), 2);
    let (cursor, found): (u64, Vec<String>) = q(con, &["SSCAN", &t, "0", "COUNT", "100"]);
    assert_eq!((cursor, found.len()), (0, 3));
    // Sorted sets.
    assert_eq!(
        q::<i64>(con, &["ZADD", &z, "1", "a", "2", "b", "3", "c"]),
        3
    );
    assert_eq!(q::<Option<f64>>(con, &["ZSCORE", &z, "b"]), Some(2.0));
    assert_eq!(q::<f64>(con, &["ZINCRBY", &z, "10", "a"]), 11.0);
    assert_eq!(
        q::<Option<f64>>(con, &["ZADD", &z, "NX", "INCR", "1", "a"]),
        None
    );
    assert_eq!(
        q::<i64>(con, &["ZADD", &z, "GT", "CH", "20", "a", "0", "b"]),
        1
    );
    assert_eq!(
        q::<Vec<String>>(con, &["ZRANGE", &z, "0", "-1"]),
        ["b", "c", "a"]
    );
    let scored: Vec<(String, f64)> = q(con, &["ZRANGE", &z, "0", "-1", "WITHSCORES"]);
    assert_eq!(
        scored,
        [("b".into(), 2.0), ("c".into(), 3.0), ("a".into(), 20.0)]
    );
    let by_score: Vec<String> = q(con, &["ZRANGEBYSCORE", &z, "(2", "+inf", "LIMIT", "0", "1"]);
    assert_eq!(by_score, ["c"]);
    let rev: Vec<String> = q(con, &["ZRANGE", &z, "+inf", "3", "BYSCORE", "REV"]);
    assert_eq!(rev, ["a", "c"]);
    assert_eq!(q::<Option<i64>>(con, &["ZRANK", &z, "a"]), Some(2));
    assert_eq!(q::<i64>(con, &["ZCOUNT", &z, "-inf", "+inf"]), 3);
    assert_eq!(q::<(String, f64)>(con, &["ZPOPMIN", &z]), ("b".into(), 2.0));
    let top: Vec<(String, f64)> = q(con, &["ZPOPMAX", &z, "1"]);
    assert_eq!(top, [("a".into(), 20.0)]);
    assert_eq!(q::<i64>(con, &["ZCARD", &z]), 1);
    let (cursor, found): (u64, Vec<String>) = q(con, &["ZSCAN", &z, "0"]);
    assert_eq!((cursor, found), (0, vec!["c".into(), "3".into()]));
    // Keys of every type.
    for (key, ty) in [
        (&h, "hash"),
        (&l2, "list"),
        (&s, "set"),
        (&z, "zset"),
        (&l, "none"),
    ] {
        assert_eq!(q::<String>(con, &["TYPE", key]), ty);
    }
    assert!(q_err(con, &["GET", &h]).contains("WRONGTYPE"));
    assert!(q_err(con, &["ZADD", &z, "nan", "m"]).contains("not a valid float"));
    assert!(q_err(con, &["HINCRBY", &h, "a", "9223372036854775807"]).contains("overflow"));
    assert_eq!(q::<f64>(con, &["INCRBYFLOAT", &f, "2.5"]), 2.5);
    assert_eq!(q::<String>(con, &["RENAME", &f, &k("f2")]), "OK");
    assert_eq!(q::<String>(con, &["GETEX", &k("f2"), "EX", "100"]), "2.5");
    assert!((99..=100).contains(&q::<i64>(con, &["TTL", &k("f2")])));
}

/// What a key holds, read on one node as a comparable text (sets sorted).
fn snapshot_of(con: &mut Connection, key: &str) -> String {
    let ty: String = q(con, &["TYPE", key]);
    let body = match ty.as_str() {
        "string" => q::<String>(con, &["GET", key]),
        "hash" => format!(
            "{:?}",
            q::<BTreeMap<String, String>>(con, &["HGETALL", key])
        ),
        "list" => format!("{:?}", q::<Vec<String>>(con, &["LRANGE", key, "0", "-1"])),
        "set" => format!("{:?}", q::<BTreeSet<String>>(con, &["SMEMBERS", key])),
        "zset" => format!(
            "{:?}",
            q::<Vec<(String, f64)>>(con, &["ZRANGE", key, "0", "-1", "WITHSCORES"])
        ),
        other => other.to_string(),
    };
    let at: i64 = q(con, &["PEXPIRETIME", key]);
    format!("{ty} {body} {at}")
}

/// Goal: every typed family works as Redis's on the leader and through a follower, in RESP2
/// and in RESP3, and every replica ends with the same values (the SPOPs included). Method:
/// three nodes; the same script on each of the four (node, protocol) pairs on keys of its
/// own; then every key is read on every node (linearizably) and compared.
#[test]
fn every_family_on_the_leader_and_a_follower_in_resp2_and_resp3() {
    let cluster = Cluster::start(3, "");
    let leader = cluster.wait_for_leader();
    cluster.wait_for_writes_everywhere();
    let follower = cluster.ids().into_iter().find(|i| *i != leader).unwrap();
    for (id, role) in [(leader, "leader"), (follower, "follower")] {
        let port = cluster.port(id);
        exercise_every_family(&mut harness::redis_connect(port), &format!("{role}-2"));
        exercise_every_family(
            &mut harness::redis_connect_resp3(port),
            &format!("{role}-3"),
        );
    }
    let mut first = cluster.redis(leader);
    let keys: BTreeSet<String> = q(&mut first, &["KEYS", "*"]);
    assert_eq!(keys.len(), 4 * 6, "{keys:?}");
    let want: Vec<String> = keys.iter().map(|k| snapshot_of(&mut first, k)).collect();
    for id in cluster.ids() {
        let mut con = cluster.redis(id);
        let got: Vec<String> = keys.iter().map(|k| snapshot_of(&mut con, k)).collect();
        assert_eq!(got, want, "node {id} holds the same values");
        let (_, hashes): (String, Vec<String>) =
            q(&mut con, &["SCAN", "0", "COUNT", "1000", "TYPE", "hash"]);
        assert_eq!(hashes.len(), 4, "SCAN's TYPE filter: {hashes:?}");
    }
}

/// Goal: a write on another node between WATCH and EXEC aborts the transaction (nil), on the
/// follower that runs it as on every replica, and an untouched watch lets it through. Method:
/// three nodes; a RESP2 client on one follower and a RESP3 `redis` connection on the other
/// watch a key, a write to it goes through the leader (or the other follower), then each
/// EXECs; every node must hold the conflicting write. The same without a conflict applies.
#[test]
fn a_write_on_another_node_aborts_a_watched_exec() {
    let cluster = Cluster::start(3, "");
    let leader = cluster.wait_for_leader();
    cluster.wait_for_writes_everywhere();
    let followers: Vec<u32> = cluster.ids().into_iter().filter(|i| *i != leader).collect();
    let mut l = cluster.client(leader);
    let mut a = cluster.client(followers[0]);
    assert_eq!(a.cmd(&["SET", "w", "0"]), Value::ok());
    assert_eq!(a.cmd(&["WATCH", "w", "absent"]), Value::ok());
    assert_eq!(a.cmd(&["GET", "w"]), Value::bulk("0"));
    assert_eq!(l.cmd(&["SET", "w", "leader"]), Value::ok());
    assert_eq!(a.cmd(&["MULTI"]), Value::ok());
    assert_eq!(a.cmd(&["SET", "w", "mine"]), Value::Simple("QUEUED".into()));
    assert_eq!(
        a.cmd(&["EXEC"]),
        Value::NilArray,
        "aborted by the leader's write"
    );
    for id in cluster.ids() {
        assert_eq!(cluster.client(id).cmd(&["GET", "w"]), Value::bulk("leader"));
    }
    // No conflict: the transaction applies.
    assert_eq!(a.cmd(&["WATCH", "w"]), Value::ok());
    assert_eq!(a.cmd(&["MULTI"]), Value::ok());
    assert_eq!(
        a.cmd(&["HSET", "wh", "f", "1"]),
        Value::Simple("QUEUED".into())
    );
    assert_eq!(a.cmd(&["SET", "w", "mine"]), Value::Simple("QUEUED".into()));
    assert_eq!(
        a.cmd(&["EXEC"]),
        Value::Array(vec![Value::Int(1), Value::ok()])
    );
    // RESP3 through the other follower; the conflicting write comes from the first follower.
    let mut b = harness::redis_connect_resp3(cluster.port(followers[1]));
    assert_eq!(q::<String>(&mut b, &["WATCH", "wh"]), "OK");
    assert_eq!(a.cmd(&["HSET", "wh", "f", "2"]), Value::Int(0));
    assert_eq!(q::<String>(&mut b, &["MULTI"]), "OK");
    assert_eq!(q::<String>(&mut b, &["HSET", "wh", "f", "3"]), "QUEUED");
    assert_eq!(q::<redis::Value>(&mut b, &["EXEC"]), redis::Value::Nil);
    for id in cluster.ids() {
        assert_eq!(
            cluster.client(id).cmd(&["HGET", "wh", "f"]),
            Value::bulk("2")
        );
    }
    // The RESP3 reply of an applied EXEC keeps its types (a map inside the array).
    assert_eq!(q::<String>(&mut b, &["WATCH", "wh"]), "OK");
    assert_eq!(q::<String>(&mut b, &["MULTI"]), "OK");
    assert_eq!(q::<String>(&mut b, &["HGETALL", "wh"]), "QUEUED");
    match q::<redis::Value>(&mut b, &["EXEC"]) {
        redis::Value::Array(items) => {
            assert!(matches!(items[0], redis::Value::Map(_)), "{items:?}")
        }
        other => panic!("EXEC: {other:?}"),
    }
}

/// Goal: WATCH/EXEC loops on two nodes are serializable: concurrent read-modify-write
/// increments lose none. Method: two threads, one on the leader and one on a follower, each
/// add 1 to a counter 25 times with WATCH, GET, MULTI, SET, EXEC, retrying an aborted EXEC
/// (at most 200 attempts each); the counter must end at 50 on every node, and at least one
/// EXEC must have been aborted or none raced.
#[test]
fn watch_exec_increments_from_two_nodes_lose_nothing() {
    let cluster = Cluster::start(3, "");
    let leader = cluster.wait_for_leader();
    cluster.wait_for_writes_everywhere();
    let follower = cluster.ids().into_iter().find(|i| *i != leader).unwrap();
    assert_eq!(
        cluster.client(leader).cmd(&["SET", "ctr", "0"]),
        Value::ok()
    );
    let workers: Vec<_> = [leader, follower]
        .into_iter()
        .map(|id| {
            let port = cluster.port(id);
            std::thread::spawn(move || {
                let mut c = harness::Client::connect(port).unwrap();
                let (mut done, mut aborted) = (0, 0);
                for _ in 0..200 {
                    if done == 25 {
                        break;
                    }
                    assert_eq!(c.cmd(&["WATCH", "ctr"]), Value::ok());
                    let n: i64 = c.cmd(&["GET", "ctr"]).text().parse().unwrap();
                    assert_eq!(c.cmd(&["MULTI"]), Value::ok());
                    c.cmd(&["SET", "ctr", &(n + 1).to_string()]);
                    match c.cmd(&["EXEC"]) {
                        Value::NilArray => aborted += 1,
                        Value::Array(r) if r == vec![Value::ok()] => done += 1,
                        other => panic!("EXEC: {other:?}"),
                    }
                }
                (done, aborted)
            })
        })
        .collect();
    let results: Vec<(i32, i32)> = workers.into_iter().map(|w| w.join().unwrap()).collect();
    assert!(results.iter().all(|(done, _)| *done == 25), "{results:?}");
    for id in cluster.ids() {
        assert_eq!(cluster.client(id).cmd(&["GET", "ctr"]), Value::bulk("50"));
    }
    eprintln!("increments done and aborted per node: {results:?}");
}

/// Goal: expiry set with EXPIRE is the same absolute time on every replica, also after a
/// leader change, and a short one expires everywhere under the new leader. Method: three
/// nodes; EXPIRE (through a follower) on a hash and PEXPIRE on a list; PEXPIRETIME must be
/// equal on every node; RAFT TRANSFER to the other follower; PEXPIRETIME again equal and
/// unchanged on every node, and the list gone everywhere once its time passes.
#[test]
fn expiry_is_identical_on_every_replica_after_a_leader_change() {
    let cluster = Cluster::start(3, "");
    let leader = cluster.wait_for_leader();
    cluster.wait_for_writes_everywhere();
    let followers: Vec<u32> = cluster.ids().into_iter().filter(|i| *i != leader).collect();
    let mut f = cluster.client(followers[0]);
    assert_eq!(f.cmd(&["HSET", "eh", "a", "1"]), Value::Int(1));
    assert_eq!(f.cmd(&["RPUSH", "el", "x"]), Value::Int(1));
    assert_eq!(f.cmd(&["EXPIRE", "eh", "100"]), Value::Int(1));
    assert_eq!(f.cmd(&["PEXPIRE", "el", "1500"]), Value::Int(1));
    let times = || -> Vec<Value> {
        cluster
            .ids()
            .into_iter()
            .map(|id| cluster.client(id).cmd(&["PEXPIRETIME", "eh"]))
            .collect()
    };
    let before = times();
    assert!(matches!(before[0], Value::Int(t) if t > 0), "{before:?}");
    assert!(before.iter().all(|t| *t == before[0]), "{before:?}");
    let epoch = cluster.status_u64(leader, "epoch");
    let target = followers[1];
    let reply = cluster
        .client(leader)
        .cmd(&["RAFT", "TRANSFER", &target.to_string()]);
    assert_eq!(reply, Value::ok());
    harness::wait_until("the new leader", || {
        cluster.status(target).is_some_and(|st| {
            st.get("role").is_some_and(|r| r == "leader")
                && st.get("epoch").and_then(|e| e.parse::<u64>().ok()) > Some(epoch)
        })
    });
    assert_eq!(
        times(),
        before,
        "the same expiry on every node after the change"
    );
    for id in cluster.ids() {
        let mut c = cluster.client(id);
        harness::wait_until("the list expires on every node", || {
            c.cmd(&["EXISTS", "el"]) == Value::Int(0)
        });
        assert!(matches!(c.cmd(&["TTL", "eh"]), Value::Int(t) if (90..=100).contains(&t)));
    }
    // A write under the new leader expires the list in the replicated map too.
    assert_eq!(
        cluster.client(target).cmd(&["SET", "tick", "1"]),
        Value::ok()
    );
    for id in cluster.ids() {
        let mut c = cluster.client(id);
        assert_eq!(c.cmd(&["READMODE", "sequential"]), Value::ok());
        harness::wait_until("the write reaches every node", || {
            c.cmd(&["GET", "tick"]) == Value::bulk("1")
        });
        assert_eq!(c.cmd(&["DBSIZE"]), Value::Int(2));
    }
}

/// What one WATCH/EXEC increment loop saw.
#[derive(Debug, Default)]
struct Increments {
    done: usize,
    aborted: usize,
    unknown: usize,
    refused: usize,
}

/// Adds 1 to `ctr` `target` times through `port` with WATCH, GET, MULTI, SET, RPUSH, EXEC,
/// retrying aborted and refused transactions, at most 600 attempts. `progress` counts the
/// increments done by every loop.
fn increment_loop(port: u16, target: usize, progress: Arc<AtomicUsize>) -> Increments {
    let mut c = harness::Client::connect(port).unwrap();
    let mut seen = Increments::default();
    for _ in 0..600 {
        if seen.done == target {
            break;
        }
        // Without a recorded watch the transaction must not run: a refused WATCH or GET
        // (no leader for the read barrier) starts over.
        if c.cmd(&["WATCH", "ctr"]) != Value::ok() {
            seen.refused += 1;
            std::thread::sleep(std::time::Duration::from_millis(50));
            continue;
        }
        let n: i64 = match c.cmd(&["GET", "ctr"]) {
            Value::Bulk(b) => String::from_utf8(b).unwrap().parse().unwrap(),
            _ => {
                assert_eq!(c.cmd(&["UNWATCH"]), Value::ok());
                seen.refused += 1;
                std::thread::sleep(std::time::Duration::from_millis(50));
                continue;
            }
        };
        let next = (n + 1).to_string();
        assert_eq!(c.cmd(&["MULTI"]), Value::ok());
        c.cmd(&["SET", "ctr", &next]);
        c.cmd(&["RPUSH", "hist", &next]);
        match c.cmd(&["EXEC"]) {
            Value::NilArray => seen.aborted += 1,
            Value::Array(r) if r.len() == 2 && r[0] == Value::ok() => {
                seen.done += 1;
                progress.fetch_add(1, Ordering::Relaxed);
            }
            // Not applied, and never will be.
            e if e.is_error("TRYAGAIN") => seen.refused += 1,
            // May be applied, now or later: WATCH keeps the history serial either way.
            e if e.is_error("UNKNOWN") || e.is_error("TIMEOUT") => seen.unknown += 1,
            other => panic!("EXEC: {other:?}"),
        }
    }
    seen
}

/// Goal: WATCH/EXEC read-modify-write stays serializable across a crash of the leader.
/// Method: three nodes; a loop on each follower increments a counter with WATCH and, in the
/// same transaction, appends the new value to a history list; once some increments are done
/// the leader is SIGKILLed, and restarted once another leads. Each loop must reach its 15
/// increments; the history must then be exactly 1, 2, ... up to the counter (no lost or
/// doubled increment), the counter between the increments acknowledged and those plus the
/// ones whose outcome was unknown, and every node must read the same counter.
#[test]
fn watch_exec_stays_serializable_across_a_leader_crash() {
    let mut cluster = Cluster::start(3, "");
    let leader = cluster.wait_for_leader();
    cluster.wait_for_writes_everywhere();
    let followers: Vec<u32> = cluster.ids().into_iter().filter(|i| *i != leader).collect();
    assert_eq!(
        cluster.client(leader).cmd(&["SET", "ctr", "0"]),
        Value::ok()
    );
    let progress = Arc::new(AtomicUsize::new(0));
    let loops: Vec<_> = followers
        .iter()
        .map(|id| {
            let (port, progress) = (cluster.port(*id), progress.clone());
            std::thread::spawn(move || increment_loop(port, 15, progress))
        })
        .collect();
    harness::wait_until("a few increments", || progress.load(Ordering::Relaxed) >= 6);
    cluster.kill(leader);
    let new_leader = cluster.wait_for_leader();
    assert_ne!(new_leader, leader);
    cluster.restart_all();
    let seen: Vec<Increments> = loops.into_iter().map(|l| l.join().unwrap()).collect();
    eprintln!("increment loops: {seen:?}");
    assert!(seen.iter().all(|s| s.done == 15), "{seen:?}");
    let done: usize = seen.iter().map(|s| s.done).sum();
    let unknown: usize = seen.iter().map(|s| s.unknown).sum();
    let mut l = cluster.client(cluster.wait_for_leader());
    let ctr: usize = l.cmd(&["GET", "ctr"]).text().parse().unwrap();
    assert!(
        (done..=done + unknown).contains(&ctr),
        "counter {ctr}, {seen:?}"
    );
    let want: Vec<Value> = (1..=ctr).map(|i| Value::bulk(&i.to_string())).collect();
    assert_eq!(l.cmd(&["LRANGE", "hist", "0", "-1"]), Value::Array(want));
    for id in cluster.ids() {
        let mut c = cluster.client(id);
        harness::wait_until("every node reads the counter", || {
            c.cmd(&["GET", "ctr"]) == Value::bulk(&ctr.to_string())
        });
    }
}
