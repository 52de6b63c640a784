//! Cluster singletons: exactly one instance of an actor in the cluster, on the first
//! address-sorted up member (with a role: the first up member carrying it), moved with a
//! hand-over when membership changes, optionally guarded by a [`Lease`](crate::lease::Lease).
//!
//! ```no_run
//! use troupe::singleton::{ClusterSingleton, SingletonKey, StartSingletonOptions};
//! # use troupe::{Actor, ActorError, Context, Props};
//! # #[derive(Debug, serde::Serialize, serde::Deserialize)] enum JobCommand { Run(u64) }
//! # impl troupe::remoting::RemoteMessage for JobCommand { const MANIFEST: &'static str = "app.JobCommand"; }
//! # #[derive(Default)] struct JobScheduler;
//! # impl Actor for JobScheduler { type Msg = JobCommand; async fn handle(&mut self, _: JobCommand, _: &mut Context<Self>) -> Result<(), ActorError> { Ok(()) } }
//! # fn example(cluster: &troupe::cluster::Cluster) -> Result<(), Box<dyn std::error::Error>> {
//! let key = SingletonKey::of::<JobCommand>("job-scheduler", None);
//! // On every node that may host it:
//! let scheduler = ClusterSingleton::get(cluster)
//!     .start(&key, StartSingletonOptions::new(Props::new(JobScheduler::default)))?;
//! // On nodes that only talk to it: `ClusterSingleton::get(cluster).proxy(&key)?`.
//! scheduler.tell(JobCommand::Run(7));
//! # Ok(()) }
//! ```
//!
//! # Supervision tree
//! ```text
//! /system/cluster                     container (created on first use)
//! └── singleton                       container
//!     ├── manager-<typeName>          SingletonManager (manager.rs)
//!     │   └── <typeName>              the instance, while this node hosts
//!     └── proxy-<typeName>            SingletonProxy (proxy.rs)
//! ```
//!
//! The guarantees — who hosts, which events move the host, the hand-over, the lease path,
//! holding and dead letters — are written once in `docs/runtime-semantics.md`
//! ("Cluster singleton").

mod election;
mod event;
mod hand_over;
mod hold;
mod key;
mod manager;
mod manager_state;
mod options;
mod payload;
mod proxy;
mod proxy_state;

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;
use tokio::sync::oneshot;

pub use event::{DeadLetterCause, SingletonEvent, StopReason};
pub use hold::{HOLD_CAPACITY, HOLD_MAX_AGE};
pub use key::SingletonKey;
pub use manager::{ManagerInternal, ManagerMsg, ManagerStatus};
pub use manager_state::RESPAWN_BACKOFF;
pub use options::{
    DEFAULT_ACQUIRE_RETRY_INTERVAL, DEFAULT_BUFFER_SIZE, DEFAULT_HAND_OVER_TIMEOUT,
    MAX_BUFFER_SIZE, OptionsError, StartSingletonOptions,
};
pub use proxy::SingletonProxy;

use crate::actor::{Actor, ActorError};
use crate::actor_ref::ActorRef;
use crate::ask::ReplyTo;
use crate::cell::{ActorId, AnyCell};
use crate::cluster::Cluster;
use crate::context::Context;
use crate::path::ActorPath;
use crate::path::{InvalidName, validate_name};
use crate::props::Props;
use crate::remoting::RemoteMessage;
use crate::supervision::SupervisorStrategy;
use crate::system::{ActorSystem, SpawnError, spawn_child};
use manager::{ActiveSpec, DirectSlot, InternalMsg, ManagerSlot, SingletonManager};
use proxy::{FastPath, ProxyActor, ProxyInternalMsg, ProxyMsg};

/// The full path of the manager of singleton `type_name` in actor system `system`:
/// `troupe://<system>/system/cluster/singleton/manager-<typeName>`. Proxies on every node address
/// managers by this convention.
#[must_use]
pub fn singleton_manager_path(system: &str, type_name: &str) -> String {
    format!(
        "{}://{system}{}",
        crate::SCHEME,
        manager_elements(type_name)
    )
}

pub(crate) fn manager_elements(type_name: &str) -> String {
    format!("/system/cluster/singleton/manager-{type_name}")
}

pub(crate) fn proxy_elements(type_name: &str) -> String {
    format!("/system/cluster/singleton/proxy-{type_name}")
}

