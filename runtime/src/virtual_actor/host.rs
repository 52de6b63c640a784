//! The host of one virtual actor type on one node: the actor at `/system/virtual-<type>` that
//! runs this node's activation machine (`activation.rs`) and performs what it asks — directory
//! lookups, claims and releases, starting and stopping activations, forwarding to other hosts,
//! idle timers, publishing this node's activation count.
//!
//! # Supervision tree
//! ```text
//! /system/virtual-<type>            VirtualHost (this file)
//! └── <key>~<n>                     one activation of <key> (the n-th on this node); stops
//!                                   with the host
//! ```
//!
//! # Inputs
//! Local senders ([`super::VirtualRef`]) and other hosts (a [`VirtualWire`] over remoting) send
//! messages; the directory's answers, its watch, the idle timers and membership arrive as
//! messages to this actor too, so the machine sees one ordered stream of events.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::activation::{self, ActivationState, Envelope, Event, Undelivered, Watched};
use super::options::VirtualActorOptions;
use crate::actor::{Actor, ActorError};
use crate::actor_ref::ActorRef;
use crate::ask::ReplyTo;
use crate::cell::ActorId;
use crate::cluster::{Cluster, ClusterNotification, Departure, MemberStatus};
use crate::context::Context;
use crate::dead_letter::{DeadLetter, DeadLetterReason, VirtualActorFailure};
use crate::death_watch::Terminated;
use crate::directory::{Directory, DirectoryChange, DirectoryError, Revision};
use crate::props::Props;
use crate::remoting::{RemoteMessage, with_context};
use crate::{Address, UniqueAddress};

/// A message to a virtual actor host. Opaque: build it through [`super::VirtualRef`].
pub struct HostMsg<M>(pub(super) Inbound<M>);

impl<M> std::fmt::Debug for HostMsg<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match &self.0 {
            Inbound::Local { .. } => "Local",
            Inbound::Wire(_) => "Wire",
            Inbound::Machine(_) => "Machine",
            Inbound::Cluster(_) => "Cluster",
            Inbound::Resynced { .. } => "Resynced",
            Inbound::Status { .. } => "Status",
            Inbound::HandOff { .. } => "HandOff",
        };
        write!(f, "HostMsg::{kind}")
    }
}

impl<M> From<ClusterNotification> for HostMsg<M> {
    fn from(notification: ClusterNotification) -> Self {
        Self(Inbound::Cluster(notification))
    }
}

/// What a host receives.
pub(super) enum Inbound<M> {
    /// A message for `key` from a sender on this node.
    Local {
        /// The key.
        key: String,
        /// The message.
        item: M,
    },
    /// A frame from another host (or this one, through remoting's loopback).
    Wire(VirtualWire),
    /// An event the shell produced for the machine: a directory answer, a watched change, an
    /// idle timer.
    Machine(Event<M>),
    /// A membership notification.
    Cluster(ClusterNotification),
    /// The directory's watch resumed from a snapshot taken at `revision`: these are the keys
    /// this host owns there; an activation not among them lost its claim meanwhile.
    Resynced {
        /// Keys of this type owned by this host in the snapshot.
        owned: BTreeSet<String>,
        /// The snapshot's revision.
        revision: Revision,
    },
    /// What this host knows, for diagnostics and tests.
    Status {
        /// Where the answer goes.
        reply: ReplyTo<HostStatus>,
    },
    /// Hand every activation off (as on leave) and answer once this host holds no claim.
    HandOff {
        /// Answered when the machine reports [`activation::Action::HandedOff`] (at once when
        /// it already has, or the host is fenced: a fenced host's claims are forfeit).
        reply: ReplyTo<()>,
    },
}

/// One host's view of one virtual actor type, answered by
/// [`super::VirtualActorType::status`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostStatus {
    /// The keys active on this node, sorted.
    pub active: Vec<String>,
    /// The lookup cache: keys owned elsewhere and the host their messages go to.
    pub routes: BTreeMap<String, UniqueAddress>,
    /// The hosts this node may place activations on (its membership view).
    pub members: Vec<UniqueAddress>,
}

