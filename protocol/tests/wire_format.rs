//! The JSON wire format: every kind round-trips, and field names are pinned.

use serde_json::{Value, json};
use troupe_protocol::*;

fn member(status: MemberStatus) -> MemberChange {
    MemberChange {
        member: MemberInfo {
            address: "10.0.0.1:2552".into(),
            uid: 42,
            status,
            roles: vec!["worker".into()],
        },
        previous_status: None,
        observers: vec![],
    }
}

fn instance() -> SingletonInstance {
    SingletonInstance {
        singleton: "Scheduler".into(),
        role: None,
        host: "10.0.0.1:2552".into(),
        backoff_ms: None,
        reason: None,
    }
}

fn lease(holder: Option<&str>) -> LeaseChange {
    LeaseChange {
        singleton: "Scheduler".into(),
        role: Some("control".into()),
        lease: "app-scheduler".into(),
        holder: holder.map(Into::into),
        reason: None,
    }
}

fn messages(count: u64) -> SingletonMessages {
    SingletonMessages {
        singleton: "Scheduler".into(),
        role: None,
        count,
    }
}

/// One body of every kind, in `EventKind::ALL` order.
fn one_of_each() -> Vec<EventBody> {
    let mut removed = member(MemberStatus::Removed);
    removed.previous_status = Some(MemberStatus::Down);
    let mut unreachable = member(MemberStatus::Up);
    unreachable.observers = vec!["10.0.0.2:2552".into()];
    vec![
        EventBody::MemberJoined(member(MemberStatus::Joining)),
        EventBody::MemberWeaklyUp(member(MemberStatus::WeaklyUp)),
        EventBody::MemberUp(member(MemberStatus::Up)),
        EventBody::MemberLeft(member(MemberStatus::Leaving)),
        EventBody::MemberExited(member(MemberStatus::Exiting)),
        EventBody::MemberDown(member(MemberStatus::Down)),
        EventBody::MemberRemoved(removed),
        EventBody::MemberUnreachable(unreachable.clone()),
        EventBody::MemberReachable(unreachable),
        EventBody::LeaderChanged(LeaderChange {
            leader: Some("10.0.0.1:2552".into()),
        }),
        EventBody::SelfUp(member(MemberStatus::Up)),
        EventBody::SingletonHostElected(SingletonHostElected {
            singleton: "Scheduler".into(),
            role: None,
            host: "10.0.0.1:2552".into(),
            previous_host: Some("10.0.0.2:2552".into()),
        }),
        EventBody::SingletonHandOverStarted(HandOverStarted {
            singleton: "Scheduler".into(),
            role: None,
            new_host: "10.0.0.1:2552".into(),
            peers: vec!["10.0.0.2:2552".into()],
        }),
        EventBody::SingletonHandOverCompleted(HandOverCompleted {
            singleton: "Scheduler".into(),
            role: None,
            new_host: "10.0.0.1:2552".into(),
            duration_ms: 740,
        }),
        EventBody::SingletonHandOverTimedOut(HandOverTimedOut {
            singleton: "Scheduler".into(),
            role: None,
            new_host: "10.0.0.1:2552".into(),
            silent_peers: vec!["10.0.0.3:2552".into()],
            duration_ms: 10_000,
        }),
        EventBody::SingletonStarted(instance()),
        EventBody::SingletonStopped(instance()),
        EventBody::SingletonRestarted(SingletonInstance {
            backoff_ms: Some(1000),
            reason: Some("panicked".into()),
            ..instance()
        }),
        EventBody::LeaseAcquired(lease(Some("10.0.0.1:2552"))),
        EventBody::LeaseLost(lease(None)),
        EventBody::LeaseReleased(lease(None)),
        EventBody::SingletonMessagesHeld(messages(3)),
        EventBody::SingletonMessagesFlushed(messages(3)),
        EventBody::SingletonMessagesDeadLettered(messages(1)),
        EventBody::RouterStarted(RouterStarted {
            router: "/user/workers".into(),
            strategy: RoutingStrategy::SmallestMailbox,
            role: Some("compute".into()),
            routee_path: "/user/worker".into(),
        }),
        EventBody::RouteesChanged(RouteesChange {
            router: "/user/workers".into(),
            strategy: RoutingStrategy::ConsistentHashing,
            routees: vec!["troupe://app@10.0.0.1:2552/user/worker".into()],
        }),
        EventBody::DeadLetter(DeadLetterEvent {
            recipient: "/user/gone".into(),
            sender: None,
            message_type: "app::Ping".into(),
            reason: "recipient stopped".into(),
        }),
        EventBody::AgentHealthChanged(HealthChange {
            health: AgentHealth::Fenced,
            reason: Some("lease renewal got 404".into()),
        }),
        EventBody::DirectoryHostEvicted(HostEviction {
            host: "troupe://app@10.0.0.2:2552#7".into(),
            previous_status: Some("down".into()),
            actors: vec!["cart-1".into(), "cart-2".into()],
        }),
    ]
}

