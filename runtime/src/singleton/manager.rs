//! The singleton manager actor: the thin shell around [`super::manager_state`]. It feeds the
//! state machine cluster events, protocol messages, termination, lease results and timer ticks,
//! performs its actions, and holds, delivers or dead-letters messages for the singleton.
//!
//! # Supervision tree
//! ```text
//! /system/cluster/singleton
//! ├── manager-<typeName>     SingletonManager: one per singleton on every node that calls
//! │   │                      `start` (active) or only `proxy` (passive: acknowledges hand-overs
//! │   │                      at once, dead-letters what is routed to it)
//! │   └── <typeName>         the instance, only while this node hosts; its own Props decide its
//! │                          supervision; the manager death-watches it
//! └── proxy-<typeName>       SingletonProxy (see proxy.rs)
//! ```
//! The manager restarts on failure (the default strategy): the instance stops with it, the
//! restarted manager subscribes afresh, recomputes the host, re-acquires the lease and has no
//! latch — a restarted manager may host again.
//!
//! # Who sent it
//! Every protocol message is attributed to `ctx.origin()`, the node the transport verified,
//! never to a field of the payload. Messages without an origin came from this node.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::event::{DeadLetterCause, SingletonEvent};
use super::hold::HoldBuffer;
use super::manager_state::{self, Action, Event, ManagerConfig, ManagerState, Routing};
use super::payload::Payload;
use super::proxy::{DrainedMessage, ProxyInternalMsg, ProxyMsg};
use crate::Address;
use crate::actor::{Actor, ActorError};
use crate::actor_ref::ActorRef;
use crate::ask::ReplyTo;
use crate::cluster::{Cluster, ClusterNotification};
use crate::context::{Context, TimerHandle};
use crate::dead_letter::DeadLetter;
use crate::death_watch::Terminated;
use crate::lease::{FencingToken, Lease, LeaseError, LeaseLost, LeaseLostCallback};
use crate::path::ActorPath;
use crate::remoting::RemoteMessage;
use crate::system::SpawnError;

/// The manager's protocol. Every variant except the internal one crosses the network; who sent
/// it is the transport-verified `ctx.origin()`, which is why no variant names its sender.
///
/// Messages *for the singleton* are not wrapped in this type: a proxy sends them as they are to
/// the manager's path, and remoting hands them to the manager converted (see
/// [`crate::remoting::Remoting::register_into`]), so they cost one serialization, like any remote
/// tell, and arrive in the same ordered stream as the protocol messages.
#[derive(Debug, Serialize, Deserialize)]
pub enum ManagerMsg {
    /// The sending node is about to host: stop any instance here, then acknowledge.
    HandOverRequest {
        /// The round, echoed in the acknowledgment.
        nonce: u64,
    },
    /// This node holds no instance, none is stopping, and it holds no lease.
    HandOverAcknowledgment {
        /// The round acknowledged.
        nonce: u64,
    },
    /// The sending node's proxy re-routes: give back, in order, what is held from it.
    DrainRequest {
        /// Echoed in the reply.
        nonce: u64,
    },
    /// Messages only this node's runtime sends (and messages for the singleton, converted).
    #[serde(skip)]
    #[doc(hidden)]
    Internal(ManagerInternal),
}

impl RemoteMessage for ManagerMsg {
    const MANIFEST: &'static str = "troupe.singleton.Manager";
}

/// Opaque: messages the runtime sends a manager on its own node.
pub struct ManagerInternal(pub(crate) InternalMsg);

impl fmt::Debug for ManagerInternal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ManagerInternal")
    }
}

pub(crate) enum InternalMsg {
    /// A message for the singleton from this node's proxy.
    DeliverLocal {
        message: Box<dyn Any + Send>,
        sender: Option<ActorPath>,
    },
    /// A message for the singleton from another node's proxy (its sender and origin are the
    /// envelope's, set by remoting); `counted` when the direct slot counted it as pending.
    FromNetwork {
        message: Box<dyn Any + Send>,
        counted: bool,
    },
    /// A notification of this node's cluster subscription.
    Cluster(ClusterNotification),
    /// A timer fired.
    Tick,
    /// A lease operation resolved.
    Lease(LeaseResult),
    /// `start` or `stop` changed what this manager should run; `done` is told once it runs it.
    Reconfigure { done: Option<oneshot::Sender<()>> },
    /// Report the manager's state.
    Status { reply: ReplyTo<ManagerStatus> },
}

