//! The TCP transport: authenticated, length-framed connections between nodes.
//!
//! # Connections
//! Each node dials **one outbound connection per peer** and only writes to it; it reads from
//! the connections its peers dialled. A pair of nodes therefore uses two connections, and
//! every sender→receiver stream is one TCP stream, which is what makes per-peer FIFO hold.
//! Every connection starts with the [`handshake`](super::handshake); until it succeeds frames
//! are limited to [`MAX_HANDSHAKE_MESSAGE_LEN`] bytes, so an unauthenticated peer can make us
//! buffer at most that much.
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
//! abnormal ones are logged at `warn`, at most one line per peer IP per
//! [`LOG_INTERVAL`] (the rest at `debug`), so a flood of bad connections cannot flood the log.
//! At most `max_pending_handshakes` accepted connections may be in their handshake at once;
//! more are closed on arrival, so silent connections cost bounded memory.
//!
//! # TLS
//! With [`TcpTransportConfig::with_tls`] every connection is mutual TLS first (see
//! [`tls`](super::tls)); the handshake then runs inside it unchanged.

use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use rand::RngCore;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};
use tokio::task::{AbortHandle, JoinHandle};
use tokio::time::{Instant, timeout_at};

use super::address::{Address, UniqueAddress};
use super::frame::{
    DEFAULT_MAX_FRAME_SIZE, Decoded, FrameDecoder, FrameError, LENGTH_PREFIX_LEN, encode_frame,
};
use super::handshake::{
    ClusterSecret, Handshake, HandshakeAction, HandshakeConfig, HandshakeEvent, HandshakeRejection,
    MAX_HANDSHAKE_MESSAGE_LEN, NONCE_LEN, Role, step,
};
use super::stats::{CloseReason, TransportStats, TransportStatsSnapshot};
use super::tls::{self, TlsConfig};
use super::transport::{InboundFrame, Transport, TransportError};

/// At most one `warn` line per peer IP in this interval.
pub const LOG_INTERVAL: Duration = Duration::from_secs(10);

/// A writer stops coalescing once a batch reaches this many bytes and writes it.
const MAX_BATCH_BYTES: usize = 256 * 1024;
/// Bytes reserved for each socket read when no larger frame is pending.
const READ_CHUNK: usize = 64 * 1024;

/// Settings of a [`TcpTransport`]. Defaults are documented on each setter.
#[derive(Debug, Clone)]
pub struct TcpTransportConfig {
    bind: SocketAddr,
    system: String,
    advertised_host: String,
    advertised_port: Option<u16>,
    incarnation: u64,
    secret: ClusterSecret,
    max_frame_size: usize,
    send_queue_capacity: usize,
    reconnect_backoff_min: Duration,
    reconnect_backoff_max: Duration,
    handshake_timeout: Duration,
    max_pending_handshakes: usize,
    tls: Option<TlsConfig>,
}

impl TcpTransportConfig {
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
            max_pending_handshakes: 256,
            tls: None,
        }
    }

    /// Accepted connections that may be in their handshake at once (default 256); more are
    /// closed at once (`CloseReason::HandshakeBacklogFull`), so a flood of silent connections
    /// costs bounded memory and cannot starve the accept loop.
    #[must_use]
    pub fn with_max_pending_handshakes(mut self, connections: usize) -> Self {
        self.max_pending_handshakes = connections;
        self
    }

    /// Wrap every connection in mutual TLS (default: plain TCP). Both ends of a link must
    /// agree; a plain-TCP peer cannot talk to a TLS node.
    #[must_use]
    pub fn with_tls(mut self, tls: TlsConfig) -> Self {
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

    fn validate(&self) -> Result<(), TcpTransportError> {
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
        if self.max_pending_handshakes == 0 {
            return invalid("max_pending_handshakes must be > 0, got 0".to_owned());
        }
        Ok(())
    }
}

/// Why a [`TcpTransport`] could not start.
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
    /// One permit per accepted connection still in its handshake.
    handshake_slots: Arc<Semaphore>,
    tls: Option<TlsConfig>,
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
    log_limiter: Mutex<LogLimiter>,
    next_connection: std::sync::atomic::AtomicU64,
}

