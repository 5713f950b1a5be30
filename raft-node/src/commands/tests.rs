//! Tests of request planning.

use super::*;
use crate::kv::Expiry;

fn run(conn: &mut Conn, pass: Option<&str>, line: &str) -> Plan {
    let args: Vec<Bytes> = line
        .split_whitespace()
        .map(|s| Bytes::copy_from_slice(s.as_bytes()))
        .collect();
    let ctx = Context {
        requirepass: pass,
        now_ms: 1_000,
        lease_reads: false,
        oom: false,
    };
    plan(conn, &ctx, &args)
}

fn conn(authed: bool) -> Conn {
    Conn {
        id: 1,
        authed,
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

fn reply(p: Plan) -> Reply {
    match p {
        Plan::Reply(r) | Plan::Close(r) => r,
        other => panic!("not a reply: {other:?}"),
    }
}

/// Goal: `EX`/`PX` travel as a duration (every replica counts it from the record's clock),
/// `EXAT`/`PXAT` as a time; times beyond Redis's range are refused with Redis's error (W12).
#[test]
fn set_options_become_an_expiry() {
    let mut c = conn(true);
    let mut expiry = |line: &str| match run(&mut c, None, line) {
        Plan::Write(Command::Set { expiry, .. }) => Ok(expiry),
        Plan::Reply(r) => Err(r),
        other => panic!("{line}: {other:?}"),
    };
    assert_eq!(expiry("SET k v EX 10"), Ok(Some(Expiry::In(10_000))));
    assert_eq!(expiry("SET k v PX 10"), Ok(Some(Expiry::In(10))));
    assert_eq!(expiry("SET k v EXAT 10"), Ok(Some(Expiry::At(10_000))));
    assert_eq!(expiry("SET k v PXAT 10"), Ok(Some(Expiry::At(10))));
    assert_eq!(expiry("SETEX k 10 v"), Ok(Some(Expiry::In(10_000))));
    let max = i64::MAX;
    assert_eq!(
        expiry(&format!("SET k v PXAT {max}")),
        Ok(Some(Expiry::At(max as u64)))
    );
    let invalid = |name: &str| {
        Err(Reply::err(format!(
            "invalid expire time in '{name}' command"
        )))
    };
    for line in [
        format!("SET k v EXAT {}", max / 1000 + 1),
        format!("SET k v EX {}", max / 1000),
        format!("SET k v PX {max}"),
        format!("SET k v PX {}", max - 999),
        "SET k v PX 0".to_string(),
        "SET k v PXAT -1".to_string(),
    ] {
        assert_eq!(expiry(&line), invalid("set"), "{line}");
    }
    assert_eq!(
        expiry(&format!("SET k v PX {}", max - 1_000)),
        Ok(Some(Expiry::In(max as u64 - 1_000)))
    );
    assert_eq!(expiry(&format!("PSETEX k {max} v")), invalid("psetex"));
    match run(&mut c, None, &format!("GETEX k EXAT {}", max / 1000 + 1)) {
        Plan::Reply(r) => assert_eq!(Err(r), invalid("getex")),
        other => panic!("{other:?}"),
    }
    match run(&mut c, None, "GETEX k PX 5") {
        Plan::Write(Command::GetEx { expiry, .. }) => assert_eq!(expiry, Some(Expiry::In(5))),
        other => panic!("{other:?}"),
    }
    match run(&mut c, None, "SET k v NX GET EX 10") {
        Plan::Write(Command::Set { cond, get, .. }) => {
            assert_eq!(cond, SetCond::IfAbsent);
            assert!(get);
        }
        other => panic!("{other:?}"),
    }
    for bad in [
        "SET k v NX XX",
        "SET k v EX",
        "SET k v EX 1 PX 1",
        "SET k v FOO",
    ] {
        assert_eq!(reply(run(&mut c, None, bad)), syntax(), "{bad}");
    }
    assert_eq!(
        reply(run(&mut c, None, "SET k v EX 0")),
        Reply::err("invalid expire time in 'set' command")
    );
    assert_eq!(reply(run(&mut c, None, "SET k v EX x")), not_integer());
}

/// Goal: relative forms travel as a duration, absolute ones as a time, a past time as the
/// epoch (it deletes the key on apply), and times beyond Redis's range are refused (W12).
#[test]
fn expire_family_becomes_an_expiry() {
    let mut c = conn(true);
    let mut at = |line: &str| match run(&mut c, None, line) {
        Plan::Write(Command::Expire { expiry, cond, .. }) => (expiry, cond),
        other => panic!("{line}: {other:?}"),
    };
    assert_eq!(
        at("EXPIRE k 10"),
        (Some(Expiry::In(10_000)), ExpireCond::Always)
    );
    assert_eq!(
        at("PEXPIRE k 10 gt"),
        (Some(Expiry::In(10)), ExpireCond::IfLater)
    );
    assert_eq!(
        at("EXPIREAT k 7 NX"),
        (Some(Expiry::At(7_000)), ExpireCond::IfNone)
    );
    assert_eq!(
        at("PEXPIREAT k 7 xx xx"),
        (Some(Expiry::At(7)), ExpireCond::IfSome)
    );
    assert_eq!(
        at("EXPIRE k -5"),
        (Some(Expiry::At(0)), ExpireCond::Always),
        "in the past"
    );
    assert_eq!(at("PEXPIRE k 0").0, Some(Expiry::At(0)));
    assert_eq!(at("EXPIREAT k -5").0, Some(Expiry::At(0)));
    assert_eq!(at("PERSIST k"), (None, ExpireCond::Always));
    let max = i64::MAX;
    assert_eq!(
        at(&format!("PEXPIREAT k {max}")).0,
        Some(Expiry::At(max as u64))
    );
    for (line, name) in [
        (format!("EXPIREAT k {}", max / 1000 + 1), "expireat"),
        (format!("EXPIRE k {}", max / 1000 + 1), "expire"),
        (format!("PEXPIRE k {max}"), "pexpire"),
    ] {
        assert_eq!(
            reply(run(&mut c, None, &line)),
            Reply::err(format!("invalid expire time in '{name}' command")),
            "{line}"
        );
    }
    assert_eq!(reply(run(&mut c, None, "EXPIRE k ten")), not_integer());
    assert!(matches!(
        reply(run(&mut c, None, "EXPIRE k 1 NX GT")),
        Reply::Error(e) if e.contains("not compatible")
    ));
    assert!(matches!(
        reply(run(&mut c, None, "EXPIRE k 1 SOON")),
        Reply::Error(e) if e.contains("Unsupported option SOON")
    ));
    assert_eq!(reply(run(&mut c, None, "EXPIRE k")), wrong_args("expire"));
}

#[test]
fn arity_and_unknown_commands_are_errors() {
    let mut c = conn(true);
    assert_eq!(reply(run(&mut c, None, "GET")), wrong_args("get"));
    assert_eq!(reply(run(&mut c, None, "MSET a 1 b")), wrong_args("mset"));
    assert!(
        matches!(reply(run(&mut c, None, "FLY me")), Reply::Error(e) if e.contains("unknown command 'FLY'"))
    );
    assert_eq!(
        reply(run(&mut c, None, "DECRBY k -9223372036854775808")),
        not_integer()
    );
}

#[test]
fn only_auth_ping_and_hello_before_auth() {
    let mut c = conn(false);
    assert_eq!(reply(run(&mut c, Some("pw"), "GET k")), noauth());
    assert_eq!(reply(run(&mut c, Some("pw"), "RAFT STATUS")), noauth());
    assert_eq!(reply(run(&mut c, Some("pw"), "NOSUCH")), noauth());
    assert_eq!(
        reply(run(&mut c, Some("pw"), "PING")),
        Reply::Simple("PONG".into())
    );
    assert!(
        matches!(reply(run(&mut c, Some("pw"), "HELLO 2")), Reply::Error(e) if e.starts_with("NOAUTH"))
    );
    assert!(
        matches!(reply(run(&mut c, Some("pw"), "AUTH nope")), Reply::Error(e) if e.starts_with("WRONGPASS"))
    );
    assert!(!c.authed);
    assert_eq!(reply(run(&mut c, Some("pw"), "AUTH pw")), Reply::ok());
    assert!(matches!(run(&mut c, Some("pw"), "GET k"), Plan::Read(_)));
}

#[test]
fn hello_chooses_the_protocol_only_when_it_succeeds() {
    let mut c = conn(true);
    assert!(matches!(
        run(&mut c, None, "HELLO 4"),
        Plan::Reply(Reply::Error(e)) if e.starts_with("NOPROTO")
    ));
    assert_eq!(c.proto, Proto::Resp2);
    match run(&mut c, None, "HELLO 3") {
        Plan::Admin(AdminOp::Hello(fields)) => assert!(fields
            .iter()
            .any(|(k, v)| *k == Reply::bulk("proto") && *v == Reply::Int(3))),
        other => panic!("{other:?}"),
    }
    assert_eq!(c.proto, Proto::Resp3);
    let mut locked = conn(false);
    assert!(matches!(
        run(&mut locked, Some("pw"), "HELLO 3"),
        Plan::Reply(Reply::Error(_))
    ));
    assert_eq!(
        locked.proto,
        Proto::Resp2,
        "a refused HELLO changes nothing"
    );
}

#[test]
fn readmode_changes_the_connection() {
    let mut c = conn(true);
    assert_eq!(reply(run(&mut c, None, "READMODE sequential")), Reply::ok());
    assert_eq!(c.read_mode, ReadMode::Sequential);
    assert_eq!(
        reply(run(&mut c, None, "READMODE")),
        Reply::bulk("sequential")
    );
    assert!(matches!(
        reply(run(&mut c, None, "READMODE fast")),
        Reply::Error(_)
    ));
    assert!(
        matches!(reply(run(&mut c, None, "READMODE lease")), Reply::Error(e) if e.contains("lease.enabled")),
        "lease mode is refused while leases are off"
    );
    assert_eq!(
        c.read_mode,
        ReadMode::Sequential,
        "a refused mode changes nothing"
    );
}

#[test]
fn raft_voter_changes_parse_their_ids_and_directories() {
    let mut c = conn(true);
    assert!(matches!(
        run(&mut c, None, "RAFT VOTERS"),
        Plan::Admin(AdminOp::RaftVoters)
    ));
    assert!(matches!(
        run(&mut c, None, "raft add-voter 4"),
        Plan::Admin(AdminOp::RaftAddVoter(4, None))
    ));
    let dir = "0123abcd-0000-0000-0000-000000000042";
    let expected: raft_core::DirectoryId = dir.parse().unwrap();
    assert!(matches!(
        run(&mut c, None, &format!("RAFT ADD-VOTER 4 {dir}")),
        Plan::Admin(AdminOp::RaftAddVoter(4, Some(d))) if d == expected
    ));
    assert!(matches!(
        run(&mut c, None, "RAFT REMOVE-VOTER 2"),
        Plan::Admin(AdminOp::RaftRemoveVoter(2))
    ));
    assert!(matches!(
        run(&mut c, None, "RAFT UPDATE-VOTER 2 10.0.0.2:7000"),
        Plan::Admin(AdminOp::RaftUpdateVoter(2, e)) if e.to_string() == "10.0.0.2:7000"
    ));
    for bad in [
        "RAFT UPDATE-VOTER 2",
        "RAFT UPDATE-VOTER 2 somewhere",
        "RAFT UPDATE-VOTER x 10.0.0.2:7000",
        "RAFT ADD-VOTER four",
        "RAFT ADD-VOTER 4 not-a-uuid",
        "RAFT ADD-VOTER 4 00000000-0000-0000-0000-000000000000",
        "RAFT REMOVE-VOTER",
        "RAFT REMOVE-VOTER x",
    ] {
        assert!(
            matches!(reply(run(&mut c, None, bad)), Reply::Error(_)),
            "{bad} is refused"
        );
    }
}

#[test]
fn client_list_and_kill_take_redis_arguments() {
    let mut c = conn(true);
    let local = |p: Plan| match p {
        Plan::Local(op) => op,
        other => panic!("not answered by the server: {other:?}"),
    };
    assert_eq!(
        local(run(&mut c, None, "CLIENT LIST")),
        LocalOp::ClientList(None)
    );
    assert_eq!(
        local(run(&mut c, None, "client list id 3 4")),
        LocalOp::ClientList(Some(vec![3, 4]))
    );
    assert_eq!(
        local(run(&mut c, None, "CLIENT LIST TYPE pubsub ID 3")),
        LocalOp::ClientList(Some(vec![])),
        "no pub/sub clients here"
    );
    assert_eq!(
        reply(run(&mut c, None, "CLIENT LIST ID x")),
        Reply::err("Invalid client ID")
    );
    assert_eq!(reply(run(&mut c, None, "CLIENT LIST FOO")), syntax());
    assert_eq!(local(run(&mut c, None, "CLIENT INFO")), LocalOp::ClientInfo);
    assert_eq!(
        local(run(&mut c, None, "CLIENT KILL 1.2.3.4:5")),
        LocalOp::ClientKill {
            filter: KillFilter {
                addr: Some("1.2.3.4:5".into()),
                ..KillFilter::default()
            },
            old_form: true,
        }
    );
    assert_eq!(
        local(run(
            &mut c,
            None,
            "CLIENT KILL ID 7 LADDR 1.2.3.4:5 SKIPME no"
        )),
        LocalOp::ClientKill {
            filter: KillFilter {
                id: Some(7),
                laddr: Some("1.2.3.4:5".into()),
                skip_me: false,
                ..KillFilter::default()
            },
            old_form: false,
        }
    );
    assert_eq!(reply(run(&mut c, None, "CLIENT KILL ID 7 ADDR")), syntax());
    assert!(matches!(
        reply(run(&mut c, None, "CLIENT KILL ID 0")),
        Reply::Error(e) if e.contains("greater than 0")
    ));
    assert!(matches!(
        reply(run(&mut c, None, "CLIENT SETNAME a\u{1}b")),
        Reply::Error(e) if e.contains("cannot contain spaces")
    ));
}

#[test]
fn wait_memory_and_config_get_are_planned_with_their_arguments() {
    let mut c = conn(true);
    assert!(matches!(
        run(&mut c, None, "WAIT 2 100"),
        Plan::Local(LocalOp::Wait {
            replicas: 2,
            timeout_ms: 100
        })
    ));
    assert_eq!(
        reply(run(&mut c, None, "WAIT 1 -5")),
        Reply::err("timeout is negative")
    );
    assert_eq!(reply(run(&mut c, None, "WAIT a 1")), not_integer());
    assert!(matches!(
        run(&mut c, None, "MEMORY USAGE k"),
        Plan::Read(ReadOp::MemoryUsage(k, 5)) if &k[..] == b"k"
    ));
    assert!(matches!(
        run(&mut c, None, "memory usage k SAMPLES 0"),
        Plan::Read(ReadOp::MemoryUsage(_, 0))
    ));
    assert_eq!(reply(run(&mut c, None, "MEMORY USAGE k SAMPLES")), syntax());
    assert!(matches!(
        run(&mut c, None, "CONFIG GET a* b"),
        Plan::Local(LocalOp::ConfigGet(p)) if p.len() == 2
    ));
    // None of them is queued in a transaction.
    for line in ["WAIT 1 1", "MEMORY USAGE k", "CLIENT LIST", "CONFIG GET *"] {
        let mut c = conn(true);
        crate::multi::plan(
            &mut c,
            &Context {
                requirepass: None,
                now_ms: 0,
                lease_reads: false,
                oom: false,
            },
            &[Bytes::from_static(b"MULTI")],
        );
        let args: Vec<Bytes> = line
            .split(' ')
            .map(|s| Bytes::copy_from_slice(s.as_bytes()))
            .collect();
        let ctx = Context {
            requirepass: None,
            now_ms: 0,
            lease_reads: false,
            oom: false,
        };
        assert!(
            matches!(
                crate::multi::plan(&mut c, &ctx, &args),
                Plan::Reply(Reply::Error(e)) if e.contains("not allowed inside a transaction")
            ),
            "{line}"
        );
    }
}
