//! `shop`: an application that embeds the Troupe agent instead of writing its own host.
//!
//! It takes every `troupe-agent` flag (so the Helm chart's environment works unchanged) plus
//! its own, and hands [`Agent::builder`] its own actors:
//!
//! - `Stock` (its own actor type) at `/user/stock` on every node with the role `shop`: answers
//!   `Reserve` asks with the node that served them and what is left.
//! - the router `/user/stock-router`: round-robin over the `Stock` of every up `shop` member.
//! - the singleton `order-numbers` (`OrderNumbers`, role `shop`): hands out increasing order
//!   numbers, guarded by the agent's singleton lease (`--singleton-lease`); with
//!   `--instance-log <file>` every instance appends a `start` and a `stop` record there.
//! - with a directory (`--directory`), each shop node claims its shelf `shelf/<host:port>`
//!   under its unique address, retrying until the claim is won: a node restarted at the same
//!   address wins it once the leader has evicted its previous incarnation.
//!
//! A node with the role `client` hosts none of these: it sends a steady stream of asks through
//! the router and through the singleton's proxy (`--load-rate` of each per second) and prints a
//! `LoadTick` JSON line every second and a `LoadTotals` line when it stops.
//!
//! ```sh
//! export TROUPE_CLUSTER_SECRET='a shared secret, 16 bytes or more'
//! SEED=troupe://shop@127.0.0.1:2551
//! cargo run -p troupe-agent --example shop -- --system shop --bind 127.0.0.1:2551 --seed $SEED --role shop --management-bind 127.0.0.1:0 &
//! cargo run -p troupe-agent --example shop -- --system shop --bind 127.0.0.1:2552 --seed $SEED --role shop --management-bind 127.0.0.1:0 &
//! cargo run -p troupe-agent --example shop -- --system shop --bind 127.0.0.1:2553 --seed $SEED --role client --management-bind 127.0.0.1:0 --load-rate 200
//! ```

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Parser;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use troupe::cluster_router::{ClusterRouter, ClusterRouterOptions};
use troupe::remoting::RemoteMessage;
use troupe::routing::RoutingStrategy;
use troupe::singleton::{ClusterSingleton, SingletonKey, SingletonProxy, StartSingletonOptions};
use troupe::{Actor, ActorError, ActorRef, AskError, Context, Props, ReplyTo};
use troupe_agent::{Agent, AgentConfig, AgentContext, AppError};

/// The role of the nodes that host the shop's actors.
const SHOP: &str = "shop";
/// The role of load-generating nodes.
const CLIENT: &str = "client";
const STOCK_PATH: &str = "/user/stock";
const ROUTER_PATH: &str = "/user/stock-router";
const ORDER_NUMBERS: &str = "order-numbers";

#[derive(Debug, Parser)]
#[command(
    name = "shop",
    about = "The Troupe example shop: the agent, embedded, with its own actors."
)]
struct Args {
    #[command(flatten)]
    agent: AgentConfig,
    /// Append the singleton instance's start and stop records (JSON lines) to this file.
    #[arg(long, env = "SHOP_INSTANCE_LOG")]
    instance_log: Option<PathBuf>,
    /// On a `client` node: asks per second through the router, and as many through the
    /// singleton's proxy.
    #[arg(long, env = "SHOP_LOAD_RATE", default_value_t = 100)]
    load_rate: u32,
    /// On a `client` node: send for this many seconds, then wait for the answers, print the
    /// `LoadTotals` line and keep running until stopped (0: send until stopped).
    #[arg(long, env = "SHOP_LOAD_SECONDS", default_value_t = 0)]
    load_seconds: u64,
    /// On a `client` node: how long an ask may take before it counts as lost, milliseconds.
    #[arg(long, env = "SHOP_ASK_TIMEOUT_MS", default_value_t = 5_000)]
    ask_timeout_ms: u64,
}

// ---------------------------------------------------------------------------------------------
// Stock: the routee on every shop node.

