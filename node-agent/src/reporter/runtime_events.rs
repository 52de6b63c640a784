//! Singleton and router events from the runtime's event stream, in the control plane's wire
//! format, plus the routers this node runs (whose routees' depths the reporter samples).
//!
//! # What the wire needs that the runtime's events do not carry
//! - `SingletonHostElected.previous_host`: the host this node's manager elected before, kept
//!   per singleton. An election of nobody (no eligible member) is not reported — the wire's
//!   `host` is required — but it clears the remembered host.
//! - `SingletonHandOverTimedOut.duration_ms`: measured from this node's `HandOverStarted`.
//! - Lease names: the runtime's lease events name the singleton only, so the lease is reported
//!   under the singleton's name.
//! - Roles: singleton events carry none, so `role` is unset; router events carry theirs.
//!
//! Nodes are named `host:port` (as members are); routees by their full actor path
//! (`troupe://<system>@<host>:<port>/user/worker`).
//!
//! # What is not forwarded
//! `ClusterRouterEvent::DepthSample` (the router's own readings of remote mailboxes: each node
//! reports its own routees' depths instead) and `ClusterRouterEvent::DeadLettered` (the same
//! message is also a `DeadLetter`, which is reported).

use std::collections::{BTreeMap, HashMap};

use troupe::ActorSystem;
use troupe::Address;
use troupe::cluster_router::ClusterRouterEvent;
use troupe::singleton::{RESPAWN_BACKOFF, SingletonEvent};
use troupe_protocol::{
    DepthSample, Event, EventBody, HandOverCompleted, HandOverStarted, HandOverTimedOut,
    LeaseChange, RouteesChange, RouterStarted, RoutingStrategy, SingletonHostElected,
    SingletonInstance, SingletonMessages,
};

/// The state the conversion keeps between events.
#[derive(Debug, Default)]
pub struct RuntimeEvents {
    /// Per singleton: the host this node last elected.
    elected: HashMap<String, String>,
    /// Per singleton: when this node started its open hand-over round (epoch ms).
    hand_over_started: HashMap<String, i64>,
    /// Routers started on this node: router path → routee path.
    routers: BTreeMap<String, String>,
}

fn node(address: &Address) -> String {
    address.host_port()
}

fn strategy(strategy: troupe::routing::RoutingStrategy) -> RoutingStrategy {
    use troupe::routing::RoutingStrategy as Runtime;
    match strategy {
        Runtime::RoundRobin => RoutingStrategy::RoundRobin,
        Runtime::Random => RoutingStrategy::Random,
        Runtime::ConsistentHashing => RoutingStrategy::ConsistentHashing,
        Runtime::SmallestMailbox => RoutingStrategy::SmallestMailbox,
        Runtime::Broadcast => RoutingStrategy::Broadcast,
    }
}

fn instance(singleton: &str, host: &Address, reason: Option<String>) -> SingletonInstance {
    SingletonInstance {
        singleton: singleton.to_owned(),
        role: None,
        host: node(host),
        backoff_ms: None,
        reason,
    }
}

fn lease(singleton: &str, holder: Option<String>, reason: Option<String>) -> LeaseChange {
    LeaseChange {
        singleton: singleton.to_owned(),
        role: None,
        lease: singleton.to_owned(),
        holder,
        reason,
    }
}

fn messages(singleton: &str, count: usize) -> SingletonMessages {
    SingletonMessages {
        singleton: singleton.to_owned(),
        role: None,
        count: count as u64,
    }
}

