//! The held-grant machine: one grant from the moment its acquire was sent until it is released
//! or lost, as a pure `step(state, event, now) -> action` that every backend shares.
//!
//! # Behaviour
//! - The grant is lost at `ttl − renew_interval` after the last *confirmed* renewal was *sent*
//!   (at first: after the acquire was sent). A renewal sent at `sent` extends the grant at the
//!   store to at least `sent + ttl`, so the holder gives up one renew interval before anyone
//!   else can be let in.
//! - A renewal falls due every renew interval after the last confirmed one was sent; a failed
//!   renewal (no answer about the grant) is retried a quarter interval later until the deadline.
//!   Every renewal is abandoned at the deadline, so a hanging store cannot delay the loss.
//! - The store saying the grant is gone (renewal refused, revoked, taken over) loses it at once.
//! - [`Action::ReportLost`] is answered at most once per grant; after it, and after a release,
//!   every step answers [`Action::Stop`].
//! - No sleep ends past the deadline, and no step answers anything but a loss at or after it.

use std::time::Duration;

use tokio::time::Instant;

use super::LeaseSettings;

/// One grant's renewal and loss-deadline state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GrantState {
    renew_interval: Duration,
    /// How long after a confirmed renewal's send the grant stays held: `ttl − renew_interval`
    /// (a store may ask for a different margin, see `GrantedLease::with_loss_deadline`).
    loss_deadline: Duration,
    /// The holder gives up at this instant unless a renewal is confirmed first.
    deadline: Instant,
    /// When the next renewal is due.
    next: Instant,
    phase: Phase,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Held,
    Lost,
    Released,
}

/// What happened to the grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Event {
    /// A timer fired (or someone asks where the grant stands).
    Woke,
    /// A renewal sent at `sent` was confirmed by the store.
    Confirmed {
        /// When it was sent.
        sent: Instant,
    },
    /// A renewal failed without an answer about the grant (timeout, connection lost).
    Failed,
    /// The store says the grant is gone: renewal refused, revoked, or taken over.
    Gone,
    /// The holder released the grant.
    Released,
}

/// What to do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    /// Send a renewal now; abandon it at `deadline`.
    Renew {
        /// The local deadline.
        deadline: Instant,
    },
    /// Nothing to do until then.
    SleepUntil(Instant),
    /// The grant is lost: tell the holder (this is answered once per grant).
    ReportLost(LossCause),
    /// The grant has ended (reported lost, or released): nothing more to do.
    Stop,
}

/// Why a grant was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LossCause {
    /// No renewal confirmed before the local deadline.
    Deadline,
    /// The store said the grant is gone.
    Gone,
}

impl GrantState {
    /// A grant with `settings` whose acquire was sent at `sent`.
    #[cfg(test)]
    pub(crate) fn new(settings: LeaseSettings, sent: Instant) -> Self {
        Self::with_loss_deadline(settings, settings.loss_deadline(), sent)
    }

    /// Like [`GrantState::new`], lost `loss_deadline` after a confirmed renewal's send.
    pub(crate) fn with_loss_deadline(
        settings: LeaseSettings,
        loss_deadline: Duration,
        sent: Instant,
    ) -> Self {
        Self {
            renew_interval: settings.renew_interval(),
            loss_deadline,
            deadline: sent + loss_deadline,
            next: sent + settings.renew_interval(),
            phase: Phase::Held,
        }
    }

    /// The local deadline: the holder gives up then unless a renewal is confirmed first.
    #[cfg(test)]
    pub(crate) fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Whether the grant is still held at `now` (not ended, deadline not passed).
    pub(crate) fn holds(&self, now: Instant) -> bool {
        self.phase == Phase::Held && now < self.deadline
    }
}

