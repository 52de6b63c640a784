//! Lifecycle: `pre_start`, `post_stop`, `stop_self`, stop from outside, poison pill, children
//! stopping before their parent, and system shutdown order.

#[path = "support/helpers.rs"]
mod helpers;

use std::time::Duration;

use helpers::{Blocker, LogTx, drain, gate, is_pending, log, position, record, within};
use tokio::time::Instant;
use troupe::{
    Actor, ActorError, ActorRef, ActorSystem, Context, DeadLetter, DeadLetterReason, Props,
    ReplyTo, SpawnError,
};

/// Records its lifecycle and every message in the log, prefixed by its path below the root.
struct Probe {
    log: LogTx,
    /// Children to spawn in `pre_start`.
    tree: Vec<Tree>,
}

#[derive(Clone)]
struct Tree {
    name: &'static str,
    children: Vec<Tree>,
}

fn leaf(name: &'static str) -> Tree {
    Tree {
        name,
        children: Vec::new(),
    }
}

fn node(name: &'static str, children: Vec<Tree>) -> Tree {
    Tree { name, children }
}

enum ProbeMsg {
    Record(u32),
    StopSelf,
    Block(Blocker),
    Ping(ReplyTo<()>),
}

impl Actor for Probe {
    type Msg = ProbeMsg;

    async fn pre_start(&mut self, ctx: &mut Context<Self>) -> Result<(), ActorError> {
        record(&self.log, format!("pre_start {}", ctx.path().elements()));
        for child in &self.tree {
            ctx.spawn(child.name, probe(&self.log, child.children.clone()))?;
        }
        Ok(())
    }

    async fn handle(&mut self, msg: ProbeMsg, ctx: &mut Context<Self>) -> Result<(), ActorError> {
        match msg {
            ProbeMsg::Record(n) => record(&self.log, format!("got {n}")),
            ProbeMsg::StopSelf => {
                record(&self.log, "stopping");
                ctx.stop_self();
            }
            ProbeMsg::Block(blocker) => blocker.block().await,
            ProbeMsg::Ping(reply) => reply.send(()),
        }
        Ok(())
    }

    async fn post_stop(&mut self, ctx: &mut Context<Self>) {
        let late = ctx.spawn("late", Props::new(|| Quiet));
        if !matches!(late, Err(SpawnError::ParentStopped { .. })) {
            record(
                &self.log,
                format!("spawn in post_stop was not refused: {late:?}"),
            );
        }
        record(&self.log, format!("post_stop {}", ctx.path().elements()));
    }
}

fn probe(log: &LogTx, tree: Vec<Tree>) -> Props<Probe> {
    let log = log.clone();
    Props::new(move || Probe {
        log: log.clone(),
        tree: tree.clone(),
    })
}

struct Quiet;

impl Actor for Quiet {
    type Msg = ();

    async fn handle(&mut self, _msg: (), _ctx: &mut Context<Self>) -> Result<(), ActorError> {
        Ok(())
    }
}

/// A `/system` actor that answers questions, even while `/user` is shutting down.
struct Infra;

enum InfraMsg {
    Question(ReplyTo<&'static str>),
}

impl Actor for Infra {
    type Msg = InfraMsg;

    async fn handle(&mut self, msg: InfraMsg, _ctx: &mut Context<Self>) -> Result<(), ActorError> {
        let InfraMsg::Question(reply) = msg;
        reply.send("answer");
        Ok(())
    }
}

/// A `/user` actor whose `post_stop` asks a `/system` actor.
struct Client {
    infra: ActorRef<InfraMsg>,
    log: LogTx,
}

impl Actor for Client {
    type Msg = ();

    async fn handle(&mut self, _msg: (), _ctx: &mut Context<Self>) -> Result<(), ActorError> {
        Ok(())
    }

