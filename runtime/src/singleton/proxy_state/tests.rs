use std::collections::{BTreeMap, BTreeSet, VecDeque};

use proptest::prelude::*;
use tokio::time::Instant;

use super::*;

fn node(i: u8) -> Address {
    Address::new("sim", "10.0.0.1", 2550 + u16::from(i))
}

fn routed(route: Route, answering: &[u8], local_manager: bool) -> ProxyEvent<u32> {
    ProxyEvent::Routed {
        route,
        answering: answering.iter().map(|&i| node(i)).collect(),
        local_manager,
        force: false,
    }
}

/// Feed `event`, returning the actions.
fn feed(state: &mut Option<ProxyState<u32>>, event: ProxyEvent<u32>) -> Vec<ProxyAction<u32>> {
    let (next, actions) = step(state.take().expect("state"), event, Instant::now());
    *state = Some(next);
    actions
}

fn sends(actions: &[ProxyAction<u32>]) -> Vec<(Address, u32)> {
    actions
        .iter()
        .filter_map(|a| match a {
            ProxyAction::Send { node, item } => Some((node.clone(), *item)),
            _ => None,
        })
        .collect()
}

#[test]
fn messages_wait_while_nobody_hosts_and_go_out_in_order_once_a_host_is_elected() {
    let mut state = Some(ProxyState::new(node(0), 10, 1));
    for i in 0..3 {
        assert!(sends(&feed(&mut state, ProxyEvent::Submit(i))).is_empty());
    }
    let actions = feed(&mut state, routed(Route::Remote(node(1)), &[0, 1], true));
    assert_eq!(
        sends(&actions),
        vec![(node(1), 0), (node(1), 1), (node(1), 2)]
    );
    assert_eq!(actions.first(), Some(&ProxyAction::WithdrawFastPath));
    assert_eq!(
        actions.last(),
        Some(&ProxyAction::OfferFastPath(Some(node(1))))
    );
}

#[test]
fn a_re_route_drains_the_previous_manager_before_sending_to_the_new_one() {
    let mut state = Some(ProxyState::new(node(0), 10, 7));
    feed(&mut state, routed(Route::Remote(node(1)), &[0, 1, 2], true));
    assert_eq!(
        sends(&feed(&mut state, ProxyEvent::Submit(1))),
        vec![(node(1), 1)]
    );
    let actions = feed(&mut state, routed(Route::Remote(node(2)), &[0, 1, 2], true));
    assert!(actions.contains(&ProxyAction::RequestDrain {
        node: node(1),
        nonce: 7
    }));
    assert_eq!(actions.last(), Some(&ProxyAction::OfferFastPath(None)));
    assert!(sends(&feed(&mut state, ProxyEvent::Submit(2))).is_empty());
    let actions = feed(
        &mut state,
        ProxyEvent::Drained {
            nonce: 7,
            items: vec![1],
        },
    );
    assert_eq!(sends(&actions), vec![(node(2), 1), (node(2), 2)]);
}

#[test]
fn a_manager_that_cannot_answer_is_not_asked_to_drain() {
    let mut state = Some(ProxyState::new(node(0), 10, 1));
    feed(&mut state, routed(Route::Remote(node(1)), &[0, 1, 2], true));
    feed(&mut state, ProxyEvent::Submit(1));
    // Node 1 is down: nothing to wait for.
    let actions = feed(&mut state, routed(Route::Remote(node(2)), &[0, 2], true));
    assert!(
        !actions
            .iter()
            .any(|a| matches!(a, ProxyAction::RequestDrain { .. }))
    );
    assert_eq!(
        sends(&feed(&mut state, ProxyEvent::Submit(2))),
        vec![(node(2), 2)]
    );
}