pub(crate) enum LeaseResult {
    Acquired(FencingToken),
    Denied,
    Failed(LeaseError),
    Lost(LeaseLost),
    Released(Result<(), LeaseError>),
}

impl ManagerMsg {
    pub(crate) fn internal(message: InternalMsg) -> Self {
        Self::Internal(ManagerInternal(message))
    }

    /// How remoting hands a message for the singleton to the manager.
    pub(crate) fn from_network<M: Send + 'static>(message: M, counted: bool) -> Self {
        Self::internal(InternalMsg::FromNetwork {
            message: Box::new(message),
            counted,
        })
    }
}

/// Where remoting delivers the singleton's messages from other nodes: straight into the
/// instance while it runs and no such message waits in the manager, otherwise to the manager
/// (which holds, delivers or dead-letters them in arrival order).
///
/// # Ordering
/// A message goes direct only when `pending` — messages handed to the manager and not yet
/// handled there — is zero, so it cannot overtake one of those. The manager publishes the
/// instance only after flushing what it held into it, and withdraws it under the same lock
/// before it sends the poison pill, so nothing sent direct lands behind the pill.
pub(crate) struct DirectSlot<M> {
    state: Mutex<DirectState<M>>,
}

struct DirectState<M> {
    instance: Option<ActorRef<M>>,
    pending: u64,
}

impl<M: Send + 'static> DirectSlot<M> {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(DirectState {
                instance: None,
                pending: 0,
            }),
        })
    }

    /// Deliver one message from another node.
    pub(crate) fn deliver(&self, manager: &ActorRef<ManagerMsg>, message: M, sender: &ActorPath) {
        let mut state = self.state.lock();
        if state.pending == 0
            && let Some(instance) = &state.instance
        {
            instance.tell_from(message, sender);
            return;
        }
        state.pending += 1;
        manager.tell_from(ManagerMsg::from_network(message, true), sender);
    }

    fn handled(&self) {
        let mut state = self.state.lock();
        state.pending = state.pending.saturating_sub(1);
    }

    fn publish(&self, instance: Option<ActorRef<M>>) {
        self.state.lock().instance = instance;
    }

    /// Withdraw the instance, then (still under the lock) run `stop`.
    fn withdraw_then(&self, stop: impl FnOnce()) {
        let mut state = self.state.lock();
        state.instance = None;
        stop();
    }
}

impl From<ClusterNotification> for ManagerMsg {
    fn from(notification: ClusterNotification) -> Self {
        Self::internal(InternalMsg::Cluster(notification))
    }
}

/// What a manager reports about itself (diagnostics, tests).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManagerStatus {
    /// Whether `start` is in effect on this node (false: only a proxy, or stopped).
    pub active: bool,
    /// The host this node's view elects.
    pub host: Option<Address>,
    /// Whether an instance runs here.
    pub hosting: bool,
    /// Whether this manager opted out of hosting (`restart_on_termination(false)`).
    pub latched_out: bool,
    /// Whether this manager holds the lease.
    pub holds_lease: bool,
    /// How many messages wait for an instance here.
    pub held_messages: usize,
    /// Since when the instance runs here (wall clock), while it does.
    pub hosting_since: Option<std::time::SystemTime>,
    /// The peers whose hand-over acknowledgment this manager waits for before it hosts
    /// (empty outside a hand-over round), address-ordered.
    pub awaiting_acknowledgments: Vec<Address>,
    /// Where the lease is: `None` when the singleton has no lease, else `idle`, `acquiring`,
    /// `held` or `releasing`.
    pub lease: Option<&'static str>,
}

/// Builds the instance under the manager.
pub(crate) type SpawnInstance<M> = Box<
    dyn Fn(&mut Context<SingletonManager<M>>, &str) -> Result<ActorRef<M>, SpawnError>
        + Send
        + Sync,
