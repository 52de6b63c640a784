//! The singleton proxy: one actor per singleton on every node that uses it, which resolves the
//! host from this node's view and forwards each message to the manager there. The routing
//! decisions are the pure machine in `proxy_state.rs`; this file is its shell (the view, the
//! managers' refs, timers, dead letters) and the caller-side handle with its fast path.
//!
//! # Routing
//! The host is elected exactly as the managers elect it (see `election.rs`). While no member
//! hosts — or the elected host is unreachable from here — the proxy buffers, up to its
//! `buffer_size`; beyond that messages go to dead letters. When this node is the elected host but
//! never called `start`, messages go to dead letters at once: a deployment error that does not
//! heal by waiting.
//!
//! # Ordering across a hand-over
//! Messages from one proxy reach the singleton in send order, also while the host moves. When
//! the proxy's target changes, it first asks the manager it last sent to for the messages that
//! manager still holds from it (`DrainRequest`), buffering new ones meanwhile; the manager
//! answers after every earlier message from this proxy (one ordered link), with the held ones in
//! order, and the proxy sends those to the new host ahead of its buffer. Messages the old manager
//! already gave its instance were processed before the new instance could start: a new host
//! spawns only after the old instance finished `post_stop`. A drain that gets no answer within
//! `DRAIN_TIMEOUT` (the old manager's node died) is given up; what it held expires there into
//! dead letters.
//!
//! # The fast path
//! While the proxy actor has nothing queued, buffered or draining, the [`SingletonProxy`] handle
//! sends straight to the host's manager from the caller's task, saving the actor hop. One lock
//! orders the two paths: a caller takes the fast path only when no message of the proxy is
//! waiting in the actor (`pending == 0`), and the actor withdraws the fast target under that
//! lock before it re-routes, so everything sent fast is on the link to the old manager before
//! the actor's `DrainRequest`.

use std::any::Any;
use std::collections::BTreeSet;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::election::elect_host;
use super::event::{DeadLetterCause, SingletonEvent};
use super::manager::{InternalMsg, ManagerMsg};
use super::payload::Payload;
use super::proxy_state::{self, ProxyAction, ProxyEvent, ProxyState, ProxyWarning, Route};
use crate::Address;
use crate::actor::{Actor, ActorError};
use crate::actor_ref::ActorRef;
use crate::ask::{AskRequest, ReplyTo};
use crate::cluster::{Cluster, MemberStatus};
use crate::context::Context;
use crate::dead_letter::DeadLetter;
use crate::path::ActorPath;
use crate::remoting::RemoteMessage;

/// The proxy's protocol. Only `Drained` crosses the network (from a manager, attributed by the
/// transport); the rest is sent on this node.
#[derive(Debug, Serialize, Deserialize)]
pub enum ProxyMsg {
    /// Messages a manager held from this proxy, given back in order for re-routing.
    Drained {
        /// The `DrainRequest` answered.
        nonce: u64,
        /// The held messages, oldest first.
        messages: Vec<DrainedMessage>,
    },
    /// Messages only this node's runtime sends.
    #[serde(skip)]
    #[doc(hidden)]
    Internal(ProxyInternal),
}

impl RemoteMessage for ProxyMsg {
    const MANIFEST: &'static str = "troupe.singleton.Proxy";
}

/// One held message given back by a manager.
#[derive(Debug, Serialize, Deserialize)]
pub struct DrainedMessage {
    /// The serialized message.
    pub body: Bytes,
    /// The original sender's path elements on the proxy's node.
    pub sender: Option<String>,
}

/// Opaque: messages the runtime sends a proxy on its own node.
pub struct ProxyInternal(pub(crate) ProxyInternalMsg);

impl fmt::Debug for ProxyInternal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ProxyInternal")
    }
}

pub(crate) enum ProxyInternalMsg {
    /// A message for the singleton from the proxy handle.
    Send {
        message: Box<dyn Any + Send>,
        sender: Option<ActorPath>,
    },
    /// This node's cluster view changed.
    ClusterChanged,
    /// The local manager's answer to a drain: a `Vec<Payload<M>>`.
    DrainedLocal {
        nonce: u64,
        items: Box<dyn Any + Send>,
    },
    /// Give up waiting for drain `nonce`.
    DrainTimeout { nonce: u64 },
    /// `start` / `stop` on this node changed the local manager or the role.
    Reconfigure { role: Option<Option<String>> },
}

impl ProxyMsg {
    pub(crate) fn internal(message: ProxyInternalMsg) -> Self {
        Self::Internal(ProxyInternal(message))
    }
}

/// Shared by a proxy actor and its handles: where callers may send directly.
pub(crate) struct FastPath<M> {
    state: Mutex<FastState<M>>,
}

