//! Leases and the directory through the Troupe control plane's coordination API
//! (`/api/v1/coordination/…`, see `docs/control-plane.md`), for agents that should not hold
//! etcd or database credentials: the server holds those and serves the same contracts.
//!
//! The lease handle renews through the server every renew interval with the shared renewal
//! state machine, so a client cut off from the server reports the loss `ttl - renew_interval`
//! after its last confirmed renewal was sent, before the server lets the grant go (one TTL
//! after it received that renewal). Watches long-poll and resume from the last revision seen.
//!
//! An error answer maps back by its body's `code` to the variant the server's backend
//! returned, with its message ([`LeaseError::from_code`], [`DirectoryError::from_code`]); a
//! code this client does not know, or none, falls back on the status: 5xx, 429 and 408 are
//! `Unavailable` (retry), 409 [`LeaseError::NotOwner`], anything else `Provider` naming the
//! status, code and message.
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use troupe_lease::lease::{LeaseProvider, LeaseSettings};
//! use troupe_coordination::http::HttpCoordination;
//!
//! let control_plane = HttpCoordination::new("http://control-plane:8080", "the-token")?;
//! let settings = LeaseSettings::new(Duration::from_secs(15), Duration::from_secs(3))?;
//! let lease = control_plane.leases().lease("job-scheduler", "node-a:7355", &settings)?;
//! # let _ = lease; Ok(()) }
//! ```

use std::sync::Arc;
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use troupe_lease::directory::{
    self, Claim, ClaimOutcome, Directory, DirectoryChange, DirectoryError, DirectoryEvent,
    DirectoryFuture, DirectorySnapshot, DirectoryWatch, Revision,
};
use troupe_lease::lease::{FencingToken, LeaseError, LeaseSettings};

use troupe_lease::lease::store::{GrantEnded, LeaseStore, RenewError};

/// Longest a request other than a watch poll may take.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one watch poll waits at the server for a change.
pub const WATCH_WAIT: Duration = Duration::from_secs(10);

/// The base URL could not be used.
#[derive(Debug, thiserror::Error)]
#[error("control plane client: {0}")]
pub struct HttpSetupError(String);

/// A connection to a control plane's coordination API.
#[derive(Clone)]
pub struct HttpCoordination {
    inner: Arc<Client>,
}

struct Client {
    http: reqwest::Client,
    /// `http://host:port/api/v1/coordination`.
    base: String,
    authorization: String,
}

impl std::fmt::Debug for HttpCoordination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpCoordination")
            .field("base", &self.inner.base)
            .finish_non_exhaustive()
    }
}

/// What went wrong with one request.
enum Failure {
    /// No answer (connect error, timeout, cut off).
    Unreachable(String),
    /// An error answer.
    Status(Refusal),
}

/// An error answer: its status, the body's `code` (absent from servers before codes, or
/// from something else in the way, such as a proxy) and message, and the oldest revision a
/// 410 names.
struct Refusal {
    status: StatusCode,
    code: Option<String>,
    message: String,
    oldest: Option<u64>,
}

impl Refusal {
    /// The status, the code when there is one, and the message.
    fn described(&self) -> String {
        match &self.code {
            Some(code) => format!("{} ({code}): {}", self.status, self.message),
            None => format!("{}: {}", self.status, self.message),
        }
    }
}

#[derive(Deserialize)]
struct ErrorBody {
    error: String,
    #[serde(default)]
    code: Option<String>,
}

impl Client {
    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<serde_json::Value>,
        timeout: Duration,
    ) -> Result<T, Failure> {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.base))
            .header(reqwest::header::AUTHORIZATION, &self.authorization)
            .query(query)
            .timeout(timeout);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request
            .send()
            .await
            .map_err(|e| Failure::Unreachable(format!("{}: {e}", self.base)))?;
        let status = response.status();
        if status.is_success() {
            return response
                .json()
                .await
                .map_err(|e| Failure::Unreachable(format!("reading the answer: {e}")));
        }
        let oldest = response
            .headers()
            .get(OLDEST_REVISION_HEADER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok());
        let text = response.text().await.unwrap_or_default();
        let (message, code) = match serde_json::from_str::<ErrorBody>(&text) {
            Ok(body) => (body.error, body.code),
            Err(_) => (text, None),
        };
        Err(Failure::Status(Refusal {
            status,
            code,
            message,
            oldest,
        }))
    }
}

