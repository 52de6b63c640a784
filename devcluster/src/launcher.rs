//! The async shell around [`crate::supervisor`]: starts the processes, watches them, polls the
//! API for readiness, forwards SIGINT and SIGTERM as an orderly stop, and prints the banner.
//!
//! # Processes
//! ```text
//! troupe-dev                    this launcher; Ctrl-C reaches only it
//! ├── troupe-server             own process group; SQLite in --data-dir
//! ├── troupe-agent (agent-1)    own process group; the seed
//! ├── troupe-agent (agent-2)
//! └── …
//! ```
//! Each child runs in its own process group, so a Ctrl-C in the terminal reaches only the
//! launcher, which stops the agents first and the server last. Each child's stdout and stderr
//! go to `<data-dir>/logs/<child>.log`. Should the launcher itself die, its children are sent
//! SIGKILL when their handles drop (`kill_on_drop`); a SIGKILL of the launcher cannot be caught,
//! and then the banner's process ids are what to stop.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use rustix::process::{Pid, Signal, kill_process};
use tokio::process::Command;
use tokio::sync::mpsc;

use crate::config::Config;
use crate::supervisor::{self, Action, Child, Event, Exit, Phase, Settings, State};

/// The port the control plane gets when it is free and `--port` is not given.
pub const PREFERRED_PORT: u16 = 8080;

/// Why the launcher could not start anything.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// A binary is missing.
    #[error(
        "{name} not found at {}: build it first (`cargo build -p troupe-server -p troupe-agent -p troupe-dev`, or run `scripts/dev`), or point --bin-dir at it",
        path.display()
    )]
    MissingBinary {
        /// The binary's name.
        name: &'static str,
        /// Where it was looked for.
        path: PathBuf,
    },
    /// `--port` names a port that is taken.
    #[error(
        "port {port} on 127.0.0.1 is in use: pick another with --port, or leave --port out to get a free one"
    )]
    PortInUse {
        /// The port.
        port: u16,
    },
    /// A file or directory could not be made, or a process not started.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> LaunchError {
    let what = what.into();
    move |source| LaunchError::Io { what, source }
}

/// Everything decided before the first process starts.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The server's binary.
    pub server_bin: PathBuf,
    /// The agents' binary.
    pub agent_bin: PathBuf,
    /// The control plane's port on 127.0.0.1.
    pub port: u16,
    /// Each agent's cluster port on 127.0.0.1; the first is the seed.
    pub agent_ports: Vec<u16>,
    /// Each agent's management port (health probes, `/metrics`) on 127.0.0.1.
    pub management_ports: Vec<u16>,
    /// The cluster's name.
    pub cluster: String,
    /// The SQLite file.
    pub sqlite: PathBuf,
    /// The directory of the log files.
    pub logs: PathBuf,
    /// Whether the agents run the demo workload.
    pub demo: bool,
    /// The ingest token the server expects and the agents send.
    pub ingest_token: String,
    /// The admin token for member operations.
    pub admin_token: String,
    /// The cluster secret.
    pub secret: String,
    /// Lifecycle settings.
    pub settings: Settings,
}

fn port_is_free(port: u16) -> bool {
    TcpListener::bind(("127.0.0.1", port)).is_ok()
}

fn free_port() -> Result<u16, LaunchError> {
    TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(io("finding a free port on 127.0.0.1"))
}

fn random_hex() -> String {
    format!("{:032x}", rand::random::<u128>())
}

