//! Death watch: `Terminated` exactly once per watched incarnation, `unwatch` suppresses it.

#[path = "support/helpers.rs"]
mod helpers;

use helpers::{Blocker, gate, within};
use tokio::sync::mpsc;
use troupe::{
    Actor, ActorError, ActorRef, ActorSystem, AnyActorRef, Context, Props, ReplyTo,
    SupervisorStrategy, Terminated,
};

/// Watches what it is told to and reports every `Terminated` it gets.
struct Watcher {
    seen: mpsc::UnboundedSender<Terminated>,
}

enum WatcherMsg {
    /// Call `ctx.watch` this many times.
    Watch(AnyActorRef, usize),
    Unwatch(AnyActorRef),
    /// Watch and unwatch in one handler invocation.
    WatchThenUnwatch(AnyActorRef),
    /// Block until the gate opens, then unwatch.
    BlockThenUnwatch(Blocker, AnyActorRef),
    Ping(ReplyTo<()>),
}

impl Actor for Watcher {
    type Msg = WatcherMsg;

    async fn handle(&mut self, msg: WatcherMsg, ctx: &mut Context<Self>) -> Result<(), ActorError> {
        match msg {
            WatcherMsg::Watch(target, times) => {
                for _ in 0..times {
                    ctx.watch(&target);
                }
            }
            WatcherMsg::Unwatch(target) => ctx.unwatch(&target),
            WatcherMsg::WatchThenUnwatch(target) => {
                ctx.watch(&target);
                ctx.unwatch(&target);
            }
            WatcherMsg::BlockThenUnwatch(blocker, target) => {
                blocker.block().await;
                ctx.unwatch(&target);
            }
            WatcherMsg::Ping(reply) => reply.send(()),
        }
        Ok(())
    }

    async fn on_terminated(
        &mut self,
        terminated: Terminated,
        _ctx: &mut Context<Self>,
    ) -> Result<(), ActorError> {
        let _ = self.seen.send(terminated);
        Ok(())
    }
}

/// Something to watch; fails on request.
struct Target;

enum TargetMsg {
    Fail,
    Ping(ReplyTo<()>),
}

impl Actor for Target {
    type Msg = TargetMsg;

    async fn handle(&mut self, msg: TargetMsg, _ctx: &mut Context<Self>) -> Result<(), ActorError> {
        match msg {
            TargetMsg::Fail => Err("asked to fail".into()),
            TargetMsg::Ping(reply) => {
                reply.send(());
                Ok(())
            }
        }
    }
}

struct Fixture {
    system: ActorSystem,
    watcher: ActorRef<WatcherMsg>,
    seen: mpsc::UnboundedReceiver<Terminated>,
    target: ActorRef<TargetMsg>,
}

fn fixture(target: Props<Target>) -> Fixture {
    let system = ActorSystem::new("watch").unwrap();
    let (tx, seen) = mpsc::unbounded_channel();
    let watcher = system
        .spawn("watcher", Props::new(move || Watcher { seen: tx.clone() }))
        .unwrap();
    let target = system.spawn("target", target).unwrap();
    Fixture {
        system,
        watcher,
        seen,
        target,
    }
}

impl Fixture {
    /// Wait until the watcher has handled everything sent to it so far, including any
    /// `Terminated` already queued (system messages are served before the ping).
    async fn settle(&self) {
        within("the watcher to answer", self.watcher.ask(WatcherMsg::Ping))
            .await
            .unwrap();
    }

    fn watch(&self, times: usize) {
        self.watcher
            .tell(WatcherMsg::Watch(self.target.as_any(), times));
    }

    async fn stop_target(&self) {
        self.target.stop();
        within("the target to terminate", self.target.terminated()).await;
    }

    fn seen(&mut self) -> Vec<Terminated> {
        let mut seen = Vec::new();
        while let Ok(terminated) = self.seen.try_recv() {
            seen.push(terminated);
        }
        seen
    }

