//! [`ClusterRouterOptions`]: what a cluster router routes over and how, validated once when the
//! router's props are built.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::cluster::Cluster;
use crate::path::validate_name;
use crate::routing::RoutingStrategy;

/// How often a smallest-mailbox router refreshes its cached depths unless told otherwise.
pub const DEFAULT_MAILBOX_DEPTH_REFRESH: Duration = Duration::from_millis(200);
/// How long a cached depth counts unless told otherwise.
pub const DEFAULT_MAILBOX_DEPTH_STALE_AFTER: Duration = Duration::from_millis(1_000);

pub(crate) type ExtractKey<M> = Arc<dyn Fn(&M) -> String + Send + Sync>;

/// A cluster router configuration that cannot work; each names the field and the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClusterRouterError {
    /// An empty routee path.
    #[error(
        "routee_path must not be empty: give the path of the routee on each node, such as /user/worker"
    )]
    EmptyRouteePath,
    /// A routee path that does not start at the root of a node.
    #[error(
        "routee_path must be an absolute path such as /user/worker (no node address), got {path:?}"
    )]
    RelativeRouteePath {
        /// The rejected path.
        path: String,
    },
    /// A routee path that no actor can live at.
    #[error("routee_path {path:?} is not an actor path: {problem}")]
    InvalidRouteePath {
        /// The rejected path.
        path: String,
        /// What is wrong with it.
        problem: String,
    },
    /// Consistent hashing without a key.
    #[error(
        "router_type consistent-hashing needs extract_key: set it with with_extract_key(|message| key)"
    )]
    MissingExtractKey,
    /// An empty role would match no member.
    #[error("role must not be empty: leave it unset to route to every up member")]
    EmptyRole,
    /// A refresh interval of zero.
    #[error("mailbox_depth_refresh must be > 0, got 0ms")]
    ZeroRefresh,
    /// A stale window that would expire every reading before its replacement arrives.
    #[error(
        "mailbox_depth_stale_after must be 0 (never expire) or at least mailbox_depth_refresh ({}ms), got {}ms: every reading would expire before the next one arrives",
        refresh.as_millis(),
        stale_after.as_millis()
    )]
    StaleWindowShorterThanRefresh {
        /// The rejected stale window.
        stale_after: Duration,
        /// The refresh interval it must not undercut.
        refresh: Duration,
    },
}

/// The options of a cluster router: the required values are the constructor's arguments, the
/// rest consuming `#[must_use]` setters; everything is validated once, by
/// [`crate::cluster_router::ClusterRouter::factory`].
///
/// | field | required | default |
/// |---|---|---|
/// | `cluster` | yes (argument of `new`) | |
/// | `router_type` | yes (argument of `new`) | |
/// | `routee_path` | yes (argument of `new`) | |
/// | `role` | no | every up member |
/// | `extract_key` | for consistent-hashing | |
/// | `mailbox_depth_refresh` | no (smallest-mailbox) | 200 ms |
/// | `mailbox_depth_stale_after` | no (smallest-mailbox; 0 = never expire) | 1000 ms |
#[must_use]
pub struct ClusterRouterOptions<M> {
    cluster: Cluster,
    router_type: RoutingStrategy,
    routee_path: String,
    role: Option<String>,
    extract_key: Option<ExtractKey<M>>,
    mailbox_depth_refresh: Duration,
    mailbox_depth_stale_after: Duration,
    seed: Option<u64>,
}

impl<M> fmt::Debug for ClusterRouterOptions<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterRouterOptions")
            .field("cluster", &self.cluster)
            .field("router_type", &self.router_type)
            .field("routee_path", &self.routee_path)
            .field("role", &self.role)
            .field("extract_key", &self.extract_key.as_ref().map(|_| "fn"))
            .field("mailbox_depth_refresh", &self.mailbox_depth_refresh)
            .field("mailbox_depth_stale_after", &self.mailbox_depth_stale_after)
            .finish()
    }
}

impl<M> ClusterRouterOptions<M> {
    /// Route over the actors at `routee_path` (such as `/user/worker`) on the members of
    /// `cluster` (whose transport carries the messages) by `router_type`; names parse with
    /// `"smallest-mailbox".parse::<RoutingStrategy>()`. The path is checked when the router
    /// starts.
    pub fn new(
        cluster: &Cluster,
        router_type: RoutingStrategy,
        routee_path: impl Into<String>,
    ) -> Self {
        Self {
            cluster: cluster.clone(),
            router_type,
            routee_path: routee_path.into(),
            role: None,
            extract_key: None,
            mailbox_depth_refresh: DEFAULT_MAILBOX_DEPTH_REFRESH,
            mailbox_depth_stale_after: DEFAULT_MAILBOX_DEPTH_STALE_AFTER,
            seed: None,
        }
    }

    /// Only members carrying this role host routees.
    pub fn with_role(mut self, role: impl Into<String>) -> Self {
        self.role = Some(role.into());
        self
    }

    /// The routing key of a message, for consistent hashing.
    pub fn with_extract_key(
        mut self,
        extract_key: impl Fn(&M) -> String + Send + Sync + 'static,
    ) -> Self {
        self.extract_key = Some(Arc::new(extract_key));
        self
    }

