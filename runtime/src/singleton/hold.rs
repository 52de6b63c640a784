//! The hold buffer of a manager without an instance: messages wait here, in arrival order, for
//! the instance to spawn — at most [`HOLD_CAPACITY`] of them for at most [`HOLD_MAX_AGE`].
//!
//! # Why hold at all
//! A manager gets messages before it has an instance in three transient situations: a hand-over
//! is open, a lease acquire has not resolved, or a peer already routes to this node while this
//! node's own view still lags a gossip round. None of these is a reason to lose the message, and
//! the last one means holding cannot depend on this node seeing itself as host.
//!
//! # What leaves the buffer
//! Every held message leaves exactly once: flushed into the instance, expired or refused for
//! capacity (the shell turns those into dead letters), or taken back by the proxy that sent it
//! when that proxy re-routes.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

use crate::Address;

/// How many messages a manager holds at most.
pub const HOLD_CAPACITY: usize = 1_000;

/// How long a manager holds a message at most.
pub const HOLD_MAX_AGE: Duration = Duration::from_secs(2);

/// Messages waiting for an instance, oldest first.
#[derive(Debug)]
pub(crate) struct HoldBuffer<T> {
    items: VecDeque<Held<T>>,
    capacity: usize,
    max_age: Duration,
}

#[derive(Debug)]
struct Held<T> {
    item: T,
    /// The node whose proxy sent it (`None`: this node's proxy).
    origin: Option<Address>,
    since: Instant,
}

impl<T> Default for HoldBuffer<T> {
    fn default() -> Self {
        Self::new(HOLD_CAPACITY, HOLD_MAX_AGE)
    }
}

impl<T> HoldBuffer<T> {
    pub(crate) fn new(capacity: usize, max_age: Duration) -> Self {
        Self {
            items: VecDeque::new(),
            capacity,
            max_age,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Hold `item`, or give it back when the buffer is full.
    pub(crate) fn push(&mut self, item: T, origin: Option<Address>, now: Instant) -> Result<(), T> {
        if self.items.len() >= self.capacity {
            return Err(item);
        }
        self.items.push_back(Held {
            item,
            origin,
            since: now,
        });
        Ok(())
    }

    /// Remove and return the items held for `max_age` or longer, oldest first.
    pub(crate) fn expire(&mut self, now: Instant) -> Vec<T> {
        let mut expired = Vec::new();
        while let Some(front) = self.items.front() {
            if now.saturating_duration_since(front.since) < self.max_age {
                break;
            }
            if let Some(held) = self.items.pop_front() {
                expired.push(held.item);
            }
        }
        expired
    }

    /// When the oldest item expires.
    pub(crate) fn next_expiry(&self) -> Option<Instant> {
        self.items.front().map(|held| held.since + self.max_age)
    }

    /// Remove and return everything, oldest first.
    pub(crate) fn drain_all(&mut self) -> Vec<T> {
        self.items.drain(..).map(|held| held.item).collect()
    }

    /// Remove and return what the proxy on `origin` sent, oldest first; the rest keeps its order.
    pub(crate) fn take_from(&mut self, origin: Option<&Address>) -> Vec<T> {
        let mut taken = Vec::new();
        let mut kept = VecDeque::with_capacity(self.items.len());
        for held in self.items.drain(..) {
            if held.origin.as_ref() == origin {
                taken.push(held.item);
            } else {
                kept.push_back(held);
            }
        }
        self.items = kept;
        taken
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::singleton::election::tests::address;

    #[test]
    fn a_full_buffer_gives_the_message_back() {
        let now = Instant::now();
        let mut hold = HoldBuffer::new(2, HOLD_MAX_AGE);
        assert!(hold.push(1, None, now).is_ok());
        assert!(hold.push(2, None, now).is_ok());
        assert_eq!(hold.push(3, None, now), Err(3));
        assert_eq!(hold.drain_all(), vec![1, 2]);
    }

    #[test]
    fn items_expire_after_max_age_oldest_first() {
        let start = Instant::now();
        let mut hold = HoldBuffer::new(10, Duration::from_secs(2));
        hold.push("a", None, start).unwrap();
        hold.push("b", None, start + Duration::from_secs(1))
            .unwrap();
        assert_eq!(hold.next_expiry(), Some(start + Duration::from_secs(2)));
        assert!(hold.expire(start + Duration::from_millis(1_999)).is_empty());
        assert_eq!(hold.expire(start + Duration::from_secs(2)), vec!["a"]);
        assert_eq!(hold.expire(start + Duration::from_secs(3)), vec!["b"]);
        assert!(hold.is_empty());
    }

    #[derive(Debug, Clone)]
    enum Op {
        Push(Option<u8>),
        Advance(u64),
        Expire,
        Take(Option<u8>),
        Drain,
    }

    fn arb_op() -> impl Strategy<Value = Op> {
        let origin = proptest::option::of(0u8..3);
        prop_oneof![
            4 => origin.clone().prop_map(Op::Push),
            2 => (0u64..1_500).prop_map(Op::Advance),
            1 => Just(Op::Expire),
            1 => origin.prop_map(Op::Take),
            1 => Just(Op::Drain),
        ]
    }

    proptest! {
        /// Every pushed message leaves exactly once — refused, expired, taken back or drained —
        /// never more than the capacity is held, and each origin's messages leave in the order
        /// they arrived.
        #[test]
        fn every_message_leaves_once_in_order_and_within_capacity(
            ops in proptest::collection::vec(arb_op(), 0..200)
        ) {
            let start = Instant::now();
            let mut now = start;
            let mut hold = HoldBuffer::new(8, Duration::from_secs(2));
            let mut next = 0u32;
            let mut out: Vec<(Option<u8>, u32)> = Vec::new();
            let mut refused: Vec<u32> = Vec::new();
            let origin_of = |o: Option<u8>| o.map(address);
            for op in ops {
                match op {
                    Op::Push(origin) => {
                        let id = next;
                        next += 1;
                        if let Err((_, id)) = hold.push((origin, id), origin_of(origin), now) {
                            refused.push(id);
                        }
                        prop_assert!(hold.len() <= 8);
                    }
                    Op::Advance(ms) => now += Duration::from_millis(ms),
                    Op::Expire => {
                        for item in hold.expire(now) {
                            out.push(item);
                        }
                        if let Some(at) = hold.next_expiry() {
                            prop_assert!(at > now);
                        }
                    }
                    Op::Take(origin) => {
                        for item in hold.take_from(origin_of(origin).as_ref()) {
                            prop_assert_eq!(item.0, origin);
                            out.push(item);
                        }
                    }
                    Op::Drain => out.extend(hold.drain_all()),
                }
            }
            out.extend(hold.drain_all());
            for origin in [None, Some(0), Some(1), Some(2)] {
                let ids: Vec<u32> =
                    out.iter().filter(|(o, _)| *o == origin).map(|(_, id)| *id).collect();
                prop_assert!(ids.windows(2).all(|w| w[0] < w[1]), "{:?}", ids);
            }
            let mut ids: Vec<u32> = out.iter().map(|(_, id)| *id).chain(refused).collect();
            ids.sort_unstable();
            prop_assert_eq!(ids, (0..next).collect::<Vec<_>>());
        }
    }
}
