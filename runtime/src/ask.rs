//! Ask: send a message carrying a [`ReplyTo`] and await the typed reply with a timeout.
//!
//! # When nobody answers
//! The ask ends with [`AskError::Timeout`] after the timeout (5 s unless set), with
//! [`AskError::NoReply`] when the actor dropped the `ReplyTo` without replying, and with
//! [`AskError::Undeliverable`] when the question itself could not be enqueued. A reply that
//! arrives after the asker gave up is published as a dead letter (`AskerGone`).

use std::fmt;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;

use crate::actor_ref::ActorRef;
use crate::dead_letter::{DeadLetter, DeadLetterReason};
use crate::outbound::OutboundReply;
use crate::path::ActorPath;
use crate::system::SystemShared;

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
    timeout: Duration,
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
            timeout: DEFAULT_ASK_TIMEOUT,
            _reply: std::marker::PhantomData,
        }
    }

    /// Give up after `timeout` with [`AskError::Timeout`].
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
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
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send + 'a>>;

    fn into_future(self) -> Self::IntoFuture {
        let (tx, rx) = oneshot::channel();
        let target = self.target;
        let path = target.path().clone();
        let reply = ReplyTo::local(tx, Arc::clone(target.system_shared()), path.clone());
        let message = (self.make)(reply);
        let refused = target.tell_with(message, None).err();
        let timeout = self.timeout;
        Box::pin(async move {
            if let Some(reason) = refused {
                return Err(AskError::Undeliverable {
                    recipient: path,
                    reason,
                });
            }
            match tokio::time::timeout(timeout, rx).await {
                Ok(Ok(value)) => Ok(value),
                Ok(Err(_)) => Err(AskError::NoReply { recipient: path }),
                Err(_) => Err(AskError::Timeout {
                    recipient: path,
                    after: timeout,
                }),
            }
        })
    }
}
