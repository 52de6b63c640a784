//! The live hub: wakes the open streams of a cluster when one of its batches is stored.
//!
//! It carries no events, only the key of the cluster that has new ones: streams read what
//! is new from the store ([`crate::feed`]), so what they send is what is stored, in stored
//! order, and a stream that resumes gets the same events from the same place. Ingest never
//! waits for a stream: a stream that misses wake-ups (the channel's capacity behind) just
//! checks every cluster.

use std::sync::Arc;

use tokio::sync::broadcast;
use troupe_protocol::ReportBatch;

/// Wakes streams when a cluster has new events.
#[derive(Debug, Clone)]
pub struct LiveHub {
    sender: broadcast::Sender<Arc<str>>,
}

impl Default for LiveHub {
    fn default() -> Self {
        Self::new(1024)
    }
}

impl LiveHub {
    /// A hub whose streams may fall `capacity` wake-ups behind before they check everything.
    #[must_use]
    pub fn new(capacity: usize) -> Self {
        Self {
            sender: broadcast::channel(capacity).0,
        }
    }

    /// A new subscription to wake-ups (cluster keys) sent from now on.
    #[must_use]
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<str>> {
        self.sender.subscribe()
    }

    /// Tells the streams that `batch` was stored (nothing when it holds no event or nobody
    /// listens).
    pub fn publish_batch(&self, batch: &ReportBatch) {
        if batch.events.is_empty() || self.sender.receiver_count() == 0 {
            return;
        }
        let _ = self.sender.send(Arc::from(batch.identity.cluster_key()));
    }
}