/// What hosts of one type say to each other; the same type for every virtual actor type (the
/// user's message travels encoded in `body`), registered once.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum VirtualWire {
    /// A message for `key`, forwarded by `from`.
    Forward {
        /// The key.
        key: String,
        /// Forwards so far.
        hops: u8,
        /// The sender placed the activation here: claim it.
        placed: bool,
        /// The forwarding host.
        from: UniqueAddress,
        /// The user's message, encoded by remoting (reply channels inside it travel).
        body: Vec<u8>,
    },
    /// `from` hosts `activations` activations of this type.
    Load {
        /// The publishing host.
        from: UniqueAddress,
        /// Its activation count.
        activations: u64,
    },
    /// `from` hands off: place nothing new there (it would only place it again).
    Departing {
        /// The host handing off.
        from: UniqueAddress,
    },
}

impl RemoteMessage for VirtualWire {
    const MANIFEST: &'static str = "troupe.virtual.Wire";
}

/// The path elements of the host of `type_name`.
pub(crate) fn host_elements(type_name: &str) -> String {
    format!("/system/virtual-{type_name}")
}

/// The directory id of `key` of `type_name`.
pub(crate) fn actor_id(type_name: &str, key: &str) -> String {
    format!("virtual/{type_name}/{key}")
}

/// How a node names itself in the directory: its unique address, `troupe://sys@h:p#incarnation`.
fn host_name(node: &UniqueAddress) -> String {
    node.to_string()
}

/// The node a directory host name stands for.
fn parse_host(name: &str) -> Option<UniqueAddress> {
    let (address, incarnation) = name.rsplit_once('#')?;
    Some(UniqueAddress {
        address: address.parse::<Address>().ok()?,
        incarnation: incarnation.parse().ok()?,
    })
}

/// Makes the user's actor for a key.
pub(super) type Factory<A> = Arc<dyn Fn(&str) -> A + Send + Sync>;

/// The host actor of one type on one node.
pub(super) struct VirtualHost<A: Actor> {
    type_name: Arc<str>,
    cluster: Cluster,
    directory: Arc<dyn Directory>,
    factory: Factory<A>,
    options: VirtualActorOptions,
    machine: Option<ActivationState<A::Msg>>,
    /// This node as the directory names it.
    me: String,
    /// The running activations by key, and their keys by actor id (for `Terminated`).
    active: HashMap<String, ActorRef<A::Msg>>,
    keys_by_id: HashMap<ActorId, String>,
    /// Other hosts of this type, by node.
    peers: HashMap<UniqueAddress, ActorRef<VirtualWire>>,
    members: BTreeSet<UniqueAddress>,
    /// The count last published (sent to new members when they appear).
    published: u64,
    next_child: u64,
    leaving: bool,
    /// The machine reported that this host holds no claim any more.
    handed_off: bool,
    /// Who waits for the hand-off.
    hand_off_waiters: Vec<ReplyTo<()>>,
    fenced: bool,
    watch: Option<tokio::task::AbortHandle>,
}

