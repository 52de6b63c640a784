//! The HTTP API in-process (actix test service): ingest refusals, idempotency, the
//! management endpoints and member operations. Every test runs on PostgreSQL and SQLite.

use actix_web::http::StatusCode;
use actix_web::test::{TestRequest, call_service, init_service, read_body};
use serde_json::{Value, json};
use troupe_protocol::{
    AgentHealth, DroppedCounts, EventBody, HandOverTimedOut, HealthChange, LeaderChange,
    MemberStatus, RouteesChange, RoutingStrategy, SingletonInstance,
};
use troupe_server::store::Store;
use troupe_server::testing::BatchBuilder;
use troupe_server::{AppState, Config};

const INGEST: &str = "ingest-secret";
const ADMIN: &str = "admin-secret";

troupe_server::on_every_store!(
    ingest_without_a_token_or_with_a_wrong_one_gets_401_and_writes_nothing,
    malformed_json_gets_400_saying_what_was_wrong_and_writes_nothing,
    unknown_event_kind_gets_400_naming_it_and_writes_nothing,
    unsupported_protocol_version_gets_400,
    oversized_body_gets_413_and_writes_nothing,
    retried_batch_is_acknowledged_twice_and_stored_once,
    every_mutating_route_refuses_a_missing_or_wrong_token,
    member_operations_are_refused_unless_enabled,
    member_operation_is_relayed_to_an_agent_in_its_next_ack,
    members_show_status_roles_reachability_leader_health_and_drops,
    events_page_with_cursor_and_reject_unknown_kinds,
    dead_letters_filter_and_count_per_minute,
    dead_letters_group_by_recipient_and_reason_and_say_when_there_are_more,
    singleton_shows_host_lease_and_hand_over_history,
    routers_show_routees_and_a_bucketed_depth_series,
    unknown_cluster_is_404,
    a_reporter_clock_ten_years_ahead_never_freezes_the_current_state,
);

fn config(adjust: impl FnOnce(&mut Config)) -> Config {
    let mut config = Config::defaults();
    config.ingest_token = Some(INGEST.to_owned());
    config.admin_token = Some(ADMIN.to_owned());
    adjust(&mut config);
    config
}

fn state(store: Store, adjust: impl FnOnce(&mut Config)) -> AppState {
    AppState::new(config(adjust), store).0
}

macro_rules! service {
    ($state:expr) => {
        init_service(actix_web::App::new().configure(troupe_server::api::configure($state))).await
    };
}

fn ingest_request(body: impl Into<Vec<u8>>, token: Option<&str>) -> actix_http::Request {
    let mut req = TestRequest::post()
        .uri("/api/v1/ingest")
        .insert_header(("content-type", "application/json"))
        .set_payload(body.into());
    if let Some(token) = token {
        req = req.insert_header(("authorization", format!("Bearer {token}")));
    }
    req.to_request()
}

fn json_of(batch: &troupe_protocol::ReportBatch) -> Vec<u8> {
    serde_json::to_vec(batch).unwrap()
}

async fn body_json(resp: actix_web::dev::ServiceResponse) -> Value {
    let bytes = read_body(resp).await;
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{e}: {bytes:?}"))
}

async fn assert_nothing_written(store: &Store) {
    let totals = store.totals().await.unwrap();
    assert_eq!(
        totals,
        Default::default(),
        "nothing of a rejected batch is stored"
    );
    assert!(store.clusters().await.unwrap().is_empty());
}

fn sample_batch(sequence: u64) -> troupe_protocol::ReportBatch {
    BatchBuilder::new("app", "a:1", sequence)
        .member(1, EventBody::MemberUp, "a:1", MemberStatus::Up, &["w"])
        .dead_letter(2, "/user/x", "app::Ping")
        .depth_tick(3, &[("/user/w", Some("/user/r"), 4)])
        .build()
}

