//! The TCP transport: authenticated, length-framed connections between nodes.
//!
//! # Connections
//! Each node dials **one outbound connection per peer** and only writes to it; it reads from
//! the connections its peers dialled. A pair of nodes therefore uses two connections, and
//! every sender→receiver stream is one TCP stream, which is what makes per-peer FIFO hold.
//! Every connection starts with the [`handshake`](super::handshake); until the peer has proven
//! the secret its frames are limited to [`MAX_UNPROVEN_MESSAGE_LEN`] bytes, so an
//! unauthenticated peer can make us buffer at most that much.
//!
//! # Sending
//! [`Transport::send`] puts the payload in the peer's bounded queue and returns; a writer task
//! per peer connects (with exponential backoff), handshakes, and then drains the queue,
//! coalescing whatever is queued into one write and writing as soon as the queue is empty.
//! While it (re)connects frames wait in the queue; beyond its capacity `send` fails with
//! [`TransportError::QueueFull`]. Frames that were in a write when a connection broke are
//! lost: delivery is in order or not at all, never reordered. The writer also watches its
//! socket for the peer closing, so it notices a restarted peer without having to write first.
//!
//! # Receiving
//! Inbound frames go to the channel given at [`TcpTransport::bind`], tagged with the
//! identity the handshake verified; a full channel slows reading from the socket (TCP
//! backpressure) rather than dropping. When a peer address opens a new connection, the older
//! one from that address is closed first and its reader finishes before the new one is read,
//! so frames from two connections of one peer are never interleaved.
//!
//! # Bad peers
//! A failed handshake, an oversized length prefix or a stream that ends inside a frame closes
//! that connection only. Every close is counted by [`CloseReason`] in [`TransportStats`];
//! abnormal ones are logged at `warn` within one budget for the whole transport:
//! [`WARN_BURST`] lines, then one per [`LOG_INTERVAL`] (the rest at `debug`, counted as
//! `warnings_suppressed`, and the next warning says how many it stands for), so a flood of
//! bad connections from any number of addresses cannot flood the log.
//!
//! # Admission
//! Before an accepted connection gets a task or a buffer, the
//! [`admission`](super::admission) policy decides: a handshake slot (reserved for sources that
//! proved the secret before, or shared), a refusal with a reset (its source holds its share),
//! or a slot taken from the pending connection that made the least progress. So pending
//! handshakes, their memory and their file descriptors are bounded, and a flood without the
//! secret cannot keep members from reconnecting.
//!
//! # TLS
//! With [`TcpTransportOptions::with_tls`] every connection is mutual TLS first (see
//! [`tls`](super::tls)); the handshake then runs inside it unchanged.

//!
//! # Files
//! [`config`] holds the settings, `accept` the accepting side (accept loop, handshake of
//! accepted connections, frame reading) and `writer` the dialling side (one writer task per
//! peer); this file holds the transport handle, the state its tasks share and the handshake
//! driver both sides run.

mod accept;
mod config;
mod writer;

pub use config::{TcpTransportError, TcpTransportOptions};

use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use rand::RngCore;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::{AbortHandle, JoinHandle};
use tokio::time::{Instant, timeout_at};

use super::admission::{
    self, Admission, AdmissionAction, AdmissionEvent, AdmissionOptions, ConnectionId, Pool,
};
use super::frame::{Decoded, FrameDecoder, encode_frame};
use super::handshake::{
    ClusterSecret, Handshake, HandshakeAction, HandshakeEvent, HandshakeOptions,
    HandshakeRejection, MAX_HANDSHAKE_MESSAGE_LEN, MAX_UNPROVEN_MESSAGE_LEN, NONCE_LEN, Role, step,
};
use super::stats::{CloseReason, TransportStats, TransportStatsSnapshot};
use super::tls::TlsOptions;
use super::version::ProtocolVersions;
use super::{InboundFrame, Transport, TransportError};
use crate::address::{Address, UniqueAddress};

/// After a burst of [`WARN_BURST`], at most one `warn` line about a closed connection per
/// this interval, for the whole transport.
pub const LOG_INTERVAL: Duration = Duration::from_secs(10);
/// `warn` lines about closed connections that may come at once.
pub const WARN_BURST: u32 = 5;