struct FastState<M> {
    /// The host's manager, while the actor has nothing buffered or draining.
    target: Option<FastTarget<M>>,
    /// Messages handed to the actor that it has not sent on (or buffered) yet.
    pending: u64,
}

enum FastTarget<M> {
    /// This node's manager.
    Local(ActorRef<ManagerMsg>),
    /// The manager's path on another node, addressed with the singleton's own message type.
    Remote(ActorRef<M>),
}

impl<M> FastPath<M> {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(FastState {
                target: None,
                pending: 0,
            }),
        })
    }
}

impl<M> fmt::Debug for FastPath<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.state.lock();
        f.debug_struct("FastPath")
            .field("direct", &state.target.is_some())
            .field("pending", &state.pending)
            .finish()
    }
}

/// The handle to a singleton: send it messages of type `M` and they reach the one instance in
/// the cluster, wherever it runs. Cheap to clone.
pub struct SingletonProxy<M> {
    actor: ActorRef<ProxyMsg>,
    fast: Arc<FastPath<M>>,
    _message: PhantomData<fn(M)>,
}

impl<M> Clone for SingletonProxy<M> {
    fn clone(&self) -> Self {
        Self {
            actor: self.actor.clone(),
            fast: Arc::clone(&self.fast),
            _message: PhantomData,
        }
    }
}

impl<M> fmt::Debug for SingletonProxy<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SingletonProxy({})", self.actor.path())
    }
}

impl<M: RemoteMessage> SingletonProxy<M> {
    pub(crate) fn new(actor: ActorRef<ProxyMsg>, fast: Arc<FastPath<M>>) -> Self {
        Self {
            actor,
            fast,
            _message: PhantomData,
        }
    }

    /// Send `message` to the singleton; told from inside an actor, it names that actor as its
    /// sender (like [`crate::ActorRef::tell`]).
    pub fn tell(&self, message: M) {
        self.send(message, crate::task::current_actor_path());
    }

    /// Send `message` naming its sender (shown in dead letters, `ctx.sender()` of the instance).
    pub fn tell_from(&self, message: M, sender: &ActorPath) {
        self.send(message, Some(sender.clone()));
    }

    fn send(&self, message: M, sender: Option<ActorPath>) {
        let mut state = self.fast.state.lock();
        if state.pending == 0 {
            match &state.target {
                Some(FastTarget::Local(manager)) => {
                    manager.tell(ManagerMsg::internal(InternalMsg::DeliverLocal {
                        message: Box::new(message),
                        sender,
                    }));
                    return;
                }
                Some(FastTarget::Remote(manager)) => {
                    manager.tell_quietly(message, sender);
                    return;
                }
                None => {}
            }
        }
        state.pending += 1;
        self.actor.tell(send(message, sender));
    }

    /// Ask the singleton: build the message around a fresh [`ReplyTo`] and await the reply.
    pub fn ask<R, F>(
        &self,
        make: F,
    ) -> AskRequest<'_, ProxyMsg, R, impl FnOnce(ReplyTo<R>) -> ProxyMsg + use<'_, R, F, M>>
    where
        R: Send + 'static,
        F: FnOnce(ReplyTo<R>) -> M,
    {
        let fast = Arc::clone(&self.fast);
        self.actor.ask(move |reply| {
            // Counted before it is queued, so later fast tells cannot overtake it.
            fast.state.lock().pending += 1;
            send(make(reply), None)
        })
    }

    /// The proxy actor's path (`/system/cluster/singleton/proxy-<typeName>`).
    #[must_use]
    pub fn path(&self) -> &ActorPath {
        self.actor.path()
    }
}

fn send<M: Send + 'static>(message: M, sender: Option<ActorPath>) -> ProxyMsg {
    ProxyMsg::internal(ProxyInternalMsg::Send {
        message: Box::new(message),
        sender,
    })
}

/// The shell around [`ProxyState`]: reads the view, performs the actions.
pub(crate) struct ProxyActor<M: RemoteMessage> {
    type_name: Arc<str>,
    role: Option<String>,
    cluster: Cluster,
    me: Address,
    buffer_size: usize,
    manager_elements: String,
    /// The routing state; `None` only while a step runs.
    state: Option<ProxyState<Payload<M>>>,
    remote_manager: Option<(Address, ActorRef<M>)>,
    /// The local manager as of a registry generation.
    local_manager: Option<(u64, Option<ActorRef<ManagerMsg>>)>,
    subscription: Option<tokio::task::JoinHandle<()>>,
    fast: Arc<FastPath<M>>,
    registry: Arc<super::Registry>,
}

