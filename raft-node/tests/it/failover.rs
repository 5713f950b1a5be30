//! Leader changes end to end, driven through the `redis` client crate: a crash of the leader
//! (SIGKILL) with writes in flight, a graceful stop of the leader (SIGTERM) with long election
//! timers, and writes and linearizable reads through followers.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::harness::{self, Cluster};

/// Acknowledged writes of one writer thread, as (key, value).
type Acked = Arc<Mutex<Vec<(String, String)>>>;

/// Writes `prefix{i}` = `v{i}` through the redis crate on `port` until `stop` is set or, with
/// `until_error`, until the first failure. Only writes answered `OK` are recorded: a write that
/// failed may or may not be applied and is not checked.
fn writer(
    port: u16,
    prefix: &'static str,
    stop: Arc<AtomicBool>,
    until_error: bool,
) -> (Acked, Arc<AtomicUsize>, std::thread::JoinHandle<()>) {
    let acked: Acked = Arc::default();
    let count = Arc::new(AtomicUsize::new(0));
    let (a, n) = (acked.clone(), count.clone());
    let handle = std::thread::spawn(move || {
        let mut conn = harness::redis_connect(port);
        let mut i = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let (key, value) = (format!("{prefix}{i}"), format!("v{i}"));
            i += 1;
            let reply: redis::RedisResult<String> =
                redis::cmd("SET").arg(&key).arg(&value).query(&mut conn);
            match reply {
                Ok(ok) => {
                    assert_eq!(ok, "OK");
                    a.lock().unwrap().push((key, value));
                    n.fetch_add(1, Ordering::Relaxed);
                }
                Err(_) if until_error => return,
                // A retriable error or a timeout while the cluster has no leader: keep going
                // on the same connection, or a new one if the error closed it.
                Err(e) => {
                    if e.is_io_error() || e.is_connection_dropped() {
                        conn = harness::redis_connect(port);
                    }
                }
            }
        }
    });
    (acked, count, handle)
}

/// Reads every key on node `id` in one pipeline (linearizable, the default read mode) and
/// checks each holds its acknowledged value.
fn assert_all_readable(cluster: &Cluster, id: u32, acked: &[(String, String)]) {
    let mut conn = cluster.redis(id);
    let mut pipe = redis::pipe();
    for (k, _) in acked {
        pipe.cmd("GET").arg(k);
    }
    let values: Vec<Option<String>> = pipe.query(&mut conn).unwrap();
    for ((k, v), got) in acked.iter().zip(values) {
        assert_eq!(
            got.as_deref(),
            Some(v.as_str()),
            "acknowledged write {k}={v} read back on node {id}"
        );
    }
}

