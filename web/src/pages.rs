//! The pages: one askama template and one view-model per concern. The server fills them from
//! its store; every field is plain, already-decided data (texts, classes, links, geometry).

mod audit;

use askama::Template;

pub use self::audit::{AuditPage, AuditView, outcome_class};
use crate::chart::{Chart, Lifetimes};
use crate::format::{TimeText, href};
use crate::map::ClusterMap;

/// Which page is showing (for the navigation bar).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    /// Clusters and members.
    Overview,
    /// Membership and singleton events.
    Timeline,
    /// Singletons and hand-overs.
    Singletons,
    /// Routers and mailboxes.
    Routers,
    /// Dead letters.
    DeadLetters,
    /// The audit trail of management actions.
    Audit,
    /// One node.
    Node,
}

impl Section {
    /// The page's path.
    #[must_use]
    pub fn path(self) -> &'static str {
        match self {
            Self::Overview => "/ui/",
            Self::Timeline => "/ui/timeline",
            Self::Singletons => "/ui/singletons",
            Self::Routers => "/ui/routers",
            Self::DeadLetters => "/ui/dead-letters",
            Self::Audit => "/ui/audit",
            Self::Node => "/ui/node",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Self::Overview => "Overview",
            Self::Timeline => "Timeline",
            Self::Singletons => "Singletons",
            Self::Routers => "Routers & mailboxes",
            Self::DeadLetters => "Dead letters",
            Self::Audit => "Audit",
            Self::Node => "Node",
        }
    }
}

/// A link of the navigation bar.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NavLink {
    /// Where it goes.
    pub href: String,
    /// What it says.
    pub label: &'static str,
    /// It is the page showing.
    pub active: bool,
}

/// An option of a `<select>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    /// Its value.
    pub value: String,
    /// What it says.
    pub label: String,
    /// It is selected.
    pub selected: bool,
}

impl Choice {
    /// Options from `(value, label)` pairs, with `current` selected.
    #[must_use]
    pub fn list(options: &[(&str, &str)], current: &str) -> Vec<Self> {
        options
            .iter()
            .map(|(value, label)| Self {
                value: (*value).to_owned(),
                label: (*label).to_owned(),
                selected: *value == current,
            })
            .collect()
    }
}

/// What every page shares: title, navigation, cluster switcher, live-update settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// The page's title.
    pub title: String,
    /// The cluster shown ("" when none has reported).
    pub cluster: String,
    /// The cluster switcher's options.
    pub clusters: Vec<Choice>,
    /// Where the cluster switcher goes.
    pub action: &'static str,
    /// Navigation links.
    pub nav: Vec<NavLink>,
    /// When the page was rendered.
    pub rendered: TimeText,
    /// The assets' version (cache key).
    pub asset_version: &'static str,
    /// Every event kind the live stream sends, comma-separated.
    pub event_kinds: String,
}

impl Layout {
    /// The layout of `section` showing `cluster` out of `clusters`.
    #[must_use]
    pub fn new(
        section: Section,
        title: impl Into<String>,
        cluster: &str,
        clusters: &[String],
        now_ms: i64,
        event_kinds: String,
    ) -> Self {
        let nav = [
            Section::Overview,
            Section::Timeline,
            Section::Singletons,
            Section::Routers,
            Section::DeadLetters,
            Section::Audit,
        ]
        .into_iter()
        .map(|s| NavLink {
            href: href(s.path(), &[("cluster", cluster)]),
            label: s.label(),
            active: s == section,
        })
        .collect();
        Self {
            title: title.into(),
            cluster: cluster.to_owned(),
            clusters: clusters
                .iter()
                .map(|c| Choice {
                    value: c.clone(),
                    label: c.clone(),
                    selected: c == cluster,
                })
                .collect(),
            action: if section == Section::Node {
                Section::Overview.path()
            } else {
                section.path()
            },
            nav,
            rendered: TimeText::at(now_ms),
            asset_version: crate::assets::version(),
            event_kinds,
        }
    }
}

