//! The agent process's way out, as a pure state machine: `step(phase, event) -> (phase,
//! actions)`. Whatever ends a node — SIGTERM, a Leave from the control plane, being downed or
//! removed, a Kubernetes Lease answering 404, an etcd key gone, a renewal deadline missed — runs
//! through here and ends in exactly one exit code. The shell (`agent.rs`) turns signals,
//! [`Cluster::departed`](troupe::cluster::Cluster::departed) and timers into events and
//! performs the actions.
//!
//! ```text
//!  Running ──Terminate──▶ Draining ──DrainElapsed──▶ Leaving ──Departed / LeaveTimedOut──┐
//!     │                      │                                                          ▼
//!     ├──Departed(Left)──────┴──Departed(Left)─────────────────────────────────▶ StoppingActors
//!     └──Departed(Fenced / Stopped)──(health: fenced)──────────────────────────▶ StoppingActors
//!                                                 StoppingActors ──ActorsStopped──▶ Flushing
//!                                                 Flushing ──Flushed / FlushTimedOut──▶ Done
//! ```
//!
//! # Exit codes
//! - `0` ([`Exit::Left`]): the node left gracefully — its own SIGTERM (drain, leave, stop), or a
//!   leave the cluster carried out on it (the control plane's `Leave`). Any departure that
//!   arrives once this node has begun its own leave is the end of that leave (a Kubernetes 404
//!   racing the host's own leave is not a fence, seed 003).
//! - `3` ([`Exit::Fenced`]): it lost its place without leaving — downed, removed, its membership
//!   token gone or not renewed in time, or its membership stopped under it. Its identity is
//!   forfeit (peers may already serve what it hosted), so the process must restart as a fresh
//!   incarnation. Health goes to `fenced` first (liveness 503 `fatal`), so the control plane is
//!   told before the actors stop.

use troupe::cluster::Departure;

/// Where the process is on its way out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    /// Serving.
    Running,
    /// Shutdown asked: not ready, waiting out the drain delay before leaving.
    Draining,
    /// The leave was sent; waiting for the cluster to confirm it (or the leave timeout).
    Leaving,
    /// Stopping every actor.
    StoppingActors(Exit),
    /// Shipping the last reports (bounded by the flush timeout).
    Flushing(Exit),
    /// Finished: exit with this.
    Done(Exit),
}

/// How the process ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exit {
    /// It left gracefully: exit code 0.
    Left,
    /// It lost its place: exit code 3.
    Fenced {
        /// Why.
        reason: String,
    },
}

impl Exit {
    /// The process exit code (0 left, 3 fenced; see `/work/team/contracts.md`).
    #[must_use]
    pub fn code(&self) -> i32 {
        match self {
            Self::Left => 0,
            Self::Fenced { .. } => 3,
        }
    }
}

/// What happens to the process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// SIGTERM or SIGINT, or an embedding application asking it to stop.
    Terminate,
    /// The cluster says this node is out, and how.
    Departed(Departure),
    /// The drain delay passed.
    DrainElapsed,
    /// The leave timeout passed without the departure.
    LeaveTimedOut,
    /// Every actor has stopped.
    ActorsStopped,
    /// The reporter shipped everything it held.
    Flushed,
    /// The flush timeout passed first.
    FlushTimedOut,
}

/// What the shell must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Health to `draining` (live, not ready; responses close their connections).
    Drain,
    /// Wake with [`Event::DrainElapsed`] after the drain delay.
    StartDrainDelay,
    /// Leave the cluster gracefully, and wake with [`Event::LeaveTimedOut`] after the leave
    /// timeout unless the departure comes first.
    Leave,
    /// Health to `fenced`: liveness answers 503 `fatal` and the control plane is told.
    Fence(String),
    /// Stop every actor; wake with [`Event::ActorsStopped`].
    StopActors,
    /// Ship the last reports; wake with [`Event::Flushed`], or [`Event::FlushTimedOut`] after
    /// the flush timeout.
    Flush,
    /// Log that the leave was not confirmed in time (the node stops anyway; peers will find it
    /// unreachable and down it).
    WarnLeaveTimedOut,
    /// Exit the process.
    Exit(Exit),
}

