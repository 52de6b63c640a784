//! The OpenAPI document (`/api/v1/openapi.json`) and a self-contained docs page
//! (`/api/v1/docs`) that renders it with no CDN or network access.

use crate::json::JsonBody;
use actix_web::HttpResponse;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi};

use crate::viewer::Route;

/// The management API, described.
#[derive(Debug, OpenApi)]
#[openapi(
    info(
        title = "Troupe control plane",
        description = "Ingest of agent reports and the management API of a Troupe actor cluster.\n\n\
            Unsigned 64-bit integers (incarnations, uids, fencing tokens, revisions, counts, \
            durations) are written as decimal strings (`Uint64`): JSON numbers above 2^53 lose \
            precision in JavaScript and jq. Request bodies accept them as strings or, as older \
            clients send them, as JSON numbers (`Uint64Input`).\n\n\
            Every error answer is `ErrorBody` (`{\"error\", \"status\", \"code\"}`; under \
            `/management` Akka's `{\"message\"}`): match on the stable `code` \
            (`ttl_out_of_range`, `owner_too_long`, `not_owner`, `unavailable`, …; see \
            `ErrorBody.code`), never on the message. A method a path does not serve answers 405 with an `Allow` header; a \
            path under `/api/v1` or `/management` that names no resource answers 404. 503 (with \
            `Retry-After`) means the store is away for now: retry.\n\n\
            Four tokens, each its own security scheme: `ingest` (agents' reports), \
            `admin` (member operations, with `--enable-member-operations`), `coordination` \
            (leases and the actor directory) and `viewer` (reading: every GET but the probes, \
            `/metrics` and this document, when the server has `--viewer-token` or \
            `--trusted-proxy-header`). The viewer token goes as a Bearer token (`viewer`) or as \
            the HTTP Basic password (`viewerBasic`, any user name; what browsers send); the \
            admin token also grants reading; behind an authenticating proxy the user header it \
            sets (from `--trusted-proxy-cidrs` only) does too. Without a read credential \
            configured, reads are open (loopback listeners only)."
    ),
    paths(
        super::probes::livez,
        super::probes::readyz,
        super::prometheus::metrics,
        document,
        docs_page,
        super::ingest::ingest,
        super::clusters::list,
        super::clusters::one,
        super::members::list,
        super::members::one,
        super::members::operate,
        super::members::leave,
        super::nodes::list,
        super::audit::list,
        super::audit::list_coordination,
        super::events::list,
        super::stream::stream,
        super::dead_letters::list,
        super::dead_letters::groups,
        super::dead_letters::per_minute,
        super::singletons::list,
        super::singletons::one,
        super::routers::list,
        super::routers::depth,
        super::leases::acquire,
        super::leases::renew,
        super::leases::release,
        super::leases::lease,
        super::directory::claim,
        super::directory::lookup,
        super::directory::unclaim,
        super::directory::evict,
        super::directory::snapshot,
        super::directory::watch,
        super::management::members,
        super::management::member,
        super::management::put_member,
        super::management::delete_member,
        super::management::domain_events,
    ),
    components(schemas(
        crate::error::ErrorBody,
        crate::error::ErrorCode,
        troupe_protocol::wire::schema::U64,
        troupe_protocol::wire::schema::U64Input,
        super::stream::StreamEvent,
        super::management::DomainEvent,
        super::schemas::TimeParameter,
        super::schemas::PageCursor,
        super::schemas::EventKindName,
        super::schemas::EventCategoryName,
        super::management::DomainEventType,
        super::schemas::CoordinationName,
        super::leases::LeaseTtl,
        super::nodes::AgentHealthName,
    )),
    modifiers(&TokenSchemes),
    tags(
        (name = "probes", description = "Liveness and readiness, without a token"),
        (name = "metrics", description = "Prometheus metrics"),
        (name = "documentation", description = "This document and its HTML rendering"),
        (name = "ingest", description = "Agents' report batches (the `ingest` token)"),
        (name = "clusters", description = "Clusters that report"),
        (name = "members", description = "Members as last reported; leave and down (the `admin` token)"),
        (name = "nodes", description = "Agent incarnations"),
        (name = "audit", description = "Who asked for which leave, down or coordination removal, and what came of it (accepted, delivered, refused, failed)"),
        (name = "events", description = "Event history and the live stream"),
        (name = "dead letters", description = "Undeliverable messages"),
        (name = "singletons", description = "Cluster singletons and hand-overs"),
        (name = "routers", description = "Cluster routers and mailbox depths"),
        (name = "coordination", description = "Leases and the actor directory for agents (the `coordination` token; needs --coordination-token)"),
        (name = "management", description = "Akka Management's cluster routes, per cluster (`/management/{cluster}/cluster/...`)"),
    )
)]
pub struct ApiDoc;

/// One security scheme per token the server checks.
#[derive(Debug)]
struct TokenSchemes;

fn bearer(description: &str) -> SecurityScheme {
    let mut http = Http::new(HttpAuthScheme::Bearer);
    http.description = Some(description.to_owned());
    SecurityScheme::Http(http)
}

