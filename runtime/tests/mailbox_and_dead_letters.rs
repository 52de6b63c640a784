//! Mailboxes (unbounded by default, bounded on request, readable depth) and dead letters for
//! every message that cannot be delivered.

#[path = "support/helpers.rs"]
mod helpers;

use std::time::Duration;

use helpers::{Blocker, Gate, drain, gate, next_event, within};
use tokio::sync::mpsc;
use troupe::{
    Actor, ActorError, ActorRef, ActorSystem, AskError, Context, DeadLetter, DeadLetterReason,
    MailboxOptions, Props, ReplyTo, SendError,
};

struct Sink {
    items: Vec<u32>,
    held: Option<ReplyTo<u32>>,
    /// Every item as it is handled.
    seen: mpsc::UnboundedSender<u32>,
}

#[derive(Debug)]
enum SinkMsg {
    Item(u32),
    Items(ReplyTo<Vec<u32>>),
    Block(Blocker),
    /// Keep the reply channel without answering.
    Hold(ReplyTo<u32>),
    /// Answer the held reply channel now.
    Answer(u32),
}

impl Actor for Sink {
    type Msg = SinkMsg;

    async fn handle(&mut self, msg: SinkMsg, _ctx: &mut Context<Self>) -> Result<(), ActorError> {
        match msg {
            SinkMsg::Item(n) => {
                self.items.push(n);
                let _ = self.seen.send(n);
            }
            SinkMsg::Items(reply) => reply.send(self.items.clone()),
            SinkMsg::Block(blocker) => blocker.block().await,
            SinkMsg::Hold(reply) => self.held = Some(reply),
            SinkMsg::Answer(n) => {
                if let Some(reply) = self.held.take() {
                    reply.send(n);
                }
            }
        }
        Ok(())
    }
}

fn sink_props(mailbox: MailboxOptions) -> (Props<Sink>, mpsc::UnboundedReceiver<u32>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let props = Props::new(move || Sink {
        items: Vec::new(),
        held: None,
        seen: tx.clone(),
    })
    .with_mailbox(mailbox);
    (props, rx)
}

fn sink(system: &ActorSystem, mailbox: MailboxOptions) -> ActorRef<SinkMsg> {
    sink_with_items(system, mailbox).0
}

/// A sink at `/user/sink`, and the items it handles as they are handled.
fn sink_with_items(
    system: &ActorSystem,
    mailbox: MailboxOptions,
) -> (ActorRef<SinkMsg>, mpsc::UnboundedReceiver<u32>) {
    let (props, seen) = sink_props(mailbox);
    (system.spawn("sink", props).unwrap(), seen)
}

/// The next `n` items the sink handles.
async fn next_items(seen: &mut mpsc::UnboundedReceiver<u32>, n: usize) -> Vec<u32> {
    let mut items = Vec::new();
    for _ in 0..n {
        items.push(within("the next item", seen.recv()).await.unwrap());
    }
    items
}

/// Put the actor inside a handler so that later messages stay queued.
async fn hold(actor: &ActorRef<SinkMsg>) -> Gate {
    let (mut gate, blocker) = gate();
    actor.tell(SinkMsg::Block(blocker));
    gate.entered().await;
    gate
}

async fn items(actor: &ActorRef<SinkMsg>) -> Vec<u32> {
    within("the sink to answer", actor.ask(SinkMsg::Items))
        .await
        .unwrap()
}

#[tokio::test]
async fn the_default_mailbox_is_unbounded() {
    let system = ActorSystem::new("mb").unwrap();
    let actor = sink(&system, MailboxOptions::Unbounded);
    let gate = hold(&actor).await;

    for n in 0..10_000 {
        actor.tell(SinkMsg::Item(n));
    }
    assert_eq!(actor.mailbox_depth().get(), 10_000);
    assert_eq!(system.dead_letters().count(), 0);
    gate.open();
    assert_eq!(items(&actor).await, (0..10_000).collect::<Vec<_>>());
    system.shutdown().await;
}

