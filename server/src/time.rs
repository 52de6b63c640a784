//! Time on the API: the server's clock, epoch milliseconds as RFC 3339, and time parameters.
//!
//! Stored times are epoch milliseconds; answers carry RFC 3339 in UTC with milliseconds
//! (`2026-11-30T03:00:00.000Z`); time filters take either form.

use chrono::{DateTime, SecondsFormat, Utc};

use crate::error::ApiError;

/// Epoch milliseconds as a UTC date-time.
#[must_use]
pub fn datetime(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).unwrap_or_default()
}

/// Epoch milliseconds as RFC 3339 with milliseconds (`2026-11-30T03:00:00.000Z`).
#[must_use]
pub fn rfc3339(ms: i64) -> String {
    datetime(ms).to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// The current time in epoch milliseconds.
#[must_use]
pub fn now_ms() -> i64 {
    Utc::now().timestamp_millis()
}

/// Most digits of epoch milliseconds in a parameter (31 million years either way).
pub const EPOCH_MS_DIGITS: usize = 18;

/// `-?` and 1..=[`EPOCH_MS_DIGITS`] decimal digits, as a number; `None` for any other text.
pub(crate) fn signed_decimal(text: &str) -> Option<i64> {
    let digits = text.strip_prefix('-').unwrap_or(text);
    if digits.is_empty()
        || digits.len() > EPOCH_MS_DIGITS
        || !digits.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    text.parse().ok()
}

/// Parses a time parameter: RFC 3339 (`2026-11-30T03:00:00Z`) or epoch milliseconds (`-?`
/// and at most [`EPOCH_MS_DIGITS`] digits).
pub(crate) fn parse_time(name: &str, value: Option<&str>) -> Result<Option<i64>, ApiError> {
    let Some(value) = value else {
        return Ok(None);
    };
    if let Some(ms) = signed_decimal(value) {
        return Ok(Some(ms));
    }
    DateTime::parse_from_rfc3339(value)
        .map(|t| Some(t.timestamp_millis()))
        .map_err(|e| {
            ApiError::BadRequest(format!(
                "`{name}` must be an RFC 3339 time (2026-11-30T03:00:00Z) or epoch milliseconds, got `{value}`: {e}"
            ))
        })
}
