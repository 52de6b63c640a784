//! The TCP transport on loopback: authenticated delivery, and what happens to peers that send
//! a wrong secret, garbage, truncated or oversized frames — their connection is closed and
//! counted while legitimate peers keep exchanging frames; how floods of connections without
//! the secret are admitted (issue 14), and what an unauthenticated client learns (nothing).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::mpsc;
use tokio::time::{Instant, timeout};
use troupe::transport::admission::Pool;
use troupe::transport::frame::{Decoded, FrameDecoder, encode_frame};
use troupe::transport::handshake::{
    HELLO_LEN, Handshake, HandshakeAction, HandshakeEvent, HandshakeMessage, HandshakeOptions,
    Hello, MAX_HANDSHAKE_MESSAGE_LEN, NONCE_LEN, Role, step,
};
use troupe::transport::{
    AdmissionOptions, CloseReason, ClusterSecret, InboundFrame, ProtocolVersions, RefusedVersions,
    TcpTransport, TcpTransportOptions, Transport,
};
use troupe::{Address, UniqueAddress};

const SECRET: &str = "integration-test-cluster-secret";
/// Every test finishes well within this, or fails.
const LIMIT: Duration = Duration::from_secs(20);

fn secret(s: &str) -> ClusterSecret {
    ClusterSecret::new(s).unwrap()
}

fn config(secret_text: &str) -> TcpTransportOptions {
    TcpTransportOptions::new("app", "127.0.0.1:0".parse().unwrap(), secret(secret_text))
        .with_reconnect_backoff(Duration::from_millis(10), Duration::from_millis(100))
        .with_handshake_timeout(Duration::from_secs(2))
}

struct Node {
    transport: Arc<TcpTransport>,
    inbound: mpsc::Receiver<InboundFrame>,
}

impl Node {
    async fn start(config: TcpTransportOptions) -> Self {
        let (tx, inbound) = mpsc::channel(1024);
        let transport = TcpTransport::bind(config, tx).await.unwrap();
        Self { transport, inbound }
    }

    fn address(&self) -> Address {
        self.transport.local().address.clone()
    }

    async fn next(&mut self) -> InboundFrame {
        self.inbound.recv().await.expect("transport dropped")
    }
}

/// Frames flow both ways between `a` and `b`, tagged with the right identities.
async fn assert_exchange(a: &mut Node, b: &mut Node, tag: &'static str) {
    a.transport
        .send(&b.address(), Bytes::from_static(tag.as_bytes()))
        .unwrap();
    let got = b.next().await;
    assert_eq!(
        (&got.from, &got.payload[..]),
        (a.transport.local(), tag.as_bytes())
    );
    b.transport
        .send(&a.address(), Bytes::from_static(tag.as_bytes()))
        .unwrap();
    let got = a.next().await;
    assert_eq!(
        (&got.from, &got.payload[..]),
        (b.transport.local(), tag.as_bytes())
    );
}

/// A hand-driven client that speaks the real handshake, so a test can misbehave after it.
async fn raw_handshake(
    target: SocketAddr,
    secret_text: &str,
    expected: &Address,
) -> (TcpStream, UniqueAddress) {
    let mut stream = TcpStream::connect(target).await.unwrap();
    let me = UniqueAddress {
        address: Address::new("app", "127.0.0.1", 9),
        incarnation: 99,
    };
    let mut state = Handshake::new(
        HandshakeOptions {
            local: me.clone(),
            secret: secret(secret_text),
            role: Role::Initiator,
            expected_peer: Some(expected.clone()),
            versions: ProtocolVersions::THIS_BUILD,
        },
        [7; 32],
    );
    let decoder = FrameDecoder::new(MAX_HANDSHAKE_MESSAGE_LEN);
    let mut buf = BytesMut::new();
    let mut event = HandshakeEvent::Start;
    loop {
        let actions;
        (state, actions) = step(state, event, Instant::now());
        for action in actions {
            match action {
                HandshakeAction::Send(message) => {
                    let mut out = BytesMut::new();
                    encode_frame(&message, MAX_HANDSHAKE_MESSAGE_LEN, &mut out).unwrap();
                    stream.write_all(&out).await.unwrap();
                }
                HandshakeAction::Established { .. } => return (stream, me),
                HandshakeAction::Reject(reason) => panic!("raw handshake rejected: {reason}"),
            }
        }
        event = loop {
            if let Decoded::Frame(f) = decoder.decode(&mut buf).unwrap() {
                break HandshakeEvent::Received(f);
            }
            assert_ne!(
                stream.read_buf(&mut buf).await.unwrap(),
                0,
                "closed in handshake"
            );
        };
    }
}

