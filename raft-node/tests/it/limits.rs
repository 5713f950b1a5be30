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
