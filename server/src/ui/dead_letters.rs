//! `GET /ui/dead-letters`: dead letters counted per recipient and reason, their rate per minute
//! and a searchable table of them.
//!
//! # Groups
//! The counts per recipient and reason are one `GROUP BY` over the range and the exact
//! filters (not the free-text search, which only looks at the newest rows); the biggest
//! [`GROUPS`] are shown.
//!
//! # Search
//! Exact recipient and message-type filters go to the database (indexed). The free-text
//! search looks through the newest dead letters of the range that pass those filters, at
//! most [`SEARCH_ROWS`], so a search costs the same however much history is stored.

use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;
use troupe_web::chart::Chart;
use troupe_web::format::{TimeText, count, href};
use troupe_web::pages::{DeadLetterGroupView, DeadLetterView, DeadLettersPage, Section};

use super::page::{self, Context, UiError};
use super::window::DEFAULT_RANGE_MS;
use crate::state::AppState;
use crate::store::{DeadLetterFilter, DeadLetterRow};

/// Rows shown.
const ROWS: usize = 200;
/// Recipient-and-reason groups shown.
const GROUPS: i64 = 20;
/// Rows a free-text search looks through.
const SEARCH_ROWS: i64 = 2_000;
/// Bars of the rate chart at most.
const BARS: i64 = 120;

#[derive(Debug, Default, Deserialize)]
struct DeadLettersQuery {
    cluster: Option<String>,
    q: Option<String>,
    recipient: Option<String>,
    message_type: Option<String>,
    range: Option<String>,
}

/// Whether `row` contains `needle` (lower case) in any of its texts.
fn matches(row: &DeadLetterRow, needle: &str) -> bool {
    needle.is_empty()
        || [
            row.recipient.as_str(),
            row.message_type.as_str(),
            row.sender.as_deref().unwrap_or(""),
            row.reason.as_str(),
            row.node.as_str(),
        ]
        .iter()
        .any(|field| field.to_lowercase().contains(needle))
}

/// Per-minute counts summed into buckets of `bucket_ms` (a whole number of minutes).
fn rebucket(minutes: &[(i64, i64)], since_ms: i64, bucket_ms: i64) -> Vec<(i64, i64)> {
    let mut out: Vec<(i64, i64)> = Vec::new();
    for (minute, n) in minutes {
        let start = since_ms + (minute - since_ms).div_euclid(bucket_ms) * bucket_ms;
        match out.last_mut() {
            Some((last, total)) if *last == start => *total += n,
            _ => out.push((start, *n)),
        }
    }
    out
}

