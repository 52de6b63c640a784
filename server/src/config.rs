//! The server's configuration: command-line flags, each with an environment variable.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

/// Default of `--agent-silence-ms`: 15 s, several missed 2 s heartbeats.
pub const DEFAULT_AGENT_SILENCE_MS: u64 = 15_000;

/// The range `--agent-silence-ms` accepts: above the agents' 2 s heartbeat (with room for a
/// slow request), at most one day.
pub const AGENT_SILENCE_MS_RANGE: std::ops::RangeInclusive<u64> = 3_000..=86_400_000;

/// Parses `--agent-silence-ms`, saying what is allowed when the value is not.
fn parse_agent_silence_ms(text: &str) -> Result<u64, String> {
    let allowed = format!(
        "a whole number of milliseconds from {} (above the agents' 2 s heartbeat) to {} (one day)",
        AGENT_SILENCE_MS_RANGE.start(),
        AGENT_SILENCE_MS_RANGE.end()
    );
    match text.trim().parse::<u64>() {
        Ok(ms) if AGENT_SILENCE_MS_RANGE.contains(&ms) => Ok(ms),
        Ok(ms) => Err(format!("{ms} is out of range: give {allowed}")),
        Err(_) => Err(format!("`{text}` is not a number: give {allowed}")),
    }
}

/// `troupe-server`: the Troupe control plane.
///
/// Every option can also be set through the environment variable shown beside it; a flag wins
/// over the variable.
#[derive(Debug, Clone, Parser)]
#[command(name = "troupe-server", version, about, long_about = None)]
pub struct Config {
    /// Address the HTTP server listens on (API, ingest, live stream, metrics).
    #[arg(long, env = "TROUPE_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,

    /// PEM certificate chain for HTTPS on --listen (with --tls-key): every route is then
    /// served over TLS only. Unset: plain HTTP.
    #[arg(long, env = "TROUPE_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,

    /// PEM private key of --tls-cert (PKCS#8, PKCS#1 or SEC1).
    #[arg(long, env = "TROUPE_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,

    /// PostgreSQL URL (`postgres://user:pass@host/db`), the production store. Without it the
    /// server keeps its history in an embedded SQLite file (see --sqlite-path).
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,

