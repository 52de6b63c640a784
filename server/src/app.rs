//! The server as a value, and its composition root: build it from a [`Config`] (store,
//! export, coordination backends, shared state, routes), then run it until SIGTERM or Ctrl-C.
//!
//! # Shutdown
//! On SIGTERM or SIGINT (or [`ShutdownTrigger::shutdown`]) the server stops accepting
//! connections, ends the live event streams, lets in-flight requests finish (up to
//! `--shutdown-timeout-secs`), stops retention and closes the database pool. An ingest request
//! that got its answer is committed; one cut off is not acknowledged and the agent retries it.

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::Duration;

use actix_web::dev::Server;
use actix_web::http::header;
use actix_web::{HttpServer, middleware, web};
use tokio::sync::watch;

use troupe_coordination::etcd::{EtcdDirectory, EtcdLeases};
use troupe_coordination::postgres::PgCoordination;
use troupe_lease::directory::InMemoryDirectory;
use troupe_lease::lease::{InMemoryLeaseArbiter, LeaseSettings};

use crate::config::Config;
use crate::coordination::Coordination;
use crate::otel::{Endpoint, EventExport, ExportError, Signal};
use crate::state::{AppState, ShutdownTrigger};
use crate::store::{Store, StoreError};
use crate::time::now_ms;
use crate::viewer::{self, ViewerAccess};
use crate::{api, observe, ui};

