//! A lock service on raft-core: named locks with a time to live, fencing tokens, and the
//! write outcomes used as they must be.
//!
//! Run it with `cargo run -p raft-core --example lock_service`. Three replicas in one process
//! (in-memory transport and storage). Client A takes lock `db` through a follower and gets a
//! fencing token (the log offset of its grant, which only grows); client B is refused while A
//! holds it; A releases; B takes it with a larger token. Then A takes another lock and lets its
//! time to live run out, and B takes that one too.
//!
//! Two points a real service must get right, both shown here:
//!
//! - **Time comes from the leader.** Expiry is judged by a clock carried in the records, which
//!   the leader stamps as it orders them (the driver's [`Stamp`] hook), never by the clock of
//!   the replica applying them: every replica decides the same, and a follower's slow clock
//!   cannot make a lock born expired.
//! - **An unknown outcome is resolved by reading, not by retrying.** A client whose acquire
//!   came back unknown reads (linearizably) whether it holds the lock before doing anything.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::{BufMut, Bytes, BytesMut};
use raft_core::driver::{DriverOptions, Node, Parts, ReadMode, Stamp, WriteError};
use raft_core::io::{StateMachine, StateMachineError};
use raft_core::mem::transport::MemNetwork;
use raft_core::mem::{MemElectionStore, MemLog, MemSnapshots};
use raft_core::snapshot_stream::{BytesReader, SnapshotReader};
use raft_core::{Config, DirectoryId, Offset, Record, RecordKind, ReplicaId, Voter, VoterSet};

/// A command record: `[stamp u64][kind u8][ttl_ms u64][owner len u8][owner][lock name]`.
/// The stamp is written by the leader (followers send 0).
fn command(kind: u8, owner: &str, lock: &str, ttl_ms: u64) -> Bytes {
    let mut b = BytesMut::new();
    b.put_u64_le(0);
    b.put_u8(kind);
    b.put_u64_le(ttl_ms);
    b.put_u8(owner.len() as u8);
    b.put_slice(owner.as_bytes());
    b.put_slice(lock.as_bytes());
    b.freeze()
}
const ACQUIRE: u8 = 1;
const RELEASE: u8 = 2;

/// The leader's clock, written into the first eight bytes of every command it proposes.
#[derive(Debug)]
struct LeaderClock {
    start: std::time::Instant,
}

impl Stamp for LeaderClock {
    fn stamp(&self, payload: Bytes) -> Bytes {
        if payload.len() < 8 {
            return payload;
        }
        // Milliseconds on this process's monotonic clock: the example's replicas share it. A
        // service across machines uses wall time, bounded and never going back (raft-node's
        // leader clock shows how).
        let now = self.start.elapsed().as_millis() as u64;
        let mut b = BytesMut::from(&payload[..]);
        b[..8].copy_from_slice(&now.to_le_bytes());
        b.freeze()
    }
}

/// Who holds a lock, until when (record clock), and the token of the grant.
#[derive(Clone, Debug)]
struct Held {
    owner: String,
    until: u64,
    token: u64,
}

#[derive(Default)]
struct Locks {
    state: Mutex<(BTreeMap<String, Held>, u64, Offset)>, // locks, record clock, applied
}

impl Locks {
    fn holder(&self, lock: &str) -> Option<Held> {
        let s = self.state.lock().unwrap();
        s.0.get(lock).filter(|h| h.until > s.1).cloned()
    }
}

#[async_trait]
impl StateMachine for Locks {
    async fn applied(&self) -> Offset {
        self.state.lock().unwrap().2
    }

    async fn apply(
        &self,
        records: &[Record],
        responses: &mut Vec<Bytes>,
    ) -> Result<(), StateMachineError> {
        let mut s = self.state.lock().unwrap();
        for r in records {
            s.2 = r.offset.next();
            let p = &r.payload;
            if r.kind != RecordKind::Data || p.len() < 18 {
                responses.push(Bytes::new());
                continue;
            }
            let stamp = u64::from_le_bytes(p[..8].try_into().unwrap());
            s.1 = s.1.max(stamp); // the record clock never goes back
            let (kind, ttl) = (p[8], u64::from_le_bytes(p[9..17].try_into().unwrap()));
            let owner_len = p[17] as usize;
            let Some(owner) = p.get(18..18 + owner_len) else {
                responses.push(Bytes::from_static(b"malformed"));
                continue;
            };
            let owner = String::from_utf8_lossy(owner).into_owned();
            let lock = String::from_utf8_lossy(&p[18 + owner_len..]).into_owned();
            let clock = s.1;
            let live = s.0.get(&lock).filter(|h| h.until > clock).cloned();
            let answer = match (kind, live) {
                (ACQUIRE, None) => {
                    let token = r.offset.0;
                    let held = Held {
                        owner,
                        until: clock + ttl,
                        token,
                    };
                    s.0.insert(lock, held);
                    format!("granted {token}")
                }
                (ACQUIRE, Some(h)) if h.owner == owner => format!("granted {}", h.token),
                (ACQUIRE, Some(h)) => format!("held by {}", h.owner),
                (RELEASE, Some(h)) if h.owner == owner => {
                    s.0.remove(&lock);
                    "released".to_string()
                }
                _ => "not held".to_string(),
            };
            responses.push(Bytes::from(answer));
        }
        Ok(())
    }

