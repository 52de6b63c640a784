//! The router's control task: the thin shell that follows membership and, for smallest-mailbox,
//! refreshes depths on a tick — then publishes each new routing table to the router.
//!
//! # Why a task beside the actor
//! The router's mailbox carries the routed messages themselves (its message type is theirs), so
//! nothing else can be queued behind or between them. Everything that changes the table happens
//! here instead, and the router picks up the newest table before each message by checking a
//! watch channel: one atomic load when nothing changed, never an await.
//!
//! # Ordering
//! A table is published before the event that announces it, so any message routed after a
//! subscriber saw `RouteeSetChanged` is routed over that set or a newer one.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::{mpsc, watch};
use tokio::time::{Instant, MissedTickBehavior};

use super::depth_agent::{DEPTH_AGENT_PATH, DepthQuery, DepthReply};
use super::depth_cache::{DepthCache, Reading};
use super::events::{ClusterRouterEvent, DepthSample};
use super::options::ValidOptions;
use super::routee_set::{RouteeSetChange, RoutingTable, routee_nodes};
use crate::Address;
use crate::actor_ref::ActorRef;
use crate::cluster::{Cluster, ClusterSubscription};
use crate::path::ActorPath;
use crate::remoting::RemoteMessage;
use crate::routing::RoutingStrategy;

/// The router's reply inbox and the stream of replies it forwards, tagged with their node.
pub(super) type DepthReplies = (
    ActorRef<DepthReply>,
    mpsc::UnboundedReceiver<(Address, DepthReply)>,
);

/// What the router routes over: the table the decision scans and the refs it delivers through.
pub(super) struct Snapshot<M> {
    /// Bumped whenever the routee set changes (not for depth updates).
    pub(super) generation: u64,
    pub(super) table: RoutingTable,
    /// `routees[i]` is the routee on `table.nodes()[i]`.
    pub(super) routees: Arc<[ActorRef<M>]>,
}

impl<M> Snapshot<M> {
    /// No routees yet.
    pub(super) fn empty(routee_path: &str) -> Self {
        Self {
            generation: 0,
            table: RoutingTable::new(Vec::new(), routee_path),
            routees: Arc::from(Vec::new()),
        }
    }
}

/// The smallest-mailbox half: the cache, the tick count and where replies come from.
struct DepthRefresh {
    cache: DepthCache,
    refresh: Duration,
    tick: u64,
    /// The router's reply inbox, named in every query.
    reply_to: ActorRef<DepthReply>,
    /// The depth agent on each routee node.
    agents: BTreeMap<Address, ActorRef<DepthQuery>>,
    /// The readings in the last published table, one per routee.
    published: Vec<Option<Reading>>,
}

pub(super) struct Control<M: RemoteMessage> {
    cluster: Cluster,
    router: ActorPath,
    routee_path: String,
    role: Option<String>,
    strategy: RoutingStrategy,
    generation: u64,
    table: RoutingTable,
    routees: Arc<[ActorRef<M>]>,
    depths: Option<DepthRefresh>,
    replies: Option<mpsc::UnboundedReceiver<(Address, DepthReply)>>,
    publish: watch::Sender<Arc<Snapshot<M>>>,
}

impl<M: RemoteMessage> Control<M> {
    /// A control for the router at `router`, starting from the empty set; `depth_replies` (the
    /// reply inbox and its stream) turns on the depth refresh.
    pub(super) fn new(
        options: &ValidOptions<M>,
        router: ActorPath,
        depth_replies: Option<DepthReplies>,
    ) -> (Self, watch::Receiver<Arc<Snapshot<M>>>) {
        let empty = Snapshot::empty(&options.routee_path);
        let (table, routees) = (empty.table.clone(), Arc::clone(&empty.routees));
        let (publish, updates) = watch::channel(Arc::new(empty));
        let (depths, replies) = match depth_replies {
            Some((reply_to, replies)) => (
                Some(DepthRefresh {
                    cache: DepthCache::new(options.stale_after),
                    refresh: options.refresh,
                    tick: 0,
                    reply_to,
                    agents: BTreeMap::new(),
                    published: Vec::new(),
                }),
                Some(replies),
            ),
            None => (None, None),
        };
        let control = Self {
            cluster: options.cluster.clone(),
            router,
            routee_path: options.routee_path.clone(),
            role: options.role.clone(),
            strategy: options.strategy,
            generation: 0,
            table,
            routees,
            depths,
            replies,
            publish,
        };
        (control, updates)
    }