impl<M: RemoteMessage> ProxyActor<M> {
    pub(crate) fn new(
        type_name: Arc<str>,
        role: Option<String>,
        cluster: Cluster,
        buffer_size: usize,
        fast: Arc<FastPath<M>>,
        registry: Arc<super::Registry>,
    ) -> Self {
        let me = cluster.self_address().clone();
        Self {
            fast,
            registry,
            manager_elements: super::manager_elements(&type_name),
            state: Some(ProxyState::new(me.clone(), buffer_size, rand::random())),
            me,
            type_name,
            role,
            cluster,
            buffer_size,
            remote_manager: None,
            local_manager: None,
            subscription: None,
        }
    }

    /// Advance the routing state by `event` and perform what it says.
    fn step(&mut self, event: ProxyEvent<Payload<M>>, ctx: &mut Context<Self>) {
        let state = self
            .state
            .take()
            .expect("the proxy state is back after every step");
        let (state, actions) = proxy_state::step(state, event, Instant::now());
        self.state = Some(state);
        for action in actions {
            self.perform(action, ctx);
        }
    }

    fn perform(&mut self, action: ProxyAction<Payload<M>>, ctx: &mut Context<Self>) {
        match action {
            ProxyAction::WithdrawFastPath => self.fast.state.lock().target = None,
            ProxyAction::Send { node, item } => {
                let Payload { message, sender } = item;
                if node == self.me {
                    match self.local_manager() {
                        Some(manager) => {
                            manager.tell(ManagerMsg::internal(InternalMsg::DeliverLocal {
                                message: Box::new(message),
                                sender,
                            }));
                        }
                        // `stop` ran since the view was read; the next step learns it.
                        None => self.dead_letter(sender, DeadLetterCause::NoManager),
                    }
                } else {
                    let manager = self.remote_manager(&node);
                    manager.tell_quietly(message, sender);
                }
            }
            ProxyAction::RequestDrain { node, nonce } => {
                let request = ManagerMsg::DrainRequest { nonce };
                if node == self.me {
                    // Any manager at the path answers, active or passive.
                    match ctx.system().resolve::<ManagerMsg>(&self.manager_elements) {
                        Ok(manager) => manager.tell(request),
                        Err(_) => ctx
                            .myself()
                            .tell(ProxyMsg::internal(ProxyInternalMsg::DrainTimeout { nonce })),
                    }
                } else {
                    self.cluster
                        .remoting()
                        .remote_ref::<ManagerMsg>(&node, &self.manager_elements)
                        .tell(request);
                }
            }
            ProxyAction::ScheduleDrainTimeout { nonce, at } => {
                ctx.schedule_once(
                    at.saturating_duration_since(Instant::now()),
                    ProxyMsg::internal(ProxyInternalMsg::DrainTimeout { nonce }),
                );
            }
            ProxyAction::DeadLetter { item, cause } => {
                self.dead_letter(item.sender, cause);
                if cause == DeadLetterCause::NoManager {
                    self.cluster.system().event_stream().publish(
                        SingletonEvent::MessagesDeadLettered {
                            type_name: Arc::clone(&self.type_name),
                            node: self.me.clone(),
                            count: 1,
                            reason: DeadLetterCause::NoManager,
                        },
                    );
                }
            }
            ProxyAction::Warn(ProxyWarning::BufferFull) => tracing::warn!(
                singleton = %self.type_name,
                buffer_size = self.buffer_size,
                "singleton proxy buffer is full while no node hosts: dead-lettering (warned once)"
            ),
            ProxyAction::Warn(ProxyWarning::NoManager) => tracing::warn!(
                singleton = %self.type_name,
                "this node is the singleton's elected host but never called start(..): dead-lettering (warned once)"
            ),
            ProxyAction::OfferFastPath(target) => {
                let target = match target {
                    None => None,
                    Some(node) if node == self.me => self.local_manager().map(FastTarget::Local),
                    Some(node) => Some(FastTarget::Remote(self.remote_manager(&node))),
                };
                self.fast.state.lock().target = target;
            }
        }
    }

    /// What this node's view says now: the host, and which managers can answer a drain.
    fn routed(&mut self, force: bool, ctx: &Context<Self>) -> ProxyEvent<Payload<M>> {
        let view = self.cluster.view();
        let route = match elect_host(&view.members, self.role.as_deref()) {
            None => Route::Nobody,
            Some(host) if view.unreachable.contains(&host.node) => Route::Nobody,
            Some(host) if host.address() == &self.me => Route::Local,
            Some(host) => Route::Remote(host.address().clone()),
        };
        let mut answering: BTreeSet<Address> = view
            .members
            .iter()
            .filter(|m| {
                !matches!(m.status, MemberStatus::Down | MemberStatus::Removed)
                    && !view.unreachable.contains(&m.node)
                    && m.address() != &self.me
            })
            .map(|m| m.address().clone())
            .collect();
        if ctx
            .system()
            .resolve::<ManagerMsg>(&self.manager_elements)
            .is_ok()
        {
            answering.insert(self.me.clone());
        }
        ProxyEvent::Routed {
            route,
            answering,
            local_manager: self.local_manager().is_some(),
            force,
        }
    }

