//! [`DepthCache`]: the smallest-mailbox router's picture of each routee node's queue — readings
//! with the time they arrived, a stale window, and which nodes to ask on each refresh tick.
//! Pure: the caller passes the time, nothing here sleeps or sends.
//!
//! # What counts as a reading
//! The last depth a node reported, until it is older than the stale window (a zero window keeps
//! readings forever). A node that never answered, whose reading went stale, or that reported
//! having no routee at the path has no reading: the router skips it rather than assume it idle.
//! With no reading at all the cache is *cold* and the router falls back to round-robin order.
//!
//! # Asking silent nodes
//! Every node is asked on every tick while it answers. A node that leaves its queries
//! unanswered (it runs no depth agent, or is overloaded) is asked after 1, 1, 1, 2, 4, 8 and
//! then every 16 ticks; any answer restores the every-tick rhythm. A node without an agent
//! turns each query into a dead letter on its side, so this keeps that noise low.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

use crate::Address;

/// Ask a silent node at most this many ticks apart.
const MAX_BACKOFF_TICKS: u64 = 16;

/// One depth reading and when it arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reading {
    /// The routee's mailbox depth.
    pub depth: usize,
    /// When the reading arrived here.
    pub at: Instant,
}

#[derive(Debug, Clone, Default)]
struct NodeState {
    reading: Option<Reading>,
    /// A query is out and has not been answered.
    awaiting: bool,
    /// Queries sent while the previous one was still unanswered, in a row.
    misses: u32,
    /// The first tick at which the node is asked again.
    next_tick: u64,
}

/// Cached routee depths per node, with a stale window.
#[derive(Debug, Clone)]
pub(super) struct DepthCache {
    stale_after: Option<Duration>,
    nodes: BTreeMap<Address, NodeState>,
}

impl DepthCache {
    /// A cache whose readings count for `stale_after` (`Duration::ZERO`: forever).
    #[must_use]
    pub(super) fn new(stale_after: Duration) -> Self {
        Self {
            stale_after: (!stale_after.is_zero()).then_some(stale_after),
            nodes: BTreeMap::new(),
        }
    }

    /// Track exactly `nodes`: new ones start without a reading, others are forgotten.
    pub(super) fn set_nodes(&mut self, nodes: &[Address]) {
        self.nodes.retain(|node, _| nodes.contains(node));
        for node in nodes {
            self.nodes.entry(node.clone()).or_default();
        }
    }

    /// `node` answered at `at`: its routee's depth, or `None` when it has no actor at the
    /// routee path. Returns false (and records nothing) for a node not tracked.
    pub(super) fn record(&mut self, node: &Address, depth: Option<usize>, at: Instant) -> bool {
        let Some(state) = self.nodes.get_mut(node) else {
            return false;
        };
        state.reading = depth.map(|depth| Reading { depth, at });
        state.awaiting = false;
        state.misses = 0;
        state.next_tick = 0;
        true
    }

    /// The usable reading of `node` at `now`.
    #[must_use]
    pub(super) fn reading(&self, node: &Address, now: Instant) -> Option<Reading> {
        let reading = self.nodes.get(node)?.reading?;
        self.is_fresh(&reading, now).then_some(reading)
    }

    /// The usable reading of each of `nodes` at `now`, in their order (`None`: skip it).
    #[must_use]
    pub(super) fn readings(&self, nodes: &[Address], now: Instant) -> Vec<Option<Reading>> {
        nodes.iter().map(|node| self.reading(node, now)).collect()
    }

    #[cfg(test)]
    /// The usable depth of each of `nodes` at `now`, in their order (`None`: skip it).
    #[must_use]
    pub(super) fn depths(&self, nodes: &[Address], now: Instant) -> Vec<Option<usize>> {
        nodes
            .iter()
            .map(|node| self.reading(node, now).map(|r| r.depth))
            .collect()
    }

    #[cfg(test)]
    /// Whether no node has a usable reading at `now` (the router then uses round-robin order).
    #[must_use]
    pub(super) fn is_cold(&self, now: Instant) -> bool {
        self.nodes
            .keys()
            .all(|node| self.reading(node, now).is_none())
    }

    /// When the next usable reading expires, if one ever does.
    #[must_use]
    pub(super) fn next_expiry(&self, now: Instant) -> Option<Instant> {
        let stale_after = self.stale_after?;
        self.nodes
            .values()
            .filter_map(|state| state.reading)
            .map(|reading| reading.at + stale_after)
            .filter(|&expiry| expiry > now)
            .min()
    }

    /// The nodes to ask on refresh tick number `tick` (ticks count up from 1); marks each as
    /// awaiting an answer.
    pub(super) fn due(&mut self, tick: u64) -> Vec<Address> {
        let mut due = Vec::new();
        for (node, state) in &mut self.nodes {
            if tick < state.next_tick {
                continue;
            }
            if state.awaiting {
                state.misses = state.misses.saturating_add(1);
            }
            state.awaiting = true;
            state.next_tick = tick + backoff(state.misses);
            due.push(node.clone());
        }
        due
    }

