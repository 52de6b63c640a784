//! The TCP transport with mutual TLS on loopback: nodes holding certificates from the
//! cluster CA talk; a node with a certificate from another CA, or without TLS, does not.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::time::timeout;
use troupe::transport::tls::{PrivateKeyDer, PrivatePkcs8KeyDer};
use troupe::transport::{
    CloseReason, ClusterSecret, InboundFrame, TcpTransport, TcpTransportOptions, TlsOptions,
    Transport,
};

const SECRET: &str = "integration-test-cluster-secret";
const LIMIT: Duration = Duration::from_secs(20);

struct Ca {
    cert: rcgen::Certificate,
    key: KeyPair,
}

fn ca(name: &str) -> Ca {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    Ca {
        cert: params.self_signed(&key).unwrap(),
        key,
    }
}

/// A node certificate for 127.0.0.1 issued by `issuer`, trusting `trusted`.
fn tls(issuer: &Ca, trusted: &Ca) -> TlsOptions {
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .unwrap()
        .signed_by(&key, &issuer.cert, &issuer.key)
        .unwrap();
    TlsOptions::mutual(
        trusted.cert.der().clone(),
        vec![cert.der().clone()],
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
    )
    .unwrap()
}

async fn node(tls: Option<TlsOptions>) -> (Arc<TcpTransport>, mpsc::Receiver<InboundFrame>) {
    let (tx, rx) = mpsc::channel(64);
    let mut config = TcpTransportOptions::new(
        "app",
        "127.0.0.1:0".parse().unwrap(),
        ClusterSecret::new(SECRET).unwrap(),
    )
    .with_reconnect_backoff(Duration::from_millis(10), Duration::from_millis(100));
    if let Some(tls) = tls {
        config = config.with_tls(tls);
    }
    (TcpTransport::bind(config, tx).await.unwrap(), rx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_with_certificates_from_the_cluster_ca_exchange_frames_over_tls() {
    timeout(LIMIT, async {
        let cluster = ca("cluster");
        let (a, mut a_rx) = node(Some(tls(&cluster, &cluster))).await;
        let (b, mut b_rx) = node(Some(tls(&cluster, &cluster))).await;
        a.send(&b.local().address, Bytes::from_static(b"over tls"))
            .unwrap();
        let got = b_rx.recv().await.unwrap();
        assert_eq!((&got.from, &got.payload[..]), (a.local(), &b"over tls"[..]));
        b.send(&a.local().address, Bytes::from_static(b"back"))
            .unwrap();
        let got = a_rx.recv().await.unwrap();
        assert_eq!((&got.from, &got.payload[..]), (b.local(), &b"back"[..]));
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_from_another_ca_is_rejected_and_nothing_is_delivered() {
    timeout(LIMIT, async {
        let cluster = ca("cluster");
        let rogue = ca("rogue");
        // The intruder knows the shared secret but its certificate is not the cluster's.
        let (intruder, _rx) = node(Some(tls(&rogue, &cluster))).await;
        let (b, mut b_rx) = node(Some(tls(&cluster, &cluster))).await;
        let (c, _c_rx) = node(Some(tls(&cluster, &cluster))).await;
        intruder
            .send(&b.local().address, Bytes::from_static(b"let me in"))
            .unwrap();
        b.stats()
            .wait_for(|s| s.closed(CloseReason::TlsRejected) >= 1)
            .await;
        // A cluster member still gets through, and it is the first frame B ever delivers.
        c.send(&b.local().address, Bytes::from_static(b"member"))
            .unwrap();
        let got = b_rx.recv().await.unwrap();
        assert_eq!((&got.from, &got.payload[..]), (c.local(), &b"member"[..]));
        assert_eq!(b.stats_snapshot().handshakes_ok, 1);
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_tcp_peer_cannot_talk_to_a_tls_node() {
    timeout(LIMIT, async {
        let cluster = ca("cluster");
        let (plain, _rx) = node(None).await;
        let (b, mut b_rx) = node(Some(tls(&cluster, &cluster))).await;
        plain
            .send(&b.local().address, Bytes::from_static(b"in clear"))
            .unwrap();
        b.stats()
            .wait_for(|s| s.closed(CloseReason::TlsRejected) >= 1)
            .await;
        plain.stats().wait_for(|s| s.handshakes_rejected >= 1).await;
        assert!(b_rx.try_recv().is_err());

        // Raw bytes fare no better: the TLS node closes the connection.
        let mut raw = TcpStream::connect(b.local_socket_addr()).await.unwrap();
        tokio::io::AsyncWriteExt::write_all(&mut raw, b"\0\0\0\x05hello")
            .await
            .unwrap();
        let mut sink = Vec::new();
        let _ = raw.read_to_end(&mut sink).await;
        b.stats()
            .wait_for(|s| s.closed(CloseReason::TlsRejected) >= 2)
            .await;
    })
    .await
    .unwrap();
}
