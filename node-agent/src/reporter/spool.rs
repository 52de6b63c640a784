//! The report spool: the batches a stopping reporter could not deliver, kept on disk for the
//! next start of the same node, as a pure machine `step(spool, event) -> actions`. The shell
//! (`reporter.rs`) reads the file once at start, performs the actions (append, rewrite, remove,
//! count) and feeds back what happened; nothing here touches a file or a clock (the flush
//! deadline belongs to the shell), so the whole machine is property-tested.
//!
//! # The file
//! One file per node (`<cluster>@<host>_<port>.jsonl`, [`file_name`]) of JSON lines: the
//! header `{"troupe_report_spool":1}` ([`FILE_VERSION`]), an optional loss record
//! `{"lost":{…}}`, then one [`ReportBatch`] per line in wire format,
//! in the order the batches were cut. Batches keep their identity (incarnation) and sequence,
//! so replaying one the server already stored is a duplicate it drops: a batch is never
//! removed from the file before its acknowledgement, and replaying too much is harmless.
//!
//! # Bounded
//! The file never exceeds its `max_bytes` ([`Spool::new`]): an appended batch that does not fit
//! pushes out the oldest batches first; one that does not fit alone is dropped itself. Every
//! batch given up is counted ([`SpoolLoss`]: batches, and their items by kind).
//!
//! # Torn and corrupt lines
//! A process killed mid-write leaves a last line without its newline; a disk or a hand can
//! leave a line that is not JSON. Loading skips each such line, counts it as a lost batch of
//! unknown content, and rewrites the file clean (the bad lines removed), so the agent always
//! starts. A file whose header names another format version (a newer or older agent's) is not
//! read at all: it is moved aside for the operator ([`Action::Quarantine`]), each of its lines
//! counted as a lost batch. A file without a header is read as version 1 and rewritten with
//! one. What was wrong is answered as [`Action::Damaged`], for one WARN naming the file.
//!
//! # Where losses go
//! While the node runs, a loss is an [`Action::Lost`]: the shell counts it on `/metrics` and in
//! the next report's `dropped`. Once [`Event::ShuttingDown`] arrived there is no next report of
//! this process, so losses are written into the file's loss record instead; the next start of
//! the node loads it and reports it as its own [`Action::Lost`], once (the load rewrites the
//! file without it).

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};
use troupe_protocol::{DroppedCounts, EventCategory, ReportBatch};

#[cfg(test)]
mod tests;

/// The smallest `max_bytes` a spool takes: room for the loss record and a small batch.
pub const MIN_MAX_BYTES: u64 = 4 * 1024;

/// Bytes kept free for the header and the loss record, so they never push the file over its
/// bound.
const RECORD_RESERVE: u64 = 512;

/// The spool file format this agent writes and reads (the header's `troupe_report_spool`).
pub const FILE_VERSION: u64 = 1;

/// The header line, first in every file the machine writes.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Header {
    troupe_report_spool: u64,
}

fn header_line() -> String {
    let mut line = serde_json::to_string(&Header {
        troupe_report_spool: FILE_VERSION,
    })
    .expect("a header always serializes");
    line.push('\n');
    line
}

/// Lines named in a [`Damage`] at most.
const NAMED_LINES: usize = 5;

/// What was wrong with a spool file at load.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Damage {
    /// The version its header names, when it is not [`FILE_VERSION`]: nothing was read.
    pub wrong_version: Option<u64>,
    /// Lines that are neither the header, a report batch nor the loss record.
    pub unreadable_lines: u64,
    /// The first five of them, numbered from 1.
    pub first_unreadable: Vec<usize>,
    /// The last line has no newline and is not whole JSON: a write cut short.
    pub torn_tail: bool,
}

impl Damage {
    /// Whether nothing was wrong.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        if let Some(version) = self.wrong_version {
            parts.push(format!(
                "its header says spool format version {version}, this agent reads version \
                 {FILE_VERSION} only ({} line(s) not read)",
                self.unreadable_lines
            ));
        } else if self.unreadable_lines > 0 {
            let named: Vec<String> = self.first_unreadable.iter().map(usize::to_string).collect();
            let more = if self.unreadable_lines > named.len() as u64 {
                ", …"
            } else {
                ""
            };
            parts.push(format!(
                "{} line(s) neither a report batch nor a loss record (line {}{more}), removed",
                self.unreadable_lines,
                named.join(", ")
            ));
        }
        if self.torn_tail {
            parts.push("the last line is torn (a write cut short), removed".to_owned());
        }
        f.write_str(&parts.join("; "))
    }
}

/// Names one batch: the incarnation that cut it and its sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BatchKey {
    /// The agent incarnation.
    pub incarnation: u64,
    /// The batch sequence within it.
    pub sequence: u64,
}

