//! Resources that answer a method they do not serve with `405 Method Not Allowed`, an `Allow`
//! header listing the methods they do serve, and the usual JSON error body; and the JSON 404
//! of a path under `/api/v1` or `/management` that names no resource.

use crate::json::JsonBody;
use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse, Resource, web};

use crate::error::ErrorBody;

/// A resource at `path` serving `methods` (`"GET, PUT, DELETE"`): add one route per method;
/// any other method (`OPTIONS` too) gets 405.
pub(crate) fn resource(path: &str, methods: &'static str) -> Resource {
    web::resource(path).default_service(web::to(move |req: HttpRequest| async move {
        HttpResponse::MethodNotAllowed()
            .insert_header((header::ALLOW, methods))
            .json_body(ErrorBody {
                error: format!(
                    "method {} is not allowed on {}; allowed: {methods}",
                    req.method(),
                    req.path()
                ),
                status: 405,
                code: "method_not_allowed",
            })
    }))
}

/// The answer to a path no resource serves: 404 and the JSON error body.
pub(crate) async fn not_found(req: HttpRequest) -> HttpResponse {
    HttpResponse::NotFound().json_body(ErrorBody {
        error: format!("no resource at {}; see /api/v1/openapi.json", req.path()),
        status: 404,
        code: "not_found",
    })
}
