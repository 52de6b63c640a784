//! A client that nobody here wrote checks the stand-in API server's wire format: the real
//! `kubectl` (Debian's `kubernetes-client`, or whichever `kubectl` is on `PATH`; `TROUPE_KUBECTL`
//! names others, colon-separated) reads the Leases that real `troupe-agent --membership
//! kubernetes` processes wrote — `get leases -o json`, the default table (server-side printing),
//! one Lease by name, a bounded `get leases --watch` (Table events under one header), and a
//! bounded `get leases --watch -o json` that sees the renewals arrive
//! in `resourceVersion` order and a leaving agent's Lease marked and deleted.
//!
//! `kubectl` runs with no kubeconfig (`KUBECONFIG` points at a missing file) and a private
//! discovery cache, so each run discovers the API afresh.

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use troupe_e2e::{Process, binary, free_port};
use troupe_kubernetes::standin::StandIn;

const SECRET: &str = "e2e kubectl secret, long enough";
const WAIT: Duration = Duration::from_secs(30);

/// The `kubectl` binaries to check: `TROUPE_KUBECTL` (colon-separated) and the one on `PATH`.
fn kubectls() -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::env::var("TROUPE_KUBECTL")
        .unwrap_or_default()
        .split(':')
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .collect();
    if let Some(on_path) = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("kubectl"))
            .find(|candidate| candidate.is_file())
    }) {
        found.push(on_path);
    }
    assert!(
        !found.is_empty(),
        "no kubectl: install Debian's kubernetes-client (scripts/test does) or set TROUPE_KUBECTL"
    );
    found
}

/// A private kubeconfig (absent) and discovery cache for one `kubectl`.
struct Home(PathBuf);

impl Home {
    fn new(tag: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "troupe-kubectl-{tag}-{}-{}",
            std::process::id(),
            free_port()
        ));
        std::fs::create_dir_all(&dir).expect("kubectl home");
        Self(dir)
    }

    fn command(&self, kubectl: &PathBuf, standin: &StandIn, args: &[&str]) -> Command {
        let mut command = Command::new(kubectl);
        command
            .env("KUBECONFIG", self.0.join("no-kubeconfig"))
            .env("HOME", &self.0)
            .arg("--server")
            .arg(standin.url())
            .arg("--cache-dir")
            .arg(self.0.join("cache"))
            .args(args);
        command
    }

    /// Run `kubectl args` to completion (bounded); its stdout, or a panic with its stderr.
    fn run(&self, kubectl: &PathBuf, standin: &StandIn, args: &[&str]) -> String {
        let mut child = self
            .command(kubectl, standin, args)
            .arg("--request-timeout=20s")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("run {}: {e}", kubectl.display()));
        let mut stdout = child.stdout.take().expect("stdout");
        let mut stderr = child.stderr.take().expect("stderr");
        let err = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            text
        });
        let out = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = stdout.read_to_string(&mut text);
            text
        });
        let deadline = std::time::Instant::now() + WAIT;
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait for kubectl") {
                break status;
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                panic!("kubectl {args:?} did not finish within {WAIT:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let (out, err) = (
            out.join().expect("stdout reader"),
            err.join().expect("stderr reader"),
        );
        assert!(
            status.success(),
            "{} {args:?} failed ({status}): {err}",
            kubectl.display()
        );
        out
    }
}

