//! The membership state machine on its own: the fencing rules as examples, and properties over
//! random interleavings of time, answers, peer heartbeats and leave.

use std::collections::BTreeSet;
use std::time::Duration;

use proptest::prelude::*;
use troupe::cluster::MemberStatus;
use troupe::{Address, UniqueAddress};
use troupe_kubernetes::KubeTiming;
use troupe_kubernetes::membership::{
    Action, Event, HostHealth, MembershipMachine, Now, PeerLease, Purpose, WriteError,
};

fn timing() -> KubeTiming {
    KubeTiming {
        ttl: Duration::from_secs(2),
        renew_interval: Duration::from_millis(300),
        max_clock_skew: Duration::from_millis(200),
    }
}

fn node(port: u16) -> UniqueAddress {
    UniqueAddress {
        address: Address::new("demo", "10.0.0.1", port),
        incarnation: u64::from(port) * 7,
    }
}

fn machine(now: Now) -> MembershipMachine {
    MembershipMachine::new(node(1), BTreeSet::new(), "demo-me".into(), timing(), now)
}

fn peer(i: u16, now: Now, rv: u64) -> PeerLease {
    PeerLease {
        lease: format!("demo-peer-{i}"),
        resource_version: rv.to_string(),
        node: node(10 + i),
        roles: BTreeSet::new(),
        renew_time: now.wall,
        duration: Duration::from_secs(2),
        leaving: false,
    }
}

/// Start a machine and bring it up: tick → create → created.
fn up(now: Now) -> MembershipMachine {
    let mut m = machine(now);
    assert!(m.step(Event::Tick, now).contains(&Action::Create));
    let actions = m.step(Event::Created(Ok("5".into())), now);
    assert!(actions.contains(&Action::Health(HostHealth::Up)));
    m
}

/// Tick every 100 ms from `from` to `to`, answering every heartbeat with success.
fn live_until(m: &mut MembershipMachine, from: Now, to: Now, rv: &mut u64) -> Vec<Action> {
    let mut t = from;
    let mut all = Vec::new();
    while t.mono < to.mono {
        t = t.plus(Duration::from_millis(100));
        let actions = m.step(Event::Tick, t);
        for action in &actions {
            if is_heartbeat(action) {
                *rv += 1;
                all.extend(m.step(
                    Event::Written {
                        purpose: Purpose::Heartbeat,
                        result: Ok(rv.to_string()),
                    },
                    t,
                ));
            }
        }
        all.extend(actions);
    }
    all
}

fn is_heartbeat(action: &Action) -> bool {
    matches!(
        action,
        Action::Write {
            purpose: Purpose::Heartbeat,
            ..
        }
    )
}

#[test]
fn a_renewal_answered_404_fences_and_nothing_is_recreated() {
    let t0 = Now::current();
    let mut m = up(t0);
    let t1 = t0.plus(Duration::from_millis(300));
    assert!(m.step(Event::Tick, t1).iter().any(is_heartbeat));
    let actions = m.step(
        Event::Written {
            purpose: Purpose::Heartbeat,
            result: Err(WriteError::NotFound),
        },
        t1,
    );
    assert!(matches!(m.health(), HostHealth::Fenced { reason } if reason.contains("404")));
    assert!(actions.contains(&Action::Stop));
    let last_view = actions.iter().rev().find_map(|a| match a {
        Action::Publish(v) => Some(v.clone()),
        _ => None,
    });
    assert!(
        last_view
            .expect("a final view")
            .members
            .iter()
            .all(|m| m.node != node(1)),
        "a fenced host is out of its own view: it hosts nothing"
    );
    for ms in [100, 1000, 10_000] {
        assert!(
            m.step(Event::Tick, t1.plus(Duration::from_millis(ms)))
                .is_empty()
        );
    }
}

#[test]
fn a_404_racing_the_hosts_own_leave_is_not_a_fence() {
    let t0 = Now::current();
    let mut m = up(t0);
    let t1 = t0.plus(Duration::from_millis(300));
    assert!(m.step(Event::Tick, t1).iter().any(is_heartbeat));
    // leave() while the renewal is in flight: nothing is written until it answers.
    let actions = m.step(Event::Leave, t1);
    assert!(
        !actions
            .iter()
            .any(|a| matches!(a, Action::Write { .. } | Action::DeleteOwn(_)))
    );
    assert_eq!(m.health(), &HostHealth::Leaving);
    let actions = m.step(
        Event::Written {
            purpose: Purpose::Heartbeat,
            result: Err(WriteError::NotFound),
        },
        t1,
    );
    assert_eq!(m.health(), &HostHealth::Left);
    assert!(actions.contains(&Action::Stop));
}