/// Rows retention deletes per table and statement; small enough that ingest never waits long.
const RETENTION_CHUNK: i64 = 5_000;

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// A setting is unusable (the message names it).
    #[error("{0}")]
    Config(String),
    /// The store could not be opened or migrated.
    #[error("opening the store failed: {0}")]
    Store(#[from] StoreError),
    /// OpenTelemetry export could not be set up.
    #[error("OpenTelemetry export: {0}")]
    Export(#[from] ExportError),
    /// The coordination backend could not be set up.
    #[error("coordination backend: {0}")]
    Coordination(String),
    /// The TLS certificate or key could not be used.
    #[error("tls: {0}")]
    Tls(#[from] crate::tls::TlsError),
    /// Read access is misconfigured, or missing on a non-loopback listener.
    #[error("{0}")]
    Viewer(#[from] crate::viewer::ViewerConfigError),
    /// The listen address could not be bound, or the server failed.
    #[error("http server: {0}")]
    Io(#[from] std::io::Error),
}

/// The coordination API's backends as configured: etcd when `--etcd-endpoints` is set, else
/// the PostgreSQL store, else the SQLite store (grants durable in its file, the directory in
/// memory: a single replica).
pub async fn coordination_backend(
    config: &Config,
    store: &Store,
) -> Result<Coordination, AppError> {
    if !config.etcd_endpoints.is_empty() {
        let client = troupe_coordination::etcd::connect(&config.etcd_endpoints)
            .await
            .map_err(|e| {
                AppError::Coordination(format!(
                    "cannot connect to etcd at {:?} (--etcd-endpoints): {e}",
                    config.etcd_endpoints
                ))
            })?;
        let prefix = &config.coordination_prefix;
        let invalid = |e: troupe_coordination::etcd::InvalidPrefix| {
            AppError::Coordination(format!("--coordination-prefix: {e}"))
        };
        let leases = EtcdLeases::new(client.clone(), prefix).map_err(invalid)?;
        let directory = EtcdDirectory::new(client, prefix).map_err(invalid)?;
        return Ok(Coordination::new(
            Arc::new(leases),
            Arc::new(directory),
            "etcd",
        ));
    }
    if let Some(pool) = store.postgres_pool() {
        let pg = PgCoordination::new(pool.clone(), &config.coordination_schema)
            .await
            .map_err(|e| {
                AppError::Coordination(format!(
                    "setting up schema {:?} (--coordination-schema): {e}",
                    config.coordination_schema
                ))
            })?;
        return Ok(Coordination::new(
            Arc::new(pg.leases()),
            Arc::new(pg.directory()),
            "postgres",
        ));
    }
    if let Some(grants) = store.sqlite_grants() {
        tracing::warn!(
            "coordination grants kept in the SQLite file (they survive a restart), the actor directory in memory (lost on restart); single replica only"
        );
        return Ok(Coordination::new(
            Arc::new(grants),
            Arc::new(InMemoryDirectory::new()),
            "sqlite",
        ));
    }
    tracing::warn!("coordination API kept in memory: single replica only, grants lost on restart");
    Ok(Coordination::new(
        Arc::new(InMemoryLeaseArbiter::new(LeaseSettings::default())),
        Arc::new(InMemoryDirectory::new()),
        "in-memory",
    ))
}

/// The server, bound and ready to run.
pub struct App {
    server: Server,
    scheme: &'static str,
    local_addr: SocketAddr,
    state: AppState,
    trigger: ShutdownTrigger,
}

impl std::fmt::Debug for App {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("App")
            .field("local_addr", &self.local_addr)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl App {
    /// Opens the store (applying migrations), binds the listen address and prepares the server.
    pub async fn build(mut config: Config) -> Result<Self, AppError> {
        config
            .load_cluster_tokens_file()
            .map_err(AppError::Config)?;
        let viewer = Arc::new(ViewerAccess::from_config(&config)?);
        let store = match &config.database_url {
            Some(url) => {
                Store::connect_postgres_with(
                    url,
                    config.db_max_connections,
                    Duration::from_millis(config.db_acquire_timeout_ms.max(1)),
                )
                .await?
            }
            None => {
                Store::open_sqlite(&config.sqlite_path, config.db_max_connections.min(4)).await?
            }
        };
        tracing::info!(backend = ?store.backend(), "store ready, migrations applied");
        let tls = match (&config.tls_cert, &config.tls_key) {
            (Some(cert), Some(key)) => Some(crate::tls::server_config(cert, key)?),
            _ => None,
        };
        let listener = TcpListener::bind(config.listen)?;
        let local_addr = listener.local_addr()?;
        let workers = config.workers;
        let shutdown_timeout = config.shutdown_timeout_secs;
        let export = match Endpoint::for_signal(&config.otlp, Signal::Logs)? {
            Some(endpoint) => {
                // The exporter's blocking HTTP client must be made off the runtime.
                let export = tokio::task::spawn_blocking(move || EventExport::new(&endpoint))
                    .await
                    .map_err(std::io::Error::other)??;
                tracing::info!(
                    url = export.url(),
                    "exporting stored events as OTLP log records"
                );
                Some(Arc::new(export))
            }
            None => None,
        };
        let coordination = if config.coordination_token.is_some() {
            let coordination = coordination_backend(&config, &store).await?;
            tracing::info!(backend = coordination.backend(), "coordination API enabled");
            Some(Arc::new(coordination))
        } else {
            None
        };
        let (mut state, trigger) = AppState::new(config, store);
        if let Some(coordination) = coordination {
            state = state.with_coordination(coordination);
        }
        if let Some(export) = export {
            state = state.with_export(export);
        }
        let app_state = state.clone();
        let mut server = HttpServer::new(move || {
            actix_web::App::new()
                .app_data(web::Data::new(viewer.clone()))
                // Inside the request span and metrics, so a refused read is observed too.
                .wrap(middleware::from_fn(viewer::gate))
                .wrap(middleware::from_fn(observe::request))
                .wrap(
                    // Ingest and scrapes are counted in /metrics; logging each would drown
                    // the log at production rates.
                    middleware::Logger::new("%a \"%r\" %s %b %Dms")
                        .log_target("troupe_server::http")
                        .exclude("/api/v1/ingest")
                        .exclude("/metrics"),
                )
                // Last, so outermost, so every answer carries it: a 401 of the viewer gate, a 404 of no
                // route, an API error, an event stream (see `crate::json` for the other half).
                .wrap(
                    middleware::DefaultHeaders::new()
                        .add((header::X_CONTENT_TYPE_OPTIONS, "nosniff")),
                )
                .configure(api::configure(app_state.clone()))
                .configure(ui::configure)
        })
        .disable_signals()
        .shutdown_timeout(shutdown_timeout);
        if let Some(workers) = workers {
            server = server.workers(workers.max(1));
        }
        let scheme = if tls.is_some() { "https" } else { "http" };
        let server = match tls {
            Some(tls) => server.listen_rustls_0_23(listener, tls)?,
            None => server.listen(listener)?,
        }
        .run();
        Ok(Self {
            server,
            scheme,
            local_addr,
            state,
            trigger,
        })
    }

    /// The address the server listens on (useful with port 0).
    #[must_use]
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The shared state (store, metrics, live hub).
    #[must_use]
    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// A handle that shuts the server down gracefully.
    #[must_use]
    pub fn shutdown_trigger(&self) -> ShutdownTrigger {
        self.trigger.clone()
    }

    /// Serves until SIGTERM, SIGINT or the trigger, then shuts down gracefully.
    pub async fn run(self) -> Result<(), AppError> {
        let Self {
            server,
            scheme,
            local_addr,
            state,
            trigger,
        } = self;
        tracing::info!(
            api = %format!("{scheme}://{local_addr}/api/v1"),
            docs = %format!("{scheme}://{local_addr}/api/v1/docs"),
            dashboard = %format!("{scheme}://{local_addr}/ui/"),
            metrics = %format!("{scheme}://{local_addr}/metrics"),
            "troupe control plane listening"
        );
        let retention = state.config.retention().map(|keep| {
            tokio::spawn(retention_loop(
                state.store.clone(),
                keep,
                state.shutdown.clone(),
            ))
        });
        // The coming days' partitions, made well before their first row (PostgreSQL only).
        let partitions = (state.store.backend() == crate::store::BackendKind::Postgres)
            .then(|| tokio::spawn(partition_loop(state.store.clone(), state.shutdown.clone())));
        // Streams here see what other replicas store as soon as it commits.
        let listener = state.store.postgres_pool().map(|pool| {
            tokio::spawn(crate::live::listen(
                pool.clone(),
                state.live.clone(),
                state.shutdown.clone(),
            ))
        });
        let member_sweep = tokio::spawn(crate::member_health::sweep_loop(
            state.store.clone(),
            Arc::clone(&state.metrics),
            Arc::clone(&state.member_gauge),
            state.config.agent_silence_ms,
            state.shutdown.clone(),
        ));
        let handle = server.handle();
        let server_task = tokio::spawn(server);
        let reason = tokio::select! {
            reason = signal() => reason,
            () = trigger.requested() => "shutdown requested",
        };
        tracing::info!(reason, "shutting down: ending streams, finishing requests");
        trigger.shutdown();
        handle.stop(true).await;
        let served = server_task.await.map_err(std::io::Error::other)?;
        if let Some(retention) = retention {
            retention.abort();
        }
        if let Some(partitions) = partitions {
            partitions.abort();
        }
        if let Some(listener) = listener {
            listener.abort();
        }
        member_sweep.abort();
        if let Some(export) = state.export.clone() {
            let _ = tokio::task::spawn_blocking(move || export.shutdown()).await;
        }
        state.store.close().await;
        tracing::info!("stopped");
        served.map_err(AppError::from)
    }
}

#[cfg(unix)]
async fn signal() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = tokio::signal::ctrl_c() => "SIGINT",
        },
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            "SIGINT"
        }
    }
}

#[cfg(not(unix))]
async fn signal() -> &'static str {
    let _ = tokio::signal::ctrl_c().await;
    "Ctrl-C"
}

