//! The launcher's lifecycle as a pure state machine: `step(state, event, now) -> actions`. The
//! async shell (`launcher.rs`) turns process exits, signals, readiness polls and clock ticks
//! into events and carries out the actions.
//!
//! # Lifecycle
//! ```text
//! StartingServer ──ServerReady──▶ StartingAgents ──ClusterUp──▶ Running
//!        │                              │                          │
//!        └── any child exits, or the startup deadline passes ──▶ Stopping (failed, exit 1)
//!        └── SIGINT / SIGTERM (any phase) ─────────────────────▶ Stopping (asked, exit 0)
//! Running: an agent that exits is reported and the rest carry on (kill one to watch a
//!          hand-over); an agent that exits fenced (exit code 3: downed, removed) is started
//!          again after RESTART_DELAY, as the kubelet would, and rejoins as a fresh
//!          incarnation; the server exiting stops everything (exit 1).
//! ```
//!
//! # Stopping
//! Agents first (SIGTERM: each leaves the cluster gracefully and sends its last report), then,
//! once every agent has exited, the server (SIGTERM: it finishes in-flight requests). A child
//! still running `stop_grace` after its SIGTERM gets SIGKILL, as does everything on a second
//! SIGINT. The launcher exits when every started child has exited: 0 if the stop was asked
//! for and every child it stopped exited cleanly (an agent that died earlier while the cluster
//! ran was reported then and does not count), 1 otherwise.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

/// One child process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Child {
    /// The control-plane server.
    Server,
    /// Agent number n (1-based).
    Agent(usize),
}

impl fmt::Display for Child {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Server => f.write_str("server"),
            Self::Agent(n) => write!(f, "agent-{n}"),
        }
    }
}

/// How long a fenced agent stays down before it is started again.
pub const RESTART_DELAY: Duration = Duration::from_secs(1);

/// How a child ended, as far as the lifecycle cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exit {
    /// Exit code 0.
    pub success: bool,
    /// Exit code 3: an agent that lost its place in the cluster (start it again).
    pub fenced: bool,
    /// `exit code 3`, `signal 9`.
    pub description: String,
}

/// What happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The server answers its API.
    ServerReady,
    /// The API shows every agent up.
    ClusterUp,
    /// A child process exited.
    Exited(Child, Exit),
    /// SIGINT or SIGTERM reached the launcher.
    StopRequested,
    /// Time passed (deadlines are checked against `now`).
    Tick,
}

/// What the shell must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Start the server process.
    StartServer,
    /// Start every agent process.
    StartAgents,
    /// Start this agent again (it exited fenced).
    RestartAgent(usize),
    /// Print the banner: the cluster is up.
    AnnounceUp,
    /// Tell the user something.
    Say(String),
    /// Send SIGTERM.
    Terminate(Child),
    /// Send SIGKILL.
    Kill(Child),
    /// Exit the launcher with this code.
    Exit(i32),
}

/// The phase of the lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Waiting for the server's API.
    StartingServer,
    /// Waiting for every agent to be up.
    StartingAgents,
    /// Up; waiting for Ctrl-C.
    Running,
    /// Stopping the children.
    Stopping,
    /// Every child has exited; the launcher exits.
    Done,
}

/// Where one child is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum ChildState {
    Running,
    /// SIGTERM sent at this time.
    Terminating(Duration),
    Killed,
    Exited(Exit),
    /// Exited fenced; started again at this time.
    Restarting(Duration),
}

/// The lifecycle's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// Agents to start.
    pub agents: usize,
    /// From the start until the cluster must be up.
    pub startup_timeout: Duration,
    /// From SIGTERM until SIGKILL.
    pub stop_grace: Duration,
}

/// The lifecycle's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct State {
    settings: Settings,
    phase: Phase,
    children: BTreeMap<Child, ChildState>,
    /// Why the launcher is stopping, when it is not because it was asked: exit 1.
    failure: Option<String>,
    /// A second stop request forces SIGKILL.
    stop_requests: u32,
    /// Every child stopped so far exited cleanly after its SIGTERM.
    stop_clean: bool,
}

impl State {
    /// Nothing started yet; the first step (any event, typically `Tick`) starts the server.
    #[must_use]
    pub fn new(settings: Settings) -> Self {
        Self {
            settings,
            phase: Phase::StartingServer,
            children: BTreeMap::new(),
            failure: None,
            stop_requests: 0,
            stop_clean: true,
        }
    }

