//! [`ActorSystem`]: the root of an actor tree, its guardians, event stream and dead letters.
//!
//! # Supervision tree
//! ```text
//! troupe://<system>
//! ├── /user     user guardian: parent of everything `system.spawn` creates
//! │   └── ...   application actors and their children
//! └── /system   system guardian: runtime actors (cluster, singleton managers, depth agents)
//! ```
//! A guardian absorbs escalations from its children (the child has already stopped) instead of
//! restarting its other children. [`ActorSystem::shutdown`] stops `/user` first, then `/system`;
//! each actor's children terminate before its `post_stop` runs.

use std::fmt;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::actor::{Actor, ActorError};
use crate::actor_ref::{ActorRef, AnyActorRef};
use crate::ask::deadlines::AskDeadlines;
use crate::cell::{AnyCell, Cell, SystemMsg};
use crate::context::Context;
use crate::dead_letter::{DeadLetter, DeadLetterReason, DeadLetters};
use crate::event_stream::EventStream;
use crate::extension::Extensions;
use crate::path::{self, ActorPath, InvalidName, validate_name};
use crate::props::Props;
use crate::task;

/// A running actor system: spawn actors, resolve paths, publish and subscribe events, shut down.
/// Cheap to clone; all clones are the same system.
#[derive(Clone)]
pub struct ActorSystem {
    pub(crate) shared: Arc<SystemShared>,
}

pub(crate) struct SystemShared {
    pub(crate) name: Arc<str>,
    pub(crate) root: ActorPath,
    pub(crate) events: EventStream,
    pub(crate) dead_letters: DeadLetters,
    pub(crate) runtime: tokio::runtime::Handle,
    /// The deadlines of this system's pending asks.
    pub(crate) ask_deadlines: Arc<AskDeadlines>,
    guardians: Mutex<Option<Guardians>>,
    /// The layers built on this system (remoting), each installed once.
    pub(crate) extensions: Extensions,
    terminated: Notify,
    is_terminated: std::sync::atomic::AtomicBool,
}

#[derive(Clone)]
struct Guardians {
    user: Arc<Cell<Never>>,
    system: Arc<Cell<Never>>,
}

/// The message type of guardians: they take none.
#[derive(Debug)]
pub(crate) enum Never {}

struct Guardian;

impl Actor for Guardian {
    type Msg = Never;

    async fn handle(&mut self, msg: Never, _ctx: &mut Context<Self>) -> Result<(), ActorError> {
        match msg {}
    }
}

impl fmt::Debug for ActorSystem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ActorSystem")
            .field("name", &self.shared.name)
            .finish()
    }
}

/// Why an actor system could not be created.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SystemError {
    /// The system name is not usable in paths.
    #[error("actor system name {name:?} is invalid: use 1 to 64 ASCII letters, digits, '-' or '_'")]
    InvalidName {
        /// The rejected name.
        name: String,
    },
    /// There is no tokio runtime to run actors on.
    #[error(
        "an actor system must be created inside a tokio runtime (none is running on this thread)"
    )]
    NoRuntime,
}

/// Why an actor could not be spawned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpawnError {
    /// The requested name is not valid.
    #[error(transparent)]
    InvalidName(#[from] InvalidName),
    /// A live sibling already has the name.
    #[error(
        "{parent} already has a live child named {name:?}; choose another name or wait for it to terminate"
    )]
    NameTaken {
        /// The parent's path.
        parent: ActorPath,
        /// The name in use.
        name: String,
    },
    /// The parent is stopping or has stopped.
    #[error("cannot spawn {name:?} under {parent}: it is stopping or has stopped")]
    ParentStopped {
        /// The parent's path.
        parent: ActorPath,
        /// The requested name.
        name: String,
    },
}

/// Why a path did not resolve to an actor ref.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    /// The string is not an actor path.
    #[error(
        "{path:?} is not an actor path: expected /user/<name>/... or troupe://<system>/user/<name>/..."
    )]
    Malformed {
        /// The rejected string.
        path: String,
    },
    /// The path names another actor system.
    #[error("{path:?} belongs to actor system {system:?}, not to {this:?}")]
    OtherSystem {
        /// The path.
        path: String,
        /// Its system.
        system: String,
        /// This system's name.
        this: String,
    },
    /// No live actor at the path.
    #[error("no live actor at {path}")]
    NotFound {
        /// The path.
        path: String,
    },
    /// An actor lives there but takes another message type.
    #[error("actor at {path} takes {actual}, not {expected}")]
    WrongMessageType {
        /// The path.
        path: String,
        /// The requested message type.
        expected: &'static str,
        /// The actor's message type.
        actual: &'static str,
    },
}

