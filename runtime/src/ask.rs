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
use crate::cell::Envelope;
use crate::dead_letter::{DeadLetter, DeadLetterReason};
use crate::mailbox::Refused;
use crate::path::ActorPath;
use crate::system::SystemShared;

/// The default ask timeout.
pub const DEFAULT_ASK_TIMEOUT: Duration = Duration::from_secs(5);

/// The reply channel inside an ask's message. Reply once with [`ReplyTo::send`].
pub struct ReplyTo<T> {
    tx: oneshot::Sender<T>,
    asker: AskerInfo,
}

struct AskerInfo {
    system: Arc<SystemShared>,
    recipient: ActorPath,
}

impl<T> fmt::Debug for ReplyTo<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ReplyTo(ask to {})", self.asker.recipient)
    }
}

impl<T: Send + 'static> ReplyTo<T> {
    /// Send the reply. If the asker no longer waits, the reply becomes a dead letter.
    pub fn send(self, value: T) {
        if self.tx.send(value).is_err() {
            let recipient = self.asker.recipient.clone();
            self.asker.system.dead_letters.publish(DeadLetter {
                recipient: recipient.root_child("temp"),
                sender: Some(recipient),
                message_type: std::any::type_name::<T>(),
                reason: DeadLetterReason::AskerGone,
            });
        }
    }

    /// Whether the asker is still waiting.
    #[must_use]
    pub fn is_waiting(&self) -> bool {
        !self.tx.is_closed()
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
            .field("target", &self.target.cell.path)
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
        let cell = &self.target.cell;
        let reply = ReplyTo {
            tx,
            asker: AskerInfo {
                system: Arc::clone(&cell.system),
                recipient: cell.path.clone(),
            },
        };
        let message = (self.make)(reply);
        let recipient = || cell.path.clone();
        let pushed = cell.mailbox.push_user(Envelope::Message {
            message,
            sender: None,
        });
        let timeout = self.timeout;
        let refused = match pushed {
            Ok(()) => None,
            Err(refused) => {
                let reason = match &refused {
                    Refused::Closed(_) => DeadLetterReason::RecipientStopped,
                    Refused::Full(_) => DeadLetterReason::MailboxFull,
                };
                cell.dead_letter_refused(refused);
                Some(reason)
            }
        };
        let path = recipient();
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
