//! The hand-over without a lease: a new host asks every eligible peer to step down, resends
//! every 500 ms, spawns only after each acknowledged (after `post_stop`), stops waiting for peers
//! that leave, and after the timeout hosts anyway naming the silent ones. Requests count only
//! from the transport-verified sender, and a host yields only to a peer sorting before it.
//! Messages through a proxy survive a graceful hand-over, all of them, in order.

#[path = "support/singleton_harness.rs"]
mod harness;

/// Named after the feature so that `cargo nextest run -p troupe singleton` selects these tests.
mod singleton {

    use std::time::Duration;

    use crate::harness::{
        Cmd, LIMIT, Oracle, WarnCapture, assert_unique, cluster, drain, events, hosted_on, key,
        start, start_default, worker,
    };
    use tokio::time::Instant;
    use troupe::DeadLetter;
    use troupe::cluster::MembershipOptions;
    use troupe::singleton::ClusterSingleton;
    use troupe::singleton::{ManagerMsg, SingletonEvent, StartSingletonOptions};
    use troupe::testkit::sim_address;

    const MANAGER: &str = "/system/cluster/singleton/manager-scheduler";

    /// A message for the manager path of a node that runs no manager (and so never registered the
    /// manager's message type either).
    fn is_manager_dead_letter(letter: &DeadLetter) -> bool {
        letter.recipient.elements() == MANAGER
    }

    #[tokio::test(start_paused = true)]
    async fn hand_over_waits_for_post_stop_of_the_previous_instance() {
        let mut sim = cluster(201, &[&[], &[], &["r"]], MembershipOptions::default()).await;
        let oracle = Oracle::default();
        for i in 0..3 {
            let options =
                StartSingletonOptions::new(worker(&oracle, sim_address(i), Duration::from_secs(3)));
            ClusterSingleton::get(&sim.node(i).cluster)
                .start(&key(Some("r")), options)
                .unwrap();
        }
        hosted_on(&sim, &oracle, 2).await;
        // A role member comes up below the incumbent, whose post_stop takes 3 s.
        sim.restart_node(1, &["r"]);
        start_default(&sim, 1, &oracle, Some("r"));
        hosted_on(&sim, &oracle, 1).await;
        let lives = oracle.lives();
        let (old, new) = (&lives[0], &lives[1]);
        let old_stopped = old.stopped.expect("the incumbent stopped");
        assert!(
            new.started >= old_stopped,
            "the new instance started {:?} before the old one finished post_stop",
            old_stopped - new.started
        );
        assert_unique(&oracle, sim.seed());
    }

