//! One host's side of the activation protocol for one actor type, as a pure state machine:
//! where each message for a key goes, when the host claims a key in the directory, starts,
//! passivates, hands off or fences an activation, and what waits meanwhile.
//!
//! # Per key
//! A key this host knows nothing about is looked up in the directory. An owner elsewhere is
//! remembered as the key's route and every message goes there; no owner means placement: the
//! policy picks a host, this host claims the key when it picked itself, and otherwise forwards
//! the messages to the chosen host marked *placed*, which claims the key itself — whatever it
//! believed about the key (no entry, a route, a lookup in flight): it never places a placed
//! message again, so hosts that place one key on each other crosswise (each sees the others as
//! cold) converge on the directory's answer instead of forwarding in a ring. Of racing
//! claimants the directory lets exactly one win; a loser routes to the winner. Only a host that
//! won the claim (or finds its own claim in the directory) starts the activation, so with a
//! directory whose claims outlive no fenced host there is at most one activation per key.
//!
//! # Routes stay until their host leaves the view
//! A route is dropped when its host leaves this host's membership view, not when the directory
//! says the owner changed: the old owner, still running, routes on by the same rules, so every
//! message of one sender keeps travelling one ordered path. Two exceptions end loops of stale
//! routes (an owner passivated and the key was placed again): a placed message makes this host
//! claim the key whatever its route, and a message that has been
//! forwarded [`Limits::max_hops`] times becomes a dead letter and drops the route it was about
//! to take, so the next message asks the directory.
//!
//! # Nothing is dropped silently
//! While a lookup, a claim, a stop or a release is in flight, the key's messages wait in a
//! buffer of at most [`Limits::buffer_size`], in arrival order; what does not fit, what cannot
//! be placed, what the directory failed for, and what a fenced host holds become
//! [`Action::DeadLetter`] with an [`Undelivered`] cause (an ask's caller sees it as its error).
//! The property tests in `activation/tests.rs` check that every message is delivered,
//! forwarded, dead-lettered or still buffered, exactly once, and in arrival order per key.
//!
//! # Lifecycle
//! An activation idle for [`Limits::idle_timeout`] is stopped and its claim released (the next
//! message activates it again, wherever placement says). `Leave` stops and releases every
//! activation, routing what arrives meanwhile to the new owners once the claims are gone; the
//! host is done when it reports [`Action::HandedOff`]. A claim of this host that the directory
//! loses (an eviction, seen on the watch) stops the activation without a release. `Fence` stops
//! everything at once: a fenced host's claims are forfeit.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::time::Instant;
use troupe_lease::directory::Revision;

use super::placement::{Candidate, PlacementPolicy, PlacementRequest};
use crate::UniqueAddress;

/// The default bound of one key's buffer while its activation is claimed, moved or stopped.
pub(crate) const DEFAULT_BUFFER_SIZE: usize = 1_000;
/// The default idle time after which an activation is passivated.
pub(crate) const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(120);
/// The default number of times a message may be forwarded between hosts.
pub(crate) const DEFAULT_MAX_HOPS: u8 = 4;

/// The machine's bounds and timers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    /// Messages one key may buffer.
    pub(crate) buffer_size: usize,
    /// Passivate after this long without a message; `None`: never.
    pub(crate) idle_timeout: Option<Duration>,
    /// Forwards after which a message becomes a dead letter.
    pub(crate) max_hops: u8,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            buffer_size: DEFAULT_BUFFER_SIZE,
            idle_timeout: Some(DEFAULT_IDLE_TIMEOUT),
            max_hops: DEFAULT_MAX_HOPS,
        }
    }
}

/// A message for a key, as it travels between hosts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Envelope<T> {
    /// The message.
    pub(crate) item: T,
    /// How often it has been forwarded.
    pub(crate) hops: u8,
    /// The sending host placed the activation on the receiver: claim, do not place again.
    pub(crate) placed: bool,
}

impl<T> Envelope<T> {
    /// A message from a local sender.
    pub(crate) fn new(item: T) -> Self {
        Self {
            item,
            hops: 0,
            placed: false,
        }
    }
}

