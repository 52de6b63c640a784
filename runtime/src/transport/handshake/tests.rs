use proptest::prelude::*;

use super::*;

fn node(port: u16, incarnation: u64) -> UniqueAddress {
    UniqueAddress {
        address: Address::new("app", "127.0.0.1", port),
        incarnation,
    }
}

fn secret(s: &str) -> ClusterSecret {
    ClusterSecret::new(s).unwrap()
}

const SECRET: &str = "0123456789abcdef-cluster-secret";

fn versions(lowest: u16, highest: u16) -> ProtocolVersions {
    ProtocolVersions::new(lowest, highest).unwrap()
}

fn side_with(
    local: UniqueAddress,
    secret: ClusterSecret,
    role: Role,
    expected_peer: Option<Address>,
    nonce: u8,
    speaks: ProtocolVersions,
) -> Handshake {
    Handshake::new(
        HandshakeOptions {
            local,
            secret,
            role,
            expected_peer,
            versions: speaks,
        },
        [nonce; NONCE_LEN],
    )
}

fn side(
    local: UniqueAddress,
    secret: ClusterSecret,
    role: Role,
    expected_peer: Option<Address>,
    nonce: u8,
) -> Handshake {
    side_with(
        local,
        secret,
        role,
        expected_peer,
        nonce,
        ProtocolVersions::THIS_BUILD,
    )
}

fn sent(actions: Vec<HandshakeAction>) -> Vec<Bytes> {
    actions
        .into_iter()
        .filter_map(|a| match a {
            HandshakeAction::Send(b) => Some(b),
            _ => None,
        })
        .collect()
}

/// What one side of a run sent, in order.
#[derive(Debug, Default)]
struct Wire {
    from_initiator: Vec<Bytes>,
    from_acceptor: Vec<Bytes>,
}

/// Runs two handshakes against each other, delivering messages in order (each side stops
/// reading once it has finished, as the shell closes the connection), and returns what each
/// side concluded and everything that crossed the wire.
fn run_wire(mut a: Handshake, mut b: Handshake) -> (Handshake, Handshake, Wire) {
    let mut wire = Wire::default();
    let mut to_b = Vec::new();
    let mut to_a = Vec::new();
    let actions;
    (a, actions) = step(a, HandshakeEvent::Start, Instant::now());
    to_b.extend(sent(actions));
    let actions;
    (b, actions) = step(b, HandshakeEvent::Start, Instant::now());
    to_a.extend(sent(actions));
    while !to_a.is_empty() || !to_b.is_empty() {
        for msg in std::mem::take(&mut to_b) {
            wire.from_initiator.push(msg.clone());
            if !b.is_finished() {
                let actions;
                (b, actions) = step(b, HandshakeEvent::Received(msg), Instant::now());
                to_a.extend(sent(actions));
            }
        }
        for msg in std::mem::take(&mut to_a) {
            wire.from_acceptor.push(msg.clone());
            if !a.is_finished() {
                let actions;
                (a, actions) = step(a, HandshakeEvent::Received(msg), Instant::now());
                to_b.extend(sent(actions));
            }
        }
    }
    (a, b, wire)
}

fn run(a: Handshake, b: Handshake) -> (Handshake, Handshake) {
    let (a, b, _) = run_wire(a, b);
    (a, b)
}

fn established(h: &Handshake) -> Option<(&UniqueAddress, u16)> {
    match h {
        Handshake::Established { peer, version } => Some((peer, *version)),
        _ => None,
    }
}

fn rejection(h: &Handshake) -> Option<&HandshakeRejection> {
    match h {
        Handshake::Rejected { reason } => Some(reason),
        _ => None,
    }
}

/// Whether any message reveals the node: its incarnation, port, or host or system name.
fn reveals(messages: &[Bytes], who: &UniqueAddress) -> bool {
    let needles: Vec<Vec<u8>> = vec![
        who.incarnation.to_be_bytes().to_vec(),
        who.address.host.as_bytes().to_vec(),
        who.address.system.as_bytes().to_vec(),
    ];
    messages.iter().any(|m| {
        m.len() > HELLO_LEN
            || needles
                .iter()
                .any(|needle| m.windows(needle.len()).any(|w| w == needle.as_slice()))
    })
}

