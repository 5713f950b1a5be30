//! End-to-end tests of the introspection commands on real processes: `CLIENT LIST`/`KILL`
//! over live connections, `CONFIG GET` globs, `WAIT` counting replicas after a write,
//! `INFO commandstats`, and `redis-cli --memkeys` over `MEMORY USAGE`.

use std::collections::BTreeMap;
use std::io::{BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crate::harness::{self, read_value, wait_until, Cluster, Value};
use crate::tools;

/// A raw connection whose own address the test knows.
struct Raw {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Raw {
    fn connect(port: u16) -> Raw {
        let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
        Raw {
            reader: BufReader::new(s.try_clone().unwrap()),
            writer: s,
        }
    }

    fn addr(&self) -> SocketAddr {
        self.writer.local_addr().unwrap()
    }

    fn send(&mut self, args: &[&str]) -> std::io::Result<()> {
        self.writer.write_all(&harness::encode_request(args))
    }

    fn cmd(&mut self, args: &[&str]) -> std::io::Result<Value> {
        self.send(args)?;
        read_value(&mut self.reader)
    }
}

/// The `CLIENT LIST` lines, each as its fields.
fn client_list(c: &mut Raw, args: &[&str]) -> Vec<BTreeMap<String, String>> {
    let mut req = vec!["CLIENT", "LIST"];
    req.extend_from_slice(args);
    let text = c.cmd(&req).unwrap().text();
    text.lines()
        .map(|l| {
            l.split(' ')
                .filter_map(|f| f.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        })
        .collect()
}

fn line_of(c: &mut Raw, id: &str) -> BTreeMap<String, String> {
    client_list(c, &["ID", id])
        .pop()
        .unwrap_or_else(|| panic!("client {id} is not listed"))
}

fn int(v: &Value) -> i64 {
    match v {
        Value::Int(n) => *n,
        other => panic!("not an integer: {other:?}"),
    }
}

/// Whether the peer closed `c`: a request then gets no reply (end of stream or a reset).
fn closed(c: &mut Raw) -> bool {
    c.cmd(&["PING"]).is_err()
}

/// The `(calls, rejected_calls, failed_calls)` of `cmd` in `INFO commandstats` (zeros if
/// absent).
fn cmdstat(c: &mut Raw, cmd: &str) -> (u64, u64, u64) {
    let info = c.cmd(&["INFO", "commandstats"]).unwrap().text();
    assert!(info.starts_with("# Commandstats\r\n"), "{info}");
    let Some(line) = info
        .lines()
        .find_map(|l| l.strip_prefix(&format!("cmdstat_{cmd}:")))
    else {
        return (0, 0, 0);
    };
    let f: BTreeMap<&str, &str> = line.split(',').filter_map(|f| f.split_once('=')).collect();
    let n = |k: &str| f[k].parse::<u64>().unwrap();
    assert!(f["usec_per_call"].parse::<f64>().is_ok(), "{line}");
    n("usec");
    (n("calls"), n("rejected_calls"), n("failed_calls"))
}

/// Goal: `CLIENT LIST` shows every live connection with its real address, name, age, idle
/// time, last command and protocol; `CLIENT KILL` by id, by address and in the old form
/// closes exactly that connection; a `WAIT 0` ends when its connection is killed.
/// Method: three nodes; connections whose addresses the test knows; kill them from another
/// and see their next request fail.
#[test]
fn client_list_shows_live_connections_and_client_kill_closes_them() {
    let cluster = Cluster::start(3, "");
    let leader = cluster.wait_for_leader();
    let port = cluster.port(leader);
    let mut admin = Raw::connect(port);
    let mut a = Raw::connect(port);
    assert_eq!(a.cmd(&["CLIENT", "SETNAME", "alpha"]).unwrap(), Value::ok());
    let a_id = int(&a.cmd(&["CLIENT", "ID"]).unwrap()).to_string();
    let mut resp3 = harness::redis_connect_resp3(port);
    let r3_id: i64 = redis::cmd("CLIENT").arg("ID").query(&mut resp3).unwrap();

    let all = client_list(&mut admin, &[]);
    assert!(all.len() >= 3, "{all:?}");
    let line = line_of(&mut admin, &a_id);
    assert_eq!(line["addr"], a.addr().to_string());
    assert_eq!(line["laddr"], format!("127.0.0.1:{port}"));
    assert_eq!(line["name"], "alpha");
    assert_eq!(line["cmd"], "client");
    assert_eq!(line["resp"], "2");
    assert_eq!(line["flags"], "N");
    assert_eq!(line_of(&mut admin, &r3_id.to_string())["resp"], "3");
    let own = a.cmd(&["CLIENT", "INFO"]).unwrap().text();
    assert!(
        own.starts_with(&format!("id={a_id} addr={} ", a.addr())),
        "{own}"
    );
    assert_eq!(
        client_list(&mut admin, &["ID", &a_id, "999999"]).len(),
        1,
        "an unknown id lists nothing"
    );

    // Idle time grows while the connection is silent and resets when it speaks; age does not.
    wait_until("an idle time of 2 s", || {
        line_of(&mut admin, &a_id)["idle"].parse::<u64>().unwrap() >= 2
    });
    assert_eq!(a.cmd(&["GET", "nothing"]).unwrap(), Value::Nil);
    let line = line_of(&mut admin, &a_id);
    assert!(line["idle"].parse::<u64>().unwrap() <= 1, "{line:?}");
    assert!(line["age"].parse::<u64>().unwrap() >= 2, "{line:?}");
    assert_eq!(line["cmd"], "get");
    assert_eq!(a.cmd(&["MULTI"]).unwrap(), Value::ok());
    let line = line_of(&mut admin, &a_id);
    assert_eq!((line["flags"].as_str(), line["multi"].as_str()), ("x", "0"));

    // The filter form answers a count and spares the caller unless SKIPME no.
    assert_eq!(
        admin.cmd(&["CLIENT", "KILL", "ID", &a_id]).unwrap(),
        Value::Int(1)
    );
    assert!(closed(&mut a), "the killed connection is closed");
    wait_until("the killed connection to leave the list", || {
        client_list(&mut admin, &["ID", &a_id]).is_empty()
    });
    let admin_id = int(&admin.cmd(&["CLIENT", "ID"]).unwrap()).to_string();
    assert_eq!(
        admin.cmd(&["CLIENT", "KILL", "ID", &admin_id]).unwrap(),
        Value::Int(0),
        "SKIPME yes is the default"
    );

    let mut b = Raw::connect(port);
    let b_addr = b.addr().to_string();
    // Answered, so the server has registered it (accepting is asynchronous).
    assert_eq!(b.cmd(&["PING"]).unwrap(), Value::Simple("PONG".into()));
    assert_eq!(
        admin.cmd(&["CLIENT", "KILL", "ADDR", &b_addr]).unwrap(),
        Value::Int(1)
    );
    assert!(closed(&mut b));
    let mut c = Raw::connect(port);
    let c_addr = c.addr().to_string();
    assert_eq!(c.cmd(&["PING"]).unwrap(), Value::Simple("PONG".into()));
    assert_eq!(
        admin.cmd(&["CLIENT", "KILL", &c_addr]).unwrap(),
        Value::ok()
    );
    assert!(closed(&mut c));
    assert!(admin
        .cmd(&["CLIENT", "KILL", &c_addr])
        .unwrap()
        .is_error("ERR No such client"));

    // A WAIT without a timeout that can never be satisfied ends with its connection.
    let mut w = Raw::connect(port);
    let w_id = int(&w.cmd(&["CLIENT", "ID"]).unwrap()).to_string();
    w.send(&["WAIT", "10", "0"]).unwrap();
    wait_until("the WAIT to be listed", || {
        line_of(&mut admin, &w_id)["cmd"] == "wait"
    });
    let started = Instant::now();
    assert_eq!(
        admin.cmd(&["CLIENT", "KILL", "ID", &w_id]).unwrap(),
        Value::Int(1)
    );
    // The batch is answered (with the replicas known so far), then the connection closes.
    match read_value(&mut w.reader) {
        Ok(Value::Int(n)) => assert!((0..=2).contains(&n), "{n} replicas of 2"),
        other => panic!("WAIT answered {other:?}"),
    }
    assert!(read_value(&mut w.reader).is_err(), "closed after the kill");
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(admin.cmd(&["PING"]).unwrap(), Value::Simple("PONG".into()));
}

/// Goal: `CONFIG GET` matches Redis-style globs over the node's settings, several patterns
/// per call, each setting once, nothing for an unknown pattern; `WAIT` answers how many
/// other replicas hold the connection's last write, never more than exist; `INFO
/// commandstats` counts calls, rejections and failures per command; `redis-cli --memkeys`
/// sizes every key with `MEMORY USAGE`.
/// Method: three nodes; compare exact replies and counter deltas; time-bound every WAIT.
#[test]
fn config_get_wait_commandstats_and_memkeys() {
    let cluster = Cluster::start(3, "");
    let leader = cluster.wait_for_leader();
    let port = cluster.port(leader);
    let mut c = Raw::connect(port);
    let pairs = |v: Value| -> Vec<(String, String)> {
        let Value::Array(items) = v else {
            panic!("{v:?}")
        };
        items
            .chunks(2)
            .map(|p| (p[0].text(), p[1].text()))
            .collect()
    };
    let get = |c: &mut Raw, pats: &[&str]| {
        let mut req = vec!["CONFIG", "GET"];
        req.extend_from_slice(pats);
        pairs(c.cmd(&req).unwrap())
    };
    assert_eq!(
        get(&mut c, &["port"]),
        vec![("port".into(), port.to_string())]
    );
    assert_eq!(
        get(&mut c, &["MAX?LIENTS", "nosuch*"]),
        vec![("maxclients".into(), "10000".into())]
    );
    let timers: Vec<String> = get(&mut c, &["timers.*"])
        .into_iter()
        .map(|p| p.0)
        .collect();
    assert_eq!(timers.len(), 6, "{timers:?}");
    assert!(timers.contains(&"timers.election_timeout_ms".to_string()));
    let both = get(&mut c, &["[pb]o*", "p*"]);
    let names: Vec<&str> = both.iter().map(|p| p.0.as_str()).collect();
    assert_eq!(
        names,
        vec!["port", "proto-max-bulk-len"],
        "each setting once"
    );
    assert_eq!(
        get(&mut c, &["replica_id"]),
        vec![("replica_id".into(), leader.to_string())]
    );
    assert!(get(&mut c, &["nosuch", "x[yz]"]).is_empty());
    assert!(
        get(&mut c, &["requirepass"]).is_empty(),
        "the password is not shown"
    );

    // WAIT on the leader: both followers acknowledge the write; a third does not exist.
    assert_eq!(c.cmd(&["SET", "w", "1"]).unwrap(), Value::ok());
    assert_eq!(c.cmd(&["WAIT", "2", "10000"]).unwrap(), Value::Int(2));
    let started = Instant::now();
    assert_eq!(c.cmd(&["WAIT", "3", "300"]).unwrap(), Value::Int(2));
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(290) && took < Duration::from_secs(5),
        "{took:?}"
    );
    assert_eq!(c.cmd(&["WAIT", "0", "0"]).unwrap(), Value::Int(2));
    assert!(c
        .cmd(&["WAIT", "x", "1"])
        .unwrap()
        .is_error("ERR value is not an integer"));
    assert!(c
        .cmd(&["WAIT", "1", "-1"])
        .unwrap()
        .is_error("ERR timeout is negative"));
    // On a follower only the leader is known to hold a write.
    let follower = cluster.ids().into_iter().find(|i| *i != leader).unwrap();
    let mut f = Raw::connect(cluster.port(follower));
    assert_eq!(f.cmd(&["SET", "wf", "1"]).unwrap(), Value::ok());
    assert_eq!(f.cmd(&["WAIT", "2", "200"]).unwrap(), Value::Int(1));

    // Command counters: three SETs run, one refused for its arguments, one INCR failing.
    let (set0, rej0, _) = cmdstat(&mut c, "set");
    let (_, _, incr_failed0) = cmdstat(&mut c, "incr");
    for i in 0..3 {
        assert_eq!(c.cmd(&["SET", &format!("s{i}"), "v"]).unwrap(), Value::ok());
    }
    assert!(c.cmd(&["SET", "s0"]).unwrap().is_error("ERR wrong number"));
    assert!(c
        .cmd(&["INCR", "s0"])
        .unwrap()
        .is_error("ERR value is not an integer"));
    let (set1, rej1, failed1) = cmdstat(&mut c, "set");
    assert_eq!((set1 - set0, rej1 - rej0, failed1), (3, 1, 0));
    assert_eq!(cmdstat(&mut c, "incr").2 - incr_failed0, 1);
    let default_info = c.cmd(&["INFO"]).unwrap().text();
    assert!(
        !default_info.contains("cmdstat_"),
        "not in the default sections"
    );

    // MEMORY USAGE grows with the value; --memkeys sizes every key of every type.
    let big = "x".repeat(5000);
    assert_eq!(c.cmd(&["SET", "big", &big]).unwrap(), Value::ok());
    let usage = int(&c.cmd(&["MEMORY", "USAGE", "big"]).unwrap());
    let small = int(&c.cmd(&["MEMORY", "USAGE", "w"]).unwrap());
    assert!(usage - small >= 4999 && usage < 6000, "{usage} vs {small}");
    assert_eq!(c.cmd(&["MEMORY", "USAGE", "absent"]).unwrap(), Value::Nil);
    for cmd in [
        vec!["RPUSH", "ml", "a", "b"],
        vec!["SADD", "ms", "a"],
        vec!["HSET", "mh", "f", "v"],
        vec!["ZADD", "mz", "1", "m"],
    ] {
        assert!(matches!(c.cmd(&cmd).unwrap(), Value::Int(_)));
    }
    let out = tools::cli(port, &["--memkeys"]);
    for want in [
        "Biggest string found '\"big\"' has",
        "Biggest   list found '\"ml\"' has",
        "Biggest    set found '\"ms\"' has",
        "Biggest   hash found '\"mh\"' has",
        "Biggest   zset found '\"mz\"' has",
    ] {
        assert!(out.contains(want), "--memkeys lacks {want:?}:\n{out}");
    }
    assert!(out.contains(&format!("has {usage} bytes")), "{out}");
}