async fn build(state: &AppState, req: &HttpRequest) -> Result<DeadLettersPage, UiError> {
    let query: DeadLettersQuery = page::query(req)?;
    let ctx = Context::load(state, query.cluster.as_deref()).await?;
    let window = ctx
        .window(state, query.range.as_deref(), DEFAULT_RANGE_MS)
        .await?;
    let range = window.range();
    let range_ms = window.ms;
    let q = query.q.clone().unwrap_or_default();
    let recipient = query.recipient.clone().unwrap_or_default();
    let message_type = query.message_type.clone().unwrap_or_default();
    let until_ms = window.until_ms;
    // Whole minutes, so the chart's first bar is a full one.
    let since_ms = (until_ms - range_ms).div_euclid(60_000) * 60_000;
    let bucket_ms = ((range_ms / BARS).div_euclid(60_000) * 60_000).max(60_000);
    let cluster_name = ctx.cluster_name().to_owned();
    let mut page = DeadLettersPage {
        layout: ctx.layout(Section::DeadLetters, "Dead letters"),
        q: q.clone(),
        recipient: recipient.clone(),
        message_type: message_type.clone(),
        ranges: window.choices(),
        chart: Chart::bars(since_ms, until_ms, bucket_ms, "dead letters", &[]),
        total: "0".to_owned(),
        groups: Vec::new(),
        groups_truncated: false,
        rows: Vec::new(),
        searched: 0,
        search_limited: false,
        clear_href: href(Section::DeadLetters.path(), &[("cluster", &cluster_name)]),
    };
    let Some(cluster) = &ctx.cluster else {
        return Ok(page);
    };
    let non_empty = |s: &str| (!s.is_empty()).then(|| s.to_owned());
    let filter = DeadLetterFilter {
        recipient: non_empty(&recipient),
        message_type: non_empty(&message_type),
        since_ms: Some(since_ms),
        until_ms: Some(until_ms),
        before: None,
        limit: if q.is_empty() {
            ROWS as i64
        } else {
            SEARCH_ROWS
        },
    };
    let minutes: Vec<(i64, i64)> = state
        .store
        .dead_letter_counts(cluster.id, &filter)
        .await?
        .iter()
        .map(|m| (m.minute_ms, m.count))
        .collect();
    page.total = count(minutes.iter().map(|(_, n)| n).sum());
    page.chart = Chart::bars(
        since_ms,
        until_ms,
        bucket_ms,
        "dead letters",
        &rebucket(&minutes, since_ms, bucket_ms),
    );
    let link = |name: &str, value: &str| {
        href(
            Section::DeadLetters.path(),
            &[("cluster", &cluster_name), ("range", &range), (name, value)],
        )
    };
    // One more than shown tells whether there are more.
    let groups_filter = DeadLetterFilter {
        limit: GROUPS + 1,
        ..filter.clone()
    };
    let groups = state
        .store
        .dead_letter_groups(cluster.id, &groups_filter)
        .await?;
    page.groups_truncated = groups.len() as i64 > GROUPS;
    page.groups = groups
        .iter()
        .take(GROUPS as usize)
        .map(|g| DeadLetterGroupView {
            recipient_href: link("recipient", &g.recipient),
            recipient: g.recipient.clone(),
            reason: g.reason.clone(),
            count: count(g.count),
            last: TimeText::at(g.last_ms),
        })
        .collect();
    let rows = state.store.dead_letters(cluster.id, &filter).await?;
    page.searched = rows.len();
    page.search_limited = rows.len() as i64 == filter.limit && !q.is_empty();
    let needle = q.to_lowercase();
    page.rows = rows
        .iter()
        .filter(|r| matches(r, &needle))
        .take(ROWS)
        .map(|r| DeadLetterView {
            at: TimeText::at(r.at_ms),
            recipient_href: link("recipient", &r.recipient),
            recipient: r.recipient.clone(),
            message_type_href: link("message_type", &r.message_type),
            message_type: r.message_type.clone(),
            sender: r.sender.clone().unwrap_or_default(),
            reason: r.reason.clone(),
            node_href: ctx.node_href(&r.node),
            node: r.node.clone(),
        })
        .collect();
    Ok(page)
}

/// `GET /ui/dead-letters`.
pub(crate) async fn page(state: web::Data<AppState>, req: HttpRequest) -> HttpResponse {
    page::respond(build(&state, &req).await)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minutes_are_summed_into_wider_buckets() {
        let minutes = [(0, 1), (60_000, 2), (180_000, 4)];
        assert_eq!(rebucket(&minutes, 0, 120_000), [(0, 3), (120_000, 4)]);
    }

    #[test]
    fn search_looks_at_every_text_case_insensitively() {
        let row = DeadLetterRow {
            id: 1,
            at_ms: 0,
            recipient: "/user/orders".to_owned(),
            sender: None,
            message_type: "OrderPlaced".to_owned(),
            reason: "recipient stopped".to_owned(),
            node: "10.0.0.1:2552".to_owned(),
        };
        assert!(matches(&row, "orderplaced"));
        assert!(matches(&row, "stopped"));
        assert!(matches(&row, "10.0.0.1"));
        assert!(!matches(&row, "payment"));
    }
}
