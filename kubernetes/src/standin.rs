//! A stand-in Kubernetes API server for tests and benchmarks: it serves the
//! `coordination.k8s.io/v1` Lease API — and nothing else — over plain HTTP on loopback, with the
//! wire format and semantics of the real API server, so the real `kube` client and a stock
//! `kubectl` (`kubectl --server http://127.0.0.1:PORT get leases`, `-o json`, `--watch`) can
//! drive it.
//!
//! No Kubernetes API server can run on the machines these tests run on; this is the replacement.
//! Its answers are checked against recorded API-server responses (`tests/fixtures/`).
//!
//! # What it implements
//! - `POST   /apis/coordination.k8s.io/v1/namespaces/{ns}/leases` — create: `201` with the
//!   stored object (`uid`, `resourceVersion`, `creationTimestamp` filled in); `409 AlreadyExists`;
//!   `422 Invalid` for a bad name or a non-positive `leaseDurationSeconds`.
//! - `GET    …/leases/{name}` — `200` or `404 NotFound` (a `Status` object, as every error).
//! - `PUT    …/leases/{name}` — replace: the body's `metadata.resourceVersion`, when set, must be
//!   the stored one, else `409 Conflict`; an update that changes nothing keeps the
//!   `resourceVersion` and emits no event (as the real server does); `404` when absent.
//! - `DELETE …/leases/{name}` — `200` with a `Success` `Status`; honours
//!   `preconditions.resourceVersion`/`uid` in the body (`409 Conflict` when they do not match).
//! - `GET    …/leases?labelSelector=…` — a `LeaseList` whose `metadata.resourceVersion` is the
//!   store's; items without `kind`/`apiVersion`, as the real server encodes them.
//! - `GET    …/leases?watch=1&resourceVersion=R&labelSelector=…` — newline-delimited
//!   `WatchEvent`s (`ADDED`/`MODIFIED`/`DELETED`, and `BOOKMARK` when asked for). With `R` unset
//!   or `0` it first replays the current objects as `ADDED`; with a compacted `R` it answers `200`
//!   and a single `ERROR` event carrying a `410 Expired` `Status`, exactly like the real server.
//!   `timeoutSeconds` ends the stream.
//!
//! - Discovery (`/api`, `/api/v1`, `/apis`, `/apis/coordination.k8s.io`,
//!   `/apis/coordination.k8s.io/v1`) and `/version`, aggregated or legacy as the client's `Accept` asks, and
//!   server-side printing: list, get and watch answer a `meta.k8s.io` `Table` (columns `Name`,
//!   `Holder`, `Age`) when `Accept` asks for one, as `kubectl get` does without `-o` (see
//!   `wire`). Anything else under `/api` or `/apis` is `404 NotFound`.
//!
//! Label selectors: `k=v`, `k==v`, `k!=v`, `k`, `!k`, comma-joined; set-based selectors are
//! refused with `400 BadRequest`.
//!
//! # Fault injection
//! [`StandIn::inject`] makes updates (renewals) of one Lease answer `404`, `409`, or arrive late.
//! [`StandIn::put_raw`] stores any JSON (a malformed Lease) as a backend would hold it.
//! [`StandIn::compact`] forgets history so old `resourceVersion`s get `410`.

use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::fmt;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Frame, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};

mod wire;

use wire::{Discovery, IncludeObject, Media, MediaKind};

const GROUP: &str = "coordination.k8s.io";
const API_VERSION: &str = "coordination.k8s.io/v1";
const PREFIX: &str = "/apis/coordination.k8s.io/v1";

/// What an injected fault does to a matching request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Answer `404 NotFound` (as if the Lease had been deleted) without touching the store.
    NotFound,
    /// Answer `409 Conflict` (as if someone else had written first) without touching the store.
    Conflict,
    /// Hold the request this long, then handle it normally.
    Delay(Duration),
    /// Hold the request this long, then answer `404 NotFound` (a renewal that was in flight
    /// while the Lease was deleted).
    DelayedNotFound(Duration),
}

/// One request the stand-in answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestRecord {
    /// `GET`, `POST`, `PUT`, `DELETE`.
    pub method: String,
    /// The path, without the query.
    pub path: String,
    /// The query, undecoded (`""` when none).
    pub query: String,
    /// The request's `Accept` header (`""` when none).
    pub accept: String,
    /// The `Content-Type` answered (`""` when none).
    pub content_type: String,
    /// The Lease name, for requests on one Lease.
    pub name: Option<String>,
    /// The HTTP status answered.
    pub status: u16,
}

