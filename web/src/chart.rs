//! Server-rendered SVG charts: the geometry is computed here, the templates only draw it.
//!
//! Every number a template puts into an SVG attribute comes from this module (integers or
//! formatted floats); every text (series names, member addresses, tooltips) goes through the
//! template's HTML escaping like any other text.

use std::collections::BTreeMap;

use crate::format::{clock, clock_seconds};

/// Width of every chart's view box.
pub const WIDTH: i64 = 760;
const LEFT: i64 = 56;
const RIGHT: i64 = 16;
const TOP: i64 = 12;
const BOTTOM: i64 = 30;

/// A tick on an axis: its position in view-box units and its label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tick {
    /// x (time axis) or y (value axis) position.
    pub pos: i64,
    /// What the tick says.
    pub label: String,
}

/// One line of a line chart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// What the line shows (a node, an actor path).
    pub label: String,
    /// Colour class `s0`…`s7`.
    pub class: String,
    /// The polyline's points, `x,y x,y …`.
    pub points: String,
    /// The last value, as shown in the legend.
    pub last: String,
}

/// One bar of a bar chart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bar {
    /// Left edge.
    pub x: i64,
    /// Top edge.
    pub y: i64,
    /// Width.
    pub w: i64,
    /// Height.
    pub h: i64,
    /// Tooltip.
    pub title: String,
}

/// A time-series chart (lines or bars) with axes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chart {
    /// View-box height.
    pub height: i64,
    /// Plot area left edge.
    pub left: i64,
    /// Plot area right edge.
    pub right: i64,
    /// Plot area top edge.
    pub top: i64,
    /// Plot area bottom edge (the time axis).
    pub bottom: i64,
    /// Ticks under the time axis.
    pub x_ticks: Vec<Tick>,
    /// Ticks beside the value axis.
    pub y_ticks: Vec<Tick>,
    /// Lines, if a line chart.
    pub lines: Vec<Line>,
    /// Bars, if a bar chart.
    pub bars: Vec<Bar>,
    /// What the value axis counts.
    pub y_title: String,
    /// One sentence for screen readers.
    pub summary: String,
    /// Nothing to draw.
    pub empty: bool,
}

/// The smallest 1, 2 or 5 times a power of ten that is at least `value` (at least 1).
fn nice_ceiling(value: f64) -> f64 {
    if value <= 1.0 {
        return 1.0;
    }
    let magnitude = 10f64.powf(value.log10().floor());
    for step in [1.0, 2.0, 5.0, 10.0] {
        if step * magnitude >= value {
            return step * magnitude;
        }
    }
    10.0 * magnitude
}

