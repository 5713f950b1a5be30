//! Progress lines for work that takes long on large data: replaying the log into the state
//! machine and restoring a snapshot. An operator watching a node start on gigabytes of data
//! should see what it is doing, how far it got and how long it took; a node starting on a few
//! records should log nothing of it at INFO.
//!
//! The rules, one [`Progress`] per operation: the opening line is INFO when the operation is
//! large by its size (known up front), DEBUG otherwise; a progress line (INFO) comes at most
//! once per [`ProgressPacing::every`], checked only when the operation reports work done, so a
//! hot loop pays one clock read per [`Progress::advance`] call (callers call it per batch, not
//! per record); the closing line with the duration is INFO when anything before it was, or when
//! the operation ran longer than `every`, DEBUG otherwise. The clock is tokio's, so tests with
//! paused time see exact figures.

use std::time::Duration;

use tokio::time::Instant;

/// When progress lines are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProgressPacing {
    /// At most one progress line per this interval, and a closing line at INFO for any
    /// operation that ran longer.
    pub every: Duration,
    /// A replay of at least this many records is announced at INFO.
    pub large_records: u64,
    /// A snapshot of at least this many bytes is announced at INFO.
    pub large_bytes: u64,
}

impl Default for ProgressPacing {
    fn default() -> Self {
        ProgressPacing {
            every: Duration::from_secs(5),
            large_records: 100_000,
            large_bytes: 64 << 20,
        }
    }
}

/// One operation whose progress is logged (see the module documentation for when).
pub struct Progress {
    /// What it is doing, e.g. "replaying".
    doing: &'static str,
    /// What it did, e.g. "replayed".
    did: &'static str,
    /// What it works on, e.g. "1000 records from offset 0 to 1000".
    subject: String,
    unit: &'static str,
    total: u64,
    done: u64,
    every: Duration,
    started: Instant,
    last_line: Instant,
    /// Whether a line of this operation went out at INFO.
    loud: bool,
}

impl Progress {
    /// Starts the clock and writes the opening line, "`doing` `subject`", at INFO when `large`.
    pub fn start(
        doing: &'static str,
        did: &'static str,
        subject: String,
        total: u64,
        unit: &'static str,
        large: bool,
        every: Duration,
    ) -> Progress {
        if large {
            tracing::info!(total, unit, "{doing} {subject}");
        } else {
            tracing::debug!(total, unit, "{doing} {subject}");
        }
        let now = Instant::now();
        Progress {
            doing,
            did,
            subject,
            unit,
            total,
            done: 0,
            every,
            started: now,
            last_line: now,
            loud: large,
        }
    }

    /// Counts `n` more units done; writes a progress line if the last line of this operation
    /// (or its start) is at least `every` ago.
    pub fn advance(&mut self, n: u64) {
        self.done = self.done.saturating_add(n);
        let now = Instant::now();
        if now.duration_since(self.last_line) < self.every {
            return;
        }
        self.last_line = now;
        self.loud = true;
        let (done, total, unit) = (self.done, self.total, self.unit);
        let percent = done.saturating_mul(100).checked_div(total).unwrap_or(100);
        let elapsed_s = now.duration_since(self.started).as_secs_f64();
        tracing::info!(
            done,
            total,
            unit,
            "{} {}: {done} of {total} {unit} done ({percent} %), {elapsed_s:.1} s so far",
            self.doing,
            self.subject,
        );
    }

    /// Writes the closing line, "`did` `subject` in D s".
    pub fn finish(self) {
        let elapsed = self.started.elapsed();
        let elapsed_s = elapsed.as_secs_f64();
        if self.loud || elapsed >= self.every {
            tracing::info!(
                elapsed_s,
                "{} {} in {elapsed_s:.1} s",
                self.did,
                self.subject
            );
        } else {
            tracing::debug!(
                elapsed_s,
                "{} {} in {elapsed_s:.1} s",
                self.did,
                self.subject
            );
        }
    }
}
