//! The bounded in-memory tail of the log: serves fetch responses and the applier without
//! touching storage.

use std::collections::VecDeque;

use crate::types::{Offset, Record};

/// Recent log records in memory, from `start` to the log end.
pub(super) struct LogCache {
    pub(super) start: Offset,
    pub(super) records: VecDeque<Record>,
    pub(super) bytes: usize,
}

impl LogCache {
    pub(super) fn new(end: Offset) -> LogCache {
        LogCache {
            start: end,
            records: VecDeque::new(),
            bytes: 0,
        }
    }

    pub(super) fn end(&self) -> Offset {
        self.start.plus(self.records.len() as u64)
    }

    pub(super) fn append(&mut self, records: &[Record]) {
        for r in records {
            assert_eq!(
                r.offset,
                self.end(),
                "the cache follows the log contiguously"
            );
            self.bytes += r.encoded_len();
            self.records.push_back(r.clone());
        }
    }

    pub(super) fn truncate(&mut self, end: Offset) {
        if end < self.start {
            self.records.clear();
            self.bytes = 0;
            self.start = end;
            return;
        }
        while self.end() > end {
            let r = self
                .records
                .pop_back()
                .expect("end > start implies a record");
            self.bytes -= r.encoded_len();
        }
    }

    /// Drops the oldest records while over budget, keeping everything at or above `keep_from`.
    pub(super) fn evict(&mut self, budget: usize, keep_from: Offset) {
        while self.bytes > budget && self.start < keep_from {
            let Some(r) = self.records.pop_front() else {
                break;
            };
            self.bytes -= r.encoded_len();
            self.start = self.start.next();
        }
    }

    /// The records of `[from, to)` within `max_bytes`, if the cache holds `from`.
    pub(super) fn read(&self, from: Offset, to: Offset, max_bytes: u64) -> Option<Vec<Record>> {
        if from < self.start {
            return None;
        }
        let skip = (from.0 - self.start.0) as usize;
        let take = to.0.min(self.end().0).saturating_sub(from.0) as usize;
        let mut out = Vec::new();
        let mut bytes = 0u64;
        for r in self.records.iter().skip(skip).take(take) {
            bytes += r.encoded_len() as u64;
            if !out.is_empty() && bytes > max_bytes {
                break;
            }
            out.push(r.clone());
        }
        Some(out)
    }
}