    /// Node 2 never mentions the singleton: it has nothing that could answer, so node 0 asks it
    /// again every 500 ms until the timeout and then hosts anyway, naming it.
    #[tokio::test(start_paused = true)]
    async fn a_silent_peer_is_asked_every_500ms_and_the_timeout_hosts_anyway_naming_it() {
        let sim = cluster(202, &[&[], &[], &[]], MembershipOptions::default()).await;
        let warnings = WarnCapture::start();
        let oracle = Oracle::default();
        let mut dead = sim.node(2).system.event_stream().subscribe::<DeadLetter>();
        let mut singleton_events = events(&sim, 0);
        let started = Instant::now();
        start_default(&sim, 0, &oracle, None);
        start_default(&sim, 1, &oracle, None);
        let mut requests = Vec::new();
        while oracle.live().is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
            while let Some(letter) = dead.try_recv() {
                if is_manager_dead_letter(&letter) {
                    requests.push(Instant::now() - started);
                }
            }
            assert!(started.elapsed() < LIMIT);
        }
        let hosted_after = started.elapsed();
        assert!(
            hosted_after >= Duration::from_secs(10) && hosted_after < Duration::from_millis(10_100),
            "hosted after {hosted_after:?}"
        );
        assert_eq!(
            requests.len(),
            20,
            "first request + 19 resends: {requests:?}"
        );
        for pair in requests.windows(2) {
            let gap = pair[1] - pair[0];
            assert!(
                gap >= Duration::from_millis(490) && gap <= Duration::from_millis(520),
                "{requests:?}"
            );
        }
        let timed_out = drain(&mut singleton_events)
            .into_iter()
            .find_map(|e| match e {
                SingletonEvent::HandOverTimedOut { silent_peers, .. } => Some(silent_peers),
                _ => None,
            })
            .expect("HandOverTimedOut published");
        assert_eq!(timed_out, vec![sim_address(2)]);
        let warning = warnings
            .lines()
            .into_iter()
            .find(|l| l.contains("hand-over timed out"))
            .expect("a warning");
        assert!(warning.contains(&sim_address(2).to_string()), "{warning}");
        assert!(!warning.contains(&sim_address(1).to_string()), "{warning}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_proxy_only_node_acknowledges_at_once() {
        let sim = cluster(203, &[&[], &[], &[]], MembershipOptions::default()).await;
        let oracle = Oracle::default();
        ClusterSingleton::get(&sim.node(2).cluster)
            .proxy(&key(None))
            .unwrap();
        let started = Instant::now();
        start_default(&sim, 0, &oracle, None);
        start_default(&sim, 1, &oracle, None);
        let took = hosted_on(&sim, &oracle, 0).await;
        assert!(
            took < Duration::from_millis(100),
            "hosted after {:?}",
            started.elapsed()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_peer_that_leaves_the_eligible_set_is_no_longer_waited_for() {
        let sim = cluster(204, &[&[], &[], &[]], MembershipOptions::default()).await;
        let oracle = Oracle::default();
        let started = Instant::now();
        start_default(&sim, 0, &oracle, None);
        start_default(&sim, 1, &oracle, None);
        // Node 2 is silent; it leaves after 2 s.
        sim.run_for(Duration::from_secs(2)).await;
        assert!(oracle.live().is_empty(), "still waiting for node 2");
        sim.node(2).cluster.leave();
        hosted_on(&sim, &oracle, 0).await;
        let took = started.elapsed();
        assert!(
            took < Duration::from_secs(5),
            "hosted {took:?} after the start, long before the 10 s timeout"
        );
    }

    /// A request is attributed to the node the transport verified — the payload names nobody — and
    /// a host does not yield to a peer that sorts after it: such a request cannot restart the
    /// singleton.
    #[tokio::test(start_paused = true)]
    async fn a_host_ignores_requests_from_peers_sorting_after_it_and_requests_without_origin() {
        let sim = cluster(205, &[&[], &[], &[]], MembershipOptions::default()).await;
        let oracle = Oracle::default();
        for i in 0..3 {
            start_default(&sim, i, &oracle, None);
        }
        hosted_on(&sim, &oracle, 0).await;
        let manager_on_0 = format!("{}{MANAGER}", sim_address(0));
        let from_2 = sim
            .node(2)
            .cluster
            .remoting()
            .actor_ref::<ManagerMsg>(&manager_on_0)
            .unwrap();
        for nonce in 0..5 {
            from_2.tell(ManagerMsg::HandOverRequest { nonce });
        }
        // Sent on node 0 itself: no transport origin.
        let local = sim.node(0).system.resolve::<ManagerMsg>(MANAGER).unwrap();
        local.tell(ManagerMsg::HandOverRequest { nonce: 9 });
        sim.run_for(Duration::from_secs(5)).await;
        assert_eq!(oracle.lives().len(), 1, "{:?}", oracle.lives());
        assert!(oracle.lives()[0].stopped.is_none());
    }

    /// A node that does not believe it hosts has nothing to defend: it acknowledges any verified
    /// requester — and the acknowledgment goes to that requester, the transport's answer to "who
    /// asked", not to anything the payload could claim.
    #[tokio::test(start_paused = true)]
    async fn a_node_that_is_not_the_host_acknowledges_the_verified_requester() {
        let sim = cluster(206, &[&[], &[], &[]], MembershipOptions::default()).await;
        let oracle = Oracle::default();
        start_default(&sim, 0, &oracle, None);
        start_default(&sim, 1, &oracle, None);
        // Node 2 runs no manager: an acknowledgment sent to it becomes a dead letter there.
        hosted_on(&sim, &oracle, 0).await;
        let mut dead = sim.node(2).system.event_stream().subscribe::<DeadLetter>();
        drain(&mut dead);
        let to_1 = sim
            .node(2)
            .cluster
            .remoting()
            .actor_ref::<ManagerMsg>(&format!("{}{MANAGER}", sim_address(1)))
            .unwrap();
        to_1.tell(ManagerMsg::HandOverRequest { nonce: 77 });
        sim.run_for(Duration::from_millis(100)).await;
        let acks: Vec<DeadLetter> = drain(&mut dead)
            .into_iter()
            .filter(is_manager_dead_letter)
            .collect();
        assert_eq!(acks.len(), 1, "node 1 answered node 2, once: {acks:?}");
        assert_eq!(oracle.lives().len(), 1);
    }

    /// A stream of numbered messages from proxies on three nodes while the host leaves: every
    /// message arrives exactly once, and each proxy's messages in the order it sent them.
    #[tokio::test(start_paused = true)]
    async fn numbered_messages_through_proxies_survive_a_graceful_hand_over_in_order() {
        let sim = cluster(207, &[&[], &[], &[], &[]], MembershipOptions::default()).await;
        let oracle = Oracle::default();
        let proxies: Vec<_> = (0..4)
            .map(|i| start_default(&sim, i, &oracle, None))
            .collect();
        hosted_on(&sim, &oracle, 0).await;
        const PER_PROXY: u64 = 2_000;
        let leave_at = 700;
        for n in 0..PER_PROXY {
            for p in 1..4u64 {
                proxies[p as usize].tell(Cmd::Job(p * 1_000_000 + n));
            }
            if n == leave_at {
                sim.node(0).cluster.leave();
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        sim.wait_until(LIMIT, |_| oracle.jobs().len() as u64 >= 3 * PER_PROXY)
            .await;
        sim.run_for(Duration::from_secs(3)).await;
        let jobs = oracle.jobs();
        assert_eq!(jobs.len() as u64, 3 * PER_PROXY, "none lost, none twice");
        for p in 1..4u64 {
            let mine: Vec<u64> = jobs
                .iter()
                .filter(|j| **j / 1_000_000 == p)
                .map(|j| j % 1_000_000)
                .collect();
            assert_eq!(
                mine,
                (0..PER_PROXY).collect::<Vec<_>>(),
                "proxy on node {p}"
            );
        }
        let lives = oracle.lives();
        assert_eq!(lives.len(), 2, "{lives:?}");
        assert!(!lives[0].jobs.is_empty() && !lives[1].jobs.is_empty());
        assert_eq!(lives[1].node, sim_address(1));
        assert_unique(&oracle, sim.seed());
    }

    #[tokio::test(start_paused = true)]
    async fn options_are_validated_at_start_with_an_error_naming_field_value_and_allowed() {
        let sim = cluster(208, &[&[]], MembershipOptions::default()).await;
        let oracle = Oracle::default();
        let options = StartSingletonOptions::new(worker(&oracle, sim_address(0), Duration::ZERO))
            .with_acquire_retry_interval(Duration::ZERO);
        let err = ClusterSingleton::get(&sim.node(0).cluster)
            .start(&key(None), options)
            .unwrap_err();
        let message = err.to_string();
        assert!(message.contains("acquire_retry_interval"), "{message}");
        assert!(message.contains("must be > 0"), "{message}");
        assert!(message.contains("got 0ms"), "{message}");
        // Nothing was started.
        assert!(
            ClusterSingleton::get(&sim.node(0).cluster)
                .status(&key(None))
                .await
                .is_none()
        );
        // And a valid start after it works.
        start(&sim, 0, &oracle, None, |o| {
            o.with_hand_over_timeout(Duration::from_secs(3))
        });
        hosted_on(&sim, &oracle, 0).await;
    }
}
