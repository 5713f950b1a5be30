//! Tests of the state machine: record encoding, apply, expiry, transactions (this file); the
//! typed families (`families`), snapshots (`snapshot`) and WATCH (`watch`), driven through
//! the request planner like a client (`Replica`).

mod dataset;
mod families;
mod golden;
mod replay;
mod snapshot;
mod watch;

use super::command::{encode_old, restamp, CMD_VERSION};
use super::*;
use crate::commands::{Conn, Context, Plan, ReadOp};
use crate::config::ReadMode;
use crate::resp::{transcode, Proto};
use bytes::BytesMut;
use raft_core::Epoch;

/// One replica's state machine and a client connection to it: a request line is planned as
/// the server plans it, a write applied as the next record, a read answered from the map.
struct Replica {
    kv: Kv,
    next: u64,
    conn: Conn,
    /// The proposer's clock, stamped into every record.
    now_ms: u64,
    /// The payload of the last record applied.
    last_payload: Option<Bytes>,
}

impl Replica {
    fn new() -> Replica {
        Replica {
            kv: Kv::new(),
            next: 0,
            conn: Conn {
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
            },
            now_ms: 1_000,
            last_payload: None,
        }
    }

    /// Applies `cmd` as the next record.
    fn apply(&mut self, cmd: &Command) -> Bytes {
        self.last_payload = Some(encode(self.now_ms, cmd));
        let out = apply(&self.kv, self.next, self.now_ms, cmd.clone());
        self.next += 1;
        out
    }

    /// Runs one request line (arguments split on spaces) and answers in `proto`.
    fn run_as(&mut self, line: &str, proto: Proto) -> String {
        let args: Vec<Bytes> = line
            .split(' ')
            .map(|s| Bytes::copy_from_slice(s.as_bytes()))
            .collect();
        let ctx = Context {
            requirepass: None,
            now_ms: self.now_ms,
            lease_reads: false,
            oom: false,
        };
        let reply = match crate::multi::plan(&mut self.conn, &ctx, &args) {
            Plan::Write(cmd) => Reply::Raw(self.apply(&cmd)),
            Plan::Read(ReadOp::Watch(keys)) => {
                let at = self.kv.applied().0;
                self.conn.watch(keys, at)
            }
            Plan::Read(op) => match op.as_tx() {
                Some(r) => self.kv.read(&r),
                None => panic!("{line}: not a state machine read"),
            },
            Plan::Reply(r) => r,
            other => panic!("{line}: {other:?}"),
        };
        let mut out = BytesMut::new();
        reply.encode_as(&mut out, proto);
        String::from_utf8_lossy(&out).into_owned()
    }

    /// Runs one request line and shows the RESP2 reply compactly (see [`show`]).
    fn run(&mut self, line: &str) -> String {
        show(&self.run_as(line, Proto::Resp2))
    }

    /// Runs each `(request, reply shown by [`show`])` in turn and checks the replies.
    fn script(&mut self, steps: &[(&str, &str)]) {
        for (line, want) in steps {
            assert_eq!(self.run(line), *want, "{line}");
        }
    }
}

/// A RESP2 reply in short: bulk strings as their text, `:n`, `+OK`, `-ERR ...`, `nil` (null
/// bulk), `nil*` (null array) and `[a b ...]` for arrays.
fn show(resp: &str) -> String {
    fn one(s: &str) -> (String, &str) {
        let (line, rest) = s.split_once("\r\n").expect("a CRLF-terminated line");
        let (kind, body) = line.split_at(1);
        match kind {
            "+" | "-" | ":" => (line.to_string(), rest),
            "$" if body == "-1" => ("nil".into(), rest),
            "*" if body == "-1" => ("nil*".into(), rest),
            "$" => {
                let n: usize = body.parse().unwrap();
                (rest[..n].to_string(), &rest[n + 2..])
            }
            "*" => {
                let n: usize = body.parse().unwrap();
                let mut items = Vec::new();
                let mut rest = rest;
                for _ in 0..n {
                    let (item, r) = one(rest);
                    items.push(item);
                    rest = r;
                }
                (format!("[{}]", items.join(" ")), rest)
            }
            _ => panic!("not RESP2: {s:?}"),
        }
    }
    let (v, rest) = one(resp);
    assert!(rest.is_empty(), "trailing bytes after {v}: {rest:?}");
    v
}