/// A running stand-in API server; stops when dropped.
pub struct StandIn {
    addr: SocketAddr,
    store: Arc<Mutex<Store>>,
    changed: watch::Sender<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl fmt::Debug for StandIn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StandIn").field("addr", &self.addr).finish()
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct Store {
    revision: u64,
    /// Events with a revision at or below this are forgotten (`410` for watches from there).
    compacted: u64,
    objects: BTreeMap<(String, String), Value>,
    log: VecDeque<LogEntry>,
    faults: Vec<(String, Fault)>,
    requests: Vec<RequestRecord>,
    uids: u64,
    held: usize,
    /// Bumped by [`StandIn::close_watches`]; a watch ends when it changes.
    generation: u64,
    /// How long a new watch waits before it starts.
    watch_hold: Duration,
    /// How many watches were answered `410 Expired`.
    expired_watches: usize,
}

struct LogEntry {
    revision: u64,
    namespace: String,
    kind: &'static str,
    object: Value,
}

/// How many events the store keeps for watches to resume from.
const LOG_CAPACITY: usize = 10_000;

impl StandIn {
    /// Start on a free loopback port.
    pub async fn start() -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let store = Arc::new(Mutex::new(Store {
            revision: 100,
            compacted: 0,
            objects: BTreeMap::new(),
            log: VecDeque::new(),
            faults: Vec::new(),
            requests: Vec::new(),
            uids: 0,
            held: 0,
            generation: 0,
            watch_hold: Duration::ZERO,
            expired_watches: 0,
        }));
        let (changed, _) = watch::channel(100);
        let server = Server {
            store: Arc::clone(&store),
            changed: changed.clone(),
        };
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let server = server.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        let server = server.clone();
                        async move { Ok::<_, Infallible>(server.handle(request).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(Self {
            addr,
            store,
            changed,
            task,
        })
    }

    /// `http://127.0.0.1:<port>`, for `kube::Config::new`.
    #[must_use]
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A kube client for this server, default namespace `default`.
    pub fn client(&self) -> kube::Client {
        let uri = self.url().parse().expect("a loopback URL parses");
        kube::Client::try_from(kube::Config::new(uri)).expect("a plain-HTTP client builds")
    }

    /// The stored object, as JSON.
    #[must_use]
    pub fn get(&self, namespace: &str, name: &str) -> Option<Value> {
        self.store
            .lock()
            .objects
            .get(&(namespace.to_owned(), name.to_owned()))
            .cloned()
    }

    /// The names of the Leases in `namespace`.
    #[must_use]
    pub fn names(&self, namespace: &str) -> Vec<String> {
        self.store
            .lock()
            .objects
            .keys()
            .filter(|(ns, _)| ns == namespace)
            .map(|(_, name)| name.clone())
            .collect()
    }

    /// Delete a Lease behind every client's back (an operator's `kubectl delete lease`).
    pub fn delete(&self, namespace: &str, name: &str) -> bool {
        let deleted = self.store.lock().remove(namespace, name).is_some();
        self.notify();
        deleted
    }

    /// Store `object` as is (it may be malformed), as a new revision; watches see it.
    pub fn put_raw(&self, namespace: &str, name: &str, mut object: Value) {
        {
            let mut store = self.store.lock();
            store.revision += 1;
            let revision = store.revision;
            if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.insert("resourceVersion".into(), json!(revision.to_string()));
            }
            let key = (namespace.to_owned(), name.to_owned());
            let kind = if store.objects.contains_key(&key) {
                "MODIFIED"
            } else {
                "ADDED"
            };
            store.objects.insert(key, object.clone());
            store.append(revision, namespace, kind, object);
        }
        self.notify();
    }

    /// From now on, updates of Lease `name` get `fault` (until [`StandIn::clear_faults`]).
    pub fn inject(&self, name: &str, fault: Fault) {
        self.store.lock().faults.push((name.to_owned(), fault));
    }

    /// Remove every injected fault.
    pub fn clear_faults(&self) {
        self.store.lock().faults.clear();
    }

