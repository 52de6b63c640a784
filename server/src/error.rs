//! The API's error type and its JSON body: `{"error": "...", "status": N, "code": "..."}`.
//!
//! # Codes
//! Every body carries a stable machine-readable `code`. Lease and directory errors carry their
//! own ([`LeaseError::code`], [`DirectoryError::code`]: `ttl_out_of_range`, `owner_too_long`,
//! `not_owner`, `actor_empty`, `compacted`, `unavailable`, …), which the coordination HTTP
//! client maps back to the same error; every other error the code of its kind
//! ([`ApiError::code`]: `bad_request`, `not_found`, `unavailable`, …). Clients match on the
//! code, never on the message.
//!
//! # Status codes
//! Each variant maps to one status; a store error is 503 (with `Retry-After: 1`) when the
//! database is away for now ([`StoreError::is_unavailable`]) and 500 otherwise. A 401 carries
//! `WWW-Authenticate: Bearer`.
//!
//! # What a response never says
//! A 5xx body is a fixed sentence per variant: the database's or backend's own error text
//! (SQL, constraint names, index row sizes, connection strings) goes to the log at ERROR,
//! never to the client.

use crate::json::JsonBody;
use actix_web::http::StatusCode;
use actix_web::http::header::{self, HeaderValue};
use actix_web::{HttpResponse, ResponseError};
use serde::Serialize;
use utoipa::ToSchema;

use troupe_lease::directory::DirectoryError;
use troupe_lease::lease::{LeaseError, LeaseSettingsError};

use crate::store::StoreError;

