//! Ask: send a message carrying a [`ReplyTo`] and await the typed reply with a timeout.
//!
//! # When nobody answers
//! The ask ends with [`AskError::Timeout`] after the timeout (5 s unless set), with
//! [`AskError::NoReply`] when the actor dropped the `ReplyTo` without replying, and with
//! [`AskError::Undeliverable`] when the question itself could not be enqueued. A reply that
//! arrives after the asker gave up is published as a dead letter (`AskerGone`).
//!
//! # Timeout precision
//! An ask does not arm a tokio timer: its deadline goes into its system's coarse deadline wheel
//! ([`deadlines`]), ticked every 5 ms while asks are pending. A timeout fires no earlier than
//! asked and at most about one tick (5 ms, plus scheduling delay) later.
//! [`AskRequest::without_timeout`] arms nothing, for a caller that bounds the wait itself.

pub(crate) mod deadlines;

use std::fmt;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::sync::oneshot;

use crate::actor_ref::ActorRef;
use crate::dead_letter::{DeadLetter, DeadLetterReason};
use crate::outbound::OutboundReply;
use crate::path::ActorPath;
use crate::system::SystemShared;
use deadlines::{AskDeadlines, DeadlineKey};

/// The default ask timeout.
pub const DEFAULT_ASK_TIMEOUT: Duration = Duration::from_secs(5);

/// The reply channel inside an ask's message. Reply once with [`ReplyTo::send`].
///
/// A `ReplyTo` can travel inside a message to another node (it serializes as this node's
/// address and an ask id); the reply then comes back over the network to the asker.
pub struct ReplyTo<T> {
    inner: ReplyInner<T>,
}

enum ReplyInner<T> {
    Local {
        /// Taken when the reply is sent, or when the channel is serialized for another node.
        tx: parking_lot::Mutex<Option<oneshot::Sender<T>>>,
        asker: AskerInfo,
    },
    /// The asker is not hosted by this system: the reply goes through the outbound seam.
    Outbound(Box<dyn OutboundReply<T>>),
}

struct AskerInfo {
    system: Arc<SystemShared>,
    recipient: ActorPath,
}

impl<T> fmt::Debug for ReplyTo<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.inner {
            ReplyInner::Local { asker, .. } => write!(f, "ReplyTo(ask to {})", asker.recipient),
            ReplyInner::Outbound(reply) => write!(f, "ReplyTo({reply:?})"),
        }
    }
}

impl<T: Send + 'static> ReplyTo<T> {
    pub(crate) fn local(
        tx: oneshot::Sender<T>,
        system: Arc<SystemShared>,
        recipient: ActorPath,
    ) -> Self {
        Self {
            inner: ReplyInner::Local {
                tx: parking_lot::Mutex::new(Some(tx)),
                asker: AskerInfo { system, recipient },
            },
        }
    }

    /// A reply channel to an asker this system does not host.
    pub(crate) fn outbound(reply: Box<dyn OutboundReply<T>>) -> Self {
        Self {
            inner: ReplyInner::Outbound(reply),
        }
    }

    /// For a local asker: take the channel out (the reply will then come from elsewhere);
    /// `None` once used or taken. For an outbound one: its route, to pass on.
    pub(crate) fn transfer(&self) -> Result<Option<oneshot::Sender<T>>, &dyn OutboundReply<T>> {
        match &self.inner {
            ReplyInner::Local { tx, .. } => Ok(tx.lock().take()),
            ReplyInner::Outbound(reply) => Err(&**reply),
        }
    }

    /// Send the reply. If the asker no longer waits, the reply becomes a dead letter.
    pub fn send(self, value: T) {
        match self.inner {
            ReplyInner::Local { tx, asker } => {
                let sent = match tx.lock().take() {
                    Some(tx) => tx.send(value).is_ok(),
                    None => false,
                };
                if !sent {
                    let recipient = asker.recipient.clone();
                    asker.system.dead_letters.publish(DeadLetter {
                        recipient: recipient.root_child("temp"),
                        sender: Some(recipient),
                        message_type: std::any::type_name::<T>(),
                        reason: DeadLetterReason::AskerGone,
                    });
                }
            }
            ReplyInner::Outbound(reply) => reply.send(value),
        }
    }

    /// Whether the asker is still waiting (always true for an asker on another node).
    #[must_use]
    pub fn is_waiting(&self) -> bool {
        match &self.inner {
            ReplyInner::Local { tx, .. } => tx.lock().as_ref().is_some_and(|tx| !tx.is_closed()),
            ReplyInner::Outbound(_) => true,
        }
    }
}

