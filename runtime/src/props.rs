//! [`Props`]: how to build an actor — its factory, mailbox and supervision.

use std::fmt;

use crate::actor::Actor;
use crate::mailbox::MailboxOptions;
use crate::supervision::SupervisorStrategy;

/// The recipe for an actor: a factory (called again on every restart), a mailbox kind and a
/// supervisor strategy.
///
/// ```
/// # use troupe::{Props, MailboxOptions, SupervisorStrategy, Actor, ActorError, Context};
/// # use std::time::Duration;
/// # #[derive(Default)] struct Worker;
/// # impl Actor for Worker { type Msg = (); async fn handle(&mut self, _: (), _: &mut Context<Self>) -> Result<(), ActorError> { Ok(()) } }
/// let props = Props::new(Worker::default)
///     .with_mailbox(MailboxOptions::bounded(1_000))
///     .with_supervisor(SupervisorStrategy::restart().with_restart_budget(3, Duration::from_secs(10)));
/// ```
#[must_use]
pub struct Props<A> {
    pub(crate) factory: Box<dyn FnMut() -> A + Send>,
    pub(crate) mailbox: MailboxOptions,
    pub(crate) supervisor: SupervisorStrategy,
}

impl<A> fmt::Debug for Props<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Props")
            .field("actor", &std::any::type_name::<A>())
            .field("mailbox", &self.mailbox)
            .field("supervisor", &self.supervisor)
            .finish()
    }
}

impl<A: Actor> Props<A> {
    /// Props that build each instance with `factory`; unbounded mailbox, default supervision.
    pub fn new(factory: impl FnMut() -> A + Send + 'static) -> Self {
        Self {
            factory: Box::new(factory),
            mailbox: MailboxOptions::Unbounded,
            supervisor: SupervisorStrategy::default(),
        }
    }

    /// Use this mailbox kind.
    pub fn with_mailbox(mut self, mailbox: MailboxOptions) -> Self {
        self.mailbox = mailbox;
        self
    }

    /// Use this supervisor strategy for failures of the actor.
    pub fn with_supervisor(mut self, supervisor: SupervisorStrategy) -> Self {
        self.supervisor = supervisor;
        self
    }
}
