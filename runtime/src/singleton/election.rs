//! Who hosts a singleton, who must step down first, and which cluster events can change either:
//! pure functions of one node's view, so every node that sees the same membership picks the same
//! host.
//!
//! # Reachability is not part of the election
//! The host is the first address-sorted member whose *status* is up (with a role: the first such
//! member carrying the role). An unreachable member keeps its status until it is downed, so it
//! stays the host in every view: unreachability is one node's opinion, and a manager acting on
//! it would promote itself while the incumbent — who cannot hear it — keeps its instance. Only
//! status changes, which the whole cluster converges on, move the host. The proxy reads the same
//! election and additionally notices that it cannot reach the host (it then buffers).

use std::collections::BTreeSet;

use crate::Address;
use crate::cluster::{ClusterEvent, Member, MemberStatus};

/// Whether `member` may host a singleton restricted to `role` (any member when `None`).
#[must_use]
pub(super) fn carries_role(member: &Member, role: Option<&str>) -> bool {
    role.is_none_or(|role| member.has_role(role))
}

/// The host of a singleton in a view: the first address-sorted member with status up that
/// carries `role`. Input order does not matter.
#[must_use]
pub(super) fn elect_host<'a>(members: &'a [Member], role: Option<&str>) -> Option<&'a Member> {
    members
        .iter()
        .filter(|m| m.status == MemberStatus::Up && carries_role(m, role))
        .min_by(|a, b| a.address().cmp(b.address()))
}

/// The peers a new host asks to step down before it spawns: every other member carrying `role`
/// that is up — reachable or not — or on its way out gracefully (leaving, exiting).
///
/// Leaving and exiting members are included because the most common previous host is one that
/// is leaving: it stopped hosting the moment it saw itself leave, but its instance may still be
/// running `post_stop`, and it answers. A member drops out of this set when it is removed or
/// downed; a new host stops waiting for it then.
#[must_use]
pub(super) fn hand_over_peers(
    members: &[Member],
    role: Option<&str>,
    me: &Address,
) -> BTreeSet<Address> {
    members
        .iter()
        .filter(|m| {
            matches!(
                m.status,
                MemberStatus::Up | MemberStatus::Leaving | MemberStatus::Exiting
            ) && carries_role(m, role)
                && m.address() != me
        })
        .map(|m| m.address().clone())
        .collect()
}

/// Whether `member` could still become up and claim to be the host: a joining or weakly-up
/// member carrying the role. A node that believes it hosts yields only to such a peer sorting
/// before it — one whose up status has not reached this node's view yet.
#[must_use]
pub(super) fn may_become_host(member: &Member, role: Option<&str>) -> bool {
    matches!(
        member.status,
        MemberStatus::Joining | MemberStatus::WeaklyUp
    ) && carries_role(member, role)
}