/// Why an ask produced no reply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AskError {
    /// No reply within the timeout.
    #[error("ask to {recipient} timed out after {after:?}")]
    Timeout {
        /// The asked actor.
        recipient: ActorPath,
        /// The timeout that elapsed.
        after: Duration,
    },
    /// The question could not be enqueued (it became a dead letter).
    #[error("ask to {recipient} was not delivered: {reason}")]
    Undeliverable {
        /// The asked actor.
        recipient: ActorPath,
        /// Why it was not delivered.
        reason: DeadLetterReason,
    },
    /// The actor dropped the reply channel without replying (it stopped or ignored it).
    #[error("{recipient} dropped the reply channel without replying")]
    NoReply {
        /// The asked actor.
        recipient: ActorPath,
    },
}

/// A pending ask; set the timeout, then `.await` it.
#[must_use = "an ask does nothing until awaited"]
pub struct AskRequest<'a, M, R, F> {
    target: &'a ActorRef<M>,
    make: F,
    /// `None`: no deadline ([`AskRequest::without_timeout`]).
    timeout: Option<Duration>,
    _reply: std::marker::PhantomData<fn() -> R>,
}

impl<M, R, F> fmt::Debug for AskRequest<'_, M, R, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AskRequest")
            .field("target", self.target.path())
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl<'a, M, R, F> AskRequest<'a, M, R, F>
where
    M: Send + 'static,
    R: Send + 'static,
    F: FnOnce(ReplyTo<R>) -> M,
{
    pub(crate) fn new(target: &'a ActorRef<M>, make: F) -> Self {
        Self {
            target,
            make,
            timeout: Some(DEFAULT_ASK_TIMEOUT),
            _reply: std::marker::PhantomData,
        }
    }

    /// Give up after `timeout` with [`AskError::Timeout`] (no earlier, and at most about 5 ms
    /// later: see the module's "Timeout precision").
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Arm no deadline: the ask ends with the reply, or with [`AskError::NoReply`] when the
    /// `ReplyTo` is dropped (for instance the actor stops), and otherwise waits. For a caller
    /// that bounds the wait itself (a `select!`, an outer timeout); it saves the deadline's
    /// bookkeeping. An asker on another node sees no `NoReply` if the reply is lost on the way.
    pub fn without_timeout(mut self) -> Self {
        self.timeout = None;
        self
    }
}

impl<'a, M, R, F> IntoFuture for AskRequest<'a, M, R, F>
where
    M: Send + 'static,
    R: Send + 'static,
    F: FnOnce(ReplyTo<R>) -> M,
{
    type Output = Result<R, AskError>;
    type IntoFuture = AskFuture<'a, R>;

    fn into_future(self) -> Self::IntoFuture {
        let (tx, rx) = oneshot::channel();
        let target = self.target;
        let system = target.system_shared();
        let reply = ReplyTo::local(tx, Arc::clone(system), target.path().clone());
        let message = (self.make)(reply);
        let state = match target.tell_with(message, None) {
            Ok(()) => AskState::Waiting { rx, deadline: None },
            Err(reason) => AskState::Refused(reason),
        };
        AskFuture {
            recipient: target.path(),
            deadlines: &system.ask_deadlines,
            timeout: self.timeout,
            state,
        }
    }
}

/// An ask on its way: `.await` gives the reply or why there is none.
///
/// Dropping it gives up the ask (a reply sent later becomes an `AskerGone` dead letter).
#[must_use = "an ask does nothing until awaited"]
pub struct AskFuture<'a, R> {
    recipient: &'a ActorPath,
    deadlines: &'a Arc<AskDeadlines>,
    timeout: Option<Duration>,
    state: AskState<R>,
}

enum AskState<R> {
    /// The question was not enqueued.
    Refused(DeadLetterReason),
    /// Waiting for the reply; the deadline entry is made on the first poll that has to wait.
    Waiting {
        rx: oneshot::Receiver<R>,
        deadline: Option<DeadlineKey>,
    },
    Done,
}

impl<R> fmt::Debug for AskFuture<'_, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AskFuture")
            .field("recipient", self.recipient)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl<R> AskFuture<'_, R> {
    fn finish(&mut self, result: Result<R, AskError>) -> Poll<Result<R, AskError>> {
        if let AskState::Waiting {
            deadline: Some(key),
            ..
        } = std::mem::replace(&mut self.state, AskState::Done)
        {
            self.deadlines.remove(key);
        }
        Poll::Ready(result)
    }
}

