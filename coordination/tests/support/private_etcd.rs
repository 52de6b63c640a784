//! A private etcd process for fault tests (free loopback ports, a temporary data directory,
//! killed on drop), and a TCP proxy the test can cut.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// One etcd member of its own single-member cluster.
pub(crate) struct PrivateEtcd {
    dir: tempfile::TempDir,
    client_port: u16,
    peer_port: u16,
    child: Option<Child>,
}

impl PrivateEtcd {
    /// Start it and wait until it answers (at most 20 s).
    pub(crate) async fn start() -> Self {
        let mut etcd = Self {
            dir: tempfile::tempdir().expect("temp dir"),
            client_port: free_port(),
            peer_port: free_port(),
            child: None,
        };
        etcd.restart().await;
        etcd
    }

    /// `http://127.0.0.1:<port>`.
    pub(crate) fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    /// The client address.
    pub(crate) fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.client_port))
    }

    /// Start the process again on the same ports and data, and wait until it answers.
    pub(crate) async fn restart(&mut self) {
        assert!(self.child.is_none(), "already running");
        let client = self.endpoint();
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let log = std::fs::File::create(self.dir.path().join("etcd.log")).expect("log file");
        let child = Command::new("etcd")
            .arg("--name=private")
            .arg(format!(
                "--data-dir={}",
                self.dir.path().join("data").display()
            ))
            .arg(format!("--listen-client-urls={client}"))
            .arg(format!("--advertise-client-urls={client}"))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster=private={peer}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start etcd (is it installed? scripts/test installs etcd-server)");
        self.child = Some(child);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(mut client) = etcd_client::Client::connect([self.endpoint()], None).await
                && client.status().await.is_ok()
            {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "private etcd did not answer within 20 s; log: {}",
                std::fs::read_to_string(self.dir.path().join("etcd.log")).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Kill the process (SIGKILL: a crash, nothing flushed beyond what etcd already synced).
    pub(crate) fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for PrivateEtcd {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A TCP proxy to one target. `cut()` black-holes it: bytes on open connections are no longer
/// forwarded (the sockets stay open, as behind a dead switch) and new connections are accepted
/// but never forwarded.
pub(crate) struct CutProxy {
    addr: SocketAddr,
    cut: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl CutProxy {
    /// Listen on a free loopback port and forward to `target`.
    pub(crate) async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().expect("proxy address");
        let cut = Arc::new(AtomicBool::new(false));
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

    /// `http://<proxy address>`.
    pub(crate) fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stop forwarding.
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
    cut: Arc<AtomicBool>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if cut.load(Ordering::SeqCst) {
            // Black hole: keep the connection open, forward nothing, ever.
            std::future::pending::<()>().await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
