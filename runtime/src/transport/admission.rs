//! Which accepted connections may run a handshake: a pure `step(state, event, now)` that the
//! accept loop consults before it spends anything on a connection.
//!
//! # Why
//! A connection in its handshake has not proven anything, yet it holds a file descriptor, a
//! task and a buffer until it finishes or times out. Admitting on a first-come basis lets
//! anyone who can open TCP connections (no secret needed) fill every slot with silent
//! connections, and then a member that restarts cannot reconnect: it is marked unreachable and
//! downed (issue 14). The policy below makes such a flood cost the flooder, not the members.
//!
//! # Pools
//! - **Known sources**: IP addresses that proved the cluster secret before, on a connection in
//!   either direction (every member this node exchanges heartbeats with is one). Their
//!   connections go to a reserved pool of [`AdmissionOptions::reserved_slots`], and spill into
//!   the general pool when that is full. A known source is never refused: when both pools are
//!   full, the oldest pending connection of the reserved pool is evicted to make room.
//! - **Everyone else** shares the general pool of [`AdmissionOptions::general_slots`]. One
//!   source may hold at most [`per_source_slots`](AdmissionOptions::with_per_source_slots) of it; more from that
//!   source are refused at once. (Connections a source spilled into the general pool while it
//!   was known count towards its share, so a source forgotten while it holds more than its
//!   share is refused until enough of them end.) When the pool is full a newcomer is still admitted: the
//!   pending connection that has made the least progress is evicted (one that has not sent a
//!   valid first message before one that has; the oldest first among equals). A flood at rate
//!   `R` therefore leaves every connection at least `general_slots / R` seconds for its
//!   handshake — milliseconds are enough for a real peer — instead of refusing everyone once
//!   the slots are taken.
//!
//! # Bounds
//! Pending connections never exceed `reserved_slots + general_slots`; the set of known sources
//! never exceeds [`max_known_sources`](AdmissionOptions::with_max_known_sources) (the least recently proven is
//! forgotten first) and an entry is forgotten [`known_for`](AdmissionOptions::with_known_for) after its last
//! proof. Refusing costs no task and no buffer: the shell closes the socket with a reset.
//!
//! # Shape
//! The state is plain data advanced by [`step`]; the accept loop feeds it events and performs
//! the [`AdmissionAction`]s (start a handshake, close a connection). No sockets, no clocks.

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::net::IpAddr;
use std::time::Duration;

use tokio::time::Instant;

/// Settings of the admission policy. Defaults are documented on each field's setter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmissionOptions {
    general_slots: usize,
    reserved_slots: usize,
    per_source_slots: usize,
    max_known_sources: usize,
    known_for: Duration,
}

impl Default for AdmissionOptions {
    fn default() -> Self {
        Self {
            general_slots: 256,
            reserved_slots: 64,
            per_source_slots: 8,
            max_known_sources: 4_096,
            known_for: Duration::from_secs(3_600),
        }
    }
}

/// Admission settings that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid admission setting {field}: {problem}")]
pub struct AdmissionOptionsError {
    /// The setting.
    pub field: &'static str,
    /// What is wrong and what is allowed.
    pub problem: String,
}

impl AdmissionOptions {
    /// Connections from unknown sources that may be in their handshake at once (default 256).
    #[must_use]
    pub fn with_general_slots(mut self, slots: usize) -> Self {
        self.general_slots = slots;
        self
    }

    /// Handshake slots reserved for sources that proved the secret before (default 64).
    #[must_use]
    pub fn with_reserved_slots(mut self, slots: usize) -> Self {
        self.reserved_slots = slots;
        self
    }

    /// General-pool slots one source IP may hold at once (default 8).
    #[must_use]
    pub fn with_per_source_slots(mut self, slots: usize) -> Self {
        self.per_source_slots = slots;
        self
    }

    /// Known sources remembered at most (default 4096).
    #[must_use]
    pub fn with_max_known_sources(mut self, sources: usize) -> Self {
        self.max_known_sources = sources;
        self
    }

    /// How long a source stays known after it last proved the secret (default 1 h).
    #[must_use]
    pub fn with_known_for(mut self, duration: Duration) -> Self {
        self.known_for = duration;
        self
    }

    /// Connections from unknown sources that may be in their handshake at once.
    #[must_use]
    pub fn general_slots(&self) -> usize {
        self.general_slots
    }

    /// Handshake slots reserved for known sources.
    #[must_use]
    pub fn reserved_slots(&self) -> usize {
        self.reserved_slots
    }

    /// The most pending connections there can be: both pools full.
    #[must_use]
    pub fn max_pending(&self) -> usize {
        self.general_slots + self.reserved_slots
    }

