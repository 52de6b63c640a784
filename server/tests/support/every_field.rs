//! A report batch holding one event of every kind with every optional field set, and the JSON
//! paths of every string in it: what the limit and hostile-input tests iterate, so a field
//! added to the report format is covered without editing a list.

#![allow(dead_code)]

use serde_json::Value;
use troupe_protocol::{
    AgentHealth, AgentMeta, DeadLetterEvent, EventBody, EventKind, HandOverCompleted,
    HandOverStarted, HandOverTimedOut, HealthChange, HostEviction, LeaderChange, LeaseChange,
    MemberChange, MemberInfo, MemberStatus, ReportBatch, RouteesChange, RouterStarted,
    RoutingStrategy, SingletonHostElected, SingletonInstance, SingletonMessages,
};
use troupe_server::testing::BatchBuilder;

fn s(v: &str) -> String {
    v.to_owned()
}

fn change() -> MemberChange {
    MemberChange {
        member: MemberInfo {
            address: s("127.0.0.1:2552"),
            uid: 7,
            status: MemberStatus::Up,
            roles: vec![s("worker")],
        },
        previous_status: Some(MemberStatus::Joining),
        observers: vec![s("127.0.0.1:2553")],
    }
}

fn instance() -> SingletonInstance {
    SingletonInstance {
        singleton: s("scheduler"),
        role: Some(s("control")),
        host: s("127.0.0.1:2552"),
        backoff_ms: Some(10),
        reason: Some(s("stopped")),
    }
}

fn lease() -> LeaseChange {
    LeaseChange {
        singleton: s("scheduler"),
        role: Some(s("control")),
        lease: s("scheduler-lease"),
        holder: Some(s("127.0.0.1:2552")),
        reason: Some(s("renewed")),
    }
}

fn messages() -> SingletonMessages {
    SingletonMessages {
        singleton: s("scheduler"),
        role: Some(s("control")),
        count: 3,
    }
}

/// One event of every kind, with every optional field present.
pub(crate) fn every_event_body() -> Vec<EventBody> {
    let bodies = vec![
        EventBody::MemberJoined(change()),
        EventBody::MemberWeaklyUp(change()),
        EventBody::MemberUp(change()),
        EventBody::MemberLeft(change()),
        EventBody::MemberExited(change()),
        EventBody::MemberDown(change()),
        EventBody::MemberRemoved(change()),
        EventBody::MemberUnreachable(change()),
        EventBody::MemberReachable(change()),
        EventBody::LeaderChanged(LeaderChange {
            leader: Some(s("127.0.0.1:2551")),
        }),
        EventBody::SelfUp(change()),
        EventBody::SingletonHostElected(SingletonHostElected {
            singleton: s("scheduler"),
            role: Some(s("control")),
            host: s("127.0.0.1:2552"),
            previous_host: Some(s("127.0.0.1:2551")),
        }),
        EventBody::SingletonHandOverStarted(HandOverStarted {
            singleton: s("scheduler"),
            role: Some(s("control")),
            new_host: s("127.0.0.1:2552"),
            peers: vec![s("127.0.0.1:2551")],
        }),
        EventBody::SingletonHandOverCompleted(HandOverCompleted {
            singleton: s("scheduler"),
            role: Some(s("control")),
            new_host: s("127.0.0.1:2552"),
            duration_ms: 5,
        }),
        EventBody::SingletonHandOverTimedOut(HandOverTimedOut {
            singleton: s("scheduler"),
            role: Some(s("control")),
            new_host: s("127.0.0.1:2552"),
            silent_peers: vec![s("127.0.0.1:2551")],
            duration_ms: 5,
        }),
        EventBody::SingletonStarted(instance()),
        EventBody::SingletonStopped(instance()),
        EventBody::SingletonRestarted(instance()),
        EventBody::LeaseAcquired(lease()),
        EventBody::LeaseLost(lease()),
        EventBody::LeaseReleased(lease()),
        EventBody::SingletonMessagesHeld(messages()),
        EventBody::SingletonMessagesFlushed(messages()),
        EventBody::SingletonMessagesDeadLettered(messages()),
        EventBody::RouterStarted(RouterStarted {
            router: s("/user/router"),
            strategy: RoutingStrategy::RoundRobin,
            role: Some(s("worker")),
            routee_path: s("/user/worker"),
        }),
        EventBody::RouteesChanged(RouteesChange {
            router: s("/user/router"),
            strategy: RoutingStrategy::RoundRobin,
            routees: vec![s("troupe://app@127.0.0.1:2552/user/worker")],
        }),
        EventBody::DeadLetter(DeadLetterEvent {
            recipient: s("/user/gone"),
            sender: Some(s("/user/sender")),
            message_type: s("app::Ping"),
            reason: s("no actor at recipient path"),
        }),
        EventBody::AgentHealthChanged(HealthChange {
            health: AgentHealth::Draining,
            reason: Some(s("SIGTERM")),
        }),
        EventBody::DirectoryHostEvicted(HostEviction {
            host: s("127.0.0.1:2553"),
            previous_status: Some(s("down")),
            actors: vec![s("/user/shelf")],
        }),
    ];
    let kinds: Vec<EventKind> = bodies.iter().map(EventBody::kind).collect();
    assert_eq!(
        kinds,
        EventKind::ALL,
        "one event of every kind, in declaration order"
    );
    bodies
}

/// A batch of cluster `cluster` holding every event kind, a depth tick and the agent's meta.
pub(crate) fn every_field_batch(cluster: &str, sequence: u64, t: i64) -> ReportBatch {
    let mut builder = BatchBuilder::new(cluster, "127.0.0.1:2552", sequence).sent_at(t);
    for (i, body) in every_event_body().into_iter().enumerate() {
        builder = builder.event(t - 60_000 + i as i64 * 100, body);
    }
    let mut batch = builder
        .depth_tick(t - 1_000, &[("/user/worker", Some("/user/router"), 4)])
        .build();
    batch.identity.meta = AgentMeta {
        node: Some(s("k8s-node-1")),
    };
    batch
}

/// The JSON path (`events[3].member.address`) of every string leaf of `value`, except the
/// `kind` tags.
pub(crate) fn string_paths(value: &Value) -> Vec<String> {
    fn walk(value: &Value, path: &str, out: &mut Vec<String>) {
        match value {
            Value::String(_) if !path.ends_with(".kind") => out.push(path.to_owned()),
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    walk(item, &format!("{path}[{i}]"), out);
                }
            }
            Value::Object(fields) => {
                for (name, field) in fields {
                    let path = if path.is_empty() {
                        name.clone()
                    } else {
                        format!("{path}.{name}")
                    };
                    walk(field, &path, out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(value, "", &mut out);
    out
}

/// The string leaf at `path` of `value`.
pub(crate) fn leaf_mut<'a>(value: &'a mut Value, path: &str) -> &'a mut Value {
    let mut at = value;
    for part in path.split('.') {
        let (name, indexes) = match part.find('[') {
            Some(i) => (&part[..i], &part[i..]),
            None => (part, ""),
        };
        at = &mut at[name];
        for index in indexes.split(['[', ']']).filter(|i| !i.is_empty()) {
            at = &mut at[index.parse::<usize>().expect("index")];
        }
    }
    at
}

/// `len` bytes of printable ASCII that do not compress (PostgreSQL compresses long index keys,
/// so a repeated character would hide an index that is too narrow).
pub(crate) fn incompressible(len: usize, seed: u64) -> String {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from(b'a' + (x % 26) as u8)
        })
        .collect()
}
