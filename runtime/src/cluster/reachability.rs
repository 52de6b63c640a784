//! Reachability: each node's opinion of which members it cannot reach, spread by gossip.
//!
//! An observer's table lists the subjects its failure detector currently calls unreachable,
//! with a version the observer bumps on every change; merging keeps each observer's newer
//! table. A member is unreachable in a view when any observer in that view says so. Being
//! unreachable removes a member from `up_members()` but never from the cluster: only `down`
//! does that.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::UniqueAddress;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct ObserverTable {
    version: u64,
    unreachable: BTreeSet<UniqueAddress>,
}

/// Who cannot reach whom.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Reachability {
    tables: BTreeMap<UniqueAddress, ObserverTable>,
}

impl Reachability {
    /// `observer` can no longer reach `subject`. Returns whether anything changed.
    pub(super) fn unreachable(
        &mut self,
        observer: &UniqueAddress,
        subject: &UniqueAddress,
    ) -> bool {
        let table = self.tables.entry(observer.clone()).or_default();
        if table.unreachable.insert(subject.clone()) {
            table.version += 1;
            true
        } else {
            false
        }
    }

    /// `observer` reaches `subject` again. Returns whether anything changed.
    pub(super) fn reachable(&mut self, observer: &UniqueAddress, subject: &UniqueAddress) -> bool {
        let Some(table) = self.tables.get_mut(observer) else {
            return false;
        };
        let changed = table.unreachable.remove(subject);
        if changed {
            table.version += 1;
        }
        changed
    }

    /// Keep each observer's newer table.
    #[must_use]
    pub(super) fn merge(&self, other: &Self) -> Self {
        let mut tables = self.tables.clone();
        for (observer, theirs) in &other.tables {
            match tables.get(observer) {
                Some(ours) if ours.version >= theirs.version => {}
                _ => {
                    tables.insert(observer.clone(), theirs.clone());
                }
            }
        }
        Self { tables }
    }

    /// Forget a removed member, as observer and as subject.
    pub(super) fn remove(&mut self, node: &UniqueAddress) {
        self.tables.remove(node);
        for table in self.tables.values_mut() {
            if table.unreachable.remove(node) {
                table.version += 1;
            }
        }
    }

    /// Whether `observer` itself calls `subject` unreachable.
    #[must_use]
    pub(super) fn is_unreachable_by(
        &self,
        observer: &UniqueAddress,
        subject: &UniqueAddress,
    ) -> bool {
        self.tables
            .get(observer)
            .is_some_and(|t| t.unreachable.contains(subject))
    }

    /// The observers that call `subject` unreachable.
    #[must_use]
    pub(super) fn observers_of(&self, subject: &UniqueAddress) -> Vec<UniqueAddress> {
        self.tables
            .iter()
            .filter(|(_, t)| t.unreachable.contains(subject))
            .map(|(observer, _)| observer.clone())
            .collect()
    }
}
