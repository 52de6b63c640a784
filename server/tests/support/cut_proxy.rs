//! A TCP proxy that can black-hole its traffic, as a dead switch would: shared by the tests
//! that cut a client off from the server or the server off from its database.

#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::Ordering;

/// A TCP proxy to `target`; `cut()` black-holes it (open connections stay open but forward
/// nothing, new ones are accepted and never forwarded), as behind a dead switch.
pub(crate) struct CutProxy {
    addr: std::net::SocketAddr,
    cut: Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl CutProxy {
    pub(crate) async fn start(target: std::net::SocketAddr) -> Self {
        use tokio::net::{TcpListener, TcpStream};
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().expect("proxy address");
        let cut = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = Arc::clone(&cut);
        let task = tokio::spawn(async move {
            let mut held = Vec::new();
            loop {
                let Ok((inbound, _)) = listener.accept().await else {
                    return;
                };
                if flag.load(Ordering::SeqCst) {
                    held.push(inbound);
                    continue;
                }
                let Ok(outbound) = TcpStream::connect(target).await else {
                    continue;
                };
                let (ri, wi) = inbound.into_split();
                let (ro, wo) = outbound.into_split();
                tokio::spawn(pump(ri, wo, Arc::clone(&flag)));
                tokio::spawn(pump(ro, wi, Arc::clone(&flag)));
            }
        });
        Self { addr, cut, task }
    }

    /// `http://<address>`.
    pub(crate) fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The address it listens on.
    pub(crate) fn addr(&self) -> std::net::SocketAddr {
        self.addr
    }

    pub(crate) fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
    }
}

impl Drop for CutProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    cut: Arc<std::sync::atomic::AtomicBool>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if cut.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
