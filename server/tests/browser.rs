//! The dashboard in a real browser: starts the control plane on SQLite, seeds recorded
//! history (and the XSS corpus), then runs `web/e2e/dashboard.mjs` (playwright-core driving
//! Debian's Chromium), which posts more reports and checks what a person sees: a member row
//! appearing live when a node joins, a hand-over in the singleton history, a dead letter in the
//! table, the live and polling indicator, inert XSS payloads, and each live update shown within
//! 1 s of its ingest; the overview's cluster map with its marks, a node joining it live, a
//! routee's depth following a report of samples only, the map without JavaScript and at 50
//! members. Screenshots of every page land in `$CARGO_TARGET_DIR/browser-artifacts/`.
//! A second server with `--viewer-token` is driven by `web/e2e/viewer.mjs`: refused without
//! the token, the dashboard and its live stream work with it as the HTTP Basic password.
//!
//! Needs `node`, `/usr/bin/chromium` (or `$CHROMIUM`) and `npm ci` in `web/e2e`; `scripts/test`
//! installs them. Without them this test fails and says what is missing.

#[path = "support/hostile.rs"]
mod hostile;

use std::path::{Path, PathBuf};
use std::time::Duration;

use troupe_protocol::{
    AgentHealth, AgentMeta, DroppedCounts, EventBody, HandOverCompleted, HealthChange,
    LeaderChange, MemberStatus, ReportBatch, RouteesChange, RouterStarted, RoutingStrategy,
    SingletonInstance,
};
use troupe_server::testing::{BatchBuilder, HttpClient, TestSqliteFile};
use troupe_server::{App, Config};

const TOKEN: &str = "browser-test-token";
const XSS_CLUSTER: &str = "xss<img src=x onerror=alert(1)>";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn artifacts() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target"));
    target.join("browser-artifacts")
}

fn now() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

fn started(singleton: &str, host: &str) -> EventBody {
    EventBody::SingletonStarted(SingletonInstance {
        singleton: singleton.to_owned(),
        role: Some("worker".to_owned()),
        host: host.to_owned(),
        backoff_ms: None,
        reason: None,
    })
}

/// Fifty minutes of a cluster's recorded history: two long-lived members (one leads), a third
/// that joins, becomes unreachable for a while and leaves, a singleton, a router with mailbox
/// depth samples, and dead letters in bursts.
fn history(t: i64) -> Vec<ReportBatch> {
    let (a, b, e) = ("10.0.0.1:2552", "10.0.0.2:2552", "10.0.0.5:2552");
    let ago = |minutes: f64| t - (minutes * 60_000.0) as i64;
    let health = |health| {
        EventBody::AgentHealthChanged(HealthChange {
            health,
            reason: None,
        })
    };
    let unreachable = |address: &str, observer: &str| {
        EventBody::MemberUnreachable(troupe_protocol::MemberChange {
            observers: vec![observer.to_owned()],
            ..hostile::member(address, MemberStatus::Up, &["worker"])
        })
    };
    let mut first = BatchBuilder::new("prod", a, 1)
        .sent_at(t)
        .member(
            ago(50.0),
            EventBody::MemberJoined,
            a,
            MemberStatus::Joining,
            &["worker"],
        )
        .member(
            ago(49.5),
            EventBody::MemberUp,
            a,
            MemberStatus::Up,
            &["worker"],
        )
        .event(
            ago(49.5),
            EventBody::LeaderChanged(LeaderChange {
                leader: Some(a.to_owned()),
            }),
        )
        .event(ago(49.4), health(AgentHealth::Ready))
        .member(
            ago(42.0),
            EventBody::MemberJoined,
            b,
            MemberStatus::Joining,
            &["worker", "api"],
        )
        .member(
            ago(41.5),
            EventBody::MemberUp,
            b,
            MemberStatus::Up,
            &["worker", "api"],
        )
        .event(ago(41.0), started("billing", a))
        .event(
            ago(40.0),
            EventBody::RouterStarted(RouterStarted {
                router: "/user/orders".to_owned(),
                strategy: RoutingStrategy::SmallestMailbox,
                role: Some("worker".to_owned()),
                routee_path: "/user/order-worker".to_owned(),
            }),
        )
        .event(
            ago(39.9),
            EventBody::RouteesChanged(RouteesChange {
                router: "/user/orders".to_owned(),
                strategy: RoutingStrategy::SmallestMailbox,
                routees: vec![a.to_owned(), b.to_owned()],
            }),
        )
        .member(
            ago(35.0),
            EventBody::MemberJoined,
            e,
            MemberStatus::Joining,
            &["batch"],
        )
        .member(
            ago(34.5),
            EventBody::MemberUp,
            e,
            MemberStatus::Up,
            &["batch"],
        )
        .event(ago(28.0), unreachable(e, a))
        .event(
            ago(25.0),
            EventBody::MemberReachable(hostile::member(e, MemberStatus::Up, &["batch"])),
        )
        .member(
            ago(18.0),
            EventBody::MemberLeft,
            e,
            MemberStatus::Leaving,
            &["batch"],
        )
        .member(
            ago(17.0),
            EventBody::MemberExited,
            e,
            MemberStatus::Exiting,
            &["batch"],
        )
        .member(
            ago(16.5),
            EventBody::MemberRemoved,
            e,
            MemberStatus::Removed,
            &["batch"],
        )
        .dropped(DroppedCounts {
            depth_samples: 12,
            ..DroppedCounts::default()
        });
    for i in 0..60 {
        // Bursts around 30 and 10 minutes ago.
        let minutes = if i < 35 {
            31.0 - f64::from(i) * 0.06
        } else {
            11.0 - f64::from(i - 35) * 0.1
        };
        first = first.dead_letter(ago(minutes), "/user/payments", "PaymentRequested");
    }
    for i in 0..100 {
        let depth = (20.0 + 18.0 * (f64::from(i) / 6.0).sin()) as u32;
        first = first.depth_tick(
            ago(0.2) - i64::from(99 - i) * 29_000,
            &[
                ("/user/order-worker", Some("/user/orders"), depth),
                ("/user/audit", None, depth / 3),
            ],
        );
    }
    let mut second = BatchBuilder::new("prod", b, 1)
        .sent_at(t)
        .event(ago(41.4), health(AgentHealth::Ready));
    for i in 0..80 {
        second = second.depth_tick(
            ago(0.3) - i64::from(79 - i) * 29_000,
            &[("/user/order-worker", Some("/user/orders"), (i % 12) * 3)],
        );
    }
    let machine = |mut batch: ReportBatch| {
        batch.identity.meta = AgentMeta {
            node: Some("rack-a".to_owned()),
        };
        batch
    };
    vec![machine(first.build()), machine(second.build())]
}

