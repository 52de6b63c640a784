//! Virtual actors: actors named by (actor type, key) that exist on demand — the first message
//! activates one on the host a placement policy picks, the directory
//! ([`crate::directory`]) records which host owns each key, and later messages go straight to
//! that host.
//!
//! ```no_run
//! use std::sync::Arc;
//! use std::time::Duration;
//! use troupe::directory::InMemoryDirectory;
//! use troupe::virtual_actor::{VirtualActorOptions, VirtualActors};
//! # use troupe::{Actor, ActorError, Context, ReplyTo};
//! # #[derive(Debug, serde::Serialize, serde::Deserialize)]
//! # enum CartMsg { Add(u64), Total { reply: ReplyTo<u64> } }
//! # impl troupe::remoting::RemoteMessage for CartMsg { const MANIFEST: &'static str = "app.CartMsg"; }
//! # struct Cart { total: u64 }
//! # impl Actor for Cart { type Msg = CartMsg;
//! #   async fn handle(&mut self, msg: CartMsg, _: &mut Context<Self>) -> Result<(), ActorError> {
//! #     match msg { CartMsg::Add(n) => self.total += n, CartMsg::Total { reply } => reply.send(self.total) } Ok(()) } }
//! # async fn example(cluster: &troupe::cluster::Cluster) -> Result<(), Box<dyn std::error::Error>> {
//! // On every node, with the same directory (etcd or PostgreSQL across processes):
//! let directory = Arc::new(InMemoryDirectory::new());
//! let carts = VirtualActors::get(cluster).start(
//!     "cart",
//!     |_key: &str| Cart { total: 0 },
//!     VirtualActorOptions::new(directory).with_idle_timeout(Some(Duration::from_secs(300))),
//! )?;
//! // Anywhere, without a round trip: the first message activates "alice" somewhere.
//! let alice = carts.get("alice")?;
//! alice.tell(CartMsg::Add(3));
//! let total = alice.ask(|reply| CartMsg::Total { reply }).await?;
//! assert_eq!(total, 3);
//! # Ok(()) }
//! ```
//!
//! # Supervision tree
//! ```text
//! /system/virtual-<type>        the host of <type> on this node (virtual_actor/host.rs)
//! └── <key>~<n>                 an activation of <key>
//! ```
//!
//! # What is here
//! - [`VirtualActors::start`]: this node hosts a type; [`VirtualActorType::get`] gives the
//!   [`VirtualRef`] of a key, with `tell` and `ask` as on an [`ActorRef`].
//! - placement: [`ActivationCountPlacement`] (cold hosts first, the default),
//!   [`RandomPlacement`], [`PreferLocalPlacement`], and [`PlacementPolicy`] for an application's
//!   own, one per type.
//! - the activation protocol of one host as a pure `step` machine (`activation.rs`), run by the
//!   host actor (`host.rs`): lookup, claim, start, forward, idle passivation, hand-off on leave,
//!   eviction and fencing, bounded per-key buffers whose overflow is a dead letter
//!   ([`crate::DeadLetterReason::VirtualActor`]).
//! - graceful hand-off: [`VirtualActors::hand_off`] (or [`VirtualActorType::hand_off`]) before
//!   [`Cluster::leave`] stops every activation here, releases its claim and waits until none is
//!   left; what arrives meanwhile waits (bounded) and goes on in order to the key's next host.
//! - rebalancing, as a pure `step` machine of one host (`rebalance.rs`); it has no shell yet,
//!   so it never runs (off, as its default is).
//!
//! The guarantees are written once in `docs/runtime-semantics.md` ("Virtual actors").

mod activation;
mod host;
mod options;
mod placement;
// The shell that runs it lands later; until then only its tests drive it.
#[allow(dead_code)]
mod rebalance;

use std::any::{Any, TypeId};
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

pub use host::{HostMsg, HostStatus};
pub use options::{
    MAX_BUFFER_SIZE, MAX_HOPS_LIMIT, MIN_IDLE_TIMEOUT, OptionsError, VirtualActorOptions,
};
pub use placement::{
    ActivationCountPlacement, Candidate, PlacementPolicy, PlacementRequest, PreferLocalPlacement,
    RandomPlacement,
};

use crate::actor::Actor;
use crate::actor_ref::ActorRef;
use crate::ask::{AskError, AskRequest, ReplyTo};
use crate::cluster::Cluster;
use crate::path::{InvalidName, validate_name};
use crate::props::Props;
use crate::remoting::RemoteMessage;
use crate::system::SpawnError;
use host::{Inbound, VirtualHost, VirtualWire, actor_id, host_elements};

