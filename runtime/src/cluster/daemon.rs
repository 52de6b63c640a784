//! The gossip membership provider: the cluster daemon, a thin async shell around the
//! membership state machine. It feeds the machine ticks, verified inbound frames and API calls,
//! performs its actions on the transport, and publishes each new view.
//!
//! # Ordering
//! Everything reaches the machine through the daemon's mailbox, one input at a time, so a tick
//! never interleaves with a message being handled.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::error::ClusterError;
use super::membership::{self, ClusterMsg};
use super::membership::{Action, Input, Membership, MembershipOptions};
use super::provider::{Departure, MembershipControl, MembershipProvider, ViewSink};
use super::wire::{Extensions, decode_cluster_frame_with, encode_cluster_frame_with};
use crate::Address;
use crate::actor::{Actor, ActorError};
use crate::actor_ref::ActorRef;
use crate::context::Context;
use crate::props::Props;
use crate::supervision::SupervisorStrategy;
use crate::system::ActorSystem;
use crate::transport::{InboundFrame, Transport};

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

/// Gossip membership (the default provider): seed nodes, phi-accrual failure detection,
/// leader actions on convergence.
pub struct GossipMembership {
    settings: MembershipOptions,
    rng_seed: Option<u64>,
    frames: mpsc::UnboundedReceiver<InboundFrame>,
}

impl std::fmt::Debug for GossipMembership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GossipMembership")
            .field("settings", &self.settings)
            .finish()
    }
}

impl GossipMembership {
    /// Gossip membership with `settings`, fed the membership frames on `frames`. With
    /// `rng_seed`, its random choices replay exactly (tests).
    pub fn new(
        settings: MembershipOptions,
        rng_seed: Option<u64>,
        frames: mpsc::UnboundedReceiver<InboundFrame>,
    ) -> Self {
        Self {
            settings,
            rng_seed,
            frames,
        }
    }
}

impl MembershipProvider for GossipMembership {
    fn start(
        self: Box<Self>,
        system: &ActorSystem,
        sink: ViewSink,
    ) -> Result<Arc<dyn MembershipControl>, ClusterError> {
        let Self {
            settings,
            rng_seed,
            frames,
        } = *self;
        let me = sink.remoting().local().clone();
        let mut parts = Some((frames, settings, sink));
        let props = Props::new(move || {
            let (frames, settings, sink) = parts.take().expect("the cluster daemon is built once");
            ClusterDaemon {
                membership: Some(Membership::new(
                    me.clone(),
                    settings,
                    Instant::now(),
                    rng_seed.unwrap_or_else(rand::random),
                )),
                transport: Arc::clone(sink.remoting().transport()),
                inbound: Some(frames),
                sink,
                tasks: Vec::new(),
            }
        })
        // Its state is the membership: a restart would forget it. A failure stops the daemon
        // and the node drops out (peers see it unreachable), which is the honest outcome.
        .with_supervisor(SupervisorStrategy::stop());
        let daemon = system.spawn_system("cluster-core", props)?;
        Ok(Arc::new(GossipControl { daemon }))
    }
}

struct GossipControl {
    daemon: ActorRef<DaemonMsg>,
}

impl MembershipControl for GossipControl {
    fn join(&self, via: Address) {
        self.daemon.tell(DaemonMsg::Api(Input::JoinVia(via)));
    }

    fn leave(&self) {
        self.daemon.tell(DaemonMsg::Api(Input::Leave));
    }

    fn down(&self, node: Address) {
        self.daemon.tell(DaemonMsg::Api(Input::Down(node)));
    }

    fn leave_member(&self, node: Address) {
        self.daemon.tell(DaemonMsg::Api(Input::LeaveMember(node)));
    }

    fn shutdown(&self) {
        self.daemon.stop();
    }

    fn terminated(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(self.daemon.terminated())
    }
}

struct ClusterDaemon {
    /// The membership state machine; `None` only while a step runs.
    membership: Option<Membership>,
    transport: Arc<dyn Transport>,
    inbound: Option<mpsc::UnboundedReceiver<InboundFrame>>,
    sink: ViewSink,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl ClusterDaemon {
    fn membership(&self) -> &Membership {
        self.membership
            .as_ref()
            .expect("the state is put back after each step")
    }

    fn apply(&mut self, input: Input, ctx: &mut Context<Self>) {
        let state = self
            .membership
            .take()
            .expect("the state is put back after each step");
        let (state, actions) = membership::step(state, input, Instant::now());
        self.membership = Some(state);
        let mut terminated = false;
        for action in actions {
            match action {
                Action::Send { to, message } => {
                    if let Err(error) = self.transport.send(
                        &to,
                        encode_cluster_frame_with(&message, &extensions_for(&message)),
                    ) {
                        tracing::debug!(peer = %to, %error, "cluster message not sent");
                    }
                }
                Action::Terminate => terminated = true,
            }
        }
        self.sink.publish(self.membership().view());
        if terminated {
            // After the last view (without this node), so that whoever waits for the
            // departure finds this node's singletons already told to stop.
            self.sink
                .depart(self.membership().departure().unwrap_or(Departure::Stopped));
            ctx.stop_self();
        }
    }
}

impl Actor for ClusterDaemon {
    type Msg = DaemonMsg;

    async fn pre_start(&mut self, ctx: &mut Context<Self>) -> Result<(), ActorError> {
        let settings = self.membership().settings().clone();
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
            settings.gossip_interval(),
            || DaemonMsg::GossipTick,
            me.clone(),
        ));
        self.tasks.push(ticker(
            settings.heartbeat_interval(),
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
            DaemonMsg::Inbound(frame) => match decode_cluster_frame_with(&frame.payload) {
                Ok(decoded) => {
                    let stats = self.sink.remoting().stats();
                    let count = |n: usize| n as u64;
                    stats.extension_records_read.fetch_add(
                        count(decoded.records_read),
                        std::sync::atomic::Ordering::Relaxed,
                    );
                    stats.extension_records_skipped.fetch_add(
                        count(decoded.records_skipped),
                        std::sync::atomic::Ordering::Relaxed,
                    );
                    Input::Received {
                        from: frame.from,
                        message: decoded.message,
                    }
                }
                Err(error) => {
                    tracing::warn!(peer = %frame.from, %error, "dropped undecodable cluster frame");
                    return Ok(());
                }
            },
        };
        self.apply(input, ctx);
        Ok(())
    }

    async fn post_stop(&mut self, _ctx: &mut Context<Self>) {
        for task in self.tasks.drain(..) {
            task.abort();
        }
        self.sink.publish(self.membership().view());
        // Stopped without the protocol terminating (`shutdown`, or a failure of the daemon).
        self.sink.depart(Departure::Stopped);
    }
}

/// The extension values this build sends with `message`.
fn extensions_for(message: &ClusterMsg) -> Extensions {
    match message {
        // The `wire-next` build's added field: when the heartbeat left.
        ClusterMsg::Heartbeat { .. } if cfg!(feature = "wire-next") => Extensions {
            heartbeat_sent_at_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .ok()
                .and_then(|d| u64::try_from(d.as_millis()).ok()),
        },
        _ => Extensions::default(),
    }
}
