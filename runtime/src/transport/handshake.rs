//! The mutual challenge–response handshake that opens every connection between two nodes:
//! each side proves it knows the shared cluster secret without sending it, and learns the
//! verified identity of the other.
//!
//! # Protocol
//! Both sides send a [`Hello`] at once: protocol version, their [`UniqueAddress`] and a fresh
//! random 32-byte nonce. On receiving the peer's `Hello`, a side checks the version, the
//! actor-system name and — when it dialled — that the peer is the address it dialled, then
//! sends a [`HandshakeMessage::Proof`]:
//!
//! ```text
//! proof(role) = HMAC-SHA256(secret, "troupe-handshake/v1" ‖ role ‖ len‖initiator Hello ‖ len‖acceptor Hello)
//! ```
//!
//! where `role` is the prover's side (initiator or acceptor) and the Hellos are the exact bytes
//! exchanged, so the proof covers both nonces, both identities and the direction. A proof can
//! be replayed neither on another connection (fresh nonces) nor in the other direction (the
//! role). The receiver recomputes the expected proof and compares in constant time.
//!
//! # What it does not give
//! Without TLS the frames that follow the handshake are not authenticated: an on-path attacker
//! who relays a handshake can inject later bytes. Every member holds the same secret, so a
//! member can claim any identity. The secret must be high-entropy (a proof is an HMAC over
//! values an unauthenticated peer can choose, so a guessable secret can be brute-forced
//! offline); [`ClusterSecret::new`] demands at least 16 bytes, 32 random bytes are
//! recommended.
//!
//! # Shape
//! The lifecycle is the pure [`step`] function over [`Handshake`]; the TCP shell feeds it
//! decoded frames and performs the [`HandshakeAction`]s. Message decoding never panics: bad
//! bytes are a [`HandshakeDecodeError`].

use std::fmt;
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

use super::frame::FrameError;
use crate::address::{Address, UniqueAddress};

/// The handshake protocol version this build speaks.
pub const PROTOCOL_VERSION: u16 = 1;
/// Bytes in a nonce.
pub const NONCE_LEN: usize = 32;
/// Bytes in a proof (an HMAC-SHA256 tag).
pub const PROOF_LEN: usize = 32;
/// The largest encoded handshake message; the shell uses it as the maximum frame size until
/// the handshake is done, so an unauthenticated peer cannot make us buffer more.
pub const MAX_HANDSHAKE_MESSAGE_LEN: usize = 4 + 1 + 2 + 8 + 2 + 1 + 255 + 1 + 255 + NONCE_LEN;
/// The smallest accepted secret.
pub const MIN_SECRET_LEN: usize = 16;

const MAGIC: [u8; 4] = *b"TRPH";
const KIND_HELLO: u8 = b'H';
const KIND_PROOF: u8 = b'P';
const TRANSCRIPT_LABEL: &[u8] = b"troupe-handshake/v1";

/// The shared cluster secret. Its `Debug` output is redacted.
#[derive(Clone)]
pub struct ClusterSecret(Arc<[u8]>);

impl ClusterSecret {
    /// A secret from raw bytes.
    ///
    /// # Errors
    /// [`SecretTooShort`] when `bytes` has fewer than [`MIN_SECRET_LEN`] bytes.
    pub fn new(bytes: impl AsRef<[u8]>) -> Result<Self, SecretTooShort> {
        let bytes = bytes.as_ref();
        if bytes.len() < MIN_SECRET_LEN {
            return Err(SecretTooShort { len: bytes.len() });
        }
        Ok(Self(Arc::from(bytes)))
    }

    fn mac(&self) -> Hmac<Sha256> {
        // HMAC takes keys of any length: `new_from_slice` cannot fail here.
        <Hmac<Sha256> as Mac>::new_from_slice(&self.0).unwrap_or_else(|_| unreachable!())
    }
}

impl fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ClusterSecret(<{} bytes, redacted>)", self.0.len())
    }
}

/// A cluster secret that is too short to resist guessing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the cluster secret must be at least {MIN_SECRET_LEN} bytes (32 random bytes recommended), got {len}"
)]
pub struct SecretTooShort {
    /// The rejected secret's length.
    pub len: usize,
}

