//! The gossiped membership state: members, reachability, a vector-clock version and who has
//! seen it — with merge, convergence and the leader's actions. Pure data and functions.
//!
//! # Convergence
//! A node's gossip has converged when every member has seen its current version, except
//! members that are unreachable *and* down or exiting; and no member is unreachable unless it
//! is down or exiting. The leader moves members (joining → up, leaving → exiting → removed,
//! down → removed) only on a converged gossip, so every node passes through the same states.
//!
//! # Leader
//! The leader is the first address-sorted member of `up_members()`: status up, and not
//! unreachable in this node's view (a node never counts itself unreachable). While no member
//! is up (a forming cluster, or the last member leaving), the first reachable member acts for
//! the leader without being reported as one.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::member::{Member, MemberStatus};
use super::reachability::Reachability;
use super::vector_clock::{Causality, VectorClock};
use crate::{Address, UniqueAddress};

/// The membership state one node holds and gossips.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Gossip {
    pub(crate) members: BTreeMap<UniqueAddress, Member>,
    pub(crate) seen: BTreeSet<UniqueAddress>,
    pub(crate) reachability: Reachability,
    pub(crate) version: VectorClock,
    /// Removed members: never re-admitted by a stale gossip.
    pub(crate) tombstones: BTreeSet<UniqueAddress>,
}

/// What receiving a gossip did to ours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Received {
    /// Theirs was older: ours is unchanged (and worth sending back).
    Older,
    /// Same version: only the seen sets were combined.
    Same,
    /// Theirs was newer: adopted.
    Newer,
    /// Concurrent: merged.
    Merged,
}

impl Gossip {
    /// A gossip holding only `node` as joining, for a node that starts a new cluster.
    #[must_use]
    pub(super) fn founding(node: &UniqueAddress, roles: BTreeSet<String>) -> Self {
        let mut gossip = Self::default();
        gossip.members.insert(
            node.clone(),
            Member {
                node: node.clone(),
                status: MemberStatus::Joining,
                roles,
            },
        );
        gossip.bump(node);
        gossip
    }

    /// Record a local change: a new version, seen only by `node`.
    pub(super) fn bump(&mut self, node: &UniqueAddress) {
        self.version.increment(node);
        self.seen.clear();
        self.seen.insert(node.clone());
    }

    /// The member entry of `node`, if it is a member.
    #[must_use]
    pub(super) fn member(&self, node: &UniqueAddress) -> Option<&Member> {
        self.members.get(node)
    }

    /// The member at `address` (any incarnation).
    #[must_use]
    pub(super) fn member_at(&self, address: &Address) -> Option<&Member> {
        self.members.values().find(|m| &m.node.address == address)
    }

    /// All members, address-ordered.
    pub(super) fn members(&self) -> impl Iterator<Item = &Member> {
        self.members.values()
    }

    /// Whether `node` was removed from this cluster.
    #[must_use]
    pub(super) fn is_tombstoned(&self, node: &UniqueAddress) -> bool {
        self.tombstones.contains(node)
    }

    /// The reachability table.
    #[must_use]
    pub(super) fn reachability(&self) -> &Reachability {
        &self.reachability
    }

    pub(crate) fn reachability_mut(&mut self) -> &mut Reachability {
        &mut self.reachability
    }

    /// Whether `node` has seen the current version.
    #[must_use]
    pub(super) fn has_seen(&self, node: &UniqueAddress) -> bool {
        self.seen.contains(node)
    }

    /// Whether some observer that still counts (a member that is not down or exiting) calls
    /// `node` unreachable.
    #[must_use]
    pub(super) fn is_unreachable(&self, node: &UniqueAddress) -> bool {
        self.reachability.observers_of(node).iter().any(|observer| {
            self.members
                .get(observer)
                .is_some_and(|m| !matches!(m.status, MemberStatus::Down | MemberStatus::Exiting))
        })
    }

