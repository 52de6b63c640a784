//! Bearer tokens: one for agents (ingest), one for operators (member operations).
//!
//! Tokens are compared in constant time, so a caller cannot learn a token byte by byte from
//! response timings.

use actix_web::HttpRequest;
use actix_web::http::header::AUTHORIZATION;

use crate::error::ApiError;

/// The tokens the server accepts.
#[derive(Debug, Clone)]
pub struct Tokens {
    ingest: String,
    admin: Option<String>,
    coordination: Option<String>,
}

impl Tokens {
    /// `ingest` guards the ingest endpoint; `admin`, when set, guards member operations.
    #[must_use]
    pub fn new(ingest: String, admin: Option<String>) -> Self {
        Self {
            ingest,
            admin,
            coordination: None,
        }
    }

    /// `coordination`, when set, guards the coordination API (otherwise it is refused).
    #[must_use]
    pub fn with_coordination(mut self, coordination: Option<String>) -> Self {
        self.coordination = coordination;
        self
    }

    /// Refuses `req` unless it carries the coordination token; 403 when none is configured.
    pub fn require_coordination(&self, req: &HttpRequest) -> Result<(), ApiError> {
        match self.coordination.as_deref() {
            None => Err(ApiError::Forbidden(
                "the coordination API is off on this server; start it with --coordination-token (TROUPE_COORDINATION_TOKEN)",
            )),
            Some(expected) => check(req, Some(expected)),
        }
    }

    /// Refuses `req` unless it carries the ingest token.
    pub fn require_ingest(&self, req: &HttpRequest) -> Result<(), ApiError> {
        check(req, Some(&self.ingest))
    }

    /// Refuses `req` unless it carries the admin token (always, when none is configured).
    pub fn require_admin(&self, req: &HttpRequest) -> Result<(), ApiError> {
        check(req, self.admin.as_deref())
    }
}

fn check(req: &HttpRequest, expected: Option<&str>) -> Result<(), ApiError> {
    let presented = req
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim);
    match (presented, expected) {
        (None, _) => Err(ApiError::Unauthorized("missing bearer token")),
        (Some(_), None) => Err(ApiError::Unauthorized(
            "no admin token is configured on this server (set TROUPE_ADMIN_TOKEN)",
        )),
        (Some(token), Some(expected))
            if constant_time_eq(token.as_bytes(), expected.as_bytes()) =>
        {
            Ok(())
        }
        (Some(_), Some(_)) => Err(ApiError::Unauthorized("wrong bearer token")),
    }
}

/// Compares in time that depends on the lengths only.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::test::TestRequest;

    #[test]
    fn ingest_token_must_match_exactly() {
        let tokens = Tokens::new("secret".into(), None);
        let ok = TestRequest::default()
            .insert_header((AUTHORIZATION, "Bearer secret"))
            .to_http_request();
        assert!(tokens.require_ingest(&ok).is_ok());
        for header in ["Bearer secre", "Bearer secret2", "Basic secret", ""] {
            let req = TestRequest::default()
                .insert_header((AUTHORIZATION, header))
                .to_http_request();
            assert!(tokens.require_ingest(&req).is_err(), "{header:?}");
        }
        assert!(
            tokens
                .require_ingest(&TestRequest::default().to_http_request())
                .is_err()
        );
    }

    #[test]
    fn admin_operations_are_refused_when_no_admin_token_is_configured() {
        let tokens = Tokens::new("secret".into(), None);
        let req = TestRequest::default()
            .insert_header((AUTHORIZATION, "Bearer secret"))
            .to_http_request();
        assert!(tokens.require_admin(&req).is_err());
    }
}
