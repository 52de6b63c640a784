//! The event stream: subscribe by type with a channel or an actor, unsubscribe, and dead
//! letters published on it.

#[path = "support/helpers.rs"]
mod helpers;

use helpers::{Blocker, drain, gate, next_event, within};
use tokio::sync::mpsc;
use troupe::{
    Actor, ActorError, ActorRef, ActorSystem, Context, DeadLetter, DeadLetterReason,
    MailboxOptions, Props, ReplyTo,
};

#[derive(Debug, Clone, PartialEq)]
struct Announcement(u32);

#[derive(Debug, Clone, PartialEq)]
struct Other(&'static str);

/// Receives announcements and dead letters from the event stream.
struct Listener {
    seen: mpsc::UnboundedSender<ListenerMsg>,
}

#[derive(Debug)]
enum ListenerMsg {
    Announcement(Announcement),
    DeadLetter(DeadLetter),
    Block(Blocker),
    Ping(ReplyTo<()>),
}

impl From<Announcement> for ListenerMsg {
    fn from(event: Announcement) -> Self {
        Self::Announcement(event)
    }
}

impl From<DeadLetter> for ListenerMsg {
    fn from(event: DeadLetter) -> Self {
        Self::DeadLetter(event)
    }
}

impl Actor for Listener {
    type Msg = ListenerMsg;

    async fn handle(
        &mut self,
        msg: ListenerMsg,
        _ctx: &mut Context<Self>,
    ) -> Result<(), ActorError> {
        match msg {
            ListenerMsg::Block(blocker) => blocker.block().await,
            ListenerMsg::Ping(reply) => reply.send(()),
            event => {
                let _ = self.seen.send(event);
            }
        }
        Ok(())
    }
}

fn listener(
    system: &ActorSystem,
    name: &str,
    mailbox: MailboxOptions,
) -> (ActorRef<ListenerMsg>, mpsc::UnboundedReceiver<ListenerMsg>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let actor = system
        .spawn(
            name,
            Props::new(move || Listener { seen: tx.clone() }).with_mailbox(mailbox),
        )
        .unwrap();
    (actor, rx)
}

/// Everything the listener has handled once it has handled everything sent to it so far.
async fn settled(
    actor: &ActorRef<ListenerMsg>,
    seen: &mut mpsc::UnboundedReceiver<ListenerMsg>,
) -> Vec<ListenerMsg> {
    within("the listener to answer", actor.ask(ListenerMsg::Ping))
        .await
        .unwrap();
    let mut events = Vec::new();
    while let Ok(event) = seen.try_recv() {
        events.push(event);
    }
    events
}

#[tokio::test]
async fn channel_subscribers_receive_only_their_event_type_in_publish_order() {
    let system = ActorSystem::new("events").unwrap();
    let stream = system.event_stream();
    let mut announcements = stream.subscribe::<Announcement>();
    let mut others = stream.subscribe::<Other>();

    stream.publish(Announcement(1));
    stream.publish(Other("a"));
    stream.publish(Announcement(2));
    stream.publish(Other("b"));
    stream.publish(Announcement(3));
    assert_eq!(
        drain(&mut announcements),
        [Announcement(1), Announcement(2), Announcement(3)]
    );
    assert_eq!(drain(&mut others), [Other("a"), Other("b")]);
    system.shutdown().await;
}

#[tokio::test]
async fn every_subscriber_of_a_type_gets_each_event() {
    let system = ActorSystem::new("events").unwrap();
    let stream = system.event_stream();
    let mut first = stream.subscribe::<Announcement>();
    let mut second = stream.subscribe::<Announcement>();
    assert_ne!(first.id(), second.id());

    stream.publish(Announcement(7));
    assert_eq!(next_event(&mut first).await, Announcement(7));
    assert_eq!(next_event(&mut second).await, Announcement(7));
    system.shutdown().await;
}

#[tokio::test]
async fn dropping_the_subscription_unsubscribes() {
    let system = ActorSystem::new("events").unwrap();
    let stream = system.event_stream();
    assert!(!stream.has_subscribers::<Announcement>());
    let dropped = stream.subscribe::<Announcement>();
    let mut kept = stream.subscribe::<Announcement>();

    drop(dropped);
    assert!(
        stream.has_subscribers::<Announcement>(),
        "the other one remains"
    );
    stream.publish(Announcement(1));
    assert_eq!(drain(&mut kept), [Announcement(1)]);
    drop(kept);
    assert!(!stream.has_subscribers::<Announcement>());
    stream.publish(Announcement(2)); // nobody listens; nothing breaks
    assert_eq!(system.dead_letters().count(), 0);
    system.shutdown().await;
}

#[tokio::test]
async fn an_actor_subscriber_receives_events_as_its_own_message_type() {
    let system = ActorSystem::new("events").unwrap();
    let (actor, mut seen) = listener(&system, "listener", MailboxOptions::Unbounded);
    system
        .event_stream()
        .subscribe_actor::<Announcement, _>(&actor);

    system.event_stream().publish(Announcement(1));
    system.event_stream().publish(Other("not subscribed"));
    system.event_stream().publish(Announcement(2));
    let events = settled(&actor, &mut seen).await;
    assert!(
        matches!(
            events.as_slice(),
            [
                ListenerMsg::Announcement(Announcement(1)),
                ListenerMsg::Announcement(Announcement(2))
            ]
        ),
        "{events:?}"
    );
    system.shutdown().await;
}

#[tokio::test]
async fn unsubscribe_ends_an_actor_subscription() {
    let system = ActorSystem::new("events").unwrap();
    let (actor, mut seen) = listener(&system, "listener", MailboxOptions::Unbounded);
    let id = system
        .event_stream()
        .subscribe_actor::<Announcement, _>(&actor);
    system.event_stream().publish(Announcement(1));

    system.event_stream().unsubscribe(id);
    assert!(!system.event_stream().has_subscribers::<Announcement>());
    system.event_stream().publish(Announcement(2));
    let events = settled(&actor, &mut seen).await;
    assert!(
        matches!(
            events.as_slice(),
            [ListenerMsg::Announcement(Announcement(1))]
        ),
        "{events:?}"
    );
    system.shutdown().await;
}

#[tokio::test]
async fn an_actor_subscriber_is_dropped_once_it_has_died_without_dead_letters() {
    let system = ActorSystem::new("events").unwrap();
    let (dead, _dead_seen) = listener(&system, "dead", MailboxOptions::Unbounded);
    let (alive, mut alive_seen) = listener(&system, "alive", MailboxOptions::Unbounded);
    let stream = system.event_stream();
    stream.subscribe_actor::<Announcement, _>(&dead);
    stream.subscribe_actor::<Announcement, _>(&alive);
    let mut dead_letters = stream.subscribe::<DeadLetter>();
    dead.stop();
    within("the subscriber to terminate", dead.terminated()).await;

    // The dead subscriber is removed when an event would have reached it (the event stream's
    // documented, Akka-like asynchronous clean-up) and its events are not dead letters.
    stream.publish(Announcement(1));
    stream.publish(Announcement(2));
    assert!(drain(&mut dead_letters).is_empty());
    assert_eq!(system.dead_letters().count(), 0);
    let events = settled(&alive, &mut alive_seen).await;
    assert_eq!(events.len(), 2, "the live subscriber still gets everything");
    alive.stop();
    within("the second subscriber to terminate", alive.terminated()).await;
    stream.publish(Announcement(3));
    assert!(
        !stream.has_subscribers::<Announcement>(),
        "both dead subscribers were dropped"
    );
    system.shutdown().await;
}

#[tokio::test]
async fn dead_letters_are_published_to_actor_subscribers() {
    let system = ActorSystem::new("events").unwrap();
    let (watcher, mut seen) = listener(&system, "dead-letter-office", MailboxOptions::Unbounded);
    system
        .event_stream()
        .subscribe_actor::<DeadLetter, _>(&watcher);
    let (gone, _) = listener(&system, "gone", MailboxOptions::Unbounded);
    gone.stop();
    within("the recipient to terminate", gone.terminated()).await;

    gone.tell_from(ListenerMsg::Announcement(Announcement(9)), watcher.path());
    let events = settled(&watcher, &mut seen).await;
    let [ListenerMsg::DeadLetter(dead)] = events.as_slice() else {
        panic!("expected one dead letter, got {events:?}");
    };
    assert_eq!(
        *dead,
        DeadLetter {
            recipient: gone.path().clone(),
            sender: Some(watcher.path().clone()),
            message_type: std::any::type_name::<ListenerMsg>(),
            reason: DeadLetterReason::RecipientStopped,
        }
    );
    system.shutdown().await;
}

#[tokio::test]
async fn a_dead_letter_subscriber_with_a_full_mailbox_does_not_feed_dead_letters_back() {
    let system = ActorSystem::new("events").unwrap();
    let (office, mut seen) = listener(&system, "office", MailboxOptions::bounded(1));
    system
        .event_stream()
        .subscribe_actor::<DeadLetter, _>(&office);
    let (mut gate, blocker) = gate();
    office.tell(ListenerMsg::Block(blocker));
    gate.entered().await;
    office.tell(ListenerMsg::Announcement(Announcement(0))); // fills the mailbox

    system.tell_path("/user/nobody", 1_u32);
    // One dead letter; the full subscriber's refusal is logged, not dead-lettered again.
    assert_eq!(system.dead_letters().count(), 1);
    gate.open();
    let first = within("the queued announcement", seen.recv()).await;
    assert!(
        matches!(first, Some(ListenerMsg::Announcement(Announcement(0)))),
        "{first:?}"
    );
    let rest = settled(&office, &mut seen).await;
    assert!(
        rest.is_empty(),
        "the dead letter was not delivered: {rest:?}"
    );
    system.shutdown().await;
}

#[tokio::test]
async fn each_system_has_its_own_event_stream() {
    let one = ActorSystem::new("one").unwrap();
    let two = ActorSystem::new("two").unwrap();
    let mut on_one = one.event_stream().subscribe::<Announcement>();
    let mut on_two = two.event_stream().subscribe::<Announcement>();

    one.event_stream().publish(Announcement(1));
    assert_eq!(drain(&mut on_one), [Announcement(1)]);
    assert_eq!(drain(&mut on_two), []);
    one.shutdown().await;
    two.shutdown().await;
}
