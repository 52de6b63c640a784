//! The cluster router's strategies on the multi-node harness: round-robin over the
//! address-ordered set (sane across rebuilds), random (uniform), consistent hashing (pinned keys,
//! about 1/N moved per change), broadcast, self-routing through the loopback, stopping, and
//! construction errors.

#[path = "support/cluster_router_harness.rs"]
mod harness;

/// Grouped so `cargo nextest run -p troupe cluster_router` selects these tests.
mod cluster_router {
    use std::collections::{BTreeMap, BTreeSet};
    use std::time::Duration;

    use crate::harness::{
        Job, LIMIT, add_node, assert_quiet, cluster, handled, nodes_of, options, spawn_router,
        spawn_worker, wait_routees,
    };
    use proptest::prelude::*;
    use tokio::sync::mpsc;
    use troupe::Address;
    use troupe::cluster_router::{
        ClusterRouter, ClusterRouterError, ClusterRouterEvent, ClusterRouterOptions, RoutingTable,
    };
    use troupe::routing::{RoutingLogic, RoutingStrategy, Selection};
    use troupe::testkit::sim_address;

    #[tokio::test(start_paused = true)]
    async fn round_robin_cycles_over_the_address_ordered_set_and_resumes_after_rebuilds() {
        let mut sim = cluster(31, &[&["compute"], &["compute"], &["compute"]]).await;
        let (tx, mut rx) = mpsc::unbounded_channel();
        for i in 0..3 {
            spawn_worker(&sim, i, &tx, None);
        }
        let mut events = sim
            .node(0)
            .system
            .event_stream()
            .subscribe::<ClusterRouterEvent>();
        let router = spawn_router(
            &sim,
            0,
            options(&sim, 0, RoutingStrategy::RoundRobin).with_role("compute"),
        );
        wait_routees(&mut events, &[0, 1, 2]).await;
        for id in 0..7 {
            router.tell(Job::new(id));
        }
        // Addresses sort 10.0.0.1 < 10.0.0.2 < 10.0.0.3: node order.
        assert_eq!(nodes_of(&handled(&mut rx, 7).await), [0, 1, 2, 0, 1, 2, 0]);

        // A fourth node joins: the rotation continues after node 0 and takes it in.
        let fourth = add_node(&mut sim, &["compute"]).await;
        spawn_worker(&sim, fourth, &tx, None);
        wait_routees(&mut events, &[0, 1, 2, 3]).await;
        for id in 7..12 {
            router.tell(Job::new(id));
        }
        assert_eq!(nodes_of(&handled(&mut rx, 5).await), [1, 2, 3, 0, 1]);

        // Node 2, next in turn, dies: the rotation skips to the next address instead of repeating.
        sim.kill(2);
        wait_routees(&mut events, &[0, 1, 3]).await;
        for id in 12..16 {
            router.tell(Job::new(id));
        }
        assert_eq!(nodes_of(&handled(&mut rx, 4).await), [3, 0, 1, 3]);
    }

    #[tokio::test(start_paused = true)]
    async fn random_spreads_uniformly_by_chi_square() {
        let sim = cluster(32, &[&[], &[], &[], &[]]).await;
        let (tx, mut rx) = mpsc::unbounded_channel();
        for i in 0..4 {
            spawn_worker(&sim, i, &tx, None);
        }
        let mut events = sim
            .node(1)
            .system
            .event_stream()
            .subscribe::<ClusterRouterEvent>();
        let router = spawn_router(&sim, 1, options(&sim, 1, RoutingStrategy::Random));
        wait_routees(&mut events, &[0, 1, 2, 3]).await;
        let messages = 4_000;
        for id in 0..messages {
            router.tell(Job::new(id));
        }
        let mut counts = [0usize; 4];
        for job in handled(&mut rx, messages as usize).await {
            counts[job.node] += 1;
        }
        let expected = messages as f64 / 4.0;
        let chi2: f64 = counts
            .iter()
            .map(|&c| (c as f64 - expected).powi(2) / expected)
            .sum();
        // 3 degrees of freedom: p = 0.001 at 16.27.
        assert!(chi2 < 16.27, "chi-square {chi2:.2} over {counts:?}");
    }

    /// The node that handled each key.
    fn owners(jobs: &[crate::harness::Handled]) -> BTreeMap<String, BTreeSet<usize>> {
        let mut owners: BTreeMap<String, BTreeSet<usize>> = BTreeMap::new();
        for job in jobs {
            owners.entry(job.key.clone()).or_default().insert(job.node);
        }
        owners
    }

