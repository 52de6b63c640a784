use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::*;
use crate::Address;
use crate::virtual_actor::placement::{
    ActivationCountPlacement, PreferLocalPlacement, RandomPlacement,
};

fn host(i: u8) -> UniqueAddress {
    UniqueAddress {
        address: Address::new("sim", &format!("10.0.0.{}", i + 1), 2552),
        incarnation: 7,
    }
}

fn key(k: &str) -> String {
    k.to_owned()
}

fn limits(buffer_size: usize, idle: Option<u64>) -> Limits {
    Limits {
        buffer_size,
        idle_timeout: idle.map(Duration::from_millis),
        max_hops: 3,
    }
}

/// A machine on host 0 in a view of hosts 0..`members`.
fn machine(
    limits: Limits,
    policy: Arc<dyn PlacementPolicy>,
    members: u8,
) -> Option<ActivationState<u32>> {
    let state = ActivationState::new(host(0), limits, policy, 1);
    let (state, _) = step(
        state,
        Event::Members((0..members).map(host).collect()),
        Instant::now(),
    );
    Some(state)
}

fn feed(
    state: &mut Option<ActivationState<u32>>,
    event: Event<u32>,
    now: Instant,
) -> Vec<Action<u32>> {
    let (next, actions) = step(state.take().expect("state"), event, now);
    *state = Some(next);
    actions
}

fn msg(k: &str, item: u32) -> Event<u32> {
    Event::Message {
        key: key(k),
        envelope: Envelope::new(item),
        from: None,
    }
}

fn delivered(actions: &[Action<u32>]) -> Vec<u32> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Deliver { item, .. } => Some(*item),
            _ => None,
        })
        .collect()
}

#[test]
fn a_first_message_claims_the_key_here_then_starts_it_and_delivers_what_waited_in_order() {
    let now = Instant::now();
    let mut state = machine(limits(10, None), Arc::new(PreferLocalPlacement), 3);
    assert_eq!(
        feed(&mut state, msg("a", 1), now),
        vec![Action::Lookup { key: key("a") }]
    );
    assert!(feed(&mut state, msg("a", 2), now).is_empty());
    let actions = feed(
        &mut state,
        Event::LookedUp {
            key: key("a"),
            owner: None,
        },
        now,
    );
    assert_eq!(actions, vec![Action::Claim { key: key("a") }]);
    let actions = feed(
        &mut state,
        Event::Claimed {
            key: key("a"),
            owner: host(0),
            revision: Revision(5),
        },
        now,
    );
    assert_eq!(actions[0], Action::Start { key: key("a") });
    assert_eq!(delivered(&actions), vec![1, 2]);
    assert_eq!(actions.last(), Some(&Action::Activations(1)));
    assert_eq!(delivered(&feed(&mut state, msg("a", 3), now)), vec![3]);
}

#[test]
fn a_lost_claim_forwards_to_the_winner_and_later_messages_follow_without_a_lookup() {
    let now = Instant::now();
    let mut state = machine(limits(10, None), Arc::new(PreferLocalPlacement), 3);
    feed(&mut state, msg("a", 1), now);
    feed(
        &mut state,
        Event::LookedUp {
            key: key("a"),
            owner: None,
        },
        now,
    );
    let actions = feed(
        &mut state,
        Event::Claimed {
            key: key("a"),
            owner: host(2),
            revision: Revision(3),
        },
        now,
    );
    assert_eq!(
        actions,
        vec![Action::Forward {
            key: key("a"),
            to: host(2),
            envelope: Envelope {
                item: 1,
                hops: 1,
                placed: false
            }
        }]
    );
    let actions = feed(&mut state, msg("a", 2), now);
    assert!(matches!(&actions[..], [Action::Forward { to, .. }] if *to == host(2)));
}

