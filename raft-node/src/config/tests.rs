//! Tests of the configuration layers and their checks.

use super::*;

const GOOD: &str = r#"
    cluster_id = "c1"
    replica_id = 2
    data_dir = "d"
    [tls]
    ca_cert = "ca.pem"
    cert = "n.pem"
    key = "n.key"
    [[voters]]
    id = 1
    peer = "127.0.0.1:7101"
    client = "127.0.0.1:7001"
    [[voters]]
    id = 2
    peer = "127.0.0.1:7102"
    client = "127.0.0.1:7002"
"#;

#[test]
fn a_complete_file_gives_defaults_for_the_rest() {
    let cfg = FileConfig::parse(GOOD).unwrap().check().unwrap();
    assert_eq!(cfg.id, ReplicaId(2));
    assert_eq!(cfg.listen_client, "127.0.0.1:7002".parse().unwrap());
    assert_eq!(cfg.listen_peer, "127.0.0.1:7102".parse().unwrap());
    assert_eq!(cfg.peers().len(), 1);
    assert_eq!(cfg.client.read_mode, ReadMode::Linearizable);
    assert_eq!(
        cfg.client_addr_of(ReplicaId(1)).as_deref(),
        Some("127.0.0.1:7001")
    );
}

fn field_of(text: &str) -> String {
    match FileConfig::parse(text).and_then(FileConfig::check) {
        Ok(_) => panic!("accepted: {text}"),
        Err(e) => e.field,
    }
}

#[test]
fn each_bad_field_is_named() {
    assert_eq!(
        field_of(&GOOD.replace("replica_id = 2", "replica_id = 9")),
        "replica_id"
    );
    assert_eq!(
        field_of(&GOOD.replace("replica_id = 2", "replica_idd = 2")),
        "replica_idd"
    );
    assert_eq!(field_of(&GOOD.replace("\"c1\"", "\"a b\"")), "cluster_id");
    assert_eq!(
        field_of(&GOOD.replace("127.0.0.1:7101", "nowhere")),
        "voters[0].peer"
    );
    assert_eq!(field_of(&GOOD.replace("id = 1", "id = 2")), "voters[1].id");
    assert_eq!(field_of(&GOOD.replace("key = \"n.key\"", "")), "tls.key");
    assert_eq!(
        field_of(&format!("{GOOD}\n[timers]\nfetch_timeout_ms = 100\n")),
        "timers.fetch_timeout_ms"
    );
    assert_eq!(
        field_of(&format!("{GOOD}\n[client]\nread_mode = \"fast\"\n")),
        "client.read_mode"
    );
    assert_eq!(field_of(&format!("storage = \"tape\"\n{GOOD}")), "storage");
    assert_eq!(
        field_of(&GOOD.replace("replica_id = 2", "replica_id = \"two\"")),
        "replica_id"
    );
    assert_eq!(
        field_of(&format!("{GOOD}\n[timers]\nwrite_timeout_ms = -1\n")),
        "timers.write_timeout_ms"
    );
}

#[test]
fn file_errors_name_the_full_key_and_the_line() {
    let text = format!("{GOOD}\n[timers]\nelection_timeout_ms = 500\nbogus = 3\n");
    let line = text.lines().position(|l| l.starts_with("bogus")).unwrap() + 1;
    let e = FileConfig::parse(&text).unwrap_err();
    assert_eq!(e.field, "timers.bogus");
    assert!(
        e.problem.ends_with(&format!("line {line}")),
        "{}",
        e.problem
    );
    let e = FileConfig::parse(&GOOD.replace("data_dir = \"d\"", "data_dir = \"d")).unwrap_err();
    assert_eq!(e.field, "data_dir");
    assert!(e.problem.ends_with(", line 4"), "{}", e.problem);
    let e = FileConfig::parse(&GOOD.replace("replica_id = 2", "replica_id = 2\nextra = 1"))
        .unwrap_err();
    assert_eq!(e.field, "extra", "a top-level key has no table");
}

#[test]
fn leases_are_off_unless_enabled_and_their_margin_is_checked() {
    let off = FileConfig::parse(GOOD).unwrap().check().unwrap();
    assert!(!off.lease.enabled);
    assert!(!off.raft_config().unwrap().lease_reads);
    let on = FileConfig::parse(&format!(
        "{GOOD}\n[lease]\nenabled = true\ndrift_margin_ms = 300\n[client]\nread_mode = \"lease\"\n"
    ))
    .unwrap()
    .check()
    .unwrap();
    let raft = on.raft_config().unwrap();
    assert!(raft.lease_reads);
    assert_eq!(raft.lease_drift_margin, Duration::from_millis(300));
    assert_eq!(on.client.read_mode, ReadMode::Lease);
    assert_eq!(
        field_of(&format!("{GOOD}\n[client]\nread_mode = \"lease\"\n")),
        "client.read_mode",
        "lease mode without leases is refused at start"
    );
    assert_eq!(
        field_of(&format!(
            "{GOOD}\n[lease]\nenabled = true\ndrift_margin_ms = 2000\n"
        )),
        "lease.drift_margin_ms",
        "a margin as long as the fetch timeout leaves no lease"
    );
    assert_eq!(
        field_of(&format!("{GOOD}\n[lease]\ndrift_margin_ms = 0\n")),
        "lease.drift_margin_ms"
    );
    assert_eq!(
        field_of(&format!("{GOOD}\n[lease]\nenable = true\n")),
        "lease.enable",
        "an unknown key is named with its table"
    );
}

