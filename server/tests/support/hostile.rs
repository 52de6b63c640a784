//! Hostile input shared by the server's tests: the corpus of `tests/hostile/` (one place for
//! every hostile string; its README says what each file holds) and report batches that put a
//! payload into every user-controlled field.

#![allow(dead_code)]

use troupe_protocol::{
    AgentHealth, AgentMeta, DeadLetterEvent, EventBody, HandOverTimedOut, HealthChange,
    LeaderChange, LeaseChange, MemberChange, MemberInfo, MemberStatus, ReportBatch, RouteesChange,
    RouterStarted, RoutingStrategy, SingletonInstance,
};
use troupe_server::testing::BatchBuilder;

/// A member change of `address`.
pub(crate) fn member(address: &str, status: MemberStatus, roles: &[&str]) -> MemberChange {
    MemberChange {
        member: MemberInfo {
            address: address.to_owned(),
            uid: 7,
            status,
            roles: roles.iter().map(|r| (*r).to_owned()).collect(),
        },
        previous_status: None,
        observers: Vec::new(),
    }
}

/// One file of the corpus in `tests/hostile/` (its README says what each holds).
struct CorpusFile {
    name: &'static str,
    text: &'static str,
}

macro_rules! corpus {
    ($($name:literal),* $(,)?) => {
        [$(CorpusFile {
            name: $name,
            text: include_str!(concat!("../../../tests/hostile/", $name)),
        }),*]
    };
}

/// Every payload file, read at compile time; [`corpus_is_complete`] checks the folder holds no
/// other (a new file is read, not forgotten).
const FILES: [CorpusFile; 8] = corpus!(
    "xss-html.txt",
    "xss-attribute.txt",
    "xss-script.txt",
    "xss-url.txt",
    "sql.txt",
    "paths-headers.txt",
    "control.jsonl",
    "numbers.txt",
);

/// A hostile string and the corpus file it comes from (for failure messages).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Payload {
    pub(crate) file: &'static str,
    pub(crate) text: String,
}

impl std::fmt::Display for Payload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?} (tests/hostile/{})", self.text, self.file)
    }
}

fn lines(file: &CorpusFile) -> Vec<String> {
    let lines = file
        .text
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with("# "));
    if file.name.ends_with(".jsonl") {
        lines
            .map(|l| {
                serde_json::from_str::<String>(l)
                    .unwrap_or_else(|e| panic!("tests/hostile/{}: {e}: {l}", file.name))
            })
            .filter(|s| !s.starts_with("# "))
            .collect()
    } else {
        lines.map(str::to_owned).collect()
    }
}

/// Fails unless `tests/hostile/` holds exactly the files this module reads (and its README).
pub(crate) fn corpus_is_complete() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/hostile");
    let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name != "README.md")
        .collect();
    on_disk.sort();
    let mut read: Vec<String> = FILES.iter().map(|f| f.name.to_owned()).collect();
    read.sort();
    assert_eq!(
        on_disk, read,
        "tests/hostile/ and the files server/tests/support/hostile.rs reads differ"
    );
}

/// The XSS payloads (`tests/hostile/xss-*.txt`: HTML, attribute, script and URL contexts).
pub(crate) fn payloads() -> Vec<String> {
    let payloads: Vec<String> = FILES
        .iter()
        .filter(|f| f.name.starts_with("xss-"))
        .flat_map(lines)
        .collect();
    assert!(
        payloads.len() >= 50,
        "the corpus holds at least 50 payloads"
    );
    payloads
}

/// Every hostile string of the corpus: XSS, SQL and LIKE metacharacters, path traversal and
/// header injection, control characters and odd Unicode (NUL included).
pub(crate) fn strings() -> Vec<Payload> {
    FILES
        .iter()
        .filter(|f| f.name != "numbers.txt")
        .flat_map(|f| {
            lines(f)
                .into_iter()
                .map(|text| Payload { file: f.name, text })
        })
        .collect()
}

/// Numbers at the edges, as JSON number text (`tests/hostile/numbers.txt`).
pub(crate) fn numbers() -> Vec<String> {
    FILES
        .iter()
        .filter(|f| f.name == "numbers.txt")
        .flat_map(lines)
        .collect()
}

/// How askama writes `s` into HTML.
pub(crate) fn escaped(s: &str) -> String {
    s.replace('&', "&#38;")
        .replace('<', "&#60;")
        .replace('>', "&#62;")
        .replace('"', "&#34;")
        .replace('\'', "&#39;")
}

pub(crate) fn encoded(s: &str) -> String {
    troupe_web::format::encode(s)
}

/// One agent whose every user-controlled field is `p`.
pub(crate) fn hostile_batch(cluster: &str, p: &str, t: i64) -> ReportBatch {
    let mut batch = BatchBuilder::new(cluster, p, 1)
        .sent_at(t)
        .event(
            t - 50_000,
            EventBody::MemberUp(member(p, MemberStatus::Up, &[p])),
        )
        .event(
            t - 49_000,
            EventBody::MemberUnreachable(MemberChange {
                observers: vec![p.to_owned()],
                ..member(p, MemberStatus::Up, &[p])
            }),
        )
        .event(
            t - 48_000,
            EventBody::LeaderChanged(LeaderChange {
                leader: Some(p.to_owned()),
            }),
        )
        .event(
            t - 47_000,
            EventBody::SingletonStarted(SingletonInstance {
                singleton: p.to_owned(),
                role: Some(p.to_owned()),
                host: p.to_owned(),
                backoff_ms: Some(10),
                reason: Some(p.to_owned()),
            }),
        )
        .event(
            t - 46_000,
            EventBody::SingletonHandOverTimedOut(HandOverTimedOut {
                singleton: p.to_owned(),
                role: Some(p.to_owned()),
                new_host: p.to_owned(),
                silent_peers: vec![p.to_owned()],
                duration_ms: 10,
            }),
        )
        .event(
            t - 45_000,
            EventBody::LeaseAcquired(LeaseChange {
                singleton: p.to_owned(),
                role: Some(p.to_owned()),
                lease: p.to_owned(),
                holder: Some(p.to_owned()),
                reason: Some(p.to_owned()),
            }),
        )
        .event(
            t - 44_000,
            EventBody::RouterStarted(RouterStarted {
                router: p.to_owned(),
                strategy: RoutingStrategy::Broadcast,
                role: Some(p.to_owned()),
                routee_path: p.to_owned(),
            }),
        )
        .event(
            t - 43_000,
            EventBody::RouteesChanged(RouteesChange {
                router: p.to_owned(),
                strategy: RoutingStrategy::Broadcast,
                routees: vec![p.to_owned()],
            }),
        )
        .event(
            t - 42_000,
            EventBody::DeadLetter(DeadLetterEvent {
                recipient: p.to_owned(),
                sender: Some(p.to_owned()),
                message_type: p.to_owned(),
                reason: p.to_owned(),
            }),
        )
        .event(
            t - 41_000,
            EventBody::AgentHealthChanged(HealthChange {
                health: AgentHealth::Draining,
                reason: Some(p.to_owned()),
            }),
        )
        .depth_tick(t - 5_000, &[(p, Some(p), 9)])
        .build();
    batch.identity.meta = AgentMeta {
        node: Some(p.to_owned()),
    };
    batch
}
