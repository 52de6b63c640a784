//! How cluster protocol messages travel in transport frames: a one-byte channel tag, the
//! message in postcard (compact, schema-less binary serde; see docs/architecture.md), then its
//! extension records.
//!
//! # Evolving a message
//! Postcard is not self-describing: a field added inside a message would shift every byte
//! after it for an older reader. So a field added after a message first shipped goes into an
//! **extension record** after the message: a postcard byte string (varint length, bytes), the
//! records of a message kind numbered by their position. A reader decodes the records it
//! knows, counts and skips the ones after them (a newer node wrote them), and treats missing
//! ones as absent (an older node). A shipped record's layout is frozen; a later change appends
//! another record. What cannot be skipped — a new message kind, a changed meaning — needs a
//! protocol version bump, and is sent only to peers whose
//! [`Transport::peer_version`](crate::transport::Transport::peer_version) has it.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::membership::ClusterMsg;

/// The channel tag of membership protocol frames.
pub(super) const CLUSTER_CHANNEL: u8 = 0x01;

/// A frame that is not a valid cluster message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum WireError {
    /// The frame is for another channel (or empty).
    #[error("frame is not a cluster protocol frame (channel tag {0:?})")]
    OtherChannel(Option<u8>),
    /// The body does not decode.
    #[error("malformed cluster message: {0}")]
    Malformed(String),
}

/// The extension records a message kind has in this build, and their values.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Extensions {
    /// Protocol 3 (the `wire-next` test build): when the heartbeat was sent, Unix ms.
    pub heartbeat_sent_at_ms: Option<u64>,
}

/// The first extension record of a heartbeat (protocol 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct HeartbeatTiming {
    sent_at_ms: u64,
}

/// Records of `message`'s kind that this build knows how to read.
fn known_records(message: &ClusterMsg) -> usize {
    match message {
        ClusterMsg::Heartbeat { .. } if cfg!(feature = "wire-next") => 1,
        _ => 0,
    }
}

/// A decoded cluster frame: the message, the extension records this build read, and how many
/// it skipped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct DecodedFrame {
    /// The message.
    pub message: ClusterMsg,
    /// The extension values this build knows.
    pub extensions: Extensions,
    /// Records read.
    pub records_read: usize,
    /// Records after the known ones, skipped.
    pub records_skipped: usize,
}

/// Encode a cluster message as a frame payload, with no extension records.
#[cfg(test)]
#[must_use]
pub(super) fn encode_cluster_frame(message: &ClusterMsg) -> Bytes {
    encode_cluster_frame_with(message, &Extensions::default())
}

/// Encode a cluster message and the extension records this build writes for it.
#[must_use]
pub(super) fn encode_cluster_frame_with(message: &ClusterMsg, extensions: &Extensions) -> Bytes {
    let mut out = vec![CLUSTER_CHANNEL];
    // Serializing plain data into a Vec cannot fail.
    let mut out = postcard::to_extend(message, std::mem::take(&mut out))
        .expect("cluster messages always serialize");
    if let (ClusterMsg::Heartbeat { .. }, Some(sent_at_ms)) =
        (message, extensions.heartbeat_sent_at_ms)
    {
        if known_records(message) >= 1 {
            push_record(&mut out, &HeartbeatTiming { sent_at_ms });
        }
    }
    Bytes::from(out)
}

fn push_record<T: Serialize>(out: &mut Vec<u8>, record: &T) {
    let body = postcard::to_allocvec(record).expect("records always serialize");
    // A record is a postcard byte string: varint length, then the bytes.
    let taken = std::mem::take(out);
    *out = postcard::to_extend(&serde_bytes_ref(&body), taken).expect("bytes always serialize");
}

/// Serializes a slice as a byte string, not as a sequence.
struct ByteString<'a>(&'a [u8]);

impl Serialize for ByteString<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(self.0)
    }
}

fn serde_bytes_ref(bytes: &[u8]) -> ByteString<'_> {
    ByteString(bytes)
}

