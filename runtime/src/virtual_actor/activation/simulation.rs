//! Deterministic simulation of the activation protocol: N hosts, each running the pure machine,
//! over one real [`InMemoryDirectory`] (its claims are linearizable, as every backend's are), a
//! network with per-link FIFO and random delays, membership views that change late and
//! differently on each host, activation counts published by gossip, and seeded faults: hosts
//! killed, leaving gracefully, cut off (lease-backed: the host fences before the survivors evict
//! its claims), and added. One seed drives everything, so a failing seed replays exactly; the
//! seed is in every failure message.
//!
//! Every message is an ask from a client on some host, so each one must end as handled, as a
//! dead letter, or as lost with a host that died or was cut off while holding it (the caller's
//! ask times out). Checked over 200+ seeds: never two running activations of one key, every
//! message accounted for, none handled twice. Without a lease (a gossip-only partition of one
//! host that still reaches the directory, nobody fencing) the same harness measures how long
//! two activations of a key overlap instead of failing on them.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::time::Instant;
use troupe_lease::directory::{ClaimOutcome, Directory, InMemoryDirectory, Revision};

use super::{Action, ActivationState, Envelope, Event, Limits, Watched};
use crate::virtual_actor::placement::{
    ActivationCountPlacement, PlacementPolicy, PreferLocalPlacement, RandomPlacement,
};
use crate::{Address, UniqueAddress};

/// One ask: from client `sender`, its `seq`-th message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Msg {
    id: u64,
    sender: u64,
    seq: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Handled,
    DeadLetter,
    /// Held by a host that died or was cut off: the ask times out.
    Lost,
}

#[derive(Debug)]
enum DirOp {
    Lookup(String),
    Claim(String),
    Release(String),
}

#[derive(Debug)]
enum SimEvent {
    Machine {
        host: usize,
        event: Event<Msg>,
    },
    Network {
        from: usize,
        to: usize,
        key: String,
        envelope: Envelope<Msg>,
    },
    Directory {
        host: usize,
        op: DirOp,
    },
    StopDone {
        host: usize,
        key: String,
    },
    Send,
    Kill(usize),
    Leave(usize),
    CutOff(usize),
    Fence(usize),
    Evict(usize),
    Join,
    Partition(usize),
}

struct Host {
    id: UniqueAddress,
    machine: Option<ActivationState<Msg>>,
    /// The process runs.
    alive: bool,
    /// Unreachable: no network, no directory (and fenced soon after).
    cut: bool,
    /// Gossip-only partition: cut from the other hosts, not from the directory, not fenced.
    partitioned: bool,
    leaving: bool,
    /// Running activations: key -> the last seq handled per sender.
    running: BTreeMap<String, BTreeMap<u64, u64>>,
}

/// What kind of faults a run gets.
#[derive(Debug, Clone, Copy)]
struct Scenario {
    hosts: usize,
    keys: usize,
    sends: usize,
    faults: bool,
    idle: Option<Duration>,
    policy: u8,
}

#[derive(Debug, Default)]
struct Figures {
    handled: usize,
    dead_letters: usize,
    lost: usize,
    /// Messages of one sender handled out of send order by one activation.
    reordered: usize,
    activations: usize,
}

struct Sim {
    seed: u64,
    rng: SmallRng,
    start: Instant,
    now: Duration,
    next: u64,
    queue: BTreeMap<(Duration, u64), SimEvent>,
    /// Per link, the last arrival time, so a link is FIFO.
    links: BTreeMap<(usize, usize), Duration>,
    directory: InMemoryDirectory,
    hosts: Vec<Host>,
    /// Each host's view of the members, as indices.
    views: Vec<BTreeSet<usize>>,
    fates: BTreeMap<u64, Fate>,
    /// Where each unsettled message is: the host that holds it or that it travels to.
    at: BTreeMap<u64, usize>,
    next_msg: u64,
    next_seq: BTreeMap<u64, u64>,
    scenario: Scenario,
    figures: Figures,
    /// Without a lease: record two activations of a key instead of failing on them.
    gossip_only: bool,
    /// Keys running on two hosts, since when.
    overlapping: BTreeMap<String, Duration>,
    /// How long each overlap of two activations lasted.
    overlaps: Vec<Duration>,
}