/// Bytes reserved for each socket read when no larger frame is pending.
const READ_CHUNK: usize = 64 * 1024;

/// The TCP implementation of [`Transport`].
pub struct TcpTransport {
    shared: Arc<Shared>,
    local_socket: SocketAddr,
    accept_task: Mutex<Option<JoinHandle<()>>>,
}

impl fmt::Debug for TcpTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TcpTransport")
            .field("local", &self.shared.local)
            .field("listening_on", &self.local_socket)
            .finish_non_exhaustive()
    }
}

/// State shared by the transport handle and its tasks.
struct Shared {
    local: UniqueAddress,
    secret: ClusterSecret,
    max_frame_size: usize,
    send_queue_capacity: usize,
    backoff_min: Duration,
    backoff_max: Duration,
    handshake_timeout: Duration,
    versions: ProtocolVersions,
    admission_settings: AdmissionOptions,
    /// Which accepted connections may be in their handshake (lock after `admitted`).
    admission: Mutex<Admission>,
    /// The handshake task and source of every admitted connection, so one can be evicted.
    admitted: Mutex<HashMap<ConnectionId, (AbortHandle, IpAddr)>>,
    next_admission: AtomicU64,
    /// Inbound handshake tasks alive, evicted ones included until they are dropped.
    live_handshakes: AtomicUsize,
    /// The accept loop stops accepting at this many live handshake tasks.
    max_live_handshakes: usize,
    /// Signalled when a handshake task ends.
    handshake_ended: tokio::sync::Notify,
    tls: Option<TlsOptions>,
    inbound: mpsc::Sender<InboundFrame>,
    stats: Arc<TransportStats>,
    runtime: tokio::runtime::Handle,
    /// Outbound queues, one per peer address.
    writers: Mutex<HashMap<Address, Writer>>,
    /// The connection currently read from, per peer address.
    readers: Mutex<HashMap<Address, Reader>>,
    shutdown: watch::Sender<bool>,
    /// The same flag as `shutdown`, readable on the send path without the watch's lock.
    shut_down: std::sync::atomic::AtomicBool,
    warnings: Mutex<WarnBudget>,
    next_connection: AtomicU64,
}

struct Writer {
    queue: mpsc::Sender<Bytes>,
    task: AbortHandle,
    /// The protocol version of the writer's connection; 0 while it has none.
    version: Arc<AtomicU16>,
}

struct Reader {
    connection: u64,
    stop: watch::Sender<bool>,
    /// Held by the reader for its whole life; a successor waits for it.
    turn: Arc<tokio::sync::Mutex<()>>,
}

impl TcpTransport {
    /// Listens on the configured address and starts accepting peers. Inbound frames go to
    /// `inbound`.
    ///
    /// # Errors
    /// [`TcpTransportError::InvalidConfig`] for out-of-range settings,
    /// [`TcpTransportError::Bind`] when the address cannot be bound.
    pub async fn bind(
        config: TcpTransportOptions,
        inbound: mpsc::Sender<InboundFrame>,
    ) -> Result<Arc<Self>, TcpTransportError> {
        config.validate()?;
        let bind_error = |source| TcpTransportError::Bind {
            addr: config.bind,
            source,
        };
        let listener = TcpListener::bind(config.bind).await.map_err(bind_error)?;
        let local_socket = listener.local_addr().map_err(bind_error)?;
        let local = UniqueAddress {
            address: Address::new(
                &config.system,
                &config.advertised_host,
                config.advertised_port.unwrap_or(local_socket.port()),
            ),
            incarnation: config.incarnation,
        };
        let max_live_handshakes = max_live_handshakes(&config.admission);
        let shared = Arc::new(Shared {
            local,
            secret: config.secret,
            max_frame_size: config.max_frame_size,
            send_queue_capacity: config.send_queue_capacity,
            backoff_min: config.reconnect_backoff_min,
            backoff_max: config.reconnect_backoff_max,
            handshake_timeout: config.handshake_timeout,
            versions: config.protocol_versions,
            admission: Mutex::new(Admission::new(config.admission.clone())),
            admission_settings: config.admission,
            admitted: Mutex::new(HashMap::new()),
            next_admission: AtomicU64::new(0),
            live_handshakes: AtomicUsize::new(0),
            max_live_handshakes,
            handshake_ended: tokio::sync::Notify::new(),
            tls: config.tls,
            inbound,
            stats: Arc::new(TransportStats::default()),
            runtime: tokio::runtime::Handle::current(),
            writers: Mutex::new(HashMap::new()),
            readers: Mutex::new(HashMap::new()),
            shutdown: watch::Sender::new(false),
            shut_down: std::sync::atomic::AtomicBool::new(false),
            warnings: Mutex::new(WarnBudget::new(Instant::now())),
            next_connection: AtomicU64::new(0),
        });
        let accept_task = tokio::spawn(accept::accept_loop(shared.clone(), listener));
        tracing::debug!(local = %shared.local, socket = %local_socket, "TCP transport listening");
        Ok(Arc::new(Self {
            shared,
            local_socket,
            accept_task: Mutex::new(Some(accept_task)),
        }))
    }

