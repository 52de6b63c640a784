//! The dialling side of the TCP transport: one writer task per peer that connects with
//! backoff, runs TLS and the handshake, and drains the peer's queue in coalesced writes.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, Ordering};

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};
use tokio::time::{Instant, timeout_at};

use super::{Established, READ_CHUNK, Shared, handshake, until_true};
use crate::address::{Address, UniqueAddress};
use crate::transport::admission::AdmissionEvent;
use crate::transport::frame::{LENGTH_PREFIX_LEN, encode_frame};
use crate::transport::handshake::Role;
use crate::transport::stats::CloseReason;
use crate::transport::tls;

/// A writer stops coalescing once a batch reaches this many bytes and writes it.
const MAX_BATCH_BYTES: usize = 256 * 1024;

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

pub(super) async fn run_writer(
    shared: Arc<Shared>,
    peer: Address,
    mut queue: mpsc::Receiver<Bytes>,
    version: Arc<AtomicU16>,
) {
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
            Ok((connection, remote_peer, negotiated, ip)) => {
                backoff = shared.backoff_min;
                version.store(negotiated, Ordering::Relaxed);
                tracing::debug!(peer = %remote_peer, version = negotiated, "outbound connection established");
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
                version.store(0, Ordering::Relaxed);
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
) -> Result<(Connection, UniqueAddress, u16, Option<IpAddr>), ()> {
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
        let (verified, version) = authenticate(shared, &mut stream, peer, deadline, ip).await?;
        return Ok((Connection::Plain(stream), verified, version, ip));
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
    let (verified, version) = authenticate(shared, &mut stream, peer, deadline, ip).await?;
    Ok((Connection::Tls(Box::new(stream)), verified, version, ip))
}

/// Runs the handshake as the dialling side.
async fn authenticate<S: AsyncRead + AsyncWrite + Unpin>(
    shared: &Shared,
    stream: &mut S,
    peer: &Address,
    deadline: Instant,
    ip: Option<IpAddr>,
) -> Result<(UniqueAddress, u16), ()> {
    match handshake(
        shared,
        stream,
        Role::Initiator,
        Some(peer.clone()),
        deadline,
        None,
    )
    .await
    {
        Ok(Established {
            peer: verified,
            version,
            leftover,
        }) => {
            shared.stats.handshake_ok(version);
            if let Some(source) = ip {
                // It proved the secret: its own connections to us get reserved slots.
                let _ = shared.admission_step(AdmissionEvent::DialledPeerProved { source });
            }
            if leftover.is_empty() {
                Ok((verified, version))
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
            shared.handshake_rejected(ip, &reason, &format_args!("dialling {peer}: {reason}"));
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

    #[test]
    fn ipv6_literals_are_bracketed_for_dialling() {
        assert_eq!(dial_target(&Address::new("a", "::1", 5)), "[::1]:5");
        assert_eq!(dial_target(&Address::new("a", "h", 5)), "h:5");
    }
}
