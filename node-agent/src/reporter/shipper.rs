//! Ships batches to the control plane over HTTP, retrying with backoff while it is away. Each
//! request is an HTTP client span carrying its W3C `traceparent` (`crate::telemetry`).

use std::time::Duration;

use troupe_protocol::{AgentIdentity, IngestAck, PROTOCOL_VERSION, ReportBatch};

use tracing::Instrument;
use troupe_telemetry::otlp::trace_headers;

use super::buffer::Pending;
use crate::telemetry;

/// Why a batch was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum ShipError {
    /// The server could not be reached or did not answer in time.
    #[error("control plane unreachable: {0}")]
    Unreachable(#[from] reqwest::Error),
    /// The server refused the batch.
    #[error("control plane refused the batch: HTTP {status}: {body}")]
    Refused {
        /// The HTTP status.
        status: u16,
        /// What it said.
        body: String,
    },
}

impl ShipError {
    /// Whether the server refused the batch as bad input (400, 413, 422): sending it again
    /// unchanged would be refused again.
    #[must_use]
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            Self::Refused {
                status: 400 | 413 | 422,
                ..
            }
        )
    }
}

/// An HTTP client for the ingest endpoint.
#[derive(Debug, Clone)]
pub struct Shipper {
    client: reqwest::Client,
    url: String,
    token: String,
    identity: AgentIdentity,
}

impl Shipper {
    /// A shipper posting to `<base>/api/v1/ingest` with `token`.
    ///
    /// # Panics
    /// When the HTTP client cannot be built (no TLS roots).
    #[must_use]
    pub fn new(base_url: &str, token: &str, identity: AgentIdentity) -> Self {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .expect("HTTP client");
        Self {
            client,
            url: format!("{}/api/v1/ingest", base_url.trim_end_matches('/')),
            token: token.to_owned(),
            identity,
        }
    }

    /// Post one batch; `Ok` once the server acknowledged it (stored now, or before).
    pub async fn ship(&self, pending: &Pending, sent_at_ms: i64) -> Result<IngestAck, ShipError> {
        let batch = ReportBatch {
            version: PROTOCOL_VERSION,
            identity: self.identity.clone(),
            sequence: pending.sequence,
            sent_at_ms,
            events: pending.events.clone(),
            depth_samples: pending.depth_ticks.clone(),
            dropped: pending.dropped,
        };
        let span = telemetry::report_span(&self.url, &self.identity, pending.sequence);
        let mut request = self
            .client
            .post(&self.url)
            .bearer_auth(&self.token)
            .json(&batch);
        for (name, value) in trace_headers(&span) {
            request = request.header(name, value);
        }
        let answer = async {
            let response = request.send().await?;
            let status = response.status();
            telemetry::record_answer(&span, Some(status.as_u16()), None);
            if status.is_success() {
                Ok(response.json::<IngestAck>().await?)
            } else {
                let body = response.text().await.unwrap_or_default();
                Err(ShipError::Refused {
                    status: status.as_u16(),
                    body,
                })
            }
        }
        .instrument(span.clone())
        .await;
        if let Err(ShipError::Unreachable(error)) = &answer {
            telemetry::record_answer(&span, None, Some(failure_kind(error)));
        }
        answer
    }
}

/// The `error.type` of a request that got no usable answer.
fn failure_kind(error: &reqwest::Error) -> &'static str {
    if error.is_timeout() {
        "timeout"
    } else if error.is_connect() {
        "connect"
    } else if error.is_decode() {
        "decode"
    } else {
        "request"
    }
}
