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
//!
//! # Files
//! This file holds [`Remoting`] itself, remote refs and the outbound send path; `registry`
//! maps manifests to local recipients, `dispatch` handles inbound frames, `asks` the replies
//! that cross the network, and `watches` remote death watch.

mod asks;
mod dispatch;
mod envelope;
mod refs;
mod registry;
mod watches;

pub use envelope::{EnvelopeError, WireEnvelope};

use std::any::TypeId;
use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use bytes::Bytes;
use parking_lot::{Mutex, RwLock};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;

use crate::actor_ref::ActorRef;
use crate::address::{Address, UniqueAddress};
use crate::dead_letter::DeadLetterReason;
use crate::outbound::ForeignCell;
use crate::path::ActorPath;
use crate::system::{ActorSystem, SystemShared};
use crate::transport::{InboundFrame, Transport};
use asks::CompleteAsk;
use envelope::{RawBytes, WireEnvelopeRef};
use refs::RemoteTarget;
use registry::Deliver;
use watches::{WatcherProxy, WatchingCells};

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

/// A frame channel already has an owner (or belongs to remoting itself).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("frame channel {channel:#04x} is already taken")]
pub(crate) struct ChannelTaken {
    /// The channel tag.
    pub(crate) channel: u8,
}

/// Why a remote ref could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RemoteRefError {
    /// The string is not a full remote path.
    #[error(
        "{0:?} is not a remote actor path: expected troupe://<system>@<host>:<port>/user/<name>/..."
    )]
    Malformed(String),
}

/// Counters of what remoting could not deliver.
#[derive(Debug, Default)]
pub struct RemotingStats {
    /// Inbound frames that did not decode, or had no channel tag.
    pub malformed_frames: AtomicU64,
    /// Inbound frames on a channel that neither remoting nor a layer above it owns.
    pub unowned_channel_frames: AtomicU64,
    /// Inbound messages whose manifest nobody registered.
    pub unknown_manifests: AtomicU64,
    /// Inbound messages for a path with no actor.
    pub unknown_recipients: AtomicU64,
    /// Outbound frames the transport refused.
    pub send_failures: AtomicU64,
    /// Extension records (fields added by a later protocol version) this build read.
    pub extension_records_read: AtomicU64,
    /// Extension records this build does not know and skipped: a newer node is talking.
    pub extension_records_skipped: AtomicU64,
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
    /// The owners of the channels above remoting's own (see [`Remoting::register_channel`]).
    channels: RwLock<HashMap<u8, mpsc::UnboundedSender<InboundFrame>>>,
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
            channels: RwLock::new(HashMap::new()),
            next_ask: AtomicU64::new(1),
            pending_asks: Mutex::new(HashMap::new()),
            watched: Mutex::new(HashMap::new()),
            resolved: RwLock::new(HashMap::new()),
            conversions: RwLock::new(HashMap::new()),
            origins: RwLock::new(HashMap::new()),
            watcher_proxies: Mutex::new(HashMap::new()),
            stats: RemotingStats::default(),
        });
        let remoting = system.shared.extensions.get_or_insert_with(|| remoting);
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

    /// This system's remoting, if [`Remoting::start`] has run.
    #[must_use]
    pub fn of(system: &ActorSystem) -> Option<Arc<Self>> {
        system.shared.extensions.get::<Self>()
    }

    /// Hand every inbound frame on `channel` to `frames` (the layer above remoting that owns
    /// the channel, such as cluster membership). One owner per channel; remoting's own
    /// channels cannot be taken.
    pub(crate) fn register_channel(
        &self,
        channel: u8,
        frames: mpsc::UnboundedSender<InboundFrame>,
    ) -> Result<(), ChannelTaken> {
        if matches!(channel, ACTOR_CHANNEL | ASK_REPLY_CHANNEL | SYSTEM_CHANNEL) {
            return Err(ChannelTaken { channel });
        }
        let mut channels = self.channels.write();
        if channels
            .get(&channel)
            .is_some_and(|owner| !owner.is_closed())
        {
            return Err(ChannelTaken { channel });
        }
        channels.insert(channel, frames);
        Ok(())
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
        let outbound = RemoteTarget::<M>::new(self.arc(), address.clone());
        ActorRef::foreign(ForeignCell::new(path, system, Box::new(outbound)))
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

    /// Send an actor message to `path` on `to`. Gives the message back, with the reason, if it
    /// cannot be queued.
    pub(crate) fn send_message<M: RemoteMessage>(
        &self,
        to: &Address,
        path: &ActorPath,
        message: M,
        sender: Option<&ActorPath>,
    ) -> Result<(), (M, DeadLetterReason)> {
        let remoting = self.arc();
        let body = match with_context(&remoting, || postcard::to_allocvec(&message)) {
            Ok(body) => body,
            Err(error) => {
                tracing::warn!(recipient = %path, %error, "remote message does not serialize");
                return Err((message, DeadLetterReason::Unserializable));
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
        let frame = match envelope.encode_after(frame) {
            Ok(frame) => frame,
            Err(error) => {
                tracing::warn!(recipient = %path, %error, "remote envelope does not encode");
                return Err((message, DeadLetterReason::Unserializable));
            }
        };
        if self.send_frame(to, Bytes::from(frame)) {
            Ok(())
        } else {
            Err((message, DeadLetterReason::NotSent))
        }
    }
}
