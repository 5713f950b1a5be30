//! What one client can hold on a node: the request limits before `AUTH`, the replies waiting
//! for a client, and `maxmemory`. Each test drives a client past a limit, then checks that the
//! node still serves a fresh connection.

use crate::harness::{self, Cluster, Value};

/// A fresh connection to node 1 answers PING (after `AUTH` when the cluster has a password).
fn serves_a_fresh_client(cluster: &Cluster) {
    let mut c = cluster.client(1);
    assert_eq!(c.cmd(&["PING"]), Value::Simple("PONG".into()));
}

/// Goal: before `AUTH` a connection may send only small requests: past the limit it gets a
/// protocol error naming it and is closed, and the node serves others; a successful `AUTH`
/// lifts the limit at once, also for the request pipelined right behind it.
/// Method: one node with a password and a 1,024-byte limit before AUTH; on fresh connections,
/// a bulk length past it (refused at its header, before its bytes come), eleven arguments,
/// small arguments adding up past it, and an inline line past it; then AUTH and a 100 kB SET
/// in one write.
#[test]
fn unauthenticated_connections_may_send_only_small_requests() {
    let cluster = Cluster::start(
        1,
        "[client]\nrequirepass = \"sesame\"\nunauthenticated_request_bytes_max = 1024\n",
    );
    cluster.wait_for_leader();
    let port = cluster.port(1);
    let many = (0..11).map(|_| "x").collect::<Vec<_>>();
    let piece = "y".repeat(200);
    let pieces = (0..9).map(|_| piece.as_str()).collect::<Vec<_>>();
    for bad in [
        b"*2\r\n$4\r\nAUTH\r\n$100000\r\n".to_vec(),
        harness::encode_request(&many),
        harness::encode_request(&pieces),
        vec![b'a'; 2000],
    ] {
        let reply = harness::raw_exchange(port, &bad);
        assert!(
            reply.starts_with("-ERR protocol error") && reply.contains("(unauthenticated)"),
            "{:?} -> {reply:?}",
            String::from_utf8_lossy(&bad[..bad.len().min(40)])
        );
        serves_a_fresh_client(&cluster);
    }
    let mut c = cluster.client_unauthenticated(1);
    assert_eq!(c.cmd(&["PING"]), Value::Simple("PONG".into()));
    assert!(c.cmd(&["AUTH", "wrong"]).is_error("WRONGPASS"));
    let big = "v".repeat(100_000);
    let replies = c.pipeline(&[
        vec!["AUTH".into(), "sesame".into()],
        vec!["SET".into(), "k".into(), big],
        vec!["STRLEN".into(), "k".into()],
    ]);
    assert_eq!(replies, [Value::ok(), Value::ok(), Value::Int(100_000)]);
    let mut d = cluster.client(1);
    assert_eq!(
        d.cmd(&["CONFIG", "GET", "client.unauthenticated_request_bytes_max"]),
        Value::Array(vec![
            Value::bulk("client.unauthenticated_request_bytes_max"),
            Value::bulk("1024")
        ])
    );
}