/// The header a 410 watch answer carries: the oldest revision still available.
pub const OLDEST_REVISION_HEADER: &str = "x-troupe-oldest-revision";

/// `name` as one URL path segment.
fn segment(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for byte in name.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

impl HttpCoordination {
    /// A client of the control plane at `base_url` (`http://host:port`) sending `token`
    /// (the server's `--coordination-token`). An `https://` URL is verified against the
    /// bundled public roots.
    pub fn new(base_url: &str, token: &str) -> Result<Self, HttpSetupError> {
        Self::build(base_url, token, None)
    }

    /// Like [`HttpCoordination::new`], but over `https://` only, trusting only the certificate
    /// authorities in `ca_pem` (a PEM bundle: the agent's `--control-plane-ca` file), so a
    /// server whose certificate another CA signed is refused.
    pub fn with_ca(base_url: &str, token: &str, ca_pem: &[u8]) -> Result<Self, HttpSetupError> {
        Self::build(base_url, token, Some(ca_pem))
    }

    fn build(base_url: &str, token: &str, ca_pem: Option<&[u8]>) -> Result<Self, HttpSetupError> {
        let url = reqwest::Url::parse(base_url)
            .map_err(|e| HttpSetupError(format!("base URL {base_url:?}: {e}")))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(HttpSetupError(format!(
                "base URL {base_url:?}: only http:// and https:// are allowed"
            )));
        }
        let mut builder = reqwest::Client::builder().connect_timeout(Duration::from_secs(2));
        if let Some(pem) = ca_pem {
            if url.scheme() != "https" {
                return Err(HttpSetupError(format!(
                    "base URL {base_url:?}: a CA verifies an https:// control plane; give https://"
                )));
            }
            let roots = reqwest::Certificate::from_pem_bundle(pem)
                .map_err(|e| HttpSetupError(format!("CA: {e}")))?;
            if roots.is_empty() {
                return Err(HttpSetupError("CA: no PEM certificate in it".to_owned()));
            }
            builder = builder.tls_built_in_root_certs(false).https_only(true);
            for root in roots {
                builder = builder.add_root_certificate(root);
            }
        }
        let http = builder.build().map_err(|e| HttpSetupError(e.to_string()))?;
        Ok(Self {
            inner: Arc::new(Client {
                http,
                base: format!("{}/api/v1/coordination", base_url.trim_end_matches('/')),
                authorization: format!("Bearer {token}"),
            }),
        })
    }

    /// The lease provider.
    #[must_use]
    pub fn leases(&self) -> HttpLeases {
        HttpLeases {
            store: Arc::new(HttpLeaseStore {
                client: Arc::clone(&self.inner),
            }),
        }
    }

    /// The directory.
    #[must_use]
    pub fn directory(&self) -> HttpDirectory {
        HttpDirectory {
            client: Arc::clone(&self.inner),
        }
    }
}

/// Lease handles through the control plane.
#[derive(Clone)]
pub struct HttpLeases {
    store: Arc<HttpLeaseStore>,
}

impl std::fmt::Debug for HttpLeases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpLeases")
            .field("base", &self.store.client.base)
            .finish()
    }
}

/// What [`HttpLeases`] is called in the trait's terms.
pub type HttpLeaseProvider = HttpLeases;

troupe_lease::lease_handle!(
    /// One owner's handle to a lease through the control plane (made by
    /// [`HttpLeases::handle`]).
    HttpLease,
    HttpLeaseStore,
    provided by HttpLeases => store
);

pub(crate) struct HttpLeaseStore {
    client: Arc<Client>,
}

#[derive(Serialize)]
struct AcquireBody<'a> {
    owner: &'a str,
    #[serde(with = "troupe_protocol::wire::u64_string")]
    ttl_ms: u64,
    #[serde(with = "troupe_protocol::wire::u64_string")]
    renew_interval_ms: u64,
}

#[derive(Serialize)]
struct GrantBody<'a> {
    owner: &'a str,
    #[serde(with = "troupe_protocol::wire::u64_string")]
    token: u64,
}

#[derive(Deserialize)]
struct GrantAnswer {
    granted: bool,
    #[serde(default, with = "troupe_protocol::wire::option_u64_string")]
    token: Option<u64>,
}

