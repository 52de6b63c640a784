//! The shared state of one actor incarnation: identity, mailbox, children and termination flag.
//!
//! A cell is what a ref to a local actor points at. It outlives the actor's task for as long as
//! refs exist, so a send to a stopped actor finds a closed mailbox and becomes a dead letter. A
//! ref to an actor this system does not host points at a [`crate::outbound::ForeignCell`]
//! instead: no mailbox, no children.

use rustc_hash::FxHashMap;
use std::any::Any;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::dead_letter::{DeadLetter, DeadLetterReason};
use crate::death_watch::Terminated;
use crate::mailbox::{DepthSource, Mailbox, MailboxOptions, Refused};
use crate::path::ActorPath;
use crate::system::SystemShared;

/// A process-unique identity of one actor incarnation. A new actor at a reused path gets a new
/// id, so a `Terminated` for the old one is never mistaken for the new one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ActorId(pub(crate) u64);

impl ActorId {
    pub(crate) fn next() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Self(NEXT.fetch_add(1, Ordering::Relaxed))
    }

    /// The raw number.
    #[must_use]
    pub fn as_u64(self) -> u64 {
        self.0
    }
}

/// A user-lane mailbox entry: a message, or a poison pill queued behind earlier messages.
pub(crate) enum Envelope<M> {
    Message {
        message: M,
        sender: Option<ActorPath>,
    },
    PoisonPill,
}

/// Messages the runtime sends to an actor; served before user messages.
pub(crate) enum SystemMsg {
    /// Stop after the current message.
    Stop,
    /// Deliver `Terminated` to this watcher when the actor terminates.
    Watch(Arc<dyn Watcher>),
    /// Forget a watcher.
    Unwatch(ActorId),
    /// An actor this one watches has terminated.
    Terminated(Terminated),
    /// A child has terminated and left the children map.
    ChildTerminated,
    /// A child's failure escalated to this actor.
    ChildFailed { child: ActorPath, cause: String },
}

/// The type-erased view of what a ref points at (a local [`Cell`] or a
/// [`crate::outbound::ForeignCell`]) that parents, watchers and the registry use.
pub(crate) trait AnyCell: Send + Sync + 'static {
    fn id(&self) -> ActorId;
    fn path(&self) -> &ActorPath;
    fn message_type(&self) -> &'static str;
    fn send_system(&self, message: SystemMsg) -> Result<(), SystemMsg>;
    /// The children of a local actor; `None` for an actor this system does not host.
    fn children(&self) -> Option<&Mutex<Children>>;
    fn mailbox_depth(&self) -> usize;
    fn termination(&self) -> &Termination;
    fn poison_pill(&self);
    fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync>;
}

/// Who is told, once, that a watched actor has terminated: a local actor (through its system
/// lane), a ref standing for an actor elsewhere (which tells its own watchers), or whatever
/// the outbound seam uses to stand for a watcher on another node.
pub(crate) trait Watcher: Send + Sync + 'static {
    /// The identity `Unwatch` names.
    fn watcher_id(&self) -> ActorId;
    /// A watched actor has terminated.
    fn notify_terminated(&self, terminated: Terminated);
}

impl fmt::Debug for dyn AnyCell {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#{}", self.path(), self.id().0)
    }
}

/// The live children of an actor, by name. A name is taken from spawn until the child has
/// fully terminated. The map is allocated with the first child: most actors have none.
#[derive(Default)]
pub(crate) struct Children {
    by_name: Option<Box<FxHashMap<String, Arc<dyn AnyCell>>>>,
    /// Set once the actor begins to stop: no new children after that.
    pub(crate) closed: bool,
    /// The actor is waiting for its children to terminate: a terminating child tells it.
    /// Otherwise a child leaves quietly (no wake-up of a parent that does not care).
    pub(crate) awaited: bool,
}

impl Children {
    pub(crate) fn get(&self, name: &str) -> Option<&Arc<dyn AnyCell>> {
        self.by_name.as_ref()?.get(name)
    }