    /// The phase.
    #[must_use]
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// The children started and not yet exited.
    pub fn live_children(&self) -> impl Iterator<Item = Child> + '_ {
        self.children
            .iter()
            .filter(|(_, s)| !matches!(s, ChildState::Exited(_) | ChildState::Restarting(_)))
            .map(|(c, _)| *c)
    }

    fn live_agents(&self) -> impl Iterator<Item = Child> + '_ {
        self.live_children()
            .filter(|c| matches!(c, Child::Agent(_)))
    }

    fn start_stopping(&mut self, now: Duration, actions: &mut Vec<Action>) {
        self.phase = Phase::Stopping;
        // A fenced agent waiting to be started again stays down.
        for state in self.children.values_mut() {
            if let ChildState::Restarting(_) = state {
                *state = ChildState::Exited(Exit {
                    success: true,
                    fenced: true,
                    description: "fenced, not restarted".to_owned(),
                });
            }
        }
        let agents: Vec<Child> = self.live_agents().collect();
        if agents.is_empty() {
            self.terminate(Child::Server, now, actions);
        } else {
            actions.push(Action::Say(format!(
                "stopping {} agent(s): each leaves the cluster gracefully",
                agents.len()
            )));
            for agent in agents {
                self.terminate(agent, now, actions);
            }
        }
        self.finish_if_done(actions);
    }

    fn terminate(&mut self, child: Child, now: Duration, actions: &mut Vec<Action>) {
        if let Some(state) = self.children.get_mut(&child)
            && *state == ChildState::Running
        {
            *state = ChildState::Terminating(now);
            actions.push(Action::Terminate(child));
        }
    }

    fn kill_all(&mut self, actions: &mut Vec<Action>) {
        for (child, state) in &mut self.children {
            if matches!(state, ChildState::Running | ChildState::Terminating(_)) {
                *state = ChildState::Killed;
                self.stop_clean = false;
                actions.push(Action::Kill(*child));
            }
        }
    }

    fn fail(&mut self, why: String, now: Duration, actions: &mut Vec<Action>) {
        if self.failure.is_none() {
            actions.push(Action::Say(why.clone()));
            self.failure = Some(why);
        }
        if self.phase != Phase::Stopping {
            self.start_stopping(now, actions);
        }
    }

    fn finish_if_done(&mut self, actions: &mut Vec<Action>) {
        if self.phase != Phase::Stopping || self.live_children().next().is_some() {
            return;
        }
        self.phase = Phase::Done;
        let clean = self.failure.is_none() && self.stop_clean;
        actions.push(Action::Exit(if clean { 0 } else { 1 }));
    }
}