/// A state machine response, re-encoded for `proto`.
fn as_proto(response: &[u8], proto: Proto) -> String {
    let mut out = BytesMut::new();
    transcode(response, proto, &mut out);
    String::from_utf8_lossy(&out).into_owned()
}

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

fn all_commands() -> Vec<Command> {
    vec![
        Command::Set {
            key: b("k"),
            value: b("v"),
            cond: SetCond::IfAbsent,
            get: true,
            expiry: Some(Expiry::At(12345)),
            keep_ttl: false,
        },
        Command::Del {
            keys: vec![b("a"), b("b")],
        },
        Command::IncrBy {
            key: b("n"),
            delta: -7,
        },
        Command::MSet {
            pairs: vec![(b("a"), b("1")), (b("b"), b(""))],
        },
        Command::Append {
            key: b("a"),
            value: b("xyz"),
        },
        Command::Cas {
            key: b("a"),
            expected: b("1xyz"),
            new: b("2"),
        },
        Command::Expire {
            key: b("a"),
            expiry: Some(Expiry::At(99_000)),
            cond: ExpireCond::IfLater,
        },
        Command::Expire {
            key: b("a"),
            expiry: None,
            cond: ExpireCond::Always,
        },
        Command::SetNx {
            key: b("s"),
            value: b("1"),
        },
        Command::GetDel { key: b("s") },
        Command::MSetNx {
            pairs: vec![(b("x"), b("1")), (b("y"), b("2"))],
        },
    ]
}

/// One command of every kind added in version 2, with a transaction reading every family.
fn v2_commands() -> Vec<Command> {
    let range = ZRange {
        key: b("z"),
        by: ZBy::Score(
            ScoreBound {
                value: Float(f64::NEG_INFINITY),
                exclusive: false,
            },
            ScoreBound {
                value: Float(2.5),
                exclusive: true,
            },
        ),
        rev: true,
        limit: Some((1, -1)),
        withscores: true,
    };
    let lex = ZRange {
        key: b("z"),
        by: ZBy::Lex(LexBound::Incl(b("a")), LexBound::Max),
        rev: false,
        limit: None,
        withscores: false,
    };
    let reads = vec![
        TxRead::Hash(HashRead::MGet(b("h"), vec![b("f")])),
        TxRead::Hash(HashRead::Scan {
            key: b("h"),
            cursor: 7,
            pattern: Some(b("f*")),
            count: 3,
        }),
        TxRead::List(ListRead::Range(b("l"), -3, 2)),
        TxRead::Set(SetRead::Diff(vec![b("a"), b("b")])),
        TxRead::ZSet(ZSetRead::Range(range)),
        TxRead::ZSet(ZSetRead::Range(lex)),
        TxRead::ZSet(ZSetRead::Rank {
            key: b("z"),
            member: b("m"),
            rev: true,
            with_score: true,
        }),
    ];
    vec![
        Command::HashOp(HashCmd::Set {
            key: b("h"),
            pairs: vec![(b("f"), b("v"))],
            if_absent: true,
            reply_ok: false,
        }),
        Command::HashOp(HashCmd::IncrByFloat {
            key: b("h"),
            field: b("f"),
            delta: Float(-0.5),
        }),
        Command::ListOp(ListCmd::Move {
            src: b("a"),
            dst: b("b"),
            from_left: false,
            to_left: true,
        }),
        Command::ListOp(ListCmd::Pop {
            key: b("l"),
            left: true,
            count: Some(3),
        }),
        Command::SetOp(SetCmd::Pop {
            key: b("s"),
            count: None,
        }),
        Command::ZSetOp(ZSetCmd::Add {
            key: b("z"),
            flags: ZAddFlags {
                xx: true,
                gt: true,
                ch: true,
                ..ZAddFlags::default()
            },
            pairs: vec![(Float(1.0), b("m")), (Float(f64::INFINITY), b("n"))],
        }),
        Command::Rename {
            src: b("a"),
            dst: b("b"),
            if_absent: true,
        },
        Command::Flush,
        Command::GetEx {
            key: b("k"),
            expiry: Some(Expiry::At(5)),
        },
        Command::IncrByFloat {
            key: b("k"),
            delta: Float(1e-3),
        },
        Command::Multi {
            ops: reads.into_iter().map(TxOp::Read).collect(),
            watches: vec![(b("w"), 42)],
        },
    ]
}

