//! Akka Management's cluster routes on the real `troupe-agent` binary's management listener:
//! each node answers with its own view (`selfNode`, `leader`, `oldest`, `unreachable` with
//! `observedBy`, `nodeUid` as a string), finds one member by its full address raw or
//! percent-encoded, refuses member operations without `--management-token` (403) or without the
//! bearer token (401), answers an unknown operation 400 and an unknown member 404 as Akka does,
//! and with the token downs an unreachable member, which then leaves the view. With the demo
//! workload, each node says what its singleton manager is doing: exactly one hosts, since
//! when, both elect the same host, nobody waits for acknowledgments once it settled. The
//! domain-event stream resumes after a disconnect with `Last-Event-ID`: none missed, none
//! repeated.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

const WAIT: Duration = Duration::from_secs(30);
const SECRET: &str = "management routes secret, long enough";
const TOKEN: &str = "operations-token";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A running agent, killed if the test fails first.
struct AgentProcess {
    child: Child,
    management: String,
    address: String,
}

impl AgentProcess {
    fn start(port: u16, seed: u16, token: Option<&str>) -> Self {
        Self::start_with(port, seed, token, &[])
    }

    fn start_with(port: u16, seed: u16, token: Option<&str>, extra: &[&str]) -> Self {
        let mut command = Command::new(env!("CARGO_BIN_EXE_troupe-agent"));
        command
            .args(extra)
            .args(["--system", "mgmt", "--secret", SECRET])
            .args(["--bind", &format!("127.0.0.1:{port}")])
            .args(["--seed", &format!("troupe://mgmt@127.0.0.1:{seed}")])
            .args(["--management-bind", "127.0.0.1:0", "--events-json"])
            // Only the operator downs here: no automatic downing during the test.
            .args(["--down-after-ms", "600000"])
            .env_remove("TROUPE_CONTROL_PLANE_URL")
            .env_remove("TROUPE_MANAGEMENT_TOKEN")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        if let Some(token) = token {
            command.args(["--management-token", token]);
        }
        let mut child = command.spawn().expect("start troupe-agent");
        let mut first = String::new();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        stdout.read_line(&mut first).unwrap();
        std::thread::spawn(move || for _ in stdout.lines() {});
        let line: Value = serde_json::from_str(&first).unwrap();
        assert_eq!(line["event"], "AgentStarted", "{first}");
        Self {
            child,
            management: line["management"].as_str().unwrap().to_owned(),
            address: format!("troupe://mgmt@127.0.0.1:{port}"),
        }
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn call(
    client: &reqwest::Client,
    method: reqwest::Method,
    url: String,
    token: Option<&str>,
    form: Option<&str>,
) -> (u16, Value) {
    let mut request = client.request(method, url);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(form) = form {
        request = request
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form.to_owned());
    }
    let response = request.send().await.expect("management listener answers");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn get(client: &reqwest::Client, url: String) -> (u16, Value) {
    call(client, reqwest::Method::GET, url, None, None).await
}

/// `GET /cluster/members` until `want` holds; the last answer on timeout.
async fn members_until(
    client: &reqwest::Client,
    agent: &AgentProcess,
    what: &str,
    want: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (status, body) = get(client, format!("{}/cluster/members", agent.management)).await;
        assert_eq!(status, 200, "{body}");
        if want(&body) {
            return body;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never: {what}; last answer: {body:#}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'.' | b'-' | b'_' => (b as char).to_string(),
            other => format!("%{other:02X}"),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_agent_serves_its_own_view_in_akkas_shapes_and_downs_only_with_its_token() {
    let client = reqwest::Client::new();
    let (first_port, second_port) = (free_port(), free_port());
    let first = AgentProcess::start(first_port, first_port, None);
    let second = AgentProcess::start(second_port, first_port, Some(TOKEN));
    let both_up = |body: &Value| {
        body["members"].as_array().is_some_and(|members| {
            members.len() == 2 && members.iter().all(|m| m["status"] == "Up")
        })
    };
    let view = members_until(&client, &first, "both members up", both_up).await;
    let oldest = first.address.clone().min(second.address.clone());
    assert_eq!(view["selfNode"], first.address.as_str());
    assert_eq!(view["leader"], oldest.as_str());
    assert_eq!(
        view["oldest"],
        oldest.as_str(),
        "the first address-sorted up member"
    );
    assert_eq!(view["unreachable"], serde_json::json!([]));
    assert!(view["oldestPerRole"].is_object(), "{view}");
    for member in view["members"].as_array().unwrap() {
        let uid = member["nodeUid"].as_str().expect("nodeUid is a string");
        assert!(uid.parse::<u64>().is_ok(), "{member}");
        assert!(member["roles"].is_array(), "{member}");
    }
    // Each node's own view: the second says it is itself.
    let other = members_until(&client, &second, "both members up", both_up).await;
    assert_eq!(other["selfNode"], second.address.as_str());

    // One member, by its full address raw or percent-encoded, or host:port.
    for written in [
        second.address.clone(),
        percent_encode(&second.address),
        format!("127.0.0.1:{second_port}"),
    ] {
        let (status, member) = get(
            &client,
            format!("{}/cluster/members/{written}", first.management),
        )
        .await;
        assert_eq!(status, 200, "{written}: {member}");
        assert_eq!(member["node"], second.address.as_str(), "{written}");
        assert_eq!(member["status"], "Up");
    }
    let (status, missing) = get(
        &client,
        format!(
            "{}/cluster/members/troupe://mgmt@127.0.0.1:1",
            first.management
        ),
    )
    .await;
    assert_eq!(status, 404);
    assert_eq!(
        missing["message"],
        "Member [troupe://mgmt@127.0.0.1:1] not found"
    );

    // Mutations: off without a token (403), refused without the right bearer token (401).
    let target = |agent: &AgentProcess, member: &str| {
        format!(
            "{}/cluster/members/{}",
            agent.management,
            percent_encode(member)
        )
    };
    let (status, refused) = call(
        &client,
        reqwest::Method::PUT,
        target(&first, &second.address),
        Some(TOKEN),
        Some("operation=Down"),
    )
    .await;
    assert_eq!(status, 403, "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("--management-token")
    );
    for (token, method) in [
        (None, reqwest::Method::PUT),
        (Some("wrong"), reqwest::Method::PUT),
        (None, reqwest::Method::DELETE),
    ] {
        let (status, body) = call(
            &client,
            method,
            target(&second, &first.address),
            token,
            Some("operation=Down"),
        )
        .await;
        assert_eq!(status, 401, "{body}");
    }
    let (status, body) = call(
        &client,
        reqwest::Method::PUT,
        target(&second, &first.address),
        Some(TOKEN),
        Some("operation=Explode"),
    )
    .await;
    assert_eq!(
        (status, &body["message"]),
        (400, &Value::from("Operation not supported"))
    );
    let (status, _) = call(
        &client,
        reqwest::Method::PATCH,
        format!("{}/cluster/members", second.management),
        Some(TOKEN),
        None,
    )
    .await;
    assert_eq!(status, 405);

    // The first node dies: the second finds it unreachable, observed by itself, and downs it
    // when told to; it then leaves the second's view.
    drop(first);
    let first_address = format!("troupe://mgmt@127.0.0.1:{first_port}");
    let view = members_until(&client, &second, "the dead node unreachable", |body| {
        body["unreachable"]
            .as_array()
            .is_some_and(|u| u.iter().any(|m| m["node"] == first_address.as_str()))
    })
    .await;
    let entry = view["unreachable"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["node"] == first_address.as_str())
        .unwrap();
    assert_eq!(
        entry["observedBy"],
        serde_json::json!([second.address.as_str()]),
        "{view:#}"
    );
    let (status, body) = call(
        &client,
        reqwest::Method::PUT,
        format!("{}/cluster/members/{first_address}", second.management),
        Some(TOKEN),
        Some("operation=down"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["message"], format!("Downing {first_address}"));
    members_until(&client, &second, "the downed node gone", |body| {
        body["members"].as_array().is_some_and(|members| {
            members.len() == 1 && members[0]["node"] == second.address.as_str()
        })
    })
    .await;
    drop(second);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_node_tells_whether_its_singleton_manager_hosts_since_when_and_what_it_waits_for() {
    let client = reqwest::Client::new();
    let started_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let (first_port, second_port) = (free_port(), free_port());
    let first = AgentProcess::start_with(first_port, first_port, None, &["--demo"]);
    let second = AgentProcess::start_with(second_port, first_port, None, &["--demo"]);
    let deadline = tokio::time::Instant::now() + WAIT;
    let (a, b) = loop {
        let (_, a) = get(&client, format!("{}/cluster/singletons", first.management)).await;
        let (_, b) = get(&client, format!("{}/cluster/singletons", second.management)).await;
        let settled = |view: &Value| {
            view["singletons"].as_array().is_some_and(|list| {
                list.len() == 1
                    && list[0]["managerActive"] == true
                    && list[0]["awaitingAcknowledgments"] == serde_json::json!([])
                    && !list[0]["electedHost"].is_null()
            })
        };
        let one_host = [&a, &b]
            .iter()
            .filter(|v| v["singletons"][0]["hosting"] == true)
            .count()
            == 1;
        if settled(&a)
            && settled(&b)
            && one_host
            && a["singletons"][0]["electedHost"] == b["singletons"][0]["electedHost"]
        {
            break (a, b);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the singleton never settled on one host: {a:#} {b:#}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(a["selfNode"], first.address.as_str());
    let (host, other) = if a["singletons"][0]["hosting"] == true {
        (&a, &b)
    } else {
        (&b, &a)
    };
    let hosting = &host["singletons"][0];
    assert_eq!(
        hosting["electedHost"], host["selfNode"],
        "it hosts where it is elected"
    );
    let since = hosting["hostingSinceMs"].as_u64().expect("hosting since");
    assert!(since >= started_ms, "{since} vs {started_ms}");
    assert_eq!(hosting["lease"], Value::Null, "gossip membership: no lease");
    assert_eq!(hosting["latchedOut"], false);
    assert!(hosting["heldMessages"].is_u64());
    assert_eq!(other["singletons"][0]["hostingSinceMs"], Value::Null);
    let name = hosting["name"].as_str().unwrap().to_owned();
    let (status, one) = get(
        &client,
        format!("{}/cluster/singletons/{name}", first.management),
    )
    .await;
    assert_eq!(status, 200, "{one}");
    assert_eq!(one["name"], name.as_str());
    let (status, missing) = get(
        &client,
        format!("{}/cluster/singletons/no-such-singleton", first.management),
    )
    .await;
    assert_eq!(status, 404, "{missing}");
    drop(second);
    drop(first);
}

/// One server-sent event as a client reads it.
#[derive(Debug, Clone, Default)]
struct SseEvent {
    id: Option<String>,
    event: String,
    data: Value,
    /// Comment lines before it (`: …`).
    comments: Vec<String>,
}

impl SseEvent {
    /// The sequence of its id (`<incarnation>-<sequence>`).
    fn sequence(&self) -> u64 {
        let id = self.id.as_deref().expect("every event has an id");
        id.rsplit_once('-').unwrap().1.parse().unwrap()
    }
}

/// A `/cluster/domain-events` stream being read.
struct SseReader {
    response: reqwest::Response,
    buffer: String,
    comments: Vec<String>,
}

impl SseReader {
    async fn open(client: &reqwest::Client, url: String, last_event_id: Option<&str>) -> Self {
        let mut request = client.get(url);
        if let Some(id) = last_event_id {
            request = request.header("last-event-id", id);
        }
        let response = request.send().await.expect("the stream opens");
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["content-type"], "text/event-stream");
        Self {
            response,
            buffer: String::new(),
            comments: Vec::new(),
        }
    }

    /// The next event (`retry:` and keep-alives skipped); fails the test after `WAIT`.
    async fn next(&mut self) -> SseEvent {
        tokio::time::timeout(WAIT, async {
            loop {
                while let Some(end) = self.buffer.find("\n\n") {
                    let block: String = self.buffer.drain(..end + 2).collect();
                    let mut event = SseEvent::default();
                    let mut data = None;
                    for line in block.lines() {
                        if let Some(comment) = line.strip_prefix(": ") {
                            if comment != "keep-alive" {
                                self.comments.push(comment.to_owned());
                            }
                        } else if let Some(id) = line.strip_prefix("id: ") {
                            event.id = Some(id.to_owned());
                        } else if let Some(name) = line.strip_prefix("event: ") {
                            event.event = name.to_owned();
                        } else if let Some(json) = line.strip_prefix("data: ") {
                            data = Some(serde_json::from_str(json).expect("data is JSON"));
                        }
                    }
                    if let Some(data) = data {
                        event.data = data;
                        event.comments = std::mem::take(&mut self.comments);
                        return event;
                    }
                }
                let chunk = self
                    .response
                    .chunk()
                    .await
                    .expect("the stream reads")
                    .expect("the stream stays open");
                self.buffer.push_str(std::str::from_utf8(&chunk).unwrap());
            }
        })
        .await
        .expect("an event within the wait")
    }

    /// Events until one satisfies `want` (that one included).
    async fn until(&mut self, want: impl Fn(&SseEvent) -> bool) -> Vec<SseEvent> {
        let mut events = Vec::new();
        loop {
            let event = self.next().await;
            let done = want(&event);
            events.push(event);
            if done {
                return events;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_domain_event_stream_resumes_after_a_disconnect_without_missing_or_repeating() {
    let client = reqwest::Client::new();
    let (first_port, second_port, third_port) = (free_port(), free_port(), free_port());
    let first = AgentProcess::start(first_port, first_port, None);
    let _second = AgentProcess::start(second_port, first_port, None);
    members_until(&client, &first, "two members up", |body| {
        body["members"]
            .as_array()
            .is_some_and(|m| m.len() == 2 && m.iter().all(|m| m["status"] == "Up"))
    })
    .await;
    let url = format!("{}/cluster/domain-events", first.management);

    // A fresh stream opens with the membership now, under the id of the last event it holds.
    let mut stream = SseReader::open(&client, url.clone(), None).await;
    let snapshot = stream.next().await;
    assert_eq!(snapshot.event, "CurrentClusterState", "{snapshot:?}");
    assert_eq!(snapshot.data["type"], "CurrentClusterState");
    assert_eq!(snapshot.data["selfNode"], first.address.as_str());
    let members = snapshot.data["members"].as_array().unwrap();
    assert_eq!(members.len(), 2, "{snapshot:?}");
    assert!(
        members
            .iter()
            .all(|m| m["status"] == "Up" && m["nodeUid"].is_string())
    );
    assert!(
        snapshot.sequence() >= 3,
        "the two members' events came before: {snapshot:?}"
    );
    let seen = snapshot.id.clone().unwrap();
    drop(stream);

    // While nobody listens, a third node joins.
    let third = AgentProcess::start(third_port, first_port, None);
    // Up before the client comes back: what it missed is replayed from the ring, not live.
    members_until(&client, &first, "three members up", |body| {
        body["members"]
            .as_array()
            .is_some_and(|m| m.len() == 3 && m.iter().all(|m| m["status"] == "Up"))
    })
    .await;
    let third_up =
        |e: &SseEvent| e.event == "MemberUp" && e.data["member"]["node"] == third.address.as_str();

    // Resumed: exactly the events after the last id seen, in order, no snapshot.
    let mut resumed = SseReader::open(&client, url.clone(), Some(&seen)).await;
    let events = resumed.until(third_up).await;
    let sequences: Vec<u64> = events.iter().map(SseEvent::sequence).collect();
    let expected: Vec<u64> = (snapshot.sequence() + 1..).take(events.len()).collect();
    assert_eq!(
        sequences, expected,
        "none missed, none repeated: {events:?}"
    );
    assert!(events.iter().all(|e| e.event != "CurrentClusterState"));
    assert!(
        events.iter().any(
            |e| e.event == "MemberJoined" && e.data["member"]["node"] == third.address.as_str()
        ),
        "{events:?}"
    );
    for event in &events {
        assert_eq!(event.data["type"], event.event.as_str(), "{event:?}");
    }
    drop(resumed);

    // The same resume through the query parameter, filtered: only the types asked for.
    let mut filtered = SseReader::open(
        &client,
        format!("{url}?type=MemberUp&snapshot=false&last_event_id={seen}"),
        None,
    )
    .await;
    let ups = filtered.until(third_up).await;
    assert!(ups.iter().all(|e| e.event == "MemberUp"), "{ups:?}");
    let expected_ups: Vec<u64> = events
        .iter()
        .filter(|e| e.event == "MemberUp")
        .map(SseEvent::sequence)
        .collect();
    assert_eq!(
        ups.iter().map(SseEvent::sequence).collect::<Vec<_>>(),
        expected_ups
    );
    drop(filtered);

    // An id of another incarnation of this node: the state first, saying why.
    let mut other = SseReader::open(&client, url.clone(), Some("1-1")).await;
    let state = other.next().await;
    assert_eq!(state.event, "CurrentClusterState");
    assert_eq!(
        state.data["members"].as_array().unwrap().len(),
        3,
        "{state:?}"
    );
    assert!(
        state
            .comments
            .iter()
            .any(|c| c.contains("another incarnation")),
        "{state:?}"
    );
    drop(other);

    // Bad input: 400 in Akka's message shape, saying what is allowed.
    let last = state.id.unwrap();
    let (incarnation, sequence) = last.rsplit_once('-').unwrap();
    let ahead = format!("{incarnation}-{}", sequence.parse::<u64>().unwrap() + 1000);
    for (query, header, says) in [
        ("?type=MemberDown", None, "known: MemberJoined"),
        ("?type=", None, "`type` has an empty value"),
        ("?snapshot=maybe", None, "`snapshot` is `true` or `false`"),
        ("", Some("17"), "<incarnation>-<sequence>"),
        ("", Some(ahead.as_str()), "beyond the last event"),
    ] {
        let mut request = client.get(format!("{url}{query}"));
        if let Some(header) = header {
            request = request.header("last-event-id", header);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 400, "{query} {header:?}");
        let body: Value = response.json().await.unwrap();
        let message = body["message"].as_str().unwrap();
        assert!(message.contains(says), "{query} {header:?}: {message}");
    }
    let response = client.post(&url).send().await.unwrap();
    assert_eq!(response.status(), 405);
    assert_eq!(response.headers()["allow"], "GET");
}
