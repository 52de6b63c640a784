//! Troupe on Kubernetes, with nothing but the API server:
//!
//! - [`KubeLease`]: troupe's `Lease` on a `coordination.k8s.io/v1` Lease object, with
//!   optimistic concurrency (`resourceVersion`, `409 Conflict`) and a fencing token.
//! - [`KubeMembership`]: a cluster membership provider on one Lease per host, `renewTime` as the
//!   heartbeat, a label-selected watch for discovery, and self-fencing when the host's Lease is
//!   deleted.
//! - [`client`]: credentials — in-cluster service account, kubeconfig or `kubectl proxy`, or an
//!   explicit URL.
//! - `standin` (feature `standin`): a stand-in API server for the Lease API, for tests.
//!
//! The RBAC the service account needs is in `docs/operations.md`.

/// The kube client crate this one is built on (for the types in its API).
pub use kube;

mod error;
pub mod lease;
pub mod membership;
mod settings;
#[cfg(feature = "standin")]
pub mod standin;

pub use error::{api_code, describe};
pub use lease::KubeLease;
pub use membership::{
    HostHealth, KubeMembership, KubeMembershipSettings, MalformedLease, parse_member_lease,
};
pub use settings::{KubeTiming, TimingError};

/// A client for the API server.
///
/// With `url` (`http://127.0.0.1:8001` for `kubectl proxy`, or a test server), plain requests
/// to that URL with namespace `default`. Without, [`kube::Config::infer`]: the kubeconfig
/// (`$KUBECONFIG` or `~/.kube/config`) if there is one, else the in-cluster service account
/// (`KUBERNETES_SERVICE_HOST`/`_PORT` and the mounted token and CA).
pub async fn client(url: Option<&str>) -> Result<kube::Client, ClientError> {
    let config = match url {
        Some(url) => {
            let uri = url.parse().map_err(|e| ClientError(format!(
                "{url:?} is not a URL ({e}); expected e.g. http://127.0.0.1:8001"
            )))?;
            kube::Config::new(uri)
        }
        None => kube::Config::infer().await.map_err(|e| {
            ClientError(format!(
                "no Kubernetes credentials: {e} (run in a pod with a service account, set KUBECONFIG, or pass the URL of `kubectl proxy`)"
            ))
        })?,
    };
    kube::Client::try_from(config)
        .map_err(|e| ClientError(format!("cannot build the Kubernetes client: {e}")))
}

/// A client with the pod's own service-account credentials and nothing else (no kubeconfig is
/// read, whatever `$KUBECONFIG` says): `KUBERNETES_SERVICE_HOST`/`_PORT` and the token, CA and
/// namespace mounted under `/var/run/secrets/kubernetes.io/serviceaccount/`. Also answers the
/// service account's namespace.
pub fn in_cluster_client() -> Result<(kube::Client, String), ClientError> {
    let config = kube::Config::incluster().map_err(|e| {
        ClientError(format!(
            "no in-cluster Kubernetes credentials: {e} (run in a pod with a service account, or pass the API server's URL, e.g. that of `kubectl proxy`)"
        ))
    })?;
    let namespace = config.default_namespace.clone();
    let client = kube::Client::try_from(config)
        .map_err(|e| ClientError(format!("cannot build the Kubernetes client: {e}")))?;
    Ok((client, namespace))
}

/// Why no client could be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ClientError(pub String);
