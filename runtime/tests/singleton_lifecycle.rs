//! The instance's life under its manager — respawn after an unexpected death, the
//! `restart_on_termination(false)` latch, stop and start again — and what happens to messages
//! while no instance runs: held (1000, 2 s) and flushed in order, dead letters with one warning
//! past that, proxy buffering, and the events the control plane reads.

#[path = "support/singleton_harness.rs"]
mod harness;

/// Named after the feature so that `cargo nextest run -p troupe singleton` selects these tests.
mod singleton {

    use std::collections::BTreeSet;
    use std::time::Duration;

    use crate::harness::{
        Cmd, LIMIT, Oracle, WarnCapture, arbiter, cluster, drain, events, hosted_on, key, start,
        worker,
    };
    use tokio::time::Instant;
    use troupe::cluster::MembershipOptions;
    use troupe::lease::LeaseOp;
    use troupe::singleton::ClusterSingleton;
    use troupe::singleton::{SingletonEvent, StartSingletonOptions, StopReason};
    use troupe::testkit::sim_address;
    use troupe::{DeadLetter, DeadLetterReason, SupervisorStrategy};

    /// Dead letters a manager or proxy of the singleton `scheduler` published.
    fn singleton_dead_letters(letters: &[DeadLetter]) -> usize {
        letters
            .iter()
            .filter(|l| {
                matches!(
                    l.reason,
                    DeadLetterReason::HoldFull
                        | DeadLetterReason::HoldExpired
                        | DeadLetterReason::NotHosting
                        | DeadLetterReason::NoManager
                ) && l.recipient.elements().ends_with("/scheduler")
            })
            .count()
    }

    #[tokio::test(start_paused = true)]
    async fn an_instance_that_stops_itself_is_spawned_again_after_one_second() {
        let sim = cluster(401, &[&[]], MembershipOptions::default()).await;
        let oracle = Oracle::default();
        let mut published = events(&sim, 0);
        let proxy = start(&sim, 0, &oracle, None, |o| o);
        hosted_on(&sim, &oracle, 0).await;
        proxy.tell(Cmd::StopSelf);
        sim.wait_until(LIMIT, |_| oracle.lives().len() == 2).await;
        let lives = oracle.lives();
        let backoff = lives[1].started - lives[0].stopped.unwrap();
        assert!(
            backoff >= Duration::from_secs(1) && backoff < Duration::from_millis(1_050),
            "{backoff:?}"
        );
        let kinds: Vec<SingletonEvent> = drain(&mut published);
        assert!(kinds.iter().any(|e| matches!(
            e,
            SingletonEvent::InstanceStopped {
                reason: StopReason::Unexpected,
                ..
            }
        )));
        assert!(kinds.iter().any(|e| e.kind() == "InstanceRestarted"));
    }