struct Writer {
    queue: mpsc::Sender<Bytes>,
    task: AbortHandle,
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
        config: TcpTransportConfig,
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
        let shared = Arc::new(Shared {
            local,
            secret: config.secret,
            max_frame_size: config.max_frame_size,
            send_queue_capacity: config.send_queue_capacity,
            backoff_min: config.reconnect_backoff_min,
            backoff_max: config.reconnect_backoff_max,
            handshake_timeout: config.handshake_timeout,
            handshake_slots: Arc::new(Semaphore::new(config.max_pending_handshakes)),
            tls: config.tls,
            inbound,
            stats: Arc::new(TransportStats::default()),
            runtime: tokio::runtime::Handle::current(),
            writers: Mutex::new(HashMap::new()),
            readers: Mutex::new(HashMap::new()),
            shutdown: watch::Sender::new(false),
            shut_down: std::sync::atomic::AtomicBool::new(false),
            log_limiter: Mutex::new(LogLimiter::default()),
            next_connection: std::sync::atomic::AtomicU64::new(0),
        });
        let accept_task = tokio::spawn(accept_loop(shared.clone(), listener));
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
        let task = shared
            .runtime
            .spawn(run_writer(self.shared.clone(), to.clone(), rx))
            .abort_handle();
        writers.insert(to.clone(), Writer { queue, task });
        Ok(())
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

    fn handshake_config(&self, role: Role, expected_peer: Option<Address>) -> HandshakeConfig {
        HandshakeConfig {
            local: self.local.clone(),
            secret: self.secret.clone(),
            role,
            expected_peer,
        }
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
                | CloseReason::HandshakeBacklogFull
                | CloseReason::OversizedFrame
                | CloseReason::TruncatedFrame
                | CloseReason::UnexpectedBytes
                | CloseReason::IoError
        );
        let ip = peer_ip.map_or_else(|| "?".to_owned(), |ip| ip.to_string());
        if abnormal && peer_ip.is_none_or(|ip| self.log_limiter.lock().allow(ip, Instant::now())) {
            tracing::warn!(peer_ip = %ip, reason = %reason, "closing connection: {detail}");
        } else {
            tracing::debug!(peer_ip = %ip, reason = %reason, "closing connection: {detail}");
        }
    }
}

/// Remembers when each peer IP was last logged at warn.
#[derive(Default)]
struct LogLimiter {
    last: HashMap<IpAddr, Instant>,
}

impl LogLimiter {
    /// Whether a warn line for `ip` may be written at `now`.
    fn allow(&mut self, ip: IpAddr, now: Instant) -> bool {
        if self.last.len() > 4096 {
            self.last
                .retain(|_, at| now.duration_since(*at) < LOG_INTERVAL);
        }
        match self.last.get(&ip) {
            Some(at) if now.duration_since(*at) < LOG_INTERVAL => false,
            _ => {
                self.last.insert(ip, now);
                true
            }
        }
    }
}

async fn accept_loop(shared: Arc<Shared>, listener: TcpListener) {
    let mut shutdown = shared.shutdown.subscribe();
    loop {
        tokio::select! {
            biased;
            _ = until_true(&mut shutdown) => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, remote)) => match shared.handshake_slots.clone().try_acquire_owned() {
                    Ok(slot) => {
                        tokio::spawn(serve_inbound(shared.clone(), stream, remote, slot));
                    }
                    Err(_) => {
                        drop(stream);
                        shared.record_close(
                            CloseReason::HandshakeBacklogFull,
                            Some(remote.ip()),
                            &"too many connections are in their handshake",
                        );
                    }
                },
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
        }
    }
}