>;

/// What `start` asked this node to run.
pub(crate) struct ActiveSpec<M: RemoteMessage> {
    pub(crate) role: Option<String>,
    pub(crate) lease: Option<Arc<dyn Lease>>,
    pub(crate) acquire_retry_interval: std::time::Duration,
    pub(crate) hand_over_timeout: std::time::Duration,
    pub(crate) restart_on_termination: bool,
    pub(crate) spawn: SpawnInstance<M>,
}

/// Shared between the `ClusterSingleton` handle (which writes it) and the manager (which reads
/// it on start, restart and every `Reconfigure`).
pub(crate) struct ManagerSlot<M: RemoteMessage> {
    pub(crate) spec: Mutex<Option<Arc<ActiveSpec<M>>>>,
}

/// What the manager knows regardless of its mode.
struct Common {
    type_name: Arc<str>,
    cluster: Cluster,
    me: Address,
    /// `/system/cluster/singleton/manager-<typeName>`
    elements: String,
    /// `/system/cluster/singleton/proxy-<typeName>`
    proxy_elements: String,
}

pub(crate) struct SingletonManager<M: RemoteMessage> {
    common: Common,
    slot: Arc<ManagerSlot<M>>,
    direct: Arc<DirectSlot<M>>,
    mode: Mode<M>,
    subscription: Option<tokio::task::JoinHandle<()>>,
    timer: Option<(Instant, TimerHandle)>,
    no_manager_warned: bool,
    waiters: Vec<oneshot::Sender<()>>,
}

enum Mode<M: RemoteMessage> {
    Passive,
    Active(Box<Active<M>>),
}

struct Active<M: RemoteMessage> {
    spec: Arc<ActiveSpec<M>>,
    direct: Arc<DirectSlot<M>>,
    state: Option<ManagerState>,
    instance: Option<ActorRef<M>>,
    hold: HoldBuffer<Payload<M>>,
    /// The one-time warning about dead-lettered messages was logged (reset when an instance
    /// starts).
    warned: bool,
    /// `MessagesHeld` was published for the current wait.
    holding: bool,
    /// When the current instance was spawned.
    hosting_since: Option<std::time::SystemTime>,
}

impl<M: RemoteMessage> SingletonManager<M> {
    pub(crate) fn new(
        type_name: Arc<str>,
        cluster: Cluster,
        slot: Arc<ManagerSlot<M>>,
        direct: Arc<DirectSlot<M>>,
    ) -> Self {
        let me = cluster.self_address().clone();
        Self {
            common: Common {
                elements: super::manager_elements(&type_name),
                proxy_elements: super::proxy_elements(&type_name),
                type_name,
                cluster,
                me,
            },
            slot,
            direct,
            mode: Mode::Passive,
            subscription: None,
            timer: None,
            no_manager_warned: false,
            waiters: Vec::new(),
        }
    }

    /// Bring the mode in line with the slot.
    fn reconfigure(&mut self, ctx: &mut Context<Self>) {
        let wanted = self.slot.spec.lock().clone();
        match (&mut self.mode, wanted) {
            (Mode::Passive, None) => self.notify_waiters(),
            (Mode::Passive, Some(spec)) => {
                self.activate(spec, ctx);
                self.notify_waiters();
            }
            (Mode::Active(active), Some(spec)) if Arc::ptr_eq(&active.spec, &spec) => {
                self.notify_waiters();
            }
            (Mode::Active(_), _) => {
                // Step down first; `Deactivated` comes back here.
                self.apply(Event::Deactivate, ctx);
            }
        }
    }

    fn notify_waiters(&mut self) {
        for waiter in self.waiters.drain(..) {
            let _ = waiter.send(());
        }
    }

