//! The singleton manager's lifecycle as a pure state machine: `step(state, event, now)` returns
//! the next state and the actions the actor shell performs (send, spawn, stop, acquire, release,
//! publish). No actors, sockets or clocks: every rule below is unit- and property-tested here.
//!
//! # Hosting
//! A manager hosts when its view elects this node, it is not latched out, not being stopped and
//! has not yielded to a peer. Before spawning it completes a hand-over round (every peer that
//! could be hosting acknowledged, left, or the timeout passed), then — with a lease — acquires
//! the lease, and only then spawns. Everything asynchronous (acquire, release, termination)
//! comes back as an event, so a membership change can never interleave with an operation in
//! flight: at most one acquire or release runs, an acquire starts only when no instance exists
//! or is stopping, and a release happens only after the instance has terminated.
//!
//! # Stepping down
//! A manager that should not host stops its instance with a poison pill (the mailbox drains,
//! `post_stop` runs), waits for it to terminate, then releases the lease. It acknowledges a
//! hand-over request only in that settled state: no instance, none stopping, no lease held.
//!
//! # Who may ask
//! A request counts only with a transport-verified origin. A manager that believes it is the
//! host yields only to a peer that sorts before it and might still become up in this view
//! (joining or weakly up here: its up status has not arrived yet); it then stays out until that
//! peer is up here (and elected) or gone. A manager that does not believe it is the host has
//! nothing to defend and acknowledges anyone once settled.
//!
//! # Unexpected death
//! An instance that terminates without being asked is spawned again after [`RESPAWN_BACKOFF`]
//! (its supervisor may just have exhausted its restart budget). With
//! `restart_on_termination(false)` the manager instead latches out of hosting for good: it
//! releases the lease and dead-letters messages at once until it is stopped and started again.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::election::{elect_host, hand_over_peers, is_trigger, may_become_host};
use super::event::{SingletonEvent, StopReason};
use super::hand_over::{HandOver, HandOverTick};
use crate::Address;
use crate::cluster::{ClusterEvent, Member};
use crate::lease::FencingToken;

/// How long a manager waits before spawning an instance that died unexpectedly again.
pub const RESPAWN_BACKOFF: Duration = Duration::from_secs(1);

/// How long a manager waits before retrying a spawn whose name was still taken.
pub(super) const SPAWN_RETRY: Duration = Duration::from_millis(20);

/// What the manager was started with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ManagerConfig {
    /// The singleton's name.
    pub type_name: Arc<str>,
    /// This node.
    pub me: Address,
    /// Only members carrying this role host.
    pub role: Option<String>,
    /// Whether hosting is gated by a lease.
    pub uses_lease: bool,
    /// Spawn again after an unexpected death (else latch out).
    pub restart_on_termination: bool,
    /// How long a hand-over waits for silent peers.
    pub hand_over_timeout: Duration,
    /// How long to wait after a failed acquire.
    pub acquire_retry_interval: Duration,
}

/// What happens to the manager.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Event {
    /// The cluster view: `event` is `None` for the view at subscription time.
    Cluster {
        /// The change, or `None` for the initial state.
        event: Option<ClusterEvent>,
        /// The members of the view after it.
        members: Vec<Member>,
    },
    /// A peer asks this node to step down. `from` is the transport-verified origin.
    HandOverRequest {
        /// Who asks (`None`: not from the network — ignored).
        from: Option<Address>,
        /// The round.
        nonce: u64,
    },
    /// A peer acknowledged this node's request.
    HandOverAcknowledgment {
        /// Who answers (`None`: not from the network — ignored).
        from: Option<Address>,
        /// The round.
        nonce: u64,
    },
    /// The spawn was refused (the name is still taken by the terminating instance).
    SpawnFailed,
    /// The instance terminated.
    InstanceTerminated,
    /// The acquire resolved: this node holds the lease.
    LeaseAcquired(FencingToken),
    /// The acquire resolved: another owner holds the lease.
    LeaseDenied,
    /// The acquire failed.
    LeaseFailed,
    /// The grant with this token was lost.
    LeaseLost(FencingToken),
    /// The release resolved (successfully or not: an unreleased grant expires).
    LeaseReleased,
    /// A timer fired.
    Tick,
    /// `stop(..)` was called: step down for good.
    Deactivate,
}