impl<A> VirtualHost<A>
where
    A: Actor,
    A::Msg: RemoteMessage,
{
    pub(super) fn new(
        type_name: Arc<str>,
        cluster: Cluster,
        factory: Factory<A>,
        options: VirtualActorOptions,
    ) -> Self {
        let me = host_name(cluster.self_node());
        Self {
            type_name,
            directory: Arc::clone(&options.directory),
            cluster,
            factory,
            options,
            machine: None,
            me,
            active: HashMap::new(),
            keys_by_id: HashMap::new(),
            peers: HashMap::new(),
            members: BTreeSet::new(),
            published: 0,
            next_child: 0,
            leaving: false,
            handed_off: false,
            hand_off_waiters: Vec::new(),
            fenced: false,
            watch: None,
        }
    }

    /// Advance the machine by `event` and perform its actions.
    fn step(&mut self, event: Event<A::Msg>, ctx: &mut Context<Self>) {
        let Some(machine) = self.machine.take() else {
            return;
        };
        let now = Instant::now();
        let (machine, actions) = activation::step(machine, event, now);
        self.machine = Some(machine);
        for action in actions {
            self.perform(action, now, ctx);
        }
    }

    fn perform(
        &mut self,
        action: activation::Action<A::Msg>,
        now: Instant,
        ctx: &mut Context<Self>,
    ) {
        use activation::Action;
        match action {
            Action::Lookup { key } => {
                let (directory, id, me) =
                    (Arc::clone(&self.directory), self.id(&key), ctx.myself());
                tokio::spawn(async move {
                    let event = match directory.lookup(&id).await {
                        Ok(None) => Event::LookedUp { key, owner: None },
                        Ok(Some(claim)) => match parse_host(&claim.host) {
                            Some(owner) => Event::LookedUp {
                                key,
                                owner: Some((owner, claim.revision)),
                            },
                            None => Event::DirectoryFailed {
                                key,
                                error: format!("owner {:?} is not a node address", claim.host),
                            },
                        },
                        Err(error) => Event::DirectoryFailed {
                            key,
                            error: error.to_string(),
                        },
                    };
                    me.tell(HostMsg(Inbound::Machine(event)));
                });
            }
            Action::Claim { key } => {
                let (directory, id, host, me) = (
                    Arc::clone(&self.directory),
                    self.id(&key),
                    self.me.clone(),
                    ctx.myself(),
                );
                tokio::spawn(async move {
                    let event = match directory.claim(&id, &host).await {
                        Ok(outcome) => {
                            let claim = outcome.claim();
                            match parse_host(&claim.host) {
                                Some(owner) => Event::Claimed {
                                    key,
                                    owner,
                                    revision: claim.revision,
                                },
                                None => Event::DirectoryFailed {
                                    key,
                                    error: format!("owner {:?} is not a node address", claim.host),
                                },
                            }
                        }
                        Err(error) => Event::DirectoryFailed {
                            key,
                            error: error.to_string(),
                        },
                    };
                    me.tell(HostMsg(Inbound::Machine(event)));
                });
            }
            Action::Release { key } => {
                let (directory, id, host, me) = (
                    Arc::clone(&self.directory),
                    self.id(&key),
                    self.me.clone(),
                    ctx.myself(),
                );
                tokio::spawn(async move {
                    if let Err(error) = directory.release(&id, &host).await {
                        // The claim stays, owned by a host without an activation: the next
                        // message the claim routes here starts one.
                        tracing::warn!(actor = %id, %error, "virtual actor release failed");
                    }
                    me.tell(HostMsg(Inbound::Machine(Event::Released { key })));
                });
            }
            Action::Start { key } => self.start(key, ctx),
            Action::Deliver { key, item } => match self.active.get(&key) {
                // Virtual refs carry no sender yet: the host is not one.
                Some(activation) => activation.tell_quietly(item, None),
                None => self.dead_letter(ctx, key, VirtualActorFailure::NotStarted),
            },
            Action::Forward { key, to, envelope } => self.forward(key, &to, envelope, ctx),
            Action::Stop { key } => {
                if let Some(activation) = self.active.get(&key) {
                    if self.fenced {
                        activation.stop();
                    } else {
                        activation.poison_pill();
                    }
                } else {
                    ctx.myself()
                        .tell(HostMsg(Inbound::Machine(Event::Stopped { key })));
                }
            }
            Action::DeadLetter { key, item, cause } => {
                // Dropping the message drops a reply channel inside it: a local asker sees
                // `NoReply` at once.
                drop(item);
                self.dead_letter(ctx, key, failure(cause));
            }
            Action::ScheduleIdleCheck { key, at } => {
                ctx.schedule_once(
                    at.saturating_duration_since(now),
                    HostMsg(Inbound::Machine(Event::IdleCheck { key })),
                );
            }
            Action::Activations(count) => {
                self.published = count;
                let me = self.cluster.self_node().clone();
                for peer in self
                    .members
                    .iter()
                    .filter(|m| **m != me)
                    .cloned()
                    .collect::<Vec<_>>()
                {
                    self.peer(&peer).tell(VirtualWire::Load {
                        from: me.clone(),
                        activations: count,
                    });
                }
            }
            Action::HandedOff => {
                tracing::debug!(virtual_type = %self.type_name, "virtual actors handed off");
                self.handed_off = true;
                for waiter in self.hand_off_waiters.drain(..) {
                    waiter.send(());
                }
            }
        }
    }

    fn id(&self, key: &str) -> String {
        actor_id(&self.type_name, key)
    }

    fn start(&mut self, key: String, ctx: &mut Context<Self>) {
        self.next_child += 1;
        let name = child_name(&key, self.next_child);
        let factory = Arc::clone(&self.factory);
        let for_key = key.clone();
        match ctx.spawn(&name, Props::new(move || factory(&for_key))) {
            Ok(activation) => {
                ctx.watch(&activation);
                self.keys_by_id.insert(activation.id(), key.clone());
                self.active.insert(key, activation);
            }
            Err(error) => {
                tracing::warn!(virtual_type = %self.type_name, %key, %error, "activation not started");
                // What was buffered becomes dead letters; the claim is released.
                ctx.myself()
                    .tell(HostMsg(Inbound::Machine(Event::Stopped { key })));
            }
        }
    }

    fn forward(
        &mut self,
        key: String,
        to: &UniqueAddress,
        envelope: Envelope<A::Msg>,
        ctx: &mut Context<Self>,
    ) {
        let remoting = Arc::clone(self.cluster.remoting());
        let body = match with_context(&remoting, || postcard::to_allocvec(&envelope.item)) {
            Ok(body) => body,
            Err(error) => {
                self.dead_letter(ctx, key, VirtualActorFailure::Codec(error.to_string()));
                return;
            }
        };
        let wire = VirtualWire::Forward {
            key,
            hops: envelope.hops,
            placed: envelope.placed,
            from: self.cluster.self_node().clone(),
            body,
        };
        self.peer(to).tell(wire);
    }

    fn peer(&mut self, node: &UniqueAddress) -> &ActorRef<VirtualWire> {
        let (remoting, elements) = (self.cluster.remoting(), host_elements(&self.type_name));
        self.peers
            .entry(node.clone())
            .or_insert_with(|| remoting.remote_ref::<VirtualWire>(&node.address, &elements))
    }

    fn dead_letter(&self, ctx: &Context<Self>, key: String, failure: VirtualActorFailure) {
        ctx.system().dead_letters().publish(DeadLetter {
            recipient: ctx.path().clone(),
            sender: None,
            message_type: std::any::type_name::<A::Msg>(),
            reason: DeadLetterReason::VirtualActor { key, failure },
        });
    }

    fn on_wire(&mut self, wire: VirtualWire, ctx: &mut Context<Self>) {
        match wire {
            VirtualWire::Forward {
                key,
                hops,
                placed,
                from,
                body,
            } => {
                let remoting = Arc::clone(self.cluster.remoting());
                match with_context(&remoting, || postcard::from_bytes::<A::Msg>(&body)) {
                    Ok(item) => self.step(
                        Event::Message {
                            key,
                            envelope: Envelope { item, hops, placed },
                            from: Some(from),
                        },
                        ctx,
                    ),
                    Err(error) => {
                        self.dead_letter(ctx, key, VirtualActorFailure::Codec(error.to_string()));
                    }
                }
            }
            VirtualWire::Load { from, activations } => self.step(
                Event::Load {
                    host: from,
                    activations,
                },
                ctx,
            ),
            VirtualWire::Departing { from } => self.step(Event::Departing(from), ctx),
        }
    }

    fn on_cluster(&mut self, notification: &ClusterNotification, ctx: &mut Context<Self>) {
        if self.fenced {
            return;
        }
        let _ = notification;
        let view = self.cluster.view();
        let me = self.cluster.self_node().clone();
        let members: BTreeSet<UniqueAddress> = view
            .members
            .iter()
            .filter(|m| {
                matches!(
                    m.status,
                    MemberStatus::Up | MemberStatus::Leaving | MemberStatus::Exiting
                )
            })
            .map(|m| m.node.clone())
            .collect();
        let self_status = view.self_member().map(|m| m.status);
        let fenced = matches!(self.cluster.departure(), Some(Departure::Fenced { .. }))
            || matches!(
                self_status,
                Some(MemberStatus::Down | MemberStatus::Removed)
            );
        if fenced {
            self.fenced = true;
            self.step(Event::Fence, ctx);
            return;
        }
        if members != self.members {
            // A host gone from the view (removed, or downed) had its claims: a survivor evicts
            // them so the next message activates those keys elsewhere. Every survivor does, once
            // per host it saw go; evicting twice changes nothing.
            for gone in self.members.difference(&members) {
                if *gone == me {
                    continue;
                }
                self.peers.remove(gone);
                let (directory, host) = (Arc::clone(&self.directory), host_name(gone));
                tokio::spawn(async move {
                    if let Err(error) = directory.evict_host(&host).await {
                        tracing::warn!(%host, %error, "evicting a gone host's virtual actors failed");
                    }
                });
            }
            // New hosts learn this one's load at once, and that it hands off.
            let added: Vec<UniqueAddress> = members.difference(&self.members).cloned().collect();
            for new in added.iter().filter(|n| **n != me) {
                if self.published > 0 {
                    let count = self.published;
                    self.peer(new).tell(VirtualWire::Load {
                        from: me.clone(),
                        activations: count,
                    });
                }
                if self.leaving {
                    self.peer(new)
                        .tell(VirtualWire::Departing { from: me.clone() });
                }
            }
            self.members = members.clone();
            self.step(Event::Members(members), ctx);
        }
        // Members the view shows leaving take no new activation.
        for departing in view
            .members
            .iter()
            .filter(|m| m.node != me)
            .filter(|m| matches!(m.status, MemberStatus::Leaving | MemberStatus::Exiting))
            .map(|m| m.node.clone())
            .collect::<Vec<_>>()
        {
            self.step(Event::Departing(departing), ctx);
        }
        if !self.leaving
            && matches!(
                self_status,
                Some(MemberStatus::Leaving | MemberStatus::Exiting)
            )
        {
            self.begin_leave(ctx);
        }
    }

    /// Hand every activation off, and tell the other hosts to place nothing new here.
    fn begin_leave(&mut self, ctx: &mut Context<Self>) {
        self.leaving = true;
        let me = self.cluster.self_node().clone();
        for peer in self
            .members
            .iter()
            .filter(|m| **m != me)
            .cloned()
            .collect::<Vec<_>>()
        {
            self.peer(&peer)
                .tell(VirtualWire::Departing { from: me.clone() });
        }
        self.step(Event::Leave, ctx);
    }

    /// Start handing off (if this host has not already) and answer `reply` when done.
    fn on_hand_off(&mut self, reply: ReplyTo<()>, ctx: &mut Context<Self>) {
        if self.handed_off || self.fenced {
            reply.send(());
            return;
        }
        // Pushed first: a host with nothing to hand off reports `HandedOff` within the step.
        self.hand_off_waiters.push(reply);
        if !self.leaving {
            self.begin_leave(ctx);
        }
    }

    fn on_resynced(
        &mut self,
        owned: &BTreeSet<String>,
        revision: Revision,
        ctx: &mut Context<Self>,
    ) {
        let me = self.cluster.self_node().clone();
        let lost: Vec<String> = self
            .active
            .keys()
            .filter(|key| !owned.contains(*key))
            .cloned()
            .collect();
        for key in lost {
            self.step(
                Event::Watched {
                    key,
                    change: Watched::Released(me.clone()),
                    revision,
                },
                ctx,
            );
        }
    }

    fn status(&self) -> HostStatus {
        let mut active: Vec<String> = self.active.keys().cloned().collect();
        active.sort_unstable();
        HostStatus {
            active,
            routes: self
                .machine
                .as_ref()
                .map(|m| {
                    m.routes()
                        .map(|(key, via)| (key.to_owned(), via.clone()))
                        .collect()
                })
                .unwrap_or_default(),
            members: self.members.iter().cloned().collect(),
        }
    }
}

