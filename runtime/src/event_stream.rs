//! The system event stream: publish any cloneable event, subscribe by event type.
//!
//! # Delivery
//! `publish` hands the event to every current subscriber of its type, in subscription order,
//! without awaiting: a channel subscriber gets it on an unbounded channel, an actor subscriber
//! in its mailbox. Each subscriber sees the events of one publisher in publish order.
//!
//! # Subscribers that go away
//! A subscriber whose receiving end is gone (a dropped [`Subscription`], a terminated actor) is
//! removed on the next publish that reaches it. Dropping a [`Subscription`] unsubscribes at once.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::RwLock;
use tokio::sync::mpsc;

use crate::actor_ref::{ActorRef, SendError};

/// Identifies one subscription, for [`EventStream::unsubscribe`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SubscriptionId(u64);

/// Returns false when the subscriber is gone and should be removed.
type Deliver = Arc<dyn Fn(&(dyn Any + Send + Sync)) -> bool + Send + Sync>;

/// The publish/subscribe bus of one actor system.
#[derive(Clone)]
pub struct EventStream {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    subscribers: RwLock<HashMap<TypeId, Vec<(SubscriptionId, Deliver)>>>,
    next_id: AtomicU64,
}

impl fmt::Debug for EventStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let subscribers: usize = self.inner.subscribers.read().values().map(Vec::len).sum();
        f.debug_struct("EventStream")
            .field("subscribers", &subscribers)
            .finish()
    }
}

impl Default for EventStream {
    fn default() -> Self {
        Self::new()
    }
}

impl EventStream {
    /// A stream with no subscribers.
    #[must_use]
    pub fn new() -> Self {
        Self {
            inner: Arc::new(Inner::default()),
        }
    }

    /// Deliver `event` to every subscriber of type `E`.
    pub fn publish<E: Clone + Send + Sync + 'static>(&self, event: E) {
        let targets: Vec<(SubscriptionId, Deliver)> =
            match self.inner.subscribers.read().get(&TypeId::of::<E>()) {
                Some(list) if !list.is_empty() => list.clone(),
                _ => return,
            };
        let mut gone = Vec::new();
        for (id, deliver) in &targets {
            if !deliver(&event) {
                gone.push(*id);
            }
        }
        if !gone.is_empty() {
            let mut subscribers = self.inner.subscribers.write();
            if let Some(list) = subscribers.get_mut(&TypeId::of::<E>()) {
                list.retain(|(id, _)| !gone.contains(id));
            }
        }
    }

    /// Whether anyone subscribes to events of type `E` (lets publishers skip building events).
    #[must_use]
    pub fn has_subscribers<E: 'static>(&self) -> bool {
        self.inner
            .subscribers
            .read()
            .get(&TypeId::of::<E>())
            .is_some_and(|list| !list.is_empty())
    }

    /// Subscribe to events of type `E` through a channel; dropping the subscription ends it.
    #[must_use]
    pub fn subscribe<E: Clone + Send + Sync + 'static>(&self) -> Subscription<E> {
        let (tx, rx) = mpsc::unbounded_channel::<E>();
        let deliver: Deliver = Arc::new(move |event| match event.downcast_ref::<E>() {
            Some(event) => tx.send(event.clone()).is_ok(),
            None => true,
        });
        let id = self.add(TypeId::of::<E>(), deliver);
        Subscription {
            id,
            rx,
            stream: Arc::downgrade(&self.inner),
        }
    }

    /// Subscribe an actor to events of type `E`; it receives them as `M::from(event)`.
    /// The subscription ends when the actor terminates or on [`EventStream::unsubscribe`].
    pub fn subscribe_actor<E, M>(&self, actor: &ActorRef<M>) -> SubscriptionId
    where
        E: Clone + Send + Sync + 'static,
        M: From<E> + Send + 'static,
    {
        let actor = actor.clone();
        let deliver: Deliver = Arc::new(move |event| {
            let Some(event) = event.downcast_ref::<E>() else {
                return true;
            };
            match actor.try_tell(M::from(event.clone())) {
                Ok(()) => true,
                Err(
                    SendError::Stopped(_) | SendError::NotSent(_) | SendError::Unserializable(_),
                ) => false,
                Err(SendError::MailboxFull(_)) => {
                    // Not a dead letter: a full subscriber of DeadLetter events would loop.
                    tracing::warn!(
                        subscriber = %actor.path(),
                        event = std::any::type_name::<E>(),
                        "event stream subscriber's mailbox is full; event not delivered"
                    );
                    true
                }
            }
        });
        self.add(TypeId::of::<E>(), deliver)
    }

    /// End a subscription made with [`EventStream::subscribe_actor`].
    pub fn unsubscribe(&self, id: SubscriptionId) {
        remove(&self.inner, id);
    }

    fn add(&self, type_id: TypeId, deliver: Deliver) -> SubscriptionId {
        let id = SubscriptionId(self.inner.next_id.fetch_add(1, Ordering::Relaxed));
        self.inner
            .subscribers
            .write()
            .entry(type_id)
            .or_default()
            .push((id, deliver));
        id
    }
}

fn remove(inner: &Inner, id: SubscriptionId) {
    for list in inner.subscribers.write().values_mut() {
        list.retain(|(existing, _)| *existing != id);
    }
}

/// A channel subscription to events of type `E`. Dropping it unsubscribes.
pub struct Subscription<E> {
    id: SubscriptionId,
    rx: mpsc::UnboundedReceiver<E>,
    stream: Weak<Inner>,
}

impl<E> fmt::Debug for Subscription<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Subscription")
            .field("id", &self.id)
            .finish()
    }
}

impl<E> Subscription<E> {
    /// The next event; `None` once the stream has been dropped.
    pub async fn recv(&mut self) -> Option<E> {
        self.rx.recv().await
    }

    /// The next event if one is already waiting.
    pub fn try_recv(&mut self) -> Option<E> {
        self.rx.try_recv().ok()
    }

    /// This subscription's id.
    #[must_use]
    pub fn id(&self) -> SubscriptionId {
        self.id
    }
}

impl<E> Drop for Subscription<E> {
    fn drop(&mut self) {
        if let Some(inner) = self.stream.upgrade() {
            remove(&inner, self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Debug, PartialEq)]
    struct Ping(u32);
    #[derive(Clone, Debug, PartialEq)]
    struct Pong;

    #[tokio::test]
    async fn subscribers_get_only_the_event_type_they_asked_for_in_order() {
        let stream = EventStream::new();
        let mut pings = stream.subscribe::<Ping>();
        let mut pongs = stream.subscribe::<Pong>();
        stream.publish(Ping(1));
        stream.publish(Pong);
        stream.publish(Ping(2));
        assert_eq!(pings.recv().await, Some(Ping(1)));
        assert_eq!(pings.recv().await, Some(Ping(2)));
        assert_eq!(pongs.recv().await, Some(Pong));
        assert_eq!(pings.try_recv(), None);
    }

    #[test]
    fn dropping_a_subscription_unsubscribes() {
        let stream = EventStream::new();
        let sub = stream.subscribe::<Ping>();
        assert!(stream.has_subscribers::<Ping>());
        drop(sub);
        assert!(!stream.has_subscribers::<Ping>());
    }
}
