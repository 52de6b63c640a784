//! A TCP relay in front of a server that a test can pause: while paused, bytes already sent to
//! it wait in the relay (requests hang, nothing is refused), and they flow on when it resumes.
//! The fencing tests put one in front of the control plane for the agent they fence, so that
//! the agent's last report waits there and its probes can be read while it is fenced but not
//! yet gone.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A running relay; stops accepting when dropped (open connections end with their peers).
#[derive(Debug)]
pub struct Relay {
    addr: SocketAddr,
    paused: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut paused: watch::Receiver<bool>,
) {
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if paused.wait_for(|p| !*p).await.is_err() {
            break;
        }
        if to.write_all(&buffer[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

impl Relay {
    /// Relay connections on a free loopback port to `target`.
    ///
    /// # Panics
    /// When no loopback port can be bound.
    pub async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the relay");
        let addr = listener.local_addr().expect("relay address");
        let (paused, watch_paused) = watch::channel(false);
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let paused = watch_paused.clone();
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(target).await else {
                        return;
                    };
                    let (client_read, client_write) = client.into_split();
                    let (server_read, server_write) = server.into_split();
                    tokio::join!(
                        pipe(client_read, server_write, paused.clone()),
                        pipe(server_read, client_write, paused),
                    );
                });
            }
        });
        Self { addr, paused, task }
    }

    /// Where clients connect (`http://{addr}` for an HTTP server).
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Hold every byte from now on.
    pub fn pause(&self) {
        self.paused.send_replace(true);
    }

    /// Let the held bytes, and everything after, through.
    pub fn resume(&self) {
        self.paused.send_replace(false);
    }
}
