//! What every dashboard page shares: its context (the time, the clusters, the one shown),
//! its error type, query and range parsing, and rendering with the security headers.

use actix_web::http::StatusCode;
use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse};
use askama::Template;
use troupe_protocol::EventKind;
use troupe_web::format::href;
use troupe_web::pages::{ErrorPage, Layout, Section};

use super::window::{BadRange, Window};
use crate::state::AppState;
use crate::store::{ClusterRow, StoreError};
use crate::time::now_ms;

/// The policy every dashboard response carries.
pub(crate) const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; base-uri 'none'; \
frame-ancestors 'none'";

/// Why a page could not be shown.
#[derive(Debug, thiserror::Error)]
pub(crate) enum UiError {
    /// A query parameter was wrong.
    #[error("{0}")]
    BadRequest(String),
    /// No such cluster or node.
    #[error("{0}")]
    NotFound(String),
    /// The store failed.
    #[error("the store failed: {0}")]
    Store(#[from] StoreError),
    /// A template failed to render (a bug).
    #[error("rendering failed: {0}")]
    Render(#[from] askama::Error),
}

impl From<BadRange> for UiError {
    fn from(bad: BadRange) -> Self {
        Self::BadRequest(bad.0)
    }
}

impl UiError {
    fn status(&self) -> StatusCode {
        match self {
            Self::BadRequest(_) => StatusCode::BAD_REQUEST,
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::Store(error) if error.is_unavailable() => StatusCode::SERVICE_UNAVAILABLE,
            Self::Store(_) | Self::Render(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

/// What every page handler starts from: the time, the clusters and the one asked for.
#[derive(Debug)]
pub(crate) struct Context {
    /// Now, epoch ms.
    pub(crate) now_ms: i64,
    /// An agent silent for longer than this (ms) shows health `unknown` (`--agent-silence-ms`).
    pub(crate) silence_ms: i64,
    /// Every cluster's key (two clusters of the same name have different keys).
    pub(crate) names: Vec<String>,
    /// The cluster shown, if any has reported.
    pub(crate) cluster: Option<ClusterRow>,
    /// Every cluster.
    pub(crate) clusters: Vec<ClusterRow>,
}

impl Context {
    /// Loads the clusters; `requested` must name one of them by key, or by a name only one
    /// of them has (default: the first).
    pub(crate) async fn load(state: &AppState, requested: Option<&str>) -> Result<Self, UiError> {
        let clusters = state.store.clusters().await?;
        let cluster = match requested.filter(|c| !c.is_empty()) {
            Some(wanted) => Some(pick(&clusters, wanted)?.clone()),
            None => clusters.first().cloned(),
        };
        Ok(Self {
            now_ms: now_ms(),
            silence_ms: state.config.agent_silence_limit_ms(),
            names: clusters.iter().map(|c| c.cluster_key.clone()).collect(),
            cluster,
            clusters,
        })
    }

    /// The shown cluster's key (its name when it reports no identity), "" when none has
    /// reported: what the pages' `cluster` parameter takes.
    pub(crate) fn cluster_name(&self) -> &str {
        self.cluster.as_ref().map_or("", |c| c.cluster_key.as_str())
    }

    /// The layout of a page of `section`.
    pub(crate) fn layout(&self, section: Section, title: impl Into<String>) -> Layout {
        Layout::new(
            section,
            title,
            self.cluster_name(),
            &self.names,
            self.now_ms,
            event_kinds(),
        )
    }

    /// The time range a page shows: what its `range` parameter says, else `default_ms`,
    /// or the shown cluster's age when that is shorter (see `super::window`).
    pub(crate) async fn window(
        &self,
        state: &AppState,
        range: Option<&str>,
        default_ms: i64,
    ) -> Result<Window, UiError> {
        // A bad range is refused before the store is asked anything.
        let explicit = range.filter(|r| !r.is_empty());
        if explicit.is_some() {
            return Ok(Window::resolve(explicit, default_ms, self.now_ms, None)?);
        }
        let first_ms = match &self.cluster {
            Some(cluster) => {
                let first_event = state.store.first_event_ms(cluster.id).await?;
                Some(first_event.map_or(cluster.first_seen_ms, |at| at.min(cluster.first_seen_ms)))
            }
            None => None,
        };
        Ok(Window::resolve(None, default_ms, self.now_ms, first_ms)?)
    }

    /// The node page of `node` in this cluster.
    pub(crate) fn node_href(&self, node: &str) -> String {
        href(
            Section::Node.path(),
            &[("cluster", self.cluster_name()), ("node", node)],
        )
    }
}

fn event_kinds() -> String {
    EventKind::ALL
        .iter()
        .map(|k| k.as_str())
        .collect::<Vec<_>>()
        .join(",")
}

/// Parses the query string into `T`.
pub(crate) fn query<T: serde::de::DeserializeOwned>(req: &HttpRequest) -> Result<T, UiError> {
    serde_html_form::from_str(req.query_string())
        .map_err(|e| UiError::BadRequest(format!("This page's address has a bad query: {e}.")))
}

pub(crate) fn secure(
    builder: &mut actix_web::HttpResponseBuilder,
) -> &mut actix_web::HttpResponseBuilder {
    builder
        .insert_header((header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .insert_header((header::REFERRER_POLICY, "same-origin"))
        .insert_header((header::X_FRAME_OPTIONS, "DENY"))
}

/// Renders a page, or its error page.
pub(crate) fn respond<T: Template>(page: Result<T, UiError>) -> HttpResponse {
    let (status, body) = match page.and_then(|p| p.render().map_err(UiError::from)) {
        Ok(body) => (StatusCode::OK, body),
        Err(error) => {
            let status = error.status();
            if status.is_server_error() {
                tracing::error!(%error, "dashboard page failed");
            }
            // The error page links nowhere cluster-specific: the cluster may be the problem.
            let page = ErrorPage {
                layout: Layout::new(
                    Section::Overview,
                    status.canonical_reason().unwrap_or("Error"),
                    "",
                    &[],
                    now_ms(),
                    event_kinds(),
                ),
                status: status.as_u16(),
                message: error.to_string(),
            };
            (
                status,
                page.render()
                    .unwrap_or_else(|_| "the error page failed to render".to_owned()),
            )
        }
    };
    secure(&mut HttpResponse::build(status))
        .content_type("text/html; charset=utf-8")
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .body(body)
}

/// The cluster `wanted` names: by key, else by a name exactly one cluster has.
fn pick<'a>(clusters: &'a [ClusterRow], wanted: &str) -> Result<&'a ClusterRow, UiError> {
    if let Some(cluster) = clusters.iter().find(|c| c.cluster_key == wanted) {
        return Ok(cluster);
    }
    let named: Vec<&ClusterRow> = clusters.iter().filter(|c| c.name == wanted).collect();
    match named.as_slice() {
        [] => Err(UiError::NotFound(format!(
            "No cluster named “{wanted}” has reported."
        ))),
        [one] => Ok(one),
        several => Err(UiError::NotFound(format!(
            "{} clusters named “{wanted}” have reported (their nodes hold different secrets); choose one: {}.",
            several.len(),
            several
                .iter()
                .map(|c| c.cluster_key.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}