    /// Forget the event history: watches resuming from an older `resourceVersion` get `410`.
    pub fn compact(&self) {
        let mut store = self.store.lock();
        store.compacted = store.revision;
        store.log.clear();
    }

    /// How many requests are being held by a [`Fault::Delay`] right now.
    #[must_use]
    pub fn held(&self) -> usize {
        self.store.lock().held
    }

    /// End every open watch stream (as an API server restart or a load balancer would); clients
    /// resume from their last `resourceVersion`.
    pub fn close_watches(&self) {
        self.store.lock().generation += 1;
        self.notify();
    }

    /// Make every new watch wait `hold` before it starts streaming (so that history can be
    /// compacted under a client that is about to resume).
    pub fn hold_watches(&self, hold: Duration) {
        self.store.lock().watch_hold = hold;
    }

    /// How many watches were answered with a `410 Expired` `ERROR` event.
    #[must_use]
    pub fn expired_watches(&self) -> usize {
        self.store.lock().expired_watches
    }

    /// Every request answered so far, in order.
    #[must_use]
    pub fn requests(&self) -> Vec<RequestRecord> {
        self.store.lock().requests.clone()
    }

    fn notify(&self) {
        let revision = self.store.lock().revision;
        self.changed.send_replace(revision);
    }
}

impl Store {
    fn append(&mut self, revision: u64, namespace: &str, kind: &'static str, object: Value) {
        if self.log.len() == LOG_CAPACITY
            && let Some(old) = self.log.pop_front()
        {
            self.compacted = old.revision;
        }
        self.log.push_back(LogEntry {
            revision,
            namespace: namespace.to_owned(),
            kind,
            object,
        });
    }

    fn remove(&mut self, namespace: &str, name: &str) -> Option<Value> {
        let mut object = self
            .objects
            .remove(&(namespace.to_owned(), name.to_owned()))?;
        self.revision += 1;
        let revision = self.revision;
        // The DELETED event carries the object at the deletion's revision.
        set_meta(&mut object, "resourceVersion", json!(revision.to_string()));
        self.append(revision, namespace, "DELETED", object.clone());
        Some(object)
    }

    fn fault_for(&self, name: &str) -> Option<Fault> {
        self.faults
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, f)| f.clone())
    }
}

#[derive(Clone)]
struct Server {
    store: Arc<Mutex<Store>>,
    changed: watch::Sender<u64>,
}

type Body = BoxBody<Bytes, Infallible>;

/// A parsed request path.
enum Target {
    Collection { namespace: String },
    Object { namespace: String, name: String },
}

impl Server {
    async fn handle(&self, request: Request<Incoming>) -> Response<Body> {
        let method = request.method().clone();
        let path = request.uri().path().to_owned();
        let raw_query = request.uri().query().unwrap_or("").to_owned();
        let query = parse_query(&raw_query);
        let header = |name: hyper::header::HeaderName| {
            request
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_owned()
        };
        let accept = header(hyper::header::ACCEPT);
        let host = header(hyper::header::HOST);
        let target = parse_path(&path);
        let name = match &target {
            Some(Target::Object { name, .. }) => Some(name.clone()),
            _ => None,
        };
        let body = match request.into_body().collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(_) => Bytes::new(),
        };
        let response = match (target, Discovery::parse(&path)) {
            (Some(target), _) => {
                let offered = [MediaKind::Json, MediaKind::Table];
                match wire::negotiate(&accept, &offered) {
                    Some(media) => self.route(&method, target, &query, &body, media).await,
                    None => not_acceptable(&accept),
                }
            }
            (None, Some(discovery)) if method == Method::GET => {
                match wire::negotiate(&accept, discovery.offers()) {
                    Some(media) => {
                        typed_response(StatusCode::OK, media, &discovery.body(media, &host))
                    }
                    None => not_acceptable(&accept),
                }
            }
            (None, Some(_)) => method_not_allowed(&method),
            (None, None) => status_response(
                StatusCode::NOT_FOUND,
                "NotFound",
                "the server could not find the requested resource",
                None,
            ),
        };
        let content_type = response
            .headers()
            .get(hyper::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        self.store.lock().requests.push(RequestRecord {
            method: method.to_string(),
            path,
            query: raw_query,
            accept,
            content_type,
            name,
            status: response.status().as_u16(),
        });
        response
    }

