//! Death watch: learn, exactly once, that an actor has terminated.

use crate::cell::ActorId;
use crate::path::ActorPath;

/// Delivered to a watcher (see [`crate::Context::watch`]) when a watched actor has terminated:
/// its `post_stop` has run and its mailbox is closed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Terminated {
    /// The path of the terminated actor.
    pub path: ActorPath,
    /// The identity of the terminated incarnation.
    pub id: ActorId,
}
