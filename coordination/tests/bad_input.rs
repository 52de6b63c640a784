//! A malformed lease value or directory entry in a backend is an error that says where and
//! what, never a panic — and nothing is changed on the strength of it.

#[path = "support/services.rs"]
mod services;

use std::sync::Arc;
use std::time::Duration;

use etcd_client::PutOptions;
use troupe::directory::{Directory, DirectoryError, Revision};
use troupe::lease::{LeaseError, LeaseProvider, LeaseSettings};
use troupe_coordination::etcd::{EtcdDirectory, EtcdLeases};

fn settings() -> LeaseSettings {
    LeaseSettings::new(Duration::from_secs(2), Duration::from_millis(500)).unwrap()
}

fn ignore() -> troupe::lease::LeaseLostCallback {
    Box::new(|_| {})
}

#[tokio::test]
async fn etcd_a_malformed_lease_value_is_an_error_naming_the_key() {
    let mut client = services::etcd_client().await;
    let prefix = services::etcd_prefix("bad-lease");
    let leases = EtcdLeases::new(client.clone(), &prefix).unwrap();
    let key = leases.key("scheduler");
    let grant = client.lease_grant(30, None).await.unwrap();
    client
        .put(
            key.clone(),
            "not json",
            Some(PutOptions::new().with_lease(grant.id())),
        )
        .await
        .unwrap();
    let lease = leases.lease("scheduler", "node-a", &settings()).unwrap();
    let error = lease.acquire(ignore()).await.unwrap_err();
    let LeaseError::Malformed {
        lease: name,
        reason,
    } = &error
    else {
        panic!("expected Malformed, got {error:?}");
    };
    assert_eq!(name, "scheduler");
    assert!(reason.contains(&key), "{reason}");
    assert!(
        reason.contains("expected JSON {\"owner\": string}"),
        "{reason}"
    );
    assert!(!lease.holds());
    let value = client.get(key.clone(), None).await.unwrap();
    assert_eq!(value.kvs()[0].value(), b"not json", "left alone");

    // A well-formed record without an etcd lease would never expire: also refused, with why.
    client
        .put(key.clone(), r#"{"owner":"x"}"#, None)
        .await
        .unwrap();
    let error = lease.acquire(ignore()).await.unwrap_err();
    assert!(
        error.to_string().contains("no etcd lease attached"),
        "{error}"
    );
}

#[tokio::test]
async fn etcd_settings_the_backend_cannot_honour_are_refused_with_the_rule() {
    let client = services::etcd_client().await;
    let leases = EtcdLeases::new(client, &services::etcd_prefix("bad-settings")).unwrap();
    let settings =
        LeaseSettings::new(Duration::from_millis(1500), Duration::from_millis(500)).unwrap();
    let error = leases.lease("x", "a", &settings).unwrap_err();
    assert!(matches!(error, LeaseError::Settings { .. }), "{error:?}");
    assert_eq!(error.code(), "unsupported_settings");
    assert!(
        error.to_string().contains("whole number of seconds"),
        "{error}"
    );
    let error = EtcdLeases::new(services::etcd_client().await, "no-slash").unwrap_err();
    assert!(error.to_string().contains("end with '/'"), "{error}");
}

#[tokio::test]
async fn etcd_a_malformed_claim_is_an_error_in_every_operation_and_the_watch() {
    let mut client = services::etcd_client().await;
    let prefix = services::etcd_prefix("bad-claim");
    let directory = EtcdDirectory::new(client.clone(), &prefix).unwrap();
    let start = directory.snapshot().await.unwrap().revision;
    let mut watch = directory.watch(start).await.unwrap();
    let key = directory.key("actor-1");
    client
        .put(key.clone(), "{\"host\": 7}", None)
        .await
        .unwrap();

    let malformed = |e: DirectoryError| match e {
        DirectoryError::Malformed { key: k, reason } => {
            assert_eq!(k, key);
            assert!(
                reason.contains("expected JSON {\"host\": string}"),
                "{reason}"
            );
        }
        other => panic!("expected Malformed, got {other:?}"),
    };
    malformed(directory.lookup("actor-1").await.unwrap_err());
    malformed(directory.claim("actor-1", "h").await.unwrap_err());
    malformed(directory.release("actor-1", "h").await.unwrap_err());
    malformed(directory.snapshot().await.unwrap_err());
    let event = tokio::time::timeout(Duration::from_secs(10), watch.next())
        .await
        .expect("watch answers")
        .expect("an item");
    malformed(event.unwrap_err());
    // Eviction skips what it cannot read rather than deleting it.
    assert!(directory.evict_host("h").await.unwrap().is_empty());
    assert_eq!(
        client.get(key.clone(), None).await.unwrap().kvs().len(),
        1,
        "left alone"
    );
    // Names no backend can store unambiguously are refused up front.
    let error = directory.claim("a\u{0}b", "h").await.unwrap_err();
    assert!(
        matches!(error, DirectoryError::InvalidActor { .. }),
        "{error:?}"
    );
    assert_eq!(error.code(), "actor_control_character");
}

#[tokio::test]
async fn postgres_malformed_rows_are_errors_naming_the_row() {
    let coordination = services::pg_coordination("bad").await;
    let s = coordination.schema().to_owned();
    let pool = coordination.pool().clone();
    sqlx::query(&format!(
        "INSERT INTO \"{s}\".leases (name, owner, token, expires_at) VALUES ('scheduler', '', 0, now() + interval '1 hour')"
    ))
    .execute(&pool)
    .await
    .unwrap();
    let leases = coordination.leases();
    let lease = leases.lease("scheduler", "node-a", &settings()).unwrap();
    let error = lease.acquire(ignore()).await.unwrap_err();
    assert!(matches!(error, LeaseError::Malformed { .. }), "{error:?}");
    assert!(
        error.to_string().contains("needs a non-empty owner"),
        "{error}"
    );

    let directory: Arc<dyn Directory> = Arc::new(coordination.directory());
    sqlx::query(&format!(
        "INSERT INTO \"{s}\".claims (actor, host, revision) VALUES ('actor-1', '', 5)"
    ))
    .execute(&pool)
    .await
    .unwrap();
    let error = directory.lookup("actor-1").await.unwrap_err();
    let DirectoryError::Malformed { key, reason } = &error else {
        panic!("expected Malformed, got {error:?}");
    };
    assert!(key.contains("claims[\"actor-1\"]"), "{key}");
    assert!(reason.contains("host must not be empty"), "{reason}");

    sqlx::query(&format!(
        "INSERT INTO \"{s}\".claim_changes (revision, actor, host, kind) VALUES (9, 'actor-2', 'h', 'moved')"
    ))
    .execute(&pool)
    .await
    .unwrap();
    let mut watch = directory.watch(Revision(0)).await.unwrap();
    let item = tokio::time::timeout(Duration::from_secs(10), watch.next())
        .await
        .expect("watch answers")
        .expect("an item");
    let error = item.unwrap_err();
    assert!(
        error.to_string().contains("kind \"moved\" is neither"),
        "{error}"
    );
    assert!(error.to_string().contains("revision 9"), "{error}");
}

#[tokio::test]
async fn postgres_schema_names_are_checked() {
    let error = troupe_coordination::postgres::PgCoordination::connect(
        &services::database_url(),
        "Robert'); DROP TABLE",
    )
    .await
    .unwrap_err();
    assert!(error.to_string().contains("is not allowed"), "{error}");
}
