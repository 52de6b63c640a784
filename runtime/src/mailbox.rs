//! An actor's mailbox: a user lane and a system lane (served first) behind one short lock, and
//! a depth counter that anyone can read without sending a message.
//!
//! # Why one lock and not a lock-free queue
//! Lock-free MPSC queues pad their head and tail to cache lines (256 bytes per actor before a
//! single message) and allocate blocks as they go. A `parking_lot` mutex around two `VecDeque`s
//! costs one uncontended compare-and-swap per operation, allocates nothing until the first
//! message, and makes closing exact: the close happens under the same lock as every push, so a
//! message is either in the queue when it closes (and is drained as a dead letter) or handed back
//! to its sender. The figures are in `docs/benchmarks.md`.
//!
//! # Depth
//! The number of queued user messages is mirrored in an atomic word on every push and pop, so
//! [`MailboxDepth::get`] is a single relaxed load. The cluster router's depth agent reads it on a
//! background tick; nothing on the message path pays for that beyond one store.
//!
//! # Bounded mailboxes
//! A bounded mailbox refuses a user message when it holds `capacity` of them; the message comes
//! back as [`Refused::Full`]. System messages (stop, watch, terminated) are never refused for
//! capacity.

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Waker};

use parking_lot::Mutex;

/// How many user messages a mailbox may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MailboxOptions {
    /// No limit (the default): a tell never fails because the actor is slow.
    #[default]
    Unbounded,
    /// At most this many queued messages; one more goes to dead letters as `MailboxFull`.
    Bounded(usize),
}

impl MailboxOptions {
    /// A bounded mailbox of `capacity` messages (at least 1).
    #[must_use]
    pub fn bounded(capacity: usize) -> Self {
        Self::Bounded(capacity.max(1))
    }

    fn capacity(self) -> usize {
        match self {
            Self::Unbounded => usize::MAX,
            Self::Bounded(n) => n,
        }
    }
}

/// Why a mailbox refused a message; the message comes back inside.
#[derive(Debug)]
pub(crate) enum Refused<T> {
    /// The actor has stopped (or is stopping) and will not process it.
    Closed(T),
    /// A bounded mailbox is at its capacity.
    Full(T),
}

/// Something whose mailbox depth can be read.
pub(crate) trait DepthSource: Send + Sync {
    fn depth(&self) -> usize;
}

/// A cheap handle to read an actor's current mailbox depth: one atomic load, no message.
/// After the actor stops it reads 0.
#[derive(Clone)]
pub struct MailboxDepth {
    source: Arc<dyn DepthSource>,
}

impl fmt::Debug for MailboxDepth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("MailboxDepth").field(&self.get()).finish()
    }
}

impl MailboxDepth {
    pub(crate) fn new(source: Arc<dyn DepthSource>) -> Self {
        Self { source }
    }

    /// The number of user messages queued and not yet taken by the actor.
    #[must_use]
    pub fn get(&self) -> usize {
        self.source.depth()
    }
}

/// What the actor's run loop takes out next.
pub(crate) enum Next<U, S> {
    System(S),
    User(U),
}

pub(crate) struct Mailbox<U, S> {
    lanes: Mutex<Lanes<U, S>>,
    depth: AtomicUsize,
    capacity: usize,
}

struct Lanes<U, S> {
    user: VecDeque<U>,
    system: VecDeque<S>,
    closed: bool,
    /// The actor's waker, kept between waits so parking does not clone it every time.
    waker: Option<Waker>,
    /// The actor is parked waiting for a message: the next push must wake it.
    parked: bool,
}

impl<U, S> Lanes<U, S> {
    /// The waker to wake after unlocking, if the actor is parked (a busy actor is not woken:
    /// it will find the message before it parks again).
    fn wake(&mut self) -> Option<Waker> {
        if std::mem::take(&mut self.parked) {
            self.waker.clone()
        } else {
            None
        }
    }
}

impl<U, S> Mailbox<U, S> {
    pub(crate) fn new(config: MailboxOptions) -> Self {
        Self {
            lanes: Mutex::new(Lanes {
                user: VecDeque::new(),
                system: VecDeque::new(),
                closed: false,
                waker: None,
                parked: false,
            }),
            depth: AtomicUsize::new(0),
            capacity: config.capacity(),
        }
    }

    pub(crate) fn depth(&self) -> usize {
        self.depth.load(Ordering::Relaxed)
    }

