//! The cluster router follows membership on the multi-node harness: routee discovery without a
//! restart, roles, unreachable members, an empty routee set, a node without the routee actor,
//! and the router events the control plane reads (dead-lettered messages are checked with the
//! empty routee set).

#[path = "support/cluster_router_harness.rs"]
mod harness;

/// Grouped so `cargo nextest run -p troupe cluster_router` selects these tests.
mod cluster_router {
    use std::collections::BTreeSet;
    use std::time::Duration;

    use crate::harness::{
        Job, LIMIT, add_node, assert_quiet, cluster, handled, nodes_of, options, spawn_router,
        spawn_worker, wait_event, wait_routees,
    };
    use tokio::sync::mpsc;
    use troupe::cluster::MembershipOptions;
    use troupe::cluster_router::{ClusterMailboxDepthAgent, ClusterRouterEvent};
    use troupe::routing::RoutingStrategy;
    use troupe::testkit::{SimCluster, sim_address};
    use troupe::{DeadLetter, DeadLetterReason};

    #[tokio::test(start_paused = true)]
    async fn new_up_members_with_the_role_join_and_departed_ones_leave_the_set_without_a_restart() {
        let mut sim = cluster(41, &[&["compute"], &["gateway"], &["compute"]]).await;
        let (tx, mut rx) = mpsc::unbounded_channel();
        for i in 0..3 {
            spawn_worker(&sim, i, &tx, None);
        }
        let mut events = sim
            .node(1)
            .system
            .event_stream()
            .subscribe::<ClusterRouterEvent>();
        // The router runs on the gateway node, which is not a routee itself.
        let router = spawn_router(
            &sim,
            1,
            options(&sim, 1, RoutingStrategy::RoundRobin).with_role("compute"),
        );
        let incarnation = router.id();
        wait_routees(&mut events, &[0, 2]).await;
        for id in 0..4 {
            router.tell(Job::new(id));
        }
        assert_eq!(nodes_of(&handled(&mut rx, 4).await), [0, 2, 0, 2]);

        let joined = add_node(&mut sim, &["compute"]).await;
        spawn_worker(&sim, joined, &tx, None);
        add_node(&mut sim, &["gateway"]).await;
        wait_routees(&mut events, &[0, 2, 3]).await;
        for id in 4..10 {
            router.tell(Job::new(id));
        }
        let nodes: BTreeSet<usize> = nodes_of(&handled(&mut rx, 6).await).into_iter().collect();
        assert_eq!(
            nodes,
            BTreeSet::from([0, 2, 3]),
            "the gateway node 4 is never a routee"
        );

        // A graceful leave drops the node; nothing is routed to it afterwards.
        sim.node(2).cluster.leave();
        wait_routees(&mut events, &[0, 3]).await;
        for id in 10..16 {
            router.tell(Job::new(id));
        }
        let nodes: BTreeSet<usize> = nodes_of(&handled(&mut rx, 6).await).into_iter().collect();
        assert_eq!(nodes, BTreeSet::from([0, 3]));
        assert_eq!(router.id(), incarnation, "the router was never restarted");
    }

    #[tokio::test(start_paused = true)]
    async fn an_unreachable_member_is_not_routed_to_until_it_is_reachable_again() {
        let settings = MembershipOptions::default().with_down_after(None);
        let mut sim = SimCluster::with_settings(42, settings);
        for _ in 0..3 {
            sim.start_node(&[]);
        }
        sim.wait_all_up(3, LIMIT).await;
        for node in sim.nodes() {
            node.cluster.remoting().register::<Job>();
        }
        let (tx, mut rx) = mpsc::unbounded_channel();
        for i in 0..3 {
            spawn_worker(&sim, i, &tx, None);
        }
        let mut events = sim
            .node(0)
            .system
            .event_stream()
            .subscribe::<ClusterRouterEvent>();
        let router = spawn_router(&sim, 0, options(&sim, 0, RoutingStrategy::RoundRobin));
        wait_routees(&mut events, &[0, 1, 2]).await;

        sim.partition(&[0, 1], &[2]);
        wait_routees(&mut events, &[0, 1]).await;
        assert!(
            sim.view(0)
                .members
                .iter()
                .any(|m| m.node.address == sim_address(2)),
            "still a member: unreachable is an opinion, not a removal"
        );
        for id in 0..6 {
            router.tell(Job::new(id));
        }
        assert_eq!(nodes_of(&handled(&mut rx, 6).await), [0, 1, 0, 1, 0, 1]);

        sim.heal();
        wait_routees(&mut events, &[0, 1, 2]).await;
        for id in 6..9 {
            router.tell(Job::new(id));
        }
        let nodes: BTreeSet<usize> = nodes_of(&handled(&mut rx, 3).await).into_iter().collect();
        assert_eq!(nodes, BTreeSet::from([0, 1, 2]));
    }