    fn activate(&mut self, spec: Arc<ActiveSpec<M>>, ctx: &mut Context<Self>) {
        let config = ManagerConfig {
            type_name: Arc::clone(&self.common.type_name),
            me: self.common.me.clone(),
            role: spec.role.clone(),
            uses_lease: spec.lease.is_some(),
            restart_on_termination: spec.restart_on_termination,
            hand_over_timeout: spec.hand_over_timeout,
            acquire_retry_interval: spec.acquire_retry_interval,
        };
        tracing::debug!(singleton = %self.common.type_name, role = ?config.role, lease = config.uses_lease, "singleton manager active");
        self.mode = Mode::Active(Box::new(Active {
            spec,
            direct: Arc::clone(&self.direct),
            state: Some(ManagerState::new(config, rand::random())),
            instance: None,
            hold: HoldBuffer::default(),
            warned: false,
            holding: false,
            hosting_since: None,
        }));
        let members = self.common.cluster.view().members;
        self.apply(
            Event::Cluster {
                event: None,
                members,
            },
            ctx,
        );
    }

    /// Step the state machine and perform its actions (and the follow-up events they cause).
    fn apply(&mut self, event: Event, ctx: &mut Context<Self>) {
        let mut next = Some(event);
        while let Some(event) = next.take() {
            let Mode::Active(active) = &mut self.mode else {
                return;
            };
            let state = active
                .state
                .take()
                .expect("the state is put back after each step");
            let (state, actions) = manager_state::step(state, event, Instant::now());
            active.state = Some(state);
            let mut deactivated = false;
            for action in actions {
                match action {
                    Action::Deactivated => deactivated = true,
                    action => {
                        if let Some(follow_up) = perform(&self.common, active, action, ctx) {
                            next = Some(follow_up);
                        }
                    }
                }
            }
            if deactivated {
                tracing::debug!(singleton = %self.common.type_name, "singleton manager stopped; passive");
                self.mode = Mode::Passive;
                self.direct.publish(None);
                self.cancel_timer();
                self.reconfigure(ctx);
                return;
            }
        }
        self.sync_direct();
        self.reschedule(ctx);
    }

    /// Offer the instance for direct delivery exactly while messages are delivered to it.
    fn sync_direct(&self) {
        let instance = match &self.mode {
            Mode::Active(active)
                if active.state.as_ref().map(ManagerState::routing) == Some(Routing::Deliver) =>
            {
                active.instance.clone()
            }
            _ => None,
        };
        self.direct.publish(instance);
    }

    fn cancel_timer(&mut self) {
        if let Some((_, timer)) = self.timer.take() {
            timer.cancel();
        }
    }

    /// Keep one timer, for the earliest thing due.
    fn reschedule(&mut self, ctx: &mut Context<Self>) {
        let Mode::Active(active) = &self.mode else {
            self.cancel_timer();
            return;
        };
        let state = active.state.as_ref().expect("state present");
        let due = [state.next_deadline(), active.hold.next_expiry()]
            .into_iter()
            .flatten()
            .min();
        match (due, &self.timer) {
            (Some(at), Some((scheduled, _))) if *scheduled == at => {}
            (Some(at), _) => {
                self.cancel_timer();
                let delay = at.saturating_duration_since(Instant::now());
                let handle = ctx.schedule_once(delay, ManagerMsg::internal(InternalMsg::Tick));
                self.timer = Some((at, handle));
            }
            (None, _) => self.cancel_timer(),
        }
    }

    fn on_tick(&mut self, ctx: &mut Context<Self>) {
        self.timer = None;
        if let Mode::Active(active) = &mut self.mode {
            let expired = active.hold.expire(Instant::now());
            dead_letter_batch(&self.common, active, expired, DeadLetterCause::HoldExpired);
        }
        self.apply(Event::Tick, ctx);
    }

