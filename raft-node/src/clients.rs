//! The node's registry of live client connections, behind `CLIENT LIST`, `CLIENT INFO` and
//! `CLIENT KILL`.
//!
//! Each connection registers a [`ClientEntry`] when it is accepted and removes it when it
//! ends. The connection loop updates the entry once per request with two relaxed atomic
//! stores (the time and the command), so the hot path never takes the registry's lock; the
//! name, protocol and transaction state are copied after each batch. The lock is taken only to
//! add or remove a connection and by the introspection commands.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use bytes::Bytes;
use tokio::sync::Notify;

use crate::resp::Proto;

/// No command yet (a connection that sent nothing), in [`ClientEntry`]'s command slot.
const NO_COMMAND: usize = usize::MAX;

/// One live connection as the introspection commands see it.
#[derive(Debug)]
pub struct ClientEntry {
    /// The connection's id (`CLIENT ID`).
    pub id: u64,
    /// The client's address.
    pub addr: SocketAddr,
    /// The address of this node it connected to.
    pub laddr: SocketAddr,
    started: Instant,
    /// Milliseconds from `started` to the start of the last request.
    last_ms: AtomicU64,
    /// The last request's index in the command table ([`NO_COMMAND`] before any).
    last_cmd: AtomicUsize,
    /// 2 or 3.
    resp: AtomicU8,
    /// Commands queued in an open `MULTI`, or -1 outside one.
    multi: AtomicI64,
    name: Mutex<Option<Bytes>>,
    killed: AtomicBool,
    kill: Notify,
}

impl ClientEntry {
    /// Records that a request for the command at `cmd` (an index into the command table)
    /// starts now.
    pub fn touch(&self, cmd: Option<usize>) {
        let ms = self.started.elapsed().as_millis() as u64;
        self.last_ms.store(ms, Ordering::Relaxed);
        self.last_cmd
            .store(cmd.unwrap_or(NO_COMMAND), Ordering::Relaxed);
    }

    /// Copies the connection's state that changes only with a few commands, after a batch.
    pub fn sync(&self, proto: Proto, name: Option<&Bytes>, multi: Option<usize>) {
        let resp = match proto {
            Proto::Resp2 => 2,
            Proto::Resp3 => 3,
        };
        self.resp.store(resp, Ordering::Relaxed);
        self.multi
            .store(multi.map_or(-1, |n| n as i64), Ordering::Relaxed);
        let mut current = lock(&self.name);
        if current.as_ref() != name {
            *current = name.cloned();
        }
    }

    /// Whether `CLIENT KILL` chose this connection.
    pub fn is_killed(&self) -> bool {
        self.killed.load(Ordering::Acquire)
    }

    /// Resolves once the connection is killed (at once if it already is).
    pub async fn killed(&self) {
        // `Notify` keeps one permit, so a kill between the check and the wait is not lost.
        if !self.is_killed() {
            self.kill.notified().await;
        }
    }

    fn kill(&self) {
        self.killed.store(true, Ordering::Release);
        self.kill.notify_one();
    }

    /// The connection's line of `CLIENT LIST`, Redis's fields first (those this node cannot
    /// know, such as buffer sizes and the file descriptor, are left out), then the read mode.
    /// `cmd_name` names a command-table index.
    pub fn line(&self, cmd_name: impl Fn(usize) -> &'static str, read_mode: &str) -> String {
        let age = self.started.elapsed();
        let idle_ms = (age.as_millis() as u64).saturating_sub(self.last_ms.load(Ordering::Relaxed));
        let multi = self.multi.load(Ordering::Relaxed);
        let flags = if multi >= 0 { "x" } else { "N" };
        let cmd = match self.last_cmd.load(Ordering::Relaxed) {
            NO_COMMAND => "NULL",
            i => cmd_name(i),
        };
        let name = lock(&self.name)
            .as_deref()
            .map(printable)
            .unwrap_or_default();
        format!(
            "id={} addr={} laddr={} name={name} age={} idle={} flags={flags} db=0 sub=0 psub=0 \
             ssub=0 multi={multi} watch=0 qbuf=0 obl=0 oll=0 omem=0 events=r cmd={cmd} \
             user=default redir=-1 resp={} readmode={read_mode}\n",
            self.id,
            self.addr,
            self.laddr,
            age.as_secs(),
            idle_ms / 1000,
            self.resp.load(Ordering::Relaxed),
        )
    }
}