#[test]
fn every_event_kind_round_trips_and_its_tag_is_its_kind_name() {
    let bodies = one_of_each();
    assert_eq!(bodies.len(), EventKind::ALL.len(), "one sample per kind");
    for (body, kind) in bodies.into_iter().zip(EventKind::ALL) {
        assert_eq!(body.kind(), *kind);
        let event = Event {
            at_ms: 1_700_000_000_123,
            body,
        };
        let json: Value = serde_json::to_value(&event).unwrap();
        assert_eq!(json["kind"], kind.as_str());
        assert_eq!(json["at_ms"], 1_700_000_000_123_i64);
        let back: Event = serde_json::from_value(json).unwrap();
        assert_eq!(back, event);
        assert_eq!(kind.as_str().parse::<EventKind>().unwrap(), *kind);
    }
}

#[test]
fn member_up_has_pinned_field_names() {
    let event = Event {
        at_ms: 5,
        body: EventBody::MemberUp(member(MemberStatus::WeaklyUp)),
    };
    assert_eq!(
        serde_json::to_value(&event).unwrap(),
        json!({
            "at_ms": 5,
            "kind": "MemberUp",
            "member": {"address": "10.0.0.1:2552", "uid": "42", "status": "weakly-up", "roles": ["worker"]},
            "previous_status": null,
            "observers": []
        })
    );
}

#[test]
fn hand_over_timeout_names_silent_peers_and_duration() {
    let json = json!({
        "at_ms": 9, "kind": "SingletonHandOverTimedOut", "singleton": "Scheduler",
        "new_host": "a:1", "silent_peers": ["b:1", "c:1"], "duration_ms": 10000
    });
    let event: Event = serde_json::from_value(json).unwrap();
    let EventBody::SingletonHandOverTimedOut(timeout) = event.body else {
        panic!("wrong kind: {event:?}");
    };
    assert_eq!(timeout.silent_peers, ["b:1", "c:1"]);
    assert_eq!(timeout.duration_ms, 10_000);
    assert_eq!(timeout.role, None, "optional fields default when absent");
}

#[test]
fn report_batch_round_trips_with_pinned_field_names() {
    let batch = ReportBatch {
        version: PROTOCOL_VERSION,
        identity: AgentIdentity {
            cluster: "app".into(),
            node: "10.0.0.1:2552".into(),
            incarnation: 7,
            meta: AgentMeta {
                node: Some("k8s-node-1".into()),
            },
            cluster_identity: Some("ab".repeat(32)),
        },
        sequence: 3,
        sent_at_ms: 1_700_000_000_000,
        events: vec![Event {
            at_ms: 1_699_999_999_999,
            body: one_of_each().remove(26),
        }],
        depth_samples: vec![DepthTick {
            at_ms: 1_699_999_999_000,
            samples: vec![DepthSample {
                path: "/user/worker".into(),
                router: Some("/user/workers".into()),
                depth: 12,
            }],
        }],
        dropped: DroppedCounts {
            depth_samples: 4,
            ..DroppedCounts::default()
        },
    };
    let json = serde_json::to_value(&batch).unwrap();
    assert_eq!(
        json["identity"],
        json!({"cluster": "app", "node": "10.0.0.1:2552", "incarnation": "7", "meta": {"node": "k8s-node-1"},
            "cluster_identity": "ab".repeat(32)})
    );
    assert_eq!(json["sequence"], "3");
    assert_eq!(json["dropped"]["depth_samples"], "4");
    assert_eq!(json["depth_samples"][0]["samples"][0]["depth"], 12);
    assert_eq!(json["events"][0]["kind"], "DeadLetter");
    assert_eq!(serde_json::from_value::<ReportBatch>(json).unwrap(), batch);
}

