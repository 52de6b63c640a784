//! Helpers shared by the runtime's behaviour tests: bounded waits, a gate that holds an actor
//! inside a handler, an event log fed from actors, and draining subscriptions.
//!
//! Include with `#[path = "support/helpers.rs"] mod helpers;` (no `mod.rs`: the workspace
//! forbids them).
#![allow(dead_code)]

use std::future::{Future, IntoFuture};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use troupe::Subscription;

/// How long a test waits for anything before failing instead of hanging. Under a paused clock
/// this is virtual time, so a missing event fails at once.
pub(crate) const PATIENCE: Duration = Duration::from_secs(10);

/// Await `future`, failing the test with `what` if it does not finish within [`PATIENCE`].
pub(crate) async fn within<F: IntoFuture>(what: &str, future: F) -> F::Output {
    match tokio::time::timeout(PATIENCE, future).await {
        Ok(output) => output,
        Err(_) => panic!("timed out waiting for {what}"),
    }
}

/// The test's side of a gate: learn that the actor is blocked, then let it go.
#[derive(Debug)]
pub(crate) struct Gate {
    entered: oneshot::Receiver<()>,
    release: oneshot::Sender<()>,
}

/// The actor's side of a gate: put it in a message and call [`Blocker::block`] in the handler.
#[derive(Debug)]
pub(crate) struct Blocker {
    entered: oneshot::Sender<()>,
    release: oneshot::Receiver<()>,
}

/// A gate that holds an actor inside one handler invocation until the test opens it (or drops
/// the [`Gate`]).
pub(crate) fn gate() -> (Gate, Blocker) {
    let (entered_tx, entered_rx) = oneshot::channel();
    let (release_tx, release_rx) = oneshot::channel();
    (
        Gate {
            entered: entered_rx,
            release: release_tx,
        },
        Blocker {
            entered: entered_tx,
            release: release_rx,
        },
    )
}

impl Gate {
    /// Wait until the actor is blocked inside its handler.
    pub(crate) async fn entered(&mut self) {
        within("the actor to reach the gate", &mut self.entered)
            .await
            .expect("the blocker was dropped before reaching the gate");
    }

    /// Let the actor continue.
    pub(crate) fn open(self) {
        let _ = self.release.send(());
    }
}

impl Blocker {
    /// Signal that the handler is blocked and wait for the gate to open.
    pub(crate) async fn block(self) {
        let _ = self.entered.send(());
        let _ = self.release.await;
    }
}

/// The sending side of an event log: actors record what happened, in order.
pub(crate) type LogTx = mpsc::UnboundedSender<String>;

/// The reading side of an event log.
#[derive(Debug)]
pub(crate) struct Log {
    rx: mpsc::UnboundedReceiver<String>,
}

/// A new event log.
pub(crate) fn log() -> (LogTx, Log) {
    let (tx, rx) = mpsc::unbounded_channel();
    (tx, Log { rx })
}

/// Record `event` (ignoring a log nobody reads any more).
pub(crate) fn record(log: &LogTx, event: impl Into<String>) {
    let _ = log.send(event.into());
}

impl Log {
    /// The next event.
    pub(crate) async fn next(&mut self) -> String {
        within("the next logged event", self.rx.recv())
            .await
            .expect("every log sender was dropped")
    }

    /// The next `n` events, in order.
    pub(crate) async fn take(&mut self, n: usize) -> Vec<String> {
        let mut events = Vec::with_capacity(n);
        for _ in 0..n {
            events.push(self.next().await);
        }
        events
    }

    /// Everything logged so far that has not been read.
    pub(crate) fn drain(&mut self) -> Vec<String> {
        let mut events = Vec::new();
        while let Ok(event) = self.rx.try_recv() {
            events.push(event);
        }
        events
    }
}

/// The position of `event` in `events`, failing the test if it is missing.
pub(crate) fn position(events: &[String], event: &str) -> usize {
    events
        .iter()
        .position(|e| e == event)
        .unwrap_or_else(|| panic!("{event:?} missing from {events:?}"))
}

/// Every event already waiting on a subscription.
pub(crate) fn drain<E>(subscription: &mut Subscription<E>) -> Vec<E> {
    let mut events = Vec::new();
    while let Some(event) = subscription.try_recv() {
        events.push(event);
    }
    events
}

/// The next event on a subscription.
pub(crate) async fn next_event<E>(subscription: &mut Subscription<E>) -> E {
    within("the next event on the subscription", subscription.recv())
        .await
        .expect("the event stream was dropped")
}

/// Poll `future` once: whether it is still pending.
pub(crate) async fn is_pending<F: Future>(future: std::pin::Pin<&mut F>) -> bool {
    let mut future = future;
    std::future::poll_fn(|cx| std::task::Poll::Ready(future.as_mut().poll(cx).is_pending())).await
}
