//! The agent's health as the probes see it (seed 003): a small pure state machine and a shared
//! handle that the agent, its shutdown path and membership providers move along.
//!
//! ```text
//!            joined              drain              stopped
//! starting ─────────▶ ready ─────────▶ draining ─────────▶ stopped
//!     │  └──────────── drain ───────────▲  └──── (any) ──────▲
//!     └─ fence (from any state) ─▶ fenced   (terminal; never back)
//! ```
//! States only move forward: a draining host never becomes ready again, and a fenced host stays
//! fenced until the process restarts with a fresh identity.
//!
//! | state    | `/_troupe/health` (liveness) | `/_troupe/health/ready` (readiness) |
//! |----------|------------------------------|-------------------------------------|
//! | starting | 503 `{"status":"starting"}`  | 503 `{"status":"starting"}`         |
//! | ready    | 200 `{"status":"ok"}`        | 200 `{"status":"ok"}`               |
//! | draining | 200 `{"status":"ok"}`        | 503 `{"status":"draining"}`         |
//! | stopped  | 503 `{"status":"stopped"}`   | 503 `{"status":"stopped"}`          |
//! | fenced   | 503 `{"status":"fatal"}`     | 503 `{"status":"fatal"}`            |

use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::{mpsc, watch};
use troupe_protocol::AgentHealth;

/// Where the host is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HealthState {
    /// Started, not yet a serving member: every probe answers 503.
    Starting,
    /// Joined and serving.
    Ready,
    /// Shutting down: still live, no longer ready; responses carry `Connection: close`.
    Draining,
    /// Stopped after a drain.
    Stopped,
    /// Lost its place in membership: liveness answers 503 `fatal` so the pod restarts.
    Fenced,
}

impl HealthState {
    /// Every state.
    pub const ALL: [Self; 5] = [
        Self::Starting,
        Self::Ready,
        Self::Draining,
        Self::Stopped,
        Self::Fenced,
    ];

    /// Its name (`draining`).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Starting => "starting",
            Self::Ready => "ready",
            Self::Draining => "draining",
            Self::Stopped => "stopped",
            Self::Fenced => "fenced",
        }
    }

    /// The state as reported to the control plane; `Stopped` is not reported (the reporter
    /// has shipped its last batch, saying `draining`, by then).
    #[must_use]
    pub fn reported(self) -> Option<AgentHealth> {
        match self {
            Self::Starting => Some(AgentHealth::Starting),
            Self::Ready => Some(AgentHealth::Ready),
            Self::Draining => Some(AgentHealth::Draining),
            Self::Stopped => None,
            Self::Fenced => Some(AgentHealth::Fenced),
        }
    }

    /// Whether responses should carry `Connection: close` (from stop-begin on).
    #[must_use]
    pub fn closes_connections(self) -> bool {
        !matches!(self, Self::Starting | Self::Ready)
    }
}

/// What moves the state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HealthEvent {
    /// This node became a serving member (`Up`).
    Joined,
    /// Shutdown began (SIGTERM, `leave`).
    Drain,
    /// Shutdown finished.
    Stopped,
    /// The membership provider fenced this host (its lease is gone).
    Fence,
}

/// The next state: pure, total, and never moving backwards.
#[must_use]
pub fn step(state: HealthState, event: HealthEvent) -> HealthState {
    use HealthEvent as E;
    use HealthState as S;
    match (state, event) {
        (S::Fenced, _) | (_, E::Fence) => S::Fenced,
        (S::Stopped, _) | (_, E::Stopped) => S::Stopped,
        (S::Draining, _) | (_, E::Drain) => S::Draining,
        (S::Starting | S::Ready, E::Joined) => S::Ready,
    }
}

/// One probe's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeAnswer {
    /// HTTP status.
    pub status: u16,
    /// The `status` field of the JSON body.
    pub word: &'static str,
}

impl ProbeAnswer {
    const fn new(status: u16, word: &'static str) -> Self {
        Self { status, word }
    }
}

/// What `/_troupe/health` (liveness) answers in `state`.
#[must_use]
pub fn liveness(state: HealthState) -> ProbeAnswer {
    match state {
        HealthState::Starting => ProbeAnswer::new(503, "starting"),
        HealthState::Ready | HealthState::Draining => ProbeAnswer::new(200, "ok"),
        HealthState::Stopped => ProbeAnswer::new(503, "stopped"),
        HealthState::Fenced => ProbeAnswer::new(503, "fatal"),
    }
}

