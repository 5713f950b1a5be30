//! Membership with real processes: observers added as voters with `RAFT ADD-VOTER`, the leader
//! removed with `RAFT REMOVE-VOTER`, and a machine whose disk was lost replaced by the
//! documented steps (remove the old key, start it empty, add it again), while every
//! acknowledged write stays readable on every node.

use crate::harness::{wait_until, Cluster, Value};

/// The `RAFT VOTERS` lines of node `id` that start with `voter:`.
pub(crate) fn voters(c: &Cluster, id: u32) -> Vec<String> {
    c.client(id)
        .cmd(&["RAFT", "VOTERS"])
        .text()
        .lines()
        .filter(|l| l.starts_with("voter:"))
        .map(str::to_string)
        .collect()
}

pub(crate) fn voter_ids(c: &Cluster, id: u32) -> Vec<u32> {
    voters(c, id)
        .iter()
        .filter_map(|l| l["voter:".len()..].split(' ').next()?.parse().ok())
        .collect()
}

/// The directory a node's voter entry names, on node `at`.
pub(crate) fn directory_of(c: &Cluster, at: u32, id: u32) -> String {
    let prefix = format!("voter:{id} directory=");
    voters(c, at)
        .iter()
        .find_map(|l| {
            l.strip_prefix(&prefix)?
                .split(' ')
                .next()
                .map(str::to_string)
        })
        .unwrap_or_default()
}

/// Sends a RAFT change to the leader until it is accepted (`TRYAGAIN` while the observer
/// catches up or an earlier change commits); returns the leader it was accepted on.
pub(crate) fn change(c: &Cluster, args: &[&str]) -> u32 {
    let mut accepted = 0;
    wait_until(&format!("{args:?} to be accepted"), || {
        let leader = c.wait_for_leader();
        match c.client(leader).cmd(args) {
            Value::Simple(s) if s == "OK" => {
                accepted = leader;
                true
            }
            Value::Error(e) if e.starts_with("TRYAGAIN") || e.starts_with("ERR not the leader") => {
                false
            }
            other => panic!("{args:?} answered {other:?}"),
        }
    });
    accepted
}

/// Every key `k0..k{n}` reads its value on node `id` (a linearizable read).
pub(crate) fn all_keys_on(c: &Cluster, id: u32, n: u32) {
    let mut client = c.client(id);
    for i in 0..n {
        let key = format!("k{i}");
        assert_eq!(
            client.cmd(&["GET", &key]),
            Value::bulk(&format!("v{i}")),
            "{key} on node {id}"
        );
    }
}

#[test]
fn observers_become_voters_the_leader_leaves_and_a_wiped_voter_is_replaced() {
    let mut c = Cluster::prepare_with_observers(3, 2, "");
    c.restart_all();
    let leader = c.wait_for_leader();
    let mut written = 0;
    let mut write = |c: &Cluster, n: u32| {
        for _ in 0..n {
            let leader = c.wait_for_leader();
            let (k, v) = (format!("k{written}"), format!("v{written}"));
            let mut client = c.client(leader);
            wait_until(&format!("{k} to be written"), || {
                client.cmd(&["SET", &k, &v]) == Value::ok()
            });
            written += 1;
        }
        written
    };
    write(&c, 20);
    assert_eq!(voter_ids(&c, leader), [1, 2, 3]);
    // Grow from three voters to five.
    for id in [4, 5] {
        change(&c, &["RAFT", "ADD-VOTER", &id.to_string()]);
    }
    for id in 1..=5 {
        wait_until(&format!("node {id} to act on five voters"), || {
            voter_ids(&c, id) == [1, 2, 3, 4, 5]
        });
    }
    assert_ne!(
        directory_of(&c, 1, 4),
        "static",
        "an added voter names its directory"
    );
    write(&c, 20);
    // The leader removes itself: another node leads, nothing is lost.
    let old = c.wait_for_leader();
    change(&c, &["RAFT", "REMOVE-VOTER", &old.to_string()]);
    wait_until("another leader", || c.wait_for_leader() != old);
    let n = write(&c, 20);
    for id in 1..=5 {
        all_keys_on(&c, id, n);
    }
    // Node 5's disk is lost: kill -9, wipe, start empty. It comes back with a new directory.
    let before = directory_of(&c, c.wait_for_leader(), 5);
    c.kill(5);
    c.wipe(5);
    c.start_one(5);
    change(&c, &["RAFT", "REMOVE-VOTER", "5"]);
    // The documented step: RAFT VOTERS on the leader shows the replacement fetching as an
    // observer with its new directory before it is added.
    wait_until("node 5 to fetch with its new directory", || {
        let leader = c.wait_for_leader();
        let text = c.client(leader).cmd(&["RAFT", "VOTERS"]).text();
        text.lines().any(|l| {
            l.starts_with("observer:5 ") && !l.contains(&before) && !l.contains("directory=-")
        })
    });
    change(&c, &["RAFT", "ADD-VOTER", "5"]);
    let leader = c.wait_for_leader();
    wait_until("node 5 to vote with its new directory", || {
        let now = directory_of(&c, leader, 5);
        !now.is_empty() && now != before
    });
    let n = write(&c, 20);
    for id in 1..=5 {
        all_keys_on(&c, id, n);
    }
}