#[test]
fn placement_elsewhere_forwards_marked_placed_and_the_target_claims_without_placing_again() {
    let now = Instant::now();
    // Host 1 has published nothing: activation-count placement steers the key to it.
    let mut state = machine(limits(10, None), Arc::new(ActivationCountPlacement), 2);
    feed(&mut state, msg("a", 1), now);
    let actions = feed(
        &mut state,
        Event::LookedUp {
            key: key("a"),
            owner: None,
        },
        now,
    );
    assert_eq!(
        actions,
        vec![Action::Forward {
            key: key("a"),
            to: host(1),
            envelope: Envelope {
                item: 1,
                hops: 1,
                placed: true
            }
        }]
    );
    // On the target, a placed message claims at once.
    let mut target = Some(ActivationState::new(
        host(1),
        limits(10, None),
        Arc::new(ActivationCountPlacement),
        2,
    ));
    let actions = feed(
        &mut target,
        Event::Message {
            key: key("a"),
            envelope: Envelope {
                item: 1,
                hops: 1,
                placed: true,
            },
            from: Some(host(0)),
        },
        now,
    );
    assert_eq!(actions, vec![Action::Claim { key: key("a") }]);
}

#[test]
fn a_full_buffer_turns_the_overflow_into_dead_letters_and_keeps_the_rest() {
    let now = Instant::now();
    let mut state = machine(limits(2, None), Arc::new(PreferLocalPlacement), 1);
    feed(&mut state, msg("a", 1), now);
    feed(&mut state, msg("a", 2), now);
    let actions = feed(&mut state, msg("a", 3), now);
    assert_eq!(
        actions,
        vec![Action::DeadLetter {
            key: key("a"),
            item: 3,
            cause: Undelivered::BufferFull
        }]
    );
    let state = state.expect("state");
    assert_eq!(state.buffered("a"), vec![&1, &2]);
}

#[test]
fn an_idle_activation_is_stopped_and_released_and_the_next_message_activates_it_again() {
    let start = Instant::now();
    let mut state = machine(limits(10, Some(1_000)), Arc::new(PreferLocalPlacement), 1);
    feed(&mut state, msg("a", 1), start);
    feed(
        &mut state,
        Event::LookedUp {
            key: key("a"),
            owner: Some((host(0), Revision(1))),
        },
        start,
    );
    // Activity at 600 ms pushes the passivation to 1,600 ms.
    feed(&mut state, msg("a", 2), start + Duration::from_millis(600));
    let actions = feed(
        &mut state,
        Event::IdleCheck { key: key("a") },
        start + Duration::from_millis(1_000),
    );
    assert_eq!(
        actions,
        vec![Action::ScheduleIdleCheck {
            key: key("a"),
            at: start + Duration::from_millis(1_600)
        }]
    );
    let at = start + Duration::from_millis(1_600);
    let actions = feed(&mut state, Event::IdleCheck { key: key("a") }, at);
    assert_eq!(actions, vec![Action::Stop { key: key("a") }]);
    assert!(feed(&mut state, msg("a", 3), at).is_empty());
    let actions = feed(&mut state, Event::Stopped { key: key("a") }, at);
    assert_eq!(
        actions,
        vec![Action::Release { key: key("a") }, Action::Activations(0)]
    );
    let actions = feed(&mut state, Event::Released { key: key("a") }, at);
    assert_eq!(actions, vec![Action::Lookup { key: key("a") }]);
    assert_eq!(state.expect("state").buffered("a"), vec![&3]);
}

#[test]
fn an_eviction_seen_on_the_watch_stops_the_activation_without_a_release() {
    let now = Instant::now();
    let mut state = machine(limits(10, None), Arc::new(PreferLocalPlacement), 1);
    feed(&mut state, msg("a", 1), now);
    feed(
        &mut state,
        Event::LookedUp {
            key: key("a"),
            owner: Some((host(0), Revision(4))),
        },
        now,
    );
    // A release older than the claim is the previous activation's: ignored.
    let stale = Event::Watched {
        key: key("a"),
        change: Watched::Released(host(0)),
        revision: Revision(3),
    };
    assert!(feed(&mut state, stale, now).is_empty());
    let evicted = Event::Watched {
        key: key("a"),
        change: Watched::Released(host(0)),
        revision: Revision(9),
    };
    assert_eq!(
        feed(&mut state, evicted, now),
        vec![Action::Stop { key: key("a") }]
    );
    assert_eq!(
        feed(&mut state, Event::Stopped { key: key("a") }, now),
        vec![Action::Activations(0)]
    );
}