/// The full path of the host of virtual actor type `type_name` in actor system `system`:
/// `troupe://<system>/system/virtual-<type>`. Hosts on every node address each other by it.
#[must_use]
pub fn virtual_host_path(system: &str, type_name: &str) -> String {
    format!("{}://{system}{}", crate::SCHEME, host_elements(type_name))
}

/// Why a virtual actor type could not be started or addressed on this node.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StartError {
    /// An option cannot work.
    #[error(transparent)]
    Options(#[from] OptionsError),
    /// The type name cannot name an actor.
    #[error("virtual actor type name {type_name:?} is not a valid actor name: {source}")]
    TypeName {
        /// The rejected name.
        type_name: String,
        /// Why.
        #[source]
        source: InvalidName,
    },
    /// `start` was already called for this type on this node.
    #[error("virtual actor type {type_name:?} is already started on this node")]
    AlreadyStarted {
        /// The type.
        type_name: String,
    },
    /// The type is not started on this node (start it on every node that sends to it).
    #[error("virtual actor type {type_name:?} is not started on this node; call start first")]
    NotStarted {
        /// The type.
        type_name: String,
    },
    /// The type name is used on this node with another message type.
    #[error("virtual actor type {type_name:?} takes {existing} on this node, not {requested}")]
    MessageType {
        /// The type.
        type_name: String,
        /// Its message type.
        existing: &'static str,
        /// The message type asked for.
        requested: &'static str,
    },
    /// The host could not be spawned (the system is shutting down?).
    #[error("cannot spawn the virtual actor host: {0}")]
    Spawn(#[from] SpawnError),
}

/// A key that cannot name a virtual actor.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("virtual actor key {key:?} of type {type_name:?} is refused: {reason}")]
pub struct KeyError {
    /// The type.
    pub type_name: String,
    /// The key.
    pub key: String,
    /// What is wrong and what is allowed.
    pub reason: String,
}

/// This node's virtual actor types: an extension of the [`Cluster`], so every
/// [`VirtualActors::get`] sees the same ones.
#[derive(Default)]
pub(crate) struct Registry {
    entries: Mutex<HashMap<Arc<str>, Entry>>,
    /// Message types whose hosts take [`VirtualWire`] frames.
    wired: Mutex<HashSet<TypeId>>,
}

struct Entry {
    message_type: TypeId,
    message_type_name: &'static str,
    /// An `ActorRef<HostMsg<M>>`.
    host: Arc<dyn Any + Send + Sync>,
    is_terminated: Box<dyn Fn() -> bool + Send + Sync>,
    /// [`VirtualActorType::hand_off`], without the message type.
    hand_off: Box<dyn Fn(Duration) -> HandOffFuture + Send + Sync>,
}

type HandOffFuture = Pin<Box<dyn Future<Output = Result<(), AskError>> + Send>>;

/// A virtual actor type that did not confirm its hand-off in time.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("virtual actor type {type_name:?} did not hand off: {source}")]
pub struct HandOffError {
    /// The type.
    pub type_name: String,
    /// The ask's error (a timeout: some claim was not released in time).
    #[source]
    pub source: AskError,
}

/// The virtual actor API of one node: `VirtualActors::get(&cluster)`.
#[derive(Clone)]
pub struct VirtualActors {
    cluster: Cluster,
    registry: Arc<Registry>,
}

impl fmt::Debug for VirtualActors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VirtualActors")
            .field("node", self.cluster.self_address())
            .finish()
    }
}

impl VirtualActors {
    /// The virtual actor types of `cluster`'s node.
    #[must_use]
    pub fn get(cluster: &Cluster) -> Self {
        let registry = cluster
            .extensions()
            .get_or_insert_with(|| Arc::new(Registry::default()));
        Self {
            cluster: cluster.clone(),
            registry,
        }
    }

