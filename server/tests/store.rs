//! The store suite: every test runs against PostgreSQL (a fresh database) and SQLite (a fresh
//! file) through the same code.

use troupe_protocol::{
    DroppedCounts, EventBody, HandOverTimedOut, LeaderChange, LeaseChange, MemberStatus,
    OperationKind, RouteesChange, RouterStarted, RoutingStrategy, SingletonInstance,
};
use troupe_server::store::{DeadLetterFilter, EventFilter, Store, Totals};
use troupe_server::testing::{BatchBuilder, TestDatabase, TestSqliteFile};

macro_rules! store_suite {
    ($($name:ident),* $(,)?) => {
        mod postgres {
            $(
                #[tokio::test]
                async fn $name() {
                    let db = troupe_server::testing::TestDatabase::create().await;
                    let store = db.store().await.expect("store");
                    super::$name(&store).await;
                    store.close().await;
                }
            )*
        }
        mod sqlite {
            $(
                #[tokio::test]
                async fn $name() {
                    let file = troupe_server::testing::TestSqliteFile::new();
                    let store = file.store().await.expect("store");
                    super::$name(&store).await;
                    store.close().await;
                }
            )*
        }
    };
}

store_suite!(
    retried_batch_is_stored_once,
    concurrent_sends_of_one_batch_store_it_once,
    a_new_incarnation_starts_its_own_sequence,
    members_show_the_latest_status_by_event_time_whatever_the_arrival_order,
    unreachable_member_lists_its_observers_until_reachable_again,
    leader_is_the_latest_reported,
    singleton_host_follows_started_and_stopped_instances_and_the_lease_holder,
    singleton_history_lists_hand_overs_with_silent_peers,
    router_keeps_its_strategy_and_latest_routees,
    events_page_newest_first_with_a_cursor_and_filters,
    dead_letters_filter_by_recipient_and_type_and_count_per_minute,
    dead_letters_group_by_recipient_and_reason_over_the_range_and_filters_biggest_first,
    dropped_counts_keep_the_largest_running_total,
    agent_health_is_the_latest_reported,
    retention_deletes_only_history_older_than_the_cutoff,
    member_operation_is_delivered_once_with_the_next_ack,
    member_operation_waits_for_a_ready_agent_never_a_starting_draining_or_fenced_one,
    depth_ticks_are_stored_one_row_per_tick,
    concurrent_batches_touching_the_same_members_in_opposite_orders_all_commit,
    history_is_ordered_by_event_time_not_arrival,
    per_minute_counts_add_up_across_batches_and_agents_and_ignore_retries,
    a_quick_restart_at_the_same_address_shows_the_new_incarnation_whatever_the_arrival_order,
    a_removed_incarnations_unreachability_goes_with_it,
    a_members_status_never_moves_back_in_its_lifecycle,
    an_agents_later_batch_wins_whatever_its_times_say_and_future_times_are_clamped,
    a_replayed_batch_of_an_older_incarnation_is_history_and_leaves_the_newer_ones_state,
);

async fn cluster_id(store: &Store, name: &str) -> i64 {
    store
        .cluster(name)
        .await
        .unwrap()
        .expect("cluster exists")
        .id
}

fn all_events() -> EventFilter {
    EventFilter {
        limit: 1000,
        ..EventFilter::default()
    }
}

async fn retried_batch_is_stored_once(store: &Store) {
    let batch = BatchBuilder::new("app", "a:1", 1)
        .member(10, EventBody::MemberUp, "a:1", MemberStatus::Up, &[])
        .dead_letter(11, "/user/x", "app::Ping")
        .depth_tick(12, &[("/user/w", None, 3)])
        .build();
    let first = store.ingest(&batch, 100).await.unwrap();
    assert!(!first.duplicate);
    assert_eq!(first.stored_events, 2);
    let after_first = store.totals().await.unwrap();
    let retry = store.ingest(&batch, 200).await.unwrap();
    assert!(retry.duplicate);
    assert_eq!(retry.stored_events, 0);
    assert_eq!(store.totals().await.unwrap(), after_first);
    assert_eq!(
        after_first,
        Totals {
            batches: 1,
            events: 1,
            dead_letters: 1,
            depth_ticks: 1
        }
    );
}

async fn concurrent_sends_of_one_batch_store_it_once(store: &Store) {
    let batch = BatchBuilder::new("app", "a:1", 7)
        .dead_letter(1, "/user/x", "T")
        .build();
    let (a, b) = tokio::join!(store.ingest(&batch, 1), store.ingest(&batch, 1));
    let (a, b) = (a.unwrap(), b.unwrap());
    assert!(
        a.duplicate != b.duplicate,
        "exactly one send stores: {a:?} {b:?}"
    );
    assert_eq!(store.totals().await.unwrap().dead_letters, 1);
}

async fn a_new_incarnation_starts_its_own_sequence(store: &Store) {
    let old = BatchBuilder::new("app", "a:1", 1).dead_letter(1, "/x", "T");
    let new = old.clone().incarnation(2);
    assert!(!store.ingest(&old.build(), 1).await.unwrap().duplicate);
    assert!(!store.ingest(&new.build(), 2).await.unwrap().duplicate);
    let agents = store.agents(cluster_id(store, "app").await).await.unwrap();
    assert_eq!(agents.len(), 2);
    assert_eq!(agents[0].incarnation, 2, "newest incarnation first");
}