/// Goal: a fourth node joins a running `raft-node dev` cluster: started with `--nodes 4
/// --voters 3`, node 4 is an observer until `RAFT ADD-VOTER 4` on the leader, and then every
/// node acts on four voters.
#[test]
fn a_dev_cluster_adds_a_fourth_node_while_running() {
    let dir = tempfile::tempdir().unwrap();
    let base = crate::harness::free_base_port_for(4);
    let mut dev =
        crate::harness::Dev::start_with(dir.path(), base, &["--nodes", "4", "--voters", "3"]);
    let banner = dev.output();
    assert!(banner.contains("3 voters and 1 observer"), "{banner}");
    assert!(banner.contains("RAFT ADD-VOTER 4"), "{banner}");
    let leader = dev.leader_port;
    wait_until("node 4 to be added", || {
        let mut c = crate::harness::Client::connect(leader).unwrap();
        match c.cmd(&["RAFT", "ADD-VOTER", "4"]) {
            Value::Simple(s) => s == "OK",
            Value::Error(e) if e.starts_with("TRYAGAIN") => false,
            other => panic!("RAFT ADD-VOTER 4 answered {other:?}"),
        }
    });
    for id in 1..=4u16 {
        wait_until(&format!("node {id} to act on four voters"), || {
            let mut c = crate::harness::Client::connect(base + id).unwrap();
            let text = c.cmd(&["RAFT", "VOTERS"]).text();
            text.lines().filter(|l| l.starts_with("voter:")).count() == 4
        });
    }
    // Every voter, the three dev formatted and the one added online, names its directory.
    let mut c = crate::harness::Client::connect(leader).unwrap();
    let text = c.cmd(&["RAFT", "VOTERS"]).text();
    let voter_lines: Vec<&str> = text.lines().filter(|l| l.starts_with("voter:")).collect();
    assert_eq!(voter_lines.len(), 4, "{text}");
    for line in &voter_lines {
        assert!(!line.contains("directory=static"), "{line}");
    }
    // Removing a follower online keeps writes going.
    let follower = (1..=4u16)
        .find(|id| base + id != leader)
        .expect("a follower");
    let removed = c.cmd(&["RAFT", "REMOVE-VOTER", &follower.to_string()]);
    assert_eq!(removed, Value::Simple("OK".into()));
    for i in 0..20 {
        let key = format!("after-removal-{i}");
        assert_eq!(c.cmd(&["SET", &key, "v"]), Value::Simple("OK".into()));
    }
    assert!(
        dev.terminate(),
        "dev did not exit cleanly:\n{}",
        dev.output()
    );
}

