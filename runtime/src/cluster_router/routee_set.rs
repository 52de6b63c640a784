//! The routee set as pure functions of a cluster view: which nodes host routees, in which
//! order, what changed between two sets, where round-robin resumes after a rebuild — and the
//! [`RoutingTable`] the routing decision scans.
//!
//! # Order
//! Routees are ordered by node address (the same order on every node), so a rebuild keeps the
//! relative order of the routees that stay and round-robin can resume after the routee it chose
//! last instead of restarting from the first or skipping one.

use std::sync::Arc;

use tokio::time::Instant;

use super::depth_cache::Reading;
use crate::Address;
use crate::cluster::ClusterView;
use crate::path::ActorPath;
use crate::routing::{HashedRouteeId, NO_READING, RoutingLogic, RoutingStrategy, Selection};

/// The nodes that host routees in `view`: up and reachable members carrying `role` (any member
/// without a role filter), ordered by address, each address once.
#[must_use]
pub(super) fn routee_nodes(view: &ClusterView, role: Option<&str>) -> Vec<Address> {
    let mut nodes: Vec<Address> = view
        .up_members()
        .into_iter()
        .filter(|member| role.is_none_or(|role| member.has_role(role)))
        .map(|member| member.node.address)
        .collect();
    nodes.sort();
    // Two incarnations at one address (a restart not yet settled) are one routee path.
    nodes.dedup();
    nodes
}

/// What changed between two address-ordered routee sets.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct RouteeSetChange {
    /// Nodes in the new set only.
    pub added: Vec<Address>,
    /// Nodes in the old set only.
    pub removed: Vec<Address>,
}

impl RouteeSetChange {
    /// The difference from `old` to `new` (both address-ordered).
    #[must_use]
    pub(super) fn between(old: &[Address], new: &[Address]) -> Self {
        Self {
            added: new
                .iter()
                .filter(|a| old.binary_search(a).is_err())
                .cloned()
                .collect(),
            removed: old
                .iter()
                .filter(|a| new.binary_search(a).is_err())
                .cloned()
                .collect(),
        }
    }

    #[cfg(test)]
    /// Whether nothing changed.
    #[must_use]
    pub(super) fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty()
    }
}

/// The round-robin cursor for `new` after a rebuild: the position of the first node that sorts
/// after `last_chosen` (wrapping to the first), so the rotation continues where it was.
#[must_use]
pub(super) fn resume_cursor(new: &[Address], last_chosen: Option<&Address>) -> usize {
    match last_chosen {
        None => 0,
        Some(last) => {
            let next = new.partition_point(|a| a <= last);
            if next == new.len() { 0 } else { next }
        }
    }
}

/// A smallest-mailbox router's running estimate of each routee's queue: its reading plus the
/// messages the router has sent it since ([`NO_READING`] without a reading), and a floor no
/// estimate is below, which lets the scan stop early.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Estimates {
    values: Vec<usize>,
    floor: usize,
}

impl Estimates {
    /// The estimate of each routee, in table order.
    #[must_use]
    pub fn values(&self) -> &[usize] {
        &self.values
    }
}

/// What one routing decision reads: the routee nodes in order, each routee's stable id (its
/// full path, which consistent hashing scores) and its last usable depth reading.
///
/// Building a table does the allocation; [`RoutingTable::select`] does none, awaits nothing and
/// asks nobody — it is a scan over this table.
#[derive(Debug, Clone)]
pub struct RoutingTable {
    nodes: Arc<[Address]>,
    ids: Arc<[HashedRouteeId]>,
    /// [`NO_READING`] for a routee without a usable reading.
    depths: Arc<[usize]>,
    /// When each reading arrived, so a router can tell a new reading from the one it has been
    /// adding its own sends to.
    stamps: Arc<[Option<Instant>]>,
}