    #[tokio::test(start_paused = true)]
    async fn with_no_routees_every_message_is_a_dead_letter_and_nothing_is_queued_for_later() {
        let mut sim = cluster(43, &[&["gateway"], &["gateway"]]).await;
        let (tx, mut rx) = mpsc::unbounded_channel();
        let mut dead = sim.node(0).system.event_stream().subscribe::<DeadLetter>();
        let mut events = sim
            .node(0)
            .system
            .event_stream()
            .subscribe::<ClusterRouterEvent>();
        let router = spawn_router(
            &sim,
            0,
            options(&sim, 0, RoutingStrategy::SmallestMailbox).with_role("compute"),
        );
        for id in 0..5 {
            router.tell(Job::new(id));
        }
        for id in 0..5 {
            let letter = tokio::time::timeout(LIMIT, dead.recv())
                .await
                .unwrap()
                .unwrap();
            assert_eq!(
                letter.reason,
                DeadLetterReason::NoRoutees,
                "job {id}: {letter:?}"
            );
            assert_eq!(letter.recipient.elements(), "/user/router");
            let event = wait_event(&mut events, "a dead-lettered event", |e| {
                matches!(e, ClusterRouterEvent::DeadLettered { .. })
            })
            .await;
            assert!(
                matches!(&event, ClusterRouterEvent::DeadLettered { routee: None, reason: DeadLetterReason::NoRoutees, message_type, .. } if message_type.ends_with("Job")),
                "{event:?}"
            );
        }

        // A compute node arrives: new messages reach it, the dead-lettered ones never do.
        let compute = add_node(&mut sim, &["compute"]).await;
        spawn_worker(&sim, compute, &tx, None);
        wait_routees(&mut events, &[compute]).await;
        router.tell(Job::new(100));
        let jobs = handled(&mut rx, 1).await;
        assert_eq!(jobs[0].id, 100);
        assert_quiet(&mut rx, Duration::from_secs(1)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_node_with_the_role_but_no_routee_actor_dead_letters_the_message_on_that_node() {
        let sim = cluster(44, &[&["compute"], &["compute"]]).await;
        let (tx, mut rx) = mpsc::unbounded_channel();
        spawn_worker(&sim, 0, &tx, None);
        // Node 1 carries the role but never spawned /user/worker.
        let mut dead_on_1 = sim.node(1).system.event_stream().subscribe::<DeadLetter>();
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
        wait_routees(&mut events, &[0, 1]).await;
        for id in 0..4 {
            router.tell(Job::new(id));
        }
        assert_eq!(nodes_of(&handled(&mut rx, 2).await), [0, 0]);
        for _ in 0..2 {
            let letter = tokio::time::timeout(LIMIT, dead_on_1.recv())
                .await
                .unwrap()
                .unwrap();
            assert_eq!(
                letter.reason,
                DeadLetterReason::UnknownRecipient,
                "{letter:?}"
            );
            assert_eq!(letter.recipient.elements(), "/user/worker");
            assert!(letter.message_type.ends_with("Job"), "{letter:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_router_publishes_routee_set_changes_and_depth_samples_for_the_control_plane() {
        let mut sim = cluster(45, &[&["compute"], &["compute"]]).await;
        let (tx, _rx) = mpsc::unbounded_channel();
        spawn_worker(&sim, 0, &tx, None);
        spawn_worker(&sim, 1, &tx, None);
        // Node 1 hosts a routee but no router: it answers depth queries only if it serves.
        let _serving = ClusterMailboxDepthAgent::serve(&sim.node(1).cluster).unwrap();
        let mut events = sim
            .node(0)
            .system
            .event_stream()
            .subscribe::<ClusterRouterEvent>();
        let router = spawn_router(
            &sim,
            0,
            options(&sim, 0, RoutingStrategy::SmallestMailbox).with_role("compute"),
        );

        let started = wait_event(&mut events, "the start", |e| {
            matches!(e, ClusterRouterEvent::Started { .. })
        })
        .await;
        assert_eq!(
            started,
            ClusterRouterEvent::Started {
                router: router.path().clone(),
                strategy: RoutingStrategy::SmallestMailbox,
                role: Some("compute".into()),
                routee_path: "/user/worker".into(),
            }
        );
        let first = wait_event(&mut events, "the initial set", |e| {
            matches!(e, ClusterRouterEvent::RouteeSetChanged { .. })
        })
        .await;
        let ClusterRouterEvent::RouteeSetChanged {
            router: path,
            strategy,
            routee_path,
            routees,
            added,
            removed,
        } = first
        else {
            unreachable!()
        };
        assert_eq!(path, *router.path());
        assert_eq!(strategy, RoutingStrategy::SmallestMailbox);
        assert_eq!(routee_path, "/user/worker");
        assert_eq!(routees, vec![sim_address(0), sim_address(1)]);
        assert_eq!(added, routees, "the first set is all additions");
        assert!(removed.is_empty());

        let sample = wait_event(
            &mut events,
            "a depth sample from node 1",
            |e| matches!(e, ClusterRouterEvent::DepthSample(s) if s.node == sim_address(1)),
        )
        .await;
        let ClusterRouterEvent::DepthSample(sample) = sample else {
            unreachable!()
        };
        assert_eq!((sample.path.as_str(), sample.depth), ("/user/worker", 0));
        assert!(sample.at <= tokio::time::Instant::now());
        assert_eq!(sample.router, *router.path());

        let joined = add_node(&mut sim, &["compute"]).await;
        let change = wait_event(&mut events, "node 2 added", |e| {
            matches!(e, ClusterRouterEvent::RouteeSetChanged { .. })
        })
        .await;
        assert!(
            matches!(&change, ClusterRouterEvent::RouteeSetChanged { added, removed, .. } if *added == [sim_address(joined)] && removed.is_empty()),
            "{change:?}"
        );
        sim.node(joined).cluster.leave();
        let change = wait_event(&mut events, "node 2 removed", |e| {
            matches!(e, ClusterRouterEvent::RouteeSetChanged { .. })
        })
        .await;
        assert!(
            matches!(&change, ClusterRouterEvent::RouteeSetChanged { added, removed, .. } if added.is_empty() && *removed == [sim_address(joined)]),
            "{change:?}"
        );
    }
}