/// Decode a frame payload as a cluster message (extension records checked and dropped).
#[cfg(test)]
pub(super) fn decode_cluster_frame(payload: &[u8]) -> Result<ClusterMsg, WireError> {
    decode_cluster_frame_with(payload).map(|decoded| decoded.message)
}

/// Decode a frame payload: the message, then every extension record (which must be
/// well-formed to the last byte), reading the ones this build knows.
pub(super) fn decode_cluster_frame_with(payload: &[u8]) -> Result<DecodedFrame, WireError> {
    let body = match payload.split_first() {
        Some((&CLUSTER_CHANNEL, body)) => body,
        other => return Err(WireError::OtherChannel(other.map(|(tag, _)| *tag))),
    };
    let malformed = |e: postcard::Error| WireError::Malformed(e.to_string());
    let (message, mut rest) = postcard::take_from_bytes::<ClusterMsg>(body).map_err(malformed)?;
    let known = known_records(&message);
    let mut decoded = DecodedFrame {
        message,
        extensions: Extensions::default(),
        records_read: 0,
        records_skipped: 0,
    };
    let mut index = 0;
    while !rest.is_empty() {
        let (record, tail) = postcard::take_from_bytes::<&[u8]>(rest).map_err(malformed)?;
        rest = tail;
        if index < known {
            if let (ClusterMsg::Heartbeat { .. }, 0) = (&decoded.message, index) {
                // A record is frozen once shipped; bytes after its fields belong to no one.
                let (timing, _) =
                    postcard::take_from_bytes::<HeartbeatTiming>(record).map_err(malformed)?;
                decoded.extensions.heartbeat_sent_at_ms = Some(timing.sent_at_ms);
            }
            decoded.records_read += 1;
        } else {
            decoded.records_skipped += 1;
        }
        index += 1;
    }
    Ok(decoded)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn cluster_messages_round_trip() {
        let message = ClusterMsg::Heartbeat { sequence: 42 };
        assert_eq!(
            decode_cluster_frame(&encode_cluster_frame(&message)),
            Ok(message)
        );
    }

    #[test]
    fn a_record_this_build_does_not_know_is_skipped_and_counted() {
        let message = ClusterMsg::Heartbeat { sequence: 7 };
        let mut bytes = encode_cluster_frame(&message).to_vec();
        // What a later build appends: two records of its own.
        push_record(&mut bytes, &HeartbeatTiming { sent_at_ms: 1 });
        push_record(&mut bytes, &(5u8, "more".to_owned()));
        let decoded = decode_cluster_frame_with(&bytes).unwrap();
        assert_eq!(decoded.message, message);
        assert_eq!(decoded.records_read + decoded.records_skipped, 2);
        assert_eq!(decoded.records_read, known_records(&message));
        // Junk after the message is not a record: refused, as before.
        let mut junk = encode_cluster_frame(&message).to_vec();
        junk.extend_from_slice(&[0xFF, 0xFF, 0xFF]);
        assert!(decode_cluster_frame_with(&junk).is_err());
    }

    #[test]
    fn a_message_from_an_older_build_reads_its_missing_records_as_absent() {
        let message = ClusterMsg::Heartbeat { sequence: 9 };
        let decoded = decode_cluster_frame_with(&encode_cluster_frame(&message)).unwrap();
        assert_eq!(decoded.extensions, Extensions::default());
        assert_eq!((decoded.records_read, decoded.records_skipped), (0, 0));
    }

    #[cfg(feature = "wire-next")]
    #[test]
    fn the_next_build_writes_and_reads_the_heartbeat_timing() {
        let message = ClusterMsg::Heartbeat { sequence: 3 };
        let ext = Extensions {
            heartbeat_sent_at_ms: Some(1234),
        };
        let decoded =
            decode_cluster_frame_with(&encode_cluster_frame_with(&message, &ext)).unwrap();
        assert_eq!(decoded.extensions, ext);
        assert_eq!(decoded.records_read, 1);
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = decode_cluster_frame(&bytes);
        }
    }
}
