//! The web dashboard in-process: every page renders with seeded history, shows what was
//! ingested, links pages together, serves its assets with the right headers, and shows a corpus
//! of XSS payloads (in every user-controlled field and filter) only as escaped text. Every test
//! runs on PostgreSQL and SQLite.

use actix_web::http::StatusCode;
use actix_web::test::{TestRequest, call_service, init_service, read_body};
use troupe_protocol::{
    AgentHealth, DroppedCounts, EventBody, HandOverCompleted, HandOverTimedOut, HealthChange,
    LeaderChange, MemberChange, MemberStatus, ReportBatch, RouteesChange, RouterStarted,
    RoutingStrategy, SingletonInstance,
};
use troupe_server::store::Store;
use troupe_server::testing::BatchBuilder;
use troupe_server::{AppState, Config};

#[path = "support/hostile.rs"]
mod hostile;

use hostile::{encoded, escaped, hostile_batch, member, payloads};

const INGEST: &str = "ingest-secret";

troupe_server::on_every_store!(
    every_page_renders_the_seeded_history_and_links_pages_together,
    overlapping_singleton_instances_raise_a_warning,
    dead_letters_page_counts_per_recipient_and_reason_before_the_rows,
    xss_payloads_in_every_field_and_filter_render_only_escaped,
);

#[test]
fn the_hostile_corpus_folder_holds_only_files_the_tests_read() {
    hostile::corpus_is_complete();
    assert!(hostile::strings().len() > 150);
    assert!(hostile::numbers().len() > 20);
}

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

/// GETs `uri` and returns status, headers of interest and body.
macro_rules! get {
    ($app:expr, $uri:expr) => {{
        let resp = call_service(&$app, TestRequest::get().uri(&$uri).to_request()).await;
        let status = resp.status();
        let csp = resp
            .headers()
            .get("content-security-policy")
            .map(|v| v.to_str().unwrap().to_owned());
        let body = String::from_utf8(read_body(resp).await.to_vec()).unwrap();
        (status, csp, body)
    }};
}

fn now() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// A small cluster: two members (one leads), a singleton handed over, a router, dead letters
/// and depth samples.
fn seed(t: i64) -> Vec<ReportBatch> {
    let a = "10.0.0.1:2552";
    let b = "10.0.0.2:2552";
    let first = BatchBuilder::new("prod", a, 1)
        .sent_at(t)
        .member(
            t - 600_000,
            EventBody::MemberUp,
            a,
            MemberStatus::Up,
            &["worker"],
        )
        .member(
            t - 500_000,
            EventBody::MemberUp,
            b,
            MemberStatus::Up,
            &["worker", "api"],
        )
        .event(
            t - 590_000,
            EventBody::LeaderChanged(LeaderChange {
                leader: Some(a.to_owned()),
            }),
        )
        .event(
            t - 400_000,
            EventBody::SingletonStarted(SingletonInstance {
                singleton: "billing".to_owned(),
                role: Some("worker".to_owned()),
                host: a.to_owned(),
                backoff_ms: None,
                reason: None,
            }),
        )
        .event(
            t - 300_000,
            EventBody::RouterStarted(RouterStarted {
                router: "/user/orders".to_owned(),
                strategy: RoutingStrategy::RoundRobin,
                role: Some("worker".to_owned()),
                routee_path: "/user/order-worker".to_owned(),
            }),
        )
        .event(
            t - 299_000,
            EventBody::RouteesChanged(RouteesChange {
                router: "/user/orders".to_owned(),
                strategy: RoutingStrategy::RoundRobin,
                routees: vec![a.to_owned(), b.to_owned()],
            }),
        )
        .event(
            t - 200_000,
            EventBody::AgentHealthChanged(HealthChange {
                health: AgentHealth::Ready,
                reason: None,
            }),
        )
        .dead_letter(t - 120_000, "/user/gone", "OrderPlaced")
        .dropped(DroppedCounts {
            dead_letters: 3,
            ..DroppedCounts::default()
        });
    // A sample every 5 s for three minutes (charts of many agents read part of each minute),
    // the newest the deepest.
    let first = (1..=32)
        .fold(first, |batch, i| {
            let depth = if i == 32 { 42 } else { 5 };
            batch.depth_tick(
                t - 180_000 + i * 5_000,
                &[("/user/order-worker", Some("/user/orders"), depth)],
            )
        })
        .build();
    let second = BatchBuilder::new("prod", b, 1)
        .sent_at(t)
        .event(
            t - 100_000,
            EventBody::SingletonHandOverCompleted(HandOverCompleted {
                singleton: "billing".to_owned(),
                role: Some("worker".to_owned()),
                new_host: b.to_owned(),
                duration_ms: 1_250,
            }),
        )
        .event(
            t - 99_000,
            EventBody::SingletonStarted(SingletonInstance {
                singleton: "billing".to_owned(),
                role: Some("worker".to_owned()),
                host: b.to_owned(),
                backoff_ms: None,
                reason: None,
            }),
        )
        .event(
            t - 98_000,
            EventBody::MemberUnreachable(MemberChange {
                observers: vec![b.to_owned()],
                ..member(a, MemberStatus::Up, &["worker"])
            }),
        )
        .depth_tick(
            t - 10_000,
            &[("/user/order-worker", Some("/user/orders"), 7)],
        )
        .build();
    vec![first, second]
}

