//! Issue 14, item 4 with the real binaries: a node started with the wrong secret, seeded with
//! itself, forms its own cluster of the same name and reports to the same `troupe-server`. The
//! API shows two clusters (one key each), the real cluster's members, leader and singleton host
//! are its own, and a Leave queued for a real member is carried out by the real cluster (the
//! member leaves and exits 0) while the intruder keeps running untouched.

use std::time::Duration;

use troupe_e2e::control_plane::{INGEST_TOKEN, Server};
use troupe_e2e::{Process, binary, free_port};

const SYSTEM: &str = "twins";
const SECRET: &str = "the real cluster's secret, long enough";
const WRONG_SECRET: &str = "an intruder's other secret, long enough";
const SETTLE: Duration = Duration::from_secs(60);

fn start_agent(server: &Server, port: u16, seed: u16, secret: &str) -> Process {
    let args: Vec<String> = [
        "--system",
        SYSTEM,
        "--bind",
        &format!("127.0.0.1:{port}"),
        "--seed",
        &format!("troupe://{SYSTEM}@127.0.0.1:{seed}"),
        "--secret",
        secret,
        "--control-plane",
        &server.url,
        "--ingest-token",
        INGEST_TOKEN,
        "--report-interval-ms",
        "100",
        "--management-bind",
        &format!("127.0.0.1:{}", free_port()),
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    Process::start(&binary("troupe-agent"), &args)
}

/// The `host:port` of the members up in the cluster with `key`.
async fn up(server: &Server, key: &str) -> Vec<String> {
    let members = server.get(&format!("clusters/{key}/members")).await;
    let mut up: Vec<String> = members["members"]
        .as_array()
        .map(|all| {
            all.iter()
                .filter(|m| m["status"] == "up")
                .filter_map(|m| m["node"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    up.sort();
    up
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_intruder_with_the_same_name_and_another_secret_is_another_cluster() {
    let server = Server::start().await;
    let (seed, second, intruder_port) = (free_port(), free_port(), free_port());
    let mut real_seed = start_agent(&server, seed, seed, SECRET);
    let mut real_second = start_agent(&server, second, seed, SECRET);
    let mut intruder = start_agent(&server, intruder_port, intruder_port, WRONG_SECRET);

    let clusters = server
        .wait_for("clusters", SETTLE, "two clusters named twins", |c| {
            c.as_array().is_some_and(|all| all.len() == 2)
        })
        .await;
    let keys: Vec<String> = clusters
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            assert_eq!(c["name"], SYSTEM, "{clusters:#}");
            let key = c["key"].as_str().unwrap().to_owned();
            let fingerprint = c["identity_fingerprint"].as_str().unwrap();
            assert_eq!(key, format!("{SYSTEM}~{fingerprint}"), "{clusters:#}");
            key
        })
        .collect();
    assert_ne!(keys[0], keys[1]);

    // Which key is whose: the one whose members come to hold the two real nodes.
    let real_nodes = {
        let mut nodes = vec![format!("127.0.0.1:{seed}"), format!("127.0.0.1:{second}")];
        nodes.sort();
        nodes
    };
    let intruder_node = format!("127.0.0.1:{intruder_port}");
    let deadline = tokio::time::Instant::now() + SETTLE;
    let (real_key, intruder_key) = loop {
        let (a, b) = (up(&server, &keys[0]).await, up(&server, &keys[1]).await);
        if a == real_nodes && b == [intruder_node.clone()] {
            break (keys[0].clone(), keys[1].clone());
        }
        if b == real_nodes && a == [intruder_node.clone()] {
            break (keys[1].clone(), keys[0].clone());
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never two unmerged clusters: {} has {a:?}, {} has {b:?}",
            keys[0],
            keys[1]
        );
        real_seed.drain();
        real_second.drain();
        intruder.drain();
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let members = server.get(&format!("clusters/{real_key}/members")).await;
    assert!(
        real_nodes.iter().any(|n| members["leader"] == n.as_str()),
        "the real cluster's leader is one of its own: {members:#}"
    );
    let intruder_members = server
        .get(&format!("clusters/{intruder_key}/members"))
        .await;
    assert_eq!(intruder_members["leader"], intruder_node.as_str());
    // The bare name is ambiguous: refused, naming both keys.
    let ambiguous = reqwest::get(format!("{}/api/v1/clusters/{SYSTEM}/members", server.url))
        .await
        .unwrap();
    assert_eq!(ambiguous.status(), 409);
    let message = ambiguous.text().await.unwrap();
    assert!(
        message.contains(&real_key) && message.contains(&intruder_key),
        "{message}"
    );

    // A Leave for the real second node reaches the real cluster: that node leaves and exits 0.
    let leaving = format!("127.0.0.1:{second}");
    server.operate(&real_key, &leaving, "Leave").await;
    let status = real_second.wait(SETTLE).await;
    assert!(
        status.success(),
        "the real member left and exited: {status:?}"
    );
    server
        .wait_for(
            &format!("clusters/{real_key}/members"),
            SETTLE,
            "the real cluster without its left member",
            |m| {
                m["members"].as_array().is_some_and(|all| {
                    all.iter().all(|member| {
                        member["node"] != leaving.as_str() || member["status"] != "up"
                    })
                })
            },
        )
        .await;
    // The intruder was never asked anything: still running, still its own single member.
    assert!(intruder.try_wait().is_none(), "the intruder is untouched");
    assert_eq!(
        up(&server, &intruder_key).await,
        std::slice::from_ref(&intruder_node)
    );
    assert!(real_seed.try_wait().is_none());

    intruder.kill().await;
    real_seed.kill().await;
    server.stop().await;
}