#[test]
fn sides_with_the_same_secret_learn_each_others_verified_identity_and_version() {
    let (a, b) = run(
        side(
            node(1, 11),
            secret(SECRET),
            Role::Initiator,
            Some(node(2, 0).address),
            1,
        ),
        side(node(2, 22), secret(SECRET), Role::Acceptor, None, 2),
    );
    let version = ProtocolVersions::THIS_BUILD.highest();
    assert_eq!(established(&a), Some((&node(2, 22), version)));
    assert_eq!(established(&b), Some((&node(1, 11), version)));
}

#[test]
fn a_client_without_the_secret_learns_nothing_about_the_acceptor() {
    let acceptor = node(2, 0x1122_3344_5566_7788);
    let (a, b, wire) = run_wire(
        side(
            node(1, 11),
            secret("another-secret-of-16"),
            Role::Initiator,
            None,
            1,
        ),
        side(acceptor.clone(), secret(SECRET), Role::Acceptor, None, 2),
    );
    assert_eq!(rejection(&b), Some(&HandshakeRejection::BadProof));
    assert_eq!(established(&a), None);
    // The acceptor sent its Hello and nothing else.
    assert_eq!(wire.from_acceptor.len(), 1);
    assert_eq!(wire.from_acceptor[0].len(), HELLO_LEN);
    assert!(!reveals(&wire.from_acceptor, &acceptor));
}

#[test]
fn a_node_answering_without_the_secret_learns_nothing_about_the_dialler() {
    let dialler = node(1, 0x0102_0304_0506_0708);
    let (a, b, wire) = run_wire(
        side(dialler.clone(), secret(SECRET), Role::Initiator, None, 1),
        // The impostor accepts any proof: it skips the check by pretending to share the
        // secret, yet its own identity tag is made with another one.
        side(
            node(2, 22),
            secret("impostor-secret-16b"),
            Role::Acceptor,
            None,
            2,
        ),
    );
    assert_eq!(rejection(&b), Some(&HandshakeRejection::BadProof));
    assert!(established(&a).is_none());
    assert!(!reveals(&wire.from_initiator, &dialler));

    // An impostor that sends a forged identity after the dialler's proof: rejected, and the
    // dialler still says nothing about itself.
    let (h, actions) = step(
        side(dialler.clone(), secret(SECRET), Role::Initiator, None, 1),
        HandshakeEvent::Start,
        Instant::now(),
    );
    let mut said = sent(actions);
    let impostor_hello = HandshakeMessage::Hello(Hello {
        versions: ProtocolVersions::THIS_BUILD,
        nonce: [9; NONCE_LEN],
    })
    .encode()
    .unwrap();
    let (h, actions) = step(h, HandshakeEvent::Received(impostor_hello), Instant::now());
    said.extend(sent(actions));
    let forged = HandshakeMessage::Identity(Identity {
        node: node(2, 22),
        tag: [0; TAG_LEN],
    })
    .encode()
    .unwrap();
    let (h, actions) = step(h, HandshakeEvent::Received(forged), Instant::now());
    said.extend(sent(actions));
    assert_eq!(rejection(&h), Some(&HandshakeRejection::BadProof));
    assert!(!reveals(&said, &dialler));
}

#[test]
fn the_secret_never_appears_in_any_message() {
    let (_, _, wire) = run_wire(
        side(node(1, 1), secret(SECRET), Role::Initiator, None, 9),
        side(node(2, 2), secret(SECRET), Role::Acceptor, None, 8),
    );
    assert_eq!(wire.from_initiator.len(), 3);
    assert_eq!(wire.from_acceptor.len(), 2);
    for msg in wire.from_initiator.iter().chain(&wire.from_acceptor) {
        assert!(!msg.windows(SECRET.len()).any(|w| w == SECRET.as_bytes()));
    }
    assert!(!format!("{:?}", secret(SECRET)).contains(SECRET));
}

