//! The reporter's bounded buffer: what waits to be shipped, what is in flight, and what had to
//! be dropped — a pure data structure, tested without sockets or clocks.
//!
//! # What is kept when full
//! Events that change state (membership, singleton, router, dead letters, health) are kept in
//! preference to depth samples: when the event queue is full, the oldest depth samples go
//! first; only when no samples are left does the oldest event go. Every dropped item is counted
//! by kind. Every batch carries the running totals since the buffer was made (the protocol's
//! `dropped`), so a lost or refused batch loses no count: the next one carries it too.
//!
//! # Refused batches
//! A batch the server refuses as bad input (400, 413, 422) would be refused again unchanged, so
//! [`ReportBuffer::refused`] drops it: its events and samples are counted as dropped by kind
//! and the next batch (a new sequence) carries the counts.
//!
//! # Retries
//! A batch, once cut, keeps its sequence number and contents until the server acknowledges it,
//! so a retry after a lost response is a duplicate the server drops, never a second copy.

use std::collections::VecDeque;

use troupe_protocol::{DepthTick, DroppedCounts, Event, EventCategory};

/// How much the buffer holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufferLimits {
    /// Items waiting to be shipped: events plus individual depth samples share this budget.
    pub items: usize,
    /// At most this many events per batch.
    pub batch_events: usize,
}

impl Default for BufferLimits {
    fn default() -> Self {
        Self {
            items: 100_000,
            batch_events: 5_000,
        }
    }
}

/// A batch cut from the buffer, waiting for the server's acknowledgement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    /// Its sequence number.
    pub sequence: u64,
    /// Its events.
    pub events: Vec<Event>,
    /// Its depth samples.
    pub depth_ticks: Vec<DepthTick>,
    /// The drops it reports.
    pub dropped: DroppedCounts,
}

/// The reporter's buffer.
#[derive(Debug)]
pub struct ReportBuffer {
    limits: BufferLimits,
    events: VecDeque<Event>,
    depth_ticks: VecDeque<DepthTick>,
    /// Depth samples across the queued ticks.
    samples: usize,
    /// Every drop since the buffer was made (running totals, as batches carry them).
    dropped: DroppedCounts,
    /// Whether something was dropped since the last batch was cut.
    drops_unsent: bool,
    in_flight: Option<Pending>,
    next_sequence: u64,
    /// The totals the last acknowledged batch carried.
    reported_drops: DroppedCounts,
    /// Batches the server refused as bad input.
    refused_batches: u64,
}

fn count_drop(dropped: &mut DroppedCounts, category: EventCategory) {
    match category {
        EventCategory::Membership => dropped.membership += 1,
        EventCategory::Singleton => dropped.singleton += 1,
        EventCategory::Router => dropped.router += 1,
        EventCategory::DeadLetter => dropped.dead_letters += 1,
        EventCategory::Health => dropped.health += 1,
    }
}

fn drops_since(total: DroppedCounts, before: DroppedCounts) -> DroppedCounts {
    DroppedCounts {
        membership: total.membership - before.membership,
        singleton: total.singleton - before.singleton,
        router: total.router - before.router,
        dead_letters: total.dead_letters - before.dead_letters,
        health: total.health - before.health,
        depth_samples: total.depth_samples - before.depth_samples,
        spool_batches: total.spool_batches - before.spool_batches,
    }
}

impl ReportBuffer {
    /// An empty buffer; the first batch gets sequence 1.
    #[must_use]
    pub fn new(limits: BufferLimits) -> Self {
        Self {
            limits,
            events: VecDeque::new(),
            depth_ticks: VecDeque::new(),
            samples: 0,
            dropped: DroppedCounts::default(),
            drops_unsent: false,
            in_flight: None,
            next_sequence: 1,
            reported_drops: DroppedCounts::default(),
            refused_batches: 0,
        }
    }

    fn drop_oldest_tick(&mut self) -> bool {
        match self.depth_ticks.pop_front() {
            Some(tick) => {
                self.samples -= tick.samples.len();
                self.dropped.depth_samples += tick.samples.len() as u64;
                self.drops_unsent = true;
                true
            }
            None => false,
        }
    }

    /// Queue an event; if the buffer is full, make room: depth samples go first, then the
    /// oldest event.
    pub fn push_event(&mut self, event: Event) {
        while self.events.len() + self.samples >= self.limits.items {
            if !self.drop_oldest_tick() {
                match self.events.pop_front() {
                    Some(oldest) => {
                        count_drop(&mut self.dropped, oldest.body.kind().category());
                        self.drops_unsent = true;
                    }
                    None => break,
                }
            }
        }
        self.events.push_back(event);
    }

