//! The singleton proxy's routing as a pure state machine: where each message goes, what waits,
//! when the previous host's manager is asked to give messages back, and when callers may send
//! straight to the host. `proxy.rs` is the thin shell that performs the actions.
//!
//! # Ordering across a hand-over
//! Messages from one proxy reach the singleton in send order, also while the host moves. When
//! the route changes, the machine first asks the manager it last sent to for the messages that
//! manager still holds from it ([`ProxyAction::RequestDrain`]) and buffers new ones meanwhile;
//! that manager answers after every earlier message from this proxy (one ordered link), with
//! the held ones in order, and they go to the new host ahead of the buffer. A drain that gets no
//! answer by its deadline (the old manager's node died) is given up. The property test in
//! `proxy_state/tests.rs` checks the order across any interleaving of re-routes, hand-overs,
//! fast-path sends, drains and their answers.
//!
//! # The fast path
//! After every step the machine says whether callers may send straight to the host's manager
//! ([`ProxyAction::OfferFastPath`]): only while nothing is buffered or draining and the target is
//! the manager it last sent to. A re-route withdraws the offer before anything else it does
//! reaches a manager, so a message sent fast is on the old link ahead of the drain request.

use std::collections::{BTreeSet, VecDeque};
use std::time::Duration;

use tokio::time::Instant;

use super::event::DeadLetterCause;
use crate::Address;

/// How long a proxy waits for the previous host's manager to give back held messages.
pub(super) const DRAIN_TIMEOUT: Duration = Duration::from_secs(1);

/// Where the proxy's messages go, from this node's view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Route {
    /// No member hosts, or the elected host is unreachable from here: buffer.
    Nobody,
    /// This node is the elected host.
    Local,
    /// Another node is.
    Remote(Address),
}

/// What happened to the proxy.
#[derive(Debug)]
pub(super) enum ProxyEvent<T> {
    /// A message for the singleton that came through the proxy actor.
    Submit(T),
    /// This node's view, the role, or `start`/`stop` here changed.
    Routed {
        /// The elected host as this node sees it.
        route: Route,
        /// Nodes whose manager may still hold messages from this proxy and can answer a drain
        /// (members neither down nor removed and reachable; this node while a manager runs
        /// at the path).
        answering: BTreeSet<Address>,
        /// Whether `start` is in effect on this node (a manager that hosts when elected).
        local_manager: bool,
        /// A re-route even if the route is the same (`start`/`stop` here, a new role).
        force: bool,
    },
    /// A manager answered drain `nonce` with the messages it held from this proxy, oldest first.
    Drained {
        /// The drain answered.
        nonce: u64,
        /// The held messages.
        items: Vec<T>,
    },
    /// Drain `nonce`'s deadline passed.
    DrainTimedOut {
        /// The drain.
        nonce: u64,
    },
    /// The proxy stops: what it still buffers becomes dead letters.
    Stopped,
}

/// A warning the shell logs once per proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ProxyWarning {
    /// The buffer is full while no node hosts.
    BufferFull,
    /// This node is the elected host but never called `start`.
    NoManager,
}

/// What the shell must do, in order.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum ProxyAction<T> {
    /// Stop callers from sending straight to a manager.
    WithdrawFastPath,
    /// Send `item` to the manager on `node` (this node: the local manager).
    Send {
        /// The manager's node.
        node: Address,
        /// The message.
        item: T,
    },
    /// Ask the manager on `node` for the messages it holds from this proxy.
    RequestDrain {
        /// The manager's node.
        node: Address,
        /// Echoed in the answer.
        nonce: u64,
    },
    /// Deliver [`ProxyEvent::DrainTimedOut`] for `nonce` at `at`.
    ScheduleDrainTimeout {
        /// The drain.
        nonce: u64,
        /// When.
        at: Instant,
    },
    /// `item` becomes a dead letter.
    DeadLetter {
        /// The message.
        item: T,
        /// Why.
        cause: DeadLetterCause,
    },
    /// Log this warning (each kind once per proxy).
    Warn(ProxyWarning),
    /// Callers may send straight to the manager on this node, or (`None`) only through the
    /// proxy actor.
    OfferFastPath(Option<Address>),
}

