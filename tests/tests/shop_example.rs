//! The example application (`cargo run -p troupe-agent --example shop`) as a user runs it: two
//! shop nodes and a client node, each the example's binary embedding the agent through
//! `Agent::builder`. The client's asks through the router reach the `Stock` actor on both shop
//! nodes and every ask through the singleton's proxy is answered by one instance; the instance
//! records its start (and its stop, if it moved while the cluster formed); SIGTERM ends every node with exit 0.

use std::time::Duration;

use troupe_e2e::{Process, example, free_port};

const SECRET: &str = "e2e shop example secret, long enough";
const WAIT: Duration = Duration::from_secs(60);

struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn node_args(port: u16, seed: u16, role: &str) -> Vec<String> {
    [
        "--system",
        "shop",
        "--bind",
        &format!("127.0.0.1:{port}"),
        "--seed",
        &format!("troupe://shop@127.0.0.1:{seed}"),
        "--secret",
        SECRET,
        "--role",
        role,
        "--management-bind",
        "127.0.0.1:0",
        "--events-json",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shop_example_serves_asks_through_its_router_and_its_singleton() {
    let shop = example("troupe-agent", "shop");
    let dir = TempDir(std::env::temp_dir().join(format!(
        "troupe-shop-{}-{}",
        std::process::id(),
        free_port()
    )));
    std::fs::create_dir_all(&dir.0).unwrap();
    let ports = [free_port(), free_port(), free_port()];
    let mut shops: Vec<Process> = Vec::new();
    for (i, port) in ports[..2].iter().enumerate() {
        let mut args = node_args(*port, ports[0], "shop");
        args.extend([
            "--instance-log".to_owned(),
            dir.0
                .join(format!("instances-{i}.jsonl"))
                .display()
                .to_string(),
        ]);
        shops.push(Process::start(&shop, &args));
    }
    for node in &mut shops {
        node.wait_for(WAIT, "SelfUp", |l| l["event"] == "SelfUp")
            .await;
    }
    let mut args = node_args(ports[2], ports[0], "client");
    args.extend(["--load-rate", "100", "--load-seconds", "4"].map(str::to_owned));
    let mut client = Process::start(&shop, &args);
    let totals = client
        .wait_for(WAIT, "LoadTotals", |l| l["event"] == "LoadTotals")
        .await;
    let sent = totals["router"]["sent"].as_u64().unwrap();
    assert!(sent >= 300, "{totals}");
    assert_eq!(
        totals["router"]["ok"], sent,
        "every routed ask answered: {totals}"
    );
    assert_eq!(
        totals["singleton"]["ok"], totals["singleton"]["sent"],
        "{totals}"
    );
    assert_eq!(
        totals["duplicate_numbers"], 0,
        "no order number handed out twice: {totals}"
    );
    let served: Vec<&str> = totals["router_nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    let mut shop_nodes: Vec<String> = ports[..2]
        .iter()
        .map(|p| format!("127.0.0.1:{p}"))
        .collect();
    shop_nodes.sort();
    assert_eq!(
        served, shop_nodes,
        "round robin over both shop nodes: {totals}"
    );
    let instances = totals["singleton_instances"].as_array().unwrap();
    assert_eq!(
        instances.len(),
        1,
        "one singleton instance answered: {totals}"
    );
    let (host, incarnation) = instances[0].as_str().unwrap().split_once('#').unwrap();
    assert!(shop_nodes.iter().any(|n| n == host), "{totals}");
    // The instance recorded its start in the log of the node that hosts it. The two shop nodes
    // start together, so the singleton may first start on the node that is up first and move
    // to the lower address once that one is up too (the election rule): then the earlier
    // instance recorded its stop before the answering one started. Never two at once.
    let mut records: Vec<serde_json::Value> = (0..2)
        .flat_map(|i| {
            std::fs::read_to_string(dir.0.join(format!("instances-{i}.jsonl")))
                .unwrap_or_default()
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect::<Vec<_>>()
        })
        .collect();
    let at = |r: &serde_json::Value| -> u64 { r["at_us"].as_str().unwrap().parse().unwrap() };
    records.sort_by_key(at);
    assert_eq!(
        records.len() % 2,
        1,
        "starts and stops alternate: {records:?}"
    );
    for (i, record) in records.iter().enumerate() {
        let expected = if i % 2 == 0 { "start" } else { "stop" };
        assert_eq!(record["event"], expected, "{records:?}");
        if i % 2 == 1 {
            assert_eq!(
                (&record["host"], &record["incarnation"]),
                (&records[i - 1]["host"], &records[i - 1]["incarnation"]),
                "a stop ends the instance started just before it: {records:?}"
            );
        }
    }
    assert!(
        records.len() <= 3,
        "at most one move while forming: {records:?}"
    );
    let last = records.last().unwrap();
    assert_eq!(last["host"], host, "{records:?}");
    assert_eq!(last["incarnation"], incarnation, "{records:?}");

    for node in shops.iter_mut().chain([&mut client]) {
        let status = node.terminate(WAIT).await;
        assert!(status.success(), "a shop node leaves with exit 0: {status}");
    }
}