#[test]
fn leaving_hands_every_activation_off_and_routes_what_arrives_to_the_next_owner() {
    let now = Instant::now();
    let mut state = machine(limits(10, None), Arc::new(PreferLocalPlacement), 2);
    feed(&mut state, msg("a", 1), now);
    feed(
        &mut state,
        Event::LookedUp {
            key: key("a"),
            owner: Some((host(0), Revision(1))),
        },
        now,
    );
    assert_eq!(
        feed(&mut state, Event::Leave, now),
        vec![Action::Stop { key: key("a") }]
    );
    feed(&mut state, msg("a", 2), now);
    feed(&mut state, Event::Stopped { key: key("a") }, now);
    let actions = feed(&mut state, Event::Released { key: key("a") }, now);
    assert_eq!(
        actions,
        vec![Action::Lookup { key: key("a") }, Action::HandedOff]
    );
    // Nobody owns it: placement leaves this host out, so it goes to host 1, still in order.
    let actions = feed(
        &mut state,
        Event::LookedUp {
            key: key("a"),
            owner: None,
        },
        now,
    );
    assert!(
        matches!(&actions[..], [Action::Forward { to, envelope, .. }] if *to == host(1) && envelope.item == 2 && envelope.placed)
    );
}

#[test]
fn a_fenced_host_stops_everything_and_dead_letters_what_it_holds_and_what_comes() {
    let now = Instant::now();
    let mut state = machine(limits(10, None), Arc::new(PreferLocalPlacement), 2);
    feed(&mut state, msg("a", 1), now);
    feed(
        &mut state,
        Event::LookedUp {
            key: key("a"),
            owner: Some((host(0), Revision(1))),
        },
        now,
    );
    feed(&mut state, msg("b", 2), now);
    let actions = feed(&mut state, Event::Fence, now);
    assert!(actions.contains(&Action::Stop { key: key("a") }));
    assert!(actions.contains(&Action::DeadLetter {
        key: key("b"),
        item: 2,
        cause: Undelivered::Fenced
    }));
    assert_eq!(
        feed(&mut state, msg("a", 3), now),
        vec![Action::DeadLetter {
            key: key("a"),
            item: 3,
            cause: Undelivered::Fenced
        }]
    );
}

#[test]
fn a_route_is_dropped_when_its_host_leaves_the_view_and_an_owner_outside_the_view_is_not_cached() {
    let now = Instant::now();
    let mut state = machine(limits(10, None), Arc::new(PreferLocalPlacement), 3);
    feed(&mut state, msg("a", 1), now);
    feed(
        &mut state,
        Event::LookedUp {
            key: key("a"),
            owner: Some((host(2), Revision(1))),
        },
        now,
    );
    assert_eq!(state.as_ref().expect("state").route_of("a"), Some(&host(2)));
    feed(&mut state, Event::Members([host(0), host(1)].into()), now);
    assert_eq!(state.as_ref().expect("state").route_of("a"), None);
    // The directory still names host 2 until its claims are evicted.
    feed(&mut state, msg("a", 2), now);
    let actions = feed(
        &mut state,
        Event::LookedUp {
            key: key("a"),
            owner: Some((host(2), Revision(1))),
        },
        now,
    );
    assert_eq!(
        actions,
        vec![Action::DeadLetter {
            key: key("a"),
            item: 2,
            cause: Undelivered::OwnerNotMember
        }]
    );
    assert_eq!(state.expect("state").route_of("a"), None);
}

#[test]
fn a_departing_host_gets_no_new_activation_but_keeps_its_routes() {
    let now = Instant::now();
    let mut state = machine(limits(10, None), Arc::new(ActivationCountPlacement), 3);
    // Host 1 owns "a"; hosts 1 and 2 have published nothing, so both count as cold.
    feed(&mut state, msg("a", 1), now);
    feed(
        &mut state,
        Event::LookedUp {
            key: key("a"),
            owner: Some((host(1), Revision(1))),
        },
        now,
    );
    feed(&mut state, Event::Departing(host(1)), now);
    feed(&mut state, Event::Departing(host(2)), now);
    // A route to a departing host stays: it forwards what it no longer hosts.
    assert_eq!(state.as_ref().expect("state").route_of("a"), Some(&host(1)));
    // New keys go to the only host not departing, this one, though it is the most loaded.
    for (i, k) in ["b", "c", "d"].into_iter().enumerate() {
        feed(&mut state, msg(k, 10 + i as u32), now);
        let actions = feed(
            &mut state,
            Event::LookedUp {
                key: key(k),
                owner: None,
            },
            now,
        );
        assert_eq!(actions, vec![Action::Claim { key: key(k) }], "{k}");
    }
    // Forgotten when it leaves the view: back as a member, it is a candidate again.
    feed(&mut state, Event::Members([host(0), host(2)].into()), now);
    feed(
        &mut state,
        Event::Members([host(0), host(1), host(2)].into()),
        now,
    );
    feed(&mut state, msg("e", 20), now);
    let actions = feed(
        &mut state,
        Event::LookedUp {
            key: key("e"),
            owner: None,
        },
        now,
    );
    assert!(
        matches!(&actions[..], [Action::Forward { to, .. }] if *to == host(1)),
        "host 1, cold again, takes the new key: {actions:?}"
    );
}