fn address(index: usize) -> UniqueAddress {
    UniqueAddress {
        address: Address::new("sim", &format!("10.0.1.{}", index + 1), 2552),
        incarnation: index as u64 + 1,
    }
}

fn now_or_never<T>(
    future: troupe_lease::directory::DirectoryFuture<T>,
) -> Result<T, troupe_lease::directory::DirectoryError> {
    future
        .now_or_never()
        .expect("the in-memory directory answers at once")
}

impl Sim {
    fn new(seed: u64, scenario: Scenario) -> Self {
        let mut sim = Self {
            seed,
            rng: SmallRng::seed_from_u64(seed),
            start: Instant::now(),
            now: Duration::ZERO,
            next: 0,
            queue: BTreeMap::new(),
            links: BTreeMap::new(),
            directory: InMemoryDirectory::new(),
            hosts: Vec::new(),
            views: Vec::new(),
            fates: BTreeMap::new(),
            at: BTreeMap::new(),
            next_msg: 0,
            next_seq: BTreeMap::new(),
            scenario,
            figures: Figures::default(),
            gossip_only: false,
            overlapping: BTreeMap::new(),
            overlaps: Vec::new(),
        };
        for _ in 0..scenario.hosts {
            sim.boot();
        }
        let all: BTreeSet<usize> = (0..scenario.hosts).collect();
        for host in 0..scenario.hosts {
            sim.views[host].clone_from(&all);
            sim.feed(
                host,
                Event::Members(all.iter().map(|&i| address(i)).collect()),
            );
        }
        sim
    }

    fn policy(&self) -> Arc<dyn PlacementPolicy> {
        match self.scenario.policy {
            0 => Arc::new(ActivationCountPlacement),
            1 => Arc::new(RandomPlacement),
            _ => Arc::new(PreferLocalPlacement),
        }
    }

    fn boot(&mut self) -> usize {
        let index = self.hosts.len();
        let limits = Limits {
            buffer_size: 64,
            idle_timeout: self.scenario.idle,
            max_hops: 4,
        };
        let machine =
            ActivationState::new(address(index), limits, self.policy(), self.rng.random());
        self.hosts.push(Host {
            id: address(index),
            machine: Some(machine),
            alive: true,
            cut: false,
            partitioned: false,
            leaving: false,
            running: BTreeMap::new(),
        });
        self.views.push(BTreeSet::new());
        index
    }

    fn index_of(&self, node: &UniqueAddress) -> usize {
        usize::try_from(node.incarnation - 1).expect("sim incarnation")
    }

    fn at(&mut self, delay: Duration, event: SimEvent) {
        self.next += 1;
        self.queue.insert((self.now + delay, self.next), event);
    }

    fn millis(&mut self, low: u64, high: u64) -> Duration {
        Duration::from_millis(self.rng.random_range(low..=high))
    }

    fn reachable(&self, host: usize) -> bool {
        self.hosts[host].alive && !self.hosts[host].cut
    }

    /// Send over the network from `from` to `to`, FIFO per link.
    fn send(&mut self, from: usize, to: usize, key: String, envelope: Envelope<Msg>) {
        self.at.insert(envelope.item.id, to);
        let delay = self.millis(1, 10);
        let arrival =
            (self.now + delay).max(self.links.get(&(from, to)).copied().unwrap_or_default());
        self.links.insert((from, to), arrival);
        self.next += 1;
        self.queue.insert(
            (arrival, self.next),
            SimEvent::Network {
                from,
                to,
                key,
                envelope,
            },
        );
    }

    fn settle(&mut self, id: u64, fate: Fate) {
        let before = self.fates.insert(id, fate);
        assert!(
            before.is_none(),
            "seed {}: message {id} settled twice: {before:?} then {fate:?}",
            self.seed
        );
        self.at.remove(&id);
        match fate {
            Fate::Handled => self.figures.handled += 1,
            Fate::DeadLetter => self.figures.dead_letters += 1,
            Fate::Lost => self.figures.lost += 1,
        }
    }

    fn feed(&mut self, host: usize, event: Event<Msg>) {
        if !self.hosts[host].alive {
            return;
        }
        let state = self.hosts[host].machine.take().expect("machine");
        let (state, actions) = super::step(state, event, self.start + self.now);
        self.hosts[host].machine = Some(state);
        for action in actions {
            self.perform(host, action);
        }
    }

