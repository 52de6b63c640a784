//! Issue 14, item 4: two clusters of the same name are never merged in the control plane, and
//! an ingest token scoped to one cluster cannot write another's history. In-process (actix
//! test service); every test runs on PostgreSQL and SQLite.

use actix_web::http::StatusCode;
use actix_web::test::{TestRequest, call_service, init_service, read_body};
use serde_json::{Value, json};
use troupe_protocol::{
    EventBody, LeaderChange, MemberStatus, ReportBatch, RouteesChange, RoutingStrategy,
    SingletonInstance,
};
use troupe_server::store::Store;
use troupe_server::testing::BatchBuilder;
use troupe_server::{AppState, Config};

const INGEST: &str = "ingest-secret";
const ADMIN: &str = "admin-secret";

troupe_server::on_every_store!(
    two_clusters_of_one_name_with_different_secrets_stay_apart_and_a_leave_goes_to_the_right_one,
    reports_without_an_identity_are_still_accepted_and_kept_apart_from_those_with_one,
    a_cluster_scoped_token_cannot_write_another_clusters_history,
    a_malformed_identity_or_a_key_of_another_identity_is_refused_and_nothing_merged,
    every_route_that_names_a_cluster_lists_409_and_answers_it_for_a_bare_name_two_clusters_share,
);

/// What `troupe-agent` sends for cluster `shop` with two different secrets (any 64 hex digits
/// do for the server; the agent's derivation is tested in the agent crate).
const LEGIT: &str = "1111111111111111aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const INTRUDER: &str = "2222222222222222bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
const LEGIT_KEY: &str = "shop~1111111111111111";
const INTRUDER_KEY: &str = "shop~2222222222222222";

fn config(adjust: impl FnOnce(&mut Config)) -> Config {
    let mut config = Config::defaults();
    config.ingest_token = Some(INGEST.to_owned());
    config.admin_token = Some(ADMIN.to_owned());
    config.enable_member_operations = true;
    adjust(&mut config);
    config
}

macro_rules! service {
    ($store:expr, $adjust:expr) => {
        init_service(
            actix_web::App::new().configure(troupe_server::api::configure(
                AppState::new(config($adjust), $store).0,
            )),
        )
        .await
    };
}

fn ingest(batch: &ReportBatch, token: &str) -> actix_http::Request {
    TestRequest::post()
        .uri("/api/v1/ingest")
        .insert_header(("content-type", "application/json"))
        .insert_header(("authorization", format!("Bearer {token}")))
        .set_payload(serde_json::to_vec(batch).unwrap())
        .to_request()
}

async fn body_json(resp: actix_web::dev::ServiceResponse) -> Value {
    let bytes = read_body(resp).await;
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{e}: {bytes:?}"))
}

/// `(status, body)` of a GET.
macro_rules! get {
    ($app:expr, $uri:expr) => {{
        let resp = call_service(&$app, TestRequest::get().uri($uri).to_request()).await;
        (resp.status(), body_json(resp).await)
    }};
}

