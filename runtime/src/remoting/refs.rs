//! Refs to actors on other nodes: remoting's side of the core's outbound seam, and how an
//! [`ActorRef`] travels inside a message.
//!
//! # On the wire
//! A ref travels as its full path (`troupe://<system>@<host>:<port>/user/...`), naming this
//! node for a local actor. A received ref always delivers through remoting, through the
//! loopback when it names this node, so it behaves the same wherever it was made.

use std::sync::{Arc, Weak};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{RemoteMessage, Remoting, current_context};
use crate::actor_ref::ActorRef;
use crate::address::Address;
use crate::cell::Watcher;
use crate::dead_letter::DeadLetterReason;
use crate::outbound::Outbound;
use crate::path::ActorPath;

/// Where a remote ref's messages go: the node at `address`, through `remoting`.
pub(super) struct RemoteTarget<M> {
    remoting: Arc<Remoting>,
    address: Address,
    _message: std::marker::PhantomData<fn(M)>,
}

impl<M: RemoteMessage> RemoteTarget<M> {
    pub(super) fn new(remoting: Arc<Remoting>, address: Address) -> Self {
        Self {
            remoting,
            address,
            _message: std::marker::PhantomData,
        }
    }
}

impl<M: RemoteMessage> Outbound<M> for RemoteTarget<M> {
    fn send(
        &self,
        recipient: &ActorPath,
        message: M,
        sender: Option<&ActorPath>,
    ) -> Result<(), (M, DeadLetterReason)> {
        self.remoting
            .send_message(&self.address, recipient, message, sender)
    }

    fn stop(&self, recipient: &ActorPath, poison_pill: bool) {
        self.remoting
            .stop_remote(&self.address, recipient.elements(), poison_pill);
    }

    fn watch(&self, recipient: &ActorPath, watcher: Weak<dyn Watcher>) {
        self.remoting
            .watch_remote(&self.address, recipient.elements(), watcher);
    }
}

impl<M: RemoteMessage> Serialize for ActorRef<M> {
    /// A ref travels as its full path, naming this node for a local actor.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::Error;
        let path = match self.path().address() {
            Some(_) => self.path().to_string(),
            None => {
                let remoting = current_context().ok_or_else(|| {
                    S::Error::custom("an ActorRef can only be serialized by remoting")
                })?;
                self.path()
                    .with_address(&remoting.local().address)
                    .to_string()
            }
        };
        serializer.serialize_str(&path)
    }
}

impl<'de, M: RemoteMessage> Deserialize<'de> for ActorRef<M> {
    /// A received ref always delivers through remoting — the loopback when it names this node.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let path = String::deserialize(deserializer)?;
        let remoting = current_context()
            .ok_or_else(|| D::Error::custom("an ActorRef can only be deserialized by remoting"))?;
        remoting.actor_ref::<M>(&path).map_err(D::Error::custom)
    }
}