    fn perform(&mut self, host: usize, action: Action<Msg>) {
        match action {
            Action::Lookup { key } => {
                let delay = self.millis(1, 5);
                self.at(
                    delay,
                    SimEvent::Directory {
                        host,
                        op: DirOp::Lookup(key),
                    },
                );
            }
            Action::Claim { key } => {
                let delay = self.millis(1, 5);
                self.at(
                    delay,
                    SimEvent::Directory {
                        host,
                        op: DirOp::Claim(key),
                    },
                );
            }
            Action::Release { key } => {
                let delay = self.millis(1, 5);
                self.at(
                    delay,
                    SimEvent::Directory {
                        host,
                        op: DirOp::Release(key),
                    },
                );
            }
            Action::Start { key } => {
                let twice = self
                    .hosts
                    .iter()
                    .any(|h| h.alive && h.running.contains_key(&key));
                if self.gossip_only && twice {
                    self.overlapping.entry(key.clone()).or_insert(self.now);
                }
                for (other, h) in self.hosts.iter().enumerate() {
                    assert!(
                        self.gossip_only || !(h.alive && h.running.contains_key(&key)),
                        "seed {}: {key} activated on host {host} while host {other} runs it (t={:?})",
                        self.seed,
                        self.now
                    );
                }
                self.figures.activations += 1;
                self.hosts[host].running.insert(key, BTreeMap::new());
            }
            Action::Deliver { key, item } => {
                let running = self.hosts[host].running.get_mut(&key).unwrap_or_else(|| {
                    panic!("seed {}: delivered to {key}, not running", self.seed)
                });
                let last = running.insert(item.sender, item.seq);
                if last.is_some_and(|last| last > item.seq) {
                    self.figures.reordered += 1;
                }
                self.settle(item.id, Fate::Handled);
            }
            Action::Forward { key, to, envelope } => {
                let to = self.index_of(&to);
                if self.hosts[host].cut {
                    self.settle(envelope.item.id, Fate::Lost);
                } else {
                    self.send(host, to, key, envelope);
                }
            }
            Action::Stop { key } => {
                let delay = self.millis(1, 20);
                self.at(delay, SimEvent::StopDone { host, key });
            }
            Action::DeadLetter { item, .. } => self.settle(item.id, Fate::DeadLetter),
            Action::ScheduleIdleCheck { key, at } => {
                let delay = at.saturating_duration_since(self.start + self.now);
                self.at(
                    delay,
                    SimEvent::Machine {
                        host,
                        event: Event::IdleCheck { key },
                    },
                );
            }
            Action::Activations(count) => {
                if self.hosts[host].cut {
                    return;
                }
                for other in 0..self.hosts.len() {
                    if other != host
                        && self.reachable(other)
                        && self.hosts[other].partitioned == self.hosts[host].partitioned
                    {
                        self.gossip_load(host, other, count);
                    }
                }
            }
            Action::HandedOff => {
                // The process exits a little later; messages still arriving are lost with it.
                let delay = self.millis(10, 100);
                self.at(delay, SimEvent::Kill(host));
            }
        }
    }

    /// Tell every reachable host about a directory change, after a watch delay.
    fn watched(&mut self, key: &str, change: Watched, revision: Revision) {
        for host in 0..self.hosts.len() {
            if self.reachable(host) {
                let delay = self.millis(1, 30);
                let event = Event::Watched {
                    key: key.to_owned(),
                    change: change.clone(),
                    revision,
                };
                self.at(delay, SimEvent::Machine { host, event });
            }
        }
    }

    fn revision(&self) -> Revision {
        now_or_never(self.directory.snapshot())
            .expect("snapshot")
            .revision
    }