#[derive(Deserialize)]
struct ReleasedAnswer {
    #[allow(dead_code)]
    released: bool,
}

/// The error a failed lease request stands for: by the answer's `code` the same variant the
/// server's backend returned (its message without the `lease "name": ` the variant adds
/// again); for no code or one this client does not know, by status: a 5xx, 429 or 408 is
/// [`LeaseError::Unavailable`] (retry), 409 [`LeaseError::NotOwner`], anything else
/// [`LeaseError::Provider`] naming status, code and message.
fn lease_failure(name: &str, failure: Failure) -> LeaseError {
    let refusal = match failure {
        Failure::Unreachable(reason) => {
            return LeaseError::Unavailable {
                lease: name.to_owned(),
                reason,
            };
        }
        Failure::Status(refusal) => refusal,
    };
    if let Some(code) = &refusal.code {
        let prefix = format!("lease {name:?}: ");
        let reason = refusal
            .message
            .strip_prefix(&prefix)
            .unwrap_or(&refusal.message)
            .to_owned();
        // A 5xx body says only a fixed sentence; keep the status with it.
        let reason = if refusal.status.is_server_error() {
            refusal.described()
        } else {
            reason
        };
        if let Some(error) = LeaseError::from_code(code, name, reason) {
            return error;
        }
    }
    let lease = name.to_owned();
    let reason = refusal.described();
    match refusal.status {
        status if retryable(status) => LeaseError::Unavailable { lease, reason },
        StatusCode::CONFLICT => LeaseError::NotOwner { lease, reason },
        _ => LeaseError::Provider { lease, reason },
    }
}

/// Whether an answer without a known code means "try again later".
fn retryable(status: StatusCode) -> bool {
    status.is_server_error()
        || status == StatusCode::TOO_MANY_REQUESTS
        || status == StatusCode::REQUEST_TIMEOUT
}

fn json<T: Serialize>(value: &T) -> Option<serde_json::Value> {
    serde_json::to_value(value).ok()
}

impl LeaseStore for HttpLeaseStore {
    type Grant = ();

    async fn try_acquire(
        &self,
        name: &str,
        owner: &str,
        settings: &LeaseSettings,
        _ended: GrantEnded,
    ) -> Result<Option<(FencingToken, ())>, LeaseError> {
        let body = AcquireBody {
            owner,
            ttl_ms: settings.ttl().as_millis() as u64,
            renew_interval_ms: settings.renew_interval().as_millis() as u64,
        };
        let answer: GrantAnswer = self
            .client
            .call(
                Method::POST,
                &format!("/leases/{}/acquire", segment(name)),
                &[],
                json(&body),
                REQUEST_TIMEOUT,
            )
            .await
            .map_err(|f| lease_failure(name, f))?;
        match (answer.granted, answer.token) {
            (true, Some(token)) => Ok(Some((FencingToken(token), ()))),
            (true, None) => Err(LeaseError::Malformed {
                lease: name.to_owned(),
                reason: "the server granted the lease without a fencing token".to_owned(),
            }),
            (false, _) => Ok(None),
        }
    }

    async fn renew(
        &self,
        name: &str,
        owner: &str,
        token: FencingToken,
        _grant: &(),
        settings: &LeaseSettings,
    ) -> Result<(), RenewError> {
        let body = GrantBody {
            owner,
            token: token.0,
        };
        let answer: Result<GrantAnswer, Failure> = self
            .client
            .call(
                Method::POST,
                &format!("/leases/{}/renew", segment(name)),
                &[],
                json(&body),
                settings.renew_interval().min(REQUEST_TIMEOUT),
            )
            .await;
        match answer {
            Ok(answer) if answer.granted && answer.token == Some(token.0) => Ok(()),
            Ok(_) => Err(RenewError::Gone(
                "the server answered the renewal with another grant".to_owned(),
            )),
            Err(failure) => match lease_failure(name, failure) {
                // The server no longer holds the grant for us: it is gone, not just late.
                error @ LeaseError::NotOwner { .. } => Err(RenewError::Gone(error.to_string())),
                error => Err(RenewError::Failed(error.to_string())),
            },
        }
    }

