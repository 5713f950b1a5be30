//! The protocol's view of its log: extent, epoch history and what is durable. The records
//! themselves live in the driver's log; the core decides which ranges to append, truncate and
//! serve, and learns what became durable through `LogPersisted` inputs.

use std::collections::VecDeque;

use crate::io::{EpochStart, LogState};
use crate::types::{Epoch, Offset, OffsetAndEpoch, Record};

/// Sequence number of a log operation the core asked the driver to perform. The driver reports
/// durability as "every operation up to this one".
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default)]
pub struct LogSeq(pub u64);

#[cfg_attr(feature = "testing", derive(Clone))]
#[derive(Debug)]
pub(crate) struct LogView {
    pub(crate) start: Offset,
    /// The epoch of record `start - 1` (purged or covered by a snapshot); 0 when `start` is 0.
    pub(crate) start_epoch: Epoch,
    pub(crate) end: Offset,
    /// Ascending by epoch and by start; every epoch here has at least one record in the log.
    pub(crate) epochs: Vec<EpochStart>,
    /// Everything below this is durable (and identical to `[start, durable_end)` of this view).
    pub(crate) durable_end: Offset,
    /// Operations not yet reported durable, with the end offset the log has after each.
    pending: VecDeque<(LogSeq, Offset)>,
    next_seq: u64,
}

impl LogView {
    pub(crate) fn new(state: &LogState) -> LogView {
        let mut epochs: Vec<EpochStart> = state
            .epochs
            .iter()
            .copied()
            .filter(|e| e.start < state.end.offset)
            .collect();
        epochs.dedup_by_key(|e| e.epoch);
        LogView {
            start: state.start,
            start_epoch: state.start_epoch,
            end: state.end.offset,
            epochs,
            durable_end: state.end.offset,
            pending: VecDeque::new(),
            next_seq: 1,
        }
    }

    pub(crate) fn last_epoch(&self) -> Epoch {
        self.epochs.last().map_or(self.start_epoch, |e| e.epoch)
    }

    pub(crate) fn end_and_epoch(&self) -> OffsetAndEpoch {
        OffsetAndEpoch::new(self.end, self.last_epoch())
    }

    /// KRaft's `endOffsetForEpoch`: the largest epoch `e' <= epoch` in the log and the offset
    /// where it ends (the start of the next epoch, or the log end). `(0, start)` when the log
    /// has no epoch that old. Below the log start only the epoch of record `start - 1` is
    /// known: an epoch older than that also answers `(start, 0)`, which on a log with a purged
    /// prefix means "ask for the snapshot".
    pub(crate) fn end_offset_for_epoch(&self, epoch: Epoch) -> OffsetAndEpoch {
        let idx = self.epochs.partition_point(|e| e.epoch <= epoch);
        if idx == 0 {
            if self.start > Offset::ZERO && epoch >= self.start_epoch {
                return OffsetAndEpoch::new(self.start, self.start_epoch);
            }
            let first = self.epochs.first().map_or(self.end, |e| e.start);
            return OffsetAndEpoch::new(first, Epoch::ZERO);
        }
        let found = self.epochs[idx - 1];
        let end = self.epochs.get(idx).map_or(self.end, |next| next.start);
        OffsetAndEpoch::new(end, found.epoch)
    }

    /// The epoch of the record at `offset`, if it is in the log.
    pub(crate) fn epoch_at(&self, offset: Offset) -> Option<Epoch> {
        if offset < self.start || offset >= self.end {
            return None;
        }
        let idx = self.epochs.partition_point(|e| e.start <= offset);
        (idx > 0).then(|| self.epochs[idx - 1].epoch)
    }

    fn next_seq(&mut self) -> LogSeq {
        let seq = LogSeq(self.next_seq);
        self.next_seq += 1;
        seq
    }

    /// Records `records` (contiguous from `end`, epochs non-decreasing) as appended.
    pub(crate) fn append(&mut self, records: &[Record]) -> LogSeq {
        for r in records {
            assert_eq!(r.offset, self.end, "log append must be contiguous");
            assert!(
                r.epoch >= self.last_epoch(),
                "epochs in the log never decrease"
            );
            assert!(r.epoch > Epoch::ZERO, "no record carries epoch 0");
            if r.epoch != self.last_epoch() || self.epochs.is_empty() {
                self.epochs.push(EpochStart {
                    epoch: r.epoch,
                    start: r.offset,
                });
            }
            self.end = self.end.next();
        }
        let seq = self.next_seq();
        self.pending.push_back((seq, self.end));
        seq
    }

