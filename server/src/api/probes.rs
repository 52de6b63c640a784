//! `GET /livez` and `GET /readyz`: the probes Kubernetes (or any supervisor) asks, outside
//! `/api/v1` and without a token.
//!
//! # Liveness
//! 200 `{"status":"live"}` whenever the process serves HTTP: a database outage does not make
//! the server live-fail (restarting it would not bring the database back).
//!
//! # Readiness
//! 200 `{"status":"ready"}` when the store answers and every migration this server knows is
//! applied; otherwise 503 `{"status":"not-ready","reason":…}`, also while the server shuts
//! down (`draining`). The store check is bounded by [`READINESS_TIMEOUT`], so the probe
//! answers within a second even when the database hangs.

use crate::json::JsonBody;
use std::time::Duration;

use actix_web::http::header;
use actix_web::{HttpResponse, web};
use serde::Serialize;
use utoipa::ToSchema;

use crate::state::AppState;

/// How long readiness waits for the store.
pub const READINESS_TIMEOUT: Duration = Duration::from_millis(800);

/// A probe's answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct ProbeDto {
    /// `live`, `ready`, `not-ready` or `draining`.
    #[schema(example = "ready")]
    pub status: &'static str,
    /// Why the server is not ready (absent when it is).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

fn answer(ok: bool, status: &'static str, reason: Option<String>) -> HttpResponse {
    let mut response = if ok {
        HttpResponse::Ok()
    } else {
        HttpResponse::ServiceUnavailable()
    };
    response
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .json_body(ProbeDto { status, reason })
}

/// Liveness: 200 while the process serves.
#[utoipa::path(get, path = "/livez", operation_id = "livez", tag = "probes",
    responses((status = 200, description = "The process serves HTTP", body = ProbeDto)))]
pub async fn livez() -> HttpResponse {
    answer(true, "live", None)
}

/// Readiness: 200 when the store answers and its migrations are applied, else 503 with the
/// reason (also while shutting down).
#[utoipa::path(get, path = "/readyz", operation_id = "readyz", tag = "probes",
    responses((status = 200, description = "Ready to serve", body = ProbeDto),
              (status = 503, description = "Not ready: the store does not answer, a migration is missing, or the server is shutting down", body = ProbeDto)))]
pub async fn readyz(state: web::Data<AppState>) -> HttpResponse {
    if *state.shutdown.borrow() {
        return answer(
            false,
            "draining",
            Some("the server is shutting down".to_owned()),
        );
    }
    match tokio::time::timeout(READINESS_TIMEOUT, state.store.check_ready()).await {
        Ok(Ok(())) => answer(true, "ready", None),
        Ok(Err(crate::store::NotReady::Unreachable(error))) => {
            // The driver's text (host names, SQLSTATEs) is for the log, not for the client.
            tracing::warn!(%error, "readiness: the database does not answer");
            answer(
                false,
                "not-ready",
                Some("the database does not answer (the server log has the detail)".to_owned()),
            )
        }
        Ok(Err(not_ready)) => answer(false, "not-ready", Some(not_ready.to_string())),
        Err(_) => answer(
            false,
            "not-ready",
            Some(format!(
                "the store did not answer within {} ms",
                READINESS_TIMEOUT.as_millis()
            )),
        ),
    }
}
