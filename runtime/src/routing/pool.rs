//! The local pool router: an actor that spawns N routees as its children and forwards each
//! message by one of the five strategies.
//!
//! # Supervision tree
//! ```text
//! /user/<router>             PoolRouter: forwards; watches every routee
//! ├── routee-1 .. routee-N   built from the routee Props, supervised by those Props
//! ```
//! Stopping the router stops its routees (a pool owns them; a cluster router, by contrast,
//! leaves its routees alone). A routee that terminates for good (its restart budget is spent)
//! leaves the rotation; when none are left, messages become dead letters (`NoRoutees`).

use std::fmt;
use std::sync::Arc;

use crate::actor::{Actor, ActorError};
use crate::actor_ref::ActorRef;
use crate::context::Context;
use crate::dead_letter::{DeadLetter, DeadLetterReason};
use crate::death_watch::Terminated;
use crate::mailbox::MailboxDepth;
use crate::props::Props;

use super::logic::{RoutingLogic, RoutingStrategy, Selection};

type ExtractKey<M> = Arc<dyn Fn(&M) -> String + Send + Sync>;
type RouteeProps<A> = Box<dyn FnMut() -> Props<A> + Send>;
type CloneMessage<M> = fn(&M) -> M;

/// A router configuration that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PoolRouterError {
    /// A pool of zero routees.
    #[error("pool size must be at least 1, got 0")]
    EmptyPool,
    /// Consistent hashing needs a key.
    #[error(
        "routing strategy consistent-hashing needs an extract_key function; set it with consistent_hashing(extract_key)"
    )]
    MissingExtractKey,
    /// Broadcast needs a way to clone messages, which only `broadcast()` can supply.
    #[error(
        "routing strategy broadcast needs Clone messages; choose it with broadcast(), not with_strategy()"
    )]
    BroadcastNeedsClone,
}

/// How to build a [`PoolRouter`]: size, strategy, routee props.
#[must_use]
pub struct PoolRouterOptions<A: Actor> {
    size: usize,
    strategy: RoutingStrategy,
    routee_props: RouteeProps<A>,
    extract_key: Option<ExtractKey<A::Msg>>,
    clone_message: Option<CloneMessage<A::Msg>>,
    seed: Option<u64>,
}

impl<A: Actor> fmt::Debug for PoolRouterOptions<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolRouterOptions")
            .field("size", &self.size)
            .field("strategy", &self.strategy)
            .finish()
    }
}

impl<A: Actor> PoolRouterOptions<A> {
    /// A round-robin pool of `size` routees, each built from `routee_props()`.
    pub fn new(size: usize, routee_props: impl FnMut() -> Props<A> + Send + 'static) -> Self {
        Self {
            size,
            strategy: RoutingStrategy::RoundRobin,
            routee_props: Box::new(routee_props),
            extract_key: None,
            clone_message: None,
            seed: None,
        }
    }

    /// One routee per message, cycling.
    pub fn round_robin(mut self) -> Self {
        self.strategy = RoutingStrategy::RoundRobin;
        self
    }

    /// One routee per message, uniformly at random.
    pub fn random(mut self) -> Self {
        self.strategy = RoutingStrategy::Random;
        self
    }

    /// The routee with the fewest queued messages (read from the mailbox depth handles).
    pub fn smallest_mailbox(mut self) -> Self {
        self.strategy = RoutingStrategy::SmallestMailbox;
        self
    }

    /// The same key always to the same routee.
    pub fn consistent_hashing(
        mut self,
        extract_key: impl Fn(&A::Msg) -> String + Send + Sync + 'static,
    ) -> Self {
        self.strategy = RoutingStrategy::ConsistentHashing;
        self.extract_key = Some(Arc::new(extract_key));
        self
    }

    /// Use `strategy` by name; consistent hashing still needs [`Self::with_extract_key`], and
    /// broadcast (which needs `Clone` messages) must be chosen with `broadcast()`.
    pub fn with_strategy(mut self, strategy: RoutingStrategy) -> Self {
        self.strategy = strategy;
        self
    }

    /// The key function for consistent hashing.
    pub fn with_extract_key(
        mut self,
        extract_key: impl Fn(&A::Msg) -> String + Send + Sync + 'static,
    ) -> Self {
        self.extract_key = Some(Arc::new(extract_key));
        self
    }