    async fn route(
        &self,
        method: &Method,
        target: Target,
        query: &BTreeMap<String, String>,
        body: &[u8],
        media: Media,
    ) -> Response<Body> {
        let include = match IncludeObject::parse(query.get("includeObject").map(String::as_str)) {
            Ok(include) => include,
            Err(message) => {
                return status_response(StatusCode::BAD_REQUEST, "BadRequest", &message, None);
            }
        };
        match (method, target) {
            (&Method::GET, Target::Collection { namespace }) => {
                let selector = match Selector::parse(query.get("labelSelector").map_or("", |s| s)) {
                    Ok(selector) => selector,
                    Err(message) => {
                        return status_response(
                            StatusCode::BAD_REQUEST,
                            "BadRequest",
                            &message,
                            None,
                        );
                    }
                };
                if query.get("watch").is_some_and(|w| w == "1" || w == "true") {
                    self.watch(namespace, selector, query, media, include)
                } else {
                    self.list(&namespace, &selector, media, include)
                }
            }
            (&Method::POST, Target::Collection { namespace }) => self.create(&namespace, body),
            (&Method::GET, Target::Object { namespace, name }) => {
                match self.store.lock().objects.get(&(namespace, name.clone())) {
                    Some(object) => match media {
                        Media::Table(version) => {
                            let rv = object
                                .pointer("/metadata/resourceVersion")
                                .and_then(Value::as_str);
                            let table = wire::table(
                                version,
                                &[object],
                                rv,
                                include,
                                true,
                                chrono::Utc::now(),
                            );
                            typed_response(StatusCode::OK, media, &table)
                        }
                        _ => json_response(StatusCode::OK, object),
                    },
                    None => not_found(&name),
                }
            }
            (&Method::PUT, Target::Object { namespace, name }) => {
                let fault = self.store.lock().fault_for(&name);
                match fault {
                    Some(Fault::NotFound) => return not_found(&name),
                    Some(Fault::Conflict) => return conflict(&name),
                    Some(Fault::Delay(delay)) => self.hold(delay).await,
                    Some(Fault::DelayedNotFound(delay)) => {
                        self.hold(delay).await;
                        return not_found(&name);
                    }
                    None => {}
                }
                self.replace(&namespace, &name, body)
            }
            (&Method::DELETE, Target::Object { namespace, name }) => {
                self.delete(&namespace, &name, body)
            }
            (method, _) => method_not_allowed(method),
        }
    }

    async fn hold(&self, delay: Duration) {
        self.store.lock().held += 1;
        tokio::time::sleep(delay).await;
        self.store.lock().held -= 1;
    }

    fn list(
        &self,
        namespace: &str,
        selector: &Selector,
        media: Media,
        include: IncludeObject,
    ) -> Response<Body> {
        let store = self.store.lock();
        if let Media::Table(version) = media {
            let objects: Vec<&Value> = store
                .objects
                .iter()
                .filter(|((ns, _), object)| ns == namespace && selector.matches(object))
                .map(|(_, object)| object)
                .collect();
            let revision = store.revision.to_string();
            let table = wire::table(
                version,
                &objects,
                Some(&revision),
                include,
                true,
                chrono::Utc::now(),
            );
            return typed_response(StatusCode::OK, media, &table);
        }
        let items: Vec<Value> = store
            .objects
            .iter()
            .filter(|((ns, _), object)| ns == namespace && selector.matches(object))
            .map(|(_, object)| {
                // The real server encodes list items without kind and apiVersion.
                let mut item = object.clone();
                if let Some(map) = item.as_object_mut() {
                    map.remove("kind");
                    map.remove("apiVersion");
                }
                item
            })
            .collect();
        json_response(
            StatusCode::OK,
            &json!({
                "kind": "LeaseList",
                "apiVersion": API_VERSION,
                "metadata": { "resourceVersion": store.revision.to_string() },
                "items": items,
            }),
        )
    }