/// Runs the handshake on a fresh connection; returns the verified peer and any bytes that
/// followed the handshake in the same reads.
async fn handshake<S: AsyncRead + AsyncWrite + Unpin>(
    shared: &Shared,
    stream: &mut S,
    role: Role,
    expected_peer: Option<Address>,
    deadline: Instant,
) -> Result<(UniqueAddress, BytesMut), HandshakeRejection> {
    let mut nonce = [0; NONCE_LEN];
    rand::rng().fill_bytes(&mut nonce);
    let mut state = Handshake::new(shared.handshake_config(role, expected_peer), nonce);
    let decoder = FrameDecoder::new(MAX_HANDSHAKE_MESSAGE_LEN);
    let mut buf = BytesMut::with_capacity(2 * MAX_HANDSHAKE_MESSAGE_LEN);
    let mut out = BytesMut::new();
    let mut event = HandshakeEvent::Start;
    loop {
        let actions;
        (state, actions) = step(state, event);
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
                HandshakeAction::Established(peer) => return Ok((peer, buf)),
                HandshakeAction::Reject(reason) => return Err(reason),
            }
        }
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

async fn serve_inbound(
    shared: Arc<Shared>,
    stream: TcpStream,
    remote: SocketAddr,
    slot: OwnedSemaphorePermit,
) {
    let _ = stream.set_nodelay(true);
    let deadline = Instant::now() + shared.handshake_timeout;
    let Some(tls) = &shared.tls else {
        return serve_connection(&shared, stream, remote, deadline, slot).await;
    };
    let mut shutdown = shared.shutdown.subscribe();
    let accepted = tokio::select! {
        biased;
        _ = until_true(&mut shutdown) => return,
        accepted = timeout_at(deadline, tls.acceptor().accept(stream)) => accepted,
    };
    match accepted {
        Ok(Ok(stream)) => serve_connection(&shared, stream, remote, deadline, slot).await,
        Ok(Err(e)) => shared.tls_rejected(Some(remote.ip()), &e),
        Err(_) => shared.tls_rejected(Some(remote.ip()), &"TLS handshake timed out"),
    }
}

/// Authenticates an accepted connection, then reads its frames until it ends.
async fn serve_connection<S: AsyncRead + AsyncWrite + Unpin>(
    shared: &Shared,
    mut stream: S,
    remote: SocketAddr,
    deadline: Instant,
    slot: OwnedSemaphorePermit,
) {
    let mut shutdown = shared.shutdown.subscribe();
    let outcome = tokio::select! {
        biased;
        _ = until_true(&mut shutdown) => return,
        outcome = handshake(shared, &mut stream, Role::Acceptor, None, deadline) => outcome,
    };
    drop(slot);
    let (peer, buf) = match outcome {
        Ok(established) => established,
        Err(reason) => {
            shared.stats.handshake_rejected();
            shared.record_close(CloseReason::HandshakeRejected, Some(remote.ip()), &reason);
            return;
        }
    };
    shared.stats.handshake_ok();
    tracing::debug!(%peer, %remote, "inbound connection established");

    // Take over from an older connection of the same peer address, and wait for its reader
    // to finish so frames from the two are never interleaved.
    let connection = shared
        .next_connection
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let (stop, mut stopped) = watch::channel(false);
    let turn = {
        let mut readers = shared.readers.lock();
        let turn = match readers.remove(&peer.address) {
            Some(previous) => {
                previous.stop.send_replace(true);
                previous.turn
            }
            None => Arc::new(tokio::sync::Mutex::new(())),
        };
        readers.insert(
            peer.address.clone(),
            Reader {
                connection,
                stop,
                turn: turn.clone(),
            },
        );
        turn
    };
    let _turn = tokio::select! {
        biased;
        _ = until_true(&mut shutdown) => return,
        _ = until_true(&mut stopped) => return,
        guard = turn.lock_owned() => guard,
    };

    let (reason, detail) =
        read_frames(shared, &mut stream, &peer, buf, &mut shutdown, &mut stopped).await;
    {
        let mut readers = shared.readers.lock();
        if readers
            .get(&peer.address)
            .is_some_and(|r| r.connection == connection)
        {
            readers.remove(&peer.address);
        }
    }
    shared.record_close(
        reason,
        Some(remote.ip()),
        &format_args!("from {peer}: {detail}"),
    );
}