    /// Every member that [`Gossip::is_unreachable`].
    #[must_use]
    pub(super) fn unreachable_members(&self) -> BTreeSet<UniqueAddress> {
        self.members
            .keys()
            .filter(|node| self.is_unreachable(node))
            .cloned()
            .collect()
    }

    /// Whether, seen from `me`, `node` is reachable (a node always reaches itself).
    #[must_use]
    pub(super) fn is_reachable_from(&self, me: &UniqueAddress, node: &UniqueAddress) -> bool {
        node == me || !self.is_unreachable(node)
    }

    /// Up members that `me` considers reachable, address-ordered.
    #[must_use]
    pub(super) fn up_members(&self, me: &UniqueAddress) -> Vec<&Member> {
        self.members
            .values()
            .filter(|m| m.status == MemberStatus::Up && self.is_reachable_from(me, &m.node))
            .collect()
    }

    /// The leader in `me`'s view: the first address-sorted up member.
    #[must_use]
    pub(super) fn leader(&self, me: &UniqueAddress) -> Option<&UniqueAddress> {
        self.up_members(me).first().map(|m| &m.node)
    }

    /// Who performs leader actions in `me`'s view: the leader, or while no member is up, the
    /// first reachable member that is not down.
    #[must_use]
    pub(super) fn acting_leader(&self, me: &UniqueAddress) -> Option<&UniqueAddress> {
        self.leader(me).or_else(|| {
            self.members
                .values()
                .find(|m| {
                    !matches!(m.status, MemberStatus::Down | MemberStatus::Removed)
                        && self.is_reachable_from(me, &m.node)
                })
                .map(|m| &m.node)
        })
    }

    /// Members whose having seen the gossip convergence requires: reachable up and leaving
    /// ones. Joining members have no say yet; down and exiting ones are on their way out.
    fn must_have_seen(&self, member: &Member) -> bool {
        matches!(member.status, MemberStatus::Up | MemberStatus::Leaving)
            && !self.is_unreachable(&member.node)
    }

    /// Whether every member that counts has seen this version and nothing blocks it: no member
    /// is unreachable unless it is down or exiting.
    #[must_use]
    pub(super) fn is_converged(&self) -> bool {
        let unreachable_blocks = self.members.values().any(|m| {
            self.is_unreachable(&m.node)
                && !matches!(m.status, MemberStatus::Down | MemberStatus::Exiting)
        });
        !unreachable_blocks && self.all_reachable_have_seen()
    }

    /// Whether every reachable up or leaving member has seen this version (convergence is then
    /// blocked, if at all, only by unreachable members).
    #[must_use]
    pub(super) fn all_reachable_have_seen(&self) -> bool {
        self.members
            .values()
            .all(|m| !self.must_have_seen(m) || self.seen.contains(&m.node))
    }

    /// Combine with a gossip from a peer, as `me`.
    pub(super) fn receive(&mut self, me: &UniqueAddress, theirs: Gossip) -> Received {
        match theirs.version.compare(&self.version) {
            Causality::Same => {
                self.seen.extend(theirs.seen);
                self.seen.insert(me.clone());
                Received::Same
            }
            Causality::Before => Received::Older,
            Causality::After => {
                *self = theirs;
                self.seen.insert(me.clone());
                self.drop_tombstoned();
                Received::Newer
            }
            Causality::Concurrent => {
                *self = self.merge(&theirs);
                self.seen.insert(me.clone());
                Received::Merged
            }
        }
    }

    /// Merge two concurrent gossips: members further along win, removals stick.
    #[must_use]
    pub(super) fn merge(&self, other: &Gossip) -> Gossip {
        let tombstones: BTreeSet<UniqueAddress> =
            self.tombstones.union(&other.tombstones).cloned().collect();
        let mut members = self.members.clone();
        for (node, theirs) in &other.members {
            match members.get(node) {
                Some(ours) if ours.status.precedence() >= theirs.status.precedence() => {}
                _ => {
                    members.insert(node.clone(), theirs.clone());
                }
            }
        }
        let mut merged = Gossip {
            members,
            seen: BTreeSet::new(),
            reachability: self.reachability.merge(&other.reachability),
            version: self.version.merge(&other.version),
            tombstones,
        };
        merged.drop_tombstoned();
        merged
    }

