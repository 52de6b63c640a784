//! The task that runs one actor: its message loop, supervision and termination sequence.
//!
//! # Termination sequence
//! 1. No more user messages are taken; new children are refused.
//! 2. Every child is told to stop; the loop serves only system messages until all children
//!    have terminated.
//! 3. `post_stop` runs (a panic in it is logged, not propagated).
//! 4. The mailbox closes: queued user messages become dead letters; watch requests that raced
//!    the close are answered with `Terminated`.
//! 5. The actor leaves its parent's children (freeing the name) and tells a parent that
//!    waits for it; then watchers receive `Terminated` (so a watcher may respawn at the same
//!    path at once); waiters on `terminated()` are released.
//!
//! # The current actor
//! The whole task runs with the actor's path as a task-local value, so a `tell` made while it
//! runs (in a hook or a handler, before or after an `.await`) names the actor as its sender
//! ([`current_actor_path`]). Tasks the actor spawns do not inherit it: they are not the actor.

use std::future::{Future, poll_fn};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures_util::FutureExt;

use crate::actor::{Actor, ActorError, Failure};
use crate::cell::{AnyCell, Cell, Envelope, SystemMsg, Watcher};
use crate::context::Context;
use crate::dead_letter::DeadLetterReason;
use crate::death_watch::Terminated;
use crate::mailbox::Next;
use crate::props::Props;
use crate::supervision::{Directive, RestartHistory, decide};

async fn guarded<F>(future: F) -> Result<(), Failure>
where
    F: Future<Output = Result<(), ActorError>>,
{
    match AssertUnwindSafe(future).catch_unwind().await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(error)) => Err(Failure::Error(error)),
        Err(panic) => Err(Failure::from_panic(panic)),
    }
}

fn build<A: Actor>(props: &mut Props<A>) -> Result<A, Failure> {
    std::panic::catch_unwind(AssertUnwindSafe(|| (props.factory)())).map_err(Failure::from_panic)
}

/// What the loop does after a failure was resolved.
enum AfterFailure {
    Continue,
    Stop,
}

#[derive(Default)]
struct Rare {
    history: RestartHistory,
    /// System messages that arrived while waiting for children during a restart.
    deferred: std::collections::VecDeque<SystemMsg>,
}

struct Runner<A: Actor> {
    cell: Arc<Cell<A::Msg>>,
    props: Props<A>,
    parent: Option<Arc<dyn AnyCell>>,
    guardian: bool,
    ctx: Context<A>,
    actor: Option<A>,
    watchers: Vec<Arc<dyn Watcher>>,
    /// State only failures need; boxed on first use so an idle actor stays small.
    rare: Option<Box<Rare>>,
}

tokio::task_local! {
    /// The path of the actor whose task is running.
    static CURRENT_ACTOR: crate::path::ActorPath;
}

/// The path of the actor whose task is running now (its hooks and handlers), or `None` outside
/// any actor: the sender a plain `tell` names.
#[inline]
pub(crate) fn current_actor_path() -> Option<crate::path::ActorPath> {
    CURRENT_ACTOR.try_with(Clone::clone).ok()
}

pub(crate) fn run<A: Actor>(
    cell: Arc<Cell<A::Msg>>,
    props: Props<A>,
    parent: Option<Arc<dyn AnyCell>>,
    guardian: bool,
) -> impl Future<Output = ()> + Send {
    let ctx = Context::new(Arc::clone(&cell));
    let path = cell.path.clone();
    let mut runner = Runner {
        cell,
        props,
        parent,
        guardian,
        ctx,
        actor: None,
        watchers: Vec::new(),
        rare: None,
    };
    // An async block, not an `async fn(self)`: the latter would store the runner twice.
    CURRENT_ACTOR.scope(path, async move {
        runner.live().await;
        Box::pin(runner.terminate()).await;
    })
}

impl<A: Actor> Runner<A> {
    /// Start the actor and serve messages until it is to stop.
    async fn live(&mut self) {
        // Rare paths are boxed so the actor's task stays small while it idles.
        if let AfterFailure::Stop = Box::pin(self.start_instance()).await {
            return;
        }
        loop {
            if self.ctx.stop_requested {
                return;
            }
            if let Some(message) = self
                .rare
                .as_mut()
                .and_then(|rare| rare.deferred.pop_front())
            {
                if let AfterFailure::Stop = Box::pin(self.on_system(message)).await {
                    return;
                }
                continue;
            }
            let next = poll_fn(|cx| self.cell.mailbox.poll_next(cx, true)).await;
            let outcome = match next {
                Next::User(Envelope::Message { message, sender }) => {
                    self.ctx.sender = sender;
                    let actor = self.actor.as_mut().expect("a live actor has an instance");
                    let result = guarded(actor.handle(message, &mut self.ctx)).await;
                    self.ctx.sender = None;
                    match result {
                        Ok(()) => AfterFailure::Continue,
                        Err(failure) => Box::pin(self.on_failure(failure)).await,
                    }
                }
                Next::User(Envelope::PoisonPill) => AfterFailure::Stop,
                Next::System(message) => Box::pin(self.on_system(message)).await,
            };
            if let AfterFailure::Stop = outcome {
                return;
            }
        }
    }

