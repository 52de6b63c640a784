//! The live feed behind the event streams: stored events and dead letters as they are
//! committed, from a position that a client can give back to resume.
//!
//! # Positions
//! A cluster's position is the last event id and the last dead-letter id delivered. Within a
//! cluster the store assigns ids in commit order (SQLite writes one transaction at a time; on
//! PostgreSQL ingest inserts them under the cluster's advisory lock), so "everything after id
//! N" is exactly what a client that saw N has not seen: nothing missed, nothing repeated. A
//! [`Cursor`] holds the position of every cluster a feed covers; its text form
//! (`<cluster id>:<event id>.<dead-letter id>`, comma-separated) is the SSE `id:` of every
//! event sent, which a reconnecting `EventSource` sends back as `Last-Event-ID`.
//!
//! # When it reads
//! On a wake-up from the [`LiveHub`](crate::live::LiveHub) (a batch of that cluster was stored
//! by this replica or, on PostgreSQL, by another one: see [`crate::live`]) and every [`POLL`]
//! (a safety net for a lost notification), a page of at most [`PAGE`] rows per table and
//! cluster at a time. A cluster that first reports after the feed opened starts at its
//! beginning.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast::{self, error::TryRecvError};
use tokio::time::{Interval, MissedTickBehavior};
use troupe_protocol::EventKind;

use crate::live::Wake;
use crate::store::{EventRow, Store, StoreError, StreamDeadLetterRow, StreamPosition};

/// Rows read per table and cluster at a time.
pub const PAGE: i64 = 500;
/// How often a feed looks for rows it was not woken for.
pub const POLL: Duration = Duration::from_secs(1);

/// Where a feed stands in every cluster it covers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cursor {
    positions: BTreeMap<i64, StreamPosition>,
}

/// A `Last-Event-ID` that no stream sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`Last-Event-ID` must be the id of an event this stream sent (`<cluster id>:<event id>.<dead-letter id>`, comma-separated), got `{0}`"
)]
pub struct BadCursor(pub String);

impl Cursor {
    /// The position in cluster `cluster_id` (the beginning when unknown).
    #[must_use]
    pub fn position(&self, cluster_id: i64) -> StreamPosition {
        self.positions.get(&cluster_id).copied().unwrap_or_default()
    }

    /// Sets the position in cluster `cluster_id`.
    pub fn set(&mut self, cluster_id: i64, position: StreamPosition) {
        self.positions.insert(cluster_id, position);
    }

    /// Whether the cursor names cluster `cluster_id`.
    #[must_use]
    pub fn covers(&self, cluster_id: i64) -> bool {
        self.positions.contains_key(&cluster_id)
    }
}

impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (cluster, p)) in self.positions.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{cluster}:{}.{}", p.event_id, p.dead_letter_id)?;
        }
        Ok(())
    }
}

impl FromStr for Cursor {
    type Err = BadCursor;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = || BadCursor(text.to_owned());
        let mut positions = BTreeMap::new();
        for entry in text.split(',').filter(|e| !e.trim().is_empty()) {
            let (cluster, rest) = entry.trim().split_once(':').ok_or_else(bad)?;
            let (event, dead_letter) = rest.split_once('.').ok_or_else(bad)?;
            let number = |s: &str| s.parse::<i64>().ok().filter(|n| *n >= 0).ok_or_else(bad);
            positions.insert(
                number(cluster)?,
                StreamPosition {
                    event_id: number(event)?,
                    dead_letter_id: number(dead_letter)?,
                },
            );
        }
        if positions.is_empty() {
            return Err(bad());
        }
        Ok(Self { positions })
    }
}

/// One stored row, as a stream sends it.
#[derive(Debug, Clone)]
pub enum FeedItem {
    /// An event (not a dead letter).
    Event {
        /// Its cluster's key.
        cluster: Arc<str>,
        /// The row.
        row: EventRow,
    },
    /// A dead letter.
    DeadLetter {
        /// Its cluster's key.
        cluster: Arc<str>,
        /// The row.
        row: StreamDeadLetterRow,
    },
}

