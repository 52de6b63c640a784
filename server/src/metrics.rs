//! The server's Prometheus metrics (`GET /metrics`).
//!
//! Every name starts with `troupe_` (apart from the standard `process_*`); labels are
//! bounded: outcome and item kind are closed sets, HTTP requests are labelled by method (an
//! unknown one is `_OTHER`), route template (never the raw path) and status code, and the
//! per-agent series by cluster and node address only (one series per agent, not per
//! incarnation or batch).
//!
//! # Known label values
//! Every outcome and every item kind is registered at 0 when the server starts, so a rate
//! over `outcome="rejected"` is 0, not empty, until the first refusal.
//!
//! # Per-agent series go stale
//! `troupe_agent_last_report_timestamp_seconds` says when an agent's latest batch arrived, so
//! `time() - troupe_agent_last_report_timestamp_seconds > 60` finds a silent agent.
//! `troupe_agent_lag_seconds` is the receive minus send time of that batch. Both series of an
//! agent are removed once it has not reported for the agent series TTL
//! (`--agent-series-ttl-secs`, default 300 s), checked at each scrape: a dead agent stops being
//! exported instead of showing its last lag forever.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};
use tokio::time::Instant;

use troupe_telemetry::ProcessCollector;
pub use troupe_telemetry::{Exposition, to_text_004};

/// How long an agent's series outlive its last report, unless configured.
pub const DEFAULT_AGENT_SERIES_TTL: Duration = Duration::from_secs(300);

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

impl Outcome {
    const ALL: [Self; 4] = [Self::Stored, Self::Duplicate, Self::Rejected, Self::Failed];
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

impl Item {
    const ALL: [Self; 3] = [Self::Event, Self::DeadLetter, Self::DepthSample];
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
struct MemberLabels {
    cluster: String,
    health: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HttpLabels {
    method: &'static str,
    route: String,
    status: u16,
}

/// The methods HTTP metrics name; any other is `_OTHER` (as OpenTelemetry's conventions say),
/// so a client cannot make up label values.
const KNOWN_METHODS: [&str; 9] = [
    "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "CONNECT",
];

/// A request method as a bounded label value.
#[must_use]
pub fn method_label(method: &str) -> &'static str {
    KNOWN_METHODS
        .iter()
        .find(|m| **m == method)
        .copied()
        .unwrap_or("_OTHER")
}

fn request_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.000_5, 2.0, 16))
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
    agent_last_report: Family<AgentLabels, Gauge<f64, AtomicU64>>,
    agent_clock_skew: Family<AgentLabels, Gauge<f64, AtomicU64>>,
    agent_seen: Mutex<HashMap<AgentLabels, Instant>>,
    agent_series_ttl: Duration,
    stream_clients: Gauge,
    members: Family<MemberLabels, Gauge>,
    http_requests: Family<HttpLabels, Histogram, fn() -> Histogram>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new(DEFAULT_AGENT_SERIES_TTL)
    }
}

