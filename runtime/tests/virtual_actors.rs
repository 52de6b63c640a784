//! Virtual actors on one node (a simulated cluster of one, paused clock): the first message
//! activates the key, asks reach the same activation, an idle activation is passivated and its
//! claim released, the next message activates it afresh, and what cannot be delivered is a
//! dead letter that names the key.

#[path = "support/virtual_harness.rs"]
mod harness;

/// Named after the feature so that `cargo nextest run -p troupe virtual_actor` selects these.
mod virtual_actor {
    use std::sync::Arc;
    use std::time::Duration;

    use tokio::sync::mpsc;
    use troupe::directory::{
        Claim, ClaimOutcome, Directory, DirectoryError, DirectoryFuture, DirectorySnapshot,
        DirectoryWatch, InMemoryDirectory, Revision,
    };
    use troupe::testkit::{SimCluster, sim_address};
    use troupe::virtual_actor::{
        StartError, VirtualActorOptions, VirtualActorType, VirtualActors, virtual_host_path,
    };
    use troupe::{AskError, DeadLetter, DeadLetterReason, VirtualActorFailure};

    use crate::harness::{Cart, CartMsg, Life};

    const LIMIT: Duration = Duration::from_secs(30);

    async fn one_node() -> SimCluster {
        let mut sim = SimCluster::new(7);
        sim.start_node(&[]);
        sim.wait_all_up(1, LIMIT).await;
        sim
    }

    fn start(
        sim: &SimCluster,
        directory: Arc<dyn Directory>,
        configure: impl FnOnce(VirtualActorOptions) -> VirtualActorOptions,
    ) -> (VirtualActorType<CartMsg>, mpsc::UnboundedReceiver<Life>) {
        let (tx, lives) = mpsc::unbounded_channel();
        let carts = VirtualActors::get(&sim.node(0).cluster)
            .start(
                "cart",
                Cart::factory(sim_address(0), tx),
                configure(VirtualActorOptions::new(directory)),
            )
            .expect("the type starts");
        (carts, lives)
    }

