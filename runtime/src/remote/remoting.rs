//! Remote actor messaging over a [`Transport`]: remote refs with the local API (tell, ask,
//! death watch, stop), a registry of message types by manifest, and the inbound dispatcher.
//!
//! # Channels
//! Every frame payload starts with a one-byte channel tag:
//!
//! | tag | carries |
//! |---|---|
//! | `0x01` | membership protocol (`cluster::wire`) |
//! | `0x02` | an actor message: a [`WireEnvelope`] |
//! | `0x03` | an ask reply: `(ask id, body)` |
//! | `0x04` | a remote system message: watch, unwatch, stop, poison pill, death notification |
//!
//! # Self-routing
//! A remote ref whose node is this node delivers through the same path as any other: the
//! message is encoded, handed to this node's inbound dispatcher (the transport's loopback) and
//! decoded there. A router therefore treats its own node like every other.
//!
//! # When delivery fails
//! An unknown manifest, an undecodable body, or a recipient path with no actor becomes a
//! [`crate::DeadLetter`] on the receiving node with that reason — never a panic. A frame that
//! cannot be queued on the transport becomes a dead letter on the sending node.

use std::any::TypeId;
use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use bytes::Bytes;
use parking_lot::{Mutex, RwLock};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use super::address::{Address, UniqueAddress};
use super::envelope::{RawBytes, WireEnvelope, WireEnvelopeRef};
use super::transport::{InboundFrame, Transport};
use crate::actor_ref::{ActorRef, AnyActorRef};
use crate::cell::{ActorId, AnyCell, Cell, Children, SystemMsg, Termination};
use crate::dead_letter::{DeadLetter, DeadLetterReason};
use crate::death_watch::Terminated;
use crate::path::ActorPath;
use crate::system::{ActorSystem, SystemShared};

/// A message type that can cross the network: serde plus a stable manifest name that both
/// nodes register. Renaming the Rust type does not change the wire; changing the manifest does.
pub trait RemoteMessage: Serialize + DeserializeOwned + Send + 'static {
    /// The stable name of this message type on the wire, such as `"app.JobCommand"`.
    const MANIFEST: &'static str;
}

/// The channel tag of actor messages.
pub const ACTOR_CHANNEL: u8 = 0x02;
/// The channel tag of ask replies.
pub const ASK_REPLY_CHANNEL: u8 = 0x03;
/// The channel tag of remote system messages.
pub const SYSTEM_CHANNEL: u8 = 0x04;

/// Why a remote ref could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RemoteRefError {
    /// The string is not a full remote path.
    #[error(
        "{0:?} is not a remote actor path: expected troupe://<system>@<host>:<port>/user/<name>/..."
    )]
    Malformed(String),
}

#[derive(Debug, Serialize, Deserialize)]
enum RemoteSystemMsg {
    Watch { path: String },
    Unwatch { path: String },
    Stop { path: String },
    PoisonPill { path: String },
    Terminated { path: String },
}

type Deliver = Arc<dyn Fn(&Remoting, &UniqueAddress, WireEnvelope) + Send + Sync>;

/// An ask from this node whose reply will come from another node.
pub(crate) trait PendingReply: Send {
    /// Decode the reply and hand it to the asker; false if the asker is gone.
    fn complete(self: Box<Self>, body: &[u8]) -> bool;
    /// Whether the asker gave up (timed out or dropped the ask).
    fn is_abandoned(&self) -> bool;
}

type CompleteAsk = Box<dyn PendingReply>;
type WatchingCells = Vec<Weak<dyn AnyCell>>;
type SendRemote<M> = fn(&Remoting, &Address, &ActorPath, M, Option<&ActorPath>) -> Result<(), M>;

/// A local recipient of remote `M`s: an actor taking `M`, or one taking another type that `M`
/// converts into (see [`Remoting::register_into`]).
enum Target<M> {
    Direct(ActorRef<M>),
    Converted {
        target: AnyActorRef,
        deliver: ConvertAndTell<M>,
    },
}

/// Delivers a remote `M`, with its sender, to the actor it was resolved for (see
/// [`Remoting::register_into`]).
pub(crate) type ConvertAndTell<M> = Arc<dyn Fn(M, &ActorPath) + Send + Sync>;