/// Why a message was not delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Undelivered {
    /// The key's buffer was full.
    BufferFull,
    /// It was forwarded [`Limits::max_hops`] times.
    TooManyHops,
    /// The placement policy found (or chose) no host.
    NoHost,
    /// The directory named an owner that is not in this host's view.
    OwnerNotMember,
    /// A lookup or claim failed.
    DirectoryFailed(String),
    /// This host is fenced.
    Fenced,
}

/// What happened.
#[derive(Debug)]
pub(crate) enum Event<T> {
    /// A message for `key`, from a local sender or forwarded by another host.
    Message {
        /// The key.
        key: String,
        /// The message.
        envelope: Envelope<T>,
        /// The host that forwarded it; `None` from a local sender. The machine does not need
        /// it (a placed message is claimed whoever placed it); it is kept for diagnostics.
        #[allow(dead_code)]
        from: Option<UniqueAddress>,
    },
    /// The answer to [`Action::Lookup`]: the owner and the revision of its claim.
    LookedUp {
        /// The key.
        key: String,
        /// The claim in force, if any.
        owner: Option<(UniqueAddress, Revision)>,
    },
    /// The answer to [`Action::Claim`]: the claim in force (this host's when it won).
    Claimed {
        /// The key.
        key: String,
        /// The owner.
        owner: UniqueAddress,
        /// Its claim's revision.
        revision: Revision,
    },
    /// A lookup or claim of `key` failed.
    DirectoryFailed {
        /// The key.
        key: String,
        /// What the directory said.
        error: String,
    },
    /// [`Action::Release`] finished (a failed release too: the claim then stays, owned by a
    /// host without an activation, which starts one on the next message the claim routes to it).
    Released {
        /// The key.
        key: String,
    },
    /// The local activation of `key` ended (after [`Action::Stop`], or on its own).
    Stopped {
        /// The key.
        key: String,
    },
    /// The directory's watch saw `key` change at `revision`.
    Watched {
        /// The key.
        key: String,
        /// What changed.
        change: Watched,
        /// When it took effect.
        revision: Revision,
    },
    /// This host's membership view: the hosts that may own and take activations (this one
    /// included while it is a member).
    Members(BTreeSet<UniqueAddress>),
    /// A host published its activation count.
    Load {
        /// The host.
        host: UniqueAddress,
        /// Its activations.
        activations: u64,
    },
    /// A host is handing off (it said so, or the view shows it leaving): no new activation goes
    /// there, but routes to it stay (it forwards what it no longer hosts). Forgotten when it
    /// leaves the view.
    Departing(UniqueAddress),
    /// The idle timer of `key` (asked for by [`Action::ScheduleIdleCheck`]) fired.
    IdleCheck {
        /// The key.
        key: String,
    },
    /// Hand every activation off: stop, release, route what arrives to the next owner.
    Leave,
    /// This host lost its place in the cluster: stop everything, its claims are forfeit.
    Fence,
}

/// A change of one key's claim, as the directory's watch reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Watched {
    /// This host now owns the key.
    Claimed(UniqueAddress),
    /// This host no longer does (released or evicted).
    Released(UniqueAddress),
}

/// What the shell must do, in order.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Action<T> {
    /// Look `key` up in the directory; answer with [`Event::LookedUp`].
    Lookup {
        /// The key.
        key: String,
    },
    /// Claim `key` for this host; answer with [`Event::Claimed`].
    Claim {
        /// The key.
        key: String,
    },
    /// Start the local activation of `key`.
    Start {
        /// The key.
        key: String,
    },
    /// Give `item` to the local activation of `key`.
    Deliver {
        /// The key.
        key: String,
        /// The message.
        item: T,
    },
    /// Send `envelope` to the host `to`.
    Forward {
        /// The key.
        key: String,
        /// The next host.
        to: UniqueAddress,
        /// The message, its hops counted.
        envelope: Envelope<T>,
    },
    /// Stop the local activation of `key` after the messages it was given; answer with
    /// [`Event::Stopped`].
    Stop {
        /// The key.
        key: String,
    },
    /// Release this host's claim of `key`; answer with [`Event::Released`].
    Release {
        /// The key.
        key: String,
    },
    /// `item` becomes a dead letter (an ask's caller gets the error).
    DeadLetter {
        /// The key.
        key: String,
        /// The message.
        item: T,
        /// Why.
        cause: Undelivered,
    },
    /// Deliver [`Event::IdleCheck`] for `key` at `at`.
    ScheduleIdleCheck {
        /// The key.
        key: String,
        /// When.
        at: Instant,
    },
    /// The number of local activations changed: publish it.
    Activations(u64),
    /// Leaving, and this host holds no claim any more: it may exit.
    HandedOff,
}

