//! The simulated network of the deterministic multi-node harness: every node in one process,
//! frames delayed, dropped, partitioned and reordered-never, all decided by one seeded RNG.
//!
//! # Determinism
//! Run the harness on a current-thread tokio runtime with a paused clock
//! (`#[tokio::test(start_paused = true)]`). The network owns the only RNG (a [`SmallRng`]
//! seeded by the caller) and draws from it only inside [`Transport::send`], in send order.
//! Deliveries are made by one scheduler task from a queue ordered by (due time, send
//! sequence number), so frames due at the same instant are delivered in the order they were
//! sent; every map is a `BTreeMap`. The same seed and the same sends therefore give the same
//! [`trace`](SimNetwork::trace), byte for byte.
//!
//! # Ordering
//! Frames on one link (sender → receiver) arrive in send order or not at all: a frame's due
//! time is never earlier than that of the frame sent before it on the same link, whatever
//! the jitter.
//!
//! # Faults
//! Per-link delay (fixed + uniform jitter) and drop probability; partitions between any two
//! sets of nodes, in one direction or both, checked when a frame is sent and again when it
//! is due (a frame in flight when a partition starts is lost); [`heal`](SimNetwork::heal);
//! [`kill`](SimNetwork::kill), after which the node's frames in flight are discarded, frames
//! to it are dropped and its own sends fail with [`TransportError::Shutdown`]. Joining again
//! under the same address (a restart, typically with a new incarnation) revives it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::sync::{Notify, mpsc, watch};
use tokio::time::Instant;

use super::frame::DEFAULT_MAX_FRAME_SIZE;
use super::{InboundFrame, Transport, TransportError};
use crate::address::{Address, UniqueAddress};

/// How one direction of a link behaves.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkOptions {
    /// Fixed one-way delay.
    pub delay: Duration,
    /// Extra delay drawn uniformly from `0..=jitter` per frame.
    pub jitter: Duration,
    /// Chance in `0.0..=1.0` that a frame is dropped.
    pub drop_probability: f64,
}

impl Default for LinkOptions {
    /// 1 ms, no jitter, no loss.
    fn default() -> Self {
        Self {
            delay: Duration::from_millis(1),
            jitter: Duration::ZERO,
            drop_probability: 0.0,
        }
    }
}

/// Why the network dropped a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DropReason {
    /// The link's drop probability said so.
    Random,
    /// The link was blocked by a partition.
    Partitioned,
    /// The sender or receiver was killed.
    Killed,
    /// No node has joined under the destination address.
    UnknownNode,
    /// The receiver's inbound channel was full or closed.
    InboxUnavailable,
    /// The sender disconnected from the receiver.
    Disconnected,
}

/// What happened to a frame, as recorded in the trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TraceOutcome {
    /// Accepted for delivery at the given time since the network started.
    Scheduled {
        /// When it will be due.
        due: Duration,
    },
    /// Handed to the receiver.
    Delivered,
    /// Lost.
    Dropped(DropReason),
}

/// One line of the delivery trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceEvent {
    /// Time since the network started.
    pub at: Duration,
    /// The frame's send sequence number (network-wide).
    pub seq: u64,
    /// The sender.
    pub from: Address,
    /// The receiver.
    pub to: Address,
    /// The payload length.
    pub len: usize,
    /// What happened.
    pub outcome: TraceOutcome,
}

/// A simulated network. Cheap to clone; all clones are the same network.
#[derive(Clone)]
pub struct SimNetwork {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for SimNetwork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.inner.state.lock();
        f.debug_struct("SimNetwork")
            .field("nodes", &state.nodes.keys().collect::<Vec<_>>())
            .field("in_flight", &state.queue.len())
            .finish_non_exhaustive()
    }
}

struct Inner {
    state: Mutex<State>,
    /// Wakes the scheduler when a frame is queued.
    wake: Notify,
    /// The number of frames in flight.
    in_flight: watch::Sender<usize>,
}

struct State {
    rng: SmallRng,
    start: Instant,
    max_frame_size: usize,
    default_link: LinkOptions,
    links: BTreeMap<(Address, Address), LinkOptions>,
    blocked: BTreeSet<(Address, Address)>,
    nodes: BTreeMap<Address, Node>,
    queue: BTreeMap<(Instant, u64), InFlight>,
    /// The latest due time per link, so jitter never reorders a link.
    last_due: BTreeMap<(Address, Address), Instant>,
    next_seq: u64,
    trace: Vec<TraceEvent>,
}

