//! The reporter: turns what happens on this node (membership, singletons, routers, dead
//! letters, agent health, mailbox depths) into batches for the control plane, without ever blocking an actor on the
//! network.
//!
//! # Supervision tree
//! ```text
//! reporter task (tokio)       owns the ReportBuffer; fed by
//! ├── cluster subscription    ClusterNotification → membership events
//! ├── dead-letter subscription DeadLetter → dead-letter events
//! ├── singleton subscription  SingletonEvent → singleton events (runtime_events.rs)
//! ├── router subscription     ClusterRouterEvent → router events; remembers local routers
//! └── depth tick              samples the depth of the watched actor paths, and of this
//!                             node's routee of every router running here (tagged with the
//!                             router: one series per router and path, never per actor)
//! ```
//! The task stops when the [`ReporterHandle`] is dropped or `stop` is called; the last batch is
//! flushed (best effort) first.
//!
//! # When the server is away
//! Batches are retried with exponential backoff (250 ms doubling to 10 s) and the same
//! sequence number; meanwhile the buffer fills, and when full drops depth samples before
//! state-changing events, counting every drop by kind (see `buffer.rs`).
//!
//! # When the server refuses a batch
//! A batch refused as bad input (400, 413, 422: a field over its limit, a body too large) would
//! be refused again unchanged, and retrying it would stop all reporting behind it. It is
//! dropped instead: logged at WARN with the server's reason, counted on `/metrics`
//! (`troupe_agent_reporter_batches_refused_total`), its items counted as dropped by kind in
//! the next batch, and reporting goes on with the next sequence.

pub mod buffer;
pub mod convert;
pub mod runtime_events;
pub mod shipper;
pub mod spool;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::{mpsc, oneshot};
use troupe::cluster::{Cluster, ClusterNotification};
use troupe::cluster_router::ClusterRouterEvent;
use troupe::singleton::SingletonEvent;
use troupe::{ActorSystem, DeadLetter};
use troupe_protocol::{AgentHealth, DepthSample, DepthTick, Event, EventBody, HealthChange};

use buffer::{BufferLimits, ReportBuffer};
use runtime_events::RuntimeEvents;
use shipper::Shipper;

/// Settings of the reporter.
#[derive(Debug, Clone)]
pub struct ReporterSettings {
    /// How often to ship what has accumulated.
    pub flush_interval: Duration,
    /// How often to sample mailbox depths.
    pub depth_interval: Duration,
    /// Send a (possibly empty) batch at least this often: it keeps the agent's last report
    /// fresh on the control plane and picks up queued member operations.
    pub heartbeat_interval: Duration,
    /// Buffer limits.
    pub limits: BufferLimits,
}

impl Default for ReporterSettings {
    fn default() -> Self {
        Self {
            flush_interval: Duration::from_millis(500),
            depth_interval: Duration::from_secs(1),
            heartbeat_interval: Duration::from_secs(2),
            limits: BufferLimits::default(),
        }
    }
}

/// Counters a reporter keeps, for `/metrics` and tests.
#[derive(Debug, Default)]
pub struct ReporterStats {
    /// Batches the server acknowledged.
    pub batches_acknowledged: AtomicU64,
    /// Attempts that failed (and will be retried).
    pub failed_attempts: AtomicU64,
    /// Batches the server refused as bad input (dropped, not retried).
    pub batches_refused: AtomicU64,
    /// Events handed to the buffer.
    pub events_buffered: AtomicU64,
}

/// The buffer's fill and cumulative drops, for `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Occupancy {
    /// Events queued (not counting the batch in flight).
    pub events: usize,
    /// Depth samples queued.
    pub depth_samples: usize,
    /// Items the buffer holds before dropping.
    pub capacity: usize,
    /// Every drop since start, by kind.
    pub dropped_total: troupe_protocol::DroppedCounts,
}

enum Command {
    Health(AgentHealth, Option<String>),
    Event(EventBody),
    WatchDepth(String),
    Stop(oneshot::Sender<()>),
}

/// A running reporter.
#[derive(Debug, Clone)]
pub struct ReporterHandle {
    commands: mpsc::UnboundedSender<Command>,
    stats: Arc<ReporterStats>,
    buffer: Arc<Mutex<ReportBuffer>>,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}

impl ReporterHandle {
    /// Report an agent health change.
    pub fn health(&self, health: AgentHealth, reason: Option<String>) {
        let _ = self.commands.send(Command::Health(health, reason));
    }

    /// Report that this node released the directory claims of the removed member `host`.
    pub fn host_evicted(&self, host: &str, previous_status: &str, mut actors: Vec<String>) {
        actors.sort();
        let eviction = troupe_protocol::HostEviction {
            host: host.to_owned(),
            previous_status: Some(previous_status.to_owned()),
            actors,
        };
        let _ = self
            .commands
            .send(Command::Event(EventBody::DirectoryHostEvicted(eviction)));
    }

