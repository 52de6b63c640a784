//! The mutual challenge–response handshake that opens every connection between two nodes:
//! they agree on a protocol version, each proves it knows the shared cluster secret without
//! sending it, and each learns the verified identity of the other — and nobody learns anything
//! about a node before proving the secret to it.
//!
//! # Protocol
//! Both sides send a [`Hello`] at once: the protocol versions they speak and a fresh random
//! 32-byte nonce, nothing else. Each picks the highest version both speak (or refuses naming
//! both ranges). Then, with `T` the exact bytes of both Hellos (`len‖initiator Hello ‖
//! len‖acceptor Hello`):
//!
//! ```text
//! initiator → acceptor   Proof     tag = HMAC(secret, "troupe-handshake/v2" ‖ 'P' ‖ T)
//! acceptor → initiator   Identity  its address and incarnation,
//!                                  tag = HMAC(secret, label ‖ 'A' ‖ T ‖ len‖identity without tag)
//! initiator → acceptor   Identity  its address and incarnation,
//!                                  tag = HMAC(secret, label ‖ 'I' ‖ T ‖ len‖acceptor Identity ‖ len‖identity without tag)
//! ```
//!
//! The acceptor says who it is only after the initiator proved the secret, and the initiator
//! only after the acceptor proved it in turn, so a client without the secret learns only that
//! a Troupe node listens (and which versions it speaks), and a node that answers at a dialled
//! address without the secret learns nothing about the dialler. Every tag covers both nonces
//! (no replay on another connection), both version ranges (no downgrade), the prover's role
//! (no reflection) and everything said before it. Tags are compared in constant time.
//!
//! # What it does not give
//! Without TLS the frames that follow the handshake are not authenticated: an on-path attacker
//! who relays a handshake can inject later bytes. Every member holds the same secret, so a
//! member can claim any identity. The secret must be high-entropy (a tag is an HMAC over
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
use tokio::time::Instant;

use super::frame::FrameError;
use super::version::{ProtocolVersions, VersionMismatch};
use crate::address::{Address, UniqueAddress};

/// Bytes in a nonce.
pub const NONCE_LEN: usize = 32;
/// Bytes in a tag (an HMAC-SHA256 output).
pub const TAG_LEN: usize = 32;
/// Bytes in a [`Hello`], the same in every protocol version.
pub const HELLO_LEN: usize = 4 + 1 + 2 + 2 + NONCE_LEN;
/// Bytes in a proof message.
pub const PROOF_LEN: usize = 4 + 1 + TAG_LEN;
/// The largest message a side accepts before its peer has proven the secret: a node that
/// has not been shown the secret buffers at most this much for a connection.
pub const MAX_UNPROVEN_MESSAGE_LEN: usize = if HELLO_LEN > PROOF_LEN {
    HELLO_LEN
} else {
    PROOF_LEN
};
/// The largest encoded handshake message (an identity with 255-byte names).
pub const MAX_HANDSHAKE_MESSAGE_LEN: usize = 4 + 1 + 8 + 2 + 1 + 255 + 1 + 255 + TAG_LEN;
/// The smallest accepted secret.
pub const MIN_SECRET_LEN: usize = 16;

const MAGIC: [u8; 4] = *b"TRPH";
const KIND_HELLO: u8 = b'H';
const KIND_PROOF: u8 = b'P';
const KIND_IDENTITY: u8 = b'I';
const TRANSCRIPT_LABEL: &[u8] = b"troupe-handshake/v2";
/// Version 1 (Troupe 0.1.0) put its only version where a Hello now has its highest.
const LEGACY_VERSION: u16 = 1;

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

    /// `HMAC(secret, TRANSCRIPT_LABEL ‖ purpose ‖ parts…)`, each part length-prefixed so that
    /// no two different transcripts hash the same bytes.
    fn tag(&self, purpose: u8, parts: &[&[u8]]) -> [u8; TAG_LEN] {
        let mut mac = self.mac();
        mac.update(TRANSCRIPT_LABEL);
        mac.update(&[purpose]);
        for part in parts {
            mac.update(&(part.len() as u32).to_be_bytes());
            mac.update(part);
        }
        mac.finalize().into_bytes().into()
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

/// The first message of each side: what it speaks and its challenge. Nothing about the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// The protocol versions the sender speaks.
    pub versions: ProtocolVersions,
    /// Fresh randomness for this connection.
    pub nonce: [u8; NONCE_LEN],
}

