//! The cluster map on the overview (and alone at `/ui/map`) for a cluster of 3 and of 50
//! nodes: one box per member in its machine's frame with the hosts counted, the leader and the
//! singleton's host marked, an arrow from the observer to the member it cannot reach, the
//! silent agent greyed, and a depth bar per routee. Prints the overview's render time at 50
//! nodes. Every test runs on PostgreSQL and SQLite.

use std::time::Instant;

use actix_web::http::StatusCode;
use actix_web::test::{TestRequest, call_service, init_service, read_body};
use troupe_protocol::{
    AgentHealth, AgentMeta, EventBody, HealthChange, LeaderChange, MemberChange, MemberInfo,
    MemberStatus, ReportBatch, RouteesChange, RouterStarted, RoutingStrategy, SingletonInstance,
};
use troupe_server::store::Store;
use troupe_server::testing::BatchBuilder;
use troupe_server::{AppState, Config};

troupe_server::on_every_store!(
    the_map_of_three_nodes_marks_leader_singleton_unreachability_silence_and_depth,
    the_map_of_fifty_nodes_draws_every_node_in_its_machine_and_renders_quickly,
);

fn now() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

fn address(i: usize) -> String {
    format!("10.0.{}.{}:2552", i / 200, i % 200 + 1)
}

/// Node `i` runs on machine `machine-{i / 3}`.
fn machine(i: usize) -> String {
    format!("machine-{}", i / 3)
}

const ROUTER: &str = "/user/orders";

/// Node 0 leads and reports every member up and the router with every node a routee; node 1
/// hosts the singleton `billing`; node 2 cannot reach node 1; the last node's agent last
/// reported a minute ago (silent); every node samples its routee's depth (node `i`: `i`).
fn cluster(n: usize, t: i64) -> Vec<(ReportBatch, i64)> {
    let all: Vec<String> = (0..n).map(address).collect();
    (0..n)
        .map(|i| {
            let me = &all[i];
            let received = if i == n - 1 { t - 60_000 } else { t };
            let mut b = BatchBuilder::new("prod", me, 1).sent_at(received).event(
                received - 10,
                EventBody::AgentHealthChanged(HealthChange {
                    health: AgentHealth::Ready,
                    reason: None,
                }),
            );
            if i == 0 {
                for a in &all {
                    b = b.member(
                        t - 90_000,
                        EventBody::MemberUp,
                        a,
                        MemberStatus::Up,
                        &["worker"],
                    );
                }
                b = b
                    .event(
                        t - 89_000,
                        EventBody::LeaderChanged(LeaderChange {
                            leader: Some(me.clone()),
                        }),
                    )
                    .event(
                        t - 80_000,
                        EventBody::RouterStarted(RouterStarted {
                            router: ROUTER.to_owned(),
                            strategy: RoutingStrategy::SmallestMailbox,
                            role: Some("worker".to_owned()),
                            routee_path: "/user/order-worker".to_owned(),
                        }),
                    )
                    .event(
                        t - 79_000,
                        EventBody::RouteesChanged(RouteesChange {
                            router: ROUTER.to_owned(),
                            strategy: RoutingStrategy::SmallestMailbox,
                            routees: all.clone(),
                        }),
                    );
            }
            if i == 1 {
                b = b.event(
                    t - 70_000,
                    EventBody::SingletonStarted(SingletonInstance {
                        singleton: "billing".to_owned(),
                        role: Some("worker".to_owned()),
                        host: me.clone(),
                        backoff_ms: None,
                        reason: None,
                    }),
                );
            }
            if i == 0 {
                b = b.event(
                    t - 60_000,
                    EventBody::MemberUnreachable(MemberChange {
                        member: MemberInfo {
                            address: all[1].clone(),
                            uid: 7,
                            status: MemberStatus::Up,
                            roles: vec!["worker".to_owned()],
                        },
                        previous_status: None,
                        observers: vec![me.clone()],
                    }),
                );
            }
            let depth = u32::try_from(i).unwrap();
            b = b.depth_tick(received - 5, &[("/user/order-worker", Some(ROUTER), depth)]);
            let mut batch = b.build();
            batch.identity.meta = AgentMeta {
                node: Some(machine(i)),
            };
            (batch, received)
        })
        .collect()
}

async fn seeded(store: &Store, n: usize) {
    let t = now();
    let mut batches = cluster(n, t);
    // In the order they arrived: the silent agent's last report first.
    batches.sort_by_key(|(_, received)| *received);
    for (batch, received) in batches {
        store.ingest(&batch, received).await.expect("ingest");
    }
}

macro_rules! get {
    ($app:expr, $uri:expr) => {{
        let resp = call_service(&$app, TestRequest::get().uri($uri).to_request()).await;
        assert_eq!(resp.status(), StatusCode::OK, "GET {}", $uri);
        String::from_utf8(read_body(resp).await.to_vec()).unwrap()
    }};
}

macro_rules! service {
    ($store:expr) => {{
        let state = AppState::new(Config::defaults(), $store).0;
        init_service(
            actix_web::App::new()
                .configure(troupe_server::api::configure(state))
                .configure(troupe_server::ui::configure),
        )
        .await
    }};
}

/// The map's `<figure>` in `page`.
fn map_of(page: &str) -> &str {
    let start = page
        .find("<figure id=\"cluster-map\"")
        .expect("the page has the map");
    let end = start + page[start..].find("</figure>").expect("the map ends");
    &page[start..end]
}