#[test]
fn renewals_failing_past_the_local_deadline_fence_before_the_ttl() {
    let t0 = Now::current();
    let mut m = up(t0);
    let mut t = t0;
    let deadline = t0.mono + timing().local_validity();
    loop {
        t = t.plus(Duration::from_millis(50));
        for action in m.step(Event::Tick, t) {
            if is_heartbeat(&action) {
                m.step(
                    Event::Written {
                        purpose: Purpose::Heartbeat,
                        result: Err(WriteError::Other("timeout".into())),
                    },
                    t,
                );
            }
        }
        if m.health().is_fatal() {
            break;
        }
        assert!(
            t.mono < deadline + Duration::from_millis(50),
            "still up past its deadline"
        );
    }
    assert!(t.mono >= deadline && t.mono < t0.mono + timing().ttl);
}

#[test]
fn peers_age_out_when_renew_time_passes_the_ttl_and_stay_out() {
    let t0 = Now::current();
    let mut m = up(t0);
    m.step(Event::Upsert(peer(1, t0, 10)), t0);
    assert_eq!(m.view().members.len(), 2);
    let mut rv = 100;
    let later = t0.plus(Duration::from_millis(2100));
    live_until(&mut m, t0, later, &mut rv);
    assert_eq!(m.view().members.len(), 1, "aged out");
    assert_eq!(m.health(), &HostHealth::Up);
    // A late heartbeat of the aged-out incarnation does not bring it back.
    m.step(Event::Upsert(peer(1, later, 11)), later);
    assert_eq!(m.view().members.len(), 1);
    // The leader reaps its Lease a TTL after its (last) expiry: the late heartbeat moved it to
    // 4.1 s, so 6.1 s.
    let early = live_until(&mut m, later, t0.plus(Duration::from_millis(6000)), &mut rv);
    assert!(
        !early.iter().any(|a| matches!(a, Action::DeletePeer { .. })),
        "{early:?}"
    );
    let reap = live_until(
        &mut m,
        t0.plus(Duration::from_millis(6000)),
        t0.plus(Duration::from_millis(6300)),
        &mut rv,
    );
    assert!(reap.contains(&Action::DeletePeer {
        lease: "demo-peer-1".into(),
        resource_version: Some("11".into())
    }));
}

#[derive(Debug, Clone)]
enum Op {
    Advance(u64),
    Respond(u8),
    PeerBeat(u16),
    PeerGone(u16),
    OwnRemoved,
    Leave,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u64..700).prop_map(Op::Advance),
        4 => (0u8..4).prop_map(Op::Respond),
        2 => (0u16..3).prop_map(Op::PeerBeat),
        1 => (0u16..3).prop_map(Op::PeerGone),
        1 => Just(Op::OwnRemoved),
        1 => Just(Op::Leave),
    ]
}

