//! Rebalancing, off by default: after membership changes, one host's side of moving
//! activations towards an even spread, as a pure state machine.
//!
//! Placement only decides where *new* activations go: a host added to a loaded cluster gets new
//! keys, and scaling down leaves the survivors uneven (seed 003: "Scaling down does not move
//! actors back… rebalancing is the correction, and it is off unless configured"). With
//! rebalancing enabled, every host runs this machine for its own activations:
//!
//! - A membership change arms it; each [`Event::Tick`] (one per
//!   [`RebalanceOptions::interval`]) it compares the activation counts it knows — its own exactly,
//!   the others as last published, a host that published nothing as 0 — with an even spread.
//! - Within [`RebalanceOptions::tolerance`] of even it reports [`RebalanceEvent::Balanced`] once
//!   and stops until the next membership change.
//! - Otherwise every host computes the same plan from the same counts ([`plan`]: hosts sorted by
//!   address, exact targets that differ by at most one, surplus matched to deficit in order) and
//!   starts its own share of it: at most [`RebalanceOptions::max_moves_per_interval`] moves,
//!   the longest-idle activations first, never a key whose previous move has not finished, and
//!   no new moves while any of its moves is in flight (so its count is exact when it plans
//!   again).
//! - Each move is reported as [`RebalanceEvent::MoveStarted`], then [`RebalanceEvent::Moved`]
//!   or [`RebalanceEvent::MoveFailed`].
//!
//! The shell performs [`Action::Move`] as a hand-off of that one key (stop, release, activate on
//! the target with a placed message) and answers [`Event::MoveFinished`].

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use tokio::time::Instant;

use crate::UniqueAddress;

/// The default time between two rebalancing rounds.
pub(crate) const DEFAULT_REBALANCE_INTERVAL: Duration = Duration::from_secs(10);
/// The default bound of moves one host starts per round.
pub(crate) const DEFAULT_MAX_MOVES_PER_INTERVAL: usize = 100;
/// The default tolerance: every host within 10% of the even share counts as balanced.
pub(crate) const DEFAULT_TOLERANCE: f64 = 0.1;

/// Rebalancing of one actor type. `RebalanceOptions::default()` is disabled.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct RebalanceOptions {
    /// Move activations at all (default `false`).
    enabled: bool,
    /// Time between two rounds (default 10 s).
    interval: Duration,
    /// Moves one host starts per round (default 100).
    max_moves_per_interval: usize,
    /// How far from the even share a host may be and still count as balanced, as a fraction of
    /// the share (default 0.1); a difference of one activation is always balanced.
    tolerance: f64,
}

impl Default for RebalanceOptions {
    fn default() -> Self {
        Self {
            enabled: false,
            interval: DEFAULT_REBALANCE_INTERVAL,
            max_moves_per_interval: DEFAULT_MAX_MOVES_PER_INTERVAL,
            tolerance: DEFAULT_TOLERANCE,
        }
    }
}

/// Why [`RebalanceOptions`] cannot work.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum RebalanceOptionsError {
    /// A zero interval would rebalance in a busy loop.
    #[error("rebalance interval must be at least 1 ms, got {0:?}")]
    Interval(Duration),
    /// Zero moves per round would never move anything.
    #[error("rebalance max_moves_per_interval must be at least 1, got 0")]
    MaxMoves,
    /// The tolerance must be a fraction.
    #[error("rebalance tolerance must be a number from 0 to 1 (0.1 = within 10% of even), got {0}")]
    Tolerance(f64),
}

impl RebalanceOptions {
    /// Enabled, with the defaults.
    #[must_use]
    pub(crate) fn enabled() -> Self {
        Self::default().with_enabled(true)
    }

    /// Rebalance at all.
    #[must_use]
    pub(crate) fn with_enabled(mut self, enabled: bool) -> Self {
        self.enabled = enabled;
        self
    }

    /// The time between two rounds (at least 1 ms).
    #[must_use]
    pub(crate) fn with_interval(mut self, interval: Duration) -> Self {
        self.interval = interval;
        self
    }

    /// The moves one host starts per round (at least 1).
    #[must_use]
    pub(crate) fn with_max_moves_per_interval(mut self, moves: usize) -> Self {
        self.max_moves_per_interval = moves;
        self
    }

    /// How far from the even share counts as balanced, a fraction from 0 to 1.
    #[must_use]
    pub(crate) fn with_tolerance(mut self, tolerance: f64) -> Self {
        self.tolerance = tolerance;
        self
    }

    /// The time between two rounds: the shell's timer for [`Event::Tick`].
    #[must_use]
    pub(crate) fn interval(&self) -> Duration {
        self.interval
    }

