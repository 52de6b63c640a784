use std::collections::BTreeSet;

use proptest::prelude::*;
use troupe_protocol::{
    AgentIdentity, AgentMeta, DeadLetterEvent, Event as Reported, EventBody, PROTOCOL_VERSION,
};

use super::*;

fn batch(incarnation: u64, sequence: u64, events: usize, size: usize) -> ReportBatch {
    ReportBatch {
        version: PROTOCOL_VERSION,
        identity: AgentIdentity {
            cluster: "c".into(),
            node: "127.0.0.1:2552".into(),
            incarnation,
            meta: AgentMeta::default(),
            cluster_identity: None,
        },
        sequence,
        sent_at_ms: 1,
        events: (0..events)
            .map(|i| Reported {
                at_ms: i as i64,
                body: EventBody::DeadLetter(DeadLetterEvent {
                    recipient: "/user/r".into(),
                    sender: None,
                    message_type: "m".repeat(size),
                    reason: "r".into(),
                }),
            })
            .collect(),
        depth_samples: vec![],
        dropped: DroppedCounts::default(),
    }
}

/// A file the actions are performed on; `.1` is where the last write began when it was an
/// append (the only write a kill can tear: a rewrite is a rename).
#[derive(Debug, Default)]
struct File(Vec<u8>, Option<usize>);

impl File {
    fn perform(&mut self, actions: &[Action]) -> SpoolLoss {
        let mut lost = SpoolLoss::default();
        for action in actions {
            match action {
                Action::Append(text) => {
                    self.1 = Some(self.0.len());
                    self.0.extend_from_slice(text.as_bytes());
                }
                Action::Rewrite(text) => {
                    self.1 = None;
                    self.0 = text.as_bytes().to_vec();
                }
                Action::Remove => {
                    self.1 = None;
                    self.0.clear();
                }
                Action::Quarantine => {
                    // Moved aside: the spool's own file is gone.
                    self.1 = None;
                    self.0.clear();
                }
                Action::Lost(loss) => lost.add(*loss),
                Action::Damaged(_) => {}
            }
        }
        lost
    }
}

fn keys(spool: &Spool) -> Vec<BatchKey> {
    spool.entries.iter().map(|entry| entry.key).collect()
}

fn key(incarnation: u64, sequence: u64) -> BatchKey {
    BatchKey {
        incarnation,
        sequence,
    }
}

#[test]
fn batches_come_back_on_the_next_start_in_order_with_their_identity_and_sequence() {
    let mut file = File::default();
    let mut spool = Spool::new(64 * 1024);
    step(&mut spool, Event::Loaded(Vec::new()));
    for sequence in 1..=3 {
        file.perform(&step(
            &mut spool,
            Event::Append(Box::new(batch(7, sequence, 2, 5))),
        ));
    }
    file.perform(&step(&mut spool, Event::Persist));
    let mut next = Spool::new(64 * 1024);
    let actions = step(&mut next, Event::Loaded(file.0.clone()));
    assert!(
        actions.is_empty(),
        "a clean file loads as it is: {actions:?}"
    );
    assert_eq!(next.front(), Some(&batch(7, 1, 2, 5)));
    assert_eq!(keys(&next), [key(7, 1), key(7, 2), key(7, 3)]);
    // Delivered one by one; the file goes once nothing in it is needed.
    for sequence in 1..=3 {
        step(&mut next, Event::Acknowledged(key(7, sequence)));
    }
    assert_eq!(step(&mut next, Event::Persist), [Action::Remove]);
    assert!(next.is_empty());
}

#[test]
fn a_torn_last_line_is_skipped_and_counted_and_the_file_rewritten_clean() {
    let mut file = File::default();
    let mut spool = Spool::new(64 * 1024);
    file.perform(&step(
        &mut spool,
        Event::Append(Box::new(batch(1, 1, 1, 3))),
    ));
    file.perform(&step(
        &mut spool,
        Event::Append(Box::new(batch(1, 2, 1, 3))),
    ));
    file.perform(&step(&mut spool, Event::Persist));
    let torn = file.0.len() - 10;
    file.0.truncate(torn);
    let mut next = Spool::new(64 * 1024);
    let actions = step(&mut next, Event::Loaded(file.0.clone()));
    assert_eq!(keys(&next), [key(1, 1)]);
    let lost = File::default().perform(&actions);
    assert_eq!(lost.batches, 1, "{actions:?}");
    assert_eq!(lost.items.total(), 0, "its content is unknown");
    assert!(
        matches!(actions.as_slice(),
            [Action::Damaged(damage), Action::Lost(_), Action::Rewrite(text)]
                if damage.torn_tail && damage.unreadable_lines == 0
                    // The header and the one whole batch.
                    && text.lines().count() == 2
                    && text.starts_with("{\"troupe_report_spool\":1}\n")),
        "{actions:?}"
    );
}

