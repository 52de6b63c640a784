//! Handles to actors: the typed [`ActorRef`] and the type-erased [`AnyActorRef`].
//!
//! # Ordering
//! Messages from one sender to one recipient are processed in the order they were sent. There
//! is no order between different senders.
//!
//! # Delivery
//! At most once. A message that cannot be enqueued becomes a [`crate::DeadLetter`]; `try_tell`
//! gives it back instead.

use std::fmt;
use std::sync::Arc;

use crate::ask::{AskRequest, ReplyTo};
use crate::cell::{ActorId, AnyCell, Cell, SystemMsg};
use crate::mailbox::{MailboxDepth, Refused};
use crate::path::ActorPath;

/// A typed handle to an actor that accepts messages of type `M`. Cheap to clone.
pub struct ActorRef<M> {
    pub(crate) cell: Arc<Cell<M>>,
}

impl<M> Clone for ActorRef<M> {
    fn clone(&self) -> Self {
        Self {
            cell: Arc::clone(&self.cell),
        }
    }
}

impl<M> fmt::Debug for ActorRef<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ActorRef({}#{})", self.cell.path, self.cell.id.0)
    }
}

impl<M> PartialEq for ActorRef<M> {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.cell, &other.cell)
    }
}

impl<M> Eq for ActorRef<M> {}

impl<M> std::hash::Hash for ActorRef<M> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.cell.id.hash(state);
    }
}

/// A message a mailbox did not take, given back with the reason.
#[derive(Debug)]
pub struct SendError<T>(pub(crate) Refused<T>);

impl<T> SendError<T> {
    /// The message that was not delivered.
    pub fn into_inner(self) -> T {
        match self.0 {
            Refused::Closed(message) | Refused::Full(message) => message,
        }
    }

    /// Whether the recipient had stopped (as opposed to its bounded mailbox being full).
    #[must_use]
    pub fn is_stopped(&self) -> bool {
        matches!(self.0, Refused::Closed(_))
    }
}

impl<T> fmt::Display for SendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Refused::Closed(_) => f.write_str("recipient has stopped"),
            Refused::Full(_) => f.write_str("recipient mailbox is full"),
        }
    }
}

impl<T: fmt::Debug> std::error::Error for SendError<T> {}

impl<M: Send + 'static> ActorRef<M> {
    /// Send a message without waiting. If it cannot be delivered it becomes a dead letter.
    pub fn tell(&self, message: M) {
        self.cell.tell(message, None);
    }

    /// Send a message naming its sender (shown in dead letters).
    pub fn tell_from(&self, message: M, sender: &ActorPath) {
        self.cell.tell(message, Some(sender.clone()));
    }

    /// Send a message, or get it back if the actor has stopped or its bounded mailbox is full.
    /// A refused message is not published as a dead letter: the caller has it.
    pub fn try_tell(&self, message: M) -> Result<(), SendError<M>> {
        self.cell
            .deliver(crate::cell::Envelope::Message {
                message,
                sender: None,
            })
            .map_err(|refused| {
                SendError(match refused {
                    Refused::Closed(crate::cell::Envelope::Message { message, .. }) => {
                        Refused::Closed(message)
                    }
                    Refused::Full(crate::cell::Envelope::Message { message, .. }) => {
                        Refused::Full(message)
                    }
                    _ => unreachable!("try_tell only enqueues messages"),
                })
            })
    }

    /// Ask: build a message around a fresh [`ReplyTo`] and await the reply (default timeout 5 s).
    ///
    /// ```no_run
    /// # use troupe::{ActorRef, ReplyTo};
    /// # use std::time::Duration;
    /// # enum Msg { Get { reply: ReplyTo<u64> } }
    /// # async fn example(counter: ActorRef<Msg>) -> Result<(), troupe::AskError> {
    /// let count = counter
    ///     .ask(|reply| Msg::Get { reply })
    ///     .timeout(Duration::from_millis(200))
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn ask<R, F>(&self, make: F) -> AskRequest<'_, M, R, F>
    where
        R: Send + 'static,
        F: FnOnce(ReplyTo<R>) -> M,
    {
        AskRequest::new(self, make)
    }

    /// Ask the actor to stop after its current message; queued messages become dead letters.
    pub fn stop(&self) {
        let _ = AnyCell::send_system(&*self.cell, SystemMsg::Stop);
    }

    /// Enqueue a poison pill: the actor processes everything queued before it, then stops.
    pub fn poison_pill(&self) {
        self.cell.poison_pill();
    }

    /// The actor's path.
    #[must_use]
    pub fn path(&self) -> &ActorPath {
        &self.cell.path
    }

    /// The identity of this incarnation.
    #[must_use]
    pub fn id(&self) -> ActorId {
        self.cell.id
    }

    /// A handle that reads the current mailbox depth with one atomic load.
    #[must_use]
    pub fn mailbox_depth(&self) -> MailboxDepth {
        MailboxDepth::new(Arc::clone(&self.cell) as Arc<dyn crate::mailbox::DepthSource>)
    }

    /// Whether the actor has terminated.
    #[must_use]
    pub fn is_terminated(&self) -> bool {
        self.cell.termination.is_done()
    }

    /// Wait until the actor has terminated (returns at once if it already has).
    pub async fn terminated(&self) {
        self.cell.termination.wait().await;
    }

    /// This ref without its message type.
    #[must_use]
    pub fn as_any(&self) -> AnyActorRef {
        AnyActorRef {
            cell: Arc::clone(&self.cell) as Arc<dyn AnyCell>,
        }
    }
}

