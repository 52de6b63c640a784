//! The cluster daemon: the thin async shell around the membership state machine. It feeds the
//! machine ticks, verified inbound frames and API calls, performs its actions on the transport,
//! and publishes each new view.
//!
//! # Ordering
//! Everything reaches the machine through the daemon's mailbox, one input at a time, so a tick
//! never interleaves with a message being handled.

use std::sync::Arc;

use parking_lot::Mutex;
use rand::SeedableRng;
use rand::rngs::SmallRng;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::Shared;
use super::membership::{Action, Input, Membership, MembershipSettings, SettingsError};
use super::wire::{decode_cluster_frame, encode_cluster_frame};
use crate::actor::{Actor, ActorError};
use crate::actor_ref::ActorRef;
use crate::context::Context;
use crate::props::Props;
use crate::remote::{InboundFrame, Remoting, Transport};
use crate::supervision::SupervisorStrategy;
use crate::system::{ActorSystem, SpawnError};

/// Why the cluster could not start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClusterError {
    /// A settings value cannot work.
    #[error("invalid cluster settings: {0}")]
    Settings(#[from] SettingsError),
    /// The daemon could not be spawned (a cluster already runs in this system?).
    #[error("cannot start the cluster daemon: {0}")]
    Spawn(#[from] SpawnError),
}

/// The daemon's messages.
pub(crate) enum DaemonMsg {
    /// Time to gossip.
    GossipTick,
    /// Time to heartbeat.
    HeartbeatTick,
    /// A frame from a verified peer.
    Inbound(InboundFrame),
    /// A call from the `Cluster` handle.
    Api(Input),
}

struct ClusterDaemon {
    membership: Membership,
    transport: Arc<dyn Transport>,
    remoting: Arc<Remoting>,
    inbound: Option<mpsc::UnboundedReceiver<InboundFrame>>,
    shared: Arc<Mutex<Shared>>,
    rng: SmallRng,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

pub(crate) fn spawn(
    system: &ActorSystem,
    remoting: Arc<Remoting>,
    inbound: mpsc::UnboundedReceiver<InboundFrame>,
    settings: MembershipSettings,
    rng_seed: Option<u64>,
    shared: Arc<Mutex<Shared>>,
) -> Result<ActorRef<DaemonMsg>, ClusterError> {
    let me = remoting.local().clone();
    let mut parts = Some((remoting, inbound, settings, shared));
    let props = Props::new(move || {
        let (remoting, inbound, settings, shared) =
            parts.take().expect("the cluster daemon is built once");
        ClusterDaemon {
            membership: Membership::new(me.clone(), settings, Instant::now()),
            transport: Arc::clone(remoting.transport()),
            remoting,
            inbound: Some(inbound),
            shared,
            rng: SmallRng::seed_from_u64(rng_seed.unwrap_or_else(rand::random)),
            tasks: Vec::new(),
        }
    })
    // Its state is the membership: a restart would forget it. A failure stops the daemon and
    // the node drops out (peers see it unreachable), which is the honest outcome.
    .with_supervisor(SupervisorStrategy::stop());
    Ok(system.spawn_system("cluster-core", props)?)
}

impl ClusterDaemon {
    fn apply(&mut self, input: Input, ctx: &mut Context<Self>) {
        let actions = self.membership.handle(input, Instant::now(), &mut self.rng);
        for action in actions {
            match action {
                Action::Send { to, message } => {
                    if let Err(error) = self.transport.send(&to, encode_cluster_frame(&message)) {
                        tracing::debug!(peer = %to, %error, "cluster message not sent");
                    }
                }
                Action::Terminate => {
                    tracing::info!(node = %self.membership.me(), "left the cluster");
                    ctx.stop_self();
                }
            }
        }
        self.publish(ctx);
    }

    fn publish(&mut self, ctx: &mut Context<Self>) {
        let view = self.membership.view();
        let system = ctx.system();
        let mut shared = self.shared.lock();
        if shared.view == view {
            return;
        }
        let removed: Vec<_> = shared
            .view
            .members
            .iter()
            .filter(|m| !view.members.iter().any(|n| n.node == m.node))
            .map(|m| m.node.address.clone())
            .collect();
        shared.publish(view, &system);
        drop(shared);
        for address in removed {
            self.remoting.node_removed(&address);
            if address != self.membership.me().address {
                self.transport.disconnect(&address);
            }
        }
    }
}

impl Actor for ClusterDaemon {
    type Msg = DaemonMsg;

    async fn pre_start(&mut self, ctx: &mut Context<Self>) -> Result<(), ActorError> {
        let settings = self.membership.settings().clone();
        let me = ctx.myself();
        let ticker = |period, message: fn() -> DaemonMsg, me: ActorRef<DaemonMsg>| {
            tokio::spawn(async move {
                let mut interval = tokio::time::interval(period);
                interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    interval.tick().await;
                    if me.try_tell(message()).is_err() {
                        return;
                    }
                }
            })
        };
        self.tasks.push(ticker(
            settings.gossip_interval,
            || DaemonMsg::GossipTick,
            me.clone(),
        ));
        self.tasks.push(ticker(
            settings.heartbeat_interval,
            || DaemonMsg::HeartbeatTick,
            me.clone(),
        ));
        if let Some(mut inbound) = self.inbound.take() {
            self.tasks.push(tokio::spawn(async move {
                while let Some(frame) = inbound.recv().await {
                    if me.try_tell(DaemonMsg::Inbound(frame)).is_err() {
                        return;
                    }
                }
            }));
        }
        Ok(())
    }

    async fn handle(&mut self, msg: DaemonMsg, ctx: &mut Context<Self>) -> Result<(), ActorError> {
        let input = match msg {
            DaemonMsg::GossipTick => Input::GossipTick,
            DaemonMsg::HeartbeatTick => Input::HeartbeatTick,
            DaemonMsg::Api(input) => input,
            DaemonMsg::Inbound(frame) => match decode_cluster_frame(&frame.payload) {
                Ok(message) => Input::Received {
                    from: frame.from,
                    message,
                },
                Err(error) => {
                    tracing::warn!(peer = %frame.from, %error, "dropped undecodable cluster frame");
                    return Ok(());
                }
            },
        };
        self.apply(input, ctx);
        Ok(())
    }

    async fn post_stop(&mut self, ctx: &mut Context<Self>) {
        for task in self.tasks.drain(..) {
            task.abort();
        }
        let mut shared = self.shared.lock();
        shared.terminated = true;
        let system = ctx.system();
        let view = self.membership.view();
        shared.publish(view, &system);
    }
}
