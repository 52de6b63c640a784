//! What `--membership`, `--singleton-lease` and `--directory` name, built from the command
//! line: the membership provider, the lease provider singletons acquire from, and the
//! directory. Each backend is connected once and shared (one etcd client for membership,
//! leases and directory; one PostgreSQL pool per URL).
//!
//! An embedding application can skip all of this and hand [`crate::AgentBuilder`] its own
//! provider, lease provider and directory.

use std::sync::Arc;
use std::time::Duration;

use troupe::cluster::{MembershipOptions, MembershipProvider};
use troupe::directory::Directory;
use troupe::lease::{LeaseProvider, LeaseSettings};
use troupe_coordination::etcd::{EtcdDirectory, EtcdLeases};
use troupe_coordination::etcd_membership::EtcdMembership;
use troupe_coordination::http::HttpCoordination;
use troupe_coordination::postgres::PgCoordination;
use troupe_kubernetes::lease::KubeLeaseProvider;
use troupe_kubernetes::{KubeMembership, KubeMembershipSettings, KubeTiming};

use crate::config::{AgentConfig, DirectoryKind, MembershipKind, SingletonLeaseKind};

/// The PostgreSQL schema the agent keeps its leases and directory in.
pub const POSTGRES_SCHEMA: &str = "troupe_coordination";

/// Who decides membership.
pub enum MembershipChoice {
    /// Gossip with these settings (the agent binds the transport and wires the frames).
    Gossip(MembershipOptions),
    /// Any provider: Kubernetes Leases, etcd, or the application's own.
    Provider(Box<dyn MembershipProvider>),
}

impl std::fmt::Debug for MembershipChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Gossip(settings) => f.debug_tuple("Gossip").field(settings).finish(),
            Self::Provider(_) => f.write_str("Provider(..)"),
        }
    }
}

/// Where singletons get their leases, and how they use them.
#[derive(Debug, Clone)]
pub struct SingletonLeases {
    /// Makes one lease per singleton.
    pub provider: Arc<dyn LeaseProvider>,
    /// TTL and renew interval of every singleton lease.
    pub settings: LeaseSettings,
    /// How long an elected host waits between acquire attempts.
    pub retry_interval: Duration,
    /// What it is, for the log (`etcd /troupe/shop/`).
    pub description: String,
}

/// A backend could not be reached or set up at start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what}: {reason}")]
pub struct BackendError {
    /// Which backend, named by its flags (`--membership etcd (--etcd-endpoints …)`).
    pub what: String,
    /// What went wrong.
    pub reason: String,
}

fn backend_error(what: impl Into<String>, reason: impl std::fmt::Display) -> BackendError {
    BackendError {
        what: what.into(),
        reason: reason.to_string(),
    }
}

/// Everything the command line asks for, connected.
#[derive(Debug)]
pub struct Backends {
    /// The membership provider (`None` when the application brings its own).
    pub membership: Option<MembershipChoice>,
    /// The singletons' leases, unless `--singleton-lease none`.
    pub singleton_leases: Option<SingletonLeases>,
    /// The directory, unless `--directory none`.
    pub directory: Option<Arc<dyn Directory>>,
}

/// Gossip membership settings from the command line.
#[must_use]
pub fn gossip_settings(config: &AgentConfig) -> MembershipOptions {
    MembershipOptions::default()
        .with_seeds(config.seeds.iter().cloned())
        .with_roles(config.roles.iter().cloned())
        .with_down_after(
            (config.down_after_ms > 0).then(|| Duration::from_millis(config.down_after_ms)),
        )
        .with_downing(config.downing_kind().downing())
}

struct Clients {
    kube: Option<(troupe_kubernetes::kube::Client, String)>,
    etcd: Option<etcd_client::Client>,
    postgres: Vec<(String, PgCoordination)>,
    http: Option<HttpCoordination>,
}