/// One command of every kind version 3 adds or changes: relative expiries, the tick, `TIME`
/// inside a transaction.
fn v3_commands() -> Vec<Command> {
    vec![
        Command::Set {
            key: b("k"),
            value: b("v"),
            cond: SetCond::Always,
            get: false,
            expiry: Some(Expiry::In(1_000)),
            keep_ttl: false,
        },
        Command::Expire {
            key: b("k"),
            expiry: Some(Expiry::In(crate::kv::EXPIRY_MAX_MS)),
            cond: ExpireCond::IfEarlier,
        },
        Command::GetEx {
            key: b("k"),
            expiry: Some(Expiry::In(0)),
        },
        Command::Tick,
        Command::Multi {
            ops: vec![
                TxOp::Read(TxRead::Time),
                TxOp::Write(Command::Expire {
                    key: b("k"),
                    expiry: Some(Expiry::In(5)),
                    cond: ExpireCond::Always,
                }),
            ],
            watches: vec![],
        },
    ]
}

/// Goal: records written before version 2 still decode to the same commands, and a
/// version-1 record cannot carry a version-2 opcode.
#[test]
fn version_one_records_still_decode() {
    for cmd in all_commands() {
        let bytes = encode_old(1, 5, &cmd);
        assert_eq!(decode(&bytes), Ok((5, cmd.clone())));
        assert_eq!(decode(&encode_old(2, 5, &cmd)), Ok((5, cmd)));
    }
    for cmd in v2_commands() {
        assert!(decode(&encode_old(1, 5, &cmd)).is_err(), "{cmd:?}");
        assert_eq!(decode(&encode_old(2, 5, &cmd)), Ok((5, cmd)));
    }
    assert!(
        decode(&encode_old(2, 5, &Command::Tick)).is_err(),
        "a tick in a version-2 record"
    );
}

#[test]
fn every_command_round_trips() {
    let all = all_commands().into_iter().chain(v2_commands());
    for cmd in all.chain(v3_commands()) {
        let bytes = encode(99, &cmd);
        assert_eq!(bytes[0], CMD_VERSION);
        assert_eq!(decode(&bytes), Ok((99, cmd)));
    }
}

#[test]
fn truncated_or_unknown_payloads_are_refused() {
    let all = all_commands().into_iter().chain(v2_commands());
    for cmd in all.chain(v3_commands()) {
        let bytes = encode(1, &cmd);
        for cut in 0..bytes.len() {
            assert!(decode(&bytes.slice(..cut)).is_err());
        }
    }
    assert!(decode(&Bytes::from_static(&[2, 0, 1])).is_err());
    assert!(
        decode(&Bytes::from_static(&[4, 0, 0, 0, 0, 0, 0, 0, 0, 17])).is_err(),
        "version 4"
    );
    let mut tick = encode(1, &Command::Tick).to_vec();
    tick.push(0);
    assert!(decode(&Bytes::from(tick)).is_err(), "trailing bytes");
    assert!(decode(&Bytes::from_static(&[1, 0, 99])).is_err());
}

fn apply(kv: &Kv, at: u64, ts: u64, cmd: Command) -> Bytes {
    let rec = Record {
        offset: Offset(at),
        epoch: Epoch(1),
        kind: RecordKind::Data,
        payload: encode(ts, &cmd),
    };
    let mut out = Vec::new();
    block_on(kv.apply(&[rec], &mut out)).unwrap();
    out.pop().unwrap()
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(f)
}