/// Advance `state` by `event` at `now`.
pub(crate) fn step(state: &mut GrantState, event: Event, now: Instant) -> Action {
    if state.phase != Phase::Held {
        return Action::Stop;
    }
    if now >= state.deadline && event != Event::Released {
        // An answer that arrives after the local validity ran out is late: it does not revive
        // the grant.
        state.phase = Phase::Lost;
        return Action::ReportLost(LossCause::Deadline);
    }
    match event {
        Event::Released => {
            state.phase = Phase::Released;
            return Action::Stop;
        }
        Event::Gone => {
            state.phase = Phase::Lost;
            return Action::ReportLost(LossCause::Gone);
        }
        Event::Confirmed { sent } => {
            // Sent at `sent`: the store keeps the grant until at least sent + ttl.
            state.deadline = state.deadline.max(sent + state.loss_deadline);
            state.next = state.next.max(sent + state.renew_interval);
        }
        Event::Failed => {
            // Retry sooner than a full interval: the deadline is closing in.
            state.next = now + state.renew_interval / 4;
        }
        Event::Woke => {}
    }
    if now >= state.deadline {
        state.phase = Phase::Lost;
        return Action::ReportLost(LossCause::Deadline);
    }
    if now >= state.next {
        return Action::Renew {
            deadline: state.deadline,
        };
    }
    Action::SleepUntil(state.next.min(state.deadline))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn settings() -> LeaseSettings {
        LeaseSettings::new(Duration::from_millis(3000), Duration::from_millis(1000)).unwrap()
    }

    /// (milliseconds later, event kind, for Confirmed: how long before `now` it was sent)
    fn events() -> impl Strategy<Value = Vec<(u64, u8, u64)>> {
        prop::collection::vec((0u64..1500, 0u8..5, 0u64..1500), 1..80)
    }

    proptest! {
        /// Across any sequence of timers, confirmations (sent any time before they arrive),
        /// failures, refusals and releases: the loss is reported exactly at or after
        /// `ttl − renew` past the last confirmed renewal's send time and never before it
        /// (unless the store said the grant is gone), at most once, never after a release;
        /// nothing but `Stop` follows it; no sleep passes the deadline.
        #[test]
        fn the_loss_is_reported_once_at_ttl_minus_renew_after_the_last_confirmed_send(
            steps in events()
        ) {
            let start = Instant::now();
            let s = settings();
            let mut state = GrantState::new(s, start);
            let mut now = start;
            let mut last_confirmed = start;
            let mut reports = 0;
            let mut ended = false;
            for (later, kind, age) in steps {
                now += Duration::from_millis(later);
                let event = match kind {
                    0 => Event::Woke,
                    1 => {
                        let sent = now.checked_sub(Duration::from_millis(age)).unwrap_or(start).max(start);
                        // Only an answer that arrives before the current deadline counts.
                        if !ended && now < last_confirmed + s.loss_deadline() {
                            last_confirmed = last_confirmed.max(sent);
                        }
                        Event::Confirmed { sent }
                    }
                    2 => Event::Failed,
                    3 => if later % 7 == 0 { Event::Gone } else { Event::Woke },
                    _ => if later % 11 == 0 { Event::Released } else { Event::Failed },
                };
                let deadline = last_confirmed + s.loss_deadline();
                let action = step(&mut state, event, now);
                match action {
                    Action::ReportLost(cause) => {
                        prop_assert!(!ended, "a second report, or a report after a release");
                        reports += 1;
                        ended = true;
                        match cause {
                            LossCause::Deadline => prop_assert!(now >= deadline, "lost {:?} early", deadline - now),
                            LossCause::Gone => prop_assert_eq!(event, Event::Gone),
                        }
                        prop_assert!(!state.holds(now));
                    }
                    Action::Stop => {
                        prop_assert!(ended || event == Event::Released, "stopped while held");
                        ended = true;
                        prop_assert!(!state.holds(now));
                    }
                    other => {
                        prop_assert!(!ended, "{other:?} after the grant ended");
                        prop_assert!(now < deadline, "not lost {:?} past the deadline", now - deadline);
                        prop_assert!(state.holds(now));
                        match other {
                            Action::SleepUntil(until) => {
                                prop_assert!(until <= deadline && until > now);
                            }
                            Action::Renew { deadline: abandon } => prop_assert_eq!(abandon, deadline),
                            _ => {}
                        }
                    }
                }
            }
            prop_assert!(reports <= 1);
        }
    }

    #[test]
    fn renewals_fall_due_every_interval_and_two_can_fail_before_the_deadline() {
        let start = Instant::now();
        let s = settings();
        let mut state = GrantState::new(s, start);
        assert_eq!(
            step(&mut state, Event::Woke, start),
            Action::SleepUntil(start + s.renew_interval())
        );
        let first = start + s.renew_interval();
        assert!(matches!(
            step(&mut state, Event::Woke, first),
            Action::Renew { .. }
        ));
        // It fails; a retry falls due a quarter interval later, still before the deadline.
        assert_eq!(
            step(&mut state, Event::Failed, first),
            Action::SleepUntil(first + s.renew_interval() / 4)
        );
        let second = first + s.renew_interval() / 4;
        assert!(matches!(
            step(&mut state, Event::Woke, second),
            Action::Renew { .. }
        ));
        assert_eq!(
            step(&mut state, Event::Failed, second),
            Action::SleepUntil(second + s.renew_interval() / 4)
        );
        // The deadline: ttl − renew after the acquire was sent; reported once, then Stop.
        let deadline = start + s.loss_deadline();
        assert_eq!(state.deadline(), deadline);
        assert_eq!(
            step(&mut state, Event::Woke, deadline),
            Action::ReportLost(LossCause::Deadline)
        );
        assert_eq!(step(&mut state, Event::Woke, deadline), Action::Stop);
        assert_eq!(
            step(&mut state, Event::Confirmed { sent: deadline }, deadline),
            Action::Stop,
            "a late confirmation does not revive a lost grant"
        );
    }

    #[test]
    fn a_confirmation_moves_the_deadline_to_ttl_minus_renew_after_its_send() {
        let start = Instant::now();
        let s = settings();
        let mut state = GrantState::new(s, start);
        let sent = start + Duration::from_millis(1000);
        let arrived = start + Duration::from_millis(1900);
        assert_eq!(
            step(&mut state, Event::Confirmed { sent }, arrived),
            Action::SleepUntil(sent + s.renew_interval())
        );
        assert_eq!(state.deadline(), sent + s.loss_deadline());
        assert!(state.holds(sent + s.loss_deadline() - Duration::from_millis(1)));
        assert!(!state.holds(sent + s.loss_deadline()));
    }

    #[test]
    fn a_released_grant_is_never_reported_lost() {
        let start = Instant::now();
        let mut state = GrantState::new(settings(), start);
        assert_eq!(step(&mut state, Event::Released, start), Action::Stop);
        assert_eq!(
            step(&mut state, Event::Gone, start + Duration::from_secs(60)),
            Action::Stop
        );
    }
}