impl FeedItem {
    /// The event's kind (`None` for a stored kind this build does not know).
    #[must_use]
    pub fn kind(&self) -> Option<EventKind> {
        match self {
            Self::Event { row, .. } => row.kind.parse().ok(),
            Self::DeadLetter { .. } => Some(EventKind::DeadLetter),
        }
    }

    /// Its cluster's key.
    #[must_use]
    pub fn cluster(&self) -> &str {
        match self {
            Self::Event { cluster, .. } | Self::DeadLetter { cluster, .. } => cluster,
        }
    }
}

/// Which clusters a feed covers.
#[derive(Debug, Clone)]
pub enum Scope {
    /// One cluster: its id and key.
    One(i64, Arc<str>),
    /// Every cluster, also those that report later.
    All,
}

/// A feed: waits for new rows and reads them in order.
#[derive(Debug)]
pub struct Feed {
    store: Store,
    wake: broadcast::Receiver<Wake>,
    scope: Scope,
    cursor: Cursor,
    names: HashMap<i64, Arc<str>>,
    due: BTreeSet<i64>,
    poll: Interval,
}

impl Feed {
    /// A feed over `scope` from `cursor`, woken by `wake` (a [`crate::live::LiveHub`]
    /// subscription taken before the cursor's positions were read, so no wake-up falls in
    /// between).
    pub async fn open(
        store: Store,
        wake: broadcast::Receiver<Wake>,
        scope: Scope,
        cursor: Cursor,
    ) -> Result<Self, StoreError> {
        let mut poll = tokio::time::interval(POLL);
        poll.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut feed = Self {
            store,
            wake,
            scope,
            cursor,
            names: HashMap::new(),
            due: BTreeSet::new(),
            poll,
        };
        feed.refresh_clusters().await?;
        // Whatever the cursor is behind (a resume) is due at once.
        feed.due = feed.names.keys().copied().collect();
        Ok(feed)
    }

    /// The position now of every cluster in `scope` (where a fresh stream starts).
    pub async fn current(store: &Store, scope: &Scope) -> Result<Cursor, StoreError> {
        let mut cursor = Cursor::default();
        match scope {
            Scope::One(id, _) => cursor.set(*id, store.stream_position(*id).await?),
            Scope::All => {
                for cluster in store.clusters().await? {
                    cursor.set(cluster.id, store.stream_position(cluster.id).await?);
                }
            }
        }
        Ok(cursor)
    }

    /// The cursor after everything returned so far.
    #[must_use]
    pub fn cursor(&self) -> &Cursor {
        &self.cursor
    }

    async fn refresh_clusters(&mut self) -> Result<(), StoreError> {
        match &self.scope {
            Scope::One(id, name) => {
                self.names.insert(*id, Arc::clone(name));
            }
            Scope::All => {
                for cluster in self.store.clusters().await? {
                    self.names
                        .entry(cluster.id)
                        .or_insert_with(|| Arc::from(cluster.cluster_key.as_str()));
                }
            }
        }
        Ok(())
    }

    /// Waits until rows may be due: a wake-up for a cluster in scope, or the poll tick.
    /// Cancel-safe: it only waits and notes what is due.
    pub async fn wait(&mut self) {
        while self.due.is_empty() {
            tokio::select! {
                woken = self.wake.recv() => match woken {
                    Ok(wake) => self.note(&wake),
                    // Missed wake-ups, or the hub is gone: check everything.
                    Err(_) => {
                        self.due.insert(i64::MIN);
                    }
                },
                _ = self.poll.tick() => {
                    self.due.insert(i64::MIN);
                }
            }
        }
    }