    #[tokio::test(start_paused = true)]
    async fn an_instance_whose_supervisor_gives_up_is_spawned_again_after_one_second() {
        let sim = cluster(402, &[&[]], MembershipOptions::default()).await;
        let oracle = Oracle::default();
        let props = worker(&oracle, sim_address(0), Duration::ZERO).with_supervisor(
            SupervisorStrategy::restart().with_restart_budget(1, Duration::from_secs(60)),
        );
        let proxy = ClusterSingleton::get(&sim.node(0).cluster)
            .start(&key(None), StartSingletonOptions::new(props))
            .unwrap();
        hosted_on(&sim, &oracle, 0).await;
        // The first failure restarts it (a new life in the oracle); the second exhausts the budget.
        proxy.tell(Cmd::Fail);
        proxy.tell(Cmd::Fail);
        sim.wait_until(LIMIT, |_| oracle.lives().len() == 3).await;
        let lives = oracle.lives();
        let backoff = lives[2].started - lives[1].stopped.unwrap();
        assert!(
            backoff >= Duration::from_secs(1) && backoff < Duration::from_millis(1_050),
            "crash loop ends in a stop, then one second before the respawn: {backoff:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn without_restart_on_termination_the_manager_latches_out_releases_the_lease_and_dead_letters()
     {
        let mut sim = cluster(403, &[&[], &[]], MembershipOptions::default()).await;
        let oracle = Oracle::default();
        let arbiter = arbiter(Duration::from_secs(3));
        let owner = sim_address(0).to_string();
        let lease = arbiter.lease("scheduler", &owner);
        let proxy = start(&sim, 0, &oracle, None, |o| {
            o.with_restart_on_termination(false)
                .with_lease(lease.clone())
        });
        start(&sim, 1, &oracle, None, |o| o);
        hosted_on(&sim, &oracle, 0).await;
        let mut dead = sim.node(0).system.event_stream().subscribe::<DeadLetter>();
        proxy.tell(Cmd::StopSelf);
        sim.wait_until(LIMIT, |_| oracle.live().is_empty()).await;
        sim.run_for(Duration::from_secs(3)).await;
        assert_eq!(oracle.lives().len(), 1, "not spawned again");
        assert!(
            arbiter.holder("scheduler").is_none(),
            "the lease was released"
        );
        assert!(
            arbiter
                .history()
                .iter()
                .any(|r| r.owner == owner && matches!(r.op, LeaseOp::Released(_)))
        );
        // Messages now go to dead letters at once, not after a hold.
        drain(&mut dead);
        let sent = Instant::now();
        proxy.tell(Cmd::Job(1));
        sim.run_for(Duration::from_millis(5)).await;
        assert_eq!(
            singleton_dead_letters(&drain(&mut dead)),
            1,
            "dead-lettered within {:?}",
            sent.elapsed()
        );
        // A later membership change does not bring it back.
        sim.start_node(&[]);
        sim.wait_all_up(3, LIMIT).await;
        sim.run_for(Duration::from_secs(3)).await;
        assert_eq!(oracle.lives().len(), 1);
        let status = ClusterSingleton::get(&sim.node(0).cluster)
            .status(&key(None))
            .await
            .unwrap();
        assert!(status.latched_out);
        // Stopping and starting the manager clears the latch: it re-elects, re-acquires, hosts.
        ClusterSingleton::get(&sim.node(0).cluster)
            .stop(&key(None))
            .await;
        start(&sim, 0, &oracle, None, |o| o.with_lease(lease));
        hosted_on(&sim, &oracle, 0).await;
        assert!(arbiter.holder("scheduler").is_some_and(|(o, _)| o == owner));
    }

    /// Node 1 never answers the hand-over (it runs nothing), so node 0 waits for the timeout with
    /// messages arriving meanwhile: they are held and flushed in send order.
    #[tokio::test(start_paused = true)]
    async fn messages_are_held_until_the_instance_spawns_and_flushed_in_send_order() {
        let sim = cluster(404, &[&[], &[]], MembershipOptions::default()).await;
        let oracle = Oracle::default();
        let mut published = events(&sim, 0);
        let proxy = start(&sim, 0, &oracle, None, |o| {
            o.with_hand_over_timeout(Duration::from_millis(1_500))
        });
        for n in 0..100 {
            proxy.tell(Cmd::Job(n));
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(oracle.lives().is_empty(), "still handing over");
        hosted_on(&sim, &oracle, 0).await;
        sim.run_for(Duration::from_millis(10)).await;
        assert_eq!(oracle.jobs(), (0..100).collect::<Vec<_>>());
        let flushed = drain(&mut published).into_iter().find_map(|e| match e {
            SingletonEvent::MessagesFlushed { count, .. } => Some(count),
            _ => None,
        });
        assert!(flushed.is_some_and(|c| c > 0), "{flushed:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn past_1000_held_messages_go_to_dead_letters_with_one_warning_naming_the_singleton() {
        let sim = cluster(405, &[&[], &[]], MembershipOptions::default()).await;
        let warnings = WarnCapture::start();
        let oracle = Oracle::default();
        let mut dead = sim.node(0).system.event_stream().subscribe::<DeadLetter>();
        let proxy = start(&sim, 0, &oracle, None, |o| {
            o.with_hand_over_timeout(Duration::from_millis(1_500))
                .with_buffer_size(5_000)
        });
        sim.run_for(Duration::from_millis(100)).await;
        for n in 0..1_100 {
            proxy.tell(Cmd::Job(n));
        }
        hosted_on(&sim, &oracle, 0).await;
        sim.run_for(Duration::from_millis(10)).await;
        assert_eq!(oracle.jobs(), (0..1_000).collect::<Vec<_>>());
        assert_eq!(singleton_dead_letters(&drain(&mut dead)), 100);
        let singleton_warnings: Vec<String> = warnings
            .lines()
            .into_iter()
            .filter(|l| l.contains("dead letters") && l.contains("scheduler"))
            .collect();
        assert_eq!(singleton_warnings.len(), 1, "{singleton_warnings:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn messages_held_for_two_seconds_go_to_dead_letters() {
        let sim = cluster(406, &[&[], &[]], MembershipOptions::default()).await;
        let oracle = Oracle::default();
        let mut dead = sim.node(0).system.event_stream().subscribe::<DeadLetter>();
        let proxy = start(&sim, 0, &oracle, None, |o| {
            o.with_hand_over_timeout(Duration::from_secs(5))
        });
        for n in 0..10 {
            proxy.tell(Cmd::Job(n));
        }
        sim.run_for(Duration::from_millis(2_100)).await;
        assert_eq!(
            singleton_dead_letters(&drain(&mut dead)),
            10,
            "expired after 2 s"
        );
        sim.run_for(Duration::from_millis(1_400)).await;
        for n in 10..20 {
            proxy.tell(Cmd::Job(n));
        }
        hosted_on(&sim, &oracle, 0).await;
        sim.run_for(Duration::from_millis(10)).await;
        assert_eq!(
            oracle.jobs(),
            (10..20).collect::<Vec<_>>(),
            "held 1.5 s, then flushed"
        );
    }

    /// A peer may route to this node a gossip round before this node's own view agrees it hosts:
    /// the manager holds what arrives rather than dead-lettering it, whatever its own view says.
    #[tokio::test(start_paused = true)]
    async fn a_manager_that_does_not_see_itself_as_host_holds_messages() {
        let sim = cluster(407, &[&[], &[], &[]], MembershipOptions::default()).await;
        let oracle = Oracle::default();
        for i in 0..3 {
            start(&sim, i, &oracle, None, |o| o);
        }
        hosted_on(&sim, &oracle, 0).await;
        // Node 2 routes a message to node 1's manager as if node 1 were the host.
        let manager_on_1 = sim
            .node(2)
            .cluster
            .remoting()
            .actor_ref::<Cmd>(&format!(
                "{}/system/cluster/singleton/manager-scheduler",
                sim_address(1)
            ))
            .unwrap();
        manager_on_1.tell(Cmd::Job(42));
        sim.run_for(Duration::from_millis(50)).await;
        let status = ClusterSingleton::get(&sim.node(1).cluster)
            .status(&key(None))
            .await
            .unwrap();
        assert_eq!(status.held_messages, 1, "{status:?}");
        sim.node(0).cluster.leave();
        hosted_on(&sim, &oracle, 1).await;
        sim.run_for(Duration::from_millis(10)).await;
        assert_eq!(oracle.lives()[1].jobs, vec![42]);
    }

    #[tokio::test(start_paused = true)]
    async fn the_proxy_buffers_while_no_node_hosts_and_flushes_in_order_when_one_does() {
        let mut sim = cluster(408, &[&[], &[]], MembershipOptions::default()).await;
        let oracle = Oracle::default();
        // Nobody carries the role yet.
        let proxy = ClusterSingleton::get(&sim.node(0).cluster)
            .proxy(&key(Some("r")))
            .unwrap();
        for n in 0..20 {
            proxy.tell(Cmd::Job(n));
        }
        sim.run_for(Duration::from_secs(2)).await;
        sim.restart_node(1, &["r"]);
        start(&sim, 1, &oracle, Some("r"), |o| o);
        hosted_on(&sim, &oracle, 1).await;
        sim.wait_until(LIMIT, |_| oracle.jobs().len() == 20).await;
        assert_eq!(oracle.jobs(), (0..20).collect::<Vec<_>>());
    }

    #[tokio::test(start_paused = true)]
    async fn the_proxy_buffer_overflows_into_dead_letters() {
        let sim = cluster(409, &[&[]], MembershipOptions::default()).await;
        let mut dead = sim.node(0).system.event_stream().subscribe::<DeadLetter>();
        let proxy = ClusterSingleton::get(&sim.node(0).cluster)
            .proxy_with_buffer_size(&key(Some("r")), 3)
            .unwrap();
        for n in 0..5 {
            proxy.tell(Cmd::Job(n));
        }
        sim.run_for(Duration::from_millis(10)).await;
        let letters = drain(&mut dead);
        assert_eq!(letters.len(), 2, "{letters:?}");
        assert!(
            letters
                .iter()
                .all(|l| l.reason == DeadLetterReason::HoldFull),
            "{letters:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_proxy_dead_letters_at_once_when_this_node_is_host_but_never_called_start() {
        let sim = cluster(410, &[&[], &[]], MembershipOptions::default()).await;
        let warnings = WarnCapture::start();
        let mut dead = sim.node(0).system.event_stream().subscribe::<DeadLetter>();
        // Node 0 is the elected host, but only node 1 called start.
        let oracle = Oracle::default();
        start(&sim, 1, &oracle, None, |o| o);
        let proxy = ClusterSingleton::get(&sim.node(0).cluster)
            .proxy(&key(None))
            .unwrap();
        proxy.tell(Cmd::Job(1));
        proxy.tell(Cmd::Job(2));
        sim.run_for(Duration::from_millis(5)).await;
        assert_eq!(singleton_dead_letters(&drain(&mut dead)), 2);
        assert_eq!(
            warnings
                .lines()
                .iter()
                .filter(|l| l.contains("never called start") && l.contains("scheduler"))
                .count(),
            1
        );
        assert!(oracle.lives().is_empty());
    }

    /// One run that touches every kind of singleton event.
    #[tokio::test(start_paused = true)]
    async fn singleton_events_report_the_lifecycle_to_the_control_plane() {
        let sim = cluster(411, &[&[], &[], &[]], MembershipOptions::default()).await;
        let oracle = Oracle::default();
        let arbiter = arbiter(Duration::from_secs(3));
        let mut published = events(&sim, 1);
        let mut dead_side = events(&sim, 0);
        // Node 2 stays silent: node 0's hand-over times out.
        let proxy0 = start(&sim, 0, &oracle, None, |o| {
            o.with_hand_over_timeout(Duration::from_secs(1))
                .with_lease(arbiter.lease("scheduler", &sim_address(0).to_string()))
        });
        let proxy1 = start(&sim, 1, &oracle, None, |o| {
            o.with_hand_over_timeout(Duration::from_secs(1))
                .with_lease(arbiter.lease("scheduler", &sim_address(1).to_string()))
        });
        for n in 0..5 {
            proxy1.tell(Cmd::Job(n));
        }
        hosted_on(&sim, &oracle, 0).await;
        proxy0.tell(Cmd::StopSelf);
        sim.wait_until(LIMIT, |_| oracle.lives().len() == 2).await;
        arbiter.revoke("scheduler");
        sim.wait_until(LIMIT, |_| {
            oracle.lives().len() == 3 && oracle.live().len() == 1
        })
        .await;
        // The silent node leaves, then node 0: node 1's hand-over completes and it hosts.
        sim.node(2).cluster.leave();
        sim.wait_until(LIMIT, |s| s.view(1).members.len() == 2)
            .await;
        sim.node(0).cluster.leave();
        hosted_on(&sim, &oracle, 1).await;
        // Stopped, node 1 is still the elected host: its proxy dead-letters at once.
        ClusterSingleton::get(&sim.node(1).cluster)
            .stop(&key(None))
            .await;
        proxy1.tell(Cmd::Job(99));
        sim.run_for(Duration::from_secs(3)).await;
        let mut kinds: BTreeSet<&'static str> = drain(&mut published)
            .iter()
            .map(SingletonEvent::kind)
            .collect();
        kinds.extend(drain(&mut dead_side).iter().map(SingletonEvent::kind));
        for expected in [
            "HostElected",
            "HandOverStarted",
            "HandOverCompleted",
            "HandOverTimedOut",
            "InstanceStarted",
            "InstanceStopped",
            "InstanceRestarted",
            "LeaseAcquired",
            "LeaseLost",
            "LeaseReleased",
            "MessagesHeld",
            "MessagesFlushed",
            "MessagesDeadLettered",
        ] {
            assert!(
                kinds.contains(expected),
                "{expected} missing from {kinds:?}"
            );
        }
    }
}
