//! [`ClusterMailboxDepthAgent`]: the small framework actor on each node that answers
//! smallest-mailbox routers' depth queries for the local actor at a path, by reading that
//! actor's mailbox depth handle. The routee is an ordinary actor and never learns it is
//! measured: no message reaches it, nothing in it changes.
//!
//! # One agent per node
//! The agent lives at [`DEPTH_AGENT_PATH`]. [`ClusterMailboxDepthAgent::serve`] starts it on
//! the first call and counts holders; every smallest-mailbox router serves on its own node, and
//! a node that hosts routees but no router calls `serve` itself. When the last holder stops
//! serving, the agent stays in place but ignores queries, so routers see the node as silent and
//! skip it; serving again needs no respawn and cannot race a stopping agent.
//!
//! # Protocol
//! [`DepthQuery`] names a routee path and the ref to answer to; [`DepthReply`] carries the path
//! and the depth, or `None` when no actor lives at the path (the router then skips the node,
//! which would only dead-letter the message). The router learns *which* node answered from the
//! transport-verified origin of the reply, never from its payload.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use serde::{Deserialize, Serialize};

use crate::actor::{Actor, ActorError};
use crate::actor_ref::{ActorRef, AnyActorRef};
use crate::cluster::Cluster;
use crate::context::Context;
use crate::props::Props;
use crate::remoting::RemoteMessage;
use crate::system::{SpawnError, SystemShared};

/// Where the depth agent lives on every node.
pub(super) const DEPTH_AGENT_PATH: &str = "/system/cluster-mailbox-depth-agent";
const DEPTH_AGENT_NAME: &str = "cluster-mailbox-depth-agent";

/// Resolved routees kept per agent; past this the cache starts over (queries come from other
/// nodes, so the set of paths must not grow without bound).
const RESOLVED_PATHS_LIMIT: usize = 256;

/// A router asks for the mailbox depth of the actor at `path` on the agent's node.
#[derive(Debug, Serialize, Deserialize)]
pub struct DepthQuery {
    /// The routee path, such as `/user/worker`.
    pub path: String,
    /// Where the [`DepthReply`] goes.
    pub reply_to: ActorRef<DepthReply>,
}

impl RemoteMessage for DepthQuery {
    const MANIFEST: &'static str = "troupe.cluster_router.DepthQuery";
}

/// The agent's answer to a [`DepthQuery`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DepthReply {
    /// The path that was asked about.
    pub path: String,
    /// Its mailbox depth; `None` when no actor lives there.
    pub depth: Option<u64>,
}

impl RemoteMessage for DepthReply {
    const MANIFEST: &'static str = "troupe.cluster_router.DepthReply";
}

/// What one node's agent has done, counted since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DepthAgentStats {
    /// Queries answered.
    pub answered: u64,
    /// Queries ignored because nobody was serving.
    pub ignored: u64,
}

#[derive(Debug, Default)]
struct AgentShared {
    holders: AtomicUsize,
    answered: AtomicU64,
    ignored: AtomicU64,
}

impl AgentShared {
    fn stats(&self) -> DepthAgentStats {
        DepthAgentStats {
            answered: self.answered.load(Ordering::Relaxed),
            ignored: self.ignored.load(Ordering::Relaxed),
        }
    }
}

struct Registered {
    system: Weak<SystemShared>,
    agent: ActorRef<DepthQuery>,
    shared: Arc<AgentShared>,
}

/// The agent of every actor system in this process (tests run many systems in one process).
static AGENTS: Mutex<Vec<Registered>> = Mutex::new(Vec::new());

/// The depth agent actor. Start it with [`ClusterMailboxDepthAgent::serve`].
pub struct ClusterMailboxDepthAgent {
    shared: Arc<AgentShared>,
    resolved: HashMap<String, AnyActorRef>,
}

impl fmt::Debug for ClusterMailboxDepthAgent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterMailboxDepthAgent")
            .field("stats", &self.shared.stats())
            .finish()
    }
}