    fn directory_op(&mut self, host: usize, op: DirOp) {
        if !self.hosts[host].alive {
            return;
        }
        let name = self.hosts[host].id.to_string();
        let answer_delay = self.millis(1, 5);
        let event = match op {
            DirOp::Lookup(key) if self.hosts[host].cut => Event::DirectoryFailed {
                key,
                error: "unreachable".to_owned(),
            },
            DirOp::Claim(key) if self.hosts[host].cut => Event::DirectoryFailed {
                key,
                error: "unreachable".to_owned(),
            },
            DirOp::Release(key) if self.hosts[host].cut => Event::Released { key },
            DirOp::Lookup(key) => {
                let owner = now_or_never(self.directory.lookup(&key)).expect("lookup");
                let owner = owner.map(|c| (self.parse_host(&c.host), c.revision));
                Event::LookedUp { key, owner }
            }
            DirOp::Claim(key) => {
                let outcome = now_or_never(self.directory.claim(&key, &name)).expect("claim");
                let claim = outcome.claim().clone();
                if let ClaimOutcome::Claimed(c) = &outcome
                    && c.revision == self.revision()
                {
                    let owner = self.parse_host(&c.host);
                    self.watched(&key, Watched::Claimed(owner), c.revision);
                }
                Event::Claimed {
                    key,
                    owner: self.parse_host(&claim.host),
                    revision: claim.revision,
                }
            }
            DirOp::Release(key) => {
                if now_or_never(self.directory.release(&key, &name)).expect("release") {
                    let revision = self.revision();
                    let me = self.hosts[host].id.clone();
                    self.watched(&key, Watched::Released(me), revision);
                }
                Event::Released { key }
            }
        };
        self.at(answer_delay, SimEvent::Machine { host, event });
    }

    fn parse_host(&self, name: &str) -> UniqueAddress {
        self.hosts
            .iter()
            .find(|h| h.id.to_string() == name)
            .map(|h| h.id.clone())
            .unwrap_or_else(|| panic!("seed {}: unknown host {name} in the directory", self.seed))
    }

    /// `key` may have stopped running twice: close its overlap.
    fn overlap_ended(&mut self, key: &str) {
        let running = self
            .hosts
            .iter()
            .filter(|h| h.alive && h.running.contains_key(key))
            .count();
        if running < 2
            && let Some(since) = self.overlapping.remove(key)
        {
            self.overlaps.push(self.now - since);
        }
    }

    /// Everything a dead or cut-off host held is lost with it.
    fn lose_held_by(&mut self, host: usize) {
        let held: Vec<u64> = self
            .at
            .iter()
            .filter(|(_, h)| **h == host)
            .map(|(id, _)| *id)
            .collect();
        for id in held {
            self.settle(id, Fate::Lost);
        }
    }

    /// Gossip `host`'s activation count to `to`, in publishing order.
    fn gossip_load(&mut self, host: usize, to: usize, activations: u64) {
        let delay = self.millis(50, 500);
        // Gossip keeps the newest count per host: a link of its own, FIFO.
        let link = (usize::MAX - 1 - host, to);
        let arrival = (self.now + delay).max(self.links.get(&link).copied().unwrap_or_default());
        self.links.insert(link, arrival);
        self.next += 1;
        let event = Event::Load {
            host: address(host),
            activations,
        };
        self.queue
            .insert((arrival, self.next), SimEvent::Machine { host: to, event });
    }

    /// Give `host` its current view after `delay`, never before a view it was given earlier.
    fn deliver_view(&mut self, host: usize, delay: Duration) {
        let members = self.views[host].iter().map(|&i| address(i)).collect();
        let link = (usize::MAX, host);
        let arrival = (self.now + delay).max(self.links.get(&link).copied().unwrap_or_default());
        self.links.insert(link, arrival);
        self.next += 1;
        self.queue.insert(
            (arrival, self.next),
            SimEvent::Machine {
                host,
                event: Event::Members(members),
            },
        );
    }

    /// Survivors see `host` gone (each at its own time) and the leader evicts its claims.
    fn remove_from_views(&mut self, host: usize) {
        for other in 0..self.hosts.len() {
            if other != host && self.reachable(other) {
                let delay = self.millis(100, 900);
                self.views[other].remove(&host);
                self.deliver_view(other, delay);
            }
        }
        let delay = self.millis(1_000, 1_500);
        self.at(delay, SimEvent::Evict(host));
    }

