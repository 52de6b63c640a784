//! The five routing strategies as a pure decision over a routee list: no I/O, no awaiting.
//!
//! # Smallest mailbox
//! The caller supplies each routee's last known depth, or `None` for a routee that has not
//! reported (a cluster node that never answered, or whose reading went stale). Routees without a
//! reading are skipped, not assumed idle; if no routee has a reading the choice falls back to
//! round-robin order, so a cold cache degrades the decision and never drops a message. Ties go
//! to the first routee at or after the round-robin cursor, which spreads equal load.

use std::fmt;
use std::str::FromStr;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::rendezvous::{rendezvous_pick_hashed, stable_hash};

/// A routee's stable name as consistent hashing sees it: its bytes and their
/// [`stable_hash`]. Any byte string is one (hashed per pick); a router that keeps its routee
/// list can store [`HashedRouteeId`]s and hash each name once.
pub trait RouteeId {
    /// The name.
    fn id(&self) -> &[u8];

    /// `stable_hash(self.id())`.
    fn id_hash(&self) -> u64 {
        stable_hash(self.id())
    }
}

impl<T: AsRef<[u8]>> RouteeId for T {
    fn id(&self) -> &[u8] {
        self.as_ref()
    }
}

/// A routee name with its hash computed once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HashedRouteeId {
    id: Box<[u8]>,
    hash: u64,
}

impl HashedRouteeId {
    /// Hash `id` now.
    #[must_use]
    pub fn new(id: impl Into<Box<[u8]>>) -> Self {
        let id = id.into();
        let hash = stable_hash(&id);
        Self { id, hash }
    }
}

impl RouteeId for HashedRouteeId {
    fn id(&self) -> &[u8] {
        &self.id
    }

    fn id_hash(&self) -> u64 {
        self.hash
    }
}

/// The depth [`RoutingLogic::select_smallest`] reads as "no reading": the routee is skipped.
pub const NO_READING: usize = usize::MAX;

/// One of the five routing strategies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RoutingStrategy {
    /// One routee per message, cycling in routee order.
    RoundRobin,
    /// One routee per message, uniformly at random.
    Random,
    /// The same key always goes to the same routee (rendezvous hashing).
    ConsistentHashing,
    /// The routee with the shortest known mailbox.
    SmallestMailbox,
    /// Every routee gets every message.
    Broadcast,
}

impl RoutingStrategy {
    /// All strategies, in documentation order.
    pub const ALL: [Self; 5] = [
        Self::RoundRobin,
        Self::Random,
        Self::ConsistentHashing,
        Self::SmallestMailbox,
        Self::Broadcast,
    ];

    /// The configuration name, such as `round-robin`.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::RoundRobin => "round-robin",
            Self::Random => "random",
            Self::ConsistentHashing => "consistent-hashing",
            Self::SmallestMailbox => "smallest-mailbox",
            Self::Broadcast => "broadcast",
        }
    }
}

impl fmt::Display for RoutingStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A strategy name that is not one of the five.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown routing strategy {0:?}; expected one of round-robin, random, consistent-hashing, smallest-mailbox, broadcast"
)]
pub struct UnknownStrategy(pub String);

impl FromStr for RoutingStrategy {
    type Err = UnknownStrategy;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|strategy| strategy.name() == s)
            .ok_or_else(|| UnknownStrategy(s.to_owned()))
    }
}

/// Where one message goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Selection {
    /// To the routee at this index.
    One(usize),
    /// To every routee.
    All,
    /// Nowhere: there are no routees (the message becomes a dead letter).
    NoRoutees,
}

/// The per-router state of a strategy: a cursor and a random source.
#[derive(Debug, Clone)]
pub struct RoutingLogic {
    strategy: RoutingStrategy,
    cursor: usize,
    rng: SmallRng,
}

impl RoutingLogic {
    /// Logic for `strategy`, with a random source seeded from `seed` (fixed seeds replay).
    #[must_use]
    pub fn new(strategy: RoutingStrategy, seed: u64) -> Self {
        Self {
            strategy,
            cursor: 0,
            rng: SmallRng::seed_from_u64(seed),
        }
    }

