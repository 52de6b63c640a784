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
use crate::cell::{ActorId, AnyCell, Cell, Envelope, SystemMsg};
use crate::dead_letter::DeadLetterReason;
use crate::mailbox::{MailboxDepth, Refused};
use crate::outbound::ForeignCell;
use crate::path::ActorPath;
use crate::system::SystemShared;
use crate::task::current_actor_path;

/// A typed handle to an actor that accepts messages of type `M`. Cheap to clone.
pub struct ActorRef<M> {
    target: Target<M>,
}

/// What a ref points at: an actor this system hosts, or one it reaches through the outbound
/// seam (see [`crate::outbound`]).
enum Target<M> {
    Local(Arc<Cell<M>>),
    Foreign(Arc<ForeignCell<M>>),
}

impl<M> Clone for ActorRef<M> {
    fn clone(&self) -> Self {
        let target = match &self.target {
            Target::Local(cell) => Target::Local(Arc::clone(cell)),
            Target::Foreign(cell) => Target::Foreign(Arc::clone(cell)),
        };
        Self { target }
    }
}

impl<M> fmt::Debug for ActorRef<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ActorRef({}#{})", self.path(), self.id().0)
    }
}

impl<M> PartialEq for ActorRef<M> {
    fn eq(&self, other: &Self) -> bool {
        match (&self.target, &other.target) {
            (Target::Local(a), Target::Local(b)) => Arc::ptr_eq(a, b),
            (Target::Foreign(a), Target::Foreign(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl<M> Eq for ActorRef<M> {}

impl<M> std::hash::Hash for ActorRef<M> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.id().hash(state);
    }
}

/// A message that was not delivered, given back with the reason (see [`ActorRef::try_tell`]).
#[derive(Debug, PartialEq, Eq)]
pub enum SendError<T> {
    /// The recipient had stopped (or was stopping).
    Stopped(T),
    /// The recipient's bounded mailbox was full.
    MailboxFull(T),
    /// The recipient is on another node and the transport did not take the message.
    NotSent(T),
    /// The recipient is on another node and the message does not serialize.
    Unserializable(T),
}

impl<T> SendError<T> {
    /// The message that was not delivered.
    pub fn into_inner(self) -> T {
        match self {
            Self::Stopped(message)
            | Self::MailboxFull(message)
            | Self::NotSent(message)
            | Self::Unserializable(message) => message,
        }
    }

    /// The reason a dead letter of this message would carry.
    #[must_use]
    pub fn reason(&self) -> DeadLetterReason {
        match self {
            Self::Stopped(_) => DeadLetterReason::RecipientStopped,
            Self::MailboxFull(_) => DeadLetterReason::MailboxFull,
            Self::NotSent(_) => DeadLetterReason::NotSent,
            Self::Unserializable(_) => DeadLetterReason::Unserializable,
        }
    }

    /// The error for a message the outbound seam gave back with `reason`.
    fn outbound(message: T, reason: &DeadLetterReason) -> Self {
        match reason {
            DeadLetterReason::Unserializable => Self::Unserializable(message),
            DeadLetterReason::RecipientStopped => Self::Stopped(message),
            DeadLetterReason::MailboxFull => Self::MailboxFull(message),
            _ => Self::NotSent(message),
        }
    }
}

impl<T> fmt::Display for SendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Stopped(_) => f.write_str("recipient has stopped"),
            Self::MailboxFull(_) => f.write_str("recipient mailbox is full"),
            Self::NotSent(_) => f.write_str("the transport did not take the message"),
            Self::Unserializable(_) => f.write_str("the message does not serialize"),
        }
    }
}

impl<T: fmt::Debug> std::error::Error for SendError<T> {}

impl<M> ActorRef<M> {
    /// The actor's path.
    #[must_use]
    pub fn path(&self) -> &ActorPath {
        match &self.target {
            Target::Local(cell) => &cell.path,
            Target::Foreign(cell) => cell.path(),
        }
    }

    /// The identity of this incarnation.
    #[must_use]
    pub fn id(&self) -> ActorId {
        match &self.target {
            Target::Local(cell) => cell.id,
            Target::Foreign(cell) => cell.id(),
        }
    }

    /// The system this ref belongs to.
    pub(crate) fn system_shared(&self) -> &Arc<SystemShared> {
        match &self.target {
            Target::Local(cell) => &cell.system,
            Target::Foreign(cell) => cell.system(),
        }
    }
}