/// One key, from this host's view.
#[derive(Debug)]
enum KeyState<T> {
    /// Owned elsewhere: forward there (`placed`: this host placed it and the owner may still
    /// have to claim it).
    Routed { via: UniqueAddress, placed: bool },
    /// The directory is being asked who owns it.
    Resolving { buffer: VecDeque<Envelope<T>> },
    /// This host is claiming it.
    Claiming { buffer: VecDeque<Envelope<T>> },
    /// The local activation runs, under the claim of `revision`.
    Active {
        revision: Revision,
        last_activity: Instant,
        /// The idle check that counts (earlier ones are stale).
        check_at: Option<Instant>,
    },
    /// The local activation is stopping; then the claim is released when `release`.
    Stopping {
        release: bool,
        buffer: VecDeque<Envelope<T>>,
    },
    /// The claim is being released.
    Releasing { buffer: VecDeque<Envelope<T>> },
}

/// One host's activations and routes for one actor type.
pub(crate) struct ActivationState<T> {
    me: UniqueAddress,
    limits: Limits,
    policy: Arc<dyn PlacementPolicy>,
    rng: SmallRng,
    members: BTreeSet<UniqueAddress>,
    /// Members that are handing off: never placement candidates.
    departing: BTreeSet<UniqueAddress>,
    /// Activation counts other hosts published, plus the placements this host made since.
    loads: BTreeMap<UniqueAddress, u64>,
    keys: BTreeMap<String, KeyState<T>>,
    published: u64,
    leaving: bool,
    handed_off: bool,
    fenced: bool,
}

impl<T> std::fmt::Debug for ActivationState<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ActivationState")
            .field("me", &self.me)
            .field("keys", &self.keys.len())
            .field("activations", &self.published)
            .field("leaving", &self.leaving)
            .field("fenced", &self.fenced)
            .finish_non_exhaustive()
    }
}

impl<T> ActivationState<T> {
    /// The machine of host `me`, placing with `policy`; its random choices derive from `seed`.
    pub(crate) fn new(
        me: UniqueAddress,
        limits: Limits,
        policy: Arc<dyn PlacementPolicy>,
        seed: u64,
    ) -> Self {
        Self {
            me,
            limits,
            policy,
            rng: SmallRng::seed_from_u64(seed),
            members: BTreeSet::new(),
            departing: BTreeSet::new(),
            loads: BTreeMap::new(),
            keys: BTreeMap::new(),
            published: 0,
            leaving: false,
            handed_off: false,
            fenced: false,
        }
    }

    /// The keys active here (stopping ones included).
    pub(crate) fn activations(&self) -> u64 {
        self.keys
            .values()
            .filter(|k| matches!(k, KeyState::Active { .. } | KeyState::Stopping { .. }))
            .count() as u64
    }

    /// The lookup cache: every key owned elsewhere and the host its messages go to.
    pub(crate) fn routes(&self) -> impl Iterator<Item = (&str, &UniqueAddress)> {
        self.keys.iter().filter_map(|(key, state)| match state {
            KeyState::Routed { via, .. } => Some((key.as_str(), via)),
            _ => None,
        })
    }

    /// The messages waiting for `key`, oldest first.
    #[cfg(test)]
    pub(crate) fn buffered(&self, key: &str) -> Vec<&T> {
        match self.keys.get(key) {
            Some(
                KeyState::Resolving { buffer }
                | KeyState::Claiming { buffer }
                | KeyState::Stopping { buffer, .. }
                | KeyState::Releasing { buffer },
            ) => buffer.iter().map(|e| &e.item).collect(),
            _ => Vec::new(),
        }
    }