/// Which end of the connection a side is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// It dialled.
    Initiator,
    /// It accepted.
    Acceptor,
}

impl Role {
    fn label(self) -> u8 {
        match self {
            Self::Initiator => b'I',
            Self::Acceptor => b'A',
        }
    }

    fn other(self) -> Self {
        match self {
            Self::Initiator => Self::Acceptor,
            Self::Acceptor => Self::Initiator,
        }
    }
}

/// The first message of each side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// The sender's identity (checked only by the proof that follows).
    pub from: UniqueAddress,
    /// Fresh randomness for this connection.
    pub nonce: [u8; NONCE_LEN],
}

/// A handshake message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandshakeMessage {
    /// Who I am, and my challenge.
    Hello(Hello),
    /// The HMAC over the transcript that proves knowledge of the secret.
    Proof([u8; PROOF_LEN]),
}

/// Why bytes are not a handshake message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandshakeDecodeError {
    /// The message does not start with the handshake magic (not a Troupe node?).
    #[error("not a troupe handshake message (bad magic bytes)")]
    BadMagic,
    /// The message ended before `field`.
    #[error("message ends before its {field}")]
    TooShort {
        /// The missing field.
        field: &'static str,
    },
    /// The message kind byte is neither Hello nor Proof.
    #[error("unknown handshake message kind {0:#04x}")]
    UnknownKind(u8),
    /// The peer speaks another protocol version.
    #[error("protocol version {theirs} is not supported (this node speaks {PROTOCOL_VERSION})")]
    UnsupportedVersion {
        /// The peer's version.
        theirs: u16,
    },
    /// A text field is not UTF-8 or is empty.
    #[error("the {field} is empty or not UTF-8")]
    BadText {
        /// The field.
        field: &'static str,
    },
    /// Bytes follow the end of the message.
    #[error("{0} unexpected bytes after the message")]
    TrailingBytes(usize),
    /// A field is too long to encode.
    #[error("the {field} is longer than 255 bytes")]
    FieldTooLong {
        /// The field.
        field: &'static str,
    },
}

impl HandshakeMessage {
    /// The message's wire bytes.
    ///
    /// # Errors
    /// [`HandshakeDecodeError::FieldTooLong`] when a system or host name exceeds 255 bytes.
    pub fn encode(&self) -> Result<Bytes, HandshakeDecodeError> {
        let mut out = BytesMut::with_capacity(MAX_HANDSHAKE_MESSAGE_LEN);
        out.put_slice(&MAGIC);
        match self {
            Self::Hello(hello) => {
                out.put_u8(KIND_HELLO);
                out.put_u16(PROTOCOL_VERSION);
                out.put_u64(hello.from.incarnation);
                out.put_u16(hello.from.address.port);
                put_text(&mut out, &hello.from.address.system, "system name")?;
                put_text(&mut out, &hello.from.address.host, "host")?;
                out.put_slice(&hello.nonce);
            }
            Self::Proof(proof) => {
                out.put_u8(KIND_PROOF);
                out.put_u16(PROTOCOL_VERSION);
                out.put_slice(proof);
            }
        }
        Ok(out.freeze())
    }

    /// Parses one message. Never panics.
    ///
    /// # Errors
    /// A [`HandshakeDecodeError`] saying what is wrong. The version is checked right after the
    /// magic and kind, so a peer of another version is reported as such even if the rest of
    /// its layout differs.
    pub fn decode(bytes: &[u8]) -> Result<Self, HandshakeDecodeError> {
        let mut r = Reader(bytes);
        if r.take(MAGIC.len(), "magic")? != MAGIC {
            return Err(HandshakeDecodeError::BadMagic);
        }
        let kind = r.u8("kind")?;
        if kind != KIND_HELLO && kind != KIND_PROOF {
            return Err(HandshakeDecodeError::UnknownKind(kind));
        }
        let version = r.u16("version")?;
        if version != PROTOCOL_VERSION {
            return Err(HandshakeDecodeError::UnsupportedVersion { theirs: version });
        }
        let message = if kind == KIND_HELLO {
            let incarnation = r.u64("incarnation")?;
            let port = r.u16("port")?;
            let system = r.text("system name")?;
            let host = r.text("host")?;
            let nonce = r.array::<NONCE_LEN>("nonce")?;
            Self::Hello(Hello {
                from: UniqueAddress {
                    address: Address::new(system, host, port),
                    incarnation,
                },
                nonce,
            })
        } else {
            Self::Proof(r.array::<PROOF_LEN>("proof")?)
        };
        match r.0.len() {
            0 => Ok(message),
            n => Err(HandshakeDecodeError::TrailingBytes(n)),
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Self::Hello(_) => "hello",
            Self::Proof(_) => "proof",
        }
    }
}