    fn note(&mut self, wake: &Wake) {
        let name = match wake {
            Wake::Cluster(name) => name,
            Wake::All => {
                self.due.insert(i64::MIN);
                return;
            }
        };
        match self.names.iter().find(|(_, n)| **n == *name) {
            Some((id, _)) => {
                self.due.insert(*id);
            }
            // A cluster this feed has not seen: check everything (its id is unknown yet).
            None if matches!(self.scope, Scope::All) => {
                self.due.insert(i64::MIN);
            }
            None => {}
        }
    }

    /// Whether rows are due (a page came back full, or a wake-up arrived).
    #[must_use]
    pub fn is_due(&mut self) -> bool {
        loop {
            match self.wake.try_recv() {
                Ok(wake) => self.note(&wake),
                Err(TryRecvError::Lagged(_)) => {
                    self.due.insert(i64::MIN);
                }
                Err(TryRecvError::Empty | TryRecvError::Closed) => break,
            }
        }
        !self.due.is_empty()
    }

    /// Reads the due clusters' next rows, at most a page per table and cluster, each with the
    /// cursor text just after it; advances the cursor. Call [`Feed::is_due`] to know whether to
    /// read again at once.
    pub async fn read(&mut self) -> Result<Vec<(FeedItem, String)>, StoreError> {
        if self.due.remove(&i64::MIN) {
            self.refresh_clusters().await?;
            self.due.extend(self.names.keys().copied());
        }
        let due: Vec<i64> = std::mem::take(&mut self.due).into_iter().collect();
        let mut out = Vec::new();
        for cluster_id in due {
            let Some(name) = self.names.get(&cluster_id).cloned() else {
                continue;
            };
            let mut position = self.cursor.position(cluster_id);
            let events = self
                .store
                .stream_events(cluster_id, position.event_id, PAGE)
                .await?;
            let dead_letters = self
                .store
                .stream_dead_letters(cluster_id, position.dead_letter_id, PAGE)
                .await?;
            if events.len() as i64 == PAGE || dead_letters.len() as i64 == PAGE {
                self.due.insert(cluster_id);
            }
            // Each table in id order; between the two, the earlier event first.
            let mut events = events.into_iter().peekable();
            let mut dead_letters = dead_letters.into_iter().peekable();
            loop {
                let take_event = match (events.peek(), dead_letters.peek()) {
                    (Some(e), Some(d)) => e.at_ms <= d.at_ms,
                    (Some(_), None) => true,
                    (None, Some(_)) => false,
                    (None, None) => break,
                };
                let item = if take_event {
                    let row = events.next().expect("peeked");
                    position.event_id = row.id;
                    FeedItem::Event {
                        cluster: Arc::clone(&name),
                        row,
                    }
                } else {
                    let row = dead_letters.next().expect("peeked");
                    position.dead_letter_id = row.id;
                    FeedItem::DeadLetter {
                        cluster: Arc::clone(&name),
                        row,
                    }
                };
                self.cursor.set(cluster_id, position);
                out.push((item, self.cursor.to_string()));
            }
            self.cursor.set(cluster_id, position);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursor_text_round_trips_and_anything_else_is_refused() {
        let mut cursor = Cursor::default();
        cursor.set(
            7,
            StreamPosition {
                event_id: 120,
                dead_letter_id: 4,
            },
        );
        cursor.set(2, StreamPosition::default());
        let text = cursor.to_string();
        assert_eq!(text, "2:0.0,7:120.4");
        assert_eq!(text.parse::<Cursor>().unwrap(), cursor);
        for bad in ["", "7", "7:1", "x:1.2", "7:-1.0", "7:1.2,", "7:1.2;8:1.1"] {
            if bad == "7:1.2," {
                assert!(
                    bad.parse::<Cursor>().is_ok(),
                    "a trailing comma is harmless"
                );
                continue;
            }
            assert!(bad.parse::<Cursor>().is_err(), "{bad:?}");
        }
        assert_eq!(cursor.position(99), StreamPosition::default());
    }
}