#[tokio::test]
async fn a_full_bounded_mailbox_turns_the_next_message_into_a_mailbox_full_dead_letter() {
    let system = ActorSystem::new("mb").unwrap();
    let mut dead_letters = system.event_stream().subscribe::<DeadLetter>();
    let (actor, mut seen) = sink_with_items(&system, MailboxOptions::bounded(2));
    let sender = system
        .spawn("sender", sink_props(MailboxOptions::Unbounded).0)
        .unwrap();
    let gate = hold(&actor).await;

    actor.tell(SinkMsg::Item(1));
    actor.tell(SinkMsg::Item(2));
    actor.tell_from(SinkMsg::Item(3), sender.path());
    assert_eq!(actor.mailbox_depth().get(), 2);
    assert_eq!(
        drain(&mut dead_letters),
        [DeadLetter {
            recipient: actor.path().clone(),
            sender: Some(sender.path().clone()),
            message_type: std::any::type_name::<SinkMsg>(),
            reason: DeadLetterReason::MailboxFull,
        }]
    );
    assert_eq!(system.dead_letters().count(), 1);

    gate.open();
    assert_eq!(next_items(&mut seen, 2).await, [1, 2]);
    assert_eq!(
        items(&actor).await,
        [1, 2],
        "the overflowing item never arrived"
    );
    system.shutdown().await;
}

#[tokio::test]
async fn an_ask_into_a_full_bounded_mailbox_fails_as_undeliverable_mailbox_full() {
    let system = ActorSystem::new("mb").unwrap();
    let actor = sink(&system, MailboxOptions::bounded(1));
    let gate = hold(&actor).await;
    actor.tell(SinkMsg::Item(1));

    let err = actor.ask(SinkMsg::Items).await.unwrap_err();
    assert_eq!(
        err,
        AskError::Undeliverable {
            recipient: actor.path().clone(),
            reason: DeadLetterReason::MailboxFull,
        }
    );
    assert_eq!(system.dead_letters().count(), 1);
    gate.open();
    system.shutdown().await;
}

#[tokio::test]
async fn system_messages_bypass_the_bound_so_a_full_actor_can_still_be_stopped() {
    let system = ActorSystem::new("mb").unwrap();
    let mut dead_letters = system.event_stream().subscribe::<DeadLetter>();
    let actor = sink(&system, MailboxOptions::bounded(1));
    let gate = hold(&actor).await;
    actor.tell(SinkMsg::Item(1));

    actor.stop();
    gate.open();
    within("the full actor to stop", actor.terminated()).await;
    let dead = drain(&mut dead_letters);
    assert_eq!(dead.len(), 1, "the queued item: {dead:?}");
    assert_eq!(dead[0].reason, DeadLetterReason::RecipientStopped);
    system.shutdown().await;
}

#[tokio::test]
async fn a_poison_pill_into_a_full_bounded_mailbox_is_dead_lettered_not_lost() {
    let system = ActorSystem::new("mb").unwrap();
    let mut dead_letters = system.event_stream().subscribe::<DeadLetter>();
    let (actor, mut seen) = sink_with_items(&system, MailboxOptions::bounded(1));
    let gate = hold(&actor).await;
    actor.tell(SinkMsg::Item(1));

    actor.poison_pill();
    let dead = drain(&mut dead_letters);
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0].reason, DeadLetterReason::MailboxFull);
    assert_eq!(dead[0].message_type, "troupe::PoisonPill");
    gate.open();
    assert_eq!(next_items(&mut seen, 1).await, [1]);
    assert_eq!(
        items(&actor).await,
        [1],
        "the refused pill did not stop the actor"
    );
    system.shutdown().await;
}

#[tokio::test]
async fn try_tell_gives_the_message_back_when_the_mailbox_is_full_or_the_actor_stopped() {
    let system = ActorSystem::new("mb").unwrap();
    let mut dead_letters = system.event_stream().subscribe::<DeadLetter>();
    let actor = sink(&system, MailboxOptions::bounded(1));
    let gate = hold(&actor).await;

    actor.try_tell(SinkMsg::Item(1)).unwrap();
    let full = actor.try_tell(SinkMsg::Item(2)).unwrap_err();
    assert_eq!(full.reason(), DeadLetterReason::MailboxFull);
    assert_eq!(full.to_string(), "recipient mailbox is full");
    assert!(matches!(full, SendError::MailboxFull(SinkMsg::Item(2))));

    actor.stop();
    gate.open();
    within("the actor to stop", actor.terminated()).await;
    let stopped = actor.try_tell(SinkMsg::Item(3)).unwrap_err();
    assert_eq!(stopped.to_string(), "recipient has stopped");
    assert!(matches!(stopped, SendError::Stopped(SinkMsg::Item(3))));
    // Only the queued Item(1) became a dead letter; refused try_tells were handed back.
    assert_eq!(drain(&mut dead_letters).len(), 1);
    system.shutdown().await;
}

