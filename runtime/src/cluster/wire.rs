//! How cluster protocol messages travel in transport frames: a one-byte channel tag, then the
//! message in postcard (compact, schema-less binary serde; see docs/architecture.md).

use bytes::Bytes;

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

/// Encode a cluster message as a frame payload.
#[must_use]
pub(super) fn encode_cluster_frame(message: &ClusterMsg) -> Bytes {
    let mut out = vec![CLUSTER_CHANNEL];
    // Serializing plain data into a Vec cannot fail.
    let body = postcard::to_allocvec(message).expect("cluster messages always serialize");
    out.extend_from_slice(&body);
    Bytes::from(out)
}

/// Decode a frame payload as a cluster message.
pub(super) fn decode_cluster_frame(payload: &[u8]) -> Result<ClusterMsg, WireError> {
    match payload.split_first() {
        Some((&CLUSTER_CHANNEL, body)) => {
            postcard::from_bytes(body).map_err(|e| WireError::Malformed(e.to_string()))
        }
        other => Err(WireError::OtherChannel(other.map(|(tag, _)| *tag))),
    }
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

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = decode_cluster_frame(&bytes);
        }
    }
}