    /// Records a truncation to `end` (removing every record at or after it).
    pub(crate) fn truncate(&mut self, end: Offset) -> LogSeq {
        assert!(
            end <= self.end && end >= self.start,
            "truncation stays inside the log"
        );
        self.end = end;
        self.epochs.retain(|e| e.start < end);
        self.durable_end = self.durable_end.min(end);
        // Earlier operations, once durable, can only vouch for what survives the truncation.
        for (_, op_end) in self.pending.iter_mut() {
            *op_end = (*op_end).min(end);
        }
        let seq = self.next_seq();
        self.pending.push_back((seq, end));
        seq
    }

    /// Records a purge of the records before `start` (covered by a snapshot).
    pub(crate) fn purge(&mut self, start: Offset) -> LogSeq {
        assert!(
            start > self.start && start <= self.end,
            "a purge moves the start forward inside the log"
        );
        self.start_epoch = self
            .epoch_at(Offset(start.0 - 1))
            .expect("every offset in the log has an epoch");
        let idx = self.epochs.partition_point(|e| e.start <= start);
        if start == self.end {
            self.epochs.clear();
        } else {
            self.epochs.drain(..idx - 1);
            self.epochs[0].start = start;
        }
        self.start = start;
        let seq = self.next_seq();
        self.pending.push_back((seq, self.end));
        seq
    }

    /// Records the replacement of the whole log by a snapshot ending at `start`.
    pub(crate) fn reset(&mut self, start: OffsetAndEpoch) -> LogSeq {
        self.start = start.offset;
        self.start_epoch = start.epoch;
        self.end = start.offset;
        self.epochs.clear();
        self.durable_end = self.durable_end.min(start.offset);
        for (_, op_end) in self.pending.iter_mut() {
            *op_end = (*op_end).min(start.offset);
        }
        let seq = self.next_seq();
        self.pending.push_back((seq, start.offset));
        seq
    }

    /// The driver reports every operation up to `seq` durable.
    pub(crate) fn persisted(&mut self, seq: LogSeq) {
        while let Some(&(s, end)) = self.pending.front() {
            if s > seq {
                break;
            }
            self.pending.pop_front();
            self.durable_end = end;
        }
        assert!(
            self.durable_end <= self.end,
            "durable end never passes the log end"
        );
    }

    pub(crate) fn all_durable(&self) -> bool {
        self.pending.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::RecordKind;
    use bytes::Bytes;

    fn rec(offset: u64, epoch: u32) -> Record {
        Record {
            offset: Offset(offset),
            epoch: Epoch(epoch),
            kind: RecordKind::Data,
            payload: Bytes::new(),
        }
    }

    fn view_with(epochs: &[(u32, u64)]) -> LogView {
        let mut v = LogView::new(&LogState::default());
        let mut off = 0;
        for &(epoch, count) in epochs {
            let recs: Vec<_> = (0..count).map(|i| rec(off + i, epoch)).collect();
            off += count;
            v.append(&recs);
        }
        v
    }

    #[test]
    fn end_offset_for_epoch_answers_largest_not_greater_epoch() {
        let v = view_with(&[(1, 3), (3, 2), (4, 1)]);
        assert_eq!(
            v.end_offset_for_epoch(Epoch(1)),
            OffsetAndEpoch::new(Offset(3), Epoch(1))
        );
        assert_eq!(
            v.end_offset_for_epoch(Epoch(2)),
            OffsetAndEpoch::new(Offset(3), Epoch(1))
        );
        assert_eq!(
            v.end_offset_for_epoch(Epoch(3)),
            OffsetAndEpoch::new(Offset(5), Epoch(3))
        );
        assert_eq!(
            v.end_offset_for_epoch(Epoch(9)),
            OffsetAndEpoch::new(Offset(6), Epoch(4))
        );
        assert_eq!(
            v.end_offset_for_epoch(Epoch(0)),
            OffsetAndEpoch::new(Offset(0), Epoch(0))
        );
        assert_eq!(v.epoch_at(Offset(4)), Some(Epoch(3)));
        assert_eq!(v.epoch_at(Offset(6)), None);
    }

    #[test]
    fn truncation_caps_pending_durability() {
        let mut v = view_with(&[(1, 5)]);
        let first = LogSeq(1);
        let t = v.truncate(Offset(2));
        v.append(&[rec(2, 2)]);
        v.persisted(first);
        assert_eq!(
            v.durable_end,
            Offset(2),
            "a pre-truncation sync vouches only below the cut"
        );
        v.persisted(t);
        assert_eq!(v.durable_end, Offset(2));
        assert!(!v.all_durable());
        v.persisted(LogSeq(3));
        assert_eq!(v.durable_end, Offset(3));
        assert_eq!(v.last_epoch(), Epoch(2));
    }
}