    fn create(&self, namespace: &str, body: &[u8]) -> Response<Body> {
        let mut object: Value = match serde_json::from_slice(body) {
            Ok(object @ Value::Object(_)) => object,
            _ => {
                return status_response(
                    StatusCode::BAD_REQUEST,
                    "BadRequest",
                    "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf",
                    None,
                );
            }
        };
        if let Some(response) = check_kind(&object) {
            return response;
        }
        let Some(name) = object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .map(str::to_owned)
        else {
            return invalid(
                "",
                "metadata.name: Required value: name or generateName is required",
            );
        };
        if let Some(response) = validate(&name, &object) {
            return response;
        }
        {
            let mut store = self.store.lock();
            let key = (namespace.to_owned(), name.clone());
            if store.objects.contains_key(&key) {
                return status_response(
                    StatusCode::CONFLICT,
                    "AlreadyExists",
                    &format!("leases.{GROUP} \"{name}\" already exists"),
                    Some(&name),
                );
            }
            store.revision += 1;
            store.uids += 1;
            let revision = store.revision;
            let uid = format!(
                "6f1e2d3c-{:04x}-4b5a-9c8d-{:012x}",
                store.uids % 0xffff,
                store.uids
            );
            object["apiVersion"] = json!(API_VERSION);
            object["kind"] = json!("Lease");
            set_meta(&mut object, "namespace", json!(namespace));
            set_meta(&mut object, "uid", json!(uid));
            set_meta(&mut object, "resourceVersion", json!(revision.to_string()));
            set_meta(&mut object, "creationTimestamp", json!(timestamp()));
            store.objects.insert(key, object.clone());
            store.append(revision, namespace, "ADDED", object.clone());
        }
        self.changed.send_replace(self.store.lock().revision);
        json_response(StatusCode::CREATED, &object)
    }

    fn replace(&self, namespace: &str, name: &str, body: &[u8]) -> Response<Body> {
        let mut object: Value = match serde_json::from_slice(body) {
            Ok(object @ Value::Object(_)) => object,
            _ => {
                return status_response(
                    StatusCode::BAD_REQUEST,
                    "BadRequest",
                    "the body of the request was in an unknown format",
                    None,
                );
            }
        };
        if let Some(response) = check_kind(&object) {
            return response;
        }
        let body_name = object.pointer("/metadata/name").and_then(Value::as_str);
        if body_name != Some(name) {
            return status_response(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                &format!(
                    "the name of the object ({}) does not match the name on the URL ({name})",
                    body_name.unwrap_or("")
                ),
                None,
            );
        }
        if let Some(response) = validate(name, &object) {
            return response;
        }
        let answer = {
            let mut store = self.store.lock();
            let key = (namespace.to_owned(), name.to_owned());
            let Some(stored) = store.objects.get(&key).cloned() else {
                return not_found(name);
            };
            let current = stored
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            match object
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
            {
                Some(rv) if !rv.is_empty() && rv != current => return conflict(name),
                _ => {}
            }
            // Server-owned fields come from the stored object.
            object["apiVersion"] = json!(API_VERSION);
            object["kind"] = json!("Lease");
            for field in ["namespace", "uid", "creationTimestamp", "resourceVersion"] {
                if let Some(value) = stored.pointer(&format!("/metadata/{field}")) {
                    set_meta(&mut object, field, value.clone());
                }
            }
            if object == stored {
                // A no-op update: same resourceVersion, no event.
                return json_response(StatusCode::OK, &stored);
            }
            store.revision += 1;
            let revision = store.revision;
            set_meta(&mut object, "resourceVersion", json!(revision.to_string()));
            store.objects.insert(key, object.clone());
            store.append(revision, namespace, "MODIFIED", object.clone());
            object
        };
        self.changed.send_replace(self.store.lock().revision);
        json_response(StatusCode::OK, &answer)
    }

    fn delete(&self, namespace: &str, name: &str, body: &[u8]) -> Response<Body> {
        let options: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        let removed = {
            let mut store = self.store.lock();
            let key = (namespace.to_owned(), name.to_owned());
            let Some(stored) = store.objects.get(&key) else {
                return not_found(name);
            };
            for (field, label) in [("resourceVersion", "ResourceVersion"), ("uid", "UID")] {
                let wanted = options
                    .pointer(&format!("/preconditions/{field}"))
                    .and_then(Value::as_str);
                let actual = stored
                    .pointer(&format!("/metadata/{field}"))
                    .and_then(Value::as_str)
                    .unwrap_or("");
                if let Some(wanted) = wanted
                    && wanted != actual
                {
                    return status_response(
                        StatusCode::CONFLICT,
                        "Conflict",
                        &format!(
                            "Operation cannot be fulfilled on leases.{GROUP} \"{name}\": Precondition failed: {label} in precondition: {wanted}, {label} in object meta: {actual}"
                        ),
                        Some(name),
                    );
                }
            }
            store.remove(namespace, name)
        };
        self.changed.send_replace(self.store.lock().revision);
        let uid = removed
            .as_ref()
            .and_then(|o| o.pointer("/metadata/uid"))
            .cloned()
            .unwrap_or(Value::Null);
        json_response(
            StatusCode::OK,
            &json!({
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "details": { "name": name, "group": GROUP, "kind": "leases", "uid": uid },
            }),
        )
    }