    /// Enqueue a user message, or give it back.
    pub(crate) fn push_user(&self, message: U) -> Result<(), Refused<U>> {
        let waker = {
            let mut lanes = self.lanes.lock();
            if lanes.closed {
                return Err(Refused::Closed(message));
            }
            if lanes.user.len() >= self.capacity {
                return Err(Refused::Full(message));
            }
            lanes.user.push_back(message);
            self.depth.store(lanes.user.len(), Ordering::Relaxed);
            lanes.wake()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
        Ok(())
    }

    /// Enqueue a system message, or give it back when the actor has terminated.
    pub(crate) fn push_system(&self, message: S) -> Result<(), S> {
        let waker = {
            let mut lanes = self.lanes.lock();
            if lanes.closed {
                return Err(message);
            }
            lanes.system.push_back(message);
            lanes.wake()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
        Ok(())
    }

    /// Take the next message, system messages first; with `user_too == false` only system ones.
    pub(crate) fn poll_next(&self, cx: &mut Context<'_>, user_too: bool) -> Poll<Next<U, S>> {
        let mut lanes = self.lanes.lock();
        if let Some(message) = lanes.system.pop_front() {
            return Poll::Ready(Next::System(message));
        }
        if user_too && let Some(message) = lanes.user.pop_front() {
            self.depth.store(lanes.user.len(), Ordering::Relaxed);
            return Poll::Ready(Next::User(message));
        }
        match &lanes.waker {
            Some(waker) if waker.will_wake(cx.waker()) => {}
            _ => lanes.waker = Some(cx.waker().clone()),
        }
        lanes.parked = true;
        Poll::Pending
    }

    /// Close both lanes and hand back everything still queued, each lane in order.
    pub(crate) fn close(&self) -> (Vec<U>, Vec<S>) {
        let mut lanes = self.lanes.lock();
        lanes.closed = true;
        lanes.waker = None;
        lanes.parked = false;
        self.depth.store(0, Ordering::Relaxed);
        let user = std::mem::take(&mut lanes.user).into();
        let system = std::mem::take(&mut lanes.system).into();
        (user, system)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::poll_fn;

    #[tokio::test]
    async fn system_messages_are_served_before_user_messages() {
        let mailbox: Mailbox<u32, &str> = Mailbox::new(MailboxOptions::Unbounded);
        mailbox.push_user(1).unwrap();
        mailbox.push_system("stop").unwrap();
        let first = poll_fn(|cx| mailbox.poll_next(cx, true)).await;
        assert!(matches!(first, Next::System("stop")));
        let second = poll_fn(|cx| mailbox.poll_next(cx, true)).await;
        assert!(matches!(second, Next::User(1)));
    }

    #[test]
    fn depth_counts_queued_messages_and_reads_zero_after_close() {
        let mailbox: Mailbox<u32, ()> = Mailbox::new(MailboxOptions::Unbounded);
        for i in 0..5 {
            mailbox.push_user(i).unwrap();
        }
        assert_eq!(mailbox.depth(), 5);
        let (drained, _) = mailbox.close();
        assert_eq!(drained, vec![0, 1, 2, 3, 4]);
        assert_eq!(mailbox.depth(), 0);
        assert!(matches!(mailbox.push_user(9), Err(Refused::Closed(9))));
        assert!(mailbox.push_system(()).is_err());
    }

    #[test]
    fn bounded_mailbox_refuses_past_capacity_and_gives_the_message_back() {
        let mailbox: Mailbox<u32, ()> = Mailbox::new(MailboxOptions::bounded(2));
        mailbox.push_user(1).unwrap();
        mailbox.push_user(2).unwrap();
        assert!(matches!(mailbox.push_user(3), Err(Refused::Full(3))));
        assert_eq!(mailbox.depth(), 2);
        // System messages are never refused for capacity.
        assert!(mailbox.push_system(()).is_ok());
    }

    #[test]
    fn concurrent_senders_lose_nothing_across_a_close() {
        for _ in 0..20 {
            let mailbox: Arc<Mailbox<u64, ()>> = Arc::new(Mailbox::new(MailboxOptions::Unbounded));
            let refused = Arc::new(AtomicUsize::new(0));
            let senders: Vec<_> = (0..4)
                .map(|_| {
                    let mailbox = Arc::clone(&mailbox);
                    let refused = Arc::clone(&refused);
                    std::thread::spawn(move || {
                        for i in 0..2_000 {
                            if mailbox.push_user(i).is_err() {
                                refused.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    })
                })
                .collect();
            let waker = Waker::noop();
            let mut cx = Context::from_waker(waker);
            let mut taken = 0usize;
            for _ in 0..500 {
                if let Poll::Ready(Next::User(_)) = mailbox.poll_next(&mut cx, true) {
                    taken += 1;
                }
            }
            let drained = mailbox.close().0.len();
            for sender in senders {
                sender.join().unwrap();
            }
            assert_eq!(taken + drained + refused.load(Ordering::Relaxed), 8_000);
        }
    }
}