/// A name as `CLIENT LIST` shows it: one word of printable characters (Redis refuses other
/// names in `CLIENT SETNAME`; `HELLO SETNAME` may still bring one, so they are replaced).
fn printable(b: &[u8]) -> String {
    String::from_utf8_lossy(b)
        .chars()
        .map(|c| if c.is_control() || c == ' ' { '?' } else { c })
        .collect()
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing panics while these locks are held; a poisoned one still guards whole values.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Which connections `CLIENT KILL` closes: all the filters given must match.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KillFilter {
    /// `ID id`.
    pub id: Option<u64>,
    /// `ADDR ip:port` (the old form `CLIENT KILL ip:port` too).
    pub addr: Option<String>,
    /// `LADDR ip:port`.
    pub laddr: Option<String>,
    /// Spare the connection asking (`SKIPME yes`, the default of the filter form).
    pub skip_me: bool,
}

/// The live connections of one node, by id.
#[derive(Debug, Default)]
pub struct Clients {
    map: Mutex<BTreeMap<u64, Arc<ClientEntry>>>,
}

impl Clients {
    /// Registers a new connection; it stays listed until [`Registration`] is dropped.
    pub fn register(
        self: &Arc<Self>,
        id: u64,
        addr: SocketAddr,
        laddr: SocketAddr,
    ) -> Registration {
        let entry = Arc::new(ClientEntry {
            id,
            addr,
            laddr,
            started: Instant::now(),
            last_ms: AtomicU64::new(0),
            last_cmd: AtomicUsize::new(NO_COMMAND),
            resp: AtomicU8::new(2),
            multi: AtomicI64::new(-1),
            name: Mutex::new(None),
            killed: AtomicBool::new(false),
            kill: Notify::new(),
        });
        lock(&self.map).insert(id, entry.clone());
        Registration {
            clients: self.clone(),
            entry,
        }
    }

    /// The connections with these ids (every connection for `None`), by id.
    pub fn list(&self, ids: Option<&[u64]>) -> Vec<Arc<ClientEntry>> {
        let map = lock(&self.map);
        match ids {
            None => map.values().cloned().collect(),
            Some(ids) => {
                let mut found: Vec<_> = ids.iter().filter_map(|i| map.get(i).cloned()).collect();
                found.sort_by_key(|e| e.id);
                found.dedup_by_key(|e| e.id);
                found
            }
        }
    }

    /// Marks every connection `filter` matches as killed (`me` asks); how many. Each closes
    /// once its current batch is answered (at once when it is waiting for input or in `WAIT`).
    pub fn kill(&self, filter: &KillFilter, me: u64) -> usize {
        let map = lock(&self.map);
        let mut n = 0;
        for e in map.values() {
            let hit = filter.id.is_none_or(|id| id == e.id)
                && filter
                    .addr
                    .as_ref()
                    .is_none_or(|a| *a == e.addr.to_string())
                && filter
                    .laddr
                    .as_ref()
                    .is_none_or(|a| *a == e.laddr.to_string())
                && !(filter.skip_me && e.id == me);
            if hit && !e.is_killed() {
                e.kill();
                n += 1;
            }
        }
        n
    }

    /// Ends every connection's waits (`WAIT`, reading input): the node is stopping.
    pub fn kill_all(&self) {
        for e in lock(&self.map).values() {
            e.kill();
        }
    }
}

/// A connection's place in [`Clients`]; dropping it removes the connection from the list.
pub struct Registration {
    clients: Arc<Clients>,
    /// The connection's entry.
    pub entry: Arc<ClientEntry>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        lock(&self.clients.map).remove(&self.entry.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn entries_live_as_long_as_their_registration() {
        let clients = Arc::new(Clients::default());
        let a = clients.register(1, addr("127.0.0.1:5000"), addr("127.0.0.1:7001"));
        let b = clients.register(2, addr("127.0.0.1:5001"), addr("127.0.0.1:7001"));
        assert_eq!(clients.list(None).len(), 2);
        assert_eq!(
            clients
                .list(Some(&[2, 9, 2]))
                .iter()
                .map(|e| e.id)
                .collect::<Vec<_>>(),
            vec![2],
            "unknown ids are skipped, repeated ones listed once"
        );
        drop(a);
        assert_eq!(
            clients.list(None).iter().map(|e| e.id).collect::<Vec<_>>(),
            vec![2]
        );
        drop(b);
        assert!(clients.list(None).is_empty());
    }

    #[test]
    fn a_line_shows_the_connection_as_redis_does() {
        let clients = Arc::new(Clients::default());
        let r = clients.register(7, addr("10.0.0.2:40000"), addr("10.0.0.1:7001"));
        let names = |i: usize| ["get", "set"][i];
        let line = r.entry.line(names, "linearizable");
        assert!(
            line.starts_with(
                "id=7 addr=10.0.0.2:40000 laddr=10.0.0.1:7001 name= age=0 idle=0 flags=N db=0"
            ),
            "{line}"
        );
        assert!(line.contains(" cmd=NULL ") && line.contains(" resp=2 ") && line.ends_with('\n'));
        r.entry.touch(Some(1));
        r.entry
            .sync(Proto::Resp3, Some(&Bytes::from_static(b"my app")), Some(2));
        let line = r.entry.line(names, "sequential");
        assert!(line.contains(" name=my?app "), "{line}");
        assert!(
            line.contains(" flags=x ") && line.contains(" multi=2 "),
            "{line}"
        );
        assert!(
            line.contains(" cmd=set ") && line.contains(" resp=3 "),
            "{line}"
        );
        assert!(line.ends_with("readmode=sequential\n"), "{line}");
    }

    #[tokio::test]
    async fn kill_marks_the_matching_connections_once() {
        let clients = Arc::new(Clients::default());
        let a = clients.register(1, addr("127.0.0.1:5000"), addr("127.0.0.1:7001"));
        let b = clients.register(2, addr("127.0.0.1:5001"), addr("127.0.0.1:7002"));
        let by_addr = KillFilter {
            addr: Some("127.0.0.1:5001".into()),
            ..KillFilter::default()
        };
        assert_eq!(clients.kill(&by_addr, 1), 1);
        assert!(b.entry.is_killed() && !a.entry.is_killed());
        // Resolves at once: the kill left a permit or set the flag.
        b.entry.killed().await;
        assert_eq!(clients.kill(&by_addr, 1), 0, "already killed");
        let me = KillFilter {
            id: Some(1),
            skip_me: true,
            ..KillFilter::default()
        };
        assert_eq!(clients.kill(&me, 1), 0, "SKIPME spares the caller");
        let laddr = KillFilter {
            laddr: Some("127.0.0.1:7001".into()),
            ..KillFilter::default()
        };
        assert_eq!(clients.kill(&laddr, 2), 1);
        assert!(a.entry.is_killed());
    }
}