    fn deliver(&mut self, payload: Payload<M>, origin: Option<Address>, ctx: &mut Context<Self>) {
        let Mode::Active(active) = &mut self.mode else {
            if !self.no_manager_warned {
                self.no_manager_warned = true;
                tracing::warn!(
                    singleton = %self.common.type_name,
                    "this node was routed a message as the singleton's host, but it never called start(..) (or stopped its manager): dead-lettering (warned once)"
                );
            }
            let sender = payload.sender.clone();
            dead_letter(
                &self.common,
                sender,
                DeadLetterCause::NoManager,
                std::any::type_name::<M>(),
            );
            publish(
                &self.common,
                SingletonEvent::MessagesDeadLettered {
                    type_name: Arc::clone(&self.common.type_name),
                    node: self.common.me.clone(),
                    count: 1,
                    reason: DeadLetterCause::NoManager,
                },
            );
            return;
        };
        let routing = active.state.as_ref().expect("state present").routing();
        match routing {
            Routing::Deliver => deliver_to_instance(&self.common, active, payload),
            Routing::DeadLetter => {
                dead_letter_batch(
                    &self.common,
                    active,
                    vec![payload],
                    DeadLetterCause::NotHosting,
                );
            }
            Routing::Hold => {
                let now = Instant::now();
                let expired = active.hold.expire(now);
                dead_letter_batch(&self.common, active, expired, DeadLetterCause::HoldExpired);
                match active.hold.push(payload, origin, now) {
                    Ok(()) => {
                        if !active.holding {
                            active.holding = true;
                            publish(
                                &self.common,
                                SingletonEvent::MessagesHeld {
                                    type_name: Arc::clone(&self.common.type_name),
                                    node: self.common.me.clone(),
                                },
                            );
                        }
                    }
                    Err(payload) => {
                        dead_letter_batch(
                            &self.common,
                            active,
                            vec![payload],
                            DeadLetterCause::HoldFull,
                        );
                    }
                }
                self.reschedule(ctx);
            }
        }
    }

    fn on_drain_request(&mut self, nonce: u64, origin: Option<Address>, ctx: &mut Context<Self>) {
        let taken = match &mut self.mode {
            Mode::Active(active) => active.hold.take_from(origin.as_ref()),
            Mode::Passive => Vec::new(),
        };
        match origin {
            None => {
                match ctx
                    .system()
                    .resolve::<ProxyMsg>(&self.common.proxy_elements)
                {
                    Ok(proxy) => proxy.tell(ProxyMsg::internal(ProxyInternalMsg::DrainedLocal {
                        nonce,
                        items: Box::new(taken),
                    })),
                    Err(error) => {
                        tracing::debug!(singleton = %self.common.type_name, %error, "drain reply to the local proxy not delivered");
                        for payload in taken {
                            dead_letter(
                                &self.common,
                                payload.sender.clone(),
                                DeadLetterCause::NotHosting,
                                std::any::type_name::<M>(),
                            );
                        }
                    }
                }
            }
            Some(origin) => {
                let remoting = self.common.cluster.remoting();
                let messages = taken
                    .into_iter()
                    .filter_map(|payload| match payload.encode(remoting) {
                        Ok((body, sender)) => Some(DrainedMessage { body, sender }),
                        Err((sender, error)) => {
                            tracing::warn!(singleton = %self.common.type_name, %error, "held message does not serialize");
                            dead_letter(&self.common, sender, DeadLetterCause::Undecodable, std::any::type_name::<M>());
                            None
                        }
                    })
                    .collect();
                remoting
                    .remote_ref::<ProxyMsg>(&origin, &self.common.proxy_elements)
                    .tell(ProxyMsg::Drained { nonce, messages });
            }
        }
        self.reschedule(ctx);
    }

    fn status(&self) -> ManagerStatus {
        match &self.mode {
            Mode::Passive => ManagerStatus {
                active: false,
                host: None,
                hosting: false,
                latched_out: false,
                holds_lease: false,
                held_messages: 0,
                hosting_since: None,
                awaiting_acknowledgments: Vec::new(),
                lease: None,
            },
            Mode::Active(active) => {
                let state = active.state.as_ref().expect("state present");
                ManagerStatus {
                    active: true,
                    host: state.host().cloned(),
                    hosting: state.is_hosting(),
                    latched_out: state.is_latched_out(),
                    holds_lease: state.holds_lease(),
                    held_messages: active.hold.len(),
                    hosting_since: if state.is_hosting() {
                        active.hosting_since
                    } else {
                        None
                    },
                    awaiting_acknowledgments: state.awaiting_acknowledgments(),
                    lease: active.spec.lease.as_ref().map(|_| state.lease_phase()),
                }
            }
        }
    }
}