/// The `<tr>`s of the table with `class` in `page`, as text.
fn table_rows<'a>(page: &'a str, class: &str) -> Vec<&'a str> {
    let start = page
        .find(&format!("<table class=\"{class}\">"))
        .unwrap_or_else(|| panic!("no table {class}: {page}"));
    let table = &page[start..start + page[start..].find("</table>").unwrap()];
    table.split("<tr>").skip(2).collect()
}

async fn dead_letters_page_counts_per_recipient_and_reason_before_the_rows(store: Store) {
    let app = service!(state(store));
    let t = now();
    let batch = BatchBuilder::new("prod", "10.0.0.1:2552", 1)
        .sent_at(t)
        .dead_letter_because(t - 50_000, "/user/gone", "OrderPlaced", "recipient stopped")
        .dead_letter_because(t - 40_000, "/user/gone", "OrderPaid", "recipient stopped")
        .dead_letter_because(t - 30_000, "/user/busy", "OrderPlaced", "mailbox full")
        .dead_letter_because(t - 20_000, "/user/gone", "OrderPlaced", "recipient stopped")
        // Outside the 15-minute range.
        .dead_letter_because(
            t - 1_800_000,
            "/user/old",
            "OrderPlaced",
            "recipient stopped",
        )
        .build();
    ingest!(app, batch);
    let (status, _, page) = get!(app, "/ui/dead-letters?cluster=prod&range=15m");
    assert_eq!(status, StatusCode::OK, "{page}");
    let groups = table_rows(&page, "dead-letter-groups");
    assert_eq!(groups.len(), 2, "{page}");
    for (row, (recipient, reason, count)) in groups.iter().zip([
        ("/user/gone", "recipient stopped", "3"),
        ("/user/busy", "mailbox full", "1"),
    ]) {
        assert!(
            row.contains(&format!(">{recipient}</a>"))
                && row.contains(&format!("<td>{reason}</td>"))
                && row.contains(&format!("<td class=\"num\">{count}</td>")),
            "{recipient} {reason} {count}: {row}"
        );
    }
    assert!(
        groups[0]
            .contains("/ui/dead-letters?cluster=prod&#38;range=15m&#38;recipient=%2Fuser%2Fgone"),
        "a group links to its recipient's rows: {}",
        groups[0]
    );
    assert!(
        page.find("dead-letter-groups").unwrap()
            < page.find("<table class=\"dead-letters\">").unwrap(),
        "groups come before the rows"
    );
    assert_eq!(table_rows(&page, "dead-letters").len(), 4);

    let (_, _, typed) = get!(
        app,
        "/ui/dead-letters?cluster=prod&range=15m&message_type=OrderPlaced"
    );
    let groups = table_rows(&typed, "dead-letter-groups");
    assert!(
        groups.len() == 2 && groups[0].contains("/user/gone") && groups[0].contains(">2</td>"),
        "the exact filters narrow the groups: {typed}"
    );
    let (_, _, wide) = get!(app, "/ui/dead-letters?cluster=prod&range=1h");
    assert_eq!(table_rows(&wide, "dead-letter-groups").len(), 3, "{wide}");
}