/// A machine no running node's configuration names joins with `run --join`: its
/// configuration lists no voters; it asks a closed port (its own, not yet listening) and then
/// node 2 for `RAFT VOTERS` and starts as an observer of the voters named there. The voters
/// accept its certificate (same CA, `replica-4.raft`) and learn its address from its
/// connection, `RAFT ADD-VOTER 4` records that address as its endpoint, and the endpoint is
/// how the others reach it. Restarted with no node to ask, node 4 starts from the voters its
/// join saved and catches up. Then, with the leader killed, the two remaining original voters
/// can only elect a leader with node 4's vote (three of four). `RAFT UPDATE-VOTER` gives a
/// configured voter an endpoint the same way.
#[test]
fn a_machine_no_configuration_names_joins_and_its_vote_elects_a_leader() {
    let mut c = Cluster::prepare_with_joiners(3, 1, "");
    let own_port = c.port(4);
    c.join_through(4, &[own_port, c.port(2)]);
    c.restart_all();
    let mut written = 0;
    let mut write = |c: &Cluster, n: u32| {
        for _ in 0..n {
            let (k, v) = (format!("k{written}"), format!("v{written}"));
            wait_until(&format!("{k} to be written"), || {
                let leader = c.wait_for_leader();
                c.client(leader).cmd(&["SET", &k, &v]) == Value::ok()
            });
            written += 1;
        }
        written
    };
    write(&c, 10);
    change(&c, &["RAFT", "ADD-VOTER", "4"]);
    for id in 1..=4 {
        wait_until(&format!("node {id} to act on four voters"), || {
            voter_ids(&c, id) == [1, 2, 3, 4]
        });
    }
    let leader = c.wait_for_leader();
    let entry = voters(&c, leader)
        .into_iter()
        .find(|l| l.starts_with("voter:4 "))
        .unwrap();
    assert!(
        entry.contains(&format!("endpoint=127.0.0.1:{}", c.peer_port(4))),
        "node 4's endpoint is the address it listens on: {entry}"
    );
    // A configured voter gets an endpoint too, recorded in the set on every node; an id that
    // is not a voter is refused.
    let node1 = format!("endpoint=127.0.0.1:{}", c.peer_port(1));
    change(
        &c,
        &["RAFT", "UPDATE-VOTER", "1", &node1["endpoint=".len()..]],
    );
    for id in 1..=4 {
        wait_until(&format!("node {id} to show node 1's endpoint"), || {
            voters(&c, id)
                .iter()
                .any(|l| l.starts_with("voter:1 ") && l.ends_with(&node1))
        });
    }
    let refused = c
        .client(c.wait_for_leader())
        .cmd(&["RAFT", "UPDATE-VOTER", "9", "127.0.0.1:1"]);
    assert!(refused.is_error("ERR r9 is not a voter"), "{refused:?}");
    // No node to ask: node 4 starts from the voters its join saved.
    c.kill(4);
    c.join_through(4, &[own_port]);
    c.start_one(4);
    let n = write(&c, 10);
    all_keys_on(&c, 4, n);
    assert!(
        c.log_text(4)
            .contains("using the voters saved at the last join"),
        "node 4 fell back on its saved voters"
    );
    let leader = c.wait_for_leader();
    c.kill(leader);
    wait_until("a leader among the survivors", || {
        c.wait_for_leader() != leader
    });
    let n = write(&c, 10);
    for id in (1..=4).filter(|id| *id != leader) {
        all_keys_on(&c, id, n);
    }
}

/// What the background client saw while the voters changed.
#[derive(Default)]
struct Traffic {
    /// Keys whose SET was answered `+OK`.
    acknowledged: Vec<u32>,
    /// Reads of an acknowledged key, and those that did not return its value.
    reads: u32,
    failed_reads: Vec<String>,
}

