//! The command line and environment of `troupe-agent`, and the checks that refuse
//! contradictory settings at start with a message naming the flags and what is allowed.
//!
//! Every flag has an environment variable (in `--help`); the names are fixed with the Helm
//! chart (`/work/team/contracts.md`). Defaults that depend on other flags (the singleton lease
//! follows the membership, the directory follows the singleton lease, the Kubernetes lease
//! prefix and label and the etcd prefix follow `--system`) are resolved by the methods below,
//! never by the parser, so `--help` states the rule instead of a value.

use std::net::SocketAddr;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use troupe::Address;

/// Which membership provider decides who is in the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, ValueEnum)]
pub enum MembershipKind {
    /// Gossip with seed nodes and a failure detector (`--seed`, `--down-after-ms`, `--downing`).
    Gossip,
    /// One `coordination.k8s.io` Lease per host (`--kube-*`, `--membership-ttl-ms`).
    Kubernetes,
    /// One etcd lease per host (`--etcd-endpoints`, `--etcd-prefix`, `--membership-ttl-ms`).
    Etcd,
}

/// Where singletons take the lease that guards them against running twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, ValueEnum)]
pub enum SingletonLeaseKind {
    /// No lease: a partition can run a singleton on both sides.
    None,
    /// A `coordination.k8s.io` Lease per singleton.
    Kubernetes,
    /// An etcd lease per singleton (`--etcd-endpoints`, `--etcd-prefix`).
    Etcd,
    /// A PostgreSQL row per singleton (`--singleton-lease-database-url`).
    Postgres,
    /// The control plane's coordination API (`--control-plane`, `--coordination-token`).
    ControlPlane,
}

/// Where the actor directory lives (whose claims the leader evicts when a member goes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, ValueEnum)]
pub enum DirectoryKind {
    /// No directory.
    None,
    /// etcd (`--etcd-endpoints`, `--etcd-prefix`).
    Etcd,
    /// PostgreSQL (`--directory-database-url`, else `--singleton-lease-database-url`).
    Postgres,
    /// The control plane's coordination API (`--control-plane`, `--coordination-token`).
    ControlPlane,
}

/// How gossip membership resolves members that stay unreachable (see `troupe::cluster::Downing`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, ValueEnum)]
pub enum DowningKind {
    /// The side with most members downs the rest; a minority side downs itself and fences.
    KeepMajority,
    /// Down every member unreachable for `--down-after-ms`, whatever the size of this side.
    AutoDown,
}

impl DowningKind {
    /// The runtime's setting.
    #[must_use]
    pub fn downing(self) -> troupe::cluster::Downing {
        match self {
            Self::KeepMajority => troupe::cluster::Downing::KeepMajority,
            Self::AutoDown => troupe::cluster::Downing::AutoDown,
        }
    }
}

fn value_name<T: ValueEnum>(value: T) -> String {
    value
        .to_possible_value()
        .map(|v| v.get_name().to_owned())
        .unwrap_or_default()
}

impl std::fmt::Display for MembershipKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&value_name(*self))
    }
}

impl std::fmt::Display for SingletonLeaseKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&value_name(*self))
    }
}

impl std::fmt::Display for DirectoryKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&value_name(*self))
    }
}

/// The default namespace file of a pod's service account.
pub const SERVICE_ACCOUNT_NAMESPACE_FILE: &str =
    "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// Command line and environment of `troupe-agent`.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "troupe-agent",
    version,
    about = "Run a Troupe node: join the cluster and host actors.",
    after_help = "Exit codes: 0 after a graceful leave (SIGTERM, SIGINT, or a Leave from the \
                  control plane); 3 when fenced (downed or removed by the cluster, its Lease or \
                  etcd key gone, a renewal deadline missed): restart it, it comes back as a \
                  fresh incarnation; 1 when it cannot start (bad flags, unreachable backend)."
)]
pub struct AgentConfig {
    /// Cluster (actor system) name; every node of a cluster uses the same one.
    #[arg(long, env = "TROUPE_SYSTEM", default_value = "troupe")]
    pub system: String,
    /// Address to listen on for other nodes.
    #[arg(long, env = "TROUPE_BIND", default_value = "127.0.0.1:2552")]
    pub bind: SocketAddr,
    /// Host name or IP other nodes use to reach this one (default: the bind IP).
    #[arg(long, env = "TROUPE_ADVERTISED_HOST")]
    pub advertised_host: Option<String>,
    /// Address of the management listener: health probes (`/_troupe/health`,
    /// `/_troupe/health/ready`), Prometheus `/metrics` and Akka Management's
    /// `/cluster/members` routes. Internal only; in Kubernetes bind
    /// `0.0.0.0:8558` so the kubelet can probe it. Port 0 picks a free port (logged at start).
    #[arg(long, env = "TROUPE_MANAGEMENT_BIND", default_value = "127.0.0.1:8558")]
    pub management_bind: SocketAddr,
    /// Bearer token that turns on member operations on the management listener (Akka
    /// Management's `PUT`/`DELETE /cluster/members/{address}`, `POST /cluster/members`);
    /// unset, they answer 403 and the cluster routes are read-only.
    #[arg(long, env = "TROUPE_MANAGEMENT_TOKEN", hide_env_values = true)]
    pub management_token: Option<String>,
    /// On shutdown, stay live but not ready this many milliseconds before leaving the cluster,
    /// so load balancers stop sending first (like a preStop sleep).
    #[arg(long, env = "TROUPE_DRAIN_DELAY_MS", default_value_t = 0)]
    pub drain_delay_ms: u64,
    /// On shutdown, wait at most this many milliseconds for the cluster to confirm the leave
    /// (hand-overs done, this node removed) before stopping the actors anyway.
    #[arg(long, env = "TROUPE_LEAVE_TIMEOUT_MS", default_value_t = 10_000)]
    pub leave_timeout_ms: u64,
    /// On shutdown or fence, wait at most this many milliseconds for the last reports to reach
    /// the control plane.
    #[arg(long, env = "TROUPE_FLUSH_TIMEOUT_MS", default_value_t = 10_000)]
    pub flush_timeout_ms: u64,

