//! An actor's mailbox: a lock-free user queue, a small system queue that is served first, and a
//! depth counter that anyone can read without sending a message.
//!
//! # Depth
//! The depth is one atomic word shared by senders and the actor. A sender reserves a slot by
//! incrementing it before pushing, the actor decrements it after popping, so
//! [`MailboxDepth::get`] is a single relaxed load. The cluster router's depth agent reads it on a
//! background tick; nothing on the message path pays for that.
//!
//! # Closing without losing anything
//! The top bit of the depth word is the *closed* flag. A sender that sees it set gets its message
//! back (it becomes a dead letter at the call site). The actor closes with one `fetch_or`, which
//! also tells it exactly how many messages were admitted before the close; it drains precisely that
//! many, waiting out a sender that reserved a slot but has not pushed yet. So every message is
//! either processed, or handed back to its sender, or drained as a dead letter — never stranded.
//!
//! # Bounded mailboxes
//! A bounded mailbox refuses a message when the reserved count would exceed its capacity; the
//! message comes back as [`Refused::Full`]. System messages (stop, watch, terminated) are never
//! subject to the bound.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};

use atomic_waker::AtomicWaker;
use crossbeam_queue::SegQueue;
use parking_lot::Mutex;

const CLOSED: usize = 1 << (usize::BITS - 1);

/// How many user messages a mailbox may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MailboxConfig {
    /// No limit (the default): a tell never fails because the actor is slow.
    #[default]
    Unbounded,
    /// At most this many queued messages; one more goes to dead letters as `MailboxFull`.
    Bounded(usize),
}

impl MailboxConfig {
    /// A bounded mailbox of `capacity` messages (at least 1).
    #[must_use]
    pub fn bounded(capacity: usize) -> Self {
        Self::Bounded(capacity.max(1))
    }

