//! Per-command counters behind `INFO commandstats`: calls, time spent, and requests refused
//! before running (`rejected_calls`) or answered with an error (`failed_calls`), as Redis
//! counts them. A command is its index in the command table, so counting a request is a
//! lookup without allocation and relaxed atomic additions.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How a request ended, for its command's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// It ran and answered normally.
    Ok,
    /// Refused before it ran (wrong arguments, not authenticated, not allowed here): counted
    /// in `rejected_calls` only, as Redis does.
    Rejected,
    /// It ran and answered an error: a call and a `failed_calls`.
    Failed,
}

#[derive(Debug, Default)]
struct Counter {
    calls: AtomicU64,
    usec: AtomicU64,
    rejected: AtomicU64,
    failed: AtomicU64,
}

/// The counters of every command of the table.
#[derive(Debug)]
pub struct CommandStats {
    names: Vec<&'static str>,
    index: HashMap<&'static str, usize>,
    counters: Vec<Counter>,
}

/// The longest command name looked up (longer names are no command).
const NAME_MAX: usize = 32;

impl CommandStats {
    /// Counters for these command names (lower case); a name's position is its index.
    pub fn new(names: Vec<&'static str>) -> CommandStats {
        let index = names.iter().enumerate().map(|(i, n)| (*n, i)).collect();
        let counters = names.iter().map(|_| Counter::default()).collect();
        CommandStats {
            names,
            index,
            counters,
        }
    }

    /// The index of the command a request names, in any case.
    pub fn index(&self, name: &[u8]) -> Option<usize> {
        if name.len() > NAME_MAX {
            return None;
        }
        let mut buf = [0u8; NAME_MAX];
        let buf = &mut buf[..name.len()];
        buf.copy_from_slice(name);
        buf.make_ascii_lowercase();
        self.index.get(std::str::from_utf8(buf).ok()?).copied()
    }

    /// The name of the command at `i`.
    pub fn name(&self, i: usize) -> &'static str {
        self.names.get(i).copied().unwrap_or("unknown")
    }

    /// Counts one request of the command at `i` that took `took`.
    pub fn record(&self, i: usize, took: Duration, outcome: Outcome) {
        let Some(c) = self.counters.get(i) else {
            return;
        };
        if outcome == Outcome::Rejected {
            c.rejected.fetch_add(1, Ordering::Relaxed);
            return;
        }
        c.calls.fetch_add(1, Ordering::Relaxed);
        c.usec.fetch_add(took.as_micros() as u64, Ordering::Relaxed);
        if outcome == Outcome::Failed {
            c.failed.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Sets every counter back to zero (`CONFIG RESETSTAT`).
    pub fn reset(&self) {
        for c in &self.counters {
            for a in [&c.calls, &c.usec, &c.rejected, &c.failed] {
                a.store(0, Ordering::Relaxed);
            }
        }
    }

    /// The `# Commandstats` section: a line for every command seen, in table order.
    pub fn section(&self) -> String {
        let mut s = String::from("# Commandstats\r\n");
        for (name, c) in self.names.iter().zip(&self.counters) {
            let calls = c.calls.load(Ordering::Relaxed);
            let rejected = c.rejected.load(Ordering::Relaxed);
            if calls == 0 && rejected == 0 {
                continue;
            }
            let usec = c.usec.load(Ordering::Relaxed);
            let per_call = if calls == 0 {
                0.0
            } else {
                usec as f64 / calls as f64
            };
            let _ = write!(
                s,
                "cmdstat_{name}:calls={calls},usec={usec},usec_per_call={per_call:.2},\
                 rejected_calls={rejected},failed_calls={}\r\n",
                c.failed.load(Ordering::Relaxed)
            );
        }
        s + "\r\n"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_calls_time_and_errors_per_command() {
        let stats = CommandStats::new(vec!["get", "set", "del"]);
        let set = stats.index(b"SeT").unwrap();
        assert_eq!(stats.name(set), "set");
        assert_eq!(stats.index(b"nope"), None);
        assert_eq!(stats.index(&[b'a'; 40]), None);
        stats.record(set, Duration::from_micros(10), Outcome::Ok);
        stats.record(set, Duration::from_micros(20), Outcome::Failed);
        stats.record(set, Duration::from_micros(99), Outcome::Rejected);
        let del = stats.index(b"del").unwrap();
        stats.record(del, Duration::from_micros(3), Outcome::Rejected);
        let s = stats.section();
        assert_eq!(
            s,
            "# Commandstats\r\n\
             cmdstat_set:calls=2,usec=30,usec_per_call=15.00,rejected_calls=1,failed_calls=1\r\n\
             cmdstat_del:calls=0,usec=0,usec_per_call=0.00,rejected_calls=1,failed_calls=0\r\n\r\n",
            "commands never seen are left out; a rejected request is no call"
        );
        stats.reset();
        assert_eq!(
            stats.section(),
            "# Commandstats\r\n\r\n",
            "CONFIG RESETSTAT"
        );
    }
}