    async fn snapshot(&self) -> Result<Box<dyn SnapshotReader>, StateMachineError> {
        // Kept short for the example: a real service serializes the locks and the clock here.
        Ok(Box::new(BytesReader::new(Bytes::new())))
    }

    async fn restore(
        &self,
        applied: Offset,
        _data: &mut dyn SnapshotReader,
    ) -> Result<(), StateMachineError> {
        Err(StateMachineError {
            offset: applied,
            reason: "this example never snapshots".into(),
        })
    }
}

/// Takes `lock` for `owner` through `node`; on an unknown outcome, reads whether it holds it.
async fn acquire(node: &Node, locks: &Locks, owner: &str, lock: &str, ttl_ms: u64) -> String {
    match node.write(command(ACQUIRE, owner, lock, ttl_ms)).await {
        Ok(c) => String::from_utf8_lossy(&c.response).into_owned(),
        Err(e) if e.is_definite_failure() => format!("refused, nothing applied: {e}"),
        Err(WriteError::Unknown(_)) | Err(_) => {
            // Maybe granted: never retry blindly, look.
            match node.read(ReadMode::Linearizable).await {
                Ok(_) => match locks.holder(lock) {
                    Some(h) if h.owner == owner => format!("granted {}", h.token),
                    _ => "not granted".into(),
                },
                Err(e) => format!("unknown: {e}"),
            }
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let ids = [ReplicaId(1), ReplicaId(2), ReplicaId(3)];
    let founding = VoterSet::from_entries(ids.iter().map(|id| {
        let directory = Some(DirectoryId(0x10C_0000 + u128::from(id.0)));
        (
            *id,
            Voter {
                directory,
                endpoint: String::new(),
            },
        )
    }))?;
    let net = MemNetwork::new();
    let clock: Arc<dyn Stamp> = Arc::new(LeaderClock {
        start: std::time::Instant::now(),
    });
    let (mut nodes, mut machines) = (Vec::new(), Vec::new());
    for id in ids {
        let mut cfg = Config::new(id, ids);
        cfg.directory = founding.get(id).and_then(|v| v.directory);
        cfg.election_timeout = Duration::from_millis(150);
        cfg.fetch_timeout = Duration::from_millis(600);
        cfg.fetch_max_wait = Duration::from_millis(200);
        cfg.snapshot_after_records = 0;
        let snapshots = Arc::new(MemSnapshots::new());
        raft_core::driver::format(&*snapshots, &founding).await?;
        let locks = Arc::new(Locks::default());
        let parts = Parts {
            log: Arc::new(MemLog::new()),
            election: Arc::new(MemElectionStore::new()),
            transport: Arc::new(net.endpoint(id)),
            state_machine: locks.clone(),
            snapshots,
        };
        let options = DriverOptions {
            seed: u64::from(id.0),
            stamp: Some(clock.clone()),
            ..DriverOptions::default()
        };
        nodes.push(Node::start(cfg.validate()?, parts, options).await?);
        machines.push(locks);
    }
    let mut state = nodes[0].watch();
    let leader = tokio::time::timeout(
        Duration::from_secs(10),
        state.wait_for(|s| s.leader.is_some() && s.high_watermark > Offset::ZERO),
    )
    .await??
    .leader
    .expect("a leader");
    let f = (0..3).find(|i| ids[*i] != leader).expect("a follower");
    let (node, locks) = (&nodes[f], &machines[f]);

    let a = acquire(node, locks, "client-a", "db", 10_000).await;
    let b = acquire(node, locks, "client-b", "db", 10_000).await;
    println!("A: {a}; B while A holds it: {b}");
    assert!(a.starts_with("granted") && b == "held by client-a");
    let released = node.write(command(RELEASE, "client-a", "db", 0)).await?;
    let b = acquire(node, locks, "client-b", "db", 10_000).await;
    println!(
        "A {}; then B: {b}",
        String::from_utf8_lossy(&released.response)
    );
    let token = |s: &str| s.trim_start_matches("granted ").parse::<u64>().unwrap_or(0);
    assert!(token(&b) > token(&a), "fencing tokens only grow");

    // A lock whose time to live runs out is free again, by the leader's clock.
    let a = acquire(node, locks, "client-a", "cache", 300).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    let b = acquire(node, locks, "client-b", "cache", 300).await;
    println!("A takes cache for 300 ms: {a}; B after 400 ms: {b}");
    assert!(b.starts_with("granted"), "the expired lock is free");

    for n in &nodes {
        n.shutdown().await;
    }
    Ok(())
}
