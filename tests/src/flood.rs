//! A connection flood from someone without the cluster secret: many TCP connections from many
//! loopback source addresses (127.0.0.0/8 only) to one node's cluster port, bounded in count,
//! rate and open connections, and a sampler of a process's file descriptors and memory.
//!
//! Each connection does one of what an attacker cheaply can: stay silent (half of them), send a
//! well-formed Hello and then nothing (a quarter), send garbage or close at once. A connection is held until the
//! node closes it or `hold` passes.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpSocket;
use tokio::sync::{Semaphore, watch};
use tokio::time::Instant;

/// What to send and how hard.
#[derive(Debug, Clone)]
pub struct Flood {
    /// The node's cluster port.
    pub target: SocketAddr,
    /// Distinct loopback source addresses to connect from (cycled).
    pub sources: Vec<Ipv4Addr>,
    /// Connections to open in all.
    pub total: u64,
    /// Connections opened per second at most (`None`: as fast as possible).
    pub rate: Option<u32>,
    /// Connections open at once at most (file descriptors of the flooding process).
    pub max_open: usize,
    /// How long a connection is held if the node does not close it.
    pub hold: Duration,
    /// Give up (and report what was done) after this long.
    pub deadline: Duration,
}

/// What a flood did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FloodReport {
    /// Connection attempts started.
    pub attempted: u64,
    /// Attempts that got a TCP connection.
    pub connected: u64,
    /// Attempts that failed to connect (refused, reset, timed out).
    pub failed: u64,
    /// Connections the node closed before `hold` passed.
    pub closed_by_node: u64,
    /// From the first attempt to the last connection's end.
    pub elapsed: Duration,
}