/// Reserve `qty` of `sku`.
#[derive(Debug, Serialize, Deserialize)]
struct Reserve {
    sku: u32,
    qty: u32,
    reply: ReplyTo<Reservation>,
}

impl RemoteMessage for Reserve {
    const MANIFEST: &'static str = "shop.Reserve";
}

/// What a `Stock` answers.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Reservation {
    /// `host:port` of the node that served it.
    node: String,
    /// Units of the SKU reserved on that node so far.
    reserved: u64,
}

#[derive(Debug)]
struct Stock {
    node: String,
    reserved: BTreeMap<u32, u64>,
}

impl Actor for Stock {
    type Msg = Reserve;

    async fn handle(&mut self, msg: Reserve, _ctx: &mut Context<Self>) -> Result<(), ActorError> {
        let reserved = self.reserved.entry(msg.sku).or_default();
        *reserved += u64::from(msg.qty);
        msg.reply.send(Reservation {
            node: self.node.clone(),
            reserved: *reserved,
        });
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// OrderNumbers: the singleton.

/// What the order-number singleton takes.
#[derive(Debug, Serialize, Deserialize)]
enum OrderMsg {
    /// The next order number, and who gave it.
    Next { reply: ReplyTo<OrderNumber> },
}

impl RemoteMessage for OrderMsg {
    const MANIFEST: &'static str = "shop.OrderMsg";
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct OrderNumber {
    number: u64,
    /// `host:port` of the instance's node.
    host: String,
    /// The incarnation of the instance's node: one instance per node incarnation.
    incarnation: u64,
}

#[derive(Debug)]
struct OrderNumbers {
    next: u64,
    host: String,
    incarnation: u64,
    log: Option<PathBuf>,
}

fn now_us() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros())
        .unwrap_or_default()
}

impl OrderNumbers {
    /// One record per instance start and stop, appended in one write so that several
    /// processes can share a file.
    fn record(&self, event: &str) {
        let Some(path) = &self.log else { return };
        let line = format!(
            "{}\n",
            serde_json::json!({
                "event": event,
                "host": self.host,
                "incarnation": self.incarnation.to_string(),
                "at_us": now_us().to_string(),
                "numbers": self.next - 1,
            })
        );
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .and_then(|mut file| {
                file.write_all(line.as_bytes())?;
                file.sync_data()
            });
        if let Err(error) = written {
            tracing::error!(%error, path = %path.display(), "cannot write the instance record");
        }
    }
}

impl Actor for OrderNumbers {
    type Msg = OrderMsg;

    async fn pre_start(&mut self, _ctx: &mut Context<Self>) -> Result<(), ActorError> {
        self.record("start");
        tracing::info!(host = %self.host, "order numbers: this node hosts the singleton");
        Ok(())
    }

    async fn handle(&mut self, msg: OrderMsg, _ctx: &mut Context<Self>) -> Result<(), ActorError> {
        match msg {
            OrderMsg::Next { reply } => {
                reply.send(OrderNumber {
                    number: self.next,
                    host: self.host.clone(),
                    incarnation: self.incarnation,
                });
                self.next += 1;
            }
        }
        Ok(())
    }

