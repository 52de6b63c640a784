//! The agent's Prometheus metrics (`/metrics` on the management listener).
//!
//! The format follows the scrape's `Accept` header as the server's does
//! ([`troupe_telemetry::Exposition::negotiate`]): OpenMetrics 1.0.0 when asked for (Prometheus
//! asks), else the text format 0.0.4, which `promtool check metrics` accepts.
//!
//! Every name starts with `troupe_agent_`, apart from the standard `process_*` metrics of the
//! agent process (CPU, memory, file descriptors, threads, start time; read from `/proc/self` at
//! each scrape). Labels are bounded: dead-letter reasons, member statuses, health states,
//! reporter item kinds, transport close reasons, handshake outcomes and admission pools are
//! closed sets, each with a series at 0 from the start (a rate over a value not seen yet is 0,
//! not empty); mailbox depth is one series per *watched* path or router (the application
//! registers them with [`crate::Agent::watch_depth`]), never one per actor — a router's routees
//! are summed into one series per router.
//!
//! Counters that other parts already keep (the reporter's) and gauges that describe current
//! state (membership, depths, buffer) are read at scrape time, so nothing here runs per message
//! except the dead-letter count.
//!
//! Leader changes and the singleton managers' events (hand-overs and their durations, the
//! instance hosted here, held, flushed and dead-lettered messages) are counted from the cluster
//! subscription and the event stream ([`AgentMetrics::count_runtime_events`]); singleton series
//! are labelled by the singleton's name (the application's closed set) and exist, at 0, from the
//! first event of that singleton on this node, so "no node hosts it" is a query, not an absence.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};
use troupe::cluster::{Cluster, ClusterEvent, ClusterNotification, MemberStatus};
use troupe::singleton::{DeadLetterCause, SingletonEvent};
use troupe::transport::admission::Pool;
use troupe::transport::{CloseReason, ProtocolVersions, TcpTransport};
use troupe::{ActorSystem, DeadLetter, DeadLetterReason};

use troupe_telemetry::{Exposition, ProcessCollector, to_text_004};

use crate::health::{Health, HealthState};
use crate::reporter::ReporterHandle;

/// A dead letter's reason as a label value (a closed set).
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum Reason {
    /// The recipient had stopped.
    RecipientStopped,
    /// No actor at the path.
    UnknownRecipient,
    /// A bounded mailbox was full.
    MailboxFull,
    /// An ask reply arrived after the asker gave up.
    AskerGone,
    /// A router had no routees.
    NoRoutees,
    /// The transport did not take the message for another node.
    NotSent,
    /// The message did not serialize.
    Unserializable,
    /// The receiving node could not decode the message.
    Undecodable,
    /// The receiving node has no type registered for the message's manifest.
    UnknownManifest,
    /// A singleton's hold buffer was full.
    HoldFull,
    /// A singleton held the message too long.
    HoldExpired,
    /// A singleton manager does not host.
    NotHosting,
    /// No singleton manager on the elected host.
    NoManager,
    /// A virtual actor's host gave the message up (the key's cause is in the dead letter).
    VirtualActor,
    /// A reason this agent does not know yet (the runtime's enum is non-exhaustive).
    Other,
}

impl Reason {
    /// Every reason: each has a series from the start (at 0), so a rate over one is 0, not
    /// empty, before the first such dead letter.
    pub const ALL: [Self; 15] = [
        Self::RecipientStopped,
        Self::UnknownRecipient,
        Self::MailboxFull,
        Self::AskerGone,
        Self::NoRoutees,
        Self::NotSent,
        Self::Unserializable,
        Self::Undecodable,
        Self::UnknownManifest,
        Self::HoldFull,
        Self::HoldExpired,
        Self::NotHosting,
        Self::NoManager,
        Self::VirtualActor,
        Self::Other,
    ];

