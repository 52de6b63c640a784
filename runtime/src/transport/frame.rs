//! Length-prefixed frames: a `u32` big-endian payload length, then the payload.
//!
//! # Untrusted input
//! [`FrameDecoder::decode`] reads bytes straight off a socket. It checks a length prefix
//! against the configured maximum *before* reserving any memory for the payload, so a peer
//! cannot make us allocate by announcing a huge frame, and it never panics: every input is
//! either a frame, "need more bytes", or a [`FrameError`].

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// Bytes in the length prefix.
pub const LENGTH_PREFIX_LEN: usize = 4;

/// The default maximum payload size: 1 MiB. Large enough for any single actor message we
/// expect (bulk data belongs in a stream, not one frame), small enough that a connection's
/// worst-case buffer stays modest.
pub const DEFAULT_MAX_FRAME_SIZE: usize = 1024 * 1024;

/// Why bytes are not a valid frame stream.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// A length prefix announces more than the maximum frame size.
    #[error("frame length {length} exceeds the maximum frame size of {max} bytes")]
    Oversized {
        /// The announced payload length.
        length: u64,
        /// The configured maximum.
        max: usize,
    },
    /// The stream ended in the middle of a frame.
    #[error("stream ended inside a frame: {buffered} of {needed} bytes received")]
    Truncated {
        /// Bytes of the unfinished frame (prefix included) that arrived.
        buffered: usize,
        /// Bytes that frame needs (prefix included), or the prefix length if even it is
        /// incomplete.
        needed: usize,
    },
    /// A frame to encode is larger than the maximum.
    #[error("payload of {length} bytes exceeds the maximum frame size of {max} bytes")]
    PayloadTooLarge {
        /// The payload's length.
        length: usize,
        /// The configured maximum.
        max: usize,
    },
}

/// One step of decoding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded {
    /// A complete frame's payload, removed from the buffer.
    Frame(Bytes),
    /// The buffer holds no complete frame yet; at least `missing` more bytes are needed.
    NeedMore {
        /// Bytes still missing for the next frame (or its prefix).
        missing: usize,
    },
}

/// Splits a growing buffer into frames, enforcing a maximum frame size.
#[derive(Debug, Clone, Copy)]
pub struct FrameDecoder {
    max_frame_size: usize,
}

impl FrameDecoder {
    /// A decoder accepting payloads of at most `max_frame_size` bytes (capped at `u32::MAX`,
    /// the largest a prefix can say).
    #[must_use]
    pub fn new(max_frame_size: usize) -> Self {
        Self {
            max_frame_size: max_frame_size.min(u32::MAX as usize),
        }
    }

    /// The largest payload this decoder accepts.
    #[must_use]
    pub fn max_frame_size(&self) -> usize {
        self.max_frame_size
    }

    /// Takes the next frame off the front of `buf`, or says how many bytes are missing.
    ///
    /// On `NeedMore` the buffer is untouched; when the announced length is known, the caller
    /// may reserve `missing` bytes (it is bounded by the maximum frame size).
    ///
    /// # Errors
    /// [`FrameError::Oversized`] when the next prefix announces more than the maximum; the
    /// stream cannot be resynchronised after that, so the connection must be closed.
    pub fn decode(&self, buf: &mut BytesMut) -> Result<Decoded, FrameError> {
        let Some(length) = announced_length(buf) else {
            return Ok(Decoded::NeedMore {
                missing: LENGTH_PREFIX_LEN - buf.len(),
            });
        };
        if length > self.max_frame_size {
            return Err(FrameError::Oversized {
                length: length as u64,
                max: self.max_frame_size,
            });
        }
        let needed = LENGTH_PREFIX_LEN + length;
        if buf.len() < needed {
            return Ok(Decoded::NeedMore {
                missing: needed - buf.len(),
            });
        }
        buf.advance(LENGTH_PREFIX_LEN);
        Ok(Decoded::Frame(buf.split_to(length).freeze()))
    }

    /// Checks that a stream which has ended left no partial frame behind.
    ///
    /// # Errors
    /// [`FrameError::Truncated`] when `buf` holds the start of a frame;
    /// [`FrameError::Oversized`] when that start already announces too much.
    pub fn finish(&self, buf: &BytesMut) -> Result<(), FrameError> {
        if buf.is_empty() {
            return Ok(());
        }
        let needed = match announced_length(buf) {
            None => LENGTH_PREFIX_LEN,
            Some(length) if length > self.max_frame_size => {
                return Err(FrameError::Oversized {
                    length: length as u64,
                    max: self.max_frame_size,
                });
            }
            Some(length) => LENGTH_PREFIX_LEN + length,
        };
        Err(FrameError::Truncated {
            buffered: buf.len(),
            needed,
        })
    }
}

/// The payload length the prefix at the front of `buf` announces, once all of it is there.
fn announced_length(buf: &[u8]) -> Option<usize> {
    let prefix: [u8; LENGTH_PREFIX_LEN] = buf.get(..LENGTH_PREFIX_LEN)?.try_into().ok()?;
    Some(u32::from_be_bytes(prefix) as usize)
}

