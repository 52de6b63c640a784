//! Member addresses are strings the server does not parse: one holding `/`, `%`, `?`, `#` or
//! leading and trailing spaces is found by its exact spelling, percent-encoded in the path, on
//! every route that takes a member address (`/api/v1/clusters/{cluster}/members/{address}`,
//! Akka's `/management/{cluster}/cluster/members/{address}`, the directory's
//! `/api/v1/coordination/hosts/{host}/evict`), never confused with a member whose address
//! differs only in those characters; a NUL in a reported string is refused naming the field.
//! Every test runs on PostgreSQL and SQLite.

use std::sync::Arc;

use actix_web::http::StatusCode;
use actix_web::test::{TestRequest, call_service, init_service, read_body};
use serde_json::{Value, json};
use troupe_protocol::{EventBody, MemberChange, MemberInfo, MemberStatus};
use troupe_server::coordination::Coordination;
use troupe_server::store::Store;
use troupe_server::testing::BatchBuilder;
use troupe_server::{AppState, Config};

const INGEST: &str = "ingest-secret";
const ADMIN: &str = "admin-secret";
const COORDINATION: &str = "coordination-secret";

troupe_server::on_every_store!(
    a_member_is_found_by_its_exact_spelling_percent_encoded_on_every_member_route,
    down_and_leave_reach_the_member_of_that_exact_spelling_on_both_surfaces,
    a_nul_in_a_reported_string_is_refused_naming_the_field,
);

/// Addresses that differ from `10.0.0.1:2552` (and from each other) only in the characters a
/// path gives a meaning to, or in spaces; and a member spelt as a full address.
const SPELLINGS: [&str; 14] = [
    "10.0.0.1:2552",
    " 10.0.0.1:2552",
    "10.0.0.1:2552 ",
    " 10.0.0.1:2552 ",
    "10.0.0.1:2552/",
    "10.0.0.1/2552",
    "10.0.0.1:2552/../x",
    "10.0.0.1%2F2552",
    "10.0.0.1%:2552",
    "10.0.0.1%25:2552",
    "10.0.0.1:2552?op=Down",
    "10.0.0.1:2552#frag",
    "troupe://app@10.0.0.1:2552",
    "%20 /?#",
];

/// A cluster whose name needs the same care in a path.
const ODD_CLUSTER: &str = "a/b %?#";

