//! Dead letters: messages that could not be delivered.

use serde::{Deserialize, Serialize};

/// `DeadLetter`: one undeliverable message, as the runtime published it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DeadLetterEvent {
    /// Where the message was going (actor path).
    pub recipient: String,
    /// Who sent it, when known.
    #[serde(default)]
    pub sender: Option<String>,
    /// The message's Rust type name.
    pub message_type: String,
    /// Why it was not delivered (`recipient stopped`, `recipient mailbox full`, …).
    pub reason: String,
}
