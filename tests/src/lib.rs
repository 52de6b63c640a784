//! End-to-end test support: start real Troupe processes on 127.0.0.1 and read what they
//! report. The tests themselves live in `tests/tests/`.

pub mod control_plane;
pub mod flood;
pub mod relay;
pub mod rolling;

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
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

/// The path of example `name` of workspace package `package`, building it first if this test
/// run did not. A workspace run (`cargo nextest run`, `cargo test`) builds every example; a
/// narrow run must include the package (`cargo nextest run -p troupe-agent -p troupe-e2e`), as
/// for [`binary`], or it runs the example last built.
///
/// # Panics
/// When the example cannot be built.
#[must_use]
pub fn example(package: &str, name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("test executable lives in target/<profile>/deps");
    let path = profile_dir.join("examples").join(name);
    if !path.exists() {
        let mut build = std::process::Command::new(env!("CARGO"));
        build.args(["build", "-q", "-p", package, "--example", name]);
        if profile_dir.file_name().is_some_and(|p| p == "release") {
            build.arg("--release");
        }
        let status = build.status().expect("run cargo build");
        assert!(
            status.success(),
            "cargo build -p {package} --example {name} failed"
        );
    }
    path
}

/// A free TCP port on 127.0.0.1, never the same one twice in this process.
///
/// Ports come from 20000–31999, below the kernel's ephemeral range (32768–60999 by default),
/// so a port handed out here is not taken meanwhile by an outgoing connection or by a
/// listener bound to port 0 — the collision seen when a node's transport port was picked
/// again as another node's management port ("cannot listen on …"). Each candidate is
/// checked by binding it; the start is spread by process id so concurrent test processes
/// rarely probe the same ports.
///
/// # Panics
/// When no port in the range can be bound.
#[must_use]
pub fn free_port() -> u16 {
    use std::collections::HashSet;
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU32, Ordering};
    const FIRST: u32 = 20_000;
    const SPAN: u32 = 12_000;
    static NEXT: OnceLock<AtomicU32> = OnceLock::new();
    static GIVEN: Mutex<Option<HashSet<u16>>> = Mutex::new(None);
    let next = NEXT.get_or_init(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        AtomicU32::new(std::process::id().wrapping_mul(7919).wrapping_add(nanos))
    });
    for _ in 0..SPAN {
        let offset = next.fetch_add(1, Ordering::Relaxed) % SPAN;
        let port = u16::try_from(FIRST + offset).expect("ports below 32000 fit in u16");
        let mut given = GIVEN.lock().expect("port registry");
        let given = given.get_or_insert_with(HashSet::new);
        if given.contains(&port) {
            continue;
        }
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            given.insert(port);
            return port;
        }
    }
    panic!("no free port in 127.0.0.1:{FIRST}..{}", FIRST + SPAN);
}

/// A running process whose stdout JSON lines are collected.
#[derive(Debug)]
pub struct Process {
    child: Child,
    /// One JSON value per line the process printed on stdout.
    pub lines: mpsc::UnboundedReceiver<serde_json::Value>,
    /// Everything received so far.
    pub seen: Vec<serde_json::Value>,
    /// The stderr lines so far, when started with [`Process::start_capturing_stderr`].
    stderr: Option<Arc<Mutex<Vec<String>>>>,
}

impl Process {
    /// Start `program` with `args`; stdout is parsed as JSON lines, stderr inherited.
    ///
    /// # Panics
    /// When the process cannot be started.
    #[must_use]
    pub fn start(program: &PathBuf, args: &[String]) -> Self {
        Self::spawn(program, args, false)
    }

    /// Like [`Process::start`], and keep the stderr lines too (see [`Process::stderr_lines`]).
    ///
    /// # Panics
    /// When the process cannot be started.
    #[must_use]
    pub fn start_capturing_stderr(program: &PathBuf, args: &[String]) -> Self {
        Self::spawn(program, args, true)
    }

    fn spawn(program: &PathBuf, args: &[String], capture_stderr: bool) -> Self {
        let mut child = Command::new(program)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(if capture_stderr {
                Stdio::piped()
            } else {
                Stdio::inherit()
            })
            .kill_on_drop(true)
            .spawn()
            .expect("start process");
        let stderr = child.stderr.take().map(|stderr| {
            let lines = Arc::new(Mutex::new(Vec::new()));
            let sink = Arc::clone(&lines);
            tokio::spawn(async move {
                let mut reader = BufReader::new(stderr).lines();
                while let Ok(Some(line)) = reader.next_line().await {
                    sink.lock().expect("stderr lines lock").push(line);
                }
            });
            lines
        });
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
            stderr,
        }
    }

    /// The operating system's id of the process, while it runs.
    #[must_use]
    pub fn id(&self) -> Option<u32> {
        self.child.id()
    }

    /// The stderr lines printed so far (empty unless started capturing them).
    ///
    /// # Panics
    /// When the collecting task panicked.
    #[must_use]
    pub fn stderr_lines(&self) -> Vec<String> {
        self.stderr
            .as_ref()
            .map(|lines| lines.lock().expect("stderr lines lock").clone())
            .unwrap_or_default()
    }

    /// Moves every line printed so far into [`Process::seen`] without waiting.
    pub fn drain(&mut self) {
        while let Ok(line) = self.lines.try_recv() {
            self.seen.push(line);
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

    /// Wait (at most `timeout`) for the process to exit by itself; its exit status.
    ///
    /// # Panics
    /// When it is still running after `timeout`.
    pub async fn wait(&mut self, timeout: Duration) -> std::process::ExitStatus {
        tokio::time::timeout(timeout, self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("the process did not exit within {timeout:?}"))
            .expect("wait for process")
    }

    /// The exit status, if the process has exited (without waiting).
    ///
    /// # Panics
    /// When the status cannot be read.
    pub fn try_wait(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().expect("read the process status")
    }

    /// Send `signal` (`STOP`, `CONT`, `TERM`, …) to the process.
    pub fn signal(&self, signal: &str) {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .args([&format!("-{signal}"), &pid.to_string()])
                .status();
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
