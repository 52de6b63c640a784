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
pub mod spool_file;

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
use spool::{BatchKey, SpoolLoss};
use spool_file::{SpoolFile, SpoolSettings};

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
    /// Where batches that could not be delivered before a stop wait for the next start of
    /// this node (`--report-spool-dir`); `None`: in memory only, lost (and logged) at exit.
    pub spool: Option<SpoolSettings>,
}

impl Default for ReporterSettings {
    fn default() -> Self {
        Self {
            flush_interval: Duration::from_millis(500),
            depth_interval: Duration::from_secs(1),
            heartbeat_interval: Duration::from_secs(2),
            limits: BufferLimits::default(),
            spool: None,
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
    /// Batches of an earlier run of this node, read from the spool, that the server
    /// acknowledged.
    pub spool_replayed: AtomicU64,
    /// Batches held in the spool now.
    pub spool_batches: AtomicU64,
    /// Bytes they take.
    pub spool_bytes: AtomicU64,
    /// Batches the spool gave up since start (full, refused, torn or unreadable lines).
    pub spool_lost: AtomicU64,
    /// Spool writes that failed.
    pub spool_write_errors: AtomicU64,
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
    /// The process is on its way out: from now on every batch goes to the spool first.
    ShuttingDown,
    /// Deliver (or spool) everything and stop; answers whether everything was delivered.
    Stop {
        deadline: tokio::time::Instant,
        done: oneshot::Sender<bool>,
    },
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

    /// The process is on its way out (draining or fenced): from now on everything reported
    /// is written to the spool (and fsynced) before it is sent, so a kill during the shutdown
    /// loses nothing the spool could hold.
    pub fn shutting_down(&self) {
        let _ = self.commands.send(Command::ShuttingDown);
    }

    /// Ship everything buffered, retrying until the control plane accepts it, and stop.
    pub async fn stop(&self) {
        self.stop_within(Duration::from_secs(86_400)).await;
    }

    /// Ship everything buffered (and anything an earlier run spooled), retrying for at most
    /// `limit`; what is still undelivered then stays in the spool for the next start of this
    /// node (without `--report-spool-dir`: is logged as lost). Answers whether everything
    /// was delivered.
    pub async fn stop_within(&self, limit: Duration) -> bool {
        let (done, answer) = oneshot::channel();
        let deadline = tokio::time::Instant::now() + limit;
        if self.commands.send(Command::Stop { deadline, done }).is_ok() {
            answer.await.unwrap_or(false)
        } else {
            false
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

/// What one attempt to deliver the spool's oldest batch came to.
enum Attempt {
    /// The server acknowledged it.
    Delivered(troupe_protocol::IngestAck),
    /// The server refused it as bad input: given up, counted.
    Refused,
    /// It got no acknowledgement; it stays first in line.
    Failed(shipper::ShipError),
    /// The spool is empty.
    Nothing,
}

/// The spool's counters, for `/metrics`.
fn sync_spool_stats(stats: &ReporterStats, file: &SpoolFile) {
    let spool = file.spool();
    stats
        .spool_batches
        .store(spool.len() as u64, Ordering::Relaxed);
    stats.spool_bytes.store(spool.bytes(), Ordering::Relaxed);
    stats
        .spool_lost
        .store(spool.lost_total().batches, Ordering::Relaxed);
    stats
        .spool_write_errors
        .store(file.write_errors(), Ordering::Relaxed);
}

/// Count what the spool gave up while this process still reports: the next batch carries it.
fn count_spool_loss(buffer: &Mutex<ReportBuffer>, loss: SpoolLoss) {
    if !loss.is_empty() {
        buffer.lock().spool_lost(loss.batches, loss.items);
    }
}

/// Move everything buffered into the spool and make it durable: the shutdown path, so that a
/// kill from now on loses nothing the spool can hold.
fn hand_over(buffer: &Mutex<ReportBuffer>, shipper: &Shipper, file: &mut SpoolFile) {
    let taken = buffer.lock().take_all();
    if taken.is_empty() {
        return;
    }
    let now = now_ms();
    for pending in &taken {
        file.step(spool::Event::Append(Box::new(shipper.batch(pending, now))));
    }
    file.step(spool::Event::Persist);
}

/// Send the spool's oldest batch once: as it was cut (its own identity and sequence, an
/// earlier incarnation's for a replay), with the time of this attempt.
async fn send_spooled(
    file: &mut SpoolFile,
    shipper: &Shipper,
    buffer: &Mutex<ReportBuffer>,
    stats: &ReporterStats,
) -> Attempt {
    let Some(mut batch) = file.spool().front().cloned() else {
        return Attempt::Nothing;
    };
    batch.sent_at_ms = now_ms();
    let key = BatchKey::of(&batch);
    let outcome = match shipper.post(&batch).await {
        Ok(ack) => {
            if batch.identity.incarnation == shipper.identity().incarnation {
                stats.batches_acknowledged.fetch_add(1, Ordering::Relaxed);
            } else {
                stats.spool_replayed.fetch_add(1, Ordering::Relaxed);
            }
            file.step(spool::Event::Acknowledged(key));
            Attempt::Delivered(ack)
        }
        Err(error) if error.is_bad_input() => {
            stats.batches_refused.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                incarnation = key.incarnation,
                sequence = key.sequence,
                %error,
                "the control plane refused a spooled report batch as bad input; gave it up (counted as lost)"
            );
            let loss = file.step(spool::Event::Refused(key));
            count_spool_loss(buffer, loss);
            Attempt::Refused
        }
        Err(error) => {
            stats.failed_attempts.fetch_add(1, Ordering::Relaxed);
            Attempt::Failed(error)
        }
    };
    if file.spool().is_empty() {
        file.step(spool::Event::Persist);
    }
    sync_spool_stats(stats, file);
    outcome
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
    let (mut spool_file, loaded_loss) = SpoolFile::open(
        settings.spool.as_ref(),
        &shipper.identity().cluster,
        &shipper.identity().node,
    );
    count_spool_loss(&buffer, loaded_loss);
    sync_spool_stats(&stats, &spool_file);
    tokio::spawn(async move {
        let mut shutting_down = false;
        let mut flush = tokio::time::interval(settings.flush_interval);
        flush.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut depth = tokio::time::interval(settings.depth_interval);
        depth.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut watched: Vec<String> = Vec::new();
        let mut backoff = Duration::ZERO;
        let mut retry_at = tokio::time::Instant::now();
        let mut last_shipped = tokio::time::Instant::now();
        let mut failures = shipper::FailureLog::default();
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
                    Some(Command::ShuttingDown) => {
                        if !shutting_down {
                            shutting_down = true;
                            spool_file.step(spool::Event::ShuttingDown);
                        }
                        hand_over(&buffer, &shipper, &mut spool_file);
                        sync_spool_stats(&stats, &spool_file);
                    }
                    Some(Command::Stop { deadline, done }) => {
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
                        if !shutting_down {
                            spool_file.step(spool::Event::ShuttingDown);
                        }
                        // Everything into the spool (durable) first, then deliver it in
                        // order, retrying until the deadline (`--flush-timeout-ms`).
                        hand_over(&buffer, &shipper, &mut spool_file);
                        let delivered = loop {
                            if spool_file.spool().is_empty() {
                                break true;
                            }
                            let attempt = tokio::time::timeout_at(
                                deadline,
                                send_spooled(&mut spool_file, &shipper, &buffer, &stats),
                            );
                            match attempt.await {
                                Err(_) => break false,
                                Ok(Attempt::Delivered(ack)) => {
                                    failures.log_answered();
                                    for operation in &ack.operations {
                                        tracing::warn!(
                                            id = operation.id,
                                            address = %operation.address,
                                            operation = operation.operation.as_str(),
                                            "member operation not carried out: this agent is shutting down"
                                        );
                                    }
                                }
                                Ok(Attempt::Refused) => failures.log_answered(),
                                Ok(Attempt::Nothing) => {}
                                Ok(Attempt::Failed(error)) => {
                                    failures.log_failure("a last report batch", &error, None);
                                    let pause = tokio::time::Instant::now() + Duration::from_millis(200);
                                    tokio::time::sleep_until(pause.min(deadline)).await;
                                    if tokio::time::Instant::now() >= deadline {
                                        break false;
                                    }
                                }
                            }
                        };
                        // The file now holds exactly what is undelivered (nothing: removed).
                        spool_file.step(spool::Event::Persist);
                        sync_spool_stats(&stats, &spool_file);
                        if !delivered {
                            let held = spool_file.spool().held();
                            match spool_file.path() {
                                Some(path) if spool_file.write_errors() == 0 => tracing::info!(
                                    batches = held.batches,
                                    events = held.items.total() - held.items.depth_samples,
                                    path = %path.display(),
                                    "report batches not delivered within --flush-timeout-ms are spooled; the next start of this node delivers them"
                                ),
                                _ => tracing::warn!(
                                    batches = held.batches,
                                    membership = held.items.membership,
                                    singleton = held.items.singleton,
                                    router = held.items.router,
                                    dead_letters = held.items.dead_letters,
                                    health = held.items.health,
                                    depth_samples = held.items.depth_samples,
                                    "report batches not delivered within --flush-timeout-ms are lost (--report-spool-dir keeps them for the next start of this node)"
                                ),
                            }
                        }
                        let _ = done.send(delivered);
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
                    if shutting_down {
                        hand_over(&buffer, &shipper, &mut spool_file);
                    }
                    // The spool goes first: an earlier run's batches (and, while shutting
                    // down, everything) are delivered in the order they were cut.
                    match send_spooled(&mut spool_file, &shipper, &buffer, &stats).await {
                        Attempt::Nothing => {}
                        Attempt::Delivered(ack) => {
                            last_shipped = tokio::time::Instant::now();
                            failures.log_answered();
                            for operation in &ack.operations {
                                carry_out(&cluster, operation);
                            }
                            backoff = Duration::ZERO;
                            continue;
                        }
                        Attempt::Refused => {
                            last_shipped = tokio::time::Instant::now();
                            failures.log_answered();
                            backoff = Duration::ZERO;
                            continue;
                        }
                        Attempt::Failed(error) => {
                            backoff = (backoff * 2).clamp(Duration::from_millis(250), Duration::from_secs(10));
                            retry_at = tokio::time::Instant::now() + backoff;
                            failures.log_failure("a spooled report batch", &error, Some(backoff));
                            continue;
                        }
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
                            failures.log_answered();
                            buffer.lock().acknowledged(batch.sequence);
                            for operation in &ack.operations {
                                carry_out(&cluster, operation);
                            }
                            stats.batches_acknowledged.fetch_add(1, Ordering::Relaxed);
                            backoff = Duration::ZERO;
                        }
                        Err(error) if error.is_bad_input() => {
                            last_shipped = tokio::time::Instant::now();
                            failures.log_answered();
                            refused(&buffer, &stats, batch.sequence, &error);
                            backoff = Duration::ZERO;
                        }
                        Err(error) => {
                            stats.failed_attempts.fetch_add(1, Ordering::Relaxed);
                            backoff = (backoff * 2).clamp(Duration::from_millis(250), Duration::from_secs(10));
                            retry_at = tokio::time::Instant::now() + backoff;
                            failures.log_failure("a report batch", &error, Some(backoff));
                        }
                    }
                }
            }
        }
    });
    handle
}