/// Reads frames until the connection ends; returns why it ended.
async fn read_frames<R: AsyncRead + Unpin>(
    shared: &Shared,
    stream: &mut R,
    peer: &UniqueAddress,
    mut buf: BytesMut,
    shutdown: &mut watch::Receiver<bool>,
    stopped: &mut watch::Receiver<bool>,
) -> (CloseReason, String) {
    let decoder = FrameDecoder::new(shared.max_frame_size);
    loop {
        let mut frames = 0;
        let mut bytes = 0;
        let missing = loop {
            match decoder.decode(&mut buf) {
                Ok(Decoded::Frame(payload)) => {
                    frames += 1;
                    bytes += payload.len() as u64;
                    let frame = InboundFrame {
                        from: peer.clone(),
                        payload,
                    };
                    // Fast path: room in the channel. Otherwise wait, still stoppable.
                    let frame = match shared.inbound.try_send(frame) {
                        Ok(()) => continue,
                        Err(mpsc::error::TrySendError::Closed(_)) => {
                            return (CloseReason::InboundClosed, "inbound channel closed".into());
                        }
                        Err(mpsc::error::TrySendError::Full(frame)) => frame,
                    };
                    tokio::select! {
                        biased;
                        _ = until_true(shutdown) => return (CloseReason::Shutdown, "shutting down".into()),
                        _ = until_true(stopped) => return (CloseReason::Replaced, "replaced or disconnected".into()),
                        sent = shared.inbound.send(frame) => if sent.is_err() {
                            return (CloseReason::InboundClosed, "inbound channel closed".into());
                        },
                    }
                }
                Ok(Decoded::NeedMore { missing }) => break missing,
                Err(e) => {
                    shared.stats.received(frames, bytes);
                    return (CloseReason::OversizedFrame, e.to_string());
                }
            }
        };
        shared.stats.received(frames, bytes);
        // Bounded by the maximum frame size, checked by the decoder.
        buf.reserve(missing.max(READ_CHUNK));
        let read = tokio::select! {
            biased;
            _ = until_true(shutdown) => return (CloseReason::Shutdown, "shutting down".into()),
            _ = until_true(stopped) => return (CloseReason::Replaced, "replaced or disconnected".into()),
            read = stream.read_buf(&mut buf) => read,
        };
        match read {
            Ok(0) => {
                return match decoder.finish(&buf) {
                    Ok(()) => (CloseReason::PeerClosed, "peer closed the connection".into()),
                    Err(e @ FrameError::Oversized { .. }) => {
                        (CloseReason::OversizedFrame, e.to_string())
                    }
                    Err(e) => (CloseReason::TruncatedFrame, e.to_string()),
                };
            }
            Ok(_) => {}
            // A TLS peer that closes without close_notify: judge the stream like a plain EOF.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                return match decoder.finish(&buf) {
                    Ok(()) => (
                        CloseReason::PeerClosed,
                        format!("peer closed the connection ({e})"),
                    ),
                    Err(e @ FrameError::Oversized { .. }) => {
                        (CloseReason::OversizedFrame, e.to_string())
                    }
                    Err(e) => (CloseReason::TruncatedFrame, e.to_string()),
                };
            }
            Err(e) => return (CloseReason::IoError, e.to_string()),
        }
    }
}

/// Resolves once the watched flag is (or becomes) true, or its sender is gone.
async fn until_true(flag: &mut watch::Receiver<bool>) {
    let _ = flag.wait_for(|set| *set).await;
}

/// `host:port`, with IPv6 literals bracketed.
fn dial_target(peer: &Address) -> String {
    if peer.host.contains(':') && !peer.host.starts_with('[') {
        format!("[{}]:{}", peer.host, peer.port)
    } else {
        peer.host_port()
    }
}

/// How a writer's connection ended.
enum WriterEnd {
    /// Stop the writer.
    Stop,
    /// Reconnect.
    Lost(CloseReason, String),
}