/// A cluster `fifty` of 50 members, three to a machine: the first leads and hosts a
/// singleton, the second cannot reach the third, every member is a routee with a depth.
fn fifty(t: i64) -> Vec<ReportBatch> {
    let all: Vec<String> = (0..50).map(|i| format!("10.1.0.{}:2552", i + 1)).collect();
    let mut batches = Vec::new();
    for (i, me) in all.iter().enumerate() {
        let mut b = BatchBuilder::new("fifty", me, 1).sent_at(t).event(
            t - 1_000,
            EventBody::AgentHealthChanged(HealthChange {
                health: AgentHealth::Ready,
                reason: None,
            }),
        );
        if i == 0 {
            for a in &all {
                b = b.member(
                    t - 60_000,
                    EventBody::MemberUp,
                    a,
                    MemberStatus::Up,
                    &["worker"],
                );
            }
            b = b
                .event(
                    t - 59_000,
                    EventBody::LeaderChanged(LeaderChange {
                        leader: Some(me.clone()),
                    }),
                )
                .event(t - 58_000, started("billing", me))
                .event(
                    t - 57_000,
                    EventBody::RouteesChanged(RouteesChange {
                        router: "/user/orders".to_owned(),
                        strategy: RoutingStrategy::SmallestMailbox,
                        routees: all.clone(),
                    }),
                );
        }
        if i == 1 {
            b = b.event(
                t - 30_000,
                EventBody::MemberUnreachable(troupe_protocol::MemberChange {
                    observers: vec![me.clone()],
                    ..hostile::member(&all[2], MemberStatus::Up, &["worker"])
                }),
            );
        }
        let depth = u32::try_from(i * 7 % 40).unwrap();
        let mut batch = b
            .depth_tick(
                t - 2_000,
                &[("/user/order-worker", Some("/user/orders"), depth)],
            )
            .build();
        batch.identity.meta = AgentMeta {
            node: Some(format!("m-{:02}", i / 3)),
        };
        batches.push(batch);
    }
    batches
}

