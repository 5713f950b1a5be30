//! What wakes the replica task: its timer, a command, an inbound RPC or a completion, polled
//! fairly and in an order that depends only on the events.

use std::time::Duration;

use tokio::sync::mpsc;

use super::task_messages::{Command, Done, Inbound};

/// How long the driver waits before waking a replica whose tick left work due at once.
const SPIN_FLOOR: Duration = Duration::from_millis(1);

/// What woke the task.
pub(super) enum Wake {
    Timer,
    Command(Command),
    Inbound(Inbound),
    Done(Done),
}

/// The task's event sources, polled fairly and deterministically: each turn starts with the
/// source after the one that started the previous turn, so none starves another, and the order
/// depends on nothing but the events (unlike `tokio::select!`, which draws a random start and
/// would make a seeded run of the driver irreproducible). A closed channel is skipped.
#[derive(Default)]
pub(super) struct Sources {
    turn: usize,
    closed: [bool; 3],
}

impl Sources {
    pub(super) async fn next(
        &mut self,
        mut timer: std::pin::Pin<&mut tokio::time::Sleep>,
        commands: &mut mpsc::Receiver<Command>,
        inbound: &mut mpsc::Receiver<Inbound>,
        done: &mut mpsc::Receiver<Done>,
    ) -> Wake {
        use std::future::Future;
        use std::task::Poll;
        let start = self.turn;
        self.turn = (self.turn + 1) % 4;
        std::future::poll_fn(|cx| {
            for i in 0..4 {
                let source = (start + i) % 4;
                match source {
                    0 => {
                        if timer.as_mut().poll(cx).is_ready() {
                            return Poll::Ready(Wake::Timer);
                        }
                    }
                    _ if self.closed[source - 1] => {}
                    1 => match commands.poll_recv(cx) {
                        Poll::Ready(Some(c)) => return Poll::Ready(Wake::Command(c)),
                        Poll::Ready(None) => self.closed[0] = true,
                        Poll::Pending => {}
                    },
                    2 => match inbound.poll_recv(cx) {
                        Poll::Ready(Some(r)) => return Poll::Ready(Wake::Inbound(r)),
                        Poll::Ready(None) => self.closed[1] = true,
                        Poll::Pending => {}
                    },
                    _ => match done.poll_recv(cx) {
                        Poll::Ready(Some(d)) => return Poll::Ready(Wake::Done(d)),
                        Poll::Ready(None) => self.closed[2] = true,
                        Poll::Pending => {}
                    },
                }
            }
            Poll::Pending
        })
        .await
    }
}

/// When the timer next wakes the replica whose deadline is `due`, and whether that is the spin
/// floor: `ticked_at` is when the timer last woke it, if nothing else stepped it since. A tick
/// that leaves its deadline at or before the tick itself would wake the replica again at once,
/// forever; it is woken [`SPIN_FLOOR`] after that tick instead. A deadline in the past after any
/// other step (a command, an answer) is work to do now, and is done at once.
pub(super) fn timer_wake(
    due: tokio::time::Instant,
    ticked_at: Option<tokio::time::Instant>,
) -> (tokio::time::Instant, bool) {
    match ticked_at {
        Some(t) if due <= t => (t + SPIN_FLOOR, true),
        _ => (due, false),
    }
}

#[cfg(test)]
mod tests {
    use super::{timer_wake, SPIN_FLOOR};
    use std::time::Duration;
    use tokio::time::Instant;

    #[test]
    fn only_a_tick_that_leaves_itself_due_is_held_to_the_spin_floor() {
        let tick = Instant::now();
        let ms = Duration::from_millis;
        // A deadline after the tick: woken at it.
        assert_eq!(timer_wake(tick + ms(5), Some(tick)), (tick + ms(5), false));
        // A deadline at or before the tick that just ran: the tick did not do that work, so
        // waking at once would spin; woken a floor after the tick instead.
        assert_eq!(timer_wake(tick, Some(tick)), (tick + SPIN_FLOOR, true));
        assert_eq!(
            timer_wake(tick - ms(3), Some(tick)),
            (tick + SPIN_FLOOR, true)
        );
        // After any other step, a deadline already past is work due now.
        assert_eq!(timer_wake(tick - ms(3), None), (tick - ms(3), false));
    }
}