impl<M> Clone for Target<M> {
    fn clone(&self) -> Self {
        match self {
            Self::Direct(target) => Self::Direct(target.clone()),
            Self::Converted { target, deliver } => Self::Converted {
                target: target.clone(),
                deliver: Arc::clone(deliver),
            },
        }
    }
}

impl<M: Send + 'static> Target<M> {
    fn is_terminated(&self) -> bool {
        match self {
            Self::Direct(target) => target.is_terminated(),
            Self::Converted { target, .. } => target.is_terminated(),
        }
    }

    fn tell_from(&self, message: M, sender: &ActorPath) {
        match self {
            Self::Direct(target) => target.tell_from(message, sender),
            Self::Converted { deliver, .. } => deliver(message, sender),
        }
    }
}

/// Finds the conversion of `M` for an actor of some other message type.
type Convert<M> = Arc<dyn Fn(&AnyActorRef) -> Option<Target<M>> + Send + Sync>;

/// Sweep abandoned asks once this many are pending.
const PENDING_ASK_SWEEP: usize = 1_024;

/// Counters of what remoting could not deliver.
#[derive(Debug, Default)]
pub struct RemotingStats {
    /// Inbound frames on no known channel, or that did not decode.
    pub malformed_frames: AtomicU64,
    /// Inbound messages whose manifest nobody registered.
    pub unknown_manifests: AtomicU64,
    /// Inbound messages for a path with no actor.
    pub unknown_recipients: AtomicU64,
    /// Outbound frames the transport refused.
    pub send_failures: AtomicU64,
}

thread_local! {
    static CONTEXT: RefCell<Option<Arc<Remoting>>> = const { RefCell::new(None) };
}

/// Run `f` with `remoting` as the serialization context, so refs and reply channels inside
/// messages can be encoded and decoded.
pub(crate) fn with_context<R>(remoting: &Arc<Remoting>, f: impl FnOnce() -> R) -> R {
    let previous = CONTEXT.with(|c| c.replace(Some(Arc::clone(remoting))));
    let result = f();
    CONTEXT.with(|c| *c.borrow_mut() = previous);
    result
}

pub(crate) fn current_context() -> Option<Arc<Remoting>> {
    CONTEXT.with(|c| c.borrow().clone())
}

/// One node's remoting: registry, dispatcher, pending asks and remote watches.
pub struct Remoting {
    system: Weak<SystemShared>,
    this: Weak<Remoting>,
    local: UniqueAddress,
    transport: Arc<dyn Transport>,
    registry: RwLock<HashMap<&'static str, Deliver>>,
    registered_types: RwLock<HashMap<TypeId, &'static str>>,
    cluster_frames: Mutex<Option<mpsc::UnboundedSender<InboundFrame>>>,
    next_ask: AtomicU64,
    pending_asks: Mutex<HashMap<u64, CompleteAsk>>,
    /// Remote actors watched from here: (node, path) → the remote ref cells standing for them.
    watched: Mutex<HashMap<(Address, String), WatchingCells>>,
    /// Local recipients already resolved, by message type and path (an entry whose actor has
    /// terminated is resolved again).
    resolved: RwLock<HashMap<(TypeId, String), Arc<dyn std::any::Any + Send + Sync>>>,
    /// Per remote message type `M`, the conversions into message types of local actors that do
    /// not take `M` itself: a `Vec<Convert<M>>` (see [`Remoting::register_into`]).
    conversions: RwLock<HashMap<TypeId, Arc<dyn std::any::Any + Send + Sync>>>,
    /// The root path of each peer, the origin of its messages that name no sender.
    origins: RwLock<HashMap<Address, ActorPath>>,
    /// One proxy per watching node, registered as the watcher of local actors.
    watcher_proxies: Mutex<HashMap<UniqueAddress, Arc<WatcherProxy>>>,
    stats: RemotingStats,
}

impl fmt::Debug for Remoting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Remoting")
            .field("local", &self.local)
            .finish()
    }
}