    /// Queue one tick of depth samples; if the buffer is full, older ticks make room. Samples
    /// never push out an event: a tick that does not fit beside the events is dropped itself.
    pub fn push_depth_tick(&mut self, tick: DepthTick) {
        while self.events.len() + self.samples + tick.samples.len() > self.limits.items {
            if !self.drop_oldest_tick() {
                self.dropped.depth_samples += tick.samples.len() as u64;
                self.drops_unsent = true;
                return;
            }
        }
        self.samples += tick.samples.len();
        self.depth_ticks.push_back(tick);
    }

    /// The batch to send now: the one in flight (a retry), or a new one cut from the queue.
    /// `None` when there is nothing to report.
    pub fn next_batch(&mut self) -> Option<&Pending> {
        self.cut(false)
    }

    /// Like [`ReportBuffer::next_batch`], but an empty batch when nothing is queued: a
    /// heartbeat that keeps the agent's last-report time fresh and collects queued operations.
    pub fn heartbeat_batch(&mut self) -> &Pending {
        self.cut(true).expect("a forced cut always yields a batch")
    }

    fn cut(&mut self, force: bool) -> Option<&Pending> {
        if self.in_flight.is_none() {
            let nothing =
                self.events.is_empty() && self.depth_ticks.is_empty() && !self.drops_unsent;
            if nothing && !force {
                return None;
            }
            let take = self.events.len().min(self.limits.batch_events);
            let pending = Pending {
                sequence: self.next_sequence,
                events: self.events.drain(..take).collect(),
                depth_ticks: {
                    self.samples = 0;
                    self.depth_ticks.drain(..).collect()
                },
                dropped: self.dropped,
            };
            self.drops_unsent = false;
            self.next_sequence += 1;
            self.in_flight = Some(pending);
        }
        self.in_flight.as_ref()
    }

    /// The server acknowledged batch `sequence`.
    pub fn acknowledged(&mut self, sequence: u64) {
        if self
            .in_flight
            .as_ref()
            .is_some_and(|p| p.sequence == sequence)
            && let Some(pending) = self.in_flight.take()
        {
            self.reported_drops = pending.dropped;
        }
    }

    /// The server refused batch `sequence` as bad input: drop it, counting its events and
    /// samples as dropped (the next batch reports them). Returns how many items it held.
    pub fn refused(&mut self, sequence: u64) -> u64 {
        let Some(pending) = self
            .in_flight
            .take_if(|pending| pending.sequence == sequence)
        else {
            return 0;
        };
        for event in &pending.events {
            count_drop(&mut self.dropped, event.body.kind().category());
        }
        let samples: u64 = pending
            .depth_ticks
            .iter()
            .map(|t| t.samples.len() as u64)
            .sum();
        self.dropped.depth_samples += samples;
        self.drops_unsent = true;
        self.refused_batches += 1;
        pending.events.len() as u64 + samples
    }

    /// Cut everything queued into batches and hand them over, the one in flight first: the
    /// report spool takes them while the process stops. The buffer keeps counting drops; the
    /// next batch it cuts follows the last one handed over.
    pub fn take_all(&mut self) -> Vec<Pending> {
        let mut taken = Vec::new();
        while let Some(pending) = self.cut(false).cloned() {
            self.in_flight = None;
            taken.push(pending);
        }
        taken
    }

    /// Count what the report spool gave up (this node's batches, of this incarnation or an
    /// earlier one): items by kind, and whole batches; the next batch reports them.
    pub fn spool_lost(&mut self, batches: u64, items: DroppedCounts) {
        let d = &mut self.dropped;
        d.membership += items.membership;
        d.singleton += items.singleton;
        d.router += items.router;
        d.dead_letters += items.dead_letters;
        d.health += items.health;
        d.depth_samples += items.depth_samples;
        d.spool_batches += batches;
        self.drops_unsent = true;
    }

    /// Batches the server refused as bad input, since the buffer was made.
    #[must_use]
    pub fn refused_batches(&self) -> u64 {
        self.refused_batches
    }

    /// Events and ticks queued (not counting the batch in flight).
    #[must_use]
    pub fn queued(&self) -> (usize, usize) {
        (self.events.len(), self.depth_ticks.len())
    }

    /// Depth samples queued (not counting the batch in flight).
    #[must_use]
    pub fn queued_samples(&self) -> usize {
        self.samples
    }

    /// The limits the buffer was made with.
    #[must_use]
    pub fn limits(&self) -> BufferLimits {
        self.limits
    }

    /// Drops no acknowledged batch has reported yet.
    #[must_use]
    pub fn unreported_drops(&self) -> DroppedCounts {
        drops_since(self.dropped, self.reported_drops)
    }

