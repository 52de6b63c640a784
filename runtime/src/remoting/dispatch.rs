//! The inbound dispatcher: one frame from a verified peer (or the loopback) to its channel,
//! an actor message to its local recipient, and whatever cannot be delivered to dead letters.

use std::sync::atomic::Ordering;

use super::envelope::WireEnvelope;
use super::watches::RemoteSystemMsg;
use super::{
    ACTOR_CHANNEL, ASK_REPLY_CHANNEL, RemoteMessage, Remoting, SYSTEM_CHANNEL, with_context,
};
use crate::address::{Address, UniqueAddress};
use crate::dead_letter::{DeadLetter, DeadLetterReason};
use crate::path::ActorPath;
use crate::transport::InboundFrame;

impl Remoting {
    /// Handle one inbound frame from a verified peer (or the loopback).
    pub fn dispatch(&self, frame: InboundFrame) {
        let Some((&channel, body)) = frame.payload.split_first() else {
            self.stats.malformed_frames.fetch_add(1, Ordering::Relaxed);
            return;
        };
        match channel {
            ACTOR_CHANNEL => match WireEnvelope::decode(body) {
                Ok(envelope) => self.deliver(&frame.from, envelope),
                Err(error) => {
                    self.stats.malformed_frames.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(peer = %frame.from, %error, "dropped malformed actor envelope");
                }
            },
            ASK_REPLY_CHANNEL => match postcard::from_bytes::<(u64, Vec<u8>)>(body) {
                Ok((id, reply)) => self.complete_ask(id, &reply),
                Err(error) => {
                    self.stats.malformed_frames.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(peer = %frame.from, %error, "dropped malformed ask reply");
                }
            },
            SYSTEM_CHANNEL => match postcard::from_bytes::<RemoteSystemMsg>(body) {
                Ok(message) => self.on_system_message(&frame.from, message),
                Err(error) => {
                    self.stats.malformed_frames.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(peer = %frame.from, %error, "dropped malformed remote system message");
                }
            },
            other => {
                let owner = self.channels.read().get(&other).cloned();
                match owner {
                    Some(owner) => {
                        let _ = owner.send(frame);
                    }
                    // Nobody owns it (yet: a peer may gossip before the cluster has started
                    // here). Dropped, counted; the protocols above resend.
                    None => {
                        self.stats
                            .unowned_channel_frames
                            .fetch_add(1, Ordering::Relaxed);
                        tracing::debug!(peer = %frame.from, channel = other, "dropped frame on a channel nobody owns");
                    }
                }
            }
        }
    }

    pub(super) fn dead_letter(
        &self,
        recipient: &str,
        sender: Option<&str>,
        message_type: &'static str,
        reason: DeadLetterReason,
    ) {
        let Some(system) = self.system() else { return };
        let local_path = |path: &str| {
            let (_, elements) = crate::path::parse(path).unwrap_or((None, Vec::new()));
            elements
                .iter()
                .fold(system.shared.root.clone(), |p, e| p.child(e))
        };
        let recipient = local_path(recipient).with_address(&self.local.address);
        let sender = sender.map(|s| match crate::path::parse_address(s) {
            Some(address) => local_path(s).with_address(&address),
            None => local_path(s),
        });
        system.dead_letters().publish(DeadLetter {
            recipient,
            sender,
            message_type,
            reason,
        });
    }

    fn deliver(&self, from: &UniqueAddress, envelope: WireEnvelope) {
        let deliver = self
            .registry
            .read()
            .get(envelope.manifest.as_str())
            .cloned();
        match deliver {
            Some(deliver) => deliver(self, from, envelope),
            None => {
                self.stats.unknown_manifests.fetch_add(1, Ordering::Relaxed);
                let reason = DeadLetterReason::UnknownManifest {
                    manifest: envelope.manifest.clone(),
                };
                self.dead_letter(
                    &envelope.recipient,
                    envelope.sender.as_deref(),
                    "unknown",
                    reason,
                );
            }
        }
    }

    /// Decode and deliver to the local recipient. The sender path's node is always the one the
    /// transport verified (`from`), whatever the envelope claims: only the path below the node
    /// comes from the payload.
    pub(super) fn deliver_local<M: RemoteMessage>(
        &self,
        from: &UniqueAddress,
        envelope: WireEnvelope,
    ) {
        let Some(system) = self.system() else { return };
        let target = match self.resolve_cached::<M>(&system, &envelope.recipient) {
            Ok(target) => target,
            Err(_) => {
                self.stats
                    .unknown_recipients
                    .fetch_add(1, Ordering::Relaxed);
                self.dead_letter(
                    &envelope.recipient,
                    envelope.sender.as_deref(),
                    std::any::type_name::<M>(),
                    DeadLetterReason::UnknownRecipient,
                );
                return;
            }
        };
        let remoting = self.arc();
        match with_context(&remoting, || postcard::from_bytes::<M>(&envelope.body)) {
            Ok(message) => {
                let elements = envelope
                    .sender
                    .as_deref()
                    .and_then(crate::path::parse)
                    .filter(|(_, elements)| !elements.is_empty())
                    .map(|(_, elements)| {
                        elements.iter().map(|e| format!("/{e}")).collect::<String>()
                    });
                let origin = match elements {
                    Some(elements) => ActorPath::remote(&from.address, &elements),
                    None => self.origin_root(&from.address),
                };
                target.tell_from(message, &origin);
            }
            Err(error) => {
                self.stats.malformed_frames.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(peer = %from, recipient = %envelope.recipient, %error, "undecodable message body");
                self.dead_letter(
                    &envelope.recipient,
                    envelope.sender.as_deref(),
                    std::any::type_name::<M>(),
                    DeadLetterReason::Undecodable,
                );
            }
        }
    }

    fn origin_root(&self, address: &Address) -> ActorPath {
        if let Some(path) = self.origins.read().get(address) {
            return path.clone();
        }
        let path = ActorPath::remote(address, "");
        self.origins.write().insert(address.clone(), path.clone());
        path
    }
}
