//! The audit trail of management actions: every leave and down asked through `/api/v1` or
//! `/management` is recorded with server time, the asking token's id (never the token), the
//! action, the target and what came of it; refused attempts too, bounded per cluster; read back
//! newest first, paged and filtered by target. Every test runs on PostgreSQL and SQLite.

use std::time::Duration;

use actix_web::http::StatusCode;
use actix_web::test::{TestRequest, call_service, init_service, read_body};
use serde_json::Value;
use troupe_protocol::{EventBody, MemberStatus};
use troupe_server::store::{MAX_REFUSED, Store};
use troupe_server::testing::BatchBuilder;
use troupe_server::time::now_ms;
use troupe_server::{AppState, Config};

#[path = "support/hostile.rs"]
mod hostile;

const INGEST: &str = "ingest-secret";
const ADMIN: &str = "admin-secret";
/// `admin:` and the first 12 hex digits of sha256("admin-secret").
const ADMIN_ID: &str = "admin:16175223c8dd";

troupe_server::on_every_store!(
    every_leave_and_down_is_recorded_with_token_id_target_and_outcome,
    refusals_are_recorded_with_status_and_reason_and_name_no_secret,
    the_trail_is_paged_newest_first_and_filtered_by_target,
    refused_entries_are_bounded_per_cluster_and_accepted_ones_kept,
    the_audit_page_lists_entries_and_the_node_page_links_them,
    xss_payloads_as_targets_and_reasons_render_only_escaped,
    an_accepted_operation_is_delivered_once_an_agent_takes_it,
    coordination_evictions_and_releases_are_recorded_in_their_own_trail,
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
        init_service(
            actix_web::App::new()
                .configure(troupe_server::api::configure($state))
                .configure(troupe_server::ui::configure),
        )
        .await
    };
}

/// GETs a dashboard page: status and body.
async fn page(
    app: &impl actix_web::dev::Service<
        actix_http::Request,
        Response = actix_web::dev::ServiceResponse,
        Error = actix_web::Error,
    >,
    uri: &str,
) -> (StatusCode, String) {
    let resp = call_service(app, TestRequest::get().uri(uri).to_request()).await;
    let status = resp.status();
    (
        status,
        String::from_utf8(read_body(resp).await.to_vec()).unwrap(),
    )
}

async fn send(
    app: &impl actix_web::dev::Service<
        actix_http::Request,
        Response = actix_web::dev::ServiceResponse,
        Error = actix_web::Error,
    >,
    request: TestRequest,
) -> (StatusCode, Value) {
    let resp = call_service(app, request.to_request()).await;
    let status = resp.status();
    let body = read_body(resp).await;
    let json = if body.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&body).unwrap_or_else(|e| panic!("{e}: {body:?}"))
    };
    (status, json)
}

/// Cluster `app` with members a (10.0.0.1) and b (10.0.0.2), both up.
async fn seed(store: &Store) {
    let batch = BatchBuilder::new("app", "10.0.0.1:2552", 1)
        .member(
            1_000,
            EventBody::MemberUp,
            "10.0.0.1:2552",
            MemberStatus::Up,
            &[],
        )
        .member(
            2_000,
            EventBody::MemberUp,
            "10.0.0.2:2552",
            MemberStatus::Up,
            &[],
        )
        .sent_at(2_000)
        .build();
    store.ingest(&batch, now_ms()).await.expect("ingest");
}

fn admin(request: TestRequest) -> TestRequest {
    request.insert_header(("authorization", format!("Bearer {ADMIN}")))
}

