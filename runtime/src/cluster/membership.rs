//! The gossip membership protocol of one node as a pure state machine: inputs (ticks, received
//! messages, API calls) and the current instant in, messages to send out. No sockets, no
//! clocks, no tasks: the shell in `daemon.rs` performs the actions, the simulation harness
//! replays them from a seed.
//!
//! # Joining
//! A node sends `InitJoin` to its seed nodes until one that is already a member answers
//! `InitJoinAck`; it then sends `Join` there and adopts the `Welcome` gossip. The first seed in
//! the list forms a new cluster by itself if no other seed answers within `seed_node_timeout`.
//! A node at an address whose old incarnation is still a member downs that old incarnation.
//!
//! # Failure detection and downing
//! Every member heartbeats every other member; a phi-accrual detector per peer turns silence
//! into this node's opinion "unreachable", which is gossiped. The acting leader downs a member
//! that stays unreachable for `down_after`.
//!
//! # Leaving
//! `leave()` marks this node leaving; the leader moves it to exiting and then removes it once
//! everyone has seen each step. A node that sees itself exiting or down keeps gossiping for
//! `removal_grace` (so the others see it has seen that) and then terminates.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

#[cfg(test)]
mod options_tests;
#[cfg(test)]
mod simulation;

use super::events::ClusterView;
use super::failure_detector::{FailureDetectorOptions, PhiAccrual};
use super::gossip::Gossip;
use super::member::MemberStatus;
use super::provider::Departure;
use crate::{Address, UniqueAddress};

/// Settings of gossip membership: consuming `with_*` setters over defaults (documented on each
/// setter), checked by [`validate`](Self::validate) when the cluster starts. The defaults
/// detect a dead node in about 2–3 s and down it 5 s later.
///
/// ```
/// use std::time::Duration;
/// use troupe::cluster::{Downing, MembershipOptions};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let options = MembershipOptions::default()
///     .with_seeds(["troupe://demo@10.0.0.1:2551".parse()?])
///     .with_roles(["control-plane"])
///     .with_downing(Downing::KeepMajority)
///     .with_down_after(Some(Duration::from_secs(10)));
/// options.validate()?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct MembershipOptions {
    seeds: Vec<Address>,
    roles: BTreeSet<String>,
    gossip_interval: Duration,
    heartbeat_interval: Duration,
    failure_detector: FailureDetectorOptions,
    down_after: Option<Duration>,
    downing: Downing,
    seed_node_timeout: Duration,
    join_timeout: Duration,
    removal_grace: Duration,
}

impl Default for MembershipOptions {
    fn default() -> Self {
        Self {
            seeds: Vec::new(),
            roles: BTreeSet::new(),
            gossip_interval: Duration::from_millis(200),
            heartbeat_interval: Duration::from_millis(500),
            failure_detector: FailureDetectorOptions::default(),
            down_after: Some(Duration::from_secs(5)),
            downing: Downing::AutoDown,
            seed_node_timeout: Duration::from_secs(1),
            join_timeout: Duration::from_secs(2),
            removal_grace: Duration::from_millis(600),
        }
    }
}

impl MembershipOptions {
    /// Nodes to join through, in order; the first one may form a new cluster (default none:
    /// the node waits for seeds, unless the builder's `with_self_seed_if_none` seeds it with
    /// its own address).
    #[must_use]
    pub fn with_seeds(mut self, seeds: impl IntoIterator<Item = Address>) -> Self {
        self.seeds = seeds.into_iter().collect();
        self
    }

    /// This node's roles (default none).
    #[must_use]
    pub fn with_roles<R: Into<String>>(mut self, roles: impl IntoIterator<Item = R>) -> Self {
        self.roles = roles.into_iter().map(Into::into).collect();
        self
    }

    /// How often to gossip to one random member and run leader actions (default 200 ms).
    #[must_use]
    pub fn with_gossip_interval(mut self, interval: Duration) -> Self {
        self.gossip_interval = interval;
        self
    }

