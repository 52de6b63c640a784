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

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

use crate::Address;
use crate::actor_ref::ActorRef;
use crate::cell::Envelope;
use crate::dead_letter::{DeadLetter, DeadLetterReason};
use crate::mailbox::Refused;
use crate::path::ActorPath;
use crate::remoting::{PendingReply, Remoting, current_context, with_context};
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
    Remote {
        remoting: Arc<Remoting>,
        node: Address,
        id: u64,
        encode: fn(&T) -> Result<Vec<u8>, postcard::Error>,
    },
}

struct AskerInfo {
    system: Arc<SystemShared>,
    recipient: ActorPath,
}

impl<T> fmt::Debug for ReplyTo<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.inner {
            ReplyInner::Local { asker, .. } => write!(f, "ReplyTo(ask to {})", asker.recipient),
            ReplyInner::Remote { node, id, .. } => write!(f, "ReplyTo(ask {id} from {node})"),
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
            ReplyInner::Remote {
                remoting,
                node,
                id,
                encode,
            } => match with_context(&remoting, || encode(&value)) {
                Ok(body) => {
                    if !remoting.send_reply(&node, id, body) {
                        tracing::warn!(asker = %node, ask = id, "ask reply could not be sent");
                    }
                }
                Err(error) => {
                    tracing::warn!(asker = %node, ask = id, %error, "ask reply does not serialize")
                }
            },
        }
    }

    /// Whether the asker is still waiting (always true for an asker on another node).
    #[must_use]
    pub fn is_waiting(&self) -> bool {
        match &self.inner {
            ReplyInner::Local { tx, .. } => tx.lock().as_ref().is_some_and(|tx| !tx.is_closed()),
            ReplyInner::Remote { .. } => true,
        }
    }
}

/// An ask from this node waiting for a reply from another.
struct PendingAsk<T> {
    tx: oneshot::Sender<T>,
}

impl<T: DeserializeOwned + Send + 'static> PendingReply for PendingAsk<T> {
    fn complete(self: Box<Self>, body: &[u8]) -> bool {
        match postcard::from_bytes::<T>(body) {
            Ok(value) => self.tx.send(value).is_ok(),
            Err(error) => {
                tracing::warn!(%error, "ask reply does not decode");
                false
            }
        }
    }

    fn is_abandoned(&self) -> bool {
        self.tx.is_closed()
    }
}

impl<T> Serialize for ReplyTo<T>
where
    T: Serialize + DeserializeOwned + Send + 'static,
{
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::Error;
        let remoting = current_context()
            .ok_or_else(|| S::Error::custom("a ReplyTo can only be serialized by remoting"))?;
        match &self.inner {
            ReplyInner::Local { tx, .. } => {
                let tx = tx
                    .lock()
                    .take()
                    .ok_or_else(|| S::Error::custom("this ReplyTo was already used"))?;
                let id = remoting.register_ask(Box::new(PendingAsk { tx }));
                (&remoting.local().address, id).serialize(serializer)
            }
            ReplyInner::Remote { node, id, .. } => (node, *id).serialize(serializer),
        }
    }
}

impl<'de, T> Deserialize<'de> for ReplyTo<T>
where
    T: Serialize + DeserializeOwned + Send + 'static,
{
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let (node, id) = <(Address, u64)>::deserialize(deserializer)?;
        let remoting = current_context()
            .ok_or_else(|| D::Error::custom("a ReplyTo can only be deserialized by remoting"))?;
        Ok(Self {
            inner: ReplyInner::Remote {
                remoting,
                node,
                id,
                encode: |value| postcard::to_allocvec(value),
            },
        })
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
        let reply = ReplyTo::local(tx, Arc::clone(&cell.system), cell.path.clone());
        let message = (self.make)(reply);
        let recipient = || cell.path.clone();
        let pushed = cell.deliver(Envelope::Message {
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