/// Perform one action; returns the event it caused, if any.
fn perform<M: RemoteMessage>(
    common: &Common,
    active: &mut Active<M>,
    action: Action,
    ctx: &mut Context<SingletonManager<M>>,
) -> Option<Event> {
    match action {
        Action::SendHandOverRequest { to, nonce } => {
            for peer in to {
                manager_ref(common, &peer).tell(ManagerMsg::HandOverRequest { nonce });
            }
        }
        Action::SendHandOverAcknowledgment { to, nonce } => {
            manager_ref(common, &to).tell(ManagerMsg::HandOverAcknowledgment { nonce });
        }
        Action::SpawnInstance => match (active.spec.spawn)(ctx, &common.type_name) {
            Ok(instance) => {
                ctx.watch(&instance);
                active.instance = Some(instance);
                active.hosting_since = Some(std::time::SystemTime::now());
                active.warned = false;
                active.holding = false;
                let held = active.hold.drain_all();
                let count = held.len();
                for payload in held {
                    deliver_to_instance(common, active, payload);
                }
                if count > 0 {
                    publish(
                        common,
                        SingletonEvent::MessagesFlushed {
                            type_name: Arc::clone(&common.type_name),
                            node: common.me.clone(),
                            count,
                        },
                    );
                }
            }
            Err(SpawnError::ParentStopped { .. }) => {}
            Err(error) => {
                tracing::debug!(singleton = %common.type_name, %error, "instance spawn refused; retrying");
                return Some(Event::SpawnFailed);
            }
        },
        Action::StopInstance => {
            if let Some(instance) = &active.instance {
                active.direct.withdraw_then(|| instance.poison_pill());
            }
        }
        Action::AcquireLease => {
            if let Some(lease) = active.spec.lease.clone() {
                acquire(common, lease, ctx.myself());
            }
        }
        Action::ReleaseLease => {
            if let Some(lease) = active.spec.lease.clone() {
                let me = ctx.myself();
                let singleton = Arc::clone(&common.type_name);
                common.cluster.system().runtime().spawn(async move {
                    let result = lease.release().await;
                    tracing::debug!(%singleton, ?result, "lease release resolved");
                    let _ = me.try_tell(ManagerMsg::internal(InternalMsg::Lease(
                        LeaseResult::Released(result),
                    )));
                });
            }
        }
        Action::DeadLetterHeld => {
            let held = active.hold.drain_all();
            dead_letter_batch(common, active, held, DeadLetterCause::NotHosting);
        }
        Action::Deactivated => {}
        Action::Publish(event) => publish(common, event),
    }
    None
}

fn acquire(common: &Common, lease: Arc<dyn Lease>, me: ActorRef<ManagerMsg>) {
    let lost_to = me.clone();
    let on_lost: LeaseLostCallback = Box::new(move |lost| {
        let _ = lost_to.try_tell(ManagerMsg::internal(InternalMsg::Lease(LeaseResult::Lost(
            lost,
        ))));
    });
    let singleton = Arc::clone(&common.type_name);
    common.cluster.system().runtime().spawn(async move {
        let result = lease.acquire(on_lost).await;
        tracing::debug!(%singleton, lease = lease.name(), ?result, "lease acquire resolved");
        let result = match result {
            Ok(Some(token)) => LeaseResult::Acquired(token),
            Ok(None) => LeaseResult::Denied,
            Err(error) => LeaseResult::Failed(error),
        };
        let _ = me.try_tell(ManagerMsg::internal(InternalMsg::Lease(result)));
    });
}

fn manager_ref(common: &Common, node: &Address) -> ActorRef<ManagerMsg> {
    common
        .cluster
        .remoting()
        .remote_ref::<ManagerMsg>(node, &common.elements)
}