impl RuntimeEvents {
    /// Nothing known yet.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// A singleton event as a stored event; `None` for what the wire cannot say (an election
    /// of nobody) or a kind this agent does not know.
    pub fn singleton(&mut self, event: &SingletonEvent, at_ms: i64) -> Option<Event> {
        let name = event.type_name();
        let body = match event {
            SingletonEvent::HostElected { host, .. } => {
                let Some(host) = host else {
                    self.elected.remove(name);
                    return None;
                };
                let host = node(host);
                let previous_host = self.elected.insert(name.to_owned(), host.clone());
                EventBody::SingletonHostElected(SingletonHostElected {
                    singleton: name.to_owned(),
                    role: None,
                    host,
                    previous_host,
                })
            }
            SingletonEvent::HandOverStarted {
                node: new_host,
                peers,
                ..
            } => {
                self.hand_over_started.insert(name.to_owned(), at_ms);
                EventBody::SingletonHandOverStarted(HandOverStarted {
                    singleton: name.to_owned(),
                    role: None,
                    new_host: node(new_host),
                    peers: peers.iter().map(node).collect(),
                })
            }
            SingletonEvent::HandOverCompleted {
                node: new_host,
                waited,
                ..
            } => {
                self.hand_over_started.remove(name);
                EventBody::SingletonHandOverCompleted(HandOverCompleted {
                    singleton: name.to_owned(),
                    role: None,
                    new_host: node(new_host),
                    duration_ms: u64::try_from(waited.as_millis()).unwrap_or(u64::MAX),
                })
            }
            SingletonEvent::HandOverTimedOut {
                node: new_host,
                silent_peers,
                ..
            } => {
                let started = self.hand_over_started.remove(name).unwrap_or(at_ms);
                EventBody::SingletonHandOverTimedOut(HandOverTimedOut {
                    singleton: name.to_owned(),
                    role: None,
                    new_host: node(new_host),
                    silent_peers: silent_peers.iter().map(node).collect(),
                    duration_ms: u64::try_from(at_ms - started).unwrap_or(0),
                })
            }
            SingletonEvent::InstanceStarted { node: host, .. } => {
                EventBody::SingletonStarted(instance(name, host, None))
            }
            SingletonEvent::InstanceStopped {
                node: host, reason, ..
            } => EventBody::SingletonStopped(instance(name, host, Some(reason.to_string()))),
            SingletonEvent::InstanceRestarted { node: host, .. } => {
                EventBody::SingletonRestarted(SingletonInstance {
                    backoff_ms: Some(
                        u64::try_from(RESPAWN_BACKOFF.as_millis()).unwrap_or(u64::MAX),
                    ),
                    ..instance(name, host, Some("stopped unexpectedly".to_owned()))
                })
            }
            SingletonEvent::LeaseAcquired { node: holder, .. } => {
                EventBody::LeaseAcquired(lease(name, Some(node(holder)), None))
            }
            SingletonEvent::LeaseLost { token, .. } => EventBody::LeaseLost(lease(
                name,
                None,
                Some(format!("grant {token} revoked or not renewed")),
            )),
            SingletonEvent::LeaseReleased { .. } => {
                EventBody::LeaseReleased(lease(name, None, None))
            }
            // The runtime publishes this when the first message starts waiting.
            SingletonEvent::MessagesHeld { .. } => {
                EventBody::SingletonMessagesHeld(messages(name, 1))
            }
            SingletonEvent::MessagesFlushed { count, .. } => {
                EventBody::SingletonMessagesFlushed(messages(name, *count))
            }
            SingletonEvent::MessagesDeadLettered { count, .. } => {
                EventBody::SingletonMessagesDeadLettered(messages(name, *count))
            }
            _ => return None,
        };
        Some(Event { at_ms, body })
    }

    /// A router event as a stored event; remembers the routers started on this node.
    pub fn router(&mut self, event: &ClusterRouterEvent, at_ms: i64) -> Option<Event> {
        let body = match event {
            ClusterRouterEvent::Started {
                router,
                strategy: s,
                role,
                routee_path,
            } => {
                let router = router.elements().to_owned();
                self.routers.insert(router.clone(), routee_path.clone());
                EventBody::RouterStarted(RouterStarted {
                    router,
                    strategy: strategy(*s),
                    role: role.clone(),
                    routee_path: routee_path.clone(),
                })
            }
            ClusterRouterEvent::RouteeSetChanged {
                router,
                strategy: s,
                routee_path,
                routees,
                ..
            } => EventBody::RouteesChanged(RouteesChange {
                router: router.elements().to_owned(),
                strategy: strategy(*s),
                routees: routees
                    .iter()
                    .map(|address| format!("{address}{routee_path}"))
                    .collect(),
            }),
            ClusterRouterEvent::DepthSample(_) | ClusterRouterEvent::DeadLettered { .. } => {
                return None;
            }
        };
        Some(Event { at_ms, body })
    }

    /// The routers started on this node: (router path, routee path).
    pub fn routers(&self) -> impl Iterator<Item = (&str, &str)> {
        self.routers.iter().map(|(r, p)| (r.as_str(), p.as_str()))
    }