impl Metrics {
    /// Registers every metric; an agent's series are removed `agent_series_ttl` after its
    /// last report.
    #[must_use]
    pub fn new(agent_series_ttl: Duration) -> Self {
        let mut registry = Registry::default();
        let batches = Family::<OutcomeLabels, Counter>::default();
        for outcome in Outcome::ALL {
            let _ = batches.get_or_create(&OutcomeLabels { outcome });
        }
        registry.register(
            "troupe_ingest_batches",
            "Ingest requests by outcome",
            batches.clone(),
        );
        let items = Family::<ItemLabels, Counter>::default();
        for kind in Item::ALL {
            let _ = items.get_or_create(&ItemLabels { kind });
        }
        registry.register(
            "troupe_ingest_items",
            "Items stored by ingest, by kind (the ingest rate)",
            items.clone(),
        );
        let batch_duration = Histogram::new(exponential_buckets(0.000_5, 2.0, 16));
        registry.register_with_unit(
            "troupe_ingest_batch_duration",
            "Ingest request latency of stored and duplicate batches, from the first body byte to the answer",
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
            "Receive time minus send time of each agent's latest batch; removed when the agent has been silent for the agent series TTL",
            Unit::Seconds,
            agent_lag.clone(),
        );
        let agent_last_report = Family::<AgentLabels, Gauge<f64, AtomicU64>>::default();
        registry.register(
            "troupe_agent_last_report_timestamp_seconds",
            "When each agent's latest batch arrived (Unix seconds, server clock); removed when the agent has been silent for the agent series TTL",
            agent_last_report.clone(),
        );
        let agent_clock_skew = Family::<AgentLabels, Gauge<f64, AtomicU64>>::default();
        registry.register_with_unit(
            "troupe_agent_clock_skew",
            "Send time (agent clock) minus receive time (server clock) of each agent's latest batch: how far its clock is ahead (negative: behind, or transit); event times more than --max-clock-skew-ms ahead are stored as the receive time; removed when the agent has been silent for the agent series TTL",
            Unit::Seconds,
            agent_clock_skew.clone(),
        );
        let stream_clients = Gauge::default();
        registry.register(
            "troupe_event_stream_clients",
            "Open live event streams (server-sent events)",
            stream_clients.clone(),
        );
        let members = Family::<MemberLabels, Gauge>::default();
        registry.register(
            "troupe_members",
            "Members of each cluster by health (down, unreachable, unknown: agent silent for --agent-silence-ms, leaving, joining, then the agent's starting/ready/draining/fenced, or up when it reported none); removed members are not counted",
            members.clone(),
        );
        let http_requests =
            Family::<HttpLabels, Histogram, fn() -> Histogram>::new_with_constructor(
                request_histogram,
            );
        registry.register_with_unit(
            "troupe_http_server_request_duration",
            "HTTP requests served, by method, route template and status code: duration from the request head to the response head",
            Unit::Seconds,
            http_requests.clone(),
        );
        let build_info = Family::<BuildLabels, Gauge>::default();
        build_info
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION").to_owned(),
            })
            .set(1);
        registry.register("troupe_build_info", "The server's version", build_info);
        registry.register_collector(Box::new(ProcessCollector));
        Self {
            registry,
            batches,
            items,
            batch_duration,
            store_duration,
            duplicates,
            agent_lag,
            agent_last_report,
            agent_clock_skew,
            agent_seen: Mutex::new(HashMap::new()),
            agent_series_ttl,
            stream_clients,
            members,
            http_requests,
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

    /// Records a batch of agent `node` of `cluster`: its lag, its clock skew (send time minus
    /// receive time) and when it arrived (`received_ms`, epoch milliseconds).
    pub fn agent_report(
        &self,
        cluster: &str,
        node: &str,
        lag_seconds: f64,
        skew_seconds: f64,
        received_ms: i64,
    ) {
        let labels = AgentLabels {
            cluster: cluster.to_owned(),
            node: node.to_owned(),
        };
        self.agent_lag.get_or_create(&labels).set(lag_seconds);
        self.agent_clock_skew
            .get_or_create(&labels)
            .set(skew_seconds);
        self.agent_last_report
            .get_or_create(&labels)
            .set(received_ms as f64 / 1000.0);
        self.agent_seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(labels, Instant::now());
    }

    /// Removes the series of agents silent for longer than the TTL at `now`; returns how many.
    pub fn expire_agents(&self, now: Instant) -> usize {
        let mut seen = self.agent_seen.lock().unwrap_or_else(|e| e.into_inner());
        let ttl = self.agent_series_ttl;
        let before = seen.len();
        seen.retain(|labels, last| {
            let keep = now.saturating_duration_since(*last) <= ttl;
            if !keep {
                self.agent_lag.remove(labels);
                self.agent_clock_skew.remove(labels);
                self.agent_last_report.remove(labels);
            }
            keep
        });
        before - seen.len()
    }

    /// Sets `cluster`'s member count of each `(health, count)` (the caller gives every
    /// health of its closed set, 0 included, so each is exported).
    pub fn set_members(
        &self,
        cluster: &str,
        counts: impl IntoIterator<Item = (&'static str, i64)>,
    ) {
        for (health, count) in counts {
            self.members
                .get_or_create(&MemberLabels {
                    cluster: cluster.to_owned(),
                    health,
                })
                .set(count);
        }
    }

    /// Removes `cluster`'s member series of each of `healths`.
    pub fn remove_members(&self, cluster: &str, healths: impl IntoIterator<Item = &'static str>) {
        for health in healths {
            self.members.remove(&MemberLabels {
                cluster: cluster.to_owned(),
                health,
            });
        }
    }

    /// A live stream opened (`+1`) or closed (`-1`).
    pub fn stream_clients(&self, delta: i64) {
        self.stream_clients.inc_by(delta);
    }

    /// Records one served HTTP request: its method (any string; bounded here), its route
    /// template (`/api/v1/clusters/{cluster}`, or `unmatched`), status and duration.
    pub fn http_request(&self, method: &str, route: &str, status: u16, seconds: f64) {
        self.http_requests
            .get_or_create(&HttpLabels {
                method: method_label(method),
                route: route.to_owned(),
                status,
            })
            .observe(seconds);
    }

    /// The exposition in `format`, after expiring silent agents' series.
    #[must_use]
    pub fn render(&self, format: Exposition) -> String {
        self.expire_agents(Instant::now());
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        match format {
            Exposition::OpenMetrics => out,
            Exposition::Text004 => to_text_004(&out),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_silent_agents_series_are_removed_after_the_ttl_and_a_reporting_ones_kept() {
        let metrics = Metrics::new(Duration::from_secs(300));
        metrics.agent_report("app", "a:1", 0.25, 0.0, 1_700_000_000_000);
        metrics.agent_report("app", "b:1", 0.5, 0.0, 1_700_000_000_000);
        tokio::time::advance(Duration::from_secs(200)).await;
        metrics.agent_report("app", "b:1", 0.75, 0.0, 1_700_000_200_000);
        let text = metrics.render(Exposition::Text004);
        assert!(text.contains(r#"troupe_agent_lag_seconds{cluster="app",node="a:1"} 0.25"#));
        assert!(text.contains(
            r#"troupe_agent_last_report_timestamp_seconds{cluster="app",node="b:1"} 1700000200.0"#
        ));
        tokio::time::advance(Duration::from_secs(101)).await;
        let text = metrics.render(Exposition::Text004);
        assert!(!text.contains(r#"node="a:1""#), "{text}");
        assert!(text.contains(r#"troupe_agent_lag_seconds{cluster="app",node="b:1"} 0.75"#));
        tokio::time::advance(Duration::from_secs(200)).await;
        assert_eq!(metrics.expire_agents(Instant::now()), 1);
        assert!(!metrics.render(Exposition::OpenMetrics).contains("node="));
    }

    #[test]
    fn every_outcome_and_item_kind_is_exported_at_zero_before_first_use() {
        let text = Metrics::default().render(Exposition::Text004);
        for outcome in ["stored", "duplicate", "rejected", "failed"] {
            assert!(
                text.contains(&format!(
                    "troupe_ingest_batches_total{{outcome=\"{outcome}\"}} 0"
                )),
                "{text}"
            );
        }
        for kind in ["event", "dead_letter", "depth_sample"] {
            assert!(text.contains(&format!("troupe_ingest_items_total{{kind=\"{kind}\"}} 0")));
        }
        assert!(text.contains("process_resident_memory_bytes "));
    }

    #[test]
    fn made_up_methods_share_one_label_value() {
        let metrics = Metrics::default();
        metrics.http_request("GET", "/livez", 200, 0.001);
        metrics.http_request("BREW", "unmatched", 405, 0.001);
        metrics.http_request("PROPFIND", "unmatched", 405, 0.001);
        let text = metrics.render(Exposition::Text004);
        assert!(text.contains(
            r#"troupe_http_server_request_duration_seconds_count{method="_OTHER",route="unmatched",status="405"} 2"#
        ), "{text}");
        assert!(text.contains(r#"method="GET",route="/livez",status="200""#));
    }
}