async fn trail(
    app: &impl actix_web::dev::Service<
        actix_http::Request,
        Response = actix_web::dev::ServiceResponse,
        Error = actix_web::Error,
    >,
    query: &str,
) -> Value {
    let (status, body) = send(
        app,
        TestRequest::get().uri(&format!("/api/v1/clusters/app/audit{query}")),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body
}

async fn every_leave_and_down_is_recorded_with_token_id_target_and_outcome(store: Store) {
    seed(&store).await;
    let app = service!(state(store, true));
    let before = now_ms();
    // Leave through /api/v1 (form), down through /management, leave through /management's DELETE.
    let (status, accepted) = send(
        &app,
        admin(TestRequest::put())
            .uri("/api/v1/clusters/app/members/10.0.0.2:2552")
            .insert_header(("content-type", "application/x-www-form-urlencoded"))
            .set_payload("operation=Leave"),
    )
    .await;
    assert_eq!(status, 202, "{accepted}");
    let (status, body) = send(
        &app,
        admin(TestRequest::put())
            .uri("/management/app/cluster/members/troupe://app@10.0.0.1:2552")
            .insert_header(("content-type", "application/x-www-form-urlencoded"))
            .set_payload("operation=Down"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = send(
        &app,
        admin(TestRequest::delete()).uri("/management/app/cluster/members/10.0.0.2:2552"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let after = now_ms();

    let entries = trail(&app, "").await["entries"].as_array().unwrap().clone();
    assert_eq!(entries.len(), 3, "{entries:?}");
    let seen: Vec<(&str, &str, &str, u64)> = entries
        .iter()
        .map(|e| {
            (
                e["action"].as_str().unwrap(),
                e["target"].as_str().unwrap(),
                e["outcome"].as_str().unwrap(),
                e["status"].as_u64().unwrap(),
            )
        })
        .collect();
    // Newest first; the full address is stored as the member's host:port.
    assert_eq!(
        seen,
        [
            ("member.leave", "10.0.0.2:2552", "accepted", 200),
            ("member.down", "10.0.0.1:2552", "accepted", 200),
            ("member.leave", "10.0.0.2:2552", "accepted", 202),
        ]
    );
    for entry in &entries {
        assert_eq!(entry["token"], ADMIN_ID, "{entry}");
        assert!(entry["reason"].is_null(), "{entry}");
        assert!(entry["operation_id"].is_i64(), "{entry}");
        let at = chrono::DateTime::parse_from_rfc3339(entry["at"].as_str().unwrap())
            .unwrap()
            .timestamp_millis();
        assert!(
            (before..=after).contains(&at),
            "{at} not in {before}..={after}"
        );
    }
    // The entry of the /api/v1 leave names the operation the answer named.
    assert_eq!(entries[2]["operation_id"], accepted["id"]);
}

async fn an_accepted_operation_is_delivered_once_an_agent_takes_it(store: Store) {
    seed(&store).await;
    let app = service!(state(store.clone(), true));
    let (status, accepted) = send(
        &app,
        admin(TestRequest::delete()).uri("/api/v1/clusters/app/members/10.0.0.2:2552"),
    )
    .await;
    assert_eq!(status, 202, "{accepted}");
    let entry = trail(&app, "").await["entries"][0].clone();
    assert_eq!(entry["outcome"], "accepted", "{entry}");
    assert!(entry["delivered_at"].is_null(), "{entry}");
    // The next report of a ready agent takes the operation.
    let before = now_ms();
    let report = BatchBuilder::new("app", "10.0.0.1:2552", 2)
        .sent_at(3_000)
        .build();
    let outcome = store.ingest(&report, now_ms()).await.expect("ingest");
    assert_eq!(outcome.operations.len(), 1, "{outcome:?}");
    let entries = trail(&app, "").await["entries"].clone();
    let entry = &entries[0];
    assert_eq!(entry["outcome"], "delivered", "{entry}");
    assert_eq!(entry["operation_id"], accepted["id"], "{entry}");
    let delivered = chrono::DateTime::parse_from_rfc3339(entry["delivered_at"].as_str().unwrap())
        .unwrap()
        .timestamp_millis();
    assert!(delivered >= before, "{entry}");
    // The page says so too.
    let (status, html) = page(&app, "/ui/audit?cluster=app").await;
    assert_eq!(status, 200);
    assert!(html.contains(">delivered</span>"), "{html}");
}

/// The coordination token of [`coordination_state`].
const COORDINATION: &str = "coordination-secret";

fn coordination_state(store: Store) -> AppState {
    use std::sync::Arc;
    use troupe_lease::directory::InMemoryDirectory;
    use troupe_lease::lease::{InMemoryLeaseArbiter, LeaseSettings};
    let mut config = Config::defaults();
    config.ingest_token = Some(INGEST.to_owned());
    config.admin_token = Some(ADMIN.to_owned());
    config.coordination_token = Some(COORDINATION.to_owned());
    AppState::new(config, store).0.with_coordination(Arc::new(
        troupe_server::coordination::Coordination::new(
            Arc::new(InMemoryLeaseArbiter::new(LeaseSettings::default())),
            Arc::new(InMemoryDirectory::new()),
            "in-memory",
        ),
    ))
}

async fn coordination_evictions_and_releases_are_recorded_in_their_own_trail(store: Store) {
    seed(&store).await;
    let app = service!(coordination_state(store));
    let bearer = ("authorization", format!("Bearer {COORDINATION}"));
    let json = ("content-type", "application/json");
    for actor in ["cart-1", "cart-2", "cart-3"] {
        let (status, body) = send(
            &app,
            TestRequest::post()
                .uri(&format!("/api/v1/coordination/claims/{actor}"))
                .insert_header(bearer.clone())
                .insert_header(json)
                .set_payload(r#"{"host":"10.0.0.1:2552"}"#),
        )
        .await;
        assert_eq!(status, 200, "{body}");
    }
    let (status, body) = send(
        &app,
        TestRequest::delete()
            .uri("/api/v1/coordination/claims/cart-3?host=10.0.0.1:2552")
            .insert_header(bearer.clone()),
    )
    .await;
    assert_eq!(
        (status.as_u16(), &body["released"]),
        (200, &Value::Bool(true))
    );
    let (status, body) = send(
        &app,
        TestRequest::post()
            .uri("/api/v1/coordination/hosts/10.0.0.1:2552/evict")
            .insert_header(bearer.clone()),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (status, grant) = send(
        &app,
        TestRequest::post()
            .uri("/api/v1/coordination/leases/leader/acquire")
            .insert_header(bearer.clone())
            .insert_header(json)
            .set_payload(r#"{"owner":"10.0.0.1:2552","ttl_ms":"10000"}"#),
    )
    .await;
    assert_eq!(status, 200, "{grant}");
    let (status, body) = send(
        &app,
        TestRequest::post()
            .uri("/api/v1/coordination/leases/leader/release")
            .insert_header(bearer.clone())
            .insert_header(json)
            .set_payload(format!(
                r#"{{"owner":"10.0.0.1:2552","token":{}}}"#,
                grant["token"]
            )),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    // An eviction with a wrong token: refused, the token unnamed.
    let (status, _) = send(
        &app,
        TestRequest::post()
            .uri("/api/v1/coordination/hosts/10.0.0.2:2552/evict")
            .insert_header(("authorization", "Bearer coordination-secre")),
    )
    .await;
    assert_eq!(status, 401);

    let (status, all) = send(&app, TestRequest::get().uri("/api/v1/audit/coordination")).await;
    assert_eq!(status, 200, "{all}");
    let seen: Vec<(&str, &str, &str, &str, u64, &str)> = all["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["action"].as_str().unwrap(),
                e["target"].as_str().unwrap(),
                e["token"].as_str().unwrap(),
                e["outcome"].as_str().unwrap(),
                e["status"].as_u64().unwrap(),
                e["reason"].as_str().unwrap_or(""),
            )
        })
        .collect();
    let id = troupe_server::auth::token_id("coordination", COORDINATION);
    assert_eq!(
        seen,
        [
            (
                "coordination.evict",
                "10.0.0.2:2552",
                "unknown",
                "refused",
                401,
                "unauthorized: wrong bearer token"
            ),
            (
                "coordination.lease.release",
                "leader (owner 10.0.0.1:2552)",
                id.as_str(),
                "accepted",
                200,
                "released the grant"
            ),
            (
                "coordination.evict",
                "10.0.0.1:2552",
                id.as_str(),
                "accepted",
                200,
                "released 2 claims: cart-1, cart-2"
            ),
            (
                "coordination.claim.release",
                "cart-3 (host 10.0.0.1:2552)",
                id.as_str(),
                "accepted",
                200,
                "released the claim"
            ),
        ],
        "{all}"
    );
    assert!(!all.to_string().contains(COORDINATION), "{all}");
    // Filtered by target; the cluster's own trail holds none of them.
    let (_, one) = send(
        &app,
        TestRequest::get().uri("/api/v1/audit/coordination?target=10.0.0.1:2552"),
    )
    .await;
    assert_eq!(one["entries"].as_array().unwrap().len(), 1, "{one}");
    assert_eq!(trail(&app, "").await["entries"], Value::Array(Vec::new()));
    // The audit page lists them under their own heading.
    let (status, html) = page(&app, "/ui/audit?cluster=app").await;
    assert_eq!(status, 200);
    assert!(html.contains("released 2 claims: cart-1, cart-2"), "{html}");
    assert!(html.contains("coordination.lease.release"), "{html}");
}

async fn refusals_are_recorded_with_status_and_reason_and_name_no_secret(store: Store) {
    seed(&store).await;
    let app = service!(state(store.clone(), true));
    let put = |uri: &str, body: &'static str| {
        TestRequest::put()
            .uri(uri)
            .insert_header(("content-type", "application/x-www-form-urlencoded"))
            .set_payload(body)
    };
    let wrong = "admin-secre";
    let cases: Vec<(TestRequest, u16, &str, &str, &str)> = vec![
        (
            put(
                "/api/v1/clusters/app/members/10.0.0.1:2552",
                "operation=Down",
            ),
            401,
            "none",
            "member.down",
            "missing bearer token",
        ),
        (
            put(
                "/api/v1/clusters/app/members/10.0.0.1:2552",
                "operation=Leave",
            )
            .insert_header(("authorization", format!("Bearer {wrong}"))),
            401,
            "unknown",
            "member.leave",
            "wrong bearer token",
        ),
        (
            admin(put(
                "/api/v1/clusters/app/members/10.0.0.9:2552",
                "operation=Leave",
            )),
            404,
            ADMIN_ID,
            "member.leave",
            "no member `10.0.0.9:2552`",
        ),
        (
            admin(put(
                "/management/app/cluster/members/10.0.0.9:2552",
                "operation=Down",
            )),
            404,
            ADMIN_ID,
            "member.down",
            "Member [10.0.0.9:2552] not found",
        ),
        (
            admin(put(
                "/api/v1/clusters/app/members/10.0.0.1:2552",
                "operation=Join",
            )),
            400,
            ADMIN_ID,
            "member.operate",
            "unknown operation `join`",
        ),
        (
            admin(put(
                "/management/app/cluster/members/10.0.0.1:2552",
                "operation=Join",
            )),
            400,
            ADMIN_ID,
            "member.operate",
            "Operation not supported",
        ),
    ];
    let expected = cases.len();
    for (request, status, token, action, reason) in cases {
        let (answered, body) = send(&app, request).await;
        assert_eq!(answered.as_u16(), status, "{action} {reason}: {body}");
        let entries = trail(&app, "?limit=1").await;
        let entry = &entries["entries"][0];
        assert_eq!(entry["outcome"], "refused", "{entry}");
        assert_eq!(entry["status"], status, "{entry}");
        assert_eq!(entry["token"], token, "{entry}");
        assert_eq!(entry["action"], action, "{entry}");
        assert!(
            entry["reason"].as_str().unwrap().contains(reason),
            "{reason} in {entry}"
        );
        assert!(entry["operation_id"].is_null(), "{entry}");
    }
    // Operations off: refused with 403, the admin token named.
    let off = service!(state(store, false));
    let (status, _) = send(
        &off,
        admin(TestRequest::delete()).uri("/api/v1/clusters/app/members/10.0.0.1:2552"),
    )
    .await;
    assert_eq!(status, 403);
    let all = trail(&off, "").await;
    let entries = all["entries"].as_array().unwrap();
    assert_eq!(entries.len(), expected + 1, "{all}");
    assert_eq!(entries[0]["status"], 403);
    assert!(
        entries[0]["reason"]
            .as_str()
            .unwrap()
            .contains("--enable-member-operations"),
        "{}",
        entries[0]
    );
    // No secret anywhere in the trail, not even the near miss.
    let text = all.to_string();
    assert!(!text.contains(ADMIN) && !text.contains(wrong), "{text}");
    // A cluster nobody reported: 404 (403 with operations off, which is checked first) and
    // nothing recorded anywhere.
    let (status, _) = send(
        &app,
        admin(TestRequest::delete()).uri("/api/v1/clusters/nope/members/10.0.0.1:2552"),
    )
    .await;
    assert_eq!(status, 404);
    let (status, _) = send(
        &off,
        admin(TestRequest::delete()).uri("/api/v1/clusters/nope/members/10.0.0.1:2552"),
    )
    .await;
    assert_eq!(status, 403);
    let (status, _) = send(&off, TestRequest::get().uri("/api/v1/clusters/nope/audit")).await;
    assert_eq!(status, 404);
    assert_eq!(
        trail(&off, "").await["entries"].as_array().unwrap().len(),
        expected + 1
    );
}

async fn the_trail_is_paged_newest_first_and_filtered_by_target(store: Store) {
    seed(&store).await;
    let app = service!(state(store, true));
    for target in [
        "10.0.0.1:2552",
        "10.0.0.2:2552",
        "10.0.0.1:2552",
        "10.0.0.2:2552",
        "10.0.0.1:2552",
    ] {
        let (status, _) = send(
            &app,
            admin(TestRequest::delete()).uri(&format!("/api/v1/clusters/app/members/{target}")),
        )
        .await;
        assert_eq!(status, 202);
    }
    let mut ids = Vec::new();
    let mut cursor = String::new();
    loop {
        let page = trail(&app, &format!("?limit=2{cursor}")).await;
        for entry in page["entries"].as_array().unwrap() {
            ids.push(entry["id"].as_i64().unwrap());
        }
        match page["next_cursor"].as_str() {
            Some(next) => cursor = format!("&cursor={next}"),
            None => break,
        }
    }
    assert_eq!(ids.len(), 5, "{ids:?}");
    assert!(ids.windows(2).all(|w| w[0] > w[1]), "newest first: {ids:?}");
    for written in [
        "10.0.0.1:2552",
        "troupe://app@10.0.0.1:2552",
        "troupe%3A%2F%2Fapp%4010.0.0.1%3A2552",
    ] {
        let page = trail(&app, &format!("?target={written}")).await;
        let entries = page["entries"].as_array().unwrap();
        assert_eq!(entries.len(), 3, "{written}: {page}");
        assert!(entries.iter().all(|e| e["target"] == "10.0.0.1:2552"));
    }
    for bad in ["?target=", "?limit=0", "?cursor=x", "?colour=red"] {
        let (status, body) = send(
            &app,
            TestRequest::get().uri(&format!("/api/v1/clusters/app/audit{bad}")),
        )
        .await;
        assert_eq!(status, 400, "{bad}: {body}");
    }
}

async fn refused_entries_are_bounded_per_cluster_and_accepted_ones_kept(store: Store) {
    seed(&store).await;
    let app = service!(state(store, true));
    let (status, _) = send(
        &app,
        admin(TestRequest::delete()).uri("/api/v1/clusters/app/members/10.0.0.1:2552"),
    )
    .await;
    assert_eq!(status, 202);
    let flood = MAX_REFUSED + 50;
    tokio::time::timeout(Duration::from_secs(120), async {
        for i in 0..flood {
            let (status, _) = send(
                &app,
                TestRequest::delete()
                    .uri(&format!("/api/v1/clusters/app/members/10.0.0.{i}:1"))
                    .insert_header(("authorization", "Bearer guess")),
            )
            .await;
            assert_eq!(status, 401);
        }
    })
    .await
    .expect("the flood took longer than 120 s");
    let mut refused = 0;
    let mut accepted = 0;
    let mut oldest_refused = String::new();
    let mut cursor = String::new();
    loop {
        let page = trail(&app, &format!("?limit=1000{cursor}")).await;
        for entry in page["entries"].as_array().unwrap() {
            match entry["outcome"].as_str().unwrap() {
                "refused" => {
                    refused += 1;
                    oldest_refused = entry["target"].as_str().unwrap().to_owned();
                }
                "accepted" => accepted += 1,
                other => panic!("{other}"),
            }
        }
        match page["next_cursor"].as_str() {
            Some(next) => cursor = format!("&cursor={next}"),
            None => break,
        }
    }
    assert_eq!(refused, MAX_REFUSED);
    assert_eq!(accepted, 1, "the accepted entry outlives the flood");
    // The newest are kept: the first 50 refused went.
    assert_eq!(oldest_refused, "10.0.0.50:1");
}

async fn the_audit_page_lists_entries_and_the_node_page_links_them(store: Store) {
    seed(&store).await;
    let app = service!(state(store, true));
    let (status, body) = page(&app, "/ui/audit?cluster=app").await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains("Nobody has asked for a leave or down"),
        "{body}"
    );
    assert!(
        body.contains(
            "<a href=\"/ui/audit?cluster=app\" class=\"active\" aria-current=\"page\">Audit</a>"
        ),
        "the nav links the audit page: {body}"
    );
    let (status, _) = send(
        &app,
        admin(TestRequest::delete()).uri("/api/v1/clusters/app/members/10.0.0.2:2552"),
    )
    .await;
    assert_eq!(status, 202);
    let (status, _) = send(
        &app,
        TestRequest::delete()
            .uri("/management/app/cluster/members/10.0.0.2:2552")
            .insert_header(("authorization", "Bearer nope")),
    )
    .await;
    assert_eq!(status, 401);
    let (status, body) = page(&app, "/ui/audit?cluster=app").await;
    assert_eq!(status, 200);
    let rows = body.matches("<tr>\n    <td class=\"mono\"><time").count();
    assert_eq!(rows, 2, "{body}");
    assert!(body.contains(ADMIN_ID) && !body.contains(ADMIN), "{body}");
    assert!(
        body.contains(
            "<span class=\"badge ok\">accepted</span> <span class=\"muted small\">202</span>"
        ),
        "{body}"
    );
    assert!(
        body.contains(
            "<span class=\"badge warn\">refused</span> <span class=\"muted small\">401</span>"
        ),
        "{body}"
    );
    assert!(body.contains("unauthorized: wrong bearer token"), "{body}");
    // A target links to its entries and, being a node, to its node page.
    assert!(
        body.contains("href=\"/ui/audit?cluster=app&#38;target=10.0.0.2%3A2552\""),
        "{body}"
    );
    assert!(
        body.contains("href=\"/ui/node?cluster=app&#38;node=10.0.0.2%3A2552\""),
        "{body}"
    );
    // The node page links its entries and counts them; another node has none.
    let (status, node) = page(&app, "/ui/node?cluster=app&node=10.0.0.2:2552").await;
    assert_eq!(status, 200, "{node}");
    assert!(
        node.contains("href=\"/ui/audit?cluster=app&#38;target=10.0.0.2%3A2552\" data-audit-count=\"2\">2 management actions (audit)</a>"),
        "{node}"
    );
    let (_, other) = page(&app, "/ui/node?cluster=app&node=10.0.0.1:2552").await;
    assert!(
        other.contains("data-audit-count=\"0\">0 management actions"),
        "{other}"
    );
    // Filtered by target, in either address form.
    for target in ["10.0.0.2%3A2552", "troupe%3A%2F%2Fapp%4010.0.0.2%3A2552"] {
        let (_, filtered) = page(&app, &format!("/ui/audit?cluster=app&target={target}")).await;
        assert_eq!(
            filtered
                .matches("<tr>\n    <td class=\"mono\"><time")
                .count(),
            2,
            "{target}"
        );
    }
    let (_, none) = page(&app, "/ui/audit?cluster=app&target=10.0.0.1%3A2552").await;
    assert!(
        none.contains("No management actions about this target."),
        "{none}"
    );
    let (status, bad) = page(&app, "/ui/audit?cluster=app&cursor=nonsense").await;
    assert_eq!(status, 400, "{bad}");
    assert!(bad.contains("cursor"), "{bad}");
}

async fn xss_payloads_as_targets_and_reasons_render_only_escaped(store: Store) {
    let cluster = "c<script>alert(1)</script>";
    let batch = BatchBuilder::new(cluster, "10.0.0.1:2552", 1)
        .member(
            1_000,
            EventBody::MemberUp,
            "10.0.0.1:2552",
            MemberStatus::Up,
            &[],
        )
        .sent_at(1_000)
        .build();
    store.ingest(&batch, now_ms()).await.expect("ingest");
    let app = service!(state(store, true));
    let c = hostile::encoded(cluster);
    let payloads = hostile::payloads();
    for p in &payloads {
        let (status, body) = send(
            &app,
            admin(TestRequest::delete()).uri(&format!(
                "/api/v1/clusters/{c}/members/{}",
                hostile::encoded(p)
            )),
        )
        .await;
        assert!(status == 404 || status == 400, "{p:?}: {status} {body}");
    }
    let api = trail_of(&app, &c).await;
    assert_eq!(api.len(), payloads.len(), "every payload recorded");
    let mut shown = vec![false; api.len()];
    let mut cursor = String::new();
    loop {
        let (status, body) = page(&app, &format!("/ui/audit?cluster={c}{cursor}")).await;
        assert_eq!(status, 200);
        assert_inert(&body, &payloads);
        for (entry, shown) in api.iter().zip(shown.iter_mut()) {
            *shown |= body.contains(&hostile::escaped(entry["target"].as_str().unwrap()))
                && body.contains(&hostile::escaped(entry["reason"].as_str().unwrap()));
        }
        match body
            .split("<a href=\"/ui/audit?")
            .find(|part| part.contains("older entries"))
        {
            Some(part) => {
                let query = part.split('"').next().unwrap().replace("&#38;", "&");
                let next = query.split("cursor=").nth(1).unwrap().to_owned();
                cursor = format!("&cursor={next}");
            }
            None => break,
        }
    }
    let missing: Vec<&Value> = api
        .iter()
        .zip(&shown)
        .filter(|(_, shown)| !**shown)
        .map(|(entry, _)| entry)
        .collect();
    assert!(
        missing.is_empty(),
        "targets and reasons not shown escaped: {missing:?}"
    );
    // Each payload as the page's target filter: echoed escaped, its entry found.
    for p in payloads.iter().step_by(3) {
        let (status, body) = page(
            &app,
            &format!("/ui/audit?cluster={c}&target={}", hostile::encoded(p)),
        )
        .await;
        assert_eq!(status, 200, "{p:?}");
        assert_inert(&body, &payloads);
        assert!(
            body.contains(&hostile::escaped(p.trim())) || p.trim().is_empty(),
            "{p:?} echoed escaped"
        );
    }
}

/// Every entry of cluster `c` (percent-encoded), through the API.
async fn trail_of(
    app: &impl actix_web::dev::Service<
        actix_http::Request,
        Response = actix_web::dev::ServiceResponse,
        Error = actix_web::Error,
    >,
    c: &str,
) -> Vec<Value> {
    let mut out = Vec::new();
    let mut cursor = String::new();
    loop {
        let (status, page) = send(
            app,
            TestRequest::get().uri(&format!("/api/v1/clusters/{c}/audit?limit=1000{cursor}")),
        )
        .await;
        assert_eq!(status, 200, "{page}");
        out.extend(page["entries"].as_array().unwrap().iter().cloned());
        match page["next_cursor"].as_str() {
            Some(next) => cursor = format!("&cursor={next}"),
            None => return out,
        }
    }
}

/// Fails if `page` shows any payload unescaped, or carries any script but the dashboard's own.
fn assert_inert(page: &str, payloads: &[String]) {
    for p in payloads {
        if p.contains(['<', '>', '"', '\'']) {
            assert!(
                !page.contains(p.as_str()),
                "payload {p:?} appears unescaped"
            );
        }
    }
    let lower = page.to_ascii_lowercase();
    assert_eq!(
        lower.matches("<script").count(),
        1,
        "only the dashboard's own script"
    );
    assert!(!lower.contains("href=\"javascript"));
    assert!(!lower.contains("src=\"javascript"));
}