impl Clients {
    async fn kube(
        &mut self,
        config: &AgentConfig,
    ) -> Result<(troupe_kubernetes::kube::Client, String), BackendError> {
        if let Some(kube) = &self.kube {
            return Ok(kube.clone());
        }
        let kube = match &config.kube_api_url {
            Some(url) => {
                let client = troupe_kubernetes::client(Some(url))
                    .await
                    .map_err(|e| backend_error("--kube-api-url (TROUPE_KUBE_API_URL)", e))?;
                (client, config.kube_namespace())
            }
            None => {
                let (client, namespace) = troupe_kubernetes::in_cluster_client().map_err(|e| {
                    backend_error(
                        "Kubernetes (in-cluster service account; set --kube-api-url for kubectl proxy)",
                        e,
                    )
                })?;
                (client, config.kube_namespace.clone().unwrap_or(namespace))
            }
        };
        self.kube = Some(kube.clone());
        Ok(kube)
    }

    async fn etcd(&mut self, config: &AgentConfig) -> Result<etcd_client::Client, BackendError> {
        if let Some(client) = &self.etcd {
            return Ok(client.clone());
        }
        let client = troupe_coordination::etcd::connect(&config.etcd_endpoints)
            .await
            .map_err(|e| {
                backend_error(
                    format!(
                        "etcd at --etcd-endpoints {}",
                        config.etcd_endpoints.join(",")
                    ),
                    e,
                )
            })?;
        self.etcd = Some(client.clone());
        Ok(client)
    }

    async fn postgres(&mut self, url: &str, flag: &str) -> Result<PgCoordination, BackendError> {
        if let Some((_, pg)) = self.postgres.iter().find(|(u, _)| u == url) {
            return Ok(pg.clone());
        }
        let pg = PgCoordination::connect(url, POSTGRES_SCHEMA)
            .await
            .map_err(|e| backend_error(format!("PostgreSQL at {flag}"), e))?;
        self.postgres.push((url.to_owned(), pg.clone()));
        Ok(pg)
    }

    fn http(&mut self, config: &AgentConfig) -> Result<HttpCoordination, BackendError> {
        if let Some(http) = &self.http {
            return Ok(http.clone());
        }
        let url = config.control_plane.as_deref().unwrap_or_default();
        let token = config.coordination_token.as_deref().unwrap_or_default();
        let http = HttpCoordination::new(url, token)
            .map_err(|e| backend_error("--control-plane (TROUPE_CONTROL_PLANE_URL)", e))?;
        self.http = Some(http.clone());
        Ok(http)
    }
}