impl<R> Future for AskFuture<'_, R> {
    type Output = Result<R, AskError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let (rx, deadline) = match &mut this.state {
            AskState::Refused(reason) => {
                let reason = reason.clone();
                this.state = AskState::Done;
                return Poll::Ready(Err(AskError::Undeliverable {
                    recipient: this.recipient.clone(),
                    reason,
                }));
            }
            AskState::Waiting { rx, deadline } => (rx, deadline),
            AskState::Done => panic!("ask polled after it finished"),
        };
        match Pin::new(rx).poll(cx) {
            Poll::Ready(Ok(value)) => return this.finish(Ok(value)),
            Poll::Ready(Err(_)) => {
                let recipient = this.recipient.clone();
                return this.finish(Err(AskError::NoReply { recipient }));
            }
            Poll::Pending => {}
        }
        let Some(timeout) = this.timeout else {
            return Poll::Pending;
        };
        let expired = match deadline {
            Some(key) => this.deadlines.poll_expired(key, cx.waker()),
            None => {
                let (key, expired) = this.deadlines.insert(timeout, cx.waker());
                *deadline = Some(key);
                expired
            }
        };
        if expired {
            let recipient = this.recipient.clone();
            return this.finish(Err(AskError::Timeout {
                recipient,
                after: timeout,
            }));
        }
        Poll::Pending
    }
}

