//! Server-sent events over a [`Feed`]: framing, keep-alive, the end at shutdown.
//!
//! # Frames
//! Each event is `id: <cursor>`, `event: <name>` and one `data:` line of JSON; the stream
//! opens with `retry: 3000` (the browser's reconnect delay) and sends a `: keep-alive` comment
//! every 15 s of silence. While the store is unavailable the stream stays open, says so in a
//! comment, and carries on from where it was once the store answers.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use actix_web::HttpResponse;
use actix_web::http::header;
use actix_web::web::Bytes;
use tokio::sync::watch;
use tokio::time::{Interval, MissedTickBehavior};

use crate::feed::{Feed, FeedItem};
use crate::metrics::Metrics;

/// Silence after which a keep-alive comment is sent.
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// One server-sent event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The `id:` (the cursor after this event), when it has one.
    pub id: Option<String>,
    /// The `event:` name.
    pub event: String,
    /// The `data:` (one line of JSON).
    pub data: String,
}

impl Frame {
    /// The frame's bytes on the wire.
    #[must_use]
    pub fn encode(&self) -> String {
        let mut out = String::with_capacity(self.data.len() + 64);
        if let Some(id) = &self.id {
            out.push_str("id: ");
            out.push_str(id);
            out.push('\n');
        }
        out.push_str("event: ");
        out.push_str(&self.event);
        out.push('\n');
        // JSON text has no raw line breaks; each line of anything else is its own `data:`.
        for line in self.data.lines() {
            out.push_str("data: ");
            out.push_str(line);
            out.push('\n');
        }
        out.push('\n');
        out
    }
}

/// How a stream turns stored rows into frames: `None` skips the row (filtered out).
pub type Encode = Box<dyn Fn(&FeedItem, String) -> Option<Frame> + Send>;

struct Stream {
    feed: Feed,
    encode: Encode,
    queue: VecDeque<Bytes>,
    shutdown: watch::Receiver<bool>,
    keep_alive: Interval,
    _guard: ClientGuard,
}

/// The streaming response: `opening` frames first, then the feed's rows as `encode` frames
/// them, until the client goes or `shutdown` turns true.
pub fn respond(
    metrics: Arc<Metrics>,
    shutdown: watch::Receiver<bool>,
    opening: Vec<Frame>,
    feed: Feed,
    encode: Encode,
) -> HttpResponse {
    metrics.stream_clients(1);
    let mut keep_alive =
        tokio::time::interval_at(tokio::time::Instant::now() + KEEP_ALIVE, KEEP_ALIVE);
    keep_alive.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut queue = VecDeque::new();
    queue.push_back(Bytes::from_static(b"retry: 3000\n\n"));
    queue.extend(opening.iter().map(|f| Bytes::from(f.encode())));
    let stream = Stream {
        feed,
        encode,
        queue,
        shutdown,
        keep_alive,
        _guard: ClientGuard(metrics),
    };
    let body = futures_util::stream::unfold(stream, |mut stream| async move {
        loop {
            if *stream.shutdown.borrow() {
                return None;
            }
            if let Some(bytes) = stream.queue.pop_front() {
                stream.keep_alive.reset();
                return Some((Ok::<_, actix_web::Error>(bytes), stream));
            }
            if !stream.feed.is_due() {
                tokio::select! {
                    () = stream.feed.wait() => {}
                    _ = stream.keep_alive.tick() => {
                        return Some((Ok(Bytes::from_static(b": keep-alive\n\n")), stream));
                    }
                    _ = stream.shutdown.changed() => return None,
                }
            }
            // Not raced against anything: a read is never cut off half-way.
            match stream.feed.read().await {
                Ok(items) => {
                    for (item, id) in items {
                        if let Some(frame) = (stream.encode)(&item, id) {
                            stream.queue.push_back(Bytes::from(frame.encode()));
                        }
                    }
                }
                Err(error) => {
                    tracing::warn!(%error, "live stream: reading the store failed; retrying");
                    stream.queue.push_back(Bytes::from_static(
                        b": the store is unavailable; retrying\n\n",
                    ));
                    // Tried again at the next wake-up or poll.
                }
            }
        }
    });
    HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .insert_header(("X-Accel-Buffering", "no"))
        .streaming(body)
}

/// Counts the stream in `troupe_event_stream_clients` while it lives.
struct ClientGuard(Arc<Metrics>);

impl Drop for ClientGuard {
    fn drop(&mut self) {
        self.0.stream_clients(-1);
    }
}

#[cfg(test)]
mod tests {
    use super::Frame;

    #[test]
    fn a_frame_is_id_event_and_one_data_line_per_line() {
        let frame = Frame {
            id: Some("1:2.3".into()),
            event: "MemberUp".into(),
            data: r#"{"a":1}"#.into(),
        };
        assert_eq!(
            frame.encode(),
            "id: 1:2.3\nevent: MemberUp\ndata: {\"a\":1}\n\n"
        );
        let bare = Frame {
            id: None,
            event: "x".into(),
            data: "a\nb".into(),
        };
        assert_eq!(bare.encode(), "event: x\ndata: a\ndata: b\n\n");
    }
}