impl Remoting {
    /// Start remoting for `system` over `transport`; `inbound` is the transport's inbound
    /// channel. Returns the existing instance if the system already has one.
    pub fn start(
        system: &ActorSystem,
        transport: Arc<dyn Transport>,
        inbound: mpsc::Receiver<InboundFrame>,
    ) -> Arc<Self> {
        let remoting = Arc::new_cyclic(|this| Self {
            system: Arc::downgrade(&system.shared),
            this: this.clone(),
            local: transport.local().clone(),
            transport,
            registry: RwLock::new(HashMap::new()),
            registered_types: RwLock::new(HashMap::new()),
            cluster_frames: Mutex::new(None),
            next_ask: AtomicU64::new(1),
            pending_asks: Mutex::new(HashMap::new()),
            watched: Mutex::new(HashMap::new()),
            resolved: RwLock::new(HashMap::new()),
            conversions: RwLock::new(HashMap::new()),
            origins: RwLock::new(HashMap::new()),
            watcher_proxies: Mutex::new(HashMap::new()),
            stats: RemotingStats::default(),
        });
        let remoting = system.shared.attach_remoting(remoting);
        let pump = Arc::downgrade(&remoting);
        system.runtime().spawn(async move {
            let mut inbound = inbound;
            while let Some(frame) = inbound.recv().await {
                let Some(remoting) = pump.upgrade() else {
                    return;
                };
                remoting.dispatch(frame);
            }
        });
        remoting
    }

    /// This node's identity.
    #[must_use]
    pub fn local(&self) -> &UniqueAddress {
        &self.local
    }

    /// The transport.
    #[must_use]
    pub fn transport(&self) -> &Arc<dyn Transport> {
        &self.transport
    }

    /// What could not be delivered, counted.
    #[must_use]
    pub fn stats(&self) -> &RemotingStats {
        &self.stats
    }

    fn arc(&self) -> Arc<Remoting> {
        self.this.upgrade().expect("remoting is alive while used")
    }

    fn system(&self) -> Option<ActorSystem> {
        self.system.upgrade().map(|shared| ActorSystem { shared })
    }

    /// Route membership frames to the cluster daemon.
    pub(crate) fn set_cluster_handler(&self, frames: mpsc::UnboundedSender<InboundFrame>) {
        *self.cluster_frames.lock() = Some(frames);
    }

    /// Accept messages of type `M` from other nodes, delivered to the local actor at the path
    /// they name. Both sides register the same types.
    pub fn register<M: RemoteMessage>(&self) {
        let deliver: Deliver = Arc::new(
            |remoting: &Remoting, from: &UniqueAddress, envelope: WireEnvelope| {
                remoting.deliver_local::<M>(from, envelope);
            },
        );
        self.registry.write().insert(M::MANIFEST, deliver);
        self.registered_types
            .write()
            .insert(TypeId::of::<M>(), M::MANIFEST);
    }

    /// Like [`Remoting::register`], and also deliver `M` to local actors that take `N`: when a
    /// recipient path resolves to such an actor, `bind` is called once with it and returns how
    /// to deliver each `M` (with its sender, so `ctx.origin()` is kept) — typically converted
    /// into an `N`. For an actor that receives several message types from other nodes (the
    /// singleton manager).
    pub fn register_into<M, N, B>(&self, bind: B)
    where
        M: RemoteMessage,
        N: Send + 'static,
        B: Fn(ActorRef<N>) -> ConvertAndTell<M> + Send + Sync + 'static,
    {
        self.register::<M>();
        let into: Convert<M> = Arc::new(move |target: &AnyActorRef| {
            let typed = target.downcast::<N>()?;
            Some(Target::Converted {
                target: target.clone(),
                deliver: bind(typed),
            })
        });
        let mut conversions = self.conversions.write();
        let mut all: Vec<Convert<M>> = conversions
            .get(&TypeId::of::<M>())
            .and_then(|existing| existing.downcast_ref::<Vec<Convert<M>>>())
            .cloned()
            .unwrap_or_default();
        all.push(into);
        conversions.insert(TypeId::of::<M>(), Arc::new(all));
    }

    /// Whether `M` has been registered.
    #[must_use]
    pub fn is_registered<M: RemoteMessage>(&self) -> bool {
        self.registered_types
            .read()
            .contains_key(&TypeId::of::<M>())
    }

