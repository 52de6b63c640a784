//! A message on its way to a singleton instance: still a value (it never left this node) or
//! serialized by a proxy for a manager on another node.

use std::sync::Arc;

use bytes::Bytes;

use crate::path::ActorPath;
use crate::remote::remoting::with_context;
use crate::remote::{Address, RemoteMessage, Remoting};

/// One message for the singleton.
pub(crate) enum Payload<M> {
    /// Sent on this node; not serialized.
    Value {
        message: M,
        sender: Option<ActorPath>,
    },
    /// Serialized by a proxy (refs and reply channels inside are already registered with
    /// remoting, so the bytes can travel on as they are).
    Encoded {
        body: Bytes,
        sender: Option<ActorPath>,
    },
}

impl<M: RemoteMessage> Payload<M> {
    pub(crate) fn sender(&self) -> Option<&ActorPath> {
        match self {
            Self::Value { sender, .. } | Self::Encoded { sender, .. } => sender.as_ref(),
        }
    }

    /// The bytes and sender elements for a `Deliver` to another node.
    pub(crate) fn encode(
        self,
        remoting: &Arc<Remoting>,
    ) -> Result<(Bytes, Option<String>), (Option<ActorPath>, String)> {
        match self {
            Self::Encoded { body, sender } => {
                let elements = sender.as_ref().map(|s| s.elements().to_owned());
                Ok((body, elements))
            }
            Self::Value { message, sender } => {
                match with_context(remoting, || postcard::to_allocvec(&message)) {
                    Ok(body) => Ok((
                        Bytes::from(body),
                        sender.as_ref().map(|s| s.elements().to_owned()),
                    )),
                    Err(error) => Err((sender, error.to_string())),
                }
            }
        }
    }

    /// The message itself, for the instance.
    pub(crate) fn decode(
        self,
        remoting: &Arc<Remoting>,
    ) -> Result<(M, Option<ActorPath>), (Option<ActorPath>, String)> {
        match self {
            Self::Value { message, sender } => Ok((message, sender)),
            Self::Encoded { body, sender } => {
                match with_context(remoting, || postcard::from_bytes::<M>(&body)) {
                    Ok(message) => Ok((message, sender)),
                    Err(error) => Err((sender, error.to_string())),
                }
            }
        }
    }
}

/// The sender of a message that arrived from `origin` (the transport-verified node) naming
/// `elements` as its path there. `None` origin: this node.
pub(crate) fn sender_path(
    origin: Option<&Address>,
    me: &Address,
    elements: Option<String>,
) -> Option<ActorPath> {
    elements.map(|elements| ActorPath::remote(origin.unwrap_or(me), &elements))
}