    #[tokio::test(start_paused = true)]
    async fn consistent_hashing_pins_each_key_to_one_node_and_a_removal_moves_only_its_keys() {
        let mut sim = cluster(33, &[&[], &[], &[], &[]]).await;
        let (tx, mut rx) = mpsc::unbounded_channel();
        for i in 0..4 {
            spawn_worker(&sim, i, &tx, None);
        }
        let mut events = sim
            .node(0)
            .system
            .event_stream()
            .subscribe::<ClusterRouterEvent>();
        let router = spawn_router(
            &sim,
            0,
            options(&sim, 0, RoutingStrategy::ConsistentHashing)
                .with_extract_key(|job: &Job| job.key.clone()),
        );
        wait_routees(&mut events, &[0, 1, 2, 3]).await;
        let keys: Vec<String> = (0..400).map(|k| format!("user-{k}")).collect();
        let mut id = 0;
        for _ in 0..3 {
            for key in &keys {
                router.tell(Job::keyed(id, key));
                id += 1;
            }
        }
        let before = owners(&handled(&mut rx, 1_200).await);
        for (key, nodes) in &before {
            assert_eq!(nodes.len(), 1, "{key} went to {nodes:?}");
        }
        let before: BTreeMap<String, usize> = before
            .into_iter()
            .map(|(key, nodes)| (key, *nodes.first().unwrap()))
            .collect();

        sim.kill(3);
        wait_routees(&mut events, &[0, 1, 2]).await;
        for key in &keys {
            router.tell(Job::keyed(id, key));
            id += 1;
        }
        let after = owners(&handled(&mut rx, 400).await);
        let mut moved = 0;
        for (key, nodes) in &after {
            let now = *nodes.first().unwrap();
            if now != before[key] {
                assert_eq!(before[key], 3, "{key} moved from a node that stayed");
                moved += 1;
            }
        }
        let held_by_removed = before.values().filter(|&&n| n == 3).count();
        assert_eq!(
            moved, held_by_removed,
            "exactly the removed node's keys move"
        );
        assert!(
            (60..=140).contains(&moved),
            "about 1/4 of 400 keys move, got {moved}"
        );
    }

    fn addresses(n: u8) -> Vec<Address> {
        let mut all: Vec<Address> = (0..n).map(|i| sim_address(usize::from(i))).collect();
        all.sort();
        all
    }