    /// Build an instance and run `pre_start`, resolving failures until one starts or the
    /// supervisor gives up.
    async fn start_instance(&mut self) -> AfterFailure {
        loop {
            let failure = match build(&mut self.props) {
                Ok(actor) => {
                    let actor = self.actor.insert(actor);
                    match guarded(actor.pre_start(&mut self.ctx)).await {
                        Ok(()) => return AfterFailure::Continue,
                        Err(failure) => failure,
                    }
                }
                Err(failure) => failure,
            };
            match self.resolve_failure(failure).await {
                Some(Directive::Restart) => {}
                _ => return AfterFailure::Stop,
            }
        }
    }

    async fn on_system(&mut self, message: SystemMsg) -> AfterFailure {
        match message {
            SystemMsg::Stop => AfterFailure::Stop,
            SystemMsg::Watch(watcher) => {
                if !self
                    .watchers
                    .iter()
                    .any(|w| w.watcher_id() == watcher.watcher_id())
                {
                    self.watchers.push(watcher);
                }
                AfterFailure::Continue
            }
            SystemMsg::Unwatch(id) => {
                self.watchers.retain(|w| w.watcher_id() != id);
                AfterFailure::Continue
            }
            SystemMsg::Terminated(terminated) => {
                if !self.ctx.forget_watched(terminated.id) {
                    return AfterFailure::Continue;
                }
                let actor = self.actor.as_mut().expect("a live actor has an instance");
                match guarded(actor.on_terminated(terminated, &mut self.ctx)).await {
                    Ok(()) => AfterFailure::Continue,
                    Err(failure) => self.on_failure(failure).await,
                }
            }
            SystemMsg::ChildTerminated => AfterFailure::Continue,
            SystemMsg::ChildFailed { child, cause } => {
                if self.guardian {
                    tracing::error!(%child, %cause, "top-level actor escalated a failure; it has stopped");
                    return AfterFailure::Continue;
                }
                self.on_failure(Failure::Escalated { child, cause }).await
            }
        }
    }

    /// Apply the supervisor strategy to a failure of the running instance.
    async fn on_failure(&mut self, failure: Failure) -> AfterFailure {
        match self.resolve_failure(failure).await {
            Some(Directive::Restart) => self.start_instance().await,
            _ => AfterFailure::Stop,
        }
    }

    /// Decide on a failure; for a restart, tear the old instance down first.
    async fn resolve_failure(&mut self, failure: Failure) -> Option<Directive> {
        let rare = self.rare.get_or_insert_with(Box::default);
        let directive = decide(
            &self.props.supervisor,
            &mut rare.history,
            tokio::time::Instant::now(),
        );
        let restarts = rare.history.len();
        let path = self.cell.path.clone();
        match directive {
            Directive::Restart => {
                tracing::warn!(actor = %path, %failure, restarts, "actor failed; restarting");
                self.stop_children(false).await;
                if let Some(mut old) = self.actor.take() {
                    if let Err(panic) = AssertUnwindSafe(old.post_stop(&mut self.ctx))
                        .catch_unwind()
                        .await
                    {
                        tracing::error!(actor = %path, failure = %Failure::from_panic(panic), "post_stop panicked during restart");
                    }
                }
                if self.ctx.stop_requested {
                    return Some(Directive::Stop);
                }
            }
            Directive::Stop => {
                tracing::error!(actor = %path, %failure, "actor failed; stopping it");
            }
            Directive::Escalate => {
                tracing::error!(actor = %path, %failure, "actor failed; escalating to its parent");
                if let Some(parent) = &self.parent {
                    let _ = parent.send_system(SystemMsg::ChildFailed {
                        child: path.clone(),
                        cause: failure.to_string(),
                    });
                }
            }
        }
        Some(directive)
    }

    /// Tell every child to stop and serve system messages until all have terminated.
    /// With `closing`, no child may be spawned afterwards.
    async fn stop_children(&mut self, closing: bool) {
        let children: Vec<Arc<dyn AnyCell>> = {
            let mut children = self.cell.children.lock();
            if closing {
                children.closed = true;
            }
            children.awaited = true;
            children.all()
        };
        for child in &children {
            let _ = child.send_system(SystemMsg::Stop);
        }
        while !self.cell.children.lock().is_empty() {
            let next = poll_fn(|cx| self.cell.mailbox.poll_next(cx, false)).await;
            let Next::System(message) = next else {
                unreachable!("only system messages are polled while stopping children")
            };
            match message {
                SystemMsg::Stop => self.ctx.stop_requested = true,
                SystemMsg::Watch(watcher) => self.watchers.push(watcher),
                SystemMsg::Unwatch(id) => self.watchers.retain(|w| w.watcher_id() != id),
                SystemMsg::ChildTerminated | SystemMsg::ChildFailed { .. } => {}
                terminated @ SystemMsg::Terminated(_) => {
                    if !closing {
                        self.rare
                            .get_or_insert_with(Box::default)
                            .deferred
                            .push_back(terminated);
                    }
                }
            }
        }
        if !closing {
            self.cell.children.lock().awaited = false;
        }
    }