#[tokio::test]
async fn mailbox_depth_counts_the_messages_queued_behind_a_busy_handler() {
    let system = ActorSystem::new("mb").unwrap();
    let actor = sink(&system, MailboxOptions::Unbounded);
    let depth = actor.mailbox_depth();
    assert_eq!(depth.get(), 0);
    let gate = hold(&actor).await;

    for n in 0..5 {
        actor.tell(SinkMsg::Item(n));
    }
    assert_eq!(depth.get(), 5);
    assert_eq!(actor.as_any().mailbox_depth(), 5);
    assert_eq!(system.resolve_any("/user/sink").unwrap().mailbox_depth(), 5);

    gate.open();
    assert_eq!(items(&actor).await.len(), 5);
    assert_eq!(depth.get(), 0);
    system.shutdown().await;
}

#[tokio::test]
async fn mailbox_depth_reads_zero_once_the_actor_has_stopped() {
    let system = ActorSystem::new("mb").unwrap();
    let actor = sink(&system, MailboxOptions::bounded(10));
    let depth = actor.mailbox_depth();
    let gate = hold(&actor).await;
    for n in 0..3 {
        actor.tell(SinkMsg::Item(n));
    }
    assert_eq!(depth.get(), 3);

    actor.stop();
    gate.open();
    within("the actor to stop", actor.terminated()).await;
    assert_eq!(depth.get(), 0);
    assert_eq!(actor.as_any().mailbox_depth(), 0);
    system.shutdown().await;
}

#[tokio::test]
async fn a_tell_to_a_stopped_actor_is_a_recipient_stopped_dead_letter_naming_the_sender() {
    let system = ActorSystem::new("mb").unwrap();
    let mut dead_letters = system.event_stream().subscribe::<DeadLetter>();
    let actor = sink(&system, MailboxOptions::Unbounded);
    let sender = system
        .spawn("sender", sink_props(MailboxOptions::Unbounded).0)
        .unwrap();
    actor.stop();
    within("the actor to stop", actor.terminated()).await;

    actor.tell_from(SinkMsg::Item(1), sender.path());
    actor.tell(SinkMsg::Item(2));
    let expected = |sender| DeadLetter {
        recipient: actor.path().clone(),
        sender,
        message_type: std::any::type_name::<SinkMsg>(),
        reason: DeadLetterReason::RecipientStopped,
    };
    assert_eq!(
        drain(&mut dead_letters),
        [expected(Some(sender.path().clone())), expected(None)]
    );
    assert_eq!(system.dead_letters().count(), 2);
    system.shutdown().await;
}