async fn run_writer(shared: Arc<Shared>, peer: Address, mut queue: mpsc::Receiver<Bytes>) {
    let mut shutdown = shared.shutdown.subscribe();
    let mut backoff = shared.backoff_min;
    // A frame taken from the queue while no connection was up.
    let mut pending: Option<Bytes> = None;
    loop {
        if shared.is_shut_down() {
            return;
        }
        if pending.is_none() && queue.is_empty() {
            // Connect lazily: a peer we have nothing for need not be dialled.
            tokio::select! {
                biased;
                _ = until_true(&mut shutdown) => return,
                next = queue.recv() => match next {
                    Some(frame) => pending = Some(frame),
                    None => return,
                },
            }
        }
        let deadline = Instant::now() + shared.handshake_timeout;
        let attempt = tokio::select! {
            biased;
            _ = until_true(&mut shutdown) => return,
            attempt = connect(&shared, &peer, deadline) => attempt,
        };
        match attempt {
            Ok((connection, remote_peer, ip)) => {
                backoff = shared.backoff_min;
                tracing::debug!(peer = %remote_peer, "outbound connection established");
                let end = match connection {
                    Connection::Plain(stream) => {
                        let (read_half, write_half) = stream.into_split();
                        write_frames(
                            &shared,
                            read_half,
                            write_half,
                            &mut queue,
                            &mut pending,
                            &mut shutdown,
                        )
                        .await
                    }
                    Connection::Tls(stream) => {
                        let (read_half, write_half) = tokio::io::split(*stream);
                        write_frames(
                            &shared,
                            read_half,
                            write_half,
                            &mut queue,
                            &mut pending,
                            &mut shutdown,
                        )
                        .await
                    }
                };
                match end {
                    WriterEnd::Stop => return,
                    WriterEnd::Lost(reason, detail) => {
                        shared.record_close(
                            reason,
                            ip,
                            &format_args!("to {remote_peer}: {detail}"),
                        );
                    }
                }
            }
            Err(()) => {
                tokio::select! {
                    biased;
                    _ = until_true(&mut shutdown) => return,
                    () = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(shared.backoff_max);
            }
        }
    }
}

/// An established outbound connection.
enum Connection {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

/// Dials `peer`, wraps the connection in TLS when configured, and runs the handshake;
/// failures are counted and logged here.
async fn connect(
    shared: &Shared,
    peer: &Address,
    deadline: Instant,
) -> Result<(Connection, UniqueAddress, Option<IpAddr>), ()> {
    let stream = match timeout_at(deadline, TcpStream::connect(dial_target(peer))).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => {
            shared.stats.connect_failed();
            tracing::debug!(%peer, error = %e, "connecting failed");
            return Err(());
        }
        Err(_) => {
            shared.stats.connect_failed();
            tracing::debug!(%peer, "connecting timed out");
            return Err(());
        }
    };
    let _ = stream.set_nodelay(true);
    let ip = stream.peer_addr().ok().map(|a| a.ip());
    let Some(tls_config) = &shared.tls else {
        let mut stream = stream;
        let verified = authenticate(shared, &mut stream, peer, deadline, ip).await?;
        return Ok((Connection::Plain(stream), verified, ip));
    };
    let Some(name) = tls::server_name(peer) else {
        shared.stats.connect_failed();
        tracing::warn!(%peer, "cannot use TLS: the host is neither an IP address nor a DNS name");
        return Err(());
    };
    let mut stream = match timeout_at(deadline, tls_config.connector().connect(name, stream)).await
    {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => {
            shared.tls_rejected(ip, &format_args!("dialling {peer}: {e}"));
            return Err(());
        }
        Err(_) => {
            shared.tls_rejected(
                ip,
                &format_args!("dialling {peer}: TLS handshake timed out"),
            );
            return Err(());
        }
    };
    let verified = authenticate(shared, &mut stream, peer, deadline, ip).await?;
    Ok((Connection::Tls(Box::new(stream)), verified, ip))
}

/// Runs the handshake as the dialling side.
async fn authenticate<S: AsyncRead + AsyncWrite + Unpin>(
    shared: &Shared,
    stream: &mut S,
    peer: &Address,
    deadline: Instant,
    ip: Option<IpAddr>,
) -> Result<UniqueAddress, ()> {
    match handshake(
        shared,
        stream,
        Role::Initiator,
        Some(peer.clone()),
        deadline,
    )
    .await
    {
        Ok((verified, leftover)) => {
            shared.stats.handshake_ok();
            if leftover.is_empty() {
                Ok(verified)
            } else {
                shared.record_close(
                    CloseReason::UnexpectedBytes,
                    ip,
                    &format_args!("{verified} sent data on a connection it should only read"),
                );
                Err(())
            }
        }
        Err(reason) => {
            shared.stats.handshake_rejected();
            shared.record_close(
                CloseReason::HandshakeRejected,
                ip,
                &format_args!("dialling {peer}: {reason}"),
            );
            Err(())
        }
    }
}

/// Drains the queue into the connection until it breaks or the writer must stop.
async fn write_frames<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(
    shared: &Shared,
    mut read_half: R,
    mut write_half: W,
    queue: &mut mpsc::Receiver<Bytes>,
    pending: &mut Option<Bytes>,
    shutdown: &mut watch::Receiver<bool>,
) -> WriterEnd {
    let mut batch = BytesMut::with_capacity(READ_CHUNK);
    let mut probe = [0u8; 1];
    loop {
        let first = match pending.take() {
            Some(frame) => frame,
            None => tokio::select! {
                biased;
                _ = until_true(shutdown) => return WriterEnd::Stop,
                read = read_half.read(&mut probe) => return match read {
                    Ok(0) => WriterEnd::Lost(CloseReason::PeerClosed, "peer closed the connection".into()),
                    Ok(_) => WriterEnd::Lost(CloseReason::UnexpectedBytes, "peer sent data on a write-only connection".into()),
                    Err(e) => WriterEnd::Lost(CloseReason::IoError, e.to_string()),
                },
                next = queue.recv() => match next {
                    Some(frame) => frame,
                    None => return WriterEnd::Stop,
                },
            },
        };
        batch.clear();
        let mut frames = 0u64;
        let mut bytes = 0u64;
        let mut next = Some(first);
        while let Some(frame) = next.take() {
            // `send` checked the size, so encoding cannot fail.
            if encode_frame(&frame, shared.max_frame_size, &mut batch).is_ok() {
                frames += 1;
                bytes += frame.len() as u64;
            }
            if batch.len() + LENGTH_PREFIX_LEN < MAX_BATCH_BYTES {
                next = queue.try_recv().ok();
            }
        }
        let written = tokio::select! {
            biased;
            _ = until_true(shutdown) => return WriterEnd::Stop,
            // Flushing is free on TCP and pushes buffered records out under TLS.
            written = async {
                write_half.write_all(&batch).await?;
                write_half.flush().await
            } => written,
        };
        if let Err(e) = written {
            return WriterEnd::Lost(CloseReason::IoError, format!("{e} ({frames} frames lost)"));
        }
        shared.stats.sent(frames, bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret() -> ClusterSecret {
        ClusterSecret::new("unit-test-cluster-secret").unwrap()
    }

    fn config() -> TcpTransportConfig {
        TcpTransportConfig::new("app", "127.0.0.1:0".parse().unwrap(), secret())
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
    fn the_log_limiter_allows_one_line_per_ip_per_interval() {
        let mut limiter = LogLimiter::default();
        let t0 = Instant::now();
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        let other: IpAddr = "127.0.0.2".parse().unwrap();
        assert!(limiter.allow(ip, t0));
        assert!(!limiter.allow(ip, t0 + Duration::from_secs(9)));
        assert!(limiter.allow(other, t0 + Duration::from_secs(9)));
        assert!(limiter.allow(ip, t0 + LOG_INTERVAL));
    }

    #[test]
    fn ipv6_literals_are_bracketed_for_dialling() {
        assert_eq!(dial_target(&Address::new("a", "::1", 5)), "[::1]:5");
        assert_eq!(dial_target(&Address::new("a", "h", 5)), "h:5");
    }
}