async fn ingest_without_a_token_or_with_a_wrong_one_gets_401_and_writes_nothing(store: Store) {
    let app = service!(state(store.clone(), |_| {}));
    for token in [None, Some("wrong"), Some(ADMIN)] {
        let resp = call_service(&app, ingest_request(json_of(&sample_batch(1)), token)).await;
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED, "token {token:?}");
        assert_eq!(resp.headers().get("www-authenticate").unwrap(), "Bearer");
    }
    assert_nothing_written(&store).await;
}

async fn malformed_json_gets_400_saying_what_was_wrong_and_writes_nothing(store: Store) {
    let app = service!(state(store.clone(), |_| {}));
    let mut truncated = json_of(&sample_batch(1));
    truncated.truncate(truncated.len() - 10);
    let missing_field =
        br#"{"version":1,"identity":{"cluster":"app","node":"a:1"},"sequence":1,"sent_at_ms":0}"#;
    let cases: [(&[u8], &str); 4] = [
        (&truncated, "EOF while parsing"),
        (missing_field, "missing field `incarnation`"),
        (b"", "empty body"),
        (br#"{"version":1,"identity":{"cluster":"","node":"a:1","incarnation":1},"sequence":1,"sent_at_ms":0}"#, "must not be empty"),
    ];
    for (body, expected) in cases {
        let resp = call_service(&app, ingest_request(body.to_vec(), Some(INGEST))).await;
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
        let error = body_json(resp).await;
        let message = error["error"].as_str().unwrap();
        assert!(
            message.contains(expected),
            "{message:?} should mention {expected:?}"
        );
        assert_eq!(error["status"], 400);
    }
    assert_nothing_written(&store).await;
}

async fn unknown_event_kind_gets_400_naming_it_and_writes_nothing(store: Store) {
    let app = service!(state(store.clone(), |_| {}));
    let mut batch: Value = serde_json::from_slice(&json_of(&sample_batch(1))).unwrap();
    batch["events"]
        .as_array_mut()
        .unwrap()
        .push(json!({"at_ms": 5, "kind": "MemberTeleported"}));
    let resp = call_service(&app, ingest_request(batch.to_string(), Some(INGEST))).await;
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    let message = body_json(resp).await["error"].as_str().unwrap().to_owned();
    assert!(message.contains("MemberTeleported"), "{message}");
    assert_nothing_written(&store).await;
}

async fn unsupported_protocol_version_gets_400(store: Store) {
    let app = service!(state(store.clone(), |_| {}));
    let mut batch = sample_batch(1);
    batch.version = 99;
    let resp = call_service(&app, ingest_request(json_of(&batch), Some(INGEST))).await;
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    let message = body_json(resp).await["error"].as_str().unwrap().to_owned();
    assert!(
        message.contains("unsupported protocol version 99"),
        "{message}"
    );
    assert_nothing_written(&store).await;
}

async fn oversized_body_gets_413_and_writes_nothing(store: Store) {
    let app = service!(state(store.clone(), |c| c.max_body_bytes = 200));
    let mut big = BatchBuilder::new("app", "a:1", 1);
    for at in 0..20 {
        big = big.dead_letter(at, "/user/some/long/recipient/path", "app::SomeMessage");
    }
    let resp = call_service(&app, ingest_request(json_of(&big.build()), Some(INGEST))).await;
    assert_eq!(resp.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let message = body_json(resp).await["error"].as_str().unwrap().to_owned();
    assert!(message.contains("the limit is 200 bytes"), "{message}");
    assert_nothing_written(&store).await;
}

async fn retried_batch_is_acknowledged_twice_and_stored_once(store: Store) {
    let app = service!(state(store.clone(), |_| {}));
    let body = json_of(&sample_batch(1));
    let first =
        body_json(call_service(&app, ingest_request(body.clone(), Some(INGEST))).await).await;
    assert_eq!(
        first,
        json!({"sequence": "1", "duplicate": false, "stored_events": "2", "operations": []})
    );
    let retry = body_json(call_service(&app, ingest_request(body, Some(INGEST))).await).await;
    assert_eq!(
        retry,
        json!({"sequence": "1", "duplicate": true, "stored_events": "0", "operations": []})
    );
    let totals = store.totals().await.unwrap();
    assert_eq!(
        (
            totals.batches,
            totals.events,
            totals.dead_letters,
            totals.depth_ticks
        ),
        (1, 1, 1, 1)
    );
    let metrics = String::from_utf8(
        read_body(call_service(&app, TestRequest::get().uri("/metrics").to_request()).await)
            .await
            .to_vec(),
    )
    .unwrap();
    assert!(
        metrics.contains("troupe_ingest_duplicates_dropped_total 1"),
        "{metrics}"
    );
    assert!(metrics.contains(r#"troupe_ingest_batches_total{outcome="stored"} 1"#));
    assert!(metrics.contains(r#"troupe_ingest_items_total{kind="dead_letter"} 1"#));
    assert!(metrics.contains(r#"troupe_agent_lag_seconds{cluster="app",node="a:1"}"#));
    assert!(metrics.contains("troupe_build_info"));
}

async fn every_mutating_route_refuses_a_missing_or_wrong_token(store: Store) {
    let app = service!(state(store.clone(), |c| c.enable_member_operations = true));
    call_service(
        &app,
        ingest_request(json_of(&sample_batch(1)), Some(INGEST)),
    )
    .await;
    let before = store.totals().await.unwrap();
    let member = "/api/v1/clusters/app/members/a:1";
    for token in [None, Some("wrong"), Some(INGEST)] {
        let with_token = |req: TestRequest| match token {
            Some(t) => req.insert_header(("authorization", format!("Bearer {t}"))),
            None => req,
        };
        let requests = [
            with_token(
                TestRequest::put()
                    .uri(member)
                    .set_form([("operation", "Down")]),
            ),
            with_token(TestRequest::delete().uri(member)),
        ];
        for req in requests {
            let resp = call_service(&app, req.to_request()).await;
            assert_eq!(resp.status(), StatusCode::UNAUTHORIZED, "token {token:?}");
        }
    }
    for token in [None, Some("wrong"), Some(ADMIN)] {
        let resp = call_service(&app, ingest_request(json_of(&sample_batch(2)), token)).await;
        assert_eq!(
            resp.status(),
            StatusCode::UNAUTHORIZED,
            "ingest with {token:?}"
        );
    }
    assert_eq!(store.totals().await.unwrap(), before);
    let ack = store
        .ingest(&BatchBuilder::new("app", "a:1", 9).build(), 1)
        .await
        .unwrap();
    assert!(ack.operations.is_empty(), "no operation was queued");
}

async fn member_operations_are_refused_unless_enabled(store: Store) {
    let app = service!(state(store.clone(), |_| {}));
    call_service(
        &app,
        ingest_request(json_of(&sample_batch(1)), Some(INGEST)),
    )
    .await;
    let resp = call_service(
        &app,
        TestRequest::put()
            .uri("/api/v1/clusters/app/members/a:1")
            .insert_header(("authorization", format!("Bearer {ADMIN}")))
            .set_form([("operation", "Leave")])
            .to_request(),
    )
    .await;
    assert_eq!(resp.status(), StatusCode::FORBIDDEN);
    let message = body_json(resp).await["error"].as_str().unwrap().to_owned();
    assert!(message.contains("--enable-member-operations"), "{message}");
}

async fn member_operation_is_relayed_to_an_agent_in_its_next_ack(store: Store) {
    let app = service!(state(store.clone(), |c| c.enable_member_operations = true));
    call_service(
        &app,
        ingest_request(json_of(&sample_batch(1)), Some(INGEST)),
    )
    .await;
    let admin = ("authorization", format!("Bearer {ADMIN}"));
    let bad = call_service(
        &app,
        TestRequest::put()
            .uri("/api/v1/clusters/app/members/a:1")
            .insert_header(admin.clone())
            .set_form([("operation", "Explode")])
            .to_request(),
    )
    .await;
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    let unknown = call_service(
        &app,
        TestRequest::delete()
            .uri("/api/v1/clusters/app/members/nobody:1")
            .insert_header(admin.clone())
            .to_request(),
    )
    .await;
    assert_eq!(unknown.status(), StatusCode::NOT_FOUND);
    let accepted = call_service(
        &app,
        TestRequest::put()
            .uri("/api/v1/clusters/app/members/a:1")
            .insert_header(admin)
            .set_form([("operation", "Down")])
            .to_request(),
    )
    .await;
    assert_eq!(accepted.status(), StatusCode::ACCEPTED);
    let id = body_json(accepted).await["id"].as_i64().unwrap();
    let ack = body_json(
        call_service(
            &app,
            ingest_request(
                json_of(&BatchBuilder::new("app", "b:1", 1).build()),
                Some(INGEST),
            ),
        )
        .await,
    )
    .await;
    assert_eq!(
        ack["operations"],
        json!([{"id": id, "address": "a:1", "operation": "down"}])
    );
}

async fn members_show_status_roles_reachability_leader_health_and_drops(store: Store) {
    let app = service!(state(store.clone(), |_| {}));
    let batch = BatchBuilder::new("app", "a:1", 1)
        .member(1, EventBody::MemberUp, "a:1", MemberStatus::Up, &["front"])
        .member(2, EventBody::MemberUp, "b:1", MemberStatus::Up, &[])
        .member(
            3,
            EventBody::MemberUnreachable,
            "b:1",
            MemberStatus::Up,
            &[],
        )
        .event(
            4,
            EventBody::LeaderChanged(LeaderChange {
                leader: Some("a:1".into()),
            }),
        )
        .event(
            5,
            EventBody::AgentHealthChanged(HealthChange {
                health: AgentHealth::Ready,
                reason: None,
            }),
        )
        .dropped(DroppedCounts {
            depth_samples: 7,
            ..Default::default()
        })
        .build();
    call_service(&app, ingest_request(json_of(&batch), Some(INGEST))).await;
    let members = body_json(
        call_service(
            &app,
            TestRequest::get()
                .uri("/api/v1/clusters/app/members")
                .to_request(),
        )
        .await,
    )
    .await;
    assert_eq!(members["leader"], "a:1");
    assert_eq!(
        members["unreachable"],
        json!([{"node": "b:1", "observed_by": ["a:1"]}])
    );
    let a = &members["members"][0];
    assert_eq!(
        (
            a["node"].as_str(),
            a["status"].as_str(),
            a["leader"].as_bool()
        ),
        (Some("a:1"), Some("up"), Some(true))
    );
    assert_eq!(a["roles"], json!(["front"]));
    assert_eq!(a["agent"]["health"], "ready");
    assert_eq!(a["agent"]["dropped"]["depth_samples"], 7);
    assert!(a["agent"]["last_report"].is_string());
    assert_eq!(members["members"][1]["reachable"], false);
    assert_eq!(
        members["members"][1]["agent"],
        Value::Null,
        "b does not report"
    );
    let one = call_service(
        &app,
        TestRequest::get()
            .uri("/api/v1/clusters/app/members/b:1")
            .to_request(),
    )
    .await;
    assert_eq!(one.status(), StatusCode::OK);
    let none = call_service(
        &app,
        TestRequest::get()
            .uri("/api/v1/clusters/app/members/c:1")
            .to_request(),
    )
    .await;
    assert_eq!(none.status(), StatusCode::NOT_FOUND);
    let nodes = body_json(
        call_service(
            &app,
            TestRequest::get()
                .uri("/api/v1/clusters/app/nodes")
                .to_request(),
        )
        .await,
    )
    .await;
    assert_eq!(nodes[0]["node"], "a:1");
}

async fn events_page_with_cursor_and_reject_unknown_kinds(store: Store) {
    let app = service!(state(store.clone(), |_| {}));
    let mut batch = BatchBuilder::new("app", "a:1", 1);
    for at in 0..5 {
        batch = batch.member(at, EventBody::MemberUp, "a:1", MemberStatus::Up, &[]);
    }
    batch = batch.member(10, EventBody::MemberLeft, "a:1", MemberStatus::Leaving, &[]);
    call_service(&app, ingest_request(json_of(&batch.build()), Some(INGEST))).await;
    let page = body_json(
        call_service(
            &app,
            TestRequest::get()
                .uri("/api/v1/clusters/app/events?limit=4")
                .to_request(),
        )
        .await,
    )
    .await;
    assert_eq!(page["events"].as_array().unwrap().len(), 4);
    assert_eq!(page["events"][0]["kind"], "MemberLeft");
    assert_eq!(page["events"][0]["category"], "membership");
    assert_eq!(page["events"][0]["detail"]["member"]["status"], "leaving");
    let cursor = page["next_cursor"].as_str().unwrap();
    let rest = body_json(
        call_service(
            &app,
            TestRequest::get()
                .uri(&format!(
                    "/api/v1/clusters/app/events?limit=4&cursor={cursor}"
                ))
                .to_request(),
        )
        .await,
    )
    .await;
    assert_eq!(rest["events"].as_array().unwrap().len(), 2);
    assert_eq!(rest["next_cursor"], Value::Null);
    let filtered = body_json(call_service(&app, TestRequest::get().uri("/api/v1/clusters/app/events?kind=MemberLeft&kind=LeaderChanged&since=1970-01-01T00:00:00.005Z").to_request()).await).await;
    assert_eq!(filtered["events"].as_array().unwrap().len(), 1);
    let bad = call_service(
        &app,
        TestRequest::get()
            .uri("/api/v1/clusters/app/events?kind=Nope")
            .to_request(),
    )
    .await;
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    let message = body_json(bad).await["error"].as_str().unwrap().to_owned();
    assert!(
        message.contains("unknown event kind `Nope`") && message.contains("MemberUp"),
        "{message}"
    );
    let bad_time = call_service(
        &app,
        TestRequest::get()
            .uri("/api/v1/clusters/app/events?since=yesterday")
            .to_request(),
    )
    .await;
    assert_eq!(bad_time.status(), StatusCode::BAD_REQUEST);
}

async fn dead_letters_filter_and_count_per_minute(store: Store) {
    let app = service!(state(store.clone(), |_| {}));
    let batch = BatchBuilder::new("app", "a:1", 1)
        .dead_letter(1_000, "/user/a", "A")
        .dead_letter(2_000, "/user/b", "A")
        .dead_letter(70_000, "/user/a", "B")
        .build();
    call_service(&app, ingest_request(json_of(&batch), Some(INGEST))).await;
    let page = body_json(
        call_service(
            &app,
            TestRequest::get()
                .uri("/api/v1/clusters/app/dead-letters?recipient=/user/a")
                .to_request(),
        )
        .await,
    )
    .await;
    let types: Vec<_> = page["dead_letters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["message_type"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(types, ["B", "A"]);
    assert_eq!(page["dead_letters"][0]["sender"], "/user/sender");
    let counts = body_json(call_service(&app, TestRequest::get().uri("/api/v1/clusters/app/dead-letters/per-minute?since=0&until=120000&message_type=A").to_request()).await).await;
    assert_eq!(
        counts,
        json!({"minutes": [{"minute": "1970-01-01T00:00:00Z", "count": 2}], "total": 2})
    );
}

async fn dead_letters_group_by_recipient_and_reason_and_say_when_there_are_more(store: Store) {
    let app = service!(state(store.clone(), |_| {}));
    let batch = BatchBuilder::new("app", "a:1", 1)
        .dead_letter_because(1_000, "/user/a", "A", "recipient stopped")
        .dead_letter_because(2_000, "/user/a", "B", "recipient stopped")
        .dead_letter_because(3_000, "/user/b", "A", "mailbox full")
        .dead_letter_because(70_000, "/user/a", "A", "recipient stopped")
        .build();
    call_service(&app, ingest_request(json_of(&batch), Some(INGEST))).await;
    let groups = get_json(
        &app,
        "/api/v1/clusters/app/dead-letters/groups?since=0&until=60000",
    )
    .await;
    assert_eq!(
        groups,
        json!({"groups": [
            {"recipient": "/user/a", "reason": "recipient stopped", "count": 2, "last_at": "1970-01-01T00:00:02Z"},
            {"recipient": "/user/b", "reason": "mailbox full", "count": 1, "last_at": "1970-01-01T00:00:03Z"},
        ], "truncated": false})
    );
    let typed = get_json(
        &app,
        "/api/v1/clusters/app/dead-letters/groups?since=0&message_type=A&limit=1",
    )
    .await;
    assert_eq!(
        typed,
        json!({"groups": [
            {"recipient": "/user/a", "reason": "recipient stopped", "count": 2, "last_at": "1970-01-01T00:01:10Z"},
        ], "truncated": true})
    );
    let bad = call_service(
        &app,
        TestRequest::get()
            .uri("/api/v1/clusters/app/dead-letters/groups?limit=0")
            .to_request(),
    )
    .await;
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    let message = body_json(bad).await.to_string();
    assert!(message.contains("limit"), "{message}");
}

async fn singleton_shows_host_lease_and_hand_over_history(store: Store) {
    let app = service!(state(store.clone(), |_| {}));
    let instance = SingletonInstance {
        singleton: "Scheduler".into(),
        role: None,
        host: "a:1".into(),
        backoff_ms: None,
        reason: None,
    };
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
        .event(2, EventBody::SingletonStarted(instance))
        .build();
    call_service(&app, ingest_request(json_of(&batch), Some(INGEST))).await;
    let list = body_json(
        call_service(
            &app,
            TestRequest::get()
                .uri("/api/v1/clusters/app/singletons")
                .to_request(),
        )
        .await,
    )
    .await;
    assert_eq!(list[0]["host"], "a:1");
    let detail = body_json(
        call_service(
            &app,
            TestRequest::get()
                .uri("/api/v1/clusters/app/singletons/Scheduler")
                .to_request(),
        )
        .await,
    )
    .await;
    assert_eq!(detail["singleton"]["host"], "a:1");
    let history = detail["history"].as_array().unwrap();
    assert_eq!(history.len(), 2);
    assert_eq!(history[1]["kind"], "SingletonHandOverTimedOut");
    assert_eq!(history[1]["detail"]["silent_peers"], json!(["b:1"]));
    assert_eq!(history[1]["detail"]["duration_ms"], "10000");
    let missing = call_service(
        &app,
        TestRequest::get()
            .uri("/api/v1/clusters/app/singletons/Nope")
            .to_request(),
    )
    .await;
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
}

async fn routers_show_routees_and_a_bucketed_depth_series(store: Store) {
    let app = service!(state(store.clone(), |_| {}));
    let batch = BatchBuilder::new("app", "a:1", 1)
        .event(
            1,
            EventBody::RouteesChanged(RouteesChange {
                router: "/user/r".into(),
                strategy: RoutingStrategy::RoundRobin,
                routees: vec!["x".into(), "y".into()],
            }),
        )
        .depth_tick(
            1_000,
            &[
                ("/user/w1", Some("/user/r"), 2),
                ("/user/w2", Some("/user/r"), 6),
            ],
        )
        .depth_tick(2_000, &[("/user/w1", Some("/user/r"), 0)])
        .depth_tick(11_000, &[("/user/w1", Some("/user/r"), 1)])
        .build();
    call_service(&app, ingest_request(json_of(&batch), Some(INGEST))).await;
    let routers = body_json(
        call_service(
            &app,
            TestRequest::get()
                .uri("/api/v1/clusters/app/routers")
                .to_request(),
        )
        .await,
    )
    .await;
    assert_eq!(routers[0]["routees"], json!(["x", "y"]));
    assert_eq!(routers[0]["strategy"], "round-robin");
    let series = body_json(call_service(&app, TestRequest::get().uri("/api/v1/clusters/app/routers/depth?router=/user/r&since=0&until=20000&bucket_seconds=10").to_request()).await).await;
    let points = series["series"][0]["points"].as_array().unwrap();
    assert_eq!(series["series"][0]["node"], "a:1");
    assert_eq!(
        (points[0]["mean"].as_f64(), points[0]["max"].as_str()),
        (Some(4.0), Some("8"))
    );
    assert_eq!(points[1]["max"], "1");
    let neither = call_service(
        &app,
        TestRequest::get()
            .uri("/api/v1/clusters/app/routers/depth")
            .to_request(),
    )
    .await;
    assert_eq!(neither.status(), StatusCode::BAD_REQUEST);
}

async fn unknown_cluster_is_404(store: Store) {
    let app = service!(state(store, |_| {}));
    for path in [
        "/api/v1/clusters/nope",
        "/api/v1/clusters/nope/members",
        "/api/v1/clusters/nope/events",
    ] {
        let resp = call_service(&app, TestRequest::get().uri(path).to_request()).await;
        assert_eq!(resp.status(), StatusCode::NOT_FOUND, "{path}");
    }
}

#[actix_web::test]
async fn openapi_document_describes_every_route_and_the_docs_page_works_offline() {
    let file = troupe_server::testing::TestSqliteFile::new();
    let store = file.store().await.unwrap();
    let app = service!(state(store, |_| {}));
    let doc = body_json(
        call_service(
            &app,
            TestRequest::get().uri("/api/v1/openapi.json").to_request(),
        )
        .await,
    )
    .await;
    let paths = doc["paths"].as_object().unwrap();
    for path in [
        "/api/v1/ingest",
        "/api/v1/clusters",
        "/api/v1/clusters/{cluster}",
        "/api/v1/clusters/{cluster}/members",
        "/api/v1/clusters/{cluster}/members/{address}",
        "/api/v1/clusters/{cluster}/nodes",
        "/api/v1/clusters/{cluster}/events",
        "/api/v1/events/stream",
        "/api/v1/clusters/{cluster}/dead-letters",
        "/api/v1/clusters/{cluster}/dead-letters/groups",
        "/api/v1/clusters/{cluster}/dead-letters/per-minute",
        "/api/v1/clusters/{cluster}/singletons",
        "/api/v1/clusters/{cluster}/singletons/{name}",
        "/api/v1/clusters/{cluster}/routers",
        "/api/v1/clusters/{cluster}/routers/depth",
    ] {
        assert!(
            paths.contains_key(path),
            "{path} missing from the OpenAPI document"
        );
    }
    assert!(paths["/api/v1/clusters/{cluster}/members/{address}"]["put"]["security"].is_array());
    let page = call_service(&app, TestRequest::get().uri("/api/v1/docs").to_request()).await;
    assert_eq!(page.status(), StatusCode::OK);
    let html = String::from_utf8(read_body(page).await.to_vec()).unwrap();
    assert!(
        html.contains("openapi.json") && !html.contains("https://"),
        "self-contained page"
    );
}

const TEN_YEARS_MS: i64 = 3_652 * 86_400_000;

async fn get_json<S>(app: &S, uri: &str) -> Value
where
    S: actix_web::dev::Service<
            actix_http::Request,
            Response = actix_web::dev::ServiceResponse,
            Error = actix_web::Error,
        >,
{
    body_json(call_service(app, TestRequest::get().uri(uri).to_request()).await).await
}

/// Issue 14, item 8, with a reporter whose clock is ten years ahead of the server's: its
/// reports are stored at the receive time and its skew is shown (API and `/metrics`); the
/// correct reports that follow — its own once its clock is fixed, and another agent's — decide
/// the current state.
async fn a_reporter_clock_ten_years_ahead_never_freezes_the_current_state(store: Store) {
    let app = service!(state(store.clone(), |_| {}));
    let instance = |host: &str| SingletonInstance {
        singleton: "Scheduler".into(),
        role: None,
        host: host.into(),
        backoff_ms: None,
        reason: None,
    };
    let routees = |list: &[&str]| RouteesChange {
        router: "/user/r".into(),
        strategy: RoutingStrategy::RoundRobin,
        routees: list.iter().map(|r| (*r).to_owned()).collect(),
    };
    let ahead = troupe_server::time::now_ms() + TEN_YEARS_MS;
    let wrong = BatchBuilder::new("app", "a:1", 1)
        .sent_at(ahead)
        .member(ahead, EventBody::MemberUp, "b:1", MemberStatus::Up, &[])
        .member(
            ahead,
            EventBody::MemberUnreachable,
            "b:1",
            MemberStatus::Up,
            &[],
        )
        .event(
            ahead,
            EventBody::LeaderChanged(LeaderChange {
                leader: Some("b:1".into()),
            }),
        )
        .event(ahead, EventBody::SingletonStarted(instance("b:1")))
        .event(ahead, EventBody::RouteesChanged(routees(&["x"])))
        .build();
    let resp = call_service(&app, ingest_request(json_of(&wrong), Some(INGEST))).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let nodes = get_json(&app, "/api/v1/clusters/app/nodes").await;
    let skew = nodes[0]["clock_skew_ms"].as_i64().expect("clock_skew_ms");
    assert!(
        (TEN_YEARS_MS - 60_000..=TEN_YEARS_MS).contains(&skew),
        "the skew is recorded: {nodes:#}"
    );
    let metrics = String::from_utf8(
        read_body(call_service(&app, TestRequest::get().uri("/metrics").to_request()).await)
            .await
            .to_vec(),
    )
    .unwrap();
    let gauge = metrics
        .lines()
        .find(|l| l.starts_with("troupe_agent_clock_skew_seconds{"))
        .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no skew gauge in {metrics}"));
    assert!(gauge > (TEN_YEARS_MS / 1000 - 60) as f64, "{gauge}");
    let events = get_json(&app, "/api/v1/clusters/app/events?kind=LeaderChanged").await;
    let stored_at = events["events"][0]["at_ms"].as_i64().expect("event time");
    assert!(
        stored_at <= troupe_server::time::now_ms(),
        "a time ten years ahead is stored as the receive time: {events:#}"
    );

    // Its clock is fixed: its next batch decides, whatever the times say.
    let now = troupe_server::time::now_ms();
    let fixed = BatchBuilder::new("app", "a:1", 2)
        .sent_at(now)
        .member(
            now,
            EventBody::MemberReachable,
            "b:1",
            MemberStatus::Up,
            &[],
        )
        .event(
            now,
            EventBody::LeaderChanged(LeaderChange {
                leader: Some("c:1".into()),
            }),
        )
        .event(now, EventBody::SingletonStopped(instance("b:1")))
        .event(now, EventBody::SingletonStarted(instance("c:1")))
        .event(now, EventBody::RouteesChanged(routees(&["x", "y"])))
        .build();
    call_service(&app, ingest_request(json_of(&fixed), Some(INGEST))).await;
    let members = get_json(&app, "/api/v1/clusters/app/members").await;
    assert_eq!(members["leader"], "c:1", "{members:#}");
    assert_eq!(members["unreachable"], json!([]), "{members:#}");
    let singletons = get_json(&app, "/api/v1/clusters/app/singletons").await;
    assert_eq!(singletons[0]["host"], "c:1", "{singletons:#}");
    let routers = get_json(&app, "/api/v1/clusters/app/routers").await;
    assert_eq!(routers[0]["routees"], json!(["x", "y"]), "{routers:#}");
    let nodes = get_json(&app, "/api/v1/clusters/app/nodes").await;
    assert!(
        nodes[0]["clock_skew_ms"].as_i64().unwrap().abs() < 60_000,
        "the latest batch's skew: {nodes:#}"
    );

    // Another agent with a correct clock reports a later change: it wins too.
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let later = troupe_server::time::now_ms();
    let other = BatchBuilder::new("app", "d:1", 1)
        .sent_at(later)
        .event(
            later,
            EventBody::LeaderChanged(LeaderChange {
                leader: Some("d:1".into()),
            }),
        )
        .build();
    call_service(&app, ingest_request(json_of(&other), Some(INGEST))).await;
    let members = get_json(&app, "/api/v1/clusters/app/members").await;
    assert_eq!(members["leader"], "d:1", "{members:#}");
}