/// Whether a manager reconciles on `event`: the membership facts the whole cluster converges
/// on. Joining and weakly-up members cannot host, and reachability is one node's opinion (see
/// the module header), so those events are deliberately not triggers.
#[must_use]
pub(super) fn is_trigger(event: &ClusterEvent) -> bool {
    matches!(
        event,
        ClusterEvent::LeaderChanged(_)
            | ClusterEvent::SelfUp(_)
            | ClusterEvent::MemberUp(_)
            | ClusterEvent::MemberDown(_)
            | ClusterEvent::MemberLeft(_)
            | ClusterEvent::MemberRemoved { .. }
    )
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;
    use crate::UniqueAddress;

    pub(crate) fn address(i: u8) -> Address {
        Address::new("sim", &format!("10.0.0.{i}"), 2552)
    }

    pub(crate) fn member(i: u8, status: MemberStatus, roles: &[&str]) -> Member {
        Member {
            node: UniqueAddress {
                address: address(i),
                incarnation: u64::from(i),
            },
            status,
            roles: roles.iter().map(|r| (*r).to_owned()).collect(),
        }
    }

    #[test]
    fn the_host_is_the_first_up_member_not_the_first_member() {
        let members = vec![
            member(1, MemberStatus::Joining, &[]),
            member(2, MemberStatus::WeaklyUp, &[]),
            member(3, MemberStatus::Leaving, &[]),
            member(4, MemberStatus::Up, &[]),
            member(5, MemberStatus::Up, &[]),
        ];
        assert_eq!(
            elect_host(&members, None).map(Member::address),
            Some(&address(4))
        );
    }

    #[test]
    fn with_a_role_the_host_is_the_first_up_member_carrying_it_not_the_leader() {
        let members = vec![
            member(1, MemberStatus::Up, &[]),
            member(2, MemberStatus::Up, &["edge"]),
            member(3, MemberStatus::Up, &["edge"]),
        ];
        assert_eq!(
            elect_host(&members, Some("edge")).map(Member::address),
            Some(&address(2))
        );
        assert_eq!(elect_host(&members, Some("nobody")), None);
    }

    #[test]
    fn hand_over_peers_include_leaving_and_exiting_but_not_joining_or_down_ones() {
        let members = vec![
            member(1, MemberStatus::Leaving, &["r"]),
            member(2, MemberStatus::Up, &["r"]),
            member(3, MemberStatus::Exiting, &["r"]),
            member(4, MemberStatus::Down, &["r"]),
            member(5, MemberStatus::Joining, &["r"]),
            member(6, MemberStatus::Up, &[]),
            member(7, MemberStatus::Up, &["r"]),
        ];
        let peers = hand_over_peers(&members, Some("r"), &address(2));
        assert_eq!(
            peers,
            [address(1), address(3), address(7)].into_iter().collect()
        );
    }

    #[test]
    fn only_membership_facts_are_triggers() {
        let m = member(1, MemberStatus::Up, &[]);
        assert!(is_trigger(&ClusterEvent::LeaderChanged(None)));
        assert!(is_trigger(&ClusterEvent::SelfUp(m.clone())));
        assert!(is_trigger(&ClusterEvent::MemberUp(m.clone())));
        assert!(is_trigger(&ClusterEvent::MemberDown(m.clone())));
        assert!(is_trigger(&ClusterEvent::MemberLeft(m.clone())));
        assert!(is_trigger(&ClusterEvent::MemberRemoved {
            member: m.clone(),
            previous: MemberStatus::Up
        }));
        assert!(!is_trigger(&ClusterEvent::MemberJoined(m.clone())));
        assert!(!is_trigger(&ClusterEvent::MemberWeaklyUp(m.clone())));
        assert!(!is_trigger(&ClusterEvent::MemberUnreachable(m.clone())));
        assert!(!is_trigger(&ClusterEvent::MemberReachable(m.clone())));
        assert!(!is_trigger(&ClusterEvent::MemberExited(m)));
    }

    fn arb_status() -> impl Strategy<Value = MemberStatus> {
        prop_oneof![
            Just(MemberStatus::Joining),
            Just(MemberStatus::WeaklyUp),
            Just(MemberStatus::Up),
            Just(MemberStatus::Leaving),
            Just(MemberStatus::Exiting),
            Just(MemberStatus::Down),
        ]
    }

    fn arb_members() -> impl Strategy<Value = Vec<Member>> {
        proptest::collection::btree_map(1u8..40, (arb_status(), any::<bool>()), 0..12).prop_map(
            |nodes| {
                nodes
                    .into_iter()
                    .map(|(i, (status, role))| member(i, status, if role { &["r"] } else { &[] }))
                    .collect()
            },
        )
    }

    proptest! {
        /// Every node that sees the same members elects the same host, whatever order its
        /// list is in, and the host is never a member that is not up or lacks the role.
        #[test]
        fn election_is_order_independent_and_picks_the_least_eligible(
            members in arb_members(),
            rotate in 0usize..12,
            role in proptest::option::of(Just("r")),
        ) {
            let mut shuffled = members.clone();
            if !shuffled.is_empty() {
                let k = rotate % shuffled.len();
                shuffled.rotate_left(k);
                shuffled.reverse();
            }
            let a = elect_host(&members, role).map(|m| m.address().clone());
            let b = elect_host(&shuffled, role).map(|m| m.address().clone());
            prop_assert_eq!(&a, &b);
            let eligible: BTreeSet<Address> = members
                .iter()
                .filter(|m| m.status == MemberStatus::Up && carries_role(m, role))
                .map(|m| m.address().clone())
                .collect();
            prop_assert_eq!(a, eligible.first().cloned());
        }

        /// The host of a view is always among the peers every other node asks to step down:
        /// a new host cannot miss the incumbent it is taking over from.
        #[test]
        fn every_other_node_asks_the_current_host(
            members in arb_members(),
            role in proptest::option::of(Just("r")),
        ) {
            if let Some(host) = elect_host(&members, role) {
                for other in &members {
                    if other.address() != host.address() {
                        let peers = hand_over_peers(&members, role, other.address());
                        prop_assert!(peers.contains(host.address()));
                    }
                }
            }
        }
    }
}
