//! The singleton tests' harness: a simulated cluster (paused clock, seeded network), a worker
//! singleton that reports every instance's life and every message it handles to an instance
//! oracle, and helpers to start it on nodes.
//!
//! Include with `#[path = "support/singleton_harness.rs"] mod harness;`.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;
use troupe::Address;
use troupe::cluster::MembershipOptions;
use troupe::lease::{InMemoryLeaseArbiter, LeaseSettings};
use troupe::remoting::RemoteMessage;
use troupe::singleton::ClusterSingleton;
use troupe::singleton::{SingletonEvent, SingletonKey, SingletonProxy, StartSingletonOptions};
use troupe::testkit::{SimCluster, sim_address};
use troupe::{Actor, ActorError, Context, Props, ReplyTo, Subscription};

/// How long (virtual time) a test waits for anything.
pub(crate) const LIMIT: Duration = Duration::from_secs(60);

/// The singleton's messages.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum Cmd {
    /// Record job `n`.
    Job(u64),
    /// Reply with the jobs this instance handled.
    Jobs { reply: ReplyTo<Vec<u64>> },
    /// Stop this instance (`ctx.stop_self()`).
    StopSelf,
    /// Fail the handler.
    Fail,
}

impl RemoteMessage for Cmd {
    const MANIFEST: &'static str = "test.singleton.Cmd";
}

/// One instance's life as the oracle saw it.
#[derive(Debug, Clone)]
pub(crate) struct Life {
    pub(crate) node: Address,
    pub(crate) started: Instant,
    /// When `post_stop` finished.
    pub(crate) stopped: Option<Instant>,
    pub(crate) jobs: Vec<u64>,
}

/// Records the start and stop of every instance on every node. A killed node's instances count
/// as dead from the moment of the kill (a SIGKILL ends them; the simulated process lingers).
#[derive(Clone, Default)]
pub(crate) struct Oracle {
    inner: Arc<Mutex<OracleState>>,
}

#[derive(Default)]
struct OracleState {
    lives: Vec<Life>,
    killed: BTreeMap<Address, Instant>,
}

impl Oracle {
    fn started(&self, node: &Address) -> Option<usize> {
        let mut state = self.inner.lock();
        if state.killed.contains_key(node) {
            return None;
        }
        state.lives.push(Life {
            node: node.clone(),
            started: Instant::now(),
            stopped: None,
            jobs: Vec::new(),
        });
        Some(state.lives.len() - 1)
    }

    fn stopped(&self, index: usize) {
        let mut state = self.inner.lock();
        let life = &mut state.lives[index];
        if life.stopped.is_none() {
            life.stopped = Some(Instant::now());
        }
    }

    fn job(&self, index: usize, n: u64) {
        self.inner.lock().lives[index].jobs.push(n);
    }

    /// Node `node` was killed now.
    pub(crate) fn killed(&self, node: &Address) {
        let mut state = self.inner.lock();
        let now = Instant::now();
        state.killed.insert(node.clone(), now);
        for life in &mut state.lives {
            if &life.node == node && life.stopped.is_none() {
                life.stopped = Some(now);
            }
        }
    }

    /// A killed node's address is used again by a new process.
    pub(crate) fn revived(&self, node: &Address) {
        self.inner.lock().killed.remove(node);
    }

    pub(crate) fn lives(&self) -> Vec<Life> {
        self.inner.lock().lives.clone()
    }

    /// Nodes with a live instance now.
    pub(crate) fn live(&self) -> Vec<Address> {
        self.inner
            .lock()
            .lives
            .iter()
            .filter(|l| l.stopped.is_none())
            .map(|l| l.node.clone())
            .collect()
    }

    /// Pairs of instances whose lives overlapped, with the overlap.
    pub(crate) fn overlaps(&self) -> Vec<(Life, Life, Duration)> {
        let lives = self.lives();
        let now = Instant::now();
        let mut found = Vec::new();
        for (i, a) in lives.iter().enumerate() {
            for b in &lives[i + 1..] {
                let a_end = a.stopped.unwrap_or(now);
                let b_end = b.stopped.unwrap_or(now);
                let start = a.started.max(b.started);
                let end = a_end.min(b_end);
                if start < end {
                    found.push((a.clone(), b.clone(), end - start));
                }
            }
        }
        found
    }