    /// A ref to the actor at a full path such as `troupe://app@10.0.0.1:2552/user/worker`.
    /// The path may name this node: delivery then takes the loopback path.
    pub fn actor_ref<M: RemoteMessage>(&self, path: &str) -> Result<ActorRef<M>, RemoteRefError> {
        let address = crate::path::parse_address(path)
            .ok_or_else(|| RemoteRefError::Malformed(path.to_owned()))?;
        let (_, elements) =
            crate::path::parse(path).ok_or_else(|| RemoteRefError::Malformed(path.to_owned()))?;
        let elements: String = elements.iter().map(|e| format!("/{e}")).collect();
        Ok(self.remote_ref::<M>(&address, &elements))
    }

    /// A ref to the actor at `elements` (such as `/user/worker`) on the node at `address`.
    pub fn remote_ref<M: RemoteMessage>(&self, address: &Address, elements: &str) -> ActorRef<M> {
        let system = self
            .system
            .upgrade()
            .expect("remoting outlives its system only briefly");
        let path = ActorPath::remote(address, elements);
        let cell = Cell::<M>::new_remote(
            path,
            system,
            RemoteTarget::<M>::new(self.arc(), address.clone()),
        );
        ActorRef { cell }
    }

    fn frame(channel: u8, body: &[u8]) -> Bytes {
        let mut out = Vec::with_capacity(1 + body.len());
        out.push(channel);
        out.extend_from_slice(body);
        Bytes::from(out)
    }

    /// Send a frame, through the loopback when it is for this node.
    fn send_frame(&self, to: &Address, payload: Bytes) -> bool {
        if *to == self.local.address {
            self.dispatch(InboundFrame {
                from: self.local.clone(),
                payload,
            });
            return true;
        }
        match self.transport.send(to, payload) {
            Ok(()) => true,
            Err(error) => {
                self.stats.send_failures.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(peer = %to, %error, "remote frame not sent");
                false
            }
        }
    }

    /// Handle one inbound frame from a verified peer (or the loopback).
    pub fn dispatch(&self, frame: InboundFrame) {
        let Some((&channel, body)) = frame.payload.split_first() else {
            self.stats.malformed_frames.fetch_add(1, Ordering::Relaxed);
            return;
        };
        match channel {
            crate::cluster::CLUSTER_CHANNEL => {
                if let Some(frames) = self.cluster_frames.lock().as_ref() {
                    let _ = frames.send(frame);
                }
            }
            ACTOR_CHANNEL => match WireEnvelope::decode(body) {
                Ok(envelope) => self.deliver(&frame.from, envelope),
                Err(error) => {
                    self.stats.malformed_frames.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(peer = %frame.from, %error, "dropped malformed actor envelope");
                }
            },
            ASK_REPLY_CHANNEL => match postcard::from_bytes::<(u64, Vec<u8>)>(body) {
                Ok((id, reply)) => self.complete_ask(id, &reply),
                Err(error) => {
                    self.stats.malformed_frames.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(peer = %frame.from, %error, "dropped malformed ask reply");
                }
            },
            SYSTEM_CHANNEL => match postcard::from_bytes::<RemoteSystemMsg>(body) {
                Ok(message) => self.on_system_message(&frame.from, message),
                Err(error) => {
                    self.stats.malformed_frames.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(peer = %frame.from, %error, "dropped malformed remote system message");
                }
            },
            other => {
                self.stats.malformed_frames.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(peer = %frame.from, channel = other, "dropped frame on unknown channel");
            }
        }
    }

    fn dead_letter(
        &self,
        recipient: &str,
        sender: Option<&str>,
        message_type: &'static str,
        reason: DeadLetterReason,
    ) {
        let Some(system) = self.system() else { return };
        let local_path = |path: &str| {
            let (_, elements) = crate::path::parse(path).unwrap_or((None, Vec::new()));
            elements
                .iter()
                .fold(system.shared.root.clone(), |p, e| p.child(e))
        };
        let recipient = local_path(recipient).with_address(&self.local.address);
        let sender = sender.map(|s| match crate::path::parse_address(s) {
            Some(address) => local_path(s).with_address(&address),
            None => local_path(s),
        });
        system.dead_letters().publish(DeadLetter {
            recipient,
            sender,
            message_type,
            reason,
        });
    }