fn put_text(
    out: &mut BytesMut,
    text: &str,
    field: &'static str,
) -> Result<(), HandshakeDecodeError> {
    let len = u8::try_from(text.len()).map_err(|_| HandshakeDecodeError::FieldTooLong { field })?;
    out.put_u8(len);
    out.put_slice(text.as_bytes());
    Ok(())
}

/// A cursor over untrusted bytes whose every read is bounds-checked.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], HandshakeDecodeError> {
        if self.0.len() < n {
            return Err(HandshakeDecodeError::TooShort { field });
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Ok(head)
    }

    fn array<const N: usize>(
        &mut self,
        field: &'static str,
    ) -> Result<[u8; N], HandshakeDecodeError> {
        let mut out = [0; N];
        out.copy_from_slice(self.take(N, field)?);
        Ok(out)
    }

    fn u8(&mut self, field: &'static str) -> Result<u8, HandshakeDecodeError> {
        Ok(self.array::<1>(field)?[0])
    }

    fn u16(&mut self, field: &'static str) -> Result<u16, HandshakeDecodeError> {
        Ok(u16::from_be_bytes(self.array(field)?))
    }

    fn u64(&mut self, field: &'static str) -> Result<u64, HandshakeDecodeError> {
        Ok(u64::from_be_bytes(self.array(field)?))
    }

    fn text(&mut self, field: &'static str) -> Result<&'a str, HandshakeDecodeError> {
        let len = usize::from(self.u8(field)?);
        let bytes = self.take(len, field)?;
        match std::str::from_utf8(bytes) {
            Ok(text) if !text.is_empty() => Ok(text),
            _ => Err(HandshakeDecodeError::BadText { field }),
        }
    }
}

