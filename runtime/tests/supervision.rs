//! Supervision: restart, stop and escalate; the restart budget; panics are failures, never
//! crashes.

#[path = "support/helpers.rs"]
mod helpers;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use helpers::{LogTx, drain, log, position, record, within};
use troupe::{
    Actor, ActorError, ActorRef, ActorSystem, Context, DeadLetter, DeadLetterReason, Props,
    ReplyTo, SupervisorStrategy,
};

/// How to build a [`Node`]: its supervision, its children, and how it misbehaves.
#[derive(Clone)]
struct Spec {
    strategy: SupervisorStrategy,
    children: Vec<(&'static str, Spec)>,
    /// `pre_start` fails for instances numbered up to this.
    fail_first_starts: u32,
    /// The factory panics every time.
    factory_panics: bool,
    /// `post_stop` panics.
    post_stop_panics: bool,
    /// How many instances the factory has built (shared by every incarnation at the path).
    built: Arc<AtomicU32>,
}

impl Spec {
    fn new(strategy: SupervisorStrategy) -> Self {
        Self {
            strategy,
            children: Vec::new(),
            fail_first_starts: 0,
            factory_panics: false,
            post_stop_panics: false,
            built: Arc::new(AtomicU32::new(0)),
        }
    }

    fn child(mut self, name: &'static str, spec: Spec) -> Self {
        self.children.push((name, spec));
        self
    }

    fn built(&self) -> u32 {
        self.built.load(Ordering::SeqCst)
    }
}

/// Counts, fails on request, logs `"<path> pre_start #<instance>"` and `"... post_stop #..."`.
struct Node {
    spec: Spec,
    instance: u32,
    count: u32,
    log: LogTx,
}

enum NodeMsg {
    Incr,
    /// Reply with (instance, count).
    Get(ReplyTo<(u32, u32)>),
    Fail,
    Panic,
}

impl Actor for Node {
    type Msg = NodeMsg;

    async fn pre_start(&mut self, ctx: &mut Context<Self>) -> Result<(), ActorError> {
        record(
            &self.log,
            format!("{} pre_start #{}", ctx.path().elements(), self.instance),
        );
        if self.instance <= self.spec.fail_first_starts {
            return Err(format!("pre_start #{} fails", self.instance).into());
        }
        for (name, spec) in &self.spec.children {
            ctx.spawn(name, node(spec.clone(), &self.log))?;
        }
        Ok(())
    }

    async fn handle(&mut self, msg: NodeMsg, _ctx: &mut Context<Self>) -> Result<(), ActorError> {
        match msg {
            NodeMsg::Incr => self.count += 1,
            NodeMsg::Get(reply) => reply.send((self.instance, self.count)),
            NodeMsg::Fail => return Err("asked to fail".into()),
            NodeMsg::Panic => panic!("asked to panic"),
        }
        Ok(())
    }

