//! [`Context`]: what an actor can do from inside its hooks — spawn children, watch, stop itself,
//! schedule messages to itself.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::actor::Actor;
use crate::actor_ref::{ActorRef, AnyActorRef};
use crate::cell::{ActorId, AnyCell, Cell, SystemMsg, Watcher};
use crate::death_watch::Terminated;
use crate::path::ActorPath;
use crate::props::Props;
use crate::system::{ActorSystem, SpawnError, spawn_child};

/// The actor's view of itself and the runtime, passed to every hook.
pub struct Context<A: Actor> {
    pub(crate) cell: Arc<Cell<A::Msg>>,
    pub(crate) stop_requested: bool,
    /// What this actor watches, so a watcher that dies first can unwatch (its targets would
    /// otherwise keep it referenced until they die).
    pub(crate) watching: Vec<(ActorId, Arc<dyn AnyCell>)>,
    pub(crate) sender: Option<ActorPath>,
    timers: Vec<tokio::task::AbortHandle>,
}

impl<A: Actor> fmt::Debug for Context<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("path", &self.cell.path)
            .field("stop_requested", &self.stop_requested)
            .finish()
    }
}

/// Something that can be watched: a typed or an untyped actor ref.
pub trait Watchable {
    /// The untyped ref to watch.
    fn to_any_ref(&self) -> AnyActorRef;
}

impl<M: Send + 'static> Watchable for ActorRef<M> {
    fn to_any_ref(&self) -> AnyActorRef {
        self.as_any()
    }
}

impl Watchable for AnyActorRef {
    fn to_any_ref(&self) -> AnyActorRef {
        self.clone()
    }
}

/// Cancels a message scheduled with [`Context::schedule_once`].
#[derive(Debug)]
pub struct TimerHandle(tokio::task::AbortHandle);

impl TimerHandle {
    /// Cancel the timer; its message is not sent.
    pub fn cancel(&self) {
        self.0.abort();
    }
}

impl<A: Actor> Context<A> {
    pub(crate) fn new(cell: Arc<Cell<A::Msg>>) -> Self {
        Self {
            cell,
            stop_requested: false,
            watching: Vec::new(),
            sender: None,
            timers: Vec::new(),
        }
    }

    /// A ref to this actor.
    #[must_use]
    pub fn myself(&self) -> ActorRef<A::Msg> {
        ActorRef::local(Arc::clone(&self.cell))
    }

    /// This actor's path.
    #[must_use]
    pub fn path(&self) -> &ActorPath {
        &self.cell.path
    }

    /// The sender of the message being handled, if it named itself (see
    /// [`ActorRef::tell_from`]).
    #[must_use]
    pub fn sender(&self) -> Option<&ActorPath> {
        self.sender.as_ref()
    }

    /// The node the message being handled came through remoting from: the address the
    /// transport verified during its handshake, never a value from the payload. A message sent
    /// through a remote ref to this node's own address (the loopback) has this node's address;
    /// a plain local `tell` has `None`.
    #[must_use]
    pub fn origin(&self) -> Option<&crate::Address> {
        self.sender.as_ref().and_then(ActorPath::address)
    }

    /// The actor system this actor belongs to.
    #[must_use]
    pub fn system(&self) -> ActorSystem {
        ActorSystem {
            shared: Arc::clone(&self.cell.system),
        }
    }

    /// Spawn a child named `name`. The child stops when this actor stops, before this actor's
    /// `post_stop`.
    pub fn spawn<B: Actor>(
        &mut self,
        name: &str,
        props: Props<B>,
    ) -> Result<ActorRef<B::Msg>, SpawnError> {
        let parent: Arc<dyn AnyCell> = Arc::clone(&self.cell) as Arc<dyn AnyCell>;
        spawn_child(&parent, &self.cell.system, name, props)
    }

    /// The live child named `name`.
    #[must_use]
    pub fn child(&self, name: &str) -> Option<AnyActorRef> {
        self.cell.children.lock().get(name).map(|cell| AnyActorRef {
            cell: Arc::clone(cell),
        })
    }

    /// All live children.
    #[must_use]
    pub fn children(&self) -> Vec<AnyActorRef> {
        self.cell
            .children
            .lock()
            .all()
            .into_iter()
            .map(|cell| AnyActorRef { cell })
            .collect()
    }

    /// Stop this actor once the current hook returns. Queued messages become dead letters.
    pub fn stop_self(&mut self) {
        self.stop_requested = true;
    }

    /// Watch `target`: [`Actor::on_terminated`] runs exactly once when it terminates — at once
    /// if it already has. Watching twice is the same as watching once.
    pub fn watch(&mut self, target: &impl Watchable) {
        let target = target.to_any_ref();
        if self.watching.iter().any(|(id, _)| *id == target.id()) {
            return;
        }
        self.watching.push((target.id(), Arc::clone(&target.cell)));
        let me: Arc<dyn Watcher> = Arc::clone(&self.cell) as Arc<dyn Watcher>;
        if target.cell.send_system(SystemMsg::Watch(me)).is_err() {
            // Already terminated: deliver through our own mailbox like any other Terminated.
            let _ = self
                .cell
                .mailbox
                .push_system(SystemMsg::Terminated(Terminated {
                    path: target.path().clone(),
                    id: target.id(),
                }));
        }
    }

    /// Stop watching `target`; no `Terminated` is delivered for it afterwards.
    pub fn unwatch(&mut self, target: &impl Watchable) {
        let target = target.to_any_ref();
        if self.forget_watched(target.id()) {
            let _ = target.cell.send_system(SystemMsg::Unwatch(self.cell.id));
        }
    }

    /// Send `message` to this actor after `delay`. Pending timers are cancelled when the actor
    /// stops.
    pub fn schedule_once(&mut self, delay: Duration, message: A::Msg) -> TimerHandle {
        self.timers.retain(|timer| !timer.is_finished());
        let myself = self.myself();
        let task = self.cell.system.runtime.spawn(async move {
            tokio::time::sleep(delay).await;
            myself.tell(message);
        });
        let handle = task.abort_handle();
        self.timers.push(handle.clone());
        TimerHandle(handle)
    }

    /// Stop tracking `id`; whether it was watched.
    pub(crate) fn forget_watched(&mut self, id: ActorId) -> bool {
        match self.watching.iter().position(|(watched, _)| *watched == id) {
            Some(index) => {
                self.watching.swap_remove(index);
                true
            }
            None => false,
        }
    }

    /// Tell everything this actor watches to forget it (it is terminating).
    pub(crate) fn unwatch_all(&mut self) {
        for (_, target) in self.watching.drain(..) {
            let _ = target.send_system(SystemMsg::Unwatch(self.cell.id));
        }
    }

    pub(crate) fn cancel_timers(&mut self) {
        for timer in self.timers.drain(..) {
            timer.abort();
        }
    }
}
