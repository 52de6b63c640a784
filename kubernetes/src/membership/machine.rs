//! The pure decision core of Lease membership: `step(event, now) -> actions`, no I/O, no clock.
//!
//! One host, one Lease. The machine decides when to create, renew, mark leaving and delete its
//! own Lease, when it is fenced, which peers are members, and when a peer has aged out. The
//! async shell ([`super::KubeMembership`]) performs the actions and feeds back their results.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::time::Instant;
use troupe::cluster::{ClusterView, Member, MemberStatus};
use troupe::{Address, UniqueAddress};

use crate::settings::KubeTiming;

/// The time of a step: monotonic for local deadlines, wall clock for comparing with the
/// `renewTime`s other hosts wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Now {
    /// Monotonic time.
    pub mono: Instant,
    /// Wall-clock time.
    pub wall: DateTime<Utc>,
}

impl Now {
    /// The current time.
    #[must_use]
    pub fn current() -> Self {
        Self {
            mono: Instant::now(),
            wall: Utc::now(),
        }
    }

    /// This time plus `d`, on both clocks.
    #[must_use]
    pub fn plus(self, d: Duration) -> Self {
        Self {
            mono: self.mono + d,
            wall: self.wall + chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX),
        }
    }
}

/// A member Lease as read from the API server, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerLease {
    /// The Lease object's name.
    pub lease: String,
    /// Its `resourceVersion`.
    pub resource_version: String,
    /// The host it stands for.
    pub node: UniqueAddress,
    /// The host's roles.
    pub roles: BTreeSet<String>,
    /// Its last heartbeat (`spec.renewTime`).
    pub renew_time: DateTime<Utc>,
    /// Its `spec.leaseDurationSeconds`.
    pub duration: Duration,
    /// Whether it is leaving gracefully.
    pub leaving: bool,
}

impl PeerLease {
    fn expires_at(&self) -> DateTime<Utc> {
        self.renew_time + chrono::Duration::from_std(self.duration).unwrap_or(chrono::Duration::MAX)
    }
}

/// This host's health as membership sees it (what liveness and readiness probes report).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostHealth {
    /// Creating its Lease; not a member yet.
    Starting,
    /// A member, heartbeating.
    Up,
    /// Leaving gracefully (live, not ready).
    Leaving,
    /// Left gracefully.
    Left,
    /// Fenced: it lost its place in membership and must not host anything. Fatal: the process
    /// should restart with a fresh identity.
    Fenced {
        /// Why.
        reason: String,
    },
    /// Shut down without leaving.
    Stopped,
}

impl HostHealth {
    /// Whether the host can never recover (liveness should fail).
    #[must_use]
    pub fn is_fatal(&self) -> bool {
        matches!(self, Self::Fenced { .. })
    }

    /// Whether the host should receive work (readiness).
    #[must_use]
    pub fn is_ready(&self) -> bool {
        matches!(self, Self::Up)
    }
}

impl fmt::Display for HostHealth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Starting => f.write_str("starting"),
            Self::Up => f.write_str("up"),
            Self::Leaving => f.write_str("leaving"),
            Self::Left => f.write_str("left"),
            Self::Fenced { reason } => write!(f, "fenced: {reason}"),
            Self::Stopped => f.write_str("stopped"),
        }
    }
}

/// How a write of this host's own Lease failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteError {
    /// `404 NotFound`: the Lease is gone.
    NotFound,
    /// `409`: `Conflict` on an update, `AlreadyExists` on a create.
    Conflict,
    /// Anything else, including timeouts.
    Other(String),
}

/// Why this host writes its Lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// A renewal: a fresh `renewTime`.
    Heartbeat,
    /// The start of a graceful leave: status `leaving`, so peers see the member leave.
    MarkLeaving,
}