    fn watch(
        &self,
        namespace: String,
        selector: Selector,
        query: &BTreeMap<String, String>,
        media: Media,
        include: IncludeObject,
    ) -> Response<Body> {
        let (tx, rx) = mpsc::channel::<Bytes>(64);
        // As Tables, only the first event carries the column definitions (as on the real server).
        let mut columns = true;
        let mut event = move |kind: &str, object: &Value| match media {
            Media::Table(version) if kind != "ERROR" && kind != "BOOKMARK" => {
                let rv = object
                    .pointer("/metadata/resourceVersion")
                    .and_then(Value::as_str);
                let table =
                    wire::table(version, &[object], rv, include, columns, chrono::Utc::now());
                columns = false;
                event_line(kind, &table)
            }
            _ => event_line(kind, object),
        };
        let from = query.get("resourceVersion").cloned().unwrap_or_default();
        let bookmarks = query
            .get("allowWatchBookmarks")
            .is_some_and(|b| b == "true" || b == "1");
        let timeout = query
            .get("timeoutSeconds")
            .and_then(|t| t.parse::<u64>().ok())
            .map_or(Duration::from_secs(1800), Duration::from_secs);
        let store = Arc::clone(&self.store);
        let mut changed = self.changed.subscribe();
        let (generation, hold) = {
            let store = self.store.lock();
            (store.generation, store.watch_hold)
        };
        tokio::spawn(async move {
            if !hold.is_zero() {
                tokio::time::sleep(hold).await;
            }
            let deadline = tokio::time::Instant::now() + timeout;
            enum Start {
                From(u64),
                Replay(Vec<Value>, u64),
                Refuse(Value),
            }
            let start = {
                let mut store = store.lock();
                match from.as_str() {
                    "" | "0" => Start::Replay(
                        store
                            .objects
                            .iter()
                            .filter(|((ns, _), object)| {
                                *ns == namespace && selector.matches(object)
                            })
                            .map(|(_, object)| object.clone())
                            .collect(),
                        store.revision,
                    ),
                    rv => match rv.parse::<u64>() {
                        Ok(rv) if rv >= store.compacted => Start::From(rv),
                        Ok(rv) => Start::Refuse({
                            store.expired_watches += 1;
                            status_json(
                                410,
                                "Expired",
                                &format!(
                                    "too old resource version: {rv} ({})",
                                    store.compacted + 1
                                ),
                                None,
                            )
                        }),
                        Err(_) => Start::Refuse(status_json(
                            400,
                            "BadRequest",
                            &format!("invalid resource version: {rv:?}"),
                            None,
                        )),
                    },
                }
            };
            let mut last = match start {
                Start::From(rv) => rv,
                Start::Replay(objects, revision) => {
                    for object in objects {
                        if tx.send(event("ADDED", &object)).await.is_err() {
                            return;
                        }
                    }
                    revision
                }
                Start::Refuse(status) => {
                    let _ = tx.send(event("ERROR", &status)).await;
                    return;
                }
            };
            loop {
                changed.borrow_and_update();
                let (lines, revision, expired) = {
                    let mut store = store.lock();
                    if store.generation != generation {
                        return;
                    }
                    if last < store.compacted {
                        store.expired_watches += 1;
                        (Vec::new(), store.revision, true)
                    } else {
                        let lines: Vec<(&'static str, Value)> = store
                            .log
                            .iter()
                            .filter(|e| {
                                e.revision > last
                                    && e.namespace == namespace
                                    && selector.matches(&e.object)
                            })
                            .map(|e| (e.kind, e.object.clone()))
                            .collect();
                        (lines, store.revision, false)
                    }
                };
                if expired {
                    let status = status_json(
                        410,
                        "Expired",
                        &format!("too old resource version: {last} ({})", revision),
                        None,
                    );
                    let _ = tx.send(event_line("ERROR", &status)).await;
                    return;
                }
                for (kind, object) in lines {
                    if tx.send(event(kind, &object)).await.is_err() {
                        return;
                    }
                }
                last = revision;
                tokio::select! {
                    changed = changed.changed() => {
                        if changed.is_err() {
                            return;
                        }
                    }
                    () = tokio::time::sleep_until(deadline) => return,
                    () = tokio::time::sleep(Duration::from_secs(1)), if bookmarks => {
                        let bookmark = json!({
                            "kind": "Lease",
                            "apiVersion": API_VERSION,
                            "metadata": { "resourceVersion": last.to_string(), "creationTimestamp": null },
                        });
                        if tx.send(event("BOOKMARK", &bookmark)).await.is_err() {
                            return;
                        }
                    }
                    () = tx.closed() => return,
                }
            }
        });
        Response::builder()
            .status(StatusCode::OK)
            .header("content-type", media.content_type())
            .body(BoxBody::new(ChannelBody(rx)))
            .expect("a valid response")
    }
}

/// A streaming body fed from a channel (the watch stream).
struct ChannelBody(mpsc::Receiver<Bytes>);

impl hyper::body::Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0
            .poll_recv(cx)
            .map(|line| line.map(|b| Ok(Frame::data(b))))
    }
}

