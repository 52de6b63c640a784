use proptest::prelude::*;

use super::*;
use crate::cluster::MemberStatus;
use crate::singleton::election::tests::{address, member};

fn config(me: u8, uses_lease: bool) -> ManagerConfig {
    ManagerConfig {
        type_name: Arc::from("scheduler"),
        me: address(me),
        role: None,
        uses_lease,
        restart_on_termination: true,
        hand_over_timeout: Duration::from_secs(10),
        acquire_retry_interval: Duration::from_secs(5),
    }
}

fn up(ids: &[u8]) -> Vec<Member> {
    ids.iter()
        .map(|&i| member(i, MemberStatus::Up, &[]))
        .collect()
}

fn initial(members: Vec<Member>) -> Event {
    Event::Cluster {
        event: None,
        members,
    }
}

/// The non-publish actions.
fn effects(actions: &[Action]) -> Vec<Action> {
    actions
        .iter()
        .filter(|a| !matches!(a, Action::Publish(_)))
        .cloned()
        .collect()
}

fn published(actions: &[Action]) -> Vec<&'static str> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Publish(e) => Some(e.kind()),
            _ => None,
        })
        .collect()
}

#[test]
fn the_only_member_hosts_at_once() {
    let now = Instant::now();
    let (state, actions) = step(
        ManagerState::new(config(1, false), 0),
        initial(up(&[1])),
        now,
    );
    assert_eq!(effects(&actions), vec![Action::SpawnInstance]);
    assert_eq!(
        published(&actions),
        vec![
            "HostElected",
            "HandOverStarted",
            "HandOverCompleted",
            "InstanceStarted"
        ]
    );
    assert_eq!(state.routing(), Routing::Deliver);
}

#[test]
fn a_new_host_asks_every_peer_and_spawns_only_after_all_acknowledged() {
    let now = Instant::now();
    let (state, actions) = step(
        ManagerState::new(config(1, false), 10),
        initial(up(&[1, 2, 3])),
        now,
    );
    assert_eq!(
        effects(&actions),
        vec![Action::SendHandOverRequest {
            to: vec![address(2), address(3)],
            nonce: 10
        }]
    );
    assert_eq!(state.routing(), Routing::Hold);
    let (state, actions) = step(
        state,
        Event::HandOverAcknowledgment {
            from: Some(address(2)),
            nonce: 10,
        },
        now,
    );
    assert!(effects(&actions).is_empty());
    let (state, actions) = step(
        state,
        Event::HandOverAcknowledgment {
            from: None,
            nonce: 10,
        },
        now,
    );
    assert!(
        effects(&actions).is_empty(),
        "an ack without origin is ignored"
    );
    let (_, actions) = step(
        state,
        Event::HandOverAcknowledgment {
            from: Some(address(3)),
            nonce: 10,
        },
        now,
    );
    assert_eq!(effects(&actions), vec![Action::SpawnInstance]);
}

#[test]
fn a_silent_peer_is_asked_every_500ms_and_the_timeout_hosts_anyway_naming_it() {
    let start = Instant::now();
    let (mut state, _) = step(
        ManagerState::new(config(1, false), 0),
        initial(up(&[1, 2])),
        start,
    );
    let mut resends = 0;
    let now = loop {
        let now = state.next_deadline().expect("a timer is pending");
        let (next, actions) = step(state, Event::Tick, now);
        state = next;
        if actions.contains(&Action::SpawnInstance) {
            assert!(actions.iter().any(|a| matches!(
                a,
                Action::Publish(SingletonEvent::HandOverTimedOut { silent_peers, .. })
                    if silent_peers == &vec![address(2)]
            )));
            break now;
        }
        resends += 1;
    };
    assert_eq!(now - start, Duration::from_secs(10));
    assert_eq!(resends, 19, "every 500 ms until the 10 s timeout");
}

#[test]
fn a_peer_that_leaves_the_set_is_no_longer_waited_for() {
    let now = Instant::now();
    let (state, _) = step(
        ManagerState::new(config(1, false), 0),
        initial(up(&[1, 2])),
        now,
    );
    let mut members = up(&[1]);
    members.push(member(2, MemberStatus::Down, &[]));
    let (_, actions) = step(
        state,
        Event::Cluster {
            event: Some(ClusterEvent::MemberDown(members[1].clone())),
            members,
        },
        now,
    );
    assert_eq!(effects(&actions), vec![Action::SpawnInstance]);
}