/// Reads until the server closes the connection (FIN or reset).
async fn closed_by_server(stream: &mut TcpStream) {
    let mut sink = Vec::new();
    let _ = stream.read_to_end(&mut sink).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_arrive_tagged_with_the_identity_the_handshake_verified() {
    timeout(LIMIT, async {
        let mut a = Node::start(config(SECRET).with_incarnation(1)).await;
        let mut b = Node::start(config(SECRET).with_incarnation(2)).await;
        assert_exchange(&mut a, &mut b, "hello").await;
        assert_eq!(
            a.transport.stats_snapshot().handshakes_ok,
            2,
            "one per connection and side"
        );
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_to_one_peer_arrive_in_the_order_they_were_sent() {
    timeout(LIMIT, async {
        let a = Node::start(config(SECRET)).await;
        let mut b = Node::start(config(SECRET)).await;
        let to = b.address();
        let count = 20_000u32;
        let sender = {
            let a = a.transport.clone();
            tokio::spawn(async move {
                for i in 0..count {
                    let payload = Bytes::copy_from_slice(&i.to_be_bytes());
                    // A full queue is backpressure, not loss: retry the same frame.
                    while a.send(&to, payload.clone()).is_err() {
                        tokio::task::yield_now().await;
                    }
                }
            })
        };
        for expected in 0..count {
            let frame = b.next().await;
            assert_eq!(frame.payload[..], expected.to_be_bytes());
        }
        sender.await.unwrap();
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_secret_delivers_no_frames_and_both_sides_count_the_rejected_handshake() {
    timeout(LIMIT, async {
        let intruder = Node::start(config("not-the-cluster-secret")).await;
        let mut b = Node::start(config(SECRET)).await;
        let mut c = Node::start(config(SECRET)).await;
        intruder
            .transport
            .send(&b.address(), Bytes::from_static(b"let me in"))
            .unwrap();
        b.transport
            .stats()
            .wait_for(|s| {
                s.handshakes_rejected >= 1 && s.closed(CloseReason::HandshakeRejected) >= 1
            })
            .await;
        intruder
            .transport
            .stats()
            .wait_for(|s| s.handshakes_rejected >= 1)
            .await;
        // A legitimate peer still gets through, and its frame is the first and only one B
        // delivers: nothing from the intruder arrived before or after it.
        assert_exchange(&mut c, &mut b, "legit").await;
        assert!(b.inbound.try_recv().is_err());
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_bytes_close_that_connection_while_a_legitimate_peer_keeps_exchanging() {
    timeout(LIMIT, async {
        let mut a = Node::start(config(SECRET)).await;
        let mut b = Node::start(config(SECRET)).await;
        assert_exchange(&mut a, &mut b, "before").await;

        let mut garbage = TcpStream::connect(b.transport.local_socket_addr())
            .await
            .unwrap();
        garbage
            .write_all(b"GET / HTTP/1.1\r\nHost: troupe\r\n\r\n")
            .await
            .unwrap();
        closed_by_server(&mut garbage).await;
        let stats = b
            .transport
            .stats()
            .wait_for(|s| s.closed(CloseReason::HandshakeRejected) == 1)
            .await;
        assert_eq!(stats.handshakes_rejected, 1);

        assert_exchange(&mut a, &mut b, "after").await;
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frame_cut_off_by_the_end_of_the_stream_closes_the_connection_as_truncated() {
    timeout(LIMIT, async {
        let mut a = Node::start(config(SECRET)).await;
        let mut b = Node::start(config(SECRET)).await;
        let (mut raw, raw_id) =
            raw_handshake(b.transport.local_socket_addr(), SECRET, &b.address()).await;
        let mut bytes = BytesMut::new();
        encode_frame(b"whole", 1024, &mut bytes).unwrap();
        bytes.extend_from_slice(&100u32.to_be_bytes());
        bytes.extend_from_slice(b"only ten b");
        raw.write_all(&bytes).await.unwrap();
        raw.shutdown().await.unwrap();

        let whole = b.next().await;
        assert_eq!((&whole.from, &whole.payload[..]), (&raw_id, &b"whole"[..]));
        closed_by_server(&mut raw).await;
        b.transport
            .stats()
            .wait_for(|s| s.closed(CloseReason::TruncatedFrame) == 1)
            .await;

        assert_exchange(&mut a, &mut b, "still fine").await;
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_length_prefix_closes_the_connection_without_waiting_for_the_payload() {
    timeout(LIMIT, async {
        let mut a = Node::start(config(SECRET)).await;
        let mut b = Node::start(config(SECRET).with_max_frame_size(4096)).await;
        let (mut raw, _) =
            raw_handshake(b.transport.local_socket_addr(), SECRET, &b.address()).await;
        // Only the prefix is sent, and the connection stays open from our side: the server
        // must decide from the prefix alone.
        raw.write_all(&4097u32.to_be_bytes()).await.unwrap();
        closed_by_server(&mut raw).await;
        let stats = b
            .transport
            .stats()
            .wait_for(|s| s.closed(CloseReason::OversizedFrame) == 1)
            .await;
        assert_eq!(stats.frames_in, 0);

        assert_exchange(&mut a, &mut b, "unaffected").await;
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_peer_is_reconnected_and_reported_with_its_new_incarnation() {
    timeout(LIMIT, async {
        let mut a = Node::start(config(SECRET).with_incarnation(1)).await;
        let b1 = Node::start(config(SECRET).with_incarnation(100)).await;
        let port = b1.transport.local_socket_addr().port();
        let mut b1 = b1;
        assert_exchange(&mut a, &mut b1, "first life").await;
        let b_address = b1.address();
        b1.transport.shutdown().await;
        drop(b1);

        let bind: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let mut b2 = Node::start(
            TcpTransportOptions::new("app", bind, secret(SECRET))
                .with_incarnation(200)
                .with_reconnect_backoff(Duration::from_millis(10), Duration::from_millis(100)),
        )
        .await;
        assert_eq!(b2.address(), b_address);

        // The new process's frames carry its new incarnation.
        b2.transport
            .send(&a.address(), Bytes::from_static(b"second life"))
            .unwrap();
        let got = a.next().await;
        assert_eq!(got.from.incarnation, 200);
        assert_eq!(&got.payload[..], b"second life");

        // A's writer reconnects to the new process. A frame written into the old, dying
        // connection may be lost (in order or not at all), so send until one arrives.
        let mut tick = tokio::time::interval(Duration::from_millis(20));
        let received = loop {
            tokio::select! {
                biased;
                frame = b2.inbound.recv() => break frame.unwrap(),
                _ = tick.tick() => {
                    let _ = a.transport.send(&b_address, Bytes::from_static(b"welcome back"));
                }
            }
        };
        assert_eq!(received.from, *a.transport.local());
        assert_eq!(&received.payload[..], b"welcome back");
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disconnect_closes_the_peer_connection_and_a_later_send_reconnects() {
    timeout(LIMIT, async {
        let mut a = Node::start(config(SECRET)).await;
        let mut b = Node::start(config(SECRET)).await;
        assert_exchange(&mut a, &mut b, "one").await;
        a.transport.disconnect(&b.address());
        assert_eq!(
            a.transport
                .stats_snapshot()
                .closed(CloseReason::Disconnected),
            1
        );
        // B sees both connections with A go away: its reader of A's outbound connection and
        // its writer, whose connection A stopped reading. (Until B's writer has noticed, a
        // frame it writes is lost: in order or not at all.)
        b.transport
            .stats()
            .wait_for(|s| s.closed(CloseReason::PeerClosed) == 2)
            .await;
        assert_exchange(&mut a, &mut b, "two").await;
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_never_finishes_its_handshake_is_closed_after_the_handshake_timeout() {
    timeout(LIMIT, async {
        let handshake_timeout = Duration::from_millis(300);
        let mut a = Node::start(config(SECRET)).await;
        let mut b = Node::start(config(SECRET).with_handshake_timeout(handshake_timeout)).await;
        let started = tokio::time::Instant::now();
        let mut silent = TcpStream::connect(b.transport.local_socket_addr())
            .await
            .unwrap();
        closed_by_server(&mut silent).await;
        assert!(started.elapsed() >= handshake_timeout);
        b.transport
            .stats()
            .wait_for(|s| s.closed(CloseReason::HandshakeRejected) == 1)
            .await;
        assert_exchange(&mut a, &mut b, "not starved").await;
    })
    .await
    .unwrap();
}

/// A TCP connection to `target` from the loopback address `127.0.0.<n>`.
async fn try_connect_from(n: u8, target: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 0, 0, n)), 0))?;
    socket.connect(target).await
}

async fn connect_from(n: u8, target: SocketAddr) -> TcpStream {
    try_connect_from(n, target).await.unwrap()
}

/// Waits until the node has sent its Hello on `stream`: its handshake for it is running.
async fn read_hello(stream: &mut TcpStream) -> Vec<u8> {
    let mut frame = vec![0u8; 4 + HELLO_LEN];
    stream.read_exact(&mut frame).await.unwrap();
    frame
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_a_source_s_share_of_the_slots_are_refused_at_once_and_counted() {
    timeout(LIMIT, async {
        let mut a = Node::start(config(SECRET)).await;
        let admission = AdmissionOptions::default().with_per_source_slots(1);
        let mut b = Node::start(config(SECRET).with_admission(admission)).await;
        let target = b.transport.local_socket_addr();
        // One silent connection from 127.0.0.5 holds that source's only slot…
        let mut first = connect_from(5, target).await;
        read_hello(&mut first).await;
        // …so its next one is reset without a handshake, while another source is served.
        // (The reset may come before `connect` returns.)
        if let Ok(mut second) = try_connect_from(5, target).await {
            closed_by_server(&mut second).await;
        }
        let mut other = connect_from(6, target).await;
        read_hello(&mut other).await;
        b.transport
            .stats()
            .wait_for(|s| s.closed(CloseReason::SourceLimit) == 1)
            .await;
        assert_eq!(b.transport.pending_handshakes(Pool::General), 2);
        assert_exchange(&mut a, &mut b, "not starved").await;
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newcomer_gets_a_slot_from_a_full_pool_of_silent_connections() {
    timeout(LIMIT, async {
        let admission = AdmissionOptions::default()
            .with_general_slots(4)
            .with_per_source_slots(1);
        let mut b = Node::start(config(SECRET).with_admission(admission)).await;
        let target = b.transport.local_socket_addr();
        // Silent connections from ten sources: more than the pool holds.
        let mut flood = Vec::new();
        for n in 10..20 {
            flood.push(connect_from(n, target).await);
        }
        b.transport
            .stats()
            .wait_for(|s| s.closed(CloseReason::Evicted) == 6)
            .await;
        assert_eq!(b.transport.pending_handshakes(Pool::General), 4);
        // A node b has never seen (unknown, from 127.0.0.1) still gets in: the oldest silent
        // connection yields its slot.
        let mut a = Node::start(config(SECRET)).await;
        assert_exchange(&mut a, &mut b, "admitted").await;
        assert!(b.transport.stats_snapshot().closed(CloseReason::Evicted) >= 7);
        drop(flood);
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_that_proved_the_secret_reconnects_through_a_flood_on_reserved_slots() {
    timeout(LIMIT, async {
        let admission = AdmissionOptions::default()
            .with_general_slots(2)
            .with_reserved_slots(2)
            .with_per_source_slots(1);
        let mut b = Node::start(config(SECRET).with_admission(admission)).await;
        let mut a = Node::start(config(SECRET)).await;
        assert_exchange(&mut a, &mut b, "before").await;
        assert_eq!(
            b.transport.known_sources(),
            1,
            "127.0.0.1 proved the secret"
        );
        // A flood of silent connections from other sources, held open.
        let target = b.transport.local_socket_addr();
        let mut flood = Vec::new();
        for n in 30..60 {
            flood.push(connect_from(n, target).await);
        }
        // Thirty silent connections for two general slots: 28 were evicted.
        b.transport
            .stats()
            .wait_for(|s| s.closed(CloseReason::Evicted) == 28)
            .await;
        // The member restarts (a new incarnation at a new port, same host) and gets through on
        // a reserved slot: its host is known, and it takes no slot from the flood.
        a.transport.shutdown().await;
        let mut a2 = Node::start(config(SECRET)).await;
        assert_exchange(&mut a2, &mut b, "after").await;
        assert_eq!(b.transport.pending_handshakes(Pool::General), 2);
        assert_eq!(
            b.transport.stats_snapshot().closed(CloseReason::Evicted),
            28
        );
        drop(flood);
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_without_the_secret_learns_nothing_about_the_node() {
    timeout(LIMIT, async {
        let b = Node::start(config(SECRET).with_incarnation(0x5EC2_E7AB_CDEF_0123)).await;
        let mut client = TcpStream::connect(b.transport.local_socket_addr())
            .await
            .unwrap();
        let mut hello = [0u8; 4 + HELLO_LEN];
        client.read_exact(&mut hello).await.unwrap();
        // A Hello, then a proof made up without the secret.
        let ours = HandshakeMessage::Hello(Hello {
            versions: ProtocolVersions::THIS_BUILD,
            nonce: [1; NONCE_LEN],
        })
        .encode()
        .unwrap();
        let proof = HandshakeMessage::Proof([0; 32]).encode().unwrap();
        let mut out = BytesMut::new();
        encode_frame(&ours, 64, &mut out).unwrap();
        encode_frame(&proof, 64, &mut out).unwrap();
        client.write_all(&out).await.unwrap();
        let mut rest = Vec::new();
        let _ = client.read_to_end(&mut rest).await;
        // All it ever got: the node's Hello (versions and a nonce), nothing after.
        assert!(rest.is_empty(), "{rest:?}");
        assert!(matches!(
            HandshakeMessage::decode(&hello[4..]),
            Ok(HandshakeMessage::Hello(_))
        ));
        // A Hello has room for the magic, the versions and the nonce only.
        assert_eq!(
            u32::from_be_bytes(hello[..4].try_into().unwrap()) as usize,
            HELLO_LEN
        );
        for needle in [
            &b"app"[..],
            &b"127.0.0.1"[..],
            &0x5EC2_E7AB_CDEF_0123u64.to_be_bytes()[..],
        ] {
            assert!(!hello.windows(needle.len()).any(|w| w == needle));
        }
        b.transport
            .stats()
            .wait_for(|s| s.handshakes_rejected == 1)
            .await;
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_without_a_common_protocol_version_is_refused_and_counted_by_its_versions() {
    timeout(LIMIT, async {
        let mut a = Node::start(config(SECRET)).await;
        let mut b = Node::start(config(SECRET)).await;
        let ahead = ProtocolVersions::THIS_BUILD.highest() + 1;
        let future = ProtocolVersions::new(ahead, ahead + 1).unwrap();
        let mut client = TcpStream::connect(b.transport.local_socket_addr())
            .await
            .unwrap();
        let hello = HandshakeMessage::Hello(Hello {
            versions: future,
            nonce: [2; NONCE_LEN],
        })
        .encode()
        .unwrap();
        let mut out = BytesMut::new();
        encode_frame(&hello, 64, &mut out).unwrap();
        client.write_all(&out).await.unwrap();
        closed_by_server(&mut client).await;
        let stats = b
            .transport
            .stats()
            .wait_for(|s| s.handshakes_rejected == 1)
            .await;
        assert_eq!(
            stats.refused_versions.get(&RefusedVersions::Range {
                lowest: ahead,
                highest: ahead + 1
            }),
            Some(&1)
        );
        // Peers of this build agree on its highest version.
        assert_exchange(&mut a, &mut b, "same build").await;
        assert_eq!(
            a.transport.peer_version(&b.address()),
            Some(ProtocolVersions::THIS_BUILD.highest())
        );
        assert_eq!(
            b.transport.stats_snapshot().established_by_version
                [&ProtocolVersions::THIS_BUILD.highest()],
            2
        );
    })
    .await
    .unwrap();
}
