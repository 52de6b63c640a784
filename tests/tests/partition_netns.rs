//! Partition safety on the lease path, with real processes and a real network cut (issue 12,
//! item 8): three shop nodes of the example application, each in its own network namespace,
//! joined by veth pairs to a hub namespace whose bridge also carries a private etcd — the
//! singleton lease's backend, so it is reachable only from the side of a cut that still has
//! the hub. The test cuts the singleton host's link and heals it, 20 times: every other cut is
//! longer than failure detection, downing and the lease's TTL (the isolated host loses its lease
//! and fences, the majority elects a new host that acquires once the lease expired), the others
//! shorter (nothing should move). A node that fenced is restarted after the heal, as a kubelet
//! would.
//!
//! Judged from the singleton instances' own start and stop records (`--instance-log`): never
//! two alive at once; the no-instance window of every move is measured and printed.
//!
//! Everything it makes it removes: namespaces `tp<pid>-{hub,a,b,c}` (deleting a namespace
//! deletes its veths); it never touches the host's own namespace or interfaces. Without the
//! right to create network namespaces (not root) it skips, saying why.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use troupe_e2e::rolling::{Instance, TempDir, instances, overlap};
use troupe_e2e::{Process, example};

const SECRET: &str = "e2e partition secret, long enough";
const WAIT: Duration = Duration::from_secs(60);
const SUBNET: &str = "10.77.0";
const PORT: u16 = 2552;
const CUTS: usize = 20;
const LONG_CUT: Duration = Duration::from_secs(7);
const SHORT_CUT: Duration = Duration::from_millis(1_000);

fn ip(args: &[&str]) -> Result<(), String> {
    let output = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run ip: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

/// The test's namespaces and links; removed when dropped.
struct Net {
    prefix: String,
    nodes: Vec<String>,
}

impl Net {
    fn hub(&self) -> String {
        format!("{}-hub", self.prefix)
    }

    /// The namespace of node `i` and its address.
    fn node(&self, i: usize) -> (&str, String) {
        (&self.nodes[i], format!("{SUBNET}.{}", 11 + i))
    }

    /// Make the hub (bridge `br0` at `.1`) and `n` node namespaces, each linked to the hub.
    /// First removes what an earlier run killed before its cleanup left behind (namespaces
    /// `tp<pid>-…` of processes that are gone).
    fn create(n: usize) -> Result<Self, String> {
        remove_stale();
        let prefix = format!("tp{}", std::process::id());
        let net = Self {
            prefix: prefix.clone(),
            nodes: Vec::new(),
        };
        let hub = net.hub();
        ip(&["netns", "add", &hub])?;
        let mut net = net;
        ip(&["-n", &hub, "link", "set", "lo", "up"])?;
        ip(&["-n", &hub, "link", "add", "br0", "type", "bridge"])?;
        ip(&[
            "-n",
            &hub,
            "addr",
            "add",
            &format!("{SUBNET}.1/24"),
            "dev",
            "br0",
        ])?;
        ip(&["-n", &hub, "link", "set", "br0", "up"])?;
        for i in 0..n {
            let ns = format!(
                "{prefix}-{}",
                char::from(b'a' + u8::try_from(i).unwrap_or(0))
            );
            ip(&["netns", "add", &ns])?;
            net.nodes.push(ns.clone());
            let port = format!("hub{i}");
            // Both ends are made inside the test's namespaces, never in the host's.
            ip(&[
                "-n", &hub, "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns",
                &ns,
            ])?;
            ip(&["-n", &hub, "link", "set", &port, "master", "br0"])?;
            ip(&["-n", &hub, "link", "set", &port, "up"])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
            ip(&[
                "-n",
                &ns,
                "addr",
                "add",
                &format!("{SUBNET}.{}/24", 11 + i),
                "dev",
                "eth0",
            ])?;
            ip(&["-n", &ns, "link", "set", "eth0", "up"])?;
        }
        Ok(net)
    }

    /// Cut (or heal) node `i`'s link to the hub: it loses the other nodes and etcd.
    fn set_link(&self, i: usize, up: bool) {
        ip(&[
            "-n",
            &self.hub(),
            "link",
            "set",
            &format!("hub{i}"),
            if up { "up" } else { "down" },
        ])
        .expect("set the hub port");
    }
}

/// Delete the namespaces `tp<pid>-…` whose test process `pid` no longer runs.
fn remove_stale() {
    let Ok(entries) = std::fs::read_dir("/run/netns") else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix("tp")
            .and_then(|rest| rest.split_once('-'))
            .and_then(|(pid, _)| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = ip(&["netns", "del", &name]);
        }
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for ns in self.nodes.iter().chain([&self.hub()]) {
            let _ = ip(&["netns", "del", ns]);
        }
    }
}

