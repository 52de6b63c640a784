//! Counters of a transport: frames and bytes each way, handshakes, and closed connections by
//! reason. Lock-free to update, readable as a [`TransportStatsSnapshot`] at any time.
//!
//! # Waiting on a counter
//! Connection-level events (handshakes, closes, failed connects) also bump a watch channel,
//! so a test or a health check can await "a handshake was rejected" instead of polling.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use parking_lot::Mutex;
use tokio::sync::watch;

use super::version::ProtocolVersions;

/// Distinct peer version ranges counted separately when refused; more share one entry, so
/// peers that announce made-up versions cannot grow the counters without bound.
pub const MAX_REFUSED_VERSION_RANGES: usize = 16;

/// Why a connection was closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CloseReason {
    /// The handshake failed: wrong secret, other version, garbage, timeout.
    HandshakeRejected,
    /// The TLS handshake failed: no or an untrusted certificate, a plain-TCP peer, timeout.
    TlsRejected,
    /// Refused on arrival: its source already held its share of the handshake slots.
    SourceLimit,
    /// Its handshake slot went to a newer connection while the slots were full.
    Evicted,
    /// A length prefix announced more than the maximum frame size.
    OversizedFrame,
    /// The peer closed the stream in the middle of a frame.
    TruncatedFrame,
    /// The peer sent bytes where none are expected (on a connection we only write to).
    UnexpectedBytes,
    /// The peer closed the connection cleanly.
    PeerClosed,
    /// A read or write failed.
    IoError,
    /// A newer connection from the same peer address took over.
    Replaced,
    /// [`Transport::disconnect`](super::Transport::disconnect) was called for the peer.
    Disconnected,
    /// Nobody consumes inbound frames any more.
    InboundClosed,
    /// The transport shut down.
    Shutdown,
}

impl CloseReason {
    /// Every reason, in counter order.
    pub const ALL: [Self; 13] = [
        Self::HandshakeRejected,
        Self::TlsRejected,
        Self::SourceLimit,
        Self::Evicted,
        Self::OversizedFrame,
        Self::TruncatedFrame,
        Self::UnexpectedBytes,
        Self::PeerClosed,
        Self::IoError,
        Self::Replaced,
        Self::Disconnected,
        Self::InboundClosed,
        Self::Shutdown,
    ];

    fn index(self) -> usize {
        self as usize
    }

    /// A short snake_case name, for logs and metrics.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::HandshakeRejected => "handshake_rejected",
            Self::TlsRejected => "tls_rejected",
            Self::SourceLimit => "source_limit",
            Self::Evicted => "evicted",
            Self::OversizedFrame => "oversized_frame",
            Self::TruncatedFrame => "truncated_frame",
            Self::UnexpectedBytes => "unexpected_bytes",
            Self::PeerClosed => "peer_closed",
            Self::IoError => "io_error",
            Self::Replaced => "replaced",
            Self::Disconnected => "disconnected",
            Self::InboundClosed => "inbound_closed",
            Self::Shutdown => "shutdown",
        }
    }
}

impl fmt::Display for CloseReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Live counters of one transport.
#[derive(Debug)]
pub struct TransportStats {
    frames_in: AtomicU64,
    frames_out: AtomicU64,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    handshakes_ok: AtomicU64,
    handshakes_rejected: AtomicU64,
    connect_failures: AtomicU64,
    warnings_suppressed: AtomicU64,
    closed: [AtomicU64; CloseReason::ALL.len()],
    /// Handshakes completed, by the protocol version they agreed on.
    established_by_version: Mutex<BTreeMap<u16, u64>>,
    /// Handshakes refused for want of a common version, by the peer's range.
    refused_versions: Mutex<BTreeMap<RefusedVersions, u64>>,
    changed: watch::Sender<()>,
}

/// The version range of a peer refused for want of a common version, as counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RefusedVersions {
    /// A peer that spoke exactly this range.
    Range {
        /// Its lowest version.
        lowest: u16,
        /// Its highest version.
        highest: u16,
    },
    /// Any range beyond the first [`MAX_REFUSED_VERSION_RANGES`].
    Other,
}