/// Why a singleton could not be started or addressed on this node.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StartError {
    /// An option cannot work.
    #[error("invalid singleton options: {0}")]
    Options(#[from] OptionsError),
    /// The type name cannot name an actor.
    #[error("singleton type name {type_name:?} is not a valid actor name: {source}")]
    TypeName {
        /// The rejected name.
        type_name: String,
        /// Why.
        #[source]
        source: InvalidName,
    },
    /// `start` was already called for this singleton on this node (call `stop` first).
    #[error("singleton {type_name:?} is already started on this node; stop it first")]
    AlreadyStarted {
        /// The singleton.
        type_name: String,
    },
    /// The same type name is already used on this node with another message type.
    #[error("singleton {type_name:?} takes {existing} on this node, not {requested}")]
    MessageType {
        /// The singleton.
        type_name: String,
        /// The message type it was registered with.
        existing: &'static str,
        /// The message type asked for now.
        requested: &'static str,
    },
    /// The manager or proxy could not be spawned (the system is shutting down?).
    #[error("cannot spawn the singleton's manager or proxy: {0}")]
    Spawn(#[from] SpawnError),
}

/// This node's singleton registry: one entry per singleton type name. An extension of the
/// [`Cluster`], so every [`ClusterSingleton::get`] sees the same one.
#[derive(Default)]
pub(crate) struct Registry {
    entries: Mutex<HashMap<Arc<str>, Entry>>,
    /// Bumped whenever which manager is active changes (proxies cache against it).
    generation: AtomicU64,
    remoting_registered: AtomicBool,
    /// Singleton message types made deliverable to managers.
    message_types: Mutex<std::collections::HashSet<TypeId>>,
    /// Each manager's `Arc<DirectSlot<M>>`, by the manager's id (remoting binds to it).
    direct: Arc<Mutex<DirectSlots>>,
}

type DirectSlots = HashMap<ActorId, (ActorRef<ManagerMsg>, Arc<dyn Any + Send + Sync>)>;

struct Entry {
    message_type: TypeId,
    message_type_name: &'static str,
    manager: ActorRef<ManagerMsg>,
    /// An `Arc<ManagerSlot<M>>`.
    slot: Arc<dyn Any + Send + Sync>,
    active: bool,
    /// The proxy actor and its `Arc<FastPath<M>>`.
    proxy: Option<(ActorRef<ProxyMsg>, Arc<dyn Any + Send + Sync>)>,
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<Arc<str>> = self.entries.lock().keys().cloned().collect();
        f.debug_struct("Registry")
            .field("singletons", &names)
            .finish()
    }
}

impl Registry {
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The manager of `type_name` if `start` is in effect on this node.
    pub(crate) fn active_manager(&self, type_name: &str) -> Option<ActorRef<ManagerMsg>> {
        self.entries
            .lock()
            .get(type_name)
            .filter(|e| e.active && !e.manager.is_terminated())
            .map(|e| e.manager.clone())
    }

    fn bump(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
    }
}

/// The singleton API of one node, an extension of its [`Cluster`]:
/// `ClusterSingleton::get(&cluster)`.
#[derive(Clone)]
pub struct ClusterSingleton {
    cluster: Cluster,
    registry: Arc<Registry>,
}

impl fmt::Debug for ClusterSingleton {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterSingleton")
            .field("node", self.cluster.self_address())
            .finish()
    }
}

/// The container actors at `/system/cluster` and `/system/cluster/singleton`: they only parent.
enum NoMessages {}

struct Container;

impl Actor for Container {
    type Msg = NoMessages;

    async fn handle(&mut self, msg: NoMessages, _: &mut Context<Self>) -> Result<(), ActorError> {
        match msg {}
    }
}

fn container_props() -> Props<Container> {
    Props::new(|| Container).with_supervisor(SupervisorStrategy::stop())
}

/// The live actor at `/system/cluster/singleton`, created (with `/system/cluster`) on first use.
fn singleton_container(system: &ActorSystem) -> Result<Arc<dyn AnyCell>, SpawnError> {
    let cluster = get_or_spawn(system, "/system/cluster", |system| {
        system
            .spawn_system("cluster", container_props())
            .map(|r| r.as_any().cell)
    })?;
    get_or_spawn(system, "/system/cluster/singleton", |system| {
        spawn_child(&cluster, &system.shared, "singleton", container_props())
            .map(|r| r.as_any().cell)
    })
}

fn get_or_spawn(
    system: &ActorSystem,
    path: &str,
    spawn: impl Fn(&ActorSystem) -> Result<Arc<dyn AnyCell>, SpawnError>,
) -> Result<Arc<dyn AnyCell>, SpawnError> {
    if let Ok(existing) = system.resolve_any(path) {
        return Ok(existing.cell);
    }
    match spawn(system) {
        Ok(cell) => Ok(cell),
        // Someone else created it between the two calls.
        Err(SpawnError::NameTaken { .. }) => match system.resolve_any(path) {
            Ok(existing) => Ok(existing.cell),
            Err(_) => spawn(system),
        },
        Err(error) => Err(error),
    }
}