    /// Every job handled, in the order instances started and handled them.
    pub(crate) fn jobs(&self) -> Vec<u64> {
        let mut lives = self.lives();
        lives.sort_by_key(|l| l.started);
        lives.into_iter().flat_map(|l| l.jobs).collect()
    }
}

/// The singleton: reports its life and jobs to the oracle; `post_stop` takes `stop_delay`.
pub(crate) struct Worker {
    oracle: Oracle,
    node: Address,
    index: Option<usize>,
    stop_delay: Duration,
    jobs: Vec<u64>,
}

impl Actor for Worker {
    type Msg = Cmd;

    async fn pre_start(&mut self, _ctx: &mut Context<Self>) -> Result<(), ActorError> {
        self.index = self.oracle.started(&self.node);
        Ok(())
    }

    async fn handle(&mut self, msg: Cmd, ctx: &mut Context<Self>) -> Result<(), ActorError> {
        match msg {
            Cmd::Job(n) => {
                self.jobs.push(n);
                if let Some(index) = self.index {
                    self.oracle.job(index, n);
                }
            }
            Cmd::Jobs { reply } => reply.send(self.jobs.clone()),
            Cmd::StopSelf => ctx.stop_self(),
            Cmd::Fail => return Err("told to fail".into()),
        }
        Ok(())
    }

    async fn post_stop(&mut self, _ctx: &mut Context<Self>) {
        if !self.stop_delay.is_zero() {
            tokio::time::sleep(self.stop_delay).await;
        }
        if let Some(index) = self.index {
            self.oracle.stopped(index);
        }
    }
}

/// Props for the worker on `node`.
/// An in-memory arbiter whose handles hold grants of `ttl`, renewed every `ttl / 3`, through the
/// checked [`LeaseSettings::new`].
pub(crate) fn arbiter(ttl: Duration) -> InMemoryLeaseArbiter {
    let settings = LeaseSettings::new(ttl, ttl / 3)
        .unwrap_or_else(|e| panic!("test lease settings for ttl {ttl:?}: {e}"));
    InMemoryLeaseArbiter::new(settings)
}

pub(crate) fn worker(oracle: &Oracle, node: Address, stop_delay: Duration) -> Props<Worker> {
    let oracle = oracle.clone();
    Props::new(move || Worker {
        oracle: oracle.clone(),
        node: node.clone(),
        index: None,
        stop_delay,
        jobs: Vec::new(),
    })
}

/// The key of the test singleton, hosted by members carrying `role`.
pub(crate) fn key(role: Option<&str>) -> SingletonKey<Cmd> {
    SingletonKey::of("scheduler", role)
}

/// A simulated cluster of `roles.len()` nodes (node `i` carries `roles[i]`), all up.
pub(crate) async fn cluster(
    seed: u64,
    roles: &[&[&str]],
    settings: MembershipOptions,
) -> SimCluster {
    let mut sim = SimCluster::with_settings(seed, settings);
    for node_roles in roles {
        sim.start_node(node_roles);
    }
    sim.wait_all_up(roles.len(), LIMIT).await;
    sim
}

/// Start the singleton on node `i` with `configure`d options.
pub(crate) fn start(
    sim: &SimCluster,
    i: usize,
    oracle: &Oracle,
    role: Option<&str>,
    configure: impl FnOnce(StartSingletonOptions<Worker>) -> StartSingletonOptions<Worker>,
) -> SingletonProxy<Cmd> {
    let options = configure(StartSingletonOptions::new(worker(
        oracle,
        sim_address(i),
        Duration::ZERO,
    )));
    ClusterSingleton::get(&sim.node(i).cluster)
        .start(&key(role), options)
        .expect("singleton starts")
}

/// Start the singleton on node `i` with default options and a `post_stop` of `stop_delay`.
pub(crate) fn start_default(
    sim: &SimCluster,
    i: usize,
    oracle: &Oracle,
    role: Option<&str>,
) -> SingletonProxy<Cmd> {
    start(sim, i, oracle, role, |o| o)
}