    async fn next_life(lives: &mut mpsc::UnboundedReceiver<Life>) -> Life {
        tokio::time::timeout(LIMIT, lives.recv())
            .await
            .expect("a life event in time")
            .expect("the channel is open")
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_tell_activates_the_key_and_asks_reach_the_same_activation() {
        let sim = one_node().await;
        let directory = Arc::new(InMemoryDirectory::new());
        let (carts, mut lives) = start(&sim, directory.clone(), |o| o);
        let alice = carts.get("alice").unwrap();
        let bob = carts.get("bob").unwrap();
        alice.tell(CartMsg::Add { from: 1, amount: 2 });
        alice.tell(CartMsg::Add { from: 2, amount: 3 });
        bob.tell(CartMsg::Add {
            from: 1,
            amount: 10,
        });
        let total = alice
            .ask(|reply| CartMsg::Total { reply })
            .timeout(LIMIT)
            .await
            .unwrap();
        assert_eq!(
            total, 5,
            "both tells reached alice's one activation, in order"
        );
        let senders = alice
            .ask(|reply| CartMsg::Senders { reply })
            .timeout(LIMIT)
            .await
            .unwrap();
        assert_eq!(senders, vec![1, 2]);
        assert_eq!(
            bob.ask(|reply| CartMsg::Total { reply })
                .timeout(LIMIT)
                .await
                .unwrap(),
            10,
            "another key is another actor"
        );
        let mut started = vec![next_life(&mut lives).await, next_life(&mut lives).await];
        started.sort_by_key(|l| format!("{l:?}"));
        assert_eq!(
            started,
            vec![
                Life::Started {
                    node: sim_address(0),
                    key: "alice".into()
                },
                Life::Started {
                    node: sim_address(0),
                    key: "bob".into()
                },
            ]
        );
        assert!(lives.try_recv().is_err(), "one activation per key");
        let status = carts.status().await.unwrap();
        assert_eq!(status.active, vec!["alice".to_owned(), "bob".to_owned()]);
        let claim = directory
            .lookup("virtual/cart/alice")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(claim.host, sim.node(0).node.to_string());
        // The host lives at the documented path.
        let host = sim
            .node(0)
            .system
            .resolve_any(&virtual_host_path("sim", "cart"))
            .expect("the host at its path");
        assert_eq!(host.path().elements(), "/system/virtual-cart");
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_activation_is_passivated_and_the_next_message_activates_it_afresh() {
        let sim = one_node().await;
        let directory = Arc::new(InMemoryDirectory::new());
        let (carts, mut lives) = start(&sim, directory.clone(), |o| {
            o.with_idle_timeout(Some(Duration::from_secs(1)))
        });
        let alice = carts.get("alice").unwrap();
        alice.tell(CartMsg::Add { from: 1, amount: 4 });
        assert!(matches!(next_life(&mut lives).await, Life::Started { .. }));
        // Activity keeps it: a message at 0.6 s moves the idle deadline to 1.6 s.
        tokio::time::sleep(Duration::from_millis(600)).await;
        alice.tell(CartMsg::Add { from: 1, amount: 1 });
        tokio::time::sleep(Duration::from_millis(700)).await;
        assert!(
            lives.try_recv().is_err(),
            "still active 1.3 s after the first message"
        );
        assert_eq!(
            alice
                .ask(|reply| CartMsg::Total { reply })
                .timeout(LIMIT)
                .await
                .unwrap(),
            5
        );
        let stopped_after = tokio::time::Instant::now();
        assert_eq!(
            next_life(&mut lives).await,
            Life::Stopped {
                node: sim_address(0),
                key: "alice".into()
            }
        );
        let idle = stopped_after.elapsed();
        assert!(
            idle >= Duration::from_millis(900) && idle <= Duration::from_millis(1100),
            "passivated one idle timeout after the last message, not {idle:?}"
        );
        // The claim went with it.
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(directory.lookup("virtual/cart/alice").await.unwrap(), None);
        assert!(carts.status().await.unwrap().active.is_empty());
        // The next message activates it again, with fresh state.
        let total = alice
            .ask(|reply| CartMsg::Total { reply })
            .timeout(LIMIT)
            .await
            .unwrap();
        assert_eq!(total, 0, "a new activation");
        assert!(matches!(next_life(&mut lives).await, Life::Started { .. }));
        alice.tell(CartMsg::Add { from: 3, amount: 7 });
        assert_eq!(
            alice
                .ask(|reply| CartMsg::Senders { reply })
                .timeout(LIMIT)
                .await
                .unwrap(),
            vec![3]
        );
        assert!(
            directory
                .lookup("virtual/cart/alice")
                .await
                .unwrap()
                .is_some()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn keys_types_and_options_that_cannot_work_are_refused_with_what_is_allowed() {
        let sim = one_node().await;
        let directory: Arc<dyn Directory> = Arc::new(InMemoryDirectory::new());
        let actors = VirtualActors::get(&sim.node(0).cluster);
        let (tx, _lives) = mpsc::unbounded_channel();
        let err = actors
            .start(
                "cart",
                Cart::factory(sim_address(0), tx.clone()),
                VirtualActorOptions::new(Arc::clone(&directory)).with_max_hops(0),
            )
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "virtual actor option max_hops must be from 1 to 32, got 0"
        );
        let err = actors
            .start(
                "a/b",
                Cart::factory(sim_address(0), tx.clone()),
                VirtualActorOptions::new(Arc::clone(&directory)),
            )
            .unwrap_err();
        assert!(matches!(err, StartError::TypeName { .. }), "{err}");
        let err = actors.actor_type::<CartMsg>("cart").unwrap_err();
        assert!(
            err.to_string().contains("not started on this node"),
            "{err}"
        );
        let (carts, _lives) = start(&sim, Arc::clone(&directory), |o| o);
        let err = actors
            .start(
                "cart",
                Cart::factory(sim_address(0), tx),
                VirtualActorOptions::new(Arc::clone(&directory)),
            )
            .unwrap_err();
        assert!(matches!(err, StartError::AlreadyStarted { .. }), "{err}");
        assert_eq!(
            actors.actor_type::<CartMsg>("cart").unwrap().type_name(),
            "cart"
        );
        let err = carts.get("").unwrap_err();
        assert!(err.to_string().contains("must not be empty"), "{err}");
        let err = carts.get("a\nb").unwrap_err();
        assert!(err.to_string().contains("control character"), "{err}");
        let err = carts.get(&"k".repeat(10_000)).unwrap_err();
        assert!(err.to_string().contains("\"cart\""), "{err}");
        // Keys that are not actor names are fine: the child name is derived.
        let odd = carts.get("a/b #?$ c").unwrap();
        odd.tell(CartMsg::Add { from: 1, amount: 1 });
        assert_eq!(
            odd.ask(|reply| CartMsg::Total { reply })
                .timeout(LIMIT)
                .await
                .unwrap(),
            1
        );
    }

    /// A directory whose every operation fails.
    #[derive(Debug)]
    struct Down;

    fn unavailable<T: Send + 'static>() -> DirectoryFuture<T> {
        Box::pin(std::future::ready(Err(DirectoryError::Unavailable(
            "etcd at 10.0.0.9:2379 refused the connection".to_owned(),
        ))))
    }

    impl Directory for Down {
        fn claim(&self, _: &str, _: &str) -> DirectoryFuture<ClaimOutcome> {
            unavailable()
        }
        fn lookup(&self, _: &str) -> DirectoryFuture<Option<Claim>> {
            unavailable()
        }
        fn release(&self, _: &str, _: &str) -> DirectoryFuture<bool> {
            unavailable()
        }
        fn evict_host(&self, _: &str) -> DirectoryFuture<Vec<String>> {
            unavailable()
        }
        fn snapshot(&self) -> DirectoryFuture<DirectorySnapshot> {
            unavailable()
        }
        fn watch(&self, _: Revision) -> DirectoryFuture<DirectoryWatch> {
            unavailable()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_failing_directory_turns_messages_into_dead_letters_naming_the_key_and_asks_fail_at_once()
     {
        let sim = one_node().await;
        let mut dead = sim.node(0).system.event_stream().subscribe::<DeadLetter>();
        let (carts, mut lives) = start(&sim, Arc::new(Down), |o| o);
        let alice = carts.get("alice").unwrap();
        alice.tell(CartMsg::Add { from: 1, amount: 1 });
        let letter = tokio::time::timeout(LIMIT, dead.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(letter.recipient.elements(), "/system/virtual-cart");
        assert!(
            letter.message_type.ends_with("CartMsg"),
            "{}",
            letter.message_type
        );
        match &letter.reason {
            DeadLetterReason::VirtualActor {
                key,
                failure: VirtualActorFailure::DirectoryFailed(error),
            } => {
                assert_eq!(key, "alice");
                assert!(error.contains("refused the connection"), "{error}");
            }
            other => panic!("not a virtual actor dead letter: {other:?}"),
        }
        assert!(
            letter
                .reason
                .to_string()
                .starts_with("virtual actor \"alice\" not reached: directory failed"),
            "{}",
            letter.reason
        );
        let started = tokio::time::Instant::now();
        let err = alice
            .ask(|reply| CartMsg::Total { reply })
            .timeout(LIMIT)
            .await
            .unwrap_err();
        assert!(matches!(err, AskError::NoReply { .. }), "{err}");
        assert!(started.elapsed() < Duration::from_secs(1), "not a timeout");
        assert!(lives.try_recv().is_err(), "nothing was activated");
    }
}