    fn deliver(&self, from: &UniqueAddress, envelope: WireEnvelope) {
        let deliver = self
            .registry
            .read()
            .get(envelope.manifest.as_str())
            .cloned();
        match deliver {
            Some(deliver) => deliver(self, from, envelope),
            None => {
                self.stats.unknown_manifests.fetch_add(1, Ordering::Relaxed);
                let reason =
                    DeadLetterReason::Other(format!("unknown manifest {:?}", envelope.manifest));
                self.dead_letter(
                    &envelope.recipient,
                    envelope.sender.as_deref(),
                    "unknown",
                    reason,
                );
            }
        }
    }

    /// Decode and deliver to the local recipient. The sender path's node is always the one the
    /// transport verified (`from`), whatever the envelope claims: only the path below the node
    /// comes from the payload.
    fn deliver_local<M: RemoteMessage>(&self, from: &UniqueAddress, envelope: WireEnvelope) {
        let Some(system) = self.system() else { return };
        let target = match self.resolve_cached::<M>(&system, &envelope.recipient) {
            Ok(target) => target,
            Err(_) => {
                self.stats
                    .unknown_recipients
                    .fetch_add(1, Ordering::Relaxed);
                self.dead_letter(
                    &envelope.recipient,
                    envelope.sender.as_deref(),
                    std::any::type_name::<M>(),
                    DeadLetterReason::UnknownRecipient,
                );
                return;
            }
        };
        let remoting = self.arc();
        match with_context(&remoting, || postcard::from_bytes::<M>(&envelope.body)) {
            Ok(message) => {
                let elements = envelope
                    .sender
                    .as_deref()
                    .and_then(crate::path::parse)
                    .filter(|(_, elements)| !elements.is_empty())
                    .map(|(_, elements)| {
                        elements.iter().map(|e| format!("/{e}")).collect::<String>()
                    });
                let origin = match elements {
                    Some(elements) => ActorPath::remote(&from.address, &elements),
                    None => self.origin_root(&from.address),
                };
                target.tell_from(message, &origin);
            }
            Err(error) => {
                self.stats.malformed_frames.fetch_add(1, Ordering::Relaxed);
                self.dead_letter(
                    &envelope.recipient,
                    envelope.sender.as_deref(),
                    std::any::type_name::<M>(),
                    DeadLetterReason::Other(format!("undecodable body: {error}")),
                );
            }
        }
    }

    fn resolve_cached<M: RemoteMessage>(
        &self,
        system: &ActorSystem,
        path: &str,
    ) -> Result<Target<M>, crate::system::ResolveError> {
        let key = (TypeId::of::<M>(), path.to_owned());
        if let Some(cached) = self.resolved.read().get(&key)
            && let Some(target) = cached.downcast_ref::<Target<M>>()
            && !target.is_terminated()
        {
            return Ok(target.clone());
        }
        let target = match system.resolve::<M>(path) {
            Ok(target) => Target::Direct(target),
            Err(error @ crate::system::ResolveError::WrongMessageType { .. }) => {
                self.converted::<M>(system, path).ok_or(error)?
            }
            Err(error) => return Err(error),
        };
        let mut resolved = self.resolved.write();
        resolved.retain(|_, cached| {
            cached
                .downcast_ref::<Target<M>>()
                .is_none_or(|r| !r.is_terminated())
        });
        resolved.insert(key, Arc::new(target.clone()));
        Ok(target)
    }

    /// The actor at `path` through a conversion registered for `M`, if one fits its type.
    fn converted<M: RemoteMessage>(&self, system: &ActorSystem, path: &str) -> Option<Target<M>> {
        let conversions = self.conversions.read().get(&TypeId::of::<M>())?.clone();
        let conversions = conversions.downcast_ref::<Vec<Convert<M>>>()?;
        let target = system.resolve_any(path).ok()?;
        conversions.iter().find_map(|convert| convert(&target))
    }

    fn origin_root(&self, address: &Address) -> ActorPath {
        if let Some(path) = self.origins.read().get(address) {
            return path.clone();
        }
        let path = ActorPath::remote(address, "");
        self.origins.write().insert(address.clone(), path.clone());
        path
    }

