//! Helpers for tests and the ingest benchmark: a fresh PostgreSQL database or SQLite file per
//! test, dropped at the end, and a builder for report batches.
//!
//! `TROUPE_TEST_DATABASE_URL` names a PostgreSQL superuser connection (`scripts/test` exports
//! it); without it `postgres://postgres@127.0.0.1:5432/postgres` is tried.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use sqlx::{Connection, Executor, PgConnection};
use troupe_protocol::{
    AgentIdentity, AgentMeta, DeadLetterEvent, DepthSample, DepthTick, DroppedCounts, Event,
    EventBody, MemberChange, MemberInfo, MemberStatus, PROTOCOL_VERSION, ReportBatch,
};

use crate::store::{Store, StoreError};

/// The admin connection tests create their databases through.
#[must_use]
pub fn admin_database_url() -> String {
    std::env::var("TROUPE_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

fn unique_suffix() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!(
        "{}_{}_{}",
        std::process::id(),
        nanos % 1_000_000_000_000,
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// `url` with its database name replaced by `database`.
fn with_database(url: &str, database: &str) -> String {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(b, q)| (b, Some(q)));
    let authority_start = base.find("://").map_or(0, |i| i + 3);
    let path_start = base[authority_start..]
        .find('/')
        .map_or(base.len(), |i| authority_start + i);
    let mut out = format!("{}/{}", &base[..path_start], database);
    if let Some(query) = query {
        out.push('?');
        out.push_str(query);
    }
    out
}

/// A PostgreSQL database made for one test and dropped (with its connections) on drop.
#[derive(Debug)]
pub struct TestDatabase {
    name: String,
    url: String,
    admin_url: String,
}

impl TestDatabase {
    /// Creates a database with a fresh random name.
    ///
    /// # Panics
    /// When PostgreSQL cannot be reached: tests need it (`scripts/test` starts it).
    pub async fn create() -> Self {
        let admin_url = admin_database_url();
        let name = format!("troupe_test_{}", unique_suffix());
        let mut admin = PgConnection::connect(&admin_url).await.unwrap_or_else(|e| {
            panic!("cannot reach PostgreSQL at {admin_url} (set TROUPE_TEST_DATABASE_URL): {e}")
        });
        admin
            .execute(format!("CREATE DATABASE \"{name}\"").as_str())
            .await
            .expect("create test database");
        admin.close().await.ok();
        Self {
            url: with_database(&admin_url, &name),
            name,
            admin_url,
        }
    }

    /// Creates the database `name`, dropping a leftover of that name first (a benchmark's
    /// database, so an interrupted run never leaves a second copy behind).
    ///
    /// # Panics
    /// When PostgreSQL cannot be reached or the database cannot be made.
    pub async fn recreate(name: &str) -> Self {
        let admin_url = admin_database_url();
        let mut admin = PgConnection::connect(&admin_url).await.unwrap_or_else(|e| {
            panic!("cannot reach PostgreSQL at {admin_url} (set TROUPE_TEST_DATABASE_URL): {e}")
        });
        admin
            .execute(format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)").as_str())
            .await
            .expect("drop the leftover database");
        admin
            .execute(format!("CREATE DATABASE \"{name}\"").as_str())
            .await
            .expect("create the database");
        admin.close().await.ok();
        Self {
            url: with_database(&admin_url, name),
            name: name.to_owned(),
            admin_url,
        }
    }

    /// The database's URL.
    #[must_use]
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A store on this database, migrations applied.
    pub async fn store(&self) -> Result<Store, StoreError> {
        Store::connect_postgres(&self.url, 8).await
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let admin_url = self.admin_url.clone();
        let sql = format!("DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)", self.name);
        // Drop may run inside a runtime (or during a panic): do the async work on a thread
        // with a runtime of its own.
        let dropper = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime for dropping the test database");
            runtime.block_on(async move {
                if let Ok(mut admin) = PgConnection::connect(&admin_url).await {
                    let _ = admin.execute(sql.as_str()).await;
                    let _ = admin.close().await;
                }
            });
        });
        let _ = dropper.join();
    }
}

/// A SQLite file made for one test and deleted (with its WAL) on drop.
#[derive(Debug)]
pub struct TestSqliteFile {
    path: PathBuf,
}

impl TestSqliteFile {
    /// A path in the temporary directory that nothing uses yet.
    #[must_use]
    pub fn new() -> Self {
        let path = std::env::temp_dir().join(format!("troupe-test-{}.sqlite", unique_suffix()));
        Self { path }
    }

