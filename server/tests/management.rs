//! Akka Management's routes per cluster (`/management/{cluster}/cluster/…`), the full member
//! address everywhere an address is a path parameter, and 405 for a method a resource does not
//! serve. Every test runs on PostgreSQL and SQLite.

use actix_web::http::StatusCode;
use actix_web::test::{TestRequest, call_service, init_service, read_body};
use serde_json::{Value, json};
use troupe_protocol::{EventBody, LeaderChange, MemberChange, MemberInfo, MemberStatus};
use troupe_server::store::Store;
use troupe_server::testing::BatchBuilder;
use troupe_server::{AppState, Config};

const INGEST: &str = "ingest-secret";
const ADMIN: &str = "admin-secret";

troupe_server::on_every_store!(
    cluster_members_have_akkas_shape_with_full_addresses_and_string_uids,
    one_member_is_found_by_its_full_address_raw_or_encoded_and_by_host_port,
    down_and_leave_are_answered_as_akka_answers_and_reach_an_agent,
    a_method_a_resource_does_not_serve_is_405_with_allow_and_a_body,
);

fn state(store: Store, operations: bool) -> AppState {
    let mut config = Config::defaults();
    config.ingest_token = Some(INGEST.to_owned());
    config.admin_token = Some(ADMIN.to_owned());
    config.enable_member_operations = operations;
    AppState::new(config, store).0
}

macro_rules! service {
    ($state:expr) => {
        init_service(actix_web::App::new().configure(troupe_server::api::configure($state))).await
    };
}

async fn send(
    app: &impl actix_web::dev::Service<
        actix_http::Request,
        Response = actix_web::dev::ServiceResponse,
        Error = actix_web::Error,
    >,
    request: TestRequest,
) -> (StatusCode, Value, actix_web::http::header::HeaderMap) {
    let resp = call_service(app, request.to_request()).await;
    let status = resp.status();
    let headers = resp.headers().clone();
    let body = read_body(resp).await;
    let json = if body.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&body).unwrap_or_else(|e| panic!("{e}: {body:?}"))
    };
    (status, json, headers)
}

fn change(address: &str, uid: u64, status: MemberStatus, roles: &[&str]) -> MemberChange {
    MemberChange {
        member: MemberInfo {
            address: address.to_owned(),
            uid,
            status,
            roles: roles.iter().map(|r| (*r).to_owned()).collect(),
        },
        previous_status: None,
        observers: Vec::new(),
    }
}

