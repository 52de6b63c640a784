//! `POST /api/v1/ingest`: agents' report batches.
//!
//! # Refusals
//! The token is checked before the body is read (401). A body over the limit is refused as
//! soon as its declared or read length passes it (413). A body that is not a valid
//! [`ReportBatch`] gets 400 naming what was wrong, and so does an identifier longer than its
//! limit (naming its JSON path, its length and the limit); over-long free text (message types,
//! reasons) is shortened and marked instead (see [`troupe_protocol::limits`]). None of the
//! refusals write anything.
//!
//! # Acknowledgment
//! 200 means the batch is committed (or was before: `duplicate: true`). Agents retry anything
//! else with the same sequence.

use crate::json::JsonBody;
use std::time::Instant;

use actix_web::http::header::CONTENT_LENGTH;
use actix_web::{HttpRequest, HttpResponse, web};
use futures_util::StreamExt;
use troupe_protocol::{EventBody, IngestAck, PROTOCOL_VERSION, ReportBatch};

use crate::error::{ApiError, ErrorBody};
use crate::metrics::{Item, Outcome};
use crate::state::AppState;
use crate::store::StoreError;
use crate::time::now_ms;

/// Bodies larger than this are parsed off the HTTP worker's thread.
const PARSE_INLINE_BYTES: usize = 256 * 1024;

/// Stores a report batch from an agent.
#[utoipa::path(
    post,
    path = "/api/v1/ingest", operation_id = "ingest",
    tag = "ingest",
    request_body(content = ReportBatch, description = "A report batch (the agent wire format, protocol version 1; see docs/control-plane.md). Strings must not contain NUL (`\\u0000`).", content_type = "application/json"),
    responses(
        (status = 200, description = "Stored, or stored before (`duplicate`)", body = IngestAck),
        (status = 400, description = "Malformed batch (not JSON, an unknown event kind, another protocol version, an empty `identity.cluster` or `identity.node`, a `~` in `identity.cluster`, an `identity.cluster_identity` that is not 64 lowercase hex digits, a sequence out of range, a NUL in a string); nothing stored", body = ErrorBody),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 403, description = "The token is scoped to another cluster (--cluster-ingest-token) than `identity.cluster`; the message names both; nothing stored", body = ErrorBody),
        (status = 409, description = "The batch's cluster key (name and identity fingerprint) belongs to a stored cluster of another identity; nothing stored, nothing merged", body = ErrorBody),
        (status = 413, description = "Body larger than --max-body-bytes", body = ErrorBody),
        (status = 503, description = "Store unavailable; retry", body = ErrorBody),
    ),
    security(("ingest" = []))
)]
pub async fn ingest(
    state: web::Data<AppState>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let started = Instant::now();
    let result = receive(&state, &req, payload, started).await;
    if let Err(error) = &result {
        let outcome = match error {
            ApiError::Store(_) => Outcome::Failed,
            _ => Outcome::Rejected,
        };
        state
            .metrics
            .batch(outcome, started.elapsed().as_secs_f64());
        tracing::debug!(%error, "ingest refused");
    }
    result
}

