//! The server's Prometheus metrics (`/metrics`, OpenMetrics text).
//!
//! Every name starts with `troupe_`; labels are bounded: outcome and item kind are closed
//! sets, and the per-agent lag is labelled by cluster and node address only (one series per
//! agent, not per incarnation or batch).

use std::fmt::Write as _;
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

/// What became of an ingest request.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum Outcome {
    /// Stored.
    Stored,
    /// A retry of a stored batch; nothing written.
    Duplicate,
    /// Refused (auth, size, malformed).
    Rejected,
    /// The store failed.
    Failed,
}

/// A kind of ingested item.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum Item {
    /// Membership, singleton, router and health events.
    Event,
    /// Dead letters.
    DeadLetter,
    /// Mailbox-depth samples.
    DepthSample,
}

impl EncodeLabelValue for Outcome {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> std::fmt::Result {
        encoder.write_str(match self {
            Self::Stored => "stored",
            Self::Duplicate => "duplicate",
            Self::Rejected => "rejected",
            Self::Failed => "failed",
        })
    }
}

impl EncodeLabelValue for Item {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> std::fmt::Result {
        encoder.write_str(match self {
            Self::Event => "event",
            Self::DeadLetter => "dead_letter",
            Self::DepthSample => "depth_sample",
        })
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: Outcome,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ItemLabels {
    kind: Item,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AgentLabels {
    cluster: String,
    node: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: String,
}

/// The registry and every metric the server updates.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    batches: Family<OutcomeLabels, Counter>,
    items: Family<ItemLabels, Counter>,
    batch_duration: Histogram,
    store_duration: Histogram,
    duplicates: Counter,
    agent_lag: Family<AgentLabels, Gauge<f64, AtomicU64>>,
    stream_clients: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers every metric.
    #[must_use]
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let batches = Family::<OutcomeLabels, Counter>::default();
        registry.register(
            "troupe_ingest_batches",
            "Ingest requests by outcome",
            batches.clone(),
        );
        let items = Family::<ItemLabels, Counter>::default();
        registry.register(
            "troupe_ingest_items",
            "Items stored by ingest, by kind (the ingest rate)",
            items.clone(),
        );
        let batch_duration = Histogram::new(exponential_buckets(0.000_5, 2.0, 16));
        registry.register_with_unit(
            "troupe_ingest_batch_duration",
            "Ingest request latency, from the first body byte to the answer",
            Unit::Seconds,
            batch_duration.clone(),
        );
        let store_duration = Histogram::new(exponential_buckets(0.000_25, 2.0, 16));
        registry.register_with_unit(
            "troupe_store_write_duration",
            "Time to write one batch to the store (one transaction)",
            Unit::Seconds,
            store_duration.clone(),
        );
        let duplicates = Counter::default();
        registry.register(
            "troupe_ingest_duplicates_dropped",
            "Retried batches recognised as stored before and not written again",
            duplicates.clone(),
        );
        let agent_lag = Family::<AgentLabels, Gauge<f64, AtomicU64>>::default();
        registry.register_with_unit(
            "troupe_agent_lag",
            "Receive time minus send time of each agent's latest batch",
            Unit::Seconds,
            agent_lag.clone(),
        );
        let stream_clients = Gauge::default();
        registry.register(
            "troupe_event_stream_clients",
            "Open live event streams (server-sent events)",
            stream_clients.clone(),
        );
        let build_info = Family::<BuildLabels, Gauge>::default();
        build_info
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION").to_owned(),
            })
            .set(1);
        registry.register("troupe_build_info", "The server's version", build_info);
        Self {
            registry,
            batches,
            items,
            batch_duration,
            store_duration,
            duplicates,
            agent_lag,
            stream_clients,
        }
    }

    /// Counts one ingest request.
    pub fn batch(&self, outcome: Outcome, seconds: f64) {
        self.batches.get_or_create(&OutcomeLabels { outcome }).inc();
        if outcome == Outcome::Duplicate {
            self.duplicates.inc();
        }
        if matches!(outcome, Outcome::Stored | Outcome::Duplicate) {
            self.batch_duration.observe(seconds);
        }
    }

    /// Counts stored items.
    pub fn items(&self, kind: Item, count: u64) {
        if count > 0 {
            self.items.get_or_create(&ItemLabels { kind }).inc_by(count);
        }
    }

    /// Records one store write.
    pub fn store_write(&self, seconds: f64) {
        self.store_duration.observe(seconds);
    }

    /// Records an agent's lag.
    pub fn agent_lag(&self, cluster: &str, node: &str, seconds: f64) {
        self.agent_lag
            .get_or_create(&AgentLabels {
                cluster: cluster.to_owned(),
                node: node.to_owned(),
            })
            .set(seconds);
    }

    /// A live stream opened (`+1`) or closed (`-1`).
    pub fn stream_clients(&self, delta: i64) {
        self.stream_clients.inc_by(delta);
    }

    /// The OpenMetrics text exposition.
    #[must_use]
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}