    async fn terminate(&mut self) {
        self.ctx.cancel_timers();
        self.ctx.unwatch_all();
        self.stop_children(true).await;
        if let Some(mut actor) = self.actor.take()
            && let Err(panic) = AssertUnwindSafe(actor.post_stop(&mut self.ctx))
                .catch_unwind()
                .await
        {
            tracing::error!(actor = %self.cell.path, failure = %Failure::from_panic(panic), "post_stop panicked");
        }
        let (queued, system) = self.cell.mailbox.close();
        for envelope in queued {
            self.cell
                .dead_letter_envelope(envelope, DeadLetterReason::RecipientStopped);
        }
        for message in system {
            if let SystemMsg::Watch(watcher) = message {
                self.watchers.push(watcher);
            }
        }
        // Free the name first: a watcher that respawns at the same path on Terminated must
        // not find it taken.
        if let Some(parent) = self.parent.take() {
            let awaited = parent.children().is_some_and(|children| {
                let mut children = children.lock();
                children.remove(self.cell.path.name(), self.cell.id);
                children.awaited
            });
            // Only a parent waiting for its children is woken; it re-checks the map under the
            // same lock, so it cannot miss this removal.
            if awaited {
                let _ = parent.send_system(SystemMsg::ChildTerminated);
            }
        }
        let terminated = Terminated {
            path: self.cell.path.clone(),
            id: self.cell.id,
        };
        for watcher in self.watchers.drain(..) {
            watcher.notify_terminated(terminated.clone());
        }
        self.cell.termination.mark_done();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::{Actor, ActorError, ActorSystem, Context, MailboxOptions, Props};

    struct Idle;

    impl Actor for Idle {
        type Msg = ();

        async fn handle(&mut self, _msg: (), _ctx: &mut Context<Self>) -> Result<(), ActorError> {
            Ok(())
        }
    }

    /// Memory per idle actor is a published target (under 1 KiB); the task and the cell are
    /// most of it, so a regression here shows up before any benchmark runs.
    #[tokio::test]
    async fn an_idle_actor_task_and_cell_stay_small() {
        let system = ActorSystem::new("sizes").unwrap();
        let cell = Arc::new(crate::cell::Cell::<()>::new(
            system.shared.root.child("idle"),
            MailboxOptions::Unbounded,
            Arc::clone(&system.shared),
        ));
        let task = super::run(cell, Props::new(|| Idle), None, false);
        let task_bytes = std::mem::size_of_val(&task);
        let cell_bytes = std::mem::size_of::<crate::cell::Cell<()>>();
        assert!(task_bytes <= 512, "actor task future is {task_bytes} bytes");
        assert!(cell_bytes <= 320, "actor cell is {cell_bytes} bytes");
    }

    struct Pinger;

    impl Actor for Pinger {
        type Msg = crate::ReplyTo<()>;

        async fn handle(
            &mut self,
            reply: crate::ReplyTo<()>,
            _ctx: &mut Context<Self>,
        ) -> Result<(), ActorError> {
            reply.send(());
            Ok(())
        }
    }

    struct WatchOnce(crate::ActorRef<crate::ReplyTo<()>>);

    impl Actor for WatchOnce {
        type Msg = ();

        async fn pre_start(&mut self, ctx: &mut Context<Self>) -> Result<(), ActorError> {
            ctx.watch(&self.0);
            Ok(())
        }

        async fn handle(&mut self, _msg: (), _ctx: &mut Context<Self>) -> Result<(), ActorError> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn a_watcher_that_dies_first_is_forgotten_by_its_target() {
        let system = ActorSystem::new("unwatch").unwrap();
        let target = system.spawn("target", Props::new(|| Pinger)).unwrap();
        let watched = target.clone();
        let watcher = system
            .spawn("watcher", Props::new(move || WatchOnce(watched.clone())))
            .unwrap();
        watcher.stop();
        watcher.terminated().await;
        // System messages are served first, so once the target answers, it has handled the
        // watcher's Watch and Unwatch.
        target.ask(|reply| reply).await.unwrap();
        assert_eq!(
            Arc::strong_count(watcher.local_cell().unwrap()),
            1,
            "the target still references its dead watcher"
        );
        system.shutdown().await;
    }
}
