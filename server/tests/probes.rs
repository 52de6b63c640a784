//! `GET /livez` and `GET /readyz` in-process on both backends: ready only when the store
//! answers with every migration applied, not ready (quickly) when the database hangs or is
//! gone, and while shutting down; live throughout.

use std::time::{Duration, Instant};

use actix_web::test::{TestRequest, call_service, init_service, read_body};
use serde_json::Value;
use sqlx::{Connection, Executor};
use troupe_server::store::Store;
use troupe_server::testing::{TestDatabase, TestSqliteFile};
use troupe_server::{AppState, Config};

#[path = "support/cut_proxy.rs"]
mod cut_proxy;
use cut_proxy::CutProxy;

macro_rules! service {
    ($state:expr) => {
        init_service(actix_web::App::new().configure(troupe_server::api::configure($state))).await
    };
}

async fn probe(
    app: &impl actix_web::dev::Service<
        actix_http::Request,
        Response = actix_web::dev::ServiceResponse,
        Error = actix_web::Error,
    >,
    path: &str,
) -> (u16, Value) {
    let resp = call_service(app, TestRequest::get().uri(path).to_request()).await;
    let status = resp.status().as_u16();
    let body = read_body(resp).await;
    (
        status,
        serde_json::from_slice(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body:?}")),
    )
}

fn state(store: Store) -> (AppState, troupe_server::ShutdownTrigger) {
    let mut config = Config::defaults();
    config.ingest_token = Some("t".to_owned());
    AppState::new(config, store)
}

/// Removes the bookkeeping row of the newest migration, as if the schema were one behind.
async fn forget_newest_migration(url: &str, postgres: bool) -> i64 {
    let sql_newest = "SELECT MAX(version) FROM _sqlx_migrations";
    if postgres {
        let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
        let newest: i64 = sqlx::query_scalar(sql_newest)
            .fetch_one(&mut conn)
            .await
            .unwrap();
        conn.execute(format!("DELETE FROM _sqlx_migrations WHERE version = {newest}").as_str())
            .await
            .unwrap();
        newest
    } else {
        let mut conn = sqlx::SqliteConnection::connect(url).await.unwrap();
        let newest: i64 = sqlx::query_scalar(sql_newest)
            .fetch_one(&mut conn)
            .await
            .unwrap();
        conn.execute(format!("DELETE FROM _sqlx_migrations WHERE version = {newest}").as_str())
            .await
            .unwrap();
        newest
    }
}

async fn ready_live_and_a_missing_migration(store: Store, url: &str, postgres: bool) {
    let (state, trigger) = state(store);
    let app = service!(state);
    assert_eq!(
        probe(&app, "/livez").await,
        (200, serde_json::json!({"status": "live"}))
    );
    assert_eq!(
        probe(&app, "/readyz").await,
        (200, serde_json::json!({"status": "ready"}))
    );

    let missing = forget_newest_migration(url, postgres).await;
    let (status, body) = probe(&app, "/readyz").await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["status"], "not-ready");
    let reason = body["reason"].as_str().unwrap();
    assert!(
        reason.contains(&format!("migration {missing}")) && reason.contains("not applied"),
        "{reason}"
    );
    assert_eq!(
        probe(&app, "/livez").await.0,
        200,
        "a schema behind is not a dead process"
    );

    trigger.shutdown();
    let (status, body) = probe(&app, "/readyz").await;
    assert_eq!((status, body["status"].as_str()), (503, Some("draining")));
    assert_eq!(probe(&app, "/livez").await.0, 200);
}

#[actix_web::test]
async fn postgres_readyz_is_200_only_with_every_migration_applied_and_503_while_draining() {
    let db = TestDatabase::create().await;
    let store = db.store().await.unwrap();
    ready_live_and_a_missing_migration(store.clone(), db.url(), true).await;
    store.close().await;
}

#[actix_web::test]
async fn sqlite_readyz_is_200_only_with_every_migration_applied_and_503_while_draining() {
    let file = TestSqliteFile::new();
    let store = file.store().await.unwrap();
    let url = format!("sqlite://{}", file.path().display());
    ready_live_and_a_missing_migration(store.clone(), &url, false).await;
    store.close().await;
}

#[actix_web::test]
async fn readyz_answers_503_within_a_second_when_the_database_hangs_and_livez_stays_200() {
    let db = TestDatabase::create().await;
    let (host_port, rest) = db
        .url()
        .split_once('@')
        .map(|(_, r)| r.split_once('/').unwrap())
        .unwrap();
    let target = tokio::net::lookup_host(host_port)
        .await
        .unwrap()
        .next()
        .unwrap();
    let proxy = CutProxy::start(target).await;
    let credentials = db.url().split_once('@').unwrap().0;
    let through_proxy = format!("{credentials}@{}/{rest}", proxy.addr());
    let store = Store::connect_postgres(&through_proxy, 2).await.unwrap();
    let (state, _trigger) = state(store.clone());
    let app = service!(state);
    assert_eq!(probe(&app, "/readyz").await.0, 200);

    proxy.cut();
    let started = Instant::now();
    let (status, body) = probe(&app, "/readyz").await;
    let took = started.elapsed();
    assert_eq!(status, 503, "{body}");
    assert!(
        body["reason"]
            .as_str()
            .unwrap()
            .contains("did not answer within 800 ms"),
        "{body}"
    );
    assert!(
        took < Duration::from_millis(1_500),
        "readiness must answer within a probe's timeout, took {took:?}"
    );
    assert_eq!(probe(&app, "/livez").await.0, 200);
    drop(app);
    drop(proxy);
}

#[actix_web::test]
async fn readyz_names_the_database_error_when_the_database_is_gone() {
    let db = TestDatabase::create().await;
    let store = db.store().await.unwrap();
    let (state, _trigger) = state(store.clone());
    let app = service!(state);
    assert_eq!(probe(&app, "/readyz").await.0, 200);
    let url = db.url().to_owned();
    drop(db); // DROP DATABASE … WITH (FORCE): the pool's connections are cut.
    let (status, body) = probe(&app, "/readyz").await;
    assert_eq!(status, 503, "{body}");
    let reason = body["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("the database does not answer"),
        "{url}: {reason}"
    );
    assert_eq!(probe(&app, "/livez").await.0, 200);
    store.close().await;
}