/// Why a request failed; rendered as `{"error": "...", "status": N, "code": "..."}`.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// No or a wrong bearer token.
    #[error("unauthorized: {0}")]
    Unauthorized(&'static str),
    /// The request is malformed; the message says what was wrong.
    #[error("{0}")]
    BadRequest(String),
    /// The body is larger than allowed.
    #[error("request body is {size} bytes; the limit is {limit} bytes (--max-body-bytes)")]
    PayloadTooLarge {
        /// The body's size as far as it was read.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// The route exists but is switched off.
    #[error("{0}")]
    Forbidden(&'static str),
    /// The credential does not cover what the request touches (an ingest token scoped to
    /// another cluster); the message names both.
    #[error("{0}")]
    ForbiddenCluster(String),
    /// No such cluster, member, singleton or router.
    #[error("{0}")]
    NotFound(String),
    /// The request conflicts with the current state (a lease no longer held).
    #[error("{0}")]
    Conflict(String),
    /// What was asked for is gone for good (compacted directory history).
    #[error("{0}")]
    Gone(String),
    /// A backend the server relies on (etcd, the coordination database) is unreachable.
    #[error("{0}")]
    Unavailable(String),
    /// A backend the server relies on answered with an error.
    #[error("{0}")]
    BadGateway(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A lease or directory error: its status, its own code and its message.
    #[error("{message}")]
    Coded {
        /// The status its kind answers.
        status: StatusCode,
        /// [`LeaseError::code`] or [`DirectoryError::code`].
        code: &'static str,
        /// What went wrong.
        message: String,
    },
}

impl From<LeaseError> for ApiError {
    /// Bad input is 400, a grant not held 409, an unreachable backend 503, a backend's error
    /// or malformed value 502.
    fn from(error: LeaseError) -> Self {
        let status = match &error {
            LeaseError::Unavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
            LeaseError::NotOwner { .. } => StatusCode::CONFLICT,
            LeaseError::Provider { .. } | LeaseError::Malformed { .. } => StatusCode::BAD_GATEWAY,
            _ => StatusCode::BAD_REQUEST,
        };
        Self::Coded {
            status,
            code: error.code(),
            message: error.to_string(),
        }
    }
}

impl From<DirectoryError> for ApiError {
    /// Bad input is 400, a compacted history 410, an unreachable backend 503, a backend's
    /// error or malformed entry 502.
    fn from(error: DirectoryError) -> Self {
        let status = match &error {
            DirectoryError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            DirectoryError::Compacted { .. } => StatusCode::GONE,
            DirectoryError::Provider(_) | DirectoryError::Malformed { .. } => {
                StatusCode::BAD_GATEWAY
            }
            _ => StatusCode::BAD_REQUEST,
        };
        Self::Coded {
            status,
            code: error.code(),
            message: error.to_string(),
        }
    }
}

impl ApiError {
    /// Lease settings refused as [`troupe_lease::lease::LeaseSettings::new`] refused them: 400
    /// with the refusal's code (`ttl_out_of_range`, `renew_interval_out_of_range`), the
    /// message naming the request fields.
    #[must_use]
    pub fn lease_settings(error: &LeaseSettingsError) -> Self {
        Self::Coded {
            status: StatusCode::BAD_REQUEST,
            code: error.code(),
            message: format!("ttl_ms/renew_interval_ms: {error}"),
        }
    }

    /// The stable code the body carries: a lease or directory error's own, else its kind's.
    #[must_use]
    pub fn code(&self) -> &'static str {
        match self {
            Self::Unauthorized(_) => "unauthorized",
            Self::BadRequest(_) => "bad_request",
            Self::PayloadTooLarge { .. } => "payload_too_large",
            Self::Forbidden(_) | Self::ForbiddenCluster(_) => "forbidden",
            Self::NotFound(_) => "not_found",
            Self::Conflict(_) => "conflict",
            Self::Gone(_) => "gone",
            Self::Unavailable(_) => "unavailable",
            Self::BadGateway(_) => "provider_error",
            Self::Store(error) if error.is_unavailable() => "unavailable",
            Self::Store(_) => "internal",
            Self::Coded { code, .. } => code,
        }
    }
}

impl ApiError {
    /// What a response says instead of the error's own text, for failures whose text comes
    /// from a database or a backend (SQL, constraint and connection details stay in the log).
    fn public_message(&self) -> Option<&'static str> {
        match self {
            Self::Store(error) if error.is_unavailable() => {
                Some("the store is unavailable; retry later")
            }
            Self::Store(_) => {
                Some("internal error: the store failed; the server log has the detail")
            }
            Self::Unavailable(_) => Some("a coordination backend is unavailable; retry later"),
            Self::BadGateway(_) => {
                Some("a coordination backend answered with an error; the server log has the detail")
            }
            Self::Coded { status, .. } if *status == StatusCode::SERVICE_UNAVAILABLE => {
                Some("a coordination backend is unavailable; retry later")
            }
            Self::Coded { status, .. } if status.is_server_error() => {
                Some("a coordination backend answered with an error; the server log has the detail")
            }
            _ => None,
        }
    }

    /// What a response says: the error's own text, or the fixed sentence of a failure whose
    /// text comes from a database or a backend.
    #[must_use]
    pub fn public_text(&self) -> String {
        match self.public_message() {
            Some(message) => message.to_owned(),
            None => self.to_string(),
        }
    }
}

/// The error body.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    /// What went wrong, for people: it names the value and what is allowed; its wording may
    /// change.
    pub error: String,
    /// The HTTP status code.
    pub status: u16,
    /// What went wrong, for programs: a stable code. Coordination errors (leases and the
    /// directory) carry their own: `ttl_out_of_range`, `renew_interval_out_of_range`,
    /// `unsupported_settings` (valid settings the backend cannot honour), `name_empty`,
    /// `name_too_long`, `name_control_character`, `owner_…` (`owner_too_long`, …),
    /// `actor_…`, `host_…` (the same three endings), `invalid_argument`, `not_owner` (409:
    /// the grant is not held with that token; acquire again), `compacted` (410),
    /// `malformed` and `provider_error` (502), `unavailable` (503: retry). Every other error
    /// the code of its kind: `bad_request`, `unauthorized`, `forbidden`, `not_found`,
    /// `method_not_allowed`, `conflict`, `gone`, `payload_too_large`, `unavailable`,
    /// `provider_error`, `internal`. Treat a code you do not know by its status.
    #[schema(value_type = ErrorCode)]
    pub code: &'static str,
}

/// The codes of the errors that are not lease or directory errors ([`ApiError::code`], and the
/// 401, 404 and 405 bodies answered outside handlers).
pub const KIND_CODES: [&str; 11] = [
    "bad_request",
    "unauthorized",
    "forbidden",
    "not_found",
    "method_not_allowed",
    "conflict",
    "gone",
    "payload_too_large",
    "unavailable",
    "provider_error",
    "internal",
];