#[test]
fn a_proof_from_another_connection_is_rejected() {
    // Record an initiator's proof on one connection…
    let (_, _, wire) = run_wire(
        side(node(1, 1), secret(SECRET), Role::Initiator, None, 1),
        side(node(2, 2), secret(SECRET), Role::Acceptor, None, 2),
    );
    let (recorded_hello, recorded_proof) = (
        wire.from_initiator[0].clone(),
        wire.from_initiator[1].clone(),
    );
    // …and replay it to an acceptor whose nonce differs.
    let (b, _) = step(
        side(node(2, 2), secret(SECRET), Role::Acceptor, None, 3),
        HandshakeEvent::Start,
        Instant::now(),
    );
    let (b, _) = step(b, HandshakeEvent::Received(recorded_hello), Instant::now());
    let (b, actions) = step(b, HandshakeEvent::Received(recorded_proof), Instant::now());
    assert_eq!(rejection(&b), Some(&HandshakeRejection::BadProof));
    assert!(sent(actions).is_empty());
}

#[test]
fn an_acceptor_identity_reflected_back_is_rejected() {
    let (a, _) = step(
        side(node(1, 1), secret(SECRET), Role::Initiator, None, 1),
        HandshakeEvent::Start,
        Instant::now(),
    );
    drop(a);
    let initiator_hello = HandshakeMessage::Hello(Hello {
        versions: ProtocolVersions::THIS_BUILD,
        nonce: [1; NONCE_LEN],
    })
    .encode()
    .unwrap();
    let (b, actions) = step(
        side(node(2, 2), secret(SECRET), Role::Acceptor, None, 2),
        HandshakeEvent::Start,
        Instant::now(),
    );
    let acceptor_hello = sent(actions).remove(0);
    let (b, _) = step(
        b,
        HandshakeEvent::Received(initiator_hello.clone()),
        Instant::now(),
    );
    let proof = secret(SECRET).tag(KIND_PROOF, &[&initiator_hello, &acceptor_hello]);
    let (b, actions) = step(
        b,
        HandshakeEvent::Received(HandshakeMessage::Proof(proof).encode().unwrap()),
        Instant::now(),
    );
    let acceptor_identity = sent(actions).remove(0);
    let (b, _) = step(
        b,
        HandshakeEvent::Received(acceptor_identity),
        Instant::now(),
    );
    assert_eq!(rejection(&b), Some(&HandshakeRejection::BadProof));
}

#[test]
fn a_release_and_the_next_agree_on_the_release_s_version() {
    let (a, b) = run(
        side_with(
            node(1, 1),
            secret(SECRET),
            Role::Initiator,
            None,
            1,
            versions(2, 3),
        ),
        side_with(
            node(2, 2),
            secret(SECRET),
            Role::Acceptor,
            None,
            2,
            versions(2, 2),
        ),
    );
    assert_eq!(established(&a).map(|(_, v)| v), Some(2));
    assert_eq!(established(&b).map(|(_, v)| v), Some(2));
    let (a, b) = run(
        side_with(
            node(1, 1),
            secret(SECRET),
            Role::Initiator,
            None,
            1,
            versions(2, 3),
        ),
        side_with(
            node(2, 2),
            secret(SECRET),
            Role::Acceptor,
            None,
            2,
            versions(2, 3),
        ),
    );
    assert_eq!(established(&a).map(|(_, v)| v), Some(3));
    assert_eq!(established(&b).map(|(_, v)| v), Some(3));
}

#[test]
fn nodes_without_a_common_version_are_refused_naming_both_ranges_before_any_proof() {
    let (a, b, wire) = run_wire(
        side_with(
            node(1, 1),
            secret(SECRET),
            Role::Initiator,
            None,
            1,
            versions(2, 2),
        ),
        side_with(
            node(2, 2),
            secret(SECRET),
            Role::Acceptor,
            None,
            2,
            versions(3, 4),
        ),
    );
    let expected = HandshakeRejection::VersionMismatch(VersionMismatch {
        ours: versions(2, 2),
        theirs: versions(3, 4),
    });
    assert_eq!(rejection(&a), Some(&expected));
    assert_eq!(
        rejection(&b),
        Some(&HandshakeRejection::VersionMismatch(VersionMismatch {
            ours: versions(3, 4),
            theirs: versions(2, 2),
        }))
    );
    assert!(
        expected
            .to_string()
            .contains("this node speaks 2, the peer 3-4")
    );
    assert_eq!(wire.from_initiator.len(), 1, "no proof is sent");
}

