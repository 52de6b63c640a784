//! Troupe beside its peers, in one process and one run.
//!
//! The same four workloads run on Troupe, actix, ractor, kameo and a bare tokio mpsc hand-off
//! (the floor every actor runtime pays on top of):
//!
//! * (a) ping-pong: two actors bounce a counter; round trips per second.
//! * (b) fan-in: 4 sender tasks tell one actor; messages per second.
//! * (c) ask: a plain task asks one actor and awaits the reply, one at a time; p50 and p99 in µs.
//! * (d) spawn and stop 100,000 idle actors; actors per second, and the bytes allocated and not
//!   freed while they are all alive (measured with a counting global allocator), per actor.
//!
//! Each runtime runs on the configuration it is designed for: the floor and Troupe on both a
//! tokio `current_thread` runtime and a 2-worker multi-thread runtime (the workload's driver is
//! itself a task on a worker), actix on its own `System`, ractor and kameo on the 2-worker
//! multi-thread runtime. Like for like: every mailbox is unbounded (kameo's is chosen so; actix's
//! `do_send` ignores its bound), every sender is a plain task that yields every 128 tells, and
//! asks use each library's plain ask (Troupe's always arms its 5 s timeout, in its deadline
//! wheel; the peers' arm none).
//!
//! Each column (runtime configuration) runs in a child process of its own (this binary again,
//! with `--child N`), so no runtime's threads, heap or allocator state carry into the next.
//! Each figure is the median of 3 repetitions; each repetition of (a), (b) and (c) is sized by a
//! short probe run to last about half a second. `--quick` (or `TROUPE_BENCH_QUICK=1`) runs one
//! short repetition of everything with 10,000 actors in (d), as a smoke test. `--only ask,spawn`
//! runs only those workloads (of `ping-pong`, `fan-in`, `ask`, `spawn`) and `--runtimes
//! mpsc,troupe,actix` only those columns (of `mpsc`, `troupe`, `actix`, `ractor`, `kameo`); the
//! rest print as "-". The table goes to stdout, progress (with the range of the repetitions) to
//! stderr.
//!
//! ```text
//! CARGO_TARGET_DIR=/var/tmp/troupe-target-bench cargo bench -p troupe-bench --bench peers
//! CARGO_TARGET_DIR=/var/tmp/troupe-target-bench cargo bench -p troupe-bench --bench peers -- --quick
//! CARGO_TARGET_DIR=/var/tmp/troupe-target-bench cargo bench -p troupe-bench --bench peers -- --only ask --runtimes mpsc,troupe,actix
//! ```

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// Counting global allocator: the only `unsafe` in this crate.
///
/// Why unsafe: `GlobalAlloc` is an `unsafe trait` and its methods are `unsafe fn`s, so any
/// allocator wrapper needs it. This one forwards every call to `std::alloc::System` unchanged and,
/// while counting is switched on, adds and subtracts the requested sizes in one atomic, which is
/// how (d) measures bytes per idle actor. Counting is off outside that window, so the other
/// workloads pay one relaxed load per allocation and nothing else.
#[allow(unsafe_code)]
mod counting_alloc {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::sync::atomic::{AtomicBool, AtomicIsize, AtomicUsize, Ordering};

    static COUNTING: AtomicBool = AtomicBool::new(false);
    static LIVE: AtomicIsize = AtomicIsize::new(0);
    static ALLOCS: AtomicUsize = AtomicUsize::new(0);

    pub(crate) struct Counting;

    #[global_allocator]
    static GLOBAL: Counting = Counting;

    // Sizes come from `Layout`, which never exceeds `isize::MAX`, so the casts are lossless.
    #[allow(clippy::cast_possible_wrap)]
    fn add(bytes: usize) {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
            LIVE.fetch_add(bytes as isize, Ordering::Relaxed);
        }
    }

    #[allow(clippy::cast_possible_wrap)]
    fn sub(bytes: usize) {
        if COUNTING.load(Ordering::Relaxed) {
            LIVE.fetch_sub(bytes as isize, Ordering::Relaxed);
        }
    }

    // SAFETY: every method forwards to `System` with the caller's arguments unchanged, so the
    // `GlobalAlloc` contract is exactly `System`'s; the bookkeeping never touches the memory.
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            // SAFETY: forwarded unchanged (see above).
            let ptr = unsafe { System.alloc(layout) };
            if !ptr.is_null() {
                add(layout.size());
            }
            ptr
        }

        unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
            // SAFETY: forwarded unchanged (see above).
            let ptr = unsafe { System.alloc_zeroed(layout) };
            if !ptr.is_null() {
                add(layout.size());
            }
            ptr
        }

        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            // SAFETY: forwarded unchanged (see above).
            unsafe { System.dealloc(ptr, layout) };
            sub(layout.size());
        }

        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            // SAFETY: forwarded unchanged (see above).
            let new = unsafe { System.realloc(ptr, layout, new_size) };
            if !new.is_null() {
                sub(layout.size());
                add(new_size);
            }
            new
        }
    }

    /// Start counting from zero.
    pub(crate) fn start() {
        LIVE.store(0, Ordering::SeqCst);
        ALLOCS.store(0, Ordering::SeqCst);
        COUNTING.store(true, Ordering::SeqCst);
    }

    /// Bytes allocated and not freed since [`start`].
    pub(crate) fn live() -> isize {
        LIVE.load(Ordering::SeqCst)
    }

    /// Stop counting; returns the number of allocations (alloc and realloc calls) since
    /// [`start`].
    pub(crate) fn stop() -> usize {
        COUNTING.store(false, Ordering::SeqCst);
        ALLOCS.load(Ordering::SeqCst)
    }
}

/// Sender tasks in (b) yield to the scheduler after this many tells, so that on every runtime
/// the sink drains while the senders send (instead of one giant queue built and then drained).
const YIELD_EVERY: u64 = 128;
/// Senders in (b).
const SENDERS: u64 = 4;

/// Counts hits down to zero and wakes one waiter then.
struct Countdown {
    left: AtomicUsize,
    zero: Notify,
}

impl Countdown {
    fn new(n: usize) -> Arc<Self> {
        Arc::new(Self {
            left: AtomicUsize::new(n),
            zero: Notify::new(),
        })
    }

    fn hit(&self) {
        if self.left.fetch_sub(1, Ordering::AcqRel) == 1 {
            // `notify_one` stores a permit when nobody waits yet, so the wake is never lost.
            self.zero.notify_one();
        }
    }

    async fn wait(&self) {
        while self.left.load(Ordering::Acquire) != 0 {
            self.zero.notified().await;
        }
    }
}

/// What (d) measured in one repetition.
#[derive(Debug, Clone, Copy)]
struct SpawnFigures {
    /// From the first spawn until every actor has terminated.
    elapsed: Duration,
    /// From the first spawn until every actor has run its start hook.
    to_started: Duration,
    /// Bytes allocated and not freed while all actors were alive and idle.
    live_bytes: isize,
    /// Allocations from the first spawn until every actor has terminated.
    allocations: usize,
}

/// Latency percentiles of (c), in microseconds.
fn percentiles(mut nanos: Vec<u64>) -> (f64, f64) {
    nanos.sort_unstable();
    let at = |q: f64| {
        let index = ((nanos.len() as f64 - 1.0) * q).round() as usize;
        nanos[index] as f64 / 1_000.0
    };
    (at(0.50), at(0.99))
}