/// Every code an error body may carry, sorted, each once: [`KIND_CODES`], the lease codes
/// ([`troupe_lease::lease::LEASE_ERROR_CODES`], `name_…`, `owner_…`) and the directory codes
/// ([`troupe_lease::directory::DIRECTORY_ERROR_CODES`], `actor_…`, `host_…`).
#[must_use]
pub fn error_codes() -> Vec<String> {
    use troupe_lease::NameProblem;
    let mut codes: Vec<String> = KIND_CODES
        .iter()
        .chain(troupe_lease::lease::LEASE_ERROR_CODES.iter())
        .chain(troupe_lease::directory::DIRECTORY_ERROR_CODES.iter())
        .map(|c| (*c).to_owned())
        .collect();
    for prefix in ["name", "owner", "actor", "host"] {
        for problem in NameProblem::ALL {
            codes.push(format!("{prefix}_{}", problem.suffix()));
        }
    }
    codes.sort();
    codes.dedup();
    codes
}

/// The schema of [`ErrorBody::code`]: a string, one of [`error_codes`].
#[derive(Debug)]
pub struct ErrorCode;

impl utoipa::PartialSchema for ErrorCode {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{ObjectBuilder, Type};
        ObjectBuilder::new()
            .schema_type(Type::String)
            .enum_values(Some(error_codes()))
            .description(Some(
                "A stable machine-readable error code; treat one this document does not list by \
                 the status",
            ))
            .examples([serde_json::json!("ttl_out_of_range")])
            .into()
    }
}

impl ToSchema for ErrorCode {
    fn name() -> std::borrow::Cow<'static, str> {
        std::borrow::Cow::Borrowed("ErrorCode")
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        match self {
            Self::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            Self::BadRequest(_) => StatusCode::BAD_REQUEST,
            Self::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::Forbidden(_) | Self::ForbiddenCluster(_) => StatusCode::FORBIDDEN,
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::Conflict(_) => StatusCode::CONFLICT,
            Self::Gone(_) => StatusCode::GONE,
            Self::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::BadGateway(_) => StatusCode::BAD_GATEWAY,
            Self::Store(error) if error.is_unavailable() => StatusCode::SERVICE_UNAVAILABLE,
            Self::Store(_) => StatusCode::INTERNAL_SERVER_ERROR,
            Self::Coded { status, .. } => *status,
        }
    }

    fn error_response(&self) -> HttpResponse {
        let status = self.status_code();
        let error = self.public_text();
        if status.is_server_error() {
            tracing::error!(error = %self, status = status.as_u16(), "request failed");
        }
        let mut response = HttpResponse::build(status).json_body(ErrorBody {
            error,
            status: status.as_u16(),
            code: self.code(),
        });
        if status == StatusCode::SERVICE_UNAVAILABLE {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        if status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use troupe_lease::directory::{validate_actor, validate_host};
    use troupe_lease::lease::{LeaseSettings, MAX_NAME_BYTES, validate_identity};

    use super::*;

    #[test]
    fn the_documented_code_enum_lists_every_code_an_error_answers() {
        let listed = error_codes();
        let mut answered: Vec<&'static str> = [
            ApiError::Unauthorized("x"),
            ApiError::BadRequest("x".into()),
            ApiError::PayloadTooLarge { size: 2, limit: 1 },
            ApiError::Forbidden("x"),
            ApiError::ForbiddenCluster("x".into()),
            ApiError::NotFound("x".into()),
            ApiError::Conflict("x".into()),
            ApiError::Gone("x".into()),
            ApiError::Unavailable("x".into()),
            ApiError::BadGateway("x".into()),
        ]
        .iter()
        .map(ApiError::code)
        .collect();
        // The bodies answered outside handlers (allow.rs, viewer.rs).
        answered.extend(["method_not_allowed", "not_found", "unauthorized"]);
        let long = "x".repeat(MAX_NAME_BYTES + 1);
        for bad in ["", long.as_str(), "a\u{1}b"] {
            answered.push(validate_identity(bad, "o").unwrap_err().code());
            answered.push(validate_identity("n", bad).unwrap_err().code());
            answered.push(validate_actor(bad).unwrap_err().code());
            answered.push(validate_host(bad).unwrap_err().code());
        }
        for (ttl, renew) in [(7_200_000, 1_000), (10_000, 10)] {
            let error =
                LeaseSettings::new(Duration::from_millis(ttl), Duration::from_millis(renew))
                    .unwrap_err();
            answered.push(ApiError::lease_settings(&error).code());
        }
        answered.extend(troupe_lease::lease::LEASE_ERROR_CODES);
        answered.extend(troupe_lease::directory::DIRECTORY_ERROR_CODES);
        for code in answered {
            assert!(
                listed.iter().any(|c| c == code),
                "{code} is answered but not in the documented enum {listed:?}"
            );
        }
        assert!(listed.windows(2).all(|w| w[0] < w[1]), "{listed:?}");
    }
}