fn publish(common: &Common, event: SingletonEvent) {
    match &event {
        SingletonEvent::HandOverTimedOut { silent_peers, .. } => {
            let silent: Vec<String> = silent_peers.iter().map(ToString::to_string).collect();
            tracing::warn!(
                singleton = %common.type_name,
                silent_peers = ?silent,
                "hand-over timed out: hosting anyway without proof that the silent peers stepped down"
            );
        }
        SingletonEvent::InstanceStopped { reason, .. } => {
            tracing::info!(singleton = %common.type_name, %reason, "singleton instance stopped");
        }
        other => {
            tracing::debug!(singleton = %common.type_name, event = other.kind(), "singleton event");
        }
    }
    common.cluster.system().event_stream().publish(event);
}

fn deliver_to_instance<M: RemoteMessage>(
    common: &Common,
    active: &mut Active<M>,
    payload: Payload<M>,
) {
    let Payload { message, sender } = payload;
    match (&active.instance, sender) {
        // Exactly the original sender (none stays none, not this manager).
        (Some(instance), sender) => instance.tell_quietly(message, sender),
        (None, sender) => dead_letter(
            common,
            sender,
            DeadLetterCause::NotHosting,
            std::any::type_name::<M>(),
        ),
    }
}

/// Dead-letter `payloads` (with the one-time warning naming the singleton) and publish one event.
fn dead_letter_batch<M: RemoteMessage>(
    common: &Common,
    active: &mut Active<M>,
    payloads: Vec<Payload<M>>,
    cause: DeadLetterCause,
) {
    if payloads.is_empty() {
        return;
    }
    if !active.warned {
        active.warned = true;
        tracing::warn!(
            singleton = %common.type_name,
            %cause,
            "messages for the singleton go to dead letters (warned once until an instance starts)"
        );
    }
    let count = payloads.len();
    for payload in payloads {
        dead_letter(
            common,
            payload.sender.clone(),
            cause,
            std::any::type_name::<M>(),
        );
    }
    if active.hold.is_empty() {
        active.holding = false;
    }
    publish(
        common,
        SingletonEvent::MessagesDeadLettered {
            type_name: Arc::clone(&common.type_name),
            node: common.me.clone(),
            count,
            reason: cause,
        },
    );
}

fn dead_letter(
    common: &Common,
    sender: Option<ActorPath>,
    cause: DeadLetterCause,
    message_type: &'static str,
) {
    let system = common.cluster.system();
    let recipient = ActorPath::remote(
        &common.me,
        &format!("{}/{}", common.elements, common.type_name),
    );
    system.dead_letters().publish(DeadLetter {
        recipient,
        sender,
        message_type,
        reason: cause.into(),
    });
}

impl<M: RemoteMessage> Actor for SingletonManager<M> {
    type Msg = ManagerMsg;

    async fn pre_start(&mut self, ctx: &mut Context<Self>) -> Result<(), ActorError> {
        let mut subscription = self.common.cluster.subscribe();
        let me = ctx.myself();
        self.subscription = Some(ctx.system().runtime().spawn(async move {
            while let Some(notification) = subscription.recv().await {
                if me.try_tell(ManagerMsg::from(notification)).is_err() {
                    return;
                }
            }
        }));
        self.reconfigure(ctx);
        Ok(())
    }