/// Why a handshake failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandshakeRejection {
    /// The peer speaks another protocol version.
    #[error("protocol version mismatch: this node speaks {ours}, the peer {theirs}")]
    VersionMismatch {
        /// Our version.
        ours: u16,
        /// The peer's.
        theirs: u16,
    },
    /// The peer's proof is wrong: it does not hold the cluster secret.
    #[error("the peer's proof is wrong: it does not hold this cluster's secret")]
    BadProof,
    /// The peer belongs to another actor system.
    #[error("the peer belongs to actor system {theirs:?}, this node to {ours:?}")]
    WrongSystem {
        /// Our system name.
        ours: String,
        /// The peer's.
        theirs: String,
    },
    /// The peer that answered is not the one that was dialled.
    #[error("dialled {expected} but the peer says it is {actual}")]
    UnexpectedPeer {
        /// The dialled address.
        expected: Address,
        /// The address in the peer's Hello.
        actual: Address,
    },
    /// A message arrived out of order.
    #[error("expected a {expected} message, got a {got}")]
    UnexpectedMessage {
        /// What the state machine waited for.
        expected: &'static str,
        /// What came.
        got: &'static str,
    },
    /// The peer's bytes are not a handshake message.
    #[error("malformed handshake message: {0}")]
    Malformed(#[source] HandshakeDecodeError),
    /// The bytes around the message are not a valid frame.
    #[error("bad frame during the handshake: {0}")]
    Frame(#[source] FrameError),
    /// The handshake took longer than allowed.
    #[error("the handshake did not finish in time")]
    TimedOut,
    /// The connection ended before the handshake finished.
    #[error("the connection closed during the handshake")]
    Closed,
}

/// What one side needs to run a handshake.
#[derive(Debug, Clone)]
pub struct HandshakeConfig {
    /// This node.
    pub local: UniqueAddress,
    /// The shared secret.
    pub secret: ClusterSecret,
    /// Which end we are.
    pub role: Role,
    /// For an initiator: the address it dialled; the peer must claim exactly that.
    pub expected_peer: Option<Address>,
}

/// The handshake's state.
#[derive(Debug, Clone)]
pub enum Handshake {
    /// Created, nothing sent.
    Idle {
        /// Settings.
        config: HandshakeConfig,
        /// Our nonce, drawn by the caller (keeps [`step`] pure).
        nonce: [u8; NONCE_LEN],
    },
    /// Our Hello is out; waiting for the peer's.
    AwaitingHello {
        /// Settings.
        config: HandshakeConfig,
        /// Our Hello as sent.
        our_hello: Bytes,
    },
    /// Our proof is out; waiting for the peer's.
    AwaitingProof {
        /// The peer's claimed identity.
        peer: UniqueAddress,
        /// The proof the peer must send.
        expected_proof: [u8; PROOF_LEN],
    },
    /// The peer proved the secret.
    Established {
        /// Its verified identity.
        peer: UniqueAddress,
    },
    /// The handshake failed.
    Rejected {
        /// Why.
        reason: HandshakeRejection,
    },
}

impl Handshake {
    /// A handshake about to start, with a nonce the caller drew from a secure RNG.
    #[must_use]
    pub fn new(config: HandshakeConfig, nonce: [u8; NONCE_LEN]) -> Self {
        Self::Idle { config, nonce }
    }

    /// Whether the handshake has ended (established or rejected).
    #[must_use]
    pub fn is_finished(&self) -> bool {
        matches!(self, Self::Established { .. } | Self::Rejected { .. })
    }
}

/// What happens to the handshake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandshakeEvent {
    /// Begin: send our Hello.
    Start,
    /// A frame's payload from the peer.
    Received(Bytes),
    /// The deadline passed.
    TimedOut,
    /// The connection ended, or carried bytes that are not a frame.
    ConnectionFailed(Option<FrameError>),
}

/// What the shell must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandshakeAction {
    /// Send this message as one frame.
    Send(Bytes),
    /// Done: the peer is who it says.
    Established(UniqueAddress),
    /// Done: close the connection for this reason.
    Reject(HandshakeRejection),
}

/// Advances the handshake by one event.
#[must_use]
pub fn step(state: Handshake, event: HandshakeEvent) -> (Handshake, Vec<HandshakeAction>) {
    match (state, event) {
        (done @ (Handshake::Established { .. } | Handshake::Rejected { .. }), _) => (done, vec![]),
        (_, HandshakeEvent::TimedOut) => reject(HandshakeRejection::TimedOut),
        (_, HandshakeEvent::ConnectionFailed(None)) => reject(HandshakeRejection::Closed),
        (_, HandshakeEvent::ConnectionFailed(Some(e))) => reject(HandshakeRejection::Frame(e)),
        (Handshake::Idle { config, nonce }, HandshakeEvent::Start) => {
            let hello = HandshakeMessage::Hello(Hello {
                from: config.local.clone(),
                nonce,
            });
            match hello.encode() {
                Ok(our_hello) => (
                    Handshake::AwaitingHello {
                        config,
                        our_hello: our_hello.clone(),
                    },
                    vec![HandshakeAction::Send(our_hello)],
                ),
                Err(e) => reject(HandshakeRejection::Malformed(e)),
            }
        }
        (Handshake::Idle { .. }, HandshakeEvent::Received(_)) => {
            // The shell always starts first; bytes before that are a protocol violation.
            reject(HandshakeRejection::UnexpectedMessage {
                expected: "nothing (not started)",
                got: "message",
            })
        }
        (state, HandshakeEvent::Start) => (state, vec![]),
        (Handshake::AwaitingHello { config, our_hello }, HandshakeEvent::Received(bytes)) => {
            match on_hello(&config, &our_hello, &bytes) {
                Ok((peer, our_proof, expected_proof)) => (
                    Handshake::AwaitingProof {
                        peer,
                        expected_proof,
                    },
                    vec![HandshakeAction::Send(our_proof)],
                ),
                Err(reason) => reject(reason),
            }
        }
        (
            Handshake::AwaitingProof {
                peer,
                expected_proof,
            },
            HandshakeEvent::Received(bytes),
        ) => match HandshakeMessage::decode(&bytes) {
            Ok(HandshakeMessage::Proof(proof)) => {
                if bool::from(proof.ct_eq(&expected_proof)) {
                    (
                        Handshake::Established { peer: peer.clone() },
                        vec![HandshakeAction::Established(peer)],
                    )
                } else {
                    reject(HandshakeRejection::BadProof)
                }
            }
            Ok(other) => reject(HandshakeRejection::UnexpectedMessage {
                expected: "proof",
                got: other.kind(),
            }),
            Err(e) => reject(decode_rejection(e)),
        },
    }
}

