//! `MULTI`, `EXEC`, `DISCARD`, `WATCH` and `UNWATCH`: between `MULTI` and `EXEC` a
//! connection's commands are checked and queued (each answered `QUEUED`), and `EXEC` proposes
//! them as one record, which every replica applies at once (see `kv::transaction`). A command
//! refused while queueing (an unknown one, a wrong argument, one not allowed in a transaction)
//! makes `EXEC` answer `EXECABORT` and apply nothing.
//!
//! `WATCH` records each key with the applied offset of the map after the connection's read
//! barrier (the server does that, see `ReadOp::Watch`); `EXEC` carries the watches in its
//! record and every replica decides alike whether a watched key changed (see `kv`'s "Versions
//! and WATCH"). As in Redis, `EXEC` and `DISCARD` forget the watches, `WATCH` inside `MULTI`
//! is an error that does not abort the transaction, and `UNWATCH` inside it is queued.

use bytes::Bytes;

use crate::commands::{self, Conn, Context, Plan, ReadOp};
use crate::kv::{Command, TxOp, TxRead};
use crate::resp::Reply;

/// Argument bytes a transaction may queue: its `EXEC` becomes one log record, which may not be
/// larger than this (raft-core's default `payload_bytes_max`), so queueing more would only hold
/// memory for a transaction that cannot be proposed.
pub const QUEUE_BYTES_MAX: usize = 512 << 10;

/// Commands that act on the connection or the node rather than the data: not queued.
const NOT_IN_MULTI: &[&str] = &[
    "auth", "hello", "readmode", "client", "quit", "select", "info", "raft", "role", "command",
    "config", "keys", "scan", "wait", "memory",
];

/// Plans one request, inside or outside a transaction.
pub fn plan(conn: &mut Conn, ctx: &Context<'_>, args: &[Bytes]) -> Plan {
    let name = args
        .first()
        .map(|n| String::from_utf8_lossy(&n[..n.len().min(32)]).to_ascii_lowercase())
        .unwrap_or_default();
    let arity_ok = |n: usize| args.len() == n;
    match (name.as_str(), conn.multi.is_some()) {
        ("multi", true) => Plan::Reply(Reply::err("MULTI calls can not be nested")),
        ("multi", false) if arity_ok(1) && conn.authed => {
            conn.multi = Some(Vec::new());
            conn.multi_failed = false;
            conn.multi_bytes = 0;
            conn.multi_denyoom = false;
            Plan::Reply(Reply::ok())
        }
        ("exec", false) if conn.authed => Plan::Reply(Reply::err("EXEC without MULTI")),
        ("discard", false) if conn.authed => Plan::Reply(Reply::err("DISCARD without MULTI")),
        ("exec", true) => {
            let ops = conn.multi.take().unwrap_or_default();
            let watches = std::mem::take(&mut conn.watched);
            if std::mem::take(&mut conn.multi_failed) {
                return Plan::Reply(Reply::Error(
                    "EXECABORT Transaction discarded because of previous errors.".into(),
                ));
            }
            // As Redis: a transaction that adds data is refused whole at `maxmemory`.
            if std::mem::take(&mut conn.multi_denyoom) && ctx.oom {
                return Plan::Reply(Reply::Error(format!(
                    "EXECABORT Transaction discarded because of: {}",
                    commands::OOM_MESSAGE
                )));
            }
            if ops.is_empty() && watches.is_empty() {
                return Plan::Reply(Reply::Array(Vec::new()));
            }
            // Even with nothing queued, the watches decide between an empty array and nil.
            Plan::Write(Command::Multi { ops, watches })
        }
        ("discard", true) => {
            conn.multi = None;
            conn.multi_failed = false;
            conn.watched.clear();
            Plan::Reply(Reply::ok())
        }
        ("watch", true) => Plan::Reply(Reply::err("WATCH inside MULTI is not allowed")),
        ("watch", false) if conn.authed && args.len() >= 2 => {
            Plan::Read(ReadOp::Watch(args[1..].to_vec()))
        }
        ("unwatch", true) if arity_ok(1) => {
            if let Some(q) = conn.multi.as_mut() {
                q.push(TxOp::Reply(Reply::ok().to_bytes()));
            }
            Plan::Reply(Reply::Simple("QUEUED".into()))
        }
        ("unwatch", false) if conn.authed && arity_ok(1) => {
            conn.watched.clear();
            Plan::Reply(Reply::ok())
        }
        (_, true) => queue(conn, ctx, &name, args),
        _ => commands::plan(conn, ctx, args),
    }
}