/// What `/_troupe/health/ready` (readiness) answers in `state`.
#[must_use]
pub fn readiness(state: HealthState) -> ProbeAnswer {
    match state {
        HealthState::Starting => ProbeAnswer::new(503, "starting"),
        HealthState::Ready => ProbeAnswer::new(200, "ok"),
        HealthState::Draining => ProbeAnswer::new(503, "draining"),
        HealthState::Stopped => ProbeAnswer::new(503, "stopped"),
        HealthState::Fenced => ProbeAnswer::new(503, "fatal"),
    }
}

/// A change of state, as subscribers receive it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthTransition {
    /// The state before.
    pub from: HealthState,
    /// The state now.
    pub to: HealthState,
    /// Why, when the caller said (`lease renewal got 404`).
    pub reason: Option<String>,
}

type Listener = Box<dyn Fn(&HealthTransition) -> bool + Send>;

struct Inner {
    reason: Option<String>,
    /// Called in order, under the lock, for each transition; dropped when they return false.
    listeners: Vec<Listener>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inner")
            .field("reason", &self.reason)
            .field("listeners", &self.listeners.len())
            .finish()
    }
}

/// The agent's health, shared: the probes read it; the agent, its shutdown and membership
/// providers (a Kubernetes-Lease provider calls [`Health::fence`]) move it.
#[derive(Debug, Clone)]
pub struct Health {
    state: Arc<watch::Sender<HealthState>>,
    inner: Arc<Mutex<Inner>>,
}

impl Default for Health {
    fn default() -> Self {
        Self::new()
    }
}

impl Health {
    /// A new handle in `starting`.
    #[must_use]
    pub fn new() -> Self {
        Self {
            state: Arc::new(watch::Sender::new(HealthState::Starting)),
            inner: Arc::new(Mutex::new(Inner {
                reason: None,
                listeners: Vec::new(),
            })),
        }
    }

    /// The current state.
    #[must_use]
    pub fn state(&self) -> HealthState {
        *self.state.borrow()
    }

    /// Why the state last changed, when the caller said.
    #[must_use]
    pub fn reason(&self) -> Option<String> {
        self.inner.lock().reason.clone()
    }

    /// Apply `event`; returns the transition when the state changed.
    pub fn apply(&self, event: HealthEvent, reason: Option<String>) -> Option<HealthTransition> {
        let mut inner = self.inner.lock();
        let from = self.state();
        let to = step(from, event);
        if to == from {
            return None;
        }
        self.state.send_replace(to);
        inner.reason.clone_from(&reason);
        let transition = HealthTransition { from, to, reason };
        inner.listeners.retain(|listener| listener(&transition));
        match to {
            HealthState::Fenced => {
                tracing::error!(reason = ?transition.reason, "agent fenced: liveness now answers 503 fatal");
            }
            _ => tracing::info!(
                from = from.as_str(),
                to = to.as_str(),
                "agent health changed"
            ),
        }
        Some(transition)
    }

    /// This node became a serving member.
    pub fn joined(&self) {
        self.apply(HealthEvent::Joined, None);
    }

    /// Shutdown began: live, not ready.
    pub fn drain(&self, reason: &str) {
        self.apply(HealthEvent::Drain, Some(reason.to_owned()));
    }

    /// Shutdown finished.
    pub fn stopped(&self) {
        self.apply(HealthEvent::Stopped, None);
    }

    /// Fence this host: liveness answers 503 `{"status":"fatal"}` from now on, so the
    /// orchestrator restarts it with a fresh identity. For membership providers that lost
    /// this host's membership token (a Kubernetes Lease renewal answering 404). Not for a
    /// renewal racing the host's own graceful leave: that is a clean exit.
    pub fn fence(&self, reason: &str) {
        self.apply(HealthEvent::Fence, Some(reason.to_owned()));
    }