/// Badge class of a member status.
#[must_use]
pub fn status_class(status: &str) -> &'static str {
    match status {
        "up" => "ok",
        "leaving" | "exiting" => "warn",
        "down" | "removed" => "bad",
        _ => "idle",
    }
}

/// Badge class of an agent health.
#[must_use]
pub fn health_class(health: &str) -> &'static str {
    match health {
        "ready" => "ok",
        "draining" => "warn",
        "fenced" => "bad",
        _ => "idle",
    }
}

/// A member row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberView {
    /// Its address.
    pub address: String,
    /// Its node page.
    pub node_href: String,
    /// Its events on the timeline.
    pub events_href: String,
    /// Its status.
    pub status: String,
    /// Badge class of the status.
    pub status_class: &'static str,
    /// Its roles.
    pub roles: Vec<String>,
    /// Every observer reaches it.
    pub reachable: bool,
    /// Who cannot reach it.
    pub unreachable_by: Vec<String>,
    /// It leads the cluster.
    pub leader: bool,
    /// Its agent's health (`starting`, `ready`, `draining`, `fenced`), "" without an agent.
    pub health: String,
    /// Badge class of the health.
    pub health_class: &'static str,
    /// Its agent's latest report.
    pub last_report: Option<TimeText>,
    /// How long ago that was.
    pub last_report_age: String,
    /// The agent has not reported for a while.
    pub stale: bool,
}

/// A cluster on the overview.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterView {
    /// Its name.
    pub name: String,
    /// Its overview (the cluster first, with its members).
    pub overview_href: String,
    /// Its timeline.
    pub timeline_href: String,
    /// Its dead letters.
    pub dead_letters_href: String,
    /// Its leader.
    pub leader: Option<String>,
    /// The leader's node page.
    pub leader_href: String,
    /// Latest report of any agent.
    pub last_report: TimeText,
    /// How long ago.
    pub last_report_age: String,
    /// Members (removed ones left out).
    pub members: Vec<MemberView>,
    /// Members up.
    pub up: usize,
    /// Members some node cannot reach.
    pub unreachable: usize,
    /// Events stored in the last hour (dead letters apart).
    pub events_last_hour: String,
    /// Dead letters in the last hour.
    pub dead_letters_last_hour: String,
    /// Any dead letters in the last hour.
    pub any_dead_letters: bool,
    /// Reports the agents dropped (running totals of their current incarnations).
    pub dropped: String,
    /// Any dropped.
    pub any_dropped: bool,
    /// The cluster map (of the cluster shown first only).
    pub map: Option<MapView>,
}

/// The cluster map with what its figure says around it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapView {
    /// The map.
    pub map: ClusterMap,
    /// Where the live script fetches a fresh map (`/ui/map?cluster=…`).
    pub src: String,
    /// After how long without a report an agent is greyed, in words (`15 s`).
    pub silence: String,
}

/// The cluster map alone: what `/ui/map` answers, for the live script to swap in.
#[derive(Debug, Template)]
#[template(path = "map_fragment.html")]
pub struct MapFragment {
    /// The map.
    pub view: MapView,
}

/// Clusters and their members: the first in full, the others one line each.
#[derive(Debug, Template)]
#[template(path = "overview.html")]
pub struct OverviewPage {
    /// Shared parts.
    pub layout: Layout,
    /// Clusters.
    pub clusters: Vec<ClusterView>,
}

/// A stored event as a table row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventView {
    /// When.
    pub at: TimeText,
    /// Its kind.
    pub kind: String,
    /// Badge class of the kind.
    pub kind_class: &'static str,
    /// What it is about.
    pub subject: String,
    /// Link for the subject ("" for none).
    pub subject_href: String,
    /// Who reported it.
    pub node: String,
    /// The reporter's node page.
    pub node_href: String,
    /// One line of what happened.
    pub summary: String,
}