/// Appends `payload` as one frame to `dst`.
///
/// # Errors
/// [`FrameError::PayloadTooLarge`] when `payload` is longer than `max_frame_size` (or than a
/// `u32` can say); nothing is written then.
pub fn encode_frame(
    payload: &[u8],
    max_frame_size: usize,
    dst: &mut BytesMut,
) -> Result<(), FrameError> {
    let too_large = || FrameError::PayloadTooLarge {
        length: payload.len(),
        max: max_frame_size,
    };
    if payload.len() > max_frame_size {
        return Err(too_large());
    }
    let length = u32::try_from(payload.len()).map_err(|_| too_large())?;
    dst.reserve(LENGTH_PREFIX_LEN + payload.len());
    dst.put_u32(length);
    dst.put_slice(payload);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn frames(payloads: &[&[u8]]) -> BytesMut {
        let mut buf = BytesMut::new();
        for p in payloads {
            encode_frame(p, 1024, &mut buf).unwrap();
        }
        buf
    }

    #[test]
    fn frames_round_trip_in_order_including_empty_ones() {
        let mut buf = frames(&[b"one", b"", b"three"]);
        let decoder = FrameDecoder::new(1024);
        let mut out = Vec::new();
        while let Decoded::Frame(f) = decoder.decode(&mut buf).unwrap() {
            out.push(f);
        }
        assert_eq!(out, vec![&b"one"[..], &b""[..], &b"three"[..]]);
        assert!(buf.is_empty());
        decoder.finish(&buf).unwrap();
    }

    #[test]
    fn truncated_input_reports_how_much_is_missing_and_leaves_the_buffer_alone() {
        let decoder = FrameDecoder::new(1024);
        let mut buf = BytesMut::from(&[0u8, 0][..]);
        assert_eq!(
            decoder.decode(&mut buf).unwrap(),
            Decoded::NeedMore { missing: 2 }
        );
        let mut buf = BytesMut::from(&[0u8, 0, 0, 10, 1, 2, 3][..]);
        assert_eq!(
            decoder.decode(&mut buf).unwrap(),
            Decoded::NeedMore { missing: 7 }
        );
        assert_eq!(buf.len(), 7);
        assert_eq!(
            decoder.finish(&buf).unwrap_err(),
            FrameError::Truncated {
                buffered: 7,
                needed: 14
            }
        );
    }

    #[test]
    fn a_length_above_the_maximum_is_rejected_from_the_prefix_alone_with_both_numbers() {
        let decoder = FrameDecoder::new(1000);
        // Only the prefix has arrived: the verdict must not wait for (or buffer) the payload.
        let mut buf = BytesMut::from(&1001u32.to_be_bytes()[..]);
        let err = decoder.decode(&mut buf).unwrap_err();
        assert_eq!(
            err,
            FrameError::Oversized {
                length: 1001,
                max: 1000
            }
        );
        assert!(err.to_string().contains("1001") && err.to_string().contains("1000"));
        let mut buf = BytesMut::from(&u32::MAX.to_be_bytes()[..]);
        assert!(matches!(
            decoder.decode(&mut buf),
            Err(FrameError::Oversized { .. })
        ));
    }

    #[test]
    fn a_frame_exactly_at_the_maximum_is_accepted() {
        let decoder = FrameDecoder::new(8);
        let mut buf = BytesMut::new();
        encode_frame(&[7; 8], 8, &mut buf).unwrap();
        assert_eq!(
            decoder.decode(&mut buf).unwrap(),
            Decoded::Frame(Bytes::from(vec![7; 8]))
        );
    }

    #[test]
    fn encoding_a_payload_above_the_maximum_fails_and_writes_nothing() {
        let mut buf = BytesMut::new();
        let err = encode_frame(&[0; 9], 8, &mut buf).unwrap_err();
        assert_eq!(err, FrameError::PayloadTooLarge { length: 9, max: 8 });
        assert!(buf.is_empty());
    }

    proptest! {
        #[test]
        fn decoding_arbitrary_bytes_never_panics(
            bytes in proptest::collection::vec(any::<u8>(), 0..512),
            max in 0usize..300,
        ) {
            let decoder = FrameDecoder::new(max);
            let mut buf = BytesMut::from(&bytes[..]);
            loop {
                match decoder.decode(&mut buf) {
                    Ok(Decoded::Frame(f)) => prop_assert!(f.len() <= max),
                    Ok(Decoded::NeedMore { missing }) => {
                        prop_assert!(missing > 0 && missing <= LENGTH_PREFIX_LEN + max);
                        let _ = decoder.finish(&buf);
                        break;
                    }
                    Err(_) => break,
                }
            }
        }

        #[test]
        fn valid_frames_round_trip_through_any_split_of_the_stream(
            payloads in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 0..8),
            cut in any::<prop::sample::Index>(),
        ) {
            let mut stream = BytesMut::new();
            for p in &payloads {
                encode_frame(p, 64, &mut stream).unwrap();
            }
            // Feed the stream in two chunks split at an arbitrary point, as a socket might.
            let cut = cut.index(stream.len() + 1);
            let second = stream.split_off(cut);
            let decoder = FrameDecoder::new(64);
            let mut buf = stream;
            let mut out = Vec::new();
            for chunk in [None, Some(second)] {
                if let Some(chunk) = chunk {
                    buf.extend_from_slice(&chunk);
                }
                while let Decoded::Frame(f) = decoder.decode(&mut buf).unwrap() {
                    out.push(f.to_vec());
                }
            }
            prop_assert_eq!(out, payloads);
            prop_assert!(decoder.finish(&buf).is_ok());
        }
    }
}