    async fn release(
        &self,
        name: &str,
        owner: &str,
        token: FencingToken,
        _grant: &(),
    ) -> Result<(), LeaseError> {
        let body = GrantBody {
            owner,
            token: token.0,
        };
        let _: ReleasedAnswer = self
            .client
            .call(
                Method::POST,
                &format!("/leases/{}/release", segment(name)),
                &[],
                json(&body),
                REQUEST_TIMEOUT,
            )
            .await
            .map_err(|f| lease_failure(name, f))?;
        Ok(())
    }
}

/// The directory through the control plane.
#[derive(Clone)]
pub struct HttpDirectory {
    client: Arc<Client>,
}

impl std::fmt::Debug for HttpDirectory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpDirectory")
            .field("base", &self.client.base)
            .finish()
    }
}

#[derive(Deserialize)]
struct ClaimAnswer {
    actor: String,
    host: String,
    #[serde(with = "troupe_protocol::wire::u64_string")]
    revision: u64,
}

impl From<ClaimAnswer> for Claim {
    fn from(c: ClaimAnswer) -> Self {
        Self {
            actor: c.actor,
            host: c.host,
            revision: Revision(c.revision),
        }
    }
}

#[derive(Deserialize)]
struct OutcomeAnswer {
    won: bool,
    claim: ClaimAnswer,
}

#[derive(Deserialize)]
struct LookupAnswer {
    claim: Option<ClaimAnswer>,
}

#[derive(Deserialize)]
struct EvictedAnswer {
    released: Vec<String>,
}

#[derive(Deserialize)]
struct SnapshotAnswer {
    claims: Vec<ClaimAnswer>,
    #[serde(with = "troupe_protocol::wire::u64_string")]
    revision: u64,
}

#[derive(Deserialize)]
struct EventAnswer {
    #[serde(with = "troupe_protocol::wire::u64_string")]
    revision: u64,
    kind: String,
    actor: String,
    host: String,
}

#[derive(Deserialize)]
struct WatchAnswer {
    events: Vec<EventAnswer>,
}

/// The error a failed directory request stands for: by the answer's `code` the same variant
/// the server's backend returned (a 410 [`DirectoryError::Compacted`] with the oldest
/// revision it names); for no code or one this client does not know, by status: 5xx, 429
/// or 408 [`DirectoryError::Unavailable`], anything else [`DirectoryError::Provider`].
fn directory_failure(failure: Failure, after: Revision) -> DirectoryError {
    let refusal = match failure {
        Failure::Unreachable(m) => return DirectoryError::Unavailable(m),
        Failure::Status(refusal) => refusal,
    };
    if refusal.status == StatusCode::GONE
        && let Some(oldest) = refusal.oldest
    {
        return DirectoryError::Compacted {
            requested: after,
            oldest: Revision(oldest),
        };
    }
    if let Some(code) = &refusal.code {
        let reason = if refusal.status.is_server_error() {
            refusal.described()
        } else {
            refusal
                .message
                .strip_prefix("directory: ")
                .unwrap_or(&refusal.message)
                .to_owned()
        };
        if let Some(error) = DirectoryError::from_code(code, reason) {
            return error;
        }
    }
    if retryable(refusal.status) {
        DirectoryError::Unavailable(refusal.described())
    } else {
        DirectoryError::Provider(refusal.described())
    }
}

fn event(answer: EventAnswer) -> Result<DirectoryEvent, DirectoryError> {
    let change = match answer.kind.as_str() {
        "claimed" => DirectoryChange::Claimed {
            actor: answer.actor,
            host: answer.host,
        },
        "released" => DirectoryChange::Released {
            actor: answer.actor,
            host: answer.host,
        },
        other => {
            return Err(DirectoryError::Malformed {
                key: answer.actor,
                reason: format!("event kind {other:?}; expected \"claimed\" or \"released\""),
            });
        }
    };
    Ok(DirectoryEvent {
        revision: Revision(answer.revision),
        change,
    })
}

impl HttpDirectory {
    async fn get<T: DeserializeOwned>(
        &self,
        method: Method,
        path: String,
        query: &[(&str, String)],
        body: Option<serde_json::Value>,
    ) -> Result<T, DirectoryError> {
        self.client
            .call(method, &path, query, body, REQUEST_TIMEOUT)
            .await
            .map_err(|f| directory_failure(f, Revision(0)))
    }
}