    /// The mailbox depth of this node's routee of every router running here, tagged with the
    /// router. Routers that have stopped are forgotten; a routee path with no actor on this
    /// node (a role this node lacks, a worker not started yet) gives no sample.
    pub fn routee_depths(&mut self, system: &ActorSystem) -> Vec<DepthSample> {
        self.routers
            .retain(|router, _| system.resolve_any(router).is_ok());
        self.routers
            .iter()
            .filter_map(|(router, routee_path)| {
                let routee = system.resolve_any(routee_path).ok()?;
                Some(DepthSample {
                    path: routee_path.clone(),
                    router: Some(router.clone()),
                    depth: u32::try_from(routee.mailbox_depth()).unwrap_or(u32::MAX),
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use troupe::singleton::StopReason;

    use super::*;

    fn address(port: u16) -> Address {
        Address::new("demo", "127.0.0.1", port)
    }

    fn name() -> Arc<str> {
        Arc::from("job-scheduler")
    }

    #[test]
    fn an_election_names_the_previously_elected_host_and_an_election_of_nobody_is_not_sent() {
        let mut events = RuntimeEvents::new();
        let elect = |host: Option<u16>| SingletonEvent::HostElected {
            type_name: name(),
            node: address(1),
            host: host.map(address),
        };
        let first = events.singleton(&elect(Some(1)), 10).unwrap();
        assert_eq!(
            first.body,
            EventBody::SingletonHostElected(SingletonHostElected {
                singleton: "job-scheduler".into(),
                role: None,
                host: "127.0.0.1:1".into(),
                previous_host: None,
            })
        );
        let second = events.singleton(&elect(Some(2)), 20).unwrap();
        let EventBody::SingletonHostElected(second) = second.body else {
            panic!("{second:?}")
        };
        assert_eq!(second.previous_host.as_deref(), Some("127.0.0.1:1"));
        assert!(events.singleton(&elect(None), 30).is_none());
        let EventBody::SingletonHostElected(third) =
            events.singleton(&elect(Some(3)), 40).unwrap().body
        else {
            panic!()
        };
        assert_eq!(third.previous_host, None, "nobody was elected in between");
    }

    #[test]
    fn a_timed_out_hand_over_is_measured_from_its_start_and_names_the_silent_peers() {
        let mut events = RuntimeEvents::new();
        events
            .singleton(
                &SingletonEvent::HandOverStarted {
                    type_name: name(),
                    node: address(2),
                    peers: vec![address(1), address(3)],
                },
                1_000,
            )
            .unwrap();
        let timed_out = events
            .singleton(
                &SingletonEvent::HandOverTimedOut {
                    type_name: name(),
                    node: address(2),
                    silent_peers: vec![address(1)],
                },
                11_000,
            )
            .unwrap();
        assert_eq!(
            timed_out.body,
            EventBody::SingletonHandOverTimedOut(HandOverTimedOut {
                singleton: "job-scheduler".into(),
                role: None,
                new_host: "127.0.0.1:2".into(),
                silent_peers: vec!["127.0.0.1:1".into()],
                duration_ms: 10_000,
            })
        );
    }

    #[test]
    fn completed_hand_overs_and_instance_changes_keep_their_durations_and_reasons() {
        let mut events = RuntimeEvents::new();
        let completed = events
            .singleton(
                &SingletonEvent::HandOverCompleted {
                    type_name: name(),
                    node: address(2),
                    waited: Duration::from_millis(420),
                },
                5,
            )
            .unwrap();
        assert!(matches!(
            completed.body,
            EventBody::SingletonHandOverCompleted(HandOverCompleted {
                duration_ms: 420,
                ..
            })
        ));
        let stopped = events
            .singleton(
                &SingletonEvent::InstanceStopped {
                    type_name: name(),
                    node: address(1),
                    reason: StopReason::HandedOver,
                },
                6,
            )
            .unwrap();
        assert_eq!(
            stopped.body,
            EventBody::SingletonStopped(SingletonInstance {
                singleton: "job-scheduler".into(),
                role: None,
                host: "127.0.0.1:1".into(),
                backoff_ms: None,
                reason: Some("handed over".into()),
            })
        );
        let acquired = events
            .singleton(
                &SingletonEvent::LeaseAcquired {
                    type_name: name(),
                    node: address(1),
                    token: troupe::lease::FencingToken(3),
                },
                7,
            )
            .unwrap();
        assert!(matches!(
            acquired.body,
            EventBody::LeaseAcquired(LeaseChange { holder: Some(ref h), .. }) if h == "127.0.0.1:1"
        ));
    }

    #[test]
    fn a_routee_change_lists_full_routee_paths_and_samples_are_not_forwarded() {
        let mut events = RuntimeEvents::new();
        // The router publishes its local path; a path naming a node reports the same elements.
        let router = troupe::ActorPath::remote(&address(1), "/user/compute-router");
        let started = events
            .router(
                &ClusterRouterEvent::Started {
                    router: router.clone(),
                    strategy: troupe::routing::RoutingStrategy::SmallestMailbox,
                    role: None,
                    routee_path: "/user/worker".into(),
                },
                1,
            )
            .unwrap();
        assert_eq!(
            started.body,
            EventBody::RouterStarted(RouterStarted {
                router: "/user/compute-router".into(),
                strategy: RoutingStrategy::SmallestMailbox,
                role: None,
                routee_path: "/user/worker".into(),
            })
        );
        assert_eq!(
            events.routers().collect::<Vec<_>>(),
            [("/user/compute-router", "/user/worker")]
        );
        let changed = events
            .router(
                &ClusterRouterEvent::RouteeSetChanged {
                    router: router.clone(),
                    strategy: troupe::routing::RoutingStrategy::SmallestMailbox,
                    routee_path: "/user/worker".into(),
                    routees: vec![address(1), address(2)],
                    added: vec![address(2)],
                    removed: vec![address(3)],
                },
                2,
            )
            .unwrap();
        assert_eq!(
            changed.body,
            EventBody::RouteesChanged(RouteesChange {
                router: "/user/compute-router".into(),
                strategy: RoutingStrategy::SmallestMailbox,
                routees: vec![
                    "troupe://demo@127.0.0.1:1/user/worker".into(),
                    "troupe://demo@127.0.0.1:2/user/worker".into(),
                ],
            })
        );
        let dead = ClusterRouterEvent::DeadLettered {
            router,
            message_type: "Job",
            routee: None,
            reason: troupe::DeadLetterReason::NoRoutees,
        };
        assert!(events.router(&dead, 3).is_none());
    }

    #[test]
    fn a_full_buffer_keeps_singleton_and_router_events_over_depth_samples() {
        use crate::reporter::buffer::{BufferLimits, ReportBuffer};
        use troupe_protocol::DepthTick;

        let mut events = RuntimeEvents::new();
        let mut buffer = ReportBuffer::new(BufferLimits {
            items: 4,
            batch_events: 100,
        });
        let sample = |n: u32| DepthSample {
            path: "/user/worker".into(),
            router: Some("/user/compute-router".into()),
            depth: n,
        };
        buffer.push_depth_tick(DepthTick {
            at_ms: 0,
            samples: vec![sample(1), sample(2)],
        });
        buffer.push_depth_tick(DepthTick {
            at_ms: 1,
            samples: vec![sample(3)],
        });
        let started = SingletonEvent::InstanceStarted {
            type_name: name(),
            node: address(1),
        };
        let changed = ClusterRouterEvent::RouteeSetChanged {
            router: troupe::ActorPath::remote(&address(1), "/user/compute-router"),
            strategy: troupe::routing::RoutingStrategy::RoundRobin,
            routee_path: "/user/worker".into(),
            routees: vec![address(1)],
            added: vec![address(1)],
            removed: vec![],
        };
        buffer.push_event(events.singleton(&started, 2).unwrap());
        buffer.push_event(events.router(&changed, 3).unwrap());
        let batch = buffer.next_batch().unwrap();
        let kinds: Vec<_> = batch.events.iter().map(|e| e.body.kind()).collect();
        assert_eq!(
            kinds,
            [
                troupe_protocol::EventKind::SingletonStarted,
                troupe_protocol::EventKind::RouteesChanged
            ]
        );
        assert_eq!(batch.dropped.depth_samples, 2, "the oldest tick made room");
        assert_eq!(batch.dropped.singleton + batch.dropped.router, 0);
    }
}