impl Modify for TokenSchemes {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        if let Some(components) = openapi.components.as_mut() {
            components.add_security_scheme(
                "ingest",
                bearer("The ingest token agents send with their reports (--ingest-token, TROUPE_INGEST_TOKEN)."),
            );
            components.add_security_scheme(
                "admin",
                bearer("The admin token operators send for member operations (--admin-token, TROUPE_ADMIN_TOKEN); refused when none is configured."),
            );
            components.add_security_scheme(
                "viewer",
                bearer("The viewer token for reading the API, the live stream and the dashboard (--viewer-token, TROUPE_VIEWER_TOKEN); the admin token is accepted too. Needed only when the server has a read credential configured."),
            );
            let mut basic = Http::new(HttpAuthScheme::Basic);
            basic.description = Some("The viewer (or admin) token as the HTTP Basic password, any user name: how a browser sends it after the server's `WWW-Authenticate: Basic` challenge.".to_owned());
            components.add_security_scheme("viewerBasic", SecurityScheme::Http(basic));
            components.add_security_scheme(
                "coordination",
                bearer("The coordination token agents send to the leases and directory API (--coordination-token, TROUPE_COORDINATION_TOKEN); the API answers 403 when none is configured."),
            );
        }
    }
}

/// The served document: [`ApiDoc`] with what its annotations cannot say — every string of
/// the report format refuses NUL (`\u0000`), as ingest does; every read route may answer 401;
/// every route that names a cluster may answer 409.
#[must_use]
pub fn document_value() -> serde_json::Value {
    let mut doc = serde_json::to_value(ApiDoc::openapi()).unwrap_or_default();
    let schemas = &mut doc["components"]["schemas"];
    let mut reachable = std::collections::BTreeSet::new();
    let mut pending = vec!["ReportBatch".to_owned()];
    while let Some(name) = pending.pop() {
        if reachable.insert(name.clone()) {
            refs(&schemas[&name], &mut pending);
        }
    }
    for name in reachable {
        if let Some(schema) = schemas.get_mut(&name) {
            refuse_nul(schema);
        }
    }
    guard_reads(&mut doc);
    ambiguous_names(&mut doc);
    doc
}

/// Every operation that names a cluster (`{cluster}` in its path, or a `cluster` query
/// parameter) finds it the same way (`clusters::find_cluster`), so each may answer 409: a bare
/// name that several clusters (agents holding different secrets) share, the message listing
/// their keys.
fn ambiguous_names(doc: &mut serde_json::Value) {
    let Some(paths) = doc["paths"].as_object_mut() else {
        return;
    };
    for (path, item) in paths.iter_mut() {
        let body = if path.starts_with("/management/") {
            "ManagementMessage"
        } else {
            "ErrorBody"
        };
        let in_path = path.contains("{cluster}");
        let Some(item) = item.as_object_mut() else {
            continue;
        };
        for operation in item.values_mut().filter_map(|o| o.as_object_mut()) {
            let in_query = operation
                .get("parameters")
                .and_then(|p| p.as_array())
                .is_some_and(|parameters| {
                    parameters
                        .iter()
                        .any(|p| p["name"] == "cluster" && p["in"] == "query")
                });
            if !in_path && !in_query {
                continue;
            }
            if let Some(responses) = operation
                .get_mut("responses")
                .and_then(|r| r.as_object_mut())
            {
                responses.entry("409").or_insert_with(|| {
                    serde_json::json!({
                        "description": "Several clusters share this bare name (their agents hold different secrets): the message lists their keys; name one by its key (`name~fingerprint`)",
                        "content": { "application/json": { "schema": {
                            "$ref": format!("#/components/schemas/{body}")
                        } } }
                    })
                });
            }
        }
    }
}

/// Every operation on a read route ([`Route::Read`]) that names no token of its own needs the
/// viewer credential (or the admin token), and may answer 401: the gate in `viewer` answers
/// it before the handler, in the error shape of the surface (Akka's under `/management`).
fn guard_reads(doc: &mut serde_json::Value) {
    let Some(paths) = doc["paths"].as_object_mut() else {
        return;
    };
    for (path, item) in paths.iter_mut() {
        if Route::of(path) != Route::Read {
            continue;
        }
        let body = if path.starts_with("/management/") {
            "ManagementMessage"
        } else {
            "ErrorBody"
        };
        let Some(item) = item.as_object_mut() else {
            continue;
        };
        for operation in item.values_mut().filter_map(|o| o.as_object_mut()) {
            operation.entry("security").or_insert_with(
                || serde_json::json!([{ "viewer": [] }, { "viewerBasic": [] }, { "admin": [] }]),
            );
            if let Some(responses) = operation
                .get_mut("responses")
                .and_then(|r| r.as_object_mut())
            {
                responses.entry("401").or_insert_with(|| {
                    serde_json::json!({
                        "description": "Missing or wrong credential (the server has a read credential configured)",
                        "content": { "application/json": { "schema": {
                            "$ref": format!("#/components/schemas/{body}")
                        } } }
                    })
                });
            }
        }
    }
}