impl<R> Drop for AskFuture<'_, R> {
    fn drop(&mut self) {
        if let AskState::Waiting {
            deadline: Some(key),
            ..
        } = std::mem::replace(&mut self.state, AskState::Done)
        {
            self.deadlines.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Actor, ActorError, ActorSystem, Props};

    /// Answers, drops or keeps (never answering) the reply channel of each question.
    enum Question {
        Answer(u64, ReplyTo<u64>),
        Drop(ReplyTo<u64>),
        Keep(ReplyTo<u64>),
        /// Drop every kept channel.
        Forget,
    }

    #[derive(Default)]
    struct Keeper {
        kept: Vec<ReplyTo<u64>>,
    }

    impl Actor for Keeper {
        type Msg = Question;

        async fn handle(
            &mut self,
            msg: Question,
            _ctx: &mut crate::Context<Self>,
        ) -> Result<(), ActorError> {
            match msg {
                Question::Answer(n, reply) => reply.send(n),
                Question::Drop(reply) => drop(reply),
                Question::Keep(reply) => self.kept.push(reply),
                Question::Forget => self.kept.clear(),
            }
            Ok(())
        }
    }

    fn keeper(system: &ActorSystem) -> ActorRef<Question> {
        system.spawn("keeper", Props::new(Keeper::default)).unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn a_timeout_fires_no_earlier_than_asked_and_within_two_ticks_after() {
        let system = ActorSystem::new("ask").unwrap();
        let keeper = keeper(&system);
        for millis in [1, 7, 250, 1_003] {
            let timeout = Duration::from_millis(millis);
            let started = tokio::time::Instant::now();
            let err = keeper
                .ask(Question::Keep)
                .timeout(timeout)
                .await
                .unwrap_err();
            let waited = started.elapsed();
            assert!(matches!(err, AskError::Timeout { after, .. } if after == timeout));
            assert!(waited >= timeout, "{waited:?} < {timeout:?}");
            assert!(
                waited <= timeout + 2 * deadlines::GRANULARITY,
                "{waited:?} is more than two ticks after {timeout:?}"
            );
        }
        assert_eq!(keeper.system_shared().ask_deadlines.pending(), 0);
        system.shutdown().await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_million_asks_with_timeouts_leave_no_pending_deadline_and_give_the_wheel_back() {
        let began = std::time::Instant::now();
        let system = ActorSystem::new("ask").unwrap();
        let keeper = keeper(&system);
        let deadlines = Arc::clone(&keeper.system_shared().ask_deadlines);
        // 100 askers, 10,000 asks each, one after another: a third answered, a third dropped
        // unanswered, a third kept until they time out.
        const ASKERS: u64 = 100;
        const EACH: u64 = 10_000;
        let mut askers = tokio::task::JoinSet::new();
        for asker in 0..ASKERS {
            let keeper = keeper.clone();
            askers.spawn(async move {
                let mut counts = [0u64; 3];
                for i in 0..EACH {
                    let n = asker * EACH + i;
                    let result = keeper
                        .ask(move |reply| match n % 3 {
                            0 => Question::Answer(n, reply),
                            1 => Question::Drop(reply),
                            _ => Question::Keep(reply),
                        })
                        .timeout(Duration::from_millis(20))
                        .await;
                    match result {
                        Ok(value) => {
                            assert_eq!(value, n);
                            counts[0] += 1;
                        }
                        Err(AskError::NoReply { .. }) => counts[1] += 1,
                        Err(AskError::Timeout { .. }) => counts[2] += 1,
                        Err(other) => panic!("unexpected {other}"),
                    }
                }
                counts
            });
        }
        let (mut answered, mut no_reply, mut timed_out) = (0u64, 0u64, 0u64);
        while let Some(counts) = askers.join_next().await {
            let [a, n, t] = counts.unwrap();
            answered += a;
            no_reply += n;
            timed_out += t;
        }
        keeper.tell(Question::Forget);
        assert_eq!(deadlines.pending(), 0);
        assert_eq!(answered + no_reply + timed_out, 1_000_000);
        assert_eq!((answered, no_reply, timed_out), (333_334, 333_333, 333_333));
        // Once idle the ticker stops and the wheel gives its memory back.
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(deadlines.capacity(), 0);
        assert!(
            !format!("{deadlines:?}").contains("ticking: true"),
            "{deadlines:?}"
        );
        assert!(
            began.elapsed() < Duration::from_secs(100),
            "took {:?}",
            began.elapsed()
        );
        system.shutdown().await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_ask_removes_its_deadline() {
        let system = ActorSystem::new("ask").unwrap();
        let keeper = keeper(&system);
        let deadlines = &keeper.system_shared().ask_deadlines;
        {
            let ask = keeper.ask(Question::Keep).into_future();
            tokio::pin!(ask);
            // One poll arms the deadline; then the ask is given up.
            assert!(futures_poll_once(ask.as_mut()).await.is_none());
            assert_eq!(deadlines.pending(), 1);
        }
        assert_eq!(deadlines.pending(), 0);
        system.shutdown().await;
    }

    #[tokio::test(start_paused = true)]
    async fn an_ask_without_timeout_arms_nothing_and_waits_for_the_reply_or_its_drop() {
        let system = ActorSystem::new("ask").unwrap();
        let keeper = keeper(&system);
        let deadlines = &keeper.system_shared().ask_deadlines;
        let kept = keeper.ask(Question::Keep).without_timeout().into_future();
        tokio::pin!(kept);
        assert!(futures_poll_once(kept.as_mut()).await.is_none());
        assert_eq!(deadlines.pending(), 0);
        // Far past the default timeout it still waits.
        tokio::time::sleep(DEFAULT_ASK_TIMEOUT * 3).await;
        assert!(futures_poll_once(kept.as_mut()).await.is_none());
        // The actor forgets the channel: the ask ends with NoReply.
        keeper.tell(Question::Forget);
        assert!(matches!(kept.await, Err(AskError::NoReply { .. })));
        let answer = keeper
            .ask(|reply| Question::Answer(7, reply))
            .without_timeout()
            .await;
        assert_eq!(answer, Ok(7));
        system.shutdown().await;
    }

    #[test]
    fn asks_from_two_workers_time_out_and_answer_without_mixing_up() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let system = ActorSystem::new("ask").unwrap();
            let keeper = keeper(&system);
            let mut asks = tokio::task::JoinSet::new();
            for n in 0..2_000u64 {
                let keeper = keeper.clone();
                asks.spawn(async move {
                    let started = tokio::time::Instant::now();
                    let timeout = Duration::from_millis(30 + n % 20);
                    let result = keeper
                        .ask(move |reply| {
                            if n % 2 == 0 {
                                Question::Answer(n, reply)
                            } else {
                                Question::Keep(reply)
                            }
                        })
                        .timeout(timeout)
                        .await;
                    (n, result, started.elapsed(), timeout)
                });
            }
            let bound = tokio::time::timeout(Duration::from_secs(20), async {
                while let Some(joined) = asks.join_next().await {
                    let (n, result, waited, timeout) = joined.unwrap();
                    if n % 2 == 0 {
                        assert_eq!(result, Ok(n));
                    } else {
                        assert!(
                            matches!(result, Err(AskError::Timeout { .. })),
                            "{result:?}"
                        );
                        assert!(waited >= timeout, "ask {n} gave up early: {waited:?}");
                    }
                }
            });
            bound.await.expect("every ask ends within 20 s");
            assert_eq!(keeper.system_shared().ask_deadlines.pending(), 0);
            system.shutdown().await;
        });
    }

    /// Poll `future` once: `Some` if it finished.
    async fn futures_poll_once<F: Future + Unpin>(mut future: F) -> Option<F::Output> {
        std::future::poll_fn(|cx| {
            Poll::Ready(match Pin::new(&mut future).poll(cx) {
                Poll::Ready(out) => Some(out),
                Poll::Pending => None,
            })
        })
        .await
    }
}