    /// How members find each other and who is in the cluster.
    #[arg(long, env = "TROUPE_MEMBERSHIP", value_enum, default_value_t = MembershipKind::Gossip)]
    pub membership: MembershipKind,
    /// Gossip: seed node addresses (`troupe://<system>@<host>:<port>`), comma-separated; the
    /// first may form a new cluster.
    #[arg(long = "seed", env = "TROUPE_SEEDS", value_delimiter = ',')]
    pub seeds: Vec<Address>,
    /// Gossip: down a member that stays unreachable this many milliseconds (0 = never).
    #[arg(long, env = "TROUPE_DOWN_AFTER_MS", default_value_t = 5_000)]
    pub down_after_ms: u64,
    /// Gossip: which members to down after `--down-after-ms` of unreachability [default:
    /// keep-majority].
    #[arg(long, env = "TROUPE_DOWNING", value_enum)]
    pub downing: Option<DowningKind>,
    /// Kubernetes: the namespace of the Leases [default: the service account's namespace
    /// file, else `default`].
    #[arg(long, env = "TROUPE_KUBE_NAMESPACE")]
    pub kube_namespace: Option<String>,
    /// Kubernetes: member Leases are named `<prefix>-<incarnation in hex>` [default: the
    /// `--system` name].
    #[arg(long, env = "TROUPE_KUBE_LEASE_PREFIX")]
    pub kube_lease_prefix: Option<String>,
    /// Kubernetes: the label (`key=value`) every member Lease carries and discovery selects on
    /// [default: `troupe.dev/cluster=<system>`].
    // clap prints this comment as --help, where `[default: …]` is its notation, not a link.
    #[allow(rustdoc::broken_intra_doc_links)]
    #[arg(long, env = "TROUPE_KUBE_LEASE_LABEL")]
    pub kube_lease_label: Option<String>,
    /// Kubernetes: the API server's URL (e.g. `http://127.0.0.1:8001` for `kubectl proxy`);
    /// unset: the pod's in-cluster service-account credentials (no kubeconfig is read).
    #[arg(long, env = "TROUPE_KUBE_API_URL")]
    pub kube_api_url: Option<String>,
    /// etcd: endpoints (`http://host:2379`), comma-separated.
    #[arg(long, env = "TROUPE_ETCD_ENDPOINTS", value_delimiter = ',')]
    pub etcd_endpoints: Vec<String>,
    /// etcd: the key prefix of this cluster, ending in `/` [default: `/troupe/<system>/`].
    // As above: clap's `[default: …]` notation in --help.
    #[allow(rustdoc::broken_intra_doc_links)]
    #[arg(long, env = "TROUPE_ETCD_PREFIX")]
    pub etcd_prefix: Option<String>,
    /// Kubernetes and etcd membership: a member whose lease goes unrenewed this many
    /// milliseconds is out (a whole number of seconds).
    #[arg(long, env = "TROUPE_MEMBERSHIP_TTL_MS", default_value_t = 15_000)]
    pub membership_ttl_ms: u64,
    /// Kubernetes and etcd membership: renew this node's lease every this many milliseconds.
    #[arg(long, env = "TROUPE_MEMBERSHIP_RENEW_MS", default_value_t = 5_000)]
    pub membership_renew_ms: u64,