    /// The host `key`'s messages are forwarded to, if it has a route.
    #[cfg(test)]
    pub(crate) fn route_of(&self, key: &str) -> Option<&UniqueAddress> {
        match self.keys.get(key) {
            Some(KeyState::Routed { via, .. }) => Some(via),
            _ => None,
        }
    }

    fn on_message(&mut self, key: String, envelope: Envelope<T>, now: Instant, out: &mut Out<T>) {
        if self.fenced {
            out.push(Action::DeadLetter {
                key,
                item: envelope.item,
                cause: Undelivered::Fenced,
            });
            return;
        }
        // A host placed the key here: claim it rather than follow a route or place it again.
        // Placing again is what looped when hosts that saw each other as cold placed one key
        // crosswise; the directory's claim is the arbiter, and a loser routes to the winner
        // unmarked, so a placed message is placed at most once more (after a release).
        let claim_here = envelope.placed
            && !self.leaving
            && matches!(
                self.keys.get(&key),
                None | Some(KeyState::Routed { .. } | KeyState::Resolving { .. })
            );
        if claim_here {
            let mut buffer = match self.keys.remove(&key) {
                Some(KeyState::Resolving { buffer }) => buffer,
                _ => VecDeque::new(),
            };
            if buffer.len() >= self.limits.buffer_size {
                out.push(Action::DeadLetter {
                    key: key.clone(),
                    item: envelope.item,
                    cause: Undelivered::BufferFull,
                });
            } else {
                buffer.push_back(envelope);
            }
            self.keys.insert(key.clone(), KeyState::Claiming { buffer });
            out.push(Action::Claim { key });
            return;
        }
        match self.keys.get_mut(&key) {
            None => {
                self.keys.insert(
                    key.clone(),
                    KeyState::Resolving {
                        buffer: VecDeque::from([envelope]),
                    },
                );
                out.push(Action::Lookup { key });
            }
            Some(KeyState::Routed { via, placed }) => {
                let (via, placed) = (via.clone(), *placed);
                if !self.forward(key.clone(), envelope, via, placed, out) {
                    // A longer loop of stale routes: the next message asks the directory.
                    self.keys.remove(&key);
                }
            }
            Some(KeyState::Active {
                last_activity,
                check_at,
                ..
            }) => {
                *last_activity = now;
                if check_at.is_none()
                    && let Some(idle) = self.limits.idle_timeout
                {
                    *check_at = Some(now + idle);
                    out.push(Action::ScheduleIdleCheck {
                        key: key.clone(),
                        at: now + idle,
                    });
                }
                out.push(Action::Deliver {
                    key,
                    item: envelope.item,
                });
            }
            Some(
                KeyState::Resolving { buffer }
                | KeyState::Claiming { buffer }
                | KeyState::Stopping { buffer, .. }
                | KeyState::Releasing { buffer },
            ) => {
                if buffer.len() >= self.limits.buffer_size {
                    out.push(Action::DeadLetter {
                        key,
                        item: envelope.item,
                        cause: Undelivered::BufferFull,
                    });
                } else {
                    buffer.push_back(envelope);
                }
            }
        }
    }

    fn forward(
        &self,
        key: String,
        envelope: Envelope<T>,
        to: UniqueAddress,
        placed: bool,
        out: &mut Out<T>,
    ) -> bool {
        if envelope.hops >= self.limits.max_hops {
            out.push(Action::DeadLetter {
                key,
                item: envelope.item,
                cause: Undelivered::TooManyHops,
            });
            return false;
        }
        out.push(Action::Forward {
            key,
            to,
            envelope: Envelope {
                item: envelope.item,
                hops: envelope.hops + 1,
                placed,
            },
        });
        true
    }

    fn dead_letter_all(
        key: &str,
        buffer: VecDeque<Envelope<T>>,
        cause: &Undelivered,
        out: &mut Out<T>,
    ) {
        for envelope in buffer {
            out.push(Action::DeadLetter {
                key: key.to_owned(),
                item: envelope.item,
                cause: cause.clone(),
            });
        }
    }

