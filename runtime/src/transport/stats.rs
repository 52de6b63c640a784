//! Counters of a transport: frames and bytes each way, handshakes, and closed connections by
//! reason. Lock-free to update, readable as a [`TransportStatsSnapshot`] at any time.
//!
//! # Waiting on a counter
//! Connection-level events (handshakes, closes, failed connects) also bump a watch channel,
//! so a test or a health check can await "a handshake was rejected" instead of polling.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use tokio::sync::watch;

/// Why a connection was closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CloseReason {
    /// The handshake failed: wrong secret, other version, garbage, timeout.
    HandshakeRejected,
    /// The TLS handshake failed: no or an untrusted certificate, a plain-TCP peer, timeout.
    TlsRejected,
    /// Too many accepted connections were already in their handshake.
    HandshakeBacklogFull,
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
    pub const ALL: [Self; 12] = [
        Self::HandshakeRejected,
        Self::TlsRejected,
        Self::HandshakeBacklogFull,
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
            Self::HandshakeBacklogFull => "handshake_backlog_full",
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
    closed: [AtomicU64; CloseReason::ALL.len()],
    changed: watch::Sender<()>,
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
            closed: Default::default(),
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

    pub(crate) fn handshake_ok(&self) {
        self.handshakes_ok.fetch_add(1, Relaxed);
        self.notify();
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
            closed: std::array::from_fn(|i| self.closed[i].load(Relaxed)),
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
    closed: [u64; CloseReason::ALL.len()],
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
}