impl<A> Actor for VirtualHost<A>
where
    A: Actor,
    A::Msg: RemoteMessage,
{
    type Msg = HostMsg<A::Msg>;

    async fn pre_start(&mut self, ctx: &mut Context<Self>) -> Result<(), ActorError> {
        self.machine = Some(ActivationState::new(
            self.cluster.self_node().clone(),
            self.options.limits(),
            Arc::clone(&self.options.placement),
            rand::random(),
        ));
        self.watch = Some(spawn_watch(
            Arc::clone(&self.directory),
            self.type_name.to_string(),
            self.me.clone(),
            ctx.myself(),
        ));
        self.cluster.subscribe_actor(&ctx.myself());
        Ok(())
    }

    async fn handle(
        &mut self,
        msg: HostMsg<A::Msg>,
        ctx: &mut Context<Self>,
    ) -> Result<(), ActorError> {
        match msg.0 {
            Inbound::Local { key, item } => self.step(
                Event::Message {
                    key,
                    envelope: Envelope::new(item),
                    from: None,
                },
                ctx,
            ),
            Inbound::Wire(wire) => self.on_wire(wire, ctx),
            Inbound::Machine(event) => self.step(event, ctx),
            Inbound::Cluster(notification) => self.on_cluster(&notification, ctx),
            Inbound::Resynced { owned, revision } => self.on_resynced(&owned, revision, ctx),
            Inbound::Status { reply } => reply.send(self.status()),
            Inbound::HandOff { reply } => self.on_hand_off(reply, ctx),
        }
        Ok(())
    }

    async fn on_terminated(
        &mut self,
        terminated: Terminated,
        ctx: &mut Context<Self>,
    ) -> Result<(), ActorError> {
        if let Some(key) = self.keys_by_id.remove(&terminated.id) {
            if self
                .active
                .get(&key)
                .is_some_and(|a| a.id() == terminated.id)
            {
                self.active.remove(&key);
            }
            self.step(Event::Stopped { key }, ctx);
        }
        Ok(())
    }

    async fn post_stop(&mut self, _ctx: &mut Context<Self>) {
        if let Some(watch) = self.watch.take() {
            watch.abort();
        }
        // Stopped without leaving (the type or the node was stopped): give the claims back so
        // the keys activate elsewhere at once, instead of waiting for an eviction.
        let keys: Vec<String> = self.active.drain().map(|(key, _)| key).collect();
        if !self.fenced && !keys.is_empty() {
            let (directory, me, type_name) = (
                Arc::clone(&self.directory),
                self.me.clone(),
                Arc::clone(&self.type_name),
            );
            tokio::spawn(async move {
                for key in keys {
                    let _ = directory.release(&actor_id(&type_name, &key), &me).await;
                }
            });
        }
    }
}