impl RoutingTable {
    /// A table over `nodes` (address-ordered) whose routees live at `routee_path`; no depths yet.
    #[must_use]
    pub fn new(nodes: Vec<Address>, routee_path: &str) -> Self {
        let ids: Vec<HashedRouteeId> = nodes
            .iter()
            .map(|node| {
                HashedRouteeId::new(
                    ActorPath::remote(node, routee_path)
                        .to_string()
                        .into_bytes(),
                )
            })
            .collect();
        let n = nodes.len();
        Self {
            nodes: nodes.into(),
            ids: ids.into(),
            depths: vec![NO_READING; n].into(),
            stamps: vec![None; n].into(),
        }
    }

    /// The same routees with these depths (`depths[i]` for `nodes()[i]`; `None` = no usable
    /// reading), of unknown arrival time.
    ///
    /// # Panics
    /// If `depths` is not as long as the routee list.
    #[must_use]
    pub fn with_depths(&self, depths: Vec<Option<usize>>) -> Self {
        assert_eq!(depths.len(), self.nodes.len(), "one depth per routee");
        Self {
            nodes: Arc::clone(&self.nodes),
            ids: Arc::clone(&self.ids),
            depths: depths.iter().map(|d| d.unwrap_or(NO_READING)).collect(),
            stamps: vec![None; self.nodes.len()].into(),
        }
    }

    /// The same routees with these readings (`readings[i]` for `nodes()[i]`).
    ///
    /// # Panics
    /// If `readings` is not as long as the routee list.
    #[must_use]
    pub fn with_readings(&self, readings: &[Option<Reading>]) -> Self {
        assert_eq!(readings.len(), self.nodes.len(), "one reading per routee");
        Self {
            nodes: Arc::clone(&self.nodes),
            ids: Arc::clone(&self.ids),
            depths: readings
                .iter()
                .map(|r| r.map_or(NO_READING, |r| r.depth))
                .collect(),
            stamps: readings.iter().map(|r| r.map(|r| r.at)).collect(),
        }
    }

    /// The routee nodes, address-ordered.
    #[must_use]
    pub fn nodes(&self) -> &[Address] {
        &self.nodes
    }

    /// The usable depth of each routee.
    #[must_use]
    pub fn depths(&self) -> Vec<Option<usize>> {
        self.depths
            .iter()
            .map(|&d| (d != NO_READING).then_some(d))
            .collect()
    }

    /// How many routees.
    #[must_use]
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether there are no routees.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Where one message goes, by `logic`'s strategy (`key`: the consistent-hashing key), on
    /// the readings alone.
    pub fn select(&self, logic: &mut RoutingLogic, key: Option<&[u8]>) -> Selection {
        let depths = &*self.depths;
        logic.select(&self.ids, key, |i| {
            depths.get(i).copied().filter(|&d| d != NO_READING)
        })
    }

    /// The starting point of a router's running estimates: each routee's reading as it is.
    #[must_use]
    pub fn estimates(&self) -> Estimates {
        Estimates {
            values: self.depths.to_vec(),
            floor: 0,
        }
    }

    /// Like [`RoutingTable::select`], choosing by `estimates` — each routee's reading plus the
    /// messages this router has sent it since (see [`RoutingTable::estimates`] and
    /// [`RoutingTable::carry_estimates`]) — and counting the choice into them.
    ///
    /// The readings lag by up to a refresh interval; without the router's own sends every
    /// message in that interval would pile onto the routee that last looked shortest.
    ///
    /// # Panics
    /// If `estimates` cover fewer routees than the table has.
    pub fn select_and_count(
        &self,
        logic: &mut RoutingLogic,
        key: Option<&[u8]>,
        estimates: &mut Estimates,
    ) -> Selection {
        if logic.strategy() != RoutingStrategy::SmallestMailbox {
            return logic.select(&self.ids, key, |_| None);
        }
        let n = self.ids.len();
        let values = &estimates.values[..n];
        let selection = logic.select_smallest(n, estimates.floor, |i| values[i]);
        if let Selection::One(index) = selection
            && let Some(estimate) = estimates.values.get_mut(index)
            && *estimate != NO_READING
        {
            // The chosen estimate was the smallest: none is below it, and estimates only grow
            // until the table changes.
            estimates.floor = *estimate;
            *estimate += 1;
        }
        selection
    }