impl Plan {
    /// Check the binaries, pick ports, prepare the data directory.
    ///
    /// # Errors
    /// A missing binary, a taken `--port`, a data directory that cannot be made.
    pub fn prepare(config: &Config) -> Result<Self, LaunchError> {
        let bin_dir = match &config.bin_dir {
            Some(dir) => dir.clone(),
            None => std::env::current_exe()
                .map_err(io("locating the launcher's own binary"))?
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_default(),
        };
        let binary = |name: &'static str| {
            let path = bin_dir.join(name);
            if path.is_file() {
                Ok(path)
            } else {
                Err(LaunchError::MissingBinary { name, path })
            }
        };
        let server_bin = binary("troupe-server")?;
        let agent_bin = binary("troupe-agent")?;
        let port = match config.port {
            Some(port) if port_is_free(port) => port,
            Some(port) => return Err(LaunchError::PortInUse { port }),
            None if port_is_free(PREFERRED_PORT) => PREFERRED_PORT,
            None => free_port()?,
        };
        let agent_ports = (0..config.agents)
            .map(|_| free_port())
            .collect::<Result<Vec<_>, _>>()?;
        let management_ports = (0..config.agents)
            .map(|_| free_port())
            .collect::<Result<Vec<_>, _>>()?;
        let logs = config.data_dir.join("logs");
        std::fs::create_dir_all(&logs).map_err(io(format!("creating {}", logs.display())))?;
        let sqlite = config.data_dir.join("control-plane.sqlite");
        if !config.keep_data {
            for suffix in ["", "-wal", "-shm", "-journal"] {
                let mut file = sqlite.clone().into_os_string();
                file.push(suffix);
                match std::fs::remove_file(&file) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(io(format!("removing {}", sqlite.display()))(e)),
                }
            }
        }
        Ok(Self {
            server_bin,
            agent_bin,
            port,
            agent_ports,
            management_ports,
            cluster: config.cluster.clone(),
            sqlite,
            logs,
            demo: !config.no_demo,
            ingest_token: random_hex(),
            admin_token: random_hex(),
            secret: random_hex(),
            settings: Settings {
                agents: usize::from(config.agents),
                startup_timeout: Duration::from_secs(config.startup_timeout_secs),
                stop_grace: Duration::from_secs(config.stop_grace_secs),
            },
        })
    }

    /// The control plane's base URL.
    #[must_use]
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Where `child` logs.
    #[must_use]
    pub fn log_file(&self, child: Child) -> PathBuf {
        self.logs.join(format!("{child}.log"))
    }

    fn command(&self, child: Child) -> Command {
        let mut command = match child {
            Child::Server => {
                let mut c = Command::new(&self.server_bin);
                c.arg("--listen")
                    .arg(format!("127.0.0.1:{}", self.port))
                    .arg("--sqlite-path")
                    .arg(&self.sqlite)
                    .arg("--enable-member-operations")
                    .env("TROUPE_ADMIN_TOKEN", &self.admin_token)
                    // Embedded storage whatever the environment says.
                    .env_remove("DATABASE_URL");
                c
            }
            Child::Agent(n) => {
                let port = self.agent_ports[n - 1];
                let mut c = Command::new(&self.agent_bin);
                c.arg("--system")
                    .arg(&self.cluster)
                    .arg("--bind")
                    .arg(format!("127.0.0.1:{port}"))
                    // Several agents on one machine: each its own management port.
                    .arg("--management-bind")
                    .arg(format!("127.0.0.1:{}", self.management_ports[n - 1]))
                    // Every agent is a seed, the first first: a first agent started again after a
                    // fence joins the others instead of forming a cluster of its own.
                    .arg("--seed")
                    .arg(
                        self.agent_ports
                            .iter()
                            .map(|p| format!("troupe://{}@127.0.0.1:{p}", self.cluster))
                            .collect::<Vec<_>>()
                            .join(","),
                    )
                    .arg("--control-plane")
                    .arg(self.base_url())
                    .arg("--node-name")
                    .arg(child.to_string())
                    .env("TROUPE_CLUSTER_SECRET", &self.secret);
                if self.demo {
                    c.arg("--demo");
                }
                c
            }
        };
        command
            .env("TROUPE_INGEST_TOKEN", &self.ingest_token)
            // Plain text in the log files.
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            // Ctrl-C in the terminal reaches the launcher only; it stops the children in order.
            .process_group(0)
            .kill_on_drop(true);
        command
    }
}

fn describe(status: std::io::Result<ExitStatus>) -> Exit {
    match status {
        Ok(status) => Exit {
            success: status.success(),
            // troupe-agent's exit code for a fenced node (contracts.md).
            fenced: status.code() == Some(3),
            description: match (status.code(), status.signal()) {
                (Some(code), _) => format!("exit code {code}"),
                (None, Some(signal)) => format!("killed by signal {signal}"),
                (None, None) => status.to_string(),
            },
        },
        Err(error) => Exit {
            success: false,
            fenced: false,
            description: format!("could not be waited for: {error}"),
        },
    }
}

/// The last `n` lines of a file (for a child that died at startup).
fn tail(path: &Path, n: usize) -> Vec<String> {
    let Ok(file) = File::open(path) else {
        return Vec::new();
    };
    let lines: Vec<String> = BufReader::new(file).lines().map_while(Result::ok).collect();
    lines[lines.len().saturating_sub(n)..].to_vec()
}

fn say(message: &str) {
    println!("troupe-dev: {message}");
}

/// The running children.
#[derive(Debug, Default)]
struct Children {
    pids: BTreeMap<Child, Pid>,
}