    /// Send an actor message to `path` on `to`. Gives the message back if it cannot be queued.
    pub(crate) fn send_message<M: RemoteMessage>(
        &self,
        to: &Address,
        path: &ActorPath,
        message: M,
        sender: Option<&ActorPath>,
    ) -> Result<(), M> {
        let remoting = self.arc();
        let body = match with_context(&remoting, || postcard::to_allocvec(&message)) {
            Ok(body) => body,
            Err(error) => {
                tracing::warn!(recipient = %path, %error, "remote message does not serialize");
                return Err(message);
            }
        };
        let sender = sender.map(|s| match s.address() {
            Some(_) => s.to_string(),
            None => s.with_address(&self.local.address).to_string(),
        });
        let envelope = WireEnvelopeRef {
            recipient: path.elements(),
            sender: sender.as_deref(),
            manifest: M::MANIFEST,
            body: RawBytes(&body),
        };
        let mut frame =
            Vec::with_capacity(body.len() + path.elements().len() + M::MANIFEST.len() + 8);
        frame.push(ACTOR_CHANNEL);
        let Ok(frame) = envelope.encode_after(frame) else {
            return Err(message);
        };
        if self.send_frame(to, Bytes::from(frame)) {
            Ok(())
        } else {
            Err(message)
        }
    }

    /// Register a reply channel so a remote node can complete it; returns its id.
    pub(crate) fn register_ask(&self, complete: CompleteAsk) -> u64 {
        let id = self.next_ask.fetch_add(1, Ordering::Relaxed);
        let mut pending = self.pending_asks.lock();
        if pending.len() >= PENDING_ASK_SWEEP {
            pending.retain(|_, ask| !ask.is_abandoned());
        }
        pending.insert(id, complete);
        id
    }

    /// Send a reply for ask `id` to `node`.
    pub(crate) fn send_reply(&self, node: &Address, id: u64, body: Vec<u8>) -> bool {
        let Ok(payload) = postcard::to_allocvec(&(id, body)) else {
            return false;
        };
        self.send_frame(node, Self::frame(ASK_REPLY_CHANNEL, &payload))
    }

    fn complete_ask(&self, id: u64, body: &[u8]) {
        let complete = self.pending_asks.lock().remove(&id);
        let remoting = self.arc();
        let delivered =
            complete.is_some_and(|complete| with_context(&remoting, || complete.complete(body)));
        if !delivered {
            let recipient = format!("/temp/ask-{id}");
            self.dead_letter(&recipient, None, "ask reply", DeadLetterReason::AskerGone);
        }
    }

    fn send_system(&self, to: &Address, message: &RemoteSystemMsg) -> bool {
        let Ok(payload) = postcard::to_allocvec(message) else {
            return false;
        };
        self.send_frame(to, Self::frame(SYSTEM_CHANNEL, &payload))
    }

    /// A local watcher starts watching the remote actor behind `cell`.
    pub(crate) fn watch_remote(&self, address: &Address, path: &str, cell: Weak<dyn AnyCell>) {
        let first = {
            let mut watched = self.watched.lock();
            let entry = watched
                .entry((address.clone(), path.to_owned()))
                .or_default();
            entry.retain(|c| c.strong_count() > 0);
            let first = entry.is_empty();
            entry.push(cell);
            first
        };
        if first
            && !self.send_system(
                address,
                &RemoteSystemMsg::Watch {
                    path: path.to_owned(),
                },
            )
        {
            // Cannot even ask: treat the actor as gone rather than watch forever.
            self.remote_terminated(address, path);
        }
    }

    pub(crate) fn stop_remote(&self, address: &Address, path: &str, poison_pill: bool) {
        let message = if poison_pill {
            RemoteSystemMsg::PoisonPill {
                path: path.to_owned(),
            }
        } else {
            RemoteSystemMsg::Stop {
                path: path.to_owned(),
            }
        };
        self.send_system(address, &message);
    }

    fn remote_terminated(&self, address: &Address, path: &str) {
        let cells = self
            .watched
            .lock()
            .remove(&(address.clone(), path.to_owned()));
        for cell in cells.into_iter().flatten().filter_map(|c| c.upgrade()) {
            cell.remote_terminated();
        }
    }

    /// A node left the cluster: every actor watched there has terminated.
    pub fn node_removed(&self, address: &Address) {
        let paths: Vec<String> = self
            .watched
            .lock()
            .keys()
            .filter(|(a, _)| a == address)
            .map(|(_, p)| p.clone())
            .collect();
        for path in paths {
            self.remote_terminated(address, &path);
        }
        self.watcher_proxies
            .lock()
            .retain(|node, _| &node.address != address);
    }