    async fn handle(&mut self, msg: ManagerMsg, ctx: &mut Context<Self>) -> Result<(), ActorError> {
        let origin = ctx.origin().cloned();
        match msg {
            ManagerMsg::HandOverRequest { nonce } => match &self.mode {
                Mode::Passive => {
                    // A node that runs no manager for this singleton surely does not host it.
                    if let Some(from) = origin {
                        manager_ref(&self.common, &from)
                            .tell(ManagerMsg::HandOverAcknowledgment { nonce });
                    }
                }
                Mode::Active(_) => self.apply(
                    Event::HandOverRequest {
                        from: origin,
                        nonce,
                    },
                    ctx,
                ),
            },
            ManagerMsg::HandOverAcknowledgment { nonce } => {
                self.apply(
                    Event::HandOverAcknowledgment {
                        from: origin,
                        nonce,
                    },
                    ctx,
                );
            }
            ManagerMsg::DrainRequest { nonce } => self.on_drain_request(nonce, origin, ctx),
            ManagerMsg::Internal(ManagerInternal(internal)) => match internal {
                InternalMsg::FromNetwork { message, counted } => {
                    match message.downcast::<M>() {
                        Ok(message) => {
                            let sender = ctx.sender().cloned();
                            self.deliver(
                                Payload {
                                    message: *message,
                                    sender,
                                },
                                origin,
                                ctx,
                            );
                        }
                        Err(_) => {
                            tracing::error!(singleton = %self.common.type_name, "network delivery of the wrong message type");
                        }
                    }
                    if counted {
                        self.direct.handled();
                        self.sync_direct();
                    }
                }
                InternalMsg::DeliverLocal { message, sender } => match message.downcast::<M>() {
                    Ok(message) => self.deliver(
                        Payload {
                            message: *message,
                            sender,
                        },
                        None,
                        ctx,
                    ),
                    Err(_) => {
                        tracing::error!(singleton = %self.common.type_name, "local delivery of the wrong message type")
                    }
                },
                InternalMsg::Cluster(notification) => {
                    if let Mode::Active(_) = self.mode {
                        let event = match notification {
                            ClusterNotification::CurrentState(_) => None,
                            ClusterNotification::Event(event) => Some(event),
                        };
                        let members = self.common.cluster.view().members;
                        self.apply(Event::Cluster { event, members }, ctx);
                    }
                }
                InternalMsg::Tick => self.on_tick(ctx),
                InternalMsg::Lease(result) => {
                    let event = match result {
                        LeaseResult::Acquired(token) => Event::LeaseAcquired(token),
                        LeaseResult::Denied => Event::LeaseDenied,
                        LeaseResult::Failed(error) => {
                            tracing::debug!(singleton = %self.common.type_name, %error, "lease acquire failed");
                            Event::LeaseFailed
                        }
                        LeaseResult::Lost(lost) => {
                            tracing::warn!(singleton = %self.common.type_name, lease = %lost.lease, token = %lost.token, reason = %lost.reason, "lease lost: stopping the instance before re-acquiring");
                            Event::LeaseLost(lost.token)
                        }
                        LeaseResult::Released(result) => {
                            if let Err(error) = result {
                                tracing::warn!(singleton = %self.common.type_name, %error, "lease release failed; the grant will expire");
                            }
                            Event::LeaseReleased
                        }
                    };
                    self.apply(event, ctx);
                }
                InternalMsg::Reconfigure { done } => {
                    if let Some(done) = done {
                        self.waiters.push(done);
                    }
                    self.reconfigure(ctx);
                }
                InternalMsg::Status { reply } => reply.send(self.status()),
            },
        }
        Ok(())
    }

    async fn on_terminated(
        &mut self,
        terminated: Terminated,
        ctx: &mut Context<Self>,
    ) -> Result<(), ActorError> {
        let ours = match &mut self.mode {
            Mode::Active(active) => {
                if active
                    .instance
                    .as_ref()
                    .is_some_and(|i| i.id() == terminated.id)
                {
                    active.instance = None;
                    true
                } else {
                    false
                }
            }
            Mode::Passive => false,
        };
        if ours {
            self.apply(Event::InstanceTerminated, ctx);
        }
        Ok(())
    }

    async fn post_stop(&mut self, _ctx: &mut Context<Self>) {
        self.direct.publish(None);
        if let Some(task) = self.subscription.take() {
            task.abort();
        }
        self.cancel_timer();
        if let Mode::Active(active) = &mut self.mode {
            let held = active.hold.drain_all();
            dead_letter_batch(&self.common, active, held, DeadLetterCause::NotHosting);
            // The instance has already stopped with us (children stop first): give the lease up
            // so that another node can host.
            if let Some(lease) = active.spec.lease.clone()
                && lease.holds()
                && tokio::time::timeout(std::time::Duration::from_secs(5), lease.release())
                    .await
                    .is_err()
            {
                tracing::warn!(singleton = %self.common.type_name, "lease release timed out while the manager stopped");
            }
        }
        self.mode = Mode::Passive;
        self.notify_waiters();
    }
}