    /// The socket address actually bound (useful with port 0).
    #[must_use]
    pub fn local_socket_addr(&self) -> SocketAddr {
        self.local_socket
    }

    /// The transport's counters.
    #[must_use]
    pub fn stats(&self) -> &Arc<TransportStats> {
        &self.shared.stats
    }

    /// A copy of the counters now.
    #[must_use]
    pub fn stats_snapshot(&self) -> TransportStatsSnapshot {
        self.shared.stats.snapshot()
    }

    /// Accepted connections in their handshake now, in `pool`.
    #[must_use]
    pub fn pending_handshakes(&self, pool: Pool) -> usize {
        self.shared.admission.lock().pending(pool)
    }

    /// Source addresses remembered as having proven the secret (they get reserved slots).
    #[must_use]
    pub fn known_sources(&self) -> usize {
        self.shared.admission.lock().known_sources()
    }

    /// Stops accepting, closes every connection and drops queued frames. Later sends fail
    /// with [`TransportError::Shutdown`]. Returns once the listening socket is closed.
    pub async fn shutdown(&self) {
        self.shared.begin_shutdown();
        for (_, writer) in self.shared.writers.lock().drain() {
            writer.task.abort();
        }
        let accept_task = self.accept_task.lock().take();
        if let Some(task) = accept_task {
            task.abort();
            let _ = task.await;
        }
    }
}

impl Drop for TcpTransport {
    fn drop(&mut self) {
        self.shared.begin_shutdown();
        for (_, writer) in self.shared.writers.lock().drain() {
            writer.task.abort();
        }
        if let Some(task) = self.accept_task.lock().take() {
            task.abort();
        }
    }
}

impl Transport for TcpTransport {
    fn local(&self) -> &UniqueAddress {
        &self.shared.local
    }

    fn send(&self, to: &Address, payload: Bytes) -> Result<(), TransportError> {
        let shared = &self.shared;
        if payload.len() > shared.max_frame_size {
            return Err(TransportError::FrameTooLarge {
                size: payload.len(),
                max: shared.max_frame_size,
            });
        }
        if shared.is_shut_down() {
            return Err(TransportError::Shutdown);
        }
        let mut writers = shared.writers.lock();
        let payload = match writers.get(to) {
            None => payload,
            Some(writer) => match writer.queue.try_send(payload) {
                Ok(()) => return Ok(()),
                Err(mpsc::error::TrySendError::Full(_)) => {
                    return Err(TransportError::QueueFull {
                        peer: to.clone(),
                        capacity: shared.send_queue_capacity,
                    });
                }
                // The writer is gone (it only ends on shutdown or disconnect): start a new one.
                Err(mpsc::error::TrySendError::Closed(payload)) => payload,
            },
        };
        let (queue, rx) = mpsc::channel(shared.send_queue_capacity);
        // A fresh queue has room for its first frame.
        let _ = queue.try_send(payload);
        let version = Arc::new(AtomicU16::new(0));
        let task = shared
            .runtime
            .spawn(writer::run_writer(
                self.shared.clone(),
                to.clone(),
                rx,
                version.clone(),
            ))
            .abort_handle();
        writers.insert(
            to.clone(),
            Writer {
                queue,
                task,
                version,
            },
        );
        Ok(())
    }

    fn peer_version(&self, peer: &Address) -> Option<u16> {
        let writers = self.shared.writers.lock();
        match writers.get(peer)?.version.load(Ordering::Relaxed) {
            0 => None,
            version => Some(version),
        }
    }