#[test]
fn reachability_and_joining_events_do_not_reconcile() {
    let now = Instant::now();
    let (state, _) = step(
        ManagerState::new(config(2, false), 0),
        initial(up(&[1, 2])),
        now,
    );
    // Node 1 is gone from the list handed in, but the events are not triggers.
    for event in [
        ClusterEvent::MemberUnreachable(member(1, MemberStatus::Up, &[])),
        ClusterEvent::MemberReachable(member(1, MemberStatus::Up, &[])),
        ClusterEvent::MemberJoined(member(3, MemberStatus::Joining, &[])),
        ClusterEvent::MemberWeaklyUp(member(3, MemberStatus::WeaklyUp, &[])),
    ] {
        let (next, actions) = step(
            state.clone(),
            Event::Cluster {
                event: Some(event),
                members: up(&[2]),
            },
            now,
        );
        assert!(actions.is_empty());
        assert_eq!(next.host(), Some(&address(1)));
    }
    // A trigger with the same list does move the host.
    let (next, _) = step(
        state,
        Event::Cluster {
            event: Some(ClusterEvent::LeaderChanged(Some(address(2)))),
            members: up(&[2]),
        },
        now,
    );
    assert_eq!(next.host(), Some(&address(2)));
}

fn hosting(me: u8, members: &[u8], uses_lease: bool) -> ManagerState {
    let now = Instant::now();
    let mut state = ManagerState::new(config(me, uses_lease), 0);
    let (s, _) = step(state, initial(up(members)), now);
    state = s;
    for &peer in members {
        let (s, _) = step(
            state,
            Event::HandOverAcknowledgment {
                from: Some(address(peer)),
                nonce: 0,
            },
            now,
        );
        state = s;
    }
    if uses_lease {
        let (s, _) = step(state, Event::LeaseAcquired(FencingToken(1)), now);
        state = s;
    }
    assert!(state.is_hosting());
    state
}

#[test]
fn an_incumbent_acknowledges_only_after_its_instance_terminated() {
    let now = Instant::now();
    let state = hosting(2, &[2, 3], false);
    // Node 1 comes up below: host moves.
    let (state, actions) = step(
        state,
        Event::Cluster {
            event: Some(ClusterEvent::MemberUp(member(1, MemberStatus::Up, &[]))),
            members: up(&[1, 2, 3]),
        },
        now,
    );
    assert_eq!(effects(&actions), vec![Action::StopInstance]);
    let (state, actions) = step(
        state,
        Event::HandOverRequest {
            from: Some(address(1)),
            nonce: 5,
        },
        now,
    );
    assert!(effects(&actions).is_empty(), "post_stop has not finished");
    let (_, actions) = step(state, Event::InstanceTerminated, now);
    assert_eq!(
        effects(&actions),
        vec![Action::SendHandOverAcknowledgment {
            to: address(1),
            nonce: 5
        }]
    );
}

#[test]
fn a_host_refuses_a_request_from_a_peer_sorting_after_it_and_yields_to_one_before() {
    let now = Instant::now();
    let state = hosting(2, &[2, 3], false);
    let (state, actions) = step(
        state,
        Event::HandOverRequest {
            from: Some(address(3)),
            nonce: 1,
        },
        now,
    );
    assert!(actions.is_empty());
    assert!(state.is_hosting());
    // Node 1 is joining in this view (its up status has not arrived): it may be the host.
    let mut members = up(&[2, 3]);
    members.insert(0, member(1, MemberStatus::Joining, &[]));
    let (state, _) = step(
        state,
        Event::Cluster {
            event: Some(ClusterEvent::MemberUp(members[2].clone())),
            members,
        },
        now,
    );
    let (state, actions) = step(
        state,
        Event::HandOverRequest {
            from: Some(address(1)),
            nonce: 2,
        },
        now,
    );
    assert_eq!(effects(&actions), vec![Action::StopInstance]);
    let (state, actions) = step(state, Event::InstanceTerminated, now);
    assert_eq!(
        effects(&actions),
        vec![Action::SendHandOverAcknowledgment {
            to: address(1),
            nonce: 2
        }]
    );
    // Still elected here, but yielded: it does not host again on the next trigger.
    let mut members = up(&[2, 3]);
    members.insert(0, member(1, MemberStatus::Joining, &[]));
    let (state, actions) = step(
        state,
        Event::Cluster {
            event: Some(ClusterEvent::LeaderChanged(Some(address(2)))),
            members,
        },
        now,
    );
    assert!(effects(&actions).is_empty());
    assert!(!state.is_hosting());
}