/// A handle to an actor of unknown message type: enough to stop it, watch it and read its
/// mailbox depth.
#[derive(Clone)]
pub struct AnyActorRef {
    pub(crate) cell: Arc<dyn AnyCell>,
}

impl fmt::Debug for AnyActorRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AnyActorRef({}#{})", self.cell.path(), self.cell.id().0)
    }
}

impl PartialEq for AnyActorRef {
    fn eq(&self, other: &Self) -> bool {
        self.cell.id() == other.cell.id()
    }
}

impl Eq for AnyActorRef {}

impl AnyActorRef {
    /// The actor's path.
    #[must_use]
    pub fn path(&self) -> &ActorPath {
        self.cell.path()
    }

    /// The identity of this incarnation.
    #[must_use]
    pub fn id(&self) -> ActorId {
        self.cell.id()
    }

    /// The Rust type name of the messages the actor accepts.
    #[must_use]
    pub fn message_type(&self) -> &'static str {
        self.cell.message_type()
    }

    /// The current mailbox depth.
    #[must_use]
    pub fn mailbox_depth(&self) -> usize {
        self.cell.mailbox_depth()
    }

    /// Ask the actor to stop after its current message.
    pub fn stop(&self) {
        let _ = self.cell.send_system(SystemMsg::Stop);
    }

    /// Enqueue a poison pill behind the queued messages.
    pub fn poison_pill(&self) {
        self.cell.poison_pill();
    }

    /// Whether the actor has terminated.
    #[must_use]
    pub fn is_terminated(&self) -> bool {
        self.cell.termination().is_done()
    }

    /// Wait until the actor has terminated.
    pub async fn terminated(&self) {
        self.cell.termination().wait().await;
    }

    /// The typed ref, if the actor accepts messages of type `M`.
    #[must_use]
    pub fn downcast<M: Send + 'static>(&self) -> Option<ActorRef<M>> {
        Arc::clone(&self.cell)
            .into_any()
            .downcast::<Cell<M>>()
            .ok()
            .map(|cell| ActorRef { cell })
    }
}

impl<M: crate::remoting::RemoteMessage> serde::Serialize for ActorRef<M> {
    /// A ref travels as its full path, naming this node for a local actor.
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::Error;
        let path = match self.cell.path.address() {
            Some(_) => self.cell.path.to_string(),
            None => {
                let remoting = crate::remoting::current_context().ok_or_else(|| {
                    S::Error::custom("an ActorRef can only be serialized by remoting")
                })?;
                self.cell
                    .path
                    .with_address(&remoting.local().address)
                    .to_string()
            }
        };
        serializer.serialize_str(&path)
    }
}

impl<'de, M: crate::remoting::RemoteMessage> serde::Deserialize<'de> for ActorRef<M> {
    /// A received ref always delivers through remoting — the loopback when it names this node.
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let path = String::deserialize(deserializer)?;
        let remoting = crate::remoting::current_context()
            .ok_or_else(|| D::Error::custom("an ActorRef can only be deserialized by remoting"))?;
        remoting.actor_ref::<M>(&path).map_err(D::Error::custom)
    }
}
