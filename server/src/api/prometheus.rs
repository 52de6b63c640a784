//! `GET /metrics`: the server's Prometheus metrics.

use actix_web::{HttpResponse, web};

use crate::state::AppState;

/// `GET /metrics`: Prometheus metrics in OpenMetrics text.
pub async fn metrics(state: web::Data<AppState>) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("application/openmetrics-text; version=1.0.0; charset=utf-8")
        .body(state.metrics.render())
}
