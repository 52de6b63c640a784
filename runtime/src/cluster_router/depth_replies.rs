//! [`DepthReplyInbox`]: the smallest-mailbox router's child that receives depth agents' replies
//! and hands them, tagged with the node that sent them, to the router's control task.
//!
//! It exists because remote delivery is by path and message type: the agents answer to an
//! actor that takes [`DepthReply`], and the router itself takes the routed messages.

use tokio::sync::mpsc;

use super::depth_agent::DepthReply;
use crate::Address;
use crate::actor::{Actor, ActorError};
use crate::context::Context;

/// The name of the inbox under its router.
pub(super) const DEPTH_REPLIES_NAME: &str = "depth-replies";

/// Forwards each reply with the transport-verified node it came from.
#[derive(Debug)]
pub(super) struct DepthReplyInbox {
    pub(super) to_control: mpsc::UnboundedSender<(Address, DepthReply)>,
    /// This node: a reply told locally (not through remoting) has no origin.
    pub(super) this_node: Address,
}

impl Actor for DepthReplyInbox {
    type Msg = DepthReply;

    async fn handle(
        &mut self,
        reply: DepthReply,
        ctx: &mut Context<Self>,
    ) -> Result<(), ActorError> {
        let node = ctx
            .origin()
            .cloned()
            .unwrap_or_else(|| self.this_node.clone());
        if self.to_control.send((node, reply)).is_err() {
            // The control task is gone: the router is stopping and takes this inbox with it.
            ctx.stop_self();
        }
        Ok(())
    }
}