/// Membership and singleton events over time.
#[derive(Debug, Template)]
#[template(path = "timeline.html")]
pub struct TimelinePage {
    /// Shared parts.
    pub layout: Layout,
    /// Time range options.
    pub ranges: Vec<Choice>,
    /// Kind options.
    pub kinds: Vec<Choice>,
    /// Reporting-node filter.
    pub node: String,
    /// Subject filter.
    pub subject: String,
    /// Range start.
    pub since: TimeText,
    /// Range end.
    pub until: TimeText,
    /// Who was up when, and who led.
    pub lifetimes: Lifetimes,
    /// The lifetime picture is built from fewer events than the range holds.
    pub lifetimes_truncated: bool,
    /// Events, newest first.
    pub events: Vec<EventView>,
    /// More events match than are shown.
    pub events_truncated: bool,
}

/// One entry of a singleton's history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryView {
    /// When.
    pub at: TimeText,
    /// The kind.
    pub kind: String,
    /// Badge class.
    pub kind_class: &'static str,
    /// The host it concerns.
    pub host: String,
    /// That host's node page.
    pub host_href: String,
    /// How long the hand-over took ("" if not a hand-over end).
    pub duration: String,
    /// Peers that did not answer.
    pub silent_peers: Vec<String>,
    /// Anything else.
    pub detail: String,
    /// Reported by.
    pub node: String,
}

/// A singleton with its state and history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SingletonView {
    /// Its name.
    pub name: String,
    /// The role hosts carry.
    pub role: String,
    /// Where it runs.
    pub host: String,
    /// The host's node page.
    pub host_href: String,
    /// Since when.
    pub host_since: Option<TimeText>,
    /// Its lease.
    pub lease: String,
    /// The lease holder.
    pub lease_holder: String,
    /// The holder's node page.
    pub lease_holder_href: String,
    /// The lease holder is not the host.
    pub lease_mismatch: bool,
    /// Hand-overs completed in the history shown.
    pub hand_overs: usize,
    /// Hand-overs timed out in the history shown.
    pub timeouts: usize,
    /// Two instances ran at once (one line per time it happened): the older one reported its
    /// stop only after the newer one started.
    pub overlaps: Vec<String>,
    /// An instance started while another's stop had never been reported (lost, or its host
    /// died): whether two ran at once is unknown.
    pub unknown_overlaps: Vec<String>,
    /// History, newest first.
    pub history: Vec<HistoryView>,
    /// Its events on the timeline.
    pub events_href: String,
}

/// Singletons, hosts, leases and hand-overs.
#[derive(Debug, Template)]
#[template(path = "singletons.html")]
pub struct SingletonsPage {
    /// Shared parts.
    pub layout: Layout,
    /// Singletons.
    pub singletons: Vec<SingletonView>,
    /// How many history entries each singleton shows at most.
    pub history_limit: i64,
}

/// A link to a member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeLink {
    /// Its address.
    pub address: String,
    /// Its node page.
    pub href: String,
}

/// A router.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouterView {
    /// Its path.
    pub path: String,
    /// Its strategy.
    pub strategy: String,
    /// The role routees carry.
    pub role: String,
    /// The routee actor's path.
    pub routee_path: String,
    /// Current routees.
    pub routees: Vec<NodeLink>,
    /// When it last changed.
    pub updated: TimeText,
    /// Depth of its routees' mailboxes over time, per node.
    pub chart: Chart,
}

/// A mailbox and its depth.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MailboxView {
    /// The actor's path.
    pub path: String,
    /// Its router, if a routee.
    pub router: String,
    /// Its node.
    pub node: String,
    /// The node's page.
    pub node_href: String,
    /// Messages waiting.
    pub depth: u32,
    /// When sampled.
    pub at: TimeText,
}

/// Routers, routees and mailbox depth.
#[derive(Debug, Template)]
#[template(path = "routers.html")]
pub struct RoutersPage {
    /// Shared parts.
    pub layout: Layout,
    /// Routers.
    pub routers: Vec<RouterView>,
    /// Deepest mailboxes in the latest sample of each node.
    pub deepest: Vec<MailboxView>,
    /// Range options.
    pub ranges: Vec<Choice>,
    /// The charts' range, in words.
    pub range_label: String,
}

