//! The agent's management listener (`--management-bind`, default `127.0.0.1:8558`): plain HTTP/1.1
//! for probes and scrapes, internal only (probes cannot be authenticated; see seed 003).
//!
//! | route                   | answers                                                      |
//! |-------------------------|--------------------------------------------------------------|
//! | `/_troupe/health`       | liveness: 200 ready or draining; 503 starting, stopped, fatal |
//! | `/_troupe/health/ready` | readiness: 200 only when joined and not shutting down         |
//! | `/metrics`              | Prometheus text 0.0.4, or OpenMetrics 1.0.0 when `Accept` asks for `application/openmetrics-text` (see `metrics.rs`); `Vary: Accept` |
//!
//! | `/cluster/members[/{address}]` | Akka Management's cluster routes, this node's view (see `management/cluster.rs`); mutations opt-in with `--management-token` |
//! | `/cluster/singletons[/{name}]` | each singleton manager's state on this node (hosting since when, awaited acknowledgments, lease phase, held messages, latched out) |
//! | `/cluster/domain-events` | this node's cluster events as server-sent events: `id:`, Akka's `event:` type, JSON `data:`; `Last-Event-ID` resume from a ring of the last 1024, `type` filter, a `CurrentClusterState` snapshot first (see `management/domain_events.rs`) |
//!
//! From stop-begin (draining) on, every response carries `Connection: close`, so keep-alive
//! connections that survived endpoint removal do not ride into the exiting process.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{ACCEPT, CONNECTION, CONTENT_TYPE, HeaderValue, VARY};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use troupe::ActorSystem;
use troupe::cluster::Cluster;
use troupe_telemetry::Exposition;

use crate::health::{self, Health, ProbeAnswer};
use crate::metrics::AgentMetrics;
use crate::reporter::ReporterHandle;

mod cluster;
mod domain_events;
mod domain_stream;

use domain_stream::DomainEvents;

/// Akka Management's members route.
pub const MEMBERS_PATH: &str = "/cluster/members";

/// Each singleton manager's state on this node.
pub const SINGLETONS_PATH: &str = "/cluster/singletons";

/// Akka Management's domain-event stream (server-sent events).
pub const DOMAIN_EVENTS_PATH: &str = "/cluster/domain-events";

/// The largest form body a member operation reads.
const MAX_FORM_BYTES: usize = 4 * 1024;

/// Liveness probe path.
pub const LIVENESS_PATH: &str = "/_troupe/health";
/// Readiness probe path.
pub const READINESS_PATH: &str = "/_troupe/health/ready";
/// Metrics path.
pub const METRICS_PATH: &str = "/metrics";

/// What the listener serves from.
#[derive(Debug, Clone)]
pub struct Sources {
    /// The actor system (mailbox depths).
    pub system: ActorSystem,
    /// The cluster (membership counts).
    pub cluster: Cluster,
    /// The health the probes report.
    pub health: Health,
    /// The metrics registry.
    pub metrics: Arc<AgentMetrics>,
    /// The reporter, when one runs.
    pub reporter: Option<ReporterHandle>,
    /// The bearer token member operations need; `None`: they are refused (403).
    pub operations_token: Option<String>,
}

