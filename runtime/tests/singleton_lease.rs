//! The lease path: acquire before spawning, retry every `acquire_retry_interval`, stop and wait
//! for the instance before re-acquiring a lost lease, release only after the instance
//! terminated, and never two acquires in flight whatever the membership does meanwhile.

#[path = "support/singleton_harness.rs"]
mod harness;

/// Named after the feature so that `cargo nextest run -p troupe singleton` selects these tests.
mod singleton {

    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use crate::harness::{
        Cmd, LIMIT, Oracle, arbiter, assert_unique, cluster, drain, events, hosted_on, key, start,
        worker,
    };
    use tokio::time::Instant;
    use troupe::cluster::MembershipOptions;
    use troupe::lease::{
        FencingToken, InMemoryLease, InMemoryLeaseArbiter, Lease, LeaseFuture, LeaseLostCallback,
        LeaseOp, LeaseRecord,
    };
    use troupe::singleton::ClusterSingleton;
    use troupe::singleton::{SingletonEvent, StartSingletonOptions};
    use troupe::testkit::{SimCluster, sim_address};

    const LEASE: &str = "scheduler";

    fn owner(i: usize) -> String {
        sim_address(i).to_string()
    }

    fn lease_of(arbiter: &InMemoryLeaseArbiter, i: usize) -> Arc<dyn Lease> {
        arbiter.lease(LEASE, &owner(i))
    }

    fn records(
        arbiter: &InMemoryLeaseArbiter,
        i: usize,
        pick: fn(&LeaseOp) -> bool,
    ) -> Vec<LeaseRecord> {
        arbiter
            .history()
            .into_iter()
            .filter(|r| r.owner == owner(i) && pick(&r.op))
            .collect()
    }

    fn acquired(op: &LeaseOp) -> bool {
        matches!(op, LeaseOp::Acquired(_))
    }

