//! The accepting side of the TCP transport: the accept loop, TLS and the handshake on each
//! accepted connection, and the loop that reads its frames into the inbound channel.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::time::{Instant, timeout_at};

use super::{AdmissionGuard, Established, READ_CHUNK, Reader, Shared, handshake, until_true};
use crate::address::UniqueAddress;
use crate::transport::InboundFrame;
use crate::transport::frame::{Decoded, FrameDecoder, FrameError};
use crate::transport::handshake::Role;
use crate::transport::stats::CloseReason;

pub(super) async fn accept_loop(shared: Arc<Shared>, listener: TcpListener) {
    let mut shutdown = shared.shutdown.subscribe();
    loop {
        tokio::select! {
            biased;
            _ = until_true(&mut shutdown) => return,
            () = shared.accept_capacity() => {}
        }
        tokio::select! {
            biased;
            _ = until_true(&mut shutdown) => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, remote)) => shared.admit(stream, remote),
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
        }
    }
}

/// Runs an admitted connection: TLS when configured, the handshake, then its frames.
pub(super) async fn serve_inbound(
    shared: Arc<Shared>,
    stream: TcpStream,
    remote: SocketAddr,
    admission: AdmissionGuard,
) {
    let _ = stream.set_nodelay(true);
    let deadline = Instant::now() + shared.handshake_timeout;
    let Some(tls) = &shared.tls else {
        return serve_connection(&shared, stream, remote, deadline, admission).await;
    };
    let mut shutdown = shared.shutdown.subscribe();
    let accepted = tokio::select! {
        biased;
        _ = until_true(&mut shutdown) => return,
        accepted = timeout_at(deadline, tls.acceptor().accept(stream)) => accepted,
    };
    match accepted {
        Ok(Ok(stream)) => {
            // Its certificate is one of the cluster's: worth more than a silent socket.
            admission.progressed();
            serve_connection(&shared, stream, remote, deadline, admission).await;
        }
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
    admission: AdmissionGuard,
) {
    let mut shutdown = shared.shutdown.subscribe();
    let outcome = tokio::select! {
        biased;
        _ = until_true(&mut shutdown) => return,
        outcome = handshake(shared, &mut stream, Role::Acceptor, None, deadline, Some(&admission)) => outcome,
    };
    admission.finish(outcome.is_ok());
    let Established {
        peer,
        version,
        leftover: buf,
    } = match outcome {
        Ok(established) => established,
        Err(reason) => {
            shared.handshake_rejected(Some(remote.ip()), &reason, &reason);
            return;
        }
    };
    shared.stats.handshake_ok(version);
    tracing::debug!(%peer, %remote, version, "inbound connection established");

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