async fn every_page_renders_the_seeded_history_and_links_pages_together(store: Store) {
    let app = service!(state(store));
    let t = now();
    for batch in seed(t) {
        ingest!(app, batch);
    }
    let (status, csp, overview) = get!(app, "/ui/");
    assert_eq!(status, StatusCode::OK, "{overview}");
    let csp = csp.expect("pages carry a CSP");
    assert!(
        csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"),
        "{csp}"
    );
    for expected in [
        "data-member=\"10.0.0.1:2552\"",
        "data-member=\"10.0.0.2:2552\"",
        "badge leader",
        ">ready<",
        "unreachable</span> <span class=\"small muted\">as seen by</span>",
        "/ui/node?cluster=prod&#38;node=10.0.0.1%3A2552",
        "/ui/timeline?cluster=prod&#38;subject=10.0.0.1%3A2552",
        "UTC",
    ] {
        assert!(
            overview.contains(expected),
            "overview lacks {expected}: {overview}"
        );
    }
    assert!(
        overview.contains("<div class=\"value\">3</div><div class=\"label\">reports dropped"),
        "{overview}"
    );

    let (status, _, timeline) = get!(app, "/ui/timeline?cluster=prod");
    assert_eq!(status, StatusCode::OK, "{timeline}");
    assert!(timeline.contains("member lifetimes"), "{timeline}");
    assert!(
        timeline.contains("class=\"leader\""),
        "the leader band is drawn: {timeline}"
    );
    assert!(
        timeline.contains("SingletonHandOverCompleted"),
        "{timeline}"
    );
    let (_, _, filtered) = get!(app, "/ui/timeline?cluster=prod&kind=LeaderChanged");
    assert!(
        filtered.contains("new leader 10.0.0.1:2552") && !filtered.contains("\">MemberUp</span>"),
        "{filtered}"
    );
    let (status, _, bad) = get!(app, "/ui/timeline?cluster=prod&range=forever");
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(bad.contains("like 15m, 1h or 7d"), "{bad}");

    let (status, _, singletons) = get!(app, "/ui/singletons?cluster=prod");
    assert_eq!(status, StatusCode::OK, "{singletons}");
    assert!(
        singletons.contains("data-singleton=\"billing\""),
        "{singletons}"
    );
    assert!(
        singletons.contains("1.2 s") || singletons.contains("1.3 s"),
        "hand-over duration: {singletons}"
    );
    assert!(
        singletons.contains("/ui/node?cluster=prod&#38;node=10.0.0.2%3A2552"),
        "host links to its node: {singletons}"
    );
    assert!(
        !singletons.contains("Two live instances"),
        "a clean hand-over is no overlap"
    );

    let (status, _, routers) = get!(app, "/ui/routers?cluster=prod");
    assert_eq!(status, StatusCode::OK, "{routers}");
    assert!(
        routers.contains("data-router=\"/user/orders\"") && routers.contains("round-robin"),
        "{routers}"
    );
    assert!(routers.contains("<polyline"), "a depth chart: {routers}");
    assert!(
        routers.contains("<b>42</b>"),
        "deepest mailbox now: {routers}"
    );

    let (status, _, dead) = get!(app, "/ui/dead-letters?cluster=prod");
    assert_eq!(status, StatusCode::OK, "{dead}");
    assert!(
        dead.contains("/user/gone")
            && dead.contains("OrderPlaced")
            && dead.contains("recipient stopped"),
        "{dead}"
    );
    assert!(dead.contains("<rect class=\"bar\""), "a rate chart: {dead}");
    let (_, _, searched) = get!(app, "/ui/dead-letters?cluster=prod&q=nothing-like-this");
    assert!(searched.contains("No dead letters match."), "{searched}");
    let (_, _, searched) = get!(app, "/ui/dead-letters?cluster=prod&q=orderplaced");
    assert!(searched.contains("/user/gone"), "{searched}");

    let (status, _, node) = get!(app, "/ui/node?cluster=prod&node=10.0.0.1%3A2552");
    assert_eq!(status, StatusCode::OK, "{node}");
    for expected in [
        "ready",
        "dead letters",
        "<span class=\"badge warn\">3</span>",
        "/user/order-worker",
        "LeaderChanged",
    ] {
        assert!(
            node.contains(expected),
            "node page lacks {expected}: {node}"
        );
    }
    let (status, _, _) = get!(app, "/ui/node?cluster=prod&node=nowhere");
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _, _) = get!(app, "/ui/?cluster=nope");
    assert_eq!(status, StatusCode::NOT_FOUND);

    let resp = call_service(&app, TestRequest::get().uri("/").to_request()).await;
    assert_eq!(resp.status(), StatusCode::FOUND);
    let version = troupe_web::assets::version();
    for (name, content_type) in [
        ("app.css", "text/css"),
        ("live.js", "text/javascript"),
        ("favicon.svg", "image/svg+xml"),
    ] {
        let resp = call_service(
            &app,
            TestRequest::get()
                .uri(&format!("/ui/assets/{name}?v={version}"))
                .to_request(),
        )
        .await;
        assert_eq!(resp.status(), StatusCode::OK);
        let header = |h: &str| resp.headers().get(h).unwrap().to_str().unwrap().to_owned();
        assert!(header("content-type").starts_with(content_type));
        assert!(header("cache-control").contains("immutable"));
        let unversioned = call_service(
            &app,
            TestRequest::get()
                .uri(&format!("/ui/assets/{name}"))
                .to_request(),
        )
        .await;
        assert_eq!(
            unversioned.headers().get("cache-control").unwrap(),
            "no-cache"
        );
    }
    let missing = call_service(
        &app,
        TestRequest::get().uri("/ui/assets/nope.js").to_request(),
    )
    .await;
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
}