    /// The file's path.
    #[must_use]
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// A store on this file, migrations applied.
    pub async fn store(&self) -> Result<Store, StoreError> {
        Store::open_sqlite(&self.path, 4).await
    }
}

impl Default for TestSqliteFile {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for TestSqliteFile {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm"] {
            let mut path = self.path.clone().into_os_string();
            path.push(suffix);
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Builds report batches for tests and benchmarks.
#[derive(Debug, Clone)]
#[must_use]
pub struct BatchBuilder {
    batch: ReportBatch,
}

impl BatchBuilder {
    /// An empty batch `sequence` from agent `node` (incarnation 1) of `cluster`.
    pub fn new(cluster: &str, node: &str, sequence: u64) -> Self {
        Self {
            batch: ReportBatch {
                version: PROTOCOL_VERSION,
                identity: AgentIdentity {
                    cluster: cluster.to_owned(),
                    node: node.to_owned(),
                    incarnation: 1,
                    meta: AgentMeta::default(),
                    cluster_identity: None,
                },
                sequence,
                sent_at_ms: 0,
                events: Vec::new(),
                depth_samples: Vec::new(),
                dropped: DroppedCounts::default(),
            },
        }
    }

    /// Sets the incarnation.
    pub fn incarnation(mut self, incarnation: u64) -> Self {
        self.batch.identity.incarnation = incarnation;
        self
    }

    /// Sets the cluster identity (see [`AgentIdentity::cluster_identity`]).
    pub fn cluster_identity(mut self, identity: &str) -> Self {
        self.batch.identity.cluster_identity = Some(identity.to_owned());
        self
    }

    /// Sets `sent_at_ms`.
    pub fn sent_at(mut self, sent_at_ms: i64) -> Self {
        self.batch.sent_at_ms = sent_at_ms;
        self
    }

    /// Sets the dropped running totals.
    pub fn dropped(mut self, dropped: DroppedCounts) -> Self {
        self.batch.dropped = dropped;
        self
    }

    /// Adds any event.
    pub fn event(mut self, at_ms: i64, body: EventBody) -> Self {
        self.batch.events.push(Event { at_ms, body });
        self
    }

    /// Adds a membership event built by `kind` (`EventBody::MemberUp`, …) for a member
    /// (incarnation uid 1).
    pub fn member(
        self,
        at_ms: i64,
        kind: fn(MemberChange) -> EventBody,
        address: &str,
        status: MemberStatus,
        roles: &[&str],
    ) -> Self {
        self.member_incarnation(at_ms, kind, address, 1, status, roles)
    }

    /// Adds a membership event built by `kind` for incarnation `uid` of a member.
    pub fn member_incarnation(
        self,
        at_ms: i64,
        kind: fn(MemberChange) -> EventBody,
        address: &str,
        uid: u64,
        status: MemberStatus,
        roles: &[&str],
    ) -> Self {
        let change = MemberChange {
            member: MemberInfo {
                address: address.to_owned(),
                uid,
                status,
                roles: roles.iter().map(|r| (*r).to_owned()).collect(),
            },
            previous_status: None,
            observers: Vec::new(),
        };
        self.event(at_ms, kind(change))
    }

    /// Adds a dead letter (from `/user/sender`, because the recipient stopped).
    pub fn dead_letter(self, at_ms: i64, recipient: &str, message_type: &str) -> Self {
        self.dead_letter_because(at_ms, recipient, message_type, "recipient stopped")
    }

    /// Adds a dead letter (from `/user/sender`) with its reason.
    pub fn dead_letter_because(
        self,
        at_ms: i64,
        recipient: &str,
        message_type: &str,
        reason: &str,
    ) -> Self {
        self.event(
            at_ms,
            EventBody::DeadLetter(DeadLetterEvent {
                recipient: recipient.to_owned(),
                sender: Some("/user/sender".to_owned()),
                message_type: message_type.to_owned(),
                reason: reason.to_owned(),
            }),
        )
    }

    /// Adds a depth tick with `(path, router, depth)` samples.
    pub fn depth_tick(mut self, at_ms: i64, samples: &[(&str, Option<&str>, u32)]) -> Self {
        self.batch.depth_samples.push(DepthTick {
            at_ms,
            samples: samples
                .iter()
                .map(|(path, router, depth)| DepthSample {
                    path: (*path).to_owned(),
                    router: router.map(str::to_owned),
                    depth: *depth,
                })
                .collect(),
        });
        self
    }

    /// The batch.
    #[must_use]
    pub fn build(self) -> ReportBatch {
        self.batch
    }
}

#[cfg(test)]
mod tests {
    use super::with_database;

