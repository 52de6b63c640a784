//! Dead letters: every message that could not be delivered, published on the event stream.
//!
//! Nothing is dropped silently. A message that cannot reach its recipient — the recipient has
//! stopped, no actor lives at the path, a bounded mailbox is full, an ask's asker gave up, a router
//! has no routees — becomes a [`DeadLetter`] event. Subscribe with
//! `system.event_stream().subscribe::<DeadLetter>()`.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::event_stream::EventStream;
use crate::path::ActorPath;

/// A message that could not be delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    /// Where the message was going.
    pub recipient: ActorPath,
    /// Who sent it, when known.
    pub sender: Option<ActorPath>,
    /// The Rust type name of the message.
    pub message_type: &'static str,
    /// Why it was not delivered.
    pub reason: DeadLetterReason,
}

/// Why a message became a dead letter. Every reason is a variant, so the control plane can
/// group dead letters by reason; where it happened is the recipient path. New reasons may be
/// added, so a `match` needs a wildcard arm.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeadLetterReason {
    /// The recipient had stopped (or was stopping) before it took the message.
    RecipientStopped,
    /// No actor lives at the recipient path.
    UnknownRecipient,
    /// The recipient's bounded mailbox was full.
    MailboxFull,
    /// An ask reply whose asker had already given up (timed out or dropped the request).
    AskerGone,
    /// A router had no routee to send it to.
    NoRoutees,
    /// The transport did not take the message for the recipient's node (its queue to that
    /// node was full, or the transport had shut down).
    NotSent,
    /// The message could not be serialized for the network.
    Unserializable,
    /// The receiving node could not decode the message.
    Undecodable,
    /// The receiving node has no message type registered under the message's manifest.
    UnknownManifest {
        /// The manifest the message carried.
        manifest: String,
    },
    /// A cluster singleton's manager or proxy held the message (nobody hosted it yet) and its
    /// buffer was full.
    HoldFull,
    /// A cluster singleton's manager held the message for the maximum time and no instance
    /// started.
    HoldExpired,
    /// A cluster singleton's manager will not host (it opted out after its instance stopped,
    /// or it is stopping).
    NotHosting,
    /// The message was routed to this node as a cluster singleton's host, but this node runs
    /// no manager for it.
    NoManager,
    /// A message for a virtual actor (the recipient path names its host actor,
    /// `/system/virtual-<type>`) could not reach an activation of `key`.
    VirtualActor {
        /// The virtual actor's key.
        key: String,
        /// Why.
        failure: VirtualActorFailure,
    },
}

/// Why a message for a virtual actor became a dead letter.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum VirtualActorFailure {
    /// The key's buffer (messages waiting while its activation is looked up, claimed, stopped or
    /// moved) was full.
    BufferFull,
    /// The message was forwarded between hosts the maximum number of times.
    TooManyHops,
    /// The placement policy found (or chose) no host for a new activation.
    NoHost,
    /// The directory named an owner that is not a member in the sending host's view.
    OwnerNotMember,
    /// A directory lookup or claim failed; the directory's error.
    DirectoryFailed(String),
    /// The host holding the message was fenced (left the cluster ungracefully).
    Fenced,
    /// The host that should run the activation has not started this virtual actor type, or has
    /// stopped it.
    NotStarted,
    /// The message could not be encoded for (or decoded from) the hop between two hosts.
    Codec(String),
}

impl fmt::Display for VirtualActorFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BufferFull => f.write_str("buffer full while the activation was not ready"),
            Self::TooManyHops => f.write_str("forwarded too many times between hosts"),
            Self::NoHost => f.write_str("no host to place the activation on"),
            Self::OwnerNotMember => f.write_str("the directory's owner is not a member"),
            Self::DirectoryFailed(error) => write!(f, "directory failed: {error}"),
            Self::Fenced => f.write_str("the host was fenced"),
            Self::NotStarted => f.write_str("the virtual actor type is not started on the host"),
            Self::Codec(error) => write!(f, "does not encode or decode between hosts: {error}"),
        }
    }
}

impl fmt::Display for DeadLetterReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::RecipientStopped => f.write_str("recipient stopped"),
            Self::UnknownRecipient => f.write_str("no actor at recipient path"),
            Self::MailboxFull => f.write_str("recipient mailbox full"),
            Self::AskerGone => f.write_str("asker no longer waiting"),
            Self::NoRoutees => f.write_str("router has no routees"),
            Self::NotSent => f.write_str("not sent: the transport refused it"),
            Self::Unserializable => f.write_str("does not serialize"),
            Self::Undecodable => f.write_str("does not decode on the receiving node"),
            Self::UnknownManifest { manifest } => write!(f, "unknown manifest {manifest:?}"),
            Self::HoldFull => f.write_str("singleton buffer full while nobody hosts"),
            Self::HoldExpired => f.write_str("held too long: no singleton instance started"),
            Self::NotHosting => f.write_str("singleton manager is not hosting"),
            Self::NoManager => f.write_str("no singleton manager on the elected host"),
            Self::VirtualActor { key, failure } => {
                write!(f, "virtual actor {key:?} not reached: {failure}")
            }
        }
    }
}

/// `system.dead_letters`: counts dead letters and publishes them on the event stream.
#[derive(Debug)]
pub struct DeadLetters {
    events: EventStream,
    count: AtomicU64,
}

impl DeadLetters {
    pub(crate) fn new(events: EventStream) -> Self {
        Self {
            events,
            count: AtomicU64::new(0),
        }
    }

    /// Record and publish one dead letter.
    pub fn publish(&self, dead_letter: DeadLetter) {
        self.count.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(
            recipient = %dead_letter.recipient,
            message_type = dead_letter.message_type,
            reason = %dead_letter.reason,
            "dead letter"
        );
        self.events.publish(dead_letter);
    }

    /// How many dead letters this system has published.
    #[must_use]
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }
}