    /// How often a smallest-mailbox router refreshes the cached depths: the lag of its picture
    /// and the rate at which it sends one small query per routee node.
    pub fn with_mailbox_depth_refresh(mut self, refresh: Duration) -> Self {
        self.mailbox_depth_refresh = refresh;
        self
    }

    /// How long a cached depth counts without a replacement; `Duration::ZERO` keeps readings
    /// forever. Must be zero or at least the refresh interval.
    pub fn with_mailbox_depth_stale_after(mut self, stale_after: Duration) -> Self {
        self.mailbox_depth_stale_after = stale_after;
        self
    }

    /// Seed the random strategy (fixed seeds replay). Test machinery: only with the `testkit`
    /// feature.
    #[cfg(feature = "testkit")]
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Check every field; the first problem found is the error.
    pub(crate) fn validate(self) -> Result<ValidOptions<M>, ClusterRouterError> {
        let cluster = self.cluster;
        let strategy = self.router_type;
        let routee_path = validate_routee_path(&self.routee_path)?;
        if self.role.as_deref() == Some("") {
            return Err(ClusterRouterError::EmptyRole);
        }
        if strategy == RoutingStrategy::ConsistentHashing && self.extract_key.is_none() {
            return Err(ClusterRouterError::MissingExtractKey);
        }
        let refresh = self.mailbox_depth_refresh;
        if refresh.is_zero() {
            return Err(ClusterRouterError::ZeroRefresh);
        }
        let stale_after = self.mailbox_depth_stale_after;
        if !stale_after.is_zero() && stale_after < refresh {
            return Err(ClusterRouterError::StaleWindowShorterThanRefresh {
                stale_after,
                refresh,
            });
        }
        Ok(ValidOptions {
            cluster,
            strategy,
            routee_path,
            role: self.role,
            // Only consistent hashing reads a key: never call the function for nothing.
            extract_key: self
                .extract_key
                .filter(|_| strategy == RoutingStrategy::ConsistentHashing),
            refresh,
            stale_after,
            seed: self.seed,
        })
    }
}

/// `/user/worker` and the like: absolute, node-relative, every element a valid actor name.
fn validate_routee_path(path: &str) -> Result<String, ClusterRouterError> {
    if path.is_empty() {
        return Err(ClusterRouterError::EmptyRouteePath);
    }
    let Some(rest) = path.strip_prefix('/') else {
        return Err(ClusterRouterError::RelativeRouteePath {
            path: path.to_owned(),
        });
    };
    let invalid = |problem: String| ClusterRouterError::InvalidRouteePath {
        path: path.to_owned(),
        problem,
    };
    let elements: Vec<&str> = rest.trim_end_matches('/').split('/').collect();
    match elements.first() {
        Some(&"user" | &"system") if elements.len() >= 2 => {}
        _ => {
            return Err(invalid(
                "it must name an actor under /user or /system, such as /user/worker".to_owned(),
            ));
        }
    }
    for element in &elements[1..] {
        validate_name(element).map_err(|e| invalid(e.to_string()))?;
    }
    Ok(format!("/{}", elements.join("/")))
}

/// Options that passed validation.
pub(crate) struct ValidOptions<M> {
    pub(crate) cluster: Cluster,
    pub(crate) strategy: RoutingStrategy,
    pub(crate) routee_path: String,
    pub(crate) role: Option<String>,
    pub(crate) extract_key: Option<ExtractKey<M>>,
    pub(crate) refresh: Duration,
    /// Zero: readings never expire.
    pub(crate) stale_after: Duration,
    pub(crate) seed: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routee_paths_must_be_absolute_actor_paths_and_the_error_names_the_value() {
        assert_eq!(
            validate_routee_path("/user/worker").unwrap(),
            "/user/worker"
        );
        assert_eq!(validate_routee_path("/user/a/b/").unwrap(), "/user/a/b");
        assert_eq!(
            validate_routee_path(""),
            Err(ClusterRouterError::EmptyRouteePath)
        );
        let relative = validate_routee_path("user/worker").unwrap_err();
        assert_eq!(
            relative,
            ClusterRouterError::RelativeRouteePath {
                path: "user/worker".into()
            }
        );
        assert!(
            relative.to_string().contains("\"user/worker\""),
            "{relative}"
        );
        for bad in ["/", "/worker", "/user", "/user//worker", "/user/wor ker"] {
            let err = validate_routee_path(bad).unwrap_err();
            assert!(
                matches!(err, ClusterRouterError::InvalidRouteePath { .. }),
                "{bad}: {err}"
            );
            assert!(err.to_string().contains(&format!("{bad:?}")), "{err}");
        }
    }

    #[test]
    fn the_stale_window_message_names_both_values() {
        let err = ClusterRouterError::StaleWindowShorterThanRefresh {
            stale_after: Duration::from_millis(100),
            refresh: Duration::from_millis(200),
        };
        let text = err.to_string();
        assert!(text.contains("mailbox_depth_stale_after"), "{text}");
        assert!(text.contains("100ms") && text.contains("200ms"), "{text}");
        assert_eq!(
            ClusterRouterError::ZeroRefresh.to_string(),
            "mailbox_depth_refresh must be > 0, got 0ms"
        );
    }
}