    /// The strategy.
    #[must_use]
    pub fn strategy(&self) -> RoutingStrategy {
        self.strategy
    }

    /// Choose for one message among `ids.len()` routees (ids are the routees' stable names,
    /// used by consistent hashing). `key` is the consistent-hashing key; `depth(i)` is routee
    /// `i`'s known mailbox depth, used by smallest-mailbox.
    pub fn select<I: RouteeId>(
        &mut self,
        ids: &[I],
        key: Option<&[u8]>,
        depth: impl Fn(usize) -> Option<usize>,
    ) -> Selection {
        let n = ids.len();
        if n == 0 {
            return Selection::NoRoutees;
        }
        match self.strategy {
            RoutingStrategy::RoundRobin => Selection::One(self.next_in_turn(n)),
            RoutingStrategy::Random => Selection::One(self.rng.random_range(0..n)),
            RoutingStrategy::ConsistentHashing => {
                let key = key.unwrap_or_default();
                let routees = ids.iter().map(|id| (id.id_hash(), id.id()));
                Selection::One(rendezvous_pick_hashed(key, routees).unwrap_or(0))
            }
            RoutingStrategy::SmallestMailbox => {
                self.select_smallest(n, 0, |i| depth(i).unwrap_or(NO_READING))
            }
            RoutingStrategy::Broadcast => Selection::All,
        }
    }