    fn owner(table: &RoutingTable, key: &str) -> Address {
        let mut logic = RoutingLogic::new(RoutingStrategy::ConsistentHashing, 0);
        match table.select(&mut logic, Some(key.as_bytes())) {
            Selection::One(i) => table.nodes()[i].clone(),
            other => panic!("{other:?}"),
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Over cluster routee paths: adding one node to N moves about 1/(N+1) of the keys, all of
        /// them to the new node; never all keys.
        #[test]
        fn adding_one_of_n_routee_nodes_moves_about_one_nth_of_keys(n in 2u8..12) {
            let before = RoutingTable::new(addresses(n), "/user/worker");
            let all = addresses(n + 1);
            let added = sim_address(usize::from(n));
            let after = RoutingTable::new(all, "/user/worker");
            let keys: Vec<String> = (0..3_000).map(|k| format!("key-{k}")).collect();
            let mut moved = 0usize;
            for key in &keys {
                let (old, new) = (owner(&before, key), owner(&after, key));
                if old != new {
                    prop_assert_eq!(&new, &added);
                    moved += 1;
                }
            }
            let expected = keys.len() as f64 / f64::from(n + 1);
            let ratio = moved as f64 / expected;
            prop_assert!((0.7..1.3).contains(&ratio), "moved {moved}, expected about {expected:.0}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn broadcast_delivers_every_message_to_every_routee() {
        let sim = cluster(34, &[&[], &[], &[]]).await;
        let (tx, mut rx) = mpsc::unbounded_channel();
        for i in 0..3 {
            spawn_worker(&sim, i, &tx, None);
        }
        let mut events = sim
            .node(2)
            .system
            .event_stream()
            .subscribe::<ClusterRouterEvent>();
        let router = spawn_router(&sim, 2, options(&sim, 2, RoutingStrategy::Broadcast));
        wait_routees(&mut events, &[0, 1, 2]).await;
        for id in 0..5 {
            router.tell(Job::new(id));
        }
        let all = handled(&mut rx, 15).await;
        for id in 0..5 {
            let nodes: BTreeSet<usize> =
                all.iter().filter(|h| h.id == id).map(|h| h.node).collect();
            assert_eq!(nodes, BTreeSet::from([0, 1, 2]), "job {id}");
        }
        assert_quiet(&mut rx, Duration::from_millis(500)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn the_local_node_is_in_the_rotation_through_the_same_remote_delivery_path() {
        let sim = cluster(35, &[&[], &[]]).await;
        let (tx, mut rx) = mpsc::unbounded_channel();
        for i in 0..2 {
            spawn_worker(&sim, i, &tx, None);
        }
        let mut events = sim
            .node(0)
            .system
            .event_stream()
            .subscribe::<ClusterRouterEvent>();
        let router = spawn_router(&sim, 0, options(&sim, 0, RoutingStrategy::RoundRobin));
        wait_routees(&mut events, &[0, 1]).await;
        for id in 0..4 {
            router.tell(Job::new(id));
        }
        let jobs = handled(&mut rx, 4).await;
        assert_eq!(nodes_of(&jobs), [0, 1, 0, 1]);
        for job in &jobs {
            // Remoting stamps the origin it verified; for the loopback that is this node. A plain
            // local tell has no origin at all.
            assert_eq!(job.origin.as_ref(), Some(&sim_address(0)), "{job:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn stopping_the_router_or_poisoning_it_leaves_every_routee_running() {
        let sim = cluster(36, &[&[], &[]]).await;
        let (tx, mut rx) = mpsc::unbounded_channel();
        let workers: Vec<_> = (0..2).map(|i| spawn_worker(&sim, i, &tx, None)).collect();
        let mut events = sim
            .node(0)
            .system
            .event_stream()
            .subscribe::<ClusterRouterEvent>();
        let router = spawn_router(&sim, 0, options(&sim, 0, RoutingStrategy::RoundRobin));
        wait_routees(&mut events, &[0, 1]).await;
        router.tell(Job::new(0));
        router.tell(Job::new(1));
        router.poison_pill();
        // Everything queued before the pill is routed, then the router stops.
        assert_eq!(nodes_of(&handled(&mut rx, 2).await), [0, 1]);
        tokio::time::timeout(LIMIT, router.terminated())
            .await
            .unwrap();

        let router = spawn_router(&sim, 0, options(&sim, 0, RoutingStrategy::RoundRobin));
        router.tell(Job::new(2));
        handled(&mut rx, 1).await;
        router.stop();
        tokio::time::timeout(LIMIT, router.terminated())
            .await
            .unwrap();
        sim.run_for(Duration::from_secs(1)).await;
        for worker in &workers {
            assert!(
                !worker.is_terminated(),
                "{worker:?} must outlive the router"
            );
            worker.tell(Job::new(99));
        }
        assert_eq!(handled(&mut rx, 2).await.len(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn construction_rejects_unworkable_options_naming_the_field_and_value() {
        let sim = cluster(37, &[&[]]).await;
        let cluster = sim.node(0).cluster.clone();
        let with =
            |strategy, path: &str| ClusterRouterOptions::<Job>::new(&cluster, strategy, path);
        let base = || with(RoutingStrategy::SmallestMailbox, "/user/worker");
        let error = |options| ClusterRouter::factory(options).map(|_| ()).unwrap_err();

        let missing_key = error(with(RoutingStrategy::ConsistentHashing, "/user/worker"));
        assert_eq!(missing_key, ClusterRouterError::MissingExtractKey);
        assert!(
            missing_key.to_string().contains("extract_key"),
            "{missing_key}"
        );

        let short_window = error(
            base()
                .with_mailbox_depth_refresh(Duration::from_millis(500))
                .with_mailbox_depth_stale_after(Duration::from_millis(300)),
        );
        assert!(
            short_window
                .to_string()
                .contains("mailbox_depth_stale_after")
                && short_window.to_string().contains("300ms")
                && short_window.to_string().contains("500ms"),
            "{short_window}"
        );
        let zero_refresh = error(base().with_mailbox_depth_refresh(Duration::ZERO));
        assert_eq!(
            zero_refresh.to_string(),
            "mailbox_depth_refresh must be > 0, got 0ms"
        );

        let empty = error(with(RoutingStrategy::SmallestMailbox, ""));
        assert_eq!(empty, ClusterRouterError::EmptyRouteePath);
        assert!(empty.to_string().contains("routee_path"), "{empty}");
        let relative = error(with(RoutingStrategy::SmallestMailbox, "user/worker"));
        assert!(
            relative.to_string().contains("routee_path")
                && relative.to_string().contains("\"user/worker\""),
            "{relative}"
        );
        let remote = error(with(
            RoutingStrategy::SmallestMailbox,
            "troupe://sim@10.0.0.1:2552/user/worker",
        ));
        assert!(
            matches!(remote, ClusterRouterError::RelativeRouteePath { .. }),
            "{remote}"
        );

        // Allowed: a window equal to the refresh, and 0 = never expire.
        for stale_after in [Duration::from_millis(200), Duration::ZERO] {
            assert!(
                ClusterRouter::factory(base().with_mailbox_depth_stale_after(stale_after)).is_ok(),
                "{stale_after:?}"
            );
        }
        let defaults = base();
        assert!(
            format!("{defaults:?}").contains("200ms") && format!("{defaults:?}").contains("1s")
        );
    }
}