/// Goal (issue: the end-to-end acceptance of online membership): a cluster grows from one
/// node to three and to five and shrinks back to three while a client writes, then a voter is
/// killed with SIGKILL, its directory wiped, and it is replaced by the documented steps; no
/// acknowledged write is lost and reads are served throughout. Method: node 1 starts alone (a
/// one-voter cluster), nodes 2 to 5 are machines it was not configured with; one thread
/// writes through node 1 (the leader throughout: only followers are removed or killed) and
/// reads the latest acknowledged key back through node 1 and, once it votes, node 3 (neither
/// is ever stopped): every such read must return the value written. At the end every
/// acknowledged key is read on every voter.
#[test]
fn grows_one_three_five_shrinks_to_three_and_replaces_a_lost_voter_while_a_client_writes() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};

    let mut c = Cluster::prepare_with_joiners(1, 4, "");
    c.restart_all();
    c.wait_for_writes_everywhere();
    let traffic = Arc::new(Mutex::new(Traffic::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let node3_votes = Arc::new(AtomicBool::new(false));
    let (p1, p3) = (c.port(1), c.port(3));
    let client = {
        let (traffic, stop, node3_votes) = (traffic.clone(), stop.clone(), node3_votes.clone());
        std::thread::spawn(move || {
            let mut writer = crate::harness::Client::connect(p1).unwrap();
            let mut readers = [p1, p3].map(|p| crate::harness::Client::connect(p).unwrap());
            let mut n = 0u32;
            while !stop.load(Ordering::Relaxed) {
                let (k, v) = (format!("m{n}"), format!("v{n}"));
                match writer.cmd(&["SET", &k, &v]) {
                    Value::Simple(s) if s == "OK" => traffic.lock().unwrap().acknowledged.push(n),
                    // TRYAGAIN: nothing applied; anything else is not counted as written.
                    _ => {}
                }
                let latest = traffic.lock().unwrap().acknowledged.last().copied();
                if let Some(m) = latest {
                    let with_node3 = node3_votes.load(Ordering::Relaxed);
                    for r in readers.iter_mut().take(if with_node3 { 2 } else { 1 }) {
                        let got = r.cmd(&["GET", &format!("m{m}")]);
                        let mut t = traffic.lock().unwrap();
                        t.reads += 1;
                        if got != Value::bulk(&format!("v{m}")) {
                            t.failed_reads.push(format!("m{m}: {got:?}"));
                        }
                    }
                }
                n += 1;
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        })
    };
    let acknowledged = |t: &Mutex<Traffic>| t.lock().unwrap().acknowledged.len();
    let progress = |what: &str| {
        let before = acknowledged(&traffic);
        wait_until(&format!("writes to go on after {what}"), || {
            acknowledged(&traffic) >= before + 20
        });
    };
    let expect_voters = |c: &Cluster, on: &[u32], want: &[u32]| {
        for id in on {
            wait_until(&format!("node {id} to act on {want:?}"), || {
                voter_ids(c, *id) == want
            });
        }
    };
    // 1 -> 3 -> 5.
    for (id, want) in [
        (2, &[1, 2][..]),
        (3, &[1, 2, 3]),
        (4, &[1, 2, 3, 4]),
        (5, &[1, 2, 3, 4, 5]),
    ] {
        change(&c, &["RAFT", "ADD-VOTER", &id.to_string()]);
        expect_voters(&c, &[1, id], want);
        if id == 3 {
            node3_votes.store(true, Ordering::Relaxed);
        }
        progress(&format!("adding {id}"));
    }
    expect_voters(&c, &[1, 2, 3, 4, 5], &[1, 2, 3, 4, 5]);
    // 5 -> 3.
    for (id, want) in [(5, &[1, 2, 3, 4][..]), (4, &[1, 2, 3])] {
        change(&c, &["RAFT", "REMOVE-VOTER", &id.to_string()]);
        expect_voters(&c, &[1, 2, 3], want);
        progress(&format!("removing {id}"));
    }
    // Node 2's disk is lost: SIGKILL, wipe, remove its old key, start it empty, add it again.
    c.kill(2);
    c.wipe(2);
    change(&c, &["RAFT", "REMOVE-VOTER", "2"]);
    expect_voters(&c, &[1, 3], &[1, 3]);
    progress("removing the lost voter");
    c.start_one(2);
    change(&c, &["RAFT", "ADD-VOTER", "2"]);
    expect_voters(&c, &[1, 2, 3], &[1, 2, 3]);
    progress("replacing the lost voter");
    stop.store(true, Ordering::Relaxed);
    client.join().expect("the client thread");
    let t = traffic.lock().unwrap();
    assert!(
        t.failed_reads.is_empty(),
        "reads that failed: {:?}",
        t.failed_reads
    );
    assert!(t.reads >= 100, "only {} reads", t.reads);
    for id in [1, 2, 3] {
        let mut client = c.client(id);
        for n in &t.acknowledged {
            assert_eq!(
                client.cmd(&["GET", &format!("m{n}")]),
                Value::bulk(&format!("v{n}")),
                "acknowledged m{n} on node {id}"
            );
        }
    }
}
