//! Handshake messages from arbitrary bytes: decoding never panics, and whatever decodes
//! re-encodes to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use troupe::transport::handshake::HandshakeMessage;

fuzz_target!(|data: &[u8]| {
    if let Ok(message) = HandshakeMessage::decode(data) {
        let encoded = message.encode().expect("a decoded message re-encodes");
        assert_eq!(&encoded[..], data);
    }
});
