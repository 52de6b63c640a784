//! What every request handler shares: the store, the configuration, tokens, metrics, the live
//! hub, the export and the coordination service; and the trigger that shuts the server down.

use std::sync::Arc;

use actix_web::HttpRequest;
use tokio::sync::watch;

use crate::auth::Tokens;
use crate::config::Config;
use crate::coordination::Coordination;
use crate::error::ApiError;
use crate::live::LiveHub;
use crate::member_health::MemberGauge;
use crate::metrics::Metrics;
use crate::otel::EventExport;
use crate::store::Store;

/// What every request handler shares.
#[derive(Debug, Clone)]
pub struct AppState {
    /// The history store.
    pub store: Store,
    /// The configuration.
    pub config: Arc<Config>,
    /// Accepted tokens.
    pub tokens: Tokens,
    /// Prometheus metrics.
    pub metrics: Arc<Metrics>,
    /// The clusters `troupe_members` must recount (ingest marks, the sweep recounts).
    pub member_gauge: Arc<MemberGauge>,
    /// Live event fan-out.
    pub live: LiveHub,
    /// Becomes `true` when the server shuts down.
    pub shutdown: watch::Receiver<bool>,
    /// OpenTelemetry export of stored events, when configured.
    pub export: Option<Arc<EventExport>>,
    /// The coordination API's backends, when set up.
    pub coordination: Option<Arc<Coordination>>,
}

impl AppState {
    /// State over `store`; the returned trigger ends live streams.
    #[must_use]
    pub fn new(config: Config, store: Store) -> (Self, ShutdownTrigger) {
        // A random global token only when no token at all is configured.
        let ingest_token = config
            .ingest_token
            .clone()
            .or_else(|| config.cluster_ingest_tokens.is_empty().then(random_token));
        let (sender, receiver) = watch::channel(false);
        let state = Self {
            store: store.with_max_clock_skew_ms(config.max_clock_skew_ms),
            tokens: Tokens::for_ingest(
                ingest_token,
                config.cluster_ingest_tokens.clone(),
                config.admin_token.clone(),
            )
            .with_coordination(config.coordination_token.clone()),
            metrics: Arc::new(Metrics::new(config.agent_series_ttl())),
            member_gauge: Arc::new(MemberGauge::default()),
            config: Arc::new(config),
            live: LiveHub::default(),
            shutdown: receiver,
            export: None,
            coordination: None,
        };
        (state, ShutdownTrigger(Arc::new(sender)))
    }

    /// Exports every stored event through `export` as well.
    #[must_use]
    pub fn with_export(mut self, export: Arc<EventExport>) -> Self {
        self.export = Some(export);
        self
    }

    /// Serves the coordination API from `coordination`.
    #[must_use]
    pub fn with_coordination(mut self, coordination: Arc<Coordination>) -> Self {
        self.coordination = Some(coordination);
        self
    }

    /// The coordination service for `req`: 401 without the coordination token, 403 when the
    /// coordination API is off.
    pub(crate) fn coordination_for(
        &self,
        req: &HttpRequest,
    ) -> Result<Arc<Coordination>, ApiError> {
        self.tokens.require_coordination(req)?;
        self.coordination.clone().ok_or(ApiError::Forbidden(
            "the coordination API is not set up on this server",
        ))
    }
}

/// Starts a graceful shutdown from code (tests, embedding).
#[derive(Debug, Clone)]
pub struct ShutdownTrigger(Arc<watch::Sender<bool>>);

impl ShutdownTrigger {
    /// Asks the server to shut down.
    pub fn shutdown(&self) {
        self.0.send_replace(true);
    }

    /// Resolves once a shutdown was asked for.
    pub(crate) async fn requested(&self) {
        let mut receiver = self.0.subscribe();
        let _ = receiver.wait_for(|stop| *stop).await;
    }
}

fn random_token() -> String {
    let token = format!("{:032x}", rand::random::<u128>());
    tracing::warn!(
        token = %token,
        "no ingest token configured (TROUPE_INGEST_TOKEN); agents must send this one"
    );
    token
}
