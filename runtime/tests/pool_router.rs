//! The local pool router: the five strategies, routee lifecycle, and configuration errors.

#[path = "support/helpers.rs"]
mod helpers;

use std::collections::{BTreeMap, BTreeSet};

use helpers::{next_event, within};
use tokio::sync::{mpsc, watch};
use troupe::routing::{PoolRouterError, PoolRouterOptions, RoutingStrategy};
use troupe::{
    Actor, ActorError, ActorRef, ActorSystem, Context, DeadLetter, DeadLetterReason, Props,
    SupervisorStrategy,
};

/// A routee: reports which routee handled each job.
struct Routee;

#[derive(Clone)]
enum Job {
    Work {
        id: u32,
        key: String,
        done: mpsc::UnboundedSender<(String, u32)>,
    },
    /// Report being blocked, then wait until `release` turns true.
    Hold {
        entered: mpsc::UnboundedSender<String>,
        release: watch::Receiver<bool>,
    },
    Fail,
}

impl Actor for Routee {
    type Msg = Job;

    async fn handle(&mut self, msg: Job, ctx: &mut Context<Self>) -> Result<(), ActorError> {
        let name = ctx.path().name().to_owned();
        match msg {
            Job::Work { id, done, .. } => {
                let _ = done.send((name, id));
            }
            Job::Hold {
                entered,
                mut release,
            } => {
                let _ = entered.send(name);
                let _ = release.wait_for(|released| *released).await;
            }
            Job::Fail => return Err("routee asked to fail".into()),
        }
        Ok(())
    }
}

fn routee() -> Props<Routee> {
    Props::new(|| Routee)
}

/// Collects which routee handled which job.
struct Results {
    done: mpsc::UnboundedSender<(String, u32)>,
    rx: mpsc::UnboundedReceiver<(String, u32)>,
}

impl Results {
    fn new() -> Self {
        let (done, rx) = mpsc::unbounded_channel();
        Self { done, rx }
    }

    fn work(&self, id: u32) -> Job {
        self.keyed(id, "")
    }

    fn keyed(&self, id: u32, key: &str) -> Job {
        Job::Work {
            id,
            key: key.to_owned(),
            done: self.done.clone(),
        }
    }

    async fn next(&mut self) -> (String, u32) {
        within("a routee to finish a job", self.rx.recv())
            .await
            .expect("results channel open")
    }

    async fn take(&mut self, n: usize) -> Vec<(String, u32)> {
        let mut results = Vec::with_capacity(n);
        for _ in 0..n {
            results.push(self.next().await);
        }
        results
    }
}

/// Ids handled per routee name, in handling order.
fn by_routee(results: &[(String, u32)]) -> BTreeMap<String, Vec<u32>> {
    let mut map: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for (routee, id) in results {
        map.entry(routee.clone()).or_default().push(*id);
    }
    map
}

/// Holds routees inside a handler until released.
struct Holds {
    entered: mpsc::UnboundedSender<String>,
    entered_rx: mpsc::UnboundedReceiver<String>,
    release: watch::Sender<bool>,
}

impl Holds {
    fn new() -> Self {
        let (entered, entered_rx) = mpsc::unbounded_channel();
        let (release, _) = watch::channel(false);
        Self {
            entered,
            entered_rx,
            release,
        }
    }

    /// Block `routees` (sent directly, not through the router) and wait until all are blocked.
    async fn hold(&mut self, routees: &[&ActorRef<Job>]) {
        for routee in routees {
            routee.tell(Job::Hold {
                entered: self.entered.clone(),
                release: self.release.subscribe(),
            });
        }
        for _ in routees {
            within("a routee to block", self.entered_rx.recv())
                .await
                .unwrap();
        }
    }

    fn release(&self) {
        self.release.send_replace(true);
    }
}

fn resolve_routees(system: &ActorSystem, router: &str, n: usize) -> Vec<ActorRef<Job>> {
    (1..=n)
        .map(|i| {
            system
                .resolve::<Job>(&format!("/user/{router}/routee-{i}"))
                .unwrap()
        })
        .collect()
}

#[tokio::test]
async fn round_robin_cycles_through_the_routees_in_order() {
    let system = ActorSystem::new("pool").unwrap();
    let props = PoolRouterOptions::new(3, routee)
        .round_robin()
        .into_props()
        .unwrap();
    let router = system.spawn("pool", props).unwrap();
    let mut results = Results::new();

    for id in 0..9 {
        router.tell(results.work(id));
    }
    let handled = by_routee(&results.take(9).await);
    assert_eq!(handled["routee-1"], [0, 3, 6]);
    assert_eq!(handled["routee-2"], [1, 4, 7]);
    assert_eq!(handled["routee-3"], [2, 5, 8]);
    system.shutdown().await;
}

