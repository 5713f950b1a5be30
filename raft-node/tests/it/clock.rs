//! The cluster's clock with skewed wall clocks, on real processes: one node runs under
//! libfaketime (Debian's `faketime` package) with its wall clock shifted and its monotonic
//! clock left alone. Both fail on the code before the leader stamped records (7d7c5c6), at
//! their scenario's assertion: through the node 3 s behind, the second `SET NX` also answered
//! OK (two clients held the lock); with the node an hour ahead leading, `GET k` was nil on
//! every replica.

use crate::harness::{self, sample, Cluster, Value};

const FAKETIME_LIB: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";

/// A stopped three-node cluster whose node `skewed` will run with its wall clock shifted by
/// `offset` (libfaketime's syntax: `-3s`, `+1h`).
fn skewed_cluster(skewed: u32, offset: &str) -> Cluster {
    assert!(
        std::path::Path::new(FAKETIME_LIB).exists(),
        "{FAKETIME_LIB} is missing: install Debian's faketime package"
    );
    let mut c = Cluster::prepare(3, "");
    c.set_env(skewed, "LD_PRELOAD", FAKETIME_LIB);
    c.set_env(skewed, "FAKETIME", offset);
    c.set_env(skewed, "DONT_FAKE_MONOTONIC", "1");
    c.restart_all();
    c
}

/// Moves leadership to `target` and waits until it leads.
fn lead_with(c: &Cluster, target: u32) {
    let leader = c.wait_for_leader();
    if leader == target {
        return;
    }
    let mut conn = c.client(leader);
    assert_eq!(
        conn.cmd(&["RAFT", "TRANSFER", &target.to_string()]),
        Value::ok()
    );
    harness::wait_until(&format!("node {target} to lead"), || {
        c.status(target)
            .is_some_and(|st| st.get("role").is_some_and(|r| r == "leader"))
    });
}

/// Goal (W3, the two-lock scenario): `SET lock A NX PX 1000` through a node whose wall clock
/// is 3 s behind takes the lock, and the same through the leader a moment later does not.
/// Method: node 3 at -3 s, node 1 leads; five rounds, each on a new lock; the time between
/// the two SETs is far below the lock's second.
#[test]
fn a_lock_taken_through_a_node_3s_behind_is_held_once() {
    let c = skewed_cluster(3, "-3s");
    lead_with(&c, 1);
    c.wait_for_writes_everywhere();
    let (mut lagging, mut leader) = (c.client(3), c.client(1));
    for round in 0..5 {
        let key = format!("lock{round}");
        assert_eq!(
            lagging.cmd(&["SET", &key, "A", "NX", "PX", "1000"]),
            Value::ok()
        );
        assert_eq!(
            leader.cmd(&["SET", &key, "B", "NX", "PX", "1000"]),
            Value::Nil,
            "round {round}: the lock is held by A"
        );
        assert_eq!(leader.cmd(&["GET", &key]), Value::bulk("A"));
    }
    // The shift took effect: node 3's wall clock is about 3 s behind the replicated clock.
    let info = lagging.cmd(&["INFO", "clock"]).text();
    let offset: i64 = info
        .lines()
        .find_map(|l| l.strip_prefix("wall_clock_offset_ms:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no clock offset in {info}"));
    assert!((-4_000..=-2_000).contains(&offset), "{info}");
}

/// Goal (W3, one forward jump): a leader whose wall clock is an hour ahead expires no key
/// early on any replica, its clamped stamps are counted, and a new `EX 600` key lives.
/// Method: node 3 at +1 h; `SET k v EX 600` while node 1 leads; leadership moves to node 3,
/// which stamps writes; every node still has `k` and the new key, their TTLs within 600 s,
/// and node 3's `raft_clock_jumps_clamped_total` is positive.
#[test]
fn a_leader_an_hour_ahead_expires_nothing_early() {
    let c = skewed_cluster(3, "+1h");
    lead_with(&c, 1);
    c.wait_for_writes_everywhere();
    assert_eq!(
        c.client(1).cmd(&["SET", "k", "v", "EX", "600"]),
        Value::ok()
    );
    lead_with(&c, 3);
    let mut skewed = c.client(3);
    harness::wait_until("a write through node 3", || {
        skewed.cmd(&["SET", "k2", "v", "EX", "600"]) == Value::ok()
    });
    for i in 0..20 {
        assert_eq!(skewed.cmd(&["SET", &format!("w{i}"), "x"]), Value::ok());
    }
    for id in c.ids() {
        let mut conn = c.client(id);
        for key in ["k", "k2"] {
            assert_eq!(
                conn.cmd(&["GET", key]),
                Value::bulk("v"),
                "{key} on node {id}"
            );
            match conn.cmd(&["TTL", key]) {
                Value::Int(t) => assert!((570..=600).contains(&t), "TTL {key} on {id}: {t}"),
                other => panic!("TTL {key} on {id}: {other:?}"),
            }
        }
    }
    // Every replica holds the same state as the leader at the same offset (the leader's
    // ticks move both on, so this retries until two reads fall between the same records).
    for id in c.ids() {
        let (mut conn, mut at_leader) = (c.client(id), c.client(3));
        harness::wait_until(&format!("node {id}'s digest to match the leader's"), || {
            let d = conn.cmd(&["RAFT", "DIGEST"]);
            matches!(&d, Value::Array(a) if a.len() == 2) && d == at_leader.cmd(&["RAFT", "DIGEST"])
        });
    }
    let clamped = sample(
        &harness::scrape(c.metrics_port(3)),
        "raft_clock_jumps_clamped_total",
    );
    assert!(clamped.is_some_and(|n| n >= 1.0), "clamped: {clamped:?}");
}