    async fn post_stop(&mut self, ctx: &mut Context<Self>) {
        record(
            &self.log,
            format!("{} post_stop #{}", ctx.path().elements(), self.instance),
        );
        if self.spec.post_stop_panics {
            panic!("post_stop panics");
        }
    }
}

fn node(spec: Spec, log: &LogTx) -> Props<Node> {
    let log = log.clone();
    let strategy = spec.strategy;
    Props::new(move || {
        let instance = spec.built.fetch_add(1, Ordering::SeqCst) + 1;
        assert!(!spec.factory_panics, "factory panics (instance {instance})");
        Node {
            spec: spec.clone(),
            instance,
            count: 0,
            log: log.clone(),
        }
    })
    .with_supervisor(strategy)
}

async fn get(actor: &ActorRef<NodeMsg>) -> (u32, u32) {
    within("the node to answer", actor.ask(NodeMsg::Get))
        .await
        .expect("the node answers")
}

#[tokio::test]
async fn restart_creates_a_fresh_instance_via_the_factory_and_runs_pre_start_again() {
    let system = ActorSystem::new("sup").unwrap();
    let (tx, mut log) = log();
    let spec = Spec::new(SupervisorStrategy::restart());
    let actor = system.spawn("worker", node(spec.clone(), &tx)).unwrap();
    actor.tell(NodeMsg::Incr);
    actor.tell(NodeMsg::Incr);
    assert_eq!(get(&actor).await, (1, 2));

    actor.tell(NodeMsg::Fail);
    assert_eq!(
        get(&actor).await,
        (2, 0),
        "state comes from a fresh instance"
    );
    assert_eq!(spec.built(), 2);
    assert_eq!(
        log.drain(),
        [
            "/user/worker pre_start #1",
            "/user/worker post_stop #1",
            "/user/worker pre_start #2"
        ]
    );
    assert!(!actor.is_terminated());
    system.shutdown().await;
}

#[tokio::test]
async fn restart_keeps_the_mailbox_and_does_not_retry_the_failed_message() {
    let system = ActorSystem::new("sup").unwrap();
    let (tx, _log) = log();
    let mut dead_letters = system.event_stream().subscribe::<DeadLetter>();
    let actor = system
        .spawn(
            "worker",
            node(Spec::new(SupervisorStrategy::restart()), &tx),
        )
        .unwrap();
    actor.tell(NodeMsg::Incr);
    actor.tell(NodeMsg::Fail);
    actor.tell(NodeMsg::Incr);
    actor.tell(NodeMsg::Incr);

    // Two increments queued behind the failure reach the new instance; the failure is not
    // replayed (that would restart again).
    assert_eq!(get(&actor).await, (2, 2));
    assert!(drain(&mut dead_letters).is_empty());
    system.shutdown().await;
}

#[tokio::test]
async fn a_panic_in_a_handler_is_caught_and_handled_by_supervision() {
    let system = ActorSystem::new("sup").unwrap();
    let (tx, _log) = log();
    let actor = system
        .spawn(
            "worker",
            node(Spec::new(SupervisorStrategy::restart()), &tx),
        )
        .unwrap();
    let bystander = system
        .spawn(
            "bystander",
            node(Spec::new(SupervisorStrategy::restart()), &tx),
        )
        .unwrap();
    actor.tell(NodeMsg::Incr);

    actor.tell(NodeMsg::Panic);
    assert_eq!(get(&actor).await, (2, 0));
    actor.tell(NodeMsg::Panic);
    assert_eq!(get(&actor).await, (3, 0));
    assert_eq!(get(&bystander).await, (1, 0));
    system.shutdown().await;
}

#[tokio::test]
async fn the_stop_strategy_stops_the_actor_on_its_first_failure_and_dead_letters_its_queue() {
    let system = ActorSystem::new("sup").unwrap();
    let (tx, mut log) = log();
    let mut dead_letters = system.event_stream().subscribe::<DeadLetter>();
    let spec = Spec::new(SupervisorStrategy::stop());
    let actor = system.spawn("worker", node(spec.clone(), &tx)).unwrap();
    actor.tell(NodeMsg::Fail);
    actor.tell(NodeMsg::Incr);
    actor.tell(NodeMsg::Incr);

    within("the worker to stop", actor.terminated()).await;
    assert_eq!(spec.built(), 1, "no restart");
    assert_eq!(
        log.drain(),
        ["/user/worker pre_start #1", "/user/worker post_stop #1"]
    );
    let dead = drain(&mut dead_letters);
    assert_eq!(dead.len(), 2, "{dead:?}");
    assert!(
        dead.iter()
            .all(|d| d.reason == DeadLetterReason::RecipientStopped)
    );
    system.shutdown().await;
}

#[tokio::test]
async fn a_panic_under_the_stop_strategy_stops_only_the_panicking_actor() {
    let system = ActorSystem::new("sup").unwrap();
    let (tx, _log) = log();
    let actor = system
        .spawn("worker", node(Spec::new(SupervisorStrategy::stop()), &tx))
        .unwrap();
    let bystander = system
        .spawn(
            "bystander",
            node(Spec::new(SupervisorStrategy::stop()), &tx),
        )
        .unwrap();

    actor.tell(NodeMsg::Panic);
    within("the worker to stop", actor.terminated()).await;
    assert_eq!(get(&bystander).await, (1, 0));
    // The system still spawns and runs actors.
    let fresh = system
        .spawn("fresh", node(Spec::new(SupervisorStrategy::stop()), &tx))
        .unwrap();
    assert_eq!(get(&fresh).await, (1, 0));
    system.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn exhausting_the_restart_budget_stops_the_child() {
    let system = ActorSystem::new("sup").unwrap();
    let (tx, mut log) = log();
    let spec =
        Spec::new(SupervisorStrategy::restart().with_restart_budget(3, Duration::from_secs(60)));
    let actor = system.spawn("worker", node(spec.clone(), &tx)).unwrap();
    for _ in 0..3 {
        actor.tell(NodeMsg::Fail);
    }
    assert_eq!(
        get(&actor).await,
        (4, 0),
        "three restarts are within budget"
    );

    actor.tell(NodeMsg::Fail);
    within("the worker to stop", actor.terminated()).await;
    assert_eq!(
        spec.built(),
        4,
        "the fourth failure stopped instead of restarting"
    );
    let events = log.drain();
    assert_eq!(events.len(), 8, "{events:?}");
    assert_eq!(events.last().unwrap(), "/user/worker post_stop #4");
    system.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn restarts_older_than_the_window_no_longer_count_against_the_budget() {
    let system = ActorSystem::new("sup").unwrap();
    let (tx, _log) = log();
    let spec =
        Spec::new(SupervisorStrategy::restart().with_restart_budget(2, Duration::from_secs(10)));
    let actor = system.spawn("worker", node(spec.clone(), &tx)).unwrap();
    actor.tell(NodeMsg::Fail);
    actor.tell(NodeMsg::Fail);
    assert_eq!(get(&actor).await, (3, 0), "budget of two used up");

    tokio::time::advance(Duration::from_secs(10)).await;
    actor.tell(NodeMsg::Fail);
    actor.tell(NodeMsg::Fail);
    assert_eq!(
        get(&actor).await,
        (5, 0),
        "the window moved on: two more restarts"
    );

    actor.tell(NodeMsg::Fail);
    within("the worker to stop", actor.terminated()).await;
    assert_eq!(spec.built(), 5);
    system.shutdown().await;
}

#[tokio::test]
async fn a_failing_pre_start_is_supervised_and_retried_with_a_fresh_instance() {
    let system = ActorSystem::new("sup").unwrap();
    let (tx, mut log) = log();
    let mut spec = Spec::new(SupervisorStrategy::restart());
    spec.fail_first_starts = 2;
    let actor = system.spawn("worker", node(spec.clone(), &tx)).unwrap();

    assert_eq!(get(&actor).await, (3, 0));
    assert_eq!(
        log.drain(),
        [
            "/user/worker pre_start #1",
            "/user/worker post_stop #1",
            "/user/worker pre_start #2",
            "/user/worker post_stop #2",
            "/user/worker pre_start #3"
        ]
    );
    system.shutdown().await;
}

#[tokio::test]
async fn a_factory_that_always_panics_stops_the_actor_once_the_budget_is_spent() {
    let system = ActorSystem::new("sup").unwrap();
    let (tx, mut log) = log();
    let mut spec =
        Spec::new(SupervisorStrategy::restart().with_restart_budget(2, Duration::from_secs(60)));
    spec.factory_panics = true;
    let actor = system.spawn("worker", node(spec.clone(), &tx)).unwrap();

    within("the worker to stop", actor.terminated()).await;
    assert_eq!(spec.built(), 3, "first build plus two restarts");
    assert!(log.drain().is_empty(), "no instance ever started");
    system.shutdown().await;
}

#[tokio::test]
async fn a_panic_in_post_stop_is_contained_and_the_actor_still_terminates() {
    let system = ActorSystem::new("sup").unwrap();
    let (tx, mut log) = log();
    let mut spec = Spec::new(SupervisorStrategy::restart());
    spec.post_stop_panics = true;
    let actor = system.spawn("worker", node(spec, &tx)).unwrap();
    // post_stop of the failed instance panics during the restart, too.
    actor.tell(NodeMsg::Fail);
    assert_eq!(get(&actor).await, (2, 0));

    actor.stop();
    within("the worker to terminate", actor.terminated()).await;
    assert_eq!(
        log.drain(),
        [
            "/user/worker pre_start #1",
            "/user/worker post_stop #1",
            "/user/worker pre_start #2",
            "/user/worker post_stop #2"
        ]
    );
    system.shutdown().await;
}

#[tokio::test]
async fn restart_stops_the_children_before_the_fresh_instance_starts() {
    let system = ActorSystem::new("sup").unwrap();
    let (tx, mut log) = log();
    let spec = Spec::new(SupervisorStrategy::restart())
        .child("kid", Spec::new(SupervisorStrategy::restart()));
    let parent = system.spawn("parent", node(spec, &tx)).unwrap();
    log.take(2).await;
    let old_kid = system.resolve::<NodeMsg>("/user/parent/kid").unwrap();

    parent.tell(NodeMsg::Fail);
    assert_eq!(get(&parent).await, (2, 0));
    assert!(old_kid.is_terminated());
    assert_eq!(
        log.take(4).await,
        [
            "/user/parent/kid post_stop #1",
            "/user/parent post_stop #1",
            "/user/parent pre_start #2",
            "/user/parent/kid pre_start #2"
        ]
    );
    let new_kid = system.resolve::<NodeMsg>("/user/parent/kid").unwrap();
    assert_ne!(new_kid.id(), old_kid.id());
    system.shutdown().await;
}

#[tokio::test]
async fn escalate_fails_the_parent_and_a_restarting_parent_restarts() {
    let system = ActorSystem::new("sup").unwrap();
    let (tx, mut log) = log();
    let kid_spec = Spec::new(SupervisorStrategy::escalate());
    let parent_spec = Spec::new(SupervisorStrategy::restart()).child("kid", kid_spec.clone());
    let parent = system
        .spawn("parent", node(parent_spec.clone(), &tx))
        .unwrap();
    log.take(2).await;
    let kid = system.resolve::<NodeMsg>("/user/parent/kid").unwrap();
    parent.tell(NodeMsg::Incr);
    assert_eq!(get(&parent).await, (1, 1));

    kid.tell(NodeMsg::Fail);
    assert_eq!(
        log.take(4).await,
        [
            "/user/parent/kid post_stop #1",
            "/user/parent post_stop #1",
            "/user/parent pre_start #2",
            "/user/parent/kid pre_start #2"
        ]
    );
    assert!(kid.is_terminated());
    assert_eq!(get(&parent).await, (2, 0), "the parent was restarted");
    assert_eq!(parent_spec.built(), 2);
    system.shutdown().await;
}

#[tokio::test]
async fn escalate_to_a_parent_with_the_stop_strategy_stops_the_parent() {
    let system = ActorSystem::new("sup").unwrap();
    let (tx, mut log) = log();
    let parent_spec = Spec::new(SupervisorStrategy::stop())
        .child("kid", Spec::new(SupervisorStrategy::escalate()));
    let parent = system
        .spawn("parent", node(parent_spec.clone(), &tx))
        .unwrap();
    log.take(2).await;
    let kid = system.resolve::<NodeMsg>("/user/parent/kid").unwrap();

    kid.tell(NodeMsg::Fail);
    within("the parent to stop", parent.terminated()).await;
    assert!(kid.is_terminated());
    assert_eq!(parent_spec.built(), 1);
    assert_eq!(
        log.drain(),
        ["/user/parent/kid post_stop #1", "/user/parent post_stop #1"]
    );
    system.shutdown().await;
}

#[tokio::test]
async fn escalation_travels_up_through_escalating_parents() {
    let system = ActorSystem::new("sup").unwrap();
    let (tx, mut log) = log();
    let top_spec = Spec::new(SupervisorStrategy::restart()).child(
        "mid",
        Spec::new(SupervisorStrategy::escalate())
            .child("leaf", Spec::new(SupervisorStrategy::escalate())),
    );
    let top = system.spawn("top", node(top_spec.clone(), &tx)).unwrap();
    log.take(3).await;
    let leaf = system.resolve::<NodeMsg>("/user/top/mid/leaf").unwrap();

    leaf.tell(NodeMsg::Fail);
    let events = log.take(6).await;
    let at = |event: &str| position(&events, event);
    assert!(at("/user/top/mid/leaf post_stop #1") < at("/user/top/mid post_stop #1"));
    assert!(at("/user/top/mid post_stop #1") < at("/user/top post_stop #1"));
    assert!(at("/user/top post_stop #1") < at("/user/top pre_start #2"));
    assert!(at("/user/top pre_start #2") < at("/user/top/mid pre_start #2"));
    assert!(at("/user/top/mid pre_start #2") < at("/user/top/mid/leaf pre_start #2"));
    assert_eq!(get(&top).await, (2, 0));
    assert_eq!(top_spec.built(), 2);
    system.shutdown().await;
}

#[tokio::test]
async fn escalation_from_a_top_level_actor_stops_only_that_actor() {
    let system = ActorSystem::new("sup").unwrap();
    let (tx, _log) = log();
    let failing = system
        .spawn(
            "failing",
            node(Spec::new(SupervisorStrategy::escalate()), &tx),
        )
        .unwrap();
    let sibling = system
        .spawn(
            "sibling",
            node(Spec::new(SupervisorStrategy::restart()), &tx),
        )
        .unwrap();
    sibling.tell(NodeMsg::Incr);

    failing.tell(NodeMsg::Fail);
    within("the failing actor to stop", failing.terminated()).await;
    assert_eq!(
        get(&sibling).await,
        (1, 1),
        "the sibling was neither stopped nor restarted"
    );
    system
        .spawn("after", node(Spec::new(SupervisorStrategy::restart()), &tx))
        .expect("the user guardian still accepts children");
    system.shutdown().await;
}
