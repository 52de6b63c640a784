//! Read access: who may see the API, the live stream and the dashboard.
//!
//! # Credentials
//! When a read credential is configured, every route but the open ones below needs one of:
//! - the viewer token (`--viewer-token`) or the admin token as `Authorization: Bearer <token>`
//!   (API clients, scripts, Prometheus-style tools);
//! - the same token as the password of HTTP Basic (`Authorization: Basic`, any user name): what
//!   a browser sends after the server's `WWW-Authenticate: Basic` challenge, for the dashboard
//!   and its `EventSource` alike, with no page or script of ours handling the secret;
//! - a user name in the trusted proxy header (`--trusted-proxy-header`, e.g.
//!   `X-Forwarded-User` from oauth2-proxy), believed only when the TCP peer is inside one of
//!   `--trusted-proxy-cidrs`; from anywhere else the header is ignored.
//!
//! Anything else answers 401 with `WWW-Authenticate` (Basic and Bearer challenges).
//!
//! # What stays open
//! The probes (`/livez`, `/readyz`), `/metrics` (scraped by Prometheus inside the cluster;
//! restrict it with a NetworkPolicy), the OpenAPI document and its docs page (they describe the
//! API, not a cluster). Ingest and the coordination API check their own tokens; member
//! operations pass this gate with the admin token and are then checked for it again.
//!
//! # Off only on loopback
//! Without a read credential everything is readable by whoever can connect: allowed when the
//! server listens on a loopback address, refused at start otherwise unless
//! `--allow-anonymous-read` says so (logged at WARN on every start).

use crate::json::JsonBody;
use std::net::IpAddr;
use std::str::FromStr;
use std::sync::Arc;

use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::StatusCode;
use actix_web::http::header::{self, HeaderName, HeaderValue};
use actix_web::middleware::Next;
use actix_web::{HttpResponse, web};

use crate::cidr::Cidr;
use crate::config::Config;

/// The challenges of a 401: Basic first, so a browser asks for the token as a password.
const CHALLENGES: [&str; 2] = [
    "Basic realm=\"troupe\", charset=\"UTF-8\"",
    "Bearer realm=\"troupe\"",
];

/// Why the read-access configuration cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ViewerConfigError {
    /// A non-loopback listener with nothing guarding reads.
    #[error(
        "refusing to serve the API, live stream and dashboard on {listen} (not a loopback address) \
         to anyone who can connect: set --viewer-token (TROUPE_VIEWER_TOKEN), or \
         --trusted-proxy-header with --trusted-proxy-cidrs (TROUPE_TRUSTED_PROXY_HEADER, \
         TROUPE_TRUSTED_PROXY_CIDRS) behind an authenticating proxy, or pass \
         --allow-anonymous-read (TROUPE_ALLOW_ANONYMOUS_READ) to allow it"
    )]
    Unguarded {
        /// The listen address.
        listen: std::net::SocketAddr,
    },
    /// The proxy header is not a valid header name.
    #[error("--trusted-proxy-header {0:?} is not a valid HTTP header name")]
    HeaderName(String),
    /// A proxy header without the sources it is believed from.
    #[error(
        "--trusted-proxy-header needs --trusted-proxy-cidrs: the source addresses of the proxy that sets it"
    )]
    NoProxySources,
    /// An empty viewer token.
    #[error("--viewer-token must not be empty")]
    EmptyToken,
}

/// Where a request stands with respect to read access.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// Answered to anyone: probes, metrics, the API's own description.
    Open,
    /// Guarded by its own token (ingest, coordination) and not by this gate.
    OwnToken,
    /// Needs a read credential when one is configured.
    Read,
}

impl Route {
    /// The route `path` falls under.
    #[must_use]
    pub fn of(path: &str) -> Self {
        match path {
            "/livez" | "/readyz" | "/metrics" | "/api/v1/openapi.json" | "/api/v1/docs" => {
                Self::Open
            }
            "/api/v1/ingest" => Self::OwnToken,
            _ if path.starts_with("/api/v1/coordination/") => Self::OwnToken,
            _ => Self::Read,
        }
    }
}

/// Who was let in to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Viewer {
    /// Nothing guards reads (a loopback listener, or `--allow-anonymous-read`).
    Anyone,
    /// The viewer or admin token, as Bearer or as the Basic password.
    Token,
    /// The user the trusted proxy named.
    Proxied(String),
}

/// The trusted auth-proxy header and where it is believed from.
#[derive(Debug, Clone)]
struct TrustedProxy {
    header: HeaderName,
    sources: Vec<Cidr>,
}

/// The read-access policy, from the configuration.
#[derive(Debug, Clone)]
pub struct ViewerAccess {
    /// Tokens that grant reading (viewer, admin); empty with no proxy: reads are open.
    tokens: Vec<String>,
    proxy: Option<TrustedProxy>,
}

impl ViewerAccess {
    /// The policy `config` asks for; refuses an unguarded non-loopback listener.
    pub fn from_config(config: &Config) -> Result<Self, ViewerConfigError> {
        let proxy = match &config.trusted_proxy_header {
            None => None,
            Some(name) => {
                let header = HeaderName::from_str(name.trim())
                    .map_err(|_| ViewerConfigError::HeaderName(name.clone()))?;
                if config.trusted_proxy_cidrs.is_empty() {
                    return Err(ViewerConfigError::NoProxySources);
                }
                Some(TrustedProxy {
                    header,
                    sources: config.trusted_proxy_cidrs.clone(),
                })
            }
        };
        let viewer = match config.viewer_token.as_deref() {
            Some("") => return Err(ViewerConfigError::EmptyToken),
            other => other,
        };
        let guarded = viewer.is_some() || proxy.is_some();
        if !guarded && !config.listen.ip().is_loopback() {
            if !config.allow_anonymous_read {
                return Err(ViewerConfigError::Unguarded {
                    listen: config.listen,
                });
            }
            tracing::warn!(
                listen = %config.listen,
                "--allow-anonymous-read: the API, live stream and dashboard are readable by ANYONE who can reach this address; set --viewer-token or --trusted-proxy-header"
            );
        }
        let tokens = if guarded {
            viewer
                .into_iter()
                .chain(config.admin_token.as_deref())
                .map(str::to_owned)
                .collect()
        } else {
            Vec::new()
        };
        Ok(Self { tokens, proxy })
    }