    /// Every transition from now on, on a channel.
    #[must_use]
    pub fn subscribe(&self) -> mpsc::UnboundedReceiver<HealthTransition> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.on_transition(move |transition| tx.send(transition.clone()).is_ok());
        rx
    }

    /// Call `listener` synchronously on every transition from now on, in order, until it
    /// returns false. It runs under the handle's lock: keep it short and never call back in.
    pub fn on_transition(&self, listener: impl Fn(&HealthTransition) -> bool + Send + 'static) {
        self.inner.lock().listeners.push(Box::new(listener));
    }

    /// A receiver that sees the current state and every later one (latest value only).
    #[must_use]
    pub fn watch(&self) -> watch::Receiver<HealthState> {
        self.state.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn any_state() -> impl Strategy<Value = HealthState> {
        proptest::sample::select(HealthState::ALL.to_vec())
    }

    fn any_event() -> impl Strategy<Value = HealthEvent> {
        proptest::sample::select(vec![
            HealthEvent::Joined,
            HealthEvent::Drain,
            HealthEvent::Stopped,
            HealthEvent::Fence,
        ])
    }

    #[test]
    fn the_ordinary_life_of_a_host() {
        let mut state = HealthState::Starting;
        for (event, expected) in [
            (HealthEvent::Joined, HealthState::Ready),
            (HealthEvent::Drain, HealthState::Draining),
            (HealthEvent::Joined, HealthState::Draining),
            (HealthEvent::Stopped, HealthState::Stopped),
            (HealthEvent::Drain, HealthState::Stopped),
        ] {
            state = step(state, event);
            assert_eq!(state, expected, "after {event:?}");
        }
    }

    #[test]
    fn a_drain_before_joining_goes_straight_to_draining() {
        assert_eq!(
            step(HealthState::Starting, HealthEvent::Drain),
            HealthState::Draining
        );
    }

    #[test]
    fn the_probe_table() {
        use HealthState as S;
        let table = [
            (S::Starting, 503, "starting", 503, "starting"),
            (S::Ready, 200, "ok", 200, "ok"),
            (S::Draining, 200, "ok", 503, "draining"),
            (S::Stopped, 503, "stopped", 503, "stopped"),
            (S::Fenced, 503, "fatal", 503, "fatal"),
        ];
        for (state, live, live_word, ready, ready_word) in table {
            assert_eq!(
                liveness(state),
                ProbeAnswer::new(live, live_word),
                "{state:?}"
            );
            assert_eq!(
                readiness(state),
                ProbeAnswer::new(ready, ready_word),
                "{state:?}"
            );
        }
    }

    proptest! {
        #[test]
        fn states_only_move_forward(state in any_state(), event in any_event()) {
            prop_assert!(step(state, event) >= state);
        }

        #[test]
        fn fence_wins_from_anywhere_and_is_terminal(
            state in any_state(),
            later in proptest::collection::vec(any_event(), 0..20),
        ) {
            let mut now = step(state, HealthEvent::Fence);
            prop_assert_eq!(now, HealthState::Fenced);
            for event in later {
                now = step(now, event);
                prop_assert_eq!(now, HealthState::Fenced);
            }
        }

        #[test]
        fn once_draining_never_ready_again(
            events in proptest::collection::vec(any_event(), 0..30),
        ) {
            let mut state = HealthState::Starting;
            let mut drained = false;
            for event in events {
                state = step(state, event);
                drained |= state >= HealthState::Draining;
                if drained {
                    prop_assert_ne!(state, HealthState::Ready);
                    prop_assert_ne!(state, HealthState::Starting);
                    prop_assert_ne!(readiness(state).status, 200);
                }
            }
        }

        #[test]
        fn ready_only_when_joined_and_not_shutting_down(
            events in proptest::collection::vec(any_event(), 0..30),
        ) {
            let mut state = HealthState::Starting;
            let mut seen = Vec::new();
            for event in events {
                state = step(state, event);
                seen.push(event);
                if readiness(state).status == 200 {
                    prop_assert!(seen.contains(&HealthEvent::Joined));
                    prop_assert!(!seen.iter().any(|e| matches!(
                        e,
                        HealthEvent::Drain | HealthEvent::Stopped | HealthEvent::Fence
                    )));
                }
                // Liveness fails exactly before start, after stop, and when fenced.
                prop_assert_eq!(
                    liveness(state).status == 200,
                    matches!(state, HealthState::Ready | HealthState::Draining)
                );
            }
        }

        #[test]
        fn the_handle_reports_each_change_once_in_order(
            events in proptest::collection::vec(any_event(), 0..20),
        ) {
            let health = Health::new();
            let mut transitions = health.subscribe();
            let mut expected = Vec::new();
            let mut state = HealthState::Starting;
            for event in events {
                let next = step(state, event);
                if next != state {
                    expected.push((state, next));
                }
                state = next;
                health.apply(event, None);
            }
            prop_assert_eq!(health.state(), state);
            let mut got = Vec::new();
            while let Ok(t) = transitions.try_recv() {
                got.push((t.from, t.to));
            }
            prop_assert_eq!(got, expected);
        }
    }
}