    fn handle(&mut self, event: SimEvent) {
        match event {
            SimEvent::Machine { host, event } => self.feed(host, event),
            SimEvent::Network {
                from,
                to,
                key,
                envelope,
            } => {
                if self.reachable(to) && self.hosts[from].partitioned == self.hosts[to].partitioned
                {
                    self.at.insert(envelope.item.id, to);
                    let from = Some(address(from));
                    self.feed(
                        to,
                        Event::Message {
                            key,
                            envelope,
                            from,
                        },
                    );
                } else if !self.fates.contains_key(&envelope.item.id) {
                    self.settle(envelope.item.id, Fate::Lost);
                }
            }
            SimEvent::Directory { host, op } => self.directory_op(host, op),
            SimEvent::StopDone { host, key } => {
                if self.hosts[host].alive {
                    self.hosts[host].running.remove(&key);
                    self.overlap_ended(&key);
                    self.feed(host, Event::Stopped { key });
                }
            }
            SimEvent::Send => self.client_send(),
            SimEvent::Kill(host) => {
                if self.hosts[host].alive {
                    self.hosts[host].alive = false;
                    self.hosts[host].running.clear();
                    self.lose_held_by(host);
                    if !self.hosts[host].cut {
                        self.remove_from_views(host);
                    }
                }
            }
            SimEvent::Leave(host) => {
                if self.reachable(host) && !self.hosts[host].leaving {
                    self.hosts[host].leaving = true;
                    self.feed(host, Event::Leave);
                }
            }
            SimEvent::CutOff(host) => {
                if self.reachable(host) {
                    self.hosts[host].cut = true;
                    // Lease-backed: the host loses its lease and fences well before the
                    // survivors age it out and evict its claims.
                    let fence = self.millis(300, 600);
                    self.at(fence, SimEvent::Fence(host));
                    self.remove_from_views(host);
                }
            }
            SimEvent::Fence(host) => {
                self.feed(host, Event::Fence);
                self.lose_held_by(host);
            }
            SimEvent::Evict(host) => {
                let name = self.hosts[host].id.to_string();
                let evicted = now_or_never(self.directory.evict_host(&name)).expect("evict");
                if !evicted.is_empty() {
                    let revision = self.revision();
                    for key in evicted {
                        self.watched(&key, Watched::Released(address(host)), revision);
                    }
                }
            }
            SimEvent::Partition(host) => {
                if self.reachable(host) {
                    // Gossip-only: the two sides age each other out; nobody fences, and the
                    // partitioned host still reaches the directory and sees its watch.
                    self.hosts[host].partitioned = true;
                    self.remove_from_views(host);
                    self.views[host] = BTreeSet::from([host]);
                    let delay = self.millis(100, 900);
                    self.deliver_view(host, delay);
                }
            }
            SimEvent::Join => {
                let index = self.boot();
                let mut view: BTreeSet<usize> = (0..self.hosts.len())
                    .filter(|&i| self.reachable(i))
                    .collect();
                view.insert(index);
                self.views[index].clone_from(&view);
                self.feed(
                    index,
                    Event::Members(view.iter().map(|&i| address(i)).collect()),
                );
                for other in 0..index {
                    if self.reachable(other) {
                        // The gossip state it joins carries every published count.
                        let count = self.hosts[other]
                            .machine
                            .as_ref()
                            .expect("machine")
                            .activations();
                        self.gossip_load(other, index, count);
                        self.views[other].insert(index);
                        let delay = self.millis(50, 500);
                        self.deliver_view(other, delay);
                    }
                }
            }
        }
    }

    fn client_send(&mut self) {
        let senders: Vec<usize> = (0..self.hosts.len())
            .filter(|&h| self.reachable(h) && !self.hosts[h].leaving)
            .collect();
        if senders.is_empty() {
            return;
        }
        let host = senders[self.rng.random_range(0..senders.len())];
        let sender = host as u64 * 4 + self.rng.random_range(0..4);
        let key = format!("k{}", self.rng.random_range(0..self.scenario.keys));
        let seq = self.next_seq.entry(sender).or_insert(0);
        *seq += 1;
        let msg = Msg {
            id: self.next_msg,
            sender,
            seq: *seq,
        };
        self.next_msg += 1;
        self.at.insert(msg.id, host);
        self.feed(
            host,
            Event::Message {
                key,
                envelope: Envelope::new(msg),
                from: None,
            },
        );
    }

    fn run_until(&mut self, end: Duration) {
        while let Some(entry) = self.queue.first_entry() {
            if entry.key().0 > end {
                break;
            }
            let ((time, _), event) = entry.remove_entry();
            self.now = time;
            self.handle(event);
        }
        self.now = end;
    }