impl BatchKey {
    /// The key of `batch`.
    #[must_use]
    pub fn of(batch: &ReportBatch) -> Self {
        Self {
            incarnation: batch.identity.incarnation,
            sequence: batch.sequence,
        }
    }
}

/// What the spool gave up: whole batches, and the items of those whose content was readable.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpoolLoss {
    /// Batches given up (pushed out when full, refused on replay, torn or unreadable).
    #[serde(default)]
    pub batches: u64,
    /// Their events and depth samples by kind (unreadable lines add nothing here).
    #[serde(default)]
    pub items: DroppedCounts,
}

impl SpoolLoss {
    /// Nothing lost.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.batches == 0 && self.items.total() == 0
    }

    /// Add `other` to this.
    pub fn add(&mut self, other: SpoolLoss) {
        self.batches += other.batches;
        let (a, b) = (&mut self.items, other.items);
        a.membership += b.membership;
        a.singleton += b.singleton;
        a.router += b.router;
        a.dead_letters += b.dead_letters;
        a.health += b.health;
        a.depth_samples += b.depth_samples;
    }

    /// One whole batch: itself and its items by kind.
    fn batch(batch: &ReportBatch) -> Self {
        let mut items = DroppedCounts::default();
        for event in &batch.events {
            match event.body.kind().category() {
                EventCategory::Membership => items.membership += 1,
                EventCategory::Singleton => items.singleton += 1,
                EventCategory::Router => items.router += 1,
                EventCategory::DeadLetter => items.dead_letters += 1,
                EventCategory::Health => items.health += 1,
            }
        }
        items.depth_samples = batch
            .depth_samples
            .iter()
            .map(|tick| tick.samples.len() as u64)
            .sum();
        Self { batches: 1, items }
    }

    /// A line that could not be read: one batch of unknown content.
    fn unreadable() -> Self {
        Self {
            batches: 1,
            items: DroppedCounts::default(),
        }
    }
}

/// The loss record line.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct LossRecord {
    lost: SpoolLoss,
}

/// What happens to the spool.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// The file's bytes at start (empty: there was no file).
    Loaded(Vec<u8>),
    /// The file was there but could not be read (no permission, an I/O error); the shell moved
    /// it aside. One batch of unknown content is lost.
    Unreadable,
    /// A batch that must survive this process (cut while shutting down, or not delivered).
    Append(Box<ReportBatch>),
    /// The server acknowledged this batch (stored now or before).
    Acknowledged(BatchKey),
    /// The server refused this batch as bad input: it would be refused again, give it up.
    Refused(BatchKey),
    /// Make the file hold what must survive, durably, now.
    Persist,
    /// This process will send no further report of its own: losses from now on go into the
    /// file's loss record.
    ShuttingDown,
}

/// What the shell must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Append these bytes (whole lines) to the file, then fsync it.
    Append(String),
    /// Replace the file with these bytes atomically (a temporary file, fsync, rename, fsync of
    /// the directory).
    Rewrite(String),
    /// Remove the file: nothing in it is needed any more.
    Remove,
    /// Count this loss on `/metrics` and in the next report's `dropped`.
    Lost(SpoolLoss),
    /// Move the file aside, kept for the operator (it is not this agent's format); the spool
    /// starts with no file.
    Quarantine,
    /// The file loaded was damaged like this: log it, naming the file.
    Damaged(Damage),
}

#[derive(Debug, Clone, PartialEq)]
struct Entry {
    key: BatchKey,
    batch: ReportBatch,
    /// Its line, without the newline.
    line: String,
}

impl Entry {
    fn bytes(&self) -> u64 {
        self.line.len() as u64 + 1
    }
}

/// What the file holds, as far as the machine knows.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Disk {
    /// No file, or an empty one.
    Empty,
    /// Exactly this loss record (if not empty) and these batches' lines, in this order.
    Lines {
        record: SpoolLoss,
        keys: Vec<BatchKey>,
    },
    /// Lines the machine did not write (as loaded, junk included): rewrite before appending.
    Unknown,
}

/// The spool of one node.
#[derive(Debug, Clone, PartialEq)]
pub struct Spool {
    max_bytes: u64,
    entries: VecDeque<Entry>,
    /// Bytes of the entries' lines.
    bytes: u64,
    disk: Disk,
    shutting_down: bool,
    /// Losses since [`Event::ShuttingDown`], for the file's loss record.
    recorded: SpoolLoss,
    /// Every loss since the spool was made, wherever it went.
    lost_total: SpoolLoss,
}

impl Spool {
    /// An empty spool whose file may hold at most `max_bytes` (at least [`MIN_MAX_BYTES`]; a
    /// smaller bound is raised to it, the config refuses one first).
    #[must_use]
    pub fn new(max_bytes: u64) -> Self {
        Self {
            max_bytes: max_bytes.max(MIN_MAX_BYTES),
            entries: VecDeque::new(),
            bytes: 0,
            disk: Disk::Empty,
            shutting_down: false,
            recorded: SpoolLoss::default(),
            lost_total: SpoolLoss::default(),
        }
    }