    /// Follow membership and refresh depths until the router goes away.
    pub(super) async fn run(mut self, mut membership: ClusterSubscription) {
        let mut following = true;
        let mut replies = self.replies.take();
        let refresh = self
            .depths
            .as_ref()
            .map_or(Duration::from_secs(3_600), |d| d.refresh);
        let mut ticker = tokio::time::interval(refresh);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let refreshing = self.depths.is_some();
        loop {
            let expiry = self
                .depths
                .as_ref()
                .and_then(|d| d.cache.next_expiry(Instant::now()));
            tokio::select! {
                notification = membership.recv(), if following => match notification {
                    Some(_) => self.on_membership(),
                    // The cluster is gone: keep routing over the last set.
                    None => following = false,
                },
                Some((node, reply)) = recv(&mut replies), if replies.is_some() => {
                    self.on_reply(&node, reply);
                }
                _ = ticker.tick(), if refreshing => self.on_tick(),
                () = tokio::time::sleep_until(expiry.unwrap_or_else(Instant::now)), if expiry.is_some() => {
                    self.publish_depths();
                }
            }
            if self.publish.is_closed() {
                return;
            }
        }
    }

    /// Re-derive the routee set from the current view; publish and announce it if it changed.
    pub(super) fn on_membership(&mut self) {
        let nodes = routee_nodes(&self.cluster.view(), self.role.as_deref());
        if nodes == self.table.nodes() {
            return;
        }
        let change = RouteeSetChange::between(self.table.nodes(), &nodes);
        let remoting = self.cluster.remoting();
        let routees: Vec<ActorRef<M>> = nodes
            .iter()
            .map(|node| match self.table.nodes().binary_search(node) {
                Ok(kept) => self.routees[kept].clone(),
                Err(_) => remoting.remote_ref::<M>(node, &self.routee_path),
            })
            .collect();
        let mut table = RoutingTable::new(nodes.clone(), &self.routee_path);
        if let Some(depths) = &mut self.depths {
            depths.cache.set_nodes(&nodes);
            depths
                .agents
                .retain(|node, _| nodes.binary_search(node).is_ok());
            depths.published = depths.cache.readings(&nodes, Instant::now());
            table = table.with_readings(&depths.published);
        }
        self.table = table;
        self.routees = routees.into();
        self.generation += 1;
        self.send_snapshot();
        tracing::info!(
            router = %self.router,
            routees = ?nodes,
            added = ?change.added,
            removed = ?change.removed,
            "cluster router routee set changed"
        );
        self.cluster
            .system()
            .event_stream()
            .publish(ClusterRouterEvent::RouteeSetChanged {
                router: self.router.clone(),
                strategy: self.strategy,
                routee_path: self.routee_path.clone(),
                routees: nodes,
                added: change.added,
                removed: change.removed,
            });
    }

    /// Ask the nodes that are due for their routee's depth.
    fn on_tick(&mut self) {
        let Some(depths) = &mut self.depths else {
            return;
        };
        depths.tick += 1;
        let remoting = self.cluster.remoting();
        for node in depths.cache.due(depths.tick) {
            let agent = depths
                .agents
                .entry(node)
                .or_insert_with_key(|node| remoting.remote_ref(node, DEPTH_AGENT_PATH));
            agent.tell(DepthQuery {
                path: self.routee_path.clone(),
                reply_to: depths.reply_to.clone(),
            });
        }
        self.publish_depths();
    }

    fn on_reply(&mut self, node: &Address, reply: DepthReply) {
        let Some(depths) = &mut self.depths else {
            return;
        };
        if reply.path != self.routee_path {
            return;
        }
        let now = Instant::now();
        let depth = reply
            .depth
            .map(|depth| usize::try_from(depth).unwrap_or(usize::MAX));
        if !depths.cache.record(node, depth, now) {
            return;
        }
        self.publish_depths();
        if let Some(depth) = depth {
            self.cluster
                .system()
                .event_stream()
                .publish(ClusterRouterEvent::DepthSample(DepthSample {
                    router: self.router.clone(),
                    node: node.clone(),
                    path: reply.path,
                    depth,
                    at: now,
                    wall_clock: SystemTime::now(),
                }));
        }
    }

    /// Publish the usable readings if they differ from the published ones (a new reading, or
    /// one that just went stale).
    fn publish_depths(&mut self) {
        let Some(depths) = &mut self.depths else {
            return;
        };
        let readings = depths.cache.readings(self.table.nodes(), Instant::now());
        if readings != depths.published {
            self.table = self.table.with_readings(&readings);
            depths.published = readings;
            self.send_snapshot();
        }
    }

    fn send_snapshot(&self) {
        self.publish.send_replace(Arc::new(Snapshot {
            generation: self.generation,
            table: self.table.clone(),
            routees: Arc::clone(&self.routees),
        }));
    }
}

async fn recv<T>(receiver: &mut Option<mpsc::UnboundedReceiver<T>>) -> Option<T> {
    match receiver {
        Some(receiver) => receiver.recv().await,
        None => None,
    }
}
