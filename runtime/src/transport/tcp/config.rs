//! The settings of a [`TcpTransport`](super::TcpTransport) and why it could not start.

use std::net::SocketAddr;
use std::time::Duration;

use crate::transport::admission::AdmissionOptions;
use crate::transport::frame::DEFAULT_MAX_FRAME_SIZE;
use crate::transport::handshake::ClusterSecret;
use crate::transport::tls::TlsOptions;
use crate::transport::version::ProtocolVersions;

/// Settings of a [`TcpTransport`](super::TcpTransport). Defaults are documented on each setter.
#[derive(Debug, Clone)]
pub struct TcpTransportOptions {
    pub(super) bind: SocketAddr,
    pub(super) system: String,
    pub(super) advertised_host: String,
    pub(super) advertised_port: Option<u16>,
    pub(super) incarnation: u64,
    pub(super) secret: ClusterSecret,
    pub(super) max_frame_size: usize,
    pub(super) send_queue_capacity: usize,
    pub(super) reconnect_backoff_min: Duration,
    pub(super) reconnect_backoff_max: Duration,
    pub(super) handshake_timeout: Duration,
    pub(super) admission: AdmissionOptions,
    pub(super) protocol_versions: ProtocolVersions,
    pub(super) tls: Option<TlsOptions>,
}

impl TcpTransportOptions {
    /// Listen on `bind` (port 0 picks a free port) for actor system `system`, authenticating
    /// peers with `secret`. The advertised host defaults to the bind IP and the incarnation to
    /// a random number.
    #[must_use]
    pub fn new(system: &str, bind: SocketAddr, secret: ClusterSecret) -> Self {
        Self {
            bind,
            system: system.to_owned(),
            advertised_host: bind.ip().to_string(),
            advertised_port: None,
            incarnation: rand::random(),
            secret,
            max_frame_size: DEFAULT_MAX_FRAME_SIZE,
            send_queue_capacity: 4096,
            reconnect_backoff_min: Duration::from_millis(100),
            reconnect_backoff_max: Duration::from_secs(5),
            handshake_timeout: Duration::from_secs(5),
            admission: AdmissionOptions::default(),
            protocol_versions: ProtocolVersions::THIS_BUILD,
            tls: None,
        }
    }

    /// Which accepted connections may run a handshake (default [`AdmissionOptions::default`]:
    /// 256 general slots, 64 reserved for sources that proved the secret before, 8 per
    /// source); see [`admission`](crate::transport::admission).
    #[must_use]
    pub fn with_admission(mut self, admission: AdmissionOptions) -> Self {
        self.admission = admission;
        self
    }

    /// The protocol versions this node offers (default: all this build speaks,
    /// [`ProtocolVersions::THIS_BUILD`]). Must lie within what the build speaks; offering
    /// less keeps a node on an older version, as a test of a mixed cluster does.
    #[must_use]
    pub fn with_protocol_versions(mut self, versions: ProtocolVersions) -> Self {
        self.protocol_versions = versions;
        self
    }

    /// Wrap every connection in mutual TLS (default: plain TCP). Both ends of a link must
    /// agree; a plain-TCP peer cannot talk to a TLS node.
    #[must_use]
    pub fn with_tls(mut self, tls: TlsOptions) -> Self {
        self.tls = Some(tls);
        self
    }

    /// The host peers use to reach this node (default: the bind IP).
    #[must_use]
    pub fn with_advertised_host(mut self, host: &str) -> Self {
        host.clone_into(&mut self.advertised_host);
        self
    }

    /// The port peers use to reach this node (default: the port actually bound).
    #[must_use]
    pub fn with_advertised_port(mut self, port: u16) -> Self {
        self.advertised_port = Some(port);
        self
    }

    /// This process's incarnation (default: random).
    #[must_use]
    pub fn with_incarnation(mut self, incarnation: u64) -> Self {
        self.incarnation = incarnation;
        self
    }

    /// The largest payload sent or accepted (default [`DEFAULT_MAX_FRAME_SIZE`], 1 MiB).
    #[must_use]
    pub fn with_max_frame_size(mut self, bytes: usize) -> Self {
        self.max_frame_size = bytes;
        self
    }

    /// Frames that may wait for one peer (default 4096).
    #[must_use]
    pub fn with_send_queue_capacity(mut self, frames: usize) -> Self {
        self.send_queue_capacity = frames;
        self
    }

    /// Delay after the first failed connection attempt, doubled per failure up to `max`
    /// (default 100 ms to 5 s).
    #[must_use]
    pub fn with_reconnect_backoff(mut self, min: Duration, max: Duration) -> Self {
        self.reconnect_backoff_min = min;
        self.reconnect_backoff_max = max;
        self
    }

    /// Time allowed for connecting plus the handshake (default 5 s).
    #[must_use]
    pub fn with_handshake_timeout(mut self, timeout: Duration) -> Self {
        self.handshake_timeout = timeout;
        self
    }

    pub(super) fn validate(&self) -> Result<(), TcpTransportError> {
        let invalid = |problem: String| Err(TcpTransportError::InvalidConfig { problem });
        if self.system.is_empty() || self.system.len() > 255 {
            return invalid(format!(
                "system name must be 1 to 255 bytes, got {}",
                self.system.len()
            ));
        }
        if self.advertised_host.is_empty() || self.advertised_host.len() > 255 {
            return invalid(format!(
                "advertised host must be 1 to 255 bytes, got {}",
                self.advertised_host.len()
            ));
        }
        if self.max_frame_size == 0 || self.max_frame_size > u32::MAX as usize {
            return invalid(format!(
                "max_frame_size must be from 1 to {} bytes, got {}",
                u32::MAX,
                self.max_frame_size
            ));
        }
        if self.send_queue_capacity == 0 {
            return invalid("send_queue_capacity must be > 0, got 0".to_owned());
        }
        if self.reconnect_backoff_min.is_zero()
            || self.reconnect_backoff_min > self.reconnect_backoff_max
        {
            return invalid(format!(
                "reconnect backoff must satisfy 0 < min <= max, got {:?}..{:?}",
                self.reconnect_backoff_min, self.reconnect_backoff_max
            ));
        }
        if self.handshake_timeout.is_zero() {
            return invalid("handshake_timeout must be > 0, got 0ms".to_owned());
        }
        if let Err(e) = self.admission.validate() {
            return invalid(e.to_string());
        }
        let build = ProtocolVersions::THIS_BUILD;
        if !build.contains(self.protocol_versions.lowest())
            || !build.contains(self.protocol_versions.highest())
        {
            return invalid(format!(
                "protocol_versions must lie within {build} (what this build speaks), got {}",
                self.protocol_versions
            ));
        }
        Ok(())
    }
}

/// Why a [`TcpTransport`](super::TcpTransport) could not start.
#[derive(Debug, thiserror::Error)]
pub enum TcpTransportError {
    /// A setting is out of range.
    #[error("invalid TCP transport configuration: {problem}")]
    InvalidConfig {
        /// What is wrong and what is allowed.
        problem: String,
    },
    /// The listening socket could not be bound.
    #[error("cannot listen on {addr}")]
    Bind {
        /// The bind address.
        addr: SocketAddr,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}
