//! A minimal server-sent-events client for tests: reads `id:`, `event:` and `data:` fields off
//! a streaming HTTP response, one event at a time.

#![allow(dead_code)]

use std::time::Duration;

/// One event as received.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SseEvent {
    pub(crate) id: Option<String>,
    pub(crate) event: String,
    pub(crate) data: serde_json::Value,
}

/// An open stream.
pub(crate) struct SseClient {
    response: reqwest::Response,
    buffer: String,
}

impl SseClient {
    /// `GET url` with `Last-Event-ID: last` when given; panics unless it answers 200
    /// `text/event-stream`.
    pub(crate) async fn connect(url: &str, last: Option<&str>) -> Self {
        let mut request = reqwest::Client::new().get(url);
        if let Some(last) = last {
            request = request.header("Last-Event-ID", last);
        }
        let response = request.send().await.expect("stream request");
        assert_eq!(response.status(), 200, "{url}");
        let content_type = response.headers()["content-type"]
            .to_str()
            .unwrap()
            .to_owned();
        assert_eq!(content_type, "text/event-stream", "{url}");
        Self {
            response,
            buffer: String::new(),
        }
    }

    /// The next event (comments and `retry:` skipped), or `None` when none arrives in `wait`.
    pub(crate) async fn next(&mut self, wait: Duration) -> Option<SseEvent> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let mut id = None;
                let mut event = None;
                let mut data = String::new();
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("id: ") {
                        id = Some(v.to_owned());
                    } else if let Some(v) = line.strip_prefix("event: ") {
                        event = Some(v.to_owned());
                    } else if let Some(v) = line.strip_prefix("data: ") {
                        data.push_str(v);
                    }
                }
                if let Some(event) = event {
                    let data = serde_json::from_str(&data)
                        .unwrap_or_else(|e| panic!("data is JSON: {e}: {data}"));
                    return Some(SseEvent { id, event, data });
                }
                continue;
            }
            let chunk = tokio::time::timeout_at(deadline, self.response.chunk())
                .await
                .ok()?
                .expect("stream readable")?;
            self.buffer
                .push_str(std::str::from_utf8(&chunk).expect("UTF-8"));
        }
    }
}