/// The batches the browser script posts while it watches.
fn live_batches(t: i64) -> Vec<(&'static str, ReportBatch)> {
    let c = "10.0.0.3:2552";
    vec![
        (
            "join.json",
            BatchBuilder::new("prod", c, 1)
                .sent_at(t)
                .member(t, EventBody::MemberUp, c, MemberStatus::Up, &["worker"])
                .event(
                    t,
                    EventBody::AgentHealthChanged(HealthChange {
                        health: AgentHealth::Ready,
                        reason: None,
                    }),
                )
                .build(),
        ),
        (
            "hand-over.json",
            BatchBuilder::new("prod", c, 2)
                .sent_at(t)
                .event(
                    t + 1,
                    EventBody::SingletonHandOverCompleted(HandOverCompleted {
                        singleton: "billing".to_owned(),
                        role: Some("worker".to_owned()),
                        new_host: c.to_owned(),
                        duration_ms: 840,
                    }),
                )
                .event(t + 2, started("billing", c))
                .build(),
        ),
        ("depth.json", {
            let mut batch = BatchBuilder::new("prod", "10.0.0.2:2552", 2)
                .sent_at(t)
                .depth_tick(t + 5, &[("/user/order-worker", Some("/user/orders"), 97)])
                .build();
            batch.identity.meta = AgentMeta {
                node: Some("rack-a".to_owned()),
            };
            batch
        }),
        (
            "dead-letter.json",
            BatchBuilder::new("prod", c, 3)
                .sent_at(t)
                .dead_letter(t + 3, "/user/live-check", "LiveCheck")
                .build(),
        ),
        (
            "late-join.json",
            BatchBuilder::new("prod", "10.0.0.4:2552", 1)
                .sent_at(t)
                .member(
                    t + 4,
                    EventBody::MemberUp,
                    "10.0.0.4:2552",
                    MemberStatus::Up,
                    &["api"],
                )
                .build(),
        ),
    ]
}