impl Directory for HttpDirectory {
    fn claim(&self, actor: &str, host: &str) -> DirectoryFuture<ClaimOutcome> {
        let this = self.clone();
        let (actor, host) = (actor.to_owned(), host.to_owned());
        Box::pin(async move {
            directory::validate_actor(&actor)?;
            directory::validate_host(&host)?;
            let answer: OutcomeAnswer = this
                .get(
                    Method::POST,
                    format!("/claims/{}", segment(&actor)),
                    &[],
                    Some(serde_json::json!({ "host": host })),
                )
                .await?;
            let claim = Claim::from(answer.claim);
            Ok(if answer.won {
                ClaimOutcome::Claimed(claim)
            } else {
                ClaimOutcome::Owned(claim)
            })
        })
    }

    fn lookup(&self, actor: &str) -> DirectoryFuture<Option<Claim>> {
        let this = self.clone();
        let actor = actor.to_owned();
        Box::pin(async move {
            directory::validate_actor(&actor)?;
            let answer: LookupAnswer = this
                .get(
                    Method::GET,
                    format!("/claims/{}", segment(&actor)),
                    &[],
                    None,
                )
                .await?;
            Ok(answer.claim.map(Claim::from))
        })
    }

    fn release(&self, actor: &str, host: &str) -> DirectoryFuture<bool> {
        let this = self.clone();
        let (actor, host) = (actor.to_owned(), host.to_owned());
        Box::pin(async move {
            directory::validate_actor(&actor)?;
            directory::validate_host(&host)?;
            let answer: ReleasedAnswer2 = this
                .get(
                    Method::DELETE,
                    format!("/claims/{}", segment(&actor)),
                    &[("host", host)],
                    None,
                )
                .await?;
            Ok(answer.released)
        })
    }

    fn evict_host(&self, host: &str) -> DirectoryFuture<Vec<String>> {
        let this = self.clone();
        let host = host.to_owned();
        Box::pin(async move {
            directory::validate_host(&host)?;
            let answer: EvictedAnswer = this
                .get(
                    Method::POST,
                    format!("/hosts/{}/evict", segment(&host)),
                    &[],
                    None,
                )
                .await?;
            Ok(answer.released)
        })
    }

    fn snapshot(&self) -> DirectoryFuture<DirectorySnapshot> {
        let this = self.clone();
        Box::pin(async move {
            let answer: SnapshotAnswer = this
                .get(Method::GET, "/directory".to_owned(), &[], None)
                .await?;
            Ok(DirectorySnapshot {
                claims: answer.claims.into_iter().map(Claim::from).collect(),
                revision: Revision(answer.revision),
            })
        })
    }

    fn watch(&self, after: Revision) -> DirectoryFuture<DirectoryWatch> {
        let client = Arc::clone(&self.client);
        Box::pin(async move {
            let (tx, rx) = mpsc::channel(256);
            let task = tokio::spawn(poll(client, after, tx));
            Ok(DirectoryWatch::new(rx, Some(task.abort_handle())))
        })
    }
}

#[derive(Deserialize)]
struct ReleasedAnswer2 {
    released: bool,
}

