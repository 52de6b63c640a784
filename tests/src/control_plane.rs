//! The control-plane server as a real process on an embedded SQLite file in a temporary
//! directory, with member operations enabled; and what its API says about a cluster.

use std::time::Duration;

use crate::{Process, binary, free_port};

/// The ingest token the server is started with.
pub const INGEST_TOKEN: &str = "ingest-secret";
/// The admin token (member operations).
pub const ADMIN_TOKEN: &str = "admin-secret";

/// A running `troupe-server`; killed and its directory removed when dropped.
#[derive(Debug)]
pub struct Server {
    /// The process.
    pub process: Process,
    /// `http://127.0.0.1:<port>` (no `/api/v1`).
    pub url: String,
    /// Its port.
    pub port: u16,
    dir: std::path::PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Server {
    /// Start the server and wait until its API answers.
    ///
    /// # Panics
    /// When it does not answer within a minute.
    pub async fn start() -> Self {
        Self::start_with(&[]).await
    }

    /// Start the server with `extra` arguments after the usual ones, and wait until its API
    /// answers.
    ///
    /// # Panics
    /// When it does not answer within a minute.
    pub async fn start_with(extra: &[&str]) -> Self {
        Self::start_on(free_port(), extra).await
    }

    /// Start the server on `port` (chosen earlier, say with [`free_port`], so that agents
    /// could be pointed at it while it was away) with `extra` arguments, and wait until its
    /// API answers.
    ///
    /// # Panics
    /// When it does not answer within a minute.
    pub async fn start_on(port: u16, extra: &[&str]) -> Self {
        let dir = std::env::temp_dir().join(format!("troupe-e2e-cp-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("server directory");
        let args: Vec<String> = [
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--sqlite-path",
            dir.join("control-plane.sqlite")
                .to_str()
                .expect("utf-8 path"),
            "--ingest-token",
            INGEST_TOKEN,
            "--admin-token",
            ADMIN_TOKEN,
            "--enable-member-operations",
        ]
        .iter()
        .chain(extra)
        .map(|s| (*s).to_owned())
        .collect();
        let mut process = Process::start(&binary("troupe-server"), &args);
        let url = format!("http://127.0.0.1:{port}");
        let client = reqwest::Client::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(response) = client.get(format!("{url}/api/v1/clusters")).send().await
                && response.status().is_success()
            {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "server did not answer"
            );
            process.drain();
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Self {
            process,
            url,
            port,
            dir,
        }
    }

    /// Kill the server and reap it (so no process outlives the test).
    pub async fn stop(mut self) {
        self.process.kill().await;
    }

    /// `GET /api/v1/<path>` as JSON (`Null` when it fails).
    pub async fn get(&self, path: &str) -> serde_json::Value {
        let client = reqwest::Client::new();
        match client
            .get(format!("{}/api/v1/{path}", self.url))
            .send()
            .await
        {
            Ok(response) if response.status().is_success() => {
                response.json().await.unwrap_or_default()
            }
            _ => serde_json::Value::Null,
        }
    }

    /// Queue `operation` (`Down`, `Leave`) for the member at `host:port` of `cluster`.
    ///
    /// # Panics
    /// When the server does not accept it (202).
    pub async fn operate(&self, cluster: &str, member: &str, operation: &str) {
        let response = reqwest::Client::new()
            .put(format!(
                "{}/api/v1/clusters/{cluster}/members/{member}",
                self.url
            ))
            .bearer_auth(ADMIN_TOKEN)
            .form(&[("operation", operation)])
            .send()
            .await
            .expect("queue the operation");
        assert_eq!(response.status(), 202, "{:?}", response.text().await);
    }

    /// The agents (nodes) of `cluster` as the server lists them.
    pub async fn nodes(&self, cluster: &str) -> Vec<serde_json::Value> {
        self.get(&format!("clusters/{cluster}/nodes"))
            .await
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// Poll `GET /api/v1/<path>` until `ok` accepts it; the accepted JSON.
    ///
    /// # Panics
    /// With the last answer, when `within` passes first.
    pub async fn wait_for(
        &self,
        path: &str,
        within: Duration,
        what: &str,
        mut ok: impl FnMut(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let value = self.get(path).await;
            if ok(&value) {
                return value;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "never within {within:?}: {what}; last GET {path}: {value:#}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