/// Advance the lifecycle by one event at time `now` (since the launcher started).
#[must_use]
pub fn step(mut state: State, event: Event, now: Duration) -> (State, Vec<Action>) {
    let mut actions = Vec::new();
    if state.phase == Phase::StartingServer && state.children.is_empty() {
        state.children.insert(Child::Server, ChildState::Running);
        actions.push(Action::StartServer);
    }
    match event {
        Event::ServerReady if state.phase == Phase::StartingServer => {
            state.phase = Phase::StartingAgents;
            for n in 1..=state.settings.agents {
                state.children.insert(Child::Agent(n), ChildState::Running);
            }
            actions.push(Action::StartAgents);
        }
        Event::ClusterUp if state.phase == Phase::StartingAgents => {
            state.phase = Phase::Running;
            actions.push(Action::AnnounceUp);
        }
        Event::ServerReady | Event::ClusterUp => {}
        Event::Exited(child, exit) => {
            let expected = matches!(
                state.children.get(&child),
                Some(ChildState::Terminating(_) | ChildState::Killed)
            );
            let expected_kill = state.children.get(&child) == Some(&ChildState::Killed);
            let was_running = state
                .children
                .get(&child)
                .is_some_and(|s| !matches!(s, ChildState::Exited(_) | ChildState::Restarting(_)));
            if !was_running {
                return (state, actions);
            }
            state
                .children
                .insert(child, ChildState::Exited(exit.clone()));
            match state.phase {
                Phase::StartingAgents | Phase::Running
                    if exit.fenced && !expected && matches!(child, Child::Agent(_)) =>
                {
                    state
                        .children
                        .insert(child, ChildState::Restarting(now + RESTART_DELAY));
                    actions.push(Action::Say(format!(
                        "{child} was fenced ({}): it lost its place in the cluster; starting it again as a fresh incarnation",
                        exit.description
                    )));
                }
                Phase::StartingServer | Phase::StartingAgents if !expected => {
                    let why = format!(
                        "{child} exited during startup ({}); see its log",
                        exit.description
                    );
                    state.fail(why, now, &mut actions);
                }
                Phase::Running if child == Child::Server => {
                    let why = format!(
                        "the server exited ({}); stopping the agents",
                        exit.description
                    );
                    state.fail(why, now, &mut actions);
                }
                Phase::Running => actions.push(Action::Say(format!(
                    "{child} exited ({}); the rest of the cluster carries on",
                    exit.description
                ))),
                Phase::Stopping => {
                    state.stop_clean &= exit.success && !expected_kill;
                    if child != Child::Server && state.live_agents().next().is_none() {
                        state.terminate(Child::Server, now, &mut actions);
                    }
                    state.finish_if_done(&mut actions);
                }
                _ => {}
            }
        }
        Event::StopRequested => {
            state.stop_requests += 1;
            match state.phase {
                Phase::Stopping if state.stop_requests > 1 => {
                    actions.push(Action::Say(
                        "stop requested again: killing every child now".to_owned(),
                    ));
                    state
                        .failure
                        .get_or_insert_with(|| "forced stop".to_owned());
                    state.kill_all(&mut actions);
                }
                Phase::Stopping | Phase::Done => {}
                _ => state.start_stopping(now, &mut actions),
            }
        }
        Event::Tick => {
            if matches!(state.phase, Phase::StartingAgents | Phase::Running) {
                let due: Vec<Child> = state
                    .children
                    .iter()
                    .filter(|(_, s)| matches!(s, ChildState::Restarting(at) if now >= *at))
                    .map(|(c, _)| *c)
                    .collect();
                for child in due {
                    state.children.insert(child, ChildState::Running);
                    if let Child::Agent(n) = child {
                        actions.push(Action::RestartAgent(n));
                    }
                }
            }
            let starting = matches!(state.phase, Phase::StartingServer | Phase::StartingAgents);
            if starting && now >= state.settings.startup_timeout {
                let waiting_for = if state.phase == Phase::StartingServer {
                    "the server's API"
                } else {
                    "every agent to be up"
                };
                let why = format!(
                    "startup timed out after {}s waiting for {waiting_for}; see the logs",
                    state.settings.startup_timeout.as_secs()
                );
                state.fail(why, now, &mut actions);
            }
            let overdue: Vec<Child> = state
                .children
                .iter()
                .filter(|(_, s)| {
                    matches!(s, ChildState::Terminating(since) if now >= *since + state.settings.stop_grace)
                })
                .map(|(c, _)| *c)
                .collect();
            for child in overdue {
                actions.push(Action::Say(format!(
                    "{child} did not exit within {}s of SIGTERM: killing it",
                    state.settings.stop_grace.as_secs()
                )));
                state.children.insert(child, ChildState::Killed);
                state.stop_clean = false;
                actions.push(Action::Kill(child));
            }
        }
    }
    (state, actions)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SETTINGS: Settings = Settings {
        agents: 3,
        startup_timeout: Duration::from_secs(60),
        stop_grace: Duration::from_secs(15),
    };

    fn ok() -> Exit {
        Exit {
            success: true,
            fenced: false,
            description: "exit code 0".into(),
        }
    }

    fn failed() -> Exit {
        Exit {
            success: false,
            fenced: false,
            description: "exit code 1".into(),
        }
    }

    fn fenced() -> Exit {
        Exit {
            success: false,
            fenced: true,
            description: "exit code 3".into(),
        }
    }

    #[test]
    fn a_fenced_agent_is_started_again_after_the_restart_delay_and_not_during_a_stop() {
        let mut events = up();
        events.push((Event::Exited(Child::Agent(2), fenced()), 20));
        let (state, actions) = run(&events);
        assert_eq!(state.phase(), Phase::Running);
        assert!(
            actions
                .iter()
                .any(|a| matches!(a, Action::Say(s) if s.contains("agent-2 was fenced")))
        );
        assert!(
            !actions.contains(&Action::RestartAgent(2)),
            "not before the delay"
        );
        events.push((Event::Tick, 21));
        let (_, actions) = run(&events);
        assert_eq!(actions.last(), Some(&Action::RestartAgent(2)));
        // Fenced again, then a stop before the delay passed: it stays down, the stop is clean.
        events.extend([
            (Event::Exited(Child::Agent(2), fenced()), 30),
            (Event::StopRequested, 30),
            (Event::Tick, 40),
            (Event::Exited(Child::Agent(1), ok()), 41),
            (Event::Exited(Child::Agent(3), ok()), 41),
            (Event::Exited(Child::Server, ok()), 42),
        ]);
        let (_, actions) = run(&events);
        assert_eq!(
            actions
                .iter()
                .filter(|a| **a == Action::RestartAgent(2))
                .count(),
            1
        );
        assert!(
            !actions.contains(&Action::Terminate(Child::Agent(2))),
            "a fenced agent that is down is not signalled"
        );
        assert_eq!(actions.last(), Some(&Action::Exit(0)));
    }

    fn run(events: &[(Event, u64)]) -> (State, Vec<Action>) {
        let mut state = State::new(SETTINGS);
        let mut all = Vec::new();
        for (event, at) in events {
            let (next, actions) = step(state, event.clone(), Duration::from_secs(*at));
            state = next;
            all.extend(actions);
        }
        (state, all)
    }

    fn up() -> Vec<(Event, u64)> {
        vec![
            (Event::Tick, 0),
            (Event::ServerReady, 1),
            (Event::ClusterUp, 5),
        ]
    }

    #[test]
    fn ctrl_c_stops_the_agents_first_then_the_server_and_exits_zero() {
        let mut events = up();
        events.push((Event::StopRequested, 10));
        let (_, actions) = run(&events);
        let terminated: Vec<_> = actions
            .iter()
            .filter_map(|a| match a {
                Action::Terminate(c) => Some(*c),
                _ => None,
            })
            .collect();
        assert_eq!(
            terminated,
            [Child::Agent(1), Child::Agent(2), Child::Agent(3)]
        );
        events.extend([
            (Event::Exited(Child::Agent(2), ok()), 11),
            (Event::Exited(Child::Agent(1), ok()), 11),
        ]);
        let (state, actions) = run(&events);
        assert!(
            !actions.contains(&Action::Terminate(Child::Server)),
            "agent-3 still runs"
        );
        assert_eq!(state.phase(), Phase::Stopping);
        events.push((Event::Exited(Child::Agent(3), ok()), 12));
        let (_, actions) = run(&events);
        assert_eq!(actions.last(), Some(&Action::Terminate(Child::Server)));
        events.push((Event::Exited(Child::Server, ok()), 13));
        let (state, actions) = run(&events);
        assert_eq!(actions.last(), Some(&Action::Exit(0)));
        assert_eq!(state.phase(), Phase::Done);
    }

    #[test]
    fn a_child_dying_at_startup_stops_the_rest_and_exits_one() {
        let events = vec![
            (Event::Tick, 0),
            (Event::ServerReady, 1),
            (Event::Exited(Child::Agent(2), failed()), 2),
        ];
        let (_, actions) = run(&events);
        assert!(
            actions.iter().any(
                |a| matches!(a, Action::Say(s) if s.contains("agent-2 exited during startup"))
            )
        );
        assert!(actions.contains(&Action::Terminate(Child::Agent(1))));
        assert!(!actions.contains(&Action::Terminate(Child::Agent(2))));
        let mut events = events;
        events.extend([
            (Event::Exited(Child::Agent(1), ok()), 3),
            (Event::Exited(Child::Agent(3), ok()), 3),
            (Event::Exited(Child::Server, ok()), 4),
        ]);
        let (_, actions) = run(&events);
        assert_eq!(actions.last(), Some(&Action::Exit(1)));
    }

    #[test]
    fn an_agent_exiting_while_running_is_reported_and_the_cluster_carries_on() {
        let mut events = up();
        events.push((Event::Exited(Child::Agent(1), failed()), 20));
        let (state, actions) = run(&events);
        assert_eq!(state.phase(), Phase::Running);
        assert!(!actions.iter().any(|a| matches!(a, Action::Terminate(_))));
        // The agent that died was reported then; the stop itself is clean.
        events.extend([
            (Event::StopRequested, 30),
            (Event::Exited(Child::Agent(2), ok()), 31),
            (Event::Exited(Child::Agent(3), ok()), 31),
            (Event::Exited(Child::Server, ok()), 32),
        ]);
        let (_, actions) = run(&events);
        assert_eq!(actions.last(), Some(&Action::Exit(0)));
    }

    #[test]
    fn startup_times_out_and_a_stuck_child_is_killed_after_the_grace() {
        let events = vec![(Event::Tick, 0), (Event::Tick, 61)];
        let (state, actions) = run(&events);
        assert!(
            actions
                .iter()
                .any(|a| matches!(a, Action::Say(s) if s.contains("startup timed out")))
        );
        assert_eq!(actions.last(), Some(&Action::Terminate(Child::Server)));
        assert_eq!(state.phase(), Phase::Stopping);
        let mut events = events;
        events.push((Event::Tick, 61 + 15));
        let (_, actions) = run(&events);
        assert_eq!(actions.last(), Some(&Action::Kill(Child::Server)));
    }

    #[test]
    fn a_second_ctrl_c_kills_everything() {
        let mut events = up();
        events.extend([(Event::StopRequested, 10), (Event::StopRequested, 11)]);
        let (_, actions) = run(&events);
        let killed = actions
            .iter()
            .filter(|a| matches!(a, Action::Kill(_)))
            .count();
        assert_eq!(killed, 4, "three agents and the server");
    }

    fn arbitrary_event() -> impl Strategy<Value = Event> {
        prop_oneof![
            Just(Event::ServerReady),
            Just(Event::ClusterUp),
            Just(Event::StopRequested),
            Just(Event::Tick),
            (0usize..=3, any::<bool>(), any::<bool>()).prop_map(|(n, success, fenced)| {
                let child = if n == 0 {
                    Child::Server
                } else {
                    Child::Agent(n)
                };
                Event::Exited(
                    child,
                    Exit {
                        success: success && !fenced,
                        fenced,
                        description: String::new(),
                    },
                )
            }),
        ]
    }

    proptest! {
        /// Whatever happens, once a stop is requested and every child the shell started has
        /// exited, the launcher exits exactly once; and it never signals a child that exited.
        #[test]
        fn every_run_ends_in_one_exit_after_a_stop_and_signals_only_live_children(
            events in proptest::collection::vec((arbitrary_event(), 0u64..200), 0..40),
        ) {
            let mut state = State::new(SETTINGS);
            let mut started: Vec<Child> = Vec::new();
            let mut exited: Vec<Child> = Vec::new();
            let mut exits = 0;
            let mut now = 0;
            fn apply(state: State, event: Event, now: u64, started: &mut Vec<Child>, exited: &mut Vec<Child>, exits: &mut u32) -> State {
                if let Event::Exited(child, _) = &event {
                    // The shell only reports exits of children it started, once.
                    if !started.contains(child) || exited.contains(child) {
                        return state;
                    }
                    exited.push(*child);
                }
                let (state, actions) = step(state, event, Duration::from_secs(now));
                for action in actions {
                    match action {
                        Action::StartServer => started.push(Child::Server),
                        Action::StartAgents => started.extend((1..=SETTINGS.agents).map(Child::Agent)),
                        Action::RestartAgent(n) => {
                            assert!(exited.contains(&Child::Agent(n)), "restarted agent-{n} that runs");
                            exited.retain(|c| *c != Child::Agent(n));
                        }
                        Action::Terminate(c) | Action::Kill(c) => {
                            assert!(started.contains(&c) && !exited.contains(&c), "signalled {c} that is not running");
                        }
                        Action::Exit(_) => *exits += 1,
                        Action::AnnounceUp | Action::Say(_) => {}
                    }
                }
                state
            }
            for (event, dt) in events {
                now += dt;
                state = apply(state, event, now, &mut started, &mut exited, &mut exits);
            }
            state = apply(state, Event::StopRequested, now, &mut started, &mut exited, &mut exits);
            // Every child the shell started exits (after SIGTERM or SIGKILL).
            for child in started.clone() {
                state = apply(state, Event::Exited(child, ok()), now, &mut started, &mut exited, &mut exits);
            }
            prop_assert_eq!(state.phase(), Phase::Done);
            prop_assert_eq!(exits, 1);
        }
    }
}
