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

use actix_web::web;

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