#[test]
fn an_elected_host_without_start_dead_letters_at_once_and_warns_once() {
    let mut state = Some(ProxyState::new(node(0), 10, 1));
    feed(&mut state, routed(Route::Local, &[1], false));
    let first = feed(&mut state, ProxyEvent::Submit(1));
    assert!(first.contains(&ProxyAction::Warn(ProxyWarning::NoManager)));
    assert!(first.contains(&ProxyAction::DeadLetter {
        item: 1,
        cause: DeadLetterCause::NoManager
    }));
    let second = feed(&mut state, ProxyEvent::Submit(2));
    assert!(!second.iter().any(|a| matches!(a, ProxyAction::Warn(_))));
    assert_eq!(state.as_ref().unwrap().buffered(), 0);
}

#[test]
fn a_full_buffer_dead_letters_the_newest_and_keeps_the_oldest() {
    let mut state = Some(ProxyState::new(node(0), 2, 1));
    feed(&mut state, ProxyEvent::Submit(1));
    feed(&mut state, ProxyEvent::Submit(2));
    let actions = feed(&mut state, ProxyEvent::Submit(3));
    assert!(actions.contains(&ProxyAction::DeadLetter {
        item: 3,
        cause: DeadLetterCause::HoldFull
    }));
    let actions = feed(&mut state, routed(Route::Remote(node(1)), &[1], true));
    assert_eq!(sends(&actions), vec![(node(1), 1), (node(1), 2)]);
}

#[test]
fn a_stopping_proxy_dead_letters_what_it_buffers() {
    let mut state = Some(ProxyState::new(node(0), 10, 1));
    feed(&mut state, ProxyEvent::Submit(1));
    let actions = feed(&mut state, ProxyEvent::Stopped);
    assert!(actions.contains(&ProxyAction::DeadLetter {
        item: 1,
        cause: DeadLetterCause::NotHosting
    }));
}

#[test]
fn a_drain_timeout_gives_up_only_the_drain_it_names() {
    let mut state = Some(ProxyState::new(node(0), 10, 5));
    feed(&mut state, routed(Route::Remote(node(1)), &[1, 2], true));
    feed(&mut state, ProxyEvent::Submit(1));
    feed(&mut state, routed(Route::Remote(node(2)), &[1, 2], true));
    feed(&mut state, ProxyEvent::Submit(2));
    assert!(sends(&feed(&mut state, ProxyEvent::DrainTimedOut { nonce: 4 })).is_empty());
    assert_eq!(
        sends(&feed(&mut state, ProxyEvent::DrainTimedOut { nonce: 5 })),
        vec![(node(2), 2)]
    );
    assert_eq!(state.as_ref().unwrap().route(), &Route::Remote(node(2)));
}

// The model: a proxy on node 0, managers on nodes 0..NODES, one ordered link from the proxy to
// each manager, the proxy actor's mailbox, callers that use the fast path whenever it is
// offered and nothing of theirs waits in the mailbox, and a singleton that lives on at most
// one manager at a time (a hand-over stops one before the next starts).

const NODES: u8 = 3;

#[derive(Debug, Clone)]
enum Op {
    /// A caller sends the next message.
    Tell,
    /// The proxy actor handles the oldest message in its mailbox.
    Handle,
    /// The manager on `n` takes the oldest message on its link.
    Deliver(u8),
    /// This node's view changes: the proxy will re-route to `host` (None: nobody).
    View(Option<u8>),
    /// The singleton moves to `n` (or stops everywhere).
    HandOver(Option<u8>),
    /// The node `n` (not 0) dies: its link and what it holds are gone, it never answers.
    Kill(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => Just(Op::Tell),
        4 => Just(Op::Handle),
        4 => (0..NODES).prop_map(Op::Deliver),
        1 => proptest::option::of(0..NODES).prop_map(Op::View),
        1 => proptest::option::of(0..NODES).prop_map(Op::HandOver),
        1 => (1..NODES).prop_map(Op::Kill),
    ]
}

enum LinkMsg {
    Msg(u32),
    Drain(u64),
}

enum Mail {
    Submit(u32),
    View(Option<u8>),
    Drained(u64, Vec<u32>),
    Timeout(u64),
}

#[derive(Default)]
struct Manager {
    link: VecDeque<LinkMsg>,
    held: Vec<u32>,
    hosting: bool,
    dead: bool,
}