impl fmt::Display for RefusedVersions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Range { lowest, highest } => match ProtocolVersions::new(*lowest, *highest) {
                Some(range) => range.fmt(f),
                None => write!(f, "{lowest}-{highest}"),
            },
            Self::Other => f.write_str("other"),
        }
    }
}

impl Default for TransportStats {
    fn default() -> Self {
        Self {
            frames_in: AtomicU64::new(0),
            frames_out: AtomicU64::new(0),
            bytes_in: AtomicU64::new(0),
            bytes_out: AtomicU64::new(0),
            handshakes_ok: AtomicU64::new(0),
            handshakes_rejected: AtomicU64::new(0),
            connect_failures: AtomicU64::new(0),
            warnings_suppressed: AtomicU64::new(0),
            closed: Default::default(),
            established_by_version: Mutex::new(BTreeMap::new()),
            refused_versions: Mutex::new(BTreeMap::new()),
            changed: watch::Sender::new(()),
        }
    }
}

impl TransportStats {
    pub(crate) fn received(&self, frames: u64, bytes: u64) {
        self.frames_in.fetch_add(frames, Relaxed);
        self.bytes_in.fetch_add(bytes, Relaxed);
    }

    pub(crate) fn sent(&self, frames: u64, bytes: u64) {
        self.frames_out.fetch_add(frames, Relaxed);
        self.bytes_out.fetch_add(bytes, Relaxed);
    }

    pub(crate) fn handshake_ok(&self, version: u16) {
        self.handshakes_ok.fetch_add(1, Relaxed);
        *self
            .established_by_version
            .lock()
            .entry(version)
            .or_default() += 1;
        self.notify();
    }

    /// A handshake refused because the peer speaks `theirs` and no version in common.
    pub(crate) fn version_refused(&self, theirs: ProtocolVersions) {
        let key = RefusedVersions::Range {
            lowest: theirs.lowest(),
            highest: theirs.highest(),
        };
        let mut refused = self.refused_versions.lock();
        let key = if refused.contains_key(&key) || refused.len() < MAX_REFUSED_VERSION_RANGES {
            key
        } else {
            RefusedVersions::Other
        };
        *refused.entry(key).or_default() += 1;
    }

    pub(crate) fn warning_suppressed(&self) {
        self.warnings_suppressed.fetch_add(1, Relaxed);
    }

    pub(crate) fn handshake_rejected(&self) {
        self.handshakes_rejected.fetch_add(1, Relaxed);
        self.notify();
    }

    pub(crate) fn connect_failed(&self) {
        self.connect_failures.fetch_add(1, Relaxed);
        self.notify();
    }

    pub(crate) fn closed(&self, reason: CloseReason) {
        self.closed[reason.index()].fetch_add(1, Relaxed);
        self.notify();
    }

    fn notify(&self) {
        self.changed.send_replace(());
    }

    /// The counters now.
    #[must_use]
    pub fn snapshot(&self) -> TransportStatsSnapshot {
        TransportStatsSnapshot {
            frames_in: self.frames_in.load(Relaxed),
            frames_out: self.frames_out.load(Relaxed),
            bytes_in: self.bytes_in.load(Relaxed),
            bytes_out: self.bytes_out.load(Relaxed),
            handshakes_ok: self.handshakes_ok.load(Relaxed),
            handshakes_rejected: self.handshakes_rejected.load(Relaxed),
            connect_failures: self.connect_failures.load(Relaxed),
            warnings_suppressed: self.warnings_suppressed.load(Relaxed),
            closed: std::array::from_fn(|i| self.closed[i].load(Relaxed)),
            established_by_version: self.established_by_version.lock().clone(),
            refused_versions: self.refused_versions.lock().clone(),
        }
    }

    /// Waits until `condition` holds for the counters and returns them. Re-checked after
    /// every connection-level event (frame counters alone do not wake it).
    pub async fn wait_for(
        &self,
        mut condition: impl FnMut(&TransportStatsSnapshot) -> bool,
    ) -> TransportStatsSnapshot {
        let mut changes = self.changed.subscribe();
        loop {
            let snapshot = self.snapshot();
            if condition(&snapshot) {
                return snapshot;
            }
            // The sender lives in `self`, so `changed` cannot fail while we borrow it.
            let _ = changes.changed().await;
        }
    }
}

