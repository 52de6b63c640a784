//! Asks across the network: reply channels registered here for a remote node to complete,
//! and replies sent back to the node that asked.

use std::sync::atomic::Ordering;

use super::{ASK_REPLY_CHANNEL, Remoting, with_context};
use crate::address::Address;
use crate::dead_letter::DeadLetterReason;

/// An ask from this node whose reply will come from another node.
pub(crate) trait PendingReply: Send {
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
    pub(crate) fn register_ask(&self, complete: CompleteAsk) -> u64 {
        let id = self.next_ask.fetch_add(1, Ordering::Relaxed);
        let mut pending = self.pending_asks.lock();
        if pending.len() >= PENDING_ASK_SWEEP {
            pending.retain(|_, ask| !ask.is_abandoned());
        }
        pending.insert(id, complete);
        id
    }

    /// Send a reply for ask `id` to `node`.
    pub(crate) fn send_reply(&self, node: &Address, id: u64, body: Vec<u8>) -> bool {
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