struct Model {
    state: Option<ProxyState<u32>>,
    mailbox: VecDeque<Mail>,
    /// Submits in the mailbox (the shell's `pending`).
    pending: usize,
    fast: Option<Address>,
    managers: BTreeMap<Address, Manager>,
    /// Drains requested and where.
    drains: BTreeMap<u64, Address>,
    next: u32,
    delivered: Vec<u32>,
    dead_lettered: BTreeSet<u32>,
    lost: BTreeSet<u32>,
}

impl Model {
    fn new(buffer_size: usize) -> Self {
        Self {
            state: Some(ProxyState::new(node(0), buffer_size, 1)),
            mailbox: VecDeque::new(),
            pending: 0,
            fast: None,
            managers: (0..NODES).map(|i| (node(i), Manager::default())).collect(),
            drains: BTreeMap::new(),
            next: 0,
            delivered: Vec::new(),
            dead_lettered: BTreeSet::new(),
            lost: BTreeSet::new(),
        }
    }

    fn index(address: &Address) -> u8 {
        u8::try_from(address.port - 2550).expect("model node")
    }

    fn answering(&self) -> BTreeSet<Address> {
        self.managers
            .iter()
            .filter(|(_, m)| !m.dead)
            .map(|(a, _)| a.clone())
            .collect()
    }

    fn apply(&mut self, op: Op) {
        match op {
            Op::Tell => {
                let n = self.next;
                self.next += 1;
                match &self.fast {
                    Some(target) if self.pending == 0 => {
                        self.push_link(&target.clone(), LinkMsg::Msg(n));
                    }
                    _ => {
                        self.pending += 1;
                        self.mailbox.push_back(Mail::Submit(n));
                    }
                }
            }
            Op::Handle => {
                let Some(mail) = self.mailbox.pop_front() else {
                    return;
                };
                let event = match mail {
                    Mail::Submit(n) => {
                        self.pending -= 1;
                        ProxyEvent::Submit(n)
                    }
                    Mail::View(host) => ProxyEvent::Routed {
                        route: match host {
                            None => Route::Nobody,
                            Some(0) => Route::Local,
                            Some(i) => Route::Remote(node(i)),
                        },
                        answering: self.answering(),
                        local_manager: true,
                        force: false,
                    },
                    Mail::Drained(nonce, items) => ProxyEvent::Drained { nonce, items },
                    Mail::Timeout(nonce) => ProxyEvent::DrainTimedOut { nonce },
                };
                let (next, actions) = step(self.state.take().unwrap(), event, Instant::now());
                self.state = Some(next);
                for action in actions {
                    self.perform(action);
                }
            }
            Op::Deliver(i) => {
                let manager = self.managers.get_mut(&node(i)).unwrap();
                match manager.link.pop_front() {
                    None => {}
                    Some(LinkMsg::Msg(n)) if manager.hosting => self.delivered.push(n),
                    Some(LinkMsg::Msg(n)) => manager.held.push(n),
                    Some(LinkMsg::Drain(nonce)) => {
                        let items = std::mem::take(&mut manager.held);
                        self.mailbox.push_back(Mail::Drained(nonce, items));
                    }
                }
            }
            Op::View(host) => {
                // A dead node is not elected in the view that follows its death.
                let host = host.filter(|&i| !self.managers[&node(i)].dead);
                self.mailbox.push_back(Mail::View(host));
            }
            Op::HandOver(to) => {
                for manager in self.managers.values_mut() {
                    manager.hosting = false;
                }
                if let Some(i) = to {
                    let manager = self.managers.get_mut(&node(i)).unwrap();
                    if !manager.dead {
                        manager.hosting = true;
                        self.delivered.append(&mut manager.held);
                    }
                }
            }
            Op::Kill(i) => {
                let address = node(i);
                let manager = self.managers.get_mut(&address).unwrap();
                if manager.dead {
                    return;
                }
                manager.dead = true;
                manager.hosting = false;
                for held in manager.held.drain(..) {
                    self.lost.insert(held);
                }
                for msg in manager.link.drain(..) {
                    if let LinkMsg::Msg(n) = msg {
                        self.lost.insert(n);
                    }
                }
                // The drains it will never answer time out; the view then says it left.
                let unanswered: Vec<u64> = self
                    .drains
                    .iter()
                    .filter(|(_, at)| **at == address)
                    .map(|(nonce, _)| *nonce)
                    .collect();
                for nonce in unanswered {
                    self.mailbox.push_back(Mail::Timeout(nonce));
                }
                let host = self
                    .managers
                    .iter()
                    .find(|(_, m)| m.hosting)
                    .map(|(a, _)| Self::index(a));
                self.mailbox.push_back(Mail::View(host));
            }
        }
    }