struct Node {
    id: UniqueAddress,
    inbound: mpsc::Sender<InboundFrame>,
    alive: bool,
}

struct InFlight {
    from: UniqueAddress,
    to: Address,
    payload: Bytes,
}

impl SimNetwork {
    /// A network whose every random choice derives from `seed`. Must be called inside a tokio
    /// runtime: it spawns the delivery scheduler there.
    #[must_use]
    pub fn new(seed: u64) -> Self {
        let inner = Arc::new(Inner {
            state: Mutex::new(State {
                rng: SmallRng::seed_from_u64(seed),
                start: Instant::now(),
                max_frame_size: DEFAULT_MAX_FRAME_SIZE,
                default_link: LinkOptions::default(),
                links: BTreeMap::new(),
                blocked: BTreeSet::new(),
                nodes: BTreeMap::new(),
                queue: BTreeMap::new(),
                last_due: BTreeMap::new(),
                next_seq: 0,
                trace: Vec::new(),
            }),
            wake: Notify::new(),
            in_flight: watch::Sender::new(0),
        });
        tokio::spawn(schedule(inner.clone()));
        Self { inner }
    }

    /// Adds a node (or replaces a node at the same address, reviving it if it was killed).
    /// Frames for it go to `inbound`; a full channel drops them (traced).
    #[must_use]
    pub fn join(&self, id: UniqueAddress, inbound: mpsc::Sender<InboundFrame>) -> SimTransport {
        self.inner.state.lock().nodes.insert(
            id.address.clone(),
            Node {
                id: id.clone(),
                inbound,
                alive: true,
            },
        );
        SimTransport {
            inner: self.inner.clone(),
            local: id,
        }
    }

    /// The link settings used where no per-link setting exists.
    pub fn set_default_link(&self, link: LinkOptions) {
        self.inner.state.lock().default_link = link;
    }

    /// Settings for frames from `from` to `to` (one direction).
    pub fn set_link(&self, from: &Address, to: &Address, link: LinkOptions) {
        self.inner
            .state
            .lock()
            .links
            .insert((from.clone(), to.clone()), link);
    }

    /// The largest payload accepted (default 1 MiB, as the TCP transport).
    pub fn set_max_frame_size(&self, bytes: usize) {
        self.inner.state.lock().max_frame_size = bytes;
    }

    /// Blocks frames from `from` to `to` only.
    pub fn block(&self, from: &Address, to: &Address) {
        self.inner
            .state
            .lock()
            .blocked
            .insert((from.clone(), to.clone()));
    }

    /// Lets frames from `from` to `to` through again.
    pub fn unblock(&self, from: &Address, to: &Address) {
        self.inner
            .state
            .lock()
            .blocked
            .remove(&(from.clone(), to.clone()));
    }

    /// Blocks both directions between every node of `side_a` and every node of `side_b`.
    pub fn partition(&self, side_a: &[Address], side_b: &[Address]) {
        let mut state = self.inner.state.lock();
        for a in side_a {
            for b in side_b {
                state.blocked.insert((a.clone(), b.clone()));
                state.blocked.insert((b.clone(), a.clone()));
            }
        }
    }

    /// Removes every partition and block.
    pub fn heal(&self) {
        self.inner.state.lock().blocked.clear();
    }

    /// Kills `node`: its frames in flight (both ways) are discarded, frames to it are dropped
    /// and its sends fail, until a node joins under its address again.
    pub fn kill(&self, node: &Address) {
        let mut state = self.inner.state.lock();
        if let Some(n) = state.nodes.get_mut(node) {
            n.alive = false;
        }
        let now = Instant::now();
        state.discard_in_flight(now, DropReason::Killed, |f| {
            f.from.address == *node || f.to == *node
        });
        self.inner.in_flight.send_replace(state.queue.len());
    }

    /// Every frame's fate so far, in the order it happened.
    #[must_use]
    pub fn trace(&self) -> Vec<TraceEvent> {
        self.inner.state.lock().trace.clone()
    }

