//! The HTTP surface: ingest, the management API under `/api/v1`, the live stream, metrics,
//! and the OpenAPI document. One file per resource in `api/`, each with its handlers and DTOs;
//! this file only composes their routes (no resource imports it).

mod allow;
pub mod audit;
pub mod clusters;
pub mod dead_letters;
pub mod directory;
pub mod events;
pub mod ingest;
pub mod leases;
pub mod management;
pub mod members;
pub mod nodes;
pub mod openapi;
pub mod probes;
pub mod prometheus;
pub mod routers;
pub mod schemas;
pub mod singletons;
pub mod stream;

use actix_web::web::{self, delete, get, post, put};

use self::allow::resource;

use crate::state::AppState;

/// Registers every route on an actix `App` or scope. Each path is one resource: a method it
/// does not serve gets 405 with `Allow` (see `allow`).
pub fn configure(state: AppState) -> impl FnOnce(&mut web::ServiceConfig) {
    move |cfg| {
        cfg.app_data(web::Data::new(state))
            .service(resource("/metrics", "GET").route(get().to(prometheus::metrics)))
            .service(resource("/livez", "GET").route(get().to(probes::livez)))
            .service(resource("/readyz", "GET").route(get().to(probes::readyz)))
            .service(
                web::scope("/management/{cluster}/cluster")
                    .service(resource("/members", "GET").route(get().to(management::members)))
                    .service(resource("/members/", "GET").route(get().to(management::members)))
                    .service(
                        resource("/members/{address:.+}", "GET, PUT, DELETE")
                            .route(get().to(management::member))
                            .route(put().to(management::put_member))
                            .route(delete().to(management::delete_member)),
                    )
                    .service(
                        resource("/domain-events", "GET")
                            .route(get().to(management::domain_events)),
                    )
                    .default_service(web::to(allow::not_found)),
            )
            .service(
                web::scope("/api/v1")
                    .service(resource("/ingest", "POST").route(post().to(ingest::ingest)))
                    .configure(leases::routes)
                    .configure(directory::routes)
                    .service(resource("/openapi.json", "GET").route(get().to(openapi::document)))
                    .service(resource("/docs", "GET").route(get().to(openapi::docs_page)))
                    .service(resource("/events/stream", "GET").route(get().to(stream::stream)))
                    .service(resource("/clusters", "GET").route(get().to(clusters::list)))
                    .service(resource("/clusters/{cluster}", "GET").route(get().to(clusters::one)))
                    .service(
                        resource("/clusters/{cluster}/members", "GET")
                            .route(get().to(members::list)),
                    )
                    .service(
                        resource(
                            "/clusters/{cluster}/members/{address:.+}",
                            "GET, PUT, DELETE",
                        )
                        .route(get().to(members::one))
                        .route(put().to(members::operate))
                        .route(delete().to(members::leave)),
                    )
                    .service(
                        resource("/clusters/{cluster}/nodes", "GET").route(get().to(nodes::list)),
                    )
                    .service(
                        resource("/clusters/{cluster}/audit", "GET").route(get().to(audit::list)),
                    )
                    .service(
                        resource("/audit/coordination", "GET")
                            .route(get().to(audit::list_coordination)),
                    )
                    .service(
                        resource("/clusters/{cluster}/events", "GET").route(get().to(events::list)),
                    )
                    .service(
                        resource("/clusters/{cluster}/dead-letters", "GET")
                            .route(get().to(dead_letters::list)),
                    )
                    .service(
                        resource("/clusters/{cluster}/dead-letters/groups", "GET")
                            .route(get().to(dead_letters::groups)),
                    )
                    .service(
                        resource("/clusters/{cluster}/dead-letters/per-minute", "GET")
                            .route(get().to(dead_letters::per_minute)),
                    )
                    .service(
                        resource("/clusters/{cluster}/singletons", "GET")
                            .route(get().to(singletons::list)),
                    )
                    .service(
                        resource("/clusters/{cluster}/singletons/{name}", "GET")
                            .route(get().to(singletons::one)),
                    )
                    .service(
                        resource("/clusters/{cluster}/routers", "GET")
                            .route(get().to(routers::list)),
                    )
                    .service(
                        resource("/clusters/{cluster}/routers/depth", "GET")
                            .route(get().to(routers::depth)),
                    )
                    .default_service(web::to(allow::not_found)),
            );
    }
}