impl ClusterSingleton {
    /// The singletons of `cluster`'s node: every call for one cluster shares one registry.
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

    fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Make the protocol and `M` deliverable from other nodes; `M` reaches the manager, which
    /// takes `ManagerMsg`, through a conversion.
    fn register_messages<M: RemoteMessage>(&self) {
        let registry = self.registry();
        let remoting = self.cluster.remoting();
        if !registry.remoting_registered.swap(true, Ordering::AcqRel) {
            remoting.register::<ManagerMsg>();
            remoting.register::<ProxyMsg>();
        }
        if registry.message_types.lock().insert(TypeId::of::<M>()) {
            let slots = Arc::clone(&registry.direct);
            remoting.register_into::<M, ManagerMsg, _>(move |manager: ActorRef<ManagerMsg>| {
                let slot = slots
                    .lock()
                    .get(&manager.id())
                    .map(|(_, slot)| Arc::clone(slot))
                    .and_then(|slot| slot.downcast::<DirectSlot<M>>().ok());
                match slot {
                    Some(slot) => Arc::new(move |message: M, sender: &ActorPath| {
                        slot.deliver(&manager, message, sender);
                    }),
                    None => Arc::new(move |message: M, sender: &ActorPath| {
                        manager.tell_from(ManagerMsg::from_network(message, false), sender);
                    }),
                }
            });
        }
    }

    /// Take part in hosting the singleton named by `key`: spawn (or activate) this node's
    /// manager at `/system/cluster/singleton/manager-<typeName>`, and return the proxy. Call it
    /// on every node that may host — or restrict hosting with a role.
    ///
    /// Fails with [`StartError::Options`] naming the field, value and what is allowed when an
    /// option cannot work, and with [`StartError::AlreadyStarted`] when this node already runs it.
    pub fn start<A>(
        &self,
        key: &SingletonKey<A::Msg>,
        options: StartSingletonOptions<A>,
    ) -> Result<SingletonProxy<A::Msg>, StartError>
    where
        A: Actor,
        A::Msg: RemoteMessage,
    {
        options.validate()?;
        check_name(key.type_name())?;
        self.register_messages::<A::Msg>();
        let role = options
            .role
            .clone()
            .or_else(|| key.role().map(str::to_owned));
        let buffer_size = options.buffer_size;
        let spec = Arc::new(active_spec(options, role.clone()));
        let type_name = key.shared_name();
        let system = self.cluster.system().clone();
        let mut entries = self.registry().entries.lock();
        let reused = match entries.get(&type_name) {
            Some(entry) if !entry.manager.is_terminated() => {
                check_type::<A::Msg>(entry, &type_name)?;
                if entry.active {
                    return Err(StartError::AlreadyStarted {
                        type_name: type_name.to_string(),
                    });
                }
                true
            }
            _ => false,
        };
        if reused {
            let entry = entries.get_mut(&type_name).expect("checked above");
            let slot = Arc::clone(&entry.slot)
                .downcast::<ManagerSlot<A::Msg>>()
                .map_err(|_| type_mismatch::<A::Msg>(entry, &type_name))?;
            *slot.spec.lock() = Some(spec);
            entry.active = true;
            entry
                .manager
                .tell(ManagerMsg::internal(InternalMsg::Reconfigure {
                    done: None,
                }));
        } else {
            let slot = Arc::new(ManagerSlot {
                spec: Mutex::new(Some(spec)),
            });
            let manager = self.spawn_manager::<A::Msg>(&system, &type_name, &slot)?;
            let proxy = entries.remove(&type_name).and_then(|e| e.proxy);
            entries.insert(
                Arc::clone(&type_name),
                Entry {
                    message_type: TypeId::of::<A::Msg>(),
                    message_type_name: std::any::type_name::<A::Msg>(),
                    manager,
                    slot,
                    active: true,
                    proxy,
                },
            );
        }
        self.registry().bump();
        let entry = entries.get_mut(&type_name).expect("inserted above");
        Ok(self.proxy_for::<A::Msg>(&system, entry, &type_name, role, buffer_size, true)?)
    }

    /// A proxy to the singleton named by `key`, without taking part in hosting (the seed's
    /// `ref(..)`; `ref` is a Rust keyword). This node answers hand-over requests for it at once:
    /// it surely does not host it. Buffers up to [`DEFAULT_BUFFER_SIZE`] messages while no node
    /// hosts; see [`ClusterSingleton::proxy_with_buffer_size`].
    #[doc(alias = "ref")]
    pub fn proxy<M: RemoteMessage>(
        &self,
        key: &SingletonKey<M>,
    ) -> Result<SingletonProxy<M>, StartError> {
        self.proxy_with_buffer_size(key, DEFAULT_BUFFER_SIZE)
    }