    /// Schedule the clients' traffic over `span` and the faults of this seed.
    fn schedule(&mut self, span: Duration) {
        for _ in 0..self.scenario.sends {
            let at = Duration::from_millis(self.rng.random_range(0..span.as_millis() as u64));
            self.at(at, SimEvent::Send);
        }
        if !self.scenario.faults {
            return;
        }
        let mut alive = self.scenario.hosts;
        for _ in 0..self.rng.random_range(1..=3) {
            let at = Duration::from_millis(self.rng.random_range(1_000..span.as_millis() as u64));
            let victim = self.rng.random_range(0..self.scenario.hosts);
            let fault = match self.rng.random_range(0..4) {
                0 if alive > 2 => {
                    alive -= 1;
                    SimEvent::Kill(victim)
                }
                1 if alive > 2 => {
                    alive -= 1;
                    SimEvent::Leave(victim)
                }
                2 if alive > 2 => {
                    alive -= 1;
                    SimEvent::CutOff(victim)
                }
                _ => {
                    alive += 1;
                    SimEvent::Join
                }
            };
            self.at(at, fault);
        }
    }

    /// After the traffic and a quiet minute: every message has a fate, nothing waits.
    fn check_accounted(&self) {
        for id in 0..self.next_msg {
            assert!(
                self.fates.contains_key(&id),
                "seed {}: message {id} neither handled, dead-lettered nor lost with a host (last at host {:?})",
                self.seed,
                self.at.get(&id)
            );
        }
    }
}

fn run(seed: u64, scenario: Scenario) -> Figures {
    let mut sim = Sim::new(seed, scenario);
    let span = Duration::from_secs(20);
    sim.schedule(span);
    sim.run_until(span + Duration::from_secs(60));
    sim.check_accounted();
    sim.figures
}

fn faulty(seed: u64) -> Scenario {
    Scenario {
        hosts: 4,
        keys: 30,
        sends: 1_500,
        faults: true,
        idle: if seed % 2 == 0 {
            Some(Duration::from_secs(2))
        } else {
            None
        },
        policy: (seed % 3) as u8,
    }
}

#[test]
fn no_key_is_active_twice_and_every_message_is_accounted_for_across_kills_leaves_and_cut_offs() {
    let mut total = Figures::default();
    for seed in 0..240 {
        let figures = run(seed, faulty(seed));
        total.handled += figures.handled;
        total.dead_letters += figures.dead_letters;
        total.lost += figures.lost;
        total.reordered += figures.reordered;
        total.activations += figures.activations;
    }
    // The faults must have bitten, or the run proves nothing.
    assert!(total.lost > 0 && total.activations > 240 * 30, "{total:?}");
    assert!(
        total.handled * 10 > (total.handled + total.dead_letters + total.lost) * 9,
        "{total:?}"
    );
    println!("240 seeds: {total:?}");
}

#[test]
fn without_faults_or_passivation_every_message_is_handled_in_each_senders_order() {
    for seed in 0..50 {
        let scenario = Scenario {
            hosts: 4,
            keys: 30,
            sends: 1_500,
            faults: false,
            idle: None,
            policy: (seed % 3) as u8,
        };
        let figures = run(seed, scenario);
        assert_eq!(figures.handled, 1_500, "seed {seed}: {figures:?}");
        assert_eq!(figures.reordered, 0, "seed {seed}: {figures:?}");
        assert!(figures.activations <= 30, "seed {seed}: {figures:?}");
    }
}

#[test]
fn activation_count_placement_steers_new_keys_to_a_newly_added_host() {
    for seed in 0..20 {
        let scenario = Scenario {
            hosts: 3,
            keys: 1,
            sends: 0,
            faults: false,
            idle: None,
            policy: 0,
        };
        let mut sim = Sim::new(seed, scenario);
        // 300 keys on the three hosts, and their counts published.
        for k in 0..300 {
            let host = k % 3;
            let msg = Msg {
                id: sim.next_msg,
                sender: host as u64,
                seq: k as u64,
            };
            sim.next_msg += 1;
            sim.at.insert(msg.id, host);
            sim.feed(
                host,
                Event::Message {
                    key: format!("old-{k}"),
                    envelope: Envelope::new(msg),
                    from: None,
                },
            );
        }
        sim.run_until(Duration::from_secs(5));
        sim.at(Duration::ZERO, SimEvent::Join);
        sim.run_until(Duration::from_secs(10));
        // 60 new keys, first messages from the old hosts.
        for k in 0..60 {
            let host = k % 3;
            let msg = Msg {
                id: sim.next_msg,
                sender: host as u64,
                seq: 1_000 + k as u64,
            };
            sim.next_msg += 1;
            sim.at.insert(msg.id, host);
            sim.feed(
                host,
                Event::Message {
                    key: format!("new-{k}"),
                    envelope: Envelope::new(msg),
                    from: None,
                },
            );
        }
        sim.run_until(Duration::from_secs(15));
        sim.check_accounted();
        let on_new = sim.hosts[3]
            .running
            .keys()
            .filter(|k| k.starts_with("new-"))
            .count();
        let spread: Vec<usize> = sim.hosts.iter().map(|h| h.running.len()).collect();
        assert_eq!(
            on_new, 60,
            "seed {seed}: only {on_new} of 60 new keys on the new host; activations per host {spread:?}"
        );
        let old_on_new = sim.hosts[3]
            .running
            .keys()
            .filter(|k| k.starts_with("old-"))
            .count();
        assert_eq!(
            old_on_new, 0,
            "seed {seed}: nothing moves without rebalancing"
        );
    }
}