    /// Frames sent but not yet delivered or dropped.
    #[must_use]
    pub fn in_flight(&self) -> usize {
        self.inner.state.lock().queue.len()
    }

    /// Waits until no frame is in flight.
    pub async fn settled(&self) {
        let mut in_flight = self.inner.in_flight.subscribe();
        let _ = in_flight.wait_for(|n| *n == 0).await;
    }
}

impl State {
    fn since_start(&self, at: Instant) -> Duration {
        at.duration_since(self.start)
    }

    fn record(&mut self, at: Instant, seq: u64, frame: &InFlight, outcome: TraceOutcome) {
        let at = self.since_start(at);
        self.trace.push(TraceEvent {
            at,
            seq,
            from: frame.from.address.clone(),
            to: frame.to.clone(),
            len: frame.payload.len(),
            outcome,
        });
    }

    fn discard_in_flight(
        &mut self,
        now: Instant,
        reason: DropReason,
        matches: impl Fn(&InFlight) -> bool,
    ) {
        let doomed: Vec<(Instant, u64)> = self
            .queue
            .iter()
            .filter(|(_, f)| matches(f))
            .map(|(k, _)| *k)
            .collect();
        for key in doomed {
            if let Some(frame) = self.queue.remove(&key) {
                self.record(now, key.1, &frame, TraceOutcome::Dropped(reason));
            }
        }
    }

    fn send(
        &mut self,
        from: &UniqueAddress,
        to: &Address,
        payload: Bytes,
    ) -> Result<bool, TransportError> {
        if payload.len() > self.max_frame_size {
            return Err(TransportError::FrameTooLarge {
                size: payload.len(),
                max: self.max_frame_size,
            });
        }
        let sender_alive = self
            .nodes
            .get(&from.address)
            .is_some_and(|n| n.alive && n.id == *from);
        if !sender_alive {
            return Err(TransportError::Shutdown);
        }
        let now = Instant::now();
        let seq = self.next_seq;
        self.next_seq += 1;
        let frame = InFlight {
            from: from.clone(),
            to: to.clone(),
            payload,
        };
        let link_key = (from.address.clone(), to.clone());
        if self.blocked.contains(&link_key) {
            self.record(
                now,
                seq,
                &frame,
                TraceOutcome::Dropped(DropReason::Partitioned),
            );
            return Ok(false);
        }
        let link = self
            .links
            .get(&link_key)
            .copied()
            .unwrap_or(self.default_link);
        if link.drop_probability > 0.0
            && self.rng.random_bool(link.drop_probability.clamp(0.0, 1.0))
        {
            self.record(now, seq, &frame, TraceOutcome::Dropped(DropReason::Random));
            return Ok(false);
        }
        let jitter = if link.jitter.is_zero() {
            Duration::ZERO
        } else {
            let nanos = u64::try_from(link.jitter.as_nanos()).unwrap_or(u64::MAX);
            Duration::from_nanos(self.rng.random_range(0..=nanos))
        };
        let mut due = now + link.delay + jitter;
        if let Some(last) = self.last_due.get(&link_key) {
            due = due.max(*last);
        }
        self.last_due.insert(link_key, due);
        let due_since_start = self.since_start(due);
        self.record(
            now,
            seq,
            &frame,
            TraceOutcome::Scheduled {
                due: due_since_start,
            },
        );
        self.queue.insert((due, seq), frame);
        Ok(true)
    }

    /// Delivers every frame due by `now`, in (due, seq) order.
    fn deliver_due(&mut self, now: Instant) {
        while let Some(entry) = self.queue.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let ((_, seq), frame) = entry.remove_entry();
            let outcome = self.deliver(&frame);
            self.record(now, seq, &frame, outcome);
        }
    }

    fn deliver(&self, frame: &InFlight) -> TraceOutcome {
        if self
            .blocked
            .contains(&(frame.from.address.clone(), frame.to.clone()))
        {
            return TraceOutcome::Dropped(DropReason::Partitioned);
        }
        let Some(node) = self.nodes.get(&frame.to) else {
            return TraceOutcome::Dropped(DropReason::UnknownNode);
        };
        let sender_alive = self
            .nodes
            .get(&frame.from.address)
            .is_some_and(|n| n.alive && n.id == frame.from);
        if !node.alive || !sender_alive {
            return TraceOutcome::Dropped(DropReason::Killed);
        }
        let inbound = InboundFrame {
            from: frame.from.clone(),
            payload: frame.payload.clone(),
        };
        match node.inbound.try_send(inbound) {
            Ok(()) => TraceOutcome::Delivered,
            Err(_) => TraceOutcome::Dropped(DropReason::InboxUnavailable),
        }
    }
}

