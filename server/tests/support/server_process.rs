//! A real `troupe-server` process for tests: started on a free loopback port, found by the
//! address it logs, killed when dropped (so a failing test leaves no server behind).

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// A running server process.
pub(crate) struct ServerProcess {
    pub(crate) child: Child,
    pub(crate) addr: SocketAddr,
}

impl ServerProcess {
    /// The binary with what every test needs: a free loopback port, JSON logs on stderr (where
    /// [`ServerProcess::spawn`] reads the address), and no database from the environment.
    /// Add the storage and tokens.
    pub(crate) fn command() -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_troupe-server"));
        command
            .args(["--listen", "127.0.0.1:0", "--log-json"])
            .env_remove("DATABASE_URL")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        command
    }

    /// Starts `command` (made by [`ServerProcess::command`]) and waits up to 60 s until it
    /// logs the address it serves on.
    pub(crate) fn spawn(mut command: Command) -> Self {
        let mut child = command.spawn().expect("start troupe-server");
        let stderr = child.stderr.take().expect("stderr is piped");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Ok(log) = serde_json::from_str::<serde_json::Value>(&line)
                    && let Some(api) = log["api"].as_str()
                {
                    let _ = tx.send(api.to_owned());
                }
            }
        });
        let api = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("server logs its address");
        let addr = api
            .trim_start_matches("http://")
            .trim_end_matches("/api/v1")
            .parse()
            .unwrap_or_else(|e| panic!("server logged api {api:?}: {e}"));
        Self { child, addr }
    }

    /// `http://<addr>`.
    pub(crate) fn base(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `http://<addr><path>`.
    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// The process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGTERM and waits for the process to exit.
    pub(crate) fn terminate(&mut self) -> ExitStatus {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill -TERM");
        assert!(status.success());
        self.child.wait().expect("server exits")
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
