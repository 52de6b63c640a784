//! Wire envelopes from arbitrary bytes: decoding never panics, and whatever decodes
//! round-trips.
#![no_main]

use libfuzzer_sys::fuzz_target;
use troupe::remoting::WireEnvelope;

fuzz_target!(|data: &[u8]| {
    if let Ok(envelope) = WireEnvelope::decode(data) {
        let encoded = envelope.encode().expect("a decoded envelope re-encodes");
        assert_eq!(
            WireEnvelope::decode(&encoded).expect("re-decodes"),
            envelope
        );
    }
});