#[test]
fn a_version_1_node_is_refused_as_version_1() {
    // Troupe 0.1.0's Hello: magic, 'H', version 1, incarnation, port, system, host, nonce.
    let mut legacy = b"TRPHH".to_vec();
    legacy.extend_from_slice(&1u16.to_be_bytes());
    legacy.extend_from_slice(&7u64.to_be_bytes());
    legacy.extend_from_slice(&2552u16.to_be_bytes());
    legacy.extend_from_slice(b"\x03app\x09127.0.0.1");
    legacy.extend_from_slice(&[0; NONCE_LEN]);
    let (b, _) = step(
        side(node(2, 2), secret(SECRET), Role::Acceptor, None, 2),
        HandshakeEvent::Start,
        Instant::now(),
    );
    let (b, _) = step(b, HandshakeEvent::Received(legacy.into()), Instant::now());
    let reason = rejection(&b).unwrap().to_string();
    assert!(
        reason.contains(&format!(
            "this node speaks {}, the peer 1",
            ProtocolVersions::THIS_BUILD
        )),
        "{reason}"
    );
}

#[test]
fn an_initiator_rejects_a_peer_that_is_not_the_address_it_dialled() {
    let (a, _) = run(
        side(
            node(1, 1),
            secret(SECRET),
            Role::Initiator,
            Some(node(3, 0).address),
            1,
        ),
        side(node(2, 2), secret(SECRET), Role::Acceptor, None, 2),
    );
    assert!(matches!(
        rejection(&a),
        Some(HandshakeRejection::UnexpectedPeer { .. })
    ));
}

#[test]
fn a_peer_of_another_actor_system_is_rejected_by_whichever_side_learns_it() {
    let other = |port| UniqueAddress {
        address: Address::new("other", "127.0.0.1", port),
        incarnation: 2,
    };
    // The initiator learns the acceptor's system first and refuses to say more.
    let (a, b, wire) = run_wire(
        side(node(1, 1), secret(SECRET), Role::Initiator, None, 1),
        side(other(2), secret(SECRET), Role::Acceptor, None, 2),
    );
    assert!(matches!(
        rejection(&a),
        Some(HandshakeRejection::WrongSystem { .. })
    ));
    assert!(established(&b).is_none());
    assert_eq!(wire.from_initiator.len(), 2, "hello and proof, no identity");

    // An acceptor checks the initiator's system too (an initiator that did not check).
    let s = secret(SECRET);
    let (b, actions) = step(
        side(node(2, 2), s.clone(), Role::Acceptor, None, 2),
        HandshakeEvent::Start,
        Instant::now(),
    );
    let acceptor_hello = sent(actions).remove(0);
    let initiator_hello = HandshakeMessage::Hello(Hello {
        versions: ProtocolVersions::THIS_BUILD,
        nonce: [1; NONCE_LEN],
    })
    .encode()
    .unwrap();
    let (b, _) = step(
        b,
        HandshakeEvent::Received(initiator_hello.clone()),
        Instant::now(),
    );
    let proof = s.tag(KIND_PROOF, &[&initiator_hello, &acceptor_hello]);
    let (b, actions) = step(
        b,
        HandshakeEvent::Received(HandshakeMessage::Proof(proof).encode().unwrap()),
        Instant::now(),
    );
    let acceptor_identity = sent(actions).remove(0);
    let body = identity_body(&other(1)).unwrap();
    let tag = s.tag(
        Role::Initiator.identity_purpose(),
        &[&initiator_hello, &acceptor_hello, &acceptor_identity, &body],
    );
    let mut identity = body;
    identity.put_slice(&tag);
    let (b, _) = step(
        b,
        HandshakeEvent::Received(identity.freeze()),
        Instant::now(),
    );
    assert!(matches!(
        rejection(&b),
        Some(HandshakeRejection::WrongSystem { .. })
    ));
}

