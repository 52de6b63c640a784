//! Every HTTP request observed: a server span by OpenTelemetry's HTTP semantic conventions,
//! and the request metric, both named by the route template.
//!
//! # Spans
//! One span per request, named `<METHOD> <route>` (`GET /api/v1/clusters/{cluster}`), kind
//! server, with `http.request.method` (`_OTHER` and `http.request.method_original` for a
//! method outside the standard set), `http.route`, `url.path`, `url.scheme`, `url.query` (when
//! there is one), `server.address`, `server.port`, `client.address`, `user_agent.original`,
//! `http.response.status_code` (an integer) and, for 5xx answers, `error.type` (the status code)
//! with the span status set to error. An incoming W3C `traceparent` (and `tracestate`) makes
//! the span a child of the caller's: an agent's report and the server's handling of it are
//! one trace.
//!
//! Integers are recorded as `i64`: `tracing-opentelemetry` exports a `u64` field as a string.
//!
//! # Metrics
//! `troupe_http_server_request_duration_seconds{method, route, status}`: a request that
//! matches no route is `route="unmatched"`, so raw paths never become label values.

use std::time::Instant;

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::HeaderMap;
use actix_web::{middleware, web};
use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::metrics::method_label;
use crate::state::AppState;

/// The `http.route` (and metric label) of a request that matches no route.
pub const UNMATCHED: &str = "unmatched";

struct Headers<'a>(&'a HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0
            .keys()
            .map(actix_web::http::header::HeaderName::as_str)
            .collect()
    }
}

/// The middleware: wrap the whole app with `middleware::from_fn(observe::request)`.
pub async fn request(
    req: ServiceRequest,
    next: middleware::Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let started = Instant::now();
    let method = req.method().as_str().to_owned();
    let method_label = method_label(&method);
    let route = req
        .resource_map()
        .match_pattern(req.path())
        .map_or_else(|| UNMATCHED.to_owned(), |p| template(&p));
    let info = req.connection_info().clone();
    let (address, port) = split_host(info.host(), info.scheme());
    let span = tracing::info_span!(
        "request",
        otel.name = %format!("{method_label} {route}"),
        otel.kind = "server",
        otel.status_code = tracing::field::Empty,
        http.request.method = method_label,
        http.request.method_original = tracing::field::Empty,
        http.route = %route,
        url.path = %req.path(),
        url.query = tracing::field::Empty,
        url.scheme = %info.scheme(),
        server.address = %address,
        server.port = i64::from(port),
        client.address = tracing::field::Empty,
        user_agent.original = tracing::field::Empty,
        http.response.status_code = tracing::field::Empty,
        error.type = tracing::field::Empty,
    );
    if method_label != method {
        span.record("http.request.method_original", method.as_str());
    }
    if !req.query_string().is_empty() {
        span.record("url.query", req.query_string());
    }
    if let Some(peer) = info.realip_remote_addr() {
        span.record("client.address", peer);
    }
    if let Some(agent) = req
        .headers()
        .get(actix_web::http::header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
    {
        span.record("user_agent.original", agent);
    }
    let parent = TraceContextPropagator::new().extract(&Headers(req.headers()));
    // A caller's context is honoured only when it names a valid trace.
    if opentelemetry::trace::TraceContextExt::span(&parent)
        .span_context()
        .is_valid()
    {
        let _ = span.set_parent(parent);
    }
    let metrics = req
        .app_data::<web::Data<AppState>>()
        .map(|state| state.metrics.clone());
    let response = next.call(req).instrument(span.clone()).await?;
    let status = response.status().as_u16();
    span.record("http.response.status_code", i64::from(status));
    if response.status().is_server_error() {
        span.record("error.type", status.to_string().as_str());
        span.record("otel.status_code", "ERROR");
    }
    if let Some(metrics) = metrics {
        metrics.http_request(&method, &route, status, started.elapsed().as_secs_f64());
    }
    Ok(response)
}

/// A route pattern without its parameters' regular expressions (`{address:.+}` →
/// `{address}`), as the OpenAPI document writes it.
fn template(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len());
    let mut in_regex = false;
    for c in pattern.chars() {
        match c {
            ':' if out.ends_with(|p: char| p.is_alphanumeric() || p == '_')
                && out.rfind('{') > out.rfind('}') =>
            {
                in_regex = true;
            }
            '}' if in_regex => {
                in_regex = false;
                out.push('}');
            }
            _ if in_regex => {}
            _ => out.push(c),
        }
    }
    out
}

/// `server.address` and `server.port` from the `Host` the client used (the port defaulting by
/// scheme).
fn split_host(host: &str, scheme: &str) -> (String, u16) {
    let default = if scheme == "https" { 443 } else { 80 };
    // `[::1]:8080`, `127.0.0.1:8080`, `example.com`
    if let Some(rest) = host.strip_prefix('[')
        && let Some((address, after)) = rest.split_once(']')
    {
        let port = after
            .strip_prefix(':')
            .and_then(|p| p.parse().ok())
            .unwrap_or(default);
        return (address.to_owned(), port);
    }
    match host.rsplit_once(':') {
        Some((address, port)) if !address.contains(':') => {
            (address.to_owned(), port.parse().unwrap_or(default))
        }
        _ => (host.to_owned(), default),
    }
}

#[cfg(test)]
mod tests {
    use super::split_host;

    #[test]
    fn route_templates_drop_parameter_patterns() {
        assert_eq!(
            super::template("/api/v1/clusters/{cluster}/members/{address:.+}"),
            "/api/v1/clusters/{cluster}/members/{address}"
        );
        assert_eq!(super::template("/livez"), "/livez");
    }

    #[test]
    fn server_address_and_port_come_from_the_host_header() {
        assert_eq!(
            split_host("127.0.0.1:8080", "http"),
            ("127.0.0.1".into(), 8080)
        );
        assert_eq!(
            split_host("example.com", "https"),
            ("example.com".into(), 443)
        );
        assert_eq!(split_host("[::1]:9000", "http"), ("::1".into(), 9000));
        assert_eq!(split_host("::1", "http"), ("::1".into(), 80));
    }
}
