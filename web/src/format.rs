//! How times, ages, counts and links read on every page.
//!
//! Every time is UTC and says so: `2026-11-30 05:57:52 UTC`.

use chrono::{DateTime, Utc};

/// A point in time as a page shows it: readable text plus the machine-readable form for
/// `<time datetime=…>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimeText {
    /// RFC 3339 with milliseconds (`2026-11-30T05:57:52.123Z`).
    pub iso: String,
    /// `2026-11-30 05:57:52 UTC`.
    pub text: String,
}

impl TimeText {
    /// The time `ms` (epoch milliseconds).
    #[must_use]
    pub fn at(ms: i64) -> Self {
        let t = datetime(ms);
        Self {
            iso: t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            text: t.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
        }
    }
}

fn datetime(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).unwrap_or_default()
}

/// `HH:MM` (UTC) of `ms`, for chart axes (the axis title says UTC).
#[must_use]
pub fn clock(ms: i64) -> String {
    datetime(ms).format("%H:%M").to_string()
}

/// `HH:MM:SS` (UTC) of `ms`, for chart axes over short ranges.
#[must_use]
pub fn clock_seconds(ms: i64) -> String {
    datetime(ms).format("%H:%M:%S").to_string()
}

/// How long ago `then_ms` was at `now_ms`: `just now`, `42 s ago`, `3 min ago`, `2 h ago`,
/// `5 d ago`.
#[must_use]
pub fn age(now_ms: i64, then_ms: i64) -> String {
    let seconds = (now_ms - then_ms).max(0) / 1000;
    match seconds {
        0 => "just now".to_owned(),
        s if s < 120 => format!("{s} s ago"),
        s if s < 7200 => format!("{} min ago", s / 60),
        s if s < 172_800 => format!("{} h ago", s / 3600),
        s => format!("{} d ago", s / 86_400),
    }
}

/// A duration in milliseconds as `850 ms`, `2.4 s` or `3 min 5 s`.
#[must_use]
pub fn duration(ms: u64) -> String {
    match ms {
        ms if ms < 1000 => format!("{ms} ms"),
        ms if ms < 60_000 => format!("{:.1} s", ms as f64 / 1000.0),
        ms => format!("{} min {} s", ms / 60_000, (ms % 60_000) / 1000),
    }
}

/// A count with thousands separators: `12,345`.
#[must_use]
pub fn count(n: i64) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3 + 1);
    if n < 0 {
        out.push('-');
    }
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Percent-encodes `value` for a query string: everything but unreserved characters.
#[must_use]
pub fn encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                out.push(byte as char);
            }
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

/// A dashboard link: `page` (a fixed path such as `/ui/timeline`) with the given query
/// parameters, each percent-encoded; empty values are left out.
#[must_use]
pub fn href(page: &'static str, params: &[(&str, &str)]) -> String {
    let mut out = page.to_owned();
    let mut first = true;
    for (name, value) in params {
        if value.is_empty() {
            continue;
        }
        out.push(if first { '?' } else { '&' });
        first = false;
        out.push_str(name);
        out.push('=');
        out.push_str(&encode(value));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_say_utc() {
        let t = TimeText::at(1_796_018_272_123);
        assert_eq!(t.text, "2026-11-30 05:57:52 UTC");
        assert_eq!(t.iso, "2026-11-30T05:57:52.123Z");
    }

    #[test]
    fn links_encode_every_value_and_skip_empty_ones() {
        assert_eq!(
            href(
                "/ui/node",
                &[("cluster", "a b"), ("node", "javascript:x<\"'>"), ("x", "")]
            ),
            "/ui/node?cluster=a%20b&node=javascript%3Ax%3C%22%27%3E"
        );
    }

    #[test]
    fn ages_and_counts_read_naturally() {
        assert_eq!(age(10_000, 10_000), "just now");
        assert_eq!(age(70_000, 10_000), "60 s ago");
        assert_eq!(age(1_000_000, 0), "16 min ago");
        assert_eq!(count(1_234_567), "1,234,567");
        assert_eq!(count(-12), "-12");
        assert_eq!(duration(2400), "2.4 s");
    }
}