    fn drop_tombstoned(&mut self) {
        let removed: Vec<UniqueAddress> = self
            .members
            .keys()
            .filter(|node| self.tombstones.contains(*node))
            .cloned()
            .collect();
        for node in removed {
            self.members.remove(&node);
            self.reachability.remove(&node);
            self.seen.remove(&node);
        }
    }

    /// Set `node`'s status, if it is a member and the change moves it forward. Returns whether
    /// anything changed (the caller bumps the version).
    pub(super) fn set_status(&mut self, node: &UniqueAddress, status: MemberStatus) -> bool {
        match self.members.get_mut(node) {
            Some(member) if member.status.precedence() < status.precedence() => {
                member.status = status;
                true
            }
            _ => false,
        }
    }

    /// Admit `node` as joining; an older incarnation at the same address is downed (its process
    /// is gone: only one process can listen there). Returns whether anything changed.
    pub(super) fn admit(&mut self, node: &UniqueAddress, roles: BTreeSet<String>) -> bool {
        if self.members.contains_key(node) || self.tombstones.contains(node) {
            return false;
        }
        let stale: Vec<UniqueAddress> = self
            .members
            .keys()
            .filter(|n| n.address == node.address)
            .cloned()
            .collect();
        for old in stale {
            self.set_status(&old, MemberStatus::Down);
        }
        self.members.insert(
            node.clone(),
            Member {
                node: node.clone(),
                status: MemberStatus::Joining,
                roles,
            },
        );
        true
    }

    fn remove(&mut self, node: &UniqueAddress) {
        self.members.remove(node);
        self.reachability.remove(node);
        self.seen.remove(node);
        self.tombstones.insert(node.clone());
    }

    /// The leader's moves on a converged gossip: exiting and down members are removed, leaving
    /// members exit, joining and weakly-up members come up. Returns whether anything changed.
    pub(super) fn leader_actions(&mut self) -> bool {
        if !self.is_converged() {
            return false;
        }
        let gone: Vec<UniqueAddress> = self
            .members
            .values()
            .filter(|m| matches!(m.status, MemberStatus::Exiting | MemberStatus::Down))
            .map(|m| m.node.clone())
            .collect();
        let mut changed = !gone.is_empty();
        for node in &gone {
            self.remove(node);
        }
        for member in self.members.values_mut() {
            let next = match member.status {
                MemberStatus::Joining | MemberStatus::WeaklyUp => MemberStatus::Up,
                MemberStatus::Leaving => MemberStatus::Exiting,
                _ => continue,
            };
            member.status = next;
            changed = true;
        }
        changed
    }