/// `(status, body)` of an ingest.
macro_rules! send {
    ($app:expr, $batch:expr, $token:expr) => {{
        let resp = call_service(&$app, ingest(&$batch, $token)).await;
        (resp.status(), body_json(resp).await)
    }};
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

fn routees(list: &[&str]) -> EventBody {
    EventBody::RouteesChanged(RouteesChange {
        router: "/user/workers".into(),
        strategy: RoutingStrategy::RoundRobin,
        routees: list.iter().map(|r| (*r).to_owned()).collect(),
    })
}

/// A cluster's current state as one agent of it reports it: `members` up, the first one
/// leader, singleton host and only routee.
fn state_of(node: &str, identity: Option<&str>, sequence: u64, members: &[&str]) -> ReportBatch {
    let mut batch = BatchBuilder::new("shop", node, sequence);
    if let Some(identity) = identity {
        batch = batch.cluster_identity(identity);
    }
    for (i, member) in members.iter().enumerate() {
        batch = batch.member(
            1 + i as i64,
            EventBody::MemberUp,
            member,
            MemberStatus::Up,
            &[],
        );
    }
    batch
        .event(
            10,
            EventBody::LeaderChanged(LeaderChange {
                leader: Some(members[0].into()),
            }),
        )
        .event(11, EventBody::SingletonStarted(instance(members[0])))
        .event(
            12,
            routees(&[&format!("troupe://shop@{}/user/w", members[0])]),
        )
        .build()
}

fn nodes_of(members: &Value) -> Vec<String> {
    members["members"]
        .as_array()
        .unwrap_or_else(|| panic!("no members in {members:#}"))
        .iter()
        .map(|m| m["node"].as_str().unwrap().to_owned())
        .collect()
}

/// The issue's scenario: a node with the wrong secret formed its own `shop` and reported to
/// the same server. Its members, leader, singleton host and routees stay in its own cluster; an
/// operator's Leave for a member of the real cluster reaches the real cluster's agents only.
async fn two_clusters_of_one_name_with_different_secrets_stay_apart_and_a_leave_goes_to_the_right_one(
    store: Store,
) {
    let app = service!(store.clone(), |_| {});
    let legit = &["10.0.0.1:2552", "10.0.0.2:2552", "10.0.0.3:2552"];
    let (status, _) = send!(app, state_of(legit[0], Some(LEGIT), 1, legit), INGEST);
    assert_eq!(status, StatusCode::OK);
    let (status, _) = send!(
        app,
        state_of("10.0.0.9:2552", Some(INTRUDER), 1, &["10.0.0.9:2552"]),
        INGEST
    );
    assert_eq!(status, StatusCode::OK);

    let (_, clusters) = get!(app, "/api/v1/clusters");
    let shown: Vec<(String, String, String)> = clusters
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["key"].as_str().unwrap().to_owned(),
                c["name"].as_str().unwrap().to_owned(),
                c["identity_fingerprint"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        shown,
        [
            (LEGIT_KEY.into(), "shop".into(), "1111111111111111".into()),
            (
                INTRUDER_KEY.into(),
                "shop".into(),
                "2222222222222222".into()
            ),
        ],
        "two clusters, told apart by their identity's fingerprint: {clusters:#}"
    );
    assert!(
        !clusters.to_string().contains(&LEGIT[16..]),
        "the API shows a fingerprint, not the whole identity"
    );

    let (_, members) = get!(app, &format!("/api/v1/clusters/{LEGIT_KEY}/members"));
    assert_eq!(nodes_of(&members), legit, "{members:#}");
    assert_eq!(members["leader"], legit[0]);
    assert_eq!(members["cluster"], LEGIT_KEY);
    let (_, intruder) = get!(app, &format!("/api/v1/clusters/{INTRUDER_KEY}/members"));
    assert_eq!(nodes_of(&intruder), ["10.0.0.9:2552"], "{intruder:#}");
    assert_eq!(intruder["leader"], "10.0.0.9:2552");
    let (_, singletons) = get!(app, &format!("/api/v1/clusters/{LEGIT_KEY}/singletons"));
    assert_eq!(singletons[0]["host"], legit[0], "{singletons:#}");
    let (_, routers) = get!(app, &format!("/api/v1/clusters/{LEGIT_KEY}/routers"));
    assert_eq!(
        routers[0]["routees"],
        json!([format!("troupe://shop@{}/user/w", legit[0])]),
        "{routers:#}"
    );

    // The bare name is ambiguous now: refused, naming both keys, for reads and operations.
    let (status, ambiguous) = get!(app, "/api/v1/clusters/shop/members");
    assert_eq!(status, StatusCode::CONFLICT, "{ambiguous:#}");
    let message = ambiguous["error"].as_str().unwrap();
    assert!(
        message.contains(LEGIT_KEY) && message.contains(INTRUDER_KEY),
        "{message}"
    );
    let refused = call_service(
        &app,
        TestRequest::delete()
            .uri(&format!("/api/v1/clusters/shop/members/{}", legit[1]))
            .insert_header(("authorization", format!("Bearer {ADMIN}")))
            .to_request(),
    )
    .await;
    assert_eq!(refused.status(), StatusCode::CONFLICT);

    // A Leave for the real cluster's member, by its key and by its full address.
    let accepted = call_service(
        &app,
        TestRequest::delete()
            .uri(&format!(
                "/api/v1/clusters/{LEGIT_KEY}/members/troupe:%2F%2Fshop@{}",
                legit[1]
            ))
            .insert_header(("authorization", format!("Bearer {ADMIN}")))
            .to_request(),
    )
    .await;
    assert_eq!(accepted.status(), StatusCode::ACCEPTED);
    let id = body_json(accepted).await["id"].as_i64().unwrap();
    // The intruder's agent reports first: the Leave is not its to carry out.
    let (_, ack) = send!(
        app,
        BatchBuilder::new("shop", "10.0.0.9:2552", 2)
            .cluster_identity(INTRUDER)
            .build(),
        INGEST
    );
    assert_eq!(ack["operations"], json!([]), "{ack:#}");
    let (_, ack) = send!(
        app,
        BatchBuilder::new("shop", legit[2], 1)
            .cluster_identity(LEGIT)
            .build(),
        INGEST
    );
    assert_eq!(
        ack["operations"],
        json!([{"id": id, "address": legit[1], "operation": "leave"}]),
        "{ack:#}"
    );
    // The intruder's member is unknown to the real cluster.
    let unknown = call_service(
        &app,
        TestRequest::delete()
            .uri(&format!(
                "/api/v1/clusters/{LEGIT_KEY}/members/10.0.0.9:2552"
            ))
            .insert_header(("authorization", format!("Bearer {ADMIN}")))
            .to_request(),
    )
    .await;
    assert_eq!(unknown.status(), StatusCode::NOT_FOUND);
}

/// Agents from before the cluster identity send none: their cluster is keyed by its name, as
/// before, and a cluster of the same name that reports an identity is another cluster.
async fn reports_without_an_identity_are_still_accepted_and_kept_apart_from_those_with_one(
    store: Store,
) {
    let app = service!(store.clone(), |_| {});
    let old = br#"{"version":1,"identity":{"cluster":"shop","node":"10.0.0.1:2552","incarnation":"1"},"sequence":"1","sent_at_ms":0,
        "events":[{"at_ms":1,"kind":"MemberUp","member":{"address":"10.0.0.1:2552","uid":"1","status":"up","roles":[]}}]}"#;
    let resp = call_service(
        &app,
        TestRequest::post()
            .uri("/api/v1/ingest")
            .insert_header(("content-type", "application/json"))
            .insert_header(("authorization", format!("Bearer {INGEST}")))
            .set_payload(old.to_vec())
            .to_request(),
    )
    .await;
    let status = resp.status();
    assert_eq!(status, StatusCode::OK, "{}", body_json(resp).await);
    let (status, cluster) = get!(app, "/api/v1/clusters/shop");
    assert_eq!(status, StatusCode::OK, "{cluster:#}");
    assert_eq!(cluster["key"], "shop");
    assert_eq!(cluster["identity_fingerprint"], Value::Null);

    let (status, _) = send!(
        app,
        state_of("10.0.0.5:2552", Some(LEGIT), 1, &["10.0.0.5:2552"]),
        INGEST
    );
    assert_eq!(status, StatusCode::OK);
    // `shop` is the key of the cluster without identity; the other has its own key.
    let (_, members) = get!(app, "/api/v1/clusters/shop/members");
    assert_eq!(nodes_of(&members), ["10.0.0.1:2552"], "{members:#}");
    let (_, members) = get!(app, &format!("/api/v1/clusters/{LEGIT_KEY}/members"));
    assert_eq!(nodes_of(&members), ["10.0.0.5:2552"], "{members:#}");
    let (_, clusters) = get!(app, "/api/v1/clusters");
    assert_eq!(clusters.as_array().unwrap().len(), 2, "{clusters:#}");
}

