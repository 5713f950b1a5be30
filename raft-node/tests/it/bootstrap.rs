//! Formatting and lost disks with real processes (W1, W2): a cluster grown online from one
//! founding voter; the founder's disk is emptied and it is started again with its unchanged
//! configuration file. It must refuse to start (it would otherwise lead a one-voter fork of its
//! own), the survivors go on, and the documented replacement (remove its old key, start it
//! with `--join` on the same file, add it again) brings it back with every acknowledged write.

use crate::harness::{wait_until, Cluster, Value};
use crate::membership::{change, directory_of, voter_ids};

/// Writes `k{from}..k{to}` through whichever node leads; every write must be acknowledged.
fn write_through_leader(c: &Cluster, from: u32, to: u32) {
    for i in from..to {
        let (key, value) = (format!("k{i}"), format!("v{i}"));
        wait_until(&format!("SET {key} to be acknowledged"), || {
            let leader = c.wait_for_leader();
            c.client(leader).cmd(&["SET", &key, &value]) == Value::Simple("OK".into())
        });
    }
}

#[test]
fn an_emptied_founder_refuses_to_start_and_the_documented_steps_bring_it_back() {
    let mut c = Cluster::prepare_with_joiners(1, 2, "");
    c.restart_all();
    c.wait_for_writes_everywhere();
    for id in ["2", "3"] {
        change(&c, &["RAFT", "ADD-VOTER", id]);
    }
    for id in 1..=3 {
        wait_until(&format!("node {id} to act on three voters"), || {
            voter_ids(&c, id) == [1, 2, 3]
        });
    }
    let founding = directory_of(&c, 1, 1);
    assert_eq!(founding, c.founding_directory(1), "formatted with its id");
    write_through_leader(&c, 0, 50);

    // The founder's disk is emptied; it is started again with its unchanged file.
    c.kill(1);
    c.wipe(1);
    let (started, output) = c.run_to_exit_with(1, &c.config_text(1));
    assert!(!started, "the emptied founder started:\n{output}");
    assert!(
        output.contains("is empty, but [[voters]] names replica 1")
            && output.contains("RAFT REMOVE-VOTER 1"),
        "the refusal names the recovery steps:\n{output}"
    );

    // The survivors elect a leader among themselves and keep acknowledging writes.
    wait_until("a leader among nodes 2 and 3", || {
        [2, 3].iter().any(|id| {
            c.status(*id)
                .is_some_and(|s| s.get("role").is_some_and(|r| r == "leader"))
        })
    });
    write_through_leader(&c, 50, 80);

    // The documented replacement: remove the old key, start it with --join on its own
    // unchanged file (an observer with a new directory), add it again.
    change(&c, &["RAFT", "REMOVE-VOTER", "1"]);
    c.rejoin_with_own_file(1, &[c.port(2), c.port(3)]);
    c.start_one(1);
    change(&c, &["RAFT", "ADD-VOTER", "1"]);
    for id in 1..=3 {
        wait_until(&format!("node {id} to act on three voters again"), || {
            voter_ids(&c, id) == [1, 2, 3]
        });
    }
    let leader = c.wait_for_leader();
    let now = directory_of(&c, leader, 1);
    assert!(
        !now.is_empty() && now != founding && now != "static",
        "node 1 votes with a new directory: {now}"
    );
    write_through_leader(&c, 80, 100);
    for id in 1..=3 {
        crate::membership::all_keys_on(&c, id, 100);
    }
}