/// The proxy's routing state.
#[derive(Debug)]
pub(super) struct ProxyState<T> {
    me: Address,
    buffer_size: usize,
    route: Route,
    answering: BTreeSet<Address>,
    local_manager: bool,
    /// The manager this proxy last sent to; drained before sending anywhere else.
    last_sent: Option<Address>,
    /// The drain in flight: (nonce, manager node).
    drain: Option<(u64, Address)>,
    next_nonce: u64,
    buffer: VecDeque<T>,
    warned_no_manager: bool,
    warned_overflow: bool,
}

impl<T> ProxyState<T> {
    /// A proxy on `me` with nowhere to send yet; drain nonces start at `first_nonce`.
    pub(super) fn new(me: Address, buffer_size: usize, first_nonce: u64) -> Self {
        Self {
            me,
            buffer_size,
            route: Route::Nobody,
            answering: BTreeSet::new(),
            local_manager: false,
            last_sent: None,
            drain: None,
            next_nonce: first_nonce,
            buffer: VecDeque::new(),
            warned_no_manager: false,
            warned_overflow: false,
        }
    }

    /// Where messages go now.
    #[cfg(test)]
    pub(super) fn route(&self) -> &Route {
        &self.route
    }

    /// How many messages wait in the buffer.
    #[cfg(test)]
    pub(super) fn buffered(&self) -> usize {
        self.buffer.len()
    }

    /// The node of the manager the current route leads to.
    fn route_node(&self) -> Option<Address> {
        match &self.route {
            Route::Nobody => None,
            Route::Local => Some(self.me.clone()),
            Route::Remote(node) => Some(node.clone()),
        }
    }

    /// Re-route: withdraw the fast path first, drain the previous manager, send what waits.
    fn set_route(&mut self, route: Route, now: Instant, actions: &mut Vec<ProxyAction<T>>) {
        actions.push(ProxyAction::WithdrawFastPath);
        self.route = route;
        if let (Some(previous), Some(target)) = (self.last_sent.clone(), self.route_node())
            && previous != target
            && self.drain.is_none()
        {
            if self.answering.contains(&previous) {
                self.start_drain(previous, now, actions);
            } else {
                self.last_sent = None;
            }
        }
        self.flush(now, actions);
    }

    fn submit(&mut self, item: T, now: Instant, actions: &mut Vec<ProxyAction<T>>) {
        if self.drain.is_some() || !self.buffer.is_empty() {
            self.buffer_push(item, actions);
            return;
        }
        if let Err(item) = self.try_send(item, now, actions) {
            self.buffer_push(item, actions);
        }
    }

    /// Send now, or give the message back to be buffered.
    fn try_send(
        &mut self,
        item: T,
        now: Instant,
        actions: &mut Vec<ProxyAction<T>>,
    ) -> Result<(), T> {
        let Some(target) = self.route_node() else {
            return Err(item);
        };
        if let Some(previous) = self.last_sent.clone()
            && previous != target
        {
            if self.answering.contains(&previous) {
                self.start_drain(previous, now, actions);
                return Err(item);
            }
            self.last_sent = None;
        }
        if target == self.me && !self.local_manager {
            if !self.warned_no_manager {
                self.warned_no_manager = true;
                actions.push(ProxyAction::Warn(ProxyWarning::NoManager));
            }
            actions.push(ProxyAction::DeadLetter {
                item,
                cause: DeadLetterCause::NoManager,
            });
            return Ok(());
        }
        actions.push(ProxyAction::Send {
            node: target.clone(),
            item,
        });
        self.last_sent = Some(target);
        Ok(())
    }

