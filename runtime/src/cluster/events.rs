//! Cluster events and the views they are computed from: every change is the difference
//! between two consecutive views, so each subscriber sees each change once, in order.

use std::collections::BTreeSet;

use super::member::{Member, MemberStatus};
use crate::{Address, UniqueAddress};

/// What one node currently believes about the cluster.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterView {
    /// This node, once it has an identity in the cluster.
    pub self_node: Option<UniqueAddress>,
    /// Members (not removed), address-ordered.
    pub members: Vec<Member>,
    /// Members some observer calls unreachable (never this node itself).
    pub unreachable: BTreeSet<UniqueAddress>,
    /// Observers per unreachable member, for the management API.
    pub observed_by: Vec<(UniqueAddress, Vec<UniqueAddress>)>,
    /// The first address-sorted up member.
    pub leader: Option<Address>,
    /// Whether the gossip has converged.
    pub converged: bool,
}

impl ClusterView {
    /// The view of a membership provider whose store arbitrates who is a member (etcd leases,
    /// Kubernetes Leases): `members` sorted by address and incarnation, none unreachable,
    /// converged, and the leader by the one rule — the first address-sorted member that is up
    /// and reachable.
    #[must_use]
    pub fn from_members(self_node: Option<UniqueAddress>, members: Vec<Member>) -> Self {
        let mut members = members;
        members.sort_by(|a, b| a.node.cmp(&b.node));
        let unreachable = BTreeSet::new();
        let leader = leader_of(&members, &unreachable);
        Self {
            self_node,
            members,
            unreachable,
            observed_by: Vec::new(),
            leader,
            converged: true,
        }
    }

    /// Up and reachable members, address-ordered.
    #[must_use]
    pub fn up_members(&self) -> Vec<Member> {
        self.members
            .iter()
            .filter(|m| m.status == MemberStatus::Up && !self.unreachable.contains(&m.node))
            .cloned()
            .collect()
    }

    /// This node's member entry.
    #[must_use]
    pub fn self_member(&self) -> Option<&Member> {
        let me = self.self_node.as_ref()?;
        self.members.iter().find(|m| &m.node == me)
    }

    fn member(&self, node: &UniqueAddress) -> Option<&Member> {
        self.members.iter().find(|m| &m.node == node)
    }
}

/// The one leader rule: the first member of `members` (address-sorted) that is up and not
/// unreachable.
fn leader_of(members: &[Member], unreachable: &BTreeSet<UniqueAddress>) -> Option<Address> {
    members
        .iter()
        .find(|m| m.status == MemberStatus::Up && !unreachable.contains(&m.node))
        .map(|m| m.node.address.clone())
}

/// A change in cluster membership as one node observes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterEvent {
    /// A member asked to join.
    MemberJoined(Member),
    /// A member was admitted while convergence was blocked.
    MemberWeaklyUp(Member),
    /// A member is up.
    MemberUp(Member),
    /// A member is leaving.
    MemberLeft(Member),
    /// A member has left and is about to be removed.
    MemberExited(Member),
    /// A member was declared down.
    MemberDown(Member),
    /// A member is gone; `previous` is the status it had.
    MemberRemoved {
        /// The removed member (status `Removed`).
        member: Member,
        /// Its status before removal.
        previous: MemberStatus,
    },
    /// Some observer can no longer reach this member.
    MemberUnreachable(Member),
    /// Every observer reaches this member again.
    MemberReachable(Member),
    /// The leader changed (`None`: no member is up in this view).
    LeaderChanged(Option<Address>),
    /// This node became up.
    SelfUp(Member),
}

impl ClusterEvent {
    /// The event's type name, as used in filters (`MemberUp`, `LeaderChanged`).
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            Self::MemberJoined(_) => "MemberJoined",
            Self::MemberWeaklyUp(_) => "MemberWeaklyUp",
            Self::MemberUp(_) => "MemberUp",
            Self::MemberLeft(_) => "MemberLeft",
            Self::MemberExited(_) => "MemberExited",
            Self::MemberDown(_) => "MemberDown",
            Self::MemberRemoved { .. } => "MemberRemoved",
            Self::MemberUnreachable(_) => "MemberUnreachable",
            Self::MemberReachable(_) => "MemberReachable",
            Self::LeaderChanged(_) => "LeaderChanged",
            Self::SelfUp(_) => "SelfUp",
        }
    }
}

