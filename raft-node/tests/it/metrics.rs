//! The Prometheus endpoint, end to end: scraped over HTTP from running nodes.

use crate::harness::{self, sample, Cluster};

/// Goal: `GET /metrics` serves the text format 0.0.4 with the replica's state, and the values
/// follow the cluster: the applied offset moves after writes, latencies and replicated bytes
/// are counted where they happen; other paths, methods and oversized heads are refused.
/// Method: three nodes; scrape the leader and a follower, write 50 keys through the follower
/// (forwarded to the leader) and read one, scrape again.
#[test]
fn the_metrics_endpoint_reports_the_replica_and_follows_writes() {
    let cluster = Cluster::start(3, "");
    let leader = cluster.wait_for_leader();
    let follower = cluster.ids().into_iter().find(|i| *i != leader).unwrap();
    let (lp, fp) = (cluster.metrics_port(leader), cluster.metrics_port(follower));

    let r = harness::http_exchange(lp, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(r.status, 200);
    let head = r.head.to_ascii_lowercase();
    assert!(
        head.contains("content-type: text/plain; version=0.0.4"),
        "{}",
        r.head
    );
    assert!(head.contains("connection: close"), "{}", r.head);
    let text = r.body;
    assert_eq!(
        sample(&text, "raft_role{role=\"leader\"}"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(sample(&text, "raft_role{role=\"follower\"}"), Some(0.0));
    assert_eq!(sample(&text, "raft_leader_id"), Some(f64::from(leader)));
    assert!(sample(&text, "raft_epoch").is_some_and(|e| e >= 1.0));
    assert_eq!(sample(&text, "raft_voters"), Some(3.0), "{text}");
    assert_eq!(sample(&text, "raft_is_voter"), Some(1.0), "{text}");
    assert!(
        text.contains("# TYPE raft_proposals_total counter"),
        "{text}"
    );
    assert!(!text.contains("# EOF"));

    // Right after the election a follower may still be unattached for a moment.
    harness::wait_until("the follower's scrape to show its role", || {
        sample(&harness::scrape(fp), "raft_role{role=\"follower\"}") == Some(1.0)
    });
    let before = harness::scrape(fp);
    let applied_before = sample(&before, "raft_applied_offset").unwrap();

    let mut conn = cluster.redis(follower);
    for i in 0..50 {
        let ok: String = redis::cmd("SET")
            .arg(format!("k{i}"))
            .arg("some value")
            .query(&mut conn)
            .unwrap();
        assert_eq!(ok, "OK");
    }
    let v: String = redis::cmd("GET").arg("k49").query(&mut conn).unwrap();
    assert_eq!(v, "some value");

    let after = harness::scrape(fp);
    let applied_after = sample(&after, "raft_applied_offset").unwrap();
    assert!(
        applied_after >= applied_before + 50.0,
        "applied {applied_before} -> {applied_after}"
    );
    let commits = sample(&after, "raft_commit_latency_seconds_count").unwrap();
    assert!(commits >= 50.0, "{after}");
    assert!(
        sample(
            &after,
            "raft_read_latency_seconds_count{mode=\"linearizable\"}"
        )
        .is_some_and(|n| n >= 1.0),
        "{after}"
    );
    assert!(sample(&after, "raft_storage_append_latency_seconds_count").is_some_and(|n| n >= 1.0));
    assert!(sample(&after, "raft_transport_received_bytes_total").is_some_and(|b| b > 0.0));
    assert_eq!(sample(&after, "raft_proposals_in_flight"), Some(0.0));
    assert_eq!(sample(&after, "raft_reads_in_flight"), Some(0.0));
    assert!(sample(&after, "raft_applied_records_total").is_some_and(|n| n >= 50.0));

    // Replication is counted where it happens: fetches and received bytes on followers, served
    // bytes and proposals on the leader. Summed over the nodes so that a leader change on a
    // loaded machine does not matter.
    let total = |series: &str| -> f64 {
        cluster
            .ids()
            .into_iter()
            .map(|id| sample(&harness::scrape(cluster.metrics_port(id)), series).unwrap_or(0.0))
            .sum()
    };
    assert!(total("raft_fetch_latency_seconds_count{outcome=\"records\"}") >= 1.0);
    assert!(total("raft_replicated_received_bytes_total") >= 1000.0);
    assert!(total("raft_replicated_sent_bytes_total") >= 1000.0);
    assert!(total("raft_proposals_total") >= 50.0);

    assert_eq!(
        harness::http_exchange(lp, b"GET / HTTP/1.1\r\n\r\n").status,
        404
    );
    let post = harness::http_exchange(lp, b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
    assert_eq!(post.status, 405);
    assert!(post.head.contains("Allow: GET, HEAD"), "{}", post.head);
    let huge = format!("GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(20_000));
    assert_eq!(harness::http_exchange(lp, huge.as_bytes()).status, 431);
    // The endpoint still serves after the refusals.
    assert!(harness::scrape(lp).contains("raft_epoch"));
}