fn valid_system_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

impl ActorSystem {
    /// Create a system named `name` on the current tokio runtime.
    pub fn new(name: &str) -> Result<Self, SystemError> {
        if !valid_system_name(name) {
            return Err(SystemError::InvalidName {
                name: name.to_owned(),
            });
        }
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| SystemError::NoRuntime)?;
        let name: Arc<str> = Arc::from(name);
        let events = EventStream::new();
        let shared = Arc::new(SystemShared {
            root: ActorPath::root(Arc::clone(&name)),
            name,
            dead_letters: DeadLetters::new(events.clone()),
            events,
            ask_deadlines: AskDeadlines::new(runtime.clone()),
            runtime,
            guardians: Mutex::new(None),
            extensions: Extensions::default(),
            terminated: Notify::new(),
            is_terminated: std::sync::atomic::AtomicBool::new(false),
        });
        let spawn_guardian = |name: &str| {
            let cell = Arc::new(Cell::<Never>::new(
                shared.root.child(name),
                crate::MailboxOptions::Unbounded,
                Arc::clone(&shared),
            ));
            let mut props = Props::new(|| Guardian);
            props.supervisor = crate::SupervisorStrategy::stop();
            shared
                .runtime
                .spawn(task::run(Arc::clone(&cell), props, None, true));
            cell
        };
        let user = spawn_guardian("user");
        let system = spawn_guardian("system");
        *shared.guardians.lock() = Some(Guardians { user, system });
        Ok(Self { shared })
    }

    /// The system's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The system's event stream.
    #[must_use]
    pub fn event_stream(&self) -> &EventStream {
        &self.shared.events
    }

    /// `system.dead_letters`: where undeliverable messages are counted and published.
    #[must_use]
    pub fn dead_letters(&self) -> &DeadLetters {
        &self.shared.dead_letters
    }

    /// The tokio runtime the actors run on.
    #[must_use]
    pub fn runtime(&self) -> &tokio::runtime::Handle {
        &self.shared.runtime
    }

    fn guardian(&self, user: bool) -> Option<Arc<dyn AnyCell>> {
        self.shared.guardians.lock().as_ref().map(|g| {
            if user {
                Arc::clone(&g.user) as Arc<dyn AnyCell>
            } else {
                Arc::clone(&g.system) as Arc<dyn AnyCell>
            }
        })
    }

    /// Spawn a top-level actor at `/user/<name>`.
    pub fn spawn<A: Actor>(
        &self,
        name: &str,
        props: Props<A>,
    ) -> Result<ActorRef<A::Msg>, SpawnError> {
        self.spawn_under(true, name, props)
    }

    /// Spawn a runtime actor at `/system/<name>`.
    pub fn spawn_system<A: Actor>(
        &self,
        name: &str,
        props: Props<A>,
    ) -> Result<ActorRef<A::Msg>, SpawnError> {
        self.spawn_under(false, name, props)
    }

    fn spawn_under<A: Actor>(
        &self,
        user: bool,
        name: &str,
        props: Props<A>,
    ) -> Result<ActorRef<A::Msg>, SpawnError> {
        let Some(parent) = self.guardian(user) else {
            validate_name(name)?;
            return Err(SpawnError::ParentStopped {
                parent: self.shared.root.child(if user { "user" } else { "system" }),
                name: name.to_owned(),
            });
        };
        spawn_child(&parent, &self.shared, name, props)
    }

    /// Find the live actor at `path` (`/user/a/b` or `troupe://<system>/user/a/b`).
    pub fn resolve_any(&self, path: &str) -> Result<AnyActorRef, ResolveError> {
        let Some((system, elements)) = path::parse(path) else {
            return Err(ResolveError::Malformed {
                path: path.to_owned(),
            });
        };
        if let Some(system) = system
            && system != &*self.shared.name
        {
            return Err(ResolveError::OtherSystem {
                path: path.to_owned(),
                system: system.to_owned(),
                this: self.shared.name.to_string(),
            });
        }
        let not_found = || ResolveError::NotFound {
            path: path.to_owned(),
        };
        let (first, rest) = elements.split_first().ok_or_else(not_found)?;
        let mut current = match *first {
            "user" => self.guardian(true),
            "system" => self.guardian(false),
            _ => None,
        }
        .ok_or_else(not_found)?;
        for element in rest {
            let next = current
                .children()
                .and_then(|children| children.lock().get(element).cloned());
            current = next.ok_or_else(not_found)?;
        }
        if current.termination().is_done() {
            return Err(not_found());
        }
        Ok(AnyActorRef { cell: current })
    }

    /// Find the live actor at `path` and check that it takes messages of type `M`.
    pub fn resolve<M: Send + 'static>(&self, path: &str) -> Result<ActorRef<M>, ResolveError> {
        let any = self.resolve_any(path)?;
        any.downcast::<M>()
            .ok_or_else(|| ResolveError::WrongMessageType {
                path: any.path().to_string(),
                expected: std::any::type_name::<M>(),
                actual: any.message_type(),
            })
    }

    /// Send to the actor at `path`; if none lives there (or it takes another type) the message
    /// becomes a dead letter with reason `UnknownRecipient`.
    pub fn tell_path<M: Send + 'static>(&self, path: &str, message: M) {
        match self.resolve::<M>(path) {
            Ok(actor) => actor.tell(message),
            Err(error) => {
                let recipient = match path::parse(path) {
                    Some((_, elements)) => elements
                        .iter()
                        .fold(self.shared.root.clone(), |p, e| p.child(e)),
                    None => self.shared.root.child("invalid-path"),
                };
                tracing::debug!(%error, "tell to unresolvable path");
                self.shared.dead_letters.publish(DeadLetter {
                    recipient,
                    sender: crate::task::current_actor_path(),
                    message_type: std::any::type_name::<M>(),
                    reason: DeadLetterReason::UnknownRecipient,
                });
            }
        }
    }

    /// Stop every actor — `/user` first, then `/system`, children before parents — and return
    /// when all have terminated. Calling it again waits for the same shutdown.
    pub async fn shutdown(&self) {
        let guardians = self.shared.guardians.lock().clone();
        if let Some(guardians) = guardians {
            let _ = guardians.user.send_system(SystemMsg::Stop);
            guardians.user.termination.wait().await;
            let _ = guardians.system.send_system(SystemMsg::Stop);
            guardians.system.termination.wait().await;
            // Break the system ↔ guardian reference cycle.
            self.shared.guardians.lock().take();
            self.shared
                .is_terminated
                .store(true, std::sync::atomic::Ordering::Release);
            self.shared.terminated.notify_waiters();
        } else {
            self.when_terminated().await;
        }
    }

    /// Wait until a shutdown has completed.
    pub async fn when_terminated(&self) {
        loop {
            let notified = self.shared.terminated.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self
                .shared
                .is_terminated
                .load(std::sync::atomic::Ordering::Acquire)
            {
                return;
            }
            notified.await;
        }
    }
}