impl Children {
    fn spawn(
        &mut self,
        plan: &Plan,
        child: Child,
        events: &mpsc::UnboundedSender<Event>,
    ) -> Result<(), std::io::Error> {
        // A restarted agent appends to its log: the fence that ended its last life stays there.
        let restarted = self.pids.contains_key(&child);
        let log = File::options()
            .create(true)
            .write(true)
            .append(restarted)
            .truncate(!restarted)
            .open(plan.log_file(child))?;
        let mut process = plan
            .command(child)
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log))
            .spawn()?;
        let pid = process
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .and_then(Pid::from_raw)
            .ok_or_else(|| std::io::Error::other("spawned process has no pid"))?;
        self.pids.insert(child, pid);
        let events = events.clone();
        tokio::spawn(async move {
            let status = process.wait().await;
            let _ = events.send(Event::Exited(child, describe(status)));
        });
        Ok(())
    }

    fn signal(&self, child: Child, signal: Signal) {
        if let Some(pid) = self.pids.get(&child) {
            // ESRCH: it exited and its exit event is on the way.
            let _ = kill_process(*pid, signal);
        }
    }
}

/// Poll `url` until it answers 2xx with a body `ready` accepts, then send `event`.
fn poll_until(
    url: String,
    ready: impl Fn(&serde_json::Value) -> bool + Send + 'static,
    event: Event,
    events: mpsc::UnboundedSender<Event>,
) {
    tokio::spawn(async move {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(2))
            .build()
            .expect("HTTP client");
        loop {
            if let Ok(response) = client.get(&url).send().await
                && response.status().is_success()
                && let Ok(body) = response.json::<serde_json::Value>().await
                && ready(&body)
            {
                let _ = events.send(event);
                return;
            }
            if events.is_closed() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
}

fn banner(plan: &Plan, children: &Children) -> String {
    let base = plan.base_url();
    let cluster = &plan.cluster;
    let mut lines = vec![String::new()];
    lines.push(format!(
        "Troupe dev cluster `{cluster}` is up: the control plane and {} agents.",
        plan.agent_ports.len()
    ));
    if plan.demo {
        lines.extend(
            [
                "Demo workload: a singleton job scheduler sends jobs through a smallest-mailbox",
                "router to a compute worker on every node; every few seconds one job goes to a",
                "retired worker path and becomes a dead letter.",
            ]
            .map(String::from),
        );
    } else {
        lines.push("No workload (--no-demo): membership only.".to_owned());
    }
    lines.push(String::new());
    for (label, path) in [
        ("Dashboard", "/"),
        ("API", "/api/v1"),
        ("API docs", "/api/v1/docs"),
        ("Metrics", "/metrics"),
    ] {
        lines.push(format!("  {label:<12}{base}{path}"));
    }
    lines.push(String::new());
    for (n, port) in plan.agent_ports.iter().enumerate() {
        let child = Child::Agent(n + 1);
        let label = if n == 0 { "Agents" } else { "" };
        let pid = children
            .pids
            .get(&child)
            .map_or_else(String::new, |p| format!("pid {}", p.as_raw_nonzero()));
        let seed = if n == 0 { ", seed" } else { "" };
        lines.push(format!(
            "  {label:<12}{:<9}127.0.0.1:{port:<7}{pid:<11}metrics http://127.0.0.1:{}/metrics{seed}",
            child.to_string(),
            plan.management_ports[n]
        ));
    }
    lines.push(format!(
        "  {:<12}{}/<server|agent-N>.log",
        "Logs",
        plan.logs.display()
    ));
    lines.push(format!(
        "  {:<12}{} (SQLite)",
        "History",
        plan.sqlite.display()
    ));
    lines.push(String::new());
    let tries = [
        format!("curl {base}/api/v1/clusters/{cluster}/members"),
        format!("curl {base}/api/v1/clusters/{cluster}/singletons/job-scheduler"),
        format!("curl {base}/api/v1/clusters/{cluster}/routers"),
        format!("curl '{base}/api/v1/clusters/{cluster}/dead-letters?limit=5'"),
        "kill <an agent's pid>   (it leaves; the singleton and the routers follow)".to_owned(),
    ];
    for (n, line) in tries.iter().enumerate() {
        let label = if n == 0 { "Try" } else { "" };
        lines.push(format!("  {label:<12}{line}"));
    }
    lines.push(format!(
        "  {:<12}{} (member operations: PUT {base}/api/v1/clusters/{cluster}/members/<host:port>)",
        "Admin token", plan.admin_token
    ));
    lines.push(String::new());
    lines.push("Press Ctrl-C to stop everything.".to_owned());
    lines.join("\n")
}

/// Run the cluster until it is stopped; the launcher's exit code.
///
/// # Errors
/// When nothing could be started (see [`Plan::prepare`]) or a signal handler not installed.
pub async fn run(config: &Config) -> Result<i32, LaunchError> {
    let plan = Plan::prepare(config)?;
    let (events_tx, mut events) = mpsc::unbounded_channel();
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut interrupt = signal(SignalKind::interrupt()).map_err(io("handling SIGINT"))?;
        let mut terminate = signal(SignalKind::terminate()).map_err(io("handling SIGTERM"))?;
        let events = events_tx.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = interrupt.recv() => {}
                    _ = terminate.recv() => {}
                }
                if events.send(Event::StopRequested).is_err() {
                    return;
                }
            }
        });
    }
    let started = tokio::time::Instant::now();
    let mut ticks = tokio::time::interval(Duration::from_millis(250));
    let mut state = State::new(plan.settings);
    let mut children = Children::default();
    let mut next = Some(Event::Tick);
    loop {
        let event = match next.take() {
            Some(event) => event,
            None => tokio::select! {
                event = events.recv() => event.unwrap_or(Event::Tick),
                _ = ticks.tick() => Event::Tick,
            },
        };
        if let Event::Exited(child, exit) = &event
            && matches!(state.phase(), Phase::StartingServer | Phase::StartingAgents)
            && !exit.success
        {
            let log = plan.log_file(*child);
            say(&format!("last lines of {}:", log.display()));
            for line in tail(&log, 15) {
                println!("    {line}");
            }
        }
        let (after, actions) = supervisor::step(state, event, started.elapsed());
        state = after;
        for action in actions {
            match action {
                Action::StartServer => {
                    say(&format!(
                        "starting the control plane on {} (SQLite {}; logs in {})",
                        plan.base_url(),
                        plan.sqlite.display(),
                        plan.logs.display()
                    ));
                    if let Err(error) = children.spawn(&plan, Child::Server, &events_tx) {
                        return Err(io(format!("starting {}", plan.server_bin.display()))(error));
                    }
                    poll_until(
                        format!("{}/api/v1/clusters", plan.base_url()),
                        |_| true,
                        Event::ServerReady,
                        events_tx.clone(),
                    );
                }
                Action::StartAgents => {
                    say(&format!(
                        "control plane ready; starting {} agents of cluster `{}`",
                        plan.agent_ports.len(),
                        plan.cluster
                    ));
                    for n in 1..=plan.agent_ports.len() {
                        if let Err(error) = children.spawn(&plan, Child::Agent(n), &events_tx) {
                            // Reported like a child that died at once.
                            let _ = events_tx.send(Event::Exited(
                                Child::Agent(n),
                                Exit {
                                    success: false,
                                    fenced: false,
                                    description: format!("could not be started: {error}"),
                                },
                            ));
                        }
                    }
                    // Only these agents count: with --keep-data, members of an earlier run may
                    // still be listed.
                    let ours: Vec<String> = plan
                        .agent_ports
                        .iter()
                        .map(|port| format!("127.0.0.1:{port}"))
                        .collect();
                    poll_until(
                        format!(
                            "{}/api/v1/clusters/{}/members",
                            plan.base_url(),
                            plan.cluster
                        ),
                        move |body| {
                            body["members"].as_array().is_some_and(|members| {
                                let up = members.iter().filter(|m| {
                                    m["status"] == "up"
                                        && m["node"]
                                            .as_str()
                                            .is_some_and(|n| ours.iter().any(|o| o == n))
                                });
                                up.count() == ours.len()
                            })
                        },
                        Event::ClusterUp,
                        events_tx.clone(),
                    );
                }
                Action::RestartAgent(n) => {
                    if let Err(error) = children.spawn(&plan, Child::Agent(n), &events_tx) {
                        let _ = events_tx.send(Event::Exited(
                            Child::Agent(n),
                            Exit {
                                success: false,
                                fenced: false,
                                description: format!("could not be started again: {error}"),
                            },
                        ));
                    }
                }
                Action::AnnounceUp => println!("{}", banner(&plan, &children)),
                Action::Say(message) => say(&message),
                Action::Terminate(child) => children.signal(child, Signal::TERM),
                Action::Kill(child) => children.signal(child, Signal::KILL),
                Action::Exit(code) => {
                    say(if code == 0 {
                        "stopped; every process exited"
                    } else {
                        "stopped after a failure; every process exited"
                    });
                    return Ok(code);
                }
            }
        }
    }
}