#[test]
fn messages_out_of_order_are_unexpected() {
    let (b, _) = step(
        side(node(2, 2), secret(SECRET), Role::Acceptor, None, 2),
        HandshakeEvent::Start,
        Instant::now(),
    );
    let proof = HandshakeMessage::Proof([0; TAG_LEN]).encode().unwrap();
    let (b, _) = step(b, HandshakeEvent::Received(proof), Instant::now());
    assert_eq!(
        rejection(&b),
        Some(&HandshakeRejection::UnexpectedMessage {
            expected: "hello",
            got: "proof"
        })
    );
    // An identity where the acceptor waits for a proof.
    let (b, _) = step(
        side(node(2, 2), secret(SECRET), Role::Acceptor, None, 2),
        HandshakeEvent::Start,
        Instant::now(),
    );
    let hello = HandshakeMessage::Hello(Hello {
        versions: ProtocolVersions::THIS_BUILD,
        nonce: [1; NONCE_LEN],
    })
    .encode()
    .unwrap();
    let (b, _) = step(b, HandshakeEvent::Received(hello), Instant::now());
    let identity = HandshakeMessage::Identity(Identity {
        node: node(1, 1),
        tag: [0; TAG_LEN],
    })
    .encode()
    .unwrap();
    let (b, actions) = step(b, HandshakeEvent::Received(identity), Instant::now());
    assert_eq!(
        rejection(&b),
        Some(&HandshakeRejection::UnexpectedMessage {
            expected: "proof",
            got: "identity"
        })
    );
    assert!(sent(actions).is_empty());
}

#[test]
fn before_the_proof_an_acceptor_accepts_only_small_messages() {
    let h = side(node(2, 2), secret(SECRET), Role::Acceptor, None, 2);
    assert_eq!(h.max_next_message_len(), MAX_UNPROVEN_MESSAGE_LEN);
    let (h, _) = step(h, HandshakeEvent::Start, Instant::now());
    assert_eq!(h.max_next_message_len(), MAX_UNPROVEN_MESSAGE_LEN);
    assert!(!h.has_peer_hello());
    let hello = HandshakeMessage::Hello(Hello {
        versions: ProtocolVersions::THIS_BUILD,
        nonce: [1; NONCE_LEN],
    })
    .encode()
    .unwrap();
    let (h, _) = step(h, HandshakeEvent::Received(hello), Instant::now());
    assert!(h.has_peer_hello());
    assert_eq!(h.max_next_message_len(), MAX_UNPROVEN_MESSAGE_LEN);
    assert_eq!(MAX_UNPROVEN_MESSAGE_LEN, 41);
}

#[test]
fn timeouts_and_closed_connections_reject_with_their_reason() {
    let h = side(node(2, 2), secret(SECRET), Role::Acceptor, None, 2);
    let (h, _) = step(h, HandshakeEvent::Start, Instant::now());
    let (h2, actions) = step(h.clone(), HandshakeEvent::TimedOut, Instant::now());
    assert_eq!(
        actions,
        vec![HandshakeAction::Reject(HandshakeRejection::TimedOut)]
    );
    assert!(h2.is_finished());
    let (h3, _) = step(h, HandshakeEvent::ConnectionFailed(None), Instant::now());
    assert_eq!(rejection(&h3), Some(&HandshakeRejection::Closed));
}

#[test]
fn short_secrets_are_refused() {
    assert_eq!(
        ClusterSecret::new("short").unwrap_err(),
        SecretTooShort { len: 5 }
    );
    assert!(ClusterSecret::new("").is_err());
}

#[test]
fn messages_round_trip_through_their_encoding() {
    let hello = HandshakeMessage::Hello(Hello {
        versions: versions(2, 7),
        nonce: [0xAB; NONCE_LEN],
    });
    let bytes = hello.encode().unwrap();
    assert_eq!(bytes.len(), HELLO_LEN);
    assert_eq!(HandshakeMessage::decode(&bytes).unwrap(), hello);
    let proof = HandshakeMessage::Proof([7; TAG_LEN]);
    assert_eq!(proof.encode().unwrap().len(), PROOF_LEN);
    assert_eq!(
        HandshakeMessage::decode(&proof.encode().unwrap()).unwrap(),
        proof
    );
    let long_name = "h".repeat(255);
    let identity = HandshakeMessage::Identity(Identity {
        node: UniqueAddress {
            address: Address::new(&long_name, &long_name, 2552),
            incarnation: u64::MAX,
        },
        tag: [3; TAG_LEN],
    });
    let encoded = identity.encode().unwrap();
    assert_eq!(encoded.len(), MAX_HANDSHAKE_MESSAGE_LEN);
    assert_eq!(HandshakeMessage::decode(&encoded).unwrap(), identity);
    let mut long = bytes.to_vec();
    long.push(0);
    assert_eq!(
        HandshakeMessage::decode(&long).unwrap_err(),
        HandshakeDecodeError::TrailingBytes(1)
    );
    let mut inverted = bytes.to_vec();
    inverted[5..7].copy_from_slice(&2u16.to_be_bytes());
    inverted[7..9].copy_from_slice(&3u16.to_be_bytes());
    assert_eq!(
        HandshakeMessage::decode(&inverted).unwrap_err(),
        HandshakeDecodeError::InvertedVersions {
            lowest: 3,
            highest: 2
        }
    );
}