#[test]
fn a_message_forwarded_too_often_becomes_a_dead_letter_and_drops_the_route() {
    let now = Instant::now();
    let mut state = machine(limits(10, None), Arc::new(PreferLocalPlacement), 3);
    feed(&mut state, msg("a", 1), now);
    feed(
        &mut state,
        Event::LookedUp {
            key: key("a"),
            owner: Some((host(1), Revision(1))),
        },
        now,
    );
    let actions = feed(
        &mut state,
        Event::Message {
            key: key("a"),
            envelope: Envelope {
                item: 2,
                hops: 3,
                placed: false,
            },
            from: Some(host(2)),
        },
        now,
    );
    assert_eq!(
        actions,
        vec![Action::DeadLetter {
            key: key("a"),
            item: 2,
            cause: Undelivered::TooManyHops
        }]
    );
    assert_eq!(state.expect("state").route_of("a"), None);
}

#[test]
fn a_placed_message_is_claimed_whatever_route_this_host_has_and_the_directory_arbitrates() {
    let now = Instant::now();
    let mut state = machine(limits(10, None), Arc::new(PreferLocalPlacement), 3);
    feed(&mut state, msg("a", 1), now);
    feed(
        &mut state,
        Event::LookedUp {
            key: key("a"),
            owner: Some((host(1), Revision(1))),
        },
        now,
    );
    let placed = |item, from| Event::Message {
        key: key("a"),
        envelope: Envelope {
            item,
            hops: 1,
            placed: true,
        },
        from: Some(host(from)),
    };
    // Host 2 placed it here: claim, never follow the route or place it again (that looped
    // when hosts placed one key on each other crosswise).
    let actions = feed(&mut state, placed(2, 2), now);
    assert_eq!(actions, vec![Action::Claim { key: key("a") }]);
    // What comes meanwhile waits behind it.
    let actions = feed(&mut state, msg("a", 3), now);
    assert!(actions.is_empty(), "{actions:?}");
    // Host 1 still holds the claim: both go there, unmarked, in order.
    let actions = feed(
        &mut state,
        Event::Claimed {
            key: key("a"),
            owner: host(1),
            revision: Revision(1),
        },
        now,
    );
    let forwarded: Vec<(u32, bool)> = actions
        .iter()
        .map(|a| match a {
            Action::Forward { to, envelope, .. } if *to == host(1) => {
                (envelope.item, envelope.placed)
            }
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(forwarded, vec![(2, false), (3, false)]);
    assert_eq!(state.expect("state").route_of("a"), Some(&host(1)));
}

#[test]
fn a_placed_message_during_a_lookup_claims_at_once_with_what_waited_first() {
    let now = Instant::now();
    let mut state = machine(limits(10, None), Arc::new(RandomPlacement), 3);
    assert_eq!(
        feed(&mut state, msg("a", 1), now),
        vec![Action::Lookup { key: key("a") }]
    );
    let actions = feed(
        &mut state,
        Event::Message {
            key: key("a"),
            envelope: Envelope {
                item: 2,
                hops: 1,
                placed: true,
            },
            from: Some(host(2)),
        },
        now,
    );
    assert_eq!(actions, vec![Action::Claim { key: key("a") }]);
    // The lookup's late answer is stale: no placement elsewhere.
    let actions = feed(
        &mut state,
        Event::LookedUp {
            key: key("a"),
            owner: None,
        },
        now,
    );
    assert!(actions.is_empty(), "{actions:?}");
    assert_eq!(state.as_ref().expect("state").buffered("a"), vec![&1, &2]);
}

// --- property tests --------------------------------------------------------------------------

const KEYS: [&str; 3] = ["a", "b", "c"];

#[derive(Debug, Clone)]
enum Op {
    Submit {
        key: usize,
        placed: bool,
        hops: u8,
        from: u8,
    },
    AnswerLookup {
        pick: usize,
        owner: u8,
    },
    AnswerClaim {
        pick: usize,
        owner: u8,
    },
    FailDirectory {
        pick: usize,
    },
    FinishStop {
        pick: usize,
    },
    FinishRelease {
        pick: usize,
    },
    StopsByItself {
        pick: usize,
    },
    Evict {
        pick: usize,
    },
    WatchClaimed {
        key: usize,
        owner: u8,
    },
    Members {
        mask: u8,
    },
    Load {
        host: u8,
        activations: u64,
    },
    Advance {
        ms: u64,
    },
    /// A host says it hands off.
    Departing {
        host: u8,
    },
    Leave,
    Fence,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..KEYS.len(), any::<bool>(), 0u8..5, 0u8..5)
            .prop_map(|(key, placed, hops, from)| Op::Submit { key, placed, hops, from }),
        3 => (any::<usize>(), 0u8..5).prop_map(|(pick, owner)| Op::AnswerLookup { pick, owner }),
        3 => (any::<usize>(), 0u8..4).prop_map(|(pick, owner)| Op::AnswerClaim { pick, owner }),
        1 => any::<usize>().prop_map(|pick| Op::FailDirectory { pick }),
        2 => any::<usize>().prop_map(|pick| Op::FinishStop { pick }),
        2 => any::<usize>().prop_map(|pick| Op::FinishRelease { pick }),
        1 => any::<usize>().prop_map(|pick| Op::StopsByItself { pick }),
        1 => any::<usize>().prop_map(|pick| Op::Evict { pick }),
        1 => (0..KEYS.len(), 0u8..4).prop_map(|(key, owner)| Op::WatchClaimed { key, owner }),
        1 => any::<u8>().prop_map(|mask| Op::Members { mask }),
        1 => (0u8..4, 0u64..10).prop_map(|(host, activations)| Op::Load { host, activations }),
        2 => (0u64..3_000).prop_map(|ms| Op::Advance { ms }),
        1 => (0u8..4).prop_map(|host| Op::Departing { host }),
        1 => Just(Op::Leave),
        1 => Just(Op::Fence),
    ]
}

