//! The HTTP surface: ingest, the management API under `/api/v1`, the live stream, metrics,
//! and the OpenAPI document. One file per resource in `api/`, each with its handlers and DTOs;
//! this file only composes their routes (no resource imports it).

pub mod clusters;
pub mod dead_letters;
pub mod directory;
pub mod events;
pub mod ingest;
pub mod leases;
pub mod members;
pub mod nodes;
pub mod openapi;
pub mod probes;
pub mod prometheus;
pub mod routers;
pub mod singletons;
pub mod stream;

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::{middleware, web};
use tracing::Instrument;

use crate::state::AppState;

/// Registers every route on an actix `App` or scope.
pub fn configure(state: AppState) -> impl FnOnce(&mut web::ServiceConfig) {
    move |cfg| {
        cfg.app_data(web::Data::new(state))
            .route("/metrics", web::get().to(prometheus::metrics))
            .route("/livez", web::get().to(probes::livez))
            .route("/readyz", web::get().to(probes::readyz))
            .service(
                web::scope("/api/v1")
                    .wrap(middleware::from_fn(trace_request))
                    .route("/ingest", web::post().to(ingest::ingest))
                    .configure(leases::routes)
                    .configure(directory::routes)
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