    /// While only unreachable members block convergence, joining members become weakly up.
    /// Returns whether anything changed.
    pub(super) fn weakly_up_actions(&mut self) -> bool {
        if self.is_converged() || !self.all_reachable_have_seen() {
            return false;
        }
        let mut changed = false;
        for member in self.members.values_mut() {
            if member.status == MemberStatus::Joining {
                member.status = MemberStatus::WeaklyUp;
                changed = true;
            }
        }
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn node(port: u16) -> UniqueAddress {
        UniqueAddress {
            address: Address::new("c", "127.0.0.1", port),
            incarnation: 1,
        }
    }

    fn cluster_of(ports: &[u16]) -> Gossip {
        let mut gossip = Gossip::founding(&node(ports[0]), BTreeSet::new());
        for &port in &ports[1..] {
            gossip.admit(&node(port), BTreeSet::new());
        }
        for &port in ports {
            gossip.seen.insert(node(port));
        }
        gossip
    }

    #[test]
    fn converged_leader_brings_joining_members_up() {
        let mut gossip = cluster_of(&[1, 2, 3]);
        assert!(gossip.is_converged());
        assert!(gossip.leader_actions());
        assert_eq!(gossip.up_members(&node(1)).len(), 3);
        assert_eq!(gossip.leader(&node(2)), Some(&node(1)));
    }

    #[test]
    fn an_unreachable_member_blocks_convergence_and_joiners_become_weakly_up() {
        let mut gossip = cluster_of(&[1, 2, 3]);
        gossip.leader_actions();
        gossip.seen.extend([node(1), node(2), node(3)]);
        gossip.reachability.unreachable(&node(1), &node(3));
        gossip.admit(&node(4), BTreeSet::new());
        gossip.seen.extend([node(1), node(2), node(4)]);
        assert!(!gossip.is_converged());
        assert!(!gossip.leader_actions());
        assert!(gossip.weakly_up_actions());
        assert_eq!(
            gossip.member(&node(4)).unwrap().status,
            MemberStatus::WeaklyUp
        );
        // Unreachable is not removal: node 3 is still a member, just not up in anyone's view.
        assert!(gossip.member(&node(3)).is_some());
        assert!(
            gossip
                .up_members(&node(1))
                .iter()
                .all(|m| m.node != node(3))
        );
        // Downing the unreachable member unblocks convergence; the leader removes it.
        gossip.set_status(&node(3), MemberStatus::Down);
        assert!(gossip.is_converged());
        assert!(gossip.leader_actions());
        assert!(gossip.member(&node(3)).is_none());
        assert_eq!(gossip.member(&node(4)).unwrap().status, MemberStatus::Up);
    }

    #[test]
    fn leaving_goes_through_exiting_before_removal() {
        let mut gossip = cluster_of(&[1, 2]);
        gossip.leader_actions();
        gossip.set_status(&node(1), MemberStatus::Leaving);
        gossip.seen.extend([node(1), node(2)]);
        assert_eq!(gossip.leader(&node(1)), Some(&node(2)));
        gossip.leader_actions();
        assert_eq!(
            gossip.member(&node(1)).unwrap().status,
            MemberStatus::Exiting
        );
        gossip.leader_actions();
        assert!(gossip.member(&node(1)).is_none());
        assert!(gossip.is_tombstoned(&node(1)));
    }

    #[test]
    fn a_stale_gossip_cannot_resurrect_a_removed_member() {
        let mut old = cluster_of(&[1, 2]);
        old.leader_actions();
        let mut newer = old.clone();
        newer.set_status(&node(2), MemberStatus::Down);
        newer.bump(&node(1));
        newer.seen.insert(node(2));
        newer.leader_actions();
        let mut concurrent = old.clone();
        concurrent.bump(&node(2));
        let merged = newer.merge(&concurrent);
        assert!(merged.member(&node(2)).is_none());
    }

    fn arbitrary_statuses() -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(0u8..6, 4)
    }

    fn status(code: u8) -> MemberStatus {
        [
            MemberStatus::Joining,
            MemberStatus::WeaklyUp,
            MemberStatus::Up,
            MemberStatus::Leaving,
            MemberStatus::Exiting,
            MemberStatus::Down,
        ][code as usize]
    }

    proptest! {
        #[test]
        fn merge_is_commutative_and_idempotent(a in arbitrary_statuses(), b in arbitrary_statuses()) {
            let base = cluster_of(&[1, 2, 3, 4]);
            let mut left = base.clone();
            let mut right = base.clone();
            for (i, (&x, &y)) in a.iter().zip(&b).enumerate() {
                left.set_status(&node(i as u16 + 1), status(x));
                right.set_status(&node(i as u16 + 1), status(y));
            }
            left.bump(&node(1));
            right.bump(&node(2));
            let lr = left.merge(&right);
            let rl = right.merge(&left);
            prop_assert_eq!(&lr, &rl);
            prop_assert_eq!(lr.merge(&lr), lr.clone());
            // A merged member is never behind either side.
            for member in lr.members() {
                let l = left.member(&member.node).unwrap().status;
                let r = right.member(&member.node).unwrap().status;
                prop_assert!(member.status.precedence() >= l.precedence().max(r.precedence()));
            }
        }
    }
}
