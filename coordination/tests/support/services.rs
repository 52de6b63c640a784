//! Test access to the real services (`scripts/test` starts them): etcd at
//! `TROUPE_TEST_ETCD_ENDPOINTS` and PostgreSQL at `TROUPE_TEST_DATABASE_URL`, each test in its
//! own key prefix or schema. A service that cannot be reached fails the test, never skips it.
//!
//! Include with `#[path = "support/services.rs"] mod services;`.
#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use troupe_coordination::postgres::PgCoordination;

/// The etcd endpoints the tests use.
pub(crate) fn etcd_endpoints() -> Vec<String> {
    std::env::var("TROUPE_TEST_ETCD_ENDPOINTS")
        .unwrap_or_else(|_| "http://127.0.0.1:2379".to_owned())
        .split(',')
        .map(str::to_owned)
        .collect()
}

/// The PostgreSQL admin URL the tests use.
pub(crate) fn database_url() -> String {
    std::env::var("TROUPE_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

fn unique(tag: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    format!(
        "{tag}_{secs}_{}_{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// A fresh etcd key prefix.
pub(crate) fn etcd_prefix(tag: &str) -> String {
    format!("/troupe-test/{}/", unique(tag))
}

/// A connected etcd client; panics (fails the test) when etcd cannot be reached.
pub(crate) async fn etcd_client() -> etcd_client::Client {
    let endpoints = etcd_endpoints();
    let mut client = troupe_coordination::etcd::connect(&endpoints)
        .await
        .unwrap_or_else(|e| {
            panic!("cannot reach etcd at {endpoints:?} (set TROUPE_TEST_ETCD_ENDPOINTS): {e}")
        });
    client.status().await.unwrap_or_else(|e| {
        panic!("etcd at {endpoints:?} does not answer (set TROUPE_TEST_ETCD_ENDPOINTS): {e}")
    });
    client
}

/// Coordination in a fresh schema; schemas of earlier runs older than an hour are dropped.
pub(crate) async fn pg_coordination(tag: &str) -> PgCoordination {
    let url = database_url();
    let schema = unique(&format!("troupe_t_{tag}"));
    let coordination = PgCoordination::connect(&url, &schema)
        .await
        .unwrap_or_else(|e| {
            panic!("cannot set up PostgreSQL at {url} (set TROUPE_TEST_DATABASE_URL): {e}")
        });
    drop_stale_schemas(&coordination).await;
    coordination
}

async fn drop_stale_schemas(coordination: &PgCoordination) {
    let cutoff = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
        .saturating_sub(3600);
    let schemas: Vec<String> = sqlx::query_scalar(
        "SELECT nspname::text FROM pg_namespace WHERE nspname LIKE 'troupe\\_t\\_%'",
    )
    .fetch_all(coordination.pool())
    .await
    .unwrap_or_default();
    for schema in schemas {
        let secs = schema
            .split('_')
            .filter_map(|part| part.parse::<u64>().ok())
            .find(|n| *n > 1_000_000_000);
        if secs.is_some_and(|s| s < cutoff) {
            let _ = sqlx::query(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
                .execute(coordination.pool())
                .await;
        }
    }
}