proptest! {
    #[test]
    fn decoding_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        let _ = HandshakeMessage::decode(&bytes);
    }

    #[test]
    fn mutated_valid_messages_never_panic(
        kind in 0usize..3,
        pos in any::<prop::sample::Index>(),
        value in any::<u8>(),
        cut in any::<prop::sample::Index>(),
    ) {
        let message = match kind {
            0 => HandshakeMessage::Hello(Hello { versions: versions(2, 3), nonce: [5; NONCE_LEN] }),
            1 => HandshakeMessage::Proof([6; TAG_LEN]),
            _ => HandshakeMessage::Identity(Identity { node: node(9, 9), tag: [7; TAG_LEN] }),
        };
        let mut bytes = message.encode().unwrap().to_vec();
        let i = pos.index(bytes.len());
        bytes[i] = value;
        bytes.truncate(cut.index(bytes.len() + 1));
        let _ = HandshakeMessage::decode(&bytes);
    }

    #[test]
    fn any_secret_pair_establishes_exactly_when_the_secrets_are_equal(
        s1 in proptest::collection::vec(any::<u8>(), 16..40),
        s2 in proptest::collection::vec(any::<u8>(), 16..40),
        same in any::<bool>(),
        n1 in any::<u8>(),
        n2 in any::<u8>(),
    ) {
        let s2 = if same { s1.clone() } else { s2 };
        let (a, b) = run(
            side(node(1, 1), ClusterSecret::new(&s1).unwrap(), Role::Initiator, None, n1),
            side(node(2, 2), ClusterSecret::new(&s2).unwrap(), Role::Acceptor, None, n2),
        );
        prop_assert_eq!(established(&a).is_some(), s1 == s2);
        prop_assert_eq!(established(&b).is_some(), s1 == s2);
    }

    /// Someone on the path who changes any byte of any message (a Hello's versions, to force
    /// a downgrade, say) makes the handshake fail on at least one side, never establish with
    /// different conclusions.
    #[test]
    fn a_tampered_message_never_establishes_a_different_outcome(
        which in 0usize..5,
        pos in any::<prop::sample::Index>(),
        flip in 1u8..=255,
    ) {
        let mut a = side_with(node(1, 1), secret(SECRET), Role::Initiator, Some(node(2, 0).address), 1, versions(2, 3));
        let mut b = side_with(node(2, 2), secret(SECRET), Role::Acceptor, None, 2, versions(2, 3));
        let mut to_b = Vec::new();
        let mut to_a = Vec::new();
        let mut count = 0;
        let mut tamper = |mut msg: Bytes| {
            count += 1;
            if count - 1 == which {
                let mut bytes = msg.to_vec();
                let i = pos.index(bytes.len());
                bytes[i] ^= flip;
                msg = bytes.into();
            }
            msg
        };
        let actions;
        (a, actions) = step(a, HandshakeEvent::Start, Instant::now());
        to_b.extend(sent(actions));
        let actions;
        (b, actions) = step(b, HandshakeEvent::Start, Instant::now());
        to_a.extend(sent(actions));
        while !to_a.is_empty() || !to_b.is_empty() {
            for msg in std::mem::take(&mut to_b) {
                let msg = tamper(msg);
                if !b.is_finished() {
                    let actions;
                    (b, actions) = step(b, HandshakeEvent::Received(msg), Instant::now());
                    to_a.extend(sent(actions));
                }
            }
            for msg in std::mem::take(&mut to_a) {
                let msg = tamper(msg);
                if !a.is_finished() {
                    let actions;
                    (a, actions) = step(a, HandshakeEvent::Received(msg), Instant::now());
                    to_b.extend(sent(actions));
                }
            }
        }
        // Five messages cross the wire; one was changed: the side that read it refuses.
        prop_assert!(established(&a).is_none() || established(&b).is_none());
        if let (Some(x), Some(y)) = (established(&a), established(&b)) {
            prop_assert_eq!(x.1, y.1);
        }
    }
}