    /// How often to heartbeat every other member (default 500 ms); the failure detector
    /// expects heartbeats at this interval.
    #[must_use]
    pub fn with_heartbeat_interval(mut self, interval: Duration) -> Self {
        self.heartbeat_interval = interval;
        self
    }

    /// Failure detector settings (default [`FailureDetectorOptions::default`]).
    #[must_use]
    pub fn with_failure_detector(mut self, failure_detector: FailureDetectorOptions) -> Self {
        self.failure_detector = failure_detector;
        self
    }

    /// Down a member that stays unreachable this long; `None` never downs automatically
    /// (default 5 s).
    #[must_use]
    pub fn with_down_after(mut self, down_after: Option<Duration>) -> Self {
        self.down_after = down_after;
        self
    }

    /// What the acting leader downs when members stayed unreachable for `down_after`
    /// (default [`Downing::AutoDown`]).
    #[must_use]
    pub fn with_downing(mut self, downing: Downing) -> Self {
        self.downing = downing;
        self
    }

    /// How long the first seed waits for the others before forming a cluster alone
    /// (default 1 s).
    #[must_use]
    pub fn with_seed_node_timeout(mut self, timeout: Duration) -> Self {
        self.seed_node_timeout = timeout;
        self
    }

    /// How long to wait for `Welcome` before asking the seeds again (default 2 s).
    #[must_use]
    pub fn with_join_timeout(mut self, timeout: Duration) -> Self {
        self.join_timeout = timeout;
        self
    }

    /// How long a node that sees itself exiting or down keeps gossiping before it terminates,
    /// so the others see that it saw (default 600 ms; zero terminates at once).
    #[must_use]
    pub fn with_removal_grace(mut self, grace: Duration) -> Self {
        self.removal_grace = grace;
        self
    }

    /// The nodes to join through.
    #[must_use]
    pub fn seeds(&self) -> &[Address] {
        &self.seeds
    }

    /// This node's roles.
    #[must_use]
    pub fn roles(&self) -> &BTreeSet<String> {
        &self.roles
    }

    /// How often this node gossips.
    #[must_use]
    pub fn gossip_interval(&self) -> Duration {
        self.gossip_interval
    }

    /// How often this node heartbeats every other member.
    #[must_use]
    pub fn heartbeat_interval(&self) -> Duration {
        self.heartbeat_interval
    }

    /// The failure detector settings.
    #[must_use]
    pub fn failure_detector(&self) -> FailureDetectorOptions {
        self.failure_detector
    }

    /// How long a member may stay unreachable before it is downed; `None`: never.
    #[must_use]
    pub fn down_after(&self) -> Option<Duration> {
        self.down_after
    }

    /// What the acting leader downs.
    #[must_use]
    pub fn downing(&self) -> Downing {
        self.downing
    }

    /// How long the first seed waits for the others.
    #[must_use]
    pub fn seed_node_timeout(&self) -> Duration {
        self.seed_node_timeout
    }

    /// How long to wait for `Welcome` before asking the seeds again.
    #[must_use]
    pub fn join_timeout(&self) -> Duration {
        self.join_timeout
    }

    /// How long a node that sees itself exiting or down keeps gossiping.
    #[must_use]
    pub fn removal_grace(&self) -> Duration {
        self.removal_grace
    }

    /// Checks every setting, the failure detector's included; the cluster builder calls it
    /// before anything is bound or spawned.
    ///
    /// # Errors
    /// An [`OptionsError`] naming the field, the value and what is allowed.
    pub fn validate(&self) -> Result<(), OptionsError> {
        let positive = |field, value: Duration| {
            if value.is_zero() {
                Err(OptionsError {
                    field,
                    value: format!("{value:?}"),
                    allowed: "> 0",
                })
            } else {
                Ok(())
            }
        };
        positive("gossip_interval", self.gossip_interval)?;
        positive("heartbeat_interval", self.heartbeat_interval)?;
        positive("seed_node_timeout", self.seed_node_timeout)?;
        positive("join_timeout", self.join_timeout)?;
        if let Some(down_after) = self.down_after {
            positive("down_after", down_after)?;
        }
        self.failure_detector.validate()
    }
}