/// The next phase and what to do: pure and total (an event that means nothing in a phase
/// changes nothing).
#[must_use]
pub fn step(phase: Phase, event: Event) -> (Phase, Vec<Action>) {
    use Action as A;
    use Event as E;
    match (phase, event) {
        (Phase::Running, E::Terminate) => (Phase::Draining, vec![A::Drain, A::StartDrainDelay]),
        (Phase::Running, E::Departed(Departure::Left)) => (
            Phase::StoppingActors(Exit::Left),
            vec![A::Drain, A::StopActors],
        ),
        (
            Phase::Running | Phase::Draining,
            E::Departed(departure @ (Departure::Fenced { .. } | Departure::Stopped)),
        ) => {
            let reason = match departure {
                Departure::Fenced { reason } => reason,
                _ => "this node's membership stopped without a leave".to_owned(),
            };
            (
                Phase::StoppingActors(Exit::Fenced {
                    reason: reason.clone(),
                }),
                vec![A::Fence(reason), A::StopActors],
            )
        }
        (Phase::Draining, E::DrainElapsed) => (Phase::Leaving, vec![A::Leave]),
        (Phase::Draining, E::Departed(Departure::Left)) => {
            (Phase::StoppingActors(Exit::Left), vec![A::StopActors])
        }
        (Phase::Leaving, E::Departed(_)) => {
            (Phase::StoppingActors(Exit::Left), vec![A::StopActors])
        }
        (Phase::Leaving, E::LeaveTimedOut) => (
            Phase::StoppingActors(Exit::Left),
            vec![A::WarnLeaveTimedOut, A::StopActors],
        ),
        (Phase::StoppingActors(exit), E::ActorsStopped) => (Phase::Flushing(exit), vec![A::Flush]),
        (Phase::Flushing(exit), E::Flushed | E::FlushTimedOut) => {
            (Phase::Done(exit.clone()), vec![A::Exit(exit)])
        }
        (phase, _) => (phase, Vec::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Run the machine with a shell that answers every action the way the shell does, and
    /// outside events (`Terminate`, departures, timeouts) interleaved at the given points.
    fn run(outside: &[(usize, Event)], late_flush: bool) -> (Vec<Action>, Phase) {
        let mut phase = Phase::Running;
        let mut log = Vec::new();
        let mut pending: std::collections::VecDeque<Event> = Default::default();
        let mut outside = outside.to_vec();
        outside.sort_by_key(|(at, _)| *at);
        let mut outside = outside.into_iter().peekable();
        for tick in 0..200 {
            while let Some((_, event)) = outside.next_if(|(at, _)| *at <= tick) {
                pending.push_back(event);
            }
            let Some(event) = pending.pop_front() else {
                if outside.peek().is_none() {
                    break;
                }
                continue;
            };
            let (next, actions) = step(phase, event);
            phase = next;
            for action in actions {
                match &action {
                    Action::StartDrainDelay => pending.push_back(Event::DrainElapsed),
                    Action::Leave => pending.push_back(Event::Departed(Departure::Left)),
                    Action::StopActors => pending.push_back(Event::ActorsStopped),
                    Action::Flush => pending.push_back(if late_flush {
                        Event::FlushTimedOut
                    } else {
                        Event::Flushed
                    }),
                    _ => {}
                }
                log.push(action);
            }
        }
        (log, phase)
    }

    fn position(log: &[Action], want: impl Fn(&Action) -> bool) -> Option<usize> {
        log.iter().position(want)
    }

    #[test]
    fn sigterm_drains_leaves_stops_flushes_and_exits_0() {
        let (log, phase) = run(&[(0, Event::Terminate)], false);
        assert_eq!(
            log,
            [
                Action::Drain,
                Action::StartDrainDelay,
                Action::Leave,
                Action::StopActors,
                Action::Flush,
                Action::Exit(Exit::Left),
            ]
        );
        assert_eq!(phase, Phase::Done(Exit::Left));
    }

    #[test]
    fn a_fence_marks_health_fenced_before_stopping_and_exits_3() {
        let reason = "Kubernetes Lease renewal answered 404".to_owned();
        let (log, _) = run(
            &[(
                0,
                Event::Departed(Departure::Fenced {
                    reason: reason.clone(),
                }),
            )],
            true,
        );
        assert_eq!(
            log,
            [
                Action::Fence(reason.clone()),
                Action::StopActors,
                Action::Flush,
                Action::Exit(Exit::Fenced { reason }),
            ]
        );
    }

    #[test]
    fn a_leave_the_cluster_carried_out_on_this_node_exits_0() {
        let (log, _) = run(&[(0, Event::Departed(Departure::Left))], false);
        assert_eq!(
            log,
            [
                Action::Drain,
                Action::StopActors,
                Action::Flush,
                Action::Exit(Exit::Left)
            ]
        );
    }

    #[test]
    fn membership_stopping_under_a_running_node_is_a_fence() {
        let (log, _) = run(&[(0, Event::Departed(Departure::Stopped))], false);
        assert!(
            matches!(log.last(), Some(Action::Exit(Exit::Fenced { .. }))),
            "{log:?}"
        );
    }

    #[test]
    fn a_leave_that_never_completes_is_cut_short_by_the_timeout() {
        let (next, _) = step(Phase::Leaving, Event::LeaveTimedOut);
        assert_eq!(next, Phase::StoppingActors(Exit::Left));
    }

    fn any_event() -> impl Strategy<Value = Event> {
        prop_oneof![
            Just(Event::Terminate),
            Just(Event::Departed(Departure::Left)),
            Just(Event::Departed(Departure::Stopped)),
            Just(Event::Departed(Departure::Fenced {
                reason: "gone".into()
            })),
            Just(Event::DrainElapsed),
            Just(Event::LeaveTimedOut),
            Just(Event::ActorsStopped),
            Just(Event::Flushed),
            Just(Event::FlushTimedOut),
        ]
    }

    proptest! {
        /// However signals, departures and stray timer events interleave, a node that was
        /// told to stop or departed ends in exactly one exit, after stopping its actors and
        /// flushing, and a fenced exit always marked health fenced first.
        #[test]
        fn every_way_out_ends_in_one_exit_after_stop_and_flush(
            outside in proptest::collection::vec((0usize..12, any_event()), 1..8),
            late_flush: bool,
        ) {
            let (log, phase) = run(&outside, late_flush);
            let ends = outside.iter().any(|(_, e)| matches!(e, Event::Terminate | Event::Departed(_)));
            let exits: Vec<&Action> = log.iter().filter(|a| matches!(a, Action::Exit(_))).collect();
            prop_assert_eq!(exits.len(), usize::from(ends), "{:?}", log);
            if let Some(Action::Exit(exit)) = exits.first() {
                prop_assert_eq!(&phase, &Phase::Done(exit.clone()));
                let stop = position(&log, |a| *a == Action::StopActors).unwrap();
                let flush = position(&log, |a| *a == Action::Flush).unwrap();
                prop_assert!(stop < flush && flush < log.len() - 1, "{:?}", log);
                prop_assert_eq!(log.iter().filter(|a| **a == Action::StopActors).count(), 1);
                let fenced = position(&log, |a| matches!(a, Action::Fence(_)));
                prop_assert_eq!(fenced.is_some(), exit.code() == 3, "{:?}", log);
                if let Some(fenced) = fenced {
                    prop_assert!(fenced < stop);
                }
            }
        }

        /// Exit 3 exactly when the node lost its place before it began its own leave.
        #[test]
        fn fenced_exactly_when_out_before_leaving(
            outside in proptest::collection::vec((0usize..12, any_event()), 1..8),
        ) {
            let (log, _) = run(&outside, false);
            let leave = position(&log, |a| *a == Action::Leave);
            let exit = log.iter().find_map(|a| match a { Action::Exit(e) => Some(e.clone()), _ => None });
            if let Some(Exit::Fenced { .. }) = exit {
                prop_assert!(leave.is_none(), "fenced after its own leave: {:?}", log);
            }
            // Never a leave after the node already departed.
            let departed_first = log.iter().position(|a| matches!(a, Action::Fence(_) | Action::StopActors));
            if let (Some(leave), Some(out)) = (leave, departed_first) {
                prop_assert!(leave < out, "{:?}", log);
            }
        }
    }
}
