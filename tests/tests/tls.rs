//! TLS between agents and the control plane, with real processes and certificates made here
//! (rcgen): the server with `--tls-cert`/`--tls-key` answers no plain HTTP, a client trusting
//! another CA is refused, one trusting the right CA is served; an agent with
//! `--control-plane-ca` of the right CA reports, one with a wrong CA sends nothing (and logs
//! why once, at WARN, naming the flag); the coordination client (leases and the directory
//! through the control plane) trusting the right CA is served, one trusting another CA (or only
//! the public roots) is refused.

use std::path::Path;
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
use troupe_e2e::{Process, binary, free_port};

const SECRET: &str = "e2e tls secret, long enough for the cluster";
const INGEST: &str = "ingest-secret";
const WAIT: Duration = Duration::from_secs(60);

struct Ca {
    cert: rcgen::Certificate,
    key: KeyPair,
}

fn ca(name: &str) -> Ca {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    let key = KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    Ca { cert, key }
}

/// A server certificate for 127.0.0.1 and localhost signed by `ca`: (cert PEM, key PEM).
fn server_cert(ca: &Ca) -> (String, String) {
    let params =
        CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, &ca.cert, &ca.key).unwrap();
    (cert.pem(), key.serialize_pem())
}

fn client(ca_pem: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(ca_pem.as_bytes()).unwrap())
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap()
}