/// Where each message went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Delivered,
    Forwarded,
    DeadLetter,
}

/// The machine's world: the requests in flight, answered in any order the test picks.
struct World {
    state: Option<ActivationState<u32>>,
    now: Instant,
    revision: u64,
    lookups: Vec<String>,
    claims: Vec<String>,
    stops: Vec<String>,
    releases: Vec<String>,
    /// Keys with a running activation, and its claim's revision.
    running: BTreeMap<String, Revision>,
    /// Keys whose activation accepts messages (started, not yet told to stop).
    accepting: BTreeSet<String>,
    idle_checks: Vec<(String, Instant)>,
    fates: BTreeMap<u32, Fate>,
    /// Per key, the messages delivered or forwarded, in the order the machine let them go.
    sent_order: BTreeMap<String, Vec<u32>>,
    next_item: u32,
    fenced: bool,
    buffer_size: usize,
}

impl World {
    fn new(buffer_size: usize, idle: Option<u64>, policy: Arc<dyn PlacementPolicy>) -> Self {
        Self {
            state: machine(limits(buffer_size, idle), policy, 4),
            now: Instant::now(),
            revision: 0,
            lookups: Vec::new(),
            claims: Vec::new(),
            stops: Vec::new(),
            releases: Vec::new(),
            running: BTreeMap::new(),
            accepting: BTreeSet::new(),
            idle_checks: Vec::new(),
            fates: BTreeMap::new(),
            sent_order: BTreeMap::new(),
            next_item: 0,
            fenced: false,
            buffer_size,
        }
    }

    fn state(&self) -> &ActivationState<u32> {
        self.state.as_ref().expect("state")
    }

    fn next_revision(&mut self) -> Revision {
        self.revision += 1;
        Revision(self.revision)
    }

    fn take(list: &mut Vec<String>, pick: usize) -> Option<String> {
        if list.is_empty() {
            None
        } else {
            Some(list.remove(pick % list.len()))
        }
    }

