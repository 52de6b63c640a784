//! `GET /cluster/domain-events`: the [`Journal`] recorded from this node's cluster
//! subscription, served as server-sent events.
//!
//! # Frames
//! The stream opens with `retry: 3000`; each event is `id: <incarnation>-<sequence>`,
//! `event: <type>` and one `data:` line of JSON; 15 s of silence send a `: keep-alive` comment.
//! Query: `type` (repeatable or comma-separated; Akka's names), `snapshot` (`true`, the
//! default: a fresh stream opens with `CurrentClusterState`; `false`: live events only) and
//! `last_event_id` (for clients that cannot send the `Last-Event-ID` header; the header wins).
//! The `type` filter applies to events, never to the snapshot.
//!
//! # When it ends
//! When the listener stops, or the cluster subscription ends (this node's cluster is gone).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, StreamBody};
use hyper::header::{CACHE_CONTROL, CONTENT_TYPE, HeaderValue};
use hyper::{HeaderMap, Response};
use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::time::{Interval, MissedTickBehavior};
use troupe::cluster::{Cluster, ClusterNotification};

use super::Body;
use super::cluster::percent_decode;
use super::domain_events::{EventId, FellBehind, Journal, Opening, Recorded, SNAPSHOT, TypeFilter};

/// Silence after which a keep-alive comment is sent.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// This node's journal, kept current by a recorder task.
#[derive(Debug)]
pub(super) struct DomainEvents {
    cluster: Cluster,
    journal: Mutex<Journal>,
    /// The last recorded sequence; closed when the recorder ends.
    latest: watch::Receiver<u64>,
}

impl DomainEvents {
    /// Starts recording `cluster`'s events (from its current view on), keeping the last
    /// `capacity`, until `stop` turns true.
    pub(super) fn start(
        cluster: &Cluster,
        capacity: usize,
        mut stop: watch::Receiver<bool>,
    ) -> Arc<Self> {
        let mut subscription = cluster.subscribe();
        // `subscribe` queues the current view before it returns.
        let view = match subscription.try_recv() {
            Some(ClusterNotification::CurrentState(view)) => view,
            _ => cluster.view(),
        };
        let (latest_tx, latest) = watch::channel(0);
        let events = Arc::new(Self {
            cluster: cluster.clone(),
            journal: Mutex::new(Journal::new(cluster.self_node(), &view, capacity)),
            latest,
        });
        let recorder = Arc::clone(&events);
        tokio::spawn(async move {
            loop {
                let notification = tokio::select! {
                    _ = stop.wait_for(|stopped| *stopped) => return,
                    notification = subscription.recv() => notification,
                };
                match notification {
                    Some(ClusterNotification::Event(event)) => {
                        let recorded = recorder.journal.lock().record(&event);
                        if let Some(sequence) = recorded {
                            latest_tx.send_replace(sequence);
                        }
                    }
                    Some(ClusterNotification::CurrentState(_)) => {}
                    None => return,
                }
            }
        });
        events
    }

    /// The stream a request asks for, or 400 naming what is wrong.
    pub(super) fn respond(
        self: &Arc<Self>,
        query: Option<&str>,
        headers: &HeaderMap,
        stop: watch::Receiver<bool>,
    ) -> Result<Response<Body>, String> {
        let asked = StreamQuery::parse(query)?;
        let header = headers
            .get("last-event-id")
            .map(|v| {
                v.to_str()
                    .map(str::to_owned)
                    .map_err(|_| "`Last-Event-ID` must be text".to_owned())
            })
            .transpose()?;
        let resume = match header
            .as_deref()
            .or(asked.last_event_id.as_deref())
            .map(str::trim)
        {
            None | Some("") => None,
            Some(text) => Some(text.parse::<EventId>().map_err(|e| e.to_string())?),
        };
        let mut queue = VecDeque::from([Bytes::from_static(b"retry: 3000\n\n")]);
        let position = {
            let journal = self.journal.lock();
            let Opening {
                snapshot,
                fallback,
                replay,
                position,
            } = journal
                .open(resume, asked.snapshot)
                .map_err(|e| e.to_string())?;
            if let Some(why) = fallback {
                queue.push_back(Bytes::from(format!(": {why}\n\n")));
            }
            if snapshot {
                queue.push_back(self.snapshot_frame(&journal));
            }
            queue.extend(frames(&journal, &replay, &asked.filter));
            position
        };
        let mut keep_alive =
            tokio::time::interval_at(tokio::time::Instant::now() + KEEP_ALIVE, KEEP_ALIVE);
        keep_alive.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let stream = Stream {
            events: Arc::clone(self),
            latest: self.latest.clone(),
            filter: asked.filter,
            position,
            queue,
            keep_alive,
            stop,
        };
        let body = futures_util::stream::unfold(stream, |mut stream| async move {
            let bytes = stream.next().await?;
            Some((Ok::<_, Infallible>(hyper::body::Frame::data(bytes)), stream))
        });
        let mut response = Response::new(StreamBody::new(body).boxed_unsync());
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
        headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
        Ok(response)
    }

    fn snapshot_frame(&self, journal: &Journal) -> Bytes {
        let view = self.cluster.view();
        let data = journal.snapshot(&view.observed_by);
        Bytes::from(frame(
            &journal.id(journal.last()),
            SNAPSHOT,
            &data.to_string(),
        ))
    }
}