    /// The local manager if `start` is in effect on this node.
    fn local_manager(&mut self) -> Option<ActorRef<ManagerMsg>> {
        let registry = &self.registry;
        let generation = registry.generation();
        match &self.local_manager {
            Some((cached, manager)) if *cached == generation => manager.clone(),
            _ => {
                let manager = registry.active_manager(&self.type_name);
                self.local_manager = Some((generation, manager.clone()));
                manager
            }
        }
    }

    /// The manager's path on `node`, for messages to the singleton.
    fn remote_manager(&mut self, node: &Address) -> ActorRef<M> {
        match &self.remote_manager {
            Some((cached, manager)) if cached == node => manager.clone(),
            _ => {
                let manager = self
                    .cluster
                    .remoting()
                    .remote_ref::<M>(node, &self.manager_elements);
                self.remote_manager = Some((node.clone(), manager.clone()));
                manager
            }
        }
    }

    fn dead_letter(&self, sender: Option<ActorPath>, cause: DeadLetterCause) {
        self.cluster.system().dead_letters().publish(DeadLetter {
            recipient: ActorPath::remote(
                &self.me,
                &format!("{}/{}", self.manager_elements, self.type_name),
            ),
            sender,
            message_type: std::any::type_name::<M>(),
            reason: cause.into(),
        });
    }
}

impl<M: RemoteMessage> Actor for ProxyActor<M> {
    type Msg = ProxyMsg;

    async fn pre_start(&mut self, ctx: &mut Context<Self>) -> Result<(), ActorError> {
        let mut subscription = self.cluster.subscribe();
        let me = ctx.myself();
        self.subscription = Some(ctx.system().runtime().spawn(async move {
            while subscription.recv().await.is_some() {
                let message = ProxyMsg::internal(ProxyInternalMsg::ClusterChanged);
                if me.try_tell(message).is_err() {
                    return;
                }
            }
        }));
        let event = self.routed(false, ctx);
        self.step(event, ctx);
        Ok(())
    }

    async fn handle(&mut self, msg: ProxyMsg, ctx: &mut Context<Self>) -> Result<(), ActorError> {
        match msg {
            ProxyMsg::Drained { nonce, messages } => {
                let remoting = Arc::clone(self.cluster.remoting());
                let mut items = Vec::with_capacity(messages.len());
                for held in messages {
                    match Payload::decode(&remoting, &self.me, &held.body, held.sender) {
                        Ok(payload) => items.push(payload),
                        Err(error) => {
                            tracing::warn!(singleton = %self.type_name, %error, "a message given back does not decode");
                            self.dead_letter(None, DeadLetterCause::Undecodable);
                        }
                    }
                }
                self.step(ProxyEvent::Drained { nonce, items }, ctx);
            }
            ProxyMsg::Internal(ProxyInternal(internal)) => match internal {
                ProxyInternalMsg::Send { message, sender } => {
                    match message.downcast::<M>() {
                        Ok(message) => self.step(
                            ProxyEvent::Submit(Payload {
                                message: *message,
                                sender,
                            }),
                            ctx,
                        ),
                        Err(_) => {
                            tracing::error!(singleton = %self.type_name, "proxy sent the wrong message type");
                        }
                    }
                    let mut state = self.fast.state.lock();
                    state.pending = state.pending.saturating_sub(1);
                }
                ProxyInternalMsg::ClusterChanged => {
                    let event = self.routed(false, ctx);
                    self.step(event, ctx);
                }
                ProxyInternalMsg::DrainedLocal { nonce, items } => {
                    match items.downcast::<Vec<Payload<M>>>() {
                        Ok(items) => self.step(
                            ProxyEvent::Drained {
                                nonce,
                                items: *items,
                            },
                            ctx,
                        ),
                        Err(_) => {
                            tracing::error!(singleton = %self.type_name, "drain answer of the wrong message type");
                        }
                    }
                }
                ProxyInternalMsg::DrainTimeout { nonce } => {
                    self.step(ProxyEvent::DrainTimedOut { nonce }, ctx);
                }
                ProxyInternalMsg::Reconfigure { role } => {
                    if let Some(role) = role {
                        self.role = role;
                    }
                    self.local_manager = None;
                    let event = self.routed(true, ctx);
                    self.step(event, ctx);
                }
            },
        }
        Ok(())
    }

    async fn post_stop(&mut self, ctx: &mut Context<Self>) {
        if let Some(task) = self.subscription.take() {
            task.abort();
        }
        self.step(ProxyEvent::Stopped, ctx);
    }
}