    /// The estimates for this table, carried over from `previous`: a routee keeps its
    /// estimate while its reading is the same one, and starts again from a new reading (which
    /// already counts what was sent) or when it is new to the set.
    #[must_use]
    pub fn carry_estimates(&self, previous: &RoutingTable, estimates: &Estimates) -> Estimates {
        let values = self
            .nodes
            .iter()
            .enumerate()
            .map(|(i, node)| match previous.nodes.binary_search(node) {
                Ok(j)
                    if previous.stamps[j] == self.stamps[i]
                        && previous.depths[j] == self.depths[i] =>
                {
                    estimates.values.get(j).copied().unwrap_or(self.depths[i])
                }
                _ => self.depths[i],
            })
            .collect();
        Estimates { values, floor: 0 }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;
    use crate::UniqueAddress;
    use crate::cluster::{Member, MemberStatus};
    use crate::routing::RouteeId;
    use crate::routing::rendezvous::rendezvous_pick;

    fn address(i: u8) -> Address {
        Address::new("app", &format!("10.0.0.{i}"), 2552)
    }

    fn member(i: u8, status: MemberStatus, roles: &[&str]) -> Member {
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
    fn only_up_reachable_members_with_the_role_are_routees_in_address_order() {
        let view = ClusterView {
            members: vec![
                member(1, MemberStatus::Up, &["compute"]),
                member(2, MemberStatus::Up, &["gateway"]),
                member(3, MemberStatus::Joining, &["compute"]),
                member(4, MemberStatus::Up, &["compute"]),
                member(5, MemberStatus::Leaving, &["compute"]),
                member(6, MemberStatus::Up, &["compute", "gateway"]),
            ],
            unreachable: BTreeSet::from([member(4, MemberStatus::Up, &[]).node]),
            ..ClusterView::default()
        };
        assert_eq!(
            routee_nodes(&view, Some("compute")),
            vec![address(1), address(6)]
        );
        assert_eq!(
            routee_nodes(&view, None),
            vec![address(1), address(2), address(6)]
        );
    }

    #[test]
    fn changes_name_added_and_removed_nodes() {
        let change = RouteeSetChange::between(
            &[address(1), address(2), address(3)],
            &[address(1), address(3), address(4)],
        );
        assert_eq!(change.added, vec![address(4)]);
        assert_eq!(change.removed, vec![address(2)]);
        assert!(RouteeSetChange::between(&[address(1)], &[address(1)]).is_empty());
    }

    #[test]
    fn round_robin_resumes_after_the_last_chosen_node_by_address() {
        let set = [address(1), address(3), address(5)];
        assert_eq!(resume_cursor(&set, None), 0);
        assert_eq!(resume_cursor(&set, Some(&address(1))), 1);
        // The last chosen node left: continue with the next one by address.
        assert_eq!(resume_cursor(&set, Some(&address(2))), 1);
        assert_eq!(resume_cursor(&set, Some(&address(5))), 0);
        assert_eq!(resume_cursor(&set, Some(&address(9))), 0);
        assert_eq!(resume_cursor(&[], Some(&address(1))), 0);
    }

    #[test]
    fn the_table_scan_skips_routees_without_a_reading() {
        let table = RoutingTable::new(vec![address(1), address(2), address(3)], "/user/w")
            .with_depths(vec![None, Some(4), Some(2)]);
        let mut logic = RoutingLogic::new(RoutingStrategy::SmallestMailbox, 1);
        assert_eq!(table.select(&mut logic, None), Selection::One(2));
        assert_eq!(
            std::str::from_utf8(table.ids[0].id()).unwrap(),
            "troupe://app@10.0.0.1:2552/user/w"
        );
    }

    #[test]
    fn smallest_mailbox_adds_its_own_sends_until_a_new_reading_arrives() {
        let t0 = Instant::now();
        let reading = |depth| Some(Reading { depth, at: t0 });
        let table = RoutingTable::new(vec![address(1), address(2), address(3)], "/user/w")
            .with_readings(&[reading(5), reading(3), reading(0)]);
        let mut logic = RoutingLogic::new(RoutingStrategy::SmallestMailbox, 1);
        let mut estimates = table.estimates();
        let picks: Vec<Selection> = (0..6)
            .map(|_| table.select_and_count(&mut logic, None, &mut estimates))
            .collect();
        // Node 3 until it has had three; then the shallower of the rest, taking turns on ties.
        assert_eq!(picks, [2, 2, 2, 1, 2, 1].map(Selection::One).to_vec());
        assert_eq!(estimates.values(), [5, 5, 4]);
        // A new reading for node 3 replaces its estimate; the others keep theirs.
        let newer = table.with_readings(&[
            reading(5),
            reading(3),
            Some(Reading {
                depth: 1,
                at: t0 + std::time::Duration::from_millis(200),
            }),
        ]);
        assert_eq!(
            newer.carry_estimates(&table, &estimates).values(),
            [5, 5, 1]
        );
        // A rebuild keeps the estimates of nodes that stay, by address.
        let rebuilt = RoutingTable::new(vec![address(2), address(3)], "/user/w")
            .with_readings(&[reading(3), reading(0)]);
        assert_eq!(rebuilt.carry_estimates(&table, &estimates).values(), [5, 4]);
        // No reading, no estimate: a cold routee is chosen in turn but never counted.
        let cold = RoutingTable::new(vec![address(1)], "/user/w");
        let mut estimates = cold.estimates();
        assert_eq!(
            cold.select_and_count(&mut logic, None, &mut estimates),
            Selection::One(0)
        );
        assert_eq!(estimates.values(), [NO_READING]);
    }

    proptest! {
        /// Hashing each routee path once picks exactly what hashing it per key picks.
        #[test]
        fn precomputed_routee_hashes_pick_like_the_plain_rendezvous_hash(
            n in 1u8..20,
            key in "[a-z0-9-]{0,24}",
        ) {
            let mut nodes: Vec<Address> = (1..=n).map(address).collect();
            nodes.sort();
            let table = RoutingTable::new(nodes.clone(), "/user/worker");
            let mut logic = RoutingLogic::new(RoutingStrategy::ConsistentHashing, 0);
            let paths: Vec<String> = nodes
                .iter()
                .map(|node| ActorPath::remote(node, "/user/worker").to_string())
                .collect();
            let expected = rendezvous_pick(key.as_bytes(), paths.iter().map(String::as_bytes));
            prop_assert_eq!(
                table.select(&mut logic, Some(key.as_bytes())),
                Selection::One(expected.unwrap())
            );
        }

        /// Across any sequence of rebuilds, round-robin never picks out of range and, while the
        /// set only grows, visits every node once per lap without repeating one back to back.
        #[test]
        fn round_robin_stays_sane_across_rebuilds(
            sets in proptest::collection::vec(proptest::collection::btree_set(1u8..12, 1..8), 1..12),
            picks_per_set in 1usize..10,
        ) {
            let mut logic = RoutingLogic::new(RoutingStrategy::RoundRobin, 7);
            let mut last: Option<Address> = None;
            for set in sets {
                let mut nodes: Vec<Address> = set.iter().map(|&i| address(i)).collect();
                nodes.sort();
                logic.set_cursor(resume_cursor(&nodes, last.as_ref()));
                let table = RoutingTable::new(nodes.clone(), "/user/w");
                for _ in 0..picks_per_set {
                    let Selection::One(i) = table.select(&mut logic, None) else {
                        panic!("a non-empty set always has a pick")
                    };
                    prop_assert!(i < nodes.len());
                    let chosen = nodes[i].clone();
                    if nodes.len() > 1 && let Some(previous) = &last {
                        prop_assert_ne!(&chosen, previous, "no node twice in a row");
                    }
                    last = Some(chosen);
                }
            }
        }
    }
}
