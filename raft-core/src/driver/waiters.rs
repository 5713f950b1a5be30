//! Proposals waiting for their outcome, by offset.

use std::collections::VecDeque;

use super::outcome::{Committed, WriteError};
use tokio::sync::oneshot;

use crate::types::{Epoch, Offset};

/// Where a proposal's caller waits for its result.
pub(super) type Reply = oneshot::Sender<Result<Committed, WriteError>>;

/// Proposals waiting to be applied, by offset (ascending). Proposals arrive in offset order and
/// apply in offset order, so the common cases are a push at the back and a pop at the front:
/// cheaper than a map, which the driver paid for on every write.
///
/// One offset may have several waiters, of different epochs: a leader's record truncated away
/// keeps its waiter (another replica may still hold it and a later leader may commit it), and
/// when this replica leads again it proposes a new record at the same offset. The record that
/// is applied there settles all of them: the one of its epoch committed, the others lost.
#[derive(Default)]
pub(super) struct Waiters(pub(super) VecDeque<(Offset, Epoch, Reply)>);

impl Waiters {
    /// Adds a waiter at `offset`, after any already there.
    pub(super) fn insert(&mut self, offset: Offset, epoch: Epoch, reply: Reply) {
        match self.0.back() {
            Some((last, _, _)) if *last > offset => {
                let i = self.0.partition_point(|(o, _, _)| *o <= offset);
                self.0.insert(i, (offset, epoch, reply));
            }
            _ => self.0.push_back((offset, epoch, reply)),
        }
    }

    /// Removes and returns the first waiter at `offset`; called until `None` to take them all.
    /// Allocates nothing: it runs for every applied record.
    pub(super) fn pop_at(&mut self, offset: Offset) -> Option<(Epoch, Reply)> {
        match self.0.front() {
            Some((first, _, _)) if *first == offset => self.0.pop_front().map(|(_, e, r)| (e, r)),
            Some((first, _, _)) if *first < offset => {
                // Past a waiter that never applied: search, leaving the ones below.
                let i = self.0.partition_point(|(o, _, _)| *o < offset);
                match self.0.get(i) {
                    Some((o, _, _)) if *o == offset => self.0.remove(i).map(|(_, e, r)| (e, r)),
                    _ => None,
                }
            }
            _ => None,
        }
    }

    /// Removes and returns every waiter at `offset`.
    #[cfg(test)]
    pub(super) fn take(&mut self, offset: Offset) -> Vec<(Epoch, Reply)> {
        std::iter::from_fn(|| self.pop_at(offset)).collect()
    }

    /// Removes and returns the waiters at or above `from`, in offset order.
    pub(super) fn split_off(&mut self, from: Offset) -> VecDeque<(Offset, Epoch, Reply)> {
        let i = self.0.partition_point(|(o, _, _)| *o < from);
        self.0.split_off(i)
    }

    /// Removes and returns the waiters at or above `from` proposed before `epoch`.
    pub(super) fn take_older(&mut self, from: Offset, epoch: Epoch) -> Vec<Reply> {
        let i = self.0.partition_point(|(o, _, _)| *o < from);
        let (kept, taken): (VecDeque<_>, VecDeque<_>) =
            self.0.drain(i..).partition(|(_, e, _)| *e >= epoch);
        self.0.extend(kept);
        taken.into_iter().map(|(_, _, r)| r).collect()
    }

    /// Removes and returns the waiters below `end`, in offset order.
    pub(super) fn take_below(&mut self, end: Offset) -> VecDeque<(Offset, Epoch, Reply)> {
        let i = self.0.partition_point(|(o, _, _)| *o < end);
        self.0.drain(..i).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiter(
        waiters: &mut Waiters,
        offset: u64,
        epoch: u32,
    ) -> oneshot::Receiver<Result<Committed, WriteError>> {
        let (tx, rx) = oneshot::channel();
        waiters.insert(Offset(offset), Epoch(epoch), tx);
        rx
    }

    fn offsets(waiters: &Waiters) -> Vec<u64> {
        waiters.0.iter().map(|(o, _, _)| o.0).collect()
    }

    #[test]
    fn waiters_stay_in_offset_order_whatever_the_insertion_order() {
        let mut w = Waiters::default();
        let _a = waiter(&mut w, 5, 1);
        let _b = waiter(&mut w, 7, 1);
        let _c = waiter(&mut w, 6, 1);
        let _d = waiter(&mut w, 2, 1);
        assert_eq!(offsets(&w), vec![2, 5, 6, 7]);
        // A second waiter at an offset (a later epoch's record there) joins the first.
        let _kept = waiter(&mut w, 5, 1);
        let _e = waiter(&mut w, 5, 2);
        assert_eq!(offsets(&w), vec![2, 5, 5, 5, 6, 7]);
        let at_five: Vec<u32> = w.take(Offset(5)).iter().map(|(e, _)| e.0).collect();
        assert_eq!(
            at_five,
            vec![1, 1, 2],
            "all waiters of an offset, in insertion order"
        );
        assert_eq!(offsets(&w), vec![2, 6, 7]);
    }

    #[test]
    fn waiters_are_taken_by_offset_at_the_front_or_further_in() {
        let mut w = Waiters::default();
        let _r: Vec<_> = [3, 4, 6, 9].iter().map(|o| waiter(&mut w, *o, 1)).collect();
        assert!(w.take(Offset(1)).is_empty(), "below every waiter");
        assert!(w.take(Offset(3)).len() == 1);
        assert_eq!(offsets(&w), vec![4, 6, 9]);
        // Past a waiter that never applied: found by searching, the one below stays.
        assert!(w.take(Offset(6)).len() == 1);
        assert!(w.take(Offset(7)).is_empty());
        assert_eq!(offsets(&w), vec![4, 9]);
        assert!(w.take(Offset(4)).len() == 1);
        assert!(w.take(Offset(9)).len() == 1);
        assert!(w.take(Offset(9)).is_empty());
        assert!(w.0.is_empty());
    }

    #[test]
    fn waiters_split_off_everything_at_or_above_an_offset() {
        let mut w = Waiters::default();
        let _r: Vec<_> = [1, 2, 4, 5].iter().map(|o| waiter(&mut w, *o, 1)).collect();
        let tail: Vec<u64> = w.split_off(Offset(3)).iter().map(|(o, _, _)| o.0).collect();
        assert_eq!(tail, vec![4, 5]);
        assert_eq!(offsets(&w), vec![1, 2]);
        assert!(w.split_off(Offset(9)).is_empty());
        let below: Vec<u64> = w
            .take_below(Offset(2))
            .iter()
            .map(|(o, _, _)| o.0)
            .collect();
        assert_eq!(below, vec![1]);
        assert_eq!(w.split_off(Offset(0)).len(), 1);
        assert!(w.0.is_empty());
    }
}