/// Three members up (a oldest), b unreachable for c, d removed; leader a; agent c reported last.
async fn seed(
    app: &impl actix_web::dev::Service<
        actix_http::Request,
        Response = actix_web::dev::ServiceResponse,
        Error = actix_web::Error,
    >,
) {
    let big_uid = 15_365_700_884_095_386_388;
    let mut unreachable = change("10.0.0.2:2552", 2, MemberStatus::Up, &["worker"]);
    unreachable.observers = vec!["10.0.0.3:2552".to_owned()];
    let first = BatchBuilder::new("app", "10.0.0.1:2552", 1)
        .event(
            1_000,
            EventBody::MemberUp(change(
                "10.0.0.1:2552",
                big_uid,
                MemberStatus::Up,
                &["seed", "worker"],
            )),
        )
        .event(
            2_000,
            EventBody::MemberUp(change("10.0.0.2:2552", 2, MemberStatus::Up, &["worker"])),
        )
        .event(
            3_000,
            EventBody::MemberUp(change("10.0.0.3:2552", 3, MemberStatus::Up, &[])),
        )
        .event(
            3_500,
            EventBody::MemberRemoved(change("10.0.0.4:2552", 4, MemberStatus::Removed, &[])),
        )
        .event(
            4_000,
            EventBody::LeaderChanged(LeaderChange {
                leader: Some("10.0.0.1:2552".to_owned()),
            }),
        )
        .event(5_000, EventBody::MemberUnreachable(unreachable))
        .sent_at(5_000)
        .build();
    let later = BatchBuilder::new("app", "10.0.0.3:2552", 1)
        .sent_at(6_000)
        .build();
    for batch in [first, later] {
        let (status, body, _) = send(
            app,
            TestRequest::post()
                .uri("/api/v1/ingest")
                .insert_header(("authorization", format!("Bearer {INGEST}")))
                .set_json(&batch),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        // The second agent reports a moment later, so it is the freshest.
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

async fn cluster_members_have_akkas_shape_with_full_addresses_and_string_uids(store: Store) {
    let app = service!(state(store, false));
    seed(&app).await;
    for path in [
        "/management/app/cluster/members",
        "/management/app/cluster/members/",
    ] {
        let (status, body, _) = send(&app, TestRequest::get().uri(path)).await;
        assert_eq!(status, 200, "{path}: {body}");
        assert_eq!(
            body,
            json!({
                "selfNode": "troupe://app@10.0.0.3:2552",
                "members": [
                    {"node": "troupe://app@10.0.0.1:2552", "nodeUid": "15365700884095386388",
                     "status": "Up", "roles": ["seed", "worker"]},
                    {"node": "troupe://app@10.0.0.2:2552", "nodeUid": "2", "status": "Up", "roles": ["worker"]},
                    {"node": "troupe://app@10.0.0.3:2552", "nodeUid": "3", "status": "Up", "roles": []},
                ],
                "unreachable": [
                    {"node": "troupe://app@10.0.0.2:2552", "observedBy": ["troupe://app@10.0.0.3:2552"]},
                ],
                "leader": "troupe://app@10.0.0.1:2552",
                "oldest": "troupe://app@10.0.0.1:2552",
                "oldestPerRole": {"seed": "troupe://app@10.0.0.1:2552", "worker": "troupe://app@10.0.0.1:2552"},
            }),
            "{path}"
        );
    }
    let (status, body, _) = send(
        &app,
        TestRequest::get().uri("/management/nope/cluster/members"),
    )
    .await;
    assert_eq!(status, 404);
    assert!(body["message"].as_str().unwrap().contains("nope"), "{body}");
}

async fn one_member_is_found_by_its_full_address_raw_or_encoded_and_by_host_port(store: Store) {
    let app = service!(state(store, false));
    seed(&app).await;
    for written in [
        "troupe://app@10.0.0.2:2552",
        "troupe%3A%2F%2Fapp%4010.0.0.2%3A2552",
        "10.0.0.2:2552",
    ] {
        let (status, body, _) = send(
            &app,
            TestRequest::get().uri(&format!("/management/app/cluster/members/{written}")),
        )
        .await;
        assert_eq!(status, 200, "{written}: {body}");
        assert_eq!(
            body,
            json!({"node": "troupe://app@10.0.0.2:2552", "nodeUid": "2", "status": "Up", "roles": ["worker"]})
        );
        let (status, body, _) = send(
            &app,
            TestRequest::get().uri(&format!("/api/v1/clusters/app/members/{written}")),
        )
        .await;
        assert_eq!(status, 200, "/api/v1 {written}: {body}");
        assert_eq!(body["node"], "10.0.0.2:2552");
        assert_eq!(body["address"], "troupe://app@10.0.0.2:2552");
        assert_eq!(body["node_uid"], "2");
    }
    for unknown in [
        "troupe://other@10.0.0.2:2552",
        "troupe://app@10.0.0.9:2552",
        "troupe://app@10.0.0.4:2552",
    ] {
        let (status, body, _) = send(
            &app,
            TestRequest::get().uri(&format!("/management/app/cluster/members/{unknown}")),
        )
        .await;
        assert_eq!(status, 404, "{unknown}");
        assert_eq!(
            body,
            json!({"message": format!("Member [{unknown}] not found")})
        );
    }
    let (status, _, _) = send(
        &app,
        TestRequest::get().uri("/api/v1/clusters/app/members/troupe://other@10.0.0.2:2552"),
    )
    .await;
    assert_eq!(status, 404);
}

async fn down_and_leave_are_answered_as_akka_answers_and_reach_an_agent(store: Store) {
    let app = service!(state(store.clone(), true));
    seed(&app).await;
    let member = "/management/app/cluster/members/troupe://app@10.0.0.2:2552";
    let admin = ("authorization", format!("Bearer {ADMIN}"));
    let form = ("content-type", "application/x-www-form-urlencoded");
    let (status, body, _) = send(
        &app,
        TestRequest::put()
            .uri(member)
            .insert_header(form)
            .set_payload("operation=Down"),
    )
    .await;
    assert_eq!(status, 401, "the admin token, as on /api/v1");
    assert!(body["message"].is_string(), "{body}");
    let (status, body, _) = send(
        &app,
        TestRequest::put()
            .uri(member)
            .insert_header(admin.clone())
            .insert_header(form)
            .set_payload("operation=Down"),
    )
    .await;
    assert_eq!(
        (status, body),
        (
            StatusCode::OK,
            json!({"message": "Downing troupe://app@10.0.0.2:2552"})
        )
    );
    let (status, body, _) = send(
        &app,
        TestRequest::put()
            .uri(member)
            .insert_header(admin.clone())
            .insert_header(form)
            .set_payload("operation=leave"),
    )
    .await;
    assert_eq!(
        (status, body),
        (
            StatusCode::OK,
            json!({"message": "Leaving troupe://app@10.0.0.2:2552"})
        )
    );
    let (status, body, _) = send(
        &app,
        TestRequest::put()
            .uri(member)
            .insert_header(admin.clone())
            .insert_header(form)
            .set_payload("operation=Explode"),
    )
    .await;
    assert_eq!(
        (status, body),
        (
            StatusCode::BAD_REQUEST,
            json!({"message": "Operation not supported"})
        )
    );
    let (status, body, _) = send(
        &app,
        TestRequest::delete()
            .uri("/management/app/cluster/members/10.0.0.3:2552")
            .insert_header(admin.clone()),
    )
    .await;
    assert_eq!(
        (status, body),
        (
            StatusCode::OK,
            json!({"message": "Leaving troupe://app@10.0.0.3:2552"})
        )
    );
    let (status, body, _) = send(
        &app,
        TestRequest::delete()
            .uri("/management/app/cluster/members/10.0.0.9:2552")
            .insert_header(admin.clone()),
    )
    .await;
    assert_eq!(
        (status, body),
        (
            StatusCode::NOT_FOUND,
            json!({"message": "Member [10.0.0.9:2552] not found"})
        )
    );

    // The next agent to report gets the three operations.
    let (status, ack, _) = send(
        &app,
        TestRequest::post()
            .uri("/api/v1/ingest")
            .insert_header(("authorization", format!("Bearer {INGEST}")))
            .set_json(BatchBuilder::new("app", "10.0.0.1:2552", 2).build()),
    )
    .await;
    assert_eq!(status, 200);
    let operations: Vec<(String, String)> = ack["operations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                o["address"].as_str().unwrap().to_owned(),
                o["operation"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        operations,
        [
            ("10.0.0.2:2552".to_owned(), "down".to_owned()),
            ("10.0.0.2:2552".to_owned(), "leave".to_owned()),
            ("10.0.0.3:2552".to_owned(), "leave".to_owned()),
        ]
    );

    let off = service!(state(store, false));
    let (status, body, _) =
        send(&off, TestRequest::delete().uri(member).insert_header(admin)).await;
    assert_eq!(status, 403);
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("--enable-member-operations"),
        "{body}"
    );
}

async fn a_method_a_resource_does_not_serve_is_405_with_allow_and_a_body(store: Store) {
    let app = service!(state(store, false));
    seed(&app).await;
    for (request, allow) in [
        (
            TestRequest::post().uri("/management/app/cluster/members"),
            "GET",
        ),
        (
            TestRequest::patch().uri("/management/app/cluster/members/10.0.0.1:2552"),
            "GET, PUT, DELETE",
        ),
        (TestRequest::delete().uri("/api/v1/clusters"), "GET"),
        (TestRequest::put().uri("/api/v1/ingest"), "POST"),
        (
            TestRequest::default()
                .method(actix_web::http::Method::OPTIONS)
                .uri("/api/v1/clusters/app/members/10.0.0.1:2552"),
            "GET, PUT, DELETE",
        ),
        (TestRequest::post().uri("/livez"), "GET"),
        (
            TestRequest::default()
                .method(actix_web::http::Method::from_bytes(b"QUERY").unwrap())
                .uri("/metrics"),
            "GET",
        ),
    ] {
        let (status, body, headers) = send(&app, request).await;
        assert_eq!(status, 405, "{body}");
        assert_eq!(headers.get("allow").unwrap(), allow);
        assert_eq!(body["status"], 405);
        assert!(body["error"].as_str().unwrap().contains(allow), "{body}");
    }
    let (status, body, _) = send(&app, TestRequest::get().uri("/api/v1/no/such/thing")).await;
    assert_eq!(status, 404);
    assert_eq!(body["status"], 404);
}