fn agent_args(port: u16, control_plane: &str, ca: &Path) -> Vec<String> {
    [
        "--system",
        "tls",
        "--bind",
        &format!("127.0.0.1:{port}"),
        "--seed",
        &format!("troupe://tls@127.0.0.1:{port}"),
        "--secret",
        SECRET,
        "--control-plane",
        control_plane,
        "--control-plane-ca",
        ca.to_str().unwrap(),
        "--ingest-token",
        INGEST,
        "--report-interval-ms",
        "100",
        "--management-bind",
        "127.0.0.1:0",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_serves_only_tls_and_agents_report_only_to_a_server_their_ca_signed() {
    let dir = std::env::temp_dir().join(format!("troupe-e2e-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let right = ca("troupe test ca");
    let wrong = ca("some other ca");
    let (cert, key) = server_cert(&right);
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let cert_file = write("server.pem", &cert);
    let key_file = write("server.key", &key);
    let right_ca = write("ca.pem", &right.cert.pem());
    let wrong_ca = write("wrong-ca.pem", &wrong.cert.pem());

    let port = free_port();
    let args: Vec<String> = [
        "--listen",
        &format!("127.0.0.1:{port}"),
        "--sqlite-path",
        dir.join("cp.sqlite").to_str().unwrap(),
        "--ingest-token",
        INGEST,
        "--tls-cert",
        cert_file.to_str().unwrap(),
        "--tls-key",
        key_file.to_str().unwrap(),
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    let mut server = Process::start(&binary("troupe-server"), &args);
    let https = format!("https://127.0.0.1:{port}");
    let trusted = client(&right.cert.pem());
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Ok(r) = trusted.get(format!("{https}/api/v1/clusters")).send().await {
            assert_eq!(r.status(), 200, "the right CA is served");
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the server never answered over TLS"
        );
        server.drain();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Plain HTTP on the TLS port gets no HTTP answer.
    let plain = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap()
        .get(format!("http://127.0.0.1:{port}/api/v1/clusters"))
        .send()
        .await;
    assert!(plain.is_err(), "plain HTTP answered: {plain:?}");
    // A client trusting another CA refuses the server's certificate.
    let refused = client(&wrong.cert.pem())
        .get(format!("{https}/api/v1/clusters"))
        .send()
        .await;
    let error = refused.expect_err("a wrong CA must not be served");
    assert!(error.is_connect(), "{error:?}");

    // An agent with the right CA reports over TLS; one with a wrong CA never gets through.
    let good_port = free_port();
    let bad_port = free_port();
    let mut good = Process::start(
        &binary("troupe-agent"),
        &agent_args(good_port, &https, &right_ca),
    );
    let mut bad = Process::start_capturing_stderr(
        &binary("troupe-agent"),
        &agent_args(bad_port, &https, &wrong_ca),
    );
    let deadline = tokio::time::Instant::now() + WAIT;
    let good_node = format!("127.0.0.1:{good_port}");
    loop {
        let nodes: serde_json::Value = match trusted
            .get(format!("{https}/api/v1/clusters/tls/nodes"))
            .send()
            .await
        {
            Ok(r) if r.status().is_success() => r.json().await.unwrap_or_default(),
            _ => serde_json::Value::Null,
        };
        let listed: Vec<&str> = nodes
            .as_array()
            .map(|n| n.iter().filter_map(|n| n["node"].as_str()).collect())
            .unwrap_or_default();
        if listed.contains(&good_node.as_str()) {
            // By now the agent with the wrong CA has tried many times.
            tokio::time::sleep(Duration::from_secs(2)).await;
            let nodes: serde_json::Value = trusted
                .get(format!("{https}/api/v1/clusters/tls/nodes"))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            let listed: Vec<&str> = nodes
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|n| n["node"].as_str())
                .collect();
            assert_eq!(
                listed,
                vec![good_node.as_str()],
                "the agent with a wrong CA must not have reported"
            );
            // It says why, once (not per retry), at WARN, naming the flag to fix.
            let warned: Vec<String> = bad
                .stderr_lines()
                .into_iter()
                .filter(|line| line.contains("not delivered; logged once until it is"))
                .collect();
            assert_eq!(warned.len(), 1, "{:#?}", bad.stderr_lines());
            for expected in [
                "WARN",
                "invalid peer certificate",
                "--control-plane-ca (TROUPE_CONTROL_PLANE_CA) must name the CA that signed it",
            ] {
                assert!(
                    warned[0].contains(expected),
                    "{expected:?} not in {}",
                    warned[0]
                );
            }
            assert!(
                bad.try_wait().is_none(),
                "the agent with a wrong CA keeps running (its cluster work does not depend on reporting)"
            );
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the agent with the right CA never reported: {nodes}"
        );
        good.drain();
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    good.kill().await;
    bad.kill().await;
    server.kill().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// Starts a TLS server on SQLite in `dir` with a coordination token; its https:// base URL once
/// it answers a client trusting `ca`.
async fn tls_server(dir: &Path, ca: &Ca, coordination_token: &str) -> (Process, String) {
    let (cert, key) = server_cert(ca);
    let cert_file = dir.join("server.pem");
    let key_file = dir.join("server.key");
    std::fs::write(&cert_file, cert).unwrap();
    std::fs::write(&key_file, key).unwrap();
    let port = free_port();
    let args: Vec<String> = [
        "--listen",
        &format!("127.0.0.1:{port}"),
        "--sqlite-path",
        dir.join("cp.sqlite").to_str().unwrap(),
        "--ingest-token",
        INGEST,
        "--coordination-token",
        coordination_token,
        "--tls-cert",
        cert_file.to_str().unwrap(),
        "--tls-key",
        key_file.to_str().unwrap(),
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    let mut server = Process::start(&binary("troupe-server"), &args);
    let https = format!("https://127.0.0.1:{port}");
    let trusted = client(&ca.cert.pem());
    let deadline = tokio::time::Instant::now() + WAIT;
    while trusted.get(format!("{https}/livez")).send().await.is_err() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the server never answered over TLS"
        );
        server.drain();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (server, https)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_coordination_client_trusts_only_the_control_plane_ca_it_is_given() {
    use troupe_coordination::http::HttpCoordination;
    use troupe_lease::lease::{LeaseProvider, LeaseSettings};

    const TOKEN: &str = "coordination-secret";
    let dir = std::env::temp_dir().join(format!("troupe-e2e-tls-coord-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let right = ca("troupe test ca");
    let wrong = ca("some other ca");
    let (mut server, https) = tls_server(&dir, &right, TOKEN).await;
    let settings = LeaseSettings::new(Duration::from_secs(15), Duration::from_secs(3)).unwrap();
    let acquire = |coordination: HttpCoordination, owner: &'static str| async move {
        let lease = coordination
            .leases()
            .lease("tls-singleton", owner, &settings)
            .unwrap();
        let outcome =
            tokio::time::timeout(Duration::from_secs(20), lease.acquire(Box::new(|_| {})))
                .await
                .expect("an acquire answers or fails within 20 s");
        (lease, outcome)
    };

    // Trusting the right CA: the lease is granted over TLS.
    let trusted = HttpCoordination::with_ca(&https, TOKEN, right.cert.pem().as_bytes()).unwrap();
    let (held, granted) = acquire(trusted, "node-a").await;
    assert!(
        matches!(granted, Ok(Some(_))),
        "the right CA must be served and the free lease granted: {granted:?}"
    );
    // Trusting another CA, or only the bundled public roots: refused before any HTTP.
    let wrong_ca = HttpCoordination::with_ca(&https, TOKEN, wrong.cert.pem().as_bytes()).unwrap();
    let (_, refused) = acquire(wrong_ca, "node-b").await;
    assert!(refused.is_err(), "a wrong CA must be refused: {refused:?}");
    let public_roots = HttpCoordination::new(&https, TOKEN).unwrap();
    let (_, refused) = acquire(public_roots, "node-c").await;
    assert!(
        refused.is_err(),
        "the public roots must not verify a private CA: {refused:?}"
    );
    // A CA with a plain http:// URL, or a file without a certificate, is refused at setup.
    let plain = HttpCoordination::with_ca(
        &https.replace("https", "http"),
        TOKEN,
        right.cert.pem().as_bytes(),
    )
    .expect_err("a CA with http:// must be refused");
    assert!(plain.to_string().contains("https://"), "{plain}");
    let empty = HttpCoordination::with_ca(&https, TOKEN, b"not a certificate")
        .expect_err("a CA file without a certificate must be refused");
    assert!(empty.to_string().contains("no PEM certificate"), "{empty}");

    held.release().await.unwrap();
    server.kill().await;
    let _ = std::fs::remove_dir_all(&dir);
}