/// A node serving depths; [`ServingDepths::stop`] stops (this holder's share of) it.
///
/// Dropping the handle without calling `stop` keeps the node serving.
#[derive(Debug)]
#[must_use = "dropping the handle keeps the node serving; call stop() to stop serving"]
pub struct ServingDepths {
    shared: Arc<AgentShared>,
}

impl ServingDepths {
    /// Stop serving. Once every holder on the node has stopped, queries go unanswered and
    /// routers skip this node.
    pub fn stop(self) {
        self.shared.holders.fetch_sub(1, Ordering::AcqRel);
    }

    /// What the node's agent has done so far (shared by every holder on the node).
    #[must_use]
    pub fn stats(&self) -> DepthAgentStats {
        self.shared.stats()
    }
}

impl ClusterMailboxDepthAgent {
    /// Answer depth queries on this node until the returned handle is stopped. Smallest-mailbox
    /// routers call this on their own node; call it on nodes that host routees but no router.
    ///
    /// ```no_run
    /// # fn example(cluster: &troupe::cluster::Cluster) -> Result<(), troupe::SpawnError> {
    /// use troupe::cluster_router::ClusterMailboxDepthAgent;
    ///
    /// let serving = ClusterMailboxDepthAgent::serve(cluster)?;
    /// // ... later, on shutdown:
    /// serving.stop();
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`SpawnError`] when the agent cannot be started (the system is shutting down).
    pub fn serve(cluster: &Cluster) -> Result<ServingDepths, SpawnError> {
        let system = cluster.system();
        cluster.remoting().register::<DepthQuery>();
        let mut agents = AGENTS.lock().unwrap_or_else(PoisonError::into_inner);
        agents.retain(|entry| entry.system.strong_count() > 0 && !entry.agent.is_terminated());
        let this = Arc::as_ptr(&system.shared);
        let shared = match agents.iter().find(|entry| entry.system.as_ptr() == this) {
            Some(entry) => Arc::clone(&entry.shared),
            None => {
                let shared = Arc::new(AgentShared::default());
                let for_agent = Arc::clone(&shared);
                let agent = system.spawn_system(
                    DEPTH_AGENT_NAME,
                    Props::new(move || ClusterMailboxDepthAgent {
                        shared: Arc::clone(&for_agent),
                        resolved: HashMap::new(),
                    }),
                )?;
                agents.push(Registered {
                    system: Arc::downgrade(&system.shared),
                    agent,
                    shared: Arc::clone(&shared),
                });
                shared
            }
        };
        shared.holders.fetch_add(1, Ordering::AcqRel);
        Ok(ServingDepths { shared })
    }

    /// The depth of the live actor at `path`, resolving it once and keeping the handle.
    fn depth_at(&mut self, path: &str, ctx: &Context<Self>) -> Option<u64> {
        if let Some(actor) = self.resolved.get(path) {
            if !actor.is_terminated() {
                return Some(actor.mailbox_depth() as u64);
            }
            self.resolved.remove(path);
        }
        let actor = ctx.system().resolve_any(path).ok()?;
        let depth = actor.mailbox_depth() as u64;
        if self.resolved.len() >= RESOLVED_PATHS_LIMIT {
            self.resolved.clear();
        }
        self.resolved.insert(path.to_owned(), actor);
        Some(depth)
    }
}

impl Actor for ClusterMailboxDepthAgent {
    type Msg = DepthQuery;

    async fn handle(
        &mut self,
        query: DepthQuery,
        ctx: &mut Context<Self>,
    ) -> Result<(), ActorError> {
        if self.shared.holders.load(Ordering::Acquire) == 0 {
            self.shared.ignored.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        let depth = self.depth_at(&query.path, ctx);
        query.reply_to.tell(DepthReply {
            path: query.path,
            depth,
        });
        self.shared.answered.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}
