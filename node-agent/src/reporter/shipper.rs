//! Ships batches to the control plane over HTTP or HTTPS, retrying with backoff while it is
//! away. Each request is an HTTP client span carrying its W3C `traceparent`
//! (`crate::telemetry`).
//!
//! # TLS
//! An `https://` URL is verified against the bundled public roots, or, with a CA file
//! ([`client()`], `--control-plane-ca`), against that CA only: a server whose certificate
//! another CA signed is refused (no report is sent).

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

/// Why a shipper could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ShipperError {
    /// The CA file could not be read.
    #[error("--control-plane-ca {path}: {source}")]
    ReadCa {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The CA file holds no PEM certificate.
    #[error("--control-plane-ca {0}: no PEM certificate in the file")]
    NoCertificate(std::path::PathBuf),
    /// The CA file holds no usable PEM certificate, or the client could not be built.
    #[error("--control-plane-ca {path}: {source}")]
    Client {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        source: reqwest::Error,
    },
}

/// The HTTP client reports go through: verifying HTTPS against the bundled public roots, or,
/// with `ca`, against the certificate authorities in that PEM file only (and then HTTPS only).
pub fn client(ca: Option<&std::path::Path>) -> Result<reqwest::Client, ShipperError> {
    let builder = reqwest::Client::builder().timeout(Duration::from_secs(10));
    let Some(ca) = ca else {
        return builder.build().map_err(|source| ShipperError::Client {
            path: std::path::PathBuf::new(),
            source,
        });
    };
    let pem = std::fs::read(ca).map_err(|source| ShipperError::ReadCa {
        path: ca.to_owned(),
        source,
    })?;
    let client_error = |source| ShipperError::Client {
        path: ca.to_owned(),
        source,
    };
    let roots = reqwest::Certificate::from_pem_bundle(&pem).map_err(client_error)?;
    if roots.is_empty() {
        return Err(ShipperError::NoCertificate(ca.to_owned()));
    }
    let mut builder = builder.tls_built_in_root_certs(false).https_only(true);
    for root in roots {
        builder = builder.add_root_certificate(root);
    }
    builder.build().map_err(client_error)
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
    /// Who this shipper reports as.
    #[must_use]
    pub fn identity(&self) -> &AgentIdentity {
        &self.identity
    }

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
        Self::with_client(client, base_url, token, identity)
    }

    /// A shipper posting through `client` (see [`client()`]).
    #[must_use]
    pub fn with_client(
        client: reqwest::Client,
        base_url: &str,
        token: &str,
        identity: AgentIdentity,
    ) -> Self {
        Self {
            client,
            url: format!("{}/api/v1/ingest", base_url.trim_end_matches('/')),
            token: token.to_owned(),
            identity,
        }
    }

    /// The wire batch of `pending`, sent at `sent_at_ms`, as this agent.
    #[must_use]
    pub fn batch(&self, pending: &Pending, sent_at_ms: i64) -> ReportBatch {
        ReportBatch {
            version: PROTOCOL_VERSION,
            identity: self.identity.clone(),
            sequence: pending.sequence,
            sent_at_ms,
            events: pending.events.clone(),
            depth_samples: pending.depth_ticks.clone(),
            dropped: pending.dropped,
        }
    }

    /// Post one batch; `Ok` once the server acknowledged it (stored now, or before).
    pub async fn ship(&self, pending: &Pending, sent_at_ms: i64) -> Result<IngestAck, ShipError> {
        self.post(&self.batch(pending, sent_at_ms)).await
    }

    /// Post `batch` as it is (a spooled one keeps the identity and sequence it was cut with,
    /// so the server stores it once however often it arrives).
    pub async fn post(&self, batch: &ReportBatch) -> Result<IngestAck, ShipError> {
        let pending_sequence = batch.sequence;
        let identity = &batch.identity;
        let span = telemetry::report_span(&self.url, identity, pending_sequence);
        let mut request = self
            .client
            .post(&self.url)
            .bearer_auth(&self.token)
            .json(batch);
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

impl ShipError {
    /// The whole story, each cause after the last (reqwest's own message only names the URL;
    /// the TLS verdict or the refused connection is in its sources).
    #[must_use]
    pub fn describe(&self) -> String {
        let mut text = self.to_string();
        let mut source = std::error::Error::source(self);
        while let Some(cause) = source {
            let cause_text = cause.to_string();
            if !text.contains(&cause_text) {
                text.push_str(": ");
                text.push_str(&cause_text);
            }
            source = cause.source();
        }
        text
    }

    /// What kind of failure this is, for deciding when it is worth a WARN: a new kind is, the
    /// same one again is not.
    #[must_use]
    pub fn kind(&self) -> FailureKind {
        match self {
            Self::Refused { status, .. } => FailureKind::Status(*status),
            Self::Unreachable(_) if self.describe().contains("certificate") => {
                FailureKind::Certificate
            }
            Self::Unreachable(error) => FailureKind::Unreachable(failure_kind(error)),
        }
    }
}

/// The kind of a failed delivery ([`ShipError::kind`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// The server's TLS certificate was not accepted (wrong `--control-plane-ca`, expired,
    /// another name).
    Certificate,
    /// No answer (`connect`, `timeout`, …).
    Unreachable(&'static str),
    /// An HTTP status other than success and bad input.
    Status(u16),
}

/// When failed deliveries are logged: the first failure of a kind at WARN (with the whole
/// cause), repeats at DEBUG, and one INFO when reports get through again; so a control plane
/// that is away, or a certificate that is not trusted, is said once, not per retry.
#[derive(Debug, Default)]
pub struct FailureLog {
    failing: Option<FailureKind>,
    failed_attempts: u64,
}

/// What [`FailureLog`] decided for one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Log at WARN: a failure of a new kind.
    Warn,
    /// Log at DEBUG: the same failure again.
    Repeat,
    /// Log at INFO: delivered after this many failed attempts.
    Recovered(u64),
    /// Nothing to say: delivered, and nothing failed before.
    Quiet,
}

