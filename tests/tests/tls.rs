//! TLS between agents and the control plane, with real processes and certificates made here
//! (rcgen): the server with `--tls-cert`/`--tls-key` answers no plain HTTP, a client trusting
//! another CA is refused, one trusting the right CA is served; an agent with
//! `--control-plane-ca` of the right CA reports, one with a wrong CA sends nothing.

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