#[tokio::test]
async fn tell_path_to_an_unknown_or_mistyped_path_is_an_unknown_recipient_dead_letter() {
    let system = ActorSystem::new("mb").unwrap();
    let mut dead_letters = system.event_stream().subscribe::<DeadLetter>();
    sink(&system, MailboxOptions::Unbounded);

    system.tell_path("/user/nobody", 7_u32);
    system.tell_path("/user/sink", 7_u32); // lives, but takes SinkMsg
    system.tell_path("not a path", 7_u32);
    let dead = drain(&mut dead_letters);
    let recipients: Vec<String> = dead.iter().map(|d| d.recipient.to_string()).collect();
    assert_eq!(
        recipients,
        [
            "troupe://mb/user/nobody",
            "troupe://mb/user/sink",
            "troupe://mb/invalid-path"
        ]
    );
    for letter in &dead {
        assert_eq!(letter.reason, DeadLetterReason::UnknownRecipient);
        assert_eq!(letter.message_type, "u32");
        assert_eq!(letter.sender, None);
    }
    system.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_reply_to_an_asker_that_gave_up_is_an_asker_gone_dead_letter() {
    let system = ActorSystem::new("mb").unwrap();
    let mut dead_letters = system.event_stream().subscribe::<DeadLetter>();
    let actor = sink(&system, MailboxOptions::Unbounded);

    let err = actor
        .ask(SinkMsg::Hold)
        .timeout(Duration::from_millis(100))
        .await
        .unwrap_err();
    assert!(matches!(err, AskError::Timeout { .. }), "{err:?}");
    actor.tell(SinkMsg::Answer(42));

    let dead = next_event(&mut dead_letters).await;
    assert_eq!(dead.reason, DeadLetterReason::AskerGone);
    assert_eq!(dead.sender, Some(actor.path().clone()));
    assert_eq!(dead.message_type, "u32");
    assert_eq!(dead.recipient.system(), "mb");
    system.shutdown().await;
}

/// Tells `SinkMsg::Item(n)` to the target it is given, once before and once after an `.await`,
/// then answers.
struct Relay;

enum RelayMsg {
    TellTwice(ActorRef<SinkMsg>, u32, ReplyTo<()>),
}

impl Actor for Relay {
    type Msg = RelayMsg;

    async fn handle(&mut self, msg: RelayMsg, _ctx: &mut Context<Self>) -> Result<(), ActorError> {
        let RelayMsg::TellTwice(target, n, reply) = msg;
        target.tell(SinkMsg::Item(n));
        tokio::task::yield_now().await;
        target.tell(SinkMsg::Item(n + 1));
        reply.send(());
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tell_from_inside_a_handler_names_the_actor_as_sender_and_one_from_outside_names_none() {
    let system = ActorSystem::new("mb").unwrap();
    let mut dead_letters = system.event_stream().subscribe::<DeadLetter>();
    let actor = sink(&system, MailboxOptions::Unbounded);
    let relay = system.spawn("relay", Props::new(|| Relay)).unwrap();
    actor.stop();
    within("the actor to stop", actor.terminated()).await;

    within(
        "the relay to tell",
        relay.ask(|reply| RelayMsg::TellTwice(actor.clone(), 1, reply)),
    )
    .await
    .unwrap();
    actor.tell(SinkMsg::Item(3));
    let expected = |sender| DeadLetter {
        recipient: actor.path().clone(),
        sender,
        message_type: std::any::type_name::<SinkMsg>(),
        reason: DeadLetterReason::RecipientStopped,
    };
    assert_eq!(
        drain(&mut dead_letters),
        [
            expected(Some(relay.path().clone())),
            expected(Some(relay.path().clone())),
            expected(None),
        ],
        "before and after the handler's .await, then from the test (no actor)"
    );
    system.shutdown().await;
}

/// Reports the sender of every item it handles.
struct SenderProbe(mpsc::UnboundedSender<Option<String>>);

impl Actor for SenderProbe {
    type Msg = SinkMsg;

    async fn handle(&mut self, _msg: SinkMsg, ctx: &mut Context<Self>) -> Result<(), ActorError> {
        let _ = self.0.send(ctx.sender().map(ToString::to_string));
        Ok(())
    }
}

#[tokio::test]
async fn the_recipient_of_a_tell_from_inside_a_handler_sees_the_teller_as_its_sender() {
    let system = ActorSystem::new("mb").unwrap();
    let (tx, mut senders) = mpsc::unbounded_channel();
    let probe = system
        .spawn("probe", Props::new(move || SenderProbe(tx.clone())))
        .unwrap();
    let relay = system.spawn("relay", Props::new(|| Relay)).unwrap();
    within(
        "the relay to tell",
        relay.ask(|reply| RelayMsg::TellTwice(probe.clone(), 1, reply)),
    )
    .await
    .unwrap();
    probe.tell(SinkMsg::Item(3));
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push(within("a sender", senders.recv()).await.unwrap());
    }
    let relay_path = Some("troupe://mb/user/relay".to_owned());
    assert_eq!(seen, [relay_path.clone(), relay_path, None]);
    system.shutdown().await;
}