/// How a side of the cluster resolves members that stayed unreachable for `down_after`.
///
/// Unreachability is symmetric under a partition: each side sees the other unreachable, and
/// whatever one side decides the other decides too, for the other side. `AutoDown` lets both
/// sides down each other and carry on as two clusters, neither of which ever learns that the
/// other removed it; `KeepMajority` lets only one side survive, and the other downs itself, so
/// its members see themselves down and fence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Downing {
    /// Down every member unreachable that long, whatever the size of this side.
    #[default]
    AutoDown,
    /// Keep the side that holds a majority of the up and leaving members: it downs the
    /// unreachable ones; a minority side downs itself instead. An even split keeps the side
    /// with the lowest address. The price (Akka's keep-majority pays it too): when more than
    /// half the members crash at once, the survivors down themselves.
    KeepMajority,
}

impl Downing {
    /// The name used on command lines (`keep-majority`).
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::AutoDown => "auto-down",
            Self::KeepMajority => "keep-majority",
        }
    }
}

/// A settings value that cannot work: which field, what it was, what is allowed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field} must be {allowed}, got {value}")]
pub struct OptionsError {
    /// The field.
    pub field: &'static str,
    /// What it was.
    pub value: String,
    /// What is allowed.
    pub allowed: &'static str,
}

/// The membership protocol's messages between nodes. The sender is never part of a message:
/// it is the identity the transport verified.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) enum ClusterMsg {
    /// Is there a cluster I can join through you?
    InitJoin,
    /// Yes: send `Join` to me.
    InitJoinAck,
    /// Admit me with these roles.
    Join {
        /// The joining node's roles.
        roles: BTreeSet<String>,
    },
    /// You are admitted; here is the membership.
    Welcome {
        /// The current gossip.
        gossip: Gossip,
    },
    /// The sender's membership state.
    Gossip {
        /// The sender's gossip.
        gossip: Gossip,
    },
    /// Are you alive?
    Heartbeat {
        /// Echoed in the response.
        sequence: u64,
    },
    /// Alive.
    HeartbeatResponse {
        /// The heartbeat answered.
        sequence: u64,
    },
}

/// An input to the state machine.
#[derive(Debug, Clone)]
pub(super) enum Input {
    /// Gossip, run leader actions, retry joining, check for exits.
    GossipTick,
    /// Heartbeat every member and evaluate the failure detectors.
    HeartbeatTick,
    /// A message from a peer whose identity the transport verified.
    Received {
        /// The verified sender.
        from: UniqueAddress,
        /// The message.
        message: ClusterMsg,
    },
    /// Join the cluster that `address` is a member of.
    JoinVia(Address),
    /// Leave gracefully.
    Leave,
    /// Declare the member at this address down.
    Down(Address),
    /// Make the member at this address leave gracefully (any member may ask; the leaver sees
    /// itself leaving through gossip and goes through exiting to removed).
    LeaveMember(Address),
}

/// What the shell should do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Action {
    /// Send a message to a peer.
    Send {
        /// The peer.
        to: Address,
        /// The message.
        message: ClusterMsg,
    },
    /// This node has left the cluster (removed, or downed): stop participating.
    Terminate,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Phase {
    Unjoined,
    Joining { via: Address, since: Instant },
    Member,
    Terminated,
}

/// One node's membership state.
#[derive(Debug)]
pub(super) struct Membership {
    settings: MembershipOptions,
    me: UniqueAddress,
    gossip: Gossip,
    phase: Phase,
    started: Instant,
    last_init_join: Option<Instant>,
    detectors: BTreeMap<UniqueAddress, PhiAccrual>,
    unreachable_since: BTreeMap<UniqueAddress, Instant>,
    leaving_since: Option<Instant>,
    heartbeat_sequence: u64,
    /// This node's own status as last seen while it was a member (what its departure means).
    own_status: Option<MemberStatus>,
    /// `Leave` was asked of this node through its own API.
    asked_to_leave: bool,
    /// Why this node downed itself, when it did (its side was a minority).
    downed_itself: Option<String>,
    /// The source of gossip's random choices (seeded: a seed replays them exactly).
    rng: SmallRng,
}