/// A running management listener.
#[derive(Debug)]
pub struct ManagementServer {
    local_addr: SocketAddr,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

/// What a route answers with: a whole body, or a stream (`/cluster/domain-events`).
type Body = UnsyncBoxBody<Bytes, Infallible>;

/// What the routes serve from, beside [`Sources`].
struct Listener {
    sources: Sources,
    domain_events: Arc<DomainEvents>,
    stopped: watch::Receiver<bool>,
}

fn respond(status: u16, content_type: &'static str, body: impl Into<Bytes>) -> Response<Body> {
    let mut response = Response::new(Full::new(body.into()).boxed_unsync());
    *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

fn probe(answer: ProbeAnswer, sources: &Sources) -> Response<Body> {
    let state = sources.health.state();
    let mut body = serde_json::json!({ "status": answer.word, "state": state.as_str() });
    if let Some(reason) = sources.health.reason() {
        body["reason"] = serde_json::Value::from(reason);
    }
    respond(answer.status, "application/json", body.to_string())
}

fn json(answer: (u16, serde_json::Value)) -> Response<Body> {
    respond(answer.0, "application/json", answer.1.to_string())
}

fn method_not_allowed(path: &str, method: &Method, allow: &'static str) -> Response<Body> {
    let mut response = json((
        405,
        serde_json::json!({
            "message": format!("`{path}` answers {allow}, not {method}"),
        }),
    ));
    response
        .headers_mut()
        .insert("allow", HeaderValue::from_static(allow));
    response
}

/// A form body, at most [`MAX_FORM_BYTES`].
async fn form(request: Request<Incoming>) -> Result<Bytes, Response<Body>> {
    use http_body_util::BodyExt;
    match http_body_util::Limited::new(request.into_body(), MAX_FORM_BYTES)
        .collect()
        .await
    {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(_) => Err(json((
            413,
            serde_json::json!({
                "message": format!("the form is larger than {MAX_FORM_BYTES} bytes, or unreadable"),
            }),
        ))),
    }
}

/// Akka Management's cluster routes (`/cluster/members…`).
async fn cluster_route(request: Request<Incoming>, sources: &Sources) -> Response<Body> {
    let path = request.uri().path().to_owned();
    let method = request.method().clone();
    let rest = path
        .strip_prefix(MEMBERS_PATH)
        .unwrap_or("")
        .trim_start_matches('/');
    let authorization = request
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(ToOwned::to_owned);
    let authorize = || {
        cluster::authorize(
            sources.operations_token.as_deref(),
            authorization.as_deref(),
        )
    };
    if rest.is_empty() {
        return match method {
            Method::GET | Method::HEAD => json((
                200,
                cluster::members(&sources.cluster.view(), sources.cluster.self_address()),
            )),
            Method::POST => {
                if let Some(refused) = authorize() {
                    return json(refused);
                }
                match form(request).await {
                    Ok(body) => json(cluster::join(&sources.cluster, &body)),
                    Err(response) => response,
                }
            }
            _ => method_not_allowed(&path, &method, "GET, HEAD, POST"),
        };
    }
    match method {
        Method::GET | Method::HEAD => json(cluster::member(&sources.cluster, rest)),
        Method::PUT => {
            if let Some(refused) = authorize() {
                return json(refused);
            }
            let written = rest.to_owned();
            match form(request).await {
                Ok(body) => json(cluster::operate(&sources.cluster, &written, Some(&body))),
                Err(response) => response,
            }
        }
        Method::DELETE => match authorize() {
            Some(refused) => json(refused),
            None => json(cluster::operate(&sources.cluster, rest, None)),
        },
        _ => method_not_allowed(&path, &method, "GET, HEAD, PUT, DELETE"),
    }
}

/// `GET /cluster/domain-events`.
fn domain_events(request: &Request<Incoming>, listener: &Listener) -> Response<Body> {
    if request.method() != Method::GET {
        return method_not_allowed(DOMAIN_EVENTS_PATH, request.method(), "GET");
    }
    listener
        .domain_events
        .respond(
            request.uri().query(),
            request.headers(),
            listener.stopped.clone(),
        )
        .unwrap_or_else(|message| json((400, serde_json::json!({ "message": message }))))
}

async fn route(request: Request<Incoming>, listener: &Listener) -> Response<Body> {
    let sources = &listener.sources;
    let path = request.uri().path();
    if path == DOMAIN_EVENTS_PATH {
        return domain_events(&request, listener);
    }
    if path == MEMBERS_PATH || path.starts_with("/cluster/members/") {
        return cluster_route(request, sources).await;
    }
    if path == SINGLETONS_PATH || path.starts_with("/cluster/singletons/") {
        if request.method() != Method::GET && request.method() != Method::HEAD {
            return method_not_allowed(path, request.method(), "GET, HEAD");
        }
        let name = path
            .strip_prefix(SINGLETONS_PATH)
            .unwrap_or("")
            .trim_start_matches('/');
        return if name.is_empty() {
            json((200, cluster::singletons(&sources.cluster).await))
        } else {
            json(cluster::singleton(&sources.cluster, name).await)
        };
    }
    let known = [
        LIVENESS_PATH,
        READINESS_PATH,
        METRICS_PATH,
        MEMBERS_PATH,
        SINGLETONS_PATH,
        DOMAIN_EVENTS_PATH,
    ];
    if !known.contains(&path) {
        let body = serde_json::json!({
            "error": format!("no endpoint at `{path}`; the agent serves {}", known.join(", ")),
        });
        return respond(404, "application/json", body.to_string());
    }
    if request.method() != Method::GET && request.method() != Method::HEAD {
        let body = serde_json::json!({
            "error": format!("`{path}` answers GET only, not {}", request.method()),
        });
        let mut response = respond(405, "application/json", body.to_string());
        response
            .headers_mut()
            .insert("allow", HeaderValue::from_static("GET, HEAD"));
        return response;
    }
    match path {
        LIVENESS_PATH => probe(health::liveness(sources.health.state()), sources),
        READINESS_PATH => probe(health::readiness(sources.health.state()), sources),
        _ => {
            let format =
                Exposition::negotiate(request.headers().get(ACCEPT).and_then(|v| v.to_str().ok()));
            let mut response = respond(
                200,
                format.content_type(),
                sources.metrics.render(
                    format,
                    &sources.system,
                    &sources.cluster,
                    &sources.health,
                    sources.reporter.as_ref(),
                ),
            );
            response
                .headers_mut()
                .insert(VARY, HeaderValue::from_static("Accept"));
            response
        }
    }
}

impl ManagementServer {
    /// Serve on `listener` until [`ManagementServer::stop`].
    pub fn serve(listener: TcpListener, sources: Sources) -> std::io::Result<Self> {
        let local_addr = listener.local_addr()?;
        let (stop, mut stopped) = watch::channel(false);
        let domain_events = DomainEvents::start(
            &sources.cluster,
            domain_events::RING_CAPACITY,
            stopped.clone(),
        );
        let listener_state = Arc::new(Listener {
            sources,
            domain_events,
            stopped: stopped.clone(),
        });
        let task = tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    biased;
                    _ = stopped.changed() => return,
                    accepted = listener.accept() => accepted,
                };
                let (stream, _) = match accepted {
                    Ok(accepted) => accepted,
                    Err(error) => {
                        tracing::warn!(%error, "management listener: accept failed");
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let served = Arc::clone(&listener_state);
                tokio::spawn(async move {
                    let service = service_fn(move |request: Request<Incoming>| {
                        let served = Arc::clone(&served);
                        async move {
                            let mut response = route(request, &served).await;
                            if served.sources.health.state().closes_connections() {
                                response
                                    .headers_mut()
                                    .insert(CONNECTION, HeaderValue::from_static("close"));
                            }
                            Ok::<_, Infallible>(response)
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(Self {
            local_addr,
            stop,
            task,
        })
    }

    /// The bound address (useful with port 0).
    #[must_use]
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stop accepting connections (requests in progress finish).
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}