async fn receive(
    state: &AppState,
    req: &HttpRequest,
    payload: web::Payload,
    started: Instant,
) -> Result<HttpResponse, ApiError> {
    let scope = state.tokens.require_ingest(req)?;
    let body = read_limited(req, payload, state.config.max_body_bytes).await?;
    // A big body is parsed on the blocking pool: parsing megabytes on the worker's own thread
    // would hold up every other request that worker serves (small batches included).
    let parsed = if body.len() > PARSE_INLINE_BYTES {
        let body = body.freeze();
        web::block(move || parse(&body))
            .await
            .map_err(|e| ApiError::Unavailable(format!("parsing the batch failed: {e}")))??
    } else {
        parse(&body)?
    };
    // A cluster-scoped token writes its own cluster's history only.
    scope.admit(&parsed.identity.cluster)?;
    let received_ms = now_ms();
    // What is stored, streamed and exported: times too far ahead of ours clamped.
    let batch = state.store.clamp_times(&parsed, received_ms);
    let store_started = Instant::now();
    let outcome = state
        .store
        .ingest(&batch, received_ms)
        .await
        .map_err(|error| match error {
            // Not a store failure: the batch names a cluster key that is another cluster's.
            StoreError::ClusterKeyTaken(_) => ApiError::Conflict(error.to_string()),
            error => ApiError::Store(error),
        })?;
    state
        .metrics
        .store_write(store_started.elapsed().as_secs_f64());
    let id = &batch.identity;
    let answered_ms = now_ms();
    state.metrics.agent_report(
        &id.cluster_key(),
        &id.node,
        answered_ms.saturating_sub(batch.sent_at_ms).max(0) as f64 / 1000.0,
        batch.sent_at_ms.saturating_sub(received_ms) as f64 / 1000.0,
        answered_ms,
    );
    if outcome.duplicate {
        state
            .metrics
            .batch(Outcome::Duplicate, started.elapsed().as_secs_f64());
    } else {
        let dead_letters = batch
            .events
            .iter()
            .filter(|e| matches!(e.body, EventBody::DeadLetter(_)))
            .count() as u64;
        state
            .metrics
            .items(Item::Event, batch.events.len() as u64 - dead_letters);
        state.metrics.items(Item::DeadLetter, dead_letters);
        state
            .metrics
            .items(Item::DepthSample, outcome.stored_depth_samples);
        state
            .metrics
            .batch(Outcome::Stored, started.elapsed().as_secs_f64());
        state.member_gauge.touch(&id.cluster_key());
        state.live.publish_batch(&batch);
        if let Some(export) = &state.export {
            export.export_batch(&batch);
        }
    }
    Ok(HttpResponse::Ok().json_body(IngestAck {
        sequence: batch.sequence,
        duplicate: outcome.duplicate,
        stored_events: outcome.stored_events,
        operations: outcome.operations,
    }))
}