impl Drop for Home {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A `troupe-agent --membership kubernetes` of cluster `system` on `standin`.
struct Agent {
    process: Process,
    management: u16,
    lease: String,
}

impl Agent {
    async fn start(standin: &StandIn, system: &str) -> Self {
        let management = free_port();
        let args: Vec<String> = [
            "--system",
            system,
            "--bind",
            &format!("127.0.0.1:{}", free_port()),
            "--secret",
            SECRET,
            "--membership",
            "kubernetes",
            "--kube-api-url",
            &standin.url(),
            "--kube-namespace",
            "default",
            "--membership-ttl-ms",
            "3000",
            "--membership-renew-ms",
            "400",
            "--events-json",
            "--management-bind",
            &format!("127.0.0.1:{management}"),
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        let mut process = Process::start_capturing_stderr(&binary("troupe-agent"), &args);
        let started = process
            .wait_for(WAIT, "AgentStarted", |l| l["event"] == "AgentStarted")
            .await;
        let incarnation = started["incarnation"].as_u64().expect("incarnation");
        let agent = Self {
            process,
            management,
            lease: format!("{system}-{incarnation:016x}"),
        };
        agent.wait_ready().await;
        agent
    }

    async fn wait_ready(&self) {
        let url = format!("http://127.0.0.1:{}/_troupe/health/ready", self.management);
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            if let Ok(response) = reqwest::get(&url).await
                && response.status().as_u16() == 200
            {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "agent {} never ready: {:?}",
                self.lease,
                self.process.stderr_lines()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

async fn three_agents(standin: &StandIn, system: &str) -> Vec<Agent> {
    let mut agents = Vec::new();
    for _ in 0..3 {
        agents.push(Agent::start(standin, system).await);
    }
    agents
}

fn sorted(mut names: Vec<String>) -> Vec<String> {
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_leases_reads_the_leases_real_agents_wrote_as_json_and_as_a_table() {
    let standin = StandIn::start().await.expect("stand-in API server");
    let agents = three_agents(&standin, "kubectl-get").await;
    let expected = sorted(agents.iter().map(|a| a.lease.clone()).collect());
    for kubectl in kubectls() {
        let home = Home::new("get");
        let ctl = kubectl.display().to_string();

        let list: Value =
            serde_json::from_str(&home.run(&kubectl, &standin, &["get", "leases", "-o", "json"]))
                .expect("kubectl -o json prints JSON");
        assert_eq!(list["kind"], "List", "{ctl}: {list}");
        let items = list["items"].as_array().expect("items");
        let names = sorted(
            items
                .iter()
                .map(|i| i["metadata"]["name"].as_str().unwrap_or("").to_owned())
                .collect(),
        );
        assert_eq!(names, expected, "{ctl}: {list}");
        for item in items {
            assert_eq!(item["kind"], "Lease", "{ctl}: {item}");
            assert_eq!(
                item["apiVersion"], "coordination.k8s.io/v1",
                "{ctl}: {item}"
            );
            assert_eq!(
                item["metadata"]["labels"]["troupe.dev/cluster"], "kubectl-get",
                "{ctl}: {item}"
            );
            let holder = item["spec"]["holderIdentity"].as_str().unwrap_or("");
            assert!(holder.contains("@127.0.0.1:"), "{ctl}: holder {holder:?}");
            assert!(item["spec"]["renewTime"].is_string(), "{ctl}: {item}");
            assert!(
                item["metadata"]["resourceVersion"].is_string(),
                "{ctl}: {item}"
            );
        }

        // One Lease by name, as the API server stores it.
        let one: Value = serde_json::from_str(&home.run(
            &kubectl,
            &standin,
            &["get", "lease", &agents[1].lease, "-o", "json"],
        ))
        .expect("kubectl -o json prints JSON");
        assert_eq!(one["metadata"]["name"], agents[1].lease.as_str(), "{ctl}");
        assert_eq!(one["kind"], "Lease", "{ctl}");

        // The default output: a Table the stand-in printed, with the real server's columns.
        let table = home.run(&kubectl, &standin, &["get", "leases"]);
        let mut lines = table.lines();
        let header: Vec<&str> = lines.next().unwrap_or("").split_whitespace().collect();
        assert_eq!(header, ["NAME", "HOLDER", "AGE"], "{ctl}: {table}");
        let rows: Vec<Vec<&str>> = lines.map(|l| l.split_whitespace().collect()).collect();
        assert_eq!(
            sorted(rows.iter().map(|r| r[0].to_owned()).collect()),
            expected,
            "{ctl}: {table}"
        );
        for row in &rows {
            assert_eq!(row.len(), 3, "{ctl}: {table}");
            assert!(row[1].contains("@127.0.0.1:"), "{ctl}: {table}");
            assert!(
                row[2].ends_with('s') || row[2].ends_with('m'),
                "{ctl}: {table}"
            );
        }
    }
    // kubectl discovered the API and asked for server-side printing; the stand-in answered both.
    let requests = standin.requests();
    for path in ["/api", "/apis"] {
        assert!(
            requests.iter().any(|r| r.path == path && r.status == 200),
            "no discovery at {path}: {requests:#?}"
        );
    }
    // A kubectl that asks for aggregated discovery first (1.26+) gets it; older ones get the
    // legacy lists.
    for r in requests
        .iter()
        .filter(|r| r.path == "/api" || r.path == "/apis")
    {
        let aggregated_first = r
            .accept
            .split(',')
            .find(|m| m.trim().starts_with("application/json"))
            .is_some_and(|m| m.contains("as=APIGroupDiscoveryList"));
        assert_eq!(
            r.content_type.contains("as=APIGroupDiscoveryList"),
            aggregated_first,
            "{r:?}"
        );
        println!(
            "discovery {} for {:?}: {}",
            r.path, r.accept, r.content_type
        );
    }
    assert!(
        requests.iter().any(|r| r.path.ends_with("/leases")
            && r.method == "GET"
            && r.content_type.contains("as=Table")),
        "kubectl never got a Table: {requests:#?}"
    );
    assert!(
        requests
            .iter()
            .all(|r| r.status < 400 || r.path.contains("/leases/")),
        "a request kubectl made was refused: {requests:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_watch_sees_renewals_in_resource_version_order_and_a_leaving_agents_lease_go() {
    let standin = StandIn::start().await.expect("stand-in API server");
    let mut agents = three_agents(&standin, "kubectl-watch").await;
    let kubectls = kubectls();
    let homes: Vec<Home> = kubectls.iter().map(|_| Home::new("watch")).collect();
    // Every kubectl watches, each printing its events on its own pipe.
    // And the default output of a watch: Table events, printed as rows under one header.
    let mut tables = Vec::new();
    for (kubectl, home) in kubectls.iter().zip(&homes) {
        let mut child = home
            .command(kubectl, &standin, &["get", "leases", "--watch"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start kubectl --watch");
        let mut stdout = child.stdout.take().expect("stdout");
        let text = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = stdout.read_to_string(&mut text);
            text
        });
        tables.push((kubectl.display().to_string(), child, text));
    }
    let mut watches = Vec::new();
    for (kubectl, home) in kubectls.iter().zip(&homes) {
        let mut child = home
            .command(
                kubectl,
                &standin,
                &[
                    "get",
                    "leases",
                    "--watch",
                    "-o",
                    "json",
                    "--output-watch-events",
                ],
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start kubectl --watch");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel::<Value>();
        std::thread::spawn(move || {
            for value in serde_json::Deserializer::from_reader(stdout).into_iter::<Value>() {
                let Ok(value) = value else { return };
                if tx.send(value).is_err() {
                    return;
                }
            }
        });
        watches.push((
            kubectl.display().to_string(),
            child,
            rx,
            Vec::<Value>::new(),
        ));
    }
    let collect = |watches: &mut Vec<(
        String,
        std::process::Child,
        std::sync::mpsc::Receiver<Value>,
        Vec<Value>,
    )>| {
        for (_, _, rx, seen) in watches.iter_mut() {
            seen.extend(rx.try_iter());
        }
    };
    let modified_of = |seen: &[Value], lease: &str| {
        seen.iter()
            .filter(|e| e["type"] == "MODIFIED" && e["object"]["metadata"]["name"] == lease)
            .count()
    };
    // Renewals arrive: at least three per Lease on every watch (bounded).
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        collect(&mut watches);
        let done = watches
            .iter()
            .all(|(_, _, _, seen)| agents.iter().all(|a| modified_of(seen, &a.lease) >= 3));
        if done {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "renewals never reached every watch: {:#?}",
            watches
                .iter()
                .map(|(c, _, _, s)| (c, s.len()))
                .collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // One agent leaves (SIGTERM): its Lease is deleted, and every watch sees it go.
    let leaving = agents.remove(0);
    let mut process = leaving.process;
    let status = process.terminate(WAIT).await;
    assert_eq!(status.code(), Some(0), "a graceful leave exits 0");
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        collect(&mut watches);
        let gone = watches.iter().all(|(_, _, _, seen)| {
            seen.iter().any(|e| {
                e["type"] == "DELETED" && e["object"]["metadata"]["name"] == leaving.lease.as_str()
            })
        });
        if gone {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the leaving agent's Lease {} was never seen deleted",
            leaving.lease
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    for (ctl, mut child, text) in tables {
        let _ = child.kill();
        let _ = child.wait();
        let text = text.join().expect("stdout reader");
        let header: Vec<&str> = text
            .lines()
            .next()
            .unwrap_or("")
            .split_whitespace()
            .collect();
        assert_eq!(header, ["NAME", "HOLDER", "AGE"], "{ctl}: {text}");
        for lease in agents.iter().map(|a| &a.lease).chain([&leaving.lease]) {
            assert!(
                text.lines().skip(1).any(|l| l.starts_with(lease.as_str())),
                "{ctl}: no row for {lease}: {text}"
            );
        }
        assert!(
            text.lines()
                .skip(1)
                .all(|l| l.split_whitespace().count() == 3),
            "{ctl}: {text}"
        );
    }
    for (ctl, mut child, _, seen) in watches {
        let _ = child.kill();
        let _ = child.wait();
        // First the list (every Lease ADDED), then the watch from the list's resourceVersion:
        // every later event's resourceVersion is above the one before.
        let added: Vec<&str> = seen
            .iter()
            .take_while(|e| e["type"] == "ADDED")
            .filter_map(|e| e["object"]["metadata"]["name"].as_str())
            .collect();
        assert_eq!(
            added.len(),
            3,
            "{ctl}: the watch starts with the list: {seen:#?}"
        );
        let versions: Vec<u64> = seen[3..]
            .iter()
            .map(|e| {
                e["object"]["metadata"]["resourceVersion"]
                    .as_str()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or_else(|| panic!("{ctl}: no resourceVersion in {e}"))
            })
            .collect();
        assert!(
            versions.windows(2).all(|w| w[0] < w[1]),
            "{ctl}: resourceVersions out of order: {versions:?}"
        );
        for event in &seen {
            assert_eq!(event["object"]["kind"], "Lease", "{ctl}: {event}");
        }
        // The leaving agent marked its Lease before deleting it.
        let last_of_leaving: Vec<&Value> = seen
            .iter()
            .filter(|e| e["object"]["metadata"]["name"] == leaving.lease.as_str())
            .collect();
        assert_eq!(
            last_of_leaving.last().map(|e| e["type"].clone()),
            Some(Value::from("DELETED")),
            "{ctl}"
        );
    }
    // The watches resumed from the list's resourceVersion rather than replaying everything.
    let requests = standin.requests();
    assert!(
        requests
            .iter()
            .any(|r| r.query.contains("watch=") && r.query.contains("resourceVersion=")),
        "kubectl watched without a resourceVersion: {requests:#?}"
    );
    for mut agent in agents {
        agent.process.kill().await;
    }
}