async fn members_show_the_latest_status_by_event_time_whatever_the_arrival_order(store: &Store) {
    let later = BatchBuilder::new("app", "a:1", 2)
        .member(
            20,
            EventBody::MemberLeft,
            "b:1",
            MemberStatus::Leaving,
            &["w"],
        )
        .build();
    let earlier = BatchBuilder::new("app", "c:1", 1)
        .member(10, EventBody::MemberUp, "b:1", MemberStatus::Up, &["w"])
        .member(11, EventBody::MemberUp, "a:1", MemberStatus::Up, &[])
        .build();
    store.ingest(&later, 1).await.unwrap();
    store.ingest(&earlier, 2).await.unwrap();
    let members = store.members(cluster_id(store, "app").await).await.unwrap();
    let summary: Vec<_> = members
        .iter()
        .map(|m| (m.address.as_str(), m.status.as_str(), m.roles.as_str()))
        .collect();
    assert_eq!(
        summary,
        [("a:1", "up", "[]"), ("b:1", "leaving", r#"["w"]"#)]
    );
}

async fn unreachable_member_lists_its_observers_until_reachable_again(store: &Store) {
    let batch = BatchBuilder::new("app", "a:1", 1)
        .member(1, EventBody::MemberUp, "b:1", MemberStatus::Up, &[])
        .member(
            2,
            EventBody::MemberUnreachable,
            "b:1",
            MemberStatus::Up,
            &[],
        )
        .build();
    store.ingest(&batch, 1).await.unwrap();
    let cid = cluster_id(store, "app").await;
    let b = &store.members(cid).await.unwrap()[0];
    assert!(!b.reachable);
    assert_eq!(b.observers, r#"["a:1"]"#);
    assert_eq!(b.status, "up", "reachability does not change the status");
    let batch = BatchBuilder::new("app", "a:1", 2)
        .member(3, EventBody::MemberReachable, "b:1", MemberStatus::Up, &[])
        .build();
    store.ingest(&batch, 2).await.unwrap();
    let b = &store.members(cid).await.unwrap()[0];
    assert!(b.reachable);
    assert_eq!(b.observers, "[]");
}

async fn leader_is_the_latest_reported(store: &Store) {
    let leader = |at, who: &str| {
        BatchBuilder::new("app", "a:1", at as u64)
            .event(
                at,
                EventBody::LeaderChanged(LeaderChange {
                    leader: Some(who.to_owned()),
                }),
            )
            .build()
    };
    store.ingest(&leader(2, "b:1"), 1).await.unwrap();
    store.ingest(&leader(1, "a:1"), 1).await.unwrap();
    let cluster = store.cluster("app").await.unwrap().unwrap();
    assert_eq!(cluster.leader.as_deref(), Some("b:1"));
}

fn instance(host: &str) -> SingletonInstance {
    SingletonInstance {
        singleton: "Scheduler".into(),
        role: None,
        host: host.into(),
        backoff_ms: None,
        reason: None,
    }
}

async fn singleton_host_follows_started_and_stopped_instances_and_the_lease_holder(store: &Store) {
    let lease = |holder: Option<&str>| LeaseChange {
        singleton: "Scheduler".into(),
        role: None,
        lease: "app-scheduler".into(),
        holder: holder.map(Into::into),
        reason: None,
    };
    let batch = BatchBuilder::new("app", "a:1", 1)
        .event(1, EventBody::LeaseAcquired(lease(Some("a:1"))))
        .event(2, EventBody::SingletonStarted(instance("a:1")))
        .build();
    store.ingest(&batch, 1).await.unwrap();
    let cid = cluster_id(store, "app").await;
    let s = &store.singletons(cid).await.unwrap()[0];
    assert_eq!(
        (s.host.as_deref(), s.lease_holder.as_deref()),
        (Some("a:1"), Some("a:1"))
    );

    // b stops an instance that is not the one on record: the host stays.
    let batch = BatchBuilder::new("app", "b:1", 1)
        .event(3, EventBody::SingletonStopped(instance("b:1")))
        .build();
    store.ingest(&batch, 2).await.unwrap();
    assert_eq!(
        store.singletons(cid).await.unwrap()[0].host.as_deref(),
        Some("a:1")
    );

    let batch = BatchBuilder::new("app", "a:1", 2)
        .event(4, EventBody::SingletonStopped(instance("a:1")))
        .event(5, EventBody::LeaseReleased(lease(None)))
        .build();
    store.ingest(&batch, 3).await.unwrap();
    let s = &store.singletons(cid).await.unwrap()[0];
    assert_eq!((s.host.as_deref(), s.lease_holder.as_deref()), (None, None));
    assert_eq!(s.lease.as_deref(), Some("app-scheduler"));
}

async fn singleton_history_lists_hand_overs_with_silent_peers(store: &Store) {
    let batch = BatchBuilder::new("app", "a:1", 1)
        .event(
            1,
            EventBody::SingletonHandOverTimedOut(HandOverTimedOut {
                singleton: "Scheduler".into(),
                role: None,
                new_host: "a:1".into(),
                silent_peers: vec!["b:1".into()],
                duration_ms: 10_000,
            }),
        )
        .event(2, EventBody::SingletonStarted(instance("a:1")))
        .member(
            3,
            EventBody::MemberUp,
            "Scheduler-not-a-member",
            MemberStatus::Up,
            &[],
        )
        .build();
    store.ingest(&batch, 1).await.unwrap();
    let cid = cluster_id(store, "app").await;
    let history = store
        .events(
            cid,
            &EventFilter {
                subject: Some("Scheduler".into()),
                kinds: vec![
                    "SingletonHandOverTimedOut".into(),
                    "SingletonStarted".into(),
                ],
                ..all_events()
            },
        )
        .await
        .unwrap();
    let kinds: Vec<_> = history.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(kinds, ["SingletonStarted", "SingletonHandOverTimedOut"]);
    let detail: serde_json::Value = serde_json::from_str(&history[1].detail).unwrap();
    assert_eq!(detail["silent_peers"], serde_json::json!(["b:1"]));
    assert_eq!(
        detail["duration_ms"], "10000",
        "u64 values are stored as strings"
    );
}

async fn router_keeps_its_strategy_and_latest_routees(store: &Store) {
    let batch = BatchBuilder::new("app", "a:1", 1)
        .event(
            1,
            EventBody::RouterStarted(RouterStarted {
                router: "/user/workers".into(),
                strategy: RoutingStrategy::SmallestMailbox,
                role: Some("compute".into()),
                routee_path: "/user/worker".into(),
            }),
        )
        .event(
            2,
            EventBody::RouteesChanged(RouteesChange {
                router: "/user/workers".into(),
                strategy: RoutingStrategy::SmallestMailbox,
                routees: vec!["a".into(), "b".into()],
            }),
        )
        .build();
    store.ingest(&batch, 1).await.unwrap();
    let routers = store.routers(cluster_id(store, "app").await).await.unwrap();
    let r = &routers[0];
    assert_eq!(r.strategy, "smallest-mailbox");
    assert_eq!(
        r.role.as_deref(),
        Some("compute"),
        "a routee change keeps the role"
    );
    assert_eq!(r.routee_path.as_deref(), Some("/user/worker"));
    assert_eq!(r.routees, r#"["a","b"]"#);
}

async fn events_page_newest_first_with_a_cursor_and_filters(store: &Store) {
    let mut a = BatchBuilder::new("app", "a:1", 1);
    for at in 0..10 {
        a = a.member(at, EventBody::MemberUp, "x:1", MemberStatus::Up, &[]);
    }
    let b = BatchBuilder::new("app", "b:1", 1)
        .member(100, EventBody::MemberDown, "x:1", MemberStatus::Down, &[])
        .build();
    store.ingest(&a.build(), 1).await.unwrap();
    store.ingest(&b, 1).await.unwrap();
    let cid = cluster_id(store, "app").await;

    let page = |before, limit| EventFilter {
        before,
        limit,
        ..all_events()
    };
    let first = store.events(cid, &page(None, 4)).await.unwrap();
    assert_eq!(first.len(), 4);
    assert_eq!(first[0].kind, "MemberDown");
    let second = store
        .events(cid, &page(Some((first[3].at_ms, first[3].id)), 100))
        .await
        .unwrap();
    assert_eq!(second.len(), 7);
    assert!(second[0].at_ms < first[3].at_ms);
    let times: Vec<_> = second.iter().map(|e| e.at_ms).collect();
    assert_eq!(times, [6, 5, 4, 3, 2, 1, 0]);

    let by_node = EventFilter {
        node: Some("b:1".into()),
        ..all_events()
    };
    assert_eq!(store.events(cid, &by_node).await.unwrap().len(), 1);
    let by_kind = EventFilter {
        kinds: vec!["MemberUp".into()],
        ..all_events()
    };
    assert_eq!(store.events(cid, &by_kind).await.unwrap().len(), 10);
    let by_time = EventFilter {
        since_ms: Some(3),
        until_ms: Some(5),
        ..all_events()
    };
    let times: Vec<_> = store
        .events(cid, &by_time)
        .await
        .unwrap()
        .iter()
        .map(|e| e.at_ms)
        .collect();
    assert_eq!(times, [4, 3]);
}

async fn dead_letters_filter_by_recipient_and_type_and_count_per_minute(store: &Store) {
    let batch = BatchBuilder::new("app", "a:1", 1)
        .dead_letter(1_000, "/user/a", "A")
        .dead_letter(2_000, "/user/a", "B")
        .dead_letter(61_000, "/user/b", "A")
        .dead_letter(62_000, "/user/a", "A")
        .build();
    // Received after the events (a time ahead of the receive time would be clamped).
    store.ingest(&batch, 100_000).await.unwrap();
    let cid = cluster_id(store, "app").await;
    let filter = DeadLetterFilter {
        recipient: Some("/user/a".into()),
        message_type: Some("A".into()),
        limit: 100,
        ..DeadLetterFilter::default()
    };
    let rows = store.dead_letters(cid, &filter).await.unwrap();
    let times: Vec<_> = rows.iter().map(|d| d.at_ms).collect();
    assert_eq!(times, [62_000, 1_000]);
    assert_eq!(rows[0].node, "a:1");
    let counts = store
        .dead_letter_counts(
            cid,
            &DeadLetterFilter {
                limit: 100,
                ..DeadLetterFilter::default()
            },
        )
        .await
        .unwrap();
    let counts: Vec<_> = counts.iter().map(|c| (c.minute_ms, c.count)).collect();
    assert_eq!(counts, [(0, 2), (60_000, 2)]);
}

async fn dead_letters_group_by_recipient_and_reason_over_the_range_and_filters_biggest_first(
    store: &Store,
) {
    let stopped = "recipient stopped";
    let full = "mailbox full";
    let batch = BatchBuilder::new("app", "a:1", 1)
        .dead_letter_because(1_000, "/user/a", "A", stopped)
        .dead_letter_because(2_000, "/user/a", "B", stopped)
        .dead_letter_because(3_000, "/user/a", "A", full)
        .dead_letter_because(4_000, "/user/b", "A", stopped)
        .dead_letter_because(5_000, "/user/b", "A", stopped)
        .dead_letter_because(6_000, "/user/b", "B", stopped)
        .dead_letter_because(90_000, "/user/c", "A", full)
        .build();
    store.ingest(&batch, 100_000).await.unwrap();
    // A second agent's dead letters count into the same groups.
    let other = BatchBuilder::new("app", "b:1", 1)
        .dead_letter_because(7_000, "/user/a", "A", full)
        .build();
    store.ingest(&other, 100_000).await.unwrap();
    let cid = cluster_id(store, "app").await;
    let groups = |filter: DeadLetterFilter| async move {
        store
            .dead_letter_groups(cid, &filter)
            .await
            .unwrap()
            .into_iter()
            .map(|g| (g.recipient, g.reason, g.count, g.last_ms))
            .collect::<Vec<_>>()
    };
    let group = |recipient: &str, reason: &str, count, last_ms| {
        (recipient.to_owned(), reason.to_owned(), count, last_ms)
    };
    let first_minute = DeadLetterFilter {
        since_ms: Some(0),
        until_ms: Some(60_000),
        limit: 100,
        ..DeadLetterFilter::default()
    };
    assert_eq!(
        groups(first_minute.clone()).await,
        [
            group("/user/b", stopped, 3, 6_000),
            group("/user/a", full, 2, 7_000),
            group("/user/a", stopped, 2, 2_000),
        ],
        "the range leaves /user/c out; ties go by recipient, then reason"
    );
    assert_eq!(
        groups(DeadLetterFilter {
            message_type: Some("A".into()),
            ..first_minute.clone()
        })
        .await,
        [
            group("/user/a", full, 2, 7_000),
            group("/user/b", stopped, 2, 5_000),
            group("/user/a", stopped, 1, 1_000),
        ]
    );
    assert_eq!(
        groups(DeadLetterFilter {
            recipient: Some("/user/a".into()),
            limit: 1,
            ..first_minute
        })
        .await,
        [group("/user/a", full, 2, 7_000)],
        "the limit keeps the biggest"
    );
    assert_eq!(
        groups(DeadLetterFilter {
            limit: 100,
            ..DeadLetterFilter::default()
        })
        .await
        .len(),
        4,
        "no range: all of them"
    );
}

async fn dropped_counts_keep_the_largest_running_total(store: &Store) {
    let dropped = |n| DroppedCounts {
        depth_samples: n,
        dead_letters: n / 2,
        ..DroppedCounts::default()
    };
    let newer = BatchBuilder::new("app", "a:1", 2)
        .dropped(dropped(10))
        .build();
    let older = BatchBuilder::new("app", "a:1", 1)
        .dropped(dropped(4))
        .build();
    store.ingest(&newer, 1).await.unwrap();
    store.ingest(&older, 2).await.unwrap();
    let agent = &store.agents(cluster_id(store, "app").await).await.unwrap()[0];
    assert_eq!(
        (agent.dropped_depth_samples, agent.dropped_dead_letters),
        (10, 5)
    );
    assert_eq!(agent.last_sequence, 2);
    assert_eq!(agent.last_report_ms, 2);
}

async fn agent_health_is_the_latest_reported(store: &Store) {
    use troupe_protocol::{AgentHealth, HealthChange};
    let health = |h| {
        EventBody::AgentHealthChanged(HealthChange {
            health: h,
            reason: None,
        })
    };
    let batch = BatchBuilder::new("app", "a:1", 1)
        .event(1, health(AgentHealth::Starting))
        .event(2, health(AgentHealth::Ready))
        .event(3, health(AgentHealth::Draining))
        .build();
    store.ingest(&batch, 1).await.unwrap();
    let agent = &store.agents(cluster_id(store, "app").await).await.unwrap()[0];
    assert_eq!(agent.health.as_deref(), Some("draining"));
}

async fn retention_deletes_only_history_older_than_the_cutoff(store: &Store) {
    let batch = BatchBuilder::new("app", "a:1", 1)
        .member(1_000, EventBody::MemberUp, "a:1", MemberStatus::Up, &[])
        .member(5_000, EventBody::MemberUp, "b:1", MemberStatus::Up, &[])
        .dead_letter(1_000, "/x", "T")
        .dead_letter(5_000, "/x", "T")
        .depth_tick(1_000, &[("/x", None, 1)])
        .build();
    store.ingest(&batch, 10_000).await.unwrap();
    let deleted = store.delete_older_than(2_000, 1000).await.unwrap();
    assert_eq!(deleted, 3);
    let totals = store.totals().await.unwrap();
    assert_eq!(
        (totals.events, totals.dead_letters, totals.depth_ticks),
        (1, 1, 0)
    );
    assert_eq!(totals.batches, 1, "the batch was received after the cutoff");
    assert_eq!(
        store
            .members(cluster_id(store, "app").await)
            .await
            .unwrap()
            .len(),
        2,
        "current state is not history"
    );
}

async fn member_operation_is_delivered_once_with_the_next_ack(store: &Store) {
    store
        .ingest(&BatchBuilder::new("app", "a:1", 1).build(), 1)
        .await
        .unwrap();
    let cid = cluster_id(store, "app").await;
    let id = store
        .request_operation(cid, "b:1", OperationKind::Down, 2)
        .await
        .unwrap();
    let ack = store
        .ingest(&BatchBuilder::new("app", "a:1", 2).build(), 3)
        .await
        .unwrap();
    assert_eq!(ack.operations.len(), 1);
    assert_eq!(ack.operations[0].id, id);
    assert_eq!(ack.operations[0].operation, OperationKind::Down);
    let ack = store
        .ingest(&BatchBuilder::new("app", "a:1", 3).build(), 4)
        .await
        .unwrap();
    assert!(ack.operations.is_empty());
}

async fn member_operation_waits_for_a_ready_agent_never_a_starting_draining_or_fenced_one(
    store: &Store,
) {
    use troupe_protocol::{AgentHealth, HealthChange};
    let health = |h| {
        EventBody::AgentHealthChanged(HealthChange {
            health: h,
            reason: None,
        })
    };
    store
        .ingest(&BatchBuilder::new("app", "b:1", 1).build(), 1)
        .await
        .unwrap();
    let cid = cluster_id(store, "app").await;
    let id = store
        .request_operation(cid, "b:1", OperationKind::Down, 2)
        .await
        .unwrap();
    // The fenced agent's own last batch (it says fenced) takes nothing; neither does a
    // draining one.
    let fenced = BatchBuilder::new("app", "a:1", 1)
        .event(3, health(AgentHealth::Fenced))
        .build();
    assert!(
        store
            .ingest(&fenced, 3)
            .await
            .unwrap()
            .operations
            .is_empty()
    );
    let draining = BatchBuilder::new("app", "c:1", 1)
        .event(4, health(AgentHealth::Ready))
        .event(5, health(AgentHealth::Draining))
        .build();
    assert!(
        store
            .ingest(&draining, 5)
            .await
            .unwrap()
            .operations
            .is_empty()
    );
    let ready = BatchBuilder::new("app", "d:1", 1)
        .event(6, health(AgentHealth::Ready))
        .build();
    let ack = store.ingest(&ready, 6).await.unwrap();
    assert_eq!(ack.operations.len(), 1);
    assert_eq!(ack.operations[0].id, id);
}

async fn depth_ticks_are_stored_one_row_per_tick(store: &Store) {
    let batch = BatchBuilder::new("app", "a:1", 1)
        .depth_tick(
            1_000,
            &[
                ("/user/w1", Some("/user/r"), 3),
                ("/user/w2", Some("/user/r"), 5),
            ],
        )
        .depth_tick(2_000, &[("/user/w1", Some("/user/r"), 1)])
        .build();
    let outcome = store.ingest(&batch, 1).await.unwrap();
    assert_eq!(outcome.stored_depth_samples, 3);
    let ticks = store
        .depth_ticks(cluster_id(store, "app").await, 0, 10_000, 100)
        .await
        .unwrap();
    assert_eq!(ticks.len(), 2);
    assert_eq!(ticks[0].node, "a:1");
    assert!(ticks[0].samples.contains("/user/w2"));
}

#[tokio::test]
async fn postgres_batch_failing_midway_writes_nothing() {
    let db = TestDatabase::create().await;
    let store = db.store().await.unwrap();
    // PostgreSQL refuses NUL in text: the dead letter fails after the events went in.
    let batch = BatchBuilder::new("app", "a:1", 1)
        .member(1, EventBody::MemberUp, "a:1", MemberStatus::Up, &[])
        .dead_letter(2, "/user/\u{0}", "T")
        .build();
    assert!(store.ingest(&batch, 1).await.is_err());
    assert_eq!(store.totals().await.unwrap(), Totals::default());
    assert!(store.clusters().await.unwrap().is_empty());
    store.close().await;
}

#[tokio::test]
async fn sqlite_store_persists_across_reopen() {
    let file = TestSqliteFile::new();
    let store = file.store().await.unwrap();
    let batch = BatchBuilder::new("app", "a:1", 1)
        .dead_letter(1, "/x", "T")
        .build();
    store.ingest(&batch, 1).await.unwrap();
    store.close().await;
    let reopened = file.store().await.unwrap();
    assert!(reopened.ingest(&batch, 2).await.unwrap().duplicate);
    assert_eq!(reopened.totals().await.unwrap().dead_letters, 1);
    reopened.close().await;
}

async fn concurrent_batches_touching_the_same_members_in_opposite_orders_all_commit(store: &Store) {
    let addresses = ["m:1", "m:2", "m:3", "m:4"];
    let mut sends = Vec::new();
    for agent in 0..8u64 {
        let mut order = addresses.to_vec();
        if agent % 2 == 1 {
            order.reverse();
        }
        for sequence in 1..=5u64 {
            let mut batch = BatchBuilder::new("app", &format!("a:{agent}"), sequence);
            for (i, address) in order.iter().enumerate() {
                batch = batch.member(
                    i as i64,
                    EventBody::MemberUp,
                    address,
                    MemberStatus::Up,
                    &[],
                );
            }
            let store = store.clone();
            sends.push(tokio::spawn(async move {
                store.ingest(&batch.build(), 1).await
            }));
        }
    }
    for send in sends {
        assert!(
            !send
                .await
                .unwrap()
                .expect("no deadlock, no error")
                .duplicate
        );
    }
    assert_eq!(store.totals().await.unwrap().batches, 40);
}

async fn history_is_ordered_by_event_time_not_arrival(store: &Store) {
    let recent = BatchBuilder::new("app", "a:1", 1)
        .member(2_000, EventBody::MemberUp, "x:1", MemberStatus::Up, &[])
        .dead_letter(2_000, "/new", "T")
        .build();
    // Arrives later (a slow agent), happened earlier.
    let late = BatchBuilder::new("app", "b:1", 1)
        .member(
            1_000,
            EventBody::MemberJoined,
            "x:1",
            MemberStatus::Joining,
            &[],
        )
        .dead_letter(1_000, "/old", "T")
        .build();
    store.ingest(&recent, 1).await.unwrap();
    store.ingest(&late, 2).await.unwrap();
    let cid = cluster_id(store, "app").await;
    let kinds: Vec<_> = store
        .events(cid, &all_events())
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(kinds, ["MemberUp", "MemberJoined"]);
    let filter = DeadLetterFilter {
        limit: 10,
        ..DeadLetterFilter::default()
    };
    let recipients: Vec<_> = store
        .dead_letters(cid, &filter)
        .await
        .unwrap()
        .into_iter()
        .map(|d| d.recipient)
        .collect();
    assert_eq!(recipients, ["/new", "/old"]);
}

async fn per_minute_counts_add_up_across_batches_and_agents_and_ignore_retries(store: &Store) {
    let first = BatchBuilder::new("app", "a:1", 1)
        .dead_letter(1_000, "/user/a", "A")
        .dead_letter(2_000, "/user/a", "A")
        .build();
    let second = BatchBuilder::new("app", "a:1", 2)
        .dead_letter(3_000, "/user/a", "A")
        .dead_letter(61_000, "/user/a", "A")
        .build();
    let other_agent = BatchBuilder::new("app", "b:1", 1)
        .dead_letter(4_000, "/user/a", "A")
        .build();
    for batch in [&first, &second, &first, &other_agent, &second] {
        store.ingest(batch, 100_000).await.unwrap();
    }
    let counts = store
        .dead_letter_counts(
            cluster_id(store, "app").await,
            &DeadLetterFilter {
                since_ms: Some(30_000),
                ..DeadLetterFilter::default()
            },
        )
        .await
        .unwrap();
    let counts: Vec<_> = counts.iter().map(|c| (c.minute_ms, c.count)).collect();
    assert_eq!(
        counts,
        [(0, 4), (60_000, 1)],
        "the minute holding `since` counts whole"
    );
}

/// The old incarnation's removal and the new one's `MemberUp` in the same millisecond (the
/// 4-of-7 failure of issue 14), delivered in both orders and by different reporters: the
/// address shows the new incarnation up, and the old one's removal is kept on its own row.
async fn a_quick_restart_at_the_same_address_shows_the_new_incarnation_whatever_the_arrival_order(
    store: &Store,
) {
    for (cluster, removal_first) in [("first", true), ("second", false)] {
        let old_up = BatchBuilder::new(cluster, "a:1", 1)
            .member_incarnation(10, EventBody::MemberUp, "b:1", 1, MemberStatus::Up, &[])
            .build();
        let new_up = BatchBuilder::new(cluster, "a:1", 2)
            .member_incarnation(50, EventBody::MemberUp, "b:1", 2, MemberStatus::Up, &[])
            .build();
        let old_removed = BatchBuilder::new(cluster, "c:1", 1)
            .member_incarnation(
                50,
                EventBody::MemberRemoved,
                "b:1",
                1,
                MemberStatus::Removed,
                &[],
            )
            .build();
        store.ingest(&old_up, 1).await.unwrap();
        if removal_first {
            store.ingest(&old_removed, 2).await.unwrap();
            store.ingest(&new_up, 2).await.unwrap();
        } else {
            store.ingest(&new_up, 2).await.unwrap();
            store.ingest(&old_removed, 2).await.unwrap();
        }
        let cid = cluster_id(store, cluster).await;
        let members = store.members(cid).await.unwrap();
        let summary: Vec<_> = members
            .iter()
            .map(|m| (m.address.as_str(), m.uid, m.status.as_str()))
            .collect();
        assert_eq!(
            summary,
            [("b:1", 2, "up")],
            "removal first: {removal_first}"
        );
        let all = store.member_incarnations(cid).await.unwrap();
        let summary: Vec<_> = all.iter().map(|m| (m.uid, m.status.as_str())).collect();
        assert_eq!(summary, [(1, "removed"), (2, "up")]);
    }
}

/// Issue 14's stale unreachable: the old incarnation was unreachable when it was killed; its
/// `MemberReachable` never comes. The new incarnation is reachable, and an unreachable report
/// about the old one arriving late does not touch it.
async fn a_removed_incarnations_unreachability_goes_with_it(store: &Store) {
    let old = BatchBuilder::new("app", "a:1", 1)
        .member_incarnation(1, EventBody::MemberUp, "b:1", 1, MemberStatus::Up, &[])
        .member_incarnation(
            2,
            EventBody::MemberUnreachable,
            "b:1",
            1,
            MemberStatus::Up,
            &[],
        )
        .build();
    store.ingest(&old, 1).await.unwrap();
    let new = BatchBuilder::new("app", "a:1", 2)
        .member_incarnation(
            3,
            EventBody::MemberRemoved,
            "b:1",
            1,
            MemberStatus::Removed,
            &[],
        )
        .member_incarnation(4, EventBody::MemberUp, "b:1", 2, MemberStatus::Up, &[])
        .build();
    store.ingest(&new, 2).await.unwrap();
    let late = BatchBuilder::new("app", "c:1", 1)
        .member_incarnation(
            5,
            EventBody::MemberUnreachable,
            "b:1",
            1,
            MemberStatus::Up,
            &[],
        )
        .build();
    store.ingest(&late, 3).await.unwrap();
    let cid = cluster_id(store, "app").await;
    let members = store.members(cid).await.unwrap();
    assert_eq!(members.len(), 1);
    assert_eq!((members[0].uid, members[0].status.as_str()), (2, "up"));
    assert!(members[0].reachable, "{members:?}");
    assert_eq!(members[0].observers, "[]");
}

/// Statuses merge the way gossip merges them: a late or clock-skewed report of an earlier
/// status never undoes a later one; the same status reported again keeps the earliest time.
async fn a_members_status_never_moves_back_in_its_lifecycle(store: &Store) {
    let removed = BatchBuilder::new("app", "a:1", 1)
        .member(
            10,
            EventBody::MemberRemoved,
            "b:1",
            MemberStatus::Removed,
            &[],
        )
        .member(30, EventBody::MemberUp, "c:1", MemberStatus::Up, &[])
        .build();
    // Another reporter whose clock is ahead says b:1 was up after it was removed, and saw
    // c:1 come up later than the first reporter did.
    let skewed = BatchBuilder::new("app", "d:1", 1)
        .member(20, EventBody::MemberUp, "b:1", MemberStatus::Up, &[])
        .member(40, EventBody::MemberUp, "c:1", MemberStatus::Up, &[])
        .build();
    store.ingest(&removed, 1).await.unwrap();
    store.ingest(&skewed, 2).await.unwrap();
    let cid = cluster_id(store, "app").await;
    let members = store.members(cid).await.unwrap();
    let summary: Vec<_> = members
        .iter()
        .map(|m| (m.address.as_str(), m.status.as_str(), m.status_ms))
        .collect();
    assert_eq!(summary, [("b:1", "removed", 10), ("c:1", "up", 30)]);
}

/// Issue 14, item 8: one agent's reports are ordered by its batch sequence, another agent's by
/// time; a time beyond the receive time plus the allowed skew is stored as the receive time.
async fn an_agents_later_batch_wins_whatever_its_times_say_and_future_times_are_clamped(
    store: &Store,
) {
    use troupe_protocol::{AgentHealth, HealthChange};
    let leader = |who: &str| {
        EventBody::LeaderChanged(LeaderChange {
            leader: Some(who.to_owned()),
        })
    };
    let health = |health| {
        EventBody::AgentHealthChanged(HealthChange {
            health,
            reason: None,
        })
    };
    let first = BatchBuilder::new("app", "a:1", 1)
        .event(100, leader("x:1"))
        .event(100, health(AgentHealth::Ready))
        .build();
    let second = BatchBuilder::new("app", "a:1", 2)
        .event(90, leader("y:1"))
        .event(90, health(AgentHealth::Draining))
        .build();
    let other_older = BatchBuilder::new("app", "b:1", 1)
        .event(80, leader("z:1"))
        .build();
    store.ingest(&first, 50).await.unwrap();
    store.ingest(&second, 60).await.unwrap();
    store.ingest(&other_older, 70).await.unwrap();
    let cid = cluster_id(store, "app").await;
    let cluster = store.cluster("app").await.unwrap().unwrap();
    assert_eq!(cluster.leader.as_deref(), Some("y:1"));
    let agents = store.agents(cid).await.unwrap();
    let a = agents.iter().find(|a| a.node == "a:1").unwrap();
    assert_eq!(a.health.as_deref(), Some("draining"));

    let ten_years = 3_652 * 86_400_000;
    let future = BatchBuilder::new("app", "c:1", 1)
        .sent_at(1_000 + ten_years)
        .event(1_000 + ten_years, leader("c:1"))
        .build();
    store.ingest(&future, 1_000).await.unwrap();
    let correct = BatchBuilder::new("app", "b:1", 2)
        .event(1_010, leader("b:1"))
        .build();
    store.ingest(&correct, 1_020).await.unwrap();
    let cluster = store.cluster("app").await.unwrap().unwrap();
    assert_eq!(
        cluster.leader.as_deref(),
        Some("b:1"),
        "a correct report after one from the future"
    );
    let events = store
        .events(
            cid,
            &EventFilter {
                node: Some("c:1".into()),
                ..all_events()
            },
        )
        .await
        .unwrap();
    assert_eq!(events[0].at_ms, 1_000, "stored at the receive time");
    let agents = store.agents(cid).await.unwrap();
    let c = agents.iter().find(|a| a.node == "c:1").unwrap();
    assert_eq!(c.clock_skew_ms, ten_years, "the skew is recorded");
}

/// Issue 14's reports lost on stop: an agent stopped while the server was away spools its last
/// batch (draining, its own leave and removal, its singleton stopping, a leader change) and
/// the next start of the node replays it with the old incarnation and sequence, possibly
/// after the new incarnation reported. The replay is stored as the old incarnation's history
/// and closes what it left open; it never changes the newer incarnation's current state (its
/// health, its member row, the singleton it hosts now, the leader it reported), in either
/// arrival order; a second replay is a duplicate.
async fn a_replayed_batch_of_an_older_incarnation_is_history_and_leaves_the_newer_ones_state(
    store: &Store,
) {
    use troupe_protocol::{AgentHealth, HealthChange};
    let health = |h| {
        EventBody::AgentHealthChanged(HealthChange {
            health: h,
            reason: None,
        })
    };
    let leader = |l: &str| {
        EventBody::LeaderChanged(LeaderChange {
            leader: Some(l.into()),
        })
    };
    for (cluster, replay_first) in [("replay-first", true), ("replay-last", false)] {
        let old_running = BatchBuilder::new(cluster, "a:1", 1)
            .incarnation(1)
            .event(1, health(AgentHealth::Ready))
            .member_incarnation(2, EventBody::MemberUp, "a:1", 1, MemberStatus::Up, &[])
            .event(3, EventBody::SingletonStarted(instance("a:1")))
            .event(4, leader("a:1"))
            .build();
        let old_spooled = BatchBuilder::new(cluster, "a:1", 2)
            .incarnation(1)
            .event(50, health(AgentHealth::Draining))
            .member_incarnation(
                51,
                EventBody::MemberLeft,
                "a:1",
                1,
                MemberStatus::Leaving,
                &[],
            )
            .event(52, EventBody::SingletonStopped(instance("a:1")))
            .event(53, leader("b:1"))
            .member_incarnation(
                54,
                EventBody::MemberRemoved,
                "a:1",
                1,
                MemberStatus::Removed,
                &[],
            )
            .build();
        let new_running = BatchBuilder::new(cluster, "a:1", 1)
            .incarnation(2)
            .event(100, health(AgentHealth::Ready))
            .member_incarnation(101, EventBody::MemberUp, "a:1", 2, MemberStatus::Up, &[])
            .event(102, EventBody::SingletonStarted(instance("a:1")))
            .event(103, leader("a:1"))
            .build();
        store.ingest(&old_running, 10).await.unwrap();
        if replay_first {
            store.ingest(&old_spooled, 200).await.unwrap();
            store.ingest(&new_running, 201).await.unwrap();
        } else {
            store.ingest(&new_running, 200).await.unwrap();
            store.ingest(&old_spooled, 201).await.unwrap();
        }
        let again = store.ingest(&old_spooled, 202).await.unwrap();
        assert!(again.duplicate, "{cluster}: a second replay is a duplicate");
        let cid = cluster_id(store, cluster).await;

        let agents = store.agents(cid).await.unwrap();
        let health_of = |incarnation| {
            agents
                .iter()
                .find(|a| a.incarnation == incarnation)
                .and_then(|a| a.health.clone())
        };
        assert_eq!(
            health_of(1).as_deref(),
            Some("draining"),
            "{cluster}: the old one is no longer ready"
        );
        assert_eq!(health_of(2).as_deref(), Some("ready"), "{cluster}");

        let members = store.members(cid).await.unwrap();
        let current: Vec<_> = members
            .iter()
            .map(|m| (m.address.as_str(), m.uid, m.status.as_str()))
            .collect();
        assert_eq!(current, [("a:1", 2, "up")], "{cluster}");
        let all = store.member_incarnations(cid).await.unwrap();
        let all: Vec<_> = all.iter().map(|m| (m.uid, m.status.as_str())).collect();
        assert_eq!(all, [(1, "removed"), (2, "up")], "{cluster}");

        let singleton = &store.singletons(cid).await.unwrap()[0];
        assert_eq!(
            singleton.host.as_deref(),
            Some("a:1"),
            "{cluster}: the new incarnation's instance stays open"
        );
        let cluster_row = store.cluster(cluster).await.unwrap().unwrap();
        assert_eq!(cluster_row.leader.as_deref(), Some("a:1"), "{cluster}");

        // The replay is history: the old incarnation's stop is there, under its incarnation.
        let events = store.events(cid, &all_events()).await.unwrap();
        assert!(
            events
                .iter()
                .any(|e| e.kind == "SingletonStopped" && e.incarnation == 1 && e.at_ms == 52),
            "{cluster}: {events:?}"
        );
    }
}