/// `--cluster-ingest-token shop=…`: the token writes `shop` only; a batch claiming another
/// cluster is refused with 403 naming both, and nothing of it is stored.
async fn a_cluster_scoped_token_cannot_write_another_clusters_history(store: Store) {
    let scoped = |c: &mut Config| {
        c.ingest_token = None;
        c.cluster_ingest_tokens = vec![
            "shop=shop-token".parse().unwrap(),
            "billing=billing-token".parse().unwrap(),
        ];
    };
    let app = service!(store.clone(), scoped);
    let shop = BatchBuilder::new("shop", "10.0.0.1:2552", 1)
        .member(
            1,
            EventBody::MemberUp,
            "10.0.0.1:2552",
            MemberStatus::Up,
            &[],
        )
        .build();
    let billing = BatchBuilder::new("billing", "10.0.1.1:2552", 1)
        .member(
            1,
            EventBody::MemberUp,
            "10.0.1.1:2552",
            MemberStatus::Up,
            &[],
        )
        .build();
    let (status, body) = send!(app, shop, "shop-token");
    assert_eq!(status, StatusCode::OK, "{body:#}");
    let (status, body) = send!(app, billing, "shop-token");
    assert_eq!(status, StatusCode::FORBIDDEN, "{body:#}");
    let message = body["error"].as_str().unwrap();
    assert!(
        message.contains("scoped to cluster `shop`") && message.contains("`billing`"),
        "{message}"
    );
    let (status, _) = get!(app, "/api/v1/clusters/billing");
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "nothing of billing is stored"
    );
    // Nor under a name that differs only by its identity.
    let (status, _) = send!(
        app,
        BatchBuilder::new("billing", "10.0.1.1:2552", 2)
            .cluster_identity(LEGIT)
            .build(),
        "shop-token"
    );
    assert_eq!(status, StatusCode::FORBIDDEN);
    // No global token was configured: none is made up, the old one is refused.
    let (status, _) = send!(app, billing, INGEST);
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _) = send!(app, billing, "billing-token");
    assert_eq!(status, StatusCode::OK);
    let (_, members) = get!(app, "/api/v1/clusters/shop/members");
    assert_eq!(nodes_of(&members), ["10.0.0.1:2552"], "{members:#}");

    // With a global token as well, it still admits every cluster.
    let app = service!(store.clone(), |c: &mut Config| {
        scoped(c);
        c.ingest_token = Some(INGEST.to_owned());
    });
    let other = BatchBuilder::new("other", "10.0.2.1:2552", 1).build();
    let (status, _) = send!(app, other, INGEST);
    assert_eq!(status, StatusCode::OK);
    let (status, _) = send!(app, other, "shop-token");
    assert_eq!(status, StatusCode::FORBIDDEN);
}