    /// Whether reads need a credential at all.
    #[must_use]
    pub fn is_guarded(&self) -> bool {
        !self.tokens.is_empty() || self.proxy.is_some()
    }

    /// Decides a read: `authorization` is the `Authorization` header, `proxy_user` the trusted
    /// proxy header's value (if that header is configured and present), `peer` the TCP peer.
    pub fn check(
        &self,
        authorization: Option<&str>,
        proxy_user: Option<&str>,
        peer: Option<IpAddr>,
    ) -> Result<Viewer, &'static str> {
        if !self.is_guarded() {
            return Ok(Viewer::Anyone);
        }
        if let (Some(proxy), Some(user), Some(peer)) = (&self.proxy, proxy_user, peer)
            && !user.trim().is_empty()
            && proxy.sources.iter().any(|cidr| cidr.contains(peer))
        {
            return Ok(Viewer::Proxied(user.trim().to_owned()));
        }
        let Some(authorization) = authorization else {
            return Err(
                "a viewer credential is required: the viewer or admin token as a Bearer token or as the HTTP Basic password",
            );
        };
        let presented = presented_token(authorization)
            .ok_or("unsupported Authorization header: send Bearer <token> or Basic with the token as the password")?;
        if self
            .tokens
            .iter()
            .any(|t| crate::auth::constant_time_eq(t.as_bytes(), presented.as_bytes()))
        {
            Ok(Viewer::Token)
        } else {
            Err("wrong viewer credential")
        }
    }

    /// The configured proxy header, if any.
    fn proxy_header(&self) -> Option<&HeaderName> {
        self.proxy.as_ref().map(|p| &p.header)
    }
}

/// The token in a Bearer or Basic (as the password) `Authorization` value.
fn presented_token(authorization: &str) -> Option<String> {
    let (scheme, rest) = authorization.trim().split_once(' ')?;
    let rest = rest.trim();
    if scheme.eq_ignore_ascii_case("bearer") {
        return Some(rest.to_owned());
    }
    if scheme.eq_ignore_ascii_case("basic") {
        let decoded = String::from_utf8(base64_decode(rest)?).ok()?;
        let (_user, password) = decoded.split_once(':')?;
        return Some(password.to_owned());
    }
    None
}

/// Standard base64 (RFC 4648, padding optional), as HTTP Basic uses it.
fn base64_decode(text: &str) -> Option<Vec<u8>> {
    fn value(c: u8) -> Option<u32> {
        Some(u32::from(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        }))
    }
    let text = text.trim_end_matches('=').as_bytes();
    if text.len() % 4 == 1 {
        return None;
    }
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    for chunk in text.chunks(4) {
        let mut bits = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            bits |= value(c)? << (18 - 6 * i);
        }
        let bytes = bits.to_be_bytes();
        out.extend_from_slice(&bytes[1..chunk.len()]);
    }
    Some(out)
}

/// The gate, as actix middleware: lets a request through or answers 401.
pub async fn gate(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<EitherBody<impl MessageBody>>, actix_web::Error> {
    let access = req.app_data::<web::Data<Arc<ViewerAccess>>>().cloned();
    let Some(access) = access.filter(|a| a.is_guarded()) else {
        return next
            .call(req)
            .await
            .map(ServiceResponse::map_into_left_body);
    };
    if Route::of(req.path()) != Route::Read {
        return next
            .call(req)
            .await
            .map(ServiceResponse::map_into_left_body);
    }
    let headers = req.headers();
    let authorization = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let proxy_user = access
        .proxy_header()
        .and_then(|name| headers.get(name))
        .and_then(|v| v.to_str().ok());
    let peer = req.peer_addr().map(|a| a.ip());
    match access.check(authorization, proxy_user, peer) {
        Ok(viewer) => {
            if let Viewer::Proxied(user) = &viewer {
                tracing::debug!(user, path = req.path(), "read through the trusted proxy");
            }
            next.call(req)
                .await
                .map(ServiceResponse::map_into_left_body)
        }
        Err(reason) => {
            let response = unauthorized(req.path(), reason);
            Ok(req.into_response(response).map_into_right_body())
        }
    }
}

/// A 401 in the shape of the surface asked: Akka's `{"message"}` under `/management`, the
/// API's `ErrorBody` under `/api`, plain text for the dashboard.
fn unauthorized(path: &str, reason: &'static str) -> HttpResponse {
    let status = StatusCode::UNAUTHORIZED;
    let mut response = if path.starts_with("/management/") {
        HttpResponse::build(status).json_body(serde_json::json!({ "message": reason }))
    } else if path.starts_with("/api/") {
        HttpResponse::build(status).json_body(crate::error::ErrorBody {
            error: format!("unauthorized: {reason}"),
            status: status.as_u16(),
            code: "unauthorized",
        })
    } else {
        HttpResponse::build(status)
            .content_type("text/plain; charset=utf-8")
            .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
            .body(format!("401 unauthorized: {reason}\n"))
    };
    for challenge in CHALLENGES {
        response.headers_mut().append(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static(challenge),
        );
    }
    response
}

#[cfg(test)]
mod tests;