fn event_line(kind: &str, object: &Value) -> Bytes {
    let mut line = serde_json::to_vec(&json!({ "type": kind, "object": object }))
        .expect("JSON values serialize");
    line.push(b'\n');
    Bytes::from(line)
}

fn parse_path(path: &str) -> Option<Target> {
    let rest = path.strip_prefix(PREFIX)?.strip_prefix("/namespaces/")?;
    let mut parts = rest.split('/');
    let namespace = parts.next().filter(|s| !s.is_empty())?.to_owned();
    if parts.next()? != "leases" {
        return None;
    }
    match (parts.next(), parts.next()) {
        (None, _) | (Some(""), None) => Some(Target::Collection { namespace }),
        (Some(name), None) if !name.is_empty() => Some(Target::Object {
            namespace,
            name: name.to_owned(),
        }),
        _ => None,
    }
}

fn parse_query(query: &str) -> BTreeMap<String, String> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                if let Ok(b) = u8::from_str_radix(hex, 16) {
                    out.push(b);
                    i += 3;
                    continue;
                }
                out.push(b'%');
            }
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// An equality-based label selector.
#[derive(Debug, Clone)]
struct Selector(Vec<Requirement>);

#[derive(Debug, Clone)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    Exists(String),
    NotExists(String),
}

impl Selector {
    fn parse(selector: &str) -> Result<Self, String> {
        let mut requirements = Vec::new();
        for term in selector.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            if term.contains(" in ") || term.contains(" notin ") || term.contains('(') {
                return Err(format!(
                    "unable to parse requirement {term:?}: set-based selectors are not supported by this stand-in"
                ));
            }
            let requirement = if let Some((k, v)) = term.split_once("!=") {
                Requirement::NotEquals(k.trim().to_owned(), v.trim().to_owned())
            } else if let Some((k, v)) = term.split_once("==") {
                Requirement::Equals(k.trim().to_owned(), v.trim().to_owned())
            } else if let Some((k, v)) = term.split_once('=') {
                Requirement::Equals(k.trim().to_owned(), v.trim().to_owned())
            } else if let Some(k) = term.strip_prefix('!') {
                Requirement::NotExists(k.trim().to_owned())
            } else {
                Requirement::Exists(term.to_owned())
            };
            requirements.push(requirement);
        }
        Ok(Self(requirements))
    }

    fn matches(&self, object: &Value) -> bool {
        let label = |k: &str| {
            object
                .pointer("/metadata/labels")
                .and_then(|l| l.get(k))
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        self.0.iter().all(|r| match r {
            Requirement::Equals(k, v) => label(k).as_deref() == Some(v.as_str()),
            Requirement::NotEquals(k, v) => label(k).as_deref() != Some(v.as_str()),
            Requirement::Exists(k) => label(k).is_some(),
            Requirement::NotExists(k) => label(k).is_none(),
        })
    }
}