async fn overlapping_singleton_instances_raise_a_warning(store: Store) {
    let app = service!(state(store));
    let t = now();
    let instance = |singleton: &str, host: &str| SingletonInstance {
        singleton: singleton.to_owned(),
        role: None,
        host: host.to_owned(),
        backoff_ms: None,
        reason: None,
    };
    let started = |host: &str| EventBody::SingletonStarted(instance("ledger", host));
    ingest!(
        app,
        BatchBuilder::new("prod", "a:1", 1)
            .event(t - 60_000, started("a:1"))
            .event(
                t - 30_000,
                EventBody::SingletonHandOverTimedOut(HandOverTimedOut {
                    singleton: "ledger".to_owned(),
                    role: None,
                    new_host: "b:1".to_owned(),
                    silent_peers: vec!["a:1".to_owned()],
                    duration_ms: 5_000,
                }),
            )
            .event(t - 29_000, started("b:1"))
            // The old host reports its stop only after the new instance started: two ran.
            .event(
                t - 20_000,
                EventBody::SingletonStopped(instance("ledger", "a:1")),
            )
            // Another singleton whose old host never reported a stop: unknown, not two.
            .event(
                t - 60_000,
                EventBody::SingletonStarted(instance("audit", "a:1")),
            )
            .event(
                t - 29_000,
                EventBody::SingletonStarted(instance("audit", "b:1")),
            )
            .build()
    );
    let (status, _, page) = get!(app, "/ui/singletons?cluster=prod");
    assert_eq!(status, StatusCode::OK);
    assert!(
        page.contains("Two live instances at once:</b> a:1 and b:1"),
        "{page}"
    );
    assert_eq!(
        page.matches("Two live instances at once").count(),
        1,
        "only the ledger's overlap is known: {page}"
    );
    assert!(
        page.contains("Perhaps two instances at once (unknown):</b> b:1 started at"),
        "{page}"
    );
    assert!(page.contains("while a:1 had not reported a stop"), "{page}");
    assert!(
        page.contains("<div class=\"value\">1</div><div class=\"label\">hand-overs timed out"),
        "{page}"
    );
}

/// Fails if `page` shows any payload unescaped, or carries any script but the dashboard's own.
fn assert_inert(page: &str, payloads: &[String], where_: &str) {
    for p in payloads {
        if p.contains(['<', '>', '"', '\'']) {
            assert!(
                !page.contains(p.as_str()),
                "{where_}: payload {p:?} appears unescaped"
            );
        }
    }
    let lower = page.to_ascii_lowercase();
    assert_eq!(
        lower.matches("<script").count(),
        1,
        "{where_}: only the dashboard's own script"
    );
    assert!(!lower.contains("href=\"javascript"), "{where_}");
    assert!(!lower.contains("src=\"javascript"), "{where_}");
}