fn elapsed_nanos(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

// ---------------------------------------------------------------------------------------------
// The floor: bare tokio tasks and unbounded mpsc channels, no actor runtime.
// ---------------------------------------------------------------------------------------------
mod floor {
    use super::*;
    use tokio::sync::{mpsc, oneshot};

    enum Bounce {
        Start(u64, oneshot::Sender<()>),
        Ball(u64),
        Stop,
    }

    async fn bouncer(
        mut inbox: mpsc::UnboundedReceiver<Bounce>,
        peer: mpsc::UnboundedSender<Bounce>,
    ) {
        let mut done = None;
        while let Some(message) = inbox.recv().await {
            match message {
                Bounce::Start(n, reply) => {
                    done = Some(reply);
                    let _ = peer.send(Bounce::Ball(2 * n - 1));
                }
                Bounce::Ball(0) => {
                    if let Some(done) = done.take() {
                        let _ = done.send(());
                    }
                }
                Bounce::Ball(k) => {
                    let _ = peer.send(Bounce::Ball(k - 1));
                }
                Bounce::Stop => break,
            }
        }
    }

    pub(crate) async fn ping_pong(round_trips: u64) -> Duration {
        let (a_tx, a_rx) = mpsc::unbounded_channel();
        let (b_tx, b_rx) = mpsc::unbounded_channel();
        let a = tokio::spawn(bouncer(a_rx, b_tx.clone()));
        let b = tokio::spawn(bouncer(b_rx, a_tx.clone()));
        let (done_tx, done_rx) = oneshot::channel();
        let start = Instant::now();
        let _ = a_tx.send(Bounce::Start(round_trips, done_tx));
        done_rx.await.expect("ping-pong finishes");
        let elapsed = start.elapsed();
        let _ = a_tx.send(Bounce::Stop);
        let _ = b_tx.send(Bounce::Stop);
        let _ = a.await;
        let _ = b.await;
        elapsed
    }

    pub(crate) async fn fan_in(per_sender: u64) -> Duration {
        let (tx, mut rx) = mpsc::unbounded_channel::<u64>();
        let total = per_sender * SENDERS;
        let (done_tx, done_rx) = oneshot::channel();
        let sink = tokio::spawn(async move {
            let mut seen = 0u64;
            while rx.recv().await.is_some() {
                seen += 1;
                if seen == total {
                    let _ = done_tx.send(());
                    break;
                }
            }
        });
        let start = Instant::now();
        for _ in 0..SENDERS {
            let tx = tx.clone();
            tokio::spawn(async move {
                for i in 0..per_sender {
                    let _ = tx.send(i);
                    if i % YIELD_EVERY == YIELD_EVERY - 1 {
                        tokio::task::yield_now().await;
                    }
                }
            });
        }
        done_rx.await.expect("fan-in finishes");
        let elapsed = start.elapsed();
        let _ = sink.await;
        elapsed
    }

    pub(crate) async fn ask(asks: usize) -> Vec<u64> {
        let (tx, mut rx) = mpsc::unbounded_channel::<oneshot::Sender<u64>>();
        let server = tokio::spawn(async move {
            let mut count = 0u64;
            while let Some(reply) = rx.recv().await {
                count += 1;
                let _ = reply.send(count);
            }
        });
        let mut nanos = Vec::with_capacity(asks);
        for _ in 0..asks {
            let start = Instant::now();
            let (reply_tx, reply_rx) = oneshot::channel();
            let _ = tx.send(reply_tx);
            std::hint::black_box(reply_rx.await.expect("the server replies"));
            nanos.push(elapsed_nanos(start));
        }
        drop(tx);
        let _ = server.await;
        nanos
    }

    pub(crate) async fn spawn_stop(n: usize) -> SpawnFigures {
        let started = Countdown::new(n);
        let mut actors = Vec::with_capacity(n);
        counting_alloc::start();
        let start = Instant::now();
        for _ in 0..n {
            let (tx, mut rx) = mpsc::unbounded_channel::<()>();
            let started = Arc::clone(&started);
            let task = tokio::spawn(async move {
                started.hit();
                let _ = rx.recv().await;
            });
            actors.push((tx, task));
        }
        started.wait().await;
        let to_started = start.elapsed();
        let live_bytes = counting_alloc::live();
        for (tx, _) in &actors {
            let _ = tx.send(());
        }
        for (_, task) in &mut actors {
            let _ = task.await;
        }
        let elapsed = start.elapsed();
        let allocations = counting_alloc::stop();
        SpawnFigures {
            elapsed,
            to_started,
            live_bytes,
            allocations,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Troupe.
// ---------------------------------------------------------------------------------------------
mod troupe_peer {
    use super::*;
    use tokio::sync::oneshot;
    use troupe::{Actor, ActorError, ActorRef, ActorSystem, Context, Props, ReplyTo};

    enum Bounce {
        Peer(ActorRef<Bounce>),
        Start(u64, oneshot::Sender<()>),
        Ball(u64),
    }

    #[derive(Default)]
    struct Bouncer {
        peer: Option<ActorRef<Bounce>>,
        done: Option<oneshot::Sender<()>>,
    }

    impl Bouncer {
        fn pass(&self, k: u64) {
            if let Some(peer) = &self.peer {
                peer.tell(Bounce::Ball(k));
            }
        }
    }

    impl Actor for Bouncer {
        type Msg = Bounce;

        async fn handle(
            &mut self,
            msg: Bounce,
            _ctx: &mut Context<Self>,
        ) -> Result<(), ActorError> {
            match msg {
                Bounce::Peer(peer) => self.peer = Some(peer),
                Bounce::Start(n, done) => {
                    self.done = Some(done);
                    self.pass(2 * n - 1);
                }
                Bounce::Ball(0) => {
                    if let Some(done) = self.done.take() {
                        let _ = done.send(());
                    }
                }
                Bounce::Ball(k) => self.pass(k - 1),
            }
            Ok(())
        }
    }

    fn system() -> ActorSystem {
        ActorSystem::new("bench").expect("a tokio runtime is running")
    }

    pub(crate) async fn ping_pong(round_trips: u64) -> Duration {
        let system = system();
        let a = system
            .spawn("a", Props::new(Bouncer::default))
            .expect("spawn a");
        let b = system
            .spawn("b", Props::new(Bouncer::default))
            .expect("spawn b");
        a.tell(Bounce::Peer(b.clone()));
        b.tell(Bounce::Peer(a.clone()));
        let (done_tx, done_rx) = oneshot::channel();
        let start = Instant::now();
        a.tell(Bounce::Start(round_trips, done_tx));
        done_rx.await.expect("ping-pong finishes");
        let elapsed = start.elapsed();
        system.shutdown().await;
        elapsed
    }

    enum Sink {
        Arm(u64, oneshot::Sender<()>),
        Hit,
    }

    #[derive(Default)]
    struct SinkActor {
        seen: u64,
        target: u64,
        done: Option<oneshot::Sender<()>>,
    }

    impl Actor for SinkActor {
        type Msg = Sink;

        async fn handle(&mut self, msg: Sink, _ctx: &mut Context<Self>) -> Result<(), ActorError> {
            match msg {
                Sink::Arm(target, done) => {
                    self.target = target;
                    self.done = Some(done);
                }
                Sink::Hit => {
                    self.seen += 1;
                    if self.seen == self.target
                        && let Some(done) = self.done.take()
                    {
                        let _ = done.send(());
                    }
                }
            }
            Ok(())
        }
    }

    pub(crate) async fn fan_in(per_sender: u64) -> Duration {
        let system = system();
        let sink = system
            .spawn("sink", Props::new(SinkActor::default))
            .expect("spawn sink");
        let (done_tx, done_rx) = oneshot::channel();
        sink.tell(Sink::Arm(per_sender * SENDERS, done_tx));
        let start = Instant::now();
        for _ in 0..SENDERS {
            let sink = sink.clone();
            tokio::spawn(async move {
                for i in 0..per_sender {
                    sink.tell(Sink::Hit);
                    if i % YIELD_EVERY == YIELD_EVERY - 1 {
                        tokio::task::yield_now().await;
                    }
                }
            });
        }
        done_rx.await.expect("fan-in finishes");
        let elapsed = start.elapsed();
        system.shutdown().await;
        elapsed
    }

    enum Echo {
        Get { reply: ReplyTo<u64> },
    }

    #[derive(Default)]
    struct EchoActor {
        count: u64,
    }

    impl Actor for EchoActor {
        type Msg = Echo;

        async fn handle(&mut self, msg: Echo, _ctx: &mut Context<Self>) -> Result<(), ActorError> {
            let Echo::Get { reply } = msg;
            self.count += 1;
            reply.send(self.count);
            Ok(())
        }
    }

    pub(crate) async fn ask(asks: usize) -> Vec<u64> {
        let system = system();
        let echo = system
            .spawn("echo", Props::new(EchoActor::default))
            .expect("spawn echo");
        let mut nanos = Vec::with_capacity(asks);
        for _ in 0..asks {
            let start = Instant::now();
            let value = echo
                .ask(|reply| Echo::Get { reply })
                .timeout(Duration::from_secs(5))
                .await
                .expect("the echo actor replies");
            std::hint::black_box(value);
            nanos.push(elapsed_nanos(start));
        }
        system.shutdown().await;
        nanos
    }

    struct Idle {
        started: Arc<Countdown>,
    }

    impl Actor for Idle {
        type Msg = ();

        async fn pre_start(&mut self, _ctx: &mut Context<Self>) -> Result<(), ActorError> {
            self.started.hit();
            Ok(())
        }

        async fn handle(&mut self, _msg: (), _ctx: &mut Context<Self>) -> Result<(), ActorError> {
            Ok(())
        }
    }

    pub(crate) async fn spawn_stop(n: usize) -> SpawnFigures {
        let system = system();
        let started = Countdown::new(n);
        let mut actors = Vec::with_capacity(n);
        // Troupe actors need unique names; one reused buffer keeps the naming itself free.
        let mut name = String::with_capacity(16);
        counting_alloc::start();
        let start = Instant::now();
        for i in 0..n {
            name.clear();
            let _ = write!(name, "w{i}");
            let started = Arc::clone(&started);
            let props = Props::new(move || Idle {
                started: Arc::clone(&started),
            });
            actors.push(system.spawn(&name, props).expect("spawn idle actor"));
        }
        started.wait().await;
        let to_started = start.elapsed();
        let live_bytes = counting_alloc::live();
        for actor in &actors {
            actor.stop();
        }
        for actor in &actors {
            actor.terminated().await;
        }
        let elapsed = start.elapsed();
        let allocations = counting_alloc::stop();
        drop(actors);
        system.shutdown().await;
        SpawnFigures {
            elapsed,
            to_started,
            live_bytes,
            allocations,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// actix 0.13, on its own System (a single-threaded arbiter).
// ---------------------------------------------------------------------------------------------
mod actix_peer {
    use super::*;
    use actix::prelude::*;
    use tokio::sync::oneshot;

    struct Stop;
    impl Message for Stop {
        type Result = ();
    }

    #[derive(Default)]
    struct Bouncer {
        peer: Option<Addr<Bouncer>>,
        done: Option<oneshot::Sender<()>>,
    }

    impl Actor for Bouncer {
        type Context = Context<Self>;
    }

    struct Peer(Addr<Bouncer>);
    impl Message for Peer {
        type Result = ();
    }

    struct Start(u64, oneshot::Sender<()>);
    impl Message for Start {
        type Result = ();
    }

    struct Ball(u64);
    impl Message for Ball {
        type Result = ();
    }

    impl Bouncer {
        fn pass(&self, k: u64) {
            if let Some(peer) = &self.peer {
                peer.do_send(Ball(k));
            }
        }
    }

    impl Handler<Peer> for Bouncer {
        type Result = ();
        fn handle(&mut self, Peer(peer): Peer, _ctx: &mut Context<Self>) {
            self.peer = Some(peer);
        }
    }

    impl Handler<Start> for Bouncer {
        type Result = ();
        fn handle(&mut self, Start(n, done): Start, _ctx: &mut Context<Self>) {
            self.done = Some(done);
            self.pass(2 * n - 1);
        }
    }

    impl Handler<Ball> for Bouncer {
        type Result = ();
        fn handle(&mut self, Ball(k): Ball, _ctx: &mut Context<Self>) {
            if k == 0 {
                if let Some(done) = self.done.take() {
                    let _ = done.send(());
                }
            } else {
                self.pass(k - 1);
            }
        }
    }

    impl Handler<Stop> for Bouncer {
        type Result = ();
        fn handle(&mut self, _: Stop, ctx: &mut Context<Self>) {
            ctx.stop();
        }
    }

    pub(crate) async fn ping_pong(round_trips: u64) -> Duration {
        let a = Bouncer::default().start();
        let b = Bouncer::default().start();
        a.do_send(Peer(b.clone()));
        b.do_send(Peer(a.clone()));
        let (done_tx, done_rx) = oneshot::channel();
        let start = Instant::now();
        a.do_send(Start(round_trips, done_tx));
        done_rx.await.expect("ping-pong finishes");
        let elapsed = start.elapsed();
        a.do_send(Stop);
        b.do_send(Stop);
        elapsed
    }

    #[derive(Default)]
    struct SinkActor {
        seen: u64,
        target: u64,
        done: Option<oneshot::Sender<()>>,
    }

    impl Actor for SinkActor {
        type Context = Context<Self>;
    }

    struct Arm(u64, oneshot::Sender<()>);
    impl Message for Arm {
        type Result = ();
    }

    struct Hit;
    impl Message for Hit {
        type Result = ();
    }

    impl Handler<Arm> for SinkActor {
        type Result = ();
        fn handle(&mut self, Arm(target, done): Arm, _ctx: &mut Context<Self>) {
            self.target = target;
            self.done = Some(done);
        }
    }

    impl Handler<Hit> for SinkActor {
        type Result = ();
        fn handle(&mut self, _: Hit, _ctx: &mut Context<Self>) {
            self.seen += 1;
            if self.seen == self.target
                && let Some(done) = self.done.take()
            {
                let _ = done.send(());
            }
        }
    }

    impl Handler<Stop> for SinkActor {
        type Result = ();
        fn handle(&mut self, _: Stop, ctx: &mut Context<Self>) {
            ctx.stop();
        }
    }

    pub(crate) async fn fan_in(per_sender: u64) -> Duration {
        let sink = SinkActor::default().start();
        let (done_tx, done_rx) = oneshot::channel();
        sink.do_send(Arm(per_sender * SENDERS, done_tx));
        let start = Instant::now();
        for _ in 0..SENDERS {
            let sink = sink.clone();
            actix::spawn(async move {
                for i in 0..per_sender {
                    sink.do_send(Hit);
                    if i % YIELD_EVERY == YIELD_EVERY - 1 {
                        tokio::task::yield_now().await;
                    }
                }
            });
        }
        done_rx.await.expect("fan-in finishes");
        let elapsed = start.elapsed();
        sink.do_send(Stop);
        elapsed
    }

    #[derive(Default)]
    struct EchoActor {
        count: u64,
    }

    impl Actor for EchoActor {
        type Context = Context<Self>;
    }

    struct Get;
    impl Message for Get {
        type Result = u64;
    }

    impl Handler<Get> for EchoActor {
        type Result = MessageResult<Get>;
        fn handle(&mut self, _: Get, _ctx: &mut Context<Self>) -> MessageResult<Get> {
            self.count += 1;
            MessageResult(self.count)
        }
    }

    impl Handler<Stop> for EchoActor {
        type Result = ();
        fn handle(&mut self, _: Stop, ctx: &mut Context<Self>) {
            ctx.stop();
        }
    }

    pub(crate) async fn ask(asks: usize) -> Vec<u64> {
        let echo = EchoActor::default().start();
        let mut nanos = Vec::with_capacity(asks);
        for _ in 0..asks {
            let start = Instant::now();
            let value = echo.send(Get).await.expect("the echo actor replies");
            std::hint::black_box(value);
            nanos.push(elapsed_nanos(start));
        }
        echo.do_send(Stop);
        nanos
    }

    struct Idle {
        started: Arc<Countdown>,
        stopped: Arc<Countdown>,
    }

    impl Actor for Idle {
        type Context = Context<Self>;

        fn started(&mut self, _ctx: &mut Context<Self>) {
            self.started.hit();
        }

        fn stopped(&mut self, _ctx: &mut Context<Self>) {
            self.stopped.hit();
        }
    }

    impl Handler<Stop> for Idle {
        type Result = ();
        fn handle(&mut self, _: Stop, ctx: &mut Context<Self>) {
            ctx.stop();
        }
    }

    pub(crate) async fn spawn_stop(n: usize) -> SpawnFigures {
        let started = Countdown::new(n);
        let stopped = Countdown::new(n);
        let mut actors = Vec::with_capacity(n);
        counting_alloc::start();
        let start = Instant::now();
        for _ in 0..n {
            actors.push(
                Idle {
                    started: Arc::clone(&started),
                    stopped: Arc::clone(&stopped),
                }
                .start(),
            );
        }
        started.wait().await;
        let to_started = start.elapsed();
        let live_bytes = counting_alloc::live();
        for actor in &actors {
            actor.do_send(Stop);
        }
        // actix has no "wait until terminated" on an address; `stopped` counts down instead.
        stopped.wait().await;
        let elapsed = start.elapsed();
        let allocations = counting_alloc::stop();
        SpawnFigures {
            elapsed,
            to_started,
            live_bytes,
            allocations,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// ractor, on a tokio multi-thread runtime.
// ---------------------------------------------------------------------------------------------
mod ractor_peer {
    use super::*;
    use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
    use tokio::sync::oneshot;

    enum Bounce {
        Peer(ActorRef<Bounce>),
        Start(u64, oneshot::Sender<()>),
        Ball(u64),
    }

    struct Bouncer;

    #[derive(Default)]
    struct BouncerState {
        peer: Option<ActorRef<Bounce>>,
        done: Option<oneshot::Sender<()>>,
    }

    impl BouncerState {
        fn pass(&self, k: u64) {
            if let Some(peer) = &self.peer {
                let _ = peer.cast(Bounce::Ball(k));
            }
        }
    }

    impl Actor for Bouncer {
        type Msg = Bounce;
        type State = BouncerState;
        type Arguments = ();

        async fn pre_start(
            &self,
            _myself: ActorRef<Bounce>,
            _args: (),
        ) -> Result<BouncerState, ActorProcessingErr> {
            Ok(BouncerState::default())
        }

        async fn handle(
            &self,
            _myself: ActorRef<Bounce>,
            msg: Bounce,
            state: &mut BouncerState,
        ) -> Result<(), ActorProcessingErr> {
            match msg {
                Bounce::Peer(peer) => state.peer = Some(peer),
                Bounce::Start(n, done) => {
                    state.done = Some(done);
                    state.pass(2 * n - 1);
                }
                Bounce::Ball(0) => {
                    if let Some(done) = state.done.take() {
                        let _ = done.send(());
                    }
                }
                Bounce::Ball(k) => state.pass(k - 1),
            }
            Ok(())
        }
    }

    pub(crate) async fn ping_pong(round_trips: u64) -> Duration {
        let (a, a_task) = Actor::spawn(None, Bouncer, ()).await.expect("spawn a");
        let (b, b_task) = Actor::spawn(None, Bouncer, ()).await.expect("spawn b");
        let _ = a.cast(Bounce::Peer(b.clone()));
        let _ = b.cast(Bounce::Peer(a.clone()));
        let (done_tx, done_rx) = oneshot::channel();
        let start = Instant::now();
        let _ = a.cast(Bounce::Start(round_trips, done_tx));
        done_rx.await.expect("ping-pong finishes");
        let elapsed = start.elapsed();
        a.stop(None);
        b.stop(None);
        let _ = a_task.await;
        let _ = b_task.await;
        elapsed
    }

    enum Sink {
        Arm(u64, oneshot::Sender<()>),
        Hit,
    }

    struct SinkActor;

    #[derive(Default)]
    struct SinkState {
        seen: u64,
        target: u64,
        done: Option<oneshot::Sender<()>>,
    }

    impl Actor for SinkActor {
        type Msg = Sink;
        type State = SinkState;
        type Arguments = ();

        async fn pre_start(
            &self,
            _myself: ActorRef<Sink>,
            _args: (),
        ) -> Result<SinkState, ActorProcessingErr> {
            Ok(SinkState::default())
        }

        async fn handle(
            &self,
            _myself: ActorRef<Sink>,
            msg: Sink,
            state: &mut SinkState,
        ) -> Result<(), ActorProcessingErr> {
            match msg {
                Sink::Arm(target, done) => {
                    state.target = target;
                    state.done = Some(done);
                }
                Sink::Hit => {
                    state.seen += 1;
                    if state.seen == state.target
                        && let Some(done) = state.done.take()
                    {
                        let _ = done.send(());
                    }
                }
            }
            Ok(())
        }
    }

    pub(crate) async fn fan_in(per_sender: u64) -> Duration {
        let (sink, sink_task) = Actor::spawn(None, SinkActor, ()).await.expect("spawn sink");
        let (done_tx, done_rx) = oneshot::channel();
        let _ = sink.cast(Sink::Arm(per_sender * SENDERS, done_tx));
        let start = Instant::now();
        for _ in 0..SENDERS {
            let sink = sink.clone();
            tokio::spawn(async move {
                for i in 0..per_sender {
                    let _ = sink.cast(Sink::Hit);
                    if i % YIELD_EVERY == YIELD_EVERY - 1 {
                        tokio::task::yield_now().await;
                    }
                }
            });
        }
        done_rx.await.expect("fan-in finishes");
        let elapsed = start.elapsed();
        sink.stop(None);
        let _ = sink_task.await;
        elapsed
    }

    enum Echo {
        Get(RpcReplyPort<u64>),
    }

    struct EchoActor;

    impl Actor for EchoActor {
        type Msg = Echo;
        type State = u64;
        type Arguments = ();

        async fn pre_start(
            &self,
            _myself: ActorRef<Echo>,
            _args: (),
        ) -> Result<u64, ActorProcessingErr> {
            Ok(0)
        }

        async fn handle(
            &self,
            _myself: ActorRef<Echo>,
            msg: Echo,
            count: &mut u64,
        ) -> Result<(), ActorProcessingErr> {
            let Echo::Get(reply) = msg;
            *count += 1;
            let _ = reply.send(*count);
            Ok(())
        }
    }

    pub(crate) async fn ask(asks: usize) -> Vec<u64> {
        let (echo, echo_task) = Actor::spawn(None, EchoActor, ()).await.expect("spawn echo");
        let mut nanos = Vec::with_capacity(asks);
        for _ in 0..asks {
            let start = Instant::now();
            let value = echo.call(Echo::Get, None).await;
            match value {
                Ok(ractor::rpc::CallResult::Success(value)) => {
                    std::hint::black_box(value);
                }
                _ => panic!("the echo actor did not reply"),
            }
            nanos.push(elapsed_nanos(start));
        }
        echo.stop(None);
        let _ = echo_task.await;
        nanos
    }

    struct Idle;

    impl Actor for Idle {
        type Msg = ();
        type State = ();
        type Arguments = Arc<Countdown>;

        async fn pre_start(
            &self,
            _myself: ActorRef<()>,
            started: Arc<Countdown>,
        ) -> Result<(), ActorProcessingErr> {
            started.hit();
            Ok(())
        }
    }

    pub(crate) async fn spawn_stop(n: usize) -> SpawnFigures {
        let started = Countdown::new(n);
        let mut actors = Vec::with_capacity(n);
        counting_alloc::start();
        let start = Instant::now();
        for _ in 0..n {
            actors.push(
                Actor::spawn(None, Idle, Arc::clone(&started))
                    .await
                    .expect("spawn idle actor"),
            );
        }
        started.wait().await;
        let to_started = start.elapsed();
        let live_bytes = counting_alloc::live();
        for (actor, _) in &actors {
            actor.stop(None);
        }
        for (_, task) in &mut actors {
            let _ = task.await;
        }
        let elapsed = start.elapsed();
        let allocations = counting_alloc::stop();
        SpawnFigures {
            elapsed,
            to_started,
            live_bytes,
            allocations,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// kameo, on a tokio multi-thread runtime, with unbounded mailboxes like the others.
// ---------------------------------------------------------------------------------------------
mod kameo_peer {
    use super::*;
    use kameo::Actor;
    use kameo::actor::{ActorRef, Spawn};
    use kameo::mailbox;
    use kameo::message::{Context, Message};
    use std::convert::Infallible;
    use tokio::sync::oneshot;

    #[derive(Default)]
    struct Bouncer {
        peer: Option<ActorRef<Bouncer>>,
        done: Option<oneshot::Sender<()>>,
    }

    impl Actor for Bouncer {
        type Args = Self;
        type Error = Infallible;

        async fn on_start(args: Self, _actor_ref: ActorRef<Self>) -> Result<Self, Infallible> {
            Ok(args)
        }
    }

    struct Peer(ActorRef<Bouncer>);
    struct Start(u64, oneshot::Sender<()>);
    struct Ball(u64);

    impl Bouncer {
        fn pass(&self, k: u64) {
            if let Some(peer) = &self.peer {
                let _ = peer.tell(Ball(k)).try_send();
            }
        }
    }

    impl Message<Peer> for Bouncer {
        type Reply = ();
        async fn handle(&mut self, Peer(peer): Peer, _ctx: &mut Context<Self, ()>) {
            self.peer = Some(peer);
        }
    }

    impl Message<Start> for Bouncer {
        type Reply = ();
        async fn handle(&mut self, Start(n, done): Start, _ctx: &mut Context<Self, ()>) {
            self.done = Some(done);
            self.pass(2 * n - 1);
        }
    }

    impl Message<Ball> for Bouncer {
        type Reply = ();
        async fn handle(&mut self, Ball(k): Ball, _ctx: &mut Context<Self, ()>) {
            if k == 0 {
                if let Some(done) = self.done.take() {
                    let _ = done.send(());
                }
            } else {
                self.pass(k - 1);
            }
        }
    }

    fn spawn<A: Actor>(args: A::Args) -> ActorRef<A> {
        A::spawn_with_mailbox(args, mailbox::unbounded())
    }

    pub(crate) async fn ping_pong(round_trips: u64) -> Duration {
        let a = spawn::<Bouncer>(Bouncer::default());
        let b = spawn::<Bouncer>(Bouncer::default());
        let _ = a.tell(Peer(b.clone())).try_send();
        let _ = b.tell(Peer(a.clone())).try_send();
        let (done_tx, done_rx) = oneshot::channel();
        let start = Instant::now();
        let _ = a.tell(Start(round_trips, done_tx)).try_send();
        done_rx.await.expect("ping-pong finishes");
        let elapsed = start.elapsed();
        let _ = a.stop_gracefully().await;
        let _ = b.stop_gracefully().await;
        a.wait_for_shutdown().await;
        b.wait_for_shutdown().await;
        elapsed
    }

    #[derive(Default)]
    struct SinkActor {
        seen: u64,
        target: u64,
        done: Option<oneshot::Sender<()>>,
    }

    impl Actor for SinkActor {
        type Args = Self;
        type Error = Infallible;

        async fn on_start(args: Self, _actor_ref: ActorRef<Self>) -> Result<Self, Infallible> {
            Ok(args)
        }
    }

    struct Arm(u64, oneshot::Sender<()>);
    struct Hit;

    impl Message<Arm> for SinkActor {
        type Reply = ();
        async fn handle(&mut self, Arm(target, done): Arm, _ctx: &mut Context<Self, ()>) {
            self.target = target;
            self.done = Some(done);
        }
    }

    impl Message<Hit> for SinkActor {
        type Reply = ();
        async fn handle(&mut self, _: Hit, _ctx: &mut Context<Self, ()>) {
            self.seen += 1;
            if self.seen == self.target
                && let Some(done) = self.done.take()
            {
                let _ = done.send(());
            }
        }
    }

    pub(crate) async fn fan_in(per_sender: u64) -> Duration {
        let sink = spawn::<SinkActor>(SinkActor::default());
        let (done_tx, done_rx) = oneshot::channel();
        let _ = sink.tell(Arm(per_sender * SENDERS, done_tx)).try_send();
        let start = Instant::now();
        for _ in 0..SENDERS {
            let sink = sink.clone();
            tokio::spawn(async move {
                for i in 0..per_sender {
                    let _ = sink.tell(Hit).try_send();
                    if i % YIELD_EVERY == YIELD_EVERY - 1 {
                        tokio::task::yield_now().await;
                    }
                }
            });
        }
        done_rx.await.expect("fan-in finishes");
        let elapsed = start.elapsed();
        let _ = sink.stop_gracefully().await;
        sink.wait_for_shutdown().await;
        elapsed
    }

    #[derive(Default)]
    struct EchoActor {
        count: u64,
    }

    impl Actor for EchoActor {
        type Args = Self;
        type Error = Infallible;

        async fn on_start(args: Self, _actor_ref: ActorRef<Self>) -> Result<Self, Infallible> {
            Ok(args)
        }
    }

    struct Get;

    impl Message<Get> for EchoActor {
        type Reply = u64;
        async fn handle(&mut self, _: Get, _ctx: &mut Context<Self, u64>) -> u64 {
            self.count += 1;
            self.count
        }
    }

    pub(crate) async fn ask(asks: usize) -> Vec<u64> {
        let echo = spawn::<EchoActor>(EchoActor::default());
        let mut nanos = Vec::with_capacity(asks);
        for _ in 0..asks {
            let start = Instant::now();
            match echo.ask(Get).await {
                Ok(value) => {
                    std::hint::black_box(value);
                }
                Err(_) => panic!("the echo actor did not reply"),
            }
            nanos.push(elapsed_nanos(start));
        }
        let _ = echo.stop_gracefully().await;
        echo.wait_for_shutdown().await;
        nanos
    }

    struct Idle {
        started: Arc<Countdown>,
    }

    impl Actor for Idle {
        type Args = Self;
        type Error = Infallible;

        async fn on_start(args: Self, _actor_ref: ActorRef<Self>) -> Result<Self, Infallible> {
            args.started.hit();
            Ok(args)
        }
    }

    pub(crate) async fn spawn_stop(n: usize) -> SpawnFigures {
        let started = Countdown::new(n);
        let mut actors = Vec::with_capacity(n);
        counting_alloc::start();
        let start = Instant::now();
        for _ in 0..n {
            actors.push(spawn::<Idle>(Idle {
                started: Arc::clone(&started),
            }));
        }
        started.wait().await;
        let to_started = start.elapsed();
        let live_bytes = counting_alloc::live();
        for actor in &actors {
            let _ = actor.stop_gracefully().await;
        }
        for actor in &actors {
            actor.wait_for_shutdown().await;
        }
        let elapsed = start.elapsed();
        let allocations = counting_alloc::stop();
        SpawnFigures {
            elapsed,
            to_started,
            live_bytes,
            allocations,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The suite: calibrate, repeat, take medians.
// ---------------------------------------------------------------------------------------------

/// How long and how often to run.
#[derive(Debug, Clone, Copy)]
struct Plan {
    quick: bool,
    /// Which workloads run (`--only`); the others print as "-".
    only: Workloads,
    reps: usize,
    /// Aim for about this long per repetition of (a), (b) and (c).
    target: Duration,
    /// Actors in (d).
    spawn_n: usize,
}

impl Plan {
    fn new(quick: bool, only: Workloads) -> Self {
        if quick {
            Self {
                quick,
                only,
                reps: 1,
                target: Duration::from_millis(30),
                spawn_n: 10_000,
            }
        } else {
            Self {
                quick,
                only,
                reps: 3,
                target: Duration::from_millis(500),
                spawn_n: 100_000,
            }
        }
    }
}

/// Probe sizes used to calibrate (they also serve as warm-up).
const PROBE_ROUND_TRIPS: u64 = 5_000;
const PROBE_PER_SENDER: u64 = 10_000;
const PROBE_ASKS: usize = 2_000;

/// Scale a probe of `n` units that took `took` so one repetition lasts about `target`.
fn scale(n: u64, took: Duration, target: Duration) -> u64 {
    let per_unit = took.as_secs_f64() / n as f64;
    let scaled = (target.as_secs_f64() / per_unit.max(1e-12)) as u64;
    scaled.clamp(n, 50_000_000)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// The medians one runtime configuration produced (NaN for a workload that did not run).
#[derive(Debug, Clone, Copy)]
struct Figures {
    /// (a) round trips per second.
    ping_pong: f64,
    /// (b) messages per second.
    fan_in: f64,
    /// (c) µs.
    ask_p50: f64,
    /// (c) µs.
    ask_p99: f64,
    /// (d) actors per second, spawn to terminated.
    spawn_rate: f64,
    /// (d) µs per actor from the first spawn until all have started.
    spawn_us: f64,
    /// (d) bytes allocated and not freed per idle actor.
    idle_bytes: f64,
    /// (d) allocations per actor over spawn and stop.
    allocs: f64,
}

impl Figures {
    const NOT_RUN: Self = Self {
        ping_pong: f64::NAN,
        fan_in: f64::NAN,
        ask_p50: f64::NAN,
        ask_p99: f64::NAN,
        spawn_rate: f64::NAN,
        spawn_us: f64::NAN,
        idle_bytes: f64::NAN,
        allocs: f64::NAN,
    };

    fn to_array(self) -> [f64; 8] {
        [
            self.ping_pong,
            self.fan_in,
            self.ask_p50,
            self.ask_p99,
            self.spawn_rate,
            self.spawn_us,
            self.idle_bytes,
            self.allocs,
        ]
    }

    fn from_array(v: [f64; 8]) -> Self {
        let [
            ping_pong,
            fan_in,
            ask_p50,
            ask_p99,
            spawn_rate,
            spawn_us,
            idle_bytes,
            allocs,
        ] = v;
        Self {
            ping_pong,
            fan_in,
            ask_p50,
            ask_p99,
            spawn_rate,
            spawn_us,
            idle_bytes,
            allocs,
        }
    }

    /// The line a child process prints for its parent (exact: the bits of each `f64`).
    fn to_line(self) -> String {
        let bits: Vec<String> = self
            .to_array()
            .iter()
            .map(|v| format!("{:016x}", v.to_bits()))
            .collect();
        format!("{CHILD_FIGURES} {}", bits.join(" "))
    }

    fn from_line(line: &str) -> Option<Self> {
        let rest = line.strip_prefix(CHILD_FIGURES)?;
        let values: Vec<f64> = rest
            .split_whitespace()
            .map(|word| u64::from_str_radix(word, 16).map(f64::from_bits))
            .collect::<Result<_, _>>()
            .ok()?;
        Some(Self::from_array(values.try_into().ok()?))
    }
}

/// What a child process prints before its figures.
const CHILD_FIGURES: &str = "troupe-bench-figures:";

/// One of the four workloads, for `--only`.
#[derive(Debug, Clone, Copy)]
enum Workload {
    PingPong,
    FanIn,
    Ask,
    Spawn,
}

impl Workload {
    const ALL: [(&'static str, Workload); 4] = [
        ("ping-pong", Workload::PingPong),
        ("fan-in", Workload::FanIn),
        ("ask", Workload::Ask),
        ("spawn", Workload::Spawn),
    ];
}

/// A set of workloads.
#[derive(Debug, Clone, Copy)]
struct Workloads(u8);

impl Workloads {
    const ALL: Self = Self(0b1111);

    fn has(self, workload: Workload) -> bool {
        self.0 & (1 << workload as u8) != 0
    }

    /// `ask,spawn` -> those two; an unknown name is an error naming the allowed ones.
    fn parse(list: &str) -> Result<Self, String> {
        let mut set = 0;
        for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let Some((_, workload)) = Workload::ALL.iter().find(|(known, _)| *known == name) else {
                return Err(format!(
                    "--only: unknown workload {name:?}; allowed: ping-pong, fan-in, ask, spawn (comma-separated)"
                ));
            };
            set |= 1 << *workload as u8;
        }
        if set == 0 {
            return Err("--only: name at least one of ping-pong, fan-in, ask, spawn".to_owned());
        }
        Ok(Self(set))
    }
}

/// The repetitions of one figure, for the progress lines: "[min .. max]".
fn spread(values: &[f64], show: fn(f64) -> String) -> String {
    let min = values.iter().copied().fold(f64::MAX, f64::min);
    let max = values.iter().copied().fold(f64::MIN, f64::max);
    format!("[{} .. {}]", show(min), show(max))
}

fn micros(value: f64) -> String {
    format!("{value:.2}")
}

/// Run the workloads of module `$m` that `$plan` selects, printing each median with the range
/// of its repetitions to stderr as it goes.
macro_rules! suite {
    ($label:expr, $m:ident, $plan:expr) => {
        async move {
            let label: &str = $label;
            let plan: Plan = $plan;
            let mut figures = Figures::NOT_RUN;

            if plan.only.has(Workload::PingPong) {
                let probe = $m::ping_pong(PROBE_ROUND_TRIPS).await;
                let n = scale(PROBE_ROUND_TRIPS, probe, plan.target);
                let mut rates = Vec::new();
                for _ in 0..plan.reps {
                    rates.push(n as f64 / $m::ping_pong(n).await.as_secs_f64());
                }
                let range = spread(&rates, si);
                figures.ping_pong = median(rates);
                eprintln!(
                    "  {label:<11} (a) ping-pong  {n:>9} round trips: {}/s {range}",
                    si(figures.ping_pong)
                );
            }

            if plan.only.has(Workload::FanIn) {
                let probe = $m::fan_in(PROBE_PER_SENDER).await;
                let n = scale(PROBE_PER_SENDER, probe, plan.target);
                let mut rates = Vec::new();
                for _ in 0..plan.reps {
                    rates.push((n * SENDERS) as f64 / $m::fan_in(n).await.as_secs_f64());
                }
                let range = spread(&rates, si);
                figures.fan_in = median(rates);
                eprintln!(
                    "  {label:<11} (b) fan-in     {:>9} messages:    {}/s {range}",
                    n * SENDERS,
                    si(figures.fan_in)
                );
            }

            if plan.only.has(Workload::Ask) {
                let probe_start = Instant::now();
                let _ = $m::ask(PROBE_ASKS).await;
                let probe = probe_start.elapsed();
                let n = scale(PROBE_ASKS as u64, probe, plan.target) as usize;
                let (mut p50s, mut p99s) = (Vec::new(), Vec::new());
                for _ in 0..plan.reps {
                    let (p50, p99) = percentiles($m::ask(n).await);
                    p50s.push(p50);
                    p99s.push(p99);
                }
                let (p50_range, p99_range) = (spread(&p50s, micros), spread(&p99s, micros));
                let (ask_p50, ask_p99) = (median(p50s), median(p99s));
                figures.ask_p50 = ask_p50;
                figures.ask_p99 = ask_p99;
                eprintln!(
                    "  {label:<11} (c) ask        {n:>9} asks:        p50 {ask_p50:.2} µs {p50_range}, p99 {ask_p99:.2} µs {p99_range}"
                );
            }

            if plan.only.has(Workload::Spawn) {
                let (mut rates, mut spawn_uss, mut bytes, mut allocs) =
                    (Vec::new(), Vec::new(), Vec::new(), Vec::new());
                for _ in 0..plan.reps {
                    let one = $m::spawn_stop(plan.spawn_n).await;
                    let n = plan.spawn_n as f64;
                    rates.push(n / one.elapsed.as_secs_f64());
                    spawn_uss.push(one.to_started.as_secs_f64() * 1e6 / n);
                    bytes.push(one.live_bytes as f64 / n);
                    allocs.push(one.allocations as f64 / n);
                }
                let range = spread(&rates, si);
                figures.spawn_rate = median(rates);
                figures.spawn_us = median(spawn_uss);
                figures.idle_bytes = median(bytes);
                figures.allocs = median(allocs);
                eprintln!(
                    "  {label:<11} (d) spawn+stop {:>9} actors:      {}/s {range}, spawn {:.2} µs, {:.0} B and {:.1} allocations per actor",
                    plan.spawn_n,
                    si(figures.spawn_rate),
                    figures.spawn_us,
                    figures.idle_bytes,
                    figures.allocs
                );
            }

            figures
        }
    };
}

fn multi_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("build a multi-thread runtime")
}

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("build a current-thread runtime")
}

/// Run `suite` with its driver as a task on a worker (not on the `block_on` thread), so the
/// whole workload lives on the runtime's 2 workers.
fn on_multi_thread<F>(suite: F) -> Figures
where
    F: std::future::Future<Output = Figures> + Send + 'static,
{
    let runtime = multi_thread();
    let figures = runtime
        .block_on(runtime.spawn(suite))
        .expect("the suite does not panic");
    runtime.shutdown_timeout(Duration::from_secs(5));
    figures
}

fn on_current_thread<F>(suite: F) -> Figures
where
    F: std::future::Future<Output = Figures>,
{
    let runtime = current_thread();
    let figures = runtime.block_on(suite);
    runtime.shutdown_timeout(Duration::from_secs(5));
    figures
}

// ---------------------------------------------------------------------------------------------
// Report.
// ---------------------------------------------------------------------------------------------

/// One column of the table.
struct Column {
    title: &'static str,
    figures: Figures,
}

/// 1234567.0 -> "1.23M".
fn si(value: f64) -> String {
    if value >= 1e9 {
        format!("{:.2}G", value / 1e9)
    } else if value >= 1e6 {
        format!("{:.2}M", value / 1e6)
    } else if value >= 1e3 {
        format!("{:.1}k", value / 1e3)
    } else {
        format!("{value:.0}")
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Better {
    Higher,
    Lower,
}

struct Row {
    name: &'static str,
    better: Better,
    get: fn(&Figures) -> f64,
    show: fn(f64) -> String,
}

fn rows() -> Vec<Row> {
    vec![
        Row {
            name: "(a) ping-pong round trips/s",
            better: Better::Higher,
            get: |f| f.ping_pong,
            show: si,
        },
        Row {
            name: "(b) fan-in 4->1 msgs/s",
            better: Better::Higher,
            get: |f| f.fan_in,
            show: si,
        },
        Row {
            name: "(c) ask p50 µs",
            better: Better::Lower,
            get: |f| f.ask_p50,
            show: |v| format!("{v:.2}"),
        },
        Row {
            name: "(c) ask p99 µs",
            better: Better::Lower,
            get: |f| f.ask_p99,
            show: |v| format!("{v:.2}"),
        },
        Row {
            name: "(d) spawn+stop actors/s",
            better: Better::Higher,
            get: |f| f.spawn_rate,
            show: si,
        },
        Row {
            name: "(d) spawn+stop µs/actor",
            better: Better::Lower,
            get: |f| 1e6 / f.spawn_rate,
            show: |v| format!("{v:.2}"),
        },
        Row {
            name: "(d) spawn only µs/actor",
            better: Better::Lower,
            get: |f| f.spawn_us,
            show: |v| format!("{v:.2}"),
        },
        Row {
            name: "(d) bytes per idle actor",
            better: Better::Lower,
            get: |f| f.idle_bytes,
            show: |v| format!("{v:.0}"),
        },
        Row {
            name: "(d) allocations per actor",
            better: Better::Lower,
            get: |f| f.allocs,
            show: |v| format!("{v:.1}"),
        },
    ]
}

/// Row indices, for the targets.
const ROW_PING_PONG: usize = 0;
const ROW_FAN_IN: usize = 1;
const ROW_ASK_P50: usize = 2;
const ROW_ASK_P99: usize = 3;
const ROW_SPAWN_RATE: usize = 4;
const ROW_SPAWN_STOP_US: usize = 5;
const ROW_SPAWN_US: usize = 6;
const ROW_IDLE_BYTES: usize = 7;

/// The better of some values for a row.
/// NaN (not run) values are left out; NaN when none ran.
fn best(better: Better, values: impl IntoIterator<Item = f64>) -> f64 {
    let values = values.into_iter().filter(|v| !v.is_nan());
    let pick = match better {
        Better::Higher => f64::max,
        Better::Lower => f64::min,
    };
    values.reduce(pick).unwrap_or(f64::NAN)
}

/// A figure, or "-" when its workload or runtime did not run.
fn shown(value: f64, show: fn(f64) -> String) -> String {
    if value.is_nan() {
        "-".to_owned()
    } else {
        show(value)
    }
}

/// A ratio as "1.23x", or "-".
fn times(value: f64) -> String {
    shown(value, |v| format!("{v:.2}x"))
}

/// Indices into the columns, in the order they are run and printed.
const FLOOR_MT: usize = 0;
const FLOOR_CT: usize = 1;
const TROUPE_CT: usize = 2;
const TROUPE_MT: usize = 3;
const PEERS: [usize; 3] = [4, 5, 6];

/// The comparisons of one row.
struct Ratios {
    /// Troupe's better config over the best peer's figure.
    to_peer: f64,
    /// Troupe ct over the floor ct.
    to_floor_ct: f64,
    /// Troupe mt2 over the floor mt2.
    to_floor_mt: f64,
    /// Troupe's better config's figure.
    troupe: f64,
}

fn ratios(row: &Row, columns: &[Column]) -> Ratios {
    let value = |i: usize| (row.get)(&columns[i].figures);
    let troupe = best(row.better, [value(TROUPE_CT), value(TROUPE_MT)]);
    Ratios {
        to_peer: troupe / best(row.better, PEERS.map(value)),
        to_floor_ct: value(TROUPE_CT) / value(FLOOR_CT),
        to_floor_mt: value(TROUPE_MT) / value(FLOOR_MT),
        troupe,
    }
}

fn report(plan: &Plan, columns: &[Column], total: Duration) -> String {
    let mut out = String::new();
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    let _ = writeln!(
        out,
        "\nTroupe vs peers — {} run, median of {} repetition(s), {} actors in (d), {cores} cores, {:.0} s total",
        if plan.quick { "QUICK (smoke)" } else { "full" },
        plan.reps,
        plan.spawn_n,
        total.as_secs_f64()
    );
    let _ = writeln!(
        out,
        "ct = tokio current_thread runtime; mt2 = tokio multi-thread runtime, 2 workers; actix = actix System (one arbiter thread)."
    );
    let _ = writeln!(
        out,
        "T/peer = Troupe's better config / best of actix, ractor, kameo (rates: > 1 is Troupe ahead; µs and bytes: < 1 is)."
    );
    let _ = writeln!(
        out,
        "T/floor = Troupe / bare tokio mpsc on the same flavour (ct/ct, mt2/mt2); a rate within 1.5x of the floor is >= 0.67x."
    );
    let _ = writeln!(
        out,
        "(d): spawn only = first spawn until every start hook ran; bytes = allocated and not freed while all actors idle;\n     allocations = alloc and realloc calls from the first spawn until the last actor terminated.\n"
    );

    let name_width = 28;
    let width = 10;
    let _ = write!(out, "| {:<name_width$} |", "workload");
    for column in columns {
        let _ = write!(out, " {:>width$} |", column.title);
    }
    let _ = writeln!(
        out,
        " {:>7} | {:>10} | {:>11} |",
        "T/peer", "T/floor ct", "T/floor mt2"
    );
    let _ = write!(out, "|{}|", "-".repeat(name_width + 2));
    for _ in columns {
        let _ = write!(out, "{}:|", "-".repeat(width + 1));
    }
    let _ = writeln!(
        out,
        "{}:|{}:|{}:|",
        "-".repeat(8),
        "-".repeat(11),
        "-".repeat(12)
    );

    let rows = rows();
    for row in &rows {
        let _ = write!(out, "| {:<name_width$} |", row.name);
        for column in columns {
            let _ = write!(
                out,
                " {:>width$} |",
                shown((row.get)(&column.figures), row.show)
            );
        }
        let r = ratios(row, columns);
        let _ = writeln!(
            out,
            " {:>7} | {:>10} | {:>11} |",
            times(r.to_peer),
            times(r.to_floor_ct),
            times(r.to_floor_mt)
        );
    }

    let _ = writeln!(
        out,
        "\nTargets (Troupe's better config; peers = actix, ractor, kameo; floor = same flavour):"
    );
    let verdict = |pass: bool| if pass { "PASS" } else { "MISS" };
    let ratio = |index: usize| ratios(&rows[index], columns);
    // A target whose figures did not run (`--only`, `--runtimes`) is left out.
    let mut line = |what: &str, figure: String, pass: bool| {
        if !figure.contains("NaN") {
            let _ = writeln!(out, "  {:<4}  {what:<46} {figure}", verdict(pass));
        }
    };
    for (index, what) in [
        (ROW_PING_PONG, "(a) ping-pong >= 1.0x best peer"),
        (ROW_FAN_IN, "(b) fan-in >= 1.0x best peer"),
        (ROW_SPAWN_RATE, "(d) spawn+stop rate >= 1.0x best peer"),
    ] {
        let r = ratio(index).to_peer;
        line(what, format!("{r:.2}x"), r >= 1.0);
    }
    for (index, what) in [
        (ROW_ASK_P50, "(c) ask p50 <= 1.0x best peer's latency"),
        (ROW_ASK_P99, "(c) ask p99 <= 1.0x best peer's latency"),
    ] {
        let r = ratio(index).to_peer;
        line(what, format!("{r:.2}x"), r <= 1.0);
    }
    for (index, what) in [
        (ROW_PING_PONG, "(a) ping-pong within 1.5x of the mpsc floor"),
        (ROW_FAN_IN, "(b) fan-in within 1.5x of the mpsc floor"),
    ] {
        let r = ratio(index);
        let worse = r.to_floor_ct.min(r.to_floor_mt);
        line(
            what,
            format!(
                "ct {:.2}x, mt2 {:.2}x of floor (each needs >= 0.67x)",
                r.to_floor_ct, r.to_floor_mt
            ),
            worse >= 1.0 / 1.5,
        );
    }
    let spawn = ratio(ROW_SPAWN_US).troupe;
    line(
        "(d) spawn under 1 µs per actor",
        format!("{spawn:.2} µs"),
        spawn < 1.0,
    );
    let cycle = ratio(ROW_SPAWN_STOP_US).troupe;
    line(
        "(d) spawn+stop under 1 µs per actor",
        format!("{cycle:.2} µs"),
        cycle < 1.0,
    );
    let bytes = ratio(ROW_IDLE_BYTES).troupe;
    line(
        "(d) under 1 KiB per idle actor",
        format!("{bytes:.0} B"),
        bytes < 1024.0,
    );
    out
}

/// One column of the table: a runtime configuration, run in a child process of its own.
struct Config {
    title: &'static str,
    /// Its name for `--runtimes`.
    runtime: &'static str,
    run: fn(Plan) -> Figures,
}

/// Every configuration, in the order of the column indices above.
const CONFIGS: [Config; 7] = [
    Config {
        title: "mpsc mt2",
        runtime: "mpsc",
        run: |plan| on_multi_thread(suite!("mpsc mt2", floor, plan)),
    },
    Config {
        title: "mpsc ct",
        runtime: "mpsc",
        run: |plan| on_current_thread(suite!("mpsc ct", floor, plan)),
    },
    Config {
        title: "Troupe ct",
        runtime: "troupe",
        run: |plan| on_current_thread(suite!("Troupe ct", troupe_peer, plan)),
    },
    Config {
        title: "Troupe mt2",
        runtime: "troupe",
        run: |plan| on_multi_thread(suite!("Troupe mt2", troupe_peer, plan)),
    },
    Config {
        title: "actix",
        runtime: "actix",
        run: |plan| {
            let system = actix::System::new();
            let figures = system.block_on(suite!("actix", actix_peer, plan));
            drop(system);
            figures
        },
    },
    Config {
        title: "ractor mt2",
        runtime: "ractor",
        run: |plan| on_multi_thread(suite!("ractor mt2", ractor_peer, plan)),
    },
    Config {
        title: "kameo mt2",
        runtime: "kameo",
        run: |plan| on_multi_thread(suite!("kameo mt2", kameo_peer, plan)),
    },
];

/// The command line: `--quick`, `--only ask,spawn`, `--runtimes mpsc,troupe,actix`, and the
/// internal `--child N`. Other arguments (cargo passes `--bench`) are ignored.
struct Args {
    quick: bool,
    only: Workloads,
    runtimes: Option<Vec<String>>,
    child: Option<usize>,
}

fn value_of(args: &[String], flag: &str) -> Option<String> {
    args.iter().enumerate().find_map(|(i, arg)| {
        if arg == flag {
            args.get(i + 1).cloned()
        } else {
            arg.strip_prefix(flag)
                .and_then(|rest| rest.strip_prefix('='))
                .map(str::to_owned)
        }
    })
}

fn parse_args(args: &[String]) -> Result<Args, String> {
    let quick = args.iter().any(|arg| arg == "--quick")
        || std::env::var("TROUPE_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0");
    let only = match value_of(args, "--only") {
        Some(list) => Workloads::parse(&list)?,
        None => Workloads::ALL,
    };
    let runtimes = match value_of(args, "--runtimes") {
        Some(list) => {
            let names: Vec<String> = list
                .split(',')
                .map(|n| n.trim().to_owned())
                .filter(|n| !n.is_empty())
                .collect();
            if let Some(bad) = names
                .iter()
                .find(|n| !CONFIGS.iter().any(|c| c.runtime == n.as_str()))
            {
                return Err(format!(
                    "--runtimes: unknown runtime {bad:?}; allowed: mpsc, troupe, actix, ractor, kameo (comma-separated)"
                ));
            }
            if names.is_empty() {
                return Err("--runtimes: name at least one runtime".to_owned());
            }
            Some(names)
        }
        None => None,
    };
    let child = match value_of(args, "--child") {
        Some(index) => Some(
            index
                .parse::<usize>()
                .ok()
                .filter(|i| *i < CONFIGS.len())
                .ok_or_else(|| {
                    format!(
                        "--child: {index:?} is not a column index below {}",
                        CONFIGS.len()
                    )
                })?,
        ),
        None => None,
    };
    Ok(Args {
        quick,
        only,
        runtimes,
        child,
    })
}

/// Run column `index` in a child process (this same binary with `--child index`), so no
/// runtime's heap, threads or allocator state carries over into the next one's figures.
fn run_in_child(index: usize, args: &[String]) -> Figures {
    let exe = std::env::current_exe().expect("the bench knows its own path");
    let output = std::process::Command::new(exe)
        .args(args)
        .arg("--child")
        .arg(index.to_string())
        .stderr(std::process::Stdio::inherit())
        .output()
        .expect("start the child process");
    let stdout = String::from_utf8_lossy(&output.stdout);
    match stdout.lines().find_map(Figures::from_line) {
        Some(figures) if output.status.success() => figures,
        _ => panic!(
            "{} did not report its figures ({}); stdout: {stdout}",
            CONFIGS[index].title, output.status
        ),
    }
}

fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let args = match parse_args(&argv) {
        Ok(args) => args,
        Err(error) => {
            eprintln!("troupe-bench peers: {error}");
            std::process::exit(2);
        }
    };
    let plan = Plan::new(args.quick, args.only);
    if let Some(index) = args.child {
        let figures = (CONFIGS[index].run)(plan);
        println!("{}", figures.to_line());
        return;
    }
    let began = Instant::now();
    eprintln!("troupe-bench peers: {plan:?}");
    let columns: Vec<Column> = CONFIGS
        .iter()
        .enumerate()
        .map(|(index, config)| {
            let selected = args
                .runtimes
                .as_ref()
                .is_none_or(|names| names.iter().any(|n| n == config.runtime));
            let figures = if selected {
                eprintln!("{} (child process)", config.title);
                run_in_child(index, &argv)
            } else {
                Figures::NOT_RUN
            };
            Column {
                title: config.title,
                figures,
            }
        })
        .collect();
    print!("{}", report(&plan, &columns, began.elapsed()));
}
