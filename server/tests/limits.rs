//! Field limits on ingest, in-process on PostgreSQL and SQLite: an over-long identifier is
//! refused with 400 naming its JSON path, length and limit; over-long free text is stored
//! shortened and marked; every string of the report format has a limit, and a batch with every
//! field at its limit is stored (on PostgreSQL: under the btree row limit). A store failure
//! answers a generic 500 without the database's text.

#[path = "support/every_field.rs"]
mod every_field;

use actix_web::http::StatusCode;
use actix_web::test::{TestRequest, call_service, init_service, read_body};
use serde_json::Value;
use troupe_protocol::limits::FieldClass;
use troupe_server::store::Store;
use troupe_server::testing::BatchBuilder;
use troupe_server::{AppState, Config};

use every_field::{every_field_batch, incompressible, leaf_mut, string_paths};

const INGEST: &str = "ingest-secret";

/// What a test needs to break the database under the store.
enum Backend {
    Postgres(String),
    Sqlite(std::path::PathBuf),
}

macro_rules! limits_suite {
    ($($name:ident),* $(,)?) => {
        mod postgres {
            $(
                #[actix_web::test]
                async fn $name() {
                    let db = troupe_server::testing::TestDatabase::create().await;
                    let store = db.store().await.expect("store");
                    super::$name(store.clone(), super::Backend::Postgres(db.url().to_owned())).await;
                    store.close().await;
                }
            )*
        }
        mod sqlite {
            $(
                #[actix_web::test]
                async fn $name() {
                    let file = troupe_server::testing::TestSqliteFile::new();
                    let store = file.store().await.expect("store");
                    super::$name(store.clone(), super::Backend::Sqlite(file.path().to_owned())).await;
                    store.close().await;
                }
            )*
        }
    };
}

limits_suite!(
    an_over_long_identifier_gets_400_naming_its_path_length_and_limit_and_writes_nothing,
    an_over_long_message_type_is_stored_shortened_and_marked,
    every_string_field_has_a_limit_and_a_batch_with_every_field_at_its_limit_is_stored,
    a_store_failure_gets_a_generic_500_without_the_database_text,
);

macro_rules! service {
    ($store:expr) => {{
        let mut config = Config::defaults();
        config.ingest_token = Some(INGEST.to_owned());
        let state = AppState::new(config, $store).0;
        init_service(actix_web::App::new().configure(troupe_server::api::configure(state))).await
    }};
}

fn ingest_request(body: Vec<u8>) -> actix_http::Request {
    TestRequest::post()
        .uri("/api/v1/ingest")
        .insert_header(("content-type", "application/json"))
        .insert_header(("authorization", format!("Bearer {INGEST}")))
        .set_payload(body)
        .to_request()
}

async fn answer(resp: actix_web::dev::ServiceResponse) -> (StatusCode, Value) {
    let status = resp.status();
    let bytes = read_body(resp).await;
    let body = serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{e}: {bytes:?}"));
    (status, body)
}

fn error_of(body: &Value) -> &str {
    body["error"].as_str().unwrap_or_default()
}

async fn an_over_long_identifier_gets_400_naming_its_path_length_and_limit_and_writes_nothing(
    store: Store,
    _: Backend,
) {
    let app = service!(store.clone());
    let long_recipient = BatchBuilder::new("app", "a:1", 1)
        .dead_letter(1, "/user/ok", "app::Ping")
        .dead_letter(2, &incompressible(2_700, 1), "app::Ping")
        .build();
    let long_cluster = BatchBuilder::new(&"c".repeat(5 * 1024 * 1024), "a:1", 1)
        .dead_letter(1, "/user/ok", "app::Ping")
        .build();
    let long_role = BatchBuilder::new("app", "a:1", 1)
        .member(
            1,
            troupe_protocol::EventBody::MemberUp,
            "a:1",
            troupe_protocol::MemberStatus::Up,
            &[&"r".repeat(129)],
        )
        .build();
    let cases = [
        (
            long_recipient,
            "events[1].recipient is 2700 bytes long; the limit is 1024 bytes",
        ),
        (
            long_cluster,
            "identity.cluster is 5242880 bytes long; the limit is 64 bytes",
        ),
        (
            long_role,
            "events[0].member.roles[0] is 129 bytes long; the limit is 128 bytes",
        ),
    ];
    for (batch, expected) in cases {
        let (status, body) =
            answer(call_service(&app, ingest_request(serde_json::to_vec(&batch).unwrap())).await)
                .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert!(
            error_of(&body).contains(expected),
            "{} should say {expected:?}",
            error_of(&body)
        );
        assert!(
            body.to_string().len() < 1_000,
            "the refusal does not echo the field back"
        );
    }
    assert_eq!(store.totals().await.unwrap(), Default::default());
    assert!(store.clusters().await.unwrap().is_empty());
}

