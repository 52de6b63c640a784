//! TCP transport figures on loopback, in one process, next to a bare tokio TCP floor that
//! uses the same length-prefix framing: one-way throughput of 64-byte frames and the
//! request/response round trip.
//!
//! Run: `cargo bench -p troupe --bench transport` (env `TROUPE_BENCH_FRAMES`, default
//! 2,000,000, and `TROUPE_BENCH_ROUND_TRIPS`, default 50,000). Prints one table; the figures
//! and the machine they came from are in `docs/architecture.md`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufWriter};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use troupe::transport::frame::{Decoded, FrameDecoder, encode_frame};
use troupe::transport::{
    ClusterSecret, InboundFrame, TcpTransport, TcpTransportOptions, Transport,
};

const PAYLOAD: &[u8; 64] = &[0xA5; 64];
const MAX_FRAME: usize = 1024 * 1024;

fn env_count(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn transport(capacity: usize) -> (Arc<TcpTransport>, mpsc::Receiver<InboundFrame>) {
    let (tx, rx) = mpsc::channel(capacity);
    let config = TcpTransportOptions::new(
        "bench",
        "127.0.0.1:0".parse().expect("address"),
        ClusterSecret::new("benchmark-cluster-secret").expect("secret"),
    )
    .with_send_queue_capacity(capacity);
    (TcpTransport::bind(config, tx).await.expect("bind"), rx)
}

/// Frames per second from one transport to another, counted at the receiver's channel.
async fn transport_one_way(frames: usize) -> f64 {
    let (a, _a_rx) = transport(64 * 1024).await;
    let (b, mut b_rx) = transport(64 * 1024).await;
    let to = b.local().address.clone();
    // Warm the connection (dial + handshake) outside the measurement.
    a.send(&to, Bytes::from_static(PAYLOAD)).expect("send");
    b_rx.recv().await.expect("warm-up frame");

    let start = Instant::now();
    let sender = tokio::spawn(async move {
        let payload = Bytes::from_static(PAYLOAD);
        for _ in 0..frames {
            // A full queue is backpressure: let the writer run, then retry.
            while a.send(&to, payload.clone()).is_err() {
                tokio::task::yield_now().await;
            }
        }
        a
    });
    for _ in 0..frames {
        b_rx.recv().await.expect("frame");
    }
    let elapsed = start.elapsed();
    sender.await.expect("sender").shutdown().await;
    b.shutdown().await;
    frames as f64 / elapsed.as_secs_f64()
}

/// Round trips through two transports: A sends, B's echo task sends the frame back.
async fn transport_round_trips(count: usize) -> Vec<Duration> {
    let (a, mut a_rx) = transport(1024).await;
    let (b, mut b_rx) = transport(1024).await;
    let to = b.local().address.clone();
    let echo = tokio::spawn(async move {
        while let Some(frame) = b_rx.recv().await {
            if b.send(&frame.from.address, frame.payload).is_err() {
                break;
            }
        }
    });
    let payload = Bytes::from_static(PAYLOAD);
    let mut samples = Vec::with_capacity(count);
    for i in 0..count + count / 10 {
        let start = Instant::now();
        a.send(&to, payload.clone()).expect("send");
        a_rx.recv().await.expect("echo");
        // The first tenth warms connections and caches.
        if i >= count / 10 {
            samples.push(start.elapsed());
        }
    }
    a.shutdown().await;
    echo.abort();
    samples
}

async fn connected_pair() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (client, server) = tokio::join!(TcpStream::connect(addr), listener.accept());
    let client = client.expect("connect");
    let (server, _) = server.expect("accept");
    client.set_nodelay(true).expect("nodelay");
    server.set_nodelay(true).expect("nodelay");
    (client, server)
}

/// Reads one frame from `stream` into `buf`'s front, returning its payload.
async fn read_frame(stream: &mut TcpStream, buf: &mut BytesMut, decoder: &FrameDecoder) -> Bytes {
    loop {
        if let Decoded::Frame(frame) = decoder.decode(buf).expect("frame") {
            return frame;
        }
        let n = stream.read_buf(buf).await.expect("read");
        assert_ne!(n, 0, "closed");
    }
}