/// The whole snapshot `kv` writes, read through its stream.
fn snapshot_bytes(kv: &Kv) -> Bytes {
    block_on(async {
        let mut reader = kv.snapshot().await.unwrap();
        raft_core::io::read_to_end(&mut *reader, u64::MAX)
            .await
            .unwrap()
    })
}

/// Restores `kv` from `data`, handed over in chunks of 7 bytes so that every field crosses
/// chunk boundaries somewhere.
fn restore_bytes(kv: &Kv, applied: Offset, data: Bytes) -> Result<(), StateMachineError> {
    let mut reader = raft_core::io::BytesReader::with_chunk_size(data, 7);
    block_on(kv.restore(applied, &mut reader))
}

#[test]
fn expiry_follows_the_replicated_clock() {
    let kv = Kv::new();
    let set = Command::Set {
        key: b("k"),
        value: b("v"),
        cond: SetCond::Always,
        get: false,
        expiry: Some(Expiry::At(1_000)),
        keep_ttl: false,
    };
    assert_eq!(&apply(&kv, 0, 500, set)[..], b"+OK\r\n");
    assert_eq!(kv.get(b"k"), Some(b("v")));
    assert_eq!(kv.pttl(b"k"), 500, "counted from the replicated clock");
    assert_eq!(kv.dbsize(), 1);
    // A later record stamped past the expiry removes the key on every replica.
    let incr = Command::IncrBy {
        key: b("n"),
        delta: 1,
    };
    assert_eq!(&apply(&kv, 1, 1_000, incr)[..], b":1\r\n");
    assert_eq!(kv.get(b"k"), None);
    assert_eq!(kv.dbsize(), 1);
    // A tick moves the clock without a write.
    let set = Command::Set {
        key: b("t"),
        value: b("v"),
        cond: SetCond::Always,
        get: false,
        expiry: Some(Expiry::In(300)),
        keep_ttl: false,
    };
    apply(&kv, 2, 1_000, set);
    apply(&kv, 3, 1_299, Command::Tick);
    assert_eq!(kv.get(b"t"), Some(b("v")));
    assert_eq!(&apply(&kv, 4, 1_300, Command::Tick)[..], b"+OK\r\n");
    assert_eq!(kv.get(b"t"), None);
    assert!(!kv.has_expiries());
}

/// Goal (W3): a lock taken through a node whose clock lags the replicated clock is not born
/// expired. The record carries the relative TTL, counted from the record's clock on apply:
/// the second `SET NX` fails while the first holds. (On the version-2 format, the proposer
/// made `PX 1000` absolute from its clock 2 s behind, and both answered OK.)
#[test]
fn a_lock_taken_through_a_lagging_node_holds() {
    let kv = Kv::new();
    let lock = |who: &str| Command::Set {
        key: b("lock"),
        value: b(who),
        cond: SetCond::IfAbsent,
        get: false,
        expiry: Some(Expiry::In(1_000)),
        keep_ttl: false,
    };
    apply(&kv, 0, 10_000, Command::Tick);
    // Stamped by a clock 2 s behind (a follower's own stamp, as before the leader stamped).
    assert_eq!(&apply(&kv, 1, 8_000, lock("A"))[..], b"+OK\r\n");
    assert_eq!(kv.pttl(b"lock"), 1_000);
    assert_eq!(&apply(&kv, 2, 10_100, lock("B"))[..], b"$-1\r\n");
    assert_eq!(kv.get(b"lock"), Some(b("A")));
    // The same lock in the version-2 format: absolute, from the lagging clock, born expired.
    let v2 = Bytes::from_static(&[
        2, 0xc0, 0x3e, 1, 9, 4, b'l', b'o', b'c', b'k', 1, b'A', 0xa8, 0x46,
    ]);
    assert_eq!(
        decode(&v2).unwrap().1,
        Command::Set {
            key: b("lock"),
            value: b("A"),
            cond: SetCond::IfAbsent,
            get: false,
            expiry: Some(Expiry::At(9_000)),
            keep_ttl: false,
        }
    );
    let old = Kv::new();
    apply(&old, 0, 10_000, Command::Tick);
    let rec = Record {
        offset: Offset(1),
        epoch: Epoch(1),
        kind: RecordKind::Data,
        payload: v2,
    };
    let mut out = Vec::new();
    block_on(old.apply(&[rec], &mut out)).unwrap();
    assert_eq!(&out[0][..], b"+OK\r\n");
    assert_eq!(old.get(b"lock"), None, "old records keep their old meaning");
}