/// The child name of the `n`-th activation on this node, for `key`: readable where the key is
/// a valid name, unique by `n` (a key's next activation may start before the last one ended).
fn child_name(key: &str, n: u64) -> String {
    let readable: String = key
        .chars()
        .take(64)
        .map(|c| {
            if matches!(c, '/' | '#' | '?' | '$' | '~') || c.is_whitespace() || c.is_control() {
                '_'
            } else {
                c
            }
        })
        .collect();
    format!("{readable}~{n}")
}

fn failure(cause: Undelivered) -> VirtualActorFailure {
    match cause {
        Undelivered::BufferFull => VirtualActorFailure::BufferFull,
        Undelivered::TooManyHops => VirtualActorFailure::TooManyHops,
        Undelivered::NoHost => VirtualActorFailure::NoHost,
        Undelivered::OwnerNotMember => VirtualActorFailure::OwnerNotMember,
        Undelivered::DirectoryFailed(error) => VirtualActorFailure::DirectoryFailed(error),
        Undelivered::Fenced => VirtualActorFailure::Fenced,
    }
}

/// Follow the directory's changes of `type_name`'s keys and tell them to `host`: from a
/// snapshot, resuming after the last revision seen when a watch ends, and from a new snapshot
/// (a [`Inbound::Resynced`]) when the history asked for is gone.
fn spawn_watch<M: Send + 'static>(
    directory: Arc<dyn Directory>,
    type_name: String,
    me: String,
    host: ActorRef<HostMsg<M>>,
) -> tokio::task::AbortHandle {
    let prefix = actor_id(&type_name, "");
    let task = tokio::spawn(async move {
        let mut last: Option<Revision> = None;
        loop {
            if host.is_terminated() {
                return;
            }
            let after = match last {
                Some(revision) => revision,
                None => match directory.snapshot().await {
                    Ok(snapshot) => {
                        let owned = snapshot
                            .claims
                            .iter()
                            .filter(|c| c.host == me)
                            .filter_map(|c| c.actor.strip_prefix(&prefix).map(str::to_owned))
                            .collect();
                        host.tell(HostMsg(Inbound::Resynced {
                            owned,
                            revision: snapshot.revision,
                        }));
                        snapshot.revision
                    }
                    Err(error) => {
                        tracing::debug!(%error, "virtual actor directory snapshot failed; retrying");
                        tokio::time::sleep(Duration::from_millis(500)).await;
                        continue;
                    }
                },
            };
            last = Some(after);
            let mut watch = match directory.watch(after).await {
                Ok(watch) => watch,
                Err(DirectoryError::Compacted { .. }) => {
                    last = None;
                    continue;
                }
                Err(error) => {
                    tracing::debug!(%error, "virtual actor directory watch failed; retrying");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    continue;
                }
            };
            while let Some(next) = watch.next().await {
                let event = match next {
                    Ok(event) => event,
                    Err(DirectoryError::Compacted { .. }) => {
                        last = None;
                        break;
                    }
                    Err(_) => break,
                };
                last = Some(event.revision);
                let (actor, change) = match event.change {
                    DirectoryChange::Claimed { actor, host } => {
                        (actor, parse_host(&host).map(Watched::Claimed))
                    }
                    DirectoryChange::Released { actor, host } => {
                        (actor, parse_host(&host).map(Watched::Released))
                    }
                };
                if let (Some(key), Some(change)) = (actor.strip_prefix(&prefix), change) {
                    host.tell(HostMsg(Inbound::Machine(Event::Watched {
                        key: key.to_owned(),
                        change,
                        revision: event.revision,
                    })));
                }
            }
        }
    });
    task.abort_handle()
}