fn reject(reason: HandshakeRejection) -> (Handshake, Vec<HandshakeAction>) {
    (
        Handshake::Rejected {
            reason: reason.clone(),
        },
        vec![HandshakeAction::Reject(reason)],
    )
}

fn decode_rejection(e: HandshakeDecodeError) -> HandshakeRejection {
    match e {
        HandshakeDecodeError::UnsupportedVersion { theirs } => {
            HandshakeRejection::VersionMismatch {
                ours: PROTOCOL_VERSION,
                theirs,
            }
        }
        other => HandshakeRejection::Malformed(other),
    }
}

/// Checks the peer's Hello; returns its identity, our proof to send and the proof to expect.
fn on_hello(
    config: &HandshakeConfig,
    our_hello: &[u8],
    their_hello: &[u8],
) -> Result<(UniqueAddress, Bytes, [u8; PROOF_LEN]), HandshakeRejection> {
    let hello = match HandshakeMessage::decode(their_hello).map_err(decode_rejection)? {
        HandshakeMessage::Hello(hello) => hello,
        other => {
            return Err(HandshakeRejection::UnexpectedMessage {
                expected: "hello",
                got: other.kind(),
            });
        }
    };
    let peer = hello.from;
    if peer.address.system != config.local.address.system {
        return Err(HandshakeRejection::WrongSystem {
            ours: config.local.address.system.to_string(),
            theirs: peer.address.system.to_string(),
        });
    }
    if let Some(expected) = &config.expected_peer {
        if *expected != peer.address {
            return Err(HandshakeRejection::UnexpectedPeer {
                expected: expected.clone(),
                actual: peer.address,
            });
        }
    }
    let (initiator_hello, acceptor_hello) = match config.role {
        Role::Initiator => (our_hello, their_hello),
        Role::Acceptor => (their_hello, our_hello),
    };
    let our_proof = proof(&config.secret, config.role, initiator_hello, acceptor_hello);
    let expected = proof(
        &config.secret,
        config.role.other(),
        initiator_hello,
        acceptor_hello,
    );
    let message = HandshakeMessage::Proof(our_proof)
        .encode()
        .map_err(HandshakeRejection::Malformed)?;
    Ok((peer, message, expected))
}

