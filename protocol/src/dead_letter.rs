//! Dead letters: messages that could not be delivered.

use serde::{Deserialize, Serialize};

/// `DeadLetter`: one undeliverable message, as the runtime published it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DeadLetterEvent {
    /// Where the message was going (actor path).
    #[cfg_attr(feature = "openapi", schema(max_length = 1024))]
    pub recipient: String,
    /// Who sent it, when known.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(max_length = 1024))]
    pub sender: Option<String>,
    /// The message's Rust type name; longer than 1024 bytes, it is stored shortened to 1024
    /// and marked (`…[truncated from N bytes]`).
    pub message_type: String,
    /// Why it was not delivered (`recipient stopped`, `recipient mailbox full`, …); longer
    /// than 1024 bytes, it is stored shortened to 1024 and marked.
    pub reason: String,
}
