//! The live hub: wakes the open streams of a cluster when one of its batches is stored.
//!
//! It carries no events, only the key of the cluster that has new ones: streams read what
//! is new from the store ([`crate::feed`]), so what they send is what is stored, in stored
//! order, and a stream that resumes gets the same events from the same place. Ingest never
//! waits for a stream: a stream that misses wake-ups (the channel's capacity behind) just
//! checks every cluster.
//!
//! # Several replicas (PostgreSQL)
//! Ingest on PostgreSQL notifies channel [`CHANNEL`] in its transaction (delivered at
//! commit), with the cluster's key as payload ([`notify_payload`]). [`listen`] holds one
//! dedicated connection per replica that LISTENs on it and turns each notification into a
//! wake-up here, so a stream on any replica reads a batch stored through any other one
//! within milliseconds. The payload is only a wake-up: what a stream sends comes from its
//! cursor, so a lost, repeated or late notification changes when it reads, never what. When
//! the connection is lost, the listener reconnects with backoff and then wakes every stream,
//! which reads everything after its cursor (a stream also looks every
//! [`crate::feed::POLL`] regardless).

use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use sqlx::postgres::{PgListener, PgPoolOptions};
use tokio::sync::{broadcast, watch};
use troupe_protocol::ReportBatch;

/// The PostgreSQL notification channel ingest announces new stream rows on.
pub const CHANNEL: &str = "troupe_live";

/// Payload of a notification that names no single cluster: every stream checks everything.
pub const EVERY_CLUSTER: &str = "*";

/// Longest cluster key sent as a payload (PostgreSQL refuses payloads of 8000 bytes or more).
const MAX_PAYLOAD: usize = 4000;

/// What woke the streams.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wake {
    /// The cluster with this key has new rows.
    Cluster(Arc<str>),
    /// Any cluster may have new rows (a replica's listener reconnected, or a payload named
    /// no cluster).
    All,
}

/// Wakes streams when a cluster has new events.
#[derive(Debug, Clone)]
pub struct LiveHub {
    sender: broadcast::Sender<Wake>,
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

    /// A new subscription to wake-ups sent from now on.
    #[must_use]
    pub fn subscribe(&self) -> broadcast::Receiver<Wake> {
        self.sender.subscribe()
    }

    /// Tells the streams that `batch` was stored (nothing when it holds no event or nobody
    /// listens).
    pub fn publish_batch(&self, batch: &ReportBatch) {
        if batch.events.is_empty() {
            return;
        }
        self.publish_cluster(&batch.identity.cluster_key());
    }

    /// Tells the streams that cluster `key` has new rows.
    pub fn publish_cluster(&self, key: &str) {
        if self.sender.receiver_count() == 0 {
            return;
        }
        let _ = self.sender.send(Wake::Cluster(Arc::from(key)));
    }

    /// Tells every stream to look at every cluster.
    pub fn publish_all(&self) {
        if self.sender.receiver_count() == 0 {
            return;
        }
        let _ = self.sender.send(Wake::All);
    }

    /// Turns a notification payload into a wake-up.
    fn publish_payload(&self, payload: &str) {
        if payload == EVERY_CLUSTER || payload.is_empty() {
            self.publish_all();
        } else {
            self.publish_cluster(payload);
        }
    }
}

/// The payload ingest sends on [`CHANNEL`] for cluster `key`: the key, or [`EVERY_CLUSTER`]
/// for a key too long for a notification.
#[must_use]
pub fn notify_payload(key: &str) -> &str {
    if key.len() > MAX_PAYLOAD || key == EVERY_CLUSTER {
        EVERY_CLUSTER
    } else {
        key
    }
}

/// The `application_name` of this process's listening connection (so an operator, or a
/// test, can find it in `pg_stat_activity`).
#[must_use]
pub fn listener_application_name() -> String {
    format!("troupe-live {}", std::process::id())
}

/// Reconnect delays: from the first to the last, doubling.
const BACKOFF_FIRST: Duration = Duration::from_millis(100);
const BACKOFF_LAST: Duration = Duration::from_secs(5);

/// LISTENs on [`CHANNEL`] over a dedicated connection made with `pool`'s options and wakes
/// `hub`'s streams for every notification, until `shutdown` turns true. Never returns an
/// error: a lost connection is made again with backoff, and every stream is woken once it
/// listens again.
pub async fn listen(pool: PgPool, hub: LiveHub, mut shutdown: watch::Receiver<bool>) {
    let options = (*pool.connect_options())
        .clone()
        .application_name(&listener_application_name());
    // A pool of its own, so the listening connection never takes one from ingest.
    let own = PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(Duration::from_secs(10))
        .connect_lazy_with(options);
    let mut delay = BACKOFF_FIRST;
    loop {
        if *shutdown.borrow() {
            return;
        }
        let connected = async {
            let mut listener = PgListener::connect_with(&own).await?;
            listener.listen(CHANNEL).await?;
            Ok::<_, sqlx::Error>(listener)
        };
        let mut listener = tokio::select! {
            connected = connected => match connected {
                Ok(listener) => listener,
                Err(error) => {
                    tracing::warn!(%error, retry_in = ?delay, "live listener: cannot LISTEN; retrying");
                    tokio::select! {
                        () = tokio::time::sleep(delay) => {}
                        _ = shutdown.changed() => return,
                    }
                    delay = (delay * 2).min(BACKOFF_LAST);
                    continue;
                }
            },
            _ = shutdown.changed() => return,
        };
        tracing::info!(channel = CHANNEL, "live listener: listening");
        delay = BACKOFF_FIRST;
        // Whatever was committed while nobody listened: every stream reads after its cursor.
        hub.publish_all();
        loop {
            let received = tokio::select! {
                received = listener.try_recv() => received,
                _ = shutdown.changed() => return,
            };
            match received {
                Ok(Some(notification)) => hub.publish_payload(notification.payload()),
                Ok(None) => {
                    // Lost and listening again: notifications in between are gone.
                    tracing::warn!("live listener: connection lost and made again; catching up");
                    hub.publish_all();
                }
                Err(error) => {
                    tracing::warn!(%error, "live listener: connection lost; reconnecting");
                    break;
                }
            }
        }
    }
}
