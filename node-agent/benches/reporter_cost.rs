//! What the reporter costs an agent: CPU time at a steady event rate (default 10,000 dead
//! letters per second for 10 s), with the real reporter (event-stream subscription → buffer →
//! shipper over HTTP) shipping to a receiver, against the same agent and load without a
//! reporter. The difference is the reporter's cost, printed as % of one core.
//!
//! The receiver is a separate process (this binary re-run with `REPORTER_BENCH_RECEIVER=1`): an
//! actix server that decodes each batch (the real wire format, `ReportBatch` JSON) and answers an
//! `IngestAck`, so none of its CPU is counted against the agent. The agent's CPU is the whole
//! process's user + system time from `/proc/self/stat`, threads that exited included.
//!
//! ```text
//! cargo bench -p troupe-agent --bench reporter_cost -- [--rate 10000] [--seconds 10] [--rounds 2]
//! ```

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use troupe::{Actor, ActorError, Context, Props};
use troupe_agent::{Agent, AgentConfig};

const RECEIVER_ENV: &str = "REPORTER_BENCH_RECEIVER";

fn main() {
    if std::env::var_os(RECEIVER_ENV).is_some() {
        receiver::run();
        return;
    }
    let options = Options::parse();
    let mut receiver = Receiver::start();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    println!(
        "reporter cost: {} events/s for {} s per run, {} round(s), receiver in a separate process",
        options.rate, options.seconds, options.rounds
    );
    let mut rows = Vec::new();
    for round in 1..=options.rounds {
        for reporting in [false, true] {
            let row = runtime.block_on(async {
                let before = receiver.events().await;
                let mut row = run(&options, reporting.then_some(&receiver.url)).await;
                row.received = receiver.events().await - before;
                row
            });
            rows.push((round, reporting, row));
        }
    }
    println!();
    println!(
        "| round | reporter | events in window | events/s | events whole run | received by receiver | CPU s in window | % of one core |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for (round, reporting, row) in &rows {
        println!(
            "| {round} | {} | {} | {:.0} | {} | {} | {:.2} | {:.2} |",
            if *reporting { "on" } else { "off (baseline)" },
            row.sent,
            row.sent as f64 / row.wall.as_secs_f64(),
            row.sent_total,
            row.received,
            row.cpu.as_secs_f64(),
            row.core_percent(),
        );
    }
    let mean = |reporting: bool| {
        let runs: Vec<f64> = rows
            .iter()
            .filter(|(_, r, _)| *r == reporting)
            .map(|(_, _, row)| row.core_percent())
            .collect();
        runs.iter().sum::<f64>() / runs.len() as f64
    };
    let cost = mean(true) - mean(false);
    println!();
    println!(
        "reporter cost (mean with reporter − mean baseline): {cost:.2}% of one core at {} events/s (target < 5%)",
        options.rate
    );
    println!(
        "(received by receiver: events the receiver decoded and acknowledged during the run, the \
         agent's own membership and health events included)"
    );
    receiver.stop();
}

#[derive(Debug)]
struct Options {
    rate: u64,
    seconds: u64,
    rounds: u32,
}

impl Options {
    fn parse() -> Self {
        let mut options = Self {
            rate: 10_000,
            seconds: 10,
            rounds: 2,
        };
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            let mut value = |name: &str| -> u64 {
                args.next()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or_else(|| panic!("{name} needs a positive number"))
            };
            match arg.as_str() {
                "--rate" => options.rate = value("--rate"),
                "--seconds" => options.seconds = value("--seconds"),
                "--rounds" => options.rounds = u32::try_from(value("--rounds")).unwrap(),
                // cargo bench passes --bench; ignore it and any filter.
                _ => {}
            }
        }
        options
    }
}

/// One measured run.
#[derive(Debug)]
struct Row {
    /// Dead letters generated in the measured window.
    sent: u64,
    /// Dead letters generated in the whole run (warm-up included).
    sent_total: u64,
    /// Events the receiver acknowledged during the whole run.
    received: u64,
    wall: Duration,
    cpu: Duration,
}

impl Row {
    fn core_percent(&self) -> f64 {
        100.0 * self.cpu.as_secs_f64() / self.wall.as_secs_f64()
    }
}