    fn apply(&mut self, op: Op) -> Result<(), TestCaseError> {
        let event = match op {
            Op::Submit {
                key,
                placed,
                hops,
                from,
            } => {
                let item = self.next_item;
                self.next_item += 1;
                Event::Message {
                    key: KEYS[key].to_owned(),
                    envelope: Envelope { item, hops, placed },
                    // 0: a local sender, otherwise forwarded by another host.
                    from: (from > 0).then(|| host(from)),
                }
            }
            Op::AnswerLookup { pick, owner } => {
                let Some(key) = Self::take(&mut self.lookups, pick) else {
                    return Ok(());
                };
                // 0: nobody, 1: this host, 2-3: a member, 4: a host outside the view.
                let owner = match owner {
                    0 => None,
                    n => Some((host(n - 1), self.next_revision())),
                };
                Event::LookedUp { key, owner }
            }
            Op::AnswerClaim { pick, owner } => {
                let Some(key) = Self::take(&mut self.claims, pick) else {
                    return Ok(());
                };
                let revision = self.next_revision();
                Event::Claimed {
                    key,
                    owner: host(owner),
                    revision,
                }
            }
            Op::FailDirectory { pick } => {
                let from_lookups = pick % 2 == 0;
                let list = if from_lookups {
                    &mut self.lookups
                } else {
                    &mut self.claims
                };
                let Some(key) = Self::take(list, pick / 2) else {
                    return Ok(());
                };
                Event::DirectoryFailed {
                    key,
                    error: "unreachable".to_owned(),
                }
            }
            Op::FinishStop { pick } => {
                let Some(key) = Self::take(&mut self.stops, pick) else {
                    return Ok(());
                };
                self.running.remove(&key);
                Event::Stopped { key }
            }
            Op::FinishRelease { pick } => {
                let Some(key) = Self::take(&mut self.releases, pick) else {
                    return Ok(());
                };
                Event::Released { key }
            }
            Op::StopsByItself { pick } => {
                let running: Vec<String> = self
                    .running
                    .keys()
                    .filter(|k| !self.stops.contains(k))
                    .cloned()
                    .collect();
                if running.is_empty() {
                    return Ok(());
                }
                let key = running[pick % running.len()].clone();
                self.running.remove(&key);
                self.accepting.remove(&key);
                Event::Stopped { key }
            }
            Op::Evict { pick } => {
                let running: Vec<String> = self.running.keys().cloned().collect();
                if running.is_empty() {
                    return Ok(());
                }
                let key = running[pick % running.len()].clone();
                let revision = self.next_revision();
                Event::Watched {
                    key,
                    change: Watched::Released(host(0)),
                    revision,
                }
            }
            Op::WatchClaimed { key, owner } => {
                let revision = self.next_revision();
                Event::Watched {
                    key: KEYS[key].to_owned(),
                    change: Watched::Claimed(host(owner)),
                    revision,
                }
            }
            Op::Members { mask } => {
                Event::Members((0..4).filter(|i| mask & (1 << i) != 0).map(host).collect())
            }
            Op::Load {
                host: h,
                activations,
            } => Event::Load {
                host: host(h),
                activations,
            },
            Op::Advance { ms } => {
                self.now += Duration::from_millis(ms);
                let now = self.now;
                let (due, later): (Vec<_>, Vec<_>) =
                    self.idle_checks.drain(..).partition(|(_, at)| *at <= now);
                self.idle_checks = later;
                for (key, _) in due {
                    self.feed(Event::IdleCheck { key })?;
                }
                return Ok(());
            }
            Op::Departing { host: h } => Event::Departing(host(h)),
            Op::Leave => Event::Leave,
            Op::Fence => {
                self.fenced = true;
                Event::Fence
            }
        };
        self.feed(event)
    }

