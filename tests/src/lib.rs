//! End-to-end test support: start real Troupe processes on 127.0.0.1 and read what they
//! report. The tests themselves live in `tests/tests/`.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

/// The path of a workspace binary, building it first if this test run did not.
///
/// # Panics
/// When the binary cannot be built.
#[must_use]
pub fn binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/<test> → target/<profile>/<name>
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("test executable lives in target/<profile>/deps");
    let path = profile_dir.join(name);
    if !path.exists() {
        let status = std::process::Command::new(env!("CARGO"))
            .args(["build", "--bin", name])
            .status()
            .expect("run cargo build");
        assert!(status.success(), "cargo build --bin {name} failed");
    }
    path
}

/// A free TCP port on 127.0.0.1 (free when asked; good enough for tests on loopback).
///
/// # Panics
/// When no port can be bound.
#[must_use]
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind 127.0.0.1:0")
        .port()
}

/// A running process whose stdout JSON lines are collected.
#[derive(Debug)]
pub struct Process {
    child: Child,
    /// One JSON value per line the process printed on stdout.
    pub lines: mpsc::UnboundedReceiver<serde_json::Value>,
    /// Everything received so far.
    pub seen: Vec<serde_json::Value>,
}

impl Process {
    /// Start `program` with `args`; stdout is parsed as JSON lines, stderr inherited.
    ///
    /// # Panics
    /// When the process cannot be started.
    #[must_use]
    pub fn start(program: &PathBuf, args: &[String]) -> Self {
        let mut child = Command::new(program)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("start process");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if let Ok(value) = serde_json::from_str(&line) {
                    if tx.send(value).is_err() {
                        return;
                    }
                }
            }
        });
        Self {
            child,
            lines: rx,
            seen: Vec::new(),
        }
    }

    /// Wait until a line satisfying `predicate` has been printed (including earlier ones).
    ///
    /// # Panics
    /// When no such line arrives within `timeout`.
    pub async fn wait_for(
        &mut self,
        timeout: Duration,
        what: &str,
        mut predicate: impl FnMut(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        if let Some(found) = self.seen.iter().find(|v| predicate(v)) {
            return found.clone();
        }
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let line = tokio::time::timeout_at(deadline, self.lines.recv())
                .await
                .unwrap_or_else(|_| {
                    panic!(
                        "timed out after {timeout:?} waiting for {what}; saw {:#?}",
                        self.seen
                    )
                })
                .unwrap_or_else(|| {
                    panic!(
                        "process exited while waiting for {what}; saw {:#?}",
                        self.seen
                    )
                });
            self.seen.push(line.clone());
            if predicate(&line) {
                return line;
            }
        }
    }

    /// Kill the process with SIGKILL and reap it.
    pub async fn kill(&mut self) {
        let _ = self.child.kill().await;
    }

    /// Send SIGTERM and wait for the process to exit (at most `timeout`).
    ///
    /// # Panics
    /// When the process does not exit in time.
    pub async fn terminate(&mut self, timeout: Duration) -> std::process::ExitStatus {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
        }
        tokio::time::timeout(timeout, self.child.wait())
            .await
            .expect("process exits after SIGTERM")
            .expect("wait for process")
    }
}