    /// The oldest batch not yet acknowledged: the next to send.
    #[must_use]
    pub fn front(&self) -> Option<&ReportBatch> {
        self.entries.front().map(|entry| &entry.batch)
    }

    /// Batches held.
    #[must_use]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no batch is held.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Bytes the held batches take in the file.
    #[must_use]
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Every loss since the spool was made (reported, recorded or loaded).
    #[must_use]
    pub fn lost_total(&self) -> SpoolLoss {
        self.lost_total
    }

    /// What the held batches carry: their number and their items by kind.
    #[must_use]
    pub fn held(&self) -> SpoolLoss {
        let mut held = SpoolLoss::default();
        for entry in &self.entries {
            held.add(SpoolLoss::batch(&entry.batch));
        }
        held
    }

    /// Whether batch `key` is held.
    #[must_use]
    pub fn holds(&self, key: BatchKey) -> bool {
        self.entries.iter().any(|entry| entry.key == key)
    }

    /// Room for batch lines, the loss record's reserve kept free.
    fn capacity(&self) -> u64 {
        self.max_bytes - RECORD_RESERVE
    }

    fn lose(&mut self, loss: SpoolLoss, actions: &mut Vec<Action>) {
        if loss.is_empty() {
            return;
        }
        self.lost_total.add(loss);
        if self.shutting_down {
            self.recorded.add(loss);
        } else {
            match actions.iter_mut().find_map(|a| match a {
                Action::Lost(pending) => Some(pending),
                _ => None,
            }) {
                Some(pending) => pending.add(loss),
                None => actions.push(Action::Lost(loss)),
            }
        }
    }

    /// Push out the oldest batches until `incoming` more bytes fit.
    fn make_room(&mut self, incoming: u64, actions: &mut Vec<Action>) {
        while self.bytes + incoming > self.capacity() {
            let Some(oldest) = self.entries.pop_front() else {
                break;
            };
            self.bytes -= oldest.bytes();
            self.lose(SpoolLoss::batch(&oldest.batch), actions);
        }
    }

    fn push(&mut self, batch: ReportBatch, actions: &mut Vec<Action>) {
        let key = BatchKey::of(&batch);
        if self.holds(key) {
            return;
        }
        let line = serde_json::to_string(&batch).expect("a report batch always serializes");
        let entry = Entry { key, batch, line };
        if entry.bytes() > self.capacity() {
            self.lose(SpoolLoss::batch(&entry.batch), actions);
            return;
        }
        self.make_room(entry.bytes(), actions);
        self.bytes += entry.bytes();
        self.entries.push_back(entry);
    }

    fn remove(&mut self, key: BatchKey) -> Option<Entry> {
        let at = self.entries.iter().position(|entry| entry.key == key)?;
        let entry = self.entries.remove(at)?;
        self.bytes -= entry.bytes();
        Some(entry)
    }

    fn load(&mut self, bytes: &[u8], actions: &mut Vec<Action>) {
        if bytes.is_empty() {
            return;
        }
        let mut loss = SpoolLoss::default();
        let mut damage = Damage::default();
        let mut clean = true;
        let mut header = false;
        let mut first = true;
        let mut batches = Vec::new();
        let mut lines = bytes.split(|b| *b == b'\n').enumerate().peekable();
        while let Some((index, line)) = lines.next() {
            let last = lines.peek().is_none();
            if line.iter().all(u8::is_ascii_whitespace) {
                // The empty segment after a final newline, or a blank line.
                clean &= last || line.is_empty();
                continue;
            }
            if std::mem::take(&mut first)
                && let Ok(found) = serde_json::from_slice::<Header>(line)
            {
                if found.troupe_report_spool != FILE_VERSION {
                    // Another agent's format: read nothing, keep the file for the operator.
                    let rest = lines
                        .by_ref()
                        .filter(|(_, line)| !line.iter().all(u8::is_ascii_whitespace))
                        .count() as u64;
                    damage.wrong_version = Some(found.troupe_report_spool);
                    damage.unreadable_lines = rest;
                    loss.batches = rest;
                    actions.push(Action::Damaged(damage));
                    actions.push(Action::Quarantine);
                    self.disk = Disk::Empty;
                    self.lose(loss, actions);
                    return;
                }
                header = true;
                clean &= !last;
                continue;
            }
            if last {
                // No newline after it: the write of this line never finished (a batch whose
                // JSON is whole lost only its newline, and is kept).
                clean = false;
                match serde_json::from_slice::<ReportBatch>(line) {
                    Ok(batch) => batches.push(batch),
                    Err(_) => {
                        damage.torn_tail = true;
                        loss.add(SpoolLoss::unreadable());
                    }
                }
                continue;
            }
            if let Ok(batch) = serde_json::from_slice::<ReportBatch>(line) {
                batches.push(batch);
            } else if let Ok(record) = serde_json::from_slice::<LossRecord>(line) {
                loss.add(record.lost);
                clean = false;
            } else {
                damage.unreadable_lines += 1;
                if damage.first_unreadable.len() < NAMED_LINES {
                    damage.first_unreadable.push(index + 1);
                }
                loss.add(SpoolLoss::unreadable());
                clean = false;
            }
        }
        if header && batches.is_empty() && loss.is_empty() && damage.is_empty() {
            // Nothing but the header: the machine never leaves such a file (an empty spool is
            // removed, and the header is written together with the first batch), so the
            // append of that first batch was cut right after the header.
            damage.torn_tail = true;
            loss.add(SpoolLoss::unreadable());
            clean = false;
        }
        if !damage.is_empty() {
            actions.push(Action::Damaged(damage));
        }
        self.disk = Disk::Unknown;
        self.lose(loss, actions);
        let before = self.lost_total;
        for batch in batches {
            self.push(batch, actions);
        }
        clean &= header && self.lost_total == before;
        if clean {
            self.disk = Disk::Lines {
                record: SpoolLoss::default(),
                keys: self.entries.iter().map(|entry| entry.key).collect(),
            };
        } else {
            // Junk, no header, a record already reported above, or batches pushed out: start
            // clean.
            self.persist(actions);
        }
    }