/// Goal: the leader can overwrite a version-3 record's stamp without decoding it, and leaves
/// anything else alone.
#[test]
fn restamp_rewrites_only_the_stamp() {
    let cmd = Command::IncrBy {
        key: b("n"),
        delta: 3,
    };
    let p = encode(0, &cmd);
    let q = restamp(&p, 123_456).unwrap();
    assert_eq!(decode(&q), Ok((123_456, cmd)));
    assert_eq!(stamp_of(&q), Some(123_456));
    assert_eq!(restamp(b"\x02\x00\x01", 5), None);
    assert_eq!(restamp(b"", 5), None);
}

/// The leader's in-place restamp gives the bytes of the copying one, for a payload that owns
/// its buffer (rewritten where it lies) and for one sliced from a shared frame (copied, the
/// frame untouched); anything else comes back as it was.
#[test]
fn restamp_owned_matches_restamp_and_leaves_shared_buffers_alone() {
    let cmd = Command::IncrBy {
        key: b("n"),
        delta: 3,
    };
    let p = encode(0, &cmd);
    let want = restamp(&p, 99).unwrap();
    let owned = restamp_owned(Bytes::copy_from_slice(&p), 99);
    assert_eq!(owned, want);
    let mut frame = vec![0xAA];
    frame.extend_from_slice(&p);
    let frame = Bytes::from(frame);
    let sliced = frame.slice(1..);
    assert_eq!(restamp_owned(sliced, 99), want);
    assert_eq!(&frame[1..], &p[..], "the shared frame is not rewritten");
    let other = Bytes::from_static(b"\x02\x00\x01");
    assert_eq!(restamp_owned(other.clone(), 5), other);
}

/// EXPIRE and PERSIST change only the expiry, follow their conditions (a key without an
/// expiry counts as never expiring), and a time already past deletes the key.
#[test]
fn expire_persist_and_their_conditions() {
    let kv = Kv::new();
    let mut at = 0;
    let mut run = |ts: u64, cmd: Command| {
        at += 1;
        String::from_utf8(apply(&kv, at, ts, cmd).to_vec()).unwrap()
    };
    let set = |k: &str| Command::MSet {
        pairs: vec![(b(k), b("v"))],
    };
    let expire = |k: &str, at_ms: Option<u64>, cond| Command::Expire {
        key: b(k),
        expiry: at_ms.map(Expiry::At),
        cond,
    };
    assert_eq!(
        run(100, expire("k", Some(5_000), ExpireCond::Always)),
        ":0\r\n",
        "no key"
    );
    run(100, set("k"));
    assert_eq!(
        run(100, expire("k", Some(9_000), ExpireCond::IfLater)),
        ":0\r\n",
        "GT on no expiry"
    );
    assert_eq!(
        run(100, expire("k", Some(9_000), ExpireCond::IfSome)),
        ":0\r\n"
    );
    assert_eq!(
        run(100, expire("k", Some(9_000), ExpireCond::IfEarlier)),
        ":1\r\n",
        "LT on no expiry"
    );
    assert_eq!(
        kv.pttl(b"k"),
        8_900,
        "counted from the replicated clock, 100"
    );
    assert_eq!(
        run(100, expire("k", Some(5_000), ExpireCond::IfNone)),
        ":0\r\n"
    );
    assert_eq!(
        run(100, expire("k", Some(5_000), ExpireCond::IfLater)),
        ":0\r\n"
    );
    assert_eq!(
        run(100, expire("k", Some(20_000), ExpireCond::IfLater)),
        ":1\r\n"
    );
    assert_eq!(kv.get(b"k"), Some(b("v")), "the value is untouched");
    assert_eq!(
        run(100, expire("k", None, ExpireCond::Always)),
        ":1\r\n",
        "PERSIST"
    );
    assert_eq!(kv.pttl(b"k"), -1);
    assert_eq!(
        run(100, expire("k", None, ExpireCond::Always)),
        ":0\r\n",
        "nothing to remove"
    );
    // Past by the replicated clock: deleted at once, on every replica alike.
    assert_eq!(
        run(30_000, expire("k", Some(29_000), ExpireCond::Always)),
        ":1\r\n"
    );
    assert_eq!(kv.get(b"k"), None);
    assert_eq!(kv.dbsize(), 0);
}