/// User + system CPU time of this whole process (all threads, exited ones included).
fn process_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    let after = &stat[stat.rfind(')').expect("comm") + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 and 15 of proc(5) (utime, stime), counted from `state` (field 3).
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    Duration::from_secs_f64(ticks as f64 / clock_ticks() as f64)
}

fn clock_ticks() -> u64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100)
}

struct Sink;

impl Actor for Sink {
    type Msg = u64;

    async fn handle(&mut self, _: u64, _: &mut Context<Self>) -> Result<(), ActorError> {
        Ok(())
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

async fn run(options: &Options, control_plane: Option<&String>) -> Row {
    let port = free_port();
    let mut config = AgentConfig::new(
        "bench",
        format!("127.0.0.1:{port}").parse().unwrap(),
        "reporter bench secret, long enough",
    );
    config.control_plane = control_plane.cloned();
    config.ingest_token = "bench".into();
    // The agent's default.
    config.report_interval_ms = 500;
    let agent = Agent::start(config).await.expect("agent starts");
    while agent.health().state() != troupe_agent::health::HealthState::Ready {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Every message to a stopped actor is a dead letter: a real event on the event stream.
    let gone = agent.system().spawn("gone", Props::new(|| Sink)).unwrap();
    gone.stop();
    gone.terminated().await;

    let sent = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let rate = options.rate;
    let generator = std::thread::spawn({
        let (sent, stop) = (Arc::clone(&sent), Arc::clone(&stop));
        move || {
            let started = Instant::now();
            while !stop.load(Ordering::Relaxed) {
                let due = (started.elapsed().as_secs_f64() * rate as f64) as u64;
                let now = sent.load(Ordering::Relaxed);
                for n in now..due {
                    gone.tell(n);
                }
                sent.store(due.max(now), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    });
    // One second to reach a steady state, then measure.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let sent_before = sent.load(Ordering::Relaxed);
    let cpu_before = process_cpu();
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(options.seconds)).await;
    let cpu = process_cpu() - cpu_before;
    let wall = started.elapsed();
    let sent_during = sent.load(Ordering::Relaxed) - sent_before;
    stop.store(true, Ordering::Relaxed);
    generator.join().unwrap();
    if let Some(reporter) = agent.reporter() {
        // Let the reporter ship what it buffered (the server has it all before the count).
        let deadline = Instant::now() + Duration::from_secs(10);
        while reporter.occupancy().events > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    agent.shutdown().await;
    Row {
        sent: sent_during,
        sent_total: sent.load(Ordering::Relaxed),
        received: 0,
        wall,
        cpu,
    }
}

/// The receiver child process.
struct Receiver {
    child: Child,
    url: String,
}

impl Receiver {
    fn start() -> Self {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .env(RECEIVER_ENV, "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the receiver");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        Self {
            child,
            url: line.trim().to_owned(),
        }
    }

    /// Events the receiver decoded and acknowledged so far.
    async fn events(&self) -> u64 {
        reqwest::get(format!("{}/events", self.url))
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop();
    }
}

mod receiver {
    use std::sync::atomic::{AtomicU64, Ordering};

    use actix_web::{App, HttpResponse, HttpServer, web};
    use troupe_protocol::{IngestAck, ReportBatch};

    static EVENTS: AtomicU64 = AtomicU64::new(0);

    async fn ingest(body: web::Json<ReportBatch>) -> HttpResponse {
        EVENTS.fetch_add(body.events.len() as u64, Ordering::Relaxed);
        HttpResponse::Ok().json(IngestAck {
            sequence: body.sequence,
            duplicate: false,
            stored_events: body.events.len() as u64,
            operations: Vec::new(),
        })
    }

    async fn events() -> HttpResponse {
        HttpResponse::Ok().body(EVENTS.load(Ordering::Relaxed).to_string())
    }

    pub(super) fn run() {
        actix_rt::System::new().block_on(async {
            let server = HttpServer::new(|| {
                App::new()
                    .app_data(web::JsonConfig::default().limit(64 * 1024 * 1024))
                    .route("/api/v1/ingest", web::post().to(ingest))
                    .route("/events", web::get().to(events))
            })
            .workers(1)
            .bind(("127.0.0.1", 0))
            .expect("bind the receiver");
            println!("http://{}", server.addrs()[0]);
            server.run().await.expect("receiver runs");
        });
    }
}
