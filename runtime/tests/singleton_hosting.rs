//! Who hosts a singleton and which cluster events move it: the first address-sorted up member
//! (with a role, the first up member carrying it), recomputed on membership facts, never on
//! reachability opinions.

#[path = "support/singleton_harness.rs"]
mod harness;

/// Named after the feature so that `cargo nextest run -p troupe singleton` selects these tests.
mod singleton {

    use std::time::Duration;

    use crate::harness::{
        Cmd, LIMIT, Oracle, assert_unique, cluster, hosted_on, key, start_default,
    };
    use troupe::cluster::{ClusterEvent, MembershipOptions};
    use troupe::singleton::ClusterSingleton;
    use troupe::singleton::singleton_manager_path;
    use troupe::testkit::sim_address;

    #[tokio::test(start_paused = true)]
    async fn the_first_address_sorted_up_member_hosts_and_every_node_agrees() {
        let sim = cluster(101, &[&[], &[], &[]], MembershipOptions::default()).await;
        let oracle = Oracle::default();
        let proxies: Vec<_> = (0..3)
            .map(|i| start_default(&sim, i, &oracle, None))
            .collect();
        hosted_on(&sim, &oracle, 0).await;
        for i in 0..3 {
            let status = ClusterSingleton::get(&sim.node(i).cluster)
                .status(&key(None))
                .await
                .unwrap();
            assert_eq!(status.host, Some(sim_address(0)), "node {i}");
            assert_eq!(status.hosting, i == 0, "node {i}");
        }
        for (i, proxy) in proxies.iter().enumerate() {
            proxy.tell(Cmd::Job(i as u64));
        }
        let jobs = proxies[2]
            .ask(|reply| Cmd::Jobs { reply })
            .timeout(LIMIT)
            .await
            .unwrap();
        assert_eq!(jobs.len(), 3, "{jobs:?}");
        assert_eq!(oracle.lives().len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn the_manager_lives_at_the_documented_path() {
        let sim = cluster(102, &[&[]], MembershipOptions::default()).await;
        let oracle = Oracle::default();
        start_default(&sim, 0, &oracle, None);
        let path = singleton_manager_path("sim", "scheduler");
        assert_eq!(
            path,
            "troupe://sim/system/cluster/singleton/manager-scheduler"
        );
        let manager = sim
            .node(0)
            .system
            .resolve_any(&path)
            .expect("manager at the path");
        assert_eq!(
            manager.path().elements(),
            "/system/cluster/singleton/manager-scheduler"
        );
        hosted_on(&sim, &oracle, 0).await;
        let instance = sim
            .node(0)
            .system
            .resolve_any(&format!("{path}/scheduler"))
            .expect("the instance is the manager's child named after the type");
        assert_eq!(instance.path().name(), "scheduler");
    }

    #[tokio::test(start_paused = true)]
    async fn with_a_role_the_first_up_member_carrying_it_hosts_not_the_leader() {
        let sim = cluster(103, &[&[], &["r"], &["r"]], MembershipOptions::default()).await;
        let oracle = Oracle::default();
        for i in 0..3 {
            start_default(&sim, i, &oracle, Some("r"));
        }
        hosted_on(&sim, &oracle, 1).await;
        assert_eq!(
            sim.view(0).leader,
            Some(sim_address(0)),
            "the leader lacks the role"
        );
        sim.run_for(Duration::from_secs(5)).await;
        assert_eq!(oracle.lives().len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_proxy_only_node_resolves_the_same_host_from_the_key_role() {
        let sim = cluster(104, &[&[], &["r"], &["r"]], MembershipOptions::default()).await;
        let oracle = Oracle::default();
        start_default(&sim, 1, &oracle, Some("r"));
        start_default(&sim, 2, &oracle, Some("r"));
        // Node 0 only addresses it: it has the key, whose role says where to look.
        let proxy = ClusterSingleton::get(&sim.node(0).cluster)
            .proxy(&key(Some("r")))
            .unwrap();
        hosted_on(&sim, &oracle, 1).await;
        proxy.tell(Cmd::Job(7));
        sim.wait_until(LIMIT, |_| oracle.jobs() == vec![7]).await;
        assert_eq!(oracle.lives()[0].node, sim_address(1));
    }

    /// The incumbent becomes unreachable to its peers. Nodes 1 and 2 see a new leader (themselves
    /// first in their up set) and a `LeaderChanged`, but reachability is not part of the election:
    /// the incumbent stays host in every view, and nobody promotes itself.
    #[tokio::test(start_paused = true)]
    async fn an_unreachable_incumbent_does_not_make_a_peer_promote_itself() {
        let settings = MembershipOptions::default().with_down_after(None);
        let sim = cluster(105, &[&[], &[], &[]], settings).await;
        let oracle = Oracle::default();
        for i in 0..3 {
            start_default(&sim, i, &oracle, None);
        }
        hosted_on(&sim, &oracle, 0).await;
        let mut events = sim.node(1).cluster.subscribe();
        sim.partition(&[0], &[1, 2]);
        sim.wait_until(LIMIT, |s| s.view(1).unreachable.contains(&s.node(0).node))
            .await;
        sim.run_for(Duration::from_secs(30)).await;
        let mut saw_leader_change = false;
        while let Some(n) = events.try_recv() {
            if let troupe::cluster::ClusterNotification::Event(ClusterEvent::LeaderChanged(_)) = n {
                saw_leader_change = true;
            }
        }
        assert!(
            saw_leader_change,
            "the partition changes the leader on node 1"
        );
        assert_eq!(
            oracle.lives().len(),
            1,
            "nobody promoted itself: {:?}",
            oracle.lives()
        );
        let status = ClusterSingleton::get(&sim.node(1).cluster)
            .status(&key(None))
            .await
            .unwrap();
        assert_eq!(status.host, Some(sim_address(0)));
        assert!(!status.hosting);
        sim.heal();
        sim.wait_all_up(3, LIMIT).await;
        sim.run_for(Duration::from_secs(5)).await;
        assert_eq!(oracle.lives().len(), 1);
        assert_unique(&oracle, sim.seed());
    }

    #[tokio::test(start_paused = true)]
    async fn an_unreachable_role_host_does_not_make_a_peer_promote_itself() {
        let settings = MembershipOptions::default().with_down_after(None);
        let sim = cluster(106, &[&[], &["r"], &["r"]], settings).await;
        let oracle = Oracle::default();
        for i in 0..3 {
            start_default(&sim, i, &oracle, Some("r"));
        }
        hosted_on(&sim, &oracle, 1).await;
        sim.partition(&[1], &[0, 2]);
        sim.run_for(Duration::from_secs(30)).await;
        assert_eq!(oracle.lives().len(), 1, "{:?}", oracle.lives());
        assert_unique(&oracle, sim.seed());
    }

    /// Before v0.17 the only trigger was `LeaderChanged`: a role member joining below a role-less
    /// leader moved the role host without changing the leader, the joiner spawned on its own
    /// `SelfUp`, and nobody told the incumbent to stop.
    #[tokio::test(start_paused = true)]
    async fn a_role_member_joining_below_a_role_less_leader_moves_the_host_and_the_incumbent_stops()
    {
        let mut sim = cluster(107, &[&[], &[], &["r"]], MembershipOptions::default()).await;
        let oracle = Oracle::default();
        for i in 0..3 {
            start_default(&sim, i, &oracle, Some("r"));
        }
        hosted_on(&sim, &oracle, 2).await;
        let mut leader_events = sim.node(0).cluster.subscribe();
        // A new process with the role comes up at node 1's address, below node 2.
        sim.restart_node(1, &["r"]);
        start_default(&sim, 1, &oracle, Some("r"));
        hosted_on(&sim, &oracle, 1).await;
        sim.run_for(Duration::from_secs(5)).await;
        let lives = oracle.lives();
        assert_eq!(lives.len(), 2, "{lives:?}");
        assert_eq!(lives[0].node, sim_address(2));
        assert!(lives[0].stopped.is_some(), "the incumbent stopped");
        assert_unique(&oracle, sim.seed());
        assert_eq!(sim.view(0).leader, Some(sim_address(0)));
        while let Some(n) = leader_events.try_recv() {
            assert!(
                !matches!(
                    n,
                    troupe::cluster::ClusterNotification::Event(ClusterEvent::LeaderChanged(_))
                ),
                "the leader never changed"
            );
        }
    }
}