    /// The owner is known: start here, or route there.
    fn owner_known(
        &mut self,
        key: String,
        owner: UniqueAddress,
        revision: Revision,
        buffer: VecDeque<Envelope<T>>,
        now: Instant,
        out: &mut Out<T>,
    ) {
        if owner == self.me {
            if self.leaving {
                self.keys
                    .insert(key.clone(), KeyState::Releasing { buffer });
                out.push(Action::Release { key });
            } else {
                self.start(key, revision, buffer, now, out);
            }
        } else if !self.members.contains(&owner) {
            // Not cached: the eviction of a removed owner's claims is on its way.
            Self::dead_letter_all(&key, buffer, &Undelivered::OwnerNotMember, out);
        } else {
            self.route(key, owner, false, buffer, out);
        }
    }

    fn route(
        &mut self,
        key: String,
        via: UniqueAddress,
        placed: bool,
        buffer: VecDeque<Envelope<T>>,
        out: &mut Out<T>,
    ) {
        for envelope in buffer {
            // A buffered message past its hops is a dead letter; the route is fresh.
            let _ = self.forward(key.clone(), envelope, via.clone(), placed, out);
        }
        self.keys.insert(key, KeyState::Routed { via, placed });
    }

    fn start(
        &mut self,
        key: String,
        revision: Revision,
        buffer: VecDeque<Envelope<T>>,
        now: Instant,
        out: &mut Out<T>,
    ) {
        out.push(Action::Start { key: key.clone() });
        let check_at = self.limits.idle_timeout.map(|idle| now + idle);
        if let Some(at) = check_at {
            out.push(Action::ScheduleIdleCheck {
                key: key.clone(),
                at,
            });
        }
        for envelope in buffer {
            out.push(Action::Deliver {
                key: key.clone(),
                item: envelope.item,
            });
        }
        self.keys.insert(
            key,
            KeyState::Active {
                revision,
                last_activity: now,
                check_at,
            },
        );
    }

    /// No owner: ask the policy.
    fn place(&mut self, key: String, buffer: VecDeque<Envelope<T>>, out: &mut Out<T>) {
        let hosts: Vec<&UniqueAddress> = self
            .members
            .iter()
            .filter(|h| **h != self.me || !self.leaving)
            .filter(|h| !self.departing.contains(*h))
            .collect();
        let own = self.activations();
        let candidates: Vec<Candidate<'_>> = hosts
            .iter()
            .map(|&node| Candidate {
                node,
                activations: if *node == self.me {
                    Some(own)
                } else {
                    self.loads.get(node).copied()
                },
            })
            .collect();
        let chosen = if candidates.is_empty() {
            None
        } else {
            let request = PlacementRequest {
                key: &key,
                candidates: &candidates,
                local: hosts.iter().position(|h| **h == self.me),
                random: self.rng.random(),
            };
            self.policy
                .place(&request)
                .and_then(|i| hosts.get(i).map(|h| (*h).clone()))
        };
        match chosen {
            None => Self::dead_letter_all(&key, buffer, &Undelivered::NoHost, out),
            Some(host) if host == self.me => {
                self.keys.insert(key.clone(), KeyState::Claiming { buffer });
                out.push(Action::Claim { key });
            }
            Some(host) => {
                // Count it until the host publishes again, so a burst of placements spreads.
                *self.loads.entry(host.clone()).or_insert(0) += 1;
                self.route(key, host, true, buffer, out);
            }
        }
    }

    fn on_looked_up(
        &mut self,
        key: String,
        owner: Option<(UniqueAddress, Revision)>,
        now: Instant,
        out: &mut Out<T>,
    ) {
        let Some(KeyState::Resolving { .. }) = self.keys.get(&key) else {
            return;
        };
        let Some(KeyState::Resolving { buffer }) = self.keys.remove(&key) else {
            return;
        };
        match owner {
            Some((owner, revision)) => self.owner_known(key, owner, revision, buffer, now, out),
            None => self.place(key, buffer, out),
        }
    }