    /// Checks every option; the error names the one that cannot work and what is allowed.
    ///
    /// # Errors
    /// [`RebalanceOptionsError`] for an interval under 1 ms, zero moves per round, or a
    /// tolerance outside 0..=1.
    pub(crate) fn validate(&self) -> Result<(), RebalanceOptionsError> {
        if self.interval < Duration::from_millis(1) {
            return Err(RebalanceOptionsError::Interval(self.interval));
        }
        if self.max_moves_per_interval == 0 {
            return Err(RebalanceOptionsError::MaxMoves);
        }
        if !(0.0..=1.0).contains(&self.tolerance) {
            return Err(RebalanceOptionsError::Tolerance(self.tolerance));
        }
        Ok(())
    }
}

/// What rebalancing reports; the agent forwards each as an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RebalanceEvent {
    /// A move began: `key` leaves `from` (this host) for `to`.
    MoveStarted {
        /// The key.
        key: String,
        /// This host.
        from: UniqueAddress,
        /// The target.
        to: UniqueAddress,
    },
    /// The move finished: `key` is active on `to`.
    Moved {
        /// The key.
        key: String,
        /// This host.
        from: UniqueAddress,
        /// The target.
        to: UniqueAddress,
    },
    /// The move failed; the key stays where it is or re-activates on its next message.
    MoveFailed {
        /// The key.
        key: String,
        /// This host.
        from: UniqueAddress,
        /// The target.
        to: UniqueAddress,
        /// What went wrong.
        error: String,
    },
    /// Every host is within the tolerance of even: rebalancing stops until membership changes.
    Balanced {
        /// The counts it decided on, by host.
        spread: Vec<(UniqueAddress, u64)>,
    },
}

/// What happened.
#[derive(Debug, Clone)]
pub(crate) enum Event {
    /// This host's membership view (this host included while it is a member).
    Members(BTreeSet<UniqueAddress>),
    /// A host published its activation count.
    Load {
        /// The host.
        host: UniqueAddress,
        /// Its activations.
        activations: u64,
    },
    /// A round: this host's activations now, each with the time of its last message.
    Tick {
        /// This host's activations.
        activations: Vec<(String, Instant)>,
    },
    /// The answer to [`Action::Move`].
    MoveFinished {
        /// The key.
        key: String,
        /// `Err` with the cause when it failed.
        outcome: Result<(), String>,
    },
}

/// What the shell must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Action {
    /// Hand `key` off to `to`; answer with [`Event::MoveFinished`].
    Move {
        /// The key.
        key: String,
        /// The target.
        to: UniqueAddress,
    },
    /// Report this.
    Report(RebalanceEvent),
}

/// One host's rebalancing of one actor type.
#[derive(Debug)]
pub(crate) struct Rebalancer {
    me: UniqueAddress,
    options: RebalanceOptions,
    members: BTreeSet<UniqueAddress>,
    loads: BTreeMap<UniqueAddress, u64>,
    /// Armed by a membership change, disarmed when balanced.
    armed: bool,
    /// Moves started and not finished: key -> target.
    in_flight: BTreeMap<String, UniqueAddress>,
}

impl Rebalancer {
    /// The rebalancer of host `me`.
    ///
    /// # Errors
    /// The options' [`RebalanceOptionsError`].
    pub(crate) fn new(
        me: UniqueAddress,
        options: RebalanceOptions,
    ) -> Result<Self, RebalanceOptionsError> {
        options.validate()?;
        Ok(Self {
            me,
            options,
            members: BTreeSet::new(),
            loads: BTreeMap::new(),
            armed: false,
            in_flight: BTreeMap::new(),
        })
    }

    /// The keys whose moves have not finished.
    #[must_use]
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Armed: a membership change has not been balanced yet.
    #[must_use]
    pub(crate) fn is_armed(&self) -> bool {
        self.armed
    }

    fn on_tick(
        &mut self,
        activations: Vec<(String, Instant)>,
        now: Instant,
        out: &mut Vec<Action>,
    ) {
        if !self.options.enabled || !self.armed || !self.in_flight.is_empty() {
            return;
        }
        if !self.members.contains(&self.me) {
            return;
        }
        let counts: Vec<(UniqueAddress, u64)> = self
            .members
            .iter()
            .map(|h| {
                let n = if *h == self.me {
                    activations.len() as u64
                } else {
                    self.loads.get(h).copied().unwrap_or(0)
                };
                (h.clone(), n)
            })
            .collect();
        if balanced(&counts, self.options.tolerance) {
            self.armed = false;
            out.push(Action::Report(RebalanceEvent::Balanced { spread: counts }));
            return;
        }
        let mine: Vec<(UniqueAddress, u64)> = plan(&counts)
            .into_iter()
            .filter(|(from, _, _)| *from == self.me)
            .map(|(_, to, n)| (to, n))
            .collect();
        if mine.is_empty() {
            return;
        }
        // Longest idle first; the key breaks ties so the choice replays.
        let mut by_idle: Vec<(Duration, String)> = activations
            .into_iter()
            .map(|(key, last)| (now.saturating_duration_since(last), key))
            .collect();
        by_idle.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        let mut keys = by_idle.into_iter().map(|(_, key)| key);
        let mut budget = self.options.max_moves_per_interval;
        for (to, n) in mine {
            for _ in 0..n {
                if budget == 0 {
                    return;
                }
                let Some(key) = keys.next() else { return };
                budget -= 1;
                *self.loads.entry(to.clone()).or_insert(0) += 1;
                self.in_flight.insert(key.clone(), to.clone());
                out.push(Action::Report(RebalanceEvent::MoveStarted {
                    key: key.clone(),
                    from: self.me.clone(),
                    to: to.clone(),
                }));
                out.push(Action::Move {
                    key,
                    to: to.clone(),
                });
            }
        }
    }

