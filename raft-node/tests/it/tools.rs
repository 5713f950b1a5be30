//! Smoke test with the stock Redis tools (Debian's `redis-tools`) against `raft-node dev`: the
//! node must be usable by `redis-cli` and `redis-benchmark` unchanged.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::harness;

/// The path of `tool` on `PATH`; fails the test, saying what to install, when it is missing.
fn tool(tool: &str) -> std::path::PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(tool))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "`{tool}` is not installed: install redis-tools (Debian: `apt-get install \
                 redis-tools`; .ci/run does this on CI)"
            )
        })
}

/// Runs `cmd` to completion within 60 s (killed and failed otherwise).
fn run(cmd: &mut Command) -> Output {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let id = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(out) => out.unwrap(),
        Err(_) => {
            let _ = Command::new("kill")
                .args(["-KILL", &id.to_string()])
                .status();
            panic!("{cmd:?} did not finish within 60 s");
        }
    }
}

fn cli(port: u16, args: &[&str]) -> String {
    let out = run(Command::new(tool("redis-cli"))
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args));
    assert!(out.status.success(), "redis-cli {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The requests per second `redis-benchmark -q` reported for `test` (its final line for it).
fn rate(output: &str, test: &str) -> Option<f64> {
    output
        .split(['\r', '\n'])
        .filter_map(|l| l.trim().strip_prefix(&format!("{test}: ")))
        .filter_map(|rest| {
            rest.strip_suffix(" requests per second")
                .or_else(|| rest.split_once(" requests per second,").map(|(n, _)| n))
        })
        .filter_map(|n| n.trim().parse().ok())
        .next_back()
}

/// Goal: `redis-cli` and `redis-benchmark` work against `raft-node dev` unchanged (the
/// benchmark starts with CONFIG GET, then pipelines SETs and GETs over 10 connections).
/// Method: start `raft-node dev` on free ports; SET and GET with redis-cli on the leader and
/// GET on a follower; run `redis-benchmark -t set,get -n 2000 -c 10 -q` on the leader and
/// require non-zero rates for both tests and no error in its output; `redis-cli --scan`
/// finds the keys on the leader and on a follower.
#[test]
fn redis_cli_and_redis_benchmark_work_against_the_dev_cluster() {
    // Both are looked up first so that a missing package fails the test at once, by name.
    tool("redis-cli");
    let bench = tool("redis-benchmark");
    let dir = tempfile::tempdir().unwrap();
    let base = harness::free_base_port();
    let dev = harness::Dev::start(dir.path(), base);
    let leader = dev.leader_port;
    assert_eq!(cli(leader, &["SET", "tool-key", "tool-value"]), "OK");
    assert_eq!(cli(leader, &["GET", "tool-key"]), "tool-value");
    let follower = (base + 1..=base + 3).find(|p| *p != leader).unwrap();
    assert_eq!(cli(follower, &["GET", "tool-key"]), "tool-value");
    assert!(cli(leader, &["INFO", "replication"]).contains("role:master"));
    let started = Instant::now();
    let out = run(Command::new(&bench).args([
        "-h",
        "127.0.0.1",
        "-p",
        &leader.to_string(),
        "-t",
        "set,get",
        "-n",
        "2000",
        "-c",
        "10",
        "-q",
    ]));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "redis-benchmark failed: {text}");
    assert!(!text.contains("ERR"), "{text}");
    for test in ["SET", "GET"] {
        let r = rate(&text, test).unwrap_or_else(|| panic!("no {test} rate in: {text}"));
        assert!(r > 0.0, "{test}: {r} requests per second");
    }
    // `redis-cli --scan` walks the key space with SCAN: every key the benchmark wrote (it uses
    // `key:__rand_int__`, one key by default) and ours, on a follower too.
    for port in [leader, follower] {
        let scanned = cli(port, &["--scan"]);
        let keys: Vec<&str> = scanned.lines().collect();
        assert!(keys.contains(&"tool-key"), "--scan on {port}: {keys:?}");
        let matched = cli(port, &["--scan", "--pattern", "tool-*"]);
        assert_eq!(matched, "tool-key");
    }
    eprintln!(
        "redis-benchmark ({:?}, debug build): {}",
        started.elapsed(),
        text.split(['\r', '\n'])
            .filter(|l| l.contains("requests per second"))
            .collect::<Vec<_>>()
            .join("; ")
    );
}
