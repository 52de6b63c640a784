//! The HTTP surface: ingest, the management API under `/api/v1`, the live stream, metrics,
//! and the OpenAPI document. One file per resource in `api/`, each with its handlers and DTOs.

pub mod clusters;
pub mod coordination;
pub mod dead_letters;
pub mod events;
pub mod ingest;
pub mod members;
pub mod nodes;
pub mod openapi;
pub mod routers;
pub mod singletons;
pub mod stream;

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::StatusCode;
use actix_web::http::header::{self, HeaderValue};
use actix_web::{HttpResponse, ResponseError, middleware, web};
use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;
use tracing::Instrument;
use utoipa::ToSchema;

use crate::app::AppState;
use crate::store::{ClusterRow, StoreError};

/// Largest page any list endpoint returns.
pub const MAX_PAGE: i64 = 1000;
/// Page size when none is asked for.
pub const DEFAULT_PAGE: i64 = 100;

/// Why a request failed; rendered as `{"error": "...", "status": N}`.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// No or a wrong bearer token.
    #[error("unauthorized: {0}")]
    Unauthorized(&'static str),
    /// The request is malformed; the message says what was wrong.
    #[error("{0}")]
    BadRequest(String),
    /// The body is larger than allowed.
    #[error("request body is {size} bytes; the limit is {limit} bytes (--max-body-bytes)")]
    PayloadTooLarge {
        /// The body's size as far as it was read.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// The route exists but is switched off.
    #[error("{0}")]
    Forbidden(&'static str),
    /// No such cluster, member, singleton or router.
    #[error("{0}")]
    NotFound(String),
    /// The request conflicts with the current state (a lease no longer held).
    #[error("{0}")]
    Conflict(String),
    /// What was asked for is gone for good (compacted directory history).
    #[error("{0}")]
    Gone(String),
    /// A backend the server relies on (etcd, the coordination database) is unreachable.
    #[error("{0}")]
    Unavailable(String),
    /// A backend the server relies on answered with an error.
    #[error("{0}")]
    BadGateway(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Whether `error` means the database is away for now (restarting, unreachable, out of
/// connections) rather than that the request or the data is wrong: such requests get 503 and
/// a retry succeeds once it is back. SQLSTATE classes 08 (connection exception), 57P
/// (operator intervention: shutdown, crash shutdown, cannot connect now) and 53300 (too many
/// connections).
fn store_unavailable(error: &StoreError) -> bool {
    match error {
        StoreError::Database(
            sqlx::Error::PoolTimedOut | sqlx::Error::Io(_) | sqlx::Error::PoolClosed,
        ) => true,
        StoreError::Database(sqlx::Error::Database(database)) => {
            database.code().is_some_and(|code| {
                code.starts_with("08") || code.starts_with("57P") || code == "53300"
            })
        }
        _ => false,
    }
}

/// The error body.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    /// What went wrong.
    pub error: String,
    /// The HTTP status code.
    pub status: u16,
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        match self {
            Self::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            Self::BadRequest(_) => StatusCode::BAD_REQUEST,
            Self::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::Forbidden(_) => StatusCode::FORBIDDEN,
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::Conflict(_) => StatusCode::CONFLICT,
            Self::Gone(_) => StatusCode::GONE,
            Self::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::BadGateway(_) => StatusCode::BAD_GATEWAY,
            Self::Store(error) if store_unavailable(error) => StatusCode::SERVICE_UNAVAILABLE,
            Self::Store(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn error_response(&self) -> HttpResponse {
        let status = self.status_code();
        if status.is_server_error() {
            tracing::error!(error = %self, "request failed");
        }
        let error = if status == StatusCode::SERVICE_UNAVAILABLE {
            format!("the store is unavailable; retry later ({self})")
        } else {
            self.to_string()
        };
        let mut response = HttpResponse::build(status).json(ErrorBody {
            error,
            status: status.as_u16(),
        });
        if status == StatusCode::SERVICE_UNAVAILABLE {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        if status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

/// Registers every route on an actix `App` or scope.
pub fn configure(state: AppState) -> impl FnOnce(&mut web::ServiceConfig) {
    move |cfg| {
        cfg.app_data(web::Data::new(state))
            .route("/metrics", web::get().to(metrics))
            .service(
                web::scope("/api/v1")
                    .wrap(middleware::from_fn(trace_request))
                    .route("/ingest", web::post().to(ingest::ingest))
                    .configure(coordination::routes)
                    .route("/openapi.json", web::get().to(openapi::document))
                    .route("/docs", web::get().to(openapi::docs_page))
                    .route("/events/stream", web::get().to(stream::stream))
                    .route("/clusters", web::get().to(clusters::list))
                    .route("/clusters/{cluster}", web::get().to(clusters::one))
                    .route("/clusters/{cluster}/members", web::get().to(members::list))
                    .route(
                        "/clusters/{cluster}/members/{address}",
                        web::get().to(members::one),
                    )
                    .route(
                        "/clusters/{cluster}/members/{address}",
                        web::put().to(members::operate),
                    )
                    .route(
                        "/clusters/{cluster}/members/{address}",
                        web::delete().to(members::leave),
                    )
                    .route("/clusters/{cluster}/nodes", web::get().to(nodes::list))
                    .route("/clusters/{cluster}/events", web::get().to(events::list))
                    .route(
                        "/clusters/{cluster}/dead-letters",
                        web::get().to(dead_letters::list),
                    )
                    .route(
                        "/clusters/{cluster}/dead-letters/per-minute",
                        web::get().to(dead_letters::per_minute),
                    )
                    .route(
                        "/clusters/{cluster}/singletons",
                        web::get().to(singletons::list),
                    )
                    .route(
                        "/clusters/{cluster}/singletons/{name}",
                        web::get().to(singletons::one),
                    )
                    .route("/clusters/{cluster}/routers", web::get().to(routers::list))
                    .route(
                        "/clusters/{cluster}/routers/depth",
                        web::get().to(routers::depth),
                    ),
            );
    }
}

/// Wraps each API request in a span named after its route (`GET /api/v1/clusters/{cluster}`),
/// which OpenTelemetry exports when tracing is on.
async fn trace_request(
    req: ServiceRequest,
    next: middleware::Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let method = req.method().clone();
    // The app's resource map knows the route before the scope has routed the request.
    let route = req
        .resource_map()
        .match_pattern(req.path())
        .unwrap_or_else(|| "unmatched".to_owned());
    let span = tracing::info_span!(
        "request",
        otel.name = %format!("{method} {route}"),
        otel.kind = "server",
        http.request.method = %method,
        http.route = %route,
        url.path = %req.path(),
        http.response.status_code = tracing::field::Empty,
    );
    let response = next.call(req).instrument(span.clone()).await?;
    span.record("http.response.status_code", response.status().as_u16());
    Ok(response)
}

/// `GET /metrics`: Prometheus metrics in OpenMetrics text.
async fn metrics(state: web::Data<AppState>) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("application/openmetrics-text; version=1.0.0; charset=utf-8")
        .body(state.metrics.render())
}

/// The cluster named `name`, or 404.
pub(crate) async fn find_cluster(state: &AppState, name: &str) -> Result<ClusterRow, ApiError> {
    state
        .store
        .cluster(name)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no cluster named `{name}` has reported")))
}

/// Epoch milliseconds as a UTC date-time.
#[must_use]
pub fn datetime(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).unwrap_or_default()
}

/// Epoch milliseconds as RFC 3339 with milliseconds (`2026-11-30T03:00:00.000Z`).
#[must_use]
pub fn rfc3339(ms: i64) -> String {
    datetime(ms).to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// The current time in epoch milliseconds.
#[must_use]
pub fn now_ms() -> i64 {
    Utc::now().timestamp_millis()
}

/// Parses a time parameter: RFC 3339 (`2026-11-30T03:00:00Z`) or epoch milliseconds.
pub(crate) fn parse_time(name: &str, value: Option<&str>) -> Result<Option<i64>, ApiError> {
    let Some(value) = value else {
        return Ok(None);
    };
    if let Ok(ms) = value.parse::<i64>() {
        return Ok(Some(ms));
    }
    DateTime::parse_from_rfc3339(value)
        .map(|t| Some(t.timestamp_millis()))
        .map_err(|e| {
            ApiError::BadRequest(format!(
                "`{name}` must be an RFC 3339 time (2026-11-30T03:00:00Z) or epoch milliseconds, got `{value}`: {e}"
            ))
        })
}

/// Parses the query string into `T` (repeated keys fill lists), or says what was wrong.
pub(crate) fn query<T: serde::de::DeserializeOwned>(
    req: &actix_web::HttpRequest,
) -> Result<T, ApiError> {
    serde_html_form::from_str(req.query_string())
        .map_err(|e| ApiError::BadRequest(format!("bad query string: {e}")))
}

/// A page size within `1..=MAX_PAGE`.
pub(crate) fn page_size(limit: Option<i64>) -> Result<i64, ApiError> {
    match limit {
        None => Ok(DEFAULT_PAGE),
        Some(n) if (1..=MAX_PAGE).contains(&n) => Ok(n),
        Some(n) => Err(ApiError::BadRequest(format!(
            "`limit` must be between 1 and {MAX_PAGE}, got {n}"
        ))),
    }
}

/// The cursor that continues after a row at `(at_ms, id)`: opaque to clients.
#[must_use]
pub fn cursor_after(at_ms: i64, id: i64) -> String {
    format!("{at_ms}.{id}")
}

/// Parses a paging cursor made by [`cursor_after`].
pub(crate) fn parse_cursor(cursor: Option<&str>) -> Result<Option<(i64, i64)>, ApiError> {
    cursor
        .map(|c| {
            c.split_once('.')
                .and_then(|(at, id)| Some((at.parse().ok()?, id.parse().ok()?)))
                .ok_or_else(|| {
                    ApiError::BadRequest(format!(
                        "`cursor` must be the `next_cursor` of a previous page, got `{c}`"
                    ))
                })
        })
        .transpose()
}

/// A JSON text column as a list of strings (empty when malformed).
pub(crate) fn string_list(json: &str) -> Vec<String> {
    serde_json::from_str(json).unwrap_or_default()
}