    fn feed(&mut self, event: Event<u32>) -> Result<(), TestCaseError> {
        let answers_with_self = match &event {
            Event::LookedUp {
                key,
                owner: Some((owner, revision)),
            } if *owner == host(0) => Some((key.clone(), *revision)),
            Event::Claimed {
                key,
                owner,
                revision,
            } if *owner == host(0) => Some((key.clone(), *revision)),
            _ => None,
        };
        let (next, actions) = step(self.state.take().expect("state"), event, self.now);
        self.state = Some(next);
        for action in actions {
            match action {
                Action::Lookup { key } => self.lookups.push(key),
                Action::Claim { key } => {
                    prop_assert!(!self.fenced, "a fenced host claimed {key}");
                    self.claims.push(key);
                }
                Action::Start { key } => {
                    prop_assert!(!self.fenced, "a fenced host started {key}");
                    let Some((claimed, revision)) = answers_with_self.clone() else {
                        return Err(TestCaseError::fail(format!(
                            "{key} started without this host's claim"
                        )));
                    };
                    prop_assert_eq!(&claimed, &key);
                    prop_assert!(!self.running.contains_key(&key), "{key} started twice");
                    self.running.insert(key.clone(), revision);
                    self.accepting.insert(key);
                }
                Action::Deliver { key, item } => {
                    prop_assert!(
                        self.accepting.contains(&key),
                        "{item} delivered to {key}, which is not running"
                    );
                    self.settle(item, Fate::Delivered)?;
                    self.sent_order.entry(key).or_default().push(item);
                }
                Action::Forward { key, to, envelope } => {
                    prop_assert_ne!(&to, &host(0), "forwarded to itself");
                    prop_assert!(envelope.hops <= 3, "forwarded beyond max_hops");
                    self.settle(envelope.item, Fate::Forwarded)?;
                    self.sent_order.entry(key).or_default().push(envelope.item);
                }
                Action::Stop { key } => {
                    prop_assert!(
                        self.running.contains_key(&key),
                        "stopped {key}, not running"
                    );
                    self.accepting.remove(&key);
                    self.stops.push(key);
                }
                Action::Release { key } => self.releases.push(key),
                Action::DeadLetter { item, .. } => self.settle(item, Fate::DeadLetter)?,
                Action::ScheduleIdleCheck { key, at } => self.idle_checks.push((key, at)),
                Action::Activations(n) => {
                    prop_assert_eq!(n, self.state().activations());
                }
                Action::HandedOff => {}
            }
        }
        for k in KEYS {
            prop_assert!(self.state().buffered(k).len() <= self.buffer_size);
        }
        Ok(())
    }

    fn settle(&mut self, item: u32, fate: Fate) -> Result<(), TestCaseError> {
        let before = self.fates.insert(item, fate);
        prop_assert!(
            before.is_none(),
            "{item} left twice: {before:?}, then {fate:?}"
        );
        Ok(())
    }

    /// Every message went exactly one way or still waits; per key the ones that went did so in
    /// arrival order.
    fn check_conservation(&self) -> Result<(), TestCaseError> {
        let mut waiting = BTreeSet::new();
        for k in KEYS {
            for &item in self.state().buffered(k) {
                prop_assert!(waiting.insert(item));
                prop_assert!(!self.fates.contains_key(&item), "{item} waits and went");
            }
        }
        for item in 0..self.next_item {
            prop_assert!(
                self.fates.contains_key(&item) || waiting.contains(&item),
                "message {item} vanished"
            );
        }
        for (key, order) in &self.sent_order {
            prop_assert!(
                order.windows(2).all(|w| w[0] < w[1]),
                "{key}: messages went out of arrival order: {order:?}"
            );
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Whatever the directory answers, in whatever order, with stops, releases, evictions,
    /// view changes, idle timers, a leave and a fence in between: every message is delivered,
    /// forwarded or dead-lettered exactly once, or still waits; per key they leave in arrival
    /// order; no buffer exceeds its bound; an activation starts only on this host's own claim
    /// and receives messages only while it runs.
    #[test]
    fn no_message_is_lost_duplicated_or_reordered_and_buffers_stay_bounded(
        ops in proptest::collection::vec(op(), 1..300),
        buffer_size in prop_oneof![Just(1_000usize), 1usize..4],
        idle in prop_oneof![Just(None), Just(Some(1_000u64))],
        activation_count: bool,
    ) {
        let policy: Arc<dyn PlacementPolicy> = if activation_count {
            Arc::new(ActivationCountPlacement)
        } else {
            Arc::new(PreferLocalPlacement)
        };
        let mut world = World::new(buffer_size, idle, policy);
        for op in ops {
            world.apply(op)?;
        }
        world.check_conservation()?;
    }
}
