//! The API's error type and its JSON body: `{"error": "...", "status": N}`.
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

use crate::store::StoreError;

/// Why a request failed; rendered as `{"error": "...", "status": N}`.
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
    /// What went wrong.
    pub error: String,
    /// The HTTP status code.
    pub status: u16,
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
