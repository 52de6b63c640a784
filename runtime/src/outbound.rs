//! The seam between the actor core and whatever reaches actors this system does not host.
//!
//! The core defines it and the network implements it, as Akka's `ActorRefProvider` sits in
//! akka-actor and `RemoteActorRef` in akka-remote: a ref to an actor elsewhere points at a
//! [`ForeignCell`] whose messages go through an [`Outbound`], and a reply to an asker elsewhere
//! goes through an [`OutboundReply`]. The core knows neither the wire format nor the transport.
//!
//! # Cost
//! A ref to a local actor never touches this seam: [`crate::ActorRef`] tells a local actor with
//! one branch and no dynamic call. Only a ref to an actor elsewhere pays one dynamic call per
//! message, next to the encoding and the transport it pays anyway.
//!
//! # Death watch
//! A foreign cell is the one watcher of the actor it stands for: the outbound seam tells it
//! (as any [`Watcher`]) once that actor has terminated or its node has left, and it then tells
//! its own local watchers, once.

use std::any::Any;
use std::fmt;
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use crate::cell::{ActorId, AnyCell, Children, SystemMsg, Termination, Watcher};
use crate::dead_letter::{DeadLetter, DeadLetterReason};
use crate::death_watch::Terminated;
use crate::mailbox::DepthSource;
use crate::path::ActorPath;
use crate::system::SystemShared;

/// How a ref reaches an actor this system does not host.
pub(crate) trait Outbound<M>: Send + Sync + 'static {
    /// Send `message` (from `sender`, when it named itself) to `recipient`; give it back, with
    /// the dead-letter reason, if it cannot be queued.
    fn send(
        &self,
        recipient: &ActorPath,
        message: M,
        sender: Option<&ActorPath>,
    ) -> Result<(), (M, DeadLetterReason)>;

    /// Ask the actor to stop: at once, or after the messages queued before (a poison pill).
    fn stop(&self, recipient: &ActorPath, poison_pill: bool);

    /// Start watching the actor: `watcher` is told once it has terminated (or cannot be
    /// watched at all).
    fn watch(&self, recipient: &ActorPath, watcher: Weak<dyn Watcher>);
}

/// How a reply reaches an asker this system does not host.
pub(crate) trait OutboundReply<T>: fmt::Debug + Send + Sync + 'static {
    /// Send the reply.
    fn send(self: Box<Self>, value: T);

    /// The concrete type, for the layer that implements the seam.
    fn as_any(&self) -> &dyn Any;
}

/// The state behind a ref to an actor this system does not host: its identity, its local
/// watchers and the way to reach it. No mailbox and no children: they would never be used.
pub(crate) struct ForeignCell<M> {
    id: ActorId,
    path: ActorPath,
    system: Arc<SystemShared>,
    termination: Termination,
    watchers: Mutex<Vec<Arc<dyn Watcher>>>,
    me: Weak<ForeignCell<M>>,
    outbound: Box<dyn Outbound<M>>,
}

impl<M: Send + 'static> ForeignCell<M> {
    /// A cell for the actor at `path` (which names its node), reached through `outbound`.
    pub(crate) fn new(
        path: ActorPath,
        system: Arc<SystemShared>,
        outbound: Box<dyn Outbound<M>>,
    ) -> Arc<Self> {
        Arc::new_cyclic(|me| Self {
            id: ActorId::next(),
            path,
            system,
            termination: Termination::default(),
            watchers: Mutex::new(Vec::new()),
            me: me.clone(),
            outbound,
        })
    }

    /// Send without publishing a dead letter: a refused message comes back with the reason.
    pub(crate) fn deliver(
        &self,
        message: M,
        sender: Option<&ActorPath>,
    ) -> Result<(), (M, DeadLetterReason)> {
        self.outbound.send(&self.path, message, sender)
    }

    /// Send; a refused message becomes a dead letter, whose reason is returned.
    pub(crate) fn tell(
        &self,
        message: M,
        sender: Option<ActorPath>,
    ) -> Result<(), DeadLetterReason> {
        let Err((message, reason)) = self.deliver(message, sender.as_ref()) else {
            return Ok(());
        };
        drop(message);
        self.system.dead_letters.publish(DeadLetter {
            recipient: self.path.clone(),
            sender,
            message_type: std::any::type_name::<M>(),
            reason: reason.clone(),
        });
        Err(reason)
    }
}

impl<M> ForeignCell<M> {
    pub(crate) fn id(&self) -> ActorId {
        self.id
    }

    pub(crate) fn path(&self) -> &ActorPath {
        &self.path
    }

    pub(crate) fn system(&self) -> &Arc<SystemShared> {
        &self.system
    }
}

impl<M: Send + 'static> DepthSource for ForeignCell<M> {
    /// The depth of a mailbox on another node is not known here.
    fn depth(&self) -> usize {
        0
    }
}

impl<M: Send + 'static> Watcher for ForeignCell<M> {
    fn watcher_id(&self) -> ActorId {
        self.id
    }

    /// The actor this cell stands for has terminated: so has this ref, for its watchers.
    fn notify_terminated(&self, _terminated: Terminated) {
        self.termination.mark_done();
        let terminated = Terminated {
            path: self.path.clone(),
            id: self.id,
        };
        for watcher in self.watchers.lock().drain(..) {
            watcher.notify_terminated(terminated.clone());
        }
    }
}

impl<M: Send + 'static> AnyCell for ForeignCell<M> {
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
        match message {
            SystemMsg::Stop => {
                self.outbound.stop(&self.path, false);
                Ok(())
            }
            SystemMsg::Watch(watcher) => {
                if self.termination.is_done() {
                    return Err(SystemMsg::Watch(watcher));
                }
                let first = {
                    let mut watchers = self.watchers.lock();
                    watchers.push(watcher);
                    watchers.len() == 1
                };
                if first {
                    let me: Weak<dyn Watcher> = self.me.clone();
                    self.outbound.watch(&self.path, me);
                }
                Ok(())
            }
            SystemMsg::Unwatch(id) => {
                self.watchers.lock().retain(|w| w.watcher_id() != id);
                Ok(())
            }
            // Nothing else is meaningful for an actor this system does not host.
            _ => Ok(()),
        }
    }

    fn children(&self) -> Option<&Mutex<Children>> {
        None
    }

    fn mailbox_depth(&self) -> usize {
        0
    }

    fn termination(&self) -> &Termination {
        &self.termination
    }

    fn poison_pill(&self) {
        self.outbound.stop(&self.path, true);
    }

    fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync> {
        self
    }
}