    /// The lease singletons acquire before they run [default: follows `--membership`:
    /// kubernetes → kubernetes, etcd → etcd, gossip → none].
    #[arg(long, env = "TROUPE_SINGLETON_LEASE", value_enum)]
    pub singleton_lease: Option<SingletonLeaseKind>,
    /// `--singleton-lease postgres`: the database URL (`postgres://user:pass@host/db`).
    #[arg(
        long,
        env = "TROUPE_SINGLETON_LEASE_DATABASE_URL",
        hide_env_values = true
    )]
    pub singleton_lease_database_url: Option<String>,
    /// The singleton lease's time to live, milliseconds (a holder cut off from the lease
    /// backend stops its singleton before this passes).
    #[arg(long, env = "TROUPE_SINGLETON_LEASE_TTL_MS", default_value_t = 15_000)]
    pub singleton_lease_ttl_ms: u64,
    /// How often a singleton's host renews its lease, milliseconds (at most a third of the TTL).
    #[arg(long, env = "TROUPE_SINGLETON_LEASE_RENEW_MS", default_value_t = 3_000)]
    pub singleton_lease_renew_ms: u64,
    /// How long a singleton's elected host waits between attempts to acquire a lease held
    /// elsewhere, milliseconds.
    #[arg(long, env = "TROUPE_SINGLETON_LEASE_RETRY_MS", default_value_t = 5_000)]
    pub singleton_lease_retry_ms: u64,
    /// The actor directory whose claims the leader evicts when a member is removed or fences
    /// [default: follows `--singleton-lease`: etcd, postgres and control-plane use the same
    /// backend; kubernetes and none have no directory].
    #[arg(long, env = "TROUPE_DIRECTORY", value_enum)]
    pub directory: Option<DirectoryKind>,
    /// `--directory postgres`: the database URL [default: `--singleton-lease-database-url`].
    #[arg(long, env = "TROUPE_DIRECTORY_DATABASE_URL", hide_env_values = true)]
    pub directory_database_url: Option<String>,
    /// The control plane's coordination token (`--singleton-lease control-plane`,
    /// `--directory control-plane`).
    #[arg(long, env = "TROUPE_COORDINATION_TOKEN", hide_env_values = true)]
    pub coordination_token: Option<String>,

    /// This node's roles, comma-separated.
    #[arg(long = "role", env = "TROUPE_ROLES", value_delimiter = ',')]
    pub roles: Vec<String>,
    /// Shared cluster secret (at least 16 bytes); every node needs the same one.
    #[arg(long, env = "TROUPE_CLUSTER_SECRET", hide_env_values = true)]
    pub secret: String,
    /// Print each cluster event as one JSON line on stdout.
    #[arg(long, env = "TROUPE_EVENTS_JSON", default_value_t = false)]
    pub events_json: bool,
    /// Base URL of the control plane to report to (e.g. http://127.0.0.1:8080); unset: no
    /// reporting.
    #[arg(long, env = "TROUPE_CONTROL_PLANE_URL")]
    pub control_plane: Option<String>,
    /// PEM file of the certificate authority that signed the control plane's certificate:
    /// reports and the coordination client (`--singleton-lease control-plane`, `--directory
    /// control-plane`) then go over HTTPS trusting only that CA (the URL must be https://). Unset:
    /// an https:// URL is verified against the bundled public roots (webpki-roots).
    #[arg(long, env = "TROUPE_CONTROL_PLANE_CA")]
    pub control_plane_ca: Option<std::path::PathBuf>,
    /// Bearer token for the control plane's ingest endpoint.
    #[arg(
        long,
        env = "TROUPE_INGEST_TOKEN",
        hide_env_values = true,
        default_value = ""
    )]
    pub ingest_token: String,
    /// The machine this agent runs on, shown by the control plane (Kubernetes: the
    /// downward API's spec.nodeName).
    #[arg(long, env = "NODE_NAME")]
    pub node_name: Option<String>,
    /// Milliseconds between report batches.
    #[arg(long, env = "TROUPE_REPORT_INTERVAL_MS", default_value_t = 500)]
    pub report_interval_ms: u64,
    /// Directory where report batches not delivered within --flush-timeout-ms wait for the
    /// next start of this node (same --system and advertised host:port), which delivers
    /// them first, in order; one JSON-lines file per node, created if missing. From SIGTERM
    /// (or a fence) on, everything reported is written there and fsynced before it is sent,
    /// so a SIGKILL during the shutdown loses nothing either. In Kubernetes mount an emptyDir
    /// (it survives container restarts) or a volume. Unset (the default): no spool, and what
    /// the flush timeout cuts off is logged as lost. Refused at start: a relative path, a
    /// path that is not a directory (a regular file, a path under a file), a directory that
    /// cannot be created or written, and a directory another agent uses (each agent holds
    /// DIR/troupe-agent.lock, with its pid in it, while it runs).
    #[arg(long, env = "TROUPE_REPORT_SPOOL_DIR")]
    pub report_spool_dir: Option<std::path::PathBuf>,
    /// The most bytes this node's spool file may take, 65536 to 1073741824; when full, the
    /// oldest batches are dropped, counted in the next report and on /metrics [default:
    /// 16777216 (16 MiB)].
    // As above: clap's `[default: …]` notation in --help.
    #[allow(rustdoc::broken_intra_doc_links)]
    #[arg(long, env = "TROUPE_REPORT_SPOOL_MAX_BYTES")]
    pub report_spool_max_bytes: Option<u64>,
    /// Run the demo workload: a singleton job scheduler sending jobs through a cluster router
    /// to a compute worker on every node, with an occasional dead letter. Start it on every
    /// node of the cluster.
    #[arg(long, env = "TROUPE_DEMO", default_value_t = false)]
    pub demo: bool,
    /// The standard `OTEL_*` export settings, read exactly as the server reads them: the
    /// agent's own log records and spans (its report requests among them) leave over
    /// OTLP/HTTP (see `troupe_telemetry::otlp`).
    #[command(flatten)]
    pub otlp: troupe_telemetry::otlp::OtlpArgs,
    /// This process's incarnation, when chosen before the start (`troupe-agent` chooses it
    /// first so its telemetry resource names it); unset, the start draws a random one.
    #[arg(skip)]
    pub incarnation: Option<u64>,
}