/// Goal: the replies waiting for a client are bounded. A reply that would take them past
/// `client.output_buffer_bytes_max` closes the connection (logged once, counted in a metric)
/// instead of being held; a client that does not read stalls only its own connection, which
/// holds about a chunk of replies meanwhile and gets every reply once it reads.
/// Method: one node with a 1 MiB limit and three 400 kB list elements; `LRANGE` of all three
/// (1.2 MB) closes the connection; then a client pipelines 40 `GET`s of a 400 kB value (16 MB
/// of replies) and reads nothing while another client is served, then reads them all.
#[test]
fn replies_waiting_for_a_client_are_bounded() {
    let cluster = Cluster::start(1, "[client]\noutput_buffer_bytes_max = 1048576\n");
    cluster.wait_for_leader();
    let mut c = cluster.client(1);
    let value = "e".repeat(400_000);
    for _ in 0..3 {
        assert!(matches!(c.cmd(&["RPUSH", "l", &value]), Value::Int(_)));
    }
    assert_eq!(c.cmd(&["SET", "big", &value]), Value::ok());
    let two = c.cmd(&["LRANGE", "l", "0", "1"]);
    assert!(
        matches!(&two, Value::Array(a) if a.len() == 2),
        "800 kB fit"
    );
    assert!(
        c.try_cmd(&["LRANGE", "l", "0", "-1"]).is_err(),
        "a 1.2 MB reply closes the connection"
    );
    serves_a_fresh_client(&cluster);
    let series = "raft_client_output_limit_disconnects_total";
    let text = harness::scrape(cluster.metrics_port(1));
    assert_eq!(harness::sample(&text, series), Some(1.0), "{text}");
    harness::wait_until("the disconnect to be logged", || {
        cluster
            .log_text(1)
            .contains("client.output_buffer_bytes_max")
    });

    // A slow reader: 16 MB of replies asked for, none read yet.
    let gets: Vec<Vec<String>> = (0..40)
        .map(|_| vec!["GET".to_string(), "big".to_string()])
        .collect();
    let mut slow = cluster.client(1);
    slow.send_pipeline(&gets);
    let mut other = cluster.client(1);
    for _ in 0..5 {
        assert_eq!(other.cmd(&["PING"]), Value::Simple("PONG".into()));
        assert_eq!(other.cmd(&["STRLEN", "big"]), Value::Int(400_000));
    }
    serves_a_fresh_client(&cluster);
    for _ in 0..40 {
        assert_eq!(slow.read_reply().unwrap().text().len(), 400_000);
    }
    let text = harness::scrape(cluster.metrics_port(1));
    assert_eq!(
        harness::sample(&text, series),
        Some(1.0),
        "a slow reader is waited for, not disconnected"
    );
    assert_eq!(
        other.cmd(&["CONFIG", "GET", "client.output_buffer_bytes_max"]),
        Value::Array(vec![
            Value::bulk("client.output_buffer_bytes_max"),
            Value::bulk("1048576")
        ])
    );
}

/// Goal: at `maxmemory`, compared with the map's estimate (`INFO memory`'s
/// `used_memory_dataset`), writes that add data get Redis's `-OOM` before they are proposed,
/// on the leader and on a follower (each checks its own applied map); reads and deletes still
/// work, and a delete makes room again.
/// Method: three nodes with `maxmemory = 200000`; two 100 kB values fill it; a third SET, an
/// INCR and a transaction that adds data are refused; a follower refuses too once it applied
/// the values; GET and DEL pass; after the DEL a small SET passes.
#[test]
fn writes_that_add_data_are_refused_at_maxmemory() {
    let cluster = Cluster::start(3, "maxmemory = 200000\n");
    let leader = cluster.wait_for_leader();
    let mut c = cluster.client(leader);
    let value = "m".repeat(100_000);
    assert_eq!(c.cmd(&["SET", "v1", &value]), Value::ok());
    assert_eq!(c.cmd(&["SET", "v2", &value]), Value::ok());
    let oom = "OOM command not allowed when used memory > 'maxmemory'.";
    assert_eq!(
        c.cmd(&["SET", "v3", &value]),
        Value::Error(oom.into()),
        "the map is full"
    );
    assert_eq!(c.cmd(&["INCR", "n"]), Value::Error(oom.into()));
    assert_eq!(c.cmd(&["MULTI"]), Value::ok());
    assert_eq!(c.cmd(&["SET", "t", "x"]), Value::Error(oom.into()));
    assert!(c.cmd(&["EXEC"]).is_error("EXECABORT"));
    assert_eq!(c.cmd(&["STRLEN", "v1"]), Value::Int(100_000), "reads work");
    let info = c.cmd(&["INFO", "memory"]).text();
    assert!(info.contains("maxmemory:200000\r\n"), "{info}");
    let dataset: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("used_memory_dataset:"))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no used_memory_dataset in {info}"));
    assert!(dataset >= 200_000, "{info}");
    assert_eq!(
        c.cmd(&["CONFIG", "GET", "maxmemory"]),
        Value::Array(vec![Value::bulk("maxmemory"), Value::bulk("200000")])
    );

    // A follower decides by its own map, once it has applied the two values.
    let follower = cluster.ids().into_iter().find(|i| *i != leader).unwrap();
    let mut f = cluster.client(follower);
    harness::wait_until("the follower to refuse a write at maxmemory", || {
        // SETNX of a present key adds nothing even if it passed.
        f.cmd(&["SETNX", "v1", "x"]) == Value::Error(oom.into())
    });
    assert_eq!(f.cmd(&["DEL", "v2"]), Value::Int(1), "deletes work");
    assert_eq!(c.cmd(&["SET", "small", "x"]), Value::ok(), "room again");
    let mut fresh = cluster.client(follower);
    assert_eq!(fresh.cmd(&["PING"]), Value::Simple("PONG".into()));
    serves_a_fresh_client(&cluster);
}