    fn expected(&self) -> Terminated {
        Terminated {
            path: self.target.path().clone(),
            id: self.target.id(),
        }
    }
}

#[tokio::test]
async fn watching_delivers_terminated_once_naming_the_dead_incarnation() {
    let mut f = fixture(Props::new(|| Target));
    f.watch(1);
    f.settle().await;

    f.stop_target().await;
    f.settle().await;
    assert_eq!(f.seen(), [f.expected()]);
    f.system.shutdown().await;
}

#[tokio::test]
async fn watching_twice_still_delivers_terminated_once() {
    let mut f = fixture(Props::new(|| Target));
    f.watch(2);
    f.watch(1);
    f.settle().await;

    f.stop_target().await;
    f.settle().await;
    assert_eq!(f.seen(), [f.expected()]);
    f.system.shutdown().await;
}

#[tokio::test]
async fn watching_an_already_dead_actor_delivers_terminated_once() {
    let mut f = fixture(Props::new(|| Target));
    f.stop_target().await;

    f.watch(2);
    f.settle().await;
    assert_eq!(f.seen(), [f.expected()]);
    f.system.shutdown().await;
}

#[tokio::test]
async fn a_new_watch_after_terminated_was_handled_is_answered_again_once() {
    // As in Akka: handling Terminated ends the watch, so watching again is a new watch, and a
    // watch of a dead actor is answered with Terminated.
    let mut f = fixture(Props::new(|| Target));
    f.watch(1);
    f.settle().await;
    f.stop_target().await;
    f.settle().await;
    assert_eq!(f.seen(), [f.expected()]);

    f.watch(2);
    f.settle().await;
    assert_eq!(f.seen(), [f.expected()]);
    f.system.shutdown().await;
}

#[tokio::test]
async fn unwatch_before_the_target_dies_suppresses_terminated() {
    let mut f = fixture(Props::new(|| Target));
    f.watch(1);
    f.watcher.tell(WatcherMsg::Unwatch(f.target.as_any()));
    f.settle().await;

    f.stop_target().await;
    f.settle().await;
    assert_eq!(f.seen(), []);
    f.system.shutdown().await;
}

#[tokio::test]
async fn unwatch_suppresses_a_terminated_that_is_already_queued() {
    let mut f = fixture(Props::new(|| Target));
    f.watch(1);
    let (mut gate, blocker) = gate();
    f.watcher
        .tell(WatcherMsg::BlockThenUnwatch(blocker, f.target.as_any()));
    gate.entered().await;

    // The target dies while the watcher is busy: its Terminated waits in the mailbox.
    f.stop_target().await;
    gate.open();
    f.settle().await;
    assert_eq!(f.seen(), []);
    f.system.shutdown().await;
}

#[tokio::test]
async fn unwatch_in_the_same_turn_as_watching_a_dead_actor_suppresses_terminated() {
    let mut f = fixture(Props::new(|| Target));
    f.stop_target().await;

    // The watch is answered with Terminated at once; the unwatch right after must cancel it.
    f.watcher
        .tell(WatcherMsg::WatchThenUnwatch(f.target.as_any()));
    f.settle().await;
    assert_eq!(f.seen(), []);
    f.system.shutdown().await;
}

#[tokio::test]
async fn every_watcher_gets_its_own_terminated_once() {
    let mut f = fixture(Props::new(|| Target));
    let (tx, mut second_seen) = mpsc::unbounded_channel();
    let second = f
        .system
        .spawn("second", Props::new(move || Watcher { seen: tx.clone() }))
        .unwrap();
    f.watch(1);
    second.tell(WatcherMsg::Watch(f.target.as_any(), 1));
    f.settle().await;
    second.ask(WatcherMsg::Ping).await.unwrap();

    f.stop_target().await;
    f.settle().await;
    second.ask(WatcherMsg::Ping).await.unwrap();
    assert_eq!(f.seen(), [f.expected()]);
    assert_eq!(second_seen.try_recv().ok(), Some(f.expected()));
    assert!(second_seen.try_recv().is_err());
    f.system.shutdown().await;
}