    fn disconnect(&self, peer: &Address) {
        let writer = self.shared.writers.lock().remove(peer);
        if let Some(writer) = writer {
            writer.task.abort();
            self.shared.stats.closed(CloseReason::Disconnected);
        }
        let reader = self.shared.readers.lock().remove(peer);
        if let Some(reader) = reader {
            reader.stop.send_replace(true);
        }
    }
}

impl Shared {
    fn is_shut_down(&self) -> bool {
        self.shut_down.load(std::sync::atomic::Ordering::Acquire)
    }

    fn begin_shutdown(&self) {
        self.shut_down
            .store(true, std::sync::atomic::Ordering::Release);
        self.shutdown.send_replace(true);
    }

    fn handshake_config(&self, role: Role, expected_peer: Option<Address>) -> HandshakeOptions {
        HandshakeOptions {
            local: self.local.clone(),
            secret: self.secret.clone(),
            role,
            expected_peer,
            versions: self.versions,
        }
    }

    /// Advances the admission policy (callers that hold `admitted` lock it first).
    fn admission_step(&self, event: AdmissionEvent) -> Vec<AdmissionAction> {
        let mut state = self.admission.lock();
        let current =
            std::mem::replace(&mut *state, Admission::new(self.admission_settings.clone()));
        let (next, actions) = admission::step(current, event, Instant::now());
        *state = next;
        actions
    }

    /// Decides what an accepted connection gets, and does it: a handshake task, a reset, or
    /// an older pending connection's slot.
    fn admit(self: &Arc<Self>, stream: TcpStream, remote: SocketAddr) {
        let id = self.next_admission.fetch_add(1, Ordering::Relaxed);
        let mut stream = Some(stream);
        // Held while spawning, so that a task finishing at once finds its own entry to remove.
        let mut admitted = self.admitted.lock();
        for action in self.admission_step(AdmissionEvent::Arrived {
            id,
            source: remote.ip(),
        }) {
            match action {
                AdmissionAction::Admit { .. } => {
                    if let Some(stream) = stream.take() {
                        self.live_handshakes.fetch_add(1, Ordering::AcqRel);
                        let guard = AdmissionGuard {
                            shared: self.clone(),
                            id,
                        };
                        let task = tokio::spawn(accept::serve_inbound(
                            self.clone(),
                            stream,
                            remote,
                            guard,
                        ));
                        admitted.insert(id, (task.abort_handle(), remote.ip()));
                    }
                }
                AdmissionAction::Refuse { .. } => {
                    if let Some(stream) = stream.take() {
                        // A reset: no lingering state for a connection we never served.
                        let _ = stream.set_zero_linger();
                        drop(stream);
                    }
                    self.record_close(
                        CloseReason::SourceLimit,
                        Some(remote.ip()),
                        &"its source already holds its share of the handshake slots",
                    );
                }
                AdmissionAction::Evict { id: victim, pool } => {
                    if let Some((task, ip)) = admitted.remove(&victim) {
                        task.abort();
                        self.record_close(
                            CloseReason::Evicted,
                            Some(ip),
                            &format_args!(
                                "its slot in the {pool} handshake pool went to a newer connection"
                            ),
                        );
                    }
                }
            }
        }
    }

    /// An admitted connection's handshake is over (or its task was dropped).
    fn finish_admission(&self, id: ConnectionId, authenticated: bool) {
        // An evicted connection is no longer in either; stepping is then harmless.
        let mut admitted = self.admitted.lock();
        admitted.remove(&id);
        let event = if authenticated {
            AdmissionEvent::Authenticated { id }
        } else {
            AdmissionEvent::Ended { id }
        };
        let _ = self.admission_step(event);
        drop(admitted);
        self.live_handshakes.fetch_sub(1, Ordering::AcqRel);
        self.handshake_ended.notify_one();
    }

    /// Waits while too many handshake tasks are alive: an evicted task closes its socket
    /// only when the runtime drops it, and connections waiting in the kernel's accept queue
    /// cost this process no file descriptor.
    async fn accept_capacity(&self) {
        while self.live_handshakes.load(Ordering::Acquire) >= self.max_live_handshakes {
            let ended = self.handshake_ended.notified();
            if self.live_handshakes.load(Ordering::Acquire) < self.max_live_handshakes {
                return;
            }
            ended.await;
        }
    }