async fn xss_payloads_in_every_field_and_filter_render_only_escaped(store: Store) {
    let app = service!(state(store));
    let t = now();
    let payloads = payloads();
    let cluster = "c<script>alert(1)</script>";
    for p in &payloads {
        ingest!(app, hostile_batch(cluster, p, t));
    }
    let c = encoded(cluster);
    let pages = [
        format!("/ui/?cluster={c}"),
        format!("/ui/timeline?cluster={c}"),
        format!("/ui/timeline?cluster={c}&kind=singleton"),
        format!("/ui/singletons?cluster={c}"),
        format!("/ui/routers?cluster={c}"),
        format!("/ui/dead-letters?cluster={c}"),
    ];
    let mut shown = Vec::new();
    for uri in &pages {
        let (status, _, page) = get!(app, uri);
        assert_eq!(status, StatusCode::OK, "{uri}");
        assert!(
            page.contains(&escaped(cluster)),
            "{uri} names the cluster escaped"
        );
        assert_inert(&page, &payloads, uri);
        shown.push(page);
    }
    // The cluster map, on the overview and alone: every payload (address, machine, role,
    // singleton, router, routee) only as escaped text, in boxes and in their tooltips.
    let (status, _, fragment) = get!(app, format!("/ui/map?cluster={c}"));
    assert_eq!(status, StatusCode::OK, "the map fragment");
    for p in &payloads {
        if p.contains(['<', '>', '"', '\'']) {
            assert!(
                !fragment.contains(p.as_str()),
                "map: {p:?} appears unescaped"
            );
        }
        let e = escaped(p);
        assert!(
            fragment.contains(&format!("data-node=\"{e}\"")),
            "the map draws a box for {p:?}, escaped"
        );
        assert!(
            shown[0].contains(&format!("data-node=\"{e}\"")),
            "the overview's map draws {p:?}, escaped"
        );
    }
    let lower = fragment.to_ascii_lowercase();
    assert!(!lower.contains("<script"), "the map carries no script");
    assert!(
        !lower.contains("href=\"javascript"),
        "map links stay on the dashboard"
    );
    let routers = payloads
        .iter()
        .filter(|p| shown[4].contains(&format!("data-router=\"{}\"", escaped(p))))
        .count();
    assert_eq!(
        routers, 50,
        "the routers page shows the first 50 routers, escaped"
    );
    for p in &payloads {
        let e = escaped(p);
        // Member rows and dead-letter rows show every payload.
        assert!(shown[0].contains(&e), "overview shows {p:?} escaped");
        assert!(shown[5].contains(&e), "dead letters show {p:?} escaped");
        let q = encoded(p);
        let (status, _, page) = get!(app, format!("/ui/node?cluster={c}&node={q}"));
        assert_eq!(status, StatusCode::OK, "node page of {p:?}");
        assert!(page.contains(&e), "the node page of {p:?} shows it escaped");
        assert_inert(&page, &payloads, "node page");
    }
    // Filters echo what was typed; a sample of the corpus keeps this test quick.
    for p in payloads.iter().step_by(5) {
        let (e, q) = (escaped(p), encoded(p));
        for uri in [
            format!("/ui/dead-letters?cluster={c}&q={q}"),
            format!("/ui/dead-letters?cluster={c}&recipient={q}&message_type={q}&range=15m"),
            format!("/ui/timeline?cluster={c}&subject={q}&node={q}&kind=membership"),
        ] {
            let (status, _, page) = get!(app, uri);
            assert_eq!(status, StatusCode::OK, "{uri}");
            assert!(page.contains(&e), "{uri} shows the payload escaped");
            assert_inert(&page, &payloads, &uri);
        }
    }
    // Error pages repeat what was asked for: escaped too.
    for p in payloads.iter().step_by(5) {
        let (status, _, page) = get!(app, format!("/ui/?cluster={}", encoded(p)));
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert_inert(&page, &payloads, "error page");
    }
}
