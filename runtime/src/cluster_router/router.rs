//! [`ClusterRouter`]: the actor that routes each message to one (or, broadcasting, every)
//! routee on the cluster's routee nodes.
//!
//! # The routing path
//! Per message: pick up the newest table if the control task published one (one atomic load
//! when it did not), let [`RoutingLogic`] choose over it, and hand the message to the chosen
//! routee's remote ref — the same path whether the routee is on another node or on this one
//! (the transport's loopback). Nothing on this path awaits, locks out the control task, or asks
//! another node anything.
//!
//! # Delivery
//! At most once, like every tell. A message with no routee to go to, or that the transport
//! would not take, becomes a [`DeadLetter`] on this node and a
//! [`ClusterRouterEvent::DeadLettered`].

use std::fmt;
use std::sync::Arc;

use tokio::sync::{mpsc, watch};

use super::control::{Control, Snapshot};
use super::depth_agent::{ClusterMailboxDepthAgent, DepthReply, ServingDepths};
use super::depth_replies::{DEPTH_REPLIES_NAME, DepthReplyInbox};
use super::events::ClusterRouterEvent;
use super::options::{ClusterRouterError, ClusterRouterOptions, ValidOptions};
use super::routee_set::{Estimates, resume_cursor};
use crate::actor::{Actor, ActorError};
use crate::context::Context;
use crate::dead_letter::{DeadLetter, DeadLetterReason};
use crate::path::ActorPath;
use crate::props::Props;
use crate::remoting::RemoteMessage;
use crate::remoting::with_context;
use crate::routing::{RoutingLogic, RoutingStrategy, Selection};

/// Warn again about an empty routee set after this many more dead letters.
const EMPTY_WARNING_EVERY: u64 = 1_000;

/// The cluster router actor. Build its props with [`ClusterRouter::factory`] and spawn them
/// like any actor's; tell it messages of type `M`.
pub struct ClusterRouter<M: RemoteMessage> {
    options: Arc<ValidOptions<M>>,
    current: Arc<Snapshot<M>>,
    updates: Option<watch::Receiver<Arc<Snapshot<M>>>>,
    logic: RoutingLogic,
    /// Smallest-mailbox: each routee's reading plus what this router sent it since.
    estimates: Estimates,
    control: Option<tokio::task::AbortHandle>,
    serving: Option<ServingDepths>,
    /// Messages dead-lettered since the routee set was last non-empty.
    unroutable: u64,
}

impl<M: RemoteMessage> fmt::Debug for ClusterRouter<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterRouter")
            .field("strategy", &self.options.strategy)
            .field("routee_path", &self.options.routee_path)
            .field("routees", &self.current.table.nodes())
            .finish()
    }
}

impl<M: RemoteMessage> ClusterRouter<M> {
    /// Validate `options` and return the router's props.
    ///
    /// # Errors
    /// [`ClusterRouterError`] naming the first field whose value cannot work.
    pub fn factory(options: ClusterRouterOptions<M>) -> Result<Props<Self>, ClusterRouterError> {
        let options = Arc::new(options.validate()?);
        Ok(Props::new(move || Self::new(Arc::clone(&options))))
    }

    fn new(options: Arc<ValidOptions<M>>) -> Self {
        let seed = options.seed.unwrap_or_else(rand::random);
        let logic = RoutingLogic::new(options.strategy, seed);
        let current = Arc::new(Snapshot::empty(&options.routee_path));
        Self {
            options,
            current,
            updates: None,
            logic,
            estimates: Estimates::default(),
            control: None,
            serving: None,
            unroutable: 0,
        }
    }

    /// Switch to the newest published table; after a routee set change, resume round-robin
    /// after the node chosen last.
    fn refresh_table(&mut self) {
        let Some(updates) = &mut self.updates else {
            return;
        };
        if !updates.has_changed().unwrap_or(false) {
            return;
        }
        let next = Arc::clone(&updates.borrow_and_update());
        if next.generation != self.current.generation {
            let last = self
                .logic
                .cursor()
                .checked_sub(1)
                .and_then(|index| self.current.table.nodes().get(index));
            let cursor = resume_cursor(next.table.nodes(), last);
            self.logic.set_cursor(cursor);
        }
        self.estimates = next
            .table
            .carry_estimates(&self.current.table, &self.estimates);
        self.current = next;
    }

    fn route(&mut self, message: M, ctx: &Context<Self>) {
        let key = self
            .options
            .extract_key
            .as_ref()
            .map(|extract| extract(&message));
        match self.current.table.select_and_count(
            &mut self.logic,
            key.as_deref().map(str::as_bytes),
            &mut self.estimates,
        ) {
            Selection::One(index) => {
                self.unroutable = 0;
                self.deliver(index, message, ctx);
            }
            Selection::All => {
                self.unroutable = 0;
                self.broadcast(message, ctx);
            }
            Selection::NoRoutees => self.no_routees(ctx),
        }
    }

    /// The sender routees see: the original sender when it lives on this node (its path then
    /// names this node on the wire), else none — a path naming another node would be
    /// re-attributed to this node by the receiving transport, which would be misleading.
    fn sender(ctx: &Context<Self>) -> Option<ActorPath> {
        ctx.sender()
            .filter(|sender| sender.address().is_none())
            .cloned()
    }