/// The opening tag and content of node `address`'s box.
fn node_box<'a>(map: &'a str, address: &str) -> &'a str {
    let at = map
        .find(&format!("data-node=\"{address}\""))
        .unwrap_or_else(|| panic!("no box for {address}"));
    let start = map[..at].rfind("<g class=\"node").expect("box opening");
    let end = at + map[at..].find("</g>").expect("box end");
    &map[start..end]
}

/// Routee `address`'s row.
fn routee<'a>(map: &'a str, address: &str) -> &'a str {
    let at = map
        .find(&format!("data-routee=\"{address}\""))
        .unwrap_or_else(|| panic!("no routee row for {address}"));
    let end = at + map[at..].find("</g>").expect("row end");
    &map[at..end]
}

/// The width of the filled part of a routee row's depth bar.
fn fill_width(row: &str) -> i64 {
    let rect = &row[row.find("<rect class=\"depth\"").expect("a depth bar")..];
    let width = &rect[rect.find("width=\"").unwrap() + 7..];
    width[..width.find('"').unwrap()].parse().unwrap()
}

/// The class attribute of a box.
fn classes(node: &str) -> Vec<&str> {
    let rest = &node["<g class=\"".len()..];
    rest[..rest.find('"').unwrap()].split(' ').collect()
}

/// What every map of [`cluster`] shows, whatever its size.
fn assert_structure(map: &str, n: usize) {
    assert_eq!(
        map.matches("<g class=\"node ").count(),
        n,
        "one box per member"
    );
    let machines = n.div_ceil(3);
    assert_eq!(map.matches("<g class=\"machine\"").count(), machines);
    for m in 0..machines {
        let hosts = (n - 3 * m).min(3);
        assert!(
            map.contains(&format!(
                "data-machine=\"machine-{m}\" data-hosts=\"{hosts}\""
            )),
            "machine-{m} counts {hosts} hosts"
        );
        assert!(map.contains(&format!(
            "machine-{m} · {hosts} host{}",
            if hosts == 1 { "" } else { "s" }
        )));
    }
    // The leader.
    let leader = node_box(map, &address(0));
    assert!(classes(leader).contains(&"leader"), "{leader}");
    assert!(leader.contains('★'));
    assert_eq!(
        map.matches("class=\"leader-mark\"").count(),
        1,
        "one leader"
    );
    // The singleton's host.
    let host = node_box(map, &address(1));
    assert!(host.contains("data-singletons=\"1\""), "{host}");
    assert!(host.contains("◆ billing"), "{host}");
    assert_eq!(map.matches("data-singletons=\"1\"").count(), 1);
    // Node 0 cannot reach node 1: one arrow, from observer to subject.
    assert_eq!(map.matches("<line class=\"unreachable\"").count(), 1);
    assert!(map.contains(&format!(
        "data-observer=\"{}\" data-subject=\"{}\"",
        address(0),
        address(1)
    )));
    assert!(map.contains("marker-end=\"url(#map-arrow)\""));
    // The silent agent, and only it, is greyed.
    let silent = node_box(map, &address(n - 1));
    assert!(classes(silent).contains(&"silent"), "{silent}");
    assert!(
        silent.contains("unknown"),
        "its health reads unknown: {silent}"
    );
    assert_eq!(map.matches(" silent\"").count(), 1, "one silent box");
    // A depth bar per routee with its latest depth; the deepest fills its track.
    assert!(map.contains(&format!("data-router=\"{ROUTER}\"")));
    assert_eq!(map.matches("<g class=\"routee\"").count(), n);
    for i in 0..n - 1 {
        assert!(
            map.contains(&format!(
                "data-routee=\"{}\" data-depth=\"{i}\"",
                address(i)
            )),
            "routee {i} shows depth {i}"
        );
    }
    let quiet = routee(map, &address(n - 1));
    assert!(
        quiet.contains("data-depth=\"\"") && quiet.contains("no sample"),
        "the silent node's sample is older than a minute: {quiet}"
    );
    assert_eq!(map.matches("<rect class=\"depth\"").count(), n);
    assert_eq!(
        fill_width(routee(map, &address(n - 2))),
        90,
        "the deepest fills its track"
    );
    assert_eq!(
        fill_width(routee(map, &address(0))),
        0,
        "an empty mailbox draws no bar"
    );
    assert!(map.contains("no report from its agent for more than 15.0 s"));
}

async fn the_map_of_three_nodes_marks_leader_singleton_unreachability_silence_and_depth(
    store: Store,
) {
    seeded(&store, 3).await;
    let app = service!(store);
    let page = get!(app, "/ui/?cluster=prod");
    let map = map_of(&page);
    assert!(map.contains("<svg class=\"map\""), "server-rendered SVG");
    assert_structure(map, 3);
    // The fragment the page's script fetches is the same map.
    let fragment = get!(app, "/ui/map?cluster=prod");
    assert_structure(map_of(&fragment), 3);
    assert!(!fragment.contains("<html"), "the fragment is the map alone");
}

async fn the_map_of_fifty_nodes_draws_every_node_in_its_machine_and_renders_quickly(store: Store) {
    seeded(&store, 50).await;
    let app = service!(store);
    let page = get!(app, "/ui/?cluster=prod");
    assert_structure(map_of(&page), 50);
    // Render time of the whole overview (store reads, layout, template) at 50 nodes.
    let runs = 20;
    let started = Instant::now();
    for _ in 0..runs {
        let page = get!(app, "/ui/?cluster=prod");
        assert!(page.len() > 10_000);
    }
    let per_page = started.elapsed() / runs;
    println!(
        "overview with the map at 50 nodes: {per_page:?} per render (mean of {runs}, in-process, {} bytes)",
        page.len()
    );
}