fn value_label(v: f64) -> String {
    if v >= 10_000.0 {
        format!("{:.0}k", v / 1000.0)
    } else if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

impl Chart {
    fn frame(height: i64, since_ms: i64, until_ms: i64, y_max: f64, y_title: &str) -> Self {
        let (left, right, top, bottom) = (LEFT, WIDTH - RIGHT, TOP, height - BOTTOM);
        let span = (until_ms - since_ms).max(1);
        let x_ticks = (0..=5)
            .map(|i| {
                let at = since_ms + span * i / 5;
                Tick {
                    pos: left + (right - left) * i / 5,
                    label: if span < 600_000 {
                        clock_seconds(at)
                    } else {
                        clock(at)
                    },
                }
            })
            .collect();
        let y_ticks = (0..=2)
            .map(|i| Tick {
                pos: bottom - (bottom - top) * i / 2,
                label: value_label(y_max * i as f64 / 2.0),
            })
            .collect();
        Self {
            height,
            left,
            right,
            top,
            bottom,
            x_ticks,
            y_ticks,
            lines: Vec::new(),
            bars: Vec::new(),
            y_title: y_title.to_owned(),
            summary: String::new(),
            empty: true,
        }
    }

    fn x(&self, since_ms: i64, until_ms: i64, at_ms: i64) -> i64 {
        let span = (until_ms - since_ms).max(1);
        self.left + (self.right - self.left) * (at_ms - since_ms).clamp(0, span) / span
    }

    fn y(&self, y_max: f64, v: f64) -> i64 {
        self.bottom - ((self.bottom - self.top) as f64 * (v / y_max).clamp(0.0, 1.0)).round() as i64
    }

    /// A line chart over `[since_ms, until_ms]`: one line per series of `(at_ms, value)`
    /// points (oldest first); at most eight series get their own colour.
    #[must_use]
    pub fn lines(
        since_ms: i64,
        until_ms: i64,
        y_title: &str,
        series: Vec<(String, Vec<(i64, f64)>)>,
    ) -> Self {
        let max = series
            .iter()
            .flat_map(|(_, points)| points.iter().map(|(_, v)| *v))
            .fold(0.0, f64::max);
        let y_max = nice_ceiling(max);
        let mut chart = Self::frame(200, since_ms, until_ms, y_max, y_title);
        for (i, (label, points)) in series.into_iter().enumerate() {
            if points.is_empty() {
                continue;
            }
            let mut coords = String::new();
            for (at, v) in &points {
                if !coords.is_empty() {
                    coords.push(' ');
                }
                let (x, y) = (chart.x(since_ms, until_ms, *at), chart.y(y_max, *v));
                coords.push_str(&format!("{x},{y}"));
            }
            let last = points.last().map_or(0.0, |(_, v)| *v);
            chart.lines.push(Line {
                label,
                class: format!("s{}", i % 8),
                points: coords,
                last: value_label((last * 10.0).round() / 10.0),
            });
        }
        chart.empty = chart.lines.is_empty();
        chart.summary = format!(
            "{} over time, {} series, peak {}",
            y_title,
            chart.lines.len(),
            value_label(max)
        );
        chart
    }

    /// A bar chart of counts per bucket of `bucket_ms` starting at `since_ms`.
    #[must_use]
    pub fn bars(
        since_ms: i64,
        until_ms: i64,
        bucket_ms: i64,
        y_title: &str,
        counts: &[(i64, i64)],
    ) -> Self {
        let max = counts.iter().map(|(_, c)| *c).max().unwrap_or(0);
        let y_max = nice_ceiling(max as f64);
        let mut chart = Self::frame(160, since_ms, until_ms, y_max, y_title);
        let bucket_ms = bucket_ms.max(1);
        for (start, count) in counts {
            if *count <= 0 || *start + bucket_ms <= since_ms || *start >= until_ms {
                continue;
            }
            let x0 = chart.x(since_ms, until_ms, *start);
            let x1 = chart.x(since_ms, until_ms, *start + bucket_ms);
            let y = chart.y(y_max, *count as f64);
            chart.bars.push(Bar {
                x: x0,
                y,
                w: (x1 - x0 - 1).max(1),
                h: (chart.bottom - y).max(1),
                title: format!("{count} at {} UTC", clock(*start)),
            });
        }
        chart.empty = chart.bars.is_empty();
        chart.summary = format!(
            "{} per bucket, {} in total, peak {}",
            y_title,
            counts.iter().map(|(_, c)| c).sum::<i64>(),
            max
        );
        chart
    }
}

/// What a member was doing during a span of its lifetime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Joining or weakly up.
    Joining,
    /// Up and reachable.
    Up,
    /// Up but some observer cannot reach it.
    Unreachable,
    /// Leaving or exiting.
    Leaving,
    /// Declared down, not yet removed.
    Down,
}

impl Phase {
    /// The CSS class and legend word.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Joining => "joining",
            Self::Up => "up",
            Self::Unreachable => "unreachable",
            Self::Leaving => "leaving",
            Self::Down => "down",
        }
    }

    /// The phase after a membership event of `kind`: `None` once removed (the lifetime ends);
    /// kinds that change nothing keep `current`.
    fn after(kind: &str, current: Option<Self>) -> Option<Self> {
        match kind {
            "MemberJoined" | "MemberWeaklyUp" => Some(Self::Joining),
            "MemberUp" | "SelfUp" | "MemberReachable" => Some(Self::Up),
            "MemberUnreachable" => Some(Self::Unreachable),
            "MemberLeft" | "MemberExited" => Some(Self::Leaving),
            "MemberDown" => Some(Self::Down),
            "MemberRemoved" => None,
            _ => current,
        }
    }

    /// The phase a member in `status` (as the store holds it) is in.
    #[must_use]
    pub fn from_status(status: &str, reachable: bool) -> Option<Self> {
        match status {
            "joining" | "weakly-up" => Some(Self::Joining),
            "up" if reachable => Some(Self::Up),
            "up" => Some(Self::Unreachable),
            "leaving" | "exiting" => Some(Self::Leaving),
            "down" => Some(Self::Down),
            _ => None,
        }
    }
}