    async fn post_stop(&mut self, _ctx: &mut Context<Self>) {
        self.record("stop");
        tracing::info!(host = %self.host, issued = self.next - 1, "order numbers: instance stopped");
    }
}

// ---------------------------------------------------------------------------------------------
// Starting the shop's actors on a node.

fn start_shop(
    ctx: &AgentContext,
    is_shop: bool,
    instance_log: Option<PathBuf>,
) -> Result<(), AppError> {
    let cluster = ctx.cluster();
    let system = ctx.system();
    let remoting = cluster.remoting();
    remoting.register::<Reserve>();
    remoting.register::<OrderMsg>();
    let node = cluster.self_address().host_port();
    let key = SingletonKey::of::<OrderMsg>(ORDER_NUMBERS, SHOP);
    if is_shop {
        let stock_node = node.clone();
        system.spawn(
            STOCK_PATH.trim_start_matches("/user/"),
            Props::new(move || Stock {
                node: stock_node.clone(),
                reserved: BTreeMap::new(),
            }),
        )?;
        ctx.watch_depth(STOCK_PATH, Some(ROUTER_PATH));
        let host = node.clone();
        let incarnation = cluster.self_node().incarnation;
        let props = Props::new(move || OrderNumbers {
            next: 1,
            host: host.clone(),
            incarnation,
            log: instance_log.clone(),
        });
        ctx.start_singleton(&key, StartSingletonOptions::new(props))?;
        if let Some(directory) = ctx.directory() {
            claim_shelf(
                Arc::clone(directory),
                ctx.directory_host(),
                format!("shelf/{node}"),
            );
        }
    }
    let options =
        ClusterRouterOptions::new(cluster, RoutingStrategy::RoundRobin, STOCK_PATH).with_role(SHOP);
    system.spawn(
        ROUTER_PATH.trim_start_matches("/user/"),
        ClusterRouter::<Reserve>::factory(options)?,
    )?;
    tracing::info!(%node, shop = is_shop, "shop started");
    Ok(())
}

/// Claim this node's shelf in the directory, retrying until won: after a restart at the same
/// address the previous incarnation owns it until the leader evicts it.
fn claim_shelf(directory: Arc<dyn troupe::directory::Directory>, host: String, shelf: String) {
    tokio::spawn(async move {
        let mut waited = Duration::ZERO;
        loop {
            match directory.claim(&shelf, &host).await {
                Ok(outcome) if outcome.won() => {
                    tracing::info!(%shelf, revision = %outcome.claim().revision, after = ?waited, "shelf claimed");
                    return;
                }
                Ok(outcome) => {
                    tracing::info!(%shelf, owner = %outcome.claim().host, "shelf still owned by another host; waiting for its eviction")
                }
                Err(error) => tracing::warn!(%shelf, %error, "cannot claim the shelf; retrying"),
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
            waited += Duration::from_millis(500);
        }
    });
}

// ---------------------------------------------------------------------------------------------
// The load a client node sends.

#[derive(Debug, Default)]
struct Counts {
    sent: AtomicU64,
    ok: AtomicU64,
    timeout: AtomicU64,
    undeliverable: AtomicU64,
    no_reply: AtomicU64,
}

impl Counts {
    fn count(&self, result: &Result<(), AskError>) {
        let counter = match result {
            Ok(()) => &self.ok,
            Err(AskError::Timeout { .. }) => &self.timeout,
            Err(AskError::Undeliverable { .. }) => &self.undeliverable,
            Err(AskError::NoReply { .. }) => &self.no_reply,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    fn json(&self) -> serde_json::Value {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        serde_json::json!({
            "sent": get(&self.sent),
            "ok": get(&self.ok),
            "timeout": get(&self.timeout),
            "undeliverable": get(&self.undeliverable),
            "no_reply": get(&self.no_reply),
        })
    }
}

#[derive(Debug, Default)]
struct Load {
    router: Counts,
    singleton: Counts,
    /// Every node whose `Stock` answered through the router.
    router_nodes: Mutex<std::collections::BTreeSet<String>>,
    /// Every singleton instance (`host#incarnation`) that answered, in the order they first did.
    instances: Mutex<Vec<String>>,
    /// The numbers each instance handed out, to spot one handed out twice.
    numbers: Mutex<BTreeMap<String, std::collections::BTreeSet<u64>>>,
    /// Answers carrying a number their instance had already handed out.
    duplicates: AtomicU64,
}

impl Load {
    fn line(&self, event: &str) -> String {
        serde_json::json!({
            "event": event,
            "router": self.router.json(),
            "singleton": self.singleton.json(),
            "router_nodes": *self.router_nodes.lock(),
            "singleton_instances": *self.instances.lock(),
            "duplicate_numbers": self.duplicates.load(Ordering::Relaxed),
        })
        .to_string()
    }
}

fn start_load(
    router: ActorRef<Reserve>,
    proxy: SingletonProxy<OrderMsg>,
    rate: u32,
    timeout: Duration,
    seconds: u64,
) -> Arc<Load> {
    let load = Arc::new(Load::default());
    let period = Duration::from_secs(1) / rate.max(1);
    let until = (seconds > 0).then(|| tokio::time::Instant::now() + Duration::from_secs(seconds));
    {
        let load = Arc::clone(&load);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            let mut sku = 0u32;
            let mut asks = tokio::task::JoinSet::new();
            loop {
                tick.tick().await;
                if until.is_some_and(|until| tokio::time::Instant::now() >= until) {
                    // Every answer (or its timeout) is in before the totals.
                    while asks.join_next().await.is_some() {}
                    println!("{}", load.line("LoadTotals"));
                    return;
                }
                while asks.try_join_next().is_some() {}
                sku = sku.wrapping_add(1);
                load.router.sent.fetch_add(1, Ordering::Relaxed);
                load.singleton.sent.fetch_add(1, Ordering::Relaxed);
                let (router, asked) = (router.clone(), Arc::clone(&load));
                asks.spawn(async move {
                    let reserved = router
                        .ask(|reply| Reserve {
                            sku: sku % 64,
                            qty: 1,
                            reply,
                        })
                        .timeout(timeout)
                        .await
                        .map(|reservation| {
                            asked.router_nodes.lock().insert(reservation.node);
                        });
                    asked.router.count(&reserved);
                });
                let (proxy, load) = (proxy.clone(), Arc::clone(&load));
                asks.spawn(async move {
                    let number = proxy
                        .ask(|reply| OrderMsg::Next { reply })
                        .timeout(timeout)
                        .await;
                    if let Ok(number) = &number {
                        let instance = format!("{}#{}", number.host, number.incarnation);
                        let mut instances = load.instances.lock();
                        if !instances.contains(&instance) {
                            instances.push(instance.clone());
                        }
                        drop(instances);
                        let fresh = load
                            .numbers
                            .lock()
                            .entry(instance)
                            .or_default()
                            .insert(number.number);
                        if !fresh {
                            load.duplicates.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    load.singleton.count(&number.map(|_| ()));
                });
            }
        });
    }
    {
        let load = Arc::clone(&load);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            tick.tick().await;
            loop {
                tick.tick().await;
                println!("{}", load.line("LoadTick"));
            }
        });
    }
    load
}

#[tokio::main]
async fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let client = args.agent.roles.iter().any(|r| r == CLIENT);
    let is_shop = args.agent.roles.iter().any(|r| r == SHOP);
    let (rate, timeout) = (args.load_rate, Duration::from_millis(args.ask_timeout_ms));
    let seconds = args.load_seconds;
    let instance_log = args.instance_log.clone();
    let agent = Agent::builder(args.agent)
        .with_actors(move |ctx| start_shop(ctx, is_shop, instance_log))
        .start()
        .await;
    let agent = match agent {
        Ok(agent) => agent,
        Err(error) => {
            eprintln!("error: {error}");
            std::process::exit(1);
        }
    };
    let load = if client {
        let router = agent
            .system()
            .resolve::<Reserve>(ROUTER_PATH)
            .expect("the router runs");
        let key = SingletonKey::of::<OrderMsg>(ORDER_NUMBERS, SHOP);
        let proxy = ClusterSingleton::get(agent.cluster())
            .proxy(&key)
            .expect("the singleton's proxy");
        // Start once this node is up, so the first asks find routees.
        agent
            .cluster()
            .wait_for_view(|v| !v.up_members().is_empty() && v.self_member().is_some())
            .await;
        Some(start_load(router, proxy, rate, timeout, seconds))
    } else {
        None
    };
    let exit = agent.run().await;
    if let Some(load) = load
        && seconds == 0
    {
        println!("{}", load.line("LoadTotals"));
    }
    std::process::exit(exit.code());
}
