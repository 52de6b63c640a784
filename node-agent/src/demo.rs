//! The demo workload (`troupe-agent --demo`): something for the control plane to show.
//!
//! Every node runs a compute worker at [`WORKER_PATH`] and a smallest-mailbox cluster router
//! at [`ROUTER_PATH`] over the workers of every up member, and takes part in hosting the
//! cluster singleton [`SCHEDULER`]. Wherever the singleton runs, about once a second it creates
//! a burst of jobs and sends them through that node's router; workers sleep and compute for each
//! job, so their mailboxes fill and drain and the router spreads the load. Every few seconds the
//! scheduler also sends a job to [`RETIRED_WORKER_PATH`], where a previous version of the worker
//! used to live: nothing is there any more, so the receiving node records a dead letter.
//!
//! Stop the singleton's host (Ctrl-C, SIGTERM) and the next node takes over after a hand-over;
//! the routers drop the departed node's worker from their routee set.
//!
//! # Supervision tree (per node)
//! ```text
//! /user/worker                            ComputeWorker (demo/worker.rs)
//! /user/compute-router                    ClusterRouter<Job>, smallest mailbox
//! /system/cluster/singleton/
//! └── manager-job-scheduler               SingletonManager
//!     └── job-scheduler                   JobScheduler (demo/scheduler.rs), on one node only
//! /system/cluster-mailbox-depth-agent     answers the routers' depth queries
//! ```

pub mod scheduler;
pub mod worker;

use std::time::Duration;

use troupe::cluster_router::{
    ClusterMailboxDepthAgent, ClusterRouter, ClusterRouterError, ClusterRouterOptions,
    ServingDepths,
};
use troupe::routing::RoutingStrategy;
use troupe::singleton::{SingletonKey, SingletonProxy, StartSingletonOptions};
use troupe::{ActorRef, Props, SpawnError};

pub use scheduler::{JobScheduler, SchedulerMsg, SchedulerSettings};

use crate::agent::AgentContext;
pub use worker::{ComputeWorker, Job};

/// The singleton's name.
pub const SCHEDULER: &str = "job-scheduler";
/// Where each node's worker lives.
pub const WORKER_PATH: &str = "/user/worker";
/// Where each node's router lives.
pub const ROUTER_PATH: &str = "/user/compute-router";
/// Where the worker lived before it was renamed; nothing lives there now.
pub const RETIRED_WORKER_PATH: &str = "/user/worker-v1";

/// Why the demo could not start.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// An actor could not be spawned (the system is shutting down?).
    #[error("spawning a demo actor: {0}")]
    Spawn(#[from] SpawnError),
    /// The router's options were rejected.
    #[error("demo router: {0}")]
    Router(#[from] ClusterRouterError),
    /// The singleton could not be started (or its lease not made).
    #[error("demo singleton: {0}")]
    Singleton(crate::agent::AppError),
}

/// The demo running on one node.
#[derive(Debug)]
pub struct Demo {
    router: ActorRef<Job>,
    scheduler: SingletonProxy<SchedulerMsg>,
    _depths: ServingDepths,
}

impl Demo {
    /// This node's router.
    #[must_use]
    pub fn router(&self) -> &ActorRef<Job> {
        &self.router
    }

    /// The proxy to the scheduler singleton.
    #[must_use]
    pub fn scheduler(&self) -> &SingletonProxy<SchedulerMsg> {
        &self.scheduler
    }
}

/// Start the demo's actors on this node with the default pace; the singleton takes the
/// agent's singleton lease (`--singleton-lease`) when it has one.
///
/// # Errors
/// When an actor cannot be spawned or the singleton cannot be started.
pub fn start_in(context: &AgentContext) -> Result<Demo, DemoError> {
    start_with(context, SchedulerSettings::default())
}

/// Start the demo's actors on this node, scheduling at `settings`' pace.
///
/// # Errors
/// When an actor cannot be spawned or the singleton cannot be started.
pub fn start_with(context: &AgentContext, settings: SchedulerSettings) -> Result<Demo, DemoError> {
    let cluster = context.cluster();
    let system = cluster.system();
    cluster.remoting().register::<Job>();
    system.spawn(
        WORKER_PATH.trim_start_matches("/user/"),
        Props::new(ComputeWorker::default),
    )?;
    let depths = ClusterMailboxDepthAgent::serve(cluster)?;
    let options = ClusterRouterOptions::new(cluster, RoutingStrategy::SmallestMailbox, WORKER_PATH)
        .with_mailbox_depth_refresh(Duration::from_millis(250));
    let router = system.spawn(
        ROUTER_PATH.trim_start_matches("/user/"),
        ClusterRouter::factory(options)?,
    )?;
    let key = SingletonKey::of::<SchedulerMsg>(SCHEDULER, None);
    let (for_scheduler, for_cluster) = (router.clone(), cluster.clone());
    let props = Props::new(move || {
        JobScheduler::new(for_scheduler.clone(), for_cluster.clone(), settings.clone())
    });
    let scheduler = context
        .start_singleton(&key, StartSingletonOptions::new(props))
        .map_err(DemoError::Singleton)?;
    tracing::info!(
        node = %cluster.self_address(),
        "demo workload started: worker at {WORKER_PATH}, router at {ROUTER_PATH}, singleton {SCHEDULER}"
    );
    Ok(Demo {
        router,
        scheduler,
        _depths: depths,
    })
}