    /// Like [`ClusterSingleton::proxy`], buffering at most `buffer_size` messages while no node
    /// hosts. A proxy that already exists on this node is returned as it is.
    pub fn proxy_with_buffer_size<M: RemoteMessage>(
        &self,
        key: &SingletonKey<M>,
        buffer_size: usize,
    ) -> Result<SingletonProxy<M>, StartError> {
        check_name(key.type_name())?;
        if buffer_size > MAX_BUFFER_SIZE {
            return Err(StartError::Options(OptionsError {
                field: "buffer_size",
                value: buffer_size.to_string(),
                allowed: "at most 100000",
            }));
        }
        self.register_messages::<M>();
        let type_name = key.shared_name();
        let system = self.cluster.system().clone();
        let mut entries = self.registry().entries.lock();
        let existing = entries
            .get(&type_name)
            .filter(|entry| !entry.manager.is_terminated());
        match existing {
            Some(entry) => check_type::<M>(entry, &type_name)?,
            None => {
                // A passive manager: it acknowledges hand-overs at once and dead-letters what
                // is routed here, naming the singleton.
                let slot: Arc<ManagerSlot<M>> = Arc::new(ManagerSlot {
                    spec: Mutex::new(None),
                });
                let manager = self.spawn_manager::<M>(&system, &type_name, &slot)?;
                let proxy = entries.remove(&type_name).and_then(|e| e.proxy);
                entries.insert(
                    Arc::clone(&type_name),
                    Entry {
                        message_type: TypeId::of::<M>(),
                        message_type_name: std::any::type_name::<M>(),
                        manager,
                        slot,
                        active: false,
                        proxy,
                    },
                );
            }
        }
        let entry = entries.get_mut(&type_name).expect("present");
        let role = key.role().map(str::to_owned);
        Ok(self.proxy_for::<M>(&system, entry, &type_name, role, buffer_size, false)?)
    }

    /// Stop this node's manager of the singleton named by `key`: its instance (if it hosts)
    /// drains its mailbox and stops, the lease is released, and the node leaves the rotation
    /// (it keeps answering hand-overs, as a node that only has a proxy). Resolves once done. A
    /// later `start` runs a fresh manager: re-elected, re-acquired, no latch.
    pub async fn stop<M: RemoteMessage>(&self, key: &SingletonKey<M>) {
        let waiting = {
            let mut entries = self.registry().entries.lock();
            let Some(entry) = entries.get_mut(key.type_name()) else {
                return;
            };
            if !entry.active || entry.message_type != TypeId::of::<M>() {
                return;
            }
            if let Ok(slot) = Arc::clone(&entry.slot).downcast::<ManagerSlot<M>>() {
                *slot.spec.lock() = None;
            }
            entry.active = false;
            let (done, waiting) = oneshot::channel();
            entry
                .manager
                .tell(ManagerMsg::internal(InternalMsg::Reconfigure {
                    done: Some(done),
                }));
            if let Some((proxy, _)) = &entry.proxy {
                proxy.tell(ProxyMsg::internal(ProxyInternalMsg::Reconfigure {
                    role: None,
                }));
            }
            waiting
        };
        self.registry().bump();
        let _ = waiting.await;
    }