#[test]
fn a_non_host_acknowledges_anyone_at_once() {
    let now = Instant::now();
    let (state, _) = step(
        ManagerState::new(config(3, false), 0),
        initial(up(&[1, 3])),
        now,
    );
    let (_, actions) = step(
        state,
        Event::HandOverRequest {
            from: Some(address(9)),
            nonce: 4,
        },
        now,
    );
    assert_eq!(
        effects(&actions),
        vec![Action::SendHandOverAcknowledgment {
            to: address(9),
            nonce: 4
        }]
    );
}

#[test]
fn with_a_lease_it_acquires_before_spawning_and_retries_every_interval() {
    let start = Instant::now();
    let (state, actions) = step(
        ManagerState::new(config(1, true), 0),
        initial(up(&[1])),
        start,
    );
    assert_eq!(effects(&actions), vec![Action::AcquireLease]);
    let (state, actions) = step(state, Event::LeaseDenied, start);
    assert!(effects(&actions).is_empty());
    assert_eq!(state.next_deadline(), Some(start + Duration::from_secs(5)));
    let (state, actions) = step(state, Event::Tick, start + Duration::from_secs(5));
    assert_eq!(effects(&actions), vec![Action::AcquireLease]);
    let (_, actions) = step(
        state,
        Event::LeaseAcquired(FencingToken(3)),
        start + Duration::from_secs(5),
    );
    assert_eq!(effects(&actions), vec![Action::SpawnInstance]);
}

#[test]
fn a_lost_lease_stops_the_instance_and_reacquires_only_after_it_terminated() {
    let now = Instant::now();
    let state = hosting(1, &[1], true);
    let (state, actions) = step(state, Event::LeaseLost(FencingToken(1)), now);
    assert_eq!(effects(&actions), vec![Action::StopInstance]);
    assert_eq!(state.routing(), Routing::Hold);
    let (state, actions) = step(state, Event::Tick, now);
    assert!(effects(&actions).is_empty(), "no acquire while stopping");
    let (_, actions) = step(state, Event::InstanceTerminated, now);
    assert_eq!(effects(&actions), vec![Action::AcquireLease]);
}

#[test]
fn moving_away_with_a_lease_releases_only_after_termination() {
    let now = Instant::now();
    let state = hosting(2, &[2], true);
    let (state, actions) = step(
        state,
        Event::Cluster {
            event: Some(ClusterEvent::MemberUp(member(1, MemberStatus::Up, &[]))),
            members: up(&[1, 2]),
        },
        now,
    );
    assert_eq!(effects(&actions), vec![Action::StopInstance]);
    let (state, actions) = step(
        state,
        Event::HandOverRequest {
            from: Some(address(1)),
            nonce: 0,
        },
        now,
    );
    assert!(effects(&actions).is_empty());
    let (state, actions) = step(state, Event::InstanceTerminated, now);
    assert_eq!(effects(&actions), vec![Action::ReleaseLease]);
    let (_, actions) = step(state, Event::LeaseReleased, now);
    assert_eq!(
        effects(&actions),
        vec![Action::SendHandOverAcknowledgment {
            to: address(1),
            nonce: 0
        }],
        "the ack waits for the release, so the new host's acquire succeeds"
    );
}

#[test]
fn membership_changes_during_an_acquire_wait_for_its_result() {
    let now = Instant::now();
    let (state, actions) = step(
        ManagerState::new(config(2, true), 0),
        initial(up(&[2])),
        now,
    );
    assert_eq!(effects(&actions), vec![Action::AcquireLease]);
    // Host moves away and back while the acquire is in flight: no second acquire.
    let (state, actions) = step(
        state,
        Event::Cluster {
            event: Some(ClusterEvent::MemberUp(member(1, MemberStatus::Up, &[]))),
            members: up(&[1, 2]),
        },
        now,
    );
    assert!(effects(&actions).is_empty());
    let (state, actions) = step(
        state,
        Event::Cluster {
            event: Some(ClusterEvent::MemberRemoved {
                member: member(1, MemberStatus::Removed, &[]),
                previous: MemberStatus::Up,
            }),
            members: up(&[2]),
        },
        now,
    );
    assert!(!effects(&actions).contains(&Action::AcquireLease));
    let (_, actions) = step(state, Event::LeaseAcquired(FencingToken(1)), now);
    assert_eq!(effects(&actions), vec![Action::SpawnInstance]);
}

