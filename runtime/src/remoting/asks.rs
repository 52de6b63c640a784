//! Asks across the network: reply channels registered here for a remote node to complete,
//! replies sent back to the node that asked, and how a [`ReplyTo`] travels inside a message.
//!
//! # On the wire
//! A `ReplyTo` travels as `(asker's node address, ask id)`. Serializing a local one registers
//! its channel here under a fresh id; the node that decodes it gets a `ReplyTo` whose reply
//! goes back over the network. Passing such a `ReplyTo` on to a third node sends the same
//! `(node, id)`, so the reply still goes straight to the asker.

use std::any::Any;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use tokio::sync::oneshot;

use super::{ASK_REPLY_CHANNEL, Remoting, current_context, with_context};
use crate::address::Address;
use crate::ask::ReplyTo;
use crate::dead_letter::DeadLetterReason;
use crate::outbound::OutboundReply;

/// An ask from this node whose reply will come from another node.
pub(super) trait PendingReply: Send {
    /// Decode the reply and hand it to the asker; false if the asker is gone.
    fn complete(self: Box<Self>, body: &[u8]) -> bool;
    /// Whether the asker gave up (timed out or dropped the ask).
    fn is_abandoned(&self) -> bool;
}

pub(super) type CompleteAsk = Box<dyn PendingReply>;

/// Sweep abandoned asks once this many are pending.
const PENDING_ASK_SWEEP: usize = 1_024;

impl Remoting {
    /// Register a reply channel so a remote node can complete it; returns its id.
    fn register_ask(&self, complete: CompleteAsk) -> u64 {
        let id = self.next_ask.fetch_add(1, Ordering::Relaxed);
        let mut pending = self.pending_asks.lock();
        if pending.len() >= PENDING_ASK_SWEEP {
            pending.retain(|_, ask| !ask.is_abandoned());
        }
        pending.insert(id, complete);
        id
    }

    /// Send a reply for ask `id` to `node`.
    fn send_reply(&self, node: &Address, id: u64, body: Vec<u8>) -> bool {
        let Ok(payload) = postcard::to_allocvec(&(id, body)) else {
            return false;
        };
        self.send_frame(node, Self::frame(ASK_REPLY_CHANNEL, &payload))
    }

    pub(super) fn complete_ask(&self, id: u64, body: &[u8]) {
        let complete = self.pending_asks.lock().remove(&id);
        let remoting = self.arc();
        let delivered =
            complete.is_some_and(|complete| with_context(&remoting, || complete.complete(body)));
        if !delivered {
            let recipient = format!("/temp/ask-{id}");
            self.dead_letter(&recipient, None, "ask reply", DeadLetterReason::AskerGone);
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

/// The reply route to an asker on another node: remoting's side of the core's
/// [`OutboundReply`] seam.
struct RemoteReply<T> {
    remoting: Arc<Remoting>,
    node: Address,
    id: u64,
    encode: fn(&T) -> Result<Vec<u8>, postcard::Error>,
}

impl<T> fmt::Debug for RemoteReply<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ask {} from {}", self.id, self.node)
    }
}

impl<T: Send + 'static> OutboundReply<T> for RemoteReply<T> {
    fn send(self: Box<Self>, value: T) {
        let Self {
            remoting,
            node,
            id,
            encode,
        } = *self;
        match with_context(&remoting, || encode(&value)) {
            Ok(body) => {
                if !remoting.send_reply(&node, id, body) {
                    tracing::warn!(asker = %node, ask = id, "ask reply could not be sent");
                }
            }
            Err(error) => {
                tracing::warn!(asker = %node, ask = id, %error, "ask reply does not serialize")
            }
        }
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl<T> Serialize for ReplyTo<T>
where
    T: Serialize + DeserializeOwned + Send + 'static,
{
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::Error;
        let remoting = current_context()
            .ok_or_else(|| S::Error::custom("a ReplyTo can only be serialized by remoting"))?;
        match self.transfer() {
            Ok(tx) => {
                let tx = tx.ok_or_else(|| S::Error::custom("this ReplyTo was already used"))?;
                let id = remoting.register_ask(Box::new(PendingAsk { tx }));
                (&remoting.local().address, id).serialize(serializer)
            }
            Err(outbound) => {
                let remote = outbound
                    .as_any()
                    .downcast_ref::<RemoteReply<T>>()
                    .ok_or_else(|| S::Error::custom("this ReplyTo cannot travel"))?;
                (&remote.node, remote.id).serialize(serializer)
            }
        }
    }
}

impl<'de, T> Deserialize<'de> for ReplyTo<T>
where
    T: Serialize + DeserializeOwned + Send + 'static,
{
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let (node, id) = <(Address, u64)>::deserialize(deserializer)?;
        let remoting = current_context()
            .ok_or_else(|| D::Error::custom("a ReplyTo can only be deserialized by remoting"))?;
        Ok(ReplyTo::outbound(Box::new(RemoteReply {
            remoting,
            node,
            id,
            encode: |value| postcard::to_allocvec(value),
        })))
    }
}