    /// SQLite file used when no DATABASE_URL is set; created if missing.
    #[arg(
        long,
        env = "TROUPE_SQLITE_PATH",
        default_value = "troupe-control-plane.sqlite"
    )]
    pub sqlite_path: PathBuf,

    /// Largest number of database connections the server opens.
    #[arg(long, env = "TROUPE_DB_MAX_CONNECTIONS", default_value_t = 8)]
    pub db_max_connections: u32,

    /// Milliseconds a request waits for a database connection (while the database is away,
    /// connecting is retried that long) before it is answered 503 "store unavailable". Keep
    /// it below the agents' 10 s request timeout so they hear the 503 and retry.
    #[arg(long, env = "TROUPE_DB_ACQUIRE_TIMEOUT_MS", default_value_t = 5_000)]
    pub db_acquire_timeout_ms: u64,

    /// Bearer token agents must send to the ingest endpoint; it admits batches of every
    /// cluster. When unset and no --cluster-ingest-token is given, the server makes up a random
    /// one at start and logs it (fine for a laptop, not for production).
    #[arg(long, env = "TROUPE_INGEST_TOKEN", hide_env_values = true)]
    pub ingest_token: Option<String>,

    /// Ingest token scoped to one cluster, `NAME=TOKEN` (repeatable; the variable takes a
    /// comma-separated list): a batch sent with it is stored only when it reports cluster
    /// NAME, any other is refused with 403. The global --ingest-token, when set, still admits
    /// every cluster.
    #[arg(
        long = "cluster-ingest-token",
        env = "TROUPE_CLUSTER_INGEST_TOKENS",
        value_name = "NAME=TOKEN",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub cluster_ingest_tokens: Vec<ClusterToken>,

    /// File of cluster-scoped ingest tokens, one `NAME=TOKEN` per line (blank lines and lines
    /// starting with `#` ignored), as --cluster-ingest-token; read once at start.
    #[arg(long, env = "TROUPE_CLUSTER_INGEST_TOKENS_FILE", value_name = "PATH")]
    pub cluster_ingest_tokens_file: Option<PathBuf>,

    /// Bearer token for member operations (leave, down). Without it they are refused.
    #[arg(long, env = "TROUPE_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,

    /// Read credential for the API, the live stream and the dashboard: clients send it as
    /// `Authorization: Bearer <token>`, browsers as the HTTP Basic password (any user name).
    /// The admin token also grants reading. Unset (and no --trusted-proxy-header): reads are
    /// open, which is allowed only when --listen is a loopback address (see
    /// --allow-anonymous-read). Probes, /metrics and the OpenAPI document stay open.
    #[arg(long, env = "TROUPE_VIEWER_TOKEN", hide_env_values = true)]
    pub viewer_token: Option<String>,

    /// Header in which an authenticating proxy in front of the server names the signed-in
    /// user (oauth2-proxy: `X-Forwarded-User`); a request carrying it is let in to read, but
    /// only from a source address in --trusted-proxy-cidrs (from anywhere else it is ignored).
    #[arg(
        long,
        env = "TROUPE_TRUSTED_PROXY_HEADER",
        requires = "trusted_proxy_cidrs"
    )]
    pub trusted_proxy_header: Option<String>,

    /// Source address ranges (comma-separated CIDRs, `10.0.0.0/8,fd00::/8`; a bare address is
    /// one host) of the proxy whose --trusted-proxy-header is believed.
    #[arg(long, env = "TROUPE_TRUSTED_PROXY_CIDRS", value_delimiter = ',')]
    pub trusted_proxy_cidrs: Vec<crate::cidr::Cidr>,

    /// Serve the API, live stream and dashboard without a read credential on a non-loopback
    /// --listen address (without this the server refuses to start there). Logged at WARN on
    /// every start: use it only where the network itself is the access control.
    #[arg(long, env = "TROUPE_ALLOW_ANONYMOUS_READ", default_value_t = false)]
    pub allow_anonymous_read: bool,

    /// Bearer token agents send to the coordination API (`/api/v1/coordination/…`: leases and
    /// the actor directory). Unset: the coordination API answers 403.
    #[arg(long, env = "TROUPE_COORDINATION_TOKEN", hide_env_values = true)]
    pub coordination_token: Option<String>,

    /// etcd endpoints (comma-separated) backing the coordination API. Unset: it is backed by
    /// the server's PostgreSQL database (--database-url), or, on SQLite, lease grants are kept
    /// in the SQLite file (they survive a restart) and directory claims in memory (lost on
    /// restart); a single replica.
    #[arg(long, env = "TROUPE_ETCD_ENDPOINTS", value_delimiter = ',')]
    pub etcd_endpoints: Vec<String>,

    /// etcd key prefix of the coordination API's leases and directory.
    #[arg(
        long,
        env = "TROUPE_COORDINATION_PREFIX",
        default_value = "/troupe/coordination/"
    )]
    pub coordination_prefix: String,

    /// PostgreSQL schema of the coordination API's leases and directory (created if missing).
    #[arg(
        long,
        env = "TROUPE_COORDINATION_SCHEMA",
        default_value = "troupe_coordination"
    )]
    pub coordination_schema: String,

    /// Allow member operations (leave, down) through the API; off by default, and even then
    /// they need the admin token.
    #[arg(long, env = "TROUPE_ENABLE_MEMBER_OPERATIONS", default_value_t = false)]
    pub enable_member_operations: bool,

    /// Days of history kept; older events, dead letters and depth samples are deleted in the
    /// background. 0 keeps everything.
    #[arg(long, env = "TROUPE_RETENTION_DAYS", default_value_t = 7)]
    pub retention_days: u32,

    /// Seconds an agent's per-agent metric series (`troupe_agent_lag_seconds`,
    /// `troupe_agent_last_report_timestamp_seconds`) outlive its last report before they are
    /// removed from `/metrics`. At least 1.
    #[arg(long, env = "TROUPE_AGENT_SERIES_TTL_SECS", default_value_t = 300,
        value_parser = clap::value_parser!(u64).range(1..))]
    pub agent_series_ttl_secs: u64,

    /// Milliseconds an event time may be ahead of the server's receive time (a reporter's
    /// clock running ahead) before it is stored as the receive time instead. Each agent's
    /// measured skew is in the API (`clock_skew_ms` of its node) and on `/metrics`
    /// (`troupe_agent_clock_skew_seconds`).
    #[arg(long, env = "TROUPE_MAX_CLOCK_SKEW_MS", default_value_t = crate::store::DEFAULT_MAX_CLOCK_SKEW_MS)]
    pub max_clock_skew_ms: u64,

    /// Milliseconds without any report from a member's agent (agents send a heartbeat batch
    /// at least every 2 s) after which the API, the live stream's opening state and the
    /// dashboard show its health as `unknown` instead of what it last reported (`ready`, …).
    /// Decided when read, from the agent's last report time: nothing stored changes, and the
    /// agent's next report shows its real health again. From 3000 to 86400000 (one day).
    #[arg(long, env = "TROUPE_AGENT_SILENCE_MS",
        default_value_t = DEFAULT_AGENT_SILENCE_MS, value_parser = parse_agent_silence_ms)]
    pub agent_silence_ms: u64,

    /// Largest ingest request body accepted, in bytes; larger ones get 413.
    #[arg(long, env = "TROUPE_MAX_BODY_BYTES", default_value_t = 8 * 1024 * 1024)]
    pub max_body_bytes: usize,

    /// HTTP worker threads (default: one per core).
    #[arg(long, env = "TROUPE_WORKERS")]
    pub workers: Option<usize>,

    /// Seconds in-flight requests get to finish on SIGTERM before the server stops anyway.
    #[arg(long, env = "TROUPE_SHUTDOWN_TIMEOUT_SECS", default_value_t = 30)]
    pub shutdown_timeout_secs: u64,

    /// The standard `OTEL_*` export settings, as the agents read them too: stored events leave
    /// as log records, request spans as traces (see `troupe_telemetry::otlp`).
    #[command(flatten)]
    pub otlp: troupe_telemetry::otlp::OtlpArgs,

    /// Write logs as JSON lines (one object per line) instead of text.
    #[arg(long, env = "TROUPE_LOG_JSON", default_value_t = false)]
    pub log_json: bool,

    /// Log filter in `tracing` syntax (`info`, `troupe_server=debug,sqlx=warn`).
    #[arg(long, env = "RUST_LOG", default_value = "info")]
    pub log_filter: String,
}