#[test]
fn an_unexpected_death_respawns_after_one_second() {
    let now = Instant::now();
    let state = hosting(1, &[1], false);
    let (state, actions) = step(state, Event::InstanceTerminated, now);
    assert!(effects(&actions).is_empty());
    assert_eq!(state.routing(), Routing::Hold);
    assert_eq!(state.next_deadline(), Some(now + RESPAWN_BACKOFF));
    let (_, actions) = step(state, Event::Tick, now + RESPAWN_BACKOFF);
    assert_eq!(effects(&actions), vec![Action::SpawnInstance]);
    assert!(published(&actions).contains(&"InstanceRestarted"));
}

#[test]
fn without_restart_it_latches_out_releases_the_lease_and_dead_letters() {
    let now = Instant::now();
    let mut cfg = config(1, true);
    cfg.restart_on_termination = false;
    let mut state = ManagerState::new(cfg, 0);
    for event in [initial(up(&[1])), Event::LeaseAcquired(FencingToken(1))] {
        state = step(state, event, now).0;
    }
    assert!(state.is_hosting());
    let (state, actions) = step(state, Event::InstanceTerminated, now);
    assert_eq!(
        effects(&actions),
        vec![Action::DeadLetterHeld, Action::ReleaseLease]
    );
    assert_eq!(state.routing(), Routing::DeadLetter);
    let (state, _) = step(state, Event::LeaseReleased, now);
    // Later membership changes do not bring it back.
    let (state, actions) = step(
        state,
        Event::Cluster {
            event: Some(ClusterEvent::MemberUp(member(5, MemberStatus::Up, &[]))),
            members: up(&[1, 5]),
        },
        now,
    );
    assert!(effects(&actions).is_empty());
    assert!(state.is_latched_out());
}

#[test]
fn deactivation_stops_releases_and_reports_done() {
    let now = Instant::now();
    let state = hosting(1, &[1], true);
    let (state, actions) = step(state, Event::Deactivate, now);
    assert_eq!(effects(&actions), vec![Action::StopInstance]);
    assert_eq!(state.routing(), Routing::DeadLetter);
    let (state, actions) = step(state, Event::InstanceTerminated, now);
    assert_eq!(effects(&actions), vec![Action::ReleaseLease]);
    let (_, actions) = step(state, Event::LeaseReleased, now);
    assert_eq!(
        effects(&actions),
        vec![Action::DeadLetterHeld, Action::Deactivated]
    );
}

// --- properties -------------------------------------------------------------------------

fn arb_event() -> impl Strategy<Value = Event> {
    let statuses = prop_oneof![
        Just(MemberStatus::Joining),
        Just(MemberStatus::Up),
        Just(MemberStatus::Leaving),
        Just(MemberStatus::Down),
    ];
    let members = proptest::collection::btree_map(1u8..5, statuses, 0..5).prop_map(|m| {
        m.into_iter()
            .map(|(i, s)| member(i, s, &[]))
            .collect::<Vec<_>>()
    });
    let trigger = prop_oneof![
        Just(None),
        Just(Some(ClusterEvent::LeaderChanged(None))),
        Just(Some(ClusterEvent::MemberUp(member(
            1,
            MemberStatus::Up,
            &[]
        )))),
        Just(Some(ClusterEvent::MemberUnreachable(member(
            1,
            MemberStatus::Up,
            &[]
        )))),
    ];
    prop_oneof![
        4 => (trigger, members).prop_map(|(event, members)| Event::Cluster { event, members }),
        2 => (proptest::option::of(1u8..5), 0u64..4)
            .prop_map(|(from, nonce)| Event::HandOverRequest { from: from.map(address), nonce }),
        3 => (proptest::option::of(1u8..5), 0u64..4)
            .prop_map(|(from, nonce)| Event::HandOverAcknowledgment { from: from.map(address), nonce }),
        1 => Just(Event::SpawnFailed),
        3 => Just(Event::InstanceTerminated),
        2 => (1u64..4).prop_map(|t| Event::LeaseAcquired(FencingToken(t))),
        1 => Just(Event::LeaseDenied),
        1 => Just(Event::LeaseFailed),
        1 => (1u64..4).prop_map(|t| Event::LeaseLost(FencingToken(t))),
        2 => Just(Event::LeaseReleased),
        4 => Just(Event::Tick),
        1 => Just(Event::Deactivate),
    ]
}