/// The scheduler: sleeps until the earliest due frame, delivers everything due, repeats.
async fn schedule(inner: Arc<Inner>) {
    loop {
        let next_due = {
            let mut state = inner.state.lock();
            state.deliver_due(Instant::now());
            inner.in_flight.send_replace(state.queue.len());
            state.queue.first_key_value().map(|((due, _), _)| *due)
        };
        match next_due {
            None => inner.wake.notified().await,
            Some(due) => {
                tokio::select! {
                    biased;
                    () = inner.wake.notified() => {}
                    () = tokio::time::sleep_until(due) => {}
                }
            }
        }
    }
}

/// One node's handle on a [`SimNetwork`].
pub struct SimTransport {
    inner: Arc<Inner>,
    local: UniqueAddress,
}

impl std::fmt::Debug for SimTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimTransport")
            .field("local", &self.local)
            .finish_non_exhaustive()
    }
}

impl Transport for SimTransport {
    fn local(&self) -> &UniqueAddress {
        &self.local
    }

    fn send(&self, to: &Address, payload: Bytes) -> Result<(), TransportError> {
        let mut state = self.inner.state.lock();
        if state.send(&self.local, to, payload)? {
            self.inner.in_flight.send_replace(state.queue.len());
            drop(state);
            self.inner.wake.notify_one();
        }
        Ok(())
    }

