//! The [`Actor`] trait: typed state with a message handler and lifecycle hooks.
//!
//! # Lifecycle
//! `pre_start` runs inside the actor's task before the first message. `handle` runs once per
//! message, one at a time; awaiting inside it holds the mailbox (messages stay queued, in
//! order). `post_stop` runs once the actor has been told to stop and all its children have
//! terminated. An error returned from `pre_start`, `handle` or `on_terminated`, or a panic in any
//! of them, is a *failure* that the supervisor strategy in [`crate::Props`] resolves.

use std::fmt;
use std::future::Future;

use crate::context::Context;
use crate::death_watch::Terminated;

/// The error type of actor hooks: anything that is an error.
pub type ActorError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A typed actor. One value of `Msg` per message; replies travel in [`crate::ReplyTo`] fields of
/// the message.
///
/// ```
/// use troupe::{Actor, ActorError, Context, ReplyTo};
///
/// #[derive(Default)]
/// struct Counter { count: u64 }
///
/// enum CounterMsg {
///     /// Add one.
///     Increment,
///     /// Reply with the current count.
///     Get { reply: ReplyTo<u64> },
/// }
///
/// impl Actor for Counter {
///     type Msg = CounterMsg;
///
///     async fn handle(&mut self, msg: CounterMsg, _ctx: &mut Context<Self>) -> Result<(), ActorError> {
///         match msg {
///             CounterMsg::Increment => self.count += 1,
///             CounterMsg::Get { reply } => reply.send(self.count),
///         }
///         Ok(())
///     }
/// }
/// ```
pub trait Actor: Send + Sized + 'static {
    /// The messages this actor accepts.
    type Msg: Send + 'static;

    /// Runs before the first message is handled.
    fn pre_start(
        &mut self,
        ctx: &mut Context<Self>,
    ) -> impl Future<Output = Result<(), ActorError>> + Send {
        let _ = ctx;
        async { Ok(()) }
    }

    /// Handles one message.
    fn handle(
        &mut self,
        msg: Self::Msg,
        ctx: &mut Context<Self>,
    ) -> impl Future<Output = Result<(), ActorError>> + Send;

    /// Called once for each actor this one watches when it terminates (see
    /// [`Context::watch`]).
    fn on_terminated(
        &mut self,
        terminated: Terminated,
        ctx: &mut Context<Self>,
    ) -> impl Future<Output = Result<(), ActorError>> + Send {
        let _ = (terminated, ctx);
        async { Ok(()) }
    }

    /// Runs after the actor stopped and every child of it has terminated.
    fn post_stop(&mut self, ctx: &mut Context<Self>) -> impl Future<Output = ()> + Send {
        let _ = ctx;
        async {}
    }
}

/// What went wrong inside an actor.
#[derive(Debug)]
pub enum Failure {
    /// A hook returned an error.
    Error(ActorError),
    /// A hook panicked; the panic message, if it was a string.
    Panic(String),
    /// A child's failure escalated to this actor.
    Escalated {
        /// The child that failed.
        child: crate::ActorPath,
        /// What the child's failure was.
        cause: String,
    },
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Error(e) => write!(f, "error: {e}"),
            Self::Panic(message) => write!(f, "panic: {message}"),
            Self::Escalated { child, cause } => write!(f, "child {child} escalated ({cause})"),
        }
    }
}

impl Failure {
    pub(crate) fn from_panic(payload: Box<dyn std::any::Any + Send>) -> Self {
        let message = if let Some(s) = payload.downcast_ref::<&'static str>() {
            (*s).to_owned()
        } else if let Some(s) = payload.downcast_ref::<String>() {
            s.clone()
        } else {
            "non-string panic payload".to_owned()
        };
        Self::Panic(message)
    }
}
