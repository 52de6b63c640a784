//! `GET /metrics`: the server's Prometheus metrics, in the format the scraper asks for.
//!
//! `Accept: application/openmetrics-text` (as Prometheus sends) gets OpenMetrics 1.0.0; any
//! other `Accept`, or none, gets the text format 0.0.4 (`promtool check metrics` reads it).
//! The answer carries `Vary: Accept`.

use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse, web};

use crate::metrics::Exposition;
use crate::state::AppState;

/// `GET /metrics`.
#[utoipa::path(get, path = "/metrics", operation_id = "metrics", tag = "metrics",
    responses((status = 200, description = "Prometheus text 0.0.4, or OpenMetrics 1.0.0 when `Accept` asks for `application/openmetrics-text`",
        content((String = "text/plain; version=0.0.4"), (String = "application/openmetrics-text; version=1.0.0")))))]
pub async fn metrics(state: web::Data<AppState>, req: HttpRequest) -> HttpResponse {
    let format = Exposition::negotiate(
        req.headers()
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok()),
    );
    HttpResponse::Ok()
        .content_type(format.content_type())
        .insert_header((header::VARY, "Accept"))
        .body(state.metrics.render(format))
}