    /// Counts a failed handshake (by version, when that was why) and closes for it.
    fn handshake_rejected(
        &self,
        peer_ip: Option<IpAddr>,
        reason: &HandshakeRejection,
        detail: &dyn fmt::Display,
    ) {
        self.stats.handshake_rejected();
        if let HandshakeRejection::VersionMismatch(mismatch) = reason {
            self.stats.version_refused(mismatch.theirs);
        }
        self.record_close(CloseReason::HandshakeRejected, peer_ip, detail);
    }

    /// Counts a failed TLS handshake as a rejected handshake closed for `TlsRejected`.
    fn tls_rejected(&self, peer_ip: Option<IpAddr>, detail: &dyn fmt::Display) {
        self.stats.handshake_rejected();
        self.record_close(CloseReason::TlsRejected, peer_ip, detail);
    }

    /// Counts a closed connection and logs it (abnormal reasons at warn, rate-limited).
    fn record_close(
        &self,
        reason: CloseReason,
        peer_ip: Option<IpAddr>,
        detail: &dyn fmt::Display,
    ) {
        self.stats.closed(reason);
        let abnormal = matches!(
            reason,
            CloseReason::HandshakeRejected
                | CloseReason::TlsRejected
                | CloseReason::SourceLimit
                | CloseReason::Evicted
                | CloseReason::OversizedFrame
                | CloseReason::TruncatedFrame
                | CloseReason::UnexpectedBytes
                | CloseReason::IoError
        );
        let ip = peer_ip.map_or_else(|| "?".to_owned(), |ip| ip.to_string());
        if !abnormal {
            tracing::debug!(peer_ip = %ip, reason = %reason, "closing connection: {detail}");
            return;
        }
        let allowed = self.warnings.lock().take(Instant::now());
        match allowed {
            Some(0) => {
                tracing::warn!(peer_ip = %ip, reason = %reason, "closing connection: {detail}")
            }
            Some(suppressed) => tracing::warn!(
                peer_ip = %ip,
                reason = %reason,
                suppressed,
                "closing connection: {detail} ({suppressed} more such warnings were suppressed since the last one)"
            ),
            None => {
                self.stats.warning_suppressed();
                tracing::debug!(peer_ip = %ip, reason = %reason, "closing connection: {detail}");
            }
        }
    }
}

/// Ends an admitted connection's claim on its handshake slot whichever way its task ends:
/// done, failed, or dropped because it was evicted.
pub(super) struct AdmissionGuard {
    shared: Arc<Shared>,
    id: ConnectionId,
}

impl AdmissionGuard {
    /// The handshake is over: free the slot, and remember the source if it proved the secret.
    pub(super) fn finish(self, authenticated: bool) {
        self.shared.finish_admission(self.id, authenticated);
        std::mem::forget(self);
    }

    /// The first handshake message was valid.
    pub(super) fn progressed(&self) {
        let _ = self
            .shared
            .admission_step(AdmissionEvent::Progressed { id: self.id });
    }
}

impl Drop for AdmissionGuard {
    fn drop(&mut self) {
        self.shared.finish_admission(self.id, false);
    }
}

/// One budget for every `warn` line about a closed connection: [`WARN_BURST`] at once, then
/// one per [`LOG_INTERVAL`]; the lines left out are counted.
#[derive(Debug)]
struct WarnBudget {
    tokens: u32,
    refilled_at: Instant,
    suppressed: u64,
}

impl WarnBudget {
    fn new(now: Instant) -> Self {
        Self {
            tokens: WARN_BURST,
            refilled_at: now,
            suppressed: 0,
        }
    }

    /// `Some(lines suppressed since the last one)` when a line may be written at `now`.
    fn take(&mut self, now: Instant) -> Option<u64> {
        if self.tokens == WARN_BURST {
            self.refilled_at = now;
        } else {
            let intervals = now.saturating_duration_since(self.refilled_at).as_nanos()
                / LOG_INTERVAL.as_nanos();
            let intervals = u32::try_from(intervals).unwrap_or(u32::MAX);
            if intervals > 0 {
                self.tokens = self.tokens.saturating_add(intervals).min(WARN_BURST);
                self.refilled_at = if self.tokens == WARN_BURST {
                    now
                } else {
                    self.refilled_at + LOG_INTERVAL * intervals
                };
            }
        }
        if self.tokens == 0 {
            self.suppressed += 1;
            return None;
        }
        self.tokens -= 1;
        Some(std::mem::take(&mut self.suppressed))
    }
}