/// What the shell should do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Action {
    /// Send `HandOverRequest { nonce }` to each of `to`.
    SendHandOverRequest {
        /// The peers.
        to: Vec<Address>,
        /// The round.
        nonce: u64,
    },
    /// Send `HandOverAcknowledgment { nonce }` to `to`.
    SendHandOverAcknowledgment {
        /// The requester.
        to: Address,
        /// Its round.
        nonce: u64,
    },
    /// Spawn the instance, watch it, and flush held messages into it in order.
    SpawnInstance,
    /// Send the instance a poison pill.
    StopInstance,
    /// Start acquiring the lease; the result comes back as an event.
    AcquireLease,
    /// Start releasing the lease; [`Event::LeaseReleased`] follows.
    ReleaseLease,
    /// Send every held message to dead letters (no prospect of hosting).
    DeadLetterHeld,
    /// Deactivation finished: no instance, no lease.
    Deactivated,
    /// Publish this on the event stream (and log it).
    Publish(SingletonEvent),
}

/// Where a message for the singleton goes right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Routing {
    /// Into the running instance.
    Deliver,
    /// Into the hold buffer.
    Hold,
    /// To dead letters at once (latched out or being stopped).
    DeadLetter,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Instance {
    Absent,
    Running,
    Stopping(StopReason),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum HandOverPhase {
    NotStarted,
    Open(HandOver),
    Done,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LeasePhase {
    Idle,
    Acquiring,
    Held(FencingToken),
    Releasing,
}

/// One manager's state.
#[derive(Debug, Clone)]
pub(super) struct ManagerState {
    config: ManagerConfig,
    members: Vec<Member>,
    host: Option<Address>,
    elected_once: bool,
    instance: Instance,
    hand_over: HandOverPhase,
    lease: LeasePhase,
    lease_retry_at: Option<Instant>,
    respawn_at: Option<Instant>,
    spawn_retry_at: Option<Instant>,
    respawning: bool,
    latched_out: bool,
    yielded_to: BTreeSet<Address>,
    waiting_acks: BTreeMap<Address, u64>,
    deactivating: bool,
    deactivated: bool,
    next_nonce: u64,
}

impl ManagerState {
    /// A manager that knows no members yet; `nonce_seed` makes its hand-over rounds distinct
    /// from those of earlier incarnations.
    #[must_use]
    pub(super) fn new(config: ManagerConfig, nonce_seed: u64) -> Self {
        Self {
            config,
            members: Vec::new(),
            host: None,
            elected_once: false,
            instance: Instance::Absent,
            hand_over: HandOverPhase::NotStarted,
            lease: LeasePhase::Idle,
            lease_retry_at: None,
            respawn_at: None,
            spawn_retry_at: None,
            respawning: false,
            latched_out: false,
            yielded_to: BTreeSet::new(),
            waiting_acks: BTreeMap::new(),
            deactivating: false,
            deactivated: false,
            next_nonce: nonce_seed,
        }
    }

    /// The host this node's view elects.
    #[must_use]
    pub(super) fn host(&self) -> Option<&Address> {
        self.host.as_ref()
    }

    /// Whether an instance runs (and is not being stopped).
    #[must_use]
    pub(super) fn is_hosting(&self) -> bool {
        self.instance == Instance::Running
    }

    /// Whether the manager has opted out of hosting after its instance ended.
    #[must_use]
    pub(super) fn is_latched_out(&self) -> bool {
        self.latched_out
    }

    /// Whether this manager holds the lease.
    #[must_use]
    pub(super) fn holds_lease(&self) -> bool {
        matches!(self.lease, LeasePhase::Held(_))
    }

    /// The peers of the open hand-over round that have not acknowledged yet.
    #[must_use]
    pub(super) fn awaiting_acknowledgments(&self) -> Vec<Address> {
        match &self.hand_over {
            HandOverPhase::Open(round) => round.pending.iter().cloned().collect(),
            HandOverPhase::NotStarted | HandOverPhase::Done => Vec::new(),
        }
    }

    /// Where the lease is: `idle`, `acquiring`, `held` or `releasing`.
    #[must_use]
    pub(super) fn lease_phase(&self) -> &'static str {
        match self.lease {
            LeasePhase::Idle => "idle",
            LeasePhase::Acquiring => "acquiring",
            LeasePhase::Held(_) => "held",
            LeasePhase::Releasing => "releasing",
        }
    }

    /// Where a message for the singleton goes now.
    #[must_use]
    pub(super) fn routing(&self) -> Routing {
        if self.latched_out || self.deactivating {
            Routing::DeadLetter
        } else if self.instance == Instance::Running {
            Routing::Deliver
        } else {
            Routing::Hold
        }
    }

    /// The next instant at which a [`Event::Tick`] has something to do.
    #[must_use]
    pub(super) fn next_deadline(&self) -> Option<Instant> {
        let hand_over = match &self.hand_over {
            HandOverPhase::Open(round) => round.next_deadline(),
            _ => None,
        };
        let lease_retry = self
            .lease_retry_at
            .filter(|_| self.lease == LeasePhase::Idle && self.wants_to_host());
        [hand_over, self.respawn_at, self.spawn_retry_at, lease_retry]
            .into_iter()
            .flatten()
            .min()
    }

    fn believes_host(&self) -> bool {
        self.host.as_ref() == Some(&self.config.me) && !self.latched_out && !self.deactivating
    }

    fn wants_to_host(&self) -> bool {
        self.believes_host() && self.yielded_to.is_empty()
    }

    fn role(&self) -> Option<&str> {
        self.config.role.as_deref()
    }

    fn publish(&self, actions: &mut Vec<Action>, event: SingletonEvent) {
        actions.push(Action::Publish(event));
    }

    fn names(&self) -> (Arc<str>, Address) {
        (Arc::clone(&self.config.type_name), self.config.me.clone())
    }

    fn handle(&mut self, event: Event, now: Instant, actions: &mut Vec<Action>) {
        match event {
            Event::Cluster { event, members } => {
                if event.as_ref().is_some_and(|e| !is_trigger(e)) {
                    return;
                }
                self.on_members(members, now, actions);
            }
            Event::HandOverRequest { from, nonce } => {
                let Some(from) = from else { return };
                if from == self.config.me {
                    return;
                }
                self.on_request(from, nonce);
            }
            Event::HandOverAcknowledgment { from, nonce } => {
                let Some(from) = from else { return };
                if let HandOverPhase::Open(round) = &mut self.hand_over
                    && round.acknowledge(&from, nonce)
                    && round.is_complete()
                {
                    self.complete_hand_over(now, actions);
                }
            }
            Event::SpawnFailed => {
                self.instance = Instance::Absent;
                self.spawn_retry_at = Some(now + SPAWN_RETRY);
            }
            Event::InstanceTerminated => self.on_terminated(now, actions),
            Event::LeaseAcquired(token) => {
                if self.lease == LeasePhase::Acquiring {
                    self.lease = LeasePhase::Held(token);
                    let (type_name, node) = self.names();
                    self.publish(
                        actions,
                        SingletonEvent::LeaseAcquired {
                            type_name,
                            node,
                            token,
                        },
                    );
                }
            }
            Event::LeaseDenied | Event::LeaseFailed => {
                if self.lease == LeasePhase::Acquiring {
                    self.lease = LeasePhase::Idle;
                    self.lease_retry_at = Some(now + self.config.acquire_retry_interval);
                }
            }
            Event::LeaseLost(token) => {
                if self.lease == LeasePhase::Held(token) {
                    self.lease = LeasePhase::Idle;
                    let (type_name, node) = self.names();
                    self.publish(
                        actions,
                        SingletonEvent::LeaseLost {
                            type_name,
                            node,
                            token,
                        },
                    );
                }
            }
            Event::LeaseReleased => {
                if self.lease == LeasePhase::Releasing {
                    self.lease = LeasePhase::Idle;
                    let (type_name, node) = self.names();
                    self.publish(actions, SingletonEvent::LeaseReleased { type_name, node });
                }
            }
            Event::Tick => self.on_tick(now, actions),
            Event::Deactivate => self.deactivating = true,
        }
        self.advance(now, actions);
    }

    fn on_members(&mut self, members: Vec<Member>, now: Instant, actions: &mut Vec<Action>) {
        self.members = members;
        let host = elect_host(&self.members, self.role()).map(|m| m.address().clone());
        if host != self.host || !self.elected_once {
            self.elected_once = true;
            self.host = host.clone();
            let (type_name, node) = self.names();
            self.publish(
                actions,
                SingletonEvent::HostElected {
                    type_name,
                    node,
                    host,
                },
            );
        }
        // A yield lasts while the peer might still come up here; once it is up, the election
        // speaks for it, and once it is leaving or gone it cannot host.
        let role = self.config.role.clone();
        let members = &self.members;
        self.yielded_to.retain(|peer| {
            members
                .iter()
                .any(|m| m.address() == peer && may_become_host(m, role.as_deref()))
        });
        if let HandOverPhase::Open(round) = &mut self.hand_over {
            let peers = hand_over_peers(&self.members, role.as_deref(), &self.config.me);
            let new = round.update_peers(&peers);
            if !new.is_empty() {
                actions.push(Action::SendHandOverRequest {
                    to: new,
                    nonce: round.nonce,
                });
            }
            if round.is_complete() {
                self.complete_hand_over(now, actions);
            }
        }
    }

    fn on_request(&mut self, from: Address, nonce: u64) {
        if self.believes_host() {
            let may_come_up = self
                .members
                .iter()
                .any(|m| m.address() == &from && may_become_host(m, self.role()));
            if from >= self.config.me || !may_come_up {
                // The rightful host sorts first; a request from after us (or from a peer that
                // cannot be up) is not one this node yields to.
                return;
            }
            self.yielded_to.insert(from.clone());
        }
        self.waiting_acks.insert(from, nonce);
    }

    fn on_terminated(&mut self, now: Instant, actions: &mut Vec<Action>) {
        let (type_name, node) = self.names();
        match self.instance {
            Instance::Absent => {}
            Instance::Stopping(reason) => {
                self.instance = Instance::Absent;
                self.publish(
                    actions,
                    SingletonEvent::InstanceStopped {
                        type_name,
                        node,
                        reason,
                    },
                );
            }
            Instance::Running => {
                self.instance = Instance::Absent;
                self.publish(
                    actions,
                    SingletonEvent::InstanceStopped {
                        type_name,
                        node,
                        reason: StopReason::Unexpected,
                    },
                );
                if self.config.restart_on_termination {
                    self.respawn_at = Some(now + RESPAWN_BACKOFF);
                    self.respawning = true;
                } else {
                    self.latched_out = true;
                    actions.push(Action::DeadLetterHeld);
                }
            }
        }
    }

    fn on_tick(&mut self, now: Instant, actions: &mut Vec<Action>) {
        if self.respawn_at.is_some_and(|at| now >= at) {
            self.respawn_at = None;
        }
        if self.spawn_retry_at.is_some_and(|at| now >= at) {
            self.spawn_retry_at = None;
        }
        if let HandOverPhase::Open(round) = &mut self.hand_over {
            match round.tick(now) {
                HandOverTick::Wait => {}
                HandOverTick::Resend(to) => actions.push(Action::SendHandOverRequest {
                    to,
                    nonce: round.nonce,
                }),
                HandOverTick::TimedOut(silent_peers) => {
                    self.hand_over = HandOverPhase::Done;
                    let (type_name, node) = self.names();
                    self.publish(
                        actions,
                        SingletonEvent::HandOverTimedOut {
                            type_name,
                            node,
                            silent_peers,
                        },
                    );
                }
            }
        }
    }

    fn complete_hand_over(&mut self, now: Instant, actions: &mut Vec<Action>) {
        if let HandOverPhase::Open(round) = &self.hand_over {
            let waited = now.saturating_duration_since(round.started);
            self.hand_over = HandOverPhase::Done;
            let (type_name, node) = self.names();
            self.publish(
                actions,
                SingletonEvent::HandOverCompleted {
                    type_name,
                    node,
                    waited,
                },
            );
        }
    }

    /// Move towards what the current facts call for.
    fn advance(&mut self, now: Instant, actions: &mut Vec<Action>) {
        if self.wants_to_host() {
            self.move_towards_hosting(now, actions);
        } else {
            self.move_towards_not_hosting(actions);
        }
        self.send_due_acks(actions);
        if self.deactivating
            && !self.deactivated
            && self.instance == Instance::Absent
            && self.lease == LeasePhase::Idle
        {
            self.deactivated = true;
            actions.push(Action::DeadLetterHeld);
            actions.push(Action::Deactivated);
        }
    }

    fn move_towards_not_hosting(&mut self, actions: &mut Vec<Action>) {
        self.hand_over = HandOverPhase::NotStarted;
        self.respawn_at = None;
        self.respawning = false;
        self.spawn_retry_at = None;
        self.lease_retry_at = None;
        match self.instance {
            Instance::Running => {
                let reason = if self.deactivating {
                    StopReason::ManagerStopped
                } else if self.believes_host() {
                    StopReason::HandedOver
                } else {
                    StopReason::HostMoved
                };
                self.instance = Instance::Stopping(reason);
                actions.push(Action::StopInstance);
            }
            Instance::Stopping(_) => {}
            Instance::Absent => {
                if let LeasePhase::Held(_) = self.lease {
                    self.lease = LeasePhase::Releasing;
                    actions.push(Action::ReleaseLease);
                }
            }
        }
    }

    fn move_towards_hosting(&mut self, now: Instant, actions: &mut Vec<Action>) {
        match self.instance {
            Instance::Running => {
                if self.config.uses_lease && !matches!(self.lease, LeasePhase::Held(_)) {
                    // Lost the lease: stop first, re-acquire only once the instance is gone.
                    self.instance = Instance::Stopping(StopReason::LeaseLost);
                    actions.push(Action::StopInstance);
                }
            }
            Instance::Stopping(_) => {}
            Instance::Absent => {
                if self.respawn_at.is_some() || self.spawn_retry_at.is_some() {
                    return;
                }
                if self.hand_over == HandOverPhase::NotStarted {
                    self.open_hand_over(now, actions);
                }
                if self.hand_over != HandOverPhase::Done {
                    return;
                }
                if self.config.uses_lease {
                    match self.lease {
                        LeasePhase::Held(_) => self.spawn(actions),
                        LeasePhase::Acquiring | LeasePhase::Releasing => {}
                        LeasePhase::Idle => {
                            if self.lease_retry_at.is_none_or(|at| now >= at) {
                                self.lease_retry_at = None;
                                self.lease = LeasePhase::Acquiring;
                                actions.push(Action::AcquireLease);
                            }
                        }
                    }
                } else {
                    self.spawn(actions);
                }
            }
        }
    }

    fn open_hand_over(&mut self, now: Instant, actions: &mut Vec<Action>) {
        let peers = hand_over_peers(&self.members, self.role(), &self.config.me);
        let nonce = self.next_nonce;
        self.next_nonce = self.next_nonce.wrapping_add(1);
        let round = HandOver::start(nonce, peers.clone(), now, self.config.hand_over_timeout);
        let (type_name, node) = self.names();
        self.publish(
            actions,
            SingletonEvent::HandOverStarted {
                type_name,
                node,
                peers: peers.iter().cloned().collect(),
            },
        );
        if !peers.is_empty() {
            actions.push(Action::SendHandOverRequest {
                to: peers.into_iter().collect(),
                nonce,
            });
        }
        self.hand_over = HandOverPhase::Open(round);
        if let HandOverPhase::Open(round) = &self.hand_over
            && round.is_complete()
        {
            self.complete_hand_over(now, actions);
        }
    }

    fn spawn(&mut self, actions: &mut Vec<Action>) {
        self.instance = Instance::Running;
        actions.push(Action::SpawnInstance);
        let (type_name, node) = self.names();
        let event = if std::mem::take(&mut self.respawning) {
            SingletonEvent::InstanceRestarted { type_name, node }
        } else {
            SingletonEvent::InstanceStarted { type_name, node }
        };
        self.publish(actions, event);
    }

    fn send_due_acks(&mut self, actions: &mut Vec<Action>) {
        let settled = self.instance == Instance::Absent && self.lease == LeasePhase::Idle;
        if !settled || self.waiting_acks.is_empty() {
            return;
        }
        for (peer, nonce) in std::mem::take(&mut self.waiting_acks) {
            // Re-check: the view may have changed since the request arrived.
            if !self.believes_host() || self.yielded_to.contains(&peer) {
                actions.push(Action::SendHandOverAcknowledgment { to: peer, nonce });
            }
        }
    }
}

/// Advances the manager by one event at `now`.
#[must_use]
pub(super) fn step(
    mut state: ManagerState,
    event: Event,
    now: Instant,
) -> (ManagerState, Vec<Action>) {
    let mut actions = Vec::new();
    state.handle(event, now, &mut actions);
    (state, actions)
}

#[cfg(test)]
mod tests;
