//! The cluster router: routes each message to actors at a well-known path on the cluster's up
//! members (optionally only those carrying a role), by one of the five routing strategies, and
//! follows membership without a restart.
//!
//! ```no_run
//! use serde::{Deserialize, Serialize};
//! use troupe::cluster::Cluster;
//! use troupe::cluster_router::{ClusterRouter, ClusterRouterOptions};
//! use troupe::remoting::RemoteMessage;
//! use troupe::routing::RoutingStrategy;
//!
//! #[derive(Debug, Serialize, Deserialize)]
//! struct Job { payload: String }
//!
//! impl RemoteMessage for Job {
//!     const MANIFEST: &'static str = "app.Job";
//! }
//!
//! # fn example(cluster: &Cluster) -> Result<(), Box<dyn std::error::Error>> {
//! // Every node with role "compute" runs its own worker at /user/worker (and registers Job).
//! let options = ClusterRouterOptions::new(cluster, RoutingStrategy::RoundRobin, "/user/worker")
//!     .with_role("compute");
//! let router = cluster.system().spawn("compute-router", ClusterRouter::factory(options)?)?;
//! router.tell(Job { payload: "work-1".into() });
//! # Ok(()) }
//! ```
//!
//! # Supervision tree
//! ```text
//! /user/<router>              ClusterRouter<M>: routes; owns its control task (membership
//! │                           and depth refresh), aborted when the router stops
//! └── depth-replies           smallest-mailbox only: receives the depth agents' replies
//! /system/cluster-mailbox-depth-agent
//!                             ClusterMailboxDepthAgent: one per node, shared by every router
//!                             on it and by `ClusterMailboxDepthAgent::serve`
//! ```
//! Routees belong to their own nodes: stopping the router (`stop()` or a poison pill) stops
//! only the router and its depth-reply inbox, never a routee.
//!
//! # Routee set
//! Re-derived from this node's cluster view on every membership change: up, reachable members
//! carrying the role, ordered by address, each contributing the actor at `routee_path` on it.
//! The router routes over the newest set before each message, without a restart; round-robin
//! resumes after the last routee it chose, by address.
//!
//! # Smallest mailbox
//! The routing decision reads a local table of the last usable depth of each routee and never
//! awaits or queries. A background tick (`mailbox_depth_refresh`) asks the depth agent on each
//! routee node for the depth of its routee; a reading older than `mailbox_depth_stale_after`
//! is not used; a node that has not answered is skipped, not assumed idle; with no usable
//! reading at all the router falls back to round-robin order. Nodes that stay silent are asked
//! less often (backing off to every 16 ticks) so a node without an agent is not flooded.
//!
//! # When a message cannot be routed
//! An empty routee set turns every message into a dead letter (`NoRoutees`) with a warning;
//! nothing is queued. A message the transport cannot take becomes a dead letter on this node; a
//! message for a node without an actor at `routee_path` becomes a dead letter on that node.
//! The router also publishes [`ClusterRouterEvent`]s for the control plane.
//!
//! The guarantees are written down in `docs/runtime-semantics.md` ("Cluster router").

mod control;
mod depth_agent;
mod depth_cache;
mod depth_replies;
mod events;
mod options;
mod routee_set;
mod router;

pub use depth_agent::{ClusterMailboxDepthAgent, DepthAgentStats, ServingDepths};
pub use events::{ClusterRouterEvent, DepthSample};
pub use options::{
    ClusterRouterError, ClusterRouterOptions, DEFAULT_MAILBOX_DEPTH_REFRESH,
    DEFAULT_MAILBOX_DEPTH_STALE_AFTER,
};
pub use routee_set::RoutingTable;
pub use router::ClusterRouter;