/// Singleton events published on node `i`.
pub(crate) fn events(sim: &SimCluster, i: usize) -> Subscription<SingletonEvent> {
    sim.node(i)
        .system
        .event_stream()
        .subscribe::<SingletonEvent>()
}

/// Everything waiting on a subscription now.
pub(crate) fn drain<E>(subscription: &mut Subscription<E>) -> Vec<E> {
    let mut out = Vec::new();
    while let Some(event) = subscription.try_recv() {
        out.push(event);
    }
    out
}

/// Wait until the oracle sees exactly one live instance, on `node`.
pub(crate) async fn hosted_on(sim: &SimCluster, oracle: &Oracle, node: usize) -> Duration {
    let expected = sim_address(node);
    sim.wait_until(LIMIT, |_| oracle.live() == vec![expected.clone()])
        .await
}

/// Assert that no two instances ever lived at the same time.
pub(crate) fn assert_unique(oracle: &Oracle, seed: u64) {
    let overlaps = oracle.overlaps();
    assert!(
        overlaps.is_empty(),
        "seed {seed}: two live instances at once: {:#?}",
        overlaps
            .iter()
            .map(|(a, b, d)| format!("{} and {} for {d:?}", a.node, b.node))
            .collect::<Vec<_>>()
    );
}

/// Captures warn-level (and more severe) log lines on the current thread while alive; the
/// paused-clock tests run every actor on that thread.
///
/// # Why one process-wide subscriber
/// A thread-local subscriber (`tracing::subscriber::set_default`) misses events when tests
/// share a process (`cargo test` runs them on threads): tracing caches each call site's
/// interest process-wide, and a call site first reached on another test's thread, with no
/// subscriber there, can be cached as uninteresting. So one subscriber is installed for the
/// whole process, once, and routes each line to the capture of the thread that logged it; a
/// thread without a capture is ignored. Under nextest (a process per test) it behaves the same.
pub(crate) struct WarnCapture {
    lines: Arc<Mutex<Vec<String>>>,
}

type Captures = Mutex<std::collections::HashMap<std::thread::ThreadId, Arc<Mutex<Vec<String>>>>>;

fn captures() -> &'static Captures {
    static CAPTURES: std::sync::OnceLock<Captures> = std::sync::OnceLock::new();
    CAPTURES.get_or_init(Default::default)
}

impl WarnCapture {
    pub(crate) fn start() -> Self {
        static INSTALL: std::sync::Once = std::sync::Once::new();
        INSTALL.call_once(|| {
            tracing::subscriber::set_global_default(CaptureSubscriber)
                .expect("no other global subscriber in the singleton tests");
        });
        let lines = Arc::new(Mutex::new(Vec::new()));
        captures()
            .lock()
            .insert(std::thread::current().id(), Arc::clone(&lines));
        Self { lines }
    }

    pub(crate) fn lines(&self) -> Vec<String> {
        self.lines.lock().clone()
    }
}

impl Drop for WarnCapture {
    fn drop(&mut self) {
        captures().lock().remove(&std::thread::current().id());
    }
}

struct CaptureSubscriber;

struct Fields(String);

impl tracing::field::Visit for Fields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        use std::fmt::Write;
        let _ = write!(self.0, " {}={value:?}", field.name());
    }
}

impl tracing::Subscriber for CaptureSubscriber {
    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        *metadata.level() <= tracing::Level::WARN
    }

    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }

    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}

    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}

    fn event(&self, event: &tracing::Event<'_>) {
        let Some(lines) = captures().lock().get(&std::thread::current().id()).cloned() else {
            return;
        };
        let mut fields = Fields(format!("{}", event.metadata().level()));
        event.record(&mut fields);
        lines.lock().push(fields.0);
    }

    fn enter(&self, _: &tracing::span::Id) {}

    fn exit(&self, _: &tracing::span::Id) {}
}

/// Stop every node of `sim` (and its actor system), so that a test running many scenarios in
/// one runtime does not keep paying for the finished ones.
pub(crate) async fn shut_down_all(sim: &mut SimCluster) {
    let systems: Vec<_> = sim.nodes().iter().map(|n| n.system.clone()).collect();
    for i in 0..sim.nodes().len() {
        sim.kill(i);
    }
    for system in systems {
        system.shutdown().await;
    }
}