/// A membership event, as the lifetime picture needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MembershipPoint {
    /// When.
    pub at_ms: i64,
    /// The kind (`MemberUp`, `LeaderChanged`, …).
    pub kind: String,
    /// The member (for `LeaderChanged`: the new leader, `None` for nobody).
    pub subject: Option<String>,
}

/// A coloured span of one row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    /// Left edge.
    pub x: i64,
    /// Width.
    pub w: i64,
    /// CSS class (`up`, `leaving`, …, or `leader`).
    pub class: String,
    /// Tooltip.
    pub title: String,
}

/// One member's row of the lifetime picture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LifetimeRow {
    /// Top of the row.
    pub y: i64,
    /// Baseline of the label.
    pub text_y: i64,
    /// The member's address.
    pub address: String,
    /// Link to the member's node page.
    pub href: String,
    /// Phases.
    pub segments: Vec<Segment>,
    /// When it led the cluster.
    pub leader: Vec<Segment>,
}

/// Who was up when, and who led: one row per member over a time range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lifetimes {
    /// View-box height.
    pub height: i64,
    /// Where the bars start (after the labels).
    pub left: i64,
    /// Where they end.
    pub right: i64,
    /// Bottom of the last row (the time axis).
    pub bottom: i64,
    /// Ticks of the time axis.
    pub x_ticks: Vec<Tick>,
    /// Rows, by address.
    pub rows: Vec<LifetimeRow>,
}

const ROW: i64 = 26;
const LABEL: i64 = 200;