    /// Every drop since the buffer was made, reported or not.
    #[must_use]
    pub fn total_drops(&self) -> DroppedCounts {
        self.dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use troupe_protocol::{DeadLetterEvent, DepthSample, EventBody, LeaderChange};

    fn dead_letter(n: u64) -> Event {
        Event {
            at_ms: n as i64,
            body: EventBody::DeadLetter(DeadLetterEvent {
                recipient: format!("/user/{n}"),
                sender: None,
                message_type: "t".into(),
                reason: "r".into(),
            }),
        }
    }

    fn leader(n: i64) -> Event {
        Event {
            at_ms: n,
            body: EventBody::LeaderChanged(LeaderChange { leader: None }),
        }
    }

    fn tick(n: i64, samples: usize) -> DepthTick {
        DepthTick {
            at_ms: n,
            samples: (0..samples)
                .map(|i| DepthSample {
                    path: format!("/user/w{i}"),
                    router: None,
                    depth: 1,
                })
                .collect(),
        }
    }

    fn limits(items: usize) -> BufferLimits {
        BufferLimits {
            items,
            batch_events: 1_000,
        }
    }

    #[test]
    fn a_retry_resends_the_same_batch_with_the_same_sequence() {
        let mut buffer = ReportBuffer::new(limits(10));
        buffer.push_event(leader(1));
        let first = buffer.next_batch().cloned().unwrap();
        buffer.push_event(leader(2));
        assert_eq!(
            buffer.next_batch(),
            Some(&first),
            "unacknowledged: same batch again"
        );
        buffer.acknowledged(first.sequence);
        let second = buffer.next_batch().cloned().unwrap();
        assert_eq!(second.sequence, first.sequence + 1);
        assert_eq!(second.events, vec![leader(2)]);
    }

    #[test]
    fn a_full_buffer_drops_depth_samples_before_state_changing_events_and_counts_them() {
        let mut buffer = ReportBuffer::new(limits(4));
        buffer.push_event(dead_letter(1));
        buffer.push_depth_tick(tick(0, 3));
        buffer.push_event(leader(2));
        // The samples made room for the event.
        let batch = buffer.next_batch().cloned().unwrap();
        assert_eq!(batch.dropped.depth_samples, 3);
        assert_eq!(batch.dropped.total(), 3);
        assert_eq!(batch.events, vec![dead_letter(1), leader(2)]);
        buffer.acknowledged(batch.sequence);
        // With no samples left to give, the oldest event goes, counted by kind.
        for n in 0..5 {
            buffer.push_event(dead_letter(10 + n));
        }
        let batch = buffer.next_batch().cloned().unwrap();
        assert_eq!(batch.dropped.dead_letters, 1);
        assert_eq!(batch.events.first(), Some(&dead_letter(11)));
        // And samples never push out an event.
        buffer.acknowledged(batch.sequence);
        for n in 0..4 {
            buffer.push_event(dead_letter(20 + n));
        }
        buffer.push_depth_tick(tick(1, 1));
        let batch = buffer.next_batch().cloned().unwrap();
        assert_eq!(batch.events.len(), 4);
        assert_eq!(batch.dropped.depth_samples, 3 + 1, "running totals");
    }

    #[test]
    fn a_heartbeat_is_an_empty_batch_with_its_own_sequence() {
        let mut buffer = ReportBuffer::new(limits(10));
        assert!(buffer.next_batch().is_none());
        let heartbeat = buffer.heartbeat_batch().clone();
        assert!(heartbeat.events.is_empty() && heartbeat.depth_ticks.is_empty());
        buffer.acknowledged(heartbeat.sequence);
        buffer.push_event(leader(1));
        assert_eq!(
            buffer.next_batch().unwrap().sequence,
            heartbeat.sequence + 1
        );
    }

    #[test]
    fn every_batch_carries_the_running_drop_totals() {
        let mut buffer = ReportBuffer::new(limits(2));
        buffer.push_depth_tick(tick(0, 2));
        buffer.push_depth_tick(tick(1, 2));
        let batch = buffer.next_batch().cloned().unwrap();
        assert_eq!(batch.dropped.depth_samples, 2);
        buffer.acknowledged(batch.sequence);
        assert_eq!(buffer.unreported_drops().total(), 0);
        buffer.push_event(leader(5));
        let batch = buffer.next_batch().cloned().unwrap();
        assert_eq!(batch.dropped.depth_samples, 2, "totals, not deltas");
        buffer.acknowledged(batch.sequence);
        buffer.push_depth_tick(tick(2, 1));
        buffer.push_depth_tick(tick(3, 2));
        assert_eq!(buffer.next_batch().unwrap().dropped.depth_samples, 3);
    }

    #[test]
    fn a_refused_batch_is_dropped_counted_by_kind_and_reported_by_the_next_batch() {
        let mut buffer = ReportBuffer::new(limits(10));
        buffer.push_event(dead_letter(1));
        buffer.push_event(leader(2));
        buffer.push_depth_tick(tick(3, 2));
        let refused = buffer.next_batch().cloned().unwrap();
        assert_eq!(
            buffer.refused(refused.sequence + 1),
            0,
            "not the batch in flight"
        );
        assert_eq!(buffer.refused(refused.sequence), 4);
        assert_eq!(buffer.refused_batches(), 1);
        // Reporting goes on: the next batch is new, empty of the refused items, and says so.
        let next = buffer.next_batch().cloned().unwrap();
        assert_eq!(next.sequence, refused.sequence + 1);
        assert!(next.events.is_empty() && next.depth_ticks.is_empty());
        assert_eq!(
            (
                next.dropped.dead_letters,
                next.dropped.membership,
                next.dropped.depth_samples
            ),
            (1, 1, 2)
        );
        buffer.acknowledged(next.sequence);
        assert_eq!(buffer.unreported_drops().total(), 0);
        assert_eq!(buffer.total_drops().total(), 4);
        assert!(buffer.next_batch().is_none(), "nothing more to say");
    }

    #[test]
    fn take_all_hands_over_every_batch_in_order_the_one_in_flight_first() {
        let mut buffer = ReportBuffer::new(BufferLimits {
            items: 100,
            batch_events: 2,
        });
        buffer.push_event(leader(1));
        let in_flight = buffer.next_batch().cloned().unwrap();
        for n in 2..=6 {
            buffer.push_event(leader(n));
        }
        let taken = buffer.take_all();
        let sequences: Vec<u64> = taken.iter().map(|p| p.sequence).collect();
        assert_eq!(sequences, [1, 2, 3, 4]);
        assert_eq!(taken[0], in_flight);
        let events: Vec<Event> = taken.into_iter().flat_map(|p| p.events).collect();
        assert_eq!(events, (1..=6).map(leader).collect::<Vec<_>>());
        assert!(buffer.take_all().is_empty() && buffer.next_batch().is_none());
        // What the spool gave up is reported by the next batch, after the ones handed over.
        buffer.spool_lost(
            2,
            DroppedCounts {
                singleton: 3,
                ..DroppedCounts::default()
            },
        );
        let next = buffer.next_batch().cloned().unwrap();
        assert_eq!(next.sequence, 5);
        assert_eq!((next.dropped.spool_batches, next.dropped.singleton), (2, 3));
    }

    proptest! {
        #[test]
        fn nothing_is_lost_without_being_counted(
            ops in proptest::collection::vec(0u8..4, 1..300),
            items in 1usize..20,
        ) {
            let mut buffer = ReportBuffer::new(BufferLimits { items, batch_events: 7 });
            let (mut events_in, mut samples_in) = (0u64, 0u64);
            let (mut events_out, mut samples_out, mut dropped) = (0u64, 0u64, 0u64);
            let mut refused = 0u64;
            for (i, op) in ops.into_iter().enumerate() {
                match op {
                    0 => { buffer.push_event(dead_letter(i as u64)); events_in += 1; }
                    1 => { buffer.push_depth_tick(tick(i as i64, 2)); samples_in += 2; }
                    2 => {
                        if let Some(batch) = buffer.next_batch().cloned() {
                            events_out += batch.events.len() as u64;
                            samples_out += batch.depth_ticks.iter().map(|t| t.samples.len() as u64).sum::<u64>();
                            dropped = batch.dropped.total();
                            buffer.acknowledged(batch.sequence);
                        }
                    }
                    3 if i % 5 == 0 => {
                        if let Some(batch) = buffer.next_batch().cloned() {
                            refused += buffer.refused(batch.sequence);
                        }
                    }
                    _ => { let _ = buffer.next_batch(); }
                }
            }
            while let Some(batch) = buffer.next_batch().cloned() {
                events_out += batch.events.len() as u64;
                samples_out += batch.depth_ticks.iter().map(|t| t.samples.len() as u64).sum::<u64>();
                dropped = batch.dropped.total();
                buffer.acknowledged(batch.sequence);
            }
            // The last acknowledged totals count everything dropped, refused batches included.
            prop_assert!(refused <= dropped);
            prop_assert_eq!(events_in + samples_in, events_out + samples_out + dropped);
            // The cumulative count (for /metrics) is every drop, reported or not.
            prop_assert_eq!(buffer.total_drops().total(), dropped);
            prop_assert_eq!(buffer.unreported_drops().total(), 0);
        }
    }
}