impl Membership {
    /// A node that has not joined yet.
    #[must_use]
    pub(super) fn new(
        me: UniqueAddress,
        mut settings: MembershipOptions,
        now: Instant,
        rng_seed: u64,
    ) -> Self {
        settings.failure_detector = settings
            .failure_detector
            .expecting_heartbeats_every(settings.heartbeat_interval);
        Self {
            settings,
            me,
            gossip: Gossip::default(),
            phase: Phase::Unjoined,
            started: now,
            last_init_join: None,
            detectors: BTreeMap::new(),
            unreachable_since: BTreeMap::new(),
            leaving_since: None,
            heartbeat_sequence: 0,
            rng: SmallRng::seed_from_u64(rng_seed),
            own_status: None,
            asked_to_leave: false,
            downed_itself: None,
        }
    }

    /// The settings in force.
    #[must_use]
    pub(super) fn settings(&self) -> &MembershipOptions {
        &self.settings
    }

    /// The current gossip.
    #[cfg(test)]
    #[must_use]
    pub(super) fn gossip(&self) -> &Gossip {
        &self.gossip
    }

    /// How this node left, once it has: gracefully when it was leaving or exiting (or asked to
    /// leave), fenced when the others downed or removed it while it was up.
    #[must_use]
    pub(super) fn departure(&self) -> Option<Departure> {
        (self.phase == Phase::Terminated).then(|| {
            match (
                Departure::after(self.own_status, self.asked_to_leave),
                &self.downed_itself,
            ) {
                (Departure::Fenced { .. }, Some(reason)) => Departure::Fenced {
                    reason: reason.clone(),
                },
                (departure, _) => departure,
            }
        })
    }

    /// Whether this node is (still) a member.
    #[cfg(test)]
    #[must_use]
    pub(super) fn is_member(&self) -> bool {
        self.phase == Phase::Member
    }

    /// This node's view, from which events are derived.
    #[must_use]
    ///
    /// Once this node has left (removed or downed) its view keeps the other members as it last
    /// saw them and drops only itself: what it reports last is its own removal, not the
    /// removal of everyone it can no longer see.
    pub(super) fn view(&self) -> ClusterView {
        if !matches!(self.phase, Phase::Member | Phase::Terminated) {
            return ClusterView {
                self_node: Some(self.me.clone()),
                ..ClusterView::default()
            };
        }
        let mut gossip = self.gossip.clone();
        if self.phase == Phase::Terminated {
            gossip.members.remove(&self.me);
            gossip.reachability_mut().remove(&self.me);
        }
        let mut unreachable = gossip.unreachable_members();
        unreachable.remove(&self.me);
        let observed_by = unreachable
            .iter()
            .map(|node| (node.clone(), gossip.reachability().observers_of(node)))
            .collect();
        ClusterView {
            self_node: Some(self.me.clone()),
            members: gossip.members().cloned().collect(),
            unreachable,
            observed_by,
            leader: gossip.leader(&self.me).map(|n| n.address.clone()),
            converged: self.phase == Phase::Member && gossip.is_converged(),
        }
    }

    fn handle(&mut self, input: Input, now: Instant, rng: &mut impl Rng) -> Vec<Action> {
        let mut actions = Vec::new();
        if self.phase == Phase::Terminated {
            return actions;
        }
        match input {
            Input::GossipTick => self.on_gossip_tick(now, rng, &mut actions),
            Input::HeartbeatTick => self.on_heartbeat_tick(now, &mut actions),
            Input::Received { from, message } => self.on_message(from, message, now, &mut actions),
            Input::JoinVia(address) => {
                if self.phase == Phase::Unjoined {
                    self.join_via(address, now, &mut actions);
                }
            }
            Input::Leave => {
                self.asked_to_leave = true;
                if self.phase == Phase::Member {
                    if self
                        .gossip
                        .set_status(&self.me.clone(), MemberStatus::Leaving)
                    {
                        self.gossip.bump(&self.me);
                    }
                } else {
                    self.phase = Phase::Terminated;
                    actions.push(Action::Terminate);
                }
            }
            Input::Down(address) => self.set_status_at(&address, MemberStatus::Down),
            Input::LeaveMember(address) => self.set_status_at(&address, MemberStatus::Leaving),
        }
        self.check_exit(now, &mut actions);
        actions
    }