fn require(what: &str, ok: bool, how: &str) {
    assert!(ok, "the browser test needs {what}: {how}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_shows_live_changes_and_renders_xss_payloads_inert_in_chromium() {
    let e2e = repo().join("web/e2e");
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".to_owned());
    require(
        "Chromium",
        Path::new(&chromium).exists(),
        "apt-get install chromium (scripts/test does)",
    );
    require(
        "playwright-core",
        e2e.join("node_modules/playwright-core").exists(),
        "run `npm ci` in web/e2e (scripts/test does)",
    );

    let file = TestSqliteFile::new();
    let mut config = Config::defaults();
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.sqlite_path = file.path().to_owned();
    config.ingest_token = Some(TOKEN.to_owned());
    config.workers = Some(2);
    config.shutdown_timeout_secs = 2;
    let app = App::build(config).await.expect("server starts");
    let addr = app.local_addr();
    let trigger = app.shutdown_trigger();
    let server = tokio::spawn(app.run());

    let t = now();
    let batches = tempdir();
    let payloads = hostile::payloads();
    let mut seed = history(t);
    seed.extend(fifty(t));
    seed.extend(
        payloads
            .iter()
            .map(|p| hostile::hostile_batch(XSS_CLUSTER, p, t)),
    );
    for (name, batch) in live_batches(t) {
        std::fs::write(batches.join(name), serde_json::to_vec(&batch).unwrap()).unwrap();
    }
    tokio::task::spawn_blocking(move || {
        let mut client = HttpClient::new(addr);
        for batch in seed {
            let body = serde_json::to_vec(&batch).unwrap();
            let resp = client
                .request("POST", "/api/v1/ingest", Some(TOKEN), &body)
                .expect("ingest");
            assert_eq!(resp.status, 200, "{}", resp.body);
        }
    })
    .await
    .unwrap();

    let artifacts = artifacts();
    let xss_nodes: Vec<&String> = payloads.iter().step_by(8).collect();
    let run = tokio::process::Command::new("node")
        .arg(e2e.join("dashboard.mjs"))
        .current_dir(&e2e)
        .env("TROUPE_URL", format!("http://{addr}"))
        .env("TROUPE_INGEST_TOKEN", TOKEN)
        .env("TROUPE_BATCHES", &batches)
        .env("TROUPE_ARTIFACTS", &artifacts)
        .env("TROUPE_XSS_CLUSTER", XSS_CLUSTER)
        .env(
            "TROUPE_XSS_NODES",
            serde_json::to_string(&xss_nodes).unwrap(),
        )
        .env("CHROMIUM", &chromium)
        .env("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(100), run)
        .await
        .expect("the browser script finishes within 100 s")
        .expect("node runs (install Node.js)");
    trigger.shutdown();
    let _ = tokio::time::timeout(Duration::from_secs(10), server).await;
    let _ = std::fs::remove_dir_all(&batches);

    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let results: serde_json::Value = stdout
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| {
            panic!("no results from the browser script\nstdout: {stdout}\nstderr: {stderr}")
        });
    println!("browser results: {results:#}");
    assert!(
        output.status.success(),
        "browser checks failed: {:#}\nstderr: {stderr}",
        results["problems"]
    );
    let screenshots = results["screenshots"].as_array().expect("screenshots");
    for page in [
        "overview",
        "singletons",
        "dead-letters",
        "timeline",
        "routers",
        "node",
        "overview-no-script",
        "overview-50-nodes",
    ] {
        let path = artifacts.join(format!("{page}.png"));
        assert!(
            screenshots.iter().any(|s| s.as_str() == path.to_str()) && path.exists(),
            "a screenshot of {page} at {}",
            path.display()
        );
    }
    for (what, ms) in results["latency_ms"].as_object().expect("latencies") {
        println!("{what}: {ms} ms from ingest to the page");
    }
}

fn tempdir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("troupe-browser-{}-{}", std::process::id(), now()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// With `--viewer-token` set, what a person with Chromium gets: the dashboard and its live
/// stream refused (401 with a Basic challenge) without the token and with a wrong one; with the
/// token as the HTTP Basic password (what the browser's sign-in prompt sends), the page, the
/// live indicator and a member that joins while the page is open. `web/e2e/viewer.mjs` drives
/// the browser.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_viewer_token_chromium_is_refused_without_it_and_sees_the_live_dashboard_with_it() {
    const VIEWER: &str = "viewer-browser-token";
    let e2e = repo().join("web/e2e");
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".to_owned());
    require(
        "Chromium",
        Path::new(&chromium).exists(),
        "apt-get install chromium (scripts/test does)",
    );
    require(
        "playwright-core",
        e2e.join("node_modules/playwright-core").exists(),
        "run `npm ci` in web/e2e (scripts/test does)",
    );

    let file = TestSqliteFile::new();
    let mut config = Config::defaults();
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.sqlite_path = file.path().to_owned();
    config.ingest_token = Some(TOKEN.to_owned());
    config.viewer_token = Some(VIEWER.to_owned());
    config.workers = Some(2);
    config.shutdown_timeout_secs = 2;
    let app = App::build(config).await.expect("server starts");
    let addr = app.local_addr();
    let trigger = app.shutdown_trigger();
    let server = tokio::spawn(app.run());

    let t = now();
    let member = |address: &str, sequence: u64| {
        BatchBuilder::new("guarded", address, sequence)
            .sent_at(t)
            .member(
                t,
                EventBody::MemberUp,
                address,
                MemberStatus::Up,
                &["worker"],
            )
            .build()
    };
    let seed = member("10.0.0.8:2552", 1);
    let batches = tempdir();
    let live = batches.join("join.json");
    std::fs::write(
        &live,
        serde_json::to_vec(&member("10.0.0.9:2552", 1)).unwrap(),
    )
    .unwrap();
    tokio::task::spawn_blocking(move || {
        let mut client = HttpClient::new(addr);
        let resp = client
            .request(
                "POST",
                "/api/v1/ingest",
                Some(TOKEN),
                &serde_json::to_vec(&seed).unwrap(),
            )
            .expect("ingest");
        assert_eq!(resp.status, 200, "{}", resp.body);
    })
    .await
    .unwrap();

    let run = tokio::process::Command::new("node")
        .arg(e2e.join("viewer.mjs"))
        .current_dir(&e2e)
        .env("TROUPE_URL", format!("http://{addr}"))
        .env("TROUPE_INGEST_TOKEN", TOKEN)
        .env("TROUPE_VIEWER_TOKEN", VIEWER)
        .env("TROUPE_BATCH", &live)
        .env("CHROMIUM", &chromium)
        .env("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("the browser script finishes within 60 s")
        .expect("node runs (install Node.js)");
    trigger.shutdown();
    let _ = tokio::time::timeout(Duration::from_secs(10), server).await;
    let _ = std::fs::remove_dir_all(&batches);

    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let results: serde_json::Value = stdout
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| {
            panic!("no results from the browser script\nstdout: {stdout}\nstderr: {stderr}")
        });
    println!("viewer results: {results:#}");
    assert!(
        output.status.success(),
        "viewer checks failed: {:#}\nstderr: {stderr}",
        results["problems"]
    );
    let statuses = &results["statuses"];
    for (what, expected) in [
        ("anonymous_page", 401),
        ("anonymous_stream", 401),
        ("wrong_page", 401),
        ("viewer_page", 200),
        ("viewer_stream", 200),
    ] {
        assert_eq!(statuses[what], expected, "{what}: {results:#}");
    }
}

/// The audit trail as a person sees it: with member operations on, `web/e2e/audit.mjs` asks
/// for a leave through `PUT /api/v1/clusters/prod/members/{a}` and finds the accepted entry on
/// the audit page (the admin token's id, the operation's id, never the token), a down with a
/// wrong token listed as refused, the node page's link to its entries, and a hostile cluster's
/// audit page (the XSS corpus as targets and reasons) running nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leave_through_the_management_api_appears_on_the_audit_page_in_chromium() {
    const ADMIN: &str = "audit-browser-admin-token";
    let e2e = repo().join("web/e2e");
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".to_owned());
    require(
        "Chromium",
        Path::new(&chromium).exists(),
        "apt-get install chromium (scripts/test does)",
    );
    require(
        "playwright-core",
        e2e.join("node_modules/playwright-core").exists(),
        "run `npm ci` in web/e2e (scripts/test does)",
    );

    let file = TestSqliteFile::new();
    let mut config = Config::defaults();
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.sqlite_path = file.path().to_owned();
    config.ingest_token = Some(TOKEN.to_owned());
    config.admin_token = Some(ADMIN.to_owned());
    config.enable_member_operations = true;
    config.workers = Some(2);
    config.shutdown_timeout_secs = 2;
    let app = App::build(config).await.expect("server starts");
    let addr = app.local_addr();
    let trigger = app.shutdown_trigger();
    let server = tokio::spawn(app.run());

    let t = now();
    let member = "10.0.0.2:2552";
    let payloads = hostile::payloads();
    let mut seed = history(t);
    seed.push(
        BatchBuilder::new(XSS_CLUSTER, "10.0.0.1:2552", 1)
            .sent_at(t)
            .member(
                t,
                EventBody::MemberUp,
                "10.0.0.1:2552",
                MemberStatus::Up,
                &[],
            )
            .build(),
    );
    let xss_path = hostile::encoded(XSS_CLUSTER);
    tokio::task::spawn_blocking(move || {
        let mut client = HttpClient::new(addr);
        for batch in seed {
            let body = serde_json::to_vec(&batch).unwrap();
            let resp = client
                .request("POST", "/api/v1/ingest", Some(TOKEN), &body)
                .expect("ingest");
            assert_eq!(resp.status, 200, "{}", resp.body);
        }
        // Every payload as the target of a leave: refused (no such member), the payload kept
        // as the target and repeated in the reason.
        for p in &payloads {
            let path = format!(
                "/api/v1/clusters/{xss_path}/members/{}",
                hostile::encoded(p)
            );
            let resp = client
                .request("DELETE", &path, Some(ADMIN), b"")
                .expect("leave");
            assert!(
                resp.status == 404 || resp.status == 400,
                "{p:?}: {} {}",
                resp.status,
                resp.body
            );
        }
    })
    .await
    .unwrap();

    let artifacts = artifacts();
    let run = tokio::process::Command::new("node")
        .arg(e2e.join("audit.mjs"))
        .current_dir(&e2e)
        .env("TROUPE_URL", format!("http://{addr}"))
        .env("TROUPE_ADMIN_TOKEN", ADMIN)
        .env(
            "TROUPE_ADMIN_ID",
            troupe_server::auth::token_id("admin", ADMIN),
        )
        .env("TROUPE_MEMBER", member)
        .env("TROUPE_XSS_CLUSTER", XSS_CLUSTER)
        .env("TROUPE_ARTIFACTS", &artifacts)
        .env("CHROMIUM", &chromium)
        .env("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("the browser script finishes within 60 s")
        .expect("node runs (install Node.js)");
    trigger.shutdown();
    let _ = tokio::time::timeout(Duration::from_secs(10), server).await;

    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let results: serde_json::Value = stdout
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| {
            panic!("no results from the browser script\nstdout: {stdout}\nstderr: {stderr}")
        });
    println!("audit results: {results:#}");
    assert!(
        output.status.success(),
        "audit checks failed: {:#}\nstderr: {stderr}",
        results["problems"]
    );
    for page in ["audit", "xss-audit"] {
        assert!(
            artifacts.join(format!("{page}.png")).exists(),
            "a screenshot of {page}"
        );
    }
}