    fn on_claimed(
        &mut self,
        key: String,
        owner: UniqueAddress,
        revision: Revision,
        now: Instant,
        out: &mut Out<T>,
    ) {
        let Some(KeyState::Claiming { .. }) = self.keys.get(&key) else {
            return;
        };
        let Some(KeyState::Claiming { buffer }) = self.keys.remove(&key) else {
            return;
        };
        self.owner_known(key, owner, revision, buffer, now, out);
    }

    fn on_directory_failed(&mut self, key: String, error: String, out: &mut Out<T>) {
        if !matches!(
            self.keys.get(&key),
            Some(KeyState::Resolving { .. } | KeyState::Claiming { .. })
        ) {
            return;
        }
        if let Some(KeyState::Resolving { buffer } | KeyState::Claiming { buffer }) =
            self.keys.remove(&key)
        {
            Self::dead_letter_all(&key, buffer, &Undelivered::DirectoryFailed(error), out);
        }
    }

    fn on_stopped(&mut self, key: String, out: &mut Out<T>) {
        match self.keys.remove(&key) {
            Some(KeyState::Stopping { release, buffer }) => {
                if release {
                    self.keys
                        .insert(key.clone(), KeyState::Releasing { buffer });
                    out.push(Action::Release { key });
                } else {
                    self.after_release(key, buffer, out);
                }
            }
            Some(KeyState::Active { .. }) => {
                // It stopped on its own: the claim goes too, the next message re-activates.
                self.keys.insert(
                    key.clone(),
                    KeyState::Releasing {
                        buffer: VecDeque::new(),
                    },
                );
                out.push(Action::Release { key });
            }
            Some(other) => {
                self.keys.insert(key, other);
            }
            None => {}
        }
    }

    fn on_released(&mut self, key: String, out: &mut Out<T>) {
        if !matches!(self.keys.get(&key), Some(KeyState::Releasing { .. })) {
            return;
        }
        if let Some(KeyState::Releasing { buffer }) = self.keys.remove(&key) {
            self.after_release(key, buffer, out);
        }
    }

    /// The claim is gone: what waited goes to whoever owns the key next.
    fn after_release(&mut self, key: String, buffer: VecDeque<Envelope<T>>, out: &mut Out<T>) {
        if buffer.is_empty() {
            return;
        }
        if self.fenced {
            Self::dead_letter_all(&key, buffer, &Undelivered::Fenced, out);
            return;
        }
        self.keys
            .insert(key.clone(), KeyState::Resolving { buffer });
        out.push(Action::Lookup { key });
    }

    fn on_watched(&mut self, key: String, change: Watched, at: Revision, out: &mut Out<T>) {
        match (change, self.keys.get_mut(&key)) {
            // This host's claim went (evicted while it runs): stop, nothing left to release. A
            // removal older than the claim is the previous activation's.
            (Watched::Released(host), Some(KeyState::Active { revision, .. }))
                if host == self.me && at > *revision =>
            {
                self.keys.insert(
                    key.clone(),
                    KeyState::Stopping {
                        release: false,
                        buffer: VecDeque::new(),
                    },
                );
                out.push(Action::Stop { key });
            }
            // Someone claimed what this host placed: the target no longer has to claim it.
            (Watched::Claimed(_), Some(KeyState::Routed { placed, .. })) => *placed = false,
            _ => {}
        }
    }

    fn on_members(&mut self, members: BTreeSet<UniqueAddress>) {
        self.keys.retain(|_, state| match state {
            KeyState::Routed { via, .. } => members.contains(via),
            _ => true,
        });
        self.loads.retain(|host, _| members.contains(host));
        self.departing.retain(|host| members.contains(host));
        self.members = members;
    }

    fn on_idle_check(&mut self, key: String, now: Instant, out: &mut Out<T>) {
        let Some(idle) = self.limits.idle_timeout else {
            return;
        };
        let Some(KeyState::Active {
            last_activity,
            check_at,
            ..
        }) = self.keys.get_mut(&key)
        else {
            return;
        };
        if check_at.is_none_or(|at| now < at) {
            return;
        }
        if now >= *last_activity + idle {
            self.keys.insert(
                key.clone(),
                KeyState::Stopping {
                    release: true,
                    buffer: VecDeque::new(),
                },
            );
            out.push(Action::Stop { key });
        } else {
            let at = *last_activity + idle;
            *check_at = Some(at);
            out.push(Action::ScheduleIdleCheck { key, at });
        }
    }

