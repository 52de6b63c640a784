//! The live event hub: stored events fanned out to server-sent-event streams.
//!
//! # Delivery
//! Live only, like Akka Management's domain events: a stream sees events stored after it
//! opened. A stream that falls more than the channel's capacity behind is told how many it
//! missed (an SSE comment) and carries on; ingest never waits for a slow stream.

use std::sync::Arc;

use tokio::sync::broadcast;
use troupe_protocol::{EventKind, ReportBatch};

/// One stored event, ready to send.
#[derive(Debug, Clone)]
pub struct LiveEvent {
    /// The cluster it belongs to.
    pub cluster: String,
    /// Its kind.
    pub kind: EventKind,
    /// The JSON sent as the SSE `data:` line.
    pub json: String,
}

/// Fans stored events out to the open streams.
#[derive(Debug, Clone)]
pub struct LiveHub {
    sender: broadcast::Sender<Arc<LiveEvent>>,
}

impl Default for LiveHub {
    fn default() -> Self {
        Self::new(4096)
    }
}

impl LiveHub {
    /// A hub whose streams may fall `capacity` events behind before they skip.
    #[must_use]
    pub fn new(capacity: usize) -> Self {
        Self {
            sender: broadcast::channel(capacity).0,
        }
    }

    /// A new subscription, seeing events published from now on.
    #[must_use]
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<LiveEvent>> {
        self.sender.subscribe()
    }

    /// Publishes the events of a stored batch (nothing is built when nobody listens).
    pub fn publish_batch(&self, batch: &ReportBatch) {
        if self.sender.receiver_count() == 0 {
            return;
        }
        let id = &batch.identity;
        for event in &batch.events {
            let mut json = serde_json::json!({
                "cluster": id.cluster,
                "node": id.node,
                "incarnation": id.incarnation.to_string(),
                "at": crate::time::rfc3339(event.at_ms),
                "at_ms": event.at_ms,
            });
            if let (Some(object), Ok(serde_json::Value::Object(body))) =
                (json.as_object_mut(), serde_json::to_value(&event.body))
            {
                object.extend(body);
            }
            let _ = self.sender.send(Arc::new(LiveEvent {
                cluster: id.cluster.clone(),
                kind: event.body.kind(),
                json: json.to_string(),
            }));
        }
    }
}