    /// Host virtual actor type `type_name` on this node: spawn its host at
    /// `/system/virtual-<type>`, which activates `factory(key)` for the keys placed here. Call
    /// it on every node of the cluster, with the same directory: every up member is a placement
    /// candidate.
    ///
    /// # Errors
    /// [`StartError::Options`] naming the option, value and what is allowed;
    /// [`StartError::TypeName`] for a name that cannot name an actor;
    /// [`StartError::AlreadyStarted`] when this node already hosts the type.
    pub fn start<A, F>(
        &self,
        type_name: &str,
        factory: F,
        options: VirtualActorOptions,
    ) -> Result<VirtualActorType<A::Msg>, StartError>
    where
        A: Actor,
        A::Msg: RemoteMessage,
        F: Fn(&str) -> A + Send + Sync + 'static,
    {
        options.validate()?;
        validate_name(type_name).map_err(|source| StartError::TypeName {
            type_name: type_name.to_owned(),
            source,
        })?;
        self.wire::<A::Msg>();
        let mut entries = self.registry.entries.lock();
        if let Some(entry) = entries.get(type_name)
            && !(entry.is_terminated)()
        {
            return Err(StartError::AlreadyStarted {
                type_name: type_name.to_owned(),
            });
        }
        let name: Arc<str> = Arc::from(type_name);
        let factory: host::Factory<A> = Arc::new(factory);
        let (cluster, for_host) = (self.cluster.clone(), Arc::clone(&name));
        let props = Props::new(move || {
            VirtualHost::new(
                Arc::clone(&for_host),
                cluster.clone(),
                Arc::clone(&factory),
                options.clone(),
            )
        });
        let host = self
            .cluster
            .system()
            .spawn_system(&format!("virtual-{type_name}"), props)?;
        let watched = host.clone();
        let handing = host.clone();
        entries.insert(
            Arc::clone(&name),
            Entry {
                message_type: TypeId::of::<A::Msg>(),
                message_type_name: std::any::type_name::<A::Msg>(),
                host: Arc::new(host.clone()),
                is_terminated: Box::new(move || watched.is_terminated()),
                hand_off: Box::new(move |timeout| {
                    let host = handing.clone();
                    Box::pin(async move { hand_off(&host, timeout).await })
                }),
            },
        );
        Ok(VirtualActorType {
            type_name: name,
            host,
        })
    }

    /// The handle of type `type_name`, started on this node with message type `M`.
    ///
    /// # Errors
    /// [`StartError::NotStarted`] when this node does not host the type,
    /// [`StartError::MessageType`] when it takes another message type.
    pub fn actor_type<M: RemoteMessage>(
        &self,
        type_name: &str,
    ) -> Result<VirtualActorType<M>, StartError> {
        let entries = self.registry.entries.lock();
        let entry = entries
            .get(type_name)
            .filter(|e| !(e.is_terminated)())
            .ok_or_else(|| StartError::NotStarted {
                type_name: type_name.to_owned(),
            })?;
        if entry.message_type != TypeId::of::<M>() {
            return Err(StartError::MessageType {
                type_name: type_name.to_owned(),
                existing: entry.message_type_name,
                requested: std::any::type_name::<M>(),
            });
        }
        let host = entry
            .host
            .downcast_ref::<ActorRef<HostMsg<M>>>()
            .cloned()
            .ok_or_else(|| StartError::NotStarted {
                type_name: type_name.to_owned(),
            })?;
        Ok(VirtualActorType {
            type_name: Arc::clone(entries.get_key_value(type_name).expect("found above").0),
            host,
        })
    }

    /// Hand off every virtual actor type this node hosts, as
    /// [`VirtualActorType::hand_off`] does for one, all at once; resolves when every one has.
    /// Call it before [`Cluster::leave`] so that no claim outlives the node.
    ///
    /// # Errors
    /// [`HandOffError`] naming the first type that did not confirm within `timeout`.
    pub async fn hand_off(&self, timeout: Duration) -> Result<(), HandOffError> {
        let pending: Vec<(Arc<str>, HandOffFuture)> = {
            let entries = self.registry.entries.lock();
            entries
                .iter()
                .filter(|(_, e)| !(e.is_terminated)())
                .map(|(name, e)| (Arc::clone(name), (e.hand_off)(timeout)))
                .collect()
        };
        // Each runs on its own task so that every host starts handing off at once.
        let tasks: Vec<_> = pending
            .into_iter()
            .map(|(name, future)| (name, tokio::spawn(future)))
            .collect();
        let mut first_error = None;
        for (name, task) in tasks {
            let outcome = match task.await {
                Ok(outcome) => outcome,
                // The task cannot panic; a cancelled runtime ends the wait.
                Err(_) => continue,
            };
            if let Err(source) = outcome
                && first_error.is_none()
            {
                first_error = Some(HandOffError {
                    type_name: name.to_string(),
                    source,
                });
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Make hosts taking `M` deliverable from other nodes.
    fn wire<M: RemoteMessage>(&self) {
        if !self.registry.wired.lock().insert(TypeId::of::<M>()) {
            return;
        }
        self.cluster
            .remoting()
            .register_into::<VirtualWire, HostMsg<M>, _>(|host: ActorRef<HostMsg<M>>| {
                Arc::new(move |wire: VirtualWire, _sender: &crate::ActorPath| {
                    host.tell(HostMsg(Inbound::Wire(wire)));
                })
            });
    }
}

/// One virtual actor type hosted on this node: makes the [`VirtualRef`] of any key. Cheap to
/// clone.
pub struct VirtualActorType<M> {
    type_name: Arc<str>,
    host: ActorRef<HostMsg<M>>,
}

impl<M> Clone for VirtualActorType<M> {
    fn clone(&self) -> Self {
        Self {
            type_name: Arc::clone(&self.type_name),
            host: self.host.clone(),
        }
    }
}

impl<M> fmt::Debug for VirtualActorType<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VirtualActorType")
            .field("type_name", &self.type_name)
            .finish()
    }
}

impl<M: RemoteMessage> VirtualActorType<M> {
    /// The type's name.
    #[must_use]
    pub fn type_name(&self) -> &str {
        &self.type_name
    }