    fn start_with_lease(
        sim: &SimCluster,
        i: usize,
        oracle: &Oracle,
        arbiter: &InMemoryLeaseArbiter,
        stop_delay: Duration,
    ) {
        let options = StartSingletonOptions::new(worker(oracle, sim_address(i), stop_delay))
            .with_lease(lease_of(arbiter, i))
            .with_acquire_retry_interval(Duration::from_secs(1));
        ClusterSingleton::get(&sim.node(i).cluster)
            .start(&key(None), options)
            .unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn with_a_lease_the_host_acquires_it_before_spawning() {
        let sim = cluster(301, &[&[], &[]], MembershipOptions::default()).await;
        let oracle = Oracle::default();
        let arbiter = arbiter(Duration::from_secs(3)).with_latency(Duration::from_millis(50));
        let mut published = events(&sim, 0);
        for i in 0..2 {
            start_with_lease(&sim, i, &oracle, &arbiter, Duration::ZERO);
        }
        hosted_on(&sim, &oracle, 0).await;
        let grant = records(&arbiter, 0, acquired);
        assert_eq!(grant.len(), 1);
        assert!(grant[0].at <= oracle.lives()[0].started);
        assert!(
            records(&arbiter, 1, |_| true).is_empty(),
            "node 1 is not the host"
        );
        let kinds: Vec<&str> = drain(&mut published)
            .iter()
            .map(SingletonEvent::kind)
            .collect();
        let acquired_at = kinds.iter().position(|k| *k == "LeaseAcquired").unwrap();
        let started_at = kinds.iter().position(|k| *k == "InstanceStarted").unwrap();
        assert!(acquired_at < started_at, "{kinds:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_acquire_is_retried_every_interval_until_it_succeeds() {
        let sim = cluster(302, &[&[]], MembershipOptions::default()).await;
        let oracle = Oracle::default();
        let arbiter = arbiter(Duration::from_secs(3));
        // Someone else holds it.
        let outsider = arbiter.lease(LEASE, "ops");
        outsider.acquire(Box::new(|_| {})).await.unwrap().unwrap();
        let began = Instant::now();
        start_with_lease(&sim, 0, &oracle, &arbiter, Duration::ZERO);
        sim.run_for(Duration::from_millis(3_500)).await;
        assert!(oracle.lives().is_empty());
        outsider.release().await.unwrap();
        hosted_on(&sim, &oracle, 0).await;
        let attempts: Vec<Duration> = records(&arbiter, 0, |op| {
            matches!(op, LeaseOp::Denied { .. } | LeaseOp::Acquired(_))
        })
        .iter()
        .map(|r| r.at - began)
        .collect();
        assert_eq!(
            attempts.len(),
            5,
            "at 0, 1, 2, 3 s denied, 4 s granted: {attempts:?}"
        );
        for pair in attempts.windows(2) {
            let gap = pair[1] - pair[0];
            assert!(
                gap >= Duration::from_secs(1) && gap < Duration::from_millis(1_050),
                "{attempts:?}"
            );
        }
        assert!(oracle.lives()[0].started - began >= Duration::from_secs(4));
    }

    /// Before v0.17 a lost lease was re-acquired at once: the acquire could finish while the old
    /// instance was still in `post_stop`, the spawn behind it was refused, and the manager then
    /// renewed a lease over no singleton at all.
    #[tokio::test(start_paused = true)]
    async fn a_lost_lease_stops_the_instance_waits_for_post_stop_and_only_then_reacquires() {
        let sim = cluster(303, &[&[]], MembershipOptions::default()).await;
        let oracle = Oracle::default();
        let arbiter = arbiter(Duration::from_secs(3));
        start_with_lease(&sim, 0, &oracle, &arbiter, Duration::from_secs(1));
        let proxy = ClusterSingleton::get(&sim.node(0).cluster)
            .proxy(&key(None))
            .unwrap();
        hosted_on(&sim, &oracle, 0).await;
        for n in 0..50 {
            proxy.tell(Cmd::Job(n));
        }
        sim.run_for(Duration::from_millis(50)).await;
        for n in 50..100 {
            proxy.tell(Cmd::Job(n));
        }
        arbiter.revoke(LEASE);
        sim.wait_until(LIMIT, |_| {
            oracle.lives().len() == 2 && oracle.live().len() == 1
        })
        .await;
        let lives = oracle.lives();
        let old_stopped = lives[0].stopped.unwrap();
        let reacquired = records(&arbiter, 0, acquired);
        assert_eq!(reacquired.len(), 2);
        assert!(
            reacquired[1].at >= old_stopped,
            "re-acquired {:?} before post_stop finished",
            old_stopped - reacquired[1].at
        );
        assert!(lives[1].started >= reacquired[1].at);
        // What arrived while the old instance stopped was held and went to the new one.
        assert_eq!(oracle.jobs(), (0..100).collect::<Vec<_>>(), "nothing lost");
        assert!(arbiter.holder(LEASE).is_some_and(|(o, _)| o == owner(0)));
    }

    #[tokio::test(start_paused = true)]
    async fn when_the_host_moves_away_the_lease_is_released_only_after_the_instance_terminated() {
        let mut sim = cluster(304, &[&[], &[], &["r"]], MembershipOptions::default()).await;
        let oracle = Oracle::default();
        let arbiter = arbiter(Duration::from_secs(3));
        let start_role = |sim: &SimCluster, i: usize, stop_delay| {
            let options = StartSingletonOptions::new(worker(&oracle, sim_address(i), stop_delay))
                .with_lease(lease_of(&arbiter, i))
                .with_acquire_retry_interval(Duration::from_secs(1));
            ClusterSingleton::get(&sim.node(i).cluster)
                .start(&key(Some("r")), options)
                .unwrap();
        };
        start_role(&sim, 2, Duration::from_secs(2));
        hosted_on(&sim, &oracle, 2).await;
        sim.restart_node(1, &["r"]);
        start_role(&sim, 1, Duration::ZERO);
        hosted_on(&sim, &oracle, 1).await;
        let lives = oracle.lives();
        let released = records(&arbiter, 2, |op| matches!(op, LeaseOp::Released(_)));
        assert_eq!(released.len(), 1);
        assert!(
            released[0].at >= lives[0].stopped.unwrap(),
            "released before the instance terminated"
        );
        let taken = records(&arbiter, 1, acquired);
        assert!(taken[0].at >= released[0].at);
        assert!(lives[1].started >= taken[0].at);
        assert_unique(&oracle, sim.seed());
    }

    /// A lease that counts acquires in flight.
    #[derive(Debug)]
    struct Counting {
        inner: Arc<InMemoryLease>,
        in_flight: Arc<AtomicUsize>,
        most: Arc<AtomicUsize>,
    }

    impl Lease for Counting {
        fn name(&self) -> &str {
            self.inner.name()
        }

        fn owner(&self) -> &str {
            self.inner.owner()
        }

        fn acquire(&self, on_lost: LeaseLostCallback) -> LeaseFuture<Option<FencingToken>> {
            let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            self.most.fetch_max(now, Ordering::SeqCst);
            let in_flight = Arc::clone(&self.in_flight);
            let acquire = self.inner.acquire(on_lost);
            Box::pin(async move {
                let result = acquire.await;
                in_flight.fetch_sub(1, Ordering::SeqCst);
                result
            })
        }

        fn release(&self) -> LeaseFuture<()> {
            self.inner.release()
        }

        fn holds(&self) -> bool {
            self.inner.holds()
        }

        fn fencing_token(&self) -> Option<FencingToken> {
            self.inner.fencing_token()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn membership_changes_during_an_acquire_never_start_a_second_one() {
        let mut sim = cluster(305, &[&[], &[], &[]], MembershipOptions::default()).await;
        let oracle = Oracle::default();
        // Every acquire takes 2 s to answer.
        let arbiter = arbiter(Duration::from_secs(6)).with_latency(Duration::from_secs(2));
        let most = Arc::new(AtomicUsize::new(0));
        for i in 0..3 {
            let lease = Arc::new(Counting {
                inner: arbiter.lease(LEASE, &owner(i)),
                in_flight: Arc::new(AtomicUsize::new(0)),
                most: Arc::clone(&most),
            });
            start(&sim, i, &oracle, None, |o| {
                o.with_lease(lease)
                    .with_acquire_retry_interval(Duration::from_secs(1))
            });
        }
        // While node 0's first acquire is in flight, members come and go.
        sim.run_for(Duration::from_millis(300)).await;
        sim.start_node(&[]);
        sim.run_for(Duration::from_millis(500)).await;
        sim.node(2).cluster.leave();
        sim.run_for(Duration::from_millis(500)).await;
        sim.node(3).cluster.leave();
        hosted_on(&sim, &oracle, 0).await;
        sim.run_for(Duration::from_secs(5)).await;
        assert_eq!(
            most.load(Ordering::SeqCst),
            1,
            "never two acquires in flight on one node"
        );
        assert_eq!(oracle.lives().len(), 1);
        assert_eq!(records(&arbiter, 0, acquired).len(), 1);
        let _ = &mut sim;
    }
}
