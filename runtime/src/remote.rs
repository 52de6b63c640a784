//! Remoting: node addresses, the authenticated transport between nodes, and its simulated
//! twin for deterministic multi-node tests.
//!
//! # Who sent this
//! Every inbound frame carries the [`UniqueAddress`] that the transport verified during the
//! handshake on the connection the frame arrived on. Nothing that decides who sent a message
//! reads an address from a payload.

mod address;
pub(crate) mod admission;
pub mod envelope;
pub mod frame;
pub mod handshake;
pub mod handshake_v2;
pub(crate) mod remoting;
mod sim;
mod stats;
mod tcp;
pub mod tls;
mod transport;
pub mod version;

pub use address::{Address, AddressError, UniqueAddress};
pub use envelope::{EnvelopeError, WireEnvelope};
pub use handshake::ClusterSecret;
pub use remoting::{
    ACTOR_CHANNEL, ASK_REPLY_CHANNEL, RemoteMessage, RemoteRefError, Remoting, RemotingStats,
    SYSTEM_CHANNEL,
};
pub use sim::{DropReason, LinkConfig, SimNetwork, SimTransport, TraceEvent, TraceOutcome};
pub use stats::{CloseReason, TransportStats, TransportStatsSnapshot};
pub use tcp::{LOG_INTERVAL, TcpTransport, TcpTransportConfig, TcpTransportError};
pub use tls::{TlsConfig, TlsConfigError};
pub use transport::{InboundFrame, Transport, TransportError};