    /// The smallest-mailbox choice among `n` routees, with `depth(i)` = [`NO_READING`] for a
    /// routee without a reading: the routee with the smallest depth, ties to the first at or
    /// after the round-robin cursor; round-robin order when none has a reading. This is the
    /// scan [`RoutingLogic::select`] runs for smallest-mailbox (with `floor` 0), for callers
    /// that keep depths as plain numbers.
    ///
    /// `floor` is a depth no routee is below (0 always is): the first routee found at it is
    /// the answer, so a caller that knows a higher floor saves the rest of the scan.
    #[inline]
    pub fn select_smallest(
        &mut self,
        n: usize,
        floor: usize,
        depth: impl Fn(usize) -> usize,
    ) -> Selection {
        if n == 0 {
            return Selection::NoRoutees;
        }
        let start = self.turn(n);
        // From the cursor to the end, then from the start to the cursor (the order of
        // `(start + offset) % n` without a division per routee); a strictly smaller depth
        // wins, so ties go to the first routee at or after the cursor — and a routee at the
        // floor cannot be beaten, so the scan stops there.
        let (mut best, mut best_depth) = (start, NO_READING);
        'scan: {
            for index in start..n {
                let d = depth(index);
                if d < best_depth {
                    best = index;
                    best_depth = d;
                    if d <= floor {
                        break 'scan;
                    }
                }
            }
            for index in 0..start {
                let d = depth(index);
                if d < best_depth {
                    best = index;
                    best_depth = d;
                    if d <= floor {
                        break 'scan;
                    }
                }
            }
        }
        self.cursor = best + 1;
        Selection::One(best)
    }

    /// The round-robin cursor: the index the next turn starts from (taken modulo the routee
    /// count), one past the last routee chosen by round-robin or smallest-mailbox.
    #[must_use]
    pub fn cursor(&self) -> usize {
        self.cursor
    }

    /// Move the round-robin cursor, for a router whose routee list changed: a cluster router
    /// resumes after the last routee it chose, by address, so a rebuild does not repeat or
    /// skip a turn.
    pub fn set_cursor(&mut self, cursor: usize) {
        self.cursor = cursor;
    }

    fn next_in_turn(&mut self, n: usize) -> usize {
        let index = self.turn(n);
        self.cursor = index + 1;
        index
    }

    /// The cursor as an index below `n`; it already is one unless the routee list shrank or
    /// the cursor was set, so the division is the rare path.
    fn turn(&self, n: usize) -> usize {
        if self.cursor < n {
            self.cursor
        } else {
            self.cursor % n
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: usize) -> Vec<Vec<u8>> {
        (0..n).map(|i| format!("r{i}").into_bytes()).collect()
    }

    fn pick(logic: &mut RoutingLogic, ids: &[Vec<u8>], depths: &[Option<usize>]) -> Selection {
        let refs: Vec<&[u8]> = ids.iter().map(Vec::as_slice).collect();
        logic.select(&refs, None, |i| depths[i])
    }

    #[test]
    fn round_robin_cycles_in_order_and_stays_in_range_after_a_shrink() {
        let mut logic = RoutingLogic::new(RoutingStrategy::RoundRobin, 1);
        let four = ids(4);
        let picks: Vec<_> = (0..6)
            .map(|_| pick(&mut logic, &four, &[None; 4]))
            .collect();
        assert_eq!(picks, [0, 1, 2, 3, 0, 1].map(Selection::One).to_vec());
        let two = ids(2);
        for _ in 0..5 {
            let Selection::One(i) = pick(&mut logic, &two, &[None; 2]) else {
                panic!()
            };
            assert!(i < 2);
        }
    }

    #[test]
    fn smallest_mailbox_skips_silent_routees_and_falls_back_to_round_robin_when_cold() {
        let mut logic = RoutingLogic::new(RoutingStrategy::SmallestMailbox, 1);
        let three = ids(3);
        // Routee 0 is silent (it may be the struggling one); 2 is shallower than 1.
        assert_eq!(
            pick(&mut logic, &three, &[None, Some(5), Some(1)]),
            Selection::One(2)
        );
        assert_eq!(
            pick(&mut logic, &three, &[None, Some(0), Some(1)]),
            Selection::One(1)
        );
        let mut cold = RoutingLogic::new(RoutingStrategy::SmallestMailbox, 1);
        let picks: Vec<_> = (0..3)
            .map(|_| pick(&mut cold, &three, &[None; 3]))
            .collect();
        assert_eq!(picks, [0, 1, 2].map(Selection::One).to_vec());
    }

    #[test]
    fn no_routees_is_reported_not_guessed() {
        for strategy in RoutingStrategy::ALL {
            let mut logic = RoutingLogic::new(strategy, 1);
            assert_eq!(
                logic.select::<&[u8]>(&[], None, |_| None),
                Selection::NoRoutees
            );
        }
    }

    #[test]
    fn strategy_names_round_trip_and_unknown_names_list_the_choices() {
        for strategy in RoutingStrategy::ALL {
            assert_eq!(strategy.name().parse::<RoutingStrategy>(), Ok(strategy));
        }
        let err = "fastest".parse::<RoutingStrategy>().unwrap_err();
        assert!(err.to_string().contains("smallest-mailbox"), "{err}");
    }

    proptest::proptest! {
        /// A floor at or below the smallest depth only shortens the scan: the choice and the
        /// cursor after it are those of the full scan.
        #[test]
        fn a_floor_below_every_depth_changes_nothing(
            depths in proptest::collection::vec(proptest::option::of(0usize..8), 1..20),
            cursor in 0usize..40,
            below in 0usize..3,
        ) {
            let depth = |i: usize| depths[i].unwrap_or(NO_READING);
            let min = depths.iter().flatten().min().copied().unwrap_or(0);
            let floor = min.saturating_sub(below);
            let mut full = RoutingLogic::new(RoutingStrategy::SmallestMailbox, 1);
            let mut short = full.clone();
            full.set_cursor(cursor);
            short.set_cursor(cursor);
            proptest::prop_assert_eq!(
                full.select_smallest(depths.len(), 0, depth),
                short.select_smallest(depths.len(), floor, depth)
            );
            proptest::prop_assert_eq!(full.cursor(), short.cursor());
        }
    }

    #[test]
    fn random_is_uniform_by_chi_square() {
        let n = 8;
        let mut logic = RoutingLogic::new(RoutingStrategy::Random, 42);
        let routees = ids(n);
        let mut counts = vec![0usize; n];
        let draws = 80_000;
        for _ in 0..draws {
            let Selection::One(i) = pick(&mut logic, &routees, &[None; 8]) else {
                panic!()
            };
            counts[i] += 1;
        }
        let expected = draws as f64 / n as f64;
        let chi2: f64 = counts
            .iter()
            .map(|&c| (c as f64 - expected).powi(2) / expected)
            .sum();
        // 7 degrees of freedom: p = 0.001 at 24.32.
        assert!(chi2 < 24.32, "chi-square {chi2:.2} over {counts:?}");
    }
}
