//! openraft's `benchmarks/minimal` run side by side with the `core` suite, when its binary is
//! given (`OPENRAFT_BENCH_BIN=PATH`): the same shape (3 voters in one process, in-memory log
//! and state machine, no real network, C clients each issuing sequential writes), run on the
//! same machine in the same session, so that the two rates can be compared. Its requests are
//! empty; ours carry 16 B.
//!
//! The binary is built from an openraft checkout, not from this workspace:
//! `cargo build --release --bin bench` in its `benchmarks/minimal` directory.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// Client and server worker threads given to openraft's bench: one client thread and two
/// server workers, the two cores of the machine the project measures on.
const CLIENT_WORKERS: usize = 1;
const SERVER_WORKERS: usize = 2;

/// One run of openraft's bench.
pub struct Run {
    /// Writes committed (the total the bench was asked for, rounded down to whole clients).
    pub writes: u64,
    /// Wall time from the first write to the last one applied on the leader.
    pub elapsed: Duration,
    /// CPU time the whole process spent (its cluster start-up included), if known.
    pub cpu: Option<Duration>,
}

impl Run {
    /// Writes per second.
    pub fn rate(&self) -> f64 {
        self.writes as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// The client and server worker counts the runs use, for the figures' parameters.
pub fn workers() -> (usize, usize) {
    (CLIENT_WORKERS, SERVER_WORKERS)
}

/// CPU time (user + system) this process spent, and that its waited-for children spent, from
/// `/proc/self/stat` (in `USER_HZ` ticks of 10 ms). On a shared machine the wall-clock rate
/// depends on what else runs; writes per CPU second compare the two benches more fairly.
pub fn cpu_times() -> Option<(Duration, Duration)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name may hold spaces: fields are counted after its closing parenthesis.
    let fields: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
    // utime, stime, cutime, cstime are fields 14..=17, i.e. 11..=14 after the name.
    let tick = |i: usize| fields.get(i)?.parse::<u64>().ok();
    let ticks = |a: u64, b: u64| Duration::from_millis((a + b) * 10);
    Some((ticks(tick(11)?, tick(12)?), ticks(tick(13)?, tick(14)?)))
}

/// Runs `bin` with `clients` clients and about `operations` writes in all, 3 members.
pub fn run(bin: &Path, clients: usize, operations: u64) -> Result<Run, String> {
    let clients = clients.max(1) as u64;
    let operations = operations.max(clients);
    let children_before = cpu_times().map(|(_, c)| c);
    let output = Command::new(bin)
        .args(["--client-workers", &CLIENT_WORKERS.to_string()])
        .args(["--server-workers", &SERVER_WORKERS.to_string()])
        .args(["-c", &clients.to_string()])
        .args(["-n", &operations.to_string()])
        .args(["-m", "3"])
        .output()
        .map_err(|e| format!("cannot run {}: {e}", bin.display()))?;
    if !output.status.success() {
        return Err(format!(
            "{} failed ({}): {}",
            bin.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr)
                .lines()
                .last()
                .unwrap_or("")
        ));
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let elapsed = parse_elapsed(&stdout)
        .ok_or_else(|| format!("no `time: ...` in openraft's output: {stdout:?}"))?;
    // The bench issues operations / clients writes per client.
    let writes = operations / clients * clients;
    let cpu = match (children_before, cpu_times()) {
        (Some(before), Some((_, after))) => Some(after.saturating_sub(before)),
        _ => None,
    };
    Ok(Run {
        writes,
        elapsed,
        cpu,
    })
}

/// Finds `time: <Duration as Debug>,` in the bench's summary line, e.g.
/// `..., raft_members: {0, 1, 2}: time: 2.154873921s, ns/op: 1077, op/ms: 928`.
fn parse_elapsed(stdout: &str) -> Option<Duration> {
    let line = stdout.lines().rev().find(|l| l.contains(" time: "))?;
    let rest = &line[line.rfind(" time: ")? + " time: ".len()..];
    let text = rest.split(',').next()?.trim();
    parse_debug_duration(text)
}

/// Parses `Duration`'s `Debug` form: a decimal number followed by `s`, `ms`, `µs`/`us` or `ns`.
fn parse_debug_duration(text: &str) -> Option<Duration> {
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let (number, unit) = text.split_at(split);
    let value: f64 = number.parse().ok()?;
    let seconds = match unit {
        "s" => value,
        "ms" => value / 1e3,
        "µs" | "us" => value / 1e6,
        "ns" => value / 1e9,
        _ => return None,
    };
    (seconds.is_finite() && seconds >= 0.0).then(|| Duration::from_secs_f64(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_line_yields_its_elapsed_time() {
        let out = "client_workers: 1, server_workers: 2, clients: 1024, n: 2m (2_000_000), \
                   batch: 1, raft_members: {0, 1, 2}: time: 2.5s, ns/op: 1250, op/ms: 800\n";
        assert_eq!(parse_elapsed(out), Some(Duration::from_millis(2500)));
        let out = "x: time: 812.5ms, ns/op: 81250, op/ms: 12\n";
        assert_eq!(parse_elapsed(out), Some(Duration::from_micros(812_500)));
        assert_eq!(
            parse_debug_duration("15µs"),
            Some(Duration::from_micros(15))
        );
        assert_eq!(parse_elapsed("no summary here"), None);
        assert_eq!(parse_debug_duration("3 fortnights"), None);
    }

    #[test]
    fn this_process_has_spent_some_cpu_time() {
        let busy = (0..20_000_000u64).fold(0u64, |a, x| a.wrapping_add(x * x));
        assert_ne!(busy, 1);
        let (own, _) = cpu_times().expect("/proc/self/stat is readable on Linux");
        assert!(own > Duration::ZERO);
    }
}