/// Settings that cannot work together, or a value that cannot work: the message names the
/// flags and says what is allowed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// `--report-spool-max-bytes` when unset: 16 MiB, a few full batches.
pub const DEFAULT_REPORT_SPOOL_MAX_BYTES: u64 = 16 * 1024 * 1024;
/// The smallest `--report-spool-max-bytes`.
pub const MIN_REPORT_SPOOL_MAX_BYTES: u64 = 64 * 1024;
/// The largest `--report-spool-max-bytes`: the spool is read into memory at start.
pub const MAX_REPORT_SPOOL_MAX_BYTES: u64 = 1024 * 1024 * 1024;

fn refuse<T>(message: impl Into<String>) -> Result<T, ConfigError> {
    Err(ConfigError(message.into()))
}

impl AgentConfig {
    /// The settings of a node in cluster `system` listening on `bind` with `secret`, gossip
    /// membership with itself as the only seed, everything else at its default: what
    /// `troupe-agent --system <system> --bind <bind> --seed <itself> --secret <secret>` gives.
    #[must_use]
    pub fn new(system: &str, bind: SocketAddr, secret: &str) -> Self {
        let mut config = Self::parse_from([
            "troupe-agent",
            "--system",
            system,
            "--secret",
            secret,
            "--management-bind",
            "127.0.0.1:0",
        ]);
        config.bind = bind;
        config.seeds = vec![Address::new(system, &bind.ip().to_string(), bind.port())];
        config
    }

    /// The singleton lease in force: the flag, else the one that follows the membership.
    #[must_use]
    pub fn singleton_lease_kind(&self) -> SingletonLeaseKind {
        self.singleton_lease.unwrap_or(match self.membership {
            MembershipKind::Gossip => SingletonLeaseKind::None,
            MembershipKind::Kubernetes => SingletonLeaseKind::Kubernetes,
            MembershipKind::Etcd => SingletonLeaseKind::Etcd,
        })
    }

    /// The directory in force: the flag, else the one that follows the singleton lease.
    #[must_use]
    pub fn directory_kind(&self) -> DirectoryKind {
        self.directory.unwrap_or(match self.singleton_lease_kind() {
            SingletonLeaseKind::None | SingletonLeaseKind::Kubernetes => DirectoryKind::None,
            SingletonLeaseKind::Etcd => DirectoryKind::Etcd,
            SingletonLeaseKind::Postgres => DirectoryKind::Postgres,
            SingletonLeaseKind::ControlPlane => DirectoryKind::ControlPlane,
        })
    }

    /// The downing in force (gossip only).
    #[must_use]
    pub fn downing_kind(&self) -> DowningKind {
        self.downing.unwrap_or(DowningKind::KeepMajority)
    }

    /// The etcd key prefix: the flag, else `/troupe/<system>/`.
    #[must_use]
    pub fn etcd_prefix(&self) -> String {
        self.etcd_prefix
            .clone()
            .unwrap_or_else(|| format!("/troupe/{}/", self.system))
    }

    /// The member Lease name prefix: the flag, else the system name.
    #[must_use]
    pub fn kube_lease_prefix(&self) -> String {
        self.kube_lease_prefix
            .clone()
            .unwrap_or_else(|| self.system.clone())
    }

    /// The member Lease label as `(key, value)`: the flag, else `troupe.dev/cluster=<system>`.
    #[must_use]
    pub fn kube_lease_label(&self) -> (String, String) {
        match self
            .kube_lease_label
            .as_deref()
            .and_then(|l| l.split_once('='))
        {
            Some((key, value)) => (key.to_owned(), value.to_owned()),
            None => (
                troupe_kubernetes::membership::CLUSTER_LABEL.to_owned(),
                self.system.clone(),
            ),
        }
    }