#[tokio::test]
async fn a_restart_is_not_a_termination_for_watchers() {
    let mut f = fixture(Props::new(|| Target).with_supervisor(SupervisorStrategy::restart()));
    f.watch(1);
    f.settle().await;

    f.target.tell(TargetMsg::Fail);
    f.target.ask(TargetMsg::Ping).await.unwrap();
    f.settle().await;
    assert_eq!(f.seen(), [], "a restart delivered Terminated");
    assert!(!f.target.is_terminated());

    f.stop_target().await;
    f.settle().await;
    assert_eq!(f.seen(), [f.expected()]);
    f.system.shutdown().await;
}

#[tokio::test]
async fn a_target_stopped_by_its_supervisor_delivers_terminated() {
    let mut f = fixture(Props::new(|| Target).with_supervisor(SupervisorStrategy::stop()));
    f.watch(1);
    f.settle().await;

    f.target.tell(TargetMsg::Fail);
    within("the failed target to terminate", f.target.terminated()).await;
    f.settle().await;
    assert_eq!(f.seen(), [f.expected()]);
    f.system.shutdown().await;
}

#[tokio::test]
async fn a_new_actor_at_a_watched_path_is_not_covered_by_the_old_watch() {
    let mut f = fixture(Props::new(|| Target));
    f.watch(1);
    f.settle().await;
    f.stop_target().await;
    f.settle().await;
    assert_eq!(f.seen(), [f.expected()]);

    let reborn = f.system.spawn("target", Props::new(|| Target)).unwrap();
    assert_ne!(reborn.id(), f.target.id());
    reborn.stop();
    within("the new target to terminate", reborn.terminated()).await;
    f.settle().await;
    assert_eq!(f.seen(), []);
    f.system.shutdown().await;
}

/// Respawns its target under the same name as soon as it learns of its termination.
struct Respawner {
    target: Option<troupe::ActorRef<()>>,
    done: Option<tokio::sync::oneshot::Sender<Result<(), troupe::SpawnError>>>,
}

struct Quiet;

impl troupe::Actor for Quiet {
    type Msg = ();

    async fn handle(
        &mut self,
        _msg: (),
        _ctx: &mut troupe::Context<Self>,
    ) -> Result<(), troupe::ActorError> {
        Ok(())
    }
}

impl troupe::Actor for Respawner {
    type Msg = ();

    async fn pre_start(
        &mut self,
        ctx: &mut troupe::Context<Self>,
    ) -> Result<(), troupe::ActorError> {
        let target = ctx.spawn("child", troupe::Props::new(|| Quiet))?;
        ctx.watch(&target);
        self.target = Some(target);
        Ok(())
    }

    async fn handle(
        &mut self,
        _msg: (),
        _ctx: &mut troupe::Context<Self>,
    ) -> Result<(), troupe::ActorError> {
        if let Some(target) = &self.target {
            target.stop();
        }
        Ok(())
    }

    async fn on_terminated(
        &mut self,
        _t: troupe::Terminated,
        ctx: &mut troupe::Context<Self>,
    ) -> Result<(), troupe::ActorError> {
        let result = ctx.spawn("child", troupe::Props::new(|| Quiet)).map(|_| ());
        if let Some(done) = self.done.take() {
            let _ = done.send(result);
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_can_respawn_at_the_same_name_as_soon_as_terminated_arrives() {
    let system = troupe::ActorSystem::new("respawn").unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let mut done = Some(tx);
    let parent = system
        .spawn(
            "parent",
            troupe::Props::new(move || Respawner {
                target: None,
                done: done.take(),
            }),
        )
        .unwrap();
    parent.tell(());
    let result = tokio::time::timeout(std::time::Duration::from_secs(10), rx)
        .await
        .unwrap()
        .unwrap();
    assert!(result.is_ok(), "the name was still taken: {result:?}");
    system.shutdown().await;
}