fn status_event(member: &Member) -> Option<ClusterEvent> {
    let member = member.clone();
    Some(match member.status {
        MemberStatus::Joining => ClusterEvent::MemberJoined(member),
        MemberStatus::WeaklyUp => ClusterEvent::MemberWeaklyUp(member),
        MemberStatus::Up => ClusterEvent::MemberUp(member),
        MemberStatus::Leaving => ClusterEvent::MemberLeft(member),
        MemberStatus::Exiting => ClusterEvent::MemberExited(member),
        MemberStatus::Down => ClusterEvent::MemberDown(member),
        MemberStatus::Removed => return None,
    })
}

/// The events that lead from `old` to `new`, in a fixed order: status changes and new members
/// (address order), removals, reachability changes, leader change, self-up. An up member that
/// becomes reachable again re-enters the up set, so `MemberUp` follows its `MemberReachable`.
#[must_use]
pub(crate) fn diff(old: &ClusterView, new: &ClusterView) -> Vec<ClusterEvent> {
    let mut events = Vec::new();
    for member in &new.members {
        let changed = old
            .member(&member.node)
            .is_none_or(|before| before.status != member.status);
        if changed && let Some(event) = status_event(member) {
            events.push(event);
        }
    }
    for before in &old.members {
        if new.member(&before.node).is_none() {
            let mut member = before.clone();
            member.status = MemberStatus::Removed;
            events.push(ClusterEvent::MemberRemoved {
                member,
                previous: before.status,
            });
        }
    }
    for member in &new.members {
        let now = new.unreachable.contains(&member.node);
        let was = old.unreachable.contains(&member.node) && old.member(&member.node).is_some();
        if now && !was {
            events.push(ClusterEvent::MemberUnreachable(member.clone()));
        } else if was && !now {
            events.push(ClusterEvent::MemberReachable(member.clone()));
            // Back in the up set: the trigger the singleton reconciles on (it deliberately
            // ignores reachability events themselves).
            if member.status == MemberStatus::Up {
                events.push(ClusterEvent::MemberUp(member.clone()));
            }
        }
    }
    if old.leader != new.leader {
        events.push(ClusterEvent::LeaderChanged(new.leader.clone()));
    }
    let was_up = old
        .self_member()
        .is_some_and(|m| m.status == MemberStatus::Up);
    if let Some(me) = new.self_member()
        && me.status == MemberStatus::Up
        && !was_up
    {
        events.push(ClusterEvent::SelfUp(me.clone()));
    }
    events
}

#[cfg(test)]
mod from_members_tests {
    use std::collections::BTreeSet;

    use super::*;

    fn member(port: u16, incarnation: u64, status: MemberStatus) -> Member {
        Member {
            node: UniqueAddress {
                address: Address::new("sys", "127.0.0.1", port),
                incarnation,
            },
            status,
            roles: BTreeSet::new(),
        }
    }

    #[test]
    fn the_leader_is_the_first_address_sorted_member_that_is_up() {
        let view = ClusterView::from_members(
            None,
            vec![
                member(3, 1, MemberStatus::Up),
                member(1, 9, MemberStatus::Leaving),
                member(2, 5, MemberStatus::Up),
                member(2, 4, MemberStatus::Up),
            ],
        );
        let order: Vec<(u16, u64)> = view
            .members
            .iter()
            .map(|m| (m.node.address.port, m.node.incarnation))
            .collect();
        assert_eq!(order, [(1, 9), (2, 4), (2, 5), (3, 1)]);
        assert_eq!(
            view.leader.map(|a| a.port),
            Some(2),
            "not the leaving member"
        );
        assert!(view.converged && view.unreachable.is_empty());
        let none_up = ClusterView::from_members(None, vec![member(1, 1, MemberStatus::Leaving)]);
        assert_eq!(none_up.leader, None);
    }
}