/// A transaction applies as one record: its reads see its own earlier writes, and its
/// reply is the array of every operation's reply.
#[test]
fn a_transaction_applies_at_once_with_its_reads() {
    let kv = Kv::new();
    let ops = vec![
        TxOp::Write(Command::IncrBy {
            key: b("n"),
            delta: 5,
        }),
        TxOp::Read(TxRead::Get(b("n"))),
        TxOp::Write(Command::Append {
            key: b("n"),
            value: b("x"),
        }),
        TxOp::Write(Command::IncrBy {
            key: b("n"),
            delta: 1,
        }),
        TxOp::Read(TxRead::MGet(vec![b("n"), b("absent")])),
        TxOp::Reply(Bytes::from_static(b"+PONG\r\n")),
    ];
    let cmd = Command::Multi {
        ops,
        watches: Vec::new(),
    };
    let (ts, decoded) = decode(&encode(7, &cmd)).unwrap();
    assert_eq!((ts, &decoded), (7, &cmd), "a transaction round-trips");
    let reply = apply(&kv, 0, 100, cmd);
    assert_eq!(
        String::from_utf8(reply.to_vec()).unwrap(),
        "*6\r\n:5\r\n$1\r\n5\r\n:2\r\n-ERR value is not an integer or out of range\r\n\
         *2\r\n$2\r\n5x\r\n$-1\r\n+PONG\r\n",
        "an error inside a transaction fails that command only, as in Redis"
    );
    assert_eq!(kv.get(b"n"), Some(b("5x")));
}

#[test]
fn incr_append_cas_and_conditions() {
    let kv = Kv::new();
    let set = |cond, get| Command::Set {
        key: b("k"),
        value: b("10"),
        cond,
        get,
        expiry: None,
        keep_ttl: false,
    };
    assert_eq!(
        &apply(&kv, 0, 1, set(SetCond::IfPresent, false))[..],
        b"$-1\r\n"
    );
    assert_eq!(
        &apply(&kv, 1, 1, set(SetCond::IfAbsent, false))[..],
        b"+OK\r\n"
    );
    assert_eq!(
        &apply(&kv, 2, 1, set(SetCond::IfAbsent, true))[..],
        b"$2\r\n10\r\n"
    );
    let incr = |d| Command::IncrBy {
        key: b("k"),
        delta: d,
    };
    assert_eq!(&apply(&kv, 3, 1, incr(5))[..], b":15\r\n");
    assert_eq!(
        &apply(&kv, 4, 1, incr(i64::MAX))[..],
        b"-ERR increment or decrement would overflow\r\n"
    );
    let append = Command::Append {
        key: b("k"),
        value: b("x"),
    };
    assert_eq!(&apply(&kv, 5, 1, append)[..], b":3\r\n");
    assert!(apply(&kv, 6, 1, incr(1)).starts_with(b"-ERR value is not an integer"));
    let cas = |e: &str, n: &str| Command::Cas {
        key: b("k"),
        expected: b(e),
        new: b(n),
    };
    assert_eq!(&apply(&kv, 7, 1, cas("nope", "y"))[..], b":0\r\n");
    assert_eq!(&apply(&kv, 8, 1, cas("15x", "y"))[..], b":1\r\n");
    assert_eq!(kv.get(b"k"), Some(b("y")));
    assert_eq!(kv.applied(), Offset(9));
}
