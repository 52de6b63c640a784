//! Bearer tokens: for agents (ingest: one for every cluster, or one per cluster), for
//! operators (member operations) and for the coordination API.
//!
//! Tokens are compared in constant time, so a caller cannot learn a token byte by byte from
//! response timings.
//!
//! # Cluster-scoped ingest tokens
//! A token given with `--cluster-ingest-token NAME=TOKEN` admits batches that report cluster
//! `NAME` only: [`Tokens::require_ingest`] answers which clusters the presented token may write,
//! and [`IngestScope::admit`] refuses (403) a batch that claims another. The global
//! `--ingest-token` admits every cluster, as before.

use actix_web::HttpRequest;
use actix_web::http::header::AUTHORIZATION;

use crate::config::ClusterToken;
use crate::error::ApiError;

/// The tokens the server accepts.
#[derive(Clone)]
pub struct Tokens {
    ingest: Option<String>,
    cluster_ingest: Vec<ClusterToken>,
    admin: Option<String>,
    coordination: Option<String>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the tokens themselves.
        f.debug_struct("Tokens")
            .field("ingest", &self.ingest.is_some())
            .field("cluster_ingest", &self.cluster_ingest)
            .field("admin", &self.admin.is_some())
            .field("coordination", &self.coordination.is_some())
            .finish()
    }
}

/// Which clusters an ingest request may write, as its token says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IngestScope {
    /// The global ingest token: any cluster.
    AnyCluster,
    /// A cluster-scoped token: these cluster names only.
    Clusters(Vec<String>),
}