/// Goal: a crash of the leader loses no acknowledged write, a new leader takes over, and the
/// old leader rejoins and catches up. Method: three nodes; one writer thread on the leader and
/// one on a follower (forwarded writes) run while the leader is SIGKILLed; the follower's
/// writer must get writes acknowledged again under the new leader; every acknowledged write is
/// then read back linearizably on a follower of the new leader; the old leader restarts on its
/// data directory and must apply up to the others' high watermark and serve the last write.
#[test]
fn killing_the_leader_loses_no_acknowledged_write_and_it_rejoins() {
    let mut cluster = Cluster::start(3, "");
    let old = cluster.wait_for_leader();
    let old_epoch = cluster.status_u64(old, "epoch");
    let via = cluster.ids().into_iter().find(|i| *i != old).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let (on_leader, leader_count, leader_writer) =
        writer(cluster.port(old), "l", stop.clone(), true);
    let (on_follower, follower_count, follower_writer) =
        writer(cluster.port(via), "f", stop.clone(), false);
    harness::wait_until("20 writes on each writer", || {
        leader_count.load(Ordering::Relaxed) >= 20 && follower_count.load(Ordering::Relaxed) >= 20
    });

    cluster.kill(old);
    let at_kill = follower_count.load(Ordering::Relaxed);
    let new = cluster.wait_for_leader();
    assert_ne!(new, old);
    assert!(cluster.status_u64(new, "epoch") > old_epoch);
    harness::wait_until("20 more writes through the follower", || {
        follower_count.load(Ordering::Relaxed) >= at_kill + 20
    });
    stop.store(true, Ordering::Relaxed);
    leader_writer.join().unwrap();
    follower_writer.join().unwrap();

    let mut acked = on_leader.lock().unwrap().clone();
    acked.extend(on_follower.lock().unwrap().iter().cloned());
    let reader = cluster
        .ids()
        .into_iter()
        .find(|i| *i != old && *i != new)
        .unwrap();
    assert_all_readable(&cluster, reader, &acked);

    let target = cluster.status_u64(new, "high_watermark");
    cluster.restart_all();
    let caught_up = harness::poll(|| {
        cluster
            .status(old)
            .and_then(|st| st.get("applied_offset")?.parse::<u64>().ok())
            .is_some_and(|applied| applied >= target)
    });
    assert!(
        caught_up,
        "the old leader did not reach {target}:\n{:?}\n{:?}",
        cluster.status(old),
        cluster.status(new)
    );
    let mut conn = cluster.redis(old);
    let (k, v) = acked.last().unwrap();
    let got: Option<String> = redis::cmd("GET").arg(k).query(&mut conn).unwrap();
    assert_eq!(got.as_deref(), Some(v.as_str()));
    let ok: String = redis::cmd("SET")
        .arg("after-rejoin")
        .arg("yes")
        .query(&mut conn)
        .unwrap();
    assert_eq!(ok, "OK");
    assert_all_readable(&cluster, new, &[("after-rejoin".into(), "yes".into())]);
}

/// Timers under which only a handover can elect a new leader within the test: no follower
/// campaigns on its own for 20 s after it last heard from the leader.
const SLOW_TIMERS: &str = "election_timeout_ms = 20000\nfetch_timeout_ms = 20000\n\
    fetch_max_wait_ms = 250\nrequest_timeout_ms = 1000\nwrite_timeout_ms = 5000\n\
    shutdown_timeout_ms = 5000\n";