/// A cluster identity that is not 64 lowercase hex digits, or a name with the key separator,
/// is bad input (400); an identity whose fingerprint another stored cluster already holds is
/// refused (409) rather than merged into it.
async fn a_malformed_identity_or_a_key_of_another_identity_is_refused_and_nothing_merged(
    store: Store,
) {
    let app = service!(store.clone(), |_| {});
    for (batch, needle) in [
        (
            BatchBuilder::new("shop", "a:1", 1)
                .cluster_identity("the cluster secret itself")
                .build(),
            "identity.cluster_identity must be 64 lowercase hex digits",
        ),
        (
            BatchBuilder::new("shop", "a:1", 1)
                .cluster_identity(&LEGIT.to_uppercase())
                .build(),
            "identity.cluster_identity must be 64 lowercase hex digits",
        ),
        (
            BatchBuilder::new(LEGIT_KEY, "a:1", 1).build(),
            "identity.cluster must not contain `~`",
        ),
    ] {
        let (status, body) = send!(app, batch, INGEST);
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body:#}");
        assert!(body["error"].as_str().unwrap().contains(needle), "{body:#}");
    }
    assert!(store.clusters().await.unwrap().is_empty());

    let (status, _) = send!(app, state_of("a:1", Some(LEGIT), 1, &["a:1"]), INGEST);
    assert_eq!(status, StatusCode::OK);
    // Same first 16 digits, another identity: the same key, never the same cluster.
    let twin = format!("{}{}", &LEGIT[..16], "c".repeat(48));
    let (status, body) = send!(app, state_of("x:1", Some(&twin), 1, &["x:1"]), INGEST);
    assert_eq!(status, StatusCode::CONFLICT, "{body:#}");
    assert!(
        body["error"].as_str().unwrap().contains(LEGIT_KEY),
        "{body:#}"
    );
    let (_, members) = get!(app, &format!("/api/v1/clusters/{LEGIT_KEY}/members"));
    assert_eq!(nodes_of(&members), ["a:1"], "{members:#}");
    assert_eq!(members["leader"], "a:1");
}