impl IngestScope {
    /// Refuses (403) a batch reporting `cluster` unless this scope covers it.
    pub fn admit(&self, cluster: &str) -> Result<(), ApiError> {
        match self {
            Self::AnyCluster => Ok(()),
            Self::Clusters(names) if names.iter().any(|name| name == cluster) => Ok(()),
            Self::Clusters(names) => Err(ApiError::ForbiddenCluster(format!(
                "this ingest token is scoped to cluster {}; the batch reports cluster `{cluster}` (identity.cluster). Send it with that cluster's token (--cluster-ingest-token {cluster}=…) or the global --ingest-token",
                names
                    .iter()
                    .map(|name| format!("`{name}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))),
        }
    }
}

impl Tokens {
    /// `ingest` guards the ingest endpoint; `admin`, when set, guards member operations.
    #[must_use]
    pub fn new(ingest: String, admin: Option<String>) -> Self {
        Self {
            ingest: Some(ingest),
            cluster_ingest: Vec::new(),
            admin,
            coordination: None,
        }
    }

    /// Ingest guarded by `global` (any cluster), when set, and by each of `clusters` (its
    /// cluster only); `admin`, when set, guards member operations.
    #[must_use]
    pub fn for_ingest(
        global: Option<String>,
        clusters: Vec<ClusterToken>,
        admin: Option<String>,
    ) -> Self {
        Self {
            ingest: global,
            cluster_ingest: clusters,
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

    /// Refuses `req` unless it carries the global ingest token or a cluster-scoped one, and
    /// answers which clusters it may write.
    pub fn require_ingest(&self, req: &HttpRequest) -> Result<IngestScope, ApiError> {
        let Some(token) = presented(req) else {
            return Err(ApiError::Unauthorized("missing bearer token"));
        };
        // Every token is compared, so the time taken does not tell which one matched.
        let global = self
            .ingest
            .as_deref()
            .is_some_and(|expected| constant_time_eq(token.as_bytes(), expected.as_bytes()));
        let mut clusters = Vec::new();
        for scoped in &self.cluster_ingest {
            if constant_time_eq(token.as_bytes(), scoped.token.as_bytes()) {
                clusters.push(scoped.cluster.clone());
            }
        }
        if global {
            Ok(IngestScope::AnyCluster)
        } else if clusters.is_empty() {
            Err(ApiError::Unauthorized("wrong bearer token"))
        } else {
            Ok(IngestScope::Clusters(clusters))
        }
    }

    /// Refuses `req` unless it carries the admin token (always, when none is configured).
    pub fn require_admin(&self, req: &HttpRequest) -> Result<(), ApiError> {
        check(req, self.admin.as_deref())
    }

    /// Which token `req` presents for an admin action, as the audit trail names it: the admin
    /// token's [`token_id`], `none` without a bearer token, `unknown` for any other. A wrong
    /// token gets no digest: it may be a near miss of the real one.
    #[must_use]
    pub fn admin_caller(&self, req: &HttpRequest) -> String {
        caller(req, "admin", self.admin.as_deref())
    }

    /// [`Tokens::admin_caller`] for a coordination action: `coordination:` and the digest of
    /// the coordination token, `none` or `unknown`.
    #[must_use]
    pub fn coordination_caller(&self, req: &HttpRequest) -> String {
        caller(req, "coordination", self.coordination.as_deref())
    }
}

fn caller(req: &HttpRequest, kind: &str, expected: Option<&str>) -> String {
    match (presented(req), expected) {
        (None, _) => "none".to_owned(),
        (Some(token), Some(expected))
            if constant_time_eq(token.as_bytes(), expected.as_bytes()) =>
        {
            token_id(kind, expected)
        }
        (Some(_), _) => "unknown".to_owned(),
    }
}

/// A stable id of a configured token that does not give it away: `<kind>:` and the first 12
/// hex digits of the token's SHA-256 (`admin:16175223c8dd`).
#[must_use]
pub fn token_id(kind: &str, token: &str) -> String {
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(token.as_bytes());
    let hex: String = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
    format!("{kind}:{hex}")
}

/// The bearer token `req` carries.
fn presented(req: &HttpRequest) -> Option<&str> {
    req.headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim)
}

fn check(req: &HttpRequest, expected: Option<&str>) -> Result<(), ApiError> {
    match (presented(req), expected) {
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

    fn bearer(token: &str) -> HttpRequest {
        TestRequest::default()
            .insert_header((AUTHORIZATION, format!("Bearer {token}")))
            .to_http_request()
    }

    #[test]
    fn a_cluster_scoped_token_admits_its_cluster_only_and_the_global_one_every_cluster() {
        let tokens = Tokens::for_ingest(
            Some("global".into()),
            vec![
                "shop=shop-token".parse().unwrap(),
                "billing=billing-token".parse().unwrap(),
            ],
            None,
        );
        let shop = tokens.require_ingest(&bearer("shop-token")).unwrap();
        assert_eq!(shop, IngestScope::Clusters(vec!["shop".into()]));
        assert!(shop.admit("shop").is_ok());
        let refused = shop.admit("billing").unwrap_err();
        assert!(
            refused.to_string().contains("scoped to cluster `shop`")
                && refused.to_string().contains("`billing`"),
            "{refused}"
        );
        let global = tokens.require_ingest(&bearer("global")).unwrap();
        assert!(global.admit("shop").is_ok() && global.admit("anything").is_ok());
        assert!(tokens.require_ingest(&bearer("shop-token2")).is_err());
        assert!(!format!("{tokens:?}").contains("shop-token"), "{tokens:?}");
    }

    #[test]
    fn without_a_global_token_only_cluster_scoped_ones_are_accepted() {
        let tokens = Tokens::for_ingest(None, vec!["shop=s".parse().unwrap()], None);
        assert!(tokens.require_ingest(&bearer("s")).is_ok());
        assert!(tokens.require_ingest(&bearer("")).is_err());
        assert!(tokens.require_ingest(&bearer("global")).is_err());
    }

    #[test]
    fn the_admin_caller_is_named_by_a_digest_of_its_token_and_never_by_the_token() {
        let tokens = Tokens::new("secret".into(), Some("admin-secret".into()));
        let admin = tokens.admin_caller(&bearer("admin-secret"));
        // sha256("admin-secret") begins 16175223c8dd: stable across restarts and replicas.
        assert_eq!(admin, "admin:16175223c8dd");
        assert!(
            admin.starts_with("admin:") && admin.len() == "admin:".len() + 12,
            "{admin}"
        );
        assert!(!admin.contains("secret"), "{admin}");
        assert_eq!(tokens.admin_caller(&bearer("admin-secre")), "unknown");
        assert_eq!(tokens.admin_caller(&bearer("secret")), "unknown");
        assert_eq!(
            tokens.admin_caller(&TestRequest::default().to_http_request()),
            "none"
        );
        assert_eq!(
            Tokens::new("secret".into(), None).admin_caller(&bearer("admin-secret")),
            "unknown"
        );
        let coordination =
            Tokens::new("secret".into(), None).with_coordination(Some("admin-secret".into()));
        assert_eq!(
            coordination.coordination_caller(&bearer("admin-secret")),
            "coordination:16175223c8dd"
        );
        assert_eq!(
            coordination.coordination_caller(&bearer("secret")),
            "unknown"
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