/// Live inbound handshake tasks allowed: every pending slot, and a quarter more for evicted
/// tasks the runtime has not dropped yet.
fn max_live_handshakes(admission: &AdmissionOptions) -> usize {
    admission.max_pending() + admission.max_pending() / 4
}

/// A finished handshake.
struct Established {
    peer: UniqueAddress,
    version: u16,
    /// Bytes that followed the handshake in the same reads.
    leftover: BytesMut,
}

/// Runs the handshake on a fresh connection. `admission` (accepted connections) hears when
/// the peer's first message was valid.
async fn handshake<S: AsyncRead + AsyncWrite + Unpin>(
    shared: &Shared,
    stream: &mut S,
    role: Role,
    expected_peer: Option<Address>,
    deadline: Instant,
    admission: Option<&AdmissionGuard>,
) -> Result<Established, HandshakeRejection> {
    let mut nonce = [0; NONCE_LEN];
    rand::rng().fill_bytes(&mut nonce);
    let mut state = Handshake::new(shared.handshake_config(role, expected_peer), nonce);
    let mut buf = BytesMut::with_capacity(4 * MAX_UNPROVEN_MESSAGE_LEN);
    let mut out = BytesMut::new();
    let mut event = HandshakeEvent::Start;
    let mut progressed = false;
    loop {
        let actions;
        (state, actions) = step(state, event, Instant::now());
        if !progressed && state.has_peer_hello() {
            progressed = true;
            if let Some(admission) = admission {
                admission.progressed();
            }
        }
        for action in actions {
            match action {
                HandshakeAction::Send(message) => {
                    out.clear();
                    encode_frame(&message, MAX_HANDSHAKE_MESSAGE_LEN, &mut out)
                        .map_err(HandshakeRejection::Frame)?;
                    let write = async {
                        stream.write_all(&out).await?;
                        stream.flush().await
                    };
                    match timeout_at(deadline, write).await {
                        Ok(Ok(())) => {}
                        Ok(Err(_)) => return Err(HandshakeRejection::Closed),
                        Err(_) => return Err(HandshakeRejection::TimedOut),
                    }
                }
                HandshakeAction::Established { peer, version } => {
                    return Ok(Established {
                        peer,
                        version,
                        leftover: buf,
                    });
                }
                HandshakeAction::Reject(reason) => return Err(reason),
            }
        }
        // Until the peer has proven the secret, only small frames.
        let decoder = FrameDecoder::new(state.max_next_message_len());
        event = loop {
            match decoder.decode(&mut buf) {
                Ok(Decoded::Frame(message)) => break HandshakeEvent::Received(message),
                Ok(Decoded::NeedMore { .. }) => {}
                Err(e) => break HandshakeEvent::ConnectionFailed(Some(e)),
            }
            match timeout_at(deadline, stream.read_buf(&mut buf)).await {
                Err(_) => break HandshakeEvent::TimedOut,
                Ok(Ok(0)) => break HandshakeEvent::ConnectionFailed(decoder.finish(&buf).err()),
                Ok(Ok(_)) => {}
                Ok(Err(_)) => break HandshakeEvent::ConnectionFailed(None),
            }
        };
    }
}

