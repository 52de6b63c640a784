//! Coordination grants on the embedded SQLite store are durable: a real `troupe-server`
//! process on a SQLite file grants a lease, is SIGKILLed and started again on the same file,
//! and the holder's renewal succeeds with the same token while another owner is still
//! refused; left unrenewed, the grant is taken over one TTL after its last renewal with a
//! larger fencing token, and the old token gets 409 `not_owner`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

#[path = "support/server_process.rs"]
mod server_process;
use server_process::ServerProcess;

const COORDINATION_TOKEN: &str = "sqlite-grants-coordination-token";
const LEASE: &str = "durable-lease";
const TTL_MS: u64 = 3000;

/// A server on the SQLite file `path` with the coordination API on.
fn server(path: &PathBuf) -> ServerProcess {
    let mut command = ServerProcess::command();
    command
        .args(["--coordination-token", COORDINATION_TOKEN])
        .arg("--sqlite-path")
        .arg(path)
        .args(["--shutdown-timeout-secs", "5", "--workers", "2"])
        .env_remove("TROUPE_ETCD_ENDPOINTS");
    ServerProcess::spawn(command)
}

/// `POST /api/v1/coordination/leases/{LEASE}/{action}`: the status and the body.
async fn lease_call(
    client: &reqwest::Client,
    server: &ServerProcess,
    action: &str,
    body: serde_json::Value,
) -> (u16, serde_json::Value) {
    let response = client
        .post(server.url(&format!("/api/v1/coordination/leases/{LEASE}/{action}")))
        .bearer_auth(COORDINATION_TOKEN)
        .json(&body)
        .send()
        .await
        .unwrap_or_else(|e| panic!("{action} through {}: {e}", server.base()));
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or_default())
}

fn acquire_body(owner: &str) -> serde_json::Value {
    serde_json::json!({"owner": owner, "ttl_ms": TTL_MS})
}

fn grant_body(owner: &str, token: &str) -> serde_json::Value {
    serde_json::json!({"owner": owner, "token": token})
}

fn kill(server: &mut ServerProcess) {
    server.child.kill().expect("SIGKILL the server");
    server.child.wait().expect("the killed server is reaped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_on_sqlite_survives_a_sigkill_and_restart_and_still_expires_one_ttl_after_its_last_renewal()
 {
    let dir = std::env::temp_dir().join(format!(
        "troupe-sqlite-grants-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("store.sqlite");
    let client = reqwest::Client::new();

    let mut first = server(&path);
    let (status, grant) = lease_call(&client, &first, "acquire", acquire_body("agent-1")).await;
    assert_eq!(
        (status, &grant["granted"]),
        (200, &serde_json::json!(true)),
        "{grant}"
    );
    let token = grant["token"].as_str().expect("a token").to_owned();
    let shown: serde_json::Value = client
        .get(first.url(&format!("/api/v1/coordination/leases/{LEASE}")))
        .bearer_auth(COORDINATION_TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(shown["backend"], "sqlite", "{shown}");
    assert_eq!(shown["holder"]["token"], token.as_str(), "{shown}");

    // SIGKILL: nothing is flushed or released on the way out.
    kill(&mut first);
    let killed = Instant::now();
    let second = server(&path);
    let down = killed.elapsed();
    assert!(
        down < Duration::from_millis(TTL_MS),
        "the restart took {down:?}, longer than the ttl: the test proves nothing"
    );
    let (status, renewed) =
        lease_call(&client, &second, "renew", grant_body("agent-1", &token)).await;
    let last_renewal = Instant::now();
    assert_eq!(status, 200, "the renewal after the restart: {renewed}");
    assert_eq!(renewed["token"], token.as_str(), "{renewed}");
    assert_eq!(renewed["expires_in_ms"], TTL_MS.to_string(), "{renewed}");
    let (_, refused) = lease_call(&client, &second, "acquire", acquire_body("agent-2")).await;
    assert_eq!(
        refused["granted"], false,
        "the restarted server still sees agent-1's grant: {refused}"
    );

    // Nobody renews: another owner takes it over one TTL after the last renewal.
    let taken = loop {
        let (status, answer) =
            lease_call(&client, &second, "acquire", acquire_body("agent-2")).await;
        assert_eq!(status, 200, "{answer}");
        if answer["granted"] == true {
            break answer;
        }
        assert!(
            last_renewal.elapsed() < Duration::from_millis(TTL_MS + 2000),
            "the unrenewed grant never expired"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let expired_after = last_renewal.elapsed();
    assert!(
        expired_after >= Duration::from_millis(TTL_MS - 100),
        "taken over {expired_after:?} after the last renewal, before the ttl {TTL_MS} ms"
    );
    let new_token: u64 = taken["token"].as_str().unwrap().parse().unwrap();
    assert!(
        new_token > token.parse().unwrap(),
        "{new_token} after {token}"
    );
    let (status, gone) = lease_call(&client, &second, "renew", grant_body("agent-1", &token)).await;
    assert_eq!(status, 409, "the expired grant cannot be renewed: {gone}");
    assert_eq!(gone["code"], "not_owner", "{gone}");
    drop(second);
    let _ = std::fs::remove_dir_all(&dir);
    println!(
        "sqlite grant (ttl {TTL_MS} ms): renewed after a SIGKILL and restart ({down:?} down); taken over {expired_after:?} after its last renewal"
    );
}