/// A model of the shell: which asynchronous operations are really in flight, so impossible
/// events (a termination without an instance) are only fed when they can happen.
#[derive(Debug, Default)]
struct World {
    instance: bool,
    stopping: bool,
    acquiring: bool,
    releasing: bool,
    lease: Option<u64>,
    deactivated: bool,
}

proptest! {
    /// Safety of the lifecycle under any interleaving: never two instances, with a lease
    /// never an instance without the lease, never an acquire while an instance exists or
    /// stops or another acquire or release is in flight, never a release before the
    /// instance terminated, never an acknowledgment while an instance exists or a lease is
    /// held, and nothing after deactivation.
    #[test]
    fn the_lifecycle_is_safe_under_any_interleaving(
        uses_lease in any::<bool>(),
        restart in any::<bool>(),
        events in proptest::collection::vec((arb_event(), 0u64..2_000), 1..120),
    ) {
        let start = Instant::now();
        let mut now = start;
        let mut cfg = config(2, uses_lease);
        cfg.restart_on_termination = restart;
        cfg.hand_over_timeout = Duration::from_secs(3);
        let mut state = ManagerState::new(cfg, 0);
        let mut world = World::default();
        for (event, advance) in events {
            if world.deactivated {
                // The shell hands over to its passive mode: the state machine is done.
                break;
            }
            now += Duration::from_millis(advance);
            // Only feed what the world can produce.
            let feasible = match &event {
                Event::InstanceTerminated => world.instance,
                Event::SpawnFailed => world.instance && !world.stopping,
                Event::LeaseAcquired(_) | Event::LeaseDenied | Event::LeaseFailed => world.acquiring,
                Event::LeaseReleased => world.releasing,
                Event::LeaseLost(t) => world.lease == Some(t.0),
                _ => true,
            };
            if !feasible {
                continue;
            }
            match &event {
                Event::InstanceTerminated | Event::SpawnFailed => { world.instance = false; world.stopping = false; }
                Event::LeaseAcquired(t) => { world.acquiring = false; world.lease = Some(t.0); }
                Event::LeaseDenied | Event::LeaseFailed => world.acquiring = false,
                Event::LeaseReleased => { world.releasing = false; world.lease = None; }
                Event::LeaseLost(_) => world.lease = None,
                _ => {}
            }
            let (next, actions) = step(state, event, now);
            state = next;
            for action in actions {
                match action {
                    Action::SpawnInstance => {
                        prop_assert!(!world.instance, "two instances");
                        if uses_lease {
                            prop_assert!(world.lease.is_some(), "spawn without the lease");
                        }
                        world.instance = true;
                    }
                    Action::StopInstance => {
                        prop_assert!(world.instance && !world.stopping);
                        world.stopping = true;
                    }
                    Action::AcquireLease => {
                        prop_assert!(uses_lease);
                        prop_assert!(!world.instance, "acquire while an instance exists");
                        prop_assert!(!world.acquiring && !world.releasing && world.lease.is_none());
                        world.acquiring = true;
                    }
                    Action::ReleaseLease => {
                        prop_assert!(!world.instance, "release before termination");
                        prop_assert!(world.lease.is_some() && !world.releasing);
                        world.releasing = true;
                    }
                    Action::SendHandOverAcknowledgment { .. } => {
                        prop_assert!(!world.instance, "ack while an instance exists");
                        prop_assert!(world.lease.is_none() && !world.acquiring, "ack while holding the lease");
                    }
                    Action::Deactivated => world.deactivated = true,
                    _ => {}
                }
            }
            if state.routing() == Routing::Deliver {
                prop_assert!(world.instance && !world.stopping);
            }
            // A tick at the reported deadline always makes progress: the shell's timer can
            // never spin on the same instant.
            if let Some(at) = state.next_deadline() {
                let (ticked, _) = step(state.clone(), Event::Tick, at.max(now));
                prop_assert_ne!(ticked.next_deadline(), Some(at));
            }
        }
    }
}