/// Reads the body, refusing it as soon as it is known to exceed `limit`.
async fn read_limited(
    req: &HttpRequest,
    mut payload: web::Payload,
    limit: usize,
) -> Result<web::BytesMut, ApiError> {
    let declared = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if let Some(size) = declared
        && size > limit
    {
        return Err(ApiError::PayloadTooLarge { size, limit });
    }
    let mut body = web::BytesMut::with_capacity(declared.unwrap_or(8 * 1024).min(limit));
    while let Some(chunk) = payload.next().await {
        let chunk =
            chunk.map_err(|e| ApiError::BadRequest(format!("reading the body failed: {e}")))?;
        if body.len() + chunk.len() > limit {
            return Err(ApiError::PayloadTooLarge {
                size: body.len() + chunk.len(),
                limit,
            });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Whether JSON text holds an escaped NUL (`\u0000`, not the text `\\u0000`).
fn escapes_nul(json: &[u8]) -> bool {
    let mut backslashes = 0usize;
    for (i, &byte) in json.iter().enumerate() {
        if byte == b'\\' {
            backslashes += 1;
            continue;
        }
        if byte == b'u' && backslashes % 2 == 1 && json[i + 1..].starts_with(b"0000") {
            return true;
        }
        backslashes = 0;
    }
    false
}

/// The JSON path (`events[3].member.address`, as the length check names fields) of the first
/// string of `value` that holds a NUL.
fn nul_path(value: &serde_json::Value, path: String) -> Option<String> {
    use serde_json::Value;
    match value {
        Value::String(text) => text.contains('\0').then_some(path),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, item)| nul_path(item, format!("{path}[{i}]"))),
        Value::Object(fields) => fields.iter().find_map(|(name, field)| {
            let at = if path.is_empty() {
                name.clone()
            } else {
                format!("{path}.{name}")
            };
            nul_path(field, at)
        }),
        _ => None,
    }
}

/// Parses and validates a batch.
pub(crate) fn parse(body: &[u8]) -> Result<ReportBatch, ApiError> {
    if body.is_empty() {
        return Err(ApiError::BadRequest(
            "empty body; expected a JSON report batch".to_owned(),
        ));
    }
    let mut batch: ReportBatch = serde_json::from_slice(body)
        .map_err(|e| ApiError::BadRequest(format!("malformed report batch: {e}")))?;
    if batch.version != PROTOCOL_VERSION {
        return Err(ApiError::BadRequest(format!(
            "unsupported protocol version {}; this server speaks version {PROTOCOL_VERSION}",
            batch.version
        )));
    }
    let id = &batch.identity;
    if id.cluster.is_empty() || id.node.is_empty() {
        return Err(ApiError::BadRequest(
            "identity.cluster and identity.node must not be empty".to_owned(),
        ));
    }
    if id.cluster.contains(troupe_protocol::CLUSTER_KEY_SEPARATOR) {
        return Err(ApiError::BadRequest(format!(
            "identity.cluster must not contain `{}` (it separates a cluster's name from its identity's fingerprint in cluster keys), got `{}`",
            troupe_protocol::CLUSTER_KEY_SEPARATOR,
            id.cluster
        )));
    }
    if let Some(identity) = &id.cluster_identity
        && !troupe_protocol::valid_cluster_identity(identity)
    {
        return Err(ApiError::BadRequest(format!(
            "identity.cluster_identity must be 64 lowercase hex digits (the keyed hash of the cluster secret), got {} bytes",
            identity.len()
        )));
    }
    if batch.sequence == 0 || batch.sequence > i64::MAX as u64 {
        return Err(ApiError::BadRequest(format!(
            "sequence must be between 1 and {}, got {}",
            i64::MAX,
            batch.sequence
        )));
    }
    // PostgreSQL text cannot hold NUL; refusing it here keeps both stores alike. What is
    // stored is the batch as parsed (fields this server does not know are not kept), so that
    // is what is checked.
    if serde_json::to_vec(&batch).is_ok_and(|json| escapes_nul(&json)) {
        let field = serde_json::to_value(&batch)
            .ok()
            .and_then(|value| nul_path(&value, String::new()))
            .unwrap_or_else(|| "a string".to_owned());
        return Err(ApiError::BadRequest(format!(
            "{field} contains NUL (\\u0000); strings must not contain NUL"
        )));
    }
    let truncated = troupe_protocol::limits::enforce(&mut batch)
        .map_err(|too_long| ApiError::BadRequest(format!("field too long: {too_long}")))?;
    if truncated > 0 {
        tracing::debug!(
            cluster = %batch.identity.cluster,
            node = %batch.identity.node,
            truncated,
            "free-text fields over their limit were shortened"
        );
    }
    Ok(batch)
}

#[cfg(test)]
mod tests {
    use super::{escapes_nul, nul_path};

    #[test]
    fn an_escaped_nul_is_found_and_the_text_backslash_u0000_is_not_one() {
        assert!(escapes_nul(br#"{"a":"x\u0000"}"#));
        assert!(escapes_nul(br#"{"a":"\\\u0000"}"#));
        assert!(!escapes_nul(br#"{"a":"\\u0000"}"#));
        assert!(!escapes_nul(br#"{"a":"u0000"}"#));
    }

    #[test]
    fn the_field_holding_a_nul_is_named_by_its_json_path() {
        let value = serde_json::json!({
            "identity": {"cluster": "c", "node": "n"},
            "events": [{"kind": "x"}, {"member": {"roles": ["ok", "a\u{0}b"]}}],
        });
        assert_eq!(
            nul_path(&value, String::new()).as_deref(),
            Some("events[1].member.roles[1]")
        );
        assert_eq!(
            nul_path(&serde_json::json!({"a": "b"}), String::new()),
            None
        );
    }
}