/// Checks and queues one command of an open transaction.
fn queue(conn: &mut Conn, ctx: &Context<'_>, name: &str, args: &[Bytes]) -> Plan {
    let refuse = |conn: &mut Conn, reply: Reply| {
        conn.multi_failed = true;
        Plan::Reply(reply)
    };
    if NOT_IN_MULTI.contains(&name) {
        return refuse(
            conn,
            Reply::err(format!(
                "Command '{name}' is not allowed inside a transaction"
            )),
        );
    }
    // `TIME` answers the time of the EXEC record (its clock, the same on every replica), not
    // the time it was queued.
    if name == "time" && args.len() == 1 {
        if let Some(q) = conn.multi.as_mut() {
            q.push(TxOp::Read(TxRead::Time));
        }
        return Plan::Reply(Reply::Simple("QUEUED".into()));
    }
    let op = match commands::plan(conn, ctx, args) {
        Plan::Write(cmd) => TxOp::Write(cmd),
        Plan::Read(read) => match read.as_tx() {
            Some(r) => TxOp::Read(r),
            None => {
                return refuse(
                    conn,
                    Reply::err(format!(
                        "Command '{name}' is not allowed inside a transaction"
                    )),
                )
            }
        },
        Plan::Reply(Reply::Error(e)) => return refuse(conn, Reply::Error(e)),
        Plan::Reply(r) => TxOp::Reply(r.to_bytes()),
        Plan::Close(_) | Plan::Admin(_) | Plan::Local(_) => {
            return refuse(
                conn,
                Reply::err(format!(
                    "Command '{name}' is not allowed inside a transaction"
                )),
            )
        }
    };
    // A transaction that can no longer be applied holds nothing more; one past the record
    // limit is refused (`EXEC` answers EXECABORT) and its queue dropped at once.
    conn.multi_bytes = conn
        .multi_bytes
        .saturating_add(args.iter().map(|a| a.len() + 16).sum::<usize>());
    if conn.multi_bytes > QUEUE_BYTES_MAX {
        if let Some(q) = conn.multi.as_mut() {
            *q = Vec::new();
        }
        return refuse(
            conn,
            Reply::err(format!(
                "the transaction exceeds the {QUEUE_BYTES_MAX} bytes one EXEC may write"
            )),
        );
    }
    if conn.multi_failed {
        return Plan::Reply(Reply::Simple("QUEUED".into()));
    }
    conn.multi_denyoom |= commands::adds_data(name);
    if let Some(q) = conn.multi.as_mut() {
        q.push(op);
    }
    Plan::Reply(Reply::Simple("QUEUED".into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ReadMode;
    use crate::resp::Proto;

    fn conn() -> Conn {
        Conn {
            id: 1,
            authed: true,
            read_mode: ReadMode::Linearizable,
            name: None,
            proto: Proto::Resp2,
            multi: None,
            multi_failed: false,
            multi_bytes: 0,
            multi_denyoom: false,
            watched: Vec::new(),
        }
    }

    fn run(c: &mut Conn, line: &str) -> Plan {
        let args: Vec<Bytes> = line
            .split_whitespace()
            .map(|s| Bytes::copy_from_slice(s.as_bytes()))
            .collect();
        let ctx = Context {
            requirepass: None,
            now_ms: 1_000,
            lease_reads: false,
            oom: false,
        };
        plan(c, &ctx, &args)
    }

    /// Runs `line` on a node whose map is (`oom`) or is not at `maxmemory`.
    fn run_at(c: &mut Conn, line: &str, oom: bool) -> Plan {
        let args: Vec<Bytes> = line
            .split_whitespace()
            .map(|s| Bytes::copy_from_slice(s.as_bytes()))
            .collect();
        let ctx = Context {
            requirepass: None,
            now_ms: 1_000,
            lease_reads: false,
            oom,
        };
        plan(c, &ctx, &args)
    }

    /// Goal: at `maxmemory` only what adds data is refused, queued or not. Method: plan
    /// commands with the map at its limit: SET and INCR get Redis's `-OOM`, DEL, GET and a
    /// transaction of deletes pass; a transaction queued before the limit that adds data is
    /// refused whole at EXEC.
    #[test]
    fn writes_that_add_data_are_refused_at_maxmemory() {
        let mut c = conn();
        let oom = Reply::Error(commands::OOM_MESSAGE.into());
        assert_eq!(reply(run_at(&mut c, "SET k v", true)), oom);
        assert_eq!(reply(run_at(&mut c, "INCR n", true)), oom);
        assert_eq!(reply(run_at(&mut c, "RPUSH l x", true)), oom);
        assert!(matches!(run_at(&mut c, "DEL k", true), Plan::Write(_)));
        assert!(matches!(run_at(&mut c, "LPOP l", true), Plan::Write(_)));
        assert!(matches!(run_at(&mut c, "GET k", true), Plan::Read(_)));
        assert!(matches!(run_at(&mut c, "SET k v", false), Plan::Write(_)));

        run_at(&mut c, "MULTI", true);
        assert_eq!(reply(run_at(&mut c, "SET k v", true)), oom);
        assert!(
            matches!(reply(run_at(&mut c, "EXEC", true)), Reply::Error(e) if e.starts_with("EXECABORT"))
        );
        run_at(&mut c, "MULTI", true);
        run_at(&mut c, "DEL k", true);
        assert!(
            matches!(
                run_at(&mut c, "EXEC", true),
                Plan::Write(Command::Multi { .. })
            ),
            "a transaction of deletes runs"
        );
        run_at(&mut c, "MULTI", false);
        run_at(&mut c, "SET k v", false);
        match reply(run_at(&mut c, "EXEC", true)) {
            Reply::Error(e) => assert!(e.starts_with("EXECABORT") && e.contains("OOM"), "{e}"),
            other => panic!("{other:?}"),
        }
        assert!(c.multi.is_none() && c.watched.is_empty());
    }

    fn reply(p: Plan) -> Reply {
        match p {
            Plan::Reply(r) => r,
            other => panic!("not a reply: {other:?}"),
        }
    }

    #[test]
    fn a_transaction_past_the_record_limit_is_refused_and_holds_nothing() {
        let mut c = conn();
        assert_eq!(reply(run(&mut c, "MULTI")), Reply::ok());
        let value = "v".repeat(100_000);
        let mut refused = None;
        for i in 0..10 {
            match reply(run(&mut c, &format!("SET k{i} {value}"))) {
                Reply::Simple(s) if s == "QUEUED" => {}
                other => {
                    refused = Some((i, other));
                    break;
                }
            }
        }
        let (at, err) = refused.expect("refused before ten 100 kB commands");
        assert_eq!(at, 5, "the sixth 100 kB command passes 512 KiB");
        assert!(
            matches!(&err, Reply::Error(e) if e.contains("exceeds")),
            "{err:?}"
        );
        assert!(
            c.multi.as_ref().is_some_and(Vec::is_empty),
            "the queue is dropped"
        );
        // Later commands are refused alike and nothing is held; EXEC applies nothing.
        let later = reply(run(&mut c, "SET x 1"));
        assert!(
            matches!(&later, Reply::Error(e) if e.contains("exceeds")),
            "{later:?}"
        );
        assert!(c.multi.as_ref().is_some_and(Vec::is_empty));
        assert!(
            matches!(reply(run(&mut c, "EXEC")), Reply::Error(e) if e.starts_with("EXECABORT"))
        );
        assert_eq!(reply(run(&mut c, "MULTI")), Reply::ok());
        assert_eq!(
            reply(run(&mut c, "SET y 1")),
            Reply::Simple("QUEUED".into())
        );
    }

    #[test]
    fn commands_between_multi_and_exec_become_one_write() {
        let mut c = conn();
        assert_eq!(reply(run(&mut c, "EXEC")), Reply::err("EXEC without MULTI"));
        assert_eq!(reply(run(&mut c, "MULTI")), Reply::ok());
        assert_eq!(
            reply(run(&mut c, "MULTI")),
            Reply::err("MULTI calls can not be nested")
        );
        let queued = Reply::Simple("QUEUED".into());
        assert_eq!(reply(run(&mut c, "SET k v")), queued);
        assert_eq!(reply(run(&mut c, "GET k")), queued);
        assert_eq!(reply(run(&mut c, "PING")), queued);
        match run(&mut c, "EXEC") {
            Plan::Write(Command::Multi { ops, .. }) => {
                assert_eq!(ops.len(), 3);
                assert!(matches!(ops[0], TxOp::Write(Command::Set { .. })));
                assert!(matches!(ops[1], TxOp::Read(_)));
                assert_eq!(ops[2], TxOp::Reply(Bytes::from_static(b"+PONG\r\n")));
            }
            other => panic!("{other:?}"),
        }
        assert!(c.multi.is_none(), "EXEC closes the transaction");
        assert_eq!(reply(run(&mut c, "MULTI")), Reply::ok());
        assert_eq!(
            reply(run(&mut c, "EXEC")),
            Reply::Array(vec![]),
            "nothing queued"
        );
    }

    #[test]
    fn a_refused_command_aborts_the_transaction() {
        let mut c = conn();
        run(&mut c, "MULTI");
        run(&mut c, "SET k v");
        assert!(
            matches!(reply(run(&mut c, "SET k")), Reply::Error(_)),
            "wrong arity"
        );
        assert!(
            matches!(reply(run(&mut c, "KEYS *")), Reply::Error(e) if e.contains("not allowed"))
        );
        assert!(matches!(
            reply(run(&mut c, "EXEC")),
            Reply::Error(e) if e.starts_with("EXECABORT")
        ));
        run(&mut c, "MULTI");
        run(&mut c, "FLY away");
        assert_eq!(reply(run(&mut c, "DISCARD")), Reply::ok());
        assert!(
            !c.multi_failed && c.multi.is_none(),
            "DISCARD forgets everything"
        );
    }

    /// WATCH is served after the read barrier (a read plan); EXEC carries the watches and
    /// forgets them, like DISCARD and UNWATCH; WATCH inside MULTI is refused without aborting.
    #[test]
    fn watches_travel_in_the_exec_record() {
        let mut c = conn();
        match run(&mut c, "WATCH a b") {
            Plan::Read(ReadOp::Watch(keys)) => {
                assert_eq!(keys.len(), 2);
                assert_eq!(c.watch(keys, 7), Reply::ok());
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(c.watch(vec![Bytes::from_static(b"a")], 9), Reply::ok());
        assert_eq!(c.watched[0].1, 7, "a key keeps its first watch");
        run(&mut c, "MULTI");
        assert_eq!(
            reply(run(&mut c, "WATCH c")),
            Reply::err("WATCH inside MULTI is not allowed")
        );
        assert_eq!(
            reply(run(&mut c, "UNWATCH")),
            Reply::Simple("QUEUED".into())
        );
        match run(&mut c, "EXEC") {
            Plan::Write(Command::Multi { ops, watches }) => {
                assert_eq!(ops.len(), 1, "UNWATCH is queued");
                let keys: Vec<_> = watches.iter().map(|(k, at)| (&k[..], *at)).collect();
                assert_eq!(keys, vec![(&b"a"[..], 7), (&b"b"[..], 7)]);
            }
            other => panic!("{other:?}"),
        }
        assert!(c.watched.is_empty(), "EXEC forgets the watches");
        c.watch(vec![Bytes::from_static(b"a")], 1);
        assert_eq!(reply(run(&mut c, "UNWATCH")), Reply::ok());
        assert!(c.watched.is_empty());
        c.watch(vec![Bytes::from_static(b"a")], 1);
        run(&mut c, "MULTI");
        assert_eq!(reply(run(&mut c, "DISCARD")), Reply::ok());
        assert!(c.watched.is_empty(), "DISCARD forgets the watches");
        c.watch(vec![Bytes::from_static(b"a")], 1);
        run(&mut c, "MULTI");
        assert!(
            matches!(run(&mut c, "EXEC"), Plan::Write(Command::Multi { ops, .. }) if ops.is_empty()),
            "an empty EXEC with watches still goes through the log"
        );
    }
}