    async fn post_stop(&mut self, _ctx: &mut Context<Self>) {
        let answer = self.infra.ask(InfraMsg::Question).await;
        record(&self.log, format!("client post_stop got {answer:?}"));
    }
}

#[tokio::test]
async fn pre_start_runs_before_the_first_message() {
    let system = ActorSystem::new("life").unwrap();
    let (tx, mut log) = log();
    let actor = system.spawn("probe", probe(&tx, Vec::new())).unwrap();
    actor.tell(ProbeMsg::Record(1));

    assert_eq!(log.take(2).await, ["pre_start /user/probe", "got 1"]);
    system.shutdown().await;
}

#[tokio::test]
async fn post_stop_runs_once_after_the_last_message_and_before_terminated_resolves() {
    let system = ActorSystem::new("life").unwrap();
    let (tx, mut log) = log();
    let actor = system.spawn("probe", probe(&tx, Vec::new())).unwrap();
    actor.tell(ProbeMsg::Record(1));
    actor.ask(ProbeMsg::Ping).await.unwrap();
    actor.stop();
    actor.stop();
    within("the probe to terminate", actor.terminated()).await;

    assert!(actor.is_terminated());
    assert_eq!(
        log.drain(),
        ["pre_start /user/probe", "got 1", "post_stop /user/probe"]
    );
    system.shutdown().await;
    assert!(log.drain().is_empty(), "post_stop ran again");
}

#[tokio::test]
async fn stop_self_stops_after_the_current_message_and_dead_letters_the_rest() {
    let system = ActorSystem::new("life").unwrap();
    let mut dead_letters = system.event_stream().subscribe::<DeadLetter>();
    let (tx, mut log) = log();
    let actor = system.spawn("probe", probe(&tx, Vec::new())).unwrap();
    actor.tell(ProbeMsg::Record(1));
    actor.tell(ProbeMsg::StopSelf);
    actor.tell(ProbeMsg::Record(2));
    actor.tell(ProbeMsg::Record(3));
    within("the probe to terminate", actor.terminated()).await;

    assert_eq!(
        log.drain(),
        [
            "pre_start /user/probe",
            "got 1",
            "stopping",
            "post_stop /user/probe"
        ]
    );
    let dead = drain(&mut dead_letters);
    assert_eq!(dead.len(), 2, "{dead:?}");
    for letter in dead {
        assert_eq!(letter.recipient, *actor.path());
        assert_eq!(letter.reason, DeadLetterReason::RecipientStopped);
        assert_eq!(letter.message_type, std::any::type_name::<ProbeMsg>());
    }
    system.shutdown().await;
}

#[tokio::test]
async fn stop_from_outside_takes_effect_after_the_current_message_and_dead_letters_the_queue() {
    let system = ActorSystem::new("life").unwrap();
    let mut dead_letters = system.event_stream().subscribe::<DeadLetter>();
    let (tx, mut log) = log();
    let actor = system.spawn("probe", probe(&tx, Vec::new())).unwrap();
    let (mut gate, blocker) = gate();
    actor.tell(ProbeMsg::Block(blocker));
    gate.entered().await;
    for n in 1..=3 {
        actor.tell(ProbeMsg::Record(n));
    }

    actor.stop();
    gate.open();
    within("the probe to terminate", actor.terminated()).await;

    assert_eq!(
        log.drain(),
        ["pre_start /user/probe", "post_stop /user/probe"]
    );
    let dead = drain(&mut dead_letters);
    assert_eq!(dead.len(), 3, "{dead:?}");
    assert!(
        dead.iter()
            .all(|d| d.reason == DeadLetterReason::RecipientStopped && d.recipient == *actor.path())
    );
    system.shutdown().await;
}

#[tokio::test]
async fn poison_pill_processes_everything_queued_before_it() {
    let system = ActorSystem::new("life").unwrap();
    let mut dead_letters = system.event_stream().subscribe::<DeadLetter>();
    let (tx, mut log) = log();
    let actor = system.spawn("probe", probe(&tx, Vec::new())).unwrap();
    for n in 1..=3 {
        actor.tell(ProbeMsg::Record(n));
    }
    actor.poison_pill();
    actor.tell(ProbeMsg::Record(4));
    within("the probe to terminate", actor.terminated()).await;

    assert_eq!(
        log.drain(),
        [
            "pre_start /user/probe",
            "got 1",
            "got 2",
            "got 3",
            "post_stop /user/probe"
        ]
    );
    let dead = drain(&mut dead_letters);
    assert_eq!(dead.len(), 1, "only the message after the pill: {dead:?}");
    assert_eq!(dead[0].reason, DeadLetterReason::RecipientStopped);
    assert_eq!(dead[0].message_type, std::any::type_name::<ProbeMsg>());
    system.shutdown().await;
}

#[tokio::test]
async fn poison_pill_through_an_untyped_ref_waits_behind_queued_messages_too() {
    let system = ActorSystem::new("life").unwrap();
    let (tx, mut log) = log();
    let actor = system.spawn("probe", probe(&tx, Vec::new())).unwrap();
    actor.tell(ProbeMsg::Record(1));
    actor.tell(ProbeMsg::Record(2));
    let any = actor.as_any();
    any.poison_pill();
    within("the probe to terminate", any.terminated()).await;

    assert_eq!(
        log.drain(),
        [
            "pre_start /user/probe",
            "got 1",
            "got 2",
            "post_stop /user/probe"
        ]
    );
    system.shutdown().await;
}

#[tokio::test]
async fn children_stop_before_parent_post_stop() {
    let system = ActorSystem::new("life").unwrap();
    let (tx, mut log) = log();
    let tree = vec![node("a", vec![leaf("a1"), leaf("a2")]), leaf("b")];
    let root = system.spawn("root", probe(&tx, tree)).unwrap();
    log.take(5).await; // every pre_start

    root.stop();
    within("the root to terminate", root.terminated()).await;
    let events = log.drain();
    assert_eq!(events.len(), 5, "{events:?}");
    let stopped = |path: &str| position(&events, &format!("post_stop /user/root{path}"));
    assert!(stopped("/a/a1") < stopped("/a"), "{events:?}");
    assert!(stopped("/a/a2") < stopped("/a"), "{events:?}");
    assert!(stopped("/a") < stopped(""), "{events:?}");
    assert!(stopped("/b") < stopped(""), "{events:?}");
    // The post_stop hooks also saw their own spawn attempts refused (or they would have logged).
    system.shutdown().await;
}

#[tokio::test]
async fn stopping_a_child_leaves_its_parent_and_siblings_running() {
    let system = ActorSystem::new("life").unwrap();
    let (tx, mut log) = log();
    let root = system
        .spawn("root", probe(&tx, vec![leaf("a"), leaf("b")]))
        .unwrap();
    log.take(3).await;
    let a = system.resolve::<ProbeMsg>("/user/root/a").unwrap();
    let b = system.resolve::<ProbeMsg>("/user/root/b").unwrap();

    a.stop();
    within("a to terminate", a.terminated()).await;
    root.ask(ProbeMsg::Ping).await.unwrap();
    b.ask(ProbeMsg::Ping).await.unwrap();
    assert_eq!(log.drain(), ["post_stop /user/root/a"]);
    system.shutdown().await;
}

#[tokio::test]
async fn shutdown_stops_user_before_system_and_children_before_parents_then_returns() {
    let system = ActorSystem::new("life").unwrap();
    let (tx, mut log) = log();
    let app = system
        .spawn("app", probe(&tx, vec![node("a", vec![leaf("a1")])]))
        .unwrap();
    let other = system.spawn("other", probe(&tx, Vec::new())).unwrap();
    let infra = system
        .spawn_system("infra", probe(&tx, vec![leaf("i1")]))
        .unwrap();
    log.take(6).await; // every pre_start
    let a1 = system.resolve_any("/user/app/a/a1").unwrap();
    let i1 = system.resolve_any("/system/infra/i1").unwrap();

    within("shutdown", system.shutdown()).await;

    // Everything has terminated by the time shutdown returns.
    for actor in [app.as_any(), other.as_any(), infra.as_any(), a1, i1] {
        assert!(actor.is_terminated(), "{actor:?} still running");
    }
    let events = log.drain();
    assert_eq!(events.len(), 6, "{events:?}");
    let stopped = |path: &str| position(&events, &format!("post_stop {path}"));
    for user in ["/user/app/a/a1", "/user/app/a", "/user/app", "/user/other"] {
        for internal in ["/system/infra/i1", "/system/infra"] {
            assert!(stopped(user) < stopped(internal), "{events:?}");
        }
    }
    assert!(
        stopped("/user/app/a/a1") < stopped("/user/app/a"),
        "{events:?}"
    );
    assert!(stopped("/user/app/a") < stopped("/user/app"), "{events:?}");
    assert!(
        stopped("/system/infra/i1") < stopped("/system/infra"),
        "{events:?}"
    );

    // A second shutdown and when_terminated return at once.
    within("a second shutdown", system.shutdown()).await;
    within("when_terminated", system.when_terminated()).await;
}

#[tokio::test]
async fn user_actors_can_still_ask_system_actors_from_post_stop_during_shutdown() {
    let system = ActorSystem::new("life").unwrap();
    let (tx, mut log) = log();
    let infra = system.spawn_system("infra", Props::new(|| Infra)).unwrap();
    let client_log = tx.clone();
    system
        .spawn(
            "client",
            Props::new(move || Client {
                infra: infra.clone(),
                log: client_log.clone(),
            }),
        )
        .unwrap();

    within("shutdown", system.shutdown()).await;
    assert_eq!(log.drain(), ["client post_stop got Ok(\"answer\")"]);
}

#[tokio::test]
async fn when_terminated_waits_for_a_shutdown_started_elsewhere() {
    let system = ActorSystem::new("life").unwrap();
    let (tx, mut log) = log();
    system.spawn("probe", probe(&tx, Vec::new())).unwrap();
    log.take(1).await;

    let mut waiter = std::pin::pin!(system.when_terminated());
    assert!(
        is_pending(waiter.as_mut()).await,
        "returned before any shutdown"
    );
    system.shutdown().await;
    within("when_terminated", waiter).await;
    assert_eq!(log.drain(), ["post_stop /user/probe"]);
}

/// Schedules messages to itself.
struct Timed {
    log: LogTx,
}

enum TimedMsg {
    Schedule { delay: Duration, tick: u32 },
    ScheduleThenCancel { delay: Duration, tick: u32 },
    Tick(u32),
}

impl Actor for Timed {
    type Msg = TimedMsg;