    fn persist(&mut self, actions: &mut Vec<Action>) {
        let record = self.recorded;
        if self.entries.is_empty() && record.is_empty() {
            if self.disk != Disk::Empty {
                actions.push(Action::Remove);
                self.disk = Disk::Empty;
            }
            return;
        }
        let keys: Vec<BatchKey> = self.entries.iter().map(|entry| entry.key).collect();
        let appendable = match &self.disk {
            Disk::Empty => record.is_empty(),
            Disk::Lines {
                record: on_disk,
                keys: written,
            } => *on_disk == record && keys.starts_with(written),
            Disk::Unknown => false,
        };
        if appendable {
            let written = match &self.disk {
                Disk::Lines { keys, .. } => keys.len(),
                _ => 0,
            };
            if written < keys.len() {
                let mut text = if self.disk == Disk::Empty {
                    header_line()
                } else {
                    String::new()
                };
                text.push_str(&self.lines(written));
                actions.push(Action::Append(text));
            }
        } else {
            let mut text = header_line();
            if !record.is_empty() {
                text.push_str(
                    &serde_json::to_string(&LossRecord { lost: record })
                        .expect("a loss record always serializes"),
                );
                text.push('\n');
            }
            text.push_str(&self.lines(0));
            actions.push(Action::Rewrite(text));
        }
        self.disk = Disk::Lines { record, keys };
    }

    /// The lines of the entries from `from` on, each with its newline.
    fn lines(&self, from: usize) -> String {
        let mut text = String::new();
        for entry in self.entries.iter().skip(from) {
            text.push_str(&entry.line);
            text.push('\n');
        }
        text
    }
}

/// Advance the spool by `event`: pure and total (an acknowledgement of a batch it does not
/// hold changes nothing).
pub fn step(spool: &mut Spool, event: Event) -> Vec<Action> {
    let mut actions = Vec::new();
    match event {
        Event::Loaded(bytes) => spool.load(&bytes, &mut actions),
        Event::Unreadable => spool.lose(SpoolLoss::unreadable(), &mut actions),
        Event::Append(batch) => spool.push(*batch, &mut actions),
        Event::Acknowledged(key) => {
            spool.remove(key);
        }
        Event::Refused(key) => {
            if let Some(entry) = spool.remove(key) {
                spool.lose(SpoolLoss::batch(&entry.batch), &mut actions);
            }
        }
        Event::Persist => spool.persist(&mut actions),
        Event::ShuttingDown => spool.shutting_down = true,
    }
    actions
}

/// The spool file's name for node `node` (`host:port`) of cluster `cluster`: every byte
/// outside `[A-Za-z0-9._-]` is written `%XX`, so any name maps to one safe file name and two
/// names never to the same one.
#[must_use]
pub fn file_name(cluster: &str, node: &str) -> String {
    fn escape(name: &mut String, part: &str) {
        for byte in part.bytes() {
            if byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-') {
                name.push(char::from(byte));
            } else {
                name.push_str(&format!("%{byte:02X}"));
            }
        }
    }
    let mut name = String::new();
    escape(&mut name, cluster);
    name.push('@');
    escape(&mut name, node);
    name.push_str(".jsonl");
    name
}