    fn on_move_finished(
        &mut self,
        key: String,
        outcome: Result<(), String>,
        out: &mut Vec<Action>,
    ) {
        let Some(to) = self.in_flight.remove(&key) else {
            return;
        };
        let from = self.me.clone();
        out.push(Action::Report(match outcome {
            Ok(()) => RebalanceEvent::Moved { key, from, to },
            Err(error) => {
                // Not there after all: the count comes back with the target's next publication.
                if let Some(n) = self.loads.get_mut(&to) {
                    *n = n.saturating_sub(1);
                }
                RebalanceEvent::MoveFailed {
                    key,
                    from,
                    to,
                    error,
                }
            }
        }));
    }
}

/// Whether every host is within `tolerance` of the even share (a difference of one activation
/// always is).
#[must_use]
pub(crate) fn balanced(counts: &[(UniqueAddress, u64)], tolerance: f64) -> bool {
    if counts.is_empty() {
        return true;
    }
    let total: u64 = counts.iter().map(|(_, n)| n).sum();
    let mean = total as f64 / counts.len() as f64;
    let slack = (mean * tolerance).max(1.0);
    counts
        .iter()
        .all(|(_, n)| (*n as f64 - mean).abs() <= slack)
}

/// The moves `(from, to, count)` that make `counts` even: targets differ by at most one (the
/// extra ones go to the hosts that have most already, so nothing moves for rounding), surplus
/// hosts and deficit hosts are matched in the order of `counts`. The same counts always give the
/// same plan, so hosts that know the same counts agree on it.
#[must_use]
pub(crate) fn plan(counts: &[(UniqueAddress, u64)]) -> Vec<(UniqueAddress, UniqueAddress, u64)> {
    let hosts = counts.len() as u64;
    if hosts == 0 {
        return Vec::new();
    }
    let total: u64 = counts.iter().map(|(_, n)| n).sum();
    let (base, extra) = (total / hosts, total % hosts);
    // The `extra` hosts with the most (earlier in `counts` on ties) keep one more.
    let mut by_load: Vec<usize> = (0..counts.len()).collect();
    by_load.sort_by(|&a, &b| counts[b].1.cmp(&counts[a].1).then(a.cmp(&b)));
    let mut target = vec![base; counts.len()];
    for &i in by_load.iter().take(usize::try_from(extra).unwrap_or(0)) {
        target[i] += 1;
    }
    let mut surplus: Vec<(usize, u64)> = Vec::new();
    let mut deficit: Vec<(usize, u64)> = Vec::new();
    for (i, (_, n)) in counts.iter().enumerate() {
        if *n > target[i] {
            surplus.push((i, n - target[i]));
        } else if *n < target[i] {
            deficit.push((i, target[i] - n));
        }
    }
    let mut moves = Vec::new();
    let mut d = deficit.into_iter();
    let mut current = d.next();
    for (from, mut give) in surplus {
        while give > 0 {
            let Some((to, need)) = current.as_mut() else {
                break;
            };
            let n = give.min(*need);
            moves.push((counts[from].0.clone(), counts[*to].0.clone(), n));
            give -= n;
            *need -= n;
            if *need == 0 {
                current = d.next();
            }
        }
    }
    moves
}

/// Advances the rebalancer by one event at `now`.
#[must_use]
pub(crate) fn step(mut state: Rebalancer, event: Event, now: Instant) -> (Rebalancer, Vec<Action>) {
    let mut out = Vec::new();
    match event {
        Event::Members(members) => {
            if members != state.members {
                state.armed = true;
                state.loads.retain(|h, _| members.contains(h));
                state.members = members;
            }
        }
        Event::Load { host, activations } => {
            if host != state.me {
                state.loads.insert(host, activations);
            }
        }
        Event::Tick { activations } => state.on_tick(activations, now, &mut out),
        Event::MoveFinished { key, outcome } => state.on_move_finished(key, outcome, &mut out),
    }
    (state, out)
}

#[cfg(test)]
mod tests;
