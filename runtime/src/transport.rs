//! The transport layer: bytes between verified peers. The [`Transport`] seam is what remoting
//! and the cluster need from a network; [`TcpTransport`] implements it over TCP (optionally
//! TLS), and `SimTransport` (with the `test-util` feature) over the simulated network of the
//! multi-node test harness.
//!
//! # Who sent this
//! Every inbound frame carries the [`UniqueAddress`] that the transport verified during the
//! handshake on the connection the frame arrived on. Nothing that decides who sent a message
//! reads an address from a payload.

pub mod admission;
pub mod frame;
pub mod handshake;
#[cfg(feature = "test-util")]
mod sim;
mod stats;
mod tcp;
pub mod tls;
pub mod version;

pub use admission::{AdmissionOptions, AdmissionOptionsError};
pub use handshake::ClusterSecret;
#[cfg(feature = "test-util")]
pub use sim::{DropReason, LinkOptions, SimNetwork, SimTransport, TraceEvent, TraceOutcome};
pub use stats::{
    CloseReason, MAX_REFUSED_VERSION_RANGES, RefusedVersions, TransportStats,
    TransportStatsSnapshot,
};
pub use tcp::{LOG_INTERVAL, TcpTransport, TcpTransportError, TcpTransportOptions, WARN_BURST};
pub use tls::{TlsOptions, TlsOptionsError};
pub use version::{ProtocolVersions, VersionMismatch};

use bytes::Bytes;

use crate::address::{Address, UniqueAddress};

/// One frame received from a peer, tagged with the identity the transport verified.
#[derive(Debug, Clone)]
pub struct InboundFrame {
    /// The peer, as proven during the handshake of the connection the frame arrived on.
    pub from: UniqueAddress,
    /// The frame's payload (an encoded envelope).
    pub payload: Bytes,
}

/// Why a frame was not accepted for sending.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransportError {
    /// The per-peer send queue is full (the peer is slow or unreachable).
    #[error("send queue to {peer} is full ({capacity} frames)")]
    QueueFull {
        /// The peer.
        peer: Address,
        /// The queue's capacity.
        capacity: usize,
    },
    /// The frame is larger than the configured maximum.
    #[error("frame of {size} bytes exceeds the maximum frame size of {max} bytes")]
    FrameTooLarge {
        /// The frame's size.
        size: usize,
        /// The maximum.
        max: usize,
    },
    /// The transport has been shut down.
    #[error("transport is shut down")]
    Shutdown,
}

/// A network between nodes: authenticated, per-peer FIFO, fire-and-forget.
///
/// Inbound frames are delivered on the channel given when the transport was created.
pub trait Transport: Send + Sync + 'static {
    /// This node's own identity.
    fn local(&self) -> &UniqueAddress;

    /// Queue `payload` for `to` without waiting. Frames to one peer arrive in the order they
    /// were queued (or not at all); a connection is opened on first use and re-opened with
    /// backoff after a failure.
    fn send(&self, to: &Address, payload: Bytes) -> Result<(), TransportError>;

    /// Drop the connections to `peer` and forget its queued frames (used when it is removed).
    fn disconnect(&self, peer: &Address);

    /// The protocol version the connection to `peer` agreed on, while there is one (`None`
    /// before the first handshake, or for a transport without versions). A sender uses it to
    /// hold back what an older peer cannot decode, such as a new message kind (see
    /// `docs/architecture.md`, "Evolving wire messages").
    fn peer_version(&self, peer: &Address) -> Option<u16> {
        let _ = peer;
        None
    }
}