    /// The label value of a runtime reason.
    #[must_use]
    pub fn of(reason: &DeadLetterReason) -> Self {
        match reason {
            DeadLetterReason::RecipientStopped => Self::RecipientStopped,
            DeadLetterReason::UnknownRecipient => Self::UnknownRecipient,
            DeadLetterReason::MailboxFull => Self::MailboxFull,
            DeadLetterReason::AskerGone => Self::AskerGone,
            DeadLetterReason::NoRoutees => Self::NoRoutees,
            DeadLetterReason::NotSent => Self::NotSent,
            DeadLetterReason::Unserializable => Self::Unserializable,
            DeadLetterReason::Undecodable => Self::Undecodable,
            DeadLetterReason::UnknownManifest { .. } => Self::UnknownManifest,
            DeadLetterReason::HoldFull => Self::HoldFull,
            DeadLetterReason::HoldExpired => Self::HoldExpired,
            DeadLetterReason::NotHosting => Self::NotHosting,
            DeadLetterReason::NoManager => Self::NoManager,
            DeadLetterReason::VirtualActor { .. } => Self::VirtualActor,
            _ => Self::Other,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Self::RecipientStopped => "recipient_stopped",
            Self::UnknownRecipient => "unknown_recipient",
            Self::MailboxFull => "mailbox_full",
            Self::AskerGone => "asker_gone",
            Self::NoRoutees => "no_routees",
            Self::NotSent => "not_sent",
            Self::Unserializable => "unserializable",
            Self::Undecodable => "undecodable",
            Self::UnknownManifest => "unknown_manifest",
            Self::HoldFull => "hold_full",
            Self::HoldExpired => "hold_expired",
            Self::NotHosting => "not_hosting",
            Self::NoManager => "no_manager",
            Self::VirtualActor => "virtual_actor",
            Self::Other => "other",
        }
    }
}