/// `HMAC-SHA256(secret, label ‖ prover role ‖ len‖initiator Hello ‖ len‖acceptor Hello)`.
fn proof(
    secret: &ClusterSecret,
    prover: Role,
    initiator_hello: &[u8],
    acceptor_hello: &[u8],
) -> [u8; PROOF_LEN] {
    let mut mac = secret.mac();
    mac.update(TRANSCRIPT_LABEL);
    mac.update(&[prover.label()]);
    for hello in [initiator_hello, acceptor_hello] {
        // Length-prefixed so that no two different transcripts hash the same bytes.
        mac.update(&(hello.len() as u32).to_be_bytes());
        mac.update(hello);
    }
    mac.finalize().into_bytes().into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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

    fn side(
        local: UniqueAddress,
        secret: ClusterSecret,
        role: Role,
        expected_peer: Option<Address>,
        nonce: u8,
    ) -> Handshake {
        Handshake::new(
            HandshakeConfig {
                local,
                secret,
                role,
                expected_peer,
            },
            [nonce; NONCE_LEN],
        )
    }

    /// Runs two handshakes against each other, delivering messages in order, and returns what
    /// each side concluded.
    fn run(mut a: Handshake, mut b: Handshake) -> (Handshake, Handshake) {
        let mut to_b = Vec::new();
        let mut to_a = Vec::new();
        let collect = |actions: Vec<HandshakeAction>, out: &mut Vec<Bytes>| {
            for action in actions {
                if let HandshakeAction::Send(bytes) = action {
                    out.push(bytes);
                }
            }
        };
        let actions;
        (a, actions) = step(a, HandshakeEvent::Start);
        collect(actions, &mut to_b);
        let actions;
        (b, actions) = step(b, HandshakeEvent::Start);
        collect(actions, &mut to_a);
        while !to_a.is_empty() || !to_b.is_empty() {
            for msg in std::mem::take(&mut to_b) {
                let actions;
                (b, actions) = step(b, HandshakeEvent::Received(msg));
                collect(actions, &mut to_a);
            }
            for msg in std::mem::take(&mut to_a) {
                let actions;
                (a, actions) = step(a, HandshakeEvent::Received(msg));
                collect(actions, &mut to_b);
            }
        }
        (a, b)
    }

    fn established(h: &Handshake) -> Option<&UniqueAddress> {
        match h {
            Handshake::Established { peer } => Some(peer),
            _ => None,
        }
    }

    fn rejection(h: &Handshake) -> Option<&HandshakeRejection> {
        match h {
            Handshake::Rejected { reason } => Some(reason),
            _ => None,
        }
    }

    #[test]
    fn sides_with_the_same_secret_learn_each_others_verified_identity() {
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
        assert_eq!(established(&a), Some(&node(2, 22)));
        assert_eq!(established(&b), Some(&node(1, 11)));
    }

    #[test]
    fn a_wrong_secret_is_rejected_by_both_sides_as_a_bad_proof() {
        let (a, b) = run(
            side(node(1, 11), secret(SECRET), Role::Initiator, None, 1),
            side(
                node(2, 22),
                secret("another-secret-of-16"),
                Role::Acceptor,
                None,
                2,
            ),
        );
        assert_eq!(rejection(&a), Some(&HandshakeRejection::BadProof));
        assert_eq!(rejection(&b), Some(&HandshakeRejection::BadProof));
    }

    #[test]
    fn the_secret_never_appears_in_any_message() {
        let s = secret(SECRET);
        let (mut h, actions) = step(
            side(node(1, 1), s.clone(), Role::Initiator, None, 9),
            HandshakeEvent::Start,
        );
        let mut sent: Vec<Bytes> = actions
            .into_iter()
            .filter_map(|a| match a {
                HandshakeAction::Send(b) => Some(b),
                _ => None,
            })
            .collect();
        let peer_hello = HandshakeMessage::Hello(Hello {
            from: node(2, 2),
            nonce: [3; NONCE_LEN],
        })
        .encode()
        .unwrap();
        let actions;
        (h, actions) = step(h, HandshakeEvent::Received(peer_hello));
        assert!(matches!(h, Handshake::AwaitingProof { .. }));
        for a in actions {
            if let HandshakeAction::Send(b) = a {
                sent.push(b);
            }
        }
        assert_eq!(sent.len(), 2);
        for msg in sent {
            assert!(!msg.windows(SECRET.len()).any(|w| w == SECRET.as_bytes()));
        }
        assert!(!format!("{s:?}").contains(SECRET));
    }

    #[test]
    fn a_proof_replayed_in_the_other_direction_is_rejected() {
        // The acceptor's own proof, reflected back to it as if the initiator had sent it.
        let (b, actions) = step(
            side(node(2, 2), secret(SECRET), Role::Acceptor, None, 2),
            HandshakeEvent::Start,
        );
        drop(actions);
        let initiator_hello = HandshakeMessage::Hello(Hello {
            from: node(1, 1),
            nonce: [1; NONCE_LEN],
        })
        .encode()
        .unwrap();
        let (b, actions) = step(b, HandshakeEvent::Received(initiator_hello));
        let Some(HandshakeAction::Send(acceptor_proof)) = actions.into_iter().next() else {
            panic!("acceptor sends its proof");
        };
        let (b, _) = step(b, HandshakeEvent::Received(acceptor_proof));
        assert_eq!(rejection(&b), Some(&HandshakeRejection::BadProof));
    }

    #[test]
    fn a_peer_of_another_protocol_version_is_rejected_naming_both_versions() {
        let (b, _) = step(
            side(node(2, 2), secret(SECRET), Role::Acceptor, None, 2),
            HandshakeEvent::Start,
        );
        let mut hello = HandshakeMessage::Hello(Hello {
            from: node(1, 1),
            nonce: [1; NONCE_LEN],
        })
        .encode()
        .unwrap()
        .to_vec();
        hello[5..7].copy_from_slice(&7u16.to_be_bytes());
        hello.truncate(9); // a future layout need not parse as ours
        let (b, _) = step(b, HandshakeEvent::Received(hello.into()));
        let reason = rejection(&b).unwrap();
        assert_eq!(
            reason,
            &HandshakeRejection::VersionMismatch { ours: 1, theirs: 7 }
        );
        assert!(reason.to_string().contains("speaks 1, the peer 7"));
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
    fn a_peer_of_another_actor_system_is_rejected() {
        let other = UniqueAddress {
            address: Address::new("other", "127.0.0.1", 2),
            incarnation: 2,
        };
        let (_, b) = run(
            side(node(1, 1), secret(SECRET), Role::Initiator, None, 1),
            side(other, secret(SECRET), Role::Acceptor, None, 2),
        );
        assert!(matches!(
            rejection(&b),
            Some(HandshakeRejection::WrongSystem { .. })
        ));
    }

    #[test]
    fn a_proof_before_a_hello_is_an_unexpected_message() {
        let (b, _) = step(
            side(node(2, 2), secret(SECRET), Role::Acceptor, None, 2),
            HandshakeEvent::Start,
        );
        let proof = HandshakeMessage::Proof([0; PROOF_LEN]).encode().unwrap();
        let (b, _) = step(b, HandshakeEvent::Received(proof));
        assert_eq!(
            rejection(&b),
            Some(&HandshakeRejection::UnexpectedMessage {
                expected: "hello",
                got: "proof"
            })
        );
    }

    #[test]
    fn timeouts_and_closed_connections_reject_with_their_reason() {
        let h = side(node(2, 2), secret(SECRET), Role::Acceptor, None, 2);
        let (h, _) = step(h, HandshakeEvent::Start);
        let (h2, actions) = step(h.clone(), HandshakeEvent::TimedOut);
        assert_eq!(
            actions,
            vec![HandshakeAction::Reject(HandshakeRejection::TimedOut)]
        );
        assert!(h2.is_finished());
        let (h3, _) = step(h, HandshakeEvent::ConnectionFailed(None));
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
            from: node(2552, u64::MAX),
            nonce: [0xAB; NONCE_LEN],
        });
        let bytes = hello.encode().unwrap();
        assert!(bytes.len() <= MAX_HANDSHAKE_MESSAGE_LEN);
        assert_eq!(HandshakeMessage::decode(&bytes).unwrap(), hello);
        let proof = HandshakeMessage::Proof([7; PROOF_LEN]);
        assert_eq!(
            HandshakeMessage::decode(&proof.encode().unwrap()).unwrap(),
            proof
        );
        let mut long = bytes.to_vec();
        long.push(0);
        assert_eq!(
            HandshakeMessage::decode(&long).unwrap_err(),
            HandshakeDecodeError::TrailingBytes(1)
        );
    }

    proptest! {
        #[test]
        fn decoding_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            let _ = HandshakeMessage::decode(&bytes);
        }

        #[test]
        fn mutated_valid_messages_never_panic(
            pos in any::<prop::sample::Index>(),
            value in any::<u8>(),
            cut in any::<prop::sample::Index>(),
        ) {
            let mut bytes = HandshakeMessage::Hello(Hello { from: node(9, 9), nonce: [5; NONCE_LEN] })
                .encode().unwrap().to_vec();
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
    }
}