    /// Sample the mailbox depth of the actor at `path` on every depth tick.
    pub fn watch_depth(&self, path: &str) {
        let _ = self.commands.send(Command::WatchDepth(path.to_owned()));
    }

    /// Counters.
    #[must_use]
    pub fn stats(&self) -> &ReporterStats {
        &self.stats
    }

    /// Items queued and drops not yet reported.
    #[must_use]
    pub fn backlog(&self) -> ((usize, usize), troupe_protocol::DroppedCounts) {
        let buffer = self.buffer.lock();
        (buffer.queued(), buffer.unreported_drops())
    }

    /// How full the buffer is, and everything it ever dropped.
    #[must_use]
    pub fn occupancy(&self) -> Occupancy {
        let buffer = self.buffer.lock();
        Occupancy {
            events: buffer.queued().0,
            depth_samples: buffer.queued_samples(),
            capacity: buffer.limits().items,
            dropped_total: buffer.total_drops(),
        }
    }

    /// Ship everything buffered (retrying until the control plane accepts it; bound the wait
    /// with a timeout) and stop.
    pub async fn stop(&self) {
        let (tx, rx) = oneshot::channel();
        if self.commands.send(Command::Stop(tx)).is_ok() {
            let _ = rx.await;
        }
    }
}

/// Drop a batch the server refused as bad input, counting it.
fn refused(
    buffer: &Mutex<ReportBuffer>,
    stats: &ReporterStats,
    sequence: u64,
    error: &shipper::ShipError,
) {
    let items = buffer.lock().refused(sequence);
    stats.batches_refused.fetch_add(1, Ordering::Relaxed);
    tracing::warn!(
        sequence,
        items,
        %error,
        "the control plane refused a report batch as bad input; dropped it (its items are counted as dropped) and reporting goes on"
    );
}

/// Carry out a member operation an operator queued on the control plane.
fn carry_out(cluster: &Cluster, operation: &troupe_protocol::MemberOperation) {
    if let Some(departure) = cluster.departure() {
        // A node outside the cluster cannot carry anything out (a down of itself least of
        // all); say so rather than pretend.
        tracing::warn!(
            id = operation.id,
            address = %operation.address,
            operation = operation.operation.as_str(),
            ?departure,
            "member operation not carried out: this node is no longer in the cluster"
        );
        return;
    }
    let Some((host, port)) = operation.address.rsplit_once(':') else {
        tracing::warn!(address = %operation.address, "member operation names no host:port; ignored");
        return;
    };
    let Ok(port) = port.parse() else {
        tracing::warn!(address = %operation.address, "member operation has a bad port; ignored");
        return;
    };
    let address = troupe::Address::new(&cluster.self_address().system, host, port);
    tracing::info!(%address, operation = operation.operation.as_str(), "carrying out a member operation from the control plane");
    match operation.operation {
        troupe_protocol::OperationKind::Leave => cluster.leave_member(address),
        troupe_protocol::OperationKind::Down => cluster.down(address),
    }
}