    fn push_link(&mut self, to: &Address, msg: LinkMsg) {
        let manager = self.managers.get_mut(to).unwrap();
        if manager.dead {
            if let LinkMsg::Msg(n) = msg {
                self.lost.insert(n);
            } else if let LinkMsg::Drain(nonce) = msg {
                self.mailbox.push_back(Mail::Timeout(nonce));
            }
            return;
        }
        manager.link.push_back(msg);
    }

    fn perform(&mut self, action: ProxyAction<u32>) {
        match action {
            ProxyAction::WithdrawFastPath => self.fast = None,
            ProxyAction::Send { node, item } => self.push_link(&node, LinkMsg::Msg(item)),
            ProxyAction::RequestDrain { node, nonce } => {
                self.drains.insert(nonce, node.clone());
                self.push_link(&node, LinkMsg::Drain(nonce));
            }
            // Only drains of dead nodes time out in this model (see `Kill`); a timeout of a live
            // manager's drain is the documented cost of a node that stops answering.
            ProxyAction::ScheduleDrainTimeout { .. } | ProxyAction::Warn(_) => {}
            ProxyAction::DeadLetter { item, .. } => {
                self.dead_lettered.insert(item);
            }
            ProxyAction::OfferFastPath(target) => self.fast = target,
        }
    }

    /// Let everything settle on a live host that the view agrees on.
    fn settle(&mut self) {
        let host = self
            .managers
            .iter()
            .find(|(_, m)| !m.dead)
            .map(|(a, _)| Self::index(a))
            .expect("node 0 never dies");
        self.apply(Op::View(Some(host)));
        self.apply(Op::HandOver(Some(host)));
        for _ in 0..10_000 {
            let idle = self.mailbox.is_empty() && self.managers.values().all(|m| m.link.is_empty());
            if idle {
                return;
            }
            self.apply(Op::Handle);
            for i in 0..NODES {
                self.apply(Op::Deliver(i));
            }
        }
        panic!("the model did not settle");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Per-proxy FIFO: whatever the interleaving of sends (through the actor or the fast
    /// path), re-routes, hand-overs, drains and their answers, and deaths of other nodes, the
    /// singleton receives the proxy's messages in send order, each at most once; once things
    /// settle on a live host every message was delivered, dead-lettered (buffer full), or lost
    /// with a node that died holding it.
    #[test]
    fn messages_from_one_proxy_reach_the_singleton_in_send_order(
        ops in proptest::collection::vec(op(), 1..200),
        buffer_size in prop_oneof![Just(1_000usize), 1usize..4],
    ) {
        let mut model = Model::new(buffer_size);
        for op in ops {
            model.apply(op);
        }
        model.settle();
        prop_assert!(
            model.delivered.windows(2).all(|w| w[0] < w[1]),
            "out of order or duplicated: {:?}", model.delivered
        );
        for n in 0..model.next {
            let accounted = model.delivered.binary_search(&n).is_ok()
                || model.dead_lettered.contains(&n)
                || model.lost.contains(&n);
            prop_assert!(accounted, "message {} vanished; delivered {:?}", n, model.delivered);
        }
        if model.lost.is_empty() && buffer_size == 1_000 {
            prop_assert_eq!(model.delivered.len() as u32, model.next, "nothing may be lost");
        }
    }
}
