//! The dashboard's time ranges fit the data: a cluster younger than a page's default range
//! gets its age (rounded up to a step) by default, so its history fills the charts; an explicit
//! `range` in the address always wins; a bad one is refused with a 400 page naming the
//! parameter and what it allows. Every test runs on PostgreSQL and SQLite.

use actix_web::http::StatusCode;
use actix_web::test::{TestRequest, call_service, init_service, read_body};
use troupe_protocol::{
    EventBody, LeaderChange, MemberStatus, ReportBatch, RouteesChange, RouterStarted,
    RoutingStrategy,
};
use troupe_server::store::Store;
use troupe_server::testing::BatchBuilder;
use troupe_server::{AppState, Config};

const INGEST: &str = "ingest-secret";
const A: &str = "10.0.0.1:2552";

troupe_server::on_every_store!(
    a_young_clusters_pages_default_to_its_age_and_an_explicit_range_wins,
    an_older_clusters_pages_default_to_the_last_hour,
    a_bad_range_is_refused_naming_the_parameter_on_every_page,
);

fn state(store: Store) -> AppState {
    let mut config = Config::defaults();
    config.ingest_token = Some(INGEST.to_owned());
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

macro_rules! ingest {
    ($app:expr, $batch:expr) => {{
        let req = TestRequest::post()
            .uri("/api/v1/ingest")
            .insert_header(("content-type", "application/json"))
            .insert_header(("authorization", format!("Bearer {INGEST}")))
            .set_payload(serde_json::to_vec(&$batch).unwrap())
            .to_request();
        let resp = call_service(&$app, req).await;
        assert_eq!(resp.status(), StatusCode::OK, "ingest");
    }};
}

macro_rules! get {
    ($app:expr, $uri:expr) => {{
        let resp = call_service(&$app, TestRequest::get().uri(&$uri).to_request()).await;
        let status = resp.status();
        let body = String::from_utf8(read_body(resp).await.to_vec()).unwrap();
        (status, body)
    }};
}

fn now() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// A cluster whose history starts `age_ms` ago: a member up (and leading) then, a router whose
/// routee reports its depth every 5 s from then on, a dead letter half-way.
fn cluster(name: &str, t: i64, age_ms: i64) -> ReportBatch {
    let start = t - age_ms;
    let batch = BatchBuilder::new(name, A, 1)
        .sent_at(t)
        .member(start, EventBody::MemberUp, A, MemberStatus::Up, &["worker"])
        .event(
            start,
            EventBody::LeaderChanged(LeaderChange {
                leader: Some(A.to_owned()),
            }),
        )
        .event(
            start + 1_000,
            EventBody::RouterStarted(RouterStarted {
                router: "/user/orders".to_owned(),
                strategy: RoutingStrategy::RoundRobin,
                role: Some("worker".to_owned()),
                routee_path: "/user/order-worker".to_owned(),
            }),
        )
        .event(
            start + 1_000,
            EventBody::RouteesChanged(RouteesChange {
                router: "/user/orders".to_owned(),
                strategy: RoutingStrategy::RoundRobin,
                routees: vec![A.to_owned()],
            }),
        )
        .dead_letter(start + age_ms / 2, "/user/gone", "OrderPlaced");
    let ticks = (age_ms / 5_000).min(200);
    (0..ticks)
        .fold(batch, |batch, i| {
            batch.depth_tick(
                t - i * 5_000,
                &[(
                    "/user/order-worker",
                    Some("/user/orders"),
                    3 + (i % 4) as u32,
                )],
            )
        })
        .build()
}

/// The pages with a time range, for cluster `c`.
fn ranged_pages(c: &str) -> [String; 4] {
    [
        format!("/ui/timeline?cluster={c}"),
        format!("/ui/dead-letters?cluster={c}"),
        format!("/ui/routers?cluster={c}"),
        format!("/ui/node?cluster={c}&node=10.0.0.1%3A2552"),
    ]
}

/// The `x` of the member's first `up` span on the timeline, and the plot's left and right.
fn up_span_x(timeline: &str) -> (i64, i64, i64) {
    let number_after = |marker: &str, from: usize| -> (i64, usize) {
        let at = timeline[from..]
            .find(marker)
            .unwrap_or_else(|| panic!("no {marker:?}: {timeline}"))
            + from
            + marker.len();
        let digits: String = timeline[at..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        (digits.parse().unwrap(), at)
    };
    let (left, at) = number_after("<rect class=\"row\" x=\"", 0);
    let (width, _) = number_after("width=\"", at);
    let (x, _) = number_after("<rect class=\"up\" x=\"", 0);
    (x, left, left + width)
}

async fn a_young_clusters_pages_default_to_its_age_and_an_explicit_range_wins(store: Store) {
    let app = service!(state(store));
    let t = now();
    // Two minutes and ten seconds old: the default range is the next step, three minutes.
    ingest!(app, cluster("young", t, 130_000));
    for uri in ranged_pages("young") {
        let (status, page) = get!(app, uri);
        assert_eq!(status, StatusCode::OK, "{uri}: {page}");
        assert!(
            page.contains(
                "<option value=\"3m\" selected>last 3 minutes (since the cluster started)</option>"
            ),
            "{uri} defaults to the cluster's age: {page}"
        );
        assert!(
            page.contains("<option value=\"1h\">last hour</option>"),
            "{uri} still offers the usual ranges: {page}"
        );
        let (status, asked) = get!(app, format!("{uri}&range=1h"));
        assert_eq!(status, StatusCode::OK, "{uri}&range=1h");
        assert!(
            asked.contains("<option value=\"1h\" selected>last hour</option>")
                && !asked.contains("value=\"3m\""),
            "{uri}: an explicit range wins: {asked}"
        );
        // Another spelling of a usual range is the same choice.
        let (_, respelled) = get!(app, format!("{uri}&range=60m"));
        assert!(
            respelled.contains("<option value=\"1h\" selected>"),
            "{uri}&range=60m: {respelled}"
        );
    }
    // The member's life fills most of the picture instead of its right-most pixels: it started
    // 130 s into a 180 s range, so its span starts before the range's third.
    let (_, timeline) = get!(app, "/ui/timeline?cluster=young");
    let (x, left, right) = up_span_x(&timeline);
    assert!(
        x < left + (right - left) / 3,
        "up from {x} in [{left}, {right}]: {timeline}"
    );
    let (_, hour) = get!(app, "/ui/timeline?cluster=young&range=1h");
    let (x, left, right) = up_span_x(&hour);
    assert!(
        x > left + (right - left) * 9 / 10,
        "over the hour asked for, a sliver at the right: {x} in [{left}, {right}]"
    );
    // The dead letter half-way is in the default range's chart and table.
    let (_, dead) = get!(app, "/ui/dead-letters?cluster=young");
    assert!(
        dead.contains("<rect class=\"bar\"") && dead.contains("/user/gone"),
        "{dead}"
    );
}

async fn an_older_clusters_pages_default_to_the_last_hour(store: Store) {
    let app = service!(state(store));
    let t = now();
    ingest!(app, cluster("old", t, 2 * 3_600_000));
    // Forty-six minutes is past the last step below an hour: the default stays the hour.
    ingest!(app, cluster("middling", t, 46 * 60_000));
    for c in ["old", "middling"] {
        for uri in ranged_pages(c) {
            let (status, page) = get!(app, uri);
            assert_eq!(status, StatusCode::OK, "{uri}: {page}");
            assert!(
                page.contains("<option value=\"1h\" selected>last hour</option>")
                    && !page.contains("since the cluster started"),
                "{uri}: {page}"
            );
        }
    }
}

async fn a_bad_range_is_refused_naming_the_parameter_on_every_page(store: Store) {
    let app = service!(state(store));
    ingest!(app, cluster("young", now(), 130_000));
    for uri in ranged_pages("young") {
        for bad in ["forever", "0m", "8d", "1.5h", "%3Cb%3E"] {
            let (status, page) = get!(app, format!("{uri}&range={bad}"));
            assert_eq!(status, StatusCode::BAD_REQUEST, "{uri}&range={bad}");
            assert!(
                page.contains("The <code>range</code> parameter")
                    || page.contains("The `range` parameter"),
                "{uri}&range={bad} names the parameter: {page}"
            );
            assert!(
                page.contains("from 1m to 7d, like 15m, 1h or 7d"),
                "{uri}&range={bad} says what is allowed: {page}"
            );
            assert!(!page.contains("<b>"), "the bad value is escaped: {page}");
        }
    }
}