impl FloodReport {
    /// Connections per second over the whole flood.
    #[must_use]
    pub fn connections_per_second(&self) -> f64 {
        self.connected as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// `count` distinct source addresses in 127.77.0.0/16 (loopback).
///
/// # Panics
/// When `count` exceeds 65,000.
#[must_use]
pub fn loopback_sources(count: usize) -> Vec<Ipv4Addr> {
    assert!(count <= 65_000, "at most 65,000 loopback sources");
    (0..count)
        .map(|i| Ipv4Addr::new(127, 77, (i / 250) as u8, (i % 250) as u8 + 1))
        .collect()
}

/// A protocol-2 Hello frame: well-formed, so the node must wait for the proof that never comes.
fn hello_frame(n: u64) -> Vec<u8> {
    let mut frame = Vec::with_capacity(45);
    frame.extend_from_slice(&41u32.to_be_bytes());
    frame.extend_from_slice(b"TRPHH");
    frame.extend_from_slice(&2u16.to_be_bytes());
    frame.extend_from_slice(&2u16.to_be_bytes());
    frame.extend_from_slice(&[n as u8; 32]);
    frame
}

#[derive(Debug, Default)]
struct Counters {
    connected: AtomicU64,
    failed: AtomicU64,
    closed_by_node: AtomicU64,
}

impl Flood {
    /// Runs the flood to its end (every connection closed) and reports.
    ///
    /// # Panics
    /// When `sources` is empty or `max_open` is 0.
    pub async fn run(&self) -> FloodReport {
        self.run_until(watch::channel(false).1).await
    }

    /// Like [`Flood::run`], stopping early once `stop` turns true.
    ///
    /// # Panics
    /// When `sources` is empty or `max_open` is 0.
    pub async fn run_until(&self, mut stop: watch::Receiver<bool>) -> FloodReport {
        assert!(!self.sources.is_empty() && self.max_open > 0);
        let started = Instant::now();
        let deadline = started + self.deadline;
        let open = Arc::new(Semaphore::new(self.max_open));
        let counters = Arc::new(Counters::default());
        let mut attempted = 0u64;
        let mut tasks = tokio::task::JoinSet::new();
        while attempted < self.total && Instant::now() < deadline && !*stop.borrow() {
            if let Some(rate) = self.rate {
                // Pace to `rate`: attempt n is due at n / rate seconds.
                let due = started + Duration::from_secs_f64(attempted as f64 / f64::from(rate));
                if due > Instant::now() {
                    tokio::select! {
                        () = tokio::time::sleep_until(due) => {}
                        _ = stop.changed() => continue,
                    }
                }
            }
            let permit = tokio::select! {
                permit = open.clone().acquire_owned() => permit.expect("semaphore never closes"),
                () = tokio::time::sleep_until(deadline) => break,
            };
            let source = self.sources[(attempted % self.sources.len() as u64) as usize];
            let target = self.target;
            let hold = self.hold;
            let counters = counters.clone();
            let n = attempted;
            tasks.spawn(async move {
                let _permit = permit;
                connect_once(n, source, target, hold, &counters).await;
            });
            attempted += 1;
            // Reap finished tasks so the set stays small.
            while tasks.try_join_next().is_some() {}
        }
        while tasks.join_next().await.is_some() {}
        FloodReport {
            attempted,
            connected: counters.connected.load(Relaxed),
            failed: counters.failed.load(Relaxed),
            closed_by_node: counters.closed_by_node.load(Relaxed),
            elapsed: started.elapsed(),
        }
    }
}

async fn connect_once(
    n: u64,
    source: Ipv4Addr,
    target: SocketAddr,
    hold: Duration,
    counters: &Counters,
) {
    let connect = async {
        let socket = TcpSocket::new_v4()?;
        socket.bind(SocketAddr::new(IpAddr::V4(source), 0))?;
        socket.connect(target).await
    };
    let mut stream = match tokio::time::timeout(Duration::from_secs(2), connect).await {
        Ok(Ok(stream)) => stream,
        _ => {
            counters.failed.fetch_add(1, Relaxed);
            return;
        }
    };
    counters.connected.fetch_add(1, Relaxed);
    let sent = match n % 8 {
        // Silent: the cheapest way to hold a handshake slot.
        0..=3 => Ok(()),
        // A valid Hello, then nothing: the node waits for a proof.
        4 | 5 => stream.write_all(&hello_frame(n)).await,
        // Garbage.
        6 => stream.write_all(b"GET / HTTP/1.1\r\n\r\n").await,
        // Connect and leave.
        _ => return,
    };
    if sent.is_err() {
        counters.closed_by_node.fetch_add(1, Relaxed);
        return;
    }
    let mut buf = [0u8; 256];
    let until = Instant::now() + hold;
    loop {
        match tokio::time::timeout_at(until, stream.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => {
                counters.closed_by_node.fetch_add(1, Relaxed);
                return;
            }
            // The node's Hello: keep reading until it closes.
            Ok(Ok(_)) => {}
            Err(_) => return,
        }
    }
}

/// The file descriptors and resident memory of one process, sampled until stopped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResourceSample {
    /// Open file descriptors.
    pub fds: usize,
    /// Resident set size in KiB.
    pub rss_kib: u64,
}

/// One sample of `pid` now, or `None` when it is gone.
#[must_use]
pub fn sample(pid: u32) -> Option<ResourceSample> {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss_kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())?;
    Some(ResourceSample { fds, rss_kib })
}

/// Samples `pid` every `every` until `stop` turns true; returns the highest of each.
pub async fn peak_resources(
    pid: u32,
    every: Duration,
    mut stop: watch::Receiver<bool>,
) -> ResourceSample {
    let mut peak = ResourceSample::default();
    loop {
        if let Some(now) = sample(pid) {
            peak.fds = peak.fds.max(now.fds);
            peak.rss_kib = peak.rss_kib.max(now.rss_kib);
        }
        if *stop.borrow() {
            return peak;
        }
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            _ = stop.changed() => {}
        }
    }
}

/// Raises this process's soft limit on open files to at least `wanted` (up to the hard limit;
/// as root, the hard limit too). Returns the soft limit now in force.
///
/// # Panics
/// When the limit cannot be raised to `wanted`.
#[must_use]
pub fn raise_fd_limit(wanted: u64) -> u64 {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    let current = limit.current.unwrap_or(u64::MAX);
    if current >= wanted {
        return current;
    }
    let maximum = limit.maximum.unwrap_or(u64::MAX).max(wanted);
    let raised = setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(wanted),
            maximum: Some(maximum),
        },
    )
    .or_else(|_| {
        // Not root: as far as the hard limit goes.
        setrlimit(
            Resource::Nofile,
            Rlimit {
                current: limit.maximum,
                maximum: limit.maximum,
            },
        )
    });
    let now = getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX);
    assert!(
        raised.is_ok() && now >= wanted,
        "need {wanted} open files (ulimit -n), have {now}"
    );
    now
}
