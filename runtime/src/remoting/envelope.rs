//! The wire envelope: who a remote message is for, who sent it, what type it is, and its
//! serialized body — encoded with postcard.
//!
//! # Why postcard
//! Measured against bincode 2, MessagePack and JSON by `runtime/benches/codec.rs`: postcard is
//! as small as bincode and the fastest encode+decode pair; its wire format is specified and
//! stable since 1.0. The table is in `docs/architecture.md`.
//!
//! # Untrusted input
//! [`WireEnvelope::decode`] reads a frame from a peer: every error is a value, lengths are
//! checked against the input before anything is allocated, and trailing bytes are an error.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// A remote message as it travels between nodes.
///
/// The sender path is informational (for replies and dead letters); *which node* sent the
/// envelope is what the transport verified, never this field.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireEnvelope {
    /// The recipient's actor path.
    pub recipient: String,
    /// The sending actor's path, if any.
    pub sender: Option<String>,
    /// The message type, as registered with the serializer registry.
    pub manifest: String,
    /// The serialized message.
    pub body: Bytes,
}

/// A borrowed [`WireEnvelope`] for sending: the same bytes on the wire, without copying the
/// path, manifest and body into owned buffers first.
#[derive(Debug, Clone, Copy, Serialize)]
pub(super) struct WireEnvelopeRef<'a> {
    /// The recipient's actor path.
    pub recipient: &'a str,
    /// The sending actor's path, if any.
    pub sender: Option<&'a str>,
    /// The message type's manifest.
    pub manifest: &'a str,
    /// The serialized message.
    pub body: RawBytes<'a>,
}

/// Bytes serialized as a byte string (like `Bytes`), not as a sequence of numbers.
#[derive(Debug, Clone, Copy)]
pub(super) struct RawBytes<'a>(pub &'a [u8]);

impl Serialize for RawBytes<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(self.0)
    }
}

impl WireEnvelopeRef<'_> {
    /// The envelope's wire bytes appended to `prefix` (a frame's channel tag, say).
    ///
    /// # Errors
    /// [`EnvelopeError::Encode`] if serialization fails.
    pub(super) fn encode_after(&self, prefix: Vec<u8>) -> Result<Vec<u8>, EnvelopeError> {
        postcard::to_extend(self, prefix).map_err(EnvelopeError::Encode)
    }
}

/// Why an envelope could not be encoded or decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvelopeError {
    /// The bytes are not an envelope.
    #[error("malformed wire envelope: {0}")]
    Malformed(#[source] postcard::Error),
    /// The bytes hold an envelope followed by more bytes.
    #[error("wire envelope followed by {0} unexpected bytes")]
    TrailingBytes(usize),
    /// The envelope could not be serialized.
    #[error("cannot encode wire envelope: {0}")]
    Encode(#[source] postcard::Error),
}

impl WireEnvelope {
    /// The envelope's wire bytes.
    ///
    /// # Errors
    /// [`EnvelopeError::Encode`] if serialization fails (it does not for these field types;
    /// the error is kept rather than a panic).
    pub fn encode(&self) -> Result<Bytes, EnvelopeError> {
        postcard::to_allocvec(self)
            .map(Bytes::from)
            .map_err(EnvelopeError::Encode)
    }

    /// Parses an envelope. Never panics.
    ///
    /// # Errors
    /// [`EnvelopeError::Malformed`] for bytes that are not an envelope,
    /// [`EnvelopeError::TrailingBytes`] when bytes follow it.
    pub fn decode(bytes: &[u8]) -> Result<Self, EnvelopeError> {
        let (envelope, rest) =
            postcard::take_from_bytes::<Self>(bytes).map_err(EnvelopeError::Malformed)?;
        if rest.is_empty() {
            Ok(envelope)
        } else {
            Err(EnvelopeError::TrailingBytes(rest.len()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_borrowed_envelope_encodes_to_the_same_bytes() {
        let owned = WireEnvelope {
            recipient: "/user/worker".into(),
            sender: Some("troupe://app@10.0.0.1:2552/user/client".into()),
            manifest: "app.Msg".into(),
            body: Bytes::from_static(&[1, 2, 3, 250]),
        };
        let borrowed = WireEnvelopeRef {
            recipient: &owned.recipient,
            sender: owned.sender.as_deref(),
            manifest: &owned.manifest,
            body: RawBytes(&owned.body),
        };
        let mut expected = vec![9];
        expected.extend_from_slice(&owned.encode().unwrap());
        assert_eq!(borrowed.encode_after(vec![9]).unwrap(), expected);
    }
    use proptest::prelude::*;

    fn typical() -> WireEnvelope {
        WireEnvelope {
            recipient: "troupe://app@127.0.0.1:2552/user/worker".into(),
            sender: Some("troupe://app@127.0.0.1:2553/user/client".into()),
            manifest: "demo.Ping".into(),
            body: Bytes::from_static(&[42; 64]),
        }
    }

    #[test]
    fn envelopes_round_trip() {
        let e = typical();
        assert_eq!(WireEnvelope::decode(&e.encode().unwrap()).unwrap(), e);
        let no_sender = WireEnvelope {
            sender: None,
            ..typical()
        };
        assert_eq!(
            WireEnvelope::decode(&no_sender.encode().unwrap()).unwrap(),
            no_sender
        );
    }

    #[test]
    fn trailing_and_truncated_bytes_are_errors() {
        let mut bytes = typical().encode().unwrap().to_vec();
        bytes.push(0);
        assert_eq!(
            WireEnvelope::decode(&bytes).unwrap_err(),
            EnvelopeError::TrailingBytes(1)
        );
        bytes.truncate(bytes.len() - 10);
        assert!(matches!(
            WireEnvelope::decode(&bytes),
            Err(EnvelopeError::Malformed(_))
        ));
    }

    #[test]
    fn a_huge_announced_length_is_an_error_not_an_allocation() {
        // A varint string length of ~2^63 followed by nothing.
        let bytes = [0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F];
        assert!(WireEnvelope::decode(&bytes).is_err());
    }

    proptest! {
        #[test]
        fn decoding_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = WireEnvelope::decode(&bytes);
        }
    }
}