    fn on_fence(&mut self, out: &mut Out<T>) {
        self.fenced = true;
        let keys = std::mem::take(&mut self.keys);
        for (key, state) in keys {
            match state {
                KeyState::Routed { .. } => {}
                KeyState::Active { .. } | KeyState::Stopping { .. } => {
                    if let KeyState::Active { .. } = state {
                        out.push(Action::Stop { key: key.clone() });
                    } else if let KeyState::Stopping { buffer, .. } = state {
                        Self::dead_letter_all(&key, buffer, &Undelivered::Fenced, out);
                    }
                    // Counted until it has stopped; its claim is forfeit, not released.
                    self.keys.insert(
                        key,
                        KeyState::Stopping {
                            release: false,
                            buffer: VecDeque::new(),
                        },
                    );
                }
                KeyState::Resolving { buffer }
                | KeyState::Claiming { buffer }
                | KeyState::Releasing { buffer } => {
                    Self::dead_letter_all(&key, buffer, &Undelivered::Fenced, out);
                }
            }
        }
    }

    fn on_leave(&mut self, out: &mut Out<T>) {
        self.leaving = true;
        for (key, state) in &mut self.keys {
            if let KeyState::Active { .. } = state {
                *state = KeyState::Stopping {
                    release: true,
                    buffer: VecDeque::new(),
                };
                out.push(Action::Stop { key: key.clone() });
            }
        }
    }

    /// After every step: publish a changed count, report a finished hand-off.
    fn finish(&mut self, out: &mut Out<T>) {
        let count = self.activations();
        if count != self.published {
            self.published = count;
            out.push(Action::Activations(count));
        }
        if self.leaving && !self.handed_off {
            let holds = self.keys.values().any(|k| {
                matches!(
                    k,
                    KeyState::Claiming { .. }
                        | KeyState::Active { .. }
                        | KeyState::Stopping { .. }
                        | KeyState::Releasing { .. }
                )
            });
            if !holds {
                self.handed_off = true;
                out.push(Action::HandedOff);
            }
        }
    }
}

type Out<T> = Vec<Action<T>>;

/// Advances the machine by one event at `now`.
#[must_use]
pub(crate) fn step<T>(
    mut state: ActivationState<T>,
    event: Event<T>,
    now: Instant,
) -> (ActivationState<T>, Vec<Action<T>>) {
    let mut out = Vec::new();
    match event {
        // Where it came from does not matter: a placed message is claimed whoever placed it.
        Event::Message {
            key,
            envelope,
            from: _,
        } => state.on_message(key, envelope, now, &mut out),
        Event::LookedUp { key, owner } => state.on_looked_up(key, owner, now, &mut out),
        Event::Claimed {
            key,
            owner,
            revision,
        } => state.on_claimed(key, owner, revision, now, &mut out),
        Event::DirectoryFailed { key, error } => state.on_directory_failed(key, error, &mut out),
        Event::Released { key } => state.on_released(key, &mut out),
        Event::Stopped { key } => state.on_stopped(key, &mut out),
        Event::Watched {
            key,
            change,
            revision,
        } => state.on_watched(key, change, revision, &mut out),
        Event::Members(members) => state.on_members(members),
        Event::Load { host, activations } => {
            if host != state.me {
                state.loads.insert(host, activations);
            }
        }
        Event::Departing(host) => {
            if host != state.me && state.members.contains(&host) {
                state.departing.insert(host);
            }
        }
        Event::IdleCheck { key } => state.on_idle_check(key, now, &mut out),
        Event::Leave => state.on_leave(&mut out),
        Event::Fence => state.on_fence(&mut out),
    }
    state.finish(&mut out);
    (state, out)
}

#[cfg(test)]
mod simulation;
#[cfg(test)]
mod tests;