    fn on_system_message(&self, from: &UniqueAddress, message: RemoteSystemMsg) {
        let Some(system) = self.system() else { return };
        match message {
            RemoteSystemMsg::Watch { path } => {
                let proxy = Arc::clone(
                    self.watcher_proxies
                        .lock()
                        .entry(from.clone())
                        .or_insert_with(|| {
                            Arc::new(WatcherProxy::new(self.this.clone(), from.address.clone()))
                        }),
                );
                match system.resolve_any(&path) {
                    Ok(target) => {
                        if target
                            .cell
                            .send_system(SystemMsg::Watch(proxy as Arc<dyn AnyCell>))
                            .is_err()
                        {
                            self.send_system(&from.address, &RemoteSystemMsg::Terminated { path });
                        }
                    }
                    Err(_) => {
                        self.send_system(&from.address, &RemoteSystemMsg::Terminated { path });
                    }
                }
            }
            RemoteSystemMsg::Unwatch { path } => {
                let proxy = self.watcher_proxies.lock().get(from).cloned();
                if let (Some(proxy), Ok(target)) = (proxy, system.resolve_any(&path)) {
                    let _ = target.cell.send_system(SystemMsg::Unwatch(proxy.id));
                }
            }
            RemoteSystemMsg::Stop { path } => {
                if let Ok(target) = system.resolve_any(&path) {
                    target.stop();
                }
            }
            RemoteSystemMsg::PoisonPill { path } => {
                if let Ok(target) = system.resolve_any(&path) {
                    target.poison_pill();
                }
            }
            RemoteSystemMsg::Terminated { path } => self.remote_terminated(&from.address, &path),
        }
    }
}

/// Where a remote ref's messages go.
pub(crate) struct RemoteTarget<M> {
    pub(crate) remoting: Arc<Remoting>,
    pub(crate) address: Address,
    _message: std::marker::PhantomData<fn(M)>,
    send: SendRemote<M>,
}

impl<M: RemoteMessage> RemoteTarget<M> {
    pub(crate) fn new(remoting: Arc<Remoting>, address: Address) -> Self {
        Self {
            remoting,
            address,
            _message: std::marker::PhantomData,
            send: |remoting, to, path, message, sender| {
                remoting.send_message::<M>(to, path, message, sender)
            },
        }
    }
}

impl<M: Send + 'static> RemoteTarget<M> {
    pub(crate) fn send(
        &self,
        path: &ActorPath,
        message: M,
        sender: Option<&ActorPath>,
    ) -> Result<(), M> {
        (self.send)(&self.remoting, &self.address, path, message, sender)
    }
}

/// Stands on this node for a remote node watching a local actor: a `Terminated` it receives is
/// forwarded to that node.
struct WatcherProxy {
    id: ActorId,
    path: ActorPath,
    remoting: Weak<Remoting>,
    node: Address,
    children: Mutex<Children>,
    termination: Termination,
}

impl WatcherProxy {
    fn new(remoting: Weak<Remoting>, node: Address) -> Self {
        let path = ActorPath::remote(&node, "/system/remote-watcher");
        Self {
            id: ActorId::next(),
            path,
            remoting,
            node,
            children: Mutex::new(Children::default()),
            termination: Termination::default(),
        }
    }
}

impl AnyCell for WatcherProxy {
    fn id(&self) -> ActorId {
        self.id
    }

    fn path(&self) -> &ActorPath {
        &self.path
    }

    fn message_type(&self) -> &'static str {
        "troupe::remote::WatcherProxy"
    }

    fn send_system(&self, message: SystemMsg) -> Result<(), SystemMsg> {
        if let SystemMsg::Terminated(Terminated { path, .. }) = &message
            && let Some(remoting) = self.remoting.upgrade()
        {
            remoting.send_system(
                &self.node,
                &RemoteSystemMsg::Terminated {
                    path: path.elements().to_owned(),
                },
            );
        }
        Ok(())
    }

    fn children(&self) -> &Mutex<Children> {
        &self.children
    }

    fn mailbox_depth(&self) -> usize {
        0
    }

    fn termination(&self) -> &Termination {
        &self.termination
    }

    fn poison_pill(&self) {}

    fn remote_terminated(&self) {}

    fn into_any(self: Arc<Self>) -> Arc<dyn std::any::Any + Send + Sync> {
        self
    }
}