/// `ip netns exec <ns> <program> <args>`.
fn in_ns(ns: &str, program: &Path, args: &[String]) -> Process {
    let mut all: Vec<String> = vec![
        "netns".into(),
        "exec".into(),
        ns.into(),
        program.display().to_string(),
    ];
    all.extend_from_slice(args);
    Process::start(&PathBuf::from("ip"), &all)
}

struct Node {
    ns: String,
    address: String,
    process: Process,
    fenced: usize,
}

fn shop_args(address: &str, seeds: &str, log: &Path, etcd: &str) -> Vec<String> {
    [
        "--system",
        "part",
        "--bind",
        &format!("{address}:{PORT}"),
        "--seed",
        seeds,
        "--secret",
        SECRET,
        "--role",
        "shop",
        "--management-bind",
        &format!("{address}:8558"),
        "--down-after-ms",
        "1500",
        "--singleton-lease",
        "etcd",
        "--directory",
        "none",
        "--etcd-endpoints",
        etcd,
        "--etcd-prefix",
        &format!("/troupe/partition-{}/", std::process::id()),
        "--singleton-lease-ttl-ms",
        "3000",
        "--singleton-lease-renew-ms",
        "1000",
        "--singleton-lease-retry-ms",
        "500",
        "--leave-timeout-ms",
        "2000",
        "--flush-timeout-ms",
        "500",
        "--events-json",
        "--instance-log",
        &log.display().to_string(),
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect()
}

/// The instance alive now (the last one started without a stop record).
fn alive(log: &Path) -> Option<Instance> {
    instances(log)
        .into_iter()
        .rev()
        .find(|i| i.stop_us.is_none())
}

/// Wait until an instance is alive on a node that is not `not_on` (any node when `None`).
async fn wait_alive(log: &Path, not_on: Option<&str>, within: Duration) -> Option<Instance> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(instance) = alive(log)
            && not_on.is_none_or(|host| !instance.host.starts_with(host))
        {
            return Some(instance);
        }
        if Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Wait until one instance has stayed alive for two seconds (the cluster settled after a heal:
/// joins done, hand-overs back to the first node finished); that instance.
async fn settled(log: &Path) -> Instance {
    let deadline = Instant::now() + WAIT;
    loop {
        let instance = wait_alive(log, None, WAIT)
            .await
            .expect("an instance starts after the heal");
        tokio::time::sleep(Duration::from_secs(2)).await;
        if alive(log).as_ref() == Some(&instance) {
            return instance;
        }
        assert!(Instant::now() < deadline, "the singleton never settled");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cutting_the_singleton_host_off_twenty_times_never_runs_two_instances() {
    let net = match Net::create(3) {
        Ok(net) => net,
        Err(error) => {
            // Only a missing right to make namespaces skips; anything else is a failure.
            let uid = Command::new("id").arg("-u").output().map_or_else(
                |_| String::new(),
                |o| String::from_utf8_lossy(&o.stdout).trim().to_owned(),
            );
            assert_ne!(
                uid, "0",
                "as root, the namespaces must be creatable: {error}"
            );
            println!("SKIPPED: network namespaces cannot be created here (not root): {error}");
            return;
        }
    };
    let shop = example("troupe-agent", "shop");
    let dir = TempDir::new("partition");
    let log = dir.0.join("instances.jsonl");
    let etcd_url = format!("http://{SUBNET}.1:2379");
    let mut etcd = in_ns(
        &net.hub(),
        Path::new("/usr/bin/etcd"),
        &[
            "--name".into(),
            "partition".into(),
            "--data-dir".into(),
            dir.0.join("etcd").display().to_string(),
            "--listen-client-urls".into(),
            etcd_url.clone(),
            "--advertise-client-urls".into(),
            etcd_url.clone(),
            "--listen-peer-urls".into(),
            "http://127.0.0.1:2380".into(),
            "--log-level".into(),
            "warn".into(),
        ],
    );
    let etcd_ready = (0..200).any(|_| {
        std::thread::sleep(Duration::from_millis(100));
        Command::new("ip")
            .args([
                "netns",
                "exec",
                &net.hub(),
                "etcdctl",
                "--endpoints",
                &etcd_url,
            ])
            .args(["endpoint", "health"])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    assert!(etcd_ready, "the private etcd never became healthy");

    let seeds = (0..3)
        .map(|i| format!("troupe://part@{}:{PORT}", net.node(i).1))
        .collect::<Vec<_>>()
        .join(",");
    let mut nodes: Vec<Node> = (0..3)
        .map(|i| {
            let (ns, address) = net.node(i);
            Node {
                ns: ns.to_owned(),
                process: in_ns(ns, &shop, &shop_args(&address, &seeds, &log, &etcd_url)),
                address,
                fenced: 0,
            }
        })
        .collect();
    for node in &mut nodes {
        node.process
            .wait_for(WAIT, "SelfUp", |l| l["event"] == "SelfUp")
            .await;
    }
    assert!(
        wait_alive(&log, None, WAIT).await.is_some(),
        "no singleton instance started"
    );

    let began = Instant::now();
    let mut long_cuts = 0;
    for cut in 0..CUTS {
        let host = settled(&log).await.host;
        println!(
            "cut {cut} ({}) of the host {host} at {:.1} s",
            if cut % 2 == 0 { "long" } else { "short" },
            began.elapsed().as_secs_f64()
        );
        let i = nodes
            .iter()
            .position(|n| host.starts_with(&format!("{}:", n.address)))
            .expect("the host is one of the nodes");
        let long = cut % 2 == 0;
        net.set_link(i, false);
        tokio::time::sleep(if long { LONG_CUT } else { SHORT_CUT }).await;
        if long {
            long_cuts += 1;
            // The majority side took over while the host was cut off.
            assert!(
                wait_alive(&log, Some(&nodes[i].address), WAIT)
                    .await
                    .is_some(),
                "cut {cut}: no instance started on the majority side"
            );
        }
        net.set_link(i, true);
        if long {
            // The cut-off host was downed by the majority: it fences and exits 3.
            let status = nodes[i].process.wait(WAIT).await;
            assert_eq!(
                status.code(),
                Some(3),
                "cut {cut}: the isolated host {} fences",
                nodes[i].address
            );
        }
        // A node that fenced is started again, as a kubelet would, once healed.
        for node in &mut nodes {
            if let Some(status) = node.process.try_wait() {
                assert_eq!(
                    status.code(),
                    Some(3),
                    "cut {cut}: {} exited other than fenced",
                    node.address
                );
                node.fenced += 1;
                node.process = in_ns(
                    &node.ns,
                    &shop,
                    &shop_args(&node.address, &seeds, &log, &etcd_url),
                );
                node.process
                    .wait_for(WAIT, "SelfUp", |l| l["event"] == "SelfUp")
                    .await;
            }
        }
        assert!(
            wait_alive(&log, None, WAIT).await.is_some(),
            "cut {cut}: no instance after the heal"
        );
    }
    let elapsed = began.elapsed();
    for node in &mut nodes {
        let status = node.process.terminate(WAIT).await;
        assert!(status.code().is_some(), "{} did not stop", node.address);
    }
    etcd.kill().await;

    let all = instances(&log);
    let open: Vec<&Instance> = all.iter().filter(|i| i.stop_us.is_none()).collect();
    assert!(open.is_empty(), "instances without a stop record: {open:?}");
    // The no-instance window of every move, from one instance's stop to the next one's start,
    // by kind: a failover away from the cut-off host (waits out the lease's TTL), a hand-back to
    // the first node once it rejoined, a re-acquire on the same node (a short cut failed a
    // renewal, so the holder let the lease go and took it again).
    let mut windows: [(&str, Vec<Duration>); 3] = [
        ("failover", Vec::new()),
        ("hand-back", Vec::new()),
        ("same node", Vec::new()),
    ];
    let first = format!("{}:{PORT}", nodes[0].address);
    for pair in all.windows(2) {
        let window = Duration::from_micros(
            u64::try_from(
                pair[1]
                    .start_us
                    .saturating_sub(pair[0].stop_us.unwrap_or(0)),
            )
            .unwrap_or(u64::MAX),
        );
        let kind = if pair[0].host == pair[1].host {
            2
        } else if pair[1].host == first {
            1
        } else {
            0
        };
        windows[kind].1.push(window);
    }
    let fenced: usize = nodes.iter().map(|n| n.fenced).sum();
    let longest_overlap = overlap(&all);
    let summary: Vec<String> = windows
        .iter_mut()
        .map(|(kind, list)| {
            list.sort();
            let at = |p: usize| {
                list.get(list.len().saturating_sub(1) * p / 100)
                    .map_or(0.0, Duration::as_secs_f64)
            };
            format!(
                "{kind} ×{}: min {:.2} s, median {:.2} s, max {:.2} s",
                list.len(),
                at(0),
                at(50),
                at(100)
            )
        })
        .collect();
    println!(
        "partition (netns): {CUTS} cuts ({long_cuts} of {LONG_CUT:?}, {} of {SHORT_CUT:?}) in {:.1} s; \
         {} instances, {fenced} fenced restarts; two alive together: {:.3} s; \
         no-instance window — {}",
        CUTS - long_cuts,
        elapsed.as_secs_f64(),
        all.len(),
        longest_overlap.as_secs_f64(),
        summary.join("; "),
    );
    assert_eq!(
        longest_overlap,
        Duration::ZERO,
        "two singleton instances were alive at once: {all:#?}"
    );
    assert!(
        all.len() > long_cuts,
        "the singleton moved on every long cut: {} instances for {long_cuts} long cuts",
        all.len()
    );
    drop(net);
}