    fn set_status_at(&mut self, address: &Address, status: MemberStatus) {
        if self.phase == Phase::Member
            && let Some(member) = self.gossip.member_at(address)
        {
            let node = member.node.clone();
            if self.gossip.set_status(&node, status) {
                self.gossip.bump(&self.me);
            }
        }
    }

    fn join_via(&mut self, address: Address, now: Instant, actions: &mut Vec<Action>) {
        actions.push(Action::Send {
            to: address.clone(),
            message: ClusterMsg::Join {
                roles: self.settings.roles.clone(),
            },
        });
        self.phase = Phase::Joining {
            via: address,
            since: now,
        };
    }

    fn on_gossip_tick(&mut self, now: Instant, rng: &mut impl Rng, actions: &mut Vec<Action>) {
        match self.phase.clone() {
            Phase::Unjoined => self.seek_cluster(now, actions),
            Phase::Joining { since, .. } => {
                if now.saturating_duration_since(since) >= self.settings.join_timeout {
                    self.phase = Phase::Unjoined;
                    self.last_init_join = None;
                    self.seek_cluster(now, actions);
                }
            }
            Phase::Member => {
                self.track_unreachable(now);
                if self.gossip.acting_leader(&self.me) == Some(&self.me) {
                    self.auto_down(now);
                    if self.gossip.leader_actions() || self.gossip.weakly_up_actions() {
                        self.gossip.bump(&self.me);
                    }
                }
                if let Some(target) = self.gossip_target(rng) {
                    actions.push(Action::Send {
                        to: target,
                        message: ClusterMsg::Gossip {
                            gossip: self.gossip.clone(),
                        },
                    });
                }
            }
            Phase::Terminated => {}
        }
    }

    fn seek_cluster(&mut self, now: Instant, actions: &mut Vec<Action>) {
        let seeds: Vec<Address> = self
            .settings
            .seeds
            .iter()
            .filter(|seed| **seed != self.me.address)
            .cloned()
            .collect();
        let first_seed = self.settings.seeds.first() == Some(&self.me.address);
        if first_seed
            && (seeds.is_empty()
                || now.saturating_duration_since(self.started) >= self.settings.seed_node_timeout)
        {
            self.gossip = Gossip::founding(&self.me, self.settings.roles.clone());
            self.phase = Phase::Member;
            return;
        }
        let due = self.last_init_join.is_none_or(|last| {
            now.saturating_duration_since(last) >= self.settings.gossip_interval * 2
        });
        if due {
            self.last_init_join = Some(now);
            for seed in seeds {
                actions.push(Action::Send {
                    to: seed,
                    message: ClusterMsg::InitJoin,
                });
            }
        }
    }

    fn gossip_target(&self, rng: &mut impl Rng) -> Option<Address> {
        let candidates: Vec<&UniqueAddress> = self
            .gossip
            .members()
            .filter(|m| {
                m.node != self.me
                    && m.status != MemberStatus::Down
                    && !self
                        .gossip
                        .reachability()
                        .is_unreachable_by(&self.me, &m.node)
            })
            .map(|m| &m.node)
            .collect();
        if candidates.is_empty() {
            return None;
        }
        let unseen: Vec<&&UniqueAddress> = candidates
            .iter()
            .filter(|n| !self.gossip.has_seen(n))
            .collect();
        let pick = if !unseen.is_empty() && rng.random_bool(0.8) {
            (*unseen[rng.random_range(0..unseen.len())]).clone()
        } else {
            candidates[rng.random_range(0..candidates.len())].clone()
        };
        Some(pick.address)
    }