    async fn handle(&mut self, msg: TimedMsg, ctx: &mut Context<Self>) -> Result<(), ActorError> {
        match msg {
            TimedMsg::Schedule { delay, tick } => {
                ctx.schedule_once(delay, TimedMsg::Tick(tick));
            }
            TimedMsg::ScheduleThenCancel { delay, tick } => {
                ctx.schedule_once(delay, TimedMsg::Tick(tick)).cancel();
            }
            TimedMsg::Tick(tick) => record(&self.log, format!("tick {tick}")),
        }
        Ok(())
    }
}

fn timed(system: &ActorSystem, log: &LogTx) -> ActorRef<TimedMsg> {
    let log = log.clone();
    system
        .spawn("timed", Props::new(move || Timed { log: log.clone() }))
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn schedule_once_delivers_the_message_after_the_delay() {
    let system = ActorSystem::new("life").unwrap();
    let (tx, mut log) = log();
    let actor = timed(&system, &tx);
    let started = Instant::now();

    actor.tell(TimedMsg::Schedule {
        delay: Duration::from_secs(3),
        tick: 1,
    });
    assert_eq!(log.next().await, "tick 1");
    assert!(started.elapsed() >= Duration::from_secs(3));
    system.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_timer_sends_nothing() {
    let system = ActorSystem::new("life").unwrap();
    let (tx, mut log) = log();
    let actor = timed(&system, &tx);

    actor.tell(TimedMsg::ScheduleThenCancel {
        delay: Duration::from_secs(1),
        tick: 1,
    });
    actor.tell(TimedMsg::Schedule {
        delay: Duration::from_secs(2),
        tick: 2,
    });
    // The later timer firing shows the earlier deadline has passed.
    assert_eq!(log.next().await, "tick 2");
    assert!(log.drain().is_empty());
    system.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn pending_timers_are_cancelled_when_the_actor_stops() {
    let system = ActorSystem::new("life").unwrap();
    let (tx, mut log) = log();
    let actor = timed(&system, &tx);
    actor.tell(TimedMsg::Schedule {
        delay: Duration::from_secs(1),
        tick: 1,
    });
    actor.poison_pill();
    within("the timed actor to stop", actor.terminated()).await;

    // Let the deadline pass on the paused clock: a timer that still fired would produce a
    // RecipientStopped dead letter.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(system.dead_letters().count(), 0);
    assert!(log.drain().is_empty());
    system.shutdown().await;
}