/// What the machine is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Time passed.
    Tick,
    /// The answer to [`Action::Create`]: the new `resourceVersion`.
    Created(Result<String, WriteError>),
    /// The answer to [`Action::Write`].
    Written {
        /// Which write.
        purpose: Purpose,
        /// The new `resourceVersion`.
        result: Result<String, WriteError>,
    },
    /// The answer to [`Action::FetchOwn`]: `None` when the Lease is gone, else its holder and
    /// `resourceVersion`.
    FetchedOwn(Result<Option<(String, String)>, String>),
    /// The answer to [`Action::DeleteOwn`].
    DeletedOwn(Result<(), WriteError>),
    /// A fresh list of the cluster's Leases (after a (re)connect).
    Resync(Vec<PeerLease>),
    /// A Lease was added or modified.
    Upsert(PeerLease),
    /// A Lease was deleted.
    Removed(String),
    /// Leave gracefully.
    Leave,
    /// Declare the member at this address down (its Lease is deleted, which fences it).
    Down(Address),
    /// Stop at once, without leaving.
    Shutdown,
}

/// What the machine asks the shell to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Create this host's Lease (never again once it has existed).
    Create,
    /// Replace this host's Lease, carrying `resource_version`; give up after `timeout`.
    Write {
        /// Why.
        purpose: Purpose,
        /// The `resourceVersion` to carry.
        resource_version: String,
        /// How long the request may take.
        timeout: Duration,
    },
    /// Read this host's Lease (after a `409`).
    FetchOwn,
    /// Delete this host's Lease (graceful leave), optionally only at this `resourceVersion`.
    DeleteOwn(Option<String>),
    /// Delete another host's Lease at `resource_version` (reaping, or down).
    DeletePeer {
        /// The Lease's name.
        lease: String,
        /// Only if still at this version.
        resource_version: Option<String>,
    },
    /// A new view for the cluster.
    Publish(ClusterView),
    /// A new health state.
    Health(HostHealth),
    /// Stop the shell (after fencing, leaving or shutdown).
    Stop,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Phase {
    Creating,
    Up,
    Leaving,
    Done,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum InFlight {
    Create,
    Write(Purpose),
    FetchOwn,
    DeleteOwn,
}

/// The membership state of one host.
#[derive(Debug, Clone)]
pub struct MembershipMachine {
    me: UniqueAddress,
    roles: BTreeSet<String>,
    lease: String,
    timing: KubeTiming,
    phase: Phase,
    health: HostHealth,
    resource_version: Option<String>,
    /// The moment the request in flight was sent, and what it is.
    in_flight: Option<(InFlight, Instant)>,
    /// When the first create was sent (the earliest `renewTime` our Lease can carry).
    first_create: Option<Instant>,
    /// Until when peers see our Lease alive, by our monotonic clock, conservatively.
    valid_until: Option<Instant>,
    next_beat: Instant,
    peers: BTreeMap<String, PeerLease>,
    /// Leases aged out but still stored: name → (resourceVersion, expiry).
    expired: BTreeMap<String, (String, DateTime<Utc>)>,
    reaping: BTreeSet<String>,
    tombstones: BTreeSet<UniqueAddress>,
    /// Lease names seen deleted: a Lease that reappears under such a name is a zombie's.
    deleted: BTreeSet<String>,
    last_view: Option<ClusterView>,
}

impl MembershipMachine {
    /// The machine of host `me`, whose Lease is called `lease`.
    #[must_use]
    pub fn new(
        me: UniqueAddress,
        roles: BTreeSet<String>,
        lease: String,
        timing: KubeTiming,
        now: Now,
    ) -> Self {
        Self {
            me,
            roles,
            lease,
            timing,
            phase: Phase::Creating,
            health: HostHealth::Starting,
            resource_version: None,
            in_flight: None,
            first_create: None,
            valid_until: None,
            next_beat: now.mono,
            peers: BTreeMap::new(),
            expired: BTreeMap::new(),
            reaping: BTreeSet::new(),
            tombstones: BTreeSet::new(),
            deleted: BTreeSet::new(),
            last_view: None,
        }
    }

    /// The current health.
    #[must_use]
    pub fn health(&self) -> &HostHealth {
        &self.health
    }

    /// The name of this host's Lease.
    #[must_use]
    pub fn lease_name(&self) -> &str {
        &self.lease
    }

    /// Whether the machine has stopped (fenced, left or shut down).
    #[must_use]
    pub fn is_done(&self) -> bool {
        self.phase == Phase::Done
    }

    /// Until when (monotonic) this host may consider itself a member.
    #[must_use]
    pub fn valid_until(&self) -> Option<Instant> {
        self.valid_until
    }

    /// Handle one event.
    pub fn step(&mut self, event: Event, now: Now) -> Vec<Action> {
        let mut actions = Vec::new();
        if self.phase == Phase::Done {
            return actions;
        }
        match event {
            Event::Tick => self.tick(now, &mut actions),
            Event::Created(result) => self.created(result, now, &mut actions),
            Event::Written { purpose, result } => self.written(purpose, result, now, &mut actions),
            Event::FetchedOwn(result) => self.fetched_own(result, now, &mut actions),
            Event::DeletedOwn(result) => {
                if let Err(WriteError::Other(reason)) = &result {
                    tracing::warn!(lease = %self.lease, %reason, "could not delete own Lease; peers will age it out");
                }
                self.in_flight = None;
                self.finish(HostHealth::Left, &mut actions);
            }
            Event::Resync(leases) => {
                let names: BTreeSet<String> = leases.iter().map(|l| l.lease.clone()).collect();
                let gone: Vec<String> = self
                    .peers
                    .keys()
                    .chain(self.expired.keys())
                    .filter(|n| !names.contains(*n))
                    .cloned()
                    .collect();
                for name in gone {
                    self.forget(&name);
                }
                for lease in leases {
                    self.upsert(lease, now);
                }
            }
            Event::Upsert(lease) => self.upsert(lease, now),
            Event::Removed(name) => {
                if name == self.lease {
                    if self.phase == Phase::Up {
                        self.fence(
                            "this host's Lease was deleted; it is not recreated".to_owned(),
                            &mut actions,
                        );
                        return actions;
                    }
                } else {
                    self.forget(&name);
                    self.deleted.insert(name);
                }
            }
            Event::Leave => match self.phase {
                Phase::Creating if self.in_flight.is_none() => {
                    self.finish(HostHealth::Left, &mut actions);
                }
                Phase::Creating | Phase::Up => {
                    self.phase = Phase::Leaving;
                    self.set_health(HostHealth::Leaving, &mut actions);
                    if self.in_flight.is_none() {
                        self.mark_leaving(now, &mut actions);
                    }
                }
                Phase::Leaving | Phase::Done => {}
            },
            Event::Down(address) => {
                if address == self.me.address {
                    actions.push(Action::DeletePeer {
                        lease: self.lease.clone(),
                        resource_version: None,
                    });
                    self.fence("declared down".to_owned(), &mut actions);
                    return actions;
                }
                let targets: Vec<(String, String)> = self
                    .peers
                    .values()
                    .filter(|p| p.node.address == address)
                    .map(|p| (p.lease.clone(), p.resource_version.clone()))
                    .collect();
                for (lease, rv) in targets {
                    actions.push(Action::DeletePeer {
                        lease: lease.clone(),
                        resource_version: Some(rv),
                    });
                    self.forget(&lease);
                }
            }
            Event::Shutdown => {
                self.finish(HostHealth::Stopped, &mut actions);
                return actions;
            }
        }
        if self.phase != Phase::Done {
            self.age_out(now);
            self.reap(now, &mut actions);
            self.publish(&mut actions);
        }
        actions
    }

    fn tick(&mut self, now: Now, actions: &mut Vec<Action>) {
        match self.phase {
            Phase::Creating => {
                if self.in_flight.is_none() && now.mono >= self.next_beat {
                    self.in_flight = Some((InFlight::Create, now.mono));
                    self.first_create.get_or_insert(now.mono);
                    actions.push(Action::Create);
                }
            }
            Phase::Up => {
                if self.valid_until.is_some_and(|v| now.mono >= v) {
                    self.fence(
                        format!(
                            "no successful renewal within {:?}: peers are aging this host out",
                            self.timing.local_validity()
                        ),
                        actions,
                    );
                    return;
                }
                if self.in_flight.is_none() && now.mono >= self.next_beat {
                    self.heartbeat(now, actions);
                }
            }
            Phase::Leaving => {
                // A leave that cannot finish ends when peers would have aged us out anyway.
                if self.valid_until.is_some_and(|v| now.mono >= v) {
                    self.finish(HostHealth::Left, actions);
                }
            }
            Phase::Done => {}
        }
    }

    fn heartbeat(&mut self, now: Now, actions: &mut Vec<Action>) {
        let Some(rv) = self.resource_version.clone() else {
            return;
        };
        let left = self.valid_until.map_or(self.timing.renew_interval, |v| {
            v.saturating_duration_since(now.mono)
        });
        self.in_flight = Some((InFlight::Write(Purpose::Heartbeat), now.mono));
        self.next_beat = now.mono + self.timing.renew_interval;
        actions.push(Action::Write {
            purpose: Purpose::Heartbeat,
            resource_version: rv,
            timeout: self.timing.renew_interval.min(left),
        });
    }

    fn mark_leaving(&mut self, now: Now, actions: &mut Vec<Action>) {
        match self.resource_version.clone() {
            Some(rv) => {
                self.in_flight = Some((InFlight::Write(Purpose::MarkLeaving), now.mono));
                actions.push(Action::Write {
                    purpose: Purpose::MarkLeaving,
                    resource_version: rv,
                    timeout: self.timing.renew_interval,
                });
            }
            None => self.delete_own(None, now, actions),
        }
    }

    fn delete_own(&mut self, rv: Option<String>, now: Now, actions: &mut Vec<Action>) {
        self.in_flight = Some((InFlight::DeleteOwn, now.mono));
        actions.push(Action::DeleteOwn(rv));
    }

    fn sent(&mut self) -> Option<Instant> {
        self.in_flight.take().map(|(_, sent)| sent)
    }

    fn created(&mut self, result: Result<String, WriteError>, now: Now, actions: &mut Vec<Action>) {
        self.sent();
        match (self.phase.clone(), result) {
            (Phase::Creating, Ok(rv)) => {
                self.up(rv, now, actions);
            }
            (Phase::Creating, Err(WriteError::Conflict)) => {
                // Ours from an earlier attempt whose answer was lost, or another host's name:
                // read it to tell which.
                self.in_flight = Some((InFlight::FetchOwn, now.mono));
                actions.push(Action::FetchOwn);
            }
            (Phase::Creating, Err(_)) => {
                self.next_beat = now.mono + retry_delay(self.timing);
            }
            (Phase::Leaving, Ok(rv)) => self.delete_own(Some(rv), now, actions),
            (Phase::Leaving, Err(_)) => self.delete_own(None, now, actions),
            _ => {}
        }
    }

    fn up(&mut self, rv: String, now: Now, actions: &mut Vec<Action>) {
        self.phase = Phase::Up;
        self.resource_version = Some(rv);
        let since = self.first_create.unwrap_or(now.mono);
        self.valid_until = Some(since + self.timing.local_validity());
        self.next_beat = now.mono + self.timing.renew_interval;
        self.set_health(HostHealth::Up, actions);
    }

    fn written(
        &mut self,
        purpose: Purpose,
        result: Result<String, WriteError>,
        now: Now,
        actions: &mut Vec<Action>,
    ) {
        let sent = self.sent().unwrap_or(now.mono);
        match self.phase {
            Phase::Up => match result {
                Ok(rv) => {
                    if self.valid_until.is_some_and(|v| now.mono >= v) {
                        self.fence(
                            "a renewal landed after this host's TTL: peers have aged it out".to_owned(),
                            actions,
                        );
                        return;
                    }
                    self.resource_version = Some(rv);
                    self.valid_until = Some(sent + self.timing.local_validity());
                }
                Err(WriteError::NotFound) => self.fence(
                    "renewal answered 404 NotFound: this host's Lease was deleted; it is not recreated"
                        .to_owned(),
                    actions,
                ),
                Err(WriteError::Conflict) => {
                    self.in_flight = Some((InFlight::FetchOwn, now.mono));
                    actions.push(Action::FetchOwn);
                }
                Err(WriteError::Other(reason)) => {
                    tracing::debug!(lease = %self.lease, %reason, "renewal failed; retrying");
                    self.next_beat = now.mono + retry_delay(self.timing);
                }
            },
            Phase::Leaving => match (purpose, result) {
                // The heartbeat that was in flight when leave() was called.
                (Purpose::Heartbeat, Ok(rv)) => {
                    self.resource_version = Some(rv);
                    self.mark_leaving(now, actions);
                }
                // The race the fencing rule exempts: our own leave, not a deletion by others.
                (_, Err(WriteError::NotFound)) => self.finish(HostHealth::Left, actions),
                (Purpose::MarkLeaving, Ok(rv)) => {
                    self.resource_version = Some(rv.clone());
                    self.delete_own(Some(rv), now, actions);
                }
                (_, Err(_)) => self.delete_own(None, now, actions),
            },
            Phase::Creating | Phase::Done => {}
        }
    }

    fn fetched_own(
        &mut self,
        result: Result<Option<(String, String)>, String>,
        now: Now,
        actions: &mut Vec<Action>,
    ) {
        self.sent();
        let me = self.me.to_string();
        match (self.phase.clone(), result) {
            (Phase::Creating | Phase::Up, Ok(Some((holder, rv)))) if holder == me => {
                if self.phase == Phase::Creating {
                    self.up(rv, now, actions);
                    // The stored renewTime is from the first attempt: renew at once.
                    self.next_beat = now.mono;
                } else {
                    self.resource_version = Some(rv);
                    self.next_beat = now.mono;
                }
            }
            (Phase::Creating | Phase::Up, Ok(Some((holder, _)))) => self.fence(
                format!(
                    "this host's Lease {} names another holder, {holder:?}",
                    self.lease
                ),
                actions,
            ),
            (Phase::Creating | Phase::Up, Ok(None)) => self.fence(
                "this host's Lease was deleted; it is not recreated".to_owned(),
                actions,
            ),
            (Phase::Creating | Phase::Up, Err(reason)) => {
                tracing::debug!(lease = %self.lease, %reason, "reading own Lease failed; retrying");
                self.in_flight = None;
                self.next_beat = now.mono + retry_delay(self.timing);
                if self.phase == Phase::Creating {
                    // Retry the read, never the create: the Lease exists.
                    self.in_flight = Some((InFlight::FetchOwn, now.mono));
                    actions.push(Action::FetchOwn);
                }
            }
            (Phase::Leaving, _) => self.delete_own(None, now, actions),
            (Phase::Done, _) => {}
        }
    }

    fn upsert(&mut self, lease: PeerLease, now: Now) {
        if self.deleted.contains(&lease.lease) {
            return;
        }
        if lease.lease == self.lease || self.tombstones.contains(&lease.node) {
            if lease.lease != self.lease && self.expired.contains_key(&lease.lease) {
                self.expired.insert(
                    lease.lease.clone(),
                    (lease.resource_version.clone(), lease.expires_at()),
                );
            }
            return;
        }
        if lease.expires_at() <= now.wall {
            self.tombstones.insert(lease.node.clone());
            self.expired.insert(
                lease.lease.clone(),
                (lease.resource_version.clone(), lease.expires_at()),
            );
            self.peers.remove(&lease.lease);
            return;
        }
        self.peers.insert(lease.lease.clone(), lease);
    }

    fn forget(&mut self, name: &str) {
        if let Some(peer) = self.peers.remove(name) {
            self.tombstones.insert(peer.node);
        }
        self.expired.remove(name);
        self.reaping.remove(name);
    }

    fn age_out(&mut self, now: Now) {
        let aged: Vec<String> = self
            .peers
            .values()
            .filter(|p| p.expires_at() <= now.wall)
            .map(|p| p.lease.clone())
            .collect();
        for name in aged {
            if let Some(peer) = self.peers.remove(&name) {
                tracing::info!(peer = %peer.node, lease = %name, "member aged out: renewTime passed its TTL");
                self.expired
                    .insert(name, (peer.resource_version.clone(), peer.expires_at()));
                self.tombstones.insert(peer.node);
            }
        }
    }

    /// The leader deletes Leases that expired a full TTL ago (their hosts fenced themselves).
    fn reap(&mut self, now: Now, actions: &mut Vec<Action>) {
        if self.phase != Phase::Up || self.view().leader.as_ref() != Some(&self.me.address) {
            return;
        }
        let grace = chrono::Duration::from_std(self.timing.ttl).unwrap_or(chrono::Duration::MAX);
        for (name, (rv, expiry)) in &self.expired {
            if *expiry + grace <= now.wall && self.reaping.insert(name.clone()) {
                actions.push(Action::DeletePeer {
                    lease: name.clone(),
                    resource_version: Some(rv.clone()),
                });
            }
        }
    }

    fn fence(&mut self, reason: String, actions: &mut Vec<Action>) {
        tracing::error!(node = %self.me, lease = %self.lease, %reason, "fenced: this host stops hosting");
        self.finish(HostHealth::Fenced { reason }, actions);
    }

    fn finish(&mut self, health: HostHealth, actions: &mut Vec<Action>) {
        self.phase = Phase::Done;
        self.in_flight = None;
        // The last view drops only this host and keeps the others as it last saw them (as
        // gossip does): what it reports last is its own removal, never the removal of members
        // that are alive.
        self.set_health(health, actions);
        self.publish(actions);
        actions.push(Action::Stop);
    }

    fn set_health(&mut self, health: HostHealth, actions: &mut Vec<Action>) {
        if self.health != health {
            self.health = health.clone();
            actions.push(Action::Health(health));
        }
    }

    /// The current view of the cluster.
    #[must_use]
    pub fn view(&self) -> ClusterView {
        let mut members: Vec<Member> = self
            .peers
            .values()
            .map(|p| Member {
                node: p.node.clone(),
                status: if p.leaving {
                    MemberStatus::Leaving
                } else {
                    MemberStatus::Up
                },
                roles: p.roles.clone(),
            })
            .collect();
        let own = match self.phase {
            Phase::Up => Some(MemberStatus::Up),
            Phase::Leaving if self.resource_version.is_some() => Some(MemberStatus::Leaving),
            _ => None,
        };
        if let Some(status) = own {
            members.push(Member {
                node: self.me.clone(),
                status,
                roles: self.roles.clone(),
            });
        }
        ClusterView::from_members(Some(self.me.clone()), members)
    }

    fn publish(&mut self, actions: &mut Vec<Action>) {
        let view = self.view();
        if self.last_view.as_ref() != Some(&view) {
            self.last_view = Some(view.clone());
            actions.push(Action::Publish(view));
        }
    }
}

fn retry_delay(timing: KubeTiming) -> Duration {
    (timing.renew_interval / 4).max(Duration::from_millis(50))
}