    fn capacity(self) -> usize {
        match self {
            Self::Unbounded => CLOSED - 1,
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

/// A cheap handle to read an actor's current mailbox depth: one atomic load, no message.
///
/// It keeps only the counter alive, not the actor. After the actor stops it reads 0.
#[derive(Clone, Debug)]
pub struct MailboxDepth {
    depth: Arc<AtomicUsize>,
}

impl MailboxDepth {
    /// The number of user messages queued and not yet taken by the actor.
    #[must_use]
    pub fn get(&self) -> usize {
        let raw = self.depth.load(Ordering::Relaxed);
        if raw & CLOSED != 0 { 0 } else { raw }
    }
}

/// What the actor's run loop takes out next.
pub(crate) enum Next<U, S> {
    System(S),
    User(U),
}

pub(crate) struct Mailbox<U, S> {
    user: SegQueue<U>,
    depth: Arc<AtomicUsize>,
    capacity: usize,
    system: Mutex<SystemQueue<S>>,
    system_pending: AtomicBool,
    waker: AtomicWaker,
}

struct SystemQueue<S> {
    queue: VecDeque<S>,
    closed: bool,
}

impl<U, S> Mailbox<U, S> {
    pub(crate) fn new(config: MailboxConfig) -> Self {
        Self {
            user: SegQueue::new(),
            depth: Arc::new(AtomicUsize::new(0)),
            capacity: config.capacity(),
            system: Mutex::new(SystemQueue {
                queue: VecDeque::new(),
                closed: false,
            }),
            system_pending: AtomicBool::new(false),
            waker: AtomicWaker::new(),
        }
    }

    pub(crate) fn depth_handle(&self) -> MailboxDepth {
        MailboxDepth {
            depth: Arc::clone(&self.depth),
        }
    }

    pub(crate) fn depth(&self) -> usize {
        let raw = self.depth.load(Ordering::Relaxed);
        if raw & CLOSED != 0 { 0 } else { raw }
    }

    /// Enqueue a user message, or give it back.
    pub(crate) fn push_user(&self, message: U) -> Result<(), Refused<U>> {
        let before = self.depth.fetch_add(1, Ordering::AcqRel);
        if before & CLOSED != 0 {
            self.depth.fetch_sub(1, Ordering::AcqRel);
            return Err(Refused::Closed(message));
        }
        if before >= self.capacity {
            self.depth.fetch_sub(1, Ordering::AcqRel);
            return Err(Refused::Full(message));
        }
        self.user.push(message);
        self.waker.wake();
        Ok(())
    }

    /// Enqueue a system message, or give it back when the actor has terminated.
    pub(crate) fn push_system(&self, message: S) -> Result<(), S> {
        {
            let mut system = self.system.lock();
            if system.closed {
                return Err(message);
            }
            system.queue.push_back(message);
            self.system_pending.store(true, Ordering::Release);
        }
        self.waker.wake();
        Ok(())
    }

    fn pop_system(&self) -> Option<S> {
        if !self.system_pending.load(Ordering::Acquire) {
            return None;
        }
        let mut system = self.system.lock();
        let next = system.queue.pop_front();
        if system.queue.is_empty() {
            self.system_pending.store(false, Ordering::Release);
        }
        next
    }

    fn pop_user(&self) -> Option<U> {
        let message = self.user.pop()?;
        self.depth.fetch_sub(1, Ordering::AcqRel);
        Some(message)
    }

    /// Take the next message, system messages first; with `user_too == false` only system ones.
    pub(crate) fn poll_next(&self, cx: &mut Context<'_>, user_too: bool) -> Poll<Next<U, S>> {
        for attempt in 0..2 {
            if let Some(message) = self.pop_system() {
                return Poll::Ready(Next::System(message));
            }
            if user_too {
                if let Some(message) = self.pop_user() {
                    return Poll::Ready(Next::User(message));
                }
            }
            if attempt == 0 {
                // Register before the second look, so a push between the two looks wakes us.
                self.waker.register(cx.waker());
            }
        }
        Poll::Pending
    }

    /// Close the user queue and hand back every message admitted before the close, in order.
    pub(crate) fn close_user(&self) -> Vec<U> {
        let before = self.depth.fetch_or(CLOSED, Ordering::AcqRel);
        let mut admitted = before & !CLOSED;
        let mut drained = Vec::with_capacity(admitted);
        while admitted > 0 {
            match self.user.pop() {
                Some(message) => {
                    drained.push(message);
                    admitted -= 1;
                }
                // A sender reserved its slot and is between the reservation and the push.
                None => std::thread::yield_now(),
            }
        }
        // Leave the depth at exactly CLOSED so late senders still back out symmetrically.
        self.depth.fetch_sub(before & !CLOSED, Ordering::AcqRel);
        drained
    }

    /// Close the system queue and hand back whatever is still in it.
    pub(crate) fn close_system(&self) -> Vec<S> {
        let mut system = self.system.lock();
        system.closed = true;
        self.system_pending.store(false, Ordering::Release);
        system.queue.drain(..).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::poll_fn;

    #[tokio::test]
    async fn system_messages_are_served_before_user_messages() {
        let mailbox: Mailbox<u32, &str> = Mailbox::new(MailboxConfig::Unbounded);
        mailbox.push_user(1).unwrap();
        mailbox.push_system("stop").unwrap();
        let first = poll_fn(|cx| mailbox.poll_next(cx, true)).await;
        assert!(matches!(first, Next::System("stop")));
        let second = poll_fn(|cx| mailbox.poll_next(cx, true)).await;
        assert!(matches!(second, Next::User(1)));
    }

    #[test]
    fn depth_counts_queued_messages_and_reads_zero_after_close() {
        let mailbox: Mailbox<u32, ()> = Mailbox::new(MailboxConfig::Unbounded);
        let depth = mailbox.depth_handle();
        for i in 0..5 {
            mailbox.push_user(i).unwrap();
        }
        assert_eq!(depth.get(), 5);
        let drained = mailbox.close_user();
        assert_eq!(drained, vec![0, 1, 2, 3, 4]);
        assert_eq!(depth.get(), 0);
        assert!(matches!(mailbox.push_user(9), Err(Refused::Closed(9))));
    }

    #[test]
    fn bounded_mailbox_refuses_past_capacity_and_gives_the_message_back() {
        let mailbox: Mailbox<u32, ()> = Mailbox::new(MailboxConfig::bounded(2));
        mailbox.push_user(1).unwrap();
        mailbox.push_user(2).unwrap();
        assert!(matches!(mailbox.push_user(3), Err(Refused::Full(3))));
        assert_eq!(mailbox.depth(), 2);
    }

    #[test]
    fn concurrent_senders_lose_nothing_across_a_close() {
        for _ in 0..20 {
            let mailbox: Arc<Mailbox<u64, ()>> = Arc::new(Mailbox::new(MailboxConfig::Unbounded));
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
            let mut taken = 0usize;
            for _ in 0..500 {
                if mailbox.pop_user().is_some() {
                    taken += 1;
                }
            }
            let drained = mailbox.close_user().len();
            for sender in senders {
                sender.join().unwrap();
            }
            assert_eq!(taken + drained + refused.load(Ordering::Relaxed), 8_000);
        }
    }
}