async fn an_over_long_message_type_is_stored_shortened_and_marked(store: Store, _: Backend) {
    let app = service!(store.clone());
    let message_type = incompressible(2_700, 2);
    let batch = BatchBuilder::new("app", "a:1", 1)
        .dead_letter(60_000, "/user/gone", &message_type)
        .build();
    let (status, body) =
        answer(call_service(&app, ingest_request(serde_json::to_vec(&batch).unwrap())).await).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (_, letters) = answer(
        call_service(
            &app,
            TestRequest::get()
                .uri("/api/v1/clusters/app/dead-letters")
                .to_request(),
        )
        .await,
    )
    .await;
    let stored = letters["dead_letters"][0]["message_type"]
        .as_str()
        .unwrap_or_else(|| panic!("{letters}"));
    assert!(stored.len() <= FieldClass::MessageType.max_bytes());
    assert!(stored.starts_with(&message_type[..900]));
    assert!(stored.ends_with("…[truncated from 2700 bytes]"), "{stored}");
}

async fn every_string_field_has_a_limit_and_a_batch_with_every_field_at_its_limit_is_stored(
    store: Store,
    _: Backend,
) {
    let app = service!(store.clone());
    let template = serde_json::to_value(every_field_batch("app", 1, 1_000_000)).unwrap();
    let paths = string_paths(&template);
    assert!(paths.len() > 100, "{} string leaves", paths.len());
    let mut at_limit = template.clone();
    let mut sequence = 1;
    let (mut limited, mut shortened, mut typed) = (0, 0, 0);
    for (i, path) in paths.iter().enumerate() {
        let mut batch = template.clone();
        sequence += 1;
        batch["sequence"] = Value::String(sequence.to_string());
        *leaf_mut(&mut batch, path) = Value::String(incompressible(5_000, i as u64));
        let (status, body) =
            answer(call_service(&app, ingest_request(batch.to_string().into_bytes())).await).await;
        let message = error_of(&body).to_owned();
        if status == StatusCode::OK {
            // Free text: stored, shortened and marked (checked for message types above).
            assert!(
                path.ends_with(".reason") || path.ends_with(".message_type"),
                "{path} stored at 5000 bytes: every identifier has a limit"
            );
            shortened += 1;
            continue;
        }
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {body}");
        let prefix = format!("field too long: {path} is 5000 bytes long; the limit is ");
        if let Some(rest) = message.strip_prefix(&prefix) {
            limited += 1;
            let limit: usize = rest.trim_end_matches(" bytes").parse().expect("limit");
            *leaf_mut(&mut at_limit, path) = Value::String(incompressible(limit, i as u64));
        } else {
            // Not a free string: a number written as a string, or a closed set of words.
            assert!(
                message.starts_with("malformed report batch: ")
                    && (message.contains("unknown variant")
                        || message.contains("expected an unsigned 64-bit integer")),
                "{path}: {message}"
            );
            typed += 1;
        }
    }
    // Nine free-text fields (reasons of three singleton and three lease kinds, health, the dead
    // letter's reason and message type); the rest are identifiers or typed.
    assert!(
        limited > 80 && shortened == 9 && typed > 20,
        "{limited} {shortened} {typed}"
    );
    let (status, body) =
        answer(call_service(&app, ingest_request(at_limit.to_string().into_bytes())).await).await;
    assert_eq!(status, StatusCode::OK, "every field at its limit: {body}");
    assert_eq!(body["duplicate"], false);
}

async fn a_store_failure_gets_a_generic_500_without_the_database_text(
    store: Store,
    backend: Backend,
) {
    let app = service!(store.clone());
    let first = BatchBuilder::new("app", "a:1", 1)
        .dead_letter(1, "/user/gone", "app::Ping")
        .build();
    let (status, _) =
        answer(call_service(&app, ingest_request(serde_json::to_vec(&first).unwrap())).await).await;
    assert_eq!(status, StatusCode::OK);
    // Something only an operator (or a bug) does: the table ingest writes is gone.
    let sql = "ALTER TABLE dead_letters RENAME TO dead_letters_moved";
    match backend {
        Backend::Postgres(url) => {
            use sqlx::{Connection, Executor};
            let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
            conn.execute(sql).await.unwrap();
        }
        Backend::Sqlite(path) => {
            use sqlx::{Connection, Executor};
            let url = format!("sqlite://{}", path.display());
            let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
            conn.execute(sql).await.unwrap();
        }
    }
    let second = BatchBuilder::new("app", "a:1", 2)
        .dead_letter(2, "/user/gone", "app::Ping")
        .build();
    let (status, body) =
        answer(call_service(&app, ingest_request(serde_json::to_vec(&second).unwrap())).await)
            .await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
    assert_eq!(
        error_of(&body),
        "internal error: the store failed; the server log has the detail"
    );
    let text = body.to_string().to_lowercase();
    for leak in ["dead_letters", "relation", "table", "sql", "database error"] {
        assert!(!text.contains(leak), "{leak} in {body}");
    }
}