/// Resolves once the watched flag is (or becomes) true, or its sender is gone.
async fn until_true(flag: &mut watch::Receiver<bool>) {
    let _ = flag.wait_for(|set| *set).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret() -> ClusterSecret {
        ClusterSecret::new("unit-test-cluster-secret").unwrap()
    }

    fn config() -> TcpTransportOptions {
        TcpTransportOptions::new("app", "127.0.0.1:0".parse().unwrap(), secret())
    }

    #[tokio::test]
    async fn the_advertised_address_uses_the_port_actually_bound() {
        let (tx, _rx) = mpsc::channel(8);
        let t = TcpTransport::bind(config().with_incarnation(7), tx)
            .await
            .unwrap();
        let port = t.local_socket_addr().port();
        assert_ne!(port, 0);
        assert_eq!(t.local().address, Address::new("app", "127.0.0.1", port));
        assert_eq!(t.local().incarnation, 7);
        t.shutdown().await;
    }

    #[tokio::test]
    async fn out_of_range_settings_are_rejected_with_what_is_allowed() {
        for (config, needle) in [
            (config().with_max_frame_size(0), "max_frame_size"),
            (config().with_send_queue_capacity(0), "send_queue_capacity"),
            (
                config().with_reconnect_backoff(Duration::from_secs(2), Duration::from_secs(1)),
                "backoff",
            ),
            (
                config().with_handshake_timeout(Duration::ZERO),
                "handshake_timeout",
            ),
            (
                config().with_admission(AdmissionOptions::default().with_reserved_slots(0)),
                "reserved_slots",
            ),
            (
                config().with_protocol_versions(ProtocolVersions::only(
                    ProtocolVersions::THIS_BUILD.highest() + 1,
                )),
                "protocol_versions",
            ),
        ] {
            let (tx, _rx) = mpsc::channel(8);
            let err = TcpTransport::bind(config, tx).await.unwrap_err();
            assert!(err.to_string().contains(needle), "{err}");
        }
    }

    #[tokio::test]
    async fn sending_after_shutdown_or_above_the_maximum_fails() {
        let (tx, _rx) = mpsc::channel(8);
        let t = TcpTransport::bind(config().with_max_frame_size(10), tx)
            .await
            .unwrap();
        let peer = Address::new("app", "127.0.0.1", 1);
        assert_eq!(
            t.send(&peer, Bytes::from_static(&[0; 11])),
            Err(TransportError::FrameTooLarge { size: 11, max: 10 })
        );
        t.shutdown().await;
        assert_eq!(
            t.send(&peer, Bytes::from_static(b"x")),
            Err(TransportError::Shutdown)
        );
    }

    #[tokio::test]
    async fn frames_beyond_the_queue_capacity_fail_with_queue_full_while_connecting() {
        let (tx, _rx) = mpsc::channel(8);
        // Nobody listens on port 1: the writer keeps reconnecting and the queue fills.
        let t = TcpTransport::bind(config().with_send_queue_capacity(3), tx)
            .await
            .unwrap();
        let peer = Address::new("app", "127.0.0.1", 1);
        let mut results = Vec::new();
        for _ in 0..5 {
            results.push(t.send(&peer, Bytes::from_static(b"x")));
        }
        // The writer may have taken one frame out of the queue to hold while dialling.
        let full = results
            .iter()
            .filter(|r| matches!(r, Err(TransportError::QueueFull { capacity: 3, .. })))
            .count();
        assert!((1..=2).contains(&full), "{results:?}");
        t.shutdown().await;
    }

    #[test]
    fn warnings_share_one_budget_a_burst_then_one_per_interval() {
        let t0 = Instant::now();
        let mut budget = WarnBudget::new(t0);
        for _ in 0..WARN_BURST {
            assert_eq!(budget.take(t0), Some(0));
        }
        // Whatever the source, the budget is spent: lines are counted, not written.
        assert_eq!(budget.take(t0 + Duration::from_secs(1)), None);
        assert_eq!(budget.take(t0 + Duration::from_secs(9)), None);
        // One interval later, one line, which says how many it stands for.
        assert_eq!(budget.take(t0 + LOG_INTERVAL), Some(2));
        assert_eq!(budget.take(t0 + LOG_INTERVAL), None);
        // A long quiet spell refills at most a burst.
        let later = t0 + LOG_INTERVAL * 100;
        for _ in 0..WARN_BURST {
            assert!(budget.take(later).is_some());
        }
        assert_eq!(budget.take(later), None);
    }

    #[test]
    fn a_flood_of_ten_thousand_warnings_writes_a_handful_of_lines() {
        let t0 = Instant::now();
        let mut budget = WarnBudget::new(t0);
        // 10,000 warnings over 35 s, as in issue 14.
        let written = (0..10_000u64)
            .filter(|i| {
                budget
                    .take(t0 + Duration::from_millis(i * 35_000 / 10_000))
                    .is_some()
            })
            .count();
        assert_eq!(written, WARN_BURST as usize + 3);
    }
}