#[test]
fn a_first_append_cut_right_after_the_header_counts_its_batch_as_lost() {
    let mut file = File::default();
    let mut spool = Spool::new(64 * 1024);
    file.perform(&step(
        &mut spool,
        Event::Append(Box::new(batch(1, 1, 1, 3))),
    ));
    file.perform(&step(&mut spool, Event::Persist));
    let header = "{\"troupe_report_spool\":1}\n";
    assert!(String::from_utf8_lossy(&file.0).starts_with(header));
    // The kill came after the header's newline and before the batch's first byte.
    file.0.truncate(header.len());
    let mut next = Spool::new(64 * 1024);
    let actions = step(&mut next, Event::Loaded(file.0.clone()));
    assert!(next.is_empty());
    let lost = File::default().perform(&actions);
    assert_eq!(lost.batches, 1, "{actions:?}");
    assert!(
        matches!(actions.first(), Some(Action::Damaged(damage)) if damage.torn_tail),
        "{actions:?}"
    );
}

/// The lines of a file holding the header and batches 1..=n of incarnation 1.
fn file_of(n: u64) -> Vec<String> {
    let mut file = File::default();
    let mut spool = Spool::new(64 * 1024);
    for sequence in 1..=n {
        step(
            &mut spool,
            Event::Append(Box::new(batch(1, sequence, 1, 3))),
        );
    }
    file.perform(&step(&mut spool, Event::Persist));
    String::from_utf8(file.0)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn damage_of(actions: &[Action]) -> Option<&Damage> {
    actions.iter().find_map(|a| match a {
        Action::Damaged(damage) => Some(damage),
        _ => None,
    })
}

#[test]
fn garbage_lines_are_named_removed_and_counted_and_every_readable_batch_kept() {
    let mut lines = file_of(3);
    assert_eq!(lines[0], "{\"troupe_report_spool\":1}");
    lines.insert(2, "\u{1}\u{2} garbage".to_owned());
    lines.insert(4, "{\"identity\": 7}".to_owned());
    let text = lines.join("\n") + "\n";
    let mut spool = Spool::new(64 * 1024);
    let actions = step(&mut spool, Event::Loaded(text.into_bytes()));
    assert_eq!(keys(&spool), [key(1, 1), key(1, 2), key(1, 3)]);
    let damage = damage_of(&actions).expect("damage reported");
    assert_eq!(damage.unreadable_lines, 2);
    assert_eq!(damage.first_unreadable, [3, 5]);
    assert_eq!(
        damage.to_string(),
        "2 line(s) neither a report batch nor a loss record (line 3, 5), removed"
    );
    let mut file = File::default();
    assert_eq!(file.perform(&actions).batches, 2);
    // Rewritten clean: the header and the three batches.
    assert_eq!(String::from_utf8(file.0).unwrap().lines().count(), 4);
}

#[test]
fn a_file_of_another_format_version_is_quarantined_unread_and_its_lines_counted() {
    let mut lines = file_of(2);
    lines[0] = "{\"troupe_report_spool\":2}".to_owned();
    let text = lines.join("\n") + "\n";
    let mut spool = Spool::new(64 * 1024);
    let actions = step(&mut spool, Event::Loaded(text.into_bytes()));
    assert!(spool.is_empty(), "nothing read from another version's file");
    assert!(actions.contains(&Action::Quarantine), "{actions:?}");
    let damage = damage_of(&actions).expect("damage reported");
    assert_eq!(damage.wrong_version, Some(2));
    assert_eq!(
        damage.to_string(),
        "its header says spool format version 2, this agent reads version 1 only (2 line(s) not read)"
    );
    let lost = File::default().perform(&actions);
    assert_eq!(lost.batches, 2);
    assert_eq!(spool.lost_total().batches, 2);
    // The next batch starts a new file, header first.
    let mut file = File::default();
    file.perform(&step(
        &mut spool,
        Event::Append(Box::new(batch(2, 1, 1, 3))),
    ));
    file.perform(&step(&mut spool, Event::Persist));
    assert!(file.0.starts_with(b"{\"troupe_report_spool\":1}\n"));
}

#[test]
fn a_file_without_a_header_is_read_as_version_1_and_rewritten_with_one_without_a_warning() {
    let lines = file_of(2);
    let text = lines[1..].join("\n") + "\n";
    let mut spool = Spool::new(64 * 1024);
    let actions = step(&mut spool, Event::Loaded(text.into_bytes()));
    assert_eq!(keys(&spool), [key(1, 1), key(1, 2)]);
    assert!(damage_of(&actions).is_none(), "{actions:?}");
    assert!(
        matches!(actions.as_slice(), [Action::Rewrite(text)] if text.starts_with("{\"troupe_report_spool\":1}\n") && text.lines().count() == 3),
        "{actions:?}"
    );
}

#[test]
fn an_unreadable_file_is_one_batch_of_unknown_content() {
    let mut spool = Spool::new(MIN_MAX_BYTES);
    let actions = step(&mut spool, Event::Unreadable);
    assert_eq!(File::default().perform(&actions).batches, 1);
    assert_eq!(spool.lost_total().batches, 1);
}

#[test]
fn a_corrupt_file_loads_what_it_can_and_never_fails() {
    for junk in [
        &b"\xff\xfe not json\n"[..],
        b"{\"version\":1}\n",
        b"\n\n   \n",
        b"{\"lost\":{\"batches\":\"x\"}}\n",
        b"[1,2,3]\n{",
    ] {
        let mut spool = Spool::new(MIN_MAX_BYTES);
        let actions = step(&mut spool, Event::Loaded(junk.to_vec()));
        assert!(spool.is_empty(), "{junk:?}");
        // Nothing left worth keeping: the file goes.
        assert!(
            actions.last().is_none_or(|a| *a == Action::Remove),
            "{junk:?}: {actions:?}"
        );
    }
}

#[test]
fn when_full_the_oldest_batches_go_first_counted_with_their_items() {
    let mut spool = Spool::new(MIN_MAX_BYTES);
    let mut lost = SpoolLoss::default();
    for sequence in 1..=20 {
        let actions = step(
            &mut spool,
            Event::Append(Box::new(batch(1, sequence, 3, 100))),
        );
        lost.add(File::default().perform(&actions));
    }
    let held = keys(&spool);
    assert!(held.len() < 20 && !held.is_empty());
    assert_eq!(
        held.first().unwrap().sequence,
        21 - held.len() as u64,
        "the newest are kept"
    );
    assert_eq!(lost.batches, 20 - held.len() as u64);
    assert_eq!(lost.items.dead_letters, 3 * lost.batches);
    // A batch larger than the whole spool is given up itself.
    let actions = step(&mut spool, Event::Append(Box::new(batch(1, 21, 1, 10_000))));
    assert_eq!(File::default().perform(&actions).batches, 1);
    assert_eq!(keys(&spool), held);
}

#[test]
fn losses_while_shutting_down_go_into_the_file_and_are_reported_by_the_next_start_once() {
    let mut file = File::default();
    let mut spool = Spool::new(MIN_MAX_BYTES);
    step(&mut spool, Event::ShuttingDown);
    for sequence in 1..=20 {
        let actions = step(
            &mut spool,
            Event::Append(Box::new(batch(1, sequence, 3, 100))),
        );
        assert!(
            !actions.iter().any(|a| matches!(a, Action::Lost(_))),
            "no report of this process will carry them"
        );
        file.perform(&actions);
        file.perform(&step(&mut spool, Event::Persist));
    }
    assert!(file.0.len() as u64 <= MIN_MAX_BYTES);
    let gone = 20 - spool.len() as u64;
    let mut next = Spool::new(MIN_MAX_BYTES);
    let actions = step(&mut next, Event::Loaded(file.0.clone()));
    let lost = file.perform(&actions);
    assert_eq!((lost.batches, lost.items.dead_letters), (gone, 3 * gone));
    assert_eq!(keys(&next), keys(&spool));
    // The load rewrote the file without the record: a third start does not count it again.
    let mut third = Spool::new(MIN_MAX_BYTES);
    assert!(step(&mut third, Event::Loaded(file.0.clone())).is_empty());
}

#[test]
fn a_replayed_batch_refused_as_bad_input_is_given_up_and_counted() {
    let mut spool = Spool::new(MIN_MAX_BYTES);
    step(&mut spool, Event::Append(Box::new(batch(1, 1, 2, 1))));
    step(&mut spool, Event::Append(Box::new(batch(1, 2, 1, 1))));
    let actions = step(&mut spool, Event::Refused(key(1, 1)));
    assert_eq!(
        actions,
        [Action::Lost(SpoolLoss {
            batches: 1,
            items: DroppedCounts {
                dead_letters: 2,
                ..DroppedCounts::default()
            }
        })]
    );
    assert_eq!(spool.front().map(|b| b.sequence), Some(2));
    assert!(step(&mut spool, Event::Refused(key(1, 1))).is_empty());
}

#[test]
fn file_names_are_safe_and_distinct() {
    assert_eq!(
        file_name("shop", "10.0.0.1:2552"),
        "shop@10.0.0.1%3A2552.jsonl"
    );
    assert_eq!(
        file_name("../x/y", "[::1]:1"),
        "..%2Fx%2Fy@%5B%3A%3A1%5D%3A1.jsonl"
    );
    assert_ne!(file_name("a@b", "c"), file_name("a", "b@c"));
}

#[derive(Debug, Clone)]
enum Op {
    /// Cut a batch of this many events of this size, append it and persist (what the shell
    /// does with every batch while shutting down).
    Append {
        events: usize,
        size: usize,
    },
    /// The server acknowledged the oldest held batch (replay goes in order).
    AckFront,
    /// The server refused the held batch at this index.
    Refuse(usize),
    Persist,
    ShuttingDown,
    /// The process stops (after a persist, as the shell always does), maybe killed while its
    /// last append was half written (the file cut this many bytes short), and the node starts
    /// again as a new incarnation.
    Restart {
        torn: Option<usize>,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0usize..6, 0usize..400).prop_map(|(events, size)| Op::Append { events, size }),
        2 => Just(Op::AckFront),
        1 => (0usize..8).prop_map(Op::Refuse),
        1 => Just(Op::Persist),
        1 => Just(Op::ShuttingDown),
        1 => proptest::option::of(1usize..300).prop_map(|torn| Op::Restart { torn }),
    ]
}