/// Goal: SIGTERM on the leader hands leadership over without a timeout-length outage, and the
/// process exits 0. Method: nodes 2 and 3 run with 20 s election and fetch timeouts, node 1
/// with short ones so that it is elected first. Node 1 gets SIGTERM: it must exit with status
/// 0, and within 15 s of the signal (before any survivor's 20 s timeout could fire) both
/// survivors must name the same new leader in a later epoch, which must accept a write.
#[test]
fn sigterm_on_the_leader_hands_over_without_waiting_for_a_timeout() {
    let mut cluster = Cluster::prepare(3, "");
    cluster.set_timers(2, SLOW_TIMERS);
    cluster.set_timers(3, SLOW_TIMERS);
    cluster.restart_all();
    let leader = cluster.wait_for_leader();
    assert_eq!(leader, 1, "only node 1 campaigns within 20 s");
    let epoch = cluster.status_u64(1, "epoch");
    let mut conn = cluster.redis(1);
    let ok: String = redis::cmd("SET")
        .arg("before")
        .arg("1")
        .query(&mut conn)
        .unwrap();
    assert_eq!(ok, "OK");
    drop(conn);

    let signalled = Instant::now();
    assert_eq!(cluster.terminate(1), Some(0), "a graceful stop exits 0");
    let mut successor = None;
    while successor.is_none() && signalled.elapsed() < Duration::from_secs(15) {
        let views: Vec<_> = [2, 3].iter().filter_map(|id| cluster.status(*id)).collect();
        let named = |st: &std::collections::BTreeMap<String, String>| {
            let later = st
                .get("epoch")
                .and_then(|e| e.parse::<u64>().ok())
                .is_some_and(|e| e > epoch);
            // `leader:leader is r2 at 127.0.0.1:PORT`
            let leader = st
                .get("leader")?
                .strip_prefix("leader is r")?
                .split(' ')
                .next()?;
            // Node 1 is gone: a survivor still naming it has not heard of the handover yet.
            later
                .then(|| leader.parse::<u32>().ok())
                .flatten()
                .filter(|l| *l != 1)
        };
        if let [a, b] = &views[..] {
            if let (Some(x), Some(y)) = (named(a), named(b)) {
                if x == y {
                    successor = Some(x);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let successor = successor.expect("the survivors agree on a new leader before any timeout");
    assert!([2, 3].contains(&successor));
    for id in [2, 3] {
        let mut conn = cluster.redis(id);
        let ok: String = redis::cmd("SET")
            .arg(format!("after{id}"))
            .arg("2")
            .query(&mut conn)
            .unwrap();
        assert_eq!(ok, "OK");
        let before: String = redis::cmd("GET").arg("before").query(&mut conn).unwrap();
        assert_eq!(before, "1");
    }
}

/// Goal: a write through a follower whose forward to the leader gets no answer in time is never
/// told `TRYAGAIN` ("nothing applied") when the leader goes on to commit it. Regression: the
/// forward's RPC timeout was answered as "not leader", a refusal, and clients retried writes
/// that had been applied. Method: node 1 leads; nodes 2 and 3 have 20 s election timers (no
/// election during the test) and a 1.5 s write timeout. Node 1 is frozen (SIGSTOP), a `SET`
/// goes to node 2, whose forward waits in node 1's socket; after the reply node 1 is thawed,
/// handles the forward and commits the write. The reply must be OK, TIMEOUT or UNKNOWN.
#[test]
fn a_forward_without_an_answer_is_unknown_never_tryagain() {
    let mut cluster = Cluster::prepare(3, "");
    let follower_timers = "election_timeout_ms = 20000\nfetch_timeout_ms = 20000\n\
        fetch_max_wait_ms = 250\nrequest_timeout_ms = 1000\nwrite_timeout_ms = 1500\n\
        shutdown_timeout_ms = 1000\n";
    cluster.set_timers(2, follower_timers);
    cluster.set_timers(3, follower_timers);
    cluster.restart_all();
    assert_eq!(
        cluster.wait_for_leader(),
        1,
        "only node 1 campaigns within 20 s"
    );
    let mut conn = cluster.redis(2);
    // Right after the election the leader may not have committed in its epoch yet, and node 2
    // may not know its address; TRYAGAIN (nothing applied) is then the truth. Bounded.
    harness::wait_until("forwarding works before the pause", || {
        redis::cmd("SET")
            .arg("warm")
            .arg("1")
            .query::<String>(&mut conn)
            .is_ok_and(|r| r == "OK")
    });

    cluster.signal(1, "-STOP");
    let reply: redis::RedisResult<String> =
        redis::cmd("SET").arg("paused").arg("v").query(&mut conn);
    cluster.signal(1, "-CONT");
    match &reply {
        Ok(ok) => assert_eq!(ok, "OK"),
        Err(e) => {
            let text = e.to_string();
            assert!(
                text.contains("TIMEOUT") || text.contains("UNKNOWN"),
                "an unanswered forward is unknown, not a refusal: {text}"
            );
        }
    }
    // The leader commits it once it runs again: the write was applied, so a TRYAGAIN would
    // have lied.
    let mut leader = cluster.redis(1);
    let applied = harness::poll(|| {
        let v: Option<String> = redis::cmd("GET").arg("paused").query(&mut leader).unwrap();
        v.as_deref() == Some("v")
    });
    assert!(
        applied,
        "the leader applied the forwarded write (reply {reply:?})"
    );
}

/// Goal: writes sent to a follower succeed, and a linearizable read on a follower sees the
/// latest acknowledged write, through the `redis` client crate. Method: three nodes; a counter
/// is incremented on each node in turn, and after every increment each other node reads it at
/// once in the default (linearizable) mode and must see the new value.
#[test]
fn follower_writes_and_linearizable_follower_reads_through_a_redis_client() {
    let cluster = Cluster::start(3, "");
    let leader = cluster.wait_for_leader();
    // Right after the election a follower may not know the leader yet, and TRYAGAIN is then
    // the truth; what is tested starts once every node takes writes.
    cluster.wait_for_writes_everywhere();
    let mut conns: Vec<(u32, redis::Connection)> = cluster
        .ids()
        .into_iter()
        .map(|id| (id, cluster.redis(id)))
        .collect();
    let mut expected = 0i64;
    for round in 0..12 {
        let (writer_id, conn) = &mut conns[round % 3];
        let writer_id = *writer_id;
        let n: i64 = redis::cmd("INCR").arg("counter").query(conn).unwrap();
        expected += 1;
        assert_eq!(n, expected, "INCR on node {writer_id}");
        let ok: String = redis::cmd("SET")
            .arg("last")
            .arg(format!("{round}@{writer_id}"))
            .query(conn)
            .unwrap();
        assert_eq!(ok, "OK");
        for (id, conn) in conns.iter_mut() {
            let (got, last): (i64, String) = redis::pipe()
                .cmd("GET")
                .arg("counter")
                .cmd("GET")
                .arg("last")
                .query(conn)
                .unwrap();
            assert_eq!(got, expected, "linearizable read on node {id}");
            assert_eq!(last, format!("{round}@{writer_id}"));
        }
    }
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query(&mut conns.iter_mut().find(|(id, _)| *id != leader).unwrap().1)
        .unwrap();
    assert!(info.contains("role:slave"), "{info}");
    assert!(info.contains("raft_role:follower"), "{info}");
    assert!(info.contains("master_link_status:up"), "{info}");
    assert!(
        info.contains(&format!("master_port:{}", cluster.port(leader))),
        "{info}"
    );
    assert!(info.contains("read_mode:linearizable"), "{info}");
}

/// Goal: one connection's pipeline takes effect in the order sent, also through a follower
/// (Redis's promise, and the README's). Regression: a follower forwarded each write of a
/// pipeline in its own RPC and the leader applied them in arrival order; 20 pipelined `SET`s
/// then `GET` ended with the wrong value in most runs. Method: on each follower, ten rounds of
/// one pipeline mixing `SET`, `APPEND`, `INCR` and `DEL` on the same keys, ending with `GET`s;
/// every reply must be the one sequential execution gives.
#[test]
fn pipelines_through_a_follower_take_effect_in_the_order_sent() {
    let cluster = Cluster::start(3, "");
    let leader = cluster.wait_for_leader();
    // A pipeline refused as a whole right after the election says nothing about order.
    cluster.wait_for_writes_everywhere();
    let args = |words: &[&str]| -> Vec<String> { words.iter().map(|w| w.to_string()).collect() };
    for id in cluster.ids().into_iter().filter(|id| *id != leader) {
        let mut client = cluster.client(id);
        for round in 0..10 {
            let (x, n) = (format!("x-{id}-{round}"), format!("n-{id}-{round}"));
            let mut cmds = Vec::new();
            let mut want = Vec::new();
            for i in 0..20 {
                cmds.push(args(&["SET", &x, &i.to_string()]));
                want.push(harness::Value::ok());
            }
            cmds.push(args(&["APPEND", &x, "a"]));
            want.push(harness::Value::Int(3));
            for i in 1..=5 {
                cmds.push(args(&["INCR", &n]));
                want.push(harness::Value::Int(i));
            }
            cmds.push(args(&["DEL", &n]));
            want.push(harness::Value::Int(1));
            cmds.push(args(&["INCR", &n]));
            want.push(harness::Value::Int(1));
            cmds.push(args(&["GET", &x]));
            want.push(harness::Value::bulk("19a"));
            cmds.push(args(&["GET", &n]));
            want.push(harness::Value::bulk("1"));
            assert_eq!(
                client.pipeline(&cmds),
                want,
                "pipeline {round} through follower {id}"
            );
        }
    }
}

/// Goal: a RESP3 client (one that opens with `HELLO 3`, as redis-py 8 does) works on the
/// leader and on a follower: maps, nulls, integers, pipelines. Method: the `redis` crate in
/// RESP3 mode writes and reads through every node; absent values come back as nulls, `HELLO`
/// as a map naming protocol 3.
#[test]
fn resp3_clients_work_on_every_node() {
    let cluster = Cluster::start(3, "");
    cluster.wait_for_leader();
    for (round, id) in cluster.ids().into_iter().enumerate() {
        let mut conn = harness::redis_connect_resp3(cluster.port(id));
        let key = format!("r3-{round}");
        let ok: String = redis::cmd("SET")
            .arg(&key)
            .arg("v")
            .query(&mut conn)
            .unwrap();
        assert_eq!(ok, "OK", "SET on node {id}");
        let v: Option<String> = redis::cmd("GET").arg(&key).query(&mut conn).unwrap();
        assert_eq!(v.as_deref(), Some("v"));
        let none: Option<String> = redis::cmd("GET").arg("absent").query(&mut conn).unwrap();
        assert_eq!(none, None, "a null on node {id}");
        let nx: Option<String> = redis::cmd("SET")
            .arg(&key)
            .arg("w")
            .arg("NX")
            .query(&mut conn)
            .unwrap();
        assert_eq!(nx, None, "a refused SET NX is a null");
        let (n, many): (i64, Vec<Option<String>>) = redis::pipe()
            .cmd("INCR")
            .arg(format!("{key}-n"))
            .cmd("MGET")
            .arg(&key)
            .arg("absent")
            .query(&mut conn)
            .unwrap();
        assert_eq!((n, many), (1, vec![Some("v".into()), None]));
        let hello: std::collections::HashMap<String, redis::Value> =
            redis::cmd("HELLO").arg("3").query(&mut conn).unwrap();
        assert_eq!(hello.get("proto"), Some(&redis::Value::Int(3)));
    }
}

/// Goal: MULTI/EXEC works as clients use it (the `redis` crate's atomic pipeline, redis-py's
/// default pipeline) on the leader and through followers, in RESP2 and RESP3: the queued
/// commands apply at once and EXEC answers each of them; a refused command aborts the lot.
/// Method: on every node, an atomic pipeline of INCR, APPEND, GET; then, with the raw client,
/// a transaction holding an unknown command must answer EXECABORT and apply nothing.
#[test]
fn transactions_through_any_node_apply_at_once() {
    let cluster = Cluster::start(3, "");
    // Right after an election a write may be refused (TRYAGAIN, nothing applied), which EXEC
    // would answer too; that is not what this test is about.
    cluster.wait_for_writes_everywhere();
    for (round, id) in cluster.ids().into_iter().enumerate() {
        for resp3 in [false, true] {
            let port = cluster.port(id);
            let mut conn = if resp3 {
                harness::redis_connect_resp3(port)
            } else {
                harness::redis_connect(port)
            };
            let key = format!("tx-{round}-{resp3}");
            let (n, len, got): (i64, i64, String) = redis::pipe()
                .atomic()
                .cmd("INCRBY")
                .arg(&key)
                .arg(41)
                .cmd("APPEND")
                .arg(&key)
                .arg("!")
                .cmd("GET")
                .arg(&key)
                .query(&mut conn)
                .unwrap_or_else(|e| panic!("MULTI/EXEC on node {id} (resp3 {resp3}): {e}"));
            assert_eq!((n, len, got.as_str()), (41, 3, "41!"), "node {id}");
        }
    }
    let mut c = cluster.client(cluster.ids()[0]);
    assert_eq!(c.cmd(&["MULTI"]), harness::Value::ok());
    assert_eq!(
        c.cmd(&["SET", "aborted", "1"]),
        harness::Value::Simple("QUEUED".into())
    );
    assert!(c.cmd(&["NOSUCH"]).is_error("ERR unknown command"));
    assert!(c.cmd(&["EXEC"]).is_error("EXECABORT"));
    assert_eq!(
        c.cmd(&["GET", "aborted"]),
        harness::Value::Nil,
        "nothing was applied"
    );
}

/// Goal: an operator moves leadership with `RAFT TRANSFER <id>`. Method: three nodes; the
/// leader is asked to hand over to a follower, which must become leader in the next epoch and
/// keep every acknowledged write; a follower answers the same command with an error naming
/// the leader.
#[test]
fn raft_transfer_moves_leadership_to_the_named_voter() {
    let cluster = Cluster::start(3, "");
    let leader = cluster.wait_for_leader();
    let epoch = cluster.status_u64(leader, "epoch");
    let target = cluster.ids().into_iter().find(|id| *id != leader).unwrap();
    let mut conn = cluster.redis(leader);
    let ok: String = redis::cmd("SET")
        .arg("k")
        .arg("v")
        .query(&mut conn)
        .unwrap();
    assert_eq!(ok, "OK");
    let ok: String = redis::cmd("RAFT")
        .arg("TRANSFER")
        .arg(target)
        .query(&mut conn)
        .unwrap();
    assert_eq!(ok, "OK");
    harness::wait_until("the target leads", || {
        cluster.status(target).is_some_and(|st| {
            st.get("role").is_some_and(|r| r == "leader")
                && st.get("epoch").and_then(|e| e.parse::<u64>().ok()) == Some(epoch + 1)
        })
    });
    let mut conn = cluster.redis(target);
    let v: String = redis::cmd("GET").arg("k").query(&mut conn).unwrap();
    assert_eq!(v, "v");
    let refused: redis::RedisResult<String> = redis::cmd("RAFT")
        .arg("TRANSFER")
        .arg(target)
        .query(&mut cluster.redis(leader));
    let err = refused.expect_err("the old leader no longer leads");
    assert!(
        err.to_string().contains(&format!("leader is r{target}")),
        "{err}"
    );
}

/// Goal: an isolated voter says so once, naming the voters it cannot reach, rather than only
/// logging a role change every election timeout; and says once when a quorum is back.
/// Method: three nodes; kill two; the survivor's log must carry one "no quorum" warning naming
/// both, each peer's "unreachable" warning, and, once one is restarted, "reachable again".
#[test]
fn an_isolated_voter_logs_once_that_no_quorum_is_reachable_and_when_it_is_back() {
    let mut cluster = Cluster::start(3, "");
    let leader = cluster.wait_for_leader();
    let survivor = cluster.ids().into_iter().find(|id| *id != leader).unwrap();
    let others: Vec<u32> = cluster
        .ids()
        .into_iter()
        .filter(|id| *id != survivor)
        .collect();
    for id in &others {
        cluster.kill(*id);
    }
    let lost = "no quorum of voters reachable";
    harness::wait_until("the survivor to warn that no quorum is reachable", || {
        cluster.log_text(survivor).contains(lost)
    });
    let log = cluster.log_text(survivor);
    let line = log.lines().find(|l| l.contains(lost)).unwrap();
    for id in &others {
        assert!(line.contains(&format!("r{id}")), "names r{id}: {line}");
        assert!(
            log.lines()
                .any(|l| l.contains("peer unreachable") && l.contains(&format!("peer=r{id}"))),
            "r{id} is named unreachable:\n{log}"
        );
    }
    cluster.start_one(others[0]);
    harness::wait_until("the survivor to log that a quorum is back", || {
        cluster
            .log_text(survivor)
            .contains("a quorum of voters is reachable again")
    });
    // Elections went on meanwhile (a role change every timeout); the warning was said once.
    let log = cluster.log_text(survivor);
    assert_eq!(log.matches(lost).count(), 1, "{log}");
}