    #[test]
    fn database_name_is_replaced_and_query_kept() {
        assert_eq!(
            with_database("postgres://u:p@h:5432/postgres?sslmode=disable", "x"),
            "postgres://u:p@h:5432/x?sslmode=disable"
        );
        assert_eq!(with_database("postgres://h", "x"), "postgres://h/x");
    }
}

/// A minimal blocking HTTP/1.1 client with keep-alive, enough to drive the server from tests
/// and the benchmark without an HTTP client crate.
#[derive(Debug)]
pub struct HttpClient {
    addr: std::net::SocketAddr,
    stream: Option<std::io::BufReader<std::net::TcpStream>>,
}

/// A response: status and body.
#[derive(Debug, Clone)]
pub struct HttpResponse {
    /// Status code.
    pub status: u16,
    /// Body as text.
    pub body: String,
    /// The `Retry-After` header, if any.
    pub retry_after: Option<String>,
}

impl HttpClient {
    /// A client for the server at `addr` (connects lazily).
    #[must_use]
    pub fn new(addr: std::net::SocketAddr) -> Self {
        Self { addr, stream: None }
    }

    /// Sends one request; reconnects once if the kept-alive connection was closed.
    pub fn request(
        &mut self,
        method: &str,
        path: &str,
        bearer: Option<&str>,
        body: &[u8],
    ) -> std::io::Result<HttpResponse> {
        let authorization = bearer.map(|token| format!("Bearer {token}"));
        let headers: Vec<(&str, &str)> = authorization
            .as_deref()
            .map(|value| ("Authorization", value))
            .into_iter()
            .collect();
        self.request_with_headers(method, path, &headers, body)
    }

    /// Sends one request with extra headers; reconnects once if the kept-alive connection was
    /// closed.
    pub fn request_with_headers(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> std::io::Result<HttpResponse> {
        match self.try_request(method, path, headers, body) {
            Ok(response) => Ok(response),
            Err(_) => {
                self.stream = None;
                self.try_request(method, path, headers, body)
            }
        }
    }

    fn try_request(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> std::io::Result<HttpResponse> {
        use std::io::{BufRead, Read, Write};
        if self.stream.is_none() {
            let stream = std::net::TcpStream::connect(self.addr)?;
            stream.set_nodelay(true)?;
            self.stream = Some(std::io::BufReader::new(stream));
        }
        let reader = self.stream.as_mut().expect("connected above");
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
            self.addr,
            body.len()
        );
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        let stream = reader.get_mut();
        stream.write_all(head.as_bytes())?;
        stream.write_all(body)?;
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "connection closed",
            ));
        }
        let status = line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| std::io::Error::other(format!("bad status line {line:?}")))?;
        let mut length = 0usize;
        let mut close = false;
        let mut retry_after = None;
        loop {
            line.clear();
            reader.read_line(&mut line)?;
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                let value = value.trim();
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.parse().unwrap_or(0);
                } else if name.eq_ignore_ascii_case("retry-after") {
                    retry_after = Some(value.to_owned());
                } else if name.eq_ignore_ascii_case("connection")
                    && value.eq_ignore_ascii_case("close")
                {
                    close = true;
                }
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body)?;
        if close {
            self.stream = None;
        }
        Ok(HttpResponse {
            status,
            body: String::from_utf8_lossy(&body).into_owned(),
            retry_after,
        })
    }
}

/// Runs each named `async fn(Store)` of the calling test file once on PostgreSQL
/// ([`TestDatabase`](crate::testing::TestDatabase)) and once on SQLite ([`TestSqliteFile`](crate::testing::TestSqliteFile)), as `postgres::<name>` and
/// `sqlite::<name>`; the store is closed after each.
///
/// ```text
/// troupe_server::on_every_store!(a_claim_about_the_api, another_claim);
/// async fn a_claim_about_the_api(store: troupe_server::store::Store) { /* … */ }
/// ```
#[macro_export]
macro_rules! on_every_store {
    ($($name:ident),* $(,)?) => {
        mod postgres {
            $(
                #[actix_web::test]
                async fn $name() {
                    let db = $crate::testing::TestDatabase::create().await;
                    let store = db.store().await.expect("store");
                    super::$name(store.clone()).await;
                    store.close().await;
                }
            )*
        }
        mod sqlite {
            $(
                #[actix_web::test]
                async fn $name() {
                    let file = $crate::testing::TestSqliteFile::new();
                    let store = file.store().await.expect("store");
                    super::$name(store.clone()).await;
                    store.close().await;
                }
            )*
        }
    };
}
