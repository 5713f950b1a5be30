//! Proposals waiting for their outcome, by offset.

use std::collections::VecDeque;

use super::outcome::{Committed, WriteError};
use tokio::sync::oneshot;

use crate::types::{Epoch, Offset};

/// Where a proposal's caller waits for its result.
pub(super) type Reply = oneshot::Sender<Result<Committed, WriteError>>;

/// Proposals waiting to be applied, by offset (ascending, one per offset). Proposals arrive in
/// offset order and apply in offset order, so the common cases are a push at the back and a pop
/// at the front: cheaper than a map, which the driver paid for on every write. Other orders
/// (a proposal below a waiting one, a record applied past a waiter that will never apply) are
/// handled by searching, with the same results a map would give.
#[derive(Default)]
pub(super) struct Waiters(pub(super) VecDeque<(Offset, Epoch, Reply)>);

impl Waiters {
    /// Adds the waiter of `offset`, replacing (and dropping) any waiter already there.
    pub(super) fn insert(&mut self, offset: Offset, epoch: Epoch, reply: Reply) {
        match self.0.back() {
            Some((last, _, _)) if *last >= offset => {
                match self.0.binary_search_by_key(&offset, |(o, _, _)| *o) {
                    Ok(i) => self.0[i] = (offset, epoch, reply),
                    Err(i) => self.0.insert(i, (offset, epoch, reply)),
                }
            }
            _ => self.0.push_back((offset, epoch, reply)),
        }
    }

    /// Removes and returns the waiter of `offset`, if any.
    pub(super) fn take(&mut self, offset: Offset) -> Option<(Epoch, Reply)> {
        let (first, _, _) = self.0.front()?;
        if *first == offset {
            return self.0.pop_front().map(|(_, e, r)| (e, r));
        }
        if *first > offset {
            return None;
        }
        let i = self.0.binary_search_by_key(&offset, |(o, _, _)| *o).ok()?;
        self.0.remove(i).map(|(_, e, r)| (e, r))
    }

    /// Removes and returns the waiters at or above `from`, in offset order.
    pub(super) fn split_off(&mut self, from: Offset) -> VecDeque<(Offset, Epoch, Reply)> {
        let i = self.0.partition_point(|(o, _, _)| *o < from);
        self.0.split_off(i)
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
        // A second waiter at an offset replaces the first, whose caller learns it is gone.
        let mut replaced = waiter(&mut w, 0, 1);
        let _e = waiter(&mut w, 0, 2);
        assert_eq!(offsets(&w), vec![0, 2, 5, 6, 7]);
        assert!(
            matches!(
                replaced.try_recv(),
                Err(oneshot::error::TryRecvError::Closed)
            ),
            "the replaced sender was dropped"
        );
        assert_eq!(w.0[0].1, Epoch(2));
    }

    #[test]
    fn waiters_are_taken_by_offset_at_the_front_or_further_in() {
        let mut w = Waiters::default();
        let _r: Vec<_> = [3, 4, 6, 9].iter().map(|o| waiter(&mut w, *o, 1)).collect();
        assert!(w.take(Offset(1)).is_none(), "below every waiter");
        assert!(w.take(Offset(3)).is_some());
        assert_eq!(offsets(&w), vec![4, 6, 9]);
        // Past a waiter that never applied: found by searching, the one below stays.
        assert!(w.take(Offset(6)).is_some());
        assert!(w.take(Offset(7)).is_none());
        assert_eq!(offsets(&w), vec![4, 9]);
        assert!(w.take(Offset(4)).is_some());
        assert!(w.take(Offset(9)).is_some());
        assert!(w.take(Offset(9)).is_none());
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
        assert_eq!(w.split_off(Offset(0)).len(), 2);
        assert!(w.0.is_empty());
    }
}