    fn track_unreachable(&mut self, now: Instant) {
        let unreachable = self.gossip.unreachable_members();
        self.unreachable_since
            .retain(|node, _| unreachable.contains(node));
        for node in unreachable {
            self.unreachable_since.entry(node).or_insert(now);
        }
    }

    fn auto_down(&mut self, now: Instant) {
        let Some(down_after) = self.settings.down_after else {
            return;
        };
        let due: Vec<UniqueAddress> = self
            .unreachable_since
            .iter()
            .filter(|(node, since)| {
                **node != self.me && now.saturating_duration_since(**since) >= down_after
            })
            .map(|(node, _)| node.clone())
            .collect();
        if due.is_empty() {
            return;
        }
        let to_down = match self.settings.downing {
            Downing::AutoDown => due,
            Downing::KeepMajority => match keep_majority(&self.gossip, &self.me) {
                Side::Keep => due,
                Side::DownOurs { ours, of } => {
                    self.downed_itself = Some(format!(
                        "downed itself: its side of the cluster ({} of {of} members) stayed cut off from the rest for {down_after:?} (keep-majority)",
                        ours.len(),
                    ));
                    ours
                }
            },
        };
        for node in to_down {
            if self.gossip.set_status(&node, MemberStatus::Down) {
                self.gossip.bump(&self.me);
            }
        }
    }

    fn on_heartbeat_tick(&mut self, now: Instant, actions: &mut Vec<Action>) {
        if self.phase != Phase::Member {
            return;
        }
        self.heartbeat_sequence += 1;
        let monitored: Vec<UniqueAddress> = self
            .gossip
            .members()
            // Down members too: a downed node that is still running must be seen to stop
            // (become unreachable) before the leader can remove it.
            .filter(|m| m.node != self.me)
            .map(|m| m.node.clone())
            .collect();
        self.detectors.retain(|node, _| monitored.contains(node));
        let settings = self.settings.failure_detector;
        let mut changed = false;
        for node in monitored {
            let detector = self
                .detectors
                .entry(node.clone())
                .or_insert_with(|| PhiAccrual::new(settings, now));
            let available = detector.is_available(now);
            let reachability = self.gossip.reachability_mut();
            changed |= if available {
                reachability.reachable(&self.me, &node)
            } else {
                reachability.unreachable(&self.me, &node)
            };
            actions.push(Action::Send {
                to: node.address.clone(),
                message: ClusterMsg::Heartbeat {
                    sequence: self.heartbeat_sequence,
                },
            });
        }
        if changed {
            self.gossip.bump(&self.me);
        }
    }

    fn on_message(
        &mut self,
        from: UniqueAddress,
        message: ClusterMsg,
        now: Instant,
        actions: &mut Vec<Action>,
    ) {
        match message {
            ClusterMsg::InitJoin => {
                if self.phase == Phase::Member && !self.gossip.is_tombstoned(&from) {
                    actions.push(Action::Send {
                        to: from.address,
                        message: ClusterMsg::InitJoinAck,
                    });
                }
            }
            ClusterMsg::InitJoinAck => {
                if self.phase == Phase::Unjoined {
                    self.join_via(from.address, now, actions);
                }
            }
            ClusterMsg::Join { roles } => {
                if self.phase != Phase::Member || self.gossip.is_tombstoned(&from) {
                    return;
                }
                if self.gossip.admit(&from, roles) {
                    self.gossip.bump(&self.me);
                }
                actions.push(Action::Send {
                    to: from.address,
                    message: ClusterMsg::Welcome {
                        gossip: self.gossip.clone(),
                    },
                });
            }
            ClusterMsg::Welcome { gossip } => {
                let expected =
                    matches!(&self.phase, Phase::Joining { via, .. } if *via == from.address);
                if expected && gossip.member(&self.me).is_some() {
                    self.gossip = gossip;
                    self.gossip.seen.insert(self.me.clone());
                    self.phase = Phase::Member;
                }
            }
            ClusterMsg::Gossip { gossip } => self.on_gossip(from, gossip, actions),
            ClusterMsg::Heartbeat { sequence } => {
                if self.phase == Phase::Member && self.gossip.member(&from).is_some() {
                    actions.push(Action::Send {
                        to: from.address,
                        message: ClusterMsg::HeartbeatResponse { sequence },
                    });
                }
            }
            ClusterMsg::HeartbeatResponse { .. } => {
                if let Some(detector) = self.detectors.get_mut(&from) {
                    detector.heartbeat(now);
                }
            }
        }
    }