#[tokio::test]
async fn random_with_a_fixed_seed_is_reproducible_and_reaches_every_routee() {
    let system = ActorSystem::new("pool").unwrap();
    let mut assignments = Vec::new();
    for name in ["first", "second"] {
        let props = PoolRouterOptions::new(4, routee)
            .random()
            .with_seed(42)
            .into_props()
            .unwrap();
        let router = system.spawn(name, props).unwrap();
        let mut results = Results::new();
        for id in 0..200 {
            router.tell(results.work(id));
        }
        let mut handled = results.take(200).await;
        handled.sort_by_key(|(_, id)| *id);
        assignments.push(
            handled
                .into_iter()
                .map(|(routee, _)| routee)
                .collect::<Vec<_>>(),
        );
    }

    assert_eq!(assignments[0], assignments[1], "same seed, same choices");
    let used: BTreeSet<&String> = assignments[0].iter().collect();
    assert_eq!(used.len(), 4, "every routee got work: {used:?}");
    system.shutdown().await;
}

#[tokio::test]
async fn consistent_hashing_sends_the_same_key_to_the_same_routee() {
    let system = ActorSystem::new("pool").unwrap();
    let props = PoolRouterOptions::new(4, routee)
        .consistent_hashing(|job: &Job| match job {
            Job::Work { key, .. } => key.clone(),
            _ => String::new(),
        })
        .into_props()
        .unwrap();
    let router = system.spawn("pool", props).unwrap();
    let mut results = Results::new();
    let keys: Vec<String> = (0..20).map(|k| format!("user-{k}")).collect();

    let mut id = 0;
    for _round in 0..3 {
        for key in &keys {
            router.tell(results.keyed(id, key));
            id += 1;
        }
    }
    let handled = results.take(60).await;
    let mut owner: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (routee, id) in &handled {
        let key = &keys[*id as usize % keys.len()];
        owner.entry(key).or_default().insert(routee);
    }
    for (key, routees) in &owner {
        assert_eq!(routees.len(), 1, "{key} went to {routees:?}");
    }
    let used: BTreeSet<&str> = owner.values().flatten().copied().collect();
    assert!(used.len() > 1, "keys are spread over routees: {used:?}");
    system.shutdown().await;
}

#[tokio::test]
async fn smallest_mailbox_prefers_a_free_routee_over_routees_with_queued_work() {
    let system = ActorSystem::new("pool").unwrap();
    let props = PoolRouterOptions::new(3, routee)
        .smallest_mailbox()
        .into_props()
        .unwrap();
    let router = system.spawn("pool", props).unwrap();
    let mut results = Results::new();
    router.tell(results.work(0));
    results.next().await; // the routees exist
    let routees = resolve_routees(&system, "pool", 3);
    let mut holds = Holds::new();
    holds.hold(&[&routees[0], &routees[1]]).await;
    routees[0].tell(results.work(100));
    routees[1].tell(results.work(101));

    for id in 1..=10 {
        router.tell(results.work(id));
        assert_eq!(results.next().await, ("routee-3".to_owned(), id));
    }
    assert_eq!(routees[0].mailbox_depth().get(), 1);
    assert_eq!(routees[1].mailbox_depth().get(), 1);
    holds.release();
    let mut fillers = results.take(2).await;
    fillers.sort();
    assert_eq!(
        fillers,
        [("routee-1".to_owned(), 100), ("routee-2".to_owned(), 101)]
    );
    system.shutdown().await;
}

#[tokio::test]
async fn smallest_mailbox_picks_the_routee_with_the_shortest_queue() {
    let system = ActorSystem::new("pool").unwrap();
    // The key function runs in the router for every message it routes: a barrier that shows
    // the router has finished routing everything before the marker.
    let (routed_tx, mut routed) = mpsc::unbounded_channel();
    let props = PoolRouterOptions::new(3, routee)
        .smallest_mailbox()
        .with_extract_key(move |job: &Job| {
            if let Job::Work { id, .. } = job {
                let _ = routed_tx.send(*id);
            }
            String::new()
        })
        .into_props()
        .unwrap();
    let router = system.spawn("pool", props).unwrap();
    let mut results = Results::new();
    router.tell(results.work(0));
    results.next().await;
    assert_eq!(within("the router", routed.recv()).await, Some(0));
    let routees = resolve_routees(&system, "pool", 3);
    let mut holds = Holds::new();
    holds.hold(&[&routees[0], &routees[1], &routees[2]]).await;
    for (routee, depth) in routees.iter().zip([3, 1, 2]) {
        for i in 0..depth {
            routee.tell(results.work(100 + i));
        }
    }

    router.tell(results.work(1));
    router.tell(results.work(2)); // marker
    assert_eq!(within("the router", routed.recv()).await, Some(1));
    assert_eq!(within("the router", routed.recv()).await, Some(2));
    // Job 1 was routed to routee-2, the shortest queue (3, 1, 2 before it). The marker then
    // ties routee-2 and routee-3 at 2 and goes to routee-3, the next in round-robin order.
    assert_eq!(routees[0].mailbox_depth().get(), 3);
    assert_eq!(routees[1].mailbox_depth().get(), 2);
    assert_eq!(routees[2].mailbox_depth().get(), 3);
    holds.release();
    let handled = results.take(8).await; // six fillers, job 1 and the marker
    assert!(handled.contains(&("routee-2".to_owned(), 1)), "{handled:?}");
    system.shutdown().await;
}