/// Who a side is, sent once the other side has proven the secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The sender's address and incarnation.
    pub node: UniqueAddress,
    /// The HMAC that binds it to this connection's transcript.
    pub tag: [u8; TAG_LEN],
}

/// A handshake message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandshakeMessage {
    /// What I speak, and my challenge.
    Hello(Hello),
    /// The initiator's proof that it holds the secret (a tag over both Hellos).
    Proof([u8; TAG_LEN]),
    /// Who I am, bound to the transcript.
    Identity(Identity),
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
    /// The message kind byte is neither Hello, Proof nor Identity.
    #[error("unknown handshake message kind {0:#04x}")]
    UnknownKind(u8),
    /// The peer speaks a version from before negotiation, or an inverted range.
    #[error("{0}")]
    UnsupportedVersion(VersionMismatch),
    /// A Hello's version range is inverted.
    #[error("the peer's lowest protocol version {lowest} is above its highest {highest}")]
    InvertedVersions {
        /// The lowest version the peer claims.
        lowest: u16,
        /// The highest version the peer claims.
        highest: u16,
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
        match self {
            Self::Hello(hello) => {
                out.put_slice(&MAGIC);
                out.put_u8(KIND_HELLO);
                out.put_u16(hello.versions.highest());
                out.put_u16(hello.versions.lowest());
                out.put_slice(&hello.nonce);
            }
            Self::Proof(tag) => {
                out.put_slice(&MAGIC);
                out.put_u8(KIND_PROOF);
                out.put_slice(tag);
            }
            Self::Identity(identity) => {
                out.put_slice(&identity_body(&identity.node)?);
                out.put_slice(&identity.tag);
            }
        }
        Ok(out.freeze())
    }

    /// Parses one message. Never panics.
    ///
    /// # Errors
    /// A [`HandshakeDecodeError`] saying what is wrong. A Hello's highest version sits where
    /// version 1 put its only one, so a node of that version is reported as such even though
    /// the rest of its layout differs.
    pub fn decode(bytes: &[u8]) -> Result<Self, HandshakeDecodeError> {
        let mut r = Reader(bytes);
        if r.take(MAGIC.len(), "magic")? != MAGIC {
            return Err(HandshakeDecodeError::BadMagic);
        }
        let message = match r.u8("kind")? {
            KIND_HELLO => {
                let highest = r.u16("highest version")?;
                if highest == LEGACY_VERSION {
                    return Err(HandshakeDecodeError::UnsupportedVersion(VersionMismatch {
                        ours: ProtocolVersions::THIS_BUILD,
                        theirs: ProtocolVersions::only(LEGACY_VERSION),
                    }));
                }
                let lowest = r.u16("lowest version")?;
                let versions = ProtocolVersions::new(lowest, highest)
                    .ok_or(HandshakeDecodeError::InvertedVersions { lowest, highest })?;
                Self::Hello(Hello {
                    versions,
                    nonce: r.array("nonce")?,
                })
            }
            KIND_PROOF => Self::Proof(r.array("proof")?),
            KIND_IDENTITY => {
                let incarnation = r.u64("incarnation")?;
                let port = r.u16("port")?;
                let system = r.text("system name")?;
                let host = r.text("host")?;
                Self::Identity(Identity {
                    node: UniqueAddress {
                        address: Address::new(system, host, port),
                        incarnation,
                    },
                    tag: r.array("tag")?,
                })
            }
            kind => return Err(HandshakeDecodeError::UnknownKind(kind)),
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
            Self::Identity(_) => "identity",
        }
    }
}