    fn deliver(&self, index: usize, message: M, ctx: &Context<Self>) {
        let routee = &self.current.routees[index];
        if let Err(refused) = routee.try_tell_with(message, Self::sender(ctx)) {
            let node = self.current.table.nodes()[index].clone();
            self.dead_letter(ctx, routee.path().clone(), Some(node), refused.reason());
        }
    }

    /// Every routee gets its own copy, decoded from one encoding of the message (so any
    /// `ReplyTo` inside is shared: the first reply answers the ask).
    fn broadcast(&self, message: M, ctx: &Context<Self>) {
        let remoting = self.options.cluster.remoting();
        let encoded = with_context(remoting, || postcard::to_allocvec(&message));
        drop(message);
        let encoded = match encoded {
            Ok(encoded) => encoded,
            Err(error) => {
                tracing::warn!(router = %ctx.path(), %error, "broadcast message does not serialize");
                let reason = DeadLetterReason::Unserializable;
                self.dead_letter(ctx, ctx.path().clone(), None, reason);
                return;
            }
        };
        for index in 0..self.current.routees.len() {
            match with_context(remoting, || postcard::from_bytes::<M>(&encoded)) {
                Ok(copy) => self.deliver(index, copy, ctx),
                Err(error) => {
                    tracing::warn!(router = %ctx.path(), %error, "broadcast copy does not decode");
                    let node = self.current.table.nodes()[index].clone();
                    let reason = DeadLetterReason::Undecodable;
                    let recipient = self.current.routees[index].path().clone();
                    self.dead_letter(ctx, recipient, Some(node), reason);
                }
            }
        }
    }

    fn no_routees(&mut self, ctx: &Context<Self>) {
        if self.unroutable % EMPTY_WARNING_EVERY == 0 {
            tracing::warn!(
                router = %ctx.path(),
                routee_path = %self.options.routee_path,
                role = ?self.options.role,
                dead_lettered = self.unroutable + 1,
                "cluster router has no routees (no up member matches); messages go to dead letters"
            );
        }
        self.unroutable += 1;
        self.dead_letter(ctx, ctx.path().clone(), None, DeadLetterReason::NoRoutees);
    }

    fn dead_letter(
        &self,
        ctx: &Context<Self>,
        recipient: ActorPath,
        routee: Option<crate::Address>,
        reason: DeadLetterReason,
    ) {
        let system = ctx.system();
        let message_type = std::any::type_name::<M>();
        system.dead_letters().publish(DeadLetter {
            recipient,
            sender: ctx.sender().cloned(),
            message_type,
            reason: reason.clone(),
        });
        system
            .event_stream()
            .publish(ClusterRouterEvent::DeadLettered {
                router: ctx.path().clone(),
                message_type,
                routee,
                reason,
            });
    }
}

impl<M: RemoteMessage> Actor for ClusterRouter<M> {
    type Msg = M;

    async fn pre_start(&mut self, ctx: &mut Context<Self>) -> Result<(), ActorError> {
        let cluster = self.options.cluster.clone();
        let remoting = cluster.remoting();
        // Routees on this node are reached through the loopback, which decodes like any node.
        remoting.register::<M>();
        let depth_replies = if self.options.strategy == RoutingStrategy::SmallestMailbox {
            remoting.register::<DepthReply>();
            self.serving = Some(ClusterMailboxDepthAgent::serve(&cluster)?);
            let (to_control, replies) = mpsc::unbounded_channel();
            let this_node = cluster.self_address().clone();
            let inbox = ctx.spawn(
                DEPTH_REPLIES_NAME,
                Props::new(move || DepthReplyInbox {
                    to_control: to_control.clone(),
                    this_node: this_node.clone(),
                }),
            )?;
            Some((inbox, replies))
        } else {
            None
        };
        ctx.system()
            .event_stream()
            .publish(ClusterRouterEvent::Started {
                router: ctx.path().clone(),
                strategy: self.options.strategy,
                role: self.options.role.clone(),
                routee_path: self.options.routee_path.clone(),
            });
        // Subscribe before the first derivation so no change falls between the two.
        let membership = cluster.subscribe();
        let (mut control, mut updates) =
            Control::new(&self.options, ctx.path().clone(), depth_replies);
        control.on_membership();
        self.current = Arc::clone(&updates.borrow_and_update());
        self.estimates = self.current.table.estimates();
        self.updates = Some(updates);
        let task = ctx.system().runtime().spawn(control.run(membership));
        self.control = Some(task.abort_handle());
        Ok(())
    }

    async fn handle(&mut self, message: M, ctx: &mut Context<Self>) -> Result<(), ActorError> {
        self.refresh_table();
        self.route(message, ctx);
        Ok(())
    }

    async fn post_stop(&mut self, _ctx: &mut Context<Self>) {
        // Only the router's own parts stop: the routees belong to their nodes.
        if let Some(control) = self.control.take() {
            control.abort();
        }
        if let Some(serving) = self.serving.take() {
            serving.stop();
        }
        self.updates = None;
    }
}