    fn start_drain(&mut self, node: Address, now: Instant, actions: &mut Vec<ProxyAction<T>>) {
        let nonce = self.next_nonce;
        self.next_nonce = self.next_nonce.wrapping_add(1);
        actions.push(ProxyAction::RequestDrain {
            node: node.clone(),
            nonce,
        });
        actions.push(ProxyAction::ScheduleDrainTimeout {
            nonce,
            at: now + DRAIN_TIMEOUT,
        });
        self.drain = Some((nonce, node));
    }

    fn on_drained(
        &mut self,
        nonce: u64,
        mut items: Vec<T>,
        now: Instant,
        actions: &mut Vec<ProxyAction<T>>,
    ) {
        if self.drain.as_ref().is_some_and(|(n, _)| *n == nonce) {
            self.drain = None;
            self.last_sent = None;
        }
        // They were sent before anything still buffered (a late answer's too).
        items.extend(self.buffer.drain(..));
        self.buffer = items.into();
        self.flush(now, actions);
    }

    fn flush(&mut self, now: Instant, actions: &mut Vec<ProxyAction<T>>) {
        while self.drain.is_none() {
            let Some(item) = self.buffer.pop_front() else {
                break;
            };
            if let Err(item) = self.try_send(item, now, actions) {
                self.buffer.push_front(item);
                break;
            }
        }
    }

    fn buffer_push(&mut self, item: T, actions: &mut Vec<ProxyAction<T>>) {
        if self.buffer.len() >= self.buffer_size {
            if !self.warned_overflow {
                self.warned_overflow = true;
                actions.push(ProxyAction::Warn(ProxyWarning::BufferFull));
            }
            actions.push(ProxyAction::DeadLetter {
                item,
                cause: DeadLetterCause::HoldFull,
            });
            return;
        }
        self.buffer.push_back(item);
    }

    /// Offer the fast path exactly when nothing waits and the target is the last one sent to.
    fn offer_fast_path(&mut self, actions: &mut Vec<ProxyAction<T>>) {
        let node = self.route_node();
        let clear = self.drain.is_none()
            && self.buffer.is_empty()
            && (self.last_sent.is_none() || self.last_sent == node);
        let target = match node {
            Some(node) if clear && (node != self.me || self.local_manager) => Some(node),
            _ => None,
        };
        if target.is_some() {
            self.last_sent.clone_from(&target);
        }
        actions.push(ProxyAction::OfferFastPath(target));
    }
}

/// Advances the proxy by one event at `now`.
#[must_use]
pub(super) fn step<T>(
    mut state: ProxyState<T>,
    event: ProxyEvent<T>,
    now: Instant,
) -> (ProxyState<T>, Vec<ProxyAction<T>>) {
    let mut actions = Vec::new();
    match event {
        ProxyEvent::Submit(item) => state.submit(item, now, &mut actions),
        ProxyEvent::Routed {
            route,
            answering,
            local_manager,
            force,
        } => {
            state.answering = answering;
            let changed = local_manager != state.local_manager || route != state.route;
            state.local_manager = local_manager;
            if force || changed {
                state.set_route(route, now, &mut actions);
            }
        }
        ProxyEvent::Drained { nonce, items } => state.on_drained(nonce, items, now, &mut actions),
        ProxyEvent::DrainTimedOut { nonce } => {
            if state.drain.as_ref().is_some_and(|(n, _)| *n == nonce) {
                state.drain = None;
                state.last_sent = None;
                state.flush(now, &mut actions);
            }
        }
        ProxyEvent::Stopped => {
            actions.push(ProxyAction::WithdrawFastPath);
            for item in std::mem::take(&mut state.buffer) {
                actions.push(ProxyAction::DeadLetter {
                    item,
                    cause: DeadLetterCause::NotHosting,
                });
            }
            return (state, actions);
        }
    }
    state.offer_fast_path(&mut actions);
    (state, actions)
}

#[cfg(test)]
mod tests;