/// Start reporting `cluster`'s events and `system`'s dead letters through `shipper`.
#[must_use]
pub fn start(
    system: &ActorSystem,
    cluster: &Cluster,
    shipper: Shipper,
    settings: ReporterSettings,
) -> ReporterHandle {
    let (commands, mut command_rx) = mpsc::unbounded_channel();
    let stats = Arc::new(ReporterStats::default());
    let buffer = Arc::new(Mutex::new(ReportBuffer::new(settings.limits)));
    let handle = ReporterHandle {
        commands,
        stats: Arc::clone(&stats),
        buffer: Arc::clone(&buffer),
    };
    let mut cluster_events = cluster.subscribe();
    let mut dead_letters = system.event_stream().subscribe::<DeadLetter>();
    let mut singleton_events = system.event_stream().subscribe::<SingletonEvent>();
    let mut router_events = system.event_stream().subscribe::<ClusterRouterEvent>();
    let mut runtime_events = RuntimeEvents::new();
    let cluster = cluster.clone();
    let system = system.clone();
    tokio::spawn(async move {
        let mut flush = tokio::time::interval(settings.flush_interval);
        flush.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut depth = tokio::time::interval(settings.depth_interval);
        depth.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut watched: Vec<String> = Vec::new();
        let mut backoff = Duration::ZERO;
        let mut retry_at = tokio::time::Instant::now();
        let mut last_shipped = tokio::time::Instant::now();
        let push = |event: Event| {
            stats.events_buffered.fetch_add(1, Ordering::Relaxed);
            buffer.lock().push_event(event);
        };
        loop {
            tokio::select! {
                biased;
                command = command_rx.recv() => match command {
                    Some(Command::Health(health, reason)) => push(Event {
                        at_ms: now_ms(),
                        body: EventBody::AgentHealthChanged(HealthChange { health, reason }),
                    }),
                    Some(Command::Event(body)) => push(Event { at_ms: now_ms(), body }),
                    Some(Command::WatchDepth(path)) => {
                        if !watched.contains(&path) {
                            watched.push(path);
                        }
                    }
                    Some(Command::Stop(done)) => {
                        // What already happened but still waits in a subscription goes into the
                        // last reports too (the node's own removal, its singleton stopping).
                        while let Some(notification) = cluster_events.try_recv() {
                            if let ClusterNotification::Event(event) = notification {
                                push(convert::cluster_event(&event, &cluster.view(), now_ms()));
                            }
                        }
                        while let Some(letter) = dead_letters.try_recv() {
                            push(convert::dead_letter(&letter, cluster.self_address(), now_ms()));
                        }
                        while let Some(event) = singleton_events.try_recv() {
                            if let Some(event) = runtime_events.singleton(&event, now_ms()) {
                                push(event);
                            }
                        }
                        while let Some(event) = router_events.try_recv() {
                            if let Some(event) = runtime_events.router(&event, now_ms()) {
                                push(event);
                            }
                        }
                        // Ship all of it, retrying; the caller bounds how long
                        // (`--flush-timeout-ms`).
                        loop {
                            let batch = buffer.lock().next_batch().cloned();
                            let Some(batch) = batch else { break };
                            match shipper.ship(&batch, now_ms()).await {
                                Ok(ack) => {
                                    buffer.lock().acknowledged(batch.sequence);
                                    stats.batches_acknowledged.fetch_add(1, Ordering::Relaxed);
                                    for operation in &ack.operations {
                                        tracing::warn!(
                                            id = operation.id,
                                            address = %operation.address,
                                            operation = operation.operation.as_str(),
                                            "member operation not carried out: this agent is shutting down"
                                        );
                                    }
                                }
                                Err(error) if error.is_bad_input() => {
                                    refused(&buffer, &stats, batch.sequence, &error);
                                }
                                Err(error) => {
                                    stats.failed_attempts.fetch_add(1, Ordering::Relaxed);
                                    tracing::debug!(%error, "last report batch not accepted; retrying");
                                    tokio::time::sleep(Duration::from_millis(200)).await;
                                }
                            }
                        }
                        let _ = done.send(());
                        return;
                    }
                    None => return,
                },
                notification = cluster_events.recv() => match notification {
                    Some(ClusterNotification::Event(event)) => push(convert::cluster_event(&event, &cluster.view(), now_ms())),
                    Some(ClusterNotification::CurrentState(_)) => {}
                    None => {}
                },
                letter = dead_letters.recv() => {
                    if let Some(letter) = letter {
                        push(convert::dead_letter(&letter, cluster.self_address(), now_ms()));
                    }
                }
                event = singleton_events.recv() => {
                    if let Some(event) = event.and_then(|e| runtime_events.singleton(&e, now_ms())) {
                        push(event);
                    }
                }
                event = router_events.recv() => {
                    if let Some(event) = event.and_then(|e| runtime_events.router(&e, now_ms())) {
                        push(event);
                    }
                }
                _ = depth.tick() => {
                    let mut samples: Vec<DepthSample> = watched
                        .iter()
                        .filter_map(|path| system.resolve_any(path).ok().map(|actor| DepthSample {
                            path: path.clone(),
                            router: None,
                            depth: u32::try_from(actor.mailbox_depth()).unwrap_or(u32::MAX),
                        }))
                        .collect();
                    samples.extend(runtime_events.routee_depths(&system));
                    if !samples.is_empty() {
                        buffer.lock().push_depth_tick(DepthTick { at_ms: now_ms(), samples });
                    }
                }
                _ = flush.tick() => {
                    if tokio::time::Instant::now() < retry_at {
                        continue;
                    }
                    let heartbeat_due = last_shipped.elapsed() >= settings.heartbeat_interval;
                    let batch = {
                        let mut buffer = buffer.lock();
                        if heartbeat_due {
                            Some(buffer.heartbeat_batch().clone())
                        } else {
                            buffer.next_batch().cloned()
                        }
                    };
                    let Some(batch) = batch else { continue };
                    match shipper.ship(&batch, now_ms()).await {
                        Ok(ack) => {
                            last_shipped = tokio::time::Instant::now();
                            buffer.lock().acknowledged(batch.sequence);
                            for operation in &ack.operations {
                                carry_out(&cluster, operation);
                            }
                            stats.batches_acknowledged.fetch_add(1, Ordering::Relaxed);
                            backoff = Duration::ZERO;
                        }
                        Err(error) if error.is_bad_input() => {
                            last_shipped = tokio::time::Instant::now();
                            refused(&buffer, &stats, batch.sequence, &error);
                            backoff = Duration::ZERO;
                        }
                        Err(error) => {
                            stats.failed_attempts.fetch_add(1, Ordering::Relaxed);
                            backoff = (backoff * 2).clamp(Duration::from_millis(250), Duration::from_secs(10));
                            retry_at = tokio::time::Instant::now() + backoff;
                            tracing::debug!(%error, retry_in = ?backoff, "report batch not accepted; will retry");
                        }
                    }
                }
            }
        }
    });
    handle
}