    /// Checks every setting once, at start.
    ///
    /// # Errors
    /// An [`AdmissionOptionsError`] naming the setting and what is allowed.
    pub fn validate(&self) -> Result<(), AdmissionOptionsError> {
        let positive = |field, value: usize| {
            if value == 0 {
                Err(AdmissionOptionsError {
                    field,
                    problem: "must be > 0, got 0".to_owned(),
                })
            } else {
                Ok(())
            }
        };
        positive("general_slots", self.general_slots)?;
        positive("reserved_slots", self.reserved_slots)?;
        positive("per_source_slots", self.per_source_slots)?;
        positive("max_known_sources", self.max_known_sources)?;
        if self.per_source_slots > self.general_slots {
            return Err(AdmissionOptionsError {
                field: "per_source_slots",
                problem: format!(
                    "must be at most general_slots ({}), got {}",
                    self.general_slots, self.per_source_slots
                ),
            });
        }
        if self.known_for.is_zero() {
            return Err(AdmissionOptionsError {
                field: "known_for",
                problem: "must be > 0, got 0ms".to_owned(),
            });
        }
        Ok(())
    }
}

/// The shell's name for one accepted connection.
pub type ConnectionId = u64;

/// Which pool a pending connection occupies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Pool {
    /// Reserved for sources that proved the secret before.
    Reserved,
    /// Shared by everyone.
    General,
}

impl Pool {
    /// The pool's name in metrics and logs.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Reserved => "reserved",
            Self::General => "general",
        }
    }
}

impl fmt::Display for Pool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a connection gets no handshake (or loses its slot).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Its source already holds its share of the general pool.
    PerSourceLimit,
    /// A newer connection needed the slot: this one had made the least progress.
    Evicted,
}

/// What happens to the policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdmissionEvent {
    /// A connection was accepted from `source`.
    Arrived {
        /// The shell's name for it.
        id: ConnectionId,
        /// The peer's IP address.
        source: IpAddr,
    },
    /// The connection's first handshake message was valid: it is more likely a real peer.
    Progressed {
        /// The connection.
        id: ConnectionId,
    },
    /// The connection's peer proved the secret: it leaves the pools and its source is known.
    Authenticated {
        /// The connection.
        id: ConnectionId,
    },
    /// The handshake failed, timed out or the connection closed.
    Ended {
        /// The connection.
        id: ConnectionId,
    },
    /// A connection this node dialled reached a peer at `source` that proved the secret.
    DialledPeerProved {
        /// The peer's IP address.
        source: IpAddr,
    },
}