/// Pattern of a string without NUL.
pub const NO_NUL: &str = "^[^\\x00]*$";

fn refs(value: &serde_json::Value, out: &mut Vec<String>) {
    match value {
        serde_json::Value::Object(map) => {
            if let Some(name) = map
                .get("$ref")
                .and_then(|r| r.as_str())
                .and_then(|r| r.strip_prefix("#/components/schemas/"))
            {
                out.push(name.to_owned());
            }
            map.values().for_each(|v| refs(v, out));
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| refs(v, out)),
        _ => {}
    }
}

fn refuse_nul(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(map) => {
            let is_string = match map.get("type") {
                Some(serde_json::Value::String(t)) => t == "string",
                Some(serde_json::Value::Array(types)) => types.iter().any(|t| t == "string"),
                _ => false,
            };
            if is_string && !map.contains_key("pattern") && !map.contains_key("enum") {
                map.insert("pattern".to_owned(), NO_NUL.into());
            }
            map.values_mut().for_each(refuse_nul);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(refuse_nul),
        _ => {}
    }
}

/// This document (OpenAPI 3.1).
#[utoipa::path(get, path = "/api/v1/openapi.json", tag = "documentation", operation_id = "openapiDocument",
    responses((status = 200, description = "The OpenAPI 3.1 document", content_type = "application/json", body = Object)))]
pub async fn document() -> HttpResponse {
    HttpResponse::Ok().json_body(document_value())
}

/// The document rendered as HTML by a small inline script (no network access).
#[utoipa::path(get, path = "/api/v1/docs", tag = "documentation", operation_id = "apiDocsPage",
    responses((status = 200, description = "An HTML page", content_type = "text/html", body = String)))]
pub async fn docs_page() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/html; charset=utf-8")
        .insert_header((
            "Content-Security-Policy",
            "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'",
        ))
        .body(DOCS_PAGE)
}

const DOCS_PAGE: &str = r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Troupe control plane API</title>
<style>
body{font:15px/1.45 system-ui,sans-serif;margin:2rem auto;max-width:60rem;padding:0 1rem;color:#1d232a}
h1{font-size:1.5rem}h2{font-size:1.15rem;margin-top:2rem;border-bottom:1px solid #ddd}
.op{border:1px solid #e2e5e9;border-radius:6px;margin:.8rem 0;padding:.6rem .9rem}
.m{display:inline-block;min-width:4rem;font-weight:700;text-transform:uppercase}
.get{color:#0b6e4f}.post{color:#1f5fbf}.put{color:#9a6700}.delete{color:#b42318}
code{background:#f3f4f6;padding:0 .25rem;border-radius:3px}table{border-collapse:collapse;margin:.4rem 0}
td,th{text-align:left;padding:.15rem .6rem .15rem 0;vertical-align:top}small{color:#59636e}
</style></head><body>
<h1>Troupe control plane API</h1>
<p>The machine-readable description is <a href="openapi.json">openapi.json</a> (OpenAPI 3.1).
Mutating routes need <code>Authorization: Bearer &lt;token&gt;</code>.</p>
<div id="api">Loading…</div>
<script>
const esc = s => String(s ?? "").replace(/[&<>"']/g, c => ({"&":"&amp;","<":"&lt;",">":"&gt;",'"':"&quot;","'":"&#39;"}[c]));
fetch("openapi.json").then(r => r.json()).then(doc => {
  const byTag = {};
  for (const [path, item] of Object.entries(doc.paths)) {
    for (const [method, op] of Object.entries(item)) {
      const tag = (op.tags || ["other"])[0];
      (byTag[tag] = byTag[tag] || []).push({path, method, op});
    }
  }
  let html = "";
  for (const t of (doc.tags || [])) {
    const ops = byTag[t.name] || [];
    html += `<h2>${esc(t.name)}</h2><p><small>${esc(t.description)}</small></p>`;
    for (const {path, method, op} of ops) {
      html += `<div class="op"><span class="m ${esc(method)}">${esc(method)}</span><code>${esc(path)}</code>`;
      html += `<p>${esc(op.description || op.summary || "")}</p>`;
      if (op.parameters && op.parameters.length) {
        html += "<table><tr><th>parameter</th><th>in</th><th>description</th></tr>";
        for (const p of op.parameters) html += `<tr><td><code>${esc(p.name)}</code></td><td>${esc(p.in)}</td><td>${esc(p.description)}</td></tr>`;
        html += "</table>";
      }
      html += "<table>";
      for (const [code, r] of Object.entries(op.responses || {})) html += `<tr><td><b>${esc(code)}</b></td><td>${esc(r.description)}</td></tr>`;
      html += "</table></div>";
    }
  }
  document.getElementById("api").innerHTML = html;
}).catch(e => { document.getElementById("api").textContent = "Could not load openapi.json: " + e; });
</script></body></html>
"#;
