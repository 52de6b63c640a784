//! The frame decoder on arbitrary bytes fed in arbitrary chunks: it must never panic, never
//! yield a frame above the maximum, and never ask for more than a frame can need.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use troupe::transport::frame::{Decoded, FrameDecoder, LENGTH_PREFIX_LEN};

fuzz_target!(|data: &[u8]| {
    // The first two bytes choose the maximum frame size and the chunk size.
    let (max, chunk, stream) = match data {
        [m, c, rest @ ..] => (usize::from(*m) * 16, usize::from(*c).max(1), rest),
        _ => return,
    };
    let decoder = FrameDecoder::new(max);
    let mut buf = BytesMut::new();
    for piece in stream.chunks(chunk) {
        buf.extend_from_slice(piece);
        loop {
            match decoder.decode(&mut buf) {
                Ok(Decoded::Frame(frame)) => assert!(frame.len() <= max),
                Ok(Decoded::NeedMore { missing }) => {
                    assert!(missing > 0 && missing <= LENGTH_PREFIX_LEN + max);
                    break;
                }
                Err(_) => return,
            }
        }
    }
    let _ = decoder.finish(&buf);
});
