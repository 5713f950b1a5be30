//! Smoke test with the stock Redis tools (Debian's `redis-tools`) against `raft-node dev`: the
//! node must be usable by `redis-cli` and `redis-benchmark` unchanged.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::harness;

/// The path of `tool` on `PATH`; fails the test, saying what to install, when it is missing.
pub(crate) fn tool(tool: &str) -> std::path::PathBuf {
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

pub(crate) fn cli(port: u16, args: &[&str]) -> String {
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

/// The first `n` data lines `redis-cli --stat` prints (it runs until killed; `stdbuf` makes
/// it write each line as it comes), within 30 s.
fn stat_lines(port: u16, n: usize) -> Vec<String> {
    let mut child = Command::new(tool("stdbuf"))
        .arg("-oL")
        .arg(tool("redis-cli"))
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "--stat",
            "-i",
            "0.2",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut lines = Vec::new();
    while lines.len() < n {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            // The data lines start with the key count; the two header lines do not.
            Ok(l) if l.starts_with(|c: char| c.is_ascii_digit()) => lines.push(l),
            Ok(_) => {}
            Err(_) => break,
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(lines.len(), n, "redis-cli --stat printed {lines:?}");
    lines
}

/// Goal: `redis-cli` and `redis-benchmark` work against `raft-node dev` unchanged (the
/// benchmark starts with CONFIG GET, then pipelines each test's command over 10 connections).
/// Method: start `raft-node dev` on free ports; SET and GET with redis-cli on the leader and
/// GET on a follower; run `redis-benchmark -t set,get,incr,lpush,rpush,lpop,rpop,sadd,hset,
/// spop,zadd,lrange -n 1000 -c 10 -q` on the leader and require a non-zero rate for every
/// test and no error in its output; `redis-cli --scan` finds the keys on the leader and on a
/// follower; `--bigkeys` names the biggest key of every type; `--stat` prints real figures.
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
        "set,get,incr,lpush,rpush,lpop,rpop,sadd,hset,spop,zadd,lrange",
        "-n",
        "1000",
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
    for test in [
        "SET",
        "GET",
        "INCR",
        "LPUSH",
        "RPUSH",
        "LPOP",
        "RPOP",
        "SADD",
        "HSET",
        "SPOP",
        "ZADD",
        "LPUSH (needed to benchmark LRANGE)",
        "LRANGE_100 (first 100 elements)",
        "LRANGE_600 (first 600 elements)",
    ] {
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
    // `--bigkeys` samples every key with SCAN, TYPE and each type's size command; the
    // benchmark left a list, a hash and a sorted set (its SPOPs empty its set).
    assert_eq!(cli(leader, &["SADD", "tool-set", "a", "b", "c"]), "3");
    let big = cli(follower, &["--bigkeys"]);
    for line in [
        "Biggest   list found '\"mylist\"'",
        "Biggest    set found '\"tool-set\"' has 3 members",
        "Biggest   hash found '\"myhash\"'",
        "Biggest   zset found '\"myzset\"'",
        "Biggest string found",
    ] {
        assert!(big.contains(line), "--bigkeys lacks {line:?}:\n{big}");
    }
    // `--stat` reads INFO: keys, memory, clients and request counts, none missing.
    let stats = stat_lines(leader, 2);
    for l in &stats {
        assert!(
            !l.contains("-9223372036854775808"),
            "a missing INFO field: {l}"
        );
        let keys: u64 = l.split_whitespace().next().unwrap().parse().unwrap();
        assert!(keys >= 5, "{l}");
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