/// Connect what `config` names (the membership too, unless `with_membership` is false: the
/// application brings its own). The config must have passed [`AgentConfig::validate`].
pub async fn connect(
    config: &AgentConfig,
    with_membership: bool,
) -> Result<Backends, BackendError> {
    let mut clients = Clients {
        kube: None,
        etcd: None,
        postgres: Vec::new(),
        http: None,
    };
    let ttl = Duration::from_millis(config.membership_ttl_ms);
    let renew = Duration::from_millis(config.membership_renew_ms);
    let membership = match config.membership {
        _ if !with_membership => None,
        MembershipKind::Gossip => Some(MembershipChoice::Gossip(gossip_settings(config))),
        MembershipKind::Kubernetes => {
            let (client, namespace) = clients.kube(config).await?;
            let (label_key, cluster) = config.kube_lease_label();
            let settings = KubeMembershipSettings {
                namespace,
                cluster,
                lease_prefix: Some(config.kube_lease_prefix()),
                label_key: Some(label_key),
                timing: KubeTiming {
                    ttl,
                    renew_interval: renew,
                    max_clock_skew: Duration::from_secs(1).min(ttl.saturating_sub(renew * 2)),
                },
                roles: config.roles.iter().cloned().collect(),
            };
            let provider = KubeMembership::new(client, settings).map_err(|e| {
                backend_error(
                    "--membership kubernetes (--kube-lease-prefix, --kube-lease-label, --membership-ttl-ms, --membership-renew-ms)",
                    e,
                )
            })?;
            Some(MembershipChoice::Provider(Box::new(provider)))
        }
        MembershipKind::Etcd => {
            let client = clients.etcd(config).await?;
            let settings = LeaseSettings::new(ttl, renew)
                .map_err(|e| backend_error("--membership-ttl-ms / --membership-renew-ms", e))?;
            let roles: Vec<&str> = config.roles.iter().map(String::as_str).collect();
            let provider = EtcdMembership::new(client, &config.etcd_prefix(), &roles, settings)
                .map_err(|e| backend_error("--etcd-prefix (TROUPE_ETCD_PREFIX)", e))?;
            Some(MembershipChoice::Provider(Box::new(provider)))
        }
    };
    let lease_kind = config.singleton_lease_kind();
    let provider: Option<(Arc<dyn LeaseProvider>, String)> = match lease_kind {
        SingletonLeaseKind::None => None,
        SingletonLeaseKind::Kubernetes => {
            let (client, namespace) = clients.kube(config).await?;
            let description = format!("Kubernetes Leases in namespace {namespace}");
            Some((
                Arc::new(KubeLeaseProvider::new(client, &namespace)),
                description,
            ))
        }
        SingletonLeaseKind::Etcd => {
            let client = clients.etcd(config).await?;
            let prefix = config.etcd_prefix();
            let leases = EtcdLeases::new(client, &prefix)
                .map_err(|e| backend_error("--etcd-prefix (TROUPE_ETCD_PREFIX)", e))?;
            Some((Arc::new(leases), format!("etcd under {prefix}leases/")))
        }
        SingletonLeaseKind::Postgres => {
            let url = config
                .singleton_lease_database_url
                .as_deref()
                .unwrap_or_default();
            let pg = clients
                .postgres(url, "--singleton-lease-database-url")
                .await?;
            Some((
                Arc::new(pg.leases()),
                format!("PostgreSQL schema {POSTGRES_SCHEMA}"),
            ))
        }
        SingletonLeaseKind::ControlPlane => {
            let http = clients.http(config)?;
            Some((
                Arc::new(http.leases()),
                format!(
                    "the control plane at {}",
                    config.control_plane.as_deref().unwrap_or_default()
                ),
            ))
        }
    };
    let singleton_leases = match provider {
        None => None,
        Some((provider, description)) => Some(SingletonLeases {
            provider,
            settings: LeaseSettings::new(
                Duration::from_millis(config.singleton_lease_ttl_ms),
                Duration::from_millis(config.singleton_lease_renew_ms),
            )
            .map_err(|e| {
                backend_error("--singleton-lease-ttl-ms / --singleton-lease-renew-ms", e)
            })?,
            retry_interval: Duration::from_millis(config.singleton_lease_retry_ms),
            description,
        }),
    };
    let directory: Option<Arc<dyn Directory>> = match config.directory_kind() {
        DirectoryKind::None => None,
        DirectoryKind::Etcd => {
            let client = clients.etcd(config).await?;
            Some(Arc::new(
                EtcdDirectory::new(client, &config.etcd_prefix())
                    .map_err(|e| backend_error("--etcd-prefix (TROUPE_ETCD_PREFIX)", e))?,
            ))
        }
        DirectoryKind::Postgres => {
            let url = config
                .directory_database_url()
                .unwrap_or_default()
                .to_owned();
            let pg = clients.postgres(&url, "--directory-database-url").await?;
            Some(Arc::new(pg.directory()))
        }
        DirectoryKind::ControlPlane => Some(Arc::new(clients.http(config)?.directory())),
    };
    Ok(Backends {
        membership,
        singleton_leases,
        directory,
    })
}

/// The lease name of singleton `type_name` in cluster `system`: lower-case letters, digits
/// and `-` only, so every backend (a Kubernetes object name included) can store it.
#[must_use]
pub fn singleton_lease_name(system: &str, type_name: &str) -> String {
    let raw = format!("{system}-singleton-{type_name}").to_ascii_lowercase();
    let mut name: String = raw
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    name.truncate(253);
    name.trim_matches('-').to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn singleton_lease_names_are_valid_object_names() {
        assert_eq!(
            singleton_lease_name("demo", "job-scheduler"),
            "demo-singleton-job-scheduler"
        );
        assert_eq!(
            singleton_lease_name("Shop", "Billing.Run_1"),
            "shop-singleton-billing-run-1"
        );
    }
}