/// The answer `code` (0 ok, 1 not found, 2 conflict, 3 other) to the request in flight.
fn answer(request: &Action, code: u8, rv: u64, me: &str) -> Event {
    let write = |code| match code {
        0 => Ok(rv.to_string()),
        1 => Err(WriteError::NotFound),
        2 => Err(WriteError::Conflict),
        _ => Err(WriteError::Other("timeout".into())),
    };
    match request {
        Action::Create => Event::Created(write(code)),
        Action::Write { purpose, .. } => Event::Written {
            purpose: *purpose,
            result: write(code),
        },
        Action::FetchOwn => Event::FetchedOwn(match code {
            0 => Ok(Some((me.to_owned(), rv.to_string()))),
            1 => Ok(None),
            2 => Ok(Some(("someone-else".to_owned(), rv.to_string()))),
            _ => Err("timeout".into()),
        }),
        Action::DeleteOwn(_) => Event::DeletedOwn(match code {
            0 => Ok(()),
            1 => Err(WriteError::NotFound),
            _ => Err(WriteError::Other("timeout".into())),
        }),
        other => panic!("not a request: {other:?}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn fencing_and_membership_invariants_hold(ops in proptest::collection::vec(op(), 1..80)) {
        let mut now = Now::current();
        let mut m = machine(now);
        let me = node(1).to_string();
        let mut in_flight: Option<Action> = None;
        let mut rv = 100u64;
        let mut existed = false;
        let mut stopped = false;
        let mut leave_requested = false;
        let mut gone: BTreeSet<UniqueAddress> = BTreeSet::new();
        let mut health = HostHealth::Starting;
        for op in ops {
            let event = match op {
                Op::Advance(ms) => { now = now.plus(Duration::from_millis(ms)); Event::Tick }
                Op::Respond(code) => {
                    let Some(request) = in_flight.take() else { continue };
                    rv += 1;
                    let event = answer(&request, code, rv, &me);
                    if matches!(event, Event::Created(Ok(_)) | Event::Created(Err(WriteError::Conflict))) {
                        existed = true;
                    }
                    event
                }
                Op::PeerBeat(i) => { rv += 1; Event::Upsert(peer(i, now, rv)) }
                Op::PeerGone(i) => { gone.insert(node(10 + i)); Event::Removed(format!("demo-peer-{i}")) }
                Op::OwnRemoved => Event::Removed("demo-me".into()),
                Op::Leave => { leave_requested = true; Event::Leave }
            };
            let fenced_by_404_in_leave = leave_requested
                && matches!(&event, Event::Written { result: Err(WriteError::NotFound), .. });
            let was_up = *m.health() == HostHealth::Up;
            let actions = m.step(event.clone(), now);
            prop_assert!(!stopped || actions.is_empty(), "acted after stopping: {actions:?}");
            for action in &actions {
                match action {
                    Action::Create | Action::Write { .. } | Action::FetchOwn | Action::DeleteOwn(_) => {
                        prop_assert!(in_flight.is_none(), "two own requests in flight: {action:?}");
                        if *action == Action::Create {
                            prop_assert!(!existed, "the Lease is never (re)created once it existed");
                        }
                        in_flight = Some(action.clone());
                    }
                    Action::Health(h) => {
                        if h.is_fatal() {
                            prop_assert!(!fenced_by_404_in_leave, "a 404 racing leave fenced: {h:?}");
                        }
                        health = h.clone();
                    }
                    Action::Publish(view) => {
                        let self_in = view.members.iter().any(|m| m.node == node(1));
                        prop_assert!(!self_in || matches!(health, HostHealth::Up | HostHealth::Leaving));
                        for member in &view.members {
                            prop_assert!(!gone.contains(&member.node), "a removed peer came back");
                            if member.node == node(1) && health == HostHealth::Leaving {
                                prop_assert_eq!(member.status, MemberStatus::Leaving);
                            }
                        }
                        if let Some(leader) = &view.leader {
                            prop_assert_eq!(Some(leader), view.members.iter().find(|m| m.status == MemberStatus::Up).map(|m| &m.node.address));
                        }
                    }
                    Action::Stop => { stopped = true; in_flight = None; }
                    Action::DeletePeer { .. } => {}
                }
            }
            if matches!(event, Event::Tick) && *m.health() == HostHealth::Up {
                prop_assert!(m.valid_until().is_some_and(|v| v > now.mono), "up past the local deadline");
            }
            if was_up && matches!(event, Event::Removed(ref n) if n == "demo-me") {
                prop_assert!(m.health().is_fatal(), "a deleted Lease fences an up host");
            }
            if !leave_requested && matches!(event, Event::Written { purpose: Purpose::Heartbeat, result: Err(WriteError::NotFound) }) && was_up {
                prop_assert!(m.health().is_fatal(), "a renewal answered 404 fences");
            }
        }
    }
}

#[test]
fn a_renewal_that_lands_after_the_local_deadline_fences() {
    let t0 = Now::current();
    let mut m = up(t0);
    let t1 = t0.plus(Duration::from_millis(300));
    assert!(m.step(Event::Tick, t1).iter().any(is_heartbeat));
    // The answer arrives (success) only after the deadline the previous write set; no tick
    // came in between.
    let late = t0.plus(timing().local_validity() + Duration::from_millis(10));
    let actions = m.step(
        Event::Written {
            purpose: Purpose::Heartbeat,
            result: Ok("9".into()),
        },
        late,
    );
    assert!(m.health().is_fatal(), "{:?}", m.health());
    assert!(actions.contains(&Action::Stop));
}

#[test]
fn a_conflict_is_resolved_by_reading_the_lease_and_fences_only_if_it_is_not_ours() {
    let t0 = Now::current();
    let me = node(1).to_string();
    for (holder, fenced) in [(me.clone(), false), ("someone-else".to_owned(), true)] {
        let mut m = up(t0);
        let t1 = t0.plus(Duration::from_millis(300));
        assert!(m.step(Event::Tick, t1).iter().any(is_heartbeat));
        let actions = m.step(
            Event::Written {
                purpose: Purpose::Heartbeat,
                result: Err(WriteError::Conflict),
            },
            t1,
        );
        assert!(actions.contains(&Action::FetchOwn));
        m.step(Event::FetchedOwn(Ok(Some((holder, "12".into())))), t1);
        assert_eq!(m.health().is_fatal(), fenced);
        if !fenced {
            // The next heartbeat carries the version just read.
            let next = m.step(Event::Tick, t1.plus(Duration::from_millis(100)));
            assert!(next.iter().any(|a| matches!(a, Action::Write { resource_version, .. } if resource_version == "12")), "{next:?}");
        }
    }
}