    /// The names of the singletons this node has a manager or a proxy for, sorted.
    #[must_use]
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .registry()
            .entries
            .lock()
            .keys()
            .map(ToString::to_string)
            .collect();
        names.sort_unstable();
        names
    }

    /// What this node's manager of the singleton named `type_name` reports, or `None` when
    /// this node has none (diagnostics: "is the manager on this node active?").
    pub async fn status_of(&self, type_name: &str) -> Option<ManagerStatus> {
        let manager = self
            .registry()
            .entries
            .lock()
            .get(type_name)
            .map(|e| e.manager.clone())?;
        manager
            .ask(|reply: ReplyTo<ManagerStatus>| {
                ManagerMsg::internal(InternalMsg::Status { reply })
            })
            .await
            .ok()
    }

    /// What this node's manager of `key` reports, or `None` when this node has none.
    pub async fn status<M: RemoteMessage>(&self, key: &SingletonKey<M>) -> Option<ManagerStatus> {
        let manager = self
            .registry()
            .entries
            .lock()
            .get(key.type_name())
            .map(|e| e.manager.clone())?;
        manager
            .ask(|reply: ReplyTo<ManagerStatus>| {
                ManagerMsg::internal(InternalMsg::Status { reply })
            })
            .await
            .ok()
    }

    fn spawn_manager<M: RemoteMessage>(
        &self,
        system: &ActorSystem,
        type_name: &Arc<str>,
        slot: &Arc<ManagerSlot<M>>,
    ) -> Result<ActorRef<ManagerMsg>, SpawnError> {
        let parent = singleton_container(system)?;
        let direct = DirectSlot::<M>::new();
        let (name, cluster, slot, shared) = (
            Arc::clone(type_name),
            self.cluster.clone(),
            Arc::clone(slot),
            Arc::clone(&direct),
        );
        let props = Props::new(move || {
            SingletonManager::<M>::new(
                Arc::clone(&name),
                cluster.clone(),
                Arc::clone(&slot),
                Arc::clone(&shared),
            )
        });
        let manager = spawn_child(
            &parent,
            &system.shared,
            &format!("manager-{type_name}"),
            props,
        )?;
        let mut slots = self.registry().direct.lock();
        slots.retain(|_, (manager, _)| !manager.is_terminated());
        slots.insert(manager.id(), (manager.clone(), direct));
        Ok(manager)
    }

    fn proxy_for<M: RemoteMessage>(
        &self,
        system: &ActorSystem,
        entry: &mut Entry,
        type_name: &Arc<str>,
        role: Option<String>,
        buffer_size: usize,
        role_overrides: bool,
    ) -> Result<SingletonProxy<M>, SpawnError> {
        if let Some((proxy, fast)) = entry.proxy.as_ref().filter(|(p, _)| !p.is_terminated())
            && let Ok(fast) = Arc::clone(fast).downcast::<FastPath<M>>()
        {
            // The local manager (or the role) may have changed: let it re-resolve.
            proxy.tell(ProxyMsg::internal(ProxyInternalMsg::Reconfigure {
                role: role_overrides.then_some(role),
            }));
            return Ok(SingletonProxy::new(proxy.clone(), fast));
        }
        let parent = singleton_container(system)?;
        let fast = FastPath::<M>::new();
        let (name, cluster, shared, registry) = (
            Arc::clone(type_name),
            self.cluster.clone(),
            Arc::clone(&fast),
            Arc::clone(&self.registry),
        );
        let props = Props::new(move || {
            ProxyActor::<M>::new(
                Arc::clone(&name),
                role.clone(),
                cluster.clone(),
                buffer_size,
                Arc::clone(&shared),
                Arc::clone(&registry),
            )
        });
        let proxy = spawn_child(
            &parent,
            &system.shared,
            &format!("proxy-{type_name}"),
            props,
        )?;
        entry.proxy = Some((
            proxy.clone(),
            Arc::clone(&fast) as Arc<dyn Any + Send + Sync>,
        ));
        Ok(SingletonProxy::new(proxy, fast))
    }
}

fn check_name(type_name: &str) -> Result<(), StartError> {
    validate_name(type_name).map_err(|source| StartError::TypeName {
        type_name: type_name.to_owned(),
        source,
    })
}

fn check_type<M: 'static>(entry: &Entry, type_name: &str) -> Result<(), StartError> {
    if entry.message_type == TypeId::of::<M>() {
        Ok(())
    } else {
        Err(type_mismatch::<M>(entry, type_name))
    }
}

fn type_mismatch<M>(entry: &Entry, type_name: &str) -> StartError {
    StartError::MessageType {
        type_name: type_name.to_owned(),
        existing: entry.message_type_name,
        requested: std::any::type_name::<M>(),
    }
}

fn active_spec<A>(options: StartSingletonOptions<A>, role: Option<String>) -> ActiveSpec<A::Msg>
where
    A: Actor,
    A::Msg: RemoteMessage,
{
    let StartSingletonOptions {
        props,
        lease,
        acquire_retry_interval,
        hand_over_timeout,
        restart_on_termination,
        ..
    } = options;
    let Props {
        factory,
        mailbox,
        supervisor,
    } = props;
    // Props are consumed by a spawn; every spawn gets fresh ones around the shared factory.
    let factory = Arc::new(Mutex::new(factory));
    ActiveSpec {
        role,
        lease,
        acquire_retry_interval,
        hand_over_timeout,
        restart_on_termination,
        spawn: Box::new(move |ctx, name| {
            let factory = Arc::clone(&factory);
            let props = Props {
                factory: Box::new(move || (factory.lock())()),
                mailbox,
                supervisor,
            };
            ctx.spawn(name, props)
        }),
    }
}