/// Every byte but the unreserved ones percent-encoded.
fn encode_all(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// Only what must be encoded, as the OpenAPI document says: `%`, `/`, `?`, `#` and spaces.
fn encode_needed(s: &str) -> String {
    s.replace('%', "%25")
        .replace('/', "%2F")
        .replace('?', "%3F")
        .replace('#', "%23")
        .replace(' ', "%20")
}

fn state(store: Store) -> AppState {
    let mut config = Config::defaults();
    config.ingest_token = Some(INGEST.to_owned());
    config.admin_token = Some(ADMIN.to_owned());
    config.coordination_token = Some(COORDINATION.to_owned());
    config.enable_member_operations = true;
    AppState::new(config, store)
        .0
        .with_coordination(Arc::new(Coordination::new(
            Arc::new(troupe_lease::lease::InMemoryLeaseArbiter::new(
                troupe_lease::lease::LeaseSettings::default(),
            )),
            Arc::new(troupe_lease::directory::InMemoryDirectory::new()),
            "in-memory",
        )))
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

fn up(address: &str, uid: u64) -> EventBody {
    EventBody::MemberUp(MemberChange {
        member: MemberInfo {
            address: address.to_owned(),
            uid,
            status: MemberStatus::Up,
            roles: vec![format!("role-{uid}")],
        },
        previous_status: None,
        observers: Vec::new(),
    })
}

/// Member `SPELLINGS[i]` has uid `i + 1`, in cluster `app` and in [`ODD_CLUSTER`].
async fn seed(
    app: &impl actix_web::dev::Service<
        actix_http::Request,
        Response = actix_web::dev::ServiceResponse,
        Error = actix_web::Error,
    >,
) {
    for cluster in ["app", ODD_CLUSTER] {
        let mut batch = BatchBuilder::new(cluster, "10.0.0.9:2552", 1).sent_at(100_000);
        for (i, address) in SPELLINGS.iter().enumerate() {
            batch = batch.event(1_000 + i as i64, up(address, i as u64 + 1));
        }
        let (status, body) = send(
            app,
            TestRequest::post()
                .uri("/api/v1/ingest")
                .insert_header(("authorization", format!("Bearer {INGEST}")))
                .set_json(batch.build()),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
}

async fn a_member_is_found_by_its_exact_spelling_percent_encoded_on_every_member_route(
    store: Store,
) {
    let app = service!(state(store));
    seed(&app).await;
    let mut checked = 0;
    for cluster in ["app", ODD_CLUSTER] {
        let c = encode_all(cluster);
        let (status, list) = send(
            &app,
            TestRequest::get().uri(&format!("/api/v1/clusters/{c}/members")),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{list}");
        let listed: Vec<&str> = list["members"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["node"].as_str().unwrap())
            .collect();
        for spelling in SPELLINGS {
            assert!(
                listed.contains(&spelling),
                "{spelling:?} listed as reported"
            );
        }
        for (i, spelling) in SPELLINGS.iter().enumerate() {
            let full = format!("troupe://{cluster}@{spelling}");
            // The spelling as written wins: `troupe://app@10.0.0.1:2552` is the member spelt
            // so, where there is one.
            let named_by_full = SPELLINGS.iter().position(|s| *s == full).unwrap_or(i);
            for (written, named) in [
                (encode_all(spelling), i),
                (encode_needed(spelling), i),
                (encode_all(&full), named_by_full),
                (encode_needed(&full), named_by_full),
            ] {
                let spelling = SPELLINGS[named];
                let uid = (named + 1).to_string();
                let full = format!("troupe://{cluster}@{spelling}");
                let (status, body) = send(
                    &app,
                    TestRequest::get().uri(&format!("/api/v1/clusters/{c}/members/{written}")),
                )
                .await;
                assert_eq!(status, StatusCode::OK, "{cluster} {written}: {body}");
                // A spelling of `troupe://app@…` is that member, not the one it would name
                // as a full address.
                assert_eq!(
                    (body["node"].as_str(), body["node_uid"].as_str()),
                    (Some(spelling), Some(uid.as_str())),
                    "{cluster} {written}"
                );
                assert_eq!(body["address"], full);
                let (status, body) = send(
                    &app,
                    TestRequest::get().uri(&format!("/management/{c}/cluster/members/{written}")),
                )
                .await;
                assert_eq!(
                    status,
                    StatusCode::OK,
                    "management {cluster} {written}: {body}"
                );
                assert_eq!(
                    body,
                    json!({"node": full, "nodeUid": uid, "status": "Up", "roles": [format!("role-{uid}")]}),
                    "management {cluster} {written}"
                );
                checked += 2;
            }
        }
        // Near misses name nobody: nothing is trimmed, decoded twice or case-folded.
        for near in [
            "  10.0.0.1:2552",
            "10.0.0.1:2552  ",
            "10.0.0.1%3A2552",
            "10.0.0.1%252F2552",
            "10.0.0.1:2552/..",
            "10.0.0.1:2552?op=down",
            &format!("troupe://{cluster}@ 10.0.0.1:2552  "),
            "troupe://other@10.0.0.1:2552",
        ] {
            let written = encode_all(near);
            let (status, body) = send(
                &app,
                TestRequest::get().uri(&format!("/api/v1/clusters/{c}/members/{written}")),
            )
            .await;
            assert_eq!(status, StatusCode::NOT_FOUND, "{near:?}: {body}");
            let message = body["error"].as_str().unwrap_or_default();
            assert!(message.contains(near), "{message}");
            assert!(message.contains("percent-encoding"), "{message}");
            let (status, body) = send(
                &app,
                TestRequest::get().uri(&format!("/management/{c}/cluster/members/{written}")),
            )
            .await;
            assert_eq!(status, StatusCode::NOT_FOUND, "management {near:?}: {body}");
            assert_eq!(
                body,
                json!({"message": format!("Member [{near}] not found")})
            );
            checked += 2;
        }
    }

    // The directory's hosts: evicting one spelling releases only its claims.
    let coordination = ("authorization", format!("Bearer {COORDINATION}"));
    for (i, host) in SPELLINGS.iter().enumerate() {
        let (status, body) = send(
            &app,
            TestRequest::post()
                .uri(&format!("/api/v1/coordination/claims/actor-{i}"))
                .insert_header(coordination.clone())
                .set_json(json!({ "host": host })),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["won"], true, "{body}");
    }
    for (i, host) in SPELLINGS.iter().enumerate() {
        let written = if i % 2 == 0 {
            encode_all(host)
        } else {
            encode_needed(host)
        };
        let (status, body) = send(
            &app,
            TestRequest::post()
                .uri(&format!("/api/v1/coordination/hosts/{written}/evict"))
                .insert_header(coordination.clone()),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{host:?}: {body}");
        assert_eq!(
            body,
            json!({ "released": [format!("actor-{i}")] }),
            "{host:?}"
        );
        checked += 1;
    }
    assert!(checked > 250, "{checked}");
    println!(
        "{} spellings in 2 clusters, {checked} answers checked",
        SPELLINGS.len()
    );
}

async fn down_and_leave_reach_the_member_of_that_exact_spelling_on_both_surfaces(store: Store) {
    let app = service!(state(store));
    seed(&app).await;
    let admin = ("authorization", format!("Bearer {ADMIN}"));
    let form = ("content-type", "application/x-www-form-urlencoded");
    let mut expected = Vec::new();
    for (i, spelling) in SPELLINGS.iter().enumerate() {
        let full = format!("troupe://app@{spelling}");
        let (request, operation) = match i % 4 {
            0 => (
                TestRequest::put()
                    .uri(&format!(
                        "/api/v1/clusters/app/members/{}",
                        encode_needed(spelling)
                    ))
                    .insert_header(form)
                    .set_payload("operation=Down"),
                "down",
            ),
            1 => (
                TestRequest::delete().uri(&format!(
                    "/api/v1/clusters/app/members/{}",
                    encode_all(&full)
                )),
                "leave",
            ),
            2 => (
                TestRequest::put()
                    .uri(&format!(
                        "/management/app/cluster/members/{}",
                        encode_all(spelling)
                    ))
                    .insert_header(form)
                    .set_payload("operation=Down"),
                "down",
            ),
            _ => (
                TestRequest::delete().uri(&format!(
                    "/management/app/cluster/members/{}",
                    encode_needed(&full)
                )),
                "leave",
            ),
        };
        let (status, body) = send(&app, request.insert_header(admin.clone())).await;
        assert!(
            status == StatusCode::OK || status == StatusCode::ACCEPTED,
            "{spelling:?}: {status} {body}"
        );
        if status == StatusCode::ACCEPTED {
            assert_eq!(body["address"], *spelling, "{body}");
        } else {
            let verb = if operation == "down" {
                "Downing"
            } else {
                "Leaving"
            };
            assert_eq!(body, json!({"message": format!("{verb} {full}")}));
        }
        expected.push(((*spelling).to_owned(), operation.to_owned()));
    }
    // The next agent to report gets each operation for the address exactly as reported.
    let (status, ack) = send(
        &app,
        TestRequest::post()
            .uri("/api/v1/ingest")
            .insert_header(("authorization", format!("Bearer {INGEST}")))
            .set_json(BatchBuilder::new("app", "10.0.0.9:2552", 2).build()),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{ack}");
    let mut delivered: Vec<(String, String)> = ack["operations"]
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
    delivered.sort();
    expected.sort();
    assert_eq!(delivered, expected);
}

async fn a_nul_in_a_reported_string_is_refused_naming_the_field(store: Store) {
    let app = service!(state(store.clone()));
    let nul = "10.0.0.1\u{0}:2552";
    let mut in_role = BatchBuilder::new("app", "10.0.0.9:2552", 1)
        .event(1, up("10.0.0.1:2552", 1))
        .event(2, up("10.0.0.2:2552", 2))
        .build();
    if let EventBody::MemberUp(change) = &mut in_role.events[1].body {
        change.member.roles.push("a\u{0}".to_owned());
    }
    let cases = [
        (
            BatchBuilder::new("app", "10.0.0.9:2552", 1)
                .event(1, up(nul, 1))
                .build(),
            "events[0].member.address",
        ),
        (BatchBuilder::new("app", nul, 1).build(), "identity.node"),
        (in_role, "events[1].member.roles[1]"),
        (
            BatchBuilder::new("app", "10.0.0.9:2552", 1)
                .dead_letter(1, "/user/a", "app::Ping")
                .depth_tick(2, &[("/user/\u{0}", None, 1)])
                .build(),
            "depth_samples[0].samples[0].path",
        ),
    ];
    for (batch, field) in cases {
        let (status, body) = send(
            &app,
            TestRequest::post()
                .uri("/api/v1/ingest")
                .insert_header(("authorization", format!("Bearer {INGEST}")))
                .set_json(&batch),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{field}: {body}");
        assert_eq!(
            body["error"],
            format!("{field} contains NUL (\\u0000); strings must not contain NUL"),
            "{body}"
        );
    }
    assert!(store.clusters().await.unwrap().is_empty(), "nothing stored");
}