/// The `400` answer when `object` is not a `coordination.k8s.io/v1` Lease.
fn check_kind(object: &Value) -> Option<Response<Body>> {
    let kind = object.get("kind").and_then(Value::as_str);
    let api_version = object.get("apiVersion").and_then(Value::as_str);
    if kind.is_some_and(|k| k != "Lease") || api_version.is_some_and(|v| v != API_VERSION) {
        return Some(status_response(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            &format!(
                "the API version in the data ({}) does not match the expected API version ({API_VERSION})",
                api_version.unwrap_or("")
            ),
            None,
        ));
    }
    None
}

/// The API server's validation of a Lease (the parts this stand-in enforces).
fn validate(name: &str, object: &Value) -> Option<Response<Body>> {
    let dns_subdomain = !name.is_empty()
        && name.len() <= 253
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name.as_bytes()[name.len() - 1].is_ascii_alphanumeric();
    if !dns_subdomain {
        return Some(invalid(
            name,
            &format!(
                "metadata.name: Invalid value: {name:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
            ),
        ));
    }
    if let Some(duration) = object.pointer("/spec/leaseDurationSeconds") {
        if duration.as_i64().is_none_or(|d| d <= 0) {
            return Some(invalid(
                name,
                &format!(
                    "spec.leaseDurationSeconds: Invalid value: {duration}: must be greater than 0"
                ),
            ));
        }
    }
    if let Some(transitions) = object.pointer("/spec/leaseTransitions") {
        if transitions.as_i64().is_none_or(|t| t < 0) {
            return Some(invalid(
                name,
                &format!(
                    "spec.leaseTransitions: Invalid value: {transitions}: must be greater than or equal to 0"
                ),
            ));
        }
    }
    None
}

fn invalid(name: &str, message: &str) -> Response<Body> {
    status_response(
        StatusCode::UNPROCESSABLE_ENTITY,
        "Invalid",
        &format!("Lease.{GROUP} \"{name}\" is invalid: {message}"),
        Some(name),
    )
}

fn not_acceptable(accept: &str) -> Response<Body> {
    status_response(
        StatusCode::NOT_ACCEPTABLE,
        "NotAcceptable",
        &format!(
            "only the following media types are accepted: application/json, application/json;as=Table;v=v1;g=meta.k8s.io, application/json;as=Table;v=v1beta1;g=meta.k8s.io (asked for {accept:?})"
        ),
        None,
    )
}

fn method_not_allowed(method: &Method) -> Response<Body> {
    status_response(
        StatusCode::METHOD_NOT_ALLOWED,
        "MethodNotAllowed",
        &format!("the server does not allow this method on the requested resource: {method}"),
        None,
    )
}

fn not_found(name: &str) -> Response<Body> {
    status_response(
        StatusCode::NOT_FOUND,
        "NotFound",
        &format!("leases.{GROUP} \"{name}\" not found"),
        Some(name),
    )
}

fn conflict(name: &str) -> Response<Body> {
    status_response(
        StatusCode::CONFLICT,
        "Conflict",
        &format!(
            "Operation cannot be fulfilled on leases.{GROUP} \"{name}\": the object has been modified; please apply your changes to the latest version and try again"
        ),
        Some(name),
    )
}

fn status_json(code: u16, reason: &str, message: &str, name: Option<&str>) -> Value {
    let mut status = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    });
    if let Some(name) = name {
        status["details"] = json!({ "name": name, "group": GROUP, "kind": "leases" });
    }
    status
}

fn status_response(
    code: StatusCode,
    reason: &str,
    message: &str,
    name: Option<&str>,
) -> Response<Body> {
    json_response(code, &status_json(code.as_u16(), reason, message, name))
}

fn json_response(code: StatusCode, value: &Value) -> Response<Body> {
    typed_response(code, Media::Json, value)
}

fn typed_response(code: StatusCode, media: Media, value: &Value) -> Response<Body> {
    let body = serde_json::to_vec(value).expect("JSON values serialize");
    Response::builder()
        .status(code)
        .header("content-type", media.content_type())
        .body(BoxBody::new(Full::new(Bytes::from(body))))
        .expect("a valid response")
}

fn set_meta(object: &mut Value, field: &str, value: Value) {
    if !object.get("metadata").is_some_and(Value::is_object) {
        object["metadata"] = json!({});
    }
    object["metadata"][field] = value;
}

fn timestamp() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}