/// Long-polls from `after` on, feeding `tx`, until an error (sent, then the watch ends) or
/// the watch is dropped.
async fn poll(
    client: Arc<Client>,
    mut after: Revision,
    tx: mpsc::Sender<Result<DirectoryEvent, DirectoryError>>,
) {
    loop {
        let answer: Result<WatchAnswer, Failure> = client
            .call(
                Method::GET,
                "/directory/watch",
                &[
                    ("after", after.0.to_string()),
                    ("wait_ms", WATCH_WAIT.as_millis().to_string()),
                ],
                None,
                WATCH_WAIT + REQUEST_TIMEOUT,
            )
            .await;
        let events = match answer {
            Ok(answer) => answer.events,
            Err(failure) => {
                let _ = tx.send(Err(directory_failure(failure, after))).await;
                return;
            }
        };
        for answer in events {
            match event(answer) {
                Ok(event) if event.revision <= after => {
                    let _ = tx
                        .send(Err(DirectoryError::Provider(format!(
                            "the server sent revision {} after {}; out of order",
                            event.revision, after
                        ))))
                        .await;
                    return;
                }
                Ok(event) => {
                    after = event.revision;
                    if tx.send(Ok(event)).await.is_err() {
                        return;
                    }
                }
                Err(error) => {
                    let _ = tx.send(Err(error)).await;
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use troupe_lease::lease::NameProblem;

    fn refused(status: u16, code: Option<&str>, message: &str) -> Failure {
        Failure::Status(Refusal {
            status: StatusCode::from_u16(status).unwrap(),
            code: code.map(str::to_owned),
            message: message.to_owned(),
            oldest: None,
        })
    }

    #[test]
    fn a_lease_error_maps_back_by_code_to_the_servers_variant_and_message() {
        let server = LeaseError::InvalidOwner {
            lease: "l".to_owned(),
            problem: NameProblem::TooLong,
            reason: "lease owner \"o…\" is 600 bytes long; at most 512 bytes are allowed"
                .to_owned(),
        };
        let error = lease_failure("l", refused(400, Some(server.code()), &server.to_string()));
        assert_eq!(error, server, "same variant, same message");
        let error = lease_failure(
            "l",
            refused(
                400,
                Some("ttl_out_of_range"),
                "ttl_ms/renew_interval_ms: lease ttl 0ns",
            ),
        );
        assert_eq!(error.code(), "ttl_out_of_range");
        assert!(
            error
                .to_string()
                .ends_with("ttl_ms/renew_interval_ms: lease ttl 0ns")
        );
        let error = lease_failure(
            "l",
            refused(409, Some("not_owner"), "lease \"l\": not held"),
        );
        assert_eq!(
            error,
            LeaseError::NotOwner {
                lease: "l".to_owned(),
                reason: "not held".to_owned()
            }
        );
        let error = lease_failure(
            "l",
            refused(
                503,
                Some("unavailable"),
                "a coordination backend is unavailable",
            ),
        );
        assert!(error.is_retryable(), "{error}");
        assert!(error.to_string().contains("503"), "{error}");
    }

    #[test]
    fn an_unknown_or_missing_code_falls_back_on_the_status() {
        for (status, code) in [
            (503, Some("brand_new_code")),
            (502, None),
            (429, None),
            (408, None),
        ] {
            let error = lease_failure("l", refused(status, code, "busy"));
            assert!(
                matches!(error, LeaseError::Unavailable { .. }),
                "{status} {code:?}: {error:?}"
            );
        }
        let error = lease_failure("l", refused(409, Some("brand_new_code"), "taken"));
        assert_eq!(error.code(), "not_owner");
        // Bad input this client does not know the code of: not retryable, and it says all.
        let error = lease_failure("l", refused(400, Some("brand_new_code"), "no such thing"));
        assert!(matches!(error, LeaseError::Provider { .. }), "{error:?}");
        assert!(!error.is_retryable());
        let text = error.to_string();
        assert!(
            text.contains("400")
                && text.contains("brand_new_code")
                && text.contains("no such thing"),
            "{text}"
        );
        // A proxy's HTML 400 page: no code at all.
        let error = lease_failure("l", refused(400, None, "<html>bad request</html>"));
        assert!(matches!(error, LeaseError::Provider { .. }), "{error:?}");
    }

    #[test]
    fn a_directory_error_maps_back_by_code_and_a_410_to_compacted() {
        let error = directory_failure(
            refused(400, Some("host_empty"), "directory: host must not be empty"),
            Revision(0),
        );
        assert_eq!(
            error,
            DirectoryError::InvalidHost {
                problem: NameProblem::Empty,
                reason: "host must not be empty".to_owned()
            }
        );
        assert_eq!(error.to_string(), "directory: host must not be empty");
        let gone = Failure::Status(Refusal {
            status: StatusCode::GONE,
            code: Some("compacted".to_owned()),
            message: "compacted".to_owned(),
            oldest: Some(40),
        });
        assert_eq!(
            directory_failure(gone, Revision(7)),
            DirectoryError::Compacted {
                requested: Revision(7),
                oldest: Revision(40)
            }
        );
        let error = directory_failure(refused(500, Some("something_else"), "x"), Revision(0));
        assert!(error.is_retryable(), "{error:?}");
        let error = directory_failure(refused(422, None, "x"), Revision(0));
        assert!(matches!(error, DirectoryError::Provider(_)), "{error:?}");
    }
}