/// The floor: one task writes length-prefixed frames through a `BufWriter`, another decodes
/// them with the same `FrameDecoder`.
async fn floor_one_way(frames: usize) -> f64 {
    let (client, mut server) = connected_pair().await;
    let start = Instant::now();
    let writer = tokio::spawn(async move {
        let mut out = BufWriter::with_capacity(256 * 1024, client);
        let mut frame = BytesMut::new();
        encode_frame(PAYLOAD, MAX_FRAME, &mut frame).expect("encode");
        for _ in 0..frames {
            out.write_all(&frame).await.expect("write");
        }
        out.flush().await.expect("flush");
        out
    });
    let decoder = FrameDecoder::new(MAX_FRAME);
    let mut buf = BytesMut::with_capacity(64 * 1024);
    let mut received = 0;
    while received < frames {
        while let Decoded::Frame(_) = decoder.decode(&mut buf).expect("frame") {
            received += 1;
        }
        if received < frames {
            buf.reserve(64 * 1024);
            let n = server.read_buf(&mut buf).await.expect("read");
            assert_ne!(n, 0, "closed");
        }
    }
    let elapsed = start.elapsed();
    drop(writer.await.expect("writer"));
    frames as f64 / elapsed.as_secs_f64()
}

/// The floor's round trip: write a frame, the server task echoes it, read it back.
async fn floor_round_trips(count: usize) -> Vec<Duration> {
    let (mut client, mut server) = connected_pair().await;
    let echo = tokio::spawn(async move {
        let decoder = FrameDecoder::new(MAX_FRAME);
        let mut buf = BytesMut::new();
        let mut out = BytesMut::new();
        loop {
            let frame = read_frame(&mut server, &mut buf, &decoder).await;
            out.clear();
            encode_frame(&frame, MAX_FRAME, &mut out).expect("encode");
            if server.write_all(&out).await.is_err() {
                break;
            }
        }
    });
    let decoder = FrameDecoder::new(MAX_FRAME);
    let mut buf = BytesMut::new();
    let mut frame = BytesMut::new();
    encode_frame(PAYLOAD, MAX_FRAME, &mut frame).expect("encode");
    let mut samples = Vec::with_capacity(count);
    for i in 0..count + count / 10 {
        let start = Instant::now();
        client.write_all(&frame).await.expect("write");
        read_frame(&mut client, &mut buf, &decoder).await;
        if i >= count / 10 {
            samples.push(start.elapsed());
        }
    }
    echo.abort();
    samples
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index]
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn main() {
    let frames = env_count("TROUPE_BENCH_FRAMES", 2_000_000);
    let round_trips = env_count("TROUPE_BENCH_ROUND_TRIPS", 50_000);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let transport_rate = transport_one_way(frames).await;
        let floor_rate = floor_one_way(frames).await;
        let mut transport_rtt = transport_round_trips(round_trips).await;
        let mut floor_rtt = floor_round_trips(round_trips).await;
        transport_rtt.sort();
        floor_rtt.sort();

        println!(
            "loopback, one process, 2 tokio workers, 64-byte payloads; {frames} frames one way, {round_trips} round trips\n"
        );
        println!("| measure | TcpTransport | bare tokio TCP (floor) | transport / floor |");
        println!("|---|---:|---:|---:|");
        println!(
            "| one-way throughput (frames/s) | {:.0} | {:.0} | {:.2} |",
            transport_rate,
            floor_rate,
            transport_rate / floor_rate
        );
        for (name, p) in [("p50", 0.50), ("p99", 0.99)] {
            let t = percentile(&transport_rtt, p);
            let f = percentile(&floor_rtt, p);
            println!(
                "| round trip {name} (µs) | {:.1} | {:.1} | {:.2} |",
                micros(t),
                micros(f),
                micros(t) / micros(f)
            );
        }
    });
}
