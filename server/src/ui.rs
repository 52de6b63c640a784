//! The web dashboard: server-rendered pages under `/ui/`, built from the store directly (no
//! HTTP round trip to the API), with templates and assets from `troupe-web`.
//!
//! # Bounded queries
//! Every page reads a bounded amount: member, agent, singleton and router tables are small
//! current-state tables; history is read through a time window and a `LIMIT` on the
//! `(cluster, time)`, `(cluster, kind, time)` and `(cluster, subject, time)` indexes, and
//! counts come from the per-minute dead-letter rollup or stop at a cap.
//!
//! # Security
//! Pages are read-only (member operations stay in the API, behind the admin token and
//! `--enable-member-operations`). Every response carries a Content-Security-Policy that allows
//! only the server's own script and stylesheet (no inline script, no inline style), and
//! `nosniff`; templates escape every value (see `troupe-web`).

mod audit;
mod dead_letters;
mod events;
mod map;
mod node;
mod overview;
mod page;
mod routers;
mod singletons;
mod timeline;
mod window;

use actix_web::http::header::{self, HeaderValue};
use actix_web::{HttpRequest, HttpResponse, web};

use self::page::secure;

/// Registers the dashboard's routes.
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/", web::get().to(root))
        .route("/ui", web::get().to(root))
        .route("/ui/", web::get().to(overview::page))
        .route("/ui/timeline", web::get().to(timeline::page))
        .route("/ui/singletons", web::get().to(singletons::page))
        .route("/ui/routers", web::get().to(routers::page))
        .route("/ui/dead-letters", web::get().to(dead_letters::page))
        .route("/ui/audit", web::get().to(audit::page))
        .route("/ui/node", web::get().to(node::page))
        .route("/ui/map", web::get().to(map::fragment))
        .route("/ui/assets/{name}", web::get().to(asset));
}

/// `/` and `/ui`: to the overview.
async fn root() -> HttpResponse {
    HttpResponse::Found()
        .insert_header((header::LOCATION, "/ui/"))
        .finish()
}

/// `GET /ui/assets/{name}`: a static file; versioned links (`?v=`) may be cached for a year.
async fn asset(req: HttpRequest, name: web::Path<String>) -> HttpResponse {
    let Some(asset) = troupe_web::assets::find(&name) else {
        return secure(&mut HttpResponse::NotFound())
            .content_type("text/plain; charset=utf-8")
            .body(format!("no asset named `{name}`"));
    };
    let version = troupe_web::assets::version();
    let etag = format!("\"{version}\"");
    if req
        .headers()
        .get(header::IF_NONE_MATCH)
        .is_some_and(|v| v.as_bytes() == etag.as_bytes())
    {
        return HttpResponse::NotModified()
            .insert_header((header::ETAG, etag))
            .finish();
    }
    let versioned = req.query_string() == format!("v={version}");
    let cache = if versioned {
        "public, max-age=31536000, immutable"
    } else {
        "no-cache"
    };
    secure(&mut HttpResponse::Ok())
        .insert_header((
            header::CONTENT_TYPE,
            HeaderValue::from_static(asset.content_type),
        ))
        .insert_header((header::CACHE_CONTROL, cache))
        .insert_header((header::ETAG, etag))
        .body(asset.body)
}