/// Every operation of the OpenAPI document that names a cluster (in its path or as the
/// `cluster` query parameter) lists 409, and answers it for a bare name two clusters share.
async fn every_route_that_names_a_cluster_lists_409_and_answers_it_for_a_bare_name_two_clusters_share(
    store: Store,
) {
    let app = service!(store, |_| {});
    for (identity, node) in [(LEGIT, "10.0.0.1:2552"), (INTRUDER, "10.0.0.9:2552")] {
        let batch = BatchBuilder::new("shop", node, 1)
            .cluster_identity(identity)
            .member(1, EventBody::MemberUp, node, MemberStatus::Up, &["w"])
            .build();
        let (status, body) = send!(app, batch, INGEST);
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    let doc = troupe_server::api::openapi::document_value();
    let mut checked = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            let in_query = operation["parameters"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|p| p["name"] == "cluster" && p["in"] == "query");
            if !path.contains("{cluster}") && !in_query {
                continue;
            }
            assert!(
                operation["responses"]["409"].is_object(),
                "{method} {path} does not list 409 for a shared bare name"
            );
            let mut uri = path
                .replace("{cluster}", "shop")
                .replace("{address}", "10.0.0.1:2552")
                .replace("{name}", "billing");
            assert!(
                !uri.contains('{'),
                "{method} {path}: a path parameter this test does not fill"
            );
            // The cluster, and whatever else the operation requires (an actor path will do).
            let mut query = Vec::new();
            if in_query {
                query.push("cluster=shop".to_owned());
            }
            for parameter in operation["parameters"].as_array().into_iter().flatten() {
                if parameter["in"] == "query"
                    && parameter["required"] == true
                    && parameter["name"] != "cluster"
                {
                    query.push(format!(
                        "{}=%2Fuser%2Fw",
                        parameter["name"].as_str().unwrap()
                    ));
                }
            }
            // One of two optional parameters is needed here: a router's path.
            if path.ends_with("/routers/depth") {
                query.push("router=%2Fuser%2Fw".to_owned());
            }
            if !query.is_empty() {
                uri = format!("{uri}?{}", query.join("&"));
            }
            let request = TestRequest::default()
                .method(method.to_uppercase().parse().unwrap())
                .uri(&uri)
                .insert_header(("authorization", format!("Bearer {ADMIN}")))
                .insert_header(("content-type", "application/x-www-form-urlencoded"))
                .set_payload("operation=Down")
                .to_request();
            let resp = call_service(&app, request).await;
            let status = resp.status();
            let body = String::from_utf8_lossy(&read_body(resp).await).into_owned();
            assert_eq!(status, StatusCode::CONFLICT, "{method} {uri}: {body}");
            assert!(
                body.contains(LEGIT_KEY) && body.contains(INTRUDER_KEY),
                "{method} {uri}: the answer lists both keys: {body}"
            );
            checked.push(format!("{method} {path}"));
        }
    }
    assert!(checked.len() >= 19, "{checked:?}");
}