/// An identity message without its tag: the bytes the tag covers.
fn identity_body(node: &UniqueAddress) -> Result<BytesMut, HandshakeDecodeError> {
    let mut out = BytesMut::with_capacity(MAX_HANDSHAKE_MESSAGE_LEN);
    out.put_slice(&MAGIC);
    out.put_u8(KIND_IDENTITY);
    out.put_u64(node.incarnation);
    out.put_u16(node.address.port);
    put_text(&mut out, &node.address.system, "system name")?;
    put_text(&mut out, &node.address.host, "host")?;
    Ok(out)
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
    /// The two nodes speak no common protocol version.
    #[error(transparent)]
    VersionMismatch(VersionMismatch),
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
        /// The address in the peer's identity.
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
pub struct HandshakeOptions {
    /// This node.
    pub local: UniqueAddress,
    /// The shared secret.
    pub secret: ClusterSecret,
    /// Which end we are.
    pub role: Role,
    /// For an initiator: the address it dialled; the peer must claim exactly that.
    pub expected_peer: Option<Address>,
    /// The protocol versions this side speaks (normally [`ProtocolVersions::THIS_BUILD`]).
    pub versions: ProtocolVersions,
}

/// What both sides said so far, as the tags cover it.
#[derive(Debug, Clone)]
pub struct Transcript {
    initiator_hello: Bytes,
    acceptor_hello: Bytes,
    version: u16,
}

/// The handshake's state.
#[derive(Debug, Clone)]
pub enum Handshake {
    /// Created, nothing sent.
    Idle {
        /// Settings.
        config: HandshakeOptions,
        /// Our nonce, drawn by the caller (keeps [`step`] pure).
        nonce: [u8; NONCE_LEN],
    },
    /// Our Hello is out; waiting for the peer's.
    AwaitingHello {
        /// Settings.
        config: HandshakeOptions,
        /// Our Hello as sent.
        our_hello: Bytes,
    },
    /// Acceptor: waiting for the initiator to prove the secret.
    AwaitingProof {
        /// Settings.
        config: HandshakeOptions,
        /// Both Hellos and the version they agree on.
        transcript: Transcript,
    },
    /// Initiator (proof sent), or acceptor (identity sent): waiting for the peer's identity.
    AwaitingIdentity {
        /// Settings.
        config: HandshakeOptions,
        /// Both Hellos and the version they agree on.
        transcript: Transcript,
        /// Acceptor only: the identity message it sent, covered by the initiator's tag.
        our_identity: Option<Bytes>,
    },
    /// The peer proved the secret and said who it is.
    Established {
        /// Its verified identity.
        peer: UniqueAddress,
        /// The protocol version the connection speaks.
        version: u16,
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
    pub fn new(config: HandshakeOptions, nonce: [u8; NONCE_LEN]) -> Self {
        Self::Idle { config, nonce }
    }

    /// Whether the handshake has ended (established or rejected).
    #[must_use]
    pub fn is_finished(&self) -> bool {
        matches!(self, Self::Established { .. } | Self::Rejected { .. })
    }

    /// Whether the peer's Hello was valid (it may still fail to prove the secret).
    #[must_use]
    pub fn has_peer_hello(&self) -> bool {
        matches!(
            self,
            Self::AwaitingProof { .. } | Self::AwaitingIdentity { .. } | Self::Established { .. }
        )
    }

    /// The largest frame the next message from the peer may be: small until the peer has
    /// proven the secret, so an unproven peer cannot make this side buffer more.
    #[must_use]
    pub fn max_next_message_len(&self) -> usize {
        match self {
            // An initiator's peer proves itself with its identity; an acceptor has its peer's
            // proof before it waits for the identity.
            Self::AwaitingIdentity { .. } => MAX_HANDSHAKE_MESSAGE_LEN,
            _ => MAX_UNPROVEN_MESSAGE_LEN,
        }
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
    /// Done: the peer is who it says, and the connection speaks `version`.
    Established {
        /// The peer's verified identity.
        peer: UniqueAddress,
        /// The negotiated protocol version.
        version: u16,
    },
    /// Done: close the connection for this reason.
    Reject(HandshakeRejection),
}

/// Advances the handshake by one event at `now`. The handshake reads no clock: its deadline
/// is the shell's (`handshake_timeout`, delivered as [`HandshakeEvent::TimedOut`]); `now` is
/// part of the one signature every state machine of the runtime shares.
#[must_use]
pub fn step(
    state: Handshake,
    event: HandshakeEvent,
    _now: Instant,
) -> (Handshake, Vec<HandshakeAction>) {
    match (state, event) {
        (done @ (Handshake::Established { .. } | Handshake::Rejected { .. }), _) => (done, vec![]),
        (_, HandshakeEvent::TimedOut) => reject(HandshakeRejection::TimedOut),
        (_, HandshakeEvent::ConnectionFailed(None)) => reject(HandshakeRejection::Closed),
        (_, HandshakeEvent::ConnectionFailed(Some(e))) => reject(HandshakeRejection::Frame(e)),
        (Handshake::Idle { config, nonce }, HandshakeEvent::Start) => {
            let hello = HandshakeMessage::Hello(Hello {
                versions: config.versions,
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
            on_hello(config, our_hello, bytes)
        }
        (Handshake::AwaitingProof { config, transcript }, HandshakeEvent::Received(bytes)) => {
            on_proof(config, transcript, &bytes)
        }
        (
            Handshake::AwaitingIdentity {
                config,
                transcript,
                our_identity,
            },
            HandshakeEvent::Received(bytes),
        ) => on_identity(&config, &transcript, our_identity.as_deref(), &bytes),
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
        HandshakeDecodeError::UnsupportedVersion(mismatch) => {
            HandshakeRejection::VersionMismatch(mismatch)
        }
        other => HandshakeRejection::Malformed(other),
    }
}

fn decode(bytes: &[u8], expected: &'static str) -> Result<HandshakeMessage, HandshakeRejection> {
    let message = HandshakeMessage::decode(bytes).map_err(decode_rejection)?;
    if message.kind() == expected {
        Ok(message)
    } else {
        Err(HandshakeRejection::UnexpectedMessage {
            expected,
            got: message.kind(),
        })
    }
}

/// Both Hellos are known: agree on a version; the initiator proves the secret.
fn on_hello(
    config: HandshakeOptions,
    our_hello: Bytes,
    their_hello: Bytes,
) -> (Handshake, Vec<HandshakeAction>) {
    let hello = match decode(&their_hello, "hello") {
        Ok(HandshakeMessage::Hello(hello)) => hello,
        Ok(_) => unreachable!("decode checks the kind"),
        Err(mut reason) => {
            if let HandshakeRejection::VersionMismatch(mismatch) = &mut reason {
                mismatch.ours = config.versions;
            }
            return reject(reason);
        }
    };
    let version = match config.versions.negotiate(hello.versions) {
        Ok(version) => version,
        Err(mismatch) => return reject(HandshakeRejection::VersionMismatch(mismatch)),
    };
    match config.role {
        Role::Initiator => {
            let transcript = Transcript {
                initiator_hello: our_hello,
                acceptor_hello: their_hello,
                version,
            };
            let tag = config.secret.tag(
                KIND_PROOF,
                &[&transcript.initiator_hello, &transcript.acceptor_hello],
            );
            match HandshakeMessage::Proof(tag).encode() {
                Ok(proof) => (
                    Handshake::AwaitingIdentity {
                        config,
                        transcript,
                        our_identity: None,
                    },
                    vec![HandshakeAction::Send(proof)],
                ),
                Err(e) => reject(HandshakeRejection::Malformed(e)),
            }
        }
        Role::Acceptor => (
            Handshake::AwaitingProof {
                config,
                transcript: Transcript {
                    initiator_hello: their_hello,
                    acceptor_hello: our_hello,
                    version,
                },
            },
            vec![],
        ),
    }
}

/// Acceptor: the initiator's proof. Only a correct one earns our identity.
fn on_proof(
    config: HandshakeOptions,
    transcript: Transcript,
    bytes: &[u8],
) -> (Handshake, Vec<HandshakeAction>) {
    let tag = match decode(bytes, "proof") {
        Ok(HandshakeMessage::Proof(tag)) => tag,
        Ok(_) => unreachable!("decode checks the kind"),
        Err(reason) => return reject(reason),
    };
    let expected = config.secret.tag(
        KIND_PROOF,
        &[&transcript.initiator_hello, &transcript.acceptor_hello],
    );
    if !bool::from(tag.ct_eq(&expected)) {
        return reject(HandshakeRejection::BadProof);
    }
    let body = match identity_body(&config.local) {
        Ok(body) => body,
        Err(e) => return reject(HandshakeRejection::Malformed(e)),
    };
    let tag = config.secret.tag(
        Role::Acceptor.identity_purpose(),
        &[
            &transcript.initiator_hello,
            &transcript.acceptor_hello,
            &body,
        ],
    );
    let mut message = body;
    message.put_slice(&tag);
    let message = message.freeze();
    (
        Handshake::AwaitingIdentity {
            config,
            transcript,
            our_identity: Some(message.clone()),
        },
        vec![HandshakeAction::Send(message)],
    )
}

impl Role {
    /// The purpose byte of the tag on this role's identity message.
    fn identity_purpose(self) -> u8 {
        match self {
            Self::Initiator => b'I',
            Self::Acceptor => b'A',
        }
    }
}

/// The peer's identity: check its tag, its system and (initiator) the dialled address.
fn on_identity(
    config: &HandshakeOptions,
    transcript: &Transcript,
    our_identity: Option<&[u8]>,
    bytes: &[u8],
) -> (Handshake, Vec<HandshakeAction>) {
    let identity = match decode(bytes, "identity") {
        Ok(HandshakeMessage::Identity(identity)) => identity,
        Ok(_) => unreachable!("decode checks the kind"),
        Err(reason) => return reject(reason),
    };
    let body = &bytes[..bytes.len() - TAG_LEN];
    let hellos: [&[u8]; 2] = [&transcript.initiator_hello, &transcript.acceptor_hello];
    let expected = match (config.role, our_identity) {
        (Role::Initiator, _) => config.secret.tag(
            Role::Acceptor.identity_purpose(),
            &[hellos[0], hellos[1], body],
        ),
        (Role::Acceptor, Some(ours)) => config.secret.tag(
            Role::Initiator.identity_purpose(),
            &[hellos[0], hellos[1], ours, body],
        ),
        (Role::Acceptor, None) => unreachable!("an acceptor sends its identity first"),
    };
    if !bool::from(identity.tag.ct_eq(&expected)) {
        return reject(HandshakeRejection::BadProof);
    }
    let peer = identity.node;
    if peer.address.system != config.local.address.system {
        return reject(HandshakeRejection::WrongSystem {
            ours: config.local.address.system.to_string(),
            theirs: peer.address.system.to_string(),
        });
    }
    let version = transcript.version;
    match config.role {
        Role::Acceptor => (
            Handshake::Established {
                peer: peer.clone(),
                version,
            },
            vec![HandshakeAction::Established { peer, version }],
        ),
        Role::Initiator => {
            if let Some(expected) = &config.expected_peer {
                if *expected != peer.address {
                    return reject(HandshakeRejection::UnexpectedPeer {
                        expected: expected.clone(),
                        actual: peer.address,
                    });
                }
            }
            let our_body = match identity_body(&config.local) {
                Ok(body) => body,
                Err(e) => return reject(HandshakeRejection::Malformed(e)),
            };
            let tag = config.secret.tag(
                Role::Initiator.identity_purpose(),
                &[hellos[0], hellos[1], bytes, &our_body],
            );
            let mut message = our_body;
            message.put_slice(&tag);
            (
                Handshake::Established {
                    peer: peer.clone(),
                    version,
                },
                vec![
                    HandshakeAction::Send(message.freeze()),
                    HandshakeAction::Established { peer, version },
                ],
            )
        }
    }
}

#[cfg(test)]
mod tests;
