//! An acceptor's handshake fed arbitrary messages (the input split into frames at arbitrary
//! points): it never panics, never establishes without the secret, and sends nothing but its
//! Hello to a peer that has not proven the secret.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use tokio::time::Instant;
use troupe::UniqueAddress;
use troupe::transport::handshake::{
    HELLO_LEN, Handshake, HandshakeAction, HandshakeOptions, HandshakeEvent, Role, step,
};
use troupe::transport::{ClusterSecret, ProtocolVersions};
use troupe::Address;

fuzz_target!(|data: &[u8]| {
    let config = HandshakeOptions {
        local: UniqueAddress {
            address: Address::new("fuzz", "127.0.0.1", 2552),
            incarnation: 7,
        },
        secret: ClusterSecret::new("a secret the fuzzer does not know").unwrap(),
        role: Role::Acceptor,
        expected_peer: None,
        versions: ProtocolVersions::THIS_BUILD,
    };
    let (mut state, actions) = step(Handshake::new(config, [1; 32]), HandshakeEvent::Start, Instant::now());
    let mut sent: Vec<Bytes> = Vec::new();
    let collect = |actions: Vec<HandshakeAction>, sent: &mut Vec<Bytes>| {
        for action in actions {
            match action {
                HandshakeAction::Send(bytes) => sent.push(bytes),
                HandshakeAction::Established { .. } => panic!("established without the secret"),
                HandshakeAction::Reject(_) => {}
            }
        }
    };
    collect(actions, &mut sent);
    // Each input byte below 8 ends a message: cheap framing that reaches every state.
    for message in data.split(|b| *b < 8) {
        if state.is_finished() {
            break;
        }
        let actions;
        (state, actions) = step(state, HandshakeEvent::Received(Bytes::copy_from_slice(message)), Instant::now());
        collect(actions, &mut sent);
    }
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].len(), HELLO_LEN);
});