/// Create the child cell, reserve its name under `parent`, and start its task.
pub(crate) fn spawn_child<A: Actor>(
    parent: &Arc<dyn AnyCell>,
    system: &Arc<SystemShared>,
    name: &str,
    props: Props<A>,
) -> Result<ActorRef<A::Msg>, SpawnError> {
    validate_name(name)?;
    let Some(children) = parent.children() else {
        // Only an actor this system hosts can have children.
        return Err(SpawnError::ParentStopped {
            parent: parent.path().clone(),
            name: name.to_owned(),
        });
    };
    let cell = Arc::new(Cell::<A::Msg>::new(
        parent.path().child(name),
        props.mailbox,
        Arc::clone(system),
    ));
    {
        let mut children = children.lock();
        if children.closed {
            return Err(SpawnError::ParentStopped {
                parent: parent.path().clone(),
                name: name.to_owned(),
            });
        }
        if children.contains(name) {
            return Err(SpawnError::NameTaken {
                parent: parent.path().clone(),
                name: name.to_owned(),
            });
        }
        children.insert(name, Arc::clone(&cell) as Arc<dyn AnyCell>);
    }
    system.runtime.spawn(task::run(
        Arc::clone(&cell),
        props,
        Some(Arc::clone(parent)),
        false,
    ));
    Ok(ActorRef::local(cell))
}