/// An ingest token that admits one cluster's batches only (`NAME=TOKEN`).
#[derive(Clone, PartialEq, Eq)]
pub struct ClusterToken {
    /// The cluster (actor system) name it admits.
    pub cluster: String,
    /// The bearer token.
    pub token: String,
}

impl std::fmt::Debug for ClusterToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token itself.
        write!(f, "ClusterToken({}=…)", self.cluster)
    }
}

impl std::str::FromStr for ClusterToken {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let Some((cluster, token)) = text.split_once('=') else {
            return Err(
                "expected NAME=TOKEN (a cluster name, `=`, its ingest token); found no `=`"
                    .to_owned(),
            );
        };
        let (cluster, token) = (cluster.trim(), token.trim());
        if cluster.is_empty() || token.is_empty() {
            return Err(format!(
                "expected NAME=TOKEN with neither part empty; got a {} cluster name and a {} token",
                if cluster.is_empty() {
                    "empty"
                } else {
                    "non-empty"
                },
                if token.is_empty() {
                    "empty"
                } else {
                    "non-empty"
                },
            ));
        }
        if cluster.len() > troupe_protocol::limits::CLUSTER_NAME_MAX
            || cluster.contains(troupe_protocol::CLUSTER_KEY_SEPARATOR)
        {
            return Err(format!(
                "cluster name `{cluster}` cannot report: at most {} bytes, no `{}`",
                troupe_protocol::limits::CLUSTER_NAME_MAX,
                troupe_protocol::CLUSTER_KEY_SEPARATOR
            ));
        }
        Ok(Self {
            cluster: cluster.to_owned(),
            token: token.to_owned(),
        })
    }
}

/// Parses the lines of a cluster-token file (see `--cluster-ingest-tokens-file`); errors name
/// the line.
pub fn parse_cluster_tokens(text: &str) -> Result<Vec<ClusterToken>, String> {
    text.lines()
        .enumerate()
        .map(|(i, line)| (i + 1, line.trim()))
        .filter(|(_, line)| !line.is_empty() && !line.starts_with('#'))
        .map(|(number, line)| line.parse().map_err(|e| format!("line {number}: {e}")))
        .collect()
}