    fn on_gossip(&mut self, from: UniqueAddress, theirs: Gossip, actions: &mut Vec<Action>) {
        if self.phase != Phase::Member {
            return;
        }
        if theirs.member(&self.me).is_none() {
            if theirs.is_tombstoned(&self.me) {
                // Removed while we were not looking: we are out.
                self.gossip.tombstones.insert(self.me.clone());
                self.gossip.members.remove(&self.me);
            }
            return;
        }
        if self.gossip.member(&from).is_none() && theirs.member(&from).is_none() {
            return;
        }
        let their_version = theirs.version.clone();
        let their_seen = theirs.seen.clone();
        self.gossip.receive(&self.me, theirs);
        let differs = self.gossip.version != their_version || self.gossip.seen != their_seen;
        // Push-pull: answer whenever the sender does not yet hold exactly what we hold.
        if differs {
            actions.push(Action::Send {
                to: from.address,
                message: ClusterMsg::Gossip {
                    gossip: self.gossip.clone(),
                },
            });
        }
    }

    fn check_exit(&mut self, now: Instant, actions: &mut Vec<Action>) {
        if self.phase != Phase::Member {
            return;
        }
        let status = self.gossip.member(&self.me).map(|m| m.status);
        if status.is_some() {
            self.own_status = status;
        }
        let out = match status {
            None => true,
            Some(MemberStatus::Exiting | MemberStatus::Down | MemberStatus::Removed) => {
                let since = *self.leaving_since.get_or_insert(now);
                now.saturating_duration_since(since) >= self.settings.removal_grace
            }
            Some(_) => false,
        };
        if out {
            self.phase = Phase::Terminated;
            actions.push(Action::Terminate);
        }
    }
}

/// What keep-majority decides for the side the acting leader is on.
#[derive(Debug, PartialEq, Eq)]
enum Side {
    /// This side survives: down the unreachable members.
    Keep,
    /// This side is the minority: down these, its own members (of `of` counted).
    DownOurs { ours: Vec<UniqueAddress>, of: usize },
}

/// Keep-majority over the up and leaving members: `me` and the reachable ones are this side.
fn keep_majority(gossip: &Gossip, me: &UniqueAddress) -> Side {
    let unreachable = gossip.unreachable_members();
    let counted: Vec<&UniqueAddress> = gossip
        .members()
        .filter(|m| matches!(m.status, MemberStatus::Up | MemberStatus::Leaving))
        .map(|m| &m.node)
        .collect();
    let ours: Vec<UniqueAddress> = counted
        .iter()
        .filter(|node| **node == me || !unreachable.contains(node))
        .map(|node| (*node).clone())
        .collect();
    let (ours_n, all_n) = (ours.len(), counted.len());
    let keep = if ours_n * 2 == all_n {
        // Members are address-ordered: the lowest is the first counted.
        counted.first().is_some_and(|lowest| ours.contains(lowest))
    } else {
        ours_n * 2 > all_n
    };
    if keep {
        Side::Keep
    } else {
        Side::DownOurs { ours, of: all_n }
    }
}

/// Advances one node's membership by one input at `now`.
#[must_use]
pub(super) fn step(mut state: Membership, input: Input, now: Instant) -> (Membership, Vec<Action>) {
    let mut rng = state.rng.clone();
    let actions = state.handle(input, now, &mut rng);
    state.rng = rng;
    (state, actions)
}