impl Lifetimes {
    /// Builds the picture from membership events in `[since_ms, until_ms]` (any order), the
    /// members' current `(address, phase)` and the current leader; `link` makes a member's
    /// node-page link.
    #[must_use]
    pub fn build(
        since_ms: i64,
        until_ms: i64,
        events: &[MembershipPoint],
        current: &[(String, Option<Phase>)],
        current_leader: Option<&str>,
        link: impl Fn(&str) -> String,
    ) -> Self {
        let mut sorted: Vec<&MembershipPoint> = events.iter().collect();
        sorted.sort_by_key(|e| e.at_ms);
        // Per member: (spans, open phase and its start).
        type Track = (Vec<(i64, i64, Phase)>, Option<(Phase, i64)>, bool);
        let mut tracks: BTreeMap<String, Track> = BTreeMap::new();
        let mut leader_spans: Vec<(String, i64, i64)> = Vec::new();
        let mut leader: Option<(String, i64)> = None;
        let mut saw_leader_change = false;
        for event in &sorted {
            if event.kind == "LeaderChanged" {
                saw_leader_change = true;
                let next = event.subject.clone();
                if leader.as_ref().map(|(l, _)| l) == next.as_ref() {
                    continue;
                }
                if let Some((who, from)) = leader.take() {
                    leader_spans.push((who, from, event.at_ms));
                }
                leader = next.map(|who| (who, event.at_ms));
                continue;
            }
            let Some(address) = &event.subject else {
                continue;
            };
            let track = tracks
                .entry(address.clone())
                .or_insert((Vec::new(), None, false));
            let current = track.1.map(|(p, _)| p);
            let first = !track.2;
            track.2 = true;
            // A member whose first event in range is not a join was already there.
            let starts = matches!(
                event.kind.as_str(),
                "MemberJoined" | "MemberWeaklyUp" | "MemberUp" | "SelfUp"
            );
            let current = if first && current.is_none() && !starts {
                track.1 = Some((Phase::Up, since_ms));
                Some(Phase::Up)
            } else {
                current
            };
            let next = Phase::after(&event.kind, current);
            if next == current {
                continue;
            }
            if let Some((phase, from)) = track.1.take() {
                track.0.push((from, event.at_ms, phase));
            }
            track.1 = next.map(|p| (p, event.at_ms));
        }
        if let Some((who, from)) = leader {
            leader_spans.push((who, from, until_ms));
        }
        if !saw_leader_change && let Some(who) = current_leader {
            leader_spans.push((who.to_owned(), since_ms, until_ms));
        }
        for (address, phase) in current {
            let track = tracks
                .entry(address.clone())
                .or_insert((Vec::new(), None, false));
            if !track.2
                && let Some(phase) = phase
            {
                track.1 = Some((*phase, since_ms));
            }
        }
        let rows = tracks.len() as i64;
        let bottom = 8 + rows.max(1) * ROW;
        let (left, right) = (LABEL, WIDTH - RIGHT);
        let span = (until_ms - since_ms).max(1);
        let x = |at: i64| left + (right - left) * (at - since_ms).clamp(0, span) / span;
        let x_ticks = (0..=5)
            .map(|i| Tick {
                pos: left + (right - left) * i / 5,
                label: clock(since_ms + span * i / 5),
            })
            .collect();
        let rows = tracks
            .into_iter()
            .enumerate()
            .map(|(i, (address, (mut spans, open, _)))| {
                if let Some((phase, from)) = open {
                    spans.push((from, until_ms, phase));
                }
                let y = 8 + i as i64 * ROW;
                let segments = spans
                    .iter()
                    .filter(|(from, to, _)| *to > since_ms && *from < until_ms)
                    .map(|(from, to, phase)| Segment {
                        x: x(*from),
                        w: (x(*to) - x(*from)).max(2),
                        class: phase.as_str().to_owned(),
                        title: format!(
                            "{address} {} {}–{} UTC",
                            phase.as_str(),
                            clock_seconds(*from),
                            clock_seconds(*to)
                        ),
                    })
                    .collect();
                let leader = leader_spans
                    .iter()
                    .filter(|(who, ..)| *who == address)
                    .map(|(_, from, to)| Segment {
                        x: x(*from),
                        w: (x(*to) - x(*from)).max(2),
                        class: "leader".to_owned(),
                        title: format!(
                            "{address} leader {}–{} UTC",
                            clock_seconds(*from),
                            clock_seconds(*to)
                        ),
                    })
                    .collect();
                LifetimeRow {
                    y,
                    text_y: y + 16,
                    href: link(&address),
                    address,
                    segments,
                    leader,
                }
            })
            .collect();
        Self {
            height: bottom + 26,
            left,
            right,
            bottom,
            x_ticks,
            rows,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(at_ms: i64, kind: &str, subject: &str) -> MembershipPoint {
        MembershipPoint {
            at_ms,
            kind: kind.to_owned(),
            subject: Some(subject.to_owned()),
        }
    }

    #[test]
    fn a_member_that_joins_and_leaves_has_joining_up_and_leaving_spans() {
        let events = [
            point(100, "MemberJoined", "a"),
            point(200, "MemberUp", "a"),
            point(210, "MemberUp", "a"),
            point(500, "MemberLeft", "a"),
            point(600, "MemberRemoved", "a"),
        ];
        let picture = Lifetimes::build(0, 1000, &events, &[], None, |a| a.to_owned());
        let classes: Vec<_> = picture.rows[0]
            .segments
            .iter()
            .map(|s| s.class.as_str())
            .collect();
        assert_eq!(classes, ["joining", "up", "leaving"]);
    }

    #[test]
    fn a_member_already_up_spans_from_the_range_start_and_leaders_are_tracked() {
        let events = [
            point(400, "MemberUnreachable", "b"),
            MembershipPoint {
                at_ms: 300,
                kind: "LeaderChanged".to_owned(),
                subject: Some("b".to_owned()),
            },
        ];
        let current = [("c".to_owned(), Some(Phase::Up))];
        let picture = Lifetimes::build(0, 1000, &events, &current, Some("b"), |a| a.to_owned());
        assert_eq!(picture.rows.len(), 2);
        let b = &picture.rows[0];
        assert_eq!(b.segments[0].class, "up");
        assert_eq!(b.segments[0].x, picture.left);
        assert_eq!(b.segments[1].class, "unreachable");
        assert_eq!(b.leader.len(), 1);
        assert_eq!(picture.rows[1].segments.len(), 1, "c is up the whole range");
    }

    #[test]
    fn bar_and_line_charts_scale_to_a_nice_maximum() {
        let chart = Chart::bars(0, 600_000, 60_000, "dead letters", &[(0, 3), (60_000, 7)]);
        assert_eq!(chart.bars.len(), 2);
        assert_eq!(chart.y_ticks.last().map(|t| t.label.as_str()), Some("10"));
        let lines = Chart::lines(
            0,
            10,
            "depth",
            vec![("n".to_owned(), vec![(0, 1.0), (10, 4.0)])],
        );
        assert_eq!(lines.lines[0].points, "56,138 744,44");
    }
}
