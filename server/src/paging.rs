//! Paging of the history lists: page sizes and the opaque cursor that continues a page.
//!
//! # Cursors
//! Lists are ordered newest first by `(at_ms, id)`; a page's `next_cursor` names the position
//! of its last row, and the next page holds the rows strictly before it. The text is opaque to
//! clients (`<at_ms>.<id>` today).

use crate::error::ApiError;
use crate::time::signed_decimal;

/// Largest page any list endpoint returns.
pub const MAX_PAGE: i64 = 1000;
/// Page size when none is asked for.
pub const DEFAULT_PAGE: i64 = 100;

/// A page size within `1..=MAX_PAGE`.
pub(crate) fn page_size(limit: Option<i64>) -> Result<i64, ApiError> {
    match limit {
        None => Ok(DEFAULT_PAGE),
        Some(n) if (1..=MAX_PAGE).contains(&n) => Ok(n),
        Some(n) => Err(ApiError::BadRequest(format!(
            "`limit` must be between 1 and {MAX_PAGE}, got {n}"
        ))),
    }
}

/// The cursor that continues after a row at `(at_ms, id)`: opaque to clients.
#[must_use]
pub fn cursor_after(at_ms: i64, id: i64) -> String {
    format!("{at_ms}.{id}")
}

/// Parses a paging cursor made by [`cursor_after`].
pub(crate) fn parse_cursor(cursor: Option<&str>) -> Result<Option<(i64, i64)>, ApiError> {
    cursor
        .map(|c| {
            c.split_once('.')
                .and_then(|(at, id)| Some((signed_decimal(at)?, signed_decimal(id)?)))
                .ok_or_else(|| {
                    ApiError::BadRequest(format!(
                        "`cursor` must be the `next_cursor` of a previous page, got `{c}`"
                    ))
                })
        })
        .transpose()
}

/// The `next_cursor` of a page of `limit` rows whose last row is at `last`: none when the page
/// is not full (it was the last one).
pub(crate) fn next_cursor(rows: usize, limit: i64, last: Option<(i64, i64)>) -> Option<String> {
    (rows as i64 == limit)
        .then(|| last.map(|(at_ms, id)| cursor_after(at_ms, id)))
        .flatten()
}