    /// The namespace of the Leases: the flag, else the service account's namespace file,
    /// else `default`.
    #[must_use]
    pub fn kube_namespace(&self) -> String {
        self.kube_namespace.clone().unwrap_or_else(|| {
            std::fs::read_to_string(SERVICE_ACCOUNT_NAMESPACE_FILE)
                .ok()
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "default".to_owned())
        })
    }

    /// The database URL of the directory: its own flag, else the singleton lease's.
    #[must_use]
    pub fn directory_database_url(&self) -> Option<&str> {
        self.directory_database_url
            .as_deref()
            .or(self.singleton_lease_database_url.as_deref())
    }

    /// Whether anything uses the Kubernetes API.
    #[must_use]
    pub fn uses_kubernetes(&self) -> bool {
        self.membership == MembershipKind::Kubernetes
            || self.singleton_lease_kind() == SingletonLeaseKind::Kubernetes
    }

    /// Whether anything uses etcd.
    #[must_use]
    pub fn uses_etcd(&self) -> bool {
        self.membership == MembershipKind::Etcd
            || self.singleton_lease_kind() == SingletonLeaseKind::Etcd
            || self.directory_kind() == DirectoryKind::Etcd
    }

    /// How long to stay live-but-not-ready before leaving.
    #[must_use]
    pub fn drain_delay(&self) -> Duration {
        Duration::from_millis(self.drain_delay_ms)
    }

    /// How long to wait for the leave to complete.
    #[must_use]
    pub fn leave_timeout(&self) -> Duration {
        Duration::from_millis(self.leave_timeout_ms)
    }

    /// How long to wait for the last reports to reach the control plane.
    #[must_use]
    pub fn flush_timeout(&self) -> Duration {
        Duration::from_millis(self.flush_timeout_ms)
    }

    /// The report spool's settings, when `--report-spool-dir` is set.
    #[must_use]
    pub fn report_spool(&self) -> Option<crate::reporter::spool_file::SpoolSettings> {
        self.report_spool_dir
            .clone()
            .map(|dir| crate::reporter::spool_file::SpoolSettings {
                dir,
                max_bytes: self
                    .report_spool_max_bytes
                    .unwrap_or(DEFAULT_REPORT_SPOOL_MAX_BYTES),
            })
    }

    /// Check the settings against each other. Every refusal names the flags involved (and
    /// their environment variables) and says what is allowed.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.check(false)
    }

    /// [`AgentConfig::validate`], leaving out the membership flags when the application
    /// brings its own membership provider.
    pub fn check(&self, own_membership: bool) -> Result<(), ConfigError> {
        if self.control_plane_ca.is_some() {
            match self.control_plane.as_deref() {
                Some(url) if url.starts_with("https://") => {}
                Some(url) => {
                    return refuse(format!(
                        "--control-plane-ca (TROUPE_CONTROL_PLANE_CA) needs an https:// \
                         --control-plane URL, got {url:?}: reports would go in plain HTTP"
                    ));
                }
                None => {
                    return refuse(
                        "--control-plane-ca (TROUPE_CONTROL_PLANE_CA) needs --control-plane \
                         (TROUPE_CONTROL_PLANE_URL), an https:// URL",
                    );
                }
            }
        }
        if let Some(max) = self.report_spool_max_bytes {
            if self.report_spool_dir.is_none() {
                return refuse(
                    "--report-spool-max-bytes (TROUPE_REPORT_SPOOL_MAX_BYTES) bounds the report \
                     spool, which needs --report-spool-dir (TROUPE_REPORT_SPOOL_DIR). Set the \
                     directory, or remove --report-spool-max-bytes",
                );
            }
            if !(MIN_REPORT_SPOOL_MAX_BYTES..=MAX_REPORT_SPOOL_MAX_BYTES).contains(&max) {
                return refuse(format!(
                    "--report-spool-max-bytes (TROUPE_REPORT_SPOOL_MAX_BYTES) must be between \
                     {MIN_REPORT_SPOOL_MAX_BYTES} and {MAX_REPORT_SPOOL_MAX_BYTES} bytes, got {max}"
                ));
            }
        }
        if let Some(dir) = &self.report_spool_dir {
            if self.control_plane.is_none() {
                return refuse(format!(
                    "--report-spool-dir (TROUPE_REPORT_SPOOL_DIR) {} keeps undelivered reports, \
                     which needs --control-plane (TROUPE_CONTROL_PLANE_URL) to report to. Set \
                     it, or remove --report-spool-dir",
                    dir.display()
                ));
            }
            if dir.as_os_str().is_empty() {
                return refuse(
                    "--report-spool-dir (TROUPE_REPORT_SPOOL_DIR) is empty; give a directory \
                     path, or leave it unset for no spool",
                );
            }
            if dir.is_relative() {
                return refuse(format!(
                    "--report-spool-dir (TROUPE_REPORT_SPOOL_DIR) {} is a relative path; give an \
                     absolute one (the next start of this node must find the same directory, \
                     whatever its working directory), or leave it unset for no spool",
                    dir.display()
                ));
            }
        }
        let membership = self.membership;
        let lease = self.singleton_lease_kind();
        let directory = self.directory_kind();
        if membership != MembershipKind::Gossip {
            if !self.seeds.is_empty() {
                return refuse(format!(
                    "--membership {membership} cannot be combined with --seed (TROUPE_SEEDS): \
                     seeds are for --membership gossip; with {membership} membership the \
                     members find each other through their {}. Remove --seed, or use \
                     --membership gossip",
                    if membership == MembershipKind::Kubernetes {
                        "Leases"
                    } else {
                        "etcd keys"
                    }
                ));
            }
            if self.downing.is_some() {
                return refuse(format!(
                    "--downing (TROUPE_DOWNING) applies to --membership gossip only, not to \
                     --membership {membership}: a {membership} member is out when its lease \
                     expires. Remove --downing"
                ));
            }
        } else if self.seeds.is_empty() && !own_membership {
            return refuse(
                "--membership gossip needs at least one --seed (TROUPE_SEEDS), e.g. \
                 --seed troupe://<system>@<host>:<port>; the first seed may form a new \
                 cluster (give a node itself to start one). Or choose --membership \
                 kubernetes|etcd",
            );
        }
        if !self.uses_kubernetes() {
            for (flag, given) in [
                ("--kube-namespace", self.kube_namespace.is_some()),
                ("--kube-lease-prefix", self.kube_lease_prefix.is_some()),
                ("--kube-lease-label", self.kube_lease_label.is_some()),
                ("--kube-api-url", self.kube_api_url.is_some()),
            ] {
                if given {
                    return refuse(format!(
                        "{flag} is for the Kubernetes API, which nothing uses here \
                         (--membership {membership}, --singleton-lease {lease}); allowed with \
                         --membership kubernetes or --singleton-lease kubernetes. Remove {flag}"
                    ));
                }
            }
        }
        if self.uses_etcd() {
            if self.etcd_endpoints.is_empty() {
                let who = if membership == MembershipKind::Etcd {
                    "--membership etcd".to_owned()
                } else if lease == SingletonLeaseKind::Etcd {
                    "--singleton-lease etcd".to_owned()
                } else {
                    "--directory etcd".to_owned()
                };
                return refuse(format!(
                    "{who} needs --etcd-endpoints (TROUPE_ETCD_ENDPOINTS), comma-separated \
                     URLs such as http://127.0.0.1:2379"
                ));
            }
            let prefix = self.etcd_prefix();
            if !prefix.ends_with('/') {
                return refuse(format!(
                    "--etcd-prefix (TROUPE_ETCD_PREFIX) {prefix:?} must end with '/', e.g. \
                     /troupe/{}/",
                    self.system
                ));
            }
        } else {
            for (flag, given) in [
                ("--etcd-endpoints", !self.etcd_endpoints.is_empty()),
                ("--etcd-prefix", self.etcd_prefix.is_some()),
            ] {
                if given {
                    return refuse(format!(
                        "{flag} is for etcd, which nothing uses here (--membership \
                         {membership}, --singleton-lease {lease}, --directory {directory}); \
                         allowed with --membership etcd, --singleton-lease etcd or \
                         --directory etcd. Remove {flag}"
                    ));
                }
            }
        }
        for endpoint in &self.etcd_endpoints {
            if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
                return refuse(format!(
                    "--etcd-endpoints (TROUPE_ETCD_ENDPOINTS): {endpoint:?} is not a URL; \
                     allowed: http://host:port or https://host:port, comma-separated"
                ));
            }
        }
        if lease == SingletonLeaseKind::Postgres && self.singleton_lease_database_url.is_none() {
            return refuse(
                "--singleton-lease postgres needs --singleton-lease-database-url \
                 (TROUPE_SINGLETON_LEASE_DATABASE_URL), e.g. postgres://user:pass@host/db",
            );
        }
        if lease != SingletonLeaseKind::Postgres
            && self.singleton_lease_database_url.is_some()
            && directory != DirectoryKind::Postgres
        {
            return refuse(format!(
                "--singleton-lease-database-url is for --singleton-lease postgres, not \
                 --singleton-lease {lease}. Remove it, or use --singleton-lease postgres"
            ));
        }
        if directory == DirectoryKind::Postgres && self.directory_database_url().is_none() {
            return refuse(
                "--directory postgres needs --directory-database-url \
                 (TROUPE_DIRECTORY_DATABASE_URL) or --singleton-lease-database-url, e.g. \
                 postgres://user:pass@host/db",
            );
        }
        for (uses, flag) in [
            (
                lease == SingletonLeaseKind::ControlPlane,
                "--singleton-lease control-plane",
            ),
            (
                directory == DirectoryKind::ControlPlane,
                "--directory control-plane",
            ),
        ] {
            if uses && self.control_plane.is_none() {
                return refuse(format!(
                    "{flag} needs --control-plane (TROUPE_CONTROL_PLANE_URL), the control \
                     plane's base URL, e.g. http://troupe-server:8080"
                ));
            }
            if uses && self.coordination_token.as_deref().is_none_or(str::is_empty) {
                return refuse(format!(
                    "{flag} needs --coordination-token (TROUPE_COORDINATION_TOKEN), the token \
                     the server was started with (its --coordination-token)"
                ));
            }
        }
        if membership != MembershipKind::Gossip {
            let (ttl, renew) = (self.membership_ttl_ms, self.membership_renew_ms);
            if ttl == 0 || ttl % 1_000 != 0 {
                return refuse(format!(
                    "--membership-ttl-ms (TROUPE_MEMBERSHIP_TTL_MS) must be a whole number of \
                     seconds of at least 1000 (Leases and etcd count whole seconds), got {ttl}"
                ));
            }
            if membership == MembershipKind::Etcd && ttl < 2_000 {
                return refuse(format!(
                    "--membership-ttl-ms (TROUPE_MEMBERSHIP_TTL_MS) must be at least 2000 for \
                     etcd (its smallest lease), got {ttl}"
                ));
            }
            if renew == 0 || renew * 3 > ttl {
                return refuse(format!(
                    "--membership-renew-ms (TROUPE_MEMBERSHIP_RENEW_MS) must be between 1 and \
                     a third of --membership-ttl-ms ({}), so that two renewals can fail before \
                     the lease expires; got {renew}",
                    ttl / 3
                ));
            }
        }
        if lease != SingletonLeaseKind::None {
            let (ttl, renew) = (self.singleton_lease_ttl_ms, self.singleton_lease_renew_ms);
            if ttl == 0 || renew == 0 || renew * 3 > ttl {
                return refuse(format!(
                    "--singleton-lease-renew-ms ({renew}) must be between 1 and a third of \
                     --singleton-lease-ttl-ms ({ttl}), so that two renewals can fail before \
                     the lease expires"
                ));
            }
            if matches!(
                lease,
                SingletonLeaseKind::Kubernetes | SingletonLeaseKind::Etcd
            ) && ttl % 1_000 != 0
            {
                return refuse(format!(
                    "--singleton-lease-ttl-ms (TROUPE_SINGLETON_LEASE_TTL_MS) must be a whole \
                     number of seconds for --singleton-lease {lease}, got {ttl}"
                ));
            }
            if self.singleton_lease_retry_ms == 0 {
                return refuse(
                    "--singleton-lease-retry-ms (TROUPE_SINGLETON_LEASE_RETRY_MS) must be > 0 \
                     (there is no switch to stop retrying), got 0",
                );
            }
        }
        if let Some(label) = &self.kube_lease_label
            && !valid_label(label)
        {
            return refuse(format!(
                "--kube-lease-label (TROUPE_KUBE_LEASE_LABEL) {label:?} is not a label: \
                 allowed is key=value, the key an optional DNS prefix and '/' then up to 63 \
                 letters, digits, '-', '_', '.', the value up to 63 of the same, both starting \
                 and ending alphanumeric"
            ));
        }
        Ok(())
    }
}

