//! The smallest-mailbox cluster router on the multi-node harness: it routes to the node whose
//! routee last reported the shortest queue (plus what the router itself sent there since), asks only on the refresh tick (never per message),
//! ignores stale readings, skips silent nodes, and falls back to round-robin order when nobody
//! has answered. The routees are ordinary actors that never hear about any of it.

#[path = "support/cluster_router_harness.rs"]
mod harness;

/// Grouped so `cargo nextest run -p troupe cluster_router` selects these tests.
mod cluster_router {
    use std::sync::Arc;
    use std::time::Duration;

    use crate::harness::{
        Job, assert_quiet, cluster, handled, nodes_of, options, spawn_router, spawn_worker,
        wait_depth, wait_routees,
    };
    use tokio::sync::{Semaphore, mpsc};
    use troupe::cluster_router::{ClusterMailboxDepthAgent, ClusterRouterEvent};
    use troupe::routing::RoutingStrategy;
    use troupe::testkit::{SimCluster, sim_address};
    use troupe::{ActorRef, DeadLetter};

    /// A gate with no permits: the worker behind it holds its first job and queues the rest.
    fn closed_gate() -> Arc<Semaphore> {
        Arc::new(Semaphore::new(0))
    }

    /// Queue `jobs` on the worker of node `index` by local tells (ids from 1000 up), so that behind
    /// a closed gate its mailbox depth becomes `jobs - 1`.
    fn preload(sim: &SimCluster, index: usize, jobs: u64) {
        let worker: ActorRef<Job> = sim
            .node(index)
            .system
            .resolve("/user/worker")
            .expect("worker");
        for id in 0..jobs {
            worker.tell(Job::new(1_000 + 100 * index as u64 + id));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn messages_go_to_the_node_that_last_reported_the_shortest_queue() {
        let sim = cluster(51, &[&[], &[], &[]]).await;
        let (tx, mut rx) = mpsc::unbounded_channel();
        let gates = [closed_gate(), closed_gate()];
        spawn_worker(&sim, 0, &tx, Some(Arc::clone(&gates[0])));
        spawn_worker(&sim, 1, &tx, Some(Arc::clone(&gates[1])));
        spawn_worker(&sim, 2, &tx, None);
        let _serving: Vec<_> = [1, 2]
            .iter()
            .map(|&i| ClusterMailboxDepthAgent::serve(&sim.node(i).cluster).unwrap())
            .collect();
        preload(&sim, 0, 6);
        preload(&sim, 1, 4);
        let mut events = sim
            .node(0)
            .system
            .event_stream()
            .subscribe::<ClusterRouterEvent>();
        let router = spawn_router(&sim, 0, options(&sim, 0, RoutingStrategy::SmallestMailbox));
        wait_depth(&mut events, 0, 5).await;
        wait_depth(&mut events, 1, 3).await;
        wait_depth(&mut events, 2, 0).await;

        // Node 2 reported the shortest queue. Until its next reading the router also counts what
        // it sent there itself, so after three the others' reported queues are as short.
        for id in 0..6 {
            router.tell(Job::new(id));
        }
        let at_2 = handled(&mut rx, 4).await;
        assert_eq!(nodes_of(&at_2), [2, 2, 2, 2]);
        assert_eq!(at_2.iter().map(|h| h.id).collect::<Vec<_>>(), [0, 1, 2, 4]);
        // Open the gates: node 1 (reported 3) got the other two, node 0 (reported 5) none.
        for gate in &gates {
            gate.add_permits(100);
        }
        let rest = handled(&mut rx, 12).await;
        let routed: Vec<(u64, usize)> = rest
            .iter()
            .filter(|h| h.id < 1_000)
            .map(|h| (h.id, h.node))
            .collect();
        assert_eq!(routed, [(3, 1), (5, 1)]);
    }

    #[tokio::test(start_paused = true)]
    async fn depths_are_asked_on_the_refresh_tick_never_per_message_and_the_routee_hears_nothing() {
        let sim = cluster(52, &[&[], &[], &[]]).await;
        let (tx, mut rx) = mpsc::unbounded_channel();
        for i in 0..3 {
            spawn_worker(&sim, i, &tx, None);
        }
        let serving: Vec<_> = (0..3)
            .map(|i| ClusterMailboxDepthAgent::serve(&sim.node(i).cluster).unwrap())
            .collect();
        let answered = || serving.iter().map(|s| s.stats().answered).sum::<u64>();
        let mut events = sim
            .node(0)
            .system
            .event_stream()
            .subscribe::<ClusterRouterEvent>();
        let refresh = Duration::from_millis(200);
        let router = spawn_router(
            &sim,
            0,
            options(&sim, 0, RoutingStrategy::SmallestMailbox).with_mailbox_depth_refresh(refresh),
        );
        for i in 0..3 {
            wait_depth(&mut events, i, 0).await;
        }

        let start = tokio::time::Instant::now();
        let before = answered();
        let messages = 600;
        for id in 0..messages {
            router.tell(Job::new(id));
        }
        let jobs = handled(&mut rx, messages as usize).await;
        sim.run_for(Duration::from_secs(1)).await;
        let ticks = (start.elapsed().as_millis() / refresh.as_millis()) as u64 + 2;
        let queries = answered() - before;
        assert!(
            queries <= 3 * ticks,
            "{queries} depth queries in {ticks} ticks for {messages} messages: asked per message?"
        );
        // Every job arrived exactly once and the workers handled nothing else.
        let ids: Vec<u64> = jobs.iter().map(|h| h.id).collect();
        assert_eq!(ids, (0..messages).collect::<Vec<_>>());
        assert_quiet(&mut rx, Duration::from_secs(1)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_reading_older_than_the_stale_window_is_not_used() {
        let sim = cluster(53, &[&[], &[], &[]]).await;
        let (tx, mut rx) = mpsc::unbounded_channel();
        let gates = [closed_gate(), closed_gate()];
        spawn_worker(&sim, 0, &tx, Some(Arc::clone(&gates[0])));
        spawn_worker(&sim, 1, &tx, Some(Arc::clone(&gates[1])));
        spawn_worker(&sim, 2, &tx, None);
        let _serving_1 = ClusterMailboxDepthAgent::serve(&sim.node(1).cluster).unwrap();
        let serving_2 = ClusterMailboxDepthAgent::serve(&sim.node(2).cluster).unwrap();
        preload(&sim, 0, 6);
        preload(&sim, 1, 4);
        let mut events = sim
            .node(0)
            .system
            .event_stream()
            .subscribe::<ClusterRouterEvent>();
        let router = spawn_router(
            &sim,
            0,
            options(&sim, 0, RoutingStrategy::SmallestMailbox)
                .with_mailbox_depth_refresh(Duration::from_millis(200))
                .with_mailbox_depth_stale_after(Duration::from_millis(600)),
        );
        wait_depth(&mut events, 0, 5).await;
        wait_depth(&mut events, 1, 3).await;
        wait_depth(&mut events, 2, 0).await;

        // Node 2 stops answering; its last reading (depth 0) still counts for a while...
        serving_2.stop();
        sim.run_for(Duration::from_millis(300)).await;
        router.tell(Job::new(0));
        assert_eq!(nodes_of(&handled(&mut rx, 1).await), [2]);
        // ...but not past the stale window, although node 2 is in truth the idlest.
        sim.run_for(Duration::from_millis(600)).await;
        router.tell(Job::new(1));
        assert_quiet(&mut rx, Duration::from_millis(50)).await;
        gates[1].add_permits(100);
        let jobs = handled(&mut rx, 5).await;
        let job = jobs.iter().find(|h| h.id == 1).expect("job 1 at node 1");
        assert_eq!(job.node, 1, "the shallower of the nodes still answering");
    }

    #[tokio::test(start_paused = true)]
    async fn a_node_that_does_not_serve_depths_is_skipped_while_others_answer() {
        let sim = cluster(54, &[&[], &[], &[]]).await;
        let (tx, mut rx) = mpsc::unbounded_channel();
        let gates = [closed_gate(), closed_gate()];
        spawn_worker(&sim, 0, &tx, Some(Arc::clone(&gates[0])));
        // Node 1 hosts an idle routee but never calls serve (and runs no router).
        spawn_worker(&sim, 1, &tx, None);
        spawn_worker(&sim, 2, &tx, Some(Arc::clone(&gates[1])));
        let _serving = ClusterMailboxDepthAgent::serve(&sim.node(2).cluster).unwrap();
        preload(&sim, 0, 3);
        preload(&sim, 2, 2);
        let mut dead_on_1 = sim.node(1).system.event_stream().subscribe::<DeadLetter>();
        let mut events = sim
            .node(0)
            .system
            .event_stream()
            .subscribe::<ClusterRouterEvent>();
        let router = spawn_router(&sim, 0, options(&sim, 0, RoutingStrategy::SmallestMailbox));
        wait_depth(&mut events, 0, 2).await;
        wait_depth(&mut events, 2, 1).await;

        for id in 0..3 {
            router.tell(Job::new(id));
        }
        // The silent node is not assumed idle: it gets nothing, although its routee is the idlest.
        assert_quiet(&mut rx, Duration::from_millis(50)).await;
        for gate in &gates {
            gate.add_permits(100);
        }
        let jobs = handled(&mut rx, 8).await;
        let routed: Vec<usize> = jobs
            .iter()
            .filter(|h| h.id < 1_000)
            .map(|h| h.node)
            .collect();
        assert_eq!(
            routed,
            [2, 0, 2],
            "by reported depth plus the router's own sends"
        );

        // Unanswered queries are dead letters on node 1 — asked with backoff, not on every tick.
        sim.run_for(Duration::from_secs(5)).await;
        let mut queries = 0;
        while let Some(letter) = dead_on_1.try_recv() {
            // Nobody registered the query type there: an unknown-manifest dead letter.
            assert_eq!(
                letter.recipient.elements(),
                "/system/cluster-mailbox-depth-agent",
                "{letter:?}"
            );
            queries += 1;
        }
        assert!(
            (1..=10).contains(&queries),
            "{queries} queries to the silent node in ~5 s of 200 ms ticks"
        );
        while let Some(event) = events.try_recv() {
            assert!(
                !matches!(&event, ClusterRouterEvent::DepthSample(s) if s.node == sim_address(1)),
                "{event:?}"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_node_without_the_routee_answers_but_is_skipped() {
        let sim = cluster(55, &[&[], &[], &[]]).await;
        let (tx, mut rx) = mpsc::unbounded_channel();
        let gate = closed_gate();
        spawn_worker(&sim, 0, &tx, Some(Arc::clone(&gate)));
        spawn_worker(&sim, 2, &tx, None);
        let serving_1 = ClusterMailboxDepthAgent::serve(&sim.node(1).cluster).unwrap();
        let _serving_2 = ClusterMailboxDepthAgent::serve(&sim.node(2).cluster).unwrap();
        preload(&sim, 0, 2);
        let mut events = sim
            .node(0)
            .system
            .event_stream()
            .subscribe::<ClusterRouterEvent>();
        let router = spawn_router(&sim, 0, options(&sim, 0, RoutingStrategy::SmallestMailbox));
        wait_depth(&mut events, 0, 1).await;
        wait_depth(&mut events, 2, 0).await;
        assert!(
            serving_1.stats().answered > 0,
            "node 1 answers, with no depth"
        );
        for id in 0..4 {
            router.tell(Job::new(id));
        }
        gate.add_permits(100);
        let jobs = handled(&mut rx, 6).await;
        let routed: Vec<usize> = jobs
            .iter()
            .filter(|h| h.id < 1_000)
            .map(|h| h.node)
            .collect();
        assert_eq!(
            routed,
            [2, 0, 2, 0],
            "never node 1, which would only dead-letter them"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_cold_cache_routes_in_round_robin_order_and_drops_nothing() {
        // The router's node has no routee; the routee nodes never serve depths.
        let sim = cluster(56, &[&[], &["compute"], &["compute"], &["compute"]]).await;
        let (tx, mut rx) = mpsc::unbounded_channel();
        for i in 1..4 {
            spawn_worker(&sim, i, &tx, None);
        }
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
        wait_routees(&mut events, &[1, 2, 3]).await;
        for id in 0..6 {
            router.tell(Job::new(id));
        }
        assert_eq!(nodes_of(&handled(&mut rx, 6).await), [1, 2, 3, 1, 2, 3]);
        sim.run_for(Duration::from_secs(3)).await;
        for id in 6..9 {
            router.tell(Job::new(id));
        }
        assert_eq!(nodes_of(&handled(&mut rx, 3).await), [1, 2, 3]);
        assert!(
            dead.try_recv().is_none(),
            "nothing dead-lettered on the router's node"
        );
        while let Some(event) = events.try_recv() {
            assert!(
                !matches!(event, ClusterRouterEvent::DepthSample(_)),
                "{event:?}"
            );
        }
    }
}