/// What the accept loop must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdmissionAction {
    /// Run the handshake on this connection.
    Admit {
        /// The connection.
        id: ConnectionId,
        /// The pool it occupies.
        pool: Pool,
    },
    /// Close this newly arrived connection at once, without a handshake.
    Refuse {
        /// The connection.
        id: ConnectionId,
        /// Why.
        reason: Refusal,
    },
    /// Close this pending connection: its slot went to a newer one.
    Evict {
        /// The connection.
        id: ConnectionId,
        /// The pool it was in.
        pool: Pool,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Pending {
    source: IpAddr,
    pool: Pool,
    /// Arrival order (ties in time are common).
    arrival: u64,
    progressed: bool,
}

/// Eviction order within a pool: unprogressed before progressed, then oldest first.
type EvictionKey = (bool, u64, ConnectionId);

/// The admission policy's state: pending connections, per-source counts and known sources.
#[derive(Debug, Clone)]
pub struct Admission {
    settings: AdmissionOptions,
    pending: HashMap<ConnectionId, Pending>,
    /// Eviction order, per pool.
    order: [BTreeSet<EvictionKey>; 2],
    /// General-pool connections per source.
    per_source: HashMap<IpAddr, usize>,
    /// Known sources and when each last proved the secret.
    known: HashMap<IpAddr, Instant>,
    next_arrival: u64,
}

impl Admission {
    /// An empty policy with these (validated) settings.
    #[must_use]
    pub fn new(settings: AdmissionOptions) -> Self {
        Self {
            settings,
            pending: HashMap::new(),
            order: [BTreeSet::new(), BTreeSet::new()],
            per_source: HashMap::new(),
            known: HashMap::new(),
            next_arrival: 0,
        }
    }

    /// The settings.
    #[must_use]
    pub fn settings(&self) -> &AdmissionOptions {
        &self.settings
    }

    /// Connections pending in `pool`.
    #[must_use]
    pub fn pending(&self, pool: Pool) -> usize {
        self.order[pool_index(pool)].len()
    }

    /// Sources remembered as having proved the secret.
    #[must_use]
    pub fn known_sources(&self) -> usize {
        self.known.len()
    }

    /// Whether `source` proved the secret within `known_for` of `now`.
    #[must_use]
    pub fn is_known(&self, source: IpAddr, now: Instant) -> bool {
        self.known
            .get(&source)
            .is_some_and(|at| now.saturating_duration_since(*at) < self.settings.known_for)
    }

    fn capacity(&self, pool: Pool) -> usize {
        match pool {
            Pool::Reserved => self.settings.reserved_slots,
            Pool::General => self.settings.general_slots,
        }
    }

    fn has_room(&self, pool: Pool) -> bool {
        self.pending(pool) < self.capacity(pool)
    }

    fn insert(&mut self, id: ConnectionId, source: IpAddr, pool: Pool) {
        let arrival = self.next_arrival;
        self.next_arrival += 1;
        self.order[pool_index(pool)].insert((false, arrival, id));
        if pool == Pool::General {
            *self.per_source.entry(source).or_default() += 1;
        }
        self.pending.insert(
            id,
            Pending {
                source,
                pool,
                arrival,
                progressed: false,
            },
        );
    }

    fn remove(&mut self, id: ConnectionId) -> Option<Pending> {
        let pending = self.pending.remove(&id)?;
        self.order[pool_index(pending.pool)].remove(&(pending.progressed, pending.arrival, id));
        if pending.pool == Pool::General {
            if let Some(count) = self.per_source.get_mut(&pending.source) {
                *count -= 1;
                if *count == 0 {
                    self.per_source.remove(&pending.source);
                }
            }
        }
        Some(pending)
    }

    /// Evicts the connection of `pool` that made the least progress, oldest first.
    fn evict_from(&mut self, pool: Pool) -> Option<AdmissionAction> {
        let &(_, _, victim) = self.order[pool_index(pool)].first()?;
        self.remove(victim);
        Some(AdmissionAction::Evict { id: victim, pool })
    }

    fn remember(&mut self, source: IpAddr, now: Instant) {
        let known_for = self.settings.known_for;
        if !self.known.contains_key(&source) && self.known.len() >= self.settings.max_known_sources
        {
            self.known
                .retain(|_, at| now.saturating_duration_since(*at) < known_for);
            if self.known.len() >= self.settings.max_known_sources {
                // Still full of live entries: forget the one that proved least recently.
                if let Some(oldest) = self
                    .known
                    .iter()
                    .min_by_key(|(_, at)| **at)
                    .map(|(ip, _)| *ip)
                {
                    self.known.remove(&oldest);
                }
            }
        }
        self.known.insert(source, now);
    }

    fn arrive(&mut self, id: ConnectionId, source: IpAddr, now: Instant) -> Vec<AdmissionAction> {
        if self.pending.contains_key(&id) {
            // The shell never reuses an id; ignoring a duplicate keeps the counts true.
            return vec![];
        }
        if self.is_known(source, now) {
            let mut actions = Vec::with_capacity(2);
            let pool = if self.has_room(Pool::Reserved) {
                Pool::Reserved
            } else if self.has_room(Pool::General) {
                Pool::General
            } else {
                actions.extend(self.evict_from(Pool::Reserved));
                Pool::Reserved
            };
            self.insert(id, source, pool);
            actions.push(AdmissionAction::Admit { id, pool });
            return actions;
        }
        if self.per_source.get(&source).copied().unwrap_or(0) >= self.settings.per_source_slots {
            return vec![AdmissionAction::Refuse {
                id,
                reason: Refusal::PerSourceLimit,
            }];
        }
        let mut actions = Vec::with_capacity(2);
        if !self.has_room(Pool::General) {
            actions.extend(self.evict_from(Pool::General));
        }
        self.insert(id, source, Pool::General);
        actions.push(AdmissionAction::Admit {
            id,
            pool: Pool::General,
        });
        actions
    }
}

fn pool_index(pool: Pool) -> usize {
    match pool {
        Pool::Reserved => 0,
        Pool::General => 1,
    }
}

/// Advances the policy by one event. Events about connections it no longer tracks (evicted,
/// or ended twice) change nothing.
#[must_use]
pub fn step(
    mut state: Admission,
    event: AdmissionEvent,
    now: Instant,
) -> (Admission, Vec<AdmissionAction>) {
    let actions = match event {
        AdmissionEvent::Arrived { id, source } => state.arrive(id, source, now),
        AdmissionEvent::Progressed { id } => {
            if let Some(pending) = state.pending.get_mut(&id) {
                if !pending.progressed {
                    let order = &mut state.order[pool_index(pending.pool)];
                    order.remove(&(false, pending.arrival, id));
                    order.insert((true, pending.arrival, id));
                    pending.progressed = true;
                }
            }
            vec![]
        }
        AdmissionEvent::Authenticated { id } => {
            if let Some(pending) = state.remove(id) {
                state.remember(pending.source, now);
            }
            vec![]
        }
        AdmissionEvent::Ended { id } => {
            state.remove(id);
            vec![]
        }
        AdmissionEvent::DialledPeerProved { source } => {
            state.remember(source, now);
            vec![]
        }
    };
    (state, actions)
}

#[cfg(test)]
mod tests;
