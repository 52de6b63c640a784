//! The OpenAPI document (`/api/v1/openapi.json`) and a self-contained docs page
//! (`/api/v1/docs`) that renders it with no CDN or network access.

use actix_web::HttpResponse;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi};

/// The management API, described.
#[derive(Debug, OpenApi)]
#[openapi(
    info(
        title = "Troupe control plane",
        description = "Ingest of agent reports and the management API of a Troupe actor cluster."
    ),
    paths(
        super::probes::livez,
        super::probes::readyz,
        super::ingest::ingest,
        super::clusters::list,
        super::clusters::one,
        super::members::list,
        super::members::one,
        super::members::operate,
        super::members::leave,
        super::nodes::list,
        super::events::list,
        super::stream::stream,
        super::dead_letters::list,
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
    ),
    components(schemas(crate::error::ErrorBody)),
    modifiers(&BearerAuth),
    tags(
        (name = "probes", description = "Liveness and readiness, without a token"),
        (name = "ingest", description = "Agents' report batches"),
        (name = "clusters", description = "Clusters that report"),
        (name = "members", description = "Members as last reported; leave and down"),
        (name = "nodes", description = "Agent incarnations"),
        (name = "events", description = "Event history and the live stream"),
        (name = "dead letters", description = "Undeliverable messages"),
        (name = "singletons", description = "Cluster singletons and hand-overs"),
        (name = "routers", description = "Cluster routers and mailbox depths"),
        (name = "coordination", description = "Leases and the actor directory for agents (needs --coordination-token)"),
    )
)]
pub struct ApiDoc;

#[derive(Debug)]
struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        if let Some(components) = openapi.components.as_mut() {
            components.add_security_scheme(
                "bearer",
                SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
            );
        }
    }
}

/// `GET /api/v1/openapi.json`.
pub async fn document() -> HttpResponse {
    HttpResponse::Ok().json(ApiDoc::openapi())
}

/// `GET /api/v1/docs`: the document rendered by a small inline script.
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