impl<M: Send + 'static> ActorRef<M> {
    pub(crate) fn local(cell: Arc<Cell<M>>) -> Self {
        Self {
            target: Target::Local(cell),
        }
    }

    pub(crate) fn foreign(cell: Arc<ForeignCell<M>>) -> Self {
        Self {
            target: Target::Foreign(cell),
        }
    }

    /// Send a message without waiting. If it cannot be delivered it becomes a dead letter.
    ///
    /// Told from inside an actor (its handler or hooks), the message names that actor as its
    /// sender (the recipient's [`crate::Context::sender`], the dead letter's `sender`, and across
    /// the network); told from anywhere else, it names none.
    pub fn tell(&self, message: M) {
        self.tell_quietly(message, current_actor_path());
    }

    /// Send a message naming its sender (shown in dead letters), whoever tells it.
    pub fn tell_from(&self, message: M, sender: &ActorPath) {
        self.tell_quietly(message, Some(sender.clone()));
    }

    /// The hot path of `tell`, naming exactly `sender` (forwarders keep the original one): a
    /// local actor's mailbox, or the outbound seam; the reason of a dead letter is not needed.
    #[inline]
    pub(crate) fn tell_quietly(&self, message: M, sender: Option<ActorPath>) {
        match &self.target {
            Target::Local(cell) => cell.tell(message, sender),
            Target::Foreign(cell) => {
                let _ = cell.tell(message, sender);
            }
        }
    }

    /// Send; an undeliverable message becomes a dead letter, whose reason is returned.
    pub(crate) fn tell_with(
        &self,
        message: M,
        sender: Option<ActorPath>,
    ) -> Result<(), DeadLetterReason> {
        match &self.target {
            Target::Local(cell) => cell
                .deliver(Envelope::Message { message, sender })
                .map_err(|refused| cell.dead_letter_refused(refused)),
            Target::Foreign(cell) => cell.tell(message, sender),
        }
    }

    /// Send a message, or get it back if the actor has stopped or its bounded mailbox is full.
    /// A refused message is not published as a dead letter: the caller has it. Like
    /// [`ActorRef::tell`], it names the actor it is told from as its sender.
    pub fn try_tell(&self, message: M) -> Result<(), SendError<M>> {
        self.try_tell_with(message, current_actor_path())
    }

    /// Like [`ActorRef::try_tell`], naming the sender.
    pub(crate) fn try_tell_with(
        &self,
        message: M,
        sender: Option<ActorPath>,
    ) -> Result<(), SendError<M>> {
        match &self.target {
            Target::Local(cell) => {
                cell.deliver(Envelope::Message { message, sender })
                    .map_err(|refused| match refused {
                        Refused::Closed(Envelope::Message { message, .. }) => {
                            SendError::Stopped(message)
                        }
                        Refused::Full(Envelope::Message { message, .. }) => {
                            SendError::MailboxFull(message)
                        }
                        _ => unreachable!("try_tell only enqueues messages"),
                    })
            }
            Target::Foreign(cell) => cell
                .deliver(message, sender.as_ref())
                .map_err(|(message, reason)| SendError::outbound(message, &reason)),
        }
    }

    fn any_cell(&self) -> &dyn AnyCell {
        match &self.target {
            Target::Local(cell) => &**cell,
            Target::Foreign(cell) => &**cell,
        }
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
        let _ = self.any_cell().send_system(SystemMsg::Stop);
    }

    /// Enqueue a poison pill: the actor processes everything queued before it, then stops.
    pub fn poison_pill(&self) {
        self.any_cell().poison_pill();
    }

    /// A handle that reads the current mailbox depth with one atomic load (always 0 for an
    /// actor on another node: its depth is not known here).
    #[must_use]
    pub fn mailbox_depth(&self) -> MailboxDepth {
        MailboxDepth::new(match &self.target {
            Target::Local(cell) => Arc::clone(cell) as Arc<dyn crate::mailbox::DepthSource>,
            Target::Foreign(cell) => Arc::clone(cell) as Arc<dyn crate::mailbox::DepthSource>,
        })
    }

    /// Whether the actor has terminated.
    #[must_use]
    pub fn is_terminated(&self) -> bool {
        self.any_cell().termination().is_done()
    }

    /// Wait until the actor has terminated (returns at once if it already has).
    pub async fn terminated(&self) {
        self.any_cell().termination().wait().await;
    }

    /// This ref without its message type.
    #[must_use]
    pub fn as_any(&self) -> AnyActorRef {
        let cell = match &self.target {
            Target::Local(cell) => Arc::clone(cell) as Arc<dyn AnyCell>,
            Target::Foreign(cell) => Arc::clone(cell) as Arc<dyn AnyCell>,
        };
        AnyActorRef { cell }
    }

    /// The local cell, for a ref to an actor this system hosts.
    #[cfg(test)]
    pub(crate) fn local_cell(&self) -> Option<&Arc<Cell<M>>> {
        match &self.target {
            Target::Local(cell) => Some(cell),
            Target::Foreign(_) => None,
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
        match Arc::clone(&self.cell).into_any().downcast::<Cell<M>>() {
            Ok(cell) => Some(ActorRef::local(cell)),
            Err(any) => any.downcast::<ForeignCell<M>>().ok().map(ActorRef::foreign),
        }
    }
}