impl Config {
    /// Adds the tokens of `--cluster-ingest-tokens-file`, when given, to
    /// `cluster_ingest_tokens`.
    ///
    /// # Errors
    /// The file cannot be read or a line is not `NAME=TOKEN` (the message names the file and
    /// the line).
    pub fn load_cluster_tokens_file(&mut self) -> Result<(), String> {
        let Some(path) = &self.cluster_ingest_tokens_file else {
            return Ok(());
        };
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("--cluster-ingest-tokens-file {}: {e}", path.display()))?;
        let tokens = parse_cluster_tokens(&text)
            .map_err(|e| format!("--cluster-ingest-tokens-file {}: {e}", path.display()))?;
        self.cluster_ingest_tokens.extend(tokens);
        Ok(())
    }

    /// The defaults, ignoring the command line and the environment: for tests and embedding.
    #[must_use]
    pub fn defaults() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            tls_cert: None,
            tls_key: None,
            database_url: None,
            sqlite_path: PathBuf::from("troupe-control-plane.sqlite"),
            db_max_connections: 8,
            db_acquire_timeout_ms: 5_000,
            ingest_token: None,
            cluster_ingest_tokens: Vec::new(),
            cluster_ingest_tokens_file: None,
            admin_token: None,
            viewer_token: None,
            trusted_proxy_header: None,
            trusted_proxy_cidrs: Vec::new(),
            allow_anonymous_read: false,
            enable_member_operations: false,
            coordination_token: None,
            etcd_endpoints: Vec::new(),
            coordination_prefix: "/troupe/coordination/".to_owned(),
            coordination_schema: "troupe_coordination".to_owned(),
            retention_days: 7,
            agent_series_ttl_secs: 300,
            max_body_bytes: 8 * 1024 * 1024,
            max_clock_skew_ms: crate::store::DEFAULT_MAX_CLOCK_SKEW_MS,
            agent_silence_ms: DEFAULT_AGENT_SILENCE_MS,
            workers: None,
            shutdown_timeout_secs: 30,
            otlp: troupe_telemetry::otlp::OtlpArgs::default(),
            log_json: false,
            log_filter: "info".to_owned(),
        }
    }

    /// How long a silent agent's metric series are kept.
    #[must_use]
    pub fn agent_series_ttl(&self) -> Duration {
        Duration::from_secs(self.agent_series_ttl_secs.max(1))
    }

    /// `--agent-silence-ms` as the signed milliseconds stored times are compared in.
    #[must_use]
    pub fn agent_silence_limit_ms(&self) -> i64 {
        i64::try_from(self.agent_silence_ms).unwrap_or(i64::MAX)
    }

    /// How long history is kept, if it expires.
    #[must_use]
    pub fn retention(&self) -> Option<Duration> {
        (self.retention_days > 0)
            .then(|| Duration::from_secs(u64::from(self.retention_days) * 86_400))
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::{Config, DEFAULT_AGENT_SILENCE_MS, parse_cluster_tokens};

    fn parse(args: &[&str]) -> Result<Config, clap::Error> {
        Config::try_parse_from(std::iter::once("troupe-server").chain(args.iter().copied()))
    }

    #[test]
    fn agent_silence_defaults_to_fifteen_seconds_and_takes_the_range_ends() {
        assert_eq!(
            parse(&[]).unwrap().agent_silence_ms,
            DEFAULT_AGENT_SILENCE_MS
        );
        assert_eq!(
            parse(&["--agent-silence-ms", "3000"])
                .unwrap()
                .agent_silence_ms,
            3_000
        );
        assert_eq!(
            parse(&["--agent-silence-ms", "86400000"])
                .unwrap()
                .agent_silence_ms,
            86_400_000
        );
    }

    #[test]
    fn a_bad_agent_silence_is_refused_saying_what_is_allowed() {
        for bad in ["0", "2999", "86400001", "-5", "15s", ""] {
            let flag = format!("--agent-silence-ms={bad}");
            let message = parse(&[&flag]).unwrap_err().to_string();
            assert!(
                message.contains("--agent-silence-ms")
                    && message.contains("from 3000")
                    && message.contains("to 86400000"),
                "{bad:?}: {message}"
            );
        }
    }

    #[test]
    fn cluster_tokens_come_from_repeated_flags_a_comma_separated_variable_and_a_file() {
        let config = parse(&[
            "--cluster-ingest-token",
            "shop=t1",
            "--cluster-ingest-token=billing=t=2",
        ])
        .unwrap();
        let pairs: Vec<(&str, &str)> = config
            .cluster_ingest_tokens
            .iter()
            .map(|t| (t.cluster.as_str(), t.token.as_str()))
            .collect();
        assert_eq!(pairs, [("shop", "t1"), ("billing", "t=2")]);
        let from_file = parse_cluster_tokens("# tokens\n\nshop = t1\n  billing=t2  \n").unwrap();
        assert_eq!(from_file.len(), 2);
        assert_eq!(
            (from_file[1].cluster.as_str(), from_file[1].token.as_str()),
            ("billing", "t2")
        );
        assert!(
            !format!("{from_file:?}").contains("t1"),
            "Debug hides tokens"
        );
    }

    #[test]
    fn a_bad_cluster_token_is_refused_saying_what_was_wrong() {
        for (bad, needle) in [
            ("shop", "found no `=`"),
            ("=token", "empty cluster name"),
            ("shop=", "empty token"),
            ("shop~abc=token", "no `~`"),
        ] {
            let message = parse(&["--cluster-ingest-token", bad])
                .unwrap_err()
                .to_string();
            assert!(message.contains(needle), "{bad:?}: {message}");
        }
        let message = parse_cluster_tokens("shop=a\nbilling\n").unwrap_err();
        assert!(message.starts_with("line 2:"), "{message}");
    }
}