    fn disconnect(&self, peer: &Address) {
        let mut state = self.inner.state.lock();
        let me = self.local.clone();
        state.discard_in_flight(Instant::now(), DropReason::Disconnected, |f| {
            f.from == me && f.to == *peer
        });
        self.inner.in_flight.send_replace(state.queue.len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(port: u16) -> UniqueAddress {
        UniqueAddress {
            address: Address::new("sim", "10.0.0.1", port),
            incarnation: u64::from(port),
        }
    }

    struct TestNode {
        transport: SimTransport,
        inbound: mpsc::Receiver<InboundFrame>,
    }

    impl TestNode {
        fn address(&self) -> Address {
            self.transport.local().address.clone()
        }

        fn drain(&mut self) -> Vec<(u16, Bytes)> {
            let mut out = Vec::new();
            while let Ok(f) = self.inbound.try_recv() {
                out.push((f.from.address.port, f.payload));
            }
            out
        }
    }

    fn nodes(network: &SimNetwork, n: u16) -> Vec<TestNode> {
        (1..=n)
            .map(|port| {
                let (tx, inbound) = mpsc::channel(100_000);
                TestNode {
                    transport: network.join(id(port), tx),
                    inbound,
                }
            })
            .collect()
    }

    fn msg(text: &'static str) -> Bytes {
        Bytes::from_static(text.as_bytes())
    }

    #[tokio::test(start_paused = true)]
    async fn frames_arrive_after_the_link_delay_tagged_with_the_sender() {
        let network = SimNetwork::new(1);
        network.set_default_link(LinkOptions {
            delay: Duration::from_millis(30),
            ..LinkOptions::default()
        });
        let mut n = nodes(&network, 2);
        let start = Instant::now();
        n[0].transport.send(&n[1].address(), msg("hi")).unwrap();
        let frame = n[1].inbound.recv().await.unwrap();
        assert_eq!(start.elapsed(), Duration::from_millis(30));
        assert_eq!(frame.from, id(1));
        assert_eq!(&frame.payload[..], b"hi");
    }

    #[tokio::test(start_paused = true)]
    async fn a_partition_blocks_both_directions_and_heal_restores_delivery() {
        let network = SimNetwork::new(2);
        let mut n = nodes(&network, 3);
        let (a, b, c) = (n[0].address(), n[1].address(), n[2].address());
        network.partition(std::slice::from_ref(&a), &[b.clone(), c.clone()]);
        n[0].transport.send(&b, msg("a->b")).unwrap();
        n[1].transport.send(&a, msg("b->a")).unwrap();
        n[1].transport.send(&c, msg("b->c")).unwrap();
        network.settled().await;
        assert!(n[0].drain().is_empty());
        assert!(n[1].drain().is_empty());
        assert_eq!(n[2].drain(), vec![(2, msg("b->c"))]);

        network.heal();
        n[0].transport.send(&b, msg("a->b")).unwrap();
        n[1].transport.send(&a, msg("b->a")).unwrap();
        network.settled().await;
        assert_eq!(n[1].drain(), vec![(1, msg("a->b"))]);
        assert_eq!(n[0].drain(), vec![(2, msg("b->a"))]);
    }

    #[tokio::test(start_paused = true)]
    async fn an_asymmetric_partition_blocks_only_one_direction() {
        let network = SimNetwork::new(3);
        let mut n = nodes(&network, 2);
        let (a, b) = (n[0].address(), n[1].address());
        network.block(&a, &b);
        n[0].transport.send(&b, msg("a->b")).unwrap();
        n[1].transport.send(&a, msg("b->a")).unwrap();
        network.settled().await;
        assert!(n[1].drain().is_empty());
        assert_eq!(n[0].drain(), vec![(2, msg("b->a"))]);
        network.unblock(&a, &b);
        n[0].transport.send(&b, msg("a->b")).unwrap();
        network.settled().await;
        assert_eq!(n[1].drain(), vec![(1, msg("a->b"))]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_partition_starting_while_a_frame_is_in_flight_drops_it() {
        let network = SimNetwork::new(4);
        let mut n = nodes(&network, 2);
        let (a, b) = (n[0].address(), n[1].address());
        n[0].transport.send(&b, msg("late")).unwrap();
        network.block(&a, &b);
        network.settled().await;
        assert!(n[1].drain().is_empty());
        assert!(matches!(
            network.trace().last().unwrap().outcome,
            TraceOutcome::Dropped(DropReason::Partitioned)
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn frames_on_one_link_arrive_in_send_order_despite_jitter() {
        let network = SimNetwork::new(5);
        network.set_default_link(LinkOptions {
            delay: Duration::from_millis(1),
            jitter: Duration::from_millis(50),
            drop_probability: 0.0,
        });
        let mut n = nodes(&network, 3);
        let c = n[2].address();
        for i in 0..500u32 {
            let sender = usize::from(i % 2 == 1);
            n[sender]
                .transport
                .send(&c, Bytes::copy_from_slice(&i.to_be_bytes()))
                .unwrap();
            if i % 7 == 0 {
                tokio::time::sleep(Duration::from_millis(3)).await;
            }
        }
        network.settled().await;
        let got = n[2].drain();
        assert_eq!(got.len(), 500);
        for sender in [1, 2] {
            let seq: Vec<u32> = got
                .iter()
                .filter(|(from, _)| *from == sender)
                .map(|(_, p)| u32::from_be_bytes(p[..].try_into().unwrap()))
                .collect();
            assert!(
                seq.windows(2).all(|w| w[0] < w[1]),
                "link from {sender} reordered"
            );
        }
        // Jitter does interleave the two links: the merged order is not the send order.
        let merged: Vec<u32> = got
            .iter()
            .map(|(_, p)| u32::from_be_bytes(p[..].try_into().unwrap()))
            .collect();
        assert!(merged.windows(2).any(|w| w[0] > w[1]));
    }

    /// A run with delays, jitter, random drops and a partition; returns its trace.
    fn scenario(seed: u64) -> Vec<TraceEvent> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        runtime.block_on(async {
            let network = SimNetwork::new(seed);
            network.set_default_link(LinkOptions {
                delay: Duration::from_millis(2),
                jitter: Duration::from_millis(20),
                drop_probability: 0.1,
            });
            let n = nodes(&network, 4);
            let addresses: Vec<Address> = n.iter().map(TestNode::address).collect();
            for round in 0..50u32 {
                if round == 20 {
                    network.partition(&addresses[..2], &addresses[2..]);
                }
                if round == 35 {
                    network.heal();
                }
                for (i, node) in n.iter().enumerate() {
                    let to = &addresses[(i + 1 + round as usize) % addresses.len()];
                    if *to != node.address() {
                        node.transport
                            .send(to, Bytes::copy_from_slice(&round.to_be_bytes()))
                            .unwrap();
                    }
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            network.settled().await;
            network.trace()
        })
    }

    #[test]
    fn the_same_seed_gives_the_same_delivery_trace() {
        let first = scenario(42);
        assert_eq!(first, scenario(42));
        assert!(
            first
                .iter()
                .any(|e| e.outcome == TraceOutcome::Dropped(DropReason::Random))
        );
        assert!(first.iter().any(|e| e.outcome == TraceOutcome::Delivered));
        assert_ne!(first, scenario(43), "another seed gives another run");
    }

    #[tokio::test(start_paused = true)]
    async fn a_killed_node_receives_nothing_and_cannot_send_until_it_rejoins() {
        let network = SimNetwork::new(6);
        let mut n = nodes(&network, 2);
        let (a, b) = (n[0].address(), n[1].address());
        n[0].transport.send(&b, msg("in flight")).unwrap();
        network.kill(&b);
        n[0].transport.send(&b, msg("after death")).unwrap();
        assert_eq!(
            n[1].transport.send(&a, msg("ghost")),
            Err(TransportError::Shutdown)
        );
        network.settled().await;
        assert!(n[1].drain().is_empty());

        // A restart: same address, new incarnation. The old handle stays dead.
        let (tx, mut inbound) = mpsc::channel(8);
        let reborn = UniqueAddress {
            address: b.clone(),
            incarnation: 99,
        };
        let b2 = network.join(reborn.clone(), tx);
        assert_eq!(
            n[1].transport.send(&a, msg("ghost")),
            Err(TransportError::Shutdown)
        );
        b2.send(&a, msg("back")).unwrap();
        n[0].transport.send(&b, msg("welcome")).unwrap();
        network.settled().await;
        assert_eq!(n[0].inbound.try_recv().unwrap().from, reborn);
        assert_eq!(&inbound.try_recv().unwrap().payload[..], b"welcome");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(32))]
        #[test]
        fn every_link_is_fifo_for_any_seed_delay_and_jitter(
            seed in proptest::prelude::any::<u64>(),
            delay_ms in 0u64..20,
            jitter_ms in 0u64..50,
            gaps in proptest::collection::vec(0u64..5, 1..200),
        ) {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .start_paused(true)
                .build()
                .unwrap();
            let got = runtime.block_on(async {
                let network = SimNetwork::new(seed);
                network.set_default_link(LinkOptions {
                    delay: Duration::from_millis(delay_ms),
                    jitter: Duration::from_millis(jitter_ms),
                    drop_probability: 0.0,
                });
                let mut n = nodes(&network, 3);
                let c = n[2].address();
                for (i, gap) in gaps.iter().enumerate() {
                    let i = u32::try_from(i).unwrap();
                    n[(i % 2) as usize]
                        .transport
                        .send(&c, Bytes::copy_from_slice(&i.to_be_bytes()))
                        .unwrap();
                    tokio::time::sleep(Duration::from_millis(*gap)).await;
                }
                network.settled().await;
                n[2].drain()
            });
            proptest::prop_assert_eq!(got.len(), gaps.len());
            for sender in [1, 2] {
                let seq: Vec<u32> = got
                    .iter()
                    .filter(|(from, _)| *from == sender)
                    .map(|(_, p)| u32::from_be_bytes(p[..].try_into().unwrap()))
                    .collect();
                proptest::prop_assert!(seq.windows(2).all(|w| w[0] < w[1]));
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_drop_probability_drops_about_that_share_of_frames() {
        let network = SimNetwork::new(7);
        let mut n = nodes(&network, 2);
        let (a, b) = (n[0].address(), n[1].address());
        network.set_link(
            &a,
            &b,
            LinkOptions {
                drop_probability: 0.3,
                ..LinkOptions::default()
            },
        );
        for _ in 0..1000 {
            n[0].transport.send(&b, msg("x")).unwrap();
        }
        network.settled().await;
        let delivered = n[1].drain().len();
        assert!(
            (600..=800).contains(&delivered),
            "{delivered} of 1000 delivered"
        );
    }
}
