//! Issue 14 (reports survive a stop): the whole batches an agent's report spool gave up
//! (`dropped.spool_batches`) are stored as a running total per agent incarnation (the largest
//! seen, whatever order batches arrive in), returned by the API (`dropped.spool_batches` on
//! members and nodes) and shown on the node page next to the other dropped counts. Every test
//! runs on PostgreSQL and SQLite.

use actix_web::http::StatusCode;
use actix_web::test::{TestRequest, call_service, init_service, read_body};
use serde_json::Value;
use troupe_protocol::{DroppedCounts, EventBody, MemberStatus};
use troupe_server::store::Store;
use troupe_server::testing::BatchBuilder;
use troupe_server::{AppState, Config};

troupe_server::on_every_store!(spool_batches_are_stored_returned_and_shown);

macro_rules! get_text {
    ($app:expr, $uri:expr) => {{
        let resp = call_service(&$app, TestRequest::get().uri($uri).to_request()).await;
        assert_eq!(resp.status(), StatusCode::OK, "GET {}", $uri);
        String::from_utf8(read_body(resp).await.to_vec()).unwrap()
    }};
}

async fn spool_batches_are_stored_returned_and_shown(store: Store) {
    let dropped = |spool_batches, depth_samples| DroppedCounts {
        spool_batches,
        depth_samples,
        ..DroppedCounts::default()
    };
    let newer = BatchBuilder::new("app", "a:1", 2)
        .member(1, EventBody::MemberUp, "a:1", MemberStatus::Up, &[])
        .dropped(dropped(9, 4))
        .build();
    let older = BatchBuilder::new("app", "a:1", 1)
        .dropped(dropped(3, 1))
        .build();
    store.ingest(&newer, 1).await.unwrap();
    store.ingest(&older, 2).await.unwrap();
    let cluster = store.cluster("app").await.unwrap().expect("cluster").id;
    let agent = &store.agents(cluster).await.unwrap()[0];
    assert_eq!(
        (agent.dropped_spool_batches, agent.dropped_depth_samples),
        (9, 4),
        "the largest running total is kept"
    );

    let app = init_service(
        actix_web::App::new()
            .configure(troupe_server::api::configure(
                AppState::new(Config::defaults(), store).0,
            ))
            .configure(troupe_server::ui::configure),
    )
    .await;
    let nodes: Value = serde_json::from_str(&get_text!(app, "/api/v1/clusters/app/nodes")).unwrap();
    assert_eq!(nodes[0]["dropped"]["spool_batches"], 9, "{nodes}");
    assert_eq!(nodes[0]["dropped"]["depth_samples"], 4, "{nodes}");
    let members: Value =
        serde_json::from_str(&get_text!(app, "/api/v1/clusters/app/members")).unwrap();
    assert_eq!(
        members["members"][0]["agent"]["dropped"]["spool_batches"], 9,
        "{members}"
    );

    let page = get_text!(app, "/ui/node?cluster=app&node=a%3A1");
    let row = "<tr><td>spooled batches given up</td><td class=\"num\"><span class=\"badge warn\">9</span></td></tr>";
    assert!(page.contains(row), "the node page lacks {row}: {page}");
    let depth = page
        .find("<td>depth samples</td>")
        .expect("depth samples row");
    assert!(
        page.find(row).unwrap() > depth,
        "next to the other dropped counts"
    );
}