#[test]
fn hosts_that_see_each_other_cold_converge_on_one_activation_without_dead_letters() {
    // Every host sees the others as cold (nothing published yet) and itself as loaded, so each
    // places a concurrent first message on another host: crosswise placements. The directory's
    // claim must arbitrate instead of the placed messages being placed again around the ring.
    for seed in 0..200 {
        let hosts = 3 + (seed % 3) as usize;
        let scenario = Scenario {
            hosts,
            keys: 1,
            sends: 0,
            faults: false,
            idle: None,
            policy: 0,
        };
        let mut sim = Sim::new(seed, scenario);
        for round in 0..4u64 {
            for host in 0..hosts {
                let msg = Msg {
                    id: sim.next_msg,
                    sender: host as u64,
                    seq: round,
                };
                sim.next_msg += 1;
                sim.at.insert(msg.id, host);
                sim.feed(
                    host,
                    Event::Message {
                        key: "hot".to_owned(),
                        envelope: Envelope::new(msg),
                        from: None,
                    },
                );
            }
        }
        sim.run_until(Duration::from_secs(5));
        sim.check_accounted();
        let sent = hosts * 4;
        assert_eq!(
            (sim.figures.handled, sim.figures.dead_letters),
            (sent, 0),
            "seed {seed}: {hosts} hosts placing crosswise: {:?}",
            sim.figures
        );
        assert_eq!(sim.figures.activations, 1, "seed {seed}: {:?}", sim.figures);
        assert_eq!(sim.figures.reordered, 0, "seed {seed}: {:?}", sim.figures);
    }
}

#[test]
fn without_a_lease_a_partitioned_host_overlaps_only_until_its_watch_shows_the_eviction() {
    // Gossip-only membership over the in-memory directory: one host is cut from its peers but
    // not from the directory, and nobody fences. The survivors evict its claims and activate
    // its keys again while it still runs them: two activations, until the partitioned host's
    // watch shows its claim gone and its activation stops.
    let mut overlaps: Vec<Duration> = Vec::new();
    for seed in 0..200 {
        let scenario = Scenario {
            hosts: 4,
            keys: 30,
            sends: 1_500,
            faults: false,
            idle: None,
            policy: (seed % 3) as u8,
        };
        let mut sim = Sim::new(seed, scenario);
        sim.gossip_only = true;
        let span = Duration::from_secs(20);
        sim.schedule(span);
        sim.at(
            Duration::from_secs(5),
            SimEvent::Partition((seed % 4) as usize),
        );
        sim.run_until(span + Duration::from_secs(60));
        sim.check_accounted();
        assert!(
            sim.overlapping.is_empty(),
            "seed {seed}: still running twice at the end: {:?}",
            sim.overlapping
        );
        overlaps.extend(sim.overlaps);
    }
    overlaps.sort();
    let max = overlaps.last().copied().unwrap_or_default();
    let p50 = overlaps
        .get(overlaps.len() / 2)
        .copied()
        .unwrap_or_default();
    println!(
        "200 seeds, gossip-only partition: {} overlaps of two activations, p50 {p50:?}, max {max:?}",
        overlaps.len()
    );
    // The window exists without a lease (or the test proves nothing), and it closes within the
    // simulated watch delay (at most 30 ms) plus the stop (at most 20 ms).
    assert!(overlaps.len() > 10, "{} overlaps", overlaps.len());
    assert!(max <= Duration::from_millis(50), "max overlap {max:?}");
}