impl FailureLog {
    /// An attempt failed with `kind`.
    pub fn failed(&mut self, kind: FailureKind) -> Verdict {
        self.failed_attempts += 1;
        if self.failing == Some(kind) {
            Verdict::Repeat
        } else {
            self.failing = Some(kind);
            Verdict::Warn
        }
    }

    /// An attempt got an answer (accepted or refused as bad input).
    pub fn answered(&mut self) -> Verdict {
        let attempts = std::mem::take(&mut self.failed_attempts);
        match self.failing.take() {
            Some(_) => Verdict::Recovered(attempts),
            None => Verdict::Quiet,
        }
    }

    /// Log a failed attempt of `what` (a report batch, a spooled one) as decided.
    pub fn log_failure(&mut self, what: &str, error: &ShipError, retry_in: Option<Duration>) {
        let kind = error.kind();
        let description = error.describe();
        match self.failed(kind) {
            Verdict::Warn => {
                let hint = match kind {
                    FailureKind::Certificate => {
                        "the control plane's TLS certificate is not trusted: \
                         --control-plane-ca (TROUPE_CONTROL_PLANE_CA) must name the CA that \
                         signed it (without the flag only the bundled public roots are trusted); \
                         nothing is sent until it verifies"
                    }
                    FailureKind::Unreachable(_) => {
                        "the control plane does not answer; reports are kept and retried"
                    }
                    FailureKind::Status(_) => {
                        "the control plane did not accept the report; it is kept and retried"
                    }
                };
                tracing::warn!(
                    error = %description,
                    retry_in = ?retry_in,
                    hint,
                    "{what} not delivered; logged once until it is, retries at DEBUG"
                );
            }
            _ => {
                tracing::debug!(error = %description, retry_in = ?retry_in, "{what} not delivered; will retry")
            }
        }
    }

    /// Log an answered attempt as decided.
    pub fn log_answered(&mut self) {
        if let Verdict::Recovered(attempts) = self.answered() {
            tracing::info!(
                failed_attempts = attempts,
                "reports reach the control plane again"
            );
        }
    }
}

#[cfg(test)]
mod failure_log_tests {
    use super::*;

    #[test]
    fn a_failure_is_warned_once_per_kind_and_the_recovery_once() {
        let mut log = FailureLog::default();
        assert_eq!(log.answered(), Verdict::Quiet);
        assert_eq!(log.failed(FailureKind::Certificate), Verdict::Warn);
        assert_eq!(log.failed(FailureKind::Certificate), Verdict::Repeat);
        assert_eq!(log.failed(FailureKind::Certificate), Verdict::Repeat);
        // Another kind is news.
        assert_eq!(
            log.failed(FailureKind::Unreachable("connect")),
            Verdict::Warn
        );
        assert_eq!(
            log.failed(FailureKind::Unreachable("connect")),
            Verdict::Repeat
        );
        assert_eq!(log.answered(), Verdict::Recovered(5));
        assert_eq!(log.answered(), Verdict::Quiet);
        // After a recovery the same kind is news again.
        assert_eq!(log.failed(FailureKind::Certificate), Verdict::Warn);
    }

    #[test]
    fn a_refusal_keeps_its_status_as_its_kind() {
        let error = ShipError::Refused {
            status: 503,
            body: "busy".into(),
        };
        assert_eq!(error.kind(), FailureKind::Status(503));
        assert_eq!(
            error.describe(),
            "control plane refused the batch: HTTP 503: busy"
        );
    }
}