    pub(crate) fn contains(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    pub(crate) fn insert(&mut self, name: &str, child: Arc<dyn AnyCell>) {
        self.by_name
            .get_or_insert_with(Box::default)
            .insert(name.to_owned(), child);
    }

    /// Remove the child named `name` if it is the incarnation `id`.
    pub(crate) fn remove(&mut self, name: &str, id: ActorId) {
        if let Some(map) = &mut self.by_name
            && map.get(name).is_some_and(|child| child.id() == id)
        {
            map.remove(name);
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.by_name.as_ref().is_none_or(|map| map.is_empty())
    }

    pub(crate) fn all(&self) -> Vec<Arc<dyn AnyCell>> {
        self.by_name
            .as_ref()
            .map(|map| map.values().cloned().collect())
            .unwrap_or_default()
    }
}

/// Whether an actor has terminated, and a way to wait for it.
#[derive(Default)]
pub(crate) struct Termination {
    done: AtomicBool,
    notify: Notify,
}

impl Termination {
    pub(crate) fn is_done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    pub(crate) fn mark_done(&self) {
        self.done.store(true, Ordering::Release);
        self.notify.notify_waiters();
    }

    pub(crate) async fn wait(&self) {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.is_done() {
                return;
            }
            notified.await;
        }
    }
}

/// The shared state behind a ref to a local actor; its mailbox is served by the actor's task.
pub(crate) struct Cell<M> {
    pub(crate) id: ActorId,
    pub(crate) path: ActorPath,
    pub(crate) mailbox: Mailbox<Envelope<M>, SystemMsg>,
    pub(crate) system: Arc<SystemShared>,
    pub(crate) children: Mutex<Children>,
    pub(crate) termination: Termination,
}

impl<M: Send + 'static> Cell<M> {
    pub(crate) fn new(path: ActorPath, config: MailboxOptions, system: Arc<SystemShared>) -> Self {
        Self {
            id: ActorId::next(),
            path,
            mailbox: Mailbox::new(config),
            system,
            children: Mutex::new(Children::default()),
            termination: Termination::default(),
        }
    }

    /// Hand an envelope to the actor's mailbox.
    pub(crate) fn deliver(&self, envelope: Envelope<M>) -> Result<(), Refused<Envelope<M>>> {
        self.mailbox.push_user(envelope)
    }

    /// Enqueue a message; an undeliverable one is published as a dead letter.
    #[inline]
    pub(crate) fn tell(&self, message: M, sender: Option<ActorPath>) {
        if let Err(refused) = self.deliver(Envelope::Message { message, sender }) {
            self.dead_letter_refused(refused);
        }
    }

    /// Publish a refused envelope as a dead letter; returns the reason.
    #[cold]
    pub(crate) fn dead_letter_refused(&self, refused: Refused<Envelope<M>>) -> DeadLetterReason {
        let (envelope, reason) = match refused {
            Refused::Closed(envelope) => (envelope, DeadLetterReason::RecipientStopped),
            Refused::Full(envelope) => (envelope, DeadLetterReason::MailboxFull),
        };
        self.dead_letter_envelope(envelope, reason.clone());
        reason
    }

    pub(crate) fn dead_letter_envelope(&self, envelope: Envelope<M>, reason: DeadLetterReason) {
        let (message_type, sender) = match envelope {
            Envelope::Message { sender, .. } => (std::any::type_name::<M>(), sender),
            Envelope::PoisonPill => ("troupe::PoisonPill", None),
        };
        self.system.dead_letters.publish(DeadLetter {
            recipient: self.path.clone(),
            sender,
            message_type,
            reason,
        });
    }
}

impl<M: Send + 'static> DepthSource for Cell<M> {
    fn depth(&self) -> usize {
        self.mailbox.depth()
    }
}

impl<M: Send + 'static> Watcher for Cell<M> {
    fn watcher_id(&self) -> ActorId {
        self.id
    }

    fn notify_terminated(&self, terminated: Terminated) {
        let _ = self.mailbox.push_system(SystemMsg::Terminated(terminated));
    }
}

impl<M: Send + 'static> AnyCell for Cell<M> {
    fn id(&self) -> ActorId {
        self.id
    }

    fn path(&self) -> &ActorPath {
        &self.path
    }

    fn message_type(&self) -> &'static str {
        std::any::type_name::<M>()
    }

    fn send_system(&self, message: SystemMsg) -> Result<(), SystemMsg> {
        self.mailbox.push_system(message)
    }

    fn children(&self) -> Option<&Mutex<Children>> {
        Some(&self.children)
    }

    fn mailbox_depth(&self) -> usize {
        self.mailbox.depth()
    }

    fn termination(&self) -> &Termination {
        &self.termination
    }

    fn poison_pill(&self) {
        if let Err(refused) = self.deliver(Envelope::PoisonPill) {
            self.dead_letter_refused(refused);
        }
    }

    fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync> {
        self
    }
}
