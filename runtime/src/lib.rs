//! Troupe's actor runtime: typed actors with supervision, death watch, dead letters, an event
//! stream, measurable mailboxes and local routers — the base the cluster layers build on.
//!
//! ```no_run
//! use troupe::{Actor, ActorError, ActorSystem, Context, Props, ReplyTo};
//!
//! struct Greeter;
//!
//! enum GreeterMsg {
//!     /// Reply with a greeting for `name`.
//!     Greet { name: String, reply: ReplyTo<String> },
//! }
//!
//! impl Actor for Greeter {
//!     type Msg = GreeterMsg;
//!
//!     async fn handle(&mut self, msg: GreeterMsg, _ctx: &mut Context<Self>) -> Result<(), ActorError> {
//!         let GreeterMsg::Greet { name, reply } = msg;
//!         reply.send(format!("hello, {name}"));
//!         Ok(())
//!     }
//! }
//!
//! # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let system = ActorSystem::new("app")?;
//! let greeter = system.spawn("greeter", Props::new(|| Greeter))?;
//! let greeting = greeter.ask(|reply| GreeterMsg::Greet { name: "troupe".into(), reply }).await?;
//! assert_eq!(greeting, "hello, troupe");
//! system.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! The guarantees (ordering, delivery, supervision, dead letters) are written down once in
//! `docs/runtime-semantics.md`.

// Without `remote` the outbound seam (`outbound.rs`) has no implementor, so the parts of the
// core that only it uses are unused there; the default build checks them as usual.
#![cfg_attr(not(feature = "remote"), allow(dead_code))]

mod actor;
mod actor_ref;
mod address;
mod ask;
mod cell;
#[cfg(feature = "remote")]
pub mod cluster;
#[cfg(feature = "remote")]
pub mod cluster_router;
mod context;
mod dead_letter;
mod death_watch;
mod event_stream;
mod extension;
mod mailbox;
mod outbound;
mod path;
mod props;
#[cfg(feature = "remote")]
pub mod remoting;
pub mod routing;
#[cfg(feature = "remote")]
pub mod singleton;
mod supervision;
mod system;
mod task;
#[cfg(feature = "testkit")]
pub mod testkit;
#[cfg(feature = "remote")]
pub mod transport;
#[cfg(feature = "remote")]
pub mod virtual_actor;

/// The actor directory (which host owns an actor id) — the `troupe-lease` crate's
/// `directory` module.
pub use troupe_lease::directory;
/// Leases (at most one holder cluster-wide) — the `troupe-lease` crate's `lease` module.
pub use troupe_lease::lease;

pub use actor::{Actor, ActorError, Failure};
pub use actor_ref::{ActorRef, AnyActorRef, SendError};
pub use address::{Address, AddressError, UniqueAddress};
pub use ask::{AskError, AskFuture, AskRequest, DEFAULT_ASK_TIMEOUT, ReplyTo};
pub use cell::ActorId;
pub use context::{Context, TimerHandle, Watchable};
pub use dead_letter::{DeadLetter, DeadLetterReason, DeadLetters, VirtualActorFailure};
pub use death_watch::Terminated;
pub use event_stream::{EventStream, Subscription, SubscriptionId};
pub use mailbox::{MailboxDepth, MailboxOptions};
pub use path::{ActorPath, InvalidName, SCHEME, validate_name};
pub use props::Props;
pub use supervision::{Directive, RestartHistory, SupervisorStrategy, decide};
pub use system::{ActorSystem, ResolveError, SpawnError, SystemError};

/// The README's Rust examples compile and run as doc tests.
#[cfg(all(doctest, feature = "remote"))]
#[doc = include_str!("../../README.md")]
struct ReadmeDoctests;