    /// Seed the random strategy (fixed seeds replay). Test machinery: only with the `testkit`
    /// feature.
    #[cfg(feature = "testkit")]
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Check the configuration and turn it into the router's props.
    pub fn into_props(self) -> Result<Props<PoolRouter<A>>, PoolRouterError> {
        if self.size == 0 {
            return Err(PoolRouterError::EmptyPool);
        }
        if self.strategy == RoutingStrategy::ConsistentHashing && self.extract_key.is_none() {
            return Err(PoolRouterError::MissingExtractKey);
        }
        if self.strategy == RoutingStrategy::Broadcast && self.clone_message.is_none() {
            return Err(PoolRouterError::BroadcastNeedsClone);
        }
        // A restarted router instance rebuilds its routees from the same config.
        let shared = Arc::new(parking_lot::Mutex::new(self));
        Ok(Props::new(move || PoolRouter {
            config: Arc::clone(&shared),
            routees: Vec::new(),
            ids: Vec::new(),
            depths: Vec::new(),
            logic: None,
            warned_empty: false,
        }))
    }
}

impl<A: Actor> PoolRouterOptions<A>
where
    A::Msg: Clone,
{
    /// Every routee gets every message.
    pub fn broadcast(mut self) -> Self {
        self.strategy = RoutingStrategy::Broadcast;
        self.clone_message = Some(<A::Msg as Clone>::clone);
        self
    }
}

/// The pool router actor. Build it with [`PoolRouterOptions`].
pub struct PoolRouter<A: Actor> {
    config: Arc<parking_lot::Mutex<PoolRouterOptions<A>>>,
    routees: Vec<ActorRef<A::Msg>>,
    ids: Vec<Vec<u8>>,
    depths: Vec<MailboxDepth>,
    logic: Option<RoutingLogic>,
    warned_empty: bool,
}

impl<A: Actor> fmt::Debug for PoolRouter<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolRouter")
            .field("routees", &self.routees.len())
            .finish()
    }
}

impl<A: Actor> PoolRouter<A> {
    /// The routees currently in the rotation.
    #[must_use]
    pub fn routees(&self) -> &[ActorRef<A::Msg>] {
        &self.routees
    }

    fn route(&mut self, message: A::Msg, ctx: &mut Context<Self>) {
        let config = self.config.lock();
        let Some(logic) = self.logic.as_mut() else {
            return;
        };
        let key = config.extract_key.as_ref().map(|extract| extract(&message));
        let ids: Vec<&[u8]> = self.ids.iter().map(Vec::as_slice).collect();
        let depths = &self.depths;
        match logic.select(&ids, key.as_deref().map(str::as_bytes), |i| {
            Some(depths[i].get())
        }) {
            // Routees see the original sender, not the router.
            Selection::One(index) => {
                self.routees[index].tell_quietly(message, ctx.sender().cloned());
            }
            Selection::All => {
                let clone = config
                    .clone_message
                    .expect("broadcast is only configurable for Clone messages");
                if let Some((last, rest)) = self.routees.split_last() {
                    for routee in rest {
                        routee.tell_quietly(clone(&message), ctx.sender().cloned());
                    }
                    last.tell_quietly(message, ctx.sender().cloned());
                }
            }
            Selection::NoRoutees => {
                if !self.warned_empty {
                    self.warned_empty = true;
                    tracing::warn!(router = %ctx.path(), "pool router has no routees left; messages go to dead letters");
                }
                ctx.system().dead_letters().publish(DeadLetter {
                    recipient: ctx.path().clone(),
                    sender: ctx.sender().cloned(),
                    message_type: std::any::type_name::<A::Msg>(),
                    reason: DeadLetterReason::NoRoutees,
                });
            }
        }
    }
}

impl<A: Actor> Actor for PoolRouter<A> {
    type Msg = A::Msg;

    async fn pre_start(&mut self, ctx: &mut Context<Self>) -> Result<(), ActorError> {
        let (size, strategy, seed) = {
            let config = self.config.lock();
            (config.size, config.strategy, config.seed)
        };
        self.logic = Some(RoutingLogic::new(
            strategy,
            seed.unwrap_or_else(rand::random),
        ));
        for i in 1..=size {
            let props = (self.config.lock().routee_props)();
            let routee = ctx.spawn(&format!("routee-{i}"), props)?;
            ctx.watch(&routee);
            self.ids.push(routee.path().to_string().into_bytes());
            self.depths.push(routee.mailbox_depth());
            self.routees.push(routee);
        }
        Ok(())
    }

    async fn handle(&mut self, msg: A::Msg, ctx: &mut Context<Self>) -> Result<(), ActorError> {
        self.route(msg, ctx);
        Ok(())
    }

    async fn on_terminated(
        &mut self,
        terminated: Terminated,
        _ctx: &mut Context<Self>,
    ) -> Result<(), ActorError> {
        if let Some(index) = self.routees.iter().position(|r| r.id() == terminated.id) {
            self.routees.remove(index);
            self.ids.remove(index);
            self.depths.remove(index);
        }
        Ok(())
    }
}
