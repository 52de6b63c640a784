//! Vector clocks: which of two gossip versions is newer, or whether they are concurrent.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::UniqueAddress;

/// A version: one counter per node that changed the gossip.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct VectorClock {
    counters: BTreeMap<UniqueAddress, u64>,
}

/// How two versions relate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Causality {
    /// The same version.
    Same,
    /// This one happened before the other.
    Before,
    /// This one happened after the other.
    After,
    /// Neither: concurrent changes that must be merged.
    Concurrent,
}

impl VectorClock {
    /// Count one more change by `node`.
    pub(super) fn increment(&mut self, node: &UniqueAddress) {
        *self.counters.entry(node.clone()).or_default() += 1;
    }

    /// The pointwise maximum of two clocks.
    #[must_use]
    pub(super) fn merge(&self, other: &Self) -> Self {
        let mut counters = self.counters.clone();
        for (node, &count) in &other.counters {
            let entry = counters.entry(node.clone()).or_default();
            *entry = (*entry).max(count);
        }
        Self { counters }
    }

    /// How `self` relates to `other`.
    #[must_use]
    pub(super) fn compare(&self, other: &Self) -> Causality {
        let mut less = false;
        let mut greater = false;
        let nodes = self.counters.keys().chain(other.counters.keys());
        for node in nodes {
            let a = self.counters.get(node).copied().unwrap_or(0);
            let b = other.counters.get(node).copied().unwrap_or(0);
            match a.cmp(&b) {
                Ordering::Less => less = true,
                Ordering::Greater => greater = true,
                Ordering::Equal => {}
            }
        }
        match (less, greater) {
            (false, false) => Causality::Same,
            (true, false) => Causality::Before,
            (false, true) => Causality::After,
            (true, true) => Causality::Concurrent,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Address;

    fn node(port: u16) -> UniqueAddress {
        UniqueAddress {
            address: Address::new("c", "127.0.0.1", port),
            incarnation: 1,
        }
    }

    #[test]
    fn increments_order_versions_and_divergence_is_concurrent() {
        let mut a = VectorClock::default();
        let b = a.clone();
        assert_eq!(a.compare(&b), Causality::Same);
        a.increment(&node(1));
        assert_eq!(a.compare(&b), Causality::After);
        assert_eq!(b.compare(&a), Causality::Before);
        let mut c = b.clone();
        c.increment(&node(2));
        assert_eq!(a.compare(&c), Causality::Concurrent);
        let merged = a.merge(&c);
        assert_eq!(merged.compare(&a), Causality::After);
        assert_eq!(merged.compare(&c), Causality::After);
    }
}