    /// The handle of `key`, made here without a round trip; its first message activates it.
    ///
    /// # Errors
    /// [`KeyError`] for a key the directory cannot store: empty, with a control character, or
    /// longer than the directory's name limit together with the type name.
    pub fn get(&self, key: &str) -> Result<VirtualRef<M>, KeyError> {
        let refuse = |reason: String| KeyError {
            type_name: self.type_name.to_string(),
            key: key.to_owned(),
            reason,
        };
        if key.is_empty() {
            return Err(refuse("a key must not be empty".to_owned()));
        }
        crate::directory::validate_actor(&actor_id(&self.type_name, key))
            .map_err(|e| refuse(e.to_string()))?;
        Ok(VirtualRef {
            key: Arc::from(key),
            host: self.host.clone(),
        })
    }

    /// What this node's host knows: its activations, its lookup cache, its members.
    /// `None` when the host has stopped.
    pub async fn status(&self) -> Option<HostStatus> {
        self.host
            .ask(|reply: ReplyTo<HostStatus>| HostMsg(Inbound::Status { reply }))
            .await
            .ok()
    }

    /// Hand this node's activations of the type off, as a graceful leave does, and resolve once
    /// this host holds no claim in the directory: every activation stops after the messages it
    /// was given and releases its claim; messages that arrive meanwhile wait in the key's
    /// bounded buffer and then go, in arrival order, to the key's next host (placement leaves
    /// this node out from now on). The host keeps routing what reaches it afterwards, so call
    /// [`Cluster::leave`] after this: leaving without it hands off too, but nothing waits for
    /// the claims before the node exits.
    ///
    /// # Errors
    /// [`AskError::Timeout`] when the hand-off did not finish within `timeout` (a release
    /// still in flight), [`AskError::Undeliverable`] when the host has stopped.
    pub async fn hand_off(&self, timeout: Duration) -> Result<(), AskError> {
        hand_off(&self.host, timeout).await
    }

    /// Stop hosting on this node: the activations here stop and give their claims back (the
    /// next message for those keys activates them elsewhere). Resolves once the host stopped.
    pub async fn stop(&self) {
        self.host.stop();
        self.host.terminated().await;
    }
}

async fn hand_off<M: Send + 'static>(
    host: &ActorRef<HostMsg<M>>,
    timeout: Duration,
) -> Result<(), AskError> {
    host.ask(|reply: ReplyTo<()>| HostMsg(Inbound::HandOff { reply }))
        .timeout(timeout)
        .await
}

/// The handle of one virtual actor: (type, key). `tell` and `ask` work as on an [`ActorRef`];
/// the first message activates the actor. Cheap to clone.
pub struct VirtualRef<M> {
    key: Arc<str>,
    host: ActorRef<HostMsg<M>>,
}

impl<M> Clone for VirtualRef<M> {
    fn clone(&self) -> Self {
        Self {
            key: Arc::clone(&self.key),
            host: self.host.clone(),
        }
    }
}

impl<M> fmt::Debug for VirtualRef<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VirtualRef")
            .field("host", self.host.path())
            .field("key", &self.key)
            .finish()
    }
}

impl<M: RemoteMessage> VirtualRef<M> {
    /// The key.
    #[must_use]
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Send `message` to the activation of this key, activating it if none runs. Messages of
    /// one sender to one key arrive in the order sent; what cannot arrive is a dead letter
    /// ([`crate::DeadLetterReason::VirtualActor`]).
    pub fn tell(&self, message: M) {
        self.host.tell(HostMsg(Inbound::Local {
            key: self.key.to_string(),
            item: message,
        }));
    }

    /// Ask the activation of this key: `make` builds the message around the reply channel.
    /// A message that becomes a dead letter on this node ends the ask with
    /// [`crate::AskError::NoReply`] at once; one lost further away ends it with the timeout.
    pub fn ask<R, F>(
        &self,
        make: F,
    ) -> AskRequest<'_, HostMsg<M>, R, impl FnOnce(ReplyTo<R>) -> HostMsg<M> + use<R, F, M>>
    where
        R: Send + 'static,
        F: FnOnce(ReplyTo<R>) -> M,
    {
        let key = self.key.to_string();
        self.host.ask(move |reply| {
            HostMsg(Inbound::Local {
                key,
                item: make(reply),
            })
        })
    }
}
