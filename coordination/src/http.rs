//! Leases and the directory through the Troupe control plane's coordination API
//! (`/api/v1/coordination/…`, see `docs/control-plane.md`), for agents that should not hold
//! etcd or database credentials: the server holds those and serves the same contracts.
//!
//! The lease handle renews through the server every renew interval with the shared renewal
//! state machine, so a client cut off from the server reports the loss `ttl - renew_interval`
//! after its last confirmed renewal was sent, before the server lets the grant go (one TTL
//! after it received that renewal). Watches long-poll and resume from the last revision seen.
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
    /// An answer with this status and the server's message.
    Status(StatusCode, String, Option<u64>),
}

impl Failure {
    fn message(&self) -> String {
        match self {
            Self::Unreachable(m) => m.clone(),
            Self::Status(status, m, _) => format!("{status}: {m}"),
        }
    }
}

#[derive(Deserialize)]
struct ErrorBody {
    error: String,
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
        let message = serde_json::from_str::<ErrorBody>(&text)
            .map(|b| b.error)
            .unwrap_or(text);
        Err(Failure::Status(status, message, oldest))
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
    /// (the server's `--coordination-token`).
    pub fn new(base_url: &str, token: &str) -> Result<Self, HttpSetupError> {
        let url = reqwest::Url::parse(base_url)
            .map_err(|e| HttpSetupError(format!("base URL {base_url:?}: {e}")))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(HttpSetupError(format!(
                "base URL {base_url:?}: only http:// and https:// are allowed"
            )));
        }
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(2))
            .build()
            .map_err(|e| HttpSetupError(e.to_string()))?;
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

fn lease_failure(name: &str, failure: Failure) -> LeaseError {
    let reason = failure.message();
    match failure {
        Failure::Unreachable(_) => LeaseError::Unavailable {
            lease: name.to_owned(),
            reason,
        },
        Failure::Status(status, ..)
            if status == StatusCode::SERVICE_UNAVAILABLE || status.is_server_error() =>
        {
            LeaseError::Unavailable {
                lease: name.to_owned(),
                reason,
            }
        }
        Failure::Status(StatusCode::BAD_REQUEST, ..) => LeaseError::Settings {
            lease: name.to_owned(),
            reason,
        },
        Failure::Status(..) => LeaseError::Provider {
            lease: name.to_owned(),
            reason,
        },
    }
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
            Err(Failure::Status(StatusCode::CONFLICT, message, _)) => {
                Err(RenewError::Gone(message))
            }
            Err(failure) => Err(RenewError::Failed(failure.message())),
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

fn directory_failure(failure: Failure, after: Revision) -> DirectoryError {
    match failure {
        Failure::Unreachable(m) => DirectoryError::Unavailable(m),
        Failure::Status(StatusCode::GONE, _, Some(oldest)) => DirectoryError::Compacted {
            requested: after,
            oldest: Revision(oldest),
        },
        Failure::Status(StatusCode::BAD_REQUEST, m, _) => DirectoryError::Invalid(m),
        Failure::Status(status, m, _) if status.is_server_error() => {
            DirectoryError::Unavailable(format!("{status}: {m}"))
        }
        failure => DirectoryError::Provider(failure.message()),
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
            directory::validate_name("actor id", &actor)?;
            directory::validate_name("host", &host)?;
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
            directory::validate_name("actor id", &actor)?;
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
            directory::validate_name("actor id", &actor)?;
            directory::validate_name("host", &host)?;
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
            directory::validate_name("host", &host)?;
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