proptest! {
    /// Whatever is appended, acknowledged, refused, persisted, torn and restarted: the file
    /// stays within its bound; after a persist it loads back to exactly what the spool holds,
    /// in order; and every batch appended and never acknowledged is still held or counted as
    /// lost (by the running process, or by the next start from the file's loss record).
    #[test]
    fn nothing_unacknowledged_disappears_uncounted_and_the_file_stays_bounded(
        ops in proptest::collection::vec(op(), 1..80),
        max_bytes in MIN_MAX_BYTES..(16 * 1024),
    ) {
        let mut file = File::default();
        let mut spool = Spool::new(max_bytes);
        let mut incarnation = 1u64;
        let mut sequence = 0u64;
        let mut appended: Vec<BatchKey> = Vec::new();
        let mut acknowledged: BTreeSet<BatchKey> = BTreeSet::new();
        let mut counted = SpoolLoss::default();
        for op in ops {
            match op {
                Op::Append { events, size } => {
                    sequence += 1;
                    let actions = step(&mut spool, Event::Append(Box::new(batch(incarnation, sequence, events, size))));
                    counted.add(file.perform(&actions));
                    appended.push(key(incarnation, sequence));
                    counted.add(file.perform(&step(&mut spool, Event::Persist)));
                }
                Op::AckFront => {
                    if let Some(front) = spool.front().map(BatchKey::of) {
                        acknowledged.insert(front);
                        counted.add(file.perform(&step(&mut spool, Event::Acknowledged(front))));
                    }
                }
                Op::Refuse(at) => {
                    if let Some(entry) = spool.entries.get(at) {
                        let refused = entry.key;
                        counted.add(file.perform(&step(&mut spool, Event::Refused(refused))));
                    }
                }
                Op::Persist => {
                    counted.add(file.perform(&step(&mut spool, Event::Persist)));
                    prop_assert!(file.0.len() as u64 <= max_bytes);
                    let mut reloaded = Spool::new(max_bytes);
                    let actions = step(&mut reloaded, Event::Loaded(file.0.clone()));
                    prop_assert_eq!(keys(&reloaded), keys(&spool));
                    let lost = File::default().perform(&actions);
                    prop_assert_eq!(lost, spool.recorded, "only the record is reported");
                }
                Op::ShuttingDown => {
                    counted.add(file.perform(&step(&mut spool, Event::ShuttingDown)));
                }
                Op::Restart { torn } => {
                    counted.add(file.perform(&step(&mut spool, Event::Persist)));
                    prop_assert!(file.0.len() as u64 <= max_bytes);
                    if let (Some(torn), Some(from)) = (torn, file.1) {
                        // Killed while the last append was half written: at least its first
                        // byte reached the disk (a write that left nothing never happened,
                        // and the shell persists before it lets anything go).
                        let cut = file.0.len().saturating_sub(torn).max(from + 1);
                        file.0.truncate(cut);
                    }
                    incarnation += 1;
                    sequence = 0;
                    spool = Spool::new(max_bytes);
                    counted.add(file.perform(&step(&mut spool, Event::Loaded(file.0.clone()))));
                    prop_assert!(file.0.len() as u64 <= max_bytes);
                }
            }
            // Held batches keep the order they were appended in.
            let held = keys(&spool);
            let positions: Vec<usize> = held
                .iter()
                .map(|k| appended.iter().position(|a| a == k).expect("held only what was appended"))
                .collect();
            prop_assert!(positions.windows(2).all(|w| w[0] < w[1]), "{:?}", held);
            // Nothing missing uncounted (what this process recorded counts: the next start
            // reports it).
            let missing = appended
                .iter()
                .filter(|k| !acknowledged.contains(k) && !held.contains(k))
                .count() as u64;
            prop_assert!(
                missing <= counted.batches + spool.recorded.batches,
                "missing {} counted {:?} recorded {:?}", missing, counted, spool.recorded
            );
        }
    }
}