/// Makes the coming days' history partitions every hour (the store made them at connect
/// too), so a server running for weeks never meets a day without one.
async fn partition_loop(store: Store, mut shutdown: watch::Receiver<bool>) {
    let mut every = tokio::time::interval(Duration::from_secs(3600));
    loop {
        tokio::select! {
            _ = every.tick() => {}
            _ = shutdown.changed() => return,
        }
        match store.make_partitions(now_ms()).await {
            Ok(made) if !made.is_empty() => {
                tracing::info!(?made, "made history partitions ahead of time");
            }
            Ok(_) => {}
            Err(error) => {
                tracing::warn!(%error, "making history partitions failed; retrying in an hour");
            }
        }
    }
}

/// Ages history out every minute: whole expired day partitions are dropped (PostgreSQL),
/// then the remaining expired rows are deleted a chunk at a time (everything on SQLite; the
/// default partitions, rollups and batch markers on PostgreSQL).
async fn retention_loop(store: Store, keep: Duration, mut shutdown: watch::Receiver<bool>) {
    let mut every = tokio::time::interval(Duration::from_secs(60));
    loop {
        tokio::select! {
            _ = every.tick() => {}
            _ = shutdown.changed() => return,
        }
        let cutoff = now_ms() - keep.as_millis() as i64;
        match store.drop_expired_partitions(cutoff).await {
            Ok(dropped) if !dropped.is_empty() => {
                tracing::info!(?dropped, "retention dropped expired history partitions");
            }
            Ok(_) => {}
            Err(error) => {
                tracing::warn!(%error, "dropping expired partitions failed; retrying in a minute");
            }
        }
        loop {
            match store.delete_older_than(cutoff, RETENTION_CHUNK).await {
                Ok(deleted) if deleted > 0 => {
                    tracing::debug!(deleted, "retention deleted expired history");
                    if *shutdown.borrow() {
                        return;
                    }
                    // Let ingest have the database between chunks.
                    tokio::task::yield_now().await;
                }
                Ok(_) => break,
                Err(error) => {
                    tracing::warn!(%error, "retention failed; retrying in a minute");
                    break;
                }
            }
        }
    }
}