#[tokio::test]
async fn broadcast_delivers_every_message_to_every_routee() {
    let system = ActorSystem::new("pool").unwrap();
    let props = PoolRouterOptions::new(3, routee)
        .broadcast()
        .into_props()
        .unwrap();
    let router = system.spawn("pool", props).unwrap();
    let mut results = Results::new();

    router.tell(results.work(1));
    router.tell(results.work(2));
    let handled = by_routee(&results.take(6).await);
    assert_eq!(handled.len(), 3);
    for ids in handled.values() {
        assert_eq!(ids, &[1, 2]);
    }
    system.shutdown().await;
}

#[tokio::test]
async fn a_strategy_chosen_by_name_routes_like_the_builder() {
    let system = ActorSystem::new("pool").unwrap();
    let strategy: RoutingStrategy = "round-robin".parse().unwrap();
    let props = PoolRouterOptions::new(2, routee)
        .with_strategy(strategy)
        .into_props()
        .unwrap();
    let router = system.spawn("pool", props).unwrap();
    let mut results = Results::new();

    for id in 0..4 {
        router.tell(results.work(id));
    }
    let handled = by_routee(&results.take(4).await);
    assert_eq!(handled["routee-1"], [0, 2]);
    assert_eq!(handled["routee-2"], [1, 3]);
    system.shutdown().await;
}

#[test]
fn a_pool_of_zero_routees_is_a_clear_config_error() {
    let err = PoolRouterOptions::new(0, routee).into_props().unwrap_err();
    assert_eq!(err, PoolRouterError::EmptyPool);
    assert!(err.to_string().contains("at least 1"), "{err}");
}

#[test]
fn consistent_hashing_without_a_key_function_is_a_clear_config_error() {
    let err = PoolRouterOptions::new(3, routee)
        .with_strategy(RoutingStrategy::ConsistentHashing)
        .into_props()
        .unwrap_err();
    assert_eq!(err, PoolRouterError::MissingExtractKey);
    let message = err.to_string();
    assert!(
        message.contains("consistent-hashing") && message.contains("extract_key"),
        "{message}"
    );
}

#[test]
fn broadcast_chosen_by_name_without_a_clone_function_is_a_clear_config_error() {
    let err = PoolRouterOptions::new(3, routee)
        .with_strategy(RoutingStrategy::Broadcast)
        .into_props()
        .unwrap_err();
    assert_eq!(err, PoolRouterError::BroadcastNeedsClone);
    assert!(err.to_string().contains("broadcast()"), "{err}");
}

#[tokio::test]
async fn routees_are_children_of_the_router_and_stop_with_it() {
    let system = ActorSystem::new("pool").unwrap();
    let props = PoolRouterOptions::new(3, routee).into_props().unwrap();
    let router = system.spawn("pool", props).unwrap();
    let mut results = Results::new();
    router.tell(results.work(0));
    results.next().await;
    let routees = resolve_routees(&system, "pool", 3);
    assert_eq!(
        routees[2].path().to_string(),
        "troupe://pool/user/pool/routee-3"
    );

    router.stop();
    within("the router to stop", router.terminated()).await;
    assert!(routees.iter().all(ActorRef::is_terminated));
    system.shutdown().await;
}

#[tokio::test]
async fn a_routee_that_stops_for_good_leaves_the_rotation_and_an_empty_pool_dead_letters() {
    let system = ActorSystem::new("pool").unwrap();
    let mut dead_letters = system.event_stream().subscribe::<DeadLetter>();
    let props = PoolRouterOptions::new(2, || routee().with_supervisor(SupervisorStrategy::stop()))
        .into_props()
        .unwrap();
    let router = system.spawn("pool", props).unwrap();
    let mut results = Results::new();
    router.tell(results.work(0));
    results.next().await;
    let routees = resolve_routees(&system, "pool", 2);

    routees[0].tell(Job::Fail);
    within("routee-1 to stop", routees[0].terminated()).await;
    for id in 1..=4 {
        router.tell(results.work(id));
    }
    let handled = by_routee(&results.take(4).await);
    assert_eq!(handled.keys().collect::<Vec<_>>(), ["routee-2"]);

    routees[1].stop();
    within("routee-2 to stop", routees[1].terminated()).await;
    router.tell_from(results.work(5), routees[0].path());
    let dead = next_event(&mut dead_letters).await;
    assert_eq!(
        dead,
        DeadLetter {
            recipient: router.path().clone(),
            sender: Some(routees[0].path().clone()),
            message_type: std::any::type_name::<Job>(),
            reason: DeadLetterReason::NoRoutees,
        }
    );
    assert!(!router.is_terminated(), "the router itself keeps running");
    system.shutdown().await;
}