#[test]
fn what_cannot_work_is_refused() {
    assert_eq!(
        field_of(&GOOD.replace("replica_id = 2", "replica_id = 0")),
        "replica_id"
    );
    assert_eq!(field_of(&GOOD.replace("id = 1", "id = 0")), "voters[0].id");
    assert_eq!(field_of(&format!("log = \"[[[bad\"\n{GOOD}")), "log");
    assert_eq!(
        field_of(&format!("{GOOD}\n[client]\nbulk_bytes_max = 10000000\n")),
        "client.bulk_bytes_max"
    );
    let fine = FileConfig::parse(&format!("log = \"raft_core=debug,info\"\n{GOOD}")).unwrap();
    assert!(fine.check().is_ok(), "a real filter is accepted");
}

#[test]
fn flags_override_the_file() {
    let mut f = FileConfig::parse(GOOD).unwrap();
    f.apply(&Overrides {
        replica_id: Some(3),
        voters: Some("1=127.0.0.1:1/127.0.0.1:2,3=127.0.0.1:3".into()),
        listen_client: Some("127.0.0.1:9".into()),
        ..Overrides::default()
    })
    .unwrap();
    let cfg = f.check().unwrap();
    assert_eq!(cfg.id, ReplicaId(3));
    assert_eq!(cfg.voters.len(), 2);
    assert_eq!(cfg.listen_client.port(), 9);
    assert_eq!(cfg.listen_metrics, None);
    let mut f = FileConfig::parse(GOOD).unwrap();
    f.apply(&Overrides {
        listen_metrics: Some("127.0.0.1:9101".into()),
        ..Overrides::default()
    })
    .unwrap();
    assert_eq!(
        f.check().unwrap().listen_metrics,
        Some("127.0.0.1:9101".parse().unwrap())
    );
    let file = format!("{GOOD}\n[listen]\nmetrics = \"nowhere\"\n");
    assert_eq!(field_of(&file), "listen.metrics");
}

#[test]
fn client_tls_needs_a_certificate_and_a_key() {
    let tls = |lines: &str| format!("{GOOD}\n[client]\n{lines}\n");
    assert_eq!(field_of(&tls("tls_cert = \"c.pem\"")), "client.tls_key");
    assert_eq!(field_of(&tls("tls_key = \"c.key\"")), "client.tls_cert");
    assert_eq!(field_of(&tls("tls_ca = \"ca.pem\"")), "client.tls_ca");
    let mut f = FileConfig::parse(&tls("tls_cert = \"c.pem\"\ntls_key = \"c.key\"")).unwrap();
    f.base = PathBuf::from("/etc/kv");
    let cfg = f.check().unwrap();
    let t = cfg.client.tls.unwrap();
    assert_eq!(t.cert, PathBuf::from("/etc/kv/c.pem"));
    assert_eq!(t.ca, None);
    assert_eq!(
        FileConfig::parse(GOOD).unwrap().check().unwrap().client.tls,
        None
    );
}

#[test]
fn unauthenticated_requests_are_bounded_by_default_and_settable() {
    let cfg = FileConfig::parse(GOOD).unwrap().check().unwrap();
    assert_eq!(cfg.client.unauthenticated_request_bytes_max, 4096);
    let before = cfg.client.limits_for(false);
    assert_eq!(before.request_bytes_max, 4096);
    assert_eq!(before.bulk_bytes_max, 4096);
    assert_eq!(before.inline_bytes_max, 4096);
    assert_eq!(before.array_len_max, 10);
    assert_eq!(cfg.client.limits_for(true), cfg.client.limits);
    assert_eq!(
        field_of(&format!(
            "{GOOD}\n[client]\nunauthenticated_request_bytes_max = 0\n"
        )),
        "client.unauthenticated_request_bytes_max"
    );
    let mut f = FileConfig::parse(GOOD).unwrap();
    f.apply(&Overrides {
        unauthenticated_request_bytes_max: Some(100),
        ..Overrides::default()
    })
    .unwrap();
    let cfg = f.check().unwrap();
    assert_eq!(cfg.client.limits_for(false).request_bytes_max, 100);
}

#[test]
fn the_output_buffer_limit_has_a_default_and_a_floor() {
    let cfg = FileConfig::parse(GOOD).unwrap().check().unwrap();
    assert_eq!(cfg.client.output_buffer_bytes_max, 64 << 20);
    let with = |v: &str| format!("{GOOD}\n[client]\noutput_buffer_bytes_max = {v}\n");
    let off = FileConfig::parse(&with("0")).unwrap().check().unwrap();
    assert_eq!(
        off.client.output_buffer_bytes_max, 0,
        "0: no limit, as in Redis"
    );
    assert_eq!(field_of(&with("100")), "client.output_buffer_bytes_max");
    let mut f = FileConfig::parse(GOOD).unwrap();
    f.apply(&Overrides {
        output_buffer_bytes_max: Some(1 << 20),
        ..Overrides::default()
    })
    .unwrap();
    assert_eq!(f.check().unwrap().client.output_buffer_bytes_max, 1 << 20);
}

#[test]
fn maxmemory_is_off_by_default_and_settable_in_the_file_and_by_flag() {
    assert_eq!(
        FileConfig::parse(GOOD).unwrap().check().unwrap().maxmemory,
        0
    );
    let cfg = FileConfig::parse(&format!("maxmemory = 1000000\n{GOOD}"))
        .unwrap()
        .check()
        .unwrap();
    assert_eq!(cfg.maxmemory, 1_000_000);
    assert_eq!(field_of(&format!("maxmemory = -1\n{GOOD}")), "maxmemory");
    let mut f = FileConfig::parse(GOOD).unwrap();
    f.apply(&Overrides {
        maxmemory: Some(5),
        ..Overrides::default()
    })
    .unwrap();
    assert_eq!(f.check().unwrap().maxmemory, 5);
}