/// A dead letter row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetterView {
    /// When.
    pub at: TimeText,
    /// Where it was going.
    pub recipient: String,
    /// Filter by this recipient.
    pub recipient_href: String,
    /// Its type.
    pub message_type: String,
    /// Filter by this type.
    pub message_type_href: String,
    /// Who sent it ("" unknown).
    pub sender: String,
    /// Why.
    pub reason: String,
    /// Who reported it.
    pub node: String,
    /// The reporter's page.
    pub node_href: String,
}

/// Dead letters of one recipient and reason, in the range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetterGroupView {
    /// Where they were going.
    pub recipient: String,
    /// Filter by this recipient.
    pub recipient_href: String,
    /// Why.
    pub reason: String,
    /// How many.
    pub count: String,
    /// The newest of them.
    pub last: TimeText,
}

/// Dead letters: searchable table and rate.
#[derive(Debug, Template)]
#[template(path = "dead_letters.html")]
pub struct DeadLettersPage {
    /// Shared parts.
    pub layout: Layout,
    /// Free-text search.
    pub q: String,
    /// Exact recipient filter.
    pub recipient: String,
    /// Exact type filter.
    pub message_type: String,
    /// Range options.
    pub ranges: Vec<Choice>,
    /// Dead letters per minute.
    pub chart: Chart,
    /// Dead letters in the range.
    pub total: String,
    /// Counts per recipient and reason over the range and exact filters, the biggest first.
    pub groups: Vec<DeadLetterGroupView>,
    /// There are more groups than shown.
    pub groups_truncated: bool,
    /// Rows, newest first.
    pub rows: Vec<DeadLetterView>,
    /// How many dead letters the search looked through.
    pub searched: usize,
    /// The search stopped at its limit.
    pub search_limited: bool,
    /// Link clearing every filter.
    pub clear_href: String,
}

/// One incarnation of a node's agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IncarnationView {
    /// Its incarnation.
    pub incarnation: u64,
    /// The machine.
    pub meta_node: String,
    /// Health.
    pub health: String,
    /// Badge class.
    pub health_class: &'static str,
    /// First report.
    pub first_seen: TimeText,
    /// Latest report.
    pub last_report: TimeText,
    /// How long ago.
    pub last_report_age: String,
    /// Highest batch sequence.
    pub last_sequence: i64,
}

/// Items an agent dropped, by kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DropView {
    /// What was dropped.
    pub kind: &'static str,
    /// How many (running total of the newest incarnation).
    pub count: String,
    /// Any.
    pub any: bool,
}

/// One node: health, events, depth, drops.
#[derive(Debug, Template)]
#[template(path = "node.html")]
pub struct NodePage {
    /// Shared parts.
    pub layout: Layout,
    /// The node's address.
    pub node: String,
    /// The member, if the cluster knows it.
    pub member: Option<MemberView>,
    /// Agent incarnations, newest first.
    pub incarnations: Vec<IncarnationView>,
    /// Drops of the newest incarnation.
    pub drops: Vec<DropView>,
    /// Events this node reported.
    pub events: Vec<EventView>,
    /// Events about this node.
    pub about: Vec<EventView>,
    /// Mailbox depth on this node over time (deepest actors).
    pub chart: Chart,
    /// Its deepest mailboxes in the latest sample.
    pub mailboxes: Vec<MailboxView>,
    /// Range options (of the depth chart).
    pub ranges: Vec<Choice>,
    /// The depth chart's range, in words.
    pub range_label: String,
    /// Link to its events on the timeline.
    pub timeline_href: String,
    /// Link to the management actions about it on the audit page.
    pub audit_href: String,
    /// How many management actions about it the audit trail holds ("3", or "100+").
    pub audit_count: String,
}

/// A page that could not be shown.
#[derive(Debug, Template)]
#[template(path = "error.html")]
pub struct ErrorPage {
    /// Shared parts.
    pub layout: Layout,
    /// The HTTP status.
    pub status: u16,
    /// What went wrong.
    pub message: String,
}
