//! A batch split into column vectors, one per table: what the bulk inserts bind.

use troupe_protocol::{EventBody, MemberOperation, ReportBatch};

use super::error::StoreError;
use super::model::IngestOutcome;

#[derive(Debug, Default)]
pub(super) struct EventColumns {
    pub(super) at_ms: Vec<i64>,
    pub(super) kind: Vec<&'static str>,
    pub(super) subject: Vec<Option<String>>,
    pub(super) detail: Vec<String>,
}

#[derive(Debug, Default)]
pub(super) struct DeadLetterColumns {
    pub(super) at_ms: Vec<i64>,
    pub(super) recipient: Vec<String>,
    pub(super) sender: Vec<Option<String>>,
    pub(super) message_type: Vec<String>,
    pub(super) reason: Vec<String>,
}

/// Dead letters of one batch counted per (minute, recipient, message type), in key order.
#[derive(Debug, Default)]
pub(super) struct MinuteCountColumns {
    pub(super) minute_ms: Vec<i64>,
    pub(super) recipient: Vec<String>,
    pub(super) message_type: Vec<String>,
    pub(super) count: Vec<i64>,
}

#[derive(Debug, Default)]
pub(super) struct DepthTickColumns {
    pub(super) at_ms: Vec<i64>,
    pub(super) samples: Vec<String>,
}

/// The rows one batch adds to the history tables.
#[derive(Debug, Default)]
pub(super) struct BatchRows {
    pub(super) events: EventColumns,
    pub(super) dead_letters: DeadLetterColumns,
    pub(super) dead_letter_minutes: MinuteCountColumns,
    pub(super) depth_ticks: DepthTickColumns,
    depth_samples: u64,
}

impl BatchRows {
    pub(super) fn from_batch(batch: &ReportBatch) -> Result<Self, StoreError> {
        let mut rows = Self::default();
        for event in &batch.events {
            if let EventBody::DeadLetter(d) = &event.body {
                let c = &mut rows.dead_letters;
                c.at_ms.push(event.at_ms);
                c.recipient.push(d.recipient.clone());
                c.sender.push(d.sender.clone());
                c.message_type.push(d.message_type.clone());
                c.reason.push(d.reason.clone());
            } else {
                let c = &mut rows.events;
                c.at_ms.push(event.at_ms);
                c.kind.push(event.body.kind().as_str());
                c.subject.push(event.body.subject().map(str::to_owned));
                c.detail.push(serde_json::to_string(&event.body)?);
            }
        }
        let mut minutes: std::collections::BTreeMap<(i64, &str, &str), i64> = Default::default();
        for event in &batch.events {
            if let EventBody::DeadLetter(d) = &event.body {
                // Saturating: the minute of a time near i64::MIN starts below it.
                let minute = event.at_ms.div_euclid(60_000).saturating_mul(60_000);
                *minutes
                    .entry((minute, d.recipient.as_str(), d.message_type.as_str()))
                    .or_default() += 1;
            }
        }
        for ((minute_ms, recipient, message_type), count) in minutes {
            let c = &mut rows.dead_letter_minutes;
            c.minute_ms.push(minute_ms);
            c.recipient.push(recipient.to_owned());
            c.message_type.push(message_type.to_owned());
            c.count.push(count);
        }
        for tick in &batch.depth_samples {
            rows.depth_ticks.at_ms.push(tick.at_ms);
            rows.depth_ticks
                .samples
                .push(serde_json::to_string(&tick.samples)?);
            rows.depth_samples += tick.samples.len() as u64;
        }
        Ok(rows)
    }

    /// Rows of the history tables (events, dead letters, depth ticks), not counting the
    /// per-minute rollups.
    pub(super) fn row_count(&self) -> usize {
        self.events.at_ms.len() + self.dead_letters.at_ms.len() + self.depth_ticks.at_ms.len()
    }

    pub(super) fn outcome(&self, operations: Vec<MemberOperation>) -> IngestOutcome {
        IngestOutcome {
            duplicate: false,
            stored_events: (self.events.at_ms.len() + self.dead_letters.at_ms.len()) as u64,
            stored_depth_samples: self.depth_samples,
            operations,
        }
    }
}

impl IngestOutcome {
    pub(super) fn duplicate() -> Self {
        Self {
            duplicate: true,
            stored_events: 0,
            stored_depth_samples: 0,
            operations: Vec::new(),
        }
    }
}