#[test]
fn minimal_batch_defaults_lists_meta_and_dropped_counts() {
    let batch: ReportBatch = serde_json::from_str(
        r#"{"version":1,"identity":{"cluster":"c","node":"n:1","incarnation":1},"sequence":1,"sent_at_ms":0}"#,
    )
    .unwrap();
    assert!(batch.events.is_empty() && batch.depth_samples.is_empty());
    assert_eq!(batch.dropped.total(), 0);
    assert_eq!(batch.identity.meta.node, None);
    // Agents before the cluster identity send none: the cluster is keyed by its name alone.
    assert_eq!(batch.identity.cluster_identity, None);
    assert_eq!(batch.identity.cluster_key(), "c");
}

#[test]
fn unknown_kind_is_rejected_and_the_error_lists_known_kinds() {
    let err =
        serde_json::from_str::<Event>(r#"{"at_ms":1,"kind":"MemberTeleported"}"#).unwrap_err();
    assert!(err.to_string().contains("MemberTeleported"), "{err}");
    let err = "MemberTeleported".parse::<EventKind>().unwrap_err();
    assert!(err.to_string().contains("MemberUp"), "{err}");
}

#[test]
fn every_kind_has_a_category_and_subjects_name_what_the_event_is_about() {
    let bodies = one_of_each();
    assert_eq!(bodies[2].subject(), Some("10.0.0.1:2552"));
    assert_eq!(bodies[11].subject(), Some("Scheduler"));
    assert_eq!(bodies[25].subject(), Some("/user/workers"));
    assert_eq!(bodies[26].subject(), Some("/user/gone"));
    assert_eq!(bodies[27].subject(), None);
    for category in EventCategory::ALL {
        assert!(EventKind::ALL.iter().any(|k| k.category() == category));
    }
}

#[test]
fn ack_and_operations_have_pinned_field_names() {
    let ack = IngestAck {
        sequence: 3,
        duplicate: true,
        stored_events: 0,
        operations: vec![MemberOperation {
            id: 1,
            address: "a:1".into(),
            operation: OperationKind::Down,
        }],
    };
    assert_eq!(
        serde_json::to_value(&ack).unwrap(),
        json!({"sequence": "3", "duplicate": true, "stored_events": "0",
               "operations": [{"id": 1, "address": "a:1", "operation": "down"}]})
    );
}

#[test]
fn directory_host_evicted_has_pinned_field_names() {
    let event = Event {
        at_ms: 8,
        body: EventBody::DirectoryHostEvicted(HostEviction {
            host: "troupe://app@10.0.0.2:2552#7".into(),
            previous_status: Some("exiting".into()),
            actors: vec!["a".into()],
        }),
    };
    assert_eq!(
        serde_json::to_value(&event).unwrap(),
        json!({
            "at_ms": 8,
            "kind": "DirectoryHostEvicted",
            "host": "troupe://app@10.0.0.2:2552#7",
            "previous_status": "exiting",
            "actors": ["a"]
        })
    );
}

#[test]
fn u64_values_above_2_pow_53_travel_as_strings_and_numbers_are_still_read() {
    let incarnation = 15_365_700_884_095_386_388_u64;
    let numeric = format!(
        r#"{{"version":1,"identity":{{"cluster":"c","node":"n:1","incarnation":{incarnation}}},"sequence":1,"sent_at_ms":0,
        "events":[{{"at_ms":1,"kind":"MemberUp","member":{{"address":"n:1","uid":{incarnation},"status":"up"}}}},
                  {{"at_ms":2,"kind":"SingletonRestarted","singleton":"s","host":"n:1","backoff_ms":1000}}],
        "dropped":{{"dead_letters":3}}}}"#
    );
    let batch: ReportBatch = serde_json::from_str(&numeric).expect("the numeric form still parses");
    assert_eq!(batch.identity.incarnation, incarnation);
    assert_eq!(batch.dropped.dead_letters, 3);
    let json = serde_json::to_value(&batch).unwrap();
    assert_eq!(json["identity"]["incarnation"], incarnation.to_string());
    assert_eq!(json["events"][0]["member"]["uid"], incarnation.to_string());
    assert_eq!(json["events"][1]["backoff_ms"], "1000");
    assert_eq!(serde_json::from_value::<ReportBatch>(json).unwrap(), batch);
    let negative = numeric.replace(r#""sequence":1"#, r#""sequence":-1"#);
    let err = serde_json::from_str::<ReportBatch>(&negative).unwrap_err();
    assert!(err.to_string().contains("unsigned 64-bit integer"), "{err}");
}