    fn is_fresh(&self, reading: &Reading, now: Instant) -> bool {
        self.stale_after
            .is_none_or(|stale_after| now.saturating_duration_since(reading.at) < stale_after)
    }
}

/// Ticks until the next query to a node that left `misses` queries unanswered in a row.
fn backoff(misses: u32) -> u64 {
    match misses {
        0..=2 => 1,
        m => (1u64 << (m - 2).min(4)).min(MAX_BACKOFF_TICKS),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn node(i: u8) -> Address {
        Address::new("app", &format!("10.0.0.{i}"), 2552)
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_reading_counts_until_the_stale_window_passes() {
        let t0 = Instant::now();
        let mut cache = DepthCache::new(ms(1_000));
        cache.set_nodes(&[node(1)]);
        assert!(cache.record(&node(1), Some(3), t0));
        assert_eq!(cache.depths(&[node(1)], t0 + ms(999)), vec![Some(3)]);
        assert_eq!(cache.next_expiry(t0), Some(t0 + ms(1_000)));
        assert_eq!(cache.depths(&[node(1)], t0 + ms(1_000)), vec![None]);
        assert!(cache.is_cold(t0 + ms(1_000)));
        assert_eq!(cache.next_expiry(t0 + ms(1_000)), None);
    }

    #[test]
    fn a_zero_window_keeps_readings_forever() {
        let t0 = Instant::now();
        let mut cache = DepthCache::new(Duration::ZERO);
        cache.set_nodes(&[node(1)]);
        cache.record(&node(1), Some(7), t0);
        assert_eq!(
            cache.depths(&[node(1)], t0 + Duration::from_secs(86_400)),
            vec![Some(7)]
        );
        assert_eq!(cache.next_expiry(t0), None);
    }

    #[test]
    fn silent_nodes_and_nodes_without_a_routee_have_no_reading() {
        let t0 = Instant::now();
        let mut cache = DepthCache::new(ms(1_000));
        cache.set_nodes(&[node(1), node(2), node(3)]);
        assert!(cache.is_cold(t0));
        cache.record(&node(2), Some(9), t0);
        cache.record(&node(3), None, t0);
        assert_eq!(
            cache.depths(&[node(1), node(2), node(3)], t0),
            vec![None, Some(9), None]
        );
        assert!(!cache.is_cold(t0));
    }

    #[test]
    fn readings_from_untracked_nodes_are_ignored_and_departed_nodes_forgotten() {
        let t0 = Instant::now();
        let mut cache = DepthCache::new(ms(1_000));
        cache.set_nodes(&[node(1), node(2)]);
        assert!(!cache.record(&node(9), Some(1), t0));
        cache.record(&node(2), Some(1), t0);
        cache.set_nodes(&[node(1)]);
        cache.set_nodes(&[node(1), node(2)]);
        assert_eq!(
            cache.depths(&[node(2)], t0),
            vec![None],
            "a rejoined node starts over"
        );
    }

    #[test]
    fn a_silent_node_is_asked_less_and_less_often_until_it_answers() {
        let mut cache = DepthCache::new(ms(1_000));
        cache.set_nodes(&[node(1), node(2)]);
        let mut asked = Vec::new();
        for tick in 1..=40 {
            let due = cache.due(tick);
            if due.contains(&node(1)) {
                asked.push(tick);
            }
            // node 2 answers every query at once.
            assert!(
                due.contains(&node(2)),
                "an answering node is asked every tick"
            );
            cache.record(&node(2), Some(0), Instant::now());
        }
        assert_eq!(asked, vec![1, 2, 3, 4, 6, 10, 18, 34]);
        cache.record(&node(1), Some(0), Instant::now());
        assert_eq!(cache.due(41), vec![node(1), node(2)]);
        assert_eq!(cache.due(42), vec![node(1), node(2)]);
    }

    proptest! {
        /// Whatever the arrival times, a reading is used exactly while it is younger than the
        /// window, and the depth used is the latest one recorded.
        #[test]
        fn only_fresh_latest_readings_are_used(
            window_ms in 1u64..5_000,
            arrivals in proptest::collection::vec((0u64..10_000, 0usize..100), 1..20),
            probe_ms in 0u64..20_000,
        ) {
            let t0 = Instant::now();
            let mut cache = DepthCache::new(ms(window_ms));
            cache.set_nodes(&[node(1)]);
            let mut arrivals = arrivals;
            arrivals.sort_by_key(|(at, _)| *at);
            let mut latest = None;
            for (at, depth) in &arrivals {
                if *at > probe_ms { break; }
                cache.record(&node(1), Some(*depth), t0 + ms(*at));
                latest = Some((*at, *depth));
            }
            let expected = latest
                .filter(|(at, _)| probe_ms - at < window_ms)
                .map(|(_, depth)| depth);
            prop_assert_eq!(cache.depths(&[node(1)], t0 + ms(probe_ms)), vec![expected]);
        }
    }
}
