//! The shared state of one actor incarnation: identity, mailbox, children and termination flag.
//!
//! A cell is what an [`crate::ActorRef`] points at. It outlives the actor's task for as long as
//! refs exist, so a send to a stopped actor finds a closed mailbox and becomes a dead letter.

use rustc_hash::FxHashMap;
use std::any::Any;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::dead_letter::{DeadLetter, DeadLetterReason};
use crate::death_watch::Terminated;
use crate::mailbox::{DepthSource, Mailbox, MailboxConfig, Refused};
use crate::path::ActorPath;
use crate::remoting::RemoteTarget;
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
    Watch(Arc<dyn AnyCell>),
    /// Forget a watcher.
    Unwatch(ActorId),
    /// An actor this one watches has terminated.
    Terminated(Terminated),
    /// A child has terminated and left the children map.
    ChildTerminated,
    /// A child's failure escalated to this actor.
    ChildFailed { child: ActorPath, cause: String },
}

/// The type-erased view of a cell that parents, watchers and the registry use.
pub(crate) trait AnyCell: Send + Sync + 'static {
    fn id(&self) -> ActorId;
    fn path(&self) -> &ActorPath;
    fn message_type(&self) -> &'static str;
    fn send_system(&self, message: SystemMsg) -> Result<(), SystemMsg>;
    fn children(&self) -> &Mutex<Children>;
    fn mailbox_depth(&self) -> usize;
    fn termination(&self) -> &Termination;
    fn poison_pill(&self);
    /// For a cell that stands for a remote actor: that actor has terminated (or its node left).
    fn remote_terminated(&self);
    fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync>;
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

/// The shared state behind an [`crate::ActorRef`]. A cell either hosts a local actor (its
/// mailbox is served by the actor's task) or stands for an actor on another node (`remote` is
/// set; messages are encoded and sent, the mailbox stays unused).
pub(crate) struct Cell<M> {
    pub(crate) id: ActorId,
    pub(crate) path: ActorPath,
    pub(crate) mailbox: Mailbox<Envelope<M>, SystemMsg>,
    pub(crate) system: Arc<SystemShared>,
    pub(crate) children: Mutex<Children>,
    pub(crate) termination: Termination,
    pub(crate) remote: Option<Box<Remote<M>>>,
}

/// The remote half of a cell that stands for an actor on another node.
pub(crate) struct Remote<M> {
    target: RemoteTarget<M>,
    watchers: Mutex<Vec<Arc<dyn AnyCell>>>,
    me: std::sync::Weak<dyn AnyCell>,
}

impl<M: Send + 'static> Cell<M> {
    pub(crate) fn new(path: ActorPath, config: MailboxConfig, system: Arc<SystemShared>) -> Self {
        Self {
            id: ActorId::next(),
            path,
            mailbox: Mailbox::new(config),
            system,
            children: Mutex::new(Children::default()),
            termination: Termination::default(),
            remote: None,
        }
    }

    /// A cell standing for the actor at `path` on another node (or on this node, reached through
    /// the loopback).
    pub(crate) fn new_remote(
        path: ActorPath,
        system: Arc<SystemShared>,
        target: RemoteTarget<M>,
    ) -> Arc<Self> {
        Arc::new_cyclic(|me: &std::sync::Weak<Self>| {
            let me: std::sync::Weak<dyn AnyCell> = me.clone();
            Self {
                id: ActorId::next(),
                path,
                mailbox: Mailbox::new(MailboxConfig::Unbounded),
                system,
                children: Mutex::new(Children::default()),
                termination: Termination::default(),
                remote: Some(Box::new(Remote {
                    target,
                    watchers: Mutex::new(Vec::new()),
                    me,
                })),
            }
        })
    }

    /// Hand an envelope to the actor: its mailbox, or the network for a remote actor.
    pub(crate) fn deliver(&self, envelope: Envelope<M>) -> Result<(), Refused<Envelope<M>>> {
        let Some(remote) = &self.remote else {
            return self.mailbox.push_user(envelope);
        };
        match envelope {
            Envelope::Message { message, sender } => remote
                .target
                .send(&self.path, message, sender.as_ref())
                .map_err(|message| Refused::Closed(Envelope::Message { message, sender })),
            Envelope::PoisonPill => {
                remote.target.remoting.stop_remote(
                    &remote.target.address,
                    self.path.elements(),
                    true,
                );
                Ok(())
            }
        }
    }

    /// Enqueue a message; undeliverable ones are published as dead letters.
    pub(crate) fn tell(&self, message: M, sender: Option<ActorPath>) {
        if let Err(refused) = self.deliver(Envelope::Message { message, sender }) {
            self.dead_letter_refused(refused);
        }
    }

    pub(crate) fn dead_letter_refused(&self, refused: Refused<Envelope<M>>) {
        let (envelope, reason) = match (refused, &self.remote) {
            (Refused::Closed(envelope), Some(remote)) => (
                envelope,
                DeadLetterReason::Other(format!(
                    "could not be sent to node {}",
                    remote.target.address
                )),
            ),
            (Refused::Closed(envelope), None) => (envelope, DeadLetterReason::RecipientStopped),
            (Refused::Full(envelope), _) => (envelope, DeadLetterReason::MailboxFull),
        };
        self.dead_letter_envelope(envelope, reason);
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
        let Some(remote) = &self.remote else {
            return self.mailbox.push_system(message);
        };
        let target = &remote.target;
        match message {
            SystemMsg::Stop => {
                target
                    .remoting
                    .stop_remote(&target.address, self.path.elements(), false);
                Ok(())
            }
            SystemMsg::Watch(watcher) => {
                if self.termination.is_done() {
                    return Err(SystemMsg::Watch(watcher));
                }
                let first = {
                    let mut watchers = remote.watchers.lock();
                    watchers.push(watcher);
                    watchers.len() == 1
                };
                if first {
                    target.remoting.watch_remote(
                        &target.address,
                        self.path.elements(),
                        remote.me.clone(),
                    );
                }
                Ok(())
            }
            SystemMsg::Unwatch(id) => {
                remote.watchers.lock().retain(|w| w.id() != id);
                Ok(())
            }
            // Nothing else is meaningful for an actor on another node.
            _ => Ok(()),
        }
    }

    fn children(&self) -> &Mutex<Children> {
        &self.children
    }

    fn mailbox_depth(&self) -> usize {
        self.mailbox.depth()
    }

    fn remote_terminated(&self) {
        let Some(remote) = &self.remote else { return };
        self.termination.mark_done();
        let terminated = Terminated {
            path: self.path.clone(),
            id: self.id,
        };
        for watcher in remote.watchers.lock().drain(..) {
            let _ = watcher.send_system(SystemMsg::Terminated(terminated.clone()));
        }
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
