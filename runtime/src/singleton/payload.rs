//! A message on its way to a singleton instance, with its original sender; and how held
//! messages travel back to the proxy that sent them.

use std::sync::Arc;

use bytes::Bytes;

use crate::Address;
use crate::path::ActorPath;
use crate::remoting::with_context;
use crate::remoting::{RemoteMessage, Remoting};

/// Room reserved for a serialized message: small messages then never regrow the buffer.
const ENCODE_CAPACITY: usize = 256;

/// One message for the singleton.
pub(crate) struct Payload<M> {
    pub(crate) message: M,
    pub(crate) sender: Option<ActorPath>,
}

impl<M: RemoteMessage> Payload<M> {
    /// The bytes and sender elements, to give a held message back to a proxy on another node.
    pub(crate) fn encode(
        self,
        remoting: &Arc<Remoting>,
    ) -> Result<(Bytes, Option<String>), (Option<ActorPath>, String)> {
        let Self { message, sender } = self;
        match with_context(remoting, || {
            postcard::to_extend(&message, Vec::with_capacity(ENCODE_CAPACITY))
        }) {
            Ok(body) => Ok((
                Bytes::from(body),
                sender.as_ref().map(|s| s.elements().to_owned()),
            )),
            Err(error) => Err((sender, error.to_string())),
        }
    }

    /// A message given back by a manager, for the proxy on `me` that sent it.
    pub(crate) fn decode(
        remoting: &Arc<Remoting>,
        me: &Address,
        body: &[u8],
        sender: Option<String>,
    ) -> Result<Self, String> {
        let message = with_context(remoting, || postcard::from_bytes::<M>(body))
            .map_err(|error| error.to_string())?;
        Ok(Self {
            message,
            // The original senders were on this node: the proxy's own.
            sender: sender.map(|elements| ActorPath::remote(me, &elements)),
        })
    }
}