/// A copy of a transport's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TransportStatsSnapshot {
    /// Frames delivered to the inbound channel.
    pub frames_in: u64,
    /// Frames written to a socket.
    pub frames_out: u64,
    /// Payload bytes delivered (prefixes excluded).
    pub bytes_in: u64,
    /// Payload bytes written (prefixes excluded).
    pub bytes_out: u64,
    /// Handshakes that verified the peer.
    pub handshakes_ok: u64,
    /// Handshakes (TLS or the secret handshake) that failed, on either side of the connection.
    pub handshakes_rejected: u64,
    /// Outbound connection attempts that failed before a handshake could start.
    pub connect_failures: u64,
    /// Warning lines about closed connections left out by the global rate limit.
    pub warnings_suppressed: u64,
    closed: [u64; CloseReason::ALL.len()],
    /// Handshakes completed, by the protocol version they agreed on.
    pub established_by_version: BTreeMap<u16, u64>,
    /// Handshakes refused for want of a common protocol version, by the peer's range.
    pub refused_versions: BTreeMap<RefusedVersions, u64>,
}

impl TransportStatsSnapshot {
    /// Connections closed for `reason`.
    #[must_use]
    pub fn closed(&self, reason: CloseReason) -> u64 {
        self.closed[reason.index()]
    }

    /// Connections closed for any reason.
    #[must_use]
    pub fn closed_total(&self) -> u64 {
        self.closed.iter().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_reasons_are_counted_separately_and_in_total() {
        let stats = TransportStats::default();
        stats.closed(CloseReason::OversizedFrame);
        stats.closed(CloseReason::OversizedFrame);
        stats.closed(CloseReason::Shutdown);
        let s = stats.snapshot();
        assert_eq!(s.closed(CloseReason::OversizedFrame), 2);
        assert_eq!(s.closed(CloseReason::Shutdown), 1);
        assert_eq!(s.closed(CloseReason::PeerClosed), 0);
        assert_eq!(s.closed_total(), 3);
        for (i, r) in CloseReason::ALL.iter().enumerate() {
            assert_eq!(r.index(), i);
        }
    }

    #[tokio::test]
    async fn wait_for_returns_once_an_event_makes_the_condition_true() {
        let stats = std::sync::Arc::new(TransportStats::default());
        let waiter = {
            let stats = stats.clone();
            tokio::spawn(async move { stats.wait_for(|s| s.handshakes_rejected == 1).await })
        };
        tokio::task::yield_now().await;
        stats.handshake_rejected();
        assert_eq!(waiter.await.unwrap().handshakes_rejected, 1);
    }

    #[test]
    fn refused_version_ranges_are_counted_per_range_up_to_a_bound() {
        let stats = TransportStats::default();
        for i in 0..40u16 {
            stats.version_refused(ProtocolVersions::only(100 + i % 20));
        }
        stats.version_refused(ProtocolVersions::new(3, 4).unwrap());
        let s = stats.snapshot();
        assert_eq!(s.refused_versions.len(), MAX_REFUSED_VERSION_RANGES + 1);
        assert_eq!(
            s.refused_versions[&RefusedVersions::Range {
                lowest: 100,
                highest: 100
            }],
            2
        );
        // Ranges 116..=119 and 3-4 came after the bound: counted together.
        assert_eq!(s.refused_versions[&RefusedVersions::Other], 9);
        assert_eq!(
            RefusedVersions::Range {
                lowest: 3,
                highest: 4
            }
            .to_string(),
            "3-4"
        );
    }

    #[test]
    fn established_handshakes_are_counted_by_version() {
        let stats = TransportStats::default();
        stats.handshake_ok(2);
        stats.handshake_ok(3);
        stats.handshake_ok(3);
        let s = stats.snapshot();
        assert_eq!(s.handshakes_ok, 3);
        assert_eq!(s.established_by_version, BTreeMap::from([(2, 1), (3, 2)]));
    }
}