impl EncodeLabelValue for Reason {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> std::fmt::Result {
        std::fmt::Write::write_str(encoder, self.as_str())
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: Reason,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabels {
    status: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PathLabels {
    path: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouterLabels {
    router: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SingletonLabels {
    singleton: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HandOverLabels {
    singleton: String,
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SingletonCauseLabels {
    singleton: String,
    cause: &'static str,
}

/// The label value of why singleton messages became dead letters (a closed set).
fn cause(cause: DeadLetterCause) -> &'static str {
    match cause {
        DeadLetterCause::HoldFull => "hold_full",
        DeadLetterCause::HoldExpired => "hold_expired",
        DeadLetterCause::NotHosting => "not_hosting",
        DeadLetterCause::NoManager => "no_manager",
        DeadLetterCause::Undecodable => "undecodable",
    }
}

const CAUSES: [DeadLetterCause; 5] = [
    DeadLetterCause::HoldFull,
    DeadLetterCause::HoldExpired,
    DeadLetterCause::NotHosting,
    DeadLetterCause::NoManager,
    DeadLetterCause::Undecodable,
];

const HAND_OVER_OUTCOMES: [&str; 2] = ["completed", "timed_out"];

const MEMBER_STATUSES: [MemberStatus; 6] = [
    MemberStatus::Joining,
    MemberStatus::WeaklyUp,
    MemberStatus::Up,
    MemberStatus::Leaving,
    MemberStatus::Exiting,
    MemberStatus::Down,
];

/// The reporter buffer's item kinds (`troupe_agent_reporter_buffer_items`).
const BUFFER_KINDS: [&str; 2] = ["event", "depth_sample"];

/// The kinds the reporter drops (`troupe_agent_reporter_dropped`).
const DROPPED_KINDS: [&str; 6] = [
    "membership",
    "singleton",
    "router",
    "dead_letter",
    "health",
    "depth_sample",
];

const HANDSHAKE_OUTCOMES: [&str; 2] = ["ok", "rejected"];

const EXTENSION_OUTCOMES: [&str; 2] = ["read", "skipped"];

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// Hand-over rounds last from milliseconds (peers answer at once) to the hand-over timeout
/// (10 s by default): 5 ms .. ~41 s.
fn hand_over_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.005, 2.0, 14))
}

/// The singleton series of this node, one set per singleton name.
#[derive(Debug)]
struct SingletonMetrics {
    hosting: Family<SingletonLabels, Gauge>,
    hand_overs: Family<HandOverLabels, Counter>,
    hand_over_duration: HistogramFamily<SingletonLabels>,
    holds: Family<SingletonLabels, Counter>,
    flushed: Family<SingletonLabels, Counter>,
    dead_letters: Family<SingletonCauseLabels, Counter>,
    /// Per singleton: when this node's open hand-over round started.
    started: Mutex<HashMap<String, tokio::time::Instant>>,
}

impl SingletonMetrics {
    fn register(registry: &mut Registry) -> Self {
        let hosting = Family::<SingletonLabels, Gauge>::default();
        registry.register(
            "troupe_agent_singleton_hosting",
            "1 while this node runs the singleton's instance, 0 while it runs only its manager",
            hosting.clone(),
        );
        let hand_overs = Family::<HandOverLabels, Counter>::default();
        registry.register(
            "troupe_agent_singleton_hand_overs",
            "Hand-over rounds this node finished before hosting, by outcome (completed: every \
             peer acknowledged; timed_out: hosted anyway with peers silent)",
            hand_overs.clone(),
        );
        let hand_over_duration: HistogramFamily<SingletonLabels> =
            Family::new_with_constructor(hand_over_histogram);
        registry.register_with_unit(
            "troupe_agent_singleton_hand_over_duration",
            "Time from asking the peers to step down to hosting, per hand-over round",
            Unit::Seconds,
            hand_over_duration.clone(),
        );
        let holds = Family::<SingletonLabels, Counter>::default();
        registry.register(
            "troupe_agent_singleton_holds",
            "Times messages for the singleton started waiting on this node for an instance",
            holds.clone(),
        );
        let flushed = Family::<SingletonLabels, Counter>::default();
        registry.register(
            "troupe_agent_singleton_messages_flushed",
            "Held messages delivered to a new instance on this node, in send order",
            flushed.clone(),
        );
        let dead_letters = Family::<SingletonCauseLabels, Counter>::default();
        registry.register(
            "troupe_agent_singleton_dead_letters",
            "Messages for the singleton that went to dead letters on this node, by cause",
            dead_letters.clone(),
        );
        Self {
            hosting,
            hand_overs,
            hand_over_duration,
            holds,
            flushed,
            dead_letters,
            started: Mutex::new(HashMap::new()),
        }
    }

    /// Every series of `singleton`, created at 0 the first time it is seen.
    fn know(&self, singleton: &str) {
        let labels = SingletonLabels {
            singleton: singleton.to_owned(),
        };
        let _ = self.hosting.get_or_create(&labels);
        let _ = self.hand_over_duration.get_or_create(&labels);
        let _ = self.holds.get_or_create(&labels);
        let _ = self.flushed.get_or_create(&labels);
        for outcome in HAND_OVER_OUTCOMES {
            let _ = self.hand_overs.get_or_create(&HandOverLabels {
                singleton: singleton.to_owned(),
                outcome,
            });
        }
        for c in CAUSES {
            let _ = self.dead_letters.get_or_create(&SingletonCauseLabels {
                singleton: singleton.to_owned(),
                cause: cause(c),
            });
        }
    }

    fn hand_over_finished(
        &self,
        singleton: &str,
        outcome: &'static str,
        took: std::time::Duration,
    ) {
        self.hand_overs
            .get_or_create(&HandOverLabels {
                singleton: singleton.to_owned(),
                outcome,
            })
            .inc();
        self.hand_over_duration
            .get_or_create(&SingletonLabels {
                singleton: singleton.to_owned(),
            })
            .observe(took.as_secs_f64());
    }

    fn event(&self, event: &SingletonEvent) {
        let name = event.type_name();
        self.know(name);
        let labels = SingletonLabels {
            singleton: name.to_owned(),
        };
        match event {
            SingletonEvent::HandOverStarted { .. } => {
                self.started
                    .lock()
                    .insert(name.to_owned(), tokio::time::Instant::now());
            }
            SingletonEvent::HandOverCompleted { waited, .. } => {
                self.started.lock().remove(name);
                self.hand_over_finished(name, "completed", *waited);
            }
            SingletonEvent::HandOverTimedOut { .. } => {
                let took = self
                    .started
                    .lock()
                    .remove(name)
                    .map_or(std::time::Duration::ZERO, |at| at.elapsed());
                self.hand_over_finished(name, "timed_out", took);
            }
            SingletonEvent::InstanceStarted { .. } | SingletonEvent::InstanceRestarted { .. } => {
                self.hosting.get_or_create(&labels).set(1);
            }
            SingletonEvent::InstanceStopped { .. } => {
                self.hosting.get_or_create(&labels).set(0);
            }
            SingletonEvent::MessagesHeld { .. } => {
                self.holds.get_or_create(&labels).inc();
            }
            SingletonEvent::MessagesFlushed { count, .. } => {
                self.flushed
                    .get_or_create(&labels)
                    .inc_by(u64::try_from(*count).unwrap_or(u64::MAX));
            }
            SingletonEvent::MessagesDeadLettered { count, reason, .. } => {
                self.dead_letters
                    .get_or_create(&SingletonCauseLabels {
                        singleton: name.to_owned(),
                        cause: cause(*reason),
                    })
                    .inc_by(u64::try_from(*count).unwrap_or(u64::MAX));
            }
            // Elections and lease steps change no series (the host's `hosting` does).
            _ => {}
        }
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VersionLabels {
    protocol_version: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RefusedLabels {
    local: String,
    peer: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolLabels {
    pool: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BoundLabels {
    bound: String,
}

/// The cluster transport's counters and gauges (`troupe_agent_transport_*`).
#[derive(Debug, Default)]
struct TransportMetrics {
    source: Mutex<Option<Arc<TcpTransport>>>,
    closed: Family<CloseReasonLabels, Counter>,
    handshakes: Family<OutcomeLabels, Counter>,
    established: Family<VersionLabels, Counter>,
    refused_versions: Family<RefusedLabels, Counter>,
    warnings_suppressed: Counter,
    pending: Family<PoolLabels, Gauge>,
    known_sources: Gauge,
    protocol_version: Family<BoundLabels, Gauge>,
    extension_records: Family<OutcomeLabels, Counter>,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CloseReasonLabels {
    reason: String,
}

impl TransportMetrics {
    fn register(&self, registry: &mut Registry) {
        registry.register(
            "troupe_agent_transport_connections_closed",
            "Cluster connections closed, by reason (source_limit and evicted: handshake admission under a flood)",
            self.closed.clone(),
        );
        registry.register(
            "troupe_agent_transport_handshakes",
            "Cluster handshakes, by outcome (ok, rejected)",
            self.handshakes.clone(),
        );
        registry.register(
            "troupe_agent_transport_handshakes_established",
            "Cluster handshakes completed, by the protocol version they agreed on",
            self.established.clone(),
        );
        registry.register(
            "troupe_agent_transport_version_refused",
            "Cluster handshakes refused for want of a common protocol version, by both nodes' versions",
            self.refused_versions.clone(),
        );
        registry.register(
            "troupe_agent_transport_warnings_suppressed",
            "Warnings about closed cluster connections left out by the global log rate limit",
            self.warnings_suppressed.clone(),
        );
        registry.register(
            "troupe_agent_transport_pending_handshakes",
            "Accepted cluster connections in their handshake, by admission pool",
            self.pending.clone(),
        );
        registry.register(
            "troupe_agent_transport_known_sources",
            "Source addresses that proved the cluster secret (their reconnects get reserved slots)",
            self.known_sources.clone(),
        );
        registry.register(
            "troupe_agent_wire_extension_records",
            "Extension records of cluster messages (fields added by a later protocol version), by outcome: read, or skipped because this build does not know them",
            self.extension_records.clone(),
        );
        registry.register(
            "troupe_agent_transport_protocol_version",
            "The lowest and highest cluster protocol versions this node speaks",
            self.protocol_version.clone(),
        );
    }

    /// Every series of a closed label set, at 0 before the transport or remoting is watched.
    fn know_labels(&self) {
        for reason in CloseReason::ALL {
            let _ = self.closed.get_or_create(&CloseReasonLabels {
                reason: reason.as_str().to_owned(),
            });
        }
        for outcome in HANDSHAKE_OUTCOMES {
            let _ = self.handshakes.get_or_create(&OutcomeLabels {
                outcome: outcome.to_owned(),
            });
        }
        for outcome in EXTENSION_OUTCOMES {
            let _ = self.extension_records.get_or_create(&OutcomeLabels {
                outcome: outcome.to_owned(),
            });
        }
        for pool in [Pool::Reserved, Pool::General] {
            let _ = self.pending.get_or_create(&PoolLabels {
                pool: pool.as_str().to_owned(),
            });
        }
        for (bound, version) in [
            ("lowest", ProtocolVersions::THIS_BUILD.lowest()),
            ("highest", ProtocolVersions::THIS_BUILD.highest()),
        ] {
            self.protocol_version
                .get_or_create(&BoundLabels {
                    bound: bound.to_owned(),
                })
                .set(i64::from(version));
        }
    }

    fn observe_wire(&self, system: &ActorSystem) {
        let Some(remoting) = troupe::remoting::Remoting::of(system) else {
            return;
        };
        let stats = remoting.stats();
        let load = |v: &std::sync::atomic::AtomicU64| v.load(std::sync::atomic::Ordering::Relaxed);
        for (outcome, total) in EXTENSION_OUTCOMES.into_iter().zip([
            load(&stats.extension_records_read),
            load(&stats.extension_records_skipped),
        ]) {
            catch_up(
                &self.extension_records.get_or_create(&OutcomeLabels {
                    outcome: outcome.to_owned(),
                }),
                total,
            );
        }
    }

    fn observe(&self) {
        let Some(transport) = self.source.lock().clone() else {
            return;
        };
        let stats = transport.stats_snapshot();
        for reason in CloseReason::ALL {
            catch_up(
                &self.closed.get_or_create(&CloseReasonLabels {
                    reason: reason.as_str().to_owned(),
                }),
                stats.closed(reason),
            );
        }
        for (outcome, total) in HANDSHAKE_OUTCOMES
            .into_iter()
            .zip([stats.handshakes_ok, stats.handshakes_rejected])
        {
            catch_up(
                &self.handshakes.get_or_create(&OutcomeLabels {
                    outcome: outcome.to_owned(),
                }),
                total,
            );
        }
        for (version, total) in &stats.established_by_version {
            catch_up(
                &self.established.get_or_create(&VersionLabels {
                    protocol_version: version.to_string(),
                }),
                *total,
            );
        }
        // Bounded: the transport counts at most 16 peer ranges and one "other".
        let local = ProtocolVersions::THIS_BUILD.to_string();
        for (peer, total) in &stats.refused_versions {
            catch_up(
                &self.refused_versions.get_or_create(&RefusedLabels {
                    local: local.clone(),
                    peer: peer.to_string(),
                }),
                *total,
            );
        }
        catch_up(&self.warnings_suppressed, stats.warnings_suppressed);
        for pool in [Pool::Reserved, Pool::General] {
            self.pending
                .get_or_create(&PoolLabels {
                    pool: pool.as_str().to_owned(),
                })
                .set(i64::try_from(transport.pending_handshakes(pool)).unwrap_or(i64::MAX));
        }
        self.known_sources
            .set(i64::try_from(transport.known_sources()).unwrap_or(i64::MAX));
        for (bound, version) in [
            ("lowest", ProtocolVersions::THIS_BUILD.lowest()),
            ("highest", ProtocolVersions::THIS_BUILD.highest()),
        ] {
            self.protocol_version
                .get_or_create(&BoundLabels {
                    bound: bound.to_owned(),
                })
                .set(i64::from(version));
        }
    }
}

/// The report spool's metrics (`troupe_agent_reporter_spool_*`).
#[derive(Debug)]
struct SpoolMetrics {
    batches: Gauge,
    bytes: Gauge,
    lost: Counter,
    replayed: Counter,
    write_errors: Counter,
}

impl SpoolMetrics {
    fn register(registry: &mut Registry) -> Self {
        let metrics = Self {
            batches: Gauge::default(),
            bytes: Gauge::default(),
            lost: Counter::default(),
            replayed: Counter::default(),
            write_errors: Counter::default(),
        };
        registry.register(
            "troupe_agent_reporter_spool_batches",
            "Report batches held in the report spool (--report-spool-dir), waiting for delivery",
            metrics.batches.clone(),
        );
        registry.register(
            "troupe_agent_reporter_spool_bytes",
            "Bytes the held batches take in the spool file",
            metrics.bytes.clone(),
        );
        registry.register(
            "troupe_agent_reporter_spool_lost_batches",
            "Report batches the spool gave up: dropped oldest-first when full, refused as bad input on replay, or torn or unreadable in the file (their items also count in troupe_agent_reporter_dropped)",
            metrics.lost.clone(),
        );
        registry.register(
            "troupe_agent_reporter_spool_replayed_batches",
            "Report batches of an earlier run of this node, read from the spool, that the control plane acknowledged",
            metrics.replayed.clone(),
        );
        registry.register(
            "troupe_agent_reporter_spool_write_errors",
            "Writes to the spool file that failed (the batches stayed in memory only)",
            metrics.write_errors.clone(),
        );
        metrics
    }

    fn observe(&self, stats: &crate::reporter::ReporterStats) {
        let load = |v: &std::sync::atomic::AtomicU64| v.load(std::sync::atomic::Ordering::Relaxed);
        self.batches
            .set(i64::try_from(load(&stats.spool_batches)).unwrap_or(i64::MAX));
        self.bytes
            .set(i64::try_from(load(&stats.spool_bytes)).unwrap_or(i64::MAX));
        catch_up(&self.lost, load(&stats.spool_lost));
        catch_up(&self.replayed, load(&stats.spool_replayed));
        catch_up(&self.write_errors, load(&stats.spool_write_errors));
    }
}

/// A path whose mailbox depth is exported: alone (one series per path), or as a routee of
/// `router` (summed into one series per router).
#[derive(Debug, Clone, PartialEq, Eq)]
struct DepthWatch {
    path: String,
    router: Option<String>,
}

/// The agent's metrics: the registry, the dead-letter counter, and the gauges filled at scrape.
#[derive(Debug)]
pub struct AgentMetrics {
    registry: Registry,
    dead_letters: Family<ReasonLabels, Counter>,
    members: Family<StatusLabels, Gauge>,
    unreachable: Gauge,
    depth: Family<PathLabels, Gauge>,
    router_depth: Family<RouterLabels, Gauge>,
    health: Family<StateLabels, Gauge>,
    buffer_items: Family<KindLabels, Gauge>,
    buffer_capacity: Gauge,
    dropped: Family<KindLabels, Counter>,
    batches_shipped: Counter,
    batches_failed: Counter,
    batches_refused: Counter,
    events_buffered: Counter,
    spool: SpoolMetrics,
    leader_changes: Counter,
    singletons: SingletonMetrics,
    transport: TransportMetrics,
    watches: Mutex<Vec<DepthWatch>>,
    /// One scrape at a time: catching counters up from their sources is read-then-add.
    scrape: Mutex<()>,
}

impl Default for AgentMetrics {
    fn default() -> Self {
        Self::new()
    }
}

fn catch_up(counter: &Counter, total: u64) {
    let now = counter.get();
    if total > now {
        counter.inc_by(total - now);
    }
}

impl AgentMetrics {
    /// Registers every metric.
    #[must_use]
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let dead_letters = Family::<ReasonLabels, Counter>::default();
        for reason in Reason::ALL {
            let _ = dead_letters.get_or_create(&ReasonLabels { reason });
        }
        registry.register(
            "troupe_agent_dead_letters",
            "Messages that could not be delivered on this node, by reason",
            dead_letters.clone(),
        );
        let members = Family::<StatusLabels, Gauge>::default();
        registry.register(
            "troupe_agent_members",
            "Cluster members as this node sees them, by status",
            members.clone(),
        );
        let unreachable = Gauge::default();
        registry.register(
            "troupe_agent_unreachable_members",
            "Members this node (or a peer it heard from) finds unreachable",
            unreachable.clone(),
        );
        let depth = Family::<PathLabels, Gauge>::default();
        registry.register(
            "troupe_agent_mailbox_depth",
            "Messages waiting in the mailbox of each watched actor path",
            depth.clone(),
        );
        let router_depth = Family::<RouterLabels, Gauge>::default();
        registry.register(
            "troupe_agent_router_mailbox_depth",
            "Messages waiting in the mailboxes of a router's watched routees, summed per router",
            router_depth.clone(),
        );
        let health = Family::<StateLabels, Gauge>::default();
        registry.register(
            "troupe_agent_health",
            "1 for the agent's current health state, 0 for the others",
            health.clone(),
        );
        let buffer_items = Family::<KindLabels, Gauge>::default();
        registry.register(
            "troupe_agent_reporter_buffer_items",
            "Items waiting in the reporter's buffer (events, depth samples)",
            buffer_items.clone(),
        );
        let buffer_capacity = Gauge::default();
        registry.register(
            "troupe_agent_reporter_buffer_capacity_items",
            "Items the reporter's buffer holds before it drops the oldest",
            buffer_capacity.clone(),
        );
        let dropped = Family::<KindLabels, Counter>::default();
        registry.register(
            "troupe_agent_reporter_dropped",
            "Items the reporter dropped because its buffer was full, by kind",
            dropped.clone(),
        );
        let batches_shipped = Counter::default();
        registry.register(
            "troupe_agent_reporter_batches_shipped",
            "Report batches the control plane acknowledged",
            batches_shipped.clone(),
        );
        let batches_failed = Counter::default();
        registry.register(
            "troupe_agent_reporter_batches_failed",
            "Report attempts that failed (each is retried with the same sequence)",
            batches_failed.clone(),
        );
        let batches_refused = Counter::default();
        registry.register(
            "troupe_agent_reporter_batches_refused",
            "Report batches the control plane refused as bad input (400, 413, 422): dropped, their items counted in troupe_agent_reporter_dropped",
            batches_refused.clone(),
        );
        let events_buffered = Counter::default();
        registry.register(
            "troupe_agent_reporter_events",
            "Events handed to the reporter's buffer",
            events_buffered.clone(),
        );
        let spool = SpoolMetrics::register(&mut registry);
        let leader_changes = Counter::default();
        registry.register(
            "troupe_agent_leader_changes",
            "Cluster leader changes this node saw",
            leader_changes.clone(),
        );
        let singletons = SingletonMetrics::register(&mut registry);
        let transport = TransportMetrics::default();
        transport.register(&mut registry);
        transport.know_labels();
        registry.register_collector(Box::new(ProcessCollector));
        for status in MEMBER_STATUSES {
            let _ = members.get_or_create(&StatusLabels {
                status: status.name().to_owned(),
            });
        }
        for state in HealthState::ALL {
            let _ = health.get_or_create(&StateLabels {
                state: state.as_str().to_owned(),
            });
        }
        for kind in BUFFER_KINDS {
            let _ = buffer_items.get_or_create(&KindLabels {
                kind: kind.to_owned(),
            });
        }
        for kind in DROPPED_KINDS {
            let _ = dropped.get_or_create(&KindLabels {
                kind: kind.to_owned(),
            });
        }
        Self {
            registry,
            dead_letters,
            members,
            unreachable,
            depth,
            router_depth,
            health,
            buffer_items,
            buffer_capacity,
            dropped,
            batches_shipped,
            batches_failed,
            batches_refused,
            events_buffered,
            spool,
            leader_changes,
            singletons,
            transport,
            watches: Mutex::new(Vec::new()),
            scrape: Mutex::new(()),
        }
    }

    /// Counts one dead letter.
    pub fn dead_letter(&self, letter: &DeadLetter) {
        self.dead_letters
            .get_or_create(&ReasonLabels {
                reason: Reason::of(&letter.reason),
            })
            .inc();
    }

    /// Export the mailbox depth of `path`, alone or summed into `router`'s series.
    pub fn watch_depth(&self, path: &str, router: Option<&str>) {
        let watch = DepthWatch {
            path: path.to_owned(),
            router: router.map(ToOwned::to_owned),
        };
        let mut watches = self.watches.lock();
        if !watches.contains(&watch) {
            watches.push(watch);
        }
    }

    /// Export the counters of the cluster transport (`troupe_agent_transport_*`).
    pub fn watch_transport(&self, transport: Arc<TcpTransport>) {
        *self.transport.source.lock() = Some(transport);
    }

    /// Count `system`'s dead letters from now on (a task that ends with the event stream).
    pub fn count_dead_letters(self: &Arc<Self>, system: &ActorSystem) {
        let mut letters = system.event_stream().subscribe::<DeadLetter>();
        let metrics = Arc::clone(self);
        tokio::spawn(async move {
            while let Some(letter) = letters.recv().await {
                metrics.dead_letter(&letter);
            }
        });
    }

    /// Count leader changes (from `cluster`) and singleton events (from `system`'s event
    /// stream) from now on: two tasks that end with the cluster and the event stream.
    pub fn count_runtime_events(self: &Arc<Self>, system: &ActorSystem, cluster: &Cluster) {
        let mut cluster_events = cluster.subscribe();
        let metrics = Arc::clone(self);
        tokio::spawn(async move {
            while let Some(notification) = cluster_events.recv().await {
                if let ClusterNotification::Event(ClusterEvent::LeaderChanged(_)) = notification {
                    metrics.leader_changes.inc();
                }
            }
        });
        let mut singleton_events = system.event_stream().subscribe::<SingletonEvent>();
        let metrics = Arc::clone(self);
        tokio::spawn(async move {
            while let Some(event) = singleton_events.recv().await {
                metrics.singletons.event(&event);
            }
        });
    }

    /// Read the current state and render it in `format`.
    #[must_use]
    pub fn render(
        &self,
        format: Exposition,
        system: &ActorSystem,
        cluster: &Cluster,
        health: &Health,
        reporter: Option<&ReporterHandle>,
    ) -> String {
        let _one_at_a_time = self.scrape.lock();
        self.observe_cluster(cluster);
        self.observe_depths(system);
        let current = health.state();
        for state in HealthState::ALL {
            self.health
                .get_or_create(&StateLabels {
                    state: state.as_str().to_owned(),
                })
                .set(i64::from(state == current));
        }
        if let Some(reporter) = reporter {
            self.observe_reporter(reporter);
        }
        self.transport.observe();
        self.transport.observe_wire(system);
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        match format {
            Exposition::OpenMetrics => out,
            Exposition::Text004 => to_text_004(&out),
        }
    }

    fn observe_cluster(&self, cluster: &Cluster) {
        let view = cluster.view();
        for status in MEMBER_STATUSES {
            let count = view.members.iter().filter(|m| m.status == status).count();
            self.members
                .get_or_create(&StatusLabels {
                    status: status.name().to_owned(),
                })
                .set(i64::try_from(count).unwrap_or(i64::MAX));
        }
        self.unreachable
            .set(i64::try_from(view.unreachable.len()).unwrap_or(i64::MAX));
    }

    fn observe_depths(&self, system: &ActorSystem) {
        let watches = self.watches.lock().clone();
        let mut routers: Vec<(String, i64)> = Vec::new();
        for watch in &watches {
            // A path that is not (or no longer) alive counts as empty.
            let depth = system.resolve_any(&watch.path).map_or(0, |actor| {
                i64::try_from(actor.mailbox_depth()).unwrap_or(i64::MAX)
            });
            match &watch.router {
                None => {
                    self.depth
                        .get_or_create(&PathLabels {
                            path: watch.path.clone(),
                        })
                        .set(depth);
                }
                Some(router) => match routers.iter_mut().find(|(name, _)| name == router) {
                    Some((_, sum)) => *sum += depth,
                    None => routers.push((router.clone(), depth)),
                },
            }
        }
        for (router, sum) in routers {
            self.router_depth
                .get_or_create(&RouterLabels { router })
                .set(sum);
        }
    }

    fn observe_reporter(&self, reporter: &ReporterHandle) {
        let stats = reporter.stats();
        let load = |v: &std::sync::atomic::AtomicU64| v.load(std::sync::atomic::Ordering::Relaxed);
        catch_up(&self.batches_shipped, load(&stats.batches_acknowledged));
        catch_up(&self.batches_failed, load(&stats.failed_attempts));
        catch_up(&self.batches_refused, load(&stats.batches_refused));
        catch_up(&self.events_buffered, load(&stats.events_buffered));
        self.spool.observe(stats);
        let occupancy = reporter.occupancy();
        for (kind, items) in BUFFER_KINDS
            .into_iter()
            .zip([occupancy.events, occupancy.depth_samples])
        {
            self.buffer_items
                .get_or_create(&KindLabels {
                    kind: kind.to_owned(),
                })
                .set(i64::try_from(items).unwrap_or(i64::MAX));
        }
        self.buffer_capacity
            .set(i64::try_from(occupancy.capacity).unwrap_or(i64::MAX));
        let dropped = occupancy.dropped_total;
        for (kind, total) in DROPPED_KINDS.into_iter().zip([
            dropped.membership,
            dropped.singleton,
            dropped.router,
            dropped.dead_letters,
            dropped.health,
            dropped.depth_samples,
        ]) {
            catch_up(
                &self.dropped.get_or_create(&KindLabels {
                    kind: kind.to_owned(),
                }),
                total,
            );
        }
    }
}