/// One event on the wire.
fn frame(id: &EventId, event: &str, data: &str) -> String {
    format!("id: {id}\nevent: {event}\ndata: {data}\n\n")
}

fn frames<'a>(
    journal: &'a Journal,
    recorded: &'a [Recorded],
    filter: &'a TypeFilter,
) -> impl Iterator<Item = Bytes> + 'a {
    recorded
        .iter()
        .filter(|r| filter.accepts(r.event))
        .map(|r| Bytes::from(frame(&journal.id(r.sequence), r.event, &r.data)))
}

/// One client's stream.
struct Stream {
    events: Arc<DomainEvents>,
    latest: watch::Receiver<u64>,
    filter: TypeFilter,
    /// The sequence of the last event queued (sent or filtered out).
    position: u64,
    queue: VecDeque<Bytes>,
    keep_alive: Interval,
    stop: watch::Receiver<bool>,
}

impl Stream {
    /// The next bytes to send; `None` ends the stream.
    async fn next(&mut self) -> Option<Bytes> {
        loop {
            if *self.stop.borrow() {
                return None;
            }
            if let Some(bytes) = self.queue.pop_front() {
                self.keep_alive.reset();
                return Some(bytes);
            }
            self.catch_up();
            if !self.queue.is_empty() {
                continue;
            }
            tokio::select! {
                changed = self.latest.changed() => {
                    if changed.is_err() {
                        // The recorder ended; send what it recorded last, then end.
                        self.catch_up();
                        return self.queue.pop_front();
                    }
                }
                _ = self.keep_alive.tick() => return Some(Bytes::from_static(b": keep-alive\n\n")),
                _ = self.stop.changed() => return None,
            }
        }
    }

    /// Queues what was recorded after `position`: the events, or the snapshot when the ring
    /// overwrote some of them before they were sent.
    fn catch_up(&mut self) {
        let journal = self.events.journal.lock();
        if journal.last() <= self.position {
            return;
        }
        match journal.since(self.position) {
            Ok(recorded) => {
                let frames: Vec<Bytes> = frames(&journal, &recorded, &self.filter).collect();
                self.queue.extend(frames);
            }
            Err(FellBehind { oldest }) => {
                self.queue.push_back(Bytes::from(format!(
                    ": this stream fell behind the events kept (the oldest is {}): current state\n\n",
                    journal.id(oldest)
                )));
                self.queue.push_back(self.events.snapshot_frame(&journal));
            }
        }
        self.position = journal.last();
    }
}

/// The query of a domain-event stream.
#[derive(Debug, Default)]
struct StreamQuery {
    filter: TypeFilter,
    snapshot: bool,
    last_event_id: Option<String>,
}

impl StreamQuery {
    /// The query, or the message naming what is wrong and what is allowed.
    fn parse(query: Option<&str>) -> Result<Self, String> {
        let mut types = Vec::new();
        let mut snapshot = None;
        let mut last_event_id = None;
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let (key, value) = (percent_decode(key), percent_decode(value));
            match key.as_str() {
                "type" => types.push(value),
                "snapshot" => {
                    snapshot = Some(match value.as_str() {
                        "true" => true,
                        "false" => false,
                        _ => {
                            return Err(format!("`snapshot` is `true` or `false`, not `{value}`"));
                        }
                    });
                }
                "last_event_id" => {
                    if value.is_empty() {
                        return Err("`last_event_id` has an empty value; give an event id \
                                    (<incarnation>-<sequence>) or leave it out"
                            .to_owned());
                    }
                    last_event_id = Some(value);
                }
                _ => {
                    return Err(format!(
                        "unknown query parameter `{key}`; the stream takes type, snapshot and last_event_id"
                    ));
                }
            }
        }
        Ok(Self {
            filter: TypeFilter::parse(types.iter().map(String::as_str))?,
            snapshot: snapshot.unwrap_or(true),
            last_event_id,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_query_takes_types_snapshot_and_an_id() {
        let query = StreamQuery::parse(Some(
            "type=MemberUp&type=LeaderChanged%2CMemberRemoved&snapshot=false&last_event_id=1-2",
        ))
        .unwrap();
        assert!(query.filter.accepts("MemberRemoved") && !query.filter.accepts("MemberJoined"));
        assert!(!query.snapshot);
        assert_eq!(query.last_event_id.as_deref(), Some("1-2"));
        assert!(
            StreamQuery::parse(None).unwrap().snapshot,
            "the snapshot is on by default"
        );
    }

    #[test]
    fn a_bad_query_is_refused_saying_what_is_allowed() {
        for (query, says) in [
            ("type=MemberDown", "known: MemberJoined"),
            ("type=", "`type` has an empty value"),
            ("snapshot=yes", "`snapshot` is `true` or `false`, not `yes`"),
            ("snapshot=", "`snapshot` is `true` or `false`, not ``"),
            ("last_event_id=", "`last_event_id` has an empty value"),
            ("typ=MemberUp", "unknown query parameter `typ`"),
        ] {
            let error = StreamQuery::parse(Some(query)).unwrap_err();
            assert!(error.contains(says), "{query}: {error}");
        }
    }

    #[test]
    fn a_frame_is_id_event_and_one_data_line() {
        let id = EventId {
            incarnation: 9,
            sequence: 3,
        };
        assert_eq!(
            frame(&id, "MemberUp", r#"{"a":1}"#),
            "id: 9-3\nevent: MemberUp\ndata: {\"a\":1}\n\n"
        );
    }
}