/// Whether `label` is `key=value` as Kubernetes accepts it.
fn valid_label(label: &str) -> bool {
    let Some((key, value)) = label.split_once('=') else {
        return false;
    };
    let segment = |s: &str, allow_empty: bool| {
        (allow_empty && s.is_empty())
            || (s.len() <= 63
                && !s.is_empty()
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
                && s.as_bytes()[0].is_ascii_alphanumeric()
                && s.as_bytes()[s.len() - 1].is_ascii_alphanumeric())
    };
    let name = match key.rsplit_once('/') {
        Some((prefix, name)) => {
            if prefix.is_empty()
                || prefix.len() > 253
                || !prefix.split('.').all(|p| segment(p, false))
            {
                return false;
            }
            name
        }
        None => key,
    };
    segment(name, false) && segment(value, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<AgentConfig, String> {
        let mut all = vec!["troupe-agent", "--secret", "a secret that is long enough"];
        all.extend_from_slice(args);
        AgentConfig::try_parse_from(all).map_err(|e| e.to_string())
    }

    fn refused(args: &[&str]) -> String {
        let config = parse(args).expect("parses");
        config.validate().expect_err("refused").to_string()
    }

    const SEED: &str = "troupe://troupe@127.0.0.1:2552";

    #[test]
    fn a_control_plane_ca_needs_an_https_url() {
        let message = refused(&[
            "--seed",
            SEED,
            "--control-plane",
            "http://cp:8080",
            "--control-plane-ca",
            "/ca.pem",
        ]);
        assert!(
            message.contains("--control-plane-ca") && message.contains("https://"),
            "{message}"
        );
        let config = parse(&[
            "--seed",
            SEED,
            "--control-plane",
            "https://cp:8443",
            "--control-plane-ca",
            "/ca.pem",
        ])
        .unwrap();
        config.validate().unwrap();
    }

    #[test]
    fn the_defaults_are_gossip_without_a_lease_and_need_a_seed() {
        let config = parse(&["--seed", SEED]).unwrap();
        config.validate().unwrap();
        assert_eq!(config.membership, MembershipKind::Gossip);
        assert_eq!(config.singleton_lease_kind(), SingletonLeaseKind::None);
        assert_eq!(config.directory_kind(), DirectoryKind::None);
        assert_eq!(config.downing_kind(), DowningKind::KeepMajority);
        assert_eq!(
            (config.leave_timeout_ms, config.flush_timeout_ms),
            (10_000, 10_000)
        );
        let message = refused(&[]);
        assert!(
            message.contains("--seed") && message.contains("gossip"),
            "{message}"
        );
    }

    #[test]
    fn the_singleton_lease_follows_the_membership_and_the_directory_follows_the_lease() {
        let kube = parse(&["--membership", "kubernetes"]).unwrap();
        kube.validate().unwrap();
        assert_eq!(kube.singleton_lease_kind(), SingletonLeaseKind::Kubernetes);
        assert_eq!(kube.directory_kind(), DirectoryKind::None);
        let etcd = parse(&["--membership", "etcd", "--etcd-endpoints", "http://e:2379"]).unwrap();
        etcd.validate().unwrap();
        assert_eq!(etcd.singleton_lease_kind(), SingletonLeaseKind::Etcd);
        assert_eq!(etcd.directory_kind(), DirectoryKind::Etcd);
        assert_eq!(etcd.etcd_prefix(), "/troupe/troupe/");
        let pg = parse(&[
            "--seed",
            SEED,
            "--singleton-lease",
            "postgres",
            "--singleton-lease-database-url",
            "postgres://x@h/db",
        ])
        .unwrap();
        pg.validate().unwrap();
        assert_eq!(pg.directory_kind(), DirectoryKind::Postgres);
        assert_eq!(pg.directory_database_url(), Some("postgres://x@h/db"));
    }

    #[test]
    fn contradictory_flags_are_refused_naming_both_and_what_is_allowed() {
        let message = refused(&["--membership", "kubernetes", "--seed", SEED]);
        assert!(
            message.contains("--membership kubernetes")
                && message.contains("--seed")
                && message.contains("--membership gossip"),
            "{message}"
        );
        let message = refused(&[
            "--membership",
            "etcd",
            "--etcd-endpoints",
            "http://e:1",
            "--seed",
            SEED,
        ]);
        assert!(
            message.contains("--membership etcd") && message.contains("--seed"),
            "{message}"
        );
        let message = refused(&["--membership", "kubernetes", "--downing", "auto-down"]);
        assert!(
            message.contains("--downing") && message.contains("gossip"),
            "{message}"
        );
        let message = refused(&["--seed", SEED, "--kube-api-url", "http://127.0.0.1:8001"]);
        assert!(
            message.contains("--kube-api-url") && message.contains("--membership kubernetes"),
            "{message}"
        );
        let message = refused(&["--seed", SEED, "--etcd-endpoints", "http://e:2379"]);
        assert!(
            message.contains("--etcd-endpoints") && message.contains("--singleton-lease etcd"),
            "{message}"
        );
    }

    #[test]
    fn a_lease_backend_without_its_endpoint_is_refused() {
        let message = refused(&["--membership", "etcd"]);
        assert!(
            message.contains("--membership etcd") && message.contains("--etcd-endpoints"),
            "{message}"
        );
        let message = refused(&["--seed", SEED, "--singleton-lease", "etcd"]);
        assert!(
            message.contains("--singleton-lease etcd") && message.contains("--etcd-endpoints"),
            "{message}"
        );
        let message = refused(&["--seed", SEED, "--singleton-lease", "postgres"]);
        assert!(
            message.contains("--singleton-lease postgres")
                && message.contains("--singleton-lease-database-url"),
            "{message}"
        );
        let message = refused(&["--seed", SEED, "--singleton-lease", "control-plane"]);
        assert!(
            message.contains("--singleton-lease control-plane")
                && message.contains("--control-plane"),
            "{message}"
        );
        let message = refused(&[
            "--seed",
            SEED,
            "--singleton-lease",
            "control-plane",
            "--control-plane",
            "http://cp:8080",
        ]);
        assert!(message.contains("--coordination-token"), "{message}");
        let message = refused(&["--seed", SEED, "--directory", "postgres"]);
        assert!(message.contains("--directory-database-url"), "{message}");
    }

    #[test]
    fn unknown_values_list_the_allowed_ones() {
        let message = parse(&["--membership", "zookeeper"]).unwrap_err();
        assert!(
            message.contains("zookeeper") && message.contains("gossip, kubernetes, etcd"),
            "{message}"
        );
        let message = parse(&["--singleton-lease", "redis"]).unwrap_err();
        assert!(
            message.contains("none, kubernetes, etcd, postgres, control-plane"),
            "{message}"
        );
        let message = parse(&["--downing", "oldest"]).unwrap_err();
        assert!(message.contains("keep-majority, auto-down"), "{message}");
    }

    #[test]
    fn bad_timings_say_what_is_allowed() {
        let message = refused(&["--membership", "kubernetes", "--membership-ttl-ms", "1500"]);
        assert!(message.contains("whole number of seconds"), "{message}");
        let message = refused(&[
            "--membership",
            "kubernetes",
            "--membership-ttl-ms",
            "9000",
            "--membership-renew-ms",
            "4000",
        ]);
        assert!(
            message.contains("a third") && message.contains("3000"),
            "{message}"
        );
        let message = refused(&[
            "--seed",
            SEED,
            "--singleton-lease",
            "etcd",
            "--etcd-endpoints",
            "http://e:2379",
            "--singleton-lease-retry-ms",
            "0",
        ]);
        assert!(message.contains("--singleton-lease-retry-ms"), "{message}");
        let message = refused(&["--membership", "etcd", "--etcd-endpoints", "e:2379"]);
        assert!(message.contains("not a URL"), "{message}");
        let message = refused(&[
            "--membership",
            "etcd",
            "--etcd-endpoints",
            "http://e:2379",
            "--etcd-prefix",
            "/x",
        ]);
        assert!(message.contains("end with '/'"), "{message}");
    }

    #[test]
    fn kubernetes_names_default_from_the_system_and_labels_are_checked() {
        let config = parse(&["--system", "shop", "--membership", "kubernetes"]).unwrap();
        assert_eq!(config.kube_lease_prefix(), "shop");
        assert_eq!(
            config.kube_lease_label(),
            ("troupe.dev/cluster".to_owned(), "shop".to_owned())
        );
        let custom = parse(&[
            "--membership",
            "kubernetes",
            "--kube-lease-label",
            "app.kubernetes.io/instance=shop-prod",
        ])
        .unwrap();
        custom.validate().unwrap();
        assert_eq!(custom.kube_lease_label().1, "shop-prod");
        for bad in ["no-equals", "=v", "k=-v", "a/b/c=v", "k=v v"] {
            let message = refused(&["--membership", "kubernetes", "--kube-lease-label", bad]);
            assert!(message.contains("--kube-lease-label"), "{bad}: {message}");
        }
    }
}
